//! The device side of product residency (`quiver_columnar::residency`): product columns held
//! in pooled device buffers ([`CudaColumns`]) and the CUDA device as a place products can be
//! uploaded to ([`CudaDevice`]).
//!
//! A GPU step publishes its product with its device columns attached, so that the next GPU
//! step of the batch reads them with no upload ([`columns_on_device`]); a host product that
//! several GPU steps read is uploaded once per batch (`EventBatch::on_device`). Device
//! buffers return to the device pool when the last product holding them is dropped, at the
//! end of the batch. Only plain fixed-width columns without nulls live on the device (every
//! column the GPU steps read or write; a boolean column as one byte per row, 0 or 1, as the
//! kernels read flags); other products stay on the host.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, BooleanArray, PrimitiveArray, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use cudarc::driver::CudaStream;
use quiver_columnar::residency::{Device, DeviceData};
use quiver_columnar::{Error, EventBatch, ProductKey, Result};

use crate::device::{upload, DeviceBuf, Gpu};

/// The name the device goes by in products and the run summary.
pub const DEVICE_NAME: &str = "cuda:0";

/// One product's columns in device memory, in schema order, `rows` elements each.
pub struct CudaColumns {
    gpu: &'static Gpu,
    schema: SchemaRef,
    rows: usize,
    columns: Vec<Arc<DeviceBuf>>,
    /// Host copies of a few small columns that the next GPU steps' host preparation reads
    /// (the hits' detIndex), downloaded by the producing step: they spare the download of
    /// the whole product.
    host: Vec<(String, ArrayRef)>,
}

impl fmt::Debug for CudaColumns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaColumns")
            .field("rows", &self.rows)
            .field("columns", &self.columns.len())
            .finish()
    }
}

/// The width of a column type the device holds, or `None`.
fn device_width(t: &DataType) -> Option<usize> {
    Some(match t {
        DataType::UInt8 | DataType::Int8 | DataType::Boolean => 1,
        DataType::UInt16 | DataType::Int16 => 2,
        DataType::UInt32 | DataType::Int32 | DataType::Float32 => 4,
        DataType::UInt64 | DataType::Int64 | DataType::Float64 => 8,
        _ => return None,
    })
}

impl CudaColumns {
    /// Columns already on the device (kernel outputs or another product's columns), in the
    /// order of `schema`'s fields; every buffer holds at least `rows` elements of its field's
    /// type.
    pub fn new(
        gpu: &'static Gpu,
        schema: SchemaRef,
        rows: usize,
        columns: Vec<Arc<DeviceBuf>>,
    ) -> Result<Self> {
        if columns.len() != schema.fields().len() {
            return Err(Error::data(format!(
                "device product: {} columns for a schema of {} fields",
                columns.len(),
                schema.fields().len()
            )));
        }
        for (f, c) in schema.fields().iter().zip(&columns) {
            let w = device_width(f.data_type()).ok_or_else(|| {
                Error::data(format!(
                    "column '{}' of type {} cannot live on the device",
                    f.name(),
                    f.data_type()
                ))
            })?;
            if c.len_bytes() < rows * w {
                return Err(Error::data(format!(
                    "device column '{}': {} bytes for {rows} rows",
                    f.name(),
                    c.len_bytes()
                )));
            }
        }
        Ok(CudaColumns {
            gpu,
            schema,
            rows,
            columns,
            host: Vec::new(),
        })
    }

    /// Keeps a host copy of column `name` (its values, as downloaded by the producing step)
    /// for [`CudaColumns::host_column`]; an error if the product has no such column or the
    /// copy's type or length differs from it.
    pub fn with_host_column(mut self, name: &str, values: ArrayRef) -> Result<Self> {
        let f = self
            .schema
            .field_with_name(name)
            .map_err(|_| Error::data(format!("device product has no column '{name}'")))?;
        if values.data_type() != f.data_type()
            || values.len() != self.rows
            || values.null_count() > 0
        {
            return Err(Error::data(format!(
                "host copy of column '{name}': {} rows of {} for {} rows of {}",
                values.len(),
                values.data_type(),
                self.rows,
                f.data_type()
            )));
        }
        self.host.push((name.to_string(), values));
        Ok(self)
    }

    /// The host copy of column `name`, if the producing step kept one.
    pub fn host_column(&self, name: &str) -> Option<&ArrayRef> {
        self.host.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// Rows of every column.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The device buffer of column `name`, to pass to a kernel.
    pub fn column(&self, name: &str) -> Result<&Arc<DeviceBuf>> {
        let i = self
            .schema
            .index_of(name)
            .map_err(|_| Error::data(format!("device product has no column '{name}'")))?;
        Ok(&self.columns[i])
    }
}

/// Device copies of some of a host product's column data, kept by the GPU step that made the
/// product for a later GPU step of the batch that reads them (a mirror: the product stays a
/// host product, [`quiver_columnar::EventBatch::attach_device`]). Parts are named by what
/// they hold (`"hits.values"`, `"state"`) and carry their length; the reader asks for a part
/// with the length it expects and uploads the host column when the part is absent or differs.
/// Never downloaded (`holds_every_column` is false): any other device consumer gets an
/// upload of the host product.
pub struct CudaMirror {
    parts: Vec<(&'static str, Arc<DeviceBuf>, usize)>,
}

impl fmt::Debug for CudaMirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.parts.iter().map(|(n, _, b)| (n, b)))
            .finish()
    }
}

