//! The device half of the GPU `ca_ntuplets` ([`super::ca_ntuplets`]): the batch's hits and
//! cells as the kernels read them, and the kernels its `process` launches more than once
//! (the cells' index, connect, the search, the fishbone) or with a segmented scan.

use cudarc::driver::CudaView;
use quiver_columnar::{PoolVec, Result};

use super::ca_ntuplets::{prefix, CellTracks, CellTracksIn};
use quiver_reco::steps::types::NTUPLETS;
use quiver_reco::tracks::NtupletConfig;

use crate::args;
use crate::device::DeviceBuf;
use crate::kernels::ELEMENT_BLOCK;
use crate::kernels_ca::{CONNECT_KEPT, RANK_LANES, SCAN_BLOCK, STATS_RUN};
use crate::steps::{blocks, launch, seg_scan, Run};

/// A batch's hits (x, y, z, r, detIndex) and cells (inner, outer, pair, listed) on the
/// device, the events' hit and cell offsets, and the counts (also as u32: `ne`, `nc`,
/// `nh`).
pub(super) struct NtIn<'a> {
    pub n_ev: usize,
    pub n_hits: usize,
    pub n_cells: usize,
    pub ne: u32,
    pub nc: u32,
    pub nh: u32,
    pub cell_off: &'a [u32],
    pub vx: CudaView<'a, f32>,
    pub vy: CudaView<'a, f32>,
    pub vz: CudaView<'a, f32>,
    pub vr: CudaView<'a, f32>,
    pub vdet: CudaView<'a, u16>,
    pub vho: CudaView<'a, u32>,
    pub vco: CudaView<'a, u32>,
    pub vi: CudaView<'a, u32>,
    pub vo: CudaView<'a, u32>,
    pub vp: CudaView<'a, u8>,
    pub vl: CudaView<'a, u8>,
}

