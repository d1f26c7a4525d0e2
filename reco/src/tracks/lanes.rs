//! The number type of the Broken Line fit: `f64` for one fit, [`F64x4`] for four fits at
//! once. Each lane of an `F64x4` operation is the IEEE operation `f64` does (no fused
//! multiply-add, no reordering), and the C library's functions are called lane by lane, so
//! a fit gives the same bits in either; the lanes only let the compiler use vector
//! instructions for the arithmetic of four independent fits.

use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub};

/// What the fit needs of its numbers.
pub(crate) trait Real:
    Copy
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + MulAssign
{
    /// `x` in every lane.
    fn splat(x: f64) -> Self;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    /// The C library's `log`, as `f64::ln`.
    fn ln(self) -> Self;
    /// The C library's `atan2`, as `f64::atan2`.
    fn atan2(self, x: Self) -> Self;
    fn cos(self) -> Self;
    fn sin(self) -> Self;
    /// `f64::min` with a constant (a NaN gives the constant).
    fn min_c(self, c: f64) -> Self;
    /// Rounded to f32 and back (`x as f32 as f64`).
    fn round_f32(self) -> Self;
    /// `if self > 0.0 { a } else { b }`, lane by lane.
    fn if_pos(self, a: f64, b: f64) -> Self;
    /// Lane `l`'s value (the only one of an `f64`).
    fn lane(self, l: usize) -> f64;
}

/// Shorthand for a constant of the fit's number type.
#[inline(always)]
pub(crate) fn c<T: Real>(x: f64) -> T {
    T::splat(x)
}

impl Real for f64 {
    #[inline(always)]
    fn splat(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        f64::abs(self)
    }
    #[inline(always)]
    fn ln(self) -> Self {
        f64::ln(self)
    }
    #[inline(always)]
    fn atan2(self, x: Self) -> Self {
        f64::atan2(self, x)
    }
    #[inline(always)]
    fn cos(self) -> Self {
        f64::cos(self)
    }
    #[inline(always)]
    fn sin(self) -> Self {
        f64::sin(self)
    }
    #[inline(always)]
    fn min_c(self, c: f64) -> Self {
        self.min(c)
    }
    #[inline(always)]
    fn round_f32(self) -> Self {
        self as f32 as f64
    }
    #[inline(always)]
    fn if_pos(self, a: f64, b: f64) -> Self {
        if self > 0.0 {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    fn lane(self, _: usize) -> f64 {
        self
    }
}

/// Four f64 lanes: four fits side by side.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C, align(32))]
pub(crate) struct F64x4(pub(crate) [f64; 4]);

impl F64x4 {
    #[inline(always)]
    fn map(self, f: impl Fn(f64) -> f64) -> Self {
        let a = self.0;
        F64x4([f(a[0]), f(a[1]), f(a[2]), f(a[3])])
    }
    #[inline(always)]
    fn zip(self, o: Self, f: impl Fn(f64, f64) -> f64) -> Self {
        let (a, b) = (self.0, o.0);
        F64x4([f(a[0], b[0]), f(a[1], b[1]), f(a[2], b[2]), f(a[3], b[3])])
    }
}

macro_rules! lane_op {
    ($tr:ident, $f:ident, $atr:ident, $af:ident, $op:tt) => {
        impl $tr for F64x4 {
            type Output = Self;
            #[inline(always)]
            fn $f(self, o: Self) -> Self {
                self.zip(o, |a, b| a $op b)
            }
        }
        impl $atr for F64x4 {
            #[inline(always)]
            fn $af(&mut self, o: Self) {
                *self = self.zip(o, |a, b| a $op b);
            }
        }
    };
}
lane_op!(Add, add, AddAssign, add_assign, +);
lane_op!(Mul, mul, MulAssign, mul_assign, *);

impl Sub for F64x4 {
    type Output = Self;
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        self.zip(o, |a, b| a - b)
    }
}

impl Div for F64x4 {
    type Output = Self;
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        self.zip(o, |a, b| a / b)
    }
}

impl Neg for F64x4 {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        self.map(|a| -a)
    }
}

impl Real for F64x4 {
    #[inline(always)]
    fn splat(x: f64) -> Self {
        F64x4([x; 4])
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        self.map(f64::sqrt)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        self.map(f64::abs)
    }
    #[inline(always)]
    fn ln(self) -> Self {
        self.map(f64::ln)
    }
    #[inline(always)]
    fn atan2(self, x: Self) -> Self {
        self.zip(x, f64::atan2)
    }
    #[inline(always)]
    fn cos(self) -> Self {
        self.map(f64::cos)
    }
    #[inline(always)]
    fn sin(self) -> Self {
        self.map(f64::sin)
    }
    #[inline(always)]
    fn min_c(self, c: f64) -> Self {
        self.map(|a| a.min(c))
    }
    #[inline(always)]
    fn round_f32(self) -> Self {
        self.map(|a| a as f32 as f64)
    }
    #[inline(always)]
    fn if_pos(self, a: f64, b: f64) -> Self {
        self.map(|x| if x > 0.0 { a } else { b })
    }
    #[inline(always)]
    fn lane(self, l: usize) -> f64 {
        self.0[l]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Scalar = fn(f64, f64) -> f64;

    /// Every lane operation gives the bits of the f64 one, NaN and signed zeros included.
    #[test]
    fn lanes_give_the_scalar_bits() {
        let xs = [
            0.0,
            -0.0,
            1.5,
            -2.25,
            1e-300,
            3.0e300,
            f64::NAN,
            f64::INFINITY,
            0.1,
            -7.3,
            25.0,
            19.999,
        ];
        for w in xs.windows(4) {
            for v in xs.windows(4) {
                let (a, b) = (
                    F64x4([w[0], w[1], w[2], w[3]]),
                    F64x4([v[0], v[1], v[2], v[3]]),
                );
                let ops: [(F64x4, Scalar); 9] = [
                    (a + b, |x, y| x + y),
                    (a - b, |x, y| x - y),
                    (a * b, |x, y| x * y),
                    (a / b, |x, y| x / y),
                    (a.atan2(b), |x, y| Real::atan2(x, y)),
                    (-a, |x, _| -x),
                    (a.ln().sqrt(), |x, _| Real::sqrt(Real::ln(x))),
                    (a.cos() + a.sin().abs(), |x, _| {
                        Real::cos(x) + Real::abs(Real::sin(x))
                    }),
                    (a.min_c(20.0).round_f32() * a.if_pos(-1.0, 1.0), |x, _| {
                        Real::round_f32(Real::min_c(x, 20.0)) * Real::if_pos(x, -1.0, 1.0)
                    }),
                ];
                for (k, (lanes, f)) in ops.iter().enumerate() {
                    for l in 0..4 {
                        assert_eq!(
                            lanes.0[l].to_bits(),
                            f(a.0[l], b.0[l]).to_bits(),
                            "op {k} lane {l}"
                        );
                    }
                }
            }
        }
    }
}
