//! The synthetic event generator: pile-up of min-bias-like interactions plus one harder
//! interaction, helices in a uniform field crossing the pixel modules with multiple scattering,
//! low-momentum secondaries (loopers), Landau-fluctuated charge drifted and shared between
//! pixels, thresholds, noise and an 8-bit ADC consistent with the written gains
//! (docs/datasets.md).
//!
//! Every event draws from its own RNG seeded from `(seed, event index)` only, so the output does
//! not depend on how events are spread over threads.

use crate::builders::gauss;
use crate::conditions::{BeamSpot, GainCalibration};
use crate::geometry::{
    col_of, col_span, dot, row_of, row_span, Geometry, ModuleGeom, BARREL_RADII, BLADES_PER_RING,
    B_FIELD_T, DISK_Z, HALF_X, HALF_Y, MODULE_Z_PITCH, PITCH_X, PITCH_Y, RING_RADIUS, THICKNESS,
};
use crate::topology::{LADDERS_PER_LAYER, LAYER_START, MODULES_PER_LADDER};
use quiver_formats::calibration;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma, Poisson};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::f64::consts::PI;

mod deposits;
mod digitize;
mod estimate;
mod propagation;

use deposits::Dep;
pub use estimate::{calibrated_electrons, estimate_clusters};
use propagation::{norm, Helix, Track};

/// GeV per cm of radius per unit charge: `pT = BFIELD_GEV_PER_CM · R` (3.8112 T).
pub const BFIELD_GEV_PER_CM: f64 = 0.002_997_924_58 * B_FIELD_T;

/// Process of a truth particle.
pub mod process {
    /// From a pp interaction vertex.
    pub const PRIMARY: u8 = 0;
    /// Produced in the detector material (δ-rays, conversions): low-momentum electrons.
    pub const SECONDARY: u8 = 1;
    /// Pseudo-particle owning the noise pixels of an event.
    pub const NOISE: u8 = 2;
}

/// Generator parameters. Units: cm, GeV, electrons.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GeneratorParams {
    /// Mean number of pile-up interactions (Poisson).
    pub pileup: f64,
    /// Charged particles per unit η per min-bias interaction (flat in |η| < `eta_max`).
    pub dndeta: f64,
    /// Negative-binomial shape k of the per-interaction multiplicity.
    pub nbd_k: f64,
    /// Generated |η| range.
    pub eta_max: f64,
    /// Mean charged multiplicity of the hard interaction.
    pub hard_multiplicity: f64,
    /// Luminous region σz (cm).
    pub sigma_z: f64,
    /// Luminous region transverse σ (cm).
    pub sigma_xy: f64,
    /// Probability that a module crossing emits a low-momentum secondary electron.
    pub secondary_prob: f64,
    /// Momentum range of secondaries (GeV), log-uniform.
    pub secondary_p: (f64, f64),
    /// Gaussian spread (rad, per plane) of the secondary direction around the parent's.
    pub secondary_angle: f64,
    /// Maximum turning angle followed per particle (rad); ends loopers.
    pub max_turning: f64,
    /// Outer radius of the tracker volume (cm, default 110, CMS). A particle stops where its
    /// helix would leave this radius (it ends in the calorimeter and never comes back), so
    /// only loopers with a helix diameter below it return to the pixel detector.
    /// Manifests written before this field existed read as ∞ (no such stop).
    #[serde(default = "unbounded")]
    pub tracker_radius: f64,
    /// Half length of the tracker volume (cm, default 280, CMS): the same stop in |z|.
    #[serde(default = "unbounded")]
    pub tracker_half_length: f64,
    /// Probability per pixel per event of a noise hit above threshold.
    pub noise_occupancy: f64,
    /// Most probable charge of a MIP crossing 285 µm at normal incidence (e).
    pub mip_mpv: f64,
    /// Moyal scale relative to the MPV (Landau width).
    pub landau_width: f64,
    /// Diffusion σ of the drifting charge (cm).
    pub diffusion: f64,
    /// Thresholds (e): BPix L1, L2, L3, L4, FPix.
    pub thresholds: [f64; 5],
    /// Gaussian threshold spread (e): barrel, forward.
    pub threshold_sigma: [f64; 2],
    /// Pixel noise (e).
    pub noise: f64,
    /// Radiation length fraction per barrel / forward layer crossing at normal incidence.
    pub material: [f64; 2],
}

