//! The synthetic CMS Phase-1-like pixel geometry: 1856 identical 160×416-pixel modules in the
//! reference detIndex order (`topology::LAYER_START`), their frames, rawIds and the CPE
//! conditions derived from them (docs/datasets.md).
//!
//! Physics computations use `f64`; the conditions handed to the reconstruction are `f32` as in
//! the reference dumps.

use crate::conditions::{AverageGeometry, CommonParams, CpeParams, DetParams, Frame};
use crate::topology::{
    LADDERS_PER_LAYER, LAYER_START, MODULES_PER_LADDER, NUMBER_OF_LADDERS_IN_BARREL,
    NUMBER_OF_MODULES,
};

/// Pixel pitch along local x (rows), cm.
pub const PITCH_X: f64 = 0.01;
/// Pixel pitch along local y (columns), cm.
pub const PITCH_Y: f64 = 0.015;
/// Sensor thickness, cm.
pub const THICKNESS: f64 = 0.0285;
/// Half width of the sensitive area along local x: 81 pitch units (2 big rows count double).
pub const HALF_X: f64 = 81.0 * PITCH_X;
/// Half length of the sensitive area along local y: 216 pitch units.
pub const HALF_Y: f64 = 216.0 * PITCH_Y;
/// Nominal barrel layer radii (cm): ladders alternate around these.
pub const BARREL_RADII: [f64; 4] = [2.9, 6.8, 10.9, 15.9805];
/// Half the radial distance between the inner and outer ladders of a layer (cm); L4 reproduces
/// the 15.815 / 16.146 cm pair of the reference.
pub const LADDER_HALF_GAP: [f64; 4] = [0.15, 0.15, 0.15, 0.1655];
/// Distance between module centres along a barrel ladder, cm.
pub const MODULE_Z_PITCH: f64 = 6.7;
/// |z| of the three forward disks (centre of the disk envelope), cm.
pub const DISK_Z: [f64; 3] = [32.45, 39.95, 49.45];
/// Blades per ring (inner, outer); two panels (modules) per blade → 112 modules per disk.
pub const BLADES_PER_RING: [u16; 2] = [22, 34];
/// Radius of the module centres of the inner and outer ring, cm (modules are radial, 6.48 cm long).
pub const RING_RADIUS: [f64; 2] = [7.75, 12.85];
/// z offset of the inner / outer ring from the disk centre (away from the IP), cm.
pub const RING_DZ: [f64; 2] = [-0.6, 0.6];
/// z offset of panel 1 / panel 2 from the ring plane (away from the IP), cm.
pub const PANEL_DZ: [f64; 2] = [-0.25, 0.25];
/// Turbine rotation of the forward modules about their radial axis, rad (≈ 20°).
pub const BLADE_ROTATION: f64 = 20.0 * std::f64::consts::PI / 180.0;
/// Nominal field, T, as the reference's `bField` implies.
pub const B_FIELD_T: f64 = 3.8112;
/// Lorentz angle per tesla of the simulation (`TanLorentzAnglePerTesla`).
pub const TAN_LORENTZ_PER_TESLA: f64 = 0.106;

/// One module of the synthetic detector.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModuleGeom {
    /// detIndex 0..1855.
    pub index: u16,
    /// Layer 0..9 (`topology::layer_of`).
    pub layer: u8,
    /// CMSSW layer (barrel 1..4) or disk (1..3).
    pub cmssw_layer: u16,
    pub is_barrel: bool,
    /// Sign of the module centre z (for barrel modules: module number ≥ 5).
    pub is_pos_z: bool,
    /// CMSSW DetId with the bit layout of CMSSW's `PXBDetId`/`PXFDetId`.
    pub raw_id: u32,
    /// Barrel ladder (1-based) or forward blade (1-based, inner ring first).
    pub ladder: u16,
    /// Barrel module along z (1..8) or forward panel (1..2).
    pub module: u16,
    /// Module centre, global cm.
    pub centre: [f64; 3],
    /// Rotation: rows are the local x, y, z axes in global coordinates.
    pub rot: [[f64; 3]; 3],
    /// Signed tangent of the Lorentz angle: charge created at local depth z (−T/2..T/2) lands
    /// displaced by `tan_lorentz·(z + T/2)` along local x.
    pub tan_lorentz: f64,
}

