//! Adapters of the local reconstruction: raw data → digis → clusters → rec hits.

use std::sync::Arc;

use arrow_array::types::{
    Float32Type, Int16Type, Int32Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{ArrayRef, BinaryArray, Float32Array};
use quiver_columnar::columns::{binary, column, concat_ref, values};
use quiver_columnar::{
    Backend, Error, EventBatch, InputSpec, ParamSpec, Product, ProductKey, Registry, Result,
    Signature, Step, StepConfig, StepType,
};
use quiver_formats::calibration;
use quiver_formats::conditions::{BeamSpot, CablingMap, CpeParams, GainCalibration};
use quiver_formats::raw::RawData;

use super::tracks::take_column;
use super::types::*;
use super::{
    cond, ev, int_param, local, per_event, product_batch, publish_columns, publish_overflows,
};
use crate::capacity::{records, Capacities};
use crate::local::{
    calibrate_digis, charge_cut, charge_cut::hits_module_start, clusterize, raw_to_digis, rec_hits,
    CalibConfig, ChargeCutConfig, ClusterAlgorithm, ClusterColumns, ClusterizeConfig, DigiColumns,
    RawToDigiConfig, MAX_NUM_MODULES,
};
use quiver_columnar::overflow::CAPACITY_OVERFLOWS;

/// One `u16` column of every event's `field`, taken out of the events' results.
fn cat_u16<T>(per_event: &mut [T], field: impl Fn(&mut T) -> &mut Vec<u16>) -> ArrayRef {
    take_column::<UInt16Type, _>(per_event, field)
}

// --- read_raw -------------------------------------------------------------------------

struct ReadRawStep {
    raw: Arc<RawData>,
}

impl Step for ReadRawStep {
    fn n_events(&self) -> Option<u64> {
        Some(self.raw.source().n_events() as u64)
    }

    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        // One range, or two and more where a benchmark replays the input.
        let mut events = Vec::with_capacity(batch.n_events());
        for r in batch.input_ranges() {
            events.extend(
                self.raw
                    .source()
                    .raw_events(r.start as usize..r.end as usize)
                    .map_err(Error::data)?,
            );
        }
        // The FED bytes are read from the memory-mapped file into one pooled buffer per batch.
        let pool = quiver_columnar::pool::global();
        let n_feds: usize = events.iter().map(Vec::len).sum();
        let n_bytes: usize = events.iter().flatten().map(|(_, b)| b.len()).sum();
        let (mut ids, mut offsets, mut bytes) = (
            pool.vec::<u32>(n_feds),
            pool.vec::<i32>(n_feds + 1),
            pool.vec::<u8>(n_bytes),
        );
        offsets.push(0);
        for &(fed, data) in events.iter().flatten() {
            ids.push(fed);
            bytes.extend_from_slice(data);
            offsets.push(i32::try_from(bytes.len()).map_err(|_| {
                Error::data("more than 2 GiB of raw data in one batch: use a smaller --batch-size")
            })?);
        }
        let offsets = arrow_buffer::OffsetBuffer::new(offsets.into_scalar_buffer());
        let data = BinaryArray::try_new(offsets, bytes.into_buffer(), None)?;
        let ids = arrow_array::UInt32Array::new(ids.into_scalar_buffer(), None);
        publish_columns(
            batch,
            FED_RAW,
            [
                ("fed", Arc::new(ids) as ArrayRef),
                ("data", Arc::new(data) as ArrayRef),
            ],
            events.iter().map(Vec::len),
        )
    }
}

// --- beamspot -------------------------------------------------------------------------

struct BeamSpotStep {
    bs: BeamSpot,
}

