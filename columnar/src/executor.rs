//! The executor: event batches run concurrently on a pool of workers; each batch goes
//! through the steps in plan order. Products depend only on the events, never on which
//! worker ran a batch or how events were batched, so results are bit-identical for any
//! thread count and batch size.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::overflow::{self, OverflowTallies, CAPACITY_OVERFLOWS};
use crate::plan::ResolvedPlan;
use crate::pool::{self, PoolStats};
use crate::product::ProductKey;
use crate::step::{EventBatch, Step};

/// Default events per batch: one. On the CPU the smallest batch is as fast or faster (better
/// balance between workers, data in cache) and holds the least memory (docs/performance.md,
/// "Batch size"). GPU plans want larger batches: set `[run] batch_size` or `--batch-size`.
pub const DEFAULT_BATCH_SIZE: usize = 1;

/// The most worker threads a job may ask for: each holds a batch in memory and a stack, so
/// thousands only thrash.
pub const MAX_THREADS: usize = 1024;

impl RunOptions {
    /// Checks the options against the events the input provides (`available`, when known):
    /// nothing is clamped silently, every refusal names the option and its valid range.
    ///
    /// ```
    /// use quiver_columnar::RunOptions;
    /// let o = RunOptions { events: Some(100), ..RunOptions::default() };
    /// assert_eq!(o.check(Some(8)).unwrap_err().to_string(),
    ///     "events = 100 from event 0, but the input has 8 events (0..8): ask for at most 8, or omit events to run them all");
    /// assert_eq!(RunOptions { events: Some(8), ..RunOptions::default() }.check(Some(8)).unwrap(), 8);
    /// // Replaying the input (benchmarks): any number of events.
    /// assert_eq!(RunOptions { events: Some(100), cycle_input: true, ..RunOptions::default() }.check(Some(8)).unwrap(), 100);
    /// // Event numbers are 32-bit: a range past 2^32 is refused, never wrapped.
    /// assert!(RunOptions { first_event: u32::MAX as u64 - 5, events: Some(10), ..RunOptions::default() }.check(None).is_err());
    /// ```
    pub fn check(&self, available: Option<u64>) -> Result<u64> {
        let n = self.check_counts(available)?;
        // Products number their events with a u32 `event` column: a range past 2^32 would
        // wrap to 0, 1, … and mix with the first events.
        let end = self.first_event.checked_add(n).filter(|&e| e <= 1 << 32);
        if end.is_none() {
            return Err(Error::Usage(format!(
                "events {}..{}: event numbers are 32-bit, so a run ends at event {} at most; ask for fewer events or an earlier first event",
                self.first_event,
                self.first_event as u128 + n as u128,
                1u64 << 32
            )));
        }
        Ok(n)
    }

    fn check_counts(&self, available: Option<u64>) -> Result<u64> {
        let usage = |m: String| Err(Error::Usage(m));
        if self.threads == 0 {
            return usage("threads = 0: a job needs at least 1 worker thread".into());
        }
        if self.threads > MAX_THREADS {
            return usage(format!(
                "threads = {}: at most {MAX_THREADS} worker threads (this machine has {} cores)",
                self.threads,
                default_threads()
            ));
        }
        if self.batch_size == 0 {
            return usage("batch size = 0: a batch holds at least 1 event".into());
        }
        if self.events == Some(0) {
            return usage("events = 0: nothing to run; ask for at least 1 event, or omit events to run them all".into());
        }
        if let Some(a) = available {
            if self.first_event > 0 && self.first_event >= a {
                return usage(format!(
                    "first event {} is beyond the input's {a} events (0..{a})",
                    self.first_event
                ));
            }
            if a == 0 && self.cycle_input {
                return usage("cycle_input: the input has no events to replay".into());
            }
            let left = a - self.first_event;
            if let Some(n) = self.events {
                if n > left && !self.cycle_input {
                    return usage(format!(
                        "events = {n} from event {}, but the input has {a} events (0..{a}): ask for at most {left}, or omit events to run them all",
                        self.first_event
                    ));
                }
            }
            Ok(self.events.unwrap_or(left))
        } else {
            self.events.map_or_else(|| usage("no step knows how many events there are: give --events N (or events = N in [run])".into()), Ok)
        }
    }
}

