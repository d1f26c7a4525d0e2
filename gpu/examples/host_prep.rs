//! The host side of the GPU steps, timed on a CPU (no GPU needed): the CPU chain to the
//! tracks, and beside it steps that do only what the GPU steps do on the host — the local
//! steps' module tables and runs (`local_prep`; with the scans of the digis they made before
//! the module runs and the runs' ends moved to the device: `local_scan`), `ca_ntuplets`' finish from the tuples (with the device's
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

use quiver_columnar::{
    executor, plan, Conditions, EventBatch, InputSpec, JobContext, ProductKey, Registry, Result,
    Signature, Step, StepConfig, StepType,
};
use quiver_datasets::Dataset;
use quiver_formats::conditions::CpeParams;
use quiver_gpu::steps::{
    cluster_tables, cut_runs, fit_batch, ntuplet_event, ntuplet_event_listed, quality_tables,
    rechit_runs,
};
use quiver_reco::steps::types::{
    CALIBRATED_DIGIS, CA_CELLS, CLUSTERED_DIGIS, CLUSTER_MODULES, DOUBLETS, HITS, HIT_MODULES,
    NTUPLETS, TRACK_FITS,
};
use quiver_reco::steps::{fit_tuples, quality_columns, quality_inputs, HitDets};
use quiver_reco::tracks::CaConfig;

/// A list column's offsets and values.
fn list<'a>(p: &'a quiver_columnar::Product, name: &str) -> Result<(&'a [i32], &'a [u32])> {
    use arrow_array::Array;
    let l = p
        .batch()
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<arrow_array::ListArray>());
    let l = l.ok_or_else(|| quiver_columnar::Error::data(format!("no list column '{name}'")))?;
    let v = l
        .values()
        .as_any()
        .downcast_ref::<arrow_array::UInt32Array>()
        .ok_or_else(|| quiver_columnar::Error::data(format!("'{name}' does not hold u32")))?;
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
        let quality =
            quiver_columnar::columns::values::<arrow_array::types::UInt8Type>(&n, "quality")?;
        for e in 0..n.n_events() {
            let r = n.event_rows(e);
            let lengths: Vec<u32> = ho[r.start..=r.end]
                .windows(2)
                .map(|w| (w[1] - w[0]) as u32)
                .collect();
            let hits = &hv[ho[r.start] as usize..ho[r.end] as usize];
            let cells = &cv[co[r.start] as usize..co[r.end] as usize];
            let out = if self.replay {
                ntuplet_event(
                    &cfg.ntuplets,
                    d.event_rows(e).len(),
                    r.len() as u32,
                    &lengths,
                    hits,
                    cells,
                    0,
                )
            } else {
                ntuplet_event_listed(
                    &cfg.ntuplets,
                    r.len() as u32,
                    &lengths,
                    hits,
                    cells,
                    &quality[r],
                    0,
                    0,
                )
            };
            let out = out?;
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
        let keys = [
            cfg.input("hits")?,
            cfg.input("ntuplets")?,
            cfg.input("cells")?,
            cfg.input("fits")?,
        ];
        Ok(QualityPrep {
            keys,
            cpe: cfg.condition::<CpeParams>()?,
            replay,
        })
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
            std::hint::black_box(quality_inputs(
                &h,
                &n,
                &c,
                &f,
                &self.cpe,
                &CaConfig::default(),
            )?);
        } else {
            // The hits' detIndex as the GPU step has it (the copy the GPU rechits keeps).
            let det = quiver_columnar::columns::values::<arrow_array::types::UInt16Type>(
                &h,
                "det_index",
            )?;
            let v = quality_columns(HitDets::new(det, h.offsets())?, &n, &c, &f)?;
            std::hint::black_box(quality_tables(
                &v,
                n.offsets(),
                h.offsets(),
                c.offsets(),
                false,
            ));
        }
        Ok(())
    }
}

/// The host side of the GPU `clusterize`, `cluster_charge_cut` and `rechits`: the module
/// tables, the runs from them, the capacity records (`local_prep`); with `scan`, also what
/// it did before the module runs and the runs' ends moved to the device (`local_scan`): the
/// module runs and their capacity record from the calibrated digis, and each run's end from
/// the digis' modules.
struct LocalPrep {
    keys: [ProductKey; 4],
    n_det: usize,
    scan: bool,
}

