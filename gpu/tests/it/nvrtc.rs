//! Every kernel source compiles to PTX with NVRTC (no GPU needed), with the options that
//! keep results bit-identical to the CPU: our arithmetic must not be contracted into fused
//! multiply-adds. The device's own math functions (`log`, `atan`, `atan2`, `sin`, `cos` and
//! the f32 forms of the fits) use fused multiply-adds inside, by design; so each module is also compiled with
//! those functions replaced by opaque stubs, and that PTX must contain none.
//! Skips, saying why, only when NVRTC is not loadable (and fails instead when
//! `QUIVER_REQUIRE_NVRTC` is set, as CI does). NVRTC is found through
//! `QUIVER_NVRTC`, LD_LIBRARY_PATH, or the workspace's `.venv` (pip's nvidia-cuda-nvrtc).

use quiver_gpu::{device, kernels};

fn find_venv_nvrtc() -> Option<std::path::PathBuf> {
    let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/lib");
    for py in std::fs::read_dir(&lib).ok()?.flatten() {
        let dir = py.path().join("site-packages/nvidia/cu13/lib");
        if dir.join("libnvrtc.so.13").exists() {
            return Some(dir);
        }
    }
    None
}

/// Points `QUIVER_NVRTC` at the workspace's pip-installed NVRTC unless it is set (once:
/// the tests of this binary run on several threads).
fn setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os(device::NVRTC_ENV).is_none() {
            if let Some(dir) = find_venv_nvrtc() {
                std::env::set_var(device::NVRTC_ENV, &dir);
            }
        }
    });
}

/// Whether NVRTC is loadable (after [`setup`]); when not, says so, and fails where
/// `QUIVER_REQUIRE_NVRTC` is set (as CI sets it).
fn nvrtc_available() -> bool {
    setup();
    if let Err(u) = device::nvrtc_status() {
        assert!(
            std::env::var_os("QUIVER_REQUIRE_NVRTC").is_none(),
            "QUIVER_REQUIRE_NVRTC is set but NVRTC is not available: {u}"
        );
        println!("SKIPPED: NVRTC is not available: {u}");
        return false;
    }
    true
}

/// The device math functions the kernels call, as opaque stubs (not inlined, no arithmetic).
const OPAQUE_MATH: &str = "__device__ __noinline__ double opaque1(double x) { return x; }\n\
    __device__ __noinline__ double opaque2(double y, double x) { return y; }\n\
    __device__ __noinline__ float opaque1f(float x) { return x; }\n\
    __device__ __noinline__ float opaque2f(float y, float x) { return y; }\n\
    #define log opaque1\n#define sin opaque1\n#define cos opaque1\n#define atan opaque1\n#define atan2 opaque2\n\
    #define sinf opaque1f\n#define cosf opaque1f\n#define atan2f opaque2f\n";

