//! The trained track classifier: a probability of being a genuine track for every track,
//! from features of the track and its hits ([`features`]) and a gradient-boosted-trees
//! model ([`model`]), and the purity selection it gives (`highPurity`).

pub mod features;
mod forest;
pub mod model;

pub use features::{
    loose_track_features, track_features, FeatureError, HitsIn, TracksIn, FEATURES, N_FEATURES,
};
pub use model::{Model, ModelError};

use quiver_formats::quality::codes::LOOSE;
use quiver_formats::quality::Quality;

/// The model compiled into the library (`reco/models/track-classifier.json`).
pub const BUILTIN_MODEL: &str = include_str!("../../models/track-classifier.json");

/// Every track's score and classifier quality (see [`purity_quality`]) for one event: only
/// tracks of quality ≥ loose are evaluated, the others get score 0 (nothing selects them).
pub fn classify(
    model: &Model,
    tracks: &TracksIn,
    hits: &HitsIn,
    threshold: f64,
) -> Result<(Vec<f32>, Vec<u8>), FeatureError> {
    let (rows, x) = loose_track_features(tracks, hits)?;
    let all: Vec<usize> = (0..rows.len()).collect();
    let mut scores = vec![0f32; tracks.quality.len()];
    for (&i, raw) in rows.iter().zip(model.raw_rows(&x, &all)) {
        scores[i] = model::sigmoid(raw);
    }
    let quality = purity_quality(tracks.quality, &scores, threshold);
    Ok((scores, quality))
}

