//! Capacities through the command line: an event past the reference's capacities is
//! reported (capacity_overflows rows and a warning per step and capacity), sized
//! capacities give the complete products, and below the limits both settings agree.

use std::path::{Path, PathBuf};

use arrow_array::{Array, RecordBatch, StringArray, UInt64Array};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::support::{ok, quiver};

fn table(path: &Path) -> RecordBatch {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let b = ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let schema = b.schema().clone();
    let batches: Vec<RecordBatch> = b.build().unwrap().map(|b| b.unwrap()).collect();
    arrow_select::concat::concat_batches(&schema, &batches).unwrap()
}

/// (capacity, demanded, truncated) rows of a capacity_overflows file.
fn overflows(path: &Path) -> Vec<(String, Option<u64>, u64)> {
    let t = table(path);
    let cap = t
        .column_by_name("capacity")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    let dem = t
        .column_by_name("demanded")
        .unwrap()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap();
    let cut = t
        .column_by_name("truncated")
        .unwrap()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap();
    (0..t.num_rows())
        .map(|r| {
            (
                cap.value(r).to_string(),
                dem.is_valid(r).then(|| dem.value(r)),
                cut.value(r),
            )
        })
        .collect()
}

fn generate(dir: &Path, events: &str, pileup: &str, seed: &str) -> PathBuf {
    let ds = dir.join(format!("pu{pileup}"));
    ok(quiver(&[
        "generate",
        "--events",
        events,
        "--pileup",
        pileup,
        "--seed",
        seed,
        "--threads",
        "1",
        "--output",
        ds.to_str().unwrap(),
    ]));
    ds
}

fn run(plan: &Path, ds: &Path, out: &Path) -> String {
    ok(quiver(&[
        "run",
        plan.to_str().unwrap(),
        "--no-progress",
        "--threads",
        "2",
        "--input",
        ds.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]))
}

#[test]
fn high_pileup_is_reported_with_reference_capacities_and_complete_when_sized() {
    let dir = tempfile::tempdir().unwrap();
    let ds = generate(dir.path(), "1", "200", "555");
    let (r, s) = (dir.path().join("reference"), dir.path().join("sized"));
    let text = run(Path::new("plans/pixel.toml"), &ds, &r);
    for cap in ["hits_per_event", "doublets_per_event"] {
        assert!(
            text.contains(&format!("capacity '{cap}'"))
                && text.contains("reached in 1 of 1 events"),
            "no warning for {cap}:\n{text}"
        );
    }
    let hits = overflows(&r.join("capacity_overflows.hits.parquet"));
    let doublets = overflows(&r.join("capacity_overflows.doublets.parquet"));
    assert_eq!(
        (hits.len(), hits[0].0.as_str(), doublets[0].0.as_str()),
        (1, "hits_per_event", "doublets_per_event")
    );
    assert_eq!(table(&r.join("hits.hits.parquet")).num_rows(), 49_152);

    let text = run(Path::new("plans/pixel-sized.toml"), &ds, &s);
    assert!(!text.contains("warning"), "{text}");
    // Sized: exactly what the reference run said the event needed.
    assert_eq!(
        table(&s.join("hits.hits.parquet")).num_rows() as u64,
        hits[0].1.unwrap()
    );
    for label in [
        "hits",
        "doublets",
        "ntuplets",
        "fit",
        "clusters",
        "chargecut",
    ] {
        assert!(
            overflows(&s.join(format!("capacity_overflows.{label}.parquet"))).is_empty(),
            "{label}"
        );
    }
    // The report carries the capacities of the truncated run.
    let rep = dir.path().join("report");
    let json = ok(quiver(&[
        "report",
        "--run",
        r.to_str().unwrap(),
        "--truth",
        ds.to_str().unwrap(),
        "--output",
        rep.to_str().unwrap(),
    ]));
    assert!(json.contains("\"capacities_reached\": 2"), "{json}");
    let html = std::fs::read_to_string(rep.join("report.html")).unwrap();
    assert!(
        html.contains("<td>hits</td><td>hits_per_event</td><td>49152</td><td>1 of 1</td>"),
        "capacities section missing"
    );
}

#[test]
fn sized_capacities_equal_the_reference_below_its_limits() {
    let dir = tempfile::tempdir().unwrap();
    let ds = generate(dir.path(), "3", "30", "21");
    let (r, s) = (dir.path().join("reference"), dir.path().join("sized"));
    run(Path::new("plans/pixel.toml"), &ds, &r);
    run(Path::new("plans/pixel-sized.toml"), &ds, &s);
    for f in [
        "digis.digis.parquet",
        "clustered_digis.chargecut.parquet",
        "hits.hits.parquet",
        "tracks.tracks.parquet",
        "vertices.vertices.parquet",
    ] {
        assert_eq!(
            table(&r.join(f)),
            table(&s.join(f)),
            "{f} differs between reference and sized capacities"
        );
    }
}

#[test]
fn small_cluster_capacity_truncates_with_a_record_and_no_rows_of_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let ds = generate(dir.path(), "2", "50", "8");
    let plan = std::fs::read_to_string("plans/pixel.toml")
        .unwrap()
        .replace(
            "type = \"cluster_charge_cut\"",
            "type = \"cluster_charge_cut\"\nmax_clusters_per_module = 8",
        )
        .replace(
            "\"chargecut:clustered_digis\",",
            "\"chargecut:clustered_digis\", \"chargecut:hit_modules\",",
        );
    let plan_path = dir.path().join("capped.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let out = dir.path().join("out");
    let text = run(&plan_path, &ds, &out);
    assert!(
        text.contains(
            "step 'chargecut': capacity 'clusters_per_module' (8) reached in 2 of 2 events"
        ),
        "{text}"
    );
    let rows = overflows(&out.join("capacity_overflows.chargecut.parquet"));
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter()
            .all(|(c, d, cut)| c == "clusters_per_module" && d.unwrap() > 8 && *cut > 0),
        "{rows:?}"
    );
    // Every hit comes from a cluster: a charge, and a module that is not 0 for all.
    let hits = table(&out.join("hits.hits.parquet"));
    let charge = hits
        .column_by_name("charge")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow_array::Int32Array>()
        .unwrap();
    assert!(
        charge.values().iter().all(|&q| q > 0),
        "hits without charge (rows of zeros)"
    );
    let modules = table(&out.join("hit_modules.chargecut.parquet"));
    let counts = modules
        .column_by_name("clusters")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow_array::UInt32Array>()
        .unwrap();
    assert!(counts.values().iter().all(|&c| c <= 8));
    assert_eq!(
        counts.values().iter().map(|&c| c as usize).sum::<usize>(),
        hits.num_rows()
    );
}
