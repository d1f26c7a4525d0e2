//! Tests of the pixel-track chain on hand-built hits.

use super::doublets::{build_doublet_columns, build_doublets, DoubletConfig, N_PAIRS};
use super::fit::{broken_line_fit, hit_global_cov};
use super::ntuplets::{CaState, Tuples};
use super::quality::{fast_duplicate_remover, triplet_cleaner};
use super::testing::{Gauss, Helix, HitBuilder, B_FIELD};
use super::*;

fn cells(b: &HitBuilder, cfg: &DoubletConfig) -> Vec<(u8, u32, u32)> {
    let cpe = HitBuilder::cpe_params();
    let cols = b.build();
    let d = build_doublets(&cols.view(&cpe), cfg, N_PAIRS).unwrap();
    d.cells.iter().map(|c| (c.pair, c.inner, c.outer)).collect()
}

fn only(cut: &str) -> DoubletConfig {
    DoubletConfig {
        do_cluster_cut: cut == "cluster",
        do_z0_cut: cut == "z0",
        do_pt_cut: cut == "pt",
        ..DoubletConfig::default()
    }
}

fn loose_tracks(t: &Tracks) -> Vec<usize> {
    (0..t.len())
        .filter(|&i| t.quality[i] == Quality::Loose as u8)
        .collect()
}

#[test]
fn perfect_helix_barrel_gives_one_loose_quadruplet() {
    for (charge, pt) in [(1, 2.0), (-1, 2.0), (1, 0.8), (-1, 15.0)] {
        let h = Helix {
            pt,
            charge,
            phi0: 1.1,
            tip: 0.0,
            zip: 1.0,
            cot_theta: 0.5,
        };
        let mut b = HitBuilder::new();
        let ids = b.add_helix_barrel(&h, &[0, 1, 2, 3]);
        assert_eq!(ids.len(), 4);
        let cpe = HitBuilder::cpe_params();
        let cols = b.build();
        let t = reconstruct_tracks(&cols.view(&cpe), &CaConfig::default()).unwrap();
        let loose = loose_tracks(&t);
        assert_eq!(loose.len(), 1, "pt {pt} charge {charge}: {:?}", t.quality);
        let i = loose[0];
        assert_eq!(t.n_hits[i], 4);
        let expect: Vec<u32> = ids.iter().map(|&id| cols.index_of[id]).collect();
        assert_eq!(t.hits_of(i), &expect[..]);
        assert_eq!(t.charge[i] as i32, charge);
        let sigma_qpt = t.covariance[i][9].sqrt();
        let qpt = t.state[i][2];
        assert!(
            (qpt - charge as f32 / pt as f32).abs() < 3.0 * sigma_qpt + 1e-3 * (1.0 / pt as f32),
            "q/pt {qpt} vs {} ± {sigma_qpt}",
            charge as f64 / pt
        );
        assert!(
            (t.pt[i] - pt as f32).abs() / (pt as f32) < 0.02,
            "pt {} vs {pt}",
            t.pt[i]
        );
        assert!(
            t.tip[i].abs() < 3.0 * t.covariance[i][5].sqrt() + 1e-4,
            "tip {}",
            t.tip[i]
        );
        assert!((t.zip[i] - 1.0).abs() < 1e-3, "zip {}", t.zip[i]);
        assert!((t.state[i][3] - 0.5).abs() < 1e-3, "cot {}", t.state[i][3]);
        assert!((t.eta[i] - 0.5f32.asinh()).abs() < 1e-3);
        assert!((t.phi[i] - 1.1).abs() < 1e-3, "phi {}", t.phi[i]);
        assert!(t.chi2[i] < 1.0, "chi2 {}", t.chi2[i]);
        // Every other tuple is a duplicate of the quadruplet.
        for j in 0..t.len() {
            if j != i {
                assert_eq!(t.quality[j], Quality::Dup as u8);
            }
        }
    }
}

#[test]
fn forward_five_hit_track_is_fitted_on_four_hits() {
    let h = Helix {
        pt: 3.0,
        charge: -1,
        phi0: -2.0,
        tip: 0.0,
        zip: 0.5,
        cot_theta: 3.0,
    };
    let mut b = HitBuilder::new();
    let ids = b.add_helix(&h, &[0, 1, 4, 5, 6], None);
    assert_eq!(ids.len(), 5);
    let cpe = HitBuilder::cpe_params();
    let cols = b.build();
    let t = reconstruct_tracks(&cols.view(&cpe), &CaConfig::default()).unwrap();
    let loose = loose_tracks(&t);
    assert_eq!(loose.len(), 1, "{:?} {:?}", t.quality, t.n_hits);
    let i = loose[0];
    assert_eq!(t.n_hits[i], 5);
    assert_eq!(t.charge[i], -1);
    assert!((t.pt[i] - 3.0).abs() < 0.1, "pt {}", t.pt[i]);
    assert!((t.zip[i] - 0.5).abs() < 1e-2, "zip {}", t.zip[i]);
    assert!((t.state[i][3] - 3.0).abs() < 1e-2);
    // Mirror image in z: the negative endcap.
    let hm = Helix {
        cot_theta: -3.0,
        zip: -0.5,
        ..h
    };
    let mut b = HitBuilder::new();
    assert_eq!(b.add_helix(&hm, &[0, 1, 7, 8, 9], None).len(), 5);
    let cols = b.build();
    let t = reconstruct_tracks(&cols.view(&cpe), &CaConfig::default()).unwrap();
    assert_eq!(loose_tracks(&t).len(), 1);
}

#[test]
fn doublet_inner_z_window() {
    for (z_in, expect) in [(19.5, 1), (20.5, 0), (-19.5, 1), (-20.5, 0)] {
        let mut b = HitBuilder::new();
        b.add_barrel_hit(0, 2.9, 0.3, z_in);
        b.add_barrel_hit(1, 6.8, 0.3, z_in + z_in.signum() * 0.5);
        assert_eq!(cells(&b, &only("none")).len(), expect, "z_in {z_in}");
    }
}

#[test]
fn doublet_z0_cut() {
    // Points on z = z0 + 0.5·r.
    for (z0, expect) in [(11.5, 1), (12.5, 0), (-11.5, 1), (-12.5, 0)] {
        let mut b = HitBuilder::new();
        b.add_barrel_hit(1, 6.8, 0.3, z0 + 0.5 * 6.8);
        b.add_barrel_hit(2, 10.9, 0.3, z0 + 0.5 * 10.9);
        assert_eq!(cells(&b, &only("z0")).len(), expect, "z0 {z0}");
    }
    // Δr above the pair's maximum (9 cm for B1→F+1).
    for (r_out, expect) in [(11.5, 1), (12.5, 0)] {
        let mut b = HitBuilder::new();
        b.add_barrel_hit(0, 2.9, 0.3, 32.45 * 2.9 / r_out);
        b.add_hit(4, r_out * 0.3f64.cos(), r_out * 0.3f64.sin(), 32.45);
        let c = cells(&b, &only("z0"));
        assert_eq!(c.len(), expect, "r_out {r_out}");
        if expect == 1 {
            assert_eq!(c[0].0, 1);
        }
    }
}

#[test]
fn doublet_phi_and_pt_cuts() {
    // φ window of B1→B2 is 0.05 rad (522 in int16 units).
    for (dphi, expect) in [(0.049, 1), (0.052, 0), (-0.049, 1), (-0.052, 0)] {
        let mut b = HitBuilder::new();
        b.add_barrel_hit(0, 2.9, 3.1, 1.0);
        b.add_barrel_hit(1, 6.8, 3.1 + dphi, 1.0);
        assert_eq!(cells(&b, &only("none")).len(), expect, "dphi {dphi}");
    }
    // pT cut: Δφ²·(4R²−ri·ro) > Δr² with R = 43.89 cm.
    for (dphi, expect) in [(0.040, 1), (0.046, 0)] {
        let mut b = HitBuilder::new();
        b.add_barrel_hit(0, 2.9, -0.2, 1.0);
        b.add_barrel_hit(1, 6.8, -0.2 + dphi, 1.0);
        assert_eq!(cells(&b, &only("pt")).len(), expect, "pt dphi {dphi}");
    }
}

#[test]
fn doublet_cluster_size_cuts() {
    // B1→F+1: inner y-size ≥ 36 (or ≤ 0), and within 20 of the dz/dr prediction (45 here).
    let r_out = 11.0;
    for (mes, expect) in [(36, 1), (35, 0), (0, 1), (-5, 1), (64, 1), (66, 0)] {
        let mut b = HitBuilder::new();
        let i = b.add_barrel_hit(0, 2.9, 0.3, 32.45 * 2.9 / r_out).unwrap();
        b.set_size_y(i, mes);
        b.add_hit(4, r_out * 0.3f64.cos(), r_out * 0.3f64.sin(), 32.45);
        assert_eq!(cells(&b, &only("cluster")).len(), expect, "mes {mes}");
    }
    // Barrel pairs: |Δ y-size| ≤ 28 from B1, ≤ 20 otherwise.
    for (inner, dsize, expect) in [
        (0u8, 28i16, 1),
        (0, 29, 0),
        (1, 20, 1),
        (1, 21, 0),
        (1, -21, 0),
    ] {
        let mut b = HitBuilder::new();
        let r = [2.9, 6.8, 10.9][inner as usize];
        let ro = [2.9, 6.8, 10.9][inner as usize + 1];
        let i = b.add_barrel_hit(inner, r, 0.3, 1.0).unwrap();
        let o = b.add_barrel_hit(inner + 1, ro, 0.3, 1.0 * ro / r).unwrap();
        b.set_size_y(i, 40);
        b.set_size_y(o, 40 + dsize);
        assert_eq!(
            cells(&b, &only("cluster")).len(),
            expect,
            "inner {inner} dsize {dsize}"
        );
    }
}

