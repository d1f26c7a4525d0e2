//! GPU `cluster_charge_cut`: the runs checked on the host from the module table; their ends,
//! the cut and the renumbering on the device, one block per run; the hit-module table on the
//! host. After a GPU `clusterize` the runs are its run slots, kept on the device
//! (`clusterize::run_slots`: no table crosses the bus); otherwise the host's runs are
//! uploaded (`run_ends`, `run_check`). The clustered digis stay on the device.

use super::*;

pub(crate) struct ChargeCutGpu {
    digis: ProductKey,
    clusters: ProductKey,
    modules: ProductKey,
    cfg: ChargeCutConfig,
    common: Common,
}

impl ChargeCutGpu {
    pub fn new(cfg: &StepConfig, common: Common, ccfg: ChargeCutConfig) -> Result<Self> {
        Ok(ChargeCutGpu {
            digis: cfg.input("digis")?,
            clusters: cfg.input("clusters")?,
            modules: cfg.input("modules")?,
            cfg: ccfg,
            common,
        })
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
        counts.iter().any(|&c| c > MAX_CLUSTERS_PER_MODULE)
            || counts.iter().map(|&c| c as u64).sum::<u64>() > MAX_NUM_CLUSTERS as u64
    })
}

/// One event's module table rows: (module id, first digi, clusters).
pub(super) fn table_rows(m: &Product, e: usize) -> Result<(&[u16], &[u32], &[u32])> {
    let rows = m.event_rows(e);
    Ok((
        &values::<UInt16Type>(m, "module")?[rows.clone()],
        &values::<UInt32Type>(m, "first_digi")?[rows.clone()],
        &values::<UInt32Type>(m, "clusters")?[rows],
    ))
}

/// Each of `n_runs` host runs' end over `module` (the batch's digis' modules; `run_ends`):
/// from its first digi, the first valid digi of another module before its limit.
pub(super) fn run_ends(
    run: &mut Run,
    module: &CudaView<u16>,
    first: &DeviceBuf,
    run_module: &DeviceBuf,
    limit: &DeviceBuf,
    n_runs: usize,
) -> Result<DeviceBuf> {
    let mut ends = run.out::<u32>(n_runs.max(1))?;
    if n_runs > 0 {
        let (vf, vm, vl, mut ve) = (
            first.view::<u32>(n_runs),
            run_module.view::<u16>(n_runs),
            limit.view::<u32>(n_runs),
            ends.view_mut::<u32>(n_runs),
        );
        let args = args::RunEnds {
            module,
            n_runs: &(n_runs as u32),
            run_first: &vf,
            run_module: &vm,
            run_limit: &vl,
            run_end: &mut ve,
        };
        launch(run, args, blocks(n_runs, ELEMENT_BLOCK))?;
    }
    Ok(ends)
}

/// The module runs of a batch that the charge-cut kernel processes (batch digi indices;
/// their ends are found on the device by `run_ends`), the table rows whose first digi the
/// device checks (`run_check`), and what is needed to rebuild the `hit_modules` tables.
#[derive(Debug, Default)]
pub struct CutRuns {
    pub first: Vec<u32>,
    /// The end of the run's event (batch digi index): its end lies at or before it.
    pub limit: Vec<u32>,
    pub nclus: Vec<u32>,
    pub module: Vec<u16>,
    /// Every table row's first digi (batch index) and module: the spans above hold only if
    /// each row's first digi is of its module (as `clusterize` makes them); the device
    /// checks it, and where one is not the step takes the CPU's path.
    pub row_first: Vec<u32>,
    pub row_module: Vec<u16>,
    /// Per launched run, the slot of its table row among a GPU `clusterize`'s run slots:
    /// `e · MAX_NUM_MODULES + r` for row `r` of event `e`.
    pub slot: Vec<u32>,
    /// Per event: clusters per module id before the cut, modules of the launched runs, and
    /// the input table's module ids and first digis.
    events: Vec<CutEvent>,
}

/// Clusters per module id before the cut, modules of the launched runs, the table's module
/// ids and first digis.
type CutEvent = (Vec<u32>, Vec<u16>, Vec<u16>, Vec<u32>);

