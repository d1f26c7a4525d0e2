use super::staging::*;
use super::*;
use std::cell::Cell;

thread_local! {
    /// Makes this thread's exchanges fail with EBUSY, as into a mount point.
    pub(super) static FAIL_EXCHANGE: Cell<bool> = const { Cell::new(false) };
    /// Makes this thread's runs take the in-place commit of a mount point.
    pub(super) static FORCE_INSIDE: Cell<bool> = const { Cell::new(false) };
}

#[test]
fn a_failed_exchange_keeps_the_finished_run_where_the_message_says() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_run(&out, &[("a.parquet", b"old")], 1);
    let run = StagedRun::begin(&out).unwrap();
    std::fs::write(run.staging_dir().join("a.parquet"), b"new").unwrap();
    let staging = run.staging_dir().to_path_buf();
    FAIL_EXCHANGE.with(|f| f.set(true));
    let e = run.commit(&info(2)).unwrap_err();
    FAIL_EXCHANGE.with(|f| f.set(false));
    assert!(
        matches!(&e, Error::NotMoved { what: "run", kept, .. } if kept == &staging),
        "{e:?}"
    );
    let e = e.to_string();
    assert!(e.contains(&format!("kept in {}", staging.display())), "{e}");
    // The only copy of the finished run is where the message says, manifest and all.
    assert_eq!(std::fs::read(staging.join("a.parquet")).unwrap(), b"new");
    assert_eq!(verify(&staging).unwrap().events, 2);
    assert_eq!(verify(&out).unwrap().events, 1);
}

#[test]
fn a_mount_point_is_committed_file_by_file_with_the_manifest_last() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    FORCE_INSIDE.with(|f| f.set(true));
    // Into an empty directory, then over that run with other files.
    std::fs::create_dir(&out).unwrap();
    let first = write_run(&out, &[("a.parquet", b"one"), ("b.parquet", b"two")], 1);
    assert!(first.replaced.is_none());
    let second = write_run(&out, &[("b.parquet", b"three"), ("c.parquet", b"four")], 2);
    FORCE_INSIDE.with(|f| f.set(false));
    assert_eq!(second.replaced.unwrap().events, 1);
    let m = verify(&out).unwrap();
    assert_eq!(m.events, 2);
    assert_eq!(std::fs::read(out.join("b.parquet")).unwrap(), b"three");
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, ["b.parquet", "c.parquet", MANIFEST]);
}

#[test]
fn an_in_place_commit_killed_midway_is_refused_by_readers_and_replaced_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    FORCE_INSIDE.with(|f| f.set(true));
    write_run(&out, &[("a.parquet", b"old"), ("b.parquet", b"old")], 1);
    // What a kill in the middle of the next commit leaves: the old manifest renamed,
    // one old file gone, one new file moved in, the rest (and the new manifest) staged
    // by a process that no longer runs.
    let dead = format!("{INSIDE_STAGING}{}-{}", host(), u32::MAX - 1);
    std::fs::create_dir(out.join(&dead)).unwrap();
    std::fs::rename(out.join(MANIFEST), out.join(REPLACING)).unwrap();
    std::fs::remove_file(out.join("a.parquet")).unwrap();
    std::fs::write(out.join("c.parquet"), b"new").unwrap();
    std::fs::write(out.join(&dead).join("d.parquet"), b"new").unwrap();
    let staged = RunManifest {
        files: [("c.parquet", 3u64), ("d.parquet", 3)]
            .into_iter()
            .map(|(n, b)| {
                (
                    n.to_string(),
                    FileRecord {
                        bytes: b,
                        sha256: "0".repeat(64),
                    },
                )
            })
            .collect(),
        ..verify_manifest_text(&out.join(REPLACING))
    };
    std::fs::write(
        out.join(&dead).join(MANIFEST),
        toml::to_string(&staged).unwrap(),
    )
    .unwrap();
    let e = verify(&out).unwrap_err().to_string();
    assert!(e.contains("missing"), "{e}");
    // A file of nobody's among them: refused, left as it is.
    std::fs::write(out.join("notes.txt"), b"mine").unwrap();
    assert!(StagedRun::begin(&out)
        .unwrap_err()
        .to_string()
        .contains("notes.txt"));
    std::fs::remove_file(out.join("notes.txt")).unwrap();
    // The next run replaces it, and removes the dead process's staging directory.
    write_run(&out, &[("e.parquet", b"next")], 3);
    FORCE_INSIDE.with(|f| f.set(false));
    assert_eq!(verify(&out).unwrap().events, 3);
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["e.parquet", MANIFEST]);
}

fn verify_manifest_text(p: &Path) -> RunManifest {
    read_manifest_file(p).unwrap()
}

fn info(events: u64) -> RunInfo {
    RunInfo {
        plan: "test".into(),
        plan_sha256: "a".repeat(64),
        first_event: 0,
        events,
        input: None,
    }
}

fn write_run(out: &Path, files: &[(&str, &[u8])], events: u64) -> Committed {
    let run = StagedRun::begin(out).unwrap();
    for (n, c) in files {
        std::fs::write(run.staging_dir().join(n), c).unwrap();
    }
    run.commit(&info(events)).unwrap()
}

#[test]
fn a_new_run_replaces_an_earlier_one_as_a_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_run(
        &out,
        &[("a.x.parquet", b"old a"), ("b.x.parquet", b"old b")],
        8,
    );
    let c = write_run(&out, &[("a.x.parquet", b"new a")], 10);
    assert_eq!(c.replaced.map(|m| m.events), Some(8));
    let m = verify(&out).unwrap();
    assert_eq!(m.events, 10);
    assert!(
        !out.join("b.x.parquet").exists(),
        "a file of the earlier run survived"
    );
    assert_eq!(std::fs::read(out.join("a.x.parquet")).unwrap(), b"new a");
    // Nothing is left beside the directory.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("out")]);
}

