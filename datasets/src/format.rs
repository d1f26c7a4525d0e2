//! The on-disk dataset: a directory with `manifest.toml`, `raw.arrow` (Arrow IPC file,
//! memory-mapped by the reader), one Arrow IPC file per condition kind under `conditions/`,
//! and the truth as Parquet files. See `docs/datasets.md` for every column and unit.

use crate::conditions::Conditions;
use crate::error::DatasetError;
use crate::generator::{Event, GeneratorParams};
use crate::raw::Faults;
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float32Array, Int32Array, Int8Array, RecordBatch,
    UInt16Array, UInt32Array, UInt8Array,
};
use arrow_buffer::Buffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
/// The condition files, their reader and writer are data formats (`quiver_formats`).
pub use quiver_formats::condition_files::{read_conditions, write_conditions, CONDITION_FILES};
use quiver_formats::ipc::column as col;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Version of the directory layout; bumped on incompatible changes.
pub const FORMAT_VERSION: u32 = 1;
/// Name of the generator written in the manifest.
pub const GENERATOR_NAME: &str = concat!("quiver-datasets ", env!("CARGO_PKG_VERSION"));

/// `manifest.toml`: what was generated, how, and the checksum of every file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format_version: u32,
    pub generator: String,
    pub events: u32,
    pub seed: u64,
    pub corrupt_fraction: f64,
    /// Every generator parameter (the pile-up among them).
    pub params: GeneratorParams,
    /// Relative path → lowercase hex SHA-256.
    pub files: BTreeMap<String, String>,
    /// Relative path → size in bytes, checked before a file is read (absent in datasets
    /// written before sizes were recorded: then only the checksum is checked).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sizes: BTreeMap<String, u64>,
}

/// Checks, before reading a byte, that the dataset file `p` is a regular file (a FIFO or a
/// link to a device such as `/dev/zero` would hang a reader) of the size the manifest
/// records. Returns its size.
pub(crate) fn regular_file(p: &Path, size: Option<u64>) -> Result<u64, DatasetError> {
    let meta = std::fs::metadata(p).map_err(|e| DatasetError::io(p, e))?;
    if !meta.is_file() {
        let t = meta.file_type();
        let what = if t.is_dir() {
            "a directory"
        } else if std::os::unix::fs::FileTypeExt::is_fifo(&t) {
            "a FIFO"
        } else if std::os::unix::fs::FileTypeExt::is_char_device(&t)
            || std::os::unix::fs::FileTypeExt::is_block_device(&t)
        {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(DatasetError::format(p, format!("{what}, not a regular file: a dataset holds only the files `quiver generate` wrote: {}", crate::error::DAMAGED_HINT)));
    }
    if let Some(expected) = size.filter(|&e| e != meta.len()) {
        return Err(DatasetError::format(
            p,
            format!(
                "{} bytes, the manifest says {expected}: {}",
                meta.len(),
                crate::error::DAMAGED_HINT
            ),
        ));
    }
    Ok(meta.len())
}

pub(crate) fn sha256_file(path: &Path) -> Result<String, DatasetError> {
    let mut f = File::open(path).map_err(|e| DatasetError::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| DatasetError::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn field(name: &str, dt: DataType) -> Field {
    Field::new(name, dt, false)
}

/// Schema of `raw.arrow`.
pub fn raw_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        field("event", DataType::UInt32),
        field("fed", DataType::UInt32),
        field("data", DataType::Binary),
    ]))
}

/// The encoded FEDs of one event: (fed id, bytes).
pub type EventFeds = Vec<(u32, Vec<u8>)>;

/// Streaming writer of `raw.arrow`: one record batch per call.
pub struct RawWriter {
    path: PathBuf,
    w: arrow_ipc::writer::FileWriter<BufWriter<File>>,
}