#[test]
fn every_kernel_compiles_to_ptx_without_fma() {
    if !nvrtc_available() {
        return;
    }
    for &(module, body, functions) in kernels::SOURCES {
        let ptx = kernels::compile(module, body).unwrap_or_else(|e| panic!("{e}"));
        let text = ptx.to_src();
        for f in functions {
            assert!(
                text.contains(&format!(".entry {f}(")),
                "module {module}: no entry point {f} in the PTX"
            );
        }
        // The same source with the device math functions opaque: any fma left is ours.
        let opaque = kernels::compile(module, &format!("{OPAQUE_MATH}{body}"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !opaque.to_src().contains("fma."),
            "module {module}: the PTX contains a fused multiply-add"
        );
        if text.contains("fma.") {
            println!(
                "module {module}: fused multiply-adds only inside the device's math functions"
            );
        }
        // Local memory: the driver reserves a kernel's per-thread frame for every thread the
        // device can hold (≈ 270 000 on an H200), so a kilobyte per thread is ≈ 0.3 GB.
        let mut entry = "";
        for l in text.lines() {
            if let Some(rest) = l.split(".entry ").nth(1) {
                entry = rest.split('(').next().unwrap_or("");
            }
            if let Some(d) = l
                .split("__local_depot")
                .nth(1)
                .filter(|_| l.contains(".local"))
            {
                let bytes: usize = d
                    .split('[')
                    .nth(1)
                    .and_then(|x| x.split(']').next())
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0);
                println!("module {module}: kernel {entry}: {bytes} bytes of local memory per thread (PTX)");
                // The Riemann fit keeps the CPU's dynamic matrices in fixed storage (docs/decisions/0027-gpu-track-fit.md).
                let limit = if entry == "track_fit_riemann" {
                    24 * 1024
                } else {
                    2 * 1024
                };
                assert!(bytes <= limit, "module {module}: kernel {entry} needs {bytes} bytes of local memory per thread");
            }
        }
        let header: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(".version") || l.starts_with(".target"))
            .collect();
        println!(
            "compiled {module}: {} bytes of PTX ({}), kernels {functions:?}",
            text.len(),
            header.join(", ")
        );
    }
}

#[test]
fn the_fma_check_can_fail() {
    if !nvrtc_available() {
        return;
    }
    let src = r#"extern "C" __global__ void k(float* o, const float* a, const float* b, const float* c) {
        o[threadIdx.x] = a[threadIdx.x] * b[threadIdx.x] + c[threadIdx.x]; }"#;
    let contracted = cudarc::nvrtc::compile_ptx(src).unwrap().to_src();
    assert!(
        contracted.contains("fma."),
        "NVRTC's default contracts a*b+c"
    );
    let kept = cudarc::nvrtc::compile_ptx_with_opts(src, kernels::compile_options())
        .unwrap()
        .to_src();
    assert!(
        !kept.contains("fma."),
        "--fmad=false keeps the multiply and the add apart"
    );
    // The device's `log` has fused multiply-adds of its own, which the opaque stubs remove.
    let src =
        r#"extern "C" __global__ void k(double* o) { o[threadIdx.x] = log(o[threadIdx.x]); }"#;
    assert!(
        cudarc::nvrtc::compile_ptx_with_opts(src, kernels::compile_options())
            .unwrap()
            .to_src()
            .contains("fma.")
    );
    let stubbed = format!("{OPAQUE_MATH}{src}");
    assert!(
        !cudarc::nvrtc::compile_ptx_with_opts(stubbed, kernels::compile_options())
            .unwrap()
            .to_src()
            .contains("fma.")
    );
}

/// NVRTC's messages name the kernel file and line, in the module and in its headers.
#[test]
fn compile_errors_name_the_kernel_file_and_line() {
    if !nvrtc_available() {
        return;
    }
    // Breaks line `line` (1-based) of `text`.
    let broken = |text: &str, line: usize| -> String {
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        assert!(!lines[line - 1].trim().is_empty());
        lines[line - 1] = "    no_such_name = 1;".into();
        lines.join("\n")
    };
    let line = 1 + kernels::CALIBRATE
        .lines()
        .position(|l| l.contains("range_first[id]"))
        .unwrap();
    let e = kernels::compile("calibrate", &broken(kernels::CALIBRATE, line)).unwrap_err();
    let quiver_gpu::GpuError::Compile { module, log } = &e else {
        panic!("{e}")
    };
    assert_eq!(module, "calibrate");
    assert!(
        log.contains(&format!("gpu/kernels/calibrate.cu({line}): error")),
        "{e}"
    );
    // A line after the header's splice keeps its own number.
    let line = 1 + kernels::CLUSTERIZE
        .lines()
        .position(|l| l.contains("block_exclusive_scan(off"))
        .unwrap();
    let e = kernels::compile("clusterize", &broken(kernels::CLUSTERIZE, line)).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("gpu/kernels/clusterize.cu({line}): error")),
        "{e}"
    );
}
