//! Primary vertices from pixel tracks: density clustering, fit, split, sort by Σ pT².
//!
//! Port of the reference `serial` pixel vertex finder (`plugin-PixelVertexFinding`;
//! docs/steps.md, `vertices`): vertices are found along the beam line only, so every `z` here is
//! the track's longitudinal impact point relative to the beam spot (cm).
//!
//! The chain, in the reference's order, for one event:
//! 1. selection: tracks with ≥ 4 hits, quality `loose` and pT ≥ `pt_min`;
//! 2. clustering, by default the Rodriguez–Laio density clustering ([`Clusterizer::Density`]);
//!    DBSCAN and the iterative variant are selectable alternatives;
//! 3. fit with outlier rejection at χ² = 50, split of bad-χ² vertices at 9, re-fit at 5000;
//! 4. Σ pT² per vertex and the ascending sort index.
//!
//! Everything runs in f32 with the reference's order of operations (sequential sums in track
//! order), so results are deterministic and bit-reproducible.
//!
//! # What the output contains
//!
//! The reference product `ZVertexSoA` holds `idv` (per track), `zv`, `wv`, `chi2`, `ptv2`,
//! `ndof`, `sortInd` (per vertex) and `nvFinal`; [`Vertices`] has all of them with only the
//! meaningful entries (no fixed 1024/32768 capacity padding). We add the per-vertex lists of
//! attached tracks (`track_offsets`/`track_indices`, derived from `idv`) and the number of
//! selected tracks `n_selected` (the reference keeps it in its workspace).
//!
//! # Where we differ from the reference
//!
//! Results agreed bit for bit with the reference kernels over 123 events (3 726 vertices, all
//! three clusterizers), checked with `tests::matches_reference_harness` against a harness the
//! developer builds from the reference sources; the harness is not part of this repository.
//! Beyond that:
//! - conditions the reference only `assert`s (or would overflow on) are errors: more than
//!   16 000 selected tracks, 1024 or more proto-vertices, more than 1024 vertices after
//!   splitting, NaN/infinite z or pT or a non-positive variance on a selected track;
//! - the vertex sort is stable (ties by vertex index) where the reference's `std::sort` is not;
//! - `idv` of the slots after the first empty one is −1 (the reference leaves them unset);
//! - a vertex with ≥ 512 ndof is not split (the reference asserts in debug builds and skips it
//!   otherwise).

mod cluster_annealing;
mod cluster_common;
mod cluster_dbscan;
mod cluster_density;
mod cluster_iterative;
mod fit;
mod histogram;
mod load;
mod sort;
mod split;
#[cfg(test)]
mod tests;

/// The codes of [`crate::tracks::Quality`], as the `u8` the `quality` columns hold.
pub use quiver_formats::quality::codes as quality;

/// Most tracks per event (reference `ZVertexSoA::MAXTRACKS`).
pub const MAX_TRACKS: usize = 32 * 1024;
/// Most vertices per event (reference `ZVertexSoA::MAXVTX`).
pub const MAX_VERTICES: usize = 1024;
/// Bins of the clustering's z histogram (1 mm each, ±12.8 cm).
pub const Z_BINS: usize = histogram::NBINS;
/// Most selected tracks the clustering histogram holds (reference: 16 000).
pub const MAX_SELECTED_TRACKS: usize = 16_000;
/// Vertices with this many degrees of freedom or more are never split (reference: 512 tracks).
pub const MAX_SPLIT_TRACKS: usize = 512;

/// `idv` of a track that is not attached to any vertex: not selected, or the event has no vertex.
pub const IDV_UNASSIGNED: i16 = -1;
/// `idv` of a selected track whose density cluster was too sparse to make a vertex (reference 9997).
pub const IDV_NOISE: i16 = 9997;
/// `idv` of a selected track detached from its vertex by a fit's χ² cut (reference 9999).
pub const IDV_DETACHED: i16 = 9999;
/// Working values of the track-to-vertex index above this are markers, not vertices.
pub(crate) const MARKER_LIMIT: i32 = 9990;

