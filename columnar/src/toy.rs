//! Example steps that exercise the framework without a detector: a seeded source of
//! random floats and two implementations of squaring. They stay in the catalogue as
//! examples of how a step is written (numerical core + thin adapter).

use std::sync::Arc;

use arrow_array::{Array, Float32Array, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::error::{Error, Result};
use crate::params::ParamSpec;
use crate::pool;
use crate::product::{product_schema, Product, ProductKey};
use crate::step::{Backend, EventBatch, InputSpec, Registry, Signature, Step, StepType};

/// Product type of the toy steps: one `value: f32` column.
pub const FLOATS: &str = "floats";

/// The schema of `floats` products.
pub fn floats_schema() -> SchemaRef {
    product_schema(
        FLOATS,
        1,
        vec![Field::new("value", DataType::Float32, false)],
    )
}

/// The random generator of one event: seeded from the job seed and the event number only,
/// so values do not depend on batching or threads.
fn event_rng(seed: u64, event: u64) -> Xoshiro256PlusPlus {
    // SplitMix64-style mixing of (seed, event) into one 64-bit seed.
    let mut z = seed ^ event.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    Xoshiro256PlusPlus::seed_from_u64(z ^ (z >> 31))
}

/// Fills `count` uniform values in `[low, high)` per event for events `events`, in event order.
///
/// ```
/// use quiver_columnar::toy::random_floats;
/// let a = random_floats(1, 0..4, 3, 0.0, 1.0).unwrap();
/// let b = random_floats(1, 2..4, 3, 0.0, 1.0).unwrap();
/// assert_eq!(a.len(), 12);
/// assert_eq!(&a.values()[6..], &b.values()[..]); // events 2 and 3 are the same in both
/// ```
pub fn random_floats(
    seed: u64,
    events: std::ops::Range<u64>,
    count: usize,
    low: f32,
    high: f32,
) -> Result<Float32Array> {
    if low.partial_cmp(&high) != Some(std::cmp::Ordering::Less)
        || !low.is_finite()
        || !high.is_finite()
    {
        return Err(Error::data(format!(
            "random_floats: need finite low < high, got low = {low}, high = {high}"
        )));
    }
    let mut v = pool::global().vec::<f32>(count * (events.end - events.start) as usize);
    for e in events {
        let mut rng = event_rng(seed, e);
        for _ in 0..count {
            v.push(rng.random_range(low..high));
        }
    }
    Ok(Float32Array::new(v.into_scalar_buffer(), None))
}

/// How [`square`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SquareMethod {
    /// `x * x`.
    Multiply,
    /// `x.powi(2)`, a second implementation to compare against.
    Powi,
}

/// Squares every value into a pooled buffer; nulls are not allowed.
///
/// ```
/// use arrow_array::Float32Array;
/// use quiver_columnar::toy::{square, SquareMethod};
/// let x = Float32Array::from(vec![1.5, -2.0]);
/// assert_eq!(square(&x, SquareMethod::Multiply).unwrap().values().as_ref(), &[2.25, 4.0]);
/// assert_eq!(square(&x, SquareMethod::Powi).unwrap(), square(&x, SquareMethod::Multiply).unwrap());
/// ```
pub fn square(x: &Float32Array, method: SquareMethod) -> Result<Float32Array> {
    if x.null_count() > 0 {
        return Err(Error::data(format!(
            "square: input has {} null values",
            x.null_count()
        )));
    }
    let mut v = pool::global().vec::<f32>(x.len());
    match method {
        SquareMethod::Multiply => v.extend(x.values().iter().map(|a| a * a)),
        SquareMethod::Powi => v.extend(x.values().iter().map(|a| a.powi(2))),
    }
    Ok(Float32Array::new(v.into_scalar_buffer(), None))
}

struct RandomFloatsStep {
    seed: u64,
    count: usize,
    low: f32,
    high: f32,
}

impl Step for RandomFloatsStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let values = random_floats(self.seed, batch.events(), self.count, self.low, self.high)?;
        let rb = RecordBatch::try_new(floats_schema(), vec![Arc::new(values)])?;
        batch.put(Product::from_lengths(
            rb,
            std::iter::repeat_n(self.count, batch.n_events()),
        )?)
    }
}

