//! Products: one Arrow `RecordBatch` for all events of an event batch plus per-event offsets.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use arrow_array::{Array, RecordBatch, UInt32Array};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{Field, Schema, SchemaRef};

use crate::error::{Error, Result};
use crate::residency::{DeviceData, Placement};

/// Schema metadata key holding the product's schema (= product type) name.
pub const SCHEMA_NAME_KEY: &str = "quiver.schema";
/// Schema metadata key holding the schema version.
pub const SCHEMA_VERSION_KEY: &str = "quiver.schema_version";
/// Name of the event-number column that outputs and Python views add.
pub const EVENT_COLUMN: &str = "event";

/// A product's identity in a job: its type (the schema name) and the label of the step
/// that published it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProductKey {
    pub type_name: String,
    pub label: String,
}

impl ProductKey {
    /// A key.
    pub fn new(type_name: impl Into<String>, label: impl Into<String>) -> Self {
        ProductKey {
            type_name: type_name.into(),
            label: label.into(),
        }
    }
}

impl fmt::Display for ProductKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.label, self.type_name)
    }
}

/// A named, versioned product schema.
///
/// ```
/// use arrow_schema::{DataType, Field};
/// use quiver_columnar::product::{product_schema, schema_name};
/// let s = product_schema("floats", 1, vec![Field::new("value", DataType::Float32, false)]);
/// assert_eq!(schema_name(&s), Some("floats"));
/// ```
pub fn product_schema(name: &str, version: u32, fields: Vec<Field>) -> SchemaRef {
    let metadata = HashMap::from([
        (SCHEMA_NAME_KEY.to_string(), name.to_string()),
        (SCHEMA_VERSION_KEY.to_string(), version.to_string()),
    ]);
    Arc::new(Schema::new_with_metadata(fields, metadata))
}

/// The schema name stored in a schema's metadata.
pub fn schema_name(schema: &Schema) -> Option<&str> {
    schema.metadata().get(SCHEMA_NAME_KEY).map(String::as_str)
}

/// An immutable product. Cloning shares the buffers (reference counted).
///
/// A product holds its rows on the host, on a device ([`DeviceData`]), or both. A product
/// made on a device ([`Product::on_device`]) gets its host view lazily: the first call of
/// [`Product::host`] downloads once; every later host access shares that view. Host products
/// ([`Product::new`]) behave exactly as before: [`Product::batch`] is a plain field read.
#[derive(Clone, Debug)]
pub struct Product {
    /// The host view; an `Err` holds a failed download's message (the failure is kept so
    /// that every host consumer sees the same error and no second download is tried).
    host: OnceLock<std::result::Result<RecordBatch, String>>,
    schema: SchemaRef,
    offsets: OffsetBuffer<i32>,
    device: Option<Arc<dyn DeviceData>>,
}

impl Product {
    /// A product from a batch whose schema carries a name and version
    /// ([`product_schema`]) and per-event offsets (`n_events + 1` entries, the last equal to
    /// the row count).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use arrow_array::{Float32Array, RecordBatch};
    /// use arrow_buffer::OffsetBuffer;
    /// use arrow_schema::{DataType, Field};
    /// use quiver_columnar::product::{product_schema, Product};
    /// let schema = product_schema("floats", 1, vec![Field::new("value", DataType::Float32, false)]);
    /// let batch = RecordBatch::try_new(schema, vec![Arc::new(Float32Array::from(vec![1.0, 2.0, 3.0]))]).unwrap();
    /// let p = Product::new(batch, OffsetBuffer::from_lengths([2, 0, 1])).unwrap();
    /// assert_eq!(p.n_events(), 3);
    /// assert_eq!(p.event_rows(2), 2..3);
    /// ```
    pub fn new(batch: RecordBatch, offsets: OffsetBuffer<i32>) -> Result<Self> {
        let name = schema_name(batch.schema_ref()).ok_or_else(|| {
            Error::data(format!(
                "product schema has no '{SCHEMA_NAME_KEY}' metadata"
            ))
        })?;
        let rows = offsets.last().copied().unwrap_or(0) as usize;
        if rows != batch.num_rows() || offsets[0] != 0 {
            return Err(Error::data(format!(
                "product '{name}': offsets span rows {}..{rows} but the batch has {} rows",
                offsets[0],
                batch.num_rows()
            )));
        }
        let schema = batch.schema();
        Ok(Product {
            host: OnceLock::from(Ok(batch)),
            schema,
            offsets,
            device: None,
        })
    }

