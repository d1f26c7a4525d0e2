//! Quiver: an Arrow-native, columnar event-reconstruction library.
//!
//! This facade re-exports the crates of the workspace and assembles the full step
//! catalogue that the `quiver` command line uses.

pub mod cli;

pub use quiver_columnar as columnar;
pub use quiver_datasets as datasets;
pub use quiver_gpu as gpu;
pub use quiver_reco as reco;
pub use quiver_validation as validation;

/// Every step type Quiver ships: the framework's own and the reconstruction's.
pub fn registry() -> columnar::Registry {
    let mut r = columnar::Registry::with_builtin();
    reco::steps::register(&mut r);
    // Replaces the CPU types it implements with ones offering both backends; a type
    // registered twice (any other order) is refused rather than silently replaced.
    gpu::register(&mut r);
    validation::register(&mut r);
    add_python_placeholder(&mut r);
    r
}

/// Python steps run inside an interpreter: the Python package registers the real `python`
/// step type. Without it, a plan that uses one gets this explanation instead of "unknown
/// step type".
fn add_python_placeholder(r: &mut columnar::Registry) {
    use columnar::{Backend, Error, Signature, StepType};
    r.add_dynamic(
        StepType {
            name: "python",
            doc: "A step written in Python (needs the Python package's `quiver` command)",
            params: vec![],
            signature: Signature::default(),
            backends: vec![Backend::Python],
            build: |cfg| Err(Error::plan(&cfg.label, "Python steps need the Python package")),
        },
        |spec| {
            Err(Error::plan(
                &spec.label,
                "Python steps need the Python package: `pip install ./py` (or `maturin develop -m py/Cargo.toml`), \
                 then run the `quiver` command it installs",
            ))
        },
    );
}

/// The plan `quiver run` uses when none is given.
pub mod default_plan {
    /// Where the text comes from (for messages).
    pub const NAME: &str = "plans/pixel.toml (built in)";
    /// The plan.
    pub const TEXT: &str = include_str!("../plans/pixel.toml");
}

/// Opens a dataset directory and makes its conditions (and the dataset itself, for the
/// `read_raw` source) available to the steps of a job.
pub fn load_dataset(dir: &std::path::Path) -> columnar::Result<columnar::Conditions> {
    if !dir.join("manifest.toml").is_file() {
        let what = match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() && dir.join(columnar::rundir::MANIFEST).is_file() => {
                return Err(columnar::Error::InputDataset {
                    path: dir.to_path_buf(),
                    why: "is the output directory of a Quiver run, not a dataset; give the dataset the run read (its \
                          quiver-run.toml names the plan), or make one with `quiver generate --output NEW_DIR`"
                        .into(),
                });
            }
            Ok(m) if m.is_dir() => {
                "holds no manifest.toml, so it is not a Quiver dataset".to_string()
            }
            Ok(_) => "is a file, not a dataset directory".to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "does not exist".to_string(),
            // ELOOP (a symbolic link loop), EACCES, ...: say what it is, not "does not exist".
            Err(e) => format!("cannot be read: {e}"),
        };
        return Err(columnar::Error::InputDataset {
            path: dir.to_path_buf(),
            why: format!(
                "{what}; make one with `quiver generate --output {}` (docs/datasets.md)",
                dir.display()
            ),
        });
    }
    let ds = datasets::Dataset::open(dir)
        .map_err(|e| columnar::Error::data(format!("input dataset: {e}")))?;
    let c = ds.conditions().clone();
    let mut store = columnar::Conditions::new();
    fn named(
        t: Vec<(&'static str, arrow_array::RecordBatch)>,
    ) -> Vec<(String, arrow_array::RecordBatch)> {
        t.into_iter().map(|(n, b)| (n.to_string(), b)).collect()
    }
    store.insert_exported(c.beam_spot, |b| vec![("BeamSpot".into(), b.to_arrow())]);
    store.insert_exported(c.cabling, |m| vec![("CablingMap".into(), m.to_arrow())]);
    store.insert_exported(c.gains, |g| named(g.to_arrow()));
    store.insert_exported(c.cpe, |p| named(p.to_arrow()));
    store.insert(quiver_formats::raw::RawData::new(ds));
    Ok(store)
}

