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
                -20., 0., -30., -22., 10., -30., -70., -70., -22., 15., -30., -70., -70., -20., -22.,
                0., -30., -70., -70.,
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
            return Err(TrackError::Config("doublets.max_cells_per_hit must be > 0".into()));
        }
        if self.phi_cuts.iter().any(|&c| c < 0) {
            return Err(TrackError::Config("doublets.phi_cuts must be ≥ 0".into()));
        }
        if !(self.hard_pt_cut.is_finite() && self.radius_per_gev.is_finite() && self.z0_cut.is_finite()) {
            return Err(TrackError::Config("doublets: non-finite cut".into()));
        }
        Ok(())
    }
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
    /// Bit 0: connected to another cell by `connect`.
    pub used: u16,
    /// Cached inner-hit z and r (cm).
    pub inner_z: f32,
    pub inner_r: f32,
}

/// Output of the doublet search.
#[derive(Clone, Debug, Default)]
pub struct Doublets {
    /// Cells in creation order.
    pub cells: Vec<Cell>,
    /// For each hit, the cells whose outer hit it is (at most `max_cells_per_hit`).
    pub outer_hit_of_cell: Vec<Vec<u32>>,
    /// True if `max_number_of_doublets` was reached.
    pub cells_overflow: bool,
    /// Number of hits whose `outer_hit_of_cell` list overflowed.
    pub outer_hit_overflows: u32,
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
pub fn build_doublets(hits: &HitsView, cfg: &DoubletConfig, n_pairs: usize) -> Result<Doublets, TrackError> {
    cfg.validate()?;
    hits.validate()?;
    if n_pairs > N_PAIRS {
        return Err(TrackError::Config(format!("n_pairs {n_pairs} > {N_PAIRS}")));
    }
    let n_hits = hits.n_hits();
    let mut out = Doublets {
        cells: Vec::new(),
        outer_hit_of_cell: vec![Vec::new(); n_hits],
        cells_overflow: false,
        outer_hit_overflows: 0,
    };
    if n_hits == 0 {
        return Ok(out);
    }
    let binner = PhiBinner::new(hits.iphi, &hits.layer_start);
    let ls = &hits.layer_start;

    // Reference constants, computed in the same precision.
    let dzdr_fact: f32 = (8.0f64 * 0.0285 / 0.015) as f32;
    let min_radius: f32 = cfg.hard_pt_cut * cfg.radius_per_gev;
    let min_radius2_t4: f32 = 4.0f32 * min_radius * min_radius;
    let i2p: f32 = (std::f64::consts::PI / 32768.0) as f32;
    let max_cells_per_hit = cfg.max_cells_per_hit as usize;

    let mut overflowed_hit = vec![false; 0];
    for (pair_id, &(inner, outer)) in LAYER_PAIRS.iter().enumerate().take(n_pairs) {
        let (inner_l, outer_l) = (inner as usize, outer as usize);
        let phicut = cfg.phi_cuts[pair_id];
        let (minz, maxz, maxr) = (cfg.min_z[pair_id], cfg.max_z[pair_id], cfg.max_r[pair_id]);
        for i in ls[inner_l] as usize..ls[inner_l + 1] as usize {
            let mi = hits.det_index[i];
            if mi > 2000 {
                continue;
            }
            let mez = hits.z_global[i];
            if mez < minz || mez > maxz {
                continue;
            }
            let mut mes: i32 = -1;
            if cfg.do_cluster_cut {
                let is_outer_ladder = cfg.ideal_conditions || (mi / 8).is_multiple_of(2);
                mes = if inner > 0 || is_outer_ladder { hits.size_y[i] as i32 } else { -1 };
                if inner == 0 && outer > 3 && mes > 0 && mes < cfg.min_ysize_b1 {
                    continue;
                }
                if inner == 1 && outer > 3 && mes > 0 && mes < cfg.min_ysize_b2 {
                    continue;
                }
            }
            let mep = hits.iphi[i];
            let mer = hits.r_global[i];

            let kl = PhiBinner::bin(mep.wrapping_sub(phicut));
            let kh = PhiBinner::bin(mep.wrapping_add(phicut));
            let khh = (kh + 1) % PHI_BINS;
            let mut kk = kl;
            while kk != khh {
                for &oi in binner.hits_in(outer_l, kk) {
                    let oi = oi as usize;
                    if hits.det_index[oi] > 2000 {
                        continue;
                    }
                    let zo = hits.z_global[oi];
                    let ro = hits.r_global[oi];
                    if cfg.do_z0_cut {
                        let dr = ro - mer;
                        if dr > maxr || dr < 0.0 || (mez * ro - mer * zo).abs() > cfg.z0_cut * dr {
                            continue;
                        }
                    }
                    let mop = hits.iphi[oi];
                    let a = (mop.wrapping_sub(mep) as i32).abs();
                    let b = (mep.wrapping_sub(mop) as i32).abs();
                    let idphi = a.min(b) as u16;
                    if idphi as i32 > phicut as i32 {
                        continue;
                    }
                    if cfg.do_cluster_cut {
                        let so = hits.size_y[oi] as i32;
                        let fails = if outer < 4 {
                            let dy = if inner == 0 { cfg.max_dysize_12 } else { cfg.max_dysize };
                            mes > 0 && so > 0 && (so - mes).abs() > dy
                        } else {
                            inner < 4 && mes > 0 && {
                                let pred = (((mez - zo) / (mer - ro)).abs() * dzdr_fact + 0.5f32) as i32;
                                (mes - pred).abs() > cfg.max_dy_pred
                            }
                        };
                        if fails {
                            continue;
                        }
                    }
                    if cfg.do_pt_cut {
                        let dphi = (idphi as i16) as f32 * i2p;
                        if dphi * dphi * (min_radius2_t4 - mer * ro) > (ro - mer) * (ro - mer) {
                            continue;
                        }
                    }
                    if out.cells.len() as u64 >= cfg.max_number_of_doublets as u64 {
                        out.cells_overflow = true;
                        break;
                    }
                    let ind = out.cells.len() as u32;
                    out.cells.push(Cell {
                        inner: i as u32,
                        outer: oi as u32,
                        pair: pair_id as u8,
                        doublet_id: ind as i32,
                        used: 0,
                        inner_z: mez,
                        inner_r: mer,
                    });
                    let list = &mut out.outer_hit_of_cell[oi];
                    if list.len() < max_cells_per_hit {
                        list.push(ind);
                    } else {
                        if overflowed_hit.is_empty() {
                            overflowed_hit = vec![false; n_hits];
                        }
                        if !overflowed_hit[oi] {
                            overflowed_hit[oi] = true;
                            out.outer_hit_overflows += 1;
                        }
                    }
                }
                kk = (kk + 1) % PHI_BINS;
            }
        }
    }
    Ok(out)
}
