//! GPU `track_fit` (kernels [`crate::kernels_fit::TRACK_FIT`]): the Broken Line or the
//! Riemann fit on the device, one thread per fit; which tuples are fitted
//! ([`quiver_reco::tracks::fit_jobs`]) and the storing of the fits' f32 values into the
//! `track_fits` columns (the CPU's `StoredFit`: `quiver_reco::steps::publish_fit_values`)
//! on the host. The same parameters, inputs and products as the CPU step.

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use quiver_columnar::{Error, EventBatch, ProductKey, Result, Step, StepConfig};
use quiver_formats::conditions::CpeParams;
use quiver_reco::steps::types::TRACK_FITS;
use quiver_reco::steps::{fit_tuples, publish_fit_values, FitTuples};
use quiver_reco::tracks::fit::FitJob;
use quiver_reco::tracks::ntuplets::Tuples;
use quiver_reco::tracks::{fit_jobs_of, CaConfig};

use crate::args;
use crate::device::{upload_condition, DeviceBuf};
use crate::kernels::ELEMENT_BLOCK;
use crate::kernels_fit::{frame_table, FIT_HITS, FIT_OUT};
use crate::resident::CudaMirror;
use crate::steps::{
    batch_offsets, blocks, fallback, launch, launch_as, record_results, Common, HostDets, Launch,
    Run,
};

/// A batch's fits for the kernel: every event's jobs (the CPU's, in its order) and the job
/// table (`FIT_HITS` batch hit indices per job, the fitted hit count per job).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FitBatch {
    pub jobs: Vec<Vec<FitJob>>,
    /// Empty when not asked for (the device builds it from the tuples it kept).
    pub job_hits: Vec<u32>,
    pub job_n: Vec<u8>,
}

/// The fits of a batch: `inputs[e]` is event `e`, whose hits start at row `hit_start[e]` of
/// the batch's hits. `None` when the CPU step would report an error (a tuple naming a hit
/// the event lacks, a hit whose module has no frame among `n_modules`): the caller hands
/// the batch to it. `job_hits`: whether to fill [`FitBatch::job_hits`] (the checks run
/// either way).
///
/// ```
/// use quiver_gpu::steps::fit_batch;
/// use quiver_reco::steps::FitTuples;
/// use quiver_reco::tracks::{ntuplets::Tuples, CaConfig, Quality};
/// let det = [3u16, 100, 300, 500]; // the hits' detIndex
/// let tuples = Tuples { offsets: vec![0, 4], hits: vec![0, 1, 2, 3], quality: vec![Quality::Bad], overflow: false };
/// let input = [FitTuples { det: &det, tuples }];
/// let fb = fit_batch(&input, &[10], 1856, &CaConfig::default(), true).unwrap();
/// assert_eq!((&fb.job_n, &fb.job_hits[..4]), (&vec![4], &[10, 11, 12, 13][..]));
/// let jobs_only = fit_batch(&input, &[10], 1856, &CaConfig::default(), false).unwrap();
/// assert_eq!((&jobs_only.jobs, &jobs_only.job_n, jobs_only.job_hits.len()), (&fb.jobs, &fb.job_n, 0));
/// assert!(fit_batch(&input, &[10], 0, &CaConfig::default(), false).is_none()); // no module frames
/// // A tuple naming a hit the event lacks: the CPU step reports it, so no batch here.
/// let bad = Tuples { offsets: vec![0, 4], hits: vec![0, 1, 2, 40], quality: vec![Quality::Bad], overflow: false };
/// let input = [FitTuples { det: &det, tuples: bad }];
/// assert!(fit_batch(&input, &[10], 1856, &CaConfig::default(), false).is_none());
/// ```
pub fn fit_batch(
    inputs: &[FitTuples],
    hit_start: &[usize],
    n_modules: usize,
    cfg: &CaConfig,
    job_hits: bool,
) -> Option<FitBatch> {
    let mut fb = FitBatch {
        jobs: Vec::with_capacity(inputs.len()),
        ..FitBatch::default()
    };
    for (input, &start) in inputs.iter().zip(hit_start) {
        let jobs = fit_jobs_of(input.det.len(), &input.tuples, cfg).ok()?;
        for job in &jobs {
            let hits = input.tuples.hits_of(job.row as usize);
            let mut slots = [u32::MAX; FIT_HITS];
            for (k, &h) in hits.iter().take(job.n_fit as usize).enumerate() {
                if input.det[h as usize] as usize >= n_modules {
                    return None;
                }
                slots[k] = u32::try_from(start + h as usize).ok()?;
            }
            if job_hits {
                fb.job_hits.extend_from_slice(&slots);
            }
            fb.job_n.push(job.n_fit);
        }
        fb.jobs.push(jobs);
    }
    (fb.jobs.len() == inputs.len()).then_some(fb)
}

