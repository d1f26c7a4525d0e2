#include "block_scan.cuh"
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
