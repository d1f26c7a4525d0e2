//! Σ pT² per vertex and the ascending sort (reference `sortByPt2`).

use super::MARKER_LIMIT;

pub(crate) struct Sorted {
    pub ptv2: Vec<f32>,
    pub sort_ind: Vec<u16>,
}

/// Sums pT² of the attached tracks per vertex (track order, f32) and sorts the vertex
/// indices by ascending sum. The reference's `std::sort` is unstable; ties (only possible in
/// degenerate cases) are broken here by vertex index, which keeps the output deterministic.
pub(crate) fn sort_by_pt2(ptt2: &[f32], iv: &[i32], nv: usize) -> Sorted {
    let mut ptv2 = vec![0.0f32; nv];
    if nv == 0 {
        return Sorted {
            ptv2,
            sort_ind: Vec::new(),
        };
    }
    for (i, &v) in iv.iter().enumerate() {
        if v > MARKER_LIMIT {
            continue;
        }
        ptv2[v as usize] += ptt2[i];
    }
    let mut sort_ind: Vec<u16> = (0..nv as u16).collect();
    sort_ind.sort_by(|&a, &b| ptv2[a as usize].total_cmp(&ptv2[b as usize]));
    Sorted { ptv2, sort_ind }
}
