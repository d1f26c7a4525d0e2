//! Riemann helix fit, the reference's alternative to the Broken Line (port of `RiemannFit.h`,
//! `RiemannFitOnGPU.h`, `FitUtils.h::fromCircleToPerigee`, with Eigen's closed-form 3×3
//! symmetric eigen-solver re-implemented).
//!
//! Precision follows the reference (f64 fit, f32 perturbed eigen-solves for the numerical
//! Jacobian, f32 circle χ²). Matrix sums run in index order, which may differ from Eigen's
//! grouping in the last bit.

use super::fit::{BrokenLineFit, CircleFit, LineFit};
use super::linalg::{cross2, dot, sqr, Mx};
use super::TrackError;

macro_rules! sym_eigen3 {
    ($name:ident, $t:ty, $tree:expr, $tree_norm:expr) => {
        /// Eigen-decomposition of a symmetric 3×3 matrix (lower triangle read) by the closed
        /// form of Eigen's `SelfAdjointEigenSolver::computeDirect`: ascending eigenvalues and
        /// the eigenvectors as columns.
        fn $name(mat: &[[$t; 3]; 3]) -> ([$t; 3], [[$t; 3]; 3]) {
            let eps = <$t>::EPSILON;
            let mut m = *mat;
            for i in 0..3 {
                for j in i + 1..3 {
                    m[i][j] = m[j][i];
                }
            }
            // Three-term sums: Eigen groups them as a0 + (a1 + a2) when it cannot vectorise
            // (f32), and as (a0 + a1) + a2 with 2-wide double packets.
            let sum3 = |a: $t, b: $t, c: $t| if $tree { a + (b + c) } else { a + b + c };
            let shift = sum3(mat[0][0], mat[1][1], mat[2][2]) / 3.0;
            for i in 0..3 {
                m[i][i] -= shift;
            }
            let mut scale: $t = 0.0;
            for row in &m {
                for &x in row {
                    let a = x.abs();
                    if a > scale {
                        scale = a;
                    }
                }
            }
            if scale > 0.0 {
                for row in m.iter_mut() {
                    for x in row.iter_mut() {
                        *x /= scale;
                    }
                }
            }
            // Roots of the characteristic cubic, ascending by construction.
            let s_inv3: $t = 1.0 / 3.0;
            let s_sqrt3: $t = (3.0 as $t).sqrt();
            let c0 = m[0][0] * m[1][1] * m[2][2] + 2.0 * m[1][0] * m[2][0] * m[2][1]
                - m[0][0] * m[2][1] * m[2][1]
                - m[1][1] * m[2][0] * m[2][0]
                - m[2][2] * m[1][0] * m[1][0];
            let c1 = m[0][0] * m[1][1] - m[1][0] * m[1][0] + m[0][0] * m[2][2] - m[2][0] * m[2][0]
                + m[1][1] * m[2][2]
                - m[2][1] * m[2][1];
            let c2 = m[0][0] + m[1][1] + m[2][2];
            let c2_over_3 = c2 * s_inv3;
            let mut a_over_3 = (c2 * c2_over_3 - c1) * s_inv3;
            if a_over_3 < 0.0 {
                a_over_3 = 0.0;
            }
            let half_b = 0.5 * (c0 + c2_over_3 * (2.0 * c2_over_3 * c2_over_3 - c1));
            let mut q = a_over_3 * a_over_3 * a_over_3 - half_b * half_b;
            if q < 0.0 {
                q = 0.0;
            }
            let rho = a_over_3.sqrt();
            let theta = q.sqrt().atan2(half_b) * s_inv3;
            let (sin_t, cos_t) = theta.sin_cos();
            let mut ev = [
                c2_over_3 - rho * (cos_t + s_sqrt3 * sin_t),
                c2_over_3 - rho * (cos_t - s_sqrt3 * sin_t),
                c2_over_3 + 2.0 * rho * cos_t,
            ];
            // Columns of the eigenvector matrix.
            let mut vec: [[$t; 3]; 3] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
            let cross = |a: [$t; 3], b: [$t; 3]| -> [$t; 3] {
                [
                    a[1] * b[2] - a[2] * b[1],
                    a[2] * b[0] - a[0] * b[2],
                    a[0] * b[1] - a[1] * b[0],
                ]
            };
            let sum3n = |a: $t, b: $t, c: $t| if $tree_norm { a + (b + c) } else { a + b + c };
            let sq = |a: [$t; 3]| sum3n(a[0] * a[0], a[1] * a[1], a[2] * a[2]);
            let normalized = |a: [$t; 3]| {
                let n = sq(a);
                if n > 0.0 {
                    let r = n.sqrt();
                    [a[0] / r, a[1] / r, a[2] / r]
                } else {
                    a
                }
            };
            // Kernel of a rank-2 matrix from the cross products of its columns.
            let extract_kernel = |t: &[[$t; 3]; 3]| -> ([$t; 3], [$t; 3]) {
                let mut i0 = 0;
                for i in 1..3 {
                    if t[i][i].abs() > t[i0][i0].abs() {
                        i0 = i;
                    }
                }
                let colv = |j: usize| [t[0][j], t[1][j], t[2][j]];
                let rep = colv(i0);
                let c0 = cross(rep, colv((i0 + 1) % 3));
                let c1 = cross(rep, colv((i0 + 2) % 3));
                let (n0, n1) = (sq(c0), sq(c1));
                let res = if n0 > n1 {
                    let r = n0.sqrt();
                    [c0[0] / r, c0[1] / r, c0[2] / r]
                } else {
                    let r = n1.sqrt();
                    [c1[0] / r, c1[1] / r, c1[2] / r]
                };
                (res, rep)
            };
            if ev[2] - ev[0] > eps {
                let mut d0 = ev[2] - ev[1];
                let d1 = ev[1] - ev[0];
                let (mut k, mut l) = (0usize, 2usize);
                if d0 > d1 {
                    std::mem::swap(&mut k, &mut l);
                    d0 = d1;
                }
                let mut tmp = m;
                for i in 0..3 {
                    tmp[i][i] -= ev[k];
                }
                let (vk, rep) = extract_kernel(&tmp);
                let mut cols = [[0.0 as $t; 3]; 3];
                cols[k] = vk;
                cols[l] = rep;
                if d0 <= 2.0 * eps * d1 {
                    let dk =
                        cols[k][0] * cols[l][0] + cols[k][1] * cols[l][1] + cols[k][2] * cols[l][2];
                    for i in 0..3 {
                        cols[l][i] -= dk * cols[k][i];
                    }
                    cols[l] = normalized(cols[l]);
                } else {
                    let mut tmp = m;
                    for i in 0..3 {
                        tmp[i][i] -= ev[l];
                    }
                    cols[l] = extract_kernel(&tmp).0;
                }
                cols[1] = normalized(cross(cols[2], cols[0]));
                for (j, c) in cols.iter().enumerate() {
                    for i in 0..3 {
                        vec[i][j] = c[i];
                    }
                }
            }
            for e in ev.iter_mut() {
                *e *= scale;
                *e += shift;
            }
            (ev, vec)
        }
    };
}
sym_eigen3!(sym_eigen3_f64, f64, true, false);
sym_eigen3!(sym_eigen3_f32, f32, true, true);