impl Step for LocalPrep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        use arrow_array::types::{UInt16Type, UInt32Type};
        use quiver_columnar::columns::values;
        let [cal, cm, cd, hm] = [0, 1, 2, 3].map(|i| batch.get(&self.keys[i]));
        let (cal, cm, cd, hm) = (cal?, cm?, cd?, hm?);
        let table =
            |m: &quiver_columnar::Product, e: usize| -> Result<(Vec<u16>, Vec<u32>, Vec<u32>)> {
                let r = m.event_rows(e);
                Ok((
                    values::<UInt16Type>(m, "module")?[r.clone()].to_vec(),
                    values::<UInt32Type>(m, "first_digi")?[r.clone()].to_vec(),
                    values::<UInt32Type>(m, "clusters")?[r].to_vec(),
                ))
            };
        let n_ev = batch.n_events();
        let rows: Vec<_> = (0..n_ev).map(|e| cal.event_rows(e)).collect();
        let (ct, ht): (Vec<_>, Vec<_>) = (
            (0..n_ev).map(|e| table(&cm, e)).collect::<Result<_>>()?,
            (0..n_ev).map(|e| table(&hm, e)).collect::<Result<_>>()?,
        );
        let cut_in: Vec<(&[u16], &[u32], &[u32])> =
            ct.iter().map(|t| (&t.0[..], &t.1[..], &t.2[..])).collect();
        let hit_in: Vec<(&[u16], &[u32], &[u32])> =
            ht.iter().map(|t| (&t.0[..], &t.1[..], &t.2[..])).collect();
        // clusterize: the table from the runs (here the CPU's) and their cluster counts.
        let runs: Vec<Vec<(u32, u16)>> = ct
            .iter()
            .map(|t| t.1.iter().zip(&t.0).map(|(&f, &m)| (f, m)).collect())
            .collect();
        let found: Vec<u32> = ct.iter().flat_map(|t| t.2.iter().copied()).collect();
        std::hint::black_box(cluster_tables(&runs, &found));
        let cut =
            cut_runs(&rows, &cut_in).ok_or_else(|| quiver_columnar::Error::data("cut_runs"))?;
        let hits = rechit_runs(&rows, &hit_in, &vec![[0.0; 3]; n_ev], self.n_det)
            .ok_or_else(|| quiver_columnar::Error::data("rechit_runs"))?;
        if self.scan {
            let (m, x, y) = (
                values::<UInt16Type>(&cal, "module")?,
                values::<UInt16Type>(&cal, "row")?,
                values::<UInt16Type>(&cal, "col")?,
            );
            for r in &rows {
                let (m, x, y) = (&m[r.clone()], &x[r.clone()], &y[r.clone()]);
                std::hint::black_box(
                    quiver_reco::local::clusterize::module_runs(
                        m,
                        x,
                        y,
                        quiver_reco::local::MAX_PIX_IN_MODULE,
                    )
                    .map_err(|e| quiver_columnar::Error::data(e.to_string()))?,
                );
                std::hint::black_box(quiver_reco::capacity::records::pixel_runs(
                    m,
                    quiver_reco::local::MAX_PIX_IN_MODULE,
                ));
            }
            let ends =
                |module: &[u16], first: &[u32], run_module: &[u16], limit: &[u32]| -> Vec<u32> {
                    let invalid = quiver_reco::local::INVALID_MODULE;
                    (0..first.len())
                        .map(|k| {
                            let (f, lim, me) =
                                (first[k] as usize, limit[k] as usize, run_module[k]);
                            (f..lim)
                                .find(|&i| module[i] != invalid && module[i] != me)
                                .unwrap_or(lim) as u32
                        })
                        .collect()
                };
            std::hint::black_box(ends(m, &cut.first, &cut.module, &cut.limit));
            std::hint::black_box(ends(
                values::<UInt16Type>(&cd, "module")?,
                &hits.first,
                &hits.module,
                &hits.limit,
            ));
        }
        // What `rechits` uploads after a GPU clusterize: each run slot's clusters and first hit.
        std::hint::black_box(hits.per_slot(n_ev * quiver_reco::local::MAX_NUM_MODULES));
        std::hint::black_box((cut, hits));
        Ok(())
    }
}

/// The host side of the GPU `raw_to_digis` (the FED framing: `raw_prep`) and `vertices`
/// (the track selection and the kernel's tables: `vertex_prep`).
struct EndsPrep {
    key: ProductKey,
    vertices: bool,
}

impl Step for EndsPrep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let p = batch.get(&self.key)?;
        if self.vertices {
            let sel = quiver_reco::steps::vertex_selection(
                &p,
                &quiver_reco::vertices::VertexConfig::default(),
            )?;
            let selected: Vec<_> = sel.iter().map(|(_, s)| s.clone()).collect();
            std::hint::black_box(quiver_gpu::steps::vertex_batch(&selected)?);
        } else {
            let fed =
                quiver_columnar::columns::values::<arrow_array::types::UInt32Type>(&p, "fed")?;
            let data = quiver_columnar::columns::binary(&p, "data")?;
            let events = (0..batch.n_events())
                .map(|e| p.event_rows(e).map(|r| (fed[r], data.value(r))).collect());
            std::hint::black_box(quiver_gpu::steps::frame_batch(
                events,
                quiver_reco::local::MAX_FED_WORDS,
            ));
        }
        Ok(())
    }
}

