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
pub const CA_DOUBLETS: &str = concat!(
    block_scan_source!(),
    r#"
#define CA_N_LAYERS 10
#define CA_PHI_BINS 128
#define CA_BINS (CA_N_LAYERS * CA_PHI_BINS)
#define CA_BIN_STARTS (CA_BINS + 1)
#define CA_MAX_VALID_DET 2000
#define CA_PAIR_INTS 6
#define CA_PAIR_FLOATS 3
#define CA_SCAN_MAX 1024

__device__ __forceinline__ i32 ca_bin(short iphi) { return (((i32)iphi) >> 9) & 127; }

// Last s in [0, n) with start[s] <= k (start non-decreasing, start[0] <= k).
__device__ __forceinline__ u32 ca_segment(const u32* start, u32 n, u32 k) {
    u32 lo = 0u, hi = n;
    while (hi - lo > 1u) { u32 mid = (lo + hi) / 2u; if (start[mid] <= k) lo = mid; else hi = mid; }
    return lo;
}

// The event of batch hit h and its layer (-1 for a hit outside the layers or invalid).
__device__ __forceinline__ i32 ca_hit_layer(u32 h, const u32* hit_off, u32 n_events, const u32* layer_start,
                                            const u16* det, u32* event, u32* local) {
    u32 e = ca_segment(hit_off, n_events, h);
    u32 li = h - hit_off[e];
    *event = e; *local = li;
    if ((u32)det[h] > CA_MAX_VALID_DET) return -1;
    const u32* ls = layer_start + e * 11u;
    for (i32 l = 0; l < CA_N_LAYERS; ++l) {
        if (li >= ls[l] && li < ls[l + 1]) return l;
    }
    return -1;
}

extern "C" __global__ void ca_bin_count(
    const u16* det, const short* iphi, u32 n_hits, const u32* hit_off, const u32* layer_start, u32 n_events,
    u32* bin_count)
{
    u32 h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= n_hits) return;
    u32 e, li;
    i32 l = ca_hit_layer(h, hit_off, n_events, layer_start, det, &e, &li);
    if (l < 0) return;
    atomicAdd(&bin_count[e * CA_BINS + (u32)l * CA_PHI_BINS + (u32)ca_bin(iphi[h])], 1u);
}

// One thread per event: bin starts (batch-global, from the event's first hit) and the fill
// cursors.
extern "C" __global__ void ca_bin_scan(const u32* bin_count, const u32* hit_off, u32 n_events, u32* bin_start, u32* cursor)
{
    u32 e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_events) return;
    u32 s = hit_off[e];
    for (u32 b = 0u; b < CA_BINS; ++b) {
        bin_start[e * CA_BIN_STARTS + b] = s;
        cursor[e * CA_BIN_STARTS + b] = s;
        s += bin_count[e * CA_BINS + b];
    }
    bin_start[e * CA_BIN_STARTS + CA_BINS] = s;
    cursor[e * CA_BIN_STARTS + CA_BINS] = s;
}

extern "C" __global__ void ca_bin_fill(
    const u16* det, const short* iphi, u32 n_hits, const u32* hit_off, const u32* layer_start, u32 n_events,
    u32* cursor, u32* packed_idx)
{
    u32 h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= n_hits) return;
    u32 e, li;
    i32 l = ca_hit_layer(h, hit_off, n_events, layer_start, det, &e, &li);
    if (l < 0) return;
    u32 pos = atomicAdd(&cursor[e * CA_BIN_STARTS + (u32)l * CA_PHI_BINS + (u32)ca_bin(iphi[h])], 1u);
    packed_idx[pos] = li;
}

// One thread per (event, bin): the bin's hits by descending index (the CPU's order), then
// their z, r, φ and y-size gathered in that order.
extern "C" __global__ void ca_bin_sort(
    const u32* bin_start, u32 n_events, const u32* hit_off,
    const float* z, const float* r, const short* iphi, const short* size_y,
    u32* packed_idx, float* packed_z, float* packed_r, short* packed_iphi, short* packed_sy)
{
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_events * CA_BINS) return;
    u32 e = t / CA_BINS, b = t % CA_BINS;
    u32 s = bin_start[e * CA_BIN_STARTS + b], end = bin_start[e * CA_BIN_STARTS + b + 1u];
    for (u32 a = s + 1u; a < end; ++a) {
        u32 v = packed_idx[a];
        u32 j = a;
        while (j > s && packed_idx[j - 1u] < v) { packed_idx[j] = packed_idx[j - 1u]; --j; }
        packed_idx[j] = v;
    }
    u32 hb = hit_off[e];
    for (u32 a = s; a < end; ++a) {
        u32 h = hb + packed_idx[a];
        packed_z[a] = z[h]; packed_r[a] = r[h]; packed_iphi[a] = iphi[h]; packed_sy[a] = size_y[h];
    }
}

