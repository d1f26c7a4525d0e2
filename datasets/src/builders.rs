//! Builders for the synthetic detector's conditions: cabling (FEDs, links, ROCs), gains and
//! pedestals, beam spot (docs/datasets.md).

use crate::conditions::{
    cabling_index, BeamSpot, CablingMap, Conditions, GainCalibration, CABLING_MAX_SIZE, FED_ID_MIN,
    MAX_LINK, MAX_NUM_MODULES, MAX_ROC,
};
use crate::geometry::Geometry;
use crate::topology::{INVALID_MODULE, NUMBER_OF_MODULES, NUM_COLS_IN_MODULE};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Links given to one FED at most; a module's links never straddle two FEDs. With 40 the 4352
/// links of the detector need 109 FEDs, close to the 108 of CMS.
pub const LINKS_PER_FED: u32 = 40;

/// Readout links of a module and ROCs per link: BPix L1/L2 4 × 4, everything else 2 × 8.
pub const fn links_of_layer(layer: u8) -> (u32, u32) {
    if layer < 2 {
        (4, 4)
    } else {
        (2, 8)
    }
}

/// Builds the cabling map: modules in detIndex order fill FEDs 1200, 1201, … with consecutive
/// links (all links of a module adjacent in one FED). Returns the map and the FED id list.
///
/// ```
/// use quiver_datasets::{builders::build_cabling, geometry::Geometry, conditions::cabling_index};
/// let (map, feds) = build_cabling(&Geometry::phase1());
/// assert_eq!(feds[0], 1200);
/// assert_eq!(map.module_id[cabling_index(1200, 1, 1)], 0);
/// ```
pub fn build_cabling(geom: &Geometry) -> (CablingMap, Vec<u32>) {
    let n = CABLING_MAX_SIZE;
    let mut map = CablingMap {
        fed: vec![0; n],
        link: vec![0; n],
        roc: vec![0; n],
        raw_id: vec![INVALID_MODULE as u32; n],
        roc_in_det: vec![INVALID_MODULE as u32; n],
        module_id: vec![INVALID_MODULE as u32; n],
        bad_rocs: vec![1; n],
        mod_to_unp: vec![1; n],
        size: 0,
    };
    let mut fed = FED_ID_MIN;
    let mut next_link = 1u32;
    for m in &geom.modules {
        let (nl, nr) = links_of_layer(m.layer);
        if next_link + nl - 1 > LINKS_PER_FED {
            fed += 1;
            next_link = 1;
        }
        for l in 0..nl {
            for r in 0..nr {
                let i = cabling_index(fed, next_link + l, r + 1);
                map.raw_id[i] = m.raw_id;
                map.roc_in_det[i] = l * nr + r;
                map.module_id[i] = m.index as u32;
                map.bad_rocs[i] = 0;
                map.mod_to_unp[i] = 0;
            }
        }
        next_link += nl;
    }
    let feds: Vec<u32> = (FED_ID_MIN..=fed).collect();
    // Every entry of the FED range carries its (fed, link, roc) path, connected or not.
    for &f in &feds {
        for l in 1..=MAX_LINK {
            for r in 1..=MAX_ROC {
                let i = cabling_index(f, l, r);
                map.fed[i] = f;
                map.link[i] = l;
                map.roc[i] = r;
            }
        }
    }
    map.size = feds.len() as u32 * MAX_LINK * MAX_ROC;
    (map, feds)
}

/// Where each ROC of each module is read out: `(fed, link, roc)` per `(module, rocInDet)`,
/// derived from a cabling map (so that the encoder works from conditions read from disk).
#[derive(Clone, Debug)]
pub struct ReadoutMap {
    /// `[module * 16 + rocInDet]` → (fed id, link, roc), fed 0 if not connected.
    pub path: Vec<(u32, u32, u32)>,
    /// For each FED id (in `feds` order), the modules it reads, in link order.
    pub fed_modules: Vec<Vec<u16>>,
    /// FED ids.
    pub feds: Vec<u32>,
}

