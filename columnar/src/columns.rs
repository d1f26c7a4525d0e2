//! Helpers for step adapters: typed access to a product's columns by name, and building
//! product columns from per-event parts in pooled memory.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, ArrowPrimitiveType, PrimitiveArray};
use arrow_buffer::ArrowNativeType;

use crate::error::{Error, Result};
use crate::pool;
use crate::product::Product;

/// The values of column `name` of `product`, which must be a primitive column of type `T`
/// without nulls; the error names the product type, the column and both types.
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Float32Array, RecordBatch, types::{Float32Type, Int32Type}};
/// use quiver_columnar::{columns::values, product::Product, toy::floats_schema};
/// let rb = RecordBatch::try_new(floats_schema(), vec![Arc::new(Float32Array::from(vec![1.0]))]).unwrap();
/// let p = Product::from_lengths(rb, [1]).unwrap();
/// assert_eq!(values::<Float32Type>(&p, "value").unwrap(), &[1.0]);
/// assert_eq!(values::<Int32Type>(&p, "value").unwrap_err().to_string(),
///            "product 'floats': column 'value' is Float32, expected Int32");
/// assert!(values::<Float32Type>(&p, "nope").unwrap_err().to_string().contains("has no column 'nope'"));
/// ```
pub fn values<'a, T: ArrowPrimitiveType>(
    product: &'a Product,
    name: &str,
) -> Result<&'a [T::Native]> {
    Ok(primitive::<T>(product, name)?.values())
}

/// [`values`] as a shared buffer: a step keeps (a slice of) it in what it makes without
/// copying the column.
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Float32Array, RecordBatch, types::Float32Type};
/// use quiver_columnar::{columns::values_buffer, product::Product, toy::floats_schema};
/// let rb = RecordBatch::try_new(floats_schema(), vec![Arc::new(Float32Array::from(vec![1.0, 2.0]))]).unwrap();
/// let p = Product::from_lengths(rb, [2]).unwrap();
/// let b = values_buffer::<Float32Type>(&p, "value").unwrap();
/// assert_eq!(&b.slice(1, 1)[..], &[2.0]);
/// assert!(values_buffer::<Float32Type>(&p, "nope").is_err());
/// ```
pub fn values_buffer<T: ArrowPrimitiveType>(
    product: &Product,
    name: &str,
) -> Result<arrow_buffer::ScalarBuffer<T::Native>> {
    Ok(primitive::<T>(product, name)?.values().clone())
}

/// Column `name` of `product` as a primitive array of type `T` without nulls.
fn primitive<'a, T: ArrowPrimitiveType>(
    product: &'a Product,
    name: &str,
) -> Result<&'a PrimitiveArray<T>> {
    let batch = product.batch();
    let col = batch
        .column_by_name(name)
        .ok_or_else(|| Error::missing_column(product.type_name(), name, column_names(product)))?;
    let arr = col
        .as_any()
        .downcast_ref::<PrimitiveArray<T>>()
        .ok_or_else(|| {
            Error::column_type(product.type_name(), name, T::DATA_TYPE, col.data_type())
        })?;
    if arr.null_count() > 0 {
        return Err(Error::NullValues {
            product: product.type_name().to_string(),
            column: name.to_string(),
            nulls: arr.null_count(),
        });
    }
    Ok(arr)
}

/// The binary column `name` of `product` (raw data buffers).
pub fn binary<'a>(product: &'a Product, name: &str) -> Result<&'a arrow_array::BinaryArray> {
    let batch = product.batch();
    let col = batch
        .column_by_name(name)
        .ok_or_else(|| Error::missing_column(product.type_name(), name, column_names(product)))?;
    col.as_any()
        .downcast_ref::<arrow_array::BinaryArray>()
        .ok_or_else(|| Error::column_type(product.type_name(), name, "Binary", col.data_type()))
}

fn column_names(product: &Product) -> Vec<String> {
    let schema = product.batch().schema();
    schema.fields().iter().map(|f| f.name().clone()).collect()
}

/// The column `name` of `product` as an array reference (for sharing it in a new product).
pub fn column(product: &Product, name: &str) -> Result<ArrayRef> {
    product
        .batch()
        .column_by_name(name)
        .cloned()
        .ok_or_else(|| Error::missing_column(product.type_name(), name, column_names(product)))
}

/// One primitive column from per-event parts, concatenated in order into pooled memory.
///
/// ```
/// use arrow_array::types::UInt16Type;
/// use quiver_columnar::columns::concat;
/// let a = concat::<UInt16Type, _>([vec![1u16, 2], vec![], vec![3]].iter().map(|v| v.as_slice()));
/// assert_eq!(a.values().as_ref(), &[1, 2, 3]);
/// ```
pub fn concat<'a, T, I>(parts: I) -> PrimitiveArray<T>
where
    T: ArrowPrimitiveType,
    T::Native: ArrowNativeType,
    I: IntoIterator<Item = &'a [T::Native]>,
    I::IntoIter: Clone,
{
    let parts = parts.into_iter();
    let total = parts.clone().map(<[T::Native]>::len).sum();
    let mut v = pool::global().vec::<T::Native>(total);
    for p in parts {
        v.extend_from_slice(p);
    }
    PrimitiveArray::<T>::new(v.into_scalar_buffer(), None)
}

/// Like [`concat`], returned as an [`ArrayRef`].
pub fn concat_ref<'a, T, I>(parts: I) -> ArrayRef
where
    T: ArrowPrimitiveType,
    I: IntoIterator<Item = &'a [T::Native]>,
    I::IntoIter: Clone,
{
    Arc::new(concat::<T, I>(parts))
}