impl RawWriter {
    pub fn create(path: &Path) -> Result<Self, DatasetError> {
        let f = File::create(path).map_err(|e| DatasetError::io(path, e))?;
        let w = arrow_ipc::writer::FileWriter::try_new(BufWriter::new(f), &raw_schema())
            .map_err(|e| DatasetError::format(path, e))?;
        Ok(RawWriter {
            path: path.to_path_buf(),
            w,
        })
    }
    /// Appends events: `(event index, [(fed, bytes)])`, in event order.
    pub fn write(&mut self, events: &[(u32, EventFeds)]) -> Result<(), DatasetError> {
        let n: usize = events.iter().map(|e| e.1.len()).sum();
        let mut ev = Vec::with_capacity(n);
        let mut fed = Vec::with_capacity(n);
        let mut data: Vec<&[u8]> = Vec::with_capacity(n);
        for (i, feds) in events {
            for (f, d) in feds {
                ev.push(*i);
                fed.push(*f);
                data.push(d);
            }
        }
        let b = RecordBatch::try_new(
            raw_schema(),
            vec![
                Arc::new(UInt32Array::from(ev)) as ArrayRef,
                Arc::new(UInt32Array::from(fed)),
                Arc::new(BinaryArray::from_vec(data)),
            ],
        )
        .map_err(|e| DatasetError::format(&self.path, e))?;
        self.w
            .write(&b)
            .map_err(|e| DatasetError::format(&self.path, e))
    }
    pub fn finish(mut self) -> Result<(), DatasetError> {
        self.w
            .finish()
            .map_err(|e| DatasetError::format(&self.path, e))
    }
}

/// Parquet writers of the truth tables.
pub struct TruthWriter {
    writers: Vec<(PathBuf, parquet::arrow::ArrowWriter<File>, SchemaRef)>,
}

/// Truth file names, in `TruthWriter` order.
pub const TRUTH_FILES: [&str; 6] = [
    "particles.parquet",
    "vertices.parquet",
    "simhits.parquet",
    "pixel_truth.parquet",
    "digis.parquet",
    "faults.parquet",
];

fn truth_schemas() -> Vec<SchemaRef> {
    use DataType::*;
    let s = |f: &[(&str, DataType)]| {
        Arc::new(Schema::new(
            f.iter()
                .map(|(n, t)| field(n, t.clone()))
                .collect::<Vec<_>>(),
        ))
    };
    vec![
        s(&[
            ("event", UInt32),
            ("id", UInt32),
            ("pdg", Int32),
            ("charge", Int8),
            ("pt", Float32),
            ("eta", Float32),
            ("phi", Float32),
            ("vx", Float32),
            ("vy", Float32),
            ("vz", Float32),
            ("d0", Float32),
            ("z0", Float32),
            ("process", UInt8),
            ("vertex", Int32),
            ("parent", Int32),
        ]),
        s(&[
            ("event", UInt32),
            ("id", UInt32),
            ("x", Float32),
            ("y", Float32),
            ("z", Float32),
            ("n_charged", UInt32),
            ("is_hard", Boolean),
        ]),
        s(&[
            ("event", UInt32),
            ("module", UInt16),
            ("lx", Float32),
            ("ly", Float32),
            ("gx", Float32),
            ("gy", Float32),
            ("gz", Float32),
            ("particle", UInt32),
            ("charge", Float32),
        ]),
        s(&[
            ("event", UInt32),
            ("module", UInt16),
            ("row", UInt16),
            ("col", UInt16),
            ("particle", UInt32),
            ("electrons", Float32),
            ("fraction", Float32),
        ]),
        s(&[
            ("event", UInt32),
            ("module", UInt16),
            ("row", UInt16),
            ("col", UInt16),
            ("adc", UInt8),
            ("electrons", Float32),
        ]),
        s(&[
            ("event", UInt32),
            ("fed", UInt32),
            ("kind", UInt8),
            ("index", UInt32),
            ("value", UInt32),
        ]),
    ]
}

/// Fault kinds in `faults.parquet`.
pub mod fault_kind {
    pub const ERROR_WORD: u8 = 0;
    pub const TRUNCATED: u8 = 1;
    pub const BAD_HEADER: u8 = 2;
    pub const BAD_TRAILER: u8 = 3;
    pub const FLIPPED_BIT: u8 = 4;
}

