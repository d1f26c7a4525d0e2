//! Per-event counts of the pixel chain (modules, digis, clusters, tracks, vertices) as the
//! reference defines them, reference count files, and the count validator's verdict
//! (reference `CountValidator`).
//!
//! Definitions, from our products (docs/products.md):
//! - **nDigis**: rows of the event in `digis` (or `calibrated_digis`, or `clustered_digis`:
//!   same rows): one per raw payload word.
//! - **nModules**: the reference's `moduleStart[0]` after `countModules`: walking the
//!   `calibrated_digis.module` column in row order and skipping invalid rows (module 9999),
//!   a *module run* starts at every valid row whose previous valid row has another module
//!   (or that is the first valid row). nModules is the number of runs, saturating at 2000
//!   (`MaxNumModules`, the reference's capped `atomicInc`).
//! - **clusters in module m** (`clusInModule[m]`): from `clustered_digis`, one more than the
//!   largest cluster number among rows of module m (numbers are dense after the charge cut;
//!   only numbers in 0..1024 count); from `hits`, the hits with `det_index` m.
//! - **nClusters**: Σₘ min(1024, clusters in m), capped at 49 152 (`clusModuleStart[2000]`),
//!   which is also the hit count.
//! - **nTracks**: tracks with `n_hits > 0`, any quality (the validator); the histograms take
//!   only those with quality ≥ loose (2).
//! - **nVertices**: rows of the event in `vertices` (`nvFinal`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::Array;
use arrow_schema::DataType;
use quiver_columnar::{
    Backend, EventBatch, ParamSpec, Registry, Signature, Step, StepConfig, StepType,
};

use crate::chain::{column, input_specs, ChainKeys, ChainProducts, Input};
use crate::cppfmt::format_float;
use crate::error::{Result, ValidationError};

/// Module number of an invalid digi (`InvId`).
pub const INVALID_MODULE: u16 = 9999;
/// Module-indexed tables have this many entries (`MaxNumModules`).
pub const MAX_NUM_MODULES: usize = 2000;
/// Clusters counted per module at most (`MaxNumClustersPerModules`).
pub const MAX_CLUSTERS_PER_MODULE: u32 = 1024;
/// Clusters (hits) per event at most (`MaxNumClusters`).
pub const MAX_NUM_CLUSTERS: u32 = 48 * 1024;
/// The `loose` value of the reference's track quality enum (bad, dup, loose, strict, …).
pub const QUALITY_LOOSE: u8 = quiver_formats::quality::codes::LOOSE;
/// Relative tolerance on the track count (the reference's `trackTolerance`).
pub const TRACK_TOLERANCE: f32 = 0.012;
/// Absolute tolerance on the vertex count (the reference's `vertexTolerance`).
pub const VERTEX_TOLERANCE: i64 = 1;

/// nModules of one event from its `calibrated_digis.module` column.
///
/// ```
/// use quiver_validation::counts::count_modules;
/// // Runs: [5 5] [7] [5]: an invalid row between two 5s does not split a run.
/// assert_eq!(count_modules(&[9999, 5, 9999, 5, 7, 9999, 5]), 3);
/// assert_eq!(count_modules(&[9999, 9999]), 0);
/// ```
pub fn count_modules(module: &[u16]) -> u32 {
    let mut runs = 0u32;
    let mut prev = None;
    for &m in module {
        if m == INVALID_MODULE {
            continue;
        }
        if prev != Some(m) && (runs as usize) < MAX_NUM_MODULES {
            runs += 1;
        }
        prev = Some(m);
    }
    runs
}

fn check_module(m: u16, row: usize) -> Result<usize> {
    if m as usize >= MAX_NUM_MODULES {
        return Err(ValidationError::Data(format!(
            "row {row}: module {m} is neither a module index (< {MAX_NUM_MODULES}) nor {INVALID_MODULE}"
        )));
    }
    Ok(m as usize)
}

