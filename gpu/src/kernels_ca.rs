//! CUDA C source of the CA doublet search (`ca_doublets`), compiled by NVRTC with the local
//! kernels (same prelude, same options: `--fmad=false`, explicit round-to-nearest
//! intrinsics in the CPU's operation order, `__float2int_rz` for Rust's saturating `as i32`).
//!
//! The CPU search (`quiver_reco::tracks::doublets`) creates the cells of an event in one
//! canonical order: layer pairs in table order, inner hits in hit order, outer φ bins from
//! low to high with wrap-around, and inside a bin the hits in descending index (the
//! reference's decrementing histogram fill). The device reproduces that order exactly, with
//! no sort of the cells and whatever the thread interleaving:
//!
//! 1. `ca_bin_count` / `ca_bin_scan` / `ca_bin_fill` / `ca_bin_sort`: the per-event φ
//!    histogram of the valid hits of each layer. The fill uses atomics (any order), then each
//!    bin is sorted by descending hit index, which is the CPU's order inside a bin; the sort
//!    also gathers z, r, φ and y-size bin by bin so that a window of bins is one contiguous
//!    scan, as on the CPU.
//! 2. A work item is one (event, layer pair, inner hit), numbered in the CPU's loop order.
//!    `ca_doublets` with `write = 0` counts each item's cells; `ca_item_scan` (one block per
//!    event) turns the counts into each item's first cell in its event; `ca_doublets` with
//!    `write = 1` redoes the same candidate scan and writes each item's cells at that place.
//!    Cells past `max_number_of_doublets` in that order are dropped, as the CPU stops
//!    filling: an event overflows when its count exceeds the maximum.
//! 3. `ca_listed_count` / `ca_listed` / `ca_listed_overfull`: whether each cell is among the
//!    first `max_cells_per_hit` cells (in cell order) ending on its outer hit. Counts come
//!    from atomics (order independent); only the hits with more cells than the maximum are
//!    resolved in cell order, by one thread each.
//!
//! Cut arithmetic is the scalar CPU code's: `(mez·ro) − (mer·zo)`, `z0_cut·dr`,
//! `(dφ·dφ)·(4r² − mer·ro)` vs `(ro − mer)·(ro − mer)`, `|(mez − zo)/(mer − ro)|·f + 0.5`.

/// Threads per block of `ca_item_scan` (one block per event; a power of two, ≤ 1024).
pub const SCAN_BLOCK: u32 = 1024;

/// Elements per thread of `ca_overflow_stats` and `nt_list_stats` (`CA_STATS_RUN`,
/// `NT_STATS_RUN` in the sources).
pub const STATS_RUN: u32 = 16;

/// Threads per hit of `cn_index_rank` (`CN_RANK_LANES`).
pub const RANK_LANES: u32 = 16;

/// Neighbours per cell that `cn_connect`'s count pass keeps (`CN_KEPT`), so that its write
/// pass copies them for the cells that have no more instead of running the cuts again.
pub const CONNECT_KEPT: usize = 2;

/// Entries per event of the bin-start table: 10 layers × 128 bins, plus the end.
pub const BIN_STARTS_PER_EVENT: usize =
    quiver_reco::tracks::doublets::N_LAYERS * quiver_reco::tracks::doublets::PHI_BINS + 1;

/// Layout of the per-pair integer table (`pair_i`, `PAIR_INTS` entries per pair) and float
/// table (`pair_f`, `PAIR_FLOATS` per pair) that the kernel reads.
pub const PAIR_INTS: usize = 6;
pub const PAIR_FLOATS: usize = 3;

/// Bits of the `flags` argument of `ca_doublets`.
pub const FLAG_Z0_CUT: u32 = 1;
pub const FLAG_PT_CUT: u32 = 2;
pub const FLAG_CLUSTER_CUT: u32 = 4;
pub const FLAG_IDEAL_CONDITIONS: u32 = 8;

