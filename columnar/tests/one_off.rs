//! A step's one-off work inside its calls (`Step::one_off_time`, e.g. a Python step's
//! `__init__` on each worker's first batch) is reported apart from its time per event: a
//! model loaded once per worker must not read as a slow step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quiver_columnar::{EventBatch, Registry, Result, Step};

mod support;

/// Sleeps 200 ms in its first call (one-off) and 1 ms in every call.
struct Warm {
    calls: AtomicU64,
}

const ONE_OFF: Duration = Duration::from_millis(200);

impl Step for Warm {
    fn process(&self, _batch: &mut EventBatch) -> Result<()> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            std::thread::sleep(ONE_OFF);
        }
        std::thread::sleep(Duration::from_millis(1));
        Ok(())
    }
    fn one_off_time(&self) -> Duration {
        ONE_OFF
    }
}

#[test]
fn one_off_work_is_reported_apart_from_the_time_per_event() {
    let mut r = Registry::with_builtin();
    r.add(support::floats_sink("warm", "slow first call", |_| {
        Ok(Box::new(Warm {
            calls: AtomicU64::new(0),
        }))
    }));
    let s = support::run_after_floats(&r, "warm", "warm", 1, 20).unwrap();
    let warm = s.steps.iter().find(|t| t.label == "warm").unwrap();
    assert_eq!(warm.one_off, ONE_OFF);
    // 20 calls of ≥ 1 ms, without the 200 ms of the first.
    assert!(warm.time >= Duration::from_millis(20), "{:?}", warm.time);
    assert!(warm.time < Duration::from_millis(150), "{:?}", warm.time);
    let table = s.render();
    assert!(
        table.contains(
            "warm                 one-off work in its first calls, not in ms/event: 200.0 ms"
        ),
        "{table}"
    );
    // A step without one-off work gets no such line.
    let numbers = s.steps.iter().find(|t| t.label == "numbers").unwrap();
    assert!(numbers.one_off.is_zero());
    assert!(!table.contains("numbers              one-off"), "{table}");
}
