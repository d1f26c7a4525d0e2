//! Cellular automaton: cell connection (RZ alignment + circle DCA), fishbone, depth-first
//! ntuplet search and the early duplicate remover (ports of `kernel_connect`,
//! `gpuPixelDoublets::fishbone`, `kernel_find_ntuplets`/`GPUCACell::find_ntuplets` and
//! `kernel_earlyDuplicateRemover`, serial loop order, f32 arithmetic as in the reference).

use arrow_buffer::ScalarBuffer;

use super::doublets::{Csr, Doublets};
use super::{HitsView, Quality, TrackError};

/// Last detIndex (exclusive) of BPix layer 1.
pub const LAST_BPIX1_DET_INDEX: u16 = 96;
/// Last detIndex (exclusive) of the barrel.
pub const LAST_BARREL_DET_INDEX: u16 = 1184;
/// Recursion depth of the reference's `find_ntuplets<6>`: the longest path the depth-first
/// search follows, in cells.
pub const MAX_DEPTH: usize = 6;

/// Parameters of the CA connection and ntuplet search. Defaults are the reference's
/// (`CAHitNtupletGeneratorOnGPU.cc`, `CAConstants.h`).
#[derive(Clone, Debug, PartialEq)]
pub struct NtupletConfig {
    /// Minimum hits per ntuplet (3 = triplets kept). Default 3.
    pub min_hits_per_ntuplet: u32,
    /// pT (GeV) used to scale the RZ alignment cut. Default 0.9.
    pub ptmin: f32,
    /// RZ alignment cut when the outer cell starts in the barrel. Default 0.002.
    pub ca_theta_cut_barrel: f32,
    /// RZ alignment cut otherwise. Default 0.003.
    pub ca_theta_cut_forward: f32,
    /// Maximum (signed) curvature of the three-hit circle, cm⁻¹. Default 0.0328407224959.
    pub hard_curv_cut: f32,
    /// Maximum transverse DCA to the origin when the triplet starts on BPix1, cm. Default 0.15.
    pub dca_cut_inner_triplet: f32,
    /// Maximum transverse DCA otherwise, cm. Default 0.25.
    pub dca_cut_outer_triplet: f32,
    /// Run the fishbone (on connected cells) before the ntuplet search. Default true.
    pub early_fishbone: bool,
    /// Run the fishbone (on cells with tracks) after the search, and drop the tracks of the
    /// killed cells at classification. Default false.
    pub late_fishbone: bool,
    /// Outer neighbours per cell. Default 36.
    pub max_cell_neighbors: u32,
    /// Tuples per cell. Default 48.
    pub max_cell_tracks: u32,
    /// Cells that may own a neighbour (or track) list, the shared empty list included.
    /// Default 65 536.
    pub max_active_doublets: u32,
    /// Tuple capacity (TrackSoA stride). Default 32 768.
    pub max_tuples: u32,
}

impl Default for NtupletConfig {
    fn default() -> Self {
        Self {
            min_hits_per_ntuplet: 3,
            ptmin: 0.899_999_976_158,
            ca_theta_cut_barrel: 0.002_000_000_094_99,
            ca_theta_cut_forward: 0.003_000_000_026_08,
            hard_curv_cut: 0.032_840_722_495_9,
            dca_cut_inner_triplet: 0.150_000_005_96,
            dca_cut_outer_triplet: 0.25,
            early_fishbone: true,
            late_fishbone: false,
            max_cell_neighbors: 36,
            max_cell_tracks: 48,
            max_active_doublets: 65_536,
            max_tuples: 32_768,
        }
    }
}

impl NtupletConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), TrackError> {
        if self.min_hits_per_ntuplet < 2 {
            return Err(TrackError::Config(
                "ntuplets.min_hits_per_ntuplet must be ≥ 2".into(),
            ));
        }
        if self.max_tuples == 0 {
            return Err(TrackError::Config("ntuplets.max_tuples must be ≥ 1".into()));
        }
        Ok(())
    }
}

/// The CA graph of one event: cells, which cells end on each hit, per-cell outer neighbours
/// and tuples, and the list-capacity bookkeeping of the reference.
#[derive(Clone, Debug, Default)]
pub struct CaState {
    /// Inner hit of each cell, in creation order (a cell's index is its doublet id): the
    /// doublets' column, shared, not copied.
    pub inner: ScalarBuffer<u32>,
    /// Outer hit of each cell.
    pub outer: ScalarBuffer<u32>,
    /// Layer pair of each cell (row of [`super::doublets::LAYER_PAIRS`]).
    pub pair: ScalarBuffer<u8>,
    /// Whether each cell is alive: false once the fishbone killed it (the reference's doublet
    /// id −1). One per cell, so its length is the number of cells; the hit columns may be
    /// empty in a state that only the quality cleaners read.
    pub alive: Vec<bool>,
    /// Cells ending on each hit.
    pub outer_hit_of_cell: Csr,
    /// Outer neighbours of each cell, in connection order (filled by [`connect`]).
    pub neighbors: Csr,
    /// Whether each cell was connected to another by [`connect`] (the reference's "used"
    /// bit); empty before. Kept here rather than in the cells: a byte per cell stays in cache
    /// for the fishbone, which visits the cells out of order, and setting it in the cells
    /// rewrote all of them.
    pub used: Vec<bool>,
    /// Tuples through each cell, in creation order (filled by [`find_ntuplets`] or
    /// [`CaState::replay_tracks`]).
    pub cell_tracks: Csr,
    /// Carried from the doublets (may be empty).
    pub listed_inner_hits: Vec<u32>,
    /// Carried from the doublets.
    pub cells_overflow: bool,
    /// Carried from the doublets.
    pub outer_hit_overflows: u32,
    /// Neighbour insertions that failed.
    pub neighbor_overflows: u32,
    /// Track insertions that failed.
    pub track_overflows: u32,
    /// Tuples found beyond `max_tuples` (not stored).
    pub tuple_overflows: u32,
    /// The cells of every stored tuple, inner to outer (flat; see `tuple_cell_offsets`).
    /// Kept even when an overflow empties the last tuple's hits, so that the tuple lists of
    /// the cells can be rebuilt exactly ([`CaState::replay_tracks`]).
    pub tuple_cells: Vec<u32>,
    /// Offsets into `tuple_cells`, one more than the tuples.
    pub tuple_cell_offsets: Vec<u32>,
}

