//! Charge deposits of a module crossing: Landau-fluctuated charge along the path, drifted,
//! diffused and shared between the pixels it crosses.

use super::*;

/// A charge deposit on one pixel: key = module<<17 | col<<8 | row.
#[derive(Clone, Copy)]
pub(super) struct Dep {
    pub(super) key: u32,
    pub(super) particle: u32,
    pub(super) q: f32,
}

impl Generator<'_> {
    /// Deposits the charge of a crossing at global point x with tangent d. Returns the cosine
    /// of the incidence angle if the module was hit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deposit(
        &self,
        tr: &Track,
        m: &ModuleGeom,
        x: [f64; 3],
        d: [f64; 3],
        rng: &mut Xoshiro256PlusPlus,
        ev: &mut Event,
        deps: &mut Vec<Dep>,
        cuts: &mut [f64; 512],
    ) -> Option<f64> {
        let p = &self.params;
        let l = m.to_local(x);
        if l[0].abs() >= HALF_X || l[1].abs() >= HALF_Y {
            return None;
        }
        let ld = norm(m.rotate(d));
        if ld[2].abs() < 0.01 {
            return None;
        }
        let half_t = 0.5 * THICKNESS;
        let sx = ld[0] / ld[2];
        let sy = ld[1] / ld[2];
        let cos_inc = ld[2].abs();
        // Landau (Moyal) fluctuation, scaled by the path length and 1/β² for slow particles.
        let pmag2 = tr.p[0] * tr.p[0] + tr.p[1] * tr.p[1] + tr.p[2] * tr.p[2];
        let beta2 = pmag2 / (pmag2 + tr.mass * tr.mass);
        let z = gauss(rng);
        let moyal = (-(z * z).max(1e-30).ln()).min(30.0);
        let q_tot =
            p.mip_mpv / cos_inc * (1.0 / beta2).min(4.0) * (1.0 + p.landau_width * moyal).max(0.3);
        // The drifted charge lies on a straight segment A→B in the (x, y) plane (drift grows
        // linearly with depth). Cut it at every pixel boundary: each piece gets charge in
        // proportion to its length, which is what the CPE's end-pixel charge sharing needs.
        let xa = l[0] - sx * half_t;
        let ya = l[1] - sy * half_t;
        let xb = l[0] + sx * half_t + m.tan_lorentz * THICKNESS;
        let yb = l[1] + sy * half_t;
        let nc = segment_cuts([xa, ya], [xb, yb], cuts);
        let mi = m.index as u32;
        let sig = p.diffusion;
        let mut merged = DepMerger::new(tr.id);
        let mut push = |key: u32, q: f32, deps: &mut Vec<Dep>| merged.push(key, q, deps);
        for w in cuts[..nc].windows(2) {
            let dt = w[1] - w[0];
            if dt <= 1e-9 {
                continue;
            }
            let tm = 0.5 * (w[0] + w[1]);
            let qn = (q_tot * dt) as f32;
            let xx = xa + (xb - xa) * tm;
            let yy = ya + (yb - ya) * tm;
            let (Some(r), Some(c)) = (row_of(xx), col_of(yy)) else {
                continue;
            };
            let (rlo, rw) = row_span(r);
            let (clo, cw) = col_span(c);
            // Fraction spilling to the nearest neighbour row/column.
            let (fr, rn) = spill(xx - rlo, rw, sig, r, 159);
            let (fc, cn) = spill(yy - clo, cw, sig, c, 415);
            let key = |r: u16, c: u16| mi << 17 | (c as u32) << 8 | r as u32;
            let w00 = (1.0 - fr) * (1.0 - fc);
            push(key(r, c), qn * w00 as f32, deps);
            if fr > 0.0 {
                push(key(rn, c), qn * (fr * (1.0 - fc)) as f32, deps);
            }
            if fc > 0.0 {
                push(key(r, cn), qn * ((1.0 - fr) * fc) as f32, deps);
                if fr > 0.0 {
                    push(key(rn, cn), qn * (fr * fc) as f32, deps);
                }
            }
        }
        merged.finish(deps);
        ev.simhits.push(SimHit {
            module: m.index,
            lx: l[0] as f32,
            ly: l[1] as f32,
            gx: x[0] as f32,
            gy: x[1] as f32,
            gz: x[2] as f32,
            particle: tr.id,
            charge: q_tot as f32,
        });
        Some(cos_inc)
    }
}