fn min_index<T: PartialOrd + Copy>(v: &[T; 3]) -> usize {
    let mut k = 0;
    for i in 1..3 {
        if v[i] < v[k] {
            k = i;
        }
    }
    k
}

/// Eigenvector of the smallest eigenvalue (f64) and that eigenvalue.
fn min_eigen3d(a: &Mx) -> ([f64; 3], f64) {
    let m = [
        [a[(0, 0)], a[(0, 1)], a[(0, 2)]],
        [a[(1, 0)], a[(1, 1)], a[(1, 2)]],
        [a[(2, 0)], a[(2, 1)], a[(2, 2)]],
    ];
    let (ev, vec) = sym_eigen3_f64(&m);
    let k = min_index(&ev);
    ([vec[0][k], vec[1][k], vec[2][k]], ev[k])
}

/// The same in f32 (used for the numerical Jacobian).
fn min_eigen3d_fast(a: &Mx) -> [f64; 3] {
    let m = [
        [a[(0, 0)] as f32, a[(0, 1)] as f32, a[(0, 2)] as f32],
        [a[(1, 0)] as f32, a[(1, 1)] as f32, a[(1, 2)] as f32],
        [a[(2, 0)] as f32, a[(2, 1)] as f32, a[(2, 2)] as f32],
    ];
    let (ev, vec) = sym_eigen3_f32(&m);
    let k = min_index(&ev);
    [vec[0][k] as f64, vec[1][k] as f64, vec[2][k] as f64]
}

/// The Riemann fit's pre-fit (`Rfit::fastFit`): circle through the first, middle and last
/// hits; (X0, Y0, R, tanθ-like), solved with the larger coordinate of the first chord as
/// pivot (not the Broken Line's `fit::broken_line_fast_fit` formula).
///
/// ```
/// use quiver_reco::tracks::riemann::riemann_fast_fit;
/// let f = riemann_fast_fit(&[[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [-1.0, 0.0, 2.0]]);
/// assert!(f[0].abs() < 1e-12 && f[1].abs() < 1e-12 && (f[2] - 1.0).abs() < 1e-12);
/// ```
pub fn riemann_fast_fit(hits: &[[f64; 3]]) -> [f64; 4] {
    let n = hits.len();
    let b = [hits[n / 2][0] - hits[0][0], hits[n / 2][1] - hits[0][1]];
    let c = [hits[n - 1][0] - hits[0][0], hits[n - 1][1] - hits[0][1]];
    let b2 = b[0] * b[0] + b[1] * b[1];
    let c2 = c[0] * c[0] + c[1] * c[1];
    let flip = b[0].abs() < b[1].abs();
    let (bx, by) = if flip { (b[1], b[0]) } else { (b[0], b[1]) };
    let (cx, cy) = if flip { (c[1], c[0]) } else { (c[0], c[1]) };
    let div = 2.0 * (cx * by - bx * cy);
    let y0 = (cx * b2 - bx * c2) / div;
    let x0 = (0.5 * b2 - y0 * by) / bx;
    let r0 = hits[0][0] + if flip { y0 } else { x0 };
    let r1 = hits[0][1] + if flip { x0 } else { y0 };
    let r2 = (sqr(x0) + sqr(y0)).sqrt();
    let d = [hits[0][0] - r0, hits[0][1] - r1];
    let e = [hits[n - 1][0] - r0, hits[n - 1][1] - r1];
    let dr = r2 * cross2(d, e).atan2(d[0] * e[0] + d[1] * e[1]);
    let dz = hits[n - 1][2] - hits[0][2];
    [r0, r1, r2, dr / dz]
}

/// Circle fit result in (X0, Y0, R) form with its covariance.
struct UvrCircle {
    par: [f64; 3],
    cov: Mx,
    q: i32,
    chi2: f32,
}