impl Default for GeneratorParams {
    fn default() -> Self {
        GeneratorParams {
            pileup: 50.0,
            dndeta: 5.75,
            nbd_k: 1.5,
            eta_max: 3.0,
            hard_multiplicity: 150.0,
            sigma_z: 4.0,
            sigma_xy: 0.0012,
            secondary_prob: 0.25,
            secondary_p: (0.015, 0.15),
            secondary_angle: 0.3,
            max_turning: 3.0 * PI,
            tracker_radius: 110.0,
            tracker_half_length: 280.0,
            noise_occupancy: 2e-6,
            mip_mpv: 22_000.0,
            landau_width: 0.1,
            diffusion: 0.0006,
            thresholds: [3000.0, 2600.0, 2000.0, 2000.0, 2000.0],
            threshold_sigma: [245.0, 210.0],
            noise: 175.0,
            material: [0.025, 0.03],
        }
    }
}

/// The value of a tracker-volume bound missing from an old manifest: no bound.
fn unbounded() -> f64 {
    f64::INFINITY
}

/// A truth particle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Particle {
    /// Index within the event.
    pub id: u32,
    pub pdg: i32,
    pub charge: i8,
    /// Production momentum (GeV) and direction.
    pub pt: f32,
    pub eta: f32,
    pub phi: f32,
    /// Production point (cm).
    pub vx: f32,
    pub vy: f32,
    pub vz: f32,
    /// Transverse impact parameter w.r.t. the z axis (cm), positive when the axis lies outside
    /// the helix circle.
    pub d0: f32,
    /// z at the transverse point of closest approach to the z axis (cm).
    pub z0: f32,
    /// `process::PRIMARY`, `SECONDARY` or `NOISE`.
    pub process: u8,
    /// Vertex id (primaries) or −1.
    pub vertex: i32,
    /// Parent particle id (secondaries) or −1.
    pub parent: i32,
}

/// A truth interaction vertex.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Vertex {
    pub id: u32,
    pub x: f32,
    pub y: f32,
    pub z: f32,
    pub n_charged: u32,
    pub is_hard: bool,
}

/// A particle crossing a module.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimHit {
    pub module: u16,
    /// Local position at the module mid-plane (cm), without Lorentz drift.
    pub lx: f32,
    pub ly: f32,
    /// Global position at the mid-plane (cm).
    pub gx: f32,
    pub gy: f32,
    pub gz: f32,
    pub particle: u32,
    /// Deposited charge (e).
    pub charge: f32,
}

/// One particle's share of a digitised pixel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PixelTruth {
    pub module: u16,
    pub row: u16,
    pub col: u16,
    pub particle: u32,
    /// Electrons deposited by this particle (before noise).
    pub electrons: f32,
    /// Fraction of the pixel's deposited charge.
    pub fraction: f32,
}

/// A digitised pixel above threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Digi {
    pub module: u16,
    pub row: u16,
    pub col: u16,
    pub adc: u8,
    /// Charge including noise (e).
    pub electrons: f32,
}

/// One generated event: digis sorted by (module, col, row), and the truth.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Event {
    pub digis: Vec<Digi>,
    pub particles: Vec<Particle>,
    pub vertices: Vec<Vertex>,
    pub simhits: Vec<SimHit>,
    pub pixel_truth: Vec<PixelTruth>,
}