struct SquareStep {
    input: ProductKey,
    method: SquareMethod,
}

impl Step for SquareStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let p = batch.get(&self.input)?;
        let x = p
            .batch()
            .column(0)
            .as_any()
            .downcast_ref::<Float32Array>()
            .ok_or_else(|| {
                Error::column_type(
                    self.input.to_string(),
                    "value",
                    "Float32",
                    p.batch().column(0).data_type(),
                )
            })?;
        let rb = RecordBatch::try_new(floats_schema(), vec![Arc::new(square(x, self.method)?)])?;
        batch.put(Product::new(rb, p.offsets().clone())?)
    }
}

/// Registers `random_floats` and `square`.
pub fn register(r: &mut Registry) {
    // low < high is checked with the plan, so `quiver plan check` refuses what `run` would.
    r.add_plan_check(|plan| {
        for s in plan.steps.iter().filter(|s| s.type_name == "random_floats") {
            let (low, high) = (s.params.float("low") as f32, s.params.float("high") as f32);
            if low.partial_cmp(&high) != Some(std::cmp::Ordering::Less) {
                return Err(Error::Param {
                    step: s.label.clone(),
                    key: "high".into(),
                    value: Some(high.to_string()),
                    msg: format!("parameter 'high': must be greater than low ({low})"),
                });
            }
        }
        Ok(())
    });
    r.add(StepType {
        name: "random_floats",
        doc: "Uniform random floats, seeded per event (example source)",
        params: vec![
            ParamSpec::int("count", 1000, "values per event").within(0.0, 1e8),
            ParamSpec::int(
                "seed",
                1,
                "random seed; values depend only on (seed, event)",
            ),
            ParamSpec::float("low", 0.0, "lower bound (inclusive)"),
            ParamSpec::float("high", 1.0, "upper bound (exclusive)"),
        ],
        signature: Signature {
            inputs: vec![],
            outputs: vec![FLOATS.into()],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            let p = &cfg.params;
            let count = usize::try_from(p.int("count"))
                .map_err(|_| cfg.param_error("count", "must be ≥ 0"))?;
            let seed =
                u64::try_from(p.int("seed")).map_err(|_| cfg.param_error("seed", "must be ≥ 0"))?;
            let (low, high) = (p.float("low") as f32, p.float("high") as f32);
            if low.partial_cmp(&high) != Some(std::cmp::Ordering::Less) {
                return Err(cfg.param_error("high", format!("must be greater than low ({low})")));
            }
            Ok(Box::new(RandomFloatsStep {
                seed,
                count,
                low,
                high,
            }))
        },
    });
    r.add(StepType {
        name: "square",
        doc: "Squares floats (example; two implementations to compare)",
        params: vec![ParamSpec::choice(
            "method",
            &["multiply", "powi"],
            "x*x or x.powi(2)",
        )],
        signature: Signature {
            inputs: vec![InputSpec::one("input", FLOATS, "values to square")],
            outputs: vec![FLOATS.into()],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            let method = match cfg.params.str("method") {
                "powi" => SquareMethod::Powi,
                _ => SquareMethod::Multiply,
            };
            Ok(Box::new(SquareStep {
                input: cfg.input("input")?,
                method,
            }))
        },
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_depend_only_on_seed_and_event() {
        let all = random_floats(7, 0..10, 5, -1.0, 1.0).unwrap();
        for split in [1u64, 3, 7] {
            let mut joined = random_floats(7, 0..split, 5, -1.0, 1.0)
                .unwrap()
                .values()
                .to_vec();
            joined.extend_from_slice(random_floats(7, split..10, 5, -1.0, 1.0).unwrap().values());
            assert_eq!(joined, all.values().to_vec());
        }
        assert!(all.values().iter().all(|v| (-1.0..1.0).contains(v)));
        assert_ne!(random_floats(8, 0..10, 5, -1.0, 1.0).unwrap(), all);
    }

    #[test]
    fn bad_bounds_and_nulls_are_errors() {
        assert!(random_floats(1, 0..1, 1, 1.0, 1.0).is_err());
        let x = Float32Array::from(vec![Some(1.0), None]);
        assert_eq!(
            square(&x, SquareMethod::Multiply).unwrap_err().to_string(),
            "square: input has 1 null values"
        );
    }
}
