//! CUDA C source of the Broken Line fit (`track_fit`), compiled by NVRTC with the other
//! kernel modules (same prelude, `--fmad=false`, IEEE division and square root).
//!
//! One thread per fit job (a tuple the CPU fit takes, [`quiver_reco::tracks::fit_jobs`]):
//! it gathers its 3 to 5 hits from the hits' device columns, rotates their covariances with
//! the module frames (f32, as the CPU), and runs the CPU's `broken_line_fit`
//! (`quiver_reco::tracks::fit`) operation by operation: the same quantities in the same
//! order, the sums of the small matrix products grouped as the CPU groups them (Eigen's
//! order), the unrolled Cholesky inversion, no contraction into fused multiply-adds. It
//! writes the fit's raw results ([`FIT_OUT`] doubles per job); the host stores them into
//! the tracks with the CPU's own `store_fit` (so η's `asinhf` is the C library's).
//!
//! The transcendental functions (`log` in the multiple scattering, `atan2`, `sin`, `cos`)
//! are the device's (CUDA's libdevice, at most 1–2 ulp from the correctly rounded value),
//! not the C library's: run on the host (the emulation tests, compiled against the C
//! library) the kernel equals the CPU step bit for bit; on a GPU its doubles can differ in
//! the last bits, which the f32 products almost always round away (see docs/decisions.md).

/// Doubles the fit kernel writes per job: circle (φ, d, κ), its covariance (00, 01, 02,
/// 11, 12, 22), line (cotθ, zip), its covariance (00, 01, 11), the line χ², the circle χ²
/// (an f32 widened).
pub const FIT_OUT: usize = 16;

/// Hit slots per job in the job table (unused slots of shorter jobs are never read).
pub const FIT_HITS: usize = 5;

/// Floats per module in the frame table: the first six elements of the rotation (xx, xy,
/// xz, yx, yy, yz), all the covariance rotation reads.
pub const FRAME_FLOATS: usize = 6;

/// The frame table of the fit kernel from the CPE parameters' module frames.
///
/// ```
/// use quiver_gpu::kernels_fit::{frame_table, FRAME_FLOATS};
/// let cpe = quiver_reco::tracks::testing::HitBuilder::cpe_params();
/// let t = frame_table(&cpe);
/// assert_eq!(t.len(), cpe.det.len() * FRAME_FLOATS);
/// assert_eq!(&t[..FRAME_FLOATS], &cpe.det[0].frame.r[..FRAME_FLOATS]);
/// ```
pub fn frame_table(cpe: &quiver_formats::conditions::CpeParams) -> Vec<f32> {
    cpe.det.iter().flat_map(|d| d.frame.r[..FRAME_FLOATS].iter().copied()).collect()
}

/// The Broken Line fit kernel module.
pub const TRACK_FIT: &str = r#"
#define TF_MX 6
#define TF_OUT 16
#define TF_HITS 5

__device__ __forceinline__ double tf_sqr(double x) { return x * x; }

/// Rotation mapping the line y = slope·x onto y = 0, row-major 2×2.
__device__ void tf_rotation(double slope, double* r) {
    double r00 = 1.0 / sqrt(1.0 + tf_sqr(slope));
    double r01 = slope * r00;
    r[0] = r00; r[1] = r01; r[2] = -r01; r[3] = r00;
}

__device__ double tf_mult_scatt(double length, double b, double r, double slope) {
    double pt2 = fmin(b * r, 20.0);
    pt2 *= pt2;
    const double XXI_0 = 0.06 / 16.0;
    const double FACT = 0.7 * ((13.6 / 1000.0) * (13.6 / 1000.0));
    return FACT / (pt2 * (1.0 + tf_sqr(slope))) * (fabs(length) * XXI_0) * tf_sqr(1.0 + 0.038 * log(fabs(length) * XXI_0));
}

/// o (R×C) = a (R×K) · b (K×C), row-major; the terms of each sum grouped as the CPU does
/// (K = 3: t0 + (t1 + t2); K = 2: t0 + t1). o must not alias a or b.
__device__ void tf_mul(const double* a, const double* b, double* o, int R, int K, int C) {
    for (int i = 0; i < R; ++i) {
        for (int j = 0; j < C; ++j) {
            if (K == 3) {
                double t0 = a[i * 3 + 0] * b[0 * C + j], t1 = a[i * 3 + 1] * b[1 * C + j], t2 = a[i * 3 + 2] * b[2 * C + j];
                o[i * C + j] = t0 + (t1 + t2);
            } else {
                double t0 = a[i * 2 + 0] * b[0 * C + j], t1 = a[i * 2 + 1] * b[1 * C + j];
                o[i * C + j] = t0 + t1;
            }
        }
    }
}

