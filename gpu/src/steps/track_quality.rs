//! GPU `track_quality` (kernel [`crate::kernels_quality::QUALITY`]): the CPU step's checks
//! on the host, the columns sent as the products hold them; on the device the cells' tuple
//! lists (the CPU's replay, `ct_*`), then one block per event for the classification, the
//! late fishbone's cleaner, the fast duplicate remover and the triplet cleaner; the `tracks` product (the fits' columns with the new quality) published
//! as the CPU step publishes it. The same parameters, inputs and products as the CPU step.

use quiver_columnar::{Error, EventBatch, ProductKey, Result, Step, StepConfig};
use quiver_reco::steps::{
    ntuplet_overflows, publish_quality, quality_columns, QualityColumnsView, QualityTally,
};
use quiver_reco::tracks::ntuplets::CaState;
use quiver_reco::tracks::CaConfig;

use crate::args;
use crate::device::DeviceBuf;
use crate::kernels_quality::{cuts_table, QX_BLOCK, QX_ROUNDS, QX_SH};
use crate::resident::{mirror_of, CudaMirror};
use crate::steps::ca_ntuplets::{CellTracks, CellTracksIn};
use crate::steps::{fallback, launch, record_results, Common, HostDets, Run};
use cudarc::driver::DeviceRepr;
use quiver_reco::steps::types::TRACKS;
use std::sync::Arc;

/// The small host tables of a batch's `track_quality` kernels; everything else goes to the
/// device as the products hold it ([`QualityColumnsView`]). Tuples of event `e`:
/// `tup_off[e]..tup_off[e + 1]`; its hits `hit_off`, its cells `cell_off` (batch numbering);
/// `list_base[e]` the first slot of its cells' tuple lists (the event's first tuple cell in
/// the `cells` values); `dead` one byte per batch cell with the late fishbone (the cells'
/// killed flags), else empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QualityTables {
    pub tup_off: Vec<u32>,
    pub hit_off: Vec<u32>,
    pub cell_off: Vec<u32>,
    pub list_base: Vec<u32>,
    pub dead: Vec<u8>,
}

/// The tables from the products' per-event offsets (tuples, hits, cells) and the checked
/// columns; `None` where a count passes 2³² (the kernels index with 32 bits).
///
/// ```
/// use arrow_array::BooleanArray;
/// use quiver_gpu::steps::quality_tables;
/// use quiver_reco::steps::QualityColumnsView;
/// // Two events: 2 tuples and 1 (cells 0-1 | 1 | 0), 3 and 2 cells, the second one killed.
/// let v = QualityColumnsView {
///     hit_offsets: &[0, 3, 5, 7], hits: &[0, 1, 2, 0, 1, 1, 0],
///     cell_offsets: &[0, 2, 3, 4], cells: &[0, 1, 1, 0],
///     quality: &[0, 0, 0], state: &[0.0; 15], pt: &[1.0; 3], chi2: &[0.0; 3],
///     alive: BooleanArray::from(vec![true, false, true, true, true]),
/// };
/// let t = quality_tables(&v, &[0, 2, 3], &[0, 10, 20], &[0, 3, 5], true).unwrap();
/// assert_eq!((t.tup_off, t.cell_off, t.list_base), (vec![0, 2, 3], vec![0, 3, 5], vec![0, 3]));
/// assert_eq!(t.dead, vec![0, 1, 0, 0, 0]);
/// assert!(quality_tables(&v, &[0, 2, 3], &[0, 10, 20], &[0, 3, 5], false).unwrap().dead.is_empty());
/// ```
pub fn quality_tables(
    v: &QualityColumnsView,
    tuples: &[i32],
    hits: &[i32],
    cells: &[i32],
    late_fishbone: bool,
) -> Option<QualityTables> {
    let u = |o: &[i32]| {
        o.iter()
            .map(|&x| u32::try_from(x).ok())
            .collect::<Option<Vec<u32>>>()
    };
    let tup_off = u(tuples)?;
    let list_base = tup_off[..tup_off.len().saturating_sub(1)]
        .iter()
        .map(|&t| {
            v.cell_offsets
                .get(t as usize)
                .and_then(|&o| u32::try_from(o).ok())
        })
        .collect::<Option<_>>()?;
    let dead = if late_fishbone {
        v.alive.values().iter().map(|a| u8::from(!a)).collect()
    } else {
        Vec::new()
    };
    Some(QualityTables {
        tup_off,
        hit_off: u(hits)?,
        cell_off: u(cells)?,
        list_base,
        dead,
    })
}

