//! A gradient-boosted-trees binary classifier: parsed from its JSON file, validated once,
//! evaluated per track. Format (written by `scripts/train-classifier.py`):
//!
//! ```json
//! {"format": "quiver-gbt", "version": 1, "features": ["n_hits", ...],
//!  "base_score": -0.3, "working_point": 0.5,
//!  "trees": [{"feature": [0, -1, -1], "threshold": [3.5, 0, 0],
//!             "left": [1, -1, -1], "right": [2, -1, -1], "value": [0, -0.4, 0.7]}]}
//! ```
//!
//! Node `k` of a tree is a leaf when `feature[k] < 0` (its `value[k]` is added to the raw
//! score), else the track goes to `left[k]` when its feature `feature[k]` ≤ `threshold[k]`
//! and to `right[k]` otherwise. The score is `1 / (1 + exp(−raw))` with `raw = base_score +
//! Σ leaves` summed in f64 in tree order.

use super::forest::{Forest, LANES};

/// Why a model file cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    #[error("{0}")]
    Json(String),
    #[error("{0}")]
    Invalid(String),
}

/// Most trees and most nodes per tree a model may have (a damaged file cannot ask for
/// unbounded work per track).
pub const MAX_TREES: usize = 10_000;
/// See [`MAX_TREES`].
pub const MAX_NODES: usize = 1 << 16;
/// Largest |base score| and |leaf value|: sums of up to [`MAX_TREES`] of them stay finite
/// (two infinite sums of opposite signs would make the score NaN).
pub const MAX_VALUE: f64 = 1e6;

fn bounded(x: f64, what: &str) -> Result<f64, ModelError> {
    if x.abs() <= MAX_VALUE {
        Ok(x)
    } else {
        Err(invalid(format!("{what} = {x:e} is outside ±{MAX_VALUE:e}")))
    }
}

/// One tree, as parallel node arrays.
#[derive(Clone, Debug, PartialEq)]
pub struct Tree {
    /// Feature index of a split node, −1 for a leaf.
    pub feature: Vec<i32>,
    pub threshold: Vec<f64>,
    pub left: Vec<u32>,
    pub right: Vec<u32>,
    pub value: Vec<f64>,
}

/// A validated gradient-boosted-trees model.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// Feature names, in the order of the feature vector.
    pub features: Vec<String>,
    /// Raw score before the trees (log-odds).
    pub base_score: f64,
    /// The score threshold chosen at training.
    pub working_point: f64,
    pub trees: Vec<Tree>,
    /// The trees laid out for evaluating many tracks at once.
    forest: Forest,
}

fn invalid(msg: impl Into<String>) -> ModelError {
    ModelError::Invalid(msg.into())
}

/// A model file as written, before validation.
#[derive(serde::Deserialize)]
struct ModelFile {
    format: String,
    version: u32,
    features: Vec<String>,
    base_score: f64,
    working_point: f64,
    trees: Vec<TreeFile>,
}

/// A tree as written: parallel node arrays.
#[derive(serde::Deserialize)]
struct TreeFile {
    feature: Vec<i64>,
    threshold: Vec<f64>,
    left: Vec<i64>,
    right: Vec<i64>,
    value: Vec<f64>,
}

