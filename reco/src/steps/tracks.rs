//! Adapters of the tracking: pixel tracks from hits, primary vertices from tracks.

use std::sync::Arc;

use arrow_array::types::{Float32Type, Int16Type, UInt16Type, UInt32Type, UInt8Type};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BooleanArray, FixedSizeListArray, Float32Array, ListArray,
    PrimitiveArray,
};
use arrow_buffer::ScalarBuffer;
use arrow_schema::Field;
use quiver_columnar::columns::{concat, concat_ref, values, values_buffer};
use quiver_columnar::{
    Backend, Error, EventBatch, InputSpec, ParamSpec, Product, ProductKey, Registry, Result,
    Signature, Step, StepConfig, StepType,
};
use quiver_formats::conditions::CpeParams;

use super::types::*;
use super::{cond, per_event, product_batch, publish_columns, publish_overflows};
use crate::capacity::{names, Capacities};
use crate::tracks::{
    ca_state_from_columns, layer_start_from_det_index, stage_doublet_cells, stage_ntuplets_on,
    CaConfig, HitsView, TrackError,
};
use quiver_columnar::overflow::{EventOverflows, Overflow, CAPACITY_OVERFLOWS};

pub(super) fn tracking(e: TrackError) -> Error {
    Error::data(e.to_string())
}

/// The hits as the host side of a GPU tracking step reads them: the rows per event and the
/// detIndex column, all that the checks, the fit selection and the tables of `ca_doublets`,
/// `ca_ntuplets`, `track_fit` and `track_quality` read of them (the positions stay on the
/// device). For a host product, [`check_hit_columns`] first (the CPU steps' column checks).
#[derive(Clone, Copy, Debug)]
pub struct HitDets<'a> {
    det: &'a [u16],
    offsets: &'a [i32],
}

impl<'a> HitDets<'a> {
    /// The detIndex column of a batch's hits and its per-event row offsets (from 0, not
    /// decreasing, ending at the column's length).
    ///
    /// ```
    /// use quiver_reco::steps::HitDets;
    /// let h = HitDets::new(&[3, 50, 7], &[0, 2, 3]).unwrap();
    /// assert_eq!((h.n_events(), h.event(1)), (2, &[7u16][..]));
    /// assert!(HitDets::new(&[3, 50, 7], &[0, 2]).is_err()); // a hit of no event
    /// assert!(HitDets::new(&[3], &[0, 2, 1]).is_err());
    /// ```
    pub fn new(det: &'a [u16], offsets: &'a [i32]) -> Result<Self> {
        let ok = offsets.first() == Some(&0)
            && offsets.windows(2).all(|w| w[0] <= w[1])
            && offsets.last().is_some_and(|&l| l as usize == det.len());
        if !ok {
            return Err(Error::data(format!(
                "hits: {} offsets do not cover {} detIndex values in order",
                offsets.len(),
                det.len()
            )));
        }
        Ok(HitDets { det, offsets })
    }
    /// Events.
    pub fn n_events(&self) -> usize {
        self.offsets.len() - 1
    }
    /// The detIndex column of event `e`.
    pub fn event(&self, e: usize) -> &'a [u16] {
        &self.det[self.offsets[e] as usize..self.offsets[e + 1] as usize]
    }
}

/// Every column the tracking steps read of a `hits` product, checked as the CPU steps check
/// them (present, of its type, no nulls); the detIndex column on success.
///
/// ```
/// use quiver_columnar::Product;
/// use quiver_reco::steps::{check_hit_columns, schema};
/// let b = arrow_array::RecordBatch::new_empty(schema("hits"));
/// let h = Product::from_lengths(b, [0]).unwrap();
/// assert!(check_hit_columns(&h).unwrap().is_empty());
/// let other = Product::from_lengths(arrow_array::RecordBatch::new_empty(schema("digis")), [0]).unwrap();
/// assert!(check_hit_columns(&other).is_err());
/// ```
pub fn check_hit_columns(h: &Product) -> Result<&[u16]> {
    Ok(HitColumns::new(h)?.det)
}

