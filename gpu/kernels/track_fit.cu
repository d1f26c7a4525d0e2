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

#include "fit_linalg.cuh"

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

/// Job j's hits (positions widened to f64) and their global covariances, rotated with the
/// module frames in f32 (the CPU's `hit_global_cov`).
__device__ void tf_gather(u32 j, int n, const u32* job_hits, const float* x, const float* y, const float* z,
                          const float* xerr, const float* yerr, const u16* det, const float* frames,
                          double (*h)[3], float (*ge)[6]) {
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
}

/// Writes job j's TF_OUT floats, the values the CPU's `FitValues::of` gives: the state
/// (circle φ, tip, curvature; line cotθ, zip), the covariance terms kept (circle 00, 01, 02,
/// 11, 12, 22; line 00, 01, 11), pT (from the f32 curvature, or in f64 for the Riemann fit)
/// and χ²/ndof. With write_raw, also the fit's TF_OUT doubles into raw (circle par and
/// upper covariance, line par and upper covariance, line χ², circle χ²): the emulation
/// tests compare those with the CPU's fit bit for bit.
__device__ void tf_store(float* out, u32 write_raw, double* raw, u32 j, const double* cpar, const double* ccov,
                         const double* lpar, const double* lcov, double lchi2, float cchi2, float b_field, int n,
                         bool riemann) {
    float* o = out + (u64)TF_OUT * j;
    o[0] = (float)cpar[0]; o[1] = (float)cpar[1]; o[2] = (float)cpar[2]; o[3] = (float)lpar[0]; o[4] = (float)lpar[1];
    o[5] = (float)ccov[0]; o[6] = (float)ccov[1]; o[7] = (float)ccov[2]; o[8] = (float)ccov[4]; o[9] = (float)ccov[5];
    o[10] = (float)ccov[8]; o[11] = (float)lcov[0]; o[12] = (float)lcov[1]; o[13] = (float)lcov[3];
    o[14] = riemann ? (float)((double)b_field / fabs(cpar[2])) : b_field / fabsf((float)cpar[2]);
    o[15] = (float)(((double)cchi2 + lchi2) / (double)(2 * n - 5));
    if (write_raw) {
        double* r = raw + (u64)TF_OUT * j;
        r[0] = cpar[0]; r[1] = cpar[1]; r[2] = cpar[2];
        r[3] = ccov[0]; r[4] = ccov[1]; r[5] = ccov[2]; r[6] = ccov[4]; r[7] = ccov[5]; r[8] = ccov[8];
        r[9] = lpar[0]; r[10] = lpar[1];
        r[11] = lcov[0]; r[12] = lcov[1]; r[13] = lcov[3];
        r[14] = lchi2; r[15] = (double)cchi2;
    }
}

/// One thread per job: job_hits[5·j ..] the batch indices of its hits (inner to outer),
/// job_n[j] how many are fitted (3 to 5); frames FRAME_FLOATS per module (every det index
/// of a job's hits is below the table's length: checked on the host); out TF_OUT doubles
/// per job (raw: TF_OUT doubles per job when write_raw, else never written).
extern "C" __global__ void track_fit_bl(
    u32 n_jobs, const u32* job_hits, const u8* job_n,
    const float* x, const float* y, const float* z, const float* xerr, const float* yerr, const u16* det,
    const float* frames, float b_field, float* out, u32 write_raw, double* raw)
{
    u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_jobs) return;
    int n = (int)job_n[j];
    double h[TF_HITS][3];
    float ge[TF_HITS][6];
    tf_gather(j, n, job_hits, x, y, z, xerr, yerr, det, frames, h, ge);
    double b = (double)b_field;
    double ff[4];
    tf_fast_fit(h, n, ff);
    TfPrepared p;
    tf_prepare(h, n, ff, b, &p);
    double lpar[2], lcov[4], cpar[3], ccov[9];
    // The line fit first: the circle fit rescales the kink variances and overwrites Z.
    double lchi2 = tf_line_fit(ge, n, ff, b, &p, lpar, lcov);
    float cchi2 = tf_circle_fit(h, ge, n, ff, b, &p, cpar, ccov);
    tf_store(out, write_raw, raw, j, cpar, ccov, lpar, lcov, lchi2, cchi2, b_field, n, false);
}

