//! Command-line tests: every bad-plan case with its message, the toy workflow end to end,
//! determinism across thread counts and batch sizes, and failed jobs' outputs.

use std::path::{Path, PathBuf};
use std::process::Command;

use arrow_array::{Array, Float32Array, RecordBatch, UInt32Array};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::support::{quiver, stderr, stdout};

fn write_plan(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("plan.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// `quiver plan check` fails with exactly this message, and so does `quiver run`.
fn assert_plan_error(text: &str, expected: &str) {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), text);
    for args in [
        vec!["plan", "check"],
        vec!["run", "--no-progress", "--events", "1"],
    ] {
        let mut a = args.clone();
        a.push(plan.to_str().unwrap());
        let o = quiver(&a);
        assert!(!o.status.success(), "{a:?} should fail");
        assert_eq!(o.status.code(), Some(1), "no panic (exit 101) for {a:?}");
        assert_eq!(
            stderr(&o).trim(),
            format!("plan error: {expected}"),
            "the prefix once, for {a:?}"
        );
    }
}

const NUMBERS: &str = "[[step]]\nlabel = \"numbers\"\ntype = \"random_floats\"\ncount = 10\n";

#[test]
fn unknown_step_type() {
    assert_plan_error(
        "[[step]]\nlabel = \"x\"\ntype = \"sqaure\"\n",
        "step 'x': unknown step type 'sqaure' (did you mean 'square'? `quiver steps` lists the catalogue)",
    );
}

#[test]
fn unknown_parameter() {
    assert_plan_error(
        &format!("{NUMBERS}colour = \"red\"\n"),
        "step 'numbers': unknown parameter 'colour' (known: count, seed, low, high)",
    );
}

#[test]
fn parameter_of_the_wrong_type() {
    assert_plan_error(
        "[[step]]\nlabel = \"numbers\"\ntype = \"random_floats\"\ncount = \"many\"\n",
        "step 'numbers': parameter 'count' must be integer, got \"many\" (string)",
    );
    assert_plan_error(
        &format!("{NUMBERS}[[step]]\nlabel = \"sq\"\ntype = \"square\"\nmethod = \"cube\"\n"),
        "step 'sq': parameter 'method' = \"cube\" is not one of \"multiply\", \"powi\"",
    );
}

#[test]
fn missing_input() {
    assert_plan_error(
        "[[step]]\nlabel = \"sq\"\ntype = \"square\"\n",
        "step 'sq': missing input 'input': no step of this plan produces 'floats'",
    );
    assert_plan_error(
        &format!("{NUMBERS}[[step]]\nlabel = \"sq\"\ntype = \"square\"\ninput = \"nummbers\"\n"),
        "step 'sq': input 'input' = \"nummbers\": no step of this plan has label 'nummbers'",
    );
}

#[test]
fn ambiguous_input() {
    assert_plan_error(
        &format!("{NUMBERS}[[step]]\nlabel = \"more\"\ntype = \"random_floats\"\n[[step]]\nlabel = \"sq\"\ntype = \"square\"\n"),
        "step 'sq': ambiguous input 'input': 2 steps produce 'floats' (numbers, more); name one with input = \"LABEL\"",
    );
}

#[test]
fn cycle() {
    assert_plan_error(
        "[[step]]\nlabel = \"a\"\ntype = \"square\"\ninput = \"b\"\n[[step]]\nlabel = \"b\"\ntype = \"square\"\ninput = \"a\"\n",
        "step 'a': cycle: steps a -> b consume each other's products",
    );
}

#[test]
fn duplicate_label() {
    assert_plan_error(
        &format!("{NUMBERS}{NUMBERS}"),
        "step 'numbers': duplicate label: another step of this plan has the same label",
    );
}

#[test]
fn backend_not_implemented_and_unknown_backend() {
    assert_plan_error(
        &format!("{NUMBERS}[[step]]\nlabel = \"sq\"\ntype = \"square\"\nbackend = \"gpu\"\n"),
        "step 'sq': backend 'gpu' is not implemented by step type 'square' (it has: cpu)",
    );
    assert_plan_error(
        &format!("{NUMBERS}[[step]]\nlabel = \"sq\"\ntype = \"square\"\nbackend = \"tpu\"\n"),
        "step 'sq': backend: unknown backend 'tpu' (known: cpu, gpu, python)",
    );
}

