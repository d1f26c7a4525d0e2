//! `quiver._quiver`: the native part of the Python package `quiver`. Plans are built,
//! validated and run by the Rust framework; products come back as Arrow tables through the
//! C data interface (no copies); steps written in Python run inside the same executor.

mod convert;
mod pystep;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::ExitCode;

use arrow_schema::{DataType, Field, Schema};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict};
use pyo3_arrow::PyTable;
use quiver_columnar::plan::{PlanSpec, RunSettings, StepSpec};
use quiver_columnar::{collect, executor, plan, Error, Registry, RunOptions};

/// Every step type: Quiver's own plus `python`.
pub fn registry() -> Registry {
    let mut r = quiver::registry();
    pystep::register(&mut r);
    r
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown".into())
}

/// A framework error as the matching Python exception of the `quiver` package:
/// plan and run-option problems are `PlanError` (a `ValueError`), the rest `StepError`.
fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    let (name, fallback): (&str, fn(String) -> PyErr) = match &e {
        e if e.is_plan_error() => ("PlanError", |m| pyo3::exceptions::PyValueError::new_err(m)),
        Error::Usage(_) => ("PlanError", |m| pyo3::exceptions::PyValueError::new_err(m)),
        Error::Io { .. } => ("QuiverIOError", |m| pyo3::exceptions::PyOSError::new_err(m)),
        _ => ("StepError", |m| {
            pyo3::exceptions::PyRuntimeError::new_err(m)
        }),
    };
    let msg = e.to_string();
    match py.import("quiver").and_then(|m| m.getattr(name)) {
        Ok(t) => match t.call1((msg.clone(),)) {
            Ok(inst) => PyErr::from_value(inst),
            Err(_) => fallback(msg),
        },
        Err(_) => fallback(msg),
    }
}

/// Runs `f`, turning a Rust panic into a `quiver.StepError` (a `PanicException` would escape
/// `except Exception`).
pub(crate) fn guard<T>(py: Python<'_>, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(to_pyerr(py, Error::Panic(panic_message(p.as_ref())))),
    }
}

fn is_valid_label(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// What `_Plan.run` returns: summary text, summary numbers, and per collected product
/// (label, type, Arrow table, Rust-side data addresses per column).
type RunOutput<'py> = (String, Bound<'py, PyDict>, Tables<'py>);

/// Per collected product: (label, type, Arrow table, Rust-side data addresses per column).
type Tables<'py> = Vec<(String, String, Py<PyAny>, Bound<'py, PyDict>)>;

/// A plan being built or loaded (the Python class `quiver.Plan` wraps it).
#[pyclass(name = "_Plan", module = "quiver._quiver")]
struct PyPlan {
    spec: PlanSpec,
    /// Where the plan came from (recorded in the run manifest).
    origin: String,
}

#[pymethods]
impl PyPlan {
    #[new]
    fn new() -> Self {
        PyPlan {
            spec: PlanSpec::default(),
            origin: "<plan built in Python>".into(),
        }
    }

    #[staticmethod]
    #[pyo3(signature = (text, origin = "<string>"))]
    fn from_toml(py: Python<'_>, text: &str, origin: &str) -> PyResult<Self> {
        guard(py, || {
            PlanSpec::from_toml(text, origin)
                .map(|spec| PyPlan {
                    spec,
                    origin: origin.to_string(),
                })
                .map_err(|e| to_pyerr(py, e))
        })
    }

    #[staticmethod]
    fn from_file(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        guard(py, || {
            PlanSpec::from_file(&path)
                .map(|spec| PyPlan {
                    spec,
                    origin: path.display().to_string(),
                })
                .map_err(|e| to_pyerr(py, e))
        })
    }

    /// Appends a step; `keys` are its inputs and parameters, as in TOML.
    #[pyo3(signature = (label, type_name, backend, keys))]
    fn add_step(
        &mut self,
        py: Python<'_>,
        label: &str,
        type_name: &str,
        backend: Option<String>,
        keys: &Bound<'_, PyDict>,
    ) -> PyResult<()> {
        if !is_valid_label(label) {
            return Err(to_pyerr(
                py,
                Error::plan(label, "a label may hold only letters, digits, '_' and '-'"),
            ));
        }
        let mut s = StepSpec::new(label, type_name);
        s.backend = backend;
        for (k, v) in keys.iter() {
            let k: String = k.extract()?;
            let v = convert::py_to_toml(&v)
                .map_err(|m| to_pyerr(py, Error::plan(label, format!("'{k}': {m}"))))?;
            s.keys.insert(k, v);
        }
        self.spec.steps.push(s);
        Ok(())
    }

