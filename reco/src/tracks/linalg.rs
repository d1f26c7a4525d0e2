//! The small linear algebra of the helix fits (Broken Line in [`super::fit`], Riemann in
//! [`super::riemann`]): fixed-size matrices up to 6×6 with Eigen's summation orders (the
//! reference's fits are Eigen code, and the order of a sum decides its last bit), a
//! dynamic row-major matrix for the Riemann fit, the reference's unrolled Cholesky
//! inversion, and 2-vector helpers. One copy, shared by both fits.

use std::ops::{Index, IndexMut};

use super::lanes::{c, Real};

/// Largest matrix handled (5 hits + the curvature correction).
pub(crate) const MX: usize = 6;
pub(crate) type Mat<T = f64> = [[T; MX]; MX];

#[inline(always)]
pub(crate) fn sqr<T: Real>(x: T) -> T {
    x * x
}
#[inline(always)]
pub(crate) fn cross2<T: Real>(a: [T; 2], b: [T; 2]) -> T {
    a[0] * b[1] - a[1] * b[0]
}
#[inline(always)]
pub(crate) fn dot2<T: Real>(a: [T; 2], b: [T; 2]) -> T {
    a[0] * b[0] + a[1] * b[1]
}
#[inline(always)]
pub(crate) fn sub2<T: Real>(a: [T; 2], b: [T; 2]) -> [T; 2] {
    [a[0] - b[0], a[1] - b[1]]
}

#[inline(always)]
pub(crate) fn mul<T: Real, const R: usize, const K: usize, const C: usize>(
    a: &[[T; K]; R],
    b: &[[T; C]; K],
) -> [[T; C]; R] {
    let mut o = [[c(0.0); C]; R];
    let mut t = [c(0.0); K];
    for i in 0..R {
        for j in 0..C {
            for k in 0..K {
                t[k] = a[i][k] * b[k][j];
            }
            o[i][j] = if K % 2 == 1 {
                tree_sum(&t)
            } else {
                seq_sum(&t)
            };
        }
    }
    o
}

#[inline(always)]
pub(crate) fn transpose<T: Real, const R: usize, const C: usize>(a: &[[T; C]; R]) -> [[T; R]; C] {
    let mut o = [[c(0.0); R]; C];
    for i in 0..R {
        for j in 0..C {
            o[j][i] = a[i][j];
        }
    }
    o
}

/// J·C·Jᵀ (inlined: in the fit compiled for AVX2 it takes that encoding too).
#[inline(always)]
pub(crate) fn sandwich<T: Real, const N: usize>(j: &[[T; N]; N], m: &[[T; N]; N]) -> [[T; N]; N] {
    mul(&mul(j, m), &transpose(j))
}

/// Inverse of a symmetric positive-definite `n`×`n` matrix (n = 3..6) by the reference's
/// unrolled Cholesky formulas (reads the lower triangle, returns a symmetric matrix). The
/// phases below follow the reference's size cascade: the terms of the first rows, then one
/// more row of the factor per size.
#[inline(always)]
pub(crate) fn cholesky_invert<T: Real>(src: &Mat<T>, n: usize) -> Mat<T> {
    let s = |i: usize, j: usize| src[i][j];
    let mut d = [[c(0.0); MX]; MX];
    let luc0 = c::<T>(1.0) / s(0, 0);
    let luc1 = s(1, 0);
    let mut luc2 = s(1, 1) - luc0 * luc1 * luc1;
    luc2 = c::<T>(1.0) / luc2;
    let luc3 = s(2, 0);
    let luc4 = s(2, 1) - luc0 * luc1 * luc3;
    if n == 3 {
        let mut luc5 = s(2, 2) - (luc0 * luc3 * luc3 + (luc2 * luc4) * luc4);
        luc5 = c::<T>(1.0) / luc5;
        let li21 = -luc0 * luc1;
        let li32 = -(luc2 * luc4);
        let li31 = (luc1 * (luc2 * luc4) - luc3) * luc0;
        d[0][0] = luc5 * li31 * li31 + li21 * li21 * luc2 + luc0;
        d[1][0] = luc5 * li31 * li32 + li21 * luc2;
        d[1][1] = luc5 * li32 * li32 + luc2;
        d[2][0] = luc5 * li31;
        d[2][1] = luc5 * li32;
        d[2][2] = luc5;
    } else {
        invert_4_to_6(src, n, [luc0, luc1, luc2, luc3, luc4], &mut d);
    }
    for i in 0..n {
        for j in 0..i {
            d[j][i] = d[i][j];
        }
    }
    d
}