/// Clusters per module (`clusInModule`, [`MAX_NUM_MODULES`] entries) of one event from its
/// `clustered_digis` columns `module` and `cluster`.
///
/// ```
/// use quiver_validation::counts::clusters_in_modules_from_digis;
/// let c = clusters_in_modules_from_digis(&[3, 3, 9999, 3, 0], &[0, 1, 9999, 1, 0]).unwrap();
/// assert_eq!((c[0], c[3], c[1]), (1, 2, 0));
/// ```
pub fn clusters_in_modules_from_digis(module: &[u16], cluster: &[i32]) -> Result<Vec<u32>> {
    if module.len() != cluster.len() {
        return Err(ValidationError::Data(format!(
            "module has {} rows but cluster {}",
            module.len(),
            cluster.len()
        )));
    }
    let mut out = vec![0u32; MAX_NUM_MODULES];
    for (row, (&m, &c)) in module.iter().zip(cluster).enumerate() {
        if m == INVALID_MODULE {
            continue;
        }
        let m = check_module(m, row)?;
        if (0..MAX_CLUSTERS_PER_MODULE as i32).contains(&c) {
            out[m] = out[m].max(c as u32 + 1);
        }
    }
    Ok(out)
}

/// Clusters per module of one event from its `hits.det_index` column.
pub fn clusters_in_modules_from_hits(det_index: &[u16]) -> Result<Vec<u32>> {
    let mut out = vec![0u32; MAX_NUM_MODULES];
    for (row, &m) in det_index.iter().enumerate() {
        out[check_module(m, row)?] += 1;
    }
    Ok(out)
}

/// nClusters from the clusters per module.
///
/// ```
/// use quiver_validation::counts::total_clusters;
/// assert_eq!(total_clusters(&[3, 2000, 0]), 1027);
/// assert_eq!(total_clusters(&vec![1024; 2000]), 49152);
/// ```
pub fn total_clusters(clus_in_module: &[u32]) -> u32 {
    let sum: u64 = clus_in_module
        .iter()
        .map(|&c| c.min(MAX_CLUSTERS_PER_MODULE) as u64)
        .sum();
    sum.min(MAX_NUM_CLUSTERS as u64) as u32
}

/// Tracks with at least one hit and, if given, quality ≥ `min_quality`.
///
/// ```
/// use quiver_validation::counts::count_tracks;
/// assert_eq!(count_tracks(&[0, 3, 4, 5], &[5, 0, 2, 3], None), 3);
/// assert_eq!(count_tracks(&[0, 3, 4, 5], &[5, 0, 2, 3], Some(2)), 2);
/// ```
pub fn count_tracks(n_hits: &[u8], quality: &[u8], min_quality: Option<u8>) -> u32 {
    n_hits
        .iter()
        .zip(quality)
        .filter(|&(&n, &q)| n > 0 && min_quality.is_none_or(|m| q >= m))
        .count() as u32
}

/// Per-event quantities of one batch, each present when the products it needs are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchCounts {
    pub n_digis: Option<Vec<u32>>,
    pub n_modules: Option<Vec<u32>>,
    /// Per event, [`MAX_NUM_MODULES`] entries.
    pub clus_in_module: Option<Vec<Vec<u32>>>,
    pub n_clusters: Option<Vec<u32>>,
    pub n_hits: Option<Vec<u32>>,
    /// `n_hits > 0`, any quality.
    pub n_tracks: Option<Vec<u32>>,
    /// `n_hits > 0` and quality ≥ loose.
    pub n_tracks_loose: Option<Vec<u32>>,
    pub n_vertices: Option<Vec<u32>>,
}

fn rows_per_event(p: &quiver_columnar::Product) -> Vec<u32> {
    (0..p.n_events())
        .map(|e| p.event_rows(e).len() as u32)
        .collect()
}