    /// Replaces step `label` in place (same label, same consumers): `keys` override its keys,
    /// a key given as None is dropped, the others stay. The backend stays unless the type
    /// changes. Validated at once: a change that breaks the plan (or, in a plan still being
    /// built, this step) is undone and raised.
    #[pyo3(signature = (label, type_name, backend, keys))]
    fn replace_step(
        &mut self,
        py: Python<'_>,
        label: &str,
        type_name: &str,
        backend: Option<String>,
        keys: &Bound<'_, PyDict>,
    ) -> PyResult<()> {
        let i = self.position(py, label)?;
        let registry = registry();
        let was_valid = plan::validate(&self.spec, &registry).is_ok();
        let old = self.spec.steps[i].clone();
        let mut s = old.clone();
        if s.type_name != type_name {
            if s.type_name == pystep::PYTHON_TYPE {
                s.keys.remove("module");
                s.keys.remove("class");
            }
            s.type_name = type_name.to_string();
            s.backend = None;
        }
        s.backend = backend.or(s.backend);
        for (k, v) in keys.iter() {
            let k: String = k.extract()?;
            if v.is_none() {
                s.keys.remove(&k);
                continue;
            }
            let v = convert::py_to_toml(&v)
                .map_err(|m| to_pyerr(py, Error::plan(label, format!("'{k}': {m}"))))?;
            s.keys.insert(k, v);
        }
        self.spec.steps[i] = s;
        match guard(py, || Ok(plan::validate(&self.spec, &registry))) {
            Ok(Err(e))
                if was_valid
                    || matches!(&e, Error::Plan { label: l, .. } | Error::Param { step: l, .. } if l == label) =>
            {
                self.spec.steps[i] = old;
                Err(to_pyerr(py, e))
            }
            Err(e) => {
                self.spec.steps[i] = old;
                Err(e)
            }
            Ok(_) => Ok(()),
        }
    }

    /// Removes step `label`; refuses while other steps consume its products.
    fn remove_step(&mut self, py: Python<'_>, label: &str) -> PyResult<()> {
        let i = self.position(py, label)?;
        let consumers: Vec<String> = match plan::validate(&self.spec, &registry()) {
            Ok(r) => r
                .steps
                .iter()
                .flat_map(|s| {
                    s.inputs
                        .iter()
                        .filter(|(_, ks)| ks.iter().any(|k| k.label == label))
                        .map(move |(slot, _)| format!("'{}' (input '{slot}')", s.label))
                })
                .collect(),
            // A plan still being built: any key naming the label.
            Err(_) => self
                .spec
                .steps
                .iter()
                .filter(|s| s.label != label)
                .flat_map(|s| {
                    s.keys
                        .iter()
                        .filter(|(_, v)| names_label(v, label))
                        .map(move |(k, _)| format!("'{}' (key '{k}')", s.label))
                })
                .collect(),
        };
        if !consumers.is_empty() {
            let msg = format!(
                "cannot remove it: step {} consumes its products (remove or replace those first)",
                consumers.join(", step ")
            );
            return Err(to_pyerr(py, Error::plan(label, msg)));
        }
        self.spec.steps.remove(i);
        Ok(())
    }

    /// Sets `[run]` values (None leaves a value unset).
    #[pyo3(signature = (threads = None, batch_size = None, events = None, input = None, output = None))]
    fn set_run(
        &mut self,
        threads: Option<usize>,
        batch_size: Option<usize>,
        events: Option<u64>,
        input: Option<PathBuf>,
        output: Option<PathBuf>,
    ) {
        let r = &mut self.spec.run;
        r.threads = threads.or(r.threads);
        r.batch_size = batch_size.or(r.batch_size);
        r.events = events.or(r.events);
        r.input = input.or(r.input.take());
        r.output = output.or(r.output.take());
    }

    /// Step labels in plan order.
    fn labels(&self) -> Vec<String> {
        self.spec.steps.iter().map(|s| s.label.clone()).collect()
    }

    /// Validates the plan completely; returns it resolved, as text.
    fn check(&self, py: Python<'_>) -> PyResult<String> {
        guard(py, || {
            if self.spec.steps.is_empty() {
                return Err(to_pyerr(py, Error::plan("", "the plan has no steps")));
            }
            plan::validate(&self.spec, &registry())
                .map(|r| r.describe())
                .map_err(|e| to_pyerr(py, e))
        })
    }