impl TruthWriter {
    pub fn create(dir: &Path) -> Result<Self, DatasetError> {
        let mut writers = Vec::new();
        for (name, schema) in TRUTH_FILES.iter().zip(truth_schemas()) {
            let mut props = parquet::file::properties::WriterProperties::builder()
                .set_compression(parquet::basic::Compression::SNAPPY);
            // Float columns (positions, charges) are nearly all distinct: a dictionary only costs
            // hashing time before the writer falls back to plain encoding anyway.
            for f in schema.fields() {
                if f.data_type() == &DataType::Float32 {
                    props = props.set_column_dictionary_enabled(
                        parquet::schema::types::ColumnPath::from(f.name().as_str()),
                        false,
                    );
                }
            }
            let props = props.build();
            let p = dir.join(name);
            let f = File::create(&p).map_err(|e| DatasetError::io(&p, e))?;
            let w = parquet::arrow::ArrowWriter::try_new(f, schema.clone(), Some(props))
                .map_err(|e| DatasetError::format(&p, e))?;
            writers.push((p, w, schema));
        }
        Ok(TruthWriter { writers })
    }

    /// Appends the truth of consecutive events.
    pub fn write(&mut self, events: &[(u32, &Event, &Faults)]) -> Result<(), DatasetError> {
        macro_rules! gather {
            ($iter:expr, $($f:expr => $arr:ident),+) => {{
                vec![$(Arc::new($arr::from($iter.clone().map($f).collect::<Vec<_>>())) as ArrayRef),+]
            }};
        }
        let parts = events
            .iter()
            .flat_map(|(i, e, _)| e.particles.iter().map(move |p| (*i, p)));
        let c0 = gather!(parts,
            |(i, _)| i => UInt32Array, |(_, p)| p.id => UInt32Array, |(_, p)| p.pdg => Int32Array,
            |(_, p)| p.charge => Int8Array, |(_, p)| p.pt => Float32Array, |(_, p)| p.eta => Float32Array,
            |(_, p)| p.phi => Float32Array, |(_, p)| p.vx => Float32Array, |(_, p)| p.vy => Float32Array,
            |(_, p)| p.vz => Float32Array, |(_, p)| p.d0 => Float32Array, |(_, p)| p.z0 => Float32Array,
            |(_, p)| p.process => UInt8Array, |(_, p)| p.vertex => Int32Array, |(_, p)| p.parent => Int32Array);
        let verts = events
            .iter()
            .flat_map(|(i, e, _)| e.vertices.iter().map(move |v| (*i, v)));
        let c1 = gather!(verts,
            |(i, _)| i => UInt32Array, |(_, v)| v.id => UInt32Array, |(_, v)| v.x => Float32Array,
            |(_, v)| v.y => Float32Array, |(_, v)| v.z => Float32Array, |(_, v)| v.n_charged => UInt32Array,
            |(_, v)| v.is_hard => BooleanArray);
        let sh = events
            .iter()
            .flat_map(|(i, e, _)| e.simhits.iter().map(move |h| (*i, h)));
        let c2 = gather!(sh,
            |(i, _)| i => UInt32Array, |(_, h)| h.module => UInt16Array, |(_, h)| h.lx => Float32Array,
            |(_, h)| h.ly => Float32Array, |(_, h)| h.gx => Float32Array, |(_, h)| h.gy => Float32Array,
            |(_, h)| h.gz => Float32Array, |(_, h)| h.particle => UInt32Array, |(_, h)| h.charge => Float32Array);
        let pt = events
            .iter()
            .flat_map(|(i, e, _)| e.pixel_truth.iter().map(move |t| (*i, t)));
        let c3 = gather!(pt,
            |(i, _)| i => UInt32Array, |(_, t)| t.module => UInt16Array, |(_, t)| t.row => UInt16Array,
            |(_, t)| t.col => UInt16Array, |(_, t)| t.particle => UInt32Array, |(_, t)| t.electrons => Float32Array,
            |(_, t)| t.fraction => Float32Array);
        let dg = events
            .iter()
            .flat_map(|(i, e, _)| e.digis.iter().map(move |d| (*i, d)));
        let c4 = gather!(dg,
            |(i, _)| i => UInt32Array, |(_, d)| d.module => UInt16Array, |(_, d)| d.row => UInt16Array,
            |(_, d)| d.col => UInt16Array, |(_, d)| d.adc => UInt8Array, |(_, d)| d.electrons => Float32Array);
        let mut fl: Vec<(u32, u32, u8, u32, u32)> = Vec::new();
        for (i, _, f) in events {
            use fault_kind::*;
            fl.extend(
                f.error_words
                    .iter()
                    .map(|&(fed, k, w)| (*i, fed, ERROR_WORD, k, w)),
            );
            fl.extend(f.truncated.iter().map(|&fed| (*i, fed, TRUNCATED, 0, 0)));
            fl.extend(f.bad_header.iter().map(|&fed| (*i, fed, BAD_HEADER, 0, 0)));
            fl.extend(
                f.bad_trailer
                    .iter()
                    .map(|&fed| (*i, fed, BAD_TRAILER, 0, 0)),
            );
            fl.extend(
                f.flipped_bits
                    .iter()
                    .map(|&(fed, k, b)| (*i, fed, FLIPPED_BIT, k, b)),
            );
        }
        let fi = fl.iter();
        let c5 = gather!(fi, |t| t.0 => UInt32Array, |t| t.1 => UInt32Array, |t| t.2 => UInt8Array, |t| t.3 => UInt32Array, |t| t.4 => UInt32Array);
        for ((p, w, schema), cols) in self.writers.iter_mut().zip([c0, c1, c2, c3, c4, c5]) {
            let b = RecordBatch::try_new(schema.clone(), cols)
                .map_err(|e| DatasetError::format(&*p, e))?;
            w.write(&b).map_err(|e| DatasetError::format(&*p, e))?;
        }
        Ok(())
    }