/// Computes [`BatchCounts`] from the products present.
pub fn batch_counts(p: &ChainProducts) -> Result<BatchCounts> {
    let n = p.n_events();
    let mut out = BatchCounts::default();
    if let Some(d) = p
        .get(Input::Digis)
        .or(p.get(Input::CalibratedDigis))
        .or(p.get(Input::ClusteredDigis))
    {
        out.n_digis = Some(rows_per_event(d));
    }
    if let Some(c) = p.get(Input::CalibratedDigis) {
        let module = column::<UInt16Type>(c, "module")?.values();
        out.n_modules = Some(
            (0..n)
                .map(|e| count_modules(&module[c.event_rows(e)]))
                .collect(),
        );
    }
    let per_module: Option<Vec<Vec<u32>>> = if let Some(c) = p.get(Input::ClusteredDigis) {
        let module = column::<UInt16Type>(c, "module")?.values();
        let cluster = column::<Int32Type>(c, "cluster")?.values();
        let ev = |e: usize| {
            let r = c.event_rows(e);
            clusters_in_modules_from_digis(&module[r.clone()], &cluster[r]).map_err(|err| {
                ValidationError::Data(format!("clustered_digis, event #{e} of the batch: {err}"))
            })
        };
        Some((0..n).map(ev).collect::<Result<_>>()?)
    } else if let Some(h) = p.get(Input::Hits) {
        let det = column::<UInt16Type>(h, "det_index")?.values();
        let ev = |e: usize| {
            clusters_in_modules_from_hits(&det[h.event_rows(e)]).map_err(|err| {
                ValidationError::Data(format!("hits, event #{e} of the batch: {err}"))
            })
        };
        Some((0..n).map(ev).collect::<Result<_>>()?)
    } else {
        None
    };
    if let Some(pm) = &per_module {
        out.n_clusters = Some(pm.iter().map(|c| total_clusters(c)).collect());
    }
    out.clus_in_module = per_module;
    if let Some(h) = p.get(Input::Hits) {
        out.n_hits = Some(rows_per_event(h));
    }
    if let Some(t) = p.get(Input::Tracks) {
        let nh = column::<UInt8Type>(t, "n_hits")?.values();
        let q = column::<UInt8Type>(t, "quality")?.values();
        let count = |min| {
            (0..n)
                .map(|e| {
                    let r = t.event_rows(e);
                    count_tracks(&nh[r.clone()], &q[r], min)
                })
                .collect()
        };
        out.n_tracks = Some(count(None));
        out.n_tracks_loose = Some(count(Some(QUALITY_LOOSE)));
    }
    if let Some(v) = p.get(Input::Vertices) {
        out.n_vertices = Some(rows_per_event(v));
    }
    Ok(out)
}

/// The reference's counts of one event (absent: the reference file does not have them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReferenceCounts {
    pub n_modules: Option<u32>,
    pub n_digis: Option<u32>,
    pub n_clusters: Option<u32>,
    pub n_tracks: Option<u32>,
    pub n_vertices: Option<u32>,
}

/// Reference counts by (0-based) event number.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReferenceTable {
    pub events: BTreeMap<u64, ReferenceCounts>,
    /// Where they were read from (for messages).
    pub origin: String,
}

