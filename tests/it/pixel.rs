//! The pixel chain end to end through the command line: generate a small dataset, run the
//! default plan, and check that the products are bit-identical for any thread count and
//! batch size, that the generator's pixels come back, and that bad input is reported.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::support::{ok, quiver};

/// A small dataset shared by the tests of this file: 6 events at ⟨PU⟩ 20.
fn dataset() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ds");
        ok(quiver(&[
            "generate",
            "--events",
            "6",
            "--pileup",
            "20",
            "--seed",
            "7",
            "--output",
            out.to_str().unwrap(),
        ]));
        (dir, out)
    })
    .1
}

/// Every column of a Parquet file as Arrow data, batches concatenated, for exact comparison.
fn columns(path: &Path) -> Vec<arrow_array::ArrayRef> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let builder = ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let schema = builder.schema().clone();
    let batches: Vec<RecordBatch> = builder.build().unwrap().map(|b| b.unwrap()).collect();
    let all = arrow_select::concat::concat_batches(&schema, &batches).unwrap();
    all.columns().to_vec()
}

const PRODUCTS: [&str; 7] = [
    "digis.digis.parquet",
    "digi_errors.digis.parquet",
    "clustered_digis.chargecut.parquet",
    "hits.hits.parquet",
    "tracks.tracks.parquet",
    "vertices.vertices.parquet",
    "track_vertices.vertices.parquet",
];