impl NtIn<'_> {
    /// The cells by one of their hits (ascending index), `key` (inner or outer hits; with
    /// `filter`, the listed cells only): each hit's first entry and the sorted cells.
    pub fn index(
        &self,
        run: &mut Run,
        key: &CudaView<u32>,
        filter: u32,
    ) -> Result<(DeviceBuf, DeviceBuf)> {
        let (n_hits, n_cells) = (self.n_hits, self.n_cells);
        let (mut count, mut start, mut cursor, mut idx) = (
            run.zeros::<u32>(n_hits)?,
            run.out::<u32>(n_hits + 1)?,
            run.out::<u32>(n_hits)?,
            run.out::<u32>(n_cells)?,
        );
        let mut sorted = run.out::<u32>(n_cells)?;
        {
            let mut v = count.view_mut::<u32>(n_hits);
            let args = args::CnIndexCount {
                key,
                filter: &filter,
                only: &self.vl,
                n_cells: &self.nc,
                cell_off: &self.vco,
                n_events: &self.ne,
                hit_off: &self.vho,
                count: &mut v,
            };
            launch(run, args, blocks(n_cells, ELEMENT_BLOCK))?;
        }
        {
            let v = count.view::<u32>(n_hits);
            let (mut s, mut cu) = (
                start.view_mut::<u32>(n_hits + 1),
                cursor.view_mut::<u32>(n_hits),
            );
            let cfg = cudarc::driver::LaunchConfig {
                grid_dim: (self.ne, 1, 1),
                block_dim: (SCAN_BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            let args = args::CnIndexScan {
                count: &v,
                hit_off: &self.vho,
                cell_off: &self.vco,
                n_events: &self.ne,
                start: &mut s,
                cursor: &mut cu,
            };
            launch(run, args, cfg)?;
        }
        {
            let (mut cu, mut ix) = (cursor.view_mut::<u32>(n_hits), idx.view_mut::<u32>(n_cells));
            let args = args::CnIndexFill {
                key,
                filter: &filter,
                only: &self.vl,
                n_cells: &self.nc,
                cell_off: &self.vco,
                n_events: &self.ne,
                hit_off: &self.vho,
                cursor: &mut cu,
                index: &mut ix,
            };
            launch(run, args, blocks(n_cells, ELEMENT_BLOCK))?;
        }
        {
            let (s, ix, mut so) = (
                start.view::<u32>(n_hits + 1),
                idx.view::<u32>(n_cells),
                sorted.view_mut::<u32>(n_cells),
            );
            let args = args::CnIndexRank {
                start: &s,
                n_hits: &self.nh,
                index: &ix,
                sorted: &mut so,
            };
            launch(
                run,
                args,
                blocks(n_hits * RANK_LANES as usize, ELEMENT_BLOCK),
            )?;
        }
        Ok((start, sorted))
    }

    /// One pass of `cn_connect`: count (`write` = 0) or write the neighbours at `push_off`;
    /// `(vsi, vbi)`: the cells by inner hit.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &self,
        run: &Run,
        n: &NtupletConfig,
        (vsi, vbi): (&CudaView<u32>, &CudaView<u32>),
        write: u32,
        ncount: &mut DeviceBuf,
        first: &DeviceBuf,
        push_off: &DeviceBuf,
        out: &mut DeviceBuf,
        n_out: usize,
        used: &mut DeviceBuf,
        kept: &mut DeviceBuf,
    ) -> Result<()> {
        let (n_ev, n_cells) = (self.n_ev, self.n_cells);
        let (mut vn, vf, vpo, mut vout, mut vu) = (
            ncount.view_mut::<u32>(n_cells),
            first.view::<u32>(n_cells),
            push_off.view::<u32>(n_ev + 1),
            out.view_mut::<u32>(n_out.max(1)),
            used.view_mut::<u8>(n_cells),
        );
        let mut vk = kept.view_mut::<u32>(n_cells * CONNECT_KEPT);
        let args = args::CnConnect {
            write: &write,
            n_cells: &self.nc,
            cell_off: &self.vco,
            n_events: &self.ne,
            hit_off: &self.vho,
            x: &self.vx,
            y: &self.vy,
            z: &self.vz,
            r: &self.vr,
            det: &self.vdet,
            inner: &self.vi,
            outer: &self.vo,
            listed: &self.vl,
            start: vsi,
            by_inner: vbi,
            ptmin: &n.ptmin,
            theta_barrel: &n.ca_theta_cut_barrel,
            theta_forward: &n.ca_theta_cut_forward,
            dca_inner: &n.dca_cut_inner_triplet,
            dca_outer: &n.dca_cut_outer_triplet,
            hard_curv: &n.hard_curv_cut,
            count: &mut vn,
            first: &vf,
            push_off: &vpo,
            out: &mut vout,
            used: &mut vu,
            kept: &mut vk,
        };
        launch(run, args, blocks(n_cells, ELEMENT_BLOCK))
    }

    /// A per-event scan of a per-cell count: each cell's first place and the events' totals.
    pub fn scan(
        &self,
        run: &mut Run,
        value: &DeviceBuf,
        first: &mut DeviceBuf,
        total: &mut DeviceBuf,
    ) -> Result<()> {
        let (n_ev, n_cells) = (self.n_ev, self.n_cells);
        let (v, mut f, mut t) = (
            value.view::<u32>(n_cells),
            first.view_mut::<u32>(n_cells),
            total.view_mut::<u32>(n_ev),
        );
        seg_scan(run, &v, self.cell_off, &self.vco, &mut f, &mut t)
    }

    /// `nt_fishbone` over the cells by outer hit (`index`; nothing without it).
    pub fn fishbone(
        &self,
        run: &Run,
        index: &Option<(DeviceBuf, DeviceBuf)>,
        used: &DeviceBuf,
        check_track: u32,
        has_track: &DeviceBuf,
        dead: &mut DeviceBuf,
    ) -> Result<()> {
        let (n_hits, n_cells) = (self.n_hits, self.n_cells);
        let Some((start_o, by_outer)) = index else {
            return Ok(());
        };
        let (vs, vb, vu, vht, mut vd) = (
            start_o.view::<u32>(n_hits + 1),
            by_outer.view::<u32>(n_cells),
            used.view::<u8>(n_cells),
            has_track.view::<u8>(n_cells),
            dead.view_mut::<u8>(n_cells),
        );
        let args = args::NtFishbone {
            n_hits: &self.nh,
            hit_off: &self.vho,
            n_events: &self.ne,
            cell_off: &self.vco,
            x: &self.vx,
            y: &self.vy,
            z: &self.vz,
            det: &self.vdet,
            inner: &self.vi,
            start: &vs,
            by_outer: &vb,
            used: &vu,
            check_track: &check_track,
            has_track: &vht,
            dead: &mut vd,
        };
        launch(run, args, blocks(n_hits, ELEMENT_BLOCK))
    }

    /// One pass of `nt_search`: count (`write` = 0), or write the tuples at the scanned
    /// places; `(ncount, first, dpo, nbr, n_push)`: the cells' neighbours.
    #[allow(clippy::too_many_arguments)]
    pub fn search(
        &self,
        run: &Run,
        n: &NtupletConfig,
        (ncount, first, dpo, nbr, n_push): (&DeviceBuf, &DeviceBuf, &DeviceBuf, &DeviceBuf, usize),
        write: u32,
        n_tup: &mut DeviceBuf,
        n_hit: &mut DeviceBuf,
        tf: &DeviceBuf,
        hf: &DeviceBuf,
        to: &DeviceBuf,
        ho: &DeviceBuf,
        outs: [&mut DeviceBuf; 5],
        sizes: [usize; 3],
        dead: &DeviceBuf,
        err: &mut DeviceBuf,
    ) -> Result<()> {
        let (n_ev, n_cells) = (self.n_ev, self.n_cells);
        let [tl, tcs, tce, oh, oc] = outs;
        let (vdd, vn, vf, vpo, vnb) = (
            dead.view::<u8>(n_cells),
            ncount.view::<u32>(n_cells),
            first.view::<u32>(n_cells),
            dpo.view::<u32>(n_ev + 1),
            nbr.view::<u32>(n_push.max(1)),
        );
        let (mut vt, mut vh, vtf, vhf, vto, vhoo) = (
            n_tup.view_mut::<u32>(n_cells),
            n_hit.view_mut::<u32>(n_cells),
            tf.view::<u32>(n_cells),
            hf.view::<u32>(n_cells),
            to.view::<u32>(n_ev + 1),
            ho.view::<u32>(n_ev + 1),
        );
        let (mut vtl, mut voh, mut voc, mut ve) = (
            tl.view_mut::<u32>(sizes[0].max(1)),
            oh.view_mut::<u32>(sizes[1].max(1)),
            oc.view_mut::<u32>(sizes[2].max(1)),
            err.view_mut::<u32>(1),
        );
        let (mut vcs, mut vce) = (
            tcs.view_mut::<u32>(sizes[0].max(1)),
            tce.view_mut::<u32>(sizes[0].max(1)),
        );
        let args = args::NtSearch {
            write: &write,
            n_cells: &self.nc,
            cell_off: &self.vco,
            n_events: &self.ne,
            inner: &self.vi,
            outer: &self.vo,
            pair: &self.vp,
            dead: &vdd,
            ncount: &vn,
            first: &vf,
            push_off: &vpo,
            nbr: &vnb,
            per_list: &n.max_cell_neighbors,
            min_hits: &n.min_hits_per_ntuplet,
            max_tuples: &n.max_tuples,
            n_tuples: &mut vt,
            n_hits: &mut vh,
            tuple_first: &vtf,
            hit_first: &vhf,
            tuple_off: &vto,
            hit_off_out: &vhoo,
            tuple_len: &mut vtl,
            tuple_cstart: &mut vcs,
            tuple_cend: &mut vce,
            out_hits: &mut voh,
            out_cells: &mut voc,
            error: &mut ve,
        };
        launch(run, args, blocks(n_cells, ELEMENT_BLOCK))
    }
}

