//! FED framing and raw-word unpacking (reference `SiPixelRawToClusterCUDA.cc`,
//! `ErrorChecker.cc`, `RawToDigi_kernel`).
//!
//! Two phases, as in the reference: first every FED's 64-bit framing is checked and its
//! payload appended to one word stream; then every 32-bit word is decoded into one digi slot.
//! Framing errors therefore precede word errors in [`RawDigis::errors`].
//!
//! The reference trusts its input; this port never reads out of bounds. Where the reference
//! would read outside its buffers or tables we stop and report, with the extension codes of
//! [`error_type`] (≥ 100) or the CMSSW codes 35/36 for impossible link/ROC fields.

use quiver_formats::conditions::{
    CablingMap, CABLING_MAX_SIZE, FED_ID_MIN, MAX_FED, MAX_LINK, MAX_ROC,
};

use super::{LocalError, INVALID_MODULE, MAX_FED_WORDS, MAX_NUM_MODULES};

/// Error codes stored in [`PixelError::error_type`]. 25–40 are the CMSSW codes the reference
/// produces; 100+ are our extensions for damage the reference cannot survive.
pub mod error_type {
    /// Invalid ROC (ROC field 25), counted only if the link's ROC 1 is cabled.
    pub const INVALID_ROC: u8 = 25;
    /// Gap word.
    pub const GAP: u8 = 26;
    /// Dummy word.
    pub const DUMMY: u8 = 27;
    /// FIFO nearly full.
    pub const FIFO_NEARLY_FULL: u8 = 28;
    /// Channel timeout.
    pub const TIMEOUT: u8 = 29;
    /// TBM error trailer (state bits ≠ 1).
    pub const TBM_TRAILER: u8 = 30;
    /// Event number error.
    pub const EVENT_NUMBER: u8 = 31;
    /// Header source id differs from the FED id (processing continues).
    pub const SOURCE_ID: u8 = 32;
    /// A trailer lacks the 0xA marker (the trailer scan stops there).
    pub const TRAILER_MARKER: u8 = 33;
    /// Trailer fragment length ≠ buffer length (processing continues).
    pub const FRAGMENT_LENGTH: u8 = 34;
    /// Link (channel) field outside 1..48 (extension of the reference, which reads garbage).
    pub const INVALID_CHANNEL: u8 = 35;
    /// ROC field 0 or 9..24, or an uncounted 25 (extension; the reference reads garbage).
    pub const INVALID_ROC_ID: u8 = 36;
    /// Invalid dcol/pxid or row/col.
    pub const INVALID_PIXEL: u8 = 37;
    /// CRC-modified bit set in the last word: the whole FED is dropped.
    pub const CRC_MODIFIED: u8 = 39;
    /// TBM trailer with overflow state bits.
    pub const TBM_OVERFLOW: u8 = 40;
    /// A header lacks the 0x5 marker (the reference silently skips the word as a header).
    pub const HEADER_MARKER: u8 = 101;
    /// Buffer size not a multiple of 8: the trailing bytes are ignored.
    pub const SIZE_NOT_MULTIPLE_OF_8: u8 = 102;
    /// FED id outside 1200..1349: the FED is skipped.
    pub const FED_ID_OUT_OF_RANGE: u8 = 103;
    /// Headers and trailers overlap or run off the buffer: the FED is skipped.
    pub const FRAMING_OVERLAP: u8 = 104;
    /// The payload would exceed the event's word capacity: the FED is skipped.
    pub const WORD_CAPACITY: u8 = 105;
    /// Every code above, in increasing order (docs/products.md lists each).
    pub const ALL: [u8; 20] = [
        INVALID_ROC,
        GAP,
        DUMMY,
        FIFO_NEARLY_FULL,
        TIMEOUT,
        TBM_TRAILER,
        EVENT_NUMBER,
        SOURCE_ID,
        TRAILER_MARKER,
        FRAGMENT_LENGTH,
        INVALID_CHANNEL,
        INVALID_ROC_ID,
        INVALID_PIXEL,
        CRC_MODIFIED,
        TBM_OVERFLOW,
        HEADER_MARKER,
        SIZE_NOT_MULTIPLE_OF_8,
        FED_ID_OUT_OF_RANGE,
        FRAMING_OVERLAP,
        WORD_CAPACITY,
    ];
}

