//! Broken Line helix fit (port of the reference's `BrokenLine.h`, `BrokenLineFitOnGPU.h`,
//! `choleskyInversion.h`, `TrajectoryStateSoA::copyFromCircle`).
//!
//! Precision follows the reference: hit positions are widened to f64, the global hit
//! covariance is rotated in f32, the fit runs in f64, the circle χ² accumulates in f32 and the
//! line χ² in f64, and the stored state is f32. Small matrix products sum their terms in index
//! order (Eigen may group the terms of a sum differently, so the last bit can differ).

use super::ntuplets::Tuples;
use super::{HitsView, Quality, TrackError, Tracks};
use quiver_formats::conditions::Frame;

use super::linalg::{
    cholesky_invert, cross2, dot2, mat_vec, mul, sandwich, sqr, sub2, transpose, Mat, MX,
};

/// Parameters of the fit. Defaults are the reference's.
#[derive(Clone, Debug, PartialEq)]
pub struct FitConfig {
    /// Field as 1/(pT per cm of radius), GeV/cm (pT = b_field·R). The reference hands the
    /// fitter a float, so the default is the f32 nearest 0.0114256972711507 (B ≈ 3.8112 T).
    pub b_field: f32,
    /// Fit 5-hit tuples with their first 4 hits. Default true.
    pub fit5as4: bool,
    /// Tuples fitted per hit multiplicity (the reference's concurrent-fit buffers). Default
    /// 24 576.
    pub max_concurrent_fits: u32,
    /// Use the Riemann fit instead of the Broken Line. Default false. (The reference keeps
    /// the χ² cut scale at 30 for both.)
    pub use_riemann_fit: bool,
}

impl Default for FitConfig {
    fn default() -> Self {
        Self {
            b_field: 0.011_425_697_271_150_7f64 as f32,
            fit5as4: true,
            max_concurrent_fits: 24_576,
            use_riemann_fit: false,
        }
    }
}

impl FitConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), TrackError> {
        if !(self.b_field.is_finite() && self.b_field > 0.0) {
            return Err(TrackError::Config(format!(
                "fit.b_field must be finite and > 0, got {}",
                self.b_field
            )));
        }
        Ok(())
    }
}

/// Rotation that maps the line y = slope·x onto y = 0.
fn rotation(slope: f64) -> [[f64; 2]; 2] {
    let r00 = 1.0 / (1.0 + sqr(slope)).sqrt();
    let r01 = slope * r00;
    [[r00, r01], [-r01, r00]]
}

/// Multiple-scattering variance of the planar angle over `length` cm of the pixel material
/// (0.06 X0 per 16 cm, geometry factor 0.7, pT capped at 20 GeV).
///
/// ```
/// use quiver_reco::tracks::fit::mult_scatt;
/// // 4 cm at pT = 1 GeV: 0.7·0.0136²·0.015·(1 + 0.038·ln 0.015)².
/// let v = mult_scatt(4.0, 0.0114257, 1.0 / 0.0114257, 0.0);
/// let x: f64 = 4.0 * 0.06 / 16.0;
/// let expect = 0.7 * 0.0136f64.powi(2) * x * (1.0 + 0.038 * x.ln()).powi(2);
/// assert!((v - expect).abs() < 1e-12);
/// ```
pub fn mult_scatt(length: f64, b: f64, r: f64, slope: f64) -> f64 {
    let mut pt2 = (b * r).min(20.0);
    pt2 *= pt2;
    const XXI_0: f64 = 0.06 / 16.0;
    const GEOMETRY_FACTOR: f64 = 0.7;
    const FACT: f64 = GEOMETRY_FACTOR * ((13.6 / 1000.0) * (13.6 / 1000.0));
    FACT / (pt2 * (1.0 + sqr(slope)))
        * (length.abs() * XXI_0)
        * sqr(1.0 + 0.038 * (length.abs() * XXI_0).ln())
}

