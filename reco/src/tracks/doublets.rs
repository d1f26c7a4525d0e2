//! CA doublets: φ binning of the hits of each layer and the layer-pair doublet search
//! (port of the reference's `doubletsFromHisto`, serial loop order).
//!
//! The order in which cells are created matters downstream (neighbour lists, tuple ids), so
//! the loops follow the reference exactly: pairs in table order, inner hits in hit order,
//! outer φ bins from low to high with wrap-around, and inside a bin the hits in the order the
//! reference's histogram stores them (descending hit index, because its fill decrements).

use super::{HitsView, TrackError};

/// Number of layer pairs in the table (13 standard + 2 jumping barrel + 4 jumping forward).
pub const N_PAIRS: usize = 19;

/// Inner and outer layer of each pair (0..3 = BPix1..4, 4..6 = FPix+1..3, 7..9 = FPix−1..3).
pub const LAYER_PAIRS: [(u8, u8); N_PAIRS] = [
    (0, 1),
    (0, 4),
    (0, 7),
    (1, 2),
    (1, 4),
    (1, 7),
    (4, 5),
    (7, 8),
    (2, 3),
    (2, 4),
    (2, 7),
    (5, 6),
    (8, 9),
    (0, 2),
    (1, 3),
    (0, 5),
    (0, 8),
    (4, 6),
    (7, 9),
];

/// Number of φ bins per layer of the hit binner.
pub const PHI_BINS: usize = 128;
/// Number of layers binned.
pub const N_LAYERS: usize = 10;

/// int16 φ windows: `round(Δφ·32768/π)` for 0.05, 0.06, 0.07 rad.
const PHI_0P05: i16 = 522;
const PHI_0P06: i16 = 626;
const PHI_0P07: i16 = 730;

/// Parameters of the doublet search. Defaults are the reference's (`gpuPixelDoublets.h`,
/// `gpuPixelDoubletsAlgos.h`, `CAHitNtupletGeneratorOnGPU.cc`).
#[derive(Clone, Debug, PartialEq)]
pub struct DoubletConfig {
    /// Build the 4 jumping forward pairs (ids 15..18). Default true.
    pub include_jumping_forward_doublets: bool,
    /// Treat every ladder as an "outer" ladder for the inner-hit cluster-size cut. Default true.
    pub ideal_conditions: bool,
    /// Apply the cluster y-size cuts. Default true.
    pub do_cluster_cut: bool,
    /// Apply the |z at r=0| cut. Default true.
    pub do_z0_cut: bool,
    /// Apply the minimum-pT (maximum Δφ for the radii) cut. Default true.
    pub do_pt_cut: bool,
    /// Maximum number of cells (doublets) per event. Default 458 752.
    pub max_number_of_doublets: u32,
    /// Maximum number of cells ending on one hit; extra cells are created but not listed
    /// there (they can then have no inner neighbour). Default 128.
    pub max_cells_per_hit: u32,
    /// Hits per event accepted (the reference's 16-bit hit containers); more is an error.
    /// Default 49 152 ([`crate::tracks::MAX_HITS`]).
    pub max_hits: usize,
    /// Maximum |z| of the doublet line at r = 0, cm. Default 12.
    pub z0_cut: f32,
    /// pT of the loosest circle allowed by the pT cut, GeV. Default 0.5.
    pub hard_pt_cut: f32,
    /// Radius (cm) of a 1 GeV track in the reference field, used by the pT cut. Default 87.78.
    pub radius_per_gev: f32,
    /// Minimum inner y-size (1/8 px) for B1→FPix pairs. Default 36.
    pub min_ysize_b1: i32,
    /// Minimum inner y-size (1/8 px) for B2→FPix pairs. Default 28.
    pub min_ysize_b2: i32,
    /// Maximum |Δ y-size| (1/8 px) for barrel pairs starting on B1. Default 28.
    pub max_dysize_12: i32,
    /// Maximum |Δ y-size| (1/8 px) for other barrel pairs. Default 20.
    pub max_dysize: i32,
    /// Maximum |y-size − predicted| (1/8 px) for barrel→forward pairs. Default 20.
    pub max_dy_pred: i32,
    /// Maximum |Δφ| per pair, int16 φ units (π ↔ 32768).
    pub phi_cuts: [i16; N_PAIRS],
    /// Inner-hit z window per pair, cm (beam-spot subtracted).
    pub min_z: [f32; N_PAIRS],
    /// Inner-hit z window per pair, cm.
    pub max_z: [f32; N_PAIRS],
    /// Maximum r_out − r_in per pair, cm (z0 cut only).
    pub max_r: [f32; N_PAIRS],
}

