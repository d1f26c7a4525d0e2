//! A reader of Arrow IPC files that never panics on any byte content.
//!
//! arrow-rs validates array contents (`ArrayData::validate_full`) but trusts the IPC metadata
//! in places: a schema with an unexpected type, a buffer that reaches past the message body or
//! a validity bitmap shorter than its column panic inside `arrow-ipc`/`arrow-data`. This module
//! checks the whole structure first — the footer, the schema (only the flat column types the
//! dataset uses), every record-batch block, message, field node and buffer — and hands arrow
//! only what it decodes without panicking; then it validates every decoded column in full.

use crate::error::DatasetError;
use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::{MessageHeader, MetadataVersion};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

const MAGIC: &[u8; 6] = b"ARROW1";
const CONTINUATION: [u8; 4] = [0xFF; 4];

/// The flat column types a dataset file may hold.
fn data_type(path: &Path, f: &arrow_ipc::Field<'_>) -> Result<DataType, DatasetError> {
    let name = f.name().unwrap_or("?");
    let unsupported = |what: &str| {
        DatasetError::damaged(
            path,
            format!("column `{name}` has {what}, which no dataset file holds"),
        )
    };
    if f.dictionary().is_some() {
        return Err(unsupported("a dictionary encoding"));
    }
    if f.children().is_some_and(|c| !c.is_empty()) {
        return Err(unsupported("child fields"));
    }
    use arrow_ipc::Type;
    Ok(match f.type_type() {
        Type::Bool => DataType::Boolean,
        Type::Binary => DataType::Binary,
        Type::Utf8 => DataType::Utf8,
        Type::Int => {
            let i = f
                .type_as_int()
                .ok_or_else(|| unsupported("an integer type without its table"))?;
            match (i.bitWidth(), i.is_signed()) {
                (8, true) => DataType::Int8,
                (16, true) => DataType::Int16,
                (32, true) => DataType::Int32,
                (64, true) => DataType::Int64,
                (8, false) => DataType::UInt8,
                (16, false) => DataType::UInt16,
                (32, false) => DataType::UInt32,
                (64, false) => DataType::UInt64,
                (w, _) => return Err(unsupported(&format!("an integer width of {w} bits"))),
            }
        }
        Type::FloatingPoint => {
            let p = f
                .type_as_floating_point()
                .ok_or_else(|| unsupported("a float type without its table"))?;
            match p.precision() {
                arrow_ipc::Precision::SINGLE => DataType::Float32,
                arrow_ipc::Precision::DOUBLE => DataType::Float64,
                p => return Err(unsupported(&format!("float precision {p:?}"))),
            }
        }
        t => return Err(unsupported(&format!("type {t:?}"))),
    })
}

/// The schema of the footer, built without `arrow_ipc::convert` (which panics on malformed types).
fn schema(path: &Path, s: arrow_ipc::Schema<'_>) -> Result<Schema, DatasetError> {
    if s.endianness() != arrow_ipc::Endianness::Little {
        return Err(DatasetError::damaged(path, "big-endian schema"));
    }
    let fb_fields = s
        .fields()
        .ok_or_else(|| DatasetError::damaged(path, "schema without fields"))?;
    let mut fields = Vec::with_capacity(fb_fields.len());
    for f in fb_fields.iter() {
        let name = f
            .name()
            .ok_or_else(|| DatasetError::damaged(path, "column without a name"))?;
        fields.push(Field::new(name, data_type(path, &f)?, f.nullable()));
    }
    let mut meta = HashMap::new();
    for kv in s.custom_metadata().into_iter().flatten() {
        if let (Some(k), Some(v)) = (kv.key(), kv.value()) {
            meta.insert(k.to_string(), v.to_string());
        }
    }
    Ok(Schema::new_with_metadata(fields, meta))
}

