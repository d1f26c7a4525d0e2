//! The on-disk dataset: a directory with `manifest.toml`, `raw.arrow` (Arrow IPC file,
//! memory-mapped by the reader), one Arrow IPC file per condition kind under `conditions/`,
//! and the truth as Parquet files. See `docs/datasets.md` for every column and unit.

use crate::conditions::{
    AverageGeometry, BeamSpot, CablingMap, CommonParams, Conditions, CpeParams, DetParams, Frame,
    GainCalibration, CABLING_MAX_SIZE, MAX_NUM_MODULES,
};
use crate::error::DatasetError;
use crate::generator::{Event, GeneratorParams};
use crate::raw::Faults;
use crate::topology::{NUMBER_OF_LADDERS_IN_BARREL, NUMBER_OF_MODULES};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float32Array, Int32Array, Int8Array, RecordBatch,
    UInt16Array, UInt32Array, UInt8Array,
};
use arrow_buffer::Buffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Read};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

/// Version of the directory layout; bumped on incompatible changes.
pub const FORMAT_VERSION: u32 = 1;
/// Name of the generator written in the manifest.
pub const GENERATOR_NAME: &str = concat!("quiver-datasets ", env!("CARGO_PKG_VERSION"));

/// Files of the conditions directory.
pub const CONDITION_FILES: [&str; 7] = [
    "conditions/beamspot.arrow",
    "conditions/fed_ids.arrow",
    "conditions/cabling.arrow",
    "conditions/gain_ranges.arrow",
    "conditions/gain_data.arrow",
    "conditions/cpe_det.arrow",
    "conditions/cpe_ladders.arrow",
];

/// `manifest.toml`: what was generated, how, and the checksum of every file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format_version: u32,
    pub generator: String,
    pub events: u32,
    pub seed: u64,
    pub corrupt_fraction: f64,
    /// Every generator parameter (the pile-up among them).
    pub params: GeneratorParams,
    /// Relative path → lowercase hex SHA-256.
    pub files: BTreeMap<String, String>,
}

pub(crate) fn sha256_file(path: &Path) -> Result<String, DatasetError> {
    let mut f = File::open(path).map_err(|e| DatasetError::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| DatasetError::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn field(name: &str, dt: DataType) -> Field {
    Field::new(name, dt, false)
}

fn write_ipc(path: &Path, batch: &RecordBatch) -> Result<(), DatasetError> {
    let f = File::create(path).map_err(|e| DatasetError::io(path, e))?;
    let mut w = arrow_ipc::writer::FileWriter::try_new(BufWriter::new(f), &batch.schema())
        .map_err(|e| DatasetError::format(path, e))?;
    w.write(batch).map_err(|e| DatasetError::format(path, e))?;
    w.finish().map_err(|e| DatasetError::format(path, e))?;
    Ok(())
}

fn read_ipc(path: &Path) -> Result<RecordBatch, DatasetError> {
    let (schema, mut batches) = crate::ipc::read_file(path)?;
    match batches.len() {
        0 => Ok(RecordBatch::new_empty(schema)),
        1 => Ok(batches.pop().expect("one batch")),
        n => Err(DatasetError::damaged(path, format!("{n} record batches, expected one"))),
    }
}

fn batch(path: &Path, fields: Vec<Field>, cols: Vec<ArrayRef>, meta: HashMap<String, String>) -> Result<RecordBatch, DatasetError> {
    let schema = Arc::new(Schema::new_with_metadata(fields, meta));
    RecordBatch::try_new(schema, cols).map_err(|e| DatasetError::format(path, e))
}

fn col<'a, T: Array + 'static>(path: &Path, b: &'a RecordBatch, name: &str, rows: Option<usize>) -> Result<&'a T, DatasetError> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| DatasetError::damaged(path, format!("missing column `{name}`")))?;
    let a = c
        .as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| DatasetError::damaged(path, format!("column `{name}` has type {}", c.data_type())))?;
    if let Some(n) = rows {
        if a.len() != n {
            return Err(DatasetError::damaged(path, format!("column `{name}` has {} rows, expected {n}", a.len())));
        }
    }
    if a.null_count() > 0 {
        return Err(DatasetError::damaged(path, format!("column `{name}` has nulls")));
    }
    Ok(a)
}

fn meta_f32(path: &Path, b: &RecordBatch, key: &str) -> Result<f32, DatasetError> {
    b.schema()
        .metadata()
        .get(key)
        .and_then(|v| v.parse::<f32>().ok())
        .ok_or_else(|| DatasetError::damaged(path, format!("missing or invalid metadata `{key}`")))
}

fn meta_u32(path: &Path, b: &RecordBatch, key: &str) -> Result<u32, DatasetError> {
    b.schema()
        .metadata()
        .get(key)
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| DatasetError::damaged(path, format!("missing or invalid metadata `{key}`")))
}

macro_rules! f32col {
    ($v:expr) => {
        Arc::new(Float32Array::from($v)) as ArrayRef
    };
}
macro_rules! u32col {
    ($v:expr) => {
        Arc::new(UInt32Array::from($v)) as ArrayRef
    };
}

