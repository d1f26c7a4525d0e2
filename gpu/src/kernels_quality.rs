//! CUDA C source of the track classification and cleaning (`track_quality`), compiled by
//! NVRTC with the other kernel modules (same prelude, `--fmad=false`).
//!
//! One block per event. The classification (χ² against the pT-dependent cut, the region
//! cuts) runs one thread per tuple, and the late fishbone's cleaner (tuples through a
//! killed cell become bad: every write is the same value) one thread per cell.
//!
//! The fast duplicate remover reads what it writes (a tuple marked dup in one cell can no
//! longer win the next), so its result depends on the cell order. It runs in parallel
//! anyway and gives the CPU's sequential result exactly: each cell depends only on earlier
//! cells, so the kernel iterates "each cell's winner, given the earliest cell that rejected
//! each tuple" and "each tuple's earliest rejection, given the winners" over all cells at
//! once until no winner changes — the unique fixed point, which is the sequential answer
//! (see the kernel's comment; [`QX_ROUNDS`] rounds at most, then the CPU's loop on one
//! thread). The triplet cleaner (hit by hit, over the hit → loose tuples map) only writes
//! "dup" and never reads a value that a write changes, so its hits run in parallel, with
//! the CPU's tie rule. An event's codes and |tip| sit in shared memory when it has at most
//! [`QX_SH`] tuples. The reference's CUDA version runs both cleaners in parallel and is not
//! deterministic; this one equals the CPU step. The cells' tuple lists (which the `ca_cells`
//! product does not carry) are built on the device from the tuples' cells, with the CA
//! module's `ct_*` kernels.

/// Threads per block (one block per event).
pub const QX_BLOCK: u32 = 512;

/// Tuples of an event whose quality codes and |tip| the kernel keeps in shared memory
/// (5 bytes each, within the 48 KiB of static shared memory per block).
pub const QX_SH: usize = 9216;

/// Parallel rounds of the duplicate remover before an event falls back to the sequential
/// loop (the test data settle in a few).
pub const QX_ROUNDS: u32 = 64;

/// Floats of the classification cuts (`qx_classify`'s `cuts` argument): the χ² cubic's
/// four coefficients, its pT ceiling and scale, then max |tip|, min pT, max |zip| for
/// triplets and for longer tuples.
pub const QX_CUTS: usize = 12;

/// The cuts table of a quality configuration, in [`QX_CUTS`] order.
///
/// ```
/// use quiver_gpu::kernels_quality::{cuts_table, QX_CUTS};
/// use quiver_reco::tracks::QualityConfig;
/// let t = cuts_table(&QualityConfig::default());
/// assert_eq!((t.len(), t[4], t[5], t[6]), (QX_CUTS, 10.0, 30.0, 0.3));
/// ```
pub fn cuts_table(q: &quiver_reco::tracks::QualityConfig) -> Vec<f32> {
    let mut t = q.chi2_coeff.to_vec();
    t.extend_from_slice(&[q.chi2_max_pt, q.chi2_scale]);
    for r in [&q.triplet, &q.quadruplet] {
        t.extend_from_slice(&[r.max_tip, r.min_pt, r.max_zip]);
    }
    t
}

/// The classification and cleaning kernel module.
pub const QUALITY: &str = include_str!("../kernels/track_quality.cu");

/// The kernel functions of [`QUALITY`].
pub const QUALITY_KERNELS: &[&str] = &["qx_quality"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_and_the_host_agree_on_the_codes() {
        use quiver_reco::vertices::quality::{BAD, DUP, LOOSE};
        for (name, v) in [
            ("QX_BAD", BAD as u32),
            ("QX_DUP", DUP as u32),
            ("QX_LOOSE", LOOSE as u32),
            ("QX_BLOCK", QX_BLOCK),
        ] {
            assert!(QUALITY.contains(&format!("#define {name} {v}\n")), "{name}");
        }
        assert!(QUALITY.contains(&format!("#define QX_SH {QX_SH}\n")));
    }
}
