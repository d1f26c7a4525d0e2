//! Truth performance of the pixel chain: the run's products against the generator's truth.
//!
//! Definitions (also in docs/validation.md, "Truth performance"):
//! - **hit → particle**: the cluster's pixels (rows of `clustered_digis` with a valid
//!   cluster) are looked up in `pixel_truth`; the electrons are summed per particle; the
//!   particle with the largest sum (ties: lowest id) is the hit's particle. A hit whose
//!   largest share belongs to a noise pseudo-particle (process 2), or with no truth, has none.
//! - **track → particle**: the particle shared by at least `match_fraction` (75 %) of the
//!   track's hits.
//! - **efficiency**: primaries (process 0) with pT > `min_pt`, |η| < `max_abs_eta` and sim
//!   hits on ≥ `min_layers` distinct layers, found by ≥ 1 loose track.
//! - **fake rate**: loose tracks matched to no particle / loose tracks. **duplicate rate**:
//!   loose tracks (in row order) matched to a particle an earlier loose track of the event
//!   already matched / loose tracks.
//! - **truth track parameters** are taken at the transverse point of closest approach to
//!   the beam line (beam-spot frame, as the fit's hits are): φ there, the reference's
//!   `tip = x·sinφ − y·cosφ` (= q·d0 of the generator's convention, about the beam spot
//!   instead of the z axis), and `zip` = z there minus the beam spot z.
//! - **vertices**: a true vertex is *reconstructable* with ≥ `vertex_min_tracks` matched
//!   loose tracks (≥ `vertex_track_min_hits` hits, reco pT ≥ `vertex_track_min_pt`) from its
//!   primaries. Each reco vertex's *main* true vertex is the one contributing most of its
//!   matched tracks. A reconstructable vertex is *found* when a reco vertex with it as main
//!   lies within `vertex_max_dz` in z, *split* when ≥ 2 reco vertices have it as main, and
//!   *merged* when it is not found but most of its tracks sit in a reco vertex whose main is
//!   another true vertex.
//! - **hit residuals**: rec hit local x/y minus the nearest sim hit of the hit's particle on
//!   the same module; barrel non-edge = layer < 4 with `size_x > 0` and `size_y > 0`.

mod io;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::error::{Result, ValidationError};
use io::Col;

/// The layer (0..9) of a module, or `None` past the last module.
///
/// ```
/// use quiver_validation::truth::layer_of;
/// assert_eq!((layer_of(0), layer_of(96), layer_of(1855), layer_of(1856)), (Some(0), Some(1), Some(9), None));
/// ```
pub fn layer_of(module: u16) -> Option<usize> {
    use quiver_datasets::topology::{layer_of, NUMBER_OF_MODULES};
    (module < NUMBER_OF_MODULES).then(|| layer_of(module) as usize)
}

/// Cuts of the truth report.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Efficiency denominator: minimum true pT, GeV (default 0.9).
    pub min_pt: f32,
    /// Efficiency denominator: maximum true |η| (default 2.4).
    pub max_abs_eta: f32,
    /// Efficiency denominator: minimum distinct layers with sim hits (default 3).
    pub min_layers: usize,
    /// Fraction of a track's hits that must share a particle to match it (default 0.75).
    pub match_fraction: f64,
    /// Reconstructable vertex: minimum matched tracks (default 4).
    pub vertex_min_tracks: usize,
    /// Tracks counted for vertices: minimum hits (default 4).
    pub vertex_track_min_hits: usize,
    /// Tracks counted for vertices: minimum reco pT, GeV (default 0.5).
    pub vertex_track_min_pt: f32,
    /// A found vertex lies within this |Δz| of the truth, cm (default 0.1 = 1 mm).
    pub vertex_max_dz: f32,
    /// Beam spot (x, y, z), cm; the reconstruction works relative to it (default 0).
    pub beam_spot: [f32; 3],
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min_pt: 0.9,
            max_abs_eta: 2.4,
            min_layers: 3,
            match_fraction: 0.75,
            vertex_min_tracks: 4,
            vertex_track_min_hits: 4,
            vertex_track_min_pt: 0.5,
            vertex_max_dz: 0.1,
            beam_spot: [0.0; 3],
        }
    }
}

/// A true particle (`particles.parquet`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TruthParticle {
    pub id: u32,
    pub charge: i8,
    pub pt: f32,
    pub eta: f32,
    pub phi: f32,
    pub vx: f32,
    pub vy: f32,
    pub vz: f32,
    /// 0 primary, 1 secondary, 2 noise pseudo-particle.
    pub process: u8,
    pub vertex: i32,
}

/// A true vertex (`vertices.parquet`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TruthVertex {
    pub id: u32,
    pub z: f32,
    pub is_hard: bool,
}

/// A sim hit (`simhits.parquet`), local cm.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimHit {
    pub module: u16,
    pub lx: f32,
    pub ly: f32,
    pub particle: u32,
}

/// One (pixel, particle) deposit (`pixel_truth.parquet`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PixelTruth {
    pub module: u16,
    pub row: u16,
    pub col: u16,
    pub particle: u32,
    pub electrons: f32,
}

/// Truth of one event.
#[derive(Debug, Clone, Default)]
pub struct TruthEvent {
    pub particles: Vec<TruthParticle>,
    pub vertices: Vec<TruthVertex>,
    pub simhits: Vec<SimHit>,
    pub pixels: Vec<PixelTruth>,
}

/// A digi row: pixel from `digis`, final module and cluster from `clustered_digis`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Digi {
    pub row: u16,
    pub col: u16,
    pub module: u16,
    pub cluster: i32,
}

/// A rec hit (`hits`), in hit-index order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecHit {
    pub module: u16,
    pub x_local: f32,
    pub y_local: f32,
    pub size_x: i32,
    pub size_y: i32,
}

/// A track (`tracks`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoTrack {
    pub quality: u8,
    pub pt: f32,
    pub eta: f32,
    pub phi: f32,
    pub tip: f32,
    pub zip: f32,
    pub charge: i8,
    /// (φ, tip, q/pT, cotθ, zip).
    pub state: [f32; 5],
    /// Upper triangle, row major: diagonal at 0, 5, 9, 12, 14.
    pub cov: [f32; 15],
    /// Hit indices within the event.
    pub hits: Vec<u32>,
}

