//! Iterative label propagation (reference `clusterTracksIterative`), an alternative to the
//! density clustering.

use super::cluster_common::{
    check_capacity, count_neighbours, number_clusters, percolate, ClusterParams, Clusters,
};
use super::cluster_dbscan::attach_edges;
use super::histogram::ZHist;
use super::VertexError;

/// Core tracks (≥ min_t neighbours within eps and the χ² window) that are neighbours share the
/// smallest track index as label; passes over the histogram (each pair once, forward only)
/// alternate with pointer percolation until a pass changes nothing. Edge tracks then join the
/// nearest core as in DBSCAN.
pub(crate) fn cluster_iterative(
    zt: &[f32],
    ezt2: &[f32],
    p: &ClusterParams,
) -> Result<Clusters, VertexError> {
    check_capacity(zt.len())?;
    let hist = ZHist::new(zt);
    let nn = count_neighbours(zt, ezt2, &hist, p, true);

    // Labels only decrease and start at the track's own index, so iv[x] ≤ x: percolation ends.
    let mut iv: Vec<i32> = (0..zt.len() as i32).collect();
    let mut more = true;
    let mut nloops = 0u32;
    while more {
        if nloops % 2 == 1 {
            percolate(&mut iv);
        } else {
            more = false;
            for k in 0..hist.bins.len() {
                let i = hist.bins[k] as usize;
                if nn[i] < p.min_t {
                    continue;
                }
                for &j in hist.after(k, hist.izt[i]) {
                    let j = j as usize;
                    if nn[j] < p.min_t {
                        continue;
                    }
                    let dist = (zt[i] - zt[j]).abs();
                    if dist > p.eps {
                        continue;
                    }
                    if dist * dist > p.chi2max * (ezt2[i] + ezt2[j]) {
                        continue;
                    }
                    let old = iv[j];
                    iv[j] = old.min(iv[i]);
                    if old != iv[i] {
                        more = true;
                    }
                    iv[i] = iv[i].min(old);
                }
            }
        }
        nloops += 1;
    }
    attach_edges(zt, ezt2, &hist, &nn, &mut iv, p);
    let n_clusters = number_clusters(&mut iv, &nn, p.min_t)?;
    Ok(Clusters { iv, nn, n_clusters })
}
