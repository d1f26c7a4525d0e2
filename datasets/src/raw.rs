//! FED raw-data encoding of digis, exactly as the reference RawToDigi decodes it
//! (docs/datasets.md): per FED a 64-bit header, 32-bit data
//! words in pairs (zero-padded), a 64-bit trailer; all words of a module contiguous.

use crate::builders::ReadoutMap;
use crate::generator::Digi;
use rand::Rng;

/// Shifts of the 32-bit data word fields.
pub const LINK_SHIFT: u32 = 26;
pub const ROC_SHIFT: u32 = 21;
pub const DCOL_SHIFT: u32 = 16;
pub const PXID_SHIFT: u32 = 8;
pub const L1_COL_SHIFT: u32 = 15;
pub const L1_ROW_SHIFT: u32 = 8;

/// How the reference maps ROC-local pixels to module pixels (`frameConversion`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Orientation {
    /// Barrel +z side (module ≥ 5) of layers 2–4 and every layer-1 module.
    A,
    /// Barrel −z side of layers 2–4 and every forward panel.
    B,
}

/// Orientation and "layer-1 word format" the decoder derives from a rawId.
pub fn orientation(raw_id: u32) -> (Orientation, bool) {
    let barrel = (raw_id >> 25) & 7 == 1;
    if barrel {
        let layer = (raw_id >> 20) & 0xF;
        let module = (raw_id >> 2) & 0x3FF;
        let o = if module >= 5 || layer == 1 {
            Orientation::A
        } else {
            Orientation::B
        };
        (o, layer == 1)
    } else {
        (Orientation::B, false)
    }
}

/// Module pixel (row 0..159, col 0..415) → (rocInDet 0..15, ROC-local row, ROC-local col):
/// the inverse of the reference's frame conversion.
///
/// ```
/// use quiver_datasets::raw::{to_roc, from_roc, Orientation};
/// for o in [Orientation::A, Orientation::B] {
///     let (roc, lr, lc) = to_roc(o, 100, 200);
///     assert_eq!(from_roc(o, roc, lr, lc), (100, 200));
/// }
/// ```
#[inline]
pub fn to_roc(o: Orientation, row: u16, col: u16) -> (u32, u32, u32) {
    let (row, col) = (row as u32, col as u32);
    match (o, row >= 80) {
        (Orientation::A, true) => {
            let roc = col / 52;
            (roc, 159 - row, col - 52 * roc)
        }
        (Orientation::A, false) => {
            let roc = 15 - col / 52;
            (roc, row, 52 * (16 - roc) - 1 - col)
        }
        (Orientation::B, false) => {
            let roc = 7 - col / 52;
            (roc, row, 52 * (8 - roc) - 1 - col)
        }
        (Orientation::B, true) => {
            let roc = 8 + col / 52;
            (roc, 159 - row, col - 52 * (roc - 8))
        }
    }
}

/// ROC-local pixel → module pixel, as the reference decodes it.
#[inline]
pub fn from_roc(o: Orientation, roc: u32, lr: u32, lc: u32) -> (u16, u16) {
    let (row, col) = match (o, roc < 8) {
        (Orientation::A, true) => (159 - lr, 52 * roc + lc),
        (Orientation::A, false) => (lr, 52 * (16 - roc) - 1 - lc),
        (Orientation::B, true) => (lr, 52 * (8 - roc) - 1 - lc),
        (Orientation::B, false) => (159 - lr, 52 * (roc - 8) + lc),
    };
    (row as u16, col as u16)
}

/// FED header (64-bit): low half `bx<<20 | fed<<8 | version<<4`, high half
/// `0x5<<28 | evType<<24 | lvl1`.
pub fn fed_header(fed: u32, lvl1: u32, bx: u32) -> u64 {
    let low = (bx & 0xFFF) << 20 | (fed & 0xFFF) << 8 | 1 << 4;
    let high = 0x5u32 << 28 | 1 << 24 | (lvl1 & 0xFF_FFFF);
    (high as u64) << 32 | low as u64
}

