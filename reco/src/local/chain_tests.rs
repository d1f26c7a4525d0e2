//! End-to-end tests of the local chain: FED buffers → digis → calibrated digis → clusters →
//! charge cut → rec hits, on hand-built events, plus an ignored timing run.

use super::test_support::*;
use super::*;
use quiver_formats::conditions::BeamSpot;

fn run_chain(
    feds: &[(u32, Vec<u8>)],
    cabling: &quiver_formats::conditions::CablingMap,
    gains: &quiver_formats::conditions::GainCalibration,
    algorithm: ClusterAlgorithm,
) -> LocalEvent {
    let refs: Vec<(u32, &[u8])> = feds.iter().map(|(f, b)| (*f, b.as_slice())).collect();
    let cpe = simple_cpe();
    let cond = LocalConditions {
        cabling,
        gains,
        cpe: &cpe,
        beam_spot: &BeamSpot::default(),
    };
    let mut cfg = LocalConfig::default();
    cfg.cluster.algorithm = algorithm;
    reconstruct_event(&refs, &cond, &cfg).unwrap()
}

/// gain 3.0 VCal/ADC, ped 12 ADC: 112 ADC → 14040 e (L2+) / 14330 e (L1).
#[test]
fn fed_to_hits_with_dead_column_and_l1() {
    let pixels = [
        (3u16, 10u32, 20u32, 112u32), // L1 single pixel
        (3, 11, 21, 112),             // its diagonal neighbour
        (100, 50, 51, 112),           // L2: across the ROC edge 51|52
        (100, 50, 52, 112),
        (100, 120, 300, 112), // in a dead column
        (100, 121, 300, 112), // dead column as well
        (100, 121, 301, 112), // its neighbour, alive: survives alone
        (1200, 0, 5, 13),     // FPix: 3 e·… below threshold (rejected)
    ];
    let feds = encode_event(&pixels);
    let mut gains = uniform_gains(30, 12);
    set_column_ped(&mut gains, 100, 300, 255);
    let c = run_chain(&feds, test_cabling(), &gains, ClusterAlgorithm::Faithful);
    assert!(c.digis.errors.is_empty());
    assert_eq!(c.clusters.n_modules, 3);
    // Dead-column pixels are invalid after calibration.
    let dead: Vec<usize> = (0..c.digis.n_digis as usize)
        .filter(|&i| c.digis.yy[i] == 300)
        .collect();
    assert!(dead
        .iter()
        .all(|&i| c.calibrated.module_ind[i] == INVALID_MODULE && c.calibrated.adc[i] == 0));
    assert_eq!(c.cut.n_clusters_in_module[3], 1);
    assert_eq!(c.cut.n_clusters_in_module[100], 2);
    assert_eq!(c.cut.n_clusters_in_module[1200], 0);
    assert_eq!(c.hits.n_hits, 3);
    assert_eq!(c.hits.det_index, vec![3, 100, 100]);
    assert_eq!(c.hits.charge, vec![2 * 14330, 2 * 14040, 14040]);
    assert_eq!((c.hits.size_x[1], c.hits.size_y[1]), (8, 32));
    assert_eq!(c.hits.hits_layer_start, [0, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3]);
    // Same answer with the fast clusterizer.
    let u = run_chain(&feds, test_cabling(), &gains, ClusterAlgorithm::UnionFind);
    assert_eq!(u.hits, c.hits);
}

/// A synthetic occupancy-like event on the full detector: ~1800 modules, ~10 clusters of
/// 1–6 pixels each.
fn synthetic_event(seed: u64) -> Vec<(u32, Vec<u8>)> {
    let mut rng = SplitMix(seed);
    let mut pixels = Vec::new();
    for m in 0..1856u16 {
        if rng.below(40) == 0 {
            continue;
        }
        for _ in 0..10 {
            let (x, y) = (rng.below(157) as u32, rng.below(413) as u32);
            for k in 0..1 + rng.below(6) as u32 {
                pixels.push((m, x + k % 2, y + k / 2, 20 + rng.below(200) as u32));
            }
        }
    }
    encode_event_with(&pixels, |d| full_modules()[d as usize])
}

