//! Getting products out of a run: a sink step that keeps the products it is given (shared,
//! never copied) and hands them back per batch in event order. The Python driver uses it to
//! return every product as a table; Rust callers can too.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;

use crate::error::{Error, Result};
use crate::executor::{self, RunOptions, Summary};
use crate::plan::{ResolvedPlan, ResolvedStep};
use crate::product::{Product, ProductKey};
use crate::step::{Backend, EventBatch, Step};

/// Label of the collector step appended to a plan (not a valid plan label, so it cannot
/// collide with a user's step).
pub const COLLECT_LABEL: &str = "(collect)";

type Store = BTreeMap<ProductKey, BTreeMap<u64, Arc<Product>>>;

/// The sink step: keeps each key's product of every batch, keyed by first event.
struct Collector {
    keys: Vec<ProductKey>,
    store: Arc<Mutex<Store>>,
}

impl Step for Collector {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let got: Vec<(ProductKey, Arc<Product>)> = self
            .keys
            .iter()
            .map(|k| batch.get(k).map(|p| (k.clone(), p)))
            .collect::<Result<_>>()?;
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        for (k, p) in got {
            store.entry(k).or_default().insert(batch.first_event(), p);
        }
        Ok(())
    }
}

/// Products kept by a run, per key, as `(first_event, product)` in event order.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    products: BTreeMap<ProductKey, Vec<(u64, Arc<Product>)>>,
}

impl Collected {
    /// The keys kept.
    pub fn keys(&self) -> impl Iterator<Item = &ProductKey> {
        self.products.keys()
    }
    /// The batches of one product, `(first_event, product)`, in event order.
    pub fn get(&self, key: &ProductKey) -> Option<&[(u64, Arc<Product>)]> {
        self.products.get(key).map(Vec::as_slice)
    }
    /// One product as record batches with the `event` column first (how outputs and Python
    /// see it); the product columns are shared, not copied.
    pub fn with_event_column(&self, key: &ProductKey) -> Result<Vec<RecordBatch>> {
        let parts = self
            .get(key)
            .ok_or_else(|| Error::data(format!("product {key} was not collected")))?;
        parts
            .iter()
            .map(|(first, p)| p.with_event_column(*first))
            .collect()
    }
}

