//! Cluster charge cut and hit offsets (reference `gpuClusterChargeCut.h`,
//! `fillHitsModuleStart`).

use super::{
    check_len, LocalError, INVALID_MODULE, MAX_CLUSTERS_PER_MODULE, MAX_NUM_CLUSTERS,
    MAX_NUM_MODULES,
};

/// Parameters of the charge cut.
#[derive(Clone, Debug, PartialEq)]
pub struct ChargeCutConfig {
    /// Clusters kept per module; pixels of clusters numbered at or above are dropped.
    /// 1..=65535. Default 1024 (`MaxNumClustersPerModules`).
    pub max_clusters_per_module: u32,
    /// Modules with detIndex below this use `min_charge_l1`. Default 96 (BPix L1).
    pub l1_modules: u16,
    /// A layer-1 cluster is kept if its charge is strictly above this, electrons. Default 2000.
    pub min_charge_l1: i32,
    /// Other clusters are kept if their charge is strictly above this, electrons. Default 4000.
    pub min_charge: i32,
    /// Cap of every hit offset (`MaxNumClusters`). Default 49 152.
    pub max_num_clusters: u32,
}

impl Default for ChargeCutConfig {
    fn default() -> Self {
        Self {
            max_clusters_per_module: MAX_CLUSTERS_PER_MODULE,
            l1_modules: 96,
            min_charge_l1: 2000,
            min_charge: 4000,
            max_num_clusters: MAX_NUM_CLUSTERS,
        }
    }
}

/// Digi and cluster columns after the cut.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChargeCutOutput {
    /// Module per digi; pixels of rejected clusters get 9999.
    pub module_ind: Vec<u16>,
    /// Dense cluster number per digi; pixels of rejected clusters get 9999.
    pub clus: Vec<i32>,
    /// Surviving clusters per module id (2000 entries), at most `max_clusters_per_module`
    /// (the reference keeps a capped module's count above the cap when all its kept
    /// clusters pass; the hit offsets are the same, see [`hits_module_start`]).
    pub n_clusters_in_module: Vec<u32>,
    /// `clusModuleStart` (2001 entries): prefix sum of `min(1024, count)` over module ids,
    /// each entry capped at `max_num_clusters`; the hit offsets.
    pub clus_module_start: Vec<u32>,
    /// `clus_module_start[2000]`: hits of the event.
    pub n_clusters: u32,
    /// Modules with more clusters than `max_clusters_per_module` (clusters at or above it
    /// dropped; their published count is the cap, so that every hit slot has a cluster).
    pub truncated_modules: u32,
    /// Clusters dropped by that cap.
    pub truncated_clusters: u64,
    /// The most clusters found in one module.
    pub max_clusters_in_module: u32,
}