/// Which clustering seeds the proto-vertices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Clusterizer {
    /// Rodriguez–Laio density clustering: each track points to its nearest denser neighbour
    /// (the reference default, `useDensity = true`).
    #[default]
    Density,
    /// DBSCAN on the neighbour counts (reference `useDBSCAN`).
    Dbscan,
    /// Iterative min-label propagation among core tracks (reference `useIterative`).
    Iterative,
    /// Deterministic annealing in z with track errors (CMSSW's offline `DAClusterizerInZ`),
    /// parameters in [`VertexConfig::annealing`]; not in the reference pixel vertexer.
    Annealing,
}

pub use cluster_annealing::AnnealingConfig;

/// Parameters of the vertex finder. Defaults are the reference producer's
/// (`PixelVertexProducerCUDA.cc`) and the cuts hard-coded in its `make`.
///
/// The reference's `oneKernel` switch only chooses a GPU launch layout; on CPU the chain is
/// the same, so it has no counterpart here.
#[derive(Debug, Clone, PartialEq)]
pub struct VertexConfig {
    /// Clustering algorithm (default [`Clusterizer::Density`]).
    pub clusterizer: Clusterizer,
    /// Minimum number of neighbours for a track to seed a vertex / be a DBSCAN core (default 2).
    pub min_t: i32,
    /// Largest |Δz| between neighbouring tracks, cm (default 0.07). Must be ≤ 0.1 cm, the
    /// histogram bin width the neighbour search relies on.
    pub eps: f32,
    /// Largest σ(z) of a track that counts neighbours (may seed), cm (default 0.01).
    pub errmax: f32,
    /// Largest Δz²/(σ²ᵢ+σ²ⱼ) between neighbours (default 9).
    pub chi2max: f32,
    /// Minimum track pT, GeV (default 0.5).
    pub pt_min: f32,
    /// Minimum number of hits of a selected track (default 4: no triplets).
    pub min_hits: u16,
    /// Outlier cut (track χ² to its vertex) of the first fit (default 50).
    pub fit_chi2_max_first: f32,
    /// A vertex is split when χ² ≥ this × ndof (default 9).
    pub split_chi2_max: f32,
    /// Outlier cut of the final fit (default 5000).
    pub fit_chi2_max_final: f32,
    /// Track slots per event accepted (the reference's `MAX_TRACKS`, 32 768); more is an
    /// error. `usize::MAX` with sized capacities.
    pub max_tracks: usize,
    /// Parameters of [`Clusterizer::Annealing`] (unused by the other clusterings).
    pub annealing: AnnealingConfig,
}

impl Default for VertexConfig {
    fn default() -> Self {
        Self {
            clusterizer: Clusterizer::Density,
            min_t: 2,
            eps: 0.07,
            errmax: 0.01,
            chi2max: 9.0,
            pt_min: 0.5,
            min_hits: 4,
            fit_chi2_max_first: 50.0,
            split_chi2_max: 9.0,
            fit_chi2_max_final: 5000.0,
            max_tracks: MAX_TRACKS,
            annealing: AnnealingConfig::default(),
        }
    }
}

impl VertexConfig {
    /// Checks that every parameter is usable (finite, in range).
    ///
    /// ```
    /// use quiver_reco::vertices::VertexConfig;
    /// assert!(VertexConfig::default().validate().is_ok());
    /// assert!(VertexConfig { eps: 0.5, ..VertexConfig::default() }.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), VertexError> {
        let bad = |what: String| Err(VertexError::InvalidConfig(what));
        if !(self.eps > 0.0 && self.eps <= 0.1) {
            return bad(format!("eps = {} cm must be in (0, 0.1]", self.eps));
        }
        if !(self.errmax.is_finite() && self.errmax >= 0.0) {
            return bad(format!(
                "errmax = {} cm must be finite and ≥ 0",
                self.errmax
            ));
        }
        if !(self.chi2max.is_finite() && self.chi2max > 0.0) {
            return bad(format!("chi2max = {} must be finite and > 0", self.chi2max));
        }
        if self.min_t < 0 {
            return bad(format!("min_t = {} must be ≥ 0", self.min_t));
        }
        if !self.pt_min.is_finite() {
            return bad(format!("pt_min = {} GeV must be finite", self.pt_min));
        }
        for (name, v) in [
            ("fit_chi2_max_first", self.fit_chi2_max_first),
            ("split_chi2_max", self.split_chi2_max),
            ("fit_chi2_max_final", self.fit_chi2_max_final),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("{name} = {v} must be finite and > 0"));
            }
        }
        self.annealing
            .validate()
            .map_err(VertexError::InvalidConfig)
    }
}

