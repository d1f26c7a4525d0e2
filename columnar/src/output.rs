//! Output steps: products to Parquet or Arrow IPC files, one file per product, an `event`
//! column first, in event order whatever the thread count; a Parquet row group holds at
//! least [`ROW_GROUP_EVENTS`] events (batches are never split), an IPC record batch one
//! event batch. Files are written under a temporary name and renamed when complete.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::error::{Error, Result};
use crate::params::ParamSpec;
use crate::product::ProductKey;
use crate::step::{
    Backend, EventBatch, InputSpec, Registry, Signature, Step, StepConfig, StepType,
};

/// Events a Parquet row group gathers before it is closed (the last one may hold fewer): row
/// groups follow the events, not the batch size, so that small batches (less memory) do not
/// make files with a row group per event, which Polars scans ten times slower (a filter on
/// the tracks of 100 events: 61 ms with 100 row groups, 6 ms with 7).
pub const ROW_GROUP_EVENTS: u64 = 16;

/// At most this many row groups of whole events per Parquet file: a file holds at most
/// 32 767 row groups (the format's row-group ordinal is 16-bit), and the writer also closes
/// a group at a million rows, so the event groups leave room for that.
pub const MAX_EVENT_GROUPS: u64 = 8192;

/// The events a Parquet row group gathers in a job of `events` events: [`ROW_GROUP_EVENTS`],
/// or more when that would exceed [`MAX_EVENT_GROUPS`] groups (before, a file failed past
/// 524 300 events).
///
/// ```
/// use quiver_columnar::output::{row_group_events, MAX_EVENT_GROUPS};
/// assert_eq!(row_group_events(100), 16);
/// assert!(10_000_000u64.div_ceil(row_group_events(10_000_000)) <= MAX_EVENT_GROUPS);
/// ```
pub fn row_group_events(events: u64) -> u64 {
    ROW_GROUP_EVENTS.max(events.div_ceil(MAX_EVENT_GROUPS))
}

/// File formats of the output steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Parquet { compression: Compression },
    Ipc,
}

impl Format {
    fn extension(self) -> &'static str {
        match self {
            Format::Parquet { .. } => "parquet",
            Format::Ipc => "arrow",
        }
    }
}

/// The file name of a product: `<type>.<label>.<ext>`.
pub fn product_file_name(key: &ProductKey, extension: &str) -> String {
    format!("{}.{}.{extension}", key.type_name, key.label)
}

enum Sink {
    Parquet(ArrowWriter<File>),
    Ipc(arrow_ipc::writer::FileWriter<File>),
}

impl Sink {
    /// Writes a batch; `close_group` ends the Parquet row group after it.
    fn write(&mut self, b: &RecordBatch, close_group: bool) -> Result<()> {
        match self {
            Sink::Parquet(w) => {
                w.write(b)?;
                if close_group {
                    w.flush()?;
                }
            }
            Sink::Ipc(w) => w.write(b)?,
        }
        Ok(())
    }
    fn finish(self) -> Result<()> {
        match self {
            Sink::Parquet(w) => {
                w.close()?;
            }
            Sink::Ipc(mut w) => w.finish()?,
        }
        Ok(())
    }
}

/// One output file being written: batches arrive in any order and are written in event order.
struct OutputFile {
    key: ProductKey,
    path: PathBuf,
    tmp: PathBuf,
    format: Format,
    sink: Option<Sink>,
    next_event: u64,
    pending: BTreeMap<u64, (u64, RecordBatch)>,
    events_written: u64,
    /// Events in the open Parquet row group.
    group_events: u64,
    /// Events a row group gathers ([`row_group_events`] of the job).
    group_target: u64,
}

impl OutputFile {
    fn new(dir: &Path, key: ProductKey, format: Format) -> Self {
        let name = product_file_name(&key, format.extension());
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        OutputFile {
            path: dir.join(name),
            tmp,
            key,
            format,
            sink: None,
            next_event: 0,
            pending: BTreeMap::new(),
            events_written: 0,
            group_events: 0,
            group_target: ROW_GROUP_EVENTS,
        }
    }

