//! GPU implementations of the local-reconstruction steps. Each takes its inputs' device
//! columns (those an earlier GPU step of the batch kept, else one upload per batch shared by
//! every GPU step: [`crate::resident`]), runs its kernels on the worker's stream, downloads
//! the results into pooled host buffers and publishes the same products (same schemas, same
//! values bit for bit) as the CPU step of `quiver_reco::steps`, with the device columns
//! attached for the next GPU step.
//!
//! Split between host and device:
//! - `raw_to_digis`: FED framing (headers, trailers, their errors, word capacity) on the
//!   host; every 32-bit payload word decoded on the device; word errors compacted on the
//!   device and sorted back into word order on the host.
//! - `calibrate`: everything on the device, one thread per digi.
//! - `clusterize`: module runs found on the host (a sequential scan); clustering on the
//!   device, one block per run.
//! - `cluster_charge_cut`: run spans found on the host; cut and renumbering on the device,
//!   one block per run; the hit-module table on the host.
//! - `rechits`: hit offsets and run spans on the host; cluster sums, CPE, global position and
//!   `iphi` on the device, one block per run.
//!
//! Inputs that the CPU core rejects (bad conditions, pixels outside a module, inconsistent
//! module tables) and the rare layouts whose sequential semantics the device does not
//! reproduce (a module appearing in two runs of an event for the charge cut) are handed to
//! the CPU implementation of the same step, which reports its exact error or computes the
//! batch; the end-of-job report counts such batches.

use std::sync::Arc;

use arrow_array::types::{UInt16Type, UInt32Type};
use arrow_array::{ArrayRef, Int32Array, RecordBatch, UInt16Array, UInt32Array};
use arrow_buffer::ArrowNativeType;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DeviceRepr, LaunchArgs, LaunchConfig, PushKernelArg};
use quiver_columnar::columns::{column, concat_ref, values};
use quiver_columnar::product::offsets_from_lengths;
use quiver_columnar::{Error, EventBatch, Product, ProductKey, Result, Step, StepConfig};
use quiver_reco::capacity::records;
use quiver_formats::conditions::{CablingMap, CpeParams, GainCalibration, CABLING_MAX_SIZE};
use quiver_formats::topology::{NUM_COLS_IN_MODULE, NUM_ROWS_IN_MODULE};
use quiver_reco::local::raw_to_digis::{error_type, frame_fed, DUMMY_DET_ID};
use quiver_reco::local::{
    CalibConfig, ChargeCutConfig, PixelError, RawToDigiConfig, INVALID_MODULE, MAX_CLUSTERS_PER_MODULE, MAX_NUM_CLUSTERS, MAX_NUM_MODULES,
};
use quiver_reco::steps::schema;
use quiver_reco::steps::types::*;

use crate::device::{download, upload, upload_condition, zeros, DeviceBuf, Gpu};
use crate::resident::{columns_on_device, cuda, CudaColumns};
use crate::kernels::{check_launch, KernelArg, ELEMENT_BLOCK, MODULE_BLOCK};
use crate::transfer::{BatchTransfers, TransferStats};

pub(crate) fn derr(e: impl std::fmt::Display) -> Error {
    Error::data(format!("gpu: {e}"))
}

pub(crate) fn blocks(n: usize, per: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: ((n as u32).div_ceil(per).max(1), 1, 1), block_dim: (per, 1, 1), shared_mem_bytes: 0 }
}

fn per_block(n_blocks: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (n_blocks as u32, 1, 1), block_dim: (MODULE_BLOCK, 1, 1), shared_mem_bytes: 0 }
}

/// One batch on the device: its stream, CUDA events around the phases, byte counts.
pub(crate) struct Run {
    gpu: &'static Gpu,
    stream: Arc<CudaStream>,
    marks: Vec<CudaEvent>,
    t: BatchTransfers,
}

impl Run {
    pub(crate) fn start(gpu: &'static Gpu) -> Result<Run> {
        gpu.ctx.bind_to_thread().map_err(derr)?;
        let stream = gpu.stream().map_err(derr)?;
        let mut r = Run { gpu, stream, marks: Vec::with_capacity(4), t: BatchTransfers::default() };
        r.mark()?;
        Ok(r)
    }
    /// Records the end of a phase (uploads, kernels, downloads).
    pub(crate) fn mark(&mut self) -> Result<()> {
        let e = self.gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(derr)?;
        e.record(&self.stream).map_err(derr)?;
        self.marks.push(e);
        Ok(())
    }
    /// Waits for what is queued on the stream (a download whose values size what follows).
    pub(crate) fn sync(&self) -> Result<()> {
        self.stream.synchronize().map_err(derr)
    }
    pub(crate) fn up<T: DeviceRepr>(&mut self, host: &[T]) -> Result<DeviceBuf> {
        upload(self.gpu, &self.stream, host, &mut self.t.h2d_bytes).map_err(derr)
    }
    pub(crate) fn zeros<T: DeviceRepr>(&mut self, n: usize) -> Result<DeviceBuf> {
        zeros::<T>(self.gpu, &self.stream, n).map_err(derr)
    }
    pub(crate) fn out<T: DeviceRepr>(&mut self, n: usize) -> Result<DeviceBuf> {
        self.gpu.buffer(&self.stream, (n * std::mem::size_of::<T>()).max(1)).map_err(derr)
    }
    /// A private copy of `n` elements of a device column (for kernels that write in place
    /// into what another product holds); device to device, no bus crossing.
    fn copy<T: DeviceRepr>(&mut self, src: &DeviceBuf, n: usize) -> Result<DeviceBuf> {
        let mut dst = self.out::<T>(n)?;
        if n > 0 {
            let mut v = dst.view_mut::<T>(n);
            self.stream.memcpy_dtod(&src.view::<T>(n), &mut v).map_err(derr)?;
        }
        Ok(dst)
    }

    /// Downloads into a pooled host vector of `n` elements (valid after `finish`).
    pub(crate) fn down<T: DeviceRepr + ArrowNativeType>(&mut self, buf: &DeviceBuf, n: usize) -> Result<quiver_columnar::PoolVec<T>> {
        let mut v = quiver_columnar::pool::global().vec::<T>(n);
        v.resize(n, T::default());
        download(&self.stream, buf, v.as_mut_slice(), &mut self.t.d2h_bytes).map_err(derr)?;
        Ok(v)
    }
    /// Waits for the stream; adds the phase times and bytes to `stats`. `marks` must hold
    /// start, after uploads, after kernels, after downloads.
    pub(crate) fn finish(mut self, stats: &TransferStats) -> Result<()> {
        self.mark()?;
        self.stream.synchronize().map_err(derr)?;
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
        Ok(())
    }
}

/// A kernel launch whose argument types are checked against the kernel's source signature
/// before it is submitted (a wrong order or type is an error naming the argument, not
/// silently wrong products).
pub(crate) struct Launch<'a> {
    b: LaunchArgs<'a>,
    name: &'static str,
    types: Vec<String>,
}

