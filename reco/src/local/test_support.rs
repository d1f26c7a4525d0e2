//! Test-only helpers: a small cabling map, a FED encoder written from the raw-data
//! format (independent of the decoder), and simple gain / CPE conditions.

use quiver_formats::conditions::{
    cabling_index, AverageGeometry, CablingMap, CommonParams, CpeParams, DetParams, Frame,
    GainCalibration, CABLING_MAX_SIZE, MAX_NUM_MODULES,
};
use std::sync::OnceLock;

/// One cabled module: two links of 8 ROCs, ROC `r` of link `base_link + r/8` is `rocInDet r`.
#[derive(Clone, Copy, Debug)]
pub struct TestModule {
    pub det_index: u16,
    pub raw_id: u32,
    pub fed: u32,
    pub base_link: u32,
}

pub fn barrel_raw_id(layer: u32, ladder: u32, module: u32) -> u32 {
    (1 << 28) | (1 << 25) | (layer << 20) | (ladder << 12) | (module << 2)
}

pub fn endcap_raw_id(side: u32, disk: u32, blade: u32, panel: u32) -> u32 {
    (1 << 28) | (2 << 25) | (side << 23) | (disk << 18) | (blade << 12) | (panel << 10)
}

/// The modules of the test cabling: L1 (+z and −z), L2 −z and +z, L4, FPix panels 1 and 2.
pub fn test_modules() -> &'static [TestModule] {
    static M: OnceLock<Vec<TestModule>> = OnceLock::new();
    M.get_or_init(|| {
        let specs: [(u16, u32); 8] = [
            (3, barrel_raw_id(1, 1, 4)),       // L1, −z: still orientation A
            (5, barrel_raw_id(1, 1, 6)),       // L1, +z
            (100, barrel_raw_id(2, 1, 2)),     // L2, −z: orientation B
            (107, barrel_raw_id(2, 1, 7)),     // L2, +z: orientation A
            (700, barrel_raw_id(4, 3, 5)),     // L4 +z
            (1200, endcap_raw_id(2, 1, 3, 1)), // FPix panel 1
            (1201, endcap_raw_id(2, 1, 3, 2)), // FPix panel 2
            (1600, endcap_raw_id(1, 2, 7, 2)), // FPix −z
        ];
        specs
            .iter()
            .enumerate()
            .map(|(k, &(det_index, raw_id))| TestModule {
                det_index,
                raw_id,
                fed: 1200 + (k as u32) / 4,
                base_link: 1 + 2 * (k as u32 % 4),
            })
            .collect()
    })
}

pub fn test_cabling() -> &'static CablingMap {
    static C: OnceLock<CablingMap> = OnceLock::new();
    C.get_or_init(|| make_cabling(test_modules()))
}

/// Every module of the detector (index = detIndex), 24 modules per FED from 1200.
pub fn full_modules() -> &'static [TestModule] {
    static M: OnceLock<Vec<TestModule>> = OnceLock::new();
    M.get_or_init(|| {
        (0..1856u32)
            .map(|d| {
                let raw_id = if d < 1184 {
                    let l = quiver_formats::topology::layer_of(d as u16) as u32;
                    let in_layer = d - quiver_formats::topology::LAYER_START[l as usize];
                    barrel_raw_id(l + 1, in_layer / 8 + 1, in_layer % 8 + 1)
                } else {
                    let side = if d < 1520 { 2 } else { 1 };
                    endcap_raw_id(
                        side,
                        1 + (d - 1184) % 336 / 112,
                        1 + (d % 112) / 2,
                        1 + d % 2,
                    )
                };
                TestModule {
                    det_index: d as u16,
                    raw_id,
                    fed: 1200 + d / 24,
                    base_link: 1 + 2 * (d % 24),
                }
            })
            .collect()
    })
}

pub fn full_cabling() -> &'static CablingMap {
    static C: OnceLock<CablingMap> = OnceLock::new();
    C.get_or_init(|| make_cabling(full_modules()))
}