/// Global covariance (xx, xy, yy, xz, yz, zz) of a hit with local variances (cxx, cyy),
/// rotated with the module frame in f32 (`SOAFrame::toGlobal(cxx, cxy, cyy, gl)`, cxy = 0).
///
/// ```
/// use quiver_reco::tracks::fit::hit_global_cov;
/// use quiver_formats::conditions::Frame;
/// // Module at φ = 90°: local x is −global x, local y is global z.
/// let f = Frame { px: 0.0, py: 3.0, pz: 0.0, r: [-1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0] };
/// assert_eq!(hit_global_cov(&f, 1e-6, 4e-6), [1e-6, 0.0, 0.0, 0.0, 0.0, 4e-6]);
/// ```
pub fn hit_global_cov(frame: &Frame, cxx: f32, cyy: f32) -> [f32; 6] {
    let r = &frame.r;
    let (xx, xy, xz, yx, yy, yz) = (r[0], r[1], r[2], r[3], r[4], r[5]);
    let cxy = 0.0f32;
    [
        xx * (xx * cxx + yx * cxy) + yx * (xx * cxy + yx * cyy),
        xx * (xy * cxx + yy * cxy) + yx * (xy * cxy + yy * cyy),
        xy * (xy * cxx + yy * cxy) + yy * (xy * cxy + yy * cyy),
        xx * (xz * cxx + yz * cxy) + yx * (xz * cxy + yz * cyy),
        xy * (xz * cxx + yz * cxy) + yy * (xz * cxy + yz * cyy),
        xz * (xz * cxx + yz * cxy) + yz * (xz * cxy + yz * cyy),
    ]
}

/// The Broken Line's pre-fit (`BrokenLine::fastFit`): circle through the first, middle and
/// last hits, (X0, Y0, R, tanθ-like). The Riemann fit has its own, computed differently
/// (`riemann::riemann_fast_fit`).
///
/// ```
/// use quiver_reco::tracks::fit::broken_line_fast_fit;
/// let f = broken_line_fast_fit(&[[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [-1.0, 0.0, 2.0]]);
/// assert!(f[0].abs() < 1e-12 && f[1].abs() < 1e-12 && (f[2] - 1.0).abs() < 1e-12);
/// ```
#[inline(always)]
pub fn broken_line_fast_fit(hits: &[[f64; 3]]) -> [f64; 4] {
    let n = hits.len();
    let xy = |i: usize| [hits[i][0], hits[i][1]];
    let a = sub2(xy(n / 2), xy(0));
    let b = sub2(xy(n - 1), xy(n / 2));
    let c = sub2(xy(0), xy(n - 1));
    let (a2, b2, c2) = (dot2(a, a), dot2(b, b), dot2(c, c));
    let tmp = 0.5 / cross2(c, a);
    let r0 = hits[0][0] - (a[1] * c2 + c[1] * a2) * tmp;
    let r1 = hits[0][1] + (a[0] * c2 + c[0] * a2) * tmp;
    let r2 = (a2 * b2 * c2).sqrt() / (2.0 * cross2(b, a).abs());
    let d = sub2(xy(0), [r0, r1]);
    let e = sub2(xy(n - 1), [r0, r1]);
    let r3 = r2 * cross2(d, e).atan2(dot2(d, e)) / (hits[n - 1][2] - hits[0][2]);
    [r0, r1, r2, r3]
}

/// Quantities shared by the circle and line fits (`PreparedBrokenLineData`).
#[derive(Clone, Debug)]
struct Prepared {
    q: i32,
    radii: [[f64; 2]; MX],
    s: [f64; MX],
    big_s: [f64; MX],
    big_z: [f64; MX],
    var_beta: [f64; MX],
}

#[inline(always)]
fn prepare(hits: &[[f64; 3]], ff: &[f64; 4], b: f64) -> Prepared {
    let n = hits.len();
    let xy = |i: usize| [hits[i][0], hits[i][1]];
    let d = sub2(xy(1), xy(0));
    let e = sub2(xy(n - 1), xy(n - 2));
    let q: i32 = if cross2(d, e) > 0.0 { -1 } else { 1 };
    let slope = (-q) as f64 / ff[3];
    let rot = rotation(slope);
    let mut p = Prepared {
        q,
        radii: [[0.0; 2]; MX],
        s: [0.0; MX],
        big_s: [0.0; MX],
        big_z: [0.0; MX],
        var_beta: [0.0; MX],
    };
    for i in 0..n {
        p.radii[i] = [hits[i][0] - ff[0], hits[i][1] - ff[1]];
    }
    let norm = (ff[0] * ff[0] + ff[1] * ff[1]).sqrt();
    let e = [-ff[2] * ff[0] / norm, -ff[2] * ff[1] / norm];
    for i in 0..n {
        let d = p.radii[i];
        p.s[i] = q as f64 * ff[2] * cross2(d, e).atan2(dot2(d, e));
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
fn matrix_c_u(w: &[f64; MX], s: &[f64; MX], vb: &[f64; MX], n: usize) -> Mat {
    let mut c = [[0.0f64; MX]; MX];
    for i in 0..n {
        c[i][i] = w[i];
        if i > 1 {
            c[i][i] += 1.0 / (vb[i - 1] * sqr(s[i] - s[i - 1]));
        }
        if i > 0 && i < n - 1 {
            c[i][i] += (1.0 / vb[i])
                * sqr((s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1])));
        }
        if i + 2 < n {
            c[i][i] += 1.0 / (vb[i + 1] * sqr(s[i + 1] - s[i]));
        }
        if i > 0 && i < n - 1 {
            c[i][i + 1] = 1.0 / (vb[i] * (s[i + 1] - s[i]))
                * (-(s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1])));
        }
        if i + 2 < n {
            c[i][i + 1] += 1.0 / (vb[i + 1] * (s[i + 1] - s[i]))
                * (-(s[i + 2] - s[i]) / ((s[i + 2] - s[i + 1]) * (s[i + 1] - s[i])));
            c[i][i + 2] = 1.0 / (vb[i + 1] * (s[i + 2] - s[i + 1]) * (s[i + 1] - s[i]));
        }
        c[i][i] *= 0.5;
    }
    let mut o = [[0.0f64; MX]; MX];
    for i in 0..n {
        for j in 0..n {
            o[i][j] = c[i][j] + c[j][i];
        }
    }
    o
}

