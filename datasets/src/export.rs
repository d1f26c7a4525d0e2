//! Export of a dataset in the binary layouts the reference `pixeltrack-standalone` programs read
//! (docs/datasets.md): `raw.bin`, `fedIds.bin`, `beamspot.bin`,
//! `cablingMap.bin`, `gain.bin`, `cpefast.bin`, and the per-event count files.

use crate::conditions::{Conditions, CABLING_MAX_SIZE, MAX_NUM_MODULES};
use crate::error::DatasetError;
use crate::format::Dataset;
use crate::topology::{LAYER, LAYER_START, NUMBER_OF_LADDERS_IN_BARREL};
use std::io::Write;
use std::path::Path;

/// Size of `SiPixelFedCablingMapGPU` (six 128-aligned u32 arrays, badRocs, size).
pub const CABLING_STRUCT_BYTES: usize = 1_440_128;
/// Size of `SiPixelGainForHLTonGPU`.
pub const GAIN_STRUCT_BYTES: usize = 24_048;
/// Size of `cpefast.bin`.
pub const CPEFAST_BYTES: usize = 211_612;
/// Size of one `DetParams`.
pub const DET_PARAMS_BYTES: usize = 112;

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put_f32(b: &mut Vec<u8>, v: f32) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// `beamspot.bin`: 11 floats.
pub fn beamspot_bytes(c: &Conditions) -> Vec<u8> {
    let s = &c.beam_spot;
    let mut b = Vec::with_capacity(44);
    for v in [
        s.x,
        s.y,
        s.z,
        s.sigma_z,
        s.beam_width_x,
        s.beam_width_y,
        s.dxdz,
        s.dydz,
        s.emittance_x,
        s.emittance_y,
        s.beta_star,
    ] {
        put_f32(&mut b, v);
    }
    b
}

/// `fedIds.bin`: u32 count + ids.
pub fn fed_ids_bytes(c: &Conditions) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + 4 * c.fed_ids.len());
    put_u32(&mut b, c.fed_ids.len() as u32);
    for &f in &c.fed_ids {
        put_u32(&mut b, f);
    }
    b
}

