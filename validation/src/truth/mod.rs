//! Truth performance of the pixel chain: the run's products against the generator's truth.
//!
//! Definitions (also in docs/validation.md, "Truth performance"):
//! - **hit → particle**: the cluster's pixels (rows of `clustered_digis` with a valid
//!   cluster) are looked up in `pixel_truth`; the electrons are summed per particle; the
//!   particle with the largest sum (ties: lowest id) is the hit's particle. A hit whose
//!   largest share belongs to a noise pseudo-particle (process 2), or with no truth, has none.
//! - **track → particle**: the particle shared by at least `match_fraction` (75 %) of the
//!   track's hits.
//! - **efficiency**: primaries (process 0) with pT > `min_pt`, |η| < `max_abs_eta` and sim
//!   hits on ≥ `min_layers` distinct layers, found by ≥ 1 loose track.
//! - **fake rate**: loose tracks matched to no particle / loose tracks. **duplicate rate**:
//!   loose tracks (in row order) matched to a particle an earlier loose track of the event
//!   already matched / loose tracks.
//! - **truth track parameters** are taken at the transverse point of closest approach to
//!   the beam line (beam-spot frame, as the fit's hits are): φ there, the reference's
//!   `tip = x·sinφ − y·cosφ` (= q·d0 of the generator's convention, about the beam spot
//!   instead of the z axis), and `zip` = z there minus the beam spot z.
//! - **vertices**: a true vertex is *reconstructable* with ≥ `vertex_min_tracks` matched
//!   loose tracks (≥ `vertex_track_min_hits` hits, reco pT ≥ `vertex_track_min_pt`) from its
//!   primaries. Each reco vertex's *main* true vertex is the one contributing most of its
//!   matched tracks. A reconstructable vertex is *found* when a reco vertex with it as main
//!   lies within `vertex_max_dz` in z, *split* when ≥ 2 reco vertices have it as main, and
//!   *merged* when it is not found but most of its tracks sit in a reco vertex whose main is
//!   another true vertex.
//! - **hit residuals**: rec hit local x/y minus the nearest sim hit of the hit's particle on
//!   the same module; barrel non-edge = layer < 4 with `size_x > 0` and `size_y > 0`.

mod io;
mod matching;
mod plus;
mod residuals;
mod summary;
mod tracks;
mod vertices;

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Result, ValidationError};

pub(crate) use io::read_parquet;
pub use matching::{best_share, hit_particles, match_track};
pub use plus::{roc, RocPoint, PLUS_KEYS, ROC_STEPS};
pub use summary::{half_width_68, summarize, Summary, MIN_FOR_WIDTH, RESOLVABLE_SIGMA};
pub use tracks::truth_track_params;

/// The layer (0..9) of a module, or `None` past the last module.
///
/// ```
/// use quiver_validation::truth::layer_of;
/// assert_eq!((layer_of(0), layer_of(96), layer_of(1855), layer_of(1856)), (Some(0), Some(1), Some(9), None));
/// ```
pub fn layer_of(module: u16) -> Option<usize> {
    use quiver_datasets::topology::{layer_of, NUMBER_OF_MODULES};
    (module < NUMBER_OF_MODULES).then(|| layer_of(module) as usize)
}

/// Cuts of the truth report.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Efficiency denominator: minimum true pT, GeV (default 0.9).
    pub min_pt: f32,
    /// Efficiency denominator: maximum true |η| (default 2.4).
    pub max_abs_eta: f32,
    /// Efficiency denominator: minimum distinct layers with sim hits (default 3).
    pub min_layers: usize,
    /// Fraction of a track's hits that must share a particle to match it (default 0.75).
    pub match_fraction: f64,
    /// Reconstructable vertex: minimum matched tracks (default 4).
    pub vertex_min_tracks: usize,
    /// Tracks counted for vertices: minimum hits (default 4).
    pub vertex_track_min_hits: usize,
    /// Tracks counted for vertices: minimum reco pT, GeV (default 0.5).
    pub vertex_track_min_pt: f32,
    /// A found vertex lies within this |Δz| of the truth, cm (default 0.1 = 1 mm).
    pub vertex_max_dz: f32,
    /// Beam spot (x, y, z), cm; the reconstruction works relative to it (default 0).
    pub beam_spot: [f32; 3],
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min_pt: 0.9,
            max_abs_eta: 2.4,
            min_layers: 3,
            match_fraction: 0.75,
            vertex_min_tracks: 4,
            vertex_track_min_hits: 4,
            vertex_track_min_pt: 0.5,
            vertex_max_dz: 0.1,
            beam_spot: [0.0; 3],
        }
    }
}