/// Circle fit result: Karimäki parameters (φ, d, κ) at the origin, covariance, χ², charge.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CircleFit {
    pub par: [f64; 3],
    pub cov: [[f64; 3]; 3],
    pub chi2: f32,
    pub q: i32,
}

/// Line fit result: (cotθ, zip), covariance, χ².
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LineFit {
    pub par: [f64; 2],
    pub cov: [[f64; 2]; 2],
    pub chi2: f64,
}

#[inline(always)]
fn translate_karimaki(c: &mut CircleFit, x0: f64, y0: f64) {
    let (p0, p1, p2) = (c.par[0], c.par[1], c.par[2]);
    let dp = x0 * p0.cos() + y0 * p0.sin();
    let do_ = x0 * p0.sin() - y0 * p0.cos() + p1;
    let uu = 1.0 + p2 * p1;
    let cc = -p2 * y0 + uu * p0.cos();
    let bb = p2 * x0 + uu * p0.sin();
    let a = 2.0 * do_ + p2 * (sqr(do_) + sqr(dp));
    let u = (1.0 + p2 * a).sqrt();
    let xi = 1.0 / (sqr(bb) + sqr(cc));
    let v = 1.0 + p2 * do_;
    let lambda = (0.5 * a) / (u * sqr(1.0 + u));
    let mu = 1.0 / (u * (1.0 + u)) + p2 * lambda;
    let zeta = sqr(do_) + sqr(dp);
    let j = [
        [xi * uu * v, -xi * sqr(p2) * dp, xi * dp],
        [2.0 * mu * uu * dp, 2.0 * mu * v, mu * zeta - lambda * a],
        [0.0, 0.0, 1.0],
    ];
    c.par[0] = bb.atan2(cc);
    c.par[1] = a / (1.0 + u);
    c.cov = sandwich(&j, &c.cov);
}