impl Model {
    /// Parses and validates a model file's text against the feature names the caller
    /// computes (`expected`, in order).
    ///
    /// ```
    /// use quiver_reco::classifier::model::Model;
    /// let text = r#"{"format": "quiver-gbt", "version": 1, "features": ["a", "b"],
    ///   "base_score": 0.0, "working_point": 0.5,
    ///   "trees": [{"feature": [1, -1, -1], "threshold": [2.0, 0, 0],
    ///              "left": [1, 0, 0], "right": [2, 0, 0], "value": [0, -1.0, 1.0]}]}"#;
    /// let m = Model::parse(text, &["a", "b"]).unwrap();
    /// assert_eq!(m.raw(&[0.0, 2.0]), -1.0); // b ≤ 2: left
    /// assert!(m.score(&[0.0, 3.0]) > 0.73);
    /// assert!(Model::parse(text, &["b", "a"]).is_err());
    /// ```
    pub fn parse(text: &str, expected: &[&str]) -> Result<Model, ModelError> {
        let file: ModelFile = serde_json::from_str(text)
            .map_err(|e| ModelError::Json(format!("invalid JSON or not a model: {e}")))?;
        if file.format != "quiver-gbt" {
            return Err(invalid("\"format\" is not \"quiver-gbt\""));
        }
        if file.version != 1 {
            return Err(invalid(format!(
                "version {}; this build reads version 1",
                file.version
            )));
        }
        let features = file.features;
        if features != expected {
            return Err(invalid(format!(
                "its features [{}] are not this build's [{}] (same names, same order)",
                features.join(", "),
                expected.join(", ")
            )));
        }
        // JSON has no NaN or ∞ (serde_json refuses them and numbers beyond f64's range), so
        // every number here is finite; only the ranges are checked.
        let base_score = bounded(file.base_score, "base_score")?;
        let working_point = file.working_point;
        if !(0.0..=1.0).contains(&working_point) {
            return Err(invalid(format!(
                "working_point {working_point} is outside [0, 1]"
            )));
        }
        let tree_list = file.trees;
        if tree_list.len() > MAX_TREES {
            return Err(invalid(format!(
                "{} trees, at most {MAX_TREES}",
                tree_list.len()
            )));
        }
        let trees: Vec<Tree> = tree_list
            .into_iter()
            .enumerate()
            .map(|(t, j)| {
                Tree::parse(j, features.len()).map_err(|e| invalid(format!("tree {t}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        let forest = Forest::new(&trees, features.len());
        Ok(Model {
            features,
            base_score,
            working_point,
            trees,
            forest,
        })
    }

    /// Raw scores of the rows `rows` of a feature matrix (`features.len()` per row): the same
    /// values as [`Model::raw`] of each row.
    pub fn raw_rows(&self, x: &[f32], rows: &[usize]) -> Vec<f64> {
        let nf = self.features.len();
        let mut raw = Vec::with_capacity(rows.len());
        let mut chunk = vec![0f32; nf * LANES];
        for rows in rows.chunks(LANES) {
            for (l, &row) in rows.iter().enumerate() {
                for (f, &v) in x[row * nf..(row + 1) * nf].iter().enumerate() {
                    chunk[f * LANES + l] = v;
                }
            }
            let mut sums = [self.base_score; LANES];
            self.forest.add_chunk(&chunk, &mut sums);
            raw.extend_from_slice(&sums[..rows.len()]);
        }
        raw
    }

    /// The raw score (log-odds) of one feature vector.
    pub fn raw(&self, x: &[f32]) -> f64 {
        let mut raw = self.base_score;
        for t in &self.trees {
            raw += t.leaf(x);
        }
        raw
    }

    /// The probability of being a genuine track, in [0, 1].
    pub fn score(&self, x: &[f32]) -> f32 {
        sigmoid(self.raw(x))
    }
}

/// `1 / (1 + e^−raw)` as f32.
pub fn sigmoid(raw: f64) -> f32 {
    (1.0 / (1.0 + (-raw).exp())) as f32
}

impl Tree {
    fn parse(j: TreeFile, n_features: usize) -> Result<Tree, String> {
        let TreeFile {
            feature,
            threshold,
            left,
            right,
            value,
        } = j;
        for (k, &v) in value.iter().enumerate() {
            bounded(v, &format!("value[{k}]")).map_err(|e| e.to_string())?;
        }
        let n = feature.len();
        if n == 0 || n > MAX_NODES {
            return Err(format!("{n} nodes (1 to {MAX_NODES})"));
        }
        for (k, len) in [
            ("threshold", threshold.len()),
            ("left", left.len()),
            ("right", right.len()),
            ("value", value.len()),
        ] {
            if len != n {
                return Err(format!("{len} {k} entries for {n} nodes"));
            }
        }
        for i in 0..n {
            if feature[i] < 0 {
                continue;
            }
            if feature[i] as usize >= n_features {
                return Err(format!(
                    "node {i} splits on feature {} of {n_features}",
                    feature[i]
                ));
            }
            // Children after their parent: every walk ends, within n steps.
            for (side, c) in [("left", left[i]), ("right", right[i])] {
                if c <= i as i64 || c >= n as i64 {
                    return Err(format!(
                        "node {i}'s {side} child {c} is not a later node of the tree's {n}"
                    ));
                }
            }
        }
        Ok(Tree {
            feature: feature.iter().map(|&f| f.max(-1) as i32).collect(),
            threshold,
            left: left.iter().map(|&c| c.max(0) as u32).collect(),
            right: right.iter().map(|&c| c.max(0) as u32).collect(),
            value,
        })
    }

    /// The value of the leaf `x` reaches.
    pub fn leaf(&self, x: &[f32]) -> f64 {
        let mut k = 0usize;
        loop {
            let f = self.feature[k];
            if f < 0 {
                return self.value[k];
            }
            k = if (x[f as usize] as f64) <= self.threshold[k] {
                self.left[k]
            } else {
                self.right[k]
            } as usize;
        }
    }
}