/// The fractions 0 = t₀ < … < 1 along the segment from `a` to `b` (local x, y) where it
/// crosses a pixel boundary, sorted into `cuts` (reused between crossings: only the first
/// entries, as many as returned, are ever read).
fn segment_cuts(a: [f64; 2], b: [f64; 2], cuts: &mut [f64; 512]) -> usize {
    let ([xa, ya], [xb, yb]) = (a, b);
    cuts[0] = 0.0;
    let mut nc = 1;
    // Row boundaries in pitch units: every integer except inside big rows 79–80.
    boundary_cuts(
        xa / PITCH_X + 81.0,
        xb / PITCH_X + 81.0,
        |k| k == 80 || k == 82,
        cuts,
        &mut nc,
    );
    // Column boundaries: every integer except inside the big first/last column of a ROC.
    boundary_cuts(
        ya / PITCH_Y + 216.0,
        yb / PITCH_Y + 216.0,
        |k| matches!(k.rem_euclid(54), 1 | 53),
        cuts,
        &mut nc,
    );
    cuts[nc] = 1.0;
    nc += 1;
    cuts[1..nc - 1].sort_unstable_by(f64::total_cmp);
    nc
}

/// Merges consecutive deposits of a particle on one pixel into one.
struct DepMerger {
    last: Dep,
}

impl DepMerger {
    fn new(particle: u32) -> Self {
        DepMerger {
            last: Dep {
                key: u32::MAX,
                particle,
                q: 0.0,
            },
        }
    }

    fn push(&mut self, key: u32, q: f32, deps: &mut Vec<Dep>) {
        let last = &mut self.last;
        if key == last.key {
            last.q += q;
        } else {
            if last.key != u32::MAX {
                deps.push(*last);
            }
            *last = Dep {
                key,
                particle: last.particle,
                q,
            };
        }
    }

    fn finish(self, deps: &mut Vec<Dep>) {
        if self.last.key != u32::MAX {
            deps.push(self.last);
        }
    }
}

/// Appends to `cuts` the fractions t ∈ (0, 1) where the segment from `a` to `b` (pitch units)
/// crosses an integer boundary not excluded by `skip`.
#[inline]
pub(super) fn boundary_cuts(
    a: f64,
    b: f64,
    skip: impl Fn(i64) -> bool,
    cuts: &mut [f64; 512],
    n: &mut usize,
) {
    let d = b - a;
    if d.abs() < 1e-12 {
        return;
    }
    let (lo, hi) = if d > 0.0 { (a, b) } else { (b, a) };
    let mut k = lo.floor() as i64 + 1;
    while (k as f64) < hi && *n < cuts.len() - 1 {
        if !skip(k) {
            cuts[*n] = (k as f64 - a) / d;
            *n += 1;
        }
        k += 1;
    }
}

/// Fraction of charge at offset `u` inside a pixel of width `w` that diffuses into the nearest
/// neighbour, and that neighbour's index (Gaussian tail, σ = `sig`).
#[inline]
pub(super) fn spill(u: f64, w: f64, sig: f64, idx: u16, max: u16) -> (f64, u16) {
    let (dist, nb) = if u < 0.5 * w {
        (u, idx.wrapping_sub(1))
    } else {
        (w - u, idx + 1)
    };
    if sig <= 0.0 || dist > 3.0 * sig || nb > max {
        return (0.0, idx);
    }
    (0.5 * erfc(dist / (sig * std::f64::consts::SQRT_2)), nb)
}

/// Complementary error function (Abramowitz–Stegun 7.1.26, |ε| < 1.5e-7), x ≥ 0.
#[inline]
pub(super) fn erfc(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    poly * (-x * x).exp()
}