/// Number of IPC buffers of a column of type `dt` (validity first).
fn buffer_count(dt: &DataType) -> usize {
    match dt {
        DataType::Binary | DataType::Utf8 => 3,
        _ => 2,
    }
}

/// Checks one record-batch message against the schema so that arrow's decoder can neither
/// slice past the body nor build a bitmap or value buffer shorter than its column.
fn check_message(
    path: &Path,
    at: i64,
    meta: &[u8],
    body_len: u64,
    schema: &Schema,
    version: MetadataVersion,
) -> Result<(), DatasetError> {
    let bad =
        |what: String| DatasetError::damaged(path, format!("record batch at byte {at}: {what}"));
    // arrow reads the message flatbuffer the same way: after the continuation marker and the
    // length (8 bytes), or after a bare length (4 bytes, pre-1.0 files)
    let fb = if meta[..4] == CONTINUATION {
        &meta[8..]
    } else {
        &meta[4..]
    };
    let rb = record_batch_header(fb, version, &bad)?;
    let rows = rb.length();
    // every row needs at least one bit of the body; anything longer is a damaged count
    if rows < 0 || rows as u64 > body_len.saturating_mul(8) {
        return Err(bad(format!(
            "row count {rows} does not fit a body of {body_len} bytes"
        )));
    }
    let nodes = rb.nodes().ok_or_else(|| bad("no field nodes".into()))?;
    let buffers = rb.buffers().ok_or_else(|| bad("no buffers".into()))?;
    let n_buffers: usize = schema
        .fields()
        .iter()
        .map(|f| buffer_count(f.data_type()))
        .sum();
    if nodes.len() != schema.fields().len() || buffers.len() != n_buffers {
        return Err(bad(format!(
            "{} field nodes and {} buffers, the schema needs {} and {n_buffers}",
            nodes.len(),
            buffers.len(),
            schema.fields().len()
        )));
    }
    let buffers: Vec<(i64, i64)> = buffers.iter().map(|b| (b.offset(), b.length())).collect();
    let mut bi = 0;
    for (field, node) in schema.fields().iter().zip(nodes.iter()) {
        let n = buffer_count(field.data_type());
        let column = (node.length(), node.null_count());
        check_column(field, column, rows, &buffers[bi..bi + n], body_len, &bad)?;
        bi += n;
    }
    Ok(())
}

/// The record-batch header of a message flatbuffer, of the file's version, uncompressed and
/// without variadic buffers (none of the dataset files has them).
fn record_batch_header<'a>(
    fb: &'a [u8],
    version: MetadataVersion,
    bad: &dyn Fn(String) -> DatasetError,
) -> Result<arrow_ipc::RecordBatch<'a>, DatasetError> {
    let msg = arrow_ipc::root_as_message(fb).map_err(|e| bad(format!("invalid message ({e})")))?;
    if version != MetadataVersion::V1 && msg.version() != version {
        return Err(bad(format!(
            "message version {:?}, footer says {version:?}",
            msg.version()
        )));
    }
    if msg.header_type() != MessageHeader::RecordBatch {
        return Err(bad(format!(
            "a {:?} message where a record batch belongs",
            msg.header_type()
        )));
    }
    let rb = msg
        .header_as_record_batch()
        .ok_or_else(|| bad("record batch header missing".into()))?;
    if rb.compression().is_some() {
        return Err(bad(
            "compressed buffers (dataset files are not compressed)".into()
        ));
    }
    if rb.variadicBufferCounts().is_some_and(|v| !v.is_empty()) {
        return Err(bad(
            "variadic buffer counts for a schema without view columns".into(),
        ));
    }
    Ok(rb)
}

