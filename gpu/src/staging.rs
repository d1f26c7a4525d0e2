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

use crate::error::GpuError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, PinnedHostSlice};

/// The smallest page-locked chunk allocated (1 MiB): most batches need one.
const MIN_CHUNK: usize = 1 << 20;
/// Regions start on this alignment (bytes), as device copies prefer.
const ALIGN: usize = 256;

/// Regions handed out in order from chunks of memory owned as `C` (page-locked memory for
/// [`Staging`]), all free again after [`Arena::reset`]. Each region starts a multiple of
/// 256 bytes from its chunk's base (page-locked chunks are page-aligned); a full chunk is
/// followed by one at least twice as large.
///
/// ```
/// use quiver_gpu::staging::Arena;
/// let mut a: Arena<Vec<u8>> = Arena::default();
/// let alloc = |n: usize| -> Result<(Vec<u8>, usize), quiver_gpu::GpuError> {
///     let mut v = vec![0u8; n];
///     let base = v.as_mut_ptr() as usize;
///     Ok((v, base))
/// };
/// let p = a.region(100, alloc).unwrap().as_ptr() as usize;
/// let q = a.region(10, alloc).unwrap().as_ptr() as usize;
/// assert_eq!(q - p, 256);
/// assert_eq!(a.reset(), 0); // one chunk: kept
/// ```
pub struct Arena<C> {
    /// Chunks, their base addresses (as integers: the chunks own the memory) and lengths.
    chunks: Vec<(C, usize, usize)>,
    /// Bytes handed out in the last chunk.
    used: usize,
}

impl<C> Default for Arena<C> {
    fn default() -> Self {
        Arena {
            chunks: Vec::new(),
            used: 0,
        }
    }
}

impl<C> Arena<C> {
    /// A region of `n` bytes that stays valid until [`Arena::reset`]. `alloc(size)` makes a
    /// new chunk of `size` bytes and returns it with its base address, when the last chunk
    /// is full (`size`: a power of two, at least 1 MiB, `n` and twice the last chunk).
    pub fn region(
        &mut self,
        n: usize,
        alloc: impl FnOnce(usize) -> Result<(C, usize), GpuError>,
    ) -> Result<&mut [u8], GpuError> {
        let start = self.used.div_ceil(ALIGN) * ALIGN;
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| start.checked_add(n).is_some_and(|end| end <= c.2));
        let (base, at) = if fits {
            (self.chunks.last().map_or(0, |c| c.1), start)
        } else {
            let size = n
                .max(MIN_CHUNK)
                .checked_next_power_of_two()
                .ok_or_else(|| GpuError::Layout(format!("a staging region of {n} bytes")))?
                .max(2 * self.chunks.last().map_or(0, |c| c.2));
            let (chunk, base) = alloc(size)?;
            self.chunks.push((chunk, base, size));
            (base, 0)
        };
        self.used = at + n;
        // SAFETY: [at, at + n) lies inside a live chunk that this arena owns, and no other
        // region handed out since the last reset overlaps it.
        Ok(unsafe { std::slice::from_raw_parts_mut((base + at) as *mut u8, n) })
    }

    /// Every region is free again (the caller knows nothing uses them any more). Keeps the
    /// last (largest) chunk only; returns the bytes of the chunks dropped.
    pub fn reset(&mut self) -> usize {
        let mut freed = 0;
        if self.chunks.len() > 1 {
            let last = self.chunks.pop();
            freed = self.chunks.iter().map(|c| c.2).sum();
            self.chunks.clear();
            self.chunks.extend(last);
        }
        self.used = 0;
        freed
    }

    /// Bytes of the chunks held.
    pub fn capacity(&self) -> usize {
        self.chunks.iter().map(|c| c.2).sum()
    }
}

/// Page-locked memory for one batch's transfers (see the module documentation).
#[derive(Default)]
pub struct Staging(Arena<PinnedHostSlice<u8>>);

impl Staging {
    /// A region of `n` bytes that stays valid until [`Staging::reset`]; allocates a new
    /// page-locked chunk when the last is full.
    pub fn region(&mut self, pool: &StagingPool, n: usize) -> Result<&mut [u8], GpuError> {
        self.0.region(n, |size| {
            // SAFETY: plain bytes, written (host copy or download) before they are read.
            let mut chunk =
                unsafe { pool.ctx.alloc_pinned_with_flags::<u8>(size, 0) }.map_err(|e| {
                    GpuError::driver(
                        format!("allocating {size} bytes of page-locked host memory"),
                        e,
                    )
                })?;
            let base = chunk
                .as_mut_ptr()
                .map_err(|e| GpuError::driver("page-locked host memory", e))?
                as usize;
            pool.bytes.fetch_add(size as u64, Ordering::Relaxed);
            Ok((chunk, base))
        })
    }

