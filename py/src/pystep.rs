//! Steps written in Python: the `python` step type, its per-step signature (read from the
//! class), and the step that calls `produce(batch)` with the GIL held only while Python runs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict};
use pyo3_arrow::input::AnyRecordBatch;
use pyo3_arrow::{PyArray, PyRecordBatch, PySchema};
use quiver_columnar::plan::StepSpec;
use quiver_columnar::product::{product_schema, Product, ProductKey};
use quiver_columnar::step::{
    Backend, EventBatch, InputSpec, Registry, Signature, Step, StepConfig, StepType,
};
use quiver_columnar::{Error, ParamKind, ParamSpec, ParamValue, Result};

use crate::convert;

/// The step type name in plans.
pub const PYTHON_TYPE: &str = "python";

/// Parameter names live as long as the process (ParamSpec wants `&'static str`); each
/// distinct name is leaked once.
fn intern(s: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut set = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(n) = set.get(s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(n);
    n
}

/// The Python exception (with its traceback) as text.
pub fn format_pyerr(py: Python<'_>, e: &PyErr) -> String {
    let formatted = py
        .import("traceback")
        .and_then(|tb| {
            tb.call_method1(
                "format_exception",
                (e.get_type(py), e.value(py), e.traceback(py)),
            )
        })
        .and_then(|lines| lines.extract::<Vec<String>>());
    match formatted {
        Ok(lines) => lines.concat().trim_end().to_string(),
        Err(_) => e.to_string(),
    }
}

/// Whether `e` is a `quiver.PlanError`: `quiver._steps.load` raises one for a misspelled
/// module or class.
fn is_plan_error(py: Python<'_>, e: &PyErr) -> bool {
    py.import("quiver._errors")
        .and_then(|m| m.getattr("PlanError"))
        .is_ok_and(|t| e.is_instance(py, &t))
}

fn steps_module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("quiver._steps")
}

/// What a Python step class declares, as `quiver._steps.describe` normalises it.
struct Declared {
    /// (slot, product type, many)
    consumes: Vec<(String, String, bool)>,
    /// (product type, schema if declared)
    produces: Vec<(String, Option<SchemaRef>)>,
    /// (name, kind, default, doc)
    params: Vec<(String, ParamKind, Option<ParamValue>, String)>,
}

fn kind_of(name: &str) -> Option<ParamKind> {
    Some(match name {
        "int" => ParamKind::Int,
        "float" => ParamKind::Float,
        "bool" => ParamKind::Bool,
        "str" => ParamKind::Str,
        "list" => ParamKind::StrList,
        _ => return None,
    })
}

