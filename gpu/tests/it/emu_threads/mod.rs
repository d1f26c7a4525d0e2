//! The threads of an emulated block, shared by the emulation tests (`emulate.rs`,
//! `emulate_ca.rs`): real OS threads, and a `__syncthreads` barrier that cannot hang.
//!
//! Each emulated thread runs in `catch_unwind`. When one panics (or cannot be spawned), the
//! block's barrier is *broken*: every thread waiting at it, and every later wait, returns at
//! once, so the other threads run to their end, and the launch then fails with the first
//! panic's message. A `std::sync::Barrier` (or a C++ `std::barrier`) would wait forever for
//! the thread that died instead.
//!
//! The kernels' `__syncthreads` (C++) calls [`emu_sync`] through the function pointer the
//! shim receives (`emu_set_sync`); it waits at the barrier of the calling thread's block.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use cudarc::driver::DeviceRepr;
use quiver_gpu::args::{KernelArgs, KernelSink};
use quiver_gpu::kernels::CType;

/// A barrier for `n` threads that a panicking thread breaks. Waiting threads spin briefly,
/// then yield, on an atomic generation: with 8 emulated threads on 2 cores a mutex and
/// condition variable (every release waking all waiters onto one mutex) took the CA
/// emulation from 72 s to 139 s.
pub struct BlockBarrier {
    n: usize,
    arrived: AtomicUsize,
    generation: AtomicU64,
    broken: AtomicBool,
}

impl BlockBarrier {
    pub fn new(n: usize) -> Self {
        BlockBarrier {
            n,
            arrived: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            broken: AtomicBool::new(false),
        }
    }

    /// Waits until all `n` threads arrive; `false` (at once) when the barrier is broken.
    pub fn wait(&self) -> bool {
        if self.broken.load(Ordering::Acquire) {
            return false;
        }
        // The generation is read before arriving: it cannot move on without this arrival.
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release); // publishes the reset too
            return true;
        }
        let mut spins = 0u32;
        loop {
            if self.generation.load(Ordering::Acquire) != generation {
                return true;
            }
            if self.broken.load(Ordering::Acquire) {
                return false;
            }
            if spins < 100 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Breaks the barrier: every waiting thread and every later wait returns `false`.
    pub fn brk(&self) {
        self.broken.store(true, Ordering::Release);
    }
}

thread_local! {
    /// The barrier of the block the calling OS thread emulates a thread of.
    static CURRENT: Cell<*const BlockBarrier> = const { Cell::new(std::ptr::null()) };
}

/// `__syncthreads` for the C++ kernels: waits at the calling thread's block barrier. Without
/// one (a block emulated by a single OS thread, one thread per block) there is nothing to
/// wait for. Never unwinds into C++: a broken barrier just returns.
pub extern "C" fn emu_sync() {
    let b = CURRENT.with(|c| c.get());
    if !b.is_null() {
        // SAFETY: CURRENT is set only by `run_threads` to a barrier that outlives the
        // thread's body and is reset to null before the barrier is dropped.
        unsafe { &*b }.wait();
    }
}

fn message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// Runs `body(t, barrier)` for `t` in `0..threads`, each on its own OS thread, sharing one
/// breakable barrier (also the one `emu_sync` waits at on these threads). Returns when all
/// threads are done; panics with the first thread's panic message if any panicked, after the
/// others were released.
pub fn run_threads(threads: u32, body: impl Fn(u32, &BlockBarrier) + Sync) {
    let barrier = BlockBarrier::new(threads as usize);
    let first: Mutex<Option<(u32, String)>> = Mutex::new(None);
    let fail = |t: u32, p: Box<dyn Any + Send>| {
        let mut f = first.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some((t, message(&*p)));
        }
        drop(f);
        barrier.brk();
    };
    std::thread::scope(|s| {
        for t in 0..threads {
            let (body, barrier, fail) = (&body, &barrier, &fail);
            let spawned = std::thread::Builder::new().spawn_scoped(s, move || {
                CURRENT.with(|c| c.set(barrier));
                let r = catch_unwind(AssertUnwindSafe(|| body(t, barrier)));
                CURRENT.with(|c| c.set(std::ptr::null()));
                if let Err(p) = r {
                    fail(t, p);
                }
            });
            if let Err(e) = spawned {
                fail(t, Box::new(format!("cannot spawn the thread: {e}")));
                break;
            }
        }
    });
    if let Some((t, msg)) = first.into_inner().unwrap_or_else(|e| e.into_inner()) {
        panic!("emulated thread {t} panicked: {msg}");
    }
}

