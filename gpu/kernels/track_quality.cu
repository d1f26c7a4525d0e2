#define QX_BAD 0
#define QX_DUP 1
#define QX_LOOSE 2
#define QX_BLOCK 512
#define QX_SH 9216

__device__ float qx_chi2_cut(const float* cuts, float pt) {
    pt = fminf(pt, cuts[4]);
    return cuts[5] * (cuts[0] + pt * (cuts[1] + pt * (cuts[2] + pt * cuts[3])));
}

/// One block per event. Tuples of event e: tup_off[e]..tup_off[e + 1] (batch numbering),
/// tuple t's hits thits[thit_off[t]..thit_off[t + 1]] (event-local hit indices); cells of
/// event e: cell_off[e]..cell_off[e + 1], cell c's tuples the first per_list of
/// ct_vals[ct_base[e] + ct_first[c]..][..ct_count[c]] (event-local tuple indices, ascending:
/// the lists `ct_*` of the CA module build), dead[c] its killed flag (read with
/// late_fishbone only); the
/// event's hits: hit_off[e]..hit_off[e + 1]. h2t_off: (hits + 1) entries per event at
/// hit_off[e] + e; h2t_bins: at the event's first tuple hit; cl_all, win_all: one entry per
/// cell, killed_all one per tuple (scratch). q: the tuples' quality codes, updated in place.
/// An event of at most min(sh_cap, QX_SH) tuples keeps its codes and scores in shared
/// memory. rounds_all[e]: the duplicate remover's parallel rounds (0xffffffff: it ran the
/// sequential loop, after max_rounds rounds or with max_rounds 0).
extern "C" __global__ void qx_quality(
    u32 n_events, const u32* tup_off, const u32* thit_off, const u32* thits,
    const float* state, const float* pt, const float* chi2, const float* cuts,
    const u32* cell_off, const u32* ct_count, const u32* ct_first, const u32* ct_base, u32 per_list, const u32* ct_vals, const u8* dead, u32 late_fishbone,
    const u32* hit_off, u32* h2t_off_all, u32* h2t_bins_all, u32* cl_all, u32* win_all, u32* killed_all,
    u32 sh_cap, u32 max_rounds, u32* rounds_all, u8* q_all)
{
    __shared__ u32 sh_first_empty;
    __shared__ u32 sh_n_listed;
    __shared__ u32 sh_flag;
    __shared__ u32 sh_part[QX_BLOCK];
    __shared__ u8 sh_q[QX_SH];
    __shared__ float sh_score[QX_SH];
    u32 e = blockIdx.x;
    if (e >= n_events) return;
    u32 t0 = tup_off[e], nt = tup_off[e + 1] - t0;
    u32 tid = threadIdx.x, nth = blockDim.x;
    // The serial pass below is latency bound: the codes and |tip| of an event that fits sit
    // in shared memory (|tip| read as fabsf(state[1]) either way).
    bool in_sh = nt <= sh_cap && nt <= QX_SH;
    u8* q = in_sh ? sh_q : q_all + t0;
    const float* score = in_sh ? sh_score : state + 5 * (u64)t0 + 1;
    u32 ss = in_sh ? 1 : 5;
    if (tid == 0) sh_first_empty = nt;
    if (in_sh) {
        for (u32 it = tid; it < nt; it += nth) {
            sh_q[it] = q_all[t0 + it];
            sh_score[it] = fabsf(state[5 * (u64)(t0 + it) + 1]);
        }
    }
    __syncthreads();
    // The classification stops at the first empty tuple, as the CPU's loop.
    for (u32 it = tid; it < nt; it += nth) {
        if (thit_off[t0 + it + 1] == thit_off[t0 + it]) atomicMin(&sh_first_empty, it);
    }
    __syncthreads();
    u32 n_class = sh_first_empty;
    for (u32 it = tid; it < n_class; it += nth) {
        u32 g = t0 + it;
        u32 nh = thit_off[g + 1] - thit_off[g];
        if (q[it] == QX_DUP || nh < 3) continue;
        const float* st = state + 5 * (u64)g;
        bool nan = false;
        for (int k = 0; k < 5; ++k) nan |= st[k] != st[k];
        if (nan) continue;
        if (3.0f * chi2[g] >= qx_chi2_cut(cuts, pt[g])) continue;
        const float* region = cuts + (nh > 3 ? 9 : 6);
        if (fabsf(st[1]) < region[0] && pt[g] > region[1] && fabsf(st[4]) < region[2]) q[it] = QX_LOOSE;
    }
    __syncthreads();
    u32 c0 = cell_off[e], nc = cell_off[e + 1] - c0;
    // Cell c's tuples: its list's first per_list entries, ct_l[QX_S(c)..][..QX_N(c)].
    const u32* ct_l = ct_vals + ct_base[e];
#define QX_S(c) (ct_first[c0 + (c)])
#define QX_N(c) (ct_count[c0 + (c)] < per_list ? ct_count[c0 + (c)] : per_list)
    if (late_fishbone) {
        for (u32 c = tid; c < nc; c += nth) {
            if (!dead[c0 + c]) continue;
            for (u32 k = QX_S(c), kend = k + QX_N(c); k < kend; ++k) q[ct_l[k]] = QX_BAD;
        }
    }
    // The cells the duplicate remover visits (two tuples or more), in cell order: each
    // thread counts a contiguous chunk, the chunk counts are scanned, each chunk is written.
    u32* cl = cl_all + c0;
    u32 chunk = (nc + nth - 1) / nth;
    u32 ca = tid * chunk < nc ? tid * chunk : nc, cb = ca + chunk < nc ? ca + chunk : nc;
    u32 cnt = 0;
    for (u32 c = ca; c < cb; ++c) cnt += QX_N(c) >= 2;
    sh_part[tid] = cnt;
    __syncthreads();
    if (tid == 0) {
        u32 acc = 0;
        for (u32 i = 0; i < nth; ++i) { u32 v = sh_part[i]; sh_part[i] = acc; acc += v; }
        sh_n_listed = acc;
    }
    __syncthreads();
    u32 n_listed = sh_n_listed;
    for (u32 c = ca, w = sh_part[tid]; c < cb; ++c) {
        if (QX_N(c) >= 2) cl[w++] = c;
    }
    __syncthreads();
    // The fast duplicate remover. In the CPU's order, cell by cell: among the cell's tuples
    // still loose, the one with the smallest |tip| (the first in the list on ties) wins, and
    // every other tuple of the cell that is not bad becomes dup. A tuple is thus still loose
    // at cell c iff it was loose before the remover and every earlier listed cell holding it
    // chose it. Since a cell depends on earlier cells only, iterating "winners from the
    // earliest cell that rejected each tuple, rejections from the winners" in parallel (all
    // cells at once) reaches the sequential result and stops there: after round k every
    // cell whose chain of earlier cells is shorter than k is final, and a round that changes
    // no winner is the (unique) sequential solution. Codes are written only at the end; an
    // event not settled within max_rounds runs the sequential loop instead.
    u32* win = win_all + c0;
    u32* killed = killed_all + t0;
    bool settled = false;
    u32 rounds = 0;
    if (max_rounds > 0) {
        for (u32 it = tid; it < nt; it += nth) killed[it] = 0xffffffffu;
        __syncthreads();
        for (;;) {
            if (tid == 0) sh_flag = 0;
            __syncthreads();
            for (u32 i = tid; i < n_listed; i += nth) {
                u32 c = cl[i];
                float mc = 10000.0f;
                u32 im = 0xffffffffu;
                for (u32 k = QX_S(c), kend = k + QX_N(c); k < kend; ++k) {
                    u32 it = ct_l[k];
                    float sc = fabsf(score[ss * it]);
                    if (q[it] == QX_LOOSE && c <= killed[it] && sc < mc) { mc = sc; im = it; }
                }
                if (rounds == 0 || win[i] != im) { win[i] = im; sh_flag = 1; }
            }
            __syncthreads();
            u32 changed = sh_flag;
            __syncthreads();
            if (!changed) { settled = true; break; }
            if (++rounds > max_rounds) break;
            for (u32 it = tid; it < nt; it += nth) killed[it] = 0xffffffffu;
            __syncthreads();
            for (u32 i = tid; i < n_listed; i += nth) {
                u32 c = cl[i], im = win[i];
                for (u32 k = QX_S(c), kend = k + QX_N(c); k < kend; ++k) {
                    u32 it = ct_l[k];
                    if (it != im) atomicMin(&killed[it], c);
                }
            }
            __syncthreads();
        }
        if (settled) {
            for (u32 it = tid; it < nt; it += nth) {
                if (killed[it] != 0xffffffffu && q[it] != QX_BAD) q[it] = QX_DUP;
            }
        }
    }
    if (tid == 0) rounds_all[e] = settled ? rounds : 0xffffffffu;
    // Not settled (or max_rounds 0): the CPU's loop, cell by cell on one thread.
    if (!settled && tid == 0) {
        for (u32 i = 0; i < n_listed; ++i) {
            u32 c = cl[i];
            u32 a = QX_S(c), b = a + QX_N(c);
            float mc = 10000.0f;
            u32 im = 0xffffffffu;
            for (u32 k = a; k < b; ++k) {
                u32 it = ct_l[k];
                float sc = fabsf(score[ss * it]);
                if (q[it] == QX_LOOSE && sc < mc) { mc = sc; im = it; }
            }
            for (u32 k = a; k < b; ++k) {
                u32 it = ct_l[k];
                if (q[it] != QX_BAD && it != im) q[it] = QX_DUP;
            }
        }
    }
    __syncthreads();
    // The triplet cleaner over the hit -> loose tuples map. Every write is "dup" and what it
    // reads (hit counts, |tip|, "not bad") no write changes, so hits run in parallel; a bin's
    // order only breaks |tip| ties, and the CPU's bins are in descending tuple order with a
    // strict `<`: the largest tuple index among equal |tip| stays.
    u32 h0 = hit_off[e], n_hits = hit_off[e + 1] - h0;
    u32* off = h2t_off_all + h0 + e;
    u32* bins = h2t_bins_all + thit_off[t0];
    for (u32 h = tid; h <= n_hits; h += nth) off[h] = 0;
    __syncthreads();
    for (u32 it = tid; it < n_class; it += nth) {
        u32 g = t0 + it;
        if (q[it] != QX_LOOSE) continue;
        for (u32 k = thit_off[g]; k < thit_off[g + 1]; ++k) atomicAdd(&off[thits[k]], 1u);
    }
    __syncthreads();
    // Inclusive prefix sum of off[0..=n_hits]: chunk sums, their scan, the chunks.
    u32 hchunk = (n_hits + 1 + nth - 1) / nth;
    u32 ha = tid * hchunk < n_hits + 1 ? tid * hchunk : n_hits + 1, hb = ha + hchunk < n_hits + 1 ? ha + hchunk : n_hits + 1;
    u32 hs = 0;
    for (u32 h = ha; h < hb; ++h) hs += off[h];
    sh_part[tid] = hs;
    __syncthreads();
    if (tid == 0) {
        u32 acc = 0;
        for (u32 i = 0; i < nth; ++i) { u32 v = sh_part[i]; sh_part[i] = acc; acc += v; }
    }
    __syncthreads();
    for (u32 h = ha, acc = sh_part[tid]; h < hb; ++h) { acc += off[h]; off[h] = acc; }
    __syncthreads();
    for (u32 it = tid; it < n_class; it += nth) {
        u32 g = t0 + it;
        if (q[it] != QX_LOOSE) continue;
        for (u32 k = thit_off[g]; k < thit_off[g + 1]; ++k) bins[atomicSub(&off[thits[k]], 1u) - 1] = it;
    }
    __syncthreads();
    for (u32 h = tid; h < n_hits; h += nth) {
        u32 a = off[h], b = off[h + 1];
        if (b - a < 2) continue;
        u32 max_nh = 0;
        for (u32 k = a; k < b; ++k) { u32 g = t0 + bins[k]; u32 s = thit_off[g + 1] - thit_off[g]; if (s > max_nh) max_nh = s; }
        for (u32 k = a; k < b; ++k) { u32 g = t0 + bins[k]; if (thit_off[g + 1] - thit_off[g] != max_nh) q[bins[k]] = QX_DUP; }
        if (max_nh > 3) continue;
        float mc = 10000.0f;
        u32 im = 0xffffffffu;
        for (u32 k = a; k < b; ++k) {
            u32 it = bins[k];
            float tip = fabsf(score[ss * it]);
            if (q[it] != QX_BAD && (tip < mc || (tip == mc && im != 0xffffffffu && it > im))) { mc = tip; im = it; }
        }
        for (u32 k = a; k < b; ++k) {
            u32 it = bins[k];
            if (q[it] != QX_BAD && it != im) q[it] = QX_DUP;
        }
    }
    __syncthreads();
    if (in_sh) {
        for (u32 it = tid; it < nt; it += nth) q_all[t0 + it] = sh_q[it];
    }
}
#undef QX_S
#undef QX_N
