//! One stalled batch must not let the other workers run arbitrarily far ahead: the ordered
//! writers hold every batch after the stalled one until it is done (3.1 GB against 165 MB
//! at `--threads 4` before the bound). The executor starts batch b only within
//! `batches_ahead(threads)` of the lowest unfinished batch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use quiver_columnar::executor::batches_ahead;
use quiver_columnar::{EventBatch, Registry, Result, Step};

mod support;

static FIRST_DONE: AtomicBool = AtomicBool::new(false);
/// The highest batch started while the first batch was still running.
static AHEAD: AtomicU64 = AtomicU64::new(0);

struct Stall;

impl Step for Stall {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        if batch.first_event() == 0 {
            std::thread::sleep(Duration::from_millis(400));
            FIRST_DONE.store(true, Ordering::SeqCst);
        } else if !FIRST_DONE.load(Ordering::SeqCst) {
            AHEAD.fetch_max(batch.first_event(), Ordering::SeqCst);
        }
        Ok(())
    }
}

#[test]
fn a_stalled_batch_holds_back_at_most_the_window() {
    let mut r = Registry::with_builtin();
    r.add(support::floats_sink(
        "stall_first",
        "sleeps in the first batch",
        |_| Ok(Box::new(Stall)),
    ));
    let threads = 4;
    let summary = support::run_after_floats(&r, "stall_first", "stall", threads, 2000).unwrap();
    assert_eq!(summary.events, 2000);
    let ahead = AHEAD.load(Ordering::SeqCst);
    // Without the bound the three other workers run through the ~2000 cheap batches while
    // the first one sleeps.
    assert_eq!(batches_ahead(threads), 16);
    assert!(
        ahead < 16,
        "batch {ahead} started while batch 0 was stalled"
    );
    assert!(ahead > 0, "the other workers did run meanwhile");
}
