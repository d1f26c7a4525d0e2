//! GPU `ca_doublets` (kernels in [`crate::kernels_ca`]): the same
//! parameters, input and product as the CPU step, bit for bit.
//!
//! On the host: each event's layer starts from its hits' detIndex (which also checks their
//! order), and the table of work items; between the count and the write pass, the events'
//! cell counts (one small download) to size the products. Everything else is on the device.
//! Batches whose hits the CPU core rejects are handed to the CPU implementation, which
//! reports its exact error.

use crate::args;
use crate::error::GpuError;
use crate::steps::launch;
use std::sync::Arc;

use cudarc::driver::CudaSlice;
use quiver_columnar::overflow::EventOverflows;
use quiver_columnar::{Error, EventBatch, Product, ProductKey, Result, Step, StepConfig};
use quiver_formats::conditions::CpeParams;
use quiver_reco::steps::doublet_overflow_rows;
use quiver_reco::steps::schema;
use quiver_reco::steps::types::DOUBLETS;
use quiver_reco::steps::HitDets;
use quiver_reco::tracks::doublets::{LAYER_PAIRS, N_LAYERS, PHI_BINS};
use quiver_reco::tracks::{
    check_hit_modules, layer_start_from_det_index, CaConfig, DoubletConfig, TrackError,
};

use crate::device::{upload_condition, DeviceBuf};
use crate::kernels::ELEMENT_BLOCK;
use crate::kernels_ca::{doublet_flags, pair_tables, BIN_STARTS_PER_EVENT, SCAN_BLOCK, STATS_RUN};
use crate::steps::{blocks, device_columns, fallback, publish_overflows, Common, HostDets, Run};
use cudarc::driver::CudaView;
use quiver_columnar::product::offsets_from_lengths;
use quiver_reco::tracks::doublets::DoubletCuts;

/// The host tables of a batch for the doublet kernels.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DoubletBatch {
    /// Batch hit offset of each event, `n_events + 1` entries.
    pub hit_off: Vec<u32>,
    /// Event-local layer starts, 11 per event.
    pub layer_start: Vec<u32>,
    /// First work item of each (event, pair), `n_events·n_pairs + 1` entries; the items of
    /// (event, pair) are its inner layer's hits, in hit order.
    pub item_start: Vec<u32>,
    /// Layer pairs used (the leading rows of [`LAYER_PAIRS`]).
    pub n_pairs: u32,
}

impl DoubletBatch {
    /// From each event's layer starts and number of hits.
    ///
    /// ```
    /// use quiver_gpu::steps::DoubletBatch;
    /// let ls = [0, 2, 3, 3, 3, 4, 4, 4, 4, 4, 5];
    /// let b = DoubletBatch::new(&[ls, [0; 11]], &[5, 0], 3).unwrap();
    /// assert_eq!(b.hit_off, [0, 5, 5]);
    /// // Pairs (0,1), (0,4), (0,7): two inner hits each, then an empty event.
    /// assert_eq!(b.item_start, [0, 2, 4, 6, 6, 6, 6]);
    /// assert_eq!(b.n_items(), 6);
    /// ```
    pub fn new(
        layer_starts: &[[u32; 11]],
        hits_per_event: &[usize],
        n_pairs: usize,
    ) -> Result<Self, GpuError> {
        if layer_starts.len() != hits_per_event.len() {
            return Err(GpuError::Layout(format!(
                "{} layer-start rows for {} events",
                layer_starts.len(),
                hits_per_event.len()
            )));
        }
        if n_pairs == 0 || n_pairs > LAYER_PAIRS.len() {
            return Err(GpuError::Layout(format!(
                "{n_pairs} layer pairs, expected 1..={}",
                LAYER_PAIRS.len()
            )));
        }
        let mut b = DoubletBatch {
            n_pairs: n_pairs as u32,
            ..Default::default()
        };
        b.hit_off.push(0u32);
        b.item_start.push(0u32);
        let (mut hits, mut items) = (0u64, 0u64);
        for (ls, &n) in layer_starts.iter().zip(hits_per_event) {
            if ls.windows(2).any(|w| w[0] > w[1]) || ls[10] as usize > n {
                return Err(GpuError::Layout(format!(
                    "layer starts {ls:?} are not non-decreasing up to {n} hits"
                )));
            }
            hits += n as u64;
            b.hit_off.push(
                u32::try_from(hits)
                    .map_err(|_| GpuError::Layout("more than 2^32 hits in a batch".into()))?,
            );
            b.layer_start.extend_from_slice(ls);
            for &(inner, _) in &LAYER_PAIRS[..n_pairs] {
                items += (ls[inner as usize + 1] - ls[inner as usize]) as u64;
                b.item_start.push(u32::try_from(items).map_err(|_| {
                    GpuError::Layout("more than 2^32 work items in a batch".into())
                })?);
            }
        }
        Ok(b)
    }

