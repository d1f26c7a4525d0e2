//! GPU `raw_to_digis`: FED framing on the host (reco's `frame_fed`), every payload word
//! decoded on the device, word errors put back in word order on the host.

use super::*;

/// The cabling map on the device, uploaded once per job.
struct DeviceCabling {
    link: CudaSlice<u32>,
    roc: CudaSlice<u32>,
    raw_id: CudaSlice<u32>,
    roc_in_det: CudaSlice<u32>,
    module_id: CudaSlice<u32>,
    bad_rocs: CudaSlice<u8>,
    mod_to_unp: CudaSlice<u8>,
    size: u32,
}

pub(crate) struct RawToDigisGpu {
    input: ProductKey,
    cfg: RawToDigiConfig,
    /// `None` when the cabling tables have the wrong size (the CPU step reports it).
    cabling: Option<DeviceCabling>,
    common: Common,
}

impl RawToDigisGpu {
    pub fn new(
        cfg: &StepConfig,
        common: Common,
        cabling: &CablingMap,
        rcfg: RawToDigiConfig,
    ) -> Result<Self> {
        let sizes_ok = [
            cabling.fed.len(),
            cabling.link.len(),
            cabling.roc.len(),
            cabling.raw_id.len(),
            cabling.roc_in_det.len(),
            cabling.module_id.len(),
            cabling.bad_rocs.len(),
            cabling.mod_to_unp.len(),
        ]
        .iter()
        .all(|&n| n == CABLING_MAX_SIZE);
        let cab = if sizes_ok {
            let mut bytes = 0u64;
            let g = common.gpu;
            let up32 = |v: &[u32], b: &mut u64| upload_condition(g, v, b);
            let e = |m: crate::GpuError| {
                Error::plan(&cfg.label, format!("uploading the cabling map: {m}"))
            };
            let c = DeviceCabling {
                link: up32(&cabling.link, &mut bytes).map_err(e)?,
                roc: up32(&cabling.roc, &mut bytes).map_err(e)?,
                raw_id: up32(&cabling.raw_id, &mut bytes).map_err(e)?,
                roc_in_det: up32(&cabling.roc_in_det, &mut bytes).map_err(e)?,
                module_id: up32(&cabling.module_id, &mut bytes).map_err(e)?,
                bad_rocs: upload_condition(g, &cabling.bad_rocs, &mut bytes).map_err(e)?,
                mod_to_unp: upload_condition(g, &cabling.mod_to_unp, &mut bytes).map_err(e)?,
                size: cabling.size,
            };
            common.stats.add_conditions(bytes);
            Some(c)
        } else {
            None
        };
        Ok(RawToDigisGpu {
            input: cfg.input("input")?,
            cfg: rcfg,
            cabling: cab,
            common,
        })
    }
}

/// The host part of raw_to_digis for a batch: framing errors per event, the payload words of
/// all events in one array, FED segments, and words per event.
#[derive(Default, Debug, PartialEq)]
pub struct Framed {
    pub words: Vec<u32>,
    pub seg_start: Vec<u32>,
    pub seg_fed: Vec<u32>,
    pub words_per_event: Vec<usize>,
    pub framing_errors: Vec<Vec<PixelError>>,
}

/// Frames every FED of every event (`events[e]` = (fed id, bytes) in product order).
pub fn frame_batch<'a>(
    events: impl Iterator<Item = Vec<(u32, &'a [u8])>>,
    max_words: usize,
) -> Framed {
    let mut f = Framed::default();
    for feds in events {
        let mut errors = Vec::new();
        let mut total = 0usize;
        for (fed, bytes) in feds {
            if let Some((start, n32)) = frame_fed(fed, bytes, &mut errors) {
                if n32 > max_words.saturating_sub(total) {
                    errors.push(PixelError {
                        fed,
                        word: 0,
                        raw_id: DUMMY_DET_ID,
                        error_type: error_type::WORD_CAPACITY,
                    });
                    continue;
                }
                f.seg_start.push(f.words.len() as u32);
                f.seg_fed.push(fed);
                f.words.extend(
                    bytes[start..start + 4 * n32]
                        .chunks_exact(4)
                        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
                );
                total += n32;
            }
        }
        f.words_per_event.push(total);
        f.framing_errors.push(errors);
    }
    f.seg_start.push(f.words.len() as u32);
    f
}

