//! The `track_classifier` step through the command line: its product is one row per track,
//! bit-identical for any thread count and batch size, consistent with the tracks' quality and
//! the working point; a bad model file or threshold stops the plan naming the step and file.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, UInt8Type};
use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::support::{ok, quiver, stderr};

/// 5 events at ⟨PU⟩ 30 (a seed no training uses).
fn dataset() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ds");
        ok(quiver(&[
            "generate",
            "--events",
            "5",
            "--pileup",
            "30",
            "--seed",
            "11",
            "--no-progress",
            "--output",
            out.to_str().unwrap(),
        ]));
        (dir, out)
    })
    .1
}

/// plans/pixel.toml up to `tracks`, then the classifier with `extra` parameters, writing
/// `tracks` and `track_scores`.
fn plan(dir: &Path, extra: &str) -> PathBuf {
    let chain = std::fs::read_to_string("plans/pixel.toml").unwrap();
    let upto = chain.find("label = \"vertices\"").unwrap();
    let head = &chain[..chain[..upto].rfind("[[step]]").unwrap()];
    let text = format!(
        "{head}[[step]]\nlabel = \"clf\"\ntype = \"track_classifier\"\n{extra}\n\n\
         [[step]]\nlabel = \"output\"\ntype = \"write_parquet\"\nproducts = [\"tracks\", \"clf\"]\n"
    );
    let p = dir.join("plan.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn read(path: &Path) -> RecordBatch {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let b = ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let schema = b.schema().clone();
    let batches: Vec<RecordBatch> = b.build().unwrap().map(|b| b.unwrap()).collect();
    arrow_select::concat::concat_batches(&schema, &batches).unwrap()
}

fn run(plan: &Path, out: &Path, threads: &str, batch: &str) -> Output {
    quiver(&[
        "run",
        plan.to_str().unwrap(),
        "--no-progress",
        "--threads",
        threads,
        "--batch-size",
        batch,
        "--input",
        dataset().to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ])
}

#[test]
fn scores_every_track_identically_for_any_threads_and_batch_size() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(dir.path(), "");
    let mut first: Option<RecordBatch> = None;
    for (threads, batch) in [("1", "16"), ("2", "1"), ("2", "3")] {
        let out = dir.path().join(format!("out{threads}-{batch}"));
        ok(run(&p, &out, threads, batch));
        let scores = read(&out.join("track_scores.clf.parquet"));
        let tracks = read(&out.join("tracks.tracks.parquet"));
        assert_eq!(scores.num_rows(), tracks.num_rows());
        assert_eq!(
            scores.column_by_name("event").unwrap(),
            tracks.column_by_name("event").unwrap()
        );
        let s = scores.column_by_name("score").unwrap();
        let s = s.as_primitive::<Float32Type>().values();
        let q = scores.column_by_name("quality").unwrap();
        let q = q.as_primitive::<UInt8Type>().values();
        let tq = tracks.column_by_name("quality").unwrap();
        let tq = tq.as_primitive::<UInt8Type>().values();
        let wp = quiver_reco::classifier::Model::parse(
            quiver_reco::classifier::BUILTIN_MODEL,
            &quiver_reco::classifier::FEATURES,
        )
        .unwrap()
        .working_point;
        let mut high = 0;
        for i in 0..s.len() {
            assert!((0.0..=1.0).contains(&s[i]), "score {}", s[i]);
            let hp = tq[i] >= 2 && s[i] as f64 >= wp;
            assert_eq!(q[i], if hp { 5 } else { tq[i] }, "track {i}");
            high += hp as usize;
        }
        // The selection keeps most loose tracks and drops some.
        let loose = tq.iter().filter(|&&q| q >= 2).count();
        assert!(high > loose / 2 && high < loose, "{high} of {loose}");
        match &first {
            None => first = Some(scores),
            Some(f) => assert_eq!(f, &scores, "threads {threads}, batch {batch}"),
        }
    }
    // threshold = 0: every loose track is highPurity.
    let p = plan(dir.path(), "threshold = 0.0");
    let out = dir.path().join("all");
    ok(run(&p, &out, "2", "4"));
    let q = read(&out.join("track_scores.clf.parquet"));
    let t = read(&out.join("tracks.tracks.parquet"));
    let q = q.column_by_name("quality").unwrap();
    let t = t.column_by_name("quality").unwrap();
    for (a, b) in q
        .as_primitive::<UInt8Type>()
        .values()
        .iter()
        .zip(t.as_primitive::<UInt8Type>().values())
    {
        assert_eq!(*a, if *b >= 2 { 5 } else { *b });
    }
}

#[test]
fn a_bad_model_or_threshold_stops_the_plan_naming_step_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = quiver_reco::classifier::BUILTIN_MODEL;
    assert!(good.contains("\"left\":[1,") && good.contains("\"threshold\":["));
    let cases = [
        ("missing.json", None, "cannot read it"),
        (
            "damaged.json",
            Some(good[..good.len() / 2].to_string()),
            "invalid JSON or not a model",
        ),
        (
            "features.json",
            Some(good.replacen("\"n_hits\"", "\"nhits\"", 1)),
            "are not this build's",
        ),
        (
            "nan.json",
            Some(good.replacen("\"threshold\":[", "\"threshold\":[NaN,", 1)),
            "invalid JSON or not a model: expected value",
        ),
        (
            "child.json",
            Some(good.replacen("\"left\":[1,", "\"left\":[99999,", 1)),
            "child 99999",
        ),
    ];
    for (name, text, what) in cases {
        let file = dir.path().join(name);
        if let Some(t) = &text {
            std::fs::write(&file, t).unwrap();
        }
        let p = plan(dir.path(), &format!("model = {:?}", file.to_str().unwrap()));
        for o in [
            quiver(&["plan", "check", p.to_str().unwrap()]),
            run(&p, &dir.path().join("out"), "1", "4"),
        ] {
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{name}: {err}");
            assert!(
                err.contains("step 'clf'") && err.contains(file.to_str().unwrap()),
                "{name}: {err}"
            );
            assert!(err.contains(what), "{name}: {err}");
            assert!(!err.contains("panicked"), "{err}");
        }
        assert!(!dir.path().join("out").exists());
    }
    let p = plan(dir.path(), "threshold = -0.5");
    let o = quiver(&["plan", "check", p.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("'clf'") && err.contains("threshold"), "{err}");
}