// The candidate scan of work item k (event, pair, inner hit). Returns its number of cells;
// with write != 0 stores them from cell first (event-local) on, up to max_doublets.
__device__ u32 ca_item(
    u32 k, u32 write, const u32* item_start, u32 n_pairs, const u32* hit_off, const u32* layer_start,
    const float* z, const float* r, const short* iphi, const short* size_y, const u16* det,
    const u32* bin_start, const u32* packed_idx, const float* packed_z, const float* packed_r,
    const short* packed_iphi, const short* packed_sy, u32 n_events,
    const i32* pair_i, const float* pair_f, u32 flags, float z0_cut, float dzdr_fact, float min_radius2_t4,
    float i2p, i32 max_dy_pred, u32 max_doublets, u32 first, u32 cell_base, u32* out_inner, u32* out_outer, u8* out_pair)
{
    u32 seg = ca_segment(item_start, n_events * n_pairs, k);
    u32 e = seg / n_pairs, p = seg % n_pairs;
    const i32* pi = pair_i + p * CA_PAIR_INTS;
    const float* pf = pair_f + p * CA_PAIR_FLOATS;
    i32 inner = pi[0], outer = pi[1];
    const u32* ls = layer_start + e * 11u;
    u32 i = ls[inner] + (k - item_start[seg]);
    u32 h = hit_off[e] + i;
    u32 mi = det[h];
    if (mi > CA_MAX_VALID_DET) return 0u;
    float mez = z[h];
    if (mez < pf[0] || mez > pf[1]) return 0u;
    i32 mes = -1;
    if (flags & 4u) {
        bool outer_ladder = (flags & 8u) != 0u || (mi / 8u) % 2u == 0u;
        mes = (inner > 0 || outer_ladder) ? (i32)size_y[h] : -1;
        if (mes > 0 && mes < pi[4]) return 0u;
    }
    short mep = iphi[h];
    float mer = r[h];
    i32 phicut = pi[2];
    i32 kl = ca_bin((short)(mep - phicut));
    i32 kh = ca_bin((short)(mep + phicut));
    i32 khh = (kh + 1) % CA_PHI_BINS;
    i32 r0a = 0, r0b = 0, r1a = 0, r1b = 0;
    if (kl < khh) { r0a = kl; r0b = khh; }
    else if (kl > khh) { r0a = kl; r0b = CA_PHI_BINS; r1a = 0; r1b = khh; }
    bool do_z0 = (flags & 1u) != 0u, do_pt = (flags & 2u) != 0u;
    bool barrel_size = (pi[5] & 1) != 0, forward_size = (pi[5] & 2) != 0;
    float maxr = pf[2];
    i32 dy_barrel = pi[3];
    const u32* bs = bin_start + e * CA_BIN_STARTS + (u32)outer * CA_PHI_BINS;
    u32 n = 0u;
    for (i32 run = 0; run < 2; ++run) {
        i32 b0 = run == 0 ? r0a : r1a, b1 = run == 0 ? r0b : r1b;
        if (b0 == b1) continue;
        u32 k0 = bs[b0], k1 = bs[b1];
        for (u32 kk = k0; kk < k1; ++kk) {
            float zo = packed_z[kk], ro = packed_r[kk];
            float dr = __fsub_rn(ro, mer);
            bool z0_fails = do_z0 && (dr > maxr || dr < 0.0f
                || fabsf(__fsub_rn(__fmul_rn(mez, ro), __fmul_rn(mer, zo))) > __fmul_rn(z0_cut, dr));
            i32 idphi = (i32)(short)(packed_iphi[kk] - mep);
            if (idphi < 0) idphi = -idphi;
            i32 so = (i32)packed_sy[kk];
            i32 dsize = so - mes;
            if (dsize < 0) dsize = -dsize;
            bool size_fails = barrel_size && mes > 0 && so > 0 && dsize > dy_barrel;
            float dphi = __fmul_rn((float)(short)(u16)idphi, i2p);
            float dro = __fsub_rn(ro, mer);
            bool pt_fails = do_pt && __fmul_rn(__fmul_rn(dphi, dphi), __fsub_rn(min_radius2_t4, __fmul_rn(mer, ro))) > __fmul_rn(dro, dro);
            if (z0_fails || idphi > phicut || size_fails || pt_fails) continue;
            if (forward_size && mes > 0) {
                float q = fabsf(__fdiv_rn(__fsub_rn(mez, zo), __fsub_rn(mer, ro)));
                i32 pred = __float2int_rz(__fadd_rn(__fmul_rn(q, dzdr_fact), 0.5f));
                i32 d = mes - pred;
                if (d < 0) d = -d;
                if (d > max_dy_pred) continue;
            }
            if (write) {
                u32 c = first + n;
                if (c < max_doublets) {
                    out_inner[cell_base + c] = i; out_outer[cell_base + c] = packed_idx[kk]; out_pair[cell_base + c] = (u8)p;
                }
            }
            ++n;
        }
    }
    return n;
}

