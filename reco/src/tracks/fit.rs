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

use super::broken_line::{self, Fit};
use super::lanes::{F64x4, Real};

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
    broken_line::mult_scatt(length, b, r, slope)
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
    broken_line::fast_fit(hits)
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
        return Err(bad_hit_count(n, ge.len()));
    }
    // One instance per hit count: with n a constant the loops unroll and the Cholesky
    // branches fold (the same operations in the same order, so the same bits).
    Ok(match n {
        3 => fit_n::<3>(hits, ge, b),
        4 => fit_n::<4>(hits, ge, b),
        _ => fit_n::<5>(hits, ge, b),
    })
}

fn bad_hit_count(n: usize, n_cov: usize) -> TrackError {
    TrackError::Config(format!(
        "broken_line_fit needs 3..=5 hits with one covariance each, got {n} hits and {n_cov} covariances"
    ))
}

/// The fit of `N` hits (the first `N` of `hits` and `ge`) as [`broken_line_fit`] returns it.
#[inline(always)]
fn fit_n<const N: usize>(hits: &[[f64; 3]], ge: &[[f32; 6]], b: f64) -> BrokenLineFit {
    let pos: &[[f64; 3]; N] = hits[..N].try_into().expect("N hits");
    let ge: [[f64; 6]; N] = std::array::from_fn(|i| ge[i].map(|x| x as f64));
    results(&broken_line::fit_n(pos, &ge, b), 0)
}

/// The results of the fit in lane `l` of `f`.
#[inline(always)]
fn results<T: Real>(f: &Fit<T>, l: usize) -> BrokenLineFit {
    let x = |v: T| v.lane(l);
    let (c, line) = (&f.circle, &f.line);
    BrokenLineFit {
        fast: f.fast.map(&x),
        circle: CircleFit {
            par: c.par.map(&x),
            cov: c.cov.map(|r| r.map(&x)),
            chi2: x(c.chi2) as f32,
            q: if x(c.q) > 0.0 { 1 } else { -1 },
        },
        line: LineFit {
            par: line.par.map(&x),
            cov: line.cov.map(|r| r.map(&x)),
            chi2: x(line.chi2),
        },
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

/// The fits of `jobs` four at a time, compiled for AVX2: [`fit_jobs_lanes`]' four
/// independent fits per vector. No FMA is enabled (and Rust never contracts a multiply and
/// an add), so each lane is the scalar fit's IEEE operations in its order: the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fit_jobs_avx2(
    hits: &HitsView,
    tuples: &Tuples,
    jobs: &[FitJob],
    cfg: &FitConfig,
    tracks: &mut Tracks,
) -> Result<(), TrackError> {
    if cfg.use_riemann_fit {
        return fit_jobs(hits, tuples, jobs, cfg, tracks);
    }
    fit_jobs_lanes(hits, tuples, jobs, cfg, tracks)
}

/// The positions and global covariances of the first `job.n_fit` hits of a job.
#[inline(always)]
fn job_hits(
    hits: &HitsView,
    tuples: &Tuples,
    job: FitJob,
    pos: &mut [[f64; 3]; 5],
    ge: &mut [[f32; 6]; 5],
) -> Result<(), TrackError> {
    let n_fit = job.n_fit as usize;
    for (k, &h) in tuples
        .hits_of(job.row as usize)
        .iter()
        .take(n_fit.min(5))
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
    Ok(())
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
        job_hits(hits, tuples, job, &mut pos, &mut ge)?;
        let f = if cfg.use_riemann_fit {
            super::riemann::riemann_fit(&pos[..n_fit], &ge[..n_fit], b)?
        } else {
            match n_fit {
                3 => fit_n::<3>(&pos, &ge, b),
                4 => fit_n::<4>(&pos, &ge, b),
                5 => fit_n::<5>(&pos, &ge, b),
                _ => return Err(bad_hit_count(n_fit, n_fit)),
            }
        };
        store_fit(tracks, job, &f, cfg);
    }
    Ok(())
}

