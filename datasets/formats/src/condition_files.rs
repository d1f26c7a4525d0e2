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

use crate::batch::BatchBuilder;
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

/// A condition table of `fields` (with `meta`) from its columns given by name: a name or
/// type that does not match the fields is an error naming the file and the column.
fn batch<'a>(
    path: &Path,
    fields: Vec<Field>,
    columns: impl IntoIterator<Item = (&'a str, ArrayRef)>,
    meta: HashMap<String, String>,
) -> Result<RecordBatch, DatasetError> {
    let schema = Arc::new(Schema::new_with_metadata(fields, meta));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut b = BatchBuilder::new(name, &schema);
    for (column, array) in columns {
        b = b
            .set(column, array)
            .map_err(|e| DatasetError::format(path, e))?;
    }
    b.finish().map_err(|e| DatasetError::format(path, e))
}

/// `fields` of one type.
fn fields_of(names: &[&str], dt: DataType) -> Vec<Field> {
    names.iter().map(|n| field(n, dt.clone())).collect()
}

fn metadata<const N: usize>(pairs: [(&str, String); N]) -> HashMap<String, String> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
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
macro_rules! u8col {
    ($v:expr) => {
        Arc::new(UInt8Array::from($v)) as ArrayRef
    };
}

/// Writes the conditions as Arrow IPC files under `dir/conditions/`.
pub fn write_conditions(dir: &Path, c: &Conditions) -> Result<(), DatasetError> {
    let cdir = dir.join("conditions");
    std::fs::create_dir_all(&cdir).map_err(|e| DatasetError::io(&cdir, e))?;
    let path = |i: usize| dir.join(CONDITION_FILES[i]);
    write_beam_spot(&path(0), &c.beam_spot)?;
    let fed_ids = batch(
        &path(1),
        vec![field("fed", DataType::UInt32)],
        [("fed", u32col!(c.fed_ids.clone()))],
        HashMap::new(),
    )?;
    write_ipc(&path(1), &fed_ids)?;
    write_cabling(&path(2), &c.cabling)?;
    write_gains(&path(3), &path(4), &c.gains)?;
    write_cpe_det(&path(5), &c.cpe)?;
    write_ladders(&path(6), &c.cpe.average_geometry)
}

const BEAM_SPOT_COLUMNS: [&str; 11] = [
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

fn write_beam_spot(p: &Path, bs: &BeamSpot) -> Result<(), DatasetError> {
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
        p,
        fields_of(&BEAM_SPOT_COLUMNS, DataType::Float32),
        BEAM_SPOT_COLUMNS
            .iter()
            .zip(vals)
            .map(|(&n, v)| (n, f32col!(vec![v]))),
        HashMap::new(),
    )?;
    write_ipc(p, &b)
}

fn write_cabling(p: &Path, m: &CablingMap) -> Result<(), DatasetError> {
    let mut fields = fields_of(
        &["fed", "link", "roc", "raw_id", "roc_in_det", "module_id"],
        DataType::UInt32,
    );
    fields.push(field("bad_rocs", DataType::UInt8));
    fields.push(field("mod_to_unp", DataType::UInt8));
    let cols = [
        ("fed", u32col!(m.fed.clone())),
        ("link", u32col!(m.link.clone())),
        ("roc", u32col!(m.roc.clone())),
        ("raw_id", u32col!(m.raw_id.clone())),
        ("roc_in_det", u32col!(m.roc_in_det.clone())),
        ("module_id", u32col!(m.module_id.clone())),
        ("bad_rocs", u8col!(m.bad_rocs.clone())),
        ("mod_to_unp", u8col!(m.mod_to_unp.clone())),
    ];
    let b = batch(p, fields, cols, metadata([("size", m.size.to_string())]))?;
    write_ipc(p, &b)
}

