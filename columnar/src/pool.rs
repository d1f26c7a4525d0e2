//! A shared, thread-safe, size-class caching pool for product buffers.
//!
//! Steps fill a [`PoolVec`] and freeze it into an Arrow buffer; the memory returns to its
//! size class when the last Arrow reference drops (through
//! [`Buffer::from_custom_allocation`]), so a steady-state job makes no system allocation
//! for product buffers. Size classes are powers of two from 64 bytes; a request is served
//! from the smallest class that holds it, so at most half of a block is unused.

use std::alloc::{alloc, dealloc, Layout};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arrow_buffer::{ArrowNativeType, Buffer, ScalarBuffer};

/// Alignment of every pooled block (Arrow recommends 64 bytes).
pub const ALIGNMENT: usize = 64;
const MIN_CLASS_SHIFT: u32 = 6; // 64 bytes
const NUM_CLASSES: usize = 48;

/// A block of memory owned by the pool. Freed to the system only by [`BufferPool::trim`].
struct Block(NonNull<u8>);
// SAFETY: a block is plain memory with a single owner at a time.
unsafe impl Send for Block {}

struct Inner {
    classes: Vec<Mutex<Vec<Block>>>,
    requests: AtomicU64,
    hits: AtomicU64,
    system_allocations: AtomicU64,
    bytes_held: AtomicU64,
    bytes_in_use: AtomicU64,
    peak_bytes_held: AtomicU64,
}

impl Inner {
    fn release_cached(&self) {
        for (class, list) in self.classes.iter().enumerate() {
            let blocks = std::mem::take(&mut *list.lock().unwrap_or_else(|e| e.into_inner()));
            let size = class_size(class);
            for b in blocks {
                // SAFETY: allocated in `take_block` with this layout; a cached block is
                // owned by the list alone.
                unsafe {
                    dealloc(
                        b.0.as_ptr(),
                        Layout::from_size_align_unchecked(size, ALIGNMENT),
                    )
                };
                self.bytes_held.fetch_sub(size as u64, Ordering::Relaxed);
            }
        }
    }
}

// A pool is dropped when its last handle and its last block in use are gone (blocks hold
// the pool): its cached blocks go back to the system. Found by LeakSanitizer
// (scripts/asan.sh) on the tests' private pools.
impl Drop for Inner {
    fn drop(&mut self) {
        self.release_cached();
    }
}

/// Statistics of a pool; differences of two snapshots describe a job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffer requests.
    pub requests: u64,
    /// Requests served from cached blocks.
    pub hits: u64,
    /// Requests that allocated from the system.
    pub system_allocations: u64,
    /// Bytes allocated from the system and not yet returned to it (in use + cached).
    pub bytes_held: u64,
    /// Bytes in blocks currently referenced by buffers.
    pub bytes_in_use: u64,
    /// Largest `bytes_held` seen.
    pub peak_bytes_held: u64,
}

impl PoolStats {
    /// Fraction of requests served from the pool (1 when there were none).
    pub fn hit_rate(&self) -> f64 {
        if self.requests == 0 {
            1.0
        } else {
            self.hits as f64 / self.requests as f64
        }
    }
    /// Counters of `self` minus those of an earlier snapshot; levels are `self`'s.
    pub fn since(&self, earlier: &PoolStats) -> PoolStats {
        PoolStats {
            requests: self.requests - earlier.requests,
            hits: self.hits - earlier.hits,
            system_allocations: self.system_allocations - earlier.system_allocations,
            ..*self
        }
    }
}

/// The buffer pool. Cheap to clone (shared state).
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<Inner>,
}

impl Default for BufferPool {
    fn default() -> Self {
        Self::new()
    }
}

fn class_of(bytes: usize) -> usize {
    let bytes = bytes.max(1 << MIN_CLASS_SHIFT);
    let shift = usize::BITS - (bytes - 1).leading_zeros();
    (shift - MIN_CLASS_SHIFT) as usize
}

fn class_size(class: usize) -> usize {
    1usize << (class as u32 + MIN_CLASS_SHIFT)
}

/// The process-wide pool that steps and the framework share.
pub fn global() -> &'static BufferPool {
    static POOL: OnceLock<BufferPool> = OnceLock::new();
    POOL.get_or_init(BufferPool::new)
}