fn make_cabling(modules: &[TestModule]) -> CablingMap {
    let n = CABLING_MAX_SIZE;
    let mut c = CablingMap {
        fed: vec![0; n],
        link: vec![0; n],
        roc: vec![0; n],
        raw_id: vec![9999; n],
        roc_in_det: vec![0; n],
        module_id: vec![9999; n],
        bad_rocs: vec![1; n],
        mod_to_unp: vec![1; n],
        size: 0,
    };
    let last_fed = modules.iter().map(|m| m.fed).max().unwrap_or(1200);
    // Every entry of the used FEDs knows its own (fed, link, roc).
    for fed in 1200..=last_fed {
        for link in 1..=48u32 {
            for roc in 1..=8u32 {
                let i = cabling_index(fed, link, roc);
                c.fed[i] = fed;
                c.link[i] = link;
                c.roc[i] = roc;
            }
        }
    }
    c.size = cabling_index(last_fed, 48, 8) as u32 + 1;
    for m in modules {
        for r in 0..16u32 {
            let i = cabling_index(m.fed, m.base_link + r / 8, r % 8 + 1);
            c.raw_id[i] = m.raw_id;
            c.roc_in_det[i] = r;
            c.module_id[i] = m.det_index as u32;
            c.bad_rocs[i] = 0;
            c.mod_to_unp[i] = 0;
        }
    }
    c
}

pub fn module(det_index: u16) -> TestModule {
    *test_modules()
        .iter()
        .find(|m| m.det_index == det_index)
        .expect("test module")
}

/// Encodes one pixel of a module into a raw word (inverse frame conversion).
pub fn encode_pixel(m: &TestModule, row: u32, col: u32, adc: u32) -> u32 {
    let barrel = (m.raw_id >> 25) & 7 == 1;
    let layer = if barrel { (m.raw_id >> 20) & 0xf } else { 0 };
    let side_minus = if barrel {
        (m.raw_id >> 2) & 0x3ff < 5
    } else {
        (m.raw_id >> 10) & 3 == 1
    };
    let orientation_b = !barrel || (side_minus && layer != 1);
    let (roc, lr, lc) = match (orientation_b, row >= 80) {
        (false, true) => (col / 52, 159 - row, col - 52 * (col / 52)),
        (false, false) => {
            let roc = 15 - col / 52;
            (roc, row, 52 * (16 - roc) - 1 - col)
        }
        (true, false) => {
            let roc = 7 - col / 52;
            (roc, row, 52 * (8 - roc) - 1 - col)
        }
        (true, true) => {
            let roc = 8 + col / 52;
            (roc, 159 - row, col - 52 * (roc - 8))
        }
    };
    let link = m.base_link + roc / 8;
    let roc_field = roc % 8 + 1;
    let head = (link << 26) | (roc_field << 21) | (adc & 0xff);
    if layer == 1 {
        head | (lr << 8) | (lc << 15)
    } else {
        head | ((lc / 2) << 16) | ((2 * (80 - lr) + lc % 2) << 8)
    }
}

/// A FED buffer: one header, the words (padded with a zero word to an even count), one
/// trailer with the total length in 64-bit words.
pub fn build_fed(fed: u32, words: &[u32]) -> Vec<u8> {
    let mut w: Vec<u32> = words.to_vec();
    if w.len() % 2 == 1 {
        w.push(0);
    }
    let n64 = (w.len() / 2 + 2) as u64;
    let mut out = Vec::with_capacity(8 * n64 as usize);
    let (bx, lvl1, version, ev_type) = (0x123u64, 42u64, 1u64, 1u64);
    let header_low = (bx & 0xfff) << 20 | (fed as u64 & 0xfff) << 8 | version << 4;
    let header_high = 0x5u64 << 28 | (ev_type & 0xf) << 24 | (lvl1 & 0xff_ffff);
    out.extend_from_slice(&(header_low | header_high << 32).to_le_bytes());
    for x in &w {
        out.extend_from_slice(&x.to_le_bytes());
    }
    let (crc, status, tts) = (0xbeefu64, 0u64, 0u64);
    let trailer_low = crc << 16 | status << 8 | tts << 4;
    let trailer_high = 0xau64 << 28 | n64;
    out.extend_from_slice(&(trailer_low | trailer_high << 32).to_le_bytes());
    out
}