fn rad_len_uniform(lengths: &[f64]) -> Vec<f64> {
    const XX_0_INV: f64 = 0.06 / 16.0;
    let mut r = vec![0.0; lengths.len()];
    r[0] = lengths[0] * XX_0_INV;
    for j in 1..lengths.len() {
        r[j] = (lengths[j] - lengths[j - 1]).abs() * XX_0_INV;
    }
    r
}

fn scatter_cov_rad(p2d: &[[f64; 2]], ff: &[f64; 4], rad: &[f64], b: f64) -> Mx {
    let n = p2d.len();
    let p_t = (ff[2] * b).min(20.0);
    let p_2 = p_t * p_t * (1.0 + 1.0 / (ff[3] * ff[3]));
    let mut theta = ff[3].atan();
    if theta < 0.0 {
        theta += std::f64::consts::PI;
    }
    let o = [ff[0], ff[1]];
    let mo = [-o[0], -o[1]];
    let k = (1.0 + 1.0 / (ff[3] * ff[3])).sqrt();
    let mut s = vec![0.0; n];
    for i in 0..n {
        let p = [p2d[i][0] - o[0], p2d[i][1] - o[1]];
        let cr = cross2(mo, p);
        let dt = mo[0] * p[0] + mo[1] * p[1];
        s[i] = (cr.atan2(dt) * ff[2]).abs() * k;
    }
    let rl = rad_len_uniform(&s);
    let f = 0.000225 / (p_2 * sqr(theta.sin()));
    let sig2: Vec<f64> = rl
        .iter()
        .map(|&r| sqr(1.0 + 0.038 * r.ln()) * r * f)
        .collect();
    let mut m = Mx::zeros(n, n);
    for kk in 0..n {
        for l in kk..n {
            for i in 0..kk.min(l) {
                m[(kk, l)] += (rad[kk] - rad[i]) * (rad[l] - rad[i]) * sig2[i];
            }
            m[(l, kk)] = m[(kk, l)];
        }
    }
    m
}

fn cov_radtocart(p2d: &[[f64; 2]], cov_rad: &Mx, rad: &[f64]) -> Mx {
    let n = p2d.len();
    let mut c = Mx::zeros(2 * n, 2 * n);
    let ri: Vec<f64> = rad.iter().map(|r| 1.0 / r).collect();
    for i in 0..n {
        for j in i..n {
            let cr = cov_rad[(i, j)];
            c[(i, j)] = cr * p2d[i][1] * ri[i] * p2d[j][1] * ri[j];
            c[(i + n, j + n)] = cr * p2d[i][0] * ri[i] * p2d[j][0] * ri[j];
            c[(i, j + n)] = -cr * p2d[i][1] * ri[i] * p2d[j][0] * ri[j];
            c[(i + n, j)] = -cr * p2d[i][0] * ri[i] * p2d[j][1] * ri[j];
            c[(j, i)] = c[(i, j)];
            c[(j + n, i + n)] = c[(i + n, j + n)];
            c[(j + n, i)] = c[(i, j + n)];
            c[(j, i + n)] = c[(i + n, j)];
        }
    }
    c
}

/// The Riemann circle fit of `n` points (`p2d`, covariance `hits_cov` of x then y): in
/// phases, the weights, the points lifted onto the paraboloid, the plane through them
/// (smallest eigenvector), then the propagation of the errors to the plane and on to the
/// circle's parameters.
fn circle_fit(p2d: &[[f64; 2]], hits_cov: &Mx, ff: &[f64; 4], rad: &[f64], b: f64) -> UvrCircle {
    let n = p2d.len();
    let nf = n as f64;
    let (v, g, renorm, weight) = circle_weights(p2d, hits_cov, ff, rad, b);
    let Lifted { h_, p3d, mc, q, s } = lift(p2d);
    let r0 = p3d.mat_vec(&weight);
    let x = Mx::from_fn(3, n, |k, i| p3d[(k, i)] - r0[k]);
    let a = x.mul(&g).mul(&x.t());
    let (mut vv, chi2) = min_eigen3d(&a);
    let sgn = if vv[2] > 0.0 { 1.0 } else { -1.0 };
    for e in vv.iter_mut() {
        *e *= sgn;
    }
    let c = (-vv[0]) * r0[0] + (-vv[1]) * r0[1] + (-vv[2]) * r0[2];
    let h = (1.0 - sqr(vv[2]) - 4.0 * c * vv[2]).sqrt();
    let v2x2_inv = 1.0 / (2.0 * vv[2]);
    let s_inv = 1.0 / s;
    let par_uvr = [-vv[0] * v2x2_inv, -vv[1] * v2x2_inv, h * v2x2_inv];
    let par = [
        par_uvr[0] * s_inv + h_[0],
        par_uvr[1] * s_inv + h_[1],
        par_uvr[2] * s_inv,
    ];
    let charge = if (p2d[1][0] - p2d[0][0]) * (par[1] - p2d[0][1])
        - (p2d[1][1] - p2d[0][1]) * (par[0] - p2d[0][0])
        > 0.0
    {
        -1
    } else {
        1
    };
    let chi2_c = (chi2.abs() * renorm * 1.0 / sqr(2.0 * vv[2] * par_uvr[2] * s)) as f32;

    let blocks = cov_blocks(&v, &mc, q, s, &p3d);
    let (cc0, e_mat) = plane_cov(&blocks, &weight, &p3d);
    let j2 = eigen_jacobian(&a, &vv);
    let t0m = j2.mul(&e_mat).mul(&j2.t());
    let t1v = t0m.scale(-1.0).mat_vec(&r0);
    let mut cvc = Mx::zeros(4, 4);
    for i in 0..3 {
        for j in 0..3 {
            cvc[(i, j)] = t0m[(i, j)];
        }
        cvc[(i, 3)] = t1v[i];
        cvc[(3, i)] = t1v[i];
    }
    let vm = Mx {
        r: 3,
        c: 1,
        d: vv.to_vec(),
    };
    let r0m = Mx {
        r: 3,
        c: 1,
        d: r0.clone(),
    };
    let cm1 = vm.t().mul(&cc0).mul(&vm)[(0, 0)];
    let cm3 = r0m.t().mul(&t0m).mul(&r0m)[(0, 0)];
    cvc[(3, 3)] = cm1 + cc0.cwise(&t0m).sum() + cm3;
    let t = 1.0 / h;
    let j3 = Mx {
        r: 3,
        c: 4,
        d: vec![
            -v2x2_inv,
            0.0,
            vv[0] * sqr(v2x2_inv) * 2.0,
            0.0,
            0.0,
            -v2x2_inv,
            vv[1] * sqr(v2x2_inv) * 2.0,
            0.0,
            vv[0] * v2x2_inv * t,
            vv[1] * v2x2_inv * t,
            -h * sqr(v2x2_inv) * 2.0 - (2.0 * c + vv[2]) * v2x2_inv * t,
            -t,
        ],
    };
    let jq = Mx {
        r: 1,
        c: 2 * n,
        d: mc.iter().map(|m| m * s * 1.0 / nf).collect(),
    };
    let var_q = jq.mul(&v).mul(&jq.t())[(0, 0)];
    let pu = Mx {
        r: 3,
        c: 1,
        d: par_uvr.to_vec(),
    };
    let cov = j3
        .mul(&cvc)
        .mul(&j3.t())
        .scale(sqr(s_inv))
        .add(&pu.mul(&pu.t()).scale(var_q));
    UvrCircle {
        par,
        cov,
        q: charge,
        chi2: chi2_c,
    }
}