    /// Runs the plan with the GIL released; returns (summary text, summary numbers,
    /// [(label, type, table)]) for the collected products.
    #[pyo3(signature = (events = None, threads = None, batch_size = None, input = None, output = None, collect = None, progress = false, first_event = 0))]
    #[allow(clippy::too_many_arguments)]
    fn run<'py>(
        &self,
        py: Python<'py>,
        events: Option<u64>,
        threads: Option<usize>,
        batch_size: Option<usize>,
        input: Option<PathBuf>,
        output: Option<PathBuf>,
        collect: Option<Vec<String>>,
        progress: bool,
        first_event: u64,
    ) -> PyResult<RunOutput<'py>> {
        guard(py, || {
            if self.spec.steps.is_empty() {
                return Err(to_pyerr(py, Error::plan("", "the plan has no steps")));
            }
            let registry = registry();
            let resolved = plan::validate(&self.spec, &registry).map_err(|e| to_pyerr(py, e))?;
            let settings: &RunSettings = &resolved.run;
            let (output, temporary) = output_dir(py, output.or(settings.output.clone()))?;
            let input = input.or(settings.input.clone());
            let fail = |e: Error| {
                if temporary {
                    let _ = std::fs::remove_dir(&output);
                }
                to_pyerr(py, e)
            };
            let job = quiver::job_context(&resolved, input, Some(output.clone())).map_err(fail)?;
            let opts = RunOptions {
                threads: threads
                    .or(settings.threads)
                    .unwrap_or_else(executor::default_threads),
                batch_size: batch_size
                    .or(settings.batch_size)
                    .unwrap_or(executor::DEFAULT_BATCH_SIZE),
                first_event,
                events: events.or(settings.events),
                progress,
                cycle_input: false,
            };
            let keys = match &collect {
                None => collect::select(&resolved, &[]),
                Some(sel) if sel.is_empty() => Ok(Vec::new()),
                Some(sel) => collect::select(&resolved, sel),
            }
            .map_err(fail)?;
            let driven = Driven {
                resolved: &resolved,
                registry: &registry,
                origin: &self.origin,
                opts: &opts,
                keys: &keys,
            };
            let (outcome, interrupt) = driven.run(py, job);
            let wrote = matches!(&outcome, Ok((_, _, Some(_))));
            if temporary && !wrote {
                let _ = std::fs::remove_dir(&output);
            }
            let (summary, got, committed) = raise_interrupt(py, outcome, interrupt)?;
            let mut text = summary.render();
            if let Some(c) = &committed {
                text.push_str(&c.describe());
                text.push('\n');
            }
            // One parenthetical after the thread count: the interpreter's note, completed.
            text = text.replacen(
                GIL_NOTE,
                &format!("{GIL_NOTE}; the driver waits without the GIL"),
                1,
            );
            let output = wrote.then(|| output.display().to_string());
            let numbers = summary_numbers(py, &summary, output, temporary && wrote)?;
            Ok((text, numbers, collected_tables(py, &keys, &got)?))
        })
    }
}

/// Where a run's files go, and whether that is a temporary directory: without `output=`
/// and `[run] output`, a fresh temporary directory (removed again if the plan wrote
/// nothing), never a silent ./quiver-out in the caller's working directory.
fn output_dir(py: Python<'_>, output: Option<PathBuf>) -> PyResult<(PathBuf, bool)> {
    Ok(match output {
        Some(o) => (o, false),
        None => {
            let d: PathBuf = py
                .import("tempfile")?
                .call_method(
                    "mkdtemp",
                    (),
                    Some(&[("prefix", "quiver-run-")].into_py_dict(py)?),
                )?
                .extract()?;
            (d, true)
        }
    })
}

/// What `run_job` returns to the Python driver.
type JobOutcome = quiver_columnar::Result<(
    quiver_columnar::Summary,
    collect::Collected,
    Option<quiver_columnar::rundir::Committed>,
)>;

/// A validated job, ready to run on a thread of its own.
struct Driven<'a> {
    resolved: &'a plan::ResolvedPlan,
    registry: &'a Registry,
    origin: &'a str,
    opts: &'a RunOptions,
    keys: &'a [quiver_columnar::ProductKey],
}

