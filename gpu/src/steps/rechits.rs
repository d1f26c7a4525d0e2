//! GPU `rechits`: hit offsets and runs from the module table on the host, the runs' ends on
//! the device (`run_ends`, or `slot_ends` over the run slots a GPU `clusterize` kept, when
//! only each slot's clusters and first hit cross the bus); cluster sums, CPE, global
//! position and `iphi` on the device, one block per run. The hits stay on the device with a
//! host copy of their detIndex.

use super::*;

/// The per-module CPE parameters as `DET_STRIDE` (23) floats per module, the layout the
/// `rechits` kernel reads: shift x/y, charge width x/y, x0, y0, z0, sx[3], sy[3], the first
/// six rotation entries, px, py, pz, and 1.0 for barrel modules.
pub fn det_table(cpe: &CpeParams) -> Vec<f32> {
    let mut t = Vec::with_capacity(cpe.det.len() * 23);
    for d in &cpe.det {
        t.extend_from_slice(&[
            d.shift_x,
            d.shift_y,
            d.charge_width_x,
            d.charge_width_y,
            d.x0,
            d.y0,
            d.z0,
        ]);
        t.extend_from_slice(&d.sx);
        t.extend_from_slice(&d.sy);
        t.extend_from_slice(&d.frame.r[..6]);
        t.extend_from_slice(&[
            d.frame.px,
            d.frame.py,
            d.frame.pz,
            if d.is_barrel { 1.0 } else { 0.0 },
        ]);
    }
    t
}

/// One module run of an event for the `rechits` kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HitRun {
    /// First digi, event-local (its end is found on the device).
    pub first: usize,
    /// Clusters, at most the module's hit slots.
    pub nclus: u32,
    pub module: u16,
    /// First hit, event-local.
    pub hit: u32,
    /// The module table's row.
    pub row: usize,
}

/// The runs the CPU core would process for one event of `n` digis and its hit count, from
/// the module table (`module_start`, `module_id`, clusters per module id) alone, or `None`
/// where the device path does not apply (the CPU reports an error, or a module repeats).
///
/// ```
/// use quiver_gpu::steps::{hit_runs, HitRun};
/// // Rows: module 7 from digi 0 (2 clusters), module 3 from digi 4 (none), module 5 from 6 (1).
/// let mut n_in_module = vec![0u32; 2000];
/// (n_in_module[7], n_in_module[5]) = (2, 1);
/// let (runs, n_hits) = hit_runs(9, &[3, 0, 4, 6], &[7, 3, 5], &n_in_module, 1856).unwrap();
/// assert_eq!(n_hits, 3);
/// // Hits are numbered by module id: module 5's first, then module 7's.
/// assert_eq!(runs, vec![HitRun { first: 0, nclus: 2, module: 7, hit: 1, row: 0 }, HitRun { first: 6, nclus: 1, module: 5, hit: 0, row: 2 }]);
/// assert!(hit_runs(9, &[3, 0, 4, 6], &[7, 3, 7], &n_in_module, 1856).is_none()); // module 7 twice
/// ```
pub fn hit_runs(
    n: usize,
    module_start: &[u32],
    module_id: &[u32],
    n_in_module: &[u32],
    n_det: usize,
) -> Option<(Vec<HitRun>, u32)> {
    let cms = quiver_reco::local::charge_cut::hits_module_start(
        n_in_module,
        MAX_CLUSTERS_PER_MODULE,
        MAX_NUM_CLUSTERS,
    );
    if cms.windows(2).any(|w| w[1] < w[0]) {
        return None;
    }
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
        let first = (*module_start.get(1 + run)? as usize).min(n);
        runs.push(HitRun {
            first,
            nclus,
            module: me as u16,
            hit: cms[me],
            row: run,
        });
    }
    Some((runs, cms[MAX_NUM_MODULES]))
}

