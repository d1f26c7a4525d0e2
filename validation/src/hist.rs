//! Fixed-binning histograms with the reference's exact binning rule, filled from whole
//! Arrow columns, and their two file formats: Parquet (one row per bin) and the
//! reference's text format (one line per histogram).
//!
//! Binning (`SimpleAtomicHisto::fill` of the reference): `n + 2` counters; `v < min` goes to
//! counter 0 (underflow), `v ≥ max` to counter `n + 1` (overflow); otherwise
//! `i = int((v − min) / (max − min) · n)` evaluated in `f32`, `i == n` (rounding just below
//! `max`) folded to `n − 1`, and counter `i + 1`. Every value is first converted to `f32`,
//! as the reference's `fill(float)` converts its argument (round to nearest).
//!
//! NaN compares false with both limits, so the reference reaches the integer conversion
//! with NaN; on x86-64 that gives `INT_MIN`, its range check fails and it throws
//! `std::runtime_error`, ending the job. We return [`ValidationError::NotANumber`]
//! instead and leave the histogram unchanged. ±∞ are ordinary under/overflow.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrowPrimitiveType, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use crate::cppfmt::format_float;
use crate::error::{Result, ValidationError};

/// Product-like schema name of the histogram table (see docs/products.md, `histograms`).
pub const HISTOGRAMS_SCHEMA: &str = "histograms";
/// Its version.
pub const HISTOGRAMS_VERSION: u32 = 1;

/// Values binned at once by [`Histogram::fill`] and co.
const FILL_BLOCK: usize = 256;

/// A histogram with `n` equal bins on `[min, max)` plus underflow and overflow counters.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub name: String,
    /// Bins between `min` and `max`.
    pub n: u32,
    /// Lower limit (inclusive), as the reference stores it: `f32`.
    pub min: f32,
    /// Upper limit (exclusive).
    pub max: f32,
    /// `n + 2` counters: 0 = underflow, 1..=n the bins, n+1 = overflow.
    pub counts: Vec<u64>,
}

impl Histogram {
    /// An empty histogram; `n ≥ 1` (and below 2²⁴, so that `n` is exact in `f32`), `min` and
    /// `max` finite with `min < max` and `max − min` finite in `f32`.
    ///
    /// ```
    /// use quiver_validation::hist::Histogram;
    /// let mut h = Histogram::new("x", 4, 0.0, 1.0).unwrap();
    /// h.fill(&[-1.0, 0.0, 0.3, 1.0, 7.0]).unwrap();
    /// assert_eq!(h.counts, vec![1, 1, 1, 0, 0, 2]);
    /// assert!(Histogram::new("bad", 0, 0.0, 1.0).is_err());
    /// ```
    pub fn new(name: impl Into<String>, n: u32, min: f32, max: f32) -> Result<Self> {
        let name = name.into();
        let bad = |msg: String| {
            Err(ValidationError::BadHistogram {
                name: name.clone(),
                msg,
            })
        };
        if n == 0 || n >= 1 << 24 {
            return bad(format!("bin count {n} must be in 1..2^24"));
        }
        if !(min.is_finite() && max.is_finite() && min < max && (max - min).is_finite()) {
            return bad(format!(
                "limits [{min}, {max}) must be finite with min < max"
            ));
        }
        Ok(Histogram {
            counts: vec![0; n as usize + 2],
            name,
            n,
            min,
            max,
        })
    }

    /// The counter index of `v` (0 = underflow, n+1 = overflow); `None` for NaN.
    ///
    /// ```
    /// use quiver_validation::hist::Histogram;
    /// let h = Histogram::new("x", 10, 0.0, 1.0).unwrap();
    /// assert_eq!(h.bin(0.0), Some(1));
    /// assert_eq!(h.bin(0.99999994), Some(10)); // int(9.9999994) = 9
    /// assert_eq!(h.bin(1.0), Some(11));
    /// assert_eq!(h.bin(f32::NAN), None);
    /// ```
    #[inline]
    pub fn bin(&self, v: f32) -> Option<usize> {
        if v < self.min {
            Some(0)
        } else if v >= self.max {
            Some(self.n as usize + 1)
        } else if v.is_nan() {
            None
        } else {
            // Same operations, order and precision as the reference (no fused multiply-add).
            let x = (v - self.min) / (self.max - self.min) * self.n as f32;
            // x lies in [0, n]: the conversion truncates like C++'s float → int.
            let mut i = x as u32;
            if i == self.n {
                i = self.n - 1;
            }
            Some(i as usize + 1)
        }
    }

