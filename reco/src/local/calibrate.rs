//! ADC → electrons with per-column gains and pedestals (reference
//! `gpuCalibPixel.h`, `SiPixelGainForHLTonGPU.h`).

use quiver_formats::calibration;
use quiver_formats::conditions::GainCalibration;

use super::{check_len, LocalError, INVALID_MODULE};

/// Parameters of the calibration step (reference constants for Run 2).
#[derive(Clone, Debug, PartialEq)]
pub struct CalibConfig {
    /// Use the Run-2 VCal → electron conversion; if false, electrons = VCal. Default `true`.
    pub is_run2: bool,
    /// Modules with detIndex below this use the layer-1 constants. Default 96 (BPix L1).
    pub l1_modules: u16,
    /// Electrons per VCal unit, BPix L1. Default 50.
    pub vcal_to_electron_gain_l1: f32,
    /// Electron offset, BPix L1. Default −670 e.
    pub vcal_to_electron_offset_l1: f32,
    /// Electrons per VCal unit, other modules. Default 47.
    pub vcal_to_electron_gain: f32,
    /// Electron offset, other modules. Default −60 e.
    pub vcal_to_electron_offset: f32,
    /// Lower bound of a calibrated pixel charge, electrons. Default 100.
    pub min_electrons: i32,
}

impl Default for CalibConfig {
    fn default() -> Self {
        Self {
            is_run2: true,
            l1_modules: calibration::L1_MODULES,
            vcal_to_electron_gain_l1: calibration::VCAL_TO_ELECTRON_GAIN_L1,
            vcal_to_electron_offset_l1: calibration::VCAL_TO_ELECTRON_OFFSET_L1,
            vcal_to_electron_gain: calibration::VCAL_TO_ELECTRON_GAIN,
            vcal_to_electron_offset: calibration::VCAL_TO_ELECTRON_OFFSET,
            min_electrons: calibration::MIN_ELECTRONS,
        }
    }
}

/// The columns the calibration rewrites: `adc` now holds electrons (u16, wrapping like the
/// reference's store); pixels of dead/noisy columns get module 9999 and charge 0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CalibratedDigis {
    pub module_ind: Vec<u16>,
    pub adc: Vec<u16>,
}

