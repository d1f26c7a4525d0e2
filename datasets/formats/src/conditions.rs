//! Per-dataset conditions, mirroring the structures the reference reconstruction reads
//! (docs/datasets.md): beam spot, cabling map, gains,
//! CPE parameters with module frames. Plain Rust data, shared read-only by every worker.
//!
//! Field names follow the reference's in snake case so that a port reads like the original.

/// Capacity of the cabling map: `MAX_FED × MAX_LINK × MAX_ROC`.
pub const MAX_FED: u32 = 150;
/// Links (channels) per FED.
pub const MAX_LINK: u32 = 48;
/// ROCs per link.
pub const MAX_ROC: u32 = 8;
/// Entries of the cabling map.
pub const CABLING_MAX_SIZE: usize = (MAX_FED * MAX_LINK * MAX_ROC) as usize;
/// Lowest pixel FED id.
pub const FED_ID_MIN: u32 = 1200;
/// Module-indexed tables (gains, cluster counts) have this many slots.
pub const MAX_NUM_MODULES: usize = 2000;

/// The beam spot (`BeamSpotPOD`), cm and rad. Only x, y, z are used by the reconstruction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BeamSpot {
    pub x: f32,
    pub y: f32,
    pub z: f32,
    pub sigma_z: f32,
    pub beam_width_x: f32,
    pub beam_width_y: f32,
    pub dxdz: f32,
    pub dydz: f32,
    pub emittance_x: f32,
    pub emittance_y: f32,
    pub beta_star: f32,
}

/// The FED cabling map (`SiPixelFedCablingMapGPU` + `modToUnp`), `CABLING_MAX_SIZE` entries each.
///
/// Entry `cabling_index(fed, link, roc)` describes ROC `roc` (1..8) of link `link` (1..48)
/// of FED `fed`. Unconnected entries have `raw_id = module_id = 9999`, `bad_rocs = 1`,
/// `mod_to_unp = 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct CablingMap {
    pub fed: Vec<u32>,
    pub link: Vec<u32>,
    pub roc: Vec<u32>,
    pub raw_id: Vec<u32>,
    /// ROC position in its module, 0..15.
    pub roc_in_det: Vec<u32>,
    /// detIndex of the module.
    pub module_id: Vec<u32>,
    pub bad_rocs: Vec<u8>,
    /// 1 where the channel is not to be unpacked.
    pub mod_to_unp: Vec<u8>,
    /// Number of filled entries.
    pub size: u32,
}

/// Index of (fed id, link 1..48, roc 1..8) in the cabling map arrays.
///
/// ```
/// use quiver_formats::conditions::cabling_index;
/// assert_eq!(cabling_index(1200, 1, 1), 0);
/// assert_eq!(cabling_index(1201, 2, 3), 48 * 8 + 8 + 2);
/// ```
pub const fn cabling_index(fed: u32, link: u32, roc: u32) -> usize {
    ((fed - FED_ID_MIN) * MAX_LINK * MAX_ROC + (link - 1) * MAX_ROC + (roc - 1)) as usize
}

/// Gains and pedestals per module, column and block of 80 rows (`SiPixelGainForHLTonGPU`).
#[derive(Clone, Debug, PartialEq)]
pub struct GainCalibration {
    /// Per module slot (`MAX_NUM_MODULES`): byte range `[first, last)` in `data` and column count.
    pub range_and_cols: Vec<(u32, u32, i32)>,
    pub min_ped: f32,
    pub max_ped: f32,
    pub min_gain: f32,
    pub max_gain: f32,
    pub ped_precision: f32,
    pub gain_precision: f32,
    /// Rows averaged in one block (80).
    pub rows_averaged: u32,
    /// Codes used for the encoding (253).
    pub n_bins: u32,
    /// Pedestal code marking a dead column (255).
    pub dead_flag: u32,
    /// Pedestal code marking a noisy column (254).
    pub noisy_flag: u32,
    /// `{gain code, ped code}` byte pairs.
    pub data: Vec<u8>,
}

