//! Step types, their registry, and the interface a step implements.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use crate::conditions::Conditions;
use crate::error::{Error, Result};
use crate::params::{ParamSpec, Params};
use crate::product::{Product, ProductKey};

/// Where a step's implementation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// Rust on the host, parallelised with rayon.
    Cpu,
    /// CUDA kernels through cudarc.
    Gpu,
    /// Python code in an embedded interpreter.
    Python,
}

impl Backend {
    /// Every backend the framework knows.
    pub const ALL: [Backend; 3] = [Backend::Cpu, Backend::Gpu, Backend::Python];
    /// The name used in plans.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Gpu => "gpu",
            Backend::Python => "python",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown backend '{s}' (known: {})",
                    Backend::ALL.map(|b| b.name()).join(", ")
                )
            })
    }
}

/// An input slot of a step type: the plan names the producing label(s) under `name`.
#[derive(Clone, Debug)]
pub struct InputSpec {
    /// The plan key, e.g. `input`.
    pub name: String,
    /// The product type consumed; `None` accepts any type (compare, outputs).
    pub product_type: Option<String>,
    /// A list of labels rather than one.
    pub many: bool,
    /// May be left out when no producer exists.
    pub optional: bool,
    pub doc: String,
}

impl InputSpec {
    /// One product of `product_type`; may be omitted in the plan when exactly one step
    /// produces that type.
    pub fn one(name: &str, product_type: &str, doc: &str) -> Self {
        InputSpec {
            name: name.into(),
            product_type: Some(product_type.into()),
            many: false,
            optional: false,
            doc: doc.into(),
        }
    }
    /// One product of any type, named by label (or `label:type`).
    pub fn any(name: &str, doc: &str) -> Self {
        InputSpec {
            name: name.into(),
            product_type: None,
            many: false,
            optional: false,
            doc: doc.into(),
        }
    }
    /// A list of products of any type, named by label (or `label:type`).
    pub fn many(name: &str, doc: &str) -> Self {
        InputSpec {
            name: name.into(),
            product_type: None,
            many: true,
            optional: false,
            doc: doc.into(),
        }
    }
}

/// What a step consumes and produces, once its parameters are known.
#[derive(Clone, Debug, Default)]
pub struct Signature {
    pub inputs: Vec<InputSpec>,
    /// Product types published under the step's label.
    pub outputs: Vec<String>,
}

/// A registered step type.
#[derive(Clone)]
pub struct StepType {
    pub name: &'static str,
    /// One line.
    pub doc: &'static str,
    pub params: Vec<ParamSpec>,
    /// Consumes/produces; for most types independent of the parameters.
    pub signature: Signature,
    /// Backends with an implementation.
    pub backends: Vec<Backend>,
    /// Builds the step for one job (after the whole plan validated).
    pub build: fn(&StepConfig) -> Result<Box<dyn Step>>,
}

impl fmt::Debug for StepType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepType")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What every step sees of the job: directories and conditions.
#[derive(Clone, Debug, Default)]
pub struct JobContext {
    /// The input dataset, if any.
    pub input: Option<PathBuf>,
    /// Where outputs go.
    pub output: PathBuf,
    pub conditions: Conditions,
}

/// Everything a step type needs to build one step: label, backend, parameters, resolved
/// input and output keys, and the job context. One constructor signature for all steps.
#[derive(Clone, Debug)]
pub struct StepConfig {
    pub label: String,
    pub type_name: String,
    pub backend: Backend,
    pub params: Params,
    /// Resolved product keys per input slot.
    pub inputs: BTreeMap<String, Vec<ProductKey>>,
    /// Keys this step publishes.
    pub outputs: Vec<ProductKey>,
    pub job: Arc<JobContext>,
}