/// How to run a job.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Worker threads (also the size of the rayon pool steps use inside).
    pub threads: usize,
    /// Events per batch.
    pub batch_size: usize,
    /// The first event to process (0: from the start); events keep their absolute numbers.
    pub first_event: u64,
    /// Events to process from `first_event`; `None` means all the input steps provide.
    pub events: Option<u64>,
    /// Show a progress bar (only drawn when stderr is a terminal).
    pub progress: bool,
    /// Replay the input from its first event when `events` asks for more than it holds: event
    /// `n` (absolute numbers keep increasing) reads the input's event `n mod` its size
    /// ([`EventBatch::input_event`]). For benchmarks: many batches per worker from a small
    /// dataset, so that a scan measures the steady state rather than the last, half-empty
    /// round (pixeltrack-standalone's source repeats its events the same way).
    pub cycle_input: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            threads: default_threads(),
            batch_size: DEFAULT_BATCH_SIZE,
            first_event: 0,
            events: None,
            progress: true,
            cycle_input: false,
        }
    }
}

/// The available cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

static RUNTIME_NOTE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets, once per process, a note printed next to the thread count in every run summary:
/// the host tells what limits parallelism beyond the workers (the Python package reports
/// the interpreter and its GIL state).
pub fn set_runtime_note(note: impl Into<String>) {
    let _ = RUNTIME_NOTE.set(note.into());
}

/// Time spent in one step, summed over batches and workers.
#[derive(Clone, Debug)]
pub struct StepTiming {
    pub label: String,
    pub type_name: String,
    pub backend: String,
    /// Wall time of its calls, without `one_off`.
    pub time: Duration,
    /// One-off work inside its calls ([`crate::Step::one_off_time`]): reported apart, so that
    /// the time per event is what more events would cost.
    pub one_off: Duration,
}

/// What a job did.
#[derive(Clone, Debug)]
pub struct Summary {
    pub events: u64,
    pub batches: u64,
    pub threads: usize,
    pub batch_size: usize,
    pub wall: Duration,
    pub steps: Vec<StepTiming>,
    /// Bytes published per product, summed over the job.
    pub product_bytes: Vec<(ProductKey, u64)>,
    /// Rows published per product, summed over the job.
    pub product_rows: Vec<(ProductKey, u64)>,
    /// Pool activity during the job.
    pub pool: PoolStats,
    /// Reports returned by steps' end-of-job hooks, by label.
    pub reports: Vec<(String, String)>,
    /// Capacities reached, per step label and capacity (from the steps'
    /// [`CAPACITY_OVERFLOWS`] products); empty when nothing was truncated.
    pub overflows: OverflowTallies,
    /// Products made on a device or moved over the bus: where produced, downloads,
    /// uploads, device peak. Products absent here were made on the host and never moved.
    pub traffic: std::collections::BTreeMap<ProductKey, crate::residency::ProductTraffic>,
    /// The process's memory at the end of the job (peak RSS, what the resident set holds);
    /// `None` where it cannot be read.
    pub memory: Option<crate::memory::MemoryReport>,
}