#[test]
fn doublet_capacities() {
    // 130 B1 hits pointing at one B2 hit: 130 cells, only 128 listed on the outer hit.
    let mut b = HitBuilder::new();
    for k in 0..130 {
        b.add_barrel_hit(0, 2.9, 0.3, -6.0 + 0.05 * k as f64);
    }
    b.add_barrel_hit(1, 6.8, 0.3, 0.0);
    let cpe = HitBuilder::cpe_params();
    let cols = b.build();
    let cfg = only("none");
    let d = build_doublets(&cols.view(&cpe), &cfg, N_PAIRS).unwrap();
    assert_eq!(d.cells.len(), 130);
    assert_eq!(d.outer_hit_of_cell.of(130).len(), 128);
    assert_eq!(d.outer_hit_overflows, 1);
    let cfg = DoubletConfig {
        max_number_of_doublets: 100,
        ..only("none")
    };
    let d = build_doublets(&cols.view(&cpe), &cfg, N_PAIRS).unwrap();
    assert_eq!(d.cells.len(), 100);
    assert!(d.cells_overflow);
    // The cells past the capacity are counted, not stored; the stored ones are the first.
    assert_eq!(d.cells_missed, 30);
    let full = build_doublets(&cols.view(&cpe), &only("none"), N_PAIRS).unwrap();
    assert_eq!(
        &full.cells[..100]
            .iter()
            .map(|c| (c.inner, c.outer))
            .collect::<Vec<_>>(),
        &d.cells
            .iter()
            .map(|c| (c.inner, c.outer))
            .collect::<Vec<_>>()
    );
    // One inner hit with 40 candidates and room for 25: the container fills inside the
    // second chunk of 16; the first 25 in the search's order are kept, 15 counted.
    let mut b = HitBuilder::new();
    b.add_barrel_hit(0, 2.9, 0.3, 0.0);
    for k in 0..40 {
        b.add_barrel_hit(1, 6.8, 0.3, -2.0 + 0.1 * k as f64);
    }
    let fan = b.build();
    let full = build_doublets(&fan.view(&cpe), &only("none"), N_PAIRS).unwrap();
    assert_eq!(full.cells.len(), 40);
    for max in [0, 1, 15, 16, 17, 25, 32, 39, 40] {
        let cfg = DoubletConfig {
            max_number_of_doublets: max,
            ..only("none")
        };
        let d = build_doublets(&fan.view(&cpe), &cfg, N_PAIRS).unwrap();
        assert_eq!(d.cells, full.cells[..max as usize], "max {max}");
        assert_eq!(d.cells_missed, 40 - max as u64, "max {max}");
        let c = build_doublet_columns(&fan.view(&cpe), &cfg, N_PAIRS).unwrap();
        let outer: Vec<u32> = full.cells[..max as usize].iter().map(|c| c.outer).collect();
        assert_eq!(
            (c.outer, c.cells_missed),
            (outer, 40 - max as u64),
            "max {max}"
        );
    }
    // A hit capacity below the event's hits is an error naming both; sized lifts it.
    let n = cols.view(&cpe).n_hits();
    let small = DoubletConfig {
        max_hits: n - 1,
        ..only("none")
    };
    let e = build_doublets(&cols.view(&cpe), &small, N_PAIRS).unwrap_err();
    assert_eq!(e, crate::tracks::TrackError::TooManyHits { n, max: n - 1 });
}

#[test]
fn tuples_past_the_capacity_are_counted() {
    // Three separate helices: three triplets; with room for two the third is counted.
    let mut b = HitBuilder::new();
    for phi in [0.3, 1.3, 2.3] {
        b.add_helix_barrel(
            &Helix {
                phi0: phi,
                ..Helix::default()
            },
            &[0, 1, 2],
        );
    }
    let (cols, cpe) = (b.build(), HitBuilder::cpe_params());
    let hits = cols.view(&cpe);
    let run = |max_tuples| {
        let cfg = NtupletConfig {
            max_tuples,
            ..NtupletConfig::default()
        };
        let mut ca = CaState::new(build_doublets(&hits, &DoubletConfig::default(), 19).unwrap());
        ntuplets::connect(&hits, &mut ca, &cfg);
        let t = ntuplets::find_ntuplets(&mut ca, &cfg).unwrap();
        (t.len(), t.overflow, ca.tuple_overflows)
    };
    assert_eq!(run(32_768), (3, false, 0));
    assert_eq!(run(2), (2, true, 1));
}

#[test]
fn phi_binner_wraps_around_pi() {
    // Hits just either side of φ = ±π are 2·0.01 rad apart and must pair up.
    let mut b = HitBuilder::new();
    b.add_barrel_hit(0, 2.9, std::f64::consts::PI - 0.01, 1.0);
    b.add_barrel_hit(1, 6.8, -std::f64::consts::PI + 0.01, 1.0 * 6.8 / 2.9);
    assert_eq!(cells(&b, &DoubletConfig::default()).len(), 1);
}

#[test]
fn invalid_inputs_are_errors() {
    let mut b = HitBuilder::new();
    b.add_helix_barrel(&Helix::default(), &[0, 1, 2]);
    let cpe = HitBuilder::cpe_params();
    let mut cols = b.build();
    cols.yerr.pop();
    let e = reconstruct_tracks(&cols.view(&cpe), &CaConfig::default()).unwrap_err();
    assert!(
        matches!(
            e,
            TrackError::ColumnLength {
                column: "yerr_local",
                ..
            }
        ),
        "{e}"
    );
    let mut cols = b.build();
    cols.layer_start[3] = 100;
    assert!(matches!(
        reconstruct_tracks(&cols.view(&cpe), &CaConfig::default()),
        Err(TrackError::LayerStart { .. })
    ));
    let cols = b.build();
    let small = quiver_formats::conditions::CpeParams {
        det: cpe.det[..10].to_vec(),
        ..cpe.clone()
    };
    assert!(matches!(
        reconstruct_tracks(&cols.view(&small), &CaConfig::default()),
        Err(TrackError::MissingModule { .. })
    ));
    let bad = CaConfig {
        fit: FitConfig {
            b_field: -1.0,
            ..FitConfig::default()
        },
        ..CaConfig::default()
    };
    assert!(matches!(
        reconstruct_tracks(&cols.view(&cpe), &bad),
        Err(TrackError::Config(_))
    ));
    // An empty event is fine.
    let empty = HitBuilder::new().build();
    let t = reconstruct_tracks(&empty.view(&cpe), &CaConfig::default()).unwrap();
    assert!(t.is_empty());
    assert_eq!(t.hit_offsets, vec![0]);
}

/// Fits smeared 4-hit helices directly and checks the pulls of the five parameters.
type FitFn = fn(&[[f64; 3]], &[[f32; 6]], f64) -> Result<super::fit::BrokenLineFit, TrackError>;

fn pulls(fit: FitFn, n_hits: usize) {
    let cpe = HitBuilder::cpe_params();
    let mut g = Gauss::new(7);
    let n = 400;
    let mut sum = [0.0f64; 5];
    let mut sum2 = [0.0f64; 5];
    let mut used = 0;
    for _ in 0..n {
        let charge = if g.sample() > 0.0 { 1 } else { -1 };
        let h = Helix {
            pt: 1.0 + 9.0 * (0.5 + 0.5 * (g.sample() / 3.0).tanh()),
            charge,
            phi0: 3.0 * (g.sample() / 3.0).tanh(),
            tip: 0.0,
            zip: 2.0 * g.sample(),
            cot_theta: 0.4 * g.sample(),
        };
        let mut b = HitBuilder::new();
        if b.add_helix(&h, &[0, 1, 2, 3][..n_hits], Some(&mut g)).len() != n_hits {
            continue;
        }
        let cols = b.build();
        let pos: Vec<[f64; 3]> = (0..n_hits)
            .map(|k| [cols.x[k] as f64, cols.y[k] as f64, cols.z[k] as f64])
            .collect();
        let ge: Vec<[f32; 6]> = (0..n_hits)
            .map(|k| {
                hit_global_cov(
                    &cpe.det[cols.det[k] as usize].frame,
                    cols.xerr[k],
                    cols.yerr[k],
                )
            })
            .collect();
        let f = fit(&pos, &ge, B_FIELD as f32 as f64).unwrap();
        let c = &f.circle;
        let l = &f.line;
        let truth = [
            h.phi0,
            h.tip,
            charge as f64 * B_FIELD / h.pt,
            h.cot_theta,
            h.zip,
        ];
        let fitted = [c.par[0], c.par[1], c.par[2], l.par[0], l.par[1]];
        let var = [
            c.cov[0][0],
            c.cov[1][1],
            c.cov[2][2],
            l.cov[0][0],
            l.cov[1][1],
        ];
        // The circle curvature is signed like the charge.
        assert_eq!(c.par[2].signum() as i32, charge, "curvature sign");
        for k in 0..5 {
            let pull = (fitted[k] - truth[k]) / var[k].sqrt();
            sum[k] += pull;
            sum2[k] += pull * pull;
        }
        used += 1;
    }
    assert!(used > 300);
    let names = ["phi", "tip", "kappa", "cot", "zip"];
    for k in 0..5 {
        let mean = sum[k] / used as f64;
        let rms = (sum2[k] / used as f64 - mean * mean).sqrt();
        eprintln!(
            "{n_hits} hits, pull {}: mean {mean:.3} rms {rms:.3}",
            names[k]
        );
        assert!(mean.abs() < 0.25, "pull {} mean {mean}", names[k]);
        assert!(rms > 0.3 && rms < 1.5, "pull {} rms {rms}", names[k]);
    }
}

