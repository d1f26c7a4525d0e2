//! Bookkeeping of host ↔ device transfers and kernel time of one GPU step, summed over the
//! batches of a job and reported at its end. Times come from CUDA events recorded on the
//! batch's stream around the upload, kernel and download phases (device time, not the time
//! the host spent enqueueing).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Whether each kernel launch and each host ↔ device copy is timed (CUDA events around it),
/// for the per-kernel and bus-time lines of the report: `QUIVER_GPU_KERNEL_TIMES=1`. Off by
/// default: two events per launch and per copy.
pub fn kernel_timing() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("QUIVER_GPU_KERNEL_TIMES").is_ok_and(|v| v == "1"))
}

/// One batch's transfers and kernel time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchTransfers {
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    pub h2d_seconds: f64,
    pub kernel_seconds: f64,
    pub d2h_seconds: f64,
}

/// Sums over a job; shared by all workers.
#[derive(Debug, Default)]
pub struct TransferStats {
    batches: AtomicU64,
    h2d_bytes: AtomicU64,
    d2h_bytes: AtomicU64,
    h2d_ns: AtomicU64,
    kernel_ns: AtomicU64,
    d2h_ns: AtomicU64,
    /// Batches handed to the CPU implementation (inputs the device path rejects).
    cpu_fallbacks: AtomicU64,
    /// Bytes of conditions uploaded (once per job).
    conditions_bytes: AtomicU64,
    /// Per kernel, when timed: launches and device nanoseconds.
    kernels: Mutex<BTreeMap<&'static str, (u64, u64)>>,
    /// Each copy's own device time, when timed: host→device, device→host (copies, bytes,
    /// nanoseconds). The phases above also hold the host's work between the copies (filling
    /// the staging, building tables) whenever the stream waits for it.
    bus: [[AtomicU64; 3]; 2],
}

fn ns(s: f64) -> u64 {
    (s.max(0.0) * 1e9).round() as u64
}

