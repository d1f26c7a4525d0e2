//! Module runs and pixel clustering (reference `gpuClustering.h`:
//! `countModules`, `findClus`).
//!
//! Two implementations with identical output, chosen by [`ClusterAlgorithm`]:
//! - [`ClusterAlgorithm::Faithful`]: the reference's column histogram, neighbour lists and
//!   alternating min-propagation / pointer-jumping passes;
//! - [`ClusterAlgorithm::UnionFind`]: a pixel grid and union–find with the smaller index as
//!   root, which yields the same "lowest digi index" roots in one sweep.
//!
//! Output conventions (as the reference): cluster numbers are per module, assigned to roots in
//! ascending digi index; invalid digis inside a module run get −9999; digis outside every run
//! keep their own index (`countModules` initialises `clus[i] = i`), and so do pixels past the
//! 4000-word cap of a run (never clustered; the charge cut drops them).

use super::{check_len, LocalError, INVALID_MODULE, MAX_NUM_MODULES, MAX_PIX_IN_MODULE};
use quiver_formats::topology::{NUM_COLS_IN_MODULE, NUM_ROWS_IN_MODULE};

/// Which connected-component algorithm to run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClusterAlgorithm {
    /// Port of the reference's label propagation.
    #[default]
    Faithful,
    /// Grid + union–find (same output, fewer passes).
    UnionFind,
}

/// Parameters of the clustering step.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterizeConfig {
    /// Connected-component algorithm. Default [`ClusterAlgorithm::Faithful`].
    pub algorithm: ClusterAlgorithm,
    /// Largest word span of one module run that is clustered (`maxPixInModule`); the rest of
    /// the run is left unclustered. Must be in 1..65535. Default 4000.
    pub max_pix_in_module: usize,
}

impl Default for ClusterizeConfig {
    fn default() -> Self {
        Self {
            algorithm: ClusterAlgorithm::Faithful,
            max_pix_in_module: MAX_PIX_IN_MODULE,
        }
    }
}

/// Clusters of one event (before the charge cut).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Clusters {
    /// Per digi: cluster number within its module, −9999 for invalid digis in a run.
    pub clus: Vec<i32>,
    /// `[0]` = number of module runs, `[1 + k]` = first digi of run k (length 1 + runs).
    pub module_start: Vec<u32>,
    /// Clusters per module id (length 2000).
    pub n_clusters_in_module: Vec<u32>,
    /// Module id of run k.
    pub module_id: Vec<u32>,
    /// Number of module runs ("modules with digis"), at most 2000.
    pub n_modules: u32,
    /// Module runs longer than `max_pix_in_module` (their extra digis are not clustered).
    pub truncated_runs: u32,
    /// Digis left unclustered by that cap.
    pub truncated_pixels: u64,
    /// The longest module run (digis, valid or not), what the cap had to hold.
    pub max_run_pixels: u32,
}

