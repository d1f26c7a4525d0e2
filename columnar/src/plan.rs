//! Plans: labelled steps read from TOML (or built in code), validated completely before
//! any event is read, and resolved into an execution order.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::params::Params;
use crate::product::ProductKey;
use crate::step::{Backend, JobContext, Registry, Step, StepConfig};

/// Job settings a plan may carry in `[run]`; the command line overrides them.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    /// Worker threads (default: available cores).
    pub threads: Option<usize>,
    /// Events per batch.
    pub batch_size: Option<usize>,
    /// Events to process (default: all the input has).
    pub events: Option<u64>,
    /// Input dataset directory.
    pub input: Option<PathBuf>,
    /// Output directory.
    pub output: Option<PathBuf>,
}

/// One `[[step]]` as written: label, type, optional backend, and every other key (inputs
/// and parameters, told apart by the step type's signature).
#[derive(Clone, Debug, PartialEq)]
pub struct StepSpec {
    pub label: String,
    pub type_name: String,
    pub backend: Option<String>,
    pub keys: BTreeMap<String, toml::Value>,
}

impl StepSpec {
    /// A step spec built in code.
    pub fn new(label: &str, type_name: &str) -> Self {
        StepSpec {
            label: label.into(),
            type_name: type_name.into(),
            backend: None,
            keys: BTreeMap::new(),
        }
    }
    /// Adds a key (input or parameter).
    pub fn with(mut self, key: &str, value: impl Into<toml::Value>) -> Self {
        self.keys.insert(key.into(), value.into());
        self
    }
}

/// A plan as written, before validation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanSpec {
    pub run: RunSettings,
    pub steps: Vec<StepSpec>,
}

fn is_valid_label(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl PlanSpec {
    /// Parses a plan from TOML text; `origin` names the file in messages.
    ///
    /// ```
    /// use quiver_columnar::plan::PlanSpec;
    /// let p = PlanSpec::from_toml("[[step]]\nlabel = \"numbers\"\ntype = \"random_floats\"\ncount = 10\n", "inline").unwrap();
    /// assert_eq!(p.steps[0].label, "numbers");
    /// assert!(PlanSpec::from_toml("[[step]]\ntype = \"square\"\n", "inline").unwrap_err().to_string().contains("step #1 has no 'label'"));
    /// ```
    pub fn from_toml(text: &str, origin: &str) -> Result<PlanSpec> {
        let root: toml::Table =
            toml::from_str(text).map_err(|e| Error::plan("", format!("{origin}: {e}")))?;
        let mut plan = PlanSpec::default();
        for (key, value) in root {
            match key.as_str() {
                "run" => {
                    plan.run = value
                        .try_into()
                        .map_err(|e| Error::plan("", format!("{origin}: [run]: {e}")))?;
                }
                "step" => {
                    let toml::Value::Array(steps) = value else {
                        return Err(Error::plan(
                            "",
                            format!("{origin}: 'step' must be an array of tables: write [[step]]"),
                        ));
                    };
                    for (i, s) in steps.into_iter().enumerate() {
                        let toml::Value::Table(mut t) = s else {
                            return Err(Error::plan(
                                "",
                                format!("{origin}: step #{} is not a table", i + 1),
                            ));
                        };
                        let mut take_str = |k: &str| -> Result<Option<String>> {
                            match t.remove(k) {
                                None => Ok(None),
                                Some(toml::Value::String(s)) => Ok(Some(s)),
                                Some(v) => Err(Error::plan(
                                    "",
                                    format!(
                                        "{origin}: step #{}: '{k}' must be a string, got {v}",
                                        i + 1
                                    ),
                                )),
                            }
                        };
                        let label = take_str("label")?.ok_or_else(|| {
                            Error::plan("", format!("{origin}: step #{} has no 'label'", i + 1))
                        })?;
                        if !is_valid_label(&label) {
                            return Err(Error::plan(
                                &label,
                                "a label may hold only letters, digits, '_' and '-'",
                            ));
                        }
                        let type_name = take_str("type")?
                            .ok_or_else(|| Error::plan(&label, "missing 'type'"))?;
                        let backend = take_str("backend")?;
                        plan.steps.push(StepSpec {
                            label,
                            type_name,
                            backend,
                            keys: t.into_iter().collect(),
                        });
                    }
                }
                other => {
                    return Err(Error::plan("", format!("{origin}: unknown top-level key '{other}' (expected [run] and [[step]])")));
                }
            }
        }
        if plan.steps.is_empty() {
            return Err(Error::plan(
                "",
                format!("{origin}: the plan has no [[step]]"),
            ));
        }
        Ok(plan)
    }

    /// Reads and parses a plan file.
    pub fn from_file(path: &Path) -> Result<PlanSpec> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_toml(&text, &path.display().to_string())
    }
}