/// The hit lists of a GPU `ca_ntuplets`' tuples kept on the device (`rows` tuples: list
/// offsets in batch rows, event-local hit indices, and how many), when the product's hit
/// list starts at value 0 and the mirror holds exactly its offsets and values.
fn list_mirror(
    n: &quiver_columnar::Product,
    rows: usize,
) -> Option<(
    &Arc<crate::device::DeviceBuf>,
    &Arc<crate::device::DeviceBuf>,
    usize,
)> {
    let m = crate::resident::mirror_of(n)?;
    let l = n
        .batch()
        .column_by_name("hits")?
        .as_any()
        .downcast_ref::<arrow_array::ListArray>()?;
    let (off, n_hits) = (l.value_offsets(), l.values().len());
    if off.len() != rows + 1 || off[0] != 0 || off[rows] as usize != n_hits {
        return None;
    }
    Some((
        m.part::<u32>("hits.offsets", rows + 1)?,
        m.part::<u32>("hits.values", n_hits)?,
        n_hits,
    ))
}

/// The GPU `track_fit` step.
pub(crate) struct TrackFitGpu {
    hits: ProductKey,
    ntuplets: ProductKey,
    cpe: Arc<CpeParams>,
    frames: CudaSlice<f32>,
    cfg: CaConfig,
    common: Common,
}

impl TrackFitGpu {
    pub fn new(
        cfg: &StepConfig,
        common: Common,
        cpe: Arc<CpeParams>,
        ca: CaConfig,
    ) -> Result<Self> {
        let mut bytes = 0u64;
        // The module frames, once per job (the covariance rotation reads six floats each).
        let frames = upload_condition(common.gpu, &frame_table(&cpe), &mut bytes)
            .map_err(|m| Error::plan(&cfg.label, format!("uploading the module frames: {m}")))?;
        common.stats.add_conditions(bytes);
        Ok(TrackFitGpu {
            hits: cfg.input("hits")?,
            ntuplets: cfg.input("ntuplets")?,
            cpe,
            frames,
            cfg: ca,
            common,
        })
    }
}

/// Each fit job's tuple as a batch row of the `ntuplets` product `n`.
fn job_rows(fb: &FitBatch, n: &quiver_columnar::Product) -> Vec<u32> {
    let mut job_row = Vec::with_capacity(fb.job_n.len());
    for (e, jobs) in fb.jobs.iter().enumerate() {
        let base = n.event_rows(e).start;
        job_row.extend(jobs.iter().map(|j| (base + j.row as usize) as u32));
    }
    job_row
}

/// `fit_job_hits`: the job table (`djh`) from the tuples' hit lists that a GPU
/// `ca_ntuplets` kept on the device (`lists`: offsets, hits, their count), with the jobs'
/// rows and hit counts (`jobs`) and the tuples' and hits' event offsets (`tables`).
fn launch_job_hits(
    run: &Run,
    (n_jobs, n_events, rows): (usize, usize, usize),
    [djr, djn]: [&DeviceBuf; 2],
    (loff, lhits, n_hits): (&Arc<DeviceBuf>, &Arc<DeviceBuf>, usize),
    [dto, dhs]: [&DeviceBuf; 2],
    djh: &mut DeviceBuf,
) -> Result<()> {
    let (nj, ne) = (n_jobs as u32, n_events as u32);
    let (vjr, vjn, vto, vhs) = (
        djr.view::<u32>(n_jobs),
        djn.view::<u8>(n_jobs),
        dto.view::<u32>(ne as usize + 1),
        dhs.view::<u32>(ne as usize + 1),
    );
    let (vlo, vlh, mut vjh) = (
        loff.view::<u32>(rows + 1),
        lhits.view::<u32>(n_hits),
        djh.view_mut::<u32>(n_jobs * FIT_HITS),
    );
    let args = args::FitJobHits {
        n_jobs: &nj,
        job_row: &vjr,
        job_n: &vjn,
        n_events: &ne,
        tup_off: &vto,
        hit_start: &vhs,
        list_off: &vlo,
        list_hits: &vlh,
        job_hits: &mut vjh,
    };
    launch(run, args, blocks(n_jobs, ELEMENT_BLOCK))?;
    Ok(())
}