__device__ void tf_transpose(const double* a, double* o, int R, int C) {
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) o[j * R + i] = a[i * C + j];
}

/// c = J·c·Jᵀ for N = 2 or 3 (row-major N×N).
__device__ void tf_sandwich(const double* j, double* c, int N) {
    double jc[9], jt[9];
    tf_mul(j, c, jc, N, N, N);
    tf_transpose(j, jt, N, N);
    tf_mul(jc, jt, c, N, N, N);
}

/// Inverse of a symmetric positive-definite n×n matrix (n = 3..6), the CPU's unrolled
/// Cholesky formulas: reads the lower triangle of src, writes a symmetric d (6×6 storage).
__device__ void tf_cholesky_invert(const double* src, double* d, int n) {
#define S(i, j) src[(i) * TF_MX + (j)]
#define D(i, j) d[(i) * TF_MX + (j)]
    for (int k = 0; k < TF_MX * TF_MX; ++k) d[k] = 0.0;
        double luc0 = 1.0 / S(0, 0);
        double luc1 = S(1, 0);
        double luc2 = S(1, 1) - luc0 * luc1 * luc1;
        luc2 = 1.0 / luc2;
        double luc3 = S(2, 0);
        double luc4 = S(2, 1) - luc0 * luc1 * luc3;
        if (n == 3) {
            double luc5 = S(2, 2) - (luc0 * luc3 * luc3 + (luc2 * luc4) * luc4);
            luc5 = 1.0 / luc5;
            double li21 = -luc0 * luc1;
            double li32 = -(luc2 * luc4);
            double li31 = (luc1 * (luc2 * luc4) - luc3) * luc0;
            D(0, 0) = luc5 * li31 * li31 + li21 * li21 * luc2 + luc0;
            D(1, 0) = luc5 * li31 * li32 + li21 * luc2;
            D(1, 1) = luc5 * li32 * li32 + luc2;
            D(2, 0) = luc5 * li31;
            D(2, 1) = luc5 * li32;
            D(2, 2) = luc5;
        } else {
            double luc5 = S(2, 2) - (luc0 * luc3 * luc3 + luc2 * luc4 * luc4);
            luc5 = 1.0 / luc5;
            double luc6 = S(3, 0);
            double luc7 = S(3, 1) - luc0 * luc1 * luc6;
            double luc8 = S(3, 2) - luc0 * luc3 * luc6 - luc2 * luc4 * luc7;
            double luc9 = S(3, 3) - (luc0 * luc6 * luc6 + luc2 * luc7 * luc7 + luc8 * (luc8 * luc5));
            luc9 = 1.0 / luc9;
            double li21 = -luc1 * luc0;
            double li32 = -luc2 * luc4;
            double li31 = (luc1 * (luc2 * luc4) - luc3) * luc0;
            double li43 = -(luc8 * luc5);
            double li42 = (luc4 * luc8 * luc5 - luc7) * luc2;
            double li41 = (-luc1 * (luc2 * luc4) * (luc8 * luc5) + luc1 * (luc2 * luc7) + luc3 * (luc8 * luc5) - luc6) * luc0;
            if (n == 4) {
                D(0, 0) = luc9 * li41 * li41 + luc5 * li31 * li31 + luc2 * li21 * li21 + luc0;
                D(1, 0) = luc9 * li41 * li42 + luc5 * li31 * li32 + luc2 * li21;
                D(1, 1) = luc9 * li42 * li42 + luc5 * li32 * li32 + luc2;
                D(2, 0) = luc9 * li41 * li43 + luc5 * li31;
                D(2, 1) = luc9 * li42 * li43 + luc5 * li32;
                D(2, 2) = luc9 * li43 * li43 + luc5;
                D(3, 0) = luc9 * li41;
                D(3, 1) = luc9 * li42;
                D(3, 2) = luc9 * li43;
                D(3, 3) = luc9;
            } else {
                double luc10 = S(4, 0);
                double luc11 = S(4, 1) - luc0 * luc1 * luc10;
                double luc12 = S(4, 2) - luc0 * luc3 * luc10 - luc2 * luc4 * luc11;
                double luc13 = S(4, 3) - luc0 * luc6 * luc10 - luc2 * luc7 * luc11 - luc5 * luc8 * luc12;
                double luc14 =
                    S(4, 4) - (luc0 * luc10 * luc10 + luc2 * luc11 * luc11 + luc5 * luc12 * luc12 + luc9 * luc13 * luc13);
                luc14 = 1.0 / luc14;
                double li54 = -luc13 * luc9;
                double li53 = (luc13 * luc8 * luc9 - luc12) * luc5;
                double li52 = (-luc4 * luc8 * luc13 * luc5 * luc9 + luc4 * luc12 * luc5 + luc7 * luc13 * luc9 - luc11) * luc2;
                double li51 = (luc1 * luc4 * luc8 * luc13 * luc2 * luc5 * luc9
                    - luc13 * luc8 * luc3 * luc9 * luc5
                    - luc12 * luc4 * luc1 * luc2 * luc5
                    - luc13 * luc7 * luc1 * luc9 * luc2
                    + luc11 * luc1 * luc2
                    + luc12 * luc3 * luc5
                    + luc13 * luc6 * luc9
                    - luc10)
                    * luc0;
                if (n == 5) {
                    D(0, 0) = luc14 * li51 * li51 + luc9 * li41 * li41 + luc5 * li31 * li31 + luc2 * li21 * li21 + luc0;
                    D(1, 0) = luc14 * li51 * li52 + luc9 * li41 * li42 + luc5 * li31 * li32 + luc2 * li21;
                    D(1, 1) = luc14 * li52 * li52 + luc9 * li42 * li42 + luc5 * li32 * li32 + luc2;
                    D(2, 0) = luc14 * li51 * li53 + luc9 * li41 * li43 + luc5 * li31;
                    D(2, 1) = luc14 * li52 * li53 + luc9 * li42 * li43 + luc5 * li32;
                    D(2, 2) = luc14 * li53 * li53 + luc9 * li43 * li43 + luc5;
                    D(3, 0) = luc14 * li51 * li54 + luc9 * li41;
                    D(3, 1) = luc14 * li52 * li54 + luc9 * li42;
                    D(3, 2) = luc14 * li53 * li54 + luc9 * li43;
                    D(3, 3) = luc14 * li54 * li54 + luc9;
                    D(4, 0) = luc14 * li51;
                    D(4, 1) = luc14 * li52;
                    D(4, 2) = luc14 * li53;
                    D(4, 3) = luc14 * li54;
                    D(4, 4) = luc14;
                } else {
                    double luc15 = S(5, 0);
                    double luc16 = S(5, 1) - luc0 * luc1 * luc15;
                    double luc17 = S(5, 2) - luc0 * luc3 * luc15 - luc2 * luc4 * luc16;
                    double luc18 = S(5, 3) - luc0 * luc6 * luc15 - luc2 * luc7 * luc16 - luc5 * luc8 * luc17;
                    double luc19 =
                        S(5, 4) - luc0 * luc10 * luc15 - luc2 * luc11 * luc16 - luc5 * luc12 * luc17 - luc9 * luc13 * luc18;
                    double luc20 = S(5, 5)
                        - (luc0 * luc15 * luc15
                            + luc2 * luc16 * luc16
                            + luc5 * luc17 * luc17
                            + luc9 * luc18 * luc18
                            + luc14 * luc19 * luc19);
                    luc20 = 1.0 / luc20;
                    double li65 = -luc19 * luc14;
                    double li64 = (luc19 * luc14 * luc13 - luc18) * luc9;
                    double li63 =
                        (-luc8 * luc13 * (luc19 * luc14) * luc9 + luc8 * luc9 * luc18 + luc12 * (luc19 * luc14) - luc17) * luc5;
                    double li62 = (luc4 * (luc8 * luc9) * luc13 * luc5 * (luc19 * luc14)
                        - luc18 * luc4 * (luc8 * luc9) * luc5
                        - luc19 * luc12 * luc4 * luc14 * luc5
                        - luc19 * luc13 * luc7 * luc14 * luc9
                        + luc17 * luc4 * luc5
                        + luc18 * luc7 * luc9
                        + luc19 * luc11 * luc14
                        - luc16)
                        * luc2;
                    double li61 = (-luc19 * luc13 * luc8 * luc4 * luc1 * luc2 * luc5 * luc9 * luc14
                        + luc18 * luc8 * luc4 * luc1 * luc2 * luc5 * luc9
                        + luc19 * luc12 * luc4 * luc1 * luc2 * luc5 * luc14
                        + luc19 * luc13 * luc7 * luc1 * luc2 * luc9 * luc14
                        + luc19 * luc13 * luc8 * luc3 * luc5 * luc9 * luc14
                        - luc17 * luc4 * luc1 * luc2 * luc5
                        - luc18 * luc7 * luc1 * luc2 * luc9
                        - luc19 * luc11 * luc1 * luc2 * luc14
                        - luc18 * luc8 * luc3 * luc5 * luc9
                        - luc19 * luc12 * luc3 * luc5 * luc14
                        - luc19 * luc13 * luc6 * luc9 * luc14
                        + luc16 * luc1 * luc2
                        + luc17 * luc3 * luc5
                        + luc18 * luc6 * luc9
                        + luc19 * luc10 * luc14
                        - luc15)
                        * luc0;
                    D(0, 0) = luc20 * li61 * li61
                        + luc14 * li51 * li51
                        + luc9 * li41 * li41
                        + luc5 * li31 * li31
                        + luc2 * li21 * li21
                        + luc0;
                    D(1, 0) = luc20 * li61 * li62 + luc14 * li51 * li52 + luc9 * li41 * li42 + luc5 * li31 * li32 + luc2 * li21;
                    D(1, 1) = luc20 * li62 * li62 + luc14 * li52 * li52 + luc9 * li42 * li42 + luc5 * li32 * li32 + luc2;
                    D(2, 0) = luc20 * li61 * li63 + luc14 * li51 * li53 + luc9 * li41 * li43 + luc5 * li31;
                    D(2, 1) = luc20 * li62 * li63 + luc14 * li52 * li53 + luc9 * li42 * li43 + luc5 * li32;
                    D(2, 2) = luc20 * li63 * li63 + luc14 * li53 * li53 + luc9 * li43 * li43 + luc5;
                    D(3, 0) = luc20 * li61 * li64 + luc14 * li51 * li54 + luc9 * li41;
                    D(3, 1) = luc20 * li62 * li64 + luc14 * li52 * li54 + luc9 * li42;
                    D(3, 2) = luc20 * li63 * li64 + luc14 * li53 * li54 + luc9 * li43;
                    D(3, 3) = luc20 * li64 * li64 + luc14 * li54 * li54 + luc9;
                    D(4, 0) = luc20 * li61 * li65 + luc14 * li51;
                    D(4, 1) = luc20 * li62 * li65 + luc14 * li52;
                    D(4, 2) = luc20 * li63 * li65 + luc14 * li53;
                    D(4, 3) = luc20 * li64 * li65 + luc14 * li54;
                    D(4, 4) = luc20 * li65 * li65 + luc14;
                    D(5, 0) = luc20 * li61;
                    D(5, 1) = luc20 * li62;
                    D(5, 2) = luc20 * li63;
                    D(5, 3) = luc20 * li64;
                    D(5, 4) = luc20 * li65;
                    D(5, 5) = luc20;
                }
            }
        }
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < i; ++j) D(j, i) = D(i, j);
#undef S
#undef D
}

