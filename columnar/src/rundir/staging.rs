//! Staging a run beside its output directory and committing it as a whole.

use super::*;

/// This host's name, as it appears in staging directory names (letters, digits, `-`).
pub(super) fn host() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let h: String = raw
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if h.is_empty() {
        "host".into()
    } else {
        h
    }
}

/// Whether process `pid` of this host still runs. Where that cannot be known (no `/proc`),
/// it is taken to run, so that nothing of a live run is ever removed.
pub(super) fn alive(pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    Path::new("/proc").join(pid.to_string()).exists()
}

/// The names a run into directory `name` uses beside it.
pub(super) struct Names {
    prefix: String,
}

impl Names {
    pub(super) fn new(name: &str) -> Self {
        Names {
            prefix: format!(".{name}.quiver-staging-"),
        }
    }
    pub(super) fn staging(&self, host: &str, pid: u32) -> String {
        format!("{}{host}-{pid}", self.prefix)
    }
    /// `(host, pid)` of a staging directory's name.
    fn parse<'a>(&self, entry: &'a str) -> Option<(&'a str, u32)> {
        let rest = entry.strip_prefix(self.prefix.as_str())?;
        let (host, pid) = rest.rsplit_once('-')?;
        Some((host, pid.parse().ok()?))
    }
}

/// A run being written: its files go to [`StagedRun::staging_dir`] until
/// [`StagedRun::commit`]. Dropped without a commit (the job failed before it started), the
/// staging directory is removed.
#[derive(Debug)]
pub struct StagedRun {
    dir: PathBuf,
    staging: PathBuf,
    /// The staging directory is inside `dir` (a mount point, or on another file system
    /// than its parent): the commit moves file by file, the manifest last.
    inside: bool,
    kind: Kind,
    finished: bool,
}

/// What a staged directory becomes: a run's output directory or a dataset. Both are
/// replaced as a whole, by the same protocol; they differ in their manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Run,
    Dataset,
}

impl Kind {
    fn manifest(self) -> &'static str {
        match self {
            Kind::Run => MANIFEST,
            Kind::Dataset => DATASET_MANIFEST,
        }
    }
    fn what(self) -> &'static str {
        match self {
            Kind::Run => "run",
            Kind::Dataset => "dataset",
        }
    }
}

/// The top-level entries (files, or the first directory of a path such as
/// `conditions/beamspot.arrow`) that the manifest at `p` lists in its `files` table.
pub(super) fn listed(p: &Path) -> Result<std::collections::BTreeSet<String>> {
    let text = std::fs::read_to_string(p).map_err(|e| Error::io(p, e))?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| Error::data(format!("{}: not a Quiver manifest: {e}", p.display())))?;
    let files = table
        .get("files")
        .and_then(|f| f.as_table())
        .ok_or_else(|| Error::data(format!("{}: no `files` table", p.display())))?;
    Ok(files
        .keys()
        .filter_map(|k| k.split('/').next())
        .filter(|k| !k.is_empty() && *k != "." && *k != "..")
        .map(String::from)
        .collect())
}

/// What a directory holds, for the decision to replace it.
pub(super) enum Holding {
    Absent,
    Empty,
    Run(RunManifest),
    /// A Quiver dataset with nothing else in it.
    Dataset,
    /// An in-place commit into this directory was killed: no run, only files of the old
    /// and the new one.
    Interrupted,
}