/// The per-event RNG: a SplitMix-style hash of (seed, event) seeds xoshiro256++.
pub fn event_rng(seed: u64, event: u64) -> Xoshiro256PlusPlus {
    let mut z = seed ^ event.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    Xoshiro256PlusPlus::seed_from_u64(z)
}

/// Precomputed detector description used by the generator.
pub struct Generator<'a> {
    pub params: GeneratorParams,
    geom: &'a Geometry,
    gains: &'a GainCalibration,
    beam_spot: BeamSpot,
    /// Layer radii of the barrel mid-surfaces.
    barrel_r: [f64; 4],
    /// Signed z of the 6 disk mid-planes (layers 4..9).
    disk_z: [f64; 6],
    /// Threshold index 0..4 per layer 0..9.
    thr_index: [usize; 10],
}

/// Buffers reused from one event to the next on a thread.
struct Scratch {
    deps: Vec<Dep>,
    stack: Vec<Track>,
    /// Pixel-boundary crossings of one module crossing (fractions of the drift segment).
    cuts: Box<[f64; 512]>,
    /// Output sizes of the previous event: (digis, pixel truth, sim hits, particles).
    hint: (usize, usize, usize, usize),
    /// `deps` ordered by pixel, and the per-module counts used to get there.
    sorted: Vec<Dep>,
    counts: Vec<u32>,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            deps: Vec::new(),
            stack: Vec::new(),
            cuts: Box::new([0.0; 512]),
            hint: (0, 0, 0, 0),
            sorted: Vec::new(),
            counts: Vec::new(),
        }
    }
}

const MASSES: [(i32, f64); 3] = [(211, 0.13957), (321, 0.49368), (2212, 0.93827)];
const ELECTRON_MASS: f64 = 0.000511;

impl<'a> Generator<'a> {
    /// A generator for a detector and its gain calibration.
    pub fn new(
        params: GeneratorParams,
        geom: &'a Geometry,
        gains: &'a GainCalibration,
        beam_spot: BeamSpot,
    ) -> Self {
        let mut disk_z = [0.0; 6];
        for d in 0..3 {
            disk_z[d] = DISK_Z[d];
            disk_z[3 + d] = -DISK_Z[d];
        }
        Generator {
            params,
            geom,
            gains,
            beam_spot,
            barrel_r: BARREL_RADII,
            disk_z,
            thr_index: [0, 1, 2, 3, 4, 4, 4, 4, 4, 4],
        }
    }

