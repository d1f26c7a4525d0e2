//! Helices in the uniform field: propagation from layer to layer, the modules a crossing
//! may hit, multiple scattering, and the low-momentum secondaries (loopers).

use super::*;

#[derive(Clone, Copy, Debug)]
pub(super) struct Track {
    pub(super) pos: [f64; 3],
    /// Momentum (GeV).
    pub(super) p: [f64; 3],
    pub(super) q: f64,
    pub(super) mass: f64,
    pub(super) id: u32,
    pub(super) can_spawn: bool,
}

/// Helix parameters of a state in the uniform field along +z.
pub(super) struct Helix {
    pub(super) xc: f64,
    pub(super) yc: f64,
    pub(super) rho: f64,
    /// +1 counter-clockwise, −1 clockwise (−q for B along +z).
    pub(super) h: f64,
    pub(super) phi0: f64,
    pub(super) cot: f64,
    pub(super) z0: f64,
    /// Distance of the circle centre from the z axis and its azimuth.
    pub(super) cc: f64,
    pub(super) alpha: f64,
}

impl Helix {
    pub(super) fn new(t: &Track) -> Helix {
        let mut hx = Helix::without_alpha(t);
        hx.alpha = hx.yc.atan2(hx.xc);
        hx
    }
    /// All but `alpha` (NaN), which only `cylinder` needs.
    pub(super) fn without_alpha(t: &Track) -> Helix {
        let pt = (t.p[0] * t.p[0] + t.p[1] * t.p[1]).sqrt().max(1e-9);
        let rho = pt / BFIELD_GEV_PER_CM;
        let h = if t.q > 0.0 { -1.0 } else { 1.0 };
        let phi0 = t.p[1].atan2(t.p[0]);
        let (s, c) = phi0.sin_cos();
        let xc = t.pos[0] - rho * h * s;
        let yc = t.pos[1] + rho * h * c;
        Helix {
            xc,
            yc,
            rho,
            h,
            phi0,
            cot: t.p[2] / pt,
            z0: t.pos[2],
            cc: (xc * xc + yc * yc).sqrt(),
            alpha: f64::NAN,
        }
    }
    /// Position and unit-free tangent (dx/dt) at turning angle t ≥ 0.
    #[inline]
    pub(super) fn at(&self, t: f64) -> ([f64; 3], [f64; 3]) {
        let psi = self.phi0 + self.h * t;
        let (s, c) = psi.sin_cos();
        (
            [
                self.xc + self.rho * self.h * s,
                self.yc - self.rho * self.h * c,
                self.z0 + self.rho * self.cot * t,
            ],
            [self.rho * c, self.rho * s, self.rho * self.cot],
        )
    }
    /// Smallest turning angle > `tmin` where the helix meets the cylinder of radius r.
    pub(super) fn cylinder(&self, r: f64, tmin: f64) -> Option<f64> {
        let cc = self.cc;
        // The circle spans radii [|cc − ρ|, cc + ρ] around the axis.
        if cc < 1e-12 || r > cc + self.rho || r < (cc - self.rho).abs() {
            return None;
        }
        let k = (r * r - cc * cc - self.rho * self.rho) / (2.0 * self.rho);
        let sarg = (self.h * k / cc).clamp(-1.0, 1.0);
        let alpha = self.alpha;
        let a = sarg.asin();
        let mut best = f64::INFINITY;
        for psi in [alpha + a, alpha + PI - a] {
            let t0 = self.h * (psi - self.phi0);
            let mut t = t0 - 2.0 * PI * (t0 * (0.5 / PI)).floor();
            if t <= tmin {
                t += 2.0 * PI;
            }
            best = best.min(t);
        }
        Some(best)
    }
    /// Largest distance from the z axis on the arc 0 ≤ t ≤ `t_end`, whose ends are at radii
    /// `r0` and `r1`. Along the circle the radius grows monotonically towards its farthest
    /// point from the axis (radius cc + ρ, offset from the centre along the centre's azimuth
    /// α), so the maximum is that point if the arc contains it, else the larger end.
    pub(super) fn max_radius(&self, t_end: f64, r0: f64, r1: f64) -> f64 {
        // The offset from the centre at t has azimuth φ0 + h·t − h·π/2.
        let t_far = (self.h * (self.alpha - self.phi0) + 0.5 * PI).rem_euclid(2.0 * PI);
        if t_far <= t_end {
            self.cc + self.rho
        } else {
            r0.max(r1)
        }
    }
    /// Turning angle where the helix reaches z, if ahead.
    pub(super) fn plane_z(&self, z: f64, tmin: f64) -> Option<f64> {
        if self.cot.abs() < 1e-9 {
            return None;
        }
        let t = (z - self.z0) / (self.rho * self.cot);
        (t > tmin).then_some(t)
    }
    /// Newton search of the crossing with a module plane, starting at t where the helix is at
    /// `start` (= `self.at(t)`, which the caller already has).
    pub(super) fn module_plane(
        &self,
        m: &ModuleGeom,
        mut t: f64,
        start: ([f64; 3], [f64; 3]),
    ) -> Option<f64> {
        let n = m.normal();
        let mut xd = start;
        for it in 0..8 {
            if it > 0 {
                xd = self.at(t);
            }
            let (x, d) = xd;
            let f = n[0] * (x[0] - m.centre[0])
                + n[1] * (x[1] - m.centre[1])
                + n[2] * (x[2] - m.centre[2]);
            let fd = dot(n, d);
            if fd.abs() < 1e-12 {
                return None;
            }
            let dt = f / fd;
            t -= dt;
            if (dt * self.rho).abs() < 1e-6 {
                return Some(t);
            }
        }
        None
    }
}