/// The GPU `track_quality` step.
pub(crate) struct TrackQualityGpu {
    hits: ProductKey,
    ntuplets: ProductKey,
    cells: ProductKey,
    fits: ProductKey,
    cfg: CaConfig,
    tally: QualityTally,
    rounds: RoundsTally,
    common: Common,
}

/// The duplicate remover's parallel rounds over a job: the most any event needed, and the
/// events that ran the sequential loop instead.
#[derive(Default)]
struct RoundsTally {
    max: std::sync::atomic::AtomicU32,
    sequential: std::sync::atomic::AtomicU64,
}

impl RoundsTally {
    fn add(&self, rounds: &[u32]) {
        use std::sync::atomic::Ordering::Relaxed;
        for &r in rounds {
            if r == u32::MAX {
                self.sequential.fetch_add(1, Relaxed);
            } else {
                self.max.fetch_max(r, Relaxed);
            }
        }
    }
    fn report(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        format!(
            "gpu: duplicate remover settled in at most {} parallel rounds; {} events ran the sequential loop (past {QX_ROUNDS} rounds)",
            self.max.load(Relaxed),
            self.sequential.load(Relaxed)
        )
    }
}

/// Part `name` of a device mirror when it holds `host.len()` elements, else an upload of
/// `host`.
fn mirrored<T: DeviceRepr>(
    run: &mut Run,
    m: Option<&CudaMirror>,
    name: &str,
    host: &[T],
) -> Result<Arc<DeviceBuf>> {
    match m.and_then(|m| m.part::<T>(name, host.len())) {
        Some(b) => Ok(b.clone()),
        None => Ok(Arc::new(run.up(host)?)),
    }
}

impl TrackQualityGpu {
    pub fn new(cfg: &StepConfig, common: Common, ca: CaConfig) -> Result<Self> {
        Ok(TrackQualityGpu {
            hits: cfg.input("hits")?,
            ntuplets: cfg.input("ntuplets")?,
            cells: cfg.input("cells")?,
            fits: cfg.input("fits")?,
            cfg: ca,
            tally: QualityTally::default(),
            rounds: RoundsTally::default(),
            common,
        })
    }
}

/// The counts of a batch's `track_quality`: events, tuples, hits and cells (of the tables),
/// and the tuples' hits and cells.
#[derive(Clone, Copy)]
struct QxSizes {
    n_ev: usize,
    n_tup: usize,
    n_hits: usize,
    n_cells: usize,
    n_th: usize,
    n_tc: usize,
}

/// The device inputs and outputs of `qx_quality` (and of the cells' tuple lists' stats).
struct QxBuffers {
    dto: DeviceBuf,
    dtho: Arc<DeviceBuf>,
    dth: Arc<DeviceBuf>,
    dst: Arc<DeviceBuf>,
    dpt: Arc<DeviceBuf>,
    dchi: Arc<DeviceBuf>,
    dcuts: DeviceBuf,
    dco: DeviceBuf,
    dtco: Arc<DeviceBuf>,
    dtc: Arc<DeviceBuf>,
    dho: DeviceBuf,
    ddead: DeviceBuf,
    dq: DeviceBuf,
    h2o: DeviceBuf,
    h2b: DeviceBuf,
    dcl: DeviceBuf,
    dwin: DeviceBuf,
    dkilled: DeviceBuf,
    drounds: DeviceBuf,
    non_empty: DeviceBuf,
    dropped: DeviceBuf,
}

