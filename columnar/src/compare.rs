//! Element-by-element comparison of two products of one type, and the `compare` step that
//! checks two implementations of a step against each other in one job.

use std::collections::BTreeMap;
use std::sync::Mutex;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrowPrimitiveType, PrimitiveArray};
use arrow_schema::{DataType, SortOptions};

use crate::error::{Error, Result};
use crate::params::{ParamKind, ParamSpec, ParamValue};
use crate::product::{Product, ProductKey};
use crate::step::{Backend, EventBatch, InputSpec, Registry, Signature, Step, StepType};

/// Allowed difference for floating-point columns: `|a − b| ≤ absolute + relative·max(|a|,|b|)`.
/// With both zero, floats must be bit-identical.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tolerance {
    pub absolute: f64,
    pub relative: f64,
}

/// Tolerances of a comparison: `default` for floating-point columns, and overrides by
/// column name, which apply to integer columns too (integers are otherwise exact).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tolerances {
    pub default: Tolerance,
    pub per_column: BTreeMap<String, Tolerance>,
}

impl Tolerances {
    /// Parses overrides written `column=absolute` or `column=absolute,relative`.
    ///
    /// ```
    /// use quiver_columnar::compare::{Tolerance, Tolerances};
    /// let t = Tolerances::with_overrides(Tolerance::default(), &["x_global=1e-6", "charge=2,0.01"]).unwrap();
    /// assert_eq!(t.per_column["charge"], Tolerance { absolute: 2.0, relative: 0.01 });
    /// assert!(Tolerances::with_overrides(Tolerance::default(), &["x_global"]).is_err());
    /// ```
    pub fn with_overrides(default: Tolerance, overrides: &[impl AsRef<str>]) -> Result<Self> {
        let mut per_column = BTreeMap::new();
        for o in overrides {
            let o = o.as_ref();
            let bad = || {
                Error::data(format!("column tolerance \"{o}\": expected \"column=absolute\" or \"column=absolute,relative\" (both ≥ 0)"))
            };
            let (col, vals) = o.split_once('=').ok_or_else(bad)?;
            let (abs, rel) = match vals.split_once(',') {
                Some((a, r)) => (a, r),
                None => (vals, "0"),
            };
            let t = Tolerance {
                absolute: abs.trim().parse().map_err(|_| bad())?,
                relative: rel.trim().parse().map_err(|_| bad())?,
            };
            if col.trim().is_empty() || !(t.absolute >= 0.0 && t.relative >= 0.0) {
                return Err(bad());
            }
            if per_column.insert(col.trim().to_string(), t).is_some() {
                return Err(Error::data(format!(
                    "column tolerance for '{}' given twice",
                    col.trim()
                )));
            }
        }
        Ok(Tolerances {
            default,
            per_column,
        })
    }
}

/// One differing element.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    /// Absolute event number.
    pub event: u64,
    /// Row within the event.
    pub row: usize,
    /// Column name, or `<rows>` when the events have different row counts.
    pub column: String,
    pub a: String,
    pub b: String,
}

/// The outcome of comparing two products.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    /// Differences per column (only columns with differences).
    pub per_column: BTreeMap<String, u64>,
    /// The first difference in (event, row, column) order.
    pub first: Option<Difference>,
    /// Rows compared.
    pub rows: u64,
    /// Float values equal within the tolerance but not bit-identical, per column (only
    /// columns that have some; always empty with a zero tolerance).
    pub inexact: BTreeMap<String, u64>,
}

impl Comparison {
    /// Total differences.
    pub fn total(&self) -> u64 {
        self.per_column.values().sum()
    }
}

fn float_eq(a: f64, b: f64, tol: Tolerance) -> bool {
    if tol.absolute == 0.0 && tol.relative == 0.0 {
        return a.to_bits() == b.to_bits();
    }
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    (a - b).abs() <= tol.absolute + tol.relative * a.abs().max(b.abs())
}

/// Indices (rows) where two equally long primitive arrays differ.
fn diff_primitive<T: ArrowPrimitiveType>(
    a: &PrimitiveArray<T>,
    b: &PrimitiveArray<T>,
    eq: impl Fn(T::Native, T::Native) -> bool,
) -> Vec<usize> {
    (0..a.len())
        .filter(|&i| !eq(a.value(i), b.value(i)))
        .collect()
}