/// Per-cell lists with the reference's capacities: at most `max_lists` cells may own a list
/// (the shared empty list counts as one, so the count starts at 1) and at most `per_list`
/// entries each. Insertions are decided in call order, as the reference's, and stored as
/// pairs; [`CappedLists::finish`] groups them per cell in that order.
pub(crate) struct CappedLists {
    count: Vec<u32>,
    pairs: Vec<(u32, u32)>,
    n_lists: u32,
    max_lists: u32,
    per_list: u32,
    overflows: u32,
}

impl CappedLists {
    pub(crate) fn new(n_cells: usize, max_lists: u32, per_list: u32) -> Self {
        Self {
            count: vec![0; n_cells],
            pairs: Vec::new(),
            n_lists: 1,
            max_lists,
            per_list,
            overflows: 0,
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, cell: usize, v: u32) {
        let n = self.count[cell];
        if n == 0 {
            if self.n_lists >= self.max_lists {
                self.overflows += 1;
                return;
            }
            self.n_lists += 1;
        }
        if n < self.per_list {
            self.count[cell] = n + 1;
            self.pairs.push((cell as u32, v));
        } else {
            self.overflows += 1;
        }
    }

    /// Asks the CPU to bring the counter of `cell`'s list into cache (a hint: no effect on
    /// the lists).
    #[inline]
    pub(crate) fn prefetch(&self, cell: usize) {
        crate::prefetch(&self.count, cell);
    }

    /// The lists (every pair was accepted, so no capacity applies here) and the overflows.
    pub(crate) fn finish(self) -> (Csr, u32) {
        let n = self.count.len();
        // `offsets[c + 1]` starts as the start of list c and serves as its insertion cursor:
        // once every pair is placed it is the list's end, as it must be (no cursor array
        // copied from the offsets: 0.55 MB per list at <PU> 50). Extended from an exact-size
        // map over the counts, not zeroed and overwritten (the zeroing was a fifth of `finish`).
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0u32);
        let mut acc = 0u32;
        offsets.extend(self.count.iter().map(|&c| {
            let start = acc;
            acc += c;
            start
        }));
        let mut values = vec![0u32; acc as usize];
        for &(c, v) in &self.pairs {
            let k = &mut offsets[c as usize + 1];
            values[*k as usize] = v;
            *k += 1;
        }
        (Csr { offsets, values }, self.overflows)
    }
}

impl CaState {
    /// Whether cell `c` is alive (not killed by the fishbone); a cell the state does not hold
    /// counts as alive, as the cleaners that walk the cells and their lists together treat it.
    pub fn is_alive(&self, c: usize) -> bool {
        self.alive.get(c).is_none_or(|&a| a)
    }

    /// The inner hit of every listed cell, in `outer_hit_of_cell` order: the column the
    /// doublets carry, or (for doublets built without it) gathered from the cells.
    fn listed_inner_hits_or_gathered(&self) -> std::borrow::Cow<'_, [u32]> {
        if self.listed_inner_hits.len() == self.outer_hit_of_cell.values.len() {
            std::borrow::Cow::Borrowed(&self.listed_inner_hits)
        } else {
            self.outer_hit_of_cell
                .values
                .iter()
                .map(|&c| self.inner[c as usize])
                .collect()
        }
    }

    /// The number of cells.
    pub fn n_cells(&self) -> usize {
        self.alive.len()
    }

    /// Wraps the doublets (their cells as columns), with an empty neighbour and tuple list
    /// per cell.
    pub fn new(d: Doublets) -> Self {
        let n = d.cells.len();
        Self {
            neighbors: Csr::empty(n),
            cell_tracks: Csr::empty(n),
            ..Self::unconnected(d)
        }
    }

    /// [`CaState::new`] without the lists, which `connect` and `find_ntuplets` make.
    pub(crate) fn unconnected(d: Doublets) -> Self {
        Self {
            inner: d.cells.iter().map(|c| c.inner).collect(),
            outer: d.cells.iter().map(|c| c.outer).collect(),
            pair: d.cells.iter().map(|c| c.pair).collect(),
            alive: d.cells.iter().map(|c| c.doublet_id >= 0).collect(),
            outer_hit_of_cell: d.outer_hit_of_cell,
            listed_inner_hits: d.listed_inner_hits,
            cells_overflow: d.cells_overflow,
            outer_hit_overflows: d.outer_hit_overflows,
            tuple_cell_offsets: vec![0],
            ..Default::default()
        }
    }

    /// Rebuilds the tuple lists of the cells (`cell_tracks`) from the cells of each tuple,
    /// adding them in the order `find_ntuplets` did, with the same capacities: the state a
    /// later step (the quality cleaners) needs, from products of an earlier one.
    pub fn replay_tracks(
        &mut self,
        tuple_cells: &[u32],
        tuple_cell_offsets: &[u32],
        cfg: &NtupletConfig,
    ) -> Result<(), TrackError> {
        self.replay_tracks_of(self.n_cells(), tuple_cells, tuple_cell_offsets, cfg)
    }

    /// [`CaState::replay_tracks`] for `n_cells` cells (which `cells` may leave out).
    pub fn replay_tracks_of(
        &mut self,
        n_cells: usize,
        tuple_cells: &[u32],
        tuple_cell_offsets: &[u32],
        cfg: &NtupletConfig,
    ) -> Result<(), TrackError> {
        let mut lists = CappedLists::new(n_cells, cfg.max_active_doublets, cfg.max_cell_tracks);
        lists.pairs.reserve(tuple_cells.len());
        for (it, w) in tuple_cell_offsets.windows(2).enumerate() {
            let cells = tuple_cells
                .get(w[0] as usize..w[1] as usize)
                .ok_or_else(|| {
                    TrackError::Invalid(format!(
                        "tuple {it}: cell offsets {}..{} out of range",
                        w[0], w[1]
                    ))
                })?;
            for &c in cells {
                if c as usize >= n_cells {
                    return Err(TrackError::Invalid(format!(
                        "tuple {it}: cell {c} of {n_cells}"
                    )));
                }
                lists.push(c as usize, it as u32);
            }
        }
        let (l, o) = lists.finish();
        self.cell_tracks = l;
        self.track_overflows += o;
        Ok(())
    }
}

