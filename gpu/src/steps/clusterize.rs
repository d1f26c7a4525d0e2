//! GPU `clusterize`: module runs found on the device (`kernels::MODULE_RUNS`), clustering
//! on the device, one block per run slot; the host builds the `cluster_modules` tables from
//! the runs' first digis, modules and cluster counts. Neither the calibrated digis nor the
//! clusters are downloaded.

use super::*;

pub(super) fn publish_modules(
    batch: &mut EventBatch,
    type_name: &str,
    tables: &[ModuleTable],
) -> Result<()> {
    let cols = vec![
        concat_ref::<UInt16Type, _>(tables.iter().map(|t| t.0.as_slice())),
        concat_ref::<UInt32Type, _>(tables.iter().map(|t| t.1.as_slice())),
        concat_ref::<UInt32Type, _>(tables.iter().map(|t| t.2.as_slice())),
    ];
    publish(batch, type_name, cols, tables.iter().map(|t| t.0.len()))
}

/// A per-event module table: module ids, first digi (event-local), clusters.
pub type ModuleTable = (Vec<u16>, Vec<u32>, Vec<u32>);

/// The `cluster_modules` tables from each event's runs (event-local first digi, module, as
/// the device's module-run kernels list them) and the clusters found per run (all events'
/// runs in order); a module seen in two runs of an event keeps its last run's count, as in
/// the CPU step. `None` if a module is not below `MAX_NUM_MODULES` (the kernels refuse such
/// digis).
///
/// ```
/// use quiver_gpu::steps::cluster_tables;
/// let runs = vec![vec![(0, 7), (5, 3), (9, 7)], vec![]];
/// let t = cluster_tables(&runs, &[2, 4, 1]).unwrap();
/// assert_eq!(t[0], (vec![7, 3, 7], vec![0, 5, 9], vec![1, 4, 1])); // module 7: its last run's
/// assert!(t[1].0.is_empty());
/// assert!(cluster_tables(&[vec![(0, 2000)]], &[1]).is_none());
/// ```
pub fn cluster_tables(per_event: &[Vec<(u32, u16)>], found: &[u32]) -> Option<Vec<ModuleTable>> {
    let mut k = 0usize;
    let mut tables = Vec::with_capacity(per_event.len());
    let mut counts = vec![0u32; MAX_NUM_MODULES];
    for runs in per_event {
        let found = found.get(k..k + runs.len())?;
        for (&(_, m), &f) in runs.iter().zip(found) {
            *counts.get_mut(m as usize)? = f;
        }
        let ids: Vec<u16> = runs.iter().map(|r| r.1).collect();
        let firsts: Vec<u32> = runs.iter().map(|r| r.0).collect();
        let n_cl: Vec<u32> = runs.iter().map(|r| counts[r.1 as usize]).collect();
        k += runs.len();
        tables.push((ids, firsts, n_cl));
    }
    Some(tables)
}

/// Mirror parts of a GPU `clusterize`'s `cluster_modules` (and the GPU charge cut's
/// `hit_modules`, which keeps its rows): the run slots `mr_fill` wrote, `MAX_NUM_MODULES`
/// per event, row `r` of event `e`'s table in slot `e · MAX_NUM_MODULES + r` (the slots past
/// the event's rows are empty); and the events' digi offsets in the batch.
pub(super) const SLOT_FIRST: &str = "slot.first";
pub(super) const SLOT_MODULE: &str = "slot.module";
/// The clusters each slot's run found (`cluster_modules` only).
pub(super) const SLOT_CLUSTERS: &str = "slot.clusters";
pub(super) const EVENT_DIGIS: &str = "event.digis";

/// The run slots a module table's mirror holds ([`SLOT_FIRST`]…): batch first digi (u32)
/// and module (u16) per slot, the events' digi offsets (u32), and the clusters found per
/// slot when `clusters`; `None` when the product has no such mirror or its tables do not
/// fit the slots (the step then uploads tables built on the host).
pub(super) struct RunSlots<'a> {
    pub first: &'a Arc<DeviceBuf>,
    pub module: &'a Arc<DeviceBuf>,
    pub events: &'a Arc<DeviceBuf>,
    pub clusters: Option<&'a Arc<DeviceBuf>>,
    pub n_slots: usize,
}

