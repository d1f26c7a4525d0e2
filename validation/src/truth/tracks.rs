//! Tracks against the truth: efficiency denominator, fake and duplicate loose tracks,
//! charge, and the residuals and pulls of the track parameters.

use std::collections::{HashMap, HashSet};

use super::{
    best_share, layer_of, Config, EventResult, LooseTrack, RecoEvent, RecoTrack, SelectedParticle,
    TrackKind, TrackResolution, TrackTruth, TruthEvent, TruthParticle,
};

fn wrap(d: f64) -> f64 {
    (d + std::f64::consts::PI).rem_euclid(2.0 * std::f64::consts::PI) - std::f64::consts::PI
}

/// The track part of [`super::analyze_event`]: `hp` is each hit's particle, `matched` each
/// track's, `selected` whether a track is in the selection measured (the faithful chain's
/// `loose`, or the classifier's purity selection).
#[allow(clippy::too_many_arguments)] // the event's tables, each computed once by the caller
pub(super) fn analyze(
    reco: &RecoEvent,
    truth: &TruthEvent,
    cfg: &Config,
    hp: &[Option<u32>],
    matched: &[Option<u32>],
    selected: &[bool],
    by_id: &HashMap<u32, &TruthParticle>,
    r: &mut EventResult,
) {
    let (layers, double) = sim_hit_layers(truth);
    let mut seen = HashSet::new();
    let mut direction: HashMap<u32, (bool, bool)> = HashMap::new();
    let any_quality: HashSet<u32> = matched.iter().flatten().copied().collect();
    let mut hit_layers: HashMap<u32, u16> = HashMap::new();
    for (h, p) in reco.hits.iter().zip(hp) {
        if let (Some(p), Some(l)) = (p, layer_of(h.module)) {
            *hit_layers.entry(*p).or_default() |= 1 << l;
        }
    }
    r.hits_with_particle = hp.iter().filter(|p| p.is_some()).count();
    r.hits = hp.len();
    for ((t, m), &sel) in reco.tracks.iter().zip(matched).zip(selected) {
        // The first selected track of a particle matches it, later ones are duplicates.
        let kind = match m {
            None => TrackKind::Fake,
            Some(pid) if sel && !seen.insert(*pid) => TrackKind::Duplicate,
            Some(_) => TrackKind::Matched,
        };
        r.track_truth.push(TrackTruth {
            quality: t.quality,
            particle: *m,
            kind,
        });
        if !sel {
            continue;
        }
        r.loose += 1;
        r.loose_tracks.push(LooseTrack {
            hits: t.hits.len(),
            pt: t.pt,
            eta: t.eta,
            kind,
            best_share: best_share(&t.hits, hp).map_or(0, |b| b.1),
        });
        let Some(pid) = m else {
            r.fake += 1;
            continue;
        };
        if kind == TrackKind::Duplicate {
            r.duplicate += 1;
            r.duplicate_double_hits += double.contains(pid) as usize;
        }
        let Some(p) = by_id.get(pid) else { continue };
        r.charge_compared += 1;
        r.charge_agrees += (t.charge.signum() == p.charge.signum()) as usize;
        if p.process != 0 {
            continue;
        }
        let (res, pulls) = residuals_and_pulls(t, p, cfg.beam_spot);
        // A track fitted in the reversed direction (the returning leg of a low-pT looper,
        // its hits ordered against the particle's flight) has φ off by π and cotθ, zip of the
        // other leg: comparing it with the truth at production measures nothing about the fit.
        // Counted, never in the resolutions and pulls (a few such tracks would dominate the
        // cotθ pull RMS).
        let rev = res[1].abs() > std::f64::consts::FRAC_PI_2;
        let e = direction.entry(p.id).or_insert((false, false));
        if rev {
            r.reversed += 1;
            e.0 = true;
        } else {
            e.1 = true;
            r.resolution.push(TrackResolution {
                true_pt: p.pt,
                true_eta: p.eta,
                residuals: res,
                pulls,
            });
        }
    }
    r.reversed_pairs = direction.values().filter(|d| d.0 && d.1).count();

    for p in &truth.particles {
        let nl = layers.get(&p.id).map_or(0, |m| m.count_ones() as usize);
        if p.process == 0
            && p.charge != 0
            && p.pt > cfg.min_pt
            && p.eta.abs() < cfg.max_abs_eta
            && nl >= cfg.min_layers
        {
            r.selected.push(SelectedParticle {
                id: p.id,
                pt: p.pt,
                eta: p.eta,
                phi: p.phi,
                found: seen.contains(&p.id),
                rechit_layers: hit_layers.get(&p.id).map_or(0, |m| m.count_ones() as usize),
                found_any_quality: any_quality.contains(&p.id),
                double_layer_hits: double.contains(&p.id),
            });
        }
    }
}

