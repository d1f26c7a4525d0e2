//! Ctrl-C and SIGTERM during `quiver run`: the job stops within a batch, commits nothing,
//! removes its staging directory and says so in one line; the previous run is untouched.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PLAN: &str = r#"
[[step]]
label = "numbers"
type = "random_floats"
count = 200000
seed = 1

[[step]]
label = "squared"
type = "square"
input = "numbers"

[[step]]
label = "output"
type = "write_parquet"
products = ["numbers", "squared"]
"#;

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn staging_dirs(parent: &Path) -> Vec<String> {
    std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("quiver-staging"))
        .collect()
}

fn interrupted_run_commits_nothing(signal: &str, code: i32) {
    interrupted_run(&[signal], code, false);
}

/// Sends `signals` in turn (a second after each other) to a long run that replaces a
/// previous one in the same directory; checks the one it stops on.
fn interrupted_run(signals: &[&str], code: i32, ignore_sigint: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, PLAN).unwrap();
    let out = tmp.path().join("out");
    let run = |events: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_quiver"));
        c.args([
            "run",
            plan.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--no-progress",
            "--threads",
            "2",
            "--events",
            events,
        ]);
        // As from a terminal, whatever started these tests: quiver leaves ignored signals
        // ignored (a script's background jobs ignore SIGINT).
        // SAFETY: signal() is async-signal-safe, as pre_exec requires.
        unsafe {
            c.pre_exec(move || {
                libc::signal(
                    libc::SIGINT,
                    if ignore_sigint {
                        libc::SIG_IGN
                    } else {
                        libc::SIG_DFL
                    },
                );
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                Ok(())
            });
        }
        c
    };
    assert!(run("3").output().unwrap().status.success());
    let before = files(&out);

    // Far more events than the test waits for: only the signal ends it.
    let mut child = run("1000000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while staging_dirs(tmp.path()).is_empty() || t0.elapsed() < Duration::from_millis(500) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the run never started writing"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut t1 = Instant::now();
    for (i, signal) in signals.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_secs(1));
            assert!(
                child.try_wait().unwrap().is_none(),
                "quiver run stopped on SIG{}, which it ignores",
                signals[i - 1]
            );
        }
        t1 = Instant::now();
        assert!(Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap()
            .success());
    }
    let signal = signals.last().unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t1.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("quiver run did not stop within 20 s of SIG{signal}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stopped = t1.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stopped < Duration::from_secs(3),
        "SIG{signal}: stopped after {stopped:?}"
    );
    assert_eq!(status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(
        stderr,
        format!(
            "quiver: interrupted; nothing was written, the previous run in {} is intact\n",
            out.canonicalize().unwrap().display()
        )
    );
    assert!(files(&out) == before, "the previous run changed");
    assert_eq!(staging_dirs(tmp.path()), Vec::<String>::new());
}

#[test]
fn ctrl_c_stops_the_run_and_keeps_the_previous_one() {
    interrupted_run_commits_nothing("INT", 130);
}

#[test]
fn sigterm_stops_the_run_and_removes_its_staging_directory() {
    interrupted_run_commits_nothing("TERM", 143);
}

#[test]
fn an_ignored_sigint_stays_ignored() {
    interrupted_run(&["INT", "TERM"], 143, true);
}

/// `quiver bench` on Ctrl-C: stops the run in progress, prints one line and no table,
/// removes its scratch output and exits 130, as `quiver run` does.
#[test]
fn ctrl_c_stops_the_bench_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, PLAN).unwrap();
    let scratch = tmp.path().join("tmp");
    std::fs::create_dir(&scratch).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_quiver"));
    c.args([
        "bench",
        plan.to_str().unwrap(),
        "--threads",
        "1,2",
        "--repeat",
        "1",
        "--events",
        "1000000",
    ])
    .env("TMPDIR", &scratch)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // SAFETY: signal() is async-signal-safe, as pre_exec requires.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    let t0 = Instant::now();
    while std::fs::read_dir(&scratch).unwrap().next().is_none()
        || t0.elapsed() < Duration::from_millis(500)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the bench never started writing"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let t1 = Instant::now();
    assert!(Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t1.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("quiver bench did not stop within 20 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(130), "stderr: {stderr}");
    assert!(t1.elapsed() < Duration::from_secs(3), "{:?}", t1.elapsed());
    assert_eq!(
        stderr,
        "quiver: interrupted; the bench stopped during its run at 1 threads; \
         no results (its scratch output was removed)\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "a table after Ctrl-C"
    );
    let left: Vec<_> = std::fs::read_dir(&scratch).unwrap().collect();
    assert!(left.is_empty(), "scratch output left: {left:?}");
}