impl TrackQualityGpu {
    /// The uploads (or the mirrors' parts) and the outputs; also the cells' lists' base
    /// slots, for [`CellTracks::build`].
    fn upload(
        &self,
        run: &mut Run,
        v: &QualityColumnsView,
        qt: &QualityTables,
        (nm, fm): (Option<&CudaMirror>, Option<&CudaMirror>),
        s: QxSizes,
    ) -> Result<(QxBuffers, DeviceBuf)> {
        let (dto, dtho, dth) = (
            run.up(&qt.tup_off)?,
            mirrored(run, nm, "hits.offsets", &v.hit_offsets[..=s.n_tup])?,
            mirrored(run, nm, "hits.values", &v.hits[..s.n_th])?,
        );
        let (dst, dpt, dchi, dcuts) = (
            mirrored(run, fm, "state", &v.state[..5 * s.n_tup])?,
            mirrored(run, fm, "pt", &v.pt[..s.n_tup])?,
            mirrored(run, fm, "chi2", &v.chi2[..s.n_tup])?,
            run.up(&cuts_table(&self.cfg.quality))?,
        );
        let (dco, dtco, dtc, dho) = (
            run.up(&qt.cell_off)?,
            mirrored(run, nm, "cells.offsets", &v.cell_offsets[..=s.n_tup])?,
            mirrored(run, nm, "cells.values", &v.cells[..s.n_tc])?,
            run.up(&qt.hit_off)?,
        );
        let ddead = if self.cfg.ntuplets.late_fishbone {
            run.up(&qt.dead)?
        } else {
            run.zeros::<u8>(1)?
        };
        let base = run.up(&qt.list_base)?;
        let dq = run.up(&v.quality[..s.n_tup])?;
        let (h2o, h2b) = (
            run.out::<u32>(s.n_hits + s.n_ev)?,
            run.out::<u32>(s.n_th.max(1))?,
        );
        let (dcl, dwin, dkilled, drounds) = (
            run.out::<u32>(s.n_cells.max(1))?,
            run.out::<u32>(s.n_cells.max(1))?,
            run.out::<u32>(s.n_tup)?,
            run.out::<u32>(s.n_ev)?,
        );
        let (non_empty, dropped) = (run.zeros::<u32>(s.n_ev)?, run.zeros::<u32>(s.n_ev)?);
        Ok((
            QxBuffers {
                dto,
                dtho,
                dth,
                dst,
                dpt,
                dchi,
                dcuts,
                dco,
                dtco,
                dtc,
                dho,
                ddead,
                dq,
                h2o,
                h2b,
                dcl,
                dwin,
                dkilled,
                drounds,
                non_empty,
                dropped,
            },
            base,
        ))
    }

