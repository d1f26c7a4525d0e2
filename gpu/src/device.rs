//! The device: availability probe (never panics), the process-wide context with compiled
//! kernels, one stream per worker thread, the device buffer pool, and typed helpers for
//! uploads and downloads.
//!
//! cudarc loads `libcuda` and `libnvrtc` at run time and *panics* when a library is absent,
//! so the probe first asks whether each library can be loaded, then creates the context
//! inside `catch_unwind` as a last guard, and turns every failure into [`Unavailable`],
//! which says what is missing.

use std::collections::HashMap;
use std::fmt;
use std::panic::catch_unwind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr,
};

use crate::error::GpuError;
use crate::kernels;
use crate::pool::SizeClassPool;

/// Environment variable naming `libnvrtc.so.13` (or the folder holding it) when it is not
/// on the loader's search path, e.g. from PyPI's `nvidia-cuda-nvrtc` wheel.
pub const NVRTC_ENV: &str = "QUIVER_NVRTC";

/// Environment variable choosing how the workers' streams are kept apart
/// ([`SyncMode`]): `events` (the default) or `streams`.
pub const SYNC_ENV: &str = "QUIVER_GPU_SYNC";

/// How work on different streams (one per worker) is kept from touching a buffer another
/// stream still uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// cudarc's event tracking: every buffer records a CUDA event at each use, and every
    /// launch or copy waits on the events of its arguments (two driver calls per argument
    /// and launch); pooled buffers pass freely between streams.
    Events,
    /// No per-buffer events: a pooled buffer goes back only to the stream it was taken for
    /// (work on one stream is ordered), products never leave their batch's worker, and at
    /// the end of a job the device is synchronised and the free buffers shared again
    /// ([`Gpu::settle`]). Not yet measured on a GPU: the default stays `Events`.
    Streams,
}

impl SyncMode {
    /// The mode a [`SYNC_ENV`] value names; unset is `Events`.
    ///
    /// ```
    /// use quiver_gpu::device::SyncMode;
    /// assert_eq!(SyncMode::parse(None), Ok(SyncMode::Events));
    /// assert_eq!(SyncMode::parse(Some("streams")), Ok(SyncMode::Streams));
    /// assert!(SyncMode::parse(Some("fast")).unwrap_err().to_string().contains("QUIVER_GPU_SYNC=fast"));
    /// ```
    pub fn parse(value: Option<&str>) -> Result<SyncMode, GpuError> {
        match value {
            None | Some("events") => Ok(SyncMode::Events),
            Some("streams") => Ok(SyncMode::Streams),
            Some(v) => Err(GpuError::Setting {
                var: SYNC_ENV,
                value: v.to_string(),
                why: "the values are 'events' (the default) and 'streams'",
            }),
        }
    }
}

/// Environment variable choosing how a worker waits for its stream ([`WaitMode`]):
/// `spin`, `yield` or `block`; unset, the driver's default.
pub const WAIT_ENV: &str = "QUIVER_GPU_WAIT";

/// How a thread waits for the device (the context's scheduling flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// The driver's choice: with one context and more cores than contexts, it spins.
    Auto,
    /// Spin on the core until the work is done (lowest latency; the core does nothing else).
    Spin,
    /// Spin, yielding the core to other threads between checks.
    Yield,
    /// Sleep on a driver primitive: the core is free for other workers' host work, at the
    /// cost of a wake-up per wait. With more workers than cores, some prepare batches while
    /// others wait.
    Block,
}

impl WaitMode {
    /// The mode a [`WAIT_ENV`] value names; unset is `Auto`.
    ///
    /// ```
    /// use quiver_gpu::device::WaitMode;
    /// assert_eq!(WaitMode::parse(None), Ok(WaitMode::Auto));
    /// assert_eq!(WaitMode::parse(Some("block")), Ok(WaitMode::Block));
    /// assert!(WaitMode::parse(Some("sleep")).unwrap_err().to_string().contains("QUIVER_GPU_WAIT=sleep"));
    /// ```
    pub fn parse(value: Option<&str>) -> Result<WaitMode, GpuError> {
        match value {
            None | Some("auto") => Ok(WaitMode::Auto),
            Some("spin") => Ok(WaitMode::Spin),
            Some("yield") => Ok(WaitMode::Yield),
            Some("block") => Ok(WaitMode::Block),
            Some(v) => Err(GpuError::Setting {
                var: WAIT_ENV,
                value: v.to_string(),
                why: "the values are 'auto' (the default), 'spin', 'yield' and 'block'",
            }),
        }
    }