    pub fn finish(self) -> Result<(), DatasetError> {
        for (p, w, _) in self.writers {
            w.close().map_err(|e| DatasetError::format(&p, e))?;
        }
        Ok(())
    }
}

/// A read-only dataset: the manifest, the conditions and the memory-mapped raw data.
pub struct Dataset {
    dir: PathBuf,
    manifest: Manifest,
    conditions: Conditions,
    batches: Vec<RecordBatch>,
    /// Per event: (batch, first row, end row).
    index: Vec<(u32, u32, u32)>,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("dir", &self.dir)
            .field("events", &self.index.len())
            .finish_non_exhaustive()
    }
}

/// Datasets whose files this process has hashed, by [`verification_key`].
static VERIFIED: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// What identifies hashed files: the directory, the manifest's text and each listed file's
/// size and modification time (`None` when one cannot be read: then always hash).
fn verification_key(dir: &Path, manifest_text: &str, manifest: &Manifest) -> Option<String> {
    let mut key = format!(
        "{}\n{manifest_text}",
        std::fs::canonicalize(dir).ok()?.display()
    );
    for name in manifest.files.keys().filter(|n| read_by_reconstruction(n)) {
        let m = std::fs::metadata(dir.join(name)).ok()?;
        key.push_str(&format!("\n{name} {} {:?}", m.len(), m.modified().ok()?));
    }
    Some(key)
}

fn verified_before(dir: &Path, text: &str, manifest: &Manifest) -> bool {
    verification_key(dir, text, manifest).is_some_and(|k| {
        VERIFIED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&k)
    })
}

fn remember_verified(dir: &Path, text: &str, manifest: &Manifest) {
    if let Some(k) = verification_key(dir, text, manifest) {
        VERIFIED.lock().unwrap_or_else(|p| p.into_inner()).insert(k);
    }
}

/// Whether reconstruction (`Dataset::open`) reads the dataset file `name`: raw data and
/// conditions, not the truth.
fn read_by_reconstruction(name: &str) -> bool {
    name == "raw.arrow" || CONDITION_FILES.contains(&name)
}

fn check_file(
    dir: &Path,
    name: &str,
    expected: &str,
    size: Option<u64>,
) -> Result<(), DatasetError> {
    let p = dir.join(name);
    if std::fs::symlink_metadata(&p).is_err() {
        return Err(DatasetError::Format {
            file: p,
            what: format!(
                "missing (the manifest lists it): {}",
                crate::error::DAMAGED_HINT
            ),
        });
    }
    regular_file(&p, size)?;
    let actual = sha256_file(&p)?;
    if actual != expected {
        return Err(DatasetError::Checksum {
            file: p,
            expected: expected.to_string(),
            actual,
        });
    }
    Ok(())
}

