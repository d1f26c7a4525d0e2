//! Where a product's data lives: on the host, on an accelerator, or both.
//!
//! `quiver_columnar` knows no accelerator API. It defines two traits that a backend crate
//! (`quiver-gpu`) implements:
//!
//! - [`DeviceData`]: one product's columns held in device memory, able to produce the host
//!   view (an Arrow `RecordBatch`) by a download;
//! - [`Device`]: a device that can take a host batch up (an upload) and says its name.
//!
//! A [`crate::Product`] may then hold only device data. Its host view is created lazily, the
//! first time a host consumer asks for it ([`crate::EventBatch::get`]): exactly one download
//! per product, shared by every later host consumer. A GPU step that consumes the product
//! takes the device copy ([`crate::EventBatch::get_resident`]) with no transfer.
//!
//! Every transfer is recorded in a [`TrafficLog`] (per product: bytes, count, time), which
//! the run summary reports together with where each product was produced.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use arrow_array::RecordBatch;

use crate::error::Result;
use crate::product::ProductKey;

/// Where a product's data is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Placement {
    /// Host memory only (every CPU step's product).
    Host,
    /// Device memory only: no host consumer has asked for it yet.
    Device,
    /// Both: a device product whose host view has been downloaded (or a host product that
    /// was uploaded).
    Both,
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Placement::Host => "host",
            Placement::Device => "device",
            Placement::Both => "host+device",
        })
    }
}

/// One product's data in device memory. Implemented by the backend crate; the framework
/// only asks for its size, its device and a host copy.
pub trait DeviceData: Send + Sync + fmt::Debug {
    /// The device holding the data, e.g. `cuda:0`.
    fn device(&self) -> &str;
    /// Device bytes held.
    fn nbytes(&self) -> usize;
    /// Copies the data to the host as a batch with the product's schema (the one the
    /// product was created with). Called at most once per product by the framework.
    fn download(&self) -> Result<RecordBatch>;
    /// The concrete type, so that the backend can take its own data back.
    fn as_any(&self) -> &dyn Any;
    /// Whether this holds every column of the product (the default). A GPU step may keep
    /// device copies of only some columns beside the host product it published (a mirror,
    /// [`crate::EventBatch::attach_device`]) for a later GPU step that knows them; the
    /// framework never downloads such data, and uploads the host product for any other
    /// device consumer ([`crate::EventBatch::on_device`]).
    fn holds_every_column(&self) -> bool {
        true
    }
}

/// A device that can hold product data.
pub trait Device: Send + Sync {
    /// The device's name, e.g. `cuda:0`.
    fn name(&self) -> &str;
    /// Uploads a host batch; the result holds the same columns on the device.
    fn upload(&self, batch: &RecordBatch) -> Result<std::sync::Arc<dyn DeviceData>>;
}

/// Transfers in one direction: how many, how many bytes, how long.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    pub count: u64,
    pub bytes: u64,
    pub time: Duration,
}

impl Transfers {
    fn add(&mut self, bytes: u64, time: Duration) {
        self.count += 1;
        self.bytes += bytes;
        self.time += time;
    }
}

/// Traffic of one product over a job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProductTraffic {
    /// Where it was produced: `host`, or the device name (`cuda:0`).
    pub produced_on: String,
    /// Device → host.
    pub downloads: Transfers,
    /// Host → device.
    pub uploads: Transfers,
    /// Largest device footprint of one batch's product, bytes.
    pub device_peak_bytes: u64,
}

/// Per-product transfer records of a job, shared by all workers.
///
/// ```
/// use std::time::Duration;
/// use quiver_columnar::residency::TrafficLog;
/// use quiver_columnar::ProductKey;
/// let log = TrafficLog::default();
/// let key = ProductKey::new("hits", "rechits");
/// log.produced(&key, "cuda:0", 4096);
/// log.download(&key, 4096, Duration::from_micros(5));
/// let t = log.snapshot();
/// assert_eq!(t[&key].downloads.count, 1);
/// assert_eq!(t[&key].produced_on, "cuda:0");
/// ```
#[derive(Debug, Default)]
pub struct TrafficLog {
    entries: Mutex<BTreeMap<ProductKey, ProductTraffic>>,
}

impl TrafficLog {
    fn with<R>(&self, key: &ProductKey, f: impl FnOnce(&mut ProductTraffic) -> R) -> R {
        let mut m = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if !m.contains_key(key) {
            m.insert(key.clone(), ProductTraffic::default());
        }
        f(m.get_mut(key).expect("inserted above"))
    }
    /// Records that a batch's product was published on `place` (`host` or a device name),
    /// holding `device_bytes` of device memory (0 on the host).
    pub fn produced(&self, key: &ProductKey, place: &str, device_bytes: usize) {
        self.with(key, |t| {
            if t.produced_on.is_empty() {
                t.produced_on = place.to_string();
            }
            t.device_peak_bytes = t.device_peak_bytes.max(device_bytes as u64);
        })
    }
    /// Records one download of `bytes`.
    pub fn download(&self, key: &ProductKey, bytes: usize, time: Duration) {
        self.with(key, |t| t.downloads.add(bytes as u64, time))
    }
    /// Records one upload of `bytes`.
    pub fn upload(&self, key: &ProductKey, bytes: usize, time: Duration) {
        self.with(key, |t| t.uploads.add(bytes as u64, time))
    }
    /// A copy of the records so far.
    pub fn snapshot(&self) -> BTreeMap<ProductKey, ProductTraffic> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// True when nothing crossed the bus and nothing was produced on a device.
    pub fn is_host_only(&self) -> bool {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .all(|t| {
                t.downloads.count == 0
                    && t.uploads.count == 0
                    && (t.produced_on.is_empty() || t.produced_on == "host")
            })
    }
}