/// [`cholesky_invert`] for n = 4..6 from the terms of the first three rows; fills the
/// lower triangle of `d`.
#[inline(always)]
fn invert_4_to_6<T: Real>(src: &Mat<T>, n: usize, l: [T; 5], d: &mut Mat<T>) {
    let s = |i: usize, j: usize| src[i][j];
    let [luc0, luc1, luc2, luc3, luc4] = l;
    let mut luc5 = s(2, 2) - (luc0 * luc3 * luc3 + luc2 * luc4 * luc4);
    luc5 = c::<T>(1.0) / luc5;
    let luc6 = s(3, 0);
    let luc7 = s(3, 1) - luc0 * luc1 * luc6;
    let luc8 = s(3, 2) - luc0 * luc3 * luc6 - luc2 * luc4 * luc7;
    let mut luc9 = s(3, 3) - (luc0 * luc6 * luc6 + luc2 * luc7 * luc7 + luc8 * (luc8 * luc5));
    luc9 = c::<T>(1.0) / luc9;
    let li21 = -luc1 * luc0;
    let li32 = -luc2 * luc4;
    let li31 = (luc1 * (luc2 * luc4) - luc3) * luc0;
    let li43 = -(luc8 * luc5);
    let li42 = (luc4 * luc8 * luc5 - luc7) * luc2;
    let li41 =
        (-luc1 * (luc2 * luc4) * (luc8 * luc5) + luc1 * (luc2 * luc7) + luc3 * (luc8 * luc5)
            - luc6)
            * luc0;
    if n == 4 {
        d[0][0] = luc9 * li41 * li41 + luc5 * li31 * li31 + luc2 * li21 * li21 + luc0;
        d[1][0] = luc9 * li41 * li42 + luc5 * li31 * li32 + luc2 * li21;
        d[1][1] = luc9 * li42 * li42 + luc5 * li32 * li32 + luc2;
        d[2][0] = luc9 * li41 * li43 + luc5 * li31;
        d[2][1] = luc9 * li42 * li43 + luc5 * li32;
        d[2][2] = luc9 * li43 * li43 + luc5;
        d[3][0] = luc9 * li41;
        d[3][1] = luc9 * li42;
        d[3][2] = luc9 * li43;
        d[3][3] = luc9;
    } else {
        let l = [luc0, luc1, luc2, luc3, luc4, luc5, luc6, luc7, luc8, luc9];
        invert_5_or_6(src, n, l, [li21, li31, li32, li41, li42, li43], d);
    }
}

