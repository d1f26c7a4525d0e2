//! Track quality codes (the reference's `pixelTrack::Quality`), as the `quality` columns of
//! `ntuplets`, `track_fits` and `tracks` hold them (`u8`). One definition: the
//! reconstruction, the validation, the vertex finder and Python (`quiver.Quality`,
//! `quiver.QUALITY_NAMES`, through the extension) all take theirs from here.

/// Track quality (the reference's `trackQuality::Quality`). Only bad, dup and loose are
/// produced.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Quality {
    Bad = 0,
    Dup = 1,
    Loose = 2,
    Strict = 3,
    Tight = 4,
    HighPurity = 5,
}

impl Quality {
    /// The quality with this `u8` value, if any.
    ///
    /// ```
    /// use quiver_formats::quality::Quality;
    /// assert_eq!(Quality::from_u8(2), Some(Quality::Loose));
    /// assert_eq!(Quality::from_u8(6), None);
    /// ```
    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.get(v as usize).copied()
    }

    /// Every quality, in code order (index = code).
    pub const ALL: [Quality; 6] = [
        Quality::Bad,
        Quality::Dup,
        Quality::Loose,
        Quality::Strict,
        Quality::Tight,
        Quality::HighPurity,
    ];

    /// The reference's name of the quality (`pixelTrack::qualityName`), the one Python and
    /// the reports use.
    ///
    /// ```
    /// use quiver_formats::quality::Quality;
    /// assert_eq!(Quality::Loose.name(), "loose");
    /// assert_eq!(Quality::HighPurity.name(), "highPurity");
    /// ```
    pub fn name(self) -> &'static str {
        ["bad", "dup", "loose", "strict", "tight", "highPurity"][self as usize]
    }
}

/// The `u8` codes, for code that compares columns directly.
pub mod codes {
    use super::Quality;
    /// Rejected track.
    pub const BAD: u8 = Quality::Bad as u8;
    /// Duplicate of a better track.
    pub const DUP: u8 = Quality::Dup as u8;
    /// Good track; the only quality the vertex finder uses.
    pub const LOOSE: u8 = Quality::Loose as u8;
}