#[inline(always)]
fn line_fit(ge: &[[f32; 6]], ff: &[f64; 4], b: f64, p: &Prepared) -> LineFit {
    let n = ge.len();
    let slope = (-p.q) as f64 / ff[3];
    let rot = rotation(slope);
    let mut w = [0.0f64; MX];
    for i in 0..n {
        let g = ge[i].map(|x| x as f64);
        let v = [[g[0], g[1], g[3]], [g[1], g[2], g[4]], [g[3], g[4], g[5]]];
        let r = p.radii[i];
        let tmp = 1.0 / (r[0] * r[0] + r[1] * r[1]).sqrt();
        let jac = [[r[1] * tmp, -r[0] * tmp, 0.0], [0.0, 0.0, 1.0]];
        let t = mul(
            &mul(&mul(&mul(&rot, &jac), &v), &transpose(&jac)),
            &transpose(&rot),
        );
        w[i] = 1.0 / t[1][1];
    }
    let mut r_u = [0.0f64; MX];
    for i in 0..n {
        r_u[i] = w[i] * p.big_z[i];
    }
    let s = &p.big_s;
    let inv = cholesky_invert(&matrix_c_u(&w, s, &p.var_beta, n), n);
    let u = mat_vec(&inv, &r_u, n);

    let mut par = [(u[1] - u[0]) / (s[1] - s[0]), u[0]];
    let idiff = 1.0 / (s[1] - s[0]);
    let c01 = (inv[0][1] - inv[0][0]) * idiff;
    let mut cov = [
        [
            (inv[0][0] - 2.0 * inv[0][1] + inv[1][1]) * sqr(idiff)
                + mult_scatt(s[1] - s[0], b, ff[2], slope),
            c01,
        ],
        [c01, inv[0][0]],
    ];
    // Back to the SZ frame whose origin is not the first hit.
    let j = [[1.0, 0.0], [-s[0], 1.0]];
    par[1] += -par[0] * s[0];
    cov = sandwich(&j, &cov);
    // Undo the rotation of the SZ plane.
    let tmp = rot[0][0] - par[0] * rot[0][1];
    let j11 = 1.0 / tmp;
    let j00 = j11 * j11;
    let j10 = par[1] * rot[0][1] * j00;
    let j = [[j00, 0.0], [j10, j11]];
    par[1] *= j11;
    par[0] = (rot[0][1] + par[0] * rot[0][0]) * j11;
    cov = sandwich(&j, &cov);

    let zz = &p.big_z;
    let vb = &p.var_beta;
    let mut chi2 = 0.0f64;
    for i in 0..n {
        chi2 += w[i] * sqr(zz[i] - u[i]);
        if i > 0 && i < n - 1 {
            chi2 += sqr(u[i - 1] / (s[i] - s[i - 1])
                - u[i] * (s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1]))
                + u[i + 1] / (s[i + 1] - s[i]))
                / vb[i];
        }
    }
    LineFit { par, cov, chi2 }
}

#[inline(always)]
fn circle_fit(
    hits: &[[f64; 3]],
    ge: &[[f32; 6]],
    ff: &[f64; 4],
    b: f64,
    p: &mut Prepared,
) -> CircleFit {
    let n = hits.len();
    let q = p.q;
    let slope = (-q) as f64 / ff[3];
    let k = 1.0 + sqr(slope);
    for i in 0..n {
        p.var_beta[i] *= k; // kink angles are projected onto the transverse plane
    }
    for i in 0..n {
        let r = p.radii[i];
        p.big_z[i] = (r[0] * r[0] + r[1] * r[1]).sqrt() - ff[2];
    }
    let mut w = [0.0f64; MX];
    for i in 0..n {
        let g = ge[i];
        let v = [[g[0] as f64, g[1] as f64], [g[1] as f64, g[2] as f64]];
        let rr = rotation(-p.radii[i][0] / p.radii[i][1]);
        let t = mul(&mul(&rr, &v), &transpose(&rr));
        w[i] = 1.0 / t[1][1];
    }
    let mut r_u = [0.0f64; MX];
    for i in 0..n {
        r_u[i] = w[i] * p.big_z[i];
    }
    let s = &p.s;
    let vb = &p.var_beta;
    let mut cu = matrix_c_u(&w, s, vb, n);
    cu[n][n] = 0.0;
    for i in 0..n {
        cu[i][n] = 0.0;
        if i > 0 && i < n - 1 {
            cu[i][n] += -(s[i + 1] - s[i - 1]) * (s[i + 1] - s[i - 1])
                / (2.0 * vb[i] * (s[i + 1] - s[i]) * (s[i] - s[i - 1]));
        }
        if i > 1 {
            cu[i][n] += (s[i] - s[i - 2]) / (2.0 * vb[i - 1] * (s[i] - s[i - 1]));
        }
        if i + 2 < n {
            cu[i][n] += (s[i + 2] - s[i]) / (2.0 * vb[i + 1] * (s[i + 1] - s[i]));
        }
        cu[n][i] = cu[i][n];
        if i > 0 && i < n - 1 {
            cu[n][n] += sqr(s[i + 1] - s[i - 1]) / (4.0 * vb[i]);
        }
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
    let qf = q as f64;
    let mut c = CircleFit {
        par: [
            emd[1].atan2(emd[0]),
            (-q) as f64 * (ff[2] - (sqr(ff[2]) - 0.25 * tmp1).sqrt()),
            qf * (1.0 / ff[2] + u[n]),
        ],
        cov: [[0.0; 3]; 3],
        chi2: 0.0,
        q,
    };
    // The reference multiplies by the integer q/2, which is 0 for |q| = 1.
    let half_q = (q / 2) as f64;
    let sq = (sqr(2.0 * ff[2]) - tmp1).sqrt();
    let j = [
        [
            (radii[0][1] * emd[0] - emd[1] * radii[0][0]) / tmp1,
            (radii[1][1] * emd[0] - emd[1] * radii[1][0]) / tmp1,
            0.0,
        ],
        [
            half_q * (emd[0] * radii[0][0] + emd[1] * radii[0][1]) / sq,
            half_q * (emd[0] * radii[1][0] + emd[1] * radii[1][1]) / sq,
            0.0,
        ],
        [0.0, 0.0, qf],
    ];
    let cov = [
        [inv[0][0], inv[0][1], inv[0][n]],
        [inv[1][0], inv[1][1], inv[1][n]],
        [inv[n][0], inv[n][1], inv[n][n]],
    ];
    c.cov = sandwich(&j, &cov);
    // To the frame of the first corrected hit, add its multiple scattering, then back.
    translate_karimaki(&mut c, 0.5 * emd[0], 0.5 * emd[1]);
    c.cov[0][0] += (1.0 + sqr(slope)) * mult_scatt(p.big_s[1] - p.big_s[0], b, ff[2], slope);
    translate_karimaki(&mut c, d[0], d[1]);

    let mut chi2 = 0.0f32;
    for i in 0..n {
        chi2 = (chi2 as f64 + w[i] * sqr(zz[i] - u[i])) as f32;
        if i > 0 && i < n - 1 {
            let t = sqr(u[i - 1] / (s[i] - s[i - 1])
                - u[i] * (s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1]))
                + u[i + 1] / (s[i + 1] - s[i])
                + (s[i + 1] - s[i - 1]) * u[n] / 2.0)
                / vb[i];
            chi2 = (chi2 as f64 + t) as f32;
        }
    }
    c.chi2 = chi2;
    c
}

