//! Pixel tracks: CA doublets and ntuplets, Broken Line fits, quality classification and
//! duplicate cleaning — a CPU port of the reference `serial` chain (`plugin-PixelTriplets`).
//!
//! One event at a time: [`reconstruct_tracks`] takes the event's rec hits as column slices
//! ([`HitsView`]) and returns every tuple the CA found, in tuple order and with any quality
//! ([`Tracks`]), as the reference's `TrackSoA` holds them.
//!
//! Steps, in the reference's order:
//! 1. [`doublets::build_doublets`] — φ binning and the 19 layer-pair doublet search;
//! 2. [`ntuplets::connect`], [`ntuplets::fishbone`] (early), [`ntuplets::find_ntuplets`],
//!    [`ntuplets::early_duplicate_remover`];
//! 3. [`fit::fit_tuples`] — Broken Line (or, optionally, [`riemann`]) fit of the
//!    non-duplicate 3/4/5-hit tuples;
//! 4. [`quality::classify_tracks`], [`quality::fast_duplicate_remover`],
//!    [`quality::triplet_cleaner`].
//!
//! Faithfulness: the loops follow the serial backend's order (cell creation, neighbour and
//! track lists, the histograms' decrementing fills), capacities are the reference's, and f32
//! vs f64 follow its float/double. Checked against the reference's own code compiled with
//! Eigen 3.4 (`scripts/refcheck.sh --reference DIR`, ignored tests `reference_ca_cross_check`,
//! `reference_fit_cross_check`): on synthetic events of up to 11 k hits the tuples, their
//! hits and qualities are identical and every Broken Line output is bit-identical; the
//! Riemann fit agrees to rounding (≤ 1e-5 relative, the same size as a one-ulp input change).

// The ports index arrays the way the reference does, keep its argument lists, and write its
// double literals that are rounded to f32 in full.
#![allow(
    clippy::needless_range_loop,
    clippy::too_many_arguments,
    clippy::excessive_precision
)]

mod broken_line;
pub mod doublets;
pub mod fit;
mod lanes;
mod linalg;
pub mod ntuplets;
pub mod quality;
pub mod riemann;
pub mod testing;

use quiver_formats::conditions::CpeParams;

pub use doublets::DoubletConfig;
pub use fit::FitConfig;
pub use ntuplets::NtupletConfig;
pub use quality::QualityConfig;

/// The largest number of hits the reference's 16-bit hit index and containers accept
/// (`gpuClustering::MaxNumClusters`).
pub const MAX_HITS: usize = 49_152;

/// Errors of the track reconstruction.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrackError {
    /// The hit columns do not all have the same length.
    #[error("hit column `{column}` has {len} entries, expected {expected} (length of x_global)")]
    ColumnLength {
        column: &'static str,
        len: usize,
        expected: usize,
    },
    /// More hits than the 16-bit hit index allows.
    #[error("{n} hits in the event, at most {max} are supported")]
    TooManyHits { n: usize, max: usize },
    /// `layer_start` is not a non-decreasing list ending at or before the number of hits.
    #[error(
        "layer_start {layer_start:?} must be non-decreasing and end at or before n_hits = {n_hits}"
    )]
    LayerStart {
        layer_start: [u32; 11],
        n_hits: usize,
    },
    /// A valid hit (det index ≤ 2000) points to a module absent from the conditions.
    #[error("hit {hit} has det index {det}, but the CPE conditions hold {n_modules} modules")]
    MissingModule {
        hit: usize,
        det: u16,
        n_modules: usize,
    },
    /// The hits are not ordered by detIndex.
    #[error("hit {hit} has a smaller det index than the hit before it; hits must be ordered by det index")]
    Unsorted { hit: usize },
    /// A configuration value is out of range.
    #[error("invalid track configuration: {0}")]
    Config(String),
    /// A CA path grew longer than the reference's recursion depth allows.
    #[error("ntuplet search exceeded {0} cells along one path")]
    PathTooLong(usize),
    /// Intermediate products (doublets, tuples) handed between stages are inconsistent.
    #[error("inconsistent input: {0}")]
    Invalid(String),
}