impl BufferPool {
    /// An empty pool.
    pub fn new() -> Self {
        BufferPool {
            inner: Arc::new(Inner {
                classes: (0..NUM_CLASSES).map(|_| Mutex::new(Vec::new())).collect(),
                requests: AtomicU64::new(0),
                hits: AtomicU64::new(0),
                system_allocations: AtomicU64::new(0),
                bytes_held: AtomicU64::new(0),
                bytes_in_use: AtomicU64::new(0),
                peak_bytes_held: AtomicU64::new(0),
            }),
        }
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> PoolStats {
        let i = &self.inner;
        PoolStats {
            requests: i.requests.load(Ordering::Relaxed),
            hits: i.hits.load(Ordering::Relaxed),
            system_allocations: i.system_allocations.load(Ordering::Relaxed),
            bytes_held: i.bytes_held.load(Ordering::Relaxed),
            bytes_in_use: i.bytes_in_use.load(Ordering::Relaxed),
            peak_bytes_held: i.peak_bytes_held.load(Ordering::Relaxed),
        }
    }

    /// Returns every cached block to the system; blocks in use are unaffected.
    pub fn trim(&self) {
        self.inner.release_cached();
    }

    fn take_block(&self, bytes: usize) -> PooledBlock {
        let class = class_of(bytes);
        assert!(
            class < NUM_CLASSES,
            "buffer of {bytes} bytes exceeds the pool's largest class"
        );
        let size = class_size(class);
        let i = &self.inner;
        i.requests.fetch_add(1, Ordering::Relaxed);
        let cached = i.classes[class]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        let ptr = match cached {
            Some(b) => {
                i.hits.fetch_add(1, Ordering::Relaxed);
                b.0
            }
            None => {
                let layout = Layout::from_size_align(size, ALIGNMENT).expect("valid layout");
                // SAFETY: non-zero size.
                let p = unsafe { alloc(layout) };
                let Some(p) = NonNull::new(p) else {
                    std::alloc::handle_alloc_error(layout)
                };
                i.system_allocations.fetch_add(1, Ordering::Relaxed);
                let held = i.bytes_held.fetch_add(size as u64, Ordering::Relaxed) + size as u64;
                i.peak_bytes_held.fetch_max(held, Ordering::Relaxed);
                p
            }
        };
        i.bytes_in_use.fetch_add(size as u64, Ordering::Relaxed);
        PooledBlock {
            ptr,
            class,
            pool: self.inner.clone(),
        }
    }

    /// An empty vector with room for `capacity` elements, backed by pooled memory.
    ///
    /// ```
    /// use arrow_array::{Array, Float32Array};
    /// use quiver_columnar::pool::BufferPool;
    /// let pool = BufferPool::new();
    /// let mut v = pool.vec::<f32>(3);
    /// v.extend_from_slice(&[1.0, 2.0, 3.0]);
    /// let array = Float32Array::new(v.into_scalar_buffer(), None);
    /// assert_eq!(array.len(), 3);
    /// drop(array); // the block goes back to the pool
    /// let again = pool.vec::<f32>(3);
    /// assert_eq!(pool.stats().hits, 1);
    /// # drop(again);
    /// ```
    pub fn vec<T: ArrowNativeType>(&self, capacity: usize) -> PoolVec<T> {
        let block = self.take_block(capacity.max(1) * std::mem::size_of::<T>());
        let cap = class_size(block.class) / std::mem::size_of::<T>();
        PoolVec {
            block,
            len: 0,
            cap,
            pool: self.clone(),
            _t: PhantomData,
        }
    }

    /// A pooled buffer holding a copy of `values`.
    pub fn from_slice<T: ArrowNativeType>(&self, values: &[T]) -> ScalarBuffer<T> {
        let mut v = self.vec(values.len());
        v.extend_from_slice(values);
        v.into_scalar_buffer()
    }
}

/// Ownership of one pooled block; returns it to its class on drop.
struct PooledBlock {
    ptr: NonNull<u8>,
    class: usize,
    pool: Arc<Inner>,
}
// SAFETY: the block is exclusively owned memory (no other pointer to it exists while it is
// out of the pool); the pool's lists are behind mutexes.
unsafe impl Send for PooledBlock {}
// SAFETY: shared references give no access to the bytes (only Arrow's `Buffer`, which owns
// the block, reads them, immutably); returning it on drop takes the pool's mutex.
unsafe impl Sync for PooledBlock {}
impl std::panic::RefUnwindSafe for PooledBlock {}

impl Drop for PooledBlock {
    fn drop(&mut self) {
        let size = class_size(self.class) as u64;
        self.pool.bytes_in_use.fetch_sub(size, Ordering::Relaxed);
        self.pool.classes[self.class]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Block(self.ptr));
    }
}

/// A growable vector in pooled memory, frozen into an Arrow buffer without copying.
pub struct PoolVec<T: ArrowNativeType> {
    block: PooledBlock,
    len: usize,
    cap: usize,
    pool: BufferPool,
    _t: PhantomData<T>,
}