/// Tuples of hit indices (the reference's `HitContainer`) with their quality.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tuples {
    /// Offsets into `hits`, len = n_tuples + 1.
    pub offsets: Vec<u32>,
    /// Hit indices, inner to outer.
    pub hits: Vec<u32>,
    /// Quality per tuple (bad when stored, dup after duplicate removal).
    pub quality: Vec<Quality>,
    /// True if more tuples were found than `max_tuples`.
    pub overflow: bool,
}

impl Tuples {
    /// Number of tuples.
    pub fn len(&self) -> usize {
        self.quality.len()
    }
    /// True if there is no tuple.
    pub fn is_empty(&self) -> bool {
        self.quality.is_empty()
    }
    /// Number of hits of tuple `i`.
    pub fn size(&self, i: usize) -> usize {
        (self.offsets[i + 1] - self.offsets[i]) as usize
    }
    /// Hits of tuple `i`.
    pub fn hits_of(&self, i: usize) -> &[u32] {
        &self.hits[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// True if the three points (r, z) are aligned within `theta_cut` (scaled by `ptmin`).
///
/// ```
/// use quiver_reco::tracks::ntuplets::are_aligned_rz;
/// assert!(!are_aligned_rz(2.9, 1.0, 6.8, 2.0, 10.9, 3.0, 0.9, 0.002));
/// assert!(are_aligned_rz(2.9, 1.45, 6.8, 3.4, 10.9, 5.45, 0.9, 0.002));
/// ```
#[inline(always)]
pub fn are_aligned_rz(
    r1: f32,
    z1: f32,
    ri: f32,
    zi: f32,
    ro: f32,
    zo: f32,
    ptmin: f32,
    theta_cut: f32,
) -> bool {
    let radius_diff = (r1 - ro).abs();
    let distance_13_squared = radius_diff * radius_diff + (z1 - zo) * (z1 - zo);
    let p_min = ptmin * distance_13_squared.sqrt();
    let tan_12_13_half_mul_distance_13_squared =
        (z1 * (ri - ro) + zi * (ro - r1) + zo * (r1 - ri)).abs();
    tan_12_13_half_mul_distance_13_squared * p_min <= theta_cut * distance_13_squared * radius_diff
}

/// A circle through three points in the form used by the reference's `CircleEq`: the point
/// (xp, yp) on it, the signed curvature c and the direction cosines (alpha, beta) of the
/// radius at that point, scaled by c.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CircleEq {
    pub xp: f32,
    pub yp: f32,
    pub c: f32,
    pub alpha: f32,
    pub beta: f32,
}

impl CircleEq {
    /// Circle through (x1,y1), (x2,y2), (x3,y3), anchored at the middle point.
    ///
    /// ```
    /// use quiver_reco::tracks::ntuplets::CircleEq;
    /// // Radius-10 circle centred at (0, 10), through the origin: dca 0, |c| = 0.1.
    /// let p = |a: f32| (10.0 * a.sin(), 10.0 - 10.0 * a.cos());
    /// let ((x1, y1), (x2, y2), (x3, y3)) = (p(0.2), p(0.5), p(0.9));
    /// let c = CircleEq::new(x1, y1, x2, y2, x3, y3);
    /// assert!((c.curvature().abs() - 0.1).abs() < 1e-4);
    /// assert!(c.dca0().abs() < 1e-4);
    /// ```
    pub fn new(x1: f32, y1: f32, x2: f32, y2: f32, x3: f32, y3: f32) -> Self {
        // Swap the axes when the chord is closer to x, to keep the determinant well conditioned.
        let noflip = (x3 - x1).abs() < (y3 - y1).abs();
        let x1p = if noflip { x1 - x2 } else { y1 - y2 };
        let y1p = if noflip { y1 - y2 } else { x1 - x2 };
        let d12 = x1p * x1p + y1p * y1p;
        let x3p = if noflip { x3 - x2 } else { y3 - y2 };
        let y3p = if noflip { y3 - y2 } else { x3 - x2 };
        let d32 = x3p * x3p + y3p * y3p;
        let num = x1p * y3p - y1p * x3p;
        let det = d12 * y3p - d32 * y1p;
        let st2 = d12 * x3p - d32 * x1p;
        let seq = det * det + st2 * st2;
        let mut al2 = 1.0f32 / seq.sqrt();
        let be2 = -st2 * al2;
        let ct = 2.0f32 * num * al2;
        al2 *= det;
        Self {
            xp: x2,
            yp: y2,
            c: if noflip { ct } else { -ct },
            alpha: if noflip { al2 } else { -be2 },
            beta: if noflip { be2 } else { -al2 },
        }
    }

    /// Distance of closest approach to the origin times the curvature.
    pub fn dca0(&self) -> f32 {
        let x = self.c * self.xp + self.alpha;
        let y = self.c * self.yp + self.beta;
        (x * x + y * y).sqrt() - 1.0f32
    }

    /// Signed curvature, cm⁻¹.
    pub fn curvature(&self) -> f32 {
        self.c
    }
}

/// Circle cut of a triplet: curvature below `max_curv` and |DCA| below `max_dca`.
#[inline]
fn dca_cut(
    x1: f32,
    y1: f32,
    x2: f32,
    y2: f32,
    x3: f32,
    y3: f32,
    max_dca: f32,
    max_curv: f32,
) -> bool {
    let eq = CircleEq::new(x1, y1, x2, y2, x3, y3);
    if eq.curvature() > max_curv {
        return false;
    }
    eq.dca0().abs() < max_dca * eq.curvature().abs()
}

/// Connects each cell to the cells ending on its inner hit when the triplet passes the RZ
/// alignment and circle cuts (the cell becomes an outer neighbour of the other one).
///
/// ```
/// use quiver_reco::tracks::{doublets::build_doublets, ntuplets::*, testing::*, DoubletConfig};
/// let mut b = HitBuilder::new();
/// b.add_helix_barrel(&Helix::default(), &[0, 1, 2]);
/// let (cols, cpe) = (b.build(), HitBuilder::cpe_params());
/// let hits = cols.view(&cpe);
/// let mut ca = CaState::new(build_doublets(&hits, &DoubletConfig::default(), 19).unwrap());
/// connect(&hits, &mut ca, &NtupletConfig::default());
/// assert_eq!(ca.neighbors.values.len(), 1);
/// ```
pub fn connect(hits: &HitsView, ca: &mut CaState, cfg: &NtupletConfig) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { connect_avx2(hits, ca, cfg) };
    }
    connect_impl(hits, ca, cfg, rz_block, circle_block)
}