/// Result of one Broken Line fit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BrokenLineFit {
    /// (X0, Y0, R, tanθ-like) of the pre-fit.
    pub fast: [f64; 4],
    pub circle: CircleFit,
    pub line: LineFit,
}

/// Broken Line fit of 3 to 5 hits (inner to outer): positions (cm) and global covariances
/// (xx, xy, yy, xz, yz, zz; cm²), field `b` in GeV/cm.
///
/// ```
/// use quiver_reco::tracks::fit::broken_line_fit;
/// // Three points on a circle of radius 100 cm through the origin (pT ≈ 1.14 GeV).
/// let r = 100.0f64;
/// let pts: Vec<[f64; 3]> = [3.0f64, 7.0, 11.0]
///     .iter()
///     .map(|&s| { let a = s / r; [r * a.sin(), r * (1.0 - a.cos()), 0.5 * s] })
///     .collect();
/// let ge = [[1e-6f32, 0.0, 1e-6, 0.0, 0.0, 4e-6]; 3];
/// let f = broken_line_fit(&pts, &ge, 0.0114257).unwrap();
/// assert!((1.0 / f.circle.par[2].abs() - r).abs() < 1.0);
/// ```
pub fn broken_line_fit(
    hits: &[[f64; 3]],
    ge: &[[f32; 6]],
    b: f64,
) -> Result<BrokenLineFit, TrackError> {
    let n = hits.len();
    if !(3..=5).contains(&n) || ge.len() != n {
        return Err(TrackError::Config(format!(
            "broken_line_fit needs 3..=5 hits with one covariance each, got {n} hits and {} covariances",
            ge.len()
        )));
    }
    // One instance per hit count: with n a constant the loops unroll and the Cholesky
    // branches fold (the same operations in the same order, so the same bits).
    Ok(match n {
        3 => fit_n::<3>(hits, ge, b),
        4 => fit_n::<4>(hits, ge, b),
        _ => fit_n::<5>(hits, ge, b),
    })
}

#[inline(always)]
fn fit_n<const N: usize>(hits: &[[f64; 3]], ge: &[[f32; 6]], b: f64) -> BrokenLineFit {
    let (hits, ge) = (&hits[..N], &ge[..N]);
    let ff = broken_line_fast_fit(hits);
    let mut p = prepare(hits, &ff, b);
    // The line fit must run first: the circle fit rescales the kink variances and
    // overwrites Z.
    let line = line_fit(ge, &ff, b, &p);
    let circle = circle_fit(hits, ge, &ff, b, &mut p);
    BrokenLineFit {
        fast: ff,
        circle,
        line,
    }
}

extern "C" {
    fn asinhf(x: f32) -> f32;
}

/// The C library's `asinhf`, which the reference calls: Rust's `f32::asinh` is computed
/// differently and can differ in the last bit.
fn c_asinhf(x: f32) -> f32 {
    // SAFETY: `asinhf` is a pure C99 math function of one float, present in every libm.
    unsafe { asinhf(x) }
}

