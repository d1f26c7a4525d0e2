//! The classifier's feature vector of every track of one event, from the `tracks` columns
//! and the event's rec hits. Each feature is defined once, in `docs/steps.md`
//! (`track_classifier`); `quiver.classifier` computes the same values in numpy (f32, the
//! same operations in the same order).

use quiver_formats::quality::codes::LOOSE;
use quiver_formats::topology::{layer_of, NUMBER_OF_MODULES};

/// Feature names, in the order of the feature vector (a model file must list the same).
pub const FEATURES: [&str; 22] = [
    "n_hits",
    "layer_gaps",
    "first_layer",
    "n_barrel",
    "chi2",
    "chi2_ndof",
    "pt",
    "abs_eta",
    "abs_tip",
    "zip",
    "sigma_phi",
    "sigma_tip",
    "sigma_pt_rel",
    "sigma_cot",
    "sigma_zip",
    "size_y_excess_mean",
    "size_y_excess_max",
    "size_x_mean",
    "charge_norm_mean",
    "charge_norm_min",
    "edge_hits",
    "shared_hits",
];

/// Number of features.
pub const N_FEATURES: usize = FEATURES.len();

/// Barrel cluster length along z expected per unit |cotθ|: sensor thickness 285 µm over
/// the 150 µm pitch, in the hits' 1/8-pixel units.
pub const SIZE_Y_PER_COT: f32 = 8.0 * 0.0285 / 0.015;

/// One event's tracks, as the `tracks` product's columns hold them (rows of the event).
pub struct TracksIn<'a> {
    pub quality: &'a [u8],
    pub pt: &'a [f32],
    pub eta: &'a [f32],
    pub tip: &'a [f32],
    pub zip: &'a [f32],
    pub chi2: &'a [f32],
    /// 5 per track: φ, tip, q/pT, cotθ, zip.
    pub state: &'a [f32],
    /// 15 per track, the upper triangle of the state covariance row by row.
    pub covariance: &'a [f32],
    /// Offsets into `hits`, one more than tracks (need not start at 0).
    pub hit_offsets: &'a [i32],
    /// Hit indices within the event.
    pub hits: &'a [u32],
}

/// The event's rec hits (the `hits` product's columns).
pub struct HitsIn<'a> {
    pub det_index: &'a [u16],
    pub size_x: &'a [i16],
    pub size_y: &'a [i16],
    pub charge: &'a [i32],
}

/// Input the features cannot be computed from.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FeatureError {
    #[error("product 'tracks': track {track}: hit {hit} is not one of the event's {n_hits} hits")]
    HitOutOfRange {
        track: usize,
        hit: u32,
        n_hits: usize,
    },
    #[error("product 'hits': hit {hit}: detIndex {det} is not a module (0..{NUMBER_OF_MODULES})")]
    BadModule { hit: usize, det: u16 },
    #[error("product 'tracks': column '{column}' has {len} values for {tracks} tracks")]
    Length {
        column: &'static str,
        len: usize,
        tracks: usize,
    },
    #[error("product 'hits': the columns differ in length")]
    HitLength,
    #[error(
        "product 'tracks': track {track}: hit list offsets {a}..{b} are not within its {n} values"
    )]
    Offsets {
        track: usize,
        a: i32,
        b: i32,
        n: usize,
    },
}

/// Non-finite inputs give NaN → −1, ±∞ → ±f32::MAX, so every feature is finite.
fn finite(x: f32) -> f32 {
    if x.is_nan() {
        -1.0
    } else {
        x.clamp(-f32::MAX, f32::MAX)
    }
}

/// Layer gaps between two consecutive hits: layers skipped within the barrel or within one
/// forward side; a barrel → forward step skips none.
fn gap(a: u8, b: u8) -> u32 {
    let side = |l: u8| match l {
        0..=3 => 0,
        4..=6 => 1,
        _ => 2,
    };
    if side(a) == side(b) && b > a {
        (b - a - 1) as u32
    } else {
        0
    }
}