    pub fn n_events(&self) -> usize {
        self.hit_off.len() - 1
    }

    pub fn n_hits(&self) -> usize {
        *self.hit_off.last().unwrap_or(&0) as usize
    }

    pub fn n_items(&self) -> usize {
        *self.item_start.last().unwrap_or(&0) as usize
    }
}

/// Each event's cells from its count of doublets passing the cuts: the batch cell offsets
/// (`n_events + 1` entries, at most `max_doublets` cells per event) and whether each event
/// overflowed (more than `max_doublets`, as the CPU search reports it).
///
/// ```
/// use quiver_gpu::steps::cell_offsets;
/// assert_eq!(cell_offsets(&[3, 0, 9], 5).unwrap(), (vec![0, 3, 3, 8], vec![false, false, true]));
/// ```
pub fn cell_offsets(
    event_total: &[u32],
    max_doublets: u32,
) -> Result<(Vec<u32>, Vec<bool>), GpuError> {
    let mut off = Vec::with_capacity(event_total.len() + 1);
    off.push(0u32);
    let mut overflow = Vec::with_capacity(event_total.len());
    for &t in event_total {
        let end = off
            .last()
            .unwrap_or(&0)
            .checked_add(t.min(max_doublets))
            .ok_or_else(|| GpuError::Layout("more than 2^32 cells in a batch".into()))?;
        off.push(end);
        overflow.push(t > max_doublets);
    }
    Ok((off, overflow))
}

/// The host tables of a batch from its hits' detIndex column, checked as the CPU search
/// checks them (the hits in module order, `HitsView::validate_max` past the column lengths:
/// `check_hit_modules` with the step's hit capacity and `n_modules` module frames): an event
/// the CPU would reject is an error here, and the GPU step hands such a batch to the CPU
/// step for its message.
///
/// ```
/// use quiver_gpu::steps::prepare;
/// use quiver_reco::steps::HitDets;
/// use quiver_reco::tracks::CaConfig;
/// let b = prepare(HitDets::new(&[], &[0, 0]).unwrap(), 1856, &CaConfig::default()).unwrap(); // one empty event
/// assert_eq!((b.n_events(), b.n_hits(), b.n_items()), (1, 0, 0));
/// let unsorted = HitDets::new(&[5, 3], &[0, 2]).unwrap();
/// assert!(prepare(unsorted, 1856, &CaConfig::default()).is_err());
/// ```
pub fn prepare(
    h: HitDets,
    n_modules: usize,
    cfg: &CaConfig,
) -> std::result::Result<DoubletBatch, TrackError> {
    cfg.validate()?;
    let mut starts = Vec::with_capacity(h.n_events());
    let mut n = Vec::with_capacity(h.n_events());
    for e in 0..h.n_events() {
        let det = h.event(e);
        let layer_start = layer_start_from_det_index(det)?;
        check_hit_modules(det, &layer_start, n_modules, cfg.doublets.max_hits)?;
        starts.push(layer_start);
        n.push(det.len());
    }
    DoubletBatch::new(&starts, &n, cfg.n_pairs()).map_err(|e| TrackError::Config(e.to_string()))
}