/// The cells' neighbours (`cn_connect`'s two passes): the cells by inner hit, each cell's
/// count and first place, the events' totals and list stats, the used flags, the push
/// offsets and the neighbours, and (on the host) the neighbour lists dropped per event.
/// Fields `process` does not read are held, as before the split, until it returns.
#[allow(dead_code)]
pub(super) struct Neighbours {
    pub start_i: DeviceBuf,
    pub by_inner: DeviceBuf,
    pub ncount: DeviceBuf,
    pub first: DeviceBuf,
    pub ntotal: DeviceBuf,
    pub non_empty: DeviceBuf,
    pub dropped: DeviceBuf,
    pub used: DeviceBuf,
    pub dpo: DeviceBuf,
    pub nbr: DeviceBuf,
    pub n_push: usize,
    pub h_dropped: PoolVec<u32>,
}

/// The tuples (`nt_search`'s two passes): the per-cell counts and places, the events'
/// totals (device and host) and offsets, and the tuples' lengths, hits, cells and cell
/// ranges.
/// Fields `process` does not read are held, as before the split, until it returns.
#[allow(dead_code)]
pub(super) struct Tuples {
    pub n_tup: DeviceBuf,
    pub n_hit: DeviceBuf,
    pub err: DeviceBuf,
    pub tup_first: DeviceBuf,
    pub hit_first: DeviceBuf,
    pub tup_total: DeviceBuf,
    pub hit_total: DeviceBuf,
    pub h_tup: PoolVec<u32>,
    pub h_hit: PoolVec<u32>,
    pub tup_off: Vec<u32>,
    pub hit_pos: Vec<u32>,
    pub n_tuples: usize,
    pub n_tuple_hits: usize,
    pub n_tuple_cells: usize,
    pub dto: DeviceBuf,
    pub dhp: DeviceBuf,
    pub tlen: DeviceBuf,
    pub thits: DeviceBuf,
    pub tcells: DeviceBuf,
    pub cstart: DeviceBuf,
    pub cend: DeviceBuf,
}

