// The Riemann fit's device code (`track_fit_riemann` in track_fit.cu): the CPU's
// reco/src/tracks/riemann.rs operation by operation, kept separate on purpose (see
// fit_linalg.cuh).
#ifndef QUIVER_RIEMANN_FIT
#define QUIVER_RIEMANN_FIT
// ---- Riemann fit (the CPU's `riemann_fit`, dynamic matrices as fixed 10×10 storage) ----

#define RF_MAX 10
/// A dense row-major matrix of at most CAP elements (the CPU's dynamic `Mx`).
template <int CAP> struct RfMat { int r, c; double d[CAP]; };
/// Up to 10×10: the 2n×2n hit covariances.
typedef RfMat<RF_MAX * RF_MAX> RfM;
/// Up to 6×6: everything else (3×3, n×n, 3×n, 3×6, 6×6), a third of the local memory.
typedef RfMat<36> RfS;
#define RFE(m, i, j) ((m)->d[(i) * (m)->c + (j)])

template <class M> __device__ void rf_zeros(M* m, int r, int c) {
    m->r = r; m->c = c;
    for (int k = 0; k < r * c; ++k) m->d[k] = 0.0;
}
/// o = a·b, each sum in index order. o must not alias a or b.
template <class A, class B, class O> __device__ void rf_mul(const A* a, const B* b, O* o) {
    o->r = a->r; o->c = b->c;
    for (int i = 0; i < a->r; ++i)
        for (int j = 0; j < b->c; ++j) {
            double s = RFE(a, i, 0) * RFE(b, 0, j);
            for (int k = 1; k < a->c; ++k) s += RFE(a, i, k) * RFE(b, k, j);
            RFE(o, i, j) = s;
        }
}
template <class A, class O> __device__ void rf_t(const A* a, O* o) {
    o->r = a->c; o->c = a->r;
    for (int i = 0; i < a->c; ++i)
        for (int j = 0; j < a->r; ++j) RFE(o, i, j) = RFE(a, j, i);
}
template <class M> __device__ void rf_scale(M* a, double s) {
    for (int k = 0; k < a->r * a->c; ++k) a->d[k] = a->d[k] * s;
}
template <class M> __device__ void rf_add(M* a, const M* b) {
    for (int k = 0; k < a->r * a->c; ++k) a->d[k] = a->d[k] + b->d[k];
}
template <class A, class B, class O> __device__ void rf_cwise(const A* a, const B* b, O* o) {
    o->r = a->r; o->c = a->c;
    for (int k = 0; k < a->r * a->c; ++k) o->d[k] = a->d[k] * b->d[k];
}
/// Sum of the elements in column-major order (Eigen's storage order).
template <class M> __device__ double rf_sum(const M* a) {
    double s = 0.0;
    bool first = true;
    for (int j = 0; j < a->c; ++j)
        for (int i = 0; i < a->r; ++i) {
            if (first) { s = RFE(a, i, j); first = false; }
            else s += RFE(a, i, j);
        }
    return s;
}
template <class M> __device__ void rf_mat_vec(const M* a, const double* v, double* o) {
    for (int i = 0; i < a->r; ++i) {
        double s = RFE(a, i, 0) * v[0];
        for (int k = 1; k < a->c; ++k) s += RFE(a, i, k) * v[k];
        o[i] = s;
    }
}
template <class M> __device__ void rf_sym_from_upper(M* m) {
    for (int i = 0; i < m->r; ++i)
        for (int j = 0; j < i; ++j) RFE(m, i, j) = RFE(m, j, i);
}
template <class A, class O> __device__ void rf_block(const A* a, int r0, int c0, int r, int c, O* o) {
    o->r = r; o->c = c;
    for (int i = 0; i < r; ++i)
        for (int j = 0; j < c; ++j) RFE(o, i, j) = RFE(a, r0 + i, c0 + j);
}
template <class A, class O> __device__ void rf_invert(const A* a, O* o) {
    int n = a->r;
    double s[TF_MX * TF_MX], d[TF_MX * TF_MX];
    for (int k = 0; k < TF_MX * TF_MX; ++k) s[k] = 0.0;
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) s[i * TF_MX + j] = RFE(a, i, j);
    tf_cholesky_invert(s, d, n);
    o->r = n; o->c = n;
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) RFE(o, i, j) = d[i * TF_MX + j];
}
__device__ double rf_dot(const double* a, const double* b, int n) {
    double s = a[0] * b[0];
    for (int k = 1; k < n; ++k) s += a[k] * b[k];
    return s;
}
__device__ double rf_cross2(double a0, double a1, double b0, double b1) { return a0 * b1 - a1 * b0; }