impl Summary {
    /// Events per second of wall time.
    pub fn throughput(&self) -> f64 {
        self.events as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// One warning line per capacity reached (see [`crate::overflow`]).
    pub fn warnings(&self) -> Vec<String> {
        overflow::render_warnings(&self.overflows, self.events)
    }

    /// The summary as printed at the end of `quiver run`.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let note = RUNTIME_NOTE
            .get()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "events {}  batches {} (size {})  threads {}{note}  wall {:.3} s  throughput {:.1} events/s",
            self.events,
            self.batches,
            self.batch_size,
            self.threads,
            self.wall.as_secs_f64(),
            self.throughput()
        );
        let total: f64 = self.steps.iter().map(|t| t.time.as_secs_f64()).sum();
        let _ = writeln!(
            s,
            "\n{:<20} {:<20} {:<8} {:>12} {:>7}",
            "step", "type", "backend", "ms/event", "share"
        );
        for t in &self.steps {
            let secs = t.time.as_secs_f64();
            let _ = writeln!(
                s,
                "{:<20} {:<20} {:<8} {:>12.3} {:>6.1}%",
                t.label,
                t.type_name,
                t.backend,
                1e3 * secs / self.events.max(1) as f64,
                100.0 * secs / total.max(1e-12)
            );
        }
        for t in self.steps.iter().filter(|t| !t.one_off.is_zero()) {
            let _ = writeln!(
                s,
                "{:<20} one-off work in its first calls, not in ms/event: {:.1} ms",
                t.label,
                1e3 * t.one_off.as_secs_f64()
            );
        }
        let _ = writeln!(
            s,
            "\n{:<32} {:>14} {:>14}",
            "product", "rows/event", "bytes/event"
        );
        for ((k, bytes), (_, rows)) in self.product_bytes.iter().zip(&self.product_rows) {
            let n = self.events.max(1) as f64;
            let _ = writeln!(
                s,
                "{:<32} {:>14.1} {:>14.0}",
                k.to_string(),
                *rows as f64 / n,
                *bytes as f64 / n
            );
        }
        let p = &self.pool;
        let _ = writeln!(
            s,
            "\npool: {} requests, {} from the pool, {} from the system (hit rate {:.2}%), {:.1} MiB held, peak {:.1} MiB",
            p.requests,
            p.hits,
            p.system_allocations,
            100.0 * p.hit_rate(),
            p.bytes_held as f64 / (1 << 20) as f64,
            p.peak_bytes_held as f64 / (1 << 20) as f64
        );
        if let Some(m) = &self.memory {
            let _ = writeln!(s, "{m}");
        }
        if !self.traffic.is_empty() {
            let _ = writeln!(
                s,
                "\n{:<32} {:<10} {:>9} {:>12} {:>9} {:>9} {:>12} {:>9} {:>12}",
                "product (residency)",
                "made on",
                "downloads",
                "MiB down",
                "ms down",
                "uploads",
                "MiB up",
                "ms up",
                "dev peak MiB"
            );
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            for (k, t) in &self.traffic {
                let _ = writeln!(
                    s,
                    "{:<32} {:<10} {:>9} {:>12.3} {:>9.3} {:>9} {:>12.3} {:>9.3} {:>12.3}",
                    k.to_string(),
                    if t.produced_on.is_empty() {
                        "host"
                    } else {
                        t.produced_on.as_str()
                    },
                    t.downloads.count,
                    mib(t.downloads.bytes),
                    t.downloads.time.as_secs_f64() * 1e3,
                    t.uploads.count,
                    mib(t.uploads.bytes),
                    t.uploads.time.as_secs_f64() * 1e3,
                    mib(t.device_peak_bytes)
                );
            }
        }
        for (label, r) in &self.reports {
            let _ = writeln!(s, "\n[{label}]\n{}", r.trim_end());
        }
        let warnings = self.warnings();
        if !warnings.is_empty() {
            let _ = writeln!(s);
        }
        for w in warnings {
            let _ = writeln!(s, "{w}");
        }
        s
    }
}

/// How many batches past the lowest unfinished one a worker may start, for `threads`
/// workers: every worker keeps busy through ordinary variations of batch cost, and one
/// stalled batch holds at most this many others in the ordered writers (their pending
/// maps) instead of every later batch of the job (docs/reliability.md).
pub fn batches_ahead(threads: usize) -> u64 {
    4 * threads.max(1) as u64
}

/// The lowest batch not yet finished, and the finished ones above it.
struct Window {
    state: Mutex<(u64, std::collections::BTreeSet<u64>)>,
    moved: std::sync::Condvar,
}

impl Window {
    fn new() -> Self {
        Window {
            state: Mutex::new((0, std::collections::BTreeSet::new())),
            moved: std::sync::Condvar::new(),
        }
    }

