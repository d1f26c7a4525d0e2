//! Record batches built column by column, by name, against a schema.
//!
//! Several columns of a product often share one Arrow type (`digis`: four `u16`), so a batch
//! built by position takes a swap of two of them silently. [`BatchBuilder`] takes each column
//! with its name and refuses, naming the product and the column, a name the schema does not
//! have, a column given twice, one of the wrong type or length, and one left out.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{ArrayRef, UInt16Array};
//! use arrow_schema::{DataType, Field, Schema};
//! use quiver_formats::batch::BatchBuilder;
//!
//! let schema = Arc::new(Schema::new(vec![
//!     Field::new("row", DataType::UInt16, false),
//!     Field::new("col", DataType::UInt16, false),
//! ]));
//! let a: ArrayRef = Arc::new(UInt16Array::from(vec![1, 2]));
//! let b = BatchBuilder::new("pixels", &schema)
//!     .set("col", a.clone()).unwrap()
//!     .set("row", a.clone()).unwrap()
//!     .finish().unwrap();
//! assert_eq!(b.num_rows(), 2);
//! let err = BatchBuilder::new("pixels", &schema).set("xx", a).unwrap_err();
//! assert_eq!(err.to_string(), "product 'pixels': no column 'xx' in its schema (columns: row, col)");
//! ```

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, SchemaRef};

/// Why a batch could not be built; every message names the product and, but for Arrow's own
/// refusals, the column.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("product '{product}': no column '{column}' in its schema (columns: {columns})")]
    Unknown {
        product: String,
        column: String,
        columns: String,
    },
    #[error("product '{product}': column '{column}' given twice")]
    Duplicate { product: String, column: String },
    #[error("product '{product}': column '{column}' is {actual}, the schema says {expected}")]
    Type {
        product: String,
        column: String,
        expected: DataType,
        actual: DataType,
    },
    #[error("product '{product}': column '{column}' has {actual} rows, '{first}' has {expected}")]
    Length {
        product: String,
        column: String,
        first: String,
        expected: usize,
        actual: usize,
    },
    #[error("product '{product}': column '{column}' not given")]
    Missing { product: String, column: String },
    #[error("product '{product}': {source}")]
    Arrow {
        product: String,
        #[source]
        source: arrow_schema::ArrowError,
    },
}

/// Builds a [`RecordBatch`] of `schema` from columns given by name, in any order.
#[derive(Debug)]
pub struct BatchBuilder {
    product: String,
    schema: SchemaRef,
    columns: Vec<Option<ArrayRef>>,
}

impl BatchBuilder {
    /// A builder of a batch of `schema`; `product` names it in errors.
    pub fn new(product: impl Into<String>, schema: &SchemaRef) -> Self {
        BatchBuilder {
            product: product.into(),
            schema: schema.clone(),
            columns: vec![None; schema.fields().len()],
        }
    }

    /// Sets column `name`: it must be in the schema, not set before, of the schema's type and
    /// as long as the columns set before.
    pub fn set(mut self, name: &str, array: ArrayRef) -> Result<Self, BatchError> {
        let Some((i, field)) = self.schema.fields().find(name) else {
            return Err(BatchError::Unknown {
                columns: self.column_names(),
                product: self.product,
                column: name.to_string(),
            });
        };
        if self.columns[i].is_some() {
            return Err(BatchError::Duplicate {
                product: self.product,
                column: name.to_string(),
            });
        }
        if !field.data_type().equals_datatype(array.data_type()) {
            return Err(BatchError::Type {
                product: self.product,
                column: name.to_string(),
                expected: field.data_type().clone(),
                actual: array.data_type().clone(),
            });
        }
        if let Some((j, first)) = self.first_set() {
            if first.len() != array.len() {
                return Err(BatchError::Length {
                    product: self.product.clone(),
                    column: name.to_string(),
                    first: self.schema.field(j).name().clone(),
                    expected: first.len(),
                    actual: array.len(),
                });
            }
        }
        self.columns[i] = Some(array);
        Ok(self)
    }

    /// The batch; every column of the schema must have been set.
    pub fn finish(self) -> Result<RecordBatch, BatchError> {
        let mut columns = Vec::with_capacity(self.columns.len());
        for (field, c) in self.schema.fields().iter().zip(self.columns) {
            match c {
                Some(c) => columns.push(c),
                None => {
                    return Err(BatchError::Missing {
                        product: self.product,
                        column: field.name().clone(),
                    })
                }
            }
        }
        RecordBatch::try_new(self.schema, columns).map_err(|source| BatchError::Arrow {
            product: self.product,
            source,
        })
    }