/// [`connect`] with the alignment test and the circle test of eight candidates each as one
/// AVX2 operation.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn connect_avx2(hits: &HitsView, ca: &mut CaState, cfg: &NtupletConfig) {
    connect_impl(
        hits,
        ca,
        cfg,
        |r1, z1, t| rz_block_avx2(r1, z1, t),
        |c| circle_block_avx2(c),
    )
}

/// [`connect`] without SIMD dispatch (what a CPU without AVX2 runs).
#[cfg(test)]
pub(crate) fn connect_portable(hits: &HitsView, ca: &mut CaState, cfg: &NtupletConfig) {
    connect_impl(hits, ca, cfg, rz_block, circle_block)
}

/// Pairs between a list counter's prefetch and its use.
const PREFETCH_AHEAD: usize = 8;

/// Candidates whose RZ alignment is tested together.
const LANES: usize = 8;

/// What the RZ alignment test of a cell's candidates shares: the cell's inner (i) and outer
/// (o) hits and the cuts.
#[derive(Clone, Copy)]
struct RzCell {
    ri: f32,
    zi: f32,
    ro: f32,
    zo: f32,
    ptmin: f32,
    theta_cut: f32,
}

/// Bit j set when candidate j (inner hit at `r1[j]`, `z1[j]`) is aligned: [`are_aligned_rz`]
/// lane by lane.
#[inline]
fn rz_block(r1: &[f32; LANES], z1: &[f32; LANES], t: &RzCell) -> u32 {
    let mut pass = [false; LANES];
    for j in 0..LANES {
        pass[j] = are_aligned_rz(r1[j], z1[j], t.ri, t.zi, t.ro, t.zo, t.ptmin, t.theta_cut);
    }
    super::doublets::mask8(&pass)
}

/// [`rz_block`] in AVX2: the same IEEE operations in the same order (no FMA), so the same
/// bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn rz_block_avx2(r1: &[f32; LANES], z1: &[f32; LANES], t: &RzCell) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: both arrays hold 8 f32.
    let (r1, z1) = unsafe { (_mm256_loadu_ps(r1.as_ptr()), _mm256_loadu_ps(z1.as_ptr())) };
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let (ri, zi, ro, zo) = (
        _mm256_set1_ps(t.ri),
        _mm256_set1_ps(t.zi),
        _mm256_set1_ps(t.ro),
        _mm256_set1_ps(t.zo),
    );
    let radius_diff = _mm256_and_ps(_mm256_sub_ps(r1, ro), abs);
    let dz = _mm256_sub_ps(z1, zo);
    let d13_sq = _mm256_add_ps(
        _mm256_mul_ps(radius_diff, radius_diff),
        _mm256_mul_ps(dz, dz),
    );
    let p_min = _mm256_mul_ps(_mm256_set1_ps(t.ptmin), _mm256_sqrt_ps(d13_sq));
    let tan = _mm256_add_ps(
        _mm256_add_ps(
            _mm256_mul_ps(z1, _mm256_set1_ps(t.ri - t.ro)),
            _mm256_mul_ps(zi, _mm256_sub_ps(ro, r1)),
        ),
        _mm256_mul_ps(zo, _mm256_sub_ps(r1, ri)),
    );
    let lhs = _mm256_mul_ps(_mm256_and_ps(tan, abs), p_min);
    let rhs = _mm256_mul_ps(
        _mm256_mul_ps(_mm256_set1_ps(t.theta_cut), d13_sq),
        radius_diff,
    );
    _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(lhs, rhs)) as u32
}

/// The circle tests of eight triplets: candidate inner hit (1), the cell's inner (2) and
/// outer (3) hits, the DCA cut of each and the curvature cut.
#[derive(Clone, Copy, Default)]
struct CircleLanes {
    x1: [f32; LANES],
    y1: [f32; LANES],
    x2: [f32; LANES],
    y2: [f32; LANES],
    x3: [f32; LANES],
    y3: [f32; LANES],
    max_dca: [f32; LANES],
    max_curv: f32,
}

/// Bit j set when triplet j passes [`dca_cut`].
#[inline]
fn circle_block(c: &CircleLanes) -> u32 {
    let mut pass = [false; LANES];
    for j in 0..LANES {
        pass[j] = dca_cut(
            c.x1[j],
            c.y1[j],
            c.x2[j],
            c.y2[j],
            c.x3[j],
            c.y3[j],
            c.max_dca[j],
            c.max_curv,
        );
    }
    super::doublets::mask8(&pass)
}