impl Default for DoubletConfig {
    fn default() -> Self {
        Self {
            include_jumping_forward_doublets: true,
            ideal_conditions: true,
            do_cluster_cut: true,
            do_z0_cut: true,
            do_pt_cut: true,
            max_number_of_doublets: 458_752,
            max_cells_per_hit: 128,
            max_hits: crate::tracks::MAX_HITS,
            z0_cut: 12.0,
            hard_pt_cut: 0.5,
            radius_per_gev: 87.78,
            min_ysize_b1: 36,
            min_ysize_b2: 28,
            max_dysize_12: 28,
            max_dysize: 20,
            max_dy_pred: 20,
            phi_cuts: [
                PHI_0P05, PHI_0P07, PHI_0P07, PHI_0P05, PHI_0P06, PHI_0P06, PHI_0P05, PHI_0P05,
                PHI_0P06, PHI_0P06, PHI_0P06, PHI_0P05, PHI_0P05, PHI_0P05, PHI_0P05, PHI_0P05,
                PHI_0P05, PHI_0P05, PHI_0P05,
            ],
            min_z: [
                -20., 0., -30., -22., 10., -30., -70., -70., -22., 15., -30., -70., -70., -20.,
                -22., 0., -30., -70., -70.,
            ],
            max_z: [
                20., 30., 0., 22., 30., -10., 70., 70., 22., 30., -15., 70., 70., 20., 22., 30.,
                0., 70., 70.,
            ],
            max_r: [
                20., 9., 9., 20., 7., 7., 5., 5., 20., 6., 6., 5., 5., 20., 20., 9., 9., 9., 9.,
            ],
        }
    }
}

impl DoubletConfig {
    /// Checks the parameters that could make the search meaningless.
    pub fn validate(&self) -> Result<(), TrackError> {
        if self.max_cells_per_hit == 0 {
            return Err(TrackError::Config(
                "doublets.max_cells_per_hit must be > 0".into(),
            ));
        }
        if self.phi_cuts.iter().any(|&c| c < 0) {
            return Err(TrackError::Config("doublets.phi_cuts must be ≥ 0".into()));
        }
        if !(self.hard_pt_cut.is_finite()
            && self.radius_per_gev.is_finite()
            && self.z0_cut.is_finite())
        {
            return Err(TrackError::Config("doublets: non-finite cut".into()));
        }
        Ok(())
    }

    /// The constants the doublet search derives from these parameters, computed once, in
    /// the reference's precision (the CPU search and the CUDA kernel both read them).
    ///
    /// ```
    /// use quiver_reco::tracks::doublets::DoubletConfig;
    /// let c = DoubletConfig::default().cuts();
    /// assert_eq!(c.min_radius2_t4, 4.0 * (0.5f32 * 87.78) * (0.5f32 * 87.78));
    /// assert_eq!((c.pairs[0].inner, c.pairs[0].outer, c.pairs[0].max_dysize), (0, 1, 28));
    /// assert!(c.pairs[1].forward_size_cut && c.pairs[1].min_ysize == 36);
    /// ```
    pub fn cuts(&self) -> DoubletCuts {
        let min_radius: f32 = self.hard_pt_cut * self.radius_per_gev;
        let pairs = std::array::from_fn(|p| {
            let (inner, outer) = LAYER_PAIRS[p];
            PairCuts {
                inner,
                outer,
                phi_cut: self.phi_cuts[p],
                min_z: self.min_z[p],
                max_z: self.max_z[p],
                max_r: self.max_r[p],
                max_dysize: if inner == 0 {
                    self.max_dysize_12
                } else {
                    self.max_dysize
                },
                barrel_size_cut: self.do_cluster_cut && outer < 4,
                forward_size_cut: self.do_cluster_cut && outer >= 4 && inner < 4,
                min_ysize: match (inner, outer > 3) {
                    (0, true) => self.min_ysize_b1,
                    (1, true) => self.min_ysize_b2,
                    _ => i32::MIN,
                },
            }
        });
        DoubletCuts {
            dzdr_fact: (8.0f64 * 0.0285 / 0.015) as f32,
            min_radius2_t4: 4.0f32 * min_radius * min_radius,
            i2p: (std::f64::consts::PI / 32768.0) as f32,
            pairs,
        }
    }
}

/// The cuts of one layer pair, as the doublet search applies them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairCuts {
    /// Inner and outer layer (see [`LAYER_PAIRS`]).
    pub inner: u8,
    pub outer: u8,
    /// Maximum |Δφ|, int16 φ units.
    pub phi_cut: i16,
    /// Inner-hit z window, cm.
    pub min_z: f32,
    pub max_z: f32,
    /// Maximum r_out − r_in, cm (z0 cut).
    pub max_r: f32,
    /// Maximum |Δ y-size| of the barrel cluster-size cut (1/8 px).
    pub max_dysize: i32,
    /// Barrel pair with the cluster cut on: |Δ y-size| is cut.
    pub barrel_size_cut: bool,
    /// Barrel → forward pair with the cluster cut on: y-size vs. the predicted one is cut.
    pub forward_size_cut: bool,
    /// Minimum inner y-size (1/8 px); `i32::MIN` where there is none.
    pub min_ysize: i32,
}

/// Constants derived from a [`DoubletConfig`] ([`DoubletConfig::cuts`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DoubletCuts {
    /// Predicted y-size per unit |dz/dr| (1/8 px): `8·0.0285/0.015`, rounded to f32.
    pub dzdr_fact: f32,
    /// `4·r_min²` of the pT cut, cm², with `r_min = hard_pt_cut·radius_per_gev`.
    pub min_radius2_t4: f32,
    /// Radians per int16 φ unit (π/32768), rounded to f32.
    pub i2p: f32,
    /// Per-pair cuts, rows of [`LAYER_PAIRS`].
    pub pairs: [PairCuts; N_PAIRS],
}