/// The job context of a run, as `quiver run` and the Python driver make it: the input
/// dataset and its conditions. A plan that reads raw data and is given no input reads the
/// default dataset, generated on first use (100 events, ⟨PU⟩ 50, seed 1). Output defaults to
/// `./quiver-out`.
pub fn job_context(
    plan: &columnar::plan::ResolvedPlan,
    input: Option<std::path::PathBuf>,
    output: Option<std::path::PathBuf>,
) -> columnar::Result<columnar::JobContext> {
    job_context_with_progress(plan, input, output, &|_, _| {})
}

/// [`job_context`], calling `progress(events_written, events)` while it generates the
/// default dataset (not at all when the dataset is there already).
pub fn job_context_with_progress(
    plan: &columnar::plan::ResolvedPlan,
    input: Option<std::path::PathBuf>,
    output: Option<std::path::PathBuf>,
    progress: &dyn Fn(u64, u64),
) -> columnar::Result<columnar::JobContext> {
    let output = output.unwrap_or_else(|| std::path::PathBuf::from("quiver-out"));
    let mut input = input;
    let reads_raw = plan.steps.iter().any(|s| s.type_name == "read_raw");
    if input.is_none() && reads_raw {
        let dir = default_dataset_dir();
        let opts = datasets::GenerateOptions {
            output: dir.clone(),
            ..Default::default()
        };
        // Also when the generator changed since it was made: the default dataset is what
        // this version generates.
        if !datasets::generate::is_generated(&opts) {
            let why = if dir.join("manifest.toml").exists() {
                "made by another generator version: regenerating"
            } else {
                "generating"
            };
            eprintln!(
                "default dataset in {} (100 events, <PU> 50, seed 1): {why} ...",
                dir.display()
            );
            let events = u64::from(opts.events);
            generate_dataset_with_progress(&opts, &|done| progress(done, events)).map_err(|e| {
                columnar::Error::data(format!("generating the default dataset: {e}"))
            })?;
        }
        input = Some(dir);
    }
    let conditions = match &input {
        Some(dir) => load_dataset(dir)?,
        None => Default::default(),
    };
    Ok(columnar::JobContext {
        input,
        output,
        conditions,
    })
}

/// `quiver generate` with the run directory's protocol: the dataset is written into a
/// staging directory (its manifest last) and replaces `opts.output` as a whole, so a full
/// disk or a kill leaves the earlier dataset intact; a directory that is neither empty nor
/// a dataset (a run's outputs, your files) is refused before anything is written.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// let opts = quiver::datasets::GenerateOptions { events: 1, pileup: 0.0, output: tmp.path().join("ds"), ..Default::default() };
/// quiver::generate_dataset(&opts).unwrap();
/// quiver::datasets::Dataset::open(&opts.output).unwrap();
/// std::fs::write(tmp.path().join("notes.txt"), b"mine").unwrap();
/// let e = quiver::generate_dataset(&quiver::datasets::GenerateOptions { output: tmp.path().into(), ..opts }).unwrap_err();
/// assert!(e.to_string().contains("notes.txt"), "{e}");
/// ```
pub fn generate_dataset(
    opts: &datasets::GenerateOptions,
) -> columnar::Result<datasets::generate::GenerateSummary> {
    generate_dataset_with_progress(opts, &|_| {})
}

/// [`generate_dataset`], calling `progress(events_written)` as events are written.
pub fn generate_dataset_with_progress(
    opts: &datasets::GenerateOptions,
    progress: &dyn Fn(u64),
) -> columnar::Result<datasets::generate::GenerateSummary> {
    let staged = columnar::rundir::StagedRun::begin_dataset(&opts.output)?;
    let staged_opts = datasets::GenerateOptions {
        output: staged.staging_dir().to_path_buf(),
        ..opts.clone()
    };
    // On an error `staged` is dropped, which removes the staging directory.
    let params = datasets::generator::GeneratorParams {
        pileup: opts.pileup,
        ..Default::default()
    };
    let summary = datasets::generate::generate_with_progress(&staged_opts, params, progress)
        .map_err(|e| {
            columnar::Error::data(e.to_string().replace(
                &staged_opts.output.display().to_string(),
                &opts.output.display().to_string(),
            ))
        })?;
    staged.commit_dataset()?;
    Ok(summary)
}

/// Where `quiver run` keeps the default dataset: `$QUIVER_DATA/default`, or
/// `~/.cache/quiver/datasets/default`.
pub fn default_dataset_dir() -> std::path::PathBuf {
    let base = std::env::var_os("QUIVER_DATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| ".".into());
            home.join(".cache/quiver/datasets")
        });
    base.join("default")
}
