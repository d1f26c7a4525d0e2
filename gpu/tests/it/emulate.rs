//! The CUDA kernels run on the host: their sources are compiled with the system C++
//! compiler behind a small shim (one thread per block for the per-module kernels, so
//! `__syncthreads` is a no-op; atomics are plain operations; `__fmul_rn` & co. are plain
//! float operations compiled with `-ffp-contract=off`). Their results on a generated
//! dataset, batched as the GPU steps batch them, must equal the CPU cores' bit for bit.
//! The per-module kernels are also run with real threads in each block (a barrier for
//! `__syncthreads`, real atomics) and must give the same results. This checks the kernels'
//! logic, their independence from thread interleaving, and the host preparation (framing,
//! module runs, run tables) without a GPU. Skips when no C++ compiler is found.

// Every `unsafe` here is a call into the emulation library this file compiles (`build_lib`)
// with the signatures its shim declares, passing pointers into live Rust vectors sized from
// the same counts the kernel indexes (the kernels' bounds are what the tests check); one
// justification for all of them instead of one per call.
#![allow(clippy::undocumented_unsafe_blocks)]

use crate::emu_threads;

use std::sync::OnceLock;

use quiver_datasets::{generate, Dataset, GenerateOptions};
use quiver_gpu::kernels;
use quiver_reco::local;

/// The emulator library with real threads per block (`emu_threads::kernels`: the same
/// library runs a block's threads one after the other).
fn threaded() -> Option<&'static libloading::Library> {
    emu_threads::kernels()
}

/// Threads per block in the threaded emulation.
const EMU_THREADS: u32 = 8;

/// Runs a block kernel with `EMU_THREADS` real threads per block; `launch` gets raw
/// pointers as integers so that it can be shared by the threads.
fn grid_threaded(lib: &libloading::Library, blocks: u32, launch: impl Fn() + Sync) {
    let _only = emu_threads::ONE_LAUNCH
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for b in 0..blocks {
        emu_threads::run_threads(EMU_THREADS, |t, _| {
            emu_threads::set_thread(lib, b, EMU_THREADS, t);
            launch();
        });
    }
}

/// The emulator library, a block's threads run one after the other on this thread.
fn emulator() -> Option<&'static libloading::Library> {
    emu_threads::kernels()
}

/// Runs `launch` for every (block, thread) of a grid, as the device would (sequentially).
fn grid(lib: &libloading::Library, blocks: u32, threads: u32, mut launch: impl FnMut()) {
    let _only = emu_threads::ONE_LAUNCH
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for b in 0..blocks {
        for t in 0..threads {
            emu_threads::set_thread(lib, b, threads, t);
            launch();
        }
    }
}

