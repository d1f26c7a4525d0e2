//! Quiver's CMS Phase-1 pixel reconstruction on CPU, ported from the reference `serial`
//! chain. Each step's numerical core is a plain function over columns and conditions;
//! the step adapters that wire them into a plan are thin.

pub mod capacity;
pub mod classifier;
pub mod local;
pub mod steps;
pub mod tracks;
pub mod vertices;

/// Asks the CPU to bring `items[i]` into cache ahead of a read whose address is known early
/// (a hint: nothing is read, and an index out of range is ignored). For loops that visit a
/// large array in no order with the next indices at hand.
#[inline]
pub(crate) fn prefetch<T>(items: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(x) = items.get(i) {
        // SAFETY: a prefetch reads nothing and never faults; the address is in the slice.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (x as *const T).cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (items, i);
}
