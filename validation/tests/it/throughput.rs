//! Fill throughput of the histogram kernel on large columns (run with
//! `cargo test --release -p quiver-validation --test it throughput -- --ignored --nocapture`).

use std::time::Instant;

use arrow_array::{Float32Array, UInt16Array};
use quiver_validation::hist::Histogram;

#[test]
#[ignore]
fn fill_throughput() {
    let n = 20_000_000usize;
    // Spread over the range with some under/overflow, deterministic.
    let f: Float32Array = (0..n)
        .map(|i| ((i as u64 * 2_654_435_761) % 2_400_000) as f32 * 1e-6 - 1.2)
        .collect();
    let u: UInt16Array = (0..n)
        .map(|i| ((i as u64 * 40503) % 60000) as u16)
        .collect();
    let mut hf = Histogram::new("hit_lx", 200, -1.0, 1.0).unwrap();
    let mut hu = Histogram::new("digi_adc", 250, 0.0, 5e4).unwrap();
    let t = Instant::now();
    hf.fill_array(&f).unwrap();
    let tf = t.elapsed();
    let t = Instant::now();
    hu.fill_array(&u).unwrap();
    let tu = t.elapsed();
    assert_eq!((hf.entries(), hu.entries()), (n as u64, n as u64));
    println!(
        "f32: {:.2} ns/value ({:.0} M values/s); u16: {:.2} ns/value ({:.0} M values/s)",
        tf.as_nanos() as f64 / n as f64,
        n as f64 / tf.as_secs_f64() / 1e6,
        tu.as_nanos() as f64 / n as f64,
        n as f64 / tu.as_secs_f64() / 1e6
    );
}