/// Compiles `source` (a shim plus kernel sources) as C++ into a shared library and loads
/// it: `flags` are the compiler's options besides `-shared -fPIC -ffp-contract=off
/// -fno-fast-math -w` (no contraction, as NVRTC is told). `None`, with a line saying so, when
/// no C++ compiler (`$CXX`, else `c++`) can be run; a source that does not compile panics
/// with the compiler's message. The directory holds the library while it is loaded.
pub fn build_library(
    name: &str,
    source: &str,
    flags: &[&str],
) -> Option<(tempfile::TempDir, libloading::Library)> {
    let dir = tempfile::tempdir().ok()?;
    let cpp = dir.path().join(format!("{name}.cpp"));
    std::fs::write(&cpp, source).ok()?;
    let so = dir.path().join(format!("lib{name}.so"));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = std::process::Command::new(&cxx)
        .args([
            "-shared",
            "-fPIC",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-w",
        ])
        .args(flags)
        .args(["-x", "c++"])
        .arg(&cpp)
        .arg("-o")
        .arg(&so)
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "the {name} kernels do not compile as C++: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            // CI sets it: there a missing compiler must fail the emulation tests, not let
            // them pass having checked nothing.
            assert!(
                std::env::var_os("QUIVER_REQUIRE_CXX").is_none(),
                "QUIVER_REQUIRE_CXX is set but the C++ compiler '{cxx}' cannot run: {e}"
            );
            println!("SKIPPED: no C++ compiler '{cxx}': {e}");
            return None;
        }
    }
    // SAFETY: our own library of plain functions.
    let lib = unsafe { libloading::Library::new(&so) }.ok()?;
    Some((dir, lib))
}

/// The one C++ shim of the emulation: the CUDA built-ins for the host.
pub const SHIM: &str = include_str!("../emu_shim.h");

/// One launch at a time in the process: `__shared__` memory is a global of the emulator
/// library, and the harness runs tests on parallel threads (two tests launching at once
/// would share it: that made the connect test hang when it ran beside the doublet test).
pub static ONE_LAUNCH: Mutex<()> = Mutex::new(());

/// Every kernel module behind [`SHIM`], with the prelude NVRTC compiles them with, built
/// once per process; `None` (having said why) when no C++ compiler runs.
pub fn kernels() -> Option<&'static libloading::Library> {
    static LIB: std::sync::OnceLock<Option<(tempfile::TempDir, libloading::Library)>> =
        std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        use quiver_gpu::kernels;
        let mut src = format!("{SHIM}{}", kernels::prelude());
        for &(module, body, _) in kernels::SOURCES {
            src.push_str(&kernels::expand(module, body));
        }
        src.push_str(&launch_wrappers());
        let (dir, lib) = build_library("kernels", &src, &["-O2", "-std=c++20", "-pthread"])?;
        type SetSync = unsafe extern "C" fn(extern "C" fn());
        // SAFETY: signature as defined in SHIM; emu_sync lives as long as the process.
        unsafe { lib.get::<SetSync>(b"emu_set_sync").unwrap()(emu_sync) };
        Some((dir, lib))
    })
    .as_ref()
    .map(|(_, l)| l)
}