/// Checks one column's node (`(rows, nulls)`) and buffers (`(offset, length)` in the body).
fn check_column(
    field: &Field,
    (len, nulls): (i64, i64),
    rows: i64,
    buffers: &[(i64, i64)],
    body_len: u64,
    bad: &dyn Fn(String) -> DatasetError,
) -> Result<(), DatasetError> {
    let name = field.name();
    if len != rows || nulls < 0 || nulls > len {
        return Err(bad(format!(
            "column `{name}`: {len} rows with {nulls} nulls in a batch of {rows} rows"
        )));
    }
    let len = len as u64;
    let bits = len.div_ceil(8);
    let needed: [u64; 3] = match field.data_type() {
        DataType::Boolean => [bits, bits, 0],
        DataType::Binary | DataType::Utf8 => [bits, if len == 0 { 0 } else { 4 * (len + 1) }, 0],
        dt => {
            let width = dt
                .primitive_width()
                .ok_or_else(|| bad(format!("column `{name}` has type {dt}")))?;
            [bits, len * width as u64, 0]
        }
    };
    for (k, (need, &(off, blen))) in needed.iter().zip(buffers).enumerate() {
        if off < 0 || blen < 0 || (off as u64).saturating_add(blen as u64) > body_len {
            return Err(bad(format!(
                "column `{name}`: buffer {k} at {off}+{blen} exceeds the body of {body_len} bytes"
            )));
        }
        // The format pads every buffer to 8 bytes; a misaligned one is damage, and arrow
        // asserts (panics) on typed views of misaligned memory in places.
        if off % 8 != 0 {
            return Err(bad(format!(
                "column `{name}`: buffer {k} at body offset {off}, not a multiple of 8"
            )));
        }
        // Typed buffers (offsets, fixed-width values) must hold whole elements: arrow's
        // typed views assert it (a panic, not an error).
        let elem = match (field.data_type(), k) {
            (DataType::Binary | DataType::Utf8, 1) => 4,
            (DataType::Boolean, _) | (_, 0) | (DataType::Binary | DataType::Utf8, _) => 1,
            (dt, _) => dt.primitive_width().unwrap_or(1) as i64,
        };
        if blen % elem != 0 {
            return Err(bad(format!(
                "column `{name}`: buffer {k} holds {blen} bytes, not whole {elem}-byte elements"
            )));
        }
        // the validity bitmap matters only when the node says there are nulls
        let need = if k == 0 && nulls == 0 { 0 } else { *need };
        if (blen as u64) < need {
            return Err(bad(format!(
                "column `{name}`: buffer {k} holds {blen} bytes, {len} rows need {need}"
            )));
        }
    }
    Ok(())
}