    /// Fills `f32` values; on a NaN nothing is filled and the error names its index.
    pub fn fill(&mut self, values: &[f32]) -> Result<()> {
        if let Some(index) = values.iter().position(|v| v.is_nan()) {
            return Err(ValidationError::NotANumber {
                name: self.name.clone(),
                index,
            });
        }
        self.fill_slice(values);
        Ok(())
    }

    /// Fills values already known not to be NaN (see [`Histogram::fill_block`]).
    fn fill_iter(&mut self, mut values: impl Iterator<Item = f32>) {
        let mut v = [0f32; FILL_BLOCK];
        let mut second = vec![0u64; self.counts.len()];
        loop {
            let mut k = 0;
            for x in values.by_ref().take(FILL_BLOCK) {
                v[k] = x;
                k += 1;
            }
            self.fill_block(&v[..k], &mut second);
            if k < FILL_BLOCK {
                break;
            }
        }
        self.counts
            .iter_mut()
            .zip(&second)
            .for_each(|(c, s)| *c += s);
    }

    /// [`Histogram::fill_iter`] for a slice, with no copy.
    fn fill_slice(&mut self, values: &[f32]) {
        let mut second = vec![0u64; self.counts.len()];
        for block in values.chunks(FILL_BLOCK) {
            self.fill_block(block, &mut second);
        }
        self.counts
            .iter_mut()
            .zip(&second)
            .for_each(|(c, s)| *c += s);
    }

    /// [`Histogram::bin`] for a block of values (at most `FILL_BLOCK`, none NaN) without
    /// branches, so that the divisions vectorise (the same operations on each value: the same
    /// bins), then the counts, alternately into `counts` and `second` (a run of one bin is two
    /// chains of increments).
    fn fill_block(&mut self, block: &[f32], second: &mut [u64]) {
        let (min, max, n) = (self.min, self.max, self.n as i32);
        let (range, nf, over) = (max - min, n as f32, n + 1);
        let mut bins = [0i32; FILL_BLOCK];
        let bins = &mut bins[..block.len()];
        for (b, &x) in bins.iter_mut().zip(block) {
            // As `bin`: the reference's operations in its order. Inside [min, max) the quotient
            // lies in [0, n] (the clamp changes nothing there; outside it keeps the conversion
            // defined), and the conversion truncates as C++'s.
            let q = ((x - min) / range * nf).clamp(0.0, nf);
            // SAFETY: q lies in [0, n] with n < 2^24, and is not NaN (a clamp of a non-NaN).
            let inner = unsafe { q.to_int_unchecked::<i32>() }.min(n - 1) + 1;
            *b = if x < min {
                0
            } else if x >= max {
                over
            } else {
                inner
            };
        }
        let (pairs, rest) = bins.split_at(bins.len() & !1);
        for p in pairs.chunks_exact(2) {
            self.counts[p[0] as usize] += 1;
            second[p[1] as usize] += 1;
        }
        if let Some(&b) = rest.first() {
            self.counts[b as usize] += 1;
        }
    }

    /// Fills one value given as `f64` (converted to `f32` first, as the reference does).
    pub fn fill_one(&mut self, v: f64) -> Result<()> {
        self.fill(&[v as f32])
    }