impl<'a> Launch<'a> {
    pub(crate) fn new(run: &'a Run, name: &'static str) -> Self {
        Launch { b: run.stream.launch_builder(run.gpu.function(name)), name, types: Vec::new() }
    }
    pub(crate) fn arg<A: KernelArg>(&mut self, a: A) -> &mut Self
    where
        LaunchArgs<'a>: PushKernelArg<A>,
    {
        self.types.push(A::c_type());
        self.b.arg(a);
        self
    }
    pub(crate) fn launch(&mut self, cfg: LaunchConfig) -> Result<()> {
        check_launch(self.name, &self.types).map_err(derr)?;
        // SAFETY: the arguments match the kernel's parameters (checked above); every buffer
        // holds the elements the kernel indexes (sized by the caller from the same counts).
        unsafe { self.b.launch(cfg) }.map_err(derr)?;
        Ok(())
    }
}

fn u16_array(v: quiver_columnar::PoolVec<u16>) -> ArrayRef {
    Arc::new(UInt16Array::new(v.into_scalar_buffer(), None))
}
fn u32_array(v: quiver_columnar::PoolVec<u32>) -> ArrayRef {
    Arc::new(UInt32Array::new(v.into_scalar_buffer(), None))
}
fn i32_array(v: quiver_columnar::PoolVec<i32>) -> ArrayRef {
    Arc::new(Int32Array::new(v.into_scalar_buffer(), None))
}

pub(crate) use quiver_reco::steps::{publish, publish_overflows};

/// Device columns for a product of `type_name` with `rows` rows, in schema order.
pub(crate) fn device_columns(gpu: &'static Gpu, type_name: &str, rows: usize, cols: Vec<Arc<DeviceBuf>>) -> Result<Arc<dyn quiver_columnar::residency::DeviceData>> {
    Ok(Arc::new(CudaColumns::new(gpu, schema(type_name), rows, cols)?))
}

/// Publishes a product whose host columns were downloaded, keeping its device columns for
/// the next GPU step of the batch.
pub(crate) fn publish_resident(
    batch: &mut EventBatch,
    type_name: &str,
    columns: Vec<ArrayRef>,
    offsets: arrow_buffer::OffsetBuffer<i32>,
    device: Arc<dyn quiver_columnar::residency::DeviceData>,
) -> Result<()> {
    let rb = RecordBatch::try_new(schema(type_name), columns)?;
    batch.put(Product::new(rb, offsets)?.with_device(device))
}

/// Hands the batch to the CPU implementation and counts it.
pub(crate) fn fallback(cpu: &dyn Step, stats: &TransferStats, batch: &mut EventBatch) -> Result<()> {
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
    pub(crate) fn report(&self) -> Option<String> {
        let p = self.gpu.pool.stats();
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        Some(format!(
            "{}\ngpu: device {}; device pool (all GPU steps): peak {:.1} MiB held, {:.1} MiB now, {} allocations, {:.1}% of {} requests reused",
            self.stats.report(),
            self.gpu.description,
            mib(p.peak_bytes_held),
            mib(p.bytes_held),
            p.allocations,
            if p.requests > 0 { 100.0 * p.hits as f64 / p.requests as f64 } else { 0.0 },
            p.requests
        ))
    }
}

// --- raw_to_digis ---------------------------------------------------------------------

/// The cabling map on the device, uploaded once per job.
struct DeviceCabling {
    link: CudaSlice<u32>,
    roc: CudaSlice<u32>,
    raw_id: CudaSlice<u32>,
    roc_in_det: CudaSlice<u32>,
    module_id: CudaSlice<u32>,
    bad_rocs: CudaSlice<u8>,
    mod_to_unp: CudaSlice<u8>,
    size: u32,
}

pub(crate) struct RawToDigisGpu {
    input: ProductKey,
    cfg: RawToDigiConfig,
    /// `None` when the cabling tables have the wrong size (the CPU step reports it).
    cabling: Option<DeviceCabling>,
    common: Common,
}

impl RawToDigisGpu {
    pub fn new(cfg: &StepConfig, common: Common, cabling: &CablingMap, rcfg: RawToDigiConfig) -> Result<Self> {
        let sizes_ok = [
            cabling.fed.len(),
            cabling.link.len(),
            cabling.roc.len(),
            cabling.raw_id.len(),
            cabling.roc_in_det.len(),
            cabling.module_id.len(),
            cabling.bad_rocs.len(),
            cabling.mod_to_unp.len(),
        ]
        .iter()
        .all(|&n| n == CABLING_MAX_SIZE);
        let cab = if sizes_ok {
            let mut bytes = 0u64;
            let g = common.gpu;
            let up32 = |v: &[u32], b: &mut u64| upload_condition(g, v, b);
            let e = |m: String| Error::plan(&cfg.label, format!("uploading the cabling map: {m}"));
            let c = DeviceCabling {
                link: up32(&cabling.link, &mut bytes).map_err(e)?,
                roc: up32(&cabling.roc, &mut bytes).map_err(e)?,
                raw_id: up32(&cabling.raw_id, &mut bytes).map_err(e)?,
                roc_in_det: up32(&cabling.roc_in_det, &mut bytes).map_err(e)?,
                module_id: up32(&cabling.module_id, &mut bytes).map_err(e)?,
                bad_rocs: upload_condition(g, &cabling.bad_rocs, &mut bytes).map_err(e)?,
                mod_to_unp: upload_condition(g, &cabling.mod_to_unp, &mut bytes).map_err(e)?,
                size: cabling.size,
            };
            common.stats.add_conditions(bytes);
            Some(c)
        } else {
            None
        };
        Ok(RawToDigisGpu { input: cfg.input("input")?, cfg: rcfg, cabling: cab, common })
    }
}

/// The host part of raw_to_digis for a batch: framing errors per event, the payload words of
/// all events in one array, FED segments, and words per event.
#[derive(Default, Debug, PartialEq)]
pub struct Framed {
    pub words: Vec<u32>,
    pub seg_start: Vec<u32>,
    pub seg_fed: Vec<u32>,
    pub words_per_event: Vec<usize>,
    pub framing_errors: Vec<Vec<PixelError>>,
}

/// Frames every FED of every event (`events[e]` = (fed id, bytes) in product order).
pub fn frame_batch<'a>(events: impl Iterator<Item = Vec<(u32, &'a [u8])>>, max_words: usize) -> Framed {
    let mut f = Framed::default();
    for feds in events {
        let mut errors = Vec::new();
        let mut total = 0usize;
        for (fed, bytes) in feds {
            if let Some((start, n32)) = frame_fed(fed, bytes, &mut errors) {
                if n32 > max_words.saturating_sub(total) {
                    errors.push(PixelError { fed, word: 0, raw_id: DUMMY_DET_ID, error_type: error_type::WORD_CAPACITY });
                    continue;
                }
                f.seg_start.push(f.words.len() as u32);
                f.seg_fed.push(fed);
                f.words.extend(bytes[start..start + 4 * n32].chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])));
                total += n32;
            }
        }
        f.words_per_event.push(total);
        f.framing_errors.push(errors);
    }
    f.seg_start.push(f.words.len() as u32);
    f
}