/// Per-layer φ histogram of hit indices (the reference's `phiBinner`: 10 × 128 bins).
#[derive(Clone, Debug)]
pub struct PhiBinner {
    /// Bin starts, `N_LAYERS·PHI_BINS + 1` entries.
    off: Vec<u32>,
    /// Hit indices, bin by bin.
    bins: Vec<u32>,
}

impl PhiBinner {
    /// The bin of an int16 φ: its top 7 bits.
    ///
    /// ```
    /// use quiver_reco::tracks::doublets::PhiBinner;
    /// assert_eq!(PhiBinner::bin(0), 0);
    /// assert_eq!(PhiBinner::bin(-1), 127);
    /// assert_eq!(PhiBinner::bin(i16::MIN), 64);
    /// ```
    #[inline]
    pub fn bin(iphi: i16) -> usize {
        ((iphi >> 9) & 127) as usize
    }

    /// Bins the hits `layer_start[l]..layer_start[l+1]` of each layer `l`. Inside a bin the
    /// hits are stored in descending index order, as the reference's decrementing fill does.
    ///
    /// ```
    /// use quiver_reco::tracks::doublets::PhiBinner;
    /// let mut ls = [3u32; 11];
    /// ls[0] = 0;
    /// let b = PhiBinner::new(&[10, 20, 600], &ls);
    /// assert_eq!(b.hits_in(0, 0), &[1, 0]);
    /// assert_eq!(b.hits_in(0, 1), &[2]);
    /// ```
    pub fn new(iphi: &[i16], layer_start: &[u32; N_LAYERS + 1]) -> Self {
        let nb = N_LAYERS * PHI_BINS;
        let mut off = vec![0u32; nb + 1];
        let total = layer_start[N_LAYERS] as usize;
        let mut bins = vec![0u32; total.saturating_sub(layer_start[0] as usize)];
        for l in 0..N_LAYERS {
            for i in layer_start[l] as usize..layer_start[l + 1] as usize {
                off[l * PHI_BINS + Self::bin(iphi[i])] += 1;
            }
        }
        // Inclusive prefix sum: off[b] = end of bin b.
        for b in 1..=nb {
            off[b] += off[b - 1];
        }
        for l in 0..N_LAYERS {
            for i in layer_start[l] as usize..layer_start[l + 1] as usize {
                let b = l * PHI_BINS + Self::bin(iphi[i]);
                off[b] -= 1;
                bins[off[b] as usize] = i as u32;
            }
        }
        Self { off, bins }
    }

    /// Hit indices in bin `bin` of layer `layer`.
    #[inline]
    pub fn hits_in(&self, layer: usize, bin: usize) -> &[u32] {
        let b = layer * PHI_BINS + bin;
        &self.bins[self.off[b] as usize..self.off[b + 1] as usize]
    }
}

/// The rows of a [`Csr`] holding at least `min` values ([`Csr::rows_with_at_least`]).
pub struct RowsWithAtLeast<'a> {
    offsets: &'a [u32],
    min: u32,
    /// The first row of `mask`.
    base: usize,
    /// The first row of the next word.
    next_base: usize,
    /// Rows `base + j` still to yield, one bit `j` each.
    mask: u64,
    #[cfg(target_arch = "x86_64")]
    avx2: bool,
}

impl Iterator for RowsWithAtLeast<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        while self.mask == 0 {
            let n = self.offsets.len().saturating_sub(1);
            if self.next_base >= n {
                return None;
            }
            self.base = self.next_base;
            self.next_base = (self.base + 64).min(n);
            self.mask = self.word();
        }
        let j = self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(self.base + j)
    }
}

impl RowsWithAtLeast<'_> {
    /// The mask of rows `base..next_base`.
    fn word(&self) -> u64 {
        let off = &self.offsets[self.base..=self.next_base];
        #[cfg(target_arch = "x86_64")]
        if self.avx2 && (1..=1 << 31).contains(&self.min) {
            if let Ok(off) = <&[u32; 65]>::try_from(off) {
                // SAFETY: AVX2 was detected when the iterator was made.
                return unsafe { full_word_avx2(off, self.min) };
            }
        }
        let mut mask = 0u64;
        for (j, w) in off.windows(2).enumerate() {
            mask |= ((w[1].saturating_sub(w[0]) >= self.min) as u64) << j;
        }
        mask
    }
}

/// The mask of 64 rows of at least `min` values (1 ≤ `min` ≤ 2³¹) from their 65 offsets,
/// eight rows per comparison. A row's length is below 2³¹ (the offsets are `u32` and
/// ascending), so the signed comparison with `min − 1` is the unsigned one with `min`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn full_word_avx2(off: &[u32; 65], min: u32) -> u64 {
    use std::arch::x86_64::*;
    let below = _mm256_set1_epi32((min - 1) as i32);
    let mut mask = 0u64;
    for k in 0..8 {
        // SAFETY: 8k + 1 + 8 ≤ 65 entries read.
        let (start, end) = unsafe {
            (
                _mm256_loadu_si256(off.as_ptr().add(8 * k).cast()),
                _mm256_loadu_si256(off.as_ptr().add(8 * k + 1).cast()),
            )
        };
        let long = _mm256_cmpgt_epi32(_mm256_sub_epi32(end, start), below);
        mask |= (_mm256_movemask_ps(_mm256_castsi256_ps(long)) as u8 as u64) << (8 * k);
    }
    mask
}

