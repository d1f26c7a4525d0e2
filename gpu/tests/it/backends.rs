//! Backend selection with the GPU step types registered, on a generated dataset: `gpu`
//! without a usable GPU is a plan error naming the step and what is missing, `auto` falls
//! back to `cpu` (same products as the CPU chain), and the host parts of the GPU steps
//! (FED framing, module runs) agree with the CPU cores.

use std::sync::{Arc, OnceLock};

use quiver_columnar::{executor, plan, Backend, JobContext, Registry};
use quiver_datasets::Dataset;

fn dataset() -> &'static (tempfile::TempDir, Dataset) {
    static DS: OnceLock<(tempfile::TempDir, Dataset)> = OnceLock::new();
    DS.get_or_init(|| crate::generated(6, 10.0, 3, 0.05))
}

fn job() -> Arc<JobContext> {
    let (dir, _) = dataset();
    crate::job_on(dir.path(), dir.path().join("out"))
}

fn registry() -> Registry {
    let mut r = Registry::with_builtin();
    quiver_reco::steps::register(&mut r);
    quiver_gpu::register(&mut r);
    r
}

/// The local chain twice (`a` on the CPU, `b` with `backend_b` on the five GPU-capable
/// steps) and strict comparisons of every product.
fn chain_plan(backend_b: &str) -> String {
    let mut s = String::from("[[step]]\nlabel = \"raw\"\ntype = \"read_raw\"\n[[step]]\nlabel = \"beamspot\"\ntype = \"beamspot\"\n");
    for (x, backend) in [("a", "cpu"), ("b", backend_b)] {
        s += &format!(
            r#"
[[step]]
label = "digis_{x}"
type = "raw_to_digis"
backend = "{backend}"
input = "raw"
[[step]]
label = "calib_{x}"
type = "calibrate"
backend = "{backend}"
input = "digis_{x}:digis"
[[step]]
label = "clusters_{x}"
type = "clusterize"
backend = "{backend}"
input = "calib_{x}"
[[step]]
label = "cut_{x}"
type = "cluster_charge_cut"
backend = "{backend}"
digis = "calib_{x}"
clusters = "clusters_{x}:pixel_clusters"
modules = "clusters_{x}:cluster_modules"
[[step]]
label = "hits_{x}"
type = "rechits"
backend = "{backend}"
digis = "calib_{x}"
clusters = "cut_{x}:clustered_digis"
modules = "cut_{x}:hit_modules"
beamspot = "beamspot"
"#
        );
    }
    for p in [
        "digis_X:digis",
        "digis_X:digi_errors",
        "calib_X",
        "clusters_X:pixel_clusters",
        "clusters_X:cluster_modules",
        "cut_X:clustered_digis",
        "cut_X:hit_modules",
        "hits_X:hits",
        "hits_X:hit_layers",
    ] {
        let label = p.replace("_X", "").replace(':', "_");
        s += &format!(
            "[[step]]\nlabel = \"cmp_{label}\"\ntype = \"compare\"\na = \"{}\"\nb = \"{}\"\n",
            p.replace('X', "a"),
            p.replace('X', "b")
        );
    }
    s
}

#[test]
fn registered_types_keep_the_cpu_signature_and_add_gpu() {
    let mut cpu = Registry::new();
    quiver_reco::steps::register(&mut cpu);
    let r = registry();
    for name in quiver_gpu::GPU_STEP_TYPES {
        let (a, b) = (cpu.get(name).unwrap(), r.get(name).unwrap());
        assert_eq!(b.backends, vec![Backend::Cpu, Backend::Gpu]);
        assert_eq!(
            a.params.iter().map(|p| &p.name).collect::<Vec<_>>(),
            b.params.iter().map(|p| &p.name).collect::<Vec<_>>()
        );
        assert_eq!(a.signature.outputs, b.signature.outputs);
        assert_eq!(a.signature.inputs.len(), b.signature.inputs.len());
    }
    assert_eq!(r.get("beamspot").unwrap().backends, vec![Backend::Cpu]);
}

#[test]
fn gpu_without_a_gpu_is_a_plan_error_before_any_event() {
    let r = registry();
    let spec = plan::PlanSpec::from_toml(&chain_plan("gpu"), "chain").unwrap();
    let resolved = plan::validate(&spec, &r).unwrap();
    match (quiver_gpu::device::gpu(), resolved.build(&r, job())) {
        (Err(missing), Err(e)) => {
            let msg = e.to_string();
            println!("{msg}");
            assert!(
                msg.starts_with("plan error: step 'digis_b': backend 'gpu' requested"),
                "{msg}"
            );
            assert!(msg.contains(&missing.to_string()), "{msg}");
            assert!(
                msg.contains("libcuda") || msg.contains("libnvrtc") || msg.contains("device"),
                "{msg}"
            );
        }
        (Ok(g), Ok(_)) => println!("GPU present ({}): the plan builds", g.description),
        (Ok(_), Err(e)) => panic!("GPU present but the plan failed: {e}"),
        (Err(m), Ok(_)) => panic!("no GPU ({m}) but the plan built"),
    }
}