/// A tuple the fit takes: its row and how many of its hits are fitted (3 to 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FitJob {
    pub row: u32,
    pub n_fit: u8,
}

/// The tuples [`fit_tuples`] fits, in its order: every non-duplicate tuple of 3, 4 or 5
/// hits (5-hit tuples on their first 4 with `fit5as4`), at most `max_concurrent_fits` per
/// hit count, taken in the reference's bucket order (descending tuple index). A GPU fit
/// takes the same jobs, so the same tuples are fitted and the same ones missed.
///
/// ```
/// use quiver_reco::tracks::fit::{fit_selection, FitConfig, FitJob};
/// use quiver_reco::tracks::{ntuplets::Tuples, Quality};
/// let t = Tuples { offsets: vec![0, 5, 8, 12], hits: (0..12).collect(),
///     quality: vec![Quality::Bad, Quality::Bad, Quality::Dup], overflow: false };
/// let jobs = fit_selection(&t, &FitConfig::default());
/// assert_eq!(jobs, [FitJob { row: 1, n_fit: 3 }, FitJob { row: 0, n_fit: 4 }]);
/// ```
pub fn fit_selection(tuples: &Tuples, cfg: &FitConfig) -> Vec<FitJob> {
    let mut per_mult = [0u32; 8];
    let mut jobs = Vec::with_capacity(tuples.len());
    for it in (0..tuples.len()).rev() {
        let nh = tuples.size(it);
        if !(3..=5).contains(&nh)
            || tuples.quality[it] == Quality::Dup
            || per_mult[nh] >= cfg.max_concurrent_fits
        {
            continue;
        }
        per_mult[nh] += 1;
        let n_fit = if nh == 5 && cfg.fit5as4 { 4 } else { nh };
        jobs.push(FitJob {
            row: it as u32,
            n_fit: n_fit as u8,
        });
    }
    jobs
}

/// What a fit leaves in the tracks, in f32, before the field scaling and η: the values the
/// reference's `kernelBLFit` (or, for the Riemann fit, `kernelLineFit`) rounds to f32. A
/// GPU fit computes these on the device, so that 16 floats per fit cross the bus.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitValues {
    /// Circle (φ, tip, curvature 1/R with its sign) and line (cotθ, zip).
    pub state: [f32; 5],
    /// The covariance terms kept: circle 00, 01, 02, 11, 12, 22; line 00, 01, 11.
    pub cov: [f32; 9],
    /// pT, GeV: from the f32 curvature (Broken Line) or in f64 (Riemann), as the reference.
    pub pt: f32,
    /// (χ²circle + χ²line) / (2·hits − 5).
    pub chi2: f32,
}

impl FitValues {
    /// Floats per fit in [`FitValues::to_array`]'s layout.
    pub const LEN: usize = 16;

    /// The values of fit `f` of `n_fit` hits.
    pub fn of(f: &BrokenLineFit, n_fit: usize, cfg: &FitConfig) -> Self {
        let b = cfg.b_field as f64;
        let (cp, cc, lp, lc) = (&f.circle.par, &f.circle.cov, &f.line.par, &f.line.cov);
        FitValues {
            state: [
                cp[0] as f32,
                cp[1] as f32,
                cp[2] as f32,
                lp[0] as f32,
                lp[1] as f32,
            ],
            cov: [
                cc[0][0], cc[0][1], cc[0][2], cc[1][1], cc[1][2], cc[2][2], lc[0][0], lc[0][1],
                lc[1][1],
            ]
            .map(|x| x as f32),
            pt: if cfg.use_riemann_fit {
                (b / cp[2].abs()) as f32
            } else {
                (b as f32) / (cp[2].abs() as f32)
            },
            chi2: ((f.circle.chi2 as f64 + f.line.chi2) / (2 * n_fit as i32 - 5) as f64) as f32,
        }
    }

    /// The 16 floats: state, covariance terms, pT, χ².
    ///
    /// ```
    /// use quiver_reco::tracks::fit::FitValues;
    /// let v = FitValues { state: [1.0, 2.0, 3.0, 4.0, 5.0], cov: [0.5; 9], pt: 6.0, chi2: 7.0 };
    /// assert_eq!(FitValues::from_slice(&v.to_array()), Some(v));
    /// assert_eq!(FitValues::from_slice(&[0.0; 15]), None);
    /// ```
    pub fn to_array(&self) -> [f32; Self::LEN] {
        let mut a = [0.0f32; Self::LEN];
        a[..5].copy_from_slice(&self.state);
        a[5..14].copy_from_slice(&self.cov);
        a[14] = self.pt;
        a[15] = self.chi2;
        a
    }

