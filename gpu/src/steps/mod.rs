//! GPU implementations of the local-reconstruction steps. Each takes its inputs' device
//! columns (those an earlier GPU step of the batch kept, else one upload per batch shared by
//! every GPU step: [`crate::resident`]), runs its kernels on the worker's stream and
//! publishes the same products (same schemas, same values bit for bit) as the CPU step of
//! `quiver_reco::steps`. The intermediate products (the raw, calibrated and clustered
//! digis, the clusters, the hits with a host copy of their detIndex for the tracking steps'
//! checks: `HostDets`, the doublets) live on the device only, and their first host
//! consumer downloads them; the chain's results (tuples, fits, tracks, vertices) and small
//! tables are downloaded into pooled host buffers, a step's downloads queued together and
//! waited for once (`Run::queue`, `Run::take`).
//!
//! One file per step (as pixeltrack-standalone has one folder per module); what they share
//! (a batch on the device, checked launches, publishing, the fallback) is here.
//!
//! Split between host and device:
//! - `raw_to_digis`: FED framing (headers, trailers, their errors, word capacity) on the
//!   host; every 32-bit payload word decoded on the device; word errors compacted on the
//!   device and sorted back into word order on the host.
//! - `calibrate`: everything on the device, one thread per digi.
//! - `clusterize`: module runs and clustering on the device, one block per run slot; the
//!   module table on the host from the runs' first digis, modules and cluster counts, the
//!   run slots kept on the device beside it (a mirror).
//! - `cluster_charge_cut`: the runs checked on the host from the module table; their ends,
//!   the cut and the renumbering on the device, one block per run slot (per uploaded run
//!   after a table from elsewhere); the hit-module table on the host.
//! - `rechits`: hit offsets and runs from the module table on the host (each slot's
//!   clusters and first hit uploaded); the runs' ends, cluster sums, CPE, global position
//!   and `iphi` on the device, one block per run slot.
//! - `ca_doublets`, `ca_ntuplets`: see their files.
//! - `track_fit`: the tuples to fit (the CPU's selection) on the host; the Broken Line (or
//!   Riemann) fit on the device, one thread per fit; the results written into the
//!   `track_fits` columns on the host.
//! - `track_quality`: the checks on the host; the cells' tuple lists, the classification and
//!   the cleaners on the device, one block per event.
//! - `vertices`: the track selection on the host; clustering, fits, split and Σ pT² order
//!   on the device, one block per event; the products assembled on the host.
//!
//! Inputs that the CPU core rejects (bad conditions, pixels outside a module, inconsistent
//! module tables) and the rare layouts whose sequential semantics the device does not
//! reproduce (a module appearing in two runs of an event for the charge cut) are handed to
//! the CPU implementation of the same step, which reports its exact error or computes the
//! batch; the end-of-job report counts such batches.

use std::sync::Arc;

use arrow_array::types::{UInt16Type, UInt32Type};
use arrow_array::{ArrayRef, UInt16Array, UInt32Array};
use arrow_buffer::ArrowNativeType;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr,
    LaunchArgs, LaunchConfig, PushKernelArg,
};
use quiver_columnar::columns::{concat_ref, values};
use quiver_columnar::product::offsets_from_lengths;
use quiver_columnar::{Error, EventBatch, Product, ProductKey, Result, Step, StepConfig};
use quiver_formats::conditions::{CablingMap, CpeParams, GainCalibration, CABLING_MAX_SIZE};
use quiver_reco::capacity::records;
use quiver_reco::local::raw_to_digis::{error_type, frame_fed, DUMMY_DET_ID};
use quiver_reco::local::{
    CalibConfig, ChargeCutConfig, PixelError, RawToDigiConfig, INVALID_MODULE,
    MAX_CLUSTERS_PER_MODULE, MAX_NUM_CLUSTERS, MAX_NUM_MODULES,
};
use quiver_reco::steps::schema;
use quiver_reco::steps::types::*;