impl Generator<'_> {
    /// Follows a charged track through the detector, recording deposits and spawning secondaries.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn propagate(
        &self,
        mut tr: Track,
        rng: &mut Xoshiro256PlusPlus,
        ev: &mut Event,
        deps: &mut Vec<Dep>,
        stack: &mut Vec<Track>,
        cuts: &mut [f64; 512],
    ) {
        let p = &self.params;
        let mut turned = 0.0;
        for _step in 0..64 {
            let hx = Helix::new(&tr);
            let tmin = 1e-4 / hx.rho;
            let (tc, layer) = self.next_layer(&hx, tr.pos, tmin);
            if layer == usize::MAX || turned + tc > p.max_turning {
                return;
            }
            let (xc, dc) = hx.at(tc);
            let rc = (xc[0] * xc[0] + xc[1] * xc[1]).sqrt();
            if xc[2].abs() > 60.0 || rc > 20.0 {
                return;
            }
            // A helix that leaves the tracker volume on the way to the crossing ends in the
            // calorimeter and never comes back (no reversed looper legs). z is monotonic along
            // the helix, so the crossing bounds |z| on the arc.
            let r0 = (tr.pos[0] * tr.pos[0] + tr.pos[1] * tr.pos[1]).sqrt();
            if xc[2].abs() > p.tracker_half_length || hx.max_radius(tc, r0, rc) > p.tracker_radius {
                return;
            }
            // Barrel layers only exist within the ladder length; disks within the ring radii.
            let in_layer = if layer < 4 {
                xc[2].abs() < 4.0 * MODULE_Z_PITCH + 0.5
            } else {
                (3.5..17.0).contains(&rc)
            };
            let mut n_hits = 0;
            let mut cos_inc = 1.0f64;
            if in_layer {
                let mut cands = [0u16; 16];
                let nc = self.candidates(layer, xc, &mut cands);
                // hits of this layer, ordered by turning angle
                let mut hits: [(f64, u16); 16] = [(0.0, 0); 16];
                let mut nh = 0;
                for &mi in &cands[..nc] {
                    let m = &self.geom.modules[mi as usize];
                    // Cheap pre-selection on the mid-surface point before the Newton search.
                    let lc = m.to_local(xc);
                    let ld = m.rotate(dc);
                    if ld[2].abs() > 0.05 * (ld[0].abs() + ld[1].abs()) {
                        let s = lc[2] / ld[2];
                        let (ux, uy) = (lc[0] - ld[0] * s, lc[1] - ld[1] * s);
                        if ux.abs() > HALF_X + 0.3 || uy.abs() > HALF_Y + 0.3 {
                            continue;
                        }
                    }
                    if let Some(t) = hx.module_plane(m, tc, (xc, dc)) {
                        if t > tmin && t < tc + 1.0 && nh < 16 {
                            hits[nh] = (t, mi);
                            nh += 1;
                        }
                    }
                }
                hits[..nh].sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                for &(t, mi) in &hits[..nh] {
                    let (x, d) = hx.at(t);
                    let m = &self.geom.modules[mi as usize];
                    if let Some(ci) = self.deposit(&tr, m, x, d, rng, ev, deps, cuts) {
                        n_hits += 1;
                        cos_inc = ci;
                        if tr.can_spawn && rng.random::<f64>() < p.secondary_prob {
                            stack.push(self.secondary(&tr, x, rng, ev));
                        }
                    }
                }
            }
            // Continue from the mid-surface with a multiple-scattering kick.
            let (x, d) = (xc, dc);
            let pmag = (tr.p[0] * tr.p[0] + tr.p[1] * tr.p[1] + tr.p[2] * tr.p[2]).sqrt();
            let dn = norm(d);
            let mut dir = [dn[0], dn[1], dn[2]];
            if n_hits > 0 {
                let x0 = p.material[(layer >= 4) as usize] / cos_inc.max(0.05);
                let beta = pmag / (pmag * pmag + tr.mass * tr.mass).sqrt();
                let theta0 = 0.0136 / (beta * pmag) * x0.sqrt() * (1.0 + 0.038 * x0.ln());
                dir = kick(dir, theta0 * gauss(rng), theta0 * gauss(rng));
            }
            tr.pos = x;
            tr.p = [dir[0] * pmag, dir[1] * pmag, dir[2] * pmag];
            turned += tc;
        }
    }

    /// The next layer mid-surface a helix starting at `pos` reaches: (turning angle, layer),
    /// or (∞, usize::MAX). The nearest barrel cylinder wins (lowest layer on a tie) unless a
    /// disk plane is strictly nearer.
    pub(super) fn next_layer(&self, hx: &Helix, pos: [f64; 3], tmin: f64) -> (f64, usize) {
        let mut disk = (f64::INFINITY, usize::MAX);
        for (d, &z) in self.disk_z.iter().enumerate() {
            if let Some(t) = hx.plane_z(z, tmin) {
                if t < disk.0 {
                    disk = (t, 4 + d);
                }
            }
        }
        // The radius changes by at most the arc length ρ·t, so a cylinder at distance Δr needs
        // t ≥ Δr/ρ: cylinders whose bound already exceeds the best crossing are skipped
        // (the margin absorbs rounding; the choice is the same as trying every cylinder).
        let r0 = (pos[0] * pos[0] + pos[1] * pos[1]).sqrt();
        let mut order = [(0.0f64, 0usize); 4];
        for (l, &r) in self.barrel_r.iter().enumerate() {
            order[l] = ((r - r0).abs() / hx.rho, l);
        }
        order.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut barrel = (f64::INFINITY, usize::MAX);
        for &(bound, l) in &order {
            if bound > disk.0.min(barrel.0) + 1e-9 {
                break;
            }
            if let Some(t) = hx.cylinder(self.barrel_r[l], tmin) {
                if t < barrel.0 || (t == barrel.0 && l < barrel.1) {
                    barrel = (t, l);
                }
            }
        }
        if disk.0 < barrel.0 {
            disk
        } else {
            barrel
        }
    }

    /// Modules of `layer` possibly crossed near the mid-surface point x.
    pub(super) fn candidates(&self, layer: usize, x: [f64; 3], out: &mut [u16; 16]) -> usize {
        let mut n = 0;
        let phi = x[1].atan2(x[0]).rem_euclid(2.0 * PI);
        if layer < 4 {
            let nl = LADDERS_PER_LAYER[layer] as i64;
            let k = (phi / (2.0 * PI) * nl as f64 - 0.5).floor() as i64;
            let mz = ((x[2] / MODULE_Z_PITCH) + 4.0).floor() as i64;
            for lad in [k, k + 1] {
                let lad = lad.rem_euclid(nl);
                for m in [mz - 1, mz, mz + 1] {
                    if (0..MODULES_PER_LADDER as i64).contains(&m) {
                        out[n] = (LAYER_START[layer] as i64 + lad * 8 + m) as u16;
                        n += 1;
                    }
                }
            }
        } else {
            let r = (x[0] * x[0] + x[1] * x[1]).sqrt();
            let mut base = LAYER_START[layer];
            for ring in 0..2 {
                let slots = 2 * BLADES_PER_RING[ring] as i64;
                if (r - RING_RADIUS[ring]).abs() < HALF_Y + 0.6 {
                    let k = (phi / (2.0 * PI) * slots as f64 - 0.25).floor() as i64;
                    for s in k - 1..=k + 2 {
                        out[n] = (base as i64 + s.rem_euclid(slots)) as u16;
                        n += 1;
                    }
                }
                base += slots as u32;
            }
        }
        n
    }

    /// A low-momentum electron produced at x (δ-ray or conversion leg), isotropic.
    pub(super) fn secondary(
        &self,
        parent: &Track,
        x: [f64; 3],
        rng: &mut Xoshiro256PlusPlus,
        ev: &mut Event,
    ) -> Track {
        let (lo, hi) = self.params.secondary_p;
        let pm = lo * (hi / lo).powf(rng.random::<f64>());
        // Emitted around the parent direction (energetic δ-rays and conversions are forward).
        let pd = norm(parent.p);
        let s = self.params.secondary_angle;
        let d = kick(pd, s * gauss(rng), s * gauss(rng));
        let q = if rng.random::<bool>() { 1.0 } else { -1.0 };
        let id = ev.particles.len() as u32;
        let t = Track {
            pos: x,
            p: [pm * d[0], pm * d[1], pm * d[2]],
            q,
            mass: ELECTRON_MASS,
            id,
            can_spawn: false,
        };
        ev.particles.push(make_particle(
            &t,
            -11 * q as i32,
            process::SECONDARY,
            -1,
            parent.id as i32,
        ));
        t
    }
}

#[inline]
pub(super) fn norm(v: [f64; 3]) -> [f64; 3] {
    let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    [v[0] / n, v[1] / n, v[2] / n]
}

/// Deflects unit vector d by small angles a, b in two planes orthogonal to it.
pub(super) fn kick(d: [f64; 3], a: f64, b: f64) -> [f64; 3] {
    let helper = if d[2].abs() < 0.9 {
        [0.0, 0.0, 1.0]
    } else {
        [1.0, 0.0, 0.0]
    };
    let u = norm(crate::geometry::cross(d, helper));
    let v = crate::geometry::cross(d, u);
    norm([
        d[0] + a * u[0] + b * v[0],
        d[1] + a * u[1] + b * v[1],
        d[2] + a * u[2] + b * v[2],
    ])
}