/// The `doublets` product's event lengths and `capacity_overflows` rows of a batch, from
/// what the device counted: per event its cell count before the capacity (`event_total`),
/// the cell offsets of [`cell_offsets`], its cells not listed and the most cells of any
/// outer hit (`ca_overflow_stats`). The cells themselves stay on the device (the product is
/// device-resident; its first host consumer downloads it). The device writes every cell at
/// its place in the CPU's creation order (prefix sums of the per-item counts, no atomics),
/// so the canonical order needs no sort.
#[derive(Debug)]
pub struct DoubletProducts {
    /// Cells per event.
    pub lengths: Vec<usize>,
    /// The `capacity_overflows` rows of each event.
    pub overflows: Vec<EventOverflows>,
}

/// See [`DoubletProducts`].
///
/// ```
/// use quiver_gpu::steps::{cell_offsets, doublet_products};
/// let d = quiver_reco::tracks::DoubletConfig { max_number_of_doublets: 2, ..Default::default() };
/// let (off, _) = cell_offsets(&[3], 2).unwrap();
/// let p = doublet_products(&d, &[3], &off, &[0], &[1]).unwrap();
/// assert_eq!(p.lengths, [2]);
/// assert_eq!(p.overflows[0][0].truncated, 1);
/// ```
pub fn doublet_products(
    d: &DoubletConfig,
    event_total: &[u32],
    cell_off: &[u32],
    unlisted: &[u32],
    worst: &[u32],
) -> std::result::Result<DoubletProducts, GpuError> {
    if cell_off.len() != event_total.len() + 1
        || unlisted.len() != event_total.len()
        || worst.len() != event_total.len()
    {
        return Err(GpuError::Layout(format!(
            "{} cell offsets, {} and {} counts for {} events",
            cell_off.len(),
            unlisted.len(),
            worst.len(),
            event_total.len()
        )));
    }
    let mut lengths = Vec::with_capacity(event_total.len());
    let mut overflows = Vec::with_capacity(event_total.len());
    for (e, &total) in event_total.iter().enumerate() {
        let n = cell_off[e + 1]
            .checked_sub(cell_off[e])
            .ok_or_else(|| GpuError::Layout("cell offsets decrease".into()))?
            as usize;
        let missed = (total as u64)
            .checked_sub(n as u64)
            .ok_or_else(|| GpuError::Layout("more cells than the event counted".into()))?;
        let worst = (unlisted[e] > 0).then_some(worst[e] as u64);
        overflows.push(doublet_overflow_rows(d, missed, unlisted[e] as u64, worst));
        lengths.push(n);
    }
    Ok(DoubletProducts { lengths, overflows })
}

/// The GPU `ca_doublets` step (see the module documentation).
pub(crate) struct CaDoubletsGpu {
    hits: ProductKey,
    cpe: Arc<CpeParams>,
    cfg: CaConfig,
    pair_i: CudaSlice<i32>,
    pair_f: CudaSlice<f32>,
    common: Common,
}

impl CaDoubletsGpu {
    pub fn new(
        cfg: &StepConfig,
        common: Common,
        cpe: Arc<CpeParams>,
        ca: CaConfig,
    ) -> Result<Self> {
        let (pi, pf) = pair_tables(&ca.doublets.cuts());
        let mut bytes = 0u64;
        let up_err =
            |m: GpuError| Error::plan(&cfg.label, format!("uploading the layer-pair cuts: {m}"));
        let pair_i = upload_condition(common.gpu, &pi, &mut bytes).map_err(up_err)?;
        let pair_f = upload_condition(common.gpu, &pf, &mut bytes).map_err(up_err)?;
        common.stats.add_conditions(bytes);
        Ok(CaDoubletsGpu {
            hits: cfg.input("hits")?,
            cpe,
            cfg: ca,
            pair_i,
            pair_f,
            common,
        })
    }
}

