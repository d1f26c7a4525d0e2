//! DBSCAN-style clustering (reference `clusterTracksDBSCAN`), an alternative to the density
//! clustering.

use super::cluster_common::{
    check_capacity, count_neighbours, number_clusters, percolate, ClusterParams, Clusters,
};
use super::histogram::ZHist;
use super::VertexError;

/// Attaches non-core tracks (fewer than min_t neighbours) to the nearest core track within eps
/// and the χ² window; shared by DBSCAN and the iterative clustering. Cores' labels must already
/// be roots.
pub(crate) fn attach_edges(
    zt: &[f32],
    ezt2: &[f32],
    hist: &ZHist,
    nn: &[i32],
    iv: &mut [i32],
    p: &ClusterParams,
) {
    for i in 0..zt.len() {
        if nn[i] >= p.min_t {
            continue;
        }
        let mut mdist = p.eps;
        for &j in hist.around(hist.izt[i]) {
            let j = j as usize;
            if nn[j] < p.min_t {
                continue;
            }
            let dist = (zt[i] - zt[j]).abs();
            if dist > mdist {
                continue;
            }
            if dist * dist > p.chi2max * (ezt2[i] + ezt2[j]) {
                continue;
            }
            mdist = dist;
            iv[i] = iv[j];
        }
    }
}

/// Core tracks (≥ min_t neighbours within eps, no χ² condition, σ ≤ errmax) point to the
/// lowest-z core within eps; connected cores form a cluster, edge tracks join the nearest core.
pub(crate) fn cluster_dbscan(
    zt: &[f32],
    ezt2: &[f32],
    p: &ClusterParams,
) -> Result<Clusters, VertexError> {
    check_capacity(zt.len())?;
    let hist = ZHist::new(zt);
    let nn = count_neighbours(zt, ezt2, &hist, p, false);

    let mut iv: Vec<i32> = (0..zt.len() as i32).collect();
    for i in 0..zt.len() {
        if nn[i] < p.min_t {
            continue;
        }
        // Pointing always to a strictly smaller z keeps the graph acyclic.
        let mut mz = zt[i];
        for &j in hist.around(hist.izt[i]) {
            let j = j as usize;
            if zt[j] >= mz || nn[j] < p.min_t {
                continue;
            }
            if (zt[i] - zt[j]).abs() > p.eps {
                continue;
            }
            mz = zt[j];
            iv[i] = j as i32;
        }
    }
    percolate(&mut iv);
    attach_edges(zt, ezt2, &hist, &nn, &mut iv, p);
    let n_clusters = number_clusters(&mut iv, &nn, p.min_t)?;
    Ok(Clusters { iv, nn, n_clusters })
}