/// Verifies the files `names` of the dataset in `dir` against its manifest (for readers of
/// the truth files, which `Dataset::open` does not hash): a file missing, absent from the
/// manifest or with another checksum is an error naming it and saying what to do.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let opts = quiver_datasets::GenerateOptions { events: 1, pileup: 0.0, output: dir.path().join("ds"), ..Default::default() };
/// quiver_datasets::generate(&opts).unwrap();
/// quiver_datasets::format::verify_files(&opts.output, &["simhits.parquet"]).unwrap();
/// std::fs::remove_file(opts.output.join("simhits.parquet")).unwrap();
/// let e = quiver_datasets::format::verify_files(&opts.output, &["simhits.parquet"]).unwrap_err().to_string();
/// assert!(e.contains("simhits.parquet: missing") && e.contains("quiver generate"), "{e}");
/// ```
pub fn verify_files(dir: &Path, names: &[&str]) -> Result<(), DatasetError> {
    let mp = dir.join("manifest.toml");
    let text = std::fs::read_to_string(&mp).map_err(|e| DatasetError::io(&mp, e))?;
    let manifest: Manifest = toml::from_str(&text).map_err(|e| DatasetError::damaged(&mp, e))?;
    for name in names {
        let expected = manifest
            .files
            .get(*name)
            .ok_or_else(|| DatasetError::damaged(&mp, format!("no checksum for `{name}`")))?;
        check_file(dir, name, expected, manifest.sizes.get(*name).copied())?;
    }
    Ok(())
}

/// The FEDs of one event: (fed id, bytes) borrowed from the memory-mapped file.
pub use quiver_formats::raw::RawEvent;

impl Dataset {
    /// Opens a dataset directory, verifying every file against the manifest's SHA-256. A
    /// process hashes the files once: a later open of the same directory whose manifest and
    /// files (size, modification time) are unchanged skips it (the partitions a Dask worker
    /// runs open the same dataset again and again).
    pub fn open(dir: &Path) -> Result<Dataset, DatasetError> {
        Self::open_with(dir, true)
    }

    /// Opens without hashing the files (faster for large datasets); structure is still checked.
    pub fn open_unverified(dir: &Path) -> Result<Dataset, DatasetError> {
        Self::open_with(dir, false)
    }