/// The columns of one event's hits as the tracking reads them.
pub(super) struct HitColumns<'a> {
    p: &'a Product,
    x: &'a [f32],
    y: &'a [f32],
    z: &'a [f32],
    r: &'a [f32],
    iphi: &'a [i16],
    size_x: &'a [i16],
    size_y: &'a [i16],
    det: &'a [u16],
    xerr: &'a [f32],
    yerr: &'a [f32],
}

impl<'a> HitColumns<'a> {
    pub(super) fn new(p: &'a Product) -> Result<Self> {
        Ok(HitColumns {
            p,
            x: values::<Float32Type>(p, "x_global")?,
            y: values::<Float32Type>(p, "y_global")?,
            z: values::<Float32Type>(p, "z_global")?,
            r: values::<Float32Type>(p, "r_global")?,
            iphi: values::<Int16Type>(p, "iphi")?,
            size_x: values::<Int16Type>(p, "size_x")?,
            size_y: values::<Int16Type>(p, "size_y")?,
            det: values::<UInt16Type>(p, "det_index")?,
            xerr: values::<Float32Type>(p, "xerr_local")?,
            yerr: values::<Float32Type>(p, "yerr_local")?,
        })
    }

    pub(super) fn event(&self, e: usize, cpe: &'a CpeParams) -> Result<HitsView<'a>> {
        let r = self.p.event_rows(e);
        let det = &self.det[r.clone()];
        Ok(HitsView {
            x_global: &self.x[r.clone()],
            y_global: &self.y[r.clone()],
            z_global: &self.z[r.clone()],
            r_global: &self.r[r.clone()],
            iphi: &self.iphi[r.clone()],
            size_x: &self.size_x[r.clone()],
            size_y: &self.size_y[r.clone()],
            det_index: det,
            xerr_local: &self.xerr[r.clone()],
            yerr_local: &self.yerr[r],
            cpe,
            layer_start: layer_start_from_det_index(det).map_err(tracking)?,
        })
    }
}

/// A list column's per-row slices (offsets relative to the values).
pub(super) fn list_u32<'a>(p: &'a Product, name: &str) -> Result<(&'a [i32], &'a [u32])> {
    let col = p.batch().column_by_name(name).ok_or_else(|| {
        Error::data(format!(
            "product '{}' has no column '{name}'",
            p.type_name()
        ))
    })?;
    let l = col.as_any().downcast_ref::<ListArray>().ok_or_else(|| {
        Error::data(format!(
            "product '{}': column '{name}' is {}, expected List<UInt32>",
            p.type_name(),
            col.data_type()
        ))
    })?;
    let v = l
        .values()
        .as_any()
        .downcast_ref::<arrow_array::UInt32Array>()
        .ok_or_else(|| {
            Error::data(format!(
                "product '{}': column '{name}' does not hold UInt32",
                p.type_name()
            ))
        })?;
    Ok((l.value_offsets(), v.values()))
}

/// Offsets (rebased to 0) and values of the list rows `rows`.
pub(super) fn list_rows(
    offsets: &[i32],
    values: &[u32],
    rows: std::ops::Range<usize>,
) -> (Vec<u32>, Vec<u32>) {
    let base = offsets[rows.start];
    let off = offsets[rows.start..=rows.end]
        .iter()
        .map(|&o| (o - base) as u32)
        .collect();
    (
        off,
        values[base as usize..offsets[rows.end] as usize].to_vec(),
    )
}

pub(super) fn booleans(p: &Product, name: &str) -> Result<BooleanArray> {
    let col = p.batch().column_by_name(name).ok_or_else(|| {
        Error::data(format!(
            "product '{}' has no column '{name}'",
            p.type_name()
        ))
    })?;
    col.as_any()
        .downcast_ref::<BooleanArray>()
        .cloned()
        .ok_or_else(|| {
            Error::data(format!(
                "product '{}': column '{name}' is {}, expected Boolean",
                p.type_name(),
                col.data_type()
            ))
        })
}

// --- ca_doublets -----------------------------------------------------------------------

