//! Adapters of the tracking: pixel tracks from hits, primary vertices from tracks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::types::{Float32Type, Int16Type, Int8Type, UInt16Type, UInt32Type, UInt8Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, FixedSizeListArray, Float32Array, Int32Array, ListArray,
    RecordBatch,
};
use arrow_schema::Field;
use quiver_columnar::columns::{concat, concat_ref, values};
use quiver_columnar::{
    Backend, Error, EventBatch, InputSpec, ParamSpec, Product, ProductKey, Registry, Result,
    Signature, Step, StepConfig, StepType,
};
use quiver_formats::conditions::CpeParams;

use super::types::*;
use super::{cond, per_event, publish, publish_overflows, schema};
use crate::capacity::{names, Capacities};
use crate::tracks::{
    ca_state_for_quality, check_tuple_hits, doublets_from_columns, layer_start_from_det_index,
    ntuplets::Tuples, stage_doublet_cells, stage_fit, stage_ntuplets, stage_quality,
    tuples_from_columns, CaConfig, HitsView, TrackError, Tracks,
};
use crate::vertices::{
    find_vertices, select_tracks, Clusterizer, Selected, TracksView, VertexConfig, Vertices,
};
use quiver_columnar::overflow::{EventOverflows, Overflow, CAPACITY_OVERFLOWS};

