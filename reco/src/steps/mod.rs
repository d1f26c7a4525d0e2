//! Step adapters: each takes products from the event batch, runs a numerical core of
//! [`crate::local`], [`crate::tracks`] or [`crate::vertices`] on every event (rayon over
//! events, results kept in event order) and publishes the result. Schemas are documented in
//! `docs/products.md`.

mod local;
mod tracks;

pub use local::{calib_config, charge_cut_config, clusterize_config, raw_to_digi_config};
pub use tracks::{
    ca_config, check_hit_columns, doublet_overflow_rows, doublet_overflows, fit_overflows,
    fit_tuples, ntuplet_overflows, publish_fit_values, publish_fits, publish_ntuplets,
    publish_quality, publish_vertices, quality_columns, quality_inputs, vertex_config,
    vertex_selection, FitInput, FitTuples, HitDets, QualityColumnsView, QualityInput, QualityTally,
    VertexTally,
};

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use quiver_columnar::product::offsets_from_lengths;
use quiver_columnar::{product_schema, Error, EventBatch, Product, Registry, Result, StepConfig};
use rayon::prelude::*;

/// Product type names of the pixel chain (defined with the data formats, `quiver_formats`).
pub use quiver_formats::products::types;

/// Schema of a product type of the pixel chain.
///
/// # Panics
/// On a type name that is not one of [`types`]; see [`try_schema`].
pub fn schema(type_name: &str) -> SchemaRef {
    try_schema(type_name).unwrap_or_else(|| panic!("no schema for product type '{type_name}'"))
}

/// Schema of a product type of the pixel chain, `None` for other names (how steps written
/// outside Rust get their products checked).
///
/// ```
/// let s = quiver_reco::steps::try_schema("hits").unwrap();
/// assert_eq!(s.field(0).name(), "x_local");
/// assert!(quiver_reco::steps::try_schema("floats").is_none());
/// ```
pub fn try_schema(type_name: &str) -> Option<SchemaRef> {
    quiver_formats::products::fields(type_name)
        .map(|fields| product_schema(type_name, quiver_formats::products::VERSION, fields))
}

/// Runs `per_event` on every event of the batch in parallel, results in event order; the
/// error names the absolute event.
pub(crate) fn per_event<T: Send>(
    batch: &EventBatch,
    per_event: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    (0..batch.n_events())
        .into_par_iter()
        .map(|e| {
            per_event(e).map_err(|err| {
                Error::data(format!("event {}: {err}", batch.first_event() + e as u64))
            })
        })
        .collect()
}

/// Publishes a product of `type_name` (its registered schema) from its columns and the
/// rows of each event (shared with the GPU steps of `quiver-gpu`).
pub fn publish(
    batch: &mut EventBatch,
    type_name: &str,
    columns: Vec<ArrayRef>,
    lengths: impl IntoIterator<Item = usize>,
) -> Result<()> {
    let rb = RecordBatch::try_new(schema(type_name), columns)?;
    batch.put(Product::new(rb, offsets_from_lengths(lengths)?)?)
}

/// Publishes the step's `capacity_overflows` (one list of overflows per event).
pub fn publish_overflows(
    batch: &mut EventBatch,
    events: Vec<quiver_columnar::overflow::EventOverflows>,
) -> Result<()> {
    batch.put(quiver_columnar::overflow::overflow_product(&events)?)
}

/// Publishes `hit_layers` (ten rows per event: layer, first hit, hits) from each event's
/// `hitsLayerStart` (eleven offsets).
pub fn publish_hit_layers(batch: &mut EventBatch, layer_starts: &[[u32; 11]]) -> Result<()> {
    use arrow_array::types::{UInt32Type, UInt8Type};
    use quiver_columnar::columns::concat_ref;
    let layers: Vec<u8> = (0..10u8).collect();
    let count: Vec<[u32; 10]> = layer_starts
        .iter()
        .map(|s| std::array::from_fn(|l| s[l + 1] - s[l]))
        .collect();
    let cols = vec![
        concat_ref::<UInt8Type, _>(layer_starts.iter().map(|_| layers.as_slice())),
        concat_ref::<UInt32Type, _>(layer_starts.iter().map(|s| &s[..10])),
        concat_ref::<UInt32Type, _>(count.iter().map(|c| c.as_slice())),
    ];
    publish(
        batch,
        types::HIT_LAYERS,
        cols,
        layer_starts.iter().map(|_| 10),
    )
}

pub(crate) fn local(e: crate::local::LocalError) -> Error {
    Error::data(e.to_string())
}

/// A slice of one event's rows of a column.
pub(crate) fn ev<'a, T>(col: &'a [T], p: &Product, e: usize) -> &'a [T] {
    &col[p.event_rows(e)]
}

// --- registration ---------------------------------------------------------------------

pub(crate) fn cond<T: std::any::Any + Send + Sync>(cfg: &StepConfig) -> Result<Arc<T>> {
    cfg.condition::<T>()
}

pub(crate) fn int_param(
    cfg: &StepConfig,
    name: &str,
    range: std::ops::RangeInclusive<i64>,
) -> Result<i64> {
    let v = cfg.params.int(name);
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(cfg.param_error(
            name,
            format!("{v} is outside {}..={}", range.start(), range.end()),
        ))
    }
}

/// Registers the step types of the pixel chain.
pub fn register(r: &mut Registry) {
    local::register(r);
    tracks::register(r);
}
