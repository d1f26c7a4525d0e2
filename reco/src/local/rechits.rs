//! Rec hits with the "CPE fast" position and errors (reference
//! `gpuPixelRecHits.h`, `pixelCPEforGPU.h`, `PixelRecHits.cc`).
//!
//! All arithmetic is f32 in the reference's order (no fused multiply-add), with its integer
//! conversions, so that the hits match bit for bit.

use quiver_formats::conditions::{AverageGeometry, BeamSpot, CommonParams, CpeParams, DetParams};
use quiver_formats::topology::{
    is_big_pix_x, is_big_pix_y, local_x, local_y, LAYER_START, NUMBER_OF_LAYERS,
    NUM_COLS_IN_MODULE, NUM_ROWS_IN_MODULE, X_OFFSET, Y_OFFSET,
};

use super::atan2::unsafe_atan2s;
use super::{check_len, LocalError, INVALID_MODULE, MAX_NUM_MODULES};

/// The digi columns the CPE reads (after calibration and the charge cut).
#[derive(Clone, Copy, Debug)]
pub struct DigiColumns<'a> {
    pub module_ind: &'a [u16],
    pub xx: &'a [u16],
    pub yy: &'a [u16],
    /// Charge in electrons.
    pub adc: &'a [u16],
    pub clus: &'a [i32],
}

/// The cluster bookkeeping the CPE reads.
#[derive(Clone, Copy, Debug)]
pub struct ClusterColumns<'a> {
    /// `[0]` = runs, `[1 + k]` = first digi of run k ([`super::Clusters::module_start`]).
    pub module_start: &'a [u32],
    /// Module id of run k.
    pub module_id: &'a [u32],
    /// Clusters per module id after the charge cut (2000 entries).
    pub n_clusters_in_module: &'a [u32],
    /// Hit offsets per module id (2001 entries).
    pub clus_module_start: &'a [u32],
}

/// Rec hits of one event, ordered by `clus_module_start[module] + cluster number`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecHits {
    /// Local x, cm.
    pub x_local: Vec<f32>,
    /// Local y, cm.
    pub y_local: Vec<f32>,
    /// Local x variance, cm².
    pub xerr_local: Vec<f32>,
    /// Local y variance, cm².
    pub yerr_local: Vec<f32>,
    /// Global position minus the beam spot, cm.
    pub x_global: Vec<f32>,
    pub y_global: Vec<f32>,
    pub z_global: Vec<f32>,
    /// √(x² + y²) of the beam-spot-corrected position, cm.
    pub r_global: Vec<f32>,
    /// φ in int16 units (π ↔ 32768).
    pub iphi: Vec<i16>,
    /// Cluster charge, electrons.
    pub charge: Vec<i32>,
    /// Cluster size × 8 minus the charge unbalance; negative for edge clusters.
    pub size_x: Vec<i16>,
    pub size_y: Vec<i16>,
    /// detIndex of the hit's module.
    pub det_index: Vec<u16>,
    /// Hit offset per module id (2001 entries, = `clus_module_start`).
    pub hits_module_start: Vec<u32>,
    /// Hit offset per layer (`hits_module_start[LAYER_START[l]]`).
    pub hits_layer_start: [u32; NUMBER_OF_LAYERS + 1],
    pub n_hits: u32,
}

impl RecHits {
    fn zeroed(n: usize) -> Self {
        RecHits {
            x_local: vec![0.0; n],
            y_local: vec![0.0; n],
            xerr_local: vec![0.0; n],
            yerr_local: vec![0.0; n],
            x_global: vec![0.0; n],
            y_global: vec![0.0; n],
            z_global: vec![0.0; n],
            r_global: vec![0.0; n],
            iphi: vec![0; n],
            charge: vec![0; n],
            size_x: vec![0; n],
            size_y: vec![0; n],
            det_index: vec![0; n],
            hits_module_start: Vec::new(),
            hits_layer_start: [0; NUMBER_OF_LAYERS + 1],
            n_hits: n as u32,
        }
    }
}