/// One event's rec hits, as columns (the reference's `TrackingRecHit2DSOAView`). Hits must be
/// ordered by detIndex, hence by layer; `layer_start[l]..layer_start[l+1]` are the hits of
/// layer `l` (0..3 BPix, 4..6 FPix+, 7..9 FPix−).
#[derive(Clone, Copy, Debug)]
pub struct HitsView<'a> {
    /// Global x, cm, beam-spot subtracted.
    pub x_global: &'a [f32],
    /// Global y, cm, beam-spot subtracted.
    pub y_global: &'a [f32],
    /// Global z, cm, beam-spot subtracted.
    pub z_global: &'a [f32],
    /// √(x² + y²), cm.
    pub r_global: &'a [f32],
    /// φ as int16 (π ↔ 32768).
    pub iphi: &'a [i16],
    /// Cluster x size, 1/8 pixel units, negative for edge clusters (not used by the CA).
    pub size_x: &'a [i16],
    /// Cluster y size, 1/8 pixel units, negative for edge clusters.
    pub size_y: &'a [i16],
    /// Module detIndex; values > 2000 mark invalid hits.
    pub det_index: &'a [u16],
    /// Local x variance, cm².
    pub xerr_local: &'a [f32],
    /// Local y variance, cm².
    pub yerr_local: &'a [f32],
    /// Module frames (for the global hit covariance in the fit), indexed by detIndex.
    pub cpe: &'a CpeParams,
    /// First hit of each layer, plus the end.
    pub layer_start: [u32; 11],
}

/// The reference's `hitsLayerStart` from the hits' detIndex column (hits ordered by
/// detIndex): the first hit of each layer (`topology::LAYER_START`) and the end of the last.
/// Fails if the column is not sorted.
///
/// ```
/// use quiver_reco::tracks::layer_start_from_det_index;
/// let ls = layer_start_from_det_index(&[3, 50, 100, 1200, 1855]).unwrap();
/// assert_eq!(ls, [0, 2, 3, 3, 3, 4, 4, 4, 4, 4, 5]);
/// assert!(layer_start_from_det_index(&[100, 3]).is_err());
/// ```
pub fn layer_start_from_det_index(det_index: &[u16]) -> Result<[u32; 11], TrackError> {
    // Whether any pair is out of order first (a reduction that vectorises), where only then.
    let tail = det_index.get(1..).unwrap_or_default();
    if det_index
        .iter()
        .zip(tail)
        .fold(false, |u, (a, b)| u | (a > b))
    {
        let k = det_index
            .windows(2)
            .position(|w| w[0] > w[1])
            .unwrap_or_default();
        return Err(TrackError::Unsorted { hit: k + 1 });
    }
    let mut ls = [0u32; 11];
    for (l, start) in ls.iter_mut().enumerate() {
        let first_det = quiver_formats::topology::LAYER_START[l];
        *start = det_index.partition_point(|&d| (d as u32) < first_det) as u32;
    }
    Ok(ls)
}

impl HitsView<'_> {
    /// Number of hits.
    pub fn n_hits(&self) -> usize {
        self.x_global.len()
    }

    /// Checks lengths, capacity ([`MAX_HITS`]), `layer_start` and that each valid hit has a
    /// module frame.
    pub fn validate(&self) -> Result<(), TrackError> {
        self.validate_max(MAX_HITS)
    }

    /// [`HitsView::validate`] with another hit capacity (`usize::MAX` for sized capacities).
    pub fn validate_max(&self, max_hits: usize) -> Result<(), TrackError> {
        let n = self.n_hits();
        let cols: [(&'static str, usize); 9] = [
            ("y_global", self.y_global.len()),
            ("z_global", self.z_global.len()),
            ("r_global", self.r_global.len()),
            ("iphi", self.iphi.len()),
            ("size_x", self.size_x.len()),
            ("size_y", self.size_y.len()),
            ("det_index", self.det_index.len()),
            ("xerr_local", self.xerr_local.len()),
            ("yerr_local", self.yerr_local.len()),
        ];
        for (column, len) in cols {
            if len != n {
                return Err(TrackError::ColumnLength {
                    column,
                    len,
                    expected: n,
                });
            }
        }
        check_hit_modules(
            self.det_index,
            &self.layer_start,
            self.cpe.det.len(),
            max_hits,
        )
    }
}

/// The checks of [`HitsView::validate_max`] past the column lengths, from the hits'
/// detIndex column alone (what a step whose hit columns live on a device has on the host):
/// the capacity, `layer_start`, and a module frame (of `n_modules`) for each valid hit.
///
/// ```
/// use quiver_reco::tracks::{check_hit_modules, layer_start_from_det_index};
/// let det = [3u16, 50, 1200];
/// let ls = layer_start_from_det_index(&det).unwrap();
/// assert!(check_hit_modules(&det, &ls, 1856, 100).is_ok());
/// assert!(check_hit_modules(&det, &ls, 1000, 100).is_err()); // no frame for module 1200
/// assert!(check_hit_modules(&det, &ls, 1856, 2).is_err());   // above the capacity
/// ```
pub fn check_hit_modules(
    det_index: &[u16],
    layer_start: &[u32; 11],
    n_modules: usize,
    max_hits: usize,
) -> Result<(), TrackError> {
    let n = det_index.len();
    if n > max_hits {
        return Err(TrackError::TooManyHits { n, max: max_hits });
    }
    let ls = layer_start;
    if ls.windows(2).any(|w| w[0] > w[1]) || ls[10] as usize > n {
        return Err(TrackError::LayerStart {
            layer_start: *ls,
            n_hits: n,
        });
    }
    for (hit, &det) in det_index.iter().enumerate() {
        if det <= 2000 && det as usize >= n_modules {
            return Err(TrackError::MissingModule {
                hit,
                det,
                n_modules,
            });
        }
    }
    Ok(())
}