fn fmt_value(a: &dyn Array, i: usize) -> String {
    macro_rules! prim {
        ($t:ty) => {
            format!("{:?}", a.as_primitive::<$t>().value(i))
        };
    }
    if a.is_null(i) {
        return "null".into();
    }
    match a.data_type() {
        DataType::Float32 => prim!(Float32Type),
        DataType::Float64 => prim!(Float64Type),
        DataType::Int8 => prim!(Int8Type),
        DataType::Int16 => prim!(Int16Type),
        DataType::Int32 => prim!(Int32Type),
        DataType::Int64 => prim!(Int64Type),
        DataType::UInt8 => prim!(UInt8Type),
        DataType::UInt16 => prim!(UInt16Type),
        DataType::UInt32 => prim!(UInt32Type),
        DataType::UInt64 => prim!(UInt64Type),
        _ => format!("{:?}", a.slice(i, 1)),
    }
}

/// Rows where two float value runs (`width` values per row) differ beyond `tol`, and the
/// values within it that are not bit-identical.
fn diff_floats<T: Copy>(
    a: &[T],
    b: &[T],
    width: usize,
    tol: Tolerance,
    wide: impl Fn(T) -> f64,
    same_bits: impl Fn(T, T) -> bool,
) -> (Vec<usize>, u64) {
    let (mut rows, mut inexact) = (Vec::new(), 0u64);
    for (r, (ra, rb)) in a.chunks_exact(width).zip(b.chunks_exact(width)).enumerate() {
        let mut differs = false;
        for (&x, &y) in ra.iter().zip(rb) {
            if same_bits(x, y) {
                continue;
            }
            if float_eq(wide(x), wide(y), tol) {
                inexact += 1;
            } else {
                differs = true;
            }
        }
        if differs {
            rows.push(r);
        }
    }
    (rows, inexact)
}

/// Rows where two columns of equal length and type differ, and how many float values are
/// equal within the tolerance without being bit-identical. Floats (also inside fixed-size
/// lists, e.g. track states) compare with `tol`; integers are exact unless `int_tol` is
/// given (a per-column override).
fn diff_column(
    a: &dyn Array,
    b: &dyn Array,
    tol: Tolerance,
    int_tol: Option<Tolerance>,
) -> Result<(Vec<usize>, u64)> {
    macro_rules! exact {
        ($t:ty) => {
            match int_tol {
                Some(t) if t != Tolerance::default() => {
                    diff_primitive(a.as_primitive::<$t>(), b.as_primitive::<$t>(), |x, y| {
                        float_eq(x as f64, y as f64, t)
                    })
                }
                _ => diff_primitive(a.as_primitive::<$t>(), b.as_primitive::<$t>(), |x, y| {
                    x == y
                }),
            }
        };
    }
    let f32s = |x: &dyn Array, y: &dyn Array, w: usize| {
        diff_floats(
            x.as_primitive::<Float32Type>().values(),
            y.as_primitive::<Float32Type>().values(),
            w,
            tol,
            |v| v as f64,
            |p, q| p.to_bits() == q.to_bits(),
        )
    };
    let f64s = |x: &dyn Array, y: &dyn Array, w: usize| {
        diff_floats(
            x.as_primitive::<Float64Type>().values(),
            y.as_primitive::<Float64Type>().values(),
            w,
            tol,
            |v| v,
            |p, q| p.to_bits() == q.to_bits(),
        )
    };
    if a.null_count() == 0 && b.null_count() == 0 {
        let rows = match a.data_type() {
            DataType::Float32 => return Ok(f32s(a, b, 1)),
            DataType::Float64 => return Ok(f64s(a, b, 1)),
            DataType::FixedSizeList(item, w)
                if matches!(item.data_type(), DataType::Float32 | DataType::Float64) =>
            {
                let (la, lb) = (a.as_fixed_size_list(), b.as_fixed_size_list());
                let (va, vb, w) = (la.values(), lb.values(), *w as usize);
                if w == 0
                    || va.null_count() + vb.null_count() > 0
                    || va.len() != la.len() * w
                    || vb.len() != lb.len() * w
                {
                    return Ok((diff_generic(a, b)?, 0));
                }
                return Ok(if *item.data_type() == DataType::Float32 {
                    f32s(va, vb, w)
                } else {
                    f64s(va, vb, w)
                });
            }
            DataType::Int8 => exact!(Int8Type),
            DataType::Int16 => exact!(Int16Type),
            DataType::Int32 => exact!(Int32Type),
            DataType::Int64 => exact!(Int64Type),
            DataType::UInt8 => exact!(UInt8Type),
            DataType::UInt16 => exact!(UInt16Type),
            DataType::UInt32 => exact!(UInt32Type),
            DataType::UInt64 => exact!(UInt64Type),
            _ => return Ok((diff_generic(a, b)?, 0)),
        };
        return Ok((rows, 0));
    }
    Ok((diff_generic(a, b)?, 0))
}