/// The track columns of one event, one entry per track slot (the track finder's order).
#[derive(Debug, Clone, Copy)]
pub struct TracksView<'a> {
    /// Longitudinal impact point relative to the beam spot, cm.
    pub zip: &'a [f32],
    /// Variance of `zip` (fit covariance element 14), cm².
    pub cov_zip: &'a [f32],
    /// Transverse momentum, GeV.
    pub pt: &'a [f32],
    /// Track quality, see [`quality`].
    pub quality: &'a [u8],
    /// Number of hits; the first slot with 0 ends the track list (reference guard).
    pub n_hits: &'a [u16],
}

impl<'a> TracksView<'a> {
    /// Bundles the columns, checking that they have the same length (≤ [`MAX_TRACKS`]).
    ///
    /// ```
    /// use quiver_reco::vertices::{TracksView, VertexError};
    /// let ok = TracksView::new(&[0.1], &[1e-4], &[1.0], &[2], &[4]);
    /// assert!(ok.is_ok());
    /// let bad = TracksView::new(&[0.1, 0.2], &[1e-4], &[1.0], &[2], &[4]);
    /// assert!(matches!(bad, Err(VertexError::LengthMismatch { .. })));
    /// ```
    pub fn new(
        zip: &'a [f32],
        cov_zip: &'a [f32],
        pt: &'a [f32],
        quality: &'a [u8],
        n_hits: &'a [u16],
    ) -> Result<Self, VertexError> {
        let view = Self {
            zip,
            cov_zip,
            pt,
            quality,
            n_hits,
        };
        view.validate()?;
        Ok(view)
    }

    /// [`TracksView::new`] without the [`MAX_TRACKS`] capacity (for sized capacities; the
    /// clustering then checks [`VertexConfig::max_tracks`]).
    pub fn new_unbounded(
        zip: &'a [f32],
        cov_zip: &'a [f32],
        pt: &'a [f32],
        quality: &'a [u8],
        n_hits: &'a [u16],
    ) -> Result<Self, VertexError> {
        let view = Self {
            zip,
            cov_zip,
            pt,
            quality,
            n_hits,
        };
        view.validate_max(usize::MAX)?;
        Ok(view)
    }

    /// Number of track slots.
    pub fn len(&self) -> usize {
        self.zip.len()
    }

    /// True when there are no track slots.
    pub fn is_empty(&self) -> bool {
        self.zip.is_empty()
    }

    /// Checks that all columns have the same length, at most [`MAX_TRACKS`].
    pub fn validate(&self) -> Result<(), VertexError> {
        self.validate_max(MAX_TRACKS)
    }

    /// Checks that all columns have the same length, at most `max_tracks`.
    pub fn validate_max(&self, max_tracks: usize) -> Result<(), VertexError> {
        let n = self.zip.len();
        if [
            self.cov_zip.len(),
            self.pt.len(),
            self.quality.len(),
            self.n_hits.len(),
        ]
        .iter()
        .any(|&l| l != n)
        {
            return Err(VertexError::LengthMismatch {
                zip: n,
                cov_zip: self.cov_zip.len(),
                pt: self.pt.len(),
                quality: self.quality.len(),
                n_hits: self.n_hits.len(),
            });
        }
        if n > max_tracks {
            return Err(VertexError::TooManyTracks { n, max: max_tracks });
        }
        Ok(())
    }
}