fn tracking(e: TrackError) -> Error {
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
struct HitColumns<'a> {
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
    fn new(p: &'a Product) -> Result<Self> {
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

    fn event(&self, e: usize, cpe: &'a CpeParams) -> Result<HitsView<'a>> {
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
fn list_u32<'a>(p: &'a Product, name: &str) -> Result<(&'a [i32], &'a [u32])> {
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
fn list_rows(
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

fn booleans(p: &Product, name: &str) -> Result<BooleanArray> {
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

/// One Arrow boolean column from the flags of a batch, packed 64 to a word, not bit by bit.
fn bool_column(flags: &[bool]) -> ArrayRef {
    Arc::new(BooleanArray::new(
        arrow_buffer::BooleanBuffer::collect_bool(flags.len(), |i| flags[i]),
        None,
    ))
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
        let out = per_event(batch, |e| {
            let hits = cols.event(e, &self.cpe)?;
            stage_doublet_cells(&hits, &self.cfg).map_err(tracking)
        })?;
        let d = &self.cfg.doublets;
        let overflows: Vec<EventOverflows> = out
            .iter()
            .map(|(c, listed)| doublet_overflows(d, &c.outer, listed, c.cells_missed))
            .collect();
        let cols: Vec<ArrayRef> = vec![
            concat_ref::<UInt32Type, _>(out.iter().map(|(c, _)| c.inner.as_slice())),
            concat_ref::<UInt32Type, _>(out.iter().map(|(c, _)| c.outer.as_slice())),
            concat_ref::<UInt8Type, _>(out.iter().map(|(c, _)| c.pair.as_slice())),
            bool_column(
                &out.iter()
                    .map(|(_, l)| l.as_slice())
                    .collect::<Vec<_>>()
                    .concat(),
            ),
        ];
        publish(
            batch,
            DOUBLETS,
            cols,
            out.iter().map(|(c, _)| c.inner.len()),
        )?;
        publish_overflows(batch, overflows)
    }
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
        let (inner, outer, pair) = (
            values::<UInt32Type>(&d, "inner")?,
            values::<UInt32Type>(&d, "outer")?,
            values::<UInt8Type>(&d, "pair")?,
        );
        let listed = booleans(&d, "listed")?;
        let out = per_event(batch, |e| {
            let hits = cols.event(e, &self.cpe)?;
            let r = d.event_rows(e);
            let bits = listed.values().slice(r.start, r.len());
            // Usually every cell is listed: skip the bit-by-bit unpacking then.
            let l: Vec<bool> = if bits.count_set_bits() == r.len() {
                vec![true; r.len()]
            } else {
                bits.iter().collect()
            };
            let dd =
                doublets_from_columns(&hits, &inner[r.clone()], &outer[r.clone()], &pair[r], &l)
                    .map_err(tracking)?;
            stage_ntuplets(&hits, dd, &self.cfg).map_err(tracking)
        })?;
        let mut alive = arrow_buffer::BooleanBufferBuilder::new(d.num_rows());
        for (_, ca) in &out {
            ca.cells
                .iter()
                .for_each(|c| alive.append(c.doublet_id >= 0));
        }
        publish_ntuplets(batch, d.offsets(), &out, alive.finish(), &self.cfg.ntuplets)
    }
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
    let cols: Vec<ArrayRef> = vec![
        concat_ref::<UInt8Type, _>(quality.iter().map(Vec::as_slice)),
        list_column(
            hit_lengths,
            concat::<UInt32Type, _>(out.iter().map(|(t, _)| t.hits.as_slice())),
        )?,
        list_column(
            cell_lengths,
            concat::<UInt32Type, _>(out.iter().map(|(_, ca)| ca.tuple_cells.as_slice())),
        )?,
    ];
    publish(batch, NTUPLETS, cols, out.iter().map(|(t, _)| t.len()))?;
    let alive: Vec<ArrayRef> = vec![Arc::new(BooleanArray::new(alive, None))];
    batch.put(Product::new(
        RecordBatch::try_new(schema(CA_CELLS), alive)?,
        cell_offsets.clone(),
    )?)?;
    publish_overflows(
        batch,
        out.iter().map(|(_, ca)| ntuplet_overflows(ca, n)).collect(),
    )
}

// --- track_fit / track_quality ----------------------------------------------------------

/// Publishes per-tuple tracks (fitted, with or without the final quality) as `type_name`.
fn publish_tracks(batch: &mut EventBatch, type_name: &str, out: &[Tracks]) -> Result<()> {
    macro_rules! cat {
        ($t:ty, $f:ident) => {
            concat_ref::<$t, _>(out.iter().map(|t| t.$f.as_slice()))
        };
    }
    let n_hits: Vec<Vec<u8>> = out
        .iter()
        .map(|t| t.n_hits.iter().map(|&n| n.min(255) as u8).collect())
        .collect();
    let state = concat::<Float32Type, _>(out.iter().map(|t| t.state.as_flattened()));
    let cov = concat::<Float32Type, _>(out.iter().map(|t| t.covariance.as_flattened()));
    let hit_lengths = out
        .iter()
        .flat_map(|t| t.hit_offsets.windows(2).map(|w| (w[1] - w[0]) as usize));
    let cols: Vec<ArrayRef> = vec![
        cat!(UInt8Type, quality),
        cat!(Float32Type, pt),
        cat!(Float32Type, eta),
        cat!(Float32Type, phi),
        cat!(Float32Type, tip),
        cat!(Float32Type, zip),
        cat!(Float32Type, chi2),
        cat!(Int8Type, charge),
        concat_ref::<UInt8Type, _>(n_hits.iter().map(Vec::as_slice)),
        fixed_list(state, 5)?,
        fixed_list(cov, 15)?,
        list_column(
            hit_lengths,
            concat::<UInt32Type, _>(out.iter().map(|t| t.hit_indices.as_slice())),
        )?,
    ];
    publish(batch, type_name, cols, out.iter().map(|t| t.quality.len()))
}

/// A fixed-size-list column of `n` f32 per row.
fn fixed_list(v: Float32Array, n: i32) -> Result<ArrayRef> {
    Ok(Arc::new(FixedSizeListArray::try_new(
        Arc::new(Field::new("item", arrow_schema::DataType::Float32, false)),
        n,
        Arc::new(v),
        None,
    )?))
}

struct FitStep {
    hits: ProductKey,
    ntuplets: ProductKey,
    cpe: Arc<CpeParams>,
    cfg: CaConfig,
}

/// One event's checked `track_fit` inputs: its hits and tuples.
pub struct FitInput<'a> {
    pub hits: HitsView<'a>,
    pub tuples: Tuples,
}

/// The `hits` and `ntuplets` columns `track_fit` reads, checked as the CPU step checks
/// them.
struct FitColumns<'a> {
    hits: HitColumns<'a>,
    n: &'a Product,
    quality: &'a [u8],
    hoff: &'a [i32],
    hvals: &'a [u32],
}

impl<'a> FitColumns<'a> {
    fn new(h: &'a Product, n: &'a Product) -> Result<Self> {
        let (hoff, hvals) = list_u32(n, "hits")?;
        Ok(FitColumns {
            hits: HitColumns::new(h)?,
            n,
            quality: values::<UInt8Type>(n, "quality")?,
            hoff,
            hvals,
        })
    }
    fn event(&self, e: usize, cpe: &'a CpeParams) -> Result<FitInput<'a>> {
        let hits = self.hits.event(e, cpe)?;
        let r = self.n.event_rows(e);
        let (off, hv) = list_rows(self.hoff, self.hvals, r.clone());
        let tuples = tuples_from_columns(&off, &hv, &self.quality[r]).map_err(tracking)?;
        Ok(FitInput { hits, tuples })
    }
}

/// One event's checked `track_fit` inputs as a GPU step reads them: its hits' detIndex
/// column and its tuples.
pub struct FitTuples<'a> {
    pub det: &'a [u16],
    pub tuples: Tuples,
}

/// Every event's [`FitTuples`] from the hits' detIndex ([`HitDets`]) and the `ntuplets`
/// product, checked as the CPU step checks them (the hits in module order, the tuples'
/// lists): an error here is the CPU step's error too.
pub fn fit_tuples<'a>(h: HitDets<'a>, n: &'a Product) -> Result<Vec<FitTuples<'a>>> {
    let (hoff, hvals) = list_u32(n, "hits")?;
    let quality = values::<UInt8Type>(n, "quality")?;
    if n.n_events() != h.n_events() {
        return Err(Error::data(format!(
            "{} events of tuples for {} of hits",
            n.n_events(),
            h.n_events()
        )));
    }
    (0..h.n_events())
        .map(|e| {
            let det = h.event(e);
            layer_start_from_det_index(det).map_err(tracking)?;
            let r = n.event_rows(e);
            let (off, hv) = list_rows(hoff, hvals, r.clone());
            let tuples = tuples_from_columns(&off, &hv, &quality[r]).map_err(tracking)?;
            Ok(FitTuples { det, tuples })
        })
        .collect()
}

/// The overflow row of one event of `track_fit`: tuples the fit takes (3 to 5 hits, not
/// duplicates) beyond its capacity per hit count keep zeros in the fit columns, as in the
/// reference; say so.
pub fn fit_overflows(tuples: &Tuples, n_fitted: u32, cfg: &CaConfig) -> EventOverflows {
    let eligible = (0..tuples.len())
        .filter(|&i| {
            (3..=5).contains(&tuples.size(i)) && tuples.quality[i] != crate::tracks::Quality::Dup
        })
        .count() as u64;
    let missed = eligible.saturating_sub(n_fitted as u64);
    (missed > 0)
        .then_some(Overflow {
            capacity: names::FITS_PER_MULTIPLICITY,
            limit: cfg.fit.max_concurrent_fits as u64,
            demanded: None,
            truncated: missed,
        })
        .into_iter()
        .collect()
}

/// Publishes `track_fit`'s products (`track_fits` and its overflow rows) from every event's
/// tracks and overflows.
pub fn publish_fits(batch: &mut EventBatch, out: Vec<(Tracks, EventOverflows)>) -> Result<()> {
    let (out, overflows): (Vec<Tracks>, Vec<EventOverflows>) = out.into_iter().unzip();
    publish_tracks(batch, TRACK_FITS, &out)?;
    publish_overflows(batch, overflows)
}

/// Publishes `track_fit`'s products straight from the fits' values (a GPU fit): `tuples[e]`
/// and `jobs[e]` are event `e`'s tuples and fit jobs (the CPU's selection, in its order),
/// `values` holds `FitValues::LEN` floats per job, event after event. The same products as
/// [`publish_fits`] of the tracks that `stage_fit_from` stores, written into the
/// columns' pooled buffers with no per-event tracks in between (about half of the GPU step's
/// host finish went to building and concatenating those).
///
/// ```
/// use quiver_columnar::{EventBatch, ProductKey};
/// use quiver_reco::steps::publish_fit_values;
/// use quiver_reco::tracks::{fit::{FitJob, FitValues}, ntuplets::Tuples, CaConfig, Quality};
/// let t = Tuples { offsets: vec![0, 3, 7], hits: (0..7).collect(), quality: vec![Quality::Bad; 2], overflow: false };
/// let mut v = vec![0.25f32; FitValues::LEN];
/// v[14] = 2.0; // pT
/// let batch = || {
///     let mut b = EventBatch::new(0, 1);
///     b.set_allowed(&[ProductKey::new("track_fits", "fit"), ProductKey::new("capacity_overflows", "fit")]);
///     b
/// };
/// let mut b = batch();
/// publish_fit_values(&mut b, &[&t], &[vec![FitJob { row: 1, n_fit: 4 }]], &v, &CaConfig::default()).unwrap();
/// let p = b.get(&ProductKey::new("track_fits", "fit")).unwrap();
/// let pt = quiver_columnar::columns::values::<arrow_array::types::Float32Type>(&p, "pt").unwrap();
/// assert_eq!(pt, &[0.0, 2.0]); // the tuple not fitted keeps zeros
/// let err = publish_fit_values(&mut batch(), &[&t], &[vec![FitJob { row: 2, n_fit: 4 }]], &v, &CaConfig::default());
/// assert!(err.unwrap_err().to_string().contains("a fit of tuple 2 of 2"));
/// ```
pub fn publish_fit_values(
    batch: &mut EventBatch,
    tuples: &[&Tuples],
    jobs: &[Vec<crate::tracks::fit::FitJob>],
    values: &[f32],
    cfg: &CaConfig,
) -> Result<()> {
    use crate::tracks::fit::{FitValues, StoredFit};
    let n_jobs: usize = jobs.iter().map(Vec::len).sum();
    if tuples.len() != jobs.len() || values.len() != n_jobs * FitValues::LEN {
        return Err(Error::data(format!(
            "{} values for {n_jobs} fits of {} events ({} with jobs)",
            values.len(),
            tuples.len(),
            jobs.len()
        )));
    }
    let rows: usize = tuples.iter().map(|t| t.len()).sum();
    let pool = quiver_columnar::pool::global();
    let filled = |n: usize, x: f32| {
        let mut v = pool.vec::<f32>(n);
        v.resize(n, x);
        v
    };
    let (mut quality, mut n_hits) = (pool.vec::<u8>(rows), pool.vec::<u8>(rows));
    let mut hits = pool.vec::<u32>(tuples.iter().map(|t| t.hits.len()).sum());
    for t in tuples {
        quality.extend(t.quality.iter().map(|&q| q as u8));
        // As `Tracks` holds them (u16) and `publish_tracks` writes them.
        n_hits.extend((0..t.len()).map(|i| (t.size(i) as u16).min(255) as u8));
        hits.extend_from_slice(&t.hits);
    }
    let (mut pt, mut eta, mut phi, mut tip, mut zip, mut chi2) = (
        filled(rows, 0.0),
        filled(rows, 0.0),
        filled(rows, 0.0),
        filled(rows, 0.0),
        filled(rows, 0.0),
        filled(rows, 0.0),
    );
    let mut charge = pool.vec::<i8>(rows);
    charge.resize(rows, 1);
    let (mut state, mut cov) = (filled(5 * rows, 0.0), filled(15 * rows, 0.0));
    let mut overflows = Vec::with_capacity(tuples.len());
    let (mut base, mut at) = (0usize, 0usize);
    for (e, (t, js)) in tuples.iter().zip(jobs).enumerate() {
        for job in js {
            let r = job.row as usize;
            if r >= t.len() {
                return Err(tracking(TrackError::Invalid(format!(
                    "event {e}: a fit of tuple {r} of {}",
                    t.len()
                ))));
            }
            let v = FitValues::from_slice(&values[at * FitValues::LEN..(at + 1) * FitValues::LEN])
                .expect("a slice of FitValues::LEN");
            at += 1;
            let s = StoredFit::of(&v, &cfg.fit);
            let row = base + r;
            state[5 * row..5 * row + 5].copy_from_slice(&s.state);
            cov[15 * row..15 * row + 15].copy_from_slice(&s.cov);
            (pt[row], eta[row], chi2[row]) = (v.pt, s.eta, v.chi2);
            (phi[row], tip[row], zip[row], charge[row]) = (s.phi(), s.tip(), s.zip(), s.charge());
        }
        overflows.push(fit_overflows(t, js.len() as u32, cfg));
        base += t.len();
    }
    let f32s = |v: quiver_columnar::PoolVec<f32>| Float32Array::new(v.into_scalar_buffer(), None);
    let cols: Vec<ArrayRef> = vec![
        Arc::new(arrow_array::UInt8Array::new(
            quality.into_scalar_buffer(),
            None,
        )),
        Arc::new(f32s(pt)),
        Arc::new(f32s(eta)),
        Arc::new(f32s(phi)),
        Arc::new(f32s(tip)),
        Arc::new(f32s(zip)),
        Arc::new(f32s(chi2)),
        Arc::new(arrow_array::Int8Array::new(
            charge.into_scalar_buffer(),
            None,
        )),
        Arc::new(arrow_array::UInt8Array::new(
            n_hits.into_scalar_buffer(),
            None,
        )),
        fixed_list(f32s(state), 5)?,
        fixed_list(f32s(cov), 15)?,
        list_column(
            tuples.iter().flat_map(|t| (0..t.len()).map(|i| t.size(i))),
            arrow_array::UInt32Array::new(hits.into_scalar_buffer(), None),
        )?,
    ];
    publish(batch, TRACK_FITS, cols, tuples.iter().map(|t| t.len()))?;
    publish_overflows(batch, overflows)
}

impl Step for FitStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let (h, n) = (batch.get(&self.hits)?, batch.get(&self.ntuplets)?);
        let cols = FitColumns::new(&h, &n)?;
        let out = per_event(batch, |e| {
            let input = cols.event(e, &self.cpe)?;
            let tracks = stage_fit(&input.hits, &input.tuples, &self.cfg).map_err(tracking)?;
            let o = fit_overflows(&input.tuples, tracks.stats.n_fitted, &self.cfg);
            Ok((tracks, o))
        })?;
        publish_fits(batch, out)
    }
}