#[test]
fn foreign_files_are_never_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("thesis.tex"), b"x").unwrap();
    let e = StagedRun::begin(&out).unwrap_err().to_string();
    assert!(
        e.contains("thesis.tex") && e.contains("no Quiver run manifest"),
        "{e}"
    );
    // A run with an extra file in it is refused too.
    std::fs::remove_file(out.join("thesis.tex")).unwrap();
    write_run(&out, &[("a.x.parquet", b"a")], 1);
    std::fs::write(out.join("notes.txt"), b"x").unwrap();
    let e = StagedRun::begin(&out).unwrap_err().to_string();
    assert!(
        e.contains("notes.txt") && e.contains("not part of the run"),
        "{e}"
    );
    // A regular file as the output.
    let f = tmp.path().join("file");
    std::fs::write(&f, b"x").unwrap();
    assert!(StagedRun::begin(&f)
        .unwrap_err()
        .to_string()
        .contains("existing file"));
}

#[test]
fn readers_refuse_mixed_missing_or_changed_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_run(
        &out,
        &[("a.x.parquet", b"aaaa"), ("b.x.parquet", b"bbbb")],
        3,
    );
    verify(&out).unwrap();
    std::fs::write(out.join("a.x.parquet"), b"AAAA").unwrap();
    assert!(verify(&out).unwrap_err().to_string().contains("SHA-256"));
    assert!(verify_with(&out, Check::Sizes).is_ok());
    std::fs::write(out.join("a.x.parquet"), b"aaaaa").unwrap();
    assert!(verify_with(&out, Check::Sizes)
        .unwrap_err()
        .to_string()
        .contains("5 bytes"));
    std::fs::write(out.join("a.x.parquet"), b"aaaa").unwrap();
    std::fs::write(out.join("c.x.parquet"), b"c").unwrap();
    assert!(verify(&out)
        .unwrap_err()
        .to_string()
        .contains("c.x.parquet"));
    std::fs::remove_file(out.join("c.x.parquet")).unwrap();
    std::fs::remove_file(out.join("b.x.parquet")).unwrap();
    assert!(verify(&out).unwrap_err().to_string().contains("missing"));
    std::fs::remove_file(out.join(MANIFEST)).unwrap();
    assert!(verify(&out)
        .unwrap_err()
        .to_string()
        .contains("holds no complete Quiver run"));
    // A hostile manifest cannot point outside the directory.
    let text = toml::to_string(&RunManifest {
        format: FORMAT.into(),
        quiver: "x".into(),
        plan: "p".into(),
        plan_sha256: "0".repeat(64),
        first_event: 0,
        events: 1,
        files: [(
            "../escape".to_string(),
            FileRecord {
                bytes: 1,
                sha256: "0".repeat(64),
            },
        )]
        .into(),
        input: None,
    })
    .unwrap();
    std::fs::write(out.join(MANIFEST), text).unwrap();
    assert!(verify(&out)
        .unwrap_err()
        .to_string()
        .contains("not a plain file name"));
    std::fs::write(out.join(MANIFEST), b"\xff\x00garbage").unwrap();
    assert!(verify(&out).unwrap_err().to_string().contains("damaged"));
}

#[test]
fn a_failed_run_keeps_its_files_beside_and_leaves_the_directory_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_run(&out, &[("a.x.parquet", b"old")], 8);
    let run = StagedRun::begin(&out).unwrap();
    std::fs::write(
        run.staging_dir().join("a.x.parquet.partial"),
        b"some events",
    )
    .unwrap();
    let kept = run.keep_partial().unwrap().unwrap();
    assert_eq!(kept, tmp.path().join("out.partial"));
    assert!(kept.join("a.x.parquet.partial").is_file());
    assert_eq!(verify(&out).unwrap().events, 8);
    assert!(
        verify(&kept).is_err(),
        "a partial directory passed for a run"
    );
    // A second failure replaces the first's partial directory, not a user's.
    let run = StagedRun::begin(&out).unwrap();
    std::fs::write(run.staging_dir().join("b"), b"x").unwrap();
    assert_eq!(run.keep_partial().unwrap().unwrap(), kept);
    assert!(!kept.join("a.x.parquet.partial").exists());
    // A job that failed before writing anything leaves nothing.
    let run = StagedRun::begin(&out).unwrap();
    let staging = run.staging_dir().to_path_buf();
    assert_eq!(run.keep_partial().unwrap(), None);
    assert!(!staging.exists());
}

#[test]
fn leftovers_of_dead_runs_are_removed_live_ones_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let names = Names::new("out");
    let h = host();
    // A pid above the kernel's maximum (2^22) is never alive.
    let dead = tmp.path().join(names.staging(&h, 4_194_305));
    let other_host = tmp.path().join(names.staging("elsewhere", 4_194_305));
    let live = tmp.path().join(names.staging(&h, 1)); // init
    for d in [&dead, &other_host, &live] {
        std::fs::create_dir(d).unwrap();
        std::fs::write(d.join("x.y.parquet"), b"16 MB once").unwrap();
    }
    write_run(&out, &[("a.x.parquet", b"a")], 1);
    assert!(!dead.exists(), "a dead run's staging directory was kept");
    assert!(
        other_host.exists() && live.exists(),
        "a staging directory that may be live was removed"
    );
}
