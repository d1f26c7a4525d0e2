//! Truth association and rates on a hand-built event with exact expected numbers, and the
//! report end to end on a small generated dataset run through the whole pixel chain.

use quiver_validation::truth::*;

fn digi(module: u16, row: u16, col: u16, cluster: i32) -> RecoDigi {
    RecoDigi {
        row,
        col,
        module,
        cluster,
    }
}

fn px(module: u16, row: u16, col: u16, particle: u32, electrons: f32) -> TruthPixel {
    TruthPixel {
        module,
        row,
        col,
        particle,
        electrons,
    }
}

fn hit(module: u16, x: f32, y: f32) -> RecHit {
    RecHit {
        module,
        x_local: x,
        y_local: y,
        size_x: 8,
        size_y: 8,
    }
}

fn track(quality: u8, hits: &[u32], pt: f32) -> RecoTrack {
    RecoTrack {
        quality,
        hits: hits.to_vec(),
        pt,
        cov: [1e-4; 15],
        ..Default::default()
    }
}

fn particle(id: u32, process: u8, pt: f32, eta: f32, vertex: i32) -> TruthParticle {
    TruthParticle {
        id,
        charge: 1,
        pt,
        eta,
        process,
        vertex,
        vz: 0.5,
        ..Default::default()
    }
}

fn sim(module: u16, particle: u32, lx: f32) -> TruthSimHit {
    TruthSimHit {
        module,
        lx,
        ly: 0.0,
        particle,
    }
}

/// Hits (index: module, cluster): 0: (10, 0) p1; 1: (10, 1) p2; 2: (100, 0) p1;
/// 3: (330, 0) p1; 4: (700, 0) p1; 5: (701, 0) p2 6000 e + p1 1000 e; 6: (702, 0)
/// secondary p4; 7: (703, 0) noise p3.
fn event() -> (RecoEvent, TruthEvent) {
    let digis = vec![
        digi(10, 5, 5, 1), // cluster 1 listed first: the hit index comes from the numbering
        digi(10, 1, 1, 0),
        digi(10, 1, 2, 0),
        digi(9999, 0, 0, -9999),
        digi(100, 1, 1, 0),
        digi(330, 1, 1, 0),
        digi(700, 1, 1, 0),
        digi(701, 1, 1, 0),
        digi(701, 1, 2, 0),
        digi(702, 1, 1, 0),
        digi(703, 1, 1, 0),
        digi(704, 3, 3, 9999), // rejected by the charge cut
    ];
    let hits = vec![
        hit(10, 0.0100, 0.0),
        hit(10, 0.2, 0.0),
        hit(100, 0.0, 0.0),
        hit(330, 0.0, 0.0),
        hit(700, 0.0, 0.0),
        hit(701, 0.0, 0.0),
        hit(702, 0.0, 0.0),
        hit(703, 0.0, 0.0),
    ];
    let tracks = vec![
        track(2, &[0, 2, 3, 4], 2.0), // p1
        track(2, &[0, 2, 3, 5], 2.1), // 3 of 4 p1: duplicate
        track(2, &[1, 6, 7], 1.0),    // p2, p4, none: fake
        track(1, &[1, 5, 6], 1.0),    // dup quality: ignored
    ];
    let vertices = vec![
        RecoVertex {
            z: 0.41,
            weight: 1e4,
            tracks: vec![0, 1],
        },
        RecoVertex {
            z: -3.0,
            weight: 1e4,
            tracks: vec![2],
        },
    ];
    let reco = RecoEvent {
        digis,
        hits,
        tracks,
        vertices,
        plus: None,
    };
    let truth = TruthEvent {
        particles: vec![
            particle(0, 0, 0.5, 0.0, 1), // below pT
            particle(1, 0, 2.0, 0.5, 0),
            particle(2, 0, 1.5, -1.0, 1),
            particle(3, 2, 0.0, 0.0, -1),
            particle(4, 1, 0.1, 0.0, 0),
            particle(5, 0, 3.0, 0.2, 0), // sim hits on 2 layers only
        ],
        vertices: vec![
            TruthVertex {
                id: 0,
                z: 0.5,
                is_hard: true,
            },
            TruthVertex {
                id: 1,
                z: 4.0,
                is_hard: false,
            },
        ],
        simhits: vec![
            sim(10, 1, 0.0095),
            sim(10, 1, 0.5), // a second crossing far away: the nearest one counts
            sim(100, 1, 0.0),
            sim(330, 1, 0.0),
            sim(700, 1, 0.0),
            sim(10, 2, 0.2),
            sim(701, 2, 0.0),
            sim(1200, 2, 0.0),
            sim(10, 5, 0.0),
            sim(20, 5, 0.0),
            sim(100, 5, 0.0),
        ],
        pixels: vec![
            px(10, 1, 1, 1, 3000.0),
            px(10, 1, 2, 1, 3000.0),
            px(10, 5, 5, 2, 4000.0),
            px(100, 1, 1, 1, 9000.0),
            px(330, 1, 1, 1, 9000.0),
            px(700, 1, 1, 1, 9000.0),
            px(701, 1, 1, 2, 6000.0),
            px(701, 1, 2, 1, 1000.0),
            px(701, 1, 2, 2, 500.0),
            px(702, 1, 1, 4, 9000.0),
            px(703, 1, 1, 3, 2500.0),
            px(704, 3, 3, 1, 9000.0),
        ],
    };
    (reco, truth)
}