/// A vertex (`vertices`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoVertex {
    pub z: f32,
    /// 1/σ², cm⁻².
    pub weight: f32,
    /// Track rows within the event.
    pub tracks: Vec<u32>,
}

/// Products of one event.
#[derive(Debug, Clone, Default)]
pub struct RecoEvent {
    pub digis: Vec<Digi>,
    pub hits: Vec<RecHit>,
    pub tracks: Vec<RecoTrack>,
    pub vertices: Vec<RecoVertex>,
}

/// The track quality value `loose`.
pub const LOOSE: u8 = quiver_formats::quality::codes::LOOSE;
/// Resolution quantities, in table order.
pub const QUANTITIES: [&str; 5] = ["pt", "phi", "cot_theta", "tip", "zip"];

/// What one event contributes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventResult {
    /// Pile-up vertices (true vertices minus the hard one).
    pub n_pileup: usize,
    /// Efficiency denominator: (pT, η, φ, found).
    pub selected: Vec<(f32, f32, f32, bool)>,
    /// Per selected particle: (layers with its rec hits (hit → particle), found by a track of
    /// any quality, ≥ 2 sim hits on one layer (module overlap or looper)).
    pub selected_detail: Vec<(usize, bool, bool)>,
    /// Duplicate loose tracks whose particle has ≥ 2 sim hits on one layer.
    pub duplicate_double_hits: usize,
    /// Matched loose tracks of primaries whose φ is off by more than π/2 (reversed direction).
    pub reversed: usize,
    /// Particles with both a reversed and a normal matched loose track.
    pub reversed_pairs: usize,
    /// Hits with a particle, hits.
    pub hits_matched: (usize, usize),
    pub loose: usize,
    pub fake: usize,
    pub duplicate: usize,
    /// Every loose track: (hits, reco pT, reco η, 0 matched / 1 fake / 2 duplicate, hits of
    /// its most frequent particle).
    pub loose_tracks: Vec<(usize, f32, f32, u8, usize)>,
    /// Matched loose tracks of primaries fitted in the particle's direction (reversed ones are
    /// only counted in `reversed`): (true pT, true η, residuals, pulls) in [`QUANTITIES`]
    /// order; pT: (reco − true)/true, pull on |q/pT|.
    pub resolution: Vec<(f32, f32, [f64; 5], [f64; 5])>,
    /// Loose tracks whose reco charge equals the truth's, of matched ones: (equal, total).
    pub charge: (usize, usize),
    /// Reconstructable true vertices: (reconstructable tracks, found, merged, split, Δz cm,
    /// pull, |Δz| to the nearest other reconstructable true vertex in cm (∞ if none)).
    pub vertices: Vec<(usize, bool, bool, bool, f64, f64, f64)>,
    /// Reco vertices with no matched track.
    pub fake_vertices: usize,
    /// Hit residuals: (layer, non-edge, Δx µm, Δy µm).
    pub residuals: Vec<(usize, bool, f64, f64)>,
    /// Digi rows, clusters, hits, tracks (any quality), loose tracks, vertices.
    pub counts: [usize; 6],
}

/// The particle of every hit (index = hit index), by charge fraction.
///
/// ```
/// use quiver_validation::truth::*;
/// let reco = RecoEvent {
///     digis: vec![Digi { row: 1, col: 1, module: 5, cluster: 0 }, Digi { row: 1, col: 2, module: 5, cluster: 0 }],
///     hits: vec![RecHit { module: 5, ..Default::default() }],
///     ..Default::default()
/// };
/// let px = |col, particle, electrons| PixelTruth { module: 5, row: 1, col, particle, electrons };
/// let truth = TruthEvent {
///     particles: (0..2).map(|id| TruthParticle { id, ..Default::default() }).collect(),
///     pixels: vec![px(1, 0, 3000.0), px(2, 0, 1000.0), px(2, 1, 5000.0)],
///     ..Default::default()
/// };
/// assert_eq!(hit_particles(&reco, &truth).unwrap(), vec![Some(1)]);
/// ```
pub fn hit_particles(reco: &RecoEvent, truth: &TruthEvent) -> Result<Vec<Option<u32>>> {
    // Hit index of (module, cluster): hits are ordered by module, then cluster number.
    let mut hit_of = HashMap::with_capacity(reco.hits.len());
    let mut prev = None;
    let mut k = 0i32;
    for (i, h) in reco.hits.iter().enumerate() {
        if prev == Some(h.module) {
            k += 1;
        } else if prev.is_some_and(|p| p > h.module) {
            return Err(ValidationError::Data(format!("hit {i}: module {} after module {}: hits are not ordered by module", h.module, prev.unwrap())));
        } else {
            k = 0;
        }
        prev = Some(h.module);
        hit_of.insert((h.module, k), i);
    }
    let key = |m: u16, r: u16, c: u16| (m as u64) << 32 | (r as u64) << 16 | c as u64;
    let mut deposits: HashMap<u64, Vec<(u32, f32)>> = HashMap::with_capacity(truth.pixels.len());
    for p in &truth.pixels {
        deposits.entry(key(p.module, p.row, p.col)).or_default().push((p.particle, p.electrons));
    }
    let mut sums: Vec<Vec<(u32, f64)>> = vec![Vec::new(); reco.hits.len()];
    for d in &reco.digis {
        if d.module == 9999 || d.cluster < 0 || d.cluster == 9999 {
            continue;
        }
        let Some(&h) = hit_of.get(&(d.module, d.cluster)) else { continue };
        for &(p, e) in deposits.get(&key(d.module, d.row, d.col)).map(|v| v.as_slice()).unwrap_or(&[]) {
            match sums[h].iter_mut().find(|s| s.0 == p) {
                Some(s) => s.1 += e as f64,
                None => sums[h].push((p, e as f64)),
            }
        }
    }
    let noise: std::collections::HashSet<u32> = truth.particles.iter().filter(|p| p.process == 2).map(|p| p.id).collect();
    Ok(sums
        .iter()
        .map(|s| {
            let best = s.iter().filter(|x| x.1 > 0.0).fold(None::<(u32, f64)>, |b, &(p, e)| match b {
                Some((bp, be)) if be > e || (be == e && bp < p) => Some((bp, be)),
                _ => Some((p, e)),
            });
            best.map(|b| b.0).filter(|p| !noise.contains(p))
        })
        .collect())
}