/// Track quality codes: defined with the other data formats (`quiver_formats`).
pub use quiver_formats::quality::Quality;

/// All parameters of the pixel-track reconstruction; defaults are the reference's.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct CaConfig {
    /// Doublet search.
    pub doublets: DoubletConfig,
    /// Cell connection, fishbone and ntuplet search.
    pub ntuplets: NtupletConfig,
    /// Helix fit.
    pub fit: FitConfig,
    /// Classification and duplicate cleaning.
    pub quality: QualityConfig,
}

impl CaConfig {
    /// The same configuration with every capacity sized from the event (`capacities =
    /// "sized"`): nothing is truncated, every container holds what the event needs.
    ///
    /// ```
    /// use quiver_reco::tracks::CaConfig;
    /// let c = CaConfig::default().with_sized_capacities();
    /// assert_eq!(c.doublets.max_number_of_doublets, u32::MAX);
    /// assert_eq!(c.ntuplets.min_hits_per_ntuplet, CaConfig::default().ntuplets.min_hits_per_ntuplet);
    /// ```
    pub fn with_sized_capacities(mut self) -> Self {
        self.doublets.max_hits = usize::MAX;
        self.doublets.max_number_of_doublets = u32::MAX;
        self.doublets.max_cells_per_hit = u32::MAX;
        self.ntuplets.max_cell_neighbors = u32::MAX;
        self.ntuplets.max_cell_tracks = u32::MAX;
        self.ntuplets.max_active_doublets = u32::MAX;
        self.ntuplets.max_tuples = u32::MAX;
        self.fit.max_concurrent_fits = u32::MAX;
        self
    }

    /// Checks every sub-configuration.
    pub fn validate(&self) -> Result<(), TrackError> {
        self.doublets.validate()?;
        self.ntuplets.validate()?;
        self.fit.validate()?;
        self.quality.validate()
    }

    /// Number of layer pairs used (19, 15 without jumping forward pairs, 13 for quadruplets).
    pub fn n_pairs(&self) -> usize {
        doublets::n_actual_pairs(
            self.doublets.include_jumping_forward_doublets,
            self.ntuplets.min_hits_per_ntuplet,
        )
    }
}

/// Counters of one event's reconstruction (the reference's debug counters).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrackStats {
    /// Doublets built.
    pub n_cells: u32,
    /// Cells killed by the fishbone.
    pub n_killed_cells: u32,
    /// Tuples stored.
    pub n_tuples: u32,
    /// Tuples fitted.
    pub n_fitted: u32,
    /// Doublet capacity reached.
    pub cells_overflow: bool,
    /// Hits whose cell list was full.
    pub outer_hit_overflows: u32,
    /// Tuple capacity reached.
    pub tuples_overflow: bool,
    /// Cells whose neighbour list was full, or neighbour lists exhausted.
    pub neighbor_overflows: u32,
    /// Cells whose track list was full, or track lists exhausted.
    pub cell_track_overflows: u32,
}

/// Per-track columns of one event (the reference's `TrackSoA`), one row per tuple in tuple
/// order, any quality. Tuples that were not fitted (duplicates from the early remover, or
/// beyond the fit capacity) keep zeros in the fit columns, like the reference's
/// zero-initialised SoA.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tracks {
    /// Quality per track, as the `u8` value of [`Quality`] (0 bad, 1 dup, 2 loose).
    pub quality: Vec<u8>,
    /// Transverse momentum, GeV.
    pub pt: Vec<f32>,
    /// Pseudorapidity, asinh(cotθ).
    pub eta: Vec<f32>,
    /// φ at the point of closest approach, rad.
    pub phi: Vec<f32>,
    /// Signed transverse impact parameter, cm: Karimäki's d = x·sinφ − y·cosφ of the point
    /// of closest approach (the opposite sign of CMS's dxy).
    pub tip: Vec<f32>,
    /// z at the point of closest approach, cm.
    pub zip: Vec<f32>,
    /// Charge, sign of q/pT (+1 for 0, as copysign does).
    pub charge: Vec<i8>,
    /// χ²/ndof of the fit (circle + line).
    pub chi2: Vec<f32>,
    /// (φ, tip, q/pT [GeV⁻¹], cotθ, zip).
    pub state: Vec<[f32; 5]>,
    /// Upper triangle of the 5×5 state covariance, row by row.
    pub covariance: Vec<[f32; 15]>,
    /// Number of hits per track.
    pub n_hits: Vec<u16>,
    /// Offsets into `hit_indices` (len = n_tracks + 1).
    pub hit_offsets: Vec<u32>,
    /// Hit indices of all tracks, inner to outer.
    pub hit_indices: Vec<u32>,
    /// detIndex of each entry of `hit_indices`.
    pub det_indices: Vec<u16>,
    /// Counters.
    pub stats: TrackStats,
}