/// The Broken Line fits of `jobs` into `tracks`, four jobs of one hit count at a time in
/// [`F64x4`] lanes (a last group of fewer repeats its last job in the spare lanes). On an
/// error it returns the one [`fit_jobs`] returns: that of the first failing job.
#[inline(always)]
pub(crate) fn fit_jobs_lanes(
    hits: &HitsView,
    tuples: &Tuples,
    jobs: &[FitJob],
    cfg: &FitConfig,
    tracks: &mut Tracks,
) -> Result<(), TrackError> {
    let Err(e) = fit_groups(hits, tuples, jobs, cfg, tracks) else {
        return Ok(());
    };
    // The checks of `fit_jobs`, in its order: a job's hits, then its hit count.
    let (mut pos, mut ge) = ([[0f64; 3]; 5], [[0f32; 6]; 5]);
    for &job in jobs {
        job_hits(hits, tuples, job, &mut pos, &mut ge)?;
        let n = job.n_fit as usize;
        if !(3..=5).contains(&n) {
            return Err(bad_hit_count(n, n));
        }
    }
    Err(e)
}

/// [`fit_jobs_lanes`]' groups: the jobs of each hit count (3, 4, 5: what [`fit_selection`]
/// takes) gathered four at a time. (Functions, not closures: a closure would not be
/// compiled for the AVX2 caller.)
#[inline(always)]
fn fit_groups(
    hits: &HitsView,
    tuples: &Tuples,
    jobs: &[FitJob],
    cfg: &FitConfig,
    tracks: &mut Tracks,
) -> Result<(), TrackError> {
    let mut pending = [[FitJob { row: 0, n_fit: 0 }; 4]; 3];
    let mut count = [0usize; 3];
    for &job in jobs {
        let n = job.n_fit as usize;
        if !(3..=5).contains(&n) {
            return Err(bad_hit_count(n, n));
        }
        pending[n - 3][count[n - 3]] = job;
        count[n - 3] += 1;
        if count[n - 3] == 4 {
            fit_group(hits, tuples, &pending[n - 3], cfg, tracks)?;
            count[n - 3] = 0;
        }
    }
    for (g, &k) in pending.iter().zip(&count) {
        if k > 0 {
            fit_group(hits, tuples, &g[..k], cfg, tracks)?;
        }
    }
    Ok(())
}

#[inline(always)]
fn fit_group(
    hits: &HitsView,
    tuples: &Tuples,
    group: &[FitJob],
    cfg: &FitConfig,
    tracks: &mut Tracks,
) -> Result<(), TrackError> {
    match group[0].n_fit {
        3 => fit_lanes::<3>(hits, tuples, group, cfg, tracks),
        4 => fit_lanes::<4>(hits, tuples, group, cfg, tracks),
        _ => fit_lanes::<5>(hits, tuples, group, cfg, tracks),
    }
}

/// Fits 1 to 4 jobs of `N` hits side by side and stores them.
#[inline(always)]
fn fit_lanes<const N: usize>(
    hits: &HitsView,
    tuples: &Tuples,
    group: &[FitJob],
    cfg: &FitConfig,
    tracks: &mut Tracks,
) -> Result<(), TrackError> {
    let mut pos = [[F64x4::splat(0.0); 3]; N];
    let mut ge = [[F64x4::splat(0.0); 6]; N];
    let (mut p, mut g) = ([[0f64; 3]; 5], [[0f32; 6]; 5]);
    for l in 0..4 {
        job_hits(hits, tuples, group[l.min(group.len() - 1)], &mut p, &mut g)?;
        for k in 0..N {
            for d in 0..3 {
                pos[k][d].0[l] = p[k][d];
            }
            for d in 0..6 {
                ge[k][d].0[l] = g[k][d] as f64;
            }
        }
    }
    let f = broken_line::fit_n(&pos, &ge, F64x4::splat(cfg.b_field as f64));
    for (l, &job) in group.iter().enumerate() {
        store_fit(tracks, job, &results(&f, l), cfg);
    }
    Ok(())
}
