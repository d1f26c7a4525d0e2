//! Page-locked (pinned) host memory for a batch's transfers.
//!
//! A copy between pageable host memory and the device goes through the driver's own
//! staging: a download returns only when it is done, and copies of concurrent workers
//! contend for that staging (on an H200 with 16 workers, pageable copies ran at 0.06–1.8
//! GB/s). A [`Staging`] is page-locked memory that one batch (one [`crate::steps`] run)
//! owns while it runs: uploads are copied into it and sent asynchronously, downloads land
//! in it and are copied out once the stream has them. Its regions are handed out in order
//! and are all free again once the stream has synchronised; the memory is kept and reused
//! by later batches (from [`StagingPool`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, PinnedHostSlice};

/// The smallest page-locked chunk allocated (1 MiB): most batches need one.
const MIN_CHUNK: usize = 1 << 20;
/// Regions start on this alignment (bytes), as device copies prefer.
const ALIGN: usize = 256;

/// Page-locked memory for one batch's transfers (see the module documentation).
#[derive(Default)]
pub struct Staging {
    /// Chunks and their base addresses (as integers: the chunks own the memory).
    chunks: Vec<(PinnedHostSlice<u8>, usize)>,
    /// Bytes handed out in the last chunk.
    used: usize,
}

impl Staging {
    /// A region of `n` bytes that stays valid until [`Staging::reset`]; allocates a new
    /// chunk (at least twice the last one) when the last is full.
    pub fn region(&mut self, pool: &StagingPool, n: usize) -> Result<&mut [u8], String> {
        let start = self.used.div_ceil(ALIGN) * ALIGN;
        let fits = self.chunks.last().is_some_and(|(c, _)| start.checked_add(n).is_some_and(|end| end <= c.len()));
        let (base, at) = if fits {
            (self.chunks.last().map_or(0, |c| c.1), start)
        } else {
            let size = n.max(MIN_CHUNK).next_power_of_two().max(2 * self.chunks.last().map_or(0, |c| c.0.len()));
            // SAFETY: plain bytes, written (host copy or download) before they are read.
            let mut chunk = unsafe { pool.ctx.alloc_pinned_with_flags::<u8>(size, 0) }
                .map_err(|e| format!("allocating {size} bytes of page-locked host memory: {e}"))?;
            let base = chunk.as_mut_ptr().map_err(|e| format!("page-locked host memory: {e}"))? as usize;
            pool.bytes.fetch_add(size as u64, Ordering::Relaxed);
            self.chunks.push((chunk, base));
            (base, 0)
        };
        self.used = at + n;
        // SAFETY: [at, at + n) lies inside a live chunk that this staging owns, and no other
        // region handed out since the last reset overlaps it.
        Ok(unsafe { std::slice::from_raw_parts_mut((base + at) as *mut u8, n) })
    }

    /// Every region is free again: the caller has synchronised the stream that used them.
    /// Keeps the largest chunk only.
    pub fn reset(&mut self, pool: &StagingPool) {
        if self.chunks.len() > 1 {
            let last = self.chunks.pop();
            let freed: usize = self.chunks.iter().map(|c| c.0.len()).sum();
            pool.bytes.fetch_sub(freed as u64, Ordering::Relaxed);
            self.chunks.clear();
            self.chunks.extend(last);
        }
        self.used = 0;
    }
}

/// The stagings of idle batches, reused by the next ones (one per concurrent batch).
pub struct StagingPool {
    ctx: Arc<CudaContext>,
    idle: Mutex<Vec<Staging>>,
    bytes: AtomicU64,
}

impl StagingPool {
    pub fn new(ctx: Arc<CudaContext>) -> Self {
        StagingPool { ctx, idle: Mutex::new(Vec::new()), bytes: AtomicU64::new(0) }
    }
    /// An idle staging, or a new empty one.
    pub fn take(&self) -> Staging {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default()
    }
    /// Gives back a staging whose stream has synchronised.
    pub fn give(&self, mut s: Staging) {
        s.reset(self);
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(s);
    }
    /// Page-locked bytes held by all stagings.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}