/// A true particle (`particles.parquet`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TruthParticle {
    pub id: u32,
    pub charge: i8,
    pub pt: f32,
    pub eta: f32,
    pub phi: f32,
    pub vx: f32,
    pub vy: f32,
    pub vz: f32,
    /// 0 primary, 1 secondary, 2 noise pseudo-particle.
    pub process: u8,
    pub vertex: i32,
}

/// A true vertex (`vertices.parquet`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TruthVertex {
    pub id: u32,
    pub z: f32,
    pub is_hard: bool,
}

/// A sim hit (`simhits.parquet`), local cm.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TruthSimHit {
    pub module: u16,
    pub lx: f32,
    pub ly: f32,
    pub particle: u32,
}

/// One (pixel, particle) deposit (`pixel_truth.parquet`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TruthPixel {
    pub module: u16,
    pub row: u16,
    pub col: u16,
    pub particle: u32,
    pub electrons: f32,
}

/// Truth of one event.
#[derive(Debug, Clone, Default)]
pub struct TruthEvent {
    pub particles: Vec<TruthParticle>,
    pub vertices: Vec<TruthVertex>,
    pub simhits: Vec<TruthSimHit>,
    pub pixels: Vec<TruthPixel>,
}

/// A digi row: pixel from `digis`, final module and cluster from `clustered_digis`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoDigi {
    pub row: u16,
    pub col: u16,
    pub module: u16,
    pub cluster: i32,
}

/// A rec hit (`hits`), in hit-index order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecHit {
    pub module: u16,
    pub x_local: f32,
    pub y_local: f32,
    pub size_x: i32,
    pub size_y: i32,
}

/// A track (`tracks`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoTrack {
    pub quality: u8,
    pub pt: f32,
    pub eta: f32,
    pub phi: f32,
    pub tip: f32,
    pub zip: f32,
    pub charge: i8,
    /// (φ, tip, q/pT, cotθ, zip).
    pub state: [f32; 5],
    /// Upper triangle, row major: diagonal at 0, 5, 9, 12, 14.
    pub cov: [f32; 15],
    /// Hit indices within the event.
    pub hits: Vec<u32>,
}

/// A vertex (`vertices`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoVertex {
    pub z: f32,
    /// 1/σ², cm⁻².
    pub weight: f32,
    /// Track rows within the event.
    pub tracks: Vec<u32>,
}

/// Products of one event.
#[derive(Debug, Clone, Default)]
pub struct RecoEvent {
    pub digis: Vec<RecoDigi>,
    pub hits: Vec<RecHit>,
    pub tracks: Vec<RecoTrack>,
    pub vertices: Vec<RecoVertex>,
    /// The optional second chain of the run (a `track_classifier`'s `track_scores`, a second
    /// `vertices` product), when the run has one (plans/pixel-plus.toml).
    pub plus: Option<PlusProducts>,
}

/// The products of the run's optional second selection, per event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlusProducts {
    /// Per track row: the classifier's score and quality (`highPurity` = the purity
    /// selection); `None` when the run has no `track_scores`.
    pub scores: Option<Vec<(f32, u8)>>,
    /// A second vertex collection; `None` when the run has one `vertices` product.
    pub vertices: Option<Vec<RecoVertex>>,
}

/// The track quality value `loose`.
pub const LOOSE: u8 = quiver_formats::quality::codes::LOOSE;
/// The track quality value `highPurity`: a classifier's purity selection.
pub const HIGH_PURITY: u8 = quiver_formats::quality::Quality::HighPurity as u8;
/// Resolution quantities, in table order.
pub const QUANTITIES: [&str; 5] = ["pt", "phi", "cot_theta", "tip", "zip"];

