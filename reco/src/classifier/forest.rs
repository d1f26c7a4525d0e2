//! The model's trees laid out for evaluating [`LANES`] tracks at once.
//!
//! A tree of at most 64 leaves is evaluated as bit masks (the "QuickScorer" scheme): its
//! leaves are numbered left to right (leaf `i` is bit `63 − i`), every split whose
//! comparison sends the track right removes the leaves of its left subtree from the track's
//! mask, and the track's leaf is the leftmost one left (the mask's leading zeros). So every
//! split of the tree is compared for all lanes with the same feature and threshold — no
//! walk, no data-dependent loads, and the loop vectorizes — and the leaf is the one the
//! walk of [`super::model::Tree::leaf`] reaches: that leaf is in no removed subtree (the
//! walk went left at each split above it whose left subtree holds it), and every leaf left
//! of it is in the left subtree of a split on its path where the walk went right. Larger
//! trees (only a hand-made file has them) are walked node by node.

use super::model::Tree;

/// Tracks evaluated together (a chunk): a split's threshold and mask are loaded once for
/// four AVX-512 registers of features.
pub const LANES: usize = 64;

/// Most leaves of a tree evaluated as bit masks (one u64 per track).
const MAX_MASK_LEAVES: usize = 64;

/// A split of a masked tree: a track with `!(x[feature] ≤ threshold)` goes right, so its
/// leaf is none of the left subtree's, whose bits `mask` lacks.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Split<B> {
    /// `feature · LANES`: where the feature's values start in a chunk.
    offset: u32,
    /// The largest f32 ≤ the file's f64 threshold: for an f32 feature `x`, `x ≤ it` exactly
    /// when `x as f64 ≤ threshold`, so the comparison stays in f32 with the same result.
    threshold: f32,
    mask: B,
}

/// A track's leaf mask: u64, or u32 for trees of at most 32 leaves (twice the tracks per
/// register; leaf `i` is then bit `31 − i`).
trait Bits: Copy {
    const ALL: Self;
    /// `self & mask`, unless `left`: arithmetic, not a branch, so that it vectorizes.
    fn and_unless(self, mask: Self, left: bool) -> Self;
    /// The leftmost leaf left.
    fn leaf(self) -> usize;
}

impl Bits for u64 {
    const ALL: u64 = u64::MAX;
    #[inline(always)]
    fn and_unless(self, mask: u64, left: bool) -> u64 {
        self & (mask | (left as u64).wrapping_neg())
    }
    #[inline(always)]
    fn leaf(self) -> usize {
        self.leading_zeros() as usize % MAX_MASK_LEAVES
    }
}

impl Bits for u32 {
    const ALL: u32 = u32::MAX;
    #[inline(always)]
    fn and_unless(self, mask: u32, left: bool) -> u32 {
        self & (mask | (left as u32).wrapping_neg())
    }
    #[inline(always)]
    fn leaf(self) -> usize {
        self.leading_zeros() as usize % 32
    }
}

/// Adds the leaf value of a masked tree (`splits`, leaf values `values`) to `raw[l]` for
/// every lane `l` of `chunk`.
#[inline(always)]
fn add_masked<B: Bits>(splits: &[Split<B>], values: &[f64], chunk: &[f32], raw: &mut [f64]) {
    let mut bits = [B::ALL; LANES];
    for s in splits {
        let x: &[f32; LANES] = chunk[s.offset as usize..][..LANES].try_into().unwrap();
        for (b, &x) in bits.iter_mut().zip(x) {
            *b = b.and_unless(s.mask, x <= s.threshold);
        }
    }
    for (r, b) in raw.iter_mut().zip(bits) {
        *r += values[b.leaf()];
    }
}

/// A node of a walked tree: left when `x[feature] ≤ threshold`; a leaf points to itself
/// (every walk can take the tree's depth in steps) and has its value in `Forest::value`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Node {
    offset: u32,
    threshold: f32,
    left: u32,
    right: u32,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// Splits `split..end` of `Forest::splits`, leaf values `Forest::leaves[leaf]`.
    Masked { split: u32, end: u32, leaf: u32 },
    /// The same, of `Forest::splits32`.
    Masked32 { split: u32, end: u32, leaf: u32 },
    /// Nodes from `root` of `Forest::nodes`, walked `depth` steps.
    Walked { depth: u32, root: u32 },
}

