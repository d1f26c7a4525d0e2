//! Running a job with whole-run atomic outputs.

use super::*;

/// Builds and runs a job as `quiver run` and the Python driver do, with whole-run atomic
/// outputs: when a step of the plan writes files, they are staged beside `job.output` and
/// committed with a run manifest only after the job succeeded (this module). A
/// failed job leaves the output directory as it was; the files it wrote are kept in
/// `<output>.partial`, which the error names. `run` executes the built steps (e.g.
/// [`crate::executor::run`]) and returns the summary with any other result.
pub fn run_job<T>(
    resolved: &crate::plan::ResolvedPlan,
    registry: &crate::Registry,
    mut job: crate::JobContext,
    plan_origin: &str,
    first_event: u64,
    run: impl FnOnce(Vec<Box<dyn crate::Step>>) -> crate::Result<(crate::Summary, T)>,
) -> crate::Result<(crate::Summary, T, Option<crate::rundir::Committed>)> {
    let staged = if registry.writes_files(resolved) {
        Some(StagedRun::begin(&job.output)?)
    } else {
        None
    };
    let input = match (&staged, &job.input) {
        (Some(_), Some(dir)) => InputIdentity::of(dir)?,
        _ => None,
    };
    if let Some(s) = &staged {
        job.output = s.staging_dir().to_path_buf();
    }
    // A failed build drops `staged`, which removes the staging directory.
    let steps = resolved.build(registry, job.into())?;
    let cancel = crate::cancel::Check::current();
    let result = if cancel.requested() {
        Err(Error::Interrupted(String::new()))
    } else {
        run(steps)
    };
    // Checked again after the job: a request that came with the last batch still commits nothing.
    if cancel.requested() || matches!(result, Err(Error::Interrupted(_))) {
        // Dropping `staged` removes the staging directory with the files written so far.
        let msg = match staged {
            Some(s) if s.dir().join(MANIFEST).is_file() => format!(
                "nothing was written, the previous run in {} is intact",
                s.dir().display()
            ),
            Some(s) => format!("nothing was written to {}", s.dir().display()),
            None => "nothing was written".to_string(),
        };
        return Err(Error::Interrupted(msg));
    }
    match result {
        Ok((summary, value)) => {
            let committed = match staged {
                Some(s) => {
                    let info = RunInfo {
                        plan: plan_origin.to_string(),
                        plan_sha256: plan_sha256(resolved),
                        first_event,
                        events: summary.events,
                        input,
                    };
                    Some(s.commit(&info)?)
                }
                None => None,
            };
            Ok((summary, value, committed))
        }
        Err(e) => {
            let Some(s) = staged else { return Err(e) };
            let dir = s.dir().to_path_buf();
            // Kept on a full disk, the failed run's files would fail the next run too.
            if e.to_string()
                .contains(&format!("(os error {})", libc::ENOSPC))
            {
                let bytes = dir_bytes(s.staging_dir());
                drop(s);
                let note = format!(
                    "\n{} is unchanged; the disk is full, so the {:.1} MB the failed run had written were removed rather than kept",
                    dir.display(),
                    bytes as f64 / 1e6
                );
                return Err(with_note(e, &note));
            }
            let note = match s.keep_partial() {
                Ok(Some(p)) => format!(
                    "\n{} is unchanged; the files of the events completed before the failure are in {}",
                    dir.display(),
                    p.display()
                ),
                Ok(None) => format!("\n{} is unchanged", dir.display()),
                Err(k) => format!("\n{} is unchanged; keeping the failed run's files failed: {k}", dir.display()),
            };
            Err(with_note(e, &note))
        }
    }
}

/// Bytes of the files directly in `dir`.
pub(super) fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// `e` with `note` appended to its message, keeping its kind.
pub(super) fn with_note(e: crate::Error, note: &str) -> crate::Error {
    match e {
        Error::Plan { label, msg } => Error::Plan {
            label,
            msg: msg + note,
        },
        Error::Usage(m) => Error::Usage(m + note),
        Error::Data(m) => Error::Data(m + note),
        cause => Error::Noted {
            cause: Box::new(cause),
            note: note.to_string(),
        },
    }
}