/// Encodes pixels `(det_index, row, col, adc)` into FED buffers, grouping by FED in order.
pub fn encode_event(pixels: &[(u16, u32, u32, u32)]) -> Vec<(u32, Vec<u8>)> {
    encode_event_with(pixels, module)
}

/// [`encode_event`] for any module table.
pub fn encode_event_with(
    pixels: &[(u16, u32, u32, u32)],
    lookup: impl Fn(u16) -> TestModule,
) -> Vec<(u32, Vec<u8>)> {
    let mut by_fed: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    for &(det, row, col, adc) in pixels {
        let m = lookup(det);
        by_fed
            .entry(m.fed)
            .or_default()
            .push(encode_pixel(&m, row, col, adc));
    }
    by_fed
        .into_iter()
        .map(|(f, ws)| (f, build_fed(f, &ws)))
        .collect()
}

/// Gains for every module slot: 416 columns × 2 blocks, the same `{gain, ped}` codes, with
/// `gain = code·0.1`, `ped = code·1.0`.
pub fn uniform_gains(gain_code: u8, ped_code: u8) -> GainCalibration {
    let per_module = 416 * 4u32;
    let n_mod = 1856u32;
    let mut range_and_cols = vec![(0u32, 0u32, 416i32); MAX_NUM_MODULES];
    for m in 0..n_mod {
        range_and_cols[m as usize] = (m * per_module, (m + 1) * per_module, 416);
    }
    GainCalibration {
        range_and_cols,
        min_ped: 0.0,
        max_ped: 253.0,
        min_gain: 0.0,
        max_gain: 25.3,
        ped_precision: 1.0,
        gain_precision: 0.1,
        rows_averaged: 80,
        n_bins: 253,
        dead_flag: 255,
        noisy_flag: 254,
        data: [gain_code, ped_code].repeat((n_mod * per_module / 2) as usize),
    }
}

/// Sets the pedestal code of (module, column, both row blocks).
pub fn set_column_ped(g: &mut GainCalibration, module: u16, col: u32, ped_code: u8) {
    let (first, _, _) = g.range_and_cols[module as usize];
    let at = (first + col * 4) as usize;
    g.data[at + 1] = ped_code;
    g.data[at + 3] = ped_code;
}

/// CPE conditions: every module a barrel module at radius 7 cm facing +x (local x → global y,
/// local y → global z), no Lorentz shift, the reference's default errors.
pub fn simple_cpe() -> CpeParams {
    let frame = Frame {
        px: 7.0,
        py: 0.0,
        pz: 0.0,
        r: [0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0],
    };
    let det = |i: u16| DetParams {
        is_barrel: i < 1184,
        is_pos_z: true,
        layer: if i < 96 { 1 } else { 2 },
        index: i,
        raw_id: 0,
        shift_x: 0.0,
        shift_y: 0.0,
        charge_width_x: 0.0,
        charge_width_y: 0.0,
        x0: 0.0,
        y0: 0.0,
        z0: -7.0,
        sx: [0.0012, 0.00115, 0.0050],
        sy: [0.0021, 0.00375, 0.0085],
        frame,
    };
    CpeParams {
        common: CommonParams {
            thickness_b: 0.0285,
            thickness_e: 0.0285,
            pitch_x: 0.01,
            pitch_y: 0.015,
        },
        det: (0..1856).map(det).collect(),
        average_geometry: AverageGeometry {
            ladder_z: vec![1.0; 148],
            ladder_x: vec![3.0; 148],
            ladder_y: vec![4.0; 148],
            ladder_r: vec![5.0; 148],
            ladder_min_z: vec![-2.0; 148],
            ladder_max_z: vec![2.0; 148],
            end_cap_z: [30.0, -30.0],
        },
    }
}

/// A tiny deterministic PRNG (SplitMix64) for generated test inputs.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