/// The hits' covariance with the multiple scattering added (`v`), and the normalised
/// weights of the points: `g` (the inverse of the radial covariance over its sum), the sum
/// `renorm` and the column sums of `g`.
fn circle_weights(
    p2d: &[[f64; 2]],
    hits_cov: &Mx,
    ff: &[f64; 4],
    rad: &[f64],
    b: f64,
) -> (Mx, Mx, f64, Vec<f64>) {
    let n = p2d.len();
    let mut v = hits_cov.clone();
    // Weights: measurement errors orthogonal to the pre-fitted circle plus multiple scattering.
    let mut cov_rad = Mx::zeros(n, n);
    for i in 0..n {
        cov_rad[(i, i)] = if rad[i] < 1.0e-4 {
            v[(i, i)]
        } else {
            let a = p2d[i];
            let bb = [p2d[i][0] - ff[0], p2d[i][1] - ff[1]];
            let x2 = a[0] * bb[0] + a[1] * bb[1];
            let y2 = cross2(a, bb);
            let tan_c = -y2 / x2;
            let tan_c2 = sqr(tan_c);
            1.0 / (1.0 + tan_c2)
                * (v[(i, i)] + v[(i + n, i + n)] * tan_c2 + 2.0 * v[(i, i + n)] * tan_c)
        };
    }
    let scat = scatter_cov_rad(p2d, ff, rad, b);
    v = v.add(&cov_radtocart(p2d, &scat, rad));
    let cov_rad = cov_rad.add(&scat);
    let g0 = cov_rad.invert();
    let renorm = g0.sum();
    let g = g0.scale(1.0 / renorm);
    let weight: Vec<f64> = (0..n)
        .map(|j| {
            let mut s = g[(0, j)];
            for i in 1..n {
                s += g[(i, j)];
            }
            s
        })
        .collect();
    (v, g, renorm, weight)
}

/// Points centred, scaled and lifted onto the paraboloid.
struct Lifted {
    /// The centroid.
    h_: [f64; 2],
    /// Rows x, y, x² + y² of the scaled points.
    p3d: Mx,
    /// The centred x then y (before scaling).
    mc: Vec<f64>,
    /// Σ of the squared centred coordinates.
    q: f64,
    /// The scale.
    s: f64,
}

fn lift(p2d: &[[f64; 2]]) -> Lifted {
    let n = p2d.len();
    let nf = n as f64;
    let mut hx = p2d[0][0];
    let mut hy = p2d[0][1];
    for p in &p2d[1..] {
        hx += p[0];
        hy += p[1];
    }
    let h_ = [hx / nf, hy / nf];
    let mut p3d = Mx::zeros(3, n);
    for i in 0..n {
        p3d[(0, i)] = p2d[i][0] - h_[0];
        p3d[(1, i)] = p2d[i][1] - h_[1];
    }
    let mc: Vec<f64> = (0..n)
        .map(|i| p3d[(0, i)])
        .chain((0..n).map(|i| p3d[(1, i)]))
        .collect();
    let q = dot(&mc, &mc);
    let s = (nf * 1.0 / q).sqrt();
    for i in 0..n {
        p3d[(0, i)] *= s;
        p3d[(1, i)] *= s;
        p3d[(2, i)] = p3d[(0, i)] * p3d[(0, i)] + p3d[(1, i)] * p3d[(1, i)];
    }
    Lifted { h_, p3d, mc, q, s }
}