impl Tracks {
    /// Number of tracks (tuples).
    pub fn len(&self) -> usize {
        self.quality.len()
    }
    /// True if no tuple was found.
    pub fn is_empty(&self) -> bool {
        self.quality.is_empty()
    }
    /// Variance of zip per track (`covariance[i][14]`), the vertex finder's input.
    pub fn cov_zip(&self) -> Vec<f32> {
        self.covariance.iter().map(|c| c[14]).collect()
    }
    /// Hit indices of track `i`.
    pub fn hits_of(&self, i: usize) -> &[u32] {
        &self.hit_indices[self.hit_offsets[i] as usize..self.hit_offsets[i + 1] as usize]
    }
}

/// Reconstructs the pixel tracks of one event, in the reference order: doublets, connect,
/// early fishbone, ntuplets, early duplicate removal, fit, (late fishbone,) classification,
/// fast duplicate removal, triplet cleaning.
///
/// ```
/// use quiver_reco::tracks::{reconstruct_tracks, CaConfig, Quality};
/// use quiver_reco::tracks::testing::{HitBuilder, Helix};
/// let mut b = HitBuilder::new();
/// let h = Helix { pt: 2.0, charge: 1, phi0: 0.3, tip: 0.0, zip: 1.0, cot_theta: 0.5 };
/// b.add_helix_barrel(&h, &[0, 1, 2, 3]);
/// let cpe = HitBuilder::cpe_params();
/// let cols = b.build();
/// let tracks = reconstruct_tracks(&cols.view(&cpe), &CaConfig::default()).unwrap();
/// assert!(tracks.quality.iter().any(|&q| q == Quality::Loose as u8));
/// ```
pub fn reconstruct_tracks(hits: &HitsView, cfg: &CaConfig) -> Result<Tracks, TrackError> {
    cfg.validate()?;
    hits.validate()?;
    let d = stage_doublets(hits, cfg)?;
    let (tuples, ca) = stage_ntuplets(hits, d, cfg)?;
    let mut tracks = stage_fit(hits, &tuples, cfg)?;
    stage_quality(hits, &tuples, &ca, &mut tracks, cfg);
    tracks.stats.n_cells = ca.n_cells() as u32;
    tracks.stats.n_killed_cells = ca.alive.iter().filter(|&&a| !a).count() as u32;
    tracks.stats.n_tuples = tuples.len() as u32;
    tracks.stats.cells_overflow = ca.cells_overflow;
    tracks.stats.outer_hit_overflows = ca.outer_hit_overflows;
    tracks.stats.tuples_overflow = tuples.overflow;
    tracks.stats.neighbor_overflows = ca.neighbor_overflows;
    tracks.stats.cell_track_overflows = ca.track_overflows;
    Ok(tracks)
}

// The four stages below are what the `ca_doublets`, `ca_ntuplets`, `track_fit` and
// `track_quality` steps run; [`reconstruct_tracks`] chains them. Each takes what the previous
// one published, so a stage can be replaced (e.g. by a Python fit) without the others.

/// Stage 1 (`ca_doublets`): the cells of the 19 layer pairs.
pub fn stage_doublets(hits: &HitsView, cfg: &CaConfig) -> Result<doublets::Doublets, TrackError> {
    doublets::build_doublets(hits, &cfg.doublets, cfg.n_pairs())
}

/// Stage 1 as the `ca_doublets` step runs it: the cells as columns, whether each is in its
/// outer hit's cell list (the `listed` column, packed) and how many are not, without building
/// the lists.
pub fn stage_doublet_cells(
    hits: &HitsView,
    cfg: &CaConfig,
) -> Result<(doublets::CellColumns, arrow_buffer::BooleanBuffer, u64), TrackError> {
    let c = doublets::build_doublet_columns(hits, &cfg.doublets, cfg.n_pairs())?;
    let (listed, unlisted) =
        doublets::listed_bits(&c.outer, hits.n_hits(), cfg.doublets.max_cells_per_hit);
    Ok((c, listed, unlisted))
}

