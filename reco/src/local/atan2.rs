//! Polynomial atan2 in 16-bit integer units (π ↔ 32768), the reference's
//! `unsafe_atan2s<7>` (`DataFormats/approx_atan2.h`), and the conversions around it.

/// Degree-7 odd polynomial of `atan((1−t)/(1+t)) − π/4` scaled to int16 units, in f32.
/// The literals are the exact f32 coefficients of the reference (written in full on purpose).
#[inline]
#[allow(clippy::excessive_precision, clippy::inconsistent_digit_grouping)]
fn poly7(t: f32) -> f32 {
    let z = t * t;
    t * (-10422.177_734_375f32
        + z * (3349.974_121_093_75f32
            + z * (-1525.589_599_609_375f32 + z * 406.641_906_738_281_25f32)))
}

/// `atan2(y, x)` as an int16 angle with π ↔ 32768 (accurate to ±2 units). As in the
/// reference, (0, 0) is not handled specially (NaN ratio: the result is meaningless, as
/// in the reference) and the sum wraps like a 16-bit integer.
///
/// ```
/// use quiver_reco::local::atan2::unsafe_atan2s;
/// assert!((unsafe_atan2s(1.0, 1.0) as i32 - 8192).abs() <= 2);   // π/4
/// assert!((unsafe_atan2s(-1.0, 0.0) as i32 + 16384).abs() <= 2); // −π/2
/// ```
#[inline]
pub fn unsafe_atan2s(y: f32, x: f32) -> i16 {
    const PI4: i32 = 32768 / 4;
    const PI34: i32 = 3 * 32768 / 4;
    let mut r = (x.abs() - y.abs()) / (x.abs() + y.abs());
    if x < 0.0 {
        r = -r;
    }
    let base = if x >= 0.0 { PI4 } else { PI34 };
    // float → short truncates toward zero; the sum is stored back in a short (wraps).
    let angle = (base + poly7(r) as i16 as i32) as i16;
    if y < 0.0 {
        angle.wrapping_neg()
    } else {
        angle
    }
}

/// `phi2short`: radians → int16 units, rounded.
///
/// ```
/// use quiver_reco::local::atan2::{phi2short, short2phi};
/// assert_eq!(phi2short(0.05), 522);
/// assert!((short2phi(522) - 0.05).abs() < 1e-4);
/// ```
pub fn phi2short(phi: f32) -> i16 {
    let p2i = (32768.0f64 / std::f64::consts::PI) as f32;
    (phi * p2i).round() as i32 as i16
}

/// `short2phi`: int16 units → radians (see [`phi2short`]).
pub fn short2phi(s: i16) -> f32 {
    let i2p = (std::f64::consts::PI / 32768.0) as f32;
    s as f32 * i2p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ±2 units against f64 atan2 on a dense grid of directions and radii.
    #[test]
    fn atan2s_within_two_units_of_f64() {
        let mut worst = 0i32;
        let n = 200_000;
        for k in 0..n {
            let a =
                -std::f64::consts::PI + 2.0 * std::f64::consts::PI * (k as f64 + 0.5) / n as f64;
            for &rad in &[1e-3f64, 0.7, 3.0, 17.0] {
                let (x, y) = ((rad * a.cos()) as f32, (rad * a.sin()) as f32);
                let exact = (y as f64).atan2(x as f64) * 32768.0 / std::f64::consts::PI;
                let got = unsafe_atan2s(y, x) as f64;
                // Compare on the circle: int16 wraps at ±32768.
                let mut d = got - exact;
                if d > 32768.0 {
                    d -= 65536.0;
                } else if d < -32768.0 {
                    d += 65536.0;
                }
                worst = worst.max(d.abs().ceil() as i32);
                assert!(d.abs() <= 2.0, "atan2s({y}, {x}) = {got}, exact {exact}");
            }
        }
        assert!(
            worst >= 1,
            "the polynomial is not exact: worst error must be non-zero"
        );
    }

    #[test]
    fn atan2s_axes_and_wrap() {
        let near = |got: i16, want: i32| (got as i32 - want).abs() <= 2;
        assert!(near(unsafe_atan2s(0.0, 1.0), 0));
        assert!(near(unsafe_atan2s(1.0, 0.0), 16384));
        assert!(near(unsafe_atan2s(-1.0, 0.0), -16384));
        // Just below π from above the axis, just above −π from below.
        assert!(unsafe_atan2s(1e-4, -1.0) > 32760);
        assert!(unsafe_atan2s(-1e-4, -1.0) < -32760);
        assert_eq!(phi2short(std::f32::consts::FRAC_PI_2), 16384);
        assert!((short2phi(8192) - std::f32::consts::FRAC_PI_4).abs() < 1e-6);
    }
}