/// Writes the conditions as Arrow IPC files under `dir/conditions/`.
pub fn write_conditions(dir: &Path, c: &Conditions) -> Result<(), DatasetError> {
    let cdir = dir.join("conditions");
    std::fs::create_dir_all(&cdir).map_err(|e| DatasetError::io(&cdir, e))?;
    // beam spot
    let p = dir.join(CONDITION_FILES[0]);
    let bs = &c.beam_spot;
    let names = ["x", "y", "z", "sigma_z", "beam_width_x", "beam_width_y", "dxdz", "dydz", "emittance_x", "emittance_y", "beta_star"];
    let vals = [bs.x, bs.y, bs.z, bs.sigma_z, bs.beam_width_x, bs.beam_width_y, bs.dxdz, bs.dydz, bs.emittance_x, bs.emittance_y, bs.beta_star];
    let b = batch(
        &p,
        names.iter().map(|n| field(n, DataType::Float32)).collect(),
        vals.iter().map(|v| f32col!(vec![*v])).collect(),
        HashMap::new(),
    )?;
    write_ipc(&p, &b)?;
    // fed ids
    let p = dir.join(CONDITION_FILES[1]);
    let b = batch(&p, vec![field("fed", DataType::UInt32)], vec![u32col!(c.fed_ids.clone())], HashMap::new())?;
    write_ipc(&p, &b)?;
    // cabling
    let p = dir.join(CONDITION_FILES[2]);
    let m = &c.cabling;
    let mut fields: Vec<Field> = ["fed", "link", "roc", "raw_id", "roc_in_det", "module_id"].iter().map(|n| field(n, DataType::UInt32)).collect();
    fields.push(field("bad_rocs", DataType::UInt8));
    fields.push(field("mod_to_unp", DataType::UInt8));
    let cols: Vec<ArrayRef> = vec![
        u32col!(m.fed.clone()),
        u32col!(m.link.clone()),
        u32col!(m.roc.clone()),
        u32col!(m.raw_id.clone()),
        u32col!(m.roc_in_det.clone()),
        u32col!(m.module_id.clone()),
        Arc::new(UInt8Array::from(m.bad_rocs.clone())),
        Arc::new(UInt8Array::from(m.mod_to_unp.clone())),
    ];
    let b = batch(&p, fields, cols, HashMap::from([("size".to_string(), m.size.to_string())]))?;
    write_ipc(&p, &b)?;
    // gains: per-module ranges + scalars, then the code pairs
    let g = &c.gains;
    let p = dir.join(CONDITION_FILES[3]);
    let meta = HashMap::from([
        ("min_ped".to_string(), g.min_ped.to_string()),
        ("max_ped".to_string(), g.max_ped.to_string()),
        ("min_gain".to_string(), g.min_gain.to_string()),
        ("max_gain".to_string(), g.max_gain.to_string()),
        ("ped_precision".to_string(), g.ped_precision.to_string()),
        ("gain_precision".to_string(), g.gain_precision.to_string()),
        ("rows_averaged".to_string(), g.rows_averaged.to_string()),
        ("n_bins".to_string(), g.n_bins.to_string()),
        ("dead_flag".to_string(), g.dead_flag.to_string()),
        ("noisy_flag".to_string(), g.noisy_flag.to_string()),
    ]);
    let b = batch(
        &p,
        vec![field("first", DataType::UInt32), field("last", DataType::UInt32), field("n_cols", DataType::Int32)],
        vec![
            u32col!(g.range_and_cols.iter().map(|r| r.0).collect::<Vec<_>>()),
            u32col!(g.range_and_cols.iter().map(|r| r.1).collect::<Vec<_>>()),
            Arc::new(Int32Array::from(g.range_and_cols.iter().map(|r| r.2).collect::<Vec<_>>())),
        ],
        meta,
    )?;
    write_ipc(&p, &b)?;
    let p = dir.join(CONDITION_FILES[4]);
    let b = batch(
        &p,
        vec![field("gain", DataType::UInt8), field("ped", DataType::UInt8)],
        vec![
            Arc::new(UInt8Array::from(g.data.iter().step_by(2).copied().collect::<Vec<_>>())),
            Arc::new(UInt8Array::from(g.data.iter().skip(1).step_by(2).copied().collect::<Vec<_>>())),
        ],
        HashMap::new(),
    )?;
    write_ipc(&p, &b)?;
    // CPE per module
    let p = dir.join(CONDITION_FILES[5]);
    let d = &c.cpe.det;
    let fget = |f: &dyn Fn(&DetParams) -> f32| f32col!(d.iter().map(f).collect::<Vec<_>>());
    let mut fields = vec![
        field("is_barrel", DataType::Boolean),
        field("is_pos_z", DataType::Boolean),
        field("layer", DataType::UInt16),
        field("index", DataType::UInt16),
        field("raw_id", DataType::UInt32),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(BooleanArray::from(d.iter().map(|x| x.is_barrel).collect::<Vec<_>>())),
        Arc::new(BooleanArray::from(d.iter().map(|x| x.is_pos_z).collect::<Vec<_>>())),
        Arc::new(UInt16Array::from(d.iter().map(|x| x.layer).collect::<Vec<_>>())),
        Arc::new(UInt16Array::from(d.iter().map(|x| x.index).collect::<Vec<_>>())),
        u32col!(d.iter().map(|x| x.raw_id).collect::<Vec<_>>()),
    ];
    for (name, v) in det_float_columns() {
        fields.push(field(name, DataType::Float32));
        cols.push(fget(&|x: &DetParams| v(x)));
    }
    let cm = &c.cpe.common;
    let meta = HashMap::from([
        ("thickness_b".to_string(), cm.thickness_b.to_string()),
        ("thickness_e".to_string(), cm.thickness_e.to_string()),
        ("pitch_x".to_string(), cm.pitch_x.to_string()),
        ("pitch_y".to_string(), cm.pitch_y.to_string()),
    ]);
    let b = batch(&p, fields, cols, meta)?;
    write_ipc(&p, &b)?;
    // average geometry
    let p = dir.join(CONDITION_FILES[6]);
    let ag = &c.cpe.average_geometry;
    let b = batch(
        &p,
        ["ladder_z", "ladder_x", "ladder_y", "ladder_r", "ladder_min_z", "ladder_max_z"].iter().map(|n| field(n, DataType::Float32)).collect(),
        vec![
            f32col!(ag.ladder_z.clone()),
            f32col!(ag.ladder_x.clone()),
            f32col!(ag.ladder_y.clone()),
            f32col!(ag.ladder_r.clone()),
            f32col!(ag.ladder_min_z.clone()),
            f32col!(ag.ladder_max_z.clone()),
        ],
        HashMap::from([
            ("end_cap_z0".to_string(), ag.end_cap_z[0].to_string()),
            ("end_cap_z1".to_string(), ag.end_cap_z[1].to_string()),
        ]),
    )?;
    write_ipc(&p, &b)
}