    /// The values from 16 floats in [`FitValues::to_array`]'s layout; `None` for another length.
    pub fn from_slice(v: &[f32]) -> Option<Self> {
        (v.len() == Self::LEN).then(|| FitValues {
            state: [v[0], v[1], v[2], v[3], v[4]],
            cov: [v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13]],
            pt: v[14],
            chi2: v[15],
        })
    }
}

/// Stores a fit's values into row `row` of `tracks`: the curvature terms scaled to q/pT by
/// the field (in f32, as the reference), η as the C library's `asinhf` of cotθ, the
/// state-derived columns.
pub fn store_values(tracks: &mut Tracks, row: usize, v: &FitValues, cfg: &FitConfig) {
    let s = StoredFit::of(v, cfg);
    tracks.state[row] = s.state;
    tracks.covariance[row] = s.cov;
    tracks.pt[row] = v.pt;
    tracks.eta[row] = s.eta;
    tracks.chi2[row] = v.chi2;
    (
        tracks.phi[row],
        tracks.tip[row],
        tracks.zip[row],
        tracks.charge[row],
    ) = (s.phi(), s.tip(), s.zip(), s.charge());
}

/// A track's stored values from its fit: what [`store_values`] writes besides the fit's pT
/// and χ² (φ, tip, zip and the charge are read from the state).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StoredFit {
    /// (φ, tip, q/pT, cotθ, zip): the curvature term scaled to q/pT by the field.
    pub state: [f32; 5],
    /// Upper triangle of the 5×5 covariance, row by row.
    pub cov: [f32; 15],
    /// η: the C library's `asinhf` of cotθ.
    pub eta: f32,
}

impl StoredFit {
    /// The stored values of fit `v` (in f32, as the reference).
    pub fn of(v: &FitValues, cfg: &FitConfig) -> Self {
        let bf = 1.0f32 / cfg.b_field;
        let mut st = v.state;
        st[2] *= bf;
        let c = &v.cov;
        let mut cov = [0.0f32; 15];
        cov[0] = c[0];
        cov[1] = c[1];
        cov[2] = bf * c[2];
        cov[5] = c[3];
        cov[6] = bf * c[4];
        cov[9] = bf * bf * c[5];
        cov[12] = c[6];
        cov[13] = c[7];
        cov[14] = c[8];
        StoredFit {
            state: st,
            cov,
            eta: c_asinhf(v.state[3]),
        }
    }
    /// φ at the point of closest approach (the state's first term).
    pub fn phi(&self) -> f32 {
        self.state[0]
    }
    /// The transverse impact parameter (the state's second term).
    pub fn tip(&self) -> f32 {
        self.state[1]
    }
    /// z at the point of closest approach (the state's last term).
    pub fn zip(&self) -> f32 {
        self.state[4]
    }
    /// The charge: the sign of q/pT (+1 for 0, as copysign does).
    pub fn charge(&self) -> i8 {
        if self.state[2].is_sign_negative() {
            -1
        } else {
            1
        }
    }
}

/// Stores a fit into row `job.row` of `tracks` as the reference's `kernelBLFit` (or, for
/// the Riemann fit, `kernelLineFit`, which divides in f64 for pT) does.
///
/// ```
/// use quiver_reco::tracks::fit::{store_fit, BrokenLineFit, CircleFit, FitConfig, FitJob, LineFit};
/// use quiver_reco::tracks::Tracks;
/// let f = BrokenLineFit {
///     fast: [0.0; 4],
///     circle: CircleFit { par: [0.5, 0.01, -0.02], cov: [[1e-6; 3]; 3], chi2: 1.0, q: -1 },
///     line: LineFit { par: [0.0, 1.0], cov: [[1e-6; 2]; 2], chi2: 2.0 },
/// };
/// let mut t = Tracks { state: vec![[0.0; 5]], covariance: vec![[0.0; 15]], pt: vec![0.0], eta: vec![0.0],
///     chi2: vec![0.0], phi: vec![0.0], tip: vec![0.0], zip: vec![0.0], charge: vec![0], ..Tracks::default() };
/// let cfg = FitConfig::default();
/// store_fit(&mut t, FitJob { row: 0, n_fit: 4 }, &f, &cfg);
/// assert_eq!((t.phi[0], t.zip[0], t.charge[0], t.chi2[0]), (0.5, 1.0, -1, 1.0));
/// assert!((t.pt[0] - cfg.b_field / 0.02).abs() < 1e-4);
/// ```
pub fn store_fit(tracks: &mut Tracks, job: FitJob, f: &BrokenLineFit, cfg: &FitConfig) {
    store_values(
        tracks,
        job.row as usize,
        &FitValues::of(f, job.n_fit as usize, cfg),
        cfg,
    );
}