impl RunSlots<'_> {
    /// Each slot's end over `module` (the batch's digis' modules; `slot_ends`): the first
    /// valid digi of another module up to its event's end, for the slots whose count in
    /// `nclus` is not 0 (the others are empty).
    pub fn ends(
        &self,
        run: &mut Run,
        module: &CudaView<u16>,
        nclus: &DeviceBuf,
        n_events: usize,
    ) -> Result<DeviceBuf> {
        let n = self.n_slots;
        let mut ends = run.out::<u32>(n)?;
        {
            let (vf, vm, vn, vo, mut ve) = (
                self.first.view::<u32>(n),
                self.module.view::<u16>(n),
                nclus.view::<u32>(n),
                self.events.view::<u32>(n_events + 1),
                ends.view_mut::<u32>(n),
            );
            let (ns, per) = (n as u32, MAX_NUM_MODULES as u32);
            let args = args::SlotEnds {
                module,
                n_slots: &ns,
                slots_per_event: &per,
                slot_first: &vf,
                slot_module: &vm,
                slot_nclus: &vn,
                event_offsets: &vo,
                slot_end: &mut ve,
            };
            launch(run, args, blocks(n, ELEMENT_BLOCK))?;
        }
        Ok(ends)
    }
}

pub(super) fn run_slots(table: &Product, n_events: usize, clusters: bool) -> Option<RunSlots<'_>> {
    let m = crate::resident::mirror_of(table)?;
    if (0..n_events).any(|e| table.event_rows(e).len() > MAX_NUM_MODULES) {
        return None;
    }
    let n_slots = n_events * MAX_NUM_MODULES;
    let clusters = if clusters {
        Some(m.part::<u32>(SLOT_CLUSTERS, n_slots)?)
    } else {
        None
    };
    Some(RunSlots {
        first: m.part::<u32>(SLOT_FIRST, n_slots)?,
        module: m.part::<u16>(SLOT_MODULE, n_slots)?,
        events: m.part::<u32>(EVENT_DIGIS, n_events + 1)?,
        clusters,
        n_slots,
    })
}

pub(crate) struct ClusterizeGpu {
    input: ProductKey,
    max_pix: usize,
    common: Common,
}

impl ClusterizeGpu {
    pub fn new(cfg: &StepConfig, common: Common, max_pix: usize) -> Result<Self> {
        Ok(ClusterizeGpu {
            input: cfg.input("input")?,
            max_pix,
            common,
        })
    }
}

/// The step's device buffers: the module runs' flags, positions and slots, the per-event
/// counters, and the clustering's outputs.
struct ClBuffers {
    status: DeviceBuf,
    start: DeviceBuf,
    pos: DeviceBuf,
    total: DeviceBuf,
    rf: DeviceBuf,
    re: DeviceBuf,
    rb: DeviceBuf,
    rm: DeviceBuf,
    worst: DeviceBuf,
    over: DeviceBuf,
    cut: DeviceBuf,
    clus: DeviceBuf,
    bins: DeviceBuf,
    found: DeviceBuf,
}

/// The host's copies of a batch's results: status, runs per event, the overflow counters,
/// and each slot's first digi, module and clusters found.
struct ClHost {
    st: quiver_columnar::PoolVec<u32>,
    tot: quiver_columnar::PoolVec<u32>,
    w: quiver_columnar::PoolVec<u32>,
    ov: quiver_columnar::PoolVec<u32>,
    ct: quiver_columnar::PoolVec<u64>,
    hf: quiver_columnar::PoolVec<u32>,
    hm: quiver_columnar::PoolVec<u16>,
    hfound: quiver_columnar::PoolVec<u32>,
}

impl ClBuffers {
    fn alloc(run: &mut Run, n: usize, n_ev: usize, slots: usize) -> Result<Self> {
        let status = run.zeros::<u32>(1)?;
        let (start, pos, total) = (
            run.out::<u32>(n)?,
            run.out::<u32>(n)?,
            run.out::<u32>(n_ev)?,
        );
        // Unused slots stay empty runs (first = end = 0): their blocks do nothing.
        let (rf, re, rb, rm) = (
            run.zeros::<u32>(slots)?,
            run.zeros::<u32>(slots)?,
            run.zeros::<u32>(slots)?,
            run.zeros::<u16>(slots)?,
        );
        let (worst, over, cut) = (
            run.zeros::<u32>(n_ev)?,
            run.zeros::<u32>(n_ev)?,
            run.zeros::<u64>(n_ev)?,
        );
        let (clus, bins, found) = (
            run.out::<i32>(n)?,
            run.out::<u32>(n)?,
            run.out::<u32>(slots)?,
        );
        Ok(ClBuffers {
            status,
            start,
            pos,
            total,
            rf,
            re,
            rb,
            rm,
            worst,
            over,
            cut,
            clus,
            bins,
            found,
        })
    }