    fn flags(self) -> Option<cudarc::driver::sys::CUctx_flags> {
        use cudarc::driver::sys::CUctx_flags::*;
        match self {
            WaitMode::Auto => None,
            WaitMode::Spin => Some(CU_CTX_SCHED_SPIN),
            WaitMode::Yield => Some(CU_CTX_SCHED_YIELD),
            WaitMode::Block => Some(CU_CTX_SCHED_BLOCKING_SYNC),
        }
    }
}

/// What stops the GPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// The NVIDIA driver library (`libcuda.so.1`).
    Driver,
    /// The NVRTC runtime compiler (`libnvrtc.so.13`).
    Nvrtc,
    /// A CUDA device (driver present, but no device or the context failed).
    Device,
    /// The kernels did not compile or load.
    Kernels,
    /// A setting of the GPU backend (an environment variable) has a value it does not take.
    Setting,
}

/// Why the GPU backend cannot run here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable {
    pub missing: Missing,
    pub detail: String,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.missing {
            Missing::Driver => {
                "the NVIDIA driver library libcuda.so is not loadable (no driver installed?)"
            }
            Missing::Nvrtc => "the CUDA 13 runtime compiler libnvrtc.so.13 is not loadable",
            Missing::Device => "no usable CUDA device",
            Missing::Kernels => "the GPU kernels could not be built",
            Missing::Setting => "a setting of the GPU backend is invalid",
        };
        write!(f, "{what}: {}", self.detail)
    }
}

impl std::error::Error for Unavailable {}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// Loads NVRTC from the path in [`NVRTC_ENV`] once, so that cudarc's later load by soname
/// finds it. Returns the path used, if any.
fn preload_nvrtc() -> Option<&'static PathBuf> {
    static LOADED: OnceLock<Option<(PathBuf, libloading::Library)>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let given = PathBuf::from(std::env::var_os(NVRTC_ENV)?);
            let path = if given.is_dir() {
                given.join("libnvrtc.so.13")
            } else {
                given
            };
            // NVRTC opens its builtins library by soname at compile time: load the one next
            // to it first, so that no LD_LIBRARY_PATH is needed.
            let builtins = path
                .parent()
                .and_then(|d| std::fs::read_dir(d).ok())
                .and_then(|rd| {
                    rd.flatten().map(|e| e.path()).find(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("libnvrtc-builtins.so.13"))
                    })
                });
            if let Some(b) = builtins {
                // SAFETY: as below; kept loaded for the process.
                if let Ok(l) = unsafe { libloading::Library::new(&b) } {
                    std::mem::forget(l);
                }
            }
            // SAFETY: loading NVRTC runs its initialisers, as cudarc's own load would.
            let lib = unsafe { libloading::Library::new(&path) }.ok()?;
            Some((path, lib))
        })
        .as_ref()
        .map(|(p, _)| p)
}

/// Whether the driver library can be loaded.
pub fn driver_status() -> Result<(), Unavailable> {
    // SAFETY: only tries to dlopen the library.
    let ok = catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(Unavailable {
            missing: Missing::Driver,
            detail:
                "install the NVIDIA driver, or run this step with backend = \"cpu\" (or \"auto\")"
                    .into(),
        })
    }
}

/// Whether NVRTC can be loaded (after honouring [`NVRTC_ENV`]).
pub fn nvrtc_status() -> Result<(), Unavailable> {
    let pre = preload_nvrtc();
    // SAFETY: only tries to dlopen the library.
    let ok = catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }).unwrap_or(false);
    if ok {
        Ok(())
    } else {
        let hint = match std::env::var_os(NVRTC_ENV) {
            Some(v) if pre.is_none() => format!("{NVRTC_ENV}={} does not name a loadable libnvrtc.so.13", Path::new(&v).display()),
            _ => format!(
                "install the CUDA 13 toolkit or `pip install nvidia-cuda-nvrtc==13.0.*` and set {NVRTC_ENV} to its lib folder (or LD_LIBRARY_PATH)"
            ),
        };
        Err(Unavailable {
            missing: Missing::Nvrtc,
            detail: hint,
        })
    }
}

/// The process-wide device: context, kernels, per-thread streams, buffer pool.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    /// Device name and compute capability, for reports.
    pub description: String,
    functions: HashMap<&'static str, CudaFunction>,
    streams: Mutex<HashMap<ThreadId, Arc<CudaStream>>>,
    pub pool: SizeClassPool<CudaSlice<u8>>,
    /// Page-locked host memory for the batches' transfers.
    pub staging: crate::staging::StagingPool,
    /// How the streams are kept apart ([`SYNC_ENV`]).
    pub sync: SyncMode,
    /// How workers wait for their streams ([`WAIT_ENV`]).
    pub wait: WaitMode,
}

impl fmt::Debug for Gpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gpu")
            .field("device", &self.description)
            .finish_non_exhaustive()
    }
}

static GPU: OnceLock<Result<Gpu, Unavailable>> = OnceLock::new();