/// The reference's `dummyDetId` for errors not attributable to a module.
pub const DUMMY_DET_ID: u32 = 0xffff_ffff;

/// Parameters of the raw-to-digi step.
#[derive(Clone, Debug, PartialEq)]
pub struct RawToDigiConfig {
    /// Skip ROCs flagged in `CablingMap::bad_rocs` (`useQuality`). Default `true`.
    pub use_quality: bool,
    /// Capacity of the event's word stream, in 32-bit words (`MAX_FED_WORDS`). A FED whose
    /// payload would overflow it is skipped with error 105. Default 300 000.
    pub max_words: usize,
}

impl Default for RawToDigiConfig {
    fn default() -> Self {
        Self {
            use_quality: true,
            max_words: MAX_FED_WORDS,
        }
    }
}

/// One decoding error (`PixelErrorCompact` plus the FED-level errors of `ErrorChecker`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PixelError {
    /// Full FED id (e.g. 1200), also for word errors (the reference stores `fed − 1200`).
    pub fed: u32,
    /// The offending word: the 32-bit data word, or the 64-bit framing word for FED-level
    /// errors (0 when the damage is not a word, e.g. a bad size).
    pub word: u64,
    /// DetId of the module, or [`DUMMY_DET_ID`].
    pub raw_id: u32,
    /// One of [`error_type`].
    pub error_type: u8,
}

/// Unpacked digis of one event: one entry per 32-bit payload word.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawDigis {
    /// Module row 0..159 (0 for invalid words).
    pub xx: Vec<u16>,
    /// Module column 0..415.
    pub yy: Vec<u16>,
    /// Raw ADC (8 bit).
    pub adc: Vec<u16>,
    /// detIndex, or [`INVALID_MODULE`] for zero, error, skipped and undecodable words.
    pub module_ind: Vec<u16>,
    /// DetId (0 for invalid words).
    pub raw_id: Vec<u32>,
    /// `row | col << 11 | min(adc, 1023) << 22` (0 for invalid words).
    pub pdigi: Vec<u32>,
    /// Payload word count (`nDigis`): includes error and padding words.
    pub n_digis: u32,
    /// Framing errors (FED order) followed by word errors (word order).
    pub errors: Vec<PixelError>,
}

// Raw data word layout.
const ADC_MASK: u32 = 0xff;
const PXID_SHIFT: u32 = 8;
const PXID_MASK: u32 = 0xff;
const DCOL_SHIFT: u32 = 16;
const DCOL_MASK: u32 = 0x1f;
const ROC_SHIFT: u32 = 21;
const ROC_MASK: u32 = 0x1f;
const LINK_SHIFT: u32 = 26;
const LINK_MASK: u32 = 0x3f;
const L1_ROW_SHIFT: u32 = 8;
const L1_ROW_MASK: u32 = 0x7f;
const L1_COL_SHIFT: u32 = 15;
const L1_COL_MASK: u32 = 0x3f;
/// ROC fields below this are pixel data (the reference's `maxROCIndex`).
const MAX_ROC_INDEX: u32 = 8;