__device__ void tf_mat_vec(const double* m, const double* v, double* o, int n) {
    for (int i = 0; i < TF_MX; ++i) o[i] = 0.0;
    for (int i = 0; i < n; ++i) {
        double s = m[i * TF_MX + 0] * v[0];
        for (int k = 1; k < n; ++k) s += m[i * TF_MX + k] * v[k];
        o[i] = s;
    }
}

__device__ void tf_fast_fit(const double (*h)[3], int n, double* ff) {
    int m = n / 2;
    double ax = h[m][0] - h[0][0], ay = h[m][1] - h[0][1];
    double bx = h[n - 1][0] - h[m][0], by = h[n - 1][1] - h[m][1];
    double cx = h[0][0] - h[n - 1][0], cy = h[0][1] - h[n - 1][1];
    double a2 = ax * ax + ay * ay, b2 = bx * bx + by * by, c2 = cx * cx + cy * cy;
    double tmp = 0.5 / (cx * ay - cy * ax);
    double r0 = h[0][0] - (ay * c2 + cy * a2) * tmp;
    double r1 = h[0][1] + (ax * c2 + cx * a2) * tmp;
    double r2 = sqrt(a2 * b2 * c2) / (2.0 * fabs(bx * ay - by * ax));
    double dx = h[0][0] - r0, dy = h[0][1] - r1;
    double ex = h[n - 1][0] - r0, ey = h[n - 1][1] - r1;
    double r3 = r2 * atan2(dx * ey - dy * ex, dx * ex + dy * ey) / (h[n - 1][2] - h[0][2]);
    ff[0] = r0; ff[1] = r1; ff[2] = r2; ff[3] = r3;
}

