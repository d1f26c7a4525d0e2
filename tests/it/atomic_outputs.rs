//! Whole-run atomic outputs: a run killed at any moment leaves its output directory holding
//! exactly one complete run (the earlier one or the new one) that readers accept, and what
//! the killed runs left beside it is removed by the next run.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use quiver::columnar::rundir::{self, MANIFEST};
use rand::{Rng, SeedableRng};

use crate::tmpfs;

use crate::support::{ok, quiver};

fn entries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_run_killed_at_any_moment_leaves_one_complete_run() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    let out = tmp.path().join("out");
    let (ds_s, out_s) = (ds.to_str().unwrap(), out.to_str().unwrap());
    ok(quiver(&[
        "generate", "--events", "10", "--pileup", "10", "--seed", "7", "--output", ds_s,
    ]));
    // The earlier run: 8 events of the default plan.
    ok(quiver(&[
        "run",
        "--input",
        ds_s,
        "--output",
        out_s,
        "--events",
        "8",
        "--no-progress",
    ]));
    let mut old = rundir::verify(&out).unwrap();
    assert_eq!(old.events, 8);

    // How long a whole run takes here, to spread the kills over it and past its end.
    let probe = tmp.path().join("probe");
    let t0 = Instant::now();
    ok(quiver(&[
        "run",
        "--input",
        ds_s,
        "--output",
        probe.to_str().unwrap(),
        "--no-progress",
    ]));
    let full = t0.elapsed();
    let new = rundir::verify(&probe).unwrap();
    std::fs::remove_dir_all(&probe).unwrap();
    assert_eq!(new.events, 10);

    let mut rng = rand_xoshiro::SplitMix64::seed_from_u64(0x5EED);
    let (mut kept_old, mut took_new) = (0, 0);
    for i in 0..50 {
        // 20 kills anywhere in the run, 30 around its end, where the files are renamed,
        // the manifest written and the directories exchanged.
        let frac: f64 = rng.random();
        let delay = full.mul_f64(if i < 20 { 1.3 * frac } else { 0.7 + 0.8 * frac });
        let mut child = Command::new(env!("CARGO_BIN_EXE_quiver"))
            .args(["run", "--input", ds_s, "--output", out_s, "--no-progress"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        child.wait().unwrap();

        let m = rundir::verify(&out).unwrap_or_else(|e| {
            panic!("kill #{i} after {delay:?}: the directory is not one complete run: {e}")
        });
        match m.events {
            8 => {
                kept_old += 1;
                // The earlier run, byte for byte.
                assert_eq!(m, old, "kill #{i}");
            }
            10 => {
                took_new += 1;
                // The new run's files, each with the checksum its own manifest recorded
                // (Parquet files are not byte-reproducible between processes: the schema
                // metadata's order varies, so names are compared with the probe's).
                assert!(m.files.keys().eq(new.files.keys()), "kill #{i}");
                // Back to an earlier run of 8 events for the next kill.
                ok(quiver(&[
                    "run",
                    "--input",
                    ds_s,
                    "--output",
                    out_s,
                    "--events",
                    "8",
                    "--no-progress",
                ]));
                old = rundir::verify(&out).unwrap();
            }
            n => panic!("kill #{i}: a run of {n} events"),
        }
        let mut listed: BTreeSet<String> = m.files.keys().cloned().collect();
        listed.insert(MANIFEST.to_string());
        assert_eq!(
            entries(&out),
            listed,
            "kill #{i}: files beside the run's own"
        );
    }
    eprintln!("50 kills over {full:?}: {kept_old} left the earlier run, {took_new} the new one");
    assert!(
        kept_old > 0 && took_new > 0,
        "the kills did not span the run ({kept_old} old, {took_new} new)"
    );

    // The next run removes what the killed ones left beside the directory.
    ok(quiver(&[
        "run",
        "--input",
        ds_s,
        "--output",
        out_s,
        "--events",
        "9",
        "--no-progress",
    ]));
    assert_eq!(rundir::verify(&out).unwrap().events, 9);
    assert_eq!(
        entries(tmp.path()),
        ["ds", "out"].map(String::from).into_iter().collect()
    );
    // And a reader of the whole chain's products accepts the directory.
    let report = tmp.path().join("report");
    ok(quiver(&[
        "report",
        "--run",
        out_s,
        "--truth",
        ds_s,
        "--output",
        report.to_str().unwrap(),
    ]));
}

#[test]
fn a_smaller_plan_replaces_the_whole_earlier_run_and_foreign_directories_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let out_s = out.to_str().unwrap();
    let plan = |name: &str, products: &str| {
        let p = tmp.path().join(name);
        std::fs::write(
            &p,
            format!(
                "[[step]]\nlabel = \"numbers\"\ntype = \"random_floats\"\ncount = 5\n[[step]]\nlabel = \"squared\"\ntype = \"square\"\n\
                 input = \"numbers\"\n[[step]]\nlabel = \"w\"\ntype = \"write_parquet\"\nproducts = [{products}]\n"
            ),
        )
        .unwrap();
        p
    };
    let both = plan("both.toml", "\"numbers\", \"squared\"");
    let one = plan("one.toml", "\"squared\"");
    ok(quiver(&[
        "run",
        both.to_str().unwrap(),
        "--events",
        "8",
        "--output",
        out_s,
        "--no-progress",
    ]));
    assert!(out.join("floats.numbers.parquet").is_file());
    let stdout = ok(quiver(&[
        "run",
        one.to_str().unwrap(),
        "--events",
        "10",
        "--output",
        out_s,
        "--no-progress",
    ]));
    assert!(
        stdout.contains("replaced the run of events 0..8"),
        "{stdout}"
    );
    // Nothing of the earlier run is left beside the new one.
    assert_eq!(
        entries(&out),
        ["floats.squared.parquet", MANIFEST]
            .map(String::from)
            .into_iter()
            .collect()
    );
    assert_eq!(rundir::verify(&out).unwrap().events, 10);

    // A directory holding anything else is refused before any event, and left alone.
    std::fs::write(out.join("thesis.tex"), b"months of work").unwrap();
    let o = quiver(&[
        "run",
        both.to_str().unwrap(),
        "--events",
        "8",
        "--output",
        out_s,
        "--no-progress",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("thesis.tex") && err.contains("not part of the run"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(out.join("thesis.tex")).unwrap(),
        b"months of work"
    );
    let mine = tmp.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), b"x").unwrap();
    let o = quiver(&[
        "run",
        both.to_str().unwrap(),
        "--events",
        "8",
        "--output",
        mine.to_str().unwrap(),
        "--no-progress",
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds no Quiver run manifest"));
    assert_eq!(
        entries(&mine),
        ["notes.txt".to_string()].into_iter().collect()
    );
}

/// Unmounts on the way out, also when an assertion fails.
/// A run into a mount point (a Docker or Kubernetes volume): the directory can be neither
/// renamed nor exchanged (EBUSY) and is on another file system than its parent. Before, the
/// finished run was deleted while the message said it was kept.
#[test]
fn a_run_into_a_mount_point_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    let mnt = tmp.path().join("volume");
    // Where mounting is not permitted, the in-place commit is still covered by rundir's
    // unit tests.
    let Some(_guard) = tmpfs::mount(&mnt, "256m", "a_run_into_a_mount_point_commits") else {
        return;
    };
    let (ds_s, mnt_s) = (ds.to_str().unwrap(), mnt.to_str().unwrap());
    ok(quiver(&[
        "generate", "--events", "6", "--pileup", "10", "--seed", "11", "--output", ds_s,
    ]));
    ok(quiver(&[
        "run",
        "--input",
        ds_s,
        "--output",
        mnt_s,
        "--events",
        "4",
        "--no-progress",
    ]));
    assert_eq!(rundir::verify(&mnt).unwrap().events, 4);
    // Over the earlier run, then a smaller plan over that: one complete run each time, and
    // nothing else in the volume.
    ok(quiver(&[
        "run",
        "--input",
        ds_s,
        "--output",
        mnt_s,
        "--no-progress",
    ]));
    let m = rundir::verify(&mnt).unwrap();
    assert_eq!(m.events, 6);
    let mut expected: BTreeSet<String> = m.files.keys().cloned().collect();
    expected.insert(MANIFEST.to_string());
    assert_eq!(entries(&mnt), expected);
    assert_eq!(
        entries(tmp.path()),
        ["ds", "volume"].into_iter().map(String::from).collect()
    );
    // A directory below the mount point is an ordinary output directory.
    let below = mnt.join("sub");
    ok(quiver(&[
        "run",
        "--input",
        ds_s,
        "--output",
        below.to_str().unwrap(),
        "--events",
        "2",
        "--no-progress",
    ]));
    assert_eq!(rundir::verify(&below).unwrap().events, 2);
}

/// A run that fills the disk: its files used to be kept as `<output>.partial`, so the disk
/// stayed full and the next run failed too. They are removed, and the message says so.
#[test]
fn a_run_that_fills_the_disk_keeps_no_partial_files() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("small-disk");
    let Some(_guard) = tmpfs::mount(
        &vol,
        "12m",
        "a_run_that_fills_the_disk_keeps_no_partial_files",
    ) else {
        return;
    };
    let plan = tmp.path().join("plan.toml");
    std::fs::write(
        &plan,
        "[[step]]\nlabel = \"numbers\"\ntype = \"random_floats\"\ncount = 1000000\n[[step]]\nlabel = \"out\"\ntype = \"write_parquet\"\nproducts = [\"numbers\"]\n",
    )
    .unwrap();
    let out = vol.join("out");
    let run = |events: &str| {
        quiver(&[
            "run",
            plan.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--events",
            events,
            "--no-progress",
        ])
    };
    let o = run("20");
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("the disk is full") && e.contains("were removed rather than kept"),
        "{e}"
    );
    assert!(
        entries(&vol).is_empty(),
        "nothing left on the full disk: {:?}",
        entries(&vol)
    );
    // The next run has the room it needs.
    ok(run("1"));
    assert_eq!(rundir::verify(&out).unwrap().events, 1);
}