/// Sets the calling OS thread's block and thread indices in the emulator library.
pub fn set_thread(lib: &libloading::Library, block: u32, block_dim: u32, thread: u32) {
    type Thread = unsafe extern "C" fn(u32, u32, u32);
    // SAFETY: signature as defined in SHIM; it only sets the thread's indices.
    unsafe { lib.get::<Thread>(b"emu_thread").unwrap()(block, block_dim, thread) };
}

/// For every kernel, `emu_launch_NAME(void** params)`: calls the kernel with its arguments
/// read from `params` as CUDA's `cuLaunchKernel` reads them (per parameter, the address of
/// its value), with the parameter types of the kernel's signature. [`HostLaunch`] calls them.
fn launch_wrappers() -> String {
    use quiver_gpu::kernels;
    let mut s = String::new();
    for &(_, _, names) in kernels::SOURCES {
        for name in names {
            let sig = kernels::signature(name).unwrap_or_else(|| panic!("no signature: {name}"));
            let args: Vec<String> = sig
                .iter()
                .enumerate()
                .map(|(k, p)| format!("*({}*)a[{k}]", p.c_type))
                .collect();
            s.push_str(&format!(
                "extern \"C\" void emu_launch_{name}(void** a) {{ {name}({}); }}\n",
                args.join(", ")
            ));
        }
    }
    s
}

/// The host side of `quiver_gpu::args`: a kernel's argument list, as the GPU steps pass it,
/// for the kernel compiled for the host. Buffers are host slices; what the launch passes is,
/// per argument, the address of its value (a buffer's pointer held here), as a device
/// launch does. [`HostLaunch::run`] checks the names and types against the kernel's
/// signature first, as the device launch does.
pub struct HostLaunch<'a> {
    kernel: &'static str,
    names: Vec<(&'static str, String)>,
    args: Vec<Arg>,
    _life: std::marker::PhantomData<&'a mut ()>,
}

/// An argument of a [`HostLaunch`]: a scalar's address, or a buffer's pointer.
enum Arg {
    Value(usize),
    Buffer(usize),
}

impl<'a> KernelSink<'a> for HostLaunch<'a> {
    type In<T: CType + 'a> = [T];
    type Out<T: CType + 'a> = [T];
    fn input<T: CType + 'a>(&mut self, name: &'static str, v: &'a [T]) {
        self.buffer(name, T::C, v.as_ptr() as usize);
    }
    fn output<T: CType + 'a>(&mut self, name: &'static str, v: &'a mut [T]) {
        self.buffer(name, T::C, v.as_mut_ptr() as usize);
    }
    fn value<T: CType + DeviceRepr + 'a>(&mut self, name: &'static str, v: &'a T) {
        self.names.push((name, T::C.to_string()));
        self.args.push(Arg::Value(v as *const T as usize));
    }
}

