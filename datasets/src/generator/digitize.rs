//! Digitisation: deposits summed per pixel, thresholds, noise and the 8-bit ADC consistent
//! with the written gains.

use super::*;

impl Generator<'_> {
    /// Sums deposits per pixel, adds noise, applies thresholds, dead columns and the ADC.
    pub(super) fn digitize(
        &self,
        rng: &mut Xoshiro256PlusPlus,
        ev: &mut Event,
        unsorted: &[Dep],
        sorted: &mut Vec<Dep>,
        counts: &mut Vec<u32>,
    ) {
        let p = &self.params;
        sort_deposits(unsorted, sorted, counts, self.geom.modules.len());
        let deps = &sorted[..];
        let mut i = 0;
        let mut parts: Vec<(u32, f32)> = Vec::with_capacity(8);
        while i < deps.len() {
            let key = deps[i].key;
            let mut j = i;
            let mut total = 0.0f32;
            parts.clear();
            while j < deps.len() && deps[j].key == key {
                let d = deps[j];
                total += d.q;
                match parts.last_mut() {
                    Some(last) if last.0 == d.particle => last.1 += d.q,
                    _ => parts.push((d.particle, d.q)),
                }
                j += 1;
            }
            i = j;
            let module = (key >> 17) as u16;
            let col = ((key >> 8) & 0x1FF) as u16;
            let row = (key & 0xFF) as u16;
            let layer = self.geom.modules[module as usize].layer as usize;
            let barrel = layer < 4;
            let thr = p.thresholds[self.thr_index[layer]]
                + p.threshold_sigma[(!barrel) as usize] * gauss(rng);
            let q = total as f64 + p.noise * gauss(rng);
            if q <= thr {
                continue;
            }
            let (ped, gain, dead, _noisy) = self.gains.ped_and_gain(module, col, row);
            if dead {
                continue;
            }
            let (g, o) = if module < 96 {
                (50.0, -670.0)
            } else {
                (47.0, -60.0)
            };
            let adc = (((q - o) / g) / gain as f64 + ped as f64)
                .round()
                .clamp(0.0, 255.0) as u8;
            ev.digis.push(Digi {
                module,
                row,
                col,
                adc,
                electrons: q as f32,
            });
            for &(pid, e) in &parts {
                ev.pixel_truth.push(PixelTruth {
                    module,
                    row,
                    col,
                    particle: pid,
                    electrons: e,
                    fraction: e / total,
                });
            }
        }
    }
}

/// Orders deposits by (pixel key, particle), keeping the generation order of equal pairs, so
/// the per-pixel f32 sums are fixed by the event alone (not by a sort algorithm's tie order).
/// A stable counting sort on the module (the key's top bits) leaves short runs, each finished
/// by a stable comparison sort: much cheaper than sorting the whole event at once.
pub(super) fn sort_deposits(
    deps: &[Dep],
    out: &mut Vec<Dep>,
    counts: &mut Vec<u32>,
    n_modules: usize,
) {
    counts.clear();
    counts.resize(n_modules + 1, 0);
    for d in deps {
        counts[(d.key >> 17) as usize + 1] += 1;
    }
    for m in 0..n_modules {
        counts[m + 1] += counts[m];
    }
    out.clear();
    out.resize(
        deps.len(),
        Dep {
            key: 0,
            particle: 0,
            q: 0.0,
        },
    );
    // counts[m] is the next free slot of module m; after the scatter it is where m ends.
    for d in deps {
        let m = (d.key >> 17) as usize;
        out[counts[m] as usize] = *d;
        counts[m] += 1;
    }
    let mut start = 0;
    for &end in &counts[..n_modules] {
        let run = &mut out[start..end as usize];
        if run.len() > 1 {
            run.sort_by_key(|d| (d.key as u64) << 32 | d.particle as u64);
        }
        start = end as usize;
    }
}
