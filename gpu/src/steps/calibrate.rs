//! GPU `calibrate`: everything on the device, one thread per digi.

use super::*;

struct DeviceGains {
    first: CudaSlice<u32>,
    last: CudaSlice<u32>,
    cols: CudaSlice<i32>,
    data: CudaSlice<u8>,
    host: Arc<GainCalibration>,
}

pub(crate) struct CalibrateGpu {
    input: ProductKey,
    cfg: CalibConfig,
    gains: DeviceGains,
    common: Common,
}

impl CalibrateGpu {
    pub fn new(
        cfg: &StepConfig,
        common: Common,
        gains: Arc<GainCalibration>,
        ccfg: CalibConfig,
    ) -> Result<Self> {
        let e = |m: crate::GpuError| Error::plan(&cfg.label, format!("uploading the gains: {m}"));
        let mut bytes = 0u64;
        let g = common.gpu;
        let first: Vec<u32> = gains.range_and_cols.iter().map(|r| r.0).collect();
        let last: Vec<u32> = gains.range_and_cols.iter().map(|r| r.1).collect();
        let cols: Vec<i32> = gains.range_and_cols.iter().map(|r| r.2).collect();
        let dg = DeviceGains {
            first: upload_condition(g, &first, &mut bytes).map_err(e)?,
            last: upload_condition(g, &last, &mut bytes).map_err(e)?,
            cols: upload_condition(g, &cols, &mut bytes).map_err(e)?,
            data: upload_condition(g, &gains.data, &mut bytes).map_err(e)?,
            host: gains,
        };
        common.stats.add_conditions(bytes);
        Ok(CalibrateGpu {
            input: cfg.input("input")?,
            cfg: ccfg,
            gains: dg,
            common,
        })
    }
}

impl Step for CalibrateGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        // Only the rows' count and offsets on the host: the kernel reads the device copy
        // (no download of the digis).
        let d = batch.get_resident(&self.input)?;
        let n = d.num_rows();
        let g = &self.gains.host;
        if g.rows_averaged == 0 {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        if n == 0 || n > u32::MAX as usize {
            return c.cpu.process(batch);
        }
        let mut run = Run::start(c.gpu)?;
        let on_dev = columns_on_device(batch, &self.input, c.gpu)?;
        let din = cuda(&on_dev);
        let (dm, dx, dy, da) = (
            din.column("module")?,
            din.column("row")?,
            din.column("col")?,
            din.column("adc")?,
        );
        let mut status = run.zeros::<u32>(1)?;
        let (mut om, mut oa) = (run.out::<u16>(n)?, run.out::<u16>(n)?);
        run.mark()?;
        {
            let cf = &self.cfg;
            let (n32, n_ranges, data_len) =
                (n as u32, g.range_and_cols.len() as u32, g.data.len() as u64);
            let (is_run2, l1) = (cf.is_run2 as u32, cf.l1_modules as u32);
            let (vm, vx, vy, va) = (
                dm.view::<u16>(n),
                dx.view::<u16>(n),
                dy.view::<u16>(n),
                da.view::<u16>(n),
            );
            let (mut vom, mut voa, mut vst) = (
                om.view_mut::<u16>(n),
                oa.view_mut::<u16>(n),
                status.view_mut::<u32>(1),
            );
            let (first, last, cols, data) = (
                self.gains.first.as_view(),
                self.gains.last.as_view(),
                self.gains.cols.as_view(),
                self.gains.data.as_view(),
            );
            let args = args::Calibrate {
                module_in: &vm,
                xx: &vx,
                yy: &vy,
                adc_in: &va,
                n: &n32,
                range_first: &first,
                range_last: &last,
                range_cols: &cols,
                n_ranges: &n_ranges,
                data: &data,
                data_len: &data_len,
                min_ped: &g.min_ped,
                min_gain: &g.min_gain,
                ped_precision: &g.ped_precision,
                gain_precision: &g.gain_precision,
                rows_averaged: &g.rows_averaged,
                dead_flag: &g.dead_flag,
                noisy_flag: &g.noisy_flag,
                is_run2: &is_run2,
                l1_modules: &l1,
                gain_l1: &cf.vcal_to_electron_gain_l1,
                offset_l1: &cf.vcal_to_electron_offset_l1,
                gain_other: &cf.vcal_to_electron_gain,
                offset_other: &cf.vcal_to_electron_offset,
                min_electrons: &cf.min_electrons,
                module_out: &mut vom,
                adc_out: &mut voa,
                status: &mut vst,
            };
            launch(&run, args, blocks(n, ELEMENT_BLOCK))?;
        }
        run.mark()?;
        let st = run.down::<u32>(&status, 1)?;
        run.finish(&c.stats)?;
        if st[0] != 0 {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        // On the device only, like the digis: `clusterize` makes the host view when it needs
        // one (one download), the later GPU steps read the device columns.
        let on_device = device_columns(
            c.gpu,
            CALIBRATED_DIGIS,
            n,
            vec![dx.clone(), dy.clone(), Arc::new(oa), Arc::new(om)],
        )?;
        batch.put(Product::on_device(
            schema(CALIBRATED_DIGIS),
            d.offsets().clone(),
            n,
            on_device,
        )?)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}
