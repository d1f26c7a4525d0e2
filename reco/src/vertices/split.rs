//! Splitting of vertices with a bad χ² (reference `splitVertices`).

use super::fit::VertexFit;
use super::{VertexError, MAX_SPLIT_TRACKS, MAX_VERTICES};

/// For each fitted vertex with ndof ≥ 4, fewer than 512 ndof and χ² ≥ `max_chi2`·ndof: a
/// two-means in z (tracks seeded by the sign of z_t − z_v, at most 20 iterations, weights
/// 1/σ²). If both groups are non-empty and Δz²/(1/w₀ + 1/w₁) ≥ 4, the tracks of group 1 move
/// to a new vertex `nv_intermediate` (which is incremented). New vertices are not split again.
pub(crate) fn split_vertices(
    zt: &[f32],
    ezt2: &[f32],
    iv: &mut [i32],
    fit: &VertexFit,
    max_chi2: f32,
    nv_intermediate: &mut u32,
) -> Result<(), VertexError> {
    let nv_final = fit.zv.len();
    let mut it: Vec<usize> = Vec::with_capacity(MAX_SPLIT_TRACKS);
    let mut zz: Vec<f32> = Vec::with_capacity(MAX_SPLIT_TRACKS);
    let mut ww: Vec<f32> = Vec::with_capacity(MAX_SPLIT_TRACKS);
    let mut new_v: Vec<u8> = Vec::with_capacity(MAX_SPLIT_TRACKS);
    for kv in 0..nv_final {
        let ndof = fit.ndof[kv];
        if ndof < 4 || fit.chi2[kv] < max_chi2 * ndof as f32 {
            continue;
        }
        // The reference gives up (asserts) on such large vertices.
        if ndof as usize >= MAX_SPLIT_TRACKS {
            continue;
        }
        it.clear();
        zz.clear();
        ww.clear();
        new_v.clear();
        for k in 0..zt.len() {
            if iv[k] == kv as i32 {
                let z = zt[k] - fit.zv[kv];
                zz.push(z);
                // NaN-safe as the reference: `z < 0` is false for NaN.
                new_v.push(if z < 0.0 { 0 } else { 1 });
                ww.push(1.0f32 / ezt2[k]);
                it.push(k);
            }
        }

        let mut znew = [0.0f32; 2];
        let mut wnew = [0.0f32; 2];
        let mut maxiter = 20;
        let mut more = true;
        while more {
            more = false;
            znew = [0.0; 2];
            wnew = [0.0; 2];
            for k in 0..zz.len() {
                let g = new_v[k] as usize;
                znew[g] += zz[k] * ww[k];
                wnew[g] += ww[k];
            }
            znew[0] /= wnew[0];
            znew[1] /= wnew[1];
            for k in 0..zz.len() {
                let d0 = (zz[k] - znew[0]).abs();
                let d1 = (zz[k] - znew[1]).abs();
                let g = if d0 < d1 { 0 } else { 1 };
                more |= g != new_v[k];
                new_v[k] = g;
            }
            maxiter -= 1;
            if maxiter <= 0 {
                more = false;
            }
        }
        if wnew[0] == 0.0 || wnew[1] == 0.0 {
            continue;
        }
        let dz = znew[0] - znew[1];
        let dist2 = dz * dz;
        let chi2_dist = dist2 / (1.0f32 / wnew[0] + 1.0f32 / wnew[1]);
        if chi2_dist < 4.0 {
            continue;
        }
        let igv = *nv_intermediate;
        if igv as usize >= MAX_VERTICES {
            return Err(VertexError::TooManyVertices {
                n: igv as usize + 1,
                max: MAX_VERTICES,
            });
        }
        *nv_intermediate += 1;
        for k in 0..zz.len() {
            if new_v[k] == 1 {
                iv[it[k]] = igv as i32;
            }
        }
    }
    Ok(())
}