/// Each event's errors as the CPU core lists them: its framing errors, then the word errors
/// (word index, type, raw id; any order) in word order, with their FED and word.
pub fn merge_errors(framed: &Framed, mut word_errors: Vec<(u32, u8, u32)>) -> Vec<Vec<PixelError>> {
    word_errors.sort_unstable_by_key(|e| e.0);
    let mut errors = framed.framing_errors.clone();
    let (mut ev, mut ev_end, mut seg) = (0usize, framed.words_per_event.first().copied().unwrap_or(0), 0usize);
    for (w, t, raw_id) in word_errors {
        let w = w as usize;
        while w >= ev_end {
            ev += 1;
            ev_end += framed.words_per_event[ev];
        }
        while framed.seg_start[seg + 1] as usize <= w {
            seg += 1;
        }
        errors[ev].push(PixelError { fed: framed.seg_fed[seg], word: framed.words[w] as u64, raw_id, error_type: t });
    }
    errors
}

impl Step for RawToDigisGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        let Some(cab) = &self.cabling else { return fallback(c.cpu.as_ref(), &c.stats, batch) };
        let raw = batch.get(&self.input)?;
        let fed = values::<UInt32Type>(&raw, "fed")?;
        let data = quiver_columnar::columns::binary(&raw, "data")?;
        let framed = frame_batch((0..batch.n_events()).map(|e| raw.event_rows(e).map(|r| (fed[r], data.value(r))).collect()), self.cfg.max_words);
        let n = framed.words.len();
        if n == 0 || n > u32::MAX as usize {
            return c.cpu.process(batch); // nothing to decode (or too much for one launch)
        }
        let mut run = Run::start(c.gpu)?;
        let words = run.up(&framed.words)?;
        let seg_start = run.up(&framed.seg_start)?;
        let seg_fed = run.up(&framed.seg_fed)?;
        let n_seg = framed.seg_fed.len() as u32;
        let mut err_count = run.zeros::<u32>(1)?;
        let mut status = run.zeros::<u32>(1)?;
        let (mut xx, mut yy, mut adc, mut module) = (run.out::<u16>(n)?, run.out::<u16>(n)?, run.out::<u16>(n)?, run.out::<u16>(n)?);
        let (mut raw_id, mut pdigi) = (run.out::<u32>(n)?, run.out::<u32>(n)?);
        let (mut e_index, mut e_type, mut e_raw) = (run.out::<u32>(n)?, run.out::<u8>(n)?, run.out::<u32>(n)?);
        run.mark()?;
        {
            let (n32, use_q) = (n as u32, self.cfg.use_quality as u32);
            let (w, ss, sf) = (words.view::<u32>(n), seg_start.view::<u32>(framed.seg_start.len()), seg_fed.view::<u32>(framed.seg_fed.len()));
            let (mut vx, mut vy, mut va, mut vm) = (xx.view_mut::<u16>(n), yy.view_mut::<u16>(n), adc.view_mut::<u16>(n), module.view_mut::<u16>(n));
            let (mut vr, mut vp) = (raw_id.view_mut::<u32>(n), pdigi.view_mut::<u32>(n));
            let (mut ec, mut ei, mut et, mut er, mut st) =
                (err_count.view_mut::<u32>(1), e_index.view_mut::<u32>(n), e_type.view_mut::<u8>(n), e_raw.view_mut::<u32>(n), status.view_mut::<u32>(1));
            let mut b = Launch::new(&run, "raw_to_digis");
            b.arg(&w).arg(&n32).arg(&ss).arg(&sf).arg(&n_seg);
            b.arg(&cab.link).arg(&cab.roc).arg(&cab.raw_id).arg(&cab.roc_in_det).arg(&cab.module_id);
            b.arg(&cab.bad_rocs).arg(&cab.mod_to_unp).arg(&cab.size).arg(&use_q);
            b.arg(&mut vx).arg(&mut vy).arg(&mut va).arg(&mut vm).arg(&mut vr).arg(&mut vp);
            b.arg(&mut ec).arg(&mut ei).arg(&mut et).arg(&mut er).arg(&mut st);
            b.launch(blocks(n, ELEMENT_BLOCK))?;
        }
        run.mark()?;
        let st = run.down::<u32>(&status, 1)?;
        let cnt = run.down::<u32>(&err_count, 1)?;
        let cols = [run.down::<u16>(&xx, n)?, run.down::<u16>(&yy, n)?, run.down::<u16>(&adc, n)?, run.down::<u16>(&module, n)?];
        let (rid, pdg) = (run.down::<u32>(&raw_id, n)?, run.down::<u32>(&pdigi, n)?);
        run.stream.synchronize().map_err(derr)?;
        let n_err = (cnt[0] as usize).min(n);
        let (ei, et, er) = (run.down::<u32>(&e_index, n_err)?, run.down::<u8>(&e_type, n_err)?, run.down::<u32>(&e_raw, n_err)?);
        run.finish(&c.stats)?;
        if st[0] != 0 {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        let werr: Vec<(u32, u8, u32)> = (0..n_err).map(|k| (ei[k], et[k], er[k])).collect();
        let errors = merge_errors(&framed, werr);
        let [cx, cy, ca, cm] = cols;
        let digis = vec![u16_array(cx), u16_array(cy), u16_array(ca), u16_array(cm), u32_array(rid), u32_array(pdg)];
        let on_device = device_columns(c.gpu, DIGIS, n, [xx, yy, adc, module, raw_id, pdigi].into_iter().map(Arc::new).collect())?;
        publish_resident(batch, DIGIS, digis, offsets_from_lengths(framed.words_per_event.iter().copied())?, on_device)?;
        let all: Vec<&PixelError> = errors.iter().flatten().collect();
        let err_cols: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from_iter_values(all.iter().map(|e| e.fed))),
            Arc::new(arrow_array::UInt64Array::from_iter_values(all.iter().map(|e| e.word))),
            Arc::new(UInt32Array::from_iter_values(all.iter().map(|e| e.raw_id))),
            Arc::new(arrow_array::UInt8Array::from_iter_values(all.iter().map(|e| e.error_type))),
        ];
        publish(batch, DIGI_ERRORS, err_cols, errors.iter().map(Vec::len))?;
        publish_overflows(batch, errors.iter().map(|e| records::fed_words(e, self.cfg.max_words).into_iter().collect()).collect())
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}

// --- calibrate ------------------------------------------------------------------------

struct DeviceGains {
    first: CudaSlice<u32>,
    last: CudaSlice<u32>,
    cols: CudaSlice<i32>,
    data: CudaSlice<u8>,
    host: Arc<GainCalibration>,
}