/// Lists of `u32` per row, stored flat (compressed rows): row `i` is
/// `values[offsets[i]..offsets[i+1]]`. Replaces one heap list per hit or per cell.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Csr {
    /// Row starts, one more than the rows (empty for a list of no rows).
    pub offsets: Vec<u32>,
    /// All rows' values, row after row.
    pub values: Vec<u32>,
}

impl Csr {
    /// `n` empty rows.
    pub fn empty(n: usize) -> Self {
        Self {
            offsets: vec![0; n + 1],
            values: Vec::new(),
        }
    }

    /// From one list per row.
    ///
    /// ```
    /// use quiver_reco::tracks::doublets::Csr;
    /// let c = Csr::from_lists(&[vec![3, 1], vec![], vec![2]]);
    /// assert_eq!(c.rows(), 3);
    /// assert_eq!(c.of(0), &[3, 1]);
    /// assert!(c.of(1).is_empty());
    /// ```
    pub fn from_lists(lists: &[Vec<u32>]) -> Self {
        let mut c = Self {
            offsets: Vec::with_capacity(lists.len() + 1),
            values: Vec::new(),
        };
        c.offsets.push(0);
        for l in lists {
            c.values.extend_from_slice(l);
            c.offsets.push(c.values.len() as u32);
        }
        c
    }

    /// Number of rows.
    #[inline]
    pub fn rows(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// The list of row `i`.
    #[inline]
    pub fn of(&self, i: usize) -> &[u32] {
        &self.values[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// The rows holding at least `min` values, in ascending order. The row lengths are
    /// compared 64 rows at a time without a branch and only the rows found are visited: the
    /// per-cell lists are mostly empty, and a branch per row is often mispredicted.
    ///
    /// ```
    /// use quiver_reco::tracks::doublets::Csr;
    /// let mut lists = vec![vec![]; 130];
    /// lists[3] = vec![1, 2];
    /// lists[64] = vec![7];
    /// lists[129] = vec![4, 5, 6];
    /// let c = Csr::from_lists(&lists);
    /// assert_eq!(c.rows_with_at_least(2).collect::<Vec<_>>(), vec![3, 129]);
    /// assert_eq!(c.rows_with_at_least(1).collect::<Vec<_>>(), vec![3, 64, 129]);
    /// assert_eq!(Csr::default().rows_with_at_least(1).count(), 0);
    /// ```
    pub fn rows_with_at_least(&self, min: u32) -> RowsWithAtLeast<'_> {
        RowsWithAtLeast {
            offsets: &self.offsets,
            min,
            base: 0,
            next_base: 0,
            mask: 0,
            #[cfg(target_arch = "x86_64")]
            avx2: std::arch::is_x86_feature_detected!("avx2"),
        }
    }

    /// Iterator over the rows' lists.
    pub fn iter(&self) -> impl Iterator<Item = &[u32]> + '_ {
        self.offsets
            .windows(2)
            .map(|w| &self.values[w[0] as usize..w[1] as usize])
    }

    /// Groups `(row, value)` pairs by row in one counting sort, keeping their order inside a
    /// row and at most `cap` values per row (the first ones win, as with a bounded push).
    /// Returns the lists and the number of rows that had more than `cap`.
    pub fn group_capped(
        n_rows: usize,
        pairs: impl Iterator<Item = (u32, u32)> + Clone,
        cap: u32,
    ) -> (Self, u32) {
        let mut offsets = vec![0u32; n_rows + 1];
        for (r, _) in pairs.clone() {
            offsets[r as usize + 1] += 1;
        }
        let mut overflows = 0;
        for r in 1..=n_rows {
            let c = offsets[r];
            if c > cap {
                overflows += 1;
            }
            offsets[r] = offsets[r - 1] + c.min(cap);
        }
        let mut values = vec![0u32; offsets[n_rows] as usize];
        // `cursor[r]` = next free slot of row r; it starts at the row start.
        let mut cursor: Vec<u32> = offsets[..n_rows].to_vec();
        for (r, v) in pairs {
            let r = r as usize;
            let k = cursor[r];
            if k < offsets[r + 1] {
                values[k as usize] = v;
                cursor[r] = k + 1;
            }
        }
        (Self { offsets, values }, overflows)
    }
}

/// One doublet (the reference's `GPUCACell`, without its neighbour/track lists which the CA
/// state keeps alongside).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    /// Inner hit index.
    pub inner: u32,
    /// Outer hit index.
    pub outer: u32,
    /// Layer pair id (row of [`LAYER_PAIRS`]).
    pub pair: u8,
    /// The cell's own index, or −1 once killed by the fishbone.
    pub doublet_id: i32,
}