// write == 0: item_count[k] = cells of item k. write == 1: the cells of item k at
// cell_off[event] + item_first[k] + j, those below max_doublets in the event.
extern "C" __global__ void ca_doublets(
    u32 write, u32 n_items, const u32* item_start, u32 n_pairs, u32 n_events, const u32* hit_off, const u32* layer_start,
    const float* z, const float* r, const short* iphi, const short* size_y, const u16* det,
    const u32* bin_start, const u32* packed_idx, const float* packed_z, const float* packed_r,
    const short* packed_iphi, const short* packed_sy,
    const i32* pair_i, const float* pair_f, u32 flags, float z0_cut, float dzdr_fact, float min_radius2_t4,
    float i2p, i32 max_dy_pred, u32 max_doublets,
    u32* item_count, const u32* item_first, const u32* cell_off, u32* out_inner, u32* out_outer, u8* out_pair)
{
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n_items) return;
    u32 first = 0u, base = 0u;
    if (write) {
        first = item_first[k];
        if (first >= max_doublets) return;
        base = cell_off[ca_segment(item_start, n_events * n_pairs, k) / n_pairs];
    }
    u32 n = ca_item(k, write, item_start, n_pairs, hit_off, layer_start, z, r, iphi, size_y, det,
                    bin_start, packed_idx, packed_z, packed_r, packed_iphi, packed_sy, n_events,
                    pair_i, pair_f, flags, z0_cut, dzdr_fact, min_radius2_t4, i2p, max_dy_pred, max_doublets,
                    first, base, out_inner, out_outer, out_pair);
    if (!write) item_count[k] = n;
}

// One block per event (any power-of-two block size up to CA_SCAN_MAX): exclusive prefix
// sum of the event's item counts, and the event's total.
extern "C" __global__ void ca_item_scan(const u32* item_count, const u32* item_start, u32 n_pairs, u32* item_first, u32* event_total)
{
    __shared__ u32 buf[CA_SCAN_MAX];
    __shared__ u32 carry;
    u32 e = blockIdx.x;
    u32 total = block_exclusive_scan(item_count, item_start[e * n_pairs], item_start[(e + 1u) * n_pairs], item_first, buf, &carry, 0u);
    if (threadIdx.x == 0u) event_total[e] = total;
}

// The event of cell c (batch-global) from the event cell offsets.
__device__ __forceinline__ u32 ca_cell_event(const u32* cell_off, u32 n_events, u32 c) { return ca_segment(cell_off, n_events, c); }

extern "C" __global__ void ca_listed_count(const u32* outer, u32 n_cells, const u32* cell_off, u32 n_events, const u32* hit_off, u32* outer_count)
{
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cells) return;
    u32 e = ca_cell_event(cell_off, n_events, c);
    atomicAdd(&outer_count[hit_off[e] + outer[c]], 1u);
}

extern "C" __global__ void ca_listed(const u32* outer, u32 n_cells, const u32* cell_off, u32 n_events, const u32* hit_off,
                                     const u32* outer_count, u32 max_cells_per_hit, u8* listed)
{
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cells) return;
    u32 e = ca_cell_event(cell_off, n_events, c);
    listed[c] = outer_count[hit_off[e] + outer[c]] <= max_cells_per_hit ? 1 : 0;
}

// Per event, for the capacity_overflows rows: the cells not listed (their outer hit has
// more than max_cells_per_hit cells) and the most cells of any outer hit. Thread t counts
// the run of CA_STATS_RUN hits and the run of CA_STATS_RUN cells from t·CA_STATS_RUN, one
// atomic per event of its run (per element, the atomics on an event's two counters
// serialised: 0.19 ms per 16-event batch on an H200); the atomics only count.
#define CA_STATS_RUN 16
extern "C" __global__ void ca_overflow_stats(const u32* outer_count, u32 n_hits, const u32* hit_off, const u8* listed, u32 n_cells, const u32* cell_off, u32 n_events, u32* unlisted, u32* worst)
{
    u64 a64 = (u64)(blockIdx.x * blockDim.x + threadIdx.x) * CA_STATS_RUN;
    if (a64 < n_hits) {
        u32 a = (u32)a64, b = n_hits - a > CA_STATS_RUN ? a + CA_STATS_RUN : n_hits;
        u32 e = ca_segment(hit_off, n_events, a), m = 0u;
        for (u32 i = a; i < b; ++i) {
            while (i >= hit_off[e + 1u]) { atomicMax(&worst[e], m); m = 0u; ++e; }
            m = outer_count[i] > m ? outer_count[i] : m;
        }
        atomicMax(&worst[e], m);
    }
    if (a64 < n_cells) {
        u32 a = (u32)a64, b = n_cells - a > CA_STATS_RUN ? a + CA_STATS_RUN : n_cells;
        u32 e = ca_cell_event(cell_off, n_events, a), k = 0u;
        for (u32 c = a; c < b; ++c) {
            while (c >= cell_off[e + 1u]) { if (k) atomicAdd(&unlisted[e], k); k = 0u; ++e; }
            k += listed[c] ? 0u : 1u;
        }
        if (k) atomicAdd(&unlisted[e], k);
    }
}

// One thread per batch hit with more cells than the maximum: its first cells, in cell order.
extern "C" __global__ void ca_listed_overfull(const u32* outer, const u32* cell_off, u32 n_events, const u32* hit_off, u32 n_hits,
                                              const u32* outer_count, u32 max_cells_per_hit, u8* listed)
{
    u32 h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= n_hits || outer_count[h] <= max_cells_per_hit) return;
    u32 e = ca_segment(hit_off, n_events, h);
    u32 li = h - hit_off[e];
    u32 seen = 0u;
    for (u32 c = cell_off[e]; c < cell_off[e + 1u] && seen < max_cells_per_hit; ++c) {
        if (outer[c] == li) { listed[c] = 1; ++seen; }
    }
}
"#
);

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
pub const CA_NTUPLETS: &str = concat!(
    block_scan_source!(),
    r#"
#define CN_LAST_BPIX1_DET 96
#define CN_KEPT 2
#define CN_LAST_BARREL_DET 1184
#define CN_SCAN_MAX 1024

__device__ __forceinline__ u32 cn_segment(const u32* start, u32 n, u32 k) {
    u32 lo = 0u, hi = n;
    while (hi - lo > 1u) { u32 mid = (lo + hi) / 2u; if (start[mid] <= k) lo = mid; else hi = mid; }
    return lo;
}

// Cells naming a hit their event does not have (inner or outer index past its hits): the
// CPU step's error, checked on the device for cells that never left it. bad[0] becomes 1.
extern "C" __global__ void cn_check_cells(const u32* inner, const u32* outer, u32 n_cells, const u32* cell_off, u32 n_events, const u32* hit_off, u32* bad)
{
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cells) return;
    u32 e = cn_segment(cell_off, n_events, c);
    u32 nh = hit_off[e + 1u] - hit_off[e];
    if (inner[c] >= nh || outer[c] >= nh) atomicOr(bad, 1u);
}