/// Finds the module runs and clusters of one event's digis.
///
/// All digis of a module must be contiguous (as in the reference, a module split over two
/// runs is clustered twice). Errors if the columns differ in length or a valid digi has a
/// module id ≥ 2000 or a pixel outside 160 × 416.
///
/// ```
/// use quiver_reco::local::clusterize::{clusterize, ClusterizeConfig};
/// // Module 7: two touching pixels and one apart; an invalid word in between.
/// let module = [7, 7, 9999, 7];
/// let (xx, yy) = ([10, 11, 0, 50], [20, 21, 0, 20]);
/// let c = clusterize(&module, &xx, &yy, &ClusterizeConfig::default()).unwrap();
/// assert_eq!(c.clus, vec![0, 0, -9999, 1]);
/// assert_eq!(c.n_clusters_in_module[7], 2);
/// assert_eq!((c.n_modules, c.module_id.clone()), (1, vec![7]));
/// ```
pub fn clusterize(
    module_ind: &[u16],
    xx: &[u16],
    yy: &[u16],
    cfg: &ClusterizeConfig,
) -> Result<Clusters, LocalError> {
    let n = module_ind.len();
    check_len("xx", xx.len(), n)?;
    check_len("yy", yy.len(), n)?;
    if n > i32::MAX as usize {
        return Err(LocalError::Config("more than 2^31 digis".into()));
    }
    if cfg.max_pix_in_module == 0 || cfg.max_pix_in_module >= u16::MAX as usize {
        return Err(LocalError::Config(format!(
            "max_pix_in_module {} not in 1..65535",
            cfg.max_pix_in_module
        )));
    }
    let runs = module_runs(module_ind, xx, yy, cfg.max_pix_in_module)?;
    // Every digi starts as its own cluster.
    let mut clus: Vec<i32> = (0..n as i32).collect();
    let n_modules = runs.len() as u32;
    let mut module_start = Vec::with_capacity(runs.len() + 1);
    module_start.push(n_modules);
    module_start.extend(runs.iter().map(|r| r.first as u32));

    let mut out = Clusters {
        clus: Vec::new(),
        module_start,
        n_clusters_in_module: vec![0; MAX_NUM_MODULES],
        module_id: Vec::with_capacity(n_modules as usize),
        n_modules,
        ..Default::default()
    };
    let mut uf = UnionFind::default();
    for &ModuleRun {
        first,
        end,
        full_end,
        module: this,
    } in &runs
    {
        out.max_run_pixels = out.max_run_pixels.max((full_end - first) as u32);
        if end < full_end {
            out.truncated_runs += 1;
            out.truncated_pixels += (full_end - end) as u64;
        }
        let span = Span {
            first,
            end,
            module: this,
            ids: module_ind,
            xx,
            yy,
        };
        let found = match cfg.algorithm {
            ClusterAlgorithm::Faithful => faithful(&span, &mut clus),
            ClusterAlgorithm::UnionFind => uf.run(&span, &mut clus),
        };
        out.n_clusters_in_module[this as usize] = found;
        out.module_id.push(this as u32);
    }
    out.clus = clus;
    Ok(out)
}

/// A module run of one event's digis: consecutive digis of one module, invalid words
/// between them included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleRun {
    /// Its first digi (event-local).
    pub first: usize,
    /// Where clustering stops: `full_end`, capped at `first + max_pix_in_module`.
    pub end: usize,
    /// The first valid digi of another module (or the event's end).
    pub full_end: usize,
    pub module: u16,
}

/// The module runs of one event's digis, as [`clusterize`] finds them (the reference's
/// `countModules`): a run starts at each valid digi whose previous valid digi belongs to
/// another module, at most `MAX_NUM_MODULES` runs. Checks the digis as `clusterize` does
/// (module id < 2000 and a pixel inside 160 × 416 for every valid digi). The GPU
/// `clusterize` prepares its launches with it.
///
/// ```
/// use quiver_reco::local::clusterize::{module_runs, ModuleRun};
/// let module = [7, 7, 9999, 7, 3];
/// let runs = module_runs(&module, &[1; 5], &[1; 5], 2).unwrap();
/// assert_eq!(runs, vec![ModuleRun { first: 0, end: 2, full_end: 4, module: 7 }, ModuleRun { first: 4, end: 5, full_end: 5, module: 3 }]);
/// assert!(module_runs(&[2000], &[0], &[0], 2).is_err());
/// ```
pub fn module_runs(
    module_ind: &[u16],
    xx: &[u16],
    yy: &[u16],
    max_pix_in_module: usize,
) -> Result<Vec<ModuleRun>, LocalError> {
    let n = module_ind.len();
    check_len("xx", xx.len(), n)?;
    check_len("yy", yy.len(), n)?;
    // Whether any valid digi is out of range first (a reduction that vectorises); which one
    // is the first, only then.
    let bad = module_ind
        .iter()
        .zip(xx)
        .zip(yy)
        .fold(false, |bad, ((&m, &x), &y)| {
            // `&`, `|`: no branch per digi.
            bad | ((m != INVALID_MODULE)
                & ((m as usize >= MAX_NUM_MODULES)
                    | (x >= NUM_ROWS_IN_MODULE)
                    | (y >= NUM_COLS_IN_MODULE)))
        });
    if bad {
        for i in 0..n {
            let m = module_ind[i];
            if m == INVALID_MODULE {
                continue;
            }
            if m as usize >= MAX_NUM_MODULES {
                return Err(LocalError::ModuleOutOfRange {
                    digi: i,
                    module: m as u32,
                    limit: MAX_NUM_MODULES,
                });
            }
            if xx[i] >= NUM_ROWS_IN_MODULE || yy[i] >= NUM_COLS_IN_MODULE {
                return Err(LocalError::PixelOutOfRange {
                    digi: i,
                    row: xx[i],
                    col: yy[i],
                });
            }
        }
    }
    // One pass: a run ends where the next begins (the first valid digi of another module),
    // also when that one is past the cap on runs and not kept.
    let mut runs: Vec<ModuleRun> = Vec::new();
    let mut open = false;
    let mut prev: Option<u16> = None;
    let close = |r: &mut ModuleRun, at: usize| {
        r.full_end = at;
        r.end = at.min(r.first + max_pix_in_module);
    };
    for (i, &m) in module_ind.iter().enumerate() {
        if m == INVALID_MODULE || prev == Some(m) {
            continue;
        }
        prev = Some(m);
        if open {
            close(runs.last_mut().expect("an open run"), i);
            open = false;
        }
        if runs.len() < MAX_NUM_MODULES {
            runs.push(ModuleRun {
                first: i,
                end: n,
                full_end: n,
                module: m,
            });
            open = true;
        }
    }
    if open {
        close(runs.last_mut().expect("an open run"), n);
    }
    Ok(runs)
}

