//! The reference's validation histograms (`HistoValidator`): their definitions,
//! how each is filled from our products, and the `histograms` step that accumulates them
//! over a job and writes them at the end.
//!
//! Each histogram is filled only when the products it needs are connected; a plan running
//! part of the chain gets the histograms of that part. Per-event quantities (counts) come
//! from [`crate::counts`]; per-object quantities are whole columns filled at once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use quiver_columnar::{
    Backend, EventBatch, ParamSpec, Registry, Signature, Step, StepConfig, StepType,
};

use crate::chain::{any_column, column, input_specs, ChainKeys, ChainProducts, Input};
use crate::counts::{batch_counts, BatchCounts, QUALITY_LOOSE};
use crate::error::{Result, ValidationError};
use crate::hist::{self, Histogram};

/// What a histogram is filled with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Once per event: a per-event count.
    PerEvent(Count),
    /// Every value of a column of a product.
    Column(Input, &'static str),
    /// The values of a `tracks` column for tracks with hits and quality ≥ loose.
    SelectedTracks(&'static str),
    /// For each event, clusters in each of the modules 0..nModules (by module index, as the
    /// reference reads `clusInModule[0..nModules)`).
    ClustersPerModule,
}

/// Per-event counts of [`crate::counts::BatchCounts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Digis,
    Modules,
    Clusters,
    Hits,
    LooseTracks,
    Vertices,
}

/// One histogram of the reference's set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistDef {
    pub name: &'static str,
    pub n: u32,
    pub min: f32,
    pub max: f32,
    pub fill: Fill,
}

const fn def(name: &'static str, n: u32, min: f32, max: f32, fill: Fill) -> HistDef {
    HistDef {
        name,
        n,
        min,
        max,
        fill,
    }
}

use Fill::{Column, PerEvent, SelectedTracks};
use Input::{CalibratedDigis, Hits, Vertices};

/// The reference's histograms, in its order.
pub const REFERENCE_HISTOGRAMS: &[HistDef] = &[
    def("digi_n", 100, 0.0, 1e5, PerEvent(Count::Digis)),
    def("digi_adc", 250, 0.0, 5e4, Column(CalibratedDigis, "charge")),
    def("module_n", 100, 1500.0, 2000.0, PerEvent(Count::Modules)),
    def("cluster_n", 200, 5000.0, 25000.0, PerEvent(Count::Clusters)),
    def(
        "cluster_per_module_n",
        110,
        0.0,
        110.0,
        Fill::ClustersPerModule,
    ),
    def("hit_n", 200, 5000.0, 25000.0, PerEvent(Count::Hits)),
    def("hit_lx", 200, -1.0, 1.0, Column(Hits, "x_local")),
    def("hit_ly", 800, -4.0, 4.0, Column(Hits, "y_local")),
    def("hit_lex", 100, 0.0, 5e-5, Column(Hits, "xerr_local")),
    def("hit_ley", 100, 0.0, 1e-4, Column(Hits, "yerr_local")),
    def("hit_gx", 200, -20.0, 20.0, Column(Hits, "x_global")),
    def("hit_gy", 200, -20.0, 20.0, Column(Hits, "y_global")),
    def("hit_gz", 600, -60.0, 60.0, Column(Hits, "z_global")),
    def("hit_gr", 200, 0.0, 20.0, Column(Hits, "r_global")),
    def("hit_charge", 400, 0.0, 4e6, Column(Hits, "charge")),
    def("hit_sizex", 800, 0.0, 800.0, Column(Hits, "size_x")),
    def("hit_sizey", 800, 0.0, 800.0, Column(Hits, "size_y")),
    def("track_n", 150, 0.0, 15000.0, PerEvent(Count::LooseTracks)),
    def("track_nhits", 3, 3.0, 6.0, SelectedTracks("n_hits")),
    def("track_chi2", 100, 0.0, 40.0, SelectedTracks("chi2")),
    def("track_pt", 400, 0.0, 400.0, SelectedTracks("pt")),
    def("track_eta", 100, -3.0, 3.0, SelectedTracks("eta")),
    def("track_phi", 100, -3.15, 3.15, SelectedTracks("phi")),
    def("track_tip", 100, -1.0, 1.0, SelectedTracks("tip")),
    def("track_tip_zoom", 100, -0.05, 0.05, SelectedTracks("tip")),
    def("track_zip", 100, -15.0, 15.0, SelectedTracks("zip")),
    def("track_zip_zoom", 100, -0.1, 0.1, SelectedTracks("zip")),
    def("track_quality", 6, 0.0, 6.0, SelectedTracks("quality")),
    def("vertex_n", 60, 0.0, 60.0, PerEvent(Count::Vertices)),
    def("vertex_z", 100, -15.0, 15.0, Column(Vertices, "z")),
    def("vertex_chi2", 100, 0.0, 40.0, Column(Vertices, "chi2")),
    def("vertex_ndof", 170, 0.0, 170.0, Column(Vertices, "ndof")),
    def("vertex_pt2", 100, 0.0, 4000.0, Column(Vertices, "pt2")),
];