/// Resolves product selectors (`label` for every product of a step, or `label:type`) to
/// keys among the plan's outputs; no selector means every product.
///
/// ```
/// use quiver_columnar::{collect, plan, Registry};
/// let spec = plan::PlanSpec::from_toml("[[step]]\nlabel = \"n\"\ntype = \"random_floats\"\n", "t").unwrap();
/// let p = plan::validate(&spec, &Registry::with_builtin()).unwrap();
/// assert_eq!(collect::select(&p, &[]).unwrap().len(), 1);
/// assert!(collect::select(&p, &["m".into()]).unwrap_err().to_string().contains("no step 'm'"));
/// ```
pub fn select(plan: &ResolvedPlan, selectors: &[String]) -> Result<Vec<ProductKey>> {
    let all: Vec<&ProductKey> = plan.steps.iter().flat_map(|s| s.outputs.iter()).collect();
    if selectors.is_empty() {
        return Ok(all.into_iter().cloned().collect());
    }
    let mut keys = Vec::new();
    for sel in selectors {
        let (label, ty) = match sel.split_once(':') {
            Some((l, t)) => (l, Some(t)),
            None => (sel.as_str(), None),
        };
        let of_label: Vec<&ProductKey> = all.iter().copied().filter(|k| k.label == label).collect();
        if of_label.is_empty() {
            let labels: Vec<&str> = plan
                .steps
                .iter()
                .filter(|s| !s.outputs.is_empty())
                .map(|s| s.label.as_str())
                .collect();
            return Err(Error::plan(
                "",
                format!(
                    "collect '{sel}': no step '{label}' produces anything (producers: {})",
                    labels.join(", ")
                ),
            ));
        }
        let chosen: Vec<&ProductKey> = of_label
            .iter()
            .copied()
            .filter(|k| ty.is_none_or(|t| k.type_name == t))
            .collect();
        if chosen.is_empty() {
            let types: Vec<&str> = of_label.iter().map(|k| k.type_name.as_str()).collect();
            return Err(Error::plan(
                "",
                format!(
                    "collect '{sel}': step '{label}' produces no '{}' (it produces: {})",
                    ty.unwrap_or(""),
                    types.join(", ")
                ),
            ));
        }
        for k in chosen {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
    }
    Ok(keys)
}

/// Runs `steps` (built from `plan`) and keeps the products `keys` of every batch.
///
/// ```
/// use quiver_columnar::{collect, plan, JobContext, Registry, RunOptions};
/// let r = Registry::with_builtin();
/// let spec = plan::PlanSpec::from_toml("[[step]]\nlabel = \"n\"\ntype = \"random_floats\"\ncount = 3\n", "t").unwrap();
/// let p = plan::validate(&spec, &r).unwrap();
/// let steps = p.build(&r, JobContext::default().into()).unwrap();
/// let keys = collect::select(&p, &[]).unwrap();
/// let opts = RunOptions { threads: 2, batch_size: 4, first_event: 0, events: Some(10), progress: false, cycle_input: false };
/// let (summary, got) = collect::run_collect(&p, steps, &opts, &keys).unwrap();
/// assert_eq!(summary.events, 10);
/// let parts = got.get(&keys[0]).unwrap();
/// assert_eq!(parts.iter().map(|(f, _)| *f).collect::<Vec<_>>(), vec![0, 4, 8]);
/// ```
pub fn run_collect(
    plan: &ResolvedPlan,
    mut steps: Vec<Box<dyn Step>>,
    opts: &RunOptions,
    keys: &[ProductKey],
) -> Result<(Summary, Collected)> {
    if steps.len() != plan.steps.len() {
        return Err(Error::data(format!(
            "{} steps built for a plan of {}",
            steps.len(),
            plan.steps.len()
        )));
    }
    let store: Arc<Mutex<Store>> = Arc::default();
    let mut plan = plan.clone();
    if !keys.is_empty() {
        for k in keys {
            if !plan.steps.iter().any(|s| s.outputs.contains(k)) {
                return Err(Error::plan(
                    "",
                    format!("collect: no step of the plan produces {k}"),
                ));
            }
        }
        plan.steps.push(ResolvedStep {
            label: COLLECT_LABEL.into(),
            type_name: "collect".into(),
            backend: Backend::Cpu,
            params: Default::default(),
            inputs: BTreeMap::from([("products".to_string(), keys.to_vec())]),
            outputs: Vec::new(),
        });
        steps.push(Box::new(Collector {
            keys: keys.to_vec(),
            store: store.clone(),
        }));
    }
    let summary = executor::run(&plan, &steps, opts)?;
    drop(steps);
    let store = std::mem::take(&mut *store.lock().unwrap_or_else(|p| p.into_inner()));
    let products = store
        .into_iter()
        .map(|(k, m)| (k, m.into_iter().collect()))
        .collect();
    Ok((summary, Collected { products }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{ParamKind, ParamSpec};
    use crate::plan::{validate, PlanSpec, StepSpec};
    use crate::step::{InputSpec, Registry, Signature, StepType};
    use crate::JobContext;

    #[test]
    fn collected_products_are_the_published_ones_in_event_order() {
        let r = Registry::with_builtin();
        let spec = PlanSpec::from_toml(
            "[[step]]\nlabel = \"n\"\ntype = \"random_floats\"\ncount = 2\n[[step]]\nlabel = \"sq\"\ntype = \"square\"\n",
            "t",
        )
        .unwrap();
        let p = validate(&spec, &r).unwrap();
        let keys = select(&p, &["sq".into()]).unwrap();
        assert_eq!(keys, vec![ProductKey::new("floats", "sq")]);
        for threads in [1, 3] {
            let steps = p.build(&r, JobContext::default().into()).unwrap();
            let opts = RunOptions {
                threads,
                batch_size: 3,
                first_event: 0,
                events: Some(10),
                progress: false,
                cycle_input: false,
            };
            let (_, got) = run_collect(&p, steps, &opts, &keys).unwrap();
            let b = got.with_event_column(&keys[0]).unwrap();
            assert_eq!(b.len(), 4);
            let events: Vec<u32> = b
                .iter()
                .flat_map(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<arrow_array::UInt32Array>()
                        .unwrap()
                        .values()
                        .to_vec()
                })
                .collect();
            assert_eq!(events, (0..10).flat_map(|e| [e, e]).collect::<Vec<u32>>());
        }
        assert!(select(&p, &["sq:ints".into()])
            .unwrap_err()
            .to_string()
            .contains("step 'sq' produces no 'ints' (it produces: floats)"));
    }

    #[test]
    fn a_range_of_events_gives_the_same_products_as_the_whole_run() {
        let r = Registry::with_builtin();
        let spec = PlanSpec::from_toml(
            "[[step]]\nlabel = \"n\"\ntype = \"random_floats\"\ncount = 3\n",
            "t",
        )
        .unwrap();
        let p = validate(&spec, &r).unwrap();
        let keys = select(&p, &["n".into()]).unwrap();
        let values = |first_event, events| {
            let steps = p.build(&r, JobContext::default().into()).unwrap();
            let opts = RunOptions {
                threads: 2,
                batch_size: 4,
                first_event,
                events: Some(events),
                progress: false,
                cycle_input: false,
            };
            let (summary, got) = run_collect(&p, steps, &opts, &keys).unwrap();
            assert_eq!(summary.events, events);
            let b = got.with_event_column(&keys[0]).unwrap();
            let col = |i: usize| -> Vec<f64> {
                b.iter()
                    .flat_map(|b| {
                        arrow_array::cast::as_primitive_array::<arrow_array::types::Float32Type>(
                            b.column(i),
                        )
                        .values()
                        .iter()
                        .map(|&v| v as f64)
                        .collect::<Vec<_>>()
                    })
                    .collect()
            };
            let ev: Vec<u32> = b
                .iter()
                .flat_map(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<arrow_array::UInt32Array>()
                        .unwrap()
                        .values()
                        .to_vec()
                })
                .collect();
            (ev, col(1))
        };
        let (all_ev, all) = values(0, 12);
        let (ev, part) = values(5, 6);
        assert_eq!(ev, (5..11).flat_map(|e| [e; 3]).collect::<Vec<u32>>());
        assert_eq!(all_ev[15..33], ev[..]);
        assert_eq!(all[15..33], part[..]);
    }

    fn dynamic_sig(s: &StepSpec) -> Result<(Signature, Vec<ParamSpec>)> {
        let out = s
            .keys
            .get("makes")
            .and_then(|v| v.as_str())
            .ok_or_else(|| Error::plan(&s.label, "parameter 'makes' is required"))?;
        Ok((
            Signature {
                inputs: vec![InputSpec::one("input", "floats", "x")],
                outputs: vec![out.to_string()],
            },
            vec![ParamSpec::required("makes", ParamKind::Str, "output type")],
        ))
    }

    #[test]
    fn dynamic_signatures_are_validated_like_static_ones() {
        let mut r = Registry::with_builtin();
        r.add_dynamic(
            StepType {
                name: "dyn",
                doc: "test",
                params: vec![],
                signature: Signature::default(),
                backends: vec![Backend::Cpu],
                build: |_| Err(Error::data("not built in this test")),
            },
            dynamic_sig,
        );
        let plan = |extra: &str| {
            PlanSpec::from_toml(&format!("[[step]]\nlabel = \"n\"\ntype = \"random_floats\"\n[[step]]\nlabel = \"d\"\ntype = \"dyn\"\n{extra}"), "t").unwrap()
        };
        let p = validate(&plan("makes = \"ints\"\n"), &r).unwrap();
        assert_eq!(p.steps[1].outputs, vec![ProductKey::new("ints", "d")]);
        assert_eq!(
            p.steps[1].inputs["input"],
            vec![ProductKey::new("floats", "n")]
        );
        let e = validate(&plan(""), &r).unwrap_err().to_string();
        assert_eq!(e, "plan error: step 'd': parameter 'makes' is required");
        let e = validate(&plan("makes = \"ints\"\ncolour = 1\n"), &r)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "plan error: step 'd': unknown parameter 'colour' (known: makes)"
        );
    }
}
