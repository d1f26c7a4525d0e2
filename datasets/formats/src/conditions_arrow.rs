//! The conditions as Arrow tables, for readers outside Rust (Python steps, `quiver.conditions`).
//! Each condition type converts itself once per job; column names follow the Rust fields.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float32Array, Int32Array, RecordBatch, UInt16Array, UInt32Array,
    UInt8Array,
};

use crate::conditions::{AverageGeometry, BeamSpot, CablingMap, CpeParams, GainCalibration};

fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(cols.into_iter().map(|(n, a)| (n.to_string(), a)))
        .expect("columns of equal length")
}

fn f32s(v: impl IntoIterator<Item = f32>) -> ArrayRef {
    Arc::new(Float32Array::from_iter_values(v))
}

fn u32s(v: impl IntoIterator<Item = u32>) -> ArrayRef {
    Arc::new(UInt32Array::from_iter_values(v))
}

fn u8s(v: impl IntoIterator<Item = u8>) -> ArrayRef {
    Arc::new(UInt8Array::from_iter_values(v))
}

impl BeamSpot {
    /// The beam spot as one row (`BeamSpot`), float32 columns named as the fields.
    ///
    /// ```
    /// let t = quiver_formats::conditions::BeamSpot { z: 0.5, ..Default::default() }.to_arrow();
    /// assert_eq!((t.num_rows(), t.num_columns()), (1, 11));
    /// assert_eq!(t.schema().field(2).name(), "z");
    /// ```
    pub fn to_arrow(&self) -> RecordBatch {
        let b = self;
        let v = [
            b.x,
            b.y,
            b.z,
            b.sigma_z,
            b.beam_width_x,
            b.beam_width_y,
            b.dxdz,
            b.dydz,
            b.emittance_x,
            b.emittance_y,
            b.beta_star,
        ];
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
        batch(
            names
                .into_iter()
                .zip(v)
                .map(|(n, x)| (n, f32s([x])))
                .collect(),
        )
    }
}

impl CpeParams {
    /// The CPE conditions as named tables: `CpeParams.common` (1 row), `CpeParams.det` (one
    /// row per module, detIndex order; errors `sx0..sx2`/`sy0..sy2` = [multi-pixel, single,
    /// single big]; frame centre `px, py, pz` and rotation `r11..r33`),
    /// `CpeParams.average_geometry` (one row per barrel ladder) and `CpeParams.end_caps`
    /// (2 rows: the end-cap z).
    pub fn to_arrow(&self) -> Vec<(&'static str, RecordBatch)> {
        let c = &self.common;
        let common = batch(vec![
            ("thickness_b", f32s([c.thickness_b])),
            ("thickness_e", f32s([c.thickness_e])),
            ("pitch_x", f32s([c.pitch_x])),
            ("pitch_y", f32s([c.pitch_y])),
        ]);
        let d = &self.det;
        let col = |g: fn(&crate::conditions::DetParams) -> f32| f32s(d.iter().map(g));
        let mut cols: Vec<(&str, ArrayRef)> = vec![
            (
                "is_barrel",
                Arc::new(BooleanArray::from_iter(d.iter().map(|p| Some(p.is_barrel)))),
            ),
            (
                "is_pos_z",
                Arc::new(BooleanArray::from_iter(d.iter().map(|p| Some(p.is_pos_z)))),
            ),
            (
                "layer",
                Arc::new(UInt16Array::from_iter_values(d.iter().map(|p| p.layer))),
            ),
            (
                "index",
                Arc::new(UInt16Array::from_iter_values(d.iter().map(|p| p.index))),
            ),
            ("raw_id", u32s(d.iter().map(|p| p.raw_id))),
            ("shift_x", col(|p| p.shift_x)),
            ("shift_y", col(|p| p.shift_y)),
            ("charge_width_x", col(|p| p.charge_width_x)),
            ("charge_width_y", col(|p| p.charge_width_y)),
            ("x0", col(|p| p.x0)),
            ("y0", col(|p| p.y0)),
            ("z0", col(|p| p.z0)),
        ];
        const SX: [&str; 3] = ["sx0", "sx1", "sx2"];
        const SY: [&str; 3] = ["sy0", "sy1", "sy2"];
        for (i, name) in SX.into_iter().enumerate() {
            cols.push((name, f32s(d.iter().map(|p| p.sx[i]))));
        }
        for (i, name) in SY.into_iter().enumerate() {
            cols.push((name, f32s(d.iter().map(|p| p.sy[i]))));
        }
        cols.push(("px", col(|p| p.frame.px)));
        cols.push(("py", col(|p| p.frame.py)));
        cols.push(("pz", col(|p| p.frame.pz)));
        const R: [&str; 9] = [
            "r11", "r12", "r13", "r21", "r22", "r23", "r31", "r32", "r33",
        ];
        for (i, name) in R.into_iter().enumerate() {
            cols.push((name, f32s(d.iter().map(|p| p.frame.r[i]))));
        }
        let AverageGeometry {
            ladder_z,
            ladder_x,
            ladder_y,
            ladder_r,
            ladder_min_z,
            ladder_max_z,
            end_cap_z,
        } = &self.average_geometry;
        let ag = batch(vec![
            ("ladder_z", f32s(ladder_z.iter().copied())),
            ("ladder_x", f32s(ladder_x.iter().copied())),
            ("ladder_y", f32s(ladder_y.iter().copied())),
            ("ladder_r", f32s(ladder_r.iter().copied())),
            ("ladder_min_z", f32s(ladder_min_z.iter().copied())),
            ("ladder_max_z", f32s(ladder_max_z.iter().copied())),
        ]);
        vec![
            ("CpeParams.common", common),
            ("CpeParams.det", batch(cols)),
            ("CpeParams.average_geometry", ag),
            (
                "CpeParams.end_caps",
                batch(vec![("z", f32s(end_cap_z.iter().copied()))]),
            ),
        ]
    }
}