/// The particle shared by at least `fraction` of the track's hits, if any.
///
/// ```
/// use quiver_validation::truth::match_track;
/// let hp = [Some(7), Some(7), Some(7), Some(2), None];
/// assert_eq!(match_track(&[0, 1, 2, 3], &hp, 0.75), Some(7)); // 3 of 4
/// assert_eq!(match_track(&[0, 1, 3, 4], &hp, 0.75), None); // 2 of 4
/// ```
pub fn match_track(hits: &[u32], hit_particle: &[Option<u32>], fraction: f64) -> Option<u32> {
    let (p, n) = best_share(hits, hit_particle)?;
    (n as f64 >= fraction * hits.len() as f64).then_some(p)
}

/// The particle with most of the track's hits (ties: lowest id) and its hit count.
///
/// ```
/// use quiver_validation::truth::best_share;
/// assert_eq!(best_share(&[0, 1, 2], &[Some(4), None, Some(4)]), Some((4, 2)));
/// assert_eq!(best_share(&[1], &[Some(4), None]), None);
/// ```
pub fn best_share(hits: &[u32], hit_particle: &[Option<u32>]) -> Option<(u32, usize)> {
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for &h in hits {
        if let Some(Some(p)) = hit_particle.get(h as usize) {
            match counts.iter_mut().find(|c| c.0 == *p) {
                Some(c) => c.1 += 1,
                None => counts.push((*p, 1)),
            }
        }
    }
    counts.into_iter().max_by_key(|&(p, n)| (n, std::cmp::Reverse(p)))
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
    let (x, y, z) = ((p.vx - beam_spot[0]) as f64, (p.vy - beam_spot[1]) as f64, (p.vz - beam_spot[2]) as f64);
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
    let phi = (psi + std::f64::consts::PI).rem_euclid(2.0 * std::f64::consts::PI) - std::f64::consts::PI;
    (phi, tip, z + rho * cot * dt)
}

fn wrap(d: f64) -> f64 {
    (d + std::f64::consts::PI).rem_euclid(2.0 * std::f64::consts::PI) - std::f64::consts::PI
}

