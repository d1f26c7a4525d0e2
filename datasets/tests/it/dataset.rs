//! End-to-end tests of dataset generation, the raw encoding, the reader and the export.

use arrow_array::{Array, UInt16Array, UInt32Array, UInt8Array};
use quiver_datasets::conditions::{cabling_index, Conditions};
use quiver_datasets::generator::{Generator, GeneratorParams};
use quiver_datasets::geometry::Geometry;
use quiver_datasets::{export_pixeltrack, generate, Dataset, DatasetError, GenerateOptions};
use std::collections::BTreeMap;
use std::path::Path;

fn small(dir: &Path, name: &str, threads: usize, corrupt: f64) -> GenerateOptions {
    GenerateOptions {
        events: 3,
        pileup: 4.0,
        seed: 11,
        threads: Some(threads),
        output: dir.join(name),
        corrupt_fraction: corrupt,
    }
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            for (k, v) in files(&p) {
                out.insert(
                    format!("{}/{k}", p.file_name().unwrap().to_string_lossy()),
                    v,
                );
            }
        } else {
            out.insert(
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            );
        }
    }
    out
}

#[test]
fn output_is_identical_for_one_and_two_threads() {
    let tmp = tempfile::tempdir().unwrap();
    generate(&small(tmp.path(), "t1", 1, 0.1)).unwrap();
    generate(&small(tmp.path(), "t2", 2, 0.1)).unwrap();
    let (a, b) = (files(&tmp.path().join("t1")), files(&tmp.path().join("t2")));
    assert!(a.len() >= 15, "{:?}", a.keys());
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, v) in &a {
        assert!(v == &b[k], "{k} differs between 1 and 2 threads");
    }
}

/// An independent decoder following the reference's RawToDigi: returns the decoded
/// (module, row, col, adc) pixels, the number of error words and of payload words.
type Decoded = (Vec<(u16, u16, u16, u8)>, usize, usize);

fn decode_event(c: &Conditions, feds: &[(u32, &[u8])]) -> Decoded {
    let mut pixels = Vec::new();
    let mut errors = 0;
    let mut n_words = 0;
    for &(fed, buf) in feds {
        assert_eq!(buf.len() % 8, 0);
        let w64: Vec<u64> = buf
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let n = w64.len();
        assert!(n >= 2);
        assert_eq!(w64[n - 1] & 0x4, 0, "CRC-modified bit");
        let mut h = 0;
        loop {
            assert_eq!(w64[h] >> 60, 0x5, "header marker");
            assert_eq!((w64[h] >> 8) & 0xFFF, fed as u64);
            if w64[h] & 0x8 == 0 {
                break;
            }
            h += 1;
        }
        let mut t = n - 1;
        loop {
            assert_eq!(w64[t] >> 60, 0xA, "trailer marker");
            assert_eq!((w64[t] >> 32) & 0xFF_FFFF, n as u64, "fragment length");
            if w64[t] & 0x8 == 0 {
                break;
            }
            t -= 1;
        }
        for &w in &w64[h + 1..t] {
            for word in [w as u32, (w >> 32) as u32] {
                n_words += 1;
                if word == 0 {
                    continue;
                }
                let link = word >> 26;
                let roc = (word >> 21) & 0x1F;
                if roc >= 25 {
                    errors += 1;
                    continue;
                }
                let i = cabling_index(fed, link, roc);
                let m = &c.cabling;
                if m.bad_rocs[i] != 0 || m.mod_to_unp[i] != 0 {
                    continue;
                }
                let raw_id = m.raw_id[i];
                let k = m.roc_in_det[i] as i32;
                let barrel = (raw_id >> 25) & 7 == 1;
                let layer = if barrel { (raw_id >> 20) & 0xF } else { 0 };
                let side = if barrel {
                    if ((raw_id >> 2) & 0x3FF) < 5 {
                        -1
                    } else {
                        1
                    }
                } else if ((raw_id >> 10) & 3) == 1 {
                    -1
                } else {
                    1
                };
                let (lr, lc) = if layer == 1 {
                    ((word >> 8) & 0x7F, (word >> 15) & 0x3F)
                } else {
                    let dcol = (word >> 16) & 0x1F;
                    let pxid = (word >> 8) & 0xFF;
                    assert!(dcol < 26 && (2..162).contains(&pxid));
                    (80 - pxid / 2, 2 * dcol + pxid % 2)
                };
                assert!(lr < 80 && lc < 52);
                // frame conversion with slopes and offsets
                let flipped = !barrel || (side == -1 && layer != 1);
                let (sr, sc, ro, co) = match (flipped, k < 8) {
                    (true, true) => (1, -1, 0, (8 - k) * 52 - 1),
                    (true, false) => (-1, 1, 159, (k - 8) * 52),
                    (false, true) => (-1, 1, 159, k * 52),
                    (false, false) => (1, -1, 0, (16 - k) * 52 - 1),
                };
                let row = ro + sr * lr as i32;
                let col = co + sc * lc as i32;
                assert!((0..160).contains(&row) && (0..416).contains(&col));
                pixels.push((
                    m.module_id[i] as u16,
                    row as u16,
                    col as u16,
                    (word & 0xFF) as u8,
                ));
            }
        }
    }
    (pixels, errors, n_words)
}