fn dataset() -> &'static (tempfile::TempDir, Dataset) {
    static DS: OnceLock<(tempfile::TempDir, Dataset)> = OnceLock::new();
    DS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let opts = GenerateOptions {
            events: 5,
            pileup: 30.0,
            seed: 11,
            threads: Some(1),
            output: dir.path().into(),
            corrupt_fraction: 0.1,
        };
        generate(&opts).unwrap();
        let ds = Dataset::open(dir.path()).unwrap();
        (dir, ds)
    })
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
    type Flag = unsafe extern "C" fn(
        *const u16,
        *const u16,
        *const u16,
        u32,
        *const u32,
        u32,
        *mut u32,
        *mut u32,
    );
    let flag: libloading::Symbol<Flag> = unsafe { lib.get(b"mr_flag") }.unwrap();
    grid(lib, blocks, bs, || unsafe {
        flag(
            module.as_ptr(),
            xx.as_ptr(),
            yy.as_ptr(),
            n as u32,
            ev_off.as_ptr(),
            n_ev as u32,
            r.start.as_mut_ptr(),
            &mut r.status,
        )
    });
    (r.pos, r.total) = seg_scan(lib, false, &r.start, ev_off);
    type Fill = unsafe extern "C" fn(
        *const u16,
        u32,
        *const u32,
        u32,
        *const u32,
        *const u32,
        u32,
        *mut u32,
        *mut u32,
        *mut u32,
        *mut u16,
        *mut u32,
        *mut u32,
        *mut u64,
    );
    let fill: libloading::Symbol<Fill> = unsafe { lib.get(b"mr_fill") }.unwrap();
    grid(lib, blocks, bs, || unsafe {
        fill(
            module.as_ptr(),
            n as u32,
            ev_off.as_ptr(),
            n_ev as u32,
            r.start.as_ptr(),
            r.pos.as_ptr(),
            max_pix,
            r.first.as_mut_ptr(),
            r.end.as_mut_ptr(),
            r.base.as_mut_ptr(),
            r.module.as_mut_ptr(),
            r.worst.as_mut_ptr(),
            r.over.as_mut_ptr(),
            r.cut.as_mut_ptr(),
        )
    });
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
    let n_ev = seg_off.len() - 1;
    let tiles = seg_off
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(0)
        .div_ceil(EMU_TILE)
        .max(1);
    let n_tiles = n_ev as u32 * tiles;
    let (mut sums, mut first, mut total) = (
        vec![7u32; n_tiles as usize],
        vec![7u32; value.len()],
        vec![7u32; n_ev],
    );
    type Sum = unsafe extern "C" fn(*const u32, *const u32, u32, u32, *mut u32);
    type Scan =
        unsafe extern "C" fn(*const u32, *const u32, u32, u32, *const u32, *mut u32, *mut u32);
    let sum: libloading::Symbol<Sum> = unsafe { lib.get(b"sg_tile_sum") }.unwrap();
    let scan: libloading::Symbol<Scan> = unsafe { lib.get(b"sg_tile_scan") }.unwrap();
    let a = [
        value.as_ptr() as usize,
        seg_off.as_ptr() as usize,
        sums.as_mut_ptr() as usize,
        first.as_mut_ptr() as usize,
        total.as_mut_ptr() as usize,
    ];
    let run_sum = || unsafe { sum(a[0] as _, a[1] as _, tiles, EMU_TILE, a[2] as _) };
    let run_scan = || unsafe {
        scan(
            a[0] as _, a[1] as _, tiles, EMU_TILE, a[2] as _, a[3] as _, a[4] as _,
        )
    };
    if threaded {
        grid_threaded(lib, n_tiles, run_sum);
        grid_threaded(lib, n_tiles, run_scan);
    } else {
        grid(lib, n_tiles, 1, run_sum);
        grid(lib, n_tiles, 1, run_scan);
    }
    (first, total)
}

