// The small linear algebra of the Broken Line fit: products with the CPU's grouping of
// each sum, the sandwich J·C·Jᵀ, the reference's unrolled Cholesky inversion.
//
// This is a second copy, on purpose, of reco/src/tracks/linalg.rs (the CPU's, in Rust):
// the device code cannot share the Rust, and the two must do the same operations in the
// same order for the GPU fit to equal the CPU's bit for bit (the emulation tests compare
// them). Change both together.
#ifndef QUIVER_FIT_LINALG
#define QUIVER_FIT_LINALG
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
#endif
