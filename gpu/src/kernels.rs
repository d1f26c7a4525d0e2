//! CUDA C sources of the local-reconstruction kernels, compiled by NVRTC at first use.
//!
//! Bit-identity with the CPU cores (`quiver_reco::local`) rests on three rules:
//! - every float operation is written as an explicit round-to-nearest intrinsic
//!   (`__fmul_rn`, `__fadd_rn`, `__fsub_rn`), which NVRTC never contracts into an FMA, and the
//!   sources are also compiled with `--fmad=false`;
//! - float → int conversions use `__float2int_rz` (PTX `cvt.rzi.s32.f32`): truncation,
//!   saturation and NaN → 0, exactly Rust's `as i32`;
//! - integer sums that the CPU does in order are done with atomics only where the result is
//!   order independent (two's-complement wrapping adds, minima), and labels are minima, so
//!   the result does not depend on thread scheduling.
//!
//! The constants of the detector and of the formats are generated from the Rust constants
//! ([`prelude`]) so the two sides cannot drift apart.

use quiver_formats::conditions::{FED_ID_MIN, MAX_FED, MAX_LINK, MAX_ROC};
use quiver_formats::topology::{
    NUM_COLS_IN_MODULE, NUM_COLS_IN_ROC, NUM_ROWS_IN_MODULE, NUM_ROWS_IN_ROC, X_OFFSET, Y_OFFSET,
};
use quiver_reco::local::{INVALID_MODULE, MAX_CLUSTERS_PER_MODULE, MAX_NUM_MODULES};

/// Threads per block of `clusterize` (one block per module run). Modules hold few digis, so
/// small blocks let more modules run at once; the measurements behind 64 are in
/// docs/decisions.md, "GPU kernels: what a batch's work costs on all SMs". The kernel is
/// written for any power of two up to `CLUS_SCAN_MAX` (the emulation tests run it with 1 and
/// 8 threads).
pub const CLUSTER_BLOCK: u32 = 64;
/// Threads per block of `charge_cut` (one block per module run), for the same reason as
/// [`CLUSTER_BLOCK`].
pub const CUT_BLOCK: u32 = 64;
/// Threads per block of `rechits` (one block per module run), as [`CLUSTER_BLOCK`]. Its
/// shared memory is sized per launch for the batch's largest run
/// ([`RECHITS_SHARED_PER_CLUSTER`] bytes per cluster) rather than for the full cluster
/// capacity, so more blocks fit an SM (numbers in the same docs/decisions.md section).
pub const RECHITS_BLOCK: u32 = 64;
/// Shared memory of a `rechits` block per cluster of its capacity: nine 32-bit values.
pub const RECHITS_SHARED_PER_CLUSTER: u32 = 9 * 4;
/// Threads per block of the per-element kernels.
pub const ELEMENT_BLOCK: u32 = 256;

/// Status codes a kernel writes when an input is outside what the CPU core accepts; the
/// step then re-runs the batch on the CPU to report the CPU's exact error.
pub const STATUS_BAD_INPUT: u32 = 1;

/// `#define`s shared by all kernels, from the Rust constants.
pub fn prelude() -> String {
    format!(
        "typedef unsigned int u32;\ntypedef int i32;\ntypedef unsigned short u16;\ntypedef unsigned char u8;\n\
         typedef unsigned long long u64;\n\
         #define FED_ID_MIN {FED_ID_MIN}u\n#define MAX_FED {MAX_FED}u\n#define MAX_LINK {MAX_LINK}u\n#define MAX_ROC {MAX_ROC}u\n\
         #define INVALID_MODULE {INVALID_MODULE}u\n#define N_ROWS {NUM_ROWS_IN_MODULE}\n#define N_COLS {NUM_COLS_IN_MODULE}\n\
         #define MAX_CLUS_PER_MODULE {MAX_CLUSTERS_PER_MODULE}\n#define MAX_MODULES {MAX_NUM_MODULES}u\n#define STATUS_BAD_INPUT {STATUS_BAD_INPUT}u\n\
         #define ROWS_IN_ROC {NUM_ROWS_IN_ROC}u\n#define COLS_IN_ROC {NUM_COLS_IN_ROC}u\n#define X_OFFSET ({X_OFFSET})\n#define Y_OFFSET ({Y_OFFSET})\n\
         #ifndef DYN_SHARED\n#define DYN_SHARED(T, name) extern __shared__ T name[]\n#endif\n"
    )
}

/// raw_to_digis: one thread per 32-bit payload word. The FED framing (headers, trailers,
/// their errors) is done on the host; the device decodes words against the cabling map.
/// Errors found in words are appended to a compact list (word index, type, raw id) that
/// the host sorts by word index, which restores the CPU's order.
pub const RAW_TO_DIGIS: &str = r#"
#define DUMMY_DET_ID 0xffffffffu
struct Cabling {
    const u32* link; const u32* roc; const u32* raw_id; const u32* roc_in_det; const u32* module_id;
    const u8* bad_rocs; const u8* mod_to_unp; u32 size;
};

__device__ __forceinline__ bool cab_index(u32 fed_idx, u32 link, u32 roc, u32* out) {
    if (link >= 1u && link <= MAX_LINK && roc >= 1u && roc <= MAX_ROC && fed_idx < MAX_FED) {
        *out = fed_idx * MAX_LINK * MAX_ROC + (link - 1u) * MAX_ROC + (roc - 1u);
        return true;
    }
    return false;
}

__device__ u32 check_roc(u32 ww, u32 fed_idx, u32 link, const Cabling& c) {
    u32 t = (ww >> 21) & 0x1fu;
    if (t == 25u) {
        u32 i;
        if (cab_index(fed_idx, link, 1u, &i)) {
            if (i > 0u && i < c.size && !(c.link[i] == link && c.roc[i] == 1u)) return 0u;
        }
        return 25u;
    }
    if ((t >= 26u && t <= 29u) || t == 31u) return t;
    if (t == 30u) return ((ww >> 8) & 0xfu) == 1u ? 40u : 30u;
    return 0u;
}