impl StepConfig {
    /// The single product key of input slot `name`.
    pub fn input(&self, name: &str) -> Result<ProductKey> {
        match self.inputs.get(name).map(Vec::as_slice) {
            Some([k]) => Ok(k.clone()),
            _ => Err(Error::plan(
                &self.label,
                format!("input '{name}' is not resolved to exactly one product"),
            )),
        }
    }
    /// All product keys of input slot `name` (empty when omitted and optional).
    pub fn inputs(&self, name: &str) -> &[ProductKey] {
        self.inputs.get(name).map(Vec::as_slice).unwrap_or(&[])
    }
    /// The job's condition of type `T`; its absence is a plan error naming this step.
    pub fn condition<T: std::any::Any + Send + Sync>(&self) -> Result<Arc<T>> {
        self.job
            .conditions
            .get::<T>()
            .map_err(|e| Error::plan(&self.label, e.to_string()))
    }
    /// A plan error about this step's parameter `key`, for checks a type cannot express.
    pub fn param_error(&self, key: &str, msg: impl fmt::Display) -> Error {
        Error::Param {
            step: self.label.clone(),
            key: key.to_string(),
            value: self.params.get(key).map(|v| v.to_string()),
            msg: format!("parameter '{key}': {msg}"),
        }
    }
}

/// The products of one event batch, as a step sees them.
pub struct EventBatch {
    first_event: u64,
    n_events: usize,
    products: HashMap<ProductKey, Arc<Product>>,
    /// Keys the running step may publish (its label and declared types).
    allowed: Vec<ProductKey>,
    /// The input's events when the job replays them (`RunOptions::cycle_input`).
    input_cycle: Option<u64>,
    /// Where transfers of device products are recorded (set by the executor).
    traffic: Option<Arc<crate::residency::TrafficLog>>,
    /// Device copies of host products, made once per batch and device and shared by every
    /// GPU step of the batch (dropped, and their device memory returned, with the batch).
    uploads: std::sync::Mutex<HashMap<(ProductKey, String), Arc<dyn crate::residency::DeviceData>>>,
}

