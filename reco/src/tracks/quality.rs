//! Track classification and duplicate cleaning (ports of `kernel_classifyTracks`,
//! `kernel_fishboneCleaner`, `kernel_fastDuplicateRemover`, `kernel_countHitInTracks` /
//! `kernel_fillHitInTracks` and `kernel_tripletCleaner`, serial loop order).

use super::ntuplets::{CaState, Tuples};
use super::{Quality, TrackError, Tracks};

/// Kinematic region cuts for one tuple length.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegionCuts {
    /// Maximum |tip|, cm.
    pub max_tip: f32,
    /// Minimum pT, GeV.
    pub min_pt: f32,
    /// Maximum |zip|, cm.
    pub max_zip: f32,
}

/// Classification cuts. Defaults are the reference's (`makeQualityCuts`).
#[derive(Clone, Debug, PartialEq)]
pub struct QualityConfig {
    /// Coefficients of the cubic in pT of the χ² cut.
    pub chi2_coeff: [f32; 4],
    /// pT (GeV) above which the χ² cut stays constant. Default 10.
    pub chi2_max_pt: f32,
    /// Scale of the χ² cut (30 for the Broken Line fit). Default 30.
    pub chi2_scale: f32,
    /// Triplets: |tip| < 0.3 cm, pT > 0.5 GeV, |zip| < 12 cm.
    pub triplet: RegionCuts,
    /// Four or more hits: |tip| < 0.5 cm, pT > 0.3 GeV, |zip| < 12 cm.
    pub quadruplet: RegionCuts,
}

impl Default for QualityConfig {
    fn default() -> Self {
        Self {
            chi2_coeff: [
                0.681_777_76f64 as f32,
                0.746_095_77f64 as f32,
                -0.080_354_91f64 as f32,
                0.003_153_99f64 as f32,
            ],
            chi2_max_pt: 10.0,
            chi2_scale: 30.0,
            triplet: RegionCuts {
                max_tip: 0.3,
                min_pt: 0.5,
                max_zip: 12.0,
            },
            quadruplet: RegionCuts {
                max_tip: 0.5,
                min_pt: 0.3,
                max_zip: 12.0,
            },
        }
    }
}

impl QualityConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), TrackError> {
        let all = [
            self.chi2_max_pt,
            self.chi2_scale,
            self.triplet.max_tip,
            self.triplet.min_pt,
            self.triplet.max_zip,
        ]
        .into_iter()
        .chain([
            self.quadruplet.max_tip,
            self.quadruplet.min_pt,
            self.quadruplet.max_zip,
        ])
        .chain(self.chi2_coeff);
        if all.into_iter().any(|x| x.is_nan()) {
            return Err(TrackError::Config("quality: NaN cut".into()));
        }
        Ok(())
    }

    /// The χ² cut for a given pT (compared with 3·χ²/ndof).
    ///
    /// ```
    /// use quiver_reco::tracks::QualityConfig;
    /// let c = QualityConfig::default();
    /// assert_eq!(c.chi2_cut(10.0), c.chi2_cut(100.0));
    /// assert!((c.chi2_cut(1.0) - 40.5).abs() < 0.1);
    /// ```
    pub fn chi2_cut(&self, pt: f32) -> f32 {
        let pt = pt.min(self.chi2_max_pt);
        let c = &self.chi2_coeff;
        self.chi2_scale * (c[0] + pt * (c[1] + pt * (c[2] + pt * c[3])))
    }
}