/// Output of the doublet search.
#[derive(Clone, Debug, Default)]
pub struct Doublets {
    /// Cells in creation order.
    pub cells: Vec<Cell>,
    /// For each hit, the cells whose outer hit it is (at most `max_cells_per_hit`, the first
    /// ones in creation order). Empty (no rows) only for an event without hits.
    pub outer_hit_of_cell: Csr,
    /// True if `max_number_of_doublets` was reached.
    pub cells_overflow: bool,
    /// Cells that passed every cut with the container full (not stored).
    pub cells_missed: u64,
    /// Number of hits whose `outer_hit_of_cell` list overflowed.
    pub outer_hit_overflows: u32,
    /// The inner hit of each cell of `outer_hit_of_cell.values`, entry by entry, when known
    /// (else empty): lets `connect` read the candidates' hits without visiting the cells.
    pub listed_inner_hits: Vec<u32>,
}

/// Number of layer pairs the reference uses for a given configuration.
///
/// ```
/// use quiver_reco::tracks::doublets::n_actual_pairs;
/// assert_eq!(n_actual_pairs(true, 3), 19);
/// assert_eq!(n_actual_pairs(false, 3), 15);
/// assert_eq!(n_actual_pairs(true, 4), 13);
/// ```
pub fn n_actual_pairs(include_jumping_forward: bool, min_hits_per_ntuplet: u32) -> usize {
    if min_hits_per_ntuplet > 3 {
        13
    } else if !include_jumping_forward {
        15
    } else {
        N_PAIRS
    }
}

/// Builds the doublets of one event.
///
/// `n_pairs` is the number of leading rows of [`LAYER_PAIRS`] to use (see [`n_actual_pairs`]).
/// The hits must be validated ([`HitsView::validate`]).
///
/// ```
/// use quiver_reco::tracks::doublets::{build_doublets, DoubletConfig};
/// use quiver_reco::tracks::testing::HitBuilder;
/// let mut b = HitBuilder::new();
/// b.add_barrel_hit(0, 2.9, 0.1, 1.0);
/// b.add_barrel_hit(1, 6.8, 0.1, 2.3);
/// let cpe = HitBuilder::cpe_params();
/// let cols = b.build();
/// let d = build_doublets(&cols.view(&cpe), &DoubletConfig::default(), 19).unwrap();
/// assert_eq!(d.cells.len(), 1);
/// ```
pub fn build_doublets(
    hits: &HitsView,
    cfg: &DoubletConfig,
    n_pairs: usize,
) -> Result<Doublets, TrackError> {
    let mut d = build_doublet_cells(hits, cfg, n_pairs)?;
    // Cells ending on each hit, first `max_cells_per_hit` in creation order.
    // (Read from a compact copy of the outer hits: the cells are six times wider.)
    let outers: Vec<u32> = d.cells.iter().map(|cell| cell.outer).collect();
    let (lists, overflows) = Csr::group_capped(
        hits.n_hits(),
        outers.iter().enumerate().map(|(c, &o)| (o, c as u32)),
        cfg.max_cells_per_hit,
    );
    d.outer_hit_of_cell = lists;
    d.outer_hit_overflows = overflows;
    Ok(d)
}

/// [`build_doublets`] without the per-hit cell lists (`outer_hit_of_cell` has no rows).
pub fn build_doublet_cells(
    hits: &HitsView,
    cfg: &DoubletConfig,
    n_pairs: usize,
) -> Result<Doublets, TrackError> {
    let c = build_doublet_columns(hits, cfg, n_pairs)?;
    let cells = cells_from_columns(&c.inner, &c.outer, &c.pair);
    Ok(Doublets {
        cells,
        cells_overflow: c.cells_overflow,
        cells_missed: c.cells_missed,
        ..Default::default()
    })
}

/// Cells from their columns (creation order: a cell's id is its index).
pub(crate) fn cells_from_columns(inner: &[u32], outer: &[u32], pair: &[u8]) -> Vec<Cell> {
    inner
        .iter()
        .zip(outer)
        .zip(pair)
        .enumerate()
        .map(|(k, ((&inner, &outer), &pair))| Cell {
            inner,
            outer,
            pair,
            doublet_id: k as i32,
        })
        .collect()
}

/// The cells of one event as columns, in creation order: what the `ca_doublets` step
/// publishes (with [`listed_bits`]), written without going through [`Cell`]s.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellColumns {
    /// Inner hit index per cell.
    pub inner: Vec<u32>,
    /// Outer hit index per cell.
    pub outer: Vec<u32>,
    /// Layer pair id per cell.
    pub pair: Vec<u8>,
    /// True if `max_number_of_doublets` was reached.
    pub cells_overflow: bool,
    /// Cells that passed every cut with the container full (not stored).
    pub cells_missed: u64,
}

