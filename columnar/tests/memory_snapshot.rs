//! `MemoryReport::now` reads the whole process's heap (glibc's `mallinfo2`), so its check
//! lives alone in this test binary: no other test allocates or frees while it measures. As a
//! unit test beside the library's other tests it failed when one of them freed memory
//! between the two snapshots.

use quiver_columnar::memory::MemoryReport;
use quiver_columnar::pool::PoolStats;

#[test]
fn snapshot_of_this_process() {
    let before = MemoryReport::now(&PoolStats::default());
    if !cfg!(target_os = "linux") {
        assert!(before.is_none());
        return;
    }
    let before = before.unwrap();
    assert!(
        before.rss > 0 && before.peak_rss >= before.rss,
        "{before:?}"
    );
    // black_box: an optimised build would otherwise drop the unused allocation.
    let v = std::hint::black_box(vec![1u8; 8 << 20]);
    let after = MemoryReport::now(&PoolStats::default()).unwrap();
    match (after.heap_in_use, before.heap_in_use) {
        (Some(a), Some(b)) => assert!(a >= b + (8 << 20), "heap in use {b} -> {a} with 8 MiB more"),
        _ if cfg!(target_env = "gnu") => panic!("glibc reports no heap in use: {after:?}"),
        _ => {}
    }
    drop(v);
}