    fn open_with(dir: &Path, verify: bool) -> Result<Dataset, DatasetError> {
        let mp = dir.join("manifest.toml");
        let text = std::fs::read_to_string(&mp).map_err(|e| DatasetError::io(&mp, e))?;
        let manifest: Manifest =
            toml::from_str(&text).map_err(|e| DatasetError::damaged(&mp, e))?;
        if manifest.format_version != FORMAT_VERSION {
            return Err(DatasetError::format(
                &mp,
                format!(
                    "format version {} (this reader knows {FORMAT_VERSION}): {}",
                    manifest.format_version,
                    crate::error::DAMAGED_HINT
                ),
            ));
        }
        for required in ["raw.arrow"].iter().chain(CONDITION_FILES.iter()) {
            if !manifest.files.contains_key(*required) {
                return Err(DatasetError::damaged(
                    &mp,
                    format!("no checksum for `{required}`"),
                ));
            }
        }
        let hash = verify && !verified_before(dir, &text, &manifest);
        if hash {
            // What reconstruction reads; the truth files are verified by their readers
            // (`verify_files`), so a dataset without them still runs. `raw.arrow` is
            // hashed as it is read, below.
            for (name, expected) in manifest
                .files
                .iter()
                .filter(|(n, _)| read_by_reconstruction(n) && *n != "raw.arrow")
            {
                check_file(dir, name, expected, manifest.sizes.get(name).copied())?;
            }
        }
        let conditions = read_conditions(dir)?;
        let rp = dir.join("raw.arrow");
        let raw_sha = if hash {
            manifest.files.get("raw.arrow").map(String::as_str)
        } else {
            None
        };
        let batches = read_ipc_file(
            &rp,
            &raw_schema(),
            raw_sha,
            manifest.sizes.get("raw.arrow").copied(),
        )?;
        if verify {
            remember_verified(dir, &text, &manifest);
        }
        // index events; rows must be sorted by (event, fed) and cover 0..events
        let mut index: Vec<(u32, u32, u32)> = Vec::with_capacity(manifest.events as usize);
        let mut prev: Option<(u32, u32)> = None;
        for (bi, b) in batches.iter().enumerate() {
            let ev = col::<UInt32Array>(&rp, b, "event", None)?;
            let fed = col::<UInt32Array>(&rp, b, "fed", None)?;
            col::<BinaryArray>(&rp, b, "data", None)?;
            for r in 0..b.num_rows() {
                let key = (ev.value(r), fed.value(r));
                if prev.is_some_and(|p| p >= key) {
                    return Err(DatasetError::damaged(
                        &rp,
                        format!(
                            "rows not sorted by (event, fed) at event {} fed {}",
                            key.0, key.1
                        ),
                    ));
                }
                if prev.map(|p| p.0) != Some(key.0) {
                    if key.0 as usize != index.len() {
                        return Err(DatasetError::damaged(
                            &rp,
                            format!("event {} follows event {:?}", key.0, prev.map(|p| p.0)),
                        ));
                    }
                    index.push((bi as u32, r as u32, r as u32 + 1));
                } else {
                    let last = index.last_mut().expect("an event");
                    if last.0 != bi as u32 {
                        return Err(DatasetError::damaged(
                            &rp,
                            format!("event {} spans two record batches", key.0),
                        ));
                    }
                    last.2 = r as u32 + 1;
                }
                prev = Some(key);
            }
        }
        if index.len() != manifest.events as usize {
            return Err(DatasetError::damaged(
                &rp,
                format!("{} events, manifest says {}", index.len(), manifest.events),
            ));
        }
        Ok(Dataset {
            dir: dir.to_path_buf(),
            manifest,
            conditions,
            batches,
            index,
        })
    }

    /// Number of events.
    pub fn n_events(&self) -> usize {
        self.index.len()
    }

    /// The dataset directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The conditions (read from the IPC files).
    pub fn conditions(&self) -> &Conditions {
        &self.conditions
    }

    /// The FEDs of event `i`, borrowed from the mapped file without copying.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let opts = quiver_datasets::GenerateOptions {
    ///     events: 2, pileup: 0.0, output: dir.path().join("ds"), ..Default::default()
    /// };
    /// quiver_datasets::generate(&opts).unwrap();
    /// let ds = quiver_datasets::Dataset::open(&opts.output).unwrap();
    /// let feds = ds.raw_event(1).unwrap();
    /// assert_eq!(feds.len(), ds.conditions().fed_ids.len());
    /// assert!(feds.iter().all(|(_, bytes)| bytes.len() % 8 == 0 && bytes.len() >= 16));
    /// assert!(ds.raw_event(2).is_err());
    /// ```
    pub fn raw_event(&self, i: usize) -> Result<RawEvent<'_>, DatasetError> {
        let &(b, s, e) = self.index.get(i).ok_or(DatasetError::EventOutOfRange {
            index: i,
            n_events: self.index.len(),
        })?;
        let batch = &self.batches[b as usize];
        let fed = batch
            .column(1)
            .as_any()
            .downcast_ref::<UInt32Array>()
            .expect("checked at open");
        let data = batch
            .column(2)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .expect("checked at open");
        Ok((s..e)
            .map(|r| (fed.value(r as usize), data.value(r as usize)))
            .collect())
    }

    /// The FEDs of every event in `range`.
    pub fn raw_events(
        &self,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<RawEvent<'_>>, DatasetError> {
        range.map(|i| self.raw_event(i)).collect()
    }
}

