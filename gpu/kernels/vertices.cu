#define VX_NBINS 256
#define VX_MAX_VERTICES 1024
#define VX_MAX_SPLIT 512
#define VX_MARKER_LIMIT 9990
#define VX_NOISE 9997
#define VX_DETACHED 9999
#define VX_DENSITY 0
#define VX_DBSCAN 1
#define VX_ITERATIVE 2

/// The 1 mm z bin: z·10 in double truncated toward zero, clamped to the i8 range, + 128.
__device__ u32 vx_bin(float z) {
    int iz = __double2int_rz((double)z * 10.0);
    if (iz < -128) iz = -128;
    if (iz > 127) iz = 127;
    return (u32)(iz + 128);
}

/// f32 bits mapped so that signed integer order is `total_cmp`'s order.
__device__ int vx_key(float x) {
    union { float f; int i; } u;
    u.f = x;
    return u.i ^ (int)(((u32)(u.i >> 31)) >> 1);
}

/// The CPU's fit_vertices on one event (one thread): weighted mean, outlier detachment,
/// χ² and ndof, weight scaled by ndof/χ².
__device__ void vx_fit(u32 n, const float* zt, const float* ezt2, int* iv, u32 nv, float chi2_max,
                       float* zv, float* wv, float* chi2, int* ndof) {
    for (u32 v = 0; v < nv; ++v) { zv[v] = 0.0f; wv[v] = 0.0f; chi2[v] = 0.0f; ndof[v] = -1; }
    for (u32 i = 0; i < n; ++i) {
        if (iv[i] > VX_MARKER_LIMIT) continue;
        int v = iv[i];
        float w = 1.0f / ezt2[i];
        zv[v] += zt[i] * w;
        wv[v] += w;
    }
    for (u32 v = 0; v < nv; ++v) zv[v] /= wv[v];
    for (u32 i = 0; i < n; ++i) {
        if (iv[i] > VX_MARKER_LIMIT) continue;
        int v = iv[i];
        float d = zv[v] - zt[i];
        float c2 = d * (d / ezt2[i]);
        if (c2 > chi2_max) { iv[i] = VX_DETACHED; continue; }
        chi2[v] += c2;
        ndof[v] += 1;
    }
    for (u32 v = 0; v < nv; ++v)
        if (ndof[v] > 0) wv[v] *= (float)ndof[v] / chi2[v];
}

/// The CPU's split_vertices (one thread): returns the new vertex count, or 0xffffffff when
/// the vertices would exceed the capacity (the CPU's error).
__device__ u32 vx_split(u32 n, const float* zt, const float* ezt2, int* iv, u32 nv_final, const float* zv,
                        const float* chi2, const int* ndof, float max_chi2, u32 nv, u32 slots,
                        u32* s_it, float* s_zz, float* s_ww, u8* s_new) {
    for (u32 kv = 0; kv < nv_final; ++kv) {
        int nd = ndof[kv];
        if (nd < 4 || chi2[kv] < max_chi2 * (float)nd) continue;
        if (nd >= VX_MAX_SPLIT) continue;
        u32 m = 0;
        for (u32 k = 0; k < n; ++k) {
            if (iv[k] == (int)kv) {
                float z = zt[k] - zv[kv];
                s_zz[m] = z;
                s_new[m] = z < 0.0f ? 0 : 1;
                s_ww[m] = 1.0f / ezt2[k];
                s_it[m] = k;
                ++m;
            }
        }
        float znew0 = 0.0f, znew1 = 0.0f, wnew0 = 0.0f, wnew1 = 0.0f;
        int maxiter = 20;
        bool more = true;
        while (more) {
            more = false;
            znew0 = 0.0f; znew1 = 0.0f; wnew0 = 0.0f; wnew1 = 0.0f;
            for (u32 k = 0; k < m; ++k) {
                if (s_new[k] == 0) { znew0 += s_zz[k] * s_ww[k]; wnew0 += s_ww[k]; }
                else { znew1 += s_zz[k] * s_ww[k]; wnew1 += s_ww[k]; }
            }
            znew0 /= wnew0;
            znew1 /= wnew1;
            for (u32 k = 0; k < m; ++k) {
                float d0 = fabsf(s_zz[k] - znew0);
                float d1 = fabsf(s_zz[k] - znew1);
                u8 g = d0 < d1 ? 0 : 1;
                more |= g != s_new[k];
                s_new[k] = g;
            }
            maxiter -= 1;
            if (maxiter <= 0) more = false;
        }
        if (wnew0 == 0.0f || wnew1 == 0.0f) continue;
        float dz = znew0 - znew1;
        float dist2 = dz * dz;
        float chi2_dist = dist2 / (1.0f / wnew0 + 1.0f / wnew1);
        if (chi2_dist < 4.0f) continue;
        u32 igv = nv;
        if (igv >= VX_MAX_VERTICES || igv >= slots) return 0xffffffffu;
        nv += 1;
        for (u32 k = 0; k < m; ++k)
            if (s_new[k] == 1) iv[s_it[k]] = (int)igv;
    }
    return nv;
}