pub(crate) struct CalibrateGpu {
    input: ProductKey,
    cfg: CalibConfig,
    gains: DeviceGains,
    common: Common,
}

impl CalibrateGpu {
    pub fn new(cfg: &StepConfig, common: Common, gains: Arc<GainCalibration>, ccfg: CalibConfig) -> Result<Self> {
        let e = |m: String| Error::plan(&cfg.label, format!("uploading the gains: {m}"));
        let mut bytes = 0u64;
        let g = common.gpu;
        let first: Vec<u32> = gains.range_and_cols.iter().map(|r| r.0).collect();
        let last: Vec<u32> = gains.range_and_cols.iter().map(|r| r.1).collect();
        let cols: Vec<i32> = gains.range_and_cols.iter().map(|r| r.2).collect();
        let dg = DeviceGains {
            first: upload_condition(g, &first, &mut bytes).map_err(e)?,
            last: upload_condition(g, &last, &mut bytes).map_err(e)?,
            cols: upload_condition(g, &cols, &mut bytes).map_err(e)?,
            data: upload_condition(g, &gains.data, &mut bytes).map_err(e)?,
            host: gains,
        };
        common.stats.add_conditions(bytes);
        Ok(CalibrateGpu { input: cfg.input("input")?, cfg: ccfg, gains: dg, common })
    }
}

impl Step for CalibrateGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        let d = batch.get(&self.input)?;
        // Host columns only for their count: the kernel reads the device copy.
        let module = values::<UInt16Type>(&d, "module")?;
        let n = module.len();
        let g = &self.gains.host;
        if g.rows_averaged == 0 {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        if n == 0 || n > u32::MAX as usize {
            return c.cpu.process(batch);
        }
        let mut run = Run::start(c.gpu)?;
        let on_dev = columns_on_device(batch, &self.input, c.gpu)?;
        let din = cuda(&on_dev);
        let (dm, dx, dy, da) = (din.column("module")?, din.column("row")?, din.column("col")?, din.column("adc")?);
        let mut status = run.zeros::<u32>(1)?;
        let (mut om, mut oa) = (run.out::<u16>(n)?, run.out::<u16>(n)?);
        run.mark()?;
        {
            let cf = &self.cfg;
            let (n32, n_ranges, data_len) = (n as u32, g.range_and_cols.len() as u32, g.data.len() as u64);
            let (is_run2, l1) = (cf.is_run2 as u32, cf.l1_modules as u32);
            let (vm, vx, vy, va) = (dm.view::<u16>(n), dx.view::<u16>(n), dy.view::<u16>(n), da.view::<u16>(n));
            let (mut vom, mut voa, mut vst) = (om.view_mut::<u16>(n), oa.view_mut::<u16>(n), status.view_mut::<u32>(1));
            let mut b = Launch::new(&run, "calibrate");
            b.arg(&vm).arg(&vx).arg(&vy).arg(&va).arg(&n32);
            b.arg(&self.gains.first).arg(&self.gains.last).arg(&self.gains.cols).arg(&n_ranges);
            b.arg(&self.gains.data).arg(&data_len).arg(&g.min_ped).arg(&g.min_gain).arg(&g.ped_precision).arg(&g.gain_precision);
            b.arg(&g.rows_averaged).arg(&g.dead_flag).arg(&g.noisy_flag);
            b.arg(&is_run2).arg(&l1).arg(&cf.vcal_to_electron_gain_l1).arg(&cf.vcal_to_electron_offset_l1);
            b.arg(&cf.vcal_to_electron_gain).arg(&cf.vcal_to_electron_offset).arg(&cf.min_electrons);
            b.arg(&mut vom).arg(&mut voa).arg(&mut vst);
            b.launch(blocks(n, ELEMENT_BLOCK))?;
        }
        run.mark()?;
        let st = run.down::<u32>(&status, 1)?;
        let (hm, ha) = (run.down::<u16>(&om, n)?, run.down::<u16>(&oa, n)?);
        run.finish(&c.stats)?;
        if st[0] != 0 {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        let cols = vec![column(&d, "row")?, column(&d, "col")?, u16_array(ha), u16_array(hm)];
        let on_device = device_columns(c.gpu, CALIBRATED_DIGIS, n, vec![dx.clone(), dy.clone(), Arc::new(oa), Arc::new(om)])?;
        publish_resident(batch, CALIBRATED_DIGIS, cols, d.offsets().clone(), on_device)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}

// --- clusterize -----------------------------------------------------------------------

/// Module runs of one event, as the CPU core finds them: (first, end) event-local digi
/// indices and the module; at most `MAX_NUM_MODULES` runs, each cut at `max_pix` digis.
/// `None` when a digi is outside what the CPU core accepts (it reports the error).
pub fn module_runs(module: &[u16], xx: &[u16], yy: &[u16], max_pix: usize) -> Option<Vec<(usize, usize, u16)>> {
    for i in 0..module.len() {
        let m = module[i];
        if m == INVALID_MODULE {
            continue;
        }
        if m as usize >= MAX_NUM_MODULES || xx[i] >= NUM_ROWS_IN_MODULE || yy[i] >= NUM_COLS_IN_MODULE {
            return None;
        }
    }
    let mut starts = Vec::new();
    let mut prev: Option<u16> = None;
    for (i, &m) in module.iter().enumerate() {
        if m == INVALID_MODULE {
            continue;
        }
        if prev != Some(m) && starts.len() < MAX_NUM_MODULES {
            starts.push(i);
        }
        prev = Some(m);
    }
    let n = module.len();
    Some(
        starts
            .into_iter()
            .map(|first| {
                let this = module[first];
                let end = (first..n).find(|&i| module[i] != INVALID_MODULE && module[i] != this).unwrap_or(n).min(first + max_pix);
                (first, end, this)
            })
            .collect(),
    )
}

fn publish_modules(batch: &mut EventBatch, type_name: &str, tables: &[ModuleTable]) -> Result<()> {
    let cols = vec![
        concat_ref::<UInt16Type, _>(tables.iter().map(|t| t.0.as_slice())),
        concat_ref::<UInt32Type, _>(tables.iter().map(|t| t.1.as_slice())),
        concat_ref::<UInt32Type, _>(tables.iter().map(|t| t.2.as_slice())),
    ];
    publish(batch, type_name, cols, tables.iter().map(|t| t.0.len()))
}

/// A per-event module table: module ids, first digi (event-local), clusters.
pub type ModuleTable = (Vec<u16>, Vec<u32>, Vec<u32>);

/// The `cluster_modules` tables from each event's runs and the clusters found per run (all
/// events' runs in order); a module seen in two runs of an event keeps its last run's count,
/// as in the CPU step.
pub fn cluster_tables(per_event: &[Vec<(usize, usize, u16)>], found: &[u32]) -> Vec<ModuleTable> {
    let mut k = 0usize;
    let mut tables = Vec::with_capacity(per_event.len());
    for runs in per_event {
        let mut counts = std::collections::HashMap::new();
        for (j, &(_, _, m)) in runs.iter().enumerate() {
            counts.insert(m, found[k + j]);
        }
        let ids: Vec<u16> = runs.iter().map(|r| r.2).collect();
        let firsts: Vec<u32> = runs.iter().map(|r| r.0 as u32).collect();
        let n_cl: Vec<u32> = runs.iter().map(|r| counts[&r.2]).collect();
        k += runs.len();
        tables.push((ids, firsts, n_cl));
    }
    tables
}

pub(crate) struct ClusterizeGpu {
    input: ProductKey,
    max_pix: usize,
    common: Common,
}

impl ClusterizeGpu {
    pub fn new(cfg: &StepConfig, common: Common, max_pix: usize) -> Result<Self> {
        Ok(ClusterizeGpu { input: cfg.input("input")?, max_pix, common })
    }
}

impl Step for ClusterizeGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        let d = batch.get(&self.input)?;
        let (row, col, module) = (values::<UInt16Type>(&d, "row")?, values::<UInt16Type>(&d, "col")?, values::<UInt16Type>(&d, "module")?);
        let n = module.len();
        if n == 0 || n > i32::MAX as usize {
            return c.cpu.process(batch);
        }
        let mut per_event = Vec::with_capacity(batch.n_events());
        let (mut rf, mut re, mut rb) = (Vec::new(), Vec::new(), Vec::new());
        for e in 0..batch.n_events() {
            let rows = d.event_rows(e);
            let base = rows.start;
            let Some(runs) = module_runs(&module[rows.clone()], &row[rows.clone()], &col[rows], self.max_pix) else {
                return fallback(c.cpu.as_ref(), &c.stats, batch);
            };
            for &(f, end, _) in &runs {
                rf.push((base + f) as u32);
                re.push((base + end) as u32);
                rb.push(base as u32);
            }
            per_event.push(runs);
        }
        let offsets: Vec<u32> = d.offsets().iter().map(|&o| o as u32).collect();
        let n_runs = rf.len();
        let mut run = Run::start(c.gpu)?;
        let on_dev = columns_on_device(batch, &self.input, c.gpu)?;
        let din = cuda(&on_dev);
        let (dm, dx, dy) = (din.column("module")?, din.column("row")?, din.column("col")?);
        let dof = run.up(&offsets)?;
        let (drf, dre, drb) = (run.up(&rf)?, run.up(&re)?, run.up(&rb)?);
        let (mut clus, mut bins, mut found) = (run.out::<i32>(n)?, run.out::<u32>(n)?, run.out::<u32>(n_runs.max(1))?);
        run.mark()?;
        {
            let (n32, n_ev) = (n as u32, batch.n_events() as u32);
            let mut vc = clus.view_mut::<i32>(n);
            let vo = dof.view::<u32>(offsets.len());
            let mut b = Launch::new(&run, "clus_init");
            b.arg(&mut vc).arg(&n32).arg(&vo).arg(&n_ev);
            b.launch(blocks(n, ELEMENT_BLOCK))?;
        }
        if n_runs > 0 {
            let (vm, vx, vy) = (dm.view::<u16>(n), dx.view::<u16>(n), dy.view::<u16>(n));
            let (vf, ve, vb) = (drf.view::<u32>(n_runs), dre.view::<u32>(n_runs), drb.view::<u32>(n_runs));
            let (mut vc, mut vbins, mut vfound) = (clus.view_mut::<i32>(n), bins.view_mut::<u32>(n), found.view_mut::<u32>(n_runs));
            let mut b = Launch::new(&run, "clusterize");
            b.arg(&vm).arg(&vx).arg(&vy).arg(&vf).arg(&ve).arg(&vb).arg(&mut vc).arg(&mut vbins).arg(&mut vfound);
            b.launch(per_block(n_runs))?; // one block per run, spans inside the batch
        }
        run.mark()?;
        let hc = run.down::<i32>(&clus, n)?;
        let hf = run.down::<u32>(&found, n_runs)?;
        run.finish(&c.stats)?;
        let tables = cluster_tables(&per_event, &hf);
        let cols = vec![column(&d, "module")?, i32_array(hc)];
        let on_device = device_columns(c.gpu, PIXEL_CLUSTERS, n, vec![dm.clone(), Arc::new(clus)])?;
        publish_resident(batch, PIXEL_CLUSTERS, cols, d.offsets().clone(), on_device)?;
        publish_modules(batch, CLUSTER_MODULES, &tables)?;
        let overflows = (0..batch.n_events()).map(|e| records::pixel_runs(&module[d.event_rows(e)], self.max_pix).into_iter().collect()).collect();
        publish_overflows(batch, overflows)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}