impl Step for BeamSpotStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let b = &self.bs;
        let n = batch.n_events();
        let cols = [
            ("x", b.x),
            ("y", b.y),
            ("z", b.z),
            ("sigma_z", b.sigma_z),
            ("beam_width_x", b.beam_width_x),
            ("beam_width_y", b.beam_width_y),
            ("dxdz", b.dxdz),
            ("dydz", b.dydz),
            ("emittance_x", b.emittance_x),
            ("emittance_y", b.emittance_y),
            ("beta_star", b.beta_star),
        ]
        .map(|(name, v)| {
            let mut buf = quiver_columnar::pool::global().vec::<f32>(n);
            buf.resize(n, v);
            (
                name,
                Arc::new(Float32Array::new(buf.into_scalar_buffer(), None)) as ArrayRef,
            )
        });
        publish_columns(batch, BEAMSPOT, cols, std::iter::repeat_n(1, n))
    }
}

// --- raw_to_digis ---------------------------------------------------------------------

struct RawToDigisStep {
    input: ProductKey,
    cabling: Arc<CablingMap>,
    cfg: RawToDigiConfig,
}

impl Step for RawToDigisStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let raw = batch.get(&self.input)?;
        let fed = values::<UInt32Type>(&raw, "fed")?;
        let data = binary(&raw, "data")?;
        let mut out = per_event(batch, |e| {
            let feds: Vec<(u32, &[u8])> =
                raw.event_rows(e).map(|r| (fed[r], data.value(r))).collect();
            raw_to_digis(&feds, &self.cabling, &self.cfg).map_err(local)
        })?;
        let rows: Vec<usize> = out.iter().map(|d| d.xx.len()).collect();
        // The reference's `xx, yy` are the schema's `row, col`.
        let digis = [
            ("row", cat_u16(&mut out, |d| &mut d.xx)),
            ("col", cat_u16(&mut out, |d| &mut d.yy)),
            ("adc", cat_u16(&mut out, |d| &mut d.adc)),
            ("module", cat_u16(&mut out, |d| &mut d.module_ind)),
            (
                "raw_id",
                take_column::<UInt32Type, _>(&mut out, |d| &mut d.raw_id),
            ),
            (
                "pdigi",
                take_column::<UInt32Type, _>(&mut out, |d| &mut d.pdigi),
            ),
        ];
        publish_columns(batch, DIGIS, digis, rows)?;
        let errs: Vec<_> = out.iter().map(|d| &d.errors).collect();
        let cols = |g: &dyn Fn(&crate::local::PixelError) -> u64| {
            errs.iter()
                .flat_map(|v| v.iter().map(g))
                .collect::<Vec<u64>>()
        };
        let fed_col: Vec<u32> = cols(&|x| x.fed as u64)
            .into_iter()
            .map(|v| v as u32)
            .collect();
        let raw_id: Vec<u32> = cols(&|x| x.raw_id as u64)
            .into_iter()
            .map(|v| v as u32)
            .collect();
        let etype: Vec<u8> = cols(&|x| x.error_type as u64)
            .into_iter()
            .map(|v| v as u8)
            .collect();
        let word = cols(&|x| x.word);
        let errors = [
            ("fed", concat_ref::<UInt32Type, _>([fed_col.as_slice()])),
            ("word", concat_ref::<UInt64Type, _>([word.as_slice()])),
            ("raw_id", concat_ref::<UInt32Type, _>([raw_id.as_slice()])),
            ("error_type", concat_ref::<UInt8Type, _>([etype.as_slice()])),
        ];
        publish_columns(batch, DIGI_ERRORS, errors, errs.iter().map(|v| v.len()))?;
        publish_overflows(
            batch,
            errs.iter()
                .map(|e| {
                    records::fed_words(e, self.cfg.max_words)
                        .into_iter()
                        .collect()
                })
                .collect(),
        )
    }
}

// --- calibrate ------------------------------------------------------------------------

struct CalibrateStep {
    input: ProductKey,
    gains: Arc<GainCalibration>,
    cfg: CalibConfig,
}