/// One block per event: the whole vertex finder on the event's selected tracks, with the
/// clustering `mode` (VX_DENSITY, VX_DBSCAN, VX_ITERATIVE)
/// (`sel_off[e]..sel_off[e + 1]` of zt, ezt2, ptt2). Scratch and per-track outputs are at
/// the same offsets; off holds VX_NBINS + 1 entries per event; vertex outputs at the
/// event's selected-track offset.
extern "C" __global__ void vx_find(
    const u32* sel_off, u32 n_events, const float* zt_all, const float* ezt2_all, const float* ptt2_all,
    u32 mode, i32 min_t, float eps, float errmax, float chi2max, float chi2_first, float chi2_split, float chi2_final,
    u32* izt_all, u32* bins_all, u32* off_all, i32* nn_all, i32* ptr_all, i32* iv_all,
    u32* s_it_all, float* s_zz_all, float* s_ww_all, u8* s_new_all,
    float* zv_all, float* wv_all, float* chi2_all, i32* ndof_all, float* ptv2_all, u16* sort_all,
    u32* nv_out, u32* err)
{
    __shared__ u32 sh_nv;
    __shared__ u32 sh_stop;
    __shared__ u32 sh_end[VX_NBINS];
    u32 e = blockIdx.x;
    if (e >= n_events) return;
    u32 b0 = sel_off[e], n = sel_off[e + 1] - b0;
    const float* zt = zt_all + b0;
    const float* ezt2 = ezt2_all + b0;
    const float* ptt2 = ptt2_all + b0;
    u32* izt = izt_all + b0;
    u32* bins = bins_all + b0;
    u32* off = off_all + (u64)(VX_NBINS + 1) * e;
    i32* nn = nn_all + b0;
    i32* ptr = ptr_all + b0;
    i32* iv = iv_all + b0;
    float* zv = zv_all + b0;
    float* wv = wv_all + b0;
    float* chi2 = chi2_all + b0;
    i32* ndof = ndof_all + b0;
    float* ptv2 = ptv2_all + b0;
    u16* sort_ind = sort_all + b0;
    u32 tid = threadIdx.x, nt = blockDim.x;

    if (tid == 0) {
        sh_stop = 0;
        sh_nv = 0;
        for (u32 b = 0; b <= VX_NBINS; ++b) off[b] = 0;
        for (u32 i = 0; i < n; ++i) { u32 b = vx_bin(zt[i]); izt[i] = b; off[b + 1] += 1; }
        for (u32 b = 0; b < VX_NBINS; ++b) off[b + 1] += off[b];
        // Each bin filled from its end, in track order (the reference's histogram). The
        // cursors live in shared memory: a local array would make the driver reserve its
        // kilobyte for every thread the device can hold.
        for (u32 b = 0; b < VX_NBINS; ++b) sh_end[b] = off[b + 1];
        for (u32 i = 0; i < n; ++i) { sh_end[izt[i]] -= 1; bins[sh_end[izt[i]]] = i; }
    }
    __syncthreads();
    float er2mx = errmax * errmax;
    // Neighbour counts (DBSCAN's without the χ² window).
    for (u32 i = tid; i < n; i += nt) {
        if (ezt2[i] > er2mx) { nn[i] = 0; continue; }
        u32 b = izt[i];
        u32 lo = b > 0 ? b - 1 : 0, hi = b + 1 < VX_NBINS ? b + 1 : VX_NBINS - 1;
        float zi = zt[i], ei = ezt2[i];
        int count = 0;
        for (u32 k = off[lo]; k < off[hi + 1]; ++k) {
            u32 j = bins[k];
            float dist = fabsf(zi - zt[j]);
            if (mode == VX_DBSCAN) count += dist <= eps;
            else count += (dist <= eps) & (dist * dist <= chi2max * (ei + ezt2[j]));
        }
        nn[i] = count - 1;
    }
    __syncthreads();
    if (mode == VX_DENSITY) {
        // Each track points to its nearest denser neighbour: the last candidate at the
        // minimal distance, in window order.
        for (u32 i = tid; i < n; i += nt) {
            u32 b = izt[i];
            u32 lo = b > 0 ? b - 1 : 0, hi = b + 1 < VX_NBINS ? b + 1 : VX_NBINS - 1;
            float zi = zt[i], ei = ezt2[i];
            int ni = nn[i];
            float m = __int_as_float(0x7f800000);
            int best = -1;
            for (u32 k = off[lo]; k < off[hi + 1]; ++k) {
                u32 j = bins[k];
                float zj = zt[j];
                int nj = nn[j];
                bool denser = (nj > ni) | ((nj == ni) & (zj < zi));
                float dist = fabsf(zi - zj);
                bool ok = denser & (dist <= eps) & (dist * dist <= chi2max * (ei + ezt2[j]));
                if (ok && dist <= m) { m = dist; best = (int)j; }
            }
            ptr[i] = (best >= 0 && m <= eps) ? best : (int)i;
        }
    } else if (mode == VX_DBSCAN) {
        // Each core track points to the first core of smallest z within eps, in window order.
        for (u32 i = tid; i < n; i += nt) {
            ptr[i] = (int)i;
            if (nn[i] < min_t) continue;
            u32 b = izt[i];
            u32 lo = b > 0 ? b - 1 : 0, hi = b + 1 < VX_NBINS ? b + 1 : VX_NBINS - 1;
            float mz = zt[i];
            for (u32 k = off[lo]; k < off[hi + 1]; ++k) {
                u32 j = bins[k];
                if (zt[j] >= mz || nn[j] < min_t) continue;
                if (fabsf(zt[i] - zt[j]) > eps) continue;
                mz = zt[j];
                ptr[i] = (int)j;
            }
        }
    }
    __syncthreads();
    if (mode != VX_ITERATIVE) {
        for (u32 i = tid; i < n; i += nt) {
            int r = ptr[i];
            while (r != ptr[r]) r = ptr[r];
            iv[i] = r;
        }
    } else if (tid == 0) {
        // Label propagation among neighbouring cores, passes over the histogram alternating
        // with in-place percolation, as the CPU runs them.
        for (u32 i = 0; i < n; ++i) iv[i] = (int)i;
        bool more = true;
        u32 nloops = 0;
        while (more) {
            if (nloops % 2 == 1) {
                for (u32 i = 0; i < n; ++i) {
                    int m = iv[i];
                    while (m != iv[m]) m = iv[m];
                    iv[i] = m;
                }
            } else {
                more = false;
                for (u32 k = 0; k < n; ++k) {
                    u32 i = bins[k];
                    if (nn[i] < min_t) continue;
                    u32 hi = izt[i] + 1 < VX_NBINS ? izt[i] + 1 : VX_NBINS - 1;
                    u32 end = off[hi + 1];
                    for (u32 q = (k + 1 < end ? k + 1 : end); q < end; ++q) {
                        u32 j = bins[q];
                        if (nn[j] < min_t) continue;
                        float dist = fabsf(zt[i] - zt[j]);
                        if (dist > eps) continue;
                        if (dist * dist > chi2max * (ezt2[i] + ezt2[j])) continue;
                        int old = iv[j];
                        iv[j] = old < iv[i] ? old : iv[i];
                        if (old != iv[i]) more = true;
                        iv[i] = iv[i] < old ? iv[i] : old;
                    }
                }
            }
            nloops += 1;
        }
    }
    __syncthreads();
    if (mode != VX_DENSITY) {
        // Edge tracks join the nearest core within eps and the χ² window (cores' labels are
        // roots and do not change here).
        for (u32 i = tid; i < n; i += nt) {
            if (nn[i] >= min_t) continue;
            u32 b = izt[i];
            u32 lo = b > 0 ? b - 1 : 0, hi = b + 1 < VX_NBINS ? b + 1 : VX_NBINS - 1;
            float mdist = eps;
            for (u32 k = off[lo]; k < off[hi + 1]; ++k) {
                u32 j = bins[k];
                if (nn[j] < min_t) continue;
                float dist = fabsf(zt[i] - zt[j]);
                if (dist > mdist) continue;
                if (dist * dist > chi2max * (ezt2[i] + ezt2[j])) continue;
                mdist = dist;
                iv[i] = iv[j];
            }
        }
    }
    __syncthreads();
    if (tid == 0) {
        // Roots (iv[i] == i) numbered in track order; their labels kept in ptr[root].
        u32 found = 0;
        for (u32 i = 0; i < n; ++i) {
            if (iv[i] == (int)i) {
                if (nn[i] >= min_t) { ptr[i] = (int)found; found += 1; }
                else ptr[i] = VX_NOISE;
            }
        }
        if (found >= VX_MAX_VERTICES) { err[e] = 1; sh_stop = 1; }
        sh_nv = found;
    }
    __syncthreads();
    if (sh_stop) return;
    for (u32 i = tid; i < n; i += nt) iv[i] = ptr[iv[i]];
    __syncthreads();
    if (tid == 0) {
        u32 nv = sh_nv;
        vx_fit(n, zt, ezt2, iv, nv, chi2_first, zv, wv, chi2, ndof);
        u32 nvi = vx_split(n, zt, ezt2, iv, nv, zv, chi2, ndof, chi2_split, nv, n,
                           s_it_all + b0, s_zz_all + b0, s_ww_all + b0, s_new_all + b0);
        if (nvi == 0xffffffffu) { err[e] = 1; sh_stop = 1; }
        else {
            vx_fit(n, zt, ezt2, iv, nvi, chi2_final, zv, wv, chi2, ndof);
            for (u32 v = 0; v < nvi; ++v) ptv2[v] = 0.0f;
            for (u32 i = 0; i < n; ++i)
                if (iv[i] <= VX_MARKER_LIMIT) ptv2[iv[i]] += ptt2[i];
            sh_nv = nvi;
            nv_out[e] = nvi;
        }
    }
    __syncthreads();
    if (sh_stop) return;
    u32 nv = sh_nv;
    for (u32 v = tid; v < nv; v += nt) {
        int kv = vx_key(ptv2[v]);
        u32 rank = 0;
        for (u32 u = 0; u < nv; ++u) {
            int ku = vx_key(ptv2[u]);
            rank += (ku < kv) | ((ku == kv) & (u < v));
        }
        sort_ind[rank] = (u16)v;
    }
}