/// An efficiency-denominator particle (a primary passing the cuts) of one event.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SelectedParticle {
    /// Its id in the event's truth.
    pub id: u32,
    pub pt: f32,
    pub eta: f32,
    pub phi: f32,
    /// Found by a loose track.
    pub found: bool,
    /// Layers with its rec hits (by hit → particle).
    pub rechit_layers: usize,
    /// Found by a track of any quality.
    pub found_any_quality: bool,
    /// ≥ 2 sim hits on one layer (module overlap or looper).
    pub double_layer_hits: bool,
}

/// What a loose track is, against the truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackKind {
    /// Matched to a particle no earlier loose track of the event matched.
    Matched,
    /// Matched to no particle.
    Fake,
    /// Matched to a particle an earlier loose track already matched.
    Duplicate,
}

/// A loose track of one event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LooseTrack {
    pub hits: usize,
    /// Reco pT (GeV) and η.
    pub pt: f32,
    pub eta: f32,
    pub kind: TrackKind,
    /// Hits of its most frequent particle.
    pub best_share: usize,
}

/// What a track of any quality is against the truth (a row of `track_truth.parquet`, the
/// labels a track classifier is trained on).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrackTruth {
    pub quality: u8,
    /// The matched particle, if any.
    pub particle: Option<u32>,
    /// For tracks below loose, `Matched` or `Fake` by the match alone (no duplicate rule).
    pub kind: TrackKind,
}

/// A matched loose track of a primary, fitted in the particle's direction: residuals and
/// pulls in [`QUANTITIES`] order (pT: (reco − true)/true, pull on |q/pT|).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrackResolution {
    pub true_pt: f32,
    pub true_eta: f32,
    pub residuals: [f64; 5],
    pub pulls: [f64; 5],
}

/// A reconstructable true vertex.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VertexResult {
    /// Its reconstructable tracks.
    pub tracks: usize,
    pub found: bool,
    pub merged: bool,
    pub split: bool,
    /// Reco − true z of the nearest reco vertex it is the main vertex of, cm (NaN if none).
    pub dz: f64,
    pub pull: f64,
    /// |Δz| to the nearest other reconstructable true vertex, cm (∞ if none).
    pub nearest_dz: f64,
    /// The smallest |Δz| to another reconstructable true vertex in units of the pair's
    /// combined z resolution, √(1/W₁ + 1/W₂) with W = Σ 1/σ²(zip) of the vertex's
    /// reconstructable tracks, with the tracks' own errors (∞ if none). The summary
    /// rescales it by the run's zip pull width.
    pub separation: f64,
    /// This vertex has fewer reconstructable tracks than that least separated neighbour (ties:
    /// the higher id): the one of the pair that a merge loses.
    pub smaller_partner: bool,
}

/// A rec hit's residual against the nearest sim hit of its particle on its module.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HitResidual {
    pub layer: usize,
    /// `size_x > 0` and `size_y > 0`.
    pub non_edge: bool,
    pub dx_um: f64,
    pub dy_um: f64,
}

/// Product rows of one event.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    pub digis: usize,
    pub clusters: usize,
    pub hits: usize,
    /// Tracks of any quality.
    pub tracks: usize,
    pub loose_tracks: usize,
    pub vertices: usize,
}

/// What one event contributes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventResult {
    /// Pile-up vertices (true vertices minus the hard one).
    pub n_pileup: usize,
    /// The efficiency denominator.
    pub selected: Vec<SelectedParticle>,
    /// Duplicate loose tracks whose particle has ≥ 2 sim hits on one layer.
    pub duplicate_double_hits: usize,
    /// Matched loose tracks of primaries whose φ is off by more than π/2 (reversed direction).
    pub reversed: usize,
    /// Particles with both a reversed and a normal matched loose track.
    pub reversed_pairs: usize,
    /// Hits with a particle, and hits.
    pub hits_with_particle: usize,
    pub hits: usize,
    pub loose: usize,
    pub fake: usize,
    pub duplicate: usize,
    /// Every loose track.
    pub loose_tracks: Vec<LooseTrack>,
    /// Matched loose tracks of primaries fitted in the particle's direction (reversed ones
    /// are only counted in `reversed`).
    pub resolution: Vec<TrackResolution>,
    /// Matched loose tracks whose reco charge equals the truth's, and matched loose tracks.
    pub charge_agrees: usize,
    pub charge_compared: usize,
    /// Reconstructable true vertices.
    pub vertices: Vec<VertexResult>,
    /// Reco vertices with no matched track.
    pub fake_vertices: usize,
    /// Hit residuals.
    pub residuals: Vec<HitResidual>,
    pub counts: Counts,
    /// Every track, in row order.
    pub track_truth: Vec<TrackTruth>,
    /// The ROC's inputs, for a selection by a classifier's scores (empty otherwise).
    pub roc: RocEvent,
}