/// Calibrates the digis of one event.
///
/// Errors if the columns differ in length, a valid digi's module has no gain range, or the
/// gain payload does not cover a pixel.
///
/// ```
/// use quiver_reco::local::calibrate::{calibrate_digis, CalibConfig};
/// use quiver_formats::conditions::GainCalibration;
/// // One module (id 100) with 416 columns × 2 blocks, gain code 10, ped code 12.
/// let mut range_and_cols = vec![(0u32, 0u32, 1i32); 2000];
/// range_and_cols[100] = (0, 416 * 4, 416);
/// let gains = GainCalibration {
///     range_and_cols, min_ped: 0.0, max_ped: 253.0, min_gain: 0.0, max_gain: 25.3,
///     ped_precision: 1.0, gain_precision: 0.1, rows_averaged: 80, n_bins: 253,
///     dead_flag: 255, noisy_flag: 254, data: [10u8, 12].repeat(416 * 2),
/// };
/// let out = calibrate_digis(&[100, 9999], &[5, 0], &[7, 0], &[112, 0], &gains, &CalibConfig::default()).unwrap();
/// // (112 − 12)·1.0 VCal · 47 − 60 = 4640 e
/// assert_eq!(out.adc, vec![4640, 0]);
/// ```
pub fn calibrate_digis(
    module_ind: &[u16],
    xx: &[u16],
    yy: &[u16],
    adc: &[u16],
    gains: &GainCalibration,
    cfg: &CalibConfig,
) -> Result<CalibratedDigis, LocalError> {
    let n = module_ind.len();
    check_len("xx", xx.len(), n)?;
    check_len("yy", yy.len(), n)?;
    check_len("adc", adc.len(), n)?;
    if gains.rows_averaged == 0 {
        return Err(LocalError::Config(
            "gain calibration has rows_averaged = 0".into(),
        ));
    }
    let mut out = CalibratedDigis {
        module_ind: module_ind.to_vec(),
        adc: adc.to_vec(),
    };
    // First the payload position of every valid digi (all checks here), then the reads: the
    // payload (3 MB) is mostly out of cache, and with the positions known the loads can be
    // prefetched ahead instead of waiting one by one.
    const NONE: u32 = u32::MAX;
    let mut at = vec![NONE; n];
    // Digis of a module are contiguous: keep the last module's range to avoid a division
    // per digi.
    let mut cache: Option<(u16, ModuleRange)> = None;
    for i in 0..n {
        let id = module_ind[i];
        if id == INVALID_MODULE {
            continue;
        }
        let range = match cache {
            Some((m, r)) if m == id => r,
            _ => {
                let r = module_range(gains, id, yy[i], xx[i])?;
                cache = Some((id, r));
                r
            }
        };
        at[i] = gain_position(gains, &range, id, yy[i], xx[i])?;
    }
    /// Digis between a prefetch and its read.
    const AHEAD: usize = 24;
    for i in 0..n {
        if let Some(&pf) = at.get(i + AHEAD) {
            if pf != NONE {
                crate::prefetch(&gains.data, pf as usize);
            }
        }
        if at[i] == NONE {
            continue;
        }
        let id = module_ind[i];
        let (factor, offset) = if !cfg.is_run2 {
            (1.0f32, 0.0f32)
        } else if id < cfg.l1_modules {
            (cfg.vcal_to_electron_gain_l1, cfg.vcal_to_electron_offset_l1)
        } else {
            (cfg.vcal_to_electron_gain, cfg.vcal_to_electron_offset)
        };
        let k = at[i] as usize;
        let (gain_code, ped_code) = (gains.data[k], gains.data[k + 1]);
        let dead = ped_code as u32 == gains.dead_flag;
        let noisy = ped_code as u32 == gains.noisy_flag;
        if dead | noisy {
            out.module_ind[i] = INVALID_MODULE;
            out.adc[i] = 0;
        } else {
            let pedestal = ped_code as f32 * gains.ped_precision + gains.min_ped;
            let gain = gain_code as f32 * gains.gain_precision + gains.min_gain;
            out.adc[i] =
                calibration::electrons(adc[i], pedestal, gain, factor, offset, cfg.min_electrons)
                    as u16;
        }
    }
    Ok(out)
}

/// A module's byte range in the gain payload and the bytes per column.
#[derive(Clone, Copy)]
struct ModuleRange {
    first: u64,
    last: u64,
    col_len: u64,
}

fn module_range(
    g: &GainCalibration,
    module: u16,
    col: u16,
    row: u16,
) -> Result<ModuleRange, LocalError> {
    let bad = |what| LocalError::BadGain {
        module,
        col,
        row,
        what,
    };
    let &(first, last, n_cols) = g
        .range_and_cols
        .get(module as usize)
        .ok_or(bad("no range for module"))?;
    if n_cols <= 0 || last < first {
        return Err(bad("empty or inverted range"));
    }
    Ok(ModuleRange {
        first: first as u64,
        last: last as u64,
        col_len: (last - first) as u64 / n_cols as u64,
    })
}