    /// Fills every value of a numeric Arrow column (any integer or float type), converted to
    /// `f32` as a C++ implicit conversion to `float` does. Nulls and NaN are errors; on an
    /// error nothing is filled.
    ///
    /// ```
    /// use arrow_array::{Int16Array, UInt32Array};
    /// use quiver_validation::hist::Histogram;
    /// let mut h = Histogram::new("size", 800, 0.0, 800.0).unwrap();
    /// h.fill_array(&Int16Array::from(vec![-8, 0, 16, 799, 800])).unwrap();
    /// assert_eq!((h.counts[0], h.counts[1], h.counts[17], h.counts[800], h.counts[801]), (1, 1, 1, 1, 1));
    /// assert!(h.fill_array(&arrow_array::StringArray::from(vec!["a"])).is_err());
    /// ```
    pub fn fill_array(&mut self, a: &dyn Array) -> Result<()> {
        if a.null_count() > 0 {
            return Err(ValidationError::Nulls {
                column: self.name.clone(),
                nulls: a.null_count(),
            });
        }
        macro_rules! ints {
            ($t:ty) => {{
                let v = a.as_primitive::<$t>().values();
                self.fill_iter(v.iter().map(|&x| x as f32))
            }};
        }
        match a.data_type() {
            DataType::Float32 => return self.fill(a.as_primitive::<Float32Type>().values()),
            DataType::Float64 => {
                let v = a.as_primitive::<Float64Type>().values();
                if let Some(index) = v.iter().position(|x| x.is_nan()) {
                    return Err(ValidationError::NotANumber {
                        name: self.name.clone(),
                        index,
                    });
                }
                self.fill_iter(v.iter().map(|&x| x as f32))
            }
            DataType::Int8 => ints!(Int8Type),
            DataType::Int16 => ints!(Int16Type),
            DataType::Int32 => ints!(Int32Type),
            DataType::Int64 => ints!(Int64Type),
            DataType::UInt8 => ints!(UInt8Type),
            DataType::UInt16 => ints!(UInt16Type),
            DataType::UInt32 => ints!(UInt32Type),
            DataType::UInt64 => ints!(UInt64Type),
            other => {
                return Err(ValidationError::ColumnType {
                    column: self.name.clone(),
                    data_type: other.to_string(),
                    expected: "expected an integer or floating-point column".into(),
                })
            }
        }
        Ok(())
    }

    /// Fills the values of a primitive column at the rows where `keep` is true (same length).
    pub fn fill_array_where(&mut self, a: &dyn Array, keep: &[bool]) -> Result<()> {
        if keep.len() != a.len() {
            return Err(ValidationError::Data(format!(
                "histogram '{}': selection has {} entries for {} values",
                self.name,
                keep.len(),
                a.len()
            )));
        }
        if keep.iter().all(|&k| k) {
            return self.fill_array(a);
        }
        let idx: Vec<u32> = keep
            .iter()
            .enumerate()
            .filter(|(_, &k)| k)
            .map(|(i, _)| i as u32)
            .collect();
        let taken = take_primitive(a, &idx).ok_or_else(|| ValidationError::ColumnType {
            column: self.name.clone(),
            data_type: a.data_type().to_string(),
            expected: "expected an integer or floating-point column".into(),
        })?;
        // A NaN is reported by its row in `a`, not in the selection.
        self.fill_array(taken.as_ref()).map_err(|e| match e {
            ValidationError::NotANumber { name, index } => ValidationError::NotANumber {
                name,
                index: idx[index] as usize,
            },
            other => other,
        })
    }