type DetGetter = fn(&DetParams) -> f32;

/// The float columns of `cpe_det.arrow`, in order.
fn det_float_columns() -> Vec<(&'static str, DetGetter)> {
    vec![
        ("shift_x", |d| d.shift_x),
        ("shift_y", |d| d.shift_y),
        ("charge_width_x", |d| d.charge_width_x),
        ("charge_width_y", |d| d.charge_width_y),
        ("x0", |d| d.x0),
        ("y0", |d| d.y0),
        ("z0", |d| d.z0),
        ("sx0", |d| d.sx[0]),
        ("sx1", |d| d.sx[1]),
        ("sx2", |d| d.sx[2]),
        ("sy0", |d| d.sy[0]),
        ("sy1", |d| d.sy[1]),
        ("sy2", |d| d.sy[2]),
        ("px", |d| d.frame.px),
        ("py", |d| d.frame.py),
        ("pz", |d| d.frame.pz),
        ("r11", |d| d.frame.r[0]),
        ("r12", |d| d.frame.r[1]),
        ("r13", |d| d.frame.r[2]),
        ("r21", |d| d.frame.r[3]),
        ("r22", |d| d.frame.r[4]),
        ("r23", |d| d.frame.r[5]),
        ("r31", |d| d.frame.r[6]),
        ("r32", |d| d.frame.r[7]),
        ("r33", |d| d.frame.r[8]),
    ]
}