#[test]
fn products_are_bit_identical_for_any_threads_and_batch_size() {
    let ds = dataset();
    let mut reference: Option<Vec<Vec<arrow_array::ArrayRef>>> = None;
    for (threads, batch) in [(1, 16), (2, 1), (2, 4), (1, 5)] {
        let out = tempfile::tempdir().unwrap();
        let text = ok(quiver(&[
            "run",
            "plans/pixel.toml",
            "--no-progress",
            "--input",
            ds.to_str().unwrap(),
            "--output",
            out.path().to_str().unwrap(),
            "--threads",
            &threads.to_string(),
            "--batch-size",
            &batch.to_string(),
        ]));
        assert!(text.contains("events 6"), "{text}");
        let cols: Vec<_> = PRODUCTS
            .iter()
            .map(|p| columns(&out.path().join(p)))
            .collect();
        match &reference {
            None => reference = Some(cols),
            Some(r) => {
                for (i, (a, b)) in r.iter().zip(&cols).enumerate() {
                    for (j, (x, y)) in a.iter().zip(b).enumerate() {
                        assert_eq!(
                            x.to_data(),
                            y.to_data(),
                            "{} column {j} differs at threads {threads}, batch {batch}",
                            PRODUCTS[i]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn event_ranges_partition_a_run_exactly() {
    let ds = dataset().to_str().unwrap();
    let run = |extra: &[&str]| {
        let out = tempfile::tempdir().unwrap();
        let mut args = vec![
            "run",
            "plans/pixel.toml",
            "--no-progress",
            "--input",
            ds,
            "--output",
            out.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        ok(quiver(&args));
        PRODUCTS
            .iter()
            .map(|p| columns(&out.path().join(p)))
            .collect::<Vec<_>>()
    };
    let whole = run(&["--threads", "2"]);
    let parts = [
        run(&["--first-event", "0", "--events", "2"]),
        run(&["--first-event", "2", "--batch-size", "3"]),
    ];
    for (i, name) in PRODUCTS.iter().enumerate() {
        for (j, col) in whole[i].iter().enumerate() {
            let pieces: Vec<&dyn arrow_array::Array> =
                parts.iter().map(|p| p[i][j].as_ref()).collect();
            let joined = arrow_select::concat::concat(&pieces).unwrap();
            assert_eq!(
                col.to_data(),
                joined.to_data(),
                "{name} column {j}: events 0..2 + 2..6 differ from the whole run"
            );
        }
    }
    // No silent clamps: every option outside what the input and the machine allow is a
    // usage error (exit 2) naming the option and its range, before any event runs.
    for (args, msg) in [
        (
            &["--first-event", "6"][..],
            "first event 6 is beyond the input's 6 events (0..6)",
        ),
        (
            &["--events", "100"][..],
            "events = 100 from event 0, but the input has 6 events (0..6): ask for at most 6",
        ),
        (
            &["--first-event", "4", "--events", "5"][..],
            "events = 5 from event 4, but the input has 6 events (0..6): ask for at most 2",
        ),
        (&["--events", "0"][..], "events = 0: nothing to run"),
        (
            &["--threads", "0"][..],
            "threads = 0: a job needs at least 1 worker thread",
        ),
        (
            &["--threads", "4000"][..],
            "threads = 4000: at most 1024 worker threads",
        ),
        (
            &["--batch-size", "0"][..],
            "batch size = 0: a batch holds at least 1 event",
        ),
    ] {
        let out = tempfile::tempdir().unwrap();
        let mut a = vec![
            "run",
            "plans/pixel.toml",
            "--no-progress",
            "--input",
            ds,
            "--output",
            out.path().to_str().unwrap(),
        ];
        a.extend_from_slice(args);
        let o = quiver(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(
            std::fs::read_dir(out.path()).unwrap().next().is_none(),
            "{args:?} wrote outputs"
        );
    }
}

#[test]
fn default_plan_checks_and_bad_input_is_named() {
    ok(quiver(&["plan", "check", "plans/pixel.toml"]));
    let missing = quiver(&[
        "run",
        "plans/pixel.toml",
        "--no-progress",
        "--input",
        "/no/such/dataset",
    ]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("input dataset: /no/such/dataset does not exist; make one with `quiver generate --output /no/such/dataset`"), "{err}");

    // A truncated raw file is reported with its name, never a panic.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("ds");
    std::fs::create_dir_all(copy.join("conditions")).unwrap();
    for entry in walk(dataset()) {
        let rel = entry.strip_prefix(dataset()).unwrap();
        std::fs::copy(&entry, copy.join(rel)).unwrap();
    }
    let raw = copy.join("raw.arrow");
    let bytes = std::fs::read(&raw).unwrap();
    std::fs::write(&raw, &bytes[..bytes.len() / 2]).unwrap();
    let o = quiver(&[
        "run",
        "plans/pixel.toml",
        "--no-progress",
        "--input",
        copy.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("raw.arrow"), "{err}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn u16s(a: &arrow_array::ArrayRef) -> &[u16] {
    a.as_any()
        .downcast_ref::<arrow_array::UInt16Array>()
        .unwrap()
        .values()
}
fn u8s(a: &arrow_array::ArrayRef) -> &[u8] {
    a.as_any()
        .downcast_ref::<arrow_array::UInt8Array>()
        .unwrap()
        .values()
}
fn u32s(a: &arrow_array::ArrayRef) -> &[u32] {
    a.as_any()
        .downcast_ref::<arrow_array::UInt32Array>()
        .unwrap()
        .values()
}

#[test]
fn every_generated_pixel_comes_back_as_a_digi() {
    let ds = dataset();
    let out = tempfile::tempdir().unwrap();
    ok(quiver(&[
        "run",
        "plans/pixel.toml",
        "--no-progress",
        "--input",
        ds.to_str().unwrap(),
        "--output",
        out.path().to_str().unwrap(),
    ]));
    // ours: event, row, col, adc, module, raw_id, pdigi
    let d = columns(&out.path().join("digis.digis.parquet"));
    let mut ours: Vec<(u32, u16, u16, u16, u16)> = (0..d[0].len())
        .filter(|&i| u16s(&d[4])[i] != 9999)
        .map(|i| {
            (
                u32s(&d[0])[i],
                u16s(&d[4])[i],
                u16s(&d[1])[i],
                u16s(&d[2])[i],
                u16s(&d[3])[i],
            )
        })
        .collect();
    // the generator's truth: event, module, row, col, adc, electrons
    let t = columns(&ds.join("digis.parquet"));
    let mut truth: Vec<(u32, u16, u16, u16, u16)> = (0..t[0].len())
        .map(|i| {
            (
                u32s(&t[0])[i],
                u16s(&t[1])[i],
                u16s(&t[2])[i],
                u16s(&t[3])[i],
                u8s(&t[4])[i] as u16,
            )
        })
        .collect();
    ours.sort_unstable();
    truth.sort_unstable();
    assert_eq!(ours.len(), truth.len(), "digi count");
    assert!(ours == truth, "digis differ from the generated pixels");
}

#[test]
fn hits_per_event_are_plentiful_and_ordered() {
    let ds = dataset();
    let out = tempfile::tempdir().unwrap();
    let text = ok(quiver(&[
        "run",
        "plans/pixel.toml",
        "--no-progress",
        "--input",
        ds.to_str().unwrap(),
        "--output",
        out.path().to_str().unwrap(),
    ]));
    // Every event has thousands of hits in the barrel and the disks.
    let hits = columns(&out.path().join("hits.hits.parquet"));
    let event = hits[0]
        .as_any()
        .downcast_ref::<arrow_array::UInt32Array>()
        .unwrap();
    let det = hits[13]
        .as_any()
        .downcast_ref::<arrow_array::UInt16Array>()
        .unwrap();
    assert_eq!(event.len(), det.len());
    for e in 0..6u32 {
        let n = event.values().iter().filter(|&&v| v == e).count();
        assert!(n > 1000, "event {e}: {n} hits\n{text}");
    }
    assert!(
        det.values().windows(2).all(|w| w[0] <= w[1] || w[1] == 0),
        "hits ordered by module within events"
    );
    // hit_layers: ten rows per event, the first hit and the count of each layer.
    let layers = columns(&out.path().join("hit_layers.hits.parquet"));
    const LAYER_START: [u16; 11] = [0, 96, 320, 672, 1184, 1296, 1408, 1520, 1632, 1744, 1856];
    for e in 0..6u32 {
        let rows: Vec<usize> = (0..event.len()).filter(|&i| event.value(i) == e).collect();
        let dets: Vec<u16> = rows.iter().map(|&i| det.value(i)).collect();
        let lrows: Vec<usize> = (0..layers[0].len())
            .filter(|&i| u32s(&layers[0])[i] == e)
            .collect();
        assert_eq!(lrows.len(), 10, "event {e}");
        for (l, &i) in lrows.iter().enumerate() {
            let first = dets.partition_point(|&d| d < LAYER_START[l]) as u32;
            let end = dets.partition_point(|&d| d < LAYER_START[l + 1]) as u32;
            assert_eq!(
                (u32s(&layers[2])[i], u32s(&layers[3])[i]),
                (first, end - first),
                "event {e} layer {l}"
            );
        }
    }
}

#[test]
fn corrupted_raw_data_loses_no_event() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let out = dir.path().join("out");
    ok(quiver(&[
        "generate",
        "--events",
        "5",
        "--pileup",
        "10",
        "--seed",
        "11",
        "--corrupt-fraction",
        "0.2",
        "--output",
        ds.to_str().unwrap(),
    ]));
    let text = ok(quiver(&[
        "run",
        "plans/pixel.toml",
        "--no-progress",
        "--input",
        ds.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]));
    assert!(text.contains("events 5"), "{text}");
    // Every event is in every product; the damage is in the errors product.
    for p in [
        "digis.digis.parquet",
        "hits.hits.parquet",
        "tracks.tracks.parquet",
    ] {
        let cols = columns(&out.join(p));
        let mut events: Vec<u32> = u32s(&cols[0]).to_vec();
        events.dedup();
        assert_eq!(events, vec![0, 1, 2, 3, 4], "{p}");
    }
    let errors = columns(&out.join("digi_errors.digis.parquet"));
    assert!(
        errors[0].len() >= 5,
        "injected faults are reported: {} error rows",
        errors[0].len()
    );
}

#[test]
fn faithful_and_union_find_clusterizers_agree_in_one_job() {
    let text = ok(quiver(&[
        "run",
        "plans/examples/compare-clusterizers.toml",
        "--no-progress",
        "--input",
        dataset().to_str().unwrap(),
        "--threads",
        "2",
    ]));
    assert!(
        text.contains("faithful:pixel_clusters with union_find:pixel_clusters"),
        "{text}"
    );
    assert!(text.contains(" 0 differences"), "{text}");
    assert!(!text.contains(" 0 rows"), "{text}");
}

#[test]
fn report_measures_a_run_against_the_truth() {
    let ds = dataset();
    let dir = tempfile::tempdir().unwrap();
    let (run, report) = (dir.path().join("run"), dir.path().join("report"));
    ok(quiver(&[
        "run",
        "plans/pixel.toml",
        "--no-progress",
        "--input",
        ds.to_str().unwrap(),
        "--output",
        run.to_str().unwrap(),
    ]));
    ok(quiver(&[
        "report",
        "--run",
        run.to_str().unwrap(),
        "--truth",
        ds.to_str().unwrap(),
        "--output",
        report.to_str().unwrap(),
    ]));
    let summary = std::fs::read_to_string(report.join("summary.json")).unwrap();
    for key in [
        "track_efficiency",
        "track_fake_rate",
        "track_duplicate_rate",
        "vertex_efficiency",
        "hit_residual_rms_x_um",
        "hit_residual_rms_y_um",
        "\"events\": 6",
    ] {
        assert!(summary.contains(key), "{key} missing in {summary}");
    }
    // The run's reference histograms travel with the report, in Parquet and in the reference's text format.
    for f in ["histograms.parquet", "histograms.txt", "report.html"] {
        assert!(report.join(f).exists(), "{f} missing in the report");
    }
    let text = std::fs::read_to_string(report.join("histograms.txt")).unwrap();
    assert!(
        text.lines().any(|l| l.starts_with("digi_n 102 0 100000 ")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("track_n "))
            && text.lines().any(|l| l.starts_with("vertex_n "))
    );
    let eff: f64 = summary
        .split("\"track_efficiency\":")
        .nth(1)
        .unwrap()
        .split([',', '\n'])
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(eff > 0.8, "track efficiency {eff}");
    // A run directory without the truth's events is an error naming the problem, not a panic.
    let o = quiver(&[
        "report",
        "--run",
        "/no/such/run",
        "--truth",
        ds.to_str().unwrap(),
        "--output",
        report.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn parquet_products_delta_encode_small_integers_and_use_no_dictionary() {
    let out = tempfile::tempdir().unwrap();
    ok(quiver(&[
        "run",
        "plans/pixel.toml",
        "--no-progress",
        "--input",
        dataset().to_str().unwrap(),
        "--output",
        out.path().to_str().unwrap(),
    ]));
    let f = std::fs::File::open(out.path().join("hits.hits.parquet")).unwrap();
    let meta = ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .metadata()
        .clone();
    let rg = meta.row_group(0);
    for i in 0..rg.num_columns() {
        let c = rg.column(i);
        let name = c.column_path().string();
        let small_int = ["iphi", "size_x", "size_y", "det_index"].contains(&name.as_str());
        assert!(
            c.dictionary_page_offset().is_none(),
            "hits column {name} has a dictionary"
        );
        let delta = c
            .encodings()
            .any(|e| e == parquet::basic::Encoding::DELTA_BINARY_PACKED);
        assert_eq!(
            delta,
            small_int,
            "hits column {name}: {:?}",
            c.encodings().collect::<Vec<_>>()
        );
    }
}

/// docs/products.md lists every `digi_errors.error_type` code the decoder can write (the
/// table once stopped at 41 while 101 appeared in outputs).
#[test]
fn every_digi_error_code_is_documented() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/products.md")).unwrap();
    let codes = quiver_reco::local::raw_to_digis::error_type::ALL;
    assert!(
        codes.windows(2).all(|w| w[0] < w[1]),
        "ALL is sorted and has no repeat"
    );
    for c in codes {
        assert!(
            docs.contains(&format!("\n| {c} | ")),
            "error code {c} is missing from docs/products.md"
        );
    }
}

#[test]
fn bench_replays_a_small_input_only_when_asked() {
    let ds = dataset().to_str().unwrap();
    let refused = quiver(&[
        "bench",
        "plans/examples/local.toml",
        "--input",
        ds,
        "--events",
        "15",
        "--threads",
        "1",
        "--repeat",
        "1",
    ]);
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("but the input has 6 events (0..6)")
            && err.contains("or --cycle to replay them"),
        "{err}"
    );
    // 15 events from 6 in batches of 4: two batches cross the end of the input.
    let out = ok(quiver(&[
        "bench",
        "plans/examples/local.toml",
        "--input",
        ds,
        "--events",
        "15",
        "--cycle",
        "--threads",
        "2",
        "--batch-size",
        "4",
        "--repeat",
        "1",
    ]));
    let row = out
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>();
    assert_eq!(row, ["2", "4", "15"], "{out}");
}
