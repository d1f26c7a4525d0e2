//! # quiver-columnar
//!
//! The framework of Quiver: products (Arrow record batches with per-event offsets), a
//! shared buffer pool, typed step types and their registry, plans validated from TOML,
//! an executor that runs event batches concurrently with deterministic results, and
//! output steps. It knows no detector.
//!
//! ```
//! use quiver_columnar::{plan, executor, Registry, JobContext};
//! let registry = Registry::with_builtin();
//! let spec = plan::PlanSpec::from_toml(r#"
//!     [[step]]
//!     label = "numbers"
//!     type = "random_floats"
//!     count = 100
//!     [[step]]
//!     label = "squared"
//!     type = "square"
//! "#, "example").unwrap();
//! let resolved = plan::validate(&spec, &registry).unwrap();
//! let steps = resolved.build(&registry, JobContext::default().into()).unwrap();
//! let opts = executor::RunOptions { threads: 2, batch_size: 4, first_event: 0, events: Some(10), progress: false, cycle_input: false };
//! let summary = executor::run(&resolved, &steps, &opts).unwrap();
//! assert_eq!(summary.events, 10);
//! ```

pub mod cancel;
pub mod collect;
pub mod columns;
pub mod compare;
pub mod conditions;
pub mod error;
pub mod executor;
pub mod memory;
pub mod output;
pub mod overflow;
pub mod params;
pub mod plan;
pub mod pool;
pub mod product;
pub mod residency;
pub mod rundir;
pub mod step;
pub mod toy;
pub mod tune;

pub use conditions::Conditions;
pub use error::{Error, Result};
pub use executor::{run, RunOptions, Summary};
pub use params::{ParamKind, ParamSpec, ParamValue, Params};
pub use plan::{validate, PlanSpec, ResolvedPlan};
pub use pool::{BufferPool, PoolStats, PoolVec};
pub use product::{product_schema, Product, ProductKey};
pub use step::{
    Backend, EventBatch, InputSpec, JobContext, Registry, Signature, Step, StepConfig, StepType,
};
pub use tune::tune_malloc;