/// Reads the conditions written by [`write_conditions`].
pub fn read_conditions(dir: &Path) -> Result<Conditions, DatasetError> {
    // beam spot
    let p = dir.join(CONDITION_FILES[0]);
    let b = read_ipc(&p)?;
    let g = |n: &str| -> Result<f32, DatasetError> { Ok(col::<Float32Array>(&p, &b, n, Some(1))?.value(0)) };
    let beam_spot = BeamSpot {
        x: g("x")?,
        y: g("y")?,
        z: g("z")?,
        sigma_z: g("sigma_z")?,
        beam_width_x: g("beam_width_x")?,
        beam_width_y: g("beam_width_y")?,
        dxdz: g("dxdz")?,
        dydz: g("dydz")?,
        emittance_x: g("emittance_x")?,
        emittance_y: g("emittance_y")?,
        beta_star: g("beta_star")?,
    };
    let p = dir.join(CONDITION_FILES[1]);
    let b = read_ipc(&p)?;
    let fed_ids = col::<UInt32Array>(&p, &b, "fed", None)?.values().to_vec();
    if fed_ids.iter().any(|&f| !(1200..1350).contains(&f)) || fed_ids.windows(2).any(|w| w[0] >= w[1]) {
        return Err(DatasetError::damaged(&p, "FED ids must be ascending within 1200..1349"));
    }
    // cabling
    let p = dir.join(CONDITION_FILES[2]);
    let b = read_ipc(&p)?;
    let n = Some(CABLING_MAX_SIZE);
    let u = |name: &str| -> Result<Vec<u32>, DatasetError> { Ok(col::<UInt32Array>(&p, &b, name, n)?.values().to_vec()) };
    let cabling = CablingMap {
        fed: u("fed")?,
        link: u("link")?,
        roc: u("roc")?,
        raw_id: u("raw_id")?,
        roc_in_det: u("roc_in_det")?,
        module_id: u("module_id")?,
        bad_rocs: col::<UInt8Array>(&p, &b, "bad_rocs", n)?.values().to_vec(),
        mod_to_unp: col::<UInt8Array>(&p, &b, "mod_to_unp", n)?.values().to_vec(),
        size: meta_u32(&p, &b, "size")?,
    };
    // gains
    let p = dir.join(CONDITION_FILES[3]);
    let b = read_ipc(&p)?;
    let n = Some(MAX_NUM_MODULES);
    let first = col::<UInt32Array>(&p, &b, "first", n)?;
    let last = col::<UInt32Array>(&p, &b, "last", n)?;
    let ncols = col::<Int32Array>(&p, &b, "n_cols", n)?;
    let range_and_cols = (0..MAX_NUM_MODULES).map(|i| (first.value(i), last.value(i), ncols.value(i))).collect();
    let pd = dir.join(CONDITION_FILES[4]);
    let bd = read_ipc(&pd)?;
    let gain = col::<UInt8Array>(&pd, &bd, "gain", None)?;
    let ped = col::<UInt8Array>(&pd, &bd, "ped", Some(gain.len()))?;
    let mut data = Vec::with_capacity(2 * gain.len());
    for i in 0..gain.len() {
        data.push(gain.value(i));
        data.push(ped.value(i));
    }
    let gains = GainCalibration {
        range_and_cols,
        min_ped: meta_f32(&p, &b, "min_ped")?,
        max_ped: meta_f32(&p, &b, "max_ped")?,
        min_gain: meta_f32(&p, &b, "min_gain")?,
        max_gain: meta_f32(&p, &b, "max_gain")?,
        ped_precision: meta_f32(&p, &b, "ped_precision")?,
        gain_precision: meta_f32(&p, &b, "gain_precision")?,
        rows_averaged: meta_u32(&p, &b, "rows_averaged")?,
        n_bins: meta_u32(&p, &b, "n_bins")?,
        dead_flag: meta_u32(&p, &b, "dead_flag")?,
        noisy_flag: meta_u32(&p, &b, "noisy_flag")?,
        data,
    };
    if gains.range_and_cols.iter().any(|&(f, l, _)| f > l || l as usize > gains.data.len()) {
        return Err(DatasetError::damaged(&p, "gain ranges exceed the gain data"));
    }
    // CPE
    let p = dir.join(CONDITION_FILES[5]);
    let b = read_ipc(&p)?;
    let n = Some(NUMBER_OF_MODULES as usize);
    let is_barrel = col::<BooleanArray>(&p, &b, "is_barrel", n)?;
    let is_pos_z = col::<BooleanArray>(&p, &b, "is_pos_z", n)?;
    let layer = col::<UInt16Array>(&p, &b, "layer", n)?;
    let index = col::<UInt16Array>(&p, &b, "index", n)?;
    let raw_id = col::<UInt32Array>(&p, &b, "raw_id", n)?;
    let mut fl: Vec<&Float32Array> = Vec::new();
    for (name, _) in det_float_columns() {
        fl.push(col::<Float32Array>(&p, &b, name, n)?);
    }
    let det = (0..NUMBER_OF_MODULES as usize)
        .map(|i| {
            let v = |k: usize| fl[k].value(i);
            DetParams {
                is_barrel: is_barrel.value(i),
                is_pos_z: is_pos_z.value(i),
                layer: layer.value(i),
                index: index.value(i),
                raw_id: raw_id.value(i),
                shift_x: v(0),
                shift_y: v(1),
                charge_width_x: v(2),
                charge_width_y: v(3),
                x0: v(4),
                y0: v(5),
                z0: v(6),
                sx: [v(7), v(8), v(9)],
                sy: [v(10), v(11), v(12)],
                frame: Frame { px: v(13), py: v(14), pz: v(15), r: [v(16), v(17), v(18), v(19), v(20), v(21), v(22), v(23), v(24)] },
            }
        })
        .collect();
    let common = CommonParams {
        thickness_b: meta_f32(&p, &b, "thickness_b")?,
        thickness_e: meta_f32(&p, &b, "thickness_e")?,
        pitch_x: meta_f32(&p, &b, "pitch_x")?,
        pitch_y: meta_f32(&p, &b, "pitch_y")?,
    };
    let p = dir.join(CONDITION_FILES[6]);
    let b = read_ipc(&p)?;
    let n = Some(NUMBER_OF_LADDERS_IN_BARREL);
    let f = |name: &str| -> Result<Vec<f32>, DatasetError> { Ok(col::<Float32Array>(&p, &b, name, n)?.values().to_vec()) };
    let average_geometry = AverageGeometry {
        ladder_z: f("ladder_z")?,
        ladder_x: f("ladder_x")?,
        ladder_y: f("ladder_y")?,
        ladder_r: f("ladder_r")?,
        ladder_min_z: f("ladder_min_z")?,
        ladder_max_z: f("ladder_max_z")?,
        end_cap_z: [meta_f32(&p, &b, "end_cap_z0")?, meta_f32(&p, &b, "end_cap_z1")?],
    };
    Ok(Conditions { beam_spot, cabling, gains, cpe: CpeParams { common, det, average_geometry }, fed_ids })
}

/// Schema of `raw.arrow`.
pub fn raw_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("event", DataType::UInt32),
        field("fed", DataType::UInt32),
        field("data", DataType::Binary),
    ]))
}

/// The encoded FEDs of one event: (fed id, bytes).
pub type EventFeds = Vec<(u32, Vec<u8>)>;

/// Streaming writer of `raw.arrow`: one record batch per call.
pub struct RawWriter {
    path: PathBuf,
    w: arrow_ipc::writer::FileWriter<BufWriter<File>>,
}

