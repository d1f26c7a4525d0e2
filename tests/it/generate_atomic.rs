//! `quiver generate` replaces a dataset as a whole, as `quiver run` replaces a run: a failure
//! (a full disk) leaves the earlier dataset intact, and a directory that is neither empty nor
//! a dataset is refused before anything is written.

use std::path::Path;
use std::process::Output;

use crate::tmpfs;

use crate::support::{quiver, stderr};

fn generate(out: &Path, events: &str, pileup: &str) -> Output {
    quiver(&[
        "generate",
        "--events",
        events,
        "--pileup",
        pileup,
        "--seed",
        "3",
        "--threads",
        "1",
        "--output",
        out.to_str().unwrap(),
    ])
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_full_disk_leaves_the_earlier_dataset_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("small-disk");
    let Some(_guard) = tmpfs::mount(&vol, "6m", "a_full_disk_leaves_the_earlier_dataset_intact")
    else {
        return;
    };
    let ds = vol.join("ds");
    let o = generate(&ds, "2", "2");
    assert!(o.status.success(), "{}", stderr(&o));
    let before = std::fs::read(ds.join("manifest.toml")).unwrap();
    // Far more than 6 MB: the disk fills up half-way.
    let o = generate(&ds, "100", "50");
    assert!(!o.status.success(), "a full disk must fail the generation");
    assert_eq!(
        std::fs::read(ds.join("manifest.toml")).unwrap(),
        before,
        "the earlier manifest"
    );
    quiver_datasets::Dataset::open(&ds)
        .unwrap_or_else(|e| panic!("the earlier dataset must still open: {e}"));
    assert_eq!(names(&vol), ["ds"], "no staging directory left behind");
}

#[test]
fn generate_refuses_foreign_directories_and_runs_and_replaces_datasets() {
    let tmp = tempfile::tempdir().unwrap();
    let mine = tmp.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("thesis.tex"), b"chapter 1").unwrap();
    let o = generate(&mine, "1", "0");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("thesis.tex"), "{}", stderr(&o));
    assert_eq!(names(&mine), ["thesis.tex"]);

    let ds = tmp.path().join("ds");
    assert!(generate(&ds, "2", "2").status.success());
    let run = tmp.path().join("run");
    let o = quiver(&[
        "run",
        "--input",
        ds.to_str().unwrap(),
        "--output",
        run.to_str().unwrap(),
        "--no-progress",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let run_files = names(&run);
    let o = generate(&run, "1", "0");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds a Quiver run"), "{}", stderr(&o));
    assert_eq!(names(&run), run_files, "the run is untouched");
    // The run directory given as a dataset: said as such.
    let o = quiver(&[
        "run",
        "--input",
        run.to_str().unwrap(),
        "--output",
        tmp.path().join("o").to_str().unwrap(),
        "--no-progress",
    ]);
    assert!(
        stderr(&o).contains("is the output directory of a Quiver run, not a dataset"),
        "{}",
        stderr(&o)
    );

    // An earlier dataset is replaced as a whole.
    let o = generate(&ds, "3", "1");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(quiver_datasets::Dataset::open(&ds).unwrap().n_events(), 3);
    assert_eq!(names(tmp.path()), ["ds", "mine", "run"]);
}

#[test]
fn an_input_symlink_loop_is_not_called_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let o = quiver(&[
        "run",
        "--input",
        a.to_str().unwrap(),
        "--output",
        tmp.path().join("o").to_str().unwrap(),
        "--no-progress",
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        !e.contains("does not exist") && e.contains("symbolic links"),
        "{e}"
    );
}

#[test]
fn a_dataset_into_a_mount_point_is_committed_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("volume");
    let Some(_guard) = tmpfs::mount(
        &vol,
        "64m",
        "a_dataset_into_a_mount_point_is_committed_in_place",
    ) else {
        return;
    };
    let o = generate(&vol, "3", "2");
    assert!(o.status.success(), "{}", stderr(&o));
    let first = names(&vol);
    let o = generate(&vol, "2", "1");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(quiver_datasets::Dataset::open(&vol).unwrap().n_events(), 2);
    assert_eq!(
        names(&vol),
        first,
        "the same files, no staging directory or marker left"
    );
}

/// Measured against another dataset's truth, a run used to report efficiency 0 and fake
/// rate 1 with exit 0.
#[test]
fn report_refuses_a_truth_dataset_that_is_not_the_run_s_input() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, out) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("out"),
    );
    assert!(generate(&a, "2", "2").status.success());
    let o = quiver(&[
        "generate",
        "--events",
        "2",
        "--pileup",
        "2",
        "--seed",
        "4",
        "--output",
        b.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = quiver(&[
        "run",
        "--input",
        a.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--no-progress",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = |truth: &Path| {
        quiver(&[
            "report",
            "--run",
            out.to_str().unwrap(),
            "--truth",
            truth.to_str().unwrap(),
            "--output",
            tmp.path().join("rep").to_str().unwrap(),
        ])
    };
    let o = report(&b);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("seed 4 is not the dataset the run in")
            && stderr(&o).contains("seed 3"),
        "{}",
        stderr(&o)
    );
    let o = report(&a);
    assert!(o.status.success(), "{}", stderr(&o));
}