struct Span<'a> {
    first: usize,
    end: usize,
    module: u16,
    ids: &'a [u16],
    xx: &'a [u16],
    yy: &'a [u16],
}

impl Span<'_> {
    fn valid(&self, i: usize) -> bool {
        self.ids[i] != INVALID_MODULE
    }
}

/// Number of column bins of the reference's histogram (one spare on each side).
const N_BINS: usize = NUM_COLS_IN_MODULE as usize + 2;

/// `findClus` for one run; returns the number of clusters.
fn faithful(s: &Span, clus: &mut [i32]) -> u32 {
    let (first, end) = (s.first, s.end);
    debug_assert!(s.ids[first] == s.module);
    // Column histogram; filling decrements the bin end, so a bin lists digis in descending
    // index order, as the reference's serial fill does.
    let mut off = [0u32; N_BINS + 1];
    for i in first..end {
        if s.valid(i) {
            off[s.yy[i] as usize + 1] += 1;
        }
    }
    for b in 0..N_BINS {
        off[b + 1] += off[b];
    }
    let size = off[N_BINS] as usize;
    let mut fill = off;
    let mut bins = vec![0u32; size];
    for i in first..end {
        if s.valid(i) {
            let b = s.yy[i] as usize + 1;
            fill[b] -= 1;
            bins[fill[b] as usize] = (i - first) as u32;
        }
    }
    // bins of column y are bins[off[y]..off[y+1]] (index shifted by one above).

    // Neighbour lists: later entries of the same column plus the whole next column, within
    // one row. The reference asserts at most 10; we keep all of them (no silent overflow).
    let mut nn_start = Vec::with_capacity(size + 1);
    let mut nn: Vec<u32> = Vec::with_capacity(size * 2);
    for j in 0..size {
        nn_start.push(nn.len() as u32);
        let i = bins[j] as usize + first;
        let be = s.yy[i] as usize + 1; // next column's bin
        let e = off[be + 1] as usize;
        for &pm in &bins[j + 1..e] {
            let m = pm as usize + first;
            if (s.xx[m] as i32 - s.xx[i] as i32).abs() <= 1 {
                nn.push(pm);
            }
        }
    }
    nn_start.push(nn.len() as u32);

    // Alternate min-propagation over neighbour pairs and pointer jumping to the root.
    let mut more = true;
    let mut nloops = 0u32;
    while more {
        if nloops % 2 == 1 {
            for &b in &bins {
                let i = b as usize + first;
                let mut m = clus[i];
                while m != clus[m as usize] {
                    m = clus[m as usize];
                }
                clus[i] = m;
            }
        } else {
            more = false;
            for (k, &b) in bins.iter().enumerate() {
                let i = b as usize + first;
                for &l in &nn[nn_start[k] as usize..nn_start[k + 1] as usize] {
                    let m = l as usize + first;
                    let old = clus[m];
                    clus[m] = old.min(clus[i]);
                    if old != clus[i] {
                        more = true;
                    }
                    clus[i] = clus[i].min(old);
                }
            }
        }
        nloops += 1;
    }
    number_roots(s, clus)
}