impl RawWriter {
    pub fn create(path: &Path) -> Result<Self, DatasetError> {
        let f = File::create(path).map_err(|e| DatasetError::io(path, e))?;
        let w = arrow_ipc::writer::FileWriter::try_new(BufWriter::new(f), &raw_schema()).map_err(|e| DatasetError::format(path, e))?;
        Ok(RawWriter { path: path.to_path_buf(), w })
    }
    /// Appends events: `(event index, [(fed, bytes)])`, in event order.
    pub fn write(&mut self, events: &[(u32, EventFeds)]) -> Result<(), DatasetError> {
        let n: usize = events.iter().map(|e| e.1.len()).sum();
        let mut ev = Vec::with_capacity(n);
        let mut fed = Vec::with_capacity(n);
        let mut data: Vec<&[u8]> = Vec::with_capacity(n);
        for (i, feds) in events {
            for (f, d) in feds {
                ev.push(*i);
                fed.push(*f);
                data.push(d);
            }
        }
        let b = RecordBatch::try_new(
            raw_schema(),
            vec![u32col!(ev), u32col!(fed), Arc::new(BinaryArray::from_vec(data))],
        )
        .map_err(|e| DatasetError::format(&self.path, e))?;
        self.w.write(&b).map_err(|e| DatasetError::format(&self.path, e))
    }
    pub fn finish(mut self) -> Result<(), DatasetError> {
        self.w.finish().map_err(|e| DatasetError::format(&self.path, e))
    }
}

/// Parquet writers of the truth tables.
pub struct TruthWriter {
    writers: Vec<(PathBuf, parquet::arrow::ArrowWriter<File>, SchemaRef)>,
}

/// Truth file names, in `TruthWriter` order.
pub const TRUTH_FILES: [&str; 6] =
    ["particles.parquet", "vertices.parquet", "simhits.parquet", "pixel_truth.parquet", "digis.parquet", "faults.parquet"];

fn truth_schemas() -> Vec<SchemaRef> {
    use DataType::*;
    let s = |f: &[(&str, DataType)]| Arc::new(Schema::new(f.iter().map(|(n, t)| field(n, t.clone())).collect::<Vec<_>>()));
    vec![
        s(&[
            ("event", UInt32),
            ("id", UInt32),
            ("pdg", Int32),
            ("charge", Int8),
            ("pt", Float32),
            ("eta", Float32),
            ("phi", Float32),
            ("vx", Float32),
            ("vy", Float32),
            ("vz", Float32),
            ("d0", Float32),
            ("z0", Float32),
            ("process", UInt8),
            ("vertex", Int32),
            ("parent", Int32),
        ]),
        s(&[("event", UInt32), ("id", UInt32), ("x", Float32), ("y", Float32), ("z", Float32), ("n_charged", UInt32), ("is_hard", Boolean)]),
        s(&[
            ("event", UInt32),
            ("module", UInt16),
            ("lx", Float32),
            ("ly", Float32),
            ("gx", Float32),
            ("gy", Float32),
            ("gz", Float32),
            ("particle", UInt32),
            ("charge", Float32),
        ]),
        s(&[
            ("event", UInt32),
            ("module", UInt16),
            ("row", UInt16),
            ("col", UInt16),
            ("particle", UInt32),
            ("electrons", Float32),
            ("fraction", Float32),
        ]),
        s(&[("event", UInt32), ("module", UInt16), ("row", UInt16), ("col", UInt16), ("adc", UInt8), ("electrons", Float32)]),
        s(&[("event", UInt32), ("fed", UInt32), ("kind", UInt8), ("index", UInt32), ("value", UInt32)]),
    ]
}

/// Fault kinds in `faults.parquet`.
pub mod fault_kind {
    pub const ERROR_WORD: u8 = 0;
    pub const TRUNCATED: u8 = 1;
    pub const BAD_HEADER: u8 = 2;
    pub const BAD_TRAILER: u8 = 3;
    pub const FLIPPED_BIT: u8 = 4;
}

impl TruthWriter {
    pub fn create(dir: &Path) -> Result<Self, DatasetError> {
        let mut writers = Vec::new();
        for (name, schema) in TRUTH_FILES.iter().zip(truth_schemas()) {
            let mut props = parquet::file::properties::WriterProperties::builder().set_compression(parquet::basic::Compression::SNAPPY);
            // Float columns (positions, charges) are nearly all distinct: a dictionary only costs
            // hashing time before the writer falls back to plain encoding anyway.
            for f in schema.fields() {
                if f.data_type() == &DataType::Float32 {
                    props = props.set_column_dictionary_enabled(parquet::schema::types::ColumnPath::from(f.name().as_str()), false);
                }
            }
            let props = props.build();
            let p = dir.join(name);
            let f = File::create(&p).map_err(|e| DatasetError::io(&p, e))?;
            let w = parquet::arrow::ArrowWriter::try_new(f, schema.clone(), Some(props)).map_err(|e| DatasetError::format(&p, e))?;
            writers.push((p, w, schema));
        }
        Ok(TruthWriter { writers })
    }

