//! Deterministic-annealing clustering in z, in the spirit of CMSSW's `DAClusterizerInZ_vect`:
//! an alternative to the density clustering that separates vertices closer than the density
//! clustering's neighbour window.
//!
//! Each track i (z_i, weight w_i = 1/(σ²_i + vertex_size²)) belongs to prototype k with the
//! probability p_ik = ρ_k exp(−β w_i (z_i − z_k)²) / Z_i, Z_i = Z₀ + Σ_k ρ_k exp(…), where
//! β = 1/T and Z₀ = ρ₀ exp(−β z_cutoff²) is the outlier term (switched on at `t_min`). Starting
//! from one prototype above the first critical temperature, the temperature is lowered by
//! `cooling_factor`; at each step the prototypes are iterated to a fixed point (z_k = weighted
//! mean, ρ_k = Σ_i p_ik / N), a prototype whose critical temperature T_c = 2 Σ p w² d² / Σ p w
//! is above T splits in two, and prototypes closer than `z_merge` that would not split again
//! merge. At `t_purge` prototypes with fewer than two unique tracks are removed, then the
//! system cools to `t_stop` and each track goes to its most probable prototype when that
//! probability exceeds `assign_weight`.
//!
//! Everything runs in f64 with sums in track order, so the result depends only on the event's
//! selected tracks (bit-identical for any thread count or batch size).
//!
//! Cost: about 40 updates and 20 split rounds per ⟨PU⟩ 50 event, 70 % of it above `t_min`.
//! An update computes the terms of many tracks' window pairs in one vectorised loop and the
//! split picks its tracks without branches (both compiled for AVX2 where the CPU has it, same
//! bits). Tried without gain (thread CPU time, ⟨PU⟩ 50 and 100): window bounds without
//! branches or from monotonic lower bounds (the walks are well predicted, and a branch-free
//! step chains each track's bound to the previous one: 8 % slower); the split's soft share
//! from `exp_neg` (slower, the libm call is cheap there); and, changing results,
//! `DELTA_LOW_T` 1e-3 or one update at `t_stop` (time unchanged: updates below `t_min` are
//! cheap, few prototypes per track).

use super::cluster_common::{check_capacity, Clusters};
use super::{VertexError, IDV_NOISE, MAX_VERTICES};

/// Parameters of [`super::Clusterizer::Annealing`]. Temperatures are dimensionless: at
/// temperature T a track is spread over prototypes within about √T of its z error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnnealingConfig {
    /// Temperature where splitting stops and the outlier term is switched on (default 4.0;
    /// CMSSW's 2.0 assumes calibrated errors, and the pixel tracks' z errors are about 1.5×
    /// too small, so 2.0 splits one vertex in five).
    pub t_min: f64,
    /// Temperature where prototypes with fewer than two unique tracks are purged (default
    /// 4.0); in (0, `t_min`].
    pub t_purge: f64,
    /// Final temperature of the track assignment (default 0.5); in (0, `t_purge`].
    pub t_stop: f64,
    /// Factor applied to the temperature at each cooling step (default 0.6); in (0, 1).
    pub cooling_factor: f64,
    /// Outlier cut, in track z errors: a track farther than about this from every prototype
    /// is left unassigned (default 3.0). 0 switches outlier rejection off.
    pub z_cutoff: f64,
    /// Added in quadrature to every track's z error, cm (default 0.006).
    pub vertex_size: f64,
    /// Prototypes closer than this merge when the merged one would not split again, cm
    /// (default 0.01).
    pub z_merge: f64,
    /// A track is unique to a prototype when its probability there exceeds this fraction of
    /// the largest possible (default 0.5; CMSSW 0.8, which purges small vertices beside
    /// large ones); in (0, 1].
    pub unique_weight: f64,
    /// Smallest probability that assigns a track to its most probable prototype (default
    /// 0.5); in (0, 1).
    pub assign_weight: f64,
}

impl Default for AnnealingConfig {
    fn default() -> Self {
        Self {
            t_min: 4.0,
            t_purge: 4.0,
            t_stop: 0.5,
            cooling_factor: 0.6,
            z_cutoff: 3.0,
            vertex_size: 0.006,
            z_merge: 0.01,
            unique_weight: 0.5,
            assign_weight: 0.5,
        }
    }
}

impl AnnealingConfig {
    /// Checks every parameter (finite and in range); the error names the key.
    pub fn validate(&self) -> Result<(), String> {
        let finite = |name: &str, v: f64| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(format!("{name} = {v} must be finite"))
            }
        };
        for (name, v) in [
            ("t_min", self.t_min),
            ("t_purge", self.t_purge),
            ("t_stop", self.t_stop),
            ("cooling_factor", self.cooling_factor),
            ("z_cutoff", self.z_cutoff),
            ("vertex_size", self.vertex_size),
            ("z_merge", self.z_merge),
            ("unique_weight", self.unique_weight),
            ("assign_weight", self.assign_weight),
        ] {
            finite(name, v)?;
        }
        let check = |ok: bool, msg: String| if ok { Ok(()) } else { Err(msg) };
        check(
            self.t_min > 0.0,
            format!("t_min = {} must be > 0", self.t_min),
        )?;
        check(
            self.t_purge > 0.0 && self.t_purge <= self.t_min,
            format!(
                "t_purge = {} must be in (0, t_min = {}]",
                self.t_purge, self.t_min
            ),
        )?;
        check(
            self.t_stop > 0.0 && self.t_stop <= self.t_purge,
            format!(
                "t_stop = {} must be in (0, t_purge = {}]",
                self.t_stop, self.t_purge
            ),
        )?;
        check(
            self.cooling_factor > 0.0 && self.cooling_factor < 1.0,
            format!("cooling_factor = {} must be in (0, 1)", self.cooling_factor),
        )?;
        for (name, v, unit) in [
            ("z_cutoff", self.z_cutoff, ""),
            ("vertex_size", self.vertex_size, " cm"),
            ("z_merge", self.z_merge, " cm"),
        ] {
            check(v >= 0.0, format!("{name} = {v}{unit} must be ≥ 0"))?;
        }
        check(
            self.unique_weight > 0.0 && self.unique_weight <= 1.0,
            format!("unique_weight = {} must be in (0, 1]", self.unique_weight),
        )?;
        check(
            self.assign_weight > 0.0 && self.assign_weight < 1.0,
            format!("assign_weight = {} must be in (0, 1)", self.assign_weight),
        )
    }
}