    /// `qx_quality`, one block per event.
    fn launch_quality(
        &self,
        run: &Run,
        b: &mut QxBuffers,
        lists: &CellTracks,
        s: QxSizes,
    ) -> Result<()> {
        let (late, per_list) = (
            self.cfg.ntuplets.late_fishbone,
            self.cfg.ntuplets.max_cell_tracks,
        );
        let (vto, vtho, vth) = (
            b.dto.view::<u32>(s.n_ev + 1),
            b.dtho.view::<u32>(s.n_tup + 1),
            b.dth.view::<u32>(s.n_th.max(1)),
        );
        let (vst, vpt, vchi, vcuts) = (
            b.dst.view::<f32>(5 * s.n_tup),
            b.dpt.view::<f32>(s.n_tup),
            b.dchi.view::<f32>(s.n_tup),
            b.dcuts.view::<f32>(crate::kernels_quality::QX_CUTS),
        );
        let (vco, vcount, vfirst, vbase, vvals) = (
            b.dco.view::<u32>(s.n_ev + 1),
            lists.count.view::<u32>(s.n_cells),
            lists.first.view::<u32>(s.n_cells),
            lists.base.view::<u32>(s.n_ev),
            lists.vals.view::<u32>(s.n_tc.max(1)),
        );
        let (vdead, vho) = (
            b.ddead.view::<u8>(if late { s.n_cells.max(1) } else { 1 }),
            b.dho.view::<u32>(s.n_ev + 1),
        );
        let (mut v1, mut v2, mut vq) = (
            b.h2o.view_mut::<u32>(s.n_hits + s.n_ev),
            b.h2b.view_mut::<u32>(s.n_th.max(1)),
            b.dq.view_mut::<u8>(s.n_tup),
        );
        let (mut vcl, mut vwin, mut vkilled, mut vrounds) = (
            b.dcl.view_mut::<u32>(s.n_cells.max(1)),
            b.dwin.view_mut::<u32>(s.n_cells.max(1)),
            b.dkilled.view_mut::<u32>(s.n_tup),
            b.drounds.view_mut::<u32>(s.n_ev),
        );
        let (ne, late, sh_cap) = (s.n_ev as u32, late as u32, QX_SH as u32);
        let args = args::QxQuality {
            n_events: &ne,
            tup_off: &vto,
            thit_off: &vtho,
            thits: &vth,
            state: &vst,
            pt: &vpt,
            chi2: &vchi,
            cuts: &vcuts,
            cell_off: &vco,
            ct_count: &vcount,
            ct_first: &vfirst,
            ct_base: &vbase,
            per_list: &per_list,
            ct_vals: &vvals,
            dead: &vdead,
            late_fishbone: &late,
            hit_off: &vho,
            h2t_off_all: &mut v1,
            h2t_bins_all: &mut v2,
            cl_all: &mut vcl,
            win_all: &mut vwin,
            killed_all: &mut vkilled,
            sh_cap: &sh_cap,
            max_rounds: &QX_ROUNDS,
            rounds_all: &mut vrounds,
            q_all: &mut vq,
        };
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (ne, 1, 1),
            block_dim: (QX_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        launch(run, args, cfg)?;
        Ok(())
    }
}

/// Each event's tuples' quality codes, as the device wrote them (`tup_off`: the events'
/// tuples); an error for a code that is not a [`quiver_reco::tracks::Quality`].
fn per_event_quality(tup_off: &[u32], q: &[u8]) -> Result<Vec<Vec<u8>>> {
    let quality: Vec<Vec<u8>> = tup_off
        .windows(2)
        .map(|w| q[w[0] as usize..w[1] as usize].to_vec())
        .collect();
    if quality
        .iter()
        .flatten()
        .any(|&x| quiver_reco::tracks::Quality::from_u8(x).is_none())
    {
        return Err(Error::data(
            "gpu track_quality: the device wrote an unknown quality code",
        ));
    }
    Ok(quality)
}

impl Step for TrackQualityGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        // The hits' detIndex only on the host (see HostDets).
        let (hd, n, cl, f) = (
            HostDets::get(batch, &self.hits)?,
            batch.get(&self.ntuplets)?,
            batch.get(&self.cells)?,
            batch.get(&self.fits)?,
        );
        let h = &hd.product;
        // What the CPU step rejects goes to it, for its exact message (the cells of the
        // tuples are checked on the device, below).
        let Ok(v) = quality_columns(hd.view()?, &n, &cl, &f) else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        let late = self.cfg.ntuplets.late_fishbone;
        let Some(qt) = quality_tables(&v, n.offsets(), h.offsets(), cl.offsets(), late) else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        let (n_ev, n_tup) = (
            batch.n_events(),
            n.offsets().last().copied().unwrap_or(0) as usize,
        );
        if n_tup == 0 {
            return c.cpu.process(batch);
        }
        let (n_hits, n_cells) = (
            *qt.hit_off.last().unwrap_or(&0) as usize,
            *qt.cell_off.last().unwrap_or(&0) as usize,
        );
        let (n_th, n_tc) = (
            v.hit_offsets[n_tup] as usize,
            v.cell_offsets[n_tup] as usize,
        );
        let sz = QxSizes {
            n_ev,
            n_tup,
            n_hits,
            n_cells,
            n_th,
            n_tc,
        };
        let mut run = Run::start(c.gpu)?;
        // The tuples' lists (offsets as u32: the same bits) and the fits' state, pT and χ²
        // that the GPU `ca_ntuplets` and `track_fit` kept on the device; else (CPU steps,
        // lists that are not the device's) uploads.
        let lists_from_zero = v.hit_offsets[0] == 0 && v.cell_offsets[0] == 0;
        let (nm, fm) = (mirror_of(&n).filter(|_| lists_from_zero), mirror_of(&f));
        let (mut b, base) = self.upload(&mut run, &v, &qt, (nm, fm), sz)?;
        run.mark()?;
        let per_list = self.cfg.ntuplets.max_cell_tracks;
        // The cells' tuple lists, as the CPU's replay (all tuples listed, in tuple order).
        let vtco = b.dtco.view::<u32>(n_tup + 1);
        let lists = CellTracks::build(
            &mut run,
            CellTracksIn {
                n_ev,
                n_cells,
                n_tuples: n_tup,
                n_entries: n_tc,
                limit: u32::MAX,
                tup_off: b.dto.view(n_ev + 1),
                cstart: vtco.slice(..n_tup),
                cend: vtco.slice(1..),
                cells: b.dtc.view(n_tc.max(1)),
                cell_off: b.dco.view(n_ev + 1),
                cell_off_host: &qt.cell_off,
                base,
            },
        )?;
        lists.stats(&run, &b.dco, per_list, &mut b.non_empty, &mut b.dropped)?;
        self.launch_quality(&run, &mut b, &lists, sz)?;
        run.mark()?;
        let q = run.queue_of::<u8>(TRACKS, &b.dq, n_tup)?;
        let rounds = run.queue::<u32>(&b.drounds, n_ev)?;
        let (h_non_empty, h_dropped, h_bad) = (
            run.queue::<u32>(&b.non_empty, n_ev)?,
            run.queue::<u32>(&b.dropped, n_ev)?,
            run.queue::<u32>(&lists.bad, 1)?,
        );
        let (q, rounds, h_non_empty, h_dropped, h_bad) = (
            run.take(q)?,
            run.take(rounds)?,
            run.take(h_non_empty)?,
            run.take(h_dropped)?,
            run.take(h_bad)?,
        );
        drop(lists);
        let results = run.finish(&c.stats)?;
        // A tuple's cell past its event's (the CPU's error), or lists opened in the CPU's
        // push order (max_active_doublets binds): the CPU step.
        let max_lists = self.cfg.ntuplets.max_active_doublets as u64;
        if h_bad.as_slice()[0] != 0 || h_non_empty.iter().any(|&k| k as u64 + 1 > max_lists) {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        self.rounds.add(rounds.as_slice());
        let quality = per_event_quality(&qt.tup_off, q.as_slice())?;
        let overflows = h_dropped
            .iter()
            .map(|&d| {
                ntuplet_overflows(
                    &CaState {
                        track_overflows: d,
                        ..Default::default()
                    },
                    &self.cfg.ntuplets,
                )
            })
            .collect();
        self.tally.add(n_ev, &quality);
        publish_quality(batch, &f, &quality, overflows)?;
        record_results(batch, &results)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        // Counts of the batches computed here; the gpu line says how many went to the CPU step.
        let gpu = self.common.report().unwrap_or_default();
        Ok(Some(format!(
            "{} (on the device)\n{gpu}\n{}",
            self.tally.report(),
            self.rounds.report()
        )))
    }
}
