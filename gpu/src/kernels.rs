//! The CUDA C kernel sources (`gpu/kernels/*.cu`, embedded), compiled by NVRTC at first
//! use: the local-reconstruction modules here, the tracking ones in `kernels_*`.
//!
//! Bit-identity with the CPU cores (`quiver_reco::local`) rests on three rules:
//! - every float operation is written as an explicit round-to-nearest intrinsic
//!   (`__fmul_rn`, `__fadd_rn`, `__fsub_rn`), which NVRTC never contracts into an FMA, and the
//!   sources are also compiled with `--fmad=false`;
//! - float → int conversions use `__float2int_rz` (PTX `cvt.rzi.s32.f32`): truncation,
//!   saturation and NaN → 0, exactly Rust's `as i32`;
//! - integer sums that the CPU does in order are done with atomics only where the result is
//!   order independent (two's-complement wrapping adds, minima), and labels are minima, so
//!   the result does not depend on thread scheduling.
//!
//! The constants of the detector and of the formats are generated from the Rust constants
//! ([`prelude`]) so the two sides cannot drift apart.

use quiver_formats::conditions::{FED_ID_MIN, MAX_FED, MAX_LINK, MAX_ROC};
use quiver_formats::topology::{
    NUM_COLS_IN_MODULE, NUM_COLS_IN_ROC, NUM_ROWS_IN_MODULE, NUM_ROWS_IN_ROC, X_OFFSET, Y_OFFSET,
};
use quiver_reco::local::{INVALID_MODULE, MAX_CLUSTERS_PER_MODULE, MAX_NUM_MODULES};

use crate::error::GpuError;

/// Threads per block of `clusterize` (one block per module run). Modules hold few digis, so
/// small blocks let more modules run at once; the measurements behind 64 are in
/// docs/decisions/0033-gpu-kernels-all-sms.md. The kernel is
/// written for any power of two up to `CLUS_SCAN_MAX` (the emulation tests run it with 1 and
/// 8 threads).
pub const CLUSTER_BLOCK: u32 = 64;
/// Threads per block of `charge_cut` (one block per module run), for the same reason as
/// [`CLUSTER_BLOCK`].
pub const CUT_BLOCK: u32 = 64;
/// Threads per block of `rechits` (one block per module run), as [`CLUSTER_BLOCK`]. Its
/// shared memory is sized per launch for the batch's largest run
/// ([`RECHITS_SHARED_PER_CLUSTER`] bytes per cluster) rather than for the full cluster
/// capacity, so more blocks fit an SM (numbers in the same decision).
pub const RECHITS_BLOCK: u32 = 64;
/// Shared memory of a `rechits` block per cluster of its capacity: nine 32-bit values.
pub const RECHITS_SHARED_PER_CLUSTER: u32 = 9 * 4;
/// Threads per block of the per-element kernels.
pub const ELEMENT_BLOCK: u32 = 256;

/// Status codes a kernel writes when an input is outside what the CPU core accepts; the
/// step then re-runs the batch on the CPU to report the CPU's exact error.
pub const STATUS_BAD_INPUT: u32 = 1;

/// `#define`s shared by all kernels, from the Rust constants.
pub fn prelude() -> String {
    format!(
        "typedef unsigned int u32;\ntypedef int i32;\ntypedef unsigned short u16;\ntypedef unsigned char u8;\n\
         typedef unsigned long long u64;\n\
         #define FED_ID_MIN {FED_ID_MIN}u\n#define MAX_FED {MAX_FED}u\n#define MAX_LINK {MAX_LINK}u\n#define MAX_ROC {MAX_ROC}u\n\
         #define INVALID_MODULE {INVALID_MODULE}u\n#define N_ROWS {NUM_ROWS_IN_MODULE}\n#define N_COLS {NUM_COLS_IN_MODULE}\n\
         #define MAX_CLUS_PER_MODULE {MAX_CLUSTERS_PER_MODULE}\n#define MAX_MODULES {MAX_NUM_MODULES}u\n#define STATUS_BAD_INPUT {STATUS_BAD_INPUT}u\n\
         #define ROWS_IN_ROC {NUM_ROWS_IN_ROC}u\n#define COLS_IN_ROC {NUM_COLS_IN_ROC}u\n#define X_OFFSET ({X_OFFSET})\n#define Y_OFFSET ({Y_OFFSET})\n\
         #ifndef DYN_SHARED\n#define DYN_SHARED(T, name) extern __shared__ T name[]\n#endif\n"
    )
}

