//! Hit → particle and track → particle matching.

use std::collections::HashMap;

use super::{RecoEvent, TruthEvent};
use crate::error::{Result, ValidationError};

/// The particle of every hit (index = hit index), by charge fraction.
///
/// ```
/// use quiver_validation::truth::*;
/// let reco = RecoEvent {
///     digis: vec![RecoDigi { row: 1, col: 1, module: 5, cluster: 0 }, RecoDigi { row: 1, col: 2, module: 5, cluster: 0 }],
///     hits: vec![RecHit { module: 5, ..Default::default() }],
///     ..Default::default()
/// };
/// let px = |col, particle, electrons| TruthPixel { module: 5, row: 1, col, particle, electrons };
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
            return Err(ValidationError::Data(format!(
                "hit {i}: module {} after module {}: hits are not ordered by module",
                h.module,
                prev.unwrap()
            )));
        } else {
            k = 0;
        }
        prev = Some(h.module);
        hit_of.insert((h.module, k), i);
    }
    let key = |m: u16, r: u16, c: u16| (m as u64) << 32 | (r as u64) << 16 | c as u64;
    let mut deposits: HashMap<u64, Vec<(u32, f32)>> = HashMap::with_capacity(truth.pixels.len());
    for p in &truth.pixels {
        deposits
            .entry(key(p.module, p.row, p.col))
            .or_default()
            .push((p.particle, p.electrons));
    }
    let mut sums: Vec<Vec<(u32, f64)>> = vec![Vec::new(); reco.hits.len()];
    for d in &reco.digis {
        if d.module == 9999 || d.cluster < 0 || d.cluster == 9999 {
            continue;
        }
        let Some(&h) = hit_of.get(&(d.module, d.cluster)) else {
            continue;
        };
        for &(p, e) in deposits
            .get(&key(d.module, d.row, d.col))
            .map(|v| v.as_slice())
            .unwrap_or(&[])
        {
            match sums[h].iter_mut().find(|s| s.0 == p) {
                Some(s) => s.1 += e as f64,
                None => sums[h].push((p, e as f64)),
            }
        }
    }
    let noise: std::collections::HashSet<u32> = truth
        .particles
        .iter()
        .filter(|p| p.process == 2)
        .map(|p| p.id)
        .collect();
    Ok(sums
        .iter()
        .map(|s| {
            let best =
                s.iter()
                    .filter(|x| x.1 > 0.0)
                    .fold(None::<(u32, f64)>, |b, &(p, e)| match b {
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
    counts
        .into_iter()
        .max_by_key(|&(p, n)| (n, std::cmp::Reverse(p)))
}