/// Eigen-decomposition of a symmetric 3×3 matrix (lower triangle read), the CPU's closed
/// form of Eigen's computeDirect, in T (double or float): ascending eigenvalues ev, the
/// eigenvectors as the columns of vec (row-major 3×3).
#define RF_SYM_EIGEN3(NAME, T, EPS, SQRT, ATAN2, SIN, COS, FABS, TREE_NORM)                        \
__device__ void NAME(const T* mat, T* ev, T* vec) {                                               \
    T m[9];                                                                                       \
    for (int k = 0; k < 9; ++k) m[k] = mat[k];                                                    \
    for (int i = 0; i < 3; ++i) for (int j = i + 1; j < 3; ++j) m[i * 3 + j] = m[j * 3 + i];     \
    T shift = (mat[0] + (mat[4] + mat[8])) / (T)3.0;                                              \
    for (int i = 0; i < 3; ++i) m[i * 4] -= shift;                                                \
    T scale = (T)0.0;                                                                             \
    for (int k = 0; k < 9; ++k) { T a = FABS(m[k]); if (a > scale) scale = a; }                   \
    if (scale > (T)0.0) for (int k = 0; k < 9; ++k) m[k] /= scale;                                \
    T s_inv3 = (T)1.0 / (T)3.0;                                                                   \
    T s_sqrt3 = SQRT((T)3.0);                                                                     \
    T c0 = m[0] * m[4] * m[8] + (T)2.0 * m[3] * m[6] * m[7] - m[0] * m[7] * m[7] - m[4] * m[6] * m[6] - m[8] * m[3] * m[3]; \
    T c1 = m[0] * m[4] - m[3] * m[3] + m[0] * m[8] - m[6] * m[6] + m[4] * m[8] - m[7] * m[7];     \
    T c2 = m[0] + m[4] + m[8];                                                                    \
    T c2_over_3 = c2 * s_inv3;                                                                    \
    T a_over_3 = (c2 * c2_over_3 - c1) * s_inv3;                                                  \
    if (a_over_3 < (T)0.0) a_over_3 = (T)0.0;                                                     \
    T half_b = (T)0.5 * (c0 + c2_over_3 * ((T)2.0 * c2_over_3 * c2_over_3 - c1));               \
    T q = a_over_3 * a_over_3 * a_over_3 - half_b * half_b;                                       \
    if (q < (T)0.0) q = (T)0.0;                                                                   \
    T rho = SQRT(a_over_3);                                                                       \
    T theta = ATAN2(SQRT(q), half_b) * s_inv3;                                                    \
    T sin_t = SIN(theta), cos_t = COS(theta);                                                     \
    ev[0] = c2_over_3 - rho * (cos_t + s_sqrt3 * sin_t);                                          \
    ev[1] = c2_over_3 - rho * (cos_t - s_sqrt3 * sin_t);                                          \
    ev[2] = c2_over_3 + (T)2.0 * rho * cos_t;                                                     \
    for (int k = 0; k < 9; ++k) vec[k] = (k % 4 == 0) ? (T)1.0 : (T)0.0;                          \
    if (ev[2] - ev[0] > EPS) {                                                                    \
        T d0 = ev[2] - ev[1];                                                                     \
        T d1 = ev[1] - ev[0];                                                                     \
        int k = 0, l = 2;                                                                         \
        if (d0 > d1) { k = 2; l = 0; d0 = d1; }                                                   \
        T cols[3][3] = {{(T)0.0, (T)0.0, (T)0.0}, {(T)0.0, (T)0.0, (T)0.0}, {(T)0.0, (T)0.0, (T)0.0}}; \
        T tmp[9], rep[3];                                                                         \
        for (int x = 0; x < 9; ++x) tmp[x] = m[x];                                                \
        for (int i = 0; i < 3; ++i) tmp[i * 4] -= ev[k];                                          \
        NAME##_kernel(tmp, cols[k], rep);                                                         \
        for (int i = 0; i < 3; ++i) cols[l][i] = rep[i];                                          \
        if (d0 <= (T)2.0 * EPS * d1) {                                                            \
            T dk = cols[k][0] * cols[l][0] + cols[k][1] * cols[l][1] + cols[k][2] * cols[l][2];   \
            for (int i = 0; i < 3; ++i) cols[l][i] -= dk * cols[k][i];                            \
            NAME##_normalized(cols[l]);                                                           \
        } else {                                                                                  \
            for (int x = 0; x < 9; ++x) tmp[x] = m[x];                                            \
            for (int i = 0; i < 3; ++i) tmp[i * 4] -= ev[l];                                      \
            NAME##_kernel(tmp, cols[l], rep);                                                     \
        }                                                                                         \
        T cr[3] = {cols[2][1] * cols[0][2] - cols[2][2] * cols[0][1],                             \
                   cols[2][2] * cols[0][0] - cols[2][0] * cols[0][2],                             \
                   cols[2][0] * cols[0][1] - cols[2][1] * cols[0][0]};                            \
        NAME##_normalized(cr);                                                                    \
        for (int i = 0; i < 3; ++i) cols[1][i] = cr[i];                                           \
        for (int j = 0; j < 3; ++j) for (int i = 0; i < 3; ++i) vec[i * 3 + j] = cols[j][i];      \
    }                                                                                             \
    for (int i = 0; i < 3; ++i) { ev[i] *= scale; ev[i] += shift; }                               \
}

/// The helpers of RF_SYM_EIGEN3 for one type: squared norm (three-term sum grouped as
/// TREE_NORM says), normalisation, the kernel of a rank-2 matrix from column crosses.
#define RF_EIGEN_HELPERS(NAME, T, SQRT, FABS, TREE_NORM)                                          \
__device__ T NAME##_sq(const T* a) {                                                              \
    T x = a[0] * a[0], y = a[1] * a[1], z = a[2] * a[2];                                          \
    return TREE_NORM ? x + (y + z) : (x + y) + z;                                                 \
}                                                                                                 \
__device__ void NAME##_normalized(T* a) {                                                         \
    T n = NAME##_sq(a);                                                                           \
    if (n > (T)0.0) { T r = SQRT(n); a[0] = a[0] / r; a[1] = a[1] / r; a[2] = a[2] / r; }         \
}                                                                                                 \
__device__ void NAME##_cross(const T* a, const T* b, T* o) {                                      \
    o[0] = a[1] * b[2] - a[2] * b[1]; o[1] = a[2] * b[0] - a[0] * b[2]; o[2] = a[0] * b[1] - a[1] * b[0]; \
}                                                                                                 \
__device__ void NAME##_kernel(const T* t, T* res, T* rep) {                                       \
    int i0 = 0;                                                                                   \
    for (int i = 1; i < 3; ++i) if (FABS(t[i * 4]) > FABS(t[i0 * 4])) i0 = i;                     \
    T c1v[3], c2v[3], x0[3], x1[3];                                                               \
    int j1 = (i0 + 1) % 3, j2 = (i0 + 2) % 3;                                                     \
    for (int i = 0; i < 3; ++i) { rep[i] = t[i * 3 + i0]; c1v[i] = t[i * 3 + j1]; c2v[i] = t[i * 3 + j2]; } \
    NAME##_cross(rep, c1v, x0);                                                                   \
    NAME##_cross(rep, c2v, x1);                                                                   \
    T n0 = NAME##_sq(x0), n1 = NAME##_sq(x1);                                                     \
    if (n0 > n1) { T r = SQRT(n0); res[0] = x0[0] / r; res[1] = x0[1] / r; res[2] = x0[2] / r; }  \
    else { T r = SQRT(n1); res[0] = x1[0] / r; res[1] = x1[1] / r; res[2] = x1[2] / r; }          \
}

