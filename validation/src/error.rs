//! Errors of the validation kernels; every message says what is wrong and where.

use std::path::PathBuf;

/// Errors of histograms, count validation and their files.
#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    /// A histogram definition is unusable.
    #[error("histogram '{name}': {msg}")]
    BadHistogram { name: String, msg: String },
    /// A value the reference's binning cannot place (the C++ code throws on NaN).
    #[error("histogram '{name}': value #{index} is NaN (the reference's histogram throws on NaN)")]
    NotANumber { name: String, index: usize },
    /// A column of a type that cannot be histogrammed or counted.
    #[error("column '{column}' has type {data_type}, {expected}")]
    ColumnType {
        column: String,
        data_type: String,
        expected: String,
    },
    /// A column holds nulls where products never have them.
    #[error("column '{column}' has {nulls} null values; products have none")]
    Nulls { column: String, nulls: usize },
    /// A product lacks a column the validator needs.
    #[error("product '{product}' has no column '{column}' (see docs/products.md)")]
    MissingColumn { product: String, column: String },
    /// Two histograms with different binning cannot be added.
    #[error("cannot add histogram '{b}' to '{a}': different binning")]
    Mismatch { a: String, b: String },
    /// A product's content breaks an invariant of its type.
    #[error("{0}")]
    Data(String),
    /// A reference counts file is malformed.
    #[error("{}: {msg}", path.display())]
    BadFile { path: PathBuf, msg: String },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
}

impl ValidationError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ValidationError::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<ValidationError> for quiver_columnar::Error {
    fn from(e: ValidationError) -> Self {
        match e {
            ValidationError::Io { path, source } => quiver_columnar::Error::Io { path, source },
            other => quiver_columnar::Error::data(other.to_string()),
        }
    }
}

/// Result with [`ValidationError`].
pub type Result<T, E = ValidationError> = std::result::Result<T, E>;