/// One event's part of a classifier's ROC (efficiency vs fake rate of `loose` and score ≥ t).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RocEvent {
    /// Per efficiency particle, the best score of a loose track matched to it (−∞ if none).
    pub particles: Vec<f32>,
    /// Per loose track, its score and whether it is fake.
    pub tracks: Vec<(f32, bool)>,
}

/// Everything one event contributes to the report (the faithful chain: `loose` tracks and
/// the run's `vertices`).
pub fn analyze_event(reco: &RecoEvent, truth: &TruthEvent, cfg: &Config) -> Result<EventResult> {
    Ok(analyze_event_plus(reco, truth, cfg)?.0)
}

/// [`analyze_event`], and the same for the run's second selection when it has one
/// ([`RecoEvent::plus`]): tracks of the classifier's purity selection (`highPurity` in
/// `track_scores`) instead of `loose`, the second vertex collection instead of the first. The
/// vertex denominator (reconstructable vertices) is the faithful one in both, so the two
/// vertex finders are measured against the same vertices.
pub fn analyze_event_plus(
    reco: &RecoEvent,
    truth: &TruthEvent,
    cfg: &Config,
) -> Result<(EventResult, Option<EventResult>)> {
    let hp = hit_particles(reco, truth)?;
    let by_id: HashMap<u32, &TruthParticle> = truth.particles.iter().map(|p| (p.id, p)).collect();
    let matched: Vec<Option<u32>> = reco
        .tracks
        .iter()
        .map(|t| match_track(&t.hits, &hp, cfg.match_fraction))
        .collect();
    let loose: Vec<bool> = reco.tracks.iter().map(|t| t.quality >= LOOSE).collect();
    let ev = Matched {
        reco,
        truth,
        cfg,
        hp: &hp,
        matched: &matched,
        by_id: &by_id,
    };
    let clusters = {
        let mut c: Vec<(u16, i32)> = reco
            .digis
            .iter()
            .filter(|d| d.module != 9999 && d.cluster >= 0 && d.cluster != 9999)
            .map(|d| (d.module, d.cluster))
            .collect();
        c.sort_unstable();
        c.dedup();
        c.len()
    };
    let mut faithful = ev.analyze(&loose, &reco.vertices, clusters);
    // The hits are the same for both selections: their residuals are the faithful result's.
    faithful.residuals = residuals::hit_residuals(reco, truth, &hp);
    let Some(plus) = &reco.plus else {
        return Ok((faithful, None));
    };
    let selection = match &plus.scores {
        Some(s) => {
            if s.len() != reco.tracks.len() {
                return Err(ValidationError::Data(format!(
                    "track_scores has {} rows for an event with {} tracks: not the scores of this run's tracks",
                    s.len(),
                    reco.tracks.len()
                )));
            }
            s.iter().map(|&(_, q)| q == HIGH_PURITY).collect()
        }
        None => loose.clone(),
    };
    let mut r = ev.analyze(
        &selection,
        plus.vertices.as_deref().unwrap_or(&reco.vertices),
        clusters,
    );
    if let Some(s) = &plus.scores {
        r.roc = roc_entries(&faithful, s, &matched, &loose);
    }
    Ok((faithful, Some(r)))
}

/// An event's tables computed once, for the analysis of one or two selections.
struct Matched<'a> {
    reco: &'a RecoEvent,
    truth: &'a TruthEvent,
    cfg: &'a Config,
    hp: &'a [Option<u32>],
    matched: &'a [Option<u32>],
    by_id: &'a HashMap<u32, &'a TruthParticle>,
}