struct TfPrepared {
    int q;
    double radii[TF_MX][2];
    double s[TF_MX];
    double big_s[TF_MX];
    double big_z[TF_MX];
    double var_beta[TF_MX];
};

__device__ void tf_prepare(const double (*h)[3], int n, const double* ff, double b, TfPrepared* p) {
    double dx = h[1][0] - h[0][0], dy = h[1][1] - h[0][1];
    double ex = h[n - 1][0] - h[n - 2][0], ey = h[n - 1][1] - h[n - 2][1];
    p->q = (dx * ey - dy * ex) > 0.0 ? -1 : 1;
    double slope = (double)(-p->q) / ff[3];
    double rot[4];
    tf_rotation(slope, rot);
    for (int i = 0; i < TF_MX; ++i) { p->radii[i][0] = 0.0; p->radii[i][1] = 0.0; p->s[i] = 0.0; p->big_s[i] = 0.0; p->big_z[i] = 0.0; p->var_beta[i] = 0.0; }
    for (int i = 0; i < n; ++i) { p->radii[i][0] = h[i][0] - ff[0]; p->radii[i][1] = h[i][1] - ff[1]; }
    double norm = sqrt(ff[0] * ff[0] + ff[1] * ff[1]);
    double e0 = -ff[2] * ff[0] / norm, e1 = -ff[2] * ff[1] / norm;
    for (int i = 0; i < n; ++i) {
        double d0 = p->radii[i][0], d1 = p->radii[i][1];
        p->s[i] = (double)p->q * ff[2] * atan2(d0 * e1 - d1 * e0, d0 * e0 + d1 * e1);
    }
    for (int i = 0; i < n; ++i) {
        double s = p->s[i], z = h[i][2];
        p->big_s[i] = rot[0] * s + rot[1] * z;
        p->big_z[i] = rot[2] * s + rot[3] * z;
    }
    for (int i = 1; i < n - 1; ++i)
        p->var_beta[i] = tf_mult_scatt(p->big_s[i + 1] - p->big_s[i], b, ff[2], slope)
            + tf_mult_scatt(p->big_s[i] - p->big_s[i - 1], b, ff[2], slope);
}

