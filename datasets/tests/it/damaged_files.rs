//! A dataset whose files are damaged but whose manifest checksums match (a user who re-hashed,
//! a bit flipped before hashing) must never make the reader panic: every single-byte change
//! of a conditions file and of `raw.arrow` gives either a dataset or an error naming the file.

use quiver_datasets::format::Manifest;
use quiver_datasets::{generate, Dataset, DatasetError, GenerateOptions};
use sha2::{Digest, Sha256};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

fn small(dir: &Path) -> GenerateOptions {
    GenerateOptions {
        events: 2,
        pileup: 0.0,
        seed: 5,
        threads: Some(1),
        output: dir.join("ds"),
        corrupt_fraction: 0.0,
    }
}

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes `bytes` as the dataset's file `name` and re-hashes it in the manifest.
fn write_rehashed(dir: &Path, manifest: &Manifest, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
    let mut m = manifest.clone();
    m.files.insert(name.to_string(), hex(bytes));
    std::fs::write(dir.join("manifest.toml"), toml::to_string(&m).unwrap()).unwrap();
}

/// Opens the dataset and reads every event; `Err(message)` on a panic. `verify`: check the
/// manifest's checksums (the flip loops skip it: the checksums match by construction, and
/// hashing every file for each of thousands of variants dominated the test's time).
fn open_and_read(dir: &Path, verify: bool) -> Result<Result<(), DatasetError>, String> {
    catch_unwind(AssertUnwindSafe(|| {
        let ds = if verify {
            Dataset::open(dir)?
        } else {
            Dataset::open_unverified(dir)?
        };
        for i in 0..ds.n_events() {
            let feds = ds.raw_event(i)?;
            std::hint::black_box(feds.iter().map(|(_, b)| b.len()).sum::<usize>());
        }
        Ok(())
    }))
    .map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// The offsets to damage: every byte of the first `head` bytes, then every `step`-th byte.
fn positions(len: usize, head: usize, step: usize) -> Vec<usize> {
    (0..len.min(head))
        .chain((head..len).step_by(step))
        .collect()
}

/// What the reader did with the corruptions of one file.
#[derive(Default, Debug)]
struct Outcome {
    accepted: usize,
    rejected: usize,
    panics: Vec<String>,
    unnamed: Vec<String>,
}

/// Flips each chosen byte of `name` (all bits or one bit), re-hashes, and records what
/// the reader did (asserting only after the quiet panic hook is gone).
fn flip_each_byte(
    dir: &Path,
    manifest: &Manifest,
    name: &str,
    head: usize,
    step: usize,
) -> Outcome {
    let good = std::fs::read(dir.join(name)).unwrap();
    let mut o = Outcome::default();
    for pos in positions(good.len(), head, step) {
        // All bits at even positions, one bit (cycling through the eight) at odd ones.
        let mask = if pos % 2 == 0 {
            0xFFu8
        } else {
            0x01 << ((pos / 2) % 8)
        };
        let mut bad = good.clone();
        bad[pos] ^= mask;
        write_rehashed(dir, manifest, name, &bad);
        match open_and_read(dir, false) {
            Ok(Ok(())) => o.accepted += 1,
            Ok(Err(e)) => {
                o.rejected += 1;
                let msg = e.to_string();
                if !msg.contains(name) {
                    o.unnamed.push(format!("byte {pos} ^ {mask:#x}: {msg}"));
                }
            }
            Err(p) => o.panics.push(format!("byte {pos} ^ {mask:#x}: {p}")),
        }
    }
    write_rehashed(dir, manifest, name, &good);
    o
}

#[test]
fn every_byte_flip_of_beamspot_and_raw_gives_ok_or_an_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = small(tmp.path());
    generate(&opts).unwrap();
    let dir = &opts.output;
    let manifest: Manifest =
        toml::from_str(&std::fs::read_to_string(dir.join("manifest.toml")).unwrap()).unwrap();
    // the panic hook would print thousands of lines if something does panic
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let bs = flip_each_byte(dir, &manifest, "conditions/beamspot.arrow", usize::MAX, 1);
    let raw = flip_each_byte(dir, &manifest, "raw.arrow", 1500, 97);
    std::panic::set_hook(hook);
    for (name, o) in [("beamspot.arrow", &bs), ("raw.arrow", &raw)] {
        println!(
            "{name}: {} accepted, {} rejected, {} panics",
            o.accepted,
            o.rejected,
            o.panics.len()
        );
        assert!(
            o.panics.is_empty(),
            "{} panics damaging {name}, e.g. {:?}",
            o.panics.len(),
            &o.panics[..o.panics.len().min(5)]
        );
        assert!(
            o.unnamed.is_empty(),
            "errors not naming {name}: {:?}",
            &o.unnamed[..o.unnamed.len().min(5)]
        );
        // flips of the values themselves are legal data; flips of the structure are errors
        assert!(o.accepted > 0 && o.rejected > 0, "{name}: {o:?}");
    }
    assert!(open_and_read(dir, true).unwrap().is_ok());
}

#[test]
fn empty_and_truncated_files_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = small(tmp.path());
    generate(&opts).unwrap();
    let dir = &opts.output;
    let manifest: Manifest =
        toml::from_str(&std::fs::read_to_string(dir.join("manifest.toml")).unwrap()).unwrap();
    for name in [
        "conditions/beamspot.arrow",
        "conditions/cabling.arrow",
        "raw.arrow",
    ] {
        let good = std::fs::read(dir.join(name)).unwrap();
        for cut in [0, 1, 7, good.len() / 2, good.len() - 1] {
            write_rehashed(dir, &manifest, name, &good[..cut]);
            let e = open_and_read(dir, true).unwrap().unwrap_err().to_string();
            assert!(
                e.contains(name) && e.contains("quiver generate"),
                "{name} cut at {cut}: {e}"
            );
        }
        write_rehashed(dir, &manifest, name, &good);
    }
    // a checksum mismatch says what to do too
    let raw = dir.join("raw.arrow");
    let good = std::fs::read(&raw).unwrap();
    let mut bad = good.clone();
    bad[100] ^= 1;
    std::fs::write(&raw, &bad).unwrap();
    let e = Dataset::open(dir).unwrap_err().to_string();
    assert!(
        e.contains("raw.arrow") && e.contains("quiver generate"),
        "{e}"
    );
    std::fs::write(&raw, &good).unwrap();
    assert!(Dataset::open(dir).is_ok());
}

#[test]
fn truth_files_are_not_needed_to_reconstruct_but_are_verified_by_their_readers() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = small(tmp.path());
    generate(&opts).unwrap();
    let dir = &opts.output;
    for name in ["simhits.parquet", "faults.parquet"] {
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    // Reconstruction reads raw data and conditions only.
    assert!(open_and_read(dir, true).unwrap().is_ok());
    let e = quiver_datasets::format::verify_files(dir, &["particles.parquet", "simhits.parquet"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("simhits.parquet: missing") && e.contains("quiver generate"),
        "{e}"
    );
    // A damaged truth file is caught by its reader's verification.
    let p = dir.join("particles.parquet");
    let mut b = std::fs::read(&p).unwrap();
    b[10] ^= 1;
    std::fs::write(&p, &b).unwrap();
    let e = quiver_datasets::format::verify_files(dir, &["particles.parquet"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("particles.parquet: checksum mismatch") && e.contains("quiver generate"),
        "{e}"
    );
}