/// Applies the cluster charge cut to one event.
///
/// Inputs are the calibrated `module_ind`/`adc` (electrons) and the [`Clusters`] columns
/// (`clus`, `module_start`, `n_clusters_in_module`). Pixels whose cluster number is outside
/// the module's clusters (never clustered, e.g. past the 4000-pixel cap) are dropped like
/// rejected ones; the reference would index out of bounds there.
///
/// [`Clusters`]: super::Clusters
///
/// ```
/// use quiver_reco::local::charge_cut::{charge_cut, ChargeCutConfig};
/// // Module 200 with two clusters: 3000 e (rejected, > 4000 needed) and 5000 e.
/// let mut n_in_module = vec![0u32; 2000];
/// n_in_module[200] = 2;
/// let out = charge_cut(&[200, 200, 200], &[3000, 2500, 2500], &[0, 1, 1], &[1, 0],
///                      &n_in_module, &ChargeCutConfig::default()).unwrap();
/// assert_eq!(out.clus, vec![9999, 0, 0]);
/// assert_eq!(out.module_ind, vec![9999, 200, 200]);
/// assert_eq!((out.n_clusters, out.clus_module_start[201]), (1, 1));
/// ```
pub fn charge_cut(
    module_ind: &[u16],
    adc: &[u16],
    clus: &[i32],
    module_start: &[u32],
    n_clusters_in_module: &[u32],
    cfg: &ChargeCutConfig,
) -> Result<ChargeCutOutput, LocalError> {
    let n = module_ind.len();
    let n_runs = check_inputs(
        module_ind,
        adc,
        clus,
        module_start,
        n_clusters_in_module,
        cfg,
    )?;
    let max_per_module = cfg.max_clusters_per_module;
    let mut ev = EventCut {
        id: module_ind.to_vec(),
        clus: clus.to_vec(),
        ncl: n_clusters_in_module.to_vec(),
        truncated_modules: 0,
        truncated_clusters: 0,
    };
    // Scratch for the largest module this event holds (at most the cap).
    let max_found = ev.ncl.iter().copied().max().unwrap_or(0);
    let mut scratch = Scratch::new(max_found.min(max_per_module) as usize);
    for run in 0..n_runs {
        let first = module_start[1 + run] as usize;
        if first >= n {
            return Err(LocalError::ColumnLength {
                name: "module_start entry",
                got: first,
                expected: n,
            });
        }
        let this = ev.id[first];
        if this == INVALID_MODULE {
            continue; // cannot happen for runs from `clusterize`
        }
        if this as usize >= MAX_NUM_MODULES {
            return Err(LocalError::ModuleOutOfRange {
                digi: first,
                module: this as u32,
                limit: MAX_NUM_MODULES,
            });
        }
        // The pixels of this run: valid digis from `first` until another module starts.
        let id = &ev.id;
        let run_end = (first..n)
            .find(|&i| id[i] != INVALID_MODULE && id[i] != this)
            .unwrap_or(n);
        ev.cut_run(this, first..run_end, adc, cfg, &mut scratch);
    }

    let clus_module_start = hits_module_start(&ev.ncl, max_per_module, cfg.max_num_clusters);
    let n_clusters = clus_module_start[MAX_NUM_MODULES];
    Ok(ChargeCutOutput {
        module_ind: ev.id,
        clus: ev.clus,
        n_clusters_in_module: ev.ncl,
        clus_module_start,
        n_clusters,
        truncated_modules: ev.truncated_modules,
        truncated_clusters: ev.truncated_clusters,
        max_clusters_in_module: max_found,
    })
}

/// Checks the column lengths and the cap; returns the number of module runs.
fn check_inputs(
    module_ind: &[u16],
    adc: &[u16],
    clus: &[i32],
    module_start: &[u32],
    n_clusters_in_module: &[u32],
    cfg: &ChargeCutConfig,
) -> Result<usize, LocalError> {
    let n = module_ind.len();
    check_len("adc", adc.len(), n)?;
    check_len("clus", clus.len(), n)?;
    check_len(
        "n_clusters_in_module",
        n_clusters_in_module.len(),
        MAX_NUM_MODULES,
    )?;
    let n_runs = *module_start.first().ok_or(LocalError::ColumnLength {
        name: "module_start",
        got: 0,
        expected: 1,
    })? as usize;
    check_len("module_start", module_start.len(), n_runs + 1)?;
    let max_per_module = cfg.max_clusters_per_module;
    if max_per_module == 0 || max_per_module > u16::MAX as u32 {
        return Err(LocalError::Config(format!(
            "max_clusters_per_module {max_per_module} not in 1..=65535"
        )));
    }
    Ok(n_runs)
}

/// Per-cluster scratch of one module: charge, pass flag, new number (prefix scan).
struct Scratch {
    charge: Vec<i32>,
    ok: Vec<u8>,
    newclus: Vec<u32>,
}

impl Scratch {
    fn new(n: usize) -> Self {
        Scratch {
            charge: vec![0; n],
            ok: vec![0; n],
            newclus: vec![0; n],
        }
    }
}

/// The event's columns as the cut rewrites them, and what the cap truncated.
struct EventCut {
    id: Vec<u16>,
    clus: Vec<i32>,
    ncl: Vec<u32>,
    truncated_modules: u32,
    truncated_clusters: u64,
}

