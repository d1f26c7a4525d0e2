//! Reading the run's products and the dataset's truth tables into per-event structs, and
//! writing the result tables. Column types are converted leniently (any integer or float
//! primitive), so the report does not break on a widened column.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float64Array, Int64Array, LargeListArray, ListArray,
    RecordBatch, StringArray, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_schema::{DataType, Field, Schema};

use super::{
    PlusProducts, RecHit, RecoDigi, RecoEvent, RecoTrack, RecoVertex, TruthEvent, TruthParticle,
    TruthPixel, TruthSimHit, TruthVertex,
};
use crate::error::{Result, ValidationError};

/// All rows of a Parquet file as one batch.
pub(crate) fn read_parquet(path: &Path) -> Result<RecordBatch> {
    let f = std::fs::File::open(path).map_err(|source| ValidationError::Io {
        path: path.into(),
        source,
    })?;
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)?;
    let schema = builder.schema().clone();
    let batches = builder
        .build()?
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(arrow_select::concat::concat_batches(&schema, &batches)?)
}

fn column<'a>(b: &'a RecordBatch, file: &str, name: &str) -> Result<&'a ArrayRef> {
    b.column_by_name(name)
        .ok_or_else(|| ValidationError::MissingColumn {
            product: file.into(),
            column: name.into(),
        })
}

macro_rules! convert {
    ($a:expr, $file:expr, $name:expr, $t:ty) => {{
        let a: &dyn Array = $a;
        if a.null_count() > 0 {
            return Err(ValidationError::Nulls {
                column: format!("{}:{}", $file, $name),
                nulls: a.null_count(),
            });
        }
        let v: Vec<$t> = match a.data_type() {
            DataType::UInt8 => a
                .as_primitive::<UInt8Type>()
                .values()
                .iter()
                .map(|&x| x as $t)
                .collect(),
            DataType::UInt16 => a
                .as_primitive::<UInt16Type>()
                .values()
                .iter()
                .map(|&x| x as $t)
                .collect(),
            DataType::UInt32 => a
                .as_primitive::<UInt32Type>()
                .values()
                .iter()
                .map(|&x| x as $t)
                .collect(),
            DataType::UInt64 => a
                .as_primitive::<UInt64Type>()
                .values()
                .iter()
                .map(|&x| x as $t)
                .collect(),
            DataType::Int8 => a
                .as_primitive::<Int8Type>()
                .values()
                .iter()
                .map(|&x| x as $t)
                .collect(),
            DataType::Int16 => a
                .as_primitive::<Int16Type>()
                .values()
                .iter()
                .map(|&x| x as $t)
                .collect(),
            DataType::Int32 => a
                .as_primitive::<Int32Type>()
                .values()
                .iter()
                .map(|&x| x as $t)
                .collect(),
            DataType::Int64 => a
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .map(|&x| x as $t)
                .collect(),
            DataType::Float32 => a
                .as_primitive::<Float32Type>()
                .values()
                .iter()
                .map(|&x| x as $t)
                .collect(),
            DataType::Float64 => a
                .as_primitive::<Float64Type>()
                .values()
                .iter()
                .map(|&x| x as $t)
                .collect(),
            DataType::Boolean => a
                .as_boolean()
                .iter()
                .map(|x| x.unwrap_or(false) as u8 as $t)
                .collect(),
            t => {
                return Err(ValidationError::ColumnType {
                    column: format!("{}:{}", $file, $name),
                    data_type: t.to_string(),
                    expected: "expected a numeric column".into(),
                })
            }
        };
        v
    }};
}

fn ints(b: &RecordBatch, file: &str, name: &str) -> Result<Vec<i64>> {
    Ok(convert!(column(b, file, name)?.as_ref(), file, name, i64))
}

fn floats(b: &RecordBatch, file: &str, name: &str) -> Result<Vec<f32>> {
    Ok(convert!(column(b, file, name)?.as_ref(), file, name, f32))
}