// --- cluster_charge_cut ---------------------------------------------------------------

pub(crate) struct ChargeCutGpu {
    digis: ProductKey,
    clusters: ProductKey,
    modules: ProductKey,
    cfg: ChargeCutConfig,
    common: Common,
}

impl ChargeCutGpu {
    pub fn new(cfg: &StepConfig, common: Common, ccfg: ChargeCutConfig) -> Result<Self> {
        Ok(ChargeCutGpu { digis: cfg.input("digis")?, clusters: cfg.input("clusters")?, modules: cfg.input("modules")?, cfg: ccfg, common })
    }
}

/// Whether a batch's module tables (`tables[e]`: module ids, first digis, clusters per
/// module) need more than the `cluster_charge_cut` and `rechits` kernels hold: they keep a
/// module's clusters in per-block arrays of `MAX_CLUSTERS_PER_MODULE` and an event's hits
/// in `MAX_NUM_CLUSTERS` slots, the reference's capacities. With `capacities = "sized"`
/// such a batch goes to the CPU's sized step instead of being cut (a CPU fallback in the
/// step's report).
///
/// ```
/// use quiver_gpu::steps::beyond_kernel_slots;
/// let (ids, firsts) = ([1u16, 2], [0u32, 10]);
/// assert!(!beyond_kernel_slots(&[(&ids, &firsts, &[1024, 7])]));
/// assert!(beyond_kernel_slots(&[(&ids, &firsts, &[1025, 7])]));          // one module
/// let many = vec![1000u32; 50];
/// let ids50: Vec<u16> = (0..50).collect();
/// assert!(beyond_kernel_slots(&[(&ids50, &[0u32; 50], &many)]));         // 50 000 hits
/// ```
pub fn beyond_kernel_slots(tables: &[(&[u16], &[u32], &[u32])]) -> bool {
    tables.iter().any(|(_, _, counts)| {
        counts.iter().any(|&c| c > MAX_CLUSTERS_PER_MODULE) || counts.iter().map(|&c| c as u64).sum::<u64>() > MAX_NUM_CLUSTERS as u64
    })
}

