//! Where the process's memory is, for the run summary: the peak resident set, and at the
//! end of the job what the resident memory holds — the heap in use (the pool's cached
//! buffers among it; the job's products are gone by then), the freed heap the allocator
//! keeps for the next allocations, other anonymous mappings, and file-backed pages (the
//! memory-mapped input). Linux only (`/proc/self/status`; glibc's `mallinfo2` for the heap).

use std::fmt;

use crate::pool::PoolStats;

/// A snapshot of the process's memory; bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryReport {
    /// Peak resident set of the process (`VmHWM`).
    pub peak_rss: u64,
    /// Resident set now (`VmRSS`), anonymous (`RssAnon`) and file-backed (`RssFile` +
    /// `RssShmem`).
    pub rss: u64,
    pub rss_anon: u64,
    pub rss_file: u64,
    /// glibc heap: bytes in use (arenas and mapped chunks) and bytes freed but kept.
    /// `None` off glibc.
    pub heap_in_use: Option<u64>,
    pub heap_free: Option<u64>,
    /// The buffer pool: bytes it holds (cached and handed out), its peak during the job.
    pub pool_held: u64,
    pub pool_peak: u64,
}

impl MemoryReport {
    /// The snapshot now, or `None` where `/proc/self/status` cannot be read.
    pub fn now(pool: &PoolStats) -> Option<MemoryReport> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let kib = |key: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(key))?;
            line[key.len()..]
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
                .map(|k| k * 1024)
        };
        let (heap_in_use, heap_free) = heap();
        Some(MemoryReport {
            peak_rss: kib("VmHWM:")?,
            rss: kib("VmRSS:")?,
            rss_anon: kib("RssAnon:").unwrap_or(0),
            rss_file: kib("RssFile:").unwrap_or(0) + kib("RssShmem:").unwrap_or(0),
            heap_in_use,
            heap_free,
            pool_held: pool.bytes_held,
            pool_peak: pool.peak_bytes_held,
        })
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap() -> (Option<u64>, Option<u64>) {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let m = unsafe { libc::mallinfo2() };
    (
        Some((m.uordblks + m.hblkhd) as u64),
        Some(m.fordblks as u64),
    )
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap() -> (Option<u64>, Option<u64>) {
    (None, None)
}

/// One line for the run summary.
///
/// ```
/// use quiver_columnar::memory::MemoryReport;
/// let m = MemoryReport { peak_rss: 80 << 20, rss: 60 << 20, rss_anon: 50 << 20, rss_file: 10 << 20,
///     heap_in_use: Some(30 << 20), heap_free: Some(15 << 20), pool_held: 20 << 20, pool_peak: 25 << 20 };
/// assert_eq!(m.to_string(), "memory: peak RSS 80.0 MiB; at the end RSS 60.0 MiB: heap in use 30.0 MiB \
///     (pool 20.0 MiB, peak 25.0 MiB), freed heap kept by the allocator 15.0 MiB, other anonymous 5.0 MiB, \
///     file-backed (mapped input) 10.0 MiB");
/// ```
impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(
            f,
            "memory: peak RSS {:.1} MiB; at the end RSS {:.1} MiB: ",
            mib(self.peak_rss),
            mib(self.rss)
        )?;
        match (self.heap_in_use, self.heap_free) {
            (Some(used), Some(free)) => {
                let other = self.rss_anon.saturating_sub(used + free);
                write!(
                    f,
                    "heap in use {:.1} MiB (pool {:.1} MiB, peak {:.1} MiB), freed heap kept by the allocator {:.1} MiB, other anonymous {:.1} MiB, ",
                    mib(used),
                    mib(self.pool_held),
                    mib(self.pool_peak),
                    mib(free),
                    mib(other)
                )?;
            }
            _ => write!(
                f,
                "anonymous {:.1} MiB (pool {:.1} MiB, peak {:.1} MiB), ",
                mib(self.rss_anon),
                mib(self.pool_held),
                mib(self.pool_peak)
            )?,
        }
        write!(
            f,
            "file-backed (mapped input) {:.1} MiB",
            mib(self.rss_file)
        )
    }
}
