//! The host side of the GPU `ca_ntuplets`, `track_fit` and `track_quality` steps, timed on a
//! CPU (no GPU needed): the CPU chain to the tracks, and beside it steps that do only what
//! the GPU steps do on the host — `ca_ntuplets`' finish from the tuples (with the device's
//! tuple lists and qualities: `ntuplets_prep`; with the host replay of the lists it falls
//! back to where `max_active_doublets` binds: `ntuplets_replay`), `track_fit`'s checks and
//! job tables (`fit_prep`), `track_quality`'s checks and tables (`quality_prep`; the
//! per-event inputs with the replay it used to build: `quality_replay`). On a GPU machine
//! the host side is what bounds the chain (docs/performance.md); this measures it where
//! there is none.
//!
//!   cargo run --release -p quiver-gpu --example host_prep -- DATASET [EVENTS] [BATCH]
//!
//! Prints the run summary of `plans/examples/chain.toml` with those steps added: compare
//! them with `ntuplets`, `fit` and `tracks` (the CPU steps), in ms/event.

use std::sync::Arc;

use quiver_columnar::{executor, plan, Conditions, EventBatch, InputSpec, JobContext, ProductKey, Registry, Result, Signature, Step, StepConfig, StepType};
use quiver_datasets::Dataset;
use quiver_formats::conditions::CpeParams;
use quiver_gpu::steps::{fit_batch, ntuplet_event, ntuplet_event_listed, quality_tables};
use quiver_reco::steps::types::{CA_CELLS, DOUBLETS, HITS, NTUPLETS, TRACK_FITS};
use quiver_reco::steps::{fit_inputs, quality_columns, quality_inputs};
use quiver_reco::tracks::CaConfig;

/// A list column's offsets and values.
fn list<'a>(p: &'a quiver_columnar::Product, name: &str) -> Result<(&'a [i32], &'a [u32])> {
    use arrow_array::Array;
    let l = p.batch().column_by_name(name).and_then(|c| c.as_any().downcast_ref::<arrow_array::ListArray>());
    let l = l.ok_or_else(|| quiver_columnar::Error::data(format!("no list column '{name}'")))?;
    let v = l.values().as_any().downcast_ref::<arrow_array::UInt32Array>().ok_or_else(|| quiver_columnar::Error::data(format!("'{name}' does not hold u32")))?;
    Ok((l.value_offsets(), v.values()))
}

struct NtupletsPrep {
    keys: [ProductKey; 2],
    /// The host replay of the cells' tuple lists (the GPU step's path where
    /// `max_active_doublets` binds), else the assembly after the device built them.
    replay: bool,
}

impl Step for NtupletsPrep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let (d, n) = (batch.get(&self.keys[0])?, batch.get(&self.keys[1])?);
        let ((ho, hv), (co, cv)) = (list(&n, "hits")?, list(&n, "cells")?);
        let cfg = CaConfig::default();
        let quality = quiver_columnar::columns::values::<arrow_array::types::UInt8Type>(&n, "quality")?;
        for e in 0..n.n_events() {
            let r = n.event_rows(e);
            let lengths: Vec<u32> = ho[r.start..=r.end].windows(2).map(|w| (w[1] - w[0]) as u32).collect();
            let hits = &hv[ho[r.start] as usize..ho[r.end] as usize];
            let cells = &cv[co[r.start] as usize..co[r.end] as usize];
            let out = if self.replay {
                ntuplet_event(&cfg.ntuplets, d.event_rows(e).len(), r.len() as u32, &lengths, hits, cells, 0)
            } else {
                ntuplet_event_listed(&cfg.ntuplets, r.len() as u32, &lengths, hits, cells, &quality[r], 0, 0)
            };
            let out = out.map_err(quiver_columnar::Error::data)?;
            std::hint::black_box(out);
        }
        Ok(())
    }
}

struct QualityPrep {
    keys: [ProductKey; 4],
    cpe: Arc<CpeParams>,
    /// The CPU step's per-event inputs with the host replay of the cells' tuple lists (what
    /// the GPU step prepared before the lists moved to the device), else the GPU step's
    /// checks and tables.
    replay: bool,
}

impl QualityPrep {
    fn new(cfg: &StepConfig, replay: bool) -> Result<Self> {
        let keys = [cfg.input("hits")?, cfg.input("ntuplets")?, cfg.input("cells")?, cfg.input("fits")?];
        Ok(QualityPrep { keys, cpe: cfg.condition::<CpeParams>()?, replay })
    }
}

/// The inputs of `track_quality`.
fn quality_signature() -> Signature {
    Signature {
        inputs: vec![
            InputSpec::one("hits", HITS, "rec hits"),
            InputSpec::one("ntuplets", NTUPLETS, "tuples"),
            InputSpec::one("cells", CA_CELLS, "cells"),
            InputSpec::one("fits", TRACK_FITS, "fits"),
        ],
        outputs: vec![],
    }
}

impl Step for QualityPrep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let [h, n, c, f] = [0, 1, 2, 3].map(|i| batch.get(&self.keys[i]));
        let (h, n, c, f) = (h?, n?, c?, f?);
        if self.replay {
            std::hint::black_box(quality_inputs(&h, &n, &c, &f, &self.cpe, &CaConfig::default())?);
        } else {
            let v = quality_columns(&h, &n, &c, &f)?;
            std::hint::black_box(quality_tables(&v, n.offsets(), h.offsets(), c.offsets(), false));
        }
        Ok(())
    }
}