#[test]
fn full_detector_event_is_consistent() {
    let feds = synthetic_event(3);
    let gains = uniform_gains(30, 12);
    let c = run_chain(&feds, full_cabling(), &gains, ClusterAlgorithm::Faithful);
    let u = run_chain(&feds, full_cabling(), &gains, ClusterAlgorithm::UnionFind);
    assert_eq!(c.clusters, u.clusters);
    assert_eq!(c.hits, u.hits);
    assert!(c.digis.errors.is_empty());
    assert!(c.clusters.n_modules > 1700);
    assert_eq!(c.hits.n_hits, c.cut.n_clusters);
    assert!(c.hits.n_hits > 10_000);
    // Hits are sorted by module and every hit has pixels.
    assert!(c.hits.det_index.windows(2).all(|w| w[0] <= w[1]));
    assert!(c.hits.charge.iter().all(|&q| q > 2000));
    assert_eq!(c.hits.hits_layer_start[10], c.hits.n_hits);
}

/// Timing per step on the synthetic full-detector event (run with
/// `cargo test --release -p quiver-reco -- --ignored --nocapture timing_local_chain`).
#[test]
#[ignore]
fn timing_local_chain() {
    let feds = synthetic_event(11);
    let gains = uniform_gains(30, 12);
    let refs: Vec<(u32, &[u8])> = feds.iter().map(|(f, b)| (*f, b.as_slice())).collect();
    let reps = 20;
    let time = |name: &str, f: &mut dyn FnMut()| {
        f();
        let t = std::time::Instant::now();
        for _ in 0..reps {
            f();
        }
        eprintln!(
            "{name:<22} {:8.3} ms/event",
            t.elapsed().as_secs_f64() * 1e3 / reps as f64
        );
    };
    let digis = raw_to_digis(&refs, full_cabling(), &RawToDigiConfig::default()).unwrap();
    eprintln!("event: {} words", digis.n_digis);
    time("raw_to_digis", &mut || {
        std::hint::black_box(
            raw_to_digis(&refs, full_cabling(), &RawToDigiConfig::default()).unwrap(),
        );
    });
    let cal = calibrate_digis(
        &digis.module_ind,
        &digis.xx,
        &digis.yy,
        &digis.adc,
        &gains,
        &CalibConfig::default(),
    )
    .unwrap();
    time("calibrate", &mut || {
        std::hint::black_box(
            calibrate_digis(
                &digis.module_ind,
                &digis.xx,
                &digis.yy,
                &digis.adc,
                &gains,
                &CalibConfig::default(),
            )
            .unwrap(),
        );
    });
    for algorithm in [ClusterAlgorithm::Faithful, ClusterAlgorithm::UnionFind] {
        let cfg = ClusterizeConfig {
            algorithm,
            ..Default::default()
        };
        time(&format!("clusterize {algorithm:?}"), &mut || {
            std::hint::black_box(clusterize(&cal.module_ind, &digis.xx, &digis.yy, &cfg).unwrap());
        });
    }
    let cl = clusterize(
        &cal.module_ind,
        &digis.xx,
        &digis.yy,
        &ClusterizeConfig::default(),
    )
    .unwrap();
    let cc = ChargeCutConfig::default();
    time("charge_cut", &mut || {
        std::hint::black_box(
            charge_cut(
                &cal.module_ind,
                &cal.adc,
                &cl.clus,
                &cl.module_start,
                &cl.n_clusters_in_module,
                &cc,
            )
            .unwrap(),
        );
    });
    let cut = charge_cut(
        &cal.module_ind,
        &cal.adc,
        &cl.clus,
        &cl.module_start,
        &cl.n_clusters_in_module,
        &cc,
    )
    .unwrap();
    let cpe = simple_cpe();
    let digi_cols = DigiColumns {
        module_ind: &cut.module_ind,
        xx: &digis.xx,
        yy: &digis.yy,
        adc: &cal.adc,
        clus: &cut.clus,
    };
    let clus_cols = ClusterColumns {
        module_start: &cl.module_start,
        module_id: &cl.module_id,
        n_clusters_in_module: &cut.n_clusters_in_module,
        clus_module_start: &cut.clus_module_start,
    };
    time("rec_hits", &mut || {
        std::hint::black_box(rec_hits(&digi_cols, &clus_cols, &cpe, &BeamSpot::default()).unwrap());
    });
    eprintln!("hits: {}", cut.n_clusters);
    let cond = LocalConditions {
        cabling: full_cabling(),
        gains: &gains,
        cpe: &cpe,
        beam_spot: &BeamSpot::default(),
    };
    for algorithm in [ClusterAlgorithm::Faithful, ClusterAlgorithm::UnionFind] {
        let mut cfg = LocalConfig::default();
        cfg.cluster.algorithm = algorithm;
        time(&format!("whole chain {algorithm:?}"), &mut || {
            std::hint::black_box(reconstruct_event(&refs, &cond, &cfg).unwrap());
        });
    }
}