impl Step for CalibrateStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let d = batch.get(&self.input)?;
        let (row, col) = (
            values::<UInt16Type>(&d, "row")?,
            values::<UInt16Type>(&d, "col")?,
        );
        let (adc, module) = (
            values::<UInt16Type>(&d, "adc")?,
            values::<UInt16Type>(&d, "module")?,
        );
        let mut out = per_event(batch, |e| {
            calibrate_digis(
                ev(module, &d, e),
                ev(row, &d, e),
                ev(col, &d, e),
                ev(adc, &d, e),
                &self.gains,
                &self.cfg,
            )
            .map_err(local)
        })?;
        // Rows and columns are unchanged: share the buffers of the digis.
        let cols = [
            ("row", column(&d, "row")?),
            ("col", column(&d, "col")?),
            ("charge", cat_u16(&mut out, |c| &mut c.adc)),
            ("module", cat_u16(&mut out, |c| &mut c.module_ind)),
        ];
        batch.put(Product::new(
            product_batch(CALIBRATED_DIGIS, cols)?,
            d.offsets().clone(),
        )?)
    }
}

// --- clusterize -----------------------------------------------------------------------

/// Per-run module table: module id, first digi, clusters.
fn module_table(
    module_start: &[u32],
    module_id: &[u32],
    n_in_module: &[u32],
) -> (Vec<u16>, Vec<u32>, Vec<u32>) {
    let runs = module_start[0] as usize;
    let ids: Vec<u16> = module_id[..runs].iter().map(|&m| m as u16).collect();
    let counts = module_id[..runs]
        .iter()
        .map(|&m| n_in_module[m as usize])
        .collect();
    (ids, module_start[1..=runs].to_vec(), counts)
}

fn publish_modules(
    batch: &mut EventBatch,
    type_name: &str,
    tables: &[(Vec<u16>, Vec<u32>, Vec<u32>)],
) -> Result<()> {
    let cols = [
        (
            "module",
            concat_ref::<UInt16Type, _>(tables.iter().map(|t| t.0.as_slice())),
        ),
        (
            "first_digi",
            concat_ref::<UInt32Type, _>(tables.iter().map(|t| t.1.as_slice())),
        ),
        (
            "clusters",
            concat_ref::<UInt32Type, _>(tables.iter().map(|t| t.2.as_slice())),
        ),
    ];
    publish_columns(batch, type_name, cols, tables.iter().map(|t| t.0.len()))
}

/// Rebuilds the reference's per-event module tables (`moduleStart`, `moduleId`, and
/// clusters per module id) from a per-run module product.
fn module_arrays(p: &Product, e: usize) -> Result<(Vec<u32>, Vec<u32>, Vec<u32>)> {
    let rows = p.event_rows(e);
    let module = &values::<UInt16Type>(p, "module")?[rows.clone()];
    let first = &values::<UInt32Type>(p, "first_digi")?[rows.clone()];
    let n = &values::<UInt32Type>(p, "clusters")?[rows];
    let mut module_start = Vec::with_capacity(first.len() + 1);
    module_start.push(first.len() as u32);
    module_start.extend_from_slice(first);
    let mut n_in_module = vec![0u32; MAX_NUM_MODULES];
    for (&m, &c) in module.iter().zip(n) {
        *n_in_module
            .get_mut(m as usize)
            .ok_or_else(|| Error::data(format!("module id {m} out of range")))? = c;
    }
    Ok((
        module_start,
        module.iter().map(|&m| m as u32).collect(),
        n_in_module,
    ))
}

struct ClusterizeStep {
    input: ProductKey,
    cfg: ClusterizeConfig,
}

impl Step for ClusterizeStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let d = batch.get(&self.input)?;
        let (row, col, module) = (
            values::<UInt16Type>(&d, "row")?,
            values::<UInt16Type>(&d, "col")?,
            values::<UInt16Type>(&d, "module")?,
        );
        let mut out = per_event(batch, |e| {
            clusterize(ev(module, &d, e), ev(row, &d, e), ev(col, &d, e), &self.cfg).map_err(local)
        })?;
        let cols = [
            ("module", column(&d, "module")?),
            (
                "cluster",
                take_column::<Int32Type, _>(&mut out, |c| &mut c.clus),
            ),
        ];
        batch.put(Product::new(
            product_batch(PIXEL_CLUSTERS, cols)?,
            d.offsets().clone(),
        )?)?;
        let tables: Vec<_> = out
            .iter()
            .map(|c| module_table(&c.module_start, &c.module_id, &c.n_clusters_in_module))
            .collect();
        publish_modules(batch, CLUSTER_MODULES, &tables)?;
        publish_overflows(
            batch,
            out.iter()
                .map(|c| {
                    records::pixels_per_module(c, self.cfg.max_pix_in_module)
                        .into_iter()
                        .collect()
                })
                .collect(),
        )
    }
}