__device__ u32 lookup_raw_id(u32 fed_idx, u32 link, u32 roc, const Cabling& c) {
    u32 i;
    if (cab_index(fed_idx, link, roc, &i) && c.raw_id[i] != 9999u) return c.raw_id[i];
    return DUMMY_DET_ID;
}

__device__ u32 err_raw_id(u32 fed_idx, u32 ww, u32 t, const Cabling& c) {
    u32 link = (ww >> 26) & 0x3fu;
    switch (t) {
    case 25u: case 30u: case 31u: case 36u: case 40u:
        return lookup_raw_id(fed_idx, link, 1u, c);
    case 29u: {
        i32 local_ch = (i32)(ww & 1u) + 2 * (i32)((ww >> 1) & 1u) + 3 * (i32)((ww >> 2) & 1u)
                     + 4 * (i32)((ww >> 3) & 1u) + 5 * (i32)((ww >> 4) & 1u);
        i32 block = (i32)((ww >> 8) & 0x7u);
        i32 chan = (block % 2 == 0) ? (block / 2) * 9 + local_ch : ((block - 1) / 2) * 9 + 4 + local_ch;
        if (chan < 1 || chan > 36) return DUMMY_DET_ID;
        return lookup_raw_id(fed_idx, (u32)chan, 1u, c);
    }
    case 37u: case 38u:
        return lookup_raw_id(fed_idx, link, (ww >> 21) & 0x1fu, c);
    default:
        return DUMMY_DET_ID;
    }
}

// Segments: words seg_start[s]..seg_start[s+1] belong to FED seg_fed[s].
extern "C" __global__ void raw_to_digis(
    const u32* words, u32 n_words, const u32* seg_start, const u32* seg_fed, u32 n_seg,
    const u32* c_link, const u32* c_roc, const u32* c_raw_id, const u32* c_roc_in_det, const u32* c_module_id,
    const u8* c_bad_rocs, const u8* c_mod_to_unp, u32 c_size, u32 use_quality,
    u16* xx, u16* yy, u16* adc_out, u16* module_out, u32* raw_id_out, u32* pdigi_out,
    u32* err_count, u32* err_index, u8* err_type, u32* err_raw, u32* status)
{
    u32 w = blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= n_words) return;
    Cabling c = { c_link, c_roc, c_raw_id, c_roc_in_det, c_module_id, c_bad_rocs, c_mod_to_unp, c_size };
    // The segment holding word w: last s with seg_start[s] <= w.
    u32 lo = 0u, hi = n_seg;
    while (hi - lo > 1u) { u32 mid = (lo + hi) / 2u; if (seg_start[mid] <= w) lo = mid; else hi = mid; }
    u32 fed_idx = seg_fed[lo] - FED_ID_MIN;
    u32 ww = words[w];
    xx[w] = 0; yy[w] = 0; adc_out[w] = 0; module_out[w] = (u16)INVALID_MODULE; raw_id_out[w] = 0u; pdigi_out[w] = 0u;
    if (ww == 0u) return;
    u32 link = (ww >> 26) & 0x3fu;
    u32 roc = (ww >> 21) & 0x1fu;
    u32 et = check_roc(ww, fed_idx, link, c);
    u32 e_type = 0u, e_raw = 0u;
    u32 index;
    if (roc >= 8u && et != 0u) {
        e_type = et; e_raw = err_raw_id(fed_idx, ww, et, c);
    } else if (link < 1u || link > MAX_LINK) {
        e_type = 35u; e_raw = DUMMY_DET_ID;
    } else if (!cab_index(fed_idx, link, roc, &index)) {
        if (roc != 25u) { e_type = 36u; e_raw = err_raw_id(fed_idx, ww, 36u, c); }
    } else if (!(use_quality && c.bad_rocs[index] != 0) && c.mod_to_unp[index] == 0) {
        u32 raw_id = c.raw_id[index];
        u32 roc_in_det = c.roc_in_det[index];
        u32 module_id = c.module_id[index];
        if (roc_in_det >= 16u || (module_id >= 2000u && module_id != INVALID_MODULE)) {
            atomicOr(status, STATUS_BAD_INPUT);
            return;
        }
        bool barrel = ((raw_id >> 25) & 0x7u) == 1u;
        u32 layer; i32 side;
        if (barrel) {
            u32 module = (raw_id >> 2) & 0x3ffu;
            layer = (raw_id >> 20) & 0xfu;
            side = module < 5u ? -1 : 1;
        } else {
            u32 panel = (raw_id >> 10) & 0x3u;
            layer = 0u;
            side = panel == 1u ? -1 : 1;
        }
        u32 lr, lc;
        bool ok;
        if (layer == 1u) {
            lc = (ww >> 15) & 0x3fu;
            lr = (ww >> 8) & 0x7fu;
            ok = lr < 80u && lc < 52u;
        } else {
            u32 dcol = (ww >> 16) & 0x1fu;
            u32 pxid = (ww >> 8) & 0xffu;
            ok = dcol < 26u && pxid >= 2u && pxid < 162u;
            lr = 80u - pxid / 2u;
            lc = dcol * 2u + pxid % 2u;
        }
        if (!ok) {
            e_type = 37u; e_raw = raw_id;
        } else {
            bool orientation_b = !barrel || (side == -1 && layer != 1u);
            u32 row, col;
            if (orientation_b) {
                if (roc_in_det < 8u) { row = lr; col = (8u - roc_in_det) * 52u - 1u - lc; }
                else { row = 159u - lr; col = (roc_in_det - 8u) * 52u + lc; }
            } else {
                if (roc_in_det < 8u) { row = 159u - lr; col = roc_in_det * 52u + lc; }
                else { row = lr; col = (16u - roc_in_det) * 52u - 1u - lc; }
            }
            u32 adc = ww & 0xffu;
            xx[w] = (u16)row; yy[w] = (u16)col; adc_out[w] = (u16)adc; module_out[w] = (u16)module_id;
            raw_id_out[w] = raw_id;
            pdigi_out[w] = row | (col << 11) | ((adc < 1023u ? adc : 1023u) << 22);
        }
    }
    if (e_type != 0u) {
        u32 k = atomicAdd(err_count, 1u);
        err_index[k] = w; err_type[k] = (u8)e_type; err_raw[k] = e_raw;
    }
}
"#;

