//! The capacities a run reached, from the `capacity_overflows.<label>.parquet` files its
//! steps wrote (see `quiver_columnar::overflow`), for the truth report.

use std::collections::BTreeMap;
use std::path::Path;

use arrow_array::{Array, StringArray, UInt64Array};

use crate::error::{Result, ValidationError};

/// One capacity of one step reached during a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapacityReached {
    /// The step's label.
    pub label: String,
    /// The capacity (e.g. `hits_per_event`).
    pub capacity: String,
    /// Its value in the run.
    pub limit: u64,
    /// Events that reached it.
    pub events: u64,
    /// The largest demand counted (`None` where the step does not count past the limit).
    pub max_demanded: Option<u64>,
    /// Objects cut, summed over the events.
    pub truncated: u64,
}

/// Reads every `capacity_overflows.<label>.parquet` of `run_dir` (none: nothing reached, or
/// the plan did not write them), by label then capacity.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// assert!(quiver_validation::capacity::read_run(dir.path()).unwrap().is_empty());
/// ```
pub fn read_run(run_dir: &Path) -> Result<Vec<CapacityReached>> {
    let rd = std::fs::read_dir(run_dir).map_err(|source| ValidationError::Io {
        path: run_dir.into(),
        source,
    })?;
    let mut files: Vec<_> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("capacity_overflows.") && n.ends_with(".parquet"))
        })
        .collect();
    files.sort();
    let mut out: BTreeMap<(String, String), CapacityReached> = BTreeMap::new();
    for path in files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let label = name
            .trim_start_matches("capacity_overflows.")
            .trim_end_matches(".parquet")
            .to_string();
        let f = std::fs::File::open(&path).map_err(|source| ValidationError::Io {
            path: path.clone(),
            source,
        })?;
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)?.build()?;
        for batch in reader {
            let b = batch?;
            let bad = |c: &str| {
                ValidationError::Data(format!(
                    "{}: column '{c}' missing or not of the capacity_overflows schema",
                    path.display()
                ))
            };
            let cap = b
                .column_by_name("capacity")
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .ok_or_else(|| bad("capacity"))?;
            let u = |c: &str| {
                b.column_by_name(c)
                    .and_then(|a| a.as_any().downcast_ref::<UInt64Array>())
                    .ok_or_else(|| bad(c))
            };
            let (limit, demanded, truncated) = (u("limit")?, u("demanded")?, u("truncated")?);
            for r in 0..b.num_rows() {
                let e = out
                    .entry((label.clone(), cap.value(r).to_string()))
                    .or_insert_with(|| CapacityReached {
                        label: label.clone(),
                        capacity: cap.value(r).to_string(),
                        ..Default::default()
                    });
                e.limit = limit.value(r);
                e.events += 1;
                e.truncated += truncated.value(r);
                if demanded.is_valid(r) {
                    e.max_demanded = Some(e.max_demanded.unwrap_or(0).max(demanded.value(r)));
                }
            }
        }
    }
    Ok(out.into_values().collect())
}