/// The module runs of a batch that the `rechits` kernel processes (batch digi indices,
/// batch hit indices; each run ends on the device, at or before its event's end `limit`),
/// the beam spot per run, and the hits per event.
#[derive(Debug, Default)]
pub struct HitRuns {
    pub first: Vec<u32>,
    pub limit: Vec<u32>,
    pub nclus: Vec<u32>,
    pub module: Vec<u16>,
    pub hit: Vec<u32>,
    /// x, y, z per run.
    pub beam: Vec<f32>,
    pub hits_per_event: Vec<usize>,
    /// The run's slot among a GPU `clusterize`'s run slots (`e · MAX_NUM_MODULES` + its
    /// table row).
    pub slot: Vec<u32>,
}

impl HitRuns {
    /// Per slot of `n_slots`, the run's clusters and first batch hit (both 0 where no run).
    ///
    /// ```
    /// use quiver_gpu::steps::HitRuns;
    /// let r = HitRuns { nclus: vec![2, 1], hit: vec![5, 0], slot: vec![3, 1], ..HitRuns::default() };
    /// assert_eq!(r.per_slot(4), Some((vec![0, 1, 0, 2], vec![0, 0, 0, 5])));
    /// assert_eq!(r.per_slot(3), None);
    /// ```
    pub fn per_slot(&self, n_slots: usize) -> Option<(Vec<u32>, Vec<u32>)> {
        let (mut nclus, mut hit) = (vec![0u32; n_slots], vec![0u32; n_slots]);
        for ((&s, &n), &h) in self.slot.iter().zip(&self.nclus).zip(&self.hit) {
            *nclus.get_mut(s as usize)? = n;
            hit[s as usize] = h;
        }
        Some((nclus, hit))
    }
}

