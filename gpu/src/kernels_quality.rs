//! CUDA C source of the track classification and cleaning (`track_quality`), compiled by
//! NVRTC with the other kernel modules (same prelude, `--fmad=false`).
//!
//! One block per event. The classification (χ² against the pT-dependent cut, the region
//! cuts) runs one thread per tuple, and the late fishbone's cleaner (tuples through a
//! killed cell become bad: every write is the same value) one thread per cell. The fast
//! duplicate remover (cell by cell) and the triplet cleaner (hit by hit, over the
//! hit → loose tuples map) are read-modify-write passes whose result depends on their order:
//! the block's first thread runs them in the CPU's order, with the CPU's operations. The
//! reference's CUDA version runs them in parallel and is not deterministic; this one equals
//! the CPU step. The cells' tuple lists come from the host (the CPU's replay, which the
//! `ca_cells` product does not carry).

/// Threads per block (one block per event).
pub const QX_BLOCK: u32 = 128;

/// Floats of the classification cuts (`qx_classify`'s `cuts` argument): the χ² cubic's
/// four coefficients, its pT ceiling and scale, then max |tip|, min pT, max |zip| for
/// triplets and for longer tuples.
pub const QX_CUTS: usize = 12;

/// The cuts table of a quality configuration, in [`QX_CUTS`] order.
///
/// ```
/// use quiver_gpu::kernels_quality::{cuts_table, QX_CUTS};
/// use quiver_reco::tracks::QualityConfig;
/// let t = cuts_table(&QualityConfig::default());
/// assert_eq!((t.len(), t[4], t[5], t[6]), (QX_CUTS, 10.0, 30.0, 0.3));
/// ```
pub fn cuts_table(q: &quiver_reco::tracks::QualityConfig) -> Vec<f32> {
    let mut t = q.chi2_coeff.to_vec();
    t.extend_from_slice(&[q.chi2_max_pt, q.chi2_scale]);
    for r in [&q.triplet, &q.quadruplet] {
        t.extend_from_slice(&[r.max_tip, r.min_pt, r.max_zip]);
    }
    t
}

/// The classification and cleaning kernel module.
pub const QUALITY: &str = r#"
#define QX_BAD 0
#define QX_DUP 1
#define QX_LOOSE 2

__device__ float qx_chi2_cut(const float* cuts, float pt) {
    pt = fminf(pt, cuts[4]);
    return cuts[5] * (cuts[0] + pt * (cuts[1] + pt * (cuts[2] + pt * cuts[3])));
}

/// One block per event. Tuples of event e: tup_off[e]..tup_off[e + 1] (batch numbering),
/// tuple t's hits thits[thit_off[t]..thit_off[t + 1]] (event-local hit indices); cells of
/// event e: cell_off[e]..cell_off[e + 1], cell c's tuples ct_vals[ct_off[c]..ct_off[c + 1]]
/// (event-local tuple indices), dead[c] its killed flag (read with late_fishbone only); the
/// event's hits: hit_off[e]..hit_off[e + 1]. h2t_off: (hits + 1) entries per event at
/// hit_off[e] + e; h2t_bins: at the event's first tuple hit. q: the tuples' quality codes,
/// updated in place.
extern "C" __global__ void qx_quality(
    u32 n_events, const u32* tup_off, const u32* thit_off, const u32* thits,
    const float* state, const float* pt, const float* chi2, const float* cuts,
    const u32* cell_off, const u32* ct_off, const u32* ct_vals, const u8* dead, u32 late_fishbone,
    const u32* hit_off, u32* h2t_off_all, u32* h2t_bins_all, u8* q_all)
{
    __shared__ u32 sh_first_empty;
    u32 e = blockIdx.x;
    if (e >= n_events) return;
    u32 t0 = tup_off[e], nt = tup_off[e + 1] - t0;
    u8* q = q_all + t0;
    u32 tid = threadIdx.x, nth = blockDim.x;
    if (tid == 0) {
        // The classification stops at the first empty tuple, as the CPU's loop.
        u32 k = 0;
        while (k < nt && thit_off[t0 + k + 1] != thit_off[t0 + k]) ++k;
        sh_first_empty = k;
    }
    __syncthreads();
    for (u32 it = tid; it < sh_first_empty; it += nth) {
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
    if (late_fishbone) {
        for (u32 c = tid; c < nc; c += nth) {
            if (!dead[c0 + c]) continue;
            for (u32 k = ct_off[c0 + c]; k < ct_off[c0 + c + 1]; ++k) q[ct_vals[k]] = QX_BAD;
        }
    }
    __syncthreads();
    if (tid != 0) return;
    // The fast duplicate remover, cell by cell: the loose tuple with the smallest |tip| stays.
    for (u32 c = 0; c < nc; ++c) {
        u32 a = ct_off[c0 + c], b = ct_off[c0 + c + 1];
        if (b - a < 2) continue;
        float mc = 10000.0f;
        u32 im = 0xffffffffu;
        for (u32 k = a; k < b; ++k) {
            u32 it = ct_vals[k];
            float score = fabsf(state[5 * (u64)(t0 + it) + 1]);
            if (q[it] == QX_LOOSE && score < mc) { mc = score; im = it; }
        }
        for (u32 k = a; k < b; ++k) {
            u32 it = ct_vals[k];
            if (q[it] != QX_BAD && it != im) q[it] = QX_DUP;
        }
    }
    // The triplet cleaner over the hit -> loose tuples map (lists in descending tuple order).
    u32 h0 = hit_off[e], n_hits = hit_off[e + 1] - h0;
    u32* off = h2t_off_all + h0 + e;
    u32* bins = h2t_bins_all + thit_off[t0];
    for (u32 h = 0; h <= n_hits; ++h) off[h] = 0;
    for (u32 it = 0; it < nt; ++it) {
        u32 g = t0 + it;
        if (thit_off[g + 1] == thit_off[g]) break;
        if (q[it] != QX_LOOSE) continue;
        for (u32 k = thit_off[g]; k < thit_off[g + 1]; ++k) off[thits[k]] += 1;
    }
    for (u32 h = 1; h <= n_hits; ++h) off[h] += off[h - 1];
    for (u32 it = 0; it < nt; ++it) {
        u32 g = t0 + it;
        if (thit_off[g + 1] == thit_off[g]) break;
        if (q[it] != QX_LOOSE) continue;
        for (u32 k = thit_off[g]; k < thit_off[g + 1]; ++k) { off[thits[k]] -= 1; bins[off[thits[k]]] = it; }
    }
    for (u32 h = 0; h < n_hits; ++h) {
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
            float tip = fabsf(state[5 * (u64)(t0 + it) + 1]);
            if (q[it] != QX_BAD && tip < mc) { mc = tip; im = it; }
        }
        for (u32 k = a; k < b; ++k) {
            u32 it = bins[k];
            if (q[it] != QX_BAD && it != im) q[it] = QX_DUP;
        }
    }
}
"#;

/// The kernel functions of [`QUALITY`].
pub const QUALITY_KERNELS: &[&str] = &["qx_quality"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_and_the_host_agree_on_the_codes() {
        use quiver_reco::vertices::quality::{BAD, DUP, LOOSE};
        for (name, v) in [("QX_BAD", BAD), ("QX_DUP", DUP), ("QX_LOOSE", LOOSE)] {
            assert!(QUALITY.contains(&format!("#define {name} {v}\n")), "{name}");
        }
    }
}