fn read_u32s(path: &Path, per_event: usize) -> Result<Vec<u32>> {
    let bytes = std::fs::read(path).map_err(|e| ValidationError::io(path, e))?;
    if bytes.len() % (4 * per_event) != 0 {
        return Err(ValidationError::BadFile {
            path: path.into(),
            msg: format!(
                "{} bytes is not a whole number of events of {per_event} × u32",
                bytes.len()
            ),
        });
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Reads the reference's count files from directory `dir`: `digicluster.bin` (per event
/// u32 nModules, nDigis, nClusters; required), `tracks.bin` and `vertices.bin` (one u32 per
/// event; optional, but when present they must cover the same events).
pub fn read_counts_bin(dir: &Path) -> Result<ReferenceTable> {
    let dc = read_u32s(&dir.join("digicluster.bin"), 3)?;
    let n = dc.len() / 3;
    let optional = |name: &str| -> Result<Option<Vec<u32>>> {
        let p = dir.join(name);
        if !p.exists() {
            return Ok(None);
        }
        let v = read_u32s(&p, 1)?;
        if v.len() != n {
            return Err(ValidationError::BadFile {
                path: p,
                msg: format!("{} events but digicluster.bin has {n}", v.len()),
            });
        }
        Ok(Some(v))
    };
    let (tracks, vertices) = (optional("tracks.bin")?, optional("vertices.bin")?);
    let events = (0..n)
        .map(|e| {
            let c = ReferenceCounts {
                n_modules: Some(dc[3 * e]),
                n_digis: Some(dc[3 * e + 1]),
                n_clusters: Some(dc[3 * e + 2]),
                n_tracks: tracks.as_ref().map(|t| t[e]),
                n_vertices: vertices.as_ref().map(|v| v[e]),
            };
            (e as u64, c)
        })
        .collect();
    Ok(ReferenceTable {
        events,
        origin: dir.display().to_string(),
    })
}

/// Integer column → u64 values (any integer type; negative values rejected).
fn int_values(path: &Path, name: &str, a: &dyn Array) -> Result<Vec<u64>> {
    let bad = |msg: String| ValidationError::BadFile {
        path: path.into(),
        msg: format!("column '{name}': {msg}"),
    };
    if a.null_count() > 0 {
        return Err(bad(format!("{} null values", a.null_count())));
    }
    macro_rules! conv {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .values()
                .iter()
                .map(|&v| u64::try_from(v).map_err(|_| bad(format!("negative value {v}"))))
                .collect::<Result<Vec<u64>>>()?
        };
    }
    Ok(match a.data_type() {
        DataType::Int8 => conv!(Int8Type),
        DataType::Int16 => conv!(Int16Type),
        DataType::Int32 => conv!(Int32Type),
        DataType::Int64 => conv!(Int64Type),
        DataType::UInt8 => conv!(UInt8Type),
        DataType::UInt16 => conv!(UInt16Type),
        DataType::UInt32 => conv!(UInt32Type),
        DataType::UInt64 => a.as_primitive::<UInt64Type>().values().to_vec(),
        other => return Err(bad(format!("type {other}, expected an integer type"))),
    })
}

/// Reads reference counts from a Parquet table with an integer column `event` and any of the
/// integer columns `n_modules`, `n_digis`, `n_clusters`, `n_tracks`, `n_vertices` (the
/// table [`write_counts_parquet`] writes).
pub fn read_counts_parquet(path: &Path) -> Result<ReferenceTable> {
    let f = std::fs::File::open(path).map_err(|e| ValidationError::io(path, e))?;
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)?.build()?;
    let mut events = BTreeMap::new();
    let to_u32 = |name: &str, v: u64| {
        u32::try_from(v).map_err(|_| ValidationError::BadFile {
            path: path.into(),
            msg: format!("column '{name}': {v} does not fit u32"),
        })
    };
    for b in reader {
        let b = b?;
        let col = |name: &str| -> Result<Option<Vec<u64>>> {
            b.column_by_name(name)
                .map(|a| int_values(path, name, a.as_ref()))
                .transpose()
        };
        let need = |name: &str| -> Result<Vec<u64>> {
            col(name)?.ok_or_else(|| ValidationError::BadFile {
                path: path.into(),
                msg: format!("no column '{name}'"),
            })
        };
        let ev = need("event")?;
        let [nm, nd, nc, nt, nv] = COUNT_COLUMNS.map(col);
        let (nm, nd, nc, nt, nv) = (nm?, nd?, nc?, nt?, nv?);
        if [&nm, &nd, &nc, &nt, &nv].iter().all(|c| c.is_none()) {
            return Err(ValidationError::BadFile {
                path: path.into(),
                msg: format!("none of the columns {}", COUNT_COLUMNS.join(", ")),
            });
        }
        let at = |name: &str, c: &Option<Vec<u64>>, i: usize| {
            c.as_ref().map(|v| to_u32(name, v[i])).transpose()
        };
        for (i, &event) in ev.iter().enumerate() {
            let c = ReferenceCounts {
                n_modules: at("n_modules", &nm, i)?,
                n_digis: at("n_digis", &nd, i)?,
                n_clusters: at("n_clusters", &nc, i)?,
                n_tracks: at("n_tracks", &nt, i)?,
                n_vertices: at("n_vertices", &nv, i)?,
            };
            if events.insert(event, c).is_some() {
                return Err(ValidationError::BadFile {
                    path: path.into(),
                    msg: format!("event {event} appears twice"),
                });
            }
        }
    }
    Ok(ReferenceTable {
        events,
        origin: path.display().to_string(),
    })
}

/// The count columns of a counts table, in order.
pub const COUNT_COLUMNS: [&str; 5] = [
    "n_modules",
    "n_digis",
    "n_clusters",
    "n_tracks",
    "n_vertices",
];

/// Writes per-event counts as a Parquet table (`event` UInt32, then UInt32 columns of
/// [`COUNT_COLUMNS`] for the quantities every event has), events in order, atomically.
/// [`read_counts_parquet`] reads it back as reference counts.
pub fn write_counts_parquet(path: &Path, counts: &[EventCounts]) -> Result<()> {
    use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
    use arrow_schema::Field;
    let mut sorted: Vec<&EventCounts> = counts.iter().collect();
    sorted.sort_by_key(|c| c.event);
    let events: Vec<u32> = sorted
        .iter()
        .map(|c| {
            u32::try_from(c.event)
                .map_err(|_| ValidationError::Data(format!("event {} does not fit u32", c.event)))
        })
        .collect::<Result<_>>()?;
    let mut fields = vec![Field::new("event", DataType::UInt32, false)];
    let mut cols: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(events))];
    let getters: [fn(&EventCounts) -> Option<u32>; 5] = [
        |c| c.n_modules,
        |c| c.n_digis,
        |c| c.n_clusters,
        |c| c.n_tracks,
        |c| c.n_vertices,
    ];
    for (name, get) in COUNT_COLUMNS.iter().zip(getters) {
        let v: Option<Vec<u32>> = sorted.iter().map(|c| get(c)).collect();
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            fields.push(Field::new(*name, DataType::UInt32, false));
            cols.push(Arc::new(UInt32Array::from(v)));
        }
    }
    let schema = quiver_columnar::product_schema(COUNTS_SCHEMA, 1, fields);
    let batch = RecordBatch::try_new(schema, cols)?;
    crate::hist::write_atomically(path, |f| {
        let mut w = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), None)?;
        w.write(&batch)?;
        w.close()?;
        Ok(())
    })
}