impl TracksIn<'_> {
    fn check(&self) -> Result<usize, FeatureError> {
        let n = self.quality.len();
        for (column, len, per) in [
            ("pt", self.pt.len(), 1),
            ("eta", self.eta.len(), 1),
            ("tip", self.tip.len(), 1),
            ("zip", self.zip.len(), 1),
            ("chi2", self.chi2.len(), 1),
            ("state", self.state.len(), 5),
            ("covariance", self.covariance.len(), 15),
            ("hits (offsets)", self.hit_offsets.len(), 1),
        ] {
            let want = if column == "hits (offsets)" {
                n + 1
            } else {
                n * per
            };
            if len != want {
                return Err(FeatureError::Length {
                    column,
                    len,
                    tracks: n,
                });
            }
        }
        Ok(n)
    }

    /// Track `t`'s hits, checked.
    fn hits_of(&self, t: usize, n_hits: usize) -> Result<&[u32], FeatureError> {
        let (a, b) = (self.hit_offsets[t], self.hit_offsets[t + 1]);
        let base = self.hit_offsets[0];
        let (lo, hi) = ((a - base) as usize, (b - base) as usize);
        if a < base || b < a || hi > self.hits.len() {
            return Err(FeatureError::Offsets {
                track: t,
                a,
                b,
                n: self.hits.len(),
            });
        }
        let hits = &self.hits[lo..hi];
        if let Some(&hit) = hits.iter().find(|&&h| h as usize >= n_hits) {
            return Err(FeatureError::HitOutOfRange {
                track: t,
                hit,
                n_hits,
            });
        }
        Ok(hits)
    }
}

/// The feature matrix of one event: [`N_FEATURES`] values per track, row-major.
///
/// ```
/// use quiver_reco::classifier::features::{track_features, HitsIn, TracksIn, FEATURES, N_FEATURES};
/// let cov = [0f32; 15];
/// let tracks = TracksIn {
///     quality: &[2], pt: &[1.5], eta: &[0.5], tip: &[0.01], zip: &[-2.0], chi2: &[3.0],
///     state: &[0.1, 0.01, 0.6, 0.52, -2.0], covariance: &cov,
///     hit_offsets: &[0, 3], hits: &[0, 1, 2],
/// };
/// let hits = HitsIn {
///     det_index: &[10, 100, 400], size_x: &[16, 16, 24], size_y: &[16, 24, -16],
///     charge: &[20000, 22000, 30000],
/// };
/// let x = track_features(&tracks, &hits).unwrap();
/// assert_eq!(x.len(), N_FEATURES);
/// let f = |name: &str| x[FEATURES.iter().position(|&n| n == name).unwrap()];
/// assert_eq!(f("n_hits"), 3.0);
/// assert_eq!(f("layer_gaps"), 0.0); // BPix1, BPix2, BPix3
/// assert_eq!(f("edge_hits"), 1.0);
/// ```
pub fn track_features(t: &TracksIn, h: &HitsIn) -> Result<Vec<f32>, FeatureError> {
    features_of(t, h, |_| true).map(|(_, x)| x)
}

/// The rows of the tracks of quality ≥ loose (the only ones the classifier scores) and
/// their feature matrix (rows of [`track_features`]); every track's hits are checked.
pub fn loose_track_features(
    t: &TracksIn,
    h: &HitsIn,
) -> Result<(Vec<usize>, Vec<f32>), FeatureError> {
    features_of(t, h, |q| q >= LOOSE)
}