/// calibrate: one thread per digi. Invalid digis pass through unchanged.
pub const CALIBRATE: &str = r#"
extern "C" __global__ void calibrate(
    const u16* module_in, const u16* xx, const u16* yy, const u16* adc_in, u32 n,
    const u32* range_first, const u32* range_last, const i32* range_cols, u32 n_ranges,
    const u8* data, u64 data_len, float min_ped, float min_gain, float ped_precision, float gain_precision,
    u32 rows_averaged, u32 dead_flag, u32 noisy_flag,
    u32 is_run2, u32 l1_modules, float gain_l1, float offset_l1, float gain_other, float offset_other, i32 min_electrons,
    u16* module_out, u16* adc_out, u32* status)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u32 id = module_in[i];
    module_out[i] = (u16)id;
    adc_out[i] = adc_in[i];
    if (id == INVALID_MODULE) return;
    float factor, offset;
    if (!is_run2) { factor = 1.0f; offset = 0.0f; }
    else if (id < l1_modules) { factor = gain_l1; offset = offset_l1; }
    else { factor = gain_other; offset = offset_other; }
    if (id >= n_ranges) { atomicOr(status, STATUS_BAD_INPUT); return; }
    u32 first = range_first[id], last = range_last[id];
    i32 n_cols = range_cols[id];
    if (n_cols <= 0 || last < first) { atomicOr(status, STATUS_BAD_INPUT); return; }
    u64 col_len = (u64)(last - first) / (u64)n_cols;
    u64 off = (u64)first + (u64)yy[i] * col_len + 2ull * ((u64)xx[i] / (u64)rows_averaged);
    if (off >= (u64)last) { atomicOr(status, STATUS_BAD_INPUT); return; }
    u64 at = 2ull * (off / 2ull);
    if (at + 1ull >= data_len) { atomicOr(status, STATUS_BAD_INPUT); return; }
    u32 gain_code = data[at], ped_code = data[at + 1];
    if (ped_code == dead_flag || ped_code == noisy_flag) {
        module_out[i] = (u16)INVALID_MODULE;
        adc_out[i] = 0;
        return;
    }
    float pedestal = __fadd_rn(__fmul_rn((float)ped_code, ped_precision), min_ped);
    float gain = __fadd_rn(__fmul_rn((float)gain_code, gain_precision), min_gain);
    float vcal = __fsub_rn(__fmul_rn((float)adc_in[i], gain), __fmul_rn(pedestal, gain));
    i32 q = __float2int_rz(__fadd_rn(__fmul_rn(vcal, factor), offset));
    if (q < min_electrons) q = min_electrons;
    adc_out[i] = (u16)q;
}
"#;

/// clusterize: `clus_init` gives every digi its event-local index; `clusterize` runs one
/// block per module run: column histogram, then min-label propagation with pointer
/// jumping until no pair of 8-connected pixels has different roots. Roots are component
/// minima, so the result equals the CPU's for any scheduling. Roots are numbered in index
/// order (as the CPU does) by a block-wide prefix sum of the root flags, then every pixel
/// takes its root's number.
pub const CLUSTERIZE: &str = concat!(
    block_scan_source!(),
    r#"
#define N_BINS (N_COLS + 2)
#define CLUS_SCAN_MAX 64

extern "C" __global__ void clus_init(i32* clus, u32 n, const u32* event_offsets, u32 n_events) {
    u32 g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n) return;
    u32 lo = 0u, hi = n_events;
    while (hi - lo > 1u) { u32 mid = (lo + hi) / 2u; if (event_offsets[mid] <= g) lo = mid; else hi = mid; }
    clus[g] = (i32)(g - event_offsets[lo]);
}

__device__ __forceinline__ i32 root_of(volatile i32* clus, i32 a) {
    i32 p = clus[a];
    while (p != a) { a = p; p = clus[a]; }
    return a;
}

