//! Rec hit residuals against the sim hits.

use std::collections::HashMap;

use super::{layer_of, HitResidual, RecoEvent, TruthEvent};

/// Each rec hit with a particle minus the nearest sim hit of that particle on its module,
/// local x and y in µm (`hp`: each hit's particle).
pub(super) fn hit_residuals(
    reco: &RecoEvent,
    truth: &TruthEvent,
    hp: &[Option<u32>],
) -> Vec<HitResidual> {
    let mut sim: HashMap<(u16, u32), Vec<(f32, f32)>> = HashMap::new();
    for s in &truth.simhits {
        sim.entry((s.module, s.particle))
            .or_default()
            .push((s.lx, s.ly));
    }
    let mut out = Vec::new();
    for (h, p) in reco.hits.iter().zip(hp) {
        let (Some(p), Some(layer)) = (p, layer_of(h.module)) else {
            continue;
        };
        let Some(cands) = sim.get(&(h.module, *p)) else {
            continue;
        };
        let near = cands
            .iter()
            .map(|&(x, y)| ((h.x_local - x) as f64, (h.y_local - y) as f64))
            .min_by(|a, b| (a.0 * a.0 + a.1 * a.1).total_cmp(&(b.0 * b.0 + b.1 * b.1)))
            .unwrap();
        out.push(HitResidual {
            layer,
            non_edge: h.size_x > 0 && h.size_y > 0,
            dx_um: near.0 * 1e4,
            dy_um: near.1 * 1e4,
        });
    }
    out
}