/// The device buffers of a batch's doublet search: the host tables, the hits' bins and
/// packed copies, the work items' counts and first cells, and the events' cell totals.
struct DbBuffers {
    hit_off: DeviceBuf,
    layer_start: DeviceBuf,
    item_start: DeviceBuf,
    bin_count: DeviceBuf,
    bin_start: DeviceBuf,
    cursor: DeviceBuf,
    pidx: DeviceBuf,
    pz: DeviceBuf,
    pr: DeviceBuf,
    pphi: DeviceBuf,
    psy: DeviceBuf,
    item_count: DeviceBuf,
    item_first: DeviceBuf,
    event_total: DeviceBuf,
}

/// The hits' columns on the device, as the kernels read them.
struct HitViews<'a> {
    z: CudaView<'a, f32>,
    r: CudaView<'a, f32>,
    iphi: CudaView<'a, i16>,
    sy: CudaView<'a, i16>,
    det: CudaView<'a, u16>,
}

/// A batch's counts: events, hits, work items, phi bins.
#[derive(Clone, Copy)]
struct DbSizes {
    n_ev: usize,
    n_hits: usize,
    n_items: usize,
    n_bins: usize,
}

impl DbBuffers {
    fn alloc(run: &mut Run, db: &DoubletBatch, s: DbSizes) -> Result<Self> {
        let (n_ev, n_hits, n_items, n_bins) = (s.n_ev, s.n_hits, s.n_items, s.n_bins);
        let (hit_off, layer_start, item_start) = (
            run.up(&db.hit_off)?,
            run.up(&db.layer_start)?,
            run.up(&db.item_start)?,
        );
        let bin_count = run.zeros::<u32>(n_bins)?;
        let (bin_start, cursor) = (
            run.out::<u32>(n_ev * BIN_STARTS_PER_EVENT)?,
            run.out::<u32>(n_ev * BIN_STARTS_PER_EVENT)?,
        );
        let (pidx, pz, pr, pphi, psy) = (
            run.out::<u32>(n_hits)?,
            run.out::<f32>(n_hits)?,
            run.out::<f32>(n_hits)?,
            run.out::<i16>(n_hits)?,
            run.out::<i16>(n_hits)?,
        );
        let (item_count, item_first, event_total) = (
            run.out::<u32>(n_items)?,
            run.out::<u32>(n_items)?,
            run.out::<u32>(n_ev)?,
        );
        Ok(DbBuffers {
            hit_off,
            layer_start,
            item_start,
            bin_count,
            bin_start,
            cursor,
            pidx,
            pz,
            pr,
            pphi,
            psy,
            item_count,
            item_first,
            event_total,
        })
    }