/// Everything one event contributes to the report.
pub fn analyze_event(reco: &RecoEvent, truth: &TruthEvent, cfg: &Config) -> Result<EventResult> {
    let hp = hit_particles(reco, truth)?;
    let by_id: HashMap<u32, &TruthParticle> = truth.particles.iter().map(|p| (p.id, p)).collect();
    let mut r = EventResult { n_pileup: truth.vertices.iter().filter(|v| !v.is_hard).count(), ..Default::default() };

    // Tracks.
    let matched: Vec<Option<u32>> = reco.tracks.iter().map(|t| match_track(&t.hits, &hp, cfg.match_fraction)).collect();
    // Layers with sim hits per particle, and whether one layer has two.
    let mut layers: HashMap<u32, u16> = HashMap::new();
    let mut double: std::collections::HashSet<u32> = std::collections::HashSet::new();
    for s in &truth.simhits {
        if let Some(l) = layer_of(s.module) {
            let m = layers.entry(s.particle).or_default();
            if *m & (1 << l) != 0 {
                double.insert(s.particle);
            }
            *m |= 1 << l;
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut direction: HashMap<u32, (bool, bool)> = HashMap::new();
    let any_quality: std::collections::HashSet<u32> = matched.iter().flatten().copied().collect();
    let mut hit_layers: HashMap<u32, u16> = HashMap::new();
    for (h, p) in reco.hits.iter().zip(&hp) {
        if let (Some(p), Some(l)) = (p, layer_of(h.module)) {
            *hit_layers.entry(*p).or_default() |= 1 << l;
        }
    }
    r.hits_matched = (hp.iter().filter(|p| p.is_some()).count(), hp.len());
    for (t, m) in reco.tracks.iter().zip(&matched) {
        if t.quality < LOOSE {
            continue;
        }
        r.loose += 1;
        let share = best_share(&t.hits, &hp).map_or(0, |b| b.1);
        let Some(pid) = m else {
            r.fake += 1;
            r.loose_tracks.push((t.hits.len(), t.pt, t.eta, 1, share));
            continue;
        };
        if !seen.insert(*pid) {
            r.duplicate += 1;
            r.duplicate_double_hits += double.contains(pid) as usize;
            r.loose_tracks.push((t.hits.len(), t.pt, t.eta, 2, share));
        } else {
            r.loose_tracks.push((t.hits.len(), t.pt, t.eta, 0, share));
        }
        let Some(p) = by_id.get(pid) else { continue };
        r.charge.1 += 1;
        r.charge.0 += (t.charge.signum() == p.charge.signum()) as usize;
        if p.process != 0 {
            continue;
        }
        let (phi, tip, zip) = truth_track_params(p, cfg.beam_spot);
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
        // A track fitted in the reversed direction (the returning leg of a low-pT looper,
        // its hits ordered against the particle's flight) has φ off by π and cotθ, zip of the
        // other leg: comparing it with the truth at production measures nothing about the fit.
        // Counted, never in the resolutions and pulls (with them the cotθ pull RMS was 27 on
        // the default dataset, every pull above 20 from such a track).
        let rev = res[1].abs() > std::f64::consts::FRAC_PI_2;
        let e = direction.entry(p.id).or_insert((false, false));
        if rev {
            r.reversed += 1;
            e.0 = true;
        } else {
            e.1 = true;
            r.resolution.push((p.pt, p.eta, res, pulls));
        }
    }
    r.reversed_pairs = direction.values().filter(|d| d.0 && d.1).count();

    for p in &truth.particles {
        let nl = layers.get(&p.id).map_or(0, |m| m.count_ones() as usize);
        if p.process == 0 && p.charge != 0 && p.pt > cfg.min_pt && p.eta.abs() < cfg.max_abs_eta && nl >= cfg.min_layers {
            r.selected.push((p.pt, p.eta, p.phi, seen.contains(&p.id)));
            r.selected_detail.push((hit_layers.get(&p.id).map_or(0, |m| m.count_ones() as usize), any_quality.contains(&p.id), double.contains(&p.id)));
        }
    }

    // Vertices.
    let true_vertex_of_track: Vec<Option<u32>> = reco
        .tracks
        .iter()
        .zip(&matched)
        .map(|(t, m)| {
            let ok = t.quality >= LOOSE && t.hits.len() >= cfg.vertex_track_min_hits && t.pt >= cfg.vertex_track_min_pt;
            m.filter(|_| ok).and_then(|pid| by_id.get(&pid)).filter(|p| p.process == 0 && p.vertex >= 0).map(|p| p.vertex as u32)
        })
        .collect();
    let mut n_reco_tracks: BTreeMap<u32, usize> = BTreeMap::new();
    for v in true_vertex_of_track.iter().flatten() {
        *n_reco_tracks.entry(*v).or_default() += 1;
    }
    let main: Vec<Option<u32>> = reco
        .vertices
        .iter()
        .map(|rv| {
            let mut c: BTreeMap<u32, usize> = BTreeMap::new();
            for &t in &rv.tracks {
                if let Some(Some(v)) = true_vertex_of_track.get(t as usize) {
                    *c.entry(*v).or_default() += 1;
                }
            }
            c.into_iter().max_by_key(|&(v, n)| (n, std::cmp::Reverse(v))).map(|x| x.0)
        })
        .collect();
    r.fake_vertices = main.iter().filter(|m| m.is_none()).count();
    // Reco vertex of each track.
    let mut vertex_of_track: HashMap<u32, usize> = HashMap::new();
    for (i, rv) in reco.vertices.iter().enumerate() {
        for &t in &rv.tracks {
            vertex_of_track.insert(t, i);
        }
    }
    let reconstructable: Vec<&TruthVertex> =
        truth.vertices.iter().filter(|v| n_reco_tracks.get(&v.id).copied().unwrap_or(0) >= cfg.vertex_min_tracks).collect();
    for tv in &reconstructable {
        let n = n_reco_tracks[&tv.id];
        let nearest = reconstructable.iter().filter(|o| o.id != tv.id).map(|o| (o.z - tv.z).abs() as f64).fold(f64::INFINITY, f64::min);
        let zt = (tv.z - cfg.beam_spot[2]) as f64;
        let mine: Vec<usize> = (0..reco.vertices.len()).filter(|&i| main[i] == Some(tv.id)).collect();
        let best = mine.iter().copied().min_by(|&a, &b| {
            ((reco.vertices[a].z as f64 - zt).abs()).total_cmp(&(reco.vertices[b].z as f64 - zt).abs())
        });
        let (found, dz, pull) = match best {
            Some(b) => {
                let dz = reco.vertices[b].z as f64 - zt;
                let sigma = 1.0 / (reco.vertices[b].weight as f64).sqrt();
                (dz.abs() < cfg.vertex_max_dz as f64, dz, dz / sigma)
            }
            None => (false, f64::NAN, f64::NAN),
        };
        let split = mine.len() >= 2;
        let merged = !found && {
            let mut c: BTreeMap<usize, usize> = BTreeMap::new();
            for (t, v) in true_vertex_of_track.iter().enumerate() {
                if *v == Some(tv.id) {
                    if let Some(&rv) = vertex_of_track.get(&(t as u32)) {
                        *c.entry(rv).or_default() += 1;
                    }
                }
            }
            c.into_iter().max_by_key(|&(v, n)| (n, std::cmp::Reverse(v))).is_some_and(|(rv, _)| main[rv].is_some_and(|m| m != tv.id))
        };
        r.vertices.push((n, found, merged, split, dz, pull, nearest));
    }

    // Hit residuals.
    let mut sim: HashMap<(u16, u32), Vec<(f32, f32)>> = HashMap::new();
    for s in &truth.simhits {
        sim.entry((s.module, s.particle)).or_default().push((s.lx, s.ly));
    }
    for (h, p) in reco.hits.iter().zip(&hp) {
        let (Some(p), Some(layer)) = (p, layer_of(h.module)) else { continue };
        let Some(cands) = sim.get(&(h.module, *p)) else { continue };
        let near = cands
            .iter()
            .map(|&(x, y)| ((h.x_local - x) as f64, (h.y_local - y) as f64))
            .min_by(|a, b| (a.0 * a.0 + a.1 * a.1).total_cmp(&(b.0 * b.0 + b.1 * b.1)))
            .unwrap();
        r.residuals.push((layer, h.size_x > 0 && h.size_y > 0, near.0 * 1e4, near.1 * 1e4));
    }

    let clusters = {
        let mut c: Vec<(u16, i32)> = reco.digis.iter().filter(|d| d.module != 9999 && d.cluster >= 0 && d.cluster != 9999).map(|d| (d.module, d.cluster)).collect();
        c.sort_unstable();
        c.dedup();
        c.len()
    };
    r.counts = [reco.digis.len(), clusters, reco.hits.len(), reco.tracks.len(), r.loose, reco.vertices.len()];
    Ok(r)
}

/// Headline numbers of a report (`summary.json`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub events: usize,
    pub track_efficiency: f64,
    pub track_fake_rate: f64,
    pub track_duplicate_rate: f64,
    pub vertex_efficiency: f64,
    pub vertex_merge_rate: f64,
    pub vertex_split_rate: f64,
    /// Reco vertices with no matched track / reco vertices.
    pub vertex_fake_rate: f64,
    /// 68 % half-width of reco − true vertex z of found vertices, µm.
    pub vertex_z_resolution_um: f64,
    /// RMS of barrel non-edge hit residuals, µm.
    pub hit_residual_rms_x_um: f64,
    pub hit_residual_rms_y_um: f64,
    /// 68 % half-width of the same, µm.
    pub hit_residual_w68_x_um: f64,
    pub hit_residual_w68_y_um: f64,
    /// 68 % half-widths over matched loose tracks of primaries with pT > min_pt:
    /// pT/pT (fraction), φ (rad), cotθ, tip (µm), zip (µm).
    pub pt_resolution: f64,
    pub phi_resolution: f64,
    pub cot_theta_resolution: f64,
    pub tip_resolution_um: f64,
    pub zip_resolution_um: f64,
    /// Matched loose tracks with the truth's charge sign / matched loose tracks.
    pub charge_agreement: f64,
    /// Fake rate among loose tracks with ≥ 4 hits.
    pub track_fake_rate_4hits: f64,
    /// Efficiency denominator particles with matched rec hits on ≥ min_layers layers.
    pub efficiency_particles_with_rechits: f64,
    /// Rec hits with a particle / rec hits.
    pub hit_match_fraction: f64,
    /// Duplicates whose particle has ≥ 2 sim hits on one layer / duplicates.
    pub duplicate_double_hit_fraction: f64,
    /// Matched loose tracks of primaries (any pT) fitted with the reversed direction (φ off
    /// by more than π/2) / matched loose tracks of primaries.
    pub track_reversed_fraction: f64,
    /// Particles with both a reversed and a normal loose track (each makes a duplicate) /
    /// duplicates.
    pub duplicate_reversed_fraction: f64,
    pub efficiency_particles: usize,
    pub loose_tracks: usize,
    pub reconstructable_vertices: usize,
    pub mean_digis: f64,
    pub mean_clusters: f64,
    pub mean_hits: f64,
    pub mean_tracks: f64,
    pub mean_loose_tracks: f64,
    pub mean_vertices: f64,
    pub mean_pileup: f64,
    /// Capacities the run reached (its `capacity_overflows` files), by step and capacity.
    pub capacities_reached: Vec<crate::capacity::CapacityReached>,
}

impl Summary {
    /// The summary as a JSON object (non-finite numbers as `null`).
    pub fn to_json(&self) -> String {
        let f = |v: f64| if v.is_finite() { format!("{v}") } else { "null".into() };
        let fields: Vec<(&str, String)> = vec![
            ("events", self.events.to_string()),
            ("track_efficiency", f(self.track_efficiency)),
            ("track_fake_rate", f(self.track_fake_rate)),
            ("track_duplicate_rate", f(self.track_duplicate_rate)),
            ("vertex_efficiency", f(self.vertex_efficiency)),
            ("vertex_merge_rate", f(self.vertex_merge_rate)),
            ("vertex_split_rate", f(self.vertex_split_rate)),
            ("vertex_fake_rate", f(self.vertex_fake_rate)),
            ("vertex_z_resolution_um", f(self.vertex_z_resolution_um)),
            ("hit_residual_rms_x_um", f(self.hit_residual_rms_x_um)),
            ("hit_residual_rms_y_um", f(self.hit_residual_rms_y_um)),
            ("hit_residual_w68_x_um", f(self.hit_residual_w68_x_um)),
            ("hit_residual_w68_y_um", f(self.hit_residual_w68_y_um)),
            ("pt_resolution", f(self.pt_resolution)),
            ("phi_resolution", f(self.phi_resolution)),
            ("cot_theta_resolution", f(self.cot_theta_resolution)),
            ("tip_resolution_um", f(self.tip_resolution_um)),
            ("zip_resolution_um", f(self.zip_resolution_um)),
            ("charge_agreement", f(self.charge_agreement)),
            ("track_fake_rate_4hits", f(self.track_fake_rate_4hits)),
            ("efficiency_particles_with_rechits", f(self.efficiency_particles_with_rechits)),
            ("hit_match_fraction", f(self.hit_match_fraction)),
            ("duplicate_double_hit_fraction", f(self.duplicate_double_hit_fraction)),
            ("track_reversed_fraction", f(self.track_reversed_fraction)),
            ("duplicate_reversed_fraction", f(self.duplicate_reversed_fraction)),
            ("efficiency_particles", self.efficiency_particles.to_string()),
            ("loose_tracks", self.loose_tracks.to_string()),
            ("reconstructable_vertices", self.reconstructable_vertices.to_string()),
            ("mean_digis", f(self.mean_digis)),
            ("mean_clusters", f(self.mean_clusters)),
            ("mean_hits", f(self.mean_hits)),
            ("mean_tracks", f(self.mean_tracks)),
            ("mean_loose_tracks", f(self.mean_loose_tracks)),
            ("mean_vertices", f(self.mean_vertices)),
            ("mean_pileup", f(self.mean_pileup)),
            ("capacities_reached", self.capacities_reached.len().to_string()),
            ("capacity_overflow_events", self.capacities_reached.iter().map(|c| c.events).max().unwrap_or(0).to_string()),
        ];
        let body: Vec<String> = fields.into_iter().map(|(k, v)| format!("  \"{k}\": {v}")).collect();
        format!("{{\n{}\n}}\n", body.join(",\n"))
    }
}

/// An efficiency-denominator particle: (pT, η, φ, found, pile-up, rec-hit layers, found by
/// any quality, double layer hits).
type Selected = (f32, f32, f32, bool, usize, usize, bool, bool);
/// A loose track: (hits, pT, η, kind, best share).
type Loose = (usize, f32, f32, u8, usize);
/// A binned variable of a table: name, bin edges, value.
type Binning<'a, T> = (&'a str, Vec<f64>, &'a dyn Fn(&T) -> f64);

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

/// Fewest finite values a 68 % half-width is measured from: below, the 16th and 84th
/// percentiles are the same or neighbouring values and the width (0 for one value) would
/// be drawn as a perfect resolution.
pub const MIN_FOR_WIDTH: usize = 5;

/// Half-width of the central 68 % of `v`'s finite values (NaN with fewer than
/// [`MIN_FOR_WIDTH`] of them: undefined, left out of plots, never 0).
///
/// ```
/// use quiver_validation::truth::half_width_68;
/// let v: Vec<f64> = (-50..=50).map(|i| i as f64).collect();
/// assert_eq!(half_width_68(&v), 34.0);
/// assert!(half_width_68(&[0.01]).is_nan()); // one track is no resolution
/// ```
pub fn half_width_68(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.len() < MIN_FOR_WIDTH {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let q = |f: f64| s[((f * (s.len() - 1) as f64).round() as usize).min(s.len() - 1)];
    0.5 * (q(0.84) - q(0.16))
}

fn mean_rms(v: &[f64]) -> (f64, f64) {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (m, (v.iter().map(|x| x * x).sum::<f64>() / n).sqrt())
}

/// Combines event results into the summary and the result tables; writes the tables into
/// `output` when given.
pub fn summarize(results: &[EventResult], cfg: &Config, output: Option<&Path>) -> Result<Summary> {
    let n = results.len();
    let sum = |f: &dyn Fn(&EventResult) -> usize| results.iter().map(f).sum::<usize>();
    let sel: Vec<Selected> = results
        .iter()
        .flat_map(|r| r.selected.iter().zip(&r.selected_detail).map(move |(s, d)| (s.0, s.1, s.2, s.3, r.n_pileup, d.0, d.1, d.2)))
        .collect();
    let loose = sum(&|r| r.loose);
    let verts: Vec<_> = results.iter().flat_map(|r| r.vertices.iter().copied()).collect();
    let res: Vec<_> = results.iter().flat_map(|r| r.resolution.iter().copied()).collect();
    let resid: Vec<_> = results.iter().flat_map(|r| r.residuals.iter().copied()).collect();
    let mean = |k: usize| if n == 0 { f64::NAN } else { sum(&|r| r.counts[k]) as f64 / n as f64 };
    let reco_vertices = sum(&|r| r.counts[5]);
    let central = |v: &[f64]| half_width_68(v);
    let hi_pt: Vec<_> = res.iter().filter(|r| r.0 > cfg.min_pt).collect();
    let q = |i: usize| central(&hi_pt.iter().map(|r| r.2[i]).collect::<Vec<_>>());
    let bnx: Vec<f64> = resid.iter().filter(|r| r.0 < 4 && r.1).map(|r| r.2).collect();
    let bny: Vec<f64> = resid.iter().filter(|r| r.0 < 4 && r.1).map(|r| r.3).collect();
    let found_dz: Vec<f64> = verts.iter().filter(|v| v.1).map(|v| v.4 * 1e4).collect();
    let s = Summary {
        events: n,
        track_efficiency: ratio(sel.iter().filter(|s| s.3).count(), sel.len()),
        track_fake_rate: ratio(sum(&|r| r.fake), loose),
        track_duplicate_rate: ratio(sum(&|r| r.duplicate), loose),
        vertex_efficiency: ratio(verts.iter().filter(|v| v.1).count(), verts.len()),
        vertex_merge_rate: ratio(verts.iter().filter(|v| v.2).count(), verts.len()),
        vertex_split_rate: ratio(verts.iter().filter(|v| v.3).count(), verts.len()),
        vertex_fake_rate: ratio(sum(&|r| r.fake_vertices), reco_vertices),
        vertex_z_resolution_um: central(&found_dz),
        hit_residual_rms_x_um: mean_rms(&bnx).1,
        hit_residual_rms_y_um: mean_rms(&bny).1,
        hit_residual_w68_x_um: central(&bnx),
        hit_residual_w68_y_um: central(&bny),
        pt_resolution: q(0),
        phi_resolution: q(1),
        cot_theta_resolution: q(2),
        tip_resolution_um: q(3) * 1e4,
        zip_resolution_um: q(4) * 1e4,
        charge_agreement: ratio(sum(&|r| r.charge.0), sum(&|r| r.charge.1)),
        track_fake_rate_4hits: {
            let l4 = results.iter().flat_map(|r| r.loose_tracks.iter()).filter(|t| t.0 >= 4);
            let (f4, n4) = l4.fold((0, 0), |(f, n), t| (f + (t.3 == 1) as usize, n + 1));
            ratio(f4, n4)
        },
        efficiency_particles_with_rechits: ratio(sel.iter().filter(|s| s.5 >= cfg.min_layers).count(), sel.len()),
        hit_match_fraction: ratio(sum(&|r| r.hits_matched.0), sum(&|r| r.hits_matched.1)),
        duplicate_double_hit_fraction: ratio(sum(&|r| r.duplicate_double_hits), sum(&|r| r.duplicate)),
        track_reversed_fraction: ratio(sum(&|r| r.reversed), sum(&|r| r.reversed) + res.len()),
        duplicate_reversed_fraction: ratio(sum(&|r| r.reversed_pairs), sum(&|r| r.duplicate)),
        efficiency_particles: sel.len(),
        loose_tracks: loose,
        reconstructable_vertices: verts.len(),
        mean_digis: mean(0),
        mean_clusters: mean(1),
        mean_hits: mean(2),
        mean_tracks: mean(3),
        mean_loose_tracks: mean(4),
        mean_vertices: mean(5),
        mean_pileup: if n == 0 { f64::NAN } else { results.iter().map(|r| r.n_pileup).sum::<usize>() as f64 / n as f64 },
        capacities_reached: Vec::new(),
    };
    let Some(out) = output else { return Ok(s) };
    std::fs::create_dir_all(out).map_err(|source| ValidationError::Io { path: out.into(), source })?;

    // Efficiency vs pT, η, φ, pile-up.
    let pi = std::f64::consts::PI;
    let pt_edges = [0.9, 1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 1e9];
    let eta_edges: Vec<f64> = (0..=24).map(|i| -2.4 + 0.2 * i as f64).collect();
    let phi_edges: Vec<f64> = (0..=16).map(|i| -pi + 2.0 * pi * i as f64 / 16.0).collect();
    let pu_edges: Vec<f64> = (0..=20).map(|i| 10.0 * i as f64).collect();
    let (mut var, mut lo, mut hi, mut tot, mut fnd, mut eff) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut hit3, mut any, mut dbl) = (vec![], vec![], vec![]);
    let vars: [Binning<Selected>; 4] = [
        ("pt", pt_edges.to_vec(), &|s| s.0 as f64),
        ("eta", eta_edges, &|s| s.1 as f64),
        ("phi", phi_edges, &|s| s.2 as f64),
        ("pileup", pu_edges, &|s| s.4 as f64),
    ];
    for (name, edges, x) in vars {
        for w in edges.windows(2) {
            let inb: Vec<_> = sel.iter().filter(|s| (w[0]..w[1]).contains(&x(s))).collect();
            var.push(name.to_string());
            lo.push(w[0]);
            hi.push(w[1]);
            tot.push(inb.len() as u64);
            fnd.push(inb.iter().filter(|s| s.3).count() as u64);
            eff.push(ratio(inb.iter().filter(|s| s.3).count(), inb.len()));
            hit3.push(inb.iter().filter(|s| s.5 >= cfg.min_layers).count() as u64);
            any.push(inb.iter().filter(|s| s.6).count() as u64);
            dbl.push(inb.iter().filter(|s| s.7).count() as u64);
        }
    }
    io::write_table(
        &out.join("efficiency.parquet"),
        vec![("variable", Col::Str(var)), ("low", Col::F64(lo)), ("high", Col::F64(hi)), ("n_particles", Col::U64(tot)), ("n_found", Col::U64(fnd)), ("efficiency", Col::F64(eff)),
            ("n_rechits_on_min_layers", Col::U64(hit3)), ("n_found_any_quality", Col::U64(any)),
            ("n_double_layer_hits", Col::U64(dbl))],
    )?;

    // Resolutions and pulls, overall and in true pT and |η| bins.
    let mut t: [Vec<f64>; 8] = Default::default();
    let (mut tq, mut tb, mut tn, mut to) = (vec![], vec![], vec![], vec![]);
    let bins: Vec<(String, f64, f64)> = [("all", 0.0, 1e9)]
        .into_iter()
        .map(|(a, b, c)| (a.to_string(), b, c))
        .chain(pt_edges[..pt_edges.len() - 1].iter().zip(&pt_edges[1..]).map(|(a, b)| ("pt".to_string(), *a, *b)))
        .chain([0.0, 0.8, 1.6, 2.4, 3.0].windows(2).map(|w| ("abs_eta".to_string(), w[0], w[1])))
        .collect();
    for (qi, qn) in QUANTITIES.iter().enumerate() {
        for (bn, a, b) in &bins {
            let rows: Vec<_> = res
                .iter()
                .filter(|r| match bn.as_str() {
                    "all" => r.0 > cfg.min_pt,
                    "pt" => (*a..*b).contains(&(r.0 as f64)),
                    _ => (*a..*b).contains(&(r.1.abs() as f64)) && r.0 > cfg.min_pt,
                })
                .collect();
            let v: Vec<f64> = rows.iter().map(|r| r.2[qi]).collect();
            let p: Vec<f64> = rows.iter().map(|r| r.3[qi]).collect();
            let (m, rms) = mean_rms(&v);
            let (pm, prms) = mean_rms(&p);
            tq.push(qn.to_string());
            tb.push(bn.clone());
            tn.push(rows.len() as u64);
            to.push(p.iter().filter(|x| x.abs() > 5.0).count() as u64);
            for (k, x) in [a.to_owned(), b.to_owned(), m, rms, half_width_68(&v), pm, prms, half_width_68(&p)].into_iter().enumerate() {
                t[k].push(x);
            }
        }
    }
    let [t0, t1, t2, t3, t4, t5, t6, t7] = t;
    io::write_table(
        &out.join("resolution.parquet"),
        vec![
            ("quantity", Col::Str(tq)),
            ("bin_variable", Col::Str(tb)),
            ("low", Col::F64(t0)),
            ("high", Col::F64(t1)),
            ("n", Col::U64(tn)),
            ("mean", Col::F64(t2)),
            ("rms", Col::F64(t3)),
            ("half_width_68", Col::F64(t4)),
            ("pull_mean", Col::F64(t5)),
            ("pull_rms", Col::F64(t6)),
            ("pull_half_width_68", Col::F64(t7)),
            ("n_pull_above_5", Col::U64(to)),
        ],
    )?;

    // Vertices vs reconstructable tracks.
    let vb = [4usize, 5, 7, 10, 15, 20, 30, 50, 100, usize::MAX];
    let mut c: [Vec<u64>; 6] = Default::default();
    for w in vb.windows(2) {
        let inb: Vec<_> = verts.iter().filter(|v| v.0 >= w[0] && v.0 < w[1]).collect();
        c[0].push(w[0] as u64);
        c[1].push(if w[1] == usize::MAX { u64::MAX } else { w[1] as u64 });
        c[2].push(inb.len() as u64);
        c[3].push(inb.iter().filter(|v| v.1).count() as u64);
        c[4].push(inb.iter().filter(|v| v.2).count() as u64);
        c[5].push(inb.iter().filter(|v| v.3).count() as u64);
    }
    let [c0, c1, c2, c3, c4, c5] = c;
    io::write_table(
        &out.join("vertex_efficiency.parquet"),
        vec![
            ("min_tracks", Col::U64(c0)),
            ("max_tracks", Col::U64(c1)),
            ("n_true", Col::U64(c2)),
            ("n_found", Col::U64(c3)),
            ("n_merged", Col::U64(c4)),
            ("n_split", Col::U64(c5)),
        ],
    )?;

    // Loose-track composition vs hits, pT, η.
    let lt: Vec<_> = results.iter().flat_map(|r| r.loose_tracks.iter().copied()).collect();
    let (mut fv, mut fl, mut fh, mut fn_, mut ff, mut fd, mut f1) = (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let fvars: [Binning<Loose>; 3] = [
        ("n_hits", vec![3.0, 4.0, 5.0, 6.0, 100.0], &|t| t.0 as f64),
        ("pt", vec![0.0, 0.5, 0.9, 1.5, 3.0, 10.0, 1e9], &|t| t.1 as f64),
        ("eta", (0..=16).map(|i| -4.0 + 0.5 * i as f64).collect(), &|t| t.2 as f64),
    ];
    for (name, edges, x) in fvars {
        for w in edges.windows(2) {
            let inb: Vec<_> = lt.iter().filter(|t| (w[0]..w[1]).contains(&x(t))).collect();
            fv.push(name.to_string());
            fl.push(w[0]);
            fh.push(w[1]);
            fn_.push(inb.len() as u64);
            ff.push(inb.iter().filter(|t| t.3 == 1).count() as u64);
            fd.push(inb.iter().filter(|t| t.3 == 2).count() as u64);
            // Fakes whose hits all but one come from one particle.
            f1.push(inb.iter().filter(|t| t.3 == 1 && t.4 + 1 == t.0).count() as u64);
        }
    }
    io::write_table(
        &out.join("track_composition.parquet"),
        vec![
            ("variable", Col::Str(fv)),
            ("low", Col::F64(fl)),
            ("high", Col::F64(fh)),
            ("n_loose", Col::U64(fn_)),
            ("n_fake", Col::U64(ff)),
            ("n_duplicate", Col::U64(fd)),
            ("n_fake_one_foreign_hit", Col::U64(f1)),
        ],
    )?;

    // Vertices vs the distance to the nearest other reconstructable true vertex.
    let db = [0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, f64::INFINITY];
    let mut c: [Vec<f64>; 2] = Default::default();
    let mut d: [Vec<u64>; 4] = Default::default();
    for w in db.windows(2) {
        let inb: Vec<_> = verts.iter().filter(|v| v.6 >= w[0] && v.6 < w[1]).collect();
        c[0].push(w[0]);
        c[1].push(w[1]);
        d[0].push(inb.len() as u64);
        d[1].push(inb.iter().filter(|v| v.1).count() as u64);
        d[2].push(inb.iter().filter(|v| v.2).count() as u64);
        d[3].push(inb.iter().filter(|v| v.3).count() as u64);
    }
    let ([c0, c1], [d0, d1, d2, d3]) = (c, d);
    io::write_table(
        &out.join("vertex_neighbours.parquet"),
        vec![
            ("min_dz_cm", Col::F64(c0)),
            ("max_dz_cm", Col::F64(c1)),
            ("n_true", Col::U64(d0)),
            ("n_found", Col::U64(d1)),
            ("n_merged", Col::U64(d2)),
            ("n_split", Col::U64(d3)),
        ],
    )?;

    // Hit residuals per layer and edge class.
    let mut h: [Vec<f64>; 6] = Default::default();
    let (mut hl, mut he, mut hn) = (vec![], vec![], vec![]);
    for layer in 0..10usize {
        for edge in [false, true] {
            let rows: Vec<_> = resid.iter().filter(|r| r.0 == layer && r.1 != edge).collect();
            let x: Vec<f64> = rows.iter().map(|r| r.2).collect();
            let y: Vec<f64> = rows.iter().map(|r| r.3).collect();
            hl.push(layer as u64);
            he.push(if edge { "edge" } else { "non_edge" }.to_string());
            hn.push(rows.len() as u64);
            let ((mx, rx), (my, ry)) = (mean_rms(&x), mean_rms(&y));
            for (k, v) in [mx, rx, half_width_68(&x), my, ry, half_width_68(&y)].into_iter().enumerate() {
                h[k].push(v);
            }
        }
    }
    let [h0, h1, h2, h3, h4, h5] = h;
    io::write_table(
        &out.join("hit_residuals.parquet"),
        vec![
            ("layer", Col::U64(hl)),
            ("class", Col::Str(he)),
            ("n", Col::U64(hn)),
            ("mean_x_um", Col::F64(h0)),
            ("rms_x_um", Col::F64(h1)),
            ("w68_x_um", Col::F64(h2)),
            ("mean_y_um", Col::F64(h3)),
            ("rms_y_um", Col::F64(h4)),
            ("w68_y_um", Col::F64(h5)),
        ],
    )?;
    let p = out.join("summary.json");
    std::fs::write(&p, s.to_json()).map_err(|source| ValidationError::Io { path: p, source })?;
    Ok(s)
}

/// Truth report of a run: reads the run's Parquet products (`run_dir`, as `quiver run` of
/// plans/pixel.toml writes them) and the dataset's truth (`truth_dir`, made by `quiver
/// generate`; its beam spot from `conditions/beamspot.arrow`), and writes
/// `efficiency.parquet`, `resolution.parquet`, `vertex_efficiency.parquet`,
/// `hit_residuals.parquet`, `summary.json` and `report.html` (plots, see
/// [`crate::html`]) into `output`. Events of the run missing in
/// the truth are an error.
pub fn report(run_dir: &Path, truth_dir: &Path, output: &Path) -> Result<Summary> {
    let bs = quiver_datasets::format::read_conditions(truth_dir)
        .map_err(|e| ValidationError::Data(format!("{}: reading the beam spot: {e}", truth_dir.display())))?
        .beam_spot;
    let cfg = Config { beam_spot: [bs.x, bs.y, bs.z], ..Config::default() };
    report_with(run_dir, truth_dir, output, &cfg)
}

/// [`report`] with explicit cuts (and beam spot).
pub fn report_with(run_dir: &Path, truth_dir: &Path, output: &Path, cfg: &Config) -> Result<Summary> {
    let events = read_events(run_dir, truth_dir)?;
    let results = events.iter().map(|(_, r, t)| analyze_event(r, t, cfg)).collect::<Result<Vec<_>>>()?;
    let mut s = summarize(&results, cfg, Some(output))?;
    // Truncated events bias every number above: the report says which capacities the run
    // reached, as the run summary did.
    s.capacities_reached = crate::capacity::read_run(run_dir)?;
    let c = &s.capacities_reached;
    io::write_table(
        &output.join("capacity_overflows.parquet"),
        vec![
            ("step", io::Col::Str(c.iter().map(|c| c.label.clone()).collect())),
            ("capacity", io::Col::Str(c.iter().map(|c| c.capacity.clone()).collect())),
            ("limit", io::Col::U64(c.iter().map(|c| c.limit).collect())),
            ("events", io::Col::U64(c.iter().map(|c| c.events).collect())),
            ("max_demanded", io::Col::F64(c.iter().map(|c| c.max_demanded.map_or(f64::NAN, |d| d as f64)).collect())),
            ("truncated", io::Col::U64(c.iter().map(|c| c.truncated).collect())),
        ],
    )?;
    let p = output.join("summary.json");
    std::fs::write(&p, s.to_json()).map_err(|source| ValidationError::Io { path: p, source })?;
    // The run's validation histograms (the `histograms` step of the default plan) travel
    // with the report.
    for name in ["histograms.parquet", "histograms.txt"] {
        let from = run_dir.join(name);
        if from.exists() {
            std::fs::copy(&from, output.join(name)).map_err(|e| ValidationError::io(output.join(name), e))?;
        }
    }
    crate::html::write_report_html(output, &s)?;
    Ok(s)
}

/// The run's products and the truth of every event of the run, in event order (for custom
/// studies with [`analyze_event`]). Events of the run missing in the truth are an error.
pub fn read_events(run_dir: &Path, truth_dir: &Path) -> Result<Vec<(u32, RecoEvent, TruthEvent)>> {
    let reco = io::read_run(run_dir)?;
    let mut truth = io::read_truth(truth_dir)?;
    reco.into_iter()
        .map(|(e, r)| {
            let t = truth.remove(&e).ok_or_else(|| ValidationError::Data(format!("event {e} of the run has no truth in {}", truth_dir.display())))?;
            Ok((e, r, t))
        })
        .collect()
}
