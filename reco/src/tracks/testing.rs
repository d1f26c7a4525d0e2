//! Hand-built hits for tests and examples: helices through idealised cylinders (BPix) and
//! disks (FPix) with plausible detIndex, frames and errors. Not a detector simulation.

use super::HitsView;
use quiver_formats::conditions::{AverageGeometry, CommonParams, CpeParams, DetParams, Frame};
use quiver_formats::topology::{LADDERS_PER_LAYER, LAYER_START};
use std::f64::consts::PI;

/// Barrel layer radii, cm.
pub const BARREL_R: [f64; 4] = [2.9, 6.8, 10.9, 16.0];
/// |z| of the three FPix disks, cm.
pub const DISK_Z: [f64; 3] = [32.45, 39.95, 49.45];
/// Modules per FPix disk.
const MODULES_PER_DISK: u32 = 112;
/// Field used to turn pT into a radius (GeV/cm), the reference's value.
pub const B_FIELD: f64 = 0.011_425_697_271_150_7;
/// Local resolutions (cm): barrel x (rφ), barrel y (z), endcap x, endcap y.
pub const SIGMA_BARREL: [f64; 2] = [0.0012, 0.0021];
pub const SIGMA_ENDCAP: [f64; 2] = [0.0020, 0.0021];

/// A helix from its point of closest approach to the z axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Helix {
    /// Transverse momentum, GeV.
    pub pt: f64,
    /// +1 or −1 (positive tracks turn clockwise seen from +z).
    pub charge: i32,
    /// Direction at the point of closest approach, rad.
    pub phi0: f64,
    /// Signed transverse impact parameter, cm: the PCA is `tip·(−sin φ0, cos φ0)`.
    pub tip: f64,
    /// z at the PCA, cm.
    pub zip: f64,
    /// cot θ.
    pub cot_theta: f64,
}

impl Default for Helix {
    fn default() -> Self {
        Self {
            pt: 3.0,
            charge: 1,
            phi0: 0.5,
            tip: 0.0,
            zip: 0.0,
            cot_theta: 0.3,
        }
    }
}

impl Helix {
    /// Radius of curvature, cm.
    pub fn radius(&self) -> f64 {
        self.pt / B_FIELD
    }

    /// Position after a transverse path length `s` (cm).
    pub fn at(&self, s: f64) -> [f64; 3] {
        let r = self.radius();
        let q = self.charge as f64;
        let (sn, cs) = self.phi0.sin_cos();
        let p0 = [-self.tip * sn, self.tip * cs];
        let c = [p0[0] + q * r * sn, p0[1] - q * r * cs];
        let phi = self.phi0 - q * s / r;
        [
            c[0] - q * r * phi.sin(),
            c[1] + q * r * phi.cos(),
            self.zip + s * self.cot_theta,
        ]
    }

    /// First crossing of the cylinder of radius `rc` (bisection on the path length).
    pub fn at_radius(&self, rc: f64) -> Option<[f64; 3]> {
        let rho = |s: f64| {
            let p = self.at(s);
            (p[0] * p[0] + p[1] * p[1]).sqrt()
        };
        let smax = PI * self.radius();
        if rho(smax) < rc {
            return None;
        }
        let (mut lo, mut hi) = (0.0, smax);
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if rho(mid) < rc {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(self.at(0.5 * (lo + hi)))
    }

    /// Crossing of the plane z = `zc`.
    pub fn at_z(&self, zc: f64) -> Option<[f64; 3]> {
        if self.cot_theta == 0.0 {
            return None;
        }
        let s = (zc - self.zip) / self.cot_theta;
        if s <= 0.0 || s > PI * self.radius() {
            return None;
        }
        Some(self.at(s))
    }
}

/// Standard-normal generator (xorshift64* + Box–Muller), deterministic from its seed.
#[derive(Clone, Debug)]
pub struct Gauss(u64);

impl Gauss {
    /// A generator seeded with `seed` (any value).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((v >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// One standard-normal number.
    pub fn sample(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()
    }
}

#[derive(Clone, Debug)]
struct SimHit {
    layer: u8,
    det: u16,
    pos: [f32; 3],
    var: [f32; 2],
    size_y: i16,
}

/// Collects hits, then [`HitBuilder::build`] orders them by detIndex into columns.
#[derive(Clone, Debug, Default)]
pub struct HitBuilder {
    hits: Vec<SimHit>,
}

fn phi_norm(x: f64, y: f64) -> f64 {
    let p = y.atan2(x);
    if p < 0.0 {
        p + 2.0 * PI
    } else {
        p
    }
}

/// detIndex of a point on barrel layer `layer` (None outside |z| < 26.8 cm).
pub fn barrel_det(layer: u8, x: f64, y: f64, z: f64) -> Option<u16> {
    let nlad = LADDERS_PER_LAYER[layer as usize] as f64;
    let ladder = ((phi_norm(x, y) / (2.0 * PI) * nlad) as u32).min(nlad as u32 - 1);
    let zr = z + 26.8;
    if !(0.0..53.6).contains(&zr) {
        return None;
    }
    let module = ((zr / 6.7) as u32).min(7);
    Some((LAYER_START[layer as usize] + ladder * 8 + module) as u16)
}

/// detIndex of a point on FPix layer `layer` (4..9).
pub fn endcap_det(layer: u8, x: f64, y: f64) -> u16 {
    let m =
        ((phi_norm(x, y) / (2.0 * PI) * MODULES_PER_DISK as f64) as u32).min(MODULES_PER_DISK - 1);
    (LAYER_START[layer as usize] + m) as u16
}

impl HitBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a hit at a global position on `layer` (0..9); the detIndex follows from the
    /// position. Returns the hit's builder id, or None outside the barrel's z range.
    pub fn add_hit(&mut self, layer: u8, x: f64, y: f64, z: f64) -> Option<usize> {
        let r = (x * x + y * y).sqrt();
        let (det, sig, size_y) = if layer < 4 {
            let size_y = ((z / r).abs() * 15.2 + 8.5).min(1023.0) as i16;
            (barrel_det(layer, x, y, z)?, SIGMA_BARREL, size_y)
        } else {
            (endcap_det(layer, x, y), SIGMA_ENDCAP, 8)
        };
        self.hits.push(SimHit {
            layer,
            det,
            pos: [x as f32, y as f32, z as f32],
            var: [(sig[0] * sig[0]) as f32, (sig[1] * sig[1]) as f32],
            size_y,
        });
        Some(self.hits.len() - 1)
    }

