//! The one error type of the framework. Every message names what the user can act on:
//! the file, the step label, the parameter key, the product.

use std::path::PathBuf;

/// Errors of plans, steps, products and outputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plan is invalid; `label` is the step (empty for plan-level problems).
    #[error("plan error: {}{msg}", if label.is_empty() { String::new() } else { format!("step '{label}': ") })]
    Plan { label: String, msg: String },
    /// A run option (threads, batch size, event range) is unusable; nothing ran.
    #[error("{0}")]
    Usage(String),
    /// A step failed while processing events `first..last` (exclusive).
    #[error("step '{label}' failed on events {first}..{last}: {msg}")]
    Step {
        label: String,
        first: u64,
        last: u64,
        msg: String,
    },
    /// A step failed at the end of the job.
    #[error("step '{label}' failed at end of job: {msg}")]
    EndJob { label: String, msg: String },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A product, column or value is not what was expected.
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
}