impl NtIn<'_> {
    /// The cells' neighbours; `None` where `max_active_doublets` binds (the CPU step).
    pub fn neighbours(&self, run: &mut Run, n: &NtupletConfig) -> Result<Option<Neighbours>> {
        let (n_ev, n_hits, n_cells) = (self.n_ev, self.n_hits, self.n_cells);
        let (start_i, by_inner) = self.index(run, &self.vi, 0)?;
        let (vsi, vbi) = (
            start_i.view::<u32>(n_hits + 1),
            by_inner.view::<u32>(n_cells),
        );
        let (mut ncount, mut first, mut ntotal) = (
            run.out::<u32>(n_cells)?,
            run.out::<u32>(n_cells)?,
            run.out::<u32>(n_ev)?,
        );
        let (mut non_empty, mut dropped) = (run.zeros::<u32>(n_ev)?, run.zeros::<u32>(n_ev)?);
        let mut used = run.zeros::<u8>(n_cells)?;
        // The first neighbours of each cell, kept by the count pass for the write pass.
        let mut kept = run.out::<u32>(n_cells * CONNECT_KEPT)?;
        {
            let (no_off, mut no_out) = (run.zeros::<u32>(n_ev + 1)?, run.out::<u32>(1)?);
            self.connect(
                run,
                n,
                (&vsi, &vbi),
                0,
                &mut ncount,
                &first,
                &no_off,
                &mut no_out,
                1,
                &mut used,
                &mut kept,
            )?;
        }
        self.scan(run, &ncount, &mut first, &mut ntotal)?;
        {
            let (vn, mut vne, mut vd) = (
                ncount.view::<u32>(n_cells),
                non_empty.view_mut::<u32>(n_ev),
                dropped.view_mut::<u32>(n_ev),
            );
            let args = args::NtListStats {
                count: &vn,
                n_cells: &self.nc,
                cell_off: &self.vco,
                n_events: &self.ne,
                per_list: &n.max_cell_neighbors,
                non_empty: &mut vne,
                dropped: &mut vd,
            };
            launch(
                run,
                args,
                blocks(n_cells.div_ceil(STATS_RUN as usize), ELEMENT_BLOCK),
            )?;
        }
        let (h_total, h_non_empty, h_dropped) = (
            run.queue::<u32>(&ntotal, n_ev)?,
            run.queue::<u32>(&non_empty, n_ev)?,
            run.queue::<u32>(&dropped, n_ev)?,
        );
        let (h_total, h_non_empty, h_dropped) = (
            run.take(h_total)?,
            run.take(h_non_empty)?,
            run.take(h_dropped)?,
        );
        run.sync()?;
        // max_active_doublets binds: the lists opened depend on the CPU's push order.
        if h_non_empty
            .iter()
            .any(|&k| k as u64 + 1 > n.max_active_doublets as u64)
        {
            return Ok(None);
        }
        let push_off = prefix(h_total.as_slice())?;
        let n_push = *push_off.last().unwrap_or(&0) as usize;
        let dpo = run.up(&push_off)?;
        let mut nbr = run.out::<u32>(n_push.max(1))?;
        self.connect(
            run,
            n,
            (&vsi, &vbi),
            1,
            &mut ncount,
            &first,
            &dpo,
            &mut nbr,
            n_push,
            &mut used,
            &mut kept,
        )?;
        drop(kept);
        Ok(Some(Neighbours {
            start_i,
            by_inner,
            ncount,
            first,
            ntotal,
            non_empty,
            dropped,
            used,
            dpo,
            nbr,
            n_push,
            h_dropped,
        }))
    }

    /// The search: count, per-event prefix sums, write at the CPU's places; `None` for a
    /// path longer than the search allows (the CPU step).
    pub fn tuples(
        &self,
        run: &mut Run,
        n: &NtupletConfig,
        nb: &Neighbours,
        dead: &DeviceBuf,
    ) -> Result<Option<Tuples>> {
        let (n_ev, n_cells) = (self.n_ev, self.n_cells);
        let (mut n_tup, mut n_hit, mut err) = (
            run.out::<u32>(n_cells)?,
            run.out::<u32>(n_cells)?,
            run.zeros::<u32>(1)?,
        );
        let (mut tup_first, mut hit_first, mut tup_total, mut hit_total) = (
            run.out::<u32>(n_cells)?,
            run.out::<u32>(n_cells)?,
            run.out::<u32>(n_ev)?,
            run.out::<u32>(n_ev)?,
        );
        {
            let (z1, z2, mut o1, mut o2, mut o3, mut o4, mut o5) = (
                run.zeros::<u32>(n_ev + 1)?,
                run.zeros::<u32>(n_ev + 1)?,
                run.out::<u32>(1)?,
                run.out::<u32>(1)?,
                run.out::<u32>(1)?,
                run.out::<u32>(1)?,
                run.out::<u32>(1)?,
            );
            self.search(
                run,
                n,
                (&nb.ncount, &nb.first, &nb.dpo, &nb.nbr, nb.n_push),
                0,
                &mut n_tup,
                &mut n_hit,
                &tup_first,
                &hit_first,
                &z1,
                &z2,
                [&mut o1, &mut o2, &mut o3, &mut o4, &mut o5],
                [1, 1, 1],
                dead,
                &mut err,
            )?;
        }
        self.scan(run, &n_tup, &mut tup_first, &mut tup_total)?;
        self.scan(run, &n_hit, &mut hit_first, &mut hit_total)?;
        let (h_tup, h_hit, h_err) = (
            run.queue::<u32>(&tup_total, n_ev)?,
            run.queue::<u32>(&hit_total, n_ev)?,
            run.queue::<u32>(&err, 1)?,
        );
        let (h_tup, h_hit, h_err) = (run.take(h_tup)?, run.take(h_hit)?, run.take(h_err)?);
        run.sync()?;
        // A path longer than the search allows: the CPU step reports it.
        if h_err.as_slice()[0] != 0 {
            return Ok(None);
        }
        let (tup_off, hit_pos) = (prefix(h_tup.as_slice())?, prefix(h_hit.as_slice())?);
        let (n_tuples, n_tuple_hits) = (
            *tup_off.last().unwrap_or(&0) as usize,
            *hit_pos.last().unwrap_or(&0) as usize,
        );
        let n_tuple_cells = n_tuple_hits - n_tuples;
        let (dto, dhp) = (run.up(&tup_off)?, run.up(&hit_pos)?);
        let (mut tlen, mut thits, mut tcells) = (
            run.zeros::<u32>(n_tuples.max(1))?,
            run.out::<u32>(n_tuple_hits.max(1))?,
            run.out::<u32>(n_tuple_cells.max(1))?,
        );
        let (mut cstart, mut cend) = (
            run.out::<u32>(n_tuples.max(1))?,
            run.out::<u32>(n_tuples.max(1))?,
        );
        self.search(
            run,
            n,
            (&nb.ncount, &nb.first, &nb.dpo, &nb.nbr, nb.n_push),
            1,
            &mut n_tup,
            &mut n_hit,
            &tup_first,
            &hit_first,
            &dto,
            &dhp,
            [&mut tlen, &mut cstart, &mut cend, &mut thits, &mut tcells],
            [n_tuples, n_tuple_hits, n_tuple_cells],
            dead,
            &mut err,
        )?;
        Ok(Some(Tuples {
            n_tup,
            n_hit,
            err,
            tup_first,
            hit_first,
            tup_total,
            hit_total,
            h_tup,
            h_hit,
            tup_off,
            hit_pos,
            n_tuples,
            n_tuple_hits,
            n_tuple_cells,
            dto,
            dhp,
            tlen,
            thits,
            tcells,
            cstart,
            cend,
        }))
    }
}