    /// Every region is free again: the caller has synchronised the stream that used them.
    /// Keeps the largest chunk only.
    pub fn reset(&mut self, pool: &StagingPool) {
        let freed = self.0.reset();
        pool.bytes.fetch_sub(freed as u64, Ordering::Relaxed);
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
        StagingPool {
            ctx,
            idle: Mutex::new(Vec::new()),
            bytes: AtomicU64::new(0),
        }
    }
    /// An idle staging, or a new empty one.
    pub fn take(&self) -> Staging {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(
        sizes: &std::cell::RefCell<Vec<usize>>,
    ) -> impl Fn(usize) -> Result<(Vec<u8>, usize), GpuError> + '_ {
        move |n| {
            sizes.borrow_mut().push(n);
            let mut v = vec![0u8; n];
            let base = v.as_mut_ptr() as usize;
            Ok((v, base))
        }
    }

    #[test]
    fn regions_are_aligned_disjoint_and_reused_after_a_reset() {
        let sizes = std::cell::RefCell::new(Vec::new());
        let mut a: Arena<Vec<u8>> = Arena::default();
        let mut spans = Vec::new();
        for n in [1usize, 300, 5000, 256, 70_000] {
            let r = a.region(n, alloc(&sizes)).unwrap();
            assert_eq!(r.len(), n);
            r.fill(n as u8);
            let p = r.as_ptr() as usize;
            let base = spans.first().map_or(p, |s: &(usize, usize, u8)| s.0);
            assert_eq!(
                (p - base) % ALIGN,
                0,
                "region of {n} bytes at {p:#x}, chunk at {base:#x}"
            );
            spans.push((p, p + n, n as u8));
        }
        // Disjoint, and each still holds what was written into it.
        for (i, x) in spans.iter().enumerate() {
            for y in &spans[i + 1..] {
                assert!(x.1 <= y.0 || y.1 <= x.0, "{x:?} overlaps {y:?}");
            }
            assert!(
                // SAFETY: the span lies in a chunk the arena still holds.
                unsafe { std::slice::from_raw_parts(x.0 as *const u8, x.1 - x.0) }
                    .iter()
                    .all(|&b| b == x.2)
            );
        }
        assert_eq!(*sizes.borrow(), [MIN_CHUNK], "one chunk holds them all");
        // After a reset the first region starts where the first did.
        a.reset();
        assert_eq!(
            a.region(10, alloc(&sizes)).unwrap().as_ptr() as usize,
            spans[0].0
        );
    }

    #[test]
    fn a_full_chunk_is_followed_by_a_larger_one_and_a_reset_keeps_the_last() {
        let sizes = std::cell::RefCell::new(Vec::new());
        let mut a: Arena<Vec<u8>> = Arena::default();
        a.region(MIN_CHUNK - 100, alloc(&sizes)).unwrap();
        a.region(200, alloc(&sizes)).unwrap(); // does not fit: a chunk of twice the size
        a.region(3 * MIN_CHUNK, alloc(&sizes)).unwrap(); // larger than twice: its power of two
        assert_eq!(*sizes.borrow(), [MIN_CHUNK, 2 * MIN_CHUNK, 4 * MIN_CHUNK]);
        assert_eq!(a.capacity(), 7 * MIN_CHUNK);
        assert_eq!(
            a.reset(),
            3 * MIN_CHUNK,
            "the two smaller chunks are dropped"
        );
        assert_eq!(a.capacity(), 4 * MIN_CHUNK);
        // The kept chunk serves the next batch with no allocation.
        a.region(4 * MIN_CHUNK, alloc(&sizes)).unwrap();
        assert_eq!(sizes.borrow().len(), 3);
        assert_eq!(a.reset(), 0);
    }

    #[test]
    fn an_impossible_size_is_an_error_not_a_panic() {
        let sizes = std::cell::RefCell::new(Vec::new());
        let mut a: Arena<Vec<u8>> = Arena::default();
        assert!(a.region(usize::MAX - 10, alloc(&sizes)).is_err());
        assert!(sizes.borrow().is_empty());
    }
}