/// Marks `loose` the fitted, non-duplicate tuples of ≥ 3 hits whose fit is finite, passes the
/// pT-dependent χ² cut and the region cuts. Stops at the first empty tuple, as the reference.
///
/// ```
/// use quiver_reco::tracks::{ntuplets::Tuples, quality::*, Quality, Tracks};
/// let t = Tuples { offsets: vec![0, 3, 6], hits: vec![0, 1, 2, 3, 4, 5],
///                  quality: vec![Quality::Bad; 2], overflow: false };
/// let tracks = Tracks { state: vec![[0.0, 0.01, 1.0, 0.0, 1.0], [0.0, 0.4, 1.0, 0.0, 1.0]],
///     pt: vec![1.0, 1.0], chi2: vec![1.0, 1.0], ..Tracks::default() };
/// let mut q = t.quality.clone();
/// classify_tracks(&t, &tracks, &QualityConfig::default(), &mut q);
/// assert_eq!(q, vec![Quality::Loose, Quality::Bad]); // a triplet needs |tip| < 0.3 cm
/// ```
pub fn classify_tracks(
    tuples: &Tuples,
    tracks: &Tracks,
    cfg: &QualityConfig,
    quality: &mut [Quality],
) {
    for it in 0..tuples.len() {
        let nhits = tuples.size(it);
        if nhits == 0 {
            break;
        }
        if quality[it] == Quality::Dup || nhits < 3 {
            continue;
        }
        if tracks.state[it].iter().any(|x| x.is_nan()) {
            continue;
        }
        if 3.0f32 * tracks.chi2[it] >= cfg.chi2_cut(tracks.pt[it]) {
            continue;
        }
        let region = if nhits > 3 {
            &cfg.quadruplet
        } else {
            &cfg.triplet
        };
        let st = &tracks.state[it];
        if st[1].abs() < region.max_tip
            && tracks.pt[it] > region.min_pt
            && st[4].abs() < region.max_zip
        {
            quality[it] = Quality::Loose;
        }
    }
}

/// With the late fishbone: tuples through a killed cell become bad.
///
/// ```
/// use quiver_reco::tracks::{doublets::*, ntuplets::CaState, quality::fishbone_cleaner, Quality};
/// let cell = Cell { inner: 0, outer: 1, pair: 0, doublet_id: -1 };
/// let mut ca = CaState::new(Doublets { cells: vec![cell], ..Doublets::default() });
/// ca.cell_tracks = Csr::from_lists(&[vec![1]]);
/// let mut q = vec![Quality::Loose; 2];
/// fishbone_cleaner(&ca, &mut q);
/// assert_eq!(q, vec![Quality::Loose, Quality::Bad]);
/// ```
pub fn fishbone_cleaner(ca: &CaState, quality: &mut [Quality]) {
    fishbone_cleaner_with(ca, |c| ca.is_alive(c), quality);
}

/// [`fishbone_cleaner`] with the cells' alive flags given by `alive` (the cells of `ca` are
/// not read): `track_quality` reads them from the `ca_cells` product's packed column. Only
/// the cells carrying a tuple are looked at.
pub fn fishbone_cleaner_with(ca: &CaState, alive: impl Fn(usize) -> bool, quality: &mut [Quality]) {
    for c in ca.cell_tracks.rows_with_at_least(1) {
        if alive(c) {
            continue;
        }
        for &it in ca.cell_tracks.of(c) {
            quality[it as usize] = Quality::Bad;
        }
    }
}

/// Per cell shared by several tuples: keeps the loose one with the smallest |tip| and marks
/// every other non-bad tuple dup.
///
/// ```
/// use quiver_reco::tracks::{doublets::{Csr, Doublets}, ntuplets::CaState, quality::*, Quality, Tracks};
/// let mut ca = CaState::new(Doublets::default());
/// ca.cell_tracks = Csr::from_lists(&[vec![0, 1]]);
/// let tracks = Tracks { state: vec![[0.0, 0.2, 0.0, 0.0, 0.0], [0.0, -0.1, 0.0, 0.0, 0.0]], ..Tracks::default() };
/// let mut q = vec![Quality::Loose; 2];
/// fast_duplicate_remover(&ca, &tracks, &mut q);
/// assert_eq!(q, vec![Quality::Dup, Quality::Loose]);
/// ```
pub fn fast_duplicate_remover(ca: &CaState, tracks: &Tracks, quality: &mut [Quality]) {
    // Only the cells shared by tuples, in cell order (most cells carry none).
    for c in ca.cell_tracks.rows_with_at_least(2) {
        let tr = ca.cell_tracks.of(c);
        let mut mc = 10000.0f32;
        let mut im: u32 = u32::MAX; // "none" (the reference uses 60000 with 16-bit ids)
        for &it in tr {
            let score = tracks.state[it as usize][1].abs();
            if quality[it as usize] == Quality::Loose && score < mc {
                mc = score;
                im = it;
            }
        }
        for &it in tr {
            if quality[it as usize] != Quality::Bad && it != im {
                quality[it as usize] = Quality::Dup;
            }
        }
    }
}