/// Reads an Arrow IPC file whole into one 64-byte-aligned buffer, checks its SHA-256 on
/// those very bytes when `sha256` is given, and decodes its record batches without another
/// copy (each checked in full: see `ipc::decode_file`).
///
/// Read, not memory-mapped: a mapping turned a file truncated under a run (`cp` over it)
/// into SIGBUS, and bytes changed in place after the checksum into whatever they decoded
/// to. Reading costs the same memory (the mapped pages were resident once touched) and no
/// measurable time on the default job (docs/datasets.md, "Reading").
fn read_ipc_file(
    path: &Path,
    expected: &SchemaRef,
    sha256: Option<&str>,
    size: Option<u64>,
) -> Result<Vec<RecordBatch>, DatasetError> {
    let len = regular_file(path, size)?;
    if len == 0 {
        return Err(DatasetError::damaged(path, "empty file (0 bytes)"));
    }
    let len = usize::try_from(len)
        .map_err(|_| DatasetError::damaged(path, "larger than the address space"))?;
    let mut f = File::open(path).map_err(|e| DatasetError::io(path, e))?;
    let bytes = read_aligned(&mut f, len).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            DatasetError::damaged(
                path,
                format!(
                    "shorter than its {len} bytes while being read (changed by another program?)"
                ),
            )
        } else {
            DatasetError::io(path, e)
        }
    })?;
    if f.read(&mut [0u8; 1])
        .map_err(|e| DatasetError::io(path, e))?
        != 0
    {
        return Err(DatasetError::damaged(
            path,
            format!("grew past its {len} bytes while being read (changed by another program?)"),
        ));
    }
    if let Some(expected_sha) = sha256 {
        let actual: String = Sha256::digest(bytes.as_slice())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if actual != expected_sha {
            return Err(DatasetError::Checksum {
                file: path.to_path_buf(),
                expected: expected_sha.to_string(),
                actual,
            });
        }
    }
    let buffer: Buffer = bytes.into();
    let (schema, batches) = crate::ipc::decode_file(path, &buffer)?;
    if schema.fields() != expected.fields() {
        let names: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| format!("{}: {}", f.name(), f.data_type()))
            .collect();
        return Err(DatasetError::damaged(
            path,
            format!("unexpected columns [{}]", names.join(", ")),
        ));
    }
    Ok(batches)
}

/// Reads exactly `len` bytes of `f` into a new 64-byte-aligned buffer, written once by the
/// kernel: zeroing it first (`from_len_zeroed`) was a whole extra pass over the memory.
#[cfg(unix)]
fn read_aligned(f: &mut File, len: usize) -> std::io::Result<arrow_buffer::MutableBuffer> {
    use std::os::fd::AsRawFd;
    let mut bytes = arrow_buffer::MutableBuffer::with_capacity(len);
    let mut done = 0;
    while done < len {
        // SAFETY: `bytes` has a capacity of at least `len` bytes, so the `len - done` bytes
        // from offset `done` lie inside its allocation, and `read` writes at most that many
        // through a raw pointer (no reference to uninitialised memory is made).
        let n = unsafe {
            libc::read(
                f.as_raw_fd(),
                bytes.as_mut_ptr().add(done).cast(),
                len - done,
            )
        };
        match n {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n if n > 0 => done += n as usize,
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    // SAFETY: the loop initialised the first `len` bytes, within the capacity.
    unsafe { bytes.set_len(len) };
    Ok(bytes)
}

#[cfg(not(unix))]
fn read_aligned(f: &mut File, len: usize) -> std::io::Result<arrow_buffer::MutableBuffer> {
    let mut bytes = arrow_buffer::MutableBuffer::from_len_zeroed(len);
    f.read_exact(bytes.as_slice_mut())?;
    Ok(bytes)
}

/// A dataset is a source of raw data for the reconstruction's `read_raw` step.
impl quiver_formats::raw::RawSource for Dataset {
    fn n_events(&self) -> usize {
        Dataset::n_events(self)
    }
    fn raw_events(&self, range: std::ops::Range<usize>) -> Result<Vec<RawEvent<'_>>, String> {
        Dataset::raw_events(self, range).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::read_aligned;

    #[test]
    fn read_aligned_reads_every_byte_into_an_aligned_buffer_and_refuses_a_short_file() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("f");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let b = read_aligned(&mut std::fs::File::open(&p).unwrap(), data.len()).unwrap();
        assert_eq!(b.as_slice(), &data[..]);
        assert_eq!(b.as_ptr() as usize % 64, 0);
        let e = read_aligned(&mut std::fs::File::open(&p).unwrap(), data.len() + 1).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