/// Each event's errors as the CPU core lists them: its framing errors, then the word errors
/// (word index, type, raw id; any order) in word order, with their FED and word.
pub fn merge_errors(framed: &Framed, mut word_errors: Vec<(u32, u8, u32)>) -> Vec<Vec<PixelError>> {
    word_errors.sort_unstable_by_key(|e| e.0);
    let mut errors = framed.framing_errors.clone();
    let (mut ev, mut ev_end, mut seg) = (
        0usize,
        framed.words_per_event.first().copied().unwrap_or(0),
        0usize,
    );
    for (w, t, raw_id) in word_errors {
        let w = w as usize;
        while w >= ev_end {
            ev += 1;
            ev_end += framed.words_per_event[ev];
        }
        while framed.seg_start[seg + 1] as usize <= w {
            seg += 1;
        }
        errors[ev].push(PixelError {
            fed: framed.seg_fed[seg],
            word: framed.words[w] as u64,
            raw_id,
            error_type: t,
        });
    }
    errors
}

/// A word error as the kernel lists it: word index, error type, raw id.
type WordError = (u32, u8, u32);

/// The kernel's status and its word errors (word index, type, raw id; at most `n`), downloaded.
fn word_errors(
    run: &mut Run,
    status: &DeviceBuf,
    count: &DeviceBuf,
    [index, kind, raw]: [&DeviceBuf; 3],
    n: usize,
) -> Result<(u32, Vec<WordError>)> {
    let (st, cnt) = (run.queue::<u32>(status, 1)?, run.queue::<u32>(count, 1)?);
    let (st, cnt) = (run.take(st)?, run.take(cnt)?);
    let n_err = (cnt[0] as usize).min(n);
    let (ei, et, er) = (
        run.queue::<u32>(index, n_err)?,
        run.queue::<u8>(kind, n_err)?,
        run.queue::<u32>(raw, n_err)?,
    );
    let (ei, et, er) = (run.take(ei)?, run.take(et)?, run.take(er)?);
    Ok((st[0], (0..n_err).map(|k| (ei[k], et[k], er[k])).collect()))
}

impl RawToDigisGpu {
    /// The batch's `digi_errors` and capacity rows (the FED words past `max_words`), as the
    /// CPU step publishes them.
    fn publish_errors(&self, batch: &mut EventBatch, errors: &[Vec<PixelError>]) -> Result<()> {
        let all: Vec<&PixelError> = errors.iter().flatten().collect();
        let err_cols: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from_iter_values(all.iter().map(|e| e.fed))),
            Arc::new(arrow_array::UInt64Array::from_iter_values(
                all.iter().map(|e| e.word),
            )),
            Arc::new(UInt32Array::from_iter_values(all.iter().map(|e| e.raw_id))),
            Arc::new(arrow_array::UInt8Array::from_iter_values(
                all.iter().map(|e| e.error_type),
            )),
        ];
        publish(batch, DIGI_ERRORS, err_cols, errors.iter().map(Vec::len))?;
        publish_overflows(
            batch,
            errors
                .iter()
                .map(|e| {
                    records::fed_words(e, self.cfg.max_words)
                        .into_iter()
                        .collect()
                })
                .collect(),
        )
    }
}

impl RawToDigisGpu {
    /// The batch's FED payloads framed for the decoding kernel.
    fn frame(&self, batch: &EventBatch) -> Result<Framed> {
        let raw = batch.get(&self.input)?;
        let fed = values::<UInt32Type>(&raw, "fed")?;
        let data = quiver_columnar::columns::binary(&raw, "data")?;
        Ok(frame_batch(
            (0..batch.n_events())
                .map(|e| raw.event_rows(e).map(|r| (fed[r], data.value(r))).collect()),
            self.cfg.max_words,
        ))
    }
}