struct QualityStep {
    hits: ProductKey,
    ntuplets: ProductKey,
    cells: ProductKey,
    fits: ProductKey,
    cpe: Arc<CpeParams>,
    cfg: CaConfig,
    tally: QualityTally,
}

fn per_event_report(tally: &[AtomicU64], what: &[&str]) -> Option<String> {
    let events = tally[0].load(Ordering::Relaxed).max(1) as f64;
    let parts: Vec<String> = what
        .iter()
        .zip(&tally[1..])
        .map(|(w, n)| format!("{:.1} {w}", n.load(Ordering::Relaxed) as f64 / events))
        .collect();
    Some(format!("per event: {}", parts.join(", ")))
}

/// What the quality stage reads of one event's fitted tracks (state, pT, χ²), from a
/// `track_fits` product; the other columns are passed through untouched.
fn fit_values_from_product(p: &Product, e: usize) -> Result<Tracks> {
    let r = p.event_rows(e);
    let (state, w5) = fixed_values(p, "state")?;
    if w5 != 5 {
        return Err(Error::data(format!(
            "product '{}': state width {w5}, expected 5",
            p.type_name()
        )));
    }
    Ok(Tracks {
        pt: values::<Float32Type>(p, "pt")?[r.clone()].to_vec(),
        chi2: values::<Float32Type>(p, "chi2")?[r.clone()].to_vec(),
        state: state[r.start * 5..r.end * 5]
            .chunks_exact(5)
            .map(|c| [c[0], c[1], c[2], c[3], c[4]])
            .collect(),
        ..Tracks::default()
    })
}