// An index of the cells by one of their hits (`key`: inner or outer), built in four
// passes: count, scan, fill, sort. With `filter`, only the cells whose `only` flag is set
// (the listed cells, for the lists by outer hit). Cells per hit (batch hits):
extern "C" __global__ void cn_index_count(const u32* key, u32 filter, const u8* only, u32 n_cells, const u32* cell_off, u32 n_events, const u32* hit_off, u32* count)
{
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cells || (filter && !only[c])) return;
    u32 e = cn_segment(cell_off, n_events, c);
    atomicAdd(&count[hit_off[e] + key[c]], 1u);
}

// One block per event (power-of-two block size up to CN_SCAN_MAX): each hit's first entry
// (batch-global) in the index (n_hits + 1 entries), and the fill cursors.
extern "C" __global__ void cn_index_scan(const u32* count, const u32* hit_off, const u32* cell_off, u32 n_events, u32* start, u32* cursor)
{
    __shared__ u32 buf[CN_SCAN_MAX];
    __shared__ u32 carry;
    u32 e = blockIdx.x;
    if (e >= n_events) return;
    u32 h0 = hit_off[e], h1 = hit_off[e + 1u], base = cell_off[e];
    u32 sum = block_exclusive_scan(count, h0, h1, start, buf, &carry, 0u);
    for (u32 h = h0 + threadIdx.x; h < h1; h += blockDim.x) {
        u32 v = base + start[h];
        start[h] = v;
        cursor[h] = v;
    }
    if (e + 1u == n_events && threadIdx.x == 0u) start[hit_off[n_events]] = base + sum;
}

extern "C" __global__ void cn_index_fill(const u32* key, u32 filter, const u8* only, u32 n_cells, const u32* cell_off, u32 n_events, const u32* hit_off, u32* cursor, u32* index)
{
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cells || (filter && !only[c])) return;
    u32 e = cn_segment(cell_off, n_events, c);
    u32 pos = atomicAdd(&cursor[hit_off[e] + key[c]], 1u);
    index[pos] = c - cell_off[e];
}

// One thread per hit: its cells by ascending (event-local) index.
// Each hit's entries (distinct event-local cell indices, in the fill's atomic order) by
// ascending index, into sorted: CN_RANK_LANES threads per hit, each placing the entries
// lane, lane + CN_RANK_LANES, … at their rank among the hit's entries. No thread writes
// what another reads (an in-place insertion sort per hit took 0.31 ms per 16-event batch
// on an H200, its global loads and stores dependent).
#define CN_RANK_LANES 16
extern "C" __global__ void cn_index_rank(const u32* start, u32 n_hits, const u32* index, u32* sorted)
{
    u64 g = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (g / CN_RANK_LANES >= n_hits) return;
    u32 h = (u32)(g / CN_RANK_LANES), lane = (u32)(g % CN_RANK_LANES);
    u32 s = start[h], n = start[h + 1u] - s;
    for (u32 i = lane; i < n; i += CN_RANK_LANES) {
        u32 x = index[s + i], r = 0u;
        for (u32 k = 0u; k < n; ++k) r += index[s + k] < x ? 1u : 0u;
        sorted[s + r] = x;
    }
}

// ntuplets::are_aligned_rz, operation by operation.
__device__ __forceinline__ bool cn_aligned_rz(float r1, float z1, float ri, float zi, float ro, float zo, float ptmin, float theta_cut)
{
    float radius_diff = fabsf(__fsub_rn(r1, ro));
    float dz = __fsub_rn(z1, zo);
    float d13 = __fadd_rn(__fmul_rn(radius_diff, radius_diff), __fmul_rn(dz, dz));
    float p_min = __fmul_rn(ptmin, __fsqrt_rn(d13));
    float t = fabsf(__fadd_rn(__fadd_rn(__fmul_rn(z1, __fsub_rn(ri, ro)), __fmul_rn(zi, __fsub_rn(ro, r1))), __fmul_rn(zo, __fsub_rn(r1, ri))));
    return __fmul_rn(t, p_min) <= __fmul_rn(__fmul_rn(theta_cut, d13), radius_diff);
}