/// Decodes an Arrow IPC file held in `buffer`: its schema and every record batch, each
/// column validated in full. Errors name `path`; no byte content makes it panic (fuzzed:
/// docs/reliability.md).
///
/// ```
/// use arrow_buffer::Buffer;
/// let e = quiver_formats::ipc::decode_file("x.arrow".as_ref(), &Buffer::from_vec(b"ARROW1 not really".to_vec()));
/// assert!(e.unwrap_err().to_string().starts_with("x.arrow: not an Arrow IPC file"));
/// ```
pub fn decode_file(
    path: &Path,
    buffer: &Buffer,
) -> Result<(SchemaRef, Vec<RecordBatch>), DatasetError> {
    let len = buffer.len();
    if len == 0 {
        return Err(DatasetError::damaged(path, "empty file (0 bytes)"));
    }
    if len < 18 || &buffer[..6] != MAGIC || &buffer[len - 6..] != MAGIC {
        return Err(DatasetError::damaged(path, format!("not an Arrow IPC file: {len} bytes without the ARROW1 magic at both ends (truncated?)")));
    }
    let footer_len = i32::from_le_bytes(buffer[len - 10..len - 6].try_into().expect("4 bytes"));
    if footer_len <= 0 || footer_len as usize > len - 18 {
        return Err(DatasetError::damaged(
            path,
            format!("invalid footer length {footer_len} in a file of {len} bytes"),
        ));
    }
    let fstart = len - 10 - footer_len as usize;
    let footer = arrow_ipc::root_as_footer(&buffer[fstart..len - 10])
        .map_err(|e| DatasetError::damaged(path, format!("invalid footer ({e})")))?;
    let schema = Arc::new(schema(
        path,
        footer
            .schema()
            .ok_or_else(|| DatasetError::damaged(path, "footer has no schema"))?,
    )?);
    if footer.dictionaries().is_some_and(|d| !d.is_empty()) {
        return Err(DatasetError::damaged(
            path,
            "dictionary batches (dataset files have none)",
        ));
    }
    let version = footer.version();
    let decoder =
        arrow_ipc::reader::FileDecoder::new(schema.clone(), version).with_require_alignment(false);
    let mut out = Vec::new();
    for block in footer.recordBatches().iter().flatten() {
        let (off, meta, body) = (block.offset(), block.metaDataLength(), block.bodyLength());
        if off < 8
            || meta < 8
            || body < 0
            || (off as u64)
                .saturating_add(meta as u64)
                .saturating_add(body as u64)
                > fstart as u64
            || !(off as u64 + meta as u64).is_multiple_of(8)
        {
            return Err(DatasetError::damaged(
                path,
                format!(
                    "record batch block at byte {off} ({meta} + {body} bytes) exceeds the data"
                ),
            ));
        }
        let buf = buffer.slice_with_length(off as usize, meta as usize + body as usize);
        check_message(
            path,
            off,
            &buf[..meta as usize],
            body as u64,
            &schema,
            version,
        )?;
        let b = match decoder.read_record_batch(block, &buf) {
            Ok(Some(b)) => b,
            Ok(None) => {
                return Err(DatasetError::damaged(
                    path,
                    format!("record batch at byte {off}: empty message"),
                ))
            }
            Err(e) => {
                return Err(DatasetError::damaged(
                    path,
                    format!("record batch at byte {off}: {e}"),
                ))
            }
        };
        for (f, c) in schema.fields().iter().zip(b.columns()) {
            c.to_data().validate_full().map_err(|e| {
                DatasetError::damaged(
                    path,
                    format!("record batch at byte {off}, column `{}`: {e}", f.name()),
                )
            })?;
        }
        out.push(b);
    }
    Ok((schema, out))
}

/// Reads a whole (small) Arrow IPC file into memory and decodes it.
pub fn read_file(path: &Path) -> Result<(SchemaRef, Vec<RecordBatch>), DatasetError> {
    // A FIFO or a link to a device would block or never end.
    let meta = std::fs::metadata(path).map_err(|e| DatasetError::io(path, e))?;
    if !meta.is_file() {
        return Err(DatasetError::format(path, "not a regular file (a FIFO, a device or a directory): a dataset holds only the files `quiver generate` wrote"));
    }
    let bytes = std::fs::read(path).map_err(|e| DatasetError::io(path, e))?;
    decode_file(path, &Buffer::from_vec(bytes))
}

/// Column `name` of `b` (read from `path`) as `T`, with `rows` rows when given; an error
/// naming the file and the column otherwise.
pub fn column<'a, T: arrow_array::Array + 'static>(
    path: &Path,
    b: &'a RecordBatch,
    name: &str,
    rows: Option<usize>,
) -> Result<&'a T, DatasetError> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| DatasetError::damaged(path, format!("missing column `{name}`")))?;
    let a = c.as_any().downcast_ref::<T>().ok_or_else(|| {
        DatasetError::damaged(path, format!("column `{name}` has type {}", c.data_type()))
    })?;
    if let Some(n) = rows {
        if a.len() != n {
            return Err(DatasetError::damaged(
                path,
                format!("column `{name}` has {} rows, expected {n}", a.len()),
            ));
        }
    }
    if a.null_count() > 0 {
        return Err(DatasetError::damaged(
            path,
            format!("column `{name}` has nulls"),
        ));
    }
    Ok(a)
}
