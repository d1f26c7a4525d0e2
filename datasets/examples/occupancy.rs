//! Generates events at a given pile-up on one thread and prints occupancy numbers and speed.
//! Usage: `cargo run --release -p quiver-datasets --example occupancy -- [events] [pileup]`
use quiver_datasets::builders::{build_gains, default_beam_spot, GainParams};
use quiver_datasets::generator::{estimate_clusters, Generator, GeneratorParams};
use quiver_datasets::geometry::Geometry;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20);
    let pu: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(50.0);
    let geom = Geometry::phase1();
    let gains = build_gains(&GainParams::default());
    let g = Generator::new(
        GeneratorParams {
            pileup: pu,
            ..Default::default()
        },
        &geom,
        &gains,
        default_beam_spot(),
    );
    let c0 = cpu_seconds();
    let t0 = std::time::Instant::now();
    let evs: Vec<_> = (0..n).map(|i| g.event(1, i)).collect();
    let dt = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - c0;
    let mut s = [0f64; 6];
    for e in &evs {
        let mut mods = std::collections::HashSet::new();
        for d in &e.digis {
            mods.insert(d.module);
        }
        let l1 = e.digis.iter().filter(|d| d.module < 96).count();
        s[0] += e.digis.len() as f64;
        s[1] += mods.len() as f64;
        s[2] += estimate_clusters(&gains, &e.digis) as f64;
        s[3] += e.simhits.len() as f64;
        s[4] += e.particles.len() as f64;
        s[5] += l1 as f64;
    }
    let k = n as f64;
    let px: Vec<usize> = evs.iter().map(|e| e.digis.len()).collect();
    let cl: Vec<usize> = evs
        .iter()
        .map(|e| estimate_clusters(&gains, &e.digis))
        .collect();
    println!(
        "pixels/event min {} max {}; clusters/event min {} max {}",
        px.iter().min().unwrap(),
        px.iter().max().unwrap(),
        cl.iter().min().unwrap(),
        cl.iter().max().unwrap()
    );
    let mut per_layer = [(0usize, 0usize); 10];
    for e in &evs {
        for d in &e.digis {
            per_layer[quiver_datasets::topology::layer_of(d.module) as usize].0 += 1;
        }
        for h in &e.simhits {
            per_layer[quiver_datasets::topology::layer_of(h.module) as usize].1 += 1;
        }
    }
    for (l, (p, h)) in per_layer.iter().enumerate() {
        println!(
            "layer {l}: pixels/event {:.0} simhits/event {:.0}",
            *p as f64 / k,
            *h as f64 / k
        );
    }
    println!("events {n} pu {pu}: pixels {:.0} modules {:.0} clusters {:.0} simhits {:.0} particles {:.0} L1 pixels {:.0}; {:.1} ev/s wall, {:.1} ev/s per CPU second",
        s[0]/k, s[1]/k, s[2]/k, s[3]/k, s[4]/k, s[5]/k, k/dt, k/cpu);
}

/// User + system CPU time of this process (Linux `/proc/self/stat`, 100 ticks/s), so that the
/// speed is per core even on a loaded machine.
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = s
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / 100.0
}