/// The covariance blocks (x x, x y, x r², y y, y r², r² r²) of the lifted points, from the
/// hits' covariance `v`.
fn cov_blocks(v: &Mx, mc: &[f64], q: f64, s: f64, p3d: &Mx) -> [Mx; 6] {
    let n = p3d.c;
    let nf = n as f64;
    let mcv = Mx {
        r: 2 * n,
        c: 1,
        d: mc.to_vec(),
    };
    let cm = mcv.t().mul(v).mul(&mcv)[(0, 0)];
    // Squared Frobenius norm, summed in Eigen's column-major order.
    let v_sqn = {
        let mut s = 0.0;
        let mut first = true;
        for j in 0..2 * n {
            for i in 0..2 * n {
                let t = v[(i, j)] * v[(i, j)];
                if first {
                    s = t;
                    first = false;
                } else {
                    s += t;
                }
            }
        }
        s
    };
    let kfac = sqr(sqr(s)) * 1.0 / (4.0 * q * nf) * (2.0 * v_sqn + 4.0 * cm);
    let mut vcs = Mx::zeros(2 * n, 2 * n);
    for i in 0..2 * n {
        for j in i..2 * n {
            vcs[(i, j)] = sqr(s) * v[(i, j)] + kfac * (mc[i] * mc[j]);
        }
    }
    vcs.sym_from_upper();
    let c00 = vcs.block(0, 0, n, n);
    let v01 = vcs.block(0, n, n, n);
    let c11 = vcs.block(n, n, n, n);
    let v10 = v01.t();
    let t0 = Mx::from_fn(n, n, |_, j| p3d[(0, j)]);
    let t1 = Mx::from_fn(n, n, |_, j| p3d[(1, j)]);
    let t00 = Mx::from_fn(n, n, |i, j| p3d[(0, i)] * p3d[(0, j)]);
    let t01 = Mx::from_fn(n, n, |i, j| p3d[(0, i)] * p3d[(1, j)]);
    let t11 = Mx::from_fn(n, n, |i, j| p3d[(1, i)] * p3d[(1, j)]);
    let t10 = t01.t();
    let c01 = v01.clone();
    let c02 = c00.cwise(&t0).add(&v01.cwise(&t1)).scale(2.0);
    let c12 = v10.cwise(&t0).add(&c11.cwise(&t1)).scale(2.0);
    let mut c22 = Mx::zeros(n, n);
    for i in 0..n {
        for j in i..n {
            let e = |m: &Mx| m[(i, j)];
            c22[(i, j)] = 2.0
                * (e(&c00) * e(&c00) + e(&c00) * e(&v01) + e(&c11) * e(&v10) + e(&c11) * e(&c11))
                + 4.0
                    * (e(&c00) * e(&t00)
                        + e(&v01) * e(&t01)
                        + e(&v10) * e(&t10)
                        + e(&c11) * e(&t11));
        }
    }
    c22.sym_from_upper();
    [c00, c01, c02, c11, c12, c22]
}

/// The six independent elements of a symmetric 3×3 matrix.
const NU: [(usize, usize); 6] = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)];

/// The covariance of the weighted centre of the lifted points (`cc0`) and that of the six
/// independent elements of the plane's scatter matrix (`e_mat`).
fn plane_cov(blocks: &[Mx; 6], weight: &[f64], p3d: &Mx) -> (Mx, Mx) {
    let n = p3d.c;
    let [c00, c01, c02, c11, c12, c22] = blocks;
    let cmat = |i: usize, j: usize| -> &Mx {
        match (i, j) {
            (0, 0) => c00,
            (0, 1) => c01,
            (0, 2) => c02,
            (1, 1) => c11,
            (1, 2) => c12,
            _ => c22,
        }
    };
    let wv = Mx {
        r: n,
        c: 1,
        d: weight.to_vec(),
    };
    let mut cc0 = Mx::zeros(3, 3);
    for i in 0..3 {
        for j in i..3 {
            cc0[(i, j)] = wv.t().mul(cmat(i, j)).mul(&wv)[(0, 0)];
            cc0[(j, i)] = cc0[(i, j)];
        }
    }
    let w_mat = wv.mul(&wv.t());
    let h_mat = Mx::from_fn(n, n, |i, j| if i == j { 1.0 } else { 0.0 } - weight[j]);
    let s_v = h_mat.mul(&p3d.t());
    let d_of = |m: &Mx| h_mat.mul(m).mul(&h_mat.t()).cwise(&w_mat);
    let d00 = d_of(c00);
    let d01 = d_of(c01);
    let d02 = d_of(c02);
    let d11 = d_of(c11);
    let d12 = d_of(c12);
    let d22 = d_of(c22);
    let (d10, d20, d21) = (d01.t(), d02.t(), d12.t());
    let dm = |i: usize, j: usize| -> &Mx {
        match (i, j) {
            (0, 0) => &d00,
            (0, 1) => &d01,
            (0, 2) => &d02,
            (1, 0) => &d10,
            (1, 1) => &d11,
            (1, 2) => &d12,
            (2, 0) => &d20,
            (2, 1) => &d21,
            _ => &d22,
        }
    };
    let mut e_mat = Mx::zeros(6, 6);
    for a_ in 0..6 {
        let (i, j) = NU[a_];
        for b_ in a_..6 {
            let (k, l) = NU[b_];
            let (t0v, t1v);
            if l == k {
                t0v = dm(j, l).scale(2.0).mat_vec(&s_v.col(l));
                t1v = if i == j {
                    t0v.clone()
                } else {
                    dm(i, l).scale(2.0).mat_vec(&s_v.col(l))
                };
            } else {
                let p = dm(j, l).mat_vec(&s_v.col(k));
                let r = dm(j, k).mat_vec(&s_v.col(l));
                t0v = p.iter().zip(&r).map(|(x, y)| x + y).collect::<Vec<_>>();
                t1v = if i == j {
                    t0v.clone()
                } else {
                    let p = dm(i, l).mat_vec(&s_v.col(k));
                    let r = dm(i, k).mat_vec(&s_v.col(l));
                    p.iter().zip(&r).map(|(x, y)| x + y).collect()
                };
            }
            let val = if i == j {
                let sum: Vec<f64> = t0v.iter().zip(&t1v).map(|(x, y)| x + y).collect();
                0.0 + dot(&s_v.col(i), &sum)
            } else {
                0.0 + (dot(&s_v.col(i), &t0v) + dot(&s_v.col(j), &t1v))
            };
            e_mat[(a_, b_)] = val;
            if b_ != a_ {
                e_mat[(b_, a_)] = val;
            }
        }
    }
    (cc0, e_mat)
}

