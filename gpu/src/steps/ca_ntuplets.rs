//! GPU `ca_ntuplets` (kernels in [`crate::kernels_ca::CA_NTUPLETS`]): connect, fishbone, the
//! depth-first search, the capped tuple lists of the cells and the early duplicate remover
//! on the device; the host assembles the products ([`super::ntuplet_event_listed`]), or replays
//! the lists with the CPU's functions where `max_active_doublets` binds
//! ([`super::ntuplet_event`]: both in `ca_ntuplets_host.rs`). The
//! same parameters, inputs and products as the CPU step, bit for bit.

use arrow_array::types::{UInt32Type, UInt8Type};
use arrow_array::{Array, BooleanArray};
use quiver_columnar::columns::values;
use quiver_columnar::{Error, EventBatch, Product, ProductKey, Result, Step, StepConfig};
use quiver_reco::tracks::ntuplets::{CaState, Tuples as NtTuples};
use quiver_reco::tracks::NtupletConfig;
use quiver_reco::tracks::{layer_start_from_det_index, CaConfig};

use cudarc::driver::CudaView;

use crate::args;
use crate::device::DeviceBuf;
use crate::kernels::ELEMENT_BLOCK;
use crate::kernels_ca::{RANK_LANES, STATS_RUN};
use crate::resident::CudaMirror;
use crate::steps::ca_ntuplets_dev::{Listed, NtIn, Tuples};
use crate::steps::ca_ntuplets_host::{ntuplet_event, ntuplet_event_listed};
use crate::steps::{
    batch_offsets, blocks, fallback, launch, record_results, seg_scan, Common, HostDets, Run,
};
use quiver_reco::steps::types::{CA_CELLS, NTUPLETS};
use std::sync::Arc;

/// The GPU `ca_ntuplets` step: connect, fishbone, ntuplet search, the cells' tuple lists and
/// the early duplicate remover on the device ([`crate::kernels_ca::CA_NTUPLETS`]).
pub(crate) struct CaNtupletsGpu {
    hits: ProductKey,
    doublets: ProductKey,
    cfg: CaConfig,
    common: Common,
}

impl CaNtupletsGpu {
    pub fn new(cfg: &StepConfig, common: Common, ca: CaConfig) -> Result<Self> {
        Ok(CaNtupletsGpu {
            hits: cfg.input("hits")?,
            doublets: cfg.input("doublets")?,
            cfg: ca,
            common,
        })
    }
}

/// Exclusive prefix sum with the total appended (`n + 1` entries).
pub(super) fn prefix(v: &[u32]) -> Result<Vec<u32>> {
    let mut out = Vec::with_capacity(v.len() + 1);
    out.push(0u32);
    for &x in v {
        let next = out
            .last()
            .unwrap_or(&0)
            .checked_add(x)
            .ok_or_else(|| Error::data("gpu ca_ntuplets: more than 2^32 entries in a batch"))?;
        out.push(next);
    }
    Ok(out)
}

/// What [`CellTracks::build`] reads: `n_tuples` tuples in events (`tup_off`, `n_ev + 1`
/// entries), the first `limit` of each event listed, tuple `g`'s event-local cells at
/// `cells[cstart[g]..cend[g]]`; `n_cells` batch cells (`cell_off`); `base[e]` the first
/// of event `e`'s list slots, `n_entries` slots in all (at least the listed tuples' cells).
pub(crate) struct CellTracksIn<'a> {
    pub n_ev: usize,
    pub n_cells: usize,
    pub n_tuples: usize,
    pub n_entries: usize,
    pub limit: u32,
    pub tup_off: CudaView<'a, u32>,
    pub cstart: CudaView<'a, u32>,
    pub cend: CudaView<'a, u32>,
    pub cells: CudaView<'a, u32>,
    pub cell_off: CudaView<'a, u32>,
    /// `cell_off` on the host.
    pub cell_off_host: &'a [u32],
    pub base: DeviceBuf,
}