RF_EIGEN_HELPERS(rf_eig_d, double, sqrt, fabs, false)
RF_SYM_EIGEN3(rf_eig_d, double, 2.220446049250313e-16, sqrt, atan2, sin, cos, fabs, false)
RF_EIGEN_HELPERS(rf_eig_f, float, sqrtf, fabsf, true)
RF_SYM_EIGEN3(rf_eig_f, float, 1.1920929e-07f, sqrtf, atan2f, sinf, cosf, fabsf, true)

__device__ int rf_min_index(const double* v) { int k = 0; for (int i = 1; i < 3; ++i) if (v[i] < v[k]) k = i; return k; }
__device__ int rf_min_index_f(const float* v) { int k = 0; for (int i = 1; i < 3; ++i) if (v[i] < v[k]) k = i; return k; }

/// Eigenvector of the smallest eigenvalue of a (3×3), and that eigenvalue.
__device__ double rf_min_eigen3d(const RfS* a, double* vv) {
    double m[9], ev[3], vec[9];
    for (int k = 0; k < 9; ++k) m[k] = a->d[k];
    rf_eig_d(m, ev, vec);
    int k = rf_min_index(ev);
    for (int i = 0; i < 3; ++i) vv[i] = vec[i * 3 + k];
    return ev[k];
}
/// The same in f32 (the numerical Jacobian).
__device__ void rf_min_eigen3d_fast(const RfS* a, double* col) {
    float m[9], ev[3], vec[9];
    for (int k = 0; k < 9; ++k) m[k] = (float)a->d[k];
    rf_eig_f(m, ev, vec);
    int k = rf_min_index_f(ev);
    for (int i = 0; i < 3; ++i) col[i] = (double)vec[i * 3 + k];
}

__device__ void rf_fast_fit(const double (*h)[3], int n, double* ff) {
    double b0 = h[n / 2][0] - h[0][0], b1 = h[n / 2][1] - h[0][1];
    double c0 = h[n - 1][0] - h[0][0], c1 = h[n - 1][1] - h[0][1];
    double b2 = b0 * b0 + b1 * b1;
    double c2 = c0 * c0 + c1 * c1;
    bool flip = fabs(b0) < fabs(b1);
    double bx = flip ? b1 : b0, by = flip ? b0 : b1;
    double cx = flip ? c1 : c0, cy = flip ? c0 : c1;
    double div = 2.0 * (cx * by - bx * cy);
    double y0 = (cx * b2 - bx * c2) / div;
    double x0 = (0.5 * b2 - y0 * by) / bx;
    double r0 = h[0][0] + (flip ? y0 : x0);
    double r1 = h[0][1] + (flip ? x0 : y0);
    double r2 = sqrt(tf_sqr(x0) + tf_sqr(y0));
    double d0 = h[0][0] - r0, d1 = h[0][1] - r1;
    double e0 = h[n - 1][0] - r0, e1 = h[n - 1][1] - r1;
    double dr = r2 * atan2(rf_cross2(d0, d1, e0, e1), d0 * e0 + d1 * e1);
    double dz = h[n - 1][2] - h[0][2];
    ff[0] = r0; ff[1] = r1; ff[2] = r2; ff[3] = dr / dz;
}

__device__ void rf_rad_len_uniform(const double* lengths, int n, double* r) {
    const double XX_0_INV = 0.06 / 16.0;
    r[0] = lengths[0] * XX_0_INV;
    for (int j = 1; j < n; ++j) r[j] = fabs(lengths[j] - lengths[j - 1]) * XX_0_INV;
}

__device__ void rf_scatter_cov_rad(const double (*p2d)[2], int n, const double* ff, const double* rad, double b, RfS* m) {
    double p_t = fmin(ff[2] * b, 20.0);
    double p_2 = p_t * p_t * (1.0 + 1.0 / (ff[3] * ff[3]));
    double theta = atan(ff[3]);
    if (theta < 0.0) theta += 3.141592653589793;
    double o0 = ff[0], o1 = ff[1];
    double mo0 = -o0, mo1 = -o1;
    double k = sqrt(1.0 + 1.0 / (ff[3] * ff[3]));
    double s[5], rl[5], sig2[5];
    for (int i = 0; i < n; ++i) {
        double p0 = p2d[i][0] - o0, p1 = p2d[i][1] - o1;
        double cr = rf_cross2(mo0, mo1, p0, p1);
        double dt = mo0 * p0 + mo1 * p1;
        s[i] = fabs(atan2(cr, dt) * ff[2]) * k;
    }
    rf_rad_len_uniform(s, n, rl);
    double f = 0.000225 / (p_2 * tf_sqr(sin(theta)));
    for (int i = 0; i < n; ++i) sig2[i] = tf_sqr(1.0 + 0.038 * log(rl[i])) * rl[i] * f;
    rf_zeros(m, n, n);
    for (int kk = 0; kk < n; ++kk)
        for (int l = kk; l < n; ++l) {
            int lim = kk < l ? kk : l;
            for (int i = 0; i < lim; ++i) RFE(m, kk, l) += (rad[kk] - rad[i]) * (rad[l] - rad[i]) * sig2[i];
            RFE(m, l, kk) = RFE(m, kk, l);
        }
}