/// [`cholesky_invert`] for n = 5, 6 from the terms (`l`) and inverse factor (`li`: 21, 31,
/// 32, 41, 42, 43) of the first four rows.
#[inline(always)]
fn invert_5_or_6<T: Real>(src: &Mat<T>, n: usize, l: [T; 10], li: [T; 6], d: &mut Mat<T>) {
    let s = |i: usize, j: usize| src[i][j];
    let [luc0, luc1, luc2, luc3, luc4, luc5, luc6, luc7, luc8, luc9] = l;
    let [li21, li31, li32, li41, li42, li43] = li;
    let luc10 = s(4, 0);
    let luc11 = s(4, 1) - luc0 * luc1 * luc10;
    let luc12 = s(4, 2) - luc0 * luc3 * luc10 - luc2 * luc4 * luc11;
    let luc13 = s(4, 3) - luc0 * luc6 * luc10 - luc2 * luc7 * luc11 - luc5 * luc8 * luc12;
    let mut luc14 = s(4, 4)
        - (luc0 * luc10 * luc10
            + luc2 * luc11 * luc11
            + luc5 * luc12 * luc12
            + luc9 * luc13 * luc13);
    luc14 = c::<T>(1.0) / luc14;
    let li54 = -luc13 * luc9;
    let li53 = (luc13 * luc8 * luc9 - luc12) * luc5;
    let li52 = (-luc4 * luc8 * luc13 * luc5 * luc9 + luc4 * luc12 * luc5 + luc7 * luc13 * luc9
        - luc11)
        * luc2;
    let li51 = (luc1 * luc4 * luc8 * luc13 * luc2 * luc5 * luc9
        - luc13 * luc8 * luc3 * luc9 * luc5
        - luc12 * luc4 * luc1 * luc2 * luc5
        - luc13 * luc7 * luc1 * luc9 * luc2
        + luc11 * luc1 * luc2
        + luc12 * luc3 * luc5
        + luc13 * luc6 * luc9
        - luc10)
        * luc0;
    if n == 5 {
        d[0][0] = luc14 * li51 * li51
            + luc9 * li41 * li41
            + luc5 * li31 * li31
            + luc2 * li21 * li21
            + luc0;
        d[1][0] = luc14 * li51 * li52 + luc9 * li41 * li42 + luc5 * li31 * li32 + luc2 * li21;
        d[1][1] = luc14 * li52 * li52 + luc9 * li42 * li42 + luc5 * li32 * li32 + luc2;
        d[2][0] = luc14 * li51 * li53 + luc9 * li41 * li43 + luc5 * li31;
        d[2][1] = luc14 * li52 * li53 + luc9 * li42 * li43 + luc5 * li32;
        d[2][2] = luc14 * li53 * li53 + luc9 * li43 * li43 + luc5;
        d[3][0] = luc14 * li51 * li54 + luc9 * li41;
        d[3][1] = luc14 * li52 * li54 + luc9 * li42;
        d[3][2] = luc14 * li53 * li54 + luc9 * li43;
        d[3][3] = luc14 * li54 * li54 + luc9;
        d[4][0] = luc14 * li51;
        d[4][1] = luc14 * li52;
        d[4][2] = luc14 * li53;
        d[4][3] = luc14 * li54;
        d[4][4] = luc14;
    } else {
        let l = [
            luc0, luc1, luc2, luc3, luc4, luc5, luc6, luc7, luc8, luc9, luc10, luc11, luc12, luc13,
            luc14,
        ];
        let li = [li21, li31, li32, li41, li42, li43, li51, li52, li53, li54];
        invert_6(src, l, li, d);
    }
}

