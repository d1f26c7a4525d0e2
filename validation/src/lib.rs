//! # quiver-validation
//!
//! Validation of reconstruction against the reference program: its histograms
//! ([`histograms`], with the exact binning of [`hist`] and the text format of [`cppfmt`]),
//! its per-event counts ([`counts`]), and truth performance ([`truth`]). See docs/validation.md.
//!
//! Step types (registered by [`register`]): `histograms`, `count_validator`, `event_counts`.

pub mod capacity;
pub mod chain;
pub mod counts;
pub mod cppfmt;
pub mod error;
pub mod hist;
pub mod histograms;
pub mod html;
pub mod truth;

pub use error::{Result, ValidationError};
pub use hist::Histogram;

/// Registers the validation step types: `histograms`, `count_validator`, `event_counts`.
///
/// ```
/// let mut r = quiver_columnar::Registry::with_builtin();
/// quiver_validation::register(&mut r);
/// assert!(r.get("histograms").is_some() && r.get("count_validator").is_some());
/// assert!(r.describe().contains("input  hits"));
/// ```
pub fn register(r: &mut quiver_columnar::Registry) {
    histograms::register(r);
    counts::register(r);
}
