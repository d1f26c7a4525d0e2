//! The Broken Line fit's arithmetic, generic over its number type ([`Real`]): `f64` fits
//! one tuple, [`super::lanes::F64x4`] four tuples of the same hit count at once. Every
//! expression is the one of the scalar port (same operations, same order, same grouping),
//! so each lane gives the bits of the scalar fit. The public entry points, the result
//! types and the reference's notes are in [`super::fit`].

use super::lanes::{c, Real};
use super::linalg::{
    cholesky_invert, cross2, dot2, mat_vec, mul, sandwich, sqr, sub2, transpose, Mat, MX,
};

/// Rotation that maps the line y = slope·x onto y = 0.
#[inline(always)]
fn rotation<T: Real>(slope: T) -> [[T; 2]; 2] {
    let r00 = c::<T>(1.0) / (c::<T>(1.0) + sqr(slope)).sqrt();
    let r01 = slope * r00;
    [[r00, r01], [-r01, r00]]
}

/// See [`super::fit::mult_scatt`].
#[inline(always)]
pub(crate) fn mult_scatt<T: Real>(length: T, b: T, r: T, slope: T) -> T {
    let mut pt2 = (b * r).min_c(20.0);
    pt2 *= pt2;
    const XXI_0: f64 = 0.06 / 16.0;
    const GEOMETRY_FACTOR: f64 = 0.7;
    const FACT: f64 = GEOMETRY_FACTOR * ((13.6 / 1000.0) * (13.6 / 1000.0));
    c::<T>(FACT) / (pt2 * (c::<T>(1.0) + sqr(slope)))
        * (length.abs() * c(XXI_0))
        * sqr(c::<T>(1.0) + c::<T>(0.038) * (length.abs() * c(XXI_0)).ln())
}

/// See [`super::fit::broken_line_fast_fit`].
#[inline(always)]
pub(crate) fn fast_fit<T: Real>(hits: &[[T; 3]]) -> [T; 4] {
    let n = hits.len();
    let xy = |i: usize| [hits[i][0], hits[i][1]];
    let a = sub2(xy(n / 2), xy(0));
    let b = sub2(xy(n - 1), xy(n / 2));
    let cc = sub2(xy(0), xy(n - 1));
    let (a2, b2, c2) = (dot2(a, a), dot2(b, b), dot2(cc, cc));
    let tmp = c::<T>(0.5) / cross2(cc, a);
    let r0 = hits[0][0] - (a[1] * c2 + cc[1] * a2) * tmp;
    let r1 = hits[0][1] + (a[0] * c2 + cc[0] * a2) * tmp;
    let r2 = (a2 * b2 * c2).sqrt() / (c::<T>(2.0) * cross2(b, a).abs());
    let d = sub2(xy(0), [r0, r1]);
    let e = sub2(xy(n - 1), [r0, r1]);
    let r3 = r2 * cross2(d, e).atan2(dot2(d, e)) / (hits[n - 1][2] - hits[0][2]);
    [r0, r1, r2, r3]
}

/// Quantities shared by the circle and line fits (`PreparedBrokenLineData`); `q` is the
/// charge as ±1.0.
#[derive(Clone, Debug)]
struct Prepared<T> {
    q: T,
    radii: [[T; 2]; MX],
    s: [T; MX],
    big_s: [T; MX],
    big_z: [T; MX],
    var_beta: [T; MX],
}

#[inline(always)]
fn prepare<T: Real>(hits: &[[T; 3]], ff: &[T; 4], b: T) -> Prepared<T> {
    let n = hits.len();
    let xy = |i: usize| [hits[i][0], hits[i][1]];
    let d = sub2(xy(1), xy(0));
    let e = sub2(xy(n - 1), xy(n - 2));
    let q = cross2(d, e).if_pos(-1.0, 1.0);
    let slope = (-q) / ff[3];
    let rot = rotation(slope);
    let z = c::<T>(0.0);
    let mut p = Prepared {
        q,
        radii: [[z; 2]; MX],
        s: [z; MX],
        big_s: [z; MX],
        big_z: [z; MX],
        var_beta: [z; MX],
    };
    for i in 0..n {
        p.radii[i] = [hits[i][0] - ff[0], hits[i][1] - ff[1]];
    }
    let norm = (ff[0] * ff[0] + ff[1] * ff[1]).sqrt();
    let e = [-ff[2] * ff[0] / norm, -ff[2] * ff[1] / norm];
    for i in 0..n {
        let d = p.radii[i];
        p.s[i] = q * ff[2] * cross2(d, e).atan2(dot2(d, e));
    }
    for i in 0..n {
        let (s, z) = (p.s[i], hits[i][2]);
        p.big_s[i] = rot[0][0] * s + rot[0][1] * z;
        p.big_z[i] = rot[1][0] * s + rot[1][1] * z;
    }
    for i in 1..n - 1 {
        p.var_beta[i] = mult_scatt(p.big_s[i + 1] - p.big_s[i], b, ff[2], slope)
            + mult_scatt(p.big_s[i] - p.big_s[i - 1], b, ff[2], slope);
    }
    p
}