struct FitPrep {
    keys: [ProductKey; 2],
    cpe: Arc<CpeParams>,
}

impl Step for FitPrep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let (h, n) = (batch.get(&self.keys[0])?, batch.get(&self.keys[1])?);
        let inputs = fit_inputs(&h, &n, &self.cpe)?;
        let starts: Vec<usize> = (0..inputs.len()).map(|e| h.event_rows(e).start).collect();
        std::hint::black_box(fit_batch(&inputs, &starts, self.cpe.det.len(), &CaConfig::default()));
        Ok(())
    }
}

/// `plans/examples/chain.toml` (the CPU chain to the vertices) with the three host-side
/// steps after it: the executor keeps their inputs until they have run.
const PREP_STEPS: &str = r#"
[[step]]
label = "ntuplets_prep"
type = "ntuplets_host_prep"
doublets = "doublets:doublets"
ntuplets = "ntuplets:ntuplets"
[[step]]
label = "ntuplets_replay"
type = "ntuplets_host_replay"
doublets = "doublets:doublets"
ntuplets = "ntuplets:ntuplets"
[[step]]
label = "fit_prep"
type = "fit_host_prep"
hits = "hits:hits"
ntuplets = "ntuplets:ntuplets"
[[step]]
label = "quality_prep"
type = "quality_host_prep"
hits = "hits:hits"
ntuplets = "ntuplets:ntuplets"
cells = "ntuplets:ca_cells"
fits = "fit:track_fits"
[[step]]
label = "quality_replay"
type = "quality_host_replay"
hits = "hits:hits"
ntuplets = "ntuplets:ntuplets"
cells = "ntuplets:ca_cells"
fits = "fit:track_fits"
"#;

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        return Err("usage: host_prep DATASET [EVENTS] [BATCH]".into());
    };
    let events = args.get(1).map(|s| s.parse::<u64>()).transpose()?;
    let batch_size = args.get(2).map(|s| s.parse::<usize>()).transpose()?.unwrap_or(16);
    let ds = Dataset::open(std::path::Path::new(dir))?;
    let c = ds.conditions().clone();
    let mut store = Conditions::new();
    store.insert(c.beam_spot);
    store.insert(c.cabling);
    store.insert(c.gains);
    store.insert(c.cpe);
    store.insert(quiver_formats::raw::RawData::new(ds));
    let out = tempfile::tempdir()?;
    let job = Arc::new(JobContext { input: Some(dir.into()), output: out.path().into(), conditions: store });

    let mut r = Registry::with_builtin();
    quiver_reco::steps::register(&mut r);
    let cpu = vec![quiver_columnar::Backend::Cpu];
    r.add(StepType {
        name: "quality_host_prep",
        doc: "the GPU track_quality's host preparation alone",
        params: vec![],
        signature: quality_signature(),
        backends: cpu.clone(),
        build: |cfg: &StepConfig| Ok(Box::new(QualityPrep::new(cfg, false)?)),
    });
    r.add(StepType {
        name: "quality_host_replay",
        doc: "the CPU track_quality's inputs with the host replay of the cells' tuple lists",
        params: vec![],
        signature: quality_signature(),
        backends: cpu.clone(),
        build: |cfg: &StepConfig| Ok(Box::new(QualityPrep::new(cfg, true)?)),
    });
    r.add(StepType {
        name: "fit_host_prep",
        doc: "the GPU track_fit's host preparation alone",
        params: vec![],
        signature: Signature { inputs: vec![InputSpec::one("hits", HITS, "rec hits"), InputSpec::one("ntuplets", NTUPLETS, "tuples")], outputs: vec![] },
        backends: cpu,
        build: |cfg: &StepConfig| Ok(Box::new(FitPrep { keys: [cfg.input("hits")?, cfg.input("ntuplets")?], cpe: cfg.condition::<CpeParams>()? })),
    });
    r.add(StepType {
        name: "ntuplets_host_prep",
        doc: "the GPU ca_ntuplets' host finish alone",
        params: vec![],
        signature: Signature { inputs: vec![InputSpec::one("doublets", DOUBLETS, "cells"), InputSpec::one("ntuplets", NTUPLETS, "tuples")], outputs: vec![] },
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |cfg: &StepConfig| Ok(Box::new(NtupletsPrep { keys: [cfg.input("doublets")?, cfg.input("ntuplets")?], replay: false })),
    });
    r.add(StepType {
        name: "ntuplets_host_replay",
        doc: "the GPU ca_ntuplets' host finish with the host replay of the lists",
        params: vec![],
        signature: Signature { inputs: vec![InputSpec::one("doublets", DOUBLETS, "cells"), InputSpec::one("ntuplets", NTUPLETS, "tuples")], outputs: vec![] },
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |cfg: &StepConfig| Ok(Box::new(NtupletsPrep { keys: [cfg.input("doublets")?, cfg.input("ntuplets")?], replay: true })),
    });
    let plan_text = format!("{}{PREP_STEPS}", include_str!("../../plans/examples/chain.toml"));
    let spec = plan::PlanSpec::from_toml(&plan_text, "host_prep")?;
    let resolved = plan::validate(&spec, &r)?;
    let steps = resolved.build(&r, job)?;
    let opts = executor::RunOptions { threads: 1, batch_size, first_event: 0, events, progress: false };
    let summary = executor::run(&resolved, &steps, &opts)?;
    println!("{}", summary.render());
    Ok(())
}