/// Numbers the roots (`clus[i] == i`) in ascending index, propagates the numbers to every
/// pixel (all point to their root after convergence) and marks invalid digis.
#[allow(clippy::needless_range_loop)] // `i` is also a value: roots satisfy clus[i] == i
fn number_roots(s: &Span, clus: &mut [i32]) -> u32 {
    let mut found = 0u32;
    for i in s.first..s.end {
        if s.valid(i) && clus[i] == i as i32 {
            clus[i] = -(found as i32 + 1);
            found += 1;
        }
    }
    for i in s.first..s.end {
        if s.valid(i) && clus[i] >= 0 {
            clus[i] = clus[clus[i] as usize];
        }
    }
    for i in s.first..s.end {
        clus[i] = if s.valid(i) { -clus[i] - 1 } else { -9999 };
    }
    found
}

/// Reusable state of the union–find clusterizer.
#[derive(Default)]
struct UnionFind {
    /// Per module pixel (row-major 160 × 416): 1 + local index of a pixel there, 0 if empty
    /// (u16 keeps the grid in 133 kB; runs are capped well below 65535 words).
    grid: Vec<u16>,
    parent: Vec<u32>,
    /// Cluster number of each root (reused: a module's allocation cost as much as its
    /// numbering at ⟨PU⟩ 50, 31 digis per module).
    number: Vec<i32>,
}

impl UnionFind {
    fn find(parent: &mut [u32], mut a: u32) -> u32 {
        while parent[a as usize] != a {
            let p = parent[a as usize];
            parent[a as usize] = parent[p as usize]; // path halving
            a = p;
        }
        a
    }

    fn union(parent: &mut [u32], a: u32, b: u32) {
        let (ra, rb) = (Self::find(parent, a), Self::find(parent, b));
        // The smaller index stays root, so every root is its component's lowest digi.
        if ra < rb {
            parent[rb as usize] = ra;
        } else if rb < ra {
            parent[ra as usize] = rb;
        }
    }

