//! CUDA C source of the vertex finder (`vertices`), compiled by NVRTC with the other kernel
//! modules (same prelude, `--fmad=false`).
//!
//! One block per event, on the tracks the host selected (the CPU's `select_tracks`, with its
//! checks). The parts that cost O(tracks × window) run one thread per track: the neighbour
//! counts; for the density clustering each track's pointer to its nearest denser neighbour
//! (the last candidate at the minimal distance in the CPU's window order), for DBSCAN each
//! core's pointer to the first core of smallest z; the walk to each tree's root; the edge
//! tracks' attachment to their nearest core (DBSCAN, iterative). The parts whose result
//! depends on an order run on the block's first thread in the CPU's order, as the CPU runs
//! them: the z histogram (bins filled from their end in track order), the iterative
//! clustering's label propagation, the numbering of the proto-vertices in track order, the
//! two fits and the split (f32 sums in track order), Σ pT². The Σ pT² order is each
//! vertex's rank in the CPU's stable sort (`total_cmp`, ties by index), one thread per
//! vertex.
//!
//! Outputs, per event (vertex slots at the event's selected-track offset: an event has at
//! most as many vertices as selected tracks): the vertex or marker of every selected track,
//! the vertices' fit, Σ pT² and order, the vertex count, and an error flag (the CPU's
//! capacity errors: 1 024 proto-vertices or vertices), on which the host hands the batch to
//! the CPU step for its message.

/// Threads per block (one block per event).
pub const VX_BLOCK: u32 = 256;

/// Entries per event of the histogram offsets (256 bins and the end).
pub const VX_BIN_OFFSETS: usize = quiver_reco::vertices::Z_BINS + 1;

/// The vertex finder kernel module.
pub const VERTICES: &str = include_str!("../kernels/vertices.cu");

/// The kernel functions of [`VERTICES`].
pub const VERTICES_KERNELS: &[&str] = &["vx_find"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_and_the_host_agree_on_the_constants() {
        use quiver_reco::vertices::{IDV_DETACHED, IDV_NOISE, MAX_SPLIT_TRACKS, MAX_VERTICES};
        for (name, v) in [
            ("VX_NBINS", VX_BIN_OFFSETS - 1),
            ("VX_MAX_VERTICES", MAX_VERTICES),
            ("VX_MAX_SPLIT", MAX_SPLIT_TRACKS),
            ("VX_NOISE", IDV_NOISE as usize),
            ("VX_DETACHED", IDV_DETACHED as usize),
        ] {
            assert!(
                VERTICES.contains(&format!("#define {name} {v}\n")),
                "{name}"
            );
        }
    }
}