/// Unpack the FED buffers of one event (`(fed id, bytes)` in processing order, normally
/// ascending fed id) into digis.
///
/// Never panics and never reads outside its inputs: damaged FEDs are reported in
/// [`RawDigis::errors`] and the other FEDs are still unpacked. Returns an error only if the
/// cabling map itself is inconsistent (wrong table sizes, or a connected entry reached by the
/// data with a module id ≥ 2000 other than 9999, or a ROC position ≥ 16).
///
/// ```
/// use quiver_reco::local::raw_to_digis::{raw_to_digis, RawToDigiConfig, error_type};
/// use quiver_formats::conditions::{CablingMap, CABLING_MAX_SIZE};
/// let n = CABLING_MAX_SIZE;
/// let cabling = CablingMap {
///     fed: vec![0; n], link: vec![0; n], roc: vec![0; n], raw_id: vec![9999; n],
///     roc_in_det: vec![0; n], module_id: vec![9999; n], bad_rocs: vec![1; n],
///     mod_to_unp: vec![1; n], size: 0,
/// };
/// // A FED of 3 bytes: not even one 64-bit word.
/// let out = raw_to_digis(&[(1200, &[1u8, 2, 3][..])], &cabling, &RawToDigiConfig::default()).unwrap();
/// assert_eq!(out.n_digis, 0);
/// assert_eq!(out.errors[0].error_type, error_type::SIZE_NOT_MULTIPLE_OF_8);
/// ```
pub fn raw_to_digis(
    feds: &[(u32, &[u8])],
    cabling: &CablingMap,
    cfg: &RawToDigiConfig,
) -> Result<RawDigis, LocalError> {
    check_cabling(cabling)?;
    let mut errors = Vec::new();

    // Phase 1: framing. Each accepted FED contributes (fed, first payload byte, n words).
    let mut payloads: Vec<(u32, usize, usize, &[u8])> = Vec::with_capacity(feds.len());
    let mut n_words_total = 0usize;
    for &(fed, bytes) in feds {
        if let Some((start, n32)) = frame_fed(fed, bytes, &mut errors) {
            if n32 > cfg.max_words.saturating_sub(n_words_total) {
                errors.push(fed_error(fed, 0, error_type::WORD_CAPACITY));
                continue;
            }
            payloads.push((fed, start, n32, bytes));
            n_words_total += n32;
        }
    }

    // Phase 2: word decoding.
    let mut out = RawDigis {
        xx: Vec::with_capacity(n_words_total),
        yy: Vec::with_capacity(n_words_total),
        adc: Vec::with_capacity(n_words_total),
        module_ind: Vec::with_capacity(n_words_total),
        raw_id: Vec::with_capacity(n_words_total),
        pdigi: Vec::with_capacity(n_words_total),
        n_digis: n_words_total as u32,
        errors,
    };
    for &(fed, start, n32, bytes) in &payloads {
        let fed_idx = fed - FED_ID_MIN; // range-checked by frame_fed
        for w in bytes[start..start + 4 * n32].chunks_exact(4) {
            let ww = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let d = decode_word(fed, fed_idx, ww, cabling, cfg, &mut out.errors)?;
            out.xx.push(d.row);
            out.yy.push(d.col);
            out.adc.push(d.adc);
            out.module_ind.push(d.module);
            out.raw_id.push(d.raw_id);
            out.pdigi.push(d.pdigi);
        }
    }
    Ok(out)
}

fn check_cabling(c: &CablingMap) -> Result<(), LocalError> {
    let lens = [
        ("cabling.fed", c.fed.len()),
        ("cabling.link", c.link.len()),
        ("cabling.roc", c.roc.len()),
        ("cabling.raw_id", c.raw_id.len()),
        ("cabling.roc_in_det", c.roc_in_det.len()),
        ("cabling.module_id", c.module_id.len()),
        ("cabling.bad_rocs", c.bad_rocs.len()),
        ("cabling.mod_to_unp", c.mod_to_unp.len()),
    ];
    for (name, got) in lens {
        if got != CABLING_MAX_SIZE {
            return Err(LocalError::ConditionsSize {
                name,
                got,
                expected: CABLING_MAX_SIZE,
            });
        }
    }
    Ok(())
}

fn fed_error(fed: u32, word: u64, t: u8) -> PixelError {
    PixelError {
        fed,
        word,
        raw_id: DUMMY_DET_ID,
        error_type: t,
    }
}

fn word64(bytes: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[8 * i..8 * i + 8]);
    u64::from_le_bytes(b)
}