/// Per particle, the layers it has sim hits on (a bit per layer), and the particles with two
/// sim hits on one layer.
fn sim_hit_layers(truth: &TruthEvent) -> (HashMap<u32, u16>, HashSet<u32>) {
    let mut layers: HashMap<u32, u16> = HashMap::new();
    let mut double: HashSet<u32> = HashSet::new();
    for s in &truth.simhits {
        if let Some(l) = layer_of(s.module) {
            let m = layers.entry(s.particle).or_default();
            if *m & (1 << l) != 0 {
                double.insert(s.particle);
            }
            *m |= 1 << l;
        }
    }
    (layers, double)
}

/// The residuals (relative pT, φ, cotθ, tip, zip) of track `t` against particle `p`, and
/// their pulls (the first on 1/pT).
fn residuals_and_pulls(
    t: &RecoTrack,
    p: &TruthParticle,
    beam_spot: [f32; 3],
) -> ([f64; 5], [f64; 5]) {
    let (phi, tip, zip) = truth_track_params(p, beam_spot);
    let cot = (p.eta as f64).sinh();
    let res = [
        (t.pt as f64 - p.pt as f64) / p.pt as f64,
        wrap(t.state[0] as f64 - phi),
        t.state[3] as f64 - cot,
        t.tip as f64 - tip,
        t.zip as f64 - zip,
    ];
    let sig = |i: usize| (t.cov[i] as f64).sqrt();
    let pulls = [
        (t.state[2].abs() as f64 - 1.0 / p.pt as f64) / sig(9),
        res[1] / sig(0),
        res[2] / sig(12),
        res[3] / sig(5),
        res[4] / sig(14),
    ];
    (res, pulls)
}

/// Truth (φ, tip, zip) at the transverse point of closest approach to the beam line through
/// `beam_spot`, in the beam-spot frame and the reference's tip sign.
///
/// ```
/// use quiver_validation::truth::{truth_track_params, TruthParticle};
/// // A positive track along +y from x = 0.1: the beam line is outside its (clockwise) circle.
/// let p = TruthParticle { charge: 1, pt: 1.0, eta: 0.0, phi: std::f32::consts::FRAC_PI_2, vx: 0.1, vz: 2.0, ..Default::default() };
/// let (phi, tip, zip) = truth_track_params(&p, [0.0; 3]);
/// assert!((phi - std::f64::consts::FRAC_PI_2).abs() < 1e-6 && (tip - 0.1).abs() < 1e-6 && (zip - 2.0).abs() < 1e-6);
/// ```
pub fn truth_track_params(p: &TruthParticle, beam_spot: [f32; 3]) -> (f64, f64, f64) {
    const B_GEV_PER_CM: f64 = 0.002_997_924_58 * 3.8112;
    let (x, y, z) = (
        (p.vx - beam_spot[0]) as f64,
        (p.vy - beam_spot[1]) as f64,
        (p.vz - beam_spot[2]) as f64,
    );
    let phi0 = p.phi as f64;
    let rho = (p.pt as f64).max(1e-9) / B_GEV_PER_CM;
    let cot = (p.eta as f64).sinh();
    // Turning sense: positive charges bend clockwise in the +z field.
    let h = if p.charge > 0 { -1.0 } else { 1.0 };
    let (s0, c0) = phi0.sin_cos();
    let (xc, yc) = (x - rho * h * s0, y + rho * h * c0);
    let cc = (xc * xc + yc * yc).sqrt();
    if cc < 1e-12 {
        return (phi0, 0.0, z);
    }
    // Closest point: on the line from the centre towards the beam line, ρ from the centre.
    let (ux, uy) = (-xc / cc, -yc / cc);
    // Position at ψ is centre + ρh(sinψ, −cosψ), so (sinψ, −cosψ) = h·u.
    let psi = (h * ux).atan2(-h * uy);
    let (px, py) = (xc + rho * ux, yc + rho * uy);
    let tip = px * psi.sin() - py * psi.cos();
    let mut dt = h * (psi - phi0);
    dt = (dt + std::f64::consts::PI).rem_euclid(2.0 * std::f64::consts::PI) - std::f64::consts::PI;
    let phi =
        (psi + std::f64::consts::PI).rem_euclid(2.0 * std::f64::consts::PI) - std::f64::consts::PI;
    (phi, tip, z + rho * cot * dt)
}
