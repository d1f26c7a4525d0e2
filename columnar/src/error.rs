//! The one error type of the framework. Every message names what the user can act on:
//! the file, the step label, the parameter key, the product.
//!
//! Common failures have their own variant, so that callers and tests match the kind and
//! its fields rather than the text; [`Error::Data`] holds the rest. A step's error reaches
//! the caller wrapped in [`Error::Step`] (which step, which events): [`Error::root`] is the
//! failure itself.

use std::path::PathBuf;

/// Errors of plans, steps, products and outputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plan is invalid; `label` is the step (empty for plan-level problems).
    #[error("plan error: {}{msg}", if label.is_empty() { String::new() } else { format!("step '{label}': ") })]
    Plan { label: String, msg: String },
    /// Parameter `key` of step `step` is unknown, missing, of the wrong type or out of
    /// range; `value` is what the plan gave (`None` when it gave none), `msg` the whole
    /// sentence (it names the key and the value).
    #[error("plan error: step '{step}': {msg}")]
    Param {
        step: String,
        key: String,
        value: Option<String>,
        msg: String,
    },
    /// Two step types of one name were registered.
    #[error("step type '{name}' is registered twice: two crates claim its name (Registry::replace overrides a type on purpose)")]
    DuplicateStepType { name: String },
    /// A run option (threads, batch size, event range) is unusable; nothing ran.
    #[error("{0}")]
    Usage(String),
    /// A step failed while processing events `first..last` (exclusive); `cause` is what
    /// went wrong.
    #[error("step '{label}' failed on events {first}..{last}: {cause}")]
    Step {
        label: String,
        first: u64,
        last: u64,
        cause: Box<Error>,
    },
    /// A step failed at the end of the job.
    #[error("step '{label}' failed at end of job: {cause}")]
    EndJob { label: String, cause: Box<Error> },
    /// A product a step asked for is not in the event batch (not made by an earlier step,
    /// or already dropped).
    #[error("product {product} is not in the event batch")]
    MissingProduct { product: String },
    /// A step declared a product and did not publish it.
    #[error("declared product '{product}' was not published")]
    NotPublished { product: String },
    /// A step published a product of a type it did not declare; `declared` lists those it
    /// declared.
    #[error("product of type '{product}' was not declared by the step (declared: {})", declared.join(", "))]
    NotDeclared {
        product: String,
        declared: Vec<String>,
    },
    /// A product has no column of that name; `available` lists its columns (empty when
    /// the message need not list them).
    #[error(
        "product '{product}' has no column '{column}'{}",
        list_columns(available)
    )]
    MissingColumn {
        product: String,
        column: String,
        available: Vec<String>,
    },
    /// A column is not of the type a step reads.
    #[error("product '{product}': column '{column}' is {found}, expected {expected}")]
    ColumnType {
        product: String,
        column: String,
        expected: String,
        found: String,
    },
    /// A column that must be complete holds nulls.
    #[error("product '{product}': column '{column}' has {nulls} nulls")]
    NullValues {
        product: String,
        column: String,
        nulls: usize,
    },
    /// A step needs a condition (calibration, cabling, ...) the job did not load.
    #[error("no condition '{name}' is loaded (available: {}); give a dataset with --input", if available.is_empty() { "none".to_string() } else { available.join(", ") })]
    MissingCondition {
        name: String,
        available: Vec<String>,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The input dataset `path` cannot be used: it does not exist, is not a dataset, ...
    #[error("input dataset: {} {why}", path.display())]
    InputDataset { path: PathBuf, why: String },
    /// A finished run (dataset) could not take the place of output directory `dir`; it is
    /// complete in `kept`.
    #[error("cannot move the new {what} into {}: {source}; it is kept in {}", dir.display(), kept.display())]
    NotMoved {
        what: &'static str,
        dir: PathBuf,
        kept: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A run's manifest cannot be read: the run directory cannot be trusted.
    #[error("{}: {why}; the run manifest is damaged, so the directory cannot be trusted: run the plan again into it", path.display())]
    DamagedManifest { path: PathBuf, why: String },
    /// A run directory no longer holds the run its manifest describes: file `path` is
    /// missing, changed, or foreign.
    #[error("{}: {why}; the directory no longer holds the run its {} describes (files changed or mixed with another run's): run the plan again into it", path.display(), crate::rundir::MANIFEST)]
    RunMismatch { path: PathBuf, why: String },
    /// A step panicked: a bug, reported with the panic's message instead of taking the
    /// process down.
    #[error("internal error (panic): {0}")]
    Panic(String),
    /// A Python step raised: `what` is the class, `method` the method that raised,
    /// `traceback` Python's formatted exception.
    #[error("Python exception in {what}.{method}:\n{traceback}")]
    Python {
        what: String,
        method: &'static str,
        traceback: String,
    },
    /// A product, column or value is not what was expected (failures without a variant
    /// of their own).
    #[error("{0}")]
    Data(String),
    /// Arrow rejected an array or batch.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// The job was asked to stop (Ctrl-C, SIGTERM, `KeyboardInterrupt`) and committed
    /// nothing; the message says what happened to the output directory.
    #[error("interrupted; {0}")]
    Interrupted(String),
    /// Parquet rejected a batch or file.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// `cause` with a note on what happened to the output directory appended.
    #[error("{cause}{note}")]
    Noted { cause: Box<Error>, note: String },
}

fn list_columns(available: &[String]) -> String {
    if available.is_empty() {
        String::new()
    } else {
        format!(" (columns: {})", available.join(", "))
    }
}

/// Result with the framework's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A plan error about step `label`.
    pub fn plan(label: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Plan {
            label: label.into(),
            msg: msg.into(),
        }
    }
    /// A data error with a free message (steps use it for bad input).
    pub fn data(msg: impl Into<String>) -> Self {
        Error::Data(msg.into())
    }
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
    /// A missing column of `product`, listing the columns it has.
    pub fn missing_column(
        product: impl Into<String>,
        column: impl Into<String>,
        available: Vec<String>,
    ) -> Self {
        Error::MissingColumn {
            product: product.into(),
            column: column.into(),
            available,
        }
    }
    /// A column of `product` of another type than `expected`.
    pub fn column_type(
        product: impl Into<String>,
        column: impl Into<String>,
        expected: impl ToString,
        found: impl ToString,
    ) -> Self {
        Error::ColumnType {
            product: product.into(),
            column: column.into(),
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }
    /// The failure itself, without the wrappers that say where it happened ([`Error::Step`],
    /// [`Error::EndJob`], [`Error::Noted`]).
    ///
    /// ```
    /// use quiver_columnar::Error;
    /// let e = Error::Step { label: "hits".into(), first: 0, last: 4,
    ///     cause: Box::new(Error::MissingProduct { product: "digis:Digis".into() }) };
    /// assert!(matches!(e.root(), Error::MissingProduct { product } if product == "digis:Digis"));
    /// assert_eq!(e.to_string(), "step 'hits' failed on events 0..4: product digis:Digis is not in the event batch");
    /// ```
    pub fn root(&self) -> &Error {
        match self {
            Error::Step { cause, .. }
            | Error::EndJob { cause, .. }
            | Error::Noted { cause, .. } => cause.root(),
            e => e,
        }
    }
    /// This error without [`Error::Noted`]'s note: what kind of failure the caller sees.
    pub fn without_note(&self) -> &Error {
        match self {
            Error::Noted { cause, .. } => cause.without_note(),
            e => e,
        }
    }
    /// Whether the plan (or the registry it is validated against) is at fault: nothing ran.
    pub fn is_plan_error(&self) -> bool {
        matches!(
            self.without_note(),
            Error::Plan { .. } | Error::Param { .. } | Error::DuplicateStepType { .. }
        )
    }
}