    /// The module runs (`mr_flag`, the segmented scan, `mr_fill`), then the clustering
    /// (`clus_init`, `clusterize`, one block per slot).
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &mut self,
        run: &mut Run,
        (dm, dx, dy): (&DeviceBuf, &DeviceBuf, &DeviceBuf),
        dof: &DeviceBuf,
        offsets: &[u32],
        n: usize,
        n_ev: usize,
        max_pix: usize,
    ) -> Result<()> {
        let slots = n_ev * MAX_NUM_MODULES;
        let (n32, n_ev32, max_pix) = (n as u32, n_ev as u32, max_pix.min(u32::MAX as usize) as u32);
        let (vm, vx, vy, vo) = (
            dm.view::<u16>(n),
            dx.view::<u16>(n),
            dy.view::<u16>(n),
            dof.view::<u32>(n_ev + 1),
        );
        {
            let (mut vs, mut vst) = (
                self.start.view_mut::<u32>(n),
                self.status.view_mut::<u32>(1),
            );
            let args = args::MrFlag {
                module: &vm,
                xx: &vx,
                yy: &vy,
                n: &n32,
                event_offsets: &vo,
                n_events: &n_ev32,
                start: &mut vs,
                status: &mut vst,
            };
            launch(run, args, blocks(n, ELEMENT_BLOCK))?;
        }
        let vs = self.start.view::<u32>(n);
        {
            let (mut vp, mut vt) = (
                self.pos.view_mut::<u32>(n),
                self.total.view_mut::<u32>(n_ev),
            );
            seg_scan(run, &vs, offsets, &vo, &mut vp, &mut vt)?;
        }
        {
            let vp = self.pos.view::<u32>(n);
            let (mut vf, mut ve, mut vb, mut vmod) = (
                self.rf.view_mut::<u32>(slots),
                self.re.view_mut::<u32>(slots),
                self.rb.view_mut::<u32>(slots),
                self.rm.view_mut::<u16>(slots),
            );
            let (mut vw, mut vov, mut vc) = (
                self.worst.view_mut::<u32>(n_ev),
                self.over.view_mut::<u32>(n_ev),
                self.cut.view_mut::<u64>(n_ev),
            );
            let args = args::MrFill {
                module: &vm,
                n: &n32,
                event_offsets: &vo,
                n_events: &n_ev32,
                start: &vs,
                pos: &vp,
                max_pix: &max_pix,
                run_first: &mut vf,
                run_end: &mut ve,
                run_base: &mut vb,
                run_module: &mut vmod,
                worst: &mut vw,
                over: &mut vov,
                cut: &mut vc,
            };
            launch(run, args, blocks(n, ELEMENT_BLOCK))?;
        }
        {
            let mut vc = self.clus.view_mut::<i32>(n);
            let args = args::ClusInit {
                clus: &mut vc,
                n: &n32,
                event_offsets: &vo,
                n_events: &n_ev32,
            };
            launch(run, args, blocks(n, ELEMENT_BLOCK))?;
        }
        let (vf, ve, vb) = (
            self.rf.view::<u32>(slots),
            self.re.view::<u32>(slots),
            self.rb.view::<u32>(slots),
        );
        let (mut vc, mut vbins, mut vfound) = (
            self.clus.view_mut::<i32>(n),
            self.bins.view_mut::<u32>(n),
            self.found.view_mut::<u32>(slots),
        );
        let args = args::Clusterize {
            module: &vm,
            xx: &vx,
            yy: &vy,
            run_first: &vf,
            run_end: &ve,
            run_base: &vb,
            clus_all: &mut vc,
            bins_all: &mut vbins,
            found_out: &mut vfound,
        };
        // One block per slot (runs disjoint inside the batch), of CLUSTER_BLOCK threads.
        let cfg = LaunchConfig {
            grid_dim: (slots as u32, 1, 1),
            block_dim: (crate::kernels::CLUSTER_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        launch(run, args, cfg)?;
        Ok(())
    }

    /// Queues the results' copies to the host and takes them.
    fn download(&self, run: &mut Run, n_ev: usize) -> Result<ClHost> {
        let slots = n_ev * MAX_NUM_MODULES;
        let (st, tot, w, ov, ct) = (
            run.queue::<u32>(&self.status, 1)?,
            run.queue::<u32>(&self.total, n_ev)?,
            run.queue::<u32>(&self.worst, n_ev)?,
            run.queue::<u32>(&self.over, n_ev)?,
            run.queue::<u64>(&self.cut, n_ev)?,
        );
        let (hf, hm, hfound) = (
            run.queue_of::<u32>(CLUSTER_MODULES, &self.rf, slots)?,
            run.queue_of::<u16>(CLUSTER_MODULES, &self.rm, slots)?,
            run.queue_of::<u32>(CLUSTER_MODULES, &self.found, slots)?,
        );
        let (st, tot, w, ov, ct) = (
            run.take(st)?,
            run.take(tot)?,
            run.take(w)?,
            run.take(ov)?,
            run.take(ct)?,
        );
        let (hf, hm, hfound) = (run.take(hf)?, run.take(hm)?, run.take(hfound)?);
        Ok(ClHost {
            st,
            tot,
            w,
            ov,
            ct,
            hf,
            hm,
            hfound,
        })
    }
}

/// Each event's first MAX_NUM_MODULES runs, as the CPU lists them, and the `cluster_modules`
/// tables built from them.
fn host_tables(h: &ClHost, offsets: &[u32], n_ev: usize) -> Result<Vec<ModuleTable>> {
    let slots = n_ev * MAX_NUM_MODULES;
    let (tot, hf, hm, hfound) = (&h.tot, &h.hf, &h.hm, &h.hfound);
    let mut per_event = Vec::with_capacity(n_ev);
    let mut found_used = Vec::with_capacity(slots);
    for e in 0..n_ev {
        let s0 = e * MAX_NUM_MODULES;
        let kept = (tot[e] as usize).min(MAX_NUM_MODULES);
        per_event.push(
            (s0..s0 + kept)
                .map(|k| (hf[k] - offsets[e], hm[k]))
                .collect::<Vec<_>>(),
        );
        found_used.extend_from_slice(&hfound[s0..s0 + kept]);
    }
    cluster_tables(&per_event, &found_used).ok_or_else(|| {
        derr("clusterize: a run's module past MAX_NUM_MODULES passed the device's checks")
    })
}

impl Step for ClusterizeGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        // The digis' offsets only on the host: the module runs are found on the device.
        let d = batch.get_resident(&self.input)?;
        let n = d.num_rows();
        if n == 0 || n > i32::MAX as usize {
            return c.cpu.process(batch);
        }
        let n_ev = batch.n_events();
        let slots = n_ev * MAX_NUM_MODULES;
        let offsets = batch_offsets(d.offsets());
        let mut run = Run::start(c.gpu)?;
        let on_dev = columns_on_device(batch, &self.input, c.gpu)?;
        let din = cuda(&on_dev);
        let (dm, dx, dy) = (
            din.column("module")?,
            din.column("row")?,
            din.column("col")?,
        );
        let dof = run.up(&offsets)?;
        let mut bufs = ClBuffers::alloc(&mut run, n, n_ev, slots)?;
        run.mark()?;
        bufs.launch(
            &mut run,
            (dm, dx, dy),
            &dof,
            &offsets,
            n,
            n_ev,
            self.max_pix,
        )?;
        run.mark()?;
        let h = bufs.download(&mut run, n_ev)?;
        let results = run.finish(&c.stats)?;
        if h.st[0] != 0 {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        let tables = host_tables(&h, &offsets, n_ev)?;
        let ClBuffers {
            rf,
            rm,
            clus,
            found,
            ..
        } = bufs;
        // The clusters stay on the device: the GPU `cluster_charge_cut` reads them there.
        let on_device = device_columns(c.gpu, PIXEL_CLUSTERS, n, vec![dm.clone(), Arc::new(clus)])?;
        batch.put(Product::on_device(
            schema(PIXEL_CLUSTERS),
            d.offsets().clone(),
            n,
            on_device,
        )?)?;
        publish_modules(batch, CLUSTER_MODULES, &tables)?;
        // The run slots stay on the device: the GPU charge cut and `rechits` read their
        // runs there instead of uploading tables built from the host's.
        let slots_kept = crate::resident::CudaMirror::new()
            .with::<u32>(SLOT_FIRST, Arc::new(rf), slots)?
            .with::<u16>(SLOT_MODULE, Arc::new(rm), slots)?
            .with::<u32>(SLOT_CLUSTERS, Arc::new(found), slots)?
            .with::<u32>(EVENT_DIGIS, Arc::new(dof), n_ev + 1)?;
        batch.attach_device(CLUSTER_MODULES, Arc::new(slots_kept))?;
        record_results(batch, &results)?;
        let (w, ov, ct) = (&h.w, &h.ov, &h.ct);
        let overflows = (0..n_ev)
            .map(|e| {
                records::pixel_run_stats(w[e] as u64, ov[e], ct[e], self.max_pix)
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