/// The n×n band matrix of the Broken Line cost in the offsets u (6×6 storage).
__device__ void tf_matrix_c_u(const double* w, const double* s, const double* vb, int n, double* o) {
    double c[TF_MX][TF_MX];
    for (int i = 0; i < TF_MX; ++i)
        for (int j = 0; j < TF_MX; ++j) c[i][j] = 0.0;
    for (int i = 0; i < n; ++i) {
        c[i][i] = w[i];
        if (i > 1) c[i][i] += 1.0 / (vb[i - 1] * tf_sqr(s[i] - s[i - 1]));
        if (i > 0 && i < n - 1)
            c[i][i] += (1.0 / vb[i]) * tf_sqr((s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1])));
        if (i + 2 < n) c[i][i] += 1.0 / (vb[i + 1] * tf_sqr(s[i + 1] - s[i]));
        if (i > 0 && i < n - 1)
            c[i][i + 1] = 1.0 / (vb[i] * (s[i + 1] - s[i])) * (-(s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1])));
        if (i + 2 < n) {
            c[i][i + 1] += 1.0 / (vb[i + 1] * (s[i + 1] - s[i])) * (-(s[i + 2] - s[i]) / ((s[i + 2] - s[i + 1]) * (s[i + 1] - s[i])));
            c[i][i + 2] = 1.0 / (vb[i + 1] * (s[i + 2] - s[i + 1]) * (s[i + 1] - s[i]));
        }
        c[i][i] *= 0.5;
    }
    for (int i = 0; i < TF_MX; ++i)
        for (int j = 0; j < TF_MX; ++j) o[i * TF_MX + j] = (i < n && j < n) ? c[i][j] + c[j][i] : 0.0;
}

__device__ void tf_translate_karimaki(double* par, double* cov, double x0, double y0) {
    double p0 = par[0], p1 = par[1], p2 = par[2];
    double c0 = cos(p0), s0 = sin(p0);
    double dp = x0 * c0 + y0 * s0;
    double do_ = x0 * s0 - y0 * c0 + p1;
    double uu = 1.0 + p2 * p1;
    double cc = -p2 * y0 + uu * c0;
    double bb = p2 * x0 + uu * s0;
    double a = 2.0 * do_ + p2 * (tf_sqr(do_) + tf_sqr(dp));
    double u = sqrt(1.0 + p2 * a);
    double xi = 1.0 / (tf_sqr(bb) + tf_sqr(cc));
    double v = 1.0 + p2 * do_;
    double lambda = (0.5 * a) / (u * tf_sqr(1.0 + u));
    double mu = 1.0 / (u * (1.0 + u)) + p2 * lambda;
    double zeta = tf_sqr(do_) + tf_sqr(dp);
    double j[9] = {
        xi * uu * v, -xi * tf_sqr(p2) * dp, xi * dp,
        2.0 * mu * uu * dp, 2.0 * mu * v, mu * zeta - lambda * a,
        0.0, 0.0, 1.0,
    };
    par[0] = atan2(bb, cc);
    par[1] = a / (1.0 + u);
    tf_sandwich(j, cov, 3);
}