__device__ void rf_cov_radtocart(const double (*p2d)[2], int n, const RfS* cov_rad, const double* rad, RfM* c) {
    rf_zeros(c, 2 * n, 2 * n);
    double ri[5];
    for (int i = 0; i < n; ++i) ri[i] = 1.0 / rad[i];
    for (int i = 0; i < n; ++i)
        for (int j = i; j < n; ++j) {
            double cr = RFE(cov_rad, i, j);
            RFE(c, i, j) = cr * p2d[i][1] * ri[i] * p2d[j][1] * ri[j];
            RFE(c, i + n, j + n) = cr * p2d[i][0] * ri[i] * p2d[j][0] * ri[j];
            RFE(c, i, j + n) = -cr * p2d[i][1] * ri[i] * p2d[j][0] * ri[j];
            RFE(c, i + n, j) = -cr * p2d[i][0] * ri[i] * p2d[j][1] * ri[j];
            RFE(c, j, i) = RFE(c, i, j);
            RFE(c, j + n, i + n) = RFE(c, i + n, j + n);
            RFE(c, j + n, i) = RFE(c, i, j + n);
            RFE(c, j, i + n) = RFE(c, i + n, j);
        }
}

/// The circle fit's result in (X0, Y0, R) form.
struct RfCircle { double par[3]; RfS cov; int q; float chi2; };

/// Scratch of the circle fit (large matrices, kept out of the call's frame).
struct RfScratch {
    RfM v, cart, vcs, tmp;
    RfS cov_rad, scat, g, x, xt, xg, a, c[6], d[6], w_mat, h_mat, h_t, s_v, e_mat, j2, j2t, t0m, cc0, cvc, j3, j3t, m1, m2;
};

__device__ const RfS* rf_cmat(const RfS* c, int i, int j) {
    // c00, c01, c02, c11, c12, c22 as c[0..6]
    if (i == 0 && j == 0) return &c[0];
    if (i == 0 && j == 1) return &c[1];
    if (i == 0 && j == 2) return &c[2];
    if (i == 1 && j == 1) return &c[3];
    if (i == 1 && j == 2) return &c[4];
    return &c[5];
}

/// Element (r, c) of D(i, j), the D matrices of the error propagation: d[0..6] holds D00,
/// D01, D02, D11, D12, D22; D10, D20, D21 are their transposes.
__device__ double rf_dm_at(const RfS* d, int i, int j, int r, int c) {
    if (i > j) { int t = i; i = j; j = t; t = r; r = c; c = t; }
    int k = i == 0 ? j : (i == 1 ? 2 + j : 5);
    return RFE(&d[k], r, c);
}
/// D(i, j)·v, each row's sum in index order (as the CPU's transposed copy then mat_vec).
__device__ void rf_dm_mat_vec(const RfS* d, int i, int j, const double* v, int n, double* o) {
    for (int r = 0; r < n; ++r) {
        double s = rf_dm_at(d, i, j, r, 0) * v[0];
        for (int k = 1; k < n; ++k) s += rf_dm_at(d, i, j, r, k) * v[k];
        o[r] = s;
    }
}
/// (f·D(i, j))·v: the matrix scaled first, as the CPU does.
__device__ void rf_dm_scaled_mat_vec(const RfS* d, int i, int j, double f, const double* v, int n, double* o) {
    for (int r = 0; r < n; ++r) {
        double s = (rf_dm_at(d, i, j, r, 0) * f) * v[0];
        for (int k = 1; k < n; ++k) s += (rf_dm_at(d, i, j, r, k) * f) * v[k];
        o[r] = s;
    }
}