/// `run_check` over table rows (batch first digi, module): the status.
fn run_check(
    lib: &libloading::Library,
    module: &[u16],
    row_first: &[u32],
    row_module: &[u16],
) -> u32 {
    let mut status = 0u32;
    type F = unsafe extern "C" fn(*const u16, u32, *const u32, *const u16, *mut u32);
    let f: libloading::Symbol<F> = unsafe { lib.get(b"run_check") }.unwrap();
    let bs = kernels::ELEMENT_BLOCK;
    grid(lib, (row_first.len() as u32).div_ceil(bs), bs, || unsafe {
        f(
            module.as_ptr(),
            row_first.len() as u32,
            row_first.as_ptr(),
            row_module.as_ptr(),
            &mut status,
        )
    });
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
    type F = unsafe extern "C" fn(*const u16, u32, *const u32, *const u16, *const u32, *mut u32);
    let f: libloading::Symbol<F> = unsafe { lib.get(b"run_ends") }.unwrap();
    let bs = kernels::ELEMENT_BLOCK;
    grid(lib, (first.len() as u32).div_ceil(bs), bs, || unsafe {
        f(
            module.as_ptr(),
            first.len() as u32,
            first.as_ptr(),
            run_module.as_ptr(),
            limit.as_ptr(),
            end.as_mut_ptr(),
        )
    });
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
    type F = unsafe extern "C" fn(
        *const u16,
        u32,
        u32,
        *const u32,
        *const u16,
        *const u32,
        *const u32,
        *mut u32,
    );
    let f: libloading::Symbol<F> = unsafe { lib.get(b"slot_ends") }.unwrap();
    let bs = kernels::ELEMENT_BLOCK;
    let per = local::MAX_NUM_MODULES as u32;
    grid(lib, (n as u32).div_ceil(bs), bs, || unsafe {
        f(
            module.as_ptr(),
            n as u32,
            per,
            first.as_ptr(),
            slot_module.as_ptr(),
            nclus.as_ptr(),
            ev_off.as_ptr(),
            end.as_mut_ptr(),
        )
    });
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
    {
        type F = unsafe extern "C" fn(
            *const u32,
            u32,
            *const u32,
            *const u32,
            u32,
            *const u32,
            *const u32,
            *const u32,
            *const u32,
            *const u32,
            *const u8,
            *const u8,
            u32,
            u32,
            *mut u16,
            *mut u16,
            *mut u16,
            *mut u16,
            *mut u32,
            *mut u32,
            *mut u32,
            *mut u32,
            *mut u8,
            *mut u32,
            *mut u32,
        );
        let f: libloading::Symbol<F> = unsafe { lib.get(b"raw_to_digis") }.unwrap();
        let bs = kernels::ELEMENT_BLOCK;
        grid(lib, (n as u32).div_ceil(bs), bs, || unsafe {
            f(
                framed.words.as_ptr(),
                n as u32,
                framed.seg_start.as_ptr(),
                framed.seg_fed.as_ptr(),
                framed.seg_fed.len() as u32,
                cab.link.as_ptr(),
                cab.roc.as_ptr(),
                cab.raw_id.as_ptr(),
                cab.roc_in_det.as_ptr(),
                cab.module_id.as_ptr(),
                cab.bad_rocs.as_ptr(),
                cab.mod_to_unp.as_ptr(),
                cab.size,
                1,
                xx.as_mut_ptr(),
                yy.as_mut_ptr(),
                adc.as_mut_ptr(),
                module.as_mut_ptr(),
                raw_id.as_mut_ptr(),
                pdigi.as_mut_ptr(),
                &mut ecount,
                eidx.as_mut_ptr(),
                etype.as_mut_ptr(),
                eraw.as_mut_ptr(),
                &mut status,
            )
        });
    }
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
    {
        type F = unsafe extern "C" fn(
            *const u16,
            *const u16,
            *const u16,
            *const u16,
            u32,
            *const u32,
            *const u32,
            *const i32,
            u32,
            *const u8,
            u64,
            f32,
            f32,
            f32,
            f32,
            u32,
            u32,
            u32,
            u32,
            u32,
            f32,
            f32,
            f32,
            f32,
            i32,
            *mut u16,
            *mut u16,
            *mut u32,
        );
        let f: libloading::Symbol<F> = unsafe { lib.get(b"calibrate") }.unwrap();
        let first: Vec<u32> = g.range_and_cols.iter().map(|r| r.0).collect();
        let last: Vec<u32> = g.range_and_cols.iter().map(|r| r.1).collect();
        let cols: Vec<i32> = g.range_and_cols.iter().map(|r| r.2).collect();
        let c = local::CalibConfig::default();
        let bs = kernels::ELEMENT_BLOCK;
        grid(lib, (n as u32).div_ceil(bs), bs, || unsafe {
            f(
                module.as_ptr(),
                xx.as_ptr(),
                yy.as_ptr(),
                adc.as_ptr(),
                n as u32,
                first.as_ptr(),
                last.as_ptr(),
                cols.as_ptr(),
                first.len() as u32,
                g.data.as_ptr(),
                g.data.len() as u64,
                g.min_ped,
                g.min_gain,
                g.ped_precision,
                g.gain_precision,
                g.rows_averaged,
                g.dead_flag,
                g.noisy_flag,
                c.is_run2 as u32,
                c.l1_modules as u32,
                c.vcal_to_electron_gain_l1,
                c.vcal_to_electron_offset_l1,
                c.vcal_to_electron_gain,
                c.vcal_to_electron_offset,
                c.min_electrons,
                cm.as_mut_ptr(),
                ca.as_mut_ptr(),
                &mut cst,
            )
        });
    }
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
    {
        type Init = unsafe extern "C" fn(*mut i32, u32, *const u32, u32);
        let init: libloading::Symbol<Init> = unsafe { lib.get(b"clus_init") }.unwrap();
        let bs = kernels::ELEMENT_BLOCK;
        grid(lib, (n as u32).div_ceil(bs), bs, || unsafe {
            init(
                clus.as_mut_ptr(),
                n as u32,
                ev_off.as_ptr(),
                events.len() as u32,
            )
        });
        type F = unsafe extern "C" fn(
            *const u16,
            *const u16,
            *const u16,
            *const u32,
            *const u32,
            *const u32,
            *mut i32,
            *mut u32,
            *mut u32,
        );
        let f: libloading::Symbol<F> = unsafe { lib.get(b"clusterize") }.unwrap();
        grid(lib, rf.len() as u32, 1, || unsafe {
            f(
                cm.as_ptr(),
                xx.as_ptr(),
                yy.as_ptr(),
                rf.as_ptr(),
                re.as_ptr(),
                rb.as_ptr(),
                clus.as_mut_ptr(),
                bins.as_mut_ptr(),
                found.as_mut_ptr(),
            )
        });
    }
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
        type F = unsafe extern "C" fn(
            *const u16,
            *const u16,
            *const u16,
            *const u32,
            *const u32,
            *const u32,
            *mut i32,
            *mut u32,
            *mut u32,
        );
        let f: libloading::Symbol<F> = unsafe { tl.get(b"clusterize") }.unwrap();
        let p = [
            cm.as_ptr() as usize,
            xx.as_ptr() as usize,
            yy.as_ptr() as usize,
            rf.as_ptr() as usize,
            re.as_ptr() as usize,
            rb.as_ptr() as usize,
            clus_t.as_mut_ptr() as usize,
            bins_t.as_mut_ptr() as usize,
            found_t.as_mut_ptr() as usize,
        ];
        grid_threaded(tl, rf.len() as u32, || unsafe {
            f(
                p[0] as _, p[1] as _, p[2] as _, p[3] as _, p[4] as _, p[5] as _, p[6] as _,
                p[7] as _, p[8] as _,
            )
        });
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
    let (mut qm, mut qc) = (cm.clone(), clus.clone());
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
    let mut ncl = vec![0u32; rf.len()];
    {
        type F = unsafe extern "C" fn(
            *mut u16,
            *mut i32,
            *const u16,
            *const u32,
            *const u32,
            *const u32,
            *const u16,
            u32,
            u32,
            i32,
            i32,
            *mut u32,
        );
        let f: libloading::Symbol<F> = unsafe { lib.get(b"charge_cut") }.unwrap();
        let c = local::ChargeCutConfig::default();
        grid(lib, rf.len() as u32, 1, || unsafe {
            f(
                qm.as_mut_ptr(),
                qc.as_mut_ptr(),
                ca.as_ptr(),
                rf.as_ptr(),
                re.as_ptr(),
                rn.as_ptr(),
                rm.as_ptr(),
                c.max_clusters_per_module,
                c.l1_modules as u32,
                c.min_charge_l1,
                c.min_charge,
                ncl.as_mut_ptr(),
            )
        });
    }
    if let Some(tl) = threaded() {
        let (mut qm_t, mut qc_t, mut ncl_t) = (cm.clone(), clus.clone(), vec![0u32; rf.len()]);
        type F = unsafe extern "C" fn(
            *mut u16,
            *mut i32,
            *const u16,
            *const u32,
            *const u32,
            *const u32,
            *const u16,
            u32,
            u32,
            i32,
            i32,
            *mut u32,
        );
        let f: libloading::Symbol<F> = unsafe { tl.get(b"charge_cut") }.unwrap();
        let c = local::ChargeCutConfig::default();
        let p = [
            qm_t.as_mut_ptr() as usize,
            qc_t.as_mut_ptr() as usize,
            ca.as_ptr() as usize,
            rf.as_ptr() as usize,
            re.as_ptr() as usize,
            rn.as_ptr() as usize,
            rm.as_ptr() as usize,
            ncl_t.as_mut_ptr() as usize,
        ];
        grid_threaded(tl, rf.len() as u32, || unsafe {
            f(
                p[0] as _,
                p[1] as _,
                p[2] as _,
                p[3] as _,
                p[4] as _,
                p[5] as _,
                p[6] as _,
                c.max_clusters_per_module,
                c.l1_modules as u32,
                c.min_charge_l1,
                c.min_charge,
                p[7] as _,
            )
        });
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
        let (mut qm_s, mut qc_s, mut ncl_s) = (cm.clone(), clus.clone(), vec![7u32; n_slots]);
        type F = unsafe extern "C" fn(
            *mut u16,
            *mut i32,
            *const u16,
            *const u32,
            *const u32,
            *const u32,
            *const u16,
            u32,
            u32,
            i32,
            i32,
            *mut u32,
        );
        let f: libloading::Symbol<F> = unsafe { lib.get(b"charge_cut") }.unwrap();
        let c = local::ChargeCutConfig::default();
        grid(lib, n_slots as u32, 1, || unsafe {
            f(
                qm_s.as_mut_ptr(),
                qc_s.as_mut_ptr(),
                ca.as_ptr(),
                runs.first.as_ptr(),
                sre.as_ptr(),
                found.as_ptr(),
                runs.module.as_ptr(),
                c.max_clusters_per_module,
                c.l1_modules as u32,
                c.min_charge_l1,
                c.min_charge,
                ncl_s.as_mut_ptr(),
            )
        });
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
    let mut f = vec![vec![0f32; nh]; 8];
    let (mut iphi, mut chg, mut sx, mut sy, mut di, mut hst) = (
        vec![0i16; nh],
        vec![0i32; nh],
        vec![0i16; nh],
        vec![0i16; nh],
        vec![0u16; nh],
        0u32,
    );
    {
        type F = unsafe extern "C" fn(
            *const u16,
            *const i32,
            *const u16,
            *const u16,
            *const u16,
            *const u32,
            *const u32,
            *const u32,
            *const u16,
            *const u32,
            *const f32,
            u32,
            u32,
            *const f32,
            f32,
            f32,
            f32,
            f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut i16,
            *mut i32,
            *mut i16,
            *mut i16,
            *mut u16,
            *mut u32,
        );
        let k: libloading::Symbol<F> = unsafe { lib.get(b"rechits") }.unwrap();
        let com = &cond.cpe.common;
        let p: Vec<*mut f32> = f.iter_mut().map(|v| v.as_mut_ptr()).collect();
        grid(lib, rf.len() as u32, 1, || unsafe {
            k(
                qm.as_ptr(),
                qc.as_ptr(),
                xx.as_ptr(),
                yy.as_ptr(),
                ca.as_ptr(),
                rf.as_ptr(),
                re.as_ptr(),
                rn.as_ptr(),
                rme.as_ptr(),
                rh.as_ptr(),
                rbs.as_ptr(),
                0,
                cap,
                det.as_ptr(),
                com.thickness_b,
                com.thickness_e,
                com.pitch_x,
                com.pitch_y,
                p[0],
                p[1],
                p[2],
                p[3],
                p[4],
                p[5],
                p[6],
                p[7],
                iphi.as_mut_ptr(),
                chg.as_mut_ptr(),
                sx.as_mut_ptr(),
                sy.as_mut_ptr(),
                di.as_mut_ptr(),
                &mut hst,
            )
        });
    }
    assert_eq!(hst, 0);
    if let Some(tl) = threaded() {
        let mut ft = vec![vec![0f32; nh]; 8];
        let (mut iphi_t, mut chg_t, mut sx_t, mut sy_t, mut di_t, mut hst_t) = (
            vec![0i16; nh],
            vec![0i32; nh],
            vec![0i16; nh],
            vec![0i16; nh],
            vec![0u16; nh],
            0u32,
        );
        type F = unsafe extern "C" fn(
            *const u16,
            *const i32,
            *const u16,
            *const u16,
            *const u16,
            *const u32,
            *const u32,
            *const u32,
            *const u16,
            *const u32,
            *const f32,
            u32,
            u32,
            *const f32,
            f32,
            f32,
            f32,
            f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut i16,
            *mut i32,
            *mut i16,
            *mut i16,
            *mut u16,
            *mut u32,
        );
        let k: libloading::Symbol<F> = unsafe { tl.get(b"rechits") }.unwrap();
        let com = &cond.cpe.common;
        let fp: Vec<usize> = ft.iter_mut().map(|v| v.as_mut_ptr() as usize).collect();
        let p = [
            qm.as_ptr() as usize,
            qc.as_ptr() as usize,
            xx.as_ptr() as usize,
            yy.as_ptr() as usize,
            ca.as_ptr() as usize,
            rf.as_ptr() as usize,
            re.as_ptr() as usize,
            rn.as_ptr() as usize,
            rme.as_ptr() as usize,
            rh.as_ptr() as usize,
            rbs.as_ptr() as usize,
            det.as_ptr() as usize,
            iphi_t.as_mut_ptr() as usize,
            chg_t.as_mut_ptr() as usize,
            sx_t.as_mut_ptr() as usize,
            sy_t.as_mut_ptr() as usize,
            di_t.as_mut_ptr() as usize,
            &mut hst_t as *mut u32 as usize,
        ];
        grid_threaded(tl, rf.len() as u32, || unsafe {
            k(
                p[0] as _,
                p[1] as _,
                p[2] as _,
                p[3] as _,
                p[4] as _,
                p[5] as _,
                p[6] as _,
                p[7] as _,
                p[8] as _,
                p[9] as _,
                p[10] as _,
                0,
                cap,
                p[11] as _,
                com.thickness_b,
                com.thickness_e,
                com.pitch_x,
                com.pitch_y,
                fp[0] as _,
                fp[1] as _,
                fp[2] as _,
                fp[3] as _,
                fp[4] as _,
                fp[5] as _,
                fp[6] as _,
                fp[7] as _,
                p[12] as _,
                p[13] as _,
                p[14] as _,
                p[15] as _,
                p[16] as _,
                p[17] as _,
            )
        });
        assert_eq!(hst_t, 0);
        for c in 0..8 {
            assert!(
                ft[c]
                    .iter()
                    .zip(&f[c])
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "threaded rechits: float column {c}"
            );
        }
        assert_eq!(
            (iphi_t, chg_t, sx_t, sy_t, di_t),
            (
                iphi.clone(),
                chg.clone(),
                sx.clone(),
                sy.clone(),
                di.clone()
            ),
            "threaded rechits"
        );
    }
    // The same over the run slots (`slot_ends`, one block per slot, the beam spot per event):
    // only each slot's clusters and first hit came from the host.
    {
        type Hits = (
            Vec<Vec<u32>>,
            Vec<i16>,
            Vec<i32>,
            Vec<i16>,
            Vec<i16>,
            Vec<u16>,
        );
        type F = unsafe extern "C" fn(
            *const u16,
            *const i32,
            *const u16,
            *const u16,
            *const u16,
            *const u32,
            *const u32,
            *const u32,
            *const u16,
            *const u32,
            *const f32,
            u32,
            u32,
            *const f32,
            f32,
            f32,
            f32,
            f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut f32,
            *mut i16,
            *mut i32,
            *mut i16,
            *mut i16,
            *mut u16,
            *mut u32,
        );
        let k: libloading::Symbol<F> = unsafe { lib.get(b"rechits") }.unwrap();
        let com = &cond.cpe.common;
        // Blocks of runs (first, end, clusters, module, first hit) with the beam spot per run
        // (`stride` 0) or per event of `stride` slots: the float columns as bits.
        let rechits_cap = |first: &[u32],
                           end: &[u32],
                           nclus: &[u32],
                           module: &[u16],
                           hit: &[u32],
                           beam: &[f32],
                           stride: u32,
                           cap: u32|
         -> (Hits, u32) {
            let mut fs = vec![vec![0f32; nh]; 8];
            let (mut iphi, mut chg, mut sx, mut sy, mut di, mut st) = (
                vec![0i16; nh],
                vec![0i32; nh],
                vec![0i16; nh],
                vec![0i16; nh],
                vec![0u16; nh],
                0u32,
            );
            let p: Vec<*mut f32> = fs.iter_mut().map(|v| v.as_mut_ptr()).collect();
            grid(lib, first.len() as u32, 1, || unsafe {
                k(
                    qm.as_ptr(),
                    qc.as_ptr(),
                    xx.as_ptr(),
                    yy.as_ptr(),
                    ca.as_ptr(),
                    first.as_ptr(),
                    end.as_ptr(),
                    nclus.as_ptr(),
                    module.as_ptr(),
                    hit.as_ptr(),
                    beam.as_ptr(),
                    stride,
                    cap,
                    det.as_ptr(),
                    com.thickness_b,
                    com.thickness_e,
                    com.pitch_x,
                    com.pitch_y,
                    p[0],
                    p[1],
                    p[2],
                    p[3],
                    p[4],
                    p[5],
                    p[6],
                    p[7],
                    iphi.as_mut_ptr(),
                    chg.as_mut_ptr(),
                    sx.as_mut_ptr(),
                    sy.as_mut_ptr(),
                    di.as_mut_ptr(),
                    &mut st,
                )
            });
            (
                (
                    fs.iter()
                        .map(|c| c.iter().map(|x| x.to_bits()).collect())
                        .collect(),
                    iphi,
                    chg,
                    sx,
                    sy,
                    di,
                ),
                st,
            )
        };
        let rechits = |first: &[u32],
                       end: &[u32],
                       nclus: &[u32],
                       module: &[u16],
                       hit: &[u32],
                       beam: &[f32],
                       stride: u32|
         -> Hits {
            let (h, st) = rechits_cap(first, end, nclus, module, hit, beam, stride, cap);
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
        let host = (
            f.iter()
                .map(|c| c.iter().map(|x| x.to_bits()).collect())
                .collect(),
            iphi.clone(),
            chg.clone(),
            sx.clone(),
            sy.clone(),
            di.clone(),
        );
        assert!(per_slot(&beam_ev) == host, "rechits over the slots");
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
        assert!(by_run != host, "the beam spot moves the hits");
        assert!(
            per_slot(&moved.iter().flatten().copied().collect::<Vec<f32>>()) == by_run,
            "rechits over the slots, a beam spot per event"
        );
        // Shared memory sized below the largest run: refused (the status), never wrong hits.
        let (_, st) = rechits_cap(
            &hplan.first,
            &re,
            &hplan.nclus,
            &hplan.module,
            &hplan.hit,
            &hplan.beam,
            0,
            cap - 1,
        );
        assert_eq!(
            st,
            kernels::STATUS_BAD_INPUT,
            "a run above the launch's capacity"
        );
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
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
