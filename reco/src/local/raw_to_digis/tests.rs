use super::error_type as et;
use super::*;
use crate::local::test_support::*;
use proptest::prelude::*;

fn run(feds: &[(u32, Vec<u8>)]) -> RawDigis {
    let refs: Vec<(u32, &[u8])> = feds.iter().map(|(f, b)| (*f, b.as_slice())).collect();
    raw_to_digis(&refs, test_cabling(), &RawToDigiConfig::default()).unwrap()
}

fn types(d: &RawDigis) -> Vec<u8> {
    d.errors.iter().map(|e| e.error_type).collect()
}

/// Random pixels on every test module (L1 ±z, L2 ±z, L4, FPix panels) survive
/// encode → decode, which checks the frame conversion in both orientations.
#[test]
fn round_trip_all_orientations() {
    let mut rng = SplitMix(7);
    let mut pixels = Vec::new();
    for m in test_modules() {
        for _ in 0..300 {
            let (row, col, adc) = (
                rng.below(160) as u32,
                rng.below(416) as u32,
                1 + rng.below(255) as u32,
            );
            pixels.push((m.det_index, row, col, adc));
        }
    }
    // Corner pixels of every ROC quadrant.
    for m in test_modules() {
        for &(r, c) in &[
            (0, 0),
            (159, 415),
            (79, 51),
            (80, 52),
            (0, 415),
            (159, 0),
            (79, 208),
            (80, 207),
        ] {
            pixels.push((m.det_index, r, c, 9));
        }
    }
    let feds = encode_event(&pixels);
    let d = run(&feds);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    let valid: Vec<(u16, u32, u32, u32)> = (0..d.n_digis as usize)
        .filter(|&i| d.module_ind[i] != INVALID_MODULE)
        .map(|i| {
            (
                d.module_ind[i],
                d.xx[i] as u32,
                d.yy[i] as u32,
                d.adc[i] as u32,
            )
        })
        .collect();
    // encode_event keeps the pixel order within a FED and FEDs ascending.
    let mut expected = pixels.clone();
    expected.sort_by_key(|p| module(p.0).fed);
    assert_eq!(valid, expected);
    for i in 0..d.n_digis as usize {
        if d.module_ind[i] != INVALID_MODULE {
            let m = module(d.module_ind[i]);
            assert_eq!(d.raw_id[i], m.raw_id);
            assert_eq!(
                d.pdigi[i],
                d.xx[i] as u32 | (d.yy[i] as u32) << 11 | (d.adc[i] as u32) << 22
            );
        }
    }
    let n: usize = feds.iter().map(|(_, b)| b.len() / 4 - 4).sum();
    assert_eq!(d.n_digis as usize, n);
    assert_eq!(d.xx.len(), n);
}

fn err_word(link: u32, roc: u32, low: u32) -> u32 {
    (link << 26) | (roc << 21) | low
}

#[test]
fn every_error_word_type() {
    let m3 = module(3); // FED 1200, links 1-2, L1
    let m100 = module(100); // FED 1200, links 5-6, L2
    let words = vec![
        err_word(m3.base_link, 25, 0),
        err_word(m3.base_link, 26, 0),
        err_word(m3.base_link, 27, 0),
        err_word(m3.base_link, 28, 0),
        err_word(0, 29, 0b1), // timeout: block 0, channel 1
        err_word(m100.base_link, 30, 8 << 8),
        err_word(m100.base_link, 30, 1 << 8), // overflow → 40
        err_word(m100.base_link, 31, 0),
        err_word(m100.base_link, 1, 0 << 8), // pxid 0 → 37
        err_word(m100.base_link, 1, (26 << 16) | (4 << 8)), // dcol 26 → 37
        err_word(m3.base_link, 1, 80 << 8),  // L1 row 80 → 37
        err_word(0, 1, 4 << 8),              // link 0 → 35
        err_word(m100.base_link, 0, 4 << 8), // ROC 0 → 36
        err_word(m100.base_link, 12, 4 << 8), // ROC 12 → 36
        encode_pixel(&m100, 10, 20, 30),     // one good pixel
    ];
    let d = run(&[(1200, build_fed(1200, &words))]);
    assert_eq!(
        types(&d),
        vec![25, 26, 27, 28, 29, 30, 40, 31, 37, 37, 37, 35, 36, 36]
    );
    let raw = |i: usize| d.errors[i].raw_id;
    assert_eq!(raw(0), m3.raw_id); // 25: link's ROC 1
    assert_eq!(raw(1), DUMMY_DET_ID); // 26: no module
    assert_eq!(raw(4), m3.raw_id); // 29: channel 1 = link 1
    assert_eq!(raw(5), m100.raw_id);
    assert_eq!(raw(6), m100.raw_id);
    assert_eq!(raw(8), m100.raw_id); // 37 carries the pixel's module
    assert_eq!(raw(10), m3.raw_id);
    assert_eq!(raw(11), DUMMY_DET_ID);
    assert!(d.errors.iter().all(|e| e.fed == 1200));
    assert_eq!(d.errors[0].word, words[0] as u64);
    // Error words occupy digi slots but are invalid; the pixel decodes.
    assert_eq!(d.n_digis, 16);
    let valid: Vec<usize> = (0..16)
        .filter(|&i| d.module_ind[i] != INVALID_MODULE)
        .collect();
    assert_eq!(valid, vec![14]);
    assert_eq!((d.xx[14], d.yy[14], d.adc[14]), (10, 20, 30));
}