__device__ void rf_circle_fit(const double (*p2d)[2], int n, const RfM* hits_cov, const double* ff, const double* rad, double b, RfScratch* w, RfCircle* out) {
    double nf = (double)n;
    RfM* v = &w->v;
    *v = *hits_cov;
    RfS* cov_rad = &w->cov_rad;
    rf_zeros(cov_rad, n, n);
    for (int i = 0; i < n; ++i) {
        if (rad[i] < 1.0e-4) RFE(cov_rad, i, i) = RFE(v, i, i);
        else {
            double a0 = p2d[i][0], a1 = p2d[i][1];
            double bb0 = p2d[i][0] - ff[0], bb1 = p2d[i][1] - ff[1];
            double x2 = a0 * bb0 + a1 * bb1;
            double y2 = rf_cross2(a0, a1, bb0, bb1);
            double tan_c = -y2 / x2;
            double tan_c2 = tf_sqr(tan_c);
            RFE(cov_rad, i, i) = 1.0 / (1.0 + tan_c2) * (RFE(v, i, i) + RFE(v, i + n, i + n) * tan_c2 + 2.0 * RFE(v, i, i + n) * tan_c);
        }
    }
    rf_scatter_cov_rad(p2d, n, ff, rad, b, &w->scat);
    rf_cov_radtocart(p2d, n, &w->scat, rad, &w->cart);
    rf_add(v, &w->cart);
    rf_add(cov_rad, &w->scat);
    RfS* g = &w->g;
    rf_invert(cov_rad, g);
    double renorm = rf_sum(g);
    rf_scale(g, 1.0 / renorm);
    double weight[5];
    for (int j = 0; j < n; ++j) {
        double s = RFE(g, 0, j);
        for (int i = 1; i < n; ++i) s += RFE(g, i, j);
        weight[j] = s;
    }
    double hx = p2d[0][0], hy = p2d[0][1];
    for (int i = 1; i < n; ++i) { hx += p2d[i][0]; hy += p2d[i][1]; }
    double h0 = hx / nf, h1 = hy / nf;
    RfS p3d;
    rf_zeros(&p3d, 3, n);
    for (int i = 0; i < n; ++i) { RFE(&p3d, 0, i) = p2d[i][0] - h0; RFE(&p3d, 1, i) = p2d[i][1] - h1; }
    double mc[10];
    for (int i = 0; i < n; ++i) { mc[i] = RFE(&p3d, 0, i); mc[n + i] = RFE(&p3d, 1, i); }
    double q = rf_dot(mc, mc, 2 * n);
    double s = sqrt(nf * 1.0 / q);
    for (int i = 0; i < n; ++i) {
        RFE(&p3d, 0, i) *= s;
        RFE(&p3d, 1, i) *= s;
        RFE(&p3d, 2, i) = RFE(&p3d, 0, i) * RFE(&p3d, 0, i) + RFE(&p3d, 1, i) * RFE(&p3d, 1, i);
    }
    double r0[3];
    rf_mat_vec(&p3d, weight, r0);
    RfS* x = &w->x;
    x->r = 3; x->c = n;
    for (int k = 0; k < 3; ++k)
        for (int i = 0; i < n; ++i) RFE(x, k, i) = RFE(&p3d, k, i) - r0[k];
    rf_mul(x, g, &w->xg);
    rf_t(x, &w->xt);
    RfS* a = &w->a;
    rf_mul(&w->xg, &w->xt, a);
    double vv[3];
    double chi2 = rf_min_eigen3d(a, vv);
    double sgn = vv[2] > 0.0 ? 1.0 : -1.0;
    for (int k = 0; k < 3; ++k) vv[k] *= sgn;
    double c = (-vv[0]) * r0[0] + (-vv[1]) * r0[1] + (-vv[2]) * r0[2];
    double h = sqrt(1.0 - tf_sqr(vv[2]) - 4.0 * c * vv[2]);
    double v2x2_inv = 1.0 / (2.0 * vv[2]);
    double s_inv = 1.0 / s;
    double par_uvr[3] = {-vv[0] * v2x2_inv, -vv[1] * v2x2_inv, h * v2x2_inv};
    out->par[0] = par_uvr[0] * s_inv + h0;
    out->par[1] = par_uvr[1] * s_inv + h1;
    out->par[2] = par_uvr[2] * s_inv;
    out->q = (p2d[1][0] - p2d[0][0]) * (out->par[1] - p2d[0][1]) - (p2d[1][1] - p2d[0][1]) * (out->par[0] - p2d[0][0]) > 0.0 ? -1 : 1;
    out->chi2 = (float)(fabs(chi2) * renorm * 1.0 / tf_sqr(2.0 * vv[2] * par_uvr[2] * s));

    // Error propagation.
    double cm;
    {
        // mcᵀ·V·mc as the CPU computes it: (mcᵀ·V) first, then ·mc.
        double row[10];
        for (int j = 0; j < 2 * n; ++j) {
            double t = mc[0] * RFE(v, 0, j);
            for (int k = 1; k < 2 * n; ++k) t += mc[k] * RFE(v, k, j);
            row[j] = t;
        }
        cm = rf_dot(row, mc, 2 * n);
    }
    double v_sqn = 0.0;
    {
        bool first = true;
        for (int j = 0; j < 2 * n; ++j)
            for (int i = 0; i < 2 * n; ++i) {
                double t = RFE(v, i, j) * RFE(v, i, j);
                if (first) { v_sqn = t; first = false; } else v_sqn += t;
            }
    }
    double kfac = tf_sqr(tf_sqr(s)) * 1.0 / (4.0 * q * nf) * (2.0 * v_sqn + 4.0 * cm);
    RfM* vcs = &w->vcs;
    rf_zeros(vcs, 2 * n, 2 * n);
    for (int i = 0; i < 2 * n; ++i)
        for (int j = i; j < 2 * n; ++j) RFE(vcs, i, j) = tf_sqr(s) * RFE(v, i, j) + kfac * (mc[i] * mc[j]);
    rf_sym_from_upper(vcs);
    // c[0..6] = c00, c01 (= v01), c02, c11, c12, c22.
    RfS* cm_ = w->c;
    RfS v10, t0, t1, t00, t01, t11, t10, tmp1, tmp2;
    rf_block(vcs, 0, 0, n, n, &cm_[0]);
    rf_block(vcs, 0, n, n, n, &cm_[1]);
    rf_block(vcs, n, n, n, n, &cm_[3]);
    rf_t(&cm_[1], &v10);
    t0.r = t1.r = t00.r = t01.r = t11.r = n;
    t0.c = t1.c = t00.c = t01.c = t11.c = n;
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
            RFE(&t0, i, j) = RFE(&p3d, 0, j);
            RFE(&t1, i, j) = RFE(&p3d, 1, j);
            RFE(&t00, i, j) = RFE(&p3d, 0, i) * RFE(&p3d, 0, j);
            RFE(&t01, i, j) = RFE(&p3d, 0, i) * RFE(&p3d, 1, j);
            RFE(&t11, i, j) = RFE(&p3d, 1, i) * RFE(&p3d, 1, j);
        }
    rf_t(&t01, &t10);
    rf_cwise(&cm_[0], &t0, &cm_[2]);
    rf_cwise(&cm_[1], &t1, &tmp1);
    rf_add(&cm_[2], &tmp1);
    rf_scale(&cm_[2], 2.0);
    rf_cwise(&v10, &t0, &cm_[4]);
    rf_cwise(&cm_[3], &t1, &tmp2);
    rf_add(&cm_[4], &tmp2);
    rf_scale(&cm_[4], 2.0);
    rf_zeros(&cm_[5], n, n);
    for (int i = 0; i < n; ++i)
        for (int j = i; j < n; ++j) {
            double e00 = RFE(&cm_[0], i, j), e01 = RFE(&cm_[1], i, j), e11 = RFE(&cm_[3], i, j), e10 = RFE(&v10, i, j);
            RFE(&cm_[5], i, j) = 2.0 * (e00 * e00 + e00 * e01 + e11 * e10 + e11 * e11)
                + 4.0 * (e00 * RFE(&t00, i, j) + e01 * RFE(&t01, i, j) + e10 * RFE(&t10, i, j) + e11 * RFE(&t11, i, j));
        }
    rf_sym_from_upper(&cm_[5]);
    RfS* cc0 = &w->cc0;
    rf_zeros(cc0, 3, 3);
    for (int i = 0; i < 3; ++i)
        for (int j = i; j < 3; ++j) {
            const RfS* m = rf_cmat(cm_, i, j);
            double row[5];
            for (int jj = 0; jj < n; ++jj) {
                double t = weight[0] * RFE(m, 0, jj);
                for (int k = 1; k < n; ++k) t += weight[k] * RFE(m, k, jj);
                row[jj] = t;
            }
            RFE(cc0, i, j) = rf_dot(row, weight, n);
            RFE(cc0, j, i) = RFE(cc0, i, j);
        }
    RfS* w_mat = &w->w_mat;
    w_mat->r = n; w_mat->c = n;
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) RFE(w_mat, i, j) = weight[i] * weight[j];
    RfS* h_mat = &w->h_mat;
    h_mat->r = n; h_mat->c = n;
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) RFE(h_mat, i, j) = (i == j ? 1.0 : 0.0) - weight[j];
    rf_t(h_mat, &w->h_t);
    RfS p3t;
    rf_t(&p3d, &p3t);
    RfS* s_v = &w->s_v;
    rf_mul(h_mat, &p3t, s_v);
    // d[0..6] = d00, d01, d02, d11, d12, d22.
    RfS* dm_ = w->d;
    for (int k = 0; k < 6; ++k) {
        rf_mul(h_mat, &cm_[k], &w->m1);
        rf_mul(&w->m1, &w->h_t, &w->m2);
        rf_cwise(&w->m2, w_mat, &dm_[k]);
    }
    const int NU_I[6] = {0, 0, 0, 1, 1, 2}, NU_J[6] = {0, 1, 2, 1, 2, 2};
    RfS* e_mat = &w->e_mat;
    rf_zeros(e_mat, 6, 6);
    for (int a_ = 0; a_ < 6; ++a_) {
        int i = NU_I[a_], j = NU_J[a_];
        for (int b_ = a_; b_ < 6; ++b_) {
            int k = NU_I[b_], l = NU_J[b_];
            double t0v[5], t1v[5], col_k[5], col_l[5], col_i[5], col_j[5];
            for (int r = 0; r < n; ++r) { col_k[r] = RFE(s_v, r, k); col_l[r] = RFE(s_v, r, l); col_i[r] = RFE(s_v, r, i); col_j[r] = RFE(s_v, r, j); }
            if (l == k) {
                rf_dm_scaled_mat_vec(dm_, j, l, 2.0, col_l, n, t0v);
                if (i == j) for (int r = 0; r < n; ++r) t1v[r] = t0v[r];
                else rf_dm_scaled_mat_vec(dm_, i, l, 2.0, col_l, n, t1v);
            } else {
                double p[5], rr[5];
                rf_dm_mat_vec(dm_, j, l, col_k, n, p);
                rf_dm_mat_vec(dm_, j, k, col_l, n, rr);
                for (int r = 0; r < n; ++r) t0v[r] = p[r] + rr[r];
                if (i == j) for (int r = 0; r < n; ++r) t1v[r] = t0v[r];
                else {
                    rf_dm_mat_vec(dm_, i, l, col_k, n, p);
                    rf_dm_mat_vec(dm_, i, k, col_l, n, rr);
                    for (int r = 0; r < n; ++r) t1v[r] = p[r] + rr[r];
                }
            }
            double val;
            if (i == j) {
                double sum[5];
                for (int r = 0; r < n; ++r) sum[r] = t0v[r] + t1v[r];
                val = 0.0 + rf_dot(col_i, sum, n);
            } else {
                val = 0.0 + (rf_dot(col_i, t0v, n) + rf_dot(col_j, t1v, n));
            }
            RFE(e_mat, a_, b_) = val;
            if (b_ != a_) RFE(e_mat, b_, a_) = val;
        }
    }
    // Numerical Jacobian of the smallest eigenvector w.r.t. the 6 independent elements of A.
    const double DERIV_STEP = 1.0e-4;
    RfS* j2 = &w->j2;
    rf_zeros(j2, 3, 6);
    for (int a_ = 0; a_ < 6; ++a_) {
        int i = NU_I[a_], j = NU_J[a_];
        RfS delta;
        rf_zeros(&delta, 3, 3);
        double dd = fabs(RFE(a, i, j) * DERIV_STEP);
        RFE(&delta, i, j) = dd;
        RFE(&delta, j, i) = dd;
        RfS ad = *a;
        rf_add(&ad, &delta);
        double col[3];
        rf_min_eigen3d_fast(&ad, col);
        double sign = col[2] > 0.0 ? 1.0 : -1.0;
        for (int k = 0; k < 3; ++k) RFE(j2, k, a_) = (col[k] * sign - vv[k]) / RFE(&delta, i, j);
    }
    RfS* t0m = &w->t0m;
    rf_mul(j2, e_mat, &w->m1);
    rf_t(j2, &w->j2t);
    rf_mul(&w->m1, &w->j2t, t0m);
    RfS neg = *t0m;
    rf_scale(&neg, -1.0);
    double t1vv[3];
    rf_mat_vec(&neg, r0, t1vv);
    RfS* cvc = &w->cvc;
    rf_zeros(cvc, 4, 4);
    for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) RFE(cvc, i, j) = RFE(t0m, i, j);
        RFE(cvc, i, 3) = t1vv[i];
        RFE(cvc, 3, i) = t1vv[i];
    }
    double cm1, cm3;
    {
        double row[3];
        for (int jj = 0; jj < 3; ++jj) { double t = vv[0] * RFE(cc0, 0, jj); for (int k = 1; k < 3; ++k) t += vv[k] * RFE(cc0, k, jj); row[jj] = t; }
        cm1 = rf_dot(row, vv, 3);
        for (int jj = 0; jj < 3; ++jj) { double t = r0[0] * RFE(t0m, 0, jj); for (int k = 1; k < 3; ++k) t += r0[k] * RFE(t0m, k, jj); row[jj] = t; }
        cm3 = rf_dot(row, r0, 3);
    }
    RfS ccw;
    rf_cwise(cc0, t0m, &ccw);
    RFE(cvc, 3, 3) = cm1 + rf_sum(&ccw) + cm3;
    double t = 1.0 / h;
    RfS* j3 = &w->j3;
    j3->r = 3; j3->c = 4;
    double j3v[12] = {
        -v2x2_inv, 0.0, vv[0] * tf_sqr(v2x2_inv) * 2.0, 0.0,
        0.0, -v2x2_inv, vv[1] * tf_sqr(v2x2_inv) * 2.0, 0.0,
        vv[0] * v2x2_inv * t, vv[1] * v2x2_inv * t, -h * tf_sqr(v2x2_inv) * 2.0 - (2.0 * c + vv[2]) * v2x2_inv * t, -t,
    };
    for (int k = 0; k < 12; ++k) j3->d[k] = j3v[k];
    double jq[10];
    for (int i = 0; i < 2 * n; ++i) jq[i] = mc[i] * s * 1.0 / nf;
    double var_q;
    {
        double row[10];
        for (int j = 0; j < 2 * n; ++j) { double u = jq[0] * RFE(v, 0, j); for (int k = 1; k < 2 * n; ++k) u += jq[k] * RFE(v, k, j); row[j] = u; }
        var_q = rf_dot(row, jq, 2 * n);
    }
    rf_mul(j3, cvc, &w->m1);
    rf_t(j3, &w->j3t);
    rf_mul(&w->m1, &w->j3t, &out->cov);
    rf_scale(&out->cov, tf_sqr(s_inv));
    RfS pp;
    pp.r = 3; pp.c = 3;
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) RFE(&pp, i, j) = par_uvr[i] * par_uvr[j];
    rf_scale(&pp, var_q);
    rf_add(&out->cov, &pp);
}

