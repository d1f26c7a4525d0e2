//! The conditions as files of a dataset: one Arrow IPC file per condition kind under
//! `conditions/` (columns and metadata in docs/datasets.md), their writer (the generator's)
//! and their reader (the reconstruction's, through the dataset; the truth report's for the
//! beam spot).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float32Array, Int32Array, RecordBatch, UInt16Array, UInt32Array,
    UInt8Array,
};
use arrow_schema::{DataType, Field, Schema};

use crate::conditions::{
    AverageGeometry, BeamSpot, CablingMap, CommonParams, Conditions, CpeParams, DetParams, Frame,
    GainCalibration, CABLING_MAX_SIZE, MAX_NUM_MODULES,
};
use crate::error::DatasetError;
use crate::ipc::column as col;
use crate::topology::{NUMBER_OF_LADDERS_IN_BARREL, NUMBER_OF_MODULES};

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
        n => Err(DatasetError::damaged(
            path,
            format!("{n} record batches, expected one"),
        )),
    }
}

fn batch(
    path: &Path,
    fields: Vec<Field>,
    cols: Vec<ArrayRef>,
    meta: HashMap<String, String>,
) -> Result<RecordBatch, DatasetError> {
    let schema = Arc::new(Schema::new_with_metadata(fields, meta));
    RecordBatch::try_new(schema, cols).map_err(|e| DatasetError::format(path, e))
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
    let names = [
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
    ];
    let vals = [
        bs.x,
        bs.y,
        bs.z,
        bs.sigma_z,
        bs.beam_width_x,
        bs.beam_width_y,
        bs.dxdz,
        bs.dydz,
        bs.emittance_x,
        bs.emittance_y,
        bs.beta_star,
    ];
    let b = batch(
        &p,
        names.iter().map(|n| field(n, DataType::Float32)).collect(),
        vals.iter().map(|v| f32col!(vec![*v])).collect(),
        HashMap::new(),
    )?;
    write_ipc(&p, &b)?;
    // fed ids
    let p = dir.join(CONDITION_FILES[1]);
    let b = batch(
        &p,
        vec![field("fed", DataType::UInt32)],
        vec![u32col!(c.fed_ids.clone())],
        HashMap::new(),
    )?;
    write_ipc(&p, &b)?;
    // cabling
    let p = dir.join(CONDITION_FILES[2]);
    let m = &c.cabling;
    let mut fields: Vec<Field> = ["fed", "link", "roc", "raw_id", "roc_in_det", "module_id"]
        .iter()
        .map(|n| field(n, DataType::UInt32))
        .collect();
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
    let b = batch(
        &p,
        fields,
        cols,
        HashMap::from([("size".to_string(), m.size.to_string())]),
    )?;
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
        vec![
            field("first", DataType::UInt32),
            field("last", DataType::UInt32),
            field("n_cols", DataType::Int32),
        ],
        vec![
            u32col!(g.range_and_cols.iter().map(|r| r.0).collect::<Vec<_>>()),
            u32col!(g.range_and_cols.iter().map(|r| r.1).collect::<Vec<_>>()),
            Arc::new(Int32Array::from(
                g.range_and_cols.iter().map(|r| r.2).collect::<Vec<_>>(),
            )),
        ],
        meta,
    )?;
    write_ipc(&p, &b)?;
    let p = dir.join(CONDITION_FILES[4]);
    let b = batch(
        &p,
        vec![
            field("gain", DataType::UInt8),
            field("ped", DataType::UInt8),
        ],
        vec![
            Arc::new(UInt8Array::from(
                g.data.iter().step_by(2).copied().collect::<Vec<_>>(),
            )),
            Arc::new(UInt8Array::from(
                g.data
                    .iter()
                    .skip(1)
                    .step_by(2)
                    .copied()
                    .collect::<Vec<_>>(),
            )),
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
        Arc::new(BooleanArray::from(
            d.iter().map(|x| x.is_barrel).collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            d.iter().map(|x| x.is_pos_z).collect::<Vec<_>>(),
        )),
        Arc::new(UInt16Array::from(
            d.iter().map(|x| x.layer).collect::<Vec<_>>(),
        )),
        Arc::new(UInt16Array::from(
            d.iter().map(|x| x.index).collect::<Vec<_>>(),
        )),
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
        [
            "ladder_z",
            "ladder_x",
            "ladder_y",
            "ladder_r",
            "ladder_min_z",
            "ladder_max_z",
        ]
        .iter()
        .map(|n| field(n, DataType::Float32))
        .collect(),
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
    let g = |n: &str| -> Result<f32, DatasetError> {
        Ok(col::<Float32Array>(&p, &b, n, Some(1))?.value(0))
    };
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
    if fed_ids.iter().any(|&f| !(1200..1350).contains(&f))
        || fed_ids.windows(2).any(|w| w[0] >= w[1])
    {
        return Err(DatasetError::damaged(
            &p,
            "FED ids must be ascending within 1200..1349",
        ));
    }
    // cabling
    let p = dir.join(CONDITION_FILES[2]);
    let b = read_ipc(&p)?;
    let n = Some(CABLING_MAX_SIZE);
    let u = |name: &str| -> Result<Vec<u32>, DatasetError> {
        Ok(col::<UInt32Array>(&p, &b, name, n)?.values().to_vec())
    };
    let cabling = CablingMap {
        fed: u("fed")?,
        link: u("link")?,
        roc: u("roc")?,
        raw_id: u("raw_id")?,
        roc_in_det: u("roc_in_det")?,
        module_id: u("module_id")?,
        bad_rocs: col::<UInt8Array>(&p, &b, "bad_rocs", n)?.values().to_vec(),
        mod_to_unp: col::<UInt8Array>(&p, &b, "mod_to_unp", n)?
            .values()
            .to_vec(),
        size: meta_u32(&p, &b, "size")?,
    };
    // gains
    let p = dir.join(CONDITION_FILES[3]);
    let b = read_ipc(&p)?;
    let n = Some(MAX_NUM_MODULES);
    let first = col::<UInt32Array>(&p, &b, "first", n)?;
    let last = col::<UInt32Array>(&p, &b, "last", n)?;
    let ncols = col::<Int32Array>(&p, &b, "n_cols", n)?;
    let range_and_cols = first
        .values()
        .iter()
        .zip(last.values().iter())
        .zip(ncols.values().iter())
        .map(|((&f, &l), &c)| (f, l, c))
        .collect();
    let pd = dir.join(CONDITION_FILES[4]);
    let bd = read_ipc(&pd)?;
    let gain = col::<UInt8Array>(&pd, &bd, "gain", None)?;
    let ped = col::<UInt8Array>(&pd, &bd, "ped", Some(gain.len()))?;
    // Interleaved (gain, pedestal) per bin, over the value slices: indexing the arrays element
    // by element made this loop 55 % of opening a dataset.
    let mut data = vec![0u8; 2 * gain.len()];
    for (d, (&g, &p)) in data
        .chunks_exact_mut(2)
        .zip(gain.values().iter().zip(ped.values().iter()))
    {
        d.copy_from_slice(&[g, p]);
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
    if gains
        .range_and_cols
        .iter()
        .any(|&(f, l, _)| f > l || l as usize > gains.data.len())
    {
        return Err(DatasetError::damaged(
            &p,
            "gain ranges exceed the gain data",
        ));
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
                frame: Frame {
                    px: v(13),
                    py: v(14),
                    pz: v(15),
                    r: [
                        v(16),
                        v(17),
                        v(18),
                        v(19),
                        v(20),
                        v(21),
                        v(22),
                        v(23),
                        v(24),
                    ],
                },
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
    let f = |name: &str| -> Result<Vec<f32>, DatasetError> {
        Ok(col::<Float32Array>(&p, &b, name, n)?.values().to_vec())
    };
    let average_geometry = AverageGeometry {
        ladder_z: f("ladder_z")?,
        ladder_x: f("ladder_x")?,
        ladder_y: f("ladder_y")?,
        ladder_r: f("ladder_r")?,
        ladder_min_z: f("ladder_min_z")?,
        ladder_max_z: f("ladder_max_z")?,
        end_cap_z: [
            meta_f32(&p, &b, "end_cap_z0")?,
            meta_f32(&p, &b, "end_cap_z1")?,
        ],
    };
    Ok(Conditions {
        beam_spot,
        cabling,
        gains,
        cpe: CpeParams {
            common,
            det,
            average_geometry,
        },
        fed_ids,
    })
}