/// FED trailer (64-bit): high half `0xA<<28 | nWords64`, low half `crc<<16 | tts<<4`
/// (CRC-modified and more-trailers bits clear).
pub fn fed_trailer(n_words64: u32, crc: u16) -> u64 {
    let low = (crc as u32) << 16 | 0x8 << 4;
    let high = 0xAu32 << 28 | (n_words64 & 0xFF_FFFF);
    (high as u64) << 32 | low as u64
}

/// The 32-bit data word of one digi.
#[inline]
pub fn data_word(layer1: bool, link: u32, roc: u32, lr: u32, lc: u32, adc: u8) -> u32 {
    let head = link << LINK_SHIFT | roc << ROC_SHIFT;
    if layer1 {
        head | lc << L1_COL_SHIFT | lr << L1_ROW_SHIFT | adc as u32
    } else {
        head | (lc / 2) << DCOL_SHIFT | (2 * (80 - lr) + lc % 2) << PXID_SHIFT | adc as u32
    }
}

/// What fault injection did to an event (truth of the error path).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// (fed, 32-bit word index within the payload, word) of injected error words.
    pub error_words: Vec<(u32, u32, u32)>,
    /// FEDs whose payload was truncated (trailer length then disagrees with the size).
    pub truncated: Vec<u32>,
    /// FEDs with a corrupted header marker.
    pub bad_header: Vec<u32>,
    /// FEDs with a corrupted trailer marker.
    pub bad_trailer: Vec<u32>,
    /// (fed, payload word index, bit) of flipped data bits.
    pub flipped_bits: Vec<(u32, u32, u32)>,
}

/// Encodes the digis of one event (sorted by module) into one byte buffer per FED of
/// `ro.feds`, appended to `out` in FED order. `lvl1` is the event number written in the header.
/// Returns the total number of 32-bit payload words (the reference's `nDigis`).
///
/// ```
/// use quiver_datasets::{builders::*, generator::Digi, geometry::Geometry, raw::encode_event};
/// let geom = Geometry::phase1();
/// let (map, feds) = build_cabling(&geom);
/// let ro = ReadoutMap::new(&map, &feds);
/// let raw_ids: Vec<u32> = geom.modules.iter().map(|m| m.raw_id).collect();
/// let digis = [Digi { module: 0, row: 5, col: 7, adc: 100, electrons: 9000.0 }];
/// let mut out = Vec::new();
/// let words = encode_event(&ro, &raw_ids, &digis, 1, &mut out);
/// assert_eq!(words, 2); // one data word + one zero pad
/// assert_eq!(out.len(), feds.len());
/// assert_eq!(out[0].1.len(), 8 + 8 + 8); // header, one word pair, trailer
/// ```
pub fn encode_event(
    ro: &ReadoutMap,
    raw_ids: &[u32],
    digis: &[Digi],
    lvl1: u32,
    out: &mut Vec<(u32, Vec<u8>)>,
) -> usize {
    // digi range of every module
    let n_mod = raw_ids.len();
    let mut start = vec![0u32; n_mod + 1];
    for d in digis {
        start[d.module as usize + 1] += 1;
    }
    for m in 0..n_mod {
        start[m + 1] += start[m];
    }
    let mut total = 0;
    let mut words: Vec<(u32, u32)> = Vec::new();
    for (fi, &fed) in ro.feds.iter().enumerate() {
        let mut payload: Vec<u32> = Vec::new();
        for &m in &ro.fed_modules[fi] {
            let (o, l1) = orientation(raw_ids[m as usize]);
            words.clear();
            for d in &digis[start[m as usize] as usize..start[m as usize + 1] as usize] {
                let (k, lr, lc) = to_roc(o, d.row, d.col);
                let (f, link, roc) = ro.path[m as usize * 16 + k as usize];
                if f != fed {
                    continue; // not read out by this FED (unconnected ROC)
                }
                words.push(((link << 3) | roc, data_word(l1, link, roc, lr, lc, d.adc)));
            }
            // readout order: link, then ROC, then pixel order within the ROC
            words.sort_by_key(|w| w.0);
            payload.extend(words.iter().map(|w| w.1));
        }
        if payload.len() % 2 == 1 {
            payload.push(0);
        }
        total += payload.len();
        out.push((fed, frame_fed(fed, lvl1, &payload)));
    }
    total
}