impl CudaMirror {
    pub fn new() -> Self {
        CudaMirror { parts: Vec::new() }
    }
    /// Adds part `name`: `n` elements of `T` at the start of `buf`; an error when the buffer
    /// is smaller.
    pub fn with<T>(mut self, name: &'static str, buf: Arc<DeviceBuf>, n: usize) -> Result<Self> {
        let bytes = n * std::mem::size_of::<T>();
        if buf.len_bytes() < bytes {
            return Err(Error::data(format!(
                "device mirror part '{name}': {} bytes for {n} elements of {bytes} bytes",
                buf.len_bytes()
            )));
        }
        self.parts.push((name, buf, bytes));
        Ok(self)
    }
    /// Part `name` when it holds exactly `n` elements of `T`.
    pub fn part<T>(&self, name: &str, n: usize) -> Option<&Arc<DeviceBuf>> {
        self.parts
            .iter()
            .find(|(p, _, b)| *p == name && *b == n * std::mem::size_of::<T>())
            .map(|(_, buf, _)| buf)
    }
}

impl Default for CudaMirror {
    fn default() -> Self {
        Self::new()
    }
}

impl DeviceData for CudaMirror {
    fn device(&self) -> &str {
        DEVICE_NAME
    }
    fn nbytes(&self) -> usize {
        self.parts.iter().map(|(_, _, b)| b).sum()
    }
    fn download(&self) -> Result<RecordBatch> {
        Err(Error::data("a device mirror holds only some columns of a host product; the host product is the product"))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn holds_every_column(&self) -> bool {
        false
    }
}

/// The CUDA mirror of a product, if the GPU step that made it kept one.
pub fn mirror_of(p: &quiver_columnar::Product) -> Option<&CudaMirror> {
    p.device_data()
        .and_then(|d| d.as_any().downcast_ref::<CudaMirror>())
}

/// A downloaded column's bytes as an array of `T` (pooled blocks are 64-byte aligned).
fn typed<T: ArrowPrimitiveType>(bytes: quiver_columnar::PoolVec<u8>, rows: usize) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::new(
        arrow_buffer::ScalarBuffer::new(bytes.into_buffer(), 0, rows),
        None,
    ))
}