impl ModuleGeom {
    /// Global → local: `R·(v − p)`.
    #[inline]
    pub fn to_local(&self, v: [f64; 3]) -> [f64; 3] {
        let d = [
            v[0] - self.centre[0],
            v[1] - self.centre[1],
            v[2] - self.centre[2],
        ];
        self.rotate(d)
    }

    /// Rotates a global direction into the local frame.
    #[inline]
    pub fn rotate(&self, d: [f64; 3]) -> [f64; 3] {
        let r = &self.rot;
        [
            r[0][0] * d[0] + r[0][1] * d[1] + r[0][2] * d[2],
            r[1][0] * d[0] + r[1][1] * d[1] + r[1][2] * d[2],
            r[2][0] * d[0] + r[2][1] * d[1] + r[2][2] * d[2],
        ]
    }

    /// Local → global: `Rᵀ·u + p`.
    #[inline]
    pub fn to_global(&self, u: [f64; 3]) -> [f64; 3] {
        let r = &self.rot;
        let mut g = self.centre;
        for (k, gk) in g.iter_mut().enumerate() {
            *gk += r[0][k] * u[0] + r[1][k] * u[1] + r[2][k] * u[2];
        }
        g
    }

    /// The module normal (local z) in global coordinates.
    #[inline]
    pub fn normal(&self) -> [f64; 3] {
        self.rot[2]
    }

    /// The frame in the reference's `f32` convention.
    pub fn frame(&self) -> Frame {
        let r = &self.rot;
        Frame {
            px: self.centre[0] as f32,
            py: self.centre[1] as f32,
            pz: self.centre[2] as f32,
            r: [
                r[0][0] as f32,
                r[0][1] as f32,
                r[0][2] as f32,
                r[1][0] as f32,
                r[1][1] as f32,
                r[1][2] as f32,
                r[2][0] as f32,
                r[2][1] as f32,
                r[2][2] as f32,
            ],
        }
    }
}

/// Row (0..159) of a local x (cm), or `None` outside the sensor. Inverse of `topology::local_x`.
///
/// ```
/// use quiver_datasets::geometry::{row_of, PITCH_X};
/// assert_eq!(row_of(-0.805), Some(0));
/// assert_eq!(row_of(0.0), Some(80)); // the centre lies in big row 80 (edges 81..83)
/// assert_eq!(row_of(-0.015), Some(79));
/// assert_eq!(row_of(0.9), None);
/// ```
#[inline]
pub fn row_of(x: f64) -> Option<u16> {
    let u = x * (1.0 / PITCH_X) + 81.0;
    if !(0.0..162.0).contains(&u) {
        return None;
    }
    let e = u as u16; // floor, u ≥ 0
    Some(if e < 79 {
        e
    } else if e < 81 {
        79
    } else if e < 83 {
        80
    } else {
        e - 2
    })
}

/// Column (0..415) of a local y (cm), or `None` outside the sensor. Inverse of `topology::local_y`.
///
/// ```
/// use quiver_datasets::geometry::col_of;
/// assert_eq!(col_of(-3.235), Some(0));
/// assert_eq!(col_of(3.235), Some(415));
/// assert_eq!(col_of(4.0), None);
/// ```
#[inline]
pub fn col_of(y: f64) -> Option<u16> {
    let v = y * (1.0 / PITCH_Y) + 216.0;
    if !(0.0..432.0).contains(&v) {
        return None;
    }
    let roc = ((v * (1.0 / 54.0)) as u16).min(7);
    let w = v - 54.0 * roc as f64;
    let lc = if w < 2.0 {
        0
    } else if w >= 52.0 {
        51
    } else {
        (w as u16) - 1
    };
    Some(52 * roc + lc)
}

/// Lower edge (cm) and width (cm) of row `r` along local x.
#[inline]
pub fn row_span(r: u16) -> (f64, f64) {
    let e = crate::topology::local_x(r) as f64;
    let w = if crate::topology::is_big_pix_x(r) {
        2.0
    } else {
        1.0
    };
    ((e - 81.0) * PITCH_X, w * PITCH_X)
}