/// [`build_doublet_cells`] as columns.
///
/// ```
/// use quiver_reco::tracks::doublets::{build_doublet_columns, DoubletConfig};
/// use quiver_reco::tracks::testing::HitBuilder;
/// let mut b = HitBuilder::new();
/// b.add_barrel_hit(0, 2.9, 0.1, 1.0);
/// b.add_barrel_hit(1, 6.8, 0.1, 2.3);
/// let cpe = HitBuilder::cpe_params();
/// let cols = b.build();
/// let c = build_doublet_columns(&cols.view(&cpe), &DoubletConfig::default(), 19).unwrap();
/// assert_eq!((c.inner, c.outer, c.pair), (vec![0], vec![1], vec![0]));
/// ```
pub fn build_doublet_columns(
    hits: &HitsView,
    cfg: &DoubletConfig,
    n_pairs: usize,
) -> Result<CellColumns, TrackError> {
    search(hits, cfg, n_pairs)
}

/// Whether each cell makes it into its outer hit's cell list, from the cells' outer hits:
/// the first `max_cells_per_hit` cells ending on a hit, in creation order, do (as
/// [`build_doublets`] lists them).
///
/// ```
/// use quiver_reco::tracks::doublets::listed_flags;
/// assert_eq!(listed_flags(&[1, 2, 1, 1], 3, 2), vec![true, true, true, false]);
/// ```
pub fn listed_flags(outer: &[u32], n_hits: usize, max_cells_per_hit: u32) -> Vec<bool> {
    listed_bits(outer, n_hits, max_cells_per_hit)
        .0
        .iter()
        .collect()
}

/// [`listed_flags`] packed as the `listed` column stores them (64 flags to a word), with the
/// number of cells left out. When no hit ends more than `max_cells_per_hit` cells (the usual
/// case) every bit is set at once: the cells are visited once, to count, not twice.
///
/// ```
/// use quiver_reco::tracks::doublets::listed_bits;
/// let (bits, unlisted) = listed_bits(&[1, 2, 1, 1], 3, 2);
/// assert_eq!(bits.iter().collect::<Vec<_>>(), vec![true, true, true, false]);
/// assert_eq!(unlisted, 1);
/// assert_eq!(listed_bits(&[1, 2, 1], 3, 2).1, 0);
/// ```
pub fn listed_bits(
    outer: &[u32],
    n_hits: usize,
    max_cells_per_hit: u32,
) -> (arrow_buffer::BooleanBuffer, u64) {
    let mut count = vec![0u32; n_hits];
    for &o in outer {
        count[o as usize] += 1;
    }
    let unlisted: u64 = count
        .iter()
        .map(|&k| k.saturating_sub(max_cells_per_hit) as u64)
        .sum();
    if unlisted == 0 {
        return (arrow_buffer::BooleanBuffer::new_set(outer.len()), 0);
    }
    count.fill(0);
    let bits = arrow_buffer::BooleanBuffer::collect_bool(outer.len(), |c| {
        let k = &mut count[outer[c] as usize];
        *k += 1;
        *k <= max_cells_per_hit
    });
    (bits, unlisted)
}

/// The doublet search: the cells as columns, with the count of those found with the
/// container full (`max_number_of_doublets` reached).
fn search(hits: &HitsView, cfg: &DoubletConfig, n_pairs: usize) -> Result<CellColumns, TrackError> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: the CPU has AVX2 and POPCNT.
        return unsafe { search_avx2(hits, cfg, n_pairs) };
    }
    search_impl(hits, cfg, n_pairs, pass_mask, pack_outer)
}

/// [`search`] compiled for AVX2 (the candidate chunks in 256-bit registers): the same IEEE
/// operations, so the same cells. With POPCNT: without it a chunk's cell count is a dozen
/// instructions (every AVX2 CPU has it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn search_avx2(
    hits: &HitsView,
    cfg: &DoubletConfig,
    n_pairs: usize,
) -> Result<CellColumns, TrackError> {
    search_impl(
        hits,
        cfg,
        n_pairs,
        |c, p, s| pass_mask_avx2(c, p, s),
        |o, b, d| pack_outer_avx2(o, b, d),
    )
}