    /// The hits' phi bins: counts, scan, fill, and the packed copies sorted by bin.
    fn launch_bins(&mut self, run: &Run, h: &HitViews, s: DbSizes) -> Result<()> {
        let (n_ev, n_hits, n_bins) = (s.n_ev, s.n_hits, s.n_bins);
        let (n_ev32, n_hits32) = (n_ev as u32, n_hits as u32);
        let (vz, vr, vphi, vsy, vdet) = (&h.z, &h.r, &h.iphi, &h.sy, &h.det);
        let (vho, vls) = (
            self.hit_off.view::<u32>(n_ev + 1),
            self.layer_start.view::<u32>(n_ev * 11),
        );
        {
            let mut vbc = self.bin_count.view_mut::<u32>(n_bins);
            let args = args::CaBinCount {
                det: vdet,
                iphi: vphi,
                n_hits: &n_hits32,
                hit_off: &vho,
                layer_start: &vls,
                n_events: &n_ev32,
                bin_count: &mut vbc,
            };
            launch(run, args, blocks(n_hits, ELEMENT_BLOCK))?;
        }
        {
            let vbc = self.bin_count.view::<u32>(n_bins);
            let (mut vbs, mut vcur) = (
                self.bin_start.view_mut::<u32>(n_ev * BIN_STARTS_PER_EVENT),
                self.cursor.view_mut::<u32>(n_ev * BIN_STARTS_PER_EVENT),
            );
            let args = args::CaBinScan {
                bin_count: &vbc,
                hit_off: &vho,
                n_events: &n_ev32,
                bin_start: &mut vbs,
                cursor: &mut vcur,
            };
            launch(run, args, blocks(n_ev, ELEMENT_BLOCK))?;
        }
        {
            let (mut vcur, mut vpi) = (
                self.cursor.view_mut::<u32>(n_ev * BIN_STARTS_PER_EVENT),
                self.pidx.view_mut::<u32>(n_hits),
            );
            let args = args::CaBinFill {
                det: vdet,
                iphi: vphi,
                n_hits: &n_hits32,
                hit_off: &vho,
                layer_start: &vls,
                n_events: &n_ev32,
                cursor: &mut vcur,
                packed_idx: &mut vpi,
            };
            launch(run, args, blocks(n_hits, ELEMENT_BLOCK))?;
        }
        {
            let vbs = self.bin_start.view::<u32>(n_ev * BIN_STARTS_PER_EVENT);
            let (mut vpi, mut vpz, mut vpr, mut vpp, mut vps) = (
                self.pidx.view_mut::<u32>(n_hits),
                self.pz.view_mut::<f32>(n_hits),
                self.pr.view_mut::<f32>(n_hits),
                self.pphi.view_mut::<i16>(n_hits),
                self.psy.view_mut::<i16>(n_hits),
            );
            let args = args::CaBinSort {
                bin_start: &vbs,
                n_events: &n_ev32,
                hit_off: &vho,
                z: vz,
                r: vr,
                iphi: vphi,
                size_y: vsy,
                packed_idx: &mut vpi,
                packed_z: &mut vpz,
                packed_r: &mut vpr,
                packed_iphi: &mut vpp,
                packed_sy: &mut vps,
            };
            launch(run, args, blocks(n_bins, ELEMENT_BLOCK))?;
        }
        Ok(())
    }