/// (offsets, flat values) of a list column of integers.
fn int_lists(b: &RecordBatch, file: &str, name: &str) -> Result<(Vec<usize>, Vec<i64>)> {
    let a = column(b, file, name)?;
    if let Some(l) = a.as_any().downcast_ref::<ListArray>() {
        let off = l.value_offsets();
        let base = off[0] as usize;
        let vals = convert!(l.values().as_ref(), file, name, i64);
        Ok((
            off.iter().map(|&o| o as usize - base).collect(),
            vals[base..].to_vec(),
        ))
    } else if let Some(l) = a.as_any().downcast_ref::<LargeListArray>() {
        let off = l.value_offsets();
        let base = off[0] as usize;
        let vals = convert!(l.values().as_ref(), file, name, i64);
        Ok((
            off.iter().map(|&o| o as usize - base).collect(),
            vals[base..].to_vec(),
        ))
    } else {
        Err(ValidationError::ColumnType {
            column: format!("{file}:{name}"),
            data_type: a.data_type().to_string(),
            expected: "expected a list".into(),
        })
    }
}

/// Flat values of a fixed-size list column of width `w`.
fn fixed_floats(b: &RecordBatch, file: &str, name: &str, w: usize) -> Result<Vec<f32>> {
    let a = column(b, file, name)?;
    let l = a
        .as_any()
        .downcast_ref::<FixedSizeListArray>()
        .filter(|l| l.value_length() as usize == w)
        .ok_or_else(|| ValidationError::ColumnType {
            column: format!("{file}:{name}"),
            data_type: a.data_type().to_string(),
            expected: format!("expected a fixed-size list of {w}"),
        })?;
    let vals = convert!(l.values().as_ref(), file, name, f32);
    let start = l.offset() * w;
    Ok(vals[start..start + l.len() * w].to_vec())
}

/// Contiguous row range of every event; rows must be grouped by event.
fn event_ranges(b: &RecordBatch, file: &str) -> Result<BTreeMap<u32, Range<usize>>> {
    let ev = ints(b, file, "event")?;
    let mut out: BTreeMap<u32, Range<usize>> = BTreeMap::new();
    let mut start = 0;
    for i in 1..=ev.len() {
        if i == ev.len() || ev[i] != ev[start] {
            let e = u32::try_from(ev[start]).map_err(|_| {
                ValidationError::Data(format!("{file}: event {} out of range", ev[start]))
            })?;
            if out.insert(e, start..i).is_some() {
                return Err(ValidationError::Data(format!(
                    "{file}: rows of event {e} are not contiguous"
                )));
            }
            start = i;
        }
    }
    Ok(out)
}

fn rows_of(m: &BTreeMap<u32, Range<usize>>, e: u32) -> Range<usize> {
    m.get(&e).cloned().unwrap_or(0..0)
}

fn u32_of(v: i64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| ValidationError::Data(format!("{what}: {v} is not a valid index")))
}

/// Reads the run's `digis.digis`, `clustered_digis.chargecut`, `hits.hits`, `tracks.tracks`
/// and `vertices.vertices` files, one [`RecoEvent`] per event present in `digis`.
pub(crate) fn read_run(dir: &Path) -> Result<BTreeMap<u32, RecoEvent>> {
    // Only a complete run, whose files all come from one job (the run manifest).
    quiver_columnar::rundir::verify(dir).map_err(|e| ValidationError::Data(e.to_string()))?;
    let names = [
        "digis.digis",
        "clustered_digis.chargecut",
        "hits.hits",
        "tracks.tracks",
        "vertices.vertices",
    ];
    let b: Vec<RecordBatch> = names
        .iter()
        .map(|n| read_parquet(&dir.join(format!("{n}.parquet"))))
        .collect::<Result<_>>()?;
    let r: Vec<BTreeMap<u32, Range<usize>>> = names
        .iter()
        .zip(&b)
        .map(|(n, b)| event_ranges(b, n))
        .collect::<Result<_>>()?;
    let (dg, cd, hi, tr, vx) = (&b[0], &b[1], &b[2], &b[3], &b[4]);
    let (row, col) = (ints(dg, names[0], "row")?, ints(dg, names[0], "col")?);
    let (cmod, cclu) = (
        ints(cd, names[1], "module")?,
        ints(cd, names[1], "cluster")?,
    );
    let hmod = ints(hi, names[2], "det_index")?;
    let (hx, hy) = (
        floats(hi, names[2], "x_local")?,
        floats(hi, names[2], "y_local")?,
    );
    let (sx, sy) = (ints(hi, names[2], "size_x")?, ints(hi, names[2], "size_y")?);
    let tracks = TrackColumns::read(tr, names[3])?;
    let vertex_table = VertexColumns::read(vx, names[4])?;
    let plus = PlusColumns::read(dir)?;

    let mut out = BTreeMap::new();
    for (&e, dr) in &r[0] {
        let crow = rows_of(&r[1], e);
        if crow.len() != dr.len() {
            return Err(ValidationError::Data(format!(
                "event {e}: {} digis rows but {} clustered_digis rows",
                dr.len(),
                crow.len()
            )));
        }
        let digis = dr
            .clone()
            .zip(crow)
            .map(|(i, j)| RecoDigi {
                row: row[i] as u16,
                col: col[i] as u16,
                module: cmod[j] as u16,
                cluster: cclu[j] as i32,
            })
            .collect();
        let hits = rows_of(&r[2], e)
            .map(|i| RecHit {
                module: hmod[i] as u16,
                x_local: hx[i],
                y_local: hy[i],
                size_x: sx[i] as i32,
                size_y: sy[i] as i32,
            })
            .collect();
        let tracks = rows_of(&r[3], e)
            .map(|i| tracks.track(i))
            .collect::<Result<_>>()?;
        let vertices = vertex_table.event(rows_of(&r[4], e))?;
        let plus = plus.as_ref().map(|p| p.event(e)).transpose()?;
        out.insert(
            e,
            RecoEvent {
                digis,
                hits,
                tracks,
                vertices,
                plus,
            },
        );
    }
    Ok(out)
}