/// [`cholesky_invert`] for n = 6 from the terms (`l`) and inverse factor (`li`: 21, 31, 32,
/// 41, 42, 43, 51, 52, 53, 54) of the first five rows.
#[inline(always)]
fn invert_6<T: Real>(src: &Mat<T>, l: [T; 15], li: [T; 10], d: &mut Mat<T>) {
    let s = |i: usize, j: usize| src[i][j];
    let [luc0, luc1, luc2, luc3, luc4, luc5, luc6, luc7, luc8, luc9, luc10, luc11, luc12, luc13, luc14] =
        l;
    let [li21, li31, li32, li41, li42, li43, li51, li52, li53, li54] = li;
    let luc15 = s(5, 0);
    let luc16 = s(5, 1) - luc0 * luc1 * luc15;
    let luc17 = s(5, 2) - luc0 * luc3 * luc15 - luc2 * luc4 * luc16;
    let luc18 = s(5, 3) - luc0 * luc6 * luc15 - luc2 * luc7 * luc16 - luc5 * luc8 * luc17;
    let luc19 = s(5, 4)
        - luc0 * luc10 * luc15
        - luc2 * luc11 * luc16
        - luc5 * luc12 * luc17
        - luc9 * luc13 * luc18;
    let mut luc20 = s(5, 5)
        - (luc0 * luc15 * luc15
            + luc2 * luc16 * luc16
            + luc5 * luc17 * luc17
            + luc9 * luc18 * luc18
            + luc14 * luc19 * luc19);
    luc20 = c::<T>(1.0) / luc20;
    let li65 = -luc19 * luc14;
    let li64 = (luc19 * luc14 * luc13 - luc18) * luc9;
    let li63 =
        (-luc8 * luc13 * (luc19 * luc14) * luc9 + luc8 * luc9 * luc18 + luc12 * (luc19 * luc14)
            - luc17)
            * luc5;
    let li62 = (luc4 * (luc8 * luc9) * luc13 * luc5 * (luc19 * luc14)
        - luc18 * luc4 * (luc8 * luc9) * luc5
        - luc19 * luc12 * luc4 * luc14 * luc5
        - luc19 * luc13 * luc7 * luc14 * luc9
        + luc17 * luc4 * luc5
        + luc18 * luc7 * luc9
        + luc19 * luc11 * luc14
        - luc16)
        * luc2;
    let li61 = (-luc19 * luc13 * luc8 * luc4 * luc1 * luc2 * luc5 * luc9 * luc14
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
    d[0][0] = luc20 * li61 * li61
        + luc14 * li51 * li51
        + luc9 * li41 * li41
        + luc5 * li31 * li31
        + luc2 * li21 * li21
        + luc0;
    d[1][0] = luc20 * li61 * li62
        + luc14 * li51 * li52
        + luc9 * li41 * li42
        + luc5 * li31 * li32
        + luc2 * li21;
    d[1][1] =
        luc20 * li62 * li62 + luc14 * li52 * li52 + luc9 * li42 * li42 + luc5 * li32 * li32 + luc2;
    d[2][0] = luc20 * li61 * li63 + luc14 * li51 * li53 + luc9 * li41 * li43 + luc5 * li31;
    d[2][1] = luc20 * li62 * li63 + luc14 * li52 * li53 + luc9 * li42 * li43 + luc5 * li32;
    d[2][2] = luc20 * li63 * li63 + luc14 * li53 * li53 + luc9 * li43 * li43 + luc5;
    d[3][0] = luc20 * li61 * li64 + luc14 * li51 * li54 + luc9 * li41;
    d[3][1] = luc20 * li62 * li64 + luc14 * li52 * li54 + luc9 * li42;
    d[3][2] = luc20 * li63 * li64 + luc14 * li53 * li54 + luc9 * li43;
    d[3][3] = luc20 * li64 * li64 + luc14 * li54 * li54 + luc9;
    d[4][0] = luc20 * li61 * li65 + luc14 * li51;
    d[4][1] = luc20 * li62 * li65 + luc14 * li52;
    d[4][2] = luc20 * li63 * li65 + luc14 * li53;
    d[4][3] = luc20 * li64 * li65 + luc14 * li54;
    d[4][4] = luc20 * li65 * li65 + luc14;
    d[5][0] = luc20 * li61;
    d[5][1] = luc20 * li62;
    d[5][2] = luc20 * li63;
    d[5][3] = luc20 * li64;
    d[5][4] = luc20 * li65;
    d[5][5] = luc20;
}

/// Sum grouped as Eigen's unrolled reduction does: halves, recursively.
#[inline(always)]
pub(crate) fn tree_sum<T: Real>(t: &[T]) -> T {
    // The short lengths spelled out (same grouping) so that the sums inline.
    match t.len() {
        1 => t[0],
        2 => t[0] + t[1],
        3 => t[0] + (t[1] + t[2]),
        _ => tree_sum_split(t),
    }
}

pub(crate) fn tree_sum_split<T: Real>(t: &[T]) -> T {
    let h = t.len() / 2;
    tree_sum(&t[..h]) + tree_sum(&t[h..])
}

#[inline(always)]
pub(crate) fn mat_vec<T: Real>(m: &Mat<T>, v: &[T; MX], n: usize) -> [T; MX] {
    let mut o = [c(0.0); MX];
    let mut t = [c(0.0); MX];
    for i in 0..n {
        for k in 0..n {
            t[k] = m[i][k] * v[k];
        }
        o[i] = seq_sum(&t[..n]);
    }
    o
}

#[inline(always)]
pub(crate) fn seq_sum<T: Real>(t: &[T]) -> T {
    let mut s = t[0];
    for x in &t[1..] {
        s += *x;
    }
    s
}

/// Small dense row-major matrix (the Riemann fit's dynamic sizes).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Mx {
    pub(crate) r: usize,
    pub(crate) c: usize,
    pub(crate) d: Vec<f64>,
}