/// Wraps a payload of 32-bit words (even count) with header and trailer.
pub fn frame_fed(fed: u32, lvl1: u32, payload: &[u32]) -> Vec<u8> {
    let n64 = payload.len() / 2 + 2;
    let mut buf = Vec::with_capacity(n64 * 8);
    buf.extend_from_slice(&fed_header(fed, lvl1, lvl1.wrapping_mul(7) % 3564).to_le_bytes());
    for w in payload {
        buf.extend_from_slice(&w.to_le_bytes());
    }
    buf.extend_from_slice(&fed_trailer(n64 as u32, 0).to_le_bytes());
    buf
}

/// Corrupts a fraction of the FEDs of one event (error words with ROC 25–31, truncation, bad
/// header/trailer markers, flipped data bits) and records what was done.
pub fn inject_faults<R: Rng>(
    rng: &mut R,
    fraction: f64,
    feds: &mut [(u32, Vec<u8>)],
    faults: &mut Faults,
) {
    if fraction <= 0.0 {
        return;
    }
    for (fed, buf) in feds.iter_mut() {
        if rng.random::<f64>() >= fraction {
            continue;
        }
        let n_payload = (buf.len() / 4).saturating_sub(4) as u32;
        match rng.random_range(0..5u32) {
            0 => {
                // Replace a word pair with error words (types 25–31) of link 1.
                if n_payload >= 2 {
                    let i = 2 * rng.random_range(0..n_payload / 2);
                    for k in 0..2 {
                        let t = rng.random_range(25..=31u32);
                        let w = 1 << LINK_SHIFT | t << ROC_SHIFT | rng.random_range(0..(1 << 11));
                        let off = 8 + 4 * (i + k) as usize;
                        buf[off..off + 4].copy_from_slice(&w.to_le_bytes());
                        faults.error_words.push((*fed, i + k, w));
                    }
                }
            }
            1 => {
                // Drop the last payload pair but keep the trailer's original length.
                if n_payload >= 2 {
                    let len = buf.len();
                    let trailer: [u8; 8] = buf[len - 8..].try_into().expect("8 bytes");
                    buf.truncate(len - 16);
                    buf.extend_from_slice(&trailer);
                    faults.truncated.push(*fed);
                }
            }
            2 => {
                buf[7] ^= 0x30; // header marker 0x5 → 0x6
                faults.bad_header.push(*fed);
            }
            3 => {
                let len = buf.len();
                buf[len - 1] ^= 0x30; // trailer marker 0xA → 0x9
                faults.bad_trailer.push(*fed);
            }
            _ => {
                if n_payload >= 1 {
                    let i = rng.random_range(0..n_payload);
                    let bit = rng.random_range(0..32u32);
                    let off = 8 + 4 * i as usize + (bit / 8) as usize;
                    buf[off] ^= 1 << (bit % 8);
                    faults.flipped_bits.push((*fed, i, bit));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roc_mapping_is_a_bijection() {
        for o in [Orientation::A, Orientation::B] {
            let mut seen = vec![false; 16 * 80 * 52];
            for row in 0..160u16 {
                for col in 0..416u16 {
                    let (roc, lr, lc) = to_roc(o, row, col);
                    assert!(roc < 16 && lr < 80 && lc < 52);
                    assert_eq!(from_roc(o, roc, lr, lc), (row, col));
                    let i = (roc * 80 + lr) * 52 + lc;
                    assert!(!seen[i as usize]);
                    seen[i as usize] = true;
                }
            }
        }
    }

    #[test]
    fn header_trailer_fields() {
        let h = fed_header(1234, 77, 100);
        assert_eq!(h >> 60, 0x5);
        assert_eq!((h >> 8) & 0xFFF, 1234);
        assert_eq!(h & 0x8, 0);
        let t = fed_trailer(42, 0xBEEF);
        assert_eq!(t >> 60, 0xA);
        assert_eq!((t >> 32) & 0xFF_FFFF, 42);
        assert_eq!(t & 0xC, 0);
    }
}