__device__ void rf_line_fit(const double (*hits)[3], const float (*ge)[6], int n, const RfCircle* circle, const double* ff, double b, RfScratch* w, double* par, double* cov_out, double* chi2_out) {
    double mq = (double)(-circle->q);
    double theta = mq * atan(ff[3]);
    if (theta < 0.0) theta += 3.141592653589793;
    double st = sin(theta), ct = cos(theta);
    RfS rot, rot_t;
    rot.r = 2; rot.c = 2;
    rot.d[0] = st; rot.d[1] = ct; rot.d[2] = -ct; rot.d[3] = st;
    rf_t(&rot, &rot_t);
    double o0 = circle->par[0], o1 = circle->par[1];
    double mo0 = -o0, mo1 = -o1;
    RfS p2d, cov, jx, jxt, m1, m2, tmp2;
    rf_zeros(&p2d, 2, n);
    rf_zeros(&cov, 6, 6);
    double csz[5][4];
    for (int i = 0; i < n; ++i) {
        double p0 = hits[i][0] - o0, p1 = hits[i][1] - o1;
        double cr = rf_cross2(mo0, mo1, p0, p1);
        double dt = mo0 * p0 + mo1 * p1;
        double atan2_ = mq * atan2(cr, dt);
        RFE(&p2d, 0, i) = atan2_ * circle->par[2];
        double temp0 = mq * circle->par[2] * 1.0 / (tf_sqr(dt) + tf_sqr(cr));
        double d_x0 = -temp0 * ((p1 + o1) * dt - (p0 - o0) * cr);
        double d_y0 = temp0 * ((p0 + o0) * dt - (o1 - p1) * cr);
        double d_r = atan2_;
        double d_x = temp0 * (o1 * dt + o0 * cr);
        double d_y = temp0 * (-o0 * dt + o1 * cr);
        jx.r = 2; jx.c = 6;
        double jv[12] = {d_x0, d_y0, d_r, d_x, d_y, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0};
        for (int k = 0; k < 12; ++k) jx.d[k] = jv[k];
        for (int r = 0; r < 3; ++r)
            for (int c = 0; c < 3; ++c) RFE(&cov, r, c) = RFE(&circle->cov, r, c);
        double g[6];
        for (int k = 0; k < 6; ++k) g[k] = (double)ge[i][k];
        RFE(&cov, 3, 3) = g[0];
        RFE(&cov, 4, 4) = g[2];
        RFE(&cov, 5, 5) = g[5];
        RFE(&cov, 3, 4) = g[1];
        RFE(&cov, 4, 3) = g[1];
        RFE(&cov, 3, 5) = g[3];
        RFE(&cov, 5, 3) = g[3];
        RFE(&cov, 4, 5) = g[4];
        RFE(&cov, 5, 4) = g[4];
        rf_mul(&jx, &cov, &m1);
        rf_t(&jx, &jxt);
        rf_mul(&m1, &jxt, &m2);
        rf_mul(&rot, &m2, &m1);
        rf_mul(&m1, &rot_t, &tmp2);
        for (int k = 0; k < 4; ++k) csz[i][k] = tmp2.d[k];
    }
    for (int i = 0; i < n; ++i) RFE(&p2d, 1, i) = hits[i][2];
    double p_t = fmin(ff[2] * b, 20.0);
    double p_2 = p_t * p_t * (1.0 + 1.0 / (ff[3] * ff[3]));
    double s_values[5], rl[5], sig2[5];
    for (int i = 0; i < n; ++i) s_values[i] = sqrt(RFE(&p2d, 0, i) * RFE(&p2d, 0, i) + RFE(&p2d, 1, i) * RFE(&p2d, 1, i));
    rf_rad_len_uniform(s_values, n, rl);
    double f = 0.000225 / p_2;
    for (int i = 0; i < n; ++i) sig2[i] = f * tf_sqr(1.0 + 0.038 * log(rl[i])) * rl[i];
    RfM* tmp = &w->tmp;
    rf_zeros(tmp, 2 * n, 2 * n);
    for (int k = 0; k < n; ++k) {
        RFE(tmp, k, k) = csz[k][0];
        RFE(tmp, k + n, k + n) = csz[k][3];
        RFE(tmp, k, k + n) = csz[k][1];
        RFE(tmp, k + n, k) = csz[k][1];
    }
    for (int k = 0; k < n; ++k)
        for (int l = k; l < n; ++l) {
            for (int i = 0; i < (k < l ? k : l); ++i)
                RFE(tmp, k + n, l + n) += fabs(s_values[k] - s_values[i]) * fabs(s_values[l] - s_values[i]) * sig2[i];
            RFE(tmp, l + n, k + n) = RFE(tmp, k + n, l + n);
        }
    RfS cov_with_ms, p2d_rot, a_mat, a_t, vy_inv, cp0;
    rf_block(tmp, n, n, n, n, &cov_with_ms);
    rf_mul(&rot, &p2d, &p2d_rot);
    a_mat.r = 2; a_mat.c = n;
    for (int i = 0; i < n; ++i) { RFE(&a_mat, 0, i) = 1.0; RFE(&a_mat, 1, i) = RFE(&p2d_rot, 0, i); }
    rf_invert(&cov_with_ms, &vy_inv);
    rf_mul(&a_mat, &vy_inv, &m1);
    rf_t(&a_mat, &a_t);
    rf_mul(&m1, &a_t, &cp0);
    double s00 = RFE(&cp0, 0, 0), s10 = RFE(&cp0, 1, 0), s11 = RFE(&cp0, 1, 1);
    double luc0 = 1.0 / s00;
    double luc1 = s10 * s10 * luc0;
    double luc2 = 1.0 / (s11 - luc1);
    double li21 = luc1 * luc0 * luc2;
    double d10 = -s10 * luc0 * luc2;
    RfS cov_params;
    cov_params.r = 2; cov_params.c = 2;
    cov_params.d[0] = li21 + luc0; cov_params.d[1] = d10; cov_params.d[2] = d10; cov_params.d[3] = luc2;
    double y[5];
    for (int i = 0; i < n; ++i) y[i] = RFE(&p2d_rot, 1, i);
    rf_mul(&cov_params, &a_mat, &m1);
    rf_mul(&m1, &vy_inv, &m2);
    double sol[2];
    rf_mat_vec(&m2, y, sol);
    double common_factor = 1.0 / (st - sol[1] * ct);
    RfS j, jt, cov_mq;
    j.r = 2; j.c = 2;
    j.d[0] = 0.0; j.d[1] = common_factor * common_factor; j.d[2] = common_factor; j.d[3] = sol[0] * ct * common_factor * common_factor;
    double m = common_factor * (sol[1] * st + ct);
    double qv = common_factor * sol[0];
    rf_mul(&j, &cov_params, &m1);
    rf_t(&j, &jt);
    rf_mul(&m1, &jt, &cov_mq);
    double at_sol[5], res[5], vr[5];
    rf_mat_vec(&a_t, sol, at_sol);
    for (int i = 0; i < n; ++i) res[i] = y[i] - at_sol[i];
    rf_mat_vec(&vy_inv, res, vr);
    *chi2_out = rf_dot(res, vr, n);
    par[0] = m; par[1] = qv;
    cov_out[0] = cov_mq.d[0]; cov_out[1] = cov_mq.d[1]; cov_out[2] = cov_mq.d[2]; cov_out[3] = cov_mq.d[3];
}