/// The columns of a `vertices` file the report reads.
struct VertexColumns {
    z: Vec<f32>,
    weight: Vec<f32>,
    offsets: Vec<usize>,
    tracks: Vec<i64>,
}

impl VertexColumns {
    fn read(b: &RecordBatch, file: &str) -> Result<Self> {
        let (offsets, tracks) = int_lists(b, file, "tracks")?;
        Ok(VertexColumns {
            z: floats(b, file, "z")?,
            weight: floats(b, file, "weight")?,
            offsets,
            tracks,
        })
    }
    fn event(&self, rows: Range<usize>) -> Result<Vec<RecoVertex>> {
        rows.map(|i| {
            let tracks = self.tracks[self.offsets[i]..self.offsets[i + 1]]
                .iter()
                .map(|&h| u32_of(h, "vertex track"))
                .collect::<Result<_>>()?;
            Ok(RecoVertex {
                z: self.z[i],
                weight: self.weight[i],
                tracks,
            })
        })
        .collect()
    }
}

/// The run's optional second selection: a `track_scores` file (a `track_classifier` step's
/// output) and a second `vertices` file (a second vertex finder), as plans/pixel-plus.toml
/// writes them.
struct PlusColumns {
    /// Event rows, `score` and `quality`.
    scores: Option<(EventRows, Vec<f32>, Vec<i64>)>,
    vertices: Option<(EventRows, VertexColumns)>,
}

/// A file's rows of each event.
type EventRows = BTreeMap<u32, Range<usize>>;

impl PlusColumns {
    fn read(dir: &Path) -> Result<Option<Self>> {
        let scores = match only_file(dir, "track_scores.", None)? {
            Some(name) => {
                let b = read_parquet(&dir.join(format!("{name}.parquet")))?;
                Some((
                    event_ranges(&b, &name)?,
                    floats(&b, &name, "score")?,
                    ints(&b, &name, "quality")?,
                ))
            }
            None => None,
        };
        let vertices = match only_file(dir, "vertices.", Some("vertices.vertices"))? {
            Some(name) => {
                let b = read_parquet(&dir.join(format!("{name}.parquet")))?;
                Some((event_ranges(&b, &name)?, VertexColumns::read(&b, &name)?))
            }
            None => None,
        };
        Ok((scores.is_some() || vertices.is_some()).then_some(PlusColumns { scores, vertices }))
    }

    fn event(&self, e: u32) -> Result<PlusProducts> {
        let scores = self.scores.as_ref().map(|(r, score, quality)| {
            rows_of(r, e)
                .map(|i| (score[i], quality[i] as u8))
                .collect()
        });
        let vertices = match &self.vertices {
            Some((r, v)) => Some(v.event(rows_of(r, e))?),
            None => None,
        };
        Ok(PlusProducts { scores, vertices })
    }
}

