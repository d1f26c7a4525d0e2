//! What the executor tests share: a step type that consumes a floats product, and a job of
//! `random_floats` followed by one such step.

use std::sync::Arc;

use quiver_columnar::executor::RunOptions;
use quiver_columnar::{
    InputSpec, JobContext, PlanSpec, Registry, Result, Signature, Step, StepConfig, StepType,
    Summary,
};

/// A CPU step type named `name` reading one `floats` product (`input`), publishing nothing.
pub fn floats_sink(
    name: &'static str,
    doc: &'static str,
    build: fn(&StepConfig) -> Result<Box<dyn Step>>,
) -> StepType {
    StepType {
        name,
        doc,
        params: vec![],
        signature: Signature {
            inputs: vec![InputSpec::one("input", "floats", "anything")],
            outputs: vec![],
        },
        backends: vec![quiver_columnar::Backend::Cpu],
        build,
    }
}

/// Runs `random_floats` (label `numbers`) then a step of `step_type` labelled `label` over
/// `events` events in batches of one.
pub fn run_after_floats(
    r: &Registry,
    step_type: &str,
    label: &str,
    threads: usize,
    events: u64,
) -> Result<Summary> {
    let text = format!(
        "[[step]]\nlabel = \"numbers\"\ntype = \"random_floats\"\ncount = 3\n\
         [[step]]\nlabel = \"{label}\"\ntype = \"{step_type}\"\ninput = \"numbers\"\n"
    );
    let plan = quiver_columnar::validate(&PlanSpec::from_toml(&text, "test").unwrap(), r).unwrap();
    let job = Arc::new(JobContext {
        input: None,
        output: std::env::temp_dir(),
        conditions: Default::default(),
    });
    let steps = plan.build(r, job).unwrap();
    let opts = RunOptions {
        threads,
        batch_size: 1,
        first_event: 0,
        events: Some(events),
        progress: false,
        cycle_input: false,
    };
    quiver_columnar::run(&plan, &steps, &opts)
}