/// Per-cluster sums over its pixels (`ClusParams`).
#[derive(Clone, Copy)]
struct ClusSums {
    min_row: u32,
    max_row: u32,
    min_col: u32,
    max_col: u32,
    q_f_x: i32,
    q_l_x: i32,
    q_f_y: i32,
    q_l_y: i32,
    charge: i32,
}

const EMPTY: ClusSums = ClusSums {
    min_row: u32::MAX,
    max_row: 0,
    min_col: u32::MAX,
    max_col: 0,
    q_f_x: 0,
    q_l_x: 0,
    q_f_y: 0,
    q_l_y: 0,
    charge: 0,
};

/// Builds the rec hits of one event.
///
/// Hits are written for clusters `0..min(n_clusters_in_module[m], slots)` of every module run,
/// where `slots = clus_module_start[m+1] − clus_module_start[m]` (the reference's own
/// invariant; it writes past it only in its > 1024-cluster corner case). A slot whose cluster
/// has no pixel stays zero. Errors on inconsistent column lengths, a module id without
/// `DetParams`, or a used digi outside the module.
///
/// ```
/// use quiver_reco::local::rechits::{rec_hits, DigiColumns, ClusterColumns};
/// use quiver_formats::conditions::*;
/// let det = DetParams {
///     is_barrel: true, is_pos_z: true, layer: 2, index: 100, raw_id: 0,
///     shift_x: 0.0, shift_y: 0.0, charge_width_x: 0.0, charge_width_y: 0.0,
///     x0: 0.0, y0: 0.0, z0: -7.0, sx: [0.0012, 0.00115, 0.005], sy: [0.0021, 0.00375, 0.0085],
///     frame: Frame { px: 7.0, py: 0.0, pz: 0.0, r: [0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0] },
/// };
/// let cpe = CpeParams {
///     common: CommonParams { thickness_b: 0.0285, thickness_e: 0.0285, pitch_x: 0.01, pitch_y: 0.015 },
///     det: vec![det; 1856],
///     average_geometry: AverageGeometry { ladder_z: vec![], ladder_x: vec![], ladder_y: vec![],
///         ladder_r: vec![], ladder_min_z: vec![], ladder_max_z: vec![], end_cap_z: [0.0; 2] },
/// };
/// let mut ncl = vec![0u32; 2000];
/// ncl[100] = 1;
/// let cms: Vec<u32> = (0..=2000).map(|i| (i > 100) as u32).collect();
/// // One pixel at row 40, column 100 of module 100.
/// let digis = DigiColumns { module_ind: &[100], xx: &[40], yy: &[100], adc: &[20000], clus: &[0] };
/// let clusters = ClusterColumns { module_start: &[1, 0], module_id: &[100],
///                                 n_clusters_in_module: &ncl, clus_module_start: &cms };
/// let hits = rec_hits(&digis, &clusters, &cpe, &BeamSpot::default()).unwrap();
/// assert_eq!(hits.n_hits, 1);
/// assert!((hits.x_local[0] - (-0.405)).abs() < 1e-6); // centre of row 40: (40.5 − 81)·0.01
/// assert_eq!((hits.size_x[0], hits.size_y[0]), (8, 8));
/// assert!((hits.x_global[0] - 7.0).abs() < 1e-6);    // the frame maps local y → global x
/// ```
pub fn rec_hits(
    digis: &DigiColumns,
    clusters: &ClusterColumns,
    cpe: &CpeParams,
    bs: &BeamSpot,
) -> Result<RecHits, LocalError> {
    let n = digis.module_ind.len();
    let (n_runs, cms) = check_inputs(digis, clusters)?;
    let n_hits = cms[MAX_NUM_MODULES] as usize;

    let mut hits = RecHits::zeroed(n_hits);
    let mut sums: Vec<ClusSums> = Vec::new();
    for run in 0..n_runs {
        let me = clusters.module_id[run] as usize;
        if me >= MAX_NUM_MODULES || me >= cpe.det.len() {
            return Err(LocalError::ModuleOutOfRange {
                digi: run,
                module: me as u32,
                limit: cpe.det.len(),
            });
        }
        let slots = (cms[me + 1] - cms[me]) as usize;
        let nclus = (clusters.n_clusters_in_module[me] as usize).min(slots);
        if nclus == 0 {
            continue;
        }
        let first = clusters.module_start[1 + run] as usize;
        let me16 = me as u16;
        // The module's valid digis: from the run start until another module begins.
        let end = (first.min(n)..n)
            .find(|&i| digis.module_ind[i] != INVALID_MODULE && digis.module_ind[i] != me16)
            .unwrap_or(n);
        sums.clear();
        sums.resize(nclus, EMPTY);
        cluster_sums(digis, me16, first.min(n)..end, &mut sums)?;
        let det = &cpe.det[me];
        for (ic, s) in sums.iter().enumerate() {
            if s.min_row == u32::MAX {
                continue; // no pixel: leave the slot empty
            }
            let h = cms[me] as usize + ic;
            store_hit(&mut hits, h, me16, s, &cpe.common, det, bs);
        }
    }
    hits.hits_module_start = cms.to_vec();
    for (l, &start) in LAYER_START.iter().enumerate() {
        hits.hits_layer_start[l] = cms[start as usize];
    }
    Ok(hits)
}

