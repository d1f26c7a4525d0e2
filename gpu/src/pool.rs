//! A size-class pool of device buffers, like the host pool of `quiver_columnar::pool`:
//! requests are rounded up to a power of two (at least [`MIN_CLASS`] bytes), a returned
//! buffer waits in the free list of its class, and the next request of that class reuses
//! it instead of allocating (device allocations synchronise and are slow).
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

/// Free lists by size class.
pub struct SizeClassPool<B> {
    free: Mutex<BTreeMap<usize, Vec<B>>>,
    stats: Mutex<DevicePoolStats>,
}

impl<B> Default for SizeClassPool<B> {
    fn default() -> Self {
        SizeClassPool { free: Mutex::new(BTreeMap::new()), stats: Mutex::new(DevicePoolStats::default()) }
    }
}

impl<B> SizeClassPool<B> {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// A buffer of at least `bytes` bytes: from the free list of its class, or from
    /// `alloc(class_bytes)`. Returns the buffer and its class (give both back with
    /// [`SizeClassPool::give`]).
    ///
    /// ```
    /// use quiver_gpu::pool::SizeClassPool;
    /// let pool = SizeClassPool::<Vec<u8>>::new();
    /// let (b, class) = pool.take(1000, |n| Ok::<_, ()>(vec![0u8; n])).unwrap();
    /// assert_eq!((b.len(), class), (1024, 1024));
    /// pool.give(class, b);
    /// let (_, _) = pool.take(600, |_| Err(())).unwrap(); // reused: no allocation
    /// assert_eq!(pool.stats().hits, 1);
    /// ```
    pub fn take<E>(&self, bytes: usize, alloc: impl FnOnce(usize) -> Result<B, E>) -> Result<(B, usize), E> {
        let class = size_class(bytes);
        let reused = self.free.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&class).and_then(Vec::pop);
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

    /// Returns a buffer of class `class` to its free list.
    pub fn give(&self, class: usize, b: B) {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).entry(class).or_default().push(b);
    }

    /// Drops every free buffer (their memory goes back to the device).
    pub fn trim(&self) {
        let freed: usize = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            let n = free.iter().map(|(c, v)| c * v.len()).sum();
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
        let (a, ca) = pool.take(300, alloc).unwrap();
        let (b, cb) = pool.take(300, alloc).unwrap();
        assert_eq!((ca, cb, a.len()), (512, 512, 512));
        let st = pool.stats();
        assert_eq!((st.requests, st.hits, st.allocations, st.bytes_held), (2, 0, 2, 1024));
        pool.give(ca, a);
        pool.give(cb, b);
        // Another class allocates; the same class reuses both buffers.
        let (c, cc) = pool.take(2000, alloc).unwrap();
        assert_eq!(cc, 2048);
        let (_, _) = pool.take(512, |_| Err("must reuse".to_string())).unwrap();
        let (_, _) = pool.take(257, |_| Err("must reuse".to_string())).unwrap();
        assert!(pool.take(400, |_| Err("empty".to_string())).is_err());
        let st = pool.stats();
        assert_eq!((st.requests, st.hits, st.allocations), (6, 2, 3));
        assert_eq!(st.peak_bytes_held, 1024 + 2048);
        pool.give(cc, c);
        pool.trim();
        assert_eq!(pool.stats().bytes_held, 1024);
    }
}