#[test]
fn invalid_roc_25_not_counted_on_uncabled_link() {
    let mut c = test_cabling().clone();
    let i = quiver_formats::conditions::cabling_index(1200, 30, 1);
    c.link[i] = 0; // the cabling does not know ROC 1 of link 30
    let fed = build_fed(1200, &[err_word(30, 25, 0), err_word(29, 25, 0)]);
    let d = raw_to_digis(&[(1200, &fed[..])], &c, &RawToDigiConfig::default()).unwrap();
    assert_eq!(types(&d), vec![25]);
    assert_eq!(d.errors[0].word, err_word(29, 25, 0) as u64);
}

#[test]
fn bad_and_unpacked_rocs_are_skipped() {
    let m = module(107);
    let w = encode_pixel(&m, 100, 10, 50);
    let mut c = test_cabling().clone();
    let link = (w >> 26) & 0x3f;
    let roc = (w >> 21) & 0x1f;
    c.bad_rocs[quiver_formats::conditions::cabling_index(m.fed, link, roc)] = 1;
    let fed = build_fed(m.fed, &[w]);
    let d = raw_to_digis(&[(m.fed, &fed[..])], &c, &RawToDigiConfig::default()).unwrap();
    assert_eq!(d.module_ind[0], INVALID_MODULE);
    let no_q = RawToDigiConfig {
        use_quality: false,
        ..Default::default()
    };
    let d = raw_to_digis(&[(m.fed, &fed[..])], &c, &no_q).unwrap();
    assert_eq!(d.module_ind[0], 107);
    assert!(d.errors.is_empty());
}