/// The classifier's quality: the track's own, except that tracks of quality ≥ loose with a
/// score ≥ `threshold` become `highPurity`.
///
/// ```
/// use quiver_reco::classifier::purity_quality;
/// assert_eq!(purity_quality(&[2, 2, 1, 0], &[0.9, 0.2, 0.99, 0.99], 0.5), vec![5, 2, 1, 0]);
/// ```
pub fn purity_quality(quality: &[u8], scores: &[f32], threshold: f64) -> Vec<u8> {
    quality
        .iter()
        .zip(scores)
        .map(|(&q, &s)| {
            if q >= LOOSE && s as f64 >= threshold {
                Quality::HighPurity as u8
            } else {
                q
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model over all features whose two trees split on n_hits and shared_hits.
    fn tiny() -> String {
        let names: Vec<String> = FEATURES.iter().map(|f| format!("\"{f}\"")).collect();
        format!(
            r#"{{"format": "quiver-gbt", "version": 1, "features": [{}],
            "base_score": 0.5, "working_point": 0.6,
            "trees": [
              {{"feature": [0, -1, -1], "threshold": [3.5, 0, 0], "left": [1, -1, -1],
                "right": [2, -1, -1], "value": [0, -2.0, 1.5]}},
              {{"feature": [21, 2, -1, -1, -1], "threshold": [0.5, 0.5, 0, 0, 0],
                "left": [1, 3, -1, -1, -1], "right": [2, 4, -1, -1, -1],
                "value": [0, 0, -1.0, 0.25, 0.125]}}
            ]}}"#,
            names.join(", ")
        )
    }

    fn row(n_hits: f32, first_layer: f32, shared: f32) -> Vec<f32> {
        let mut x = vec![0f32; N_FEATURES];
        x[0] = n_hits;
        x[2] = first_layer;
        x[21] = shared;
        x
    }

    #[test]
    fn evaluates_a_hand_made_model() {
        let m = Model::parse(&tiny(), &FEATURES).unwrap();
        assert_eq!(m.working_point, 0.6);
        // 4 hits, not shared, first layer 0: 0.5 + 1.5 + 0.25.
        assert_eq!(m.raw(&row(4.0, 0.0, 0.0)), 2.25);
        // Threshold inclusive: 3.5 goes left.
        assert_eq!(m.raw(&row(3.5, 1.0, 0.0)), 0.5 - 2.0 + 0.125);
        assert_eq!(m.raw(&row(3.0, 0.0, 2.0)), 0.5 - 2.0 - 1.0);
        let x: Vec<f32> = [row(4.0, 0.0, 0.0), row(3.0, 0.0, 2.0)].concat();
        let s: Vec<f32> = m
            .raw_rows(&x, &[0, 1])
            .into_iter()
            .map(model::sigmoid)
            .collect();
        assert_eq!(
            s,
            vec![
                (1.0 / (1.0 + (-2.25f64).exp())) as f32,
                (1.0 / (1.0 + 2.5f64.exp())) as f32
            ]
        );
        assert_eq!(purity_quality(&[2, 2], &s, m.working_point), vec![5, 2]);
    }

    fn err(text: &str) -> String {
        Model::parse(text, &FEATURES).unwrap_err().to_string()
    }

    #[test]
    fn refuses_bad_models() {
        let good = tiny();
        for (from, to, what) in [
            ("\"base_score\": 0.5", "\"base_score\": NaN", "invalid JSON"),
            ("[3.5, 0, 0]", "[1e999, 0, 0]", "invalid JSON"),
            (
                "\"left\": [1, -1, -1]",
                "\"left\": [7, -1, -1]",
                "tree 0: node 0's left child 7",
            ),
            (
                "\"left\": [1, -1, -1]",
                "\"left\": [0, -1, -1]",
                "tree 0: node 0's left child 0",
            ),
            (
                "\"feature\": [0, -1, -1]",
                "\"feature\": [22, -1, -1]",
                "splits on feature 22 of 22",
            ),
            (
                "\"feature\": [0, -1, -1]",
                "\"feature\": [0.5, -1, -1]",
                "invalid type: floating point `0.5`, expected i64",
            ),
            (
                "\"value\": [0, -2.0, 1.5]",
                "\"value\": [0, -2.0]",
                "2 value entries for 3 nodes",
            ),
            (
                "\"value\": [0, -2.0, 1.5]",
                "\"value\": [0, -2.0, 1e300]",
                "value[2] = 1e300 is outside ±1e6",
            ),
            (
                "\"base_score\": 0.5",
                "\"base_score\": -2e6",
                "base_score = -2e6 is outside ±1e6",
            ),
            ("\"n_hits\"", "\"hits\"", "are not this build's"),
            (
                "\"working_point\": 0.6",
                "\"working_point\": 1.5",
                "outside [0, 1]",
            ),
            ("\"version\": 1", "\"version\": 2", "version 2"),
            ("\"trees\"", "\"forest\"", "missing field `trees`"),
        ] {
            assert!(good.contains(from), "{from}");
            let e = err(&good.replacen(from, to, 1));
            assert!(e.contains(what), "{to}: {e}");
        }
        assert!(
            err(&good[..good.len() - 3]).contains("invalid JSON or not a model: EOF while parsing")
        );
        assert!(err("[]").contains("expected struct ModelFile"));
    }

    #[test]
    fn the_flattened_forest_scores_as_the_trees() {
        let m = Model::parse(BUILTIN_MODEL, &FEATURES).unwrap();
        // Feature rows from a fixed pseudo-random sequence, with thresholds' own values.
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as f32 / (1u64 << 31) as f32
        };
        let mut x = Vec::new();
        for i in 0..500 {
            for f in 0..N_FEATURES {
                let t = &m.trees[(i + f) % m.trees.len()];
                let thr = t.threshold[0] as f32;
                x.push(match i % 3 {
                    0 => thr,
                    1 => thr * (0.5 + next()),
                    _ => next() * 10.0,
                });
            }
        }
        let rows: Vec<usize> = (0..500).collect();
        let flat = m.raw_rows(&x, &rows);
        for r in rows {
            assert_eq!(
                flat[r],
                m.raw(&x[r * N_FEATURES..(r + 1) * N_FEATURES]),
                "row {r}"
            );
        }
    }

    /// Node 5 is reached from node 2 (depth 2) and from node 4 (depth 1): a walk takes 4
    /// steps to leaf 6. Taking the depth of the last parent written (3) stopped the batch
    /// walk at split 5, whose value is 0.
    #[test]
    fn a_shared_subtree_scores_as_its_walk() {
        let text = tiny().replacen(
            r#"{"feature": [0, -1, -1], "threshold": [3.5, 0, 0], "left": [1, -1, -1],
                "right": [2, -1, -1], "value": [0, -2.0, 1.5]}"#,
            r#"{"feature": [0, 0, 0, -1, 0, 0, -1, -1],
                "threshold": [0.5, 0.25, 0.1, 0, 0.75, 0.05, 0, 0],
                "left": [1, 2, 5, -1, 5, 6, -1, -1], "right": [4, 3, 6, -1, 7, 7, -1, -1],
                "value": [0, 0, 0, 1.0, 0, 0, 2.0, 3.0]}"#,
            1,
        );
        let m = Model::parse(&text, &FEATURES).unwrap();
        assert_eq!(m.trees[0].feature.len(), 8);
        let x: Vec<f32> = [0.0, 0.07, 0.2, 0.3, 0.6, 0.9]
            .iter()
            .flat_map(|&v| row(v, 0.0, 0.0))
            .collect();
        let raw = m.raw_rows(&x, &[0, 1, 2, 3, 4, 5]);
        // 0 → 1 → 2 → 5 → 6, then tree 1: shared 0 ≤ 0.5, first layer 0 ≤ 0.5: 0.25.
        assert_eq!(raw[0], 0.5 + 2.0 + 0.25);
        for (r, raw) in raw.iter().enumerate() {
            assert_eq!(
                *raw,
                m.raw(&x[r * N_FEATURES..(r + 1) * N_FEATURES]),
                "row {r}"
            );
        }
    }

    #[test]
    fn classify_scores_loose_tracks_only() {
        let m = Model::parse(BUILTIN_MODEL, &FEATURES).unwrap();
        let cov = [1e-4f32; 45];
        let tracks = TracksIn {
            quality: &[2, 1, 0],
            pt: &[2.0, 2.0, 2.0],
            eta: &[0.3; 3],
            tip: &[0.01; 3],
            zip: &[1.0; 3],
            chi2: &[1.0; 3],
            state: &[0.0, 0.01, 0.5, 0.3, 1.0].repeat(3),
            covariance: &cov,
            hit_offsets: &[0, 4, 8, 12],
            hits: &[0, 1, 2, 3].repeat(3),
        };
        let hits = HitsIn {
            det_index: &[10, 100, 400, 800],
            size_x: &[16; 4],
            size_y: &[16; 4],
            charge: &[20000; 4],
        };
        let (s, q) = classify(&m, &tracks, &hits, 0.0).unwrap();
        let expected = m.score(&track_features(&tracks, &hits).unwrap()[..N_FEATURES]);
        assert_eq!(s, vec![expected, 0.0, 0.0]);
        assert_eq!(q, vec![5, 1, 0]);
        let (_, q) = classify(&m, &tracks, &hits, 1.0).unwrap();
        assert_eq!(q[0], if expected >= 1.0 { 5 } else { 2 });
    }

    #[test]
    fn the_builtin_model_is_valid() {
        let m = Model::parse(BUILTIN_MODEL, &FEATURES).unwrap();
        assert!(!m.trees.is_empty());
        assert!(m.trees.len() <= 200);
    }

    /// Every threshold is the f64 nearest its decimal text (as Python wrote and reads it): a
    /// threshold one ulp off sends a feature equal to it the other way (the Python twin's
    /// scores differed by up to 0.076 with serde_json's fast float parser).
    #[test]
    fn the_builtin_model_parses_every_threshold_exactly() {
        let m = Model::parse(BUILTIN_MODEL, &FEATURES).unwrap();
        let mut texts = Vec::new();
        for part in BUILTIN_MODEL.split("\"threshold\":[").skip(1) {
            let list = &part[..part.find(']').unwrap()];
            texts.extend(list.split(',').map(|t| t.trim().parse::<f64>().unwrap()));
        }
        let parsed: Vec<f64> = m.trees.iter().flat_map(|t| t.threshold.clone()).collect();
        assert_eq!(texts.len(), parsed.len());
        let off = texts
            .iter()
            .zip(&parsed)
            .filter(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(off.count(), 0);
    }
}