#[test]
fn broken_line_pulls_on_smeared_helices() {
    pulls(broken_line_fit, 4);
    pulls(broken_line_fit, 3);
}

#[test]
fn riemann_pulls_on_smeared_helices() {
    pulls(super::riemann::riemann_fit, 4);
    pulls(super::riemann::riemann_fit, 3);
}

#[test]
fn riemann_option_reconstructs_the_helix() {
    let h = Helix {
        pt: 2.0,
        charge: -1,
        phi0: 2.5,
        tip: 0.0,
        zip: -1.5,
        cot_theta: -0.4,
    };
    let mut b = HitBuilder::new();
    assert_eq!(b.add_helix_barrel(&h, &[0, 1, 2, 3]).len(), 4);
    let cpe = HitBuilder::cpe_params();
    let cols = b.build();
    let cfg = CaConfig {
        fit: FitConfig {
            use_riemann_fit: true,
            ..FitConfig::default()
        },
        ..CaConfig::default()
    };
    let t = reconstruct_tracks(&cols.view(&cpe), &cfg).unwrap();
    let loose = loose_tracks(&t);
    assert_eq!(loose.len(), 1);
    let i = loose[0];
    assert_eq!(t.charge[i], -1);
    assert!((t.pt[i] - 2.0).abs() < 0.02, "pt {}", t.pt[i]);
    assert!((t.zip[i] + 1.5).abs() < 1e-3, "zip {}", t.zip[i]);
    assert!((t.state[i][3] + 0.4).abs() < 1e-3);
    assert!((t.phi[i] - 2.5).abs() < 1e-3, "phi {}", t.phi[i]);
    assert!(t.tip[i].abs() < 1e-3, "tip {}", t.tip[i]);
}

#[test]
fn fit_recovers_tip_sign() {
    let cpe = HitBuilder::cpe_params();
    for (charge, tip) in [(1, 0.05), (1, -0.05), (-1, 0.05), (-1, -0.05)] {
        let h = Helix {
            pt: 5.0,
            charge,
            phi0: 0.7,
            tip,
            zip: -2.0,
            cot_theta: -0.2,
        };
        let mut b = HitBuilder::new();
        assert_eq!(b.add_helix_barrel(&h, &[0, 1, 2, 3]).len(), 4);
        let cols = b.build();
        let t = reconstruct_tracks(&cols.view(&cpe), &CaConfig::default()).unwrap();
        let loose = loose_tracks(&t);
        assert_eq!(loose.len(), 1);
        let i = loose[0];
        eprintln!("charge {charge} tip {tip}: fitted tip {}", t.tip[i]);
        assert!((t.tip[i].abs() - 0.05).abs() < 2e-3, "tip {}", t.tip[i]);
        // Karimäki's d is x·sinφ − y·cosφ of the point of closest approach, i.e. minus the
        // helper's (and CMS's dxy) convention, whatever the charge.
        assert_eq!(
            t.tip[i].signum(),
            -(tip as f32).signum(),
            "tip sign {}",
            t.tip[i]
        );
    }
}

#[test]
fn many_tracks_event_is_deterministic_and_efficient() {
    let cpe = HitBuilder::cpe_params();
    let mut g = Gauss::new(11);
    let mut b = HitBuilder::new();
    let mut n_gen = 0;
    for k in 0..40 {
        let h = Helix {
            pt: 1.0 + 0.2 * k as f64,
            charge: if k % 2 == 0 { 1 } else { -1 },
            phi0: -3.0 + 0.15 * k as f64,
            tip: 0.0,
            zip: 2.0 * g.sample(),
            cot_theta: 0.5 * g.sample(),
        };
        if b.add_helix(&h, &[0, 1, 2, 3], Some(&mut g)).len() == 4 {
            n_gen += 1;
        }
    }
    let cols = b.build();
    let t1 = reconstruct_tracks(&cols.view(&cpe), &CaConfig::default()).unwrap();
    let t2 = reconstruct_tracks(&cols.view(&cpe), &CaConfig::default()).unwrap();
    assert_eq!(t1, t2);
    let loose = loose_tracks(&t1);
    eprintln!(
        "generated {n_gen}, tuples {}, loose {}, stats {:?}",
        t1.len(),
        loose.len(),
        t1.stats
    );
    assert!(
        loose.len() as f64 >= 0.9 * n_gen as f64 && loose.len() <= n_gen,
        "{} of {n_gen}",
        loose.len()
    );
}

#[test]
fn triplet_cleaner_keeps_smallest_tip_and_longest() {
    // Tuples 0 and 1 are triplets sharing hit 0; tuple 2 is a quadruplet sharing hit 5 with
    // triplet 3.
    let tuples = Tuples {
        offsets: vec![0, 3, 6, 10, 13],
        hits: vec![0, 1, 2, 0, 3, 4, 5, 6, 7, 8, 5, 9, 10],
        quality: vec![Quality::Bad; 4],
        overflow: false,
    };
    let mut tracks = Tracks {
        state: vec![[0.0; 5]; 4],
        ..Tracks::default()
    };
    tracks.state[0][1] = 0.10;
    tracks.state[1][1] = -0.05;
    tracks.state[2][1] = 0.40;
    tracks.state[3][1] = 0.01;
    let mut q = vec![Quality::Loose; 4];
    triplet_cleaner(&tuples, &tracks, 11, &mut q);
    assert_eq!(
        q,
        vec![Quality::Dup, Quality::Loose, Quality::Loose, Quality::Dup]
    );
}

#[test]
fn fast_duplicate_remover_keeps_loose_with_smallest_tip() {
    let d = super::doublets::Doublets {
        cells: vec![],
        ..Default::default()
    };
    let mut ca = CaState::new(d);
    ca.cell_tracks = super::doublets::Csr::from_lists(&[vec![0, 1, 2], vec![3]]);
    let mut tracks = Tracks {
        state: vec![[0.0; 5]; 4],
        ..Tracks::default()
    };
    tracks.state[0][1] = 0.02;
    tracks.state[1][1] = 0.01;
    tracks.state[2][1] = 0.001;
    let mut q = vec![Quality::Loose, Quality::Loose, Quality::Bad, Quality::Loose];
    fast_duplicate_remover(&ca, &tracks, &mut q);
    assert_eq!(
        q,
        vec![Quality::Dup, Quality::Loose, Quality::Bad, Quality::Loose]
    );
}

#[test]
fn chi2_cut_matches_reference_numbers() {
    let c = QualityConfig::default();
    // χ²/ndof thresholds quoted in the spec: 10.4 at 0.5 GeV, 13.5 at 1 GeV, 32.6 at ≥ 10 GeV.
    assert!((c.chi2_cut(0.5) / 3.0 - 10.4).abs() < 0.1);
    assert!((c.chi2_cut(1.0) / 3.0 - 13.5).abs() < 0.1);
    assert!((c.chi2_cut(50.0) / 3.0 - 32.6).abs() < 0.1);
}

/// A PU-like synthetic event: helices over |η| < 2.5 plus random noise hits, to measure the
/// per-event cost (`cargo test -p quiver-reco --release tracks::tests::timing -- --ignored
/// --nocapture`).
#[test]
#[ignore]
fn timing_large_event() {
    for n_tracks in [1000, 2500] {
        timing_event(n_tracks, 3000);
    }
}

fn timing_event(n_tracks: usize, n_noise: usize) {
    let cpe = HitBuilder::cpe_params();
    let cols = synthetic_event(n_tracks, n_noise, 3);
    let n_gen = n_tracks;
    let hits = cols.view(&cpe);
    timing_run(&hits, n_gen);
}