/// The cells' tuple lists and the early duplicate remover's outputs, and what comes back
/// to the host: the tuples' lengths, hits, cells and qualities, the lists' stats.
/// Fields `process` does not read are held, as before the split, until it returns.
#[allow(dead_code)]
pub(super) struct Listed {
    pub lists: CellTracks,
    pub track_non_empty: DeviceBuf,
    pub track_dropped: DeviceBuf,
    pub dq: DeviceBuf,
    pub has_track: DeviceBuf,
    pub h_len: PoolVec<u32>,
    pub h_hits: PoolVec<u32>,
    pub h_cells: PoolVec<u32>,
    pub h_q: PoolVec<u8>,
    pub h_tne: PoolVec<u32>,
    pub h_tdrop: PoolVec<u32>,
    pub h_bad: PoolVec<u32>,
}

impl NtIn<'_> {
    /// The cells' tuple lists (`CellTracks`) and their stats, `nt_early_dup`, and the
    /// downloads of the tuples (up to a sync).
    pub fn lists(
        &self,
        run: &mut Run,
        n: &NtupletConfig,
        dco: &DeviceBuf,
        tp: &Tuples,
    ) -> Result<Listed> {
        let (n_ev, n_cells) = (self.n_ev, self.n_cells);
        let list_base: Vec<u32> = (0..n_ev).map(|e| tp.hit_pos[e] - tp.tup_off[e]).collect();
        let base = run.up(&list_base)?;
        let lists = CellTracks::build(
            run,
            CellTracksIn {
                n_ev,
                n_cells,
                n_tuples: tp.n_tuples,
                n_entries: tp.n_tuple_cells,
                limit: n.max_tuples,
                tup_off: tp.dto.view(n_ev + 1),
                cstart: tp.cstart.view(tp.n_tuples.max(1)),
                cend: tp.cend.view(tp.n_tuples.max(1)),
                cells: tp.tcells.view(tp.n_tuple_cells.max(1)),
                cell_off: dco.view(n_ev + 1),
                cell_off_host: self.cell_off,
                base,
            },
        )?;
        let (mut track_non_empty, mut track_dropped) =
            (run.zeros::<u32>(n_ev)?, run.zeros::<u32>(n_ev)?);
        lists.stats(
            run,
            dco,
            n.max_cell_tracks,
            &mut track_non_empty,
            &mut track_dropped,
        )?;
        let (mut dq, mut has_track) = (
            run.zeros::<u8>(tp.n_tuples.max(1))?,
            run.out::<u8>(n_cells)?,
        );
        {
            let (vn, vf, vb, vv, vto, vtl, vfound) = (
                lists.count.view::<u32>(n_cells),
                lists.first.view::<u32>(n_cells),
                lists.base.view::<u32>(n_ev),
                lists.vals.view::<u32>(tp.n_tuple_cells.max(1)),
                tp.dto.view::<u32>(n_ev + 1),
                tp.tlen.view::<u32>(tp.n_tuples.max(1)),
                tp.tup_total.view::<u32>(n_ev),
            );
            let (mut vq, mut vht) = (
                dq.view_mut::<u8>(tp.n_tuples.max(1)),
                has_track.view_mut::<u8>(n_cells),
            );
            let args = args::NtEarlyDup {
                n_cells: &self.nc,
                cell_off: &self.vco,
                n_events: &self.ne,
                count: &vn,
                first: &vf,
                base: &vb,
                vals: &vv,
                per_list: &n.max_cell_tracks,
                tup_off: &vto,
                tuple_len: &vtl,
                found: &vfound,
                max_tuples: &n.max_tuples,
                q: &mut vq,
                has_track: &mut vht,
            };
            launch(run, args, blocks(n_cells, ELEMENT_BLOCK))?;
        }
        let (h_len, h_hits, h_cells) = (
            run.queue_of::<u32>(NTUPLETS, &tp.tlen, tp.n_tuples)?,
            run.queue_of::<u32>(NTUPLETS, &tp.thits, tp.n_tuple_hits)?,
            run.queue_of::<u32>(NTUPLETS, &tp.tcells, tp.n_tuple_cells)?,
        );
        let (h_q, h_tne, h_tdrop, h_bad) = (
            run.queue_of::<u8>(NTUPLETS, &dq, tp.n_tuples)?,
            run.queue::<u32>(&track_non_empty, n_ev)?,
            run.queue::<u32>(&track_dropped, n_ev)?,
            run.queue::<u32>(&lists.bad, 1)?,
        );
        let (h_len, h_hits, h_cells, h_q, h_tne, h_tdrop, h_bad) = (
            run.take(h_len)?,
            run.take(h_hits)?,
            run.take(h_cells)?,
            run.take(h_q)?,
            run.take(h_tne)?,
            run.take(h_tdrop)?,
            run.take(h_bad)?,
        );
        run.sync()?;
        Ok(Listed {
            lists,
            track_non_empty,
            track_dropped,
            dq,
            has_track,
            h_len,
            h_hits,
            h_cells,
            h_q,
            h_tne,
            h_tdrop,
            h_bad,
        })
    }
}