/// [`hit_runs`] for every event of a batch (`rows[e]`: its digis, `tables[e]`: its
/// `hit_modules` rows, `beam[e]`: its beam spot x, y, z); `None` where the device path does
/// not apply.
///
/// ```
/// use quiver_gpu::steps::rechit_runs;
/// // One event of 10 digis: module 7 from digi 0 with 2 clusters, module 9 from digi 4 with none.
/// let (ids, firsts, counts) = ([7u16, 9], [0u32, 4], [2u32, 0]);
/// let r = rechit_runs(&[5..15], &[(&ids, &firsts, &counts)], &[[0.0; 3]], 1856).unwrap();
/// assert_eq!((r.first, r.limit, r.nclus, r.module), (vec![5], vec![15], vec![2], vec![7]));
/// assert_eq!((r.hits_per_event, r.slot), (vec![2], vec![0]));
/// ```
pub fn rechit_runs(
    rows: &[std::ops::Range<usize>],
    tables: &[(&[u16], &[u32], &[u32])],
    beam: &[[f32; 3]],
    n_det: usize,
) -> Option<HitRuns> {
    let mut out = HitRuns::default();
    let mut hit_base = 0u32;
    for (e, ((r, &(ids, firsts, counts)), bs)) in rows.iter().zip(tables).zip(beam).enumerate() {
        let mut n_in_module = vec![0u32; MAX_NUM_MODULES];
        for (&mid, &cnt) in ids.iter().zip(counts) {
            *n_in_module.get_mut(mid as usize)? = cnt;
        }
        let mut module_start = Vec::with_capacity(firsts.len() + 1);
        module_start.push(firsts.len() as u32);
        module_start.extend_from_slice(firsts);
        let module_id: Vec<u32> = ids.iter().map(|&x| x as u32).collect();
        let (runs, n_hits) = hit_runs(r.len(), &module_start, &module_id, &n_in_module, n_det)?;
        for h in runs {
            out.first.push((r.start + h.first) as u32);
            out.limit.push(r.end as u32);
            out.nclus.push(h.nclus);
            out.module.push(h.module);
            out.hit.push(hit_base + h.hit);
            out.beam.extend_from_slice(bs);
            out.slot
                .push(u32::try_from(e * MAX_NUM_MODULES + h.row).ok()?);
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

/// The `rechits` kernel's outputs: its status, the eight f32 columns, then iphi, charge,
/// sizes and detIndex.
struct RhOut {
    status: DeviceBuf,
    f32s: Vec<DeviceBuf>,
    iphi: DeviceBuf,
    chg: DeviceBuf,
    sx: DeviceBuf,
    sy: DeviceBuf,
    det_index: DeviceBuf,
}

impl RhOut {
    fn alloc(run: &mut Run, nh: usize) -> Result<Self> {
        let status = run.zeros::<u32>(1)?;
        let f32s: Vec<DeviceBuf> = (0..8)
            .map(|_| run.zeros::<f32>(nh))
            .collect::<Result<_>>()?;
        let (iphi, chg, sx, sy, det_index) = (
            run.zeros::<i16>(nh)?,
            run.zeros::<i32>(nh)?,
            run.zeros::<i16>(nh)?,
            run.zeros::<i16>(nh)?,
            run.zeros::<u16>(nh)?,
        );
        Ok(RhOut {
            status,
            f32s,
            iphi,
            chg,
            sx,
            sy,
            det_index,
        })
    }
}

/// The runs (or slots) the kernel's blocks process: their first digi, end, clusters,
/// module and first hit, the beam spot (per run, or per event with `beam_stride` slots),
/// and the number of blocks.
struct RhRuns {
    first: Arc<DeviceBuf>,
    end: Arc<DeviceBuf>,
    nclus: Arc<DeviceBuf>,
    module: Arc<DeviceBuf>,
    hit: Arc<DeviceBuf>,
    beam: DeviceBuf,
    beam_stride: u32,
    n_blocks: usize,
}

/// The runs and their ends: a GPU clusterize's slots with each slot's clusters and first
/// hit (8 bytes per slot and the beam spot per event cross the bus), else the host's runs;
/// `None` where the plan's runs do not fit the slots (the CPU step).
fn upload_runs(
    run: &mut Run,
    slots: Option<&super::clusterize::RunSlots>,
    plan: &HitRuns,
    beam: &[[f32; 3]],
    vm: &CudaView<u16>,
    n_ev: usize,
) -> Result<Option<RhRuns>> {
    let (first, end, nclus, module, hit, beam, beam_stride, n_blocks) = match slots {
        Some(s) => {
            let Some((sn, sh)) = plan.per_slot(s.n_slots) else {
                return Ok(None);
            };
            let per_event: Vec<f32> = beam.iter().flatten().copied().collect();
            let (dn, dh, db) = (run.up(&sn)?, run.up(&sh)?, run.up(&per_event)?);
            run.mark()?;
            let ends = s.ends(run, vm, &dn, n_ev)?;
            (
                s.first.clone(),
                Arc::new(ends),
                Arc::new(dn),
                s.module.clone(),
                Arc::new(dh),
                db,
                MAX_NUM_MODULES as u32,
                s.n_slots,
            )
        }
        None => {
            let (drf, drl, drn, drme, drh) = (
                run.up(&plan.first)?,
                run.up(&plan.limit)?,
                run.up(&plan.nclus)?,
                run.up(&plan.module)?,
                run.up(&plan.hit)?,
            );
            let db = run.up(&plan.beam)?;
            run.mark()?;
            let ends = run_ends(run, vm, &drf, &drme, &drl, plan.first.len())?;
            (
                Arc::new(drf),
                Arc::new(ends),
                Arc::new(drn),
                Arc::new(drme),
                Arc::new(drh),
                db,
                0,
                plan.first.len(),
            )
        }
    };
    Ok(Some(RhRuns {
        first,
        end,
        nclus,
        module,
        hit,
        beam,
        beam_stride,
        n_blocks,
    }))
}

impl RecHitsGpu {
    /// The `rechits` kernel, one block per run or slot, over the clusters' modules and ids
    /// and the digis' rows, columns and charges; `(n, nh, n_ev)`: digis, hits, events.
    #[allow(clippy::too_many_arguments)]
    fn launch_rechits(
        &self,
        run: &Run,
        o: &mut RhOut,
        r: &RhRuns,
        vm: &CudaView<u16>,
        (dc, dx, dy, da): (&DeviceBuf, &DeviceBuf, &DeviceBuf, &DeviceBuf),
        plan: &HitRuns,
        (n, nh, n_ev): (usize, usize, usize),
    ) -> Result<()> {
        let com = &self.cpe.common;
        let (vc, vx, vy, va) = (
            dc.view::<i32>(n),
            dx.view::<u16>(n),
            dy.view::<u16>(n),
            da.view::<u16>(n),
        );
        let n_beam = if r.beam_stride == 0 {
            3 * r.n_blocks
        } else {
            3 * n_ev
        };
        let (vf, ve, vn, vme, vh, vbs) = (
            r.first.view::<u32>(r.n_blocks),
            r.end.view::<u32>(r.n_blocks),
            r.nclus.view::<u32>(r.n_blocks),
            r.module.view::<u16>(r.n_blocks),
            r.hit.view::<u32>(r.n_blocks),
            r.beam.view::<f32>(n_beam),
        );
        let mut outs: Vec<_> = o.f32s.iter_mut().map(|b| b.view_mut::<f32>(nh)).collect();
        let [xl, yl, xe, ye, xg, yg, zg, rg] = &mut outs[..] else {
            return Err(derr("rechits: eight float columns expected"));
        };
        let (mut vi, mut vq, mut vsx, mut vsy, mut vd, mut vst) = (
            o.iphi.view_mut::<i16>(nh),
            o.chg.view_mut::<i32>(nh),
            o.sx.view_mut::<i16>(nh),
            o.sy.view_mut::<i16>(nh),
            o.det_index.view_mut::<u16>(nh),
            o.status.view_mut::<u32>(1),
        );
        // Shared memory for the batch's largest run (a slot's count is a run's).
        let cap = plan.nclus.iter().copied().max().unwrap_or(0).max(1);
        let det = self.det.as_view();
        let args = args::RecHits {
            module: vm,
            clus: &vc,
            xx: &vx,
            yy: &vy,
            adc: &va,
            run_first: &vf,
            run_end: &ve,
            run_nclus: &vn,
            run_me: &vme,
            run_hit: &vh,
            beam: &vbs,
            beam_stride: &r.beam_stride,
            cap: &cap,
            det: &det,
            thickness_b: &com.thickness_b,
            thickness_e: &com.thickness_e,
            pitch_x: &com.pitch_x,
            pitch_y: &com.pitch_y,
            x_local: xl,
            y_local: yl,
            xerr_local: xe,
            yerr_local: ye,
            x_global: xg,
            y_global: yg,
            z_global: zg,
            r_global: rg,
            iphi: &mut vi,
            charge: &mut vq,
            size_x: &mut vsx,
            size_y: &mut vsy,
            det_index: &mut vd,
            status: &mut vst,
        };
        // One block per run or slot (hit slots of runs are disjoint), of RECHITS_BLOCK threads.
        let (threads, per_cluster) = (
            crate::kernels::RECHITS_BLOCK,
            crate::kernels::RECHITS_SHARED_PER_CLUSTER,
        );
        let cfg = LaunchConfig {
            grid_dim: (r.n_blocks as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: per_cluster * cap,
        };
        launch(run, args, cfg)?;
        Ok(())
    }
}

impl Step for RecHitsGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        // The digis' offsets only on the host (the kernels read their device copies), the
        // module table and the beam spot.
        let (d, cl, m, b) = (
            batch.get_resident(&self.digis)?,
            batch.get_resident(&self.clusters)?,
            batch.get(&self.modules)?,
            batch.get(&self.beamspot)?,
        );
        let bs = |name: &str| values::<arrow_array::types::Float32Type>(&b, name);
        let (bx, by, bz) = (bs("x")?, bs("y")?, bs("z")?);
        let n = cl.num_rows();
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
        let Some(plan) = rechit_runs(&rows, &tables, &beam, self.cpe.det.len()) else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        let hits_per_event = plan.hits_per_event.clone();
        let hit_base: u32 = plan.hits_per_event.iter().sum::<usize>() as u32;
        let (nh, n_runs) = (hit_base as usize, plan.first.len());
        if nh == 0 || n_runs == 0 {
            return c.cpu.process(batch);
        }
        let n_ev = batch.n_events();
        let slots = super::clusterize::run_slots(&m, n_ev, false);
        let mut run = Run::start(c.gpu)?;
        let (dig_dev, cl_dev) = (
            columns_on_device(batch, &self.digis, c.gpu)?,
            columns_on_device(batch, &self.clusters, c.gpu)?,
        );
        let (dg, cd) = (cuda(&dig_dev), cuda(&cl_dev));
        let (dm, dc) = (cd.column("module")?, cd.column("cluster")?);
        let (dx, dy, da) = (dg.column("row")?, dg.column("col")?, dg.column("charge")?);
        let mut o = RhOut::alloc(&mut run, nh)?;
        let vm = dm.view::<u16>(n);
        let Some(r) = upload_runs(&mut run, slots.as_ref(), &plan, &beam, &vm, n_ev)? else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        self.launch_rechits(
            &run,
            &mut o,
            &r,
            &vm,
            (dc, dx, dy, da),
            &plan,
            (n, nh, n_ev),
        )?;
        run.mark()?;
        // The hits stay on the device; only their detIndex comes back (2 of the 52 bytes per
        // hit): the layer starts here, and the host checks of the tracking steps
        // (`HostDets`). Their first host consumer downloads the rest.
        let (st, hd) = (
            run.queue::<u32>(&o.status, 1)?,
            run.queue_of::<u16>(HITS, &o.det_index, nh)?,
        );
        let (st, hd) = (run.take(st)?, run.take(hd)?);
        let results = run.finish(&c.stats)?;
        if st[0] != 0 {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        // hitsLayerStart from the hits' modules, as the CPU step derives it.
        let mut starts = Vec::with_capacity(hits_per_event.len());
        let mut first = 0;
        for &n in &hits_per_event {
            let det = &hd.as_slice()[first..first + n];
            starts.push(
                quiver_reco::tracks::layer_start_from_det_index(det)
                    .map_err(|e| Error::data(e.to_string()))?,
            );
            first += n;
        }
        let RhOut {
            f32s,
            iphi,
            chg,
            sx,
            sy,
            det_index,
            ..
        } = o;
        let mut dev_cols: Vec<Arc<DeviceBuf>> = f32s.into_iter().map(Arc::new).collect();
        dev_cols.extend([iphi, chg, sx, sy, det_index].map(Arc::new));
        let on_device = CudaColumns::new(c.gpu, schema(HITS), nh, dev_cols)?
            .with_host_column("det_index", u16_array(hd))?;
        batch.put(Product::on_device(
            schema(HITS),
            offsets_from_lengths(hits_per_event)?,
            nh,
            Arc::new(on_device),
        )?)?;
        record_results(batch, &results)?;
        quiver_reco::steps::publish_hit_layers(batch, &starts)?;
        let overflows = tables
            .iter()
            .map(|&(_, _, counts)| {
                records::hits_per_event(counts, MAX_CLUSTERS_PER_MODULE, MAX_NUM_CLUSTERS)
                    .into_iter()
                    .collect()
            })
            .collect();
        publish_overflows(batch, overflows)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}