    /// Generates event `event` of a run with `seed`.
    pub fn event(&self, seed: u64, event: u64) -> Event {
        let mut rng = event_rng(seed, event);
        let p = &self.params;
        let mut ev = Event::default();
        // Per-thread scratch buffers: avoids faulting in fresh pages for every event.
        thread_local! {
            static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
        }
        let mut sc: Scratch = SCRATCH.with(|d| std::mem::take(&mut *d.borrow_mut()));
        sc.deps.clear();
        sc.stack.clear();
        // Reserve what the previous event of this thread needed: saves the repeated regrowth.
        ev.digis.reserve(sc.hint.0);
        ev.pixel_truth.reserve(sc.hint.1);
        ev.simhits.reserve(sc.hint.2);
        ev.particles.reserve(sc.hint.3);
        let Scratch {
            deps,
            stack,
            cuts,
            sorted,
            counts,
            ..
        } = &mut sc;

        let n_pu = if p.pileup > 0.0 {
            Poisson::new(p.pileup)
                .map(|d| d.sample(&mut rng) as u32)
                .unwrap_or(0)
        } else {
            0
        };
        let bs = self.beam_spot;
        for iv in 0..=n_pu {
            let is_hard = iv == n_pu;
            let vx = bs.x as f64 + p.sigma_xy * gauss(&mut rng);
            let vy = bs.y as f64 + p.sigma_xy * gauss(&mut rng);
            let vz = bs.z as f64 + p.sigma_z * gauss(&mut rng);
            let mean = if is_hard {
                p.hard_multiplicity
            } else {
                p.dndeta * 2.0 * p.eta_max
            };
            let lambda = if is_hard || p.nbd_k <= 0.0 {
                mean
            } else {
                Gamma::new(p.nbd_k, mean / p.nbd_k)
                    .map(|g| g.sample(&mut rng))
                    .unwrap_or(mean)
            };
            let n = if lambda > 0.0 {
                Poisson::new(lambda)
                    .map(|d| d.sample(&mut rng) as u32)
                    .unwrap_or(0)
            } else {
                0
            };
            let vid = ev.vertices.len() as u32;
            ev.vertices.push(Vertex {
                id: vid,
                x: vx as f32,
                y: vy as f32,
                z: vz as f32,
                n_charged: n,
                is_hard,
            });
            for _ in 0..n {
                let pt = sample_pt(&mut rng, is_hard);
                let eta = p.eta_max * (2.0 * rng.random::<f64>() - 1.0);
                let phi = PI * (2.0 * rng.random::<f64>() - 1.0);
                let u: f64 = rng.random();
                let (pdg, mass) = if u < 0.8 {
                    MASSES[0]
                } else if u < 0.92 {
                    MASSES[1]
                } else {
                    MASSES[2]
                };
                let q = if rng.random::<bool>() { 1.0 } else { -1.0 };
                let id = ev.particles.len() as u32;
                let t = Track {
                    pos: [vx, vy, vz],
                    p: [pt * phi.cos(), pt * phi.sin(), pt * eta.sinh()],
                    q,
                    mass,
                    id,
                    can_spawn: true,
                };
                ev.particles.push(make_particle(
                    &t,
                    pdg * q as i32,
                    process::PRIMARY,
                    vid as i32,
                    -1,
                ));
                self.propagate(t, &mut rng, &mut ev, deps, stack, cuts);
                while let Some(s) = stack.pop() {
                    self.propagate(s, &mut rng, &mut ev, deps, stack, cuts);
                }
            }
        }
        self.add_noise(&mut rng, &mut ev, deps);
        self.digitize(&mut rng, &mut ev, deps, sorted, counts);
        sc.hint = (
            ev.digis.len(),
            ev.pixel_truth.len(),
            ev.simhits.len(),
            ev.particles.len(),
        );
        SCRATCH.with(|d| *d.borrow_mut() = sc);
        ev
    }

    fn add_noise(&self, rng: &mut Xoshiro256PlusPlus, ev: &mut Event, deps: &mut Vec<Dep>) {
        let p = &self.params;
        let n_pix = self.geom.modules.len() as f64 * 66_560.0;
        let lambda = p.noise_occupancy * n_pix;
        if lambda <= 0.0 {
            return;
        }
        let n = Poisson::new(lambda)
            .map(|d| d.sample(rng) as u32)
            .unwrap_or(0);
        if n == 0 {
            return;
        }
        let id = ev.particles.len() as u32;
        ev.particles.push(Particle {
            id,
            pdg: 0,
            charge: 0,
            pt: 0.0,
            eta: 0.0,
            phi: 0.0,
            vx: 0.0,
            vy: 0.0,
            vz: 0.0,
            d0: 0.0,
            z0: 0.0,
            process: process::NOISE,
            vertex: -1,
            parent: -1,
        });
        for _ in 0..n {
            let m = rng.random_range(0..self.geom.modules.len() as u32);
            let row = rng.random_range(0..160u32);
            let col = rng.random_range(0..416u32);
            let thr = p.thresholds[self.thr_index[self.geom.modules[m as usize].layer as usize]];
            let q = thr + 500.0 - 1500.0 * (1.0 - rng.random::<f64>()).ln();
            deps.push(Dep {
                key: m << 17 | col << 8 | row,
                particle: id,
                q: q as f32,
            });
        }
    }
}