    /// Adds the counts of `other` (same name and binning): merging is exact and
    /// order-independent.
    pub fn add(&mut self, other: &Histogram) -> Result<()> {
        if (self.n, self.min.to_bits(), self.max.to_bits())
            != (other.n, other.min.to_bits(), other.max.to_bits())
            || self.name != other.name
        {
            return Err(ValidationError::Mismatch {
                a: self.name.clone(),
                b: other.name.clone(),
            });
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        Ok(())
    }

    /// Values filled, under- and overflow included.
    pub fn entries(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Edges of counter `bin` in `f64`: `(−∞, min)` for the underflow, `[max, +∞)` for the
    /// overflow, `min + (max − min)·(bin−1)/n …` for the others (nominal: the `f32` rule may
    /// put a value that lies on an inner edge in the bin below).
    pub fn edges(&self, bin: usize) -> (f64, f64) {
        let (lo, hi, n) = (self.min as f64, self.max as f64, self.n as usize);
        let edge = |k: usize| {
            if k == 0 {
                lo
            } else if k == n {
                hi
            } else {
                lo + (hi - lo) * k as f64 / n as f64
            }
        };
        match bin {
            0 => (f64::NEG_INFINITY, lo),
            b if b > n => (hi, f64::INFINITY),
            b => (edge(b - 1), edge(b)),
        }
    }

    /// The reference's text line: `name size min max c0 … c(n+1)`, `size = n + 2`, limits
    /// printed as a default C++ stream prints a `float`.
    ///
    /// ```
    /// use quiver_validation::hist::Histogram;
    /// let mut h = Histogram::new("hit_lex", 2, 0.0, 5e-5).unwrap();
    /// h.fill(&[1e-5]).unwrap();
    /// assert_eq!(h.text_line(), "hit_lex 4 0 5e-05 0 1 0 0");
    /// ```
    pub fn text_line(&self) -> String {
        let mut s = format!(
            "{} {} {} {}",
            self.name,
            self.counts.len(),
            format_float(self.min),
            format_float(self.max)
        );
        for c in &self.counts {
            s.push(' ');
            s.push_str(&c.to_string());
        }
        s
    }
}

fn take_primitive(a: &dyn Array, idx: &[u32]) -> Option<Arc<dyn Array>> {
    fn take<T: ArrowPrimitiveType>(a: &dyn Array, idx: &[u32]) -> Arc<dyn Array> {
        let v = a.as_primitive::<T>().values();
        Arc::new(arrow_array::PrimitiveArray::<T>::from_iter_values(
            idx.iter().map(|&i| v[i as usize]),
        ))
    }
    Some(match a.data_type() {
        DataType::Float32 => take::<Float32Type>(a, idx),
        DataType::Float64 => take::<Float64Type>(a, idx),
        DataType::Int8 => take::<Int8Type>(a, idx),
        DataType::Int16 => take::<Int16Type>(a, idx),
        DataType::Int32 => take::<Int32Type>(a, idx),
        DataType::Int64 => take::<Int64Type>(a, idx),
        DataType::UInt8 => take::<UInt8Type>(a, idx),
        DataType::UInt16 => take::<UInt16Type>(a, idx),
        DataType::UInt32 => take::<UInt32Type>(a, idx),
        DataType::UInt64 => take::<UInt64Type>(a, idx),
        _ => return None,
    })
}

/// Histograms in name order (byte order of the names, as the reference's `std::map`).
fn sorted(hists: &[Histogram]) -> Vec<&Histogram> {
    let mut v: Vec<&Histogram> = hists.iter().collect();
    v.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    v
}

/// The reference's text file: one [`Histogram::text_line`] per histogram, names sorted,
/// each line ended by `\n`.
pub fn to_text(hists: &[Histogram]) -> String {
    sorted(hists).iter().map(|h| h.text_line() + "\n").collect()
}

/// Parses the reference's text format (e.g. its `histograms_serial.txt`), checking that
/// every line's size matches its counters.
///
/// ```
/// use quiver_validation::hist::{parse_text, to_text, Histogram};
/// let mut h = Histogram::new("track_phi", 2, -3.15, 3.15).unwrap();
/// h.fill(&[0.0, 4.0]).unwrap();
/// assert_eq!(parse_text(&to_text(&[h.clone()])).unwrap(), vec![h]);
/// ```
pub fn parse_text(text: &str) -> Result<Vec<Histogram>> {
    let mut out = Vec::new();
    for (ln, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad =
            |msg: &str| ValidationError::Data(format!("histogram text line {}: {msg}", ln + 1));
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            return Err(bad("expected 'name size min max counts…'"));
        }
        let size: usize = f[1].parse().map_err(|_| bad("size is not an integer"))?;
        let min: f32 = f[2].parse().map_err(|_| bad("min is not a number"))?;
        let max: f32 = f[3].parse().map_err(|_| bad("max is not a number"))?;
        if size < 3 || f.len() != 4 + size {
            return Err(bad(&format!("size {size} but {} counters", f.len() - 4)));
        }
        let mut h = Histogram::new(f[0], (size - 2) as u32, min, max)?;
        for (c, s) in h.counts.iter_mut().zip(&f[4..]) {
            *c = s
                .parse()
                .map_err(|_| bad("a counter is not a non-negative integer"))?;
        }
        out.push(h);
    }
    Ok(out)
}

/// The schema of the Parquet histogram table.
pub fn histograms_schema() -> SchemaRef {
    quiver_columnar::product_schema(
        HISTOGRAMS_SCHEMA,
        HISTOGRAMS_VERSION,
        vec![
            Field::new("histogram", DataType::Utf8, false),
            Field::new("bin", DataType::UInt32, false),
            Field::new("low_edge", DataType::Float64, false),
            Field::new("high_edge", DataType::Float64, false),
            Field::new("count", DataType::UInt64, false),
        ],
    )
}

/// One row per counter of every histogram, histograms in name order, bins in order.
pub fn to_record_batch(hists: &[Histogram]) -> Result<RecordBatch> {
    let (mut name, mut bin, mut lo, mut hi, mut count) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for h in sorted(hists) {
        for (b, &c) in h.counts.iter().enumerate() {
            let (l, u) = h.edges(b);
            name.push(h.name.as_str());
            bin.push(b as u32);
            lo.push(l);
            hi.push(u);
            count.push(c);
        }
    }
    Ok(RecordBatch::try_new(
        histograms_schema(),
        vec![
            Arc::new(StringArray::from(name)),
            Arc::new(UInt32Array::from(bin)),
            Arc::new(Float64Array::from(lo)),
            Arc::new(Float64Array::from(hi)),
            Arc::new(UInt64Array::from(count)),
        ],
    )?)
}

/// Rebuilds histograms from a table of [`histograms_schema`] (rows of one histogram
/// contiguous, bins 0..=n+1 in order).
pub fn from_record_batch(b: &RecordBatch) -> Result<Vec<Histogram>> {
    let col = |name: &str| {
        b.column_by_name(name)
            .ok_or_else(|| ValidationError::MissingColumn {
                product: HISTOGRAMS_SCHEMA.into(),
                column: name.into(),
            })
    };
    let wrong = |c: &str, a: &dyn Array, t: &str| ValidationError::ColumnType {
        column: c.into(),
        data_type: a.data_type().to_string(),
        expected: format!("expected {t}"),
    };
    let names = col("histogram")?;
    let names = names
        .as_string_opt::<i32>()
        .ok_or_else(|| wrong("histogram", names.as_ref(), "Utf8"))?;
    let bins = col("bin")?;
    let bins = bins
        .as_primitive_opt::<UInt32Type>()
        .ok_or_else(|| wrong("bin", bins.as_ref(), "UInt32"))?;
    let lo = col("low_edge")?;
    let lo = lo
        .as_primitive_opt::<Float64Type>()
        .ok_or_else(|| wrong("low_edge", lo.as_ref(), "Float64"))?;
    let hi = col("high_edge")?;
    let hi = hi
        .as_primitive_opt::<Float64Type>()
        .ok_or_else(|| wrong("high_edge", hi.as_ref(), "Float64"))?;
    let counts = col("count")?;
    let counts = counts
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| wrong("count", counts.as_ref(), "UInt64"))?;
    let mut out = Vec::new();
    let mut start = 0;
    while start < b.num_rows() {
        let name = names.value(start);
        let mut end = start;
        while end < b.num_rows() && names.value(end) == name {
            end += 1;
        }
        let size = end - start;
        let bad = |msg: String| ValidationError::Data(format!("histogram table, '{name}': {msg}"));
        if size < 3 || (0..size).any(|k| bins.value(start + k) as usize != k) {
            return Err(bad("bins must run 0..=n+1 contiguously".into()));
        }
        let mut h = Histogram::new(
            name,
            (size - 2) as u32,
            lo.value(start + 1) as f32,
            hi.value(end - 2) as f32,
        )?;
        h.counts.copy_from_slice(&counts.values()[start..end]);
        out.push(h);
        start = end;
    }
    Ok(out)
}