impl Step for RawToDigisGpu {
    fn process(&self, batch: &mut EventBatch) -> Result<()> {
        let c = &self.common;
        let Some(cab) = &self.cabling else {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        };
        let framed = self.frame(batch)?;
        let n = framed.words.len();
        if n == 0 || n > u32::MAX as usize {
            return c.cpu.process(batch); // nothing to decode (or too much for one launch)
        }
        let mut run = Run::start(c.gpu)?;
        let words = run.up(&framed.words)?;
        let seg_start = run.up(&framed.seg_start)?;
        let seg_fed = run.up(&framed.seg_fed)?;
        let n_seg = framed.seg_fed.len() as u32;
        let mut err_count = run.zeros::<u32>(1)?;
        let mut status = run.zeros::<u32>(1)?;
        let (mut xx, mut yy, mut adc, mut module) = (
            run.out::<u16>(n)?,
            run.out::<u16>(n)?,
            run.out::<u16>(n)?,
            run.out::<u16>(n)?,
        );
        let (mut raw_id, mut pdigi) = (run.out::<u32>(n)?, run.out::<u32>(n)?);
        let (mut e_index, mut e_type, mut e_raw) =
            (run.out::<u32>(n)?, run.out::<u8>(n)?, run.out::<u32>(n)?);
        run.mark()?;
        {
            let (n32, use_q) = (n as u32, self.cfg.use_quality as u32);
            let (w, ss, sf) = (
                words.view::<u32>(n),
                seg_start.view::<u32>(framed.seg_start.len()),
                seg_fed.view::<u32>(framed.seg_fed.len()),
            );
            let (mut vx, mut vy, mut va, mut vm) = (
                xx.view_mut::<u16>(n),
                yy.view_mut::<u16>(n),
                adc.view_mut::<u16>(n),
                module.view_mut::<u16>(n),
            );
            let (mut vr, mut vp) = (raw_id.view_mut::<u32>(n), pdigi.view_mut::<u32>(n));
            let (mut ec, mut ei, mut et, mut er, mut st) = (
                err_count.view_mut::<u32>(1),
                e_index.view_mut::<u32>(n),
                e_type.view_mut::<u8>(n),
                e_raw.view_mut::<u32>(n),
                status.view_mut::<u32>(1),
            );
            let (link, roc, raw_id_map, roc_in_det, module_id, bad_rocs, mod_to_unp) = (
                cab.link.as_view(),
                cab.roc.as_view(),
                cab.raw_id.as_view(),
                cab.roc_in_det.as_view(),
                cab.module_id.as_view(),
                cab.bad_rocs.as_view(),
                cab.mod_to_unp.as_view(),
            );
            let args = args::RawToDigis {
                words: &w,
                n_words: &n32,
                seg_start: &ss,
                seg_fed: &sf,
                n_seg: &n_seg,
                c_link: &link,
                c_roc: &roc,
                c_raw_id: &raw_id_map,
                c_roc_in_det: &roc_in_det,
                c_module_id: &module_id,
                c_bad_rocs: &bad_rocs,
                c_mod_to_unp: &mod_to_unp,
                c_size: &cab.size,
                use_quality: &use_q,
                xx: &mut vx,
                yy: &mut vy,
                adc_out: &mut va,
                module_out: &mut vm,
                raw_id_out: &mut vr,
                pdigi_out: &mut vp,
                err_count: &mut ec,
                err_index: &mut ei,
                err_type: &mut et,
                err_raw: &mut er,
                status: &mut st,
            };
            launch(&run, args, blocks(n, ELEMENT_BLOCK))?;
        }
        run.mark()?;
        let (st, werr) = word_errors(
            &mut run,
            &status,
            &err_count,
            [&e_index, &e_type, &e_raw],
            n,
        )?;
        run.finish(&c.stats)?;
        if st != 0 {
            return fallback(c.cpu.as_ref(), &c.stats, batch);
        }
        let errors = merge_errors(&framed, werr);
        // The digis stay on the device: the GPU `calibrate` reads them there, and the first
        // host consumer (a CPU step, an output, `compare`) downloads them once.
        let on_device = device_columns(
            c.gpu,
            DIGIS,
            n,
            [xx, yy, adc, module, raw_id, pdigi]
                .into_iter()
                .map(Arc::new)
                .collect(),
        )?;
        batch.put(Product::on_device(
            schema(DIGIS),
            offsets_from_lengths(framed.words_per_event.iter().copied())?,
            n,
            on_device,
        )?)?;
        self.publish_errors(batch, &errors)
    }

    fn end_job(&self, _success: bool) -> Result<Option<String>> {
        Ok(self.common.report())
    }
}