/// [`circle_block`] in AVX2: [`CircleEq::new`] and [`dca_cut`] lane by lane, the same IEEE
/// operations in the same order (no FMA; the axis swap as a select), so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn circle_block_avx2(c: &CircleLanes) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: every array holds 8 f32.
    let ld = |a: &[f32; LANES]| unsafe { _mm256_loadu_ps(a.as_ptr()) };
    let (x1, y1, x2, y2, x3, y3) = (
        ld(&c.x1),
        ld(&c.y1),
        ld(&c.x2),
        ld(&c.y2),
        ld(&c.x3),
        ld(&c.y3),
    );
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let neg = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
    let sel = |noflip: __m256, a: __m256, b: __m256| _mm256_blendv_ps(b, a, noflip);
    let noflip = _mm256_cmp_ps::<_CMP_LT_OQ>(
        _mm256_and_ps(_mm256_sub_ps(x3, x1), abs),
        _mm256_and_ps(_mm256_sub_ps(y3, y1), abs),
    );
    let (dx1, dy1) = (_mm256_sub_ps(x1, x2), _mm256_sub_ps(y1, y2));
    let (dx3, dy3) = (_mm256_sub_ps(x3, x2), _mm256_sub_ps(y3, y2));
    let x1p = sel(noflip, dx1, dy1);
    let y1p = sel(noflip, dy1, dx1);
    let d12 = _mm256_add_ps(_mm256_mul_ps(x1p, x1p), _mm256_mul_ps(y1p, y1p));
    let x3p = sel(noflip, dx3, dy3);
    let y3p = sel(noflip, dy3, dx3);
    let d32 = _mm256_add_ps(_mm256_mul_ps(x3p, x3p), _mm256_mul_ps(y3p, y3p));
    let num = _mm256_sub_ps(_mm256_mul_ps(x1p, y3p), _mm256_mul_ps(y1p, x3p));
    let det = _mm256_sub_ps(_mm256_mul_ps(d12, y3p), _mm256_mul_ps(d32, y1p));
    let st2 = _mm256_sub_ps(_mm256_mul_ps(d12, x3p), _mm256_mul_ps(d32, x1p));
    let seq = _mm256_add_ps(_mm256_mul_ps(det, det), _mm256_mul_ps(st2, st2));
    let al2 = _mm256_div_ps(_mm256_set1_ps(1.0), _mm256_sqrt_ps(seq));
    let be2 = _mm256_mul_ps(_mm256_xor_ps(st2, neg), al2);
    let ct = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(2.0), num), al2);
    let al2 = _mm256_mul_ps(al2, det);
    let cv = sel(noflip, ct, _mm256_xor_ps(ct, neg));
    let alpha = sel(noflip, al2, _mm256_xor_ps(be2, neg));
    let beta = sel(noflip, be2, _mm256_xor_ps(al2, neg));
    let x = _mm256_add_ps(_mm256_mul_ps(cv, x2), alpha);
    let y = _mm256_add_ps(_mm256_mul_ps(cv, y2), beta);
    let dca0 = _mm256_sub_ps(
        _mm256_sqrt_ps(_mm256_add_ps(_mm256_mul_ps(x, x), _mm256_mul_ps(y, y))),
        _mm256_set1_ps(1.0),
    );
    let too_curved = _mm256_cmp_ps::<_CMP_GT_OQ>(cv, _mm256_set1_ps(c.max_curv));
    let close = _mm256_cmp_ps::<_CMP_LT_OQ>(
        _mm256_and_ps(dca0, abs),
        _mm256_mul_ps(ld(&c.max_dca), _mm256_and_ps(cv, abs)),
    );
    _mm256_movemask_ps(_mm256_andnot_ps(too_curved, close)) as u32
}

#[inline(always)]
fn connect_impl(
    hits: &HitsView,
    ca: &mut CaState,
    cfg: &NtupletConfig,
    block: impl Fn(&[f32; LANES], &[f32; LANES], &RzCell) -> u32,
    circles: impl Fn(&CircleLanes) -> u32,
) {
    let n_cells = ca.inner.len();
    let mut lists = CappedLists::new(n_cells, cfg.max_active_doublets, cfg.max_cell_neighbors);
    let (xg, yg, rg, zg, det) = (
        hits.x_global,
        hits.y_global,
        hits.r_global,
        hits.z_global,
        hits.det_index,
    );
    let ohc = &ca.outer_hit_of_cell;
    // The r and z of the inner hit of every listed cell, in list order, column by column and
    // padded by a block: each list is scanned by every cell starting on its hit, eight
    // candidates at a time (only 1.6 % pass the alignment test).
    let n_listed = ohc.values.len();
    let h1s = ca.listed_inner_hits_or_gathered();
    let (mut r1s, mut z1s) = (
        Vec::with_capacity(n_listed + LANES),
        Vec::with_capacity(n_listed + LANES),
    );
    r1s.extend(h1s.iter().map(|&h| rg[h as usize]));
    z1s.extend(h1s.iter().map(|&h| zg[h as usize]));
    r1s.resize(n_listed + LANES, 0.0);
    z1s.resize(n_listed + LANES, 0.0);
    // `used` flags in a byte per cell while connecting (the candidates' cells are visited
    // out of order: a byte array stays in cache).
    let mut used_flags = vec![false; n_cells];
    // The hits of every cell (columns of one entry per cell, as `CaState` holds them).
    let (inner_of, outer_of) = (&ca.inner[..], &ca.outer[..]);
    // (cell, candidate) pairs aligned in RZ, in the order the cells test them.
    let mut aligned: Vec<(u32, u32)> = Vec::new();
    // (outer neighbour's cell, cell) pairs passing both tests, in the same order.
    let mut connected: Vec<(u32, u32)> = Vec::new();
    for (idx, (&inner, &outer)) in inner_of.iter().zip(outer_of).enumerate() {
        let inner = inner as usize;
        let (k0, k1) = (ohc.offsets[inner] as usize, ohc.offsets[inner + 1] as usize);
        if k0 == k1 {
            // No cell ends on the inner hit (58 % of the cells at ⟨PU⟩ 50): nothing to load.
            // (Finding the others 64 cells at a time without a branch was slower: cells of
            // one inner hit are consecutive, so the branch is well predicted.)
            continue;
        }
        let outer = outer as usize;
        let is_barrel = det[inner] < LAST_BARREL_DET_INDEX;
        let t = RzCell {
            ri: rg[inner],
            zi: zg[inner],
            ro: rg[outer],
            zo: zg[outer],
            ptmin: cfg.ptmin,
            theta_cut: if is_barrel {
                cfg.ca_theta_cut_barrel
            } else {
                cfg.ca_theta_cut_forward
            },
        };
        // Whole blocks over the list and the padding after it (the columns hold a block
        // more than the lists): no bounds check and no lane mask per block; the last
        // block's lanes past the list are masked only when some lane passed.
        let end = k0 + (k1 - k0).next_multiple_of(LANES);
        let blocks = r1s[k0..end]
            .chunks_exact(LANES)
            .zip(z1s[k0..end].chunks_exact(LANES));
        for (b, (r1, z1)) in blocks.enumerate() {
            let mut bits = block(r1.try_into().unwrap(), z1.try_into().unwrap(), &t);
            if bits != 0 {
                let k = k0 + b * LANES;
                if k1 - k < LANES {
                    bits &= (1u32 << (k1 - k)) - 1;
                }
                while bits != 0 {
                    aligned.push((idx as u32, (k + bits.trailing_zeros() as usize) as u32));
                    bits &= bits - 1;
                }
            }
        }
    }
    // The circle test of the aligned triplets, eight at a time, then the neighbour lists in
    // the order of the cells and of their candidates, as one loop testing each in turn
    // would fill them.
    let mut lanes = CircleLanes {
        max_curv: cfg.hard_curv_cut,
        ..Default::default()
    };
    for group in aligned.chunks(LANES) {
        for (j, &(idx, kk)) in group.iter().enumerate() {
            let (inner, outer) = (
                inner_of[idx as usize] as usize,
                outer_of[idx as usize] as usize,
            );
            let oi = h1s[kk as usize] as usize;
            lanes.x1[j] = xg[oi];
            lanes.y1[j] = yg[oi];
            lanes.x2[j] = xg[inner];
            lanes.y2[j] = yg[inner];
            lanes.x3[j] = xg[outer];
            lanes.y3[j] = yg[outer];
            lanes.max_dca[j] = if det[oi] < LAST_BPIX1_DET_INDEX {
                cfg.dca_cut_inner_triplet
            } else {
                cfg.dca_cut_outer_triplet
            };
        }
        let mut bits = circles(&lanes) & ((1u32 << group.len()) - 1);
        while bits != 0 {
            let (idx, kk) = group[bits.trailing_zeros() as usize];
            bits &= bits - 1;
            connected.push((ohc.values[kk as usize], idx));
        }
    }
    // The lists' counters of the cells are read in no order (1.8 MB at ⟨PU⟩ 100): each is
    // asked for a few pairs ahead.
    for (i, &(other, idx)) in connected.iter().enumerate() {
        if let Some(&(ahead, _)) = connected.get(i + PREFETCH_AHEAD) {
            lists.prefetch(ahead as usize);
        }
        lists.push(other as usize, idx);
        used_flags[other as usize] = true;
        used_flags[idx as usize] = true;
    }
    ca.used = used_flags;
    let (l, o) = lists.finish();
    ca.neighbors = l;
    ca.neighbor_overflows += o;
}