    /// Waits until batch `b` is within `window` of the lowest unfinished batch; `false`
    /// when `stop` says the job ends instead. The lowest unfinished batch never waits (it
    /// is within any window of itself), so the job always advances.
    fn wait_until_within(&self, b: u64, window: u64, stop: impl Fn() -> bool) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while b >= st.0 + window {
            if stop() {
                return false;
            }
            st = self
                .moved
                .wait_timeout(st, std::time::Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    fn finish(&self, b: u64) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.1.insert(b);
        let mut advanced = false;
        loop {
            let low = st.0;
            if !st.1.remove(&low) {
                break;
            }
            st.0 += 1;
            advanced = true;
        }
        drop(st);
        if advanced {
            self.moved.notify_all();
        }
    }

    fn wake_all(&self) {
        self.moved.notify_all();
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown".into())
}

/// Runs `steps` (built from `plan`, same order) over the events.
pub fn run(plan: &ResolvedPlan, steps: &[Box<dyn Step>], opts: &RunOptions) -> Result<Summary> {
    let available = plan
        .steps
        .iter()
        .zip(steps)
        .filter_map(|(_, s)| s.n_events())
        .min();
    let events = opts.check(available)?;
    for step in steps {
        step.begin_job(opts.first_event, events)?;
    }
    let job = Job::new(plan, steps, opts, events, available);
    let start = Instant::now();
    job.run_workers()?;
    let wall = start.elapsed();
    let reports = job.end_job()?;
    Ok(job.summary(wall, reports))
}

/// The products one batch published and the capacities it reached, merged into the job's
/// totals when the batch is done.
#[derive(Default)]
struct BatchTally {
    bytes: Vec<(ProductKey, u64, u64)>,
    overflows: OverflowTallies,
}

/// The state the workers of one job share.
struct Job<'a> {
    plan: &'a ResolvedPlan,
    steps: &'a [Box<dyn Step>],
    opts: &'a RunOptions,
    events: u64,
    /// Events the input holds (for `cycle_input`).
    available: Option<u64>,
    /// After which step each product is no longer needed.
    drop_after: Vec<Vec<ProductKey>>,
    /// Checked between batches: an interrupted job stops within one batch per worker.
    cancel: crate::cancel::Check,
    n_batches: u64,
    next: AtomicU64,
    /// Backpressure: a worker starts batch b only when b < (lowest unfinished batch) +
    /// `window`, so one slow batch cannot make the ordered writers hold every later one.
    window: u64,
    progress: Window,
    failed: AtomicBool,
    /// A batch returned [`Error::Interrupted`] (a `KeyboardInterrupt` in a Python step):
    /// the job reports the interruption whichever batch saw it.
    interrupted: AtomicBool,
    /// The error of the earliest failed batch, by its first event.
    first_error: Mutex<Option<(u64, Error)>>,
    step_ns: Vec<AtomicU64>,
    bytes: Mutex<HashMap<ProductKey, (u64, u64)>>,
    overflows: Mutex<OverflowTallies>,
    bar: indicatif::ProgressBar,
    pool_before: PoolStats,
    traffic: std::sync::Arc<crate::residency::TrafficLog>,
}

impl<'a> Job<'a> {
    fn new(
        plan: &'a ResolvedPlan,
        steps: &'a [Box<dyn Step>],
        opts: &'a RunOptions,
        events: u64,
        available: Option<u64>,
    ) -> Self {
        let last_use = plan.last_use();
        let drop_after = (0..plan.steps.len())
            .map(|i| {
                last_use
                    .iter()
                    .filter(|(_, &l)| l == i)
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .collect();
        Job {
            plan,
            steps,
            opts,
            events,
            available,
            drop_after,
            cancel: crate::cancel::Check::current(),
            n_batches: events.div_ceil(opts.batch_size as u64),
            next: AtomicU64::new(0),
            window: batches_ahead(opts.threads),
            progress: Window::new(),
            failed: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
            first_error: Mutex::new(None),
            step_ns: plan.steps.iter().map(|_| AtomicU64::new(0)).collect(),
            bytes: Mutex::new(HashMap::new()),
            overflows: Mutex::new(OverflowTallies::new()),
            bar: progress_bar(opts.progress, events),
            pool_before: pool::global().stats(),
            traffic: Default::default(),
        }
    }

    fn stopping(&self) -> bool {
        self.failed.load(Ordering::Relaxed) || self.cancel.requested()
    }

    /// Records the error of the batch starting at event `first`. The earliest batch's error
    /// wins, so the message does not depend on timing: batches are taken in order, and once
    /// a batch fails no new one starts, but every batch already taken (all those before the
    /// failed one among them) runs to its end and may replace the error with its own.
    fn record(&self, first: u64, e: Error) {
        if matches!(e, Error::Interrupted(_)) {
            self.interrupted.store(true, Ordering::Relaxed);
        }
        self.failed.store(true, Ordering::Relaxed);
        let mut slot = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_none_or(|(f, _)| first < *f) {
            *slot = Some((first, e));
        }
        drop(slot);
        self.progress.wake_all();
    }

    /// Starts the workers and waits for them.
    fn run_workers(&self) -> Result<()> {
        let rayon_pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.opts.threads)
            .thread_name(|i| format!("quiver-worker-{i}"))
            .build()
            .map_err(|e| {
                Error::data(format!(
                    "cannot start {} worker threads: {e}",
                    self.opts.threads
                ))
            })?;
        rayon_pool.scope(|s| {
            for _ in 0..self.opts.threads {
                s.spawn(|_| self.worker());
            }
        });
        self.bar.finish_and_clear();
        Ok(())
    }

    /// Takes batches in order until there are none left, one fails or the job is cancelled.
    fn worker(&self) {
        while !self.stopping() {
            let b = self.next.fetch_add(1, Ordering::Relaxed);
            if b >= self.n_batches {
                break;
            }
            if !self
                .progress
                .wait_until_within(b, self.window, || self.stopping())
            {
                break;
            }
            let offset = b * self.opts.batch_size as u64;
            let n = (self.events - offset).min(self.opts.batch_size as u64) as usize;
            let first = self.opts.first_event + offset;
            match self.run_batch(first, n) {
                Ok(tally) => self.merge(tally),
                Err(e) => {
                    self.record(first, e);
                    return;
                }
            }
            self.bar.inc(n as u64);
            self.progress.finish(b);
        }
    }

    /// Runs every step over the `n` events from `first`.
    fn run_batch(&self, first: u64, n: usize) -> Result<BatchTally> {
        let mut batch = EventBatch::new(first, n);
        if self.opts.cycle_input {
            batch.set_input_cycle(self.available);
        }
        batch.set_traffic(self.traffic.clone());
        let mut tally = BatchTally::default();
        for (i, (st, step)) in self.plan.steps.iter().zip(self.steps).enumerate() {
            let at_step = |cause: Error| match cause {
                Error::Step { .. } | Error::Interrupted(_) => cause,
                cause => Error::Step {
                    label: st.label.clone(),
                    first,
                    last: first + n as u64,
                    cause: Box::new(cause),
                },
            };
            batch.set_allowed(&st.outputs);
            let t0 = Instant::now();
            // A panic in a step is a bug, but it must not take the job down without a
            // message naming the step and the events.
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step.process(&mut batch)))
                    .unwrap_or_else(|p| Err(Error::Panic(panic_message(&p))));
            self.step_ns[i].fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            r.map_err(at_step)?;
            tally_outputs(&batch, st, &mut tally).map_err(at_step)?;
            for k in &self.drop_after[i] {
                batch.remove(k);
            }
        }
        Ok(tally)
    }

