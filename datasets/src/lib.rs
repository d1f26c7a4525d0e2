//! Quiver's CMS Phase-1-like pixel detector: topology, conditions, the synthetic event
//! generator with truth, and the dataset formats.
//!
//! Entry points: [`generate`] writes a dataset directory, [`Dataset::open`] reads one,
//! [`export_pixeltrack`] writes the reference program's binary inputs.

pub mod builders;
/// Errors of dataset files (shared with the condition files of `quiver_formats`).
pub use quiver_formats::error;
pub mod export;
pub mod format;
pub mod generate;
pub mod generator;
pub mod geometry;
pub use quiver_formats::ipc;
pub mod raw;

/// The conditions and the topology are data formats (`quiver_formats`); the generator
/// builds and writes them.
pub use quiver_formats::{conditions, topology};

pub use error::DatasetError;
pub use export::{export_pixeltrack, write_counts_bin, EventCounts};
pub use format::{Dataset, RawEvent};
pub use generate::{generate, generate_with, GenerateOptions, GenerateSummary};