/// Fishbone: among the (connected; with `check_track`, track-carrying) cells ending on the
/// same hit whose inner hits lie on different modules but on one line through that hit,
/// kills the one with the farther inner hit (consecutive layers win).
///
/// ```
/// use quiver_reco::tracks::{doublets::build_doublets, ntuplets::*, testing::*, DoubletConfig};
/// // A stiff track: seen from B3 (B4), B1 and B2 (B2 and B3) are collinear, so the jumps
/// // B1→B3 and B2→B4 die.
/// let mut b = HitBuilder::new();
/// b.add_helix_barrel(&Helix { pt: 50.0, ..Helix::default() }, &[0, 1, 2, 3]);
/// let (cols, cpe) = (b.build(), HitBuilder::cpe_params());
/// let hits = cols.view(&cpe);
/// let mut ca = CaState::new(build_doublets(&hits, &DoubletConfig::default(), 19).unwrap());
/// connect(&hits, &mut ca, &NtupletConfig::default());
/// fishbone(&hits, &mut ca, false);
/// let killed: Vec<u8> = (0..ca.n_cells()).filter(|&c| !ca.alive[c]).map(|c| ca.pair[c]).collect();
/// assert_eq!(killed, vec![13, 14]);
/// ```
pub fn fishbone(hits: &HitsView, ca: &mut CaState, check_track: bool) {
    let cap = ca
        .outer_hit_of_cell
        .iter()
        .map(|v| v.len())
        .max()
        .unwrap_or(0);
    let mut x = vec![0f32; cap];
    let mut y = vec![0f32; cap];
    let mut z = vec![0f32; cap];
    let mut n = vec![0f32; cap];
    let mut d = vec![0u16; cap];
    let mut cc = vec![0u32; cap];
    // Before `connect`, no cell is used.
    let unconnected;
    let used: &[bool] = if ca.used.len() == ca.n_cells() {
        &ca.used
    } else {
        unconnected = vec![false; ca.n_cells()];
        &unconnected
    };
    // The inner hit of every listed cell, next to the lists, so that the cells themselves
    // are not visited.
    let ohc = &ca.outer_hit_of_cell;
    let inner_hits = ca.listed_inner_hits_or_gathered();
    let mut killed = Vec::new();
    // Only the hits ending two cells or more, in hit order.
    for idy in ohc.rows_with_at_least(2) {
        let (k0, k1) = (ohc.offsets[idy] as usize, ohc.offsets[idy + 1] as usize);
        // Row idy lists the cells whose outer hit is idy.
        let (xo, yo, zo) = (hits.x_global[idy], hits.y_global[idy], hits.z_global[idy]);
        let mut sg = 0usize;
        for (&ic, &inn) in ohc.values[k0..k1].iter().zip(&inner_hits[k0..k1]) {
            if !used[ic as usize] {
                continue;
            }
            if check_track && ca.cell_tracks.of(ic as usize).is_empty() {
                continue;
            }
            let inn = inn as usize;
            cc[sg] = ic;
            d[sg] = hits.det_index[inn];
            x[sg] = hits.x_global[inn] - xo;
            y[sg] = hits.y_global[inn] - yo;
            z[sg] = hits.z_global[inn] - zo;
            n[sg] = x[sg] * x[sg] + y[sg] * y[sg] + z[sg] * z[sg];
            sg += 1;
        }
        if sg < 2 {
            continue;
        }
        for ic in 0..sg - 1 {
            for jc in ic + 1..sg {
                let cos12 = x[ic] * x[jc] + y[ic] * y[jc] + z[ic] * z[jc];
                if d[ic] != d[jc] && cos12 * cos12 >= 0.99999f32 * n[ic] * n[jc] {
                    if n[ic] > n[jc] {
                        killed.push(cc[ic]);
                        break;
                    } else {
                        killed.push(cc[jc]);
                    }
                }
            }
        }
    }
    for c in killed {
        ca.alive[c as usize] = false;
    }
}

