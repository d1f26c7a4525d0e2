//! Adapter of the vertex finder: primary vertices from tracks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::types::{Float32Type, Int16Type, UInt16Type, UInt32Type, UInt8Type};
use arrow_array::{ArrayRef, Int32Array};
use quiver_columnar::columns::{concat, concat_ref, values};
use quiver_columnar::{
    Backend, Error, EventBatch, InputSpec, ParamSpec, Product, ProductKey, Registry, Result,
    Signature, Step, StepConfig, StepType,
};

use super::fits::per_event_report;
use super::tracks::{fixed_values, list_column};
use super::types::*;
use super::{per_event, product_batch, publish_columns};
use crate::capacity::Capacities;
use crate::vertices::{
    find_vertices, select_tracks, AnnealingConfig, Clusterizer, Selected, TracksView, VertexConfig,
    Vertices,
};

struct VerticesStep {
    input: ProductKey,
    cfg: VertexConfig,
    tally: VertexTally,
}

/// Vertices per event, for the run summary of `vertices` (CPU or GPU).
#[derive(Default)]
pub struct VertexTally([AtomicU64; 2]);

impl VertexTally {
    /// Counts a batch's vertices.
    pub fn add(&self, out: &[Vertices]) {
        self.0[0].fetch_add(out.len() as u64, Ordering::Relaxed);
        self.0[1].fetch_add(
            out.iter().map(|v| v.zv.len() as u64).sum(),
            Ordering::Relaxed,
        );
    }
    /// The summary line.
    pub fn report(&self) -> String {
        per_event_report(&self.0, &["vertices"]).unwrap_or_default()
    }
}

/// The columns of a `tracks` product the vertex finder reads.
struct VertexColumns<'a> {
    t: &'a Product,
    zip: &'a [f32],
    pt: &'a [f32],
    quality: &'a [u8],
    n_hits8: &'a [u8],
    cov: &'a [f32],
}

impl<'a> VertexColumns<'a> {
    fn new(t: &'a Product) -> Result<Self> {
        let (cov, width) = fixed_values(t, "covariance")?;
        if width != 15 {
            return Err(Error::data(format!(
                "product 'tracks': covariance has {width} terms, expected 15"
            )));
        }
        Ok(VertexColumns {
            t,
            zip: values::<Float32Type>(t, "zip")?,
            pt: values::<Float32Type>(t, "pt")?,
            quality: values::<UInt8Type>(t, "quality")?,
            n_hits8: values::<UInt8Type>(t, "n_hits")?,
            cov,
        })
    }
    /// Event `e`'s tracks as the finder's view, given to `f`.
    fn with_event<R>(&self, e: usize, f: impl FnOnce(&TracksView) -> Result<R>) -> Result<R> {
        let rows = self.t.event_rows(e);
        let cov_zip: Vec<f32> = rows.clone().map(|r| self.cov[r * 15 + 14]).collect();
        let n_hits: Vec<u16> = self.n_hits8[rows.clone()]
            .iter()
            .map(|&n| n as u16)
            .collect();
        let view = TracksView::new_unbounded(
            &self.zip[rows.clone()],
            &cov_zip,
            &self.pt[rows.clone()],
            &self.quality[rows],
            &n_hits,
        )
        .map_err(|e| Error::data(e.to_string()))?;
        f(&view)
    }
}

/// Every event's selected tracks for the vertex finder (its track slots and the selection),
/// from a `tracks` product, with the CPU step's checks: an error here is the CPU step's
/// error too (for a GPU implementation of `vertices`).
pub fn vertex_selection(t: &Product, cfg: &VertexConfig) -> Result<Vec<(usize, Selected)>> {
    let cols = VertexColumns::new(t)?;
    (0..t.n_events())
        .map(|e| {
            cols.with_event(e, |view| {
                Ok((
                    view.len(),
                    select_tracks(view, cfg).map_err(|e| Error::data(e.to_string()))?,
                ))
            })
        })
        .collect()
}

/// Publishes `vertices` and `track_vertices` from every event's vertices (`t`: the tracks
/// they were found from).
pub fn publish_vertices(batch: &mut EventBatch, t: &Product, out: &[Vertices]) -> Result<()> {
    // Rank 0 = largest Σ pT² (the reference's sortInd is ascending).
    let ranks: Vec<Vec<u16>> = out
        .iter()
        .map(|v| {
            let n = v.sort_ind.len();
            let mut rank = vec![0u16; n];
            for (k, &vi) in v.sort_ind.iter().enumerate() {
                rank[vi as usize] = (n - 1 - k) as u16;
            }
            rank
        })
        .collect();
    let tracks_flat = concat::<UInt32Type, _>(out.iter().map(|v| v.track_indices.as_slice()));
    let lengths = out
        .iter()
        .flat_map(|v| v.track_offsets.windows(2).map(|w| (w[1] - w[0]) as usize));
    let f32s = |f: fn(&Vertices) -> &[f32]| concat_ref::<Float32Type, _>(out.iter().map(f));
    let ndof: ArrayRef = Arc::new(Int32Array::from(
        out.iter()
            .flat_map(|v| v.ndof.iter().copied())
            .collect::<Vec<i32>>(),
    ));
    let cols = [
        ("z", f32s(|v| &v.zv)),
        ("weight", f32s(|v| &v.wv)),
        ("chi2", f32s(|v| &v.chi2)),
        ("ndof", ndof),
        ("pt2", f32s(|v| &v.ptv2)),
        (
            "pt2_rank",
            concat_ref::<UInt16Type, _>(ranks.iter().map(Vec::as_slice)),
        ),
        ("tracks", list_column(lengths, tracks_flat)?),
    ];
    publish_columns(batch, VERTICES, cols, out.iter().map(|v| v.zv.len()))?;
    let idv = concat_ref::<Int16Type, _>(out.iter().map(|v| v.idv.as_slice()));
    batch.put(Product::new(
        product_batch(TRACK_VERTICES, [("vertex", idv)])?,
        t.offsets().clone(),
    )?)
}

