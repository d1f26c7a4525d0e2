//! plans/pixel-plus.toml end to end through the command line: the faithful chain's products
//! are unchanged beside the classifier and the second vertex finder, and `quiver report`
//! measures both selections side by side.

use std::path::Path;

use crate::support::{ok, quiver};

fn json_number(json: &str, key: &str) -> f64 {
    let at = json
        .find(&format!("\"{key}\": "))
        .unwrap_or_else(|| panic!("{key} missing in {json}"));
    let rest = &json[at + key.len() + 4..];
    rest[..rest.find([',', '\n']).unwrap()]
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{key}: {e}"))
}

fn file(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn the_plus_plan_keeps_the_faithful_products_and_the_report_shows_both() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_string_lossy().into_owned();
    ok(quiver(&[
        "generate",
        "--events",
        "6",
        "--pileup",
        "30",
        "--seed",
        "4242",
        "--output",
        &p("ds"),
        "--no-progress",
    ]));
    let root = env!("CARGO_MANIFEST_DIR");
    for (plan, out) in [
        ("plans/pixel.toml", "faithful"),
        ("plans/pixel-plus.toml", "plus"),
    ] {
        ok(quiver(&[
            "run",
            &format!("{root}/{plan}"),
            "--input",
            &p("ds"),
            "--output",
            &p(out),
            "--threads",
            "2",
            "--no-progress",
        ]));
    }
    // The faithful products are the same files with or without the plus steps.
    let (f, plus) = (tmp.path().join("faithful"), tmp.path().join("plus"));
    for name in [
        "tracks.tracks.parquet",
        "vertices.vertices.parquet",
        "hits.hits.parquet",
    ] {
        assert!(file(&f, name) == file(&plus, name), "{name} differs");
    }
    assert!(plus.join("track_scores.purity.parquet").is_file());
    assert!(plus.join("vertices.vertices_plus.parquet").is_file());

    ok(quiver(&[
        "report",
        "--run",
        &p("faithful"),
        "--truth",
        &p("ds"),
        "--output",
        &p("rf"),
    ]));
    ok(quiver(&[
        "report",
        "--run",
        &p("plus"),
        "--truth",
        &p("ds"),
        "--output",
        &p("rp"),
    ]));
    let (rf, rp) = (tmp.path().join("rf"), tmp.path().join("rp"));
    let jf = String::from_utf8(file(&rf, "summary.json")).unwrap();
    let jp = String::from_utf8(file(&rp, "summary.json")).unwrap();
    assert!(!jf.contains("plus_") && !rf.join("roc.parquet").exists());
    // The faithful numbers do not depend on the plus steps.
    for key in ["track_efficiency", "track_fake_rate", "vertex_efficiency"] {
        assert_eq!(json_number(&jf, key), json_number(&jp, key), "{key}");
    }
    // The purity selection is a subset of the loose tracks: fewer tracks, fewer fakes.
    let (loose, purity) = (
        json_number(&jp, "loose_tracks"),
        json_number(&jp, "plus_loose_tracks"),
    );
    assert!(purity > 0.0 && purity < loose, "{purity} of {loose}");
    assert!(
        json_number(&jp, "plus_track_fake_rate") < json_number(&jp, "track_fake_rate"),
        "{jp}"
    );
    assert!(json_number(&jp, "plus_track_efficiency") > 0.5, "{jp}");
    assert!(json_number(&jp, "plus_vertex_efficiency") > 0.5, "{jp}");
    for name in ["roc.parquet", "roc.svg", "track_truth.parquet"] {
        assert!(rp.join(name).is_file(), "{name}");
    }
    let html = String::from_utf8(file(&rp, "report.html")).unwrap();
    assert!(
        html.contains("<h2 id=\"plus\">")
            && html.contains("Track classifier: efficiency vs fake rate")
    );
}
