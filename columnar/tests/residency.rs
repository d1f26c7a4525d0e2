//! Products that live on a device, proven with a fake device on the host: the device copy
//! is taken with no transfer, the first host consumer downloads once, later ones share it,
//! and every transfer is recorded per product.

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_array::{Array, Float32Array, RecordBatch};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, SchemaRef};
use quiver_columnar::product::product_schema;
use quiver_columnar::residency::{Device, DeviceData, Placement, TrafficLog};
use quiver_columnar::{EventBatch, Product, ProductKey, Result};

/// "Device memory": the values kept in a separate Vec, as raw f32 bits, so that a host view
/// can only come from a download.
#[derive(Debug)]
struct FakeData {
    bits: Vec<u32>,
    schema: SchemaRef,
    downloads: Arc<AtomicUsize>,
    fail: bool,
}

impl DeviceData for FakeData {
    fn device(&self) -> &str {
        "fake:0"
    }
    fn nbytes(&self) -> usize {
        self.bits.len() * 4
    }
    fn download(&self) -> Result<RecordBatch> {
        self.downloads.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err(quiver_columnar::Error::data("fake:0: device lost"));
        }
        let v: Vec<f32> = self.bits.iter().map(|b| f32::from_bits(*b)).collect();
        // A schema without the product metadata, as a backend might build it.
        let plain = Arc::new(arrow_schema::Schema::new(self.schema.fields().clone()));
        Ok(RecordBatch::try_new(
            plain,
            vec![Arc::new(Float32Array::from(v))],
        )?)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct FakeDevice {
    downloads: Arc<AtomicUsize>,
}

impl Device for FakeDevice {
    fn name(&self) -> &str {
        "fake:0"
    }
    fn upload(&self, batch: &RecordBatch) -> Result<Arc<dyn DeviceData>> {
        let col = batch
            .column(0)
            .as_any()
            .downcast_ref::<Float32Array>()
            .expect("floats");
        Ok(Arc::new(FakeData {
            bits: col.values().iter().map(|v| v.to_bits()).collect(),
            schema: batch.schema(),
            downloads: self.downloads.clone(),
            fail: false,
        }))
    }
}

fn schema() -> SchemaRef {
    product_schema(
        "floats",
        1,
        vec![Field::new("value", DataType::Float32, false)],
    )
}

fn host_product(values: Vec<f32>, lengths: &[usize]) -> Product {
    let batch = RecordBatch::try_new(schema(), vec![Arc::new(Float32Array::from(values))]).unwrap();
    Product::from_lengths(batch, lengths.iter().copied()).unwrap()
}

fn key() -> ProductKey {
    ProductKey::new("floats", "gpu_step")
}

fn batch_with(log: &Arc<TrafficLog>) -> EventBatch {
    let mut b = EventBatch::new(10, 3);
    b.set_traffic(log.clone());
    b.set_allowed(&[key()]);
    b
}

#[test]
fn one_download_shared_by_every_host_consumer() {
    let downloads = Arc::new(AtomicUsize::new(0));
    let dev = FakeDevice {
        downloads: downloads.clone(),
    };
    let values = vec![1.5f32, -0.0, f32::MIN_POSITIVE, 7.25];
    let host = host_product(values.clone(), &[2, 0, 2]);
    let data = dev.upload(host.batch()).unwrap();
    let p = Product::on_device(schema(), OffsetBuffer::from_lengths([2, 0, 2]), 4, data).unwrap();
    assert_eq!(p.placement(), Placement::Device);
    assert_eq!(p.nbytes(), 4 * 4, "only the offsets are on the host");
    assert_eq!(p.device_nbytes(), 16);

    let log = Arc::new(TrafficLog::default());
    let mut b = batch_with(&log);
    b.put(p).unwrap();

    // A GPU consumer: the device copy, no transfer.
    let r = b.get_resident(&key()).unwrap();
    let d = r.device_data().expect("device copy");
    let fake = d
        .as_any()
        .downcast_ref::<FakeData>()
        .expect("the backend's own type");
    assert_eq!(fake.bits.len(), 4);
    assert_eq!(downloads.load(Ordering::SeqCst), 0);
    assert_eq!(r.placement(), Placement::Device);

    // Host consumers, from several threads: exactly one download between them.
    let b = Arc::new(b);
    let got: Vec<Vec<u32>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                s.spawn(move || {
                    let p = b.get(&key()).unwrap();
                    let c = p
                        .batch()
                        .column(0)
                        .as_any()
                        .downcast_ref::<Float32Array>()
                        .unwrap()
                        .clone();
                    c.values().iter().map(|v| v.to_bits()).collect()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(downloads.load(Ordering::SeqCst), 1);
    for g in &got {
        assert_eq!(
            g,
            &values.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "bit-identical host view"
        );
    }
    let p = b.get(&key()).unwrap();
    assert_eq!(p.placement(), Placement::Both);
    assert_eq!(
        p.batch().schema_ref(),
        &schema(),
        "the host view carries the product schema"
    );
    assert_eq!(p.event(2).num_rows(), 2);
    let with_ev = p.with_event_column(b.first_event()).unwrap();
    assert_eq!(with_ev.num_columns(), 2);

    let t = log.snapshot();
    let k = &t[&key()];
    assert_eq!(k.produced_on, "fake:0");
    assert_eq!(k.downloads.count, 1);
    assert_eq!(k.downloads.bytes, 16);
    assert_eq!(k.device_peak_bytes, 16);
    assert_eq!(k.uploads.count, 0);
    assert!(!log.is_host_only());
}

#[test]
fn host_products_never_touch_the_log() {
    let log = Arc::new(TrafficLog::default());
    let mut b = batch_with(&log);
    let p = host_product(vec![1.0, 2.0, 3.0], &[1, 1, 1]);
    let before = p.batch().column(0).to_data();
    b.put(p).unwrap();
    let got = b.get(&key()).unwrap();
    assert_eq!(got.placement(), Placement::Host);
    assert!(got.device_data().is_none());
    assert_eq!(got.batch().column(0).to_data(), before);
    assert!(log.snapshot().is_empty());
    assert!(log.is_host_only());
}

#[test]
fn upload_is_recorded_per_product() {
    let log = Arc::new(TrafficLog::default());
    let b = batch_with(&log);
    let k = ProductKey::new("floats", "cpu_step");
    b.record_upload(&k, 128, std::time::Duration::from_micros(3));
    b.record_upload(&k, 64, std::time::Duration::from_micros(2));
    let t = log.snapshot();
    assert_eq!(t[&k].uploads.count, 2);
    assert_eq!(t[&k].uploads.bytes, 192);
    assert_eq!(t[&k].uploads.time, std::time::Duration::from_micros(5));
}

#[test]
fn failed_download_is_an_error_naming_the_product_and_is_not_retried() {
    let downloads = Arc::new(AtomicUsize::new(0));
    let data = Arc::new(FakeData {
        bits: vec![0; 3],
        schema: schema(),
        downloads: downloads.clone(),
        fail: true,
    });
    let p = Product::on_device(schema(), OffsetBuffer::from_lengths([1, 1, 1]), 3, data).unwrap();
    let log = Arc::new(TrafficLog::default());
    let mut b = batch_with(&log);
    b.put(p).unwrap();
    for _ in 0..2 {
        let e = b.get(&key()).unwrap_err().to_string();
        assert!(
            e.contains("gpu_step:floats") && e.contains("device lost") && e.contains("fake:0"),
            "{e}"
        );
    }
    assert_eq!(downloads.load(Ordering::SeqCst), 1);
    assert_eq!(log.snapshot()[&key()].downloads.count, 0);
}

#[test]
fn inconsistent_device_data_is_refused() {
    let downloads = Arc::new(AtomicUsize::new(0));
    let data = Arc::new(FakeData {
        bits: vec![0; 3],
        schema: schema(),
        downloads: downloads.clone(),
        fail: false,
    });
    // Offsets say 4 rows, the device holds 3.
    let e = Product::on_device(
        schema(),
        OffsetBuffer::from_lengths([2, 2]),
        3,
        data.clone(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("floats") && e.to_string().contains("fake:0"),
        "{e}"
    );
    // A schema with no product name.
    let plain = Arc::new(arrow_schema::Schema::new(vec![Field::new(
        "value",
        DataType::Float32,
        false,
    )]));
    assert!(Product::on_device(plain, OffsetBuffer::from_lengths([3]), 3, data.clone()).is_err());
    // A download whose row count disagrees with the offsets.
    let short = Arc::new(FakeData {
        bits: vec![0; 2],
        schema: schema(),
        downloads,
        fail: false,
    });
    let p = Product::on_device(schema(), OffsetBuffer::from_lengths([3]), 3, short).unwrap();
    let e = p.host().unwrap_err().to_string();
    assert!(e.contains("2 rows") && e.contains("expected 3"), "{e}");
}

// ---- Through the executor: a "GPU" step publishes device-only products; two host
// consumers read them; the job downloads once per batch, reports it, and the host
// consumers' results equal those of the same chain without the device step.

use quiver_columnar::step::{InputSpec, Signature, Step, StepConfig, StepType};
use quiver_columnar::{executor, plan, Backend, JobContext, PlanSpec, Registry, RunOptions};

static JOB_DOWNLOADS: AtomicUsize = AtomicUsize::new(0);

struct ToFakeDevice {
    input: ProductKey,
}

impl Step for ToFakeDevice {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let p = batch.get(&self.input)?;
        let col = p
            .batch()
            .column(0)
            .as_any()
            .downcast_ref::<Float32Array>()
            .expect("floats");
        let data = FakeData {
            bits: col.values().iter().map(|v| v.to_bits()).collect(),
            schema: p.schema().clone(),
            downloads: Arc::new(AtomicUsize::new(0)),
            fail: false,
        };
        let rows = p.num_rows();
        batch.put(Product::on_device(
            p.schema().clone(),
            p.offsets().clone(),
            rows,
            Arc::new(Counting(data)),
        )?)
    }
}

/// Counts job-wide downloads.
#[derive(Debug)]
struct Counting(FakeData);
impl DeviceData for Counting {
    fn device(&self) -> &str {
        self.0.device()
    }
    fn nbytes(&self) -> usize {
        self.0.nbytes()
    }
    fn download(&self) -> Result<RecordBatch> {
        JOB_DOWNLOADS.fetch_add(1, Ordering::SeqCst);
        self.0.download()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

const CHAIN: &str = r#"
[[step]]
label = "numbers"
type = "random_floats"
count = 100
[[step]]
label = "dev"
type = "to_fake_device"
input = "numbers"
[[step]]
label = "squared"
type = "square"
input = "dev"
[[step]]
label = "squared_powi"
type = "square"
input = "dev"
method = "powi"
[[step]]
label = "check"
type = "compare"
a = "squared"
b = "squared_powi"
"#;

#[test]
fn executor_downloads_once_per_batch_and_reports_it() {
    let mut registry = Registry::with_builtin();
    registry.add(StepType {
        name: "to_fake_device",
        doc: "test: moves floats to a fake device",
        params: vec![],
        signature: Signature {
            inputs: vec![InputSpec::one("input", "floats", "values")],
            outputs: vec!["floats".into()],
        },
        backends: vec![Backend::Cpu],
        build: |cfg: &StepConfig| {
            Ok(Box::new(ToFakeDevice {
                input: cfg.input("input")?,
            }))
        },
    });
    let resolved = plan::validate(
        &PlanSpec::from_toml(CHAIN, "residency test").unwrap(),
        &registry,
    )
    .unwrap();
    let steps = resolved
        .build(&registry, JobContext::default().into())
        .unwrap();
    let opts = RunOptions {
        threads: 2,
        batch_size: 4,
        first_event: 0,
        events: Some(40),
        progress: false,
        cycle_input: false,
    };
    let before = JOB_DOWNLOADS.load(Ordering::SeqCst);
    let s = executor::run(&resolved, &steps, &opts).unwrap();
    let downloads = JOB_DOWNLOADS.load(Ordering::SeqCst) - before;
    assert_eq!(s.batches, 10);
    assert_eq!(
        downloads, 10,
        "one download per batch, shared by both host consumers"
    );
    let k = ProductKey::new("floats", "dev");
    let t = &s.traffic[&k];
    assert_eq!(t.produced_on, "fake:0");
    assert_eq!(t.downloads.count, 10);
    assert_eq!(t.downloads.bytes, 40 * 100 * 4);
    assert_eq!(t.device_peak_bytes, 4 * 100 * 4);
    assert_eq!(
        s.traffic.len(),
        1,
        "host products are not in the traffic table"
    );
    let text = s.render();
    assert!(
        text.contains("dev:floats") && text.contains("fake:0"),
        "{text}"
    );
    // The consumers' products are the same size as without the device step.
    let rows = |key: &str| {
        s.product_rows
            .iter()
            .find(|(k, _)| k.label == key)
            .map(|(_, r)| *r)
    };
    assert_eq!(rows("dev"), Some(4000));
    assert_eq!(rows("squared"), Some(4000));
}

/// A device that counts its uploads and has its own name.
struct CountingDevice {
    name: &'static str,
    uploads: AtomicUsize,
    downloads: Arc<AtomicUsize>,
}

impl Device for CountingDevice {
    fn name(&self) -> &str {
        self.name
    }
    fn upload(&self, batch: &RecordBatch) -> Result<Arc<dyn DeviceData>> {
        self.uploads.fetch_add(1, Ordering::SeqCst);
        FakeDevice {
            downloads: self.downloads.clone(),
        }
        .upload(batch)
    }
}

#[test]
fn host_product_uploaded_once_per_batch_for_every_gpu_consumer() {
    let log = Arc::new(TrafficLog::default());
    let dev = CountingDevice {
        name: "fake:0",
        uploads: AtomicUsize::new(0),
        downloads: Arc::new(AtomicUsize::new(0)),
    };
    let mut b = batch_with(&log);
    b.put(host_product(vec![1.0, 2.0, 3.0, 4.0], &[1, 2, 1]))
        .unwrap();
    // Three GPU steps of the batch take the product: one upload between them.
    let copies: Vec<_> = (0..3).map(|_| b.on_device(&key(), &dev).unwrap()).collect();
    assert_eq!(dev.uploads.load(Ordering::SeqCst), 1);
    assert!(
        copies.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])),
        "one shared device copy"
    );
    let t = log.snapshot();
    assert_eq!(t[&key()].uploads.count, 1);
    assert_eq!(t[&key()].uploads.bytes, 16);
    // The host product itself is unchanged and never downloaded.
    assert_eq!(b.get(&key()).unwrap().placement(), Placement::Host);
    assert_eq!(dev.downloads.load(Ordering::SeqCst), 0);

    // The next batch uploads again (device copies live as long as their batch).
    let mut b2 = batch_with(&log);
    b2.put(host_product(vec![5.0], &[1, 0, 0])).unwrap();
    b2.on_device(&key(), &dev).unwrap();
    assert_eq!(dev.uploads.load(Ordering::SeqCst), 2);
}

#[test]
fn device_product_taken_without_transfer_on_its_own_device_only() {
    let log = Arc::new(TrafficLog::default());
    let downloads = Arc::new(AtomicUsize::new(0));
    let made_on = FakeDevice {
        downloads: downloads.clone(),
    };
    let data = made_on
        .upload(host_product(vec![1.0, 2.0], &[1, 1, 0]).batch())
        .unwrap();
    let mut b = batch_with(&log);
    b.put(
        Product::on_device(
            schema(),
            OffsetBuffer::from_lengths([1, 1, 0]),
            2,
            data.clone(),
        )
        .unwrap(),
    )
    .unwrap();

    let same = CountingDevice {
        name: "fake:0",
        uploads: AtomicUsize::new(0),
        downloads: downloads.clone(),
    };
    assert!(Arc::ptr_eq(&b.on_device(&key(), &same).unwrap(), &data));
    assert_eq!(same.uploads.load(Ordering::SeqCst), 0);
    assert_eq!(downloads.load(Ordering::SeqCst), 0);

    // Another device: through the host, once (one download, one upload).
    let other = CountingDevice {
        name: "fake:1",
        uploads: AtomicUsize::new(0),
        downloads: downloads.clone(),
    };
    b.on_device(&key(), &other).unwrap();
    b.on_device(&key(), &other).unwrap();
    assert_eq!(other.uploads.load(Ordering::SeqCst), 1);
    assert_eq!(downloads.load(Ordering::SeqCst), 1);
    let t = log.snapshot();
    assert_eq!((t[&key()].downloads.count, t[&key()].uploads.count), (1, 1));
}

/// Some columns of a host product on the fake device (what a GPU step keeps for the next).
#[derive(Debug)]
struct Mirror;

impl DeviceData for Mirror {
    fn device(&self) -> &str {
        "fake:0"
    }
    fn nbytes(&self) -> usize {
        4
    }
    fn download(&self) -> Result<RecordBatch> {
        panic!("a mirror is never downloaded")
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn holds_every_column(&self) -> bool {
        false
    }
}

#[test]
fn a_mirror_stays_beside_its_host_product_and_other_device_consumers_get_an_upload() {
    let downloads = Arc::new(AtomicUsize::new(0));
    let dev = FakeDevice {
        downloads: downloads.clone(),
    };
    let log = Arc::new(TrafficLog::default());
    let mut b = batch_with(&log);
    b.put(host_product(vec![1.0, 2.0, 3.0], &[1, 1, 1]))
        .unwrap();
    b.attach_device("floats", Arc::new(Mirror)).unwrap();
    // Once only, and only to the step's own products.
    assert!(b
        .attach_device("floats", Arc::new(Mirror))
        .unwrap_err()
        .to_string()
        .contains("already has device data"));
    assert!(b.attach_device("ints", Arc::new(Mirror)).is_err());
    let p = b.get(&key()).unwrap();
    assert_eq!(p.placement(), Placement::Both);
    assert!(
        p.device_data().unwrap().as_any().is::<Mirror>(),
        "the step that knows it finds it"
    );
    assert_eq!(
        p.batch().num_rows(),
        3,
        "host consumers read the host product, no download"
    );
    // A GPU step that does not know the mirror gets the host product uploaded, once.
    let d = b.on_device(&key(), &dev).unwrap();
    assert!(d.as_any().is::<FakeData>());
    assert!(Arc::ptr_eq(&d, &b.on_device(&key(), &dev).unwrap()));
    assert_eq!(downloads.load(Ordering::SeqCst), 0);
    // A mirror cannot stand for a product that lives only on the device.
    let e = Product::on_device(
        schema(),
        OffsetBuffer::from_lengths([3]),
        3,
        Arc::new(Mirror),
    )
    .unwrap_err();
    assert!(e.to_string().contains("holds only some columns"), "{e}");
    // The step that made it on the device records its download for the residency table.
    b.record_result_download("floats", "fake:0", 12, std::time::Duration::from_micros(3))
        .unwrap();
    let t = &log.snapshot()[&key()];
    assert_eq!(
        (
            t.produced_on.as_str(),
            t.downloads.count,
            t.downloads.bytes,
            t.device_peak_bytes
        ),
        ("fake:0", 1, 12, 4)
    );
    assert!(
        b.record_result_download("ints", "fake:0", 1, std::time::Duration::ZERO)
            .is_err(),
        "not the step's product"
    );
}