/// The gains: per-module ranges and the scalars (`ranges`), then the code pairs (`data`).
fn write_gains(ranges: &Path, data: &Path, g: &GainCalibration) -> Result<(), DatasetError> {
    let meta = metadata([
        ("min_ped", g.min_ped.to_string()),
        ("max_ped", g.max_ped.to_string()),
        ("min_gain", g.min_gain.to_string()),
        ("max_gain", g.max_gain.to_string()),
        ("ped_precision", g.ped_precision.to_string()),
        ("gain_precision", g.gain_precision.to_string()),
        ("rows_averaged", g.rows_averaged.to_string()),
        ("n_bins", g.n_bins.to_string()),
        ("dead_flag", g.dead_flag.to_string()),
        ("noisy_flag", g.noisy_flag.to_string()),
    ]);
    let r = &g.range_and_cols;
    let b = batch(
        ranges,
        vec![
            field("first", DataType::UInt32),
            field("last", DataType::UInt32),
            field("n_cols", DataType::Int32),
        ],
        [
            ("first", u32col!(r.iter().map(|r| r.0).collect::<Vec<_>>())),
            ("last", u32col!(r.iter().map(|r| r.1).collect::<Vec<_>>())),
            (
                "n_cols",
                Arc::new(Int32Array::from(r.iter().map(|r| r.2).collect::<Vec<_>>())) as ArrayRef,
            ),
        ],
        meta,
    )?;
    write_ipc(ranges, &b)?;
    let gain = g.data.iter().step_by(2).copied().collect::<Vec<_>>();
    let ped = g
        .data
        .iter()
        .skip(1)
        .step_by(2)
        .copied()
        .collect::<Vec<_>>();
    let b = batch(
        data,
        fields_of(&["gain", "ped"], DataType::UInt8),
        [("gain", u8col!(gain)), ("ped", u8col!(ped))],
        HashMap::new(),
    )?;
    write_ipc(data, &b)
}

/// The CPE parameters per module, the common ones as metadata.
fn write_cpe_det(p: &Path, cpe: &CpeParams) -> Result<(), DatasetError> {
    let d = &cpe.det;
    let fget = |f: &dyn Fn(&DetParams) -> f32| f32col!(d.iter().map(f).collect::<Vec<_>>());
    let mut fields = vec![
        field("is_barrel", DataType::Boolean),
        field("is_pos_z", DataType::Boolean),
        field("layer", DataType::UInt16),
        field("index", DataType::UInt16),
        field("raw_id", DataType::UInt32),
    ];
    let bools = |f: fn(&DetParams) -> bool| {
        Arc::new(BooleanArray::from(d.iter().map(f).collect::<Vec<_>>())) as ArrayRef
    };
    let u16s = |f: fn(&DetParams) -> u16| {
        Arc::new(UInt16Array::from(d.iter().map(f).collect::<Vec<_>>())) as ArrayRef
    };
    let mut cols = vec![
        ("is_barrel", bools(|x| x.is_barrel)),
        ("is_pos_z", bools(|x| x.is_pos_z)),
        ("layer", u16s(|x| x.layer)),
        ("index", u16s(|x| x.index)),
        (
            "raw_id",
            u32col!(d.iter().map(|x| x.raw_id).collect::<Vec<_>>()),
        ),
    ];
    for (name, v) in det_float_columns() {
        fields.push(field(name, DataType::Float32));
        cols.push((name, fget(&|x: &DetParams| v(x))));
    }
    let cm = &cpe.common;
    let meta = metadata([
        ("thickness_b", cm.thickness_b.to_string()),
        ("thickness_e", cm.thickness_e.to_string()),
        ("pitch_x", cm.pitch_x.to_string()),
        ("pitch_y", cm.pitch_y.to_string()),
    ]);
    let b = batch(p, fields, cols, meta)?;
    write_ipc(p, &b)
}

const LADDER_COLUMNS: [&str; 6] = [
    "ladder_z",
    "ladder_x",
    "ladder_y",
    "ladder_r",
    "ladder_min_z",
    "ladder_max_z",
];