fn diff_generic(a: &dyn Array, b: &dyn Array) -> Result<Vec<usize>> {
    let cmp = arrow_ord::ord::make_comparator(a, b, SortOptions::default())?;
    Ok((0..a.len())
        .filter(|&i| cmp(i, i) != std::cmp::Ordering::Equal)
        .collect())
}

/// Compares products `a` and `b` of one batch starting at `first_event`, column by column.
/// The schemas must have the same columns and types; events with different row counts are
/// reported under the column `<rows>` and their rows are not compared further.
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Float32Array, RecordBatch};
/// use quiver_columnar::compare::{compare_products, Tolerance};
/// use quiver_columnar::product::Product;
/// use quiver_columnar::toy::floats_schema;
/// let p = |v: Vec<f32>| Product::from_lengths(
///     RecordBatch::try_new(floats_schema(), vec![Arc::new(Float32Array::from(v))]).unwrap(), [1, 2]).unwrap();
/// let c = compare_products(&p(vec![1.0, 2.0, 3.0]), &p(vec![1.0, 2.5, 3.0]), 10, Tolerance::default()).unwrap();
/// let d = c.first.unwrap();
/// assert_eq!((d.event, d.row, d.column.as_str(), d.a.as_str(), d.b.as_str()), (11, 0, "value", "2.0", "2.5"));
/// let c = compare_products(&p(vec![1.0, 2.0, 3.0]), &p(vec![1.0, 2.5, 3.0]), 10, Tolerance { absolute: 0.5, relative: 0.0 }).unwrap();
/// assert_eq!(c.total(), 0);
/// ```
pub fn compare_products(
    a: &Product,
    b: &Product,
    first_event: u64,
    tol: Tolerance,
) -> Result<Comparison> {
    compare_products_with(
        a,
        b,
        first_event,
        &Tolerances {
            default: tol,
            per_column: BTreeMap::new(),
        },
    )
}