/// Line fit: writes par[2], cov[4] (row-major 2×2) and returns the χ².
__device__ double tf_line_fit(const float (*ge)[6], int n, const double* ff, double b, const TfPrepared* p, double* par, double* cov) {
    double slope = (double)(-p->q) / ff[3];
    double rot[4], rot_t[4];
    tf_rotation(slope, rot);
    tf_transpose(rot, rot_t, 2, 2);
    double w[TF_MX] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int i = 0; i < n; ++i) {
        double g[6];
        for (int k = 0; k < 6; ++k) g[k] = (double)ge[i][k];
        double v[9] = {g[0], g[1], g[3], g[1], g[2], g[4], g[3], g[4], g[5]};
        double r0 = p->radii[i][0], r1 = p->radii[i][1];
        double tmp = 1.0 / sqrt(r0 * r0 + r1 * r1);
        double jac[6] = {r1 * tmp, -r0 * tmp, 0.0, 0.0, 0.0, 1.0};
        double jac_t[6], m1[6], m2[6], m3[4], m4[4];
        tf_transpose(jac, jac_t, 2, 3);
        tf_mul(rot, jac, m1, 2, 2, 3);
        tf_mul(m1, v, m2, 2, 3, 3);
        tf_mul(m2, jac_t, m3, 2, 3, 2);
        tf_mul(m3, rot_t, m4, 2, 2, 2);
        w[i] = 1.0 / m4[3];
    }
    double r_u[TF_MX] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int i = 0; i < n; ++i) r_u[i] = w[i] * p->big_z[i];
    const double* s = p->big_s;
    double cu[TF_MX * TF_MX], inv[TF_MX * TF_MX], u[TF_MX];
    tf_matrix_c_u(w, s, p->var_beta, n, cu);
    tf_cholesky_invert(cu, inv, n);
    tf_mat_vec(inv, r_u, u, n);

    par[0] = (u[1] - u[0]) / (s[1] - s[0]);
    par[1] = u[0];
    double idiff = 1.0 / (s[1] - s[0]);
    double c01 = (inv[0 * TF_MX + 1] - inv[0]) * idiff;
    cov[0] = (inv[0] - 2.0 * inv[0 * TF_MX + 1] + inv[1 * TF_MX + 1]) * tf_sqr(idiff) + tf_mult_scatt(s[1] - s[0], b, ff[2], slope);
    cov[1] = c01;
    cov[2] = c01;
    cov[3] = inv[0];
    double j1[4] = {1.0, 0.0, -s[0], 1.0};
    par[1] += -par[0] * s[0];
    tf_sandwich(j1, cov, 2);
    double tmp = rot[0] - par[0] * rot[1];
    double j11 = 1.0 / tmp;
    double j00 = j11 * j11;
    double j10 = par[1] * rot[1] * j00;
    double j2[4] = {j00, 0.0, j10, j11};
    par[1] *= j11;
    par[0] = (rot[1] + par[0] * rot[0]) * j11;
    tf_sandwich(j2, cov, 2);

    const double* zz = p->big_z;
    const double* vb = p->var_beta;
    double chi2 = 0.0;
    for (int i = 0; i < n; ++i) {
        chi2 += w[i] * tf_sqr(zz[i] - u[i]);
        if (i > 0 && i < n - 1)
            chi2 += tf_sqr(u[i - 1] / (s[i] - s[i - 1]) - u[i] * (s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1]))
                + u[i + 1] / (s[i + 1] - s[i]))
                / vb[i];
    }
    return chi2;
}