/// A prototype's probability term is cut where β w (z_i − z_k)² > `ZRANGE²` (exp(−16) ≈ 1e-7
/// of the peak): each track only sees prototypes within `ZRANGE` √T σ, which keeps an update
/// O(tracks × nearby prototypes).
const ZRANGE: f64 = 4.0;
/// The cut above `t_min` (exp(−2.25) ≈ 0.1 of the peak), where every track also sees the
/// nearest prototype on either side, so that a track in a gap between prototypes still pulls
/// (with 4.0 and no nearest prototypes such tracks were lost, and vertices in the gaps with
/// them). Above `t_min` only the splitting pattern matters: 1.5 instead of 4.0 changed the
/// rates by < 0.1 % (⟨PU⟩ 50 and 100) for 2.5× fewer track–prototype pairs.
const ZRANGE_HIGH_T: f64 = 1.5;
/// Most window pairs an update computes at once (unless one track has more): bounds the
/// scratch memory (16 000 tracks × 1 023 prototypes would be half a GB) at no measurable cost.
const PAIR_BLOCK: usize = 4096;
/// Margin of the cached windows, cm.
const WINDOW_SLACK: f64 = 0.02;
/// Convergence of a fixed-point iteration: the largest move of a prototype, cm, above and
/// below `t_min`; above, also `DELTA_REL` of the prototypes' width √T σ̄ (positions at high
/// temperature need only be good to a fraction of the spacing).
const DELTA_REL: f64 = 0.1;
const DELTA_HIGH_T: f64 = 1e-2;
const DELTA_LOW_T: f64 = 1e-4;
/// Most fixed-point iterations per temperature (a bound for hostile inputs; the usual count
/// is a few).
const MAX_ITERATIONS: u32 = 1000;
/// Most fixed-point iterations per temperature above `t_min`: the next temperature refines
/// the positions anyway; 3 instead of 1 changed the vertex efficiency, merge and split rates
/// by < 0.2 % (100 ⟨PU⟩ 50 events) for 40 % more work.
const MAX_ITERATIONS_HIGH_T: u32 = 1;
/// Above `FAST_ABOVE`·`t_min` the temperature falls by `FAST_COOLING` per step (or
/// `cooling_factor` if smaller): there only the splitting pattern matters; 0.4 instead of
/// 0.6 moved the rates by < 0.2 % (⟨PU⟩ 50 and 100). At 0.3 and below too few split
/// generations happen: close vertices in sparse events stay merged.
const FAST_ABOVE: f64 = 64.0;
const FAST_COOLING: f64 = 0.4;
/// Cooling factor from `t_purge` to `t_stop` (or `cooling_factor` if smaller): only the
/// final assignment is read there.
const FINAL_COOLING: f64 = 0.125;
/// Steps in which the outlier term is switched on at `t_min` (5 changed nothing measurable).
const OUTLIER_STEPS: u32 = 2;
/// Tries of the last splitting round at `t_min`, the threshold rising by 10 % each time.
const MAX_FINAL_SPLITS: u32 = 10;
/// Half the distance between the two halves of a prototype that splits without tracks on
/// one side, cm; also the smallest separation worth a split.
const SPLIT_EPSILON: f64 = 1e-3;
/// Partition functions below this count as empty (the track is far from everything).
const TINY: f64 = 1e-100;
/// Fewest assigned tracks of a vertex; the tracks of smaller prototypes become noise.
const MIN_TRACKS: u32 = 2;

/// e^x for x ≤ 0: a degree-7 polynomial on the reduced argument (relative error < 1e-8,
/// ample for probabilities), the same bits on every platform. Branch-free and without a
/// libm call (the rounding is the 1.5·2⁵² shift), so the update loops vectorise; about 4×
/// cheaper there than `f64::exp`. Below −700 it returns e^−700 ≈ 1e-304 (0 for the sums).
#[inline(always)]
fn exp_neg(x: f64) -> f64 {
    const LN2_HI: f64 = 0.693_147_180_369_123_8;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    const SHIFT: f64 = 6_755_399_441_055_744.0;
    let x = if x > -700.0 { x } else { -700.0 };
    // t = SHIFT + round(x / ln 2): n sits in the low bits of t's mantissa.
    let t = x * std::f64::consts::LOG2_E + SHIFT;
    let n = t - SHIFT;
    let f = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + f * (1.0
            + f * (1.0 / 2.0
                + f * (1.0 / 6.0
                    + f * (1.0 / 24.0
                        + f * (1.0 / 120.0 + f * (1.0 / 720.0 + f * (1.0 / 5040.0)))))));
    // n ≥ −1010 here, so 2ⁿ is a normal number.
    let e = (t.to_bits() as i64 - SHIFT.to_bits() as i64 + 1023) as u64;
    p * f64::from_bits(e << 52)
}

/// Inverse temperatures and squared cut, derived from [`AnnealingConfig`].
struct Schedule {
    beta_purge: f64,
    beta_stop: f64,
    zc2: f64,
}

/// The selected tracks and the prototypes, with the sums of the last update.
struct Annealer<'c> {
    cfg: &'c AnnealingConfig,
    /// Track z, weight 1/σ², √weight, and partition function of the last update.
    z: Vec<f64>,
    w: Vec<f64>,
    sqw: Vec<f64>,
    zsum: Vec<f64>,
    /// Prototypes, sorted in z: position, mass ρ, Σ p w, Σ p w² d², critical temperature.
    pz: Vec<f64>,
    rho: Vec<f64>,
    sw: Vec<f64>,
    swe: Vec<f64>,
    tc: Vec<f64>,
    /// Per track the prototypes `lo..hi` of its window, valid while `win_valid`, for
    /// `win_beta`, and until the prototypes have moved `WINDOW_SLACK` in all.
    lo: Vec<u32>,
    hi: Vec<u32>,
    win_valid: bool,
    win_beta: f64,
    /// Typical track z error (1/√ mean weight), cm.
    sigma: f64,
    /// Per track 1/√weight, the z error with the vertex size, cm.
    sig: Vec<f64>,
    /// Smallest √weight: the widest reach of a track.
    sqw_min: f64,
    moved: f64,
    /// Scratch: per window pair the distance, term and β w; per prototype Σ p, Σ p w, Σ p w z,
    /// Σ p w² d².
    dist: Vec<f64>,
    term: Vec<f64>,
    bw: Vec<f64>,
    acc: Vec<[f64; 4]>,
    /// Scratch of [`Self::halves`]: the tracks near the prototype.
    sel: Vec<u32>,
}