fn describe(py: Python<'_>, module: &str, class: &str) -> std::result::Result<Declared, String> {
    let d = steps_module(py)
        .and_then(|m| m.call_method1("describe", (module, class)))
        .map_err(|e| format_pyerr(py, &e))?;
    let get = |k: &str| d.get_item(k).map_err(|e| format_pyerr(py, &e));
    let consumes: Vec<(String, String, bool)> = get("consumes")?
        .extract()
        .map_err(|e: PyErr| e.to_string())?;
    let mut produces = Vec::new();
    for item in get("produces")?.try_iter().map_err(|e| e.to_string())? {
        let item = item.map_err(|e| e.to_string())?;
        let (ty, schema): (String, Bound<'_, PyAny>) =
            item.extract().map_err(|e: PyErr| e.to_string())?;
        let schema = if schema.is_none() {
            None
        } else {
            let s: PySchema = schema
                .extract()
                .map_err(|e| format!("produces['{ty}']: not an Arrow schema: {e}"))?;
            let fields = s
                .into_inner()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            Some(product_schema(&ty, 1, fields))
        };
        produces.push((ty, schema));
    }
    let mut params = Vec::new();
    for item in get("params")?.try_iter().map_err(|e| e.to_string())? {
        let item = item.map_err(|e| e.to_string())?;
        let (name, kind, default, doc): (String, String, Bound<'_, PyAny>, String) =
            item.extract().map_err(|e: PyErr| e.to_string())?;
        let kind = kind_of(&kind)
            .ok_or_else(|| format!("parameter '{name}': unsupported kind '{kind}'"))?;
        let default = if default.is_none() {
            None
        } else {
            let v =
                convert::py_to_toml(&default).map_err(|m| format!("parameter '{name}': {m}"))?;
            Some(match (&kind, v) {
                (ParamKind::Int, toml::Value::Integer(i)) => ParamValue::Int(i),
                (ParamKind::Float, toml::Value::Float(x)) => ParamValue::Float(x),
                (ParamKind::Float, toml::Value::Integer(i)) => ParamValue::Float(i as f64),
                (ParamKind::Bool, toml::Value::Boolean(b)) => ParamValue::Bool(b),
                (ParamKind::Str, toml::Value::String(s)) => ParamValue::Str(s),
                (ParamKind::StrList, toml::Value::Array(a)) => ParamValue::StrList(
                    a.into_iter()
                        .map(|x| x.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .ok_or_else(|| format!("parameter '{name}': a list of strings"))?,
                ),
                (k, v) => return Err(format!("parameter '{name}': default {v} is not {k}")),
            })
        };
        params.push((name, kind, default, doc));
    }
    Ok(Declared {
        consumes,
        produces,
        params,
    })
}

fn module_and_class(s: &StepSpec) -> Result<(String, String)> {
    let get = |k: &str| match s.keys.get(k) {
        Some(toml::Value::String(v)) => Ok(v.clone()),
        Some(v) => Err(Error::plan(
            &s.label,
            format!("parameter '{k}' must be string, got {v} ({})", v.type_str()),
        )),
        None => Err(Error::plan(
            &s.label,
            format!(
                "missing required parameter '{k}' (string): a Python step needs module and class"
            ),
        )),
    };
    Ok((get("module")?, get("class")?))
}

fn base_params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::required(
            "module",
            ParamKind::Str,
            "a Python file (path ending in .py) or an importable module",
        ),
        ParamSpec::required(
            "class",
            ParamKind::Str,
            "the step class (or @polars_step function) in that module",
        ),
    ]
}

/// The signature and parameters of one Python step, read from its class.
pub fn python_signature(s: &StepSpec) -> Result<(Signature, Vec<ParamSpec>)> {
    let (module, class) = module_and_class(s)?;
    let d = Python::attach(|py| {
        // A misspelled module or class: one line with "did you mean", as for a Rust step
        // type; the user's module failing keeps its traceback.
        let found = steps_module(py).and_then(|m| m.call_method1("load", (&module, &class)));
        if let Err(e) = found {
            if is_plan_error(py, &e) {
                return Err(Error::plan(&s.label, e.value(py).to_string()));
            }
        }
        describe(py, &module, &class).map_err(|m| {
            Error::plan(
                &s.label,
                format!("cannot load Python step class '{class}' from '{module}':\n{m}"),
            )
        })
    })?;
    let inputs = d
        .consumes
        .iter()
        .map(|(slot, ty, many)| {
            let mut i = InputSpec::one(slot, ty, "declared by the Python class");
            i.many = *many;
            i
        })
        .collect();
    let outputs = d.produces.iter().map(|(t, _)| t.clone()).collect();
    let mut params = base_params();
    for (name, kind, default, _doc) in d.params {
        if name == "module" || name == "class" {
            return Err(Error::plan(
                &s.label,
                format!("the class declares parameter '{name}', a name reserved for Python steps"),
            ));
        }
        params.push(ParamSpec {
            name: intern(&name),
            kind,
            default,
            doc: "declared by the Python class",
            range: None,
        });
    }
    Ok((Signature { inputs, outputs }, params))
}

/// Registers the `python` step type (signature per step, from the class), replacing the
/// placeholder of the `quiver` crate's registry that only explains where Python steps run.
pub fn register(r: &mut Registry) {
    r.replace_dynamic(
        StepType {
            name: PYTHON_TYPE,
            doc: "A step written in Python: `module` + `class` (consumes/produces/params declared by the class)",
            params: base_params(),
            signature: Signature::default(),
            backends: vec![Backend::Python],
            build: build_python_step,
        },
        python_signature,
    );
}

/// The expected schema of a product type: declared by the class, else a type the framework
/// knows.
fn known_schema(type_name: &str) -> Option<SchemaRef> {
    match type_name {
        quiver_columnar::toy::FLOATS => Some(quiver_columnar::toy::floats_schema()),
        other => quiver::reco::steps::try_schema(other),
    }
}

fn build_python_step(cfg: &StepConfig) -> Result<Box<dyn Step>> {
    let module = cfg.params.str("module").to_string();
    let class_name = cfg.params.str("class").to_string();
    Python::attach(|py| -> Result<Box<dyn Step>> {
        let fail = |e: PyErr| {
            cfg.param_error(
                "class",
                format!(
                    "cannot load '{class_name}' from '{module}':\n{}",
                    format_pyerr(py, &e)
                ),
            )
        };
        let class = steps_module(py)
            .and_then(|m| m.call_method1("load", (&module, &class_name)))
            .map_err(fail)?;
        let d = describe(py, &module, &class_name).map_err(|m| cfg.param_error("class", m))?;
        let params = PyDict::new(py);
        for (k, v) in cfg.params.iter() {
            if k != "module" && k != "class" {
                params
                    .set_item(
                        k,
                        convert::param_to_py(py, v).map_err(|e| Error::data(e.to_string()))?,
                    )
                    .map_err(|e| Error::data(e.to_string()))?;
            }
        }
        let schemas = d
            .produces
            .into_iter()
            .map(|(t, s)| {
                let s = s.or_else(|| known_schema(&t));
                (t, s)
            })
            .collect();
        let has_end_job = class.hasattr("end_job").unwrap_or(false);
        // Once per job, outside the step's time: pyarrow's import and the conditions as
        // pyarrow batches would otherwise be charged to the first batch of every worker.
        let t_setup = Instant::now();
        let conditions = py
            .import("pyarrow")
            .and_then(|_| crate::conditions_dict(py, &cfg.job.conditions))
            .map_err(|e| {
                Error::data(format!(
                    "step '{}': the conditions for Python: {e}",
                    cfg.label
                ))
            })?;
        let setup = t_setup.elapsed();
        Ok(Box::new(PythonStep {
            label: cfg.label.clone(),
            what: format!("{module}:{class_name}"),
            class: class.unbind(),
            params: params.unbind(),
            inputs: cfg.inputs.clone(),
            schemas,
            conditions: Arc::new(conditions.unbind()),
            setup,
            has_end_job,
            instances: Mutex::new(HashMap::new()),
            calls: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            held_ns: AtomicU64::new(0),
            init_ns: AtomicU64::new(0),
        }))
    })
}

/// One Python step of a job. State shared across workers is behind a Mutex or atomics: the
/// GIL is not relied upon for the framework's safety.
struct PythonStep {
    label: String,
    what: String,
    class: Py<PyAny>,
    params: Py<PyDict>,
    inputs: BTreeMap<String, Vec<ProductKey>>,
    schemas: BTreeMap<String, Option<SchemaRef>>,
    conditions: Arc<Py<PyDict>>,
    /// Time spent once per job when the step was built (see `build_python_step`).
    setup: std::time::Duration,
    has_end_job: bool,
    /// One instance per worker thread, made on its first batch.
    instances: Mutex<HashMap<ThreadId, Py<PyAny>>>,
    calls: AtomicU64,
    wait_ns: AtomicU64,
    held_ns: AtomicU64,
    /// The workers' `__init__` calls, in `process` but one-off (`Step::one_off_time`).
    init_ns: AtomicU64,
}

impl PythonStep {
    fn instance(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let id = std::thread::current().id();
        if let Some(i) = self
            .instances
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
        {
            return Ok(i.clone_ref(py));
        }
        let t0 = Instant::now();
        let params = self.params.bind(py).copy()?;
        let inst = self.class.bind(py).call1((params,));
        self.init_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let inst = inst?.unbind();
        self.instances
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, inst.clone_ref(py));
        Ok(inst)
    }
}

