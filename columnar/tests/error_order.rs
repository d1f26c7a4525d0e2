//! The error of a failed job is the earliest failed batch's, whatever the thread count: a
//! later batch that fails first must not win, or the message would depend on timing.

use std::time::Duration;

use quiver_columnar::{Error, EventBatch, Registry, Result, Step};

mod support;

/// Batch 0 fails after a while, as does any batch of `PANICS`; batch 5 fails at once.
struct FailTwice;

impl Step for FailTwice {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        match batch.first_event() {
            0 => {
                std::thread::sleep(Duration::from_millis(300));
                Err(Error::data("batch 0's own error"))
            }
            5 => Err(Error::data("batch 5's error")),
            _ => Ok(()),
        }
    }
}

/// Batch 0 panics after a while; batch 5 returns an error at once.
struct PanicLate;

impl Step for PanicLate {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        match batch.first_event() {
            0 => {
                std::thread::sleep(Duration::from_millis(300));
                panic!("batch 0 panicked")
            }
            5 => Err(Error::data("batch 5's error")),
            _ => Ok(()),
        }
    }
}

/// Batch 0 fails after a while; batch 5 is interrupted (a `KeyboardInterrupt` in a Python
/// step) at once.
struct InterruptedLater;

impl Step for InterruptedLater {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        match batch.first_event() {
            0 => {
                std::thread::sleep(Duration::from_millis(300));
                Err(Error::data("batch 0's own error"))
            }
            5 => Err(Error::Interrupted("KeyboardInterrupt".into())),
            _ => Ok(()),
        }
    }
}

fn registry() -> Registry {
    let mut r = Registry::with_builtin();
    let doc = "fails in batches 0 and 5";
    r.add(support::floats_sink("fail_twice", doc, |_| {
        Ok(Box::new(FailTwice))
    }));
    r.add(support::floats_sink("panic_late", doc, |_| {
        Ok(Box::new(PanicLate))
    }));
    r.add(support::floats_sink("interrupted_later", doc, |_| {
        Ok(Box::new(InterruptedLater))
    }));
    r
}

fn run(step_type: &str, threads: usize) -> Error {
    support::run_after_floats(&registry(), step_type, "bad", threads, 64).unwrap_err()
}

#[test]
fn the_earliest_batch_error_wins_at_any_thread_count() {
    for threads in [1, 2, 4, 8] {
        let e = run("fail_twice", threads);
        assert_eq!(
            e.to_string(),
            "step 'bad' failed on events 0..1: batch 0's own error",
            "threads = {threads}"
        );
        assert!(
            matches!(&e, Error::Step { label, first: 0, last: 1, .. } if label == "bad"),
            "{e:?}"
        );
    }
}

#[test]
fn a_panic_in_an_earlier_batch_wins_over_a_later_error() {
    for threads in [1, 2, 4, 8] {
        let e = run("panic_late", threads);
        assert!(
            matches!(e.root(), Error::Panic(m) if m == "batch 0 panicked"),
            "threads = {threads}: {e}"
        );
        assert_eq!(
            e.to_string(),
            "step 'bad' failed on events 0..1: internal error (panic): batch 0 panicked"
        );
    }
}

#[test]
fn an_interruption_in_any_batch_stops_the_job_as_interrupted() {
    // One worker stops at batch 0's error before batch 5 starts; with more, batch 5's
    // interruption comes first and must not lose to batch 0's later error: the user asked
    // to stop, and an interrupted job commits nothing.
    for threads in [2, 4, 8] {
        let e = run("interrupted_later", threads);
        assert!(
            matches!(e, Error::Interrupted(_)),
            "threads = {threads}: {e}"
        );
    }
}