/// The cells' tuple lists on the device (`ct_*` in [`crate::kernels_ca::CA_NTUPLETS`]):
/// the list of batch cell `c` of event `e` is `vals[base[e] + first[c]..][..count[c]]`, by
/// ascending tuple index, uncapped (readers keep the first `max_cell_tracks`); `bad[0]` is
/// set when a tuple names a cell past its event's.
pub(crate) struct CellTracks {
    pub count: DeviceBuf,
    pub first: DeviceBuf,
    pub base: DeviceBuf,
    pub vals: DeviceBuf,
    pub bad: DeviceBuf,
    n_ev: usize,
    n_cells: usize,
}

impl CellTracks {
    pub(crate) fn build(run: &mut Run, i: CellTracksIn) -> Result<Self> {
        let (ne, nc, nt) = (i.n_ev as u32, i.n_cells as u32, i.n_tuples as u32);
        let (mut count, mut first, mut total, mut cursor) = (
            run.zeros::<u32>(i.n_cells)?,
            run.out::<u32>(i.n_cells)?,
            run.out::<u32>(i.n_ev)?,
            run.zeros::<u32>(i.n_cells)?,
        );
        let (mut vals, mut bad) = (run.out::<u32>(i.n_entries.max(1))?, run.zeros::<u32>(1)?);
        let (vto, vcs, vce, vcells, vco, vb) = (
            &i.tup_off,
            &i.cstart,
            &i.cend,
            &i.cells,
            &i.cell_off,
            i.base.view::<u32>(i.n_ev),
        );
        {
            let (mut vn, mut vbad) = (count.view_mut::<u32>(i.n_cells), bad.view_mut::<u32>(1));
            let args = args::CtCount {
                n_tuples: &nt,
                tup_off: vto,
                n_events: &ne,
                limit: &i.limit,
                cstart: vcs,
                cend: vce,
                cells: vcells,
                cell_off: vco,
                count: &mut vn,
                bad: &mut vbad,
            };
            launch(run, args, blocks(i.n_tuples, ELEMENT_BLOCK))?;
        }
        {
            let (vn, mut vf, mut vt) = (
                count.view::<u32>(i.n_cells),
                first.view_mut::<u32>(i.n_cells),
                total.view_mut::<u32>(i.n_ev),
            );
            seg_scan(run, &vn, i.cell_off_host, vco, &mut vf, &mut vt)?;
        }
        {
            let (vf, mut vcu, mut vv) = (
                first.view::<u32>(i.n_cells),
                cursor.view_mut::<u32>(i.n_cells),
                vals.view_mut::<u32>(i.n_entries.max(1)),
            );
            let args = args::CtFill {
                n_tuples: &nt,
                tup_off: vto,
                n_events: &ne,
                limit: &i.limit,
                cstart: vcs,
                cend: vce,
                cells: vcells,
                cell_off: vco,
                first: &vf,
                base: &vb,
                cursor: &mut vcu,
                vals: &mut vv,
            };
            launch(run, args, blocks(i.n_tuples, ELEMENT_BLOCK))?;
        }
        {
            let (vn, vf, mut vv) = (
                count.view::<u32>(i.n_cells),
                first.view::<u32>(i.n_cells),
                vals.view_mut::<u32>(i.n_entries.max(1)),
            );
            let args = args::CtSort {
                n_cells: &nc,
                cell_off: vco,
                n_events: &ne,
                count: &vn,
                first: &vf,
                base: &vb,
                vals: &mut vv,
            };
            launch(run, args, blocks(i.n_cells, ELEMENT_BLOCK))?;
        }
        Ok(CellTracks {
            count,
            first,
            base: i.base,
            vals,
            bad,
            n_ev: i.n_ev,
            n_cells: i.n_cells,
        })
    }