/// Hit → loose tuples map. Each hit's list is in descending tuple order, as the reference's
/// decrementing fill leaves it. Returns (offsets per hit, tuple ids).
///
/// ```
/// use quiver_reco::tracks::{ntuplets::Tuples, quality::hit_to_tuple, Quality};
/// let t = Tuples { offsets: vec![0, 3, 6], hits: vec![0, 1, 2, 0, 3, 4],
///                  quality: vec![Quality::Loose; 2], overflow: false };
/// let (off, ids) = hit_to_tuple(&t, &t.quality, 5);
/// assert_eq!(&ids[off[0] as usize..off[1] as usize], &[1, 0]);
/// ```
pub fn hit_to_tuple(tuples: &Tuples, quality: &[Quality], n_hits: usize) -> (Vec<u32>, Vec<u32>) {
    let mut off = vec![0u32; n_hits + 1];
    for it in 0..tuples.len() {
        if tuples.size(it) == 0 {
            break;
        }
        if quality[it] != Quality::Loose {
            continue;
        }
        for &h in tuples.hits_of(it) {
            off[h as usize] += 1;
        }
    }
    for h in 1..=n_hits {
        off[h] += off[h - 1];
    }
    let mut bins = vec![0u32; off[n_hits] as usize];
    for it in 0..tuples.len() {
        if tuples.size(it) == 0 {
            break;
        }
        if quality[it] != Quality::Loose {
            continue;
        }
        for &h in tuples.hits_of(it) {
            off[h as usize] -= 1;
            bins[off[h as usize] as usize] = it as u32;
        }
    }
    (off, bins)
}

/// For each hit shared by several loose tuples: the shorter tuples become dup; if the longest
/// are triplets, only the non-bad one with the smallest |tip| survives.
///
/// ```
/// use quiver_reco::tracks::{ntuplets::Tuples, quality::triplet_cleaner, Quality, Tracks};
/// let t = Tuples { offsets: vec![0, 3, 7], hits: vec![0, 1, 2, 0, 3, 4, 5],
///                  quality: vec![Quality::Loose; 2], overflow: false };
/// let tracks = Tracks { state: vec![[0.0; 5]; 2], ..Tracks::default() };
/// let mut q = t.quality.clone();
/// triplet_cleaner(&t, &tracks, 6, &mut q);
/// assert_eq!(q, vec![Quality::Dup, Quality::Loose]); // the shorter tuple loses
/// ```
pub fn triplet_cleaner(tuples: &Tuples, tracks: &Tracks, n_hits: usize, quality: &mut [Quality]) {
    let (off, bins) = hit_to_tuple(tuples, quality, n_hits);
    for h in 0..n_hits {
        let list = &bins[off[h] as usize..off[h + 1] as usize];
        if list.len() < 2 {
            continue;
        }
        let max_nh = list
            .iter()
            .map(|&it| tuples.size(it as usize))
            .max()
            .unwrap_or(0);
        for &it in list {
            if tuples.size(it as usize) != max_nh {
                quality[it as usize] = Quality::Dup;
            }
        }
        if max_nh > 3 {
            continue;
        }
        let mut mc = 10000.0f32;
        let mut im: u32 = u32::MAX; // "none" (the reference uses 60000 with 16-bit ids)
        for &it in list {
            let tip = tracks.state[it as usize][1].abs();
            if quality[it as usize] != Quality::Bad && tip < mc {
                mc = tip;
                im = it;
            }
        }
        for &it in list {
            if quality[it as usize] != Quality::Bad && it != im {
                quality[it as usize] = Quality::Dup;
            }
        }
    }
}