// --- cluster_charge_cut ---------------------------------------------------------------

struct ChargeCutStep {
    digis: ProductKey,
    clusters: ProductKey,
    modules: ProductKey,
    cfg: ChargeCutConfig,
}

impl Step for ChargeCutStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let (d, c, m) = (
            batch.get(&self.digis)?,
            batch.get(&self.clusters)?,
            batch.get(&self.modules)?,
        );
        let (module, charge) = (
            values::<UInt16Type>(&d, "module")?,
            values::<UInt16Type>(&d, "charge")?,
        );
        let clus = values::<Int32Type>(&c, "cluster")?;
        if c.offsets() != d.offsets() {
            return Err(Error::data(format!(
                "{} and {} have different rows per event",
                self.clusters, self.digis
            )));
        }
        let mut out = per_event(batch, |e| {
            let (module_start, module_id, n_in_module) = module_arrays(&m, e)?;
            let r = charge_cut(
                ev(module, &d, e),
                ev(charge, &d, e),
                ev(clus, &c, e),
                &module_start,
                &n_in_module,
                &self.cfg,
            )
            .map_err(local)?;
            let table = module_table(&module_start, &module_id, &r.n_clusters_in_module);
            Ok((r, table))
        })?;
        let overflows = out
            .iter()
            .map(|(r, _)| {
                records::clusters_per_module(r, self.cfg.max_clusters_per_module)
                    .into_iter()
                    .collect()
            })
            .collect();
        let cols = [
            ("module", cat_u16(&mut out, |(r, _)| &mut r.module_ind)),
            (
                "cluster",
                take_column::<Int32Type, _>(&mut out, |(r, _)| &mut r.clus),
            ),
        ];
        batch.put(Product::new(
            product_batch(CLUSTERED_DIGIS, cols)?,
            d.offsets().clone(),
        )?)?;
        let tables: Vec<_> = out.into_iter().map(|(_, t)| t).collect();
        publish_modules(batch, HIT_MODULES, &tables)?;
        publish_overflows(batch, overflows)
    }
}

// --- rechits --------------------------------------------------------------------------

struct RecHitsStep {
    digis: ProductKey,
    clusters: ProductKey,
    modules: ProductKey,
    beamspot: ProductKey,
    cpe: Arc<CpeParams>,
    max_per_module: u32,
    max_hits: u32,
}