    /// Per event: the non-empty lists, and the entries past `per_list` (the CPU's list
    /// overflows).
    pub(crate) fn stats(
        &self,
        run: &Run,
        cell_off: &DeviceBuf,
        per_list: u32,
        non_empty: &mut DeviceBuf,
        dropped: &mut DeviceBuf,
    ) -> Result<()> {
        let (ne, nc) = (self.n_ev as u32, self.n_cells as u32);
        let (vn, vco, mut vne, mut vd) = (
            self.count.view::<u32>(self.n_cells),
            cell_off.view::<u32>(self.n_ev + 1),
            non_empty.view_mut::<u32>(self.n_ev),
            dropped.view_mut::<u32>(self.n_ev),
        );
        let args = args::NtListStats {
            count: &vn,
            n_cells: &nc,
            cell_off: &vco,
            n_events: &ne,
            per_list: &per_list,
            non_empty: &mut vne,
            dropped: &mut vd,
        };
        launch(
            run,
            args,
            blocks(self.n_cells.div_ceil(STATS_RUN as usize), ELEMENT_BLOCK),
        )
    }
}

/// The products' events from the tuples that came back: the device's lists where they
/// are the CPU's (`on_device`), else the CPU's replay, event by event.
#[allow(clippy::type_complexity)]
fn assemble(
    n: &NtupletConfig,
    d: &Product,
    on_device: bool,
    (h_tup, tup_off, hit_pos): (&[u32], &[u32], &[u32]),
    (h_len, h_hits, h_cells, h_q, h_tdrop): (&[u32], &[u32], &[u32], &[u8], &[u32]),
    h_dropped: &[u32],
    n_ev: usize,
) -> Result<Vec<(NtTuples, CaState)>> {
    let mut out = Vec::with_capacity(n_ev);
    for e in 0..n_ev {
        let found = h_tup[e];
        let stored = found.min(n.max_tuples) as usize;
        let t0 = tup_off[e] as usize;
        let (hp, cp) = (hit_pos[e] as usize, hit_pos[e] as usize - t0);
        let (lengths, hits, cells) = (
            &h_len[t0..t0 + stored],
            &h_hits[hp..hit_pos[e + 1] as usize],
            &h_cells[cp..hit_pos[e + 1] as usize - tup_off[e + 1] as usize],
        );
        let r = if on_device {
            ntuplet_event_listed(
                n,
                found,
                lengths,
                hits,
                cells,
                &h_q[t0..t0 + stored],
                h_dropped[e],
                h_tdrop[e],
            )
        } else {
            ntuplet_event(
                n,
                d.event_rows(e).len(),
                found,
                lengths,
                hits,
                cells,
                h_dropped[e],
            )
        };
        out.push(r.map_err(|m| Error::data(format!("gpu ca_ntuplets: event {e}: {m}")))?);
    }
    Ok(out)
}

/// The tuples' hit and cell offsets (batch rows) from one scan of their lengths.
fn list_offsets(
    run: &mut Run,
    tlen: &DeviceBuf,
    n_tuples: usize,
) -> Result<(DeviceBuf, DeviceBuf)> {
    let whole = [0u32, n_tuples as u32];
    let dwhole = run.up(&whole)?;
    let (mut first, mut total) = (run.out::<u32>(n_tuples)?, run.out::<u32>(1)?);
    {
        let (vl, vw, mut vf, mut vt) = (
            tlen.view::<u32>(n_tuples),
            dwhole.view::<u32>(2),
            first.view_mut::<u32>(n_tuples),
            total.view_mut::<u32>(1),
        );
        seg_scan(run, &vl, &whole, &vw, &mut vf, &mut vt)?;
    }
    let (mut hoff, mut coff) = (run.out::<u32>(n_tuples + 1)?, run.out::<u32>(n_tuples + 1)?);
    {
        let (nt, vf, vt) = (
            n_tuples as u32,
            first.view::<u32>(n_tuples),
            total.view::<u32>(1),
        );
        let (mut vh, mut vc) = (
            hoff.view_mut::<u32>(n_tuples + 1),
            coff.view_mut::<u32>(n_tuples + 1),
        );
        let args = args::NtListOffsets {
            n: &nt,
            first: &vf,
            total: &vt,
            hit_off: &mut vh,
            cell_off: &mut vc,
        };
        launch(run, args, blocks(n_tuples + 1, ELEMENT_BLOCK))?;
    }
    Ok((hoff, coff))
}