#[test]
fn every_track_gets_a_truth_label() {
    let (reco, truth) = event();
    let r = analyze_event(&reco, &truth, &cfg()).unwrap();
    let labels: Vec<(u8, Option<u32>, TrackKind)> = r
        .track_truth
        .iter()
        .map(|t| (t.quality, t.particle, t.kind))
        .collect();
    assert_eq!(
        labels,
        vec![
            (2, Some(1), TrackKind::Matched),
            (2, Some(1), TrackKind::Duplicate),
            (2, None, TrackKind::Fake),
            (1, None, TrackKind::Fake), // below loose: by the match alone
        ]
    );
}

#[test]
fn the_second_selection_is_measured_beside_the_faithful_one() {
    let (mut reco, truth) = event();
    // The classifier keeps track 0 only; the second vertex finder finds nothing.
    reco.plus = Some(PlusProducts {
        scores: Some(vec![(0.9, HIGH_PURITY), (0.3, 2), (0.1, 2), (0.0, 1)]),
        vertices: Some(vec![]),
    });
    let (faithful, plus) = analyze_event_plus(&reco, &truth, &cfg()).unwrap();
    let plus = plus.unwrap();
    assert_eq!(
        (faithful.loose, faithful.fake, faithful.duplicate),
        (3, 1, 1)
    );
    assert_eq!((plus.loose, plus.fake, plus.duplicate), (1, 0, 0));
    // Same efficiency particles, found by track 0 in both.
    let found = |r: &EventResult| r.selected.iter().map(|p| p.found).collect::<Vec<_>>();
    assert_eq!(found(&faithful), found(&plus));
    // Same reconstructable vertex (from the loose tracks), found only by the first finder.
    assert_eq!(faithful.vertices.len(), 1);
    assert_eq!(plus.vertices.len(), 1);
    assert!(faithful.vertices[0].found && !plus.vertices[0].found);
    // The ROC's inputs: p1's best loose score, and every loose track's score and fakeness.
    let p1 = faithful.selected.iter().position(|p| p.id == 1).unwrap();
    assert_eq!(plus.roc.particles[p1], 0.9);
    assert_eq!(
        plus.roc.tracks,
        vec![(0.9, false), (0.3, false), (0.1, true)]
    );
    let points = roc(&[plus]);
    let at = |t: f64| points[(t * ROC_STEPS as f64).round() as usize];
    assert_eq!((at(0.0).fake_rate, at(0.0).tracks), (1.0 / 3.0, 3));
    assert_eq!((at(0.5).fake_rate, at(0.5).tracks), (0.0, 1));
    assert!(at(0.95).fake_rate.is_nan() && at(0.95).efficiency == 0.0);
}

#[test]
fn scores_of_other_tracks_are_refused() {
    let (mut reco, truth) = event();
    reco.plus = Some(PlusProducts {
        scores: Some(vec![(0.9, HIGH_PURITY)]),
        vertices: None,
    });
    let e = analyze_event_plus(&reco, &truth, &cfg()).unwrap_err();
    assert!(
        e.to_string()
            .contains("track_scores has 1 rows for an event with 4 tracks"),
        "{e}"
    );
}

fn cfg() -> Config {
    Config {
        vertex_min_tracks: 2,
        beam_spot: [0.0, 0.0, 0.1],
        ..Config::default()
    }
}

