//! GPU `vertices` (kernel [`crate::kernels_vertices::VERTICES`]): the track selection (with
//! the CPU step's checks) on the host; the clustering (density, DBSCAN or iterative), the
//! fits, the split and the Σ pT² order on the device, one block per event; the per-track
//! and per-vertex products assembled on the host with the CPU's `vertices_from`. The same
//! parameters, inputs and products as the CPU step.

use quiver_columnar::{Error, EventBatch, ProductKey, Result, Step, StepConfig};
use quiver_reco::steps::{publish_vertices, vertex_selection, VertexTally};
use quiver_reco::vertices::{
    vertices_from, ChainResult, Clusterizer, Selected, VertexConfig, Vertices,
};

use crate::args;
use crate::device::DeviceBuf;
use crate::kernels_vertices::{VX_BIN_OFFSETS, VX_BLOCK};
use crate::steps::{fallback, record_results, Common, Run};
use quiver_reco::steps::types::{TRACK_VERTICES, VERTICES};

/// A batch's selected tracks, event after event, as the kernel reads them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VertexBatch {
    /// Selected-track offsets per event (`n_events + 1`).
    pub sel_off: Vec<u32>,
    pub zt: Vec<f32>,
    pub ezt2: Vec<f32>,
    pub ptt2: Vec<f32>,
}

/// The kernel's input from every event's selection.
///
/// ```
/// use quiver_gpu::steps::vertex_batch;
/// use quiver_reco::vertices::Selected;
/// let s = Selected { itrk: vec![0, 3], zt: vec![0.1, 0.2], ezt2: vec![1e-4; 2], ptt2: vec![1.0, 4.0] };
/// let b = vertex_batch(&[s.clone(), Selected::default(), s]).unwrap();
/// assert_eq!((b.sel_off, b.zt.len()), (vec![0, 2, 2, 4], 4));
/// ```
pub fn vertex_batch(sel: &[Selected]) -> Result<VertexBatch> {
    let mut b = VertexBatch {
        sel_off: vec![0],
        ..VertexBatch::default()
    };
    for s in sel {
        b.zt.extend_from_slice(&s.zt);
        b.ezt2.extend_from_slice(&s.ezt2);
        b.ptt2.extend_from_slice(&s.ptt2);
        b.sel_off.push(
            u32::try_from(b.zt.len()).map_err(|_| {
                Error::data("gpu vertices: more than 2^32 selected tracks in a batch")
            })?,
        );
    }
    Ok(b)
}

/// What the kernel wrote for a batch: `rows` holds every event's results at the event's
/// selected-track offset (`iv` per selected track, the others per vertex slot), `nv` the
/// vertex count of each event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VertexOutput {
    pub rows: ChainResult,
    pub nv: Vec<u32>,
}

/// Every event's vertices from the kernel's output: event `e`'s `(n_slots, selection)` and
/// its rows at `b.sel_off[e]`.
pub fn vertices_from_device(
    sel: &[(usize, Selected)],
    b: &VertexBatch,
    o: &VertexOutput,
) -> Result<Vec<Vertices>> {
    let mut out = Vec::with_capacity(sel.len());
    for (e, (n_slots, s)) in sel.iter().enumerate() {
        let (b0, n) = (b.sel_off[e] as usize, s.zt.len());
        let nv = *o
            .nv
            .get(e)
            .ok_or_else(|| Error::data("gpu vertices: no vertex count"))? as usize;
        let o = &o.rows;
        if nv > n
            || o.iv.len() < b0 + n
            || [
                o.zv.len(),
                o.wv.len(),
                o.chi2.len(),
                o.ndof.len(),
                o.ptv2.len(),
                o.sort_ind.len(),
            ]
            .iter()
            .any(|&l| l < b0 + nv)
        {
            return Err(Error::data(format!(
                "gpu vertices: event {e}: {nv} vertices for {n} selected tracks"
            )));
        }
        let r = ChainResult {
            iv: o.iv[b0..b0 + n].to_vec(),
            zv: o.zv[b0..b0 + nv].to_vec(),
            wv: o.wv[b0..b0 + nv].to_vec(),
            chi2: o.chi2[b0..b0 + nv].to_vec(),
            ndof: o.ndof[b0..b0 + nv].to_vec(),
            ptv2: o.ptv2[b0..b0 + nv].to_vec(),
            sort_ind: o.sort_ind[b0..b0 + nv].to_vec(),
        };
        if r.iv.iter().any(|&v| {
            v < 0
                || (v as usize >= nv
                    && v != quiver_reco::vertices::IDV_NOISE as i32
                    && v != quiver_reco::vertices::IDV_DETACHED as i32)
        }) {
            return Err(Error::data(format!(
                "gpu vertices: event {e}: a track names no vertex of {nv}"
            )));
        }
        out.push(vertices_from(*n_slots, s, r));
    }
    Ok(out)
}

