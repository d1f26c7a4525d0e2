#include "block_scan.cuh"
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
// what another reads (an in-place insertion sort per hit, its global loads and stores
// dependent, was slow: docs/decisions/0033-gpu-kernels-all-sms.md).
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
