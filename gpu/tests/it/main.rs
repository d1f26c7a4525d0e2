//! The integration tests of this crate, in one binary: each module was a test target of its own.
//! One binary links the crate and its dependencies once instead of once per file (link time and
//! disk on a fresh machine: docs/decisions/0009-one-build.md).

mod backends;
mod emu_threads;
mod emulate;
mod emulate_ca;
mod launches;
mod nvrtc;

/// A job on a generated dataset in `dir`, with the conditions the pixel chain reads (beam
/// spot, cabling, gains, CPE) and the raw data, writing to `output`.
fn job_on(
    dir: &std::path::Path,
    output: std::path::PathBuf,
) -> std::sync::Arc<quiver_columnar::JobContext> {
    let ds = quiver_datasets::Dataset::open(dir).unwrap();
    let c = ds.conditions().clone();
    let mut store = quiver_columnar::Conditions::new();
    store.insert(c.beam_spot);
    store.insert(c.cabling);
    store.insert(c.gains);
    store.insert(c.cpe);
    store.insert(quiver_formats::raw::RawData::new(ds));
    std::sync::Arc::new(quiver_columnar::JobContext {
        input: Some(dir.into()),
        output,
        conditions: store,
    })
}

/// A dataset generated (on one thread) into a temporary folder, which holds it.
fn generated(
    events: u32,
    pileup: f64,
    seed: u64,
    corrupt_fraction: f64,
) -> (tempfile::TempDir, quiver_datasets::Dataset) {
    let dir = tempfile::tempdir().unwrap();
    let opts = quiver_datasets::GenerateOptions {
        events,
        pileup,
        seed,
        threads: Some(1),
        output: dir.path().into(),
        corrupt_fraction,
    };
    quiver_datasets::generate(&opts).unwrap();
    let ds = quiver_datasets::Dataset::open(dir.path()).unwrap();
    (dir, ds)
}
