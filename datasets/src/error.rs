//! Errors of dataset generation, reading and export.

use std::path::PathBuf;

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
    #[error("{file}: checksum mismatch (manifest says {expected}, file has {actual})")]
    Checksum { file: PathBuf, expected: String, actual: String },
    #[error("invalid option: {0}")]
    InvalidOption(String),
    #[error("event {index} out of range (dataset has {n_events} events)")]
    EventOutOfRange { index: usize, n_events: usize },
}

impl DatasetError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DatasetError::Io { path: path.into(), source }
    }
    pub(crate) fn format(file: impl Into<PathBuf>, what: impl std::fmt::Display) -> Self {
        DatasetError::Format { file: file.into(), what: what.to_string() }
    }
}