use crate::args::{self, KernelArgs};
use crate::device::{upload_condition, zeros, DeviceBuf, Gpu};
use crate::kernels::{check_launch, CType, KernelArg, ELEMENT_BLOCK};
use crate::resident::{columns_on_device, cuda, CudaColumns};
use crate::staging::Staging;
use crate::transfer::{BatchTransfers, TransferStats};

mod ca_doublets;
mod ca_ntuplets;
mod ca_ntuplets_dev;
mod ca_ntuplets_host;
mod calibrate;
mod charge_cut;
mod clusterize;
mod raw_to_digis;
mod rechits;
mod track_fit;
mod track_quality;
mod vertices;

pub(crate) use ca_doublets::CaDoubletsGpu;
pub use ca_doublets::{cell_offsets, doublet_products, prepare, DoubletBatch, DoubletProducts};
pub(crate) use ca_ntuplets::CaNtupletsGpu;
pub use ca_ntuplets_host::{capped_neighbors, ntuplet_event, ntuplet_event_listed};
pub(crate) use calibrate::CalibrateGpu;
pub(crate) use charge_cut::ChargeCutGpu;
pub use charge_cut::{beyond_kernel_slots, cut_runs, CutRuns};
use charge_cut::{run_ends, table_rows};
use clusterize::publish_modules;
pub(crate) use clusterize::ClusterizeGpu;
pub use clusterize::{cluster_tables, ModuleTable};
pub(crate) use raw_to_digis::RawToDigisGpu;
pub use raw_to_digis::{frame_batch, merge_errors, Framed};
pub(crate) use rechits::RecHitsGpu;
pub use rechits::{det_table, hit_runs, rechit_runs, HitRun, HitRuns};
pub(crate) use track_fit::TrackFitGpu;
pub use track_fit::{fit_batch, FitBatch};
pub(crate) use track_quality::TrackQualityGpu;
pub use track_quality::{quality_tables, QualityTables};
pub(crate) use vertices::VerticesGpu;
pub use vertices::{
    clustering_mode, vertex_batch, vertices_from_device, VertexBatch, VertexOutput,
};

pub(crate) fn derr(e: impl std::fmt::Display) -> Error {
    Error::data(format!("gpu: {e}"))
}

