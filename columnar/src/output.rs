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
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::error::{Error, Result};
use crate::params::ParamSpec;
use crate::product::ProductKey;
use crate::step::{
    Backend, EventBatch, InputSpec, Registry, Signature, Step, StepConfig, StepType,
};

/// Events a Parquet row group gathers before it is closed (the last one may hold fewer): row
/// groups follow the events, not the batch size, so that small batches (less memory) do not
/// make files with a row group per event, which Polars scans about ten times slower
/// (docs/performance.md).
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

/// Batches a file may hold queued before a worker adding one waits for the file's writer.
const MAX_QUEUED_BATCHES: usize = 16;

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
///
/// Two locks, so that no worker waits for another's encoding: `queue` (held only to insert
/// or take a batch) and `writer` (held while encoding). A worker queues its batch, then
/// encodes whatever is ready only if no other worker is encoding this file; the encoding
/// worker takes the batches queued meanwhile before it lets go. (With one lock held for the
/// whole encoding, workers arriving together queued behind each other file by file.)
struct OutputFile {
    key: ProductKey,
    path: PathBuf,
    tmp: PathBuf,
    format: Format,
    queue: Mutex<Queue>,
    writer: Mutex<Writer>,
}

/// The batches not written yet, by first event.
struct Queue {
    /// The first event of the batch the file takes next.
    next_event: u64,
    pending: BTreeMap<u64, (u64, RecordBatch)>,
}

impl Queue {
    /// Takes the next batch in event order, when it has arrived.
    fn take_next(&mut self) -> Option<(u64, RecordBatch)> {
        let entry = self.pending.first_entry()?;
        if *entry.key() != self.next_event {
            return None;
        }
        let (n, b) = entry.remove();
        self.next_event += n;
        Some((n, b))
    }

    fn next_is_ready(&self) -> bool {
        self.pending.first_key_value().map(|(k, _)| *k) == Some(self.next_event)
    }
}

