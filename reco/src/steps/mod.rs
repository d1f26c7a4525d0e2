//! Step adapters: each takes products from the event batch, runs a numerical core of
//! [`crate::local`], [`crate::tracks`] or [`crate::vertices`] on every event (rayon over
//! events, results kept in event order) and publishes the result. Schemas are documented in
//! `docs/products.md`.

mod local;
mod tracks;

pub use local::{calib_config, charge_cut_config, clusterize_config, raw_to_digi_config};
pub use tracks::{ca_config, doublet_overflows, ntuplet_overflows, publish_ntuplets};

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef};
use quiver_columnar::product::offsets_from_lengths;
use quiver_columnar::{product_schema, Error, EventBatch, Product, Registry, Result, StepConfig};
use rayon::prelude::*;

/// Product type names of the local reconstruction.
pub mod types {
    pub const FED_RAW: &str = "fed_raw";
    pub const BEAMSPOT: &str = "beamspot";
    pub const DIGIS: &str = "digis";
    pub const DIGI_ERRORS: &str = "digi_errors";
    pub const CALIBRATED_DIGIS: &str = "calibrated_digis";
    pub const PIXEL_CLUSTERS: &str = "pixel_clusters";
    pub const CLUSTER_MODULES: &str = "cluster_modules";
    pub const CLUSTERED_DIGIS: &str = "clustered_digis";
    pub const HIT_MODULES: &str = "hit_modules";
    pub const HITS: &str = "hits";
    pub const HIT_LAYERS: &str = "hit_layers";
    pub const DOUBLETS: &str = "doublets";
    pub const NTUPLETS: &str = "ntuplets";
    pub const CA_CELLS: &str = "ca_cells";
    pub const TRACK_FITS: &str = "track_fits";
    pub const TRACKS: &str = "tracks";
    pub const VERTICES: &str = "vertices";
    pub const TRACK_VERTICES: &str = "track_vertices";
}
use types::*;

pub(crate) fn f(name: &str, t: DataType) -> Field {
    Field::new(name, t, false)
}

/// A fixed-size list of `n` non-null f32 (track parameters, covariances).
pub(crate) fn fixed_f32(n: i32) -> DataType {
    DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, false)), n)
}

/// A list of non-null values (hit or track indices).
pub(crate) fn list_of(t: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", t, false)))
}

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
    use DataType::*;
    let fields = match type_name {
        FED_RAW => vec![f("fed", UInt32), f("data", Binary)],
        BEAMSPOT => ["x", "y", "z", "sigma_z", "beam_width_x", "beam_width_y", "dxdz", "dydz", "emittance_x", "emittance_y", "beta_star"]
            .iter()
            .map(|n| f(n, Float32))
            .collect(),
        DIGIS => vec![f("row", UInt16), f("col", UInt16), f("adc", UInt16), f("module", UInt16), f("raw_id", UInt32), f("pdigi", UInt32)],
        DIGI_ERRORS => vec![f("fed", UInt32), f("word", UInt64), f("raw_id", UInt32), f("error_type", UInt8)],
        CALIBRATED_DIGIS => vec![f("row", UInt16), f("col", UInt16), f("charge", UInt16), f("module", UInt16)],
        PIXEL_CLUSTERS | CLUSTERED_DIGIS => vec![f("module", UInt16), f("cluster", Int32)],
        CLUSTER_MODULES | HIT_MODULES => vec![f("module", UInt16), f("first_digi", UInt32), f("clusters", UInt32)],
        HITS => vec![
            f("x_local", Float32),
            f("y_local", Float32),
            f("xerr_local", Float32),
            f("yerr_local", Float32),
            f("x_global", Float32),
            f("y_global", Float32),
            f("z_global", Float32),
            f("r_global", Float32),
            f("iphi", Int16),
            f("charge", Int32),
            f("size_x", Int16),
            f("size_y", Int16),
            f("det_index", UInt16),
        ],
        DOUBLETS => vec![f("inner", UInt32), f("outer", UInt32), f("pair", UInt8), f("listed", Boolean)],
        NTUPLETS => vec![f("quality", UInt8), f("hits", list_of(UInt32)), f("cells", list_of(UInt32))],
        CA_CELLS => vec![f("alive", Boolean)],
        HIT_LAYERS => vec![f("layer", UInt8), f("first_hit", UInt32), f("hits", UInt32)],
        TRACKS | TRACK_FITS => vec![
            f("quality", UInt8),
            f("pt", Float32),
            f("eta", Float32),
            f("phi", Float32),
            f("tip", Float32),
            f("zip", Float32),
            f("chi2", Float32),
            f("charge", Int8),
            f("n_hits", UInt8),
            f("state", fixed_f32(5)),
            f("covariance", fixed_f32(15)),
            f("hits", list_of(UInt32)),
        ],
        VERTICES => vec![
            f("z", Float32),
            f("weight", Float32),
            f("chi2", Float32),
            f("ndof", Int32),
            f("pt2", Float32),
            f("pt2_rank", UInt16),
            f("tracks", list_of(UInt32)),
        ],
        TRACK_VERTICES => vec![f("vertex", Int16)],
        _ => return None,
    };
    Some(product_schema(type_name, 1, fields))
}