/// The n×n band matrix of the Broken Line cost function in the offsets u.
#[inline(always)]
fn matrix_c_u<T: Real>(w: &[T; MX], s: &[T; MX], vb: &[T; MX], n: usize) -> Mat<T> {
    let one = c::<T>(1.0);
    let mut m = [[c::<T>(0.0); MX]; MX];
    for i in 0..n {
        m[i][i] = w[i];
        if i > 1 {
            m[i][i] += one / (vb[i - 1] * sqr(s[i] - s[i - 1]));
        }
        if i > 0 && i < n - 1 {
            m[i][i] += (one / vb[i])
                * sqr((s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1])));
        }
        if i + 2 < n {
            m[i][i] += one / (vb[i + 1] * sqr(s[i + 1] - s[i]));
        }
        if i > 0 && i < n - 1 {
            m[i][i + 1] = one / (vb[i] * (s[i + 1] - s[i]))
                * (-(s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1])));
        }
        if i + 2 < n {
            m[i][i + 1] += one / (vb[i + 1] * (s[i + 1] - s[i]))
                * (-(s[i + 2] - s[i]) / ((s[i + 2] - s[i + 1]) * (s[i + 1] - s[i])));
            m[i][i + 2] = one / (vb[i + 1] * (s[i + 2] - s[i + 1]) * (s[i + 1] - s[i]));
        }
        m[i][i] *= c(0.5);
    }
    let mut o = [[c::<T>(0.0); MX]; MX];
    for i in 0..n {
        for j in 0..n {
            o[i][j] = m[i][j] + m[j][i];
        }
    }
    o
}

/// A circle fit: Karimäki parameters, covariance, χ² (an f32 value), charge as ±1.0.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Circle<T> {
    pub(crate) par: [T; 3],
    pub(crate) cov: [[T; 3]; 3],
    pub(crate) chi2: T,
    pub(crate) q: T,
}

/// A line fit: (cotθ, zip), covariance, χ².
#[derive(Clone, Copy, Debug)]
pub(crate) struct Line<T> {
    pub(crate) par: [T; 2],
    pub(crate) cov: [[T; 2]; 2],
    pub(crate) chi2: T,
}

#[inline(always)]
fn translate_karimaki<T: Real>(cf: &mut Circle<T>, x0: T, y0: T) {
    let one = c::<T>(1.0);
    let (p0, p1, p2) = (cf.par[0], cf.par[1], cf.par[2]);
    let dp = x0 * p0.cos() + y0 * p0.sin();
    let do_ = x0 * p0.sin() - y0 * p0.cos() + p1;
    let uu = one + p2 * p1;
    let cc = -p2 * y0 + uu * p0.cos();
    let bb = p2 * x0 + uu * p0.sin();
    let a = c::<T>(2.0) * do_ + p2 * (sqr(do_) + sqr(dp));
    let u = (one + p2 * a).sqrt();
    let xi = one / (sqr(bb) + sqr(cc));
    let v = one + p2 * do_;
    let lambda = (c::<T>(0.5) * a) / (u * sqr(one + u));
    let mu = one / (u * (one + u)) + p2 * lambda;
    let zeta = sqr(do_) + sqr(dp);
    let j = [
        [xi * uu * v, -xi * sqr(p2) * dp, xi * dp],
        [
            c::<T>(2.0) * mu * uu * dp,
            c::<T>(2.0) * mu * v,
            mu * zeta - lambda * a,
        ],
        [c(0.0), c(0.0), one],
    ];
    cf.par[0] = bb.atan2(cc);
    cf.par[1] = a / (one + u);
    cf.cov = sandwich(&j, &cf.cov);
}