/// Lower edge (cm) and width (cm) of column `c` along local y.
#[inline]
pub fn col_span(c: u16) -> (f64, f64) {
    let e = crate::topology::local_y(c) as f64;
    let w = if crate::topology::is_big_pix_y(c) {
        2.0
    } else {
        1.0
    };
    ((e - 216.0) * PITCH_Y, w * PITCH_Y)
}

/// Barrel rawId (CMSSW `PXBDetId`): tracker det 1, subdet 1, layer, ladder, module.
pub const fn barrel_raw_id(layer: u32, ladder: u32, module: u32) -> u32 {
    (1 << 28) | (1 << 25) | (layer << 20) | (ladder << 12) | (module << 2)
}

/// Endcap rawId: tracker det 1, subdet 2, side (1 = −z, 2 = +z), disk, blade, panel, module 1.
pub const fn endcap_raw_id(side: u32, disk: u32, blade: u32, panel: u32) -> u32 {
    (1 << 28) | (2 << 25) | (side << 23) | (disk << 18) | (blade << 12) | (panel << 10) | (1 << 2)
}

/// The whole detector.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    /// All modules, indexed by detIndex.
    pub modules: Vec<ModuleGeom>,
}

impl Default for Geometry {
    fn default() -> Self {
        Self::phase1()
    }
}

impl Geometry {
    /// Builds the Phase-1-like layout: 4 barrel layers of alternating-radius ladders with 8
    /// modules along z, 3 disks per side with inner/outer rings of turbine-rotated radial
    /// modules (2 panels per blade). Modules of neighbouring ladders/blades overlap in φ.
    ///
    /// ```
    /// use quiver_datasets::geometry::Geometry;
    /// let g = Geometry::phase1();
    /// assert_eq!(g.modules.len(), 1856);
    /// assert_eq!(g.modules[1184].layer, 4);
    /// ```
    pub fn phase1() -> Self {
        let mut modules = Vec::with_capacity(NUMBER_OF_MODULES as usize);
        let tan_l = TAN_LORENTZ_PER_TESLA * B_FIELD_T;
        for (l, &n_ladders) in LADDERS_PER_LAYER.iter().enumerate() {
            let n = n_ladders as usize;
            for lad in 0..n {
                // Ladder φ; the half-step offset keeps ladder 1 off the x axis.
                let phi = 2.0 * std::f64::consts::PI * (lad as f64 + 0.5) / n as f64;
                // Even ladders (1-based numbering) outer for L1..L3, inner for L4.
                let even = (lad + 1) % 2 == 0;
                let outer = if l < 3 { even } else { !even };
                let r = BARREL_RADII[l]
                    + if outer {
                        LADDER_HALF_GAP[l]
                    } else {
                        -LADDER_HALF_GAP[l]
                    };
                let (s, c) = phi.sin_cos();
                // local x = rφ direction, local y = +z, local z = outward normal (right-handed).
                let rot = [[-s, c, 0.0], [0.0, 0.0, 1.0], [c, s, 0.0]];
                for m in 0..MODULES_PER_LADDER {
                    let z = (m as f64 - 3.5) * MODULE_Z_PITCH;
                    let module = m + 1;
                    modules.push(ModuleGeom {
                        index: modules.len() as u16,
                        layer: l as u8,
                        cmssw_layer: l as u16 + 1,
                        is_barrel: true,
                        is_pos_z: module >= 5,
                        raw_id: barrel_raw_id(l as u32 + 1, lad as u32 + 1, module as u32),
                        ladder: lad as u16 + 1,
                        module,
                        centre: [r * c, r * s, z],
                        rot,
                        tan_lorentz: tan_l,
                    });
                }
            }
        }
        // Positive endcap first (layers 4..6), then negative (7..9).
        for &sign in &[1.0f64, -1.0] {
            for (d, &dz) in DISK_Z.iter().enumerate() {
                let mut blade_number = 0u16;
                for ring in 0..2 {
                    let nb = BLADES_PER_RING[ring] as usize;
                    for b in 0..nb {
                        blade_number += 1;
                        for panel in 0..2u16 {
                            // The two panels of a blade cover staggered φ (2 modules per blade step).
                            let slot = 2 * b + panel as usize;
                            let phi =
                                2.0 * std::f64::consts::PI * (slot as f64 + 0.25) / (2 * nb) as f64;
                            let (s, c) = phi.sin_cos();
                            let z = sign * (dz + RING_DZ[ring] + PANEL_DZ[panel as usize]);
                            let r = RING_RADIUS[ring];
                            let radial = [c, s, 0.0];
                            let outward = [0.0, 0.0, sign];
                            // x = y × z so that (x, y, z) is right-handed.
                            let x0 = cross(radial, outward);
                            // Turbine: rotate x and z about the radial axis.
                            let (sa, ca) = BLADE_ROTATION.sin_cos();
                            let xr = add(scale(x0, ca), scale(outward, sa));
                            let zr = add(scale(outward, ca), scale(x0, -sa));
                            let layer = if sign > 0.0 { 4 + d } else { 7 + d };
                            modules.push(ModuleGeom {
                                index: modules.len() as u16,
                                layer: layer as u8,
                                cmssw_layer: d as u16 + 1,
                                is_barrel: false,
                                is_pos_z: sign > 0.0,
                                raw_id: endcap_raw_id(
                                    if sign > 0.0 { 2 } else { 1 },
                                    d as u32 + 1,
                                    blade_number as u32,
                                    panel as u32 + 1,
                                ),
                                ladder: blade_number,
                                module: panel + 1,
                                centre: [r * c, r * s, z],
                                rot: [xr, radial, zr],
                                // B is nearly along the normal: drift neglected.
                                tan_lorentz: 0.0,
                            });
                        }
                    }
                }
            }
        }
        debug_assert_eq!(modules.len(), LAYER_START[10] as usize);
        Geometry { modules }
    }

