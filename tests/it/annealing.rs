//! `clusterizer = "annealing"` in the `vertices` step of the pixel chain, end to end: vertices
//! found, bit-identical for any thread count and batch size, bad parameters named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

fn quiver(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(args)
        .output()
        .expect("runs quiver")
}

/// 4 events at ⟨PU⟩ 20, shared by the tests of this file.
fn dataset() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let ds = dir.path().join("ds");
        let g = quiver(&[
            "generate",
            "--events",
            "4",
            "--pileup",
            "20",
            "--seed",
            "41",
            "--output",
            ds.to_str().unwrap(),
        ]);
        assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
        (dir, ds)
    })
    .1
}

/// plans/pixel.toml with `extra` lines added to its `vertices` step, written into `dir`.
fn plan(dir: &Path, extra: &str) -> String {
    let text = std::fs::read_to_string("plans/pixel.toml").unwrap();
    let step = "type = \"vertices\"\n";
    assert!(text.contains(step));
    let path = dir.join("plan.toml");
    std::fs::write(&path, text.replacen(step, &format!("{step}{extra}\n"), 1)).unwrap();
    path.to_str().unwrap().to_owned()
}

fn batches(path: &Path) -> Vec<RecordBatch> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = ParquetRecordBatchReaderBuilder::try_new(f).unwrap().build();
    reader.unwrap().map(|b| b.unwrap()).collect()
}

#[test]
fn annealing_vertices_run_end_to_end_and_are_bit_identical() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset();
    let plan = plan(dir.path(), "clusterizer = \"annealing\"");
    let mut reference: Option<Vec<Vec<RecordBatch>>> = None;
    for (threads, batch) in [(1, 4), (2, 1), (2, 3)] {
        let out = dir.path().join(format!("run-{threads}-{batch}"));
        let o = quiver(&[
            "run",
            &plan,
            "--no-progress",
            "--input",
            ds.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--threads",
            &threads.to_string(),
            "--batch-size",
            &batch.to_string(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let files = [
            "vertices.vertices.parquet",
            "track_vertices.vertices.parquet",
        ];
        // Concatenated per file: batch boundaries follow the batch size, the rows must not.
        let cols: Vec<Vec<RecordBatch>> = files
            .iter()
            .map(|f| {
                let b = batches(&out.join(f));
                vec![arrow_select::concat::concat_batches(&b[0].schema(), &b).unwrap()]
            })
            .collect();
        match &reference {
            None => {
                // ⟨PU⟩ 20: vertices in every event.
                assert!(
                    cols[0][0].num_rows() >= 4 * 5,
                    "{} vertices",
                    cols[0][0].num_rows()
                );
                reference = Some(cols);
            }
            Some(r) => assert!(*r == cols, "threads {threads}, batch {batch}"),
        }
    }
}

#[test]
fn bad_annealing_parameters_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, key) in [
        ("cooling_factor = 1.5", "cooling_factor"),
        ("t_purge = 5.0", "t_purge"),
        ("z_merge = -0.01", "z_merge"),
        ("t_min = nan", "t_min"),
    ] {
        let plan = plan(dir.path(), &format!("clusterizer = \"annealing\"\n{extra}"));
        // Ranges are checked when the plan is resolved, t_purge ≤ t_min when the step is
        // built: both before any event is read or any output written.
        let out = dir.path().join("out");
        let o = quiver(&[
            "run",
            &plan,
            "--no-progress",
            "--input",
            dataset().to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{extra}: accepted");
        assert!(
            err.contains("step 'vertices'") && err.contains(key),
            "{extra}: {err}"
        );
        assert!(!out.exists(), "{extra}: output written");
    }
}