/// Pitch and thickness shared by all modules (`CommonParams`), cm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CommonParams {
    pub thickness_b: f32,
    pub thickness_e: f32,
    pub pitch_x: f32,
    pub pitch_y: f32,
}

/// A module frame (`SOAFrame<float>`): centre `p` (global cm) and rotation `r` whose rows are
/// the local axes in global coordinates, stored R11, R12, …, R33.
/// `to_local(v) = R·(v − p)`, `to_global(u) = Rᵀ·u + p`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frame {
    pub px: f32,
    pub py: f32,
    pub pz: f32,
    pub r: [f32; 9],
}

/// Per-module CPE parameters (`DetParams`, 112 bytes in the reference's dump).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DetParams {
    pub is_barrel: bool,
    pub is_pos_z: bool,
    /// CMSSW layer (barrel 1..4) or disk (1..3).
    pub layer: u16,
    /// detIndex.
    pub index: u16,
    pub raw_id: u32,
    /// Half the Lorentz shift, cm, added to the measured position.
    pub shift_x: f32,
    pub shift_y: f32,
    pub charge_width_x: f32,
    pub charge_width_y: f32,
    /// The global origin in the module's local frame.
    pub x0: f32,
    pub y0: f32,
    pub z0: f32,
    /// Errors (cm): [multi-pixel, single pixel, single big pixel].
    pub sx: [f32; 3],
    pub sy: [f32; 3],
    pub frame: Frame,
}

/// Per-ladder averages of the barrel (`AverageGeometry`), cm.
#[derive(Clone, Debug, PartialEq)]
pub struct AverageGeometry {
    pub ladder_z: Vec<f32>,
    pub ladder_x: Vec<f32>,
    pub ladder_y: Vec<f32>,
    pub ladder_r: Vec<f32>,
    pub ladder_min_z: Vec<f32>,
    pub ladder_max_z: Vec<f32>,
    pub end_cap_z: [f32; 2],
}

/// All CPE conditions (`cpefast.bin`): common parameters, one `DetParams` per module in
/// detIndex order, the average geometry. The layer geometry is `topology::LAYER_START` and
/// `topology::LAYER`.
#[derive(Clone, Debug, PartialEq)]
pub struct CpeParams {
    pub common: CommonParams,
    pub det: Vec<DetParams>,
    pub average_geometry: AverageGeometry,
}

/// Every condition of a dataset, as the reconstruction needs them.
#[derive(Clone, Debug, PartialEq)]
pub struct Conditions {
    pub beam_spot: BeamSpot,
    pub cabling: CablingMap,
    pub gains: GainCalibration,
    pub cpe: CpeParams,
    /// FED ids present in the raw data, ascending (`fedIds.bin`).
    pub fed_ids: Vec<u32>,
}

impl GainCalibration {
    /// Decoded (pedestal ADC, gain VCal/ADC, dead, noisy) of a pixel, as the reference reads it.
    /// Out-of-range inputs read as dead.
    pub fn ped_and_gain(&self, module: u16, col: u16, row: u16) -> (f32, f32, bool, bool) {
        let Some(&(first, last, n_cols)) = self.range_and_cols.get(module as usize) else {
            return (0.0, 0.0, true, false);
        };
        if n_cols <= 0 || last <= first {
            return (0.0, 0.0, true, false);
        }
        // Fast paths for the usual layout (4 bytes per column, 80-row blocks): the same values
        // without two integer divisions per pixel.
        let span = last - first;
        let len = if Some(span) == (n_cols as u32).checked_mul(4) {
            4
        } else {
            span / n_cols as u32
        };
        let block = if self.rows_averaged == 80 {
            row as u32 / 80
        } else {
            row as u32 / self.rows_averaged.max(1)
        };
        let off = (first + col as u32 * len + 2 * block) as usize;
        if off + 1 >= self.data.len() || off as u32 >= last {
            return (0.0, 0.0, true, false);
        }
        let (g, p) = (self.data[off] as u32, self.data[off + 1] as u32);
        (
            p as f32 * self.ped_precision + self.min_ped,
            g as f32 * self.gain_precision + self.min_gain,
            p == self.dead_flag,
            p == self.noisy_flag,
        )
    }
}