struct FitPrep {
    keys: [ProductKey; 2],
    cpe: Arc<CpeParams>,
    /// Also the storing of the kernel's output and the publishing of the fits, as the step
    /// does (`fit_store`).
    store: bool,
}

impl Step for FitPrep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let (h, n) = (batch.get(&self.keys[0])?, batch.get(&self.keys[1])?);
        let det =
            quiver_columnar::columns::values::<arrow_array::types::UInt16Type>(&h, "det_index")?;
        let inputs = fit_tuples(HitDets::new(det, h.offsets())?, &n)?;
        let starts: Vec<usize> = (0..inputs.len()).map(|e| h.event_rows(e).start).collect();
        // `fit_store` as the step after a GPU `ca_ntuplets` (whose kept lists the device
        // builds the job table from); `fit_prep` with the table, as uploaded otherwise.
        let fb = fit_batch(
            &inputs,
            &starts,
            self.cpe.det.len(),
            &CaConfig::default(),
            !self.store,
        )
        .ok_or_else(|| quiver_columnar::Error::data("fit_batch"))?;
        if self.store {
            // The step's finish from the kernel's output (plausible values: the timing does
            // not depend on them), published into a scratch batch.
            use quiver_gpu::kernels_fit::FIT_OUT;
            let mut out = vec![0.5f32; fb.job_n.len() * FIT_OUT];
            out.chunks_exact_mut(FIT_OUT).for_each(|v| v[14] = 2.0);
            let mut scratch = EventBatch::new(batch.first_event(), batch.n_events());
            scratch.set_allowed(&[
                ProductKey::new(TRACK_FITS, "fit_store"),
                ProductKey::new(quiver_columnar::overflow::CAPACITY_OVERFLOWS, "fit_store"),
            ]);
            let tuples: Vec<&quiver_reco::tracks::ntuplets::Tuples> =
                inputs.iter().map(|i| &i.tuples).collect();
            quiver_reco::steps::publish_fit_values(
                &mut scratch,
                &tuples,
                &fb.jobs,
                &out,
                &CaConfig::default(),
            )?;
            std::hint::black_box(scratch);
        }
        std::hint::black_box(fb);
        Ok(())
    }
}

/// `plans/examples/chain.toml` (the CPU chain to the vertices) with the three host-side
/// steps after it: the executor keeps their inputs until they have run.
const PREP_STEPS: &str = r#"
[[step]]
label = "raw_prep"
type = "raw_host_prep"
input = "raw:fed_raw"
[[step]]
label = "vertex_prep"
type = "vertex_host_prep"
input = "tracks:tracks"
[[step]]
label = "local_prep"
type = "local_host_prep"
calibrated = "calib:calibrated_digis"
cluster_modules = "clusters:cluster_modules"
clustered = "chargecut:clustered_digis"
hit_modules = "chargecut:hit_modules"
[[step]]
label = "local_scan"
type = "local_host_scan"
calibrated = "calib:calibrated_digis"
cluster_modules = "clusters:cluster_modules"
clustered = "chargecut:clustered_digis"
hit_modules = "chargecut:hit_modules"
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
label = "fit_store"
type = "fit_host_store"
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
    let batch_size = args
        .get(2)
        .map(|s| s.parse::<usize>())
        .transpose()?
        .unwrap_or(16);
    let ds = Dataset::open(std::path::Path::new(dir))?;
    let c = ds.conditions().clone();
    let mut store = Conditions::new();
    store.insert(c.beam_spot);
    store.insert(c.cabling);
    store.insert(c.gains);
    store.insert(c.cpe);
    store.insert(quiver_formats::raw::RawData::new(ds));
    let out = tempfile::tempdir()?;
    let job = Arc::new(JobContext {
        input: Some(dir.into()),
        output: out.path().into(),
        conditions: store,
    });

    let r = prep_registry();
    let plan_text = format!(
        "{}{PREP_STEPS}",
        include_str!("../../plans/examples/chain.toml")
    );
    let spec = plan::PlanSpec::from_toml(&plan_text, "host_prep")?;
    let resolved = plan::validate(&spec, &r)?;
    let steps = resolved.build(&r, job)?;
    let opts = executor::RunOptions {
        threads: 1,
        batch_size,
        first_event: 0,
        events,
        progress: false,
        cycle_input: false,
    };
    let summary = executor::run(&resolved, &steps, &opts)?;
    println!("{}", summary.render());
    Ok(())
}