/// One event's module table rows: (module id, first digi, clusters).
fn table_rows(m: &Product, e: usize) -> Result<(&[u16], &[u32], &[u32])> {
    let rows = m.event_rows(e);
    Ok((
        &values::<UInt16Type>(m, "module")?[rows.clone()],
        &values::<UInt32Type>(m, "first_digi")?[rows.clone()],
        &values::<UInt32Type>(m, "clusters")?[rows],
    ))
}

/// The module runs of a batch that the charge-cut kernel processes (batch digi indices),
/// and what is needed to rebuild the `hit_modules` tables.
#[derive(Debug, Default)]
pub struct CutRuns {
    pub first: Vec<u32>,
    pub end: Vec<u32>,
    pub nclus: Vec<u32>,
    pub module: Vec<u16>,
    /// Per event: clusters per module id before the cut, modules of the launched runs, and
    /// the input table's module ids and first digis.
    events: Vec<CutEvent>,
}

/// Clusters per module id before the cut, modules of the launched runs, the table's module
/// ids and first digis.
type CutEvent = (Vec<u32>, Vec<u16>, Vec<u16>, Vec<u32>);

/// The runs the CPU core would process for each event (`rows[e]`: the event's digis in
/// the batch; `tables[e]`: its `cluster_modules` rows), with their spans; `None` where the
/// device path does not apply (the CPU reports an error, runs out of order, or a module
/// repeats: its runs would depend on each other).
pub fn cut_runs(module: &[u16], rows: &[std::ops::Range<usize>], tables: &[(&[u16], &[u32], &[u32])]) -> Option<CutRuns> {
    let mut out = CutRuns::default();
    for (r, &(ids, firsts, counts)) in rows.iter().zip(tables) {
        let (base, ne) = (r.start, r.len());
        let id = &module[r.clone()];
        let mut n_in_module = vec![0u32; MAX_NUM_MODULES];
        for (&mid, &cnt) in ids.iter().zip(counts) {
            *n_in_module.get_mut(mid as usize)? = cnt;
        }
        let mut seen = vec![false; MAX_NUM_MODULES];
        let mut prev_first: Option<usize> = None;
        let mut launched = Vec::new();
        for &first in firsts {
            let first = first as usize;
            if first >= ne || prev_first.is_some_and(|p| p >= first) {
                return None;
            }
            prev_first = Some(first);
            let this = id[first];
            if this == INVALID_MODULE {
                continue;
            }
            if this as usize >= MAX_NUM_MODULES || std::mem::replace(&mut seen[this as usize], true) {
                return None;
            }
            if n_in_module[this as usize] == 0 {
                continue;
            }
            let end = (first..ne).find(|&i| id[i] != INVALID_MODULE && id[i] != this).unwrap_or(ne);
            launched.push(this);
            out.first.push((base + first) as u32);
            out.end.push((base + end) as u32);
            out.nclus.push(n_in_module[this as usize]);
            out.module.push(this);
        }
        out.events.push((n_in_module, launched, ids.to_vec(), firsts.to_vec()));
    }
    Some(out)
}

impl CutRuns {
    /// The `hit_modules` tables given the clusters kept per launched run.
    pub fn tables(&self, kept: &[u32]) -> Vec<ModuleTable> {
        let mut k = 0usize;
        let mut tables = Vec::with_capacity(self.events.len());
        for (n_in_module, launched, ids, firsts) in &self.events {
            let mut n_in_module = n_in_module.clone();
            for &this in launched {
                n_in_module[this as usize] = kept[k];
                k += 1;
            }
            let counts = ids.iter().map(|&mid| n_in_module[mid as usize]).collect();
            tables.push((ids.clone(), firsts.clone(), counts));
        }
        tables
    }
}

impl Step for ChargeCutGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        let (d, cl, m) = (batch.get(&self.digis)?, batch.get(&self.clusters)?, batch.get(&self.modules)?);
        let module = values::<UInt16Type>(&d, "module")?;
        let n = module.len();
        if cl.offsets() != d.offsets() || n == 0 || n > i32::MAX as usize {
            return c.cpu.process(batch);
        }
        let mut rows = Vec::with_capacity(batch.n_events());
        let mut tables = Vec::with_capacity(batch.n_events());
        for e in 0..batch.n_events() {
            rows.push(d.event_rows(e));
            tables.push(table_rows(&m, e)?);
        }
        let sized = self.cfg.max_clusters_per_module > MAX_CLUSTERS_PER_MODULE;
        if sized && beyond_kernel_slots(&tables) {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        let Some(plan) = cut_runs(module, &rows, &tables) else { return fallback(c.cpu.as_ref(), &c.stats, batch) };
        let (rf, re, rn, rm) = (&plan.first, &plan.end, &plan.nclus, &plan.module);
        let n_runs = rf.len();
        let mut run = Run::start(c.gpu)?;
        let (dig_dev, cl_dev) = (columns_on_device(batch, &self.digis, c.gpu)?, columns_on_device(batch, &self.clusters, c.gpu)?);
        // The cut renumbers in place: private copies, the inputs' device columns stay intact.
        let (mut dm, mut dc) = (run.copy::<u16>(cuda(&dig_dev).column("module")?, n)?, run.copy::<i32>(cuda(&cl_dev).column("cluster")?, n)?);
        let da = cuda(&dig_dev).column("charge")?;
        let (drf, dre, drn, drm) = (run.up(rf)?, run.up(re)?, run.up(rn)?, run.up(rm)?);
        let mut ncl = run.out::<u32>(n_runs.max(1))?;
        run.mark()?;
        if n_runs > 0 {
            let cf = &self.cfg;
            let (mx, l1) = (cf.max_clusters_per_module, cf.l1_modules as u32);
            let (mut vm, mut vc, va) = (dm.view_mut::<u16>(n), dc.view_mut::<i32>(n), da.view::<u16>(n));
            let (vf, ve, vn, vmod) = (drf.view::<u32>(n_runs), dre.view::<u32>(n_runs), drn.view::<u32>(n_runs), drm.view::<u16>(n_runs));
            let mut vncl = ncl.view_mut::<u32>(n_runs);
            let mut b = Launch::new(&run, "charge_cut");
            b.arg(&mut vm).arg(&mut vc).arg(&va).arg(&vf).arg(&ve).arg(&vn).arg(&vmod);
            b.arg(&mx).arg(&l1).arg(&cf.min_charge_l1).arg(&cf.min_charge).arg(&mut vncl);
            b.launch(per_block(n_runs))?; // one block per run, disjoint spans
        }
        run.mark()?;
        let (hm, hc) = (run.down::<u16>(&dm, n)?, run.down::<i32>(&dc, n)?);
        let hn = run.down::<u32>(&ncl, n_runs)?;
        run.finish(&c.stats)?;
        // As the CPU step: a capped module's count is the clusters kept, never above the cap.
        let cap = self.cfg.max_clusters_per_module;
        let tables: Vec<ModuleTable> = plan.tables(&hn).into_iter().map(|(i, f, n)| (i, f, n.into_iter().map(|c| c.min(cap)).collect())).collect();
        let overflows = (0..batch.n_events())
            .map(|e| Ok(records::cluster_counts(table_rows(&m, e)?.2, cap).into_iter().collect()))
            .collect::<Result<Vec<_>>>()?;
        let cols = vec![u16_array(hm), i32_array(hc)];
        let on_device = device_columns(c.gpu, CLUSTERED_DIGIS, n, vec![Arc::new(dm), Arc::new(dc)])?;
        publish_resident(batch, CLUSTERED_DIGIS, cols, d.offsets().clone(), on_device)?;
        publish_modules(batch, HIT_MODULES, &tables)?;
        publish_overflows(batch, overflows)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}

