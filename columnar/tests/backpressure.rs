//! One stalled batch must not let the other workers run arbitrarily far ahead: the ordered
//! writers hold every batch after the stalled one until it is done (3.1 GB against 165 MB
//! at `--threads 4` before the bound). The executor starts batch b only within
//! `batches_ahead(threads)` of the lowest unfinished batch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quiver_columnar::executor::{batches_ahead, RunOptions};
use quiver_columnar::{
    EventBatch, InputSpec, JobContext, PlanSpec, Registry, Result, Signature, Step, StepType,
};

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
    r.add(StepType {
        name: "stall_first",
        doc: "sleeps in the first batch",
        params: vec![],
        signature: Signature {
            inputs: vec![InputSpec::one("input", "floats", "anything")],
            outputs: vec![],
        },
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |_| Ok(Box::new(Stall)),
    });
    let text = "[[step]]\nlabel = \"numbers\"\ntype = \"random_floats\"\ncount = 10\n\
                [[step]]\nlabel = \"stall\"\ntype = \"stall_first\"\ninput = \"numbers\"\n";
    let plan = quiver_columnar::validate(&PlanSpec::from_toml(text, "test").unwrap(), &r).unwrap();
    let job = Arc::new(JobContext {
        input: None,
        output: std::env::temp_dir(),
        conditions: Default::default(),
    });
    let steps = plan.build(&r, job).unwrap();
    let threads = 4;
    let opts = RunOptions {
        threads,
        batch_size: 1,
        first_event: 0,
        events: Some(2000),
        progress: false,
        cycle_input: false,
    };
    let summary = quiver_columnar::run(&plan, &steps, &opts).unwrap();
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