fn features_of(
    t: &TracksIn,
    h: &HitsIn,
    keep: impl Fn(u8) -> bool,
) -> Result<(Vec<usize>, Vec<f32>), FeatureError> {
    let n = t.check()?;
    let n_hits = h.det_index.len();
    if [h.size_x.len(), h.size_y.len(), h.charge.len()] != [n_hits; 3] {
        return Err(FeatureError::HitLength);
    }
    let mut layer = Vec::with_capacity(n_hits);
    for (hit, &det) in h.det_index.iter().enumerate() {
        if det >= NUMBER_OF_MODULES {
            return Err(FeatureError::BadModule { hit, det });
        }
        layer.push(layer_of(det));
    }
    // Loose (or better) tracks using each hit.
    let mut users = vec![0u32; n_hits];
    let mut lists = Vec::with_capacity(n);
    for tr in 0..n {
        let hits = t.hits_of(tr, n_hits)?;
        if t.quality[tr] >= LOOSE {
            for &k in hits {
                users[k as usize] += 1;
            }
        }
        lists.push(hits);
    }
    let rows: Vec<usize> = (0..n).filter(|&tr| keep(t.quality[tr])).collect();
    let mut out = Vec::with_capacity(rows.len() * N_FEATURES);
    for &tr in &rows {
        let hits = lists[tr];
        let nh = hits.len() as f32;
        let mut gaps = 0u32;
        for w in hits.windows(2) {
            gaps += gap(layer[w[0] as usize], layer[w[1] as usize]);
        }
        let cot = t.state[tr * 5 + 3];
        let abs_cot = cot.abs();
        let s = (1.0 + cot * cot).sqrt();
        let own = (t.quality[tr] >= LOOSE) as u32;
        let (mut n_barrel, mut excess_sum, mut excess_max) = (0u32, 0f32, 0f32);
        let (mut sx_sum, mut q_sum, mut q_min) = (0f32, 0f32, f32::MAX);
        let (mut edges, mut shared) = (0u32, 0u32);
        for &k in hits {
            let k = k as usize;
            let (sx, sy) = (h.size_x[k], h.size_y[k]);
            edges += (sx < 0 || sy < 0) as u32;
            shared += (users[k] > own) as u32;
            sx_sum += (sx as f32).abs();
            let barrel = layer[k] < 4;
            let q = h.charge[k] as f32 * if barrel { 1.0 / s } else { abs_cot / s };
            q_sum += q;
            q_min = q_min.min(q);
            if barrel {
                n_barrel += 1;
                let excess = (sy as f32).abs() - SIZE_Y_PER_COT * abs_cot;
                excess_sum += excess;
                excess_max = excess_max.max(excess.abs());
            }
        }
        let mean = |sum: f32, count: f32| if count > 0.0 { sum / count } else { 0.0 };
        let c = &t.covariance[tr * 15..tr * 15 + 15];
        let ndof = (2.0 * nh - 5.0).max(1.0);
        let row = [
            nh,
            gaps as f32,
            hits.first().map_or(-1.0, |&k| layer[k as usize] as f32),
            n_barrel as f32,
            t.chi2[tr],
            t.chi2[tr] / ndof,
            t.pt[tr],
            t.eta[tr].abs(),
            t.tip[tr].abs(),
            t.zip[tr],
            c[0].abs().sqrt(),
            c[5].abs().sqrt(),
            c[9].abs().sqrt() * t.pt[tr],
            c[12].abs().sqrt(),
            c[14].abs().sqrt(),
            mean(excess_sum, n_barrel as f32),
            excess_max,
            mean(sx_sum, nh),
            mean(q_sum, nh),
            if hits.is_empty() { 0.0 } else { q_min },
            edges as f32,
            shared as f32,
        ];
        out.extend(row.map(finite));
    }
    Ok((rows, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two tracks sharing hit 1: a loose 4-hit barrel track skipping BPix3 with a bad
    /// cluster-length match, and a dup 3-hit track into FPix+.
    fn event() -> (Vec<u16>, Vec<i16>, Vec<i16>, Vec<i32>) {
        (
            vec![10, 100, 700, 1200, 1300],
            vec![16, 24, 16, -16, 8],
            vec![8, 40, 16, 16, 24],
            vec![20000, 21000, 22000, 25000, 18000],
        )
    }

    #[test]
    fn features_of_a_hand_made_event() {
        let (det, sx, sy, q) = event();
        let hits = HitsIn {
            det_index: &det,
            size_x: &sx,
            size_y: &sy,
            charge: &q,
        };
        let mut cov = [0f32; 30];
        cov[0] = 0.25;
        cov[9] = 0.0625;
        cov[15 + 14] = -0.0625; // a negative variance: its |.| is used
        let tracks = TracksIn {
            quality: &[2, 1],
            pt: &[2.0, f32::NAN],
            eta: &[-0.4812118, 1.0],
            tip: &[-0.02, 0.1],
            zip: &[1.0, f32::INFINITY],
            chi2: &[6.0, 1.0],
            state: &[0.0, 0.0, 0.5, -0.5, 0.0, 0.0, 0.0, 0.5, 1.0, 0.0],
            covariance: &cov,
            hit_offsets: &[5, 9, 12],
            hits: &[0, 1, 2, 3, 0, 1, 4],
        };
        let x = track_features(&tracks, &hits).unwrap();
        assert_eq!(x.len(), 2 * N_FEATURES);
        let f = |t: usize, name: &str| {
            x[t * N_FEATURES + FEATURES.iter().position(|&n| n == name).unwrap()]
        };
        assert_eq!(f(0, "n_hits"), 4.0);
        // BPix1, BPix2, BPix4 (BPix3 skipped), then FPix+1: one gap.
        assert_eq!(f(0, "layer_gaps"), 1.0);
        assert_eq!(f(0, "first_layer"), 0.0);
        assert_eq!(f(0, "n_barrel"), 3.0);
        assert_eq!(f(0, "chi2_ndof"), 2.0);
        assert_eq!(f(0, "abs_tip"), 0.02);
        assert_eq!(f(0, "sigma_phi"), 0.5);
        assert_eq!(f(0, "sigma_pt_rel"), 0.5);
        // |cotθ| = 0.5: 7.6 expected; excesses 0.4, 32.4, 8.4 on the barrel hits.
        let k = SIZE_Y_PER_COT * 0.5;
        assert_eq!(f(0, "size_y_excess_max"), 40.0 - k);
        assert_eq!(
            f(0, "size_y_excess_mean"),
            ((8.0 - k) + (40.0 - k) + (16.0 - k)) / 3.0
        );
        assert_eq!(f(0, "edge_hits"), 1.0);
        // Hits 0 and 1 are also the dup's, which does not count: no loose track shares.
        assert_eq!(f(0, "shared_hits"), 0.0);
        // Track 1 (dup): hits 0 and 1 are the loose track's.
        assert_eq!(f(1, "shared_hits"), 2.0);
        assert_eq!(f(1, "n_hits"), 3.0);
        // BPix1 → BPix2 → FPix+2: the forward step skips nothing.
        assert_eq!(f(1, "layer_gaps"), 0.0);
        assert_eq!(f(1, "sigma_zip"), 0.25);
        assert_eq!(f(1, "pt"), -1.0);
        assert_eq!(f(1, "zip"), f32::MAX);
        assert!(x.iter().all(|v| v.is_finite()));
        // Only the loose track, the same values.
        let (rows, xl) = loose_track_features(&tracks, &hits).unwrap();
        assert_eq!(rows, vec![0]);
        assert_eq!(xl, x[..N_FEATURES]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let (det, sx, sy, q) = event();
        let hits = HitsIn {
            det_index: &det,
            size_x: &sx,
            size_y: &sy,
            charge: &q,
        };
        let cov = [0f32; 15];
        let mk = |offsets: &'static [i32], list: &'static [u32]| TracksIn {
            quality: &[2],
            pt: &[1.0],
            eta: &[0.0],
            tip: &[0.0],
            zip: &[0.0],
            chi2: &[0.0],
            state: &[0.0; 5],
            covariance: &cov,
            hit_offsets: offsets,
            hits: list,
        };
        assert_eq!(
            track_features(&mk(&[0, 3], &[0, 1, 5]), &hits).unwrap_err(),
            FeatureError::HitOutOfRange {
                track: 0,
                hit: 5,
                n_hits: 5
            }
        );
        assert_eq!(
            track_features(&mk(&[0, 3], &[0, 1, 5]), &hits)
                .unwrap_err()
                .to_string(),
            "product 'tracks': track 0: hit 5 is not one of the event's 5 hits"
        );
        assert!(matches!(
            track_features(&mk(&[0, 4], &[0, 1, 2]), &hits).unwrap_err(),
            FeatureError::Offsets { .. }
        ));
        assert!(matches!(
            track_features(&mk(&[0], &[]), &hits).unwrap_err(),
            FeatureError::Length { .. }
        ));
        let bad_det = [10u16, 100, 700, 1200, 2000];
        let hits = HitsIn {
            det_index: &bad_det,
            ..hits
        };
        assert_eq!(
            track_features(&mk(&[0, 1], &[0]), &hits).unwrap_err(),
            FeatureError::BadModule { hit: 4, det: 2000 }
        );
    }
}