// --- rechits --------------------------------------------------------------------------

/// The per-module CPE parameters as `DET_STRIDE` (23) floats per module, the layout the
/// `rechits` kernel reads: shift x/y, charge width x/y, x0, y0, z0, sx[3], sy[3], the first
/// six rotation entries, px, py, pz, and 1.0 for barrel modules.
pub fn det_table(cpe: &CpeParams) -> Vec<f32> {
    let mut t = Vec::with_capacity(cpe.det.len() * 23);
    for d in &cpe.det {
        t.extend_from_slice(&[d.shift_x, d.shift_y, d.charge_width_x, d.charge_width_y, d.x0, d.y0, d.z0]);
        t.extend_from_slice(&d.sx);
        t.extend_from_slice(&d.sy);
        t.extend_from_slice(&d.frame.r[..6]);
        t.extend_from_slice(&[d.frame.px, d.frame.py, d.frame.pz, if d.is_barrel { 1.0 } else { 0.0 }]);
    }
    t
}

/// One module run of an event for the `rechits` kernel: (first, end) event-local digis,
/// clusters, module, first hit (event-local).
pub type HitRun = (usize, usize, u32, u32, u32);

/// The runs the CPU core would process for one event and its hit count, from the module
/// table (`module_start`, `module_id`, clusters per module id), or `None` where the device
/// path does not apply (the CPU reports an error, or a module repeats).
pub fn hit_runs(module: &[u16], module_start: &[u32], module_id: &[u32], n_in_module: &[u32], n_det: usize) -> Option<(Vec<HitRun>, u32)> {
    let cms = quiver_reco::local::charge_cut::hits_module_start(n_in_module, MAX_CLUSTERS_PER_MODULE, MAX_NUM_CLUSTERS);
    if cms.windows(2).any(|w| w[1] < w[0]) {
        return None;
    }
    let n = module.len();
    let mut seen = vec![false; MAX_NUM_MODULES];
    let mut runs = Vec::new();
    for (run, &me) in module_id.iter().enumerate() {
        let me = me as usize;
        if me >= MAX_NUM_MODULES || me >= n_det {
            return None;
        }
        let slots = cms[me + 1] - cms[me];
        let nclus = n_in_module[me].min(slots);
        if nclus == 0 {
            continue;
        }
        if std::mem::replace(&mut seen[me], true) {
            return None; // two runs would write the same hit slots
        }
        let first = (module_start[1 + run] as usize).min(n);
        let end = (first..n).find(|&i| module[i] != INVALID_MODULE && module[i] != me as u16).unwrap_or(n);
        runs.push((first, end, nclus, me as u32, cms[me]));
    }
    Some((runs, cms[MAX_NUM_MODULES]))
}

/// The module runs of a batch that the `rechits` kernel processes (batch digi indices,
/// batch hit indices), the beam spot per run, and the hits per event.
#[derive(Debug, Default)]
pub struct HitRuns {
    pub first: Vec<u32>,
    pub end: Vec<u32>,
    pub nclus: Vec<u32>,
    pub module: Vec<u32>,
    pub hit: Vec<u32>,
    /// x, y, z per run.
    pub beam: Vec<f32>,
    pub hits_per_event: Vec<usize>,
}

/// [`hit_runs`] for every event of a batch (`rows[e]`: its digis, `tables[e]`: its
/// `hit_modules` rows, `beam[e]`: its beam spot x, y, z); `None` where the device path does
/// not apply.
pub fn rechit_runs(
    module: &[u16],
    rows: &[std::ops::Range<usize>],
    tables: &[(&[u16], &[u32], &[u32])],
    beam: &[[f32; 3]],
    n_det: usize,
) -> Option<HitRuns> {
    let mut out = HitRuns::default();
    let mut hit_base = 0u32;
    for ((r, &(ids, firsts, counts)), bs) in rows.iter().zip(tables).zip(beam) {
        let mut n_in_module = vec![0u32; MAX_NUM_MODULES];
        for (&mid, &cnt) in ids.iter().zip(counts) {
            *n_in_module.get_mut(mid as usize)? = cnt;
        }
        let mut module_start = Vec::with_capacity(firsts.len() + 1);
        module_start.push(firsts.len() as u32);
        module_start.extend_from_slice(firsts);
        let module_id: Vec<u32> = ids.iter().map(|&x| x as u32).collect();
        let (runs, n_hits) = hit_runs(&module[r.clone()], &module_start, &module_id, &n_in_module, n_det)?;
        for (first, end, nclus, me, h) in runs {
            out.first.push((r.start + first) as u32);
            out.end.push((r.start + end) as u32);
            out.nclus.push(nclus);
            out.module.push(me);
            out.hit.push(hit_base + h);
            out.beam.extend_from_slice(bs);
        }
        out.hits_per_event.push(n_hits as usize);
        hit_base += n_hits;
    }
    Some(out)
}

pub(crate) struct RecHitsGpu {
    digis: ProductKey,
    clusters: ProductKey,
    modules: ProductKey,
    beamspot: ProductKey,
    cpe: Arc<CpeParams>,
    det: CudaSlice<f32>,
    /// `capacities = "sized"`: batches beyond the kernel's slots go to the CPU's sized step.
    sized: bool,
    common: Common,
}

impl RecHitsGpu {
    pub fn new(cfg: &StepConfig, common: Common, cpe: Arc<CpeParams>) -> Result<Self> {
        let mut bytes = 0u64;
        let det = upload_condition(common.gpu, &det_table(&cpe), &mut bytes)
            .map_err(|m| Error::plan(&cfg.label, format!("uploading the CPE parameters: {m}")))?;
        common.stats.add_conditions(bytes);
        Ok(RecHitsGpu {
            digis: cfg.input("digis")?,
            clusters: cfg.input("clusters")?,
            modules: cfg.input("modules")?,
            beamspot: cfg.input("beamspot")?,
            cpe,
            det,
            sized: quiver_reco::capacity::Capacities::of(cfg)?.sized(),
            common,
        })
    }
}