impl EventBatch {
    /// An empty batch of events `first_event..first_event + n_events`.
    pub fn new(first_event: u64, n_events: usize) -> Self {
        EventBatch {
            first_event,
            n_events,
            products: HashMap::new(),
            allowed: Vec::new(),
            input_cycle: None,
            traffic: None,
            uploads: Default::default(),
        }
    }
    /// First event number (absolute).
    pub fn first_event(&self) -> u64 {
        self.first_event
    }
    /// Events in the batch.
    pub fn n_events(&self) -> usize {
        self.n_events
    }
    /// The events of the batch, absolute.
    pub fn events(&self) -> std::ops::Range<u64> {
        self.first_event..self.first_event + self.n_events as u64
    }
    /// Makes the batch read its events from an input of `events` events replayed from the
    /// start (`RunOptions::cycle_input`; `None` or 0: no replay). The executor sets it.
    pub fn set_input_cycle(&mut self, events: Option<u64>) {
        self.input_cycle = events.filter(|&n| n > 0);
    }
    /// The input event that the batch's `i`-th event reads: its absolute number, or that
    /// number modulo the input's size when the job replays the input.
    ///
    /// ```
    /// use quiver_columnar::EventBatch;
    /// let mut b = EventBatch::new(6, 4);
    /// assert_eq!(b.input_event(3), 9);
    /// b.set_input_cycle(Some(8));
    /// assert_eq!((0..4).map(|i| b.input_event(i)).collect::<Vec<_>>(), [6, 7, 0, 1]);
    /// assert_eq!(b.input_ranges(), [6..8, 0..2]);
    /// ```
    pub fn input_event(&self, i: usize) -> u64 {
        let e = self.first_event + i as u64;
        self.input_cycle.map_or(e, |n| e % n)
    }
    /// The input events of the batch as contiguous ranges, in the batch's order: one range,
    /// or several where a replayed input wraps around.
    pub fn input_ranges(&self) -> Vec<std::ops::Range<u64>> {
        let Some(n) = self.input_cycle else {
            return vec![self.events()];
        };
        let mut out: Vec<std::ops::Range<u64>> = Vec::new();
        let mut left = self.n_events as u64;
        let mut at = self.first_event % n;
        while left > 0 {
            let take = left.min(n - at);
            out.push(at..at + take);
            left -= take;
            at = 0;
        }
        out
    }
    /// A product by key, for a host consumer; shared, never copied. A product that lives
    /// only on a device is downloaded here, once: later host consumers share the host view.
    pub fn get(&self, key: &ProductKey) -> Result<Arc<Product>> {
        let p = self.get_resident(key)?;
        if p.device_data().is_some() {
            self.download(key, &p)?;
        }
        Ok(p)
    }
    /// A product by key wherever it lives, with no transfer: what a GPU step uses to take
    /// the device copy ([`Product::device_data`]) of a product made by an earlier GPU step.
    pub fn get_resident(&self, key: &ProductKey) -> Result<Arc<Product>> {
        self.products
            .get(key)
            .cloned()
            .ok_or_else(|| Error::MissingProduct {
                product: key.to_string(),
            })
    }
    /// Makes the host view of a product (a download if it lives only on a device) and
    /// records the transfer in the job's traffic log.
    pub fn download(&self, key: &ProductKey, product: &Product) -> Result<()> {
        let (_, made) = product
            .host_with_transfer()
            .map_err(|e| Error::data(format!("product {key}: {e}")))?;
        if let (Some((bytes, time)), Some(log)) = (made, &self.traffic) {
            log.download(key, bytes, time);
        }
        Ok(())
    }
    /// The copy of a product on `device`, for a GPU step: the product's own device data when
    /// it was made there (no transfer), else an upload of its host view made once per batch
    /// and device, shared by every later GPU step of the batch and recorded in the traffic
    /// log.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use arrow_array::{Int32Array, RecordBatch};
    /// # use arrow_schema::{DataType, Field};
    /// # use quiver_columnar::product::{product_schema, Product};
    /// # use quiver_columnar::residency::{Device, DeviceData};
    /// # use quiver_columnar::{EventBatch, ProductKey};
    /// #[derive(Debug)]
    /// struct Copy(RecordBatch);
    /// impl DeviceData for Copy {
    ///     fn device(&self) -> &str { "toy:0" }
    ///     fn nbytes(&self) -> usize { self.0.get_array_memory_size() }
    ///     fn download(&self) -> quiver_columnar::Result<RecordBatch> { Ok(self.0.clone()) }
    ///     fn as_any(&self) -> &dyn std::any::Any { self }
    /// }
    /// struct Toy;
    /// impl Device for Toy {
    ///     fn name(&self) -> &str { "toy:0" }
    ///     fn upload(&self, b: &RecordBatch) -> quiver_columnar::Result<Arc<dyn DeviceData>> { Ok(Arc::new(Copy(b.clone()))) }
    /// }
    /// let schema = product_schema("ints", 1, vec![Field::new("v", DataType::Int32, false)]);
    /// let rows = RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![1, 2]))]).unwrap();
    /// let mut batch = EventBatch::new(0, 1);
    /// let key = ProductKey::new("ints", "source");
    /// batch.set_allowed(&[key.clone()]);
    /// batch.put(Product::from_lengths(rows, [2]).unwrap()).unwrap();
    /// let a = batch.on_device(&key, &Toy).unwrap();
    /// let b = batch.on_device(&key, &Toy).unwrap();
    /// assert!(Arc::ptr_eq(&a, &b)); // uploaded once, shared
    /// ```
    pub fn on_device(
        &self,
        key: &ProductKey,
        device: &dyn crate::residency::Device,
    ) -> Result<Arc<dyn crate::residency::DeviceData>> {
        let p = self.get_resident(key)?;
        if let Some(d) = p.device_data() {
            if d.device() == device.name() && d.holds_every_column() {
                return Ok(d.clone());
            }
        }
        let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        let cache_key = (key.clone(), device.name().to_string());
        if let Some(d) = uploads.get(&cache_key) {
            return Ok(d.clone());
        }
        // A product on another device goes through the host.
        let host = self.get(key)?;
        let t0 = std::time::Instant::now();
        let d = device.upload(host.host()?).map_err(|e| {
            Error::data(format!("uploading product {key} to {}: {e}", device.name()))
        })?;
        self.record_upload(key, d.nbytes(), t0.elapsed());
        uploads.insert(cache_key, d.clone());
        Ok(d)
    }
    /// Records an upload of a host product to a device (a GPU step calls this once per
    /// product and batch, whichever step uploads it first).
    pub fn record_upload(&self, key: &ProductKey, bytes: usize, time: std::time::Duration) {
        if let Some(log) = &self.traffic {
            log.upload(key, bytes, time);
        }
    }
    /// Sets the job's traffic log (the executor calls this).
    pub fn set_traffic(&mut self, log: Arc<crate::residency::TrafficLog>) {
        self.traffic = Some(log);
    }
    /// The job's traffic log, if the executor set one.
    pub fn traffic(&self) -> Option<&Arc<crate::residency::TrafficLog>> {
        self.traffic.as_ref()
    }
    /// All products, by key.
    pub fn products(&self) -> impl Iterator<Item = (&ProductKey, &Arc<Product>)> {
        self.products.iter()
    }
    /// Publishes a product under the running step's label. Its type must be one the step
    /// declared, it must cover exactly this batch's events, and it cannot be replaced.
    pub fn put(&mut self, product: Product) -> Result<()> {
        let key = self.declared_key(product.type_name())?;
        if product.n_events() != self.n_events {
            return Err(Error::data(format!(
                "product {key} covers {} events but the batch has {}",
                product.n_events(),
                self.n_events
            )));
        }
        if self.products.contains_key(&key) {
            return Err(Error::data(format!("product {key} was already published")));
        }
        if let (Some(log), Some(d)) = (&self.traffic, product.device_data()) {
            log.produced(&key, d.device(), d.nbytes());
        }
        self.products.insert(key, Arc::new(product));
        Ok(())
    }
    /// Attaches `data`, a device copy of some or all of its columns, to the product of type
    /// `type_name` that the running step published in this batch: a GPU step that downloaded
    /// its result keeps what the next GPU step of the batch reads, which then needs no upload.
    /// The product stays a host product (host consumers read it as before).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use arrow_array::{Int32Array, RecordBatch};
    /// # use arrow_schema::{DataType, Field};
    /// # use quiver_columnar::product::{product_schema, Product};
    /// # use quiver_columnar::residency::{DeviceData, Placement};
    /// # use quiver_columnar::{EventBatch, ProductKey};
    /// #[derive(Debug)]
    /// struct Half; // one column of two: never downloaded
    /// impl DeviceData for Half {
    ///     fn device(&self) -> &str { "toy:0" }
    ///     fn nbytes(&self) -> usize { 8 }
    ///     fn download(&self) -> quiver_columnar::Result<RecordBatch> { unreachable!() }
    ///     fn as_any(&self) -> &dyn std::any::Any { self }
    ///     fn holds_every_column(&self) -> bool { false }
    /// }
    /// let schema = product_schema("ints", 1, vec![Field::new("v", DataType::Int32, false)]);
    /// let rows = RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![1, 2]))]).unwrap();
    /// let mut batch = EventBatch::new(0, 1);
    /// let key = ProductKey::new("ints", "source");
    /// batch.set_allowed(&[key.clone()]);
    /// assert!(batch.attach_device("ints", Arc::new(Half)).is_err()); // not published yet
    /// batch.put(Product::from_lengths(rows, [2]).unwrap()).unwrap();
    /// batch.attach_device("ints", Arc::new(Half)).unwrap();
    /// let p = batch.get(&key).unwrap();
    /// assert_eq!(p.placement(), Placement::Both);
    /// assert_eq!(p.host().unwrap().num_rows(), 2);
    /// ```
    pub fn attach_device(
        &mut self,
        type_name: &str,
        data: Arc<dyn crate::residency::DeviceData>,
    ) -> Result<()> {
        let key = self.declared_key(type_name)?;
        let p = self.products.remove(&key).ok_or_else(|| {
            Error::data(format!(
                "product {key}: attaching device data before it was published"
            ))
        })?;
        let with = match Arc::try_unwrap(p) {
            Ok(p) if p.device_data().is_none() => Ok(p.with_device(data)),
            Ok(p) => Err((
                Arc::new(p),
                format!("product {key} already has device data"),
            )),
            Err(p) => Err((
                p,
                format!(
                    "product {key} is already shared; attach device data before handing it out"
                ),
            )),
        };
        match with {
            Ok(p) => {
                self.products.insert(key, Arc::new(p));
                Ok(())
            }
            Err((p, msg)) => {
                self.products.insert(key, p);
                Err(Error::data(msg))
            }
        }
    }
    /// Records in the job's traffic log that the running step computed its published product
    /// of type `type_name` on `device` and downloaded `bytes` of it in `time` (a GPU step
    /// whose result is a host product): the run summary's residency table lists it as made
    /// there, with the download and the device bytes it still holds (a mirror's).
    pub fn record_result_download(
        &self,
        type_name: &str,
        device: &str,
        bytes: usize,
        time: std::time::Duration,
    ) -> Result<()> {
        let key = self.declared_key(type_name)?;
        let p = self.products.get(&key).ok_or_else(|| {
            Error::data(format!(
                "product {key}: recording its download before it was published"
            ))
        })?;
        if let Some(log) = &self.traffic {
            log.produced(&key, device, p.device_nbytes());
            log.download(&key, bytes, time);
        }
        Ok(())
    }
    /// The key under which the running step publishes its product of type `type_name`; an
    /// error naming the declared types when it declared none of that type.
    fn declared_key(&self, type_name: &str) -> Result<ProductKey> {
        self.allowed
            .iter()
            .find(|k| k.type_name == type_name)
            .cloned()
            .ok_or_else(|| Error::NotDeclared {
                product: type_name.to_string(),
                declared: self.allowed.iter().map(|k| k.type_name.clone()).collect(),
            })
    }
    /// Sets the keys the next step may publish (the executor calls this).
    pub fn set_allowed(&mut self, keys: &[ProductKey]) {
        self.allowed.clear();
        self.allowed.extend_from_slice(keys);
    }
    /// Drops a product (the executor calls this once no later step needs it).
    pub fn remove(&mut self, key: &ProductKey) -> Option<Arc<Product>> {
        self.products.remove(key)
    }
}

