#include "block_scan.cuh"
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
// serialised: docs/decisions/0033-gpu-kernels-all-sms.md); the atomics only count.
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