#include "riemann_fit.cuh"

/// The Riemann fit, one thread per job: the same inputs and outputs as track_fit_bl.
extern "C" __global__ void track_fit_riemann(
    u32 n_jobs, const u32* job_hits, const u8* job_n,
    const float* x, const float* y, const float* z, const float* xerr, const float* yerr, const u16* det,
    const float* frames, float b_field, float* out, u32 write_raw, double* raw)
{
    u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_jobs) return;
    int n = (int)job_n[j];
    double h[TF_HITS][3];
    float ge[TF_HITS][6];
    tf_gather(j, n, job_hits, x, y, z, xerr, yerr, det, frames, h, ge);
    double b = (double)b_field;
    double ff[4];
    rf_fast_fit(h, n, ff);
    double p2d[TF_HITS][2], rad[TF_HITS];
    for (int i = 0; i < n; ++i) {
        p2d[i][0] = h[i][0];
        p2d[i][1] = h[i][1];
        rad[i] = sqrt(p2d[i][0] * p2d[i][0] + p2d[i][1] * p2d[i][1]);
    }
    RfScratch w;
    RfM hits_cov;
    rf_zeros(&hits_cov, 2 * n, 2 * n);
    for (int i = 0; i < n; ++i) {
        RFE(&hits_cov, i, i) = (double)ge[i][0];
        RFE(&hits_cov, i + n, i + n) = (double)ge[i][2];
        RFE(&hits_cov, i, i + n) = (double)ge[i][1];
        RFE(&hits_cov, i + n, i) = (double)ge[i][1];
    }
    RfCircle circle;
    rf_circle_fit(p2d, n, &hits_cov, ff, rad, b, &w, &circle);
    double lpar[2], lcov[4], lchi2;
    rf_line_fit(h, ge, n, &circle, ff, b, &w, lpar, lcov, &lchi2);
    double cpar[3], ccov[9];
    rf_to_perigee(&circle, cpar, ccov);
    tf_store(out, write_raw, raw, j, cpar, ccov, lpar, lcov, lchi2, circle.chi2, b_field, n, true);
}

/// The job table from the tuples kept on the device (the CPU's slots: job j's first job_n[j]
/// hits as batch hit rows, the rest 0xffffffff): tuple job_row[j]'s hits from the list
/// offsets and event-local hit indices, plus the first hit row of its event (the event whose
/// tuple rows tup_off[e]..tup_off[e + 1] hold it, found by bisection). One thread per job.
extern "C" __global__ void fit_job_hits(
    u32 n_jobs, const u32* job_row, const u8* job_n, u32 n_events, const u32* tup_off, const u32* hit_start,
    const u32* list_off, const u32* list_hits, u32* job_hits)
{
    u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_jobs) return;
    u32 r = job_row[j];
    u32 lo = 0u, hi = n_events;   // the last e with tup_off[e] <= r
    while (hi - lo > 1u) {
        u32 mid = (lo + hi) / 2u;
        if (tup_off[mid] <= r) lo = mid; else hi = mid;
    }
    u32 n = job_n[j], at = list_off[r], base = hit_start[lo];
    for (u32 k = 0u; k < TF_HITS; ++k)
        job_hits[(u64)j * TF_HITS + k] = k < n ? base + list_hits[at + k] : 0xffffffffu;
}

/// The columns of `track_fits` that `track_quality` reads, kept on the device: each fit's
/// state (its curvature scaled to q/pT by inv_b, in f32 as the CPU's StoredFit), pT and χ²
/// at its tuple's batch row job_row[j]; the other rows stay as the caller zero-filled them,
/// as the CPU leaves the tuples it does not fit. One thread per job.
extern "C" __global__ void fit_scatter(
    u32 n_jobs, const u32* job_row, const float* vals, float inv_b, float* state, float* pt, float* chi2)
{
    u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_jobs) return;
    const float* v = vals + (u64)j * TF_OUT;
    u64 r = job_row[j];
    for (int k = 0; k < 5; ++k) state[r * 5 + k] = v[k];
    state[r * 5 + 2] = v[2] * inv_b;
    pt[r] = v[14];
    chi2[r] = v[15];
}