#[test]
fn raw_round_trip_gives_back_every_pixel() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = small(tmp.path(), "rt", 2, 0.0);
    let summary = generate(&opts).unwrap();
    let ds = Dataset::open(&opts.output).unwrap();
    assert_eq!(ds.n_events(), 3);
    let c = ds.conditions();
    let geom = Geometry::phase1();
    let gen = Generator::new(
        GeneratorParams {
            pileup: opts.pileup,
            ..Default::default()
        },
        &geom,
        &c.gains,
        c.beam_spot,
    );
    let mut words = 0;
    for i in 0..ds.n_events() {
        let feds = ds.raw_event(i).unwrap();
        assert_eq!(feds.iter().map(|f| f.0).collect::<Vec<_>>(), c.fed_ids);
        let (mut got, errors, nw) = decode_event(c, &feds);
        words += nw;
        assert_eq!(errors, 0);
        // every module's pixels are contiguous in the word stream
        let mut seen = std::collections::HashSet::new();
        let mut last = u16::MAX;
        for p in &got {
            if p.0 != last {
                assert!(seen.insert(p.0), "module {} split", p.0);
                last = p.0;
            }
        }
        got.sort();
        let ev = gen.event(opts.seed, i as u64);
        let mut want: Vec<_> = ev
            .digis
            .iter()
            .map(|d| (d.module, d.row, d.col, d.adc))
            .collect();
        want.sort();
        assert!(!want.is_empty());
        assert_eq!(got, want, "event {i}");
    }
    assert!((summary.words_per_event - words as f64 / 3.0).abs() < 1e-9);
    assert!(ds.raw_event(3).is_err());
}

#[test]
fn injected_faults_are_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = small(tmp.path(), "faults", 1, 0.3);
    generate(&opts).unwrap();
    let f = std::fs::File::open(opts.output.join("faults.parquet")).unwrap();
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    let mut n = 0;
    let mut kinds = std::collections::HashSet::new();
    for b in r {
        let b = b.unwrap();
        n += b.num_rows();
        let k = b
            .column_by_name("kind")
            .unwrap()
            .as_any()
            .downcast_ref::<UInt8Array>()
            .unwrap();
        kinds.extend(k.values().iter().copied());
    }
    assert!(n > 20, "{n} faults");
    assert!(kinds.len() >= 4, "{kinds:?}");
}

