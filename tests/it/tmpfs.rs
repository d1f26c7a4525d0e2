//! A small tmpfs mounted for one test (a full disk, a mount point as output directory),
//! unmounted when the test ends. Where mounting is not permitted, the test is skipped with
//! a note on stderr.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted tmpfs; dropping it unmounts it.
pub struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Creates directory `dir` and mounts a tmpfs of `size` (`mount -o size=`, e.g. "12m") on
/// it; `None`, after saying on stderr that `test` is skipped and why, where that is not
/// permitted.
pub fn mount(dir: &Path, size: &str, test: &str) -> Option<Mounted> {
    std::fs::create_dir(dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .output();
    match mounted {
        Ok(o) if o.status.success() => Some(Mounted(dir.to_path_buf())),
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                Err(e) => e.to_string(),
            };
            eprintln!("\n*** SKIPPED {test}: `mount -t tmpfs` is not permitted here ({why}) ***\n");
            None
        }
    }
}
