//! Dataset files that are not what `quiver generate` wrote: a FIFO or a link to a device
//! used to hang the checksum forever; now each is refused before a byte is read.

use quiver_datasets::{generate, Dataset, GenerateOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

fn dataset(dir: &Path) -> std::path::PathBuf {
    let opts = GenerateOptions {
        events: 2,
        pileup: 2.0,
        seed: 5,
        threads: Some(1),
        output: dir.join("ds"),
        corrupt_fraction: 0.0,
    };
    generate(&opts).unwrap();
    opts.output
}

/// Opens the dataset on another thread: a regression that hangs fails the test after 20 s
/// instead of hanging the suite.
fn open_error(ds: &Path) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    let ds = ds.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(Dataset::open(&ds).map(|_| ()).map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(r) => r.expect_err("the dataset must be refused"),
        Err(_) => panic!("Dataset::open hung on a non-regular file"),
    }
}

#[test]
fn a_fifo_or_a_device_in_place_of_a_dataset_file_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path());
    let raw = ds.join("raw.arrow");
    std::fs::remove_file(&raw).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &raw).unwrap();
    let e = open_error(&ds);
    assert!(
        e.contains("raw.arrow") && e.contains("a device, not a regular file"),
        "{e}"
    );

    std::fs::remove_file(&raw).unwrap();
    let c = std::ffi::CString::new(raw.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = open_error(&ds);
    assert!(e.contains("raw.arrow") && e.contains("a FIFO"), "{e}");
}

#[test]
fn a_file_of_another_size_than_the_manifest_s_is_refused_before_reading() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path());
    let p = ds.join("conditions/beamspot.arrow");
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.extend_from_slice(&[0; 8]);
    std::fs::write(&p, &bytes).unwrap();
    let e = open_error(&ds);
    assert!(
        e.contains("beamspot.arrow")
            && e.contains(&format!(
                "{} bytes, the manifest says {}",
                bytes.len(),
                bytes.len() - 8
            )),
        "{e}"
    );
}

#[test]
fn generate_caps_its_threads_as_run_does() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = GenerateOptions {
        events: 1,
        pileup: 0.0,
        seed: 1,
        threads: Some(100_000),
        output: tmp.path().join("ds"),
        corrupt_fraction: 0.0,
    };
    let e = generate(&opts).unwrap_err().to_string();
    assert!(e.contains("threads = 100000: at most 1024"), "{e}");
    assert!(!opts.output.exists(), "nothing written");
}

/// `cp` over `raw.arrow` (truncating it) or changing it in place while a run reads it:
/// before, the run died of SIGBUS (a mapped page past the new end) or decoded changed
/// bytes into a 512 GB allocation. An open dataset now holds the bytes it checked.
#[test]
fn changing_raw_arrow_under_an_open_dataset_changes_nothing_it_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path());
    let raw = ds.join("raw.arrow");
    let d = Dataset::open(&ds).unwrap();
    let before: Vec<Vec<(u32, Vec<u8>)>> = (0..d.n_events())
        .map(|i| {
            d.raw_event(i)
                .unwrap()
                .iter()
                .map(|(f, b)| (*f, b.to_vec()))
                .collect()
        })
        .collect();
    // In place: every byte flipped, then truncated to 100 bytes (what `cp` does first).
    let mut bytes = std::fs::read(&raw).unwrap();
    bytes.iter_mut().for_each(|b| *b = !*b);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&raw)
        .unwrap()
        .write_all_at(&bytes, 0)
        .unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&raw)
        .unwrap()
        .set_len(100)
        .unwrap();
    let after: Vec<Vec<(u32, Vec<u8>)>> = (0..d.n_events())
        .map(|i| {
            d.raw_event(i)
                .unwrap()
                .iter()
                .map(|(f, b)| (*f, b.to_vec()))
                .collect()
        })
        .collect();
    assert_eq!(before, after);
    // A new open sees the damage and names the file.
    let e = open_error(&ds);
    assert!(e.contains("raw.arrow"), "{e}");
}