/// Checks one FED's framing. Returns the payload's first byte and its length in
/// 32-bit words, or `None` if the FED contributes nothing; the errors found in its header
/// and trailer words are appended to `errors`. The CPU core and the GPU step's host
/// preparation both frame with it.
///
/// ```
/// use quiver_reco::local::raw_to_digis::frame_fed;
/// // One header (marker 5, source id 1200), two payload words of 64 bits, one trailer
/// // (marker 0xa, 4 words).
/// let words: [u64; 4] = [0x5000_0000_0004_B000, 1, 2, 0xA000_0004_0000_0000];
/// let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
/// let mut errors = Vec::new();
/// assert_eq!(frame_fed(1200, &bytes, &mut errors), Some((8, 4)));
/// assert!(errors.is_empty());
/// // The pilot-blade FED 40 is skipped.
/// assert_eq!(frame_fed(40, &bytes, &mut errors), None);
/// ```
pub fn frame_fed(fed: u32, bytes: &[u8], errors: &mut Vec<PixelError>) -> Option<(usize, usize)> {
    // The pilot-blade FED is skipped silently, as in the reference.
    if fed == 40 {
        return None;
    }
    if !(FED_ID_MIN..FED_ID_MIN + MAX_FED).contains(&fed) {
        errors.push(fed_error(fed, 0, error_type::FED_ID_OUT_OF_RANGE));
        return None;
    }
    if !bytes.len().is_multiple_of(8) {
        errors.push(fed_error(
            fed,
            bytes.len() as u64,
            error_type::SIZE_NOT_MULTIPLE_OF_8,
        ));
    }
    let n_words = bytes.len() / 8;
    if n_words == 0 {
        return None;
    }

    // CRC-modified bit of the last word drops the whole FED.
    let last = word64(bytes, n_words - 1);
    if (last >> 2) & 1 != 0 {
        errors.push(fed_error(fed, last, error_type::CRC_MODIFIED));
        return None;
    }

    // Headers, from the front, while "more headers" is set. A word without the start marker
    // still counts as a header and ends the scan (reference behaviour), reported here.
    let mut header = 0usize;
    loop {
        let h = word64(bytes, header);
        let sourceid = h as u32;
        let eventid = (h >> 32) as u32;
        if (eventid >> 28) & 0xf != 0x5 {
            errors.push(fed_error(fed, h, error_type::HEADER_MARKER));
            break;
        }
        if (sourceid >> 8) & 0xfff != fed {
            errors.push(fed_error(fed, h, error_type::SOURCE_ID));
        }
        if (sourceid >> 3) & 1 == 0 {
            break;
        }
        if header + 1 >= n_words {
            errors.push(fed_error(fed, h, error_type::FRAMING_OVERLAP));
            return None;
        }
        header += 1;
    }

    // Trailers, from the back, while "more trailers" is set; a bad marker stops the scan and
    // the failing word bounds the payload.
    let mut trailer = n_words - 1;
    loop {
        let t = word64(bytes, trailer);
        let conscheck = t as u32;
        let eventsize = (t >> 32) as u32;
        if (eventsize >> 28) & 0xf != 0xa {
            errors.push(fed_error(fed, t, error_type::TRAILER_MARKER));
            break;
        }
        if (eventsize & 0x00ff_ffff) as usize != n_words {
            errors.push(fed_error(fed, t, error_type::FRAGMENT_LENGTH));
        }
        if (conscheck >> 3) & 1 == 0 {
            break;
        }
        if trailer == 0 {
            errors.push(fed_error(fed, t, error_type::FRAMING_OVERLAP));
            return None;
        }
        trailer -= 1;
    }

    if trailer <= header {
        // Header and trailer are the same word or cross: no payload to read.
        errors.push(fed_error(fed, 0, error_type::FRAMING_OVERLAP));
        return None;
    }
    // Payload in whole 64-bit words, so its 32-bit length is always even.
    Some((8 * (header + 1), 2 * (trailer - header - 1)))
}

