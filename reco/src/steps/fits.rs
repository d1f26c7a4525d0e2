//! Adapters of the track fit and the track quality: fitted tracks from tuples and hits,
//! final tracks from the fits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::types::{Float32Type, Int8Type, UInt32Type, UInt8Type};
use arrow_array::{ArrayRef, BooleanArray, FixedSizeListArray, Float32Array};
use arrow_buffer::ScalarBuffer;
use arrow_schema::Field;
use quiver_columnar::columns::{concat, concat_ref, values};
use quiver_columnar::{
    Backend, Error, EventBatch, InputSpec, ParamSpec, Product, ProductKey, Registry, Result,
    Signature, Step, StepType,
};
use quiver_formats::conditions::CpeParams;

use super::tracks::{
    booleans, ca_config, fixed_values, late_fishbone, list_column, list_rows, list_u32,
    ntuplet_overflows, take_column, tracking, HitColumns, HitDets,
};
use super::types::*;
use super::{cond, per_event, product_batch, publish_columns, publish_overflows};
use crate::capacity::{names, Capacities};
use crate::tracks::{
    ca_lists_for_quality, check_tuple_hits, layer_start_from_det_index, ntuplets::Tuples,
    stage_fit, stage_quality_with, tuples_from_columns, CaConfig, HitsView, TrackError, Tracks,
};
use quiver_columnar::overflow::{EventOverflows, Overflow, CAPACITY_OVERFLOWS};

/// Publishes per-tuple tracks (fitted, with or without the final quality) as `type_name`.
/// The events' columns are taken out of `out`.
fn publish_tracks(batch: &mut EventBatch, type_name: &str, out: &mut [Tracks]) -> Result<()> {
    // Each column under the name of its field of the tracks.
    macro_rules! cat {
        ($t:ty, $f:ident) => {
            (stringify!($f), take_column::<$t, _>(out, |t| &mut t.$f))
        };
    }
    let rows: Vec<usize> = out.iter().map(|t| t.quality.len()).collect();
    let n_hits: Vec<Vec<u8>> = out
        .iter()
        .map(|t| t.n_hits.iter().map(|&n| n.min(255) as u8).collect())
        .collect();
    let state = take_flat(out, |t| &mut t.state);
    let cov = take_flat(out, |t| &mut t.covariance);
    let hit_lengths = out
        .iter()
        .flat_map(|t| t.hit_offsets.windows(2).map(|w| (w[1] - w[0]) as usize));
    let hits = list_column(
        hit_lengths,
        concat::<UInt32Type, _>(out.iter().map(|t| t.hit_indices.as_slice())),
    )?;
    let cols = [
        cat!(UInt8Type, quality),
        cat!(Float32Type, pt),
        cat!(Float32Type, eta),
        cat!(Float32Type, phi),
        cat!(Float32Type, tip),
        cat!(Float32Type, zip),
        cat!(Float32Type, chi2),
        cat!(Int8Type, charge),
        (
            "n_hits",
            concat_ref::<UInt8Type, _>(n_hits.iter().map(Vec::as_slice)),
        ),
        ("state", fixed_list(state, 5)?),
        ("covariance", fixed_list(cov, 15)?),
        ("hits", hits),
    ];
    publish_columns(batch, type_name, cols, rows)
}

/// The f32 rows of `field` of every event as one array, taken out of `out` (one event's
/// without a copy).
fn take_flat<const N: usize>(
    out: &mut [Tracks],
    field: impl Fn(&mut Tracks) -> &mut Vec<[f32; N]>,
) -> Float32Array {
    if let [one] = out {
        let v = std::mem::take(field(one)).into_flattened();
        return Float32Array::new(ScalarBuffer::from(v), None);
    }
    let slices: Vec<&[f32]> = out.iter_mut().map(|t| field(t).as_flattened()).collect();
    concat::<Float32Type, _>(slices.iter().copied())
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
    let (mut out, overflows): (Vec<Tracks>, Vec<EventOverflows>) = out.into_iter().unzip();
    publish_tracks(batch, TRACK_FITS, &mut out)?;
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
    let f32s_array =
        |v: quiver_columnar::PoolVec<f32>| Float32Array::new(v.into_scalar_buffer(), None);
    let f32s = |v: quiver_columnar::PoolVec<f32>| Arc::new(f32s_array(v)) as ArrayRef;
    let u8s = |v: quiver_columnar::PoolVec<u8>| {
        Arc::new(arrow_array::UInt8Array::new(v.into_scalar_buffer(), None)) as ArrayRef
    };
    let charge = arrow_array::Int8Array::new(charge.into_scalar_buffer(), None);
    let cols = [
        ("quality", u8s(quality)),
        ("pt", f32s(pt)),
        ("eta", f32s(eta)),
        ("phi", f32s(phi)),
        ("tip", f32s(tip)),
        ("zip", f32s(zip)),
        ("chi2", f32s(chi2)),
        ("charge", Arc::new(charge) as ArrayRef),
        ("n_hits", u8s(n_hits)),
        ("state", fixed_list(f32s_array(state), 5)?),
        ("covariance", fixed_list(f32s_array(cov), 15)?),
        (
            "hits",
            list_column(
                tuples.iter().flat_map(|t| (0..t.len()).map(|i| t.size(i))),
                arrow_array::UInt32Array::new(hits.into_scalar_buffer(), None),
            )?,
        ),
    ];
    publish_columns(batch, TRACK_FITS, cols, tuples.iter().map(|t| t.len()))?;
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

pub(super) fn per_event_report(tally: &[AtomicU64], what: &[&str]) -> Option<String> {
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
    /// The cells' tuple lists (no cells: [`ca_lists_for_quality`]).
    pub ca: crate::tracks::ntuplets::CaState,
    /// Whether each cell of the event is alive (the `ca_cells` product's column, sliced).
    pub alive: arrow_buffer::BooleanBuffer,
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
        // The alive flags stay packed in the product (the late fishbone cleaner reads those of
        // the cells carrying a tuple); the replay needs the number of cells alone. Before:
        // every flag unpacked into bytes, and a cell built per flag (3.3 MB at ⟨PU⟩ 50).
        let alive = self.alive.values().slice(cr.start, cr.len());
        let ca = ca_lists_for_quality(cr.len(), &tc, &tc_off, cfg).map_err(tracking)?;
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
            alive,
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
    let fits = fb.schema();
    let quality = concat_ref::<UInt8Type, _>(quality.iter().map(Vec::as_slice));
    let cols = fits.fields().iter().zip(fb.columns()).map(|(field, c)| {
        let name = field.name().as_str();
        let c = if name == "quality" { &quality } else { c };
        (name, c.clone())
    });
    batch.put(Product::new(
        product_batch(TRACKS, cols)?,
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
            let alive = &input.alive;
            stage_quality_with(
                &input.hits,
                &input.tuples,
                &input.ca,
                |c| alive.value(c),
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

/// Registers `track_fit` and `track_quality`.
pub(super) fn register(r: &mut Registry) {
    let cpu = vec![Backend::Cpu];
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
        params: vec![late_fishbone(), Capacities::param()],
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
}