pub(crate) fn blocks(n: usize, per: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(per).max(1), 1, 1),
        block_dim: (per, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One batch on the device: its stream, CUDA events around the phases, byte counts, and
/// the page-locked staging its transfers go through ([`crate::staging`]).
pub(crate) struct Run {
    gpu: &'static Gpu,
    stream: Arc<CudaStream>,
    marks: Vec<CudaEvent>,
    t: BatchTransfers,
    staging: Option<Staging>,
    /// Whether the stream is known to be idle (after `finish`).
    idle: bool,
    /// Whether every queued download has landed (the stream synchronised since).
    landed: bool,
    /// Staging resets so far: a queued download is valid only in the epoch it was queued.
    epoch: u64,
    /// Events around each launch, when kernels are timed ([`crate::transfer::kernel_timing`]).
    launches: std::cell::RefCell<Vec<(&'static str, CudaEvent, CudaEvent)>>,
    /// Events around each copy across the bus that is timed ([`crate::transfer::kernel_timing`])
    /// or is a published product's values ([`Run::queue_of`]).
    copies: Vec<TimedCopy>,
}

/// A copy across the bus with CUDA events around it.
struct TimedCopy {
    to_device: bool,
    bytes: u64,
    /// The product type whose values it downloads, if any.
    product: Option<&'static str>,
    before: CudaEvent,
    after: CudaEvent,
}

/// What a step downloaded of each product it publishes: type, bytes, the copies' device
/// seconds ([`Run::finish`]; [`record_results`] puts them in the run summary).
pub(crate) type ResultCopies = Vec<(&'static str, u64, f64)>;

impl Run {
    pub(crate) fn start(gpu: &'static Gpu) -> Result<Run> {
        gpu.ctx.bind_to_thread().map_err(derr)?;
        let stream = gpu.stream().map_err(derr)?;
        let mut r = Run {
            gpu,
            stream,
            marks: Vec::with_capacity(4),
            t: BatchTransfers::default(),
            staging: Some(gpu.staging.take()),
            idle: false,
            landed: true,
            epoch: 0,
            launches: Default::default(),
            copies: Vec::new(),
        };
        r.mark()?;
        Ok(r)
    }
    /// Records the end of a phase (uploads, kernels, downloads).
    pub(crate) fn mark(&mut self) -> Result<()> {
        let e = self.event()?;
        self.marks.push(e);
        Ok(())
    }
    /// A CUDA event recorded now on the stream.
    fn event(&self) -> Result<CudaEvent> {
        record(self.gpu, &self.stream)
    }
    /// Waits for what is queued on the stream; the staging's regions are free again.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.stream.synchronize().map_err(derr)?;
        if let Some(s) = self.staging.as_mut() {
            s.reset(&self.gpu.staging);
        }
        self.landed = true;
        self.epoch += 1;
        Ok(())
    }
    /// Uploads a host slice into a pooled device buffer: copied into page-locked staging
    /// and sent asynchronously (the host slice may change right after).
    pub(crate) fn up<T: DeviceRepr>(&mut self, host: &[T]) -> Result<DeviceBuf> {
        let n = std::mem::size_of_val(host);
        let mut buf = self.gpu.buffer(&self.stream, n.max(1)).map_err(derr)?;
        if n > 0 {
            let staging = self.staging.as_mut().expect("present until the run ends");
            let region = staging.region(&self.gpu.staging, n).map_err(derr)?;
            // SAFETY: `T` is a plain device type (DeviceRepr): its bytes are its value.
            region.copy_from_slice(unsafe {
                std::slice::from_raw_parts(host.as_ptr().cast::<u8>(), n)
            });
            // Timed after the host's copy into the staging: the bus's time alone.
            let before = copy_event(self.gpu, &self.stream, None)?;
            let mut v = buf.view_mut::<u8>(n);
            let (dst, _record) = v.device_ptr_mut(&self.stream);
            // SAFETY: `region` is page-locked and stays untouched until the stream has
            // synchronised (`sync`, `down`, `finish` or the drop); `dst` holds n bytes.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(dst, region, self.stream.cu_stream())
            }
            .map_err(|e| derr(format!("upload of {n} bytes: {e}")))?;
            close_copy(
                self.gpu,
                &self.stream,
                &mut self.copies,
                before,
                true,
                n,
                None,
            )?;
        }
        self.t.h2d_bytes += n as u64;
        Ok(buf)
    }
    pub(crate) fn zeros<T: DeviceRepr>(&mut self, n: usize) -> Result<DeviceBuf> {
        zeros::<T>(self.gpu, &self.stream, n).map_err(derr)
    }
    pub(crate) fn out<T: DeviceRepr>(&mut self, n: usize) -> Result<DeviceBuf> {
        self.gpu
            .buffer(&self.stream, (n * std::mem::size_of::<T>()).max(1))
            .map_err(derr)
    }
    /// A private copy of `n` elements of a device column (for kernels that write in place
    /// into what another product holds); device to device, no bus crossing.
    fn copy<T: DeviceRepr>(&mut self, src: &DeviceBuf, n: usize) -> Result<DeviceBuf> {
        let mut dst = self.out::<T>(n)?;
        if n > 0 {
            let mut v = dst.view_mut::<T>(n);
            self.stream
                .memcpy_dtod(&src.view::<T>(n), &mut v)
                .map_err(derr)?;
        }
        Ok(dst)
    }

    /// Queues a download of `n` elements of `buf` into page-locked staging, without waiting:
    /// [`Run::take`] gives the values. Downloads queued together cost one wait for the
    /// stream (each synchronisation is a round trip that 16 workers contend for).
    pub(crate) fn queue<T: DeviceRepr + ArrowNativeType>(
        &mut self,
        buf: &DeviceBuf,
        n: usize,
    ) -> Result<Queued<T>> {
        self.queue_tagged(None, buf, n)
    }
    /// [`Run::queue`] for values of the product of type `product` that the step publishes:
    /// the copy is timed and counted for that product in the run summary.
    pub(crate) fn queue_of<T: DeviceRepr + ArrowNativeType>(
        &mut self,
        product: &'static str,
        buf: &DeviceBuf,
        n: usize,
    ) -> Result<Queued<T>> {
        self.queue_tagged(Some(product), buf, n)
    }
    fn queue_tagged<T: DeviceRepr + ArrowNativeType>(
        &mut self,
        product: Option<&'static str>,
        buf: &DeviceBuf,
        n: usize,
    ) -> Result<Queued<T>> {
        let bytes = n * std::mem::size_of::<T>();
        let mut at = 0usize;
        if bytes > 0 {
            let staging = self.staging.as_mut().expect("present until the run ends");
            let region = staging.region(&self.gpu.staging, bytes).map_err(derr)?;
            at = region.as_mut_ptr() as usize;
            let src = buf.view::<u8>(bytes);
            let (ptr, _record) = src.device_ptr(&self.stream);
            let before = copy_event(self.gpu, &self.stream, product)?;
            // SAFETY: `region` is page-locked, `bytes` long, and stays untouched until the
            // stream has synchronised (`take`); `ptr` holds at least `bytes` bytes.
            unsafe {
                cudarc::driver::result::memcpy_dtoh_async(
                    &mut *region,
                    ptr,
                    self.stream.cu_stream(),
                )
            }
            .map_err(|e| derr(format!("download of {bytes} bytes: {e}")))?;
            close_copy(
                self.gpu,
                &self.stream,
                &mut self.copies,
                before,
                false,
                bytes,
                product,
            )?;
            self.landed = false;
        }
        self.t.d2h_bytes += bytes as u64;
        Ok(Queued {
            at,
            n,
            epoch: self.epoch,
            _t: std::marker::PhantomData,
        })
    }
    /// The values of a queued download in a pooled host vector: waits for the stream once
    /// for everything queued before, then copies them out of the staging.
    pub(crate) fn take<T: DeviceRepr + ArrowNativeType>(
        &mut self,
        q: Queued<T>,
    ) -> Result<quiver_columnar::PoolVec<T>> {
        let mut v = quiver_columnar::pool::global().vec::<T>(q.n);
        if q.n == 0 {
            return Ok(v);
        }
        if q.epoch != self.epoch {
            return Err(derr(
                "a queued download was taken after its staging was reset (a bug in the step)",
            ));
        }
        if !self.landed {
            self.stream.synchronize().map_err(derr)?;
            self.landed = true;
        }
        let bytes = q.n * std::mem::size_of::<T>();
        // SAFETY: the region [at, at + bytes) was handed out in this epoch (its chunk is
        // still held) and the stream has synchronised since the copy into it was queued.
        let region = unsafe { std::slice::from_raw_parts(q.at as *const u8, bytes) };
        // SAFETY: the bytes of a plain device type (DeviceRepr) are its value. Regions start
        // 256 bytes apart from a page-aligned chunk, so `T` is aligned there (one copy
        // straight into the pooled vector, no zero fill first).
        let (pre, values, post) = unsafe { region.align_to::<T>() };
        if pre.is_empty() && post.is_empty() {
            v.extend_from_slice(values);
        } else {
            v.resize(q.n, T::default());
            // SAFETY: as above.
            unsafe {
                std::slice::from_raw_parts_mut(v.as_mut_slice().as_mut_ptr().cast::<u8>(), bytes)
            }
            .copy_from_slice(region);
        }
        Ok(v)
    }
    /// Downloads into a pooled host vector of `n` elements, through page-locked staging:
    /// waits for the stream (what is queued before, then the copy), so the values are
    /// there on return.
    pub(crate) fn down<T: DeviceRepr + ArrowNativeType>(
        &mut self,
        buf: &DeviceBuf,
        n: usize,
    ) -> Result<quiver_columnar::PoolVec<T>> {
        let q = self.queue::<T>(buf, n)?;
        self.take(q)
    }
    /// [`Run::down`] for values of the product of type `product` ([`Run::queue_of`]).
    pub(crate) fn down_of<T: DeviceRepr + ArrowNativeType>(
        &mut self,
        product: &'static str,
        buf: &DeviceBuf,
        n: usize,
    ) -> Result<quiver_columnar::PoolVec<T>> {
        let q = self.queue_of::<T>(product, buf, n)?;
        self.take(q)
    }
    /// Waits for the stream; adds the phase times and bytes to `stats`. `marks` must hold
    /// start, after uploads, after kernels, after downloads.
    /// Returns what was downloaded of each published product ([`Run::queue_of`]).
    pub(crate) fn finish(mut self, stats: &TransferStats) -> Result<ResultCopies> {
        self.mark()?;
        self.stream.synchronize().map_err(derr)?;
        self.idle = true;
        let ms = |a: usize, b: usize| -> Result<f64> {
            match (self.marks.get(a), self.marks.get(b)) {
                (Some(x), Some(y)) => Ok(x.elapsed_ms(y).map_err(derr)? as f64 * 1e-3),
                _ => Ok(0.0),
            }
        };
        self.t.h2d_seconds = ms(0, 1)?;
        self.t.kernel_seconds = ms(1, 2)?;
        self.t.d2h_seconds = ms(2, 3)?;
        stats.add(&self.t);
        for (name, a, b) in self.launches.borrow().iter() {
            stats.add_kernel(name, a.elapsed_ms(b).map_err(derr)? as f64 * 1e-3);
        }
        let mut results: ResultCopies = Vec::new();
        for c in &self.copies {
            let seconds = c.before.elapsed_ms(&c.after).map_err(derr)? as f64 * 1e-3;
            if crate::transfer::kernel_timing() {
                stats.add_copy(c.to_device, c.bytes, seconds);
            }
            if let Some(p) = c.product {
                match results.iter_mut().find(|r| r.0 == p) {
                    Some(r) => (r.1, r.2) = (r.1 + c.bytes, r.2 + seconds),
                    None => results.push((p, c.bytes, seconds)),
                }
            }
        }
        Ok(results)
    }
}

impl Drop for Run {
    /// Gives the staging back once nothing queued can still touch it (a run that ends early,
    /// on an error, waits for its stream first).
    fn drop(&mut self) {
        if let Some(s) = self.staging.take() {
            if !self.idle && self.stream.synchronize().is_err() {
                // The stream failed: its copies may not have ended; the memory is not reused.
                std::mem::forget(s);
                return;
            }
            self.gpu.staging.give(s);
        }
    }
}

/// A CUDA event recorded now on `stream`.
fn record(gpu: &Gpu, stream: &Arc<CudaStream>) -> Result<CudaEvent> {
    let e = gpu
        .ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(derr)?;
    e.record(stream).map_err(derr)?;
    Ok(e)
}

/// An event before a copy across the bus, when copies are timed
/// ([`crate::transfer::kernel_timing`]) or the copy is a product's values.
fn copy_event(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    product: Option<&'static str>,
) -> Result<Option<CudaEvent>> {
    (crate::transfer::kernel_timing() || product.is_some())
        .then(|| record(gpu, stream))
        .transpose()
}

/// Closes a timed copy (`before` from [`copy_event`]) into `copies`.
fn close_copy(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    copies: &mut Vec<TimedCopy>,
    before: Option<CudaEvent>,
    to_device: bool,
    bytes: usize,
    product: Option<&'static str>,
) -> Result<()> {
    if let Some(before) = before {
        copies.push(TimedCopy {
            to_device,
            bytes: bytes as u64,
            product,
            before,
            after: record(gpu, stream)?,
        });
    }
    Ok(())
}

/// Batch offsets (`n_events + 1`, u32, as the kernels read them) from a product's per-event
/// offsets (non-negative by construction).
pub(crate) fn batch_offsets(o: &arrow_buffer::OffsetBuffer<i32>) -> Vec<u32> {
    o.iter().map(|&v| v as u32).collect()
}

/// Puts a step's downloads of the products it published ([`Run::finish`]) in the run
/// summary's residency table: made on the device, one download per product and batch with
/// its bytes and the copies' device time.
pub(crate) fn record_results(batch: &EventBatch, results: &ResultCopies) -> Result<()> {
    for &(product, bytes, seconds) in results {
        batch.record_result_download(
            product,
            crate::resident::DEVICE_NAME,
            bytes as usize,
            std::time::Duration::from_secs_f64(seconds),
        )?;
    }
    Ok(())
}

/// A download queued on a run's stream ([`Run::queue`]): where it lands in the staging.
pub(crate) struct Queued<T> {
    at: usize,
    n: usize,
    epoch: u64,
    _t: std::marker::PhantomData<T>,
}

/// A kernel launch whose arguments, each passed with its parameter's name, are checked
/// against the kernel's source signature before it is submitted: a missing, misordered or
/// mistyped argument is an error naming the kernel and the argument, not silently wrong
/// products ([`crate::kernels::check_launch`]).
pub(crate) struct Launch<'a> {
    b: LaunchArgs<'a>,
    name: &'static str,
    args: Vec<(&'static str, String)>,
    run: &'a Run,
}

impl<'a> Launch<'a> {
    pub(crate) fn new(run: &'a Run, name: &'static str) -> Self {
        Launch {
            b: run.stream.launch_builder(run.gpu.function(name)),
            name,
            args: Vec::new(),
            run,
        }
    }
    /// The next argument, for the kernel's parameter `param`.
    pub(crate) fn arg<A: KernelArg>(&mut self, param: &'static str, a: A) -> &mut Self
    where
        LaunchArgs<'a>: PushKernelArg<A>,
    {
        self.args.push((param, A::c_type()));
        self.b.arg(a);
        self
    }
    pub(crate) fn launch(&mut self, cfg: LaunchConfig) -> Result<()> {
        check_launch(self.name, &self.args)?;
        let before = if crate::transfer::kernel_timing() {
            Some(self.run.event()?)
        } else {
            None
        };
        // SAFETY: the arguments match the kernel's parameters (checked above); every buffer
        // holds the elements the kernel indexes (sized by the caller from the same counts).
        unsafe { self.b.launch(cfg) }.map_err(derr)?;
        if let Some(a) = before {
            let b = self.run.event()?;
            self.run.launches.borrow_mut().push((self.name, a, b));
        }
        Ok(())
    }
}

/// The device side of [`crate::args`]: buffers are device views, pushed into cudarc's
/// launch builder as [`Launch::arg`] pushes them (no copy, no allocation beyond the names).
impl<'a> crate::args::KernelSink<'a> for Launch<'a> {
    type In<T: CType + 'a> = CudaView<'a, T>;
    type Out<T: CType + 'a> = CudaViewMut<'a, T>;
    fn input<T: CType + 'a>(&mut self, name: &'static str, v: &'a CudaView<'a, T>) {
        self.arg(name, v);
    }
    fn output<T: CType + 'a>(&mut self, name: &'static str, v: &'a mut CudaViewMut<'a, T>) {
        self.arg(name, v);
    }
    fn value<T: CType + DeviceRepr + 'a>(&mut self, name: &'static str, v: &'a T) {
        self.arg(name, v);
    }
}

