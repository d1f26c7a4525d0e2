//! The CUDA kernels run on the host: their sources are compiled with the system C++
//! compiler behind a small shim (one thread per block for the per-module kernels, so
//! `__syncthreads` is a no-op; atomics are plain operations; `__fmul_rn` & co. are plain
//! float operations compiled with `-ffp-contract=off`). Their results on a generated
//! dataset, batched as the GPU steps batch them, must equal the CPU cores' bit for bit.
//! The per-module kernels are also run with real threads in each block (a barrier for
//! `__syncthreads`, real atomics) and must give the same results. This checks the kernels'
//! logic, their independence from thread interleaving, and the host preparation (framing,
//! module runs, run tables) without a GPU. Every kernel is called with the GPU step's own
//! argument list (`quiver_gpu::args`, through `emu_threads::HostLaunch`), checked against
//! its signature. Skips when no C++ compiler is found.

use crate::emu_threads::{self, HostLaunch};

use std::sync::OnceLock;

use quiver_datasets::Dataset;
use quiver_gpu::{args, kernels};
use quiver_reco::local;

/// The emulator library; [`HostLaunch::run`] runs a block's threads one after the other on
/// this thread, or each on its own OS thread.
fn emulator() -> Option<&'static libloading::Library> {
    emu_threads::kernels()
}

/// The emulator library for runs with real threads in each block.
fn threaded() -> Option<&'static libloading::Library> {
    emu_threads::kernels()
}

/// Threads per block in the threaded emulation.
const EMU_THREADS: u32 = 8;

/// The threaded emulator, where [`threaded`] said there is one.
fn threaded_lib() -> &'static libloading::Library {
    threaded().expect("checked by the caller")
}

/// `rechits`' outputs: the eight float columns, `iphi`, charge, sizes, detIndex.
type Hits = (
    Vec<Vec<f32>>,
    Vec<i16>,
    Vec<i32>,
    Vec<i16>,
    Vec<i16>,
    Vec<u16>,
);

/// Runs of `rechits`: first digi, end, clusters, module, first hit.
type Runs<'r> = (&'r [u32], &'r [u32], &'r [u32], &'r [u16], &'r [u32]);

/// Equal hits, the floats bit for bit.
fn same_hits(a: &Hits, b: &Hits) -> bool {
    let bits = |h: &Hits| -> Vec<Vec<u32>> {
        h.0.iter()
            .map(|c| c.iter().map(|x| x.to_bits()).collect())
            .collect()
    };
    bits(a) == bits(b) && (&a.1, &a.2, &a.3, &a.4, &a.5) == (&b.1, &b.2, &b.3, &b.4, &b.5)
}

/// The gains' range table as the GPU `calibrate` uploads it, and the scalars its launch
/// passes by reference.
struct Gains<'g> {
    g: &'g quiver_formats::conditions::GainCalibration,
    first: Vec<u32>,
    last: Vec<u32>,
    cols: Vec<i32>,
    n_ranges: u32,
    data_len: u64,
    c: local::CalibConfig,
    is_run2: u32,
    l1: u32,
}

impl<'g> Gains<'g> {
    fn of(g: &'g quiver_formats::conditions::GainCalibration) -> Self {
        let c = local::CalibConfig::default();
        Gains {
            g,
            first: g.range_and_cols.iter().map(|r| r.0).collect(),
            last: g.range_and_cols.iter().map(|r| r.1).collect(),
            cols: g.range_and_cols.iter().map(|r| r.2).collect(),
            n_ranges: g.range_and_cols.len() as u32,
            data_len: g.data.len() as u64,
            is_run2: c.is_run2 as u32,
            l1: c.l1_modules as u32,
            c,
        }
    }
}

/// `calibrate`'s launch over digis `(module, xx, yy, adc)` of `n` rows, into `out`
/// (module, adc, status).
fn calibrate_launch<'a>(
    (module, xx, yy, adc): (&'a [u16], &'a [u16], &'a [u16], &'a [u16]),
    n: &'a u32,
    gains: &'a Gains,
    (module_out, adc_out, status): (&'a mut [u16], &'a mut [u16], &'a mut u32),
) -> HostLaunch<'a> {
    let (g, c) = (gains.g, &gains.c);
    HostLaunch::new(args::Calibrate::<HostLaunch> {
        module_in: module,
        xx,
        yy,
        adc_in: adc,
        n,
        range_first: &gains.first,
        range_last: &gains.last,
        range_cols: &gains.cols,
        n_ranges: &gains.n_ranges,
        data: &g.data,
        data_len: &gains.data_len,
        min_ped: &g.min_ped,
        min_gain: &g.min_gain,
        ped_precision: &g.ped_precision,
        gain_precision: &g.gain_precision,
        rows_averaged: &g.rows_averaged,
        dead_flag: &g.dead_flag,
        noisy_flag: &g.noisy_flag,
        is_run2: &gains.is_run2,
        l1_modules: &gains.l1,
        gain_l1: &c.vcal_to_electron_gain_l1,
        offset_l1: &c.vcal_to_electron_offset_l1,
        gain_other: &c.vcal_to_electron_gain,
        offset_other: &c.vcal_to_electron_offset,
        min_electrons: &c.min_electrons,
        module_out,
        adc_out,
        status: std::slice::from_mut(status),
    })
}