/// Helices over |η| < 2.5 (barrel + one endcap) plus random noise hits.
fn synthetic_event(n_tracks: usize, n_noise: usize, seed: u64) -> testing::HitColumns {
    let mut g = Gauss::new(seed);
    let mut b = HitBuilder::new();
    for _ in 0..n_tracks {
        let u = 0.5 + 0.5 * (g.sample() / 2.0).tanh();
        let h = Helix {
            pt: 0.5 / (1.0 - 0.9 * u),
            charge: if g.sample() > 0.0 { 1 } else { -1 },
            phi0: std::f64::consts::PI * (g.sample() / 3.0).tanh(),
            tip: 0.002 * g.sample(),
            zip: 5.0 * g.sample(),
            cot_theta: 6.0 * (g.sample() / 3.0).tanh(),
        };
        let layers: &[u8] = if h.cot_theta > 0.0 {
            &[0, 1, 2, 3, 4, 5, 6]
        } else {
            &[0, 1, 2, 3, 7, 8, 9]
        };
        for id in b.add_helix(&h, layers, Some(&mut g)) {
            // Cluster-size spread, and some edge clusters (negative sizes), to exercise the
            // size cuts.
            let u = g.sample();
            if u > 1.5 {
                b.set_size_y(id, -8);
            } else {
                let sy = b.size_y(id) as f64 + 8.0 * u;
                b.set_size_y(id, sy.max(1.0) as i16);
            }
        }
    }
    for _ in 0..n_noise {
        let l = ((g.sample().abs() * 1000.0) as u32 % 10) as u8;
        let phi = std::f64::consts::PI * (g.sample() / 3.0).tanh();
        if l < 4 {
            let r = testing::BARREL_R[l as usize];
            b.add_barrel_hit(l, r, phi, 20.0 * (g.sample() / 2.0).tanh());
        } else {
            let r = 6.0 + 4.0 * g.sample().abs().min(2.5);
            let zd = testing::DISK_Z[((l - 4) % 3) as usize] * if l < 7 { 1.0 } else { -1.0 };
            b.add_hit(l, r * phi.cos(), r * phi.sin(), zd);
        }
    }
    b.build()
}

fn timing_run(hits: &HitsView, n_gen: usize) {
    let hits = *hits;
    let cfg = CaConfig::default();
    let t = reconstruct_tracks(&hits, &cfg).unwrap();
    let reps = 5;
    let t0 = std::time::Instant::now();
    for _ in 0..reps {
        std::hint::black_box(reconstruct_tracks(&hits, &cfg).unwrap());
    }
    let ms = t0.elapsed().as_secs_f64() * 1e3 / reps as f64;
    // Per-step split (one pass).
    let mut tm = Vec::new();
    let t0 = std::time::Instant::now();
    let d = build_doublets(&hits, &cfg.doublets, cfg.n_pairs()).unwrap();
    tm.push(("doublets", t0.elapsed()));
    let t0 = std::time::Instant::now();
    let mut ca = CaState::new(d);
    ntuplets::connect(&hits, &mut ca, &cfg.ntuplets);
    tm.push(("connect", t0.elapsed()));
    let t0 = std::time::Instant::now();
    ntuplets::fishbone(&hits, &mut ca, false);
    tm.push(("fishbone", t0.elapsed()));
    let t0 = std::time::Instant::now();
    let mut tuples = ntuplets::find_ntuplets(&mut ca, &cfg.ntuplets).unwrap();
    ntuplets::early_duplicate_remover(&ca, &mut tuples);
    tm.push(("ntuplets", t0.elapsed()));
    let t0 = std::time::Instant::now();
    let mut tr = t.clone();
    fit::fit_tuples(&hits, &tuples, &cfg.fit, &mut tr).unwrap();
    tm.push(("fit", t0.elapsed()));
    eprintln!(
        "steps: {:?}",
        tm.iter()
            .map(|(n, d)| format!("{n} {:.2} ms", d.as_secs_f64() * 1e3))
            .collect::<Vec<_>>()
    );
    eprintln!(
        "hits {}, generated tracks {n_gen}, tuples {}, loose {}, {ms:.2} ms/event, stats {:?}",
        hits.n_hits(),
        t.len(),
        loose_tracks(&t).len(),
        t.stats
    );
}

/// Runs the reference's own CA + fit + classification (the program built from
/// `scripts/refcheck/cah.cc`, named by `QUIVER_REF_CA`; run by `scripts/refcheck.sh`) on synthetic events and compares every tuple:
/// hits, quality, and the fit outputs.
#[test]
#[ignore]
fn reference_ca_cross_check() {
    // Asked for (it is ignored by default), it must run: a missing harness fails, never passes.
    let bin = std::env::var("QUIVER_REF_CA")
        .expect("set QUIVER_REF_CA to the reference CA harness binary");
    let cpe = HitBuilder::cpe_params();
    for (riemann, n_tracks, n_noise, seed) in [
        (false, 40, 0, 1),
        (false, 1000, 3000, 2),
        (false, 1500, 2000, 3),
        (true, 1000, 3000, 4),
    ] {
        let cols = synthetic_event(n_tracks, n_noise, seed);
        let hits = cols.view(&cpe);
        let mut input = format!("{}\n", hits.n_hits());
        for i in 0..hits.n_hits() {
            input += &format!(
                "{} {} {} {} {} {} {} {} {} {}\n",
                hits.x_global[i].to_bits(),
                hits.y_global[i].to_bits(),
                hits.z_global[i].to_bits(),
                hits.r_global[i].to_bits(),
                hits.iphi[i],
                hits.size_x[i],
                hits.size_y[i],
                hits.det_index[i],
                hits.xerr_local[i].to_bits(),
                hits.yerr_local[i].to_bits()
            );
        }
        for l in hits.layer_start {
            input += &format!("{l} ");
        }
        input += "\n";
        for d in &cpe.det {
            let f = &d.frame;
            for v in [f.px, f.py, f.pz].iter().chain(f.r.iter()) {
                input += &format!("{} ", v.to_bits());
            }
            input += "\n";
        }
        let path = std::env::temp_dir().join(format!("quiver_ref_ca_{}.txt", std::process::id()));
        std::fs::write(&path, &input).unwrap();
        let mut cmd = std::process::Command::new(&bin);
        if riemann {
            cmd.arg("riemann");
        }
        let out = cmd
            .stdin(std::fs::File::open(&path).unwrap())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let cfg = CaConfig {
            fit: FitConfig {
                use_riemann_fit: riemann,
                ..FitConfig::default()
            },
            ..CaConfig::default()
        };
        let t = reconstruct_tracks(&hits, &cfg).unwrap();
        // The reference prints "wrong mult" for 6-hit tuples on stdout.
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("wrong")).collect();
        let (mut same_hits, mut same_q, mut exact_fit, mut worst) = (0, 0, 0, 0f64);
        let mut field_diff = [0usize; 23];
        for (i, line) in lines.iter().enumerate().take(t.len()) {
            let tok: Vec<&str> = line.split_whitespace().collect();
            let nh: usize = tok[0].parse().unwrap();
            let h: Vec<u32> = tok[1..1 + nh].iter().map(|x| x.parse().unwrap()).collect();
            let q: u8 = tok[1 + nh].parse().unwrap();
            let fl: Vec<f32> = tok[2 + nh..]
                .iter()
                .map(|x| f32::from_bits(x.parse().unwrap()))
                .collect();
            if h == t.hits_of(i) {
                same_hits += 1;
            }
            if q == t.quality[i] {
                same_q += 1;
            }
            let ours: Vec<f32> = [t.pt[i], t.eta[i], t.chi2[i]]
                .into_iter()
                .chain(t.state[i])
                .chain(t.covariance[i])
                .collect();
            for (k, (a, b)) in ours.iter().zip(&fl).enumerate() {
                if a.to_bits() != b.to_bits() {
                    field_diff[k] += 1;
                }
            }
            if ours
                .iter()
                .zip(&fl)
                .all(|(a, b)| a.to_bits() == b.to_bits())
            {
                exact_fit += 1;
            } else {
                for (a, b) in ours.iter().zip(&fl) {
                    if a != b {
                        worst = worst.max(((a - b).abs() / b.abs().max(1e-30)) as f64);
                    }
                }
            }
        }
        eprintln!(
            "{} hits{}: tuples ours {} reference {}; same hits {same_hits}, same quality {same_q}, fit bit-exact {exact_fit}, worst fit relative difference {worst:.2e}",
            hits.n_hits(),
            if riemann { " (Riemann)" } else { "" },
            t.len(),
            lines.len()
        );
        eprintln!("  mismatches per field (pt, eta, chi2, state[5], cov[15]): {field_diff:?}");
        assert_eq!(t.len(), lines.len());
        assert_eq!(same_hits, t.len());
        assert_eq!(same_q, t.len());
        if !riemann {
            assert_eq!(
                exact_fit,
                t.len(),
                "Broken Line outputs must be bit-identical"
            );
        }
    }
}

