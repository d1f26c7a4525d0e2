//! Local reconstruction: raw FED data → digis → clusters → rec hits.
//!
//! One file per step, each a plain function over the columns of ONE event plus conditions,
//! returning owned vectors (the reference's kernels, one event at a time):
//!
//! 1. [`raw_to_digis::raw_to_digis`]: FED buffers → one digi slot per 32-bit payload word.
//! 2. [`calibrate::calibrate_digis`]: ADC → electrons, dead/noisy columns invalidated.
//! 3. [`clusterize::clusterize`]: module runs + connected components per module.
//! 4. [`charge_cut::charge_cut`]: per-cluster charge threshold, dense renumbering, hit offsets.
//! 5. [`rechits::rec_hits`]: CPE "fast" position/errors, local → global, `iphi`.
//!
//! The steps chain as in the reference: the digi columns keep one entry per raw word
//! (invalid ones carry module [`INVALID_MODULE`]) so that every index stays a word index.
//! [`reconstruct_event`] runs the five in order. Each step with parameters has a config
//! struct with the reference's values as `Default`; `rec_hits` has none (the CPE reads only
//! conditions).
//!
//! Where the reference would read or write outside its arrays on malformed input, the port
//! stops, reports and carries on (damaged raw data: [`RawDigis::errors`], codes in
//! [`raw_to_digis::error_type`]) or returns a [`LocalError`] (inconsistent columns or
//! conditions). On well-formed input the outputs are the reference's, bit for bit in f32.

pub mod atan2;
pub mod calibrate;
pub mod charge_cut;
pub mod clusterize;
pub mod raw_to_digis;
pub mod rechits;

#[cfg(test)]
mod chain_tests;
#[cfg(test)]
pub(crate) mod test_support;

pub use calibrate::{calibrate_digis, CalibConfig, CalibratedDigis};
pub use charge_cut::{charge_cut, ChargeCutConfig, ChargeCutOutput};
pub use clusterize::{clusterize, ClusterAlgorithm, ClusterizeConfig, Clusters};
pub use raw_to_digis::{raw_to_digis, PixelError, RawDigis, RawToDigiConfig};
pub use rechits::{rec_hits, ClusterColumns, DigiColumns, RecHits};

/// Module index of an invalid digi (`InvId`); larger than any module id.
pub const INVALID_MODULE: u16 = 9999;
/// Size of the module-indexed tables (`MaxNumModules`).
pub const MAX_NUM_MODULES: usize = 2000;
/// Pixels clustered per module at most (`maxPixInModule`); the excess is not clustered.
pub const MAX_PIX_IN_MODULE: usize = 4000;
/// Clusters kept per module at most (`MaxNumClustersPerModules`).
pub const MAX_CLUSTERS_PER_MODULE: u32 = 1024;
/// Hits (clusters) per event at most (`MaxNumClusters`).
pub const MAX_NUM_CLUSTERS: u32 = 48 * 1024;
/// Raw 32-bit words per event at most (`MAX_FED × MAX_WORD`).
pub const MAX_FED_WORDS: usize = 150 * 2000;

/// Errors of the local-reconstruction cores: inconsistent inputs or conditions. Damaged raw
/// data is never an error: it is reported in [`RawDigis::errors`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LocalError {
    /// Two columns of one event have different lengths.
    #[error("column `{name}` has {got} entries, expected {expected}")]
    ColumnLength {
        name: &'static str,
        got: usize,
        expected: usize,
    },
    /// A conditions table has the wrong size.
    #[error("conditions table `{name}` has {got} entries, expected {expected}")]
    ConditionsSize {
        name: &'static str,
        got: usize,
        expected: usize,
    },
    /// A connected cabling entry points outside the module tables.
    #[error(
        "cabling entry {index}: module id {module_id} / ROC-in-module {roc_in_det} out of range"
    )]
    BadCabling {
        index: usize,
        module_id: u32,
        roc_in_det: u32,
    },
    /// A valid digi carries a module id outside the conditions.
    #[error(
        "digi {digi}: module id {module} out of range (< {limit} or {INVALID_MODULE} expected)"
    )]
    ModuleOutOfRange {
        digi: usize,
        module: u32,
        limit: usize,
    },
    /// A valid digi lies outside the 160 × 416 module.
    #[error("digi {digi}: pixel (row {row}, col {col}) outside the module")]
    PixelOutOfRange { digi: usize, row: u16, col: u16 },
    /// The gain payload has no entry for this pixel.
    #[error("gain calibration: module {module} column {col} row {row}: {what}")]
    BadGain {
        module: u16,
        col: u16,
        row: u16,
        what: &'static str,
    },
    /// A configuration value is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
}

pub(crate) fn check_len(name: &'static str, got: usize, expected: usize) -> Result<(), LocalError> {
    if got == expected {
        Ok(())
    } else {
        Err(LocalError::ColumnLength {
            name,
            got,
            expected,
        })
    }
}