struct DoubletsStep {
    hits: ProductKey,
    cpe: Arc<CpeParams>,
    cfg: CaConfig,
}

impl Step for DoubletsStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let h = batch.get(&self.hits)?;
        let cols = HitColumns::new(&h)?;
        let mut out = per_event(batch, |e| {
            let hits = cols.event(e, &self.cpe)?;
            stage_doublet_cells(&hits, &self.cfg).map_err(tracking)
        })?;
        let rows: Vec<usize> = out.iter().map(|(c, ..)| c.inner.len()).collect();
        let d = &self.cfg.doublets;
        let overflows: Vec<EventOverflows> = out
            .iter()
            .map(|(c, _, unlisted)| {
                doublet_overflows_counted(d, &c.outer, *unlisted, c.cells_missed)
            })
            .collect();
        // The events' packed flags one after the other (one event: its buffer as it is).
        let listed = match &out[..] {
            [(_, bits, _)] => bits.clone(),
            _ => {
                let mut b = arrow_buffer::BooleanBufferBuilder::new(rows.iter().sum());
                out.iter().for_each(|(_, bits, _)| b.append_buffer(bits));
                b.finish()
            }
        };
        let cols = [
            (
                "inner",
                take_column::<UInt32Type, _>(&mut out, |(c, ..)| &mut c.inner),
            ),
            (
                "outer",
                take_column::<UInt32Type, _>(&mut out, |(c, ..)| &mut c.outer),
            ),
            (
                "pair",
                take_column::<UInt8Type, _>(&mut out, |(c, ..)| &mut c.pair),
            ),
            (
                "listed",
                Arc::new(BooleanArray::new(listed, None)) as ArrayRef,
            ),
        ];
        publish_columns(batch, DOUBLETS, cols, rows)?;
        publish_overflows(batch, overflows)
    }
}

/// Every event's vector `field` of `parts` as one column, taken out of `parts` (left empty):
/// one event's vector (the default batch) becomes the column's buffer without a copy;
/// several are concatenated.
pub(super) fn take_column<T: ArrowPrimitiveType, E>(
    parts: &mut [E],
    field: impl Fn(&mut E) -> &mut Vec<T::Native>,
) -> ArrayRef {
    if let [one] = parts {
        let v = std::mem::take(field(one));
        return Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(v), None));
    }
    let slices: Vec<&[T::Native]> = parts.iter_mut().map(|p| &field(p)[..]).collect();
    concat_ref::<T, _>(slices.iter().copied())
}

/// The `capacity_overflows` rows of one event of `ca_doublets` (also those of its GPU
/// implementation): the cells found with the container full (`cells_missed`), and the
/// cells not listed on their outer hit, with the largest number of cells ending on one hit.
///
/// ```
/// use quiver_reco::steps::doublet_overflows;
/// use quiver_reco::tracks::DoubletConfig;
/// let d = DoubletConfig { max_cells_per_hit: 1, ..Default::default() };
/// let o = doublet_overflows(&d, &[4, 4, 5], &[true, false, true], 0);
/// assert_eq!((o.len(), o[0].demanded, o[0].truncated), (1, Some(2), 1));
/// ```
pub fn doublet_overflows(
    d: &crate::tracks::DoubletConfig,
    outer: &[u32],
    listed: &[bool],
    cells_missed: u64,
) -> EventOverflows {
    let unlisted = listed.iter().filter(|&&l| !l).count() as u64;
    doublet_overflows_counted(d, outer, unlisted, cells_missed)
}

