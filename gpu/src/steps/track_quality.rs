//! GPU `track_quality` (kernel [`crate::kernels_quality::QUALITY`]): the CPU step's checks
//! and the cells' tuple lists (the CPU's replay) on the host; the classification, the late
//! fishbone's cleaner, the fast duplicate remover and the triplet cleaner on the device, one
//! block per event; the `tracks` product (the fits' columns with the new quality) published
//! as the CPU step publishes it. The same parameters, inputs and products as the CPU step.

use std::sync::Arc;

use quiver_columnar::{Error, EventBatch, ProductKey, Result, Step, StepConfig};
use quiver_formats::conditions::CpeParams;
use quiver_reco::steps::{ntuplet_overflows, publish_quality, quality_inputs, QualityInput, QualityTally};
use quiver_reco::tracks::CaConfig;

use crate::kernels_quality::{cuts_table, QX_BLOCK, QX_ROUNDS, QX_SH};
use crate::steps::{fallback, Common, Launch, Run};

/// A batch's `track_quality` inputs as the kernel reads them (see `qx_quality`). The
/// "cells" are each event's cells that carry a tuple, in cell order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QualityBatch {
    pub tup_off: Vec<u32>,
    pub thit_off: Vec<u32>,
    pub thits: Vec<u32>,
    pub quality: Vec<u8>,
    pub state: Vec<f32>,
    pub pt: Vec<f32>,
    pub chi2: Vec<f32>,
    pub cell_off: Vec<u32>,
    pub ct_off: Vec<u32>,
    pub ct_vals: Vec<u32>,
    pub dead: Vec<u8>,
    pub hit_off: Vec<u32>,
}

/// The kernel's inputs from every event's checked inputs; `None` past 2³² entries.
pub fn quality_batch(inputs: &[QualityInput]) -> Option<QualityBatch> {
    let u = |n: usize| u32::try_from(n).ok();
    let n_tup: usize = inputs.iter().map(|i| i.tuples.len()).sum();
    let n_th: usize = inputs.iter().map(|i| i.tuples.offsets.last().copied().unwrap_or(0) as usize).sum();
    let n_ct: usize = inputs.iter().map(|i| i.ca.cell_tracks.values.len()).sum();
    let mut b = QualityBatch {
        tup_off: Vec::with_capacity(inputs.len() + 1),
        thit_off: Vec::with_capacity(n_tup + 1),
        thits: Vec::with_capacity(n_th),
        quality: Vec::with_capacity(n_tup),
        state: Vec::with_capacity(5 * n_tup),
        pt: Vec::with_capacity(n_tup),
        chi2: Vec::with_capacity(n_tup),
        cell_off: Vec::with_capacity(inputs.len() + 1),
        ct_off: vec![0],
        ct_vals: Vec::with_capacity(n_ct),
        dead: Vec::new(),
        hit_off: Vec::with_capacity(inputs.len() + 1),
    };
    b.tup_off.push(0);
    b.thit_off.push(0);
    b.cell_off.push(0);
    b.hit_off.push(0);
    for i in inputs {
        let t = &i.tuples;
        // The tuples' hits as they are, their offsets moved past the batch's earlier hits.
        let offsets = t.offsets.get(..=t.len())?;
        let (first, last) = (offsets[0], offsets[t.len()]);
        let base = u(b.thits.len())?.checked_sub(first)?;
        b.thits.extend_from_slice(t.hits.get(first as usize..last as usize)?);
        for w in offsets.windows(2) {
            if w[1] < w[0] {
                return None;
            }
            b.thit_off.push(base.checked_add(w[1])?);
        }
        b.quality.extend(t.quality.iter().map(|&q| q as u8));
        b.state.extend_from_slice(i.tracks.state.as_flattened());
        b.pt.extend_from_slice(&i.tracks.pt);
        b.chi2.extend_from_slice(&i.tracks.chi2);
        b.tup_off.push(u(b.quality.len())?);
        // Only the cells that carry a tuple, in cell order: the others take part in nothing
        // (the order of those listed is all the cleaners need).
        let lists = &i.ca.cell_tracks;
        for (c, w) in lists.offsets.windows(2).enumerate() {
            if w[0] == w[1] {
                continue;
            }
            b.ct_vals.extend_from_slice(&lists.values[w[0] as usize..w[1] as usize]);
            b.ct_off.push(u(b.ct_vals.len())?);
            // The cells (alive flags) are in the state with the late fishbone only.
            b.dead.push(i.ca.cells.get(c).is_some_and(|cell| cell.doublet_id < 0) as u8);
        }
        b.cell_off.push(u(b.dead.len())?);
        b.hit_off.push(u(*b.hit_off.last().unwrap_or(&0) as usize + i.hits.n_hits())?);
    }
    Some(b)
}