/// The trees of a model, in file order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Forest {
    layouts: Vec<Layout>,
    splits: Vec<Split<u64>>,
    splits32: Vec<Split<u32>>,
    leaves: Vec<[f64; MAX_MASK_LEAVES]>,
    nodes: Vec<Node>,
    value: Vec<f64>,
    /// Values per track a chunk holds: `LANES` × the number of features.
    chunk_len: usize,
}

/// The largest f32 not above `t` (`t` finite).
pub fn f32_at_most(t: f64) -> f32 {
    let r = t as f32;
    if (r as f64) <= t {
        return r;
    }
    // Rounded up: step one f32 down (r is not −∞ here, and NaN was refused).
    if r == 0.0 {
        -f32::from_bits(1)
    } else if r > 0.0 {
        f32::from_bits(r.to_bits() - 1)
    } else {
        f32::from_bits(r.to_bits() + 1)
    }
}

/// Leaves under the root, counting a node reached along several paths once per path (a
/// validated file may share a subtree), saturating above [`MAX_MASK_LEAVES`].
fn leaves_under_root(t: &Tree) -> usize {
    let mut under = vec![0usize; t.feature.len()];
    // Children come after their parents: count from the last node back.
    for k in (0..under.len()).rev() {
        under[k] = if t.feature[k] < 0 {
            1
        } else {
            (under[t.left[k] as usize] + under[t.right[k] as usize]).min(MAX_MASK_LEAVES + 1)
        };
    }
    under[0]
}

/// Longest path from the root, in steps.
fn depth(t: &Tree) -> u32 {
    let mut depth = vec![0u32; t.feature.len()];
    for k in 0..depth.len() {
        if t.feature[k] >= 0 {
            // The longest of the paths into a shared node.
            for c in [t.left[k] as usize, t.right[k] as usize] {
                depth[c] = depth[c].max(depth[k] + 1);
            }
        }
    }
    depth.into_iter().max().unwrap_or(0)
}

impl Forest {
    /// The trees laid out for a model of `n_features` features.
    pub fn new(trees: &[Tree], n_features: usize) -> Forest {
        let mut f = Forest {
            chunk_len: n_features * LANES,
            ..Forest::default()
        };
        for t in trees {
            let n_leaves = leaves_under_root(t);
            if n_leaves <= MAX_MASK_LEAVES {
                let (mut splits, mut leaves) = (Vec::new(), [0.0; MAX_MASK_LEAVES]);
                number(t, 0, &mut 0, &mut splits, &mut leaves);
                let leaf = f.leaves.len() as u32;
                f.leaves.push(leaves);
                f.layouts.push(if n_leaves <= 32 {
                    // Leaves 0..32 are bits 63..32: the upper half.
                    let split = f.splits32.len() as u32;
                    f.splits32.extend(splits.iter().map(|s| Split {
                        offset: s.offset,
                        threshold: s.threshold,
                        mask: (s.mask >> 32) as u32,
                    }));
                    let end = f.splits32.len() as u32;
                    Layout::Masked32 { split, end, leaf }
                } else {
                    let split = f.splits.len() as u32;
                    f.splits.extend(splits);
                    let end = f.splits.len() as u32;
                    Layout::Masked { split, end, leaf }
                });
            } else {
                f.push_walked(t);
            }
        }
        f
    }

    fn push_walked(&mut self, t: &Tree) {
        let base = self.nodes.len() as u32;
        self.layouts.push(Layout::Walked {
            depth: depth(t),
            root: base,
        });
        for k in 0..t.feature.len() {
            let me = base + k as u32;
            let leaf = t.feature[k] < 0;
            self.nodes.push(if leaf {
                Node {
                    offset: 0,
                    threshold: 0.0,
                    left: me,
                    right: me,
                }
            } else {
                Node {
                    offset: t.feature[k] as u32 * LANES as u32,
                    threshold: f32_at_most(t.threshold[k]),
                    left: base + t.left[k],
                    right: base + t.right[k],
                }
            });
            self.value.push(if leaf { t.value[k] } else { 0.0 });
        }
    }