/// Cells from their columns (as `ca_doublets` publishes them): bit `c` of `listed` says
/// whether cell `c` made it into its outer hit's cell list (at most `max_cells_per_hit` do).
///
/// ```
/// use arrow_buffer::BooleanBuffer;
/// use quiver_reco::tracks::{doublets_from_columns, testing::HitBuilder};
/// let mut b = HitBuilder::new();
/// for (layer, r) in [(0, 2.9), (1, 6.8), (2, 10.9)] {
///     b.add_barrel_hit(layer, r, 0.1, 0.0); // hits 0, 1, 2 (sorted by module)
/// }
/// let (cols, cpe) = (b.build(), HitBuilder::cpe_params());
/// let hits = cols.view(&cpe);
/// // Cells 0→1 and 1→2; the second is not in hit 2's list.
/// let listed = BooleanBuffer::from(&[true, false][..]);
/// let d = doublets_from_columns(&hits, &[0, 1], &[1, 2], &[0, 1], &listed).unwrap();
/// assert_eq!(d.outer_hit_of_cell.of(1), &[0]);
/// assert!(d.outer_hit_of_cell.of(2).is_empty());
/// // A hit index past the hits names the cell.
/// let e = doublets_from_columns(&hits, &[0, 7], &[1, 2], &[0, 1], &listed).unwrap_err();
/// assert!(e.to_string().contains("cell 1"), "{e}");
/// ```
pub fn doublets_from_columns(
    hits: &HitsView,
    inner: &[u32],
    outer: &[u32],
    pair: &[u8],
    listed: &arrow_buffer::BooleanBuffer,
) -> Result<doublets::Doublets, TrackError> {
    let (outer_hit_of_cell, listed_inner_hits) =
        outer_hit_lists(hits.n_hits(), inner, outer, pair.len(), listed)?;
    Ok(doublets::Doublets {
        cells: doublets::cells_from_columns(inner, outer, pair),
        outer_hit_of_cell,
        listed_inner_hits,
        ..Default::default()
    })
}

/// [`doublets_from_columns`] as the `ca_ntuplets` step runs it: the CA state on the cells'
/// columns themselves (shared, not copied), every cell alive and none connected yet.
///
/// ```
/// use arrow_buffer::{BooleanBuffer, ScalarBuffer};
/// use quiver_reco::tracks::{ca_state_from_columns, testing::HitBuilder};
/// let mut b = HitBuilder::new();
/// for (layer, r) in [(0, 2.9), (1, 6.8), (2, 10.9)] {
///     b.add_barrel_hit(layer, r, 0.1, 0.0);
/// }
/// let (cols, cpe) = (b.build(), HitBuilder::cpe_params());
/// let hits = cols.view(&cpe);
/// let inner = ScalarBuffer::from(vec![0u32, 1]);
/// let (outer, pair) = (ScalarBuffer::from(vec![1u32, 2]), ScalarBuffer::from(vec![0u8, 1]));
/// let listed = BooleanBuffer::from(&[true, true][..]);
/// let ca = ca_state_from_columns(&hits, inner, outer, pair, &listed).unwrap();
/// assert_eq!((ca.n_cells(), ca.outer_hit_of_cell.of(2)), (2, &[1][..]));
/// assert!(ca.alive.iter().all(|&a| a));
/// ```
pub fn ca_state_from_columns(
    hits: &HitsView,
    inner: arrow_buffer::ScalarBuffer<u32>,
    outer: arrow_buffer::ScalarBuffer<u32>,
    pair: arrow_buffer::ScalarBuffer<u8>,
    listed: &arrow_buffer::BooleanBuffer,
) -> Result<ntuplets::CaState, TrackError> {
    let (outer_hit_of_cell, listed_inner_hits) =
        outer_hit_lists(hits.n_hits(), &inner, &outer, pair.len(), listed)?;
    // `connect` and `find_ntuplets` set the neighbour and tuple lists: they start empty
    // rather than with a row per cell (`CaState::new`).
    Ok(ntuplets::CaState {
        alive: vec![true; inner.len()],
        inner,
        outer,
        pair,
        outer_hit_of_cell,
        listed_inner_hits,
        tuple_cell_offsets: vec![0],
        ..Default::default()
    })
}

