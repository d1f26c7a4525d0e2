//! Vertex fit with outlier rejection (reference `fitVertices`).

use super::{IDV_DETACHED, MARKER_LIMIT};

/// Per-vertex fit results (`nv` entries after a fit).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct VertexFit {
    pub zv: Vec<f32>,
    pub wv: Vec<f32>,
    pub chi2: Vec<f32>,
    pub ndof: Vec<i32>,
}

/// Fits the `nv` vertices: z = weighted mean (weights 1/σ²) of the attached tracks, then
/// tracks with (z_v − z_t)²/σ² > `chi2_max` are detached (marker 9999) and the others make
/// χ² and ndof = n − 1; the weight is scaled by ndof/χ² when ndof > 0. The mean is not
/// recomputed after detaching (as the reference). Sums run in track order in f32.
pub(crate) fn fit_vertices(
    zt: &[f32],
    ezt2: &[f32],
    iv: &mut [i32],
    nv: u32,
    chi2_max: f32,
    out: &mut VertexFit,
) {
    let nv = nv as usize;
    out.zv.clear();
    out.zv.resize(nv, 0.0);
    out.wv.clear();
    out.wv.resize(nv, 0.0);
    out.chi2.clear();
    out.chi2.resize(nv, 0.0);
    out.ndof.clear();
    out.ndof.resize(nv, -1);

    for i in 0..zt.len() {
        if iv[i] > MARKER_LIMIT {
            continue;
        }
        let v = iv[i] as usize;
        let w = 1.0f32 / ezt2[i];
        out.zv[v] += zt[i] * w;
        out.wv[v] += w;
    }
    // A vertex left without tracks gets 0/0 = NaN, as in the reference.
    for v in 0..nv {
        out.zv[v] /= out.wv[v];
    }
    for i in 0..zt.len() {
        if iv[i] > MARKER_LIMIT {
            continue;
        }
        let v = iv[i] as usize;
        let d = out.zv[v] - zt[i];
        let c2 = d * (d / ezt2[i]);
        if c2 > chi2_max {
            iv[i] = IDV_DETACHED as i32;
            continue;
        }
        out.chi2[v] += c2;
        out.ndof[v] += 1;
    }
    for v in 0..nv {
        if out.ndof[v] > 0 {
            out.wv[v] *= out.ndof[v] as f32 / out.chi2[v];
        }
    }
}
