//! Rodriguez–Laio density clustering (reference `clusterTracksByDensity`).

use super::cluster_common::{
    check_capacity, count_neighbours, number_clusters, percolate, ClusterParams, Clusters,
};
use super::histogram::ZHist;
use super::VertexError;

/// Each track points to its nearest neighbour of higher density (more neighbours, or as many
/// and a smaller z), within eps and the χ² window; the trees' roots with ≥ min_t neighbours
/// become proto-vertices, numbered in track order.
pub(crate) fn cluster_by_density(
    zt: &[f32],
    ezt2: &[f32],
    p: &ClusterParams,
) -> Result<Clusters, VertexError> {
    check_capacity(zt.len())?;
    let hist = ZHist::new(zt);
    let nn = count_neighbours(zt, ezt2, &hist, p, true);

    // Windows as contiguous slices of histogram-ordered copies; the scan order within a
    // window is the reference's, so ties resolve identically.
    let zs = hist.gather(zt);
    let es = hist.gather(ezt2);
    let ns = hist.gather(&nn);
    let mut iv: Vec<i32> = (0..zt.len() as i32).collect();
    let mut key: Vec<f32> = Vec::new();
    // Each track's pointer depends only on z, σ² and nn, so tracks can be visited in
    // histogram order (neighbouring tracks share windows: friendlier to caches).
    for &i in &hist.bins {
        let i = i as usize;
        let r = hist.around_range(hist.izt[i]);
        let (zi, ei, ni) = (zt[i], ezt2[i], nn[i]);
        // The reference scans the window keeping the closest eligible candidate, starting from
        // eps and accepting equal distances, so the *last* candidate at the minimal distance
        // wins. We compute the same in two branch-free passes: eligible distances (others
        // +∞), then their minimum and the last position holding it.
        key.clear();
        key.extend(
            zs[r.clone()]
                .iter()
                .zip(&es[r.clone()])
                .zip(&ns[r.clone()])
                .map(|((&zj, &ej), &nj)| {
                    // Denser: more neighbours, or as many and a smaller z. This strict order
                    // excludes j == i and keeps the pointer graph acyclic.
                    let denser = (nj > ni) | ((nj == ni) & (zj < zi));
                    let dist = (zi - zj).abs();
                    let ok = denser & (dist <= p.eps) & (dist * dist <= p.chi2max * (ei + ej));
                    if ok {
                        dist
                    } else {
                        f32::INFINITY
                    }
                }),
        );
        let m = key
            .iter()
            .fold(f32::INFINITY, |a, &b| if b < a { b } else { a });
        if m <= p.eps {
            if let Some(k) = key.iter().rposition(|&d| d == m) {
                iv[i] = hist.bins[r.start + k] as i32;
            }
        }
    }
    percolate(&mut iv);
    let n_clusters = number_clusters(&mut iv, &nn, p.min_t)?;
    Ok(Clusters { iv, nn, n_clusters })
}