/// The GPU `track_quality` step.
pub(crate) struct TrackQualityGpu {
    hits: ProductKey,
    ntuplets: ProductKey,
    cells: ProductKey,
    fits: ProductKey,
    cpe: Arc<CpeParams>,
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

impl TrackQualityGpu {
    pub fn new(cfg: &StepConfig, common: Common, cpe: Arc<CpeParams>, ca: CaConfig) -> Result<Self> {
        Ok(TrackQualityGpu {
            hits: cfg.input("hits")?,
            ntuplets: cfg.input("ntuplets")?,
            cells: cfg.input("cells")?,
            fits: cfg.input("fits")?,
            cpe,
            cfg: ca,
            tally: QualityTally::default(),
            rounds: RoundsTally::default(),
            common,
        })
    }
}

impl Step for TrackQualityGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        let (h, n, cl, f) = (batch.get(&self.hits)?, batch.get(&self.ntuplets)?, batch.get(&self.cells)?, batch.get(&self.fits)?);
        // What the CPU step rejects goes to it, for its exact message.
        let Ok(inputs) = quality_inputs(&h, &n, &cl, &f, &self.cpe, &self.cfg) else { return fallback(c.cpu.as_ref(), &c.stats, batch) };
        let Some(qb) = quality_batch(&inputs) else { return fallback(c.cpu.as_ref(), &c.stats, batch) };
        let (n_ev, n_tup) = (inputs.len(), qb.quality.len());
        if n_tup == 0 {
            return c.cpu.process(batch);
        }
        let n_th = qb.thits.len();
        let n_hits = *qb.hit_off.last().unwrap_or(&0) as usize;
        let mut run = Run::start(c.gpu)?;
        let (dto, dtho, dth) = (run.up(&qb.tup_off)?, run.up(&qb.thit_off)?, run.up(&qb.thits)?);
        let (dst, dpt, dchi, dcuts) = (run.up(&qb.state)?, run.up(&qb.pt)?, run.up(&qb.chi2)?, run.up(&cuts_table(&self.cfg.quality))?);
        let (dco, dcto, dctv, ddead, dho) = (run.up(&qb.cell_off)?, run.up(&qb.ct_off)?, run.up(&qb.ct_vals)?, run.up(&qb.dead)?, run.up(&qb.hit_off)?);
        let mut dq = run.up(&qb.quality)?;
        let n_cells = qb.dead.len();
        let (mut h2o, mut h2b, mut dcl) = (run.out::<u32>(n_hits + n_ev)?, run.out::<u32>(n_th.max(1))?, run.out::<u32>(n_cells.max(1))?);
        let (mut dwin, mut dkilled, mut drounds) = (run.out::<u32>(n_cells.max(1))?, run.out::<u32>(n_tup)?, run.out::<u32>(n_ev)?);
        run.mark()?;
        {
            let (vto, vtho, vth) = (dto.view::<u32>(n_ev + 1), dtho.view::<u32>(n_tup + 1), dth.view::<u32>(n_th.max(1)));
            let (vst, vpt, vchi, vcuts) = (dst.view::<f32>(5 * n_tup), dpt.view::<f32>(n_tup), dchi.view::<f32>(n_tup), dcuts.view::<f32>(crate::kernels_quality::QX_CUTS));
            let (vco, vcto, vctv, vdead, vho) =
                (dco.view::<u32>(n_ev + 1), dcto.view::<u32>(n_cells + 1), dctv.view::<u32>(qb.ct_vals.len().max(1)), ddead.view::<u8>(n_cells.max(1)), dho.view::<u32>(n_ev + 1));
            let (mut v1, mut v2, mut vq) = (h2o.view_mut::<u32>(n_hits + n_ev), h2b.view_mut::<u32>(n_th.max(1)), dq.view_mut::<u8>(n_tup));
            let (mut vcl, mut vwin, mut vkilled, mut vrounds) = (dcl.view_mut::<u32>(n_cells.max(1)), dwin.view_mut::<u32>(n_cells.max(1)), dkilled.view_mut::<u32>(n_tup), drounds.view_mut::<u32>(n_ev));
            let (ne, late, sh_cap) = (n_ev as u32, self.cfg.ntuplets.late_fishbone as u32, QX_SH as u32);
            let mut l = Launch::new(&run, "qx_quality");
            l.arg(&ne).arg(&vto).arg(&vtho).arg(&vth).arg(&vst).arg(&vpt).arg(&vchi).arg(&vcuts);
            l.arg(&vco).arg(&vcto).arg(&vctv).arg(&vdead).arg(&late).arg(&vho).arg(&mut v1).arg(&mut v2).arg(&mut vcl).arg(&mut vwin).arg(&mut vkilled);
            l.arg(&sh_cap).arg(&QX_ROUNDS).arg(&mut vrounds).arg(&mut vq);
            l.launch(cudarc::driver::LaunchConfig { grid_dim: (ne, 1, 1), block_dim: (QX_BLOCK, 1, 1), shared_mem_bytes: 0 })?;
        }
        run.mark()?;
        let q = run.down::<u8>(&dq, n_tup)?;
        let rounds = run.down::<u32>(&drounds, n_ev)?;
        run.finish(&c.stats)?;
        self.rounds.add(rounds.as_slice());
        let quality: Vec<Vec<u8>> = qb.tup_off.windows(2).map(|w| q.as_slice()[w[0] as usize..w[1] as usize].to_vec()).collect();
        if quality.iter().flatten().any(|&x| quiver_reco::tracks::Quality::from_u8(x).is_none()) {
            return Err(Error::data("gpu track_quality: the device wrote an unknown quality code"));
        }
        let overflows = inputs.iter().map(|i| ntuplet_overflows(&i.ca, &self.cfg.ntuplets)).collect();
        self.tally.add(n_ev, &quality);
        publish_quality(batch, &f, &quality, overflows)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        // Counts of the batches computed here; the gpu line says how many went to the CPU step.
        let gpu = self.common.report().unwrap_or_default();
        Ok(Some(format!("{} (on the device)\n{gpu}\n{}", self.tally.report(), self.rounds.report())))
    }
}