/// [`doublet_overflows`] with the cells not listed already counted (as
/// [`listed_bits`](crate::tracks::doublets::listed_bits) counts them): the cells are only
/// visited again, for the most cells of one hit, when some were left out.
///
/// ```
/// use quiver_reco::steps::{doublet_overflows, doublet_overflows_counted};
/// use quiver_reco::tracks::DoubletConfig;
/// let d = DoubletConfig { max_cells_per_hit: 1, ..Default::default() };
/// let outer = [4, 4, 5];
/// let o = doublet_overflows_counted(&d, &outer, 1, 0);
/// assert_eq!(o, doublet_overflows(&d, &outer, &[true, false, true], 0));
/// assert!(doublet_overflows_counted(&d, &[4, 5], 0, 0).is_empty());
/// ```
pub fn doublet_overflows_counted(
    d: &crate::tracks::DoubletConfig,
    outer: &[u32],
    unlisted: u64,
    cells_missed: u64,
) -> EventOverflows {
    let worst = if unlisted > 0 {
        let mut per_hit = std::collections::HashMap::<u32, u64>::new();
        for &h in outer {
            *per_hit.entry(h).or_default() += 1;
        }
        per_hit.values().copied().max()
    } else {
        None
    };
    doublet_overflow_rows(d, cells_missed, unlisted, worst)
}

/// [`doublet_overflows`] from the event's counts: cells past `max_number_of_doublets`,
/// cells not listed, and the most cells of any outer hit (a GPU step counts them on the
/// device).
///
/// ```
/// use quiver_reco::steps::{doublet_overflow_rows, doublet_overflows};
/// use quiver_reco::tracks::DoubletConfig;
/// let d = DoubletConfig::default();
/// let (outer, listed) = ([4, 4, 4, 9], [false, false, false, true]);
/// assert_eq!(doublet_overflows(&d, &outer, &listed, 2), doublet_overflow_rows(&d, 2, 3, Some(3)));
/// assert!(doublet_overflow_rows(&d, 0, 0, None).is_empty());
/// ```
pub fn doublet_overflow_rows(
    d: &crate::tracks::DoubletConfig,
    cells_missed: u64,
    unlisted: u64,
    worst: Option<u64>,
) -> EventOverflows {
    let mut o = Vec::new();
    if cells_missed > 0 {
        let limit = d.max_number_of_doublets as u64;
        o.push(Overflow {
            capacity: names::DOUBLETS,
            limit,
            demanded: Some(limit + cells_missed),
            truncated: cells_missed,
        });
    }
    if unlisted > 0 {
        o.push(Overflow {
            capacity: names::CELLS_PER_HIT,
            limit: d.max_cells_per_hit as u64,
            demanded: worst,
            truncated: unlisted,
        });
    }
    o
}

// --- ca_ntuplets -----------------------------------------------------------------------

struct NtupletsStep {
    hits: ProductKey,
    doublets: ProductKey,
    cpe: Arc<CpeParams>,
    cfg: CaConfig,
}

impl Step for NtupletsStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let (h, d) = (batch.get(&self.hits)?, batch.get(&self.doublets)?);
        let cols = HitColumns::new(&h)?;
        // The cells' columns are shared with the CA state, not copied.
        let (inner, outer, pair) = (
            values_buffer::<UInt32Type>(&d, "inner")?,
            values_buffer::<UInt32Type>(&d, "outer")?,
            values_buffer::<UInt8Type>(&d, "pair")?,
        );
        let listed = booleans(&d, "listed")?;
        let out = per_event(batch, |e| {
            let hits = cols.event(e, &self.cpe)?;
            let r = d.event_rows(e);
            let (at, n) = (r.start, r.len());
            let ca = ca_state_from_columns(
                &hits,
                inner.slice(at, n),
                outer.slice(at, n),
                pair.slice(at, n),
                &listed.values().slice(at, n),
            )
            .map_err(tracking)?;
            stage_ntuplets_on(&hits, ca, &self.cfg).map_err(tracking)
        })?;
        let alive = alive_bits(&out, d.num_rows());
        publish_ntuplets(batch, d.offsets(), &out, alive, &self.cfg.ntuplets)
    }
}

/// Whether each cell is alive, the events' cells one after the other.
/// Packed 64 cells at a time per event and appended whole: one `append` per cell cost
/// 0.26 ms per event at ⟨PU⟩ 50.
fn alive_bits(
    out: &[(
        crate::tracks::ntuplets::Tuples,
        crate::tracks::ntuplets::CaState,
    )],
    n_cells: usize,
) -> arrow_buffer::BooleanBuffer {
    let mut alive = arrow_buffer::BooleanBufferBuilder::new(n_cells);
    for (_, ca) in out {
        let a = &ca.alive;
        alive.append_buffer(&arrow_buffer::BooleanBuffer::collect_bool(a.len(), |i| {
            a[i]
        }));
    }
    alive.finish()
}