/// Circle fit: writes par[3], cov[9] (row-major 3×3) and returns the χ² (accumulated in
/// f32, as the CPU). Rescales p's kink variances and overwrites its Z.
__device__ float tf_circle_fit(const double (*h)[3], const float (*ge)[6], int n, const double* ff, double b, TfPrepared* p, double* par, double* cov) {
    int q = p->q;
    double slope = (double)(-q) / ff[3];
    double k = 1.0 + tf_sqr(slope);
    for (int i = 0; i < n; ++i) p->var_beta[i] *= k;
    for (int i = 0; i < n; ++i) {
        double r0 = p->radii[i][0], r1 = p->radii[i][1];
        p->big_z[i] = sqrt(r0 * r0 + r1 * r1) - ff[2];
    }
    double w[TF_MX] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int i = 0; i < n; ++i) {
        double v[4] = {(double)ge[i][0], (double)ge[i][1], (double)ge[i][1], (double)ge[i][2]};
        double rr[4], rr_t[4], m1[4], m2[4];
        tf_rotation(-p->radii[i][0] / p->radii[i][1], rr);
        tf_transpose(rr, rr_t, 2, 2);
        tf_mul(rr, v, m1, 2, 2, 2);
        tf_mul(m1, rr_t, m2, 2, 2, 2);
        w[i] = 1.0 / m2[3];
    }
    double r_u[TF_MX] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int i = 0; i < n; ++i) r_u[i] = w[i] * p->big_z[i];
    const double* s = p->s;
    const double* vb = p->var_beta;
    double cu[TF_MX * TF_MX], inv[TF_MX * TF_MX], u[TF_MX];
    tf_matrix_c_u(w, s, vb, n, cu);
#define CU(i, j) cu[(i) * TF_MX + (j)]
    CU(n, n) = 0.0;
    for (int i = 0; i < n; ++i) {
        CU(i, n) = 0.0;
        if (i > 0 && i < n - 1)
            CU(i, n) += -(s[i + 1] - s[i - 1]) * (s[i + 1] - s[i - 1]) / (2.0 * vb[i] * (s[i + 1] - s[i]) * (s[i] - s[i - 1]));
        if (i > 1) CU(i, n) += (s[i] - s[i - 2]) / (2.0 * vb[i - 1] * (s[i] - s[i - 1]));
        if (i + 2 < n) CU(i, n) += (s[i + 2] - s[i]) / (2.0 * vb[i + 1] * (s[i + 1] - s[i]));
        CU(n, i) = CU(i, n);
        if (i > 0 && i < n - 1) CU(n, n) += tf_sqr(s[i + 1] - s[i - 1]) / (4.0 * vb[i]);
    }
#undef CU
    tf_cholesky_invert(cu, inv, n + 1);
    tf_mat_vec(inv, r_u, u, n + 1);

    double radii[2][2];
    for (int i = 0; i < 2; ++i) {
        double r0 = p->radii[i][0], r1 = p->radii[i][1];
        double norm = sqrt(r0 * r0 + r1 * r1);
        radii[i][0] = r0 / norm;
        radii[i][1] = r1 / norm;
    }
    const double* zz = p->big_z;
    double f0 = -zz[0] + u[0];
    double f1 = -zz[1] + u[1];
    double d0 = h[0][0] + f0 * radii[0][0], d1 = h[0][1] + f0 * radii[0][1];
    double e0 = h[1][0] + f1 * radii[1][0], e1 = h[1][1] + f1 * radii[1][1];
    double emd0 = e0 - d0, emd1 = e1 - d1;
    double tmp1 = emd0 * emd0 + emd1 * emd1;
    double qf = (double)q;
    par[0] = atan2(emd1, emd0);
    par[1] = (double)(-q) * (ff[2] - sqrt(tf_sqr(ff[2]) - 0.25 * tmp1));
    par[2] = qf * (1.0 / ff[2] + u[n]);
    double half_q = (double)(q / 2);
    double sq = sqrt(tf_sqr(2.0 * ff[2]) - tmp1);
    double j[9] = {
        (radii[0][1] * emd0 - emd1 * radii[0][0]) / tmp1, (radii[1][1] * emd0 - emd1 * radii[1][0]) / tmp1, 0.0,
        half_q * (emd0 * radii[0][0] + emd1 * radii[0][1]) / sq, half_q * (emd0 * radii[1][0] + emd1 * radii[1][1]) / sq, 0.0,
        0.0, 0.0, qf,
    };
    cov[0] = inv[0 * TF_MX + 0]; cov[1] = inv[0 * TF_MX + 1]; cov[2] = inv[0 * TF_MX + n];
    cov[3] = inv[1 * TF_MX + 0]; cov[4] = inv[1 * TF_MX + 1]; cov[5] = inv[1 * TF_MX + n];
    cov[6] = inv[n * TF_MX + 0]; cov[7] = inv[n * TF_MX + 1]; cov[8] = inv[n * TF_MX + n];
    tf_sandwich(j, cov, 3);
    tf_translate_karimaki(par, cov, 0.5 * emd0, 0.5 * emd1);
    cov[0] += (1.0 + tf_sqr(slope)) * tf_mult_scatt(p->big_s[1] - p->big_s[0], b, ff[2], slope);
    tf_translate_karimaki(par, cov, d0, d1);

    float chi2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        chi2 = (float)((double)chi2 + w[i] * tf_sqr(zz[i] - u[i]));
        if (i > 0 && i < n - 1) {
            double t = tf_sqr(u[i - 1] / (s[i] - s[i - 1]) - u[i] * (s[i + 1] - s[i - 1]) / ((s[i + 1] - s[i]) * (s[i] - s[i - 1]))
                + u[i + 1] / (s[i + 1] - s[i])
                + (s[i + 1] - s[i - 1]) * u[n] / 2.0)
                / vb[i];
            chi2 = (float)((double)chi2 + t);
        }
    }
    return chi2;
}