    /// The work items' first cells and the events' cell totals (`ca_item_scan`).
    fn launch_item_scan(&mut self, run: &Run, db: &DoubletBatch, s: DbSizes) -> Result<()> {
        let (n_ev, n_items) = (s.n_ev, s.n_items);
        let n_ev32 = n_ev as u32;
        let vis = self.item_start.view::<u32>(n_ev * db.n_pairs as usize + 1);
        let vic = self.item_count.view::<u32>(n_items);
        let (mut vif, mut vet) = (
            self.item_first.view_mut::<u32>(n_items),
            self.event_total.view_mut::<u32>(n_ev),
        );
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (n_ev32, 1, 1),
            block_dim: (SCAN_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = args::CaItemScan {
            item_count: &vic,
            item_start: &vis,
            n_pairs: &db.n_pairs,
            item_first: &mut vif,
            event_total: &mut vet,
        };
        launch(run, args, cfg)?;
        Ok(())
    }
}

/// The cells' listing on their outer hits: the counts per hit, the cells listed, and the
/// overfull hits' (`ca_listed_count`, `ca_listed`, `ca_listed_overfull`).
#[allow(clippy::too_many_arguments)]
fn launch_listed(
    run: &Run,
    d: &DoubletConfig,
    hit_off: &DeviceBuf,
    outer: &DeviceBuf,
    dco: &DeviceBuf,
    outer_count: &mut DeviceBuf,
    listed: &mut DeviceBuf,
    (n_ev, n_hits, n_cells): (usize, usize, usize),
) -> Result<()> {
    let (n_ev32, n_hits32, n_cells32) = (n_ev as u32, n_hits as u32, n_cells as u32);
    let vho = hit_off.view::<u32>(n_ev + 1);
    let m = d.max_cells_per_hit;
    let (vo, vco) = (outer.view::<u32>(n_cells), dco.view::<u32>(n_ev + 1));
    {
        let mut voc = outer_count.view_mut::<u32>(n_hits);
        let args = args::CaListedCount {
            outer: &vo,
            n_cells: &n_cells32,
            cell_off: &vco,
            n_events: &n_ev32,
            hit_off: &vho,
            outer_count: &mut voc,
        };
        launch(run, args, blocks(n_cells, ELEMENT_BLOCK))?;
    }
    let voc = outer_count.view::<u32>(n_hits);
    let mut vl = listed.view_mut::<u8>(n_cells);
    // A view a launch writes is held for exactly that launch: one per launch.
    let mut vl1 = vl.slice_mut(..);
    let args = args::CaListed {
        outer: &vo,
        n_cells: &n_cells32,
        cell_off: &vco,
        n_events: &n_ev32,
        hit_off: &vho,
        outer_count: &voc,
        max_cells_per_hit: &m,
        listed: &mut vl1,
    };
    launch(run, args, blocks(n_cells, ELEMENT_BLOCK))?;
    let args = args::CaListedOverfull {
        outer: &vo,
        cell_off: &vco,
        n_events: &n_ev32,
        hit_off: &vho,
        n_hits: &n_hits32,
        outer_count: &voc,
        max_cells_per_hit: &m,
        listed: &mut vl,
    };
    launch(run, args, blocks(n_hits, ELEMENT_BLOCK))?;
    Ok(())
}

/// The overflow rows' counts per event (`ca_overflow_stats`): cells not listed, and the
/// fullest hit.
#[allow(clippy::too_many_arguments)]
fn launch_overflow_stats(
    run: &Run,
    hit_off: &DeviceBuf,
    outer_count: &DeviceBuf,
    listed: &DeviceBuf,
    dco: &DeviceBuf,
    unlisted: &mut DeviceBuf,
    worst: &mut DeviceBuf,
    (n_ev, n_hits, n_cells): (usize, usize, usize),
) -> Result<()> {
    let (n_ev32, n_hits32, n_cells32) = (n_ev as u32, n_hits as u32, n_cells as u32);
    let vho = hit_off.view::<u32>(n_ev + 1);
    let (voc, vl, vco) = (
        outer_count.view::<u32>(n_hits),
        listed.view::<u8>(n_cells),
        dco.view::<u32>(n_ev + 1),
    );
    let (mut vu, mut vw) = (unlisted.view_mut::<u32>(n_ev), worst.view_mut::<u32>(n_ev));
    let args = args::CaOverflowStats {
        outer_count: &voc,
        n_hits: &n_hits32,
        hit_off: &vho,
        listed: &vl,
        n_cells: &n_cells32,
        cell_off: &vco,
        n_events: &n_ev32,
        unlisted: &mut vu,
        worst: &mut vw,
    };
    launch(
        run,
        args,
        blocks(
            n_hits.max(n_cells).div_ceil(STATS_RUN as usize),
            ELEMENT_BLOCK,
        ),
    )?;
    Ok(())
}

impl CaDoubletsGpu {
    /// One pass of the candidate scan (`ca_doublets`): count (`write` = 0), or write the
    /// cells at the scanned places (`cell_off`, `n_cells`) into `outs`.
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &self,
        run: &Run,
        write: u32,
        b: &mut DbBuffers,
        h: &HitViews,
        db: &DoubletBatch,
        s: DbSizes,
        (cuts, flags): (&DoubletCuts, u32),
        cell_off: &DeviceBuf,
        n_cells: usize,
        outs: (&mut DeviceBuf, &mut DeviceBuf, &mut DeviceBuf),
    ) -> Result<()> {
        let (n_ev, n_hits, n_items) = (s.n_ev, s.n_hits, s.n_items);
        let (n_ev32, n_items32) = (n_ev as u32, n_items as u32);
        let d = &self.cfg.doublets;
        let (pi, pf) = (self.pair_i.as_view(), self.pair_f.as_view());
        let (vz, vr, vphi, vsy, vdet) = (&h.z, &h.r, &h.iphi, &h.sy, &h.det);
        let (vho, vls, vis) = (
            b.hit_off.view::<u32>(n_ev + 1),
            b.layer_start.view::<u32>(n_ev * 11),
            b.item_start.view::<u32>(n_ev * db.n_pairs as usize + 1),
        );
        let (vbs, vpi, vpz, vpr, vpp, vps) = (
            b.bin_start.view::<u32>(n_ev * BIN_STARTS_PER_EVENT),
            b.pidx.view::<u32>(n_hits),
            b.pz.view::<f32>(n_hits),
            b.pr.view::<f32>(n_hits),
            b.pphi.view::<i16>(n_hits),
            b.psy.view::<i16>(n_hits),
        );
        let (mut vic, vif, vco) = (
            b.item_count.view_mut::<u32>(n_items),
            b.item_first.view::<u32>(n_items),
            cell_off.view::<u32>(n_ev + 1),
        );
        let (mut oi, mut oo, mut op) = (
            outs.0.view_mut::<u32>(n_cells.max(1)),
            outs.1.view_mut::<u32>(n_cells.max(1)),
            outs.2.view_mut::<u8>(n_cells.max(1)),
        );
        let args = args::CaDoublets {
            write: &write,
            n_items: &n_items32,
            item_start: &vis,
            n_pairs: &db.n_pairs,
            n_events: &n_ev32,
            hit_off: &vho,
            layer_start: &vls,
            z: vz,
            r: vr,
            iphi: vphi,
            size_y: vsy,
            det: vdet,
            bin_start: &vbs,
            packed_idx: &vpi,
            packed_z: &vpz,
            packed_r: &vpr,
            packed_iphi: &vpp,
            packed_sy: &vps,
            pair_i: &pi,
            pair_f: &pf,
            flags: &flags,
            z0_cut: &d.z0_cut,
            dzdr_fact: &cuts.dzdr_fact,
            min_radius2_t4: &cuts.min_radius2_t4,
            i2p: &cuts.i2p,
            max_dy_pred: &d.max_dy_pred,
            max_doublets: &d.max_number_of_doublets,
            item_count: &mut vic,
            item_first: &vif,
            cell_off: &vco,
            out_inner: &mut oi,
            out_outer: &mut oo,
            out_pair: &mut op,
        };
        launch(run, args, blocks(n_items, ELEMENT_BLOCK))
    }
}