impl<'c> Annealer<'c> {
    /// The selected tracks sorted in z (ties in input order, so that windows move
    /// monotonically) and one prototype at their weighted mean; also the sorting order.
    fn new(cfg: &'c AnnealingConfig, zt: &[f32], ezt2: &[f32]) -> (Self, Vec<u32>) {
        let nt = zt.len();
        let vs2 = cfg.vertex_size * cfg.vertex_size;
        let mut order: Vec<u32> = (0..nt as u32).collect();
        order.sort_by(|&a, &b| zt[a as usize].total_cmp(&zt[b as usize]));
        let z: Vec<f64> = order.iter().map(|&i| zt[i as usize] as f64).collect();
        let w: Vec<f64> = order
            .iter()
            .map(|&i| 1.0 / (ezt2[i as usize] as f64 + vs2))
            .collect();
        let sqw: Vec<f64> = w.iter().map(|w| w.sqrt()).collect();
        let sqw_min = sqw.iter().fold(f64::INFINITY, |m, &v| m.min(v));
        let sig = sqw.iter().map(|&v| 1.0 / v).collect();
        let (mut sw, mut swz) = (0.0f64, 0.0f64);
        for (&zi, &wi) in z.iter().zip(&w) {
            sw += wi;
            swz += wi * zi;
        }
        let z0 = swz / sw;
        let mut swe = 0.0f64;
        for (&zi, &wi) in z.iter().zip(&w) {
            swe += wi * wi * (zi - z0) * (zi - z0);
        }
        let a = Annealer {
            cfg,
            z,
            w,
            sqw,
            zsum: vec![0.0; nt],
            pz: vec![z0],
            rho: vec![1.0],
            sw: vec![sw],
            swe: vec![swe],
            tc: vec![2.0 * swe / sw],
            lo: Vec::new(),
            hi: Vec::new(),
            win_valid: false,
            win_beta: 0.0,
            sigma: (nt as f64 / sw).sqrt(),
            sqw_min,
            sig,
            moved: 0.0,
            dist: Vec::new(),
            term: Vec::new(),
            bw: Vec::new(),
            acc: Vec::new(),
            sel: Vec::new(),
        };
        (a, order)
    }

    /// Per track (in z order) its most probable prototype when that probability exceeds
    /// `assign_weight`, else `u32::MAX`; and the tracks per prototype.
    fn assign(&self, beta: f64, rho0: f64, zc2: f64) -> (Vec<u32>, Vec<u32>) {
        let z_init = rho0 * (-beta * zc2).exp();
        let sqrt_beta = beta.sqrt();
        let mut proto = vec![u32::MAX; self.z.len()];
        let mut count = vec![0u32; self.pz.len()];
        for (i, pr) in proto.iter_mut().enumerate() {
            let bw = beta * self.w[i];
            let mut zs = z_init;
            let (mut best, mut best_a) = (usize::MAX, 0.0f64);
            for k in self.window(i, sqrt_beta) {
                let d = self.z[i] - self.pz[k];
                let term = self.rho[k] * exp_neg(-bw * d * d);
                zs += term;
                if term > best_a {
                    (best, best_a) = (k, term);
                }
            }
            if best != usize::MAX && zs > TINY && best_a / zs > self.cfg.assign_weight {
                *pr = best as u32;
                count[best] += 1;
            }
        }
        (proto, count)
    }

    /// The prototypes within `ZRANGE` of track `i` at inverse temperature `beta`.
    fn window(&self, i: usize, sqrt_beta: f64) -> std::ops::Range<usize> {
        let r = ZRANGE / (sqrt_beta * self.sqw[i]);
        let (lo, hi) = (self.z[i] - r, self.z[i] + r);
        self.pz.partition_point(|&z| z < lo)..self.pz.partition_point(|&z| z <= hi)
    }

    /// Windows widened by `WINDOW_SLACK`, so that they stay supersets of [`Self::window`]
    /// while the prototypes move less than that.
    fn set_windows(&mut self, beta: f64) {
        let high_t = beta * self.cfg.t_min < 0.99;
        let zr = if high_t { ZRANGE_HIGH_T } else { ZRANGE };
        let inv_sqrt_beta = 1.0 / beta.sqrt();
        let n = self.z.len();
        self.lo.resize(n, 0);
        self.hi.resize(n, 0);
        let pz = &self.pz[..];
        let nv = pz.len();
        // The tracks are sorted in z: each window starts from the previous one's bounds.
        let (mut lo, mut hi, mut c) = (0usize, 0usize, 0usize);
        for i in 0..n {
            let zi = self.z[i];
            let r = zr * inv_sqrt_beta * self.sig[i] + WINDOW_SLACK;
            let (zl, zh) = (zi - r, zi + r);
            while lo > 0 && pz[lo - 1] >= zl {
                lo -= 1;
            }
            while lo < nv && pz[lo] < zl {
                lo += 1;
            }
            while hi > 0 && pz[hi - 1] > zh {
                hi -= 1;
            }
            while hi < nv && pz[hi] <= zh {
                hi += 1;
            }
            let (mut l, mut h) = (lo, hi.max(lo));
            if high_t {
                // The nearest prototype on either side too: a track in a gap still pulls.
                while c < nv && pz[c] < zi {
                    c += 1;
                }
                l = l.min(c.saturating_sub(1));
                h = h.max((c + 1).min(nv));
            }
            self.lo[i] = l as u32;
            self.hi[i] = h as u32;
        }
        self.win_valid = true;
        self.win_beta = beta;
        self.moved = 0.0;
    }