/// The kernel's `mode` argument for a clustering.
///
/// ```
/// use quiver_gpu::steps::clustering_mode;
/// use quiver_reco::vertices::Clusterizer;
/// assert_eq!([Clusterizer::Density, Clusterizer::Dbscan, Clusterizer::Iterative].map(clustering_mode), [0, 1, 2]);
/// ```
pub fn clustering_mode(c: Clusterizer) -> u32 {
    match c {
        Clusterizer::Density => 0,
        Clusterizer::Dbscan => 1,
        Clusterizer::Iterative => 2,
        // Refused by `VerticesGpu::new`: the kernel has no annealing.
        Clusterizer::Annealing => u32::MAX,
    }
}

/// The GPU `vertices` step.
pub(crate) struct VerticesGpu {
    input: ProductKey,
    cfg: VertexConfig,
    tally: VertexTally,
    common: Common,
}

impl VerticesGpu {
    pub fn new(cfg: &StepConfig, common: Common, vc: VertexConfig) -> Result<Self> {
        if vc.clusterizer == Clusterizer::Annealing {
            return Err(Error::plan(
                &cfg.label,
                "clusterizer = \"annealing\" has no GPU implementation (run this vertices step on the CPU)",
            ));
        }
        Ok(VerticesGpu {
            input: cfg.input("input")?,
            cfg: vc,
            tally: VertexTally::default(),
            common,
        })
    }
}

/// The kernel's scratch and outputs on the device, per selected track or event.
struct VxBuffers {
    izt: DeviceBuf,
    bins: DeviceBuf,
    off: DeviceBuf,
    nn: DeviceBuf,
    ptr: DeviceBuf,
    iv: DeviceBuf,
    s_it: DeviceBuf,
    s_zz: DeviceBuf,
    s_ww: DeviceBuf,
    s_new: DeviceBuf,
    zv: DeviceBuf,
    wv: DeviceBuf,
    chi2: DeviceBuf,
    ndof: DeviceBuf,
    ptv2: DeviceBuf,
    sort: DeviceBuf,
    nv: DeviceBuf,
    err: DeviceBuf,
}

impl VxBuffers {
    fn alloc(run: &mut Run, n: usize, n_ev: usize) -> Result<Self> {
        let (izt, bins, off) = (
            run.out::<u32>(n)?,
            run.out::<u32>(n)?,
            run.out::<u32>(n_ev * VX_BIN_OFFSETS)?,
        );
        let (nn, ptr, iv) = (run.out::<i32>(n)?, run.out::<i32>(n)?, run.out::<i32>(n)?);
        let (s_it, s_zz, s_ww, s_new) = (
            run.out::<u32>(n)?,
            run.out::<f32>(n)?,
            run.out::<f32>(n)?,
            run.out::<u8>(n)?,
        );
        let (zv, wv, chi2, ndof, ptv2, sort) = (
            run.out::<f32>(n)?,
            run.out::<f32>(n)?,
            run.out::<f32>(n)?,
            run.out::<i32>(n)?,
            run.out::<f32>(n)?,
            run.out::<u16>(n)?,
        );
        let (nv, err) = (run.zeros::<u32>(n_ev)?, run.zeros::<u32>(n_ev)?);
        Ok(VxBuffers {
            izt,
            bins,
            off,
            nn,
            ptr,
            iv,
            s_it,
            s_zz,
            s_ww,
            s_new,
            zv,
            wv,
            chi2,
            ndof,
            ptv2,
            sort,
            nv,
            err,
        })
    }