impl Step for PythonStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let mut inputs = BTreeMap::new();
        for (slot, keys) in &self.inputs {
            let ps = keys
                .iter()
                .map(|k| batch.get(k))
                .collect::<Result<Vec<_>>>()?;
            inputs.insert(slot.clone(), ps);
        }
        let view = BatchView {
            first_event: batch.first_event(),
            n_events: batch.n_events(),
            inputs,
            schemas: self.schemas.clone(),
            conditions: self.conditions.clone(),
        };
        let t_call = Instant::now();
        let products = Python::attach(|py| -> Result<Vec<Product>> {
            let t_held = Instant::now();
            self.wait_ns
                .fetch_add((t_held - t_call).as_nanos() as u64, Ordering::Relaxed);
            let inst = self.instance(py).map_err(|e| Error::Python {
                what: self.what.clone(),
                method: "__init__(params)",
                traceback: format_pyerr(py, &e),
            });
            let inst = match inst {
                Ok(i) => i,
                Err(e) => {
                    self.held_ns
                        .fetch_add(t_held.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    return Err(e);
                }
            };
            let r = (|| -> PyResult<Vec<Product>> {
                let b = Bound::new(
                    py,
                    PyBatch {
                        view,
                        puts: Mutex::new(Some(Vec::new())),
                    },
                )?;
                inst.bind(py).call_method1("produce", (b.clone(),))?;
                let puts = b
                    .get()
                    .puts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .unwrap_or_default();
                Ok(puts)
            })();
            self.held_ns
                .fetch_add(t_held.elapsed().as_nanos() as u64, Ordering::Relaxed);
            r.map_err(|e| {
                if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
                    // Stops the job as Ctrl-C does: nothing committed, no partial files.
                    Error::Interrupted(format!("KeyboardInterrupt in {}.produce()", self.what))
                } else {
                    Error::Python {
                        what: self.what.clone(),
                        method: "produce()",
                        traceback: format_pyerr(py, &e),
                    }
                }
            })
        })?;
        self.calls.fetch_add(1, Ordering::Relaxed);
        for p in products {
            batch.put(p)?;
        }
        Ok(())
    }

    fn one_off_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.init_ns.load(Ordering::Relaxed))
    }

    fn end_job(&self, success: bool) -> Result<Option<String>> {
        Python::attach(|py| {
            let instances: Vec<(ThreadId, Py<PyAny>)> = self
                .instances
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain()
                .collect();
            let mut reports = Vec::new();
            let mut error = None;
            if self.has_end_job && success {
                for (_, inst) in &instances {
                    match inst.bind(py).call_method0("end_job") {
                        Ok(r) if !r.is_none() => {
                            reports.push(r.str().map(|s| s.to_string()).unwrap_or_default())
                        }
                        Ok(_) => {}
                        Err(e) => {
                            error.get_or_insert_with(|| Error::Python {
                                what: self.what.clone(),
                                method: "end_job()",
                                traceback: format_pyerr(py, &e),
                            });
                        }
                    }
                }
            }
            let n_init = instances.len();
            drop(instances);
            if let Some(e) = error {
                return Err(e);
            }
            let ms = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e6;
            let mut s = format!(
                // Time inside produce(), not GIL-held time: numpy, pyarrow and Polars release
                // the GIL inside, so calls of several workers overlap and the sum can exceed
                // the wall time.
                "python step {} ({}): {} batches; {:.1} ms in Python summed over worker threads (libraries may release the GIL inside), {:.1} ms waiting for the GIL; the framework and Rust steps ran without the GIL\nsetup, once per job and not in the step's time: {:.1} ms (pyarrow, the conditions for batch.conditions); __init__ on {n_init} worker(s): {:.1} ms, not in the step's time either",
                self.label,
                self.what,
                self.calls.load(Ordering::Relaxed),
                (ms(&self.held_ns) - ms(&self.init_ns)).max(0.0),
                ms(&self.wait_ns),
                self.setup.as_secs_f64() * 1e3,
                ms(&self.init_ns)
            );
            for r in reports {
                s.push('\n');
                s.push_str(&r);
            }
            Ok(Some(s))
        })
    }
}