/// The vertices of one event (the reference `ZVertexSoA`, without capacity padding, plus the
/// per-vertex track lists). Per-vertex columns have `nv_final` entries.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Vertices {
    /// Number of vertices.
    pub nv_final: u32,
    /// Vertex z relative to the beam spot, cm. NaN for a vertex that lost all its tracks to
    /// the first fit's outlier cut (as the reference).
    pub zv: Vec<f32>,
    /// Vertex weight 1/σ²(z), cm⁻², scaled by ndof/χ² when ndof > 0 (so +∞ in the degenerate
    /// case χ² = 0 with ndof > 0, as the reference).
    pub wv: Vec<f32>,
    /// Σ over attached tracks of (z_v − z_t)²/σ²_t.
    pub chi2: Vec<f32>,
    /// Attached tracks − 1 (−1 for a vertex without tracks).
    pub ndof: Vec<i32>,
    /// Σ pT² of the attached tracks, GeV².
    pub ptv2: Vec<f32>,
    /// Vertex indices in ascending `ptv2` (the leading vertex is last); ties keep index order.
    pub sort_ind: Vec<u16>,
    /// Per input track slot: vertex index, [`IDV_NOISE`], [`IDV_DETACHED`] or
    /// [`IDV_UNASSIGNED`] (not selected, or no vertex in the event: then all are unassigned).
    pub idv: Vec<i16>,
    /// Offsets into `track_indices` per vertex (`nv_final + 1` entries). Added by Quiver.
    pub track_offsets: Vec<u32>,
    /// Input track indices attached to each vertex, ascending within a vertex. Added by Quiver.
    pub track_indices: Vec<u32>,
    /// Number of tracks that passed the selection. Added by Quiver.
    pub n_selected: u32,
}

impl Vertices {
    /// Input track indices attached to vertex `v`, `None` if `v >= nv_final`.
    pub fn tracks_of(&self, v: usize) -> Option<&[u32]> {
        let (a, b) = (*self.track_offsets.get(v)?, *self.track_offsets.get(v + 1)?);
        self.track_indices.get(a as usize..b as usize)
    }
}

/// What can go wrong in the vertex finder.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VertexError {
    /// The track columns do not have the same length.
    #[error(
        "track columns differ in length: zip {zip}, cov_zip {cov_zip}, pt {pt}, quality {quality}, n_hits {n_hits}"
    )]
    LengthMismatch {
        zip: usize,
        cov_zip: usize,
        pt: usize,
        quality: usize,
        n_hits: usize,
    },
    /// More track slots than the product capacity.
    #[error("{n} track slots exceed the capacity of {max} per event")]
    TooManyTracks { n: usize, max: usize },
    /// More selected tracks than the clustering histogram holds.
    #[error("{n} selected tracks exceed the vertex histogram capacity of {max}")]
    TooManySelectedTracks { n: usize, max: usize },
    /// A selected track has values the algorithm cannot use.
    #[error("track {index}: {what}")]
    InvalidTrack { index: usize, what: String },
    /// More vertices than the product capacity.
    #[error("{n} vertices exceed the capacity of {max} per event")]
    TooManyVertices { n: usize, max: usize },
    /// A configuration parameter is out of range.
    #[error("invalid vertex finder configuration: {0}")]
    InvalidConfig(String),
}

/// Finds the primary vertices of one event.
///
/// ```
/// use quiver_reco::vertices::{find_vertices, quality, TracksView, VertexConfig};
/// // Two groups of three tracks 2 cm apart, σ(z) = 50 µm, and one low-pT track.
/// let zip = [1.0, 1.004, 0.996, -1.0, -1.003, -0.998, 5.0];
/// let cov = [25e-6f32; 7];
/// let pt = [2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.3];
/// let q = [quality::LOOSE; 7];
/// let hits = [4u16; 7];
/// let tracks = TracksView::new(&zip, &cov, &pt, &q, &hits).unwrap();
/// let v = find_vertices(&tracks, &VertexConfig::default()).unwrap();
/// assert_eq!(v.nv_final, 2);
/// assert_eq!(v.idv[6], -1); // below pt_min
/// let lead = v.sort_ind[1] as usize; // ascending Σ pT²
/// assert!((v.zv[lead] - 1.0).abs() < 0.01);
/// assert_eq!(v.tracks_of(lead), Some(&[0u32, 1, 2][..]));
/// ```
pub fn find_vertices(tracks: &TracksView, cfg: &VertexConfig) -> Result<Vertices, VertexError> {
    let sel = select_tracks(tracks, cfg)?;
    let chain = run_chain(&sel.zt, &sel.ezt2, &sel.ptt2, cfg)?;
    Ok(vertices_from(tracks.len(), &sel, chain.into()))
}