/// Publishes what `ca_ntuplets` makes from each event's tuples and CA state: `ntuplets`
/// (quality, hits, cells of every tuple), `ca_cells` (whether each cell of the doublets,
/// whose per-event offsets are `cell_offsets`, is alive: `alive`, one bit per cell) and the
/// `capacity_overflows` rows.
/// Shared by the CPU and GPU steps.
pub fn publish_ntuplets(
    batch: &mut EventBatch,
    cell_offsets: &arrow_buffer::OffsetBuffer<i32>,
    out: &[(
        crate::tracks::ntuplets::Tuples,
        crate::tracks::ntuplets::CaState,
    )],
    alive: arrow_buffer::BooleanBuffer,
    n: &crate::tracks::NtupletConfig,
) -> Result<()> {
    let n_cells = cell_offsets.last().copied().unwrap_or(0) as usize;
    if alive.len() != n_cells {
        return Err(Error::data(format!(
            "{} alive flags for {n_cells} cells",
            alive.len()
        )));
    }
    let quality: Vec<Vec<u8>> = out
        .iter()
        .map(|(t, _)| t.quality.iter().map(|&q| q as u8).collect())
        .collect();
    let hit_lengths = out
        .iter()
        .flat_map(|(t, _)| t.offsets.windows(2).map(|w| (w[1] - w[0]) as usize));
    let cell_lengths = out.iter().flat_map(|(_, ca)| {
        ca.tuple_cell_offsets
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
    });
    let cols = [
        (
            "quality",
            concat_ref::<UInt8Type, _>(quality.iter().map(Vec::as_slice)),
        ),
        (
            "hits",
            list_column(
                hit_lengths,
                concat::<UInt32Type, _>(out.iter().map(|(t, _)| t.hits.as_slice())),
            )?,
        ),
        (
            "cells",
            list_column(
                cell_lengths,
                concat::<UInt32Type, _>(out.iter().map(|(_, ca)| ca.tuple_cells.as_slice())),
            )?,
        ),
    ];
    publish_columns(batch, NTUPLETS, cols, out.iter().map(|(t, _)| t.len()))?;
    let alive: ArrayRef = Arc::new(BooleanArray::new(alive, None));
    batch.put(Product::new(
        product_batch(CA_CELLS, [("alive", alive)])?,
        cell_offsets.clone(),
    )?)?;
    publish_overflows(
        batch,
        out.iter().map(|(_, ca)| ntuplet_overflows(ca, n)).collect(),
    )
}

/// The tracking configuration of a CA/fit step from its parameters (for the GPU
/// implementations of the same steps).
pub fn ca_config(cfg: &StepConfig) -> Result<CaConfig> {
    let p = &cfg.params;
    let mut c = CaConfig::default();
    if let Some(v) = p.get("include_jumping_forward_doublets") {
        c.doublets.include_jumping_forward_doublets =
            matches!(v, quiver_columnar::ParamValue::Bool(true));
    }
    if let Some(quiver_columnar::ParamValue::Int(n)) = p.get("min_hits_per_ntuplet") {
        c.ntuplets.min_hits_per_ntuplet = u32::try_from(*n)
            .map_err(|_| cfg.param_error("min_hits_per_ntuplet", "must be ≥ 0"))?;
    }
    if let Some(quiver_columnar::ParamValue::Float(v)) = p.get("ptmin") {
        c.ntuplets.ptmin = *v as f32;
    }
    if let Some(quiver_columnar::ParamValue::Bool(v)) = p.get("early_fishbone") {
        c.ntuplets.early_fishbone = *v;
    }
    if let Some(quiver_columnar::ParamValue::Bool(v)) = p.get("late_fishbone") {
        c.ntuplets.late_fishbone = *v;
    }
    if let Some(quiver_columnar::ParamValue::Str(v)) = p.get("fit") {
        c.fit.use_riemann_fit = v == "riemann";
    }
    if let Some(quiver_columnar::ParamValue::Bool(v)) = p.get("fit5as4") {
        c.fit.fit5as4 = *v;
    }
    if Capacities::of(cfg)?.sized() {
        c = c.with_sized_capacities();
    }
    c.validate()
        .map_err(|e| Error::plan(&cfg.label, e.to_string()))?;
    Ok(c)
}