    fn open(&mut self, b: &RecordBatch) -> Result<Sink> {
        let f = File::create(&self.tmp).map_err(|e| Error::io(&self.tmp, e))?;
        Ok(match self.format {
            Format::Parquet { compression } => {
                // The schema's name and version also as plain Parquet key-value metadata, for
                // readers that ignore the embedded Arrow schema; sorted by key, as arrow-ipc
                // sorts the embedded schema's: in the map's hash order, which changes from
                // process to process, two runs of a job wrote files differing in bytes.
                let mut kv: Vec<KeyValue> = b
                    .schema()
                    .metadata()
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                    .collect();
                kv.sort_by(|x, y| x.key.cmp(&y.key));
                let mut props = WriterProperties::builder()
                    .set_key_value_metadata(Some(kv))
                    .set_compression(compression)
                    .set_max_row_group_row_count(None)
                    .set_created_by(format!("quiver {}", env!("CARGO_PKG_VERSION")))
                    .set_dictionary_enabled(false);
                // Small integers (rows, columns, ADC, modules, flags) as DELTA_BINARY_PACKED,
                // everything else plain; no dictionary: interning every value cost 13 % of the
                // default job. Measured on the default job (100 events, 2 threads, snappy):
                // write_parquet 16.5 -> 11.3 ms/event and 180.8 -> 179.0 MB against dictionary
                // encoding of the small integers; plain everywhere: 10.8 ms/event, 221 MB;
                // delta for every integer column: 13.1 ms/event, 170 MB.
                for field in b.schema().fields() {
                    use arrow_schema::DataType::*;
                    if matches!(field.data_type(), UInt8 | UInt16 | Int8 | Int16) {
                        let path = parquet::schema::types::ColumnPath::from(field.name().as_str());
                        props = props.set_column_encoding(
                            path,
                            parquet::basic::Encoding::DELTA_BINARY_PACKED,
                        );
                    }
                }
                let props = props.build();
                Sink::Parquet(ArrowWriter::try_new(f, b.schema(), Some(props))?)
            }
            Format::Ipc => Sink::Ipc(arrow_ipc::writer::FileWriter::try_new(f, &b.schema())?),
        })
    }

    fn add(&mut self, first_event: u64, n_events: u64, b: RecordBatch) -> Result<()> {
        self.pending.insert(first_event, (n_events, b));
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() != self.next_event {
                break;
            }
            let (n, b) = entry.remove();
            if self.sink.is_none() {
                self.sink = Some(self.open(&b)?);
            }
            self.group_events += n;
            let close = self.group_events >= self.group_target;
            if close {
                self.group_events = 0;
            }
            self.sink
                .as_mut()
                .expect("opened")
                .write(&b, close)
                .map_err(|e| Error::data(format!("{}: {e}", self.tmp.display())))?;
            self.next_event += n;
            self.events_written += n;
        }
        Ok(())
    }

    /// Completes the file. On success it takes its final name; after a failed job, the
    /// events written so far are kept under `<name>.partial`, which no reader mistakes for
    /// a complete output.
    fn finish(&mut self, success: bool) -> Result<Option<PathBuf>> {
        let Some(sink) = self.sink.take() else {
            return Ok(None);
        };
        sink.finish()?;
        let target = if success && self.pending.is_empty() {
            self.path.clone()
        } else {
            let mut p = self.path.clone().into_os_string();
            p.push(".partial");
            PathBuf::from(p)
        };
        std::fs::rename(&self.tmp, &target).map_err(|e| Error::io(&target, e))?;
        Ok(Some(target))
    }
}