/// `cn_check_cells`: whether a device-resident cell names a hit its event does not have.
fn cells_bad(
    run: &mut Run,
    (di, dout): (&DeviceBuf, &DeviceBuf),
    (dco, dho): (&DeviceBuf, &DeviceBuf),
    n_ev: usize,
    n_cells: usize,
) -> Result<bool> {
    let (ne, nc) = (n_ev as u32, n_cells as u32);
    let mut bad = run.zeros::<u32>(1)?;
    {
        let (vi, vo, vco, vho, mut vb) = (
            di.view::<u32>(n_cells),
            dout.view::<u32>(n_cells),
            dco.view::<u32>(n_ev + 1),
            dho.view::<u32>(n_ev + 1),
            bad.view_mut::<u32>(1),
        );
        let args = args::CnCheckCells {
            inner: &vi,
            outer: &vo,
            n_cells: &nc,
            cell_off: &vco,
            n_events: &ne,
            hit_off: &vho,
            bad: &mut vb,
        };
        launch(run, args, blocks(n_cells, ELEMENT_BLOCK))?;
    }
    Ok(run.down::<u32>(&bad, 1)?.as_slice()[0] != 0)
}

impl CaNtupletsGpu {
    /// What the CPU step rejects (host cells naming hits the event does not have, columns
    /// that do not fit, hits out of layer order): `true` sends the batch to the CPU step.
    fn host_refuses(
        &self,
        batch: &EventBatch,
        h: &Product,
        det: &[u16],
        on_device: bool,
    ) -> Result<bool> {
        let n_ev = batch.n_events();
        if !on_device {
            let d = batch.get(&self.doublets)?;
            let (inner, outer, pair) = (
                values::<UInt32Type>(&d, "inner")?,
                values::<UInt32Type>(&d, "outer")?,
                values::<UInt8Type>(&d, "pair")?,
            );
            let listed = d
                .batch()
                .column_by_name("listed")
                .and_then(|a| a.as_any().downcast_ref::<BooleanArray>().map(|b| b.len()));
            if listed != Some(inner.len())
                || outer.len() != inner.len()
                || pair.len() != inner.len()
            {
                return Ok(true);
            }
            for e in 0..n_ev {
                let (nh, cr) = (h.event_rows(e).len() as u32, d.event_rows(e));
                if inner[cr.clone()].iter().chain(&outer[cr]).any(|&i| i >= nh) {
                    return Ok(true);
                }
            }
        }
        for e in 0..n_ev {
            if layer_start_from_det_index(&det[h.event_rows(e)]).is_err() {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// `nt_alive_bits`: the cells' alive flags packed, 1 bit per cell, as the product's bitmap.
fn alive_words(run: &mut Run, dead: &DeviceBuf, nc: u32, n_cells: usize) -> Result<DeviceBuf> {
    let n_words = n_cells.div_ceil(32);
    let mut words = run.out::<u32>(n_words)?;
    {
        let (vd, mut vw) = (dead.view::<u8>(n_cells), words.view_mut::<u32>(n_words));
        let args = args::NtAliveBits {
            dead: &vd,
            n_cells: &nc,
            words: &mut vw,
        };
        launch(run, args, blocks(n_words, ELEMENT_BLOCK))?;
    }
    Ok(words)
}

/// Whether the product's lists are the device's as they lie: every tuple found stored, each
/// event's lists where the search wrote them.
fn lists_as_written(
    n: &NtupletConfig,
    h_tup: &[u32],
    out: &[(NtTuples, CaState)],
    (n_tuples, n_tuple_hits, n_tuple_cells): (usize, usize, usize),
) -> bool {
    n_tuples > 0
        && h_tup.iter().all(|&f| f <= n.max_tuples)
        && out.iter().map(|(t, _)| t.hits.len()).sum::<usize>() == n_tuple_hits
        && out
            .iter()
            .map(|(_, ca)| ca.tuple_cells.len())
            .sum::<usize>()
            == n_tuple_cells
}

impl CaNtupletsGpu {
    /// The device's part from the cells' neighbours on (`nt`: the checked hits and cells;
    /// `d`, `dco`: the cells' product and offsets): the search, the lists, the fishbone,
    /// and the products.
    fn search(
        &self,
        batch: &mut EventBatch,
        mut run: Run,
        nt: &NtIn,
        d: &Product,
        dco: &DeviceBuf,
    ) -> Result<()> {
        let c = &self.common;
        let n = &self.cfg.ntuplets;
        let (n_ev, n_cells, nc) = (nt.n_ev, nt.n_cells, nt.nc);
        // The cells by one of their hits (ascending index): by inner hit for the connect, by
        // outer hit (listed cells only) for the fishbone.
        let Some(nb) = nt.neighbours(&mut run, n)? else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };

        let mut dead = run.zeros::<u8>(n_cells)?;
        let fishbone_index = if n.early_fishbone || n.late_fishbone {
            Some(nt.index(&mut run, &nt.vo, 1)?)
        } else {
            None
        };
        if n.early_fishbone {
            nt.fishbone(&run, &fishbone_index, &nb.used, 0, &nb.used, &mut dead)?;
        }

        // The search: count, per-event prefix sums, write at the CPU's places.
        let Some(tp) = nt.tuples(&mut run, n, &nb, &dead)? else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        // The cells' tuple lists and the early duplicate remover, on the device.
        let ls = nt.lists(&mut run, n, dco, &tp)?;
        let Tuples {
            tup_off,
            hit_pos,
            h_tup,
            n_tuples,
            n_tuple_hits,
            n_tuple_cells,
            tlen,
            thits,
            tcells,
            ..
        } = tp;
        let Listed {
            h_len,
            h_hits,
            h_cells,
            h_q,
            h_tne,
            h_tdrop,
            h_bad,
            has_track,
            ..
        } = ls;
        // Where max_active_doublets binds (the CPU's push order opens the lists), or a cell is
        // past its event (the CPU's error): the CPU's replay, event by event.
        let on_device = h_bad.as_slice()[0] == 0
            && h_tne
                .iter()
                .all(|&k| (k as u64) < n.max_active_doublets as u64);

        let out = assemble(
            n,
            d,
            on_device,
            (&h_tup, &tup_off, &hit_pos),
            (&h_len, &h_hits, &h_cells, &h_q, &h_tdrop),
            &nb.h_dropped,
            n_ev,
        )?;
        // The tuples' lists stay on the device for the GPU `track_fit` and `track_quality`
        // when the product's lists are the device's as they lie: every tuple found stored,
        // each event's lists where the search wrote them. Their offsets (batch rows, as the
        // product's) from one scan of the lengths over the batch.
        let as_written =
            on_device && lists_as_written(n, &h_tup, &out, (n_tuples, n_tuple_hits, n_tuple_cells));
        let offsets = if as_written {
            Some(list_offsets(&mut run, &tlen, n_tuples)?)
        } else {
            None
        };
        if n.late_fishbone {
            // On the cells that carry a tuple.
            if on_device {
                nt.fishbone(&run, &fishbone_index, &nb.used, 1, &has_track, &mut dead)?;
            } else {
                let mut has_track = Vec::with_capacity(n_cells);
                for (_, ca) in &out {
                    has_track.extend(ca.cell_tracks.iter().map(|l| u8::from(!l.is_empty())));
                }
                let dht = run.up(&has_track)?;
                nt.fishbone(&run, &fishbone_index, &nb.used, 1, &dht, &mut dead)?;
            }
        }
        // The alive flags come back packed (1 bit per cell, as the product's bitmap).
        let n_words = n_cells.div_ceil(32);
        let words = alive_words(&mut run, &dead, nc, n_cells)?;
        run.mark()?;
        let h_words = run.down_of::<u32>(CA_CELLS, &words, n_words)?;
        let results = run.finish(&c.stats)?;
        let alive =
            arrow_buffer::BooleanBuffer::new(h_words.into_scalar_buffer().into_inner(), 0, n_cells);
        let mirror = match offsets {
            Some((hoff, coff)) => Some(
                CudaMirror::new()
                    .with::<u32>("hits.values", Arc::new(thits), n_tuple_hits)?
                    .with::<u32>("cells.values", Arc::new(tcells), n_tuple_cells)?
                    .with::<u32>("hits.offsets", Arc::new(hoff), n_tuples + 1)?
                    .with::<u32>("cells.offsets", Arc::new(coff), n_tuples + 1)?,
            ),
            None => None,
        };
        quiver_reco::steps::publish_ntuplets(batch, d.offsets(), &out, alive, n)?;
        if let Some(m) = mirror {
            batch.attach_device(NTUPLETS, Arc::new(m))?;
        }
        record_results(batch, &results)
    }
}

impl Step for CaNtupletsGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        // The hits' detIndex only on the host: the kernels read the other columns there.
        let hd = HostDets::get(batch, &self.hits)?;
        let (h, det) = (&hd.product, hd.det());
        let n_ev = batch.n_events();
        // The cells: a GPU `ca_doublets`' device-resident product (checked on the device
        // below, never downloaded here), or a host product (checked here, uploaded once).
        let d = batch.get_resident(&self.doublets)?;
        let on_device = d.device_data().is_some_and(|x| {
            x.as_any()
                .downcast_ref::<crate::resident::CudaColumns>()
                .is_some()
        });
        // What the CPU step rejects (hits out of layer order, cells naming hits the event does
        // not have, columns that do not fit) goes to the CPU step for its exact message.
        if h.offsets().len() != n_ev + 1 || d.offsets().len() != n_ev + 1 {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        if self.host_refuses(batch, h, det, on_device)? {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        let (n_hits, n_cells) = (det.len(), *d.offsets().last().unwrap_or(&0) as usize);
        if n_cells == 0 {
            return c.cpu.process(batch);
        }
        // The index's rank kernel runs RANK_LANES threads per hit, numbered in 32 bits.
        if n_hits.saturating_mul(RANK_LANES as usize) > u32::MAX as usize {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        let (hit_off, cell_off) = (batch_offsets(h.offsets()), batch_offsets(d.offsets()));
        let (ne, nc, nh) = (n_ev as u32, n_cells as u32, n_hits as u32);

        let mut run = Run::start(c.gpu)?;
        let hd = crate::resident::columns_on_device(batch, &self.hits, c.gpu)?;
        let hc = crate::resident::cuda(&hd);
        let (dx, dy, dz, dr, ddet) = (
            hc.column("x_global")?,
            hc.column("y_global")?,
            hc.column("z_global")?,
            hc.column("r_global")?,
            hc.column("det_index")?,
        );
        let (dho, dco) = (run.up(&hit_off)?, run.up(&cell_off)?);
        // The cells: the GPU `ca_doublets`' device columns, or one upload for the batch.
        let dd = crate::resident::columns_on_device(batch, &self.doublets, c.gpu)?;
        let dc = crate::resident::cuda(&dd);
        let (di, dout, dp, dl) = (
            dc.column("inner")?,
            dc.column("outer")?,
            dc.column("pair")?,
            dc.column("listed")?,
        );
        if on_device {
            // Before any kernel indexes hits by these cells.
            if cells_bad(&mut run, (di, dout), (&dco, &dho), n_ev, n_cells)? {
                drop(run);
                return fallback(c.cpu.as_ref(), &c.stats, batch);
            }
        }
        run.mark()?;
        let nt = NtIn {
            n_ev,
            n_hits,
            n_cells,
            ne,
            nc,
            nh,
            cell_off: &cell_off,
            vx: dx.view::<f32>(n_hits),
            vy: dy.view::<f32>(n_hits),
            vz: dz.view::<f32>(n_hits),
            vr: dr.view::<f32>(n_hits),
            vdet: ddet.view::<u16>(n_hits),
            vho: dho.view::<u32>(n_ev + 1),
            vco: dco.view::<u32>(n_ev + 1),
            vi: di.view::<u32>(n_cells),
            vo: dout.view::<u32>(n_cells),
            vp: dp.view::<u8>(n_cells),
            vl: dl.view::<u8>(n_cells),
        };

        self.search(batch, run, &nt, &d, &dco)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}