impl<T: ArrowNativeType> PoolVec<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Elements the current block holds.
    pub fn capacity(&self) -> usize {
        self.cap
    }
    fn grow_to(&mut self, needed: usize) {
        if needed <= self.cap {
            return;
        }
        let mut bigger = self.pool.vec::<T>(needed.max(self.cap * 2));
        bigger.extend_from_slice(self.as_slice());
        *self = bigger;
    }
    /// Appends one element.
    #[inline]
    pub fn push(&mut self, value: T) {
        if self.len == self.cap {
            self.grow_to(self.len + 1);
        }
        // SAFETY: len < cap, block is aligned for T (64-byte alignment).
        unsafe {
            self.block
                .ptr
                .as_ptr()
                .cast::<T>()
                .add(self.len)
                .write(value)
        };
        self.len += 1;
    }
    /// Appends a slice.
    pub fn extend_from_slice(&mut self, values: &[T]) {
        self.grow_to(self.len + values.len());
        // SAFETY: room was made above; regions do not overlap (distinct blocks).
        unsafe {
            std::ptr::copy_nonoverlapping(
                values.as_ptr(),
                self.block.ptr.as_ptr().cast::<T>().add(self.len),
                values.len(),
            )
        };
        self.len += values.len();
    }
    /// Appends every element of an iterator.
    pub fn extend(&mut self, values: impl IntoIterator<Item = T>) {
        let it = values.into_iter();
        self.grow_to(self.len + it.size_hint().0);
        for v in it {
            self.push(v);
        }
    }
    /// Resizes to `len`, filling new elements with `value`.
    pub fn resize(&mut self, len: usize, value: T) {
        self.grow_to(len);
        for i in self.len..len {
            // SAFETY: i < cap.
            unsafe { self.block.ptr.as_ptr().cast::<T>().add(i).write(value) };
        }
        self.len = len;
    }
    /// The elements.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: the first len elements are initialised.
        unsafe { std::slice::from_raw_parts(self.block.ptr.as_ptr().cast::<T>(), self.len) }
    }
    /// The elements, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, and we own the block exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.block.ptr.as_ptr().cast::<T>(), self.len) }
    }
    /// Freezes into an immutable Arrow buffer that returns the block to the pool on drop.
    pub fn into_buffer(self) -> Buffer {
        let bytes = self.len * std::mem::size_of::<T>();
        let ptr = self.block.ptr;
        // SAFETY: ptr is valid for `bytes` bytes for as long as the owner lives.
        unsafe { Buffer::from_custom_allocation(ptr, bytes, Arc::new(self.block)) }
    }
    /// Freezes into a typed Arrow buffer.
    pub fn into_scalar_buffer(self) -> ScalarBuffer<T> {
        let len = self.len;
        ScalarBuffer::new(self.into_buffer(), 0, len)
    }
}

impl<T: ArrowNativeType> std::ops::Deref for PoolVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}
impl<T: ArrowNativeType> std::ops::DerefMut for PoolVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int32Array;

    #[test]
    fn classes_are_powers_of_two_from_64() {
        assert_eq!(class_of(0), 0);
        assert_eq!(class_of(64), 0);
        assert_eq!(class_of(65), 1);
        assert_eq!(class_size(class_of(1000)), 1024);
        assert_eq!(class_size(class_of(1 << 20)), 1 << 20);
    }

    #[test]
    fn blocks_return_when_the_last_reference_drops() {
        let pool = BufferPool::new();
        let mut v = pool.vec::<i32>(100);
        v.extend(0..100);
        let a = Int32Array::new(v.into_scalar_buffer(), None);
        let sliced = a.slice(10, 5);
        drop(a);
        assert_eq!(
            pool.stats().bytes_in_use,
            512,
            "slice still holds the block"
        );
        assert_eq!(sliced.value(0), 10);
        drop(sliced);
        assert_eq!(pool.stats().bytes_in_use, 0);
        let _w = pool.vec::<u8>(300);
        let s = pool.stats();
        assert_eq!((s.requests, s.hits, s.system_allocations), (2, 1, 1));
        assert_eq!(s.peak_bytes_held, 512);
    }

    #[test]
    fn growth_keeps_contents() {
        let pool = BufferPool::new();
        let mut v = pool.vec::<u16>(1);
        for i in 0..1000u16 {
            v.push(i);
        }
        v.resize(1010, 7);
        assert_eq!(v.len(), 1010);
        assert_eq!(v[999], 999);
        assert_eq!(v[1009], 7);
        let b = v.into_scalar_buffer();
        assert_eq!(b.len(), 1010);
    }

    #[test]
    fn trim_releases_cached_blocks() {
        let pool = BufferPool::new();
        drop(pool.vec::<u64>(1000));
        assert!(pool.stats().bytes_held > 0);
        pool.trim();
        assert_eq!(pool.stats().bytes_held, 0);
    }

    #[test]
    fn concurrent_use_is_consistent() {
        let pool = BufferPool::new();
        std::thread::scope(|s| {
            for t in 0..4 {
                let pool = pool.clone();
                s.spawn(move || {
                    for i in 0..1000 {
                        let mut v = pool.vec::<u32>(i % 300 + 1);
                        v.push(t);
                        drop(v.into_buffer());
                    }
                });
            }
        });
        let s = pool.stats();
        assert_eq!(s.requests, 4000);
        assert_eq!(s.hits + s.system_allocations, 4000);
        assert_eq!(s.bytes_in_use, 0);
    }
}