/// One event's checked `track_quality` inputs: its hits, its tuples, the CA state the
/// cleaners read (the cells' tuple lists replayed, the alive flags with the late fishbone)
/// and the fitted values (state, pT, χ²).
pub struct QualityInput<'a> {
    pub hits: HitsView<'a>,
    pub tuples: Tuples,
    pub ca: crate::tracks::ntuplets::CaState,
    pub tracks: Tracks,
}

/// The products `track_quality` reads, checked as the CPU step checks them.
struct QualityColumns<'a> {
    hits: HitColumns<'a>,
    n: &'a Product,
    c: &'a Product,
    f: &'a Product,
    quality: &'a [u8],
    hoff: &'a [i32],
    hvals: &'a [u32],
    coff: &'a [i32],
    cvals: &'a [u32],
    alive: BooleanArray,
}

impl<'a> QualityColumns<'a> {
    fn new(h: &'a Product, n: &'a Product, c: &'a Product, f: &'a Product) -> Result<Self> {
        let (hoff, hvals) = list_u32(n, "hits")?;
        let (coff, cvals) = list_u32(n, "cells")?;
        Ok(QualityColumns {
            hits: HitColumns::new(h)?,
            n,
            c,
            f,
            quality: values::<UInt8Type>(n, "quality")?,
            hoff,
            hvals,
            coff,
            cvals,
            alive: booleans(c, "alive")?,
        })
    }
    fn event(&self, e: usize, cpe: &'a CpeParams, cfg: &CaConfig) -> Result<QualityInput<'a>> {
        let hits = self.hits.event(e, cpe)?;
        let r = self.n.event_rows(e);
        let (off, hv) = list_rows(self.hoff, self.hvals, r.clone());
        let tuples = tuples_from_columns(&off, &hv, &self.quality[r.clone()]).map_err(tracking)?;
        check_tuple_hits(&tuples, hits.n_hits()).map_err(tracking)?;
        let (tc_off, tc) = list_rows(self.coff, self.cvals, r);
        let cr = self.c.event_rows(e);
        // Only the late fishbone reads the alive flags; without it the replay needs the
        // number of cells alone (a bit-by-bit collect was a fifth of the GPU step's host time).
        let a: Vec<bool> = if cfg.ntuplets.late_fishbone {
            self.alive
                .values()
                .slice(cr.start, cr.len())
                .iter()
                .collect()
        } else {
            vec![true; cr.len()]
        };
        let ca = ca_state_for_quality(&a, &tc, &tc_off, cfg).map_err(tracking)?;
        let tracks = fit_values_from_product(self.f, e)?;
        if tracks.pt.len() != tuples.len() {
            return Err(Error::data(format!(
                "{} fitted tracks for {} tuples",
                tracks.pt.len(),
                tuples.len()
            )));
        }
        Ok(QualityInput {
            hits,
            tuples,
            ca,
            tracks,
        })
    }
}

/// Every event's `track_quality` inputs from the `hits`, `ntuplets`, `ca_cells` and
/// `track_fits` products, as the CPU step reads them (the cells' tuple lists replayed), with
/// its checks: an error here is the CPU step's error too. The GPU step reads the batch's
/// columns instead ([`quality_columns`]).
pub fn quality_inputs<'a>(
    h: &'a Product,
    n: &'a Product,
    c: &'a Product,
    f: &'a Product,
    cpe: &'a CpeParams,
    cfg: &CaConfig,
) -> Result<Vec<QualityInput<'a>>> {
    let cols = QualityColumns::new(h, n, c, f)?;
    (0..h.n_events()).map(|e| cols.event(e, cpe, cfg)).collect()
}