/// The runs the CPU core would process for each event (`rows[e]`: the event's digis in
/// the batch; `tables[e]`: its `cluster_modules` rows), from the tables alone, given that
/// each row's first digi is of the row's module (which the device checks: `row_first`,
/// `row_module`); `None` where the device path does not apply (the CPU reports an error,
/// runs out of order, or a module repeats: its runs would depend on each other).
///
/// ```
/// use quiver_gpu::steps::cut_runs;
/// // One event of 10 digis: module 7 from digi 0 (3 clusters), module 9 from digi 4 (none).
/// let (ids, firsts, counts) = ([7u16, 9], [0u32, 4], [3u32, 0]);
/// let r = cut_runs(&[5..15], &[(&ids, &firsts, &counts)]).unwrap();
/// assert_eq!((r.first, r.limit, r.nclus, r.module), (vec![5], vec![15], vec![3], vec![7]));
/// assert_eq!((r.row_first, r.row_module, r.slot), (vec![5, 9], vec![7, 9], vec![0]));
/// assert!(cut_runs(&[5..15], &[(&ids, &[4u32, 0], &counts)]).is_none()); // out of order
/// ```
pub fn cut_runs(
    rows: &[std::ops::Range<usize>],
    tables: &[(&[u16], &[u32], &[u32])],
) -> Option<CutRuns> {
    let mut out = CutRuns::default();
    for (e, (r, &(ids, firsts, counts))) in rows.iter().zip(tables).enumerate() {
        let (base, ne) = (r.start, r.len());
        if ids.len() != firsts.len() {
            return None;
        }
        let mut n_in_module = vec![0u32; MAX_NUM_MODULES];
        for (&mid, &cnt) in ids.iter().zip(counts) {
            *n_in_module.get_mut(mid as usize)? = cnt;
        }
        let mut seen = vec![false; MAX_NUM_MODULES];
        let mut prev_first: Option<usize> = None;
        let mut launched = Vec::new();
        for (row, (&this, &first)) in ids.iter().zip(firsts).enumerate() {
            let first = first as usize;
            if first >= ne || prev_first.is_some_and(|p| p >= first) {
                return None;
            }
            prev_first = Some(first);
            out.row_first.push((base + first) as u32);
            out.row_module.push(this);
            if this == INVALID_MODULE {
                continue;
            }
            if this as usize >= MAX_NUM_MODULES || std::mem::replace(&mut seen[this as usize], true)
            {
                return None;
            }
            if n_in_module[this as usize] == 0 {
                continue;
            }
            launched.push(this);
            out.first.push((base + first) as u32);
            out.limit.push((base + ne) as u32);
            out.nclus.push(n_in_module[this as usize]);
            out.module.push(this);
            out.slot
                .push(u32::try_from(e * MAX_NUM_MODULES + row).ok()?);
        }
        out.events
            .push((n_in_module, launched, ids.to_vec(), firsts.to_vec()));
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

impl ChargeCutGpu {
    /// `charge_cut`, one block per run or slot (`runs`: their first digis, ends, cluster
    /// counts and modules): renumbers the modules and clusters in place, the kept counts
    /// into `ncl`.
    #[allow(clippy::too_many_arguments)] // the buffers of one launch, named at the call
    fn launch_cut(
        &self,
        run: &Run,
        [dm, dc]: [&mut DeviceBuf; 2],
        da: &DeviceBuf,
        [first, end, nclus, module]: [&DeviceBuf; 4],
        n: usize,
        n_blocks: usize,
        ncl: &mut DeviceBuf,
    ) -> Result<()> {
        let cf = &self.cfg;
        let (mx, l1) = (cf.max_clusters_per_module, cf.l1_modules as u32);
        let (mut vm, mut vc, va) = (
            dm.view_mut::<u16>(n),
            dc.view_mut::<i32>(n),
            da.view::<u16>(n),
        );
        let (vf, ve, vn, vmod) = (
            first.view::<u32>(n_blocks),
            end.view::<u32>(n_blocks),
            nclus.view::<u32>(n_blocks),
            module.view::<u16>(n_blocks),
        );
        let mut vncl = ncl.view_mut::<u32>(n_blocks);
        let args = args::ChargeCut {
            module: &mut vm,
            clus: &mut vc,
            adc: &va,
            run_first: &vf,
            run_end: &ve,
            run_nclus: &vn,
            run_module: &vmod,
            max_per_module: &mx,
            l1_modules: &l1,
            min_charge_l1: &cf.min_charge_l1,
            min_charge: &cf.min_charge,
            ncl_out: &mut vncl,
        };
        // One block per run or slot (disjoint spans), of CUT_BLOCK threads.
        let cfg = LaunchConfig {
            grid_dim: (n_blocks as u32, 1, 1),
            block_dim: (crate::kernels::CUT_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        launch(run, args, cfg)?;
        Ok(())
    }
}

/// The runs from the host's plan (`cut_runs`), uploaded, with the table rows checked on the
/// device (`run_check` into `status`) and their ends found there (`run_ends`).
#[allow(clippy::type_complexity)] // the four run columns and their count, as the slots give them
fn host_runs(
    run: &mut Run,
    plan: &CutRuns,
    vin: &CudaView<u16>,
    status: &mut DeviceBuf,
) -> Result<(
    Arc<DeviceBuf>,
    Arc<DeviceBuf>,
    Arc<DeviceBuf>,
    Arc<DeviceBuf>,
    usize,
)> {
    let (rf, rl, rn, rm) = (&plan.first, &plan.limit, &plan.nclus, &plan.module);
    let (n_runs, n_rows) = (rf.len(), plan.row_first.len());
    let (drf, drl, drn, drm) = (run.up(rf)?, run.up(rl)?, run.up(rn)?, run.up(rm)?);
    let (drow_f, drow_m) = (run.up(&plan.row_first)?, run.up(&plan.row_module)?);
    run.mark()?;
    if n_rows > 0 {
        let (vf, vm, mut vst) = (
            drow_f.view::<u32>(n_rows),
            drow_m.view::<u16>(n_rows),
            status.view_mut::<u32>(1),
        );
        let args = args::RunCheck {
            module: vin,
            n_rows: &(n_rows as u32),
            row_first: &vf,
            row_module: &vm,
            status: &mut vst,
        };
        launch(run, args, blocks(n_rows, ELEMENT_BLOCK))?;
    }
    let ends = run_ends(run, vin, &drf, &drm, &drl, n_runs)?;
    Ok((
        Arc::new(drf),
        Arc::new(ends),
        Arc::new(drn),
        Arc::new(drm),
        n_runs,
    ))
}

impl Step for ChargeCutGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        // The digis' and clusters' offsets only on the host (the kernels read their device
        // copies), and the module table.
        let (d, cl, m) = (
            batch.get_resident(&self.digis)?,
            batch.get_resident(&self.clusters)?,
            batch.get(&self.modules)?,
        );
        let n = d.num_rows();
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
        let Some(plan) = cut_runs(&rows, &tables) else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        let slots = super::clusterize::run_slots(&m, batch.n_events(), true);
        let mut run = Run::start(c.gpu)?;
        let (dig_dev, cl_dev) = (
            columns_on_device(batch, &self.digis, c.gpu)?,
            columns_on_device(batch, &self.clusters, c.gpu)?,
        );
        let dm_in = cuda(&dig_dev).column("module")?;
        // The cut renumbers in place: private copies, the inputs' device columns stay intact.
        let (mut dm, mut dc) = (
            run.copy::<u16>(dm_in, n)?,
            run.copy::<i32>(cuda(&cl_dev).column("cluster")?, n)?,
        );
        let da = cuda(&dig_dev).column("charge")?;
        let mut status = run.zeros::<u32>(1)?;
        let vin = dm_in.view::<u16>(n);
        // The runs: a GPU clusterize's slots (its table rows, checked by construction), else
        // the host's, uploaded with the rows to check.
        let (first, end, nclus, module, n_blocks) = match &slots {
            Some(s) => {
                let clusters = s.clusters.expect("asked for");
                run.mark()?;
                let ends = s.ends(&mut run, &vin, clusters, batch.n_events())?;
                (
                    s.first.clone(),
                    Arc::new(ends),
                    clusters.clone(),
                    s.module.clone(),
                    s.n_slots,
                )
            }
            None => host_runs(&mut run, &plan, &vin, &mut status)?,
        };
        let mut ncl = run.out::<u32>(n_blocks.max(1))?;
        if n_blocks > 0 {
            let runs = [&*first, &*end, &*nclus, &*module];
            self.launch_cut(&run, [&mut dm, &mut dc], da, runs, n, n_blocks, &mut ncl)?;
        }
        run.mark()?;
        let (st, hn) = (
            run.queue::<u32>(&status, 1)?,
            run.queue_of::<u32>(HIT_MODULES, &ncl, n_blocks)?,
        );
        let (st, hn) = (run.take(st)?, run.take(hn)?);
        let results = run.finish(&c.stats)?;
        if st[0] != 0 {
            return fallback(c.cpu.as_ref(), &c.stats, batch); // a row's first digi is not of its module
        }
        // As the CPU step: a capped module's count is the clusters kept, never above the cap.
        let cap = self.cfg.max_clusters_per_module;
        let kept: Vec<u32> = match &slots {
            Some(_) => plan.slot.iter().map(|&k| hn[k as usize]).collect(),
            None => hn.to_vec(),
        };
        let tables: Vec<ModuleTable> = plan
            .tables(&kept)
            .into_iter()
            .map(|(i, f, n)| (i, f, n.into_iter().map(|c| c.min(cap)).collect()))
            .collect();
        let overflows = (0..batch.n_events())
            .map(|e| {
                Ok(records::cluster_counts(table_rows(&m, e)?.2, cap)
                    .into_iter()
                    .collect())
            })
            .collect::<Result<Vec<_>>>()?;
        // The clustered digis stay on the device: the GPU `rechits` reads them there.
        let on_device =
            device_columns(c.gpu, CLUSTERED_DIGIS, n, vec![Arc::new(dm), Arc::new(dc)])?;
        batch.put(Product::on_device(
            schema(CLUSTERED_DIGIS),
            d.offsets().clone(),
            n,
            on_device,
        )?)?;
        publish_modules(batch, HIT_MODULES, &tables)?;
        if let Some(s) = &slots {
            // Same rows as the cluster table: `rechits` reads its runs from the same slots.
            let kept = crate::resident::CudaMirror::new()
                .with::<u32>(super::clusterize::SLOT_FIRST, s.first.clone(), s.n_slots)?
                .with::<u16>(super::clusterize::SLOT_MODULE, s.module.clone(), s.n_slots)?
                .with::<u32>(
                    super::clusterize::EVENT_DIGIS,
                    s.events.clone(),
                    batch.n_events() + 1,
                )?;
            batch.attach_device(HIT_MODULES, Arc::new(kept))?;
        }
        record_results(batch, &results)?;
        publish_overflows(batch, overflows)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}
