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

/// Every track's hit list, checked: the offsets and hit indices of the whole event at once
/// (vectorized), and on a failure track by track for the first error.
fn check_lists(t: &TracksIn, n_hits: usize) -> Result<(), FeatureError> {
    let o = t.hit_offsets;
    let base = o[0];
    let end = o[o.len() - 1];
    let ordered = o.windows(2).fold(true, |ok, w| ok & (w[0] <= w[1]));
    if ordered && end as i64 - base as i64 <= t.hits.len() as i64 {
        let list = &t.hits[..(end - base) as usize];
        if list.iter().fold(0, |m, &h| m.max(h)) < n_hits as u32 || list.is_empty() {
            return Ok(());
        }
    }
    for tr in 0..t.quality.len() {
        t.hits_of(tr, n_hits)?;
    }
    Ok(())
}

/// What the features need of one hit of a track, gathered into a compact list.
#[derive(Clone, Copy, Default)]
struct Hit {
    charge: i32,
    size_x: i16,
    size_y: i16,
    layer: u8,
    /// Loose (or better) tracks using the hit, saturating at 255.
    users: u8,
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
    if h.det_index.iter().fold(0, |m, &d| m.max(d)) >= NUMBER_OF_MODULES {
        let hit = h.det_index.iter().position(|&d| d >= NUMBER_OF_MODULES);
        let hit = hit.expect("a module beyond the last");
        let det = h.det_index[hit];
        return Err(FeatureError::BadModule { hit, det });
    }
    check_lists(t, n_hits)?;
    let base = t.hit_offsets[0];
    let hits_of = |tr: usize| {
        let o = &t.hit_offsets[tr..tr + 2];
        &t.hits[(o[0] - base) as usize..(o[1] - base) as usize]
    };
    // Only "more than one" matters.
    let mut users = vec![0u8; n_hits];
    for tr in (0..n).filter(|&tr| t.quality[tr] >= LOOSE) {
        for &k in hits_of(tr) {
            users[k as usize] = users[k as usize].saturating_add(1);
        }
    }
    let rows: Vec<usize> = (0..n).filter(|&tr| keep(t.quality[tr])).collect();
    // In passes over all rows, each a loop of independent loads (the rows' data is
    // scattered over the event's tracks and hits: many loads in flight at once).
    let mut out = vec![0f32; rows.len() * N_FEATURES];
    for (&tr, x) in rows.iter().zip(out.chunks_exact_mut(N_FEATURES)) {
        track_part(t, tr, hits_of(tr).len() as f32, x);
    }
    let mut list = Vec::with_capacity(rows.iter().map(|&tr| hits_of(tr).len()).sum());
    for &tr in &rows {
        list.extend(hits_of(tr).iter().map(|&k| {
            let k = k as usize;
            Hit {
                charge: h.charge[k],
                size_x: h.size_x[k],
                size_y: h.size_y[k],
                layer: layer_of(h.det_index[k]),
                users: users[k],
            }
        }));
    }
    let mut at = 0;
    for (&tr, x) in rows.iter().zip(out.chunks_exact_mut(N_FEATURES)) {
        let hits = &list[at..at + hits_of(tr).len()];
        at += hits.len();
        hit_part(t, tr, hits, x);
    }
    for v in &mut out {
        *v = finite(*v);
    }
    Ok((rows, out))
}

/// The features of track `tr` from its own columns (`nh` hits) into its row `x`.
fn track_part(t: &TracksIn, tr: usize, nh: f32, x: &mut [f32]) {
    let c = &t.covariance[tr * 15..tr * 15 + 15];
    let ndof = (2.0 * nh - 5.0).max(1.0);
    x[0] = nh;
    x[4] = t.chi2[tr];
    x[5] = t.chi2[tr] / ndof;
    x[6] = t.pt[tr];
    x[7] = t.eta[tr].abs();
    x[8] = t.tip[tr].abs();
    x[9] = t.zip[tr];
    x[10] = c[0].abs().sqrt();
    x[11] = c[5].abs().sqrt();
    x[12] = c[9].abs().sqrt() * t.pt[tr];
    x[13] = c[12].abs().sqrt();
    x[14] = c[14].abs().sqrt();
}