/// Checks the column lengths; returns the number of module runs and the checked
/// `clus_module_start`.
fn check_inputs<'a>(
    digis: &DigiColumns,
    clusters: &ClusterColumns<'a>,
) -> Result<(usize, &'a [u32]), LocalError> {
    let n = digis.module_ind.len();
    check_len("xx", digis.xx.len(), n)?;
    check_len("yy", digis.yy.len(), n)?;
    check_len("adc", digis.adc.len(), n)?;
    check_len("clus", digis.clus.len(), n)?;
    check_len(
        "n_clusters_in_module",
        clusters.n_clusters_in_module.len(),
        MAX_NUM_MODULES,
    )?;
    check_len(
        "clus_module_start",
        clusters.clus_module_start.len(),
        MAX_NUM_MODULES + 1,
    )?;
    let n_runs = *clusters
        .module_start
        .first()
        .ok_or(LocalError::ColumnLength {
            name: "module_start",
            got: 0,
            expected: 1,
        })? as usize;
    check_len("module_start", clusters.module_start.len(), n_runs + 1)?;
    check_len("module_id", clusters.module_id.len(), n_runs)?;
    let cms = clus_module_start_checked(clusters.clus_module_start, n)?;
    Ok((n_runs, cms))
}

/// The sums of every cluster of module `me` over its digis `pixels`: first the bounding
/// box, then the charges (total and on the box's edges).
fn cluster_sums(
    digis: &DigiColumns,
    me: u16,
    pixels: std::ops::Range<usize>,
    sums: &mut [ClusSums],
) -> Result<(), LocalError> {
    let nclus = sums.len();
    let in_cluster = |i: usize| -> Option<usize> {
        let c = digis.clus[i];
        (digis.module_ind[i] == me && c >= 0 && (c as usize) < nclus).then_some(c as usize)
    };
    for i in pixels.clone() {
        let Some(c) = in_cluster(i) else { continue };
        let (x, y) = (digis.xx[i], digis.yy[i]);
        if x >= NUM_ROWS_IN_MODULE || y >= NUM_COLS_IN_MODULE {
            return Err(LocalError::PixelOutOfRange {
                digi: i,
                row: x,
                col: y,
            });
        }
        let s = &mut sums[c];
        s.min_row = s.min_row.min(x as u32);
        s.max_row = s.max_row.max(x as u32);
        s.min_col = s.min_col.min(y as u32);
        s.max_col = s.max_col.max(y as u32);
    }
    for i in pixels {
        let Some(c) = in_cluster(i) else { continue };
        let (x, y) = (digis.xx[i] as u32, digis.yy[i] as u32);
        let ch = digis.adc[i] as i32; // pixmx = 65535: no truncation
                                      // i32 sums wrap like the reference's atomics (only reachable with > 32k pixels).
        let s = &mut sums[c];
        s.charge = s.charge.wrapping_add(ch);
        // Without branches: whether a pixel is on an edge is data, and mispredicted often.
        let on = |edge: u32, at: u32| ch & -((edge == at) as i32);
        s.q_f_x = s.q_f_x.wrapping_add(on(s.min_row, x));
        s.q_l_x = s.q_l_x.wrapping_add(on(s.max_row, x));
        s.q_f_y = s.q_f_y.wrapping_add(on(s.min_col, y));
        s.q_l_y = s.q_l_y.wrapping_add(on(s.max_col, y));
    }
    Ok(())
}