    /// A product whose rows exist only on a device. `schema` is the product schema (named,
    /// versioned) that the host view will have; `offsets` are the per-event row offsets,
    /// which always live on the host. The host view is downloaded on first use.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use arrow_array::{Float32Array, RecordBatch};
    /// # use arrow_schema::{DataType, Field};
    /// # use arrow_buffer::OffsetBuffer;
    /// # use quiver_columnar::product::{product_schema, Product};
    /// # use quiver_columnar::residency::{DeviceData, Placement};
    /// #[derive(Debug)]
    /// struct Fake(RecordBatch);
    /// impl DeviceData for Fake {
    ///     fn device(&self) -> &str { "fake:0" }
    ///     fn nbytes(&self) -> usize { 12 }
    ///     fn download(&self) -> quiver_columnar::Result<RecordBatch> { Ok(self.0.clone()) }
    ///     fn as_any(&self) -> &dyn std::any::Any { self }
    /// }
    /// let schema = product_schema("floats", 1, vec![Field::new("value", DataType::Float32, false)]);
    /// let rows = RecordBatch::try_new(schema.clone(), vec![Arc::new(Float32Array::from(vec![1.0, 2.0, 3.0]))]).unwrap();
    /// let p = Product::on_device(schema, OffsetBuffer::from_lengths([2, 1]), 3, Arc::new(Fake(rows))).unwrap();
    /// assert_eq!(p.placement(), Placement::Device);
    /// assert_eq!(p.host().unwrap().num_rows(), 3);
    /// assert_eq!(p.placement(), Placement::Both);
    /// ```
    pub fn on_device(
        schema: SchemaRef,
        offsets: OffsetBuffer<i32>,
        rows: usize,
        data: Arc<dyn DeviceData>,
    ) -> Result<Self> {
        let name = schema_name(&schema).ok_or_else(|| {
            Error::data(format!(
                "device product schema has no '{SCHEMA_NAME_KEY}' metadata"
            ))
        })?;
        let last = offsets.last().copied().unwrap_or(0) as usize;
        if last != rows || offsets[0] != 0 {
            return Err(Error::data(format!(
                "device product '{name}' on {}: offsets span rows {}..{last} but the device data has {rows} rows",
                data.device(),
                offsets[0]
            )));
        }
        if !data.holds_every_column() {
            return Err(Error::data(format!(
                "device product '{name}' on {}: its device data holds only some columns (a mirror of a host product)",
                data.device()
            )));
        }
        Ok(Product {
            host: OnceLock::new(),
            schema,
            offsets,
            device: Some(data),
        })
    }

    /// The same host product with a device copy of its rows attached: a GPU step that
    /// downloaded its result keeps the device columns, so that the next GPU step of the batch
    /// reads them with no upload ([`crate::EventBatch::on_device`]). The device copy must
    /// hold the same rows as the host batch.
    pub fn with_device(mut self, data: Arc<dyn DeviceData>) -> Self {
        self.device = Some(data);
        self
    }

    /// Where the product's rows are now.
    pub fn placement(&self) -> Placement {
        match (
            matches!(self.host.get(), Some(Ok(_))),
            self.device.is_some(),
        ) {
            (_, false) => Placement::Host,
            (false, true) => Placement::Device,
            (true, true) => Placement::Both,
        }
    }

    /// The device copy, if the product has one. A GPU step takes it with no transfer.
    pub fn device_data(&self) -> Option<&Arc<dyn DeviceData>> {
        self.device.as_ref()
    }

    /// The host view, downloading it first if the product lives only on a device. Returns
    /// the bytes downloaded and the time taken when this call made the download (each
    /// product is downloaded at most once; concurrent callers wait for the one download).
    pub fn host_with_transfer(
        &self,
    ) -> Result<(&RecordBatch, Option<(usize, std::time::Duration)>)> {
        let mut made = None;
        let got = self.host.get_or_init(|| {
            let Some(data) = self.device.as_ref() else {
                return Err(format!(
                    "product '{}' has neither host nor device data",
                    self.type_name()
                ));
            };
            let t0 = Instant::now();
            let b = data
                .download()
                .and_then(|b| self.check_download(b, data.device()))
                .map_err(|e| {
                    format!(
                        "downloading product '{}' from {}: {e}",
                        self.type_name(),
                        data.device()
                    )
                })?;
            made = Some((data.nbytes(), t0.elapsed()));
            Ok(b)
        });
        match got {
            Ok(b) => Ok((b, made)),
            Err(msg) => Err(Error::data(msg.clone())),
        }
    }