impl ReadoutMap {
    /// Inverts a cabling map. FEDs are those listed in `feds`.
    pub fn new(map: &CablingMap, feds: &[u32]) -> Self {
        let mut path = vec![(0u32, 0u32, 0u32); NUMBER_OF_MODULES as usize * 16];
        let mut fed_modules = Vec::with_capacity(feds.len());
        for &f in feds {
            let mut mods: Vec<u16> = Vec::new();
            if !(FED_ID_MIN..FED_ID_MIN + crate::conditions::MAX_FED).contains(&f) {
                fed_modules.push(mods);
                continue;
            }
            for l in 1..=MAX_LINK {
                for r in 1..=MAX_ROC {
                    let i = cabling_index(f, l, r);
                    let m = map.module_id[i];
                    if map.mod_to_unp[i] != 0 || m as usize >= NUMBER_OF_MODULES as usize {
                        continue;
                    }
                    let k = map.roc_in_det[i];
                    if k < 16 {
                        path[m as usize * 16 + k as usize] = (f, l, r);
                    }
                    if mods.last() != Some(&(m as u16)) {
                        mods.push(m as u16);
                    }
                }
            }
            fed_modules.push(mods);
        }
        ReadoutMap {
            path,
            fed_modules,
            feds: feds.to_vec(),
        }
    }
}

/// Parameters of the synthetic gain/pedestal calibration.
#[derive(Clone, Debug, PartialEq)]
pub struct GainParams {
    /// Mean gain, VCal per ADC count (design ≈ 3.1).
    pub gain_mean: f32,
    /// Relative Gaussian spread of the gain between column blocks.
    pub gain_spread: f32,
    /// Mean pedestal, ADC counts (≈ 12).
    pub ped_mean: f32,
    /// Gaussian spread of the pedestal, ADC counts.
    pub ped_sigma: f32,
    /// Fraction of columns flagged dead.
    pub dead_fraction: f64,
    /// Fraction of columns flagged noisy.
    pub noisy_fraction: f64,
    /// Seed of the calibration (independent of the event seed).
    pub seed: u64,
}

impl Default for GainParams {
    fn default() -> Self {
        GainParams {
            gain_mean: 3.1,
            gain_spread: 0.05,
            ped_mean: 12.0,
            ped_sigma: 2.0,
            dead_fraction: 2e-4,
            noisy_fraction: 1e-4,
            seed: 0x5EED_6A1E,
        }
    }
}

/// Builds per-module, per-column, per-80-row-block gains encoded as in `SiPixelGainForHLTonGPU`
/// (`{gain code, ped code}` byte pairs, 4 bytes per column).
///
/// ```
/// use quiver_datasets::builders::{build_gains, GainParams};
/// let g = build_gains(&GainParams::default());
/// assert_eq!(g.data.len(), 1856 * 416 * 4);
/// let (ped, gain, dead, noisy) = g.ped_and_gain(5, 10, 100);
/// assert!(gain > 2.5 && gain < 3.7 && ped > 0.0 && !(dead && noisy));
/// ```
pub fn build_gains(p: &GainParams) -> GainCalibration {
    let n_bins = 253u32;
    let (min_gain, max_gain) = (p.gain_mean * 0.7, p.gain_mean * 1.3);
    let (min_ped, max_ped) = (0.0f32, 2.5 * p.ped_mean.max(1.0));
    let gain_precision = (max_gain - min_gain) / n_bins as f32;
    let ped_precision = (max_ped - min_ped) / n_bins as f32;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(p.seed);
    let n_mod = NUMBER_OF_MODULES as usize;
    let cols = NUM_COLS_IN_MODULE as usize;
    let mut data = Vec::with_capacity(n_mod * cols * 4);
    let mut range_and_cols = vec![(0u32, 0u32, 0i32); MAX_NUM_MODULES];
    for (m, rc) in range_and_cols.iter_mut().enumerate().take(n_mod) {
        let first = (m * cols * 4) as u32;
        *rc = (first, first + (cols * 4) as u32, cols as i32);
        for _c in 0..cols {
            let u: f64 = rng.random();
            let flag = if u < p.dead_fraction {
                Some(255u8)
            } else if u < p.dead_fraction + p.noisy_fraction {
                Some(254u8)
            } else {
                None
            };
            for _block in 0..2 {
                let g = p.gain_mean * (1.0 + p.gain_spread * gauss(&mut rng) as f32);
                let pd = p.ped_mean + p.ped_sigma * gauss(&mut rng) as f32;
                let gc = ((g - min_gain) / gain_precision)
                    .round()
                    .clamp(0.0, n_bins as f32) as u8;
                let pc = match flag {
                    Some(f) => f,
                    None => ((pd - min_ped) / ped_precision)
                        .round()
                        .clamp(0.0, n_bins as f32) as u8,
                };
                data.push(gc);
                data.push(pc);
            }
        }
    }
    GainCalibration {
        range_and_cols,
        min_ped,
        max_ped,
        min_gain,
        max_gain,
        ped_precision,
        gain_precision,
        rows_averaged: 80,
        n_bins,
        dead_flag: 255,
        noisy_flag: 254,
        data,
    }
}