impl Step for RecHitsStep {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let (d, c, m, b) = (
            batch.get(&self.digis)?,
            batch.get(&self.clusters)?,
            batch.get(&self.modules)?,
            batch.get(&self.beamspot)?,
        );
        let (row, col, charge) = (
            values::<UInt16Type>(&d, "row")?,
            values::<UInt16Type>(&d, "col")?,
            values::<UInt16Type>(&d, "charge")?,
        );
        let (module, clus) = (
            values::<UInt16Type>(&c, "module")?,
            values::<Int32Type>(&c, "cluster")?,
        );
        let bs_col = |n: &str| values::<Float32Type>(&b, n);
        let (bx, by, bz) = (bs_col("x")?, bs_col("y")?, bs_col("z")?);
        let out = per_event(batch, |e| {
            let (module_start, module_id, n_in_module) = module_arrays(&m, e)?;
            let clus_module_start =
                hits_module_start(&n_in_module, self.max_per_module, self.max_hits);
            let overflow =
                records::hits_per_event(&n_in_module, self.max_per_module, self.max_hits);
            let r = b.event_rows(e).start;
            let bs = BeamSpot {
                x: bx[r],
                y: by[r],
                z: bz[r],
                ..Default::default()
            };
            let digis = DigiColumns {
                module_ind: ev(module, &c, e),
                xx: ev(row, &d, e),
                yy: ev(col, &d, e),
                adc: ev(charge, &d, e),
                clus: ev(clus, &c, e),
            };
            let clusters = ClusterColumns {
                module_start: &module_start,
                module_id: &module_id,
                n_clusters_in_module: &n_in_module,
                clus_module_start: &clus_module_start,
            };
            Ok((
                rec_hits(&digis, &clusters, &self.cpe, &bs).map_err(local)?,
                overflow,
            ))
        })?;
        let (mut out, overflows): (Vec<_>, Vec<_>) = out
            .into_iter()
            .map(|(h, o)| (h, o.into_iter().collect()))
            .unzip();
        let rows: Vec<usize> = out.iter().map(|h| h.x_local.len()).collect();
        // Each column under the name of its field of the rec hits.
        macro_rules! cat {
            ($t:ty, $f:ident) => {
                (
                    stringify!($f),
                    take_column::<$t, _>(&mut out, |h| &mut h.$f),
                )
            };
        }
        let cols = [
            cat!(Float32Type, x_local),
            cat!(Float32Type, y_local),
            cat!(Float32Type, xerr_local),
            cat!(Float32Type, yerr_local),
            cat!(Float32Type, x_global),
            cat!(Float32Type, y_global),
            cat!(Float32Type, z_global),
            cat!(Float32Type, r_global),
            cat!(Int16Type, iphi),
            cat!(Int32Type, charge),
            cat!(Int16Type, size_x),
            cat!(Int16Type, size_y),
            cat!(UInt16Type, det_index),
        ];
        publish_columns(batch, HITS, cols, rows)?;
        let starts: Vec<[u32; 11]> = out.iter().map(|h| h.hits_layer_start).collect();
        super::publish_hit_layers(batch, &starts)?;
        publish_overflows(batch, overflows)
    }
}

/// The `raw_to_digis` parameters of a step (shared with the GPU implementation).
///
/// With `capacities = "sized"` the event's FED words are not bounded.
pub fn raw_to_digi_config(cfg: &StepConfig) -> Result<RawToDigiConfig> {
    let mut c = RawToDigiConfig {
        use_quality: cfg.params.bool("use_quality"),
        ..Default::default()
    };
    if Capacities::of(cfg)?.sized() {
        c.max_words = usize::MAX;
    }
    Ok(c)
}

/// The `calibrate` parameters of a step.
pub fn calib_config(cfg: &StepConfig) -> CalibConfig {
    let p = &cfg.params;
    CalibConfig {
        vcal_to_electron_gain_l1: p.float("gain_l1") as f32,
        vcal_to_electron_offset_l1: p.float("offset_l1") as f32,
        vcal_to_electron_gain: p.float("gain") as f32,
        vcal_to_electron_offset: p.float("offset") as f32,
        ..Default::default()
    }
}

/// The `clusterize` parameters of a step.
pub fn clusterize_config(cfg: &StepConfig) -> Result<ClusterizeConfig> {
    let algorithm = if cfg.params.str("algorithm") == "union_find" {
        ClusterAlgorithm::UnionFind
    } else {
        ClusterAlgorithm::Faithful
    };
    // The core clusters at most 65 534 digis per module run (16-bit digi positions).
    let max = if Capacities::of(cfg)?.sized() {
        65_534
    } else {
        int_param(cfg, "max_pixels_per_module", 1..=65_534)? as usize
    };
    Ok(ClusterizeConfig {
        algorithm,
        max_pix_in_module: max,
    })
}