    /// `vx_find`, one block per event, on the selected tracks (`input`: offsets, z, σ²(z),
    /// pT²).
    fn launch(
        &mut self,
        run: &Run,
        v: &VertexConfig,
        [dso, dz, de, dp]: [&DeviceBuf; 4],
        n: usize,
        n_ev: usize,
    ) -> Result<()> {
        let (vso, vz, ve, vp) = (
            dso.view::<u32>(n_ev + 1),
            dz.view::<f32>(n),
            de.view::<f32>(n),
            dp.view::<f32>(n),
        );
        let (mut a1, mut a2, mut a3) = (
            self.izt.view_mut::<u32>(n),
            self.bins.view_mut::<u32>(n),
            self.off.view_mut::<u32>(n_ev * VX_BIN_OFFSETS),
        );
        let (mut a4, mut a5, mut a6) = (
            self.nn.view_mut::<i32>(n),
            self.ptr.view_mut::<i32>(n),
            self.iv.view_mut::<i32>(n),
        );
        let (mut a7, mut a8, mut a9, mut a10) = (
            self.s_it.view_mut::<u32>(n),
            self.s_zz.view_mut::<f32>(n),
            self.s_ww.view_mut::<f32>(n),
            self.s_new.view_mut::<u8>(n),
        );
        let (mut o1, mut o2, mut o3, mut o4, mut o5, mut o6) = (
            self.zv.view_mut::<f32>(n),
            self.wv.view_mut::<f32>(n),
            self.chi2.view_mut::<f32>(n),
            self.ndof.view_mut::<i32>(n),
            self.ptv2.view_mut::<f32>(n),
            self.sort.view_mut::<u16>(n),
        );
        let (mut o7, mut o8) = (
            self.nv.view_mut::<u32>(n_ev),
            self.err.view_mut::<u32>(n_ev),
        );
        let ne = n_ev as u32;
        let mode = clustering_mode(v.clusterizer);
        let args = args::VxFind {
            sel_off: &vso,
            n_events: &ne,
            zt_all: &vz,
            ezt2_all: &ve,
            ptt2_all: &vp,
            mode: &mode,
            min_t: &v.min_t,
            eps: &v.eps,
            errmax: &v.errmax,
            chi2max: &v.chi2max,
            chi2_first: &v.fit_chi2_max_first,
            chi2_split: &v.split_chi2_max,
            chi2_final: &v.fit_chi2_max_final,
            izt_all: &mut a1,
            bins_all: &mut a2,
            off_all: &mut a3,
            nn_all: &mut a4,
            ptr_all: &mut a5,
            iv_all: &mut a6,
            s_it_all: &mut a7,
            s_zz_all: &mut a8,
            s_ww_all: &mut a9,
            s_new_all: &mut a10,
            zv_all: &mut o1,
            wv_all: &mut o2,
            chi2_all: &mut o3,
            ndof_all: &mut o4,
            ptv2_all: &mut o5,
            sort_all: &mut o6,
            nv_out: &mut o7,
            err: &mut o8,
        };
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (ne, 1, 1),
            block_dim: (VX_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        crate::steps::launch(run, args, cfg)?;
        Ok(())
    }
}

impl Step for VerticesGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        let t = batch.get(&self.input)?;
        // What the CPU step rejects goes to it, for its exact message.
        let Ok(sel) = vertex_selection(&t, &self.cfg) else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        let selected: Vec<Selected> = sel.iter().map(|(_, s)| s.clone()).collect();
        let vb = vertex_batch(&selected)?;
        let (n, n_ev) = (vb.zt.len(), sel.len());
        if n == 0 {
            return c.cpu.process(batch);
        }
        let mut run = Run::start(c.gpu)?;
        let (dso, dz, de, dp) = (
            run.up(&vb.sel_off)?,
            run.up(&vb.zt)?,
            run.up(&vb.ezt2)?,
            run.up(&vb.ptt2)?,
        );
        let mut d = VxBuffers::alloc(&mut run, n, n_ev)?;
        run.mark()?;
        d.launch(&run, &self.cfg, [&dso, &dz, &de, &dp], n, n_ev)?;
        run.mark()?;
        let (h_err, h_nv) = (
            run.queue::<u32>(&d.err, n_ev)?,
            run.queue::<u32>(&d.nv, n_ev)?,
        );
        let (h_iv, h_zv, h_wv, h_chi2) = (
            run.queue_of::<i32>(TRACK_VERTICES, &d.iv, n)?,
            run.queue_of::<f32>(VERTICES, &d.zv, n)?,
            run.queue_of::<f32>(VERTICES, &d.wv, n)?,
            run.queue_of::<f32>(VERTICES, &d.chi2, n)?,
        );
        let (h_ndof, h_ptv2, h_sort) = (
            run.queue_of::<i32>(VERTICES, &d.ndof, n)?,
            run.queue_of::<f32>(VERTICES, &d.ptv2, n)?,
            run.queue_of::<u16>(VERTICES, &d.sort, n)?,
        );
        let (h_err, h_nv, h_iv, h_zv, h_wv, h_chi2, h_ndof, h_ptv2, h_sort) = (
            run.take(h_err)?,
            run.take(h_nv)?,
            run.take(h_iv)?,
            run.take(h_zv)?,
            run.take(h_wv)?,
            run.take(h_chi2)?,
            run.take(h_ndof)?,
            run.take(h_ptv2)?,
            run.take(h_sort)?,
        );
        let results = run.finish(&c.stats)?;
        // The CPU's capacity errors (proto-vertices or vertices past 1 024): its message.
        if h_err.iter().any(|&x| x != 0) {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        let rows = ChainResult {
            iv: h_iv.as_slice().to_vec(),
            zv: h_zv.as_slice().to_vec(),
            wv: h_wv.as_slice().to_vec(),
            chi2: h_chi2.as_slice().to_vec(),
            ndof: h_ndof.as_slice().to_vec(),
            ptv2: h_ptv2.as_slice().to_vec(),
            sort_ind: h_sort.as_slice().to_vec(),
        };
        let out = VertexOutput {
            rows,
            nv: h_nv.as_slice().to_vec(),
        };
        let vertices = vertices_from_device(&sel, &vb, &out)?;
        self.tally.add(&vertices);
        publish_vertices(batch, &t, &vertices)?;
        record_results(batch, &results)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        // Counts of the batches computed here; the gpu line says how many went to the CPU step.
        let gpu = self.common.report().unwrap_or_default();
        Ok(Some(format!(
            "{} (on the device)\n{gpu}",
            self.tally.report()
        )))
    }
}