/// The one `PREFIX*.parquet` file of a run directory (without `.parquet`), other than `except`;
/// two are an error (the report would not know which selection to show).
fn only_file(dir: &Path, prefix: &str, except: Option<&str>) -> Result<Option<String>> {
    let entries = std::fs::read_dir(dir).map_err(|e| ValidationError::io(dir, e))?;
    let mut found = Vec::new();
    for entry in entries {
        let name = entry.map_err(|e| ValidationError::io(dir, e))?.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(".parquet") {
            if stem.starts_with(prefix) && Some(stem) != except {
                found.push(stem.to_string());
            }
        }
    }
    found.sort();
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(ValidationError::Data(format!(
            "{}: {} files {} — the report compares the faithful chain with one second selection: \
             write one of them",
            dir.display(),
            found.len(),
            found.join(".parquet, ") + ".parquet"
        ))),
    }
}

/// The columns of `tracks.tracks` that the truth matching reads.
struct TrackColumns {
    quality: Vec<i64>,
    pt: Vec<f32>,
    eta: Vec<f32>,
    phi: Vec<f32>,
    tip: Vec<f32>,
    zip: Vec<f32>,
    charge: Vec<i64>,
    state: Vec<f32>,
    cov: Vec<f32>,
    hit_offsets: Vec<usize>,
    hits: Vec<i64>,
}

impl TrackColumns {
    fn read(tr: &RecordBatch, t: &str) -> Result<Self> {
        let (hit_offsets, hits) = int_lists(tr, t, "hits")?;
        Ok(TrackColumns {
            quality: ints(tr, t, "quality")?,
            pt: floats(tr, t, "pt")?,
            eta: floats(tr, t, "eta")?,
            phi: floats(tr, t, "phi")?,
            tip: floats(tr, t, "tip")?,
            zip: floats(tr, t, "zip")?,
            charge: ints(tr, t, "charge")?,
            state: fixed_floats(tr, t, "state", 5)?,
            cov: fixed_floats(tr, t, "covariance", 15)?,
            hit_offsets,
            hits,
        })
    }

    /// Track `i` (a row of the file).
    fn track(&self, i: usize) -> Result<RecoTrack> {
        let hits = self.hits[self.hit_offsets[i]..self.hit_offsets[i + 1]]
            .iter()
            .map(|&h| u32_of(h, "track hit"))
            .collect::<Result<_>>()?;
        Ok(RecoTrack {
            quality: self.quality[i] as u8,
            pt: self.pt[i],
            eta: self.eta[i],
            phi: self.phi[i],
            tip: self.tip[i],
            zip: self.zip[i],
            charge: self.charge[i] as i8,
            state: self.state[i * 5..i * 5 + 5].try_into().unwrap(),
            cov: self.cov[i * 15..i * 15 + 15].try_into().unwrap(),
            hits,
        })
    }
}