fn sample_pt<R: Rng>(rng: &mut R, hard: bool) -> f64 {
    // Soft Γ(2, θ) core with a power-law tail.
    let (theta, tail_p, tail_min, tail_n) = if hard {
        (0.6, 0.3, 1.5, 2.2)
    } else {
        (0.26, 0.05, 1.0, 3.0)
    };
    if rng.random::<f64>() < tail_p {
        let u: f64 = 1.0 - rng.random::<f64>();
        (tail_min * u.powf(-1.0 / tail_n)).min(500.0)
    } else {
        let u1: f64 = 1.0 - rng.random::<f64>();
        let u2: f64 = 1.0 - rng.random::<f64>();
        (-theta * (u1 * u2).ln()).max(0.02)
    }
}

fn make_particle(t: &Track, pdg: i32, proc_: u8, vertex: i32, parent: i32) -> Particle {
    let pt = (t.p[0] * t.p[0] + t.p[1] * t.p[1]).sqrt();
    let hx = Helix::without_alpha(t);
    let cc = hx.cc;
    let d0 = cc - hx.rho;
    // Turning angle from the production point to the transverse point of closest approach.
    let (z0, d0) = if cc > 1e-12 {
        // u(ψ) = (h sinψ, −h cosψ) must point from the centre towards the axis.
        let ux = -hx.xc / cc;
        let uy = -hx.yc / cc;
        let psi = (hx.h * ux).atan2(-hx.h * uy);
        let mut dt = hx.h * (psi - hx.phi0);
        dt = (dt + PI).rem_euclid(2.0 * PI) - PI;
        (hx.z0 + hx.rho * hx.cot * dt, d0)
    } else {
        (t.pos[2], d0)
    };
    Particle {
        id: t.id,
        pdg,
        charge: t.q as i8,
        pt: pt as f32,
        eta: (t.p[2] / pt.max(1e-12)).asinh() as f32,
        // Same expression as the helix azimuth.
        phi: hx.phi0 as f32,
        vx: t.pos[0] as f32,
        vy: t.pos[1] as f32,
        vz: t.pos[2] as f32,
        d0: d0 as f32,
        z0: z0 as f32,
        process: proc_,
        vertex,
        parent,
    }
}

#[cfg(test)]
mod tests {
    use super::digitize::sort_deposits;
    use super::*;
    use crate::builders::{build_gains, default_beam_spot, GainParams};

    #[test]
    fn helix_reaches_cylinder_and_plane() {
        let t = Track {
            pos: [0.0, 0.0, 0.0],
            p: [1.0, 0.0, 1.0],
            q: 1.0,
            mass: 0.14,
            id: 0,
            can_spawn: false,
        };
        let h = Helix::new(&t);
        let tc = h.cylinder(10.0, 1e-9).unwrap();
        let (x, _) = h.at(tc);
        assert!(((x[0] * x[0] + x[1] * x[1]).sqrt() - 10.0).abs() < 1e-9);
        // positive charge bends clockwise: y < 0
        assert!(x[1] < 0.0);
        let tz = h.plane_z(30.0, 0.0).unwrap();
        assert!((h.at(tz).0[2] - 30.0).abs() < 1e-9);
        // a straight-ish track from the origin has d0 ≈ 0 and z0 ≈ 0
        let p = make_particle(&t, 211, 0, 0, -1);
        assert!(p.d0.abs() < 1e-6 && p.z0.abs() < 1e-6);
        let t2 = Track {
            pos: [0.1, 0.0, 2.0],
            p: [0.0, 1.0, 0.5],
            ..t
        };
        let p2 = make_particle(&t2, 211, 0, 0, -1);
        assert!(
            (p2.d0.abs() - 0.1).abs() < 1e-4 && (p2.z0 - 2.0).abs() < 1e-3,
            "{p2:?}"
        );
    }