/// Makes the output directory and proves it writable before any event, so that a wrong
/// `--output` fails at once, naming the directory, not after the first batch by a temporary
/// file's name.
fn prepare_output_dir(label: &str, dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::plan(
            label,
            format!("the output directory {} is an existing file, not a directory: choose another --output or remove the file", dir.display()),
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::plan(
            label,
            format!("cannot create the output directory {}: {e}", dir.display()),
        )
    })?;
    let probe = dir.join(format!(".quiver-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| {
        Error::plan(
            label,
            format!(
                "the output directory {} is not writable: {e}",
                dir.display()
            ),
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

struct WriteStep {
    inputs: Vec<ProductKey>,
    files: Vec<Mutex<OutputFile>>,
    /// Time in `process` (taking the rows, encoding, writing; waiting for a file's lock
    /// included), summed over workers, ns.
    busy_ns: std::sync::atomic::AtomicU64,
}

impl WriteStep {
    fn build(cfg: &StepConfig, format: Format) -> Result<Box<dyn Step>> {
        let dir = &cfg.job.output;
        prepare_output_dir(&cfg.label, dir)?;
        // A product selected twice (by its label and by label:type) is written once.
        let mut inputs: Vec<ProductKey> = Vec::new();
        for k in cfg.inputs("products") {
            if !inputs.contains(k) {
                inputs.push(k.clone());
            }
        }
        let files = inputs
            .iter()
            .map(|k| Mutex::new(OutputFile::new(dir, k.clone(), format)))
            .collect();
        Ok(Box::new(WriteStep {
            inputs,
            files,
            busy_ns: Default::default(),
        }))
    }
}

impl Step for WriteStep {
    fn begin_job(&self, first_event: u64, events: u64) -> Result<()> {
        for f in &self.files {
            let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
            f.next_event = first_event;
            f.group_target = row_group_events(events);
        }
        Ok(())
    }

    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let t0 = std::time::Instant::now();
        for (key, file) in self.inputs.iter().zip(&self.files) {
            let p = batch.get(key)?;
            let rb = p.with_event_column(batch.first_event())?;
            file.lock().unwrap_or_else(|e| e.into_inner()).add(
                batch.first_event(),
                batch.n_events() as u64,
                rb,
            )?;
        }
        self.busy_ns.fetch_add(
            t0.elapsed().as_nanos() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(())
    }

    fn end_job(&self, success: bool) -> Result<Option<String>> {
        let mut lines = Vec::new();
        let (mut bytes, mut n_files) = (0u64, 0usize);
        for f in &self.files {
            let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(path) = f.finish(success)? {
                let name = path
                    .file_name()
                    .unwrap_or(path.as_os_str())
                    .to_string_lossy()
                    .into_owned();
                lines.push(format!("{} -> {name} ({} events)", f.key, f.events_written));
                bytes += std::fs::metadata(&path)
                    .map_err(|e| Error::io(&path, e))?
                    .len();
                n_files += 1;
            }
        }
        let busy = self.busy_ns.load(std::sync::atomic::Ordering::Relaxed) as f64 * 1e-9;
        if n_files > 0 {
            lines.push(write_rate(bytes, n_files, busy));
        }
        Ok(Some(lines.join("\n")))
    }
}

/// The summary line of an output step: bytes written, files, and the rate over the time
/// the step spent taking, encoding and writing rows (summed over workers).
///
/// ```
/// use quiver_columnar::output::write_rate;
/// assert_eq!(write_rate(180_000_000, 19, 0.9), "wrote 180.0 MB in 19 files; 0.90 s in the step (all workers): 200.0 MB/s");
/// assert!(write_rate(0, 1, 0.0).ends_with("n/a"));
/// ```
pub fn write_rate(bytes: u64, files: usize, busy_seconds: f64) -> String {
    let mb = bytes as f64 / 1e6;
    let rate = if busy_seconds > 0.0 {
        format!("{:.1} MB/s", mb / busy_seconds)
    } else {
        "n/a".to_string()
    };
    format!(
        "wrote {mb:.1} MB in {files} files; {busy_seconds:.2} s in the step (all workers): {rate}"
    )
}

/// Registers `write_parquet` and `write_ipc`.
/// The files a `write_parquet` / `write_ipc` step writes: one per product it reads (a
/// product selected twice, by its label and by label:type, is written once).
fn product_files(s: &crate::plan::ResolvedStep, extension: &str) -> Vec<String> {
    let names: std::collections::BTreeSet<String> = s
        .inputs
        .values()
        .flatten()
        .map(|k| product_file_name(k, extension))
        .collect();
    names.into_iter().collect()
}

pub fn register(r: &mut Registry) {
    r.add_file_writer("write_parquet", |s| product_files(s, "parquet"));
    r.add_file_writer("write_ipc", |s| product_files(s, "arrow"));
    let inputs = vec![InputSpec::many(
        "products",
        "products to write, by label (all of its products) or label:type",
    )];
    r.add(StepType {
        name: "write_parquet",
        doc: "Writes products to Parquet, one file per product (<type>.<label>.parquet), row groups of at least 16 events",
        params: vec![ParamSpec::choice("compression", &["snappy", "none"], "column compression")],
        signature: Signature { inputs: inputs.clone(), outputs: vec![] },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            let compression = match cfg.params.str("compression") {
                "none" => Compression::UNCOMPRESSED,
                _ => Compression::SNAPPY,
            };
            WriteStep::build(cfg, Format::Parquet { compression })
        },
    });
    r.add(StepType {
        name: "write_ipc",
        doc:
            "Writes products to Arrow IPC files (<type>.<label>.arrow), one record batch per batch",
        params: vec![],
        signature: Signature {
            inputs,
            outputs: vec![],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| WriteStep::build(cfg, Format::Ipc),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A product batch whose schema carries `n` metadata keys, from a fresh map (so a fresh
    /// hash order).
    fn batch(n: usize) -> RecordBatch {
        use arrow_array::{ArrayRef, UInt32Array};
        let metadata: std::collections::HashMap<String, String> = (0..n)
            .map(|i| (format!("quiver.key{i}"), format!("v{i}")))
            .collect();
        let schema = arrow_schema::Schema::new_with_metadata(
            vec![arrow_schema::Field::new(
                "x",
                arrow_schema::DataType::UInt32,
                false,
            )],
            metadata,
        );
        RecordBatch::try_new(
            std::sync::Arc::new(schema),
            vec![std::sync::Arc::new(UInt32Array::from(vec![1, 2, 3])) as ArrayRef],
        )
        .unwrap()
    }

    /// The same rows give the same file bytes whatever order the schema's metadata map has,
    /// and the metadata reads back.
    #[test]
    fn parquet_files_are_byte_identical_and_keep_the_schema_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str| -> PathBuf {
            let sub = dir.path().join(name);
            std::fs::create_dir(&sub).unwrap();
            let key = ProductKey::new("p", "x");
            let mut f = OutputFile::new(
                &sub,
                key,
                Format::Parquet {
                    compression: Compression::SNAPPY,
                },
            );
            f.add(0, 1, batch(12)).unwrap();
            f.finish(true).unwrap().unwrap()
        };
        let paths: Vec<PathBuf> = (0..4).map(|i| write(&format!("run{i}"))).collect();
        let files: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
        assert!(
            files.windows(2).all(|w| w[0] == w[1]),
            "the same batch written four times gave different bytes"
        );
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            File::open(&paths[0]).unwrap(),
        )
        .unwrap();
        let meta = reader.schema().metadata().clone();
        for i in 0..12 {
            assert_eq!(
                meta.get(&format!("quiver.key{i}")).map(String::as_str),
                Some(format!("v{i}").as_str())
            );
        }
    }
}
