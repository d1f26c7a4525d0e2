//! A size-class pool of device buffers, like the host pool of `quiver_columnar::pool`:
//! requests are rounded up to a power of two (at least [`MIN_CLASS`] bytes), a returned
//! buffer waits in the free list of its class, and the next request of that class reuses
//! it instead of allocating (device allocations synchronise and are slow).
//!
//! Free lists are kept per *owner*: a CUDA stream when the streams synchronise without
//! per-buffer events ([`crate::device::SyncMode::Streams`]), so that a buffer returns only
//! to work ordered after its last use on its stream; one shared owner (0) otherwise. Buffers
//! whose owners have all gone idle are [`SizeClassPool::settle`]d into a list any owner may
//! take from.
//!
//! The pool is generic over the buffer type so that its bookkeeping is tested on the host
//! with plain vectors; the device instance holds `CudaSlice<u8>`.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Smallest size class, bytes.
pub const MIN_CLASS: usize = 256;

/// The size class of a request of `bytes` bytes.
///
/// ```
/// use quiver_gpu::pool::size_class;
/// assert_eq!(size_class(0), 256);
/// assert_eq!(size_class(257), 512);
/// assert_eq!(size_class(4096), 4096);
/// ```
pub fn size_class(bytes: usize) -> usize {
    bytes.max(MIN_CLASS).next_power_of_two()
}

/// What the pool did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevicePoolStats {
    pub requests: u64,
    /// Requests served from a free list.
    pub hits: u64,
    /// Requests that allocated.
    pub allocations: u64,
    /// Bytes owned by the pool (in use or free).
    pub bytes_held: u64,
    pub peak_bytes_held: u64,
}

/// The owner of settled buffers (and the only owner with shared free lists).
pub const SETTLED: usize = 0;

/// Free lists by owner and size class.
pub struct SizeClassPool<B> {
    free: Mutex<BTreeMap<(usize, usize), Vec<B>>>,
    stats: Mutex<DevicePoolStats>,
}

impl<B> Default for SizeClassPool<B> {
    fn default() -> Self {
        SizeClassPool {
            free: Mutex::new(BTreeMap::new()),
            stats: Mutex::new(DevicePoolStats::default()),
        }
    }
}