    /// Appends the truth of consecutive events.
    pub fn write(&mut self, events: &[(u32, &Event, &Faults)]) -> Result<(), DatasetError> {
        macro_rules! gather {
            ($iter:expr, $($f:expr => $arr:ident),+) => {{
                vec![$(Arc::new($arr::from($iter.clone().map($f).collect::<Vec<_>>())) as ArrayRef),+]
            }};
        }
        let parts = events.iter().flat_map(|(i, e, _)| e.particles.iter().map(move |p| (*i, p)));
        let c0 = gather!(parts,
            |(i, _)| i => UInt32Array, |(_, p)| p.id => UInt32Array, |(_, p)| p.pdg => Int32Array,
            |(_, p)| p.charge => Int8Array, |(_, p)| p.pt => Float32Array, |(_, p)| p.eta => Float32Array,
            |(_, p)| p.phi => Float32Array, |(_, p)| p.vx => Float32Array, |(_, p)| p.vy => Float32Array,
            |(_, p)| p.vz => Float32Array, |(_, p)| p.d0 => Float32Array, |(_, p)| p.z0 => Float32Array,
            |(_, p)| p.process => UInt8Array, |(_, p)| p.vertex => Int32Array, |(_, p)| p.parent => Int32Array);
        let verts = events.iter().flat_map(|(i, e, _)| e.vertices.iter().map(move |v| (*i, v)));
        let c1 = gather!(verts,
            |(i, _)| i => UInt32Array, |(_, v)| v.id => UInt32Array, |(_, v)| v.x => Float32Array,
            |(_, v)| v.y => Float32Array, |(_, v)| v.z => Float32Array, |(_, v)| v.n_charged => UInt32Array,
            |(_, v)| v.is_hard => BooleanArray);
        let sh = events.iter().flat_map(|(i, e, _)| e.simhits.iter().map(move |h| (*i, h)));
        let c2 = gather!(sh,
            |(i, _)| i => UInt32Array, |(_, h)| h.module => UInt16Array, |(_, h)| h.lx => Float32Array,
            |(_, h)| h.ly => Float32Array, |(_, h)| h.gx => Float32Array, |(_, h)| h.gy => Float32Array,
            |(_, h)| h.gz => Float32Array, |(_, h)| h.particle => UInt32Array, |(_, h)| h.charge => Float32Array);
        let pt = events.iter().flat_map(|(i, e, _)| e.pixel_truth.iter().map(move |t| (*i, t)));
        let c3 = gather!(pt,
            |(i, _)| i => UInt32Array, |(_, t)| t.module => UInt16Array, |(_, t)| t.row => UInt16Array,
            |(_, t)| t.col => UInt16Array, |(_, t)| t.particle => UInt32Array, |(_, t)| t.electrons => Float32Array,
            |(_, t)| t.fraction => Float32Array);
        let dg = events.iter().flat_map(|(i, e, _)| e.digis.iter().map(move |d| (*i, d)));
        let c4 = gather!(dg,
            |(i, _)| i => UInt32Array, |(_, d)| d.module => UInt16Array, |(_, d)| d.row => UInt16Array,
            |(_, d)| d.col => UInt16Array, |(_, d)| d.adc => UInt8Array, |(_, d)| d.electrons => Float32Array);
        let mut fl: Vec<(u32, u32, u8, u32, u32)> = Vec::new();
        for (i, _, f) in events {
            use fault_kind::*;
            fl.extend(f.error_words.iter().map(|&(fed, k, w)| (*i, fed, ERROR_WORD, k, w)));
            fl.extend(f.truncated.iter().map(|&fed| (*i, fed, TRUNCATED, 0, 0)));
            fl.extend(f.bad_header.iter().map(|&fed| (*i, fed, BAD_HEADER, 0, 0)));
            fl.extend(f.bad_trailer.iter().map(|&fed| (*i, fed, BAD_TRAILER, 0, 0)));
            fl.extend(f.flipped_bits.iter().map(|&(fed, k, b)| (*i, fed, FLIPPED_BIT, k, b)));
        }
        let fi = fl.iter();
        let c5 = gather!(fi, |t| t.0 => UInt32Array, |t| t.1 => UInt32Array, |t| t.2 => UInt8Array, |t| t.3 => UInt32Array, |t| t.4 => UInt32Array);
        for ((p, w, schema), cols) in self.writers.iter_mut().zip([c0, c1, c2, c3, c4, c5]) {
            let b = RecordBatch::try_new(schema.clone(), cols).map_err(|e| DatasetError::format(&*p, e))?;
            w.write(&b).map_err(|e| DatasetError::format(&*p, e))?;
        }
        Ok(())
    }

    pub fn finish(self) -> Result<(), DatasetError> {
        for (p, w, _) in self.writers {
            w.close().map_err(|e| DatasetError::format(&p, e))?;
        }
        Ok(())
    }
}

/// A read-only dataset: the manifest, the conditions and the memory-mapped raw data.
pub struct Dataset {
    dir: PathBuf,
    manifest: Manifest,
    conditions: Conditions,
    batches: Vec<RecordBatch>,
    /// Per event: (batch, first row, end row).
    index: Vec<(u32, u32, u32)>,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset").field("dir", &self.dir).field("events", &self.index.len()).finish_non_exhaustive()
    }
}

/// Datasets whose files this process has hashed, by [`verification_key`].
static VERIFIED: std::sync::Mutex<std::collections::BTreeSet<String>> = std::sync::Mutex::new(std::collections::BTreeSet::new());

/// What identifies hashed files: the directory, the manifest's text and each listed file's
/// size and modification time (`None` when one cannot be read: then always hash).
fn verification_key(dir: &Path, manifest_text: &str, manifest: &Manifest) -> Option<String> {
    let mut key = format!("{}\n{manifest_text}", std::fs::canonicalize(dir).ok()?.display());
    for name in manifest.files.keys().filter(|n| read_by_reconstruction(n)) {
        let m = std::fs::metadata(dir.join(name)).ok()?;
        key.push_str(&format!("\n{name} {} {:?}", m.len(), m.modified().ok()?));
    }
    Some(key)
}

