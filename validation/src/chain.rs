//! Access to the pixel-chain products the validators read (columns as in docs/products.md),
//! and the optional input slots they declare: one per product type, so that a validator
//! takes whatever part of the chain a plan runs.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrowPrimitiveType, PrimitiveArray};
use quiver_columnar::{EventBatch, InputSpec, Product, ProductKey, StepConfig};

use crate::error::{Result, ValidationError};

/// The product types a validator can read, in chain order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Input {
    Digis,
    CalibratedDigis,
    ClusteredDigis,
    Hits,
    Tracks,
    Vertices,
}

impl Input {
    /// Every input, in chain order.
    pub const ALL: [Input; 6] = [
        Input::Digis,
        Input::CalibratedDigis,
        Input::ClusteredDigis,
        Input::Hits,
        Input::Tracks,
        Input::Vertices,
    ];

    /// The product type, which is also the name of the input slot in a plan.
    pub fn type_name(self) -> &'static str {
        use quiver_formats::products::types;
        match self {
            Input::Digis => types::DIGIS,
            Input::CalibratedDigis => types::CALIBRATED_DIGIS,
            Input::ClusteredDigis => types::CLUSTERED_DIGIS,
            Input::Hits => types::HITS,
            Input::Tracks => types::TRACKS,
            Input::Vertices => types::VERTICES,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Optional input slots, one per product type of `inputs` (with what the step uses it
/// for), each resolved by type when the plan does not name a producer.
pub fn input_specs(inputs: &[(Input, &str)]) -> Vec<InputSpec> {
    inputs
        .iter()
        .map(|(i, doc)| InputSpec {
            name: i.type_name().into(),
            product_type: Some(i.type_name().into()),
            many: false,
            optional: true,
            doc: doc.to_string(),
        })
        .collect()
}

/// The product keys a built step reads, per input type.
#[derive(Clone, Debug, Default)]
pub struct ChainKeys {
    keys: [Option<ProductKey>; 6],
}

impl ChainKeys {
    /// The keys the plan resolved for the slots of [`input_specs`].
    pub fn from_config(cfg: &StepConfig, inputs: &[Input]) -> quiver_columnar::Result<Self> {
        let mut out = ChainKeys::default();
        for &i in inputs {
            match cfg.inputs(i.type_name()) {
                [] => {}
                [k] => out.keys[i.index()] = Some(k.clone()),
                more => {
                    return Err(quiver_columnar::Error::plan(
                        &cfg.label,
                        format!(
                            "input '{}' resolves to {} products; name one",
                            i.type_name(),
                            more.len()
                        ),
                    ))
                }
            }
        }
        Ok(out)
    }
    /// Keys given directly (tests, code-built steps).
    pub fn from_keys(keys: impl IntoIterator<Item = (Input, ProductKey)>) -> Self {
        let mut out = ChainKeys::default();
        for (i, k) in keys {
            out.keys[i.index()] = Some(k);
        }
        out
    }
    /// Whether `input` is connected.
    pub fn has(&self, input: Input) -> bool {
        self.keys[input.index()].is_some()
    }
    /// The connected products of one batch. Of the raw `digis` only the rows per event are
    /// read (nDigis), so a copy that lives on a device stays there (no download); every
    /// other product is taken with its host view.
    pub fn get(&self, batch: &EventBatch) -> quiver_columnar::Result<ChainProducts> {
        let mut p = ChainProducts {
            products: Default::default(),
            n_events: batch.n_events(),
        };
        for ((slot, key), input) in p.products.iter_mut().zip(&self.keys).zip(Input::ALL) {
            if let Some(k) = key {
                *slot = Some(if input == Input::Digis {
                    batch.get_resident(k)?
                } else {
                    batch.get(k)?
                });
            }
        }
        Ok(p)
    }
}

/// The pixel-chain products of one event batch (any subset).
#[derive(Clone, Debug)]
pub struct ChainProducts {
    products: [Option<Arc<Product>>; 6],
    n_events: usize,
}

impl ChainProducts {
    /// Products built directly (kernels' tests); all must cover `n_events`.
    pub fn new(
        n_events: usize,
        products: impl IntoIterator<Item = (Input, Product)>,
    ) -> Result<Self> {
        let mut p = ChainProducts {
            products: Default::default(),
            n_events,
        };
        for (i, prod) in products {
            if prod.n_events() != n_events {
                return Err(ValidationError::Data(format!(
                    "'{}' product covers {} events, expected {n_events}",
                    i.type_name(),
                    prod.n_events()
                )));
            }
            p.products[i.index()] = Some(Arc::new(prod));
        }
        Ok(p)
    }
    /// Events of the batch.
    pub fn n_events(&self) -> usize {
        self.n_events
    }
    /// A product, if connected.
    pub fn get(&self, input: Input) -> Option<&Product> {
        self.products[input.index()].as_deref()
    }
    /// Whether `input` is connected.
    pub fn has(&self, input: Input) -> bool {
        self.get(input).is_some()
    }
}

/// Column `name` of `p` as a primitive array of type `T`, or an error naming both (also
/// when it holds nulls).
///
/// ```
/// use arrow_array::types::{Float32Type, UInt16Type};
/// use quiver_columnar::toy::floats_schema;
/// use quiver_columnar::Product;
/// use quiver_validation::chain::column;
/// let b = arrow_array::RecordBatch::try_new(floats_schema(),
///     vec![std::sync::Arc::new(arrow_array::Float32Array::from(vec![1.0]))]).unwrap();
/// let p = Product::from_lengths(b, [1]).unwrap();
/// assert_eq!(column::<Float32Type>(&p, "value").unwrap().values()[0], 1.0);
/// assert_eq!(column::<UInt16Type>(&p, "value").unwrap_err().to_string(),
///            "column 'floats.value' has type Float32, expected UInt16");
/// ```
pub fn column<'a, T: ArrowPrimitiveType>(
    p: &'a Product,
    name: &str,
) -> Result<&'a PrimitiveArray<T>> {
    let c = host(p)?
        .column_by_name(name)
        .ok_or_else(|| ValidationError::MissingColumn {
            product: p.type_name().into(),
            column: name.into(),
        })?;
    let a = c
        .as_primitive_opt::<T>()
        .ok_or_else(|| ValidationError::ColumnType {
            column: format!("{}.{name}", p.type_name()),
            data_type: c.data_type().to_string(),
            expected: format!("expected {}", T::DATA_TYPE),
        })?;
    if a.null_count() > 0 {
        return Err(ValidationError::Nulls {
            column: format!("{}.{name}", p.type_name()),
            nulls: a.null_count(),
        });
    }
    Ok(a)
}

/// The host view of `p` (made here when it lives only on a device); a failed download is an
/// error naming the product, not a panic.
fn host(p: &Product) -> Result<&arrow_array::RecordBatch> {
    p.host()
        .map_err(|e| ValidationError::Data(format!("{}: {e}", p.type_name())))
}

/// Column `name` of `p` as a dynamically typed array.
pub fn any_column<'a>(p: &'a Product, name: &str) -> Result<&'a dyn Array> {
    host(p)?
        .column_by_name(name)
        .map(|c| c.as_ref())
        .ok_or_else(|| ValidationError::MissingColumn {
            product: p.type_name().into(),
            column: name.into(),
        })
}