    #[test]
    fn pruned_layer_search_matches_trying_every_layer() {
        let geom = Geometry::phase1();
        let gains = build_gains(&GainParams::default());
        let g = Generator::new(
            GeneratorParams::default(),
            &geom,
            &gains,
            default_beam_spot(),
        );
        let mut rng = event_rng(11, 0);
        let mut several_reachable = 0;
        for i in 0..20_000 {
            // starts near the beam line or on a layer, any direction, 10 MeV .. 10 GeV
            let r = if i % 3 == 0 {
                0.01 * rng.random::<f64>()
            } else {
                BARREL_RADII[i % 4] + 0.2 * gauss(&mut rng)
            };
            let a = 2.0 * PI * rng.random::<f64>();
            let pos = [r * a.cos(), r * a.sin(), 30.0 * gauss(&mut rng)];
            let pm = 0.01 * 1000f64.powf(rng.random::<f64>());
            let d = norm([gauss(&mut rng), gauss(&mut rng), gauss(&mut rng)]);
            let q = if rng.random::<bool>() { 1.0 } else { -1.0 };
            let t = Track {
                pos,
                p: [pm * d[0], pm * d[1], pm * d[2]],
                q,
                mass: 0.14,
                id: 0,
                can_spawn: false,
            };
            let hx = Helix::new(&t);
            let tmin = 1e-4 / hx.rho;
            // the exhaustive search: every cylinder in layer order, then strictly nearer disks
            let mut best = (f64::INFINITY, usize::MAX);
            let mut n_cyl = 0;
            for (l, &r) in g.barrel_r.iter().enumerate() {
                if let Some(t) = hx.cylinder(r, tmin) {
                    n_cyl += 1;
                    if t < best.0 {
                        best = (t, l);
                    }
                }
            }
            for (d, &z) in g.disk_z.iter().enumerate() {
                if let Some(t) = hx.plane_z(z, tmin) {
                    if t < best.0 {
                        best = (t, 4 + d);
                    }
                }
            }
            let got = g.next_layer(&hx, pos, tmin);
            assert_eq!(
                (got.0.to_bits(), got.1),
                (best.0.to_bits(), best.1),
                "track {i}: {t:?}"
            );
            several_reachable += (n_cyl > 1) as usize;
        }
        assert!(several_reachable > 1000, "{several_reachable}");
    }

    #[test]
    fn max_radius_on_arc_matches_sampling() {
        let mut rng = event_rng(5, 2);
        let mut contains_far_point = 0;
        for i in 0..2000 {
            let r = 20.0 * rng.random::<f64>();
            let a = 2.0 * PI * rng.random::<f64>();
            let pm = 0.05 * 100f64.powf(rng.random::<f64>());
            let d = norm([gauss(&mut rng), gauss(&mut rng), gauss(&mut rng)]);
            let q = if rng.random::<bool>() { 1.0 } else { -1.0 };
            let t = Track {
                pos: [r * a.cos(), r * a.sin(), 0.0],
                p: [pm * d[0], pm * d[1], pm * d[2]],
                q,
                mass: 0.14,
                id: 0,
                can_spawn: false,
            };
            let hx = Helix::new(&t);
            let t_end = 3.0 * PI * rng.random::<f64>();
            let rad = |t: f64| {
                let x = hx.at(t).0;
                (x[0] * x[0] + x[1] * x[1]).sqrt()
            };
            let n = 20_000;
            let sampled = (0..=n)
                .map(|k| rad(t_end * k as f64 / n as f64))
                .fold(0.0, f64::max);
            let got = hx.max_radius(t_end, rad(0.0), rad(t_end));
            // the nearest sample is within Δt/2 of the peak, where the radius is flat: O(ρ·Δt²) below
            assert!(
                got >= sampled - 1e-9 && got - sampled < 1e-6 * (hx.cc + hx.rho),
                "track {i}: {got} vs sampled {sampled}"
            );
            contains_far_point += (got > rad(0.0).max(rad(t_end)) + 1e-6) as usize;
        }
        assert!(contains_far_point > 500, "{contains_far_point}");
    }