/// Cross-check of the fits against the reference's own headers compiled with Eigen: set
/// `QUIVER_REF_FIT` to the program built from `scripts/refcheck/refit.cc` (`scripts/refcheck.sh` does) (it reads `kind n` + hit
/// bits from stdin and prints the fit results as bits). Reports bit-exact fractions and the
/// largest relative differences.
#[test]
#[ignore]
fn reference_fit_cross_check() {
    let bin = std::env::var("QUIVER_REF_FIT")
        .expect("set QUIVER_REF_FIT to the reference fit harness binary");
    let cpe = HitBuilder::cpe_params();
    let mut g = Gauss::new(99);
    let b = B_FIELD as f32 as f64;
    let mut cases = Vec::new();
    let mut input = String::new();
    for k in 0..600 {
        let kind = k % 2;
        let n = 3 + (k / 2) % 3;
        let h = Helix {
            pt: 0.5 + 20.0 * (0.5 + 0.5 * (g.sample() / 3.0).tanh()),
            charge: if g.sample() > 0.0 { 1 } else { -1 },
            phi0: 3.0 * (g.sample() / 3.0).tanh(),
            tip: 0.01 * g.sample(),
            zip: 3.0 * g.sample(),
            cot_theta: 0.8 * g.sample(),
        };
        let layers: Vec<u8> = if n == 5 {
            vec![0, 1, 2, 3, if h.cot_theta > 0.0 { 4 } else { 7 }]
        } else {
            (0..n as u8).collect()
        };
        let mut bld = HitBuilder::new();
        if bld.add_helix(&h, &layers, Some(&mut g)).len() != n {
            continue;
        }
        let cols = bld.build();
        let pos: Vec<[f64; 3]> = (0..n)
            .map(|k| [cols.x[k] as f64, cols.y[k] as f64, cols.z[k] as f64])
            .collect();
        let ge: Vec<[f32; 6]> = (0..n)
            .map(|k| {
                hit_global_cov(
                    &cpe.det[cols.det[k] as usize].frame,
                    cols.xerr[k],
                    cols.yerr[k],
                )
            })
            .collect();
        input += &format!("{kind} {n}\n");
        for p in &pos {
            for v in p {
                input += &format!("{} ", v.to_bits());
            }
        }
        for e in &ge {
            for v in e {
                input += &format!("{} ", v.to_bits());
            }
        }
        input += &format!("{}\n", b.to_bits());
        cases.push((kind, pos, ge));
    }
    let path = std::env::temp_dir().join(format!("quiver_ref_fit_{}.txt", std::process::id()));
    std::fs::write(&path, &input).unwrap();
    let out = std::process::Command::new(bin)
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    eprintln!("inputs kept in {}", path.display());
    let text = String::from_utf8(out.stdout).unwrap();
    let names = [
        "fast",
        "circle.par",
        "circle.var",
        "circle.chi2",
        "q",
        "line.par",
        "line.cov",
        "line.chi2",
        "circle.covar",
    ];
    for kind in 0..2 {
        let mut exact = [0usize; 9];
        let mut total = [0usize; 9];
        let mut worst = [0f64; 9];
        for ((k, pos, ge), line) in cases.iter().zip(text.lines()) {
            if *k != kind {
                continue;
            }
            let f = if kind == 0 {
                broken_line_fit(pos, ge, b)
            } else {
                super::riemann::riemann_fit(pos, ge, b)
            }
            .unwrap();
            let tok: Vec<&str> = line.split_whitespace().collect();
            let d = |i: usize| f64::from_bits(tok[i].parse().unwrap());
            let mut ours: Vec<(usize, f64, f64)> = Vec::new();
            for i in 0..4 {
                ours.push((0, f.fast[i], d(i)));
            }
            for i in 0..3 {
                ours.push((1, f.circle.par[i], d(4 + i)));
            }
            for i in 0..9 {
                // Diagonal and off-diagonal terms are reported separately (groups 2 and 8).
                ours.push((
                    if i % 4 == 0 { 2 } else { 8 },
                    f.circle.cov[i / 3][i % 3],
                    d(7 + i),
                ));
            }
            ours.push((
                3,
                f.circle.chi2 as f64,
                f32::from_bits(tok[16].parse().unwrap()) as f64,
            ));
            ours.push((4, f.circle.q as f64, tok[17].parse::<f64>().unwrap()));
            for i in 0..2 {
                ours.push((5, f.line.par[i], d(18 + i)));
            }
            for i in 0..4 {
                ours.push((6, f.line.cov[i / 2][i % 2], d(20 + i)));
            }
            ours.push((7, f.line.chi2, d(24)));
            for (grp, a, r) in ours {
                total[grp] += 1;
                if a.to_bits() == r.to_bits() || (a == 0.0 && r == 0.0) {
                    exact[grp] += 1;
                } else {
                    // χ² near zero (triplets): compare on an absolute scale of 1.
                    let floor = if grp == 3 || grp == 7 { 1.0 } else { 1e-300 };
                    let rel = (a - r).abs() / r.abs().max(floor);
                    worst[grp] = worst[grp].max(rel);
                }
            }
        }
        for grp in 0..9 {
            eprintln!(
                "{} {:12}: {}/{} bit-exact, worst relative difference {:.2e}",
                if kind == 0 { "BL" } else { "Riemann" },
                names[grp],
                exact[grp],
                total[grp],
                worst[grp]
            );
            // The Riemann fit amplifies last-bit differences (eigen-decomposition of a nearly
            // singular matrix, numerical derivative of f32 eigenvectors): a one-ulp change of
            // one input moves the reference's own output by up to ~3e-6.
            let tol = if kind == 1 { 1e-5 } else { 1e-12 };
            assert!(
                worst[grp] < tol,
                "{} {} differs by {:.2e}",
                kind,
                names[grp],
                worst[grp]
            );
        }
    }
}

#[test]
fn config_variants_quadruplets_only_and_late_fishbone() {
    let cpe = HitBuilder::cpe_params();
    let cols = synthetic_event(200, 200, 8);
    let hits = cols.view(&cpe);
    let base = reconstruct_tracks(&hits, &CaConfig::default()).unwrap();
    // Quadruplets only: 13 pairs, starts on B1 pairs only, every tuple has ≥ 4 hits.
    let mut quads = CaConfig::default();
    quads.ntuplets.min_hits_per_ntuplet = 4;
    assert_eq!(quads.n_pairs(), 13);
    let t = reconstruct_tracks(&hits, &quads).unwrap();
    assert!(!t.is_empty());
    assert!(t.n_hits.iter().all(|&n| n >= 4), "{:?}", t.n_hits);
    assert!(t.len() < base.len());
    // Late fishbone: same tuples (it runs after the search), some may turn bad.
    let mut late = CaConfig::default();
    late.ntuplets.late_fishbone = true;
    let t2 = reconstruct_tracks(&hits, &late).unwrap();
    assert_eq!(t2.hit_indices, base.hit_indices);
    let loose = |t: &Tracks| {
        t.quality
            .iter()
            .filter(|&&q| q == Quality::Loose as u8)
            .count()
    };
    assert!(loose(&t2) <= loose(&base) + 5);
    // Without jumping forward doublets there are fewer or equal cells.
    let mut nojump = CaConfig::default();
    nojump.doublets.include_jumping_forward_doublets = false;
    assert_eq!(nojump.n_pairs(), 15);
    let t3 = reconstruct_tracks(&hits, &nojump).unwrap();
    assert!(t3.stats.n_cells <= base.stats.n_cells);
}