/// Checks that `dir` may be replaced by a new run (or dataset): absent, empty, or a Quiver
/// run (dataset) with no file its manifest does not list.
pub(super) fn holding(dir: &Path, kind: Kind) -> Result<Holding> {
    let mf = kind.manifest();
    let what = kind.what();
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Holding::Absent),
        Err(e) => {
            return Err(Error::Usage(format!(
                "cannot create the output directory {}: {e}",
                dir.display()
            )))
        }
    };
    if !meta.is_dir() {
        return Err(Error::Usage(format!(
            "the output directory {} is an existing file, not a directory: choose another --output or remove the file",
            dir.display()
        )));
    }
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        entries.push(e.file_name().to_string_lossy().into_owned());
    }
    entries.sort();
    // Ours: a staging directory of an in-place commit (a live run's, or a killed one's that
    // `begin` removes) and the marker of an in-place commit that was interrupted.
    let staged_inside: Vec<String> = entries
        .iter()
        .filter(|e| e.starts_with(INSIDE_STAGING))
        .cloned()
        .collect();
    let replacing = entries.iter().any(|e| e == REPLACING);
    entries.retain(|e| !e.starts_with(INSIDE_STAGING) && e != REPLACING);
    if entries.is_empty() {
        return Ok(Holding::Empty);
    }
    let refuse = |why: String| {
        Error::Usage(format!(
            "the output directory {} {why}; a {what} replaces its directory as a whole, so Quiver writes only into \
             an empty directory or one holding an earlier Quiver {what}: choose another --output, or move those files away",
            dir.display()
        ))
    };
    let list = |names: &[&String]| {
        let shown: Vec<&str> = names.iter().take(5).map(|s| s.as_str()).collect();
        let more = if names.len() > 5 {
            format!(" and {} more", names.len() - 5)
        } else {
            String::new()
        };
        format!("{}{more}", shown.join(", "))
    };
    if !entries.iter().any(|e| e == mf) && replacing {
        // An in-place commit was killed: the old run's files, the new run's (listed in its
        // staged manifest) and nothing else may be there.
        let mut known = listed(&dir.join(REPLACING))?;
        for st in &staged_inside {
            if let Ok(m) = listed(&dir.join(st).join(mf)) {
                known.extend(m);
            }
        }
        let foreign: Vec<&String> = entries.iter().filter(|e| !known.contains(*e)).collect();
        if !foreign.is_empty() {
            return Err(refuse(format!(
                "holds an interrupted Quiver commit and files that belong to no run: {}",
                list(&foreign)
            )));
        }
        return Ok(Holding::Interrupted);
    }
    if kind == Kind::Dataset && entries.iter().any(|e| e == MANIFEST) {
        return Err(refuse(format!(
            "holds a Quiver run ({MANIFEST}), not a dataset"
        )));
    }
    if !entries.iter().any(|e| e == mf) {
        let all: Vec<&String> = entries.iter().collect();
        return Err(refuse(format!(
            "is not empty and holds no Quiver {what} manifest ({mf}): {}",
            list(&all)
        )));
    }
    let not_ours = |e: Error| refuse(format!("holds a {mf} that is not a Quiver {what}'s ({e})"));
    // A run's manifest is parsed once, as what it is; a dataset's only for its file list.
    let (known, held) = match kind {
        Kind::Run => {
            let m = read_manifest_file(&dir.join(mf)).map_err(not_ours)?;
            (m.files.keys().cloned().collect(), Holding::Run(m))
        }
        Kind::Dataset => (listed(&dir.join(mf)).map_err(not_ours)?, Holding::Dataset),
    };
    let foreign: Vec<&String> = entries
        .iter()
        .filter(|e| *e != mf && !known.contains(*e))
        .collect();
    if !foreign.is_empty() {
        return Err(refuse(format!(
            "holds files that are not part of the {what} its {mf} describes: {}",
            list(&foreign)
        )));
    }
    Ok(held)
}

impl StagedRun {
    /// Prepares a run into `dir`: checks that `dir` may be replaced (absent, empty, or an
    /// earlier Quiver run), removes what killed runs into `dir` left beside it, and makes
    /// the staging directory. Nothing in `dir` changes until [`StagedRun::commit`].
    ///
    /// ```
    /// use quiver_columnar::rundir::{verify, RunInfo, StagedRun};
    /// let tmp = tempfile::tempdir().unwrap();
    /// let out = tmp.path().join("out");
    /// let run = StagedRun::begin(&out).unwrap();
    /// std::fs::write(run.staging_dir().join("hits.hits.parquet"), b"rows").unwrap();
    /// let info = RunInfo { plan: "example".into(), plan_sha256: "0".repeat(64), first_event: 0, events: 10, input: None };
    /// run.commit(&info).unwrap();
    /// assert_eq!(verify(&out).unwrap().files.len(), 1);
    /// // A directory holding something else is never replaced:
    /// std::fs::write(tmp.path().join("notes.txt"), b"mine").unwrap();
    /// assert!(StagedRun::begin(tmp.path()).is_err());
    /// ```
    pub fn begin(dir: &Path) -> Result<StagedRun> {
        Self::begin_kind(dir, Kind::Run)
    }