/// (X0, Y0, R) → (φ, tip, q/R) with the covariance (row-major 3×3 into cov).
__device__ void rf_to_perigee(const RfCircle* c, double* par, double* cov) {
    double q = (double)c->q;
    double x0 = c->par[0], y0 = c->par[1], r = c->par[2];
    double temp0 = x0 * x0 + y0 * y0;
    double temp1 = sqrt(temp0);
    par[0] = atan2(q * x0, (double)(-c->q) * y0);
    par[1] = q * (temp1 - r);
    par[2] = q / r;
    double temp2 = tf_sqr(x0) * 1.0 / temp0;
    double temp3 = 1.0 / temp1 * q;
    RfS j4, j4t, m1, m2;
    j4.r = 3; j4.c = 3;
    double jv[9] = {-y0 * temp2 * 1.0 / tf_sqr(x0), temp2 * 1.0 / x0, 0.0, x0 * temp3, y0 * temp3, -q, 0.0, 0.0, (double)(-c->q) / (r * r)};
    for (int k = 0; k < 9; ++k) j4.d[k] = jv[k];
    rf_mul(&j4, &c->cov, &m1);
    rf_t(&j4, &j4t);
    rf_mul(&m1, &j4t, &m2);
    for (int k = 0; k < 9; ++k) cov[k] = m2.d[k];
}
#endif