/// Writes hit `h` of module `me` from its cluster's sums: local position and errors, then
/// the global position relative to the beam spot.
fn store_hit(
    hits: &mut RecHits,
    h: usize,
    me: u16,
    s: &ClusSums,
    common: &CommonParams,
    det: &DetParams,
    bs: &BeamSpot,
) {
    let cp = cluster_position(common, det, s);
    hits.charge[h] = s.charge;
    hits.det_index[h] = me;
    hits.x_local[h] = cp.x;
    hits.y_local[h] = cp.y;
    hits.size_x[h] = cp.size_x;
    hits.size_y[h] = cp.size_y;
    hits.xerr_local[h] = cp.xerr * cp.xerr;
    hits.yerr_local[h] = cp.yerr * cp.yerr;
    let r = &det.frame.r;
    let mut xg = r[0] * cp.x + r[3] * cp.y;
    let mut yg = r[1] * cp.x + r[4] * cp.y;
    let mut zg = r[2] * cp.x + r[5] * cp.y;
    xg += det.frame.px;
    yg += det.frame.py;
    zg += det.frame.pz;
    xg -= bs.x;
    yg -= bs.y;
    zg -= bs.z;
    hits.x_global[h] = xg;
    hits.y_global[h] = yg;
    hits.z_global[h] = zg;
    hits.r_global[h] = (xg * xg + yg * yg).sqrt();
    hits.iphi[h] = unsafe_atan2s(yg, xg);
}

/// The average geometry with the beam spot subtracted, as the reference copies it next to the
/// hits (`ladderR` recomputed from the shifted x, y).
///
/// ```
/// use quiver_reco::local::rechits::average_geometry_bs;
/// use quiver_formats::conditions::{AverageGeometry, BeamSpot};
/// let ag = AverageGeometry { ladder_z: vec![1.0], ladder_x: vec![3.5], ladder_y: vec![4.0],
///     ladder_r: vec![0.0], ladder_min_z: vec![-2.0], ladder_max_z: vec![4.0], end_cap_z: [30.0, -30.0] };
/// let bs = BeamSpot { x: 0.5, z: 1.0, ..Default::default() };
/// let c = average_geometry_bs(&ag, &bs);
/// assert_eq!((c.ladder_r[0], c.ladder_z[0], c.end_cap_z), (5.0, 0.0, [29.0, -31.0]));
/// ```
pub fn average_geometry_bs(ag: &AverageGeometry, bs: &BeamSpot) -> AverageGeometry {
    let ladder_x: Vec<f32> = ag.ladder_x.iter().map(|&x| x - bs.x).collect();
    let ladder_y: Vec<f32> = ag.ladder_y.iter().map(|&y| y - bs.y).collect();
    AverageGeometry {
        ladder_z: ag.ladder_z.iter().map(|&z| z - bs.z).collect(),
        ladder_r: ladder_x
            .iter()
            .zip(&ladder_y)
            .map(|(&x, &y)| (x * x + y * y).sqrt())
            .collect(),
        ladder_x,
        ladder_y,
        ladder_min_z: ag.ladder_min_z.iter().map(|&z| z - bs.z).collect(),
        ladder_max_z: ag.ladder_max_z.iter().map(|&z| z - bs.z).collect(),
        end_cap_z: [ag.end_cap_z[0] - bs.z, ag.end_cap_z[1] - bs.z],
    }
}