    fn check_download(&self, b: RecordBatch, device: &str) -> Result<RecordBatch> {
        let rows = self.offsets.last().copied().unwrap_or(0) as usize;
        if b.num_rows() != rows || b.schema_ref().fields() != self.schema.fields() {
            return Err(Error::data(format!(
                "product '{}' downloaded from {device} has {} rows and schema {:?}, expected {rows} rows and {:?}",
                self.type_name(),
                b.num_rows(),
                b.schema_ref().fields().iter().map(|f| f.name()).collect::<Vec<_>>(),
                self.schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>()
            )));
        }
        // The host view carries the product schema (name and version metadata).
        Ok(RecordBatch::try_new(
            self.schema.clone(),
            b.columns().to_vec(),
        )?)
    }

    /// The host view, downloading it first if needed (see [`Product::host_with_transfer`]).
    pub fn host(&self) -> Result<&RecordBatch> {
        Ok(self.host_with_transfer()?.0)
    }

    /// A product from a batch and the row count of each event.
    pub fn from_lengths(
        batch: RecordBatch,
        lengths: impl IntoIterator<Item = usize>,
    ) -> Result<Self> {
        Self::new(batch, offsets_from_lengths(lengths)?)
    }

    /// The product type (schema name).
    pub fn type_name(&self) -> &str {
        schema_name(&self.schema).unwrap_or_default()
    }
    /// The product schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }
    /// The schema version.
    pub fn schema_version(&self) -> u32 {
        self.schema
            .metadata()
            .get(SCHEMA_VERSION_KEY)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
    /// All rows of all events, on the host.
    ///
    /// Host consumers get products through [`crate::EventBatch::get`], which makes the host
    /// view of a device product first; so this is a plain read. Calling it on a device-only
    /// product whose host view was never made is a bug in the calling step (a GPU step should
    /// use [`Product::device_data`] or [`Product::host`]) and panics naming the product.
    pub fn batch(&self) -> &RecordBatch {
        match self.host.get() {
            Some(Ok(b)) => b,
            Some(Err(msg)) => panic!("{msg} (use EventBatch::get or Product::host, which return this as an error)"),
            None => panic!(
                "product '{}' lives only on {} and its host view was not made: use EventBatch::get or Product::host",
                self.type_name(),
                self.device.as_ref().map(|d| d.device()).unwrap_or("a device")
            ),
        }
    }
    /// Per-event row offsets.
    pub fn offsets(&self) -> &OffsetBuffer<i32> {
        &self.offsets
    }
    /// Rows of all events (known from the offsets, wherever the rows live).
    pub fn num_rows(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0) as usize
    }
    /// Events covered.
    pub fn n_events(&self) -> usize {
        self.offsets.len() - 1
    }
    /// Rows of event `i` (0-based within the batch).
    pub fn event_rows(&self, i: usize) -> Range<usize> {
        self.offsets[i] as usize..self.offsets[i + 1] as usize
    }
    /// The rows of event `i` as a zero-copy slice.
    pub fn event(&self, i: usize) -> RecordBatch {
        let r = self.event_rows(i);
        self.batch().slice(r.start, r.len())
    }
    /// The event (index within the batch) that row `row` belongs to.
    pub fn event_of_row(&self, row: usize) -> usize {
        self.offsets.partition_point(|&o| o as usize <= row) - 1
    }
    /// Bytes of the host buffers the product references (offsets only, while its rows
    /// live only on a device).
    pub fn nbytes(&self) -> usize {
        self.host
            .get()
            .and_then(|h| h.as_ref().ok())
            .map_or(0, |b| {
                b.columns()
                    .iter()
                    .map(|c| c.get_buffer_memory_size())
                    .sum::<usize>()
            })
            + self.offsets.inner().inner().len()
    }
    /// Device bytes the product holds (0 for a host product).
    pub fn device_nbytes(&self) -> usize {
        self.device.as_ref().map_or(0, |d| d.nbytes())
    }
    /// An `event` column (absolute event numbers from `first_event`), one entry per row.
    pub fn event_column(&self, first_event: u64) -> UInt32Array {
        let mut v =
            crate::pool::global().vec::<u32>(self.offsets.last().copied().unwrap_or(0) as usize);
        for (i, w) in self.offsets.windows(2).enumerate() {
            let ev = (first_event + i as u64) as u32;
            for _ in w[0]..w[1] {
                v.push(ev);
            }
        }
        UInt32Array::new(v.into_scalar_buffer(), None)
    }
    /// The batch with the `event` column first: how outputs and Python see a product.
    /// Shares every product column; only the event column is new.
    pub fn with_event_column(&self, first_event: u64) -> Result<RecordBatch> {
        let batch = self.host()?;
        let schema = batch.schema();
        let mut fields: Vec<Arc<Field>> = vec![Arc::new(Field::new(
            EVENT_COLUMN,
            arrow_schema::DataType::UInt32,
            false,
        ))];
        fields.extend(schema.fields().iter().cloned());
        let mut columns: Vec<Arc<dyn Array>> = vec![Arc::new(self.event_column(first_event))];
        columns.extend(batch.columns().iter().cloned());
        let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

/// Offsets from per-event lengths, in pooled memory; an error when the rows exceed what
/// Arrow's 32-bit offsets address (2³¹ − 1), instead of wrapping.
///
/// ```
/// use quiver_columnar::product::offsets_from_lengths;
/// assert_eq!(offsets_from_lengths([3, 0, 5]).unwrap().as_ref(), &[0, 3, 3, 8]);
/// assert!(offsets_from_lengths([i32::MAX as usize, 1]).is_err());
/// ```
pub fn offsets_from_lengths(lengths: impl IntoIterator<Item = usize>) -> Result<OffsetBuffer<i32>> {
    let it = lengths.into_iter();
    let mut v = crate::pool::global().vec::<i32>(it.size_hint().0 + 1);
    let mut acc = 0i32;
    v.push(0);
    for l in it {
        acc = i32::try_from(l).ok().and_then(|l| acc.checked_add(l)).ok_or_else(|| {
            Error::data(format!("a product of more than {} rows in one batch (32-bit Arrow offsets): use a smaller batch size", i32::MAX))
        })?;
        v.push(acc);
    }
    // SAFETY: starts at 0 and never decreases: every step adds a length checked to be ≥ 0
    // and to keep the sum within i32.
    Ok(unsafe { OffsetBuffer::new_unchecked(ScalarBuffer::from(v.into_buffer())) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Float32Array;
    use arrow_schema::DataType;

    fn floats(values: Vec<f32>, lengths: &[usize]) -> Product {
        let schema = product_schema(
            "floats",
            1,
            vec![Field::new("value", DataType::Float32, false)],
        );
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Float32Array::from(values))]).unwrap();
        Product::from_lengths(batch, lengths.iter().copied()).unwrap()
    }

    #[test]
    fn event_lookup() {
        let p = floats(vec![1.0, 2.0, 3.0, 4.0], &[2, 0, 2]);
        assert_eq!(p.event_of_row(0), 0);
        assert_eq!(p.event_of_row(1), 0);
        assert_eq!(p.event_of_row(2), 2);
        assert_eq!(p.event(2).num_rows(), 2);
        let ev = p.event_column(10);
        assert_eq!(ev.values().as_ref(), &[10, 10, 12, 12]);
    }

    #[test]
    fn with_event_column_shares_buffers() {
        let p = floats(vec![1.0, 2.0], &[1, 1]);
        let b = p.with_event_column(0).unwrap();
        assert_eq!(b.schema().field(0).name(), "event");
        let before = p.batch().column(0).to_data().buffers()[0].as_ptr();
        let after = b.column(1).to_data().buffers()[0].as_ptr();
        assert_eq!(before, after);
    }

    #[test]
    fn rejects_unnamed_schema_and_bad_offsets() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Float32, false)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Float32Array::from(vec![1.0]))]).unwrap();
        let e = Product::from_lengths(batch, [1]).unwrap_err().to_string();
        assert!(e.contains("quiver.schema"), "{e}");
        let p = floats(vec![1.0], &[1]);
        let e = Product::from_lengths(p.batch().clone(), [2])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("offsets span rows 0..2 but the batch has 1 rows"),
            "{e}"
        );
    }

    #[test]
    fn offsets_from_lengths_matches_arrow() {
        let a = offsets_from_lengths([3, 0, 5]).unwrap();
        let b = OffsetBuffer::<i32>::from_lengths([3, 0, 5]);
        assert_eq!(a.as_ref(), b.as_ref());
    }
}