/// The per-pair cut tables of `ca_doublets`, from the CPU's derived cuts:
/// ints `[inner, outer, phi_cut, max_dysize, min_ysize, size-cut bits]` (bit 0 barrel
/// size cut, bit 1 forward size cut) and floats `[min_z, max_z, max_r]` per pair.
///
/// ```
/// use quiver_gpu::kernels_ca::{pair_tables, PAIR_INTS};
/// use quiver_reco::tracks::DoubletConfig;
/// let (i, f) = pair_tables(&DoubletConfig::default().cuts());
/// assert_eq!(&i[..PAIR_INTS], &[0, 1, 522, 28, i32::MIN, 1]);
/// assert_eq!(&f[..3], &[-20.0, 20.0, 20.0]);
/// ```
pub fn pair_tables(cuts: &quiver_reco::tracks::doublets::DoubletCuts) -> (Vec<i32>, Vec<f32>) {
    let mut ints = Vec::with_capacity(cuts.pairs.len() * PAIR_INTS);
    let mut floats = Vec::with_capacity(cuts.pairs.len() * PAIR_FLOATS);
    for p in &cuts.pairs {
        let bits = p.barrel_size_cut as i32 | (p.forward_size_cut as i32) << 1;
        ints.extend_from_slice(&[
            p.inner as i32,
            p.outer as i32,
            p.phi_cut as i32,
            p.max_dysize,
            p.min_ysize,
            bits,
        ]);
        floats.extend_from_slice(&[p.min_z, p.max_z, p.max_r]);
    }
    (ints, floats)
}

/// The `ca_doublets` flags of a configuration.
pub fn doublet_flags(cfg: &quiver_reco::tracks::DoubletConfig) -> u32 {
    ((cfg.do_z0_cut as u32) * FLAG_Z0_CUT)
        | ((cfg.do_pt_cut as u32) * FLAG_PT_CUT)
        | ((cfg.do_cluster_cut as u32) * FLAG_CLUSTER_CUT)
        | ((cfg.ideal_conditions as u32) * FLAG_IDEAL_CONDITIONS)
}

/// The kernels (see the module documentation). Hit indices in the products are event-local;
/// hit arrays are the batch's, event `e` holding rows `hit_off[e]..hit_off[e+1]`.
/// `layer_start` holds 11 event-local entries per event; `bin_start` `BIN_STARTS_PER_EVENT`
/// batch-global entries per event; `item_start` `n_events·n_pairs + 1` entries.
pub const CA_DOUBLETS: &str = include_str!("../kernels/ca_doublets.cu");

/// The kernel functions of [`CA_DOUBLETS`].
pub const CA_DOUBLETS_KERNELS: &[&str] = &[
    "ca_bin_count",
    "ca_bin_scan",
    "ca_bin_fill",
    "ca_bin_sort",
    "ca_doublets",
    "ca_item_scan",
    "ca_listed_count",
    "ca_listed",
    "ca_listed_overfull",
    "ca_overflow_stats",
];

/// CUDA C source of `ca_ntuplets`: the connect, the fishbone and the ntuplet search.
///
/// **Connect.** The CPU connect (`quiver_reco::tracks::ntuplets::connect`) visits the cells
/// in index order and pushes each accepted (neighbour list, cell) pair, so a cell's list
/// holds its neighbours by ascending cell index. The device computes each list directly
/// ("pull"): one thread per listed cell scans the cells starting on its outer hit by
/// ascending index (`cn_index_*` build that index: atomic counts, then each hit's cells
/// placed by rank), tests the same triplet in the CPU's operation order, and writes the passing
/// cells at the place a per-event prefix sum of the counts gives it. No atomic decides an
/// order. The per-list capacity (`max_cell_neighbors`) keeps the first neighbours by index,
/// so the search reads a prefix of each list; `max_active_doublets` opens lists in the
/// CPU's push order, which the device does not reproduce: `nt_list_stats` counts the
/// non-empty lists, and the host hands an event where it binds to the CPU.
///
/// **Fishbone.** One thread per hit over its listed cells by ascending index (the CPU's
/// list order, from the same index built on outer hits): the same pairs in the same order,
/// with the same `break`. A cell dies only by its own outer hit's thread: no race.
///
/// **Search.** One thread per starting cell runs the depth-first search iteratively (an
/// explicit stack of `NT_MAX_DEPTH` cells). A count pass gives each cell's tuples and hits,
/// a per-event prefix sum their places, and the write pass puts every tuple where the CPU's
/// cell-by-cell search would have put it: the tuple order needs no sort.
///
/// **Tuples per cell.** The cells' tuple lists (the CPU's capped lists, filled in tuple
/// order) are built like the index above: atomic counts, a scan, an atomic fill, each list
/// sorted by tuple index — the CPU's order, since a tuple pushes into its cells in tuple
/// order. The early duplicate remover then runs one thread per cell (it only writes "dup"
/// and reads the hit counts, which no write changes). `max_active_doublets` opens lists in
/// push order here too: where it binds, the host replays the lists with the CPU's function.
/// `track_quality` builds the same lists from the `ntuplets` product with these kernels.
pub const CA_NTUPLETS: &str = include_str!("../kernels/ca_ntuplets.cu");