    /// One fixed-point iteration at `beta` with outlier mass `rho0`: new positions, masses
    /// and critical temperatures. Returns the largest move, cm.
    fn update(&mut self, beta: f64, rho0: f64, zc2: f64) -> f64 {
        if !self.win_valid || beta != self.win_beta || self.moved > WINDOW_SLACK {
            self.set_windows(beta);
        }
        let z_init = rho0 * (-beta * zc2).exp();
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            unsafe { self.sums_avx2(beta, z_init) };
            return self.finish_update();
        }
        self.sums(beta, z_init);
        self.finish_update()
    }

    /// [`Self::sums`] compiled for AVX2: the same IEEE operations in the same order (no FMA
    /// is enabled, and Rust never contracts a multiply and an add), so the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn sums_avx2(&mut self, beta: f64, z_init: f64) {
        self.sums(beta, z_init)
    }

    /// The sums of an update per prototype, into `acc`. The terms of many tracks' window
    /// pairs are computed in one loop (a window holds two or three prototypes, too few to
    /// vectorise alone); each prototype still adds its tracks' terms in track order. Blocks
    /// of at most `PAIR_BLOCK` pairs (or one track) bound the scratch memory.
    #[inline(always)]
    fn sums(&mut self, beta: f64, z_init: f64) {
        let n = self.z.len();
        self.acc.clear();
        self.acc.resize(self.pz.len(), [0.0; 4]);
        let mut i0 = 0;
        while i0 < n {
            let (mut i1, mut np) = (i0, 0usize);
            while i1 < n {
                let m = (self.hi[i1] - self.lo[i1]) as usize;
                if np > 0 && np + m > PAIR_BLOCK {
                    break;
                }
                np += m;
                i1 += 1;
            }
            self.block_sums(i0..i1, np, beta, z_init);
            i0 = i1;
        }
    }

    /// [`Self::sums`] of tracks `tracks`, which have `np` window pairs in all.
    #[inline(always)]
    fn block_sums(&mut self, tracks: std::ops::Range<usize>, np: usize, beta: f64, z_init: f64) {
        self.dist.resize(np, 0.0);
        self.term.resize(np, 0.0);
        self.bw.resize(np, 0.0);
        let (pz, rho) = (&self.pz[..], &self.rho[..]);
        let (z, w) = (&self.z[..], &self.w[..]);
        let (dist, term) = (&mut self.dist[..np], &mut self.term[..np]);
        let bwp = &mut self.bw[..np];
        let mut q = 0;
        for i in tracks.clone() {
            let (l, h) = (self.lo[i] as usize, self.hi[i] as usize);
            let (zi, bw) = (z[i], beta * w[i]);
            let m = h - l;
            for (((d, t), b), (&zk, &rk)) in dist[q..q + m]
                .iter_mut()
                .zip(&mut term[q..q + m])
                .zip(&mut bwp[q..q + m])
                .zip(pz[l..h].iter().zip(&rho[l..h]))
            {
                *d = zi - zk;
                *t = rk;
                *b = bw;
            }
            q += m;
        }
        for ((t, &d), &bw) in term.iter_mut().zip(&*dist).zip(&*bwp) {
            *t *= exp_neg(-bw * d * d);
        }
        let mut q = 0;
        for i in tracks {
            let (l, h) = (self.lo[i] as usize, self.hi[i] as usize);
            let m = h - l;
            let (term, dist) = (&term[q..q + m], &dist[q..q + m]);
            q += m;
            let mut zs = z_init;
            for &t in term {
                zs += t;
            }
            self.zsum[i] = zs;
            if zs > TINY {
                let inv = 1.0 / zs;
                let (zi, wi) = (z[i], w[i]);
                let c = [1.0, wi, wi * zi, wi * wi];
                for ((acc, &t), &d) in self.acc[l..h].iter_mut().zip(term).zip(dist) {
                    let p = t * inv;
                    let mut s = [p * c[0], p * c[1], p * c[2], p * c[3]];
                    s[3] = s[3] * d * d;
                    for (a, s) in acc.iter_mut().zip(s) {
                        *a += s;
                    }
                }
            }
        }
    }

    /// The new prototypes from the sums in `acc`; the largest move, cm.
    fn finish_update(&mut self) -> f64 {
        let nv = self.pz.len();
        let inv_n = 1.0 / self.z.len() as f64;
        let mut delta = 0.0f64;
        for k in 0..nv {
            let [se, sum_w, swz, sum_we] = self.acc[k];
            self.sw[k] = sum_w;
            self.swe[k] = sum_we;
            if sum_w > 0.0 {
                let znew = swz / sum_w;
                delta = delta.max((znew - self.pz[k]).abs());
                self.pz[k] = znew;
                self.tc[k] = 2.0 * sum_we / sum_w;
            } else {
                self.tc[k] = 0.0;
            }
            self.rho[k] = se * inv_n;
        }
        if self.pz.windows(2).any(|p| p[0] > p[1]) {
            self.reorder();
        }
        self.moved += delta;
        delta
    }

    /// Sorts the prototypes in z again (they may cross while moving); ties keep their order.
    fn reorder(&mut self) {
        self.win_valid = false;
        let mut idx: Vec<usize> = (0..self.pz.len()).collect();
        idx.sort_by(|&a, &b| self.pz[a].total_cmp(&self.pz[b]));
        for v in [
            &mut self.pz,
            &mut self.rho,
            &mut self.sw,
            &mut self.swe,
            &mut self.tc,
        ] {
            let old = v.clone();
            for (dst, &src) in v.iter_mut().zip(&idx) {
                *dst = old[src];
            }
        }
    }

    fn thermalize(&mut self, beta: f64, delta_max: f64, rho0: f64, zc2: f64) {
        let delta_max = delta_max.max(DELTA_REL * self.sigma / beta.sqrt());
        // Above t_min the next cooling step refines positions anyway.
        let iterations = if beta * self.cfg.t_min < 0.99 {
            MAX_ITERATIONS_HIGH_T
        } else {
            MAX_ITERATIONS
        };
        for _ in 0..iterations {
            if self.update(beta, rho0, zc2) < delta_max {
                break;
            }
        }
    }

    fn remove(&mut self, k: usize) {
        self.win_valid = false;
        for v in [
            &mut self.pz,
            &mut self.rho,
            &mut self.sw,
            &mut self.swe,
            &mut self.tc,
        ] {
            v.remove(k);
        }
    }

    /// Merges the closest pair of neighbours within `z_merge` whose union would stay below
    /// its critical temperature. True when a pair merged.
    fn merge(&mut self, beta: f64) -> bool {
        let mut critical: Vec<(f64, usize)> = self
            .pz
            .windows(2)
            .enumerate()
            .map(|(k, p)| ((p[1] - p[0]).abs(), k))
            .filter(|&(d, _)| d < self.cfg.z_merge)
            .collect();
        // Stable: equal distances keep z order.
        critical.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (_, k) in critical {
            let rho = self.rho[k] + self.rho[k + 1];
            let sw = self.sw[k] + self.sw[k + 1];
            // The prototypes are closer than z_merge (≪ a track's error): the union's spread
            // is approximated by the sum of the two.
            let swe = self.swe[k] + self.swe[k + 1];
            let tc = if sw > 0.0 { 2.0 * swe / sw } else { 0.0 };
            if tc * beta < 1.0 {
                self.pz[k] = if rho > 0.0 {
                    (self.rho[k] * self.pz[k] + self.rho[k + 1] * self.pz[k + 1]) / rho
                } else {
                    0.5 * (self.pz[k] + self.pz[k + 1])
                };
                self.rho[k] = rho;
                self.sw[k] = sw;
                self.swe[k] = swe;
                self.tc[k] = tc;
                self.remove(k + 1);
                return true;
            }
        }
        false
    }

    /// Merges while [`Self::merge`] finds a pair, then updates once (the merged sums are
    /// good enough to chain merges; an update per merge was most of the cost at high T).
    fn merge_all(&mut self, beta: f64, rho0: f64, zc2: f64) {
        let mut merged = false;
        while self.merge(beta) {
            merged = true;
        }
        if merged {
            self.update(beta, rho0, zc2);
        }
    }

    /// Σ p, Σ p w z and Σ p w of prototype `k`'s tracks on its left and on its right
    /// (soft shares), for [`Self::split`].
    fn halves(&mut self, k: usize, beta: f64) -> [f64; 6] {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { self.halves_avx2(k, beta) };
        }
        self.halves_body(k, beta)
    }

    /// [`Self::halves_body`] compiled for AVX2 (same operations, same bits).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn halves_avx2(&mut self, k: usize, beta: f64) -> [f64; 6] {
        self.halves_body(k, beta)
    }

    /// The tracks within `ZRANGE` of the prototype are picked first without branches (a
    /// third of the candidates pass, unpredictably), their probabilities computed in one
    /// vectorised loop, then summed in track order.
    #[inline(always)]
    fn halves_body(&mut self, k: usize, beta: f64) -> [f64; 6] {
        let sqrt_beta = beta.sqrt();
        let zk = self.pz[k];
        // Only tracks this near can pass the cut below (the tracks are sorted in z).
        let reach = ZRANGE / (sqrt_beta * self.sqw_min) * (1.0 + 1e-6);
        let first = self.z.partition_point(|&z| z < zk - reach);
        let last = self.z.partition_point(|&z| z <= zk + reach).max(first);
        let m = last - first;
        self.sel.resize(m, 0);
        self.dist.resize(m, 0.0);
        self.term.resize(m, 0.0);
        let (sel, es, zs) = (&mut self.sel[..m], &mut self.dist[..m], &mut self.term[..m]);
        let mut n = 0;
        for i in first..last {
            let d = self.z[i] - zk;
            let e = beta * self.w[i] * d * d;
            let zsum = self.zsum[i];
            // n < m: at most one store per candidate.
            sel[n] = i as u32;
            es[n] = e;
            zs[n] = zsum;
            // (e and Z are never NaN: the inputs are finite.)
            n += (e <= ZRANGE * ZRANGE && zsum > TINY) as usize;
        }
        let rho = self.rho[k];
        for (z, &e) in zs[..n].iter_mut().zip(&es[..n]) {
            *z = rho * exp_neg(-e) / *z;
        }
        let mut h = [0.0f64; 6];
        for (&i, &p) in sel[..n].iter().zip(&zs[..n]) {
            let i = i as usize;
            let (zi, wi) = (self.z[i], self.w[i]);
            let d = zi - zk;
            // Soft left/right share, so that tracks near the centre count on both sides.
            let arg = d * sqrt_beta * self.sqw[i];
            let (tl, tr) = if arg.abs() < 20.0 {
                let t = (-arg).exp();
                (t / (t + 1.0), 1.0 / (t + 1.0))
            } else if zi < zk {
                (1.0, 0.0)
            } else {
                (0.0, 1.0)
            };
            let w = p * wi;
            h[0] += p * tl;
            h[1] += w * tl * zi;
            h[2] += w * tl;
            h[3] += p * tr;
            h[4] += w * tr * zi;
            h[5] += w * tr;
        }
        h
    }

    /// Splits every prototype with β T_c > `threshold` (highest T_c first) in two, placed at
    /// the weighted means of its tracks on either side. True when one split.
    fn split(&mut self, beta: f64, threshold: f64) -> Result<bool, VertexError> {
        let mut critical: Vec<(f64, usize)> = (0..self.pz.len())
            .filter(|&k| self.tc[k] * beta > threshold)
            .map(|k| (self.tc[k], k))
            .collect();
        // Highest first; equal temperatures keep z order.
        critical.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut split = false;
        for ic in 0..critical.len() {
            let k = critical[ic].1;
            let zk = self.pz[k];
            let [p1, mut z1, w1, p2, mut z2, w2] = self.halves(k, beta);
            z1 = if w1 > 0.0 {
                z1 / w1
            } else {
                zk - SPLIT_EPSILON
            };
            z2 = if w2 > 0.0 {
                z2 / w2
            } else {
                zk + SPLIT_EPSILON
            };
            // Leave room for the neighbours.
            if k > 0 {
                z1 = z1.max(0.6 * zk + 0.4 * self.pz[k - 1]);
            }
            if k + 1 < self.pz.len() {
                z2 = z2.min(0.6 * zk + 0.4 * self.pz[k + 1]);
            }
            if z2 - z1 <= SPLIT_EPSILON {
                continue;
            }
            if self.pz.len() + 1 >= MAX_VERTICES {
                return Err(VertexError::TooManyVertices {
                    n: self.pz.len() + 1,
                    max: MAX_VERTICES - 1,
                });
            }
            split = true;
            self.win_valid = false;
            let (r1, r2) = if p1 + p2 > 0.0 {
                (p1 * self.rho[k] / (p1 + p2), p2 * self.rho[k] / (p1 + p2))
            } else {
                (0.5 * self.rho[k], 0.5 * self.rho[k])
            };
            self.pz[k] = z2;
            self.rho[k] = r2;
            self.sw[k] = w2;
            self.pz.insert(k, z1);
            self.rho.insert(k, r1);
            self.sw.insert(k, w1);
            self.swe.insert(k, 0.0);
            self.tc.insert(k, 0.0);
            for c in critical[ic + 1..].iter_mut() {
                if c.1 > k {
                    c.1 += 1;
                }
            }
        }
        Ok(split)
    }

    /// Removes each prototype with fewer than two unique tracks whose Σ p is the smallest
    /// among such neighbours in z (ties: the first). A prototype's tracks go to its
    /// neighbours, so one per run of neighbours at a time is enough; one in all at a time cost
    /// an update per purge, a third of all updates at ⟨PU⟩ 100. True when one was removed.
    fn purge(&mut self, beta: f64, rho0: f64, zc2: f64) -> bool {
        let nv = self.pz.len();
        if nv < 2 {
            return false;
        }
        let z_init = rho0 * (-beta * zc2).exp();
        let pcut: Vec<f64> = self
            .rho
            .iter()
            .map(|&r| self.cfg.unique_weight * r / (r + z_init))
            .collect();
        let mut sump = vec![0.0f64; nv];
        let mut unique = vec![0u32; nv];
        let sqrt_beta = beta.sqrt();
        for i in 0..self.z.len() {
            if self.zsum[i] <= TINY {
                continue;
            }
            let bw = beta * self.w[i];
            let inv = 1.0 / self.zsum[i];
            for k in self.window(i, sqrt_beta) {
                let d = self.z[i] - self.pz[k];
                let p = self.rho[k] * exp_neg(-bw * d * d) * inv;
                sump[k] += p;
                unique[k] += (p > pcut[k]) as u32;
            }
        }
        // Two neighbours are never both removed, so at least one prototype stays.
        let beats = |k: usize, j: usize| {
            unique[j] >= 2 || sump[k] < sump[j] || (sump[k] == sump[j] && k < j)
        };
        let doomed: Vec<usize> = (0..nv)
            .filter(|&k| {
                unique[k] < 2 && (k == 0 || beats(k, k - 1)) && (k + 1 == nv || beats(k, k + 1))
            })
            .collect();
        for &k in doomed.iter().rev() {
            self.remove(k);
        }
        !doomed.is_empty()
    }
}

