//! The validators on the real local reconstruction: a small generated dataset runs through
//! the pixel chain (`quiver-reco`'s steps). The reference counts are taken from products the
//! validators do not read (`cluster_modules` rows for nModules, `hits` rows for nClusters),
//! so the count validator checks our definitions of nModules and nClusters against the
//! chain's own bookkeeping; the histograms must be consistent with each other.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use quiver_columnar::plan::PlanSpec;
use quiver_columnar::{
    executor, Backend, Conditions, EventBatch, InputSpec, JobContext, ProductKey, Registry,
    Signature, Step, StepType,
};
use quiver_validation::hist::{parse_text, read_parquet, Histogram};

/// Per event: (nModules, nDigis, nClusters) from `cluster_modules`, `digis`, `hits`.
static SEEN: Mutex<BTreeMap<u64, [u32; 3]>> = Mutex::new(BTreeMap::new());

struct Capture {
    keys: [ProductKey; 3],
}

impl Step for Capture {
    fn process(&self, batch: &mut EventBatch) -> quiver_columnar::Result<()> {
        let p: Vec<_> = self
            .keys
            .iter()
            .map(|k| batch.get(k))
            .collect::<Result<_, _>>()?;
        let mut seen = SEEN.lock().unwrap();
        for (i, e) in batch.events().enumerate() {
            seen.insert(e, [0, 1, 2].map(|k| p[k].event_rows(i).len() as u32));
        }
        Ok(())
    }
}

fn registry() -> Registry {
    let mut r = Registry::with_builtin();
    quiver_reco::steps::register(&mut r);
    quiver_validation::register(&mut r);
    r.add(StepType {
        name: "capture_counts",
        doc: "test: per-event row counts of cluster_modules, digis, hits",
        params: vec![],
        signature: Signature {
            inputs: vec![
                InputSpec::one("cluster_modules", "cluster_modules", ""),
                InputSpec::one("digis", "digis", ""),
                InputSpec::one("hits", "hits", ""),
            ],
            outputs: vec![],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            Ok(Box::new(Capture {
                keys: [
                    cfg.input("cluster_modules")?,
                    cfg.input("digis")?,
                    cfg.input("hits")?,
                ],
            }))
        },
    });
    r
}

const CHAIN: &str = r#"
[[step]]
label = "raw"
type = "read_raw"
[[step]]
label = "beamspot"
type = "beamspot"
[[step]]
label = "digis"
type = "raw_to_digis"
[[step]]
label = "calib"
type = "calibrate"
[[step]]
label = "clusters"
type = "clusterize"
[[step]]
label = "chargecut"
type = "cluster_charge_cut"
[[step]]
label = "hits"
type = "rechits"
"#;

fn run(plan: &str, ds: &Path, out: &Path, threads: usize) -> executor::Summary {
    run_with(
        plan,
        ds,
        out,
        executor::RunOptions {
            threads,
            batch_size: 2,
            first_event: 0,
            events: None,
            progress: false,
            cycle_input: false,
        },
    )
}

fn run_with(plan: &str, ds: &Path, out: &Path, opts: executor::RunOptions) -> executor::Summary {
    let ds_open = quiver_datasets::Dataset::open(ds).unwrap();
    let c = ds_open.conditions().clone();
    let mut conditions = Conditions::new();
    conditions.insert(c.beam_spot);
    conditions.insert(c.cabling);
    conditions.insert(c.gains);
    conditions.insert(c.cpe);
    conditions.insert(quiver_formats::raw::RawData::new(ds_open));
    let r = registry();
    let resolved =
        quiver_columnar::validate(&PlanSpec::from_toml(plan, "test").unwrap(), &r).unwrap();
    let job = Arc::new(JobContext {
        input: Some(ds.to_path_buf()),
        output: out.to_path_buf(),
        conditions,
    });
    let steps = resolved.build(&r, job).unwrap();
    executor::run(&resolved, &steps, &opts).unwrap_or_else(|e| panic!("{e}"))
}