impl Driven<'_> {
    /// Runs the job. The framework and Rust steps run without the GIL on a thread of their
    /// own; a Python step takes the GIL per batch. This thread waits with the GIL released
    /// and looks for signals every 100 ms: Python runs its handlers (Ctrl-C's
    /// KeyboardInterrupt) only here, on the main thread. An interrupt cancels the job, which
    /// stops between batches and commits nothing; it is returned beside the job's outcome.
    fn run(&self, py: Python<'_>, job: quiver_columnar::JobContext) -> (JobOutcome, Option<PyErr>) {
        let token = quiver_columnar::cancel::Token::new();
        let mut interrupt: Option<PyErr> = None;
        let outcome = std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let job_token = token.clone();
            std::thread::Builder::new()
                .name("quiver-job".into())
                .spawn_scoped(s, move || {
                    let r = quiver_columnar::cancel::with_token(job_token, || {
                        catch_unwind(AssertUnwindSafe(|| self.run_here(job)))
                            .unwrap_or_else(|p| Err(Error::Panic(panic_message(p.as_ref()))))
                    });
                    let _ = tx.send(r);
                })
                .map_err(|e| Error::data(format!("cannot start the job's thread: {e}")))?;
            // In a Mutex to cross py.detach (a Receiver is not Sync); only this thread locks it.
            let rx = std::sync::Mutex::new(rx);
            loop {
                let wait = || {
                    rx.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .recv_timeout(std::time::Duration::from_millis(100))
                };
                match py.detach(wait) {
                    Ok(r) => return r,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        if interrupt.is_none() {
                            if let Err(e) = py.check_signals() {
                                token.cancel();
                                interrupt = Some(e);
                            }
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        return Err(Error::data(
                            "internal error: the job's thread ended without a result",
                        ));
                    }
                }
            }
        });
        (outcome, interrupt)
    }

    fn run_here(&self, job: quiver_columnar::JobContext) -> JobOutcome {
        quiver_columnar::rundir::run_job(
            self.resolved,
            self.registry,
            job,
            self.origin,
            self.opts.first_event,
            |steps| collect::run_collect(self.resolved, steps, self.opts, self.keys),
        )
    }
}

/// The job's outcome as Python sees it: an interrupt (raised only now, once the job has
/// stopped and committed nothing) as `KeyboardInterrupt` (or what the signal handler
/// raised), an error as its `quiver` exception.
fn raise_interrupt(
    py: Python<'_>,
    outcome: JobOutcome,
    interrupt: Option<PyErr>,
) -> PyResult<(
    quiver_columnar::Summary,
    collect::Collected,
    Option<quiver_columnar::rundir::Committed>,
)> {
    let keyboard = |m: String| pyo3::exceptions::PyKeyboardInterrupt::new_err(m);
    if let Err(Error::Interrupted(_)) = &outcome {
        let msg = outcome.err().map(|e| e.to_string()).unwrap_or_default();
        return Err(match interrupt {
            Some(e) if !e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) => e,
            _ => keyboard(msg),
        });
    }
    if let Some(e) = interrupt {
        // The job ended before it saw the interrupt.
        return Err(match &outcome {
            Ok((_, _, Some(c)))
                if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) =>
            {
                keyboard(format!(
                    "interrupted after the job ended; its run was committed to {}",
                    c.dir.display()
                ))
            }
            _ => e,
        });
    }
    outcome.map_err(|e| to_pyerr(py, e))
}

/// The summary's numbers for Python: events, batches, threads, wall time, the output
/// directory (`None` when nothing was written; `temporary_output` when it is a temporary
/// directory made for the run) and seconds per step.
fn summary_numbers<'py>(
    py: Python<'py>,
    summary: &quiver_columnar::Summary,
    output: Option<String>,
    temporary_output: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let numbers = PyDict::new(py);
    numbers.set_item("events", summary.events)?;
    numbers.set_item("batches", summary.batches)?;
    numbers.set_item("threads", summary.threads)?;
    numbers.set_item("batch_size", summary.batch_size)?;
    numbers.set_item("wall_s", summary.wall.as_secs_f64())?;
    numbers.set_item("gil_released", true)?;
    numbers.set_item("temporary_output", temporary_output)?;
    numbers.set_item("output", output)?;
    // Seconds spent in each step's calls, summed over workers, without one-off work.
    let step_s = PyDict::new(py);
    for st in &summary.steps {
        step_s.set_item(&st.label, st.time.as_secs_f64())?;
    }
    numbers.set_item("step_s", step_s)?;
    // One-off work inside the steps' calls (a Python step's __init__), not in step_s.
    let one_off = PyDict::new(py);
    for st in &summary.steps {
        one_off.set_item(&st.label, st.one_off.as_secs_f64())?;
    }
    numbers.set_item("step_one_off_s", one_off)?;
    Ok(numbers)
}