impl EventCut {
    /// Cuts the clusters of module `this`, whose pixels are `pixels`: caps its clusters,
    /// sums their charge, drops those at or below the cut and renumbers the rest.
    fn cut_run(
        &mut self,
        this: u16,
        pixels: std::ops::Range<usize>,
        adc: &[u16],
        cfg: &ChargeCutConfig,
        s: &mut Scratch,
    ) {
        let (id, clus) = (&mut self.id, &mut self.clus);
        let inv = INVALID_MODULE as i32;
        let max_per_module = cfg.max_clusters_per_module;
        let mut nclus = self.ncl[this as usize];
        if nclus == 0 {
            return;
        }
        if nclus > max_per_module {
            self.truncated_modules += 1;
            self.truncated_clusters += (nclus - max_per_module) as u64;
            for i in pixels.clone() {
                if id[i] != INVALID_MODULE && clus[i] >= max_per_module as i32 {
                    id[i] = INVALID_MODULE;
                    clus[i] = inv;
                }
            }
            nclus = max_per_module;
        }
        let nc = nclus as usize;
        s.charge[..nc].fill(0);
        for i in pixels.clone() {
            if id[i] == INVALID_MODULE {
                continue;
            }
            let c = clus[i];
            if (0..nclus as i32).contains(&c) {
                s.charge[c as usize] = s.charge[c as usize].wrapping_add(adc[i] as i32);
            } else {
                id[i] = INVALID_MODULE;
                clus[i] = inv;
            }
        }
        let cut = if this < cfg.l1_modules {
            cfg.min_charge_l1
        } else {
            cfg.min_charge
        };
        let mut sum = 0u32;
        for c in 0..nc {
            s.ok[c] = (s.charge[c] > cut) as u8;
            sum += s.ok[c] as u32;
            s.newclus[c] = sum; // inclusive prefix scan
        }
        if sum == nclus {
            // Every cluster passes: numbers unchanged. The reference keeps a capped module's
            // count above the cap here; the count published is the clusters kept, so that
            // no hit slot is left without a cluster (a row of zeros).
            self.ncl[this as usize] = nclus;
            return;
        }
        self.ncl[this as usize] = sum;
        for c in 0..nc {
            if s.ok[c] == 0 {
                s.newclus[c] = INVALID_MODULE as u32 + 1;
            }
        }
        for i in pixels {
            if id[i] == INVALID_MODULE {
                continue;
            }
            clus[i] = s.newclus[clus[i] as usize] as i32 - 1;
            if clus[i] == inv {
                id[i] = INVALID_MODULE;
            }
        }
    }
}

