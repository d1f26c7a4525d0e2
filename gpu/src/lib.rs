//! # quiver-gpu
//!
//! The CUDA backend of Quiver through cudarc: the driver and NVRTC are loaded at run time,
//! so this crate builds, and its tests pass, on machines without a GPU. [`register`]
//! replaces the CPU step types of the local reconstruction that have a device
//! implementation by types that implement both `cpu` and `gpu` and dispatch on the plan's
//! backend, and makes `backend = "auto"` pick `gpu` where a usable GPU is present.
//!
//! - [`device`]: availability probe (never panics), context, kernels, streams, pool;
//! - [`kernels`]: the CUDA C sources (`gpu/kernels/*.cu`) compiled by NVRTC (`--fmad=false`);
//! - [`kernels_ca`]: the CA doublet search's and ntuplet search's kernels;
//! - [`kernels_fit`]: the Broken Line fit's kernel;
//! - [`kernels_quality`]: the track classification and cleaning kernel;
//! - [`kernels_vertices`]: the vertex finder's kernel;
//! - [`pool`]: size-class pool of device buffers;
//! - [`resident`]: products whose columns stay in device memory between GPU steps;
//! - [`transfer`]: transfer and kernel time bookkeeping, reported at the end of the job;
//! - [`steps`]: the GPU steps (one file each) and what runs on the host vs. the device.
//!
//! ```
//! use quiver_columnar::{Backend, Registry};
//! let mut r = Registry::with_builtin();
//! quiver_reco::steps::register(&mut r);
//! quiver_gpu::register(&mut r);
//! assert!(r.get("calibrate").unwrap().backends.contains(&Backend::Gpu));
//! assert_eq!(r.get("beamspot").unwrap().backends, vec![Backend::Cpu]); // no device version
//! ```

pub mod args;
pub mod device;
mod error;

pub mod kernels;
pub mod kernels_ca;
pub mod kernels_fit;
pub mod kernels_quality;
pub mod kernels_vertices;
pub mod pool;
pub mod resident;
pub mod staging;
pub mod steps;
pub mod transfer;

pub use error::GpuError;

use std::sync::OnceLock;

use quiver_columnar::{Backend, Error, Registry, Result, Step, StepConfig, StepType};
use quiver_formats::conditions::{CablingMap, CpeParams, GainCalibration};
use quiver_reco::steps::{
    ca_config, calib_config, charge_cut_config, clusterize_config, raw_to_digi_config,
    vertex_config,
};

/// Step types that have a GPU implementation.
pub const GPU_STEP_TYPES: [&str; 10] = [
    "raw_to_digis",
    "calibrate",
    "clusterize",
    "cluster_charge_cut",
    "rechits",
    "ca_doublets",
    "ca_ntuplets",
    "track_fit",
    "track_quality",
    "vertices",
];

/// The CPU step types of `quiver_reco`, kept to build the CPU implementation (for
/// `backend = "cpu"` and as the GPU steps' fallback).
fn cpu_types() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        let mut r = Registry::new();
        quiver_reco::steps::register(&mut r);
        r
    })
}

fn build_cpu(cfg: &StepConfig) -> Result<Box<dyn Step>> {
    let t = cpu_types().get(&cfg.type_name).ok_or_else(|| {
        Error::plan(
            &cfg.label,
            format!("no CPU implementation of '{}'", cfg.type_name),
        )
    })?;
    (t.build)(cfg)
}

/// The device for a step asking for `gpu`, or a plan error naming the step and what is
/// missing (raised when the plan is built, before any event is read).
pub fn require_gpu(cfg: &StepConfig) -> Result<&'static device::Gpu> {
    device::gpu().map_err(|u| {
        Error::plan(
            &cfg.label,
            format!("backend 'gpu' requested but the GPU backend is unavailable: {u}"),
        )
    })
}

fn common(cfg: &StepConfig) -> Result<steps::Common> {
    let gpu = require_gpu(cfg)?;
    Ok(steps::Common {
        gpu,
        cpu: build_cpu(cfg)?,
        stats: Default::default(),
    })
}