    /// Prepares a dataset written into [`StagedRun::staging_dir`] (by `quiver generate`,
    /// its manifest last) to replace `dir` as a whole with [`StagedRun::commit_dataset`]:
    /// `dir` must be absent, empty or an earlier Quiver dataset with nothing else in it.
    ///
    /// ```
    /// use quiver_columnar::rundir::StagedRun;
    /// let tmp = tempfile::tempdir().unwrap();
    /// let ds = tmp.path().join("ds");
    /// let staged = StagedRun::begin_dataset(&ds).unwrap();
    /// std::fs::write(staged.staging_dir().join("raw.arrow"), b"events").unwrap();
    /// std::fs::write(staged.staging_dir().join("manifest.toml"), "[files]\n\"raw.arrow\" = \"0\"\n").unwrap();
    /// staged.commit_dataset().unwrap();
    /// assert!(ds.join("raw.arrow").is_file());
    /// // A directory holding anything else is refused and left alone.
    /// std::fs::write(tmp.path().join("notes.txt"), b"mine").unwrap();
    /// assert!(StagedRun::begin_dataset(tmp.path()).is_err());
    /// ```
    pub fn begin_dataset(dir: &Path) -> Result<StagedRun> {
        Self::begin_kind(dir, Kind::Dataset)
    }