impl<B> SizeClassPool<B> {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// A buffer of at least `bytes` bytes for `owner`: from the owner's free list of its
    /// class, else the settled one, else from `alloc(class_bytes)`. Returns the buffer and
    /// its class (give both back with [`SizeClassPool::give`]).
    ///
    /// ```
    /// use quiver_gpu::pool::SizeClassPool;
    /// let pool = SizeClassPool::<Vec<u8>>::new();
    /// let (b, class) = pool.take(7, 1000, |n| Ok::<_, ()>(vec![0u8; n])).unwrap();
    /// assert_eq!((b.len(), class), (1024, 1024));
    /// pool.give(7, class, b);
    /// assert!(pool.take(8, 600, |_| Err(())).is_err()); // another owner's buffer: not reused
    /// let (_, _) = pool.take(7, 600, |_| Err(())).unwrap(); // reused: no allocation
    /// assert_eq!(pool.stats().hits, 1);
    /// ```
    pub fn take<E>(
        &self,
        owner: usize,
        bytes: usize,
        alloc: impl FnOnce(usize) -> Result<B, E>,
    ) -> Result<(B, usize), E> {
        let class = size_class(bytes);
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            let own = free.get_mut(&(owner, class)).and_then(Vec::pop);
            own.or_else(|| free.get_mut(&(SETTLED, class)).and_then(Vec::pop))
        };
        let mut st = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        st.requests += 1;
        match reused {
            Some(b) => {
                st.hits += 1;
                Ok((b, class))
            }
            None => {
                drop(st);
                let b = alloc(class)?;
                let mut st = self.stats.lock().unwrap_or_else(|p| p.into_inner());
                st.allocations += 1;
                st.bytes_held += class as u64;
                st.peak_bytes_held = st.peak_bytes_held.max(st.bytes_held);
                Ok((b, class))
            }
        }
    }

    /// Returns a buffer of class `class` to `owner`'s free list.
    pub fn give(&self, owner: usize, class: usize, b: B) {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((owner, class))
            .or_default()
            .push(b);
    }

    /// Moves every owner's free buffers to the settled lists, which any owner takes from.
    /// Only once no owner has work in flight on them (the caller synchronised the device).
    ///
    /// ```
    /// use quiver_gpu::pool::SizeClassPool;
    /// let pool = SizeClassPool::<Vec<u8>>::new();
    /// let (b, class) = pool.take(7, 300, |n| Ok::<_, ()>(vec![0u8; n])).unwrap();
    /// pool.give(7, class, b);
    /// pool.settle();
    /// let (_, _) = pool.take(8, 300, |_| Err(())).unwrap(); // settled: any owner reuses it
    /// ```
    pub fn settle(&self) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let owned: Vec<(usize, usize)> = free
            .keys()
            .filter(|(o, _)| *o != SETTLED)
            .copied()
            .collect();
        for key in owned {
            if let Some(mut v) = free.remove(&key) {
                free.entry((SETTLED, key.1)).or_default().append(&mut v);
            }
        }
    }

    /// Drops every free buffer (their memory goes back to the device).
    pub fn trim(&self) {
        let freed: usize = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            let n = free.iter().map(|((_, c), v)| c * v.len()).sum();
            free.clear();
            n
        };
        let mut st = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        st.bytes_held = st.bytes_held.saturating_sub(freed as u64);
    }

    /// Counters so far.
    pub fn stats(&self) -> DevicePoolStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_reuse_and_accounting() {
        let pool = SizeClassPool::<Vec<u8>>::new();
        let alloc = |n: usize| Ok::<_, String>(vec![0u8; n]);
        let (a, ca) = pool.take(SETTLED, 300, alloc).unwrap();
        let (b, cb) = pool.take(SETTLED, 300, alloc).unwrap();
        assert_eq!((ca, cb, a.len()), (512, 512, 512));
        let st = pool.stats();
        assert_eq!(
            (st.requests, st.hits, st.allocations, st.bytes_held),
            (2, 0, 2, 1024)
        );
        pool.give(SETTLED, ca, a);
        pool.give(SETTLED, cb, b);
        // Another class allocates; the same class reuses both buffers.
        let (c, cc) = pool.take(SETTLED, 2000, alloc).unwrap();
        assert_eq!(cc, 2048);
        let (_, _) = pool
            .take(SETTLED, 512, |_| Err("must reuse".to_string()))
            .unwrap();
        let (_, _) = pool
            .take(SETTLED, 257, |_| Err("must reuse".to_string()))
            .unwrap();
        assert!(pool
            .take(SETTLED, 400, |_| Err("empty".to_string()))
            .is_err());
        let st = pool.stats();
        assert_eq!((st.requests, st.hits, st.allocations), (6, 2, 3));
        assert_eq!(st.peak_bytes_held, 1024 + 2048);
        pool.give(SETTLED, cc, c);
        pool.trim();
        assert_eq!(pool.stats().bytes_held, 1024);
    }

    #[test]
    fn owners_keep_their_buffers_until_settled() {
        let pool = SizeClassPool::<Vec<u8>>::new();
        let alloc = |n: usize| Ok::<_, String>(vec![0u8; n]);
        let none = |_: usize| Err::<Vec<u8>, _>("allocation".to_string());
        let (a, ca) = pool.take(1, 300, alloc).unwrap();
        let (b, cb) = pool.take(2, 300, alloc).unwrap();
        pool.give(1, ca, a);
        pool.give(2, cb, b);
        // Each owner reuses its own buffer, never the other's.
        let (a, _) = pool.take(1, 300, none).unwrap();
        assert!(
            pool.take(1, 300, none).is_err(),
            "owner 1 took owner 2's buffer"
        );
        pool.give(1, ca, a);
        pool.settle();
        // Settled: any owner (a third one too) takes both, then nothing is left.
        let (x, _) = pool.take(3, 300, none).unwrap();
        let (y, _) = pool.take(1, 300, none).unwrap();
        assert!(pool.take(2, 300, none).is_err());
        assert_eq!((x.len(), y.len()), (512, 512));
        let st = pool.stats();
        assert_eq!((st.allocations, st.hits, st.bytes_held), (2, 3, 1024));
    }
}