/// The hit offsets must be non-decreasing, and there cannot be more hits than digis (every
/// counted cluster has at least one pixel).
fn clus_module_start_checked(cms: &[u32], n_digis: usize) -> Result<&[u32], LocalError> {
    if cms.windows(2).any(|w| w[1] < w[0]) {
        return Err(LocalError::Config(
            "clus_module_start is not non-decreasing".into(),
        ));
    }
    if cms[0] != 0 || cms[MAX_NUM_MODULES] as usize > n_digis {
        return Err(LocalError::Config(format!(
            "clus_module_start spans {}..{} hits for {n_digis} digis",
            cms[0], cms[MAX_NUM_MODULES]
        )));
    }
    Ok(cms)
}

struct ClusterPosition {
    x: f32,
    y: f32,
    xerr: f32,
    yerr: f32,
    size_x: i16,
    size_y: i16,
}

/// Charge-sharing correction of one projection (`correction`).
#[allow(clippy::too_many_arguments)]
fn correction(
    size_m1: i32,
    q_f: i32,
    q_l: i32,
    upper_edge_first_pix: u16,
    lower_edge_last_pix: u16,
    lorentz_shift: f32,
    thickness: f32,
    cot_angle: f32,
    pitch: f32,
    first_is_big: bool,
    last_is_big: bool,
) -> f32 {
    if size_m1 == 0 {
        return 0.0;
    }
    let mut w_eff = 0.0f32;
    let mut simple = true;
    if size_m1 == 1 {
        // Two pixels: the charge width expected from the track angle, minus the inner width.
        let w_inner = pitch * (lower_edge_last_pix as i32 - upper_edge_first_pix as i32) as f32;
        let w_pred = thickness * cot_angle - lorentz_shift;
        w_eff = w_pred.abs() - w_inner;
        simple = (w_eff < 0.0) | (w_eff > pitch);
    }
    if simple {
        // Fall back to the mean length of the two edge pixels.
        let mut sum_of_edge = 2.0f32;
        if first_is_big {
            sum_of_edge += 1.0;
        }
        if last_is_big {
            sum_of_edge += 1.0;
        }
        w_eff = pitch * 0.5 * sum_of_edge;
    }
    let q_diff = q_l.wrapping_sub(q_f) as f32;
    let mut q_sum = q_l.wrapping_add(q_f) as f32;
    if q_sum == 0.0 {
        q_sum = 1.0;
    }
    0.5 * (q_diff / q_sum) * w_eff
}

/// `8·|Q_f − Q_l|/(Q_f + Q_l)` truncated; the reference evaluates it in double.
fn unbalance(q_f: i32, q_l: i32) -> i32 {
    (8.0f64 * (q_f.wrapping_sub(q_l) as f32).abs() as f64 / (q_f.wrapping_add(q_l) as f32) as f64)
        as i32
}

