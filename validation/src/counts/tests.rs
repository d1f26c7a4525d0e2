use super::*;

#[test]
fn modules_saturate_at_2000() {
    let m: Vec<u16> = (0..2100u32).map(|i| (i % 2) as u16).collect();
    assert_eq!(count_modules(&m), 2000);
    assert_eq!(count_modules(&[]), 0);
    assert_eq!(count_modules(&[1, 1, 1]), 1);
    // A module seen again after another one is a new run (the reference counts it twice).
    assert_eq!(count_modules(&[1, 2, 1]), 3);
}

#[test]
fn cluster_counts_from_digis_and_hits_agree() {
    let module = [0u16, 0, 0, 9999, 5, 5, 9999];
    let cluster = [0i32, 2, 1, 9999, 0, 0, -9999];
    let d = clusters_in_modules_from_digis(&module, &cluster).unwrap();
    let h = clusters_in_modules_from_hits(&[0, 0, 0, 5]).unwrap();
    assert_eq!(d, h);
    assert_eq!(total_clusters(&d), 4);
    assert!(clusters_in_modules_from_digis(&[2000], &[0]).is_err());
    assert!(clusters_in_modules_from_hits(&[9999]).is_err());
    assert!(clusters_in_modules_from_digis(&[1], &[0, 1]).is_err());
}

#[test]
fn track_tolerance_is_relative_and_vertex_absolute() {
    let r = ReferenceCounts {
        n_modules: Some(1),
        n_digis: Some(2),
        n_clusters: Some(3),
        n_tracks: Some(1000),
        n_vertices: Some(10),
    };
    let mut ours = EventCounts {
        event: 0,
        n_modules: Some(1),
        n_digis: Some(2),
        n_clusters: Some(3),
        n_tracks: Some(1011),
        n_vertices: Some(9),
    };
    let v = check_event(&ours, &r);
    assert!(v.failures.is_empty(), "{:?}", v.failures);
    assert_eq!(v.track_relative_difference, Some(0.011));
    ours.n_tracks = Some(1012);
    ours.n_vertices = Some(12);
    let v = check_event(&ours, &r);
    assert!(!v.exact_mismatch);
    assert_eq!(
        v.failures,
        vec![
            "N(tracks) is 1012 expected 1000, relative difference 0.012 is outside tolerance 0.012"
                .to_string(),
            "N(vertices) is 12 expected 10, difference 2 is outside tolerance 1".to_string()
        ]
    );
    // Reference 0 tracks: inf relative difference fails; both 0 passes (NaN).
    let r0 = ReferenceCounts {
        n_tracks: Some(0),
        ..r
    };
    ours.n_tracks = Some(1);
    assert!(check_event(&ours, &r0).failures[0].contains("relative difference inf"));
    ours.n_tracks = Some(0);
    ours.n_vertices = Some(10);
    assert!(check_event(&ours, &r0).failures.is_empty());
    // Missing quantities are not compared.
    let none = EventCounts {
        event: 3,
        ..Default::default()
    };
    assert!(check_event(&none, &r).failures.is_empty());
}

#[test]
fn failure_report_lists_events_in_order() {
    let mut s = CountSummary::default();
    let r = ReferenceCounts {
        n_modules: Some(10),
        n_digis: Some(20),
        n_clusters: Some(30),
        n_tracks: None,
        n_vertices: None,
    };
    let e = |event, nm| EventCounts {
        event,
        n_modules: Some(nm),
        n_digis: Some(20),
        n_clusters: Some(30),
        ..Default::default()
    };
    s.add([
        check_event(&e(7, 11), &r),
        check_event(&e(2, 10), &r),
        check_event(&e(5, 9), &r),
    ]);
    assert_eq!(s.failed(), 2);
    assert_eq!(
        s.report(),
        "Event 5\n N(modules) is 9 expected 10\nEvent 7\n N(modules) is 11 expected 10\n\
         CountValidator: 2 events failed validation (see details above)\n"
    );
}

#[test]
fn reads_bin_and_parquet_reference_files() {
    let dir = tempfile::tempdir().unwrap();
    let put = |name: &str, v: &[u32]| {
        std::fs::write(
            dir.path().join(name),
            v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
        )
        .unwrap()
    };
    put("digicluster.bin", &[1, 2, 3, 4, 5, 6]);
    put("tracks.bin", &[7, 8]);
    let t = read_reference(dir.path()).unwrap();
    assert_eq!(t.events.len(), 2);
    assert_eq!(
        t.events[&1],
        ReferenceCounts {
            n_modules: Some(4),
            n_digis: Some(5),
            n_clusters: Some(6),
            n_tracks: Some(8),
            n_vertices: None
        }
    );
    assert_eq!(
        read_reference(&dir.path().join("digicluster.bin")).unwrap(),
        t
    );
    put("vertices.bin", &[1]);
    assert!(read_reference(dir.path())
        .unwrap_err()
        .to_string()
        .contains("1 events but digicluster.bin has 2"));
    put("digicluster.bin", &[1, 2]);
    assert!(read_reference(dir.path())
        .unwrap_err()
        .to_string()
        .contains("not a whole number of events"));

    // Parquet, with events out of order and narrower integer types.
    use arrow_array::{RecordBatch, UInt16Array, UInt32Array, UInt64Array};
    use std::sync::Arc;
    let p = dir.path().join("counts.parquet");
    let schema = Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("event", DataType::UInt64, false),
        arrow_schema::Field::new("n_modules", DataType::UInt16, false),
        arrow_schema::Field::new("n_digis", DataType::UInt32, false),
        arrow_schema::Field::new("n_clusters", DataType::UInt32, false),
        arrow_schema::Field::new("n_vertices", DataType::UInt32, false),
    ]));
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(UInt64Array::from(vec![10u64, 3])),
            Arc::new(UInt16Array::from(vec![1700u16, 1650])),
            Arc::new(UInt32Array::from(vec![90000u32, 80000])),
            Arc::new(UInt32Array::from(vec![15000u32, 14000])),
            Arc::new(UInt32Array::from(vec![30u32, 25])),
        ],
    )
    .unwrap();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&p).unwrap(), schema, None)
            .unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();
    let t = read_reference(&p).unwrap();
    assert_eq!(t.events.keys().copied().collect::<Vec<_>>(), vec![3, 10]);
    assert_eq!(
        t.events[&3],
        ReferenceCounts {
            n_modules: Some(1650),
            n_digis: Some(80000),
            n_clusters: Some(14000),
            n_tracks: None,
            n_vertices: Some(25)
        }
    );
    assert!(read_reference(&dir.path().join("x.txt")).is_err());

    // Our own counts table round-trips (only quantities every event has get a column).
    let ours = [
        EventCounts {
            event: 1,
            n_modules: Some(5),
            n_digis: Some(9),
            n_clusters: Some(2),
            n_tracks: None,
            n_vertices: Some(1),
        },
        EventCounts {
            event: 0,
            n_modules: Some(4),
            n_digis: Some(8),
            n_clusters: Some(3),
            n_tracks: None,
            n_vertices: None,
        },
    ];
    let p = dir.path().join("ours.parquet");
    write_counts_parquet(&p, &ours).unwrap();
    let t = read_reference(&p).unwrap();
    assert_eq!(
        t.events[&0],
        ReferenceCounts {
            n_modules: Some(4),
            n_digis: Some(8),
            n_clusters: Some(3),
            n_tracks: None,
            n_vertices: None
        }
    );
    assert_eq!(t.events[&1].n_vertices, None);
}
