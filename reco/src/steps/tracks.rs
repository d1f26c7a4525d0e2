//! Adapters of the tracking: pixel tracks from hits, primary vertices from tracks.

use std::sync::Arc;

use arrow_array::types::{Float32Type, Int16Type, UInt16Type, UInt32Type, UInt8Type};
use arrow_array::{Array, ArrayRef, FixedSizeListArray, Float32Array, Int32Array, ListArray, RecordBatch};
use arrow_schema::Field;
use quiver_columnar::columns::{concat, concat_ref, values};
use quiver_columnar::{Backend, Error, EventBatch, InputSpec, ParamSpec, Product, ProductKey, Registry, Result, Signature, Step, StepType};

use super::types::*;
use super::{per_event, publish, schema};
use crate::vertices::{find_vertices, Clusterizer, TracksView, VertexConfig};

/// A list column from per-row lengths and flat values (pooled memory).
pub(crate) fn list_column<T: arrow_array::ArrowPrimitiveType>(lengths: impl Iterator<Item = usize>, flat: arrow_array::PrimitiveArray<T>) -> Result<ArrayRef> {
    let offsets = quiver_columnar::product::offsets_from_lengths(lengths);
    let field = Arc::new(Field::new("item", T::DATA_TYPE, false));
    Ok(Arc::new(ListArray::try_new(field, offsets, Arc::new(flat), None)?))
}

/// The flat values of a fixed-size-list f32 column and its width.
fn fixed_values<'a>(p: &'a Product, name: &str) -> Result<(&'a [f32], usize)> {
    let col = p.batch().column_by_name(name).ok_or_else(|| Error::data(format!("product '{}' has no column '{name}'", p.type_name())))?;
    let fl = col
        .as_any()
        .downcast_ref::<FixedSizeListArray>()
        .ok_or_else(|| Error::data(format!("product '{}': column '{name}' is {}, expected a fixed-size list of Float32", p.type_name(), col.data_type())))?;
    let width = fl.value_length() as usize;
    let v = fl
        .values()
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| Error::data(format!("product '{}': column '{name}' does not hold Float32", p.type_name())))?;
    Ok((&v.values()[fl.offset() * width..(fl.offset() + fl.len()) * width], width))
}

// --- vertices -------------------------------------------------------------------------

struct VerticesStep {
    input: ProductKey,
    cfg: VertexConfig,
}

impl Step for VerticesStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let t = batch.get(&self.input)?;
        let (zip, pt, quality) = (values::<Float32Type>(&t, "zip")?, values::<Float32Type>(&t, "pt")?, values::<UInt8Type>(&t, "quality")?);
        let n_hits8 = values::<UInt8Type>(&t, "n_hits")?;
        let (cov, width) = fixed_values(&t, "covariance")?;
        if width != 15 {
            return Err(Error::data(format!("product 'tracks': covariance has {width} terms, expected 15")));
        }
        let out = per_event(batch, |e| {
            let rows = t.event_rows(e);
            let cov_zip: Vec<f32> = rows.clone().map(|r| cov[r * 15 + 14]).collect();
            let n_hits: Vec<u16> = n_hits8[rows.clone()].iter().map(|&n| n as u16).collect();
            let view = TracksView::new(&zip[rows.clone()], &cov_zip, &pt[rows.clone()], &quality[rows], &n_hits).map_err(|e| Error::data(e.to_string()))?;
            find_vertices(&view, &self.cfg).map_err(|e| Error::data(e.to_string()))
        })?;
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
        let lengths = out.iter().flat_map(|v| v.track_offsets.windows(2).map(|w| (w[1] - w[0]) as usize));
        let cols: Vec<ArrayRef> = vec![
            concat_ref::<Float32Type, _>(out.iter().map(|v| v.zv.as_slice())),
            concat_ref::<Float32Type, _>(out.iter().map(|v| v.wv.as_slice())),
            concat_ref::<Float32Type, _>(out.iter().map(|v| v.chi2.as_slice())),
            Arc::new(Int32Array::from(out.iter().flat_map(|v| v.ndof.iter().copied()).collect::<Vec<i32>>())),
            concat_ref::<Float32Type, _>(out.iter().map(|v| v.ptv2.as_slice())),
            concat_ref::<UInt16Type, _>(ranks.iter().map(Vec::as_slice)),
            list_column(lengths, tracks_flat)?,
        ];
        publish(batch, VERTICES, cols, out.iter().map(|v| v.zv.len()))?;
        let idv = vec![concat_ref::<Int16Type, _>(out.iter().map(|v| v.idv.as_slice()))];
        batch.put(Product::new(RecordBatch::try_new(schema(TRACK_VERTICES), idv)?, t.offsets().clone())?)
    }
}

/// Registers the tracking step types.
pub(super) fn register(r: &mut Registry) {
    r.add(StepType {
        name: "vertices",
        doc: "Primary vertices: density clustering of track z0, fit, split, refit, sort by Σ pT² (PixelVertexProducerCUDA)",
        params: vec![
            ParamSpec::choice("clusterizer", &["density", "dbscan", "iterative"], "track clustering in z"),
            ParamSpec::int("min_t", 2, "minimum neighbours for a seed (nn ≥ min_t)"),
            ParamSpec::float("eps", 0.07, "maximum |Δz| between neighbours, cm"),
            ParamSpec::float("errmax", 0.01, "maximum σ(z) of a track that seeds, cm"),
            ParamSpec::float("chi2max", 9.0, "maximum Δz²/σ² between neighbours"),
            ParamSpec::float("pt_min", 0.5, "minimum track pT, GeV"),
            ParamSpec::int("min_hits", 4, "minimum hits of a track"),
        ],
        signature: Signature {
            inputs: vec![InputSpec::one("input", TRACKS, "pixel tracks")],
            outputs: vec![VERTICES.into(), TRACK_VERTICES.into()],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            let p = &cfg.params;
            let clusterizer = match p.str("clusterizer") {
                "dbscan" => Clusterizer::Dbscan,
                "iterative" => Clusterizer::Iterative,
                _ => Clusterizer::Density,
            };
            let vc = VertexConfig {
                clusterizer,
                min_t: p.int("min_t").clamp(0, i32::MAX as i64) as i32,
                eps: p.float("eps") as f32,
                errmax: p.float("errmax") as f32,
                chi2max: p.float("chi2max") as f32,
                pt_min: p.float("pt_min") as f32,
                min_hits: p.int("min_hits").clamp(0, u16::MAX as i64) as u16,
                ..Default::default()
            };
            vc.validate().map_err(|e| Error::plan(&cfg.label, e.to_string()))?;
            Ok(Box::new(VerticesStep { input: cfg.input("input")?, cfg: vc }))
        },
    });
}