/// The list and tuple capacities a CA state reached (`ca_ntuplets`, and the replay of the
/// tuple lists in `track_quality`).
pub fn ntuplet_overflows(
    ca: &crate::tracks::ntuplets::CaState,
    n: &crate::tracks::NtupletConfig,
) -> EventOverflows {
    let mut o = Vec::new();
    if ca.neighbor_overflows > 0 {
        let t = ca.neighbor_overflows as u64;
        o.push(Overflow {
            capacity: names::NEIGHBORS_PER_CELL,
            limit: n.max_cell_neighbors as u64,
            demanded: None,
            truncated: t,
        });
    }
    if ca.track_overflows > 0 {
        let t = ca.track_overflows as u64;
        o.push(Overflow {
            capacity: names::TUPLES_PER_CELL,
            limit: n.max_cell_tracks as u64,
            demanded: None,
            truncated: t,
        });
    }
    if ca.tuple_overflows > 0 {
        let (limit, t) = (n.max_tuples as u64, ca.tuple_overflows as u64);
        o.push(Overflow {
            capacity: names::TUPLES,
            limit,
            demanded: Some(limit + t),
            truncated: t,
        });
    }
    o
}

/// A list column from per-row lengths and flat values (pooled memory).
pub(crate) fn list_column<T: arrow_array::ArrowPrimitiveType>(
    lengths: impl Iterator<Item = usize>,
    flat: arrow_array::PrimitiveArray<T>,
) -> Result<ArrayRef> {
    let offsets = quiver_columnar::product::offsets_from_lengths(lengths)?;
    let field = Arc::new(Field::new("item", T::DATA_TYPE, false));
    Ok(Arc::new(ListArray::try_new(
        field,
        offsets,
        Arc::new(flat),
        None,
    )?))
}

/// The flat values of a fixed-size-list f32 column and its width.
pub(super) fn fixed_values<'a>(p: &'a Product, name: &str) -> Result<(&'a [f32], usize)> {
    let col = p.batch().column_by_name(name).ok_or_else(|| {
        Error::data(format!(
            "product '{}' has no column '{name}'",
            p.type_name()
        ))
    })?;
    let fl = col
        .as_any()
        .downcast_ref::<FixedSizeListArray>()
        .ok_or_else(|| {
            Error::data(format!(
                "product '{}': column '{name}' is {}, expected a fixed-size list of Float32",
                p.type_name(),
                col.data_type()
            ))
        })?;
    let width = fl.value_length() as usize;
    let v = fl
        .values()
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| {
            Error::data(format!(
                "product '{}': column '{name}' does not hold Float32",
                p.type_name()
            ))
        })?;
    Ok((
        &v.values()[fl.offset() * width..(fl.offset() + fl.len()) * width],
        width,
    ))
}