/// raw_to_digis: one thread per 32-bit payload word. The FED framing (headers, trailers,
/// their errors) is done on the host; the device decodes words against the cabling map.
/// Errors found in words are appended to a compact list (word index, type, raw id) that
/// the host sorts by word index, which restores the CPU's order.
pub const RAW_TO_DIGIS: &str = include_str!("../kernels/raw_to_digis.cu");

/// calibrate: one thread per digi. Invalid digis pass through unchanged.
pub const CALIBRATE: &str = include_str!("../kernels/calibrate.cu");

/// clusterize: `clus_init` gives every digi its event-local index; `clusterize` runs one
/// block per module run: column histogram, then min-label propagation with pointer
/// jumping until no pair of 8-connected pixels has different roots. Roots are component
/// minima, so the result equals the CPU's for any scheduling. Roots are numbered in index
/// order (as the CPU does) by a block-wide prefix sum of the root flags, then every pixel
/// takes its root's number.
pub const CLUSTERIZE: &str = include_str!("../kernels/clusterize.cu");

/// Module runs on the device, so that the local steps' host preparation reads only the
/// module tables and the events' offsets, never the digis:
/// - `mr_flag`, `mr_fill`: `clusterize`'s runs (the CPU's `module_runs`). A run starts at
///   a valid digi whose previous valid digi in the event is of another module (or none) and
///   ends at the next valid digi of another module; the first `MAX_MODULES` runs of an event
///   fill its slots in order (one thread per digi: the start flags, their per-event
///   segmented scan `sg_tile_*`, then each start writes its run), longer runs are cut
///   at `max_pix` digis and counted per event for the capacity report. A digi outside what the CPU accepts sets `status`: the step takes the CPU path.
/// - `run_check`, `run_ends`: the charge cut's and `rechits`' run spans from a module table
///   (the CPU's `find` of the next valid digi of another module); `run_check` tells whether
///   every table row's first digi is of its module, which the host's spans assume.
/// - `slot_ends`: the same spans over the run slots that `mr_fill` wrote, which a GPU
///   `clusterize` keeps on the device with its module table (no table crosses the bus).
pub const MODULE_RUNS: &str = include_str!("../kernels/module_runs.cu");

/// cluster_charge_cut: one block per module run, modifying module and cluster columns in
/// place (the host uploads copies). Charges are summed with wrapping atomic adds (order
/// independent); the prefix scan and the renumbering table are built by one thread.
pub const CHARGE_CUT: &str = include_str!("../kernels/cluster_charge_cut.cu");

/// rechits: one block per module run (or run slot: a slot without clusters returns at once;
/// the beam spot per run, or per event of `beam_stride` slots), its shared memory sized for
/// `cap` clusters (the launch's largest run; a run above it sets `status`). Pass 1 finds each cluster's row and
/// column range (atomic min/max), pass 2 sums charges on its edges (atomic adds, exact in
/// i32), then one thread per cluster computes the CPE "fast" position, errors, global
/// position and `iphi` with the CPU's float operations in the CPU's order.
/// Per-module parameters: `DET_STRIDE` floats per module (see `steps::det_table`).
pub const RECHITS: &str = include_str!("../kernels/rechits.cu");

/// Every kernel source: (module name, source without the prelude, kernel functions).
pub const SOURCES: &[(&str, &str, &[&str])] = &[
    ("raw_to_digis", RAW_TO_DIGIS, &["raw_to_digis"]),
    ("calibrate", CALIBRATE, &["calibrate"]),
    ("clusterize", CLUSTERIZE, &["clus_init", "clusterize"]),
    (
        "module_runs",
        MODULE_RUNS,
        &["mr_flag", "mr_fill", "run_check", "run_ends", "slot_ends"],
    ),
    ("cluster_charge_cut", CHARGE_CUT, &["charge_cut"]),
    ("rechits", RECHITS, &["rechits"]),
    (
        "ca_doublets",
        crate::kernels_ca::CA_DOUBLETS,
        crate::kernels_ca::CA_DOUBLETS_KERNELS,
    ),
    (
        "ca_ntuplets",
        crate::kernels_ca::CA_NTUPLETS,
        crate::kernels_ca::CA_NTUPLETS_KERNELS,
    ),
    (
        "track_fit",
        crate::kernels_fit::TRACK_FIT,
        crate::kernels_fit::TRACK_FIT_KERNELS,
    ),
    (
        "track_quality",
        crate::kernels_quality::QUALITY,
        crate::kernels_quality::QUALITY_KERNELS,
    ),
    (
        "vertices",
        crate::kernels_vertices::VERTICES,
        crate::kernels_vertices::VERTICES_KERNELS,
    ),
];

/// Where the kernel sources live, relative to the repository root: compiler messages (NVRTC's
/// and the emulation's) name `gpu/kernels/FILE:LINE`.
pub const SOURCE_DIR: &str = "gpu/kernels";