/// Default beam spot: a small offset from the origin, luminous region σz 4 cm, σxy 12 µm.
pub fn default_beam_spot() -> BeamSpot {
    BeamSpot {
        x: 0.02,
        y: -0.03,
        z: 0.1,
        sigma_z: 4.0,
        beam_width_x: 0.0012,
        beam_width_y: 0.0012,
        dxdz: 0.0,
        dydz: 0.0,
        emittance_x: 0.0,
        emittance_y: 0.0,
        beta_star: 30.0,
    }
}

/// All conditions of the synthetic detector with default parameters.
///
/// ```
/// let c = quiver_datasets::builders::default_conditions();
/// assert_eq!(c.cpe.det.len(), 1856);
/// assert!(c.fed_ids.len() >= 100 && c.fed_ids.len() <= 150);
/// ```
pub fn default_conditions() -> Conditions {
    let geom = Geometry::phase1();
    let (cabling, fed_ids) = build_cabling(&geom);
    Conditions {
        beam_spot: default_beam_spot(),
        cabling,
        gains: build_gains(&GainParams::default()),
        cpe: geom.cpe_params(),
        fed_ids,
    }
}

/// Standard normal deviate (ziggurat).
#[inline]
pub(crate) fn gauss<R: Rng>(rng: &mut R) -> f64 {
    rng.sample(rand_distr::StandardNormal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cabling_covers_every_roc_once() {
        let geom = Geometry::phase1();
        let (map, feds) = build_cabling(&geom);
        assert!(
            feds.len() >= 100 && feds.len() <= 120,
            "{} feds",
            feds.len()
        );
        let ro = ReadoutMap::new(&map, &feds);
        for m in 0..1856usize {
            for k in 0..16 {
                let (f, l, r) = ro.path[m * 16 + k];
                assert!(f >= 1200, "module {m} roc {k} unconnected");
                let i = cabling_index(f, l, r);
                assert_eq!(map.module_id[i] as usize, m);
                assert_eq!(map.raw_id[i], geom.modules[m].raw_id);
            }
        }
        // each module appears in exactly one FED
        let total: usize = ro.fed_modules.iter().map(|v| v.len()).sum();
        assert_eq!(total, 1856);
        // unconnected entries: L1 links carry 4 ROCs only
        let i = cabling_index(1200, 1, 5);
        assert_eq!(
            (
                map.raw_id[i],
                map.module_id[i],
                map.bad_rocs[i],
                map.mod_to_unp[i]
            ),
            (9999, 9999, 1, 1)
        );
        assert_eq!(map.size, feds.len() as u32 * 384);
    }

    #[test]
    fn gains_decode_near_design() {
        let g = build_gains(&GainParams::default());
        let mut n_dead = 0;
        for m in 0..1856u16 {
            for c in 0..416u16 {
                let (p, gain, dead, noisy) = g.ped_and_gain(m, c, 159);
                if dead || noisy {
                    n_dead += 1;
                    continue;
                }
                assert!(gain > 2.1 && gain < 4.1 && (0.0..30.0).contains(&p));
            }
        }
        assert!(n_dead > 10 && n_dead < 1000, "{n_dead}");
    }
}

#[cfg(test)]
mod conditions_arrow_tests {
    // The Arrow tables of the conditions (quiver_formats) on the generator's default conditions.
    #[test]
    fn cpe_tables_have_one_row_per_module() {
        let c = super::default_conditions();
        let t = c.cpe.to_arrow();
        let det = &t.iter().find(|(n, _)| *n == "CpeParams.det").unwrap().1;
        assert_eq!(det.num_rows(), c.cpe.det.len());
        let r33 = det
            .column_by_name("r33")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Float32Array>()
            .unwrap();
        assert_eq!(r33.value(7), c.cpe.det[7].frame.r[8]);
        assert_eq!(c.cabling.to_arrow().num_rows(), c.cabling.size as usize);
    }
}