/// Numerical Jacobian of the smallest eigenvector `vv` of `a` w.r.t. the six independent
/// elements of `a`.
fn eigen_jacobian(a: &Mx, vv: &[f64; 3]) -> Mx {
    const DERIV_STEP: f64 = 1.0e-4;
    let mut j2 = Mx::zeros(3, 6);
    for a_ in 0..6 {
        let (i, j) = NU[a_];
        let mut delta = Mx::zeros(3, 3);
        let dd = (a[(i, j)] * DERIV_STEP).abs();
        delta[(i, j)] = dd;
        delta[(j, i)] = dd;
        let col = min_eigen3d_fast(&a.add(&delta));
        let sign = if col[2] > 0.0 { 1.0 } else { -1.0 };
        for k in 0..3 {
            j2[(k, a_)] = (col[k] * sign - vv[k]) / delta[(i, j)];
        }
    }
    j2
}

fn line_fit(
    hits: &[[f64; 3]],
    ge: &[[f32; 6]],
    circle: &UvrCircle,
    ff: &[f64; 4],
    b: f64,
) -> LineFit {
    let n = hits.len();
    let mut theta = (-circle.q) as f64 * ff[3].atan();
    if theta < 0.0 {
        theta += std::f64::consts::PI;
    }
    let (st, ct) = (theta.sin(), theta.cos());
    let rot = Mx {
        r: 2,
        c: 2,
        d: vec![st, ct, -ct, st],
    };
    let (p2d, cov_sz) = sz_points(hits, ge, circle, &rot);
    // Multiple scattering along the 3D path, orthogonal to the rotated s axis.
    let p_t = (ff[2] * b).min(20.0);
    let p_2 = p_t * p_t * (1.0 + 1.0 / (ff[3] * ff[3]));
    let s_values: Vec<f64> = (0..n)
        .map(|i| (p2d[(0, i)] * p2d[(0, i)] + p2d[(1, i)] * p2d[(1, i)]).sqrt())
        .collect();
    let rl = rad_len_uniform(&s_values);
    let f = 0.000225 / p_2;
    let sig2: Vec<f64> = rl
        .iter()
        .map(|&r| f * sqr(1.0 + 0.038 * r.ln()) * r)
        .collect();
    let mut tmp = Mx::zeros(2 * n, 2 * n);
    for k in 0..n {
        tmp[(k, k)] = cov_sz[k][(0, 0)];
        tmp[(k + n, k + n)] = cov_sz[k][(1, 1)];
        tmp[(k, k + n)] = cov_sz[k][(0, 1)];
        tmp[(k + n, k)] = cov_sz[k][(0, 1)];
    }
    for k in 0..n {
        for l in k..n {
            for i in 0..k.min(l) {
                tmp[(k + n, l + n)] +=
                    (s_values[k] - s_values[i]).abs() * (s_values[l] - s_values[i]).abs() * sig2[i];
            }
            tmp[(l + n, k + n)] = tmp[(k + n, l + n)];
        }
    }
    let cov_with_ms = tmp.block(n, n, n, n);
    let p2d_rot = rot.mul(&p2d);
    let a_mat = Mx::from_fn(2, n, |r, i| if r == 0 { 1.0 } else { p2d_rot[(0, i)] });
    let vy_inv = cov_with_ms.invert();
    let cov_params0 = a_mat.mul(&vy_inv).mul(&a_mat.t());
    // 2×2 Cholesky inverse (the reference's `invert22`).
    let s00 = cov_params0[(0, 0)];
    let s10 = cov_params0[(1, 0)];
    let s11 = cov_params0[(1, 1)];
    let luc0 = 1.0 / s00;
    let luc1 = s10 * s10 * luc0;
    let luc2 = 1.0 / (s11 - luc1);
    let li21 = luc1 * luc0 * luc2;
    let d10 = -s10 * luc0 * luc2;
    let cov_params = Mx {
        r: 2,
        c: 2,
        d: vec![li21 + luc0, d10, d10, luc2],
    };
    let y: Vec<f64> = (0..n).map(|i| p2d_rot[(1, i)]).collect();
    let sol = cov_params.mul(&a_mat).mul(&vy_inv).mat_vec(&y);
    let common_factor = 1.0 / (st - sol[1] * ct);
    let j = Mx {
        r: 2,
        c: 2,
        d: vec![
            0.0,
            common_factor * common_factor,
            common_factor,
            sol[0] * ct * common_factor * common_factor,
        ],
    };
    let m = common_factor * (sol[1] * st + ct);
    let qv = common_factor * sol[0];
    let cov_mq = j.mul(&cov_params).mul(&j.t());
    let at_sol = a_mat.t().mat_vec(&sol);
    let res: Vec<f64> = (0..n).map(|i| y[i] - at_sol[i]).collect();
    let chi2 = dot(&res, &vy_inv.mat_vec(&res));
    LineFit {
        par: [m, qv],
        cov: [
            [cov_mq[(0, 0)], cov_mq[(0, 1)]],
            [cov_mq[(1, 0)], cov_mq[(1, 1)]],
        ],
        chi2,
    }
}