/// `track_quality`'s inputs as the batch's columns (no copy), for a GPU implementation that
/// builds the cells' tuple lists itself: the tuples' hits and cells (list offsets and
/// values as the products hold them), their quality codes, the fits' state (5 per row), pT
/// and χ², and the cells' alive flags.
pub struct QualityColumnsView<'a> {
    pub hit_offsets: &'a [i32],
    pub hits: &'a [u32],
    pub cell_offsets: &'a [i32],
    pub cells: &'a [u32],
    pub quality: &'a [u8],
    pub state: &'a [f32],
    pub pt: &'a [f32],
    pub chi2: &'a [f32],
    pub alive: BooleanArray,
}

/// The columns of [`quality_inputs`] with every one of its checks except those of the
/// cells' tuple lists (a tuple's cell past its event's cells, which the caller checks where
/// it builds the lists) and of the hit columns other than detIndex (see [`HitDets`]): an
/// error here is the CPU step's error too.
pub fn quality_columns<'a>(
    h: HitDets<'a>,
    n: &'a Product,
    c: &'a Product,
    f: &'a Product,
) -> Result<QualityColumnsView<'a>> {
    let (hoff, hvals) = list_u32(n, "hits")?;
    let (coff, cvals) = list_u32(n, "cells")?;
    let (quality, alive) = (values::<UInt8Type>(n, "quality")?, booleans(c, "alive")?);
    let (state, w5) = fixed_values(f, "state")?;
    if w5 != 5 {
        return Err(Error::data(format!(
            "product '{}': state width {w5}, expected 5",
            f.type_name()
        )));
    }
    let (pt, chi2) = (
        values::<Float32Type>(f, "pt")?,
        values::<Float32Type>(f, "chi2")?,
    );
    if let Some(&q) = quality
        .iter()
        .find(|&&q| crate::tracks::Quality::from_u8(q).is_none())
    {
        return Err(tracking(TrackError::Invalid(format!("tuple quality {q}"))));
    }
    if n.n_events() != h.n_events() {
        return Err(Error::data(format!(
            "{} events of tuples for {} of hits",
            n.n_events(),
            h.n_events()
        )));
    }
    for e in 0..h.n_events() {
        let det = h.event(e);
        layer_start_from_det_index(det).map_err(tracking)?;
        let r = n.event_rows(e);
        let hits = &hvals[hoff[r.start] as usize..hoff[r.end] as usize];
        if let Some(&bad) = hits.iter().find(|&&x| x as usize >= det.len()) {
            return Err(tracking(TrackError::Invalid(format!(
                "tuple hit {bad} is not one of the event's {} hits",
                det.len()
            ))));
        }
        let fr = f.event_rows(e);
        if fr.len() != r.len() {
            return Err(Error::data(format!(
                "{} fitted tracks for {} tuples",
                fr.len(),
                r.len()
            )));
        }
    }
    Ok(QualityColumnsView {
        hit_offsets: hoff,
        hits: hvals,
        cell_offsets: coff,
        cells: cvals,
        quality,
        state,
        pt,
        chi2,
        alive,
    })
}