// Runs: run r covers digis run_first[r]..run_end[r] (batch indices) of the event whose
// first digi is run_base[r]. bins: scratch of the batch's digi count.
extern "C" __global__ void clusterize(
    const u16* module, const u16* xx, const u16* yy,
    const u32* run_first, const u32* run_end, const u32* run_base,
    i32* clus_all, u32* bins_all, u32* found_out)
{
    __shared__ u32 off[N_BINS + 1];
    __shared__ u32 fill[N_BINS + 1];
    __shared__ i32 more;
    __shared__ u32 tmp[CLUS_SCAN_MAX];
    __shared__ u32 carry;
    u32 r = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    u32 first = run_first[r], end = run_end[r], base = run_base[r];
    volatile i32* clus = clus_all + base;   // event-local labels
    u32* bins = bins_all + first;
    for (u32 b = tid; b <= N_BINS; b += nt) off[b] = 0u;
    __syncthreads();
    for (u32 i = first + tid; i < end; i += nt)
        if (module[i] != INVALID_MODULE) atomicAdd(&off[yy[i]], 1u);
    __syncthreads();
    // Column c's pixels counted in off[c]; the block-wide scan (a module's 418 bins by one
    // thread was most of a clustering block's time) makes off[c] its start, off[N_BINS]
    // the total.
    u32 total = block_exclusive_scan(off, 0u, N_BINS, off, tmp, &carry, 0u);
    if (tid == 0) off[N_BINS] = total;
    __syncthreads();
    for (u32 b = tid; b <= N_BINS; b += nt) fill[b] = off[b];
    __syncthreads();
    // Pixels of column c fill off[c]..off[c+1] (any order within the column).
    for (u32 i = first + tid; i < end; i += nt)
        if (module[i] != INVALID_MODULE) { u32 p = atomicSub(&fill[yy[i] + 1u], 1u) - 1u; bins[p] = i - first; }
    __syncthreads();
    u32 size = off[N_BINS];
    while (true) {
        if (tid == 0) more = 0;
        __syncthreads();
        for (u32 k = tid; k < size; k += nt) {
            u32 i = bins[k] + first;
            u32 e = off[yy[i] + 2u];   // end of the next column
            i32 li = (i32)(i - base);
            for (u32 j = k + 1u; j < e; ++j) {
                u32 m = bins[j] + first;
                i32 dx = (i32)xx[m] - (i32)xx[i];
                if (dx < -1 || dx > 1) continue;
                i32 ra = root_of(clus, li), rb = root_of(clus, (i32)(m - base));
                if (ra != rb) {
                    i32 lo = ra < rb ? ra : rb, hi = ra < rb ? rb : ra;
                    atomicMin((i32*)&clus[hi], lo);
                    more = 1;
                }
            }
        }
        __syncthreads();
        for (u32 k = tid; k < size; k += nt) {
            i32 l = (i32)(bins[k] + first - base);
            clus[l] = root_of(clus, l);
        }
        __syncthreads();
        if (!more) break;
        __syncthreads();
    }
    // The roots numbered in index order: bins (free now) holds the root flags, then the
    // roots before each digi (a block-wide scan), so root k's label is -(roots before k) - 1.
    // Each thread relabels only its own roots, so the test still reads unmodified labels.
    u32 n = end - first;
    for (u32 k = tid; k < n; k += nt) {
        i32 l = (i32)(first + k - base);
        bins[k] = module[first + k] != INVALID_MODULE && clus[l] == l ? 1u : 0u;
    }
    __syncthreads();
    u32 found = block_exclusive_scan(bins, 0u, n, bins, tmp, &carry, 0u);
    for (u32 k = tid; k < n; k += nt) {
        i32 l = (i32)(first + k - base);
        if (module[first + k] != INVALID_MODULE && clus[l] == l) clus[l] = -(i32)bins[k] - 1;
    }
    if (tid == 0) found_out[r] = found;
    __syncthreads();
    for (u32 i = first + tid; i < end; i += nt) {
        i32 l = (i32)(i - base);
        if (module[i] != INVALID_MODULE && clus[l] >= 0) clus[l] = clus[clus[l]];
    }
    __syncthreads();
    for (u32 i = first + tid; i < end; i += nt) {
        i32 l = (i32)(i - base);
        clus[l] = module[i] != INVALID_MODULE ? -clus[l] - 1 : -9999;
    }
}
"#
);

/// Module runs on the device, so that the local steps' host preparation reads only the
/// module tables and the events' offsets, never the digis:
/// - `mr_flag`, `mr_fill`: `clusterize`'s runs (the CPU's `module_runs`). A run starts at
///   a valid digi whose previous valid digi in the event is of another module (or none) and
///   ends at the next valid digi of another module; the first `MAX_MODULES` runs of an event
///   fill its slots in order (one thread per digi: the start flags, their per-event
///   segmented scan `sg_tile_*`, then each start writes its run), longer runs are cut
///   at `max_pix` digis and counted per event for the capacity report. A digi outside what the CPU accepts sets `status`: the step takes the CPU path.
/// - `run_check`, `run_ends`: the charge cut's and `rechits`' run spans from a module table
///   (the CPU's `find` of the next valid digi of another module); `run_check` tells whether
///   every table row's first digi is of its module, which the host's spans assume.
/// - `slot_ends`: the same spans over the run slots that `mr_fill` wrote, which a GPU
///   `clusterize` keeps on the device with its module table (no table crosses the bus).
pub const MODULE_RUNS: &str = r#"
__device__ __forceinline__ u32 mr_event(const u32* event_offsets, u32 n_events, u32 g) {
    u32 lo = 0u, hi = n_events;
    while (hi - lo > 1u) { u32 mid = (lo + hi) / 2u; if (event_offsets[mid] <= g) lo = mid; else hi = mid; }
    return lo;
}

extern "C" __global__ void mr_flag(const u16* module, const u16* xx, const u16* yy, u32 n, const u32* event_offsets, u32 n_events, u32* start, u32* status)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u32 m = module[i], s = 0u;
    if (m != INVALID_MODULE) {
        if (m >= MAX_MODULES || xx[i] >= N_ROWS || yy[i] >= N_COLS) {
            atomicOr(status, STATUS_BAD_INPUT);
        } else {
            u32 b = event_offsets[mr_event(event_offsets, n_events, i)], j = i;
            s = 1u;
            while (j > b) {
                --j;
                u32 p = module[j];
                if (p != INVALID_MODULE) { s = p != m ? 1u : 0u; break; }
            }
        }
    }
    start[i] = s;
}

// Slots e * MAX_MODULES + k (zero-filled: an unused slot is an empty run): run k of event e,
// batch digi indices; per event the longest run and the runs past max_pix with their digis
// cut (atomics that only count).
extern "C" __global__ void mr_fill(
    const u16* module, u32 n, const u32* event_offsets, u32 n_events, const u32* start, const u32* pos, u32 max_pix,
    u32* run_first, u32* run_end, u32* run_base, u16* run_module, u32* worst, u32* over, u64* cut)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || start[i] == 0u) return;
    u32 e = mr_event(event_offsets, n_events, i);
    u32 b = event_offsets[e], eend = event_offsets[e + 1u];
    u32 m = module[i], j = i + 1u;
    while (j < eend && (module[j] == INVALID_MODULE || module[j] == m)) ++j;
    u32 len = j - i;
    atomicMax(&worst[e], len);
    if (len > max_pix) { atomicAdd(&over[e], 1u); atomicAdd(&cut[e], (u64)(len - max_pix)); }
    u32 k = pos[i];
    if (k < MAX_MODULES) {
        u32 slot = e * MAX_MODULES + k;
        run_first[slot] = i;
        run_end[slot] = len > max_pix ? i + max_pix : j;
        run_base[slot] = b;
        run_module[slot] = (u16)m;
    }
}