/// Runs `per_event` on every event of the batch in parallel, results in event order; the
/// error names the absolute event.
pub(crate) fn per_event<T: Send>(batch: &EventBatch, per_event: impl Fn(usize) -> Result<T> + Sync) -> Result<Vec<T>> {
    (0..batch.n_events())
        .into_par_iter()
        .map(|e| per_event(e).map_err(|err| Error::data(format!("event {}: {err}", batch.first_event() + e as u64))))
        .collect()
}

/// Publishes a product of `type_name` (its registered schema) from its columns and the
/// rows of each event (shared with the GPU steps of `quiver-gpu`).
pub fn publish(batch: &mut EventBatch, type_name: &str, columns: Vec<ArrayRef>, lengths: impl IntoIterator<Item = usize>) -> Result<()> {
    let rb = RecordBatch::try_new(schema(type_name), columns)?;
    batch.put(Product::new(rb, offsets_from_lengths(lengths)?)?)
}

/// Publishes the step's `capacity_overflows` (one list of overflows per event).
pub fn publish_overflows(batch: &mut EventBatch, events: Vec<quiver_columnar::overflow::EventOverflows>) -> Result<()> {
    batch.put(quiver_columnar::overflow::overflow_product(&events)?)
}

/// Publishes `hit_layers` (ten rows per event: layer, first hit, hits) from each event's
/// `hitsLayerStart` (eleven offsets).
pub fn publish_hit_layers(batch: &mut EventBatch, layer_starts: &[[u32; 11]]) -> Result<()> {
    use arrow_array::types::{UInt32Type, UInt8Type};
    use quiver_columnar::columns::concat_ref;
    let layers: Vec<u8> = (0..10u8).collect();
    let count: Vec<[u32; 10]> = layer_starts.iter().map(|s| std::array::from_fn(|l| s[l + 1] - s[l])).collect();
    let cols = vec![
        concat_ref::<UInt8Type, _>(layer_starts.iter().map(|_| layers.as_slice())),
        concat_ref::<UInt32Type, _>(layer_starts.iter().map(|s| &s[..10])),
        concat_ref::<UInt32Type, _>(count.iter().map(|c| c.as_slice())),
    ];
    publish(batch, types::HIT_LAYERS, cols, layer_starts.iter().map(|_| 10))
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

pub(crate) fn int_param(cfg: &StepConfig, name: &str, range: std::ops::RangeInclusive<i64>) -> Result<i64> {
    let v = cfg.params.int(name);
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(cfg.param_error(name, format!("{v} is outside {}..={}", range.start(), range.end())))
    }
}

/// Registers the step types of the pixel chain.
pub fn register(r: &mut Registry) {
    local::register(r);
    tracks::register(r);
}