/// The inverse temperatures of the cooling down to `t_min`, ending at exactly 1/`t_min`:
/// steps of `cooling_factor` up to `FAST_ABOVE`·`t_min`, of `FAST_COOLING` above, starting
/// above the first critical temperature `t0`.
fn cooling_schedule(cfg: &AnnealingConfig, t0: f64) -> Vec<f64> {
    let beta_max = 1.0 / cfg.t_min;
    let slow = cfg.cooling_factor;
    let fast = FAST_COOLING.min(slow);
    // Whole steps from t_min to above t0, of which at most `slow_max` slow ones.
    let steps_above = |beta: f64, factor: f64| {
        if t0 * beta > 1.0 {
            1 + ((t0 * beta).ln() / -factor.ln()).trunc() as i32
        } else {
            0
        }
    };
    let slow_max = (FAST_ABOVE.ln() / -slow.ln()).ceil() as i32;
    let n_slow = steps_above(beta_max, slow).clamp(1, slow_max);
    let beta_switch = beta_max * slow.powi(n_slow);
    let n_fast = steps_above(beta_switch, fast);
    let mut betas: Vec<f64> = (1..=n_fast)
        .rev()
        .map(|j| beta_switch * fast.powi(j))
        .collect();
    betas.extend((0..=n_slow).rev().map(|j| beta_max * slow.powi(j)));
    betas
}

