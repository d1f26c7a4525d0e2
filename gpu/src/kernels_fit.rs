//! CUDA C source of the helix fits (`track_fit`), compiled by NVRTC with the other kernel
//! modules (same prelude, `--fmad=false`, IEEE division and square root).
//!
//! One thread per fit job (a tuple the CPU fit takes, [`quiver_reco::tracks::fit_jobs`]):
//! it gathers its 3 to 5 hits from the hits' device columns, rotates their covariances with
//! the module frames (f32, as the CPU), and runs the CPU's fit operation by operation: the
//! Broken Line (`track_fit_bl`, the CPU's `broken_line_fit`: the sums of the small matrix
//! products grouped as the CPU groups them, Eigen's order, and the unrolled Cholesky
//! inversion) or the Riemann fit (`track_fit_riemann`, the CPU's `riemann_fit`: its dynamic
//! matrices in fixed 10×10 storage with the same index-order sums, the closed-form 3×3
//! eigen-solver in f64 and, for the numerical Jacobian, in f32). No contraction into fused
//! multiply-adds. Each writes the fit's values in f32 ([`FIT_OUT`] floats per job, the
//! CPU's `FitValues`: what the tracks keep, 64 bytes where the raw doubles are 128), and on
//! request the raw doubles too (the emulation tests compare them with the CPU's fit); the
//! host stores the values with the CPU's own `store_values` (so η's `asinhf` is the C
//! library's).
//!
//! The transcendental functions (`log`, `atan`, `atan2`, `sin`, `cos`, and their f32 forms
//! in the Riemann fit's Jacobian) are the device's (CUDA's libdevice, at most 1–2 ulp from
//! the correctly rounded value), not the C library's: run on the host (the emulation tests,
//! compiled against the C library) the kernels equal the CPU step bit for bit; on a GPU
//! their doubles can differ in the last bits, which the f32 products almost always round
//! away (see docs/decisions/0027-gpu-track-fit.md).

/// Floats the fit kernels write per job: the CPU's `FitValues` (state, kept covariance
/// terms, pT, χ²/ndof). Their optional raw output has as many doubles: circle (φ, d, κ),
/// its covariance (00, 01, 02, 11, 12, 22), line (cotθ, zip), its covariance (00, 01, 11),
/// the line χ², the circle χ² (an f32 widened).
pub const FIT_OUT: usize = quiver_reco::tracks::fit::FitValues::LEN;

/// Hit slots per job in the job table (unused slots of shorter jobs are never read).
pub const FIT_HITS: usize = 5;

/// Floats per module in the frame table: the first six elements of the rotation (xx, xy,
/// xz, yx, yy, yz), all the covariance rotation reads.
pub const FRAME_FLOATS: usize = 6;

/// The frame table of the fit kernel from the CPE parameters' module frames.
///
/// ```
/// use quiver_gpu::kernels_fit::{frame_table, FRAME_FLOATS};
/// let cpe = quiver_reco::tracks::testing::HitBuilder::cpe_params();
/// let t = frame_table(&cpe);
/// assert_eq!(t.len(), cpe.det.len() * FRAME_FLOATS);
/// assert_eq!(&t[..FRAME_FLOATS], &cpe.det[0].frame.r[..FRAME_FLOATS]);
/// ```
pub fn frame_table(cpe: &quiver_formats::conditions::CpeParams) -> Vec<f32> {
    cpe.det
        .iter()
        .flat_map(|d| d.frame.r[..FRAME_FLOATS].iter().copied())
        .collect()
}

/// The fit kernel module: the Broken Line (`track_fit_bl`) and the Riemann fit
/// (`track_fit_riemann`).
pub const TRACK_FIT: &str = include_str!("../kernels/track_fit.cu");

/// The kernel functions of [`TRACK_FIT`].
pub const TRACK_FIT_KERNELS: &[&str] = &[
    "track_fit_bl",
    "track_fit_riemann",
    "fit_job_hits",
    "fit_scatter",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_and_the_host_agree_on_the_layout() {
        for (name, v) in [("TF_OUT", FIT_OUT), ("TF_HITS", FIT_HITS)] {
            assert!(
                TRACK_FIT.contains(&format!("#define {name} {v}\n")),
                "{name}"
            );
        }
        assert!(TRACK_FIT.contains(&format!("frames + {FRAME_FLOATS} * ")));
    }
}