/// `ca_doublets` builds the layer pairs for the shortest ntuplet that `ca_ntuplets` then
/// searches: the two steps must be given the same `min_hits_per_ntuplet`.
fn ntuplet_hits_agree(plan: &quiver_columnar::plan::ResolvedPlan) -> Result<()> {
    const KEY: &str = "min_hits_per_ntuplet";
    for s in plan.steps.iter().filter(|s| s.type_name == "ca_ntuplets") {
        let Some(n) = s.params.get(KEY) else { continue };
        for k in s.inputs.get("doublets").into_iter().flatten() {
            let Some(d) = plan
                .steps
                .iter()
                .find(|p| p.label == k.label && p.type_name == "ca_doublets")
            else {
                continue;
            };
            if let Some(m) = d.params.get(KEY).filter(|m| *m != n) {
                return Err(Error::plan(
                    &s.label,
                    format!(
                        "parameter '{KEY}' = {n} differs from the {m} of step '{}' (ca_doublets), whose doublets it reads: \
                         the doublet step builds the layer pairs for that ntuplet length; give both the same value",
                        d.label
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Registers the tracking step types.
pub(super) fn register(r: &mut Registry) {
    r.add_plan_check(ntuplet_hits_agree);
    let cpu = vec![Backend::Cpu];
    let min_hits = ParamSpec::int("min_hits_per_ntuplet", 3, "3: triplets and quadruplets; 4: quadruplets only (13 layer pairs); the same in ca_doublets and ca_ntuplets")
        .within(3.0, 4.0);
    let fishbones = [
        ParamSpec::bool(
            "early_fishbone",
            true,
            "kill collinear cells sharing an outer hit before the search",
        ),
        late_fishbone(),
    ];
    r.add(StepType {
        name: "ca_doublets",
        doc: "CA doublets: cells of the 19 layer pairs with the φ, z, z0, pT and cluster-size cuts",
        params: vec![
            ParamSpec::bool(
                "include_jumping_forward_doublets",
                true,
                "the four FPix jumping pairs (19 pairs, else 15)",
            ),
            min_hits.clone(),
            Capacities::param(),
        ],
        signature: Signature {
            inputs: vec![InputSpec::one("hits", HITS, "rec hits")],
            outputs: vec![DOUBLETS.into(), CAPACITY_OVERFLOWS.into()],
        },
        backends: cpu.clone(),
        build: |cfg| {
            Ok(Box::new(DoubletsStep {
                hits: cfg.input("hits")?,
                cpe: cond(cfg)?,
                cfg: ca_config(cfg)?,
            }))
        },
    });
    r.add(StepType {
        name: "ca_ntuplets",
        doc: "CA ntuplets: connect cells (r–z, curvature, DCA), fishbone, depth-first search (3–5 hits), early duplicate removal",
        params: vec![
            min_hits,
            ParamSpec::float("ptmin", 0.9, "pT of the r–z alignment cut, GeV").above(0.0, 1000.0),
            fishbones[0].clone(),
            fishbones[1].clone(),
            Capacities::param(),
        ],
        signature: Signature {
            inputs: vec![InputSpec::one("hits", HITS, "rec hits"), InputSpec::one("doublets", DOUBLETS, "cells")],
            outputs: vec![NTUPLETS.into(), CA_CELLS.into(), CAPACITY_OVERFLOWS.into()],
        },
        backends: cpu,
        build: |cfg| Ok(Box::new(NtupletsStep { hits: cfg.input("hits")?, doublets: cfg.input("doublets")?, cpe: cond(cfg)?, cfg: ca_config(cfg)? })),
    });
    super::fits::register(r);
    super::vertices::register(r);
}

/// The `late_fishbone` parameter of `ca_ntuplets` and `track_quality`.
pub(super) fn late_fishbone() -> ParamSpec {
    ParamSpec::bool(
        "late_fishbone",
        false,
        "the same after the search (off in the reference)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracks::ntuplets::{CaState, Tuples};

    /// The packed flags are the cells' own, across events whose cell counts are not
    /// multiples of 8 or 64 (each event's bits start mid-byte in the column).
    #[test]
    fn alive_bits_follow_every_cell_across_events() {
        let mut expected = Vec::new();
        let out: Vec<(Tuples, CaState)> = [0usize, 1, 7, 65, 130, 3, 64]
            .iter()
            .enumerate()
            .map(|(e, &n)| {
                let alive: Vec<bool> = (0..n).map(|i| (i * 7 + e * 3) % 5 != 0).collect();
                expected.extend_from_slice(&alive);
                let ca = CaState {
                    alive,
                    ..CaState::default()
                };
                (Tuples::default(), ca)
            })
            .collect();
        let bits = alive_bits(&out, expected.len());
        assert_eq!(bits.iter().collect::<Vec<bool>>(), expected);
        assert!(expected.iter().any(|&a| !a) && expected.len() == 270);
    }
}