/// The device, created and its kernels compiled on first use; the same answer afterwards.
pub fn gpu() -> Result<&'static Gpu, Unavailable> {
    GPU.get_or_init(Gpu::create).as_ref().map_err(Clone::clone)
}

/// Whether the GPU backend can run here (used by `backend = "auto"`).
pub fn available() -> bool {
    gpu().is_ok()
}

impl Gpu {
    fn create() -> Result<Gpu, Unavailable> {
        let var = std::env::var(SYNC_ENV).ok();
        let sync = SyncMode::parse(var.as_deref()).map_err(|e| Unavailable {
            missing: Missing::Setting,
            detail: e.to_string(),
        })?;
        let var = std::env::var(WAIT_ENV).ok();
        let wait = WaitMode::parse(var.as_deref()).map_err(|e| Unavailable {
            missing: Missing::Setting,
            detail: e.to_string(),
        })?;
        driver_status()?;
        nvrtc_status()?;
        let device = |detail: String| Unavailable {
            missing: Missing::Device,
            detail,
        };
        let count = catch_unwind(CudaContext::device_count)
            .map_err(|p| device(format!("the driver panicked: {}", panic_text(p))))?
            .map_err(|e| device(format!("cuInit/cuDeviceGetCount failed: {e}")))?;
        if count < 1 {
            return Err(device("the driver reports no CUDA device".into()));
        }
        let ctx = catch_unwind(|| CudaContext::new(0))
            .map_err(|p| device(format!("creating the context panicked: {}", panic_text(p))))?
            .map_err(|e| device(format!("creating a context on device 0 failed: {e}")))?;
        if sync == SyncMode::Streams {
            // SAFETY: before any buffer exists; from here on the pool keeps each buffer on
            // its stream (see SyncMode::Streams).
            unsafe { ctx.disable_event_tracking() };
        }
        if let Some(flags) = wait.flags() {
            ctx.set_flags(flags).map_err(|e| {
                device(format!(
                    "setting the context's wait policy ({WAIT_ENV}): {e}"
                ))
            })?;
        }
        let name = ctx.name().unwrap_or_else(|_| "unknown".into());
        let cc = ctx
            .compute_capability()
            .map(|(a, b)| format!("sm_{a}{b}"))
            .unwrap_or_default();
        let kernels_err = |detail: String| Unavailable {
            missing: Missing::Kernels,
            detail,
        };
        let mut functions = HashMap::new();
        for &(module, body, names) in kernels::SOURCES {
            let ptx = catch_unwind(|| kernels::compile(module, body))
                .map_err(|p| kernels_err(format!("NVRTC panicked: {}", panic_text(p))))?
                .map_err(|e| kernels_err(e.to_string()))?;
            let m = ctx
                .load_module(ptx)
                .map_err(|e| kernels_err(format!("loading module '{module}': {e}")))?;
            for &f in names {
                let func = m
                    .load_function(f)
                    .map_err(|e| kernels_err(format!("kernel '{f}': {e}")))?;
                functions.insert(f, func);
            }
        }
        let staging = crate::staging::StagingPool::new(ctx.clone());
        Ok(Gpu {
            ctx,
            description: format!("{name} ({cc})"),
            functions,
            streams: Mutex::new(HashMap::new()),
            pool: SizeClassPool::new(),
            staging,
            sync,
            wait,
        })
    }

    /// A kernel by name (one of [`kernels::SOURCES`]).
    pub fn function(&self, name: &str) -> &CudaFunction {
        self.functions
            .get(name)
            .unwrap_or_else(|| panic!("kernel '{name}' is not in kernels::SOURCES"))
    }

    /// The stream of the calling worker thread, created on first use: batches on different
    /// workers overlap on the device.
    pub fn stream(&self) -> Result<Arc<CudaStream>, GpuError> {
        let id = std::thread::current().id();
        let mut s = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(st) = s.get(&id) {
            return Ok(st.clone());
        }
        let st = self
            .ctx
            .new_stream()
            .map_err(|e| GpuError::driver("creating a stream", e))?;
        s.insert(id, st.clone());
        Ok(st)
    }

    /// A pooled device buffer of at least `bytes` bytes for work on `stream` (returned to
    /// the pool on drop: to that stream's free lists under [`SyncMode::Streams`]).
    pub fn buffer(
        &'static self,
        stream: &Arc<CudaStream>,
        bytes: usize,
    ) -> Result<DeviceBuf, GpuError> {
        let owner = match self.sync {
            SyncMode::Events => crate::pool::SETTLED,
            SyncMode::Streams => stream.cu_stream() as usize,
        };
        let (slice, class) = self.pool.take(owner, bytes, |n| {
            // SAFETY: the bytes are written (upload or kernel) before they are read.
            unsafe { stream.alloc::<u8>(n) }
                .map_err(|e| GpuError::driver(format!("device allocation of {n} bytes"), e))
        })?;
        Ok(DeviceBuf {
            slice: Some(slice),
            class,
            owner,
            gpu: self,
        })
    }