/// Schema name of the counts table.
pub const COUNTS_SCHEMA: &str = "event_counts";

/// Reads reference counts from a `.parquet` file, or from a directory holding
/// `digicluster.bin` (and optionally `tracks.bin`, `vertices.bin`), or from the path of
/// `digicluster.bin` itself.
pub fn read_reference(path: &Path) -> Result<ReferenceTable> {
    if path.is_dir() {
        read_counts_bin(path)
    } else if path.extension().is_some_and(|e| e == "parquet") {
        read_counts_parquet(path)
    } else if path.file_name().is_some_and(|n| n == "digicluster.bin") {
        read_counts_bin(path.parent().unwrap_or(Path::new(".")))
    } else {
        Err(ValidationError::BadFile {
            path: path.into(),
            msg: "expected a directory with digicluster.bin, digicluster.bin itself, or a .parquet table".into(),
        })
    }
}

/// Our counts of one event (absent: the plan does not produce that quantity).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// Absolute, 0-based event number.
    pub event: u64,
    pub n_modules: Option<u32>,
    pub n_digis: Option<u32>,
    pub n_clusters: Option<u32>,
    pub n_tracks: Option<u32>,
    pub n_vertices: Option<u32>,
}

/// The comparison of one event with the reference.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventVerdict {
    pub event: u64,
    /// One line per quantity outside its tolerance, as the reference words it.
    pub failures: Vec<String>,
    /// Whether an exactly compared count (modules, digis, clusters) differs.
    pub exact_mismatch: bool,
    /// |ours − ref| / ref in `f32` when the track counts differ (the reference sums it).
    pub track_relative_difference: Option<f32>,
    /// |ours − ref| for the vertex count, when compared.
    pub vertex_difference: Option<i64>,
}

/// Compares one event: nModules, nDigis, nClusters exactly, tracks within a relative
/// [`TRACK_TOLERANCE`], vertices within ±[`VERTEX_TOLERANCE`]. Quantities missing on either
/// side are not compared.
///
/// ```
/// use quiver_validation::counts::{check_event, EventCounts, ReferenceCounts};
/// let r = ReferenceCounts { n_modules: Some(1700), n_digis: Some(90000), n_clusters: Some(15000), n_tracks: Some(1000), n_vertices: Some(30) };
/// let ours = EventCounts { event: 4, n_modules: Some(1700), n_digis: Some(90000), n_clusters: Some(15001),
///                          n_tracks: Some(1011), n_vertices: Some(31) };
/// let v = check_event(&ours, &r);
/// assert!(v.exact_mismatch);
/// assert_eq!(v.failures, vec!["N(clusters) is 15001 expected 15000"]);
/// assert_eq!(v.vertex_difference, Some(1));
/// ```
pub fn check_event(ours: &EventCounts, r: &ReferenceCounts) -> EventVerdict {
    let mut v = EventVerdict {
        event: ours.event,
        ..Default::default()
    };
    for (what, a, b) in [
        ("modules", ours.n_modules, r.n_modules),
        ("digis", ours.n_digis, r.n_digis),
        ("clusters", ours.n_clusters, r.n_clusters),
    ] {
        if let (Some(a), Some(b)) = (a, b) {
            if a != b {
                v.failures.push(format!("N({what}) is {a} expected {b}"));
                v.exact_mismatch = true;
            }
        }
    }
    if let (Some(a), Some(b)) = (ours.n_tracks, r.n_tracks) {
        // As the reference: f32 division, so a reference count of 0 gives inf (or NaN when
        // both are 0, which passes).
        let rel = ((a as i64 - b as i64) as f32 / b as f32).abs();
        if a != b {
            v.track_relative_difference = Some(rel);
        }
        if rel >= TRACK_TOLERANCE {
            v.failures.push(format!(
                "N(tracks) is {a} expected {b}, relative difference {} is outside tolerance {}",
                format_float(rel),
                format_float(TRACK_TOLERANCE)
            ));
        }
    }
    if let (Some(a), Some(b)) = (ours.n_vertices, r.n_vertices) {
        let diff = (a as i64 - b as i64).abs();
        v.vertex_difference = Some(diff);
        if diff > VERTEX_TOLERANCE {
            v.failures.push(format!("N(vertices) is {a} expected {b}, difference {diff} is outside tolerance {VERTEX_TOLERANCE}"));
        }
    }
    v
}