struct Decoded {
    row: u16,
    col: u16,
    adc: u16,
    module: u16,
    raw_id: u32,
    pdigi: u32,
}

const INVALID: Decoded = Decoded {
    row: 0,
    col: 0,
    adc: 0,
    module: INVALID_MODULE,
    raw_id: 0,
    pdigi: 0,
};

/// Cabling index for a fed byte, link 1..48 and ROC 1..8 (`conditions::cabling_index`).
fn cab_index(fed_idx: u32, link: u32, roc: u32) -> Option<usize> {
    if (1..=MAX_LINK).contains(&link) && (1..=MAX_ROC).contains(&roc) && fed_idx < MAX_FED {
        Some((fed_idx * MAX_LINK * MAX_ROC + (link - 1) * MAX_ROC + (roc - 1)) as usize)
    } else {
        None
    }
}

/// `checkROC`: the error type of an error word (ROC field ≥ 25), or 0 for data.
fn check_roc(ww: u32, fed_idx: u32, link: u32, cabling: &CablingMap) -> u8 {
    let t = (ww >> ROC_SHIFT) & ROC_MASK;
    match t {
        25 => {
            // Counted only when the cabling knows ROC 1 of this link (as the reference,
            // the test is skipped for the very first entry and for entries past `size`).
            if let Some(i) = cab_index(fed_idx, link, 1) {
                if i > 0
                    && i < cabling.size as usize
                    && !(cabling.link[i] == link && cabling.roc[i] == 1)
                {
                    return 0;
                }
            }
            25
        }
        26..=29 | 31 => t as u8,
        30 => {
            // TBM trailer: state bits 1 mean overflow (40), 8 the ROC count (30).
            if (ww >> 8) & 0xf == 1 {
                error_type::TBM_OVERFLOW
            } else {
                error_type::TBM_TRAILER
            }
        }
        _ => 0,
    }
}

/// `getErrRawID`: the module an error word belongs to, or [`DUMMY_DET_ID`].
fn err_raw_id(fed_idx: u32, ww: u32, t: u8, cabling: &CablingMap) -> u32 {
    let lookup = |link: u32, roc: u32| -> u32 {
        match cab_index(fed_idx, link, roc) {
            Some(i) if cabling.raw_id[i] != 9999 => cabling.raw_id[i],
            _ => DUMMY_DET_ID,
        }
    };
    let link = (ww >> LINK_SHIFT) & LINK_MASK;
    match t {
        25 | 30 | 31 | 36 | 40 => lookup(link, 1),
        29 => {
            // Timeout: the channel is encoded as one-hot-ish data bits and a block number.
            let bit = |s: u32| ((ww >> s) & 1) as i32;
            let local_ch = bit(0) + 2 * bit(1) + 3 * bit(2) + 4 * bit(3) + 5 * bit(4);
            let block = ((ww >> 8) & 0x7) as i32;
            let chan = if block % 2 == 0 {
                (block / 2) * 9 + local_ch
            } else {
                ((block - 1) / 2) * 9 + 4 + local_ch
            };
            if !(1..=36).contains(&chan) {
                return DUMMY_DET_ID;
            }
            lookup(chan as u32, 1)
        }
        37 | 38 => lookup(link, (ww >> ROC_SHIFT) & ROC_MASK),
        _ => DUMMY_DET_ID,
    }
}