/// Writes `contents` to `path` through a temporary file in the same directory and a
/// rename, so no reader ever sees a half-written file.
pub fn write_atomically(path: &Path, contents: impl FnOnce(&mut File) -> Result<()>) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| ValidationError::io(dir, e))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp).map_err(|e| ValidationError::io(&tmp, e))?;
        contents(&mut f)?;
        f.sync_all().map_err(|e| ValidationError::io(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| ValidationError::io(path, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes the histograms as Parquet (one row per counter, see [`histograms_schema`]).
pub fn write_parquet(path: &Path, hists: &[Histogram]) -> Result<()> {
    let batch = to_record_batch(hists)?;
    write_atomically(path, |f| {
        let props = WriterProperties::builder()
            .set_created_by(format!("quiver {}", env!("CARGO_PKG_VERSION")))
            .build();
        let mut w = ArrowWriter::try_new(f, batch.schema(), Some(props))?;
        w.write(&batch)?;
        w.close()?;
        Ok(())
    })
}

/// Reads histograms written by [`write_parquet`].
pub fn read_parquet(path: &Path) -> Result<Vec<Histogram>> {
    let f = File::open(path).map_err(|e| ValidationError::io(path, e))?;
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)?.build()?;
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b?);
    }
    if batches.is_empty() {
        return Ok(Vec::new());
    }
    let all = arrow_select::concat::concat_batches(&batches[0].schema(), &batches)?;
    from_record_batch(&all)
}

