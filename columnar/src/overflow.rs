//! Capacity overflows: the diagnostic product a step publishes when one of its fixed
//! capacities truncated an event, and their tally for the run summary.
//!
//! A step that has capacities (a bound on rows it keeps) declares an output of type
//! [`CAPACITY_OVERFLOWS`] and publishes, per event, one row for each capacity the event
//! reached: the capacity's name, its limit, what the event demanded and how many
//! objects (modules, hits, cells...) were cut. The executor reads every such product and
//! the run summary warns, per step and capacity, how many events were truncated — no
//! truncation is silent. The framework knows no detector: the names are the step's.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, SchemaRef};

use crate::error::{Error, Result};
use crate::product::{product_schema, Product};

/// Product type name of capacity overflows.
pub const CAPACITY_OVERFLOWS: &str = "capacity_overflows";

/// Schema of [`CAPACITY_OVERFLOWS`]: `capacity` (name), `limit`, `demanded` (null when the
/// step stops counting at the limit, so only "more than `limit`" is known) and `truncated`
/// (objects cut: pixels, clusters, hits, cells, tuples...; a lower bound when `demanded`
/// is null).
pub fn overflow_schema() -> SchemaRef {
    product_schema(
        CAPACITY_OVERFLOWS,
        1,
        vec![
            Field::new("capacity", DataType::Utf8, false),
            Field::new("limit", DataType::UInt64, false),
            Field::new("demanded", DataType::UInt64, true),
            Field::new("truncated", DataType::UInt64, false),
        ],
    )
}

/// One capacity an event reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overflow {
    /// The capacity's name (documented by the step, e.g. in docs/products.md).
    pub capacity: &'static str,
    /// Its value in this job.
    pub limit: u64,
    /// What the event needed, when the step counted it.
    pub demanded: Option<u64>,
    /// Objects cut (a lower bound when `demanded` is `None`).
    pub truncated: u64,
}

/// The overflows of one event.
pub type EventOverflows = Vec<Overflow>;

/// Builds the [`CAPACITY_OVERFLOWS`] product from each event's overflows (events in order).
///
/// ```
/// use quiver_columnar::overflow::{overflow_product, Overflow};
/// let o = Overflow { capacity: "hits_per_event", limit: 10, demanded: Some(12), truncated: 2 };
/// let p = overflow_product(&[vec![], vec![o]]).unwrap();
/// assert_eq!((p.n_events(), p.event_rows(1)), (2, 0..1));
/// ```
pub fn overflow_product(events: &[EventOverflows]) -> Result<Product> {
    let all: Vec<&Overflow> = events.iter().flatten().collect();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            all.iter().map(|o| o.capacity),
        )),
        Arc::new(UInt64Array::from_iter_values(all.iter().map(|o| o.limit))),
        Arc::new(all.iter().map(|o| o.demanded).collect::<UInt64Array>()),
        Arc::new(UInt64Array::from_iter_values(
            all.iter().map(|o| o.truncated),
        )),
    ];
    Product::from_lengths(
        RecordBatch::try_new(overflow_schema(), cols)?,
        events.iter().map(Vec::len),
    )
}

/// Per step label and capacity: events that reached it, the largest demand seen, the limit
/// and the objects cut, summed over the job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OverflowTally {
    /// Events that reached the capacity.
    pub events: u64,
    /// The capacity's limit.
    pub limit: u64,
    /// The largest demand counted (`None` when never counted).
    pub max_demanded: Option<u64>,
    /// Objects cut, summed.
    pub truncated: u64,
}

/// Overflows of a job, keyed by (step label, capacity).
pub type OverflowTallies = BTreeMap<(String, String), OverflowTally>;

/// Adds the rows of a [`CAPACITY_OVERFLOWS`] product published by step `label`.
pub fn tally(into: &mut OverflowTallies, label: &str, p: &Product) -> Result<()> {
    let b = p.batch();
    let col = |n: &str| {
        b.column_by_name(n).ok_or_else(|| {
            Error::data(format!(
                "{CAPACITY_OVERFLOWS} of '{label}' has no column '{n}'"
            ))
        })
    };
    let bad = || {
        Error::data(format!(
            "{CAPACITY_OVERFLOWS} of '{label}' does not have the schema of overflow_schema()"
        ))
    };
    let cap = col("capacity")?
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(bad)?;
    let u64s = |n: &str| -> Result<&UInt64Array> {
        col(n)?
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(bad)
    };
    let (limit, demanded, truncated) = (u64s("limit")?, u64s("demanded")?, u64s("truncated")?);
    for e in 0..p.n_events() {
        for r in p.event_rows(e) {
            let t = into
                .entry((label.to_string(), cap.value(r).to_string()))
                .or_default();
            t.events += 1;
            t.limit = limit.value(r);
            if demanded.is_valid(r) {
                t.max_demanded = Some(t.max_demanded.unwrap_or(0).max(demanded.value(r)));
            }
            t.truncated += truncated.value(r);
        }
    }
    Ok(())
}

/// The warning lines of the run summary, one per (step, capacity) reached.
///
/// ```
/// use quiver_columnar::overflow::{render_warnings, OverflowTallies, OverflowTally};
/// let mut t = OverflowTallies::new();
/// t.insert(("hits".into(), "hits_per_event".into()),
///          OverflowTally { events: 3, limit: 49152, max_demanded: Some(61000), truncated: 30000 });
/// let w = render_warnings(&t, 10);
/// assert!(w[0].contains("step 'hits': capacity 'hits_per_event' (49152) reached in 3 of 10 events"));
/// ```
pub fn render_warnings(t: &OverflowTallies, events: u64) -> Vec<String> {
    t.iter()
        .map(|((label, cap), v)| {
            let demand = v.max_demanded.map(|d| format!("up to {d} needed")).unwrap_or_else(|| "more needed, not counted".into());
            format!(
                "warning: step '{label}': capacity '{cap}' ({}) reached in {} of {events} events ({demand}; {} cut) — \
                 the products of those events are truncated; set capacities = \"sized\" on the step to size it from the event \
                 (rows in {CAPACITY_OVERFLOWS}.{label})",
                v.limit, v.events, v.truncated
            )
        })
        .collect()
}