    fn merge(&self, tally: BatchTally) {
        let mut all = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        for (k, nb, rows) in tally.bytes {
            let e = all.entry(k).or_default();
            e.0 += nb;
            e.1 += rows;
        }
        drop(all);
        if tally.overflows.is_empty() {
            return;
        }
        let mut all = self.overflows.lock().unwrap_or_else(|p| p.into_inner());
        for (k, v) in tally.overflows {
            let t = all.entry(k).or_default();
            t.events += v.events;
            t.limit = v.limit;
            t.truncated += v.truncated;
            t.max_demanded = match (t.max_demanded, v.max_demanded) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
    }

    /// Runs every step's end-of-job hook (also after a failure: writers keep what they
    /// wrote), then reports the job's error: an interruption, else the earliest batch's
    /// error, else the first end-of-job error.
    fn end_job(&self) -> Result<Vec<(String, String)>> {
        let first_error = self
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let interrupted = self.cancel.requested() || self.interrupted.load(Ordering::Relaxed);
        let success = first_error.is_none() && !interrupted;
        let mut reports = Vec::new();
        let mut end_error = None;
        for (st, step) in self.plan.steps.iter().zip(self.steps) {
            match step.end_job(success) {
                Ok(Some(r)) => reports.push((st.label.clone(), r)),
                Ok(None) => {}
                Err(e) => {
                    end_error.get_or_insert(Error::EndJob {
                        label: st.label.clone(),
                        cause: Box::new(e),
                    });
                }
            }
        }
        if interrupted {
            return Err(Error::Interrupted(
                "the job stopped before its last event".into(),
            ));
        }
        match first_error.map(|(_, e)| e).or(end_error) {
            Some(e) => Err(e),
            None => Ok(reports),
        }
    }

    fn summary(self, wall: Duration, reports: Vec<(String, String)>) -> Summary {
        let bytes = self.bytes.into_inner().unwrap_or_else(|p| p.into_inner());
        let keys: Vec<ProductKey> = self
            .plan
            .steps
            .iter()
            .flat_map(|s| s.outputs.iter().cloned())
            .collect();
        Summary {
            events: self.events,
            batches: self.n_batches,
            threads: self.opts.threads,
            batch_size: self.opts.batch_size,
            wall,
            steps: self
                .plan
                .steps
                .iter()
                .zip(&self.step_ns)
                .zip(self.steps)
                .map(|((st, ns), step)| {
                    let all = Duration::from_nanos(ns.load(Ordering::Relaxed));
                    let one_off = step.one_off_time().min(all);
                    StepTiming {
                        label: st.label.clone(),
                        type_name: st.type_name.clone(),
                        backend: st.backend.to_string(),
                        time: all - one_off,
                        one_off,
                    }
                })
                .collect(),
            product_bytes: keys
                .iter()
                .map(|k| (k.clone(), bytes.get(k).map_or(0, |b| b.0)))
                .collect(),
            product_rows: keys
                .iter()
                .map(|k| (k.clone(), bytes.get(k).map_or(0, |b| b.1)))
                .collect(),
            pool: pool::global().stats().since(&self.pool_before),
            reports,
            overflows: self
                .overflows
                .into_inner()
                .unwrap_or_else(|p| p.into_inner()),
            traffic: self.traffic.snapshot(),
            memory: crate::memory::MemoryReport::now(&pool::global().stats()),
        }
    }
}

/// Counts what step `st` published into `tally`; a declared product it did not publish is
/// an error.
fn tally_outputs(
    batch: &EventBatch,
    st: &crate::plan::ResolvedStep,
    tally: &mut BatchTally,
) -> Result<()> {
    for k in &st.outputs {
        // get_resident: counting must not download a device product.
        let Ok(p) = batch.get_resident(k) else {
            return Err(Error::NotPublished {
                product: k.type_name.clone(),
            });
        };
        tally.bytes.push((
            k.clone(),
            (p.nbytes() + p.device_nbytes()) as u64,
            p.num_rows() as u64,
        ));
        if k.type_name == CAPACITY_OVERFLOWS && p.num_rows() > 0 {
            let p = batch.get(k)?;
            overflow::tally(&mut tally.overflows, &st.label, &p)?;
        }
    }
    Ok(())
}

fn progress_bar(wanted: bool, events: u64) -> indicatif::ProgressBar {
    if !wanted || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(events);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} events  {per_sec}  eta {eta}")
    {
        b.set_style(style);
    }
    b
}