fn verified_before(dir: &Path, text: &str, manifest: &Manifest) -> bool {
    verification_key(dir, text, manifest).is_some_and(|k| VERIFIED.lock().unwrap_or_else(|p| p.into_inner()).contains(&k))
}

fn remember_verified(dir: &Path, text: &str, manifest: &Manifest) {
    if let Some(k) = verification_key(dir, text, manifest) {
        VERIFIED.lock().unwrap_or_else(|p| p.into_inner()).insert(k);
    }
}

/// Whether reconstruction (`Dataset::open`) reads the dataset file `name`: raw data and
/// conditions, not the truth.
fn read_by_reconstruction(name: &str) -> bool {
    name == "raw.arrow" || CONDITION_FILES.contains(&name)
}

fn check_file(dir: &Path, name: &str, expected: &str) -> Result<(), DatasetError> {
    let p = dir.join(name);
    if !p.exists() {
        return Err(DatasetError::Format {
            file: p,
            what: format!("missing (the manifest lists it): {}", crate::error::DAMAGED_HINT),
        });
    }
    let actual = sha256_file(&p)?;
    if actual != expected {
        return Err(DatasetError::Checksum { file: p, expected: expected.to_string(), actual });
    }
    Ok(())
}

/// Verifies the files `names` of the dataset in `dir` against its manifest (for readers of
/// the truth files, which `Dataset::open` does not hash): a file missing, absent from the
/// manifest or with another checksum is an error naming it and saying what to do.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let opts = quiver_datasets::GenerateOptions { events: 1, pileup: 0.0, output: dir.path().join("ds"), ..Default::default() };
/// quiver_datasets::generate(&opts).unwrap();
/// quiver_datasets::format::verify_files(&opts.output, &["simhits.parquet"]).unwrap();
/// std::fs::remove_file(opts.output.join("simhits.parquet")).unwrap();
/// let e = quiver_datasets::format::verify_files(&opts.output, &["simhits.parquet"]).unwrap_err().to_string();
/// assert!(e.contains("simhits.parquet: missing") && e.contains("quiver generate"), "{e}");
/// ```
pub fn verify_files(dir: &Path, names: &[&str]) -> Result<(), DatasetError> {
    let mp = dir.join("manifest.toml");
    let text = std::fs::read_to_string(&mp).map_err(|e| DatasetError::io(&mp, e))?;
    let manifest: Manifest = toml::from_str(&text).map_err(|e| DatasetError::damaged(&mp, e))?;
    for name in names {
        let expected = manifest.files.get(*name).ok_or_else(|| DatasetError::damaged(&mp, format!("no checksum for `{name}`")))?;
        check_file(dir, name, expected)?;
    }
    Ok(())
}

/// The FEDs of one event: (fed id, bytes) borrowed from the memory-mapped file.
pub use quiver_formats::raw::RawEvent;

impl Dataset {
    /// Opens a dataset directory, verifying every file against the manifest's SHA-256. A
    /// process hashes the files once: a later open of the same directory whose manifest and
    /// files (size, modification time) are unchanged skips it (0.3 s for 100 events at
    /// ⟨PU⟩ 50; the partitions a Dask worker runs open the same dataset again and again).
    pub fn open(dir: &Path) -> Result<Dataset, DatasetError> {
        Self::open_with(dir, true)
    }

    /// Opens without hashing the files (faster for large datasets); structure is still checked.
    pub fn open_unverified(dir: &Path) -> Result<Dataset, DatasetError> {
        Self::open_with(dir, false)
    }

    fn open_with(dir: &Path, verify: bool) -> Result<Dataset, DatasetError> {
        let mp = dir.join("manifest.toml");
        let text = std::fs::read_to_string(&mp).map_err(|e| DatasetError::io(&mp, e))?;
        let manifest: Manifest = toml::from_str(&text).map_err(|e| DatasetError::damaged(&mp, e))?;
        if manifest.format_version != FORMAT_VERSION {
            return Err(DatasetError::format(&mp, format!("format version {} (this reader knows {FORMAT_VERSION}): {}", manifest.format_version, crate::error::DAMAGED_HINT)));
        }
        for required in ["raw.arrow"].iter().chain(CONDITION_FILES.iter()) {
            if !manifest.files.contains_key(*required) {
                return Err(DatasetError::damaged(&mp, format!("no checksum for `{required}`")));
            }
        }
        if verify && !verified_before(dir, &text, &manifest) {
            // What reconstruction reads; the truth files are verified by their readers
            // (`verify_files`), so a dataset without them still runs.
            for (name, expected) in manifest.files.iter().filter(|(n, _)| read_by_reconstruction(n)) {
                check_file(dir, name, expected)?;
            }
        }
        if verify {
            remember_verified(dir, &text, &manifest);
        }
        let conditions = read_conditions(dir)?;
        let rp = dir.join("raw.arrow");
        let batches = map_ipc_file(&rp, &raw_schema())?;
        // index events; rows must be sorted by (event, fed) and cover 0..events
        let mut index: Vec<(u32, u32, u32)> = Vec::with_capacity(manifest.events as usize);
        let mut prev: Option<(u32, u32)> = None;
        for (bi, b) in batches.iter().enumerate() {
            let ev = col::<UInt32Array>(&rp, b, "event", None)?;
            let fed = col::<UInt32Array>(&rp, b, "fed", None)?;
            col::<BinaryArray>(&rp, b, "data", None)?;
            for r in 0..b.num_rows() {
                let key = (ev.value(r), fed.value(r));
                if prev.is_some_and(|p| p >= key) {
                    return Err(DatasetError::damaged(&rp, format!("rows not sorted by (event, fed) at event {} fed {}", key.0, key.1)));
                }
                if prev.map(|p| p.0) != Some(key.0) {
                    if key.0 as usize != index.len() {
                        return Err(DatasetError::damaged(&rp, format!("event {} follows event {:?}", key.0, prev.map(|p| p.0))));
                    }
                    index.push((bi as u32, r as u32, r as u32 + 1));
                } else {
                    let last = index.last_mut().expect("an event");
                    if last.0 != bi as u32 {
                        return Err(DatasetError::damaged(&rp, format!("event {} spans two record batches", key.0)));
                    }
                    last.2 = r as u32 + 1;
                }
                prev = Some(key);
            }
        }
        if index.len() != manifest.events as usize {
            return Err(DatasetError::damaged(&rp, format!("{} events, manifest says {}", index.len(), manifest.events)));
        }
        Ok(Dataset { dir: dir.to_path_buf(), manifest, conditions, batches, index })
    }