/// `position` + `errorFromDB` for one cluster with at least one pixel.
fn cluster_position(com: &CommonParams, det: &DetParams, s: &ClusSums) -> ClusterPosition {
    // Inner edges of the two end pixels, in pitch units.
    let llx = (s.min_row + 1) as u16;
    let lly = (s.min_col + 1) as u16;
    let urx = s.max_row as u16;
    let ury = s.max_col as u16;
    let llxl = local_x(llx);
    let llyl = local_y(lly);
    let urxl = local_x(urx);
    let uryl = local_y(ury);
    let mx = llxl as i32 + urxl as i32;
    let my = llyl as i32 + uryl as i32;

    let (min_row, max_row) = (s.min_row as u16, s.max_row as u16);
    let (min_col, max_col) = (s.min_col as u16, s.max_col as u16);
    let mut xsize = urxl as i32 + 2 - llxl as i32;
    let mut ysize = uryl as i32 + 2 - llyl as i32;
    xsize += is_big_pix_x(min_row) as i32 + is_big_pix_x(max_row) as i32;
    ysize += is_big_pix_y(min_col) as i32 + is_big_pix_y(max_col) as i32;
    xsize = (8 * xsize).wrapping_sub(unbalance(s.q_f_x, s.q_l_x));
    ysize = (8 * ysize).wrapping_sub(unbalance(s.q_f_y, s.q_l_y));
    let edge_x = min_row == 0 || max_row == NUM_ROWS_IN_MODULE - 1;
    let edge_y = min_col == 0 || max_col == NUM_COLS_IN_MODULE - 1;
    let mut size_x = xsize.min(1023) as i16;
    let mut size_y = ysize.min(1023) as i16;
    if edge_x {
        size_x = size_x.wrapping_neg();
    }
    if edge_y {
        size_y = size_y.wrapping_neg();
    }

    let x_pos = det.shift_x + com.pitch_x * (0.5f32 * mx as f32 + X_OFFSET as f32);
    let y_pos = det.shift_y + com.pitch_y * (0.5f32 * my as f32 + Y_OFFSET as f32);
    // Track direction from the global origin (straight line).
    let gvz = -1.0f32 / det.z0;
    let cot_alpha = (x_pos - det.x0) * gvz;
    let cot_beta = (y_pos - det.y0) * gvz;
    let thickness = if det.is_barrel {
        com.thickness_b
    } else {
        com.thickness_e
    };
    let xcorr = correction(
        (s.max_row - s.min_row) as i32,
        s.q_f_x,
        s.q_l_x,
        llxl,
        urxl,
        det.charge_width_x,
        thickness,
        cot_alpha,
        com.pitch_x,
        is_big_pix_x(min_row),
        is_big_pix_x(max_row),
    );
    let ycorr = correction(
        (s.max_col - s.min_col) as i32,
        s.q_f_y,
        s.q_l_y,
        llyl,
        uryl,
        det.charge_width_y,
        thickness,
        cot_beta,
        com.pitch_y,
        is_big_pix_y(min_col),
        is_big_pix_y(max_col),
    );

    // Errors from the conditions: [multi-pixel, single pixel, single big pixel]; fixed
    // values for edge clusters.
    let sx = s.max_row - s.min_row;
    let sy = s.max_col - s.min_col;
    let ix = (sx == 0) as usize + (sx == 0 && is_big_pix_x(min_row)) as usize;
    let iy = (sy == 0) as usize + (sy == 0 && is_big_pix_y(min_col)) as usize;
    let xerr = if edge_x { 0.0050f32 } else { det.sx[ix] };
    let yerr = if edge_y { 0.0085f32 } else { det.sy[iy] };

    ClusterPosition {
        x: x_pos + xcorr,
        y: y_pos + ycorr,
        xerr,
        yerr,
        size_x,
        size_y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::charge_cut::{charge_cut, ChargeCutConfig};
    use crate::local::clusterize::{clusterize, ClusterizeConfig};
    use crate::local::test_support::simple_cpe;

    /// Pixels `(module, row, col, electrons)` → clusters → charge cut → hits.
    fn hits_with_bs(pixels: &[(u16, u16, u16, u16)], bs: &BeamSpot) -> RecHits {
        let ids: Vec<u16> = pixels.iter().map(|p| p.0).collect();
        let xx: Vec<u16> = pixels.iter().map(|p| p.1).collect();
        let yy: Vec<u16> = pixels.iter().map(|p| p.2).collect();
        let adc: Vec<u16> = pixels.iter().map(|p| p.3).collect();
        let c = clusterize(&ids, &xx, &yy, &ClusterizeConfig::default()).unwrap();
        let cut = charge_cut(
            &ids,
            &adc,
            &c.clus,
            &c.module_start,
            &c.n_clusters_in_module,
            &ChargeCutConfig::default(),
        )
        .unwrap();
        let digis = DigiColumns {
            module_ind: &cut.module_ind,
            xx: &xx,
            yy: &yy,
            adc: &adc,
            clus: &cut.clus,
        };
        let clusters = ClusterColumns {
            module_start: &c.module_start,
            module_id: &c.module_id,
            n_clusters_in_module: &cut.n_clusters_in_module,
            clus_module_start: &cut.clus_module_start,
        };
        rec_hits(&digis, &clusters, &simple_cpe(), bs).unwrap()
    }

    fn hits(pixels: &[(u16, u16, u16, u16)]) -> RecHits {
        hits_with_bs(pixels, &BeamSpot::default())
    }

    fn close(a: f32, b: f64) -> bool {
        (a as f64 - b).abs() < 1e-6
    }

    #[test]
    fn single_pixel() {
        let h = hits(&[(500, 40, 100, 20000)]);
        assert_eq!(h.n_hits, 1);
        assert!(close(h.x_local[0], 0.01 * (40.5 - 81.0)));
        // local_y(100) = 103 (two big columns of ROC 0 + own big first column offset)
        assert!(close(h.y_local[0], 0.015 * (103.5 - 216.0)));
        assert_eq!(
            (h.size_x[0], h.size_y[0], h.charge[0], h.det_index[0]),
            (8, 8, 20000, 500)
        );
        assert_eq!(h.xerr_local[0], 0.00115f32 * 0.00115f32);
        assert_eq!(h.yerr_local[0], 0.00375f32 * 0.00375f32);
        // Frame: local x → global y, local y → global z, module at x = 7.
        assert!(close(h.x_global[0], 7.0) && close(h.y_global[0], h.x_local[0] as f64));
        assert!(close(h.z_global[0], h.y_local[0] as f64));
        assert!(close(
            h.r_global[0],
            (49.0 + (h.x_local[0] as f64).powi(2)).sqrt()
        ));
        let phi = (h.y_global[0] as f64).atan2(7.0) * 32768.0 / std::f64::consts::PI;
        assert!((h.iphi[0] as f64 - phi).abs() <= 2.0);
    }

    #[test]
    fn single_big_pixel_in_both_directions() {
        // Row 79 and column 51 are double size: size 2 pitches in each direction.
        let h = hits(&[(500, 79, 51, 20000)]);
        assert_eq!((h.size_x[0], h.size_y[0]), (16, 16));
        assert!(close(h.x_local[0], 0.01 * (80.0 - 81.0)));
        assert!(close(h.y_local[0], 0.015 * (53.0 - 216.0)));
        assert_eq!(h.xerr_local[0], 0.0050f32 * 0.0050f32); // sx[2]
        assert_eq!(h.yerr_local[0], 0.0085f32 * 0.0085f32); // sy[2]
    }

    #[test]
    fn cluster_across_roc_edge() {
        // Columns 51 | 52 belong to ROCs 0 and 1, both big: 4 pitches long, centred on 54.
        let h = hits(&[(500, 30, 51, 10000), (500, 30, 52, 10000)]);
        assert_eq!(h.n_hits, 1);
        assert_eq!(h.size_y[0], 32);
        assert!(close(h.y_local[0], 0.015 * (54.0 - 216.0)));
        assert_eq!(h.yerr_local[0], 0.0021f32 * 0.0021f32); // sy[0]: multi-pixel
        assert_eq!(h.charge[0], 20000);
        // Rows 79 | 80 (the two big rows) likewise.
        let h = hits(&[(500, 79, 10, 10000), (500, 80, 10, 10000)]);
        assert_eq!(h.size_x[0], 32);
        assert!(close(h.x_local[0], 0.0));
    }

    #[test]
    fn charge_sharing_correction() {
        // Two rows: W_eff from the track angle (origin at local z0 = −7 cm).
        let h = hits(&[(500, 40, 10, 15000), (500, 41, 10, 5000)]);
        let x_pos = 0.01f64 * (41.0 - 81.0);
        let w_eff = (0.0285 * (x_pos / 7.0)).abs();
        assert!(w_eff > 0.0 && w_eff < 0.01);
        let corr = 0.5 * (5000.0 - 15000.0) / 20000.0 * w_eff;
        assert!(close(h.x_local[0], x_pos + corr));
        assert_eq!(h.size_x[0], 16 - 4); // unbalance 8·10000/20000
                                         // Three rows: W_eff falls back to one pitch.
        let h = hits(&[
            (500, 40, 10, 10000),
            (500, 41, 10, 3000),
            (500, 42, 10, 2000),
        ]);
        let corr = 0.5 * (2000.0 - 10000.0) / 12000.0 * 0.01;
        assert!(close(h.x_local[0], 0.01 * (41.5 - 81.0) + corr));
        assert_eq!(h.size_x[0], 24 - 5);
    }

    #[test]
    fn edge_clusters() {
        let h = hits(&[(500, 0, 200, 9000), (500, 100, 415, 9000)]);
        assert_eq!(h.n_hits, 2);
        assert_eq!((h.size_x[0], h.size_y[0]), (-8, 8));
        assert_eq!(h.xerr_local[0], 0.0050f32 * 0.0050f32);
        assert_eq!(h.yerr_local[0], 0.00375f32 * 0.00375f32);
        assert_eq!((h.size_x[1], h.size_y[1]), (8, -16)); // column 415 is also a big pixel
        assert_eq!(h.yerr_local[1], 0.0085f32 * 0.0085f32);
    }

    #[test]
    fn hit_order_layer_starts_and_beam_spot() {
        let bs = BeamSpot {
            x: 0.1,
            y: -0.2,
            z: 0.5,
            ..Default::default()
        };
        // Module 1300 (FPix) digis come first in the stream, but hits are ordered by module.
        let h = hits_with_bs(
            &[
                (1300, 10, 10, 9000),
                (10, 20, 20, 9000),
                (10, 60, 60, 9000),
                (200, 5, 5, 9000),
                (200, 5, 6, 9000),
            ],
            &bs,
        );
        assert_eq!(h.n_hits, 4);
        assert_eq!(h.det_index, vec![10, 10, 200, 1300]);
        assert_eq!(h.charge, vec![9000, 9000, 18000, 9000]);
        assert_eq!(h.hits_layer_start, [0, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4]);
        assert_eq!(h.hits_module_start[11], 2);
        assert!(close(h.x_global[0], 7.0 - 0.1f32 as f64));
        let avg = average_geometry_bs(&simple_cpe().average_geometry, &bs);
        assert!((avg.ladder_r[0] - (2.9f32 * 2.9 + 4.2 * 4.2).sqrt()).abs() < 1e-5);
        assert_eq!(avg.end_cap_z, [29.5, -30.5]);
    }

    #[test]
    fn rejects_inconsistent_inputs() {
        let cpe = simple_cpe();
        let ncl = vec![0u32; 2000];
        let cms = vec![0u32; 2001];
        let digis = DigiColumns {
            module_ind: &[5],
            xx: &[1],
            yy: &[1],
            adc: &[1],
            clus: &[0],
        };
        let bad_run = ClusterColumns {
            module_start: &[1, 0],
            module_id: &[1900],
            n_clusters_in_module: &ncl,
            clus_module_start: &cms,
        };
        assert!(matches!(
            rec_hits(&digis, &bad_run, &cpe, &BeamSpot::default()),
            Err(LocalError::ModuleOutOfRange { .. })
        ));
        let short = ClusterColumns {
            module_start: &[2, 0],
            module_id: &[5],
            n_clusters_in_module: &ncl,
            clus_module_start: &cms,
        };
        assert!(matches!(
            rec_hits(&digis, &short, &cpe, &BeamSpot::default()),
            Err(LocalError::ColumnLength { .. })
        ));
    }
}
