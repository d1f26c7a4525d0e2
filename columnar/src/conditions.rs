//! Conditions: per-dataset constants, loaded once, shared read-only by all workers and
//! reachable by their Rust type. The framework knows no detector: any `Send + Sync` type can
//! be a condition.

use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use arrow_array::RecordBatch;

use crate::error::{Error, Result};

/// Named Arrow tables of one condition, made on first request and then shared.
type Export = Arc<dyn Fn() -> Vec<(String, RecordBatch)> + Send + Sync>;

/// A read-only store of conditions keyed by type. A condition may come with an exporter to
/// Arrow tables, which is how code outside Rust (Python steps) reads it.
#[derive(Clone, Default)]
pub struct Conditions {
    map: BTreeMap<TypeId, (&'static str, Arc<dyn Any + Send + Sync>)>,
    exports: BTreeMap<&'static str, (Export, Arc<ExportedTables>)>,
}

/// A condition's tables, exported once on first use.
type ExportedTables = OnceLock<Vec<(String, RecordBatch)>>;

impl std::fmt::Debug for Conditions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

fn short_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    full.rsplit("::").next().unwrap_or(full)
}

impl Conditions {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds (or replaces) the condition of type `T`.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.insert_arc(Arc::new(value));
    }
    /// Adds a shared condition.
    pub fn insert_arc<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        self.map
            .insert(TypeId::of::<T>(), (short_name::<T>(), value));
    }
    /// Adds the condition of type `T` with its conversion to named Arrow tables, run at most
    /// once, when [`Conditions::tables`] is first called.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use arrow_array::{Float32Array, RecordBatch};
    /// use quiver_columnar::Conditions;
    /// struct BeamSpot { z: f32 }
    /// let mut c = Conditions::new();
    /// c.insert_exported(BeamSpot { z: 0.1 }, |b| {
    ///     let z = Arc::new(Float32Array::from(vec![b.z])) as _;
    ///     vec![("BeamSpot".to_string(), RecordBatch::try_from_iter([("z", z)]).unwrap())]
    /// });
    /// assert_eq!(c.get::<BeamSpot>().unwrap().z, 0.1);
    /// assert_eq!(c.tables()[0].0, "BeamSpot");
    /// ```
    pub fn insert_exported<T: Any + Send + Sync>(
        &mut self,
        value: T,
        export: fn(&T) -> Vec<(String, RecordBatch)>,
    ) {
        let value = Arc::new(value);
        let v = value.clone();
        self.insert_arc(value);
        self.exports.insert(
            short_name::<T>(),
            (Arc::new(move || export(&v)), Arc::new(OnceLock::new())),
        );
    }
    /// Every exported condition as named Arrow tables, sorted by name. The tables are made
    /// once per store (clones share them) and are not copied when handed out.
    pub fn tables(&self) -> Vec<(String, RecordBatch)> {
        let mut all: Vec<(String, RecordBatch)> = self
            .exports
            .values()
            .flat_map(|(export, cell)| cell.get_or_init(|| export()).iter().cloned())
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
    /// The condition of type `T`, or an error naming the type and what is available.
    ///
    /// ```
    /// use quiver_columnar::Conditions;
    /// struct BeamSpot { z: f32 }
    /// let mut c = Conditions::new();
    /// c.insert(BeamSpot { z: 0.1 });
    /// assert_eq!(c.get::<BeamSpot>().unwrap().z, 0.1);
    /// assert!(c.get::<u32>().unwrap_err().to_string().contains("no condition 'u32'"));
    /// ```
    pub fn get<T: Any + Send + Sync>(&self) -> Result<Arc<T>> {
        match self.map.get(&TypeId::of::<T>()) {
            Some((_, v)) => Ok(v.clone().downcast::<T>().expect("keyed by TypeId")),
            None => Err(Error::MissingCondition {
                name: short_name::<T>().to_string(),
                available: self.names().iter().map(|n| n.to_string()).collect(),
            }),
        }
    }
    /// Names of the loaded conditions.
    pub fn names(&self) -> Vec<&'static str> {
        let mut n: Vec<_> = self.map.values().map(|(n, _)| *n).collect();
        n.sort_unstable();
        n
    }
}