/// Decodes one 32-bit word (`RawToDigi_kernel` body).
fn decode_word(
    fed: u32,
    fed_idx: u32,
    ww: u32,
    cabling: &CablingMap,
    cfg: &RawToDigiConfig,
    errors: &mut Vec<PixelError>,
) -> Result<Decoded, LocalError> {
    if ww == 0 {
        return Ok(INVALID); // padding / noise marker
    }
    let link = (ww >> LINK_SHIFT) & LINK_MASK;
    let roc = (ww >> ROC_SHIFT) & ROC_MASK;
    let mut push = |raw_id: u32, t: u8| {
        errors.push(PixelError {
            fed,
            word: ww as u64,
            raw_id,
            error_type: t,
        })
    };

    let etype = check_roc(ww, fed_idx, link, cabling);
    if roc >= MAX_ROC_INDEX && etype != 0 {
        push(err_raw_id(fed_idx, ww, etype, cabling), etype);
        return Ok(INVALID);
    }
    // Fields the reference would use to index outside the link's 8 ROCs.
    if !(1..=MAX_LINK).contains(&link) {
        push(DUMMY_DET_ID, error_type::INVALID_CHANNEL);
        return Ok(INVALID);
    }
    let Some(index) = cab_index(fed_idx, link, roc) else {
        if roc == 25 {
            // An invalid-ROC word on an uncabled link: the reference does not count it.
            return Ok(INVALID);
        }
        push(
            err_raw_id(fed_idx, ww, error_type::INVALID_ROC_ID, cabling),
            error_type::INVALID_ROC_ID,
        );
        return Ok(INVALID);
    };

    if cfg.use_quality && cabling.bad_rocs[index] != 0 {
        return Ok(INVALID);
    }
    if cabling.mod_to_unp[index] != 0 {
        return Ok(INVALID);
    }
    let raw_id = cabling.raw_id[index];
    let roc_in_det = cabling.roc_in_det[index];
    let module_id = cabling.module_id[index];
    if roc_in_det >= 16
        || (module_id as usize >= MAX_NUM_MODULES && module_id != INVALID_MODULE as u32)
    {
        return Err(LocalError::BadCabling {
            index,
            module_id,
            roc_in_det,
        });
    }

    let barrel = (raw_id >> 25) & 0x7 == 1;
    let (layer, side) = if barrel {
        let module = (raw_id >> 2) & 0x3ff;
        ((raw_id >> 20) & 0xf, if module < 5 { -1 } else { 1 })
    } else {
        let panel = (raw_id >> 10) & 0x3;
        (0, if panel == 1 { -1 } else { 1 })
    };

    let (lr, lc) = if layer == 1 {
        let col = (ww >> L1_COL_SHIFT) & L1_COL_MASK;
        let row = (ww >> L1_ROW_SHIFT) & L1_ROW_MASK;
        if !(row < 80 && col < 52) {
            push(raw_id, error_type::INVALID_PIXEL);
            return Ok(INVALID);
        }
        (row, col)
    } else {
        let dcol = (ww >> DCOL_SHIFT) & DCOL_MASK;
        let pxid = (ww >> PXID_SHIFT) & PXID_MASK;
        if !(dcol < 26 && (2..162).contains(&pxid)) {
            push(raw_id, error_type::INVALID_PIXEL);
            return Ok(INVALID);
        }
        (80 - pxid / 2, dcol * 2 + pxid % 2)
    };

    let (row, col) = frame_conversion(barrel, side, layer, roc_in_det, lr, lc);
    let adc = ww & ADC_MASK;
    Ok(Decoded {
        row: row as u16,
        col: col as u16,
        adc: adc as u16,
        module: module_id as u16,
        raw_id,
        pdigi: row | (col << 11) | (adc.min(1023) << 22),
    })
}

/// ROC-local (row < 80, col < 52) → module pixel, for `roc_in_det` < 16 (checked with the
/// cabling). Orientation B: barrel −z outside layer 1, and all FPix; A otherwise.
fn frame_conversion(
    barrel: bool,
    side: i32,
    layer: u32,
    roc_in_det: u32,
    lr: u32,
    lc: u32,
) -> (u32, u32) {
    let orientation_b = !barrel || (side == -1 && layer != 1);
    if orientation_b {
        if roc_in_det < 8 {
            (lr, (8 - roc_in_det) * 52 - 1 - lc)
        } else {
            (159 - lr, (roc_in_det - 8) * 52 + lc)
        }
    } else if roc_in_det < 8 {
        (159 - lr, roc_in_det * 52 + lc)
    } else {
        (lr, (16 - roc_in_det) * 52 - 1 - lc)
    }
}

#[cfg(test)]
mod tests;