#[test]
fn hits_get_the_particle_with_the_largest_charge() {
    let (reco, truth) = event();
    let hp = hit_particles(&reco, &truth).unwrap();
    assert_eq!(
        hp,
        vec![
            Some(1),
            Some(2),
            Some(1),
            Some(1),
            Some(1),
            Some(2),
            Some(4),
            None
        ]
    );
    assert_eq!(match_track(&[0, 2, 3, 5], &hp, 0.75), Some(1));
    assert_eq!(match_track(&[0, 2, 5, 6], &hp, 0.75), None);
    assert_eq!(match_track(&[], &hp, 0.75), None);
}

#[test]
fn unordered_hits_are_an_error() {
    let (mut reco, truth) = event();
    reco.hits.swap(0, 2);
    assert!(hit_particles(&reco, &truth)
        .unwrap_err()
        .to_string()
        .contains("not ordered"));
}

#[test]
fn rates_of_a_tiny_event_are_exact() {
    let (reco, truth) = event();
    let mut reco = reco;
    reco.tracks[1].state[0] = 3.0; // the duplicate is fitted backwards (truth φ = 0)
    let r = analyze_event(&reco, &truth, &cfg()).unwrap();
    assert_eq!((r.reversed, r.reversed_pairs), (1, 1));
    assert_eq!(r.n_pileup, 1);
    // Selected: p1 (found), p2 (only a dup-quality track has 2 of its 3 hits: not found).
    assert_eq!(
        r.selected
            .iter()
            .map(|s| (s.pt, s.found))
            .collect::<Vec<_>>(),
        vec![(2.0, true), (1.5, false)]
    );
    // p1 crosses module 10 twice: a double hit on layer 0; its duplicate counts.
    let detail: Vec<_> = r
        .selected
        .iter()
        .map(|s| (s.rechit_layers, s.found_any_quality, s.double_layer_hits))
        .collect();
    assert_eq!(detail, vec![(4, true, true), (2, false, false)]);
    assert_eq!(r.duplicate_double_hits, 1);
    assert_eq!((r.loose, r.fake, r.duplicate), (3, 1, 1));
    // The reversed duplicate is counted, never in the resolutions (its φ, cotθ and zip
    // describe the other leg of the particle).
    assert_eq!(r.resolution.len(), 1);
    assert!(
        r.resolution[0].residuals[0].abs() < 1e-6 && r.resolution[0].residuals[1].abs() < 1.0,
        "{:?}",
        r.resolution
    );
    let mut forward = reco.clone();
    forward.tracks[1].state[0] = 0.0;
    let f = analyze_event(&forward, &truth, &cfg()).unwrap();
    assert_eq!((f.reversed, f.resolution.len()), (0, 2));
    assert!(
        (f.resolution[1].residuals[0] - 0.05).abs() < 1e-6,
        "{:?}",
        f.resolution[1]
    );
    // Vertex 0: two reconstructable tracks, both in reco vertex 0 at 0.41 (truth 0.5 − 0.1).
    assert_eq!(r.vertices.len(), 1);
    let v = r.vertices[0];
    assert_eq!(
        (v.tracks, v.found, v.merged, v.split),
        (2, true, false, false)
    );
    assert!(
        (v.dz - 0.01).abs() < 1e-6 && (v.pull - 1.0).abs() < 1e-4 && v.nearest_dz.is_infinite(),
        "{v:?}"
    );
    assert_eq!(r.fake_vertices, 1);
    // Residual of hit 0 against the nearest p1 crossing on module 10: 0.0100 − 0.0095 cm.
    // Hit 6 (secondary p4) has no sim hit on its module, hit 7 no particle.
    assert_eq!(r.residuals.len(), 6);
    assert_eq!(r.residuals[0].layer, 0);
    assert!(
        (r.residuals[0].dx_um - 5.0).abs() < 1e-3,
        "{:?}",
        r.residuals[0]
    );
    assert_eq!(
        r.counts,
        Counts {
            digis: 12,
            clusters: 8,
            hits: 8,
            tracks: 4,
            loose_tracks: 3,
            vertices: 2
        }
    );
    assert_eq!((r.hits_with_particle, r.hits), (7, 8));

    let s = summarize(&[r.clone(), r], &cfg(), None).unwrap();
    assert_eq!(s.events, 2);
    assert_eq!(
        (
            s.track_efficiency,
            s.track_fake_rate,
            s.track_duplicate_rate
        ),
        (0.5, 1.0 / 3.0, 1.0 / 3.0)
    );
    assert_eq!(
        (
            s.vertex_efficiency,
            s.vertex_merge_rate,
            s.vertex_split_rate,
            s.vertex_fake_rate
        ),
        (1.0, 0.0, 0.0, 0.5)
    );
    assert_eq!(
        (
            s.mean_digis,
            s.mean_clusters,
            s.mean_tracks,
            s.mean_loose_tracks,
            s.mean_vertices
        ),
        (12.0, 8.0, 4.0, 3.0, 2.0)
    );
    assert_eq!(s.track_fake_rate_4hits, 0.0);
    assert_eq!(
        (s.track_reversed_fraction, s.duplicate_reversed_fraction),
        (0.5, 1.0)
    ); // 1 of 2 matched
    assert_eq!(s.efficiency_particles, 4);
    let json = s.to_json();
    for k in [
        "\"track_efficiency\": 0.5",
        "\"events\": 2",
        "\"vertex_efficiency\": 1",
        "\"hit_residual_rms_x_um\"",
    ] {
        assert!(json.contains(k), "{k} in {json}");
    }
}