impl TrackFitGpu {
    /// The fit kernel (`track_fit_bl` or `track_fit_riemann`), one thread per job: its
    /// values into `dout` (`draw`: the raw doubles' one-element stand-in).
    #[allow(clippy::too_many_arguments)] // the buffers of one launch, named at the call
    fn launch_fit(
        &self,
        run: &Run,
        djh: &DeviceBuf,
        djn: &DeviceBuf,
        [x, y, z, xe, ye, det]: [&DeviceBuf; 6],
        nh: usize,
        n_jobs: usize,
        [dout, draw]: [&mut DeviceBuf; 2],
    ) -> Result<()> {
        let (vjh, vjn) = (djh.view::<u32>(n_jobs * FIT_HITS), djn.view::<u8>(n_jobs));
        let (vx, vy, vz, vxe, vye, vd) = (
            x.view::<f32>(nh),
            y.view::<f32>(nh),
            z.view::<f32>(nh),
            xe.view::<f32>(nh),
            ye.view::<f32>(nh),
            det.view::<u16>(nh),
        );
        let (mut vo, mut vr, no_raw) = (
            dout.view_mut::<f32>(n_jobs * FIT_OUT),
            draw.view_mut::<f64>(1),
            0u32,
        );
        let nj = n_jobs as u32;
        let frames = self.frames.as_view();
        let args = args::TrackFit {
            n_jobs: &nj,
            job_hits: &vjh,
            job_n: &vjn,
            x: &vx,
            y: &vy,
            z: &vz,
            xerr: &vxe,
            yerr: &vye,
            det: &vd,
            frames: &frames,
            b_field: &self.cfg.fit.b_field,
            out: &mut vo,
            write_raw: &no_raw,
            raw: &mut vr,
        };
        let kernel = args::TrackFit::<Launch>::kernel(self.cfg.fit.use_riemann_fit);
        launch_as(run, kernel, args, blocks(n_jobs, ELEMENT_BLOCK))?;
        Ok(())
    }

    /// `fit_scatter`: each job's values into its tuple's row of the state, pT and χ²
    /// columns (`rows` tuples).
    fn launch_scatter(
        &self,
        run: &Run,
        djr: &DeviceBuf,
        dout: &DeviceBuf,
        n_jobs: usize,
        rows: usize,
        [dstate, dpt, dchi2]: [&mut DeviceBuf; 3],
    ) -> Result<()> {
        // As the CPU's StoredFit scales the curvature: by 1/B in f32.
        let inv_b = 1.0f32 / self.cfg.fit.b_field;
        let (vjr, vo, nj) = (
            djr.view::<u32>(n_jobs),
            dout.view::<f32>(n_jobs * FIT_OUT),
            n_jobs as u32,
        );
        let (mut vs, mut vp, mut vc) = (
            dstate.view_mut::<f32>(5 * rows),
            dpt.view_mut::<f32>(rows),
            dchi2.view_mut::<f32>(rows),
        );
        let args = args::FitScatter {
            n_jobs: &nj,
            job_row: &vjr,
            vals: &vo,
            inv_b: &inv_b,
            state: &mut vs,
            pt: &mut vp,
            chi2: &mut vc,
        };
        launch(run, args, blocks(n_jobs, ELEMENT_BLOCK))?;
        Ok(())
    }
}