impl Step for VerticesStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let t = batch.get(&self.input)?;
        let cols = VertexColumns::new(&t)?;
        let out = per_event(batch, |e| {
            cols.with_event(e, |view| {
                find_vertices(view, &self.cfg).map_err(|e| Error::data(e.to_string()))
            })
        })?;
        self.tally.add(&out);
        publish_vertices(batch, &t, &out)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(Some(self.tally.report()))
    }
}

/// Registers `vertices`.
pub(super) fn register(r: &mut Registry) {
    r.add(StepType {
        name: "vertices",
        doc: "Primary vertices: density (or annealing) clustering of track z0, fit, split, refit, sort by Σ pT² (PixelVertexProducerCUDA)",
        params: vec![
            ParamSpec::choice("clusterizer", &["density", "dbscan", "iterative", "annealing"], "track clustering in z"),
            ParamSpec::int("min_t", 2, "minimum neighbours for a seed (nn ≥ min_t)").within(0.0, 10_000.0),
            ParamSpec::float("eps", 0.07, "maximum |Δz| between neighbours, cm").above(0.0, 0.1),
            ParamSpec::float("errmax", 0.01, "maximum σ(z) of a track that seeds, cm").within(0.0, 100.0),
            ParamSpec::float("chi2max", 9.0, "maximum Δz²/σ² between neighbours").above(0.0, 1e6),
            ParamSpec::float("pt_min", 0.5, "minimum track pT, GeV").within(0.0, 1000.0),
            ParamSpec::int("min_hits", 4, "minimum hits of a track (tracks have 3 to 5)").within(0.0, 5.0),
            ParamSpec::float("t_min", 4.0, "annealing: temperature where splitting stops and outliers are rejected").above(0.0, 1e4),
            ParamSpec::float("t_purge", 4.0, "annealing: temperature of the purge of prototypes with < 2 unique tracks (≤ t_min)").above(0.0, 1e4),
            ParamSpec::float("t_stop", 0.5, "annealing: temperature of the final track assignment (≤ t_purge)").above(0.0, 1e4),
            ParamSpec::float("cooling_factor", 0.6, "annealing: temperature factor per cooling step, in (0, 1)").above(0.0, 0.99),
            ParamSpec::float("z_cutoff", 3.0, "annealing: outlier cut in track z errors (0: no outlier rejection)").within(0.0, 100.0),
            ParamSpec::float("vertex_size", 0.006, "annealing: added in quadrature to each track's z error, cm").within(0.0, 1.0),
            ParamSpec::float("z_merge", 0.01, "annealing: prototypes closer than this may merge, cm").within(0.0, 1.0),
            ParamSpec::float("unique_weight", 0.5, "annealing: fraction of the largest probability that makes a track unique to a prototype").above(0.0, 1.0),
            ParamSpec::float("assign_weight", 0.5, "annealing: smallest probability that assigns a track to a vertex").above(0.0, 0.99),
            Capacities::param(),
        ],
        signature: Signature {
            inputs: vec![InputSpec::one("input", TRACKS, "pixel tracks")],
            outputs: vec![VERTICES.into(), TRACK_VERTICES.into()],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| Ok(Box::new(VerticesStep { input: cfg.input("input")?, cfg: vertex_config(cfg)?, tally: VertexTally::default() })),
    });
}

/// The vertex finder's configuration from a `vertices` step's parameters (for the GPU
/// implementation of the step).
pub fn vertex_config(cfg: &StepConfig) -> Result<VertexConfig> {
    let p = &cfg.params;
    let clusterizer = match p.str("clusterizer") {
        "dbscan" => Clusterizer::Dbscan,
        "iterative" => Clusterizer::Iterative,
        "annealing" => Clusterizer::Annealing,
        _ => Clusterizer::Density,
    };
    let annealing = AnnealingConfig {
        t_min: p.float("t_min"),
        t_purge: p.float("t_purge"),
        t_stop: p.float("t_stop"),
        cooling_factor: p.float("cooling_factor"),
        z_cutoff: p.float("z_cutoff"),
        vertex_size: p.float("vertex_size"),
        z_merge: p.float("z_merge"),
        unique_weight: p.float("unique_weight"),
        assign_weight: p.float("assign_weight"),
    };
    let vc = VertexConfig {
        clusterizer,
        // Within the declared ranges (checked when the plan was resolved).
        min_t: p.int("min_t") as i32,
        eps: p.float("eps") as f32,
        errmax: p.float("errmax") as f32,
        chi2max: p.float("chi2max") as f32,
        pt_min: p.float("pt_min") as f32,
        min_hits: p.int("min_hits") as u16,
        max_tracks: if Capacities::of(cfg)?.sized() {
            usize::MAX
        } else {
            crate::vertices::MAX_TRACKS
        },
        annealing,
        ..Default::default()
    };
    vc.validate()
        .map_err(|e| Error::plan(&cfg.label, e.to_string()))?;
    Ok(vc)
}