/// The headers the kernel modules `#include`, by file name. They are spliced in here rather
/// than found by NVRTC, so that the sources need no include path at run time.
pub const HEADERS: &[(&str, &str)] = &[
    ("block_scan.cuh", include_str!("../kernels/block_scan.cuh")),
    ("fit_linalg.cuh", include_str!("../kernels/fit_linalg.cuh")),
    (
        "riemann_fit.cuh",
        include_str!("../kernels/riemann_fit.cuh"),
    ),
];

/// Module `module`'s source (`gpu/kernels/{module}.cu`) with its `#include "X.cuh"` lines
/// replaced by the headers, and `#line` directives so that every line keeps its file's name
/// and number. An unknown header is left for the compiler to report.
///
/// ```
/// let s = quiver_gpu::kernels::expand("clusterize", quiver_gpu::kernels::CLUSTERIZE);
/// assert!(s.starts_with("#line 1 \"gpu/kernels/clusterize.cu\"\n"));
/// assert!(s.contains("#line 1 \"gpu/kernels/block_scan.cuh\"\n"));
/// assert!(s.contains("#line 2 \"gpu/kernels/clusterize.cu\"\n"));
/// ```
pub fn expand(module: &str, body: &str) -> String {
    let mut s = format!("#line 1 \"{SOURCE_DIR}/{module}.cu\"\n");
    for (k, line) in body.lines().enumerate() {
        let header = line
            .strip_prefix("#include \"")
            .and_then(|r| r.strip_suffix('"'))
            .and_then(|h| HEADERS.iter().find(|(n, _)| *n == h));
        match header {
            Some((name, text)) => {
                s.push_str(&format!("#line 1 \"{SOURCE_DIR}/{name}\"\n{text}"));
                if !text.ends_with('\n') {
                    s.push('\n');
                }
                s.push_str(&format!("#line {} \"{SOURCE_DIR}/{module}.cu\"\n", k + 2));
            }
            None => {
                s.push_str(line);
                s.push('\n');
            }
        }
    }
    s
}

/// The full source of a kernel module as NVRTC compiles it: the prelude, then the module
/// ([`expand`]).
pub fn full_source(module: &str, body: &str) -> String {
    let mut s = prelude();
    s.push_str(&expand(module, body));
    s
}

/// NVRTC options: no FMA contraction, IEEE division and square root, no flush to zero.
pub fn compile_options() -> cudarc::nvrtc::CompileOptions {
    cudarc::nvrtc::CompileOptions {
        fmad: Some(false),
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        use_fast_math: Some(false),
        ..Default::default()
    }
}

/// Compiles one kernel module to PTX. NVRTC must be loadable (see
/// [`crate::device::nvrtc_status`]); this function does not check it.
pub fn compile(name: &str, body: &str) -> Result<cudarc::nvrtc::Ptx, GpuError> {
    use cudarc::nvrtc::CompileError;
    cudarc::nvrtc::compile_ptx_with_opts(full_source(name, body), compile_options()).map_err(|e| {
        let log = match &e {
            // NVRTC's log names the file and line: `gpu/kernels/X.cu(LINE): error: ...`.
            CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            e => e.to_string(),
        };
        GpuError::Compile {
            module: name.to_string(),
            log,
        }
    })
}

/// One parameter of a kernel as written in its source: its C type (`const` dropped, e.g.
/// `u16*`, `float`) and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    pub c_type: String,
    pub name: String,
}

/// The parameters of kernel `name` as written in its source. Launches are checked against
/// them, names and types ([`check_launch`]).
///
/// ```
/// let sig = quiver_gpu::kernels::signature("clus_init").unwrap();
/// let sig: Vec<_> = sig.iter().map(|p| (p.c_type.as_str(), p.name.as_str())).collect();
/// assert_eq!(sig, [("i32*", "clus"), ("u32", "n"), ("u32*", "event_offsets"), ("u32", "n_events")]);
/// ```
pub fn signature(name: &str) -> Option<Vec<Param>> {
    let head = format!("__global__ void {name}(");
    let body = SOURCES.iter().map(|s| s.1).find(|b| b.contains(&head))?;
    let start = body.find(&head)? + head.len();
    let end = start + body[start..].find(')')?;
    let params: String = body[start..end]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    params
        .split(',')
        .map(|p| {
            let p = p.replace("const ", "").replace('*', " * ");
            let mut toks: Vec<&str> = p.split_whitespace().collect();
            let name = toks.pop()?.to_string();
            Some(Param {
                c_type: toks.concat(),
                name,
            })
        })
        .collect()
}