impl TransferStats {
    /// Adds one batch.
    pub fn add(&self, b: &BatchTransfers) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.h2d_bytes.fetch_add(b.h2d_bytes, Ordering::Relaxed);
        self.d2h_bytes.fetch_add(b.d2h_bytes, Ordering::Relaxed);
        self.h2d_ns.fetch_add(ns(b.h2d_seconds), Ordering::Relaxed);
        self.kernel_ns
            .fetch_add(ns(b.kernel_seconds), Ordering::Relaxed);
        self.d2h_ns.fetch_add(ns(b.d2h_seconds), Ordering::Relaxed);
    }
    /// Adds one timed launch of kernel `name`.
    pub fn add_kernel(&self, name: &'static str, seconds: f64) {
        let mut k = self.kernels.lock().unwrap_or_else(|p| p.into_inner());
        let e = k.entry(name).or_default();
        e.0 += 1;
        e.1 += ns(seconds);
    }
    /// Adds one timed copy across the bus (`to_device`: host→device) of `bytes`.
    pub fn add_copy(&self, to_device: bool, bytes: u64, seconds: f64) {
        let b = &self.bus[usize::from(!to_device)];
        b[0].fetch_add(1, Ordering::Relaxed);
        b[1].fetch_add(bytes, Ordering::Relaxed);
        b[2].fetch_add(ns(seconds), Ordering::Relaxed);
    }
    /// The timed copies' time over itself plus the timed kernels' time (`None` when no copy
    /// and no kernel was timed): the share of the device's work that was moving data.
    pub fn bus_share(&self) -> Option<f64> {
        let bus: u64 = self.bus.iter().map(|b| b[2].load(Ordering::Relaxed)).sum();
        let kernels: u64 = self
            .kernels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|&(_, t)| t)
            .sum();
        (bus + kernels > 0).then(|| bus as f64 / (bus + kernels) as f64)
    }
    /// Counts a batch that ran on the CPU implementation.
    pub fn add_cpu_fallback(&self) {
        self.cpu_fallbacks.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts conditions uploaded for the job.
    pub fn add_conditions(&self, bytes: u64) {
        self.conditions_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    /// The sums as one batch-like record, and the number of batches.
    pub fn totals(&self) -> (u64, BatchTransfers) {
        let s = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 * 1e-9;
        (
            self.batches.load(Ordering::Relaxed),
            BatchTransfers {
                h2d_bytes: self.h2d_bytes.load(Ordering::Relaxed),
                d2h_bytes: self.d2h_bytes.load(Ordering::Relaxed),
                h2d_seconds: s(&self.h2d_ns),
                kernel_seconds: s(&self.kernel_ns),
                d2h_seconds: s(&self.d2h_ns),
            },
        )
    }
    /// Transfer time over device time (transfers + kernels), 0 when nothing ran.
    pub fn transfer_share(&self) -> f64 {
        let (_, t) = self.totals();
        let xfer = t.h2d_seconds + t.d2h_seconds;
        let all = xfer + t.kernel_seconds;
        if all > 0.0 {
            xfer / all
        } else {
            0.0
        }
    }
    /// The end-of-job report (the run summary prints it under the step's label).
    ///
    /// ```
    /// use quiver_gpu::transfer::{BatchTransfers, TransferStats};
    /// let s = TransferStats::default();
    /// s.add(&BatchTransfers { h2d_bytes: 3 << 20, d2h_bytes: 1 << 20, h2d_seconds: 0.003, kernel_seconds: 0.002, d2h_seconds: 0.001 });
    /// let r = s.report();
    /// assert!(r.contains("host→device 3.0 MiB in 3.000 ms"), "{r}");
    /// assert!(r.contains("transfer share 66.7%"), "{r}");
    /// s.add_kernel("k_count", 0.002);
    /// s.add_kernel("k_write", 0.003);
    /// s.add_kernel("k_count", 0.002);
    /// assert!(s.report().ends_with("kernel time (launches): k_count 4.000 ms (2), k_write 3.000 ms (1)"), "{}", s.report());
    /// // Timed copies: their own device time, beside the phases' (which hold host work too).
    /// s.add_copy(true, 2 << 20, 0.0001);
    /// s.add_copy(false, 1 << 20, 0.0002);
    /// assert!(s.report().contains("bus time (each copy timed): host→device 2.0 MiB in 0.100 ms (1 copies, 20.97 GB/s), device→host 1.0 MiB in 0.200 ms (1 copies, 5.24 GB/s), bus share 4.1%"), "{}", s.report());
    /// ```
    pub fn report(&self) -> String {
        let (n, t) = self.totals();
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let rate = |b: u64, s: f64| {
            if s > 0.0 {
                format!("{:.2} GB/s", b as f64 / s * 1e-9)
            } else {
                "-".into()
            }
        };
        let mut r = format!(
            "gpu: {n} batches, host→device {:.1} MiB in {:.3} ms ({}), device→host {:.1} MiB in {:.3} ms ({}), kernels {:.3} ms, transfer share {:.1}%",
            mib(t.h2d_bytes),
            1e3 * t.h2d_seconds,
            rate(t.h2d_bytes, t.h2d_seconds),
            mib(t.d2h_bytes),
            1e3 * t.d2h_seconds,
            rate(t.d2h_bytes, t.d2h_seconds),
            1e3 * t.kernel_seconds,
            100.0 * self.transfer_share()
        );
        let cond = self.conditions_bytes.load(Ordering::Relaxed);
        if cond > 0 {
            r.push_str(&format!(
                "\ngpu: conditions uploaded once: {:.1} MiB",
                mib(cond)
            ));
        }
        let copies: Vec<[u64; 3]> = self
            .bus
            .iter()
            .map(|b| [0, 1, 2].map(|i| b[i].load(Ordering::Relaxed)))
            .collect();
        if copies.iter().any(|c| c[0] > 0) {
            let part = |c: &[u64; 3]| {
                format!(
                    "{:.1} MiB in {:.3} ms ({} copies, {})",
                    mib(c[1]),
                    c[2] as f64 * 1e-6,
                    c[0],
                    rate(c[1], c[2] as f64 * 1e-9)
                )
            };
            r.push_str(&format!(
                "\ngpu: bus time (each copy timed): host→device {}, device→host {}, bus share {:.1}% (of the copies' and kernels' time)",
                part(&copies[0]),
                part(&copies[1]),
                100.0 * self.bus_share().unwrap_or(0.0)
            ));
        }
        let mut k: Vec<_> = self
            .kernels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(n, &(c, t))| (*n, c, t))
            .collect();
        if !k.is_empty() {
            k.sort_by_key(|&(n, _, t)| (std::cmp::Reverse(t), n));
            let parts: Vec<String> = k
                .iter()
                .map(|(n, c, t)| format!("{n} {:.3} ms ({c})", *t as f64 * 1e-6))
                .collect();
            r.push_str(&format!(
                "\ngpu: kernel time (launches): {}",
                parts.join(", ")
            ));
        }
        let fb = self.cpu_fallbacks.load(Ordering::Relaxed);
        if fb > 0 {
            r.push_str(&format!("\ngpu: {fb} batches ran on the CPU implementation (inputs the device path does not take)"));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_over_threads_and_share() {
        let s = TransferStats::default();
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    for _ in 0..100 {
                        s.add(&BatchTransfers {
                            h2d_bytes: 10,
                            d2h_bytes: 5,
                            h2d_seconds: 1e-4,
                            kernel_seconds: 2e-4,
                            d2h_seconds: 1e-4,
                        });
                    }
                });
            }
        });
        let (n, t) = s.totals();
        assert_eq!((n, t.h2d_bytes, t.d2h_bytes), (400, 4000, 2000));
        assert!((t.kernel_seconds - 0.08).abs() < 1e-9);
        assert!((s.transfer_share() - 0.5).abs() < 1e-9);
        assert!(!s.report().contains("CPU implementation"));
        s.add_cpu_fallback();
        s.add_conditions(2 << 20);
        let r = s.report();
        assert!(
            r.contains("1 batches ran on the CPU")
                && r.contains("conditions uploaded once: 2.0 MiB"),
            "{r}"
        );
    }

    #[test]
    fn empty_job_has_no_share() {
        let s = TransferStats::default();
        assert_eq!(s.transfer_share(), 0.0);
        assert!(s.report().starts_with("gpu: 0 batches"));
    }
}