fn dataset() -> &'static (tempfile::TempDir, Dataset) {
    static DS: OnceLock<(tempfile::TempDir, Dataset)> = OnceLock::new();
    DS.get_or_init(|| crate::generated(5, 30.0, 11, 0.1))
}

fn offsets(lengths: impl IntoIterator<Item = usize>) -> Vec<u32> {
    let mut o = vec![0u32];
    for l in lengths {
        o.push(o.last().unwrap() + l as u32);
    }
    o
}

/// A batch's module runs as the device finds them (`mr_flag`, the segmented scan, `mr_fill`):
/// `MAX_NUM_MODULES` slots per event (batch digi indices), the run count and the
/// capacity statistics per event, and the status.
struct DeviceRuns {
    status: u32,
    start: Vec<u32>,
    pos: Vec<u32>,
    total: Vec<u32>,
    first: Vec<u32>,
    end: Vec<u32>,
    base: Vec<u32>,
    module: Vec<u16>,
    worst: Vec<u32>,
    over: Vec<u32>,
    cut: Vec<u64>,
}

fn device_module_runs(
    lib: &libloading::Library,
    module: &[u16],
    xx: &[u16],
    yy: &[u16],
    ev_off: &[u32],
    max_pix: u32,
) -> DeviceRuns {
    let (n, n_ev) = (module.len(), ev_off.len() - 1);
    let slots = n_ev * local::MAX_NUM_MODULES;
    let mut r = DeviceRuns {
        status: 0,
        start: vec![7; n],
        pos: vec![7; n],
        total: vec![7; n_ev],
        first: vec![0; slots],
        end: vec![0; slots],
        base: vec![0; slots],
        module: vec![0; slots],
        worst: vec![0; n_ev],
        over: vec![0; n_ev],
        cut: vec![0; n_ev],
    };
    let bs = kernels::ELEMENT_BLOCK;
    let blocks = (n as u32).div_ceil(bs);
    HostLaunch::new(args::MrFlag::<HostLaunch> {
        module,
        xx,
        yy,
        n: &(n as u32),
        event_offsets: ev_off,
        n_events: &(n_ev as u32),
        start: &mut r.start,
        status: std::slice::from_mut(&mut r.status),
    })
    .run(lib, blocks, bs, false);
    (r.pos, r.total) = seg_scan(lib, false, &r.start, ev_off);
    HostLaunch::new(args::MrFill::<HostLaunch> {
        module,
        n: &(n as u32),
        event_offsets: ev_off,
        n_events: &(n_ev as u32),
        start: &r.start,
        pos: &r.pos,
        max_pix: &max_pix,
        run_first: &mut r.first,
        run_end: &mut r.end,
        run_base: &mut r.base,
        run_module: &mut r.module,
        worst: &mut r.worst,
        over: &mut r.over,
        cut: &mut r.cut,
    })
    .run(lib, blocks, bs, false);
    r
}

/// Values per tile of the emulated segmented scan (the events span several tiles).
const EMU_TILE: u32 = 211;

/// The segmented scan as `steps::seg_scan` launches it (`sg_tile_sum`, `sg_tile_scan`):
/// per segment of `seg_off`, the exclusive prefix sums of `value` and the total. `threaded`:
/// `lib` is the threaded emulator, `EMU_THREADS` threads per block.
fn seg_scan(
    lib: &libloading::Library,
    threaded: bool,
    value: &[u32],
    seg_off: &[u32],
) -> (Vec<u32>, Vec<u32>) {
    let threads = if threaded { EMU_THREADS } else { 1 };
    emu_threads::seg_scan(lib, (threads, threaded), value, seg_off, EMU_TILE)
}

/// `run_check` over table rows (batch first digi, module): the status.
fn run_check(
    lib: &libloading::Library,
    module: &[u16],
    row_first: &[u32],
    row_module: &[u16],
) -> u32 {
    let mut status = 0u32;
    let bs = kernels::ELEMENT_BLOCK;
    HostLaunch::new(args::RunCheck::<HostLaunch> {
        module,
        n_rows: &(row_first.len() as u32),
        row_first,
        row_module,
        status: std::slice::from_mut(&mut status),
    })
    .run(lib, (row_first.len() as u32).div_ceil(bs), bs, false);
    status
}

/// `run_ends` over runs (batch first digi, module, event end), checked against the CPU's
/// spans: the first valid digi of another module from the first one, else the event's end.
fn run_ends(
    lib: &libloading::Library,
    module: &[u16],
    first: &[u32],
    run_module: &[u16],
    limit: &[u32],
) -> Vec<u32> {
    let mut end = vec![7u32; first.len()];
    let bs = kernels::ELEMENT_BLOCK;
    HostLaunch::new(args::RunEnds::<HostLaunch> {
        module,
        n_runs: &(first.len() as u32),
        run_first: first,
        run_module,
        run_limit: limit,
        run_end: &mut end,
    })
    .run(lib, (first.len() as u32).div_ceil(bs), bs, false);
    for (r, &e) in end.iter().enumerate() {
        let (f, lim, m) = (first[r] as usize, limit[r] as usize, run_module[r]);
        let want = (f..lim)
            .find(|&i| module[i] != local::INVALID_MODULE && module[i] != m)
            .unwrap_or(lim.max(f));
        assert_eq!(e as usize, want, "run {r}: end");
    }
    end
}