impl Matched<'_> {
    /// The tracks of `selected` and `vertices` against the truth; `clusters` is the event's
    /// count (the same for every selection).
    fn analyze(&self, selected: &[bool], vertices: &[RecoVertex], clusters: usize) -> EventResult {
        let (reco, truth, cfg) = (self.reco, self.truth, self.cfg);
        let mut r = EventResult {
            n_pileup: truth.vertices.iter().filter(|v| !v.is_hard).count(),
            ..Default::default()
        };
        tracks::analyze(
            reco,
            truth,
            cfg,
            self.hp,
            self.matched,
            selected,
            self.by_id,
            &mut r,
        );
        vertices::analyze(reco, vertices, truth, cfg, self.matched, self.by_id, &mut r);
        r.counts = Counts {
            digis: reco.digis.len(),
            clusters,
            hits: reco.hits.len(),
            tracks: reco.tracks.len(),
            loose_tracks: r.loose,
            vertices: vertices.len(),
        };
        r
    }
}

/// The ROC's inputs of one event: per efficiency particle the best score of a loose track
/// matched to it, per loose track its score and whether it is fake.
fn roc_entries(
    faithful: &EventResult,
    scores: &[(f32, u8)],
    matched: &[Option<u32>],
    loose: &[bool],
) -> RocEvent {
    let mut best: HashMap<u32, f32> = HashMap::new();
    let mut tracks = Vec::new();
    for ((&(score, _), m), &l) in scores.iter().zip(matched).zip(loose) {
        if !l {
            continue;
        }
        tracks.push((score, m.is_none()));
        if let Some(p) = m {
            let b = best.entry(*p).or_insert(f32::NEG_INFINITY);
            *b = b.max(score);
        }
    }
    RocEvent {
        particles: faithful
            .selected
            .iter()
            .map(|p| best.get(&p.id).copied().unwrap_or(f32::NEG_INFINITY))
            .collect(),
        tracks,
    }
}

/// Truth report of a run: reads the run's Parquet products (`run_dir`, as `quiver run` of
/// plans/pixel.toml writes them) and the dataset's truth (`truth_dir`, made by `quiver
/// generate`; its beam spot from `conditions/beamspot.arrow`), and writes
/// `efficiency.parquet`, `resolution.parquet`, `vertex_efficiency.parquet`,
/// `hit_residuals.parquet`, `summary.json` and `report.html` (plots, see
/// [`crate::html`]) into `output`. Events of the run missing in
/// the truth are an error.
pub fn report(run_dir: &Path, truth_dir: &Path, output: &Path) -> Result<Summary> {
    let bs = quiver_datasets::format::read_conditions(truth_dir)
        .map_err(|e| {
            ValidationError::Data(format!(
                "{}: reading the beam spot: {e}",
                truth_dir.display()
            ))
        })?
        .beam_spot;
    let cfg = Config {
        beam_spot: [bs.x, bs.y, bs.z],
        ..Config::default()
    };
    report_with(run_dir, truth_dir, output, &cfg)
}

