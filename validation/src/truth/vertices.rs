//! Vertices against the truth: reconstructable true vertices found, merged, split; fake
//! reco vertices.

use std::collections::{BTreeMap, HashMap};

use super::{
    Config, EventResult, RecoEvent, RecoVertex, TruthEvent, TruthParticle, TruthVertex,
    VertexResult, LOOSE,
};

/// The vertex part of [`super::analyze_event`] (`matched`: each track's particle): the
/// reconstructable vertices (from the event's loose tracks) against `vertices`, the faithful
/// chain's or a second vertex finder's.
pub(super) fn analyze(
    reco: &RecoEvent,
    vertices: &[RecoVertex],
    truth: &TruthEvent,
    cfg: &Config,
    matched: &[Option<u32>],
    by_id: &HashMap<u32, &TruthParticle>,
    r: &mut EventResult,
) {
    let true_vertex_of_track: Vec<Option<u32>> = reco
        .tracks
        .iter()
        .zip(matched)
        .map(|(t, m)| {
            let ok = t.quality >= LOOSE
                && t.hits.len() >= cfg.vertex_track_min_hits
                && t.pt >= cfg.vertex_track_min_pt;
            m.filter(|_| ok)
                .and_then(|pid| by_id.get(&pid))
                .filter(|p| p.process == 0 && p.vertex >= 0)
                .map(|p| p.vertex as u32)
        })
        .collect();
    let mut n_reco_tracks: BTreeMap<u32, usize> = BTreeMap::new();
    for v in true_vertex_of_track.iter().flatten() {
        *n_reco_tracks.entry(*v).or_default() += 1;
    }
    let main: Vec<Option<u32>> = vertices
        .iter()
        .map(|rv| {
            let mut c: BTreeMap<u32, usize> = BTreeMap::new();
            for &t in &rv.tracks {
                if let Some(Some(v)) = true_vertex_of_track.get(t as usize) {
                    *c.entry(*v).or_default() += 1;
                }
            }
            c.into_iter()
                .max_by_key(|&(v, n)| (n, std::cmp::Reverse(v)))
                .map(|x| x.0)
        })
        .collect();
    r.fake_vertices = main.iter().filter(|m| m.is_none()).count();
    // Reco vertex of each track.
    let mut vertex_of_track: HashMap<u32, usize> = HashMap::new();
    for (i, rv) in vertices.iter().enumerate() {
        for &t in &rv.tracks {
            vertex_of_track.insert(t, i);
        }
    }
    let reconstructable: Vec<&TruthVertex> = truth
        .vertices
        .iter()
        .filter(|v| n_reco_tracks.get(&v.id).copied().unwrap_or(0) >= cfg.vertex_min_tracks)
        .collect();
    let separations = separations(
        reco,
        &true_vertex_of_track,
        &reconstructable,
        &n_reco_tracks,
    );
    for tv in &reconstructable {
        let n = n_reco_tracks[&tv.id];
        let nearest = reconstructable
            .iter()
            .filter(|o| o.id != tv.id)
            .map(|o| (o.z - tv.z).abs() as f64)
            .fold(f64::INFINITY, f64::min);
        let (separation, smaller_partner) = separations[&tv.id];
        let zt = (tv.z - cfg.beam_spot[2]) as f64;
        let mine: Vec<usize> = (0..vertices.len())
            .filter(|&i| main[i] == Some(tv.id))
            .collect();
        let best = mine.iter().copied().min_by(|&a, &b| {
            ((vertices[a].z as f64 - zt).abs()).total_cmp(&(vertices[b].z as f64 - zt).abs())
        });
        let (found, dz, pull) = match best {
            Some(b) => {
                let dz = vertices[b].z as f64 - zt;
                let sigma = 1.0 / (vertices[b].weight as f64).sqrt();
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
            c.into_iter()
                .max_by_key(|&(v, n)| (n, std::cmp::Reverse(v)))
                .is_some_and(|(rv, _)| main[rv].is_some_and(|m| m != tv.id))
        };
        r.vertices.push(VertexResult {
            tracks: n,
            found,
            merged,
            split,
            dz,
            pull,
            nearest_dz: nearest,
            separation,
            smaller_partner,
        });
    }
}

/// Per reconstructable vertex, its separation from the least separated other one and whether
/// it has fewer tracks ([`VertexResult::separation`], [`VertexResult::smaller_partner`]).
fn separations(
    reco: &RecoEvent,
    true_vertex_of_track: &[Option<u32>],
    reconstructable: &[&TruthVertex],
    n_reco_tracks: &BTreeMap<u32, usize>,
) -> BTreeMap<u32, (f64, bool)> {
    // Σ 1/σ²(zip) of each true vertex's reconstructable tracks: its z resolution with the
    // tracks' own errors is 1/√W.
    let mut weight: BTreeMap<u32, f64> = BTreeMap::new();
    for (t, v) in reco.tracks.iter().zip(true_vertex_of_track) {
        if let Some(v) = v {
            *weight.entry(*v).or_default() += 1.0 / t.cov[14] as f64;
        }
    }
    let key = |v: &TruthVertex| (n_reco_tracks[&v.id], std::cmp::Reverse(v.id));
    reconstructable
        .iter()
        .map(|tv| {
            // |Δz| in units of the two vertices' combined resolution; this vertex is the one
            // a merge would lose when it has fewer tracks (ties: the higher id, as `main`
            // picks the lower).
            let least = reconstructable
                .iter()
                .filter(|o| o.id != tv.id)
                .map(|o| {
                    let s2 = 1.0 / weight[&tv.id] + 1.0 / weight[&o.id];
                    let sep = (o.z - tv.z).abs() as f64 / s2.sqrt();
                    (sep, key(tv) < key(o))
                })
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .unwrap_or((f64::INFINITY, false));
            (tv.id, least)
        })
        .collect()
}