/// `slot_ends` over a GPU clusterize's run slots (`MAX_NUM_MODULES` per event): each slot
/// with clusters ends as `run_ends` would end it at its event's end; the others are empty.
fn slot_ends(
    lib: &libloading::Library,
    module: &[u16],
    first: &[u32],
    slot_module: &[u16],
    nclus: &[u32],
    ev_off: &[u32],
) -> Vec<u32> {
    let n = first.len();
    let mut end = vec![7u32; n];
    let bs = kernels::ELEMENT_BLOCK;
    HostLaunch::new(args::SlotEnds::<HostLaunch> {
        module,
        n_slots: &(n as u32),
        slots_per_event: &(local::MAX_NUM_MODULES as u32),
        slot_first: first,
        slot_module,
        slot_nclus: nclus,
        event_offsets: ev_off,
        slot_end: &mut end,
    })
    .run(lib, (n as u32).div_ceil(bs), bs, false);
    let limit: Vec<u32> = (0..n)
        .map(|s| ev_off[s / local::MAX_NUM_MODULES + 1])
        .collect();
    let with: Vec<usize> = (0..n).filter(|&s| nclus[s] != 0).collect();
    let (wf, wm, wl): (Vec<u32>, Vec<u16>, Vec<u32>) = (
        with.iter().map(|&s| first[s]).collect(),
        with.iter().map(|&s| slot_module[s]).collect(),
        with.iter().map(|&s| limit[s]).collect(),
    );
    let want = run_ends(lib, module, &wf, &wm, &wl);
    for (k, &s) in with.iter().enumerate() {
        assert_eq!(end[s], want[k], "slot {s}: end");
    }
    assert!(
        (0..n).all(|s| nclus[s] != 0 || end[s] == first[s]),
        "slots without clusters are empty"
    );
    end
}

#[test]
fn device_module_runs_equal_the_cpu_clusterizer() {
    let Some(lib) = emulator() else { return };
    let (_, ds) = dataset();
    let c = ds.conditions();
    let events = ds.raw_events(0..ds.n_events()).unwrap();
    let (mut module, mut xx, mut yy, mut lengths) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for feds in &events {
        let d = local::raw_to_digis(feds, &c.cabling, &Default::default()).unwrap();
        let cal = local::calibrate_digis(
            &d.module_ind,
            &d.xx,
            &d.yy,
            &d.adc,
            &c.gains,
            &Default::default(),
        )
        .unwrap();
        module.extend_from_slice(&cal.module_ind);
        xx.extend_from_slice(&d.xx);
        yy.extend_from_slice(&d.yy);
        lengths.push(cal.module_ind.len());
    }
    // A synthetic event past the run capacity: MAX_NUM_MODULES + 5 runs of 2 digis (modules
    // alternating 1, 2, with invalid digis between runs), and an empty event.
    let n_syn = local::MAX_NUM_MODULES + 5;
    for k in 0..n_syn {
        module.extend_from_slice(&[
            1 + (k % 2) as u16,
            1 + (k % 2) as u16,
            local::INVALID_MODULE,
        ]);
        xx.extend_from_slice(&[1, 2, 0]);
        yy.extend_from_slice(&[3, 3, 0]);
    }
    lengths.extend([3 * n_syn, 0]);
    let ev_off = offsets(lengths.iter().copied());
    for max_pix in [4000u32, 7, 3, 1] {
        // 3: the synthetic runs are exactly that long
        let r = device_module_runs(lib, &module, &xx, &yy, &ev_off, max_pix);
        assert_eq!(r.status, 0);
        if let Some(tl) = threaded() {
            assert_eq!(
                seg_scan(tl, true, &r.start, &ev_off),
                (r.pos.clone(), r.total.clone()),
                "threaded scan"
            );
        }
        for (e, &len) in lengths.iter().enumerate() {
            let rows = ev_off[e] as usize..ev_off[e + 1] as usize;
            let (m, x, y) = (&module[rows.clone()], &xx[rows.clone()], &yy[rows.clone()]);
            let want = local::clusterize::module_runs(m, x, y, max_pix as usize).unwrap();
            let s0 = e * local::MAX_NUM_MODULES;
            let kept = (r.total[e] as usize).min(local::MAX_NUM_MODULES);
            assert_eq!(kept, want.len(), "event {e}, max_pix {max_pix}: runs");
            for (k, w) in want.iter().enumerate() {
                let got = (
                    r.first[s0 + k] - ev_off[e],
                    r.end[s0 + k] - ev_off[e],
                    r.base[s0 + k],
                    r.module[s0 + k],
                );
                assert_eq!(
                    got,
                    (w.first as u32, w.end as u32, ev_off[e], w.module),
                    "event {e} run {k}, max_pix {max_pix}"
                );
            }
            assert!(
                (s0 + kept..s0 + local::MAX_NUM_MODULES).all(|k| r.first[k] == 0 && r.end[k] == 0),
                "event {e}: empty slots"
            );
            let stats = quiver_reco::capacity::records::pixel_run_stats(
                r.worst[e] as u64,
                r.over[e],
                r.cut[e],
                max_pix as usize,
            );
            assert_eq!(
                stats,
                quiver_reco::capacity::records::pixel_runs(m, max_pix as usize),
                "event {e}, max_pix {max_pix}: overflow"
            );
            if len == 3 * n_syn {
                assert_eq!(
                    (r.total[e] as usize, kept),
                    (n_syn, local::MAX_NUM_MODULES),
                    "the capacity binds"
                );
            }
        }
    }
    // Digis the CPU refuses (a module or a pixel out of range) set the status.
    for (i, (m, x, y)) in [
        (local::MAX_NUM_MODULES as u16, 1, 1),
        (5, 200, 1),
        (5, 1, 500),
    ]
    .into_iter()
    .enumerate()
    {
        let (mut m2, mut x2, mut y2) = (module.clone(), xx.clone(), yy.clone());
        (m2[10], x2[10], y2[10]) = (m, x, y);
        assert!(local::clusterize::module_runs(
            &m2[..lengths[0]],
            &x2[..lengths[0]],
            &y2[..lengths[0]],
            4000
        )
        .is_err());
        assert_eq!(
            device_module_runs(lib, &m2, &x2, &y2, &ev_off, 4000).status,
            kernels::STATUS_BAD_INPUT,
            "case {i}"
        );
    }
    // A table row whose first digi is not of its module is caught.
    let first = vec![0u32, 3];
    assert_eq!(run_check(lib, &module, &first, &[module[0], module[3]]), 0);
    assert_eq!(
        run_check(
            lib,
            &module,
            &first,
            &[module[0], module[3].wrapping_add(1)]
        ),
        kernels::STATUS_BAD_INPUT
    );
}