/// Depth-first search from every live cell on a starting pair (ids < 8 or > 12; < 3 when
/// quadruplets are required), following live outer neighbours; each leaf path of at least
/// `min_hits_per_ntuplet − 1` cells becomes a tuple (quality bad).
///
/// ```
/// use quiver_reco::tracks::{doublets::build_doublets, ntuplets::*, testing::*, DoubletConfig};
/// let mut b = HitBuilder::new();
/// b.add_helix_barrel(&Helix::default(), &[0, 1, 2]);
/// let (cols, cpe) = (b.build(), HitBuilder::cpe_params());
/// let hits = cols.view(&cpe);
/// let cfg = NtupletConfig::default();
/// let mut ca = CaState::new(build_doublets(&hits, &DoubletConfig::default(), 19).unwrap());
/// connect(&hits, &mut ca, &cfg);
/// let t = find_ntuplets(&mut ca, &cfg).unwrap();
/// assert_eq!(t.len(), 1);
/// assert_eq!(t.hits_of(0), &[0, 1, 2]);
/// ```
pub fn find_ntuplets(ca: &mut CaState, cfg: &NtupletConfig) -> Result<Tuples, TrackError> {
    let mut t = Tuples {
        offsets: vec![0],
        hits: Vec::new(),
        quality: Vec::new(),
        overflow: false,
    };
    let n_cells = ca.n_cells();
    if [ca.inner.len(), ca.outer.len(), ca.pair.len()] != [n_cells; 3] {
        return Err(TrackError::Invalid(format!(
            "{n_cells} cells but {} inner hits, {} outer hits and {} layer pairs",
            ca.inner.len(),
            ca.outer.len(),
            ca.pair.len()
        )));
    }
    // The starts are found among the neighbour lists' rows, one per cell: a state whose lists
    // do not match its cells (not made by `CaState::new` or `connect`) would visit none.
    if ca.neighbors.rows() != n_cells {
        return Err(TrackError::Invalid(format!(
            "{n_cells} cells but neighbour lists for {}: connect the cells first",
            ca.neighbors.rows()
        )));
    }
    let tuple_cells = std::mem::take(&mut ca.tuple_cells);
    let tuple_cell_offsets = std::mem::take(&mut ca.tuple_cell_offsets);
    let mut search = Search {
        inner: &ca.inner,
        outer: &ca.outer,
        alive: &ca.alive,
        neighbors: &ca.neighbors,
        tracks: CappedLists::new(n_cells, cfg.max_active_doublets, cfg.max_cell_tracks),
        tuple_cells,
        tuple_cell_offsets,
        stack: [0; MAX_DEPTH],
        depth: 0,
        missed_tuples: 0,
        cfg,
    };
    // Most cells have no outer neighbour: their search would end at once with a two-hit
    // path, which is no tuple unless two hits are enough. So unless it is, only the cells
    // with a neighbour are visited (in cell order, as all would be).
    let min_neighbors = (cfg.min_hits_per_ntuplet > 2) as u32;
    for idx in ca.neighbors.rows_with_at_least(min_neighbors) {
        if !ca.alive[idx] {
            continue;
        }
        let pid = ca.pair[idx];
        let doit = if cfg.min_hits_per_ntuplet > 3 {
            pid < 3
        } else {
            !(8..=12).contains(&pid)
        };
        if doit {
            search.depth = 0;
            search.dfs(idx, &mut t)?;
        }
    }
    let (tracks, overflows) = search.tracks.finish();
    ca.tuple_cells = search.tuple_cells;
    ca.tuple_cell_offsets = search.tuple_cell_offsets;
    ca.cell_tracks = tracks;
    ca.track_overflows += overflows;
    ca.tuple_overflows += search.missed_tuples;
    if t.overflow && !t.is_empty() {
        // The reference's overflow finalisation closes the container at the start of its
        // last tuple, which therefore ends up empty.
        let last = t.len() - 1;
        let start = t.offsets[last];
        t.offsets[last + 1] = start;
        t.hits.truncate(start as usize);
    }
    Ok(t)
}

/// State of the depth-first search: the graph (read only), the path so far and what the
/// leaves produce.
struct Search<'a> {
    inner: &'a [u32],
    outer: &'a [u32],
    alive: &'a [bool],
    neighbors: &'a Csr,
    tracks: CappedLists,
    /// Tuples found with the container full.
    missed_tuples: u32,
    tuple_cells: Vec<u32>,
    tuple_cell_offsets: Vec<u32>,
    /// Cells of the current path (doublet ids), `depth` of them.
    stack: [u32; MAX_DEPTH],
    depth: usize,
    cfg: &'a NtupletConfig,
}

impl Search<'_> {
    fn dfs(&mut self, cell: usize, t: &mut Tuples) -> Result<(), TrackError> {
        if self.depth == MAX_DEPTH {
            return Err(TrackError::PathTooLong(MAX_DEPTH));
        }
        debug_assert!(self.alive[cell]);
        self.stack[self.depth] = cell as u32;
        self.depth += 1;
        let mut last = true;
        let neighbors = self.neighbors;
        for &other in neighbors.of(cell) {
            let other = other as usize;
            if !self.alive[other] {
                continue;
            }
            last = false;
            self.dfs(other, t)?;
        }
        if last && self.depth as u32 + 1 >= self.cfg.min_hits_per_ntuplet {
            if t.len() >= self.cfg.max_tuples as usize {
                t.overflow = true;
                self.missed_tuples += 1;
            } else {
                let it = t.len() as u32;
                let path = &self.stack[..self.depth];
                for &c in path {
                    t.hits.push(self.inner[c as usize]);
                }
                t.hits.push(self.outer[cell]);
                t.offsets.push(t.hits.len() as u32);
                t.quality.push(Quality::Bad);
                for &c in path {
                    self.tracks.push(c as usize, it);
                }
                self.tuple_cells.extend_from_slice(path);
                self.tuple_cell_offsets.push(self.tuple_cells.len() as u32);
            }
        }
        self.depth -= 1;
        Ok(())
    }
}