#[inline(always)]
fn search_impl(
    hits: &HitsView,
    cfg: &DoubletConfig,
    n_pairs: usize,
    mask: impl Fn(&Chunk, &Probe, &SharedCuts) -> u32,
    pack: impl Fn(&[u32; CHUNK], u32, &mut [std::mem::MaybeUninit<u32>]),
) -> Result<CellColumns, TrackError> {
    check_search(hits, cfg, n_pairs)?;
    let n_hits = hits.n_hits();
    // Cells found with the container full: counted, not stored (the search goes on, as
    // the reference's threads do, so that the overflow record says what was needed).
    let mut missed = 0u64;
    if n_hits == 0 {
        return Ok(CellColumns::default());
    }
    let binner = PhiBinner::new(hits.iphi, &hits.layer_start);
    let packed = PackedBins::new(&binner, hits);
    let ls = &hits.layer_start;

    // Reference constants, computed in the same precision.
    let cuts = cfg.cuts();
    let (dzdr_fact, min_radius2_t4, i2p) = (cuts.dzdr_fact, cuts.min_radius2_t4, cuts.i2p);
    let max_doublets = cfg.max_number_of_doublets as usize;
    let shared = SharedCuts {
        do_z0_cut: cfg.do_z0_cut,
        z0_cut: cfg.z0_cut,
        do_pt_cut: cfg.do_pt_cut,
        min_radius2_t4,
        i2p,
    };
    // The columns are local (their lengths and pointers stay in registers) and keep room
    // for a whole chunk past their length: a chunk's cells are written at once, a run of
    // `CHUNK` of each column and the length advanced by the cells kept. A cell at a time,
    // the mispredicted branch on every survivor and the columns' updates were 60 % of
    // the search's time.
    let (mut inner_col, mut outer_col, mut pair_col): (Vec<u32>, Vec<u32>, Vec<u8>) = {
        let cap = max_doublets.min(n_hits * 16) + CHUNK;
        (
            Vec::with_capacity(cap),
            Vec::with_capacity(cap),
            Vec::with_capacity(cap),
        )
    };

    for (pair_id, pc) in cuts.pairs.iter().enumerate().take(n_pairs) {
        let (inner, outer) = (pc.inner, pc.outer);
        let (inner_l, outer_l) = (inner as usize, outer as usize);
        let phicut = pc.phi_cut;
        let (minz, maxz, maxr) = (pc.min_z, pc.max_z, pc.max_r);
        // Cluster-size cuts: |Δ size| for barrel pairs, size vs. the size predicted from the
        // doublet's slope for barrel → forward pairs.
        let (dy_barrel, barrel_size_cut, forward_size_cut) =
            (pc.max_dysize, pc.barrel_size_cut, pc.forward_size_cut);
        let min_ysize = pc.min_ysize;
        for i in ls[inner_l] as usize..ls[inner_l + 1] as usize {
            let mi = hits.det_index[i];
            if mi > 2000 {
                continue;
            }
            let mez = hits.z_global[i];
            if mez < minz || mez > maxz {
                continue;
            }
            let Some(mes) = inner_y_size(hits, cfg, i, inner, min_ysize) else {
                continue;
            };
            let mep = hits.iphi[i];
            let mer = hits.r_global[i];

            let probe = Probe {
                mez,
                mer,
                mep,
                mes,
                phicut,
                maxr,
                dy_barrel,
                barrel_size_cut,
            };
            for (b0, b1) in phi_runs(mep, phicut) {
                if b0 == b1 {
                    continue;
                }
                let (k0, k1) = packed.range(outer_l, b0, b1);
                // The z0, φ, pT and barrel cluster-size cuts are pure predicates: evaluate
                // them for a chunk of candidates at once (branch-free, vectorisable), then
                // visit the survivors in order. Same f32 expressions as one candidate at a
                // time; the forward size cut (a division and a saturating cast) stays scalar.
                let mut k = k0;
                while k < k1 {
                    let mut bits = mask(&packed.chunk(k), &probe, &shared);
                    let left = k1 - k;
                    if left < CHUNK {
                        bits &= (1u32 << left) - 1;
                    }
                    if forward_size_cut && mes > 0 {
                        let mut b = bits;
                        while b != 0 {
                            let j = b.trailing_zeros() as usize;
                            b &= b - 1;
                            let kk = k + j;
                            let pred = (((mez - packed.z[kk]) / (mer - packed.r[kk])).abs()
                                * dzdr_fact
                                + 0.5f32) as i32;
                            if (mes - pred).abs() > cfg.max_dy_pred {
                                bits &= !(1 << j);
                            }
                        }
                    }
                    let len = outer_col.len();
                    // With the container full the rest are counted, not stored (in order:
                    // the chunk's last ones go).
                    let found = bits.count_ones() as usize;
                    let room = max_doublets - len;
                    let n = found.min(room);
                    if found > room {
                        missed += (found - room) as u64;
                        for _ in room..found {
                            bits &= !(1 << (31 - bits.leading_zeros()));
                        }
                    }
                    if outer_col.capacity() - len < CHUNK {
                        outer_col.reserve(CHUNK);
                        inner_col.reserve(CHUNK);
                        pair_col.reserve(CHUNK);
                    }
                    pack(
                        packed.idx[k..k + CHUNK].try_into().unwrap(),
                        bits,
                        &mut outer_col.spare_capacity_mut()[..CHUNK],
                    );
                    for x in &mut inner_col.spare_capacity_mut()[..CHUNK] {
                        x.write(i as u32);
                    }
                    for x in &mut pair_col.spare_capacity_mut()[..CHUNK] {
                        x.write(pair_id as u8);
                    }
                    // SAFETY: `pack` wrote the first n ≤ CHUNK spare entries of
                    // `outer_col`, the loops above all CHUNK of the other two.
                    unsafe {
                        outer_col.set_len(len + n);
                        inner_col.set_len(len + n);
                        pair_col.set_len(len + n);
                    }
                    k += CHUNK;
                }
            }
        }
    }
    Ok(CellColumns {
        inner: inner_col,
        outer: outer_col,
        pair: pair_col,
        cells_overflow: missed > 0,
        cells_missed: missed,
    })
}

/// Candidates whose pure cuts are evaluated together.
const CHUNK: usize = 16;

mod chunk;
use chunk::{pack_outer, pass_mask, Chunk, Probe, SharedCuts};
#[cfg(target_arch = "x86_64")]
use chunk::{pack_outer_avx2, pass_mask_avx2};