/// Configuration of the whole local chain (one struct per step).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LocalConfig {
    pub raw: RawToDigiConfig,
    pub calib: CalibConfig,
    pub cluster: ClusterizeConfig,
    pub charge_cut: ChargeCutConfig,
}

/// Every product of the local chain for one event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LocalEvent {
    /// Unpacked digis (raw ADC, module before calibration).
    pub digis: RawDigis,
    /// Calibrated module index and charge (electrons).
    pub calibrated: CalibratedDigis,
    /// Clusters before the charge cut.
    pub clusters: Clusters,
    /// Module index, cluster numbers and hit offsets after the charge cut.
    pub cut: ChargeCutOutput,
    pub hits: RecHits,
}

/// The conditions the local chain reads.
#[derive(Clone, Copy, Debug)]
pub struct LocalConditions<'a> {
    pub cabling: &'a quiver_formats::conditions::CablingMap,
    pub gains: &'a quiver_formats::conditions::GainCalibration,
    pub cpe: &'a quiver_formats::conditions::CpeParams,
    pub beam_spot: &'a quiver_formats::conditions::BeamSpot,
}

/// Runs raw → digis → calibration → clusters → charge cut → rec hits on one event, chaining
/// the step functions exactly as the step adapters should.
///
/// ```
/// use quiver_reco::local::{reconstruct_event, LocalConditions, LocalConfig};
/// use quiver_formats::conditions::*;
/// let n = CABLING_MAX_SIZE;
/// let cabling = CablingMap {
///     fed: vec![0; n], link: vec![0; n], roc: vec![0; n], raw_id: vec![9999; n],
///     roc_in_det: vec![0; n], module_id: vec![9999; n], bad_rocs: vec![1; n],
///     mod_to_unp: vec![1; n], size: 0,
/// };
/// let gains = GainCalibration {
///     range_and_cols: vec![(0, 0, 0); 2000], min_ped: 0.0, max_ped: 0.0, min_gain: 0.0,
///     max_gain: 0.0, ped_precision: 0.0, gain_precision: 0.0, rows_averaged: 80, n_bins: 253,
///     dead_flag: 255, noisy_flag: 254, data: vec![],
/// };
/// let cpe = CpeParams {
///     common: CommonParams { thickness_b: 0.0285, thickness_e: 0.0285, pitch_x: 0.01, pitch_y: 0.015 },
///     det: vec![],
///     average_geometry: AverageGeometry { ladder_z: vec![], ladder_x: vec![], ladder_y: vec![],
///         ladder_r: vec![], ladder_min_z: vec![], ladder_max_z: vec![], end_cap_z: [0.0; 2] },
/// };
/// let cond = LocalConditions { cabling: &cabling, gains: &gains, cpe: &cpe, beam_spot: &BeamSpot::default() };
/// // An event whose only FED holds just a header and a trailer.
/// let fed: Vec<u8> = [0x5000_0000_0004_b000u64, 0xa000_0002_0000_0000u64]
///     .iter().flat_map(|w| w.to_le_bytes()).collect();
/// let ev = reconstruct_event(&[(1200, &fed[..])], &cond, &LocalConfig::default()).unwrap();
/// assert!(ev.digis.errors.is_empty());
/// assert_eq!((ev.digis.n_digis, ev.clusters.n_modules, ev.hits.n_hits), (0, 0, 0));
/// ```
pub fn reconstruct_event(
    feds: &[(u32, &[u8])],
    cond: &LocalConditions,
    cfg: &LocalConfig,
) -> Result<LocalEvent, LocalError> {
    let digis = raw_to_digis(feds, cond.cabling, &cfg.raw)?;
    let calibrated = calibrate_digis(
        &digis.module_ind,
        &digis.xx,
        &digis.yy,
        &digis.adc,
        cond.gains,
        &cfg.calib,
    )?;
    let clusters = clusterize(&calibrated.module_ind, &digis.xx, &digis.yy, &cfg.cluster)?;
    let cut = charge_cut(
        &calibrated.module_ind,
        &calibrated.adc,
        &clusters.clus,
        &clusters.module_start,
        &clusters.n_clusters_in_module,
        &cfg.charge_cut,
    )?;
    let hits = rec_hits(
        &DigiColumns {
            module_ind: &cut.module_ind,
            xx: &digis.xx,
            yy: &digis.yy,
            adc: &calibrated.adc,
            clus: &cut.clus,
        },
        &ClusterColumns {
            module_start: &clusters.module_start,
            module_id: &clusters.module_id,
            n_clusters_in_module: &cut.n_clusters_in_module,
            clus_module_start: &cut.clus_module_start,
        },
        cond.cpe,
        cond.beam_spot,
    )?;
    Ok(LocalEvent {
        digis,
        calibrated,
        clusters,
        cut,
        hits,
    })
}