impl Drop for PythonStep {
    fn drop(&mut self) {
        // Python references are released with the interpreter attached.
        let instances = std::mem::take(self.instances.get_mut().unwrap_or_else(|p| p.into_inner()));
        if !instances.is_empty() {
            Python::attach(|_py| drop(instances));
        }
    }
}

/// What a Python step sees of an event batch (shared products, no copies).
struct BatchView {
    first_event: u64,
    n_events: usize,
    inputs: BTreeMap<String, Vec<Arc<Product>>>,
    schemas: BTreeMap<String, Option<SchemaRef>>,
    conditions: Arc<Py<PyDict>>,
}

impl BatchView {
    fn product(&self, slot: &str, index: usize) -> PyResult<&Arc<Product>> {
        let ps = self.inputs.get(slot).ok_or_else(|| {
            pyo3::exceptions::PyKeyError::new_err(format!(
                "no input slot '{slot}' (this step consumes: {})",
                self.inputs.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })?;
        ps.get(index).ok_or_else(|| {
            pyo3::exceptions::PyIndexError::new_err(format!(
                "input '{slot}' has {} products",
                ps.len()
            ))
        })
    }
}

/// The event batch handed to `produce(batch)`: read products (zero-copy, with an `event`
/// column) and put new ones (any Arrow PyCapsule exporter).
#[pyclass(name = "Batch", module = "quiver", frozen)]
pub struct PyBatch {
    view: BatchView,
    /// `None` once `produce` returned.
    puts: Mutex<Option<Vec<Product>>>,
}

#[pymethods]
impl PyBatch {
    /// First event number (absolute).
    #[getter]
    fn first_event(&self) -> u64 {
        self.view.first_event
    }
    /// Number of events in the batch.
    #[getter]
    fn n_events(&self) -> usize {
        self.view.n_events
    }
    /// The job's conditions as a dict: name -> `pyarrow.RecordBatch` (e.g. `"BeamSpot"`,
    /// `"CpeParams.det"`), made once per job and shared, not copied.
    #[getter]
    fn conditions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // A copy of the job's dict: what one batch does to it cannot reach the next.
        self.view.conditions.bind(py).copy()
    }
    /// Input slot names.
    #[getter]
    fn slots(&self) -> Vec<String> {
        self.view.inputs.keys().cloned().collect()
    }
    /// The product of input `slot` as a `pyarrow.RecordBatch` with an `event` column first
    /// (the product columns are shared, not copied). `index` picks one of a list input.
    #[pyo3(signature = (slot, index = 0, event = true))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        slot: &str,
        index: usize,
        event: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let p = self.view.product(slot, index)?;
        let rb: RecordBatch = if event {
            p.with_event_column(self.view.first_event)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?
        } else {
            p.batch().clone()
        };
        PyRecordBatch::new(rb).into_pyarrow(py)
    }
    /// The per-event row offsets of input `slot` (`n_events + 1` int32, shared).
    #[pyo3(signature = (slot, index = 0))]
    fn offsets<'py>(
        &self,
        py: Python<'py>,
        slot: &str,
        index: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let p = self.view.product(slot, index)?;
        let a = Bound::new(py, PyArray::from_array_ref(convert::offsets_array(p)))?;
        py.import("pyarrow")?.getattr("array")?.call1((a,))
    }
    /// The product of input `slot` as a `polars.DataFrame` with an `event` column (zero-copy).
    #[pyo3(signature = (slot, index = 0))]
    fn polars<'py>(
        &self,
        py: Python<'py>,
        slot: &str,
        index: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let p = self.view.product(slot, index)?;
        let rb = p
            .with_event_column(self.view.first_event)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        let obj = Bound::new(py, PyRecordBatch::new(rb))?;
        // Through quiver._optional: without Polars, one line naming `pip install 'quiver[polars]'`.
        let pl = py
            .import("quiver._optional")?
            .getattr("require")?
            .call(("polars",), Some(&[("extra", "polars")].into_py_dict(py)?))?;
        pl.getattr("DataFrame")?.call1((obj,))
    }
    /// Publishes a product of type `type_name` from any Arrow object (pyarrow/polars/
    /// nanoarrow/arro3 record batch, table or stream; a dict of columns). Rows are assigned
    /// to events by its `event` column or, without one, by `offsets`: an input slot name
    /// (rows parallel to that input) or `n_events + 1` integers.
    #[pyo3(signature = (type_name, data, offsets = None))]
    fn put(
        &self,
        py: Python<'_>,
        type_name: &str,
        data: &Bound<'_, PyAny>,
        offsets: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        crate::guard(py, || self.put_checked(py, type_name, data, offsets))
    }
    fn __repr__(&self) -> String {
        format!(
            "<quiver.Batch events {}..{} inputs [{}]>",
            self.view.first_event,
            self.view.first_event + self.view.n_events as u64,
            self.view
                .inputs
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

impl PyBatch {
    fn put_checked(
        &self,
        py: Python<'_>,
        type_name: &str,
        data: &Bound<'_, PyAny>,
        offsets: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let err = |m: String| pyo3::exceptions::PyValueError::new_err(m);
        let Some(expected) = self.view.schemas.get(type_name) else {
            return Err(err(format!(
                "product type '{type_name}' is not declared in produces (declared: {})",
                self.view
                    .schemas
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        let data = if data.cast::<PyDict>().is_ok() {
            // Numpy arrays the step could still write to are copied (quiver/_publish.py).
            let columns = py
                .import("quiver._publish")?
                .getattr("columns")?
                .call1((data,))?;
            py.import("pyarrow")?
                .getattr("record_batch")?
                .call1((columns,))?
        } else {
            data.clone()
        };
        let any: AnyRecordBatch = data.extract().map_err(|e| {
            pyo3::exceptions::PyTypeError::new_err(format!("product '{type_name}': not an Arrow table or record batch (no __arrow_c_array__/__arrow_c_stream__): {e}"))
        })?;
        let rb = match any {
            AnyRecordBatch::RecordBatch(b) => b.into_inner(),
            AnyRecordBatch::Stream(s) => {
                let reader = s.into_reader()?;
                let schema = reader.schema();
                let parts = reader
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| err(e.to_string()))?;
                match parts.len() {
                    1 => parts.into_iter().next().expect("one"),
                    // Several chunks must become one batch: this copies.
                    _ => arrow_select::concat::concat_batches(&schema, &parts)
                        .map_err(|e| err(e.to_string()))?,
                }
            }
        };
        let (events, columns) = convert::split_event_column(&rb);
        let n = self.view.n_events;
        let offs = match (events, offsets) {
            (Some(ev), None) => convert::offsets_from_events(type_name, &ev, self.view.first_event, n),
            (Some(_), Some(_)) => Err(Error::data(format!("product '{type_name}': give either an 'event' column or offsets, not both"))),
            (None, Some(o)) => {
                if let Ok(slot) = o.extract::<String>() {
                    let p = self.view.product(&slot, 0)?;
                    if p.batch().num_rows() != columns.num_rows() {
                        return Err(err(format!(
                            "product '{type_name}': offsets='{slot}' needs as many rows as input '{slot}' ({}), got {}",
                            p.batch().num_rows(),
                            columns.num_rows()
                        )));
                    }
                    Ok(p.offsets().clone())
                } else {
                    let values: Vec<i64> = py.import("builtins")?.getattr("list")?.call1((o,))?.extract()?;
                    convert::offsets_from_values(type_name, values, n, columns.num_rows())
                }
            }
            (None, None) => Err(Error::data(format!(
                "product '{type_name}': no 'event' column; add one or give offsets= (an input slot whose rows match, or n_events + 1 offsets)"
            ))),
        }
        .map_err(|e| err(e.to_string()))?;
        let product = convert::product_from(type_name, expected.as_ref(), columns, offs)
            .map_err(|e| err(e.to_string()))?;
        let mut puts = self.puts.lock().unwrap_or_else(|p| p.into_inner());
        match puts.as_mut() {
            Some(v) => {
                if v.iter().any(|p| p.type_name() == type_name) {
                    return Err(err(format!(
                        "product '{type_name}' was already put in this batch"
                    )));
                }
                v.push(product);
                Ok(())
            }
            None => Err(pyo3::exceptions::PyRuntimeError::new_err(
                "this batch is closed: put() only inside produce()",
            )),
        }
    }
}