/// The listed cells of every outer hit, in cell order, and the inner hit of each entry:
/// after checking the columns' lengths and hit indices.
fn outer_hit_lists(
    n_hits: usize,
    inner: &[u32],
    outer: &[u32],
    n_pairs: usize,
    listed: &arrow_buffer::BooleanBuffer,
) -> Result<(doublets::Csr, Vec<u32>), TrackError> {
    let n = inner.len();
    if outer.len() != n || n_pairs != n || listed.len() != n {
        return Err(TrackError::Invalid(format!(
            "doublet columns of {n}, {}, {n_pairs}, {} entries",
            outer.len(),
            listed.len()
        )));
    }
    // The largest index first (a reduction that vectorises), the culprit only when it is
    // out of range: a search that stops at the first bad cell cannot be vectorised.
    let max = |v: &[u32]| v.iter().fold(0, |m, &x| m.max(x)) as usize;
    if n > 0 && (max(inner) >= n_hits || max(outer) >= n_hits) {
        let c = inner
            .iter()
            .zip(outer)
            .position(|(&i, &o)| i as usize >= n_hits || o as usize >= n_hits)
            .unwrap_or_default();
        return Err(TrackError::Invalid(format!(
            "cell {c}: hits {}, {} of {n_hits}",
            inner[c], outer[c]
        )));
    }
    // Usually every cell is listed: then the flags are not read one by one.
    let all_listed = listed.count_set_bits() == n;
    // The listed cells of each outer hit, in cell order (one counting sort).
    let mut offsets = vec![0u32; n_hits + 1];
    if all_listed {
        for &o in outer {
            offsets[o as usize + 1] += 1;
        }
    } else {
        for (&o, l) in outer.iter().zip(listed.iter()) {
            offsets[o as usize + 1] += l as u32;
        }
    }
    for h in 0..n_hits {
        offsets[h + 1] += offsets[h];
    }
    // The cell and its inner hit scattered into zeroed memory: written first in order, its
    // lines are in cache for the random stores (into uninitialised memory the scatter took
    // 1.7 times as long).
    let m = offsets[n_hits] as usize;
    let (mut values, mut listed_inner_hits) = (vec![0u32; m], vec![0u32; m]);
    let mut cursor = offsets[..n_hits].to_vec();
    let mut put = |c: usize, o: u32, i: u32| {
        let k = &mut cursor[o as usize];
        values[*k as usize] = c as u32;
        listed_inner_hits[*k as usize] = i;
        *k += 1;
    };
    if all_listed {
        for (c, (&o, &i)) in outer.iter().zip(inner).enumerate() {
            put(c, o, i);
        }
    } else {
        for (c, ((&o, l), &i)) in outer.iter().zip(listed.iter()).zip(inner).enumerate() {
            if l {
                put(c, o, i);
            }
        }
    }
    Ok((doublets::Csr { offsets, values }, listed_inner_hits))
}

/// Whether each cell is in its outer hit's cell list (the `listed` column of the doublets).
pub fn listed_cells(d: &doublets::Doublets) -> Vec<bool> {
    let mut listed = vec![false; d.cells.len()];
    for &c in &d.outer_hit_of_cell.values {
        listed[c as usize] = true;
    }
    listed
}

/// Stage 2 (`ca_ntuplets`): connect cells, early fishbone, depth-first search, early
/// duplicate removal, late fishbone. Returns the tuples and the CA state (cells alive or
/// killed, and the cells of every tuple).
pub fn stage_ntuplets(
    hits: &HitsView,
    d: doublets::Doublets,
    cfg: &CaConfig,
) -> Result<(ntuplets::Tuples, ntuplets::CaState), TrackError> {
    stage_ntuplets_on(hits, ntuplets::CaState::unconnected(d), cfg)
}

/// [`stage_ntuplets`] on a CA state whose cells are not connected yet (as
/// [`ca_state_from_columns`] makes it).
pub fn stage_ntuplets_on(
    hits: &HitsView,
    mut ca: ntuplets::CaState,
    cfg: &CaConfig,
) -> Result<(ntuplets::Tuples, ntuplets::CaState), TrackError> {
    ntuplets::connect(hits, &mut ca, &cfg.ntuplets);
    if hits.n_hits() > 1 && cfg.ntuplets.early_fishbone {
        ntuplets::fishbone(hits, &mut ca, false);
    }
    let mut tuples = ntuplets::find_ntuplets(&mut ca, &cfg.ntuplets)?;
    ntuplets::early_duplicate_remover(&ca, &mut tuples);
    if hits.n_hits() > 1 && cfg.ntuplets.late_fishbone {
        ntuplets::fishbone(hits, &mut ca, true);
    }
    Ok((tuples, ca))
}

/// Stage 3 (`track_fit`): fits every tuple (Broken Line, or Riemann when configured); the
/// quality is still the tuples' (bad or dup).
pub fn stage_fit(
    hits: &HitsView,
    tuples: &ntuplets::Tuples,
    cfg: &CaConfig,
) -> Result<Tracks, TrackError> {
    check_tuple_hits(tuples, hits.n_hits())?;
    let mut tracks = Tracks::zeroed(tuples, hits.det_index);
    if hits.n_hits() > 0 {
        tracks.stats.n_fitted = fit::fit_tuples(hits, tuples, &cfg.fit, &mut tracks)?;
    }
    Ok(tracks)
}

