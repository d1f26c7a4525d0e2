//! What the command-line tests share: running the `quiver` binary and reading its output.

use std::process::{Command, Output};

/// Runs the `quiver` binary this crate builds with `args`.
pub(crate) fn quiver(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(args)
        .output()
        .expect("runs quiver")
}

/// The standard output of a run that must have succeeded (its standard error otherwise).
pub(crate) fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "quiver failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout(&o)
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