    /// Layers (0–3 barrel, 4–9 disks) of the sim hits of one primary pion of transverse
    /// momentum `pt` from (0, 0, 1 cm) at η ≈ 0.005, in transport order.
    fn hit_layers(params: GeneratorParams, pt: f64) -> Vec<u8> {
        let geom = Geometry::phase1();
        let gains = build_gains(&GainParams::default());
        let params = GeneratorParams {
            secondary_prob: 0.0,
            noise_occupancy: 0.0,
            ..params
        };
        let g = Generator::new(params, &geom, &gains, default_beam_spot());
        let mut rng = event_rng(3, 0);
        let mut ev = Event::default();
        let (mut deps, mut stack, mut cuts) = (Vec::new(), Vec::new(), [0.0; 512]);
        let t = Track {
            pos: [0.0, 0.0, 1.0],
            p: [pt * 0.3f64.cos(), pt * 0.3f64.sin(), 0.005 * pt],
            q: 1.0,
            mass: 0.13957,
            id: 0,
            can_spawn: true,
        };
        g.propagate(t, &mut rng, &mut ev, &mut deps, &mut stack, &mut cuts);
        assert!(stack.is_empty());
        ev.simhits
            .iter()
            .map(|h| geom.modules[h.module as usize].layer)
            .collect()
    }

    #[test]
    fn particles_leaving_the_tracker_do_not_come_back() {
        let comes_back = |l: &[u8]| l.windows(2).any(|w| w[1] < w[0]);
        // 1 GeV: helix diameter 2ρ ≈ 175 cm > 110 cm. Without the tracker volume it turns
        // round outside and crosses the barrel again inwards; with it, it stops after BPix4.
        let unbounded = GeneratorParams {
            tracker_radius: f64::INFINITY,
            tracker_half_length: f64::INFINITY,
            ..Default::default()
        };
        let old = hit_layers(unbounded, 1.0);
        assert!(comes_back(&old), "{old:?}");
        let new = hit_layers(GeneratorParams::default(), 1.0);
        assert!(!comes_back(&new), "{new:?}");
        assert_eq!(new.first(), Some(&0));
        assert_eq!(new.last(), Some(&3));
        assert_eq!(new[..], old[..new.len()]);
        // 0.3 GeV: diameter ≈ 52 cm, the whole helix stays inside: it still loops.
        let looper = hit_layers(GeneratorParams::default(), 0.3);
        assert!(comes_back(&looper), "{looper:?}");
        assert!(
            looper.iter().filter(|&&l| l == 0).count() >= 2,
            "{looper:?}"
        );
    }

    #[test]
    fn manifests_without_tracker_volume_read_as_unbounded() {
        // a [params] table written before the tracker-volume fields existed
        let mut t = toml::Table::try_from(GeneratorParams::default()).unwrap();
        t.remove("tracker_radius");
        t.remove("tracker_half_length");
        let old: GeneratorParams = t.try_into().unwrap();
        assert_eq!(
            (old.tracker_radius, old.tracker_half_length),
            (f64::INFINITY, f64::INFINITY)
        );
        assert_eq!(
            GeneratorParams {
                tracker_radius: 110.0,
                tracker_half_length: 280.0,
                ..old
            },
            GeneratorParams::default()
        );
    }

