//! Whole-run atomic output directories.
//!
//! A run's files appear in its output directory together or not at all. The output steps
//! write into a staging directory beside the output directory
//! (`<parent>/.<name>.quiver-staging-<host>-<pid>`); when the job has succeeded,
//! [`StagedRun::commit`] writes the run manifest ([`MANIFEST`]: every file with its size and
//! SHA-256, the plan's hash and the event range), then exchanges the staging directory with
//! the output directory in one `renameat2(RENAME_EXCHANGE)` and removes the earlier run. A
//! kill at any moment leaves the output directory holding exactly one complete run, the old
//! or the new; what a killed run leaves beside it is removed by the next run into the same
//! directory.
//!
//! A directory that holds anything but a Quiver run (files its manifest does not list, or
//! no manifest at all) is never replaced: the run is refused before any event. Readers
//! ([`verify`]) refuse a directory whose manifest is missing or does not match its files.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The run manifest's file name, inside the output directory.
pub const MANIFEST: &str = "quiver-run.toml";
/// The manifest's format tag.
pub const FORMAT: &str = "quiver-run/1";
/// Written into a failed run's `<output>.partial` directory, so that a later failure may
/// replace it (and nothing else).
const PARTIAL_MARKER: &str = ".quiver-partial";
/// Prefix of a staging directory made *inside* an output directory that is a mount point
/// (followed by `<host>-<pid>`): readers and [`StagedRun::begin`] skip it.
const INSIDE_STAGING: &str = ".quiver-staging-";
/// A dataset's manifest (written last by `quiver generate`).
pub const DATASET_MANIFEST: &str = "manifest.toml";
/// During an in-place commit (an output directory that is a mount point), the manifest of
/// the run being replaced (or one listing no file), so that a run killed mid-commit leaves
/// a directory the next run recognises and replaces, and readers refuse (it has no
/// [`MANIFEST`]).
const REPLACING: &str = ".quiver-replacing.toml";

/// One file of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Size in bytes.
    pub bytes: u64,
    /// SHA-256 of the contents, lower-case hex.
    pub sha256: String,
}

/// What a run's manifest records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunManifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// The Quiver version that wrote the run.
    pub quiver: String,
    /// Where the plan came from (a path, or a description).
    pub plan: String,
    /// SHA-256 of the resolved plan ([`crate::ResolvedPlan::describe`]): steps, backends,
    /// inputs and every parameter, defaults included.
    pub plan_sha256: String,
    /// The first event of the run.
    pub first_event: u64,
    /// The number of events.
    pub events: u64,
    /// Every file of the run, by name.
    pub files: BTreeMap<String, FileRecord>,
    /// The dataset the run read (absent for runs without an input dataset, and in runs
    /// written before it was recorded): readers of truth check it is theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<InputIdentity>,
}

/// What identifies a run's input dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputIdentity {
    /// The dataset directory as the run was given it.
    pub path: String,
    /// SHA-256 of its `manifest.toml`, which lists every file's checksum: equal manifests,
    /// equal datasets.
    pub manifest_sha256: String,
    /// The generator's seed, when the manifest records one (for the messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl InputIdentity {
    /// The identity of the dataset in `dir`, or `None` when it has no `manifest.toml`.
    ///
    /// ```
    /// use quiver_columnar::rundir::InputIdentity;
    /// let tmp = tempfile::tempdir().unwrap();
    /// std::fs::write(tmp.path().join("manifest.toml"), "seed = 7\n[files]\n").unwrap();
    /// let id = InputIdentity::of(tmp.path()).unwrap().unwrap();
    /// assert_eq!((id.seed, id.manifest_sha256.len()), (Some(7), 64));
    /// ```
    pub fn of(dir: &Path) -> Result<Option<InputIdentity>> {
        let mp = dir.join(DATASET_MANIFEST);
        if !mp.is_file() {
            return Ok(None);
        }
        let seed = std::fs::read_to_string(&mp)
            .ok()
            .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
            .and_then(|t| t.get("seed").and_then(|s| s.as_integer()))
            .and_then(|s| u64::try_from(s).ok());
        Ok(Some(InputIdentity {
            path: dir.display().to_string(),
            manifest_sha256: sha256_file(&mp)?,
            seed,
        }))
    }
}

/// What [`StagedRun::commit`] needs to know about the job.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// Where the plan came from.
    pub plan: String,
    /// [`plan_sha256`] of the resolved plan.
    pub plan_sha256: String,
    pub first_event: u64,
    pub events: u64,
    /// The input dataset's identity ([`InputIdentity::of`]), recorded in the manifest.
    pub input: Option<InputIdentity>,
}

/// What a commit did.
#[derive(Clone, Debug)]
pub struct Committed {
    /// The output directory.
    pub dir: PathBuf,
    /// The new run's manifest.
    pub manifest: RunManifest,
    /// The manifest of the run it replaced, if the directory held one.
    pub replaced: Option<RunManifest>,
    /// How long the commit took (checksums, syncs, manifest, exchange, removal).
    pub time: std::time::Duration,
}

impl Committed {
    /// One line for the run summary.
    pub fn describe(&self) -> String {
        let bytes: u64 = self.manifest.files.values().map(|f| f.bytes).sum();
        let mut s = format!(
            "outputs: {} files, {:.1} MB in {} (complete; listed with checksums in {MANIFEST}; committed in {:.2} s)",
            self.manifest.files.len(),
            bytes as f64 / 1e6,
            self.dir.display(),
            self.time.as_secs_f64()
        );
        if let Some(old) = &self.replaced {
            s.push_str(&format!(
                "\n  replaced the run of events {}..{} that the directory held",
                old.first_event,
                old.first_event + old.events
            ));
        }
        s
    }
}

/// SHA-256 of a resolved plan, as recorded in the manifest.
pub fn plan_sha256(plan: &crate::ResolvedPlan) -> String {
    hex(&Sha256::digest(plan.describe().as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a file's contents.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::io::BufReader::with_capacity(
        1 << 20,
        File::open(path).map_err(|e| Error::io(path, e))?,
    );
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(|e| Error::io(path, e))?;
    Ok(hex(&h.finalize()))
}

mod job;
mod staging;
#[cfg(test)]
mod tests;
mod verify;

pub use job::run_job;
pub use staging::StagedRun;
use verify::*;
pub use verify::{verify, verify_with, Check};
