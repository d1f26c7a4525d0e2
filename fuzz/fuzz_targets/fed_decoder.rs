//! The FED decoder (`raw_to_digis`) on arbitrary bytes: up to four FEDs, each id from one
//! input byte (inside and outside the 1200–1349 range), the rest split between them. It must
//! return digis and error rows or an error, never panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use quiver_datasets::conditions::Conditions;
use quiver_reco::local::raw_to_digis::raw_to_digis;
use quiver_reco::local::RawToDigiConfig;

fn conditions() -> &'static Conditions {
    static C: OnceLock<Conditions> = OnceLock::new();
    C.get_or_init(quiver_datasets::builders::default_conditions)
}

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let n = 1 + (data[0] as usize % 4);
    let (ids, body) = data[1..].split_at(n.min(data.len() - 1));
    let chunk = body.len() / n.max(1) + 1;
    let feds: Vec<(u32, &[u8])> = body
        .chunks(chunk)
        .zip(ids.iter().chain(std::iter::repeat(&0)))
        .map(|(b, &id)| (1190 + id as u32, b))
        .collect();
    let _ = raw_to_digis(&feds, &conditions().cabling, &RawToDigiConfig::default());
});