/// Inner hit `i`'s y-size for the cluster-size cuts (−1 where they do not apply); `None`
/// when it is below the pair's minimum.
#[inline(always)]
fn inner_y_size(
    hits: &HitsView,
    cfg: &DoubletConfig,
    i: usize,
    inner: u8,
    min_ysize: i32,
) -> Option<i32> {
    let mut mes: i32 = -1;
    if cfg.do_cluster_cut {
        let is_outer_ladder = cfg.ideal_conditions || (hits.det_index[i] / 8).is_multiple_of(2);
        mes = if inner > 0 || is_outer_ladder {
            hits.size_y[i] as i32
        } else {
            -1
        };
        if mes > 0 && mes < min_ysize {
            return None;
        }
    }
    Some(mes)
}

/// The checks of the doublet search's inputs.
fn check_search(hits: &HitsView, cfg: &DoubletConfig, n_pairs: usize) -> Result<(), TrackError> {
    cfg.validate()?;
    hits.validate_max(cfg.max_hits)?;
    if n_pairs > N_PAIRS {
        return Err(TrackError::Config(format!("n_pairs {n_pairs} > {N_PAIRS}")));
    }
    Ok(())
}

/// Outer bins kl..=kh around `mep` with wrap-around: at most two contiguous runs of the
/// packed hits, in the reference's bin order (none when kh + 1 wraps onto kl).
#[inline(always)]
fn phi_runs(mep: i16, phicut: i16) -> [(usize, usize); 2] {
    let kl = PhiBinner::bin(mep.wrapping_sub(phicut));
    let kh = PhiBinner::bin(mep.wrapping_add(phicut));
    let khh = (kh + 1) % PHI_BINS;
    if kl < khh {
        [(kl, khh), (0, 0)]
    } else if kl > khh {
        [(kl, PHI_BINS), (0, khh)]
    } else {
        [(0, 0), (0, 0)]
    }
}

/// Bit `j` set for each true `pass[j]`: the eight flags as the bytes of a u64, gathered into
/// its top byte by one multiplication (each partial product lands on its own bit, no carry).
#[inline]
pub(crate) fn mask8(pass: &[bool; 8]) -> u32 {
    let x = u64::from_le_bytes(pass.map(|p| p as u8));
    (x.wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32
}

/// The valid hits of every (layer, φ bin) in the binner's order, with the values the doublet
/// search reads stored column by column so that a window of bins is one contiguous scan.
/// The columns carry `CHUNK` padding entries at the end, so that a chunk never reads past
/// them.
struct PackedBins {
    /// Start of each (layer, bin) run, `N_LAYERS·PHI_BINS + 1` entries.
    off: Vec<u32>,
    z: Vec<f32>,
    r: Vec<f32>,
    idx: Vec<u32>,
    iphi: Vec<i16>,
    size_y: Vec<i16>,
}

impl PackedBins {
    /// The candidates `k..k + CHUNK` (the columns are padded for the last chunk).
    #[inline(always)]
    fn chunk(&self, k: usize) -> Chunk<'_> {
        Chunk {
            z: self.z[k..k + CHUNK].try_into().unwrap(),
            r: self.r[k..k + CHUNK].try_into().unwrap(),
            iphi: self.iphi[k..k + CHUNK].try_into().unwrap(),
            size_y: self.size_y[k..k + CHUNK].try_into().unwrap(),
        }
    }

    fn new(binner: &PhiBinner, h: &HitsView) -> Self {
        let nb = N_LAYERS * PHI_BINS;
        let cap = binner.bins.len() + CHUNK;
        let mut p = Self {
            off: Vec::with_capacity(nb + 1),
            z: Vec::with_capacity(cap),
            r: Vec::with_capacity(cap),
            idx: Vec::with_capacity(cap),
            iphi: Vec::with_capacity(cap),
            size_y: Vec::with_capacity(cap),
        };
        p.off.push(0);
        for b in 0..nb {
            for &i in &binner.bins[binner.off[b] as usize..binner.off[b + 1] as usize] {
                let i = i as usize;
                // Invalid hits are never paired: leave them out.
                if h.det_index[i] > 2000 {
                    continue;
                }
                p.z.push(h.z_global[i]);
                p.r.push(h.r_global[i]);
                p.idx.push(i as u32);
                p.iphi.push(h.iphi[i]);
                p.size_y.push(h.size_y[i]);
            }
            p.off.push(p.idx.len() as u32);
        }
        p.idx.resize(p.idx.len() + CHUNK, 0);
        p.z.resize(p.z.len() + CHUNK, 0.0);
        p.r.resize(p.r.len() + CHUNK, 0.0);
        p.iphi.resize(p.iphi.len() + CHUNK, 0);
        p.size_y.resize(p.size_y.len() + CHUNK, 0);
        p
    }

    /// Index range of the hits of bins `b0..b1` of `layer`.
    #[inline]
    fn range(&self, layer: usize, b0: usize, b1: usize) -> (usize, usize) {
        let base = layer * PHI_BINS;
        (self.off[base + b0] as usize, self.off[base + b1] as usize)
    }
}
