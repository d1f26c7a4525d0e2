//! `quiver generate`: build the conditions, generate events in parallel (output independent of
//! the thread count), encode the raw data and write the dataset directory.

use crate::builders::{default_conditions, ReadoutMap};
use crate::error::DatasetError;
use crate::format::{
    sha256_file, write_conditions, Manifest, RawWriter, TruthWriter, CONDITION_FILES,
    FORMAT_VERSION, GENERATOR_NAME, TRUTH_FILES,
};
use crate::generator::{estimate_clusters, event_rng, Generator, GeneratorParams};
use crate::geometry::Geometry;
use crate::raw::{encode_event, inject_faults, Faults};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Options of `generate`.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    /// Number of events (default 100).
    pub events: u32,
    /// Mean pile-up ⟨PU⟩ (default 50).
    pub pileup: f64,
    /// Run seed (default 1); event i uses an RNG seeded from (seed, i) only.
    pub seed: u64,
    /// Worker threads (default: rayon's global pool).
    pub threads: Option<usize>,
    /// Output directory (created; existing dataset files are overwritten).
    pub output: PathBuf,
    /// Fraction of FEDs per event given an injected fault (default 0).
    pub corrupt_fraction: f64,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            events: 100,
            pileup: 50.0,
            seed: 1,
            threads: None,
            output: PathBuf::from("dataset"),
            corrupt_fraction: 0.0,
        }
    }
}

/// What `generate` produced.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateSummary {
    pub events: u32,
    /// Mean 32-bit payload words per event (the reference's `nDigis`).
    pub words_per_event: f64,
    /// Mean modules with at least one digi.
    pub modules_with_hits: f64,
    /// Mean digitised pixels per event.
    pub pixels_per_event: f64,
    /// Mean clusters per event after the reference charge cut (connected-component estimate).
    pub clusters_per_event: f64,
    /// Wall time (s) of generation + writing.
    pub seconds: f64,
    /// Events per second (wall).
    pub events_per_second: f64,
}

/// Events generated and written together.
const CHUNK: usize = 16;

/// Generates a dataset directory.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let opts = quiver_datasets::GenerateOptions {
///     events: 2, pileup: 1.0, output: dir.path().join("ds"), ..Default::default()
/// };
/// let s = quiver_datasets::generate(&opts).unwrap();
/// assert_eq!(s.events, 2);
/// let ds = quiver_datasets::Dataset::open(&opts.output).unwrap();
/// assert_eq!(ds.n_events(), 2);
/// ```
/// The most worker threads `generate` starts: `quiver run`'s cap (one thread per core is
/// what helps; thousands only exhaust the process's limits).
pub const MAX_THREADS: usize = 1024;

pub fn generate(opts: &GenerateOptions) -> Result<GenerateSummary, DatasetError> {
    generate_with(
        opts,
        GeneratorParams {
            pileup: opts.pileup,
            ..Default::default()
        },
    )
}

/// Whether `dir` holds the dataset [`generate`] would write for `opts` (same events, seed,
/// fault fraction and generator parameters; files are not hashed). A dataset made by an
/// older generator, or with other options, is not.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let opts = quiver_datasets::GenerateOptions { events: 1, pileup: 1.0, output: dir.path().join("ds"), ..Default::default() };
/// assert!(!quiver_datasets::generate::is_generated(&opts));
/// quiver_datasets::generate(&opts).unwrap();
/// assert!(quiver_datasets::generate::is_generated(&opts));
/// assert!(!quiver_datasets::generate::is_generated(&quiver_datasets::GenerateOptions { seed: 2, ..opts }));
/// ```
pub fn is_generated(opts: &GenerateOptions) -> bool {
    let Ok(text) = std::fs::read_to_string(opts.output.join("manifest.toml")) else {
        return false;
    };
    let Ok(m) = toml::from_str::<Manifest>(&text) else {
        return false;
    };
    m.format_version == FORMAT_VERSION
        && m.events == opts.events
        && m.seed == opts.seed
        && m.corrupt_fraction == opts.corrupt_fraction
        && m.params
            == GeneratorParams {
                pileup: opts.pileup,
                ..Default::default()
            }
}

/// [`generate`] with explicit generator parameters (`params.pileup` wins over `opts.pileup`).
pub fn generate_with(
    opts: &GenerateOptions,
    params: GeneratorParams,
) -> Result<GenerateSummary, DatasetError> {
    generate_with_progress(opts, params, &|_| {})
}