/// The built-in and reco step types, plus one step type per host-side part of the GPU
/// steps, each running that part alone on the CPU.
fn prep_registry() -> Registry {
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
        signature: Signature {
            inputs: vec![
                InputSpec::one("hits", HITS, "rec hits"),
                InputSpec::one("ntuplets", NTUPLETS, "tuples"),
            ],
            outputs: vec![],
        },
        backends: cpu,
        build: |cfg: &StepConfig| {
            Ok(Box::new(FitPrep {
                keys: [cfg.input("hits")?, cfg.input("ntuplets")?],
                cpe: cfg.condition::<CpeParams>()?,
                store: false,
            }))
        },
    });
    r.add(StepType {
        name: "fit_host_store",
        doc: "the GPU track_fit's host preparation and the storing of its output",
        params: vec![],
        signature: Signature {
            inputs: vec![
                InputSpec::one("hits", HITS, "rec hits"),
                InputSpec::one("ntuplets", NTUPLETS, "tuples"),
            ],
            outputs: vec![],
        },
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |cfg: &StepConfig| {
            Ok(Box::new(FitPrep {
                keys: [cfg.input("hits")?, cfg.input("ntuplets")?],
                cpe: cfg.condition::<CpeParams>()?,
                store: true,
            }))
        },
    });
    r.add(StepType {
        name: "raw_host_prep",
        doc: "the GPU raw_to_digis' FED framing alone",
        params: vec![],
        signature: Signature {
            inputs: vec![InputSpec::one(
                "input",
                quiver_reco::steps::types::FED_RAW,
                "raw data",
            )],
            outputs: vec![],
        },
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |cfg: &StepConfig| {
            Ok(Box::new(EndsPrep {
                key: cfg.input("input")?,
                vertices: false,
            }))
        },
    });
    r.add(StepType {
        name: "vertex_host_prep",
        doc: "the GPU vertices' track selection and tables alone",
        params: vec![],
        signature: Signature {
            inputs: vec![InputSpec::one(
                "input",
                quiver_reco::steps::types::TRACKS,
                "tracks",
            )],
            outputs: vec![],
        },
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |cfg: &StepConfig| {
            Ok(Box::new(EndsPrep {
                key: cfg.input("input")?,
                vertices: true,
            }))
        },
    });
    add_local_and_ntuplet_types(&mut r);
    r
}

/// The host-side parts of the GPU local steps and of `ca_ntuplets`.
fn add_local_and_ntuplet_types(r: &mut Registry) {
    let local_signature = || Signature {
        inputs: vec![
            InputSpec::one("calibrated", CALIBRATED_DIGIS, "calibrated digis"),
            InputSpec::one(
                "cluster_modules",
                CLUSTER_MODULES,
                "clusterize's module table",
            ),
            InputSpec::one("clustered", CLUSTERED_DIGIS, "clustered digis"),
            InputSpec::one("hit_modules", HIT_MODULES, "the charge cut's module table"),
        ],
        outputs: vec![],
    };
    fn local(cfg: &StepConfig, scan: bool) -> Result<Box<dyn Step>> {
        let keys = [
            cfg.input("calibrated")?,
            cfg.input("cluster_modules")?,
            cfg.input("clustered")?,
            cfg.input("hit_modules")?,
        ];
        Ok(Box::new(LocalPrep {
            keys,
            n_det: cfg.condition::<CpeParams>()?.det.len(),
            scan,
        }))
    }
    r.add(StepType {
        name: "local_host_prep",
        doc: "the GPU local steps' host preparation alone",
        params: vec![],
        signature: local_signature(),
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |cfg: &StepConfig| local(cfg, false),
    });
    r.add(StepType {
        name: "local_host_scan",
        doc: "the GPU local steps' host preparation with the digi scans it made before",
        params: vec![],
        signature: local_signature(),
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |cfg: &StepConfig| local(cfg, true),
    });
    r.add(StepType {
        name: "ntuplets_host_prep",
        doc: "the GPU ca_ntuplets' host finish alone",
        params: vec![],
        signature: Signature {
            inputs: vec![
                InputSpec::one("doublets", DOUBLETS, "cells"),
                InputSpec::one("ntuplets", NTUPLETS, "tuples"),
            ],
            outputs: vec![],
        },
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |cfg: &StepConfig| {
            Ok(Box::new(NtupletsPrep {
                keys: [cfg.input("doublets")?, cfg.input("ntuplets")?],
                replay: false,
            }))
        },
    });
    r.add(StepType {
        name: "ntuplets_host_replay",
        doc: "the GPU ca_ntuplets' host finish with the host replay of the lists",
        params: vec![],
        signature: Signature {
            inputs: vec![
                InputSpec::one("doublets", DOUBLETS, "cells"),
                InputSpec::one("ntuplets", NTUPLETS, "tuples"),
            ],
            outputs: vec![],
        },
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |cfg: &StepConfig| {
            Ok(Box::new(NtupletsPrep {
                keys: [cfg.input("doublets")?, cfg.input("ntuplets")?],
                replay: true,
            }))
        },
    });
}
