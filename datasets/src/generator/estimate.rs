//! What the reconstruction will make of an event's digis, estimated by the generator:
//! calibrated charge (the reconstruction's formula, `quiver_formats::calibration`) and a
//! cluster count (8-connected pixel groups above the reference's charge cut).

use super::*;

/// Charge in electrons the reconstruction computes from an ADC (the calibration's formula), or `None` for a dead or
/// noisy column.
pub fn calibrated_electrons(gains: &GainCalibration, d: &Digi) -> Option<i32> {
    let (ped, gain, dead, noisy) = gains.ped_and_gain(d.module, d.col, d.row);
    if dead || noisy {
        return None;
    }
    // The reconstruction's formula and constants, so the estimate agrees with it exactly.
    let (g, o) = calibration::run2_constants(d.module);
    Some(calibration::electrons(
        d.adc as u16,
        ped,
        gain,
        g,
        o,
        calibration::MIN_ELECTRONS,
    ))
}

/// Estimated cluster count of an event: 8-connected pixel groups per module whose calibrated
/// charge passes the reference cut (> 2000 e on BPix L1, > 4000 e elsewhere). `digis` must be
/// sorted by module (as `Event::digis` is).
pub fn estimate_clusters(gains: &GainCalibration, digis: &[Digi]) -> usize {
    // Per-thread buffers; the grid is left all-empty after every module.
    thread_local! {
        static BUFS: std::cell::RefCell<ClusterBufs> = std::cell::RefCell::new(ClusterBufs::default());
    }
    let mut b = BUFS.with(|b| std::mem::take(&mut *b.borrow_mut()));
    if b.grid.len() != 160 * 416 {
        b.grid = vec![u32::MAX; 160 * 416];
    }
    let n = count_clusters(gains, digis, &mut b);
    BUFS.with(|c| *c.borrow_mut() = b);
    n
}

#[derive(Default)]
pub(super) struct ClusterBufs {
    pub(super) grid: Vec<u32>,
    pub(super) q: Vec<i64>,
    pub(super) parent: Vec<u32>,
    pub(super) charge: Vec<i64>,
}

pub(super) fn count_clusters(
    gains: &GainCalibration,
    digis: &[Digi],
    b: &mut ClusterBufs,
) -> usize {
    let ClusterBufs {
        grid,
        q,
        parent,
        charge,
    } = b;
    let mut n = 0;
    let mut start = 0;
    while start < digis.len() {
        let m = digis[start].module;
        let mut end = start;
        while end < digis.len() && digis[end].module == m {
            end += 1;
        }
        let px = &digis[start..end];
        parent.clear();
        q.clear();
        for (i, d) in px.iter().enumerate() {
            parent.push(i as u32);
            q.push(calibrated_electrons(gains, d).map(i64::from).unwrap_or(-1));
            grid[d.row as usize * 416 + d.col as usize] = i as u32;
        }
        fn find(p: &mut [u32], mut i: u32) -> u32 {
            while p[i as usize] != i {
                p[i as usize] = p[p[i as usize] as usize];
                i = p[i as usize];
            }
            i
        }
        for (i, d) in px.iter().enumerate() {
            if q[i] < 0 {
                continue;
            }
            for (dr, dc) in [(-1i32, -1i32), (-1, 0), (-1, 1), (0, -1)] {
                let (r, c) = (d.row as i32 + dr, d.col as i32 + dc);
                if !(0..160).contains(&r) || !(0..416).contains(&c) {
                    continue;
                }
                let j = grid[r as usize * 416 + c as usize];
                if j != u32::MAX && q[j as usize] >= 0 {
                    let (a, b) = (find(parent, i as u32), find(parent, j));
                    if a != b {
                        parent[a.max(b) as usize] = a.min(b);
                    }
                }
            }
        }
        charge.clear();
        charge.resize(px.len(), 0);
        for (i, &qi) in q.iter().enumerate() {
            if qi >= 0 {
                let r = find(parent, i as u32);
                charge[r as usize] += qi;
            }
        }
        let cut = if m < 96 { 2000 } else { 4000 };
        n += (0..px.len())
            .filter(|&i| q[i] >= 0 && parent[i] as usize == i && charge[i] > cut)
            .count();
        for d in px {
            grid[d.row as usize * 416 + d.col as usize] = u32::MAX;
        }
        start = end;
    }
    n
}