/// The fits [`stage_fit`] computes for an event, in its order: [`fit::fit_selection`], none
/// for an event without hits.
pub fn fit_jobs(
    hits: &HitsView,
    tuples: &ntuplets::Tuples,
    cfg: &CaConfig,
) -> Result<Vec<fit::FitJob>, TrackError> {
    fit_jobs_of(hits.n_hits(), tuples, cfg)
}

/// [`fit_jobs`] for an event of `n_hits` hits (all the selection reads of them).
pub fn fit_jobs_of(
    n_hits: usize,
    tuples: &ntuplets::Tuples,
    cfg: &CaConfig,
) -> Result<Vec<fit::FitJob>, TrackError> {
    check_tuple_hits(tuples, n_hits)?;
    Ok(if n_hits > 0 {
        fit::fit_selection(tuples, &cfg.fit)
    } else {
        Vec::new()
    })
}

/// Stage 3 with the fits computed elsewhere (the GPU `track_fit`): `fits[k]` holds the
/// values of the fit of `jobs[k]` (the jobs of [`fit_jobs`]); stored as [`stage_fit`]
/// stores its own.
///
/// ```
/// use quiver_reco::tracks::{fit::*, fit_jobs, stage_fit, stage_fit_from, ntuplets::Tuples, testing::*, CaConfig, Quality};
/// let mut b = HitBuilder::new();
/// b.add_helix_barrel(&Helix { pt: 2.0, ..Helix::default() }, &[0, 1, 2, 3]);
/// let (cols, cpe, cfg) = (b.build(), HitBuilder::cpe_params(), CaConfig::default());
/// let hits = cols.view(&cpe);
/// let t = Tuples { offsets: vec![0, 4], hits: vec![0, 1, 2, 3], quality: vec![Quality::Bad], overflow: false };
/// let jobs = fit_jobs(&hits, &t, &cfg).unwrap();
/// let pos: Vec<[f64; 3]> = (0..4).map(|h| [hits.x_global[h] as f64, hits.y_global[h] as f64, hits.z_global[h] as f64]).collect();
/// let ge: Vec<[f32; 6]> = (0..4)
///     .map(|h| hit_global_cov(&cpe.det[hits.det_index[h] as usize].frame, hits.xerr_local[h], hits.yerr_local[h]))
///     .collect();
/// let fits = [FitValues::of(&broken_line_fit(&pos, &ge, cfg.fit.b_field as f64).unwrap(), 4, &cfg.fit)];
/// assert_eq!(stage_fit_from(&hits, &t, &cfg, &jobs, &fits).unwrap(), stage_fit(&hits, &t, &cfg).unwrap());
/// assert!(stage_fit_from(&hits, &t, &cfg, &jobs, &[]).is_err());
/// ```
pub fn stage_fit_from(
    hits: &HitsView,
    tuples: &ntuplets::Tuples,
    cfg: &CaConfig,
    jobs: &[fit::FitJob],
    fits: &[fit::FitValues],
) -> Result<Tracks, TrackError> {
    check_tuple_hits(tuples, hits.n_hits())?;
    if jobs.len() != fits.len() || jobs.iter().any(|j| j.row as usize >= tuples.len()) {
        return Err(TrackError::Invalid(format!(
            "{} fits for {} fit jobs of {} tuples",
            fits.len(),
            jobs.len(),
            tuples.len()
        )));
    }
    let mut tracks = Tracks::zeroed(tuples, hits.det_index);
    for (&job, v) in jobs.iter().zip(fits) {
        fit::store_values(&mut tracks, job.row as usize, v, &cfg.fit);
    }
    tracks.stats.n_fitted = jobs.len() as u32;
    Ok(tracks)
}

/// Every hit of the tuples must be one of the event's `n_hits` (a tuples product from
/// elsewhere, e.g. a Python step, may name others).
pub(crate) fn check_tuple_hits(tuples: &ntuplets::Tuples, n_hits: usize) -> Result<(), TrackError> {
    match tuples.hits.iter().position(|&h| h as usize >= n_hits) {
        Some(i) => Err(TrackError::Invalid(format!(
            "tuple hit {} is not one of the event's {n_hits} hits",
            tuples.hits[i]
        ))),
        None => Ok(()),
    }
}

/// Stage 4 (`track_quality`): classification, fishbone cleaner (with the late fishbone),
/// fast duplicate removal and the triplet cleaner; sets `tracks.quality`.
pub fn stage_quality(
    hits: &HitsView,
    tuples: &ntuplets::Tuples,
    ca: &ntuplets::CaState,
    tracks: &mut Tracks,
    cfg: &CaConfig,
) {
    stage_quality_with(hits, tuples, ca, |c| ca.is_alive(c), tracks, cfg);
}