    /// The CPE conditions for this geometry.
    ///
    /// ```
    /// use quiver_datasets::geometry::Geometry;
    /// let cpe = Geometry::phase1().cpe_params();
    /// assert_eq!(cpe.det.len(), 1856);
    /// assert_eq!(cpe.average_geometry.ladder_r.len(), 148);
    /// ```
    pub fn cpe_params(&self) -> CpeParams {
        let t = THICKNESS as f32;
        let det: Vec<DetParams> = self
            .modules
            .iter()
            .map(|m| {
                let frame = m.frame();
                let p = [-m.centre[0], -m.centre[1], -m.centre[2]];
                let o = m.rotate(p);
                // Full-thickness drift and its centroid displacement (the CPE adds shift_x).
                let drift = (m.tan_lorentz * THICKNESS) as f32;
                let (sx, sy) = if m.is_barrel {
                    ([0.0012f32, 0.00115, 0.0050], [0.0021f32, 0.00375, 0.0085])
                } else {
                    ([0.0020f32, 0.0020, 0.0050], [0.0021f32, 0.0021, 0.0085])
                };
                DetParams {
                    is_barrel: m.is_barrel,
                    is_pos_z: m.is_pos_z,
                    layer: m.cmssw_layer,
                    index: m.index,
                    raw_id: m.raw_id,
                    shift_x: -0.5 * drift,
                    shift_y: 0.0,
                    charge_width_x: -drift,
                    charge_width_y: 0.0,
                    x0: o[0] as f32,
                    y0: o[1] as f32,
                    z0: o[2] as f32,
                    sx,
                    sy,
                    frame,
                }
            })
            .collect();
        let _ = t;
        let n = NUMBER_OF_LADDERS_IN_BARREL;
        let nm = MODULES_PER_LADDER as usize;
        let mut ag = AverageGeometry {
            ladder_z: vec![0.0; n],
            ladder_x: vec![0.0; n],
            ladder_y: vec![0.0; n],
            ladder_r: vec![0.0; n],
            ladder_min_z: vec![1000.0; n],
            ladder_max_z: vec![-1000.0; n],
            end_cap_z: [-1000.0, 1000.0],
        };
        for il in 0..n {
            for im in 0..nm {
                let f = &det[il * nm + im].frame;
                ag.ladder_z[il] += f.pz;
                ag.ladder_x[il] += f.px;
                ag.ladder_y[il] += f.py;
                ag.ladder_min_z[il] = ag.ladder_min_z[il].min(f.pz);
                ag.ladder_max_z[il] = ag.ladder_max_z[il].max(f.pz);
            }
            ag.ladder_z[il] /= nm as f32;
            ag.ladder_x[il] /= nm as f32;
            ag.ladder_y[il] /= nm as f32;
            ag.ladder_r[il] =
                (ag.ladder_x[il] * ag.ladder_x[il] + ag.ladder_y[il] * ag.ladder_y[il]).sqrt();
            // Half a module minus a tolerance, as the reference widens the ladder z range.
            ag.ladder_min_z[il] -= 0.5f32 * 6.7 - 0.2;
            ag.ladder_max_z[il] += 0.5f32 * 6.7 - 0.2;
        }
        for d in &det[LAYER_START[4] as usize..LAYER_START[5] as usize] {
            ag.end_cap_z[0] = ag.end_cap_z[0].max(d.frame.pz);
        }
        for d in &det[LAYER_START[7] as usize..LAYER_START[8] as usize] {
            ag.end_cap_z[1] = ag.end_cap_z[1].min(d.frame.pz);
        }
        ag.end_cap_z[0] -= 1.5;
        ag.end_cap_z[1] += 1.5;
        CpeParams {
            common: CommonParams {
                thickness_b: THICKNESS as f32,
                thickness_e: THICKNESS as f32,
                pitch_x: PITCH_X as f32,
                pitch_y: PITCH_Y as f32,
            },
            det,
            average_geometry: ag,
        }
    }
}