// Table row r: its first digi (batch index) must be of row_module[r].
extern "C" __global__ void run_check(const u16* module, u32 n_rows, const u32* row_first, const u16* row_module, u32* status)
{
    u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    if (module[row_first[r]] != row_module[r]) atomicOr(status, STATUS_BAD_INPUT);
}

// Run r's end: from run_first[r], the first valid digi of another module than run_module[r]
// before run_limit[r] (its event's end), else run_limit[r].
extern "C" __global__ void run_ends(const u16* module, u32 n_runs, const u32* run_first, const u16* run_module, const u32* run_limit, u32* run_end)
{
    u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_runs) return;
    u32 m = run_module[r], lim = run_limit[r], j = run_first[r];
    while (j < lim && (module[j] == INVALID_MODULE || module[j] == m)) ++j;
    run_end[r] = j;
}

// Slot s (event s / slots_per_event): as run_ends up to its event's end, for the slots with
// clusters; a slot without any is an empty span at its first digi.
extern "C" __global__ void slot_ends(const u16* module, u32 n_slots, u32 slots_per_event, const u32* slot_first, const u16* slot_module,
    const u32* slot_nclus, const u32* event_offsets, u32* slot_end)
{
    u32 s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n_slots) return;
    u32 j = slot_first[s];
    if (slot_nclus[s] != 0u) {
        u32 m = slot_module[s], lim = event_offsets[s / slots_per_event + 1u];
        while (j < lim && (module[j] == INVALID_MODULE || module[j] == m)) ++j;
    }
    slot_end[s] = j;
}
"#;

/// cluster_charge_cut: one block per module run, modifying module and cluster columns in
/// place (the host uploads copies). Charges are summed with wrapping atomic adds (order
/// independent); the prefix scan and the renumbering table are built by one thread.
pub const CHARGE_CUT: &str = r#"
extern "C" __global__ void charge_cut(
    u16* module, i32* clus, const u16* adc,
    const u32* run_first, const u32* run_end, const u32* run_nclus, const u16* run_module,
    u32 max_per_module, u32 l1_modules, i32 min_charge_l1, i32 min_charge, u32* ncl_out)
{
    __shared__ i32 charge[MAX_CLUS_PER_MODULE];
    __shared__ u32 newclus[MAX_CLUS_PER_MODULE];
    __shared__ u32 sum_s;
    u32 r = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    u32 first = run_first[r], end = run_end[r], orig = run_nclus[r];
    u32 self_id = run_module[r];
    if (tid == 0) ncl_out[r] = orig;
    if (orig == 0u) return;
    u32 nclus = orig;
    if (nclus > max_per_module) {
        for (u32 i = first + tid; i < end; i += nt)
            if (module[i] != INVALID_MODULE && clus[i] >= (i32)max_per_module) { module[i] = (u16)INVALID_MODULE; clus[i] = (i32)INVALID_MODULE; }
        nclus = max_per_module;
    }
    for (u32 c = tid; c < nclus; c += nt) charge[c] = 0;
    __syncthreads();
    for (u32 i = first + tid; i < end; i += nt) {
        if (module[i] == INVALID_MODULE) continue;
        i32 c = clus[i];
        if (c >= 0 && c < (i32)nclus) atomicAdd(&charge[c], (i32)adc[i]);
        else { module[i] = (u16)INVALID_MODULE; clus[i] = (i32)INVALID_MODULE; }
    }
    __syncthreads();
    i32 cut = self_id < l1_modules ? min_charge_l1 : min_charge;
    if (tid == 0) {
        u32 sum = 0u;
        for (u32 c = 0; c < nclus; ++c) {
            u32 ok = charge[c] > cut ? 1u : 0u;
            sum += ok;
            newclus[c] = ok ? sum : INVALID_MODULE + 1u;
        }
        sum_s = sum;
        ncl_out[r] = sum == nclus ? orig : sum;
    }
    __syncthreads();
    if (sum_s == nclus) return;
    for (u32 i = first + tid; i < end; i += nt) {
        if (module[i] == INVALID_MODULE) continue;
        clus[i] = (i32)newclus[clus[i]] - 1;
        if (clus[i] == (i32)INVALID_MODULE) module[i] = (u16)INVALID_MODULE;
    }
}
"#;

/// rechits: one block per module run (or run slot: a slot without clusters returns at once;
/// the beam spot per run, or per event of `beam_stride` slots), its shared memory sized for
/// `cap` clusters (the launch's largest run; a run above it sets `status`). Pass 1 finds each cluster's row and
/// column range (atomic min/max), pass 2 sums charges on its edges (atomic adds, exact in
/// i32), then one thread per cluster computes the CPE "fast" position, errors, global
/// position and `iphi` with the CPU's float operations in the CPU's order.
/// Per-module parameters: `DET_STRIDE` floats per module (see `steps::det_table`).
pub const RECHITS: &str = r#"
#define DET_STRIDE 23
__device__ __forceinline__ u32 local_x(u32 px) { return px + (px > ROWS_IN_ROC - 1u ? 1u : 0u) + (px > ROWS_IN_ROC ? 1u : 0u); }
__device__ __forceinline__ u32 local_y(u32 py) { u32 roc = py / COLS_IN_ROC; return py + 2u * roc + (py % COLS_IN_ROC > 0u ? 1u : 0u); }
__device__ __forceinline__ bool big_x(u32 px) { return px == ROWS_IN_ROC - 1u || px == ROWS_IN_ROC; }
__device__ __forceinline__ bool big_y(u32 py) { u32 c = py % COLS_IN_ROC; return c == 0u || c == COLS_IN_ROC - 1u; }

