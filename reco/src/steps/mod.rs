//! Step adapters: each takes products from the event batch, runs a numerical core of
//! [`crate::local`], [`crate::tracks`] or [`crate::vertices`] on every event (rayon over
//! events, results kept in event order) and publishes the result. Schemas are documented in
//! `docs/products.md`.

mod classifier;
mod fits;
mod local;
mod tracks;
mod vertices;

pub use fits::{
    fit_overflows, fit_tuples, publish_fit_values, publish_fits, publish_quality, quality_columns,
    quality_inputs, FitInput, FitTuples, QualityColumnsView, QualityInput, QualityTally,
};
pub use local::{calib_config, charge_cut_config, clusterize_config, raw_to_digi_config};
pub use tracks::{
    ca_config, check_hit_columns, doublet_overflow_rows, doublet_overflows,
    doublet_overflows_counted, ntuplet_overflows, publish_ntuplets, HitDets,
};
pub use vertices::{publish_vertices, vertex_config, vertex_selection, VertexTally};

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use quiver_columnar::product::offsets_from_lengths;
use quiver_columnar::{product_schema, Error, EventBatch, Product, Registry, Result, StepConfig};
use quiver_formats::batch::BatchBuilder;
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

/// A batch of product type `type_name` from its columns given by name, in any order: a
/// column the schema does not have, one given twice, of the wrong type or left out is an
/// error naming the product and the column (columns of one type cannot be swapped unseen).
pub fn product_batch<'a>(
    type_name: &str,
    columns: impl IntoIterator<Item = (&'a str, ArrayRef)>,
) -> Result<RecordBatch> {
    let mut b = BatchBuilder::new(type_name, &schema(type_name));
    for (name, column) in columns {
        b = b.set(name, column).map_err(batch_error)?;
    }
    b.finish().map_err(batch_error)
}

fn batch_error(e: quiver_formats::batch::BatchError) -> Error {
    Error::data(e.to_string())
}

/// Publishes a product of `type_name` (its registered schema) from its columns given by
/// name (see [`product_batch`]) and the rows of each event.
pub fn publish_columns<'a>(
    batch: &mut EventBatch,
    type_name: &str,
    columns: impl IntoIterator<Item = (&'a str, ArrayRef)>,
    lengths: impl IntoIterator<Item = usize>,
) -> Result<()> {
    let rb = product_batch(type_name, columns)?;
    batch.put(Product::new(rb, offsets_from_lengths(lengths)?)?)
}

/// Publishes a product of `type_name` from its columns in the schema's order (for the GPU
/// steps of `quiver-gpu`; the steps here name their columns: [`publish_columns`]). The types
/// are checked, the order cannot be.
pub fn publish(
    batch: &mut EventBatch,
    type_name: &str,
    columns: Vec<ArrayRef>,
    lengths: impl IntoIterator<Item = usize>,
) -> Result<()> {
    let s = schema(type_name);
    if columns.len() != s.fields().len() {
        return Err(Error::data(format!(
            "product '{type_name}': {} columns given, its schema has {}",
            columns.len(),
            s.fields().len()
        )));
    }
    let named = s.fields().iter().map(|f| f.name().as_str()).zip(columns);
    publish_columns(batch, type_name, named, lengths)
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
    let cols = [
        (
            "layer",
            concat_ref::<UInt8Type, _>(layer_starts.iter().map(|_| layers.as_slice())),
        ),
        (
            "first_hit",
            concat_ref::<UInt32Type, _>(layer_starts.iter().map(|s| &s[..10])),
        ),
        (
            "hits",
            concat_ref::<UInt32Type, _>(count.iter().map(|c| c.as_slice())),
        ),
    ];
    publish_columns(
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
    classifier::register(r);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::UInt16Array;

    use super::*;

    fn u16s(v: Vec<u16>) -> ArrayRef {
        Arc::new(UInt16Array::from(v))
    }

    #[test]
    fn product_batch_places_columns_by_name() {
        let b = product_batch(
            types::CALIBRATED_DIGIS,
            [
                ("module", u16s(vec![4])),
                ("charge", u16s(vec![3])),
                ("col", u16s(vec![2])),
                ("row", u16s(vec![1])),
            ],
        )
        .unwrap();
        let first = |i: usize| {
            let c = b.column(i).as_any().downcast_ref::<UInt16Array>();
            c.unwrap().value(0)
        };
        assert_eq!([first(0), first(1), first(2), first(3)], [1, 2, 3, 4]);
        assert_eq!(b.schema(), schema(types::CALIBRATED_DIGIS));
    }

    #[test]
    fn product_batch_names_the_product_and_the_column() {
        // The reference's names of the digis' row and column are not the product's.
        let err = product_batch(
            types::CALIBRATED_DIGIS,
            [("xx", u16s(vec![1])), ("yy", u16s(vec![2]))],
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("product 'calibrated_digis': no column 'xx'"),
            "{err}"
        );
        let err = product_batch(types::CA_CELLS, []).unwrap_err();
        assert!(
            err.to_string()
                .contains("product 'ca_cells': column 'alive' not given"),
            "{err}"
        );
    }

    #[test]
    fn publish_refuses_more_columns_than_the_schema() {
        let mut batch = EventBatch::new(0, 1);
        let cols = vec![u16s(vec![1]); 5];
        let err = publish(&mut batch, types::CALIBRATED_DIGIS, cols, [1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "product 'calibrated_digis': 5 columns given, its schema has 4"
        );
    }
}