/// The `cluster_charge_cut` parameters of a step.
pub fn charge_cut_config(cfg: &StepConfig) -> Result<ChargeCutConfig> {
    Ok(ChargeCutConfig {
        min_charge_l1: int_param(cfg, "min_charge_l1", 0..=i32::MAX as i64)? as i32,
        min_charge: int_param(cfg, "min_charge", 0..=i32::MAX as i64)? as i32,
        // Sized: a module run holds at most 65 534 digis, hence as many clusters.
        max_clusters_per_module: if Capacities::of(cfg)?.sized() {
            u16::MAX as u32
        } else {
            int_param(cfg, "max_clusters_per_module", 1..=1024)? as u32
        },
        ..Default::default()
    })
}

/// Registers the local-reconstruction step types.
pub(super) fn register(r: &mut Registry) {
    r.add(read_raw_type());
    r.add(beamspot_type());
    r.add(raw_to_digis_type());
    r.add(calibrate_type());
    r.add(clusterize_type());
    r.add(cluster_charge_cut_type());
    r.add(rechits_type());
}

fn read_raw_type() -> StepType {
    StepType {
    name: "read_raw",
    doc: "Reads the raw FED data of the input dataset, event by event (the source of the pixel chain)",
    params: vec![],
    signature: Signature { inputs: vec![], outputs: vec![FED_RAW.into()] },
    backends: vec![Backend::Cpu],
    build: |cfg| Ok(Box::new(ReadRawStep { raw: cond(cfg)? })),
    }
}

fn beamspot_type() -> StepType {
    StepType {
        name: "beamspot",
        doc: "The beam spot of the conditions as a per-event product (BeamSpotToPOD)",
        params: vec![],
        signature: Signature {
            inputs: vec![],
            outputs: vec![BEAMSPOT.into()],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            Ok(Box::new(BeamSpotStep {
                bs: *cond::<BeamSpot>(cfg)?,
            }))
        },
    }
}

fn raw_to_digis_type() -> StepType {
    StepType {
        name: "raw_to_digis",
        doc: "Pixel FED raw data to digis (one per raw word) and errors (RawToDigi + ErrorChecker)",
        params: vec![
            ParamSpec::bool("use_quality", true, "skip ROCs the cabling marks bad"),
            Capacities::param(),
        ],
        signature: Signature {
            inputs: vec![InputSpec::one("input", FED_RAW, "raw FED buffers")],
            outputs: vec![DIGIS.into(), DIGI_ERRORS.into(), CAPACITY_OVERFLOWS.into()],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            Ok(Box::new(RawToDigisStep {
                input: cfg.input("input")?,
                cabling: cond(cfg)?,
                cfg: raw_to_digi_config(cfg)?,
            }))
        },
    }
}

fn calibrate_type() -> StepType {
    StepType {
    name: "calibrate",
    doc: "ADC to electrons with per-column gains and pedestals; dead/noisy columns invalidated (calibDigis)",
    params: vec![
        ParamSpec::float("gain_l1", calibration::VCAL_TO_ELECTRON_GAIN_L1 as f64, "VCal→electrons slope on BPix L1, e/VCal").above(0.0, 1e4),
        ParamSpec::float("offset_l1", calibration::VCAL_TO_ELECTRON_OFFSET_L1 as f64, "VCal→electrons offset on BPix L1, e").within(-1e5, 1e5),
        ParamSpec::float("gain", calibration::VCAL_TO_ELECTRON_GAIN as f64, "VCal→electrons slope elsewhere, e/VCal").above(0.0, 1e4),
        ParamSpec::float("offset", calibration::VCAL_TO_ELECTRON_OFFSET as f64, "VCal→electrons offset elsewhere, e").within(-1e5, 1e5),
    ],
    signature: Signature {
        inputs: vec![InputSpec::one("input", DIGIS, "decoded digis")],
        outputs: vec![CALIBRATED_DIGIS.into()],
    },
    backends: vec![Backend::Cpu],
    build: |cfg| Ok(Box::new(CalibrateStep { input: cfg.input("input")?, gains: cond(cfg)?, cfg: calib_config(cfg) })),
    }
}