    #[test]
    fn deposits_sort_stably_by_pixel_and_particle() {
        let mut rng = event_rng(3, 1);
        let deps: Vec<Dep> = (0..5000)
            .map(|i| {
                let m = rng.random_range(0..20u32) * 97;
                let key = m << 17 | rng.random_range(0..3u32) << 8 | rng.random_range(0..3u32);
                Dep {
                    key,
                    particle: rng.random_range(0..4u32),
                    q: i as f32,
                }
            })
            .collect();
        let (mut out, mut counts) = (Vec::new(), Vec::new());
        sort_deposits(&deps, &mut out, &mut counts, 1856);
        let mut want = deps.clone();
        want.sort_by_key(|d| (d.key, d.particle));
        let bits = |v: &[Dep]| {
            v.iter()
                .map(|d| (d.key, d.particle, d.q.to_bits()))
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&out), bits(&want));
        // reuse of the buffers gives the same answer
        sort_deposits(&deps[..100], &mut out, &mut counts, 1856);
        assert_eq!(
            bits(&out),
            bits(
                &want
                    .iter()
                    .copied()
                    .filter(|d| d.q < 100.0)
                    .collect::<Vec<_>>()
            )
        );
    }

    #[test]
    fn low_pileup_event_is_reasonable_and_reproducible() {
        let geom = Geometry::phase1();
        let gains = build_gains(&GainParams::default());
        let g = Generator::new(
            GeneratorParams {
                pileup: 2.0,
                ..Default::default()
            },
            &geom,
            &gains,
            default_beam_spot(),
        );
        let a = g.event(7, 3);
        let b = g.event(7, 3);
        assert_eq!(a, b);
        assert!(a.digis.len() > 500, "{} digis", a.digis.len());
        // sorted by module, col, row, unique
        for w in a.digis.windows(2) {
            assert!((w[0].module, w[0].col, w[0].row) < (w[1].module, w[1].col, w[1].row));
        }
        let nc = estimate_clusters(&gains, &a.digis);
        assert!(
            nc > a.simhits.len() / 3 && nc <= a.digis.len(),
            "{nc} clusters, {} simhits",
            a.simhits.len()
        );
        // fractions sum to one per pixel
        let mut sum = std::collections::HashMap::new();
        for t in &a.pixel_truth {
            *sum.entry((t.module, t.row, t.col)).or_insert(0.0f32) += t.fraction;
        }
        assert_eq!(sum.len(), a.digis.len());
        assert!(sum.values().all(|s| (s - 1.0).abs() < 1e-4));
    }

    #[test]
    fn barrel_centroid_shift_is_undone_by_cpe_shift() {
        let geom = Geometry::phase1();
        let gains = build_gains(&GainParams::default());
        let params = GeneratorParams {
            pileup: 3.0,
            secondary_prob: 0.0,
            noise_occupancy: 0.0,
            ..Default::default()
        };
        let g = Generator::new(params, &geom, &gains, default_beam_spot());
        let cpe = geom.cpe_params();
        let (mut sum, mut n) = (0.0f64, 0usize);
        for e in 0..3 {
            let ev = g.event(5, e);
            // charge-weighted x centroid of each (module, particle) in the barrel
            let mut acc: std::collections::HashMap<(u16, u32), (f64, f64, usize)> =
                Default::default();
            for t in &ev.pixel_truth {
                if t.module < 1184 {
                    let (lo, w) = row_span(t.row);
                    let a = acc.entry((t.module, t.particle)).or_default();
                    a.0 += t.electrons as f64 * (lo + 0.5 * w);
                    a.1 += t.electrons as f64;
                }
            }
            for h in &ev.simhits {
                let p = &ev.particles[h.particle as usize];
                if h.module >= 1184
                    || p.pt < 1.0
                    || ev
                        .simhits
                        .iter()
                        .filter(|x| x.particle == h.particle && x.module == h.module)
                        .count()
                        != 1
                {
                    continue;
                }
                if let Some(a) = acc.get(&(h.module, h.particle)) {
                    if a.1 > 0.0 {
                        sum += a.0 / a.1 - h.lx as f64;
                        n += 1;
                    }
                }
            }
        }
        assert!(n > 50, "{n} hits");
        let mean = sum / n as f64;
        let shift = cpe.det[0].shift_x as f64;
        // the CPE adds shift_x to the measured position: it must cancel the drift
        assert!(
            (mean + shift).abs() < 0.0015,
            "mean centroid offset {mean}, shift_x {shift}"
        );
    }
}