    /// Adds every tree's leaf value, in tree order, to `raw[l]` for the track in lane `l`
    /// of `chunk` (its feature `f` at `chunk[f · LANES + l]`).
    pub fn add_chunk(&self, chunk: &[f32], raw: &mut [f64; LANES]) {
        assert_eq!(chunk.len(), self.chunk_len, "a chunk of every feature");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512cd")
        {
            // SAFETY: the CPU has AVX-512F and CD.
            return unsafe { self.add_chunk_avx512(chunk, raw) };
        } else if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { self.add_chunk_avx2(chunk, raw) };
        }
        self.add_chunk_any(chunk, raw)
    }

    /// [`Forest::add_chunk`] compiled for AVX-512: a split is a compare of 16 values into a
    /// mask register and two masked ANDs per register of features, a leaf a leading-zero
    /// count (CD). Integer and compare operations only, and each track's f64 sum still in
    /// tree order, so the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512cd")]
    unsafe fn add_chunk_avx512(&self, chunk: &[f32], raw: &mut [f64; LANES]) {
        self.add_chunk_any(chunk, raw)
    }

    /// [`Forest::add_chunk`] compiled for AVX2, see [`Forest::add_chunk_avx512`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn add_chunk_avx2(&self, chunk: &[f32], raw: &mut [f64; LANES]) {
        self.add_chunk_any(chunk, raw)
    }

    #[inline(always)]
    fn add_chunk_any(&self, chunk: &[f32], raw: &mut [f64; LANES]) {
        for layout in &self.layouts {
            match *layout {
                Layout::Masked { split, end, leaf } => {
                    let splits = &self.splits[split as usize..end as usize];
                    add_masked(splits, &self.leaves[leaf as usize], chunk, raw);
                }
                Layout::Masked32 { split, end, leaf } => {
                    let splits = &self.splits32[split as usize..end as usize];
                    add_masked(splits, &self.leaves[leaf as usize], chunk, raw);
                }
                Layout::Walked { depth, root } => {
                    let mut k = [root as usize; LANES];
                    for _ in 0..depth {
                        for (l, k) in k.iter_mut().enumerate() {
                            let n = self.nodes[*k];
                            let left = chunk[n.offset as usize + l] <= n.threshold;
                            *k = if left { n.left } else { n.right } as usize;
                        }
                    }
                    for (r, &k) in raw.iter_mut().zip(&k) {
                        *r += self.value[k];
                    }
                }
            }
        }
    }
}

/// Numbers the leaves under node `k` from `*next` on, left to right, writing their values
/// into `leaves` and the splits (with the masks of their left subtrees) into `splits`. The
/// tree has at most [`MAX_MASK_LEAVES`] leaves, so at most as many levels of recursion.
fn number(t: &Tree, k: usize, next: &mut usize, splits: &mut Vec<Split<u64>>, leaves: &mut [f64]) {
    if t.feature[k] < 0 {
        leaves[*next] = t.value[k];
        *next += 1;
        return;
    }
    let at = splits.len();
    splits.push(Split {
        offset: t.feature[k] as u32 * LANES as u32,
        threshold: f32_at_most(t.threshold[k]),
        mask: u64::MAX,
    });
    let first = *next;
    number(t, t.left[k] as usize, next, splits, leaves);
    // Leaves first..*next are the left subtree's: at most 63, the right has one.
    let n = *next - first;
    splits[at].mask = !((((1u64 << n) - 1) << first).reverse_bits());
    number(t, t.right[k] as usize, next, splits, leaves);
}

#[cfg(test)]
mod tests {
    use super::*;