struct Writer {
    sink: Option<Sink>,
    events_written: u64,
    /// Events in the open Parquet row group.
    group_events: u64,
    /// Events a row group gathers ([`row_group_events`] of the job).
    group_target: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
            queue: Mutex::new(Queue {
                next_event: 0,
                pending: BTreeMap::new(),
            }),
            writer: Mutex::new(Writer {
                sink: None,
                events_written: 0,
                group_events: 0,
                group_target: ROW_GROUP_EVENTS,
            }),
        }
    }

    fn open(&self, b: &RecordBatch) -> Result<Sink> {
        let f = File::create(&self.tmp).map_err(|e| Error::io(&self.tmp, e))?;
        Ok(match self.format {
            Format::Parquet { compression } => Sink::Parquet(ArrowWriter::try_new(
                f,
                b.schema(),
                Some(parquet_properties(&b.schema(), compression)),
            )?),
            Format::Ipc => Sink::Ipc(arrow_ipc::writer::FileWriter::try_new(f, &b.schema())?),
        })
    }

    /// Queues a batch, then writes what is ready unless another worker is writing this file
    /// (that worker then writes this batch too). With [`MAX_QUEUED_BATCHES`] queued, it waits
    /// for the writer instead: the workers must not make batches faster than one of them
    /// encodes them, or the queue, and the memory, would grow with the job.
    fn add(&self, first_event: u64, n_events: u64, b: RecordBatch) -> Result<()> {
        let mut wait = {
            let mut q = lock(&self.queue);
            q.pending.insert(first_event, (n_events, b));
            q.pending.len() > MAX_QUEUED_BATCHES
        };
        loop {
            let mut w = if std::mem::take(&mut wait) {
                lock(&self.writer)
            } else {
                match self.writer.try_lock() {
                    Ok(w) => w,
                    Err(std::sync::TryLockError::WouldBlock) => return Ok(()),
                    Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                }
            };
            loop {
                let next = lock(&self.queue).take_next();
                let Some((n, b)) = next else { break };
                self.write(&mut w, n, &b)?;
            }
            drop(w);
            // A batch queued while this worker still held the writer, by a worker that
            // then found it held, is this worker's to write.
            if !lock(&self.queue).next_is_ready() {
                return Ok(());
            }
        }
    }

    fn write(&self, w: &mut Writer, n: u64, b: &RecordBatch) -> Result<()> {
        if w.sink.is_none() {
            w.sink = Some(self.open(b)?);
        }
        w.group_events += n;
        let close = w.group_events >= w.group_target;
        if close {
            w.group_events = 0;
        }
        w.sink
            .as_mut()
            .expect("opened")
            .write(b, close)
            .map_err(|e| Error::data(format!("{}: {e}", self.tmp.display())))?;
        w.events_written += n;
        Ok(())
    }

    /// Completes the file. On success it takes its final name; after a failed job, the
    /// events written so far are kept under `<name>.partial`, which no reader mistakes for
    /// a complete output.
    fn finish(&self, success: bool) -> Result<Option<PathBuf>> {
        let mut w = lock(&self.writer);
        let Some(sink) = w.sink.take() else {
            return Ok(None);
        };
        sink.finish()?;
        let complete = success && lock(&self.queue).pending.is_empty();
        let target = if complete {
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

/// The writer properties of a product's Parquet file.
fn parquet_properties(schema: &arrow_schema::Schema, compression: Compression) -> WriterProperties {
    // The schema's name and version also as plain Parquet key-value metadata, for readers
    // that ignore the embedded Arrow schema; sorted by key, as arrow-ipc sorts the embedded
    // schema's: in the map's hash order, which changes from process to process, two runs of
    // a job wrote files differing in bytes.
    let mut kv: Vec<KeyValue> = schema
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
        .set_dictionary_enabled(false)
        // Minimum and maximum only for the event column: a row group holds whole events, so
        // readers skip row groups (and pages) by event; any other column spans about its
        // whole range in every group, and computing its bounds is a good part of the step's
        // time (docs/performance.md).
        .set_statistics_enabled(EnabledStatistics::None)
        .set_column_statistics_enabled(
            parquet::schema::types::ColumnPath::from(crate::product::EVENT_COLUMN),
            EnabledStatistics::Page,
        );
    // Small integers (rows, columns, ADC, modules, flags) as DELTA_BINARY_PACKED, everything
    // else plain; no dictionary: interning every value is costly (docs/performance.md).
    for field in schema.fields() {
        use arrow_schema::DataType::*;
        if matches!(field.data_type(), UInt8 | UInt16 | Int8 | Int16) {
            let path = parquet::schema::types::ColumnPath::from(field.name().as_str());
            props = props.set_column_encoding(path, parquet::basic::Encoding::DELTA_BINARY_PACKED);
        }
    }
    props.build()
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
    files: Vec<OutputFile>,
    /// Time in `process` (taking the rows, encoding, writing), summed over workers, ns.
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
            .map(|k| OutputFile::new(dir, k.clone(), format))
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
            lock(&f.queue).next_event = first_event;
            lock(&f.writer).group_target = row_group_events(events);
        }
        Ok(())
    }

    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let t0 = std::time::Instant::now();
        for (key, file) in self.inputs.iter().zip(&self.files) {
            let p = batch.get(key)?;
            let rb = p.with_event_column(batch.first_event())?;
            file.add(batch.first_event(), batch.n_events() as u64, rb)?;
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
            if let Some(path) = f.finish(success)? {
                let name = path
                    .file_name()
                    .unwrap_or(path.as_os_str())
                    .to_string_lossy()
                    .into_owned();
                lines.push(format!(
                    "{} -> {name} ({} events)",
                    f.key,
                    lock(&f.writer).events_written
                ));
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

    fn snappy_file(dir: &Path) -> OutputFile {
        OutputFile::new(
            dir,
            ProductKey::new("p", "x"),
            Format::Parquet {
                compression: Compression::SNAPPY,
            },
        )
    }

    /// A worker that finds the file being encoded by another queues its batch and goes on:
    /// when `process` held the file's lock for the whole encoding, the workers queued
    /// behind each other file by file.
    #[test]
    fn a_worker_does_not_wait_for_another_encoding_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::sync::Arc::new(snappy_file(dir.path()));
        let encoding = f.writer.lock().unwrap(); // another worker, in the middle of a write
        let (tx, rx) = std::sync::mpsc::channel();
        let f2 = f.clone();
        std::thread::spawn(move || tx.send(f2.add(0, 1, batch(1)).is_ok()).unwrap());
        let returned = rx.recv_timeout(std::time::Duration::from_secs(20));
        drop(encoding);
        assert_eq!(
            returned,
            Ok(true),
            "add() waited for the worker holding the file's writer"
        );
        // The next batch's worker finds the writer free and writes both, in event order.
        f.add(1, 1, batch(1)).unwrap();
        assert_eq!(lock(&f.writer).events_written, 2);
        let path = f.finish(true).unwrap().unwrap();
        assert_eq!(path.file_name().unwrap(), "p.x.parquet");
    }

    /// Past [`MAX_QUEUED_BATCHES`] queued, a worker waits for the writer (and then writes
    /// what is ready) instead of queueing more: memory stays bounded when the workers make
    /// batches faster than one of them encodes.
    #[test]
    fn a_long_queue_makes_the_adding_worker_wait_and_write() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::sync::Arc::new(snappy_file(dir.path()));
        let encoding = f.writer.lock().unwrap();
        for i in 0..MAX_QUEUED_BATCHES as u64 {
            f.add(i, 1, batch(1)).unwrap(); // queued, returns at once
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let f2 = f.clone();
        let last = MAX_QUEUED_BATCHES as u64;
        std::thread::spawn(move || tx.send(f2.add(last, 1, batch(1)).is_ok()).unwrap());
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(300))
                .is_err(),
            "add() queued a batch past the limit instead of waiting"
        );
        drop(encoding);
        assert_eq!(
            rx.recv_timeout(std::time::Duration::from_secs(20)),
            Ok(true)
        );
        assert_eq!(lock(&f.writer).events_written, last + 1);
        assert!(lock(&f.queue).pending.is_empty());
    }

    /// Batches added by many threads in any order make the same bytes as one thread adding
    /// them in order, and none is left behind (a batch queued while another thread held the
    /// writer is written by that thread before it lets go).
    #[test]
    fn concurrent_adds_in_any_order_write_every_batch_and_the_same_bytes() {
        use arrow_array::{ArrayRef, UInt32Array};
        let numbered = |i: u32| {
            let schema = batch(1).schema();
            let values: Vec<u32> = (0..4).map(|k| i * 1000 + k).collect();
            RecordBatch::try_new(
                schema,
                vec![std::sync::Arc::new(UInt32Array::from(values)) as ArrayRef],
            )
            .unwrap()
        };
        let n = 2000u32;
        let dir = tempfile::tempdir().unwrap();
        let sequential = dir.path().join("sequential");
        std::fs::create_dir(&sequential).unwrap();
        let f = snappy_file(&sequential);
        for i in 0..n {
            f.add(u64::from(i), 1, numbered(i)).unwrap();
        }
        let expected = std::fs::read(f.finish(true).unwrap().unwrap()).unwrap();
        for round in 0..10 {
            let sub = dir.path().join(format!("threads{round}"));
            std::fs::create_dir(&sub).unwrap();
            let f = snappy_file(&sub);
            let threads = 6;
            std::thread::scope(|s| {
                for t in 0..threads {
                    let f = &f;
                    // Thread t adds every fourth batch, the later ones first for odd t.
                    s.spawn(move || {
                        let mut mine: Vec<u32> = (0..n).filter(|i| i % threads == t).collect();
                        if t % 2 == 1 {
                            mine.reverse();
                        }
                        for i in mine {
                            f.add(u64::from(i), 1, numbered(i)).unwrap();
                        }
                    });
                }
            });
            assert_eq!(
                lock(&f.writer).events_written,
                u64::from(n),
                "round {round}"
            );
            let path = f.finish(true).unwrap().unwrap();
            assert_eq!(path.file_name().unwrap(), "p.x.parquet", "round {round}");
            assert!(
                std::fs::read(&path).unwrap() == expected,
                "round {round}: other bytes"
            );
        }
    }

    /// Readers skip row groups by event: the event column keeps its minimum and maximum;
    /// the other columns have none (their bounds would span every group).
    #[test]
    fn only_the_event_column_has_statistics() {
        use parquet::file::reader::FileReader;
        let dir = tempfile::tempdir().unwrap();
        let f = snappy_file(dir.path());
        let schema = arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("event", arrow_schema::DataType::UInt32, false),
            arrow_schema::Field::new("x", arrow_schema::DataType::Float32, false),
        ]);
        let columns: Vec<arrow_array::ArrayRef> = vec![
            std::sync::Arc::new(arrow_array::UInt32Array::from(vec![7, 8, 8])),
            std::sync::Arc::new(arrow_array::Float32Array::from(vec![1.0, -2.0, 3.0])),
        ];
        let b = RecordBatch::try_new(std::sync::Arc::new(schema), columns).unwrap();
        f.add(0, 2, b).unwrap();
        let path = f.finish(true).unwrap().unwrap();
        let reader =
            parquet::file::reader::SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        let rg = reader.metadata().row_group(0);
        let event = rg.column(0);
        assert_eq!(event.column_path().string(), "event");
        let stats = event.statistics().expect("the event column has statistics");
        assert_eq!(stats.min_bytes_opt(), Some(&7u32.to_le_bytes()[..]));
        assert_eq!(stats.max_bytes_opt(), Some(&8u32.to_le_bytes()[..]));
        assert_eq!(rg.column(1).column_path().string(), "x");
        assert!(rg.column(1).statistics().is_none(), "x has statistics");
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
            let f = OutputFile::new(
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