    fn begin_kind(dir: &Path, kind: Kind) -> Result<StagedRun> {
        let dir = std::path::absolute(dir).map_err(|e| Error::io(dir, e))?;
        // A symbolic link to a directory: the run goes where it points.
        let dir = if dir.exists() {
            dir.canonicalize().map_err(|e| Error::io(&dir, e))?
        } else {
            dir
        };
        let name = dir
            .file_name()
            .ok_or_else(|| {
                Error::Usage(format!(
                    "the output directory {} has no name: choose a directory below it",
                    dir.display()
                ))
            })?
            .to_string_lossy()
            .into_owned();
        let parent = dir.parent().unwrap_or(Path::new("/")).to_path_buf();
        let held = holding(&dir, kind)?;
        std::fs::create_dir_all(&parent).map_err(|e| {
            Error::Usage(format!(
                "cannot create the output directory {}: {e}",
                dir.display()
            ))
        })?;
        let names = Names::new(&name);
        let host = host();
        let me = std::process::id();
        // Leftovers of killed runs into the same directory (this host, process gone).
        if let Ok(rd) = std::fs::read_dir(&parent) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if let Some((h, pid)) = names.parse(&n) {
                    if h == host && (pid == me || !alive(pid)) {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        // A mount point (a Docker volume, a Kubernetes volume, any mounted directory) can be
        // neither renamed nor exchanged (EBUSY), and a staging directory beside it is on
        // another file system (EXDEV): the run is staged inside it instead.
        let inside = dir.is_dir() && is_mount_point(&dir, &parent);
        #[cfg(test)]
        let inside = inside || (dir.is_dir() && super::tests::FORCE_INSIDE.with(|f| f.get()));
        if inside {
            for e in std::fs::read_dir(&dir)
                .map_err(|e| Error::io(&dir, e))?
                .flatten()
            {
                let n = e.file_name().to_string_lossy().into_owned();
                let Some((h, pid)) = n
                    .strip_prefix(INSIDE_STAGING)
                    .and_then(|r| r.rsplit_once('-'))
                else {
                    continue;
                };
                if h == host && pid.parse().is_ok_and(|pid: u32| pid == me || !alive(pid)) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        if matches!(held, Holding::Interrupted) {
            // What a killed in-place commit left: files of the old and the new run only
            // (`holding` checked), neither complete. The marker stays until the next commit.
            for e in std::fs::read_dir(&dir)
                .map_err(|e| Error::io(&dir, e))?
                .flatten()
            {
                let n = e.file_name().to_string_lossy().into_owned();
                if n != REPLACING && !n.starts_with(INSIDE_STAGING) {
                    remove_entry(&e.path())?;
                }
            }
        }
        let staging = if inside {
            dir.join(format!("{INSIDE_STAGING}{host}-{me}"))
        } else {
            parent.join(names.staging(&host, me))
        };
        std::fs::create_dir(&staging).map_err(|e| {
            Error::Usage(format!(
                "cannot write beside the output directory {} (a run is staged in {} and moved in whole): {e}",
                dir.display(),
                staging.display()
            ))
        })?;
        Ok(StagedRun {
            dir,
            staging,
            inside,
            kind,
            finished: false,
        })
    }

    /// The output directory (absolute).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the job's steps write their files.
    pub fn staging_dir(&self) -> &Path {
        &self.staging
    }

    /// Completes the run: every staged file is checksummed, the manifest written last (and
    /// synced), and the staging directory takes the output directory's place in one atomic
    /// exchange; the earlier run is then removed.
    ///
    /// The files themselves are not synced: atomicity is against a killed process, whose
    /// writes the page cache keeps. After a power loss a manifest may outlive its files'
    /// contents; readers then refuse the run (checksums), never read it silently. Syncing
    /// every file would cost a large share of a short job.
    pub fn commit(mut self, info: &RunInfo) -> Result<Committed> {
        let start = std::time::Instant::now();
        let mut names = Vec::new();
        for e in std::fs::read_dir(&self.staging).map_err(|e| Error::io(&self.staging, e))? {
            let e = e.map_err(|e| Error::io(&self.staging, e))?;
            let t = e.file_type().map_err(|err| Error::io(e.path(), err))?;
            if !t.is_file() {
                return Err(Error::data(format!(
                    "{}: the staged run holds a non-file entry; nothing was committed",
                    e.path().display()
                )));
            }
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        let files = names
            .par_iter()
            .map(|n| {
                let p = self.staging.join(n);
                let bytes = std::fs::metadata(&p).map_err(|e| Error::io(&p, e))?.len();
                Ok((
                    n.clone(),
                    FileRecord {
                        bytes,
                        sha256: sha256_file(&p)?,
                    },
                ))
            })
            .collect::<Result<BTreeMap<_, _>>>()?;
        let manifest = RunManifest {
            format: FORMAT.into(),
            quiver: env!("CARGO_PKG_VERSION").into(),
            plan: info.plan.clone(),
            plan_sha256: info.plan_sha256.clone(),
            first_event: info.first_event,
            events: info.events,
            files,
            input: info.input.clone(),
        };
        let text = toml::to_string(&manifest)
            .map_err(|e| Error::data(format!("writing the run manifest: {e}")))?;
        let mp = self.staging.join(MANIFEST);
        {
            use std::io::Write;
            let mut f = File::create(&mp).map_err(|e| Error::io(&mp, e))?;
            f.write_all(text.as_bytes())
                .map_err(|e| Error::io(&mp, e))?;
            f.sync_all().map_err(|e| Error::io(&mp, e))?;
        }
        sync_dir(&self.staging);
        if self.inside {
            let replaced = match holding(&self.dir, Kind::Run)? {
                Holding::Run(old) => Some(old),
                _ => None,
            };
            self.finished = true;
            let new: Vec<String> = manifest.files.keys().cloned().collect();
            self.commit_in_place(&new).map_err(|e| {
                Error::data(format!(
                    "{e}; the output directory {} is a mount point, committed file by file: it holds no complete run now \
                     (readers refuse it), and the new run's files not yet moved in are kept in {}",
                    self.dir.display(),
                    self.staging.display()
                ))
            })?;
            return Ok(Committed {
                dir: self.dir.clone(),
                manifest,
                replaced,
                time: start.elapsed(),
            });
        }
        // The directory may have changed while the job ran: check again.
        let replaced = match holding(&self.dir, Kind::Run)? {
            Holding::Absent | Holding::Empty | Holding::Interrupted | Holding::Dataset => {
                match std::fs::rename(&self.staging, &self.dir) {
                    Ok(()) => None,
                    // Made (and filled) meanwhile by another run: exchange with it instead.
                    Err(_) if self.dir.is_dir() => {
                        self.finished = true;
                        exchange(&self.staging, &self.dir)?;
                        None
                    }
                    Err(e) => return Err(Error::io(&self.dir, e)),
                }
            }
            Holding::Run(old) => {
                // From here on, a failure names the staging directory as where the run is
                // kept: it must not be removed on the way out.
                self.finished = true;
                exchange(&self.staging, &self.dir)?;
                Some(old)
            }
        };
        self.finished = true;
        // The staging path now holds the earlier run (or nothing).
        let _ = std::fs::remove_dir_all(&self.staging);
        if let Some(parent) = self.dir.parent() {
            sync_dir(parent);
        }
        Ok(Committed {
            dir: self.dir.clone(),
            manifest,
            replaced,
            time: start.elapsed(),
        })
    }

    /// The commit into a directory that cannot be exchanged (a mount point): the old
    /// manifest becomes [`REPLACING`] (from then on readers refuse the directory), the old
    /// entries go, the new ones (`new`, top-level names in the staging directory) are moved
    /// in, and the new manifest comes last. A kill leaves a directory without a manifest
    /// that readers refuse and the next run replaces.
    fn commit_in_place(&self, new: &[String]) -> Result<()> {
        let marker = self.dir.join(REPLACING);
        let mp = self.dir.join(self.kind.manifest());
        if mp.is_file() {
            std::fs::rename(&mp, &marker).map_err(|e| Error::io(&mp, e))?;
        } else if !marker.exists() {
            std::fs::write(&marker, "[files]\n").map_err(|e| Error::io(&marker, e))?;
        }
        sync_dir(&self.dir);
        for name in listed(&marker)?.iter().filter(|n| !new.contains(*n)) {
            remove_entry(&self.dir.join(name))?;
        }
        for name in new {
            let to = self.dir.join(name);
            if to.is_dir() {
                remove_entry(&to)?;
            }
            std::fs::rename(self.staging.join(name), &to).map_err(|e| Error::io(&to, e))?;
        }
        sync_dir(&self.dir);
        std::fs::rename(self.staging.join(self.kind.manifest()), &mp)
            .map_err(|e| Error::io(&mp, e))?;
        sync_dir(&self.dir);
        let _ = std::fs::remove_file(&marker);
        let _ = std::fs::remove_dir_all(&self.staging);
        Ok(())
    }

    /// Completes a dataset staged by [`StagedRun::begin_dataset`]: its manifest must be
    /// there (the generator writes it last); the staging directory then takes the
    /// directory's place in one exchange (file by file, the manifest last, into a mount
    /// point) and the earlier dataset is removed. Returns whether one was replaced.
    pub fn commit_dataset(mut self) -> Result<bool> {
        let mf = Kind::Dataset.manifest();
        if !self.staging.join(mf).is_file() {
            return Err(Error::data(format!(
                "{}: the staged dataset has no {mf}; nothing was committed",
                self.staging.display()
            )));
        }
        sync_dir(&self.staging);
        let held = holding(&self.dir, Kind::Dataset)?;
        self.finished = true;
        if self.inside {
            let mut new = Vec::new();
            for e in std::fs::read_dir(&self.staging)
                .map_err(|e| Error::io(&self.staging, e))?
                .flatten()
            {
                let n = e.file_name().to_string_lossy().into_owned();
                if n != mf {
                    new.push(n);
                }
            }
            self.commit_in_place(&new).map_err(|e| {
                Error::data(format!(
                    "{e}; {} is a mount point, committed file by file: it holds no complete dataset now, and the new \
                     dataset's files not yet moved in are kept in {}",
                    self.dir.display(),
                    self.staging.display()
                ))
            })?;
            return Ok(matches!(held, Holding::Dataset));
        }
        match held {
            Holding::Dataset => exchange(&self.staging, &self.dir)?,
            _ => match std::fs::rename(&self.staging, &self.dir) {
                Ok(()) => {}
                Err(_) if self.dir.is_dir() => exchange(&self.staging, &self.dir)?,
                Err(e) => {
                    return Err(Error::NotMoved {
                        what: "dataset",
                        dir: self.dir.clone(),
                        kept: self.staging.clone(),
                        source: e,
                    })
                }
            },
        }
        let _ = std::fs::remove_dir_all(&self.staging);
        if let Some(parent) = self.dir.parent() {
            sync_dir(parent);
        }
        Ok(matches!(held, Holding::Dataset))
    }

    /// Ends a failed job: the output directory is left as it was; the files the job wrote
    /// (the events completed before the failure) are moved to `<output>.partial`, which has
    /// no run manifest and so is never taken for a run. Returns that directory, or `None`
    /// when the job wrote nothing.
    pub fn keep_partial(mut self) -> Result<Option<PathBuf>> {
        self.finished = true;
        let empty = std::fs::read_dir(&self.staging)
            .map(|mut d| d.next().is_none())
            .unwrap_or(true);
        if empty {
            let _ = std::fs::remove_dir_all(&self.staging);
            return Ok(None);
        }
        let mut target = self.dir.clone().into_os_string();
        target.push(".partial");
        let mut target = PathBuf::from(target);
        if target.exists() {
            if target.join(PARTIAL_MARKER).is_file() {
                std::fs::remove_dir_all(&target).map_err(|e| Error::io(&target, e))?;
            } else {
                let mut t = target.into_os_string();
                t.push(format!("-{}", std::process::id()));
                target = PathBuf::from(t);
            }
        }
        let _ = std::fs::write(
            self.staging.join(PARTIAL_MARKER),
            b"the files of a failed Quiver run; not a complete run\n",
        );
        std::fs::rename(&self.staging, &target).map_err(|e| Error::io(&target, e))?;
        Ok(Some(target))
    }
}

impl Drop for StagedRun {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

/// Whether `dir` is on another file system than `parent` (so a mount point): it can then
/// be neither renamed nor exchanged, and nothing beside it can be renamed into it.
#[cfg(unix)]
pub(super) fn is_mount_point(dir: &Path, parent: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(dir), std::fs::metadata(parent)) {
        (Ok(d), Ok(p)) => d.dev() != p.dev(),
        _ => false,
    }
}

#[cfg(not(unix))]
pub(super) fn is_mount_point(_dir: &Path, _parent: &Path) -> bool {
    false
}

/// Removes a file or a directory tree (a dataset's `conditions/`).
pub(super) fn remove_entry(p: &Path) -> Result<()> {
    let r = match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    r.map_err(|e| Error::io(p, e))
}

pub(super) fn sync_dir(dir: &Path) {
    if let Ok(f) = File::open(dir) {
        let _ = f.sync_all();
    }
}

/// Swaps two directories atomically (Linux `renameat2(RENAME_EXCHANGE)`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(super) fn exchange(a: &Path, b: &Path) -> Result<()> {
    #[cfg(test)]
    if super::tests::FAIL_EXCHANGE.with(|f| f.get()) {
        let err = std::io::Error::from_raw_os_error(libc::EBUSY);
        return Err(not_moved(a, b, err));
    }
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let ca = CString::new(a.as_os_str().as_bytes())
        .map_err(|_| Error::data(format!("{}: a NUL in the path", a.display())))?;
    let cb = CString::new(b.as_os_str().as_bytes())
        .map_err(|_| Error::data(format!("{}: a NUL in the path", b.display())))?;
    // SAFETY: both paths are valid NUL-terminated strings that outlive the call; AT_FDCWD
    // makes them relative to the working directory (they are absolute here).
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        // The file system cannot exchange (or an old kernel): two renames.
        Some(libc::EINVAL) | Some(libc::ENOSYS) => exchange_by_renames(a, b),
        _ => Err(not_moved(a, b, err)),
    }
}

/// The exchange of staged run `a` with output directory `b` failed with `err`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn not_moved(a: &Path, b: &Path, err: std::io::Error) -> Error {
    Error::NotMoved {
        what: "run",
        dir: b.to_path_buf(),
        kept: a.to_path_buf(),
        source: err,
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn exchange(a: &Path, b: &Path) -> Result<()> {
    exchange_by_renames(a, b)
}

/// The exchange where the file system has no atomic one: `b` moves aside, `a` takes its
/// place, the old `b` goes to `a`'s name. A kill between the two renames leaves `b` absent
/// (the new run complete in `a`, the old in the aside directory), never mixed.
pub(super) fn exchange_by_renames(a: &Path, b: &Path) -> Result<()> {
    let mut aside = a.as_os_str().to_owned();
    aside.push(".old");
    let aside = PathBuf::from(aside);
    std::fs::rename(b, &aside).map_err(|e| Error::io(b, e))?;
    if let Err(e) = std::fs::rename(a, b) {
        let _ = std::fs::rename(&aside, b);
        return Err(Error::io(b, e));
    }
    std::fs::rename(&aside, a).map_err(|e| Error::io(a, e))
}