/// A step of a plan, built once per job and shared by all workers.
pub trait Step: Send + Sync {
    /// Processes one event batch: reads products, publishes new ones.
    fn process(&self, batch: &mut EventBatch) -> Result<()>;
    /// How many events the step can provide (input sources), if it knows.
    fn n_events(&self) -> Option<u64> {
        None
    }
    /// Called once before the first batch with the job's events: `events` events from
    /// `first_event` (the output steps write in event order from there).
    fn begin_job(&self, _first_event: u64, _events: u64) -> Result<()> {
        Ok(())
    }
    /// Called once at the end of the job, after the last batch, with whether the job
    /// succeeded. Returns an optional report for the run summary.
    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(None)
    }
    /// Time spent inside `process` on one-off work, summed over workers: what a step does
    /// once per worker on its first batch (a Python step's `__init__`). The step table
    /// reports it apart ([`crate::StepTiming::one_off`]), not in the step's time per event.
    fn one_off_time(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

/// Signature and parameters of a step type whose consumes/produces depend on the step as
/// written in the plan (a Python step declares them in its class): called during
/// validation, before the inputs are resolved.
pub type DynamicSignatureFn = fn(&crate::plan::StepSpec) -> Result<(Signature, Vec<ParamSpec>)>;

/// The catalogue of step types.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    types: BTreeMap<&'static str, StepType>,
    dynamic: BTreeMap<&'static str, DynamicSignatureFn>,
    /// Resolves `backend = "auto"` (set by a backend crate, e.g. quiver-gpu).
    auto: Option<fn(&StepType) -> Backend>,
    /// Checks across steps (e.g. a parameter two step types must agree on), run on every
    /// validated plan.
    plan_checks: Vec<PlanCheck>,
    /// Step types that write files into the job's output directory, with the names of
    /// the files each step of the type writes.
    file_writers: BTreeMap<&'static str, FileNamesFn>,
}