// ntuplets::CircleEq::new and the DCA cut, operation by operation.
__device__ __forceinline__ bool cn_dca_cut(float x1, float y1, float x2, float y2, float x3, float y3, float max_dca, float max_curv)
{
    bool noflip = fabsf(__fsub_rn(x3, x1)) < fabsf(__fsub_rn(y3, y1));
    float x1p = noflip ? __fsub_rn(x1, x2) : __fsub_rn(y1, y2);
    float y1p = noflip ? __fsub_rn(y1, y2) : __fsub_rn(x1, x2);
    float d12 = __fadd_rn(__fmul_rn(x1p, x1p), __fmul_rn(y1p, y1p));
    float x3p = noflip ? __fsub_rn(x3, x2) : __fsub_rn(y3, y2);
    float y3p = noflip ? __fsub_rn(y3, y2) : __fsub_rn(x3, x2);
    float d32 = __fadd_rn(__fmul_rn(x3p, x3p), __fmul_rn(y3p, y3p));
    float num = __fsub_rn(__fmul_rn(x1p, y3p), __fmul_rn(y1p, x3p));
    float det = __fsub_rn(__fmul_rn(d12, y3p), __fmul_rn(d32, y1p));
    float st2 = __fsub_rn(__fmul_rn(d12, x3p), __fmul_rn(d32, x1p));
    float seq = __fadd_rn(__fmul_rn(det, det), __fmul_rn(st2, st2));
    float al2 = __fdiv_rn(1.0f, __fsqrt_rn(seq));
    float be2 = __fmul_rn(-st2, al2);
    float ct = __fmul_rn(__fmul_rn(2.0f, num), al2);
    al2 = __fmul_rn(al2, det);
    float c = noflip ? ct : -ct;
    float alpha = noflip ? al2 : -be2;
    float beta = noflip ? be2 : -al2;
    if (c > max_curv) return false;
    float x = __fadd_rn(__fmul_rn(c, x2), alpha);
    float y = __fadd_rn(__fmul_rn(c, y2), beta);
    float dca0 = __fsub_rn(__fsqrt_rn(__fadd_rn(__fmul_rn(x, x), __fmul_rn(y, y))), 1.0f);
    return fabsf(dca0) < __fmul_rn(max_dca, fabsf(c));
}

// One thread per cell o (batch-global): the cells starting on its outer hit that connect to
// it, by ascending index. write == 0: count[o] = how many, and the first CN_KEPT of them in
// kept[o * CN_KEPT..]. write == 1: their event-local indices from out[push_off[e] + first[o]]
// on, and the used flags of both cells; a cell with at most CN_KEPT copies the kept ones
// (most cells: the tests are not run twice), the others run the tests again.
extern "C" __global__ void cn_connect(
    u32 write, u32 n_cells, const u32* cell_off, u32 n_events, const u32* hit_off,
    const float* x, const float* y, const float* z, const float* r, const u16* det,
    const u32* inner, const u32* outer, const u8* listed, const u32* start, const u32* by_inner,
    float ptmin, float theta_barrel, float theta_forward, float dca_inner, float dca_outer, float hard_curv,
    u32* count, const u32* first, const u32* push_off, u32* out, u8* used, u32* kept)
{
    u32 o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n_cells) return;
    if (!listed[o]) { if (!write) count[o] = 0u; return; }
    u32 e = cn_segment(cell_off, n_events, o);
    u32 hb = hit_off[e], cb = cell_off[e];
    if (write && count[o] <= CN_KEPT) {
        u32 c = count[o], at = push_off[e] + first[o];
        for (u32 k = 0u; k < c; ++k) {
            u32 idx = kept[(u64)o * CN_KEPT + k];
            out[at + k] = idx;
            used[cb + idx] = 1;
        }
        if (c > 0u) used[o] = 1;
        return;
    }
    u32 oi = hb + inner[o], h = hb + outer[o];
    float r1 = r[oi], z1 = z[oi], x1 = x[oi], y1 = y[oi];
    float max_dca = (u32)det[oi] < CN_LAST_BPIX1_DET ? dca_inner : dca_outer;
    u32 n = 0u;
    for (u32 k = start[h]; k < start[h + 1u]; ++k) {
        u32 idx = by_inner[k];
        u32 ci = cb + idx;
        u32 ii = hb + inner[ci], io = hb + outer[ci];
        float theta = (u32)det[ii] < CN_LAST_BARREL_DET ? theta_barrel : theta_forward;
        if (!cn_aligned_rz(r1, z1, r[ii], z[ii], r[io], z[io], ptmin, theta)) continue;
        if (!cn_dca_cut(x1, y1, x[ii], y[ii], x[io], y[io], max_dca, hard_curv)) continue;
        if (write) { out[push_off[e] + first[o] + n] = idx; used[ci] = 1; used[o] = 1; }
        else if (n < CN_KEPT) kept[(u64)o * CN_KEPT + n] = idx;
        ++n;
    }
    if (!write) count[o] = n;
}

// A segmented exclusive prefix sum in tiles, over all SMs rather than one block per
// segment: segment e is value[seg_off[e]..seg_off[e+1]), cut into `tiles` tiles of `tile`
// values (the last ones may be empty); block b handles tile b % tiles of segment b / tiles.
// sg_tile_sum writes each tile's sum; sg_tile_scan adds the sums of the segment's earlier
// tiles and scans its tile (first may be value), and the last tile's block writes the
// segment's total. u32 sums wrap, so the tiling changes no value. Any power-of-two block
// size up to CN_SCAN_MAX; tiles * tile fits in 32 bits (checked by the host).
__device__ __forceinline__ void sg_tile_range(const u32* seg_off, u32 tiles, u32 tile, u32* s, u32* end)
{
    u32 e = blockIdx.x / tiles, j = blockIdx.x % tiles;
    u32 s0 = seg_off[e], s1 = seg_off[e + 1u];
    u32 n = s1 - s0, a = j * tile;
    *s = a < n ? s0 + a : s1;
    *end = a < n && n - a > tile ? s0 + a + tile : s1;
}