#[test]
fn digis_parquet_matches_raw() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = GenerateOptions {
        events: 1,
        ..small(tmp.path(), "dg", 1, 0.0)
    };
    generate(&opts).unwrap();
    let ds = Dataset::open(&opts.output).unwrap();
    let (mut got, _, _) = decode_event(ds.conditions(), &ds.raw_event(0).unwrap());
    got.sort();
    let f = std::fs::File::open(opts.output.join("digis.parquet")).unwrap();
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    let mut want = Vec::new();
    for b in r {
        let b = b.unwrap();
        let m = b
            .column_by_name("module")
            .unwrap()
            .as_any()
            .downcast_ref::<UInt16Array>()
            .unwrap()
            .clone();
        let row = b
            .column_by_name("row")
            .unwrap()
            .as_any()
            .downcast_ref::<UInt16Array>()
            .unwrap()
            .clone();
        let col = b
            .column_by_name("col")
            .unwrap()
            .as_any()
            .downcast_ref::<UInt16Array>()
            .unwrap()
            .clone();
        let adc = b
            .column_by_name("adc")
            .unwrap()
            .as_any()
            .downcast_ref::<UInt8Array>()
            .unwrap()
            .clone();
        let ev = b
            .column_by_name("event")
            .unwrap()
            .as_any()
            .downcast_ref::<UInt32Array>()
            .unwrap()
            .clone();
        for i in 0..b.num_rows() {
            assert_eq!(ev.value(i), 0);
            want.push((m.value(i), row.value(i), col.value(i), adc.value(i)));
        }
    }
    want.sort();
    assert_eq!(got, want);
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn f32_at(b: &[u8], o: usize) -> f32 {
    f32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

#[test]
fn export_layouts() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = GenerateOptions {
        events: 2,
        ..small(tmp.path(), "ex", 1, 0.0)
    };
    generate(&opts).unwrap();
    let out = tmp.path().join("bin");
    export_pixeltrack(&opts.output, &out).unwrap();
    let ds = Dataset::open(&opts.output).unwrap();
    let c = ds.conditions();
    let rd = |n: &str| std::fs::read(out.join(n)).unwrap();

    let bs = rd("beamspot.bin");
    assert_eq!(bs.len(), 44);
    assert_eq!(f32_at(&bs, 8), c.beam_spot.z);

    let fi = rd("fedIds.bin");
    assert_eq!(u32_at(&fi, 0) as usize, c.fed_ids.len());
    assert_eq!(fi.len(), 4 + 4 * c.fed_ids.len());
    assert_eq!(u32_at(&fi, 4), 1200);

    let cm = rd("cablingMap.bin");
    assert_eq!(cm.len(), 1_440_128 + 4 + 57_600);
    assert_eq!(u32_at(&cm, 1_440_128), 57_600);
    // the reference kernel's index: (fed-1200)*384 + (link-1)*8 + roc (roc 1-based)
    for (fed, link, roc) in [(1200u32, 1u32, 1u32), (1203, 7, 4), (1250, 40, 8)] {
        let r = ((fed - 1200) * 384 + (link - 1) * 8 + roc) as usize;
        let i = cabling_index(fed, link, roc);
        assert_eq!(u32_at(&cm, 4 * r), fed);
        assert_eq!(u32_at(&cm, 230_400 + 4 * r), link);
        assert_eq!(u32_at(&cm, 2 * 230_400 + 4 * r), roc);
        assert_eq!(u32_at(&cm, 3 * 230_400 + 4 * r), c.cabling.raw_id[i]);
        assert_eq!(u32_at(&cm, 4 * 230_400 + 4 * r), c.cabling.roc_in_det[i]);
        assert_eq!(u32_at(&cm, 5 * 230_400 + 4 * r), c.cabling.module_id[i]);
        assert_eq!(cm[1_382_400 + r], c.cabling.bad_rocs[i]);
        assert_eq!(cm[1_440_132 + r], c.cabling.mod_to_unp[i]);
    }
    assert_eq!(u32_at(&cm, 1_440_000), c.cabling.size);

    let g = rd("gain.bin");
    assert_eq!(u32_at(&g, 24_048) as usize, 1856 * 416 * 4);
    assert_eq!(g.len(), 24_048 + 4 + 1856 * 416 * 4);
    assert_eq!(u32_at(&g, 8 + 12 * 5), c.gains.range_and_cols[5].0);
    assert_eq!(u32_at(&g, 8 + 12 * 5 + 8) as i32, 416);
    assert_eq!(f32_at(&g, 24_008 + 8), c.gains.min_gain);
    assert_eq!(u32_at(&g, 24_032), 80);
    assert_eq!(g[24_052 + 100], c.gains.data[100]);

    let cpe = rd("cpefast.bin");
    assert_eq!(cpe.len(), 211_612);
    assert_eq!(f32_at(&cpe, 8), 0.01);
    assert_eq!(u32_at(&cpe, 16), 1856);
    for k in [0usize, 95, 1184, 1855] {
        let o = 20 + 112 * k;
        let d = &c.cpe.det[k];
        assert_eq!(cpe[o] != 0, d.is_barrel);
        assert_eq!(u16::from_le_bytes([cpe[o + 4], cpe[o + 5]]), k as u16);
        assert_eq!(u32_at(&cpe, o + 8), d.raw_id);
        assert_eq!(f32_at(&cpe, o + 12), d.shift_x);
        assert_eq!(f32_at(&cpe, o + 28), d.x0);
        assert_eq!(f32_at(&cpe, o + 40), d.sx[0]);
        assert_eq!(f32_at(&cpe, o + 52), d.sy[0]);
        assert_eq!(f32_at(&cpe, o + 64), d.frame.px);
        assert_eq!(f32_at(&cpe, o + 64 + 12 + 32), d.frame.r[8]);
    }
    let ag = 20 + 112 * 1856;
    assert_eq!(
        f32_at(&cpe, ag + 3 * 148 * 4),
        c.cpe.average_geometry.ladder_r[0]
    );
    assert_eq!(
        f32_at(&cpe, ag + 6 * 148 * 4),
        c.cpe.average_geometry.end_cap_z[0]
    );
    assert_eq!(u32_at(&cpe, ag + 3560 + 4 * 10), 1856);

    // raw.bin reads back to the dataset's FEDs
    let raw = rd("raw.bin");
    let mut o = 0;
    for i in 0..2 {
        let ev = ds.raw_event(i).unwrap();
        assert_eq!(u32_at(&raw, o) as usize, ev.len());
        o += 4;
        for (fed, data) in ev {
            assert_eq!(u32_at(&raw, o), fed);
            let n = u32_at(&raw, o + 4) as usize;
            assert_eq!(&raw[o + 8..o + 8 + n], data);
            o += 8 + n;
        }
    }
    assert_eq!(o, raw.len());

    quiver_datasets::write_counts_bin(
        &out,
        &[quiver_datasets::EventCounts {
            n_modules: 1,
            n_digis: 2,
            n_clusters: 3,
            n_tracks: 4,
            n_vertices: 5,
        }],
    )
    .unwrap();
    assert_eq!(
        rd("digicluster.bin"),
        [1u32, 2, 3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>()
    );
    assert_eq!(rd("tracks.bin"), 4u32.to_le_bytes());
    assert_eq!(rd("vertices.bin"), 5u32.to_le_bytes());
}

#[test]
fn bad_inputs_give_errors_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = GenerateOptions {
        events: 1,
        ..small(tmp.path(), "bad", 1, 0.0)
    };
    generate(&opts).unwrap();
    let dir = &opts.output;

    // missing manifest
    let missing = tmp.path().join("nothing");
    let e = Dataset::open(&missing).unwrap_err();
    assert!(
        matches!(e, DatasetError::Io { .. }) && e.to_string().contains("manifest.toml"),
        "{e}"
    );

    // wrong checksum, also after this process has verified the dataset once (the hashing
    // is skipped only while every file keeps its size and modification time; the pause
    // lets a coarse file clock tick)
    Dataset::open(dir).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let raw_path = dir.join("raw.arrow");
    let good = std::fs::read(&raw_path).unwrap();
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xFF;
    std::fs::write(&raw_path, &bad).unwrap();
    let e = Dataset::open(dir).unwrap_err();
    assert!(
        matches!(e, DatasetError::Checksum { .. }) && e.to_string().contains("raw.arrow"),
        "{e}"
    );

    // truncated raw.arrow: structural error, not a panic
    for cut in [10usize, good.len() / 2, good.len() - 3] {
        std::fs::write(&raw_path, &good[..cut]).unwrap();
        let e = Dataset::open_unverified(dir).unwrap_err();
        assert!(
            matches!(e, DatasetError::Format { .. }) && e.to_string().contains("raw.arrow"),
            "{e}"
        );
    }
    // garbage in the body never panics
    for k in 0..20 {
        let mut g = good.clone();
        let p = 8 + (k * 7919) % (good.len() - 16);
        g[p] = g[p].wrapping_add(0x5A);
        std::fs::write(&raw_path, &g).unwrap();
        let _ = Dataset::open_unverified(dir);
    }
    std::fs::write(&raw_path, &good).unwrap();
    assert!(Dataset::open(dir).is_ok());

    // truncated conditions file
    let cp = dir.join("conditions/cabling.arrow");
    let cgood = std::fs::read(&cp).unwrap();
    std::fs::write(&cp, &cgood[..cgood.len() / 3]).unwrap();
    let e = Dataset::open_unverified(dir).unwrap_err();
    assert!(e.to_string().contains("cabling.arrow"), "{e}");
    std::fs::write(&cp, &cgood).unwrap();

    // malformed manifest
    std::fs::write(dir.join("manifest.toml"), "events = \"many\"").unwrap();
    let e = Dataset::open(dir).unwrap_err();
    assert!(
        matches!(e, DatasetError::Format { .. }) && e.to_string().contains("manifest.toml"),
        "{e}"
    );

    // invalid options
    assert!(matches!(
        generate(&GenerateOptions {
            events: 0,
            ..opts.clone()
        }),
        Err(DatasetError::InvalidOption(_))
    ));
    assert!(matches!(
        generate(&GenerateOptions {
            pileup: f64::NAN,
            ..opts.clone()
        }),
        Err(DatasetError::InvalidOption(_))
    ));
    assert!(matches!(
        generate(&GenerateOptions {
            corrupt_fraction: 2.0,
            ..opts.clone()
        }),
        Err(DatasetError::InvalidOption(_))
    ));
}

#[test]
fn dataset_can_be_shared_between_threads() {
    fn check<T: Send + Sync>() {}
    check::<Dataset>();
    check::<quiver_datasets::conditions::Conditions>();
}