/// [`report`] with explicit cuts (and beam spot).
pub fn report_with(
    run_dir: &Path,
    truth_dir: &Path,
    output: &Path,
    cfg: &Config,
) -> Result<Summary> {
    let events = read_events(run_dir, truth_dir)?;
    let (results, plus): (Vec<_>, Vec<_>) = events
        .iter()
        .map(|(_, r, t)| analyze_event_plus(r, t, cfg))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    let has_plus = events.iter().any(|e| e.1.plus.is_some());
    let plus = plus
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .filter(|_| has_plus);
    let plus_vertices: Option<Vec<VertexResult>> = plus
        .as_ref()
        .map(|p| p.iter().flat_map(|r| r.vertices.iter().copied()).collect());
    let mut s =
        summary::summarize_with(&results, cfg, Some(output), None, plus_vertices.as_deref())?;
    let ids: Vec<u32> = events.iter().map(|e| e.0).collect();
    plus::write_track_truth(output, &ids, &results)?;
    if let Some(plus) = plus {
        let ps = summary::summarize_with(&plus, cfg, None, Some(s.zip_pull_width), None)?;
        s.plus = Some(Box::new(ps));
        if events
            .iter()
            .any(|e| e.1.plus.as_ref().is_some_and(|p| p.scores.is_some()))
        {
            s.roc = roc(&plus);
            plus::write_roc(output, &s.roc)?;
        }
    }
    // Truncated events bias every number above: the report says which capacities the run
    // reached, as the run summary did.
    s.capacities_reached = crate::capacity::read_run(run_dir)?;
    let c = &s.capacities_reached;
    io::write_table(
        &output.join("capacity_overflows.parquet"),
        vec![
            (
                "step",
                io::Col::Str(c.iter().map(|c| c.label.clone()).collect()),
            ),
            (
                "capacity",
                io::Col::Str(c.iter().map(|c| c.capacity.clone()).collect()),
            ),
            ("limit", io::Col::U64(c.iter().map(|c| c.limit).collect())),
            ("events", io::Col::U64(c.iter().map(|c| c.events).collect())),
            (
                "max_demanded",
                io::Col::F64(
                    c.iter()
                        .map(|c| c.max_demanded.map_or(f64::NAN, |d| d as f64))
                        .collect(),
                ),
            ),
            (
                "truncated",
                io::Col::U64(c.iter().map(|c| c.truncated).collect()),
            ),
        ],
    )?;
    let p = output.join("summary.json");
    std::fs::write(&p, s.to_json()).map_err(|source| ValidationError::Io { path: p, source })?;
    // The run's validation histograms (the `histograms` step of the default plan) travel
    // with the report.
    for name in ["histograms.parquet", "histograms.txt"] {
        let from = run_dir.join(name);
        if from.exists() {
            std::fs::copy(&from, output.join(name))
                .map_err(|e| ValidationError::io(output.join(name), e))?;
        }
    }
    crate::html::write_report_html(output, &s)?;
    Ok(s)
}

/// Refuses a truth dataset that is not the one the run read: measured against another
/// dataset's truth, a run gives efficiency 0 and fake rate 1 without any other sign.
fn check_truth_is_input(run_dir: &Path, truth_dir: &Path) -> Result<()> {
    use quiver_columnar::rundir::{self, InputIdentity};
    let m = rundir::verify_with(run_dir, rundir::Check::Sizes)
        .map_err(|e| ValidationError::Data(e.to_string()))?;
    let Some(read) = m.input else {
        return Err(ValidationError::Data(format!(
            "{}: the run records no input dataset (written by a Quiver before runs recorded it, or a plan that reads \
             none), so its truth cannot be told: run the plan again into it",
            run_dir.join(rundir::MANIFEST).display()
        )));
    };
    let seed = |s: Option<u64>| s.map_or(String::new(), |s| format!(", seed {s}"));
    let truth = InputIdentity::of(truth_dir)
        .map_err(|e| ValidationError::Data(e.to_string()))?
        .ok_or_else(|| {
            ValidationError::Data(format!(
                "{}: no manifest.toml, so not a Quiver dataset",
                truth_dir.display()
            ))
        })?;
    if truth.manifest_sha256 != read.manifest_sha256 {
        return Err(ValidationError::Data(format!(
            "the truth dataset {}{} is not the dataset the run in {} read ({}{}; their manifests differ): give the \
             run's input as the truth",
            truth_dir.display(),
            seed(truth.seed),
            run_dir.display(),
            read.path,
            seed(read.seed)
        )));
    }
    Ok(())
}

/// The run's products and the truth of every event of the run, in event order (for custom
/// studies with [`analyze_event`]). Events of the run missing in the truth are an error.
pub fn read_events(run_dir: &Path, truth_dir: &Path) -> Result<Vec<(u32, RecoEvent, TruthEvent)>> {
    check_truth_is_input(run_dir, truth_dir)?;
    let reco = io::read_run(run_dir)?;
    let mut truth = io::read_truth(truth_dir)?;
    reco.into_iter()
        .map(|(e, r)| {
            let t = truth.remove(&e).ok_or_else(|| {
                ValidationError::Data(format!(
                    "event {e} of the run has no truth in {}",
                    truth_dir.display()
                ))
            })?;
            Ok((e, r, t))
        })
        .collect()
}