impl Index<(usize, usize)> for Mx {
    type Output = f64;
    fn index(&self, (i, j): (usize, usize)) -> &f64 {
        &self.d[i * self.c + j]
    }
}
impl IndexMut<(usize, usize)> for Mx {
    fn index_mut(&mut self, (i, j): (usize, usize)) -> &mut f64 {
        &mut self.d[i * self.c + j]
    }
}

impl Mx {
    pub(crate) fn zeros(r: usize, c: usize) -> Self {
        Self {
            r,
            c,
            d: vec![0.0; r * c],
        }
    }
    pub(crate) fn from_fn(r: usize, c: usize, f: impl Fn(usize, usize) -> f64) -> Self {
        let mut m = Self::zeros(r, c);
        for i in 0..r {
            for j in 0..c {
                m[(i, j)] = f(i, j);
            }
        }
        m
    }
    pub(crate) fn mul(&self, b: &Mx) -> Mx {
        let mut o = Mx::zeros(self.r, b.c);
        for i in 0..self.r {
            for j in 0..b.c {
                let mut s = self[(i, 0)] * b[(0, j)];
                for k in 1..self.c {
                    s += self[(i, k)] * b[(k, j)];
                }
                o[(i, j)] = s;
            }
        }
        o
    }
    pub(crate) fn t(&self) -> Mx {
        Mx::from_fn(self.c, self.r, |i, j| self[(j, i)])
    }
    pub(crate) fn scale(&self, s: f64) -> Mx {
        Mx {
            r: self.r,
            c: self.c,
            d: self.d.iter().map(|x| x * s).collect(),
        }
    }
    pub(crate) fn add(&self, b: &Mx) -> Mx {
        Mx {
            r: self.r,
            c: self.c,
            d: self.d.iter().zip(&b.d).map(|(x, y)| x + y).collect(),
        }
    }
    pub(crate) fn cwise(&self, b: &Mx) -> Mx {
        Mx {
            r: self.r,
            c: self.c,
            d: self.d.iter().zip(&b.d).map(|(x, y)| x * y).collect(),
        }
    }
    pub(crate) fn sum(&self) -> f64 {
        // Column-major order, as Eigen stores matrices.
        let mut s = 0.0;
        let mut first = true;
        for j in 0..self.c {
            for i in 0..self.r {
                if first {
                    s = self[(i, j)];
                    first = false;
                } else {
                    s += self[(i, j)];
                }
            }
        }
        s
    }
    pub(crate) fn col(&self, j: usize) -> Vec<f64> {
        (0..self.r).map(|i| self[(i, j)]).collect()
    }
    pub(crate) fn mat_vec(&self, v: &[f64]) -> Vec<f64> {
        (0..self.r)
            .map(|i| {
                let mut s = self[(i, 0)] * v[0];
                for k in 1..self.c {
                    s += self[(i, k)] * v[k];
                }
                s
            })
            .collect()
    }
    /// Copies the upper triangle onto the lower one (Eigen's `selfadjointView<Upper>`).
    pub(crate) fn sym_from_upper(&mut self) {
        for i in 0..self.r {
            for j in 0..i {
                self[(i, j)] = self[(j, i)];
            }
        }
    }
    pub(crate) fn block(&self, r0: usize, c0: usize, r: usize, c: usize) -> Mx {
        Mx::from_fn(r, c, |i, j| self[(r0 + i, c0 + j)])
    }
    pub(crate) fn invert(&self) -> Mx {
        let n = self.r;
        let mut a = [[0.0f64; 6]; 6];
        for i in 0..n {
            for j in 0..n {
                a[i][j] = self[(i, j)];
            }
        }
        let inv = cholesky_invert(&a, n);
        Mx::from_fn(n, n, |i, j| inv[i][j])
    }
}

pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut s = a[0] * b[0];
    for k in 1..a.len() {
        s += a[k] * b[k];
    }
    s
}