    fn run(&mut self, s: &Span, clus: &mut [i32]) -> u32 {
        const COLS: usize = NUM_COLS_IN_MODULE as usize;
        const ROWS: usize = NUM_ROWS_IN_MODULE as usize;
        if self.grid.is_empty() {
            self.grid = vec![0; ROWS * COLS];
        }
        let len = s.end - s.first;
        self.parent.clear();
        self.parent.extend(0..len as u32);
        let (grid, parent) = (&mut self.grid, &mut self.parent[..]);
        let cell = |i: usize| s.xx[i] as usize * COLS + s.yy[i] as usize;
        for i in s.first..s.end {
            if s.valid(i) {
                let c = cell(i);
                let p = (i - s.first) as u32;
                match grid[c] {
                    0 => grid[c] = p as u16 + 1,
                    q => Self::union(parent, p, q as u32 - 1), // duplicate pixel
                }
            }
        }
        // Forward neighbours (same row next column, and the row below in all three columns)
        // cover every 8-connected pair once from one side.
        for i in s.first..s.end {
            if !s.valid(i) {
                continue;
            }
            let (x, y) = (s.xx[i] as usize, s.yy[i] as usize);
            let p = (i - s.first) as u32;
            let mut link = |xn: usize, yn: usize| {
                let q = grid[xn * COLS + yn];
                if q != 0 {
                    Self::union(parent, p, q as u32 - 1);
                }
            };
            if y + 1 < COLS {
                link(x, y + 1);
            }
            if x + 1 < ROWS {
                link(x + 1, y);
                if y + 1 < COLS {
                    link(x + 1, y + 1);
                }
                if y > 0 {
                    link(x + 1, y - 1);
                }
            }
        }
        // Roots numbered in ascending index; every pixel takes its root's number.
        let mut found = 0u32;
        let number = &mut self.number;
        number.clear();
        number.resize(len, 0);
        for p in 0..len {
            let i = s.first + p;
            if s.valid(i) {
                let r = Self::find(parent, p as u32) as usize;
                if r == p {
                    number[p] = found as i32;
                    found += 1;
                }
                clus[i] = number[r];
            } else {
                clus[i] = -9999;
            }
        }
        for i in s.first..s.end {
            if s.valid(i) {
                grid[cell(i)] = 0;
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::test_support::SplitMix;

    /// `module_runs` as it was first written: the runs' starts, then each run's end by a
    /// search from its start.
    fn module_runs_by_search(module_ind: &[u16], max_pix: usize) -> Vec<ModuleRun> {
        let n = module_ind.len();
        let mut firsts = Vec::new();
        let mut prev: Option<u16> = None;
        for (i, &m) in module_ind.iter().enumerate() {
            if m == INVALID_MODULE {
                continue;
            }
            if prev != Some(m) && firsts.len() < MAX_NUM_MODULES {
                firsts.push(i);
            }
            prev = Some(m);
        }
        firsts
            .into_iter()
            .map(|first| {
                let module = module_ind[first];
                let full_end = (first..n)
                    .find(|&i| module_ind[i] != INVALID_MODULE && module_ind[i] != module)
                    .unwrap_or(n);
                ModuleRun {
                    first,
                    end: full_end.min(first + max_pix),
                    full_end,
                    module,
                }
            })
            .collect()
    }

    /// The one-pass runs equal the searched ones: invalid words inside and between runs, a
    /// module seen again later, the cap on runs reached (the last kept run still ends where
    /// the first dropped one begins), and the first bad digi named.
    #[test]
    fn module_runs_in_one_pass_match_the_search() {
        let mut g = SplitMix(5);
        for (len, modules, runs_wanted) in
            [(0, 3, 0), (40, 3, 10), (3000, 40, 400), (9000, 5, 2500)]
        {
            let mut ids = Vec::with_capacity(len);
            let mut m = 0u16;
            while ids.len() < len {
                if g.below(len as u64 / runs_wanted.max(1) + 1) == 0 {
                    m = g.below(modules) as u16;
                }
                ids.push(if g.below(7) == 0 { INVALID_MODULE } else { m });
            }
            let (xx, yy) = (vec![3u16; len], vec![5u16; len]);
            for max_pix in [1, 4, 10_000] {
                let runs = module_runs(&ids, &xx, &yy, max_pix).unwrap();
                assert_eq!(runs, module_runs_by_search(&ids, max_pix), "{len} digis");
            }
        }
        // More runs than the cap: every other digi another module.
        let ids: Vec<u16> = (0..2 * MAX_NUM_MODULES + 5)
            .map(|i| (i % 2) as u16)
            .collect();
        let z = vec![0u16; ids.len()];
        let runs = module_runs(&ids, &z, &z, 8).unwrap();
        assert_eq!(runs.len(), MAX_NUM_MODULES);
        assert_eq!(runs, module_runs_by_search(&ids, 8));
        assert_eq!(runs.last().unwrap().full_end, MAX_NUM_MODULES);
        // The first bad digi, not a later one.
        let e = module_runs(&[1, 1, 4000, 2], &[0, 200, 0, 0], &[0; 4], 8).unwrap_err();
        assert!(
            matches!(e, LocalError::PixelOutOfRange { digi: 1, .. }),
            "{e}"
        );
        let e =
            module_runs(&[1, INVALID_MODULE, 4000, 2], &[0, 900, 0, 0], &[0; 4], 8).unwrap_err();
        assert!(
            matches!(e, LocalError::ModuleOutOfRange { digi: 2, .. }),
            "{e}"
        );
    }

    fn both(ids: &[u16], xx: &[u16], yy: &[u16]) -> Clusters {
        let f = clusterize(ids, xx, yy, &ClusterizeConfig::default()).unwrap();
        let cfg = ClusterizeConfig {
            algorithm: ClusterAlgorithm::UnionFind,
            ..Default::default()
        };
        let u = clusterize(ids, xx, yy, &cfg).unwrap();
        assert_eq!(f, u, "faithful and union-find differ");
        f
    }

    #[allow(clippy::needless_range_loop)]
    /// Independent check: clusters are the 8-connected components of each run's pixels,
    /// numbered by their lowest digi index in ascending order.
    fn brute_force_check(ids: &[u16], xx: &[u16], yy: &[u16], c: &Clusters, cap: usize) {
        for run in 0..c.n_modules as usize {
            let first = c.module_start[1 + run] as usize;
            let m = ids[first];
            let mut end = (first..ids.len())
                .find(|&i| ids[i] != INVALID_MODULE && ids[i] != m)
                .unwrap_or(ids.len());
            end = end.min(first + cap);
            let px: Vec<usize> = (first..end).filter(|&i| ids[i] != INVALID_MODULE).collect();
            let mut label: Vec<usize> = px.clone();
            loop {
                let mut changed = false;
                for a in 0..px.len() {
                    for b in 0..px.len() {
                        let (i, j) = (px[a], px[b]);
                        let adj = (xx[i] as i32 - xx[j] as i32).abs() <= 1
                            && (yy[i] as i32 - yy[j] as i32).abs() <= 1;
                        if adj && label[b] < label[a] {
                            label[a] = label[b];
                            changed = true;
                        }
                    }
                }
                if !changed {
                    break;
                }
            }
            let mut roots: Vec<usize> = label.clone();
            roots.sort();
            roots.dedup();
            assert_eq!(c.n_clusters_in_module[m as usize], roots.len() as u32);
            for (a, &i) in px.iter().enumerate() {
                let want = roots.binary_search(&label[a]).unwrap() as i32;
                assert_eq!(c.clus[i], want, "digi {i}");
            }
            for i in first..end {
                if ids[i] == INVALID_MODULE {
                    assert_eq!(c.clus[i], -9999);
                }
            }
        }
    }

    #[test]
    fn single_pixel_roc_edge_diagonal_and_gaps() {
        // Module 10: a single pixel; a pair across the ROC column boundary 51|52; a diagonal
        // pair; two pixels one column apart (separate); a duplicate pixel.
        let ids = [10, 10, 10, 10, 10, 10, 10, 10, 10];
        let xx = [5, 40, 40, 100, 101, 150, 150, 70, 70];
        let yy = [5, 51, 52, 300, 301, 10, 12, 200, 200];
        let c = both(&ids, &xx, &yy);
        assert_eq!(c.clus, vec![0, 1, 1, 2, 2, 3, 4, 5, 5]);
        assert_eq!(c.n_clusters_in_module[10], 6);
        brute_force_check(&ids, &xx, &yy, &c, MAX_PIX_IN_MODULE);
    }

    #[test]
    fn runs_invalid_words_and_repeated_modules() {
        let ids = [9999, 3, 3, 9999, 8, 8, 9999, 3];
        let xx = [0, 1, 2, 0, 5, 50, 0, 1];
        let yy = [0, 1, 2, 0, 5, 50, 0, 2];
        let c = both(&ids, &xx, &yy);
        assert_eq!(c.module_start, vec![3, 1, 4, 7]);
        assert_eq!(c.module_id, vec![3, 8, 3]);
        // Digi 0 lies before every run: it keeps its own index.
        assert_eq!(c.clus, vec![0, 0, 0, -9999, 0, 1, -9999, 0]);
        // The repeated module is clustered twice; the later run's count wins.
        assert_eq!(c.n_clusters_in_module[3], 1);
    }

    #[test]
    fn pixel_cap_leaves_the_rest_unclustered() {
        let n = 4010;
        let ids = vec![20u16; n];
        let xx: Vec<u16> = (0..n).map(|i| (2 * (i % 80)) as u16).collect();
        let yy: Vec<u16> = (0..n).map(|i| (2 * (i / 80)) as u16).collect();
        let c = both(&ids, &xx, &yy);
        assert_eq!(c.n_clusters_in_module[20], 4000);
        assert_eq!(c.clus[3999], 3999);
        assert_eq!(&c.clus[4000..], &(4000..4010).collect::<Vec<i32>>()[..]);
    }

    #[test]
    fn rejects_bad_inputs() {
        let cfg = ClusterizeConfig::default();
        assert!(matches!(
            clusterize(&[2000], &[0], &[0], &cfg),
            Err(LocalError::ModuleOutOfRange { .. })
        ));
        assert!(matches!(
            clusterize(&[1], &[160], &[0], &cfg),
            Err(LocalError::PixelOutOfRange { .. })
        ));
        assert!(matches!(
            clusterize(&[1], &[0, 1], &[0], &cfg),
            Err(LocalError::ColumnLength { .. })
        ));
        // Invalid digis may carry anything.
        assert!(clusterize(&[9999], &[9000], &[9000], &cfg).is_ok());
    }

    /// A random event: runs of random modules with blobs, tracks, duplicates and invalid
    /// words; small caps make the 4000-word cut and > 10-neighbour pixels happen.
    fn random_event(rng: &mut SplitMix) -> (Vec<u16>, Vec<u16>, Vec<u16>) {
        let (mut ids, mut xx, mut yy) = (Vec::new(), Vec::new(), Vec::new());
        let n_runs = 1 + rng.below(12);
        for _ in 0..n_runs {
            let m = rng.below(1856) as u16;
            let big = rng.below(10) == 0;
            let n_pix = rng.below(if big { 4200 } else { 150 });
            let (w, h) = (1 + rng.below(160), 1 + rng.below(416));
            let (x0, y0) = (rng.below(161 - w), rng.below(417 - h));
            for _ in 0..n_pix {
                if rng.below(12) == 0 {
                    ids.push(INVALID_MODULE);
                    xx.push(rng.next() as u16);
                    yy.push(rng.next() as u16);
                    continue;
                }
                ids.push(m);
                if rng.below(8) == 0 && !xx.is_empty() && ids[ids.len() - 2] == m {
                    let (px, py) = (xx[xx.len() - 1], yy[yy.len() - 1]);
                    xx.push(px);
                    yy.push(py); // duplicate pixel
                } else {
                    xx.push((x0 + rng.below(w)) as u16);
                    yy.push((y0 + rng.below(h)) as u16);
                }
            }
        }
        (ids, xx, yy)
    }

    #[test]
    fn faithful_and_union_find_identical_on_random_modules() {
        let mut rng = SplitMix(12345);
        let mut n_clusters = 0u64;
        for ev in 0..400 {
            let (ids, xx, yy) = random_event(&mut rng);
            let c = both(&ids, &xx, &yy);
            n_clusters += c
                .n_clusters_in_module
                .iter()
                .map(|&x| x as u64)
                .sum::<u64>();
            if ev < 60 {
                // brute force is quadratic: only on the first events
                let small = ids.len() < 1500;
                if small {
                    brute_force_check(&ids, &xx, &yy, &c, MAX_PIX_IN_MODULE);
                }
            }
        }
        assert!(
            n_clusters > 10_000,
            "the random events must exercise many clusters: {n_clusters}"
        );
    }

    /// Timing of both algorithms on a dense synthetic event (run with --ignored --nocapture).
    #[test]
    #[ignore]
    fn timing_clusterize() {
        let mut rng = SplitMix(99);
        let (mut ids, mut xx, mut yy) = (Vec::new(), Vec::new(), Vec::new());
        for m in 0..1800u16 {
            for _ in 0..10 {
                let (x, y) = (rng.below(158) as u16, rng.below(410) as u16);
                for k in 0..3u16 {
                    ids.push(m);
                    xx.push(x + (k & 1));
                    yy.push(y + k);
                }
            }
        }
        for algorithm in [ClusterAlgorithm::Faithful, ClusterAlgorithm::UnionFind] {
            let cfg = ClusterizeConfig {
                algorithm,
                ..Default::default()
            };
            let t = std::time::Instant::now();
            let reps = 20;
            for _ in 0..reps {
                std::hint::black_box(clusterize(&ids, &xx, &yy, &cfg).unwrap());
            }
            eprintln!(
                "{algorithm:?}: {:.3} ms per event of {} digis",
                t.elapsed().as_secs_f64() * 1e3 / reps as f64,
                ids.len()
            );
        }
    }
}