/// Writes the reference's text format.
pub fn write_text(path: &Path, hists: &[Histogram]) -> Result<()> {
    let text = to_text(hists);
    write_atomically(path, |f| {
        f.write_all(text.as_bytes())
            .map_err(|e| ValidationError::io(path, e))
    })
}

/// How one histogram differs between two sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountDiff {
    pub name: String,
    /// Counters that differ.
    pub counters: usize,
    /// Σ |a − b| over the counters.
    pub abs_sum: u64,
    pub entries_a: u64,
    pub entries_b: u64,
}

/// Differences between two sets of histograms (e.g. ours and the reference's), by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramDiff {
    /// Names in only one of the sets.
    pub only_a: Vec<String>,
    pub only_b: Vec<String>,
    /// Same name, different `n`, `min` or `max`.
    pub binning: Vec<String>,
    /// Same binning, different counts.
    pub counts: Vec<CountDiff>,
    /// Histograms identical in both.
    pub identical: usize,
}

impl HistogramDiff {
    /// No histogram differs and none is missing on either side.
    pub fn is_identical(&self) -> bool {
        self.only_a.is_empty()
            && self.only_b.is_empty()
            && self.binning.is_empty()
            && self.counts.is_empty()
    }
    /// A short text summary, one line per difference.
    pub fn render(&self) -> String {
        let mut s = format!("{} histograms identical\n", self.identical);
        for n in &self.only_a {
            s.push_str(&format!("{n}: only in the first set\n"));
        }
        for n in &self.only_b {
            s.push_str(&format!("{n}: only in the second set\n"));
        }
        for n in &self.binning {
            s.push_str(&format!("{n}: different binning\n"));
        }
        for c in &self.counts {
            s.push_str(&format!(
                "{}: {} counters differ, sum |diff| {}, entries {} vs {}\n",
                c.name, c.counters, c.abs_sum, c.entries_a, c.entries_b
            ));
        }
        s
    }
}

/// Compares two sets of histograms by name (names in byte order in the result).
///
/// ```
/// use quiver_validation::hist::{diff, Histogram};
/// let mut a = Histogram::new("x", 2, 0.0, 2.0).unwrap();
/// let b = a.clone();
/// a.fill(&[0.5]).unwrap();
/// let d = diff(&[a], &[b]);
/// assert_eq!((d.counts[0].counters, d.counts[0].abs_sum), (1, 1));
/// assert!(!d.is_identical());
/// ```
pub fn diff(a: &[Histogram], b: &[Histogram]) -> HistogramDiff {
    use std::collections::BTreeMap;
    let ma: BTreeMap<&[u8], &Histogram> = a.iter().map(|h| (h.name.as_bytes(), h)).collect();
    let mb: BTreeMap<&[u8], &Histogram> = b.iter().map(|h| (h.name.as_bytes(), h)).collect();
    let mut d = HistogramDiff::default();
    for (name, x) in &ma {
        let Some(y) = mb.get(name) else {
            d.only_a.push(x.name.clone());
            continue;
        };
        if (x.n, x.min.to_bits(), x.max.to_bits()) != (y.n, y.min.to_bits(), y.max.to_bits()) {
            d.binning.push(x.name.clone());
            continue;
        }
        let (mut counters, mut abs_sum) = (0, 0);
        for (p, q) in x.counts.iter().zip(&y.counts) {
            if p != q {
                counters += 1;
                abs_sum += p.abs_diff(*q);
            }
        }
        if counters == 0 {
            d.identical += 1;
        } else {
            d.counts.push(CountDiff {
                name: x.name.clone(),
                counters,
                abs_sum,
                entries_a: x.entries(),
                entries_b: y.entries(),
            });
        }
    }
    d.only_b = mb
        .iter()
        .filter(|(n, _)| !ma.contains_key(*n))
        .map(|(_, h)| h.name.clone())
        .collect();
    d
}

#[cfg(test)]
mod tests;