    /// Adds a barrel hit at radius `r`, angle `phi`, height `z`.
    pub fn add_barrel_hit(&mut self, layer: u8, r: f64, phi: f64, z: f64) -> Option<usize> {
        self.add_hit(layer, r * phi.cos(), r * phi.sin(), z)
    }

    /// The cluster y size (1/8 px) of hit `id`.
    pub fn size_y(&self, id: usize) -> i16 {
        self.hits[id].size_y
    }

    /// Overrides the cluster y size (1/8 px) of hit `id`.
    pub fn set_size_y(&mut self, id: usize, v: i16) {
        self.hits[id].size_y = v;
    }

    /// Adds the crossings of `h` with the given barrel layers (exact positions).
    pub fn add_helix_barrel(&mut self, h: &Helix, layers: &[u8]) -> Vec<usize> {
        self.add_helix(h, layers, None)
    }

    /// Adds the crossings of `h` with the given layers (0..3 cylinders, 4..9 disks),
    /// smeared in the module's local x/y by the nominal resolution when `rng` is given.
    /// Layers the helix does not reach are skipped.
    pub fn add_helix(
        &mut self,
        h: &Helix,
        layers: &[u8],
        mut rng: Option<&mut Gauss>,
    ) -> Vec<usize> {
        let mut ids = Vec::new();
        for &l in layers {
            let p = if l < 4 {
                h.at_radius(BARREL_R[l as usize])
            } else {
                let zd = DISK_Z[((l - 4) % 3) as usize];
                h.at_z(if l < 7 { zd } else { -zd })
            };
            let Some(mut p) = p else { continue };
            if let Some(g) = rng.as_deref_mut() {
                let phi = p[1].atan2(p[0]);
                let (sn, cs) = phi.sin_cos();
                if l < 4 {
                    let (dx, dz) = (g.sample() * SIGMA_BARREL[0], g.sample() * SIGMA_BARREL[1]);
                    p = [p[0] - sn * dx, p[1] + cs * dx, p[2] + dz];
                } else {
                    let (dx, dy) = (g.sample() * SIGMA_ENDCAP[0], g.sample() * SIGMA_ENDCAP[1]);
                    p = [p[0] - sn * dx + cs * dy, p[1] + cs * dx + sn * dy, p[2]];
                }
            }
            if let Some(id) = self.add_hit(l, p[0], p[1], p[2]) {
                ids.push(id);
            }
        }
        ids
    }

    /// Orders the hits by detIndex (stable) and returns the columns.
    pub fn build(&self) -> HitColumns {
        let mut order: Vec<usize> = (0..self.hits.len()).collect();
        order.sort_by_key(|&i| self.hits[i].det);
        let mut c = HitColumns {
            index_of: vec![0; self.hits.len()],
            ..HitColumns::default()
        };
        for (k, &i) in order.iter().enumerate() {
            let h = &self.hits[i];
            c.index_of[i] = k as u32;
            c.x.push(h.pos[0]);
            c.y.push(h.pos[1]);
            c.z.push(h.pos[2]);
            c.r.push((h.pos[0] * h.pos[0] + h.pos[1] * h.pos[1]).sqrt());
            let phi = (h.pos[1] as f64).atan2(h.pos[0] as f64);
            c.iphi.push((phi * 32768.0 / PI).round() as i32 as i16);
            c.size_x.push(8);
            c.size_y.push(h.size_y);
            c.det.push(h.det);
            c.xerr.push(h.var[0]);
            c.yerr.push(h.var[1]);
        }
        for l in 0..=10 {
            c.layer_start[l] = order
                .iter()
                .filter(|&&i| (self.hits[i].layer as usize) < l)
                .count() as u32;
        }
        c
    }