#[test]
fn a_merged_vertex_is_not_found() {
    let (mut reco, mut truth) = event();
    // p2 gets a 4-hit twin track so that vertex 1 has 2 reconstructable tracks, both in
    // reco vertex 0, whose main true vertex is 0.
    for h in [(1100u16, 1u16), (1101, 1)] {
        reco.digis.push(digi(h.0, h.1, 1, 0));
        reco.hits.push(hit(h.0, 0.0, 0.0));
        truth.pixels.push(px(h.0, h.1, 1, 2, 9000.0));
    }
    reco.tracks.push(track(2, &[1, 5, 8, 9], 1.5));
    reco.tracks.push(track(2, &[1, 5, 8, 9], 1.5));
    reco.vertices[0].tracks.extend([4, 5]);
    let r = analyze_event(&reco, &truth, &cfg()).unwrap();
    assert_eq!(r.vertices.len(), 2);
    // Ties (2 tracks each) go to the lower vertex id: reco vertex 0's main is vertex 0.
    let v1 = r.vertices[1];
    assert_eq!(
        (v1.tracks, v1.found, v1.merged, v1.split),
        (2, false, true, false)
    );
    assert!((v1.nearest_dz - 3.5).abs() < 1e-6);
}

#[test]
fn vertex_separation_is_in_the_pairs_combined_resolution() {
    let (mut reco, mut truth) = event();
    for h in [(1100u16, 1u16), (1101, 1)] {
        reco.digis.push(digi(h.0, h.1, 1, 0));
        reco.hits.push(hit(h.0, 0.0, 0.0));
        truth.pixels.push(px(h.0, h.1, 1, 2, 9000.0));
    }
    // Vertex 1's two tracks have σ(zip) = 0.5 cm: W = 8 against vertex 0's 2 × 10⁴.
    for _ in 0..2 {
        let mut t = track(2, &[1, 5, 8, 9], 1.5);
        t.cov[14] = 0.25;
        reco.tracks.push(t);
    }
    let r = analyze_event(&reco, &truth, &cfg()).unwrap();
    let (v0, v1) = (r.vertices[0], r.vertices[1]);
    let expected = 3.5 / (1.0 / 2e4 + 1.0 / 8.0f64).sqrt();
    assert!((v0.separation - expected).abs() < 1e-4, "{}", v0.separation);
    assert!((v1.separation - expected).abs() < 1e-4, "{}", v1.separation);
    // Two tracks each: the tie goes to the lower id, so vertex 1 is the one a merge loses.
    assert!(v1.smaller_partner && !v0.smaller_partner);
    // A vertex alone in its event has nothing to be merged with.
    let lone = analyze_event(
        &RecoEvent {
            tracks: reco.tracks[..4].to_vec(),
            ..reco.clone()
        },
        &truth,
        &cfg(),
    )
    .unwrap();
    assert_eq!(lone.vertices.len(), 1);
    assert!(lone.vertices[0].separation.is_infinite() && !lone.vertices[0].smaller_partner);
}