/// [`generate_with`], calling `progress(events_written)` after each chunk of events (the
/// command's progress bar).
pub fn generate_with_progress(
    opts: &GenerateOptions,
    params: GeneratorParams,
    progress: &dyn Fn(u64),
) -> Result<GenerateSummary, DatasetError> {
    if opts.events == 0 {
        return Err(DatasetError::InvalidOption(
            "events must be at least 1".into(),
        ));
    }
    if !(params.pileup.is_finite() && params.pileup >= 0.0 && params.pileup <= 1000.0) {
        return Err(DatasetError::InvalidOption(format!(
            "pileup {} not in [0, 1000]",
            params.pileup
        )));
    }
    if !(0.0..=1.0).contains(&opts.corrupt_fraction) {
        return Err(DatasetError::InvalidOption(format!(
            "corrupt_fraction {} not in [0, 1]",
            opts.corrupt_fraction
        )));
    }
    if opts.threads == Some(0) {
        return Err(DatasetError::InvalidOption(
            "threads must be at least 1".into(),
        ));
    }
    if let Some(t) = opts.threads.filter(|&t| t > MAX_THREADS) {
        return Err(DatasetError::InvalidOption(format!(
            "threads = {t}: at most {MAX_THREADS} worker threads"
        )));
    }
    let t0 = std::time::Instant::now();
    let dir = &opts.output;
    std::fs::create_dir_all(dir).map_err(|e| DatasetError::io(dir, e))?;
    let geom = Geometry::phase1();
    let cond = default_conditions();
    write_conditions(dir, &cond)?;
    let ro = ReadoutMap::new(&cond.cabling, &cond.fed_ids);
    let raw_ids: Vec<u32> = geom.modules.iter().map(|m| m.raw_id).collect();
    let gen = Generator::new(params.clone(), &geom, &cond.gains, cond.beam_spot);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads.unwrap_or(0))
        .build()
        .map_err(|e| DatasetError::InvalidOption(format!("thread pool: {e}")))?;
    let raw_path = dir.join("raw.arrow");
    let mut raw = RawWriter::create(&raw_path)?;
    let mut truth = TruthWriter::create(dir)?;
    let (mut words, mut mods, mut pix, mut clus) = (0f64, 0f64, 0f64, 0f64);
    let n = opts.events as usize;
    for start in (0..n).step_by(CHUNK) {
        let end = (start + CHUNK).min(n);
        let out: Vec<_> = pool.install(|| {
            (start..end)
                .into_par_iter()
                .map(|i| {
                    let ev = gen.event(opts.seed, i as u64);
                    let mut feds = Vec::with_capacity(ro.feds.len());
                    let nw = encode_event(&ro, &raw_ids, &ev.digis, i as u32 + 1, &mut feds);
                    let mut faults = Faults::default();
                    if opts.corrupt_fraction > 0.0 {
                        let mut rng = event_rng(opts.seed ^ 0xFA17_FA17_FA17_FA17, i as u64);
                        inject_faults(&mut rng, opts.corrupt_fraction, &mut feds, &mut faults);
                    }
                    let nc = estimate_clusters(&cond.gains, &ev.digis);
                    (i as u32, ev, feds, faults, nw, nc)
                })
                .collect()
        });
        let mut raw_chunk = Vec::with_capacity(out.len());
        let mut kept = Vec::with_capacity(out.len());
        for (i, ev, feds, faults, nw, nc) in out {
            words += nw as f64;
            pix += ev.digis.len() as f64;
            clus += nc as f64;
            let mut m = 0;
            let mut last = u16::MAX;
            for d in &ev.digis {
                if d.module != last {
                    m += 1;
                    last = d.module;
                }
            }
            mods += m as f64;
            raw_chunk.push((i, feds));
            kept.push((i, ev, faults));
        }
        let truth_chunk: Vec<_> = kept
            .iter()
            .map(|(i, ev, faults)| (*i, ev, faults))
            .collect();
        raw.write(&raw_chunk)?;
        truth.write(&truth_chunk)?;
        progress(end as u64);
    }
    raw.finish()?;
    truth.finish()?;
    let mut files = BTreeMap::new();
    let mut sizes = BTreeMap::new();
    for name in ["raw.arrow"]
        .iter()
        .chain(CONDITION_FILES.iter())
        .chain(TRUTH_FILES.iter())
    {
        let p = dir.join(name);
        files.insert(name.to_string(), sha256_file(&p)?);
        sizes.insert(
            name.to_string(),
            std::fs::metadata(&p)
                .map_err(|e| DatasetError::io(&p, e))?
                .len(),
        );
    }
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        generator: GENERATOR_NAME.to_string(),
        events: opts.events,
        seed: opts.seed,
        corrupt_fraction: opts.corrupt_fraction,
        params,
        files,
        sizes,
    };
    let mp = dir.join("manifest.toml");
    let text = toml::to_string(&manifest).map_err(|e| DatasetError::format(&mp, e))?;
    std::fs::write(&mp, text).map_err(|e| DatasetError::io(&mp, e))?;
    let secs = t0.elapsed().as_secs_f64();
    let k = n as f64;
    Ok(GenerateSummary {
        events: opts.events,
        words_per_event: words / k,
        modules_with_hits: mods / k,
        pixels_per_event: pix / k,
        clusters_per_event: clus / k,
        seconds: secs,
        events_per_second: k / secs.max(1e-9),
    })
}