// The sum of v over the block (power-of-two size; buf: blockDim.x words), in every thread.
__device__ __forceinline__ u32 sg_block_sum(u32 v, u32* buf)
{
    u32 t = threadIdx.x;
    buf[t] = v;
    __syncthreads();
    for (u32 off = blockDim.x >> 1; off > 0u; off >>= 1) {
        if (t < off) buf[t] += buf[t + off];
        __syncthreads();
    }
    u32 sum = buf[0];
    __syncthreads();
    return sum;
}

extern "C" __global__ void sg_tile_sum(const u32* value, const u32* seg_off, u32 tiles, u32 tile, u32* tile_sum)
{
    __shared__ u32 buf[CN_SCAN_MAX];
    u32 s, end;
    sg_tile_range(seg_off, tiles, tile, &s, &end);
    u32 v = 0u;
    for (u32 k = s + threadIdx.x; k < end; k += blockDim.x) v += value[k];
    u32 sum = sg_block_sum(v, buf);
    if (threadIdx.x == 0u) tile_sum[blockIdx.x] = sum;
}

extern "C" __global__ void sg_tile_scan(const u32* value, const u32* seg_off, u32 tiles, u32 tile, const u32* tile_sum, u32* first, u32* total)
{
    __shared__ u32 buf[CN_SCAN_MAX];
    __shared__ u32 carry;
    u32 e = blockIdx.x / tiles, j = blockIdx.x % tiles;
    u32 v = 0u;
    for (u32 i = threadIdx.x; i < j; i += blockDim.x) v += tile_sum[e * tiles + i];
    u32 base = sg_block_sum(v, buf);
    u32 s, end;
    sg_tile_range(seg_off, tiles, tile, &s, &end);
    u32 sum = block_exclusive_scan(value, s, end, first, buf, &carry, base);
    if (j + 1u == tiles && threadIdx.x == 0u) total[e] = base + sum;
}

// Per event: the cells with a non-empty neighbour list, and the neighbours past
// `per_list` in those lists. Thread t counts the run of NT_STATS_RUN cells from
// t·NT_STATS_RUN, one atomic per event of its run (as ca_overflow_stats); the atomics only
// count (u32 sums wrap: the grouping changes nothing).
#define NT_STATS_RUN 16
extern "C" __global__ void nt_list_stats(const u32* count, u32 n_cells, const u32* cell_off, u32 n_events, u32 per_list, u32* non_empty, u32* dropped)
{
    u64 a64 = (u64)(blockIdx.x * blockDim.x + threadIdx.x) * NT_STATS_RUN;
    if (a64 >= n_cells) return;
    u32 a = (u32)a64, b = n_cells - a > NT_STATS_RUN ? a + NT_STATS_RUN : n_cells;
    u32 e = cn_segment(cell_off, n_events, a), ne = 0u, dr = 0u;
    for (u32 c = a; c < b; ++c) {
        while (c >= cell_off[e + 1u]) {
            if (ne) atomicAdd(&non_empty[e], ne);
            if (dr) atomicAdd(&dropped[e], dr);
            ne = 0u; dr = 0u; ++e;
        }
        u32 n = count[c];
        if (n == 0u) continue;
        ne += 1u;
        if (n > per_list) dr += n - per_list;
    }
    if (ne) atomicAdd(&non_empty[e], ne);
    if (dr) atomicAdd(&dropped[e], dr);
}

// The cells' alive flags as an Arrow bitmap (bit k of word w: cell 32·w + k, LSB first:
// little-endian words are Arrow's byte order), so that 1 bit per cell comes back rather
// than the dead byte: thread w packs word w.
extern "C" __global__ void nt_alive_bits(const u8* dead, u32 n_cells, u32* words)
{
    u32 w = blockIdx.x * blockDim.x + threadIdx.x;
    if ((u64)w * 32u >= n_cells) return;
    u32 c0 = w * 32u, bits = 0u;
    for (u32 k = 0u; k < 32u && c0 + k < n_cells; ++k)
        if (!dead[c0 + k]) bits |= 1u << k;
    words[w] = bits;
}

// The tuples' list offsets as the product has them (batch rows; thread t for t <= n): the
// hits' from the exclusive scan of the tuple lengths (`first`, `total` its sum), the cells'
// one fewer per tuple before t.
extern "C" __global__ void nt_list_offsets(u32 n, const u32* first, const u32* total, u32* hit_off, u32* cell_off)
{
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t > n) return;
    u32 h = t < n ? first[t] : total[0];
    hit_off[t] = h;
    cell_off[t] = h - t;
}

