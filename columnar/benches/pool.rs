//! Pool benchmark: runs the toy chain (random_floats → square ×2 → compare) twice in one
//! process, a warm-up job then a measured job, and prints the pool hit rate and the
//! system allocations per event of the measured job, plus all heap allocations per event
//! (counted by a wrapping global allocator) for context.
//!
//!     cargo bench -p quiver-columnar --bench pool [-- EVENTS THREADS BATCH]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use quiver_columnar::{executor, plan, JobContext, PlanSpec, Registry, RunOptions};

struct Counting;
static HEAP_ALLOCS: AtomicU64 = AtomicU64::new(0);
// SAFETY: every call is forwarded unchanged to the system allocator, which upholds
// GlobalAlloc's contract; counting touches only an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HEAP_ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout contract is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System.alloc` with layout `l` (our `alloc`).
        unsafe { System.dealloc(p, l) }
    }
}
#[global_allocator]
static GLOBAL: Counting = Counting;

const PLAN: &str = r#"
[[step]]
label = "numbers"
type = "random_floats"
count = 1000
[[step]]
label = "squared"
type = "square"
input = "numbers"
[[step]]
label = "squared_powi"
type = "square"
input = "numbers"
method = "powi"
[[step]]
label = "check"
type = "compare"
a = "squared"
b = "squared_powi"
"#;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let events = args.first().copied().unwrap_or(20_000);
    let threads = args.get(1).copied().unwrap_or(2) as usize;
    let batch_size = args.get(2).copied().unwrap_or(16) as usize;
    let registry = Registry::with_builtin();
    let resolved =
        plan::validate(&PlanSpec::from_toml(PLAN, "pool bench").unwrap(), &registry).unwrap();
    let steps = resolved
        .build(&registry, JobContext::default().into())
        .unwrap();
    let warm = RunOptions {
        threads,
        batch_size,
        first_event: 0,
        events: Some(20 * batch_size as u64 * threads as u64),
        progress: false,
        cycle_input: false,
    };
    let w = executor::run(&resolved, &steps, &warm).unwrap();
    let heap_before = HEAP_ALLOCS.load(Ordering::Relaxed);
    let opts = RunOptions {
        events: Some(events),
        ..warm
    };
    let s = executor::run(&resolved, &steps, &opts).unwrap();
    let heap = HEAP_ALLOCS.load(Ordering::Relaxed) - heap_before;
    println!("pool benchmark: toy chain, 1000 floats/event, {threads} threads, batch {batch_size}");
    println!(
        "warm-up : {} events, {} pool requests, {} system allocations",
        w.events, w.pool.requests, w.pool.system_allocations
    );
    println!(
        "measured: {} events, {} pool requests, {} hits, {} system allocations -> hit rate {:.4}%, {:.5} system allocations/event",
        s.events,
        s.pool.requests,
        s.pool.hits,
        s.pool.system_allocations,
        100.0 * s.pool.hit_rate(),
        s.pool.system_allocations as f64 / s.events as f64
    );
    println!(
        "          pool held {:.2} MiB (peak {:.2} MiB); other heap allocations (framework bookkeeping) {:.1}/event; {:.0} events/s",
        s.pool.bytes_held as f64 / 1048576.0,
        s.pool.peak_bytes_held as f64 / 1048576.0,
        heap as f64 / s.events as f64,
        s.throughput()
    );
}