#[inline]
pub(crate) fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}
#[inline]
pub(crate) fn add(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}
#[inline]
pub(crate) fn scale(a: [f64; 3], s: f64) -> [f64; 3] {
    [a[0] * s, a[1] * s, a[2] * s]
}
#[inline]
pub(crate) fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::layer_of;

    #[test]
    fn layout_matches_topology() {
        let g = Geometry::phase1();
        assert_eq!(g.modules.len(), 1856);
        for m in &g.modules {
            assert_eq!(m.layer, layer_of(m.index), "module {}", m.index);
            // right-handed orthonormal frame
            let z = cross(m.rot[0], m.rot[1]);
            for (a, b) in z.iter().zip(m.rot[2]) {
                assert!((a - b).abs() < 1e-12);
            }
            // barrel rawId decodes as CMSSW's PXBDetId
            if m.is_barrel {
                assert_eq!((m.raw_id >> 25) & 7, 1);
                assert_eq!((m.raw_id >> 20) & 0xF, m.layer as u32 + 1);
                let module = (m.raw_id >> 2) & 0x3FF;
                assert_eq!(module >= 5, m.centre[2] > 0.0);
                // normal points outward
                let n = m.normal();
                assert!(n[0] * m.centre[0] + n[1] * m.centre[1] > 0.0);
            } else {
                assert_eq!((m.raw_id >> 25) & 7, 2);
                assert_eq!((m.raw_id >> 18) & 0xF, m.cmssw_layer as u32);
                assert_eq!(m.is_pos_z, m.layer < 7);
                assert!(m.normal()[2] * m.centre[2] > 0.0);
            }
        }
        let ids: std::collections::HashSet<u32> = g.modules.iter().map(|m| m.raw_id).collect();
        assert_eq!(ids.len(), 1856);
    }

    #[test]
    fn pixel_index_round_trip() {
        for r in 0..160u16 {
            let (lo, w) = row_span(r);
            assert_eq!(row_of(lo + 0.5 * w), Some(r));
        }
        for c in 0..416u16 {
            let (lo, w) = col_span(c);
            assert_eq!(col_of(lo + 0.5 * w), Some(c));
        }
        assert!((row_span(159).0 + row_span(159).1 - HALF_X).abs() < 1e-12);
        assert!((col_span(415).0 + col_span(415).1 - HALF_Y).abs() < 1e-12);
    }

    #[test]
    fn cpe_origin_and_ladders() {
        let g = Geometry::phase1();
        let cpe = g.cpe_params();
        for (m, d) in g.modules.iter().zip(&cpe.det) {
            let o = m.to_global([d.x0 as f64, d.y0 as f64, d.z0 as f64]);
            assert!(o.iter().all(|v| v.abs() < 1e-4), "module {}", m.index);
        }
        let ag = &cpe.average_geometry;
        assert!((ag.ladder_r[0] - 2.75).abs() < 0.1 || (ag.ladder_r[0] - 3.05).abs() < 0.1);
        assert!(ag.ladder_z[0].abs() < 1e-4);
        assert!(ag.end_cap_z[0] > 29.0 && ag.end_cap_z[1] < -29.0);
    }
}