mod garbage {
    use super::super::*;
    use crate::local::test_support::{simple_cpe, uniform_gains, SplitMix};
    use proptest::prelude::*;
    use quiver_formats::conditions::BeamSpot;

    fn pick<T: Copy>(rng: &mut SplitMix, xs: &[T]) -> T {
        xs[rng.below(xs.len() as u64) as usize]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20_000, failure_persistence: None, ..ProptestConfig::default() })]

        /// Arbitrary, inconsistent columns never make a step panic: each returns a result or
        /// an error.
        #[test]
        fn steps_never_panic_on_garbage_columns(seed in any::<u64>()) {
            let mut rng = SplitMix(seed);
            let n = rng.below(120) as usize;
            let mods = [9999u16, 3, 3, 3, 100, 100, 1855, 1999, 2000, 40000];
            let module: Vec<u16> = (0..n).map(|_| pick(&mut rng, &mods)).collect();
            let wild = rng.below(4) == 0;
            let xx: Vec<u16> = (0..n).map(|_| if wild { rng.next() as u16 } else { rng.below(6) as u16 }).collect();
            let yy: Vec<u16> = (0..n).map(|_| if wild { rng.next() as u16 } else { rng.below(6) as u16 + 410 }).collect();
            let adc: Vec<u16> = (0..n).map(|_| rng.next() as u16).collect();
            let clus: Vec<i32> = (0..n).map(|_| pick(&mut rng, &[-9999, -1, 0, 1, 2, 5, 1023, 1024, 9999, i32::MAX])).collect();
            let runs = rng.below(5) as usize;
            let mut module_start = vec![runs as u32];
            module_start.extend((0..runs).map(|_| rng.below(n as u64 + 2) as u32));
            let module_id: Vec<u32> = (0..runs).map(|_| pick(&mut rng, &[3u32, 100, 1855, 1999, 5000])).collect();
            let mut ncl = vec![0u32; 2000];
            for &m in &[3usize, 100, 1855] {
                ncl[m] = pick(&mut rng, &[0u32, 1, 2, 7, 1500, u32::MAX]);
            }
            let mut cms = charge_cut::hits_module_start(&ncl, 1024, 49152);
            if rng.below(3) == 0 {
                let i = rng.below(2001) as usize;
                cms[i] = rng.next() as u32;
            }

            static GAINS: std::sync::OnceLock<quiver_formats::conditions::GainCalibration> = std::sync::OnceLock::new();
            static CPE: std::sync::OnceLock<quiver_formats::conditions::CpeParams> = std::sync::OnceLock::new();
            let gains = GAINS.get_or_init(|| uniform_gains(30, 12));
            let _ = calibrate_digis(&module, &xx, &yy, &adc, gains, &CalibConfig::default());
            for algorithm in [ClusterAlgorithm::Faithful, ClusterAlgorithm::UnionFind] {
                let cfg = ClusterizeConfig { algorithm, ..Default::default() };
                if let Ok(c) = clusterize(&module, &xx, &yy, &cfg) {
                    prop_assert_eq!(c.clus.len(), n);
                }
            }
            let _ = charge_cut(&module, &adc, &clus, &module_start, &ncl, &ChargeCutConfig::default());
            let digis = DigiColumns { module_ind: &module, xx: &xx, yy: &yy, adc: &adc, clus: &clus };
            let clusters = ClusterColumns { module_start: &module_start, module_id: &module_id, n_clusters_in_module: &ncl, clus_module_start: &cms };
            let _ = rec_hits(&digis, &clusters, CPE.get_or_init(simple_cpe), &BeamSpot::default());
        }
    }
}