/// Verdicts of a job, by event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CountSummary {
    pub verdicts: BTreeMap<u64, EventVerdict>,
}

impl CountSummary {
    /// Adds verdicts (any order; the report sorts them by event).
    pub fn add(&mut self, v: impl IntoIterator<Item = EventVerdict>) {
        for x in v {
            self.verdicts.insert(x.event, x);
        }
    }
    /// Events that failed.
    pub fn failed(&self) -> usize {
        self.verdicts
            .values()
            .filter(|v| !v.failures.is_empty())
            .count()
    }
    /// The reference's end-of-job report: the verdict and the average track (relative) and
    /// vertex (absolute) differences, or the failed events with their details. Sums run in
    /// event order (the reference's `f32` track sum depends on thread timing; ours does not).
    ///
    /// ```
    /// use quiver_validation::counts::{CountSummary, EventVerdict};
    /// let mut s = CountSummary::default();
    /// s.add([EventVerdict { event: 0, ..Default::default() },
    ///        EventVerdict { event: 1, track_relative_difference: Some(0.01), vertex_difference: Some(1), ..Default::default() }]);
    /// assert_eq!(s.report(), "CountValidator: all 2 events passed validation\n \
    ///     Average relative track difference 0.005 (all within tolerance)\n \
    ///     Average absolute vertex difference 0.5 (all within tolerance)\n");
    /// ```
    pub fn report(&self) -> String {
        let all = self.verdicts.len();
        let mut s = String::new();
        let failed = self.failed();
        if failed == 0 {
            s.push_str(&format!(
                "CountValidator: all {all} events passed validation\n"
            ));
            let tracks: f32 = self
                .verdicts
                .values()
                .filter_map(|v| v.track_relative_difference)
                .sum();
            let vertices: i64 = self
                .verdicts
                .values()
                .filter_map(|v| v.vertex_difference)
                .sum();
            if tracks != 0.0 {
                s.push_str(&format!(
                    " Average relative track difference {} (all within tolerance)\n",
                    format_float(tracks / all as f32)
                ));
            }
            if vertices != 0 {
                s.push_str(&format!(
                    " Average absolute vertex difference {} (all within tolerance)\n",
                    format_float(vertices as f32 / all as f32)
                ));
            }
        } else {
            for v in self.verdicts.values().filter(|v| !v.failures.is_empty()) {
                s.push_str(&format!("Event {}", v.event));
                for f in &v.failures {
                    s.push_str(&format!("\n {f}"));
                }
                s.push('\n');
            }
            s.push_str(&format!(
                "CountValidator: {failed} events failed validation (see details above)\n"
            ));
        }
        s
    }
}

/// Our per-event counts of a batch starting at `first_event`.
pub fn event_counts(c: &BatchCounts, first_event: u64, n_events: usize) -> Vec<EventCounts> {
    let at = |v: &Option<Vec<u32>>, e: usize| v.as_ref().map(|v| v[e]);
    (0..n_events)
        .map(|e| EventCounts {
            event: first_event + e as u64,
            n_modules: at(&c.n_modules, e),
            n_digis: at(&c.n_digis, e),
            n_clusters: at(&c.n_clusters, e),
            n_tracks: at(&c.n_tracks, e),
            n_vertices: at(&c.n_vertices, e),
        })
        .collect()
}

/// Inputs of `count_validator`, with what each counts.
const COUNT_INPUTS: [(Input, &str); 6] = [
    (Input::Digis, "nDigis"),
    (Input::CalibratedDigis, "nModules (and nDigis)"),
    (Input::ClusteredDigis, "nClusters (and nDigis)"),
    (Input::Hits, "nClusters when clustered_digis is absent"),
    (Input::Tracks, "nTracks (n_hits > 0, any quality)"),
    (Input::Vertices, "nVertices"),
];