#[test]
fn truth_tip_follows_the_reference_sign_and_the_beam_spot() {
    use std::f32::consts::FRAC_PI_2;
    let p = TruthParticle {
        charge: 1,
        pt: 1.0,
        phi: FRAC_PI_2,
        vx: 0.12,
        vy: -0.03,
        vz: 2.0,
        ..Default::default()
    };
    let (phi, tip, zip) = truth_track_params(&p, [0.02, -0.03, 0.5]);
    assert!(
        (phi - std::f64::consts::FRAC_PI_2).abs() < 1e-6
            && (tip - 0.1).abs() < 1e-6
            && (zip - 1.5).abs() < 1e-6
    );
    // The opposite charge bends the other way (the beam line is inside its circle, the
    // generator's d0 = −0.1), but closest approach is the same point and direction: the
    // reference's tip depends on those only, so tip = q·d0 holds for both charges.
    let (phi, tip, _) = truth_track_params(
        &TruthParticle {
            charge: -1,
            ..p.clone()
        },
        [0.02, -0.03, 0.5],
    );
    assert!(
        (phi - std::f64::consts::FRAC_PI_2).abs() < 1e-6 && (tip - 0.1).abs() < 1e-6,
        "{tip}"
    );
    // A track starting left of the beam line, going +y: tip < 0.
    let (_, tip, _) = truth_track_params(
        &TruthParticle {
            vx: -0.08,
            ..p.clone()
        },
        [0.02, -0.03, 0.5],
    );
    assert!((tip + 0.1).abs() < 1e-6, "{tip}");
    // Sanity of the reference formula on the returned point: a track through the origin.
    let (_, tip, _) = truth_track_params(&TruthParticle { vx: 0.02, ..p }, [0.02, -0.03, 0.5]);
    assert!(tip.abs() < 1e-9);
}

const PLAN: &str = include_str!("../../../plans/pixel.toml");