/// A plan whose only GPU step is `ca_doublets` (hits from the CPU): refused before any
/// event without a GPU, naming that step.
#[test]
fn gpu_doublets_without_a_gpu_is_a_plan_error_before_any_event() {
    let r = registry();
    let mut toml = chain_plan("cpu");
    toml += "[[step]]\nlabel = \"doublets\"\ntype = \"ca_doublets\"\nbackend = \"gpu\"\nhits = \"hits_a:hits\"\n";
    let resolved =
        plan::validate(&plan::PlanSpec::from_toml(&toml, "doublets").unwrap(), &r).unwrap();
    match (quiver_gpu::device::gpu(), resolved.build(&r, job())) {
        (Err(missing), Err(e)) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with("plan error: step 'doublets': backend 'gpu' requested"),
                "{msg}"
            );
            assert!(msg.contains(&missing.to_string()), "{msg}");
        }
        (Ok(_), Ok(_)) => {}
        (Ok(_), Err(e)) => panic!("GPU present but the plan failed: {e}"),
        (Err(m), Ok(_)) => panic!("no GPU ({m}) but the plan built"),
    }
    // capacities = "sized" has no GPU implementation: refused by name as well.
    let sized = toml.replace(
        "hits = \"hits_a:hits\"\n",
        "hits = \"hits_a:hits\"\ncapacities = \"sized\"\n",
    );
    let resolved =
        plan::validate(&plan::PlanSpec::from_toml(&sized, "sized").unwrap(), &r).unwrap();
    let Err(e) = resolved.build(&r, job()) else {
        panic!("sized GPU doublets built")
    };
    assert!(
        e.to_string().starts_with("plan error: step 'doublets':"),
        "{e}"
    );
}

#[test]
fn gpu_on_a_type_without_a_device_version_is_rejected_by_validation() {
    let toml = "[[step]]\nlabel = \"raw\"\ntype = \"read_raw\"\n[[step]]\nlabel = \"bs\"\ntype = \"beamspot\"\nbackend = \"gpu\"\n";
    let spec = plan::PlanSpec::from_toml(toml, "t").unwrap();
    let e = plan::validate(&spec, &registry()).unwrap_err().to_string();
    assert!(
        e.contains(
            "step 'bs': backend 'gpu' is not implemented by step type 'beamspot' (it has: cpu)"
        ),
        "{e}"
    );
}

#[test]
fn auto_resolves_per_type_and_runs() {
    let r = registry();
    let spec = plan::PlanSpec::from_toml(&chain_plan("auto"), "chain").unwrap();
    let resolved = plan::validate(&spec, &r).unwrap();
    let expect = if quiver_gpu::device::available() {
        "gpu"
    } else {
        "cpu"
    };
    let text = resolved.describe();
    assert!(
        text.contains(&format!("digis_b (raw_to_digis, {expect})")),
        "{text}"
    );
    assert!(
        text.contains(&format!("hits_b (rechits, {expect})")),
        "{text}"
    );
    assert!(text.contains("beamspot (beamspot, cpu)"), "{text}");
    // The job runs and every product of chain b equals chain a's (strict compares; without a
    // GPU both chains are the CPU's, so this checks the plan, not the device).
    if expect == "cpu" {
        println!(
            "NOTE: no GPU here: chain b is the CPU's too; the comparisons are CPU against CPU"
        );
    }
    let steps = resolved.build(&r, job()).unwrap();
    let opts = executor::RunOptions {
        threads: 2,
        batch_size: 2,
        first_event: 0,
        events: None,
        progress: false,
        cycle_input: false,
    };
    let summary = executor::run(&resolved, &steps, &opts).unwrap();
    assert_eq!(summary.events, 6);
    let report = summary.render();
    assert!(
        report.contains("[cmp_hits_hits]")
            && report.contains("[cmp_hits_hit_layers]")
            && report.contains("0 differences"),
        "{report}"
    );
    // Without the GPU crate, `auto` means cpu.
    let mut plain = Registry::with_builtin();
    quiver_reco::steps::register(&mut plain);
    let t = plain.get("calibrate").unwrap();
    assert_eq!(plain.resolve_auto(t), Backend::Cpu);
    let toml = "[[step]]\nlabel = \"n\"\ntype = \"random_floats\"\nbackend = \"auto\"\n[[step]]\nlabel = \"sq\"\ntype = \"square\"\nbackend = \"auto\"\n";
    let text = plan::validate(&plan::PlanSpec::from_toml(toml, "toy").unwrap(), &plain)
        .unwrap()
        .describe();
    assert!(text.contains("sq (square, cpu)"), "{text}");
}