/// The input slots of the `histograms` step, with what each fills.
const HISTOGRAM_INPUTS: [(Input, &str); 6] = [
    (Input::Digis, "digi_n"),
    (
        Input::CalibratedDigis,
        "digi_n, digi_adc, module_n, cluster_per_module_n",
    ),
    (
        Input::ClusteredDigis,
        "cluster_n, cluster_per_module_n (also digi_n)",
    ),
    (
        Input::Hits,
        "hit_*; cluster counts when clustered_digis is absent",
    ),
    (Input::Tracks, "track_*"),
    (Input::Vertices, "vertex_*"),
];

impl HistDef {
    /// Whether the connected inputs (`has`) allow filling this histogram.
    pub fn available(&self, has: impl Fn(Input) -> bool) -> bool {
        match self.fill {
            Fill::PerEvent(Count::Digis) => {
                has(Input::Digis) || has(Input::CalibratedDigis) || has(Input::ClusteredDigis)
            }
            Fill::PerEvent(Count::Modules) => has(Input::CalibratedDigis),
            Fill::PerEvent(Count::Clusters) => has(Input::ClusteredDigis) || has(Input::Hits),
            Fill::PerEvent(Count::Hits) => has(Input::Hits),
            Fill::PerEvent(Count::LooseTracks) | Fill::SelectedTracks(_) => has(Input::Tracks),
            Fill::PerEvent(Count::Vertices) => has(Input::Vertices),
            Fill::Column(i, _) => has(i),
            Fill::ClustersPerModule => {
                has(Input::CalibratedDigis) && (has(Input::ClusteredDigis) || has(Input::Hits))
            }
        }
    }
}

/// A set of histograms by name (name order, as the reference's `std::map`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSet {
    defs: Vec<HistDef>,
    hists: BTreeMap<&'static str, Histogram>,
}

impl HistogramSet {
    /// Empty histograms for `defs`.
    pub fn new(defs: &[HistDef]) -> Result<Self> {
        let mut hists = BTreeMap::new();
        for d in defs {
            if hists
                .insert(d.name, Histogram::new(d.name, d.n, d.min, d.max)?)
                .is_some()
            {
                return Err(ValidationError::BadHistogram {
                    name: d.name.into(),
                    msg: "defined twice".into(),
                });
            }
        }
        Ok(HistogramSet {
            defs: defs.to_vec(),
            hists,
        })
    }

    /// The reference's histograms that the inputs `has` allow.
    pub fn for_inputs(has: impl Fn(Input) -> bool) -> Result<Self> {
        let defs: Vec<HistDef> = REFERENCE_HISTOGRAMS
            .iter()
            .filter(|d| d.available(&has))
            .copied()
            .collect();
        Self::new(&defs)
    }