    /// Conditions with one frame per module: barrel modules tangent to their cylinder at the
    /// ladder centre (local x along rφ, y along z), disk modules in the disk plane (local x
    /// along rφ, y radial).
    pub fn cpe_params() -> CpeParams {
        let mut det = Vec::with_capacity(1856);
        for idx in 0..1856u32 {
            let layer = (0..10).find(|&l| idx < LAYER_START[l + 1]).unwrap_or(9);
            let local = idx - LAYER_START[layer];
            let (frame, is_barrel, pos_z) = if layer < 4 {
                let nlad = LADDERS_PER_LAYER[layer] as f64;
                let phic = ((local / 8) as f64 + 0.5) * 2.0 * PI / nlad;
                let zc = ((local % 8) as f64 + 0.5) * 6.7 - 26.8;
                let (s, c) = phic.sin_cos();
                let r = BARREL_R[layer];
                let rot = [-s, c, 0.0, 0.0, 0.0, 1.0, c, s, 0.0].map(|v| v as f32);
                (
                    Frame {
                        px: (r * c) as f32,
                        py: (r * s) as f32,
                        pz: zc as f32,
                        r: rot,
                    },
                    true,
                    zc > 0.0,
                )
            } else {
                let phic = (local as f64 + 0.5) * 2.0 * PI / MODULES_PER_DISK as f64;
                let zd = DISK_Z[(layer - 4) % 3] * if layer < 7 { 1.0 } else { -1.0 };
                let (s, c) = phic.sin_cos();
                let rot = [-s, c, 0.0, c, s, 0.0, 0.0, 0.0, 1.0].map(|v| v as f32);
                (
                    Frame {
                        px: (10.0 * c) as f32,
                        py: (10.0 * s) as f32,
                        pz: zd as f32,
                        r: rot,
                    },
                    false,
                    zd > 0.0,
                )
            };
            det.push(DetParams {
                is_barrel,
                is_pos_z: pos_z,
                layer: if layer < 4 {
                    layer as u16 + 1
                } else {
                    ((layer - 4) % 3) as u16 + 1
                },
                index: idx as u16,
                raw_id: 0,
                shift_x: 0.0,
                shift_y: 0.0,
                charge_width_x: 0.0,
                charge_width_y: 0.0,
                x0: 0.0,
                y0: 0.0,
                z0: 0.0,
                sx: [0.0012, 0.0012, 0.005],
                sy: [0.0021, 0.0021, 0.0085],
                frame,
            });
        }
        CpeParams {
            common: CommonParams {
                thickness_b: 0.0285,
                thickness_e: 0.0285,
                pitch_x: 0.01,
                pitch_y: 0.015,
            },
            det,
            average_geometry: AverageGeometry {
                ladder_z: vec![],
                ladder_x: vec![],
                ladder_y: vec![],
                ladder_r: vec![],
                ladder_min_z: vec![],
                ladder_max_z: vec![],
                end_cap_z: [0.0; 2],
            },
        }
    }
}

/// Hit columns ordered by detIndex, as [`HitsView`] wants them.
#[derive(Clone, Debug, Default)]
pub struct HitColumns {
    pub x: Vec<f32>,
    pub y: Vec<f32>,
    pub z: Vec<f32>,
    pub r: Vec<f32>,
    pub iphi: Vec<i16>,
    pub size_x: Vec<i16>,
    pub size_y: Vec<i16>,
    pub det: Vec<u16>,
    pub xerr: Vec<f32>,
    pub yerr: Vec<f32>,
    pub layer_start: [u32; 11],
    /// Hit index of each builder id.
    pub index_of: Vec<u32>,
}

impl HitColumns {
    /// A view over these columns with the given conditions.
    pub fn view<'a>(&'a self, cpe: &'a CpeParams) -> HitsView<'a> {
        HitsView {
            x_global: &self.x,
            y_global: &self.y,
            z_global: &self.z,
            r_global: &self.r,
            iphi: &self.iphi,
            size_x: &self.size_x,
            size_y: &self.size_y,
            det_index: &self.det,
            xerr_local: &self.xerr,
            yerr_local: &self.yerr,
            cpe,
            layer_start: self.layer_start,
        }
    }
}