/// The `count_validator` step.
struct CountValidatorStep {
    keys: ChainKeys,
    reference: ReferenceTable,
    strict: bool,
    summary: Mutex<CountSummary>,
}

impl Step for CountValidatorStep {
    fn process(&self, batch: &mut EventBatch) -> quiver_columnar::Result<()> {
        let products = self.keys.get(batch)?;
        let counts = batch_counts(&products)?;
        let mut verdicts = Vec::with_capacity(batch.n_events());
        for (i, ours) in event_counts(&counts, batch.first_event(), batch.n_events())
            .into_iter()
            .enumerate()
        {
            // The input's event (a benchmark may replay the input).
            let input = batch.input_event(i);
            let r = self.reference.events.get(&input).ok_or_else(|| {
                quiver_columnar::Error::data(format!(
                    "event {input}: no reference counts in {}",
                    self.reference.origin
                ))
            })?;
            let v = check_event(&ours, r);
            if self.strict && !v.failures.is_empty() {
                return Err(quiver_columnar::Error::data(format!(
                    "event {}: {}",
                    v.event,
                    v.failures.join("; ")
                )));
            }
            verdicts.push(v);
        }
        self.summary
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(verdicts);
        Ok(())
    }

    fn end_job(&self, _success: bool) -> quiver_columnar::Result<Option<String>> {
        Ok(Some(
            self.summary
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .report(),
        ))
    }
}

fn build_count_validator(cfg: &StepConfig) -> quiver_columnar::Result<Box<dyn Step>> {
    let keys = ChainKeys::from_config(cfg, &COUNT_INPUTS.map(|(i, _)| i))?;
    check_countable(cfg, &keys)?;
    let given = cfg.params.str("reference");
    let path: PathBuf = if given.is_empty() {
        cfg.job
            .input
            .clone()
            .ok_or_else(|| cfg.param_error("reference", "empty and the job has no input dataset"))?
    } else {
        PathBuf::from(given)
    };
    let reference = read_reference(&path).map_err(|e| cfg.param_error("reference", e))?;
    Ok(Box::new(CountValidatorStep {
        keys,
        reference,
        strict: cfg.params.bool("strict"),
        summary: Mutex::new(CountSummary::default()),
    }))
}

/// The `event_counts` step: our per-event counts, written at the end of the job.
struct EventCountsStep {
    keys: ChainKeys,
    all: Mutex<Vec<EventCounts>>,
    path: PathBuf,
    /// Also write the reference's count files (`reference_files`) into this directory.
    bin_dir: Option<PathBuf>,
}

impl Step for EventCountsStep {
    fn process(&self, batch: &mut EventBatch) -> quiver_columnar::Result<()> {
        let counts = batch_counts(&self.keys.get(batch)?)?;
        let ev = event_counts(&counts, batch.first_event(), batch.n_events());
        self.all
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(ev);
        Ok(())
    }

    fn end_job(&self, success: bool) -> quiver_columnar::Result<Option<String>> {
        if !success {
            return Ok(Some("counts not written: the job failed".into()));
        }
        let all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        write_counts_parquet(&self.path, &all)?;
        let name = self
            .path
            .file_name()
            .unwrap_or(self.path.as_os_str())
            .to_string_lossy();
        let mut report = format!("{} events -> {name}", all.len());
        if let Some(dir) = &self.bin_dir {
            write_counts_reference_files(dir, &all)?;
            report += ", digicluster.bin, tracks.bin, vertices.bin";
        }
        Ok(Some(report))
    }
}