fn get<'a>(hs: &'a [Histogram], name: &str) -> &'a Histogram {
    hs.iter()
        .find(|h| h.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn validators_on_the_local_reconstruction() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    let opts = quiver_datasets::GenerateOptions {
        events: 5,
        pileup: 30.0,
        seed: 3,
        output: ds.clone(),
        ..Default::default()
    };
    quiver_datasets::generate(&opts).unwrap();

    // Run 1: the chain's own counts become the reference.
    let out1 = tmp.path().join("out1");
    run(
        &format!("{CHAIN}\n[[step]]\nlabel = \"cap\"\ntype = \"capture_counts\"\n"),
        &ds,
        &out1,
        2,
    );
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(seen.len(), 5);
    let mut bytes = Vec::new();
    for c in seen.values() {
        assert!(c.iter().all(|&x| x > 0), "{c:?}");
        c.iter()
            .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
    }
    let refdir = tmp.path().join("ref");
    std::fs::create_dir_all(&refdir).unwrap();
    std::fs::write(refdir.join("digicluster.bin"), bytes).unwrap();

    // Run 2: histograms and the count validator (strict) on the same chain.
    let validators = format!(
        "{CHAIN}\n[[step]]\nlabel = \"histos\"\ntype = \"histograms\"\ntext = true\n\
         [[step]]\nlabel = \"counts\"\ntype = \"count_validator\"\nreference = \"{}\"\n",
        refdir.display()
    );
    let out2 = tmp.path().join("out2");
    let s = run(&validators, &ds, &out2, 2);
    let report = &s.reports.iter().find(|(l, _)| l == "counts").unwrap().1;
    assert_eq!(report, "CountValidator: all 5 events passed validation\n");

    let hs = read_parquet(&out2.join("histograms.parquet")).unwrap();
    assert_eq!(hs.len(), 17);
    assert_eq!(
        parse_text(&std::fs::read_to_string(out2.join("histograms.txt")).unwrap()).unwrap(),
        hs
    );
    for n in ["digi_n", "module_n", "cluster_n", "hit_n"] {
        assert_eq!(get(&hs, n).entries(), 5, "{n}");
    }
    // nClusters (from clustered_digis) and nHits (rows of hits) fill identically.
    assert_eq!(get(&hs, "cluster_n").counts, get(&hs, "hit_n").counts);
    let digis: u64 = seen.values().map(|c| c[1] as u64).sum();
    let hits: u64 = seen.values().map(|c| c[2] as u64).sum();
    let modules: u64 = seen.values().map(|c| c[0] as u64).sum();
    assert_eq!(get(&hs, "digi_adc").entries(), digis);
    assert_eq!(get(&hs, "cluster_per_module_n").entries(), modules);
    for n in [
        "hit_lx",
        "hit_ly",
        "hit_lex",
        "hit_ley",
        "hit_gx",
        "hit_gy",
        "hit_gz",
        "hit_gr",
        "hit_charge",
        "hit_sizex",
        "hit_sizey",
    ] {
        assert_eq!(get(&hs, n).entries(), hits, "{n}");
    }
    // Physical sanity: hits inside the module, charges above the cut.
    let lx = get(&hs, "hit_lx");
    assert_eq!(lx.counts[0] + lx.counts[201], 0, "|x_local| < 1 cm");
    assert_eq!(get(&hs, "hit_charge").counts[0], 0);
    println!(
        "{}",
        std::fs::read_to_string(out2.join("histograms.txt"))
            .unwrap()
            .lines()
            .map(|l| l.chars().take(160).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Same files with one thread.
    let out3 = tmp.path().join("out3");
    run(&validators, &ds, &out3, 1);
    assert_eq!(
        std::fs::read(out2.join("histograms.parquet")).unwrap(),
        std::fs::read(out3.join("histograms.parquet")).unwrap()
    );

    // The input replayed (benchmarks): 13 events from 5, batches of 2 that cross the wrap
    // (events 4 and 5 are inputs 4 and 0). The strict validator compares each event with
    // its input event's reference counts, and the histograms hold every input event twice
    // and events 0..3 a third time.
    let out4 = tmp.path().join("out4");
    let cycled = executor::RunOptions {
        threads: 2,
        batch_size: 2,
        first_event: 0,
        events: Some(13),
        progress: false,
        cycle_input: true,
    };
    let s = run_with(&validators, &ds, &out4, cycled);
    let report = &s.reports.iter().find(|(l, _)| l == "counts").unwrap().1;
    assert_eq!(report, "CountValidator: all 13 events passed validation\n");
    let hs4 = read_parquet(&out4.join("histograms.parquet")).unwrap();
    let first3: u64 = seen.range(0..3).map(|(_, c)| c[1] as u64).sum();
    assert_eq!(get(&hs4, "digi_adc").entries(), 2 * digis + first3);
    assert_eq!(get(&hs4, "digi_n").entries(), 13);
}
