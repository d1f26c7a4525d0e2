//! Pieces shared by the three clusterings: parameters, neighbour counting, and the final
//! numbering of clusters.

use super::histogram::ZHist;
use super::{VertexError, MAX_SELECTED_TRACKS, MAX_VERTICES};

/// Clustering cuts (see [`super::VertexConfig`] for units).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClusterParams {
    pub min_t: i32,
    pub eps: f32,
    pub errmax: f32,
    pub chi2max: f32,
}

/// Result of a clustering: per selected track a proto-vertex index in `0..n_clusters`, or the
/// noise marker 9997.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Clusters {
    pub iv: Vec<i32>,
    /// Neighbour count per track (the reference's `nn`, kept for tests).
    pub nn: Vec<i32>,
    pub n_clusters: u32,
}

pub(crate) fn check_capacity(n: usize) -> Result<(), VertexError> {
    if n > MAX_SELECTED_TRACKS {
        return Err(VertexError::TooManySelectedTracks {
            n,
            max: MAX_SELECTED_TRACKS,
        });
    }
    Ok(())
}

/// Number of neighbours of each track with σ² ≤ errmax² (others get 0): tracks in the
/// adjacent bins with |Δz| ≤ eps and, when `use_chi2`, Δz² ≤ chi2max·(σ²ᵢ+σ²ⱼ).
///
/// The count is an integer, so it does not depend on the visiting order: we scan each window
/// as a contiguous slice of the histogram-ordered copies without branches (inputs are finite,
/// so `!(a > b)` is `a <= b`), counting the track itself and removing it afterwards (Δz = 0
/// always passes both cuts).
pub(crate) fn count_neighbours(
    zt: &[f32],
    ezt2: &[f32],
    hist: &ZHist,
    p: &ClusterParams,
    use_chi2: bool,
) -> Vec<i32> {
    let er2mx = p.errmax * p.errmax;
    let zs = hist.gather(zt);
    let es = hist.gather(ezt2);
    let mut nn = vec![0i32; zt.len()];
    for &i in &hist.bins {
        let i = i as usize;
        if ezt2[i] > er2mx {
            continue;
        }
        let r = hist.around_range(hist.izt[i]);
        let (zi, ei) = (zt[i], ezt2[i]);
        let (zw, ew) = (&zs[r.clone()], &es[r]);
        let count: i32 = if use_chi2 {
            zw.iter()
                .zip(ew)
                .map(|(&zj, &ej)| {
                    let dist = (zi - zj).abs();
                    ((dist <= p.eps) & (dist * dist <= p.chi2max * (ei + ej))) as i32
                })
                .sum()
        } else {
            zw.iter().map(|&zj| ((zi - zj).abs() <= p.eps) as i32).sum()
        };
        nn[i] = count - 1;
    }
    nn
}

/// Follows `iv` to the root of each track's tree (`iv[m] == m`). The pointer graphs the
/// clusterings build are acyclic, so this terminates.
pub(crate) fn percolate(iv: &mut [i32]) {
    for i in 0..iv.len() {
        let mut m = iv[i];
        while m != iv[m as usize] {
            m = iv[m as usize];
        }
        iv[i] = m;
    }
}

/// Numbers the roots with at least `min_t` neighbours 0, 1, … in track order, marks the
/// others' trees as noise (9997), and relabels every track with its root's number. `iv` must
/// point every track to a root.
pub(crate) fn number_clusters(iv: &mut [i32], nn: &[i32], min_t: i32) -> Result<u32, VertexError> {
    // Roots get negative labels −(k+1) (vertex k) or −9998 (noise) so that one pass can then
    // copy them to the members and a last pass flips the sign.
    let mut found: u32 = 0;
    for i in 0..iv.len() {
        if iv[i] == i as i32 {
            if nn[i] >= min_t {
                found += 1;
                iv[i] = -(found as i32);
            } else {
                iv[i] = -9998;
            }
        }
    }
    // The reference asserts strictly fewer than MAXVTX proto-vertices.
    if found as usize >= MAX_VERTICES {
        return Err(VertexError::TooManyVertices {
            n: found as usize,
            max: MAX_VERTICES - 1,
        });
    }
    for i in 0..iv.len() {
        if iv[i] >= 0 {
            iv[i] = iv[iv[i] as usize];
        }
    }
    for v in iv.iter_mut() {
        *v = -*v - 1;
    }
    Ok(found)
}