impl DeviceData for CudaColumns {
    fn device(&self) -> &str {
        DEVICE_NAME
    }
    fn nbytes(&self) -> usize {
        self.schema
            .fields()
            .iter()
            .map(|f| device_width(f.data_type()).unwrap_or(0) * self.rows)
            .sum()
    }
    /// Every column through page-locked staging on the worker's stream, with one wait for
    /// the stream (pageable copies serialise on the driver's staging between workers).
    fn download(&self) -> Result<RecordBatch> {
        let mut run = crate::steps::Run::start(self.gpu)?;
        let n = self.rows;
        let mut queued = Vec::with_capacity(self.columns.len());
        for (f, b) in self.schema.fields().iter().zip(&self.columns) {
            let w = device_width(f.data_type()).ok_or_else(|| {
                Error::data(format!(
                    "column '{}' of type {} cannot live on the device",
                    f.name(),
                    f.data_type()
                ))
            })?;
            queued.push(run.queue::<u8>(b, n * w)?);
        }
        let mut cols = Vec::with_capacity(queued.len());
        for (q, f) in queued.into_iter().zip(self.schema.fields()) {
            let v = run.take(q)?;
            cols.push(match f.data_type() {
                DataType::UInt8 => typed::<UInt8Type>(v, n),
                DataType::Int8 => typed::<Int8Type>(v, n),
                DataType::UInt16 => typed::<UInt16Type>(v, n),
                DataType::Int16 => typed::<Int16Type>(v, n),
                DataType::UInt32 => typed::<UInt32Type>(v, n),
                DataType::Int32 => typed::<Int32Type>(v, n),
                DataType::Float32 => typed::<Float32Type>(v, n),
                DataType::UInt64 => typed::<UInt64Type>(v, n),
                DataType::Int64 => typed::<Int64Type>(v, n),
                DataType::Float64 => typed::<Float64Type>(v, n),
                // Flags come down as bytes, 0 or 1, and become Arrow booleans.
                DataType::Boolean => {
                    Arc::new(BooleanArray::from(flags_from_bytes(&v).map_err(|m| {
                        Error::data(format!("device column '{}': {m}", f.name()))
                    })?))
                }
                t => {
                    return Err(Error::data(format!(
                        "column '{}' of type {t} cannot live on the device",
                        f.name()
                    )))
                }
            });
        }
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Flags as the kernels write them (one byte each, 0 or 1) as booleans; an error naming the
/// first other byte.
///
/// ```
/// use quiver_gpu::resident::flags_from_bytes;
/// assert_eq!(flags_from_bytes(&[1, 0, 1]).unwrap(), vec![true, false, true]);
/// assert_eq!(flags_from_bytes(&[0, 7]).unwrap_err().to_string(), "flag 7 is not 0 or 1");
/// ```
pub fn flags_from_bytes(bytes: &[u8]) -> std::result::Result<Vec<bool>, crate::GpuError> {
    if let Some(b) = bytes.iter().find(|&&b| b > 1) {
        return Err(crate::GpuError::Layout(format!("flag {b} is not 0 or 1")));
    }
    Ok(bytes.iter().map(|&b| b == 1).collect())
}

fn up<T: ArrowPrimitiveType>(
    gpu: &'static Gpu,
    stream: &Arc<CudaStream>,
    a: &ArrayRef,
    bytes: &mut u64,
) -> Result<Arc<DeviceBuf>>
where
    T::Native: cudarc::driver::DeviceRepr,
{
    let p = a
        .as_any()
        .downcast_ref::<PrimitiveArray<T>>()
        .ok_or_else(|| Error::data("column type differs from its field"))?;
    Ok(Arc::new(upload(gpu, stream, p.values(), bytes)?))
}

/// The CUDA device as a place host products are uploaded to.
pub struct CudaDevice(pub &'static Gpu);

impl Device for CudaDevice {
    fn name(&self) -> &str {
        DEVICE_NAME
    }
    fn upload(&self, batch: &RecordBatch) -> Result<Arc<dyn DeviceData>> {
        let gpu = self.0;
        gpu.ctx
            .bind_to_thread()
            .map_err(|e| Error::data(format!("gpu: {e}")))?;
        let stream = gpu.stream()?;
        let mut bytes = 0u64;
        let mut cols = Vec::with_capacity(batch.num_columns());
        for (f, a) in batch.schema().fields().iter().zip(batch.columns()) {
            if a.null_count() > 0 {
                return Err(Error::data(format!(
                    "column '{}' has nulls and cannot live on the device",
                    f.name()
                )));
            }
            cols.push(match f.data_type() {
                DataType::UInt8 => up::<UInt8Type>(gpu, &stream, a, &mut bytes)?,
                DataType::Int8 => up::<Int8Type>(gpu, &stream, a, &mut bytes)?,
                DataType::UInt16 => up::<UInt16Type>(gpu, &stream, a, &mut bytes)?,
                DataType::Int16 => up::<Int16Type>(gpu, &stream, a, &mut bytes)?,
                DataType::UInt32 => up::<UInt32Type>(gpu, &stream, a, &mut bytes)?,
                DataType::Int32 => up::<Int32Type>(gpu, &stream, a, &mut bytes)?,
                DataType::Float32 => up::<Float32Type>(gpu, &stream, a, &mut bytes)?,
                DataType::UInt64 => up::<UInt64Type>(gpu, &stream, a, &mut bytes)?,
                DataType::Int64 => up::<Int64Type>(gpu, &stream, a, &mut bytes)?,
                DataType::Float64 => up::<Float64Type>(gpu, &stream, a, &mut bytes)?,
                DataType::Boolean => {
                    let b = a
                        .as_any()
                        .downcast_ref::<BooleanArray>()
                        .ok_or_else(|| Error::data("column type differs from its field"))?;
                    let v: Vec<u8> = b.values().iter().map(u8::from).collect();
                    Arc::new(upload(gpu, &stream, &v, &mut bytes)?)
                }
                t => {
                    return Err(Error::data(format!(
                        "column '{}' of type {t} cannot live on the device",
                        f.name()
                    )))
                }
            });
        }
        // The upload is ordered on the worker's stream before any kernel that reads it.
        Ok(Arc::new(CudaColumns::new(
            gpu,
            batch.schema(),
            batch.num_rows(),
            cols,
        )?))
    }
}

/// The device columns of product `key` for a GPU step: its own when an earlier GPU step of
/// the batch made it, else an upload shared by every GPU step of the batch.
pub fn columns_on_device(
    batch: &EventBatch,
    key: &ProductKey,
    gpu: &'static Gpu,
) -> Result<Arc<dyn DeviceData>> {
    let d = batch.on_device(key, &CudaDevice(gpu))?;
    if d.as_any().downcast_ref::<CudaColumns>().is_none() {
        return Err(Error::data(format!(
            "product {key}: its device copy is not CUDA columns"
        )));
    }
    Ok(d)
}

/// The CUDA columns inside a device copy taken by [`columns_on_device`].
pub fn cuda(d: &Arc<dyn DeviceData>) -> &CudaColumns {
    d.as_any()
        .downcast_ref::<CudaColumns>()
        .expect("checked by columns_on_device")
}