/// `fillHitsModuleStart`: `[0] = 0`, `[i+1] = Σ_{k≤i} min(max_per_module, n[k])`, every
/// entry capped at `max_hits`.
///
/// ```
/// use quiver_reco::local::charge_cut::hits_module_start;
/// assert_eq!(hits_module_start(&[2, 2000, 1], 1024, 1026), vec![0, 2, 1026, 1026]);
/// ```
pub fn hits_module_start(
    n_clusters_in_module: &[u32],
    max_per_module: u32,
    max_hits: u32,
) -> Vec<u32> {
    let mut out = Vec::with_capacity(n_clusters_in_module.len() + 1);
    out.push(0u32);
    let mut sum = 0u32;
    for &c in n_clusters_in_module {
        sum = sum.saturating_add(c.min(max_per_module));
        out.push(sum);
    }
    for v in &mut out {
        *v = (*v).min(max_hits);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::clusterize::{clusterize, ClusterizeConfig};

    fn cut(ids: &[u16], xx: &[u16], yy: &[u16], adc: &[u16]) -> ChargeCutOutput {
        let c = clusterize(ids, xx, yy, &ClusterizeConfig::default()).unwrap();
        charge_cut(
            ids,
            adc,
            &c.clus,
            &c.module_start,
            &c.n_clusters_in_module,
            &ChargeCutConfig::default(),
        )
        .unwrap()
    }

    #[test]
    fn layer_thresholds_are_strict_and_per_layer() {
        // Module 95 (L1): 2000 e rejected, 2001 kept. Module 96 (L2): 4000 rejected, 4001 kept.
        let ids = [95, 95, 96, 96];
        let (xx, yy) = ([10, 50, 10, 50], [10, 50, 10, 50]);
        let out = cut(&ids, &xx, &yy, &[2000, 2001, 4000, 4001]);
        assert_eq!(out.module_ind, vec![9999, 95, 9999, 96]);
        assert_eq!(out.clus, vec![9999, 0, 9999, 0]);
        assert_eq!(
            (out.n_clusters_in_module[95], out.n_clusters_in_module[96]),
            (1, 1)
        );
        assert_eq!(out.n_clusters, 2);
        assert_eq!(&out.clus_module_start[95..98], &[0, 1, 2]);
    }

    #[test]
    fn dense_renumbering_and_hit_offsets() {
        // Module 300: clusters 0 (kept), 1 (rejected), 2 (kept, two pixels) → 0, –, 1.
        let ids = [300, 300, 300, 300, 9999, 500];
        let xx = [1, 20, 40, 41, 0, 3];
        let yy = [1, 20, 40, 40, 0, 3];
        let out = cut(&ids, &xx, &yy, &[5000, 100, 2500, 2500, 0, 9000]);
        assert_eq!(out.clus, vec![0, 9999, 1, 1, -9999, 0]);
        assert_eq!(out.n_clusters_in_module[300], 2);
        assert_eq!(out.clus_module_start[300], 0);
        assert_eq!(out.clus_module_start[301], 2);
        assert_eq!(out.clus_module_start[501], 3);
        assert_eq!(out.clus_module_start[2000], 3);
    }

    #[test]
    fn cluster_cap_per_module() {
        // 1100 isolated pixels of 5000 e in module 700: clusters ≥ 1024 dropped; all the rest
        // pass. The published count is the 1024 kept (the reference keeps 1100 here; its
        // offsets use 1024 all the same), and the truncation is recorded.
        let n = 1100;
        let ids = vec![700u16; n];
        let xx: Vec<u16> = (0..n).map(|i| (2 * (i % 80)) as u16).collect();
        let yy: Vec<u16> = (0..n).map(|i| (2 * (i / 80)) as u16).collect();
        let out = cut(&ids, &xx, &yy, &vec![5000; n]);
        assert_eq!(out.module_ind.iter().filter(|&&m| m == 700).count(), 1024);
        assert!(out.clus[1024..].iter().all(|&c| c == 9999));
        assert_eq!(out.n_clusters_in_module[700], 1024);
        assert_eq!(out.n_clusters, 1024);
        assert_eq!(
            (
                out.truncated_modules,
                out.truncated_clusters,
                out.max_clusters_in_module
            ),
            (1, 76, 1100)
        );
        // With one low cluster the count is renumbered to 1023.
        let mut adc = vec![5000u16; n];
        adc[0] = 10;
        let out = cut(&ids, &xx, &yy, &adc);
        assert_eq!(out.n_clusters_in_module[700], 1023);
        assert_eq!(out.clus[1], 0);
    }

    #[test]
    fn unclustered_pixels_past_the_cap_are_dropped() {
        let n = 4003;
        let ids = vec![900u16; n];
        let xx: Vec<u16> = (0..n).map(|i| (i % 160) as u16).collect();
        let yy: Vec<u16> = (0..n).map(|i| (i / 160) as u16).collect();
        let out = cut(&ids, &xx, &yy, &vec![100; n]);
        // One big cluster of 4000 pixels is kept; the 3 pixels past the cap are dropped.
        assert_eq!(out.n_clusters_in_module[900], 1);
        assert!(out.module_ind[4000..].iter().all(|&m| m == 9999));
        assert!(out.clus[..4000].iter().all(|&c| c == 0));
    }

    #[test]
    fn offsets_are_capped() {
        let counts = vec![1024u32; 2000];
        let s = hits_module_start(&counts, 1024, 49152);
        assert_eq!(s[48], 49152);
        assert_eq!(s[49], 49152);
        assert_eq!(s[2000], 49152);
        assert_eq!(s[1], 1024);
    }
}