/// One thread per job: job_hits[5·j ..] the batch indices of its hits (inner to outer),
/// job_n[j] how many are fitted (3 to 5); frames FRAME_FLOATS per module (every det index
/// of a job's hits is below the table's length: checked on the host); out TF_OUT doubles
/// per job.
extern "C" __global__ void track_fit_bl(
    u32 n_jobs, const u32* job_hits, const u8* job_n,
    const float* x, const float* y, const float* z, const float* xerr, const float* yerr, const u16* det,
    const float* frames, float b_field, double* out)
{
    u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_jobs) return;
    int n = (int)job_n[j];
    double h[TF_HITS][3];
    float ge[TF_HITS][6];
    for (int k = 0; k < n; ++k) {
        u32 hi = job_hits[TF_HITS * j + k];
        const float* r = frames + 6 * (u32)det[hi];
        float xx = r[0], xy = r[1], xz = r[2], yx = r[3], yy = r[4], yz = r[5];
        float cxx = xerr[hi], cyy = yerr[hi], cxy = 0.0f;
        ge[k][0] = xx * (xx * cxx + yx * cxy) + yx * (xx * cxy + yx * cyy);
        ge[k][1] = xx * (xy * cxx + yy * cxy) + yx * (xy * cxy + yy * cyy);
        ge[k][2] = xy * (xy * cxx + yy * cxy) + yy * (xy * cxy + yy * cyy);
        ge[k][3] = xx * (xz * cxx + yz * cxy) + yx * (xz * cxy + yz * cyy);
        ge[k][4] = xy * (xz * cxx + yz * cxy) + yy * (xz * cxy + yz * cyy);
        ge[k][5] = xz * (xz * cxx + yz * cxy) + yz * (xz * cxy + yz * cyy);
        h[k][0] = (double)x[hi]; h[k][1] = (double)y[hi]; h[k][2] = (double)z[hi];
    }
    double b = (double)b_field;
    double ff[4];
    tf_fast_fit(h, n, ff);
    TfPrepared p;
    tf_prepare(h, n, ff, b, &p);
    double lpar[2], lcov[4], cpar[3], ccov[9];
    // The line fit first: the circle fit rescales the kink variances and overwrites Z.
    double lchi2 = tf_line_fit(ge, n, ff, b, &p, lpar, lcov);
    float cchi2 = tf_circle_fit(h, ge, n, ff, b, &p, cpar, ccov);
    double* o = out + (u64)TF_OUT * j;
    o[0] = cpar[0]; o[1] = cpar[1]; o[2] = cpar[2];
    o[3] = ccov[0]; o[4] = ccov[1]; o[5] = ccov[2]; o[6] = ccov[4]; o[7] = ccov[5]; o[8] = ccov[8];
    o[9] = lpar[0]; o[10] = lpar[1];
    o[11] = lcov[0]; o[12] = lcov[1]; o[13] = lcov[3];
    o[14] = lchi2; o[15] = (double)cchi2;
}
"#;

/// The kernel functions of [`TRACK_FIT`].
pub const TRACK_FIT_KERNELS: &[&str] = &["track_fit_bl"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_and_the_host_agree_on_the_layout() {
        for (name, v) in [("TF_OUT", FIT_OUT), ("TF_HITS", FIT_HITS)] {
            assert!(TRACK_FIT.contains(&format!("#define {name} {v}\n")), "{name}");
        }
        assert!(TRACK_FIT.contains(&format!("frames + {FRAME_FLOATS} * ")));
    }
}