/// `cablingMap.bin`. The reference fills its arrays from index 1 (and its kernel indexes
/// `(fed−1200)·384 + (link−1)·8 + roc` with roc 1-based), so entry `cabling_index(..)` of our
/// 0-based map goes to array slot `cabling_index(..) + 1`; slot 0 stays zero.
pub fn cabling_bytes(c: &Conditions) -> Vec<u8> {
    let m = &c.cabling;
    let n = CABLING_MAX_SIZE;
    let mut b = vec![0u8; CABLING_STRUCT_BYTES];
    let arrays: [&Vec<u32>; 6] = [
        &m.fed,
        &m.link,
        &m.roc,
        &m.raw_id,
        &m.roc_in_det,
        &m.module_id,
    ];
    for (k, a) in arrays.iter().enumerate() {
        let base = k * n * 4;
        for (i, &v) in a.iter().take(n - 1).enumerate() {
            let o = base + 4 * (i + 1);
            b[o..o + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    let base = 6 * n * 4;
    for (i, &v) in m.bad_rocs.iter().take(n - 1).enumerate() {
        b[base + i + 1] = v;
    }
    let o = base + n;
    b[o..o + 4].copy_from_slice(&m.size.to_le_bytes());
    put_u32(&mut b, n as u32);
    let mut unp = vec![0u8; n];
    for (i, &v) in m.mod_to_unp.iter().take(n - 1).enumerate() {
        unp[i + 1] = v;
    }
    b.extend_from_slice(&unp);
    b
}

/// `gain.bin`: the struct (pointer placeholder, ranges, scalars) + u32 byte count + data.
pub fn gain_bytes(c: &Conditions) -> Vec<u8> {
    let g = &c.gains;
    let mut b = Vec::with_capacity(GAIN_STRUCT_BYTES + 4 + g.data.len());
    b.extend_from_slice(&[0u8; 8]);
    for i in 0..MAX_NUM_MODULES {
        let (f, l, n) = g.range_and_cols.get(i).copied().unwrap_or((0, 0, 0));
        put_u32(&mut b, f);
        put_u32(&mut b, l);
        b.extend_from_slice(&n.to_le_bytes());
    }
    for v in [
        g.min_ped,
        g.max_ped,
        g.min_gain,
        g.max_gain,
        g.ped_precision,
        g.gain_precision,
    ] {
        put_f32(&mut b, v);
    }
    for v in [g.rows_averaged, g.n_bins, g.dead_flag, g.noisy_flag] {
        put_u32(&mut b, v);
    }
    debug_assert_eq!(b.len(), GAIN_STRUCT_BYTES);
    put_u32(&mut b, g.data.len() as u32);
    b.extend_from_slice(&g.data);
    b
}

/// `cpefast.bin`: CommonParams, u32 nDet, DetParams[nDet], AverageGeometry, LayerGeometry.
pub fn cpefast_bytes(c: &Conditions) -> Vec<u8> {
    let p = &c.cpe;
    let mut b = Vec::with_capacity(CPEFAST_BYTES);
    for v in [
        p.common.thickness_b,
        p.common.thickness_e,
        p.common.pitch_x,
        p.common.pitch_y,
    ] {
        put_f32(&mut b, v);
    }
    put_u32(&mut b, p.det.len() as u32);
    for d in &p.det {
        b.push(d.is_barrel as u8);
        b.push(d.is_pos_z as u8);
        b.extend_from_slice(&d.layer.to_le_bytes());
        b.extend_from_slice(&d.index.to_le_bytes());
        b.extend_from_slice(&[0, 0]); // padding before the 4-byte aligned rawId
        put_u32(&mut b, d.raw_id);
        let f = &d.frame;
        for v in [
            d.shift_x,
            d.shift_y,
            d.charge_width_x,
            d.charge_width_y,
            d.x0,
            d.y0,
            d.z0,
        ] {
            put_f32(&mut b, v);
        }
        for v in d.sx.iter().chain(d.sy.iter()) {
            put_f32(&mut b, *v);
        }
        for v in [f.px, f.py, f.pz].iter().chain(f.r.iter()) {
            put_f32(&mut b, *v);
        }
    }
    let ag = &p.average_geometry;
    for a in [
        &ag.ladder_z,
        &ag.ladder_x,
        &ag.ladder_y,
        &ag.ladder_r,
        &ag.ladder_min_z,
        &ag.ladder_max_z,
    ] {
        for i in 0..NUMBER_OF_LADDERS_IN_BARREL {
            put_f32(&mut b, a.get(i).copied().unwrap_or(0.0));
        }
    }
    put_f32(&mut b, ag.end_cap_z[0]);
    put_f32(&mut b, ag.end_cap_z[1]);
    for v in LAYER_START {
        put_u32(&mut b, v);
    }
    b.extend_from_slice(&LAYER);
    // LayerGeometry is 4-byte aligned: 44 + 116 = 160, no tail padding needed.
    b
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), DatasetError> {
    std::fs::write(path, bytes).map_err(|e| DatasetError::io(path, e))
}

/// Writes the reference's binary inputs for `dataset` into directory `out` (created if needed).
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let ds = dir.path().join("ds");
/// quiver_datasets::generate(&quiver_datasets::GenerateOptions {
///     events: 1, pileup: 0.0, output: ds.clone(), ..Default::default()
/// }).unwrap();
/// quiver_datasets::export_pixeltrack(&ds, &dir.path().join("bin")).unwrap();
/// let cpe = std::fs::metadata(dir.path().join("bin/cpefast.bin")).unwrap();
/// assert_eq!(cpe.len(), 211_612);
/// ```
pub fn export_pixeltrack(dataset: &Path, out: &Path) -> Result<(), DatasetError> {
    let ds = Dataset::open(dataset)?;
    std::fs::create_dir_all(out).map_err(|e| DatasetError::io(out, e))?;
    let c = ds.conditions();
    if c.cpe.det.len() != 1856 {
        return Err(DatasetError::format(
            dataset.join("conditions/cpe_det.arrow"),
            "cpefast.bin needs 1856 modules",
        ));
    }
    write_file(&out.join("beamspot.bin"), &beamspot_bytes(c))?;
    write_file(&out.join("fedIds.bin"), &fed_ids_bytes(c))?;
    write_file(&out.join("cablingMap.bin"), &cabling_bytes(c))?;
    write_file(&out.join("gain.bin"), &gain_bytes(c))?;
    write_file(&out.join("cpefast.bin"), &cpefast_bytes(c))?;
    let rp = out.join("raw.bin");
    let f = std::fs::File::create(&rp).map_err(|e| DatasetError::io(&rp, e))?;
    let mut w = std::io::BufWriter::new(f);
    for i in 0..ds.n_events() {
        let ev = ds.raw_event(i)?;
        let mut head = Vec::with_capacity(4);
        put_u32(&mut head, ev.len() as u32);
        w.write_all(&head).map_err(|e| DatasetError::io(&rp, e))?;
        for (fed, data) in ev {
            let mut h = Vec::with_capacity(8);
            put_u32(&mut h, fed);
            put_u32(&mut h, data.len() as u32);
            w.write_all(&h).map_err(|e| DatasetError::io(&rp, e))?;
            w.write_all(data).map_err(|e| DatasetError::io(&rp, e))?;
        }
    }
    w.flush().map_err(|e| DatasetError::io(&rp, e))
}

/// Per-event counts of the reference validation files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCounts {
    pub n_modules: u32,
    pub n_digis: u32,
    pub n_clusters: u32,
    pub n_tracks: u32,
    pub n_vertices: u32,
}

/// Writes `digicluster.bin` (3 × u32 per event), `tracks.bin` and `vertices.bin` (u32 per event).
///
/// ```
/// use quiver_datasets::{write_counts_bin, EventCounts};
/// let dir = tempfile::tempdir().unwrap();
/// let c = EventCounts { n_modules: 1800, n_digis: 60_000, n_clusters: 18_000, n_tracks: 900, n_vertices: 40 };
/// write_counts_bin(dir.path(), &[c, c]).unwrap();
/// assert_eq!(std::fs::read(dir.path().join("digicluster.bin")).unwrap().len(), 24);
/// ```
pub fn write_counts_bin(out: &Path, counts: &[EventCounts]) -> Result<(), DatasetError> {
    let (mut dc, mut tr, mut vx) = (Vec::new(), Vec::new(), Vec::new());
    for c in counts {
        put_u32(&mut dc, c.n_modules);
        put_u32(&mut dc, c.n_digis);
        put_u32(&mut dc, c.n_clusters);
        put_u32(&mut tr, c.n_tracks);
        put_u32(&mut vx, c.n_vertices);
    }
    write_file(&out.join("digicluster.bin"), &dc)?;
    write_file(&out.join("tracks.bin"), &tr)?;
    write_file(&out.join("vertices.bin"), &vx)
}