#[test]
fn kernels_on_the_host_equal_the_cpu_cores() {
    let Some(lib) = emulator() else { return };
    let (_, ds) = dataset();
    let cond = ds.conditions();
    let events = ds.raw_events(0..ds.n_events()).unwrap();
    let cpu: Vec<_> = events
        .iter()
        .map(|feds| {
            let c = local::LocalConditions {
                cabling: &cond.cabling,
                gains: &cond.gains,
                cpe: &cond.cpe,
                beam_spot: &cond.beam_spot,
            };
            local::reconstruct_event(feds, &c, &Default::default()).unwrap()
        })
        .collect();

    // --- raw_to_digis: host framing + per-word kernel.
    let framed = quiver_gpu::steps::frame_batch(events.iter().cloned(), local::MAX_FED_WORDS);
    let n = framed.words.len();
    let cab = &cond.cabling;
    let (mut xx, mut yy, mut adc, mut module, mut raw_id, mut pdigi) = (
        vec![7u16; n],
        vec![7u16; n],
        vec![7u16; n],
        vec![7u16; n],
        vec![7u32; n],
        vec![7u32; n],
    );
    let (mut ecount, mut eidx, mut etype, mut eraw, mut status) =
        (0u32, vec![0u32; n], vec![0u8; n], vec![0u32; n], 0u32);
    let bs = kernels::ELEMENT_BLOCK;
    HostLaunch::new(args::RawToDigis::<HostLaunch> {
        words: &framed.words,
        n_words: &(n as u32),
        seg_start: &framed.seg_start,
        seg_fed: &framed.seg_fed,
        n_seg: &(framed.seg_fed.len() as u32),
        c_link: &cab.link,
        c_roc: &cab.roc,
        c_raw_id: &cab.raw_id,
        c_roc_in_det: &cab.roc_in_det,
        c_module_id: &cab.module_id,
        c_bad_rocs: &cab.bad_rocs,
        c_mod_to_unp: &cab.mod_to_unp,
        c_size: &cab.size,
        use_quality: &1,
        xx: &mut xx,
        yy: &mut yy,
        adc_out: &mut adc,
        module_out: &mut module,
        raw_id_out: &mut raw_id,
        pdigi_out: &mut pdigi,
        err_count: std::slice::from_mut(&mut ecount),
        err_index: &mut eidx,
        err_type: &mut etype,
        err_raw: &mut eraw,
        status: std::slice::from_mut(&mut status),
    })
    .run(lib, (n as u32).div_ceil(bs), bs, false);
    assert_eq!(status, 0);
    let ev_off = offsets(framed.words_per_event.iter().copied());
    let errs: Vec<(u32, u8, u32)> = (0..ecount as usize)
        .rev()
        .map(|k| (eidx[k], etype[k], eraw[k]))
        .collect();
    let merged = quiver_gpu::steps::merge_errors(&framed, errs);
    let mut total_errors = 0;
    for (e, ev) in cpu.iter().enumerate() {
        let r = ev_off[e] as usize..ev_off[e + 1] as usize;
        let d = &ev.digis;
        assert_eq!(
            (&xx[r.clone()], &yy[r.clone()], &adc[r.clone()]),
            (&d.xx[..], &d.yy[..], &d.adc[..]),
            "event {e}"
        );
        assert_eq!(
            (&module[r.clone()], &raw_id[r.clone()], &pdigi[r.clone()]),
            (&d.module_ind[..], &d.raw_id[..], &d.pdigi[..]),
            "event {e}"
        );
        assert_eq!(merged[e], d.errors, "event {e}: errors");
        total_errors += d.errors.len();
    }
    println!("{n} words, {total_errors} errors");
    assert!(
        total_errors > 0,
        "the corrupted dataset exercises the error paths"
    );

    // --- calibrate: one thread per digi over the whole batch.
    let g = &cond.gains;
    let (mut cm, mut ca, mut cst) = (vec![0u16; n], vec![0u16; n], 0u32);
    let (gains, n32, bs) = (Gains::of(g), n as u32, kernels::ELEMENT_BLOCK);
    calibrate_launch(
        (&module, &xx, &yy, &adc),
        &n32,
        &gains,
        (&mut cm, &mut ca, &mut cst),
    )
    .run(lib, n32.div_ceil(bs), bs, false);
    assert_eq!(cst, 0);
    for (e, ev) in cpu.iter().enumerate() {
        let r = ev_off[e] as usize..ev_off[e + 1] as usize;
        assert_eq!(
            (&cm[r.clone()], &ca[r.clone()]),
            (&ev.calibrated.module_ind[..], &ev.calibrated.adc[..]),
            "event {e}: calibrate"
        );
    }

    // --- clusterize: module runs on the device, clus_init, one block per run slot.
    let runs = device_module_runs(lib, &cm, &xx, &yy, &ev_off, local::MAX_PIX_IN_MODULE as u32);
    assert_eq!(runs.status, 0);
    let (rf, re, rb) = (runs.first.clone(), runs.end.clone(), runs.base.clone());
    let mut runs_per_event = Vec::new();
    for e in 0..events.len() {
        let s0 = e * local::MAX_NUM_MODULES;
        let kept = (runs.total[e] as usize).min(local::MAX_NUM_MODULES);
        runs_per_event.push(
            (s0..s0 + kept)
                .map(|k| (runs.first[k] - ev_off[e], runs.module[k]))
                .collect::<Vec<_>>(),
        );
        let c = &cpu[e].clusters;
        let firsts: Vec<u32> = runs_per_event[e].iter().map(|r| r.0).collect();
        let ids: Vec<u32> = runs_per_event[e].iter().map(|r| r.1 as u32).collect();
        assert_eq!(
            (&firsts[..], &ids),
            (&c.module_start[1..], &c.module_id),
            "event {e}: module runs"
        );
    }
    let (mut clus, mut bins, mut found) = (vec![-5i32; n], vec![0u32; n], vec![0u32; rf.len()]);
    let bs = kernels::ELEMENT_BLOCK;
    HostLaunch::new(args::ClusInit::<HostLaunch> {
        clus: &mut clus,
        n: &(n as u32),
        event_offsets: &ev_off,
        n_events: &(events.len() as u32),
    })
    .run(lib, (n as u32).div_ceil(bs), bs, false);
    HostLaunch::new(args::Clusterize::<HostLaunch> {
        module: &cm,
        xx: &xx,
        yy: &yy,
        run_first: &rf,
        run_end: &re,
        run_base: &rb,
        clus_all: &mut clus,
        bins_all: &mut bins,
        found_out: &mut found,
    })
    .run(lib, rf.len() as u32, 1, false);
    // The same with real threads in each block: the interleavings must not matter.
    if let Some(tl) = threaded() {
        let mut clus_t = vec![0i32; n];
        let mut bins_t = vec![0u32; n];
        let mut found_t = vec![0u32; rf.len()];
        for e in 0..events.len() {
            for i in ev_off[e]..ev_off[e + 1] {
                clus_t[i as usize] = (i - ev_off[e]) as i32; // what clus_init writes
            }
        }
        HostLaunch::new(args::Clusterize::<HostLaunch> {
            module: &cm,
            xx: &xx,
            yy: &yy,
            run_first: &rf,
            run_end: &re,
            run_base: &rb,
            clus_all: &mut clus_t,
            bins_all: &mut bins_t,
            found_out: &mut found_t,
        })
        .run(tl, rf.len() as u32, EMU_THREADS, true);
        assert_eq!(clus_t, clus, "threaded clusterize");
        assert_eq!(found_t, found, "threaded clusterize: clusters per run");
    }
    let mut found_used = Vec::new();
    for (e, ev) in cpu.iter().enumerate() {
        let r = ev_off[e] as usize..ev_off[e + 1] as usize;
        assert_eq!(
            &clus[r.clone()],
            &ev.clusters.clus[..],
            "event {e}: clusters"
        );
        let s0 = e * local::MAX_NUM_MODULES;
        for (j, run) in runs_per_event[e].iter().enumerate() {
            // Modules appear once per event in generated data.
            assert_eq!(
                found[s0 + j],
                ev.clusters.n_clusters_in_module[run.1 as usize],
                "event {e} run {j}"
            );
        }
        assert!(
            found[s0 + runs_per_event[e].len()..s0 + local::MAX_NUM_MODULES]
                .iter()
                .all(|&f| f == 0),
            "event {e}: empty slots"
        );
        found_used.extend_from_slice(&found[s0..s0 + runs_per_event[e].len()]);
    }
    let tables = quiver_gpu::steps::cluster_tables(&runs_per_event, &found_used).unwrap();
    for (e, ev) in cpu.iter().enumerate() {
        let c = &ev.clusters;
        let ids: Vec<u16> = c.module_id.iter().map(|&m| m as u16).collect();
        let counts: Vec<u32> = c
            .module_id
            .iter()
            .map(|&m| c.n_clusters_in_module[m as usize])
            .collect();
        assert_eq!(
            tables[e],
            (ids, c.module_start[1..].to_vec(), counts),
            "event {e}: cluster_modules table"
        );
    }

    // --- cluster_charge_cut: one block per run with clusters.
    let rows: Vec<std::ops::Range<usize>> = (0..events.len())
        .map(|e| ev_off[e] as usize..ev_off[e + 1] as usize)
        .collect();
    let ids16: Vec<Vec<u16>> = tables.iter().map(|t| t.0.clone()).collect();
    let cut_in: Vec<(&[u16], &[u32], &[u32])> = tables
        .iter()
        .zip(&ids16)
        .map(|(t, ids)| (ids.as_slice(), t.1.as_slice(), t.2.as_slice()))
        .collect();
    let plan = quiver_gpu::steps::cut_runs(&rows, &cut_in).unwrap();
    assert_eq!(
        run_check(lib, &cm, &plan.row_first, &plan.row_module),
        0,
        "every row's first digi is of its module"
    );
    let re = run_ends(lib, &cm, &plan.first, &plan.module, &plan.limit);
    let (rf, rn, rm) = (plan.first.clone(), plan.nclus.clone(), plan.module.clone());
    let (mut qm, mut qc) = (cm.clone(), clus.clone());
    let cut = |threaded: bool,
               qm: &mut [u16],
               qc: &mut [i32],
               runs: (&[u32], &[u32], &[u32], &[u16])|
     -> Vec<u32> {
        let c = local::ChargeCutConfig::default();
        let mut ncl = vec![7u32; runs.0.len()];
        let (lib, threads) = match threaded {
            true => (threaded_lib(), EMU_THREADS),
            false => (lib, 1),
        };
        HostLaunch::new(args::ChargeCut::<HostLaunch> {
            module: qm,
            clus: qc,
            adc: &ca,
            run_first: runs.0,
            run_end: runs.1,
            run_nclus: runs.2,
            run_module: runs.3,
            max_per_module: &c.max_clusters_per_module,
            l1_modules: &(c.l1_modules as u32),
            min_charge_l1: &c.min_charge_l1,
            min_charge: &c.min_charge,
            ncl_out: &mut ncl,
        })
        .run(lib, runs.0.len() as u32, threads, threaded);
        ncl
    };
    let ncl = cut(false, &mut qm, &mut qc, (&rf, &re, &rn, &rm));
    if threaded().is_some() {
        let (mut qm_t, mut qc_t) = (cm.clone(), clus.clone());
        let ncl_t = cut(true, &mut qm_t, &mut qc_t, (&rf, &re, &rn, &rm));
        assert_eq!(
            (qm_t, qc_t, ncl_t),
            (qm.clone(), qc.clone(), ncl.clone()),
            "threaded charge cut"
        );
    }
    // The same cut over the run slots that clusterize kept on the device (`slot_ends`, one
    // block per slot): the same digis, and each run's count in its table row's slot.
    let n_slots = events.len() * local::MAX_NUM_MODULES;
    let sre = slot_ends(lib, &cm, &runs.first, &runs.module, &found, &ev_off);
    assert!(
        plan.slot
            .iter()
            .zip(&re)
            .all(|(&s, &e)| sre[s as usize] == e),
        "slot ends = the host runs' ends"
    );
    {
        let (mut qm_s, mut qc_s) = (cm.clone(), clus.clone());
        let slots = (&runs.first[..], &sre[..], &found[..], &runs.module[..]);
        let ncl_s = cut(false, &mut qm_s, &mut qc_s, slots);
        assert_eq!((&qm_s, &qc_s), (&qm, &qc), "charge cut over the slots");
        let kept: Vec<u32> = plan.slot.iter().map(|&s| ncl_s[s as usize]).collect();
        assert_eq!(kept, ncl, "charge cut over the slots: clusters kept");
    }
    let cut_tables = plan.tables(&ncl);
    for (e, ev) in cpu.iter().enumerate() {
        let r = ev_off[e] as usize..ev_off[e + 1] as usize;
        assert_eq!(
            (&qm[r.clone()], &qc[r.clone()]),
            (&ev.cut.module_ind[..], &ev.cut.clus[..]),
            "event {e}: charge cut"
        );
        let c = &ev.clusters;
        let counts: Vec<u32> = c
            .module_id
            .iter()
            .map(|&m| ev.cut.n_clusters_in_module[m as usize])
            .collect();
        assert_eq!(cut_tables[e].2, counts, "event {e}: hit_modules table");
    }

    // --- rechits: host hit runs, one block per run; compared bit for bit (floats as bits).
    let det = quiver_gpu::steps::det_table(&cond.cpe);
    let hit_in: Vec<(&[u16], &[u32], &[u32])> = cut_tables
        .iter()
        .map(|t| (t.0.as_slice(), t.1.as_slice(), t.2.as_slice()))
        .collect();
    let beam = vec![[cond.beam_spot.x, cond.beam_spot.y, cond.beam_spot.z]; events.len()];
    let hplan = quiver_gpu::steps::rechit_runs(&rows, &hit_in, &beam, cond.cpe.det.len()).unwrap();
    let re = run_ends(lib, &qm, &hplan.first, &hplan.module, &hplan.limit);
    let (rf, rn, rme, rh, rbs) = (
        hplan.first.clone(),
        hplan.nclus.clone(),
        hplan.module.clone(),
        hplan.hit.clone(),
        hplan.beam.clone(),
    );
    let mut hit_off = vec![0u32];
    for &h in &hplan.hits_per_event {
        hit_off.push(hit_off.last().unwrap() + h as u32);
    }
    let nh = *hit_off.last().unwrap() as usize;
    // The launch's shared memory: the largest run's clusters (as the step sizes it).
    let cap = rn.iter().copied().max().unwrap();
    assert!(
        cap > 1 && cap < local::MAX_CLUSTERS_PER_MODULE,
        "the events' largest run sets a capacity below the module's"
    );
    let com = &cond.cpe.common;
    // Blocks of runs (first, end, clusters, module, first hit) with the beam spot per run
    // (`stride` 0) or per event of `stride` slots.
    let rechits_cap = |threaded: bool,
                       (first, end, nclus, module, hit): Runs,
                       beam: &[f32],
                       stride: u32,
                       cap: u32|
     -> (Hits, u32) {
        let mut h: Hits = (
            vec![vec![0f32; nh]; 8],
            vec![0i16; nh],
            vec![0i32; nh],
            vec![0i16; nh],
            vec![0i16; nh],
            vec![0u16; nh],
        );
        let mut st = 0u32;
        let (lib, threads) = match threaded {
            true => (threaded_lib(), EMU_THREADS),
            false => (lib, 1),
        };
        let [xl, yl, xe, ye, xg, yg, zg, rg] = &mut h.0[..] else {
            unreachable!()
        };
        HostLaunch::new(args::RecHits::<HostLaunch> {
            module: &qm,
            clus: &qc,
            xx: &xx,
            yy: &yy,
            adc: &ca,
            run_first: first,
            run_end: end,
            run_nclus: nclus,
            run_me: module,
            run_hit: hit,
            beam,
            beam_stride: &stride,
            cap: &cap,
            det: &det,
            thickness_b: &com.thickness_b,
            thickness_e: &com.thickness_e,
            pitch_x: &com.pitch_x,
            pitch_y: &com.pitch_y,
            x_local: xl,
            y_local: yl,
            xerr_local: xe,
            yerr_local: ye,
            x_global: xg,
            y_global: yg,
            z_global: zg,
            r_global: rg,
            iphi: &mut h.1,
            charge: &mut h.2,
            size_x: &mut h.3,
            size_y: &mut h.4,
            det_index: &mut h.5,
            status: std::slice::from_mut(&mut st),
        })
        .run(lib, first.len() as u32, threads, threaded);
        (h, st)
    };
    let (hits, hst) = rechits_cap(false, (&rf, &re, &rn, &rme, &rh), &rbs, 0, cap);
    assert_eq!(hst, 0);
    if threaded().is_some() {
        let (hits_t, hst_t) = rechits_cap(true, (&rf, &re, &rn, &rme, &rh), &rbs, 0, cap);
        assert_eq!(hst_t, 0);
        assert!(same_hits(&hits_t, &hits), "threaded rechits");
    }
    // The same over the run slots (`slot_ends`, one block per slot, the beam spot per event):
    // only each slot's clusters and first hit came from the host.
    {
        let rechits = |first: &[u32],
                       end: &[u32],
                       nclus: &[u32],
                       module: &[u16],
                       hit: &[u32],
                       beam: &[f32],
                       stride: u32|
         -> Hits {
            let (h, st) = rechits_cap(false, (first, end, nclus, module, hit), beam, stride, cap);
            assert_eq!(st, 0);
            h
        };
        let (sn, sh) = hplan.per_slot(n_slots).unwrap();
        let sre = slot_ends(lib, &qm, &runs.first, &runs.module, &sn, &ev_off);
        let per_slot = |beam: &[f32]| {
            rechits(
                &runs.first,
                &sre,
                &sn,
                &runs.module,
                &sh,
                beam,
                local::MAX_NUM_MODULES as u32,
            )
        };
        let beam_ev: Vec<f32> = beam.iter().flatten().copied().collect();
        let host = &hits;
        assert!(
            same_hits(&per_slot(&beam_ev), host),
            "rechits over the slots"
        );
        // Each event its own beam spot: the slots read their event's, as the runs read theirs.
        let moved: Vec<[f32; 3]> = (0..events.len())
            .map(|e| {
                [
                    beam[e][0] + 0.01 * e as f32,
                    beam[e][1] - 0.02 * e as f32,
                    beam[e][2] + 0.5 * e as f32,
                ]
            })
            .collect();
        let mplan =
            quiver_gpu::steps::rechit_runs(&rows, &hit_in, &moved, cond.cpe.det.len()).unwrap();
        let by_run = rechits(
            &mplan.first,
            &re,
            &mplan.nclus,
            &mplan.module,
            &mplan.hit,
            &mplan.beam,
            0,
        );
        assert!(!same_hits(&by_run, host), "the beam spot moves the hits");
        assert!(
            same_hits(
                &per_slot(&moved.iter().flatten().copied().collect::<Vec<f32>>()),
                &by_run
            ),
            "rechits over the slots, a beam spot per event"
        );
        // Shared memory sized below the largest run: refused (the status), never wrong hits.
        let h = &hplan;
        let runs = (
            &h.first[..],
            &re[..],
            &h.nclus[..],
            &h.module[..],
            &h.hit[..],
        );
        let (_, st) = rechits_cap(false, runs, &h.beam, 0, cap - 1);
        assert_eq!(
            st,
            kernels::STATUS_BAD_INPUT,
            "a run above the launch's capacity"
        );
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    let (f, iphi, chg, sx, sy, di) = &hits;
    let mut total_hits = 0;
    for (e, ev) in cpu.iter().enumerate() {
        let r = hit_off[e] as usize..hit_off[e + 1] as usize;
        let h = &ev.hits;
        let cpu_f = [
            &h.x_local,
            &h.y_local,
            &h.xerr_local,
            &h.yerr_local,
            &h.x_global,
            &h.y_global,
            &h.z_global,
            &h.r_global,
        ];
        for (k, col) in cpu_f.iter().enumerate() {
            assert_eq!(
                bits(&f[k][r.clone()]),
                bits(col),
                "event {e}: float column {k} of the hits"
            );
        }
        assert_eq!(
            (&iphi[r.clone()], &chg[r.clone()]),
            (&h.iphi[..], &h.charge[..]),
            "event {e}: iphi, charge"
        );
        assert_eq!(
            (&sx[r.clone()], &sy[r.clone()], &di[r.clone()]),
            (&h.size_x[..], &h.size_y[..], &h.det_index[..]),
            "event {e}: sizes"
        );
        total_hits += r.len();
    }
    println!("{total_hits} hits");
    assert!(total_hits > 100);
}

#[test]
fn a_misordered_argument_list_fails_the_check_and_changes_the_emulated_result() {
    let Some(lib) = emulator() else { return };
    let (_, ds) = dataset();
    let cond = ds.conditions();
    let c = local::LocalConditions {
        cabling: &cond.cabling,
        gains: &cond.gains,
        cpe: &cond.cpe,
        beam_spot: &cond.beam_spot,
    };
    let cpu: Vec<_> = ds
        .raw_events(0..ds.n_events())
        .unwrap()
        .iter()
        .map(|feds| local::reconstruct_event(feds, &c, &Default::default()).unwrap())
        .collect();
    let cat = |f: &dyn Fn(&local::LocalEvent) -> &[u16]| -> Vec<u16> {
        cpu.iter().flat_map(|e| f(e).iter().copied()).collect()
    };
    let (module, xx, yy, adc) = (
        cat(&|e| &e.digis.module_ind),
        cat(&|e| &e.digis.xx),
        cat(&|e| &e.digis.yy),
        cat(&|e| &e.digis.adc),
    );
    let want = (
        cat(&|e| &e.calibrated.module_ind),
        cat(&|e| &e.calibrated.adc),
        0u32,
    );
    let (n, gains, bs) = (
        module.len() as u32,
        Gains::of(&cond.gains),
        kernels::ELEMENT_BLOCK,
    );
    // `swap`: two arguments of the production list exchanged, as a step written with them
    // in the wrong order would pass them. The check runs first; the kernel runs anyway.
    let calibrate = |swap: Option<(&str, &str)>| {
        let mut out = (vec![7u16; module.len()], vec![7u16; module.len()], 0u32);
        let mut l = calibrate_launch(
            (&module, &xx, &yy, &adc),
            &n,
            &gains,
            (&mut out.0, &mut out.1, &mut out.2),
        );
        if let Some((a, b)) = swap {
            let (i, j) = (l.position(a), l.position(b));
            l.swap(i, j);
        }
        let checked = l.check().map_err(|e| e.to_string());
        l.run_unchecked(lib, n.div_ceil(bs), bs, false);
        drop(l);
        (checked, out)
    };
    let (checked, out) = calibrate(None);
    assert_eq!(checked, Ok(()));
    assert_eq!(
        out, want,
        "the production list computes the CPU's calibrated digis"
    );
    // `xx` and `yy` are both u16*: the names tell them apart, and the values differ.
    let (checked, out) = calibrate(Some(("xx", "yy")));
    let e = checked.unwrap_err();
    assert!(
        e.contains("calibrate")
            && e.contains("argument 2 is passed as 'yy' but the kernel's parameter is 'xx'"),
        "{e}"
    );
    assert_ne!(out, want, "rows read as columns calibrate other digis");
    // Two scalars of one type (the gains' floor values, both float).
    let (checked, out) = calibrate(Some(("min_ped", "gain_precision")));
    assert!(checked
        .unwrap_err()
        .contains("argument 12 is passed as 'gain_precision'"));
    assert_ne!(out, want, "swapped float parameters calibrate otherwise");
}