/// Per collected product: (label, type, Arrow table, Rust-side data addresses per column).
fn collected_tables<'py>(
    py: Python<'py>,
    keys: &[quiver_columnar::ProductKey],
    got: &collect::Collected,
) -> PyResult<Tables<'py>> {
    let mut tables = Vec::new();
    for k in keys {
        let batches = got.with_event_column(k).map_err(|e| to_pyerr(py, e))?;
        let schema = match batches.first() {
            Some(b) => b.schema(),
            None => std::sync::Arc::new(Schema::new(vec![Field::new(
                "event",
                DataType::UInt32,
                false,
            )])),
        };
        // Where each product column's data lives, seen from Rust (zero-copy checks).
        let addrs = PyDict::new(py);
        if let Some(parts) = got.get(k) {
            if let Some((_, p0)) = parts.first() {
                for (i, f) in p0.batch().schema().fields().iter().enumerate() {
                    let v: Vec<usize> = parts
                        .iter()
                        .map(|(_, p)| data_address(p.batch().column(i).as_ref()))
                        .collect();
                    addrs.set_item(f.name(), v)?;
                }
            }
        }
        let t = PyTable::try_new(batches, schema)?;
        tables.push((
            k.label.clone(),
            k.type_name.clone(),
            t.into_pyobject(py)?.into_any().unbind(),
            addrs,
        ));
    }
    Ok(tables)
}

impl PyPlan {
    fn position(&self, py: Python<'_>, label: &str) -> PyResult<usize> {
        self.spec
            .steps
            .iter()
            .position(|s| s.label == label)
            .ok_or_else(|| {
                to_pyerr(
                    py,
                    Error::plan(label, "no step of this plan has this label"),
                )
            })
    }
}

/// Whether a plan value names step `label` as an input (`"label"`, `"label:type"`, or a list
/// holding one).
fn names_label(v: &toml::Value, label: &str) -> bool {
    match v {
        toml::Value::String(s) => s.split(':').next() == Some(label),
        toml::Value::Array(a) => a.iter().any(|x| names_label(x, label)),
        _ => false,
    }
}

/// The run summary's note on the GIL (after the thread count) when the GIL is enabled.
const GIL_NOTE: &str = "enabled: Python steps take turns, Rust steps run in parallel";

/// The text of the track classifier's model built into the library
/// (`reco/models/track-classifier.json`), for the Python twin's `model = "builtin"`.
#[pyfunction]
fn builtin_classifier_model() -> &'static str {
    quiver::reco::classifier::BUILTIN_MODEL
}

/// Sets the allocator as the `quiver` command does (quiver_columnar::tune): with `always`,
/// also when the environment holds allocator settings (a Dask worker's, from its nanny).
/// Returns whether glibc took them.
#[pyfunction]
#[pyo3(signature = (always = false))]
fn tune_malloc(always: bool) -> bool {
    if always {
        quiver_columnar::tune::tune_malloc_always()
    } else {
        quiver_columnar::tune_malloc()
    }
}

/// A reader's check of a run directory (quiver_columnar::rundir::verify): its run manifest
/// exists and matches every file (sizes, and SHA-256 with `checksums`). Returns the manifest
/// as a dict: format, quiver, plan, plan_sha256, first_event, events, files (name -> dict of
/// bytes, sha256).
#[pyfunction]
#[pyo3(signature = (path, checksums = true))]
fn verify_run<'py>(
    py: Python<'py>,
    path: PathBuf,
    checksums: bool,
) -> PyResult<Bound<'py, PyDict>> {
    use quiver_columnar::rundir::{verify_with, Check};
    let check = if checksums {
        Check::Checksums
    } else {
        Check::Sizes
    };
    let m = py
        .detach(|| verify_with(&path, check))
        .map_err(|e| to_pyerr(py, e))?;
    let d = PyDict::new(py);
    d.set_item("format", &m.format)?;
    d.set_item("quiver", &m.quiver)?;
    d.set_item("plan", &m.plan)?;
    d.set_item("plan_sha256", &m.plan_sha256)?;
    d.set_item("first_event", m.first_event)?;
    d.set_item("events", m.events)?;
    let files = PyDict::new(py);
    for (name, f) in &m.files {
        let e = PyDict::new(py);
        e.set_item("bytes", f.bytes)?;
        e.set_item("sha256", &f.sha256)?;
        files.set_item(name, e)?;
    }
    d.set_item("files", files)?;
    Ok(d)
}