    fn first_set(&self) -> Option<(usize, &ArrayRef)> {
        self.columns
            .iter()
            .enumerate()
            .find_map(|(j, c)| c.as_ref().map(|c| (j, c)))
    }

    fn column_names(&self) -> String {
        let names: Vec<&str> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Array, Int32Array, UInt16Array};
    use arrow_schema::{Field, Schema};

    use super::*;
    use crate::products::{fields, types};

    fn digis() -> SchemaRef {
        Arc::new(Schema::new(fields(types::CALIBRATED_DIGIS).unwrap()))
    }

    fn u16s(v: &[u16]) -> ArrayRef {
        Arc::new(UInt16Array::from(v.to_vec()))
    }

    /// `row, col, charge, module`, each column with its own values.
    fn full(order: &[&str]) -> Result<RecordBatch, BatchError> {
        let mut b = BatchBuilder::new("calibrated_digis", &digis());
        for name in order {
            let v = match *name {
                "row" => [1, 2],
                "col" => [3, 4],
                "charge" => [5, 6],
                _ => [7, 8],
            };
            b = b.set(name, u16s(&v))?;
        }
        b.finish()
    }

    fn col(b: &RecordBatch, name: &str) -> Vec<u16> {
        let a = b.column_by_name(name).unwrap();
        let a = a.as_any().downcast_ref::<UInt16Array>().unwrap();
        a.values().to_vec()
    }

    #[test]
    fn columns_land_by_name_in_any_order() {
        let b = full(&["module", "charge", "col", "row"]).unwrap();
        assert_eq!(b.schema(), digis());
        assert_eq!(col(&b, "row"), [1, 2]);
        assert_eq!(col(&b, "col"), [3, 4]);
        assert_eq!(col(&b, "charge"), [5, 6]);
        assert_eq!(col(&b, "module"), [7, 8]);
    }

    #[test]
    fn a_swapped_name_is_refused() {
        // Publishing the digis' `xx, yy` under their reconstruction names, not the schema's.
        let err = full(&["xx", "yy", "charge", "module"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "product 'calibrated_digis': no column 'xx' in its schema (columns: row, col, charge, module)"
        );
    }

    #[test]
    fn a_missing_column_is_refused() {
        let err = full(&["row", "col", "module"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "product 'calibrated_digis': column 'charge' not given"
        );
    }

    #[test]
    fn a_column_given_twice_is_refused() {
        let err = full(&["row", "col", "col", "charge", "module"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "product 'calibrated_digis': column 'col' given twice"
        );
    }

    #[test]
    fn a_column_of_the_wrong_type_is_refused() {
        let b = BatchBuilder::new("calibrated_digis", &digis());
        let err = b
            .set("charge", Arc::new(Int32Array::from(vec![5, 6])))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "product 'calibrated_digis': column 'charge' is Int32, the schema says UInt16"
        );
    }

    #[test]
    fn columns_of_different_lengths_are_refused() {
        let b = BatchBuilder::new("calibrated_digis", &digis())
            .set("col", u16s(&[1, 2]))
            .unwrap();
        let err = b.set("row", u16s(&[1])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "product 'calibrated_digis': column 'row' has 1 rows, 'col' has 2"
        );
    }

    #[test]
    fn nulls_in_a_non_null_column_are_refused_with_the_product() {
        let b = BatchBuilder::new("calibrated_digis", &digis());
        let with_null: ArrayRef = Arc::new(UInt16Array::from(vec![Some(1), None]));
        let err = ["row", "col", "charge"]
            .iter()
            .try_fold(b, |b, n| b.set(n, u16s(&[1, 2])))
            .unwrap()
            .set("module", with_null)
            .unwrap()
            .finish()
            .unwrap_err();
        assert!(
            err.to_string().starts_with("product 'calibrated_digis': "),
            "{err}"
        );
        assert!(matches!(err, BatchError::Arrow { .. }), "{err}");
    }

    #[test]
    fn schema_metadata_is_kept() {
        let meta = std::collections::HashMap::from([("k".to_string(), "v".to_string())]);
        let schema = Arc::new(Schema::new_with_metadata(
            vec![Field::new("a", arrow_schema::DataType::UInt16, false)],
            meta,
        ));
        let b = BatchBuilder::new("p", &schema)
            .set("a", u16s(&[1]))
            .unwrap()
            .finish()
            .unwrap();
        assert_eq!(b.schema().metadata()["k"], "v");
        assert_eq!(b.column(0).len(), 1);
    }
}