/// Writes per-event counts as the reference's validation files (`digicluster.bin`,
/// `tracks.bin`, `vertices.bin`, events in order from the first): with them next to the
/// files of `quiver export pixeltrack`, the reference's `--validation` checks its own counts
/// against ours. Every event needs all five counts, and the events must be 0, 1, 2, … (event
/// i of the files is the reference's event i).
///
/// ```
/// use quiver_validation::counts::{write_counts_reference_files, EventCounts};
/// let dir = tempfile::tempdir().unwrap();
/// let c = EventCounts { event: 0, n_modules: Some(1800), n_digis: Some(60_000), n_clusters: Some(18_000),
///                       n_tracks: Some(6_000), n_vertices: Some(40) };
/// write_counts_reference_files(dir.path(), &[c, EventCounts { event: 1, ..c }]).unwrap();
/// assert_eq!(std::fs::read(dir.path().join("tracks.bin")).unwrap(), [112, 23, 0, 0, 112, 23, 0, 0]);
/// let gap = EventCounts { event: 2, ..c };
/// assert!(write_counts_reference_files(dir.path(), &[c, gap]).is_err());
/// ```
pub fn write_counts_reference_files(dir: &Path, counts: &[EventCounts]) -> Result<()> {
    let mut sorted: Vec<&EventCounts> = counts.iter().collect();
    sorted.sort_by_key(|c| c.event);
    let bin = sorted
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if c.event != i as u64 {
                return Err(ValidationError::Data(format!(
                    "the reference's count files start at event 0 without gaps: event {} is at position {i}",
                    c.event
                )));
            }
            let missing = |what: &str| ValidationError::Data(format!("event {}: no {what} count (connect its product)", c.event));
            Ok(quiver_datasets::EventCounts {
                n_modules: c.n_modules.ok_or_else(|| missing("module"))?,
                n_digis: c.n_digis.ok_or_else(|| missing("digi"))?,
                n_clusters: c.n_clusters.ok_or_else(|| missing("cluster"))?,
                n_tracks: c.n_tracks.ok_or_else(|| missing("track"))?,
                n_vertices: c.n_vertices.ok_or_else(|| missing("vertex"))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    std::fs::create_dir_all(dir).map_err(|e| ValidationError::io(dir, e))?;
    quiver_datasets::write_counts_bin(dir, &bin).map_err(|e| ValidationError::Data(e.to_string()))
}

fn check_countable(cfg: &StepConfig, keys: &ChainKeys) -> quiver_columnar::Result<()> {
    if Input::ALL.iter().any(|&i| keys.has(i)) {
        Ok(())
    } else {
        Err(quiver_columnar::Error::plan(&cfg.label, "nothing to count: connect at least one of digis, calibrated_digis, clustered_digis, hits, tracks, vertices"))
    }
}

fn build_event_counts(cfg: &StepConfig) -> quiver_columnar::Result<Box<dyn Step>> {
    let keys = ChainKeys::from_config(cfg, &COUNT_INPUTS.map(|(i, _)| i))?;
    check_countable(cfg, &keys)?;
    let stem = cfg.params.str("file");
    if stem.is_empty() || stem.contains(['/', '\\']) {
        return Err(cfg.param_error("file", "must be a plain file name without extension"));
    }
    let bin_dir = cfg
        .params
        .bool("reference_files")
        .then(|| cfg.job.output.clone());
    Ok(Box::new(EventCountsStep {
        keys,
        all: Mutex::new(Vec::new()),
        path: cfg.job.output.join(format!("{stem}.parquet")),
        bin_dir,
    }))
}

/// Registers `count_validator` and `event_counts`.
pub fn register(r: &mut Registry) {
    r.add_file_writer("event_counts", |s| {
        let mut f = vec![format!("{}.parquet", s.params.str("file"))];
        if s.params.bool("reference_files") {
            f.extend(["digicluster.bin", "tracks.bin", "vertices.bin"].map(String::from));
        }
        f
    });
    r.add(StepType {
        name: "event_counts",
        doc: "Writes our per-event counts (modules, digis, clusters, tracks, vertices) to <file>.parquet, a count_validator reference",
        params: vec![
            ParamSpec::str("file", "counts", "file name stem in the job's output directory"),
            ParamSpec::bool(
                "reference_files",
                false,
                "also write the reference's digicluster.bin, tracks.bin and vertices.bin (pixeltrack-standalone --validation)",
            ),
        ],
        signature: Signature { inputs: input_specs(&COUNT_INPUTS), outputs: vec![] },
        backends: vec![Backend::Cpu],
        build: build_event_counts,
    });
    r.add(StepType {
        name: "count_validator",
        doc: "Compares per-event modules/digis/clusters (exact), tracks (±1.2%), vertices (±1) with reference counts",
        params: vec![
            ParamSpec::str(
                "reference",
                "",
                "reference counts: directory with digicluster.bin [tracks.bin vertices.bin], or a .parquet table; empty = the input dataset",
            ),
            ParamSpec::bool("strict", true, "fail the job at the first event outside tolerance; otherwise report at the end"),
        ],
        signature: Signature { inputs: input_specs(&COUNT_INPUTS), outputs: vec![] },
        backends: vec![Backend::Cpu],
        build: build_count_validator,
    });
}

#[cfg(test)]
mod tests;