impl Step for TrackFitGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        // The hits' detIndex only on the host: the kernel reads the other columns there.
        let (hd, n) = (
            HostDets::get(batch, &self.hits)?,
            batch.get(&self.ntuplets)?,
        );
        let h = &hd.product;
        // What the CPU step rejects goes to it, for its exact message.
        let Ok(inputs) = fit_tuples(hd.view()?, &n) else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        let starts: Vec<usize> = (0..batch.n_events())
            .map(|e| h.event_rows(e).start)
            .collect();
        // The job table only where the device cannot build it from the tuples it kept.
        let kept = list_mirror(&n, n.num_rows());
        let Some(fb) = fit_batch(
            &inputs,
            &starts,
            self.cpe.det.len(),
            &self.cfg,
            kept.is_none(),
        ) else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        let n_jobs = fb.job_n.len();
        let rows = n.num_rows();
        let out = if n_jobs == 0 {
            None
        } else {
            let mut run = Run::start(c.gpu)?;
            let hd = crate::resident::columns_on_device(batch, &self.hits, c.gpu)?;
            let hc = crate::resident::cuda(&hd);
            let nh = h.num_rows();
            let cols = [
                "x_global",
                "y_global",
                "z_global",
                "xerr_local",
                "yerr_local",
            ]
            .map(|name| hc.column(name));
            let [x, y, z, xe, ye] = cols;
            let (x, y, z, xe, ye, det) = (x?, y?, z?, xe?, ye?, hc.column("det_index")?);
            let djn = run.up(&fb.job_n)?;
            // Each job's tuple as a batch row, for the columns kept on the device.
            let job_row = job_rows(&fb, &n);
            let djr = run.up(&job_row)?;
            // The job table: from the tuples' lists that the GPU `ca_ntuplets` kept on the
            // device (two small tables cross the bus, not 20 bytes per fit), else uploaded.
            let (mut djh, from_lists) = match kept {
                Some(_) => {
                    let (to, hs) = (batch_offsets(n.offsets()), batch_offsets(h.offsets()));
                    (
                        run.out::<u32>(n_jobs * FIT_HITS)?,
                        Some((run.up(&to)?, run.up(&hs)?)),
                    )
                }
                None => (run.up(&fb.job_hits)?, None),
            };
            let (mut dstate, mut dpt, mut dchi2) = (
                run.zeros::<f32>(5 * rows)?,
                run.zeros::<f32>(rows)?,
                run.zeros::<f32>(rows)?,
            );
            let mut dout = run.out::<f32>(n_jobs * FIT_OUT)?;
            // The raw doubles are for the emulation tests; here a one-element stand-in.
            let mut draw = run.out::<f64>(1)?;
            run.mark()?;
            if let (Some(lists), Some((dto, dhs))) = (kept, &from_lists) {
                let (jobs, tables) = ([&djr, &djn], [dto, dhs]);
                launch_job_hits(
                    &run,
                    (n_jobs, batch.n_events(), rows),
                    jobs,
                    lists,
                    tables,
                    &mut djh,
                )?;
            }
            self.launch_fit(
                &run,
                &djh,
                &djn,
                [x, y, z, xe, ye, det],
                nh,
                n_jobs,
                [&mut dout, &mut draw],
            )?;
            self.launch_scatter(
                &run,
                &djr,
                &dout,
                n_jobs,
                rows,
                [&mut dstate, &mut dpt, &mut dchi2],
            )?;
            run.mark()?;
            let out = run.down_of::<f32>(TRACK_FITS, &dout, n_jobs * FIT_OUT)?;
            let results = run.finish(&c.stats)?;
            let mirror = CudaMirror::new()
                .with::<f32>("state", Arc::new(dstate), 5 * rows)?
                .with::<f32>("pt", Arc::new(dpt), rows)?
                .with::<f32>("chi2", Arc::new(dchi2), rows)?;
            Some((out, mirror, results))
        };
        let values = out.as_ref().map_or(&[][..], |(v, _, _)| v.as_slice());
        let tuples: Vec<&Tuples> = inputs.iter().map(|i| &i.tuples).collect();
        publish_fit_values(batch, &tuples, &fb.jobs, values, &self.cfg)?;
        // The state, pT and χ² stay on the device for a GPU `track_quality`.
        match out {
            Some((_, mirror, results)) => {
                batch.attach_device(TRACK_FITS, Arc::new(mirror))?;
                record_results(batch, &results)
            }
            None => Ok(()),
        }
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}