#[inline(always)]
fn line_fit<T: Real>(ge: &[[T; 6]], ff: &[T; 4], b: T, p: &Prepared<T>) -> Line<T> {
    let (zero, one) = (c::<T>(0.0), c::<T>(1.0));
    let n = ge.len();
    let slope = (-p.q) / ff[3];
    let rot = rotation(slope);
    let mut w = [zero; MX];
    for i in 0..n {
        let g = ge[i];
        let v = [[g[0], g[1], g[3]], [g[1], g[2], g[4]], [g[3], g[4], g[5]]];
        let r = p.radii[i];
        let tmp = one / (r[0] * r[0] + r[1] * r[1]).sqrt();
        let jac = [[r[1] * tmp, -r[0] * tmp, zero], [zero, zero, one]];
        let t = mul(
            &mul(&mul(&mul(&rot, &jac), &v), &transpose(&jac)),
            &transpose(&rot),
        );
        w[i] = one / t[1][1];
    }
    let mut r_u = [zero; MX];
    for i in 0..n {
        r_u[i] = w[i] * p.big_z[i];
    }
    let s = &p.big_s;
    let inv = cholesky_invert(&matrix_c_u(&w, s, &p.var_beta, n), n);
    let u = mat_vec(&inv, &r_u, n);

    let mut par = [(u[1] - u[0]) / (s[1] - s[0]), u[0]];
    let idiff = one / (s[1] - s[0]);
    let c01 = (inv[0][1] - inv[0][0]) * idiff;
    let mut cov = [
        [
            (inv[0][0] - c::<T>(2.0) * inv[0][1] + inv[1][1]) * sqr(idiff)
                + mult_scatt(s[1] - s[0], b, ff[2], slope),
            c01,
        ],
        [c01, inv[0][0]],
    ];
    // Back to the SZ frame whose origin is not the first hit.
    let j = [[one, zero], [-s[0], one]];
    par[1] += -par[0] * s[0];
    cov = sandwich(&j, &cov);
    // Undo the rotation of the SZ plane.
    let tmp = rot[0][0] - par[0] * rot[0][1];
    let j11 = one / tmp;
    let j00 = j11 * j11;
    let j10 = par[1] * rot[0][1] * j00;
    let j = [[j00, zero], [j10, j11]];
    par[1] *= j11;
    par[0] = (rot[0][1] + par[0] * rot[0][0]) * j11;
    cov = sandwich(&j, &cov);

    let zz = &p.big_z;
    let vb = &p.var_beta;
    let mut chi2 = zero;
    for i in 0..n {
        chi2 += w[i] * sqr(zz[i] - u[i]);
        if i > 0 && i < n - 1 {
            chi2 += sqr(u[i - 1] / (s[i] - s[i - 1])
                - u[i] * (s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1]))
                + u[i + 1] / (s[i + 1] - s[i]))
                / vb[i];
        }
    }
    Line { par, cov, chi2 }
}

/// The circle fit's weights and its (n+1)×(n+1) matrix: the band matrix bordered by the
/// curvature correction's column.
#[inline(always)]
fn circle_matrix<T: Real>(ge: &[[T; 6]], p: &Prepared<T>) -> ([T; MX], Mat<T>) {
    let n = ge.len();
    let one = c::<T>(1.0);
    let mut w = [c::<T>(0.0); MX];
    for i in 0..n {
        let g = ge[i];
        let v = [[g[0], g[1]], [g[1], g[2]]];
        let rr = rotation(-p.radii[i][0] / p.radii[i][1]);
        let t = mul(&mul(&rr, &v), &transpose(&rr));
        w[i] = one / t[1][1];
    }
    let s = &p.s;
    let vb = &p.var_beta;
    let mut cu = matrix_c_u(&w, s, vb, n);
    cu[n][n] = c(0.0);
    for i in 0..n {
        cu[i][n] = c(0.0);
        if i > 0 && i < n - 1 {
            cu[i][n] += -(s[i + 1] - s[i - 1]) * (s[i + 1] - s[i - 1])
                / (c::<T>(2.0) * vb[i] * (s[i + 1] - s[i]) * (s[i] - s[i - 1]));
        }
        if i > 1 {
            cu[i][n] += (s[i] - s[i - 2]) / (c::<T>(2.0) * vb[i - 1] * (s[i] - s[i - 1]));
        }
        if i + 2 < n {
            cu[i][n] += (s[i + 2] - s[i]) / (c::<T>(2.0) * vb[i + 1] * (s[i + 1] - s[i]));
        }
        cu[n][i] = cu[i][n];
        if i > 0 && i < n - 1 {
            cu[n][n] += sqr(s[i + 1] - s[i - 1]) / (c::<T>(4.0) * vb[i]);
        }
    }
    (w, cu)
}

