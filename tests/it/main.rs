//! The integration tests of this crate, in one binary: each module was a test target of its own.
//! One binary links the crate and its dependencies once instead of once per file (link time and
//! disk on a fresh machine: docs/decisions/0009-one-build.md).

mod annealing;
mod atomic_outputs;
mod capacity;
mod classifier;
mod cli;
mod generate_atomic;
mod interrupt;
mod params;
mod pixel;
mod plus;
mod registry;
mod support;
mod tmpfs;