/// [`compare_products`] with per-column tolerances; a column named in `tol.per_column`
/// that the products lack is an error (a typo would otherwise go unnoticed).
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Float32Array, RecordBatch};
/// use quiver_columnar::compare::{compare_products_with, Tolerance, Tolerances};
/// use quiver_columnar::product::Product;
/// use quiver_columnar::toy::floats_schema;
/// let p = |v: Vec<f32>| Product::from_lengths(
///     RecordBatch::try_new(floats_schema(), vec![Arc::new(Float32Array::from(v))]).unwrap(), [2]).unwrap();
/// let t = Tolerances::with_overrides(Tolerance::default(), &["value=0.01"]).unwrap();
/// assert_eq!(compare_products_with(&p(vec![1.0, 2.0]), &p(vec![1.005, 2.0]), 0, &t).unwrap().total(), 0);
/// let t = Tolerances::with_overrides(Tolerance::default(), &["valeu=0.01"]).unwrap();
/// assert!(compare_products_with(&p(vec![1.0, 2.0]), &p(vec![1.0, 2.0]), 0, &t).is_err());
/// ```
pub fn compare_products_with(
    a: &Product,
    b: &Product,
    first_event: u64,
    tol: &Tolerances,
) -> Result<Comparison> {
    let (sa, sb) = (a.batch().schema(), b.batch().schema());
    if let Some(missing) = tol
        .per_column
        .keys()
        .find(|c| sa.field_with_name(c).is_err())
    {
        return Err(Error::data(format!(
            "a tolerance is given for column '{missing}', which '{}' products do not have",
            a.type_name()
        )));
    }
    if sa.fields().len() != sb.fields().len() {
        return Err(Error::data(format!(
            "products have {} and {} columns",
            sa.fields().len(),
            sb.fields().len()
        )));
    }
    for (fa, fb) in sa.fields().iter().zip(sb.fields()) {
        if fa.name() != fb.name() || fa.data_type() != fb.data_type() {
            return Err(Error::data(format!(
                "column '{}' ({}) does not match column '{}' ({})",
                fa.name(),
                fa.data_type(),
                fb.name(),
                fb.data_type()
            )));
        }
    }
    if a.n_events() != b.n_events() {
        return Err(Error::data(format!(
            "products cover {} and {} events",
            a.n_events(),
            b.n_events()
        )));
    }
    let mut out = Comparison::default();
    let mut first: Option<(u64, usize, usize, Difference)> = None;
    let mut note = |d: Difference, col_index: usize, out: &mut Comparison| {
        *out.per_column.entry(d.column.clone()).or_default() += 1;
        let key = (d.event, d.row, col_index);
        if first.as_ref().is_none_or(|(e, r, c, _)| key < (*e, *r, *c)) {
            first = Some((key.0, key.1, key.2, d));
        }
    };
    // Events with equal row counts are compared as whole-column runs.
    let mut same: Vec<std::ops::Range<usize>> = Vec::new();
    for e in 0..a.n_events() {
        let (ra, rb) = (a.event_rows(e), b.event_rows(e));
        if ra.len() != rb.len() {
            let d = Difference {
                event: first_event + e as u64,
                row: 0,
                column: "<rows>".into(),
                a: ra.len().to_string(),
                b: rb.len().to_string(),
            };
            note(d, 0, &mut out);
        } else {
            out.rows += ra.len() as u64;
            same.push(e..e + 1);
        }
    }
    for (ci, (ca, cb)) in a
        .batch()
        .columns()
        .iter()
        .zip(b.batch().columns())
        .enumerate()
    {
        let name = sa.field(ci).name();
        for ev in &same {
            let e = ev.start;
            let (ra, rb) = (a.event_rows(e), b.event_rows(e));
            if ra.is_empty() {
                continue;
            }
            let (xa, xb) = (ca.slice(ra.start, ra.len()), cb.slice(rb.start, rb.len()));
            let col_tol = tol.per_column.get(name.as_str()).copied();
            let (rows, inexact) = diff_column(&xa, &xb, col_tol.unwrap_or(tol.default), col_tol)?;
            if inexact > 0 {
                *out.inexact.entry(name.clone()).or_default() += inexact;
            }
            for row in rows {
                let d = Difference {
                    event: first_event + e as u64,
                    row,
                    column: name.clone(),
                    a: fmt_value(&xa, row),
                    b: fmt_value(&xb, row),
                };
                note(d, ci + 1, &mut out);
            }
        }
    }
    out.first = first.map(|f| f.3);
    Ok(out)
}

/// A comparison's running totals: rows, differences per column, the first difference,
/// inexact values per column.
#[derive(Default)]
struct Totals(
    u64,
    BTreeMap<String, u64>,
    Option<Difference>,
    BTreeMap<String, u64>,
);

struct CompareStep {
    a: ProductKey,
    b: ProductKey,
    tol: Tolerances,
    strict: bool,
    totals: Mutex<Totals>,
}

impl Step for CompareStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let (pa, pb) = (batch.get(&self.a)?, batch.get(&self.b)?);
        if pa.type_name() != pb.type_name() {
            return Err(Error::data(format!(
                "cannot compare {} with {}: different product types",
                self.a, self.b
            )));
        }
        let c = compare_products_with(&pa, &pb, batch.first_event(), &self.tol)
            .map_err(|e| Error::data(format!("comparing {} with {}: {e}", self.a, self.b)))?;
        if let (true, Some(d)) = (self.strict, &c.first) {
            return Err(Error::data(format!(
                "{} and {} differ at event {}, row {}, column '{}': {} vs {}",
                self.a, self.b, d.event, d.row, d.column, d.a, d.b
            )));
        }
        let mut t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        t.0 += c.rows;
        for (k, v) in c.per_column {
            *t.1.entry(k).or_default() += v;
        }
        if let Some(d) = c.first {
            if t.2
                .as_ref()
                .is_none_or(|f| (d.event, d.row) < (f.event, f.row))
            {
                t.2 = Some(d);
            }
        }
        for (k, v) in c.inexact {
            *t.3.entry(k).or_default() += v;
        }
        Ok(())
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        let t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        let total: u64 = t.1.values().sum();
        let mut s = format!(
            "compared {} with {}: {} rows, {} differences",
            self.a, self.b, t.0, total
        );
        for (col, n) in &t.1 {
            s.push_str(&format!("\n  {col}: {n}"));
        }
        if let Some(d) = &t.2 {
            s.push_str(&format!(
                "\n  first: event {}, row {}, column '{}': {} vs {}",
                d.event, d.row, d.column, d.a, d.b
            ));
        }
        if !t.3.is_empty() {
            let n: u64 = t.3.values().sum();
            let cols: Vec<String> = t.3.iter().map(|(c, v)| format!("{c} {v}")).collect();
            s.push_str(&format!(
                "\n  within tolerance but not bit-identical: {n} values ({})",
                cols.join(", ")
            ));
        }
        Ok(Some(s))
    }
}

