//! Quiver's pixel data formats, apart from the producers and the simulation (as
//! pixeltrack-standalone's and CMSSW's `DataFormats`/`CondFormats` are):
//!
//! - [`products`]: the product type names of the pixel chain and their columns; [`batch`]:
//!   batches built by column name against them;
//! - [`quality`]: the track quality codes;
//! - [`calibration`]: the ADC → electrons formula and its Run-2 constants;
//! - [`conditions`]: the conditions the reconstruction reads (beam spot, cabling, gains,
//!   CPE parameters with module frames), and their Arrow tables; [`condition_files`]: them
//!   as files of a dataset, read and written; [`ipc`], [`error`]: the Arrow IPC file reading
//!   and the errors they share with the dataset files;
//! - [`topology`]: the Phase-1 pixel numbering (modules, layers, ROCs);
//! - [`raw`]: raw data as the reconstruction reads it (a source of FED bytes per event).
//!
//! It depends on Arrow (and thiserror) only: the reconstruction (`quiver-reco`, `quiver-gpu`), the validation,
//! the generator (`quiver-datasets`) and the Python bindings all take their formats from here,
//! so none of them sits under another for a type.

pub mod batch;
pub mod calibration;
pub mod condition_files;
pub mod conditions;
mod conditions_arrow;
pub mod error;
pub mod ipc;
pub mod products;
pub mod quality;
pub mod raw;
pub mod topology;