fn set_word(buf: &mut [u8], i: usize, f: impl Fn(u64) -> u64) {
    let v = f(u64::from_le_bytes(
        buf[8 * i..8 * i + 8].try_into().unwrap(),
    ));
    buf[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
}

/// Each framing fault is reported; a damaged FED never stops the others.
#[test]
fn fed_framing_faults() {
    let good_pix = encode_pixel(&module(1201), 5, 6, 7); // FED 1201
    let good = build_fed(1201, &[good_pix]);
    let base = build_fed(
        1200,
        &[
            encode_pixel(&module(100), 1, 2, 3),
            encode_pixel(&module(100), 4, 5, 6),
        ],
    );
    let last = base.len() / 8 - 1;
    let check = |bad: Vec<u8>, want: &[u8], payload_words: u32| {
        let d = run(&[(1200, bad), (1201, good.clone())]);
        assert_eq!(types(&d), want);
        assert_eq!(
            d.n_digis,
            payload_words + 2,
            "payload of the damaged FED + 2 of the good one"
        );
        let n = d.n_digis as usize;
        assert_eq!(
            (d.module_ind[n - 2], d.xx[n - 2]),
            (1201, 5),
            "good FED still decoded"
        );
    };
    // CRC-modified bit: FED dropped.
    let mut b = base.clone();
    set_word(&mut b, last, |w| w | 4);
    check(b, &[et::CRC_MODIFIED], 0);
    // Source id differs: reported, decoded.
    let mut b = base.clone();
    set_word(&mut b, 0, |w| (w & !(0xfff << 8)) | (1300 << 8));
    check(b, &[et::SOURCE_ID], 2);
    // Header marker missing: reported, that word still counts as the header.
    let mut b = base.clone();
    set_word(&mut b, 0, |w| w & !(0xf << 60));
    check(b, &[et::HEADER_MARKER], 2);
    // Trailer marker missing: reported; the bad word bounds the payload.
    let mut b = base.clone();
    set_word(&mut b, last, |w| w & !(0xf << 60));
    check(b, &[et::TRAILER_MARKER], 2);
    // Fragment length wrong.
    let mut b = base.clone();
    set_word(&mut b, last, |w| (w & !(0xff_ffff << 32)) | (7 << 32));
    check(b, &[et::FRAGMENT_LENGTH], 2);
    // Size not a multiple of 8: trailing bytes dropped, then the trailer is the wrong word.
    let mut b = base.clone();
    b.extend_from_slice(&[1, 2, 3]);
    check(b, &[et::SIZE_NOT_MULTIPLE_OF_8], 2);
    let mut b = base.clone();
    b.truncate(b.len() - 3);
    let d = run(&[(1200, b), (1201, good.clone())]);
    assert_eq!(
        &types(&d)[..2],
        &[et::SIZE_NOT_MULTIPLE_OF_8, et::TRAILER_MARKER]
    );
    // A single word: header and trailer coincide.
    check(
        base[..8].to_vec(),
        &[et::TRAILER_MARKER, et::FRAMING_OVERLAP],
        0,
    );
    // More-headers bit on every word: headers run off the buffer.
    let mut b = base.clone();
    for i in 0..=last {
        set_word(&mut b, i, |w| {
            (w & !(0xf << 60)) | (0x5 << 60) | 8 | (1200 << 8)
        });
    }
    let d = run(&[(1200, b), (1201, good.clone())]);
    assert!(types(&d).contains(&et::FRAMING_OVERLAP));
    // More-trailers bit everywhere: trailers run off the front.
    let mut b = base.clone();
    for i in 0..=last {
        set_word(&mut b, i, |w| (w & !(0xf << 60)) | (0xa << 60) | 8);
    }
    let d = run(&[(1200, b), (1201, good.clone())]);
    assert!(types(&d).contains(&et::FRAMING_OVERLAP));
    // Empty FED: nothing to do, nothing wrong.
    check(Vec::new(), &[], 0);
    // FED id out of range: skipped.
    let d = run(&[
        (1350, base.clone()),
        (1199, base.clone()),
        (1201, good.clone()),
    ]);
    assert_eq!(
        types(&d),
        vec![et::FED_ID_OUT_OF_RANGE, et::FED_ID_OUT_OF_RANGE]
    );
    assert_eq!(d.n_digis, 2);
    // Capacity: the FED that does not fit is skipped.
    let small = RawToDigiConfig {
        max_words: 3,
        ..Default::default()
    };
    let refs = [(1200, &base[..]), (1201, &good[..])];
    let d = raw_to_digis(&refs, test_cabling(), &small).unwrap();
    assert_eq!(types(&d), vec![et::WORD_CAPACITY]);
    assert_eq!(d.n_digis, 2);
}

#[test]
fn bad_cabling_is_an_error() {
    let mut c = test_cabling().clone();
    c.raw_id.pop();
    assert!(matches!(
        raw_to_digis(&[], &c, &RawToDigiConfig::default()),
        Err(LocalError::ConditionsSize {
            name: "cabling.raw_id",
            ..
        })
    ));
    let m = module(107);
    let w = encode_pixel(&m, 100, 10, 50);
    let mut c = test_cabling().clone();
    let i = quiver_formats::conditions::cabling_index(m.fed, (w >> 26) & 0x3f, (w >> 21) & 0x1f);
    c.roc_in_det[i] = 16;
    let fed = build_fed(m.fed, &[w]);
    assert!(matches!(
        raw_to_digis(&[(m.fed, &fed[..])], &c, &RawToDigiConfig::default()),
        Err(LocalError::BadCabling { .. })
    ));
}

/// A valid event of random pixels on random test modules, as FED buffers.
fn random_event(rng: &mut SplitMix) -> Vec<(u32, Vec<u8>)> {
    let mods = test_modules();
    let n = rng.below(40) as usize;
    let pixels: Vec<_> = (0..n)
        .map(|_| {
            let m = &mods[rng.below(mods.len() as u64) as usize];
            (
                m.det_index,
                rng.below(160) as u32,
                rng.below(416) as u32,
                rng.below(256) as u32,
            )
        })
        .collect();
    let mut feds = encode_event(&pixels);
    if rng.below(4) == 0 {
        feds.push((1200 + rng.below(2) as u32, Vec::new()));
    }
    feds
}

/// Applies one of several kinds of damage; returns the error types it must produce.
fn mutate(rng: &mut SplitMix, feds: &mut Vec<(u32, Vec<u8>)>, kind: u8) -> Vec<u8> {
    if feds.is_empty() {
        feds.push((1200, build_fed(1200, &[])));
    }
    let k = rng.below(feds.len() as u64) as usize;
    let buf = &mut feds[k].1;
    match kind {
        0 => {
            // truncate at any byte
            let at = rng.below(buf.len() as u64 + 1) as usize;
            buf.truncate(at);
            if !at.is_multiple_of(8) {
                vec![et::SIZE_NOT_MULTIPLE_OF_8]
            } else {
                vec![]
            }
        }
        1 => {
            // flip random bits anywhere
            for _ in 0..=rng.below(8) {
                if !buf.is_empty() {
                    let i = rng.below(buf.len() as u64) as usize;
                    buf[i] ^= 1 << rng.below(8);
                }
            }
            vec![]
        }
        2 => {
            // garbage 32-bit words inside the payload
            let n = buf.len() / 4;
            if n > 4 {
                for _ in 0..=rng.below(6) {
                    let i = 2 + rng.below(n as u64 - 4) as usize;
                    buf[4 * i..4 * i + 4].copy_from_slice(&(rng.next() as u32).to_le_bytes());
                }
            }
            vec![]
        }
        3 => {
            // wrong fragment length in the trailer
            if buf.len() >= 16 {
                let l = buf.len() - 8;
                let v = u64::from_le_bytes(buf[l..].try_into().unwrap());
                let bad = (buf.len() / 8) as u64 + 1 + rng.below(1000);
                let v = (v & !(0xff_ffff << 32)) | (bad << 32);
                buf[l..].copy_from_slice(&v.to_le_bytes());
                vec![et::FRAGMENT_LENGTH]
            } else {
                vec![]
            }
        }
        4 => {
            // CRC-modified bit
            if buf.len() >= 8 {
                let l = buf.len() / 8 * 8 - 8;
                buf[l] |= 4;
                vec![et::CRC_MODIFIED]
            } else {
                vec![]
            }
        }
        5 => {
            // entirely random bytes and a random FED id
            let n = rng.below(200) as usize;
            *buf = (0..n).map(|_| rng.next() as u8).collect();
            feds[k].0 = rng.below(1500) as u32;
            vec![]
        }
        6 => {
            // empty FED
            buf.clear();
            vec![]
        }
        _ => {
            // append garbage words after the trailer
            for _ in 0..=rng.below(5) {
                buf.extend_from_slice(&(rng.next() as u32).to_le_bytes());
            }
            vec![]
        }
    }
}

fn chain_conditions() -> crate::local::LocalConditions<'static> {
    use std::sync::OnceLock;
    static G: OnceLock<quiver_formats::conditions::GainCalibration> = OnceLock::new();
    static C: OnceLock<quiver_formats::conditions::CpeParams> = OnceLock::new();
    static B: quiver_formats::conditions::BeamSpot = quiver_formats::conditions::BeamSpot {
        x: 0.0,
        y: 0.0,
        z: 0.0,
        sigma_z: 0.0,
        beam_width_x: 0.0,
        beam_width_y: 0.0,
        dxdz: 0.0,
        dydz: 0.0,
        emittance_x: 0.0,
        emittance_y: 0.0,
        beta_star: 0.0,
    };
    crate::local::LocalConditions {
        cabling: test_cabling(),
        gains: G.get_or_init(|| uniform_gains(30, 12)),
        cpe: C.get_or_init(simple_cpe),
        beam_spot: &B,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random and damaged FED buffers never panic, always return consistent columns,
    /// the damage the decoder can see is reported, and the whole local chain runs on
    /// the result.
    #[test]
    fn damaged_feds_never_panic(seed in any::<u64>(), kind in 0u8..8, twice in any::<bool>()) {
        let mut rng = SplitMix(seed);
        let mut feds = random_event(&mut rng);
        let mut must = mutate(&mut rng, &mut feds, kind);
        if twice {
            must.clear();
            let k2 = rng.below(8) as u8;
            mutate(&mut rng, &mut feds, k2);
        }
        let d = run(&feds);
        let n = d.n_digis as usize;
        prop_assert!(n.is_multiple_of(2) && n <= MAX_FED_WORDS);
        for col in [d.xx.len(), d.yy.len(), d.adc.len(), d.module_ind.len(), d.raw_id.len(), d.pdigi.len()] {
            prop_assert_eq!(col, n);
        }
        for i in 0..n {
            if d.module_ind[i] != INVALID_MODULE {
                prop_assert!(d.xx[i] < 160 && d.yy[i] < 416 && d.adc[i] < 256);
                prop_assert!(test_modules().iter().any(|m| m.det_index == d.module_ind[i]));
            }
        }
        let got = types(&d);
        for t in must {
            prop_assert!(got.contains(&t), "expected error {} in {:?}", t, got);
        }
        prop_assert!(d.errors.iter().all(|e| feds.iter().any(|(f, _)| *f == e.fed)));

        // The rest of the chain accepts whatever the unpacker produced.
        let refs: Vec<(u32, &[u8])> = feds.iter().map(|(f, b)| (*f, b.as_slice())).collect();
        let mut cfg = crate::local::LocalConfig::default();
        if seed % 2 == 1 {
            cfg.cluster.algorithm = crate::local::ClusterAlgorithm::UnionFind;
        }
        let ev = crate::local::reconstruct_event(&refs, &chain_conditions(), &cfg).unwrap();
        prop_assert_eq!(ev.digis, d);
        prop_assert_eq!(ev.hits.n_hits, ev.cut.n_clusters);
    }
}