    const NF: usize = 5;

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: usize) -> usize {
            self.next() as usize % n
        }
    }

    /// A tree grown by splitting random leaves until it has `leaves` leaves; thresholds
    /// from {-1, -0.5, 0, 0.5, 1} so that features hit them exactly.
    fn grown(rng: &mut Rng, leaves: usize) -> Tree {
        let mut t = Tree {
            feature: vec![-1],
            threshold: vec![0.0],
            left: vec![0],
            right: vec![0],
            value: vec![0.5],
        };
        let mut open = vec![0usize];
        while open.len() < leaves {
            let k = open.swap_remove(rng.below(open.len()));
            let n = t.feature.len();
            t.feature[k] = rng.below(NF) as i32;
            t.threshold[k] = rng.below(5) as f64 * 0.5 - 1.0;
            (t.left[k], t.right[k]) = (n as u32, n as u32 + 1);
            for _ in 0..2 {
                t.feature.push(-1);
                t.threshold.push(0.0);
                t.left.push(0);
                t.right.push(0);
                t.value.push(rng.below(1000) as f64 / 64.0 - 7.0);
            }
            open.extend([n, n + 1]);
        }
        t
    }

    /// Node j splits to j + 1 and j + 2, the last two are leaves: subtrees shared along
    /// Fibonacci-many paths, and the longest path is not the last-written one.
    fn ladder(n: usize) -> Tree {
        let split = |j: usize| j + 2 < n;
        Tree {
            feature: (0..n)
                .map(|j| if split(j) { (j % NF) as i32 } else { -1 })
                .collect(),
            threshold: (0..n).map(|j| (j % 3) as f64 * 0.5 - 0.5).collect(),
            left: (0..n)
                .map(|j| if split(j) { j as u32 + 1 } else { 0 })
                .collect(),
            right: (0..n)
                .map(|j| if split(j) { j as u32 + 2 } else { 0 })
                .collect(),
            value: (0..n).map(|j| j as f64 * 0.25 - 1.0).collect(),
        }
    }

    fn rows(rng: &mut Rng, n: usize) -> Vec<f32> {
        let special = [
            f32::NAN,
            f32::INFINITY,
            -f32::INFINITY,
            -0.0,
            0.0,
            0.5,
            -1.0,
            1.0,
        ];
        (0..n * NF)
            .map(|_| match rng.below(3) {
                0 => special[rng.below(special.len())],
                1 => rng.below(9) as f32 * 0.25 - 1.0,
                _ => (rng.below(1 << 20) as f32 / (1 << 19) as f32 - 1.0) * 1.5,
            })
            .collect()
    }

    /// Every compiled variant of the chunk evaluation gives, bit for bit, the sums of the
    /// trees' own walks in tree order.
    fn check(trees: &[Tree], x: &[f32]) {
        let forest = Forest::new(trees, NF);
        let n = x.len() / NF;
        for rows in (0..n).collect::<Vec<_>>().chunks(LANES) {
            let mut chunk = vec![0f32; NF * LANES];
            for (l, &r) in rows.iter().enumerate() {
                for f in 0..NF {
                    chunk[f * LANES + l] = x[r * NF + f];
                }
            }
            let mut variants = vec![[0.25f64; LANES]; 2];
            forest.add_chunk(&chunk, &mut variants[0]);
            forest.add_chunk_any(&chunk, &mut variants[1]);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                let mut raw = [0.25f64; LANES];
                // SAFETY: the CPU has AVX2.
                unsafe { forest.add_chunk_avx2(&chunk, &mut raw) };
                variants.push(raw);
            }
            for (l, &r) in rows.iter().enumerate() {
                let row = &x[r * NF..(r + 1) * NF];
                let mut want = 0.25f64;
                for t in trees {
                    want += t.leaf(row);
                }
                for v in &variants {
                    assert_eq!(v[l].to_bits(), want.to_bits(), "row {r}");
                }
            }
        }
    }

    #[test]
    fn chunks_score_as_the_walks() {
        let mut rng = Rng(7);
        let x = rows(&mut rng, 300);
        let trees: Vec<Tree> = [1, 2, 3, 17, 32, 33, 64, 65, 200]
            .iter()
            .map(|&n| grown(&mut rng, n))
            .collect();
        let f = Forest::new(&trees, NF);
        let kind = |l: &Layout| match l {
            Layout::Masked32 { .. } => 32,
            Layout::Masked { .. } => 64,
            Layout::Walked { .. } => 0,
        };
        let kinds: Vec<i32> = f.layouts.iter().map(kind).collect();
        assert_eq!(kinds, [32, 32, 32, 32, 32, 64, 64, 0, 0]);
        check(&trees, &x);
    }

    #[test]
    fn shared_subtrees_score_as_the_walks() {
        // 8 nodes: 21 paths (masked, the shared nodes once per path); 14: 377 (walked).
        let trees = [ladder(8), ladder(14), ladder(3)];
        assert_eq!(leaves_under_root(&trees[0]), 21);
        assert_eq!(leaves_under_root(&trees[1]), MAX_MASK_LEAVES + 1);
        assert_eq!(depth(&trees[1]), 12);
        let mut rng = Rng(11);
        check(&trees, &rows(&mut rng, 200));
    }

    #[test]
    fn f32_thresholds_compare_as_the_f64_ones() {
        for t in [
            0.1f64, -0.1, 0.0, 1e-50, -1e-50, 3.5, 1e39, -1e39, 16777217.0,
        ] {
            let r = f32_at_most(t);
            assert!((r as f64) <= t, "{t}");
            // The next f32 up is above t.
            let up = if r == 0.0 && r.is_sign_negative() {
                0.0
            } else if r >= 0.0 {
                f32::from_bits(r.to_bits() + 1)
            } else {
                f32::from_bits(r.to_bits() - 1)
            };
            assert!(up as f64 > t || r == f32::MAX, "{t}: {r} {up}");
        }
    }
}
