//! Conversions between Python values and plan values (TOML), and from Arrow objects put by
//! a Python step into checked products.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, SchemaRef};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use quiver_columnar::product::{product_schema, Product, EVENT_COLUMN, SCHEMA_VERSION_KEY};
use quiver_columnar::{Error, ParamValue, Result};

/// A Python value (bool, int, float, str, list, dict) as a plan value.
pub fn py_to_toml(v: &Bound<'_, PyAny>) -> std::result::Result<toml::Value, String> {
    if v.is_instance_of::<PyBool>() {
        return Ok(toml::Value::Boolean(
            v.extract::<bool>().map_err(|e| e.to_string())?,
        ));
    }
    if v.is_instance_of::<PyInt>() {
        return v
            .extract::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| format!("integer {v} does not fit in 64 bits"));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(toml::Value::Float(
            v.extract::<f64>().map_err(|e| e.to_string())?,
        ));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(toml::Value::String(
            v.extract::<String>().map_err(|e| e.to_string())?,
        ));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut out = Vec::new();
        for x in v.try_iter().map_err(|e| e.to_string())? {
            out.push(py_to_toml(&x.map_err(|e| e.to_string())?)?);
        }
        return Ok(toml::Value::Array(out));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut t = toml::Table::new();
        for (k, x) in d.iter() {
            t.insert(
                k.extract::<String>()
                    .map_err(|_| "dictionary keys must be strings".to_string())?,
                py_to_toml(&x)?,
            );
        }
        return Ok(toml::Value::Table(t));
    }
    let ty = v
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    Err(format!("a value of Python type '{ty}' cannot be a plan value (use bool, int, float, str or a list of them)"))
}

/// A parameter value for a Python step's constructor.
pub fn param_to_py<'py>(py: Python<'py>, v: &ParamValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        ParamValue::Int(i) => i.into_pyobject(py)?.into_any(),
        ParamValue::Float(x) => x.into_pyobject(py)?.into_any(),
        ParamValue::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        ParamValue::Str(s) => PyString::new(py, s).into_any(),
        ParamValue::StrList(l) => PyList::new(py, l)?.into_any(),
    })
}

/// The values of an integer column as i64, or why not.
fn integer_values(product: &str, a: &dyn Array) -> Result<Vec<i64>> {
    if a.null_count() > 0 {
        return Err(Error::data(format!("product '{product}', column '{EVENT_COLUMN}': {} null values (expected an integer event number on every row)", a.null_count())));
    }
    macro_rules! ints {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .values()
                .iter()
                .map(|&v| v as i64)
                .collect()
        };
    }
    Ok(match a.data_type() {
        DataType::UInt32 => ints!(UInt32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::UInt64 => a.as_primitive::<UInt64Type>().values().iter().map(|&v| v.min(i64::MAX as u64) as i64).collect(),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::Int8 => ints!(Int8Type),
        other => {
            return Err(Error::data(format!("product '{product}', column '{EVENT_COLUMN}': expected an integer type (UInt32), got {other}")))
        }
    })
}

/// Per-event offsets from an `event` column: rows must be ordered by event and lie in
/// `first..first + n`.
pub fn offsets_from_events(
    product: &str,
    events: &dyn Array,
    first: u64,
    n: usize,
) -> Result<OffsetBuffer<i32>> {
    let ev = integer_values(product, events)?;
    let mut lengths = vec![0usize; n];
    let mut prev = i64::MIN;
    for (row, &e) in ev.iter().enumerate() {
        if e < prev {
            return Err(Error::data(format!(
                "product '{product}', column '{EVENT_COLUMN}': rows must be ordered by event, but row {row} has event {e} after event {prev}"
            )));
        }
        prev = e;
        let i = e - first as i64;
        if i < 0 || i >= n as i64 {
            return Err(Error::data(format!(
                "product '{product}', column '{EVENT_COLUMN}': row {row} has event {e}, outside this batch's events {first}..{}",
                first + n as u64
            )));
        }
        lengths[i as usize] += 1;
    }
    quiver_columnar::product::offsets_from_lengths(lengths)
}