#[inline(always)]
fn circle_fit<T: Real>(
    hits: &[[T; 3]],
    ge: &[[T; 6]],
    ff: &[T; 4],
    b: T,
    p: &mut Prepared<T>,
) -> Circle<T> {
    let (zero, one) = (c::<T>(0.0), c::<T>(1.0));
    let n = hits.len();
    let q = p.q;
    let slope = (-q) / ff[3];
    let k = one + sqr(slope);
    for i in 0..n {
        p.var_beta[i] *= k; // kink angles are projected onto the transverse plane
    }
    for i in 0..n {
        let r = p.radii[i];
        p.big_z[i] = (r[0] * r[0] + r[1] * r[1]).sqrt() - ff[2];
    }
    let (w, cu) = circle_matrix(ge, p);
    let mut r_u = [zero; MX];
    for i in 0..n {
        r_u[i] = w[i] * p.big_z[i];
    }
    let inv = cholesky_invert(&cu, n + 1);
    let u = mat_vec(&inv, &r_u, n + 1);

    let mut radii = p.radii;
    for r in radii.iter_mut().take(2) {
        let norm = (r[0] * r[0] + r[1] * r[1]).sqrt();
        *r = [r[0] / norm, r[1] / norm];
    }
    let zz = &p.big_z;
    let f0 = -zz[0] + u[0];
    let f1 = -zz[1] + u[1];
    let d = [hits[0][0] + f0 * radii[0][0], hits[0][1] + f0 * radii[0][1]];
    let e = [hits[1][0] + f1 * radii[1][0], hits[1][1] + f1 * radii[1][1]];
    let emd = sub2(e, d);
    let tmp1 = dot2(emd, emd);
    let mut cf = Circle {
        par: [
            emd[1].atan2(emd[0]),
            (-q) * (ff[2] - (sqr(ff[2]) - c::<T>(0.25) * tmp1).sqrt()),
            q * (one / ff[2] + u[n]),
        ],
        cov: [[zero; 3]; 3],
        chi2: zero,
        q,
    };
    // The reference multiplies by the integer q/2, which is 0 for |q| = 1.
    let half_q = zero;
    let sq = (sqr(c::<T>(2.0) * ff[2]) - tmp1).sqrt();
    let j = [
        [
            (radii[0][1] * emd[0] - emd[1] * radii[0][0]) / tmp1,
            (radii[1][1] * emd[0] - emd[1] * radii[1][0]) / tmp1,
            zero,
        ],
        [
            half_q * (emd[0] * radii[0][0] + emd[1] * radii[0][1]) / sq,
            half_q * (emd[0] * radii[1][0] + emd[1] * radii[1][1]) / sq,
            zero,
        ],
        [zero, zero, q],
    ];
    let cov = [
        [inv[0][0], inv[0][1], inv[0][n]],
        [inv[1][0], inv[1][1], inv[1][n]],
        [inv[n][0], inv[n][1], inv[n][n]],
    ];
    cf.cov = sandwich(&j, &cov);
    // To the frame of the first corrected hit, add its multiple scattering, then back.
    translate_karimaki(&mut cf, c::<T>(0.5) * emd[0], c::<T>(0.5) * emd[1]);
    cf.cov[0][0] += (one + sqr(slope)) * mult_scatt(p.big_s[1] - p.big_s[0], b, ff[2], slope);
    translate_karimaki(&mut cf, d[0], d[1]);
    cf.chi2 = circle_chi2(&w, &u, p, n);
    cf
}

/// The circle's χ², accumulated in f32 as the reference does.
#[inline(always)]
fn circle_chi2<T: Real>(w: &[T; MX], u: &[T; MX], p: &Prepared<T>, n: usize) -> T {
    let (s, zz, vb) = (&p.s, &p.big_z, &p.var_beta);
    let mut chi2 = c::<T>(0.0);
    for i in 0..n {
        chi2 = (chi2 + w[i] * sqr(zz[i] - u[i])).round_f32();
        if i > 0 && i < n - 1 {
            let t = sqr(u[i - 1] / (s[i] - s[i - 1])
                - u[i] * (s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1]))
                + u[i + 1] / (s[i + 1] - s[i])
                + (s[i + 1] - s[i - 1]) * u[n] / c(2.0))
                / vb[i];
            chi2 = (chi2 + t).round_f32();
        }
    }
    chi2
}

/// One Broken Line fit (or four, in lanes) of `N` hits: the pre-fit, the circle and the
/// line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fit<T> {
    pub(crate) fast: [T; 4],
    pub(crate) circle: Circle<T>,
    pub(crate) line: Line<T>,
}

/// The Broken Line fit of `N` hits: positions, global covariances (f32 values), field.
#[inline(always)]
pub(crate) fn fit_n<T: Real, const N: usize>(hits: &[[T; 3]; N], ge: &[[T; 6]; N], b: T) -> Fit<T> {
    let ff = fast_fit(hits);
    let mut p = prepare(hits, &ff, b);
    // The line fit must run first: the circle fit rescales the kink variances and
    // overwrites Z.
    let line = line_fit(ge, &ff, b, &p);
    let circle = circle_fit(hits, ge, &ff, b, &mut p);
    Fit {
        fast: ff,
        circle,
        line,
    }
}