/// Tracks per event by quality, for the run summary of `track_quality` (CPU or GPU).
#[derive(Default)]
pub struct QualityTally([AtomicU64; 5]);

impl QualityTally {
    /// Counts a batch of `n_events` events' track qualities.
    pub fn add(&self, n_events: usize, quality: &[Vec<u8>]) {
        let t = &self.0;
        t[0].fetch_add(n_events as u64, Ordering::Relaxed);
        t[1].fetch_add(
            quality.iter().map(|q| q.len() as u64).sum(),
            Ordering::Relaxed,
        );
        // t[2..5]: loose (or better), dup, bad.
        use crate::vertices::quality::{BAD, DUP, LOOSE};
        for (i, pick) in [|q: u8| q >= LOOSE, |q: u8| q == DUP, |q: u8| q == BAD]
            .into_iter()
            .enumerate()
        {
            t[2 + i].fetch_add(
                quality.iter().flatten().filter(|&&q| pick(q)).count() as u64,
                Ordering::Relaxed,
            );
        }
    }
    /// The summary line.
    pub fn report(&self) -> String {
        // Analysts want the loose ones: dup and bad rows are the reference's product too
        // (their pT and η are 0 where the fit was not kept), not tracks to histogram.
        let r = per_event_report(&self.0, &["tracks", "loose or better", "dup", "bad"])
            .unwrap_or_default();
        format!("{r} (analyses: quality >= 2, loose or better)")
    }
}

