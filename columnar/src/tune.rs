//! Process settings for reconstruction jobs.

/// Tells glibc's allocator to keep the large buffers a job allocates and frees for every
/// batch (cells, lists, columns of megabytes): buffers up to 32 MiB come from the heap
/// rather than from fresh mappings, and up to 256 MiB of freed memory stay in it.
///
/// By default glibc maps a buffer above its adaptive threshold (128 KiB at first) and unmaps
/// it when freed, so the next batch pays a page fault and a page clearing for every 4 KiB
/// again: the pixel chain runs markedly faster with these settings (docs/performance.md).
/// The cost is a process that keeps its peak heap. The
/// `quiver` command (Rust binary or Python package) calls this; a library does not change
/// its host process's allocator, so `Plan.run` does not (Dask workers set the same values
/// in `quiver.dask`).
///
/// Does nothing, and returns false, off glibc or when the user chose allocator settings
/// (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`, or `glibc.malloc` tunables in
/// `GLIBC_TUNABLES`).
///
/// ```
/// let tuned = quiver_columnar::tune_malloc();
/// assert_eq!(tuned, cfg!(all(target_os = "linux", target_env = "gnu"))
///     && std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none()
///     && std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_none()
///     && !std::env::var("GLIBC_TUNABLES").unwrap_or_default().contains("glibc.malloc"));
/// ```
pub fn tune_malloc() -> bool {
    let user_set = std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_some()
        || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc"));
    !user_set && set_thresholds()
}

/// [`tune_malloc`] whatever the environment says: for a process whose allocator settings a
/// launcher chose, not the user (Dask's nanny starts workers with
/// `MALLOC_TRIM_THRESHOLD_=65536`, which turns off glibc's adaptive mmap threshold: every
/// buffer above 128 KiB is then mapped and unmapped again, and the chain ran far slower in
/// a worker). Returns false off glibc.
///
/// ```
/// assert_eq!(quiver_columnar::tune::tune_malloc_always(), cfg!(all(target_os = "linux", target_env = "gnu")));
/// ```
pub fn tune_malloc_always() -> bool {
    set_thresholds()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_thresholds() -> bool {
    // SAFETY: mallopt only changes allocator parameters; both values are in range.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20) == 1
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_thresholds() -> bool {
    false
}