    /// A histogram by name.
    pub fn get(&self, name: &str) -> Option<&Histogram> {
        self.hists.get(name)
    }

    /// The histograms in name order.
    pub fn histograms(&self) -> impl Iterator<Item = &Histogram> {
        self.hists.values()
    }

    /// An empty copy (same definitions).
    pub fn empty_like(&self) -> Self {
        let mut s = self.clone();
        for h in s.hists.values_mut() {
            h.counts.iter_mut().for_each(|c| *c = 0);
        }
        s
    }

    /// Adds the counts of a set with the same definitions.
    pub fn add(&mut self, other: &HistogramSet) -> Result<()> {
        for (name, h) in &other.hists {
            let mine = self
                .hists
                .get_mut(name)
                .ok_or_else(|| ValidationError::Mismatch {
                    a: "set".into(),
                    b: name.to_string(),
                })?;
            mine.add(h)?;
        }
        Ok(())
    }

    /// Fills every histogram of the set from one batch of products.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use arrow_array::{RecordBatch, UInt16Array};
    /// use arrow_schema::{DataType, Field};
    /// use quiver_columnar::{product_schema, Product};
    /// use quiver_validation::chain::{ChainProducts, Input};
    /// use quiver_validation::histograms::HistogramSet;
    /// let schema = product_schema("calibrated_digis", 1, ["row", "col", "charge", "module"]
    ///     .map(|n| Field::new(n, DataType::UInt16, false)).to_vec());
    /// let col = |v: Vec<u16>| Arc::new(UInt16Array::from(v)) as _;
    /// let b = RecordBatch::try_new(schema, vec![col(vec![1, 2, 3]), col(vec![1, 1, 1]),
    ///     col(vec![5000, 0, 300]), col(vec![7, 9999, 8])]).unwrap();
    /// let p = ChainProducts::new(2, [(Input::CalibratedDigis, Product::from_lengths(b, [2, 1]).unwrap())]).unwrap();
    /// let mut set = HistogramSet::for_inputs(|i| p.has(i)).unwrap();
    /// set.fill_batch(&p).unwrap();
    /// assert_eq!(set.get("digi_n").unwrap().counts[1], 2); // 2 and 1 digis: first bin of [0, 1e5)
    /// assert_eq!(set.get("digi_adc").unwrap().entries(), 3);
    /// assert_eq!(set.get("module_n").unwrap().counts[0], 2); // 1 module each: underflow
    /// ```
    pub fn fill_batch(&mut self, p: &ChainProducts) -> Result<()> {
        let counts = batch_counts(p)?;
        let mut loose: Option<Vec<bool>> = None;
        for d in &self.defs {
            let h = self
                .hists
                .get_mut(d.name)
                .expect("a histogram per definition");
            if !d.available(|i| p.has(i)) {
                return Err(ValidationError::Data(format!(
                    "histogram '{}': its input product is not in the batch",
                    d.name
                )));
            }
            match d.fill {
                Fill::PerEvent(c) => {
                    let v = per_event(&counts, c).ok_or_else(|| {
                        ValidationError::Data(format!("histogram '{}': count unavailable", d.name))
                    })?;
                    h.fill(&v.iter().map(|&x| x as f32).collect::<Vec<f32>>())?;
                }
                Fill::Column(input, name) => {
                    let prod = p.get(input).expect("available");
                    h.fill_array(any_column(prod, name)?)
                        .map_err(|e| context(prod.type_name(), name, e))?;
                }
                Fill::SelectedTracks(name) => {
                    let t = p.get(Input::Tracks).expect("available");
                    if loose.is_none() {
                        let nh = column::<arrow_array::types::UInt8Type>(t, "n_hits")?.values();
                        let q = column::<arrow_array::types::UInt8Type>(t, "quality")?.values();
                        loose = Some(
                            nh.iter()
                                .zip(q.iter())
                                .map(|(&n, &q)| n > 0 && q >= QUALITY_LOOSE)
                                .collect(),
                        );
                    }
                    let keep = loose.as_deref().expect("computed above");
                    h.fill_array_where(any_column(t, name)?, keep)
                        .map_err(|e| context("tracks", name, e))?;
                }
                Fill::ClustersPerModule => {
                    let (Some(nm), Some(cm)) = (&counts.n_modules, &counts.clus_in_module) else {
                        return Err(ValidationError::Data(format!(
                            "histogram '{}': counts unavailable",
                            d.name
                        )));
                    };
                    for (&n, per_module) in nm.iter().zip(cm) {
                        let vals: Vec<f32> =
                            per_module[..n as usize].iter().map(|&c| c as f32).collect();
                        h.fill(&vals)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes `<stem>.parquet` (and `<stem>.txt` in the reference's text format when `text`)
    /// into `dir`, each atomically. Returns the paths written.
    pub fn write(&self, dir: &std::path::Path, stem: &str, text: bool) -> Result<Vec<PathBuf>> {
        let hists: Vec<Histogram> = self.hists.values().cloned().collect();
        let mut written = vec![dir.join(format!("{stem}.parquet"))];
        hist::write_parquet(&written[0], &hists)?;
        if text {
            written.push(dir.join(format!("{stem}.txt")));
            hist::write_text(&written[1], &hists)?;
        }
        Ok(written)
    }
}

fn context(product: &str, column: &str, e: ValidationError) -> ValidationError {
    match e {
        ValidationError::NotANumber { name, index } => {
            ValidationError::Data(format!("histogram '{name}': {product}.{column} row {index} of the batch is NaN (the reference throws on NaN)"))
        }
        other => other,
    }
}

fn per_event(c: &BatchCounts, what: Count) -> Option<&Vec<u32>> {
    match what {
        Count::Digis => c.n_digis.as_ref(),
        Count::Modules => c.n_modules.as_ref(),
        Count::Clusters => c.n_clusters.as_ref(),
        Count::Hits => c.n_hits.as_ref(),
        Count::LooseTracks => c.n_tracks_loose.as_ref(),
        Count::Vertices => c.n_vertices.as_ref(),
    }
}

/// The `histograms` step: fills per batch into a local set, merges it into the job's set
/// (integer counts: the result does not depend on batch order or threads), writes at the end.
struct HistogramStep {
    keys: ChainKeys,
    total: Mutex<HistogramSet>,
    dir: PathBuf,
    stem: String,
    text: bool,
}

impl Step for HistogramStep {
    fn process(&self, batch: &mut EventBatch) -> quiver_columnar::Result<()> {
        let products = self.keys.get(batch)?;
        let mut local = self
            .total
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .empty_like();
        local.fill_batch(&products)?;
        self.total
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(&local)?;
        Ok(())
    }

    fn end_job(&self, success: bool) -> quiver_columnar::Result<Option<String>> {
        if !success {
            return Ok(Some("histograms not written: the job failed".into()));
        }
        let set = self.total.lock().unwrap_or_else(|p| p.into_inner());
        let written = set.write(&self.dir, &self.stem, self.text)?;
        let n = set.histograms().count();
        Ok(Some(format!(
            "{n} histograms -> {}",
            written
                .iter()
                .map(|p| p
                    .file_name()
                    .unwrap_or(p.as_os_str())
                    .to_string_lossy()
                    .into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

fn build_histograms(cfg: &StepConfig) -> quiver_columnar::Result<Box<dyn Step>> {
    let keys = ChainKeys::from_config(cfg, &HISTOGRAM_INPUTS.map(|(i, _)| i))?;
    let set = HistogramSet::for_inputs(|i| keys.has(i))?;
    if set.histograms().next().is_none() {
        return Err(quiver_columnar::Error::plan(
            &cfg.label,
            "no histogram can be filled: connect at least one of digis, calibrated_digis, clustered_digis, hits, tracks, vertices",
        ));
    }
    let stem = cfg.params.str("file").to_string();
    if stem.is_empty() || stem.contains(['/', '\\']) {
        return Err(cfg.param_error("file", "must be a plain file name without extension"));
    }
    Ok(Box::new(HistogramStep {
        keys,
        total: Mutex::new(set),
        dir: cfg.job.output.clone(),
        stem,
        text: cfg.params.bool("text"),
    }))
}

/// Registers `histograms`.
pub fn register(r: &mut Registry) {
    r.add_file_writer("histograms", |s| {
        let stem = s.params.str("file");
        let mut f = vec![format!("{stem}.parquet")];
        if s.params.bool("text") {
            f.push(format!("{stem}.txt"));
        }
        f
    });
    r.add(StepType {
        name: "histograms",
        doc: "The reference's validation histograms of the connected products, written at the end as Parquet (and text)",
        params: vec![
            ParamSpec::bool("text", false, "also write <file>.txt in the reference's text format (histograms_serial.txt)"),
            ParamSpec::str("file", "histograms", "file name stem in the job's output directory"),
        ],
        signature: Signature { inputs: input_specs(&HISTOGRAM_INPUTS), outputs: vec![] },
        backends: vec![Backend::Cpu],
        build: build_histograms,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Float32Array, Int32Array, Int8Array, RecordBatch, UInt8Array};
    use arrow_schema::{DataType, Field};
    use quiver_columnar::{product_schema, Product};
    use std::sync::Arc;

    fn f32s(v: &[f32]) -> ArrayRef {
        Arc::new(Float32Array::from(v.to_vec()))
    }

    /// Tracks of two events: (n_hits, quality, pt) = event 0: (4, loose), (0, highPurity),
    /// (3, dup); event 1: (5, tight).
    fn tracks() -> Product {
        let f = |n: &str, t: DataType| Field::new(n, t, false);
        let mut fields = vec![f("quality", DataType::UInt8)];
        fields.extend(["pt", "eta", "phi", "tip", "zip", "chi2"].map(|n| f(n, DataType::Float32)));
        fields.push(f("charge", DataType::Int8));
        fields.push(f("n_hits", DataType::UInt8));
        let cols: Vec<ArrayRef> = vec![
            Arc::new(UInt8Array::from(vec![2u8, 5, 1, 4])),
            f32s(&[1.5, 2.5, 3.5, 500.0]),
            f32s(&[0.1, 0.2, 0.3, -3.5]),
            f32s(&[3.15, 0.0, 0.0, -3.15]),
            f32s(&[0.01, 0.0, 0.0, 0.04]),
            f32s(&[0.0, 0.0, 0.0, -16.0]),
            f32s(&[1.0, 1.0, 1.0, 50.0]),
            Arc::new(Int8Array::from(vec![1i8, -1, 1, -1])),
            Arc::new(UInt8Array::from(vec![4u8, 0, 3, 5])),
        ];
        let b = RecordBatch::try_new(product_schema("tracks", 1, fields), cols).unwrap();
        Product::from_lengths(b, [3, 1]).unwrap()
    }

    fn vertices() -> Product {
        let f = |n: &str, t: DataType| Field::new(n, t, false);
        let fields = vec![
            f("z", DataType::Float32),
            f("weight", DataType::Float32),
            f("chi2", DataType::Float32),
            f("ndof", DataType::Int32),
            f("pt2", DataType::Float32),
        ];
        let cols: Vec<ArrayRef> = vec![
            f32s(&[0.5, -20.0, 3.0]),
            f32s(&[1.0, 1.0, 1.0]),
            f32s(&[1.0, 2.0, 3.0]),
            Arc::new(Int32Array::from(vec![-1, 4, 169])),
            f32s(&[10.0, 20.0, 5000.0]),
        ];
        let b = RecordBatch::try_new(product_schema("vertices", 1, fields), cols).unwrap();
        Product::from_lengths(b, [0, 3]).unwrap()
    }

    #[test]
    fn tracks_and_vertices_histograms() {
        let p = ChainProducts::new(
            2,
            [(Input::Tracks, tracks()), (Input::Vertices, vertices())],
        )
        .unwrap();
        let mut set = HistogramSet::for_inputs(|i| p.has(i)).unwrap();
        assert_eq!(set.histograms().count(), 16);
        set.fill_batch(&p).unwrap();
        let h = |n: &str| set.get(n).unwrap().clone();
        // Selected: event 0 track 0 (loose, 4 hits) and event 1 track 0 (tight, 5 hits).
        assert_eq!(h("track_n").counts[1], 2, "1 selected track in each event");
        assert_eq!(h("track_nhits").counts, vec![0, 0, 1, 1, 0]);
        assert_eq!(h("track_quality").counts, vec![0, 0, 0, 1, 0, 1, 0, 0]);
        assert_eq!(h("track_pt").counts[401], 1, "500 GeV: overflow");
        assert_eq!(
            (
                h("track_eta").counts[0],
                h("track_phi").counts[101],
                h("track_phi").counts[1]
            ),
            (1, 1, 1)
        );
        assert_eq!(
            (h("track_tip_zoom").counts[91], h("track_zip").counts[0]),
            (1, 1)
        );
        assert_eq!(h("vertex_n").counts[1..5], [1, 0, 0, 1]);
        assert_eq!(
            (h("vertex_ndof").counts[0], h("vertex_ndof").counts[170]),
            (1, 1)
        );
        assert_eq!(
            (h("vertex_z").counts[0], h("vertex_pt2").counts[101]),
            (1, 1)
        );
        let c = batch_counts(&p).unwrap();
        assert_eq!(
            c.n_tracks,
            Some(vec![2, 1]),
            "the validator counts tracks of any quality"
        );
        assert_eq!(c.n_tracks_loose, Some(vec![1, 1]));
        assert_eq!(c.n_vertices, Some(vec![0, 3]));
    }

    #[test]
    fn merging_batches_equals_one_fill() {
        let p = ChainProducts::new(2, [(Input::Tracks, tracks())]).unwrap();
        let mut once = HistogramSet::for_inputs(|i| p.has(i)).unwrap();
        let mut a = once.empty_like();
        let b = {
            let mut b = once.empty_like();
            b.fill_batch(&p).unwrap();
            b
        };
        once.fill_batch(&p).unwrap();
        once.fill_batch(&p).unwrap();
        a.add(&b).unwrap();
        a.add(&b).unwrap();
        assert_eq!(a, once);
    }

    #[test]
    fn nan_and_missing_columns_are_errors() {
        let t = tracks();
        let mut cols = t.batch().columns().to_vec();
        cols[1] = f32s(&[1.0, f32::NAN, 1.0, f32::NAN]); // row 1 is not selected
        let b = RecordBatch::try_new(t.batch().schema(), cols).unwrap();
        let p = ChainProducts::new(
            2,
            [(Input::Tracks, Product::from_lengths(b, [3, 1]).unwrap())],
        )
        .unwrap();
        let mut set = HistogramSet::for_inputs(|i| p.has(i)).unwrap();
        let e = set.fill_batch(&p).unwrap_err().to_string();
        assert_eq!(e, "histogram 'track_pt': tracks.pt row 3 of the batch is NaN (the reference throws on NaN)");

        let v = vertices();
        let b = v.batch().project(&[0, 1, 2, 4]).unwrap();
        let p = ChainProducts::new(
            2,
            [(Input::Vertices, Product::from_lengths(b, [0, 3]).unwrap())],
        )
        .unwrap();
        let mut set = HistogramSet::for_inputs(|i| p.has(i)).unwrap();
        let e = set.fill_batch(&p).unwrap_err().to_string();
        assert_eq!(
            e,
            "product 'vertices' has no column 'ndof' (see docs/products.md)"
        );
    }
}