/// Publishes `track_quality`'s products: `tracks` (the fits' columns, shared, with every
/// event's final quality) and the overflow rows.
pub fn publish_quality(
    batch: &mut EventBatch,
    f: &Product,
    quality: &[Vec<u8>],
    overflows: Vec<EventOverflows>,
) -> Result<()> {
    // Same columns as the fits except the quality: share them.
    let fb = f.batch();
    let mut cols: Vec<ArrayRef> = fb.columns().to_vec();
    let qi = fb.schema().index_of("quality")?;
    cols[qi] = concat_ref::<UInt8Type, _>(quality.iter().map(Vec::as_slice));
    batch.put(Product::new(
        RecordBatch::try_new(schema(TRACKS), cols)?,
        f.offsets().clone(),
    )?)?;
    publish_overflows(batch, overflows)
}

impl Step for QualityStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let (h, n, c, f) = (
            batch.get(&self.hits)?,
            batch.get(&self.ntuplets)?,
            batch.get(&self.cells)?,
            batch.get(&self.fits)?,
        );
        let cols = QualityColumns::new(&h, &n, &c, &f)?;
        let out = per_event(batch, |e| {
            let mut input = cols.event(e, &self.cpe, &self.cfg)?;
            stage_quality(
                &input.hits,
                &input.tuples,
                &input.ca,
                &mut input.tracks,
                &self.cfg,
            );
            Ok((
                input.tracks.quality,
                ntuplet_overflows(&input.ca, &self.cfg.ntuplets),
            ))
        })?;
        let (out, overflows): (Vec<Vec<u8>>, Vec<EventOverflows>) = out.into_iter().unzip();
        self.tally.add(batch.n_events(), &out);
        publish_quality(batch, &f, &out, overflows)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(Some(self.tally.report()))
    }
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
fn fixed_values<'a>(p: &'a Product, name: &str) -> Result<(&'a [f32], usize)> {
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

// --- vertices -------------------------------------------------------------------------

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
    let cols: Vec<ArrayRef> = vec![
        concat_ref::<Float32Type, _>(out.iter().map(|v| v.zv.as_slice())),
        concat_ref::<Float32Type, _>(out.iter().map(|v| v.wv.as_slice())),
        concat_ref::<Float32Type, _>(out.iter().map(|v| v.chi2.as_slice())),
        Arc::new(Int32Array::from(
            out.iter()
                .flat_map(|v| v.ndof.iter().copied())
                .collect::<Vec<i32>>(),
        )),
        concat_ref::<Float32Type, _>(out.iter().map(|v| v.ptv2.as_slice())),
        concat_ref::<UInt16Type, _>(ranks.iter().map(Vec::as_slice)),
        list_column(lengths, tracks_flat)?,
    ];
    publish(batch, VERTICES, cols, out.iter().map(|v| v.zv.len()))?;
    let idv = vec![concat_ref::<Int16Type, _>(
        out.iter().map(|v| v.idv.as_slice()),
    )];
    batch.put(Product::new(
        RecordBatch::try_new(schema(TRACK_VERTICES), idv)?,
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
        ParamSpec::bool(
            "late_fishbone",
            false,
            "the same after the search (off in the reference)",
        ),
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
        backends: cpu.clone(),
        build: |cfg| Ok(Box::new(NtupletsStep { hits: cfg.input("hits")?, doublets: cfg.input("doublets")?, cpe: cond(cfg)?, cfg: ca_config(cfg)? })),
    });
    r.add(StepType {
        name: "track_fit",
        doc: "Helix fit of every tuple: Broken Line (default) or Riemann, with multiple scattering; 5-hit tuples fitted as 4",
        params: vec![
            ParamSpec::choice("fit", &["broken_line", "riemann"], "the fit"),
            ParamSpec::bool("fit5as4", true, "fit 5-hit tuples with their first 4 hits"),
            Capacities::param(),
        ],
        signature: Signature {
            inputs: vec![InputSpec::one("hits", HITS, "rec hits"), InputSpec::one("ntuplets", NTUPLETS, "tuples")],
            outputs: vec![TRACK_FITS.into(), CAPACITY_OVERFLOWS.into()],
        },
        backends: cpu.clone(),
        build: |cfg| Ok(Box::new(FitStep { hits: cfg.input("hits")?, ntuplets: cfg.input("ntuplets")?, cpe: cond(cfg)?, cfg: ca_config(cfg)? })),
    });
    r.add(StepType {
        name: "track_quality",
        doc: "Track classification (χ² vs pT, region cuts), fast duplicate removal and the triplet cleaner",
        // `capacities` must match ca_ntuplets' (the tuple lists of the cells are rebuilt with
        // its capacities); a mismatch shows up as tuples_per_cell overflows.
        params: vec![fishbones[1].clone(), Capacities::param()],
        signature: Signature {
            inputs: vec![
                InputSpec::one("hits", HITS, "rec hits"),
                InputSpec::one("ntuplets", NTUPLETS, "tuples with their cells"),
                InputSpec::one("cells", CA_CELLS, "cells alive after the fishbone"),
                InputSpec::one("fits", TRACK_FITS, "fitted tuples"),
            ],
            outputs: vec![TRACKS.into(), CAPACITY_OVERFLOWS.into()],
        },
        backends: cpu,
        build: |cfg| {
            Ok(Box::new(QualityStep {
                hits: cfg.input("hits")?,
                ntuplets: cfg.input("ntuplets")?,
                cells: cfg.input("cells")?,
                fits: cfg.input("fits")?,
                cpe: cond(cfg)?,
                cfg: ca_config(cfg)?,
                tally: QualityTally::default(),
            }))
        },
    });
    r.add(StepType {
        name: "vertices",
        doc: "Primary vertices: density clustering of track z0, fit, split, refit, sort by Σ pT² (PixelVertexProducerCUDA)",
        params: vec![
            ParamSpec::choice("clusterizer", &["density", "dbscan", "iterative"], "track clustering in z"),
            ParamSpec::int("min_t", 2, "minimum neighbours for a seed (nn ≥ min_t)").within(0.0, 10_000.0),
            ParamSpec::float("eps", 0.07, "maximum |Δz| between neighbours, cm").above(0.0, 0.1),
            ParamSpec::float("errmax", 0.01, "maximum σ(z) of a track that seeds, cm").within(0.0, 100.0),
            ParamSpec::float("chi2max", 9.0, "maximum Δz²/σ² between neighbours").above(0.0, 1e6),
            ParamSpec::float("pt_min", 0.5, "minimum track pT, GeV").within(0.0, 1000.0),
            ParamSpec::int("min_hits", 4, "minimum hits of a track (tracks have 3 to 5)").within(0.0, 5.0),
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
        _ => Clusterizer::Density,
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
        ..Default::default()
    };
    vc.validate()
        .map_err(|e| Error::plan(&cfg.label, e.to_string()))?;
    Ok(vc)
}