fn clusterize_type() -> StepType {
    StepType {
        name: "clusterize",
        doc: "8-connected pixel clusters per module, numbered by lowest digi index (findClus)",
        params: vec![
            ParamSpec::choice(
                "algorithm",
                &["faithful", "union_find"],
                "the reference's label propagation, or union-find (identical output)",
            ),
            ParamSpec::int(
                "max_pixels_per_module",
                4000,
                "pixels clustered per module run at most (with capacities = \"reference\")",
            )
            .within(1.0, 65_534.0),
            Capacities::param(),
        ],
        signature: Signature {
            inputs: vec![InputSpec::one(
                "input",
                CALIBRATED_DIGIS,
                "calibrated digis",
            )],
            outputs: vec![
                PIXEL_CLUSTERS.into(),
                CLUSTER_MODULES.into(),
                CAPACITY_OVERFLOWS.into(),
            ],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            Ok(Box::new(ClusterizeStep {
                input: cfg.input("input")?,
                cfg: clusterize_config(cfg)?,
            }))
        },
    }
}

fn cluster_charge_cut_type() -> StepType {
    StepType {
        name: "cluster_charge_cut",
        doc: "Drops clusters below the charge threshold and renumbers densely (clusterChargeCut)",
        params: vec![
            ParamSpec::int(
                "min_charge_l1",
                2000,
                "threshold on BPix L1 (detIndex < 96), e; a cluster passes above it",
            )
            .within(0.0, i32::MAX as f64),
            ParamSpec::int("min_charge", 4000, "threshold elsewhere, e")
                .within(0.0, i32::MAX as f64),
            ParamSpec::int(
                "max_clusters_per_module",
                1024,
                "clusters kept per module (with capacities = \"reference\")",
            )
            .within(1.0, 1024.0),
            Capacities::param(),
        ],
        signature: Signature {
            inputs: vec![
                InputSpec::one("digis", CALIBRATED_DIGIS, "calibrated digis (charges)"),
                InputSpec::one("clusters", PIXEL_CLUSTERS, "cluster of each digi"),
                InputSpec::one(
                    "modules",
                    CLUSTER_MODULES,
                    "module runs and their cluster counts",
                ),
            ],
            outputs: vec![
                CLUSTERED_DIGIS.into(),
                HIT_MODULES.into(),
                CAPACITY_OVERFLOWS.into(),
            ],
        },
        backends: vec![Backend::Cpu],
        build: |cfg| {
            let c = charge_cut_config(cfg)?;
            Ok(Box::new(ChargeCutStep {
                digis: cfg.input("digis")?,
                clusters: cfg.input("clusters")?,
                modules: cfg.input("modules")?,
                cfg: c,
            }))
        },
    }
}

fn rechits_type() -> StepType {
    StepType {
    name: "rechits",
    doc: "Rec hits: CPE fast positions and errors, global positions minus the beam spot, int16 phi",
    params: vec![Capacities::param()],
    signature: Signature {
        inputs: vec![
            InputSpec::one("digis", CALIBRATED_DIGIS, "calibrated digis (row, col, charge)"),
            InputSpec::one("clusters", CLUSTERED_DIGIS, "cluster of each digi after the charge cut"),
            InputSpec::one("modules", HIT_MODULES, "module runs and surviving clusters"),
            InputSpec::one("beamspot", BEAMSPOT, "beam spot"),
        ],
        outputs: vec![HITS.into(), HIT_LAYERS.into(), CAPACITY_OVERFLOWS.into()],
    },
    backends: vec![Backend::Cpu],
    build: |cfg| {
        // Sized: the charge cut already bounds each module's count; no hit cap.
        let sized = Capacities::of(cfg)?.sized();
        Ok(Box::new(RecHitsStep {
            digis: cfg.input("digis")?,
            clusters: cfg.input("clusters")?,
            modules: cfg.input("modules")?,
            beamspot: cfg.input("beamspot")?,
            cpe: cond(cfg)?,
            max_per_module: if sized { u32::MAX } else { crate::local::MAX_CLUSTERS_PER_MODULE },
            max_hits: if sized { u32::MAX } else { crate::local::MAX_NUM_CLUSTERS },
        }))
    },
    }
}
