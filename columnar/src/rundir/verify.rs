//! Reading a run manifest and checking a run directory against it.

use super::*;

pub(super) fn read_manifest(dir: &Path) -> Result<RunManifest> {
    read_manifest_file(&dir.join(MANIFEST))
}

pub(super) fn read_manifest_file(mp: &Path) -> Result<RunManifest> {
    let mp = mp.to_path_buf();
    let damaged = |why: String| Error::DamagedManifest {
        path: mp.clone(),
        why,
    };
    let bytes = std::fs::read(&mp).map_err(|e| Error::io(&mp, e))?;
    let text = String::from_utf8(bytes).map_err(|_| damaged("not UTF-8 text".into()))?;
    let m: RunManifest = toml::from_str(&text).map_err(|e| damaged(e.message().to_string()))?;
    if m.format != FORMAT {
        return Err(damaged(format!(
            "format '{}', expected '{FORMAT}'",
            m.format
        )));
    }
    for (name, f) in &m.files {
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains(['/', '\\'])
            && name != MANIFEST;
        if !plain {
            return Err(damaged(format!("'{name}' is not a plain file name")));
        }
        if f.sha256.len() != 64 || !f.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(damaged(format!(
                "the checksum of '{name}' is not a SHA-256"
            )));
        }
    }
    Ok(m)
}

/// How much [`verify_with`] checks of each file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Presence and size.
    Sizes,
    /// Presence, size and SHA-256 (reads every byte).
    Checksums,
}

/// [`verify_with`] with [`Check::Checksums`].
pub fn verify(dir: &Path) -> Result<RunManifest> {
    verify_with(dir, Check::Checksums)
}

/// A reader's check of a run directory: its manifest exists and every file it lists is
/// there, with its size (and checksum); a Parquet or Arrow file the manifest does not list
/// is refused too. Returns the manifest. Every error names the directory or file and says
/// what to do.
///
/// ```
/// use quiver_columnar::rundir::verify;
/// let tmp = tempfile::tempdir().unwrap();
/// std::fs::write(tmp.path().join("hits.hits.parquet"), b"rows").unwrap();
/// let e = verify(tmp.path()).unwrap_err().to_string();
/// assert!(e.contains("quiver-run.toml"), "{e}");
/// ```
pub fn verify_with(dir: &Path, check: Check) -> Result<RunManifest> {
    if !dir.is_dir() {
        return Err(Error::Usage(format!(
            "run directory {} does not exist (or is not a directory)",
            dir.display()
        )));
    }
    if !dir.join(MANIFEST).is_file() {
        let mut partial = dir.as_os_str().to_owned();
        partial.push(".partial");
        let hint = if Path::new(&partial).is_dir() {
            format!(
                " (the events of a failed run are in {}, which is not a complete run either)",
                Path::new(&partial).display()
            )
        } else {
            String::new()
        };
        return Err(Error::Usage(format!(
            "{} holds no complete Quiver run: its run manifest {MANIFEST} is missing{hint}. A run writes it last, so this \
             is a run that is still writing or was killed, or files written by an earlier Quiver or another program: \
             run the plan again with --output {}",
            dir.display(),
            dir.display()
        )));
    }
    let m = read_manifest(dir)?;
    let mismatch = |file: &str, why: String| Error::RunMismatch {
        path: dir.join(file),
        why,
    };
    m.files.par_iter().try_for_each(|(name, f)| {
        let p = dir.join(name);
        let meta = std::fs::metadata(&p)
            .map_err(|_| mismatch(name, "listed in the run manifest but missing".into()))?;
        if meta.len() != f.bytes {
            return Err(mismatch(
                name,
                format!("{} bytes, the run manifest says {}", meta.len(), f.bytes),
            ));
        }
        if check == Check::Checksums && sha256_file(&p)? != f.sha256 {
            return Err(mismatch(
                name,
                "its SHA-256 differs from the run manifest's".into(),
            ));
        }
        Ok(())
    })?;
    for e in std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        let product_like = n.ends_with(".parquet") || n.ends_with(".arrow");
        if product_like && !m.files.contains_key(&n) {
            return Err(mismatch(
                &n,
                "not part of the run its manifest lists (copied in, or left by another run)".into(),
            ));
        }
    }
    Ok(m)
}