__device__ i32 unbalance(i32 qf, i32 ql) {
    double num = (double)fabsf((float)(qf - ql));
    double den = (double)(float)(qf + ql);
    return __double2int_rz(__ddiv_rn(__dmul_rn(8.0, num), den));
}

__device__ float correction(i32 size_m1, i32 q_f, i32 q_l, u32 upper_edge_first, u32 lower_edge_last,
                            float lorentz_shift, float thickness, float cot_angle, float pitch,
                            bool first_big, bool last_big) {
    if (size_m1 == 0) return 0.0f;
    float w_eff = 0.0f;
    bool simple = true;
    if (size_m1 == 1) {
        float w_inner = __fmul_rn(pitch, (float)((i32)lower_edge_last - (i32)upper_edge_first));
        float w_pred = __fsub_rn(__fmul_rn(thickness, cot_angle), lorentz_shift);
        w_eff = __fsub_rn(fabsf(w_pred), w_inner);
        simple = (w_eff < 0.0f) | (w_eff > pitch);
    }
    if (simple) {
        float sum_of_edge = 2.0f;
        if (first_big) sum_of_edge = __fadd_rn(sum_of_edge, 1.0f);
        if (last_big) sum_of_edge = __fadd_rn(sum_of_edge, 1.0f);
        w_eff = __fmul_rn(__fmul_rn(pitch, 0.5f), sum_of_edge);
    }
    float q_diff = (float)(q_l - q_f);
    float q_sum = (float)(q_l + q_f);
    if (q_sum == 0.0f) q_sum = 1.0f;
    return __fmul_rn(__fmul_rn(0.5f, __fdiv_rn(q_diff, q_sum)), w_eff);
}

__device__ short atan2s(float y, float x) {
    float r = __fdiv_rn(__fsub_rn(fabsf(x), fabsf(y)), __fadd_rn(fabsf(x), fabsf(y)));
    if (x < 0.0f) r = -r;
    i32 base = x >= 0.0f ? 8192 : 24576;
    float z = __fmul_rn(r, r);
    float p = __fmul_rn(r, __fadd_rn(-10422.177734375f, __fmul_rn(z, __fadd_rn(3349.97412109375f,
              __fmul_rn(z, __fadd_rn(-1525.589599609375f, __fmul_rn(z, 406.64190673828125f)))))));
    i32 v = __float2int_rz(p);            // Rust `as i16`: truncate, saturate, NaN -> 0
    if (v > 32767) v = 32767;
    if (v < -32768) v = -32768;
    short angle = (short)(base + v);
    if (y < 0.0f) angle = (short)(-(i32)angle);
    return angle;
}