/// Reads `particles`, `vertices`, `simhits` and `pixel_truth` of a dataset directory.
pub(crate) fn read_truth(dir: &Path) -> Result<BTreeMap<u32, TruthEvent>> {
    let names = ["particles", "vertices", "simhits", "pixel_truth"];
    let files: Vec<String> = names.iter().map(|n| format!("{n}.parquet")).collect();
    quiver_datasets::format::verify_files(
        dir,
        &files.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .map_err(|e| crate::ValidationError::Data(e.to_string()))?;
    let b: Vec<RecordBatch> = names
        .iter()
        .map(|n| read_parquet(&dir.join(format!("{n}.parquet"))))
        .collect::<Result<_>>()?;
    let r: Vec<BTreeMap<u32, Range<usize>>> = names
        .iter()
        .zip(&b)
        .map(|(n, b)| event_ranges(b, n))
        .collect::<Result<_>>()?;
    let (p, v, s, x) = (&b[0], &b[1], &b[2], &b[3]);
    let n = names[0];
    let (pid, pq, ppt, peta, pphi) = (
        ints(p, n, "id")?,
        ints(p, n, "charge")?,
        floats(p, n, "pt")?,
        floats(p, n, "eta")?,
        floats(p, n, "phi")?,
    );
    let (pvx, pvy, pvz, pproc, pvert) = (
        floats(p, n, "vx")?,
        floats(p, n, "vy")?,
        floats(p, n, "vz")?,
        ints(p, n, "process")?,
        ints(p, n, "vertex")?,
    );
    let (vid, vzz, vhard) = (
        ints(v, names[1], "id")?,
        floats(v, names[1], "z")?,
        ints(v, names[1], "is_hard")?,
    );
    let (smod, slx, sly, spart) = (
        ints(s, names[2], "module")?,
        floats(s, names[2], "lx")?,
        floats(s, names[2], "ly")?,
        ints(s, names[2], "particle")?,
    );
    let (xmod, xrow, xcol, xpart, xel) = (
        ints(x, names[3], "module")?,
        ints(x, names[3], "row")?,
        ints(x, names[3], "col")?,
        ints(x, names[3], "particle")?,
        floats(x, names[3], "electrons")?,
    );
    let mut out = BTreeMap::new();
    for &e in &r[0]
        .keys()
        .chain(r[1].keys())
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
    {
        let mut t = TruthEvent::default();
        for i in rows_of(&r[0], e) {
            t.particles.push(TruthParticle {
                id: u32_of(pid[i], "particle id")?,
                charge: pq[i] as i8,
                pt: ppt[i],
                eta: peta[i],
                phi: pphi[i],
                vx: pvx[i],
                vy: pvy[i],
                vz: pvz[i],
                process: pproc[i] as u8,
                vertex: pvert[i] as i32,
            });
        }
        for i in rows_of(&r[1], e) {
            t.vertices.push(TruthVertex {
                id: u32_of(vid[i], "vertex id")?,
                z: vzz[i],
                is_hard: vhard[i] != 0,
            });
        }
        for i in rows_of(&r[2], e) {
            t.simhits.push(TruthSimHit {
                module: smod[i] as u16,
                lx: slx[i],
                ly: sly[i],
                particle: u32_of(spart[i], "simhit particle")?,
            });
        }
        for i in rows_of(&r[3], e) {
            t.pixels.push(TruthPixel {
                module: xmod[i] as u16,
                row: xrow[i] as u16,
                col: xcol[i] as u16,
                particle: u32_of(xpart[i], "pixel_truth particle")?,
                electrons: xel[i],
            });
        }
        out.insert(e, t);
    }
    Ok(out)
}

/// A result table column.
pub(crate) enum Col {
    Str(Vec<String>),
    F64(Vec<f64>),
    U64(Vec<u64>),
    U32(Vec<u32>),
    U8(Vec<u8>),
    I64(Vec<i64>),
}

/// Writes named columns as one Parquet file.
pub(crate) fn write_table(path: &Path, cols: Vec<(&str, Col)>) -> Result<()> {
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (name, c) in cols {
        let (dt, a): (DataType, ArrayRef) = match c {
            Col::Str(v) => (DataType::Utf8, Arc::new(StringArray::from(v))),
            Col::F64(v) => (DataType::Float64, Arc::new(Float64Array::from(v))),
            Col::U64(v) => (DataType::UInt64, Arc::new(UInt64Array::from(v))),
            Col::U32(v) => (DataType::UInt32, Arc::new(UInt32Array::from(v))),
            Col::U8(v) => (DataType::UInt8, Arc::new(UInt8Array::from(v))),
            Col::I64(v) => (DataType::Int64, Arc::new(Int64Array::from(v))),
        };
        fields.push(Field::new(name, dt, false));
        arrays.push(a);
    }
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
    let f = std::fs::File::create(path).map_err(|source| ValidationError::Io {
        path: path.into(),
        source,
    })?;
    let mut w = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), None)?;
    w.write(&batch)?;
    w.close()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_second_selections_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let touch = |n: &str| std::fs::write(dir.path().join(n), b"").unwrap();
        touch("vertices.vertices.parquet");
        assert_eq!(
            only_file(dir.path(), "vertices.", Some("vertices.vertices")).unwrap(),
            None
        );
        touch("track_scores.a.parquet");
        assert_eq!(
            only_file(dir.path(), "track_scores.", None).unwrap(),
            Some("track_scores.a".to_string())
        );
        touch("track_scores.b.parquet");
        let e = only_file(dir.path(), "track_scores.", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2 files track_scores.a.parquet, track_scores.b.parquet"),
            "{e}"
        );
    }
}