/// Launches kernel `A::KERNEL` with its argument list ([`crate::args`]), checked against
/// its signature.
pub(crate) fn launch<'a, A: KernelArgs<'a, Launch<'a>>>(
    run: &'a Run,
    args: A,
    cfg: LaunchConfig,
) -> Result<()> {
    launch_as(run, A::KERNEL, args, cfg)
}

/// [`launch`] of kernel `kernel`, which takes `A`'s list (checked against its own signature).
pub(crate) fn launch_as<'a, A: KernelArgs<'a, Launch<'a>>>(
    run: &'a Run,
    kernel: &'static str,
    args: A,
    cfg: LaunchConfig,
) -> Result<()> {
    let mut l = Launch::new(run, kernel);
    args.push(&mut l);
    l.launch(cfg)
}

/// Values per tile and threads per block of the segmented scan ([`seg_scan`]).
pub(crate) const SEG_TILE: u32 = 4096;
const SEG_BLOCK: u32 = 256;

/// Per segment `e` (values `seg_off[e]..seg_off[e + 1]`; `seg_host` the same offsets on the
/// host): the exclusive prefix sums of `value` into `first` (which may be `value`'s buffer)
/// and the segment's sum into `total[e]`. Two launches over tiles of [`SEG_TILE`] values
/// (`sg_tile_sum`, `sg_tile_scan`), so that a batch's scan uses every SM rather than one
/// block per event (the measurements: docs/decisions/0033-gpu-kernels-all-sms.md).
pub(crate) fn seg_scan(
    run: &mut Run,
    value: &CudaView<u32>,
    seg_host: &[u32],
    seg_off: &CudaView<u32>,
    first: &mut CudaViewMut<u32>,
    total: &mut CudaViewMut<u32>,
) -> Result<()> {
    let n_seg = seg_host.len().saturating_sub(1);
    let longest = seg_host
        .windows(2)
        .map(|w| w[1].wrapping_sub(w[0]))
        .max()
        .unwrap_or(0);
    let tiles = longest.div_ceil(SEG_TILE).max(1);
    if n_seg == 0
        || seg_host.windows(2).any(|w| w[1] < w[0])
        || (tiles as u64) * (SEG_TILE as u64) > u32::MAX as u64
        || (tiles as u64) * (n_seg as u64) > i32::MAX as u64
    {
        return Err(derr(format!(
            "segmented scan: {n_seg} segments with offsets {:?}… cannot be scanned in 32-bit tiles",
            &seg_host[..seg_host.len().min(4)]
        )));
    }
    let n_tiles = n_seg * tiles as usize;
    let mut sums = run.out::<u32>(n_tiles)?;
    let cfg = LaunchConfig {
        grid_dim: (n_tiles as u32, 1, 1),
        block_dim: (SEG_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    {
        let mut vs = sums.view_mut::<u32>(n_tiles);
        let args = args::SgTileSum {
            value,
            seg_off,
            tiles: &tiles,
            tile: &SEG_TILE,
            tile_sum: &mut vs,
        };
        launch(run, args, cfg)?;
    }
    let vs = sums.view::<u32>(n_tiles);
    // Reborrowed: a view the launch holds must live exactly as long as the launch.
    let (mut first, mut total) = (first.slice_mut(..), total.slice_mut(..));
    let args = args::SgTileScan {
        value,
        seg_off,
        tiles: &tiles,
        tile: &SEG_TILE,
        tile_sum: &vs,
        first: &mut first,
        total: &mut total,
    };
    launch(run, args, cfg)
}

fn u16_array(v: quiver_columnar::PoolVec<u16>) -> ArrayRef {
    Arc::new(UInt16Array::new(v.into_scalar_buffer(), None))
}

pub(crate) use quiver_reco::steps::{publish, publish_overflows};

/// Device columns for a product of `type_name` with `rows` rows, in schema order.
pub(crate) fn device_columns(
    gpu: &'static Gpu,
    type_name: &str,
    rows: usize,
    cols: Vec<Arc<DeviceBuf>>,
) -> Result<Arc<dyn quiver_columnar::residency::DeviceData>> {
    Ok(Arc::new(CudaColumns::new(
        gpu,
        schema(type_name),
        rows,
        cols,
    )?))
}

/// The hits' rows and detIndex column on the host, without the rest of the hits (what the
/// tracking steps' host preparation reads of them: `quiver_reco::steps::HitDets`). From the
/// copy that the GPU `rechits` keeps beside its device-only hits, else from the host product
/// (made with one download if it lives only on a device), its columns checked as the CPU
/// steps check them.
pub(crate) struct HostDets {
    pub product: Arc<Product>,
    det: arrow_buffer::ScalarBuffer<u16>,
}

impl HostDets {
    pub(crate) fn get(batch: &EventBatch, key: &ProductKey) -> Result<Self> {
        let p = batch.get_resident(key)?;
        let copy = p
            .device_data()
            .and_then(|d| d.as_any().downcast_ref::<CudaColumns>())
            .and_then(|c| c.host_column("det_index"))
            .and_then(|a| a.as_any().downcast_ref::<UInt16Array>())
            .map(|a| a.values().clone());
        // The copy stands for the checks only with the canonical schema (the GPU `rechits`').
        if let Some(det) =
            copy.filter(|d| d.len() == p.num_rows() && p.schema().fields() == schema(HITS).fields())
        {
            return Ok(HostDets { product: p, det });
        }
        let p = batch.get(key)?;
        quiver_reco::steps::check_hit_columns(&p)?;
        let det = p
            .host()?
            .column_by_name("det_index")
            .and_then(|a| a.as_any().downcast_ref::<UInt16Array>())
            .map(|a| a.values().clone());
        let det = det.ok_or_else(|| Error::data("hits: no detIndex column of u16"))?;
        Ok(HostDets { product: p, det })
    }
    pub(crate) fn det(&self) -> &[u16] {
        &self.det
    }
    pub(crate) fn view(&self) -> Result<quiver_reco::steps::HitDets<'_>> {
        quiver_reco::steps::HitDets::new(&self.det, self.product.offsets())
    }
}

/// Hands the batch to the CPU implementation and counts it.
pub(crate) fn fallback(
    cpu: &dyn Step,
    stats: &TransferStats,
    batch: &mut EventBatch,
) -> Result<()> {
    stats.add_cpu_fallback();
    cpu.process(batch)
}

/// What every GPU step shares: the device, the CPU implementation, the counters.
pub(crate) struct Common {
    pub gpu: &'static Gpu,
    pub cpu: Box<dyn Step>,
    pub stats: TransferStats,
}

impl Common {
    /// The step's report at the end of a job; the device's free buffers are settled first
    /// ([`Gpu::settle`]: every step's end of job does it; the first one waits).
    pub(crate) fn report(&self) -> Option<String> {
        if let Err(e) = self.gpu.settle() {
            return Some(format!("{}\ngpu: {e}", self.stats.report()));
        }
        let p = self.gpu.pool.stats();
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        Some(format!(
            "{}\ngpu: device {} (stream sync: {:?}, wait: {:?}); device pool (all GPU steps): peak {:.1} MiB held, {:.1} MiB now, {} allocations, {:.1}% of {} requests reused; page-locked staging {:.1} MiB",
            self.stats.report(),
            self.gpu.description,
            self.gpu.sync,
            self.gpu.wait,
            mib(p.peak_bytes_held),
            mib(p.bytes_held),
            p.allocations,
            if p.requests > 0 { 100.0 * p.hits as f64 / p.requests as f64 } else { 0.0 },
            p.requests,
            mib(self.gpu.staging.bytes())
        ))
    }
}