/// The `quiver` command line inside this interpreter, with Python steps available. The GIL
/// is released while it runs.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    // The process is the command's, as with the Rust binary.
    quiver_columnar::tune_malloc();
    let code = py.detach(|| {
        catch_unwind(|| quiver::cli::main_with(argv, &registry())).unwrap_or_else(|p| {
            eprintln!(
                "error: internal error (panic): {}",
                panic_message(p.as_ref())
            );
            ExitCode::FAILURE
        })
    });
    if code == ExitCode::SUCCESS {
        0
    } else if code == ExitCode::from(2) {
        2
    } else if code == ExitCode::from(130) {
        130
    } else if code == ExitCode::from(143) {
        143
    } else {
        1
    }
}

/// Conditions as a dict: name -> `pyarrow.RecordBatch` (shared with Rust, not copied).
pub(crate) fn conditions_dict<'py>(
    py: Python<'py>,
    c: &quiver_columnar::Conditions,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, table) in c.tables() {
        d.set_item(
            name,
            pyo3_arrow::PyRecordBatch::new(table).into_pyarrow(py)?,
        )?;
    }
    Ok(d)
}

/// The conditions of the dataset in `path` (what steps of a job reading it see).
#[pyfunction]
fn conditions(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyDict>> {
    let c = quiver::load_dataset(&path).map_err(|e| to_pyerr(py, e))?;
    conditions_dict(py, &c)
}

/// The step catalogue (`quiver steps`) as text, including the `python` type.
#[pyfunction]
fn describe_steps() -> String {
    registry().describe()
}

/// The address of the first data buffer of column `column` of every collected product chunk,
/// seen from Rust (tests compare it with pyarrow's and Polars' view).
#[pyfunction]
fn buffer_addresses(table: PyTable, column: &str) -> PyResult<Vec<usize>> {
    let (batches, schema) = table.into_inner();
    let i = schema
        .index_of(column)
        .map_err(|e| pyo3::exceptions::PyKeyError::new_err(e.to_string()))?;
    Ok(batches
        .iter()
        .map(|b| data_address(b.column(i).as_ref()))
        .collect())
}

/// Address of the first value of a primitive array's data buffer (0 if it has none).
fn data_address(a: &dyn arrow_array::Array) -> usize {
    let d = a.to_data();
    d.buffers()
        .first()
        .map(|buf| {
            buf.as_ptr() as usize + d.offset() * d.data_type().primitive_width().unwrap_or(0)
        })
        .unwrap_or(0)
}

/// The track quality names in code order (index = code): `quiver_reco::tracks::Quality`,
/// the one definition Python's `quiver.Quality` and `QUALITY_NAMES` take theirs from.
#[pyfunction]
fn quality_names() -> Vec<&'static str> {
    quiver::reco::tracks::Quality::ALL
        .iter()
        .map(|q| q.name())
        .collect()
}

#[pymodule]
fn _quiver(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPlan>()?;
    m.add_class::<pystep::PyBatch>()?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(verify_run, m)?)?;
    m.add_function(wrap_pyfunction!(tune_malloc, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_classifier_model, m)?)?;
    m.add_function(wrap_pyfunction!(describe_steps, m)?)?;
    m.add_function(wrap_pyfunction!(buffer_addresses, m)?)?;
    m.add_function(wrap_pyfunction!(conditions, m)?)?;
    m.add_function(wrap_pyfunction!(quality_names, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    let sys = m.py().import("sys")?;
    let version: String = sys
        .getattr("version")?
        .str()?
        .extract::<String>()?
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string();
    // sys._is_gil_enabled exists from 3.13 on; before that the GIL is always on.
    let gil = match sys.getattr("_is_gil_enabled") {
        Ok(f) => f.call0()?.extract::<bool>()?,
        Err(_) => true,
    };
    quiver_columnar::executor::set_runtime_note(format!(
        "Python {version}, GIL {}",
        if gil { GIL_NOTE } else { "disabled" }
    ));
    Ok(())
}