    /// Number of events.
    pub fn n_events(&self) -> usize {
        self.index.len()
    }

    /// The dataset directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The conditions (read from the IPC files).
    pub fn conditions(&self) -> &Conditions {
        &self.conditions
    }

    /// The FEDs of event `i`, borrowed from the mapped file without copying.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let opts = quiver_datasets::GenerateOptions {
    ///     events: 2, pileup: 0.0, output: dir.path().join("ds"), ..Default::default()
    /// };
    /// quiver_datasets::generate(&opts).unwrap();
    /// let ds = quiver_datasets::Dataset::open(&opts.output).unwrap();
    /// let feds = ds.raw_event(1).unwrap();
    /// assert_eq!(feds.len(), ds.conditions().fed_ids.len());
    /// assert!(feds.iter().all(|(_, bytes)| bytes.len() % 8 == 0 && bytes.len() >= 16));
    /// assert!(ds.raw_event(2).is_err());
    /// ```
    pub fn raw_event(&self, i: usize) -> Result<RawEvent<'_>, DatasetError> {
        let &(b, s, e) = self.index.get(i).ok_or(DatasetError::EventOutOfRange { index: i, n_events: self.index.len() })?;
        let batch = &self.batches[b as usize];
        let fed = batch.column(1).as_any().downcast_ref::<UInt32Array>().expect("checked at open");
        let data = batch.column(2).as_any().downcast_ref::<BinaryArray>().expect("checked at open");
        Ok((s..e).map(|r| (fed.value(r as usize), data.value(r as usize))).collect())
    }

    /// The FEDs of every event in `range`.
    pub fn raw_events(&self, range: std::ops::Range<usize>) -> Result<Vec<RawEvent<'_>>, DatasetError> {
        range.map(|i| self.raw_event(i)).collect()
    }
}

/// Memory-maps an Arrow IPC file and decodes its record batches without copying the data
/// (each checked in full: see `ipc::decode_file`).
fn map_ipc_file(path: &Path, expected: &SchemaRef) -> Result<Vec<RecordBatch>, DatasetError> {
    let f = File::open(path).map_err(|e| DatasetError::io(path, e))?;
    let len = f.metadata().map_err(|e| DatasetError::io(path, e))?.len();
    if len == 0 {
        // mapping an empty file fails with EINVAL, which says nothing useful
        return Err(DatasetError::damaged(path, "empty file (0 bytes)"));
    }
    // SAFETY: `Mmap::map` is unsafe because another process may change the file while it is
    // mapped; a dataset is read-only by contract (written once by `quiver generate`, its
    // checksums in the manifest), and the mapping is owned by the buffer built from it.
    let mmap = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| DatasetError::io(path, e))?;
    let len = mmap.len();
    let ptr = NonNull::new(mmap.as_ptr() as *mut u8).ok_or_else(|| DatasetError::damaged(path, "mapping returned a null pointer"))?;
    // SAFETY: `ptr` points to `len` initialised, immutable bytes that stay mapped as long as
    // `mmap` lives; the buffer owns `mmap` (the `Arc`) and frees it with its last clone.
    let buffer = unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(mmap)) };
    let (schema, batches) = crate::ipc::decode_file(path, &buffer)?;
    if schema.fields() != expected.fields() {
        let names: Vec<String> = schema.fields().iter().map(|f| format!("{}: {}", f.name(), f.data_type())).collect();
        return Err(DatasetError::damaged(path, format!("unexpected columns [{}]", names.join(", "))));
    }
    Ok(batches)
}

/// A dataset is a source of raw data for the reconstruction's `read_raw` step.
impl quiver_formats::raw::RawSource for Dataset {
    fn n_events(&self) -> usize {
        Dataset::n_events(self)
    }
    fn raw_events(&self, range: std::ops::Range<usize>) -> Result<Vec<RawEvent<'_>>, String> {
        Dataset::raw_events(self, range).map_err(|e| e.to_string())
    }
}
