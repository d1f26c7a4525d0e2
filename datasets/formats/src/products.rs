//! The pixel chain's product types: their names and their columns. The reconstruction
//! (`quiver_reco::steps::schema`) turns the columns into a product schema with the
//! framework's metadata (type name, [`VERSION`]); the Python bindings check the products of
//! Python steps against the same columns. Documented in `docs/products.md`.

use std::sync::Arc;

use arrow_schema::{DataType, Field};

/// Version of every schema below (bumped when a product's columns change).
pub const VERSION: u32 = 1;

/// Product type names of the pixel chain.
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
    pub const TRACK_SCORES: &str = "track_scores";
}
use types::*;

fn f(name: &str, t: DataType) -> Field {
    Field::new(name, t, false)
}

/// A fixed-size list of `n` non-null f32 (track parameters, covariances).
fn fixed_f32(n: i32) -> DataType {
    DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, false)), n)
}

/// A list of non-null values (hit or track indices).
fn list_of(t: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", t, false)))
}

/// The columns of a product type of the pixel chain, in order; `None` for other names.
///
/// ```
/// use quiver_formats::products::{fields, types};
/// assert_eq!(fields(types::HITS).unwrap()[0].name(), "x_local");
/// assert!(fields("floats").is_none());
/// ```
pub fn fields(type_name: &str) -> Option<Vec<Field>> {
    use DataType::*;
    let fields = match type_name {
        FED_RAW => vec![f("fed", UInt32), f("data", Binary)],
        BEAMSPOT => [
            "x",
            "y",
            "z",
            "sigma_z",
            "beam_width_x",
            "beam_width_y",
            "dxdz",
            "dydz",
            "emittance_x",
            "emittance_y",
            "beta_star",
        ]
        .iter()
        .map(|n| f(n, Float32))
        .collect(),
        DIGIS => vec![
            f("row", UInt16),
            f("col", UInt16),
            f("adc", UInt16),
            f("module", UInt16),
            f("raw_id", UInt32),
            f("pdigi", UInt32),
        ],
        DIGI_ERRORS => vec![
            f("fed", UInt32),
            f("word", UInt64),
            f("raw_id", UInt32),
            f("error_type", UInt8),
        ],
        CALIBRATED_DIGIS => vec![
            f("row", UInt16),
            f("col", UInt16),
            f("charge", UInt16),
            f("module", UInt16),
        ],
        PIXEL_CLUSTERS | CLUSTERED_DIGIS => vec![f("module", UInt16), f("cluster", Int32)],
        CLUSTER_MODULES | HIT_MODULES => vec![
            f("module", UInt16),
            f("first_digi", UInt32),
            f("clusters", UInt32),
        ],
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
        DOUBLETS => vec![
            f("inner", UInt32),
            f("outer", UInt32),
            f("pair", UInt8),
            f("listed", Boolean),
        ],
        NTUPLETS => vec![
            f("quality", UInt8),
            f("hits", list_of(UInt32)),
            f("cells", list_of(UInt32)),
        ],
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
        TRACK_SCORES => vec![f("score", Float32), f("quality", UInt8)],
        _ => return None,
    };
    Some(fields)
}