#[test]
fn report_on_a_generated_run() {
    use quiver_columnar::plan::PlanSpec;
    use quiver_columnar::{executor, Conditions, JobContext, Registry};
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    let opts = quiver_datasets::GenerateOptions {
        events: 3,
        pileup: 10.0,
        seed: 11,
        output: ds.clone(),
        ..Default::default()
    };
    quiver_datasets::generate(&opts).unwrap();
    let d = quiver_datasets::Dataset::open(&ds).unwrap();
    let c = d.conditions().clone();
    let mut conditions = Conditions::new();
    conditions.insert(c.beam_spot);
    conditions.insert(c.cabling);
    conditions.insert(c.gains);
    conditions.insert(c.cpe);
    conditions.insert(quiver_formats::raw::RawData::new(d));
    let mut r = Registry::with_builtin();
    quiver_reco::steps::register(&mut r);
    quiver_validation::register(&mut r);
    let run = tmp.path().join("run");
    let resolved =
        quiver_columnar::validate(&PlanSpec::from_toml(PLAN, "pixel").unwrap(), &r).unwrap();
    let job = JobContext {
        input: Some(ds.clone()),
        output: run.clone(),
        conditions,
    };
    // As `quiver run` does: the report reads only a committed run (its run manifest).
    let opts = executor::RunOptions {
        threads: 1,
        batch_size: 2,
        first_event: 0,
        events: None,
        progress: false,
        cycle_input: false,
    };
    quiver_columnar::rundir::run_job(&resolved, &r, job, "pixel", 0, |steps| {
        Ok((executor::run(&resolved, &steps, &opts)?, ()))
    })
    .unwrap();
    // A directory that is not one complete run is refused.
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for e in std::fs::read_dir(&run).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != "quiver-run.toml" {
            std::fs::copy(&p, copy.join(p.file_name().unwrap())).unwrap();
        }
    }
    let e = report(&copy, &ds, &tmp.path().join("refused"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("holds no complete Quiver run"), "{e}");

    let out = tmp.path().join("report");
    let s = report(&run, &ds, &out).unwrap();
    println!("{}", s.to_json());
    assert_eq!(s.events, 3);
    assert!(s.efficiency_particles > 10, "{s:?}");
    assert!(
        s.track_efficiency > 0.8 && s.track_efficiency <= 1.0,
        "{s:?}"
    );
    assert!(s.track_fake_rate_4hits < 0.05, "{s:?}");
    assert!(s.hit_match_fraction > 0.95, "{s:?}");
    assert!(
        s.hit_residual_rms_x_um > 1.0 && s.hit_residual_rms_x_um < 30.0,
        "{s:?}"
    );
    assert!(
        s.mean_hits == s.mean_clusters
            && s.mean_tracks >= s.mean_loose_tracks
            && s.mean_vertices >= 1.0,
        "{s:?}"
    );
    for f in [
        "efficiency",
        "resolution",
        "vertex_efficiency",
        "vertex_neighbours",
        "track_composition",
        "hit_residuals",
    ] {
        assert!(out.join(format!("{f}.parquet")).is_file(), "{f}");
    }
    let json = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(json.contains("\"track_efficiency\"") && json.contains("\"mean_vertices\""));
    // Pulls: the RMS and the 68 % half-width (robust to a single wrong-charge track, whose
    // cotθ has the wrong sign), both near 1 for every quantity on a small clean run.
    let f = std::fs::File::open(out.join("resolution.parquet")).unwrap();
    let rb = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let col = |n: &str| {
        rb.column_by_name(n)
            .unwrap_or_else(|| panic!("{n}"))
            .clone()
    };
    let (q, b) = (col("quantity"), col("bin_variable"));
    let (q, b) = (
        q.as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap(),
        b.as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap(),
    );
    let w = col("pull_half_width_68");
    let w = w
        .as_any()
        .downcast_ref::<arrow_array::Float64Array>()
        .unwrap();
    for i in (0..rb.num_rows()).filter(|&i| b.value(i) == "all") {
        assert!(
            w.value(i) > 0.3 && w.value(i) < 3.0,
            "{} pull 68 % half-width {}",
            q.value(i),
            w.value(i)
        );
    }
    // report.html: self-contained, one inline SVG per plot, the headline numbers and targets.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        !html.contains("<script") && !html.contains("<link") && !html.contains("src=\""),
        "external resources"
    );
    for id in [
        "summary",
        "efficiency",
        "resolution",
        "vertices",
        "residuals",
    ] {
        assert!(html.contains(&format!("<h2 id=\"{id}\"")), "{id}");
    }
    // 4 efficiency + 5 resolution + 2 vertex + 1 residual plots.
    assert_eq!(html.matches("<svg").count(), 12);
    let section = |id: &str| {
        html.split(&format!("<h2 id=\"{id}\""))
            .nth(1)
            .unwrap()
            .split("<h2")
            .next()
            .unwrap()
            .to_string()
    };
    for (id, n) in [
        ("efficiency", 4),
        ("resolution", 5),
        ("vertices", 2),
        ("residuals", 1),
    ] {
        assert_eq!(section(id).matches("<svg").count(), n, "{id}");
    }
    for t in [
        "Efficiency vs true pT",
        "Efficiency vs true η",
        "Efficiency vs true φ",
        "Efficiency vs pile-up interactions",
        "Hit residual RMS per layer",
    ] {
        assert!(html.contains(t), "{t}");
    }
    // Percentages with 3 significant digits (the efficiency is above 10 %).
    let eff = format!("{:.1} %", 100.0 * s.track_efficiency);
    assert!(
        section("summary").contains(&format!(
            "<td>Track efficiency</td><td>{eff}</td><td>≥ 95 %</td>"
        )),
        "{eff}"
    );
    for t in [
        "Track fake rate",
        "≤ 2 %",
        "Track duplicate rate",
        "≤ 1 %",
        "Vertex efficiency",
        "≥ 90 %",
    ] {
        assert!(section("summary").contains(t), "{t}");
    }
    // summary.json's values, rounded to 4 significant digits for reading.
    let shown: f64 = section("summary")
        .split("<td>mean_hits</td><td>")
        .nth(1)
        .and_then(|v| v.split('<').next())
        .and_then(|v| v.parse().ok())
        .expect("mean_hits in the summary table");
    assert!(
        (shown - s.mean_hits).abs() <= 5e-4 * s.mean_hits.abs(),
        "{shown} for {}",
        s.mean_hits
    );
    // Another dataset's truth is refused: it is not the run's input.
    let other = tmp.path().join("other");
    let opts = quiver_datasets::GenerateOptions {
        events: 1,
        pileup: 1.0,
        seed: 1,
        output: other.clone(),
        ..Default::default()
    };
    quiver_datasets::generate(&opts).unwrap();
    let e = report(&run, &other, &tmp.path().join("r2"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not the dataset the run in"), "{e}");
}