// ntuplets::fishbone for the cells ending on one hit (one thread per batch hit): its listed
// cells by ascending index (start/by_outer), taken when used (and, with check_track, when
// they carry a tuple); of two taken cells whose inner hits lie on different modules but on
// one line through the hit, the farther one dies (dead[c] = 1). Pairs are visited in the CPU's order,
// with its `break`; a cell dies only by its own outer hit's thread.
__device__ __forceinline__ bool nt_taken(u32 c, const u8* used, u32 check_track, const u8* has_track)
{
    return used[c] && (!check_track || has_track[c]);
}

extern "C" __global__ void nt_fishbone(
    u32 n_hits, const u32* hit_off, u32 n_events, const u32* cell_off,
    const float* x, const float* y, const float* z, const u16* det, const u32* inner,
    const u32* start, const u32* by_outer, const u8* used, u32 check_track, const u8* has_track, u8* dead)
{
    u32 h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= n_hits) return;
    u32 k0 = start[h], k1 = start[h + 1u];
    if (k1 - k0 < 2u) return;
    u32 e = cn_segment(hit_off, n_events, h);
    u32 hb = hit_off[e], cb = cell_off[e];
    float xo = x[h], yo = y[h], zo = z[h];
    for (u32 a = k0; a < k1; ++a) {
        u32 ca = cb + by_outer[a];
        if (!nt_taken(ca, used, check_track, has_track)) continue;
        u32 ia = hb + inner[ca];
        float xa = __fsub_rn(x[ia], xo), ya = __fsub_rn(y[ia], yo), za = __fsub_rn(z[ia], zo);
        float na = __fadd_rn(__fadd_rn(__fmul_rn(xa, xa), __fmul_rn(ya, ya)), __fmul_rn(za, za));
        u16 da = det[ia];
        for (u32 b = a + 1u; b < k1; ++b) {
            u32 cc = cb + by_outer[b];
            if (!nt_taken(cc, used, check_track, has_track)) continue;
            u32 ib = hb + inner[cc];
            float xb = __fsub_rn(x[ib], xo), yb = __fsub_rn(y[ib], yo), zb = __fsub_rn(z[ib], zo);
            float nb = __fadd_rn(__fadd_rn(__fmul_rn(xb, xb), __fmul_rn(yb, yb)), __fmul_rn(zb, zb));
            float cos12 = __fadd_rn(__fadd_rn(__fmul_rn(xa, xb), __fmul_rn(ya, yb)), __fmul_rn(za, zb));
            if (da != det[ib] && __fmul_rn(cos12, cos12) >= __fmul_rn(__fmul_rn(0.99999f, na), nb)) {
                if (na > nb) { dead[ca] = 1u; break; }
                dead[cc] = 1u;
            }
        }
    }
}

#define NT_MAX_DEPTH 6

// ntuplets::find_ntuplets' depth-first search from one cell (one thread per batch cell),
// iteratively, over the live outer neighbours (the first per_list of each connect list).
// write == 0: n_tuples[c], n_hits[c] = the tuples it finds and their hits. write == 1:
// writes them at their places in the CPU's tuple order: event-local tuple tuple_first[c]
// on, hit hit_first[c] on (a tuple of n hits has n - 1 cells, so its cells start at the
// hit position minus the tuple index; tuple_cstart/tuple_cend: the batch-global range of a
// stored tuple's cells); tuples from max_tuples on are not stored.
// A path longer than NT_MAX_DEPTH cells sets *error (the CPU's PathTooLong).
extern "C" __global__ void nt_search(
    u32 write, u32 n_cells, const u32* cell_off, u32 n_events,
    const u32* inner, const u32* outer, const u8* pair, const u8* dead,
    const u32* ncount, const u32* first, const u32* push_off, const u32* nbr, u32 per_list,
    u32 min_hits, u32 max_tuples,
    u32* n_tuples, u32* n_hits, const u32* tuple_first, const u32* hit_first, const u32* tuple_off, const u32* hit_off_out,
    u32* tuple_len, u32* tuple_cstart, u32* tuple_cend, u32* out_hits, u32* out_cells, u32* error)
{
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cells) return;
    u32 pid = pair[c];
    bool doit = min_hits > 3u ? pid < 3u : (pid < 8u || pid > 12u);
    if (dead[c] || !doit) { if (!write) { n_tuples[c] = 0u; n_hits[c] = 0u; } return; }
    u32 e = cn_segment(cell_off, n_events, c);
    u32 cb = cell_off[e], pb = push_off[e];
    u32 stack[NT_MAX_DEPTH], pos[NT_MAX_DEPTH];
    bool last[NT_MAX_DEPTH];
    u32 t = 0u, nh = 0u;
    u32 t0 = write ? tuple_first[c] : 0u, h0 = write ? hit_first[c] : 0u;
    u32 depth = 1u;
    stack[0] = c - cb; pos[0] = 0u; last[0] = true;
    while (depth > 0u) {
        u32 d = depth - 1u;
        u32 cell = cb + stack[d];
        u32 len = ncount[cell] < per_list ? ncount[cell] : per_list;
        if (pos[d] < len) {
            u32 other = nbr[pb + first[cell] + pos[d]];
            pos[d] += 1u;
            if (dead[cb + other]) continue;
            last[d] = false;
            if (depth == NT_MAX_DEPTH) { *error = 1u; return; }
            stack[depth] = other; pos[depth] = 0u; last[depth] = true;
            ++depth;
            continue;
        }
        if (last[d] && depth + 1u >= min_hits) {
            if (write) {
                u32 it = t0 + t;
                if (it < max_tuples) {
                    u32 hp = hit_off_out[e] + h0 + nh;
                    u32 cp = hit_off_out[e] - tuple_off[e] + h0 + nh - it;
                    tuple_len[tuple_off[e] + it] = depth + 1u;
                    tuple_cstart[tuple_off[e] + it] = cp;
                    tuple_cend[tuple_off[e] + it] = cp + depth;
                    for (u32 i = 0u; i < depth; ++i) {
                        out_hits[hp + i] = inner[cb + stack[i]];
                        out_cells[cp + i] = stack[i];
                    }
                    out_hits[hp + depth] = outer[cell];
                }
            }
            t += 1u; nh += depth + 1u;
        }
        depth = d;
    }
    if (!write) { n_tuples[c] = t; n_hits[c] = nh; }
}