/// The C type of a kernel argument element or scalar.
pub trait CType {
    const C: &'static str;
}
impl CType for u8 {
    const C: &'static str = "u8";
}
impl CType for u16 {
    const C: &'static str = "u16";
}
impl CType for u32 {
    const C: &'static str = "u32";
}
impl CType for u64 {
    const C: &'static str = "u64";
}
impl CType for i16 {
    const C: &'static str = "short";
}
impl CType for i32 {
    const C: &'static str = "i32";
}
impl CType for f32 {
    const C: &'static str = "float";
}
impl CType for f64 {
    const C: &'static str = "double";
}

/// The C type a launch argument stands for: a scalar, or a pointer to device memory.
pub trait KernelArg {
    fn c_type() -> String;
}
impl<T: CType> KernelArg for &T {
    fn c_type() -> String {
        T::C.to_string()
    }
}
impl<T: CType> KernelArg for &cudarc::driver::CudaSlice<T> {
    fn c_type() -> String {
        format!("{}*", T::C)
    }
}
impl<T: CType> KernelArg for &cudarc::driver::CudaView<'_, T> {
    fn c_type() -> String {
        format!("{}*", T::C)
    }
}
impl<T: CType> KernelArg for &mut cudarc::driver::CudaViewMut<'_, T> {
    fn c_type() -> String {
        format!("{}*", T::C)
    }
}

/// Compares a launch's arguments, each given as (parameter name, C type), with the kernel's
/// source signature: a missing, extra, misnamed or mistyped argument is an error naming the
/// kernel and the argument. Two arguments of the same type swapped are caught by their names.
///
/// ```
/// use quiver_gpu::kernels::check_launch;
/// let args = [("clus", "i32*"), ("n", "u32"), ("event_offsets", "u32*"), ("n_events", "u32")];
/// assert!(check_launch("clus_init", &args.map(|(n, t)| (n, t.to_string()))).is_ok());
/// let args = [("clus", "u32*"), ("n", "u32"), ("event_offsets", "u32*"), ("n_events", "u32")];
/// let e = check_launch("clus_init", &args.map(|(n, t)| (n, t.to_string()))).unwrap_err();
/// assert!(e.to_string().contains("argument 1 (clus) is u32* but the kernel takes i32*"), "{e}");
/// ```
pub fn check_launch(name: &str, args: &[(&str, String)]) -> Result<(), GpuError> {
    let sig = signature(name).ok_or_else(|| GpuError::UnknownKernel(name.to_string()))?;
    let mismatch = |why: String| GpuError::Arguments {
        kernel: name.to_string(),
        why,
    };
    if sig.len() != args.len() {
        return Err(mismatch(format!(
            "it takes {} arguments, the launch passes {}",
            sig.len(),
            args.len()
        )));
    }
    for (k, (want, (got_name, got_type))) in sig.iter().zip(args).enumerate() {
        if want.name != *got_name {
            return Err(mismatch(format!(
                "argument {} is passed as '{got_name}' but the kernel's parameter is '{}'",
                k + 1,
                want.name
            )));
        }
        if want.c_type != *got_type {
            return Err(mismatch(format!(
                "argument {} ({got_name}) is {got_type} but the kernel takes {}",
                k + 1,
                want.c_type
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_has_a_parsable_signature() {
        for &(_, _, names) in SOURCES {
            for n in names {
                let sig = signature(n).unwrap_or_else(|| panic!("{n}"));
                assert!(
                    sig.iter().all(|p| [
                        "u8", "u16", "u32", "u64", "short", "i32", "float", "double"
                    ]
                    .contains(&p.c_type.trim_end_matches('*'))
                        && p.name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_')),
                    "{n}: {sig:?}"
                );
            }
        }
        assert_eq!(signature("charge_cut").unwrap().len(), 12);
        assert_eq!(signature("rechits").unwrap().len(), 32);
        assert_eq!(signature("raw_to_digis").unwrap().len(), 25);
        let calibrate: Vec<_> = signature("calibrate").unwrap()[..4]
            .iter()
            .map(|p| (p.c_type.clone(), p.name.clone()))
            .collect();
        assert_eq!(
            calibrate,
            [
                ("u16*", "module_in"),
                ("u16*", "xx"),
                ("u16*", "yy"),
                ("u16*", "adc_in")
            ]
            .map(|(t, n)| (t.to_string(), n.to_string()))
        );
    }

    #[test]
    fn clusterize_blocks_fit_its_scan() {
        // The block-wide scan needs a power of two and one shared word per thread.
        assert!(CLUSTER_BLOCK.is_power_of_two());
        assert!(CLUSTERIZE.contains(&format!("#define CLUS_SCAN_MAX {CLUSTER_BLOCK}\n")));
    }
}