    /// At the end of a job: under [`SyncMode::Streams`], waits for the whole device, then
    /// lets any stream take the free buffers (the next job's workers have new streams).
    pub fn settle(&self) -> Result<(), GpuError> {
        if self.sync == SyncMode::Streams {
            self.ctx.synchronize().map_err(|e| {
                GpuError::driver("synchronising the device at the end of the job", e)
            })?;
            self.pool.settle();
        }
        Ok(())
    }
}

/// A pooled device buffer, viewed as a typed array by the helpers below.
pub struct DeviceBuf {
    slice: Option<CudaSlice<u8>>,
    class: usize,
    /// The pool owner it returns to ([`Gpu::buffer`]).
    owner: usize,
    gpu: &'static Gpu,
}

impl DeviceBuf {
    /// Bytes the buffer holds (its pool size class, at least what was asked for).
    pub fn len_bytes(&self) -> usize {
        self.slice.as_ref().map_or(0, |s| s.len())
    }
    /// The first `n` elements as `T`.
    pub fn view<T>(&self, n: usize) -> CudaView<'_, T> {
        let s = self.slice.as_ref().expect("present until drop");
        // SAFETY: T is a plain device type; the class holds at least n elements (checked).
        unsafe { s.transmute::<T>(n) }.expect("buffer large enough for the view")
    }
    /// The first `n` elements as mutable `T`.
    pub fn view_mut<T>(&mut self, n: usize) -> CudaViewMut<'_, T> {
        let s = self.slice.as_mut().expect("present until drop");
        // SAFETY: as in `view`.
        unsafe { s.transmute_mut::<T>(n) }.expect("buffer large enough for the view")
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        if let Some(s) = self.slice.take() {
            self.gpu.pool.give(self.owner, self.class, s);
        }
    }
}

/// Uploads a host slice into a pooled buffer; counts the bytes.
pub fn upload<T: DeviceRepr>(
    gpu: &'static Gpu,
    stream: &Arc<CudaStream>,
    host: &[T],
    bytes: &mut u64,
) -> Result<DeviceBuf, GpuError> {
    let n = std::mem::size_of_val(host);
    let mut buf = gpu.buffer(stream, n.max(1))?;
    if !host.is_empty() {
        let mut v = buf.view_mut::<T>(host.len());
        stream
            .memcpy_htod(host, &mut v)
            .map_err(|e| GpuError::driver(format!("upload of {n} bytes"), e))?;
    }
    *bytes += n as u64;
    Ok(buf)
}

/// A pooled zero-filled buffer of `n` elements of `T`.
pub fn zeros<T: DeviceRepr>(
    gpu: &'static Gpu,
    stream: &Arc<CudaStream>,
    n: usize,
) -> Result<DeviceBuf, GpuError> {
    let mut buf = gpu.buffer(stream, (n * std::mem::size_of::<T>()).max(1))?;
    let mut v = buf.view_mut::<u8>((n * std::mem::size_of::<T>()).max(1));
    stream
        .memset_zeros(&mut v)
        .map_err(|e| GpuError::driver("memset", e))?;
    Ok(buf)
}

/// Uploads a conditions table once (for the job), synchronously, on a fresh slice.
pub fn upload_condition<T: DeviceRepr>(
    gpu: &Gpu,
    host: &[T],
    bytes: &mut u64,
) -> Result<CudaSlice<T>, GpuError> {
    let stream = gpu.ctx.default_stream();
    let n = host.len().max(1);
    // SAFETY: written right below (or never read when empty).
    let mut s = unsafe { stream.alloc::<T>(n) }
        .map_err(|e| GpuError::driver("allocating conditions", e))?;
    if !host.is_empty() {
        stream
            .memcpy_htod(host, &mut s)
            .map_err(|e| GpuError::driver("uploading conditions", e))?;
    }
    stream
        .synchronize()
        .map_err(|e| GpuError::driver("uploading conditions", e))?;
    *bytes += std::mem::size_of_val(host) as u64;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_never_panics_and_names_what_is_missing() {
        match gpu() {
            Ok(g) => println!("GPU present: {}", g.description),
            Err(u) => {
                let msg = u.to_string();
                println!("no GPU: {msg}");
                assert!(
                    msg.contains("libcuda")
                        || msg.contains("libnvrtc")
                        || msg.contains("device")
                        || msg.contains("kernels")
                );
                assert_eq!(gpu().unwrap_err(), u, "the answer is cached");
                assert!(!available());
            }
        }
    }
}