/// The four stages handing their results over as columns (what the steps publish) give
/// exactly the tracks of the one-call chain, for the default and the late-fishbone setup.
#[test]
fn stages_through_columns_equal_the_whole_chain() {
    let cpe = HitBuilder::cpe_params();
    let cols = synthetic_event(600, 1500, 5);
    let hits = cols.view(&cpe);
    for late in [false, true] {
        let mut cfg = CaConfig::default();
        cfg.ntuplets.late_fishbone = late;
        let whole = reconstruct_tracks(&hits, &cfg).unwrap();

        let d = stage_doublets(&hits, &cfg).unwrap();
        let listed = listed_cells(&d);
        let inner: Vec<u32> = d.cells.iter().map(|c| c.inner).collect();
        let outer: Vec<u32> = d.cells.iter().map(|c| c.outer).collect();
        let pair: Vec<u8> = d.cells.iter().map(|c| c.pair).collect();
        let d2 = doublets_from_columns(&hits, &inner, &outer, &pair, &listed[..].into()).unwrap();
        let (tuples, ca) = stage_ntuplets(&hits, d2, &cfg).unwrap();
        // The step's way: the CA state on the columns themselves gives the same.
        let on_columns = ca_state_from_columns(
            &hits,
            inner.clone().into(),
            outer.clone().into(),
            pair.clone().into(),
            &listed[..].into(),
        )
        .unwrap();
        let (tuples_c, ca_c) = stage_ntuplets_on(&hits, on_columns, &cfg).unwrap();
        assert_eq!(
            (&tuples_c.hits, &tuples_c.offsets),
            (&tuples.hits, &tuples.offsets)
        );
        assert_eq!((&ca_c.alive, &ca_c.neighbors), (&ca.alive, &ca.neighbors));
        let alive = ca.alive.clone();
        let q: Vec<u8> = tuples.quality.iter().map(|&x| x as u8).collect();
        let tuples2 = tuples_from_columns(&tuples.offsets, &tuples.hits, &q).unwrap();
        let mut tracks = stage_fit(&hits, &tuples2, &cfg).unwrap();
        let ca2 =
            ca_state_for_quality(&alive, &ca.tuple_cells, &ca.tuple_cell_offsets, &cfg).unwrap();
        assert_eq!(ca2.cell_tracks, ca.cell_tracks);
        // The step's way: no cells, the alive flags looked up (packed in the product).
        let ca3 = ca_lists_for_quality(alive.len(), &ca.tuple_cells, &ca.tuple_cell_offsets, &cfg)
            .unwrap();
        assert!(ca3.inner.is_empty() && ca3.alive.is_empty());
        assert_eq!(ca3.cell_tracks, ca.cell_tracks);
        let mut tracks3 = tracks.clone();
        stage_quality_with(&hits, &tuples2, &ca3, |c| alive[c], &mut tracks3, &cfg);
        stage_quality(&hits, &tuples2, &ca2, &mut tracks, &cfg);
        assert_eq!(tracks3.quality, tracks.quality);
        assert!(
            alive.iter().any(|&a| !a),
            "no cell killed: the cleaner untested"
        );

        assert!(whole.quality.len() > 100, "{} tuples", whole.quality.len());
        assert_eq!(tracks.quality, whole.quality);
        assert_eq!(tracks.hit_indices, whole.hit_indices);
        assert_eq!(
            tracks
                .state
                .iter()
                .flatten()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>(),
            whole
                .state
                .iter()
                .flatten()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        );
        assert_eq!(
            tracks.chi2.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            whole.chi2.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
    assert!(tuples_from_columns(&[0, 3], &[1, 2], &[0]).is_err());
    assert!(ca_state_for_quality(&[true], &[5], &[0, 1], &CaConfig::default()).is_err());
}

/// Doublet columns naming a hit the event lacks are refused, naming the first such cell
/// (the check finds the largest index first, then the culprit).
#[test]
fn doublet_columns_with_a_hit_out_of_range_name_the_first_bad_cell() {
    let cpe = HitBuilder::cpe_params();
    let cols = synthetic_event(50, 100, 3);
    let hits = cols.view(&cpe);
    let n = hits.n_hits() as u32;
    let inner = [0, 1, 2, n - 1];
    let pair = [0u8; 4];
    let listed = arrow_buffer::BooleanBuffer::new_set(4);
    assert!(doublets_from_columns(&hits, &inner, &[1, 2, 3, 0], &pair, &listed).is_ok());
    for (outer, bad) in [([1, 2, n, n + 7], 2), ([1, 2, 3, u32::MAX], 3)] {
        let e = doublets_from_columns(&hits, &inner, &outer, &pair, &listed).unwrap_err();
        assert!(e.to_string().contains(&format!("cell {bad}: hits")), "{e}");
    }
    let e = doublets_from_columns(&hits, &[n, 0, 0, 0], &[1, 2, 3, 0], &pair, &listed).unwrap_err();
    assert!(e.to_string().contains("cell 0: hits"), "{e}");
    // Columns of different lengths, the packed `listed` flags included, name every length.
    let short = arrow_buffer::BooleanBuffer::new_set(3);
    let e = doublets_from_columns(&hits, &inner, &[1, 2, 3, 0], &pair, &short).unwrap_err();
    assert!(
        e.to_string()
            .contains("doublet columns of 4, 4, 4, 3 entries"),
        "{e}"
    );
}

/// `connect` decides alike with and without AVX2, and whether the candidates' hits come from
/// the doublet columns or from the cells.
#[test]
fn connect_is_the_same_on_every_path() {
    let cpe = HitBuilder::cpe_params();
    let cols = synthetic_event(800, 2000, 11);
    let hits = cols.view(&cpe);
    let cfg = CaConfig::default();
    let d = stage_doublets(&hits, &cfg).unwrap();
    assert!(d.listed_inner_hits.is_empty());
    let inner: Vec<u32> = d.cells.iter().map(|c| c.inner).collect();
    let outer: Vec<u32> = d.cells.iter().map(|c| c.outer).collect();
    let pair: Vec<u8> = d.cells.iter().map(|c| c.pair).collect();
    let d2 =
        doublets_from_columns(&hits, &inner, &outer, &pair, &listed_cells(&d)[..].into()).unwrap();
    assert_eq!(
        d2.listed_inner_hits.len(),
        d2.outer_hit_of_cell.values.len()
    );
    let mut results = Vec::new();
    for from_columns in [false, true] {
        for portable in [false, true] {
            let mut ca = CaState::new(if from_columns { d2.clone() } else { d.clone() });
            if portable {
                ntuplets::connect_portable(&hits, &mut ca, &cfg.ntuplets);
            } else {
                ntuplets::connect(&hits, &mut ca, &cfg.ntuplets);
            }
            results.push((ca.neighbors, ca.used));
        }
    }
    assert!(
        results[0].0.values.len() > 1000,
        "{} connections",
        results[0].0.values.len()
    );
    for r in &results[1..] {
        assert!(*r == results[0]);
    }
}

/// The fit compiled for AVX2 stores the same bits as the portable one, for every hit count.
#[test]
fn fit_is_the_same_on_every_path() {
    let cpe = HitBuilder::cpe_params();
    let cols = synthetic_event(800, 2000, 5);
    let hits = cols.view(&cpe);
    let cfg = CaConfig::default();
    let (tuples, _) = stage_ntuplets(&hits, stage_doublets(&hits, &cfg).unwrap(), &cfg).unwrap();
    let dispatched = stage_fit(&hits, &tuples, &cfg).unwrap();
    let mut portable = Tracks::zeroed(&tuples, hits.det_index);
    let jobs = fit::fit_selection(&tuples, &cfg.fit);
    fit::fit_jobs(&hits, &tuples, &jobs, &cfg.fit, &mut portable).unwrap();
    for n in 3..=4 {
        let k = jobs.iter().filter(|j| j.n_fit == n).count();
        assert!(k > 100, "{k} fits of {n} hits");
    }
    assert_eq!(fit_bits(&dispatched), fit_bits(&portable));
}

/// Every stored value of the fits, as bits.
fn fit_bits(t: &Tracks) -> Vec<u32> {
    let flat = [
        t.state.as_flattened(),
        t.covariance.as_flattened(),
        &t.pt,
        &t.eta,
        &t.chi2,
        &t.phi,
        &t.tip,
        &t.zip,
    ];
    let mut v: Vec<u32> = flat.concat().iter().map(|x| x.to_bits()).collect();
    v.extend(t.charge.iter().map(|&c| c as u32));
    v
}

/// Fits run four at a time in lanes store the scalar fit's bits, for 3, 4 and 5 hits and
/// for every size (1 to 4) of each hit count's last, partial group.
#[test]
fn fit_lanes_store_the_scalar_bits() {
    let cpe = HitBuilder::cpe_params();
    let cols = synthetic_event(800, 2000, 5);
    let hits = cols.view(&cpe);
    let mut cfg = CaConfig::default();
    cfg.fit.fit5as4 = false;
    let (tuples, _) = stage_ntuplets(&hits, stage_doublets(&hits, &cfg).unwrap(), &cfg).unwrap();
    let all = fit::fit_selection(&tuples, &cfg.fit);
    for n in 3..=5 {
        let k = all.iter().filter(|j| j.n_fit == n).count();
        assert!(k >= 20, "{k} fits of {n} hits");
    }
    for take in (all.len() - 12..=all.len()).chain([1, 2, 3, 5]) {
        let jobs = &all[..take];
        let mut scalar = Tracks::zeroed(&tuples, hits.det_index);
        let mut lanes = Tracks::zeroed(&tuples, hits.det_index);
        fit::fit_jobs(&hits, &tuples, jobs, &cfg.fit, &mut scalar).unwrap();
        fit::fit_jobs_lanes(&hits, &tuples, jobs, &cfg.fit, &mut lanes).unwrap();
        assert_eq!(fit_bits(&scalar), fit_bits(&lanes), "first {take} jobs");
    }
}

/// A hit whose module the conditions lack fails the fits in lanes with the error of the
/// scalar fits: that of the first failing job, also when the lanes meet another failing
/// job first (a full group of 4-hit jobs is fitted before the 3-hit job ahead of it).
#[test]
fn fit_lanes_report_the_scalar_error() {
    let mut cpe = HitBuilder::cpe_params();
    let cols = synthetic_event(200, 200, 3);
    let cfg = CaConfig::default();
    let hits = cols.view(&cpe);
    let (tuples, _) = stage_ntuplets(&hits, stage_doublets(&hits, &cfg).unwrap(), &cfg).unwrap();
    let all = fit::fit_selection(&tuples, &cfg.fit);
    let of = |n: u8| all.iter().filter(move |j| j.n_fit == n).copied();
    let jobs: Vec<_> = of(3).take(1).chain(of(4).take(4)).collect();
    assert_eq!(jobs.len(), 5, "{} jobs", all.len());
    // No module at all: every job fails, each on its first hit.
    cpe.det.clear();
    let hits = cols.view(&cpe);
    let mut a = Tracks::zeroed(&tuples, hits.det_index);
    let mut b = Tracks::zeroed(&tuples, hits.det_index);
    let scalar = fit::fit_jobs(&hits, &tuples, &jobs, &cfg.fit, &mut a).unwrap_err();
    let lanes = fit::fit_jobs_lanes(&hits, &tuples, &jobs, &cfg.fit, &mut b).unwrap_err();
    let first = tuples.hits_of(jobs[0].row as usize)[0] as usize;
    assert!(
        matches!(scalar, TrackError::MissingModule { hit, .. } if hit == first),
        "{scalar}"
    );
    assert_eq!(scalar.to_string(), lanes.to_string());

    // A bad hit count before a job with a missing module: the count's error comes first, as
    // one job at a time.
    let mut cpe = HitBuilder::cpe_params();
    let all_hits = cols.view(&cpe);
    // The highest module among a job's first `n` hits (a job reads its first `n_fit`, at
    // most 5).
    let top = |j: &fit::FitJob, n: usize| {
        let t = tuples.hits_of(j.row as usize);
        t.iter()
            .take(n)
            .map(|&h| all_hits.det_index[h as usize])
            .max()
            .unwrap()
    };
    let cut = all.iter().map(|j| top(j, j.n_fit as usize)).max().unwrap();
    let (ok, bad) = (
        all.iter().find(|j| top(j, 5) < cut).unwrap(),
        all.iter()
            .find(|j| top(j, j.n_fit as usize) == cut)
            .unwrap(),
    );
    cpe.det.truncate(cut as usize);
    let hits = cols.view(&cpe);
    let jobs = [fit::FitJob { n_fit: 6, ..*ok }, *bad];
    let scalar = fit::fit_jobs(&hits, &tuples, &jobs, &cfg.fit, &mut a).unwrap_err();
    let lanes = fit::fit_jobs_lanes(&hits, &tuples, &jobs, &cfg.fit, &mut b).unwrap_err();
    assert!(matches!(scalar, TrackError::Config(_)), "{scalar}");
    assert_eq!(scalar.to_string(), lanes.to_string());
}

/// The step's path (cells, then `listed` from counters) gives the cells and listed flags of
/// the per-hit lists, also when the lists are full.
#[test]
fn doublet_cells_and_listed_flags_match_the_lists() {
    let cpe = HitBuilder::cpe_params();
    let cols = synthetic_event(600, 1500, 7);
    let hits = cols.view(&cpe);
    for cap in [128, 3] {
        let mut cfg = CaConfig::default();
        cfg.doublets.max_cells_per_hit = cap;
        let d = stage_doublets(&hits, &cfg).unwrap();
        let (cols, bits, unlisted) = stage_doublet_cells(&hits, &cfg).unwrap();
        let listed: Vec<bool> = bits.iter().collect();
        assert_eq!(unlisted, listed.iter().filter(|&&l| !l).count() as u64);
        assert_eq!(
            listed,
            super::doublets::listed_flags(&cols.outer, hits.n_hits(), cap)
        );
        assert_eq!(
            cols.inner,
            d.cells.iter().map(|c| c.inner).collect::<Vec<_>>()
        );
        assert_eq!(
            cols.outer,
            d.cells.iter().map(|c| c.outer).collect::<Vec<_>>()
        );
        assert_eq!(
            cols.pair,
            d.cells.iter().map(|c| c.pair).collect::<Vec<_>>()
        );
        assert_eq!(listed, listed_cells(&d));
        assert_eq!(cap == 3, listed.iter().any(|&l| !l), "cap {cap}");
    }
}

/// The flat per-cell lists keep the semantics of one bounded list per cell: a cell gets a
/// list only while fewer than `max_lists` are handed out (the shared empty one counts), each
/// list keeps its first `per_list` values, every refused value counts as an overflow.
#[test]
fn capped_lists_match_bounded_vectors() {
    use super::ntuplets::CappedLists;
    let mut g = Gauss::new(11);
    for (n_cells, max_lists, per_list) in [
        (7usize, 4u32, 3u32),
        (20, 65_536, 2),
        (5, 1, 4),
        (12, 6, 36),
    ] {
        let mut lists = CappedLists::new(n_cells, max_lists, per_list);
        let mut model: Vec<Vec<u32>> = vec![Vec::new(); n_cells];
        let (mut n_lists, mut overflows) = (1u32, 0u32);
        for v in 0..200u32 {
            let cell = ((g.sample().abs() * 3.0) as usize) % n_cells;
            lists.push(cell, v);
            if model[cell].is_empty() {
                if n_lists >= max_lists {
                    overflows += 1;
                    continue;
                }
                n_lists += 1;
            }
            if model[cell].len() < per_list as usize {
                model[cell].push(v);
            } else {
                overflows += 1;
            }
        }
        let (csr, o) = lists.finish();
        assert_eq!(csr, super::doublets::Csr::from_lists(&model));
        assert_eq!(o, overflows);
    }
}

/// Grouping (row, value) pairs keeps the first `cap` values of each row in input order.
#[test]
fn csr_group_capped_keeps_first_values() {
    use super::doublets::Csr;
    let pairs = [
        (2u32, 10u32),
        (0, 11),
        (2, 12),
        (2, 13),
        (1, 14),
        (2, 15),
        (0, 16),
    ];
    let (c, overflows) = Csr::group_capped(4, pairs.iter().copied(), 2);
    assert_eq!(
        c,
        Csr::from_lists(&[vec![11, 16], vec![14], vec![10, 12], vec![]])
    );
    assert_eq!(overflows, 1);
    let (c, overflows) = Csr::group_capped(3, pairs.iter().copied(), u32::MAX);
    assert_eq!(c.of(2), &[10, 12, 13, 15]);
    assert_eq!(overflows, 0);
}

/// The rows of at least `min` values, found 64 at a time (AVX2 where the machine has it,
/// the scalar loop for the last, partial word), are those a plain filter finds, for row
/// counts around the word size and lengths up to past 64.
#[test]
fn csr_rows_with_at_least_equals_a_filter() {
    use super::doublets::Csr;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for n in [0usize, 1, 63, 64, 65, 127, 128, 129, 1000] {
        let lists: Vec<Vec<u32>> = (0..n)
            .map(|_| {
                let r = next();
                // Mostly empty or short, some long rows.
                let len = if r % 7 == 0 {
                    (r >> 8) % 70
                } else {
                    (r >> 8) % 3
                };
                (0..len as u32).collect()
            })
            .collect();
        let c = Csr::from_lists(&lists);
        for min in [0u32, 1, 2, 3, 65, u32::MAX] {
            let want: Vec<usize> = (0..n)
                .filter(|&i| lists[i].len() as u64 >= min as u64)
                .collect();
            assert_eq!(
                c.rows_with_at_least(min).collect::<Vec<_>>(),
                want,
                "{n} rows, min {min}"
            );
        }
    }
}

/// A CA state whose neighbour lists do not match its cells (lists left empty, as a state
/// built field by field without `connect`) is refused, whatever the tuple length: the search
/// finds its starts among the lists' rows and would otherwise visit none, silently.
#[test]
fn find_ntuplets_refuses_lists_that_miss_cells() {
    let mut b = HitBuilder::new();
    b.add_helix_barrel(&Helix::default(), &[0, 1, 2]);
    let (cols, cpe) = (b.build(), HitBuilder::cpe_params());
    let hits = cols.view(&cpe);
    let d = build_doublets(&hits, &DoubletConfig::default(), 19).unwrap();
    assert!(!d.cells.is_empty());
    for min_hits in [2, 3] {
        let cfg = ntuplets::NtupletConfig {
            min_hits_per_ntuplet: min_hits,
            ..Default::default()
        };
        let mut ca = CaState {
            neighbors: doublets::Csr::default(),
            ..CaState::new(d.clone())
        };
        let e = ntuplets::find_ntuplets(&mut ca, &cfg).unwrap_err();
        assert!(e.to_string().contains("connect the cells first"), "{e}");
        // Columns of other lengths than the cells' flags are refused too.
        let mut ca = CaState::new(d.clone());
        ntuplets::connect(&hits, &mut ca, &cfg);
        ca.outer = ca.outer.slice(1, ca.outer.len() - 1);
        let e = ntuplets::find_ntuplets(&mut ca, &cfg).unwrap_err();
        assert!(e.to_string().contains("outer hits"), "{e}");
        // Made by `CaState::new`, the same cells are searched.
        let mut ca = CaState::new(d.clone());
        ntuplets::connect(&hits, &mut ca, &cfg);
        assert!(ntuplets::find_ntuplets(&mut ca, &cfg).is_ok());
    }
}

// A low-|η| looper captured from a generated event (event 0 of `quiver generate --events 10`,
// antiproton, true pT 1.32 GeV, η −0.0087, φ0 0.286, z0 1.43 cm). With R ≈ 115 cm and
// |cotθ| < 0.01 the generator transports it around its full circle, so it crosses the pixel
// barrel three times: outward (first leg), inward on the opposite side (return leg, r
// decreasing in time), and outward again from the beam line (second leg), each loop moving z
// by ≈ −4.7 cm. Hit positions (beam-spot frame) and f32 global covariances exactly as
// `fit_tuples` builds them; the CA hands every tuple over inner to outer in radius.
const LOOPER_FIRST_LEG: [[f32; 3]; 4] = [
    [2.619575023651123, 0.8041560053825378, 1.307499885559082],
    [6.5985636711120605, 2.158043146133423, 1.2774999141693115],
    [10.150757789611816, 3.5225203037261963, 1.2474998235702515],
    [14.812129020690918, 5.5211005210876465, 1.217499852180481],
];
const LOOPER_FIRST_LEG_GE: [[f32; 6]; 4] = [
    [
        9.646171150734517e-08,
        -3.6000002978653356e-07,
        1.3435384289550711e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
    [
        1.570813310536323e-07,
        -4.4891271500091534e-07,
        1.2829189017793396e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
    [
        1.7586032186045486e-07,
        -4.7149978854577057e-07,
        1.2641398825508077e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
    [
        1.6343250308636925e-07,
        -4.567632174712344e-07,
        1.2765675592163461e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
];
const LOOPER_RETURN_LEG: [[f32; 3]; 4] = [
    [-2.6395795345306396, -0.818779706954956, -3.3974997997283936],
    [-6.722259044647217, -1.8588553667068481, -3.3524997234344482],
    [-10.729818344116211, -2.721788167953491, -3.307499885559082],
    [-15.75196361541748, -3.6143481731414795, -3.2774999141693115],
];
const LOOPER_RETURN_LEG_GE: [[f32; 6]; 4] = [
    [
        9.646171150734517e-08,
        -3.6000002978653356e-07,
        1.3435384289550711e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
    [
        1.4426393590838416e-07,
        -4.122826453567541e-07,
        1.1782361752921133e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
    [
        6.506496674774098e-08,
        -2.9909884347034676e-07,
        1.3749352092418121e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
    [
        8.501669412908086e-08,
        -3.3940568755497225e-07,
        1.3549835102821817e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
];
const LOOPER_SECOND_LEG: [[f32; 3]; 4] = [
    [2.629472494125366, 0.7672184109687805, -3.434999704360962],
    [6.598234176635742, 2.158984422683716, -3.487499713897705],
    [10.148486137390137, 3.52860951423645, -3.5174999237060547],
    [14.811342239379883, 5.523299217224121, -3.562499761581421],
];
const LOOPER_SECOND_LEG_GE: [[f32; 6]; 4] = [
    [
        9.646171150734517e-08,
        -3.6000002978653356e-07,
        1.3435384289550711e-06,
        0.0,
        0.0,
        7.225000445032492e-05,
    ],
    [
        1.570813310536323e-07,
        -4.4891271500091534e-07,
        1.2829189017793396e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
    [
        1.7586032186045486e-07,
        -4.7149978854577057e-07,
        1.2641398825508077e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
    [
        1.6343250308636925e-07,
        -4.567632174712344e-07,
        1.2765675592163461e-06,
        0.0,
        0.0,
        1.4062499758438207e-05,
    ],
];

fn looper_fit(pos: &[[f32; 3]], ge: &[[f32; 6]]) -> fit::BrokenLineFit {
    let p: Vec<[f64; 3]> = pos.iter().map(|h| h.map(|v| v as f64)).collect();
    broken_line_fit(&p, ge, B_FIELD as f32 as f64).unwrap()
}

fn dphi(a: f64, b: f64) -> f64 {
    let d = (a - b).rem_euclid(2.0 * std::f64::consts::PI);
    d.min(2.0 * std::f64::consts::PI - d)
}

/// The "reversed" tracks at |η| < 0.1 are the inward leg of a looper: the fit is right for
/// the hits it gets (an outgoing track along them), so φ, q and cotθ are those of the
/// particle with time reversed, and zip is where the leg meets the beam line one loop later.
#[test]
fn looper_return_leg_fits_as_time_reversed_particle() {
    let first = looper_fit(&LOOPER_FIRST_LEG, &LOOPER_FIRST_LEG_GE);
    let back = looper_fit(&LOOPER_RETURN_LEG, &LOOPER_RETURN_LEG_GE);
    let second = looper_fit(&LOOPER_SECOND_LEG, &LOOPER_SECOND_LEG_GE);
    let charge = |f: &fit::BrokenLineFit| f.circle.par[2].signum();
    let mut rev_pos = LOOPER_RETURN_LEG;
    let mut rev_ge = LOOPER_RETURN_LEG_GE;
    rev_pos.reverse();
    rev_ge.reverse();
    let timed = looper_fit(&rev_pos, &rev_ge);
    for f in [&first, &back, &second, &timed] {
        eprintln!(
            "fast {:?} circle {:?} q {} line {:?} chi2 {} {}",
            f.fast, f.circle.par, f.circle.q, f.line.par, f.circle.chi2, f.line.chi2
        );
    }
    // The outgoing legs carry the particle's charge (−1), φ ≈ 0.29 and a small negative cotθ.
    for f in [&first, &second] {
        assert_eq!(f.circle.q, -1);
        assert_eq!(charge(f), -1.0);
        assert!(dphi(f.circle.par[0], 0.286) < 0.02, "φ {}", f.circle.par[0]);
        assert!(
            f.line.par[0] < 0.0 && f.line.par[0] > -0.02,
            "cotθ {}",
            f.line.par[0]
        );
    }
    // The return leg's hits are ordered inner→outer in radius, the reverse of the motion:
    // the turning sense of its first and last segments flips, hence q (and the charge);
    // the pre-fit's R·Δφ/Δz keeps its sign (Δφ and Δz both flip), so slope = −q/that flips.
    assert!(LOOPER_RETURN_LEG
        .windows(2)
        .all(|w| w[1][0].hypot(w[1][1]) > w[0][0].hypot(w[0][1])));
    assert_eq!(back.circle.q, 1);
    assert_eq!(charge(&back), 1.0);
    assert!(back.fast[3] * second.fast[3] > 0.0);
    assert!((dphi(back.circle.par[0], second.circle.par[0]) - std::f64::consts::PI).abs() < 0.02);
    assert!(
        (back.line.par[0] + second.line.par[0]).abs() < 0.01,
        "cotθ {} vs {}",
        back.line.par[0],
        second.line.par[0]
    );
    // Same curvature (same particle), and the same beam-line crossing as the second leg.
    let pt = |f: &fit::BrokenLineFit| B_FIELD / f.circle.par[2].abs();
    assert!(
        (pt(&back) / pt(&second) - 1.0).abs() < 0.1,
        "pT {} vs {}",
        pt(&back),
        pt(&second)
    );
    assert!(
        (back.line.par[1] - second.line.par[1]).abs() < 0.05,
        "zip {} vs {}",
        back.line.par[1],
        second.line.par[1]
    );
    assert!(
        (first.line.par[1] - second.line.par[1]).abs() > 4.0,
        "one loop moves z by ≈ 4.7 cm"
    );
    // The reference's BrokenLine.h (refit.cc harness) on these exact inputs, bit for bit
    // when captured; compared to 1e-12 so another libm's last bit does not matter.
    let close = |a: f64, r: f64| (a - r).abs() <= 1e-12 * r.abs();
    let want = [
        -2.851597556863125,
        -0.06186054697089791,
        0.008393506254800379,
    ];
    assert!(
        back.circle.par.iter().zip(want).all(|(&a, r)| close(a, r)),
        "{:?}",
        back.circle.par
    );
    let want = [0.010347482273986967, -3.424293389169996];
    assert!(
        back.line.par.iter().zip(want).all(|(&a, r)| close(a, r)),
        "{:?}",
        back.line.par
    );
    assert!(
        close(back.fast[3], -111.78240590127928)
            && close(back.circle.chi2 as f64, 5.165025234222412)
    );
    // Fed in time order (outer→inner) the same hits give the particle's own direction and
    // charge back: nothing in the fit depends on the hits being inner→outer.
    assert_eq!(charge(&timed), -1.0);
    assert!(
        dphi(timed.circle.par[0], second.circle.par[0]) < 0.02,
        "φ {}",
        timed.circle.par[0]
    );
    assert!(timed.line.par[0] < 0.0);
    assert!((timed.line.par[1] - second.line.par[1]).abs() < 0.05);
}

/// The chunked cut loop of the doublets gathers its pass flags with `mask8`: every flag pattern must give
/// the bits a one-by-one loop gives.
#[test]
fn mask8_matches_bit_by_bit_packing() {
    for pattern in 0u32..256 {
        let pass: [bool; 8] = std::array::from_fn(|j| pattern >> j & 1 == 1);
        let mut expect = 0u32;
        for (j, &p) in pass.iter().enumerate() {
            expect |= (p as u32) << j;
        }
        assert_eq!(
            super::doublets::mask8(&pass),
            expect,
            "pattern {pattern:08b}"
        );
    }
}

#[test]
fn tuples_naming_hits_the_event_lacks_are_errors_not_panics() {
    // A tuples product from elsewhere (e.g. a Python step) may name any hit.
    let mut b = HitBuilder::new();
    b.add_helix_barrel(&Helix::default(), &[0, 1, 2, 3]);
    let (cols, cpe) = (b.build(), HitBuilder::cpe_params());
    let hits = cols.view(&cpe);
    let t = ntuplets::Tuples {
        offsets: vec![0, 4],
        hits: vec![0, 1, 2, 9],
        quality: vec![Quality::Bad],
        overflow: false,
    };
    let cfg = CaConfig::default();
    for e in [
        stage_fit(&hits, &t, &cfg).unwrap_err(),
        fit_jobs(&hits, &t, &cfg).unwrap_err(),
        stage_fit_from(&hits, &t, &cfg, &[], &[]).unwrap_err(),
    ] {
        assert_eq!(
            e.to_string(),
            "inconsistent input: tuple hit 9 is not one of the event's 4 hits",
            "{e}"
        );
    }
}