/// The `doublets` product, its cells (inner, outer, pair, listed) left on the device, and
/// the overflow rows.
fn publish_cells(
    batch: &mut EventBatch,
    gpu: &'static crate::device::Gpu,
    p: DoubletProducts,
    n_cells: usize,
    [inner, outer, pair, listed]: [DeviceBuf; 4],
) -> Result<()> {
    // The cells stay on the device: a GPU `ca_ntuplets` reads them there, and the first
    // host consumer (a CPU step, an output, `compare`) downloads them once.
    let device = device_columns(
        gpu,
        DOUBLETS,
        n_cells,
        vec![
            Arc::new(inner),
            Arc::new(outer),
            Arc::new(pair),
            Arc::new(listed),
        ],
    )?;
    batch.put(Product::on_device(
        schema(DOUBLETS),
        offsets_from_lengths(p.lengths)?,
        n_cells,
        device,
    )?)?;
    publish_overflows(batch, p.overflows)
}

impl Step for CaDoubletsGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        // The hits' detIndex only on the host: the kernels read the other columns there.
        let hd = HostDets::get(batch, &self.hits)?;
        // Hits the CPU search rejects: the CPU step reports its exact error.
        let Ok(db) = prepare(hd.view()?, self.cpe.det.len(), &self.cfg) else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        let (n_ev, n_hits, n_items) = (db.n_events(), db.n_hits(), db.n_items());
        if n_hits == 0 || n_items == 0 || n_hits != hd.product.num_rows() {
            return c.cpu.process(batch);
        }
        let d = &self.cfg.doublets;
        let cuts = d.cuts();
        let flags = doublet_flags(d);
        let n_bins = n_ev * N_LAYERS * PHI_BINS;
        let sz = DbSizes {
            n_ev,
            n_hits,
            n_items,
            n_bins,
        };
        let mut run = Run::start(c.gpu)?;
        let hd = crate::resident::columns_on_device(batch, &self.hits, c.gpu)?;
        let hc = crate::resident::cuda(&hd);
        let (dz, dr, dphi, dsy, ddet) = (
            hc.column("z_global")?,
            hc.column("r_global")?,
            hc.column("iphi")?,
            hc.column("size_y")?,
            hc.column("det_index")?,
        );
        let mut b = DbBuffers::alloc(&mut run, &db, sz)?;
        run.mark()?;
        let h = HitViews {
            z: dz.view::<f32>(n_hits),
            r: dr.view::<f32>(n_hits),
            iphi: dphi.view::<i16>(n_hits),
            sy: dsy.view::<i16>(n_hits),
            det: ddet.view::<u16>(n_hits),
        };
        b.launch_bins(&run, &h, sz)?;
        // Both passes of the candidate scan: count (write = 0), then write at the scanned places.
        {
            let (mut d0, mut d1, mut d2, no_off) = (
                run.out::<u32>(1)?,
                run.out::<u32>(1)?,
                run.out::<u8>(1)?,
                run.zeros::<u32>(n_ev + 1)?,
            );
            let outs = (&mut d0, &mut d1, &mut d2);
            self.scan(
                &run,
                0,
                &mut b,
                &h,
                &db,
                sz,
                (&cuts, flags),
                &no_off,
                0,
                outs,
            )?;
        }
        b.launch_item_scan(&run, &db, sz)?;
        // The events' cell counts size the products: one small download.
        let totals = run.down::<u32>(&b.event_total, n_ev)?;
        run.sync()?;
        let totals: Vec<u32> = totals.as_slice().to_vec();
        let (cell_off, _) = cell_offsets(&totals, d.max_number_of_doublets)?;
        let n_cells = *cell_off.last().unwrap_or(&0) as usize;
        let dco = run.up(&cell_off)?;
        let (mut inner, mut outer, mut pair) = (
            run.out::<u32>(n_cells.max(1))?,
            run.out::<u32>(n_cells.max(1))?,
            run.out::<u8>(n_cells.max(1))?,
        );
        let outs = (&mut inner, &mut outer, &mut pair);
        self.scan(
            &run,
            1,
            &mut b,
            &h,
            &db,
            sz,
            (&cuts, flags),
            &dco,
            n_cells,
            outs,
        )?;
        let mut outer_count = run.zeros::<u32>(n_hits)?;
        let mut listed = run.zeros::<u8>(n_cells.max(1))?;
        let counts = (n_ev, n_hits, n_cells);
        if n_cells > 0 {
            let (oc, l) = (&mut outer_count, &mut listed);
            launch_listed(&run, d, &b.hit_off, &outer, &dco, oc, l, counts)?;
        }
        // The overflow rows' counts, counted on the device: two numbers per event come back.
        let (mut unlisted, mut worst) = (run.zeros::<u32>(n_ev)?, run.zeros::<u32>(n_ev)?);
        if n_cells > 0 {
            let (oc, l, u, w) = (&outer_count, &listed, &mut unlisted, &mut worst);
            launch_overflow_stats(&run, &b.hit_off, oc, l, &dco, u, w, counts)?;
        }
        run.mark()?;
        let (hu, hw) = (
            run.queue::<u32>(&unlisted, n_ev)?,
            run.queue::<u32>(&worst, n_ev)?,
        );
        let (hu, hw) = (run.take(hu)?, run.take(hw)?);
        run.finish(&c.stats)?;
        let p = doublet_products(d, &totals, &cell_off, hu.as_slice(), hw.as_slice())
            .map_err(|m| Error::data(format!("gpu ca_doublets: {m}")))?;
        publish_cells(batch, c.gpu, p, n_cells, [inner, outer, pair, listed])
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}