/// The average geometry of the barrel ladders.
fn write_ladders(p: &Path, ag: &AverageGeometry) -> Result<(), DatasetError> {
    let b = batch(
        p,
        fields_of(&LADDER_COLUMNS, DataType::Float32),
        [
            ("ladder_z", f32col!(ag.ladder_z.clone())),
            ("ladder_x", f32col!(ag.ladder_x.clone())),
            ("ladder_y", f32col!(ag.ladder_y.clone())),
            ("ladder_r", f32col!(ag.ladder_r.clone())),
            ("ladder_min_z", f32col!(ag.ladder_min_z.clone())),
            ("ladder_max_z", f32col!(ag.ladder_max_z.clone())),
        ],
        metadata([
            ("end_cap_z0", ag.end_cap_z[0].to_string()),
            ("end_cap_z1", ag.end_cap_z[1].to_string()),
        ]),
    )?;
    write_ipc(p, &b)
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
    let path = |i: usize| dir.join(CONDITION_FILES[i]);
    let beam_spot = read_beam_spot(&path(0))?;
    let fed_ids = read_fed_ids(&path(1))?;
    let cabling = read_cabling(&path(2))?;
    let gains = read_gains(&path(3), &path(4))?;
    let (common, det) = read_cpe_det(&path(5))?;
    let average_geometry = read_ladders(&path(6))?;
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

fn read_beam_spot(p: &Path) -> Result<BeamSpot, DatasetError> {
    let b = read_ipc(p)?;
    let g = |n: &str| -> Result<f32, DatasetError> {
        Ok(col::<Float32Array>(p, &b, n, Some(1))?.value(0))
    };
    Ok(BeamSpot {
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
    })
}

fn read_fed_ids(p: &Path) -> Result<Vec<u32>, DatasetError> {
    let b = read_ipc(p)?;
    let fed_ids = col::<UInt32Array>(p, &b, "fed", None)?.values().to_vec();
    if fed_ids.iter().any(|&f| !(1200..1350).contains(&f))
        || fed_ids.windows(2).any(|w| w[0] >= w[1])
    {
        return Err(DatasetError::damaged(
            p,
            "FED ids must be ascending within 1200..1349",
        ));
    }
    Ok(fed_ids)
}

fn read_cabling(p: &Path) -> Result<CablingMap, DatasetError> {
    let b = read_ipc(p)?;
    let n = Some(CABLING_MAX_SIZE);
    let u = |name: &str| -> Result<Vec<u32>, DatasetError> {
        Ok(col::<UInt32Array>(p, &b, name, n)?.values().to_vec())
    };
    Ok(CablingMap {
        fed: u("fed")?,
        link: u("link")?,
        roc: u("roc")?,
        raw_id: u("raw_id")?,
        roc_in_det: u("roc_in_det")?,
        module_id: u("module_id")?,
        bad_rocs: col::<UInt8Array>(p, &b, "bad_rocs", n)?.values().to_vec(),
        mod_to_unp: col::<UInt8Array>(p, &b, "mod_to_unp", n)?.values().to_vec(),
        size: meta_u32(p, &b, "size")?,
    })
}

/// The gains: per-module ranges and scalars (`p`), code pairs (`pd`).
fn read_gains(p: &Path, pd: &Path) -> Result<GainCalibration, DatasetError> {
    let b = read_ipc(p)?;
    let n = Some(MAX_NUM_MODULES);
    let first = col::<UInt32Array>(p, &b, "first", n)?;
    let last = col::<UInt32Array>(p, &b, "last", n)?;
    let ncols = col::<Int32Array>(p, &b, "n_cols", n)?;
    let range_and_cols = first
        .values()
        .iter()
        .zip(last.values().iter())
        .zip(ncols.values().iter())
        .map(|((&f, &l), &c)| (f, l, c))
        .collect();
    let bd = read_ipc(pd)?;
    let gain = col::<UInt8Array>(pd, &bd, "gain", None)?;
    let ped = col::<UInt8Array>(pd, &bd, "ped", Some(gain.len()))?;
    // Interleaved (gain, pedestal) per bin, over the value slices: indexing the arrays element
    // by element made this loop most of the time of opening a dataset.
    let mut data = vec![0u8; 2 * gain.len()];
    for (d, (&g, &p)) in data
        .chunks_exact_mut(2)
        .zip(gain.values().iter().zip(ped.values().iter()))
    {
        d.copy_from_slice(&[g, p]);
    }
    let gains = GainCalibration {
        range_and_cols,
        min_ped: meta_f32(p, &b, "min_ped")?,
        max_ped: meta_f32(p, &b, "max_ped")?,
        min_gain: meta_f32(p, &b, "min_gain")?,
        max_gain: meta_f32(p, &b, "max_gain")?,
        ped_precision: meta_f32(p, &b, "ped_precision")?,
        gain_precision: meta_f32(p, &b, "gain_precision")?,
        rows_averaged: meta_u32(p, &b, "rows_averaged")?,
        n_bins: meta_u32(p, &b, "n_bins")?,
        dead_flag: meta_u32(p, &b, "dead_flag")?,
        noisy_flag: meta_u32(p, &b, "noisy_flag")?,
        data,
    };
    if gains
        .range_and_cols
        .iter()
        .any(|&(f, l, _)| f > l || l as usize > gains.data.len())
    {
        return Err(DatasetError::damaged(p, "gain ranges exceed the gain data"));
    }
    Ok(gains)
}

/// The CPE parameters: the common ones (metadata) and those of every module.
fn read_cpe_det(p: &Path) -> Result<(CommonParams, Vec<DetParams>), DatasetError> {
    let b = read_ipc(p)?;
    let n = Some(NUMBER_OF_MODULES as usize);
    let is_barrel = col::<BooleanArray>(p, &b, "is_barrel", n)?;
    let is_pos_z = col::<BooleanArray>(p, &b, "is_pos_z", n)?;
    let layer = col::<UInt16Array>(p, &b, "layer", n)?;
    let index = col::<UInt16Array>(p, &b, "index", n)?;
    let raw_id = col::<UInt32Array>(p, &b, "raw_id", n)?;
    let mut fl: Vec<&Float32Array> = Vec::new();
    for (name, _) in det_float_columns() {
        fl.push(col::<Float32Array>(p, &b, name, n)?);
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
        thickness_b: meta_f32(p, &b, "thickness_b")?,
        thickness_e: meta_f32(p, &b, "thickness_e")?,
        pitch_x: meta_f32(p, &b, "pitch_x")?,
        pitch_y: meta_f32(p, &b, "pitch_y")?,
    };
    Ok((common, det))
}

fn read_ladders(p: &Path) -> Result<AverageGeometry, DatasetError> {
    let b = read_ipc(p)?;
    let n = Some(NUMBER_OF_LADDERS_IN_BARREL);
    let f = |name: &str| -> Result<Vec<f32>, DatasetError> {
        Ok(col::<Float32Array>(p, &b, name, n)?.values().to_vec())
    };
    Ok(AverageGeometry {
        ladder_z: f("ladder_z")?,
        ladder_x: f("ladder_x")?,
        ladder_y: f("ladder_y")?,
        ladder_r: f("ladder_r")?,
        ladder_min_z: f("ladder_min_z")?,
        ladder_max_z: f("ladder_max_z")?,
        end_cap_z: [
            meta_f32(p, &b, "end_cap_z0")?,
            meta_f32(p, &b, "end_cap_z1")?,
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_column_under_a_wrong_name_names_the_file_and_column() {
        let p = Path::new("/d/conditions/fed_ids.arrow");
        let fields = vec![field("fed", DataType::UInt32)];
        let err = batch(p, fields, [("feds", u32col!(vec![1200]))], HashMap::new()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/d/conditions/fed_ids.arrow: product 'fed_ids.arrow': no column 'feds' in its schema (columns: fed)"
        );
        let fields = vec![field("fed", DataType::UInt32)];
        let err = batch(p, fields, [], HashMap::new()).unwrap_err();
        assert!(err.to_string().ends_with("column 'fed' not given"), "{err}");
    }
}