/// The names of the files one step of a file-writing type writes into the output
/// directory, from its resolved parameters and inputs.
pub type FileNamesFn = fn(&crate::plan::ResolvedStep) -> Vec<String>;

/// A check of a whole validated plan, registered by the crate that knows the constraint.
pub type PlanCheck = fn(&crate::plan::ResolvedPlan) -> Result<()>;

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }
    /// The framework's own step types: outputs and the toy/example steps.
    pub fn with_builtin() -> Self {
        let mut r = Self::new();
        crate::output::register(&mut r);
        crate::toy::register(&mut r);
        crate::compare::register(&mut r);
        r
    }
    /// Adds a step type; a second type of one name is refused (see [`Registry::try_add`]).
    ///
    /// # Panics
    ///
    /// When a type of this name is already registered: two crates claiming one name is a
    /// bug of the program, found by the first run of any test; [`Registry::replace`]
    /// overrides a type on purpose.
    pub fn add(&mut self, t: StepType) {
        if let Err(e) = self.try_add(t) {
            panic!("{e}");
        }
    }
    /// Adds a step type, or refuses it with [`Error::DuplicateStepType`] when one of that
    /// name is registered: silently replacing it made the catalogue depend on the order in
    /// which crates registered.
    ///
    /// ```
    /// use quiver_columnar::{Error, Registry};
    /// let mut r = Registry::with_builtin();
    /// let square = r.get("square").unwrap().clone();
    /// let e = r.try_add(square).unwrap_err();
    /// assert!(matches!(&e, Error::DuplicateStepType { name } if name == "square"));
    /// ```
    pub fn try_add(&mut self, t: StepType) -> Result<()> {
        if self.types.contains_key(t.name) {
            return Err(Error::DuplicateStepType {
                name: t.name.to_string(),
            });
        }
        self.types.insert(t.name, t);
        Ok(())
    }
    /// Adds `t` or replaces the type of its name, on purpose (a backend crate adding a
    /// backend to a type, the Python package replacing the `python` placeholder); returns
    /// the type it replaced.
    pub fn replace(&mut self, t: StepType) -> Option<StepType> {
        self.dynamic.remove(t.name);
        self.types.insert(t.name, t)
    }
    /// Adds a step type whose signature and parameters `signature` computes per step of a
    /// plan; `t.signature` and `t.params` then only document the type. Refuses a duplicate
    /// name like [`Registry::add`].
    pub fn add_dynamic(&mut self, t: StepType, signature: DynamicSignatureFn) {
        let name = t.name;
        self.add(t);
        self.dynamic.insert(name, signature);
    }
    /// [`Registry::add_dynamic`], replacing a type of the same name on purpose (see
    /// [`Registry::replace`]).
    pub fn replace_dynamic(&mut self, t: StepType, signature: DynamicSignatureFn) {
        let name = t.name;
        self.replace(t);
        self.dynamic.insert(name, signature);
    }
    /// The per-step signature function of a dynamic step type.
    pub fn dynamic(&self, name: &str) -> Option<DynamicSignatureFn> {
        self.dynamic.get(name).copied()
    }
    /// Adds a check that runs on every plan validated against this registry, after each step
    /// is resolved: constraints between steps that no single step type can see.
    pub fn add_plan_check(&mut self, check: PlanCheck) {
        self.plan_checks.push(check);
    }
    /// Declares that steps of type `name` write files into the job's output directory
    /// ([`JobContext::output`]): a plan with one gets a whole-run atomic output directory
    /// ([`crate::rundir`]).
    /// `files` names what one step of the type writes: two steps of a plan that would
    /// write one file are refused before any event ([`Registry::check_output_files`]).
    pub fn add_file_writer(&mut self, name: &'static str, files: FileNamesFn) {
        self.file_writers.insert(name, files);
    }
    /// Whether any step of `plan` writes files (see [`Registry::add_file_writer`]).
    pub fn writes_files(&self, plan: &crate::plan::ResolvedPlan) -> bool {
        plan.steps
            .iter()
            .any(|s| self.file_writers.contains_key(s.type_name.as_str()))
    }
    /// Refuses a plan two of whose steps would write the same file (a `histograms` file
    /// named like a product's, two `histograms` steps with one `file`): one would silently
    /// overwrite the other, or the job would fail at its end.
    pub fn check_output_files(&self, plan: &crate::plan::ResolvedPlan) -> Result<()> {
        let mut writer: BTreeMap<String, &str> = BTreeMap::new();
        for s in &plan.steps {
            let Some(files) = self.file_writers.get(s.type_name.as_str()) else {
                continue;
            };
            for f in files(s) {
                if let Some(first) = writer.insert(f.clone(), &s.label) {
                    let who = if first == s.label {
                        "this step writes it twice".to_string()
                    } else {
                        format!("step '{first}' writes it too")
                    };
                    return Err(Error::plan(&s.label, format!("writes {f} into the output directory, and {who}: give one of them another file name")));
                }
            }
        }
        Ok(())
    }
    /// The plan checks, in the order they were added.
    pub fn plan_checks(&self) -> &[PlanCheck] {
        &self.plan_checks
    }
    /// Sets how `backend = "auto"` resolves for a step type (a backend crate that can
    /// probe its device installs this).
    pub fn set_auto_backend(&mut self, f: fn(&StepType) -> Backend) {
        self.auto = Some(f);
    }
    /// The backend `backend = "auto"` means for `t`: the installed resolver's answer, else
    /// `cpu` when `t` has it, else its first backend.
    pub fn resolve_auto(&self, t: &StepType) -> Backend {
        match self.auto {
            Some(f) => f(t),
            None if t.backends.contains(&Backend::Cpu) => Backend::Cpu,
            None => t.backends.first().copied().unwrap_or(Backend::Cpu),
        }
    }
    /// A step type by name.
    pub fn get(&self, name: &str) -> Option<&StepType> {
        self.types.get(name)
    }
    /// All step types in name order.
    pub fn iter(&self) -> impl Iterator<Item = &StepType> {
        self.types.values()
    }

    /// The catalogue as text: every type with its backends, inputs, outputs and parameters.
    pub fn describe(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        for t in self.iter() {
            let _ = writeln!(
                s,
                "{}  [{}]\n    {}",
                t.name,
                t.backends
                    .iter()
                    .map(|b| b.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                t.doc
            );
            for i in &t.signature.inputs {
                let ty = i.product_type.as_deref().unwrap_or("any");
                let _ = writeln!(
                    s,
                    "    input  {:<18} {}{}{}  {}",
                    i.name,
                    if i.many { "list of " } else { "" },
                    ty,
                    if i.optional { " (optional)" } else { "" },
                    i.doc
                );
            }
            for o in &t.signature.outputs {
                let _ = writeln!(s, "    output {o}");
            }
            for p in &t.params {
                let d = p
                    .default
                    .as_ref()
                    .map(|d| d.to_string())
                    .unwrap_or_else(|| "(required)".into());
                let range = p
                    .range
                    .map(|r| format!(" (valid: {r})"))
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "    param  {:<18} {:<10} = {:<12} {}{range}",
                    p.name,
                    p.kind.to_string(),
                    d,
                    p.doc
                );
            }
            s.push('\n');
        }
        s
    }
}
