//! GPU `clusterize`: module runs found on the host (a sequential scan), clustering on
//! the device, one block per run.

use super::*;

/// Module runs of one event, as the CPU core finds them (`quiver_reco::local::clusterize::
/// module_runs`): (first, end) event-local digi indices and the module. `None` when a digi
/// is outside what the CPU core accepts (the CPU step reports the error).
pub fn module_runs(module: &[u16], xx: &[u16], yy: &[u16], max_pix: usize) -> Option<Vec<(usize, usize, u16)>> {
    let runs = quiver_reco::local::clusterize::module_runs(module, xx, yy, max_pix).ok()?;
    Some(runs.into_iter().map(|r| (r.first, r.end, r.module)).collect())
}

pub(super) fn publish_modules(batch: &mut EventBatch, type_name: &str, tables: &[ModuleTable]) -> Result<()> {
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