#[test]
fn malformed_plans() {
    let dir = tempfile::tempdir().unwrap();
    for (text, expected) in [
        ("[[step]]\ntype = \"square\"\n", "step #1 has no 'label'"),
        (
            "[[step]]\nlabel = \"a b\"\ntype = \"square\"\n",
            "step 'a b': a label may hold only letters, digits, '_' and '-'",
        ),
        (
            "[run]\nthreds = 2\n[[step]]\nlabel = \"a\"\ntype = \"square\"\n",
            "unknown field `threds`",
        ),
        ("[run]\nthreads = 2\n", "the plan has no [[step]]"),
        (
            "[[step]]\nlabel = \"a\"\ntype = \"square\"\ninput = 3\n",
            "step 'a': input 'input' must be a label (string), got 3",
        ),
        ("[[step]\n", "TOML parse error"),
    ] {
        let plan = write_plan(dir.path(), text);
        let o = quiver(&["plan", "check", plan.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{text}");
        assert!(stderr(&o).contains(expected), "{text}: {}", stderr(&o));
    }
}

#[test]
fn plan_check_prints_the_resolved_plan() {
    let o = quiver(&["plan", "check", "plans/examples/square.toml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("valid, 5 steps"), "{out}");
    assert!(out.contains(" 1. numbers (random_floats, cpu)"), "{out}");
    assert!(out.contains("input <- numbers:floats"), "{out}");
    assert!(
        out.contains("products <- numbers:floats, squared:floats"),
        "{out}"
    );
}

#[test]
fn steps_lists_the_catalogue() {
    let o = quiver(&["steps"]);
    let out = stdout(&o);
    for needle in [
        "random_floats  [cpu]",
        "param  count",
        "= 1000",
        "values per event",
        "write_parquet",
        "compare",
        "input  input",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
}

fn read_parquet(path: &Path) -> (Vec<u32>, Vec<f32>, usize) {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let builder = ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let groups = builder.metadata().num_row_groups();
    let (mut ev, mut val) = (Vec::new(), Vec::new());
    for b in builder.build().unwrap() {
        let b: RecordBatch = b.unwrap();
        ev.extend(
            b.column(0)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .unwrap()
                .values()
                .iter(),
        );
        val.extend(
            b.column(1)
                .as_any()
                .downcast_ref::<Float32Array>()
                .unwrap()
                .values()
                .iter(),
        );
    }
    (ev, val, groups)
}

#[test]
fn toy_workflow_is_deterministic_for_any_threads_and_batch_size() {
    let mut results = Vec::new();
    for (threads, batch) in [(1, 16), (2, 16), (2, 7), (1, 1), (2, 100)] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let o = quiver(&[
            "run",
            "plans/examples/square.toml",
            "--no-progress",
            "--events",
            "50",
            "--threads",
            &threads.to_string(),
            "--batch-size",
            &batch.to_string(),
            "--output",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        assert!(text.contains("events 50"), "{text}");
        assert!(
            text.contains(
                "compared squared:floats with squared_powi:floats: 50000 rows, 0 differences"
            ),
            "{text}"
        );
        assert!(
            text.contains("pool:") && text.contains("throughput"),
            "{text}"
        );
        let (ev, sq, groups) = read_parquet(&out.join("floats.squared.parquet"));
        let (ev2, x, _) = read_parquet(&out.join("floats.numbers.parquet"));
        // Row groups close once they hold 16 events (whole batches), whatever the batch size.
        let (mut expected, mut open) = (0, 0);
        for first in (0..50).step_by(batch) {
            open += batch.min(50 - first);
            if open >= 16 {
                (expected, open) = (expected + 1, 0);
            }
        }
        expected += usize::from(open > 0);
        assert_eq!(
            groups, expected,
            "row groups of at least 16 events for batch size {batch}"
        );
        assert_eq!(ev.len(), 50_000);
        assert!(ev.windows(2).all(|w| w[0] <= w[1]), "rows ordered by event");
        assert_eq!(ev, ev2);
        assert!(x.iter().zip(&sq).all(|(a, b)| a * a == *b));
        let leftovers: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
        results.push(sq.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    }
    assert!(
        results.windows(2).all(|w| w[0] == w[1]),
        "bit-identical for every threads/batch-size"
    );
}

#[test]
fn strict_compare_fails_the_job_with_event_row_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let plan = write_plan(
        dir.path(),
        &format!(
            "{NUMBERS}[[step]]\nlabel = \"sq\"\ntype = \"square\"\n[[step]]\nlabel = \"w\"\ntype = \"write_parquet\"\nproducts = [\"numbers\"]\n\
             [[step]]\nlabel = \"check\"\ntype = \"compare\"\na = \"numbers\"\nb = \"sq\"\n"
        ),
    );
    let o = quiver(&[
        "run",
        plan.to_str().unwrap(),
        "--no-progress",
        "--events",
        "20",
        "--threads",
        "2",
        "--batch-size",
        "4",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: step 'check' failed on events 0..4: numbers:floats and sq:floats differ at event 0, row 0, column 'value': "),
        "{err}"
    );
    // The output of the failed job is kept beside the output directory, never as a run.
    assert!(!out.exists(), "a failed job made its output directory");
    let partial = dir.path().join("out.partial");
    assert!(
        err.contains(&format!("are in {}", partial.display())),
        "{err}"
    );
    // The writer ran before the failing compare on batch 0, so that batch is kept.
    let (ev, _, _) = read_parquet(&partial.join("floats.numbers.parquet.partial"));
    assert_eq!(
        &ev[..40],
        &[
            0u32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
            2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3
        ]
    );

    // Non-strict: the job succeeds and reports the count per column.
    std::fs::write(
        &plan,
        std::fs::read_to_string(&plan).unwrap() + "strict = false\ntolerance = 2.0\n",
    )
    .unwrap();
    let o = quiver(&[
        "run",
        plan.to_str().unwrap(),
        "--no-progress",
        "--events",
        "20",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("compared numbers:floats with sq:floats: 200 rows, 0 differences"),
        "{}",
        stdout(&o)
    );

    // Failing again: the complete run in the directory stays as it was.
    let before = quiver::columnar::rundir::verify(&out).unwrap();
    std::fs::write(
        &plan,
        std::fs::read_to_string(&plan)
            .unwrap()
            .replace("strict = false\ntolerance = 2.0\n", ""),
    )
    .unwrap();
    let o = quiver(&[
        "run",
        plan.to_str().unwrap(),
        "--no-progress",
        "--events",
        "12",
        "--batch-size",
        "4",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!("{} is unchanged", out.display())),
        "{}",
        stderr(&o)
    );
    assert_eq!(quiver::columnar::rundir::verify(&out).unwrap(), before);
}

#[test]
fn a_product_selected_twice_is_written_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // "numbers" (every product of the label) and "numbers:floats" name the same product.
    let plan = write_plan(
        dir.path(),
        &format!("{NUMBERS}[[step]]\nlabel = \"w\"\ntype = \"write_parquet\"\nproducts = [\"numbers\", \"numbers:floats\"]\n"),
    );
    let o = quiver(&[
        "run",
        plan.to_str().unwrap(),
        "--no-progress",
        "--events",
        "10",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).matches("floats.numbers.parquet").count(),
        1,
        "{}",
        stdout(&o)
    );
    let (ev, _, groups) = read_parquet(&out.join("floats.numbers.parquet"));
    assert_eq!((ev.len(), groups), (100, 1));
}

#[test]
fn events_are_required_without_a_source_that_knows() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), NUMBERS);
    let o = quiver(&["run", plan.to_str().unwrap(), "--no-progress"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no step knows how many events there are: give --events N"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn missing_plan_file_is_named() {
    let o = quiver(&["plan", "check", "no/such/plan.toml"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("error: no/such/plan.toml: "),
        "{}",
        stderr(&o)
    );
}

#[test]
fn write_ipc_writes_one_record_batch_per_batch() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let plan = write_plan(dir.path(), &format!("{NUMBERS}[[step]]\nlabel = \"w\"\ntype = \"write_ipc\"\nproducts = [\"numbers:floats\"]\n"));
    let o = quiver(&[
        "run",
        plan.to_str().unwrap(),
        "--no-progress",
        "--events",
        "9",
        "--batch-size",
        "4",
        "--threads",
        "2",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let f = std::fs::File::open(out.join("floats.numbers.arrow")).unwrap();
    let reader = arrow_ipc::reader::FileReader::try_new(f, None).unwrap();
    assert_eq!(reader.schema().metadata()["quiver.schema"], "floats");
    let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
    assert_eq!(
        batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
        vec![40, 40, 10]
    );
    let ev: Vec<u32> = batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    assert_eq!(ev.first(), Some(&0));
    assert_eq!(ev.last(), Some(&8));
    assert!(ev.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn python_steps_explain_where_they_run() {
    assert_plan_error(
        &format!("{NUMBERS}[[step]]\nlabel = \"py\"\ntype = \"python\"\nbackend = \"python\"\nmodule = \"m.py\"\nclass = \"C\"\n"),
        "step 'py': Python steps need the Python package: `pip install ./py` (or `maturin develop -m py/Cargo.toml`), \
         then run the `quiver` command it installs",
    );
}

#[test]
fn python_commands_explain_where_they_run() {
    for cmd in ["query", "reconstruct"] {
        let o = quiver(&[cmd, "quiver-out", "SELECT 1"]);
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!(
                "`quiver {cmd}` is a command of the Python package"
            )) && err.contains("pip install ./py"),
            "{err}"
        );
    }
}

#[test]
fn generate_prints_a_readable_summary_and_the_next_command() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let o = quiver(&[
        "generate",
        "--events",
        "2",
        "--pileup",
        "2",
        "--seed",
        "4",
        "--output",
        ds.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        !out.contains("GenerateSummary") && !out.contains('{'),
        "a Debug struct: {out}"
    );
    assert!(
        out.starts_with(&format!(
            "generated 2 events at <PU> 2 (seed 4) into {}",
            ds.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(" FED words, ") && out.contains(" clusters\n"),
        "{out}"
    );
    assert!(
        out.trim_end()
            .ends_with(&format!("next: quiver run --input {}", ds.display())),
        "{out}"
    );
}

#[test]
fn an_output_that_cannot_be_a_directory_fails_before_any_event_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("afile");
    std::fs::write(&file, b"x").unwrap();
    for (out, expected) in [
        (
            file.clone(),
            format!(
                "the output directory {} is an existing file, not a directory",
                file.display()
            ),
        ),
        (
            file.join("sub"),
            format!(
                "cannot create the output directory {}",
                file.join("sub").display()
            ),
        ),
    ] {
        let o = quiver(&[
            "run",
            "plans/examples/square.toml",
            "--no-progress",
            "--events",
            "5",
            "--output",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(&expected), "{e}");
        assert!(
            !stdout(&o).contains("events 5"),
            "no event ran: {}",
            stdout(&o)
        );
    }
}

#[test]
fn input_pointing_nowhere_says_how_to_make_a_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dataset");
    let plan = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/pixel.toml");
    for (input, why) in [
        (missing, "does not exist"),
        (dir.path().to_path_buf(), "holds no manifest.toml"),
    ] {
        let o = quiver(&[
            "run",
            plan.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--events",
            "1",
            "--no-progress",
            "--output",
            dir.path().join("out").to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains(&format!("input dataset: {} {why}", input.display())),
            "{e}"
        );
        assert!(
            e.contains(&format!(
                "make one with `quiver generate --output {}`",
                input.display()
            )),
            "{e}"
        );
    }
}

#[test]
fn plan_check_shows_when_each_product_is_dropped() {
    let o = quiver(&["plan", "check", "plans/examples/square.toml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // Held until the output step reads it (the memory cost of writing it)...
    assert!(
        out.contains("-> numbers:floats  (last read by step 5, output)"),
        "{out}"
    );
    // ...or only until the compare.
    assert!(
        out.contains("-> squared_powi:floats  (last read by step 4, check)"),
        "{out}"
    );
}

/// docs/concepts.md's crate map says which Quiver crates each crate depends on: it must be
/// what the manifests say (normal dependencies; dev-dependencies do not count, nor does
/// `quiver-workspace-hack`, which holds no code and which every crate depends on).
#[test]
fn crate_map_in_concepts_matches_the_manifests() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/concepts.md")).unwrap();
    let short = |name: &str| name.trim_start_matches("quiver-").to_string();
    let mut rows = 0;
    for line in doc.lines().filter(|l| l.starts_with("| `quiver")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (name, folder) = cells[1].split_once(" (").unwrap();
        let (name, folder) = (
            name.trim_matches('`'),
            folder.trim_end_matches(')').trim_matches('`'),
        );
        // The CLI's sources are in src/, its manifest is the workspace root's.
        let dir = if folder == "src/" {
            root.to_path_buf()
        } else {
            root.join(folder)
        };
        let manifest: toml::Table = std::fs::read_to_string(dir.join("Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(manifest["package"]["name"].as_str(), Some(name), "{folder}");
        let mut deps: Vec<String> = manifest
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|t| {
                t.keys()
                    .filter(|k| k.starts_with("quiver") && *k != "quiver-workspace-hack")
                    .map(|k| short(k))
                    .collect()
            })
            .unwrap_or_default();
        deps.sort();
        let listed = cells[2];
        let mut said: Vec<String> = if listed.starts_with('—') {
            vec![]
        } else if listed == "all of the above" {
            let mut all: Vec<String> = [
                "columnar",
                "formats",
                "datasets",
                "reco",
                "gpu",
                "validation",
            ]
            .map(String::from)
            .to_vec();
            all.sort();
            all
        } else {
            listed.split(", ").map(|s| s.trim().to_string()).collect()
        };
        said.sort();
        assert_eq!(said, deps, "docs/concepts.md: dependencies of {name}");
        rows += 1;
    }
    assert_eq!(rows, 8, "one row per crate of the workspace and py/");
}

/// A GPU setting with a value it does not take refuses a GPU plan before any event, naming
/// the variable and its values (with or without a GPU: the settings are read first).
#[test]
fn a_bad_gpu_setting_is_a_plan_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let g = quiver(&[
        "generate",
        "--events",
        "1",
        "--pileup",
        "1",
        "--output",
        ds.to_str().unwrap(),
    ]);
    assert!(g.status.success(), "{}", stderr(&g));
    let plan = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/plans/examples/compare-gpu.toml"
    );
    for (var, value, says) in [
        ("QUIVER_GPU_SYNC", "bogus", "QUIVER_GPU_SYNC=bogus: the values are 'events' (the default) and 'streams'"),
        ("QUIVER_GPU_WAIT", "sleepy", "QUIVER_GPU_WAIT=sleepy: the values are 'auto' (the default), 'spin', 'yield' and 'block'"),
    ] {
        let out = dir.path().join(format!("out-{var}"));
        let o = Command::new(env!("CARGO_BIN_EXE_quiver"))
            .args(["run", "--no-progress", "--input", ds.to_str().unwrap(), "--output", out.to_str().unwrap(), plan])
            .env(var, value)
            .output()
            .expect("runs quiver");
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{var}: no panic, a plan error: {e}");
        assert!(e.contains("plan error: step '") && e.contains("backend 'gpu' requested"), "{var}: {e}");
        assert!(e.contains(says), "{var}: {e}");
        assert!(!out.join("compare").exists(), "{var}: nothing written");
    }
}

/// Event numbers are a u32 column: a range past 2^32 used to wrap (4294967295, 0, 1, …).
#[test]
fn an_event_range_past_32_bits_is_refused_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), NUMBERS);
    let run = |first: &str| {
        let out = dir.path().join(format!("out-{first}"));
        quiver(&[
            "run",
            "--no-progress",
            plan.to_str().unwrap(),
            "--first-event",
            first,
            "--events",
            "10",
            "--output",
            out.to_str().unwrap(),
        ])
    };
    let o = run("4294967290");
    assert_eq!(
        o.status.code(),
        Some(2),
        "a usage error, no panic: {}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("event numbers are 32-bit"),
        "{}",
        stderr(&o)
    );
    // The last range that fits ends at event 2^32 - 1.
    let o = run("4294967286");
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `quiver steps | head -3`: the reader goes away; quiver ends quietly (killed by SIGPIPE,
/// as other Unix tools), not with a panic (exit 101) on the broken pipe.
#[test]
fn a_closed_pipe_ends_quiver_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .arg("steps")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Closed before quiver writes (it has barely started): its first write meets EPIPE.
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .as_mut()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(status.code(), Some(101), "{err}");
}

/// Two steps writing one file: a `histograms` file named like a product file failed at the
/// end of the job, and two `histograms` steps silently wrote one file. Both are refused
/// before any event, by `plan check` as by `run`.
#[test]
fn two_steps_writing_one_file_are_refused_before_any_event() {
    let pixel =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/pixel.toml"))
            .unwrap();
    let collide = pixel.replace("text = true ", "file = \"tracks.tracks\"\ntext = true ");
    assert_ne!(collide, pixel);
    let twice = format!(
        "{pixel}\n[[step]]\nlabel = \"histograms2\"\ntype = \"histograms\"\ntracks = \"tracks\"\n"
    );
    for (text, expected) in [
        (collide, "plan error: step 'output': writes tracks.tracks.parquet into the output directory, and step 'histograms' writes it too"),
        (twice, "plan error: step 'histograms2': writes histograms.parquet into the output directory, and step 'histograms' writes it too"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let plan = write_plan(dir.path(), &text);
        for args in [vec!["plan", "check"], vec!["run", "--no-progress", "--events", "1"]] {
            let mut a = args.clone();
            a.push(plan.to_str().unwrap());
            let o = quiver(&a);
            assert_eq!(o.status.code(), Some(1), "{a:?}: {}", stderr(&o));
            assert!(stderr(&o).contains(expected), "{a:?}: {}", stderr(&o));
        }
    }
}

/// `plan check` accepted `low = 5.0, high = 1.0`, which `run` refused: one validation now.
#[test]
fn plan_check_refuses_what_run_refuses_low_above_high() {
    assert_plan_error(
        "[[step]]\nlabel = \"numbers\"\ntype = \"random_floats\"\nlow = 5.0\nhigh = 1.0\n",
        "step 'numbers': parameter 'high': must be greater than low (5)",
    );
}

/// Parquet holds at most 32 767 row groups per file: with a row group per 16 events, an
/// output failed after 524 300 events. Row groups now grow with the job.
#[test]
fn a_parquet_output_past_32767_row_groups_of_16_events_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(
        dir.path(),
        &format!(
            "{}\n[[step]]\nlabel = \"out\"\ntype = \"write_parquet\"\nproducts = [\"numbers\"]\n",
            NUMBERS.replace("count = 10", "count = 1")
        ),
    );
    let out = dir.path().join("out");
    let o = quiver(&[
        "run",
        plan.to_str().unwrap(),
        "--events",
        "600000",
        "--batch-size",
        "16",
        "--output",
        out.to_str().unwrap(),
        "--no-progress",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let f = std::fs::File::open(out.join("floats.numbers.parquet")).unwrap();
    let b = ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let meta = b.metadata().clone();
    assert_eq!(meta.file_metadata().num_rows(), 600_000);
    assert!(
        meta.num_row_groups() <= 8192,
        "{} row groups",
        meta.num_row_groups()
    );
}

/// Runs quiver with stdin, stdout and stderr on a new pseudo-terminal, as from an
/// interactive shell; returns everything the terminal received and the exit status.
fn quiver_on_a_terminal(args: &[&str]) -> (String, std::process::ExitStatus) {
    quiver_on_a_terminal_with(args, &[])
}

/// [`quiver_on_a_terminal`] with extra environment variables.
fn quiver_on_a_terminal_with(
    args: &[&str],
    envs: &[(&str, &std::path::Path)],
) -> (String, std::process::ExitStatus) {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors, which are then owned by the OwnedFds below.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: fresh descriptors from openpty, owned by nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(args)
        .envs(envs.iter().copied())
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .spawn()
        .expect("runs quiver");
    // The Command's copies of the terminal's descriptors are gone once spawn returns: the
    // reads below end (EIO) when the child closes its own.
    let mut terminal = std::fs::File::from(master);
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = terminal.read(&mut buf) {
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
    }
    let status = child.wait().unwrap();
    (String::from_utf8_lossy(&seen).into_owned(), status)
}

#[test]
fn generate_draws_a_bar_on_a_terminal_and_nothing_when_piped() {
    let dir = tempfile::tempdir().unwrap();
    let args = |name: &str| {
        let out = dir.path().join(name);
        ["generate", "--events", "40", "--pileup", "5", "--output"]
            .iter()
            .map(|s| s.to_string())
            .chain([out.to_str().unwrap().to_string()])
            .collect::<Vec<_>>()
    };
    let tty_args = args("tty");
    let tty_args: Vec<&str> = tty_args.iter().map(String::as_str).collect();
    let (seen, status) = quiver_on_a_terminal(&tty_args);
    assert!(status.success(), "{seen}");
    assert!(
        seen.contains("/40 events") && seen.contains("events/s") && seen.contains("eta "),
        "no progress bar on the terminal: {seen:?}"
    );
    assert!(seen.contains("generated 40 events"), "{seen:?}");

    let piped_args = args("piped");
    let piped_args: Vec<&str> = piped_args.iter().map(String::as_str).collect();
    let o = quiver(&piped_args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "a bar drawn into a pipe");
    assert!(
        !stdout(&o).contains("/40 events") && !stdout(&o).contains('\r'),
        "{}",
        stdout(&o)
    );
    // --no-progress: nothing even on a terminal.
    let mut quiet = args("quiet");
    quiet.push("--no-progress".into());
    let quiet: Vec<&str> = quiet.iter().map(String::as_str).collect();
    let (seen, status) = quiver_on_a_terminal(&quiet);
    assert!(status.success(), "{seen}");
    assert!(!seen.contains("/40 events"), "{seen:?}");
    // An error on a terminal: the bar is cleared, the error's line stands alone.
    let bad = args("bad");
    let bad: Vec<&str> = bad
        .iter()
        .map(|a| if a == "40" { "0" } else { a.as_str() })
        .collect();
    let (seen, status) = quiver_on_a_terminal(&bad);
    assert_eq!(status.code(), Some(1), "{seen}");
    let visible = seen.rsplit("\x1b[2K").next().unwrap_or_default();
    assert!(
        visible.starts_with("error: ") && visible.lines().count() == 1,
        "{seen:?}"
    );
}

#[test]
fn run_draws_a_bar_while_it_generates_the_default_dataset_and_not_after() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    let args = [
        "run",
        "plans/examples/local.toml",
        "--events",
        "2",
        "--no-progress",
        "--output",
        out.to_str().unwrap(),
    ];
    // --no-progress is the run's bar; the first use of the default dataset still says what
    // it is doing, and draws its bar only when a bar is wanted.
    let (seen, status) = quiver_on_a_terminal_with(&args, &[("QUIVER_DATA", &data)]);
    assert!(status.success(), "{seen}");
    assert!(seen.contains("default dataset in"), "{seen:?}");
    assert!(
        !seen.contains("/100 events"),
        "--no-progress drew a bar: {seen:?}"
    );
    std::fs::remove_dir_all(&data).unwrap();
    let with_bar = &args[..args.len() - 3];
    let with_bar: Vec<&str> = with_bar
        .iter()
        .copied()
        .filter(|a| *a != "--no-progress")
        .chain(["--output", out.to_str().unwrap()])
        .collect();
    let (seen, status) = quiver_on_a_terminal_with(&with_bar, &[("QUIVER_DATA", &data)]);
    assert!(status.success(), "{seen}");
    assert!(
        seen.contains("/100 events") && seen.contains("eta "),
        "no bar while generating the default dataset: {seen:?}"
    );
    // The dataset is there now: nothing about generating.
    let (seen, status) = quiver_on_a_terminal_with(&with_bar, &[("QUIVER_DATA", &data)]);
    assert!(status.success(), "{seen}");
    assert!(
        !seen.contains("default dataset in") && !seen.contains("/100 events"),
        "{seen:?}"
    );
}

#[test]
fn a_bench_of_short_runs_says_its_speed_up_means_little() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), NUMBERS);
    let o = quiver(&[
        "bench",
        plan.to_str().unwrap(),
        "--events",
        "3",
        "--threads",
        "1,2",
        "--repeat",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("speed-up"), "{out}");
    assert!(
        out.contains("note: runs under 1 s measure start-up more than throughput")
            && out.contains("--events N, with --cycle"),
        "{out}"
    );
}