extern "C" __global__ void rechits(
    const u16* module, const i32* clus, const u16* xx, const u16* yy, const u16* adc,
    const u32* run_first, const u32* run_end, const u32* run_nclus, const u16* run_me, const u32* run_hit,
    const float* beam, u32 beam_stride, u32 cap, const float* det, float thickness_b, float thickness_e, float pitch_x, float pitch_y,
    float* x_local, float* y_local, float* xerr_local, float* yerr_local,
    float* x_global, float* y_global, float* z_global, float* r_global,
    short* iphi, i32* charge, short* size_x, short* size_y, u16* det_index, u32* status)
{
    // Nine arrays of `cap` clusters in the launch's dynamic shared memory.
    DYN_SHARED(u32, rh_sh);
    u32 *min_row = rh_sh, *max_row = rh_sh + cap, *min_col = rh_sh + 2u * cap, *max_col = rh_sh + 3u * cap;
    i32 *q_f_x = (i32*)(rh_sh + 4u * cap), *q_l_x = (i32*)(rh_sh + 5u * cap);
    i32 *q_f_y = (i32*)(rh_sh + 6u * cap), *q_l_y = (i32*)(rh_sh + 7u * cap), *q_sum = (i32*)(rh_sh + 8u * cap);
    u32 r = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    u32 first = run_first[r], end = run_end[r], nclus = run_nclus[r], me = run_me[r];
    if (nclus == 0u) return;   // a slot without clusters (the whole block)
    if (nclus > cap) {         // the host sized the launch for fewer: a bug, never wrong hits
        if (tid == 0u) atomicOr(status, STATUS_BAD_INPUT);
        return;
    }
    for (u32 c = tid; c < nclus; c += nt) {
        min_row[c] = 0xffffffffu; max_row[c] = 0u; min_col[c] = 0xffffffffu; max_col[c] = 0u;
        q_f_x[c] = 0; q_l_x[c] = 0; q_f_y[c] = 0; q_l_y[c] = 0; q_sum[c] = 0;
    }
    __syncthreads();
    for (u32 i = first + tid; i < end; i += nt) {
        i32 c = clus[i];
        if (module[i] != me || c < 0 || (u32)c >= nclus) continue;
        u32 x = xx[i], y = yy[i];
        if (x >= N_ROWS || y >= N_COLS) { atomicOr(status, STATUS_BAD_INPUT); continue; }
        atomicMin(&min_row[c], x); atomicMax(&max_row[c], x);
        atomicMin(&min_col[c], y); atomicMax(&max_col[c], y);
    }
    __syncthreads();
    for (u32 i = first + tid; i < end; i += nt) {
        i32 c = clus[i];
        if (module[i] != me || c < 0 || (u32)c >= nclus) continue;
        u32 x = xx[i], y = yy[i];
        if (x >= N_ROWS || y >= N_COLS) continue;
        i32 ch = (i32)adc[i];
        atomicAdd(&q_sum[c], ch);
        if (min_row[c] == x) atomicAdd(&q_f_x[c], ch);
        if (max_row[c] == x) atomicAdd(&q_l_x[c], ch);
        if (min_col[c] == y) atomicAdd(&q_f_y[c], ch);
        if (max_col[c] == y) atomicAdd(&q_l_y[c], ch);
    }
    __syncthreads();
    const float* d = det + (u64)me * DET_STRIDE;
    // The beam spot of the run's event: one per run, or one per event of beam_stride slots.
    const float* bs = beam + 3u * (beam_stride != 0u ? r / beam_stride : r);
    const float bsx = bs[0], bsy = bs[1], bsz = bs[2];
    for (u32 c = tid; c < nclus; c += nt) {
        if (min_row[c] == 0xffffffffu) continue;   // no pixel: the slot stays empty
        u32 h = run_hit[r] + c;
        u32 mnr = min_row[c], mxr = max_row[c], mnc = min_col[c], mxc = max_col[c];
        u32 llxl = local_x((u16)(mnr + 1u)), llyl = local_y((u16)(mnc + 1u));
        u32 urxl = local_x(mxr), uryl = local_y(mxc);
        i32 mx = (i32)llxl + (i32)urxl, my = (i32)llyl + (i32)uryl;
        i32 xsize = (i32)urxl + 2 - (i32)llxl, ysize = (i32)uryl + 2 - (i32)llyl;
        xsize += (big_x(mnr) ? 1 : 0) + (big_x(mxr) ? 1 : 0);
        ysize += (big_y(mnc) ? 1 : 0) + (big_y(mxc) ? 1 : 0);
        xsize = 8 * xsize - unbalance(q_f_x[c], q_l_x[c]);
        ysize = 8 * ysize - unbalance(q_f_y[c], q_l_y[c]);
        bool edge_x = mnr == 0u || mxr == N_ROWS - 1;
        bool edge_y = mnc == 0u || mxc == N_COLS - 1;
        short sx = (short)(xsize < 1023 ? xsize : 1023), sy = (short)(ysize < 1023 ? ysize : 1023);
        if (edge_x) sx = (short)(-(i32)sx);
        if (edge_y) sy = (short)(-(i32)sy);
        float shift_x = d[0], shift_y = d[1], cwx = d[2], cwy = d[3], x0 = d[4], y0 = d[5], z0 = d[6];
        float x_pos = __fadd_rn(shift_x, __fmul_rn(pitch_x, __fadd_rn(__fmul_rn(0.5f, (float)mx), (float)X_OFFSET)));
        float y_pos = __fadd_rn(shift_y, __fmul_rn(pitch_y, __fadd_rn(__fmul_rn(0.5f, (float)my), (float)Y_OFFSET)));
        float gvz = __fdiv_rn(-1.0f, z0);
        float cot_alpha = __fmul_rn(__fsub_rn(x_pos, x0), gvz);
        float cot_beta = __fmul_rn(__fsub_rn(y_pos, y0), gvz);
        float thickness = d[22] != 0.0f ? thickness_b : thickness_e;
        float xcorr = correction((i32)(mxr - mnr), q_f_x[c], q_l_x[c], llxl, urxl, cwx, thickness, cot_alpha, pitch_x, big_x(mnr), big_x(mxr));
        float ycorr = correction((i32)(mxc - mnc), q_f_y[c], q_l_y[c], llyl, uryl, cwy, thickness, cot_beta, pitch_y, big_y(mnc), big_y(mxc));
        u32 ix = (mxr - mnr == 0u ? 1u : 0u) + ((mxr - mnr == 0u && big_x(mnr)) ? 1u : 0u);
        u32 iy = (mxc - mnc == 0u ? 1u : 0u) + ((mxc - mnc == 0u && big_y(mnc)) ? 1u : 0u);
        float xerr = edge_x ? 0.0050f : d[7 + ix];
        float yerr = edge_y ? 0.0085f : d[10 + iy];
        float x = __fadd_rn(x_pos, xcorr), y = __fadd_rn(y_pos, ycorr);
        charge[h] = q_sum[c];
        det_index[h] = (u16)me;
        x_local[h] = x; y_local[h] = y;
        size_x[h] = sx; size_y[h] = sy;
        xerr_local[h] = __fmul_rn(xerr, xerr);
        yerr_local[h] = __fmul_rn(yerr, yerr);
        const float* rot = d + 13;
        float xg = __fadd_rn(__fmul_rn(rot[0], x), __fmul_rn(rot[3], y));
        float yg = __fadd_rn(__fmul_rn(rot[1], x), __fmul_rn(rot[4], y));
        float zg = __fadd_rn(__fmul_rn(rot[2], x), __fmul_rn(rot[5], y));
        xg = __fadd_rn(xg, d[19]); yg = __fadd_rn(yg, d[20]); zg = __fadd_rn(zg, d[21]);
        xg = __fsub_rn(xg, bsx); yg = __fsub_rn(yg, bsy); zg = __fsub_rn(zg, bsz);
        x_global[h] = xg; y_global[h] = yg; z_global[h] = zg;
        r_global[h] = __fsqrt_rn(__fadd_rn(__fmul_rn(xg, xg), __fmul_rn(yg, yg)));
        iphi[h] = atan2s(yg, xg);
    }
}
"#;

/// Every kernel source: (module name, source without the prelude, kernel functions).
pub const SOURCES: &[(&str, &str, &[&str])] = &[
    ("raw_to_digis", RAW_TO_DIGIS, &["raw_to_digis"]),
    ("calibrate", CALIBRATE, &["calibrate"]),
    ("clusterize", CLUSTERIZE, &["clus_init", "clusterize"]),
    (
        "module_runs",
        MODULE_RUNS,
        &["mr_flag", "mr_fill", "run_check", "run_ends", "slot_ends"],
    ),
    ("cluster_charge_cut", CHARGE_CUT, &["charge_cut"]),
    ("rechits", RECHITS, &["rechits"]),
    (
        "ca_doublets",
        crate::kernels_ca::CA_DOUBLETS,
        crate::kernels_ca::CA_DOUBLETS_KERNELS,
    ),
    (
        "ca_ntuplets",
        crate::kernels_ca::CA_NTUPLETS,
        crate::kernels_ca::CA_NTUPLETS_KERNELS,
    ),
    (
        "track_fit",
        crate::kernels_fit::TRACK_FIT,
        crate::kernels_fit::TRACK_FIT_KERNELS,
    ),
    (
        "track_quality",
        crate::kernels_quality::QUALITY,
        crate::kernels_quality::QUALITY_KERNELS,
    ),
    (
        "vertices",
        crate::kernels_vertices::VERTICES,
        crate::kernels_vertices::VERTICES_KERNELS,
    ),
];