/// The hits in the (s, z) plane of the circle: arc length and z (`p2d`), and each hit's
/// covariance there, rotated by `rot` (`cov_sz`).
fn sz_points(hits: &[[f64; 3]], ge: &[[f32; 6]], circle: &UvrCircle, rot: &Mx) -> (Mx, Vec<Mx>) {
    let n = hits.len();
    let o = [circle.par[0], circle.par[1]];
    let mo = [-o[0], -o[1]];
    let mut p2d = Mx::zeros(2, n);
    let mut cov = Mx::zeros(6, 6);
    let mut cov_sz = Vec::with_capacity(n);
    for i in 0..n {
        let p = [hits[i][0] - o[0], hits[i][1] - o[1]];
        let cr = cross2(mo, p);
        let dt = mo[0] * p[0] + mo[1] * p[1];
        let atan2_ = (-circle.q) as f64 * cr.atan2(dt);
        p2d[(0, i)] = atan2_ * circle.par[2];
        let temp0 = (-circle.q) as f64 * circle.par[2] * 1.0 / (sqr(dt) + sqr(cr));
        let d_x0 = -temp0 * ((p[1] + o[1]) * dt - (p[0] - o[0]) * cr);
        let d_y0 = temp0 * ((p[0] + o[0]) * dt - (o[1] - p[1]) * cr);
        let d_r = atan2_;
        let d_x = temp0 * (o[1] * dt + o[0] * cr);
        let d_y = temp0 * (-o[0] * dt + o[1] * cr);
        let jx = Mx {
            r: 2,
            c: 6,
            d: vec![d_x0, d_y0, d_r, d_x, d_y, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        };
        for r in 0..3 {
            for c in 0..3 {
                cov[(r, c)] = circle.cov[(r, c)];
            }
        }
        let g = ge[i].map(|x| x as f64);
        cov[(3, 3)] = g[0];
        cov[(4, 4)] = g[2];
        cov[(5, 5)] = g[5];
        cov[(3, 4)] = g[1];
        cov[(4, 3)] = g[1];
        cov[(3, 5)] = g[3];
        cov[(5, 3)] = g[3];
        cov[(4, 5)] = g[4];
        cov[(5, 4)] = g[4];
        let tmp = jx.mul(&cov).mul(&jx.t());
        cov_sz.push(rot.mul(&tmp).mul(&rot.t()));
    }
    for i in 0..n {
        p2d[(1, i)] = hits[i][2];
    }
    (p2d, cov_sz)
}

/// (X0, Y0, R) → (φ, tip, q/R) with the covariance (the reference's `fromCircleToPerigee`).
fn to_perigee(c: &UvrCircle) -> CircleFit {
    let q = c.q as f64;
    let (x0, y0, r) = (c.par[0], c.par[1], c.par[2]);
    let temp0 = x0 * x0 + y0 * y0;
    let temp1 = temp0.sqrt();
    let par = [(q * x0).atan2((-c.q) as f64 * y0), q * (temp1 - r), q / r];
    let temp2 = sqr(x0) * 1.0 / temp0;
    let temp3 = 1.0 / temp1 * q;
    let j4 = Mx {
        r: 3,
        c: 3,
        d: vec![
            -y0 * temp2 * 1.0 / sqr(x0),
            temp2 * 1.0 / x0,
            0.0,
            x0 * temp3,
            y0 * temp3,
            -q,
            0.0,
            0.0,
            (-c.q) as f64 / (r * r),
        ],
    };
    let cov = j4.mul(&c.cov).mul(&j4.t());
    CircleFit {
        par,
        cov: [
            [cov[(0, 0)], cov[(0, 1)], cov[(0, 2)]],
            [cov[(1, 0)], cov[(1, 1)], cov[(1, 2)]],
            [cov[(2, 0)], cov[(2, 1)], cov[(2, 2)]],
        ],
        chi2: c.chi2,
        q: c.q,
    }
}

/// Riemann fit of 3 to 5 hits (inner to outer), with the same inputs as
/// [`super::fit::broken_line_fit`]. The circle comes back as perigee parameters
/// (φ, tip, q/R) like the Broken Line's, so both store the same way.
///
/// ```
/// use quiver_reco::tracks::riemann::riemann_fit;
/// let r = 100.0f64;
/// let pts: Vec<[f64; 3]> = [3.0f64, 7.0, 11.0, 16.0]
///     .iter()
///     .map(|&s| { let a = s / r; [r * a.sin(), r * (1.0 - a.cos()), 0.5 * s] })
///     .collect();
/// let ge = [[1e-6f32, 0.0, 1e-6, 0.0, 0.0, 4e-6]; 4];
/// let f = riemann_fit(&pts, &ge, 0.0114257).unwrap();
/// assert!((1.0 / f.circle.par[2].abs() - r).abs() < 1.0);
/// assert!((f.line.par[0] - 0.5).abs() < 1e-3);
/// ```
pub fn riemann_fit(
    hits: &[[f64; 3]],
    ge: &[[f32; 6]],
    b: f64,
) -> Result<BrokenLineFit, TrackError> {
    let n = hits.len();
    if !(3..=5).contains(&n) || ge.len() != n {
        return Err(TrackError::Config(format!(
            "riemann_fit needs 3..=5 hits with one covariance each, got {n} hits and {} covariances",
            ge.len()
        )));
    }
    let ff = riemann_fast_fit(hits);
    let p2d: Vec<[f64; 2]> = hits.iter().map(|h| [h[0], h[1]]).collect();
    let rad: Vec<f64> = p2d
        .iter()
        .map(|p| (p[0] * p[0] + p[1] * p[1]).sqrt())
        .collect();
    let mut hits_cov = Mx::zeros(2 * n, 2 * n);
    for i in 0..n {
        hits_cov[(i, i)] = ge[i][0] as f64;
        hits_cov[(i + n, i + n)] = ge[i][2] as f64;
        hits_cov[(i, i + n)] = ge[i][1] as f64;
        hits_cov[(i + n, i)] = ge[i][1] as f64;
    }
    let circle = circle_fit(&p2d, &hits_cov, &ff, &rad, b);
    let line = line_fit(hits, ge, &circle, &ff, b);
    Ok(BrokenLineFit {
        fast: ff,
        circle: to_perigee(&circle),
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compares the 3×3 eigen-solver with Eigen's `computeDirect` through the program named
    /// by `QUIVER_REF_FIT` (mode 2: a matrix in, both minimal eigenvectors out, as bits).
    #[test]
    #[ignore]
    fn eigen3_cross_check() {
        let bin = std::env::var("QUIVER_REF_FIT")
            .expect("set QUIVER_REF_FIT to the reference fit harness binary");
        let mut g = crate::tracks::testing::Gauss::new(5);
        let mut mats = Vec::new();
        let mut input = String::new();
        for _ in 0..500 {
            let (a, b, c) = (g.sample(), g.sample(), g.sample());
            let (sa, ca) = a.sin_cos();
            let (sb, cb) = b.sin_cos();
            let (sc, cc) = c.sin_cos();
            let r = [
                [ca * cb, ca * sb * sc - sa * cc, ca * sb * cc + sa * sc],
                [sa * cb, sa * sb * sc + ca * cc, sa * sb * cc - ca * sc],
                [-sb, cb * sc, cb * cc],
            ];
            let d = [
                1e-6 * g.sample().abs(),
                0.5 + g.sample().abs(),
                2.0 + g.sample().abs(),
            ];
            let scale = 10f64.powf(2.0 * g.sample());
            let m = Mx::from_fn(3, 3, |i, j| {
                scale * (0..3).map(|k| r[i][k] * d[k] * r[j][k]).sum::<f64>()
            });
            input += "2 3\n";
            for x in &m.d {
                input += &format!("{} ", x.to_bits());
            }
            input += "\n";
            mats.push(m);
        }
        let path = std::env::temp_dir().join(format!("quiver_eigen3_{}.txt", std::process::id()));
        std::fs::write(&path, &input).unwrap();
        let out = std::process::Command::new(bin)
            .stdin(std::fs::File::open(&path).unwrap())
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let (mut exact32, mut exact64, mut n) = (0, 0, 0);
        for (m, line) in mats.iter().zip(text.lines()) {
            let t: Vec<f64> = line
                .split_whitespace()
                .map(|s| f64::from_bits(s.parse().unwrap()))
                .collect();
            let f = min_eigen3d_fast(m);
            let (v, chi2) = min_eigen3d(m);
            n += 1;
            if f.iter()
                .zip(&t[0..3])
                .all(|(a, b)| a.to_bits() == b.to_bits())
            {
                exact32 += 1;
            }
            if v.iter()
                .zip(&t[3..6])
                .all(|(a, b)| a.to_bits() == b.to_bits())
                && chi2.to_bits() == t[6].to_bits()
            {
                exact64 += 1;
            }
        }
        eprintln!("eigen3: f32 {exact32}/{n} bit-exact, f64 {exact64}/{n} bit-exact");
        assert_eq!(n, mats.len());
    }

    #[test]
    fn eigen3_matches_known_decomposition() {
        // diag(1, 2, 3) rotated about z by 30°.
        let (s, c) = (0.5f64, 3f64.sqrt() / 2.0);
        let r = [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]];
        let d = [1.0, 2.0, 3.0];
        let mut m = [[0.0; 3]; 3];
        for i in 0..3 {
            for j in 0..3 {
                for k in 0..3 {
                    m[i][j] += r[i][k] * d[k] * r[j][k];
                }
            }
        }
        let (ev, vec) = sym_eigen3_f64(&m);
        for k in 0..3 {
            assert!((ev[k] - d[k]).abs() < 1e-12, "{ev:?}");
            let dotp: f64 = (0..3).map(|i| vec[i][k] * r[i][k]).sum();
            assert!((dotp.abs() - 1.0).abs() < 1e-12);
        }
        let mx = Mx::from_fn(3, 3, |i, j| m[i][j]);
        let (v, chi2) = min_eigen3d(&mx);
        assert!((chi2 - 1.0).abs() < 1e-12);
        assert!((v[0].abs() - c).abs() < 1e-12 && (v[1].abs() - s).abs() < 1e-12);
        let vf = min_eigen3d_fast(&mx);
        assert!((vf[0].abs() - c).abs() < 1e-6);
    }
}