/// [`stage_quality`] with the cells' alive flags given by `alive` instead of read from
/// `ca.alive` (which may then be empty: [`ca_lists_for_quality`]).
pub fn stage_quality_with(
    hits: &HitsView,
    tuples: &ntuplets::Tuples,
    ca: &ntuplets::CaState,
    alive: impl Fn(usize) -> bool,
    tracks: &mut Tracks,
    cfg: &CaConfig,
) {
    let mut q = tuples.quality.clone();
    quality::classify_tracks(tuples, tracks, &cfg.quality, &mut q);
    if cfg.ntuplets.late_fishbone {
        quality::fishbone_cleaner_with(ca, alive, &mut q);
    }
    quality::fast_duplicate_remover(ca, tracks, &mut q);
    quality::triplet_cleaner(tuples, tracks, hits.n_hits(), &mut q);
    tracks.quality = q.iter().map(|&x| x as u8).collect();
}

/// The CA state the quality stage needs, rebuilt from products: which cells are alive and
/// the cells of every tuple (replayed into the cells' tuple lists as `find_ntuplets` filled
/// them). The cells (carrying only the alive flag) are left out unless the late fishbone
/// is on, their only reader.
pub fn ca_state_for_quality(
    alive: &[bool],
    tuple_cells: &[u32],
    tuple_cell_offsets: &[u32],
    cfg: &CaConfig,
) -> Result<ntuplets::CaState, TrackError> {
    if !cfg.ntuplets.late_fishbone {
        return ca_lists_for_quality(alive.len(), tuple_cells, tuple_cell_offsets, cfg);
    }
    let mut ca = ntuplets::CaState {
        alive: alive.to_vec(),
        tuple_cell_offsets: vec![0],
        ..Default::default()
    };
    ca.replay_tracks(tuple_cells, tuple_cell_offsets, &cfg.ntuplets)?;
    Ok(ca)
}

/// The cells' tuple lists of `n_cells` cells, replayed from the cells of every tuple, in a
/// CA state without cells: what [`stage_quality_with`] needs besides the alive flags.
pub fn ca_lists_for_quality(
    n_cells: usize,
    tuple_cells: &[u32],
    tuple_cell_offsets: &[u32],
    cfg: &CaConfig,
) -> Result<ntuplets::CaState, TrackError> {
    let mut ca = ntuplets::CaState {
        tuple_cell_offsets: vec![0],
        ..Default::default()
    };
    ca.replay_tracks_of(n_cells, tuple_cells, tuple_cell_offsets, &cfg.ntuplets)?;
    Ok(ca)
}

/// Tuples from their columns (as `ca_ntuplets` publishes them).
pub fn tuples_from_columns(
    offsets: &[u32],
    hits: &[u32],
    quality: &[u8],
) -> Result<ntuplets::Tuples, TrackError> {
    if offsets.len() != quality.len() + 1
        || offsets.last().copied().unwrap_or(0) as usize != hits.len()
    {
        return Err(TrackError::Invalid(format!(
            "{} tuple offsets for {} tuples and {} hits",
            offsets.len(),
            quality.len(),
            hits.len()
        )));
    }
    let quality = quality
        .iter()
        .map(|&q| {
            Quality::from_u8(q).ok_or_else(|| TrackError::Invalid(format!("tuple quality {q}")))
        })
        .collect::<Result<_, _>>()?;
    Ok(ntuplets::Tuples {
        offsets: offsets.to_vec(),
        hits: hits.to_vec(),
        quality,
        overflow: false,
    })
}

impl Tracks {
    /// Rows for every tuple with the fit columns zeroed and the hit lists filled.
    fn zeroed(tuples: &ntuplets::Tuples, det_index: &[u16]) -> Self {
        let n = tuples.len();
        let mut t = Tracks {
            quality: tuples.quality.iter().map(|&x| x as u8).collect(),
            pt: vec![0.0; n],
            eta: vec![0.0; n],
            phi: vec![0.0; n],
            tip: vec![0.0; n],
            zip: vec![0.0; n],
            charge: vec![1; n],
            chi2: vec![0.0; n],
            state: vec![[0.0; 5]; n],
            covariance: vec![[0.0; 15]; n],
            n_hits: Vec::with_capacity(n),
            hit_offsets: tuples.offsets.clone(),
            hit_indices: tuples.hits.clone(),
            det_indices: tuples.hits.iter().map(|&h| det_index[h as usize]).collect(),
            stats: TrackStats::default(),
        };
        for i in 0..n {
            t.n_hits.push(tuples.size(i) as u16);
        }
        t
    }
}

#[cfg(test)]
mod tests;