/// Position of the `{gain, ped}` codes of (module, column, row) in the payload: column data
/// are `col_len` bytes, two bytes per block of `rows_averaged` rows. Both bytes are inside
/// the payload.
fn gain_position(
    g: &GainCalibration,
    r: &ModuleRange,
    module: u16,
    col: u16,
    row: u16,
) -> Result<u32, LocalError> {
    let bad = |what| LocalError::BadGain {
        module,
        col,
        row,
        what,
    };
    // 32-bit division: rows are < 2^16 and `rows_averaged` > 0 (checked by the caller).
    let block = (row as u32 / g.rows_averaged) as u64;
    let offset = r.first + col as u64 * r.col_len + 2 * block;
    if offset >= r.last {
        return Err(bad("offset past the module's range"));
    }
    let at = 2 * (offset / 2);
    if at + 1 < g.data.len() as u64 && at < u32::MAX as u64 {
        Ok(at as u32)
    } else {
        Err(bad("offset past the payload"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::test_support::{set_column_ped, uniform_gains};

    #[test]
    fn l1_and_other_constants_and_floor() {
        let g = uniform_gains(30, 12); // gain 3.0 VCal/ADC, ped 12
        let cfg = CalibConfig::default();
        let out = calibrate_digis(
            &[5, 500, 500, 9999],
            &[0, 159, 80, 0],
            &[0, 415, 3, 0],
            &[112, 112, 12, 77],
            &g,
            &cfg,
        )
        .unwrap();
        // L1: (112·3 − 12·3)·50 − 670 = 14330; others: 300·47 − 60 = 14040; at the pedestal:
        // −60 → floor 100; invalid untouched.
        assert_eq!(out.adc, vec![14330, 14040, 100, 77]);
        assert_eq!(out.module_ind, vec![5, 500, 500, 9999]);
        let raw = CalibConfig {
            is_run2: false,
            ..Default::default()
        };
        let out = calibrate_digis(&[500], &[0], &[0], &[112], &g, &raw).unwrap();
        assert_eq!(out.adc, vec![300]);
    }

    /// The reference computes `adc·gain − ped·gain` in f32; find codes where that differs
    /// from `(adc − ped)·gain` after the int conversion and check we follow the reference.
    #[test]
    fn f32_evaluation_order_as_reference() {
        let mut found = 0;
        for gain_code in [7u8, 13, 29, 33] {
            for ped_code in [3u8, 11, 17] {
                let g = uniform_gains(gain_code, ped_code);
                let gain = gain_code as f32 * 0.1 + 0.0;
                let ped = ped_code as f32 * 1.0 + 0.0;
                for adc in 0..=255u16 {
                    let reference = ((adc as f32 * gain - ped * gain) * 47.0 - 60.0) as i32;
                    let other = (((adc as f32 - ped) * gain) * 47.0 - 60.0) as i32;
                    if reference != other && reference > 100 {
                        let out = calibrate_digis(
                            &[200],
                            &[0],
                            &[0],
                            &[adc],
                            &g,
                            &CalibConfig::default(),
                        )
                        .unwrap();
                        assert_eq!(out.adc[0] as i32, reference);
                        found += 1;
                    }
                }
            }
        }
        assert!(found > 0, "no distinguishing case found");
    }

    #[test]
    fn dead_and_noisy_columns() {
        let mut g = uniform_gains(30, 12);
        set_column_ped(&mut g, 400, 17, 255); // dead
        set_column_ped(&mut g, 400, 18, 254); // noisy
        let out = calibrate_digis(
            &[400, 400, 400, 400],
            &[10, 150, 10, 10],
            &[17, 17, 18, 19],
            &[50, 50, 50, 50],
            &g,
            &CalibConfig::default(),
        )
        .unwrap();
        assert_eq!(out.module_ind, vec![9999, 9999, 9999, 400]);
        assert_eq!(&out.adc[..3], &[0, 0, 0]);
        assert!(out.adc[3] > 100);
    }

    #[test]
    fn row_blocks_select_their_codes() {
        let mut g = uniform_gains(30, 12);
        let (first, _, _) = g.range_and_cols[600];
        g.data[(first + 5 * 4 + 2) as usize] = 40; // column 5, rows 80..159: gain 4.0
        let out = calibrate_digis(
            &[600, 600],
            &[79, 80],
            &[5, 5],
            &[112, 112],
            &g,
            &CalibConfig::default(),
        )
        .unwrap();
        assert_eq!(
            out.adc,
            vec![(300 * 47 - 60) as u16, (400 * 47 - 60) as u16]
        );
    }

    #[test]
    fn bad_conditions_are_errors() {
        let mut g = uniform_gains(30, 12);
        g.data.truncate(100);
        let r = calibrate_digis(&[1000], &[0], &[0], &[50], &g, &CalibConfig::default());
        assert!(matches!(r, Err(LocalError::BadGain { .. })));
        let g = uniform_gains(30, 12);
        let r = calibrate_digis(&[1000], &[0], &[416], &[50], &g, &CalibConfig::default());
        assert!(matches!(r, Err(LocalError::BadGain { .. })));
        let r = calibrate_digis(&[5000], &[0], &[0], &[50], &g, &CalibConfig::default());
        assert!(matches!(r, Err(LocalError::BadGain { .. })));
        let r = calibrate_digis(&[5], &[0], &[0, 1], &[50], &g, &CalibConfig::default());
        assert!(matches!(r, Err(LocalError::ColumnLength { .. })));
    }
}