/// The deterministic-annealing clustering of the selected tracks (z, σ²): per track a
/// prototype index in `0..n_clusters` (numbered in z order) or the noise marker 9997 (an
/// outlier, or a track of a prototype with fewer than two tracks).
pub(crate) fn cluster_annealing(
    zt: &[f32],
    ezt2: &[f32],
    cfg: &AnnealingConfig,
) -> Result<Clusters, VertexError> {
    check_capacity(zt.len())?;
    let nt = zt.len();
    let mut clusters = Clusters {
        iv: vec![IDV_NOISE as i32; nt],
        nn: vec![0; nt],
        n_clusters: 0,
    };
    if nt == 0 {
        return Ok(clusters);
    }
    let s = Schedule {
        beta_purge: 1.0 / cfg.t_purge,
        beta_stop: 1.0 / cfg.t_stop,
        zc2: cfg.z_cutoff * cfg.z_cutoff,
    };
    let (mut a, order) = Annealer::new(cfg, zt, ezt2);
    let zc2 = s.zc2;
    let betas = cooling_schedule(cfg, a.tc[0]);
    let mut beta = betas[0];
    a.thermalize(beta, DELTA_HIGH_T, 0.0, zc2);
    // Cool to t_min, splitting prototypes as they become critical. Each thermalize ends with
    // an update, so the sums that split reads are current; after merges they are
    // approximate (the merged sums), which is good enough above t_min and saves an update.
    for &next in &betas[1..] {
        while a.merge(beta) {}
        a.split(beta, 1.0)?;
        beta = next;
        a.thermalize(beta, DELTA_HIGH_T, 0.0, zc2);
    }
    // At t_min: split what is still critical.
    a.merge_all(beta, 0.0, zc2);
    let mut threshold = 1.0;
    for _ in 0..MAX_FINAL_SPLITS {
        if !a.split(beta, threshold)? {
            break;
        }
        a.thermalize(beta, DELTA_HIGH_T, 0.0, zc2);
        a.merge_all(beta, 0.0, zc2);
        threshold *= 1.1;
    }
    // Outlier rejection, switched on gradually.
    let mut rho0 = 0.0;
    if cfg.z_cutoff > 0.0 {
        rho0 = 1.0 / a.pz.len().max(1) as f64;
        for step in 0..OUTLIER_STEPS {
            a.update(beta, step as f64 * rho0 / OUTLIER_STEPS as f64, zc2);
        }
    }
    a.thermalize(beta, DELTA_LOW_T, rho0, zc2);
    a.merge_all(beta, rho0, zc2);
    while beta < s.beta_purge {
        beta = (beta / cfg.cooling_factor).min(s.beta_purge);
        a.thermalize(beta, DELTA_LOW_T, rho0, zc2);
    }
    while a.purge(beta, rho0, zc2) {
        a.thermalize(beta, DELTA_LOW_T, rho0, zc2);
    }
    let final_cooling = FINAL_COOLING.min(cfg.cooling_factor);
    while beta < s.beta_stop {
        beta = (beta / final_cooling).min(s.beta_stop);
        a.thermalize(beta, DELTA_LOW_T, rho0, zc2);
    }

    let (proto, count) = a.assign(beta, rho0, zc2);
    // Prototypes with enough tracks become vertices, numbered in z order.
    let mut number = vec![u32::MAX; count.len()];
    let mut n = 0u32;
    for (k, &c) in count.iter().enumerate() {
        if c >= MIN_TRACKS {
            number[k] = n;
            n += 1;
        }
    }
    if n as usize >= MAX_VERTICES {
        return Err(VertexError::TooManyVertices {
            n: n as usize,
            max: MAX_VERTICES - 1,
        });
    }
    for (&i, &k) in order.iter().zip(&proto) {
        if k != u32::MAX && number[k as usize] != u32::MAX {
            clusters.iv[i as usize] = number[k as usize] as i32;
        }
    }
    clusters.n_clusters = n;
    Ok(clusters)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Above `t_min` a track between two far prototypes still has a probability (it pulls
    /// them): with a plain cut at a few √T σ it had none and was left out of the update.
    #[test]
    fn annealing_track_in_a_gap_still_counts_above_t_min() {
        let cfg = AnnealingConfig::default();
        let zt = [-1.0f32, -1.0, -1.0, 0.0, 1.0, 1.0, 1.0];
        let ezt2 = [1e-4f32; 7];
        let (mut a, _) = Annealer::new(&cfg, &zt, &ezt2);
        a.pz = vec![-1.0, 1.0];
        a.rho = vec![0.5, 0.5];
        a.sw = vec![0.0; 2];
        a.swe = vec![0.0; 2];
        a.tc = vec![0.0; 2];
        // T = 100: √T σ ≈ 1.2 mm, the gap track is 1 cm from both prototypes.
        let beta = 0.01;
        assert!(beta * cfg.t_min < 0.99);
        a.update(beta, 0.0, 9.0);
        assert!(a.zsum[3] > TINY, "gap track Z = {}", a.zsum[3]);
        // It pulls both prototypes towards it, symmetrically.
        assert!(a.pz[0] > -1.0 && a.pz[1] < 1.0, "{:?}", a.pz);
        assert!((a.pz[0] + a.pz[1]).abs() < 1e-12, "{:?}", a.pz);
    }

    /// Tracks in a few clusters (a deterministic pseudo-random spread), one far outlier, and
    /// prototypes near and between the clusters.
    fn crowded() -> (Vec<f32>, Vec<f32>, Vec<f64>) {
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let (mut zt, mut ezt2) = (Vec::new(), Vec::new());
        for (c, n) in [(-3.0, 40), (-0.2, 60), (-0.1, 30), (0.5, 80), (4.0, 20)] {
            for _ in 0..n {
                let s = 0.002 + 0.05 * next() * next();
                zt.push((c + s * (next() - 0.5) * 3.0) as f32);
                ezt2.push((s * s) as f32);
            }
        }
        zt.push(11.0);
        ezt2.push(1e-6);
        (zt, ezt2, vec![-3.0, -0.21, -0.1, 0.2, 0.5, 0.52, 4.0])
    }

    /// The update as it was written one track at a time (each prototype's sums in track
    /// order): positions, masses, Σ p w, Σ p w² d², T_c, and each track's Z.
    fn update_one_track_at_a_time(a: &Annealer, beta: f64, z_init: f64) -> [Vec<f64>; 6] {
        let nv = a.pz.len();
        let [mut se, mut sw, mut swz, mut swe] = [(); 4].map(|_| vec![0.0f64; nv]);
        let mut zsum = vec![0.0f64; a.z.len()];
        for (i, zsum_i) in zsum.iter_mut().enumerate() {
            let ks: Vec<u32> = (a.lo[i]..a.hi[i]).collect();
            let (zi, wi) = (a.z[i], a.w[i]);
            let bw = beta * wi;
            let terms: Vec<f64> = ks
                .iter()
                .map(|&k| {
                    let d = zi - a.pz[k as usize];
                    a.rho[k as usize] * exp_neg(-bw * d * d)
                })
                .collect();
            let mut zs = z_init;
            for &t in &terms {
                zs += t;
            }
            *zsum_i = zs;
            if zs > TINY {
                let inv = 1.0 / zs;
                let (wz, ww) = (wi * zi, wi * wi);
                for (&k, &t) in ks.iter().zip(&terms) {
                    let k = k as usize;
                    let p = t * inv;
                    let d = zi - a.pz[k];
                    se[k] += p;
                    sw[k] += p * wi;
                    swz[k] += p * wz;
                    swe[k] += p * ww * d * d;
                }
            }
        }
        let pz: Vec<f64> = (0..nv)
            .map(|k| if sw[k] > 0.0 { swz[k] / sw[k] } else { a.pz[k] })
            .collect();
        let tc = (0..nv)
            .map(|k| {
                if sw[k] > 0.0 {
                    2.0 * swe[k] / sw[k]
                } else {
                    0.0
                }
            })
            .collect();
        let rho = se.iter().map(|&v| v * (1.0 / a.z.len() as f64)).collect();
        [pz, rho, sw, swe, tc, zsum]
    }

    /// The split's sums as they were written, one candidate track at a time with a branch.
    fn halves_one_track_at_a_time(a: &Annealer, k: usize, beta: f64) -> [f64; 6] {
        let sqrt_beta = beta.sqrt();
        let zk = a.pz[k];
        let mut h = [0.0f64; 6];
        for i in 0..a.z.len() {
            let (zi, wi) = (a.z[i], a.w[i]);
            let d = zi - zk;
            let e = beta * wi * d * d;
            if e > ZRANGE * ZRANGE || a.zsum[i] <= TINY {
                continue;
            }
            let arg = d * sqrt_beta * a.sqw[i];
            let (tl, tr) = if arg.abs() < 20.0 {
                let t = (-arg).exp();
                (t / (t + 1.0), 1.0 / (t + 1.0))
            } else if zi < zk {
                (1.0, 0.0)
            } else {
                (0.0, 1.0)
            };
            let p = a.rho[k] * exp_neg(-e) / a.zsum[i];
            let w = p * wi;
            h[0] += p * tl;
            h[1] += w * tl * zi;
            h[2] += w * tl;
            h[3] += p * tr;
            h[4] += w * tr * zi;
            h[5] += w * tr;
        }
        h
    }

    /// The update over all window pairs at once (AVX2 where the CPU has it) and the split's
    /// branch-free sums give the same bits as the one-track-at-a-time loops they replaced,
    /// above and below `t_min`, with and without the outlier term.
    #[test]
    fn annealing_batched_sums_match_one_track_at_a_time_bit_for_bit() {
        let cfg = AnnealingConfig::default();
        let (zt, ezt2, protos) = crowded();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (beta, rho0) in [
            (0.002, 0.0),
            (0.05, 0.0),
            (0.25, 0.0),
            (0.25, 0.1),
            (2.0, 0.1),
        ] {
            let (mut a, _) = Annealer::new(&cfg, &zt, &ezt2);
            let nv = protos.len();
            a.pz = protos.clone();
            a.rho = vec![1.0 / nv as f64; nv];
            a.sw = vec![0.0; nv];
            a.swe = vec![0.0; nv];
            a.tc = vec![0.0; nv];
            a.set_windows(beta);
            let z_init = rho0 * (-beta * 9.0f64).exp();
            let want = update_one_track_at_a_time(&a, beta, z_init);
            assert!(want[0].windows(2).all(|p| p[0] <= p[1]), "{:?}", want[0]);
            a.update(beta, rho0, 9.0);
            let got = [&a.pz, &a.rho, &a.sw, &a.swe, &a.tc, &a.zsum];
            for (name, (g, w)) in ["z", "rho", "sw", "swe", "tc", "Z"]
                .iter()
                .zip(got.iter().zip(&want))
            {
                assert_eq!(bits(g), bits(w), "{name} at beta {beta}, rho0 {rho0}");
            }
            // From t_min down the outlier is in no window: Z is the outlier term alone (0, so
            // that the track is left out of the sums, without it).
            if beta * cfg.t_min >= 1.0 {
                assert_eq!(a.zsum[a.z.len() - 1], z_init, "{beta}");
            }
            for k in 0..nv {
                let want = halves_one_track_at_a_time(&a, k, beta);
                assert_eq!(
                    bits(&a.halves(k, beta)),
                    bits(&want),
                    "prototype {k}, beta {beta}"
                );
            }
        }
    }

    /// Many wide tracks over many prototypes: the update works in blocks of window pairs, so
    /// its scratch stays near `PAIR_BLOCK` pairs (not tracks × prototypes), with the same bits
    /// as one track at a time across the block boundaries.
    #[test]
    fn annealing_update_scratch_is_bounded_by_the_pair_block() {
        let cfg = AnnealingConfig::default();
        let n = 3000;
        let zt: Vec<f32> = (0..n).map(|i| -5.0 + 10.0 * i as f32 / n as f32).collect();
        let ezt2 = vec![4.0f32; n];
        let (mut a, _) = Annealer::new(&cfg, &zt, &ezt2);
        let nv = 200;
        a.pz = (0..nv)
            .map(|k| -5.0 + 10.0 * k as f64 / nv as f64)
            .collect();
        a.rho = vec![1.0 / nv as f64; nv];
        a.sw = vec![0.0; nv];
        a.swe = vec![0.0; nv];
        a.tc = vec![0.0; nv];
        let beta = 1.0 / cfg.t_min;
        a.set_windows(beta);
        let pairs: usize = (0..n).map(|i| (a.hi[i] - a.lo[i]) as usize).sum();
        assert_eq!(pairs, n * nv, "every track sees every prototype");
        let want = update_one_track_at_a_time(&a, beta, 0.0);
        a.update(beta, 0.0, 9.0);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.zsum), bits(&want[5]));
        assert_eq!(bits(&a.sw), bits(&want[2]));
        assert_eq!(bits(&a.swe), bits(&want[3]));
        assert!(a.dist.capacity() < n * nv / 10, "{}", a.dist.capacity());
    }

    /// The cooling lands on `t_min` exactly, starts above the first critical temperature, and
    /// cools by `FAST_COOLING` only above `FAST_ABOVE`·`t_min`.
    #[test]
    fn annealing_schedule_cools_fast_only_far_above_t_min() {
        let cfg = AnnealingConfig::default();
        let t0 = 1e6;
        let betas = cooling_schedule(&cfg, t0);
        assert_eq!(*betas.last().unwrap(), 1.0 / cfg.t_min);
        assert!(betas[0] * t0 < 1.0, "{betas:?}");
        // Fast steps first, all above FAST_ABOVE·t_min; then slow ones, none from far above.
        let mut fast = 0;
        for (k, p) in betas.windows(2).enumerate() {
            let (factor, t) = (p[0] / p[1], 1.0 / p[0]);
            if (factor - FAST_COOLING).abs() < 1e-12 {
                assert!(k == fast && t > FAST_ABOVE * cfg.t_min, "{betas:?}");
                fast += 1;
            } else {
                assert!((factor - cfg.cooling_factor).abs() < 1e-12, "{betas:?}");
                assert!(t * cfg.cooling_factor < FAST_ABOVE * cfg.t_min, "{betas:?}");
            }
        }
        let all_slow = 1 + ((t0 / cfg.t_min).ln() / -cfg.cooling_factor.ln()).ceil() as usize;
        assert!(
            fast > 0 && betas.len() < all_slow,
            "{} {all_slow}",
            betas.len()
        );
        // Below t_min at the start: one step.
        let cold = cooling_schedule(&cfg, 1.0);
        assert_eq!(cold, vec![cfg.cooling_factor / cfg.t_min, 1.0 / cfg.t_min]);
    }

    /// A purge removes every prototype without unique tracks that is not beside a smaller
    /// one, in one pass: of two empty neighbours only the first.
    #[test]
    fn annealing_purge_removes_separated_prototypes_together() {
        let cfg = AnnealingConfig::default();
        let mut zt = Vec::new();
        for z in [-1.0f32, 0.0, 1.0] {
            zt.extend([z; 5]);
        }
        let ezt2 = vec![1e-4f32; zt.len()];
        let (mut a, _) = Annealer::new(&cfg, &zt, &ezt2);
        a.pz = vec![-1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 2.05];
        let nv = a.pz.len();
        a.rho = vec![1.0 / nv as f64; nv];
        a.sw = vec![0.0; nv];
        a.swe = vec![0.0; nv];
        a.tc = vec![0.0; nv];
        let beta = 1.0 / cfg.t_min;
        a.update(beta, 0.0, 9.0);
        assert!(a.purge(beta, 0.0, 9.0));
        assert_eq!(a.pz, vec![-1.0, 0.0, 1.0, 2.05]);
        // Then the last empty one; the three with tracks stay.
        assert!(a.purge(beta, 0.0, 9.0));
        assert_eq!(a.pz, vec![-1.0, 0.0, 1.0]);
        assert!(!a.purge(beta, 0.0, 9.0));
    }
}