impl<'a> HostLaunch<'a> {
    /// The list `args` as a launch of its kernel.
    pub fn new<A: KernelArgs<'a, Self>>(args: A) -> Self {
        Self::of(A::KERNEL, args)
    }
    /// The list `args` as a launch of `kernel`, which takes the same list (the Riemann fit).
    pub fn of<A: KernelArgs<'a, Self>>(kernel: &'static str, args: A) -> Self {
        let mut l = HostLaunch {
            kernel,
            names: Vec::new(),
            args: Vec::new(),
            _life: std::marker::PhantomData,
        };
        args.push(&mut l);
        l
    }
    fn buffer(&mut self, name: &'static str, c: &str, ptr: usize) {
        self.args.push(Arg::Buffer(ptr));
        self.names.push((name, format!("{c}*")));
    }
    /// Exchanges the arguments at positions `i` and `j`, names and values: a list written in
    /// another order.
    pub fn swap(&mut self, i: usize, j: usize) {
        self.names.swap(i, j);
        self.args.swap(i, j);
    }
    /// The position of argument `name`.
    pub fn position(&self, name: &str) -> usize {
        self.names.iter().position(|n| n.0 == name).unwrap()
    }
    /// The production check of the list against the kernel's signature.
    pub fn check(&self) -> Result<(), quiver_gpu::GpuError> {
        quiver_gpu::kernels::check_launch(self.kernel, &self.names)
    }
    /// Checks the list, then runs `blocks` blocks of `threads` threads, one after the other
    /// on this thread (`threaded`: each block's threads on their own OS threads).
    pub fn run(&self, lib: &libloading::Library, blocks: u32, threads: u32, threaded: bool) {
        self.check().unwrap_or_else(|e| panic!("{e}"));
        self.run_unchecked(lib, blocks, threads, threaded);
    }
    /// [`HostLaunch::run`] without the check: what the kernel computes from a list as it is.
    pub fn run_unchecked(
        &self,
        lib: &libloading::Library,
        blocks: u32,
        threads: u32,
        threaded: bool,
    ) {
        type Wrapper = unsafe extern "C" fn(*const usize);
        let sym = format!("emu_launch_{}", self.kernel);
        // SAFETY: the wrapper `launch_wrappers` generated for this kernel.
        let f = *unsafe { lib.get::<Wrapper>(sym.as_bytes()) }.unwrap();
        // Per argument the address of its value: a scalar's own, a buffer's pointer's.
        let pointers: Vec<usize> = self
            .args
            .iter()
            .map(|a| match a {
                Arg::Buffer(p) => *p,
                Arg::Value(_) => 0,
            })
            .collect();
        let params: Vec<usize> = self
            .args
            .iter()
            .zip(&pointers)
            .map(|(a, p)| match a {
                Arg::Value(v) => *v,
                Arg::Buffer(_) => p as *const usize as usize,
            })
            .collect();
        let params = params.as_ptr() as usize;
        // SAFETY: one address per parameter of the kernel's signature (the list's length
        // and types are checked by `run`; tests that skip it pass values of the same types),
        // each to a live value or pointer into a live buffer sized by the caller.
        let call = || unsafe { f(params as *const usize) };
        let _only = ONE_LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        if threaded {
            // Each OS thread runs its thread of every block, the blocks one after the other
            // (`__shared__` memory is one per process): a barrier between blocks.
            run_threads(threads, |t, between| {
                for b in 0..blocks {
                    set_thread(lib, b, threads, t);
                    call();
                    if !between.wait() {
                        return;
                    }
                }
            });
        } else {
            for b in 0..blocks {
                for t in 0..threads {
                    set_thread(lib, b, threads, t);
                    call();
                }
            }
        }
    }
}

/// The segmented scan as `steps::seg_scan` launches it (`sg_tile_sum`, then `sg_tile_scan`,
/// one block per tile of `tile` values, `threads` threads each): per segment of `seg_off`,
/// the exclusive prefix sums of `value`, and the segment's total.
pub fn seg_scan(
    lib: &libloading::Library,
    (threads, threaded): (u32, bool),
    value: &[u32],
    seg_off: &[u32],
    tile: u32,
) -> (Vec<u32>, Vec<u32>) {
    use quiver_gpu::args::{SgTileScan, SgTileSum};
    let n_seg = seg_off.len() - 1;
    let longest = seg_off.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let tiles = longest.div_ceil(tile).max(1);
    let n_tiles = n_seg as u32 * tiles;
    let (mut sums, mut first, mut total) = (
        vec![7u32; n_tiles as usize],
        vec![7u32; value.len().max(1)],
        vec![7u32; n_seg],
    );
    HostLaunch::new(SgTileSum::<HostLaunch> {
        value,
        seg_off,
        tiles: &tiles,
        tile: &tile,
        tile_sum: &mut sums,
    })
    .run(lib, n_tiles, threads, threaded);
    HostLaunch::new(SgTileScan::<HostLaunch> {
        value,
        seg_off,
        tiles: &tiles,
        tile: &tile,
        tile_sum: &sums,
        first: &mut first,
        total: &mut total,
    })
    .run(lib, n_tiles, threads, threaded);
    first.truncate(value.len());
    (first, total)
}