/// The full source of a kernel module: prelude + body.
pub fn full_source(body: &str) -> String {
    let mut s = prelude();
    s.push_str(body);
    s
}

/// NVRTC options: no FMA contraction, IEEE division and square root, no flush to zero.
pub fn compile_options() -> cudarc::nvrtc::CompileOptions {
    cudarc::nvrtc::CompileOptions {
        fmad: Some(false),
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        use_fast_math: Some(false),
        ..Default::default()
    }
}

/// Compiles one kernel module to PTX. NVRTC must be loadable (see
/// [`crate::device::nvrtc_status`]); this function does not check it.
pub fn compile(name: &str, body: &str) -> Result<cudarc::nvrtc::Ptx, String> {
    cudarc::nvrtc::compile_ptx_with_opts(full_source(body), compile_options())
        .map_err(|e| format!("NVRTC failed to compile kernel module '{name}': {e}"))
}

/// The parameter types of kernel `name` as written in its source, `const` and names
/// dropped: e.g. `["u16*", "u32", "float"]`. Launches are checked against it.
///
/// ```
/// let sig = quiver_gpu::kernels::signature("clus_init").unwrap();
/// assert_eq!(sig, ["i32*", "u32", "u32*", "u32"]);
/// ```
pub fn signature(name: &str) -> Option<Vec<String>> {
    let head = format!("__global__ void {name}(");
    let body = SOURCES.iter().map(|s| s.1).find(|b| b.contains(&head))?;
    let start = body.find(&head)? + head.len();
    let end = start + body[start..].find(')')?;
    let params: String = body[start..end]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    Some(
        params
            .split(',')
            .map(|p| {
                let p = p.replace("const ", "").replace('*', " * ");
                let mut toks: Vec<&str> = p.split_whitespace().collect();
                toks.pop(); // the parameter's name
                toks.concat()
            })
            .collect(),
    )
}

/// The C type of a kernel argument element or scalar.
pub trait CType {
    const C: &'static str;
}
impl CType for u8 {
    const C: &'static str = "u8";
}
impl CType for u16 {
    const C: &'static str = "u16";
}
impl CType for u32 {
    const C: &'static str = "u32";
}
impl CType for u64 {
    const C: &'static str = "u64";
}
impl CType for i16 {
    const C: &'static str = "short";
}
impl CType for i32 {
    const C: &'static str = "i32";
}
impl CType for f32 {
    const C: &'static str = "float";
}
impl CType for f64 {
    const C: &'static str = "double";
}

/// The C type a launch argument stands for: a scalar, or a pointer to device memory.
pub trait KernelArg {
    fn c_type() -> String;
}
impl<T: CType> KernelArg for &T {
    fn c_type() -> String {
        T::C.to_string()
    }
}
impl<T: CType> KernelArg for &cudarc::driver::CudaSlice<T> {
    fn c_type() -> String {
        format!("{}*", T::C)
    }
}
impl<T: CType> KernelArg for &cudarc::driver::CudaView<'_, T> {
    fn c_type() -> String {
        format!("{}*", T::C)
    }
}
impl<T: CType> KernelArg for &mut cudarc::driver::CudaViewMut<'_, T> {
    fn c_type() -> String {
        format!("{}*", T::C)
    }
}

/// Compares the argument types of a launch with the kernel's source signature.
///
/// ```
/// use quiver_gpu::kernels::check_launch;
/// assert!(check_launch("clus_init", &["i32*".into(), "u32".into(), "u32*".into(), "u32".into()]).is_ok());
/// let e = check_launch("clus_init", &["u32*".into(), "u32".into(), "u32*".into(), "u32".into()]).unwrap_err();
/// assert!(e.contains("argument 1 is u32* but the kernel takes i32*"), "{e}");
/// ```
pub fn check_launch(name: &str, args: &[String]) -> Result<(), String> {
    let sig = signature(name).ok_or_else(|| format!("no kernel '{name}' in the sources"))?;
    if sig.len() != args.len() {
        return Err(format!(
            "kernel '{name}' takes {} arguments, the launch passes {}",
            sig.len(),
            args.len()
        ));
    }
    for (k, (want, got)) in sig.iter().zip(args).enumerate() {
        if want != got {
            return Err(format!(
                "kernel '{name}': argument {} is {got} but the kernel takes {want}",
                k + 1
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_has_a_parsable_signature() {
        for &(_, _, names) in SOURCES {
            for n in names {
                let sig = signature(n).unwrap_or_else(|| panic!("{n}"));
                assert!(
                    sig.iter().all(|t| [
                        "u8", "u16", "u32", "u64", "short", "i32", "float", "double"
                    ]
                    .contains(&t.trim_end_matches('*'))),
                    "{n}: {sig:?}"
                );
            }
        }
        assert_eq!(signature("charge_cut").unwrap().len(), 12);
        assert_eq!(signature("rechits").unwrap().len(), 32);
        assert_eq!(signature("raw_to_digis").unwrap().len(), 25);
        assert_eq!(
            signature("calibrate").unwrap()[..4],
            ["u16*", "u16*", "u16*", "u16*"]
        );
    }

    #[test]
    fn clusterize_blocks_fit_its_scan() {
        // The block-wide scan needs a power of two and one shared word per thread.
        assert!(CLUSTER_BLOCK.is_power_of_two());
        assert!(CLUSTERIZE.contains(&format!("#define CLUS_SCAN_MAX {CLUSTER_BLOCK}\n")));
    }
}