/// The vertex finder's first stage: the parameters and columns checked, the tracks selected
/// (≥ `min_hits` hits, `loose`, pT ≥ `pt_min`, stopping at the first empty slot), with the
/// errors of [`find_vertices`].
///
/// ```
/// use quiver_reco::vertices::{quality, select_tracks, TracksView, VertexConfig};
/// let t = TracksView::new(&[0.1, 0.2], &[1e-4; 2], &[1.0, 0.2], &[quality::LOOSE; 2], &[4, 4]).unwrap();
/// let s = select_tracks(&t, &VertexConfig::default()).unwrap();
/// assert_eq!((s.itrk, s.zt), (vec![0], vec![0.1])); // the second is below pt_min
/// ```
pub fn select_tracks(tracks: &TracksView, cfg: &VertexConfig) -> Result<Selected, VertexError> {
    cfg.validate()?;
    tracks.validate_max(cfg.max_tracks)?;
    load::load_tracks(tracks, cfg.pt_min, cfg.min_hits)
}

pub use load::Selected;

/// What the finder computes on the selected tracks (by [`find_vertices`] on the CPU, or a
/// GPU implementation): per selected track its vertex or marker (`iv`), per vertex the fit
/// (`zv`, `wv`, `chi2`, `ndof`) and Σ pT² (`ptv2`), and the ascending Σ pT² order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChainResult {
    pub iv: Vec<i32>,
    pub zv: Vec<f32>,
    pub wv: Vec<f32>,
    pub chi2: Vec<f32>,
    pub ndof: Vec<i32>,
    pub ptv2: Vec<f32>,
    pub sort_ind: Vec<u16>,
}

impl From<Chain> for ChainResult {
    fn from(c: Chain) -> Self {
        ChainResult {
            iv: c.iv,
            zv: c.fit.zv,
            wv: c.fit.wv,
            chi2: c.fit.chi2,
            ndof: c.fit.ndof,
            ptv2: c.sorted.ptv2,
            sort_ind: c.sorted.sort_ind,
        }
    }
}

/// The vertices of an event of `n_slots` track slots from its selected tracks and the
/// finder's results on them: the per-slot `idv` and the per-vertex track lists.
///
/// ```
/// use quiver_reco::vertices::{vertices_from, ChainResult, Selected};
/// let sel = Selected { itrk: vec![0, 2], zt: vec![0.1, 0.1], ezt2: vec![1e-4; 2], ptt2: vec![1.0; 2] };
/// let r = ChainResult { iv: vec![0, 9997], zv: vec![0.1], wv: vec![1e4], chi2: vec![0.0], ndof: vec![0],
///     ptv2: vec![1.0], sort_ind: vec![0] };
/// let v = vertices_from(3, &sel, r);
/// assert_eq!((&v.idv, v.tracks_of(0)), (&vec![0, -1, 9997], Some(&[0u32][..])));
/// ```
pub fn vertices_from(n_slots: usize, sel: &Selected, r: ChainResult) -> Vertices {
    let nv = r.zv.len();
    let iv = r.iv;
    // Per-track vertex index: filled only when the event has a vertex (as the reference).
    let mut idv = vec![IDV_UNASSIGNED; n_slots];
    if nv > 0 {
        for (k, &orig) in sel.itrk.iter().enumerate() {
            // Vertex indices are < 1024 and markers are 9997/9999: all fit in i16.
            idv[orig as usize] = iv[k] as i16;
        }
    }
    let mut counts = vec![0u32; nv + 1];
    for &v in &idv {
        if v >= 0 && (v as usize) < nv {
            counts[v as usize + 1] += 1;
        }
    }
    for v in 0..nv {
        counts[v + 1] += counts[v];
    }
    let track_offsets = counts;
    let mut cursor = track_offsets[..nv].to_vec();
    let mut track_indices = vec![0u32; track_offsets[nv] as usize];
    for (t, &v) in idv.iter().enumerate() {
        if v >= 0 && (v as usize) < nv {
            track_indices[cursor[v as usize] as usize] = t as u32;
            cursor[v as usize] += 1;
        }
    }

    Vertices {
        nv_final: nv as u32,
        zv: r.zv,
        wv: r.wv,
        chi2: r.chi2,
        ndof: r.ndof,
        ptv2: r.ptv2,
        sort_ind: r.sort_ind,
        idv,
        track_offsets,
        track_indices,
        n_selected: sel.zt.len() as u32,
    }
}