#[test]
fn host_framing_matches_the_cpu_core() {
    let (_, ds) = dataset();
    let cabling = &ds.conditions().cabling;
    let events = ds.raw_events(0..ds.n_events()).unwrap();
    let framed =
        quiver_gpu::steps::frame_batch(events.iter().cloned(), quiver_reco::local::MAX_FED_WORDS);
    let mut with_errors = 0;
    for (e, feds) in events.iter().enumerate() {
        let cpu = quiver_reco::local::raw_to_digis(feds, cabling, &Default::default()).unwrap();
        assert_eq!(framed.words_per_event[e], cpu.n_digis as usize, "event {e}");
        let fe = &framed.framing_errors[e];
        assert_eq!(
            &cpu.errors[..fe.len()],
            &fe[..],
            "event {e}: framing errors come first, in order"
        );
        with_errors += (!fe.is_empty()) as usize;
    }
    println!("{with_errors} events with framing errors");
    // Hand-made FEDs: every framing rule.
    let w = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let fed = 1200u32;
    let cases: Vec<Vec<u8>> = vec![
        w(&[0x5000_0000_0004_b000, 0xa000_0002_0000_0000]),
        w(&[0x5000_0000_0004_b000, 0, 0xa000_0003_0000_0000]),
        w(&[
            0x4000_0000_0004_b000,
            0x1234_5678_9abc_def0,
            0xa000_0003_0000_0000,
        ]),
        w(&[
            0x5000_0000_0004_b008,
            0x5000_0000_0004_b000,
            7,
            0xa000_0004_0000_0008,
            0xa000_0004_0000_0000,
        ]),
        w(&[0x5000_0000_0004_b000, 0xa000_0009_0000_0004]),
        w(&[0x5000_0000_0004_c000, 1, 0xb000_0003_0000_0000]),
        w(&[0x5000_0000_0004_b008]),
        [
            w(&[0x5000_0000_0004_b000, 0xa000_0002_0000_0000]),
            vec![1, 2, 3],
        ]
        .concat(),
        vec![],
    ];
    for (k, bytes) in cases.iter().enumerate() {
        for f in [fed, 40, 1100] {
            let feds = vec![(f, bytes.as_slice())];
            let framed = quiver_gpu::steps::frame_batch(
                std::iter::once(feds.clone()),
                quiver_reco::local::MAX_FED_WORDS,
            );
            let cpu =
                quiver_reco::local::raw_to_digis(&feds, cabling, &Default::default()).unwrap();
            assert_eq!(
                framed.words_per_event[0], cpu.n_digis as usize,
                "case {k} fed {f}"
            );
            let fe = &framed.framing_errors[0];
            assert_eq!(&cpu.errors[..fe.len()], &fe[..], "case {k} fed {f}");
        }
    }
}

#[test]
fn compare_gpu_example_plan_with_auto() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plans/examples/compare-gpu.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let r = registry();
    let resolved = plan::validate(
        &plan::PlanSpec::from_toml(&text, "compare-gpu.toml").unwrap(),
        &r,
    )
    .unwrap();
    if !quiver_gpu::device::available() {
        let Err(e) = resolved.build(&r, job()) else {
            panic!("built without a GPU")
        };
        let e = e.to_string();
        assert!(
            e.starts_with("plan error: step 'digis_gpu': backend 'gpu' requested"),
            "{e}"
        );
    }
    // The same plan with `auto` runs anywhere, and every comparison passes. Without a GPU
    // `auto` is the CPU: the comparisons then compare the CPU chain with itself (a check of
    // the plan and of the compare steps, not of the GPU), and the test says so.
    if !quiver_gpu::device::available() {
        println!(
            "NOTE: no GPU here: compare-gpu.toml with `auto` compares the CPU chain with itself"
        );
    }
    let auto = text.replace("backend = \"gpu\"", "backend = \"auto\"");
    let resolved = plan::validate(&plan::PlanSpec::from_toml(&auto, "auto").unwrap(), &r).unwrap();
    let steps = resolved.build(&r, job()).unwrap();
    let opts = executor::RunOptions {
        threads: 2,
        batch_size: 4,
        first_event: 0,
        events: None,
        progress: false,
        cycle_input: false,
    };
    let summary = executor::run(&resolved, &steps, &opts).unwrap();
    let n_compares = summary
        .reports
        .iter()
        .filter(|(l, rep)| l.starts_with("cmp_") && rep.contains(" 0 differences"))
        .count();
    assert_eq!(n_compares, 21, "{}", summary.render());
}