/// Offsets given explicitly (`n + 1` non-decreasing values from 0 to `rows`); the error
/// says which rule the values break, and where.
pub fn offsets_from_values(
    product: &str,
    values: Vec<i64>,
    n: usize,
    rows: usize,
) -> Result<OffsetBuffer<i32>> {
    let bad = |what: String| Err(Error::data(format!("product '{product}': offsets {what}")));
    if values.len() != n + 1 {
        return bad(format!(
            "must have {} values (one more than the batch's {n} events), got {}",
            n + 1,
            values.len()
        ));
    }
    if values[0] != 0 {
        return bad(format!("must start at 0, got {}", values[0]));
    }
    if let Some(i) = values.windows(2).position(|w| w[1] < w[0]) {
        return bad(format!(
            "must not decrease: offsets[{i}] = {} > offsets[{}] = {}",
            values[i],
            i + 1,
            values[i + 1]
        ));
    }
    if values[n] != rows as i64 {
        return bad(format!(
            "must end at the row count {rows}, got {}",
            values[n]
        ));
    }
    if rows > i32::MAX as usize {
        return bad(format!(
            "cannot address {rows} rows (Arrow's 32-bit offsets hold at most {})",
            i32::MAX
        ));
    }
    let v: Vec<i32> = values.into_iter().map(|x| x as i32).collect();
    Ok(OffsetBuffer::new(ScalarBuffer::from(v)))
}

/// Splits the `event` column off a batch put by a Python step: (the column, the rest).
pub fn split_event_column(b: &RecordBatch) -> (Option<ArrayRef>, RecordBatch) {
    match b.schema().index_of(EVENT_COLUMN) {
        Ok(i) => {
            let mut rest = b.clone();
            let ev = rest.remove_column(i);
            (Some(ev), rest)
        }
        Err(_) => (None, b.clone()),
    }
}

/// A product of type `type_name` from `columns`, checked against the expected schema when
/// one is known (names, order, types, nullability); zero-copy: the arrays are reused.
pub fn product_from(
    type_name: &str,
    expected: Option<&SchemaRef>,
    columns: RecordBatch,
    offsets: OffsetBuffer<i32>,
) -> Result<Product> {
    let given = columns.schema();
    let schema = match expected {
        Some(exp) => {
            let want: Vec<&str> = exp.fields().iter().map(|f| f.name().as_str()).collect();
            let got: Vec<&str> = given.fields().iter().map(|f| f.name().as_str()).collect();
            for f in exp.fields() {
                let Ok(i) = given.index_of(f.name()) else {
                    return Err(Error::data(format!(
                        "product '{type_name}': missing column '{}' (expected type {}); got columns [{}], expected [{}]",
                        f.name(),
                        f.data_type(),
                        got.join(", "),
                        want.join(", ")
                    )));
                };
                let a = columns.column(i);
                if a.data_type() != f.data_type() {
                    return Err(Error::data(format!(
                        "product '{type_name}', column '{}': expected type {}, got {}",
                        f.name(),
                        f.data_type(),
                        a.data_type()
                    )));
                }
                if !f.is_nullable() && a.null_count() > 0 {
                    return Err(Error::data(format!(
                        "product '{type_name}', column '{}': {} null values, but the column is not nullable",
                        f.name(),
                        a.null_count()
                    )));
                }
            }
            if got != want {
                return Err(Error::data(format!(
                    "product '{type_name}': columns [{}] (besides 'event') do not match the schema [{}]",
                    got.join(", "),
                    want.join(", ")
                )));
            }
            exp.clone()
        }
        None => {
            let version = 1;
            let fields: Vec<Field> = given.fields().iter().map(|f| f.as_ref().clone()).collect();
            product_schema(type_name, version, fields)
        }
    };
    let version_ok = schema.metadata().contains_key(SCHEMA_VERSION_KEY);
    let schema = if version_ok {
        schema
    } else {
        product_schema(
            type_name,
            1,
            schema.fields().iter().map(|f| f.as_ref().clone()).collect(),
        )
    };
    let batch = RecordBatch::try_new(schema, columns.columns().to_vec())
        .map_err(|e| Error::data(format!("product '{type_name}': {e}")))?;
    Product::new(batch, offsets)
}

/// A product's offsets as an Arrow array (shares the buffer).
pub fn offsets_array(p: &Product) -> ArrayRef {
    Arc::new(arrow_array::Int32Array::new(
        p.offsets().inner().clone(),
        None,
    ))
}

#[cfg(test)]
mod offsets_tests {
    use super::offsets_from_values;

    fn msg(values: Vec<i64>, n: usize, rows: usize) -> String {
        offsets_from_values("p", values, n, rows)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn each_rule_has_its_message() {
        assert!(msg(vec![0, 0, 110], 2, 100).contains("must end at the row count 100, got 110"));
        assert!(msg(vec![0, 100], 2, 100)
            .contains("must have 3 values (one more than the batch's 2 events), got 2"));
        assert!(msg(vec![5, 50, 100], 2, 100).contains("must start at 0, got 5"));
        assert!(msg(vec![0, 60, 40, 100], 3, 100)
            .contains("must not decrease: offsets[1] = 60 > offsets[2] = 40"));
        let ok = offsets_from_values("p", vec![0, 0, 100], 2, 100).unwrap();
        assert_eq!(ok.iter().copied().collect::<Vec<_>>(), vec![0, 0, 100]);
    }
}