/// For each cell shared by several tuples, marks the tuples shorter than the longest as dup.
///
/// ```
/// use quiver_reco::tracks::{ntuplets::*, doublets::{Csr, Doublets}, Quality};
/// let mut ca = CaState::new(Doublets::default());
/// ca.cell_tracks = Csr::from_lists(&[vec![0, 1]]);
/// let mut t = Tuples { offsets: vec![0, 4, 7], hits: vec![0, 1, 2, 3, 0, 1, 4],
///                      quality: vec![Quality::Bad; 2], overflow: false };
/// early_duplicate_remover(&ca, &mut t);
/// assert_eq!(t.quality, vec![Quality::Bad, Quality::Dup]);
/// ```
pub fn early_duplicate_remover(ca: &CaState, t: &mut Tuples) {
    // Only the cells shared by tuples, in cell order (most cells carry none).
    for c in ca.cell_tracks.rows_with_at_least(2) {
        let tracks = ca.cell_tracks.of(c);
        let max_nh = tracks
            .iter()
            .map(|&it| t.size(it as usize))
            .max()
            .unwrap_or(0);
        for &it in tracks {
            if t.size(it as usize) != max_nh {
                t.quality[it as usize] = Quality::Dup;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::local::test_support::SplitMix;

    fn uniform(rng: &mut SplitMix, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((rng.next() >> 40) as f32 / (1u64 << 24) as f32)
    }

    /// The AVX2 circle test decides every triplet as [`dca_cut`] does, also at the
    /// boundaries of both cuts (set a few ulps around each triplet's own DCA and curvature)
    /// and for degenerate triplets (coincident or collinear hits, zeros).
    #[test]
    fn circle_test_is_the_same_on_every_path() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let mut st = SplitMix(11);
            let (mut n, mut near) = (0usize, 0usize);
            for round in 0..40_000 {
                let mut c = CircleLanes {
                    max_curv: 0.0328,
                    ..Default::default()
                };
                for j in 0..LANES {
                    c.x1[j] = uniform(&mut st, -5.0, 5.0);
                    c.y1[j] = uniform(&mut st, -5.0, 5.0);
                    c.x2[j] = uniform(&mut st, -10.0, 10.0);
                    c.y2[j] = uniform(&mut st, -10.0, 10.0);
                    c.x3[j] = uniform(&mut st, -16.0, 16.0);
                    c.y3[j] = uniform(&mut st, -16.0, 16.0);
                    c.max_dca[j] = if j % 2 == 0 { 0.15 } else { 0.25 };
                    match (round + j) % 11 {
                        0 => (c.x1[j], c.y1[j]) = (c.x2[j], c.y2[j]), // coincident
                        1 => (c.x3[j], c.y3[j]) = (2.0 * c.x2[j], 2.0 * c.y2[j]), // on a line with 0
                        2 => (c.x1[j], c.y1[j], c.x2[j], c.y2[j]) = (0.0, 0.0, 0.0, 0.0),
                        3 => (c.x1[j], c.y1[j]) = (0.5 * c.x2[j], 0.5 * c.y2[j]), // tiny DCA
                        _ => {}
                    }
                }
                // One lane's cuts at its own boundary, nudged by -3..=3 ulps.
                let j = round % LANES;
                let eq = CircleEq::new(c.x1[j], c.y1[j], c.x2[j], c.y2[j], c.x3[j], c.y3[j]);
                let nudge = |v: f32| {
                    let d = (round / LANES) as i64 % 7 - 3;
                    f32::from_bits((v.to_bits() as i64 + d) as u32)
                };
                let mut variants = vec![c];
                let dca = eq.dca0().abs() / eq.curvature().abs();
                if dca.is_finite() && dca > 0.0 && eq.curvature() <= c.max_curv {
                    let mut v = c;
                    v.max_dca[j] = nudge(dca);
                    variants.push(v);
                    near += 1;
                }
                if eq.curvature().is_finite() && eq.curvature() > 0.0 {
                    let mut v = c;
                    v.max_curv = nudge(eq.curvature());
                    v.max_dca = [f32::INFINITY; LANES];
                    variants.push(v);
                    near += 1;
                }
                for v in &variants {
                    // SAFETY: the CPU has AVX2.
                    let fast = unsafe { circle_block_avx2(v) };
                    assert_eq!(
                        fast,
                        circle_block(v),
                        "round {round}: {:?} {:?} {:?} {:?} {:?} {:?} {:?} {}",
                        v.x1,
                        v.y1,
                        v.x2,
                        v.y2,
                        v.x3,
                        v.y3,
                        v.max_dca,
                        v.max_curv
                    );
                    n += 1;
                }
            }
            assert!(
                n > 70_000 && near > 30_000,
                "{n} blocks, {near} at a boundary"
            );
        }
    }

    /// The AVX2 block decides every candidate as the scalar test does, also at the boundary
    /// (where a fused multiply-add or a regrouped product would flip the decision): random
    /// triplets, cuts set a few ulps around each triplet's own boundary, and degenerate
    /// triplets (coincident hits, equal radii, zeros).
    #[test]
    fn rz_alignment_is_the_same_on_every_path() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let mut st = SplitMix(7);
            let (mut n, mut near) = (0usize, 0usize);
            for round in 0..40_000 {
                let t0 = RzCell {
                    ri: uniform(&mut st, 2.0, 16.0),
                    zi: uniform(&mut st, -30.0, 30.0),
                    ro: uniform(&mut st, 4.0, 20.0),
                    zo: uniform(&mut st, -50.0, 50.0),
                    ptmin: 0.9,
                    theta_cut: 0.002,
                };
                let mut r1 = [0f32; LANES];
                let mut z1 = [0f32; LANES];
                for j in 0..LANES {
                    r1[j] = uniform(&mut st, 0.0, 12.0);
                    z1[j] = uniform(&mut st, -30.0, 30.0);
                    match (round + j) % 13 {
                        0 => (r1[j], z1[j]) = (t0.ro, t0.zo), // d13 = 0
                        1 => r1[j] = t0.ro,                   // Δr = 0
                        2 => (r1[j], z1[j]) = (0.0, 0.0),     // padding
                        3 => z1[j] = t0.zi + (t0.zi - t0.zo) * (t0.ri - r1[j]) / (t0.ro - t0.ri), // on the line
                        _ => {}
                    }
                }
                // Cuts at the boundary of lane `round % 8`, nudged by -3..=3 ulps.
                let j = round % LANES;
                let rd = (r1[j] - t0.ro).abs();
                let d13 = rd * rd + (z1[j] - t0.zo) * (z1[j] - t0.zo);
                let tan =
                    (z1[j] * (t0.ri - t0.ro) + t0.zi * (t0.ro - r1[j]) + t0.zo * (r1[j] - t0.ri))
                        .abs();
                let lhs = tan * (t0.ptmin * d13.sqrt());
                let mut theta = lhs / (d13 * rd);
                if theta.is_finite() && theta > 0.0 {
                    let nudge = (round / LANES) as i64 % 7 - 3;
                    theta = f32::from_bits((theta.to_bits() as i64 + nudge) as u32);
                    near += 1;
                } else {
                    theta = 0.002;
                }
                for t in [
                    t0,
                    RzCell {
                        theta_cut: theta,
                        ..t0
                    },
                ] {
                    // SAFETY: the CPU has AVX2.
                    let fast = unsafe { rz_block_avx2(&r1, &z1, &t) };
                    assert_eq!(fast, rz_block(&r1, &z1, &t), "round {round}: {r1:?} {z1:?}");
                    n += 1;
                }
            }
            assert!(
                n == 80_000 && near > 30_000,
                "{n} blocks, {near} at a boundary"
            );
        }
    }
}
