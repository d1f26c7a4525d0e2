//! Number formatting as a default-configured C++ `std::ostream` writes it, so that our text
//! outputs can be diffed byte for byte against the reference's.
//!
//! `os << float` (and `<< double`) with the default flags and precision 6 behaves like
//! `printf("%g")`: 6 significant digits, scientific notation when the decimal exponent is
//! below −4 or at least 6, trailing zeros (and a trailing point) removed, and an exponent
//! of at least two digits with its sign. A `float` is widened to `double` first, which is
//! exact, so both go through [`format_g`].

/// Formats `v` like C's `%.{precision}g` (C++ `ostream` default: precision 6).
///
/// ```
/// use quiver_validation::cppfmt::format_g;
/// assert_eq!(format_g(100000.0, 6), "100000");
/// assert_eq!(format_g(1e6, 6), "1e+06");
/// assert_eq!(format_g(5e-5_f32 as f64, 6), "5e-05");
/// assert_eq!(format_g(-3.15_f32 as f64, 6), "-3.15");
/// ```
pub fn format_g(v: f64, precision: usize) -> String {
    let p = precision.max(1);
    if v.is_nan() {
        // glibc prints the sign bit of a NaN too.
        return if v.is_sign_negative() {
            "-nan".into()
        } else {
            "nan".into()
        };
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf".into() } else { "inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // The exponent after rounding to p significant digits decides the style (C11 7.21.6.1).
    let sci = format!("{:.*e}", p - 1, v);
    let (mantissa, exp) = sci
        .split_once('e')
        .expect("Rust's {:e} always has an exponent");
    let x: i32 = exp.parse().expect("exponent is an integer");
    if x < -4 || x >= p as i32 {
        let m = strip_zeros(mantissa);
        let sign = if x < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", x.unsigned_abs())
    } else {
        let decimals = (p as i32 - 1 - x) as usize;
        strip_zeros(&format!("{v:.decimals$}")).to_string()
    }
}

/// `os << (float)v` with default stream settings.
///
/// ```
/// use quiver_validation::cppfmt::format_float;
/// assert_eq!(format_float(0.05), "0.05");
/// assert_eq!(format_float(4e6), "4e+06");
/// ```
pub fn format_float(v: f32) -> String {
    format_g(v as f64, 6)
}

/// Removes trailing zeros of a fractional part, and the point if nothing is left after it.
fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_histogram_limits() {
        // Every min/max of the reference's histogram table, as the C++ program prints them.
        let cases: &[(f32, &str)] = &[
            (0.0, "0"),
            (1e5, "100000"),
            (5e4, "50000"),
            (1500.0, "1500"),
            (2000.0, "2000"),
            (5000.0, "5000"),
            (25000.0, "25000"),
            (110.0, "110"),
            (-1.0, "-1"),
            (1.0, "1"),
            (-4.0, "-4"),
            (4.0, "4"),
            (5e-5, "5e-05"),
            (1e-4, "0.0001"),
            (-20.0, "-20"),
            (20.0, "20"),
            (-60.0, "-60"),
            (60.0, "60"),
            (4e6, "4e+06"),
            (800.0, "800"),
            (15000.0, "15000"),
            (3.0, "3"),
            (6.0, "6"),
            (40.0, "40"),
            (400.0, "400"),
            (-3.0, "-3"),
            (-3.15, "-3.15"),
            (3.15, "3.15"),
            (-0.05, "-0.05"),
            (0.05, "0.05"),
            (-15.0, "-15"),
            (15.0, "15"),
            (-0.1, "-0.1"),
            (0.1, "0.1"),
            (170.0, "170"),
            (4000.0, "4000"),
        ];
        for &(v, want) in cases {
            assert_eq!(format_float(v), want, "value {v:e}");
        }
    }

    #[test]
    fn general_g_rules() {
        assert_eq!(format_g(1e6, 6), "1e+06");
        assert_eq!(format_g(999999.0, 6), "999999");
        assert_eq!(format_g(9999995.0, 6), "1e+07");
        assert_eq!(format_g(123456789.0, 6), "1.23457e+08");
        assert_eq!(format_g(0.000123456, 6), "0.000123456");
        assert_eq!(format_g(1.5e-7, 6), "1.5e-07");
        assert_eq!(format_g(1e100, 6), "1e+100");
        assert_eq!(format_g(-2.5e-300, 6), "-2.5e-300");
        assert_eq!(format_g(0.1 + 0.2, 6), "0.3");
        assert_eq!(format_g(1.0 / 3.0, 6), "0.333333");
        assert_eq!(format_g(2.0 / 3.0, 6), "0.666667");
        assert_eq!(format_g(-0.0, 6), "-0");
        assert_eq!(format_g(f64::INFINITY, 6), "inf");
        assert_eq!(format_g(f64::NEG_INFINITY, 6), "-inf");
        assert_eq!(format_g(f64::NAN, 6), "nan");
        // 0.012f widened to double is 0.0120000001; six digits hide that.
        assert_eq!(format_float(0.012), "0.012");
        assert_eq!(format_g(0.5, 1), "0.5");
        assert_eq!(format_g(12.0, 1), "1e+01");
    }
}