fn build_gpu(cfg: &StepConfig) -> Result<Box<dyn Step>> {
    // The device first (the most useful message when it is missing), then the CPU step:
    // it validates parameters and conditions with the CPU's messages, and is the fallback.
    require_gpu(cfg)?;
    // capacities = "sized": device buffers follow the event's counts (FED words, digis,
    // cells: counted before they are allocated; a device allocation that fails is a step
    // error naming the step). The charge-cut and rechits kernels keep a module's clusters in
    // per-block arrays of the reference's size: a batch beyond them goes to the CPU's sized
    // step (`steps::beyond_kernel_slots`). Nothing is truncated either way.
    Ok(match cfg.type_name.as_str() {
        "raw_to_digis" => Box::new(steps::RawToDigisGpu::new(
            cfg,
            common(cfg)?,
            &*cfg.condition::<CablingMap>()?,
            raw_to_digi_config(cfg)?,
        )?),
        "calibrate" => Box::new(steps::CalibrateGpu::new(
            cfg,
            common(cfg)?,
            cfg.condition::<GainCalibration>()?,
            calib_config(cfg),
        )?),
        // Both CPU algorithms give the same clusters; the device has one.
        "clusterize" => Box::new(steps::ClusterizeGpu::new(
            cfg,
            common(cfg)?,
            clusterize_config(cfg)?.max_pix_in_module,
        )?),
        "cluster_charge_cut" => Box::new(steps::ChargeCutGpu::new(
            cfg,
            common(cfg)?,
            charge_cut_config(cfg)?,
        )?),
        "rechits" => Box::new(steps::RecHitsGpu::new(
            cfg,
            common(cfg)?,
            cfg.condition::<CpeParams>()?,
        )?),
        "ca_doublets" => Box::new(steps::CaDoubletsGpu::new(
            cfg,
            common(cfg)?,
            cfg.condition::<CpeParams>()?,
            ca_config(cfg)?,
        )?),
        "ca_ntuplets" => Box::new(steps::CaNtupletsGpu::new(
            cfg,
            common(cfg)?,
            ca_config(cfg)?,
        )?),
        "track_fit" => Box::new(steps::TrackFitGpu::new(
            cfg,
            common(cfg)?,
            cfg.condition::<CpeParams>()?,
            ca_config(cfg)?,
        )?),
        "track_quality" => Box::new(steps::TrackQualityGpu::new(
            cfg,
            common(cfg)?,
            ca_config(cfg)?,
        )?),
        "vertices" => Box::new(steps::VerticesGpu::new(
            cfg,
            common(cfg)?,
            vertex_config(cfg)?,
        )?),
        other => {
            return Err(Error::plan(
                &cfg.label,
                format!("step type '{other}' has no GPU implementation"),
            ))
        }
    })
}

/// Builds a step of a type in [`GPU_STEP_TYPES`] for its plan backend.
fn build(cfg: &StepConfig) -> Result<Box<dyn Step>> {
    match cfg.backend {
        Backend::Gpu => build_gpu(cfg),
        _ => build_cpu(cfg),
    }
}

/// What `backend = "auto"` means once this crate is registered: `gpu` for types with a GPU
/// implementation when a usable GPU is present, else `cpu` (else the type's first backend).
pub fn auto_backend(t: &StepType) -> Backend {
    if t.backends.contains(&Backend::Gpu) && device::available() {
        Backend::Gpu
    } else if t.backends.contains(&Backend::Cpu) {
        Backend::Cpu
    } else {
        t.backends.first().copied().unwrap_or(Backend::Cpu)
    }
}

/// Adds the GPU implementations: every type of [`GPU_STEP_TYPES`] is (re)registered with
/// backends `cpu` and `gpu` (same name, parameters, inputs and outputs as the CPU type), and
/// `backend = "auto"` resolves with [`auto_backend`]. Nothing touches the device here: it is
/// probed when a plan asks for `gpu` or `auto`.
pub fn register(r: &mut Registry) {
    for name in GPU_STEP_TYPES {
        let cpu = cpu_types()
            .get(name)
            .unwrap_or_else(|| panic!("quiver_reco registers '{name}'"));
        let mut t = cpu.clone();
        t.backends = vec![Backend::Cpu, Backend::Gpu];
        t.build = build;
        r.replace(t);
    }
    r.set_auto_backend(auto_backend);
}