/// The algorithm proper on the selected tracks' columns, in the reference's order.
pub(crate) struct Chain {
    /// Vertex index or marker per selected track.
    pub iv: Vec<i32>,
    pub fit: fit::VertexFit,
    pub sorted: sort::Sorted,
    #[cfg_attr(not(test), allow(dead_code))]
    pub nv: usize,
    /// Proto-vertices from the clustering (before splits); used by the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub n_proto: u32,
}

pub(crate) fn run_chain(
    zt: &[f32],
    ezt2: &[f32],
    ptt2: &[f32],
    cfg: &VertexConfig,
) -> Result<Chain, VertexError> {
    let params = cluster_common::ClusterParams {
        min_t: cfg.min_t,
        eps: cfg.eps,
        errmax: cfg.errmax,
        chi2max: cfg.chi2max,
    };
    let clusters = match cfg.clusterizer {
        Clusterizer::Density => cluster_density::cluster_by_density(zt, ezt2, &params)?,
        Clusterizer::Dbscan => cluster_dbscan::cluster_dbscan(zt, ezt2, &params)?,
        Clusterizer::Iterative => cluster_iterative::cluster_iterative(zt, ezt2, &params)?,
        Clusterizer::Annealing => cluster_annealing::cluster_annealing(zt, ezt2, &cfg.annealing)?,
    };
    let mut iv = clusters.iv;
    let clusters_n = clusters.n_clusters;
    let mut nv_intermediate = clusters_n;
    let mut fitv = fit::VertexFit::default();
    fit::fit_vertices(
        zt,
        ezt2,
        &mut iv,
        nv_intermediate,
        cfg.fit_chi2_max_first,
        &mut fitv,
    );
    // After annealing the split never fired on 60 ⟨PU⟩ 50 events (identical results): the
    // annealing has already split everything the two-means would.
    if cfg.clusterizer != Clusterizer::Annealing {
        split::split_vertices(
            zt,
            ezt2,
            &mut iv,
            &fitv,
            cfg.split_chi2_max,
            &mut nv_intermediate,
        )?;
    }
    fit::fit_vertices(
        zt,
        ezt2,
        &mut iv,
        nv_intermediate,
        cfg.fit_chi2_max_final,
        &mut fitv,
    );
    let nv = nv_intermediate as usize;
    let sorted = sort::sort_by_pt2(ptt2, &iv, nv);
    Ok(Chain {
        iv,
        fit: fitv,
        sorted,
        nv,
        n_proto: clusters_n,
    })
}

/// Runs [`find_vertices`] on many events in parallel (rayon), results in event order.
/// On failure, the error of the lowest-numbered failing event is returned with its index.
///
/// ```
/// use quiver_reco::vertices::{find_vertices_events, TracksView, VertexConfig};
/// let (z, cov, pt, q, hits) = ([0.0f32, 0.001, 0.002], [1e-5f32; 3], [1.0f32; 3], [2u8; 3], [4u16; 3]);
/// let ev = TracksView::new(&z, &cov, &pt, &q, &hits).unwrap();
/// let empty = TracksView::new(&[], &[], &[], &[], &[]).unwrap();
/// let out = find_vertices_events(&[ev, empty], &VertexConfig::default()).unwrap();
/// assert_eq!((out[0].nv_final, out[1].nv_final), (1, 0));
/// ```
pub fn find_vertices_events(
    events: &[TracksView],
    cfg: &VertexConfig,
) -> Result<Vec<Vertices>, (usize, VertexError)> {
    use rayon::prelude::*;
    let results: Vec<Result<Vertices, VertexError>> =
        events.par_iter().map(|t| find_vertices(t, cfg)).collect();
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.map_err(|e| (i, e)))
        .collect()
}