// The cells' tuple lists (the CPU's CappedLists, filled in tuple order), built on the
// device in four passes: ct_count, the segmented scan (sg_tile_*) of the counts, ct_fill,
// ct_sort. Tuples of event
// e: tup_off[e]..tup_off[e + 1] (batch numbering), the first `limit` of them listed; tuple
// g's cells: cells[cstart[g]..cend[g]] (event-local cell indices). The list of batch cell c
// (event e) is vals[base[e] + first[c] ..][..count[c]], by ascending event-local tuple
// index after ct_sort; the CPU keeps its first per_list entries (nt_list_stats counts the
// rest, and the non-empty lists: the lists opened under max_active_doublets follow the
// CPU's push order, so where it binds the host replays the lists instead). A cell index
// past its event's cells sets *bad and is not listed.
extern "C" __global__ void ct_count(u32 n_tuples, const u32* tup_off, u32 n_events, u32 limit, const u32* cstart, const u32* cend,
    const u32* cells, const u32* cell_off, u32* count, u32* bad)
{
    u32 g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n_tuples) return;
    u32 e = cn_segment(tup_off, n_events, g);
    if (g - tup_off[e] >= limit) return;
    u32 cb = cell_off[e], nc = cell_off[e + 1u] - cb;
    for (u32 k = cstart[g]; k < cend[g]; ++k) {
        u32 c = cells[k];
        if (c >= nc) { atomicOr(bad, 1u); continue; }
        atomicAdd(&count[cb + c], 1u);
    }
}

extern "C" __global__ void ct_fill(u32 n_tuples, const u32* tup_off, u32 n_events, u32 limit, const u32* cstart, const u32* cend,
    const u32* cells, const u32* cell_off, const u32* first, const u32* base, u32* cursor, u32* vals)
{
    u32 g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n_tuples) return;
    u32 e = cn_segment(tup_off, n_events, g);
    u32 it = g - tup_off[e];
    if (it >= limit) return;
    u32 cb = cell_off[e], nc = cell_off[e + 1u] - cb;
    for (u32 k = cstart[g]; k < cend[g]; ++k) {
        u32 c = cells[k];
        if (c >= nc) continue;
        vals[base[e] + first[cb + c] + atomicAdd(&cursor[cb + c], 1u)] = it;
    }
}

// One thread per batch cell: its list by ascending tuple index (the CPU's push order).
extern "C" __global__ void ct_sort(u32 n_cells, const u32* cell_off, u32 n_events, const u32* count, const u32* first, const u32* base, u32* vals)
{
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cells || count[c] < 2u) return;
    u32 e = cn_segment(cell_off, n_events, c);
    u32* l = vals + base[e] + first[c];
    for (u32 a = 1u; a < count[c]; ++a) {
        u32 v = l[a], b = a;
        while (b > 0u && l[b - 1u] > v) { l[b] = l[b - 1u]; --b; }
        l[b] = v;
    }
}

// ntuplets::early_duplicate_remover, one thread per batch cell: of a (capped) list of two
// tuples or more, those with fewer hits than the longest become dup (q[g] = 1; every write
// is the same value and no write changes what is read). With a tuple overflow the last
// stored tuple was emptied before the remover ran: it counts as 0 hits. has_track[c]: the
// capped list is not empty (what the late fishbone tests).
extern "C" __global__ void nt_early_dup(u32 n_cells, const u32* cell_off, u32 n_events, const u32* count, const u32* first, const u32* base,
    const u32* vals, u32 per_list, const u32* tup_off, const u32* tuple_len, const u32* found, u32 max_tuples, u8* q, u8* has_track)
{
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cells) return;
    u32 k = count[c] < per_list ? count[c] : per_list;
    has_track[c] = k > 0u;
    if (k < 2u) return;
    u32 e = cn_segment(cell_off, n_events, c);
    const u32* l = vals + base[e] + first[c];
    u32 t0 = tup_off[e];
    u32 emptied = found[e] > max_tuples ? max_tuples - 1u : 0xffffffffu;
    u32 max_nh = 0u;
    for (u32 i = 0u; i < k; ++i) {
        u32 nh = l[i] == emptied ? 0u : tuple_len[t0 + l[i]];
        if (nh > max_nh) max_nh = nh;
    }
    for (u32 i = 0u; i < k; ++i) {
        u32 nh = l[i] == emptied ? 0u : tuple_len[t0 + l[i]];
        if (nh != max_nh) q[t0 + l[i]] = 1u;
    }
}
"#
);

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
