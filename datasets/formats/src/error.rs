//! Errors of dataset generation, reading and export.

use std::path::PathBuf;

/// What to do about a damaged dataset file; ends every such message.
pub const DAMAGED_HINT: &str =
    "generate the dataset again with `quiver generate` or download it again";

/// Everything that can go wrong with a dataset; every variant names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {what}")]
    Format { file: PathBuf, what: String },
    #[error("{file}: checksum mismatch (manifest says {expected}, file has {actual}): the file changed after the dataset was written; {DAMAGED_HINT}")]
    Checksum {
        file: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("invalid option: {0}")]
    InvalidOption(String),
    #[error("event {index} out of range (dataset has {n_events} events)")]
    EventOutOfRange { index: usize, n_events: usize },
}

impl DatasetError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DatasetError::Io {
            path: path.into(),
            source,
        }
    }
    /// A dataset file whose bytes are wrong (truncated, damaged): says what to do.
    pub fn damaged(file: impl Into<PathBuf>, what: impl std::fmt::Display) -> Self {
        DatasetError::Format {
            file: file.into(),
            what: format!("{what}; the file is damaged or incomplete: {DAMAGED_HINT}"),
        }
    }
    pub fn format(file: impl Into<PathBuf>, what: impl std::fmt::Display) -> Self {
        DatasetError::Format {
            file: file.into(),
            what: what.to_string(),
        }
    }
}