impl CablingMap {
    /// The filled entries of the cabling map, one row each (`CablingMap`).
    pub fn to_arrow(&self) -> RecordBatch {
        let n = (self.size as usize).min(self.fed.len());
        batch(vec![
            ("fed", u32s(self.fed[..n].iter().copied())),
            ("link", u32s(self.link[..n].iter().copied())),
            ("roc", u32s(self.roc[..n].iter().copied())),
            ("raw_id", u32s(self.raw_id[..n].iter().copied())),
            ("roc_in_det", u32s(self.roc_in_det[..n].iter().copied())),
            ("module_id", u32s(self.module_id[..n].iter().copied())),
            ("bad_rocs", u8s(self.bad_rocs[..n].iter().copied())),
            ("mod_to_unp", u8s(self.mod_to_unp[..n].iter().copied())),
        ])
    }
}

impl GainCalibration {
    /// The gains as tables: `GainCalibration.modules` (per module slot: byte range `first`,
    /// `last` in the data, `columns`), `GainCalibration.data` (the `{gain, ped}` code pairs)
    /// and `GainCalibration.encoding` (1 row: ranges, precisions and flags of the codes).
    pub fn to_arrow(&self) -> Vec<(&'static str, RecordBatch)> {
        let r = &self.range_and_cols;
        let modules = batch(vec![
            ("first", u32s(r.iter().map(|x| x.0))),
            ("last", u32s(r.iter().map(|x| x.1))),
            (
                "columns",
                Arc::new(Int32Array::from_iter_values(r.iter().map(|x| x.2))),
            ),
        ]);
        let data = batch(vec![
            ("gain_code", u8s(self.data.iter().step_by(2).copied())),
            (
                "ped_code",
                u8s(self.data.iter().skip(1).step_by(2).copied()),
            ),
        ]);
        let encoding = batch(vec![
            ("min_ped", f32s([self.min_ped])),
            ("max_ped", f32s([self.max_ped])),
            ("min_gain", f32s([self.min_gain])),
            ("max_gain", f32s([self.max_gain])),
            ("ped_precision", f32s([self.ped_precision])),
            ("gain_precision", f32s([self.gain_precision])),
            ("rows_averaged", u32s([self.rows_averaged])),
            ("n_bins", u32s([self.n_bins])),
            ("dead_flag", u32s([self.dead_flag])),
            ("noisy_flag", u32s([self.noisy_flag])),
        ]);
        vec![
            ("GainCalibration.modules", modules),
            ("GainCalibration.data", data),
            ("GainCalibration.encoding", encoding),
        ]
    }
}