/// The kernel functions of [`CA_NTUPLETS`].
pub const CA_NTUPLETS_KERNELS: &[&str] = &[
    "cn_check_cells",
    "cn_index_count",
    "cn_index_scan",
    "cn_index_fill",
    "cn_index_rank",
    "cn_connect",
    "sg_tile_sum",
    "sg_tile_scan",
    "nt_list_stats",
    "nt_alive_bits",
    "nt_list_offsets",
    "nt_fishbone",
    "nt_search",
    "ct_count",
    "ct_fill",
    "ct_sort",
    "nt_early_dup",
];

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_reco::tracks::doublets::{N_LAYERS, PHI_BINS};

    /// The `#define`s of the source equal the Rust constants they stand for.
    #[test]
    fn source_constants_match_rust() {
        let def = |name: &str| -> String {
            let l = CA_DOUBLETS
                .lines()
                .find(|l| l.starts_with(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("{name}"));
            l.split_whitespace().nth(2).unwrap().to_string()
        };
        assert_eq!(def("CA_N_LAYERS"), N_LAYERS.to_string());
        assert_eq!(def("CA_PHI_BINS"), PHI_BINS.to_string());
        assert_eq!(def("CA_PAIR_INTS"), PAIR_INTS.to_string());
        assert_eq!(def("CA_PAIR_FLOATS"), PAIR_FLOATS.to_string());
        assert!(
            def("CA_SCAN_MAX").parse::<u32>().unwrap() >= SCAN_BLOCK
                && SCAN_BLOCK.is_power_of_two()
        );
        assert_eq!(BIN_STARTS_PER_EVENT, N_LAYERS * PHI_BINS + 1);
        // Invalid hits are the ones above det index 2000, as in the CPU search.
        assert_eq!(def("CA_MAX_VALID_DET"), "2000");
        assert_eq!(
            (
                FLAG_Z0_CUT,
                FLAG_PT_CUT,
                FLAG_CLUSTER_CUT,
                FLAG_IDEAL_CONDITIONS
            ),
            (1, 2, 4, 8)
        );
        for k in CA_DOUBLETS_KERNELS {
            assert!(
                CA_DOUBLETS.contains(&format!("__global__ void {k}(")),
                "{k}"
            );
        }
        let cdef = |name: &str| -> String {
            let l = CA_NTUPLETS
                .lines()
                .find(|l| l.starts_with(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("{name}"));
            l.split_whitespace().nth(2).unwrap().to_string()
        };
        use quiver_reco::tracks::ntuplets::{LAST_BARREL_DET_INDEX, LAST_BPIX1_DET_INDEX};
        assert_eq!(cdef("CN_LAST_BPIX1_DET"), LAST_BPIX1_DET_INDEX.to_string());
        assert_eq!(cdef("CN_KEPT"), CONNECT_KEPT.to_string());
        assert_eq!(
            cdef("CN_LAST_BARREL_DET"),
            LAST_BARREL_DET_INDEX.to_string()
        );
        assert!(cdef("CN_SCAN_MAX").parse::<u32>().unwrap() >= SCAN_BLOCK);
        assert!(
            cdef("CN_SCAN_MAX").parse::<u32>().unwrap() >= 256,
            "the segmented scan's block (steps::SEG_BLOCK)"
        );
        assert_eq!(def("CA_STATS_RUN"), STATS_RUN.to_string());
        assert_eq!(cdef("NT_STATS_RUN"), STATS_RUN.to_string());
        assert_eq!(cdef("CN_RANK_LANES"), RANK_LANES.to_string());
        for k in CA_NTUPLETS_KERNELS {
            assert!(
                CA_NTUPLETS.contains(&format!("__global__ void {k}(")),
                "{k}"
            );
        }
    }
}