/// The features of track `tr` from its hits into its row `x`.
fn hit_part(t: &TracksIn, tr: usize, hits: &[Hit], x: &mut [f32]) {
    let nh = hits.len() as f32;
    let mut gaps = 0u32;
    for w in hits.windows(2) {
        gaps += gap(w[0].layer, w[1].layer);
    }
    let cot = t.state[tr * 5 + 3];
    let abs_cot = cot.abs();
    let s = (1.0 + cot * cot).sqrt();
    let (barrel_scale, disk_scale) = (1.0 / s, abs_cot / s);
    let own = (t.quality[tr] >= LOOSE) as u8;
    let (mut n_barrel, mut excess_sum, mut excess_max) = (0u32, 0f32, 0f32);
    let (mut sx_sum, mut q_sum, mut q_min) = (0f32, 0f32, f32::MAX);
    let (mut edges, mut shared) = (0u32, 0u32);
    for hit in hits {
        let (sx, sy) = (hit.size_x, hit.size_y);
        edges += (sx < 0 || sy < 0) as u32;
        shared += (hit.users > own) as u32;
        sx_sum += (sx as f32).abs();
        let barrel = hit.layer < 4;
        let q = hit.charge as f32 * if barrel { barrel_scale } else { disk_scale };
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
    x[1] = gaps as f32;
    x[2] = hits.first().map_or(-1.0, |h| h.layer as f32);
    x[3] = n_barrel as f32;
    x[15] = mean(excess_sum, n_barrel as f32);
    x[16] = excess_max;
    x[17] = mean(sx_sum, nh);
    x[18] = mean(q_sum, nh);
    x[19] = if hits.is_empty() { 0.0 } else { q_min };
    x[20] = edges as f32;
    x[21] = shared as f32;
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

    /// The first bad track in order is reported, whatever its quality, also when the
    /// event's lists fail the whole-event check for another reason too.
    #[test]
    fn the_first_bad_list_is_reported() {
        let (det, sx, sy, q) = event();
        let hits = HitsIn {
            det_index: &det,
            size_x: &sx,
            size_y: &sy,
            charge: &q,
        };
        let cov = [0f32; 45];
        let mk = |quality: &'static [u8], offsets: &'static [i32], list: &'static [u32]| TracksIn {
            quality,
            pt: &[1.0; 3],
            eta: &[0.0; 3],
            tip: &[0.0; 3],
            zip: &[0.0; 3],
            chi2: &[0.0; 3],
            state: &[0.0; 15],
            covariance: &cov,
            hit_offsets: offsets,
            hits: list,
        };
        // Track 1 (a dup) uses hit 9, track 2's list ends before it starts.
        let t = mk(&[2, 1, 2], &[0, 2, 4, 3], &[0, 1, 2, 9]);
        assert_eq!(
            loose_track_features(&t, &hits).unwrap_err(),
            FeatureError::HitOutOfRange {
                track: 1,
                hit: 9,
                n_hits: 5
            }
        );
        let t = mk(&[2, 1, 2], &[0, 2, 1, 4], &[0, 1, 2, 9]);
        assert!(matches!(
            loose_track_features(&t, &hits).unwrap_err(),
            FeatureError::Offsets { track: 1, .. }
        ));
        // Hits after the last list are no track's: not checked.
        let t = mk(&[2, 1, 2], &[0, 1, 2, 3], &[0, 1, 2, 9]);
        assert_eq!(loose_track_features(&t, &hits).unwrap().0, vec![0, 2]);
    }

    /// A hit of 257 loose tracks is shared for each of them (a wrapping 8-bit count would
    /// say 1 user).
    #[test]
    fn hits_of_many_tracks_are_shared() {
        let (det, sx, sy, q) = event();
        let hits = HitsIn {
            det_index: &det,
            size_x: &sx,
            size_y: &sy,
            charge: &q,
        };
        let n = 257;
        let cov = vec![0f32; 15 * n];
        let offsets: Vec<i32> = (0..=n as i32).map(|i| 2 * i).collect();
        let list: Vec<u32> = (0..n as u32).flat_map(|i| [0, 1 + i % 4]).collect();
        let (one, zero) = (vec![1f32; n], vec![0f32; n]);
        let tracks = TracksIn {
            quality: &vec![2; n],
            pt: &one,
            eta: &zero,
            tip: &zero,
            zip: &zero,
            chi2: &zero,
            state: &vec![0.0; 5 * n],
            covariance: &cov,
            hit_offsets: &offsets,
            hits: &list,
        };
        let x = track_features(&tracks, &hits).unwrap();
        let shared = FEATURES.iter().position(|&f| f == "shared_hits").unwrap();
        assert!(x.chunks(N_FEATURES).all(|row| row[shared] == 2.0));
    }
}
