//! Adapter of the track classifier: `track_scores` from `tracks` and `hits`.

use std::sync::Arc;

use arrow_array::types::{Float32Type, Int16Type, Int32Type, UInt16Type, UInt8Type};
use arrow_array::{ArrayRef, Float32Array, UInt8Array};
use quiver_columnar::columns::values;
use quiver_columnar::{
    Backend, Error, EventBatch, InputSpec, ParamSpec, Params, Product, ProductKey, Registry,
    Result, Signature, Step, StepConfig, StepType,
};

use super::tracks::{fixed_values, list_u32};
use super::types::*;
use super::{per_event, product_batch};
use crate::classifier::{classify, HitsIn, Model, TracksIn, BUILTIN_MODEL, FEATURES};

const NAME: &str = "track_classifier";

/// `model` value selecting the model compiled into the library.
pub const BUILTIN: &str = "builtin";

struct ClassifierStep {
    tracks: ProductKey,
    hits: ProductKey,
    model: Model,
    threshold: f64,
}

/// The classifier's model and threshold from a `track_classifier` step's parameters: a
/// model file that cannot be read or used, or a threshold outside [0, 1], is a plan error
/// naming the step (and the file).
pub fn classifier_config(cfg: &StepConfig) -> Result<(Model, f64)> {
    load(&cfg.label, &cfg.params)
}

fn load(label: &str, params: &Params) -> Result<(Model, f64)> {
    let path = params.str("model");
    let model = if path == BUILTIN {
        Model::parse(BUILTIN_MODEL, &FEATURES)
            .map_err(|e| Error::plan(label, format!("the built-in model: {e}")))?
    } else {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::plan(label, format!("model file {path}: cannot read it: {e}")))?;
        Model::parse(&text, &FEATURES)
            .map_err(|e| Error::plan(label, format!("model file {path}: {e}")))?
    };
    let t = params.float("threshold");
    let threshold = if t == -1.0 {
        model.working_point
    } else if (0.0..=1.0).contains(&t) {
        t
    } else {
        return Err(Error::Param {
            step: label.to_string(),
            key: "threshold".into(),
            value: Some(t.to_string()),
            msg: format!(
                "parameter 'threshold': {t} is outside [0, 1] (-1: the model's working point)"
            ),
        });
    };
    Ok((model, threshold))
}

/// `quiver plan check` loads every classifier's model, as building the step does.
fn models_load(plan: &quiver_columnar::plan::ResolvedPlan) -> Result<()> {
    for s in plan.steps.iter().filter(|s| s.type_name == NAME) {
        load(&s.label, &s.params)?;
    }
    Ok(())
}

impl Step for ClassifierStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let (t, h) = (batch.get(&self.tracks)?, batch.get(&self.hits)?);
        if t.n_events() != h.n_events() {
            return Err(Error::data(format!(
                "{} events of tracks for {} of hits",
                t.n_events(),
                h.n_events()
            )));
        }
        let (state, ws) = fixed_values(&t, "state")?;
        let (cov, wc) = fixed_values(&t, "covariance")?;
        if (ws, wc) != (5, 15) {
            return Err(Error::data(format!(
                "product 'tracks': state/covariance widths {ws}/{wc}, expected 5/15"
            )));
        }
        let (hit_offsets, hit_list) = list_u32(&t, "hits")?;
        let quality = values::<UInt8Type>(&t, "quality")?;
        let f32s = |name| values::<Float32Type>(&t, name);
        let (pt, eta, tip, zip, chi2) = (
            f32s("pt")?,
            f32s("eta")?,
            f32s("tip")?,
            f32s("zip")?,
            f32s("chi2")?,
        );
        let det = values::<UInt16Type>(&h, "det_index")?;
        let size_x = values::<Int16Type>(&h, "size_x")?;
        let size_y = values::<Int16Type>(&h, "size_y")?;
        let charge = values::<Int32Type>(&h, "charge")?;
        let out = per_event(batch, |e| {
            let r = t.event_rows(e);
            let hr = h.event_rows(e);
            let tracks = TracksIn {
                quality: &quality[r.clone()],
                pt: &pt[r.clone()],
                eta: &eta[r.clone()],
                tip: &tip[r.clone()],
                zip: &zip[r.clone()],
                chi2: &chi2[r.clone()],
                state: &state[r.start * 5..r.end * 5],
                covariance: &cov[r.start * 15..r.end * 15],
                hit_offsets: &hit_offsets[r.start..=r.end],
                hits: &hit_list[hit_offsets[r.start] as usize..hit_offsets[r.end] as usize],
            };
            let hits = HitsIn {
                det_index: &det[hr.clone()],
                size_x: &size_x[hr.clone()],
                size_y: &size_y[hr.clone()],
                charge: &charge[hr],
            };
            if let Some(&q) = tracks.quality.iter().find(|&&q| q > 5) {
                return Err(Error::data(format!("product 'tracks': quality code {q}")));
            }
            let (s, q) = classify(&self.model, &tracks, &hits, self.threshold)
                .map_err(|e| Error::data(e.to_string()))?;
            Ok((s, q))
        })?;
        let score: ArrayRef = Arc::new(Float32Array::from_iter_values(
            out.iter().flat_map(|(s, _)| s.iter().copied()),
        ));
        let quality: ArrayRef = Arc::new(UInt8Array::from_iter_values(
            out.iter().flat_map(|(_, q)| q.iter().copied()),
        ));
        batch.put(Product::new(
            product_batch(TRACK_SCORES, [("score", score), ("quality", quality)])?,
            t.offsets().clone(),
        )?)
    }
}

/// Registers `track_classifier`.
pub(super) fn register(r: &mut Registry) {
    r.add_plan_check(models_load);
    r.add(StepType {
        name: NAME,
        doc: "Trained track classifier: a genuine-track probability per track (gradient-boosted trees) and the purity selection (highPurity)",
        params: vec![
            ParamSpec::str("model", BUILTIN, "model JSON file; \"builtin\": the model compiled in"),
            ParamSpec::float("threshold", -1.0, "score from which loose tracks become highPurity, in [0, 1]; -1: the model's working_point").within(-1.0, 1.0),
        ],
        signature: Signature {
            inputs: vec![
                InputSpec::one("tracks", TRACKS, "pixel tracks"),
                InputSpec::one("hits", HITS, "the rec hits the tracks were built from"),
            ],
            outputs: vec![TRACK_SCORES.into()],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            let (model, threshold) = classifier_config(cfg)?;
            Ok(Box::new(ClassifierStep {
                tracks: cfg.input("tracks")?,
                hits: cfg.input("hits")?,
                model,
                threshold,
            }))
        },
    });
}