impl Step for RecHitsGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        let (d, cl, m, b) = (batch.get(&self.digis)?, batch.get(&self.clusters)?, batch.get(&self.modules)?, batch.get(&self.beamspot)?);
        let module = values::<UInt16Type>(&cl, "module")?;
        let bs = |name: &str| values::<arrow_array::types::Float32Type>(&b, name);
        let (bx, by, bz) = (bs("x")?, bs("y")?, bs("z")?);
        let n = module.len();
        if cl.offsets() != d.offsets() || n == 0 || n > i32::MAX as usize {
            return c.cpu.process(batch);
        }
        let mut rows = Vec::with_capacity(batch.n_events());
        let mut tables = Vec::with_capacity(batch.n_events());
        let mut beam = Vec::with_capacity(batch.n_events());
        for e in 0..batch.n_events() {
            rows.push(d.event_rows(e));
            tables.push(table_rows(&m, e)?);
            let r0 = b.event_rows(e).start;
            beam.push([bx[r0], by[r0], bz[r0]]);
        }
        if self.sized && beyond_kernel_slots(&tables) {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        let Some(plan) = rechit_runs(module, &rows, &tables, &beam, self.cpe.det.len()) else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        let (rf, re, rn, rme, rh, rbs) = (&plan.first, &plan.end, &plan.nclus, &plan.module, &plan.hit, &plan.beam);
        let hits_per_event = plan.hits_per_event.clone();
        let hit_base: u32 = plan.hits_per_event.iter().sum::<usize>() as u32;
        let (nh, n_runs) = (hit_base as usize, rf.len());
        if nh == 0 || n_runs == 0 {
            return c.cpu.process(batch);
        }
        let mut run = Run::start(c.gpu)?;
        let (dig_dev, cl_dev) = (columns_on_device(batch, &self.digis, c.gpu)?, columns_on_device(batch, &self.clusters, c.gpu)?);
        let (dg, cd) = (cuda(&dig_dev), cuda(&cl_dev));
        let (dm, dc) = (cd.column("module")?, cd.column("cluster")?);
        let (dx, dy, da) = (dg.column("row")?, dg.column("col")?, dg.column("charge")?);
        let (drf, dre, drn, drme, drh, drbs) = (run.up(rf)?, run.up(re)?, run.up(rn)?, run.up(rme)?, run.up(rh)?, run.up(rbs)?);
        let mut status = run.zeros::<u32>(1)?;
        let mut f32s: Vec<DeviceBuf> = (0..8).map(|_| run.zeros::<f32>(nh)).collect::<Result<_>>()?;
        let (mut iphi, mut chg, mut sx, mut sy, mut det_index) =
            (run.zeros::<i16>(nh)?, run.zeros::<i32>(nh)?, run.zeros::<i16>(nh)?, run.zeros::<i16>(nh)?, run.zeros::<u16>(nh)?);
        run.mark()?;
        {
            let com = &self.cpe.common;
            let (vm, vc, vx, vy, va) = (dm.view::<u16>(n), dc.view::<i32>(n), dx.view::<u16>(n), dy.view::<u16>(n), da.view::<u16>(n));
            let (vf, ve, vn, vme, vh, vbs) =
                (drf.view::<u32>(n_runs), dre.view::<u32>(n_runs), drn.view::<u32>(n_runs), drme.view::<u32>(n_runs), drh.view::<u32>(n_runs), drbs.view::<f32>(3 * n_runs));
            let mut outs: Vec<_> = f32s.iter_mut().map(|b| b.view_mut::<f32>(nh)).collect();
            let (mut vi, mut vq, mut vsx, mut vsy, mut vd, mut vst) =
                (iphi.view_mut::<i16>(nh), chg.view_mut::<i32>(nh), sx.view_mut::<i16>(nh), sy.view_mut::<i16>(nh), det_index.view_mut::<u16>(nh), status.view_mut::<u32>(1));
            let mut bld = Launch::new(&run, "rechits");
            bld.arg(&vm).arg(&vc).arg(&vx).arg(&vy).arg(&va);
            bld.arg(&vf).arg(&ve).arg(&vn).arg(&vme).arg(&vh).arg(&vbs).arg(&self.det);
            bld.arg(&com.thickness_b).arg(&com.thickness_e).arg(&com.pitch_x).arg(&com.pitch_y);
            for o in outs.iter_mut() {
                bld.arg(o);
            }
            bld.arg(&mut vi).arg(&mut vq).arg(&mut vsx).arg(&mut vsy).arg(&mut vd).arg(&mut vst);
            bld.launch(per_block(n_runs))?; // one block per run; hit slots of runs are disjoint
        }
        run.mark()?;
        let st = run.down::<u32>(&status, 1)?;
        let mut fl = Vec::with_capacity(8);
        for buf in &f32s {
            fl.push(run.down::<f32>(buf, nh)?);
        }
        let (hi, hq, hsx, hsy, hd) =
            (run.down::<i16>(&iphi, nh)?, run.down::<i32>(&chg, nh)?, run.down::<i16>(&sx, nh)?, run.down::<i16>(&sy, nh)?, run.down::<u16>(&det_index, nh)?);
        run.finish(&c.stats)?;
        if st[0] != 0 {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        let mut cols: Vec<ArrayRef> =
            fl.into_iter().map(|v| Arc::new(arrow_array::Float32Array::new(v.into_scalar_buffer(), None)) as ArrayRef).collect();
        cols.push(Arc::new(arrow_array::Int16Array::new(hi.into_scalar_buffer(), None)));
        cols.push(i32_array(hq));
        cols.push(Arc::new(arrow_array::Int16Array::new(hsx.into_scalar_buffer(), None)));
        cols.push(Arc::new(arrow_array::Int16Array::new(hsy.into_scalar_buffer(), None)));
        // hitsLayerStart from the hits' modules, as the CPU step derives it.
        let mut starts = Vec::with_capacity(hits_per_event.len());
        let mut first = 0;
        for &n in &hits_per_event {
            let det = &hd.as_slice()[first..first + n];
            starts.push(quiver_reco::tracks::layer_start_from_det_index(det).map_err(|e| Error::data(e.to_string()))?);
            first += n;
        }
        cols.push(u16_array(hd));
        let mut dev_cols: Vec<Arc<DeviceBuf>> = f32s.into_iter().map(Arc::new).collect();
        dev_cols.extend([iphi, chg, sx, sy, det_index].map(Arc::new));
        let on_device = device_columns(c.gpu, HITS, nh, dev_cols)?;
        publish_resident(batch, HITS, cols, offsets_from_lengths(hits_per_event)?, on_device)?;
        quiver_reco::steps::publish_hit_layers(batch, &starts)?;
        let overflows = tables
            .iter()
            .map(|&(_, _, counts)| records::hits_per_event(counts, MAX_CLUSTERS_PER_MODULE, MAX_NUM_CLUSTERS).into_iter().collect())
            .collect();
        publish_overflows(batch, overflows)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}