/// One step after validation.
#[derive(Clone, Debug)]
pub struct ResolvedStep {
    pub label: String,
    pub type_name: String,
    pub backend: Backend,
    pub params: Params,
    pub inputs: BTreeMap<String, Vec<ProductKey>>,
    pub outputs: Vec<ProductKey>,
}

/// A validated plan in execution order.
#[derive(Clone, Debug)]
pub struct ResolvedPlan {
    pub run: RunSettings,
    pub steps: Vec<ResolvedStep>,
}

/// Resolves one input value (`label` or `label:type`) for slot `slot` of step `label`.
fn resolve_named(
    label: &str,
    slot: &str,
    wanted: Option<&str>,
    value: &str,
    outputs: &HashMap<&str, Vec<ProductKey>>,
    all_at_label: bool,
) -> Result<Vec<ProductKey>> {
    let (producer, ty) = match value.split_once(':') {
        Some((l, t)) => (l, Some(t)),
        None => (value, None),
    };
    let produced = outputs.get(producer).ok_or_else(|| {
        Error::plan(
            label,
            format!("input '{slot}' = \"{value}\": no step of this plan has label '{producer}'"),
        )
    })?;
    let ty = ty.or(wanted);
    if let (Some(t), Some(w)) = (ty, wanted) {
        if t != w {
            return Err(Error::plan(
                label,
                format!("input '{slot}' = \"{value}\": this input takes '{w}', not '{t}'"),
            ));
        }
    }
    let list = |v: &[ProductKey]| {
        v.iter()
            .map(|k| k.type_name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match ty {
        Some(t) => match produced.iter().find(|k| k.type_name == t) {
            Some(k) => Ok(vec![k.clone()]),
            None => Err(Error::plan(
                label,
                format!("input '{slot}' = \"{value}\": step '{producer}' produces no '{t}' (it produces: {})", list(produced)),
            )),
        },
        None if all_at_label || produced.len() == 1 => Ok(produced.clone()),
        None => Err(Error::plan(
            label,
            format!("ambiguous input '{slot}' = \"{value}\": step '{producer}' produces {}; write \"{producer}:TYPE\"", list(produced)),
        )),
    }
}

/// Validates a plan against the registry: step types, backends, parameters, inputs,
/// labels and cycles. Every error names the step's label and the offending key or value.
pub fn validate(spec: &PlanSpec, registry: &Registry) -> Result<ResolvedPlan> {
    let mut seen = BTreeSet::new();
    let mut staged = Vec::new();
    for s in &spec.steps {
        if !seen.insert(s.label.as_str()) {
            return Err(Error::plan(
                &s.label,
                "duplicate label: another step of this plan has the same label",
            ));
        }
        staged.push(stage(s, registry)?);
    }

    // Outputs of every label, and producers of every type.
    let outputs: HashMap<&str, Vec<ProductKey>> = staged
        .iter()
        .map(|st| {
            let label = st.spec.label.as_str();
            let keys = st
                .signature
                .outputs
                .iter()
                .map(|o| ProductKey::new(o, label))
                .collect();
            (label, keys)
        })
        .collect();
    let mut producers: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for st in &staged {
        for o in &st.signature.outputs {
            producers
                .entry(o.clone())
                .or_default()
                .push(st.spec.label.as_str());
        }
    }

    let mut resolved = Vec::new();
    for st in &staged {
        let mut inputs = BTreeMap::new();
        for slot in &st.signature.inputs {
            let keys = match st.given.get(&slot.name) {
                Some(v) => resolve_given(&st.spec.label, slot, v, &outputs)?,
                None => resolve_implicit(&st.spec.label, slot, &producers)?,
            };
            inputs.insert(slot.name.clone(), keys);
        }
        resolved.push(ResolvedStep {
            label: st.spec.label.clone(),
            type_name: st.type_name.to_string(),
            backend: st.backend,
            params: st.params.clone(),
            inputs,
            outputs: outputs[st.spec.label.as_str()].clone(),
        });
    }

    let plan = ResolvedPlan {
        run: spec.run.clone(),
        steps: execution_order(resolved)?,
    };
    registry.check_output_files(&plan)?;
    for check in registry.plan_checks() {
        check(&plan)?;
    }
    Ok(plan)
}

/// A step of a plan with its type, backend and parameters checked, its inputs not yet
/// resolved.
struct Staged<'a> {
    spec: &'a StepSpec,
    type_name: &'static str,
    signature: crate::step::Signature,
    backend: Backend,
    /// The keys of the step that name inputs, as written.
    given: BTreeMap<String, toml::Value>,
    params: Params,
}

/// Checks step `s`'s type, backend and parameters.
fn stage<'a>(s: &'a StepSpec, registry: &Registry) -> Result<Staged<'a>> {
    let t = registry.get(&s.type_name).ok_or_else(|| {
        let hint = closest(&s.type_name, registry.iter().map(|t| t.name))
            .map(|n| format!("did you mean '{n}'? "))
            .unwrap_or_default();
        Error::plan(
            &s.label,
            format!(
                "unknown step type '{}' ({hint}`quiver steps` lists the catalogue)",
                s.type_name
            ),
        )
    })?;
    let backend = match &s.backend {
        None => Backend::Cpu,
        Some(b) if b == "auto" => registry.resolve_auto(t),
        Some(b) => b
            .parse::<Backend>()
            .map_err(|m| Error::plan(&s.label, format!("backend: {m}")))?,
    };
    if !t.backends.contains(&backend) {
        return Err(Error::plan(
            &s.label,
            format!(
                "backend '{backend}' is not implemented by step type '{}' (it has: {})",
                t.name,
                t.backends
                    .iter()
                    .map(|b| b.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let (signature, param_specs) = match registry.dynamic(&s.type_name) {
        Some(f) => f(s).map_err(|e| match e {
            e if e.is_plan_error() => e,
            other => Error::plan(&s.label, other.to_string()),
        })?,
        None => (t.signature.clone(), t.params.clone()),
    };
    let (given, params): (BTreeMap<_, _>, BTreeMap<_, _>) = s
        .keys
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .partition(|(k, _)| signature.inputs.iter().any(|i| &i.name == k));
    let params = Params::resolve(&s.label, &param_specs, &params)?;
    Ok(Staged {
        spec: s,
        type_name: t.name,
        signature,
        backend,
        given,
        params,
    })
}

/// The products input `slot` of step `label` names with `value` (a label, `label:type`,
/// or a list of them).
fn resolve_given(
    label: &str,
    slot: &crate::step::InputSpec,
    value: &toml::Value,
    outputs: &HashMap<&str, Vec<ProductKey>>,
) -> Result<Vec<ProductKey>> {
    let ty = slot.product_type.as_deref();
    match value {
        toml::Value::String(v) if !slot.many => {
            resolve_named(label, &slot.name, ty, v, outputs, false)
        }
        toml::Value::Array(vs) if slot.many => {
            let mut keys = Vec::new();
            for v in vs {
                let v = v.as_str().ok_or_else(|| {
                    Error::plan(
                        label,
                        format!("input '{}' must list labels as strings, got {v}", slot.name),
                    )
                })?;
                keys.extend(resolve_named(label, &slot.name, ty, v, outputs, true)?);
            }
            Ok(keys)
        }
        v => {
            let what = if slot.many {
                "a list of labels"
            } else {
                "a label (string)"
            };
            Err(Error::plan(
                label,
                format!("input '{}' must be {what}, got {v}", slot.name),
            ))
        }
    }
}

/// The product input `slot` of step `label` takes when the plan names none: the one step
/// that produces its type.
fn resolve_implicit(
    label: &str,
    slot: &crate::step::InputSpec,
    producers: &BTreeMap<String, Vec<&str>>,
) -> Result<Vec<ProductKey>> {
    let candidates: Vec<&str> = match &slot.product_type {
        Some(ty) => producers.get(ty.as_str()).cloned().unwrap_or_default(),
        None => Vec::new(),
    };
    let candidates: Vec<&str> = candidates.into_iter().filter(|l| *l != label).collect();
    let ty = slot.product_type.as_deref().unwrap_or("any");
    match candidates.as_slice() {
        [one] => Ok(vec![ProductKey::new(ty, *one)]),
        [] if slot.optional => Ok(Vec::new()),
        [] => Err(Error::plan(
            label,
            if slot.product_type.is_some() {
                format!(
                    "missing input '{}': no step of this plan produces '{ty}'",
                    slot.name
                )
            } else {
                format!(
                    "missing input '{}': name the producing step(s) by label",
                    slot.name
                )
            },
        )),
        many => Err(Error::plan(
            label,
            format!(
                "ambiguous input '{}': {} steps produce '{ty}' ({}); name one with {} = \"LABEL\"",
                slot.name,
                many.len(),
                many.join(", "),
                slot.name
            ),
        )),
    }
}

/// The steps in execution order: topological, ties broken by plan order.
fn execution_order(resolved: Vec<ResolvedStep>) -> Result<Vec<ResolvedStep>> {
    let index: HashMap<&str, usize> = resolved
        .iter()
        .enumerate()
        .map(|(i, s)| (s.label.as_str(), i))
        .collect();
    let deps: Vec<BTreeSet<usize>> = resolved
        .iter()
        .map(|s| {
            s.inputs
                .values()
                .flatten()
                .map(|k| index[k.label.as_str()])
                .collect()
        })
        .collect();
    let mut done = vec![false; resolved.len()];
    let mut order = Vec::with_capacity(resolved.len());
    while order.len() < resolved.len() {
        let next = (0..resolved.len()).find(|&i| !done[i] && deps[i].iter().all(|&d| done[d]));
        match next {
            Some(i) => {
                done[i] = true;
                order.push(i);
            }
            None => {
                let stuck: Vec<&str> = (0..resolved.len())
                    .filter(|&i| !done[i])
                    .map(|i| resolved[i].label.as_str())
                    .collect();
                return Err(Error::plan(
                    stuck[0],
                    format!(
                        "cycle: steps {} consume each other's products",
                        stuck.join(" -> ")
                    ),
                ));
            }
        }
    }
    let mut slots: Vec<Option<ResolvedStep>> = resolved.into_iter().map(Some).collect();
    Ok(order
        .into_iter()
        .map(|i| slots[i].take().expect("each once"))
        .collect())
}

impl ResolvedPlan {
    /// For every product, the index of the last step that reads it (its producer's index
    /// when no step does): the executor drops the product after that step, so this is how
    /// long a product holds memory within a batch.
    pub fn last_use(&self) -> HashMap<ProductKey, usize> {
        let mut last: HashMap<ProductKey, usize> = HashMap::new();
        for (i, st) in self.steps.iter().enumerate() {
            for k in st.outputs.iter().chain(st.inputs.values().flatten()) {
                last.insert(k.clone(), i);
            }
        }
        last
    }

    /// The resolved plan as text: order, backends, inputs, outputs (with the step after
    /// which each is dropped), parameters.
    pub fn describe(&self) -> String {
        use std::fmt::Write;
        let last = self.last_use();
        let mut s = String::new();
        for (i, st) in self.steps.iter().enumerate() {
            let _ = writeln!(
                s,
                "{:>2}. {} ({}, {})",
                i + 1,
                st.label,
                st.type_name,
                st.backend
            );
            for (slot, keys) in &st.inputs {
                let _ = writeln!(
                    s,
                    "      {slot} <- {}",
                    keys.iter()
                        .map(|k| k.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            for k in &st.outputs {
                match last.get(k) {
                    Some(&l) if l > i => {
                        let _ = writeln!(
                            s,
                            "      -> {k}  (last read by step {}, {})",
                            l + 1,
                            self.steps[l].label
                        );
                    }
                    _ => {
                        let _ = writeln!(s, "      -> {k}  (read by no step: dropped at once)");
                    }
                }
            }
            let params: Vec<String> = st
                .params
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            if !params.is_empty() {
                let _ = writeln!(s, "      {}", params.join(", "));
            }
        }
        s
    }

    /// Builds every step for one job, in execution order.
    pub fn build(&self, registry: &Registry, job: Arc<JobContext>) -> Result<Vec<Box<dyn Step>>> {
        self.steps
            .iter()
            .map(|st| {
                let t = registry.get(&st.type_name).expect("validated");
                let cfg = StepConfig {
                    label: st.label.clone(),
                    type_name: st.type_name.clone(),
                    backend: st.backend,
                    params: st.params.clone(),
                    inputs: st.inputs.clone(),
                    outputs: st.outputs.clone(),
                    job: job.clone(),
                };
                (t.build)(&cfg).map_err(|e| match e {
                    e if e.is_plan_error() => e,
                    other => Error::plan(&st.label, other.to_string()),
                })
            })
            .collect()
    }
}

/// Levenshtein distance between two strings, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The candidate closest to `name` if it is close enough to be a typo: at most a third of
/// the name's length in edits (at least 1), ties broken by name order.
fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
mod suggestion_tests {
    use super::{closest, edit_distance};

    #[test]
    fn edit_distance_counts_insertions_deletions_substitutions() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("square", "square"), 0);
        assert_eq!(edit_distance("sqaure", "square"), 2);
        assert_eq!(edit_distance("squar", "square"), 1);
        assert_eq!(edit_distance("rechit", "rechits"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn closest_suggests_only_near_names() {
        let names = ["square", "rechits", "random_floats", "clusterize"];
        assert_eq!(closest("sqaure", names.iter().copied()), Some("square"));
        assert_eq!(closest("rechit", names.iter().copied()), Some("rechits"));
        assert_eq!(
            closest("clusterise", names.iter().copied()),
            Some("clusterize")
        );
        assert_eq!(closest("cube", names.iter().copied()), None);
        assert_eq!(closest("x", names.iter().copied()), None);
    }
}