/// Registers `compare`.
pub fn register(r: &mut Registry) {
    r.add(StepType {
        name: "compare",
        doc: "Compares two products of one type element by element",
        params: vec![
            ParamSpec::float("tolerance", 0.0, "absolute tolerance for float columns (0 with relative 0: bit-identical)").within(0.0, f64::MAX),
            ParamSpec::float("relative_tolerance", 0.0, "relative tolerance for float columns").within(0.0, f64::MAX),
            ParamSpec::bool("strict", true, "fail the job at the first difference; otherwise count and report"),
            ParamSpec {
                name: "column_tolerances",
                kind: ParamKind::StrList,
                default: Some(ParamValue::StrList(Vec::new())),
                doc: "per-column overrides \"column=absolute[,relative]\" (also for integer columns)",
                range: None,
            },
        ],
        signature: Signature {
            inputs: vec![InputSpec::any("a", "first product (label or label:type)"), InputSpec::any("b", "second product")],
            outputs: vec![],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            let tol = Tolerance { absolute: cfg.params.float("tolerance"), relative: cfg.params.float("relative_tolerance") };
            if !(tol.absolute >= 0.0 && tol.relative >= 0.0) {
                return Err(cfg.param_error("tolerance", "tolerances must be ≥ 0"));
            }
            let (a, b) = (cfg.input("a")?, cfg.input("b")?);
            if a.type_name != b.type_name {
                return Err(Error::plan(&cfg.label, format!("inputs 'a' ({a}) and 'b' ({b}) have different product types")));
            }
            let tol = Tolerances::with_overrides(tol, cfg.params.str_list("column_tolerances"))
                .map_err(|e| cfg.param_error("column_tolerances", e))?;
            Ok(Box::new(CompareStep { a, b, tol, strict: cfg.params.bool("strict"), totals: Mutex::new(Default::default()) }))
        },
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, ListArray, RecordBatch};
    use arrow_schema::Field;
    use std::sync::Arc;

    fn product(
        values: Vec<i32>,
        lists: Vec<Option<Vec<Option<i32>>>>,
        lengths: &[usize],
    ) -> Product {
        let schema = crate::product::product_schema(
            "thing",
            1,
            vec![
                Field::new("n", DataType::Int32, false),
                Field::new(
                    "hits",
                    DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
                    true,
                ),
            ],
        );
        let l = ListArray::from_iter_primitive::<Int32Type, _, _>(lists);
        let rb = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int32Array::from(values)), Arc::new(l)],
        )
        .unwrap();
        Product::from_lengths(rb, lengths.iter().copied()).unwrap()
    }

    #[test]
    fn integers_and_lists_are_compared_exactly() {
        let a = product(
            vec![1, 2, 3],
            vec![Some(vec![Some(1)]), None, Some(vec![Some(2), Some(3)])],
            &[2, 1],
        );
        let b = product(
            vec![1, 2, 4],
            vec![Some(vec![Some(1)]), None, Some(vec![Some(2), Some(4)])],
            &[2, 1],
        );
        let c = compare_products(&a, &b, 0, Tolerance::default()).unwrap();
        assert_eq!(c.total(), 2);
        assert_eq!(c.per_column["n"], 1);
        assert_eq!(c.per_column["hits"], 1);
        let d = c.first.unwrap();
        assert_eq!(
            (
                d.event,
                d.row,
                d.column.as_str(),
                d.a.as_str(),
                d.b.as_str()
            ),
            (1, 0, "n", "3", "4")
        );
        assert_eq!(
            compare_products(&a, &a, 0, Tolerance::default())
                .unwrap()
                .total(),
            0
        );
    }

    #[test]
    fn fixed_size_float_lists_take_the_tolerance_and_inexact_values_are_counted() {
        let item = Arc::new(Field::new("item", DataType::Float32, false));
        let schema = crate::product::product_schema(
            "state",
            1,
            vec![Field::new(
                "state",
                DataType::FixedSizeList(item.clone(), 2),
                false,
            )],
        );
        let p = |v: Vec<f32>| {
            let l = arrow_array::FixedSizeListArray::try_new(
                item.clone(),
                2,
                Arc::new(arrow_array::Float32Array::from(v)),
                None,
            )
            .unwrap();
            Product::from_lengths(
                RecordBatch::try_new(schema.clone(), vec![Arc::new(l)]).unwrap(),
                [1, 2],
            )
            .unwrap()
        };
        let (a, b) = (
            p(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            p(vec![
                1.0,
                2.0,
                3.0,
                f32::from_bits(4.0f32.to_bits() + 1),
                5.0,
                6.5,
            ]),
        );
        // Bit-identical by default: rows 0 (event 1) and 1 (event 1) of the second event differ.
        let c = compare_products(&a, &b, 0, Tolerance::default()).unwrap();
        assert_eq!((c.per_column["state"], c.inexact.len()), (2, 0));
        // With a relative tolerance the one-ulp difference is inexact, the 0.5 a difference.
        let c = compare_products(
            &a,
            &b,
            0,
            Tolerance {
                absolute: 0.0,
                relative: 1e-6,
            },
        )
        .unwrap();
        assert_eq!((c.per_column["state"], c.inexact["state"]), (1, 1));
        let d = c.first.unwrap();
        assert_eq!((d.event, d.row), (1, 1));
        assert_eq!(
            compare_products(
                &a,
                &b,
                0,
                Tolerance {
                    absolute: 1.0,
                    relative: 0.0
                }
            )
            .unwrap()
            .total(),
            0
        );
    }

    #[test]
    fn different_row_counts_are_reported() {
        let a = product(vec![1, 2, 3], vec![None, None, None], &[2, 1]);
        let b = product(vec![1, 2, 3], vec![None, None, None], &[1, 2]);
        let c = compare_products(&a, &b, 5, Tolerance::default()).unwrap();
        let d = c.first.unwrap();
        assert_eq!(
            (d.event, d.column.as_str(), d.a.as_str(), d.b.as_str()),
            (5, "<rows>", "2", "1")
        );
        assert_eq!(c.per_column["<rows>"], 2);
    }

    #[test]
    fn per_column_tolerances_apply_to_integers_too() {
        let a = product(vec![100, 2, 3], vec![None, None, None], &[2, 1]);
        let b = product(vec![101, 2, 3], vec![None, None, None], &[2, 1]);
        assert_eq!(
            compare_products(
                &a,
                &b,
                0,
                Tolerance {
                    absolute: 5.0,
                    relative: 0.0
                }
            )
            .unwrap()
            .total(),
            1,
            "default: floats only"
        );
        let t = Tolerances::with_overrides(Tolerance::default(), &["n=1"]).unwrap();
        assert_eq!(compare_products_with(&a, &b, 0, &t).unwrap().total(), 0);
        let t = Tolerances::with_overrides(Tolerance::default(), &["n=0,0.005"]).unwrap();
        assert_eq!(compare_products_with(&a, &b, 0, &t).unwrap().total(), 1);
        let t = Tolerances::with_overrides(Tolerance::default(), &["n=0,0.01"]).unwrap();
        assert_eq!(compare_products_with(&a, &b, 0, &t).unwrap().total(), 0);
        let e = compare_products_with(
            &a,
            &b,
            0,
            &Tolerances::with_overrides(Tolerance::default(), &["m=1"]).unwrap(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "a tolerance is given for column 'm', which 'thing' products do not have"
        );
        for bad in ["n", "n=-1", "=1", "n=1,x", "n=nan"] {
            assert!(
                Tolerances::with_overrides(Tolerance::default(), &[bad]).is_err(),
                "{bad}"
            );
        }
        assert!(Tolerances::with_overrides(Tolerance::default(), &["n=1", "n=2"]).is_err());
    }

    #[test]
    fn zero_tolerance_is_bitwise_and_tolerances_apply() {
        assert!(!float_eq(0.0, -0.0, Tolerance::default()));
        assert!(float_eq(f64::NAN, f64::NAN, Tolerance::default()));
        assert!(float_eq(
            100.0,
            101.0,
            Tolerance {
                absolute: 0.0,
                relative: 0.01
            }
        ));
        assert!(!float_eq(
            100.0,
            102.0,
            Tolerance {
                absolute: 0.0,
                relative: 0.01
            }
        ));
        assert!(!float_eq(
            1.0,
            f64::NAN,
            Tolerance {
                absolute: 1.0,
                relative: 0.0
            }
        ));
    }
}