/// Fits every tuple of [`fit_selection`] with the Broken Line (or the Riemann fit) into
/// `tracks` and returns the number of fits. `tracks` must have one row per tuple.
///
/// ```
/// use quiver_reco::tracks::{fit::*, ntuplets::Tuples, testing::*, Quality, Tracks};
/// let mut b = HitBuilder::new();
/// b.add_helix_barrel(&Helix { pt: 2.0, ..Helix::default() }, &[0, 1, 2, 3]);
/// let (cols, cpe) = (b.build(), HitBuilder::cpe_params());
/// let t = Tuples { offsets: vec![0, 4], hits: vec![0, 1, 2, 3], quality: vec![Quality::Bad], overflow: false };
/// let mut tracks = Tracks { state: vec![[0.0; 5]], covariance: vec![[0.0; 15]], pt: vec![0.0],
///     eta: vec![0.0], chi2: vec![0.0], phi: vec![0.0], tip: vec![0.0], zip: vec![0.0],
///     charge: vec![0], ..Tracks::default() };
/// assert_eq!(fit_tuples(&cols.view(&cpe), &t, &FitConfig::default(), &mut tracks).unwrap(), 1);
/// assert!((tracks.pt[0] - 2.0).abs() < 0.01);
/// ```
pub fn fit_tuples(
    hits: &HitsView,
    tuples: &Tuples,
    cfg: &FitConfig,
    tracks: &mut Tracks,
) -> Result<u32, TrackError> {
    cfg.validate()?;
    let jobs = fit_selection(tuples, cfg);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        unsafe { fit_jobs_avx2(hits, tuples, &jobs, cfg, tracks)? };
        return Ok(jobs.len() as u32);
    }
    fit_jobs(hits, tuples, &jobs, cfg, tracks)?;
    Ok(jobs.len() as u32)
}

/// [`fit_jobs`] compiled for AVX2: the fits are chains of dependent scalar f64 operations,
/// and the three-operand VEX forms spare the register copies of the baseline encoding. The
/// same IEEE operations in the same order (no FMA is enabled, and Rust never contracts a
/// multiply and an add), so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fit_jobs_avx2(
    hits: &HitsView,
    tuples: &Tuples,
    jobs: &[FitJob],
    cfg: &FitConfig,
    tracks: &mut Tracks,
) -> Result<(), TrackError> {
    fit_jobs(hits, tuples, jobs, cfg, tracks)
}

/// The fits of `jobs` into `tracks` (what a CPU without AVX2 runs).
#[inline(always)]
pub(crate) fn fit_jobs(
    hits: &HitsView,
    tuples: &Tuples,
    jobs: &[FitJob],
    cfg: &FitConfig,
    tracks: &mut Tracks,
) -> Result<(), TrackError> {
    let b = cfg.b_field as f64;
    let mut pos = [[0f64; 3]; 5];
    let mut ge = [[0f32; 6]; 5];
    for &job in jobs {
        let n_fit = job.n_fit as usize;
        for (k, &h) in tuples
            .hits_of(job.row as usize)
            .iter()
            .take(n_fit)
            .enumerate()
        {
            let h = h as usize;
            let det = hits.det_index[h] as usize;
            let frame = &hits
                .cpe
                .det
                .get(det)
                .ok_or(TrackError::MissingModule {
                    hit: h,
                    det: det as u16,
                    n_modules: hits.cpe.det.len(),
                })?
                .frame;
            ge[k] = hit_global_cov(frame, hits.xerr_local[h], hits.yerr_local[h]);
            pos[k] = [
                hits.x_global[h] as f64,
                hits.y_global[h] as f64,
                hits.z_global[h] as f64,
            ];
        }
        let f = if cfg.use_riemann_fit {
            super::riemann::riemann_fit(&pos[..n_fit], &ge[..n_fit], b)?
        } else {
            match n_fit {
                3 => fit_n::<3>(&pos, &ge, b),
                4 => fit_n::<4>(&pos, &ge, b),
                5 => fit_n::<5>(&pos, &ge, b),
                _ => broken_line_fit(&pos[..n_fit], &ge[..n_fit], b)?,
            }
        };
        store_fit(tracks, job, &f, cfg);
    }
    Ok(())
}
