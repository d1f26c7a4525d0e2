//! The CA doublet kernels run on the host (their CUDA C compiled with the system C++ behind
//! a small shim: `__fmul_rn` & co. are plain float operations compiled with
//! `-ffp-contract=off`, atomics are real atomics, `__syncthreads` a barrier) and must give
//! the CPU step's cells, listed flags and overflow flags bit for bit, on generated events
//! batched as the GPU step batches them, with the host tables of the GPU step
//! (`quiver_gpu::steps`). Each kernel runs twice: every thread of a block one after the
//! other on one OS thread (one thread per block for the block scan), and with real threads
//! in each block, whose interleaving (the atomic histogram fill, the atomic counts) must not
//! change anything. The connect kernels of `ca_ntuplets` (`kernels_ca::CA_NTUPLETS`, with
//! the host's list capacities `steps::capped_neighbors`) likewise equal the CPU's
//! `connect`: neighbour lists, overflows, used flags. The Broken Line fit kernel
//! (`kernels_fit::TRACK_FIT`, compiled against the C library's `log`, `atan2`, `sin` and
//! `cos`, as the CPU's fit is) gives the CPU step's tracks bit for bit, with the GPU step's
//! own host side (`steps::fit_batch`, `steps::fitted_tracks`). The classification and
//! cleaning kernel (`kernels_quality::QUALITY`) gives the CPU's `stage_quality`. The vertex
//! finder kernel
//! (`kernels_vertices::VERTICES`) gives the CPU's vertices bit for bit, on the chain's tracks
//! and on synthetic events made to split. Every kernel is called with the GPU step's own
//! argument list (`quiver_gpu::args`, through `emu_threads::HostLaunch`), checked against
//! its signature. Skips when no C++ compiler is found.

use crate::emu_threads::{self, HostLaunch};
use quiver_gpu::args;

use std::sync::OnceLock;

use quiver_datasets::conditions::CpeParams;
use quiver_datasets::Dataset;
use quiver_gpu::kernels_ca::{
    doublet_flags, pair_tables, BIN_STARTS_PER_EVENT, RANK_LANES, STATS_RUN,
};
use quiver_gpu::steps::{
    capped_neighbors, cell_offsets, doublet_products, ntuplet_event, ntuplet_event_listed, prepare,
    DoubletProducts,
};
use quiver_reco::local;
use quiver_reco::steps::{doublet_overflows, HitDets};
use quiver_reco::tracks::doublets::{N_LAYERS, PHI_BINS};
use quiver_reco::tracks::ntuplets::{connect, CaState, Tuples};
use quiver_reco::tracks::{
    doublets_from_columns, layer_start_from_det_index, stage_doublet_cells, stage_ntuplets,
    CaConfig, HitsView, Quality,
};

fn emulator() -> Option<&'static libloading::Library> {
    emu_threads::kernels()
}

/// How the threads of a block run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// One after the other on this thread.
    Sequential,
    /// Each on its own OS thread.
    Threaded,
}

/// Threads per block of the per-element kernels in the emulation (small, so that the
/// threaded mode stays cheap while blocks still interleave).
const EMU_BLOCK: u32 = 8;

/// `launch` (its list checked) with one thread per element, `EMU_BLOCK` per block.
fn run_elements(lib: &libloading::Library, mode: Mode, n: usize, launch: HostLaunch) {
    let blocks = (n as u32).div_ceil(EMU_BLOCK).max(1);
    launch.run(lib, blocks, EMU_BLOCK, mode == Mode::Threaded);
}

/// A batch of hits, event after event.
#[derive(Default)]
struct Batch {
    hits_per_event: Vec<usize>,
    x: Vec<f32>,
    y: Vec<f32>,
    z: Vec<f32>,
    r: Vec<f32>,
    iphi: Vec<i16>,
    size_y: Vec<i16>,
    det: Vec<u16>,
    events: Vec<local::RecHits>,
}

/// What the device produces for a batch.
#[derive(Debug, PartialEq)]
struct Cells {
    cell_off: Vec<u32>,
    overflow: Vec<bool>,
    inner: Vec<u32>,
    outer: Vec<u32>,
    pair: Vec<u8>,
    listed: Vec<u8>,
}

/// The kernel sequence of the GPU step, on the host.
fn run_device(
    lib: &libloading::Library,
    mode: Mode,
    b: &Batch,
    cfg: &CaConfig,
    cpe: &CpeParams,
) -> (Cells, DoubletProducts) {
    // The GPU step's own host preparation (checks and tables).
    let det: Vec<u16> = b
        .events
        .iter()
        .flat_map(|h| h.det_index.iter().copied())
        .collect();
    let hit_off: Vec<i32> = std::iter::once(0)
        .chain(b.hits_per_event.iter().scan(0i32, |a, &n| {
            *a += n as i32;
            Some(*a)
        }))
        .collect();
    let db = prepare(HitDets::new(&det, &hit_off).unwrap(), cpe.det.len(), cfg).unwrap();
    assert_eq!(
        db.hit_off
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .collect::<Vec<_>>(),
        b.hits_per_event
    );
    let (n_ev, n_hits, n_items) = (db.n_events(), db.n_hits(), db.n_items());
    let d = &cfg.doublets;
    let cuts = d.cuts();
    let (pair_i, pair_f) = pair_tables(&cuts);

    let (n_ev32, n_hits32) = (n_ev as u32, n_hits as u32);
    let mut bin_count = vec![0u32; n_ev * N_LAYERS * PHI_BINS];
    let (mut bin_start, mut cursor) = (
        vec![0u32; n_ev * BIN_STARTS_PER_EVENT],
        vec![0u32; n_ev * BIN_STARTS_PER_EVENT],
    );
    let mut packed_idx = vec![u32::MAX; n_hits.max(1)];
    let (mut pz, mut pr) = (vec![0f32; n_hits.max(1)], vec![0f32; n_hits.max(1)]);
    let (mut pphi, mut psy) = (vec![0i16; n_hits.max(1)], vec![0i16; n_hits.max(1)]);
    let count = args::CaBinCount::<HostLaunch> {
        det: &b.det,
        iphi: &b.iphi,
        n_hits: &n_hits32,
        hit_off: &db.hit_off,
        layer_start: &db.layer_start,
        n_events: &n_ev32,
        bin_count: &mut bin_count,
    };
    run_elements(lib, mode, n_hits, HostLaunch::new(count));
    let scan = args::CaBinScan::<HostLaunch> {
        bin_count: &bin_count,
        hit_off: &db.hit_off,
        n_events: &n_ev32,
        bin_start: &mut bin_start,
        cursor: &mut cursor,
    };
    run_elements(lib, mode, n_ev, HostLaunch::new(scan));
    let fill = args::CaBinFill::<HostLaunch> {
        det: &b.det,
        iphi: &b.iphi,
        n_hits: &n_hits32,
        hit_off: &db.hit_off,
        layer_start: &db.layer_start,
        n_events: &n_ev32,
        cursor: &mut cursor,
        packed_idx: &mut packed_idx,
    };
    run_elements(lib, mode, n_hits, HostLaunch::new(fill));
    let sort = args::CaBinSort::<HostLaunch> {
        bin_start: &bin_start,
        n_events: &n_ev32,
        hit_off: &db.hit_off,
        z: &b.z,
        r: &b.r,
        iphi: &b.iphi,
        size_y: &b.size_y,
        packed_idx: &mut packed_idx,
        packed_z: &mut pz,
        packed_r: &mut pr,
        packed_iphi: &mut pphi,
        packed_sy: &mut psy,
    };
    run_elements(lib, mode, n_ev * N_LAYERS * PHI_BINS, HostLaunch::new(sort));

    let mut item_count = vec![0u32; n_items.max(1)];
    let mut item_first = vec![0u32; n_items.max(1)];
    let mut event_total = vec![0u32; n_ev];
    let flags = doublet_flags(d);
    // One pass of the candidate scan: count (`write` 0, into `item_count`), or write.
    let doublets =
        |write: u32,
         (item_count, item_first): (&mut [u32], &[u32]),
         cell_off: &[u32],
         (out_inner, out_outer, out_pair): (&mut [u32], &mut [u32], &mut [u8])| {
            let scan = args::CaDoublets::<HostLaunch> {
                write: &write,
                n_items: &(n_items as u32),
                item_start: &db.item_start,
                n_pairs: &db.n_pairs,
                n_events: &n_ev32,
                hit_off: &db.hit_off,
                layer_start: &db.layer_start,
                z: &b.z,
                r: &b.r,
                iphi: &b.iphi,
                size_y: &b.size_y,
                det: &b.det,
                bin_start: &bin_start,
                packed_idx: &packed_idx,
                packed_z: &pz,
                packed_r: &pr,
                packed_iphi: &pphi,
                packed_sy: &psy,
                pair_i: &pair_i,
                pair_f: &pair_f,
                flags: &flags,
                z0_cut: &d.z0_cut,
                dzdr_fact: &cuts.dzdr_fact,
                min_radius2_t4: &cuts.min_radius2_t4,
                i2p: &cuts.i2p,
                max_dy_pred: &d.max_dy_pred,
                max_doublets: &d.max_number_of_doublets,
                item_count,
                item_first,
                cell_off,
                out_inner,
                out_outer,
                out_pair,
            };
            run_elements(lib, mode, n_items, HostLaunch::new(scan));
        };
    let mut dummy = (vec![0u32; 1], vec![0u32; 1], vec![0u8; 1]);
    let dummy_out = (&mut dummy.0[..], &mut dummy.1[..], &mut dummy.2[..]);
    doublets(0, (&mut item_count, &item_first), &[0, 0], dummy_out);
    // Sequential: one thread per block (the barriers need every thread of a block).
    let threads = if mode == Mode::Sequential {
        1
    } else {
        EMU_BLOCK
    };
    HostLaunch::new(args::CaItemScan::<HostLaunch> {
        item_count: &item_count,
        item_start: &db.item_start,
        n_pairs: &db.n_pairs,
        item_first: &mut item_first,
        event_total: &mut event_total,
    })
    .run(lib, n_ev32, threads, mode == Mode::Threaded);
    let (cell_off, overflow) = cell_offsets(&event_total, d.max_number_of_doublets).unwrap();
    let n_cells = *cell_off.last().unwrap() as usize;
    let (mut inner, mut outer, mut pair) = (
        vec![u32::MAX; n_cells.max(1)],
        vec![u32::MAX; n_cells.max(1)],
        vec![u8::MAX; n_cells.max(1)],
    );
    doublets(
        1,
        (&mut item_count, &item_first),
        &cell_off,
        (&mut inner, &mut outer, &mut pair),
    );

    let mut outer_count = vec![0u32; n_hits.max(1)];
    let mut listed = vec![7u8; n_cells.max(1)];
    let (m, n_cells32) = (d.max_cells_per_hit, n_cells as u32);
    let count = args::CaListedCount::<HostLaunch> {
        outer: &outer,
        n_cells: &n_cells32,
        cell_off: &cell_off,
        n_events: &n_ev32,
        hit_off: &db.hit_off,
        outer_count: &mut outer_count,
    };
    run_elements(lib, mode, n_cells, HostLaunch::new(count));
    let list = args::CaListed::<HostLaunch> {
        outer: &outer,
        n_cells: &n_cells32,
        cell_off: &cell_off,
        n_events: &n_ev32,
        hit_off: &db.hit_off,
        outer_count: &outer_count,
        max_cells_per_hit: &m,
        listed: &mut listed,
    };
    run_elements(lib, mode, n_cells, HostLaunch::new(list));
    let overfull = args::CaListedOverfull::<HostLaunch> {
        outer: &outer,
        cell_off: &cell_off,
        n_events: &n_ev32,
        hit_off: &db.hit_off,
        n_hits: &n_hits32,
        outer_count: &outer_count,
        max_cells_per_hit: &m,
        listed: &mut listed,
    };
    run_elements(lib, mode, n_hits, HostLaunch::new(overfull));
    // The overflow rows' counts, as the step counts them on the device.
    let (mut unlisted, mut worst) = (vec![0u32; n_ev], vec![0u32; n_ev]);
    let stats = args::CaOverflowStats::<HostLaunch> {
        outer_count: &outer_count,
        n_hits: &n_hits32,
        hit_off: &db.hit_off,
        listed: &listed,
        n_cells: &n_cells32,
        cell_off: &cell_off,
        n_events: &n_ev32,
        unlisted: &mut unlisted,
        worst: &mut worst,
    };
    let stat_threads = n_hits.max(n_cells).div_ceil(STATS_RUN as usize);
    run_elements(lib, mode, stat_threads, HostLaunch::new(stats));
    let trim = |n: usize| n_cells.min(n);
    let cells = Cells {
        inner: inner[..trim(inner.len())].to_vec(),
        outer: outer[..trim(outer.len())].to_vec(),
        pair: pair[..trim(pair.len())].to_vec(),
        listed: listed[..trim(listed.len())].to_vec(),
        cell_off,
        overflow,
    };
    // The GPU step's own assembly of the products from what the device wrote.
    let products = doublet_products(d, &event_total, &cells.cell_off, &unlisted, &worst).unwrap();
    (cells, products)
}

/// Each event's hits as the tracking reads them.
fn views<'a>(b: &'a Batch, cpe: &'a CpeParams) -> Vec<HitsView<'a>> {
    b.events
        .iter()
        .map(|h| HitsView {
            x_global: &h.x_global,
            y_global: &h.y_global,
            z_global: &h.z_global,
            r_global: &h.r_global,
            iphi: &h.iphi,
            size_x: &h.size_x,
            size_y: &h.size_y,
            det_index: &h.det_index,
            xerr_local: &h.xerr_local,
            yerr_local: &h.yerr_local,
            cpe,
            layer_start: layer_start_from_det_index(&h.det_index).unwrap(),
        })
        .collect()
}

/// The CPU step's products for the same batch.
fn run_cpu(b: &Batch, cfg: &CaConfig, cpe: &CpeParams) -> (Cells, DoubletProducts) {
    let mut c = Cells {
        cell_off: vec![0],
        overflow: vec![],
        inner: vec![],
        outer: vec![],
        pair: vec![],
        listed: vec![],
    };
    let (mut lengths, mut overflows, mut flags) = (vec![], vec![], Vec::<bool>::new());
    for view in views(b, cpe) {
        // What the CPU step does for each event.
        let (cols, bits, unlisted) = stage_doublet_cells(&view, cfg).unwrap();
        let listed: Vec<bool> = bits.iter().collect();
        assert_eq!(unlisted, listed.iter().filter(|&&l| !l).count() as u64);
        overflows.push(doublet_overflows(
            &cfg.doublets,
            &cols.outer,
            &listed,
            cols.cells_missed,
        ));
        lengths.push(cols.inner.len());
        flags.extend(&listed);
        c.inner.extend(&cols.inner);
        c.outer.extend(&cols.outer);
        c.pair.extend(&cols.pair);
        c.listed.extend(listed.iter().map(|&l| l as u8));
        c.overflow.push(cols.cells_overflow);
        c.cell_off.push(c.inner.len() as u32);
    }
    assert_eq!(flags.iter().map(|&f| f as u8).collect::<Vec<_>>(), c.listed);
    (c, DoubletProducts { lengths, overflows })
}

fn dataset() -> &'static (tempfile::TempDir, Dataset) {
    static DS: OnceLock<(tempfile::TempDir, Dataset)> = OnceLock::new();
    DS.get_or_init(|| crate::generated(3, 50.0, 23, 0.0))
}

/// The generated events' hits, with an empty event in the middle of the batch.
fn batch() -> Batch {
    let (_, ds) = dataset();
    let cond = ds.conditions();
    let c = local::LocalConditions {
        cabling: &cond.cabling,
        gains: &cond.gains,
        cpe: &cond.cpe,
        beam_spot: &cond.beam_spot,
    };
    let mut events: Vec<local::RecHits> = ds
        .raw_events(0..ds.n_events())
        .unwrap()
        .iter()
        .map(|feds| {
            local::reconstruct_event(feds, &c, &Default::default())
                .unwrap()
                .hits
        })
        .collect();
    let mut empty = events[0].clone();
    for v in [
        &mut empty.x_global,
        &mut empty.y_global,
        &mut empty.z_global,
        &mut empty.r_global,
        &mut empty.xerr_local,
        &mut empty.yerr_local,
    ] {
        v.clear();
    }
    empty.iphi.clear();
    empty.size_x.clear();
    empty.size_y.clear();
    empty.det_index.clear();
    events.insert(1, empty);
    batch_of(events)
}

/// A batch of these events, in order.
fn batch_of(events: Vec<local::RecHits>) -> Batch {
    let mut b = Batch::default();
    for h in &events {
        b.hits_per_event.push(h.z_global.len());
        b.x.extend(&h.x_global);
        b.y.extend(&h.y_global);
        b.z.extend(&h.z_global);
        b.r.extend(&h.r_global);
        b.iphi.extend(&h.iphi);
        b.size_y.extend(&h.size_y);
        b.det.extend(&h.det_index);
    }
    b.events = events;
    b
}

fn check(name: &str, cfg: &CaConfig) -> Cells {
    let Some(lib) = emulator() else {
        panic!("checked by the caller")
    };
    let (_, ds) = dataset();
    let b = batch();
    let cpe = &ds.conditions().cpe;
    let (cpu, cpu_products) = run_cpu(&b, cfg, cpe);
    for mode in [Mode::Sequential, Mode::Threaded] {
        let (dev, products) = run_device(lib, mode, &b, cfg, cpe);
        assert_eq!(
            products.lengths, cpu_products.lengths,
            "{name} ({mode:?}): product lengths"
        );
        assert_eq!(
            products.overflows, cpu_products.overflows,
            "{name} ({mode:?}): capacity_overflows rows"
        );
        assert_eq!(
            dev.cell_off, cpu.cell_off,
            "{name} ({mode:?}): cells per event"
        );
        assert_eq!(
            dev.overflow, cpu.overflow,
            "{name} ({mode:?}): overflow flags"
        );
        assert!(
            dev.inner == cpu.inner && dev.outer == cpu.outer && dev.pair == cpu.pair,
            "{name} ({mode:?}): cells differ"
        );
        assert_eq!(dev.listed, cpu.listed, "{name} ({mode:?}): listed flags");
    }
    // Batch size: the events one by one give the same cells as the whole batch.
    let mut one_by_one = Cells {
        cell_off: vec![0],
        overflow: vec![],
        inner: vec![],
        outer: vec![],
        pair: vec![],
        listed: vec![],
    };
    for ev in &b.events {
        let (d, _) = run_device(lib, Mode::Sequential, &batch_of(vec![ev.clone()]), cfg, cpe);
        let base = *one_by_one.cell_off.last().unwrap();
        one_by_one.cell_off.push(base + d.cell_off[1]);
        one_by_one.overflow.extend(d.overflow);
        one_by_one.inner.extend(d.inner);
        one_by_one.outer.extend(d.outer);
        one_by_one.pair.extend(d.pair);
        one_by_one.listed.extend(d.listed);
    }
    assert_eq!(
        one_by_one, cpu,
        "{name}: events one by one differ from the CPU"
    );
    println!(
        "{name}: {} hits, {} cells (per event {:?}), overflow {:?}, {} not listed",
        b.z.len(),
        cpu.inner.len(),
        cpu.cell_off
            .windows(2)
            .map(|w| w[1] - w[0])
            .collect::<Vec<_>>(),
        cpu.overflow,
        cpu.listed.iter().filter(|&&l| l == 0).count()
    );
    cpu
}

#[test]
fn doublet_kernels_on_the_host_equal_the_cpu_step() {
    if emulator().is_none() {
        return;
    }
    // Default parameters: the 19 pairs, every cut.
    let c = check("default", &CaConfig::default());
    assert!(
        c.inner.len() > 10_000,
        "a realistic number of cells at PU 50"
    );

    // Capacities: few cells per event (overflow, the later cells dropped) and few cells
    // per hit (the over-full hits' cells resolved in cell order).
    let mut cfg = CaConfig::default();
    cfg.doublets.max_number_of_doublets = 3000;
    cfg.doublets.max_cells_per_hit = 2;
    let c = check("capacities", &cfg);
    assert!(
        c.overflow.iter().filter(|&&o| o).count() >= 2 && c.listed.contains(&0),
        "overflow and unlisted cells exercised"
    );

    // Sized from the event (`capacities = "sized"`): every cell, every hit's cells listed;
    // the device's count pass sizes the cell buffers exactly.
    let c = check("sized", &CaConfig::default().with_sized_capacities());
    assert!(
        !c.overflow.contains(&true) && !c.listed.contains(&0),
        "nothing truncated or unlisted"
    );

    // 15 pairs, the other cluster-cut branches, no pT cut.
    let mut cfg = CaConfig::default();
    cfg.doublets.include_jumping_forward_doublets = false;
    cfg.doublets.ideal_conditions = false;
    cfg.doublets.do_pt_cut = false;
    check("15 pairs, real ladders, no pT cut", &cfg);

    // Quadruplets: 13 pairs; no cluster or z0 cut.
    let mut cfg = CaConfig::default();
    cfg.ntuplets.min_hits_per_ntuplet = 4;
    cfg.doublets.do_cluster_cut = false;
    cfg.doublets.do_z0_cut = false;
    check("13 pairs, no cluster or z0 cut", &cfg);
}

/// What the device connect gives for a batch: per event the neighbour lists after the CPU's
/// capacities (`None` when `max_active_doublets` binds), and the used flags of every cell;
/// and what the search reads: each cell's count and first place, the events' places, the
/// pushed lists, the per-event non-empty lists and dropped neighbours (`nt_list_stats`).
struct Connected {
    lists: Vec<Option<(quiver_reco::tracks::doublets::Csr, u32)>>,
    used: Vec<u8>,
    hit_off: Vec<u32>,
    ncount: Vec<u32>,
    first: Vec<u32>,
    push_off: Vec<u32>,
    pushed: Vec<u32>,
    non_empty: Vec<u32>,
    dropped: Vec<u32>,
}

/// The cells by one of their hits (`key`), ascending index, only those with `only` set
/// when given: the `cn_index_*` kernels. Returns each hit's first place and the index.
fn index_by(
    lib: &libloading::Library,
    mode: Mode,
    key: &[u32],
    only: Option<&[u8]>,
    cell_off: &[u32],
    hit_off: &[u32],
) -> (Vec<u32>, Vec<u32>) {
    let (n_ev, n_cells, n_hits) = (
        cell_off.len() - 1,
        key.len(),
        *hit_off.last().unwrap() as usize,
    );
    let (ne, nc, nh) = (n_ev as u32, n_cells as u32, n_hits as u32);
    let (filter, flags): (u32, &[u8]) = match only {
        Some(f) => (1, f),
        None => (0, &[0]),
    };
    let mut count = vec![0u32; n_hits.max(1)];
    let (mut start, mut cursor) = (vec![0u32; n_hits + 1], vec![0u32; n_hits.max(1)]);
    let mut index = vec![u32::MAX; n_cells.max(1)];
    let counts = args::CnIndexCount::<HostLaunch> {
        key,
        filter: &filter,
        only: flags,
        n_cells: &nc,
        cell_off,
        n_events: &ne,
        hit_off,
        count: &mut count,
    };
    run_elements(lib, mode, n_cells, HostLaunch::new(counts));
    // One block per event (the barriers need every thread of a block).
    let threads = if mode == Mode::Sequential {
        1
    } else {
        EMU_BLOCK
    };
    HostLaunch::new(args::CnIndexScan::<HostLaunch> {
        count: &count,
        hit_off,
        cell_off,
        n_events: &ne,
        start: &mut start,
        cursor: &mut cursor,
    })
    .run(lib, ne, threads, mode == Mode::Threaded);
    let fill = args::CnIndexFill::<HostLaunch> {
        key,
        filter: &filter,
        only: flags,
        n_cells: &nc,
        cell_off,
        n_events: &ne,
        hit_off,
        cursor: &mut cursor,
        index: &mut index,
    };
    run_elements(lib, mode, n_cells, HostLaunch::new(fill));
    // The fill's order is the atomics' (ascending in the sequential emulation): each hit's
    // entries reversed, so that the rank kernel has an order to restore.
    for w in start.windows(2) {
        index[w[0] as usize..w[1] as usize].reverse();
    }
    let mut sorted = vec![u32::MAX; n_cells.max(1)];
    let rank = args::CnIndexRank::<HostLaunch> {
        start: &start,
        n_hits: &nh,
        index: &index,
        sorted: &mut sorted,
    };
    run_elements(
        lib,
        mode,
        n_hits * RANK_LANES as usize,
        HostLaunch::new(rank),
    );
    (start, sorted)
}

/// Values per tile of the emulated segmented scan: small and odd, so that the events'
/// segments span many tiles and tiles end mid-block.
const EMU_TILE: u32 = 37;

/// The segmented scan as `steps::seg_scan` launches it (`sg_tile_sum`, then
/// `sg_tile_scan`), with tiles of `tile` values: per segment, the exclusive prefix sum of
/// `value`, and its total.
fn seg_scan_tiled(
    lib: &libloading::Library,
    mode: Mode,
    value: &[u32],
    seg_off: &[u32],
    tile: u32,
) -> (Vec<u32>, Vec<u32>) {
    let threads = if mode == Mode::Sequential {
        1
    } else {
        EMU_BLOCK
    };
    emu_threads::seg_scan(lib, (threads, mode == Mode::Threaded), value, seg_off, tile)
}

/// Per event, the exclusive prefix sum of `value` over its cells, and its total.
fn event_scan(
    lib: &libloading::Library,
    mode: Mode,
    value: &[u32],
    cell_off: &[u32],
) -> (Vec<u32>, Vec<u32>) {
    seg_scan_tiled(lib, mode, value, cell_off, EMU_TILE)
}

#[test]
fn segmented_scan_equals_prefix_sums_for_any_tiling() {
    let Some(lib) = emulator() else { return };
    for mode in [Mode::Sequential, Mode::Threaded] {
        // Segments: empty ones first, between and last; one a tile long; sums that wrap.
        let lengths = [0u32, 5, 0, 37, 38, 1, 200, 0];
        let seg_off: Vec<u32> = std::iter::once(0)
            .chain(lengths.iter().scan(0, |a, &l| {
                *a += l;
                Some(*a)
            }))
            .collect();
        let n = *seg_off.last().unwrap() as usize;
        let mut x = 12345u32;
        let value: Vec<u32> = (0..n)
            .map(|i| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                if i % 50 == 7 {
                    u32::MAX - (x >> 28)
                } else {
                    x >> 24
                }
            })
            .collect();
        let mut want_first = vec![0u32; n];
        let mut want_total = Vec::new();
        for w in seg_off.windows(2) {
            let mut acc = 0u32;
            for k in w[0] as usize..w[1] as usize {
                want_first[k] = acc;
                acc = acc.wrapping_add(value[k]);
            }
            want_total.push(acc);
        }
        for tile in [1u32, 2, 8, 37, 64, 4096] {
            let (first, total) = seg_scan_tiled(lib, mode, &value, &seg_off, tile);
            assert_eq!(
                &first[..n],
                &want_first[..],
                "{mode:?}, tile {tile}: firsts"
            );
            assert_eq!(total, want_total, "{mode:?}, tile {tile}: totals");
        }
    }
}

/// The device's tuple lists of the cells (`ct_count`, the segmented scan, `ct_fill`, `ct_sort`, then
/// `nt_list_stats` with `per_list`), as the GPU steps run them: the lists capped at
/// `per_list` as the CPU's CSR, per event (cell order), with the per-event non-empty lists
/// and entries past `per_list`, and the bad-cell flag.
struct DeviceLists {
    lists: Vec<quiver_reco::tracks::doublets::Csr>,
    non_empty: Vec<u32>,
    dropped: Vec<u32>,
    bad: bool,
    /// Counts, firsts, event bases, values (what `nt_early_dup` and `qx_quality` read).
    raw: (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>),
}

#[allow(clippy::too_many_arguments)]
fn cell_track_lists(
    lib: &libloading::Library,
    mode: Mode,
    tup_off: &[u32],
    limit: u32,
    cstart: &[u32],
    cend: &[u32],
    cells: &[u32],
    cell_off: &[u32],
    base: &[u32],
    n_entries: usize,
    per_list: u32,
) -> DeviceLists {
    let (n_ev, n_tuples, n_cells) = (
        cell_off.len() - 1,
        *tup_off.last().unwrap() as usize,
        *cell_off.last().unwrap() as usize,
    );
    let (ne, nt, nc) = (n_ev as u32, n_tuples as u32, n_cells as u32);
    let (mut counts, mut cursor, mut bad) = (
        vec![0u32; n_cells.max(1)],
        vec![0u32; n_cells.max(1)],
        vec![0u32; 1],
    );
    let mut v = vec![u32::MAX; n_entries.max(1)];
    let count = args::CtCount::<HostLaunch> {
        n_tuples: &nt,
        tup_off,
        n_events: &ne,
        limit: &limit,
        cstart,
        cend,
        cells,
        cell_off,
        count: &mut counts,
        bad: &mut bad,
    };
    run_elements(lib, mode, n_tuples, HostLaunch::new(count));
    let (first, _) = event_scan(lib, mode, &counts, cell_off);
    let fill = args::CtFill::<HostLaunch> {
        n_tuples: &nt,
        tup_off,
        n_events: &ne,
        limit: &limit,
        cstart,
        cend,
        cells,
        cell_off,
        first: &first,
        base,
        cursor: &mut cursor,
        vals: &mut v,
    };
    run_elements(lib, mode, n_tuples, HostLaunch::new(fill));
    let sort = args::CtSort::<HostLaunch> {
        n_cells: &nc,
        cell_off,
        n_events: &ne,
        count: &counts,
        first: &first,
        base,
        vals: &mut v,
    };
    run_elements(lib, mode, n_cells, HostLaunch::new(sort));
    let (mut non_empty, mut dropped) = (vec![0u32; n_ev.max(1)], vec![0u32; n_ev.max(1)]);
    let stats = args::NtListStats::<HostLaunch> {
        count: &counts,
        n_cells: &nc,
        cell_off,
        n_events: &ne,
        per_list: &per_list,
        non_empty: &mut non_empty,
        dropped: &mut dropped,
    };
    run_elements(
        lib,
        mode,
        n_cells.div_ceil(STATS_RUN as usize),
        HostLaunch::new(stats),
    );
    let lists = (0..n_ev)
        .map(|e| {
            let mut csr = quiver_reco::tracks::doublets::Csr {
                offsets: vec![0],
                values: Vec::new(),
            };
            for c in cell_off[e] as usize..cell_off[e + 1] as usize {
                let s = (base[e] + first[c]) as usize;
                csr.values
                    .extend_from_slice(&v[s..s + counts[c].min(per_list) as usize]);
                csr.offsets.push(csr.values.len() as u32);
            }
            csr
        })
        .collect();
    DeviceLists {
        lists,
        non_empty: non_empty[..n_ev].to_vec(),
        dropped: dropped[..n_ev].to_vec(),
        bad: bad[0] != 0,
        raw: (counts, first, base.to_vec(), v),
    }
}

/// Exclusive prefix sum with the total appended.
fn prefix(v: &[u32]) -> Vec<u32> {
    let mut out = vec![0u32];
    for &x in v {
        out.push(out.last().unwrap() + x);
    }
    out
}

/// The connect kernels on the device cells of a batch.
fn run_connect(
    lib: &libloading::Library,
    mode: Mode,
    b: &Batch,
    cfg: &CaConfig,
    cells: &Cells,
) -> Connected {
    let n = &cfg.ntuplets;
    let n_ev = b.hits_per_event.len();
    let hit_off = prefix(
        &b.hits_per_event
            .iter()
            .map(|&h| h as u32)
            .collect::<Vec<_>>(),
    );
    let n_cells = cells.inner.len();
    let (cell_off, listed) = (&cells.cell_off, &cells.listed);
    let (start, by_inner) = index_by(lib, mode, &cells.inner, None, cell_off, &hit_off);
    let mut counts = vec![u32::MAX; n_cells.max(1)];
    let (ne, nc) = (n_ev as u32, n_cells as u32);
    // The neighbours the count pass keeps for the write pass (stale values before it runs,
    // which the write pass must never read).
    let mut kept = vec![0xdead_beefu32; (n_cells * quiver_gpu::kernels_ca::CONNECT_KEPT).max(1)];
    // One pass: count (`write` 0, into `count`), or write at `first` and `push_off`.
    let mut connect = |write: u32,
                       (count, first): (&mut [u32], &[u32]),
                       push_off: &[u32],
                       (out, used): (&mut [u32], &mut [u8])| {
        let pass = args::CnConnect::<HostLaunch> {
            write: &write,
            n_cells: &nc,
            cell_off,
            n_events: &ne,
            hit_off: &hit_off,
            x: &b.x,
            y: &b.y,
            z: &b.z,
            r: &b.r,
            det: &b.det,
            inner: &cells.inner,
            outer: &cells.outer,
            listed,
            start: &start,
            by_inner: &by_inner,
            ptmin: &n.ptmin,
            theta_barrel: &n.ca_theta_cut_barrel,
            theta_forward: &n.ca_theta_cut_forward,
            dca_inner: &n.dca_cut_inner_triplet,
            dca_outer: &n.dca_cut_outer_triplet,
            hard_curv: &n.hard_curv_cut,
            count,
            first,
            push_off,
            out,
            used,
            kept: &mut kept,
        };
        run_elements(lib, mode, n_cells, HostLaunch::new(pass));
    };
    let no_first = vec![0u32; n_cells.max(1)];
    connect(0, (&mut counts, &no_first), &[0], (&mut [0], &mut [0]));
    let (first_h, total) = event_scan(lib, mode, &counts, cell_off);
    let (mut non_empty, mut dropped) = (vec![0u32; n_ev], vec![0u32; n_ev]);
    let stats = args::NtListStats::<HostLaunch> {
        count: &counts,
        n_cells: &nc,
        cell_off,
        n_events: &ne,
        per_list: &n.max_cell_neighbors,
        non_empty: &mut non_empty,
        dropped: &mut dropped,
    };
    run_elements(
        lib,
        mode,
        n_cells.div_ceil(STATS_RUN as usize),
        HostLaunch::new(stats),
    );
    let push_off = prefix(&total);
    let n_push = *push_off.last().unwrap() as usize;
    let (mut pushed, mut used) = (vec![u32::MAX; n_push.max(1)], vec![0u8; n_cells.max(1)]);
    // The write pass's own copy of the counts, as the count pass left them.
    let mut counts_w = counts.clone();
    connect(
        1,
        (&mut counts_w, &first_h),
        &push_off,
        (&mut pushed, &mut used),
    );
    let lists = (0..n_ev)
        .map(|e| {
            let (c0, c1) = (cell_off[e] as usize, cell_off[e + 1] as usize);
            let pushed = &pushed[push_off[e] as usize..push_off[e + 1] as usize];
            capped_neighbors(
                &counts[c0..c1],
                pushed,
                n.max_active_doublets,
                n.max_cell_neighbors,
            )
        })
        .collect();
    Connected {
        lists,
        used: used[..n_cells].to_vec(),
        hit_off,
        ncount: counts,
        first: first_h,
        push_off,
        pushed,
        non_empty,
        dropped,
    }
}

/// The test batch, the CPU step's cells of each event, and `f` of each event's hits and
/// doublets (the CPU's side of a comparison).
fn on_cpu_cells<R>(
    cfg: &CaConfig,
    f: impl Fn(&HitsView, quiver_reco::tracks::doublets::Doublets) -> R,
) -> (Batch, Cells, Vec<R>) {
    let (_, ds) = dataset();
    let b = batch();
    let cpe = &ds.conditions().cpe;
    let (cells, _) = run_cpu(&b, cfg, cpe);
    let mut out = Vec::new();
    for (e, view) in views(&b, cpe).iter().enumerate() {
        let r = cells.cell_off[e] as usize..cells.cell_off[e + 1] as usize;
        let listed: arrow_buffer::BooleanBuffer =
            cells.listed[r.clone()].iter().map(|&l| l == 1).collect();
        let d = doublets_from_columns(
            view,
            &cells.inner[r.clone()],
            &cells.outer[r.clone()],
            &cells.pair[r.clone()],
            &listed,
        )
        .unwrap();
        out.push(f(view, d));
    }
    (b, cells, out)
}

/// The device connect equals the CPU's `connect` on the CPU's own cells, event by event:
/// neighbour lists, overflows and used flags. Returns the events the host had to hand to
/// the CPU (`max_active_doublets` binding).
fn check_connect(name: &str, cfg: &CaConfig) -> usize {
    let Some(lib) = emulator() else {
        panic!("checked by the caller")
    };
    let (b, cells, cpu) = on_cpu_cells(cfg, |view, d| {
        let mut ca = CaState::new(d);
        connect(view, &mut ca, &cfg.ntuplets);
        ca
    });
    let mut fallbacks = 0;
    for mode in [Mode::Sequential, Mode::Threaded] {
        let dev = run_connect(lib, mode, &b, cfg, &cells);
        fallbacks = 0;
        for (e, ca) in cpu.iter().enumerate() {
            let used: Vec<u8> = ca.used.iter().map(|&u| u as u8).collect();
            let r = cells.cell_off[e] as usize..cells.cell_off[e + 1] as usize;
            assert!(
                dev.used[r] == used[..],
                "{name} ({mode:?}) event {e}: used flags"
            );
            match &dev.lists[e] {
                Some((csr, overflows)) => {
                    assert_eq!(
                        dev.dropped[e], *overflows,
                        "{name} ({mode:?}) event {e}: nt_list_stats' dropped neighbours"
                    );
                    assert!(
                        dev.non_empty[e] < cfg.ntuplets.max_active_doublets,
                        "{name} ({mode:?}) event {e}: nt_list_stats' non-empty lists"
                    );
                    assert!(
                        csr.offsets == ca.neighbors.offsets
                            || (csr.values.is_empty() && ca.neighbors.values.is_empty()),
                        "{name} ({mode:?}) event {e}: list offsets"
                    );
                    assert!(
                        csr.values == ca.neighbors.values,
                        "{name} ({mode:?}) event {e}: neighbours"
                    );
                    assert_eq!(
                        *overflows, ca.neighbor_overflows,
                        "{name} ({mode:?}) event {e}: overflows"
                    );
                }
                None => {
                    assert!(
                        dev.non_empty[e] + 1 > cfg.ntuplets.max_active_doublets,
                        "{name} ({mode:?}) event {e}: the step hands it to the CPU"
                    );
                    fallbacks += 1;
                    let non_empty = ca
                        .neighbors
                        .offsets
                        .windows(2)
                        .filter(|w| w[1] > w[0])
                        .count() as u32;
                    assert_eq!(
                        non_empty + 1,
                        cfg.ntuplets.max_active_doublets,
                        "{name} ({mode:?}) event {e}: handed to the CPU, whose lists are capped"
                    );
                }
            }
        }
    }
    let links: usize = cpu.iter().map(|ca| ca.neighbors.values.len()).sum();
    let over: u32 = cpu.iter().map(|ca| ca.neighbor_overflows).sum();
    println!(
        "connect {name}: {links} links, {over} overflows, {fallbacks} events handed to the CPU"
    );
    fallbacks
}

#[test]
fn connect_kernels_on_the_host_equal_the_cpu_connect() {
    if emulator().is_none() {
        return;
    }
    assert_eq!(check_connect("default", &CaConfig::default()), 0);
    // Small lists: neighbours past the capacity dropped and counted.
    let mut cfg = CaConfig::default();
    cfg.ntuplets.max_cell_neighbors = 1;
    assert_eq!(check_connect("one neighbour per cell", &cfg), 0);
    // Few active lists: the CPU's push order decides; the host hands such events back.
    let mut cfg = CaConfig::default();
    cfg.ntuplets.max_active_doublets = 50;
    assert_eq!(check_connect("50 active lists", &cfg), 3);
}

/// The whole `ca_ntuplets` of the GPU step on the host: the connect, the fishbone and the
/// search kernels, in the step's order, then the step's own host assembly
/// (`steps::ntuplet_event`) and the late fishbone. Per event the tuples and CA state,
/// and every cell's alive flag; `None` where the step hands the batch to the CPU.
#[allow(clippy::type_complexity)]
fn run_ntuplets(
    lib: &libloading::Library,
    mode: Mode,
    b: &Batch,
    cfg: &CaConfig,
    cells: &Cells,
) -> Option<(Vec<(Tuples, CaState)>, Vec<bool>)> {
    let n = &cfg.ntuplets;
    let con = run_connect(lib, mode, b, cfg, cells);
    if con
        .non_empty
        .iter()
        .any(|&k| k as u64 + 1 > n.max_active_doublets as u64)
    {
        return None;
    }
    let (cell_off, hit_off) = (&cells.cell_off, &con.hit_off);
    let (n_ev, n_cells, n_hits) = (
        cell_off.len() - 1,
        cells.inner.len(),
        *hit_off.last().unwrap() as usize,
    );
    let (ne, nc, nh) = (n_ev as u32, n_cells as u32, n_hits as u32);
    let mut dead = vec![0u8; n_cells.max(1)];
    let (start_o, by_outer) = index_by(
        lib,
        mode,
        &cells.outer,
        Some(&cells.listed),
        cell_off,
        hit_off,
    );
    let fishbone = |check_track: u32, has_track: &[u8], dead: &mut [u8]| {
        let pass = args::NtFishbone::<HostLaunch> {
            n_hits: &nh,
            hit_off,
            n_events: &ne,
            cell_off,
            x: &b.x,
            y: &b.y,
            z: &b.z,
            det: &b.det,
            inner: &cells.inner,
            start: &start_o,
            by_outer: &by_outer,
            used: &con.used,
            check_track: &check_track,
            has_track,
            dead,
        };
        run_elements(lib, mode, n_hits, HostLaunch::new(pass));
    };
    if n.early_fishbone {
        fishbone(0, &[0], &mut dead);
    }
    let (mut n_tup, mut n_hit, mut err) = (
        vec![u32::MAX; n_cells.max(1)],
        vec![u32::MAX; n_cells.max(1)],
        vec![0u32; 1],
    );
    // One pass of the search: count (`write` 0, into `counts`), or write into `outs`.
    type SearchOut<'o> = (
        &'o mut [u32],
        &'o mut [u32],
        &'o mut [u32],
        &'o mut [u32],
        &'o mut [u32],
    );
    let search = |write: u32,
                  (n_tuples, n_hits): (&mut [u32], &mut [u32]),
                  (tuple_first, hit_first): (&[u32], &[u32]),
                  (tuple_off, hit_off_out): (&[u32], &[u32]),
                  (tuple_len, tuple_cstart, tuple_cend, out_hits, out_cells): SearchOut,
                  error: &mut [u32]| {
        let pass = args::NtSearch::<HostLaunch> {
            write: &write,
            n_cells: &nc,
            cell_off,
            n_events: &ne,
            inner: &cells.inner,
            outer: &cells.outer,
            pair: &cells.pair,
            dead: &dead,
            ncount: &con.ncount,
            first: &con.first,
            push_off: &con.push_off,
            nbr: &con.pushed,
            per_list: &n.max_cell_neighbors,
            min_hits: &n.min_hits_per_ntuplet,
            max_tuples: &n.max_tuples,
            n_tuples,
            n_hits,
            tuple_first,
            hit_first,
            tuple_off,
            hit_off_out,
            tuple_len,
            tuple_cstart,
            tuple_cend,
            out_hits,
            out_cells,
            error,
        };
        run_elements(lib, mode, n_cells, HostLaunch::new(pass));
    };
    let none = vec![0u32; n_cells.max(n_ev + 1)];
    let mut one = [[0u32; 1]; 5];
    let [o0, o1, o2, o3, o4] = &mut one;
    search(
        0,
        (&mut n_tup, &mut n_hit),
        (&none, &none),
        (&none, &none),
        (o0, o1, o2, o3, o4),
        &mut err,
    );
    let (tup_first, tup_total) = event_scan(lib, mode, &n_tup, cell_off);
    let (hit_first, hit_total) = event_scan(lib, mode, &n_hit, cell_off);
    if err[0] != 0 {
        return None;
    }
    let (tup_off, hit_pos) = (prefix(&tup_total), prefix(&hit_total));
    let (n_tuples, n_tuple_hits) = (
        *tup_off.last().unwrap() as usize,
        *hit_pos.last().unwrap() as usize,
    );
    let (mut tlen, mut thits, mut tcells) = (
        vec![0u32; n_tuples.max(1)],
        vec![u32::MAX; n_tuple_hits.max(1)],
        vec![u32::MAX; (n_tuple_hits - n_tuples).max(1)],
    );
    let (mut cstart, mut cend) = (
        vec![u32::MAX; n_tuples.max(1)],
        vec![u32::MAX; n_tuples.max(1)],
    );
    search(
        1,
        (&mut n_tup, &mut n_hit),
        (&tup_first, &hit_first),
        (&tup_off, &hit_pos),
        (&mut tlen, &mut cstart, &mut cend, &mut thits, &mut tcells),
        &mut err,
    );
    // The cells' tuple lists and the early duplicate remover on the device, as the step.
    let base: Vec<u32> = (0..n_ev).map(|e| hit_pos[e] - tup_off[e]).collect();
    let dl = cell_track_lists(
        lib,
        mode,
        &tup_off,
        n.max_tuples,
        &cstart,
        &cend,
        &tcells,
        cell_off,
        &base,
        tcells.len(),
        n.max_cell_tracks,
    );
    assert!(!dl.bad, "the search's cells are inside their events");
    let on_device = dl
        .non_empty
        .iter()
        .all(|&k| (k as u64) < n.max_active_doublets as u64);
    let (mut q, mut has_track) = (vec![0u8; n_tuples.max(1)], vec![7u8; n_cells.max(1)]);
    let (counts, first, base, vals) = &dl.raw;
    let dup = args::NtEarlyDup::<HostLaunch> {
        n_cells: &nc,
        cell_off,
        n_events: &ne,
        count: counts,
        first,
        base,
        vals,
        per_list: &n.max_cell_tracks,
        tup_off: &tup_off,
        tuple_len: &tlen,
        found: &tup_total,
        max_tuples: &n.max_tuples,
        q: &mut q,
        has_track: &mut has_track,
    };
    run_elements(lib, mode, n_cells, HostLaunch::new(dup));
    let mut out = Vec::new();
    for e in 0..n_ev {
        let (t0, stored) = (tup_off[e] as usize, tup_total[e].min(n.max_tuples) as usize);
        let (hp, cp) = (hit_pos[e] as usize, (hit_pos[e] - tup_off[e]) as usize);
        let (he, ce) = (
            hit_pos[e + 1] as usize,
            (hit_pos[e + 1] - tup_off[e + 1]) as usize,
        );
        let n_ev_cells = (cell_off[e + 1] - cell_off[e]) as usize;
        let (lengths, hits, tc) = (&tlen[t0..t0 + stored], &thits[hp..he], &tcells[cp..ce]);
        if on_device {
            let (t, mut ca) = ntuplet_event_listed(
                n,
                tup_total[e],
                lengths,
                hits,
                tc,
                &q[t0..t0 + stored],
                con.dropped[e],
                dl.dropped[e],
            )
            .unwrap();
            // The lists the device built, for the comparison with the CPU's.
            ca.cell_tracks = dl.lists[e].clone();
            out.push((t, ca));
        } else {
            out.push(
                ntuplet_event(
                    n,
                    n_ev_cells,
                    tup_total[e],
                    lengths,
                    hits,
                    tc,
                    con.dropped[e],
                )
                .unwrap(),
            );
        }
    }
    // What the step keeps on the device for `track_fit` and `track_quality` when every tuple
    // found was stored: the search's hit and cell lists as they lie, and their offsets from
    // one scan of the lengths over the batch (`seg_scan` with one segment, then
    // `nt_list_offsets`), equal the product's lists.
    if on_device && tup_total.iter().all(|&f| f <= n.max_tuples) && n_tuples > 0 {
        let hits: Vec<u32> = out
            .iter()
            .flat_map(|(t, _)| t.hits.iter().copied())
            .collect();
        let cells: Vec<u32> = out
            .iter()
            .flat_map(|(_, ca)| ca.tuple_cells.iter().copied())
            .collect();
        assert!(
            hits == thits[..n_tuple_hits] && cells == tcells[..n_tuple_hits - n_tuples],
            "the kept lists are the product's"
        );
        let (first, total) = seg_scan_tiled(
            lib,
            mode,
            &tlen[..n_tuples],
            &[0, n_tuples as u32],
            EMU_TILE,
        );
        let (mut hoff, mut coff) = (vec![7u32; n_tuples + 1], vec![7u32; n_tuples + 1]);
        let offsets = args::NtListOffsets::<HostLaunch> {
            n: &(n_tuples as u32),
            first: &first,
            total: &total,
            hit_off: &mut hoff,
            cell_off: &mut coff,
        };
        run_elements(lib, mode, n_tuples + 1, HostLaunch::new(offsets));
        let mut hw = vec![0u32];
        let mut cw = vec![0u32];
        for (t, ca) in &out {
            for w in t.offsets.windows(2) {
                hw.push(hw.last().unwrap() + w[1] - w[0]);
            }
            for w in ca.tuple_cell_offsets.windows(2) {
                cw.push(cw.last().unwrap() + w[1] - w[0]);
            }
        }
        assert_eq!(hoff, hw, "hit list offsets");
        assert_eq!(coff, cw, "cell list offsets");
    }
    let has_tuple: Vec<u8> = out
        .iter()
        .flat_map(|(_, ca)| {
            ca.cell_tracks
                .iter()
                .map(|l| u8::from(!l.is_empty()))
                .collect::<Vec<_>>()
        })
        .collect();
    if on_device {
        // The late fishbone reads the device's "carries a tuple" flags.
        assert_eq!(has_track[..n_cells], has_tuple[..], "has_track");
    }
    if n.late_fishbone {
        fishbone(1, &has_tuple, &mut dead);
    }
    // The flags come back packed, as the step downloads them (`nt_alive_bits`).
    let n_words = n_cells.div_ceil(32);
    let mut words = vec![0xdead_beefu32; n_words.max(1)];
    let pack = args::NtAliveBits::<HostLaunch> {
        dead: &dead,
        n_cells: &nc,
        words: &mut words,
    };
    run_elements(lib, mode, n_words, HostLaunch::new(pack));
    let bits = arrow_buffer::BooleanBuffer::new(arrow_buffer::Buffer::from_vec(words), 0, n_cells);
    let alive: Vec<bool> = bits.iter().collect();
    assert_eq!(
        alive,
        dead[..n_cells].iter().map(|&d| d == 0).collect::<Vec<_>>(),
        "nt_alive_bits"
    );
    Some((out, alive))
}

/// The device `ca_ntuplets` equals the CPU's `stage_ntuplets` on the CPU's own cells, event
/// by event: tuples (hits, quality after the early duplicate remover, overflow), their
/// cells, the cells' tuple lists, the overflows and the alive flags. Returns the number of
/// tuples, or `None` when the step hands the batch to the CPU. `threaded`: also with real
/// threads per block (the expensive mode: a barrier after each of ~4 000 blocks).
fn check_ntuplets(name: &str, cfg: &CaConfig, threaded: bool) -> Option<usize> {
    let Some(lib) = emulator() else {
        panic!("checked by the caller")
    };
    let (b, cells, cpu) = on_cpu_cells(cfg, |view, d| stage_ntuplets(view, d, cfg).unwrap());
    let mut result = None;
    let modes: &[Mode] = if threaded {
        &[Mode::Sequential, Mode::Threaded]
    } else {
        &[Mode::Sequential]
    };
    for &mode in modes {
        let Some((dev, alive)) = run_ntuplets(lib, mode, &b, cfg, &cells) else {
            println!("ntuplets {name} ({mode:?}): handed to the CPU");
            result = None;
            continue;
        };
        let cpu_alive: Vec<bool> = cpu
            .iter()
            .flat_map(|(_, ca)| ca.alive.iter().copied())
            .collect();
        assert!(
            alive == cpu_alive,
            "{name} ({mode:?}): alive flags ({} vs {} dead)",
            alive.iter().filter(|&&a| !a).count(),
            cpu_alive.iter().filter(|&&a| !a).count()
        );
        for (e, ((t, ca), (dt, dca))) in cpu.iter().zip(&dev).enumerate() {
            assert!(
                t == dt,
                "{name} ({mode:?}) event {e}: tuples ({} vs {})",
                t.len(),
                dt.len()
            );
            assert!(
                ca.tuple_cells == dca.tuple_cells
                    && ca.tuple_cell_offsets == dca.tuple_cell_offsets,
                "{name} ({mode:?}) event {e}: tuple cells"
            );
            assert!(
                ca.cell_tracks.offsets == dca.cell_tracks.offsets
                    && ca.cell_tracks.values == dca.cell_tracks.values,
                "{name} ({mode:?}) event {e}: tuples per cell"
            );
            let o = |c: &CaState| (c.neighbor_overflows, c.track_overflows, c.tuple_overflows);
            assert_eq!(
                o(ca),
                o(dca),
                "{name} ({mode:?}) event {e}: overflows (neighbours, tuples per cell, tuples)"
            );
        }
        result = Some(cpu.iter().map(|(t, _)| t.len()).sum());
    }
    let tuples: usize = cpu.iter().map(|(t, _)| t.len()).sum();
    let dups = cpu
        .iter()
        .map(|(t, _)| t.quality.iter().filter(|&&q| q == Quality::Dup).count())
        .sum::<usize>();
    let o = cpu
        .iter()
        .map(|(_, ca)| {
            (
                ca.neighbor_overflows,
                ca.track_overflows,
                ca.tuple_overflows,
            )
        })
        .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2));
    println!("ntuplets {name}: {tuples} tuples ({dups} dup), overflows (neighbours, per cell, tuples) {o:?}");
    result
}

#[test]
fn ntuplet_kernels_on_the_host_equal_the_cpu_step() {
    if emulator().is_none() {
        return;
    }
    let t = check_ntuplets("default", &CaConfig::default(), true).expect("computed on the device");
    assert!(t > 500, "a realistic number of tuples at PU 50: {t}");
    // The late fishbone (on cells with tuples) as well; no early one.
    let mut cfg = CaConfig::default();
    cfg.ntuplets.late_fishbone = true;
    check_ntuplets("late fishbone", &cfg, true).unwrap();
    cfg.ntuplets.early_fishbone = false;
    check_ntuplets("late fishbone only", &cfg, false).unwrap();
    // Capacities: few tuples (the last stored one emptied), few tuples per cell, one
    // neighbour per cell; sized.
    let mut cfg = CaConfig::default();
    cfg.ntuplets.max_tuples = 300;
    cfg.ntuplets.max_cell_tracks = 2;
    cfg.ntuplets.max_cell_neighbors = 1;
    check_ntuplets("capacities", &cfg, false).unwrap();
    // Few tuples alone: the emptied last tuple among duplicates.
    let mut cfg = CaConfig::default();
    cfg.ntuplets.max_tuples = 2000;
    check_ntuplets("2000 tuples", &cfg, false).unwrap();
    check_ntuplets("sized", &CaConfig::default().with_sized_capacities(), false).unwrap();
    // Quadruplets only (the doublets of 13 pairs).
    let mut cfg = CaConfig::default();
    cfg.ntuplets.min_hits_per_ntuplet = 4;
    check_ntuplets("quadruplets", &cfg, false).unwrap();
    // Few active lists: the CPU's push order decides; the step hands the batch to the CPU.
    let mut cfg = CaConfig::default();
    cfg.ntuplets.max_active_doublets = 50;
    assert_eq!(check_ntuplets("50 active lists", &cfg, false), None);
}

/// The threaded emulation cannot hang: a thread that panics between two `__syncthreads`
/// (here `emu_sync`, what the kernels call) breaks its block's barrier, the other threads are
/// released, and the launch fails promptly with the panic's message.
#[test]
fn a_panicking_emulated_thread_ends_the_launch() {
    let t0 = std::time::Instant::now();
    let r = std::panic::catch_unwind(|| {
        emu_threads::run_threads(EMU_BLOCK, |t, between| {
            emu_threads::emu_sync();
            if t == 3 {
                panic!("thread three fails");
            }
            emu_threads::emu_sync();
            between.wait();
        })
    });
    let msg = r
        .expect_err("the launch fails")
        .downcast::<String>()
        .map(|s| *s)
        .unwrap_or_default();
    assert!(
        msg.contains("emulated thread 3 panicked: thread three fails"),
        "{msg}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(1),
        "took {:?}",
        t0.elapsed()
    );
    // And a launch without a panic still synchronises: every thread sees all the writes
    // made before the barrier.
    let seen = std::sync::atomic::AtomicU32::new(0);
    let ok = std::sync::atomic::AtomicU32::new(0);
    emu_threads::run_threads(EMU_BLOCK, |_, _| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        emu_threads::emu_sync();
        if seen.load(std::sync::atomic::Ordering::SeqCst) == EMU_BLOCK {
            ok.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    assert_eq!(ok.into_inner(), EMU_BLOCK);
}

/// The fit kernel on the host, with the GPU step's host side, equals the CPU's `stage_fit`
/// on the CPU's tuples: every fit column bit for bit, and the overflow rows. Returns the
/// number of fits.
fn check_fit(name: &str, cfg: &CaConfig, modes: &[Mode]) -> usize {
    use quiver_columnar::compare::{compare_products, Tolerance};
    use quiver_columnar::overflow::CAPACITY_OVERFLOWS;
    use quiver_columnar::{EventBatch, ProductKey};
    use quiver_gpu::kernels_fit::{frame_table, FIT_HITS, FIT_OUT};
    use quiver_gpu::steps::fit_batch;
    use quiver_reco::steps::types::TRACK_FITS;
    use quiver_reco::steps::{fit_overflows, publish_fit_values, publish_fits, FitTuples};
    use quiver_reco::tracks::fit::{broken_line_fit, hit_global_cov, FitValues};
    use quiver_reco::tracks::riemann::riemann_fit;
    use quiver_reco::tracks::{stage_fit, Tracks};
    let Some(lib) = emulator() else {
        panic!("checked by the caller")
    };
    let (_, ds) = dataset();
    let cpe = &ds.conditions().cpe;
    let (b, _, tuples) = on_cpu_cells(cfg, |view, d| stage_ntuplets(view, d, cfg).unwrap().0);
    let hits = views(&b, cpe);
    let cpu: Vec<Tracks> = hits
        .iter()
        .zip(&tuples)
        .map(|(h, t)| stage_fit(h, t, cfg).unwrap())
        .collect();
    // The GPU step's inputs: each event's detIndex and tuples (its other hit columns live on
    // the device).
    let inputs: Vec<FitTuples> = hits
        .iter()
        .zip(tuples)
        .map(|(h, tuples)| FitTuples {
            det: h.det_index,
            tuples,
        })
        .collect();
    let starts: Vec<usize> = b
        .hits_per_event
        .iter()
        .scan(0, |a, &n| {
            let s = *a;
            *a += n;
            Some(s)
        })
        .collect();
    let fb =
        fit_batch(&inputs, &starts, cpe.det.len(), cfg, true).expect("the device path applies");
    let nj = fb.job_n.len();
    assert_eq!(fb.job_hits.len(), nj * FIT_HITS);
    let frames = frame_table(cpe);
    let xerr: Vec<f32> = b
        .events
        .iter()
        .flat_map(|h| h.xerr_local.iter().copied())
        .collect();
    let yerr: Vec<f32> = b
        .events
        .iter()
        .flat_map(|h| h.yerr_local.iter().copied())
        .collect();
    // Every float column of the tracks, as bits (NaN compares equal to itself).
    let bits = |t: &Tracks| -> Vec<u32> {
        let mut v: Vec<u32> = t
            .state
            .iter()
            .flatten()
            .chain(t.covariance.iter().flatten())
            .map(|x| x.to_bits())
            .collect();
        for c in [&t.pt, &t.eta, &t.chi2, &t.phi, &t.tip, &t.zip] {
            v.extend(c.iter().map(|x| x.to_bits()));
        }
        v
    };
    for &mode in modes {
        let (mut values, mut raw) = (
            vec![f32::NAN; (nj * FIT_OUT).max(1)],
            vec![f64::NAN; (nj * FIT_OUT).max(1)],
        );
        let kernel = args::TrackFit::<HostLaunch>::kernel(cfg.fit.use_riemann_fit);
        let fit = args::TrackFit::<HostLaunch> {
            n_jobs: &(nj as u32),
            job_hits: &fb.job_hits,
            job_n: &fb.job_n,
            x: &b.x,
            y: &b.y,
            z: &b.z,
            xerr: &xerr,
            yerr: &yerr,
            det: &b.det,
            frames: &frames,
            b_field: &cfg.fit.b_field,
            out: &mut values,
            write_raw: &1,
            raw: &mut raw,
        };
        run_elements(lib, mode, nj, HostLaunch::of(kernel, fit));
        // The fits' doubles themselves (the f32 products round most last-bit differences
        // away): the CPU's `broken_line_fit` of the same hits, job by job.
        let mut k = 0;
        for ((input, jobs), h) in inputs.iter().zip(&fb.jobs).zip(&hits) {
            for job in jobs {
                let hs = &input.tuples.hits_of(job.row as usize)[..job.n_fit as usize];
                let pos: Vec<[f64; 3]> = hs
                    .iter()
                    .map(|&i| {
                        [
                            h.x_global[i as usize] as f64,
                            h.y_global[i as usize] as f64,
                            h.z_global[i as usize] as f64,
                        ]
                    })
                    .collect();
                let ge: Vec<[f32; 6]> = hs
                    .iter()
                    .map(|&i| {
                        hit_global_cov(
                            &cpe.det[h.det_index[i as usize] as usize].frame,
                            h.xerr_local[i as usize],
                            h.yerr_local[i as usize],
                        )
                    })
                    .collect();
                let f = if cfg.fit.use_riemann_fit {
                    riemann_fit(&pos, &ge, cfg.fit.b_field as f64)
                } else {
                    broken_line_fit(&pos, &ge, cfg.fit.b_field as f64)
                }
                .unwrap();
                let (c, l) = (&f.circle, &f.line);
                let want = [
                    c.par[0],
                    c.par[1],
                    c.par[2],
                    c.cov[0][0],
                    c.cov[0][1],
                    c.cov[0][2],
                    c.cov[1][1],
                    c.cov[1][2],
                    c.cov[2][2],
                    l.par[0],
                    l.par[1],
                    l.cov[0][0],
                    l.cov[0][1],
                    l.cov[1][1],
                    l.chi2,
                    c.chi2 as f64,
                ];
                let got = &raw[k * FIT_OUT..(k + 1) * FIT_OUT];
                assert!(
                    want.iter()
                        .zip(got)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name} ({mode:?}) fit {k} ({} hits): {want:?} vs {got:?}",
                    job.n_fit
                );
                // And the f32 values the step downloads, as the CPU rounds them.
                let want = FitValues::of(&f, job.n_fit as usize, &cfg.fit).to_array();
                let got = &values[k * FIT_OUT..(k + 1) * FIT_OUT];
                assert!(
                    want.iter()
                        .zip(got)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name} ({mode:?}) fit {k} values: {want:?} vs {got:?}"
                );
                k += 1;
            }
        }
        // The step's products from the device's values against the CPU step's from its
        // tracks: every column of `track_fits` bit for bit, and the overflow rows.
        let keys = [
            ProductKey::new(TRACK_FITS, "fit"),
            ProductKey::new(CAPACITY_OVERFLOWS, "fit"),
        ];
        let scratch = || {
            let mut b = EventBatch::new(0, inputs.len());
            b.set_allowed(&keys);
            b
        };
        let (mut gpu_b, mut cpu_b) = (scratch(), scratch());
        let tuples: Vec<&Tuples> = inputs.iter().map(|i| &i.tuples).collect();
        publish_fit_values(&mut gpu_b, &tuples, &fb.jobs, &values[..nj * FIT_OUT], cfg).unwrap();
        let cpu_out = cpu
            .iter()
            .zip(&inputs)
            .map(|(c, i)| (c.clone(), fit_overflows(&i.tuples, c.stats.n_fitted, cfg)))
            .collect();
        publish_fits(&mut cpu_b, cpu_out).unwrap();
        for k in &keys {
            let (g, c) = (gpu_b.get(k).unwrap(), cpu_b.get(k).unwrap());
            let cmp = compare_products(&g, &c, 0, Tolerance::default()).unwrap();
            assert_eq!(cmp.total(), 0, "{name} ({mode:?}) {k}: {:?}", cmp.first);
            assert!(
                cmp.rows as usize == c.num_rows() && g.num_rows() == c.num_rows(),
                "{name} ({mode:?}) {k}: rows"
            );
        }
        // The columns the step keeps on the device for `track_quality` (`fit_scatter` into
        // zero-filled rows) equal the product's state, pT and χ² bit for bit.
        {
            use arrow_array::cast::AsArray;
            use arrow_array::types::Float32Type;
            let fits = gpu_b.get(&keys[0]).unwrap();
            let host = fits.host().unwrap();
            let col = |c: &str| {
                host.column_by_name(c)
                    .unwrap()
                    .as_primitive::<Float32Type>()
                    .values()
                    .to_vec()
            };
            let want_state = host
                .column_by_name("state")
                .unwrap()
                .as_fixed_size_list()
                .values()
                .as_primitive::<Float32Type>()
                .values()
                .to_vec();
            let rows = fits.num_rows();
            let mut job_row = Vec::with_capacity(nj);
            let mut base = 0usize;
            for (input, jobs) in inputs.iter().zip(&fb.jobs) {
                job_row.extend(jobs.iter().map(|j| (base + j.row as usize) as u32));
                base += input.tuples.len();
            }
            assert_eq!(base, rows);
            let (mut state, mut pt, mut chi2) = (
                vec![0.0f32; 5 * rows],
                vec![0.0f32; rows],
                vec![0.0f32; rows],
            );
            let scatter = args::FitScatter::<HostLaunch> {
                n_jobs: &(nj as u32),
                job_row: &job_row,
                vals: &values,
                inv_b: &(1.0f32 / cfg.fit.b_field),
                state: &mut state,
                pt: &mut pt,
                chi2: &mut chi2,
            };
            run_elements(lib, mode, nj, HostLaunch::new(scatter));
            // The job table from the tuples' lists as the GPU `ca_ntuplets` keeps them (batch
            // list offsets, event-local hits): the host's, slot for slot.
            let (mut tup_off, mut list_off, mut list_hits) = (vec![0u32], vec![0u32], Vec::new());
            for input in &inputs {
                let t = &input.tuples;
                tup_off.push(tup_off.last().unwrap() + t.len() as u32);
                for i in 0..t.len() {
                    list_hits.extend_from_slice(t.hits_of(i));
                    list_off.push(list_hits.len() as u32);
                }
            }
            let mut hit_start: Vec<u32> = starts.iter().map(|&x| x as u32).collect();
            hit_start.push(b.x.len() as u32);
            let mut job_hits = vec![0u32; nj * FIT_HITS];
            let jobs = args::FitJobHits::<HostLaunch> {
                n_jobs: &(nj as u32),
                job_row: &job_row,
                job_n: &fb.job_n,
                n_events: &(inputs.len() as u32),
                tup_off: &tup_off,
                hit_start: &hit_start,
                list_off: &list_off,
                list_hits: &list_hits,
                job_hits: &mut job_hits,
            };
            run_elements(lib, mode, nj, HostLaunch::new(jobs));
            assert_eq!(
                job_hits, fb.job_hits,
                "{name} ({mode:?}): the job table from the device's lists"
            );
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&state),
                bits(&want_state),
                "{name} ({mode:?}): scattered state"
            );
            assert_eq!(
                bits(&pt),
                bits(&col("pt")),
                "{name} ({mode:?}): scattered pT"
            );
            assert_eq!(
                bits(&chi2),
                bits(&col("chi2")),
                "{name} ({mode:?}): scattered chi2"
            );
        }
        // The values that take part: a fitted track's are not all zero.
        assert!(
            cpu.iter().any(|c| bits(c).iter().any(|&b| b != 0)),
            "{name}: no fitted values"
        );
    }
    println!("fit {name}: {nj} fits in {} events", inputs.len());
    nj
}

#[test]
fn fit_kernel_on_the_host_equals_the_cpu_step() {
    if emulator().is_none() {
        return;
    }
    let n = check_fit(
        "default",
        &CaConfig::default(),
        &[Mode::Sequential, Mode::Threaded],
    );
    assert!(n > 5_000, "a realistic number of fits at PU 50: {n}");
    // 5-hit tuples on their 5 hits (the 6×6 inversion of the circle fit).
    let mut cfg = CaConfig::default();
    cfg.fit.fit5as4 = false;
    check_fit("fit5as4 off", &cfg, &[Mode::Sequential]);
    // The per-multiplicity capacity cuts: the same tuples are fitted, the same missed.
    let mut cfg = CaConfig::default();
    cfg.fit.max_concurrent_fits = 200;
    let n = check_fit("200 fits per multiplicity", &cfg, &[Mode::Sequential]);
    assert!(n <= 3 * 200 * 4, "{n}");
    // The Riemann fit, on 4 hits and on 5.
    let mut cfg = CaConfig::default();
    cfg.fit.use_riemann_fit = true;
    check_fit("riemann", &cfg, &[Mode::Sequential, Mode::Threaded]);
    cfg.fit.fit5as4 = false;
    check_fit("riemann, fit5as4 off", &cfg, &[Mode::Sequential]);
}

/// One event's tracks as the vertex finder reads them (owned).
#[derive(Clone, Debug, Default)]
struct VxEvent {
    zip: Vec<f32>,
    cov_zip: Vec<f32>,
    pt: Vec<f32>,
    quality: Vec<u8>,
    n_hits: Vec<u16>,
}

impl VxEvent {
    fn view(&self) -> quiver_reco::vertices::TracksView<'_> {
        quiver_reco::vertices::TracksView::new(
            &self.zip,
            &self.cov_zip,
            &self.pt,
            &self.quality,
            &self.n_hits,
        )
        .unwrap()
    }
}

/// Synthetic events: vertices along z with tracks of assorted resolutions, vertices made of
/// three groups of precise tracks (one cluster, a bad χ²: split), an event with z on a grid
/// (ties), tracks the
/// selection drops (triplets, low pT, not loose), an event with one track and an empty one.
fn synthetic_vertex_events() -> Vec<VxEvent> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut uni = move || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 11) as f64) / (1u64 << 53) as f64
    };
    let mut events = Vec::new();
    for ev in 0..6 {
        let mut e = VxEvent::default();
        let n_vtx = 5 + 12 * ev;
        for v in 0..n_vtx {
            let vz = (uni() * 20.0 - 10.0) as f32;
            // Every fourth vertex: three groups 0.015 cm apart, σ 40 µm: neighbours chain
            // them into one cluster whose χ² asks for a split.
            let subs: &[f32] = if v % 4 == 0 {
                &[0.0, 0.015, 0.03]
            } else {
                &[0.0]
            };
            let n_trk = 2 + (uni() * 25.0) as usize;
            for k in 0..n_trk {
                let sigma = if subs.len() > 1 {
                    0.004
                } else {
                    0.002 + 0.02 * uni()
                };
                let g = (-2.0 * uni().max(1e-12).ln()).sqrt()
                    * (2.0 * std::f64::consts::PI * uni()).cos();
                e.zip.push(vz + subs[k % subs.len()] + (g * sigma) as f32);
                e.cov_zip.push((sigma * sigma) as f32);
                e.pt.push((0.3 + 5.0 * uni()) as f32);
                e.quality.push(if k % 11 == 10 {
                    quiver_reco::vertices::quality::BAD
                } else {
                    quiver_reco::vertices::quality::LOOSE
                });
                e.n_hits.push(if k % 7 == 6 { 3 } else { 4 });
            }
        }
        events.push(e);
    }
    // z on a 10 µm grid: equal distances and equal densities, so the tie rules decide.
    let mut grid = events[3].clone();
    for z in &mut grid.zip {
        *z = (*z * 1000.0).round() / 1000.0;
    }
    events.push(grid);
    events.push(VxEvent {
        zip: vec![0.5],
        cov_zip: vec![1e-4],
        pt: vec![2.0],
        quality: vec![quiver_reco::vertices::quality::LOOSE],
        n_hits: vec![4],
    });
    events.push(VxEvent::default());
    events
}

/// The vertex kernel on a batch (one block per event): its output and error flags.
fn run_vertex_kernel(
    lib: &libloading::Library,
    mode: Mode,
    vb: &quiver_gpu::steps::VertexBatch,
    cfg: &quiver_reco::vertices::VertexConfig,
) -> (quiver_gpu::steps::VertexOutput, Vec<u32>) {
    use quiver_gpu::kernels_vertices::{VX_BIN_OFFSETS, VX_BLOCK};
    let (n, n_ev) = (vb.zt.len(), vb.sel_off.len() - 1);
    let m = n.max(1);
    let (mut izt, mut bins, mut off) = (
        vec![0u32; m],
        vec![0u32; m],
        vec![0u32; n_ev * VX_BIN_OFFSETS],
    );
    let (mut nn, mut ptr, mut iv) = (vec![0i32; m], vec![0i32; m], vec![-7i32; m]);
    let (mut s_it, mut s_zz, mut s_ww, mut s_new) =
        (vec![0u32; m], vec![0f32; m], vec![0f32; m], vec![0u8; m]);
    let (mut zv, mut wv, mut chi2, mut ndof, mut ptv2, mut sort) = (
        vec![f32::NAN; m],
        vec![f32::NAN; m],
        vec![f32::NAN; m],
        vec![-7i32; m],
        vec![f32::NAN; m],
        vec![u16::MAX; m],
    );
    let (mut nv, mut err) = (vec![0u32; n_ev], vec![0u32; n_ev]);
    // Sequential: one thread per block (the barriers need every thread of a block).
    let threads = if mode == Mode::Sequential {
        1
    } else {
        EMU_BLOCK
    };
    assert!(VX_BLOCK >= threads);
    HostLaunch::new(args::VxFind::<HostLaunch> {
        sel_off: &vb.sel_off,
        n_events: &(n_ev as u32),
        zt_all: &vb.zt,
        ezt2_all: &vb.ezt2,
        ptt2_all: &vb.ptt2,
        mode: &quiver_gpu::steps::clustering_mode(cfg.clusterizer),
        min_t: &cfg.min_t,
        eps: &cfg.eps,
        errmax: &cfg.errmax,
        chi2max: &cfg.chi2max,
        chi2_first: &cfg.fit_chi2_max_first,
        chi2_split: &cfg.split_chi2_max,
        chi2_final: &cfg.fit_chi2_max_final,
        izt_all: &mut izt,
        bins_all: &mut bins,
        off_all: &mut off,
        nn_all: &mut nn,
        ptr_all: &mut ptr,
        iv_all: &mut iv,
        s_it_all: &mut s_it,
        s_zz_all: &mut s_zz,
        s_ww_all: &mut s_ww,
        s_new_all: &mut s_new,
        zv_all: &mut zv,
        wv_all: &mut wv,
        chi2_all: &mut chi2,
        ndof_all: &mut ndof,
        ptv2_all: &mut ptv2,
        sort_all: &mut sort,
        nv_out: &mut nv,
        err: &mut err,
    })
    .run(lib, n_ev as u32, threads, mode == Mode::Threaded);
    let rows = quiver_reco::vertices::ChainResult {
        iv,
        zv,
        wv,
        chi2,
        ndof,
        ptv2,
        sort_ind: sort,
    };
    let out = quiver_gpu::steps::VertexOutput { rows, nv };
    (out, err)
}

/// The vertex kernel with the GPU step's host side equals `find_vertices` on every event:
/// every field, floats bit for bit. Returns (vertices, events with a split).
fn check_vertices(
    name: &str,
    events: &[VxEvent],
    cfg: &quiver_reco::vertices::VertexConfig,
    modes: &[Mode],
) -> (usize, usize) {
    use quiver_gpu::steps::{vertex_batch, vertices_from_device};
    use quiver_reco::vertices::{find_vertices, select_tracks, Vertices};
    let Some(lib) = emulator() else {
        panic!("checked by the caller")
    };
    let cpu: Vec<Vertices> = events
        .iter()
        .map(|e| find_vertices(&e.view(), cfg).unwrap())
        .collect();
    let sel: Vec<(usize, quiver_reco::vertices::Selected)> = events
        .iter()
        .map(|e| (e.zip.len(), select_tracks(&e.view(), cfg).unwrap()))
        .collect();
    let vb = vertex_batch(&sel.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>()).unwrap();
    let n_ev = events.len();
    for &mode in modes {
        let (out, err) = run_vertex_kernel(lib, mode, &vb, cfg);
        assert!(
            err.iter().all(|&x| x == 0),
            "{name} ({mode:?}): capacity error flagged"
        );
        let dev = vertices_from_device(&sel, &vb, &out).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (e, (c, d)) in cpu.iter().zip(&dev).enumerate() {
            assert_eq!(
                c.nv_final, d.nv_final,
                "{name} ({mode:?}) event {e}: vertices"
            );
            assert_eq!(
                (&c.idv, &c.ndof, &c.sort_ind),
                (&d.idv, &d.ndof, &d.sort_ind),
                "{name} ({mode:?}) event {e}"
            );
            for (what, x, y) in [
                ("zv", &c.zv, &d.zv),
                ("wv", &c.wv, &d.wv),
                ("chi2", &c.chi2, &d.chi2),
                ("ptv2", &c.ptv2, &d.ptv2),
            ] {
                assert_eq!(bits(x), bits(y), "{name} ({mode:?}) event {e}: {what}");
            }
            assert_eq!(
                (&c.track_offsets, &c.track_indices, c.n_selected),
                (&d.track_offsets, &d.track_indices, d.n_selected),
                "{name} ({mode:?}) event {e}"
            );
        }
    }
    let n_vertices = cpu.iter().map(|v| v.nv_final as usize).sum();
    // Events where the CPU's chain split a vertex: more vertices than without splitting.
    let no_split = quiver_reco::vertices::VertexConfig {
        split_chi2_max: f32::MAX,
        ..cfg.clone()
    };
    let split_events = events
        .iter()
        .zip(&cpu)
        .filter(|(e, v)| find_vertices(&e.view(), &no_split).unwrap().nv_final < v.nv_final)
        .count();
    println!("vertices {name}: {n_vertices} vertices in {n_ev} events, {split_events} events with a split");
    (n_vertices, split_events)
}

#[test]
fn vertex_kernel_on_the_host_equals_the_cpu_step() {
    if emulator().is_none() {
        return;
    }
    use quiver_reco::tracks::{stage_fit, stage_quality};
    let cfg = CaConfig::default();
    // The chain's own tracks (CPU): tuples, fit, quality.
    let (_, _, chain) = on_cpu_cells(&cfg, |view, d| {
        let (t, ca) = stage_ntuplets(view, d, &cfg).unwrap();
        let mut tracks = stage_fit(view, &t, &cfg).unwrap();
        stage_quality(view, &t, &ca, &mut tracks, &cfg);
        VxEvent {
            zip: tracks.zip.clone(),
            cov_zip: tracks.covariance.iter().map(|c| c[14]).collect(),
            pt: tracks.pt.clone(),
            quality: tracks.quality.clone(),
            n_hits: tracks.n_hits.clone(),
        }
    });
    let vc = quiver_reco::vertices::VertexConfig::default();
    let (n, _) = check_vertices("chain", &chain, &vc, &[Mode::Sequential, Mode::Threaded]);
    assert!(n > 20, "vertices at PU 50: {n}");
    let synth = synthetic_vertex_events();
    let (n, splits) = check_vertices(
        "synthetic",
        &synth,
        &vc,
        &[Mode::Sequential, Mode::Threaded],
    );
    assert!(
        n > 100 && splits >= 3,
        "{n} vertices, {splits} events with splits"
    );
    // Triplets too, a looser seed and a tighter window.
    let vc = quiver_reco::vertices::VertexConfig {
        min_hits: 3,
        min_t: 1,
        eps: 0.03,
        ..Default::default()
    };
    check_vertices(
        "triplets, min_t 1, eps 0.03",
        &synth,
        &vc,
        &[Mode::Sequential],
    );
    // The other clusterings, on the chain's tracks and the synthetic events.
    for c in [
        quiver_reco::vertices::Clusterizer::Dbscan,
        quiver_reco::vertices::Clusterizer::Iterative,
    ] {
        let vc = quiver_reco::vertices::VertexConfig {
            clusterizer: c,
            ..Default::default()
        };
        check_vertices(
            &format!("{c:?} chain"),
            &chain,
            &vc,
            &[Mode::Sequential, Mode::Threaded],
        );
        check_vertices(
            &format!("{c:?} synthetic"),
            &synth,
            &vc,
            &[Mode::Sequential, Mode::Threaded],
        );
    }
    // 1 100 isolated triplets of precise tracks: 1 100 proto-vertices, past the capacity.
    // The CPU reports it; the kernel flags the event (the step then hands the batch to the
    // CPU for its message).
    let mut e = VxEvent::default();
    for c in 0..1100 {
        for k in 0..3 {
            e.zip.push(-11.0 + 0.02 * c as f32 + 1e-5 * k as f32);
            e.cov_zip.push(1e-8);
            e.pt.push(1.0);
            e.quality.push(quiver_reco::vertices::quality::LOOSE);
            e.n_hits.push(4);
        }
    }
    let vc = quiver_reco::vertices::VertexConfig::default();
    let cpu = quiver_reco::vertices::find_vertices(&e.view(), &vc).unwrap_err();
    assert!(
        cpu.to_string()
            .contains("vertices exceed the capacity of 1023"),
        "{cpu}"
    );
    let sel = quiver_reco::vertices::select_tracks(&e.view(), &vc).unwrap();
    let vb = quiver_gpu::steps::vertex_batch(&[sel]).unwrap();
    let lib = emulator().unwrap();
    for mode in [Mode::Sequential, Mode::Threaded] {
        assert_eq!(run_vertex_kernel(lib, mode, &vb, &vc).1, [1], "{mode:?}");
    }
}

/// The quality kernel, with the GPU step's host side (the CA state replayed from the tuple
/// cells and alive flags, as the step gets it from the products), equals the CPU's
/// `stage_quality` on every event. Returns (tracks, loose or better, dup).
/// `tip_grid` > 0 rounds every fit's tip to that grid (cm) before the CPU step and the
/// kernel see it, so that the triplet cleaner's |tip| ties occur.
fn check_quality(
    name: &str,
    cfg: &CaConfig,
    modes: &[Mode],
    tip_grid: f32,
) -> (usize, usize, usize) {
    use quiver_gpu::kernels_quality::{cuts_table, QX_BLOCK, QX_ROUNDS, QX_SH};
    use quiver_gpu::steps::quality_tables;
    use quiver_reco::steps::QualityColumnsView;
    use quiver_reco::tracks::{stage_fit, stage_quality};
    let Some(lib) = emulator() else {
        panic!("checked by the caller")
    };
    let (b, cells, per_event) = on_cpu_cells(cfg, |view, d| {
        let (t, ca) = stage_ntuplets(view, d, cfg).unwrap();
        let mut tracks = stage_fit(view, &t, cfg).unwrap();
        if tip_grid > 0.0 {
            for (s, tip) in tracks.state.iter_mut().zip(&mut tracks.tip) {
                s[1] = (s[1] / tip_grid).round() * tip_grid;
                *tip = s[1];
            }
        }
        let mut expect = tracks.clone();
        stage_quality(view, &t, &ca, &mut expect, cfg);
        (t, ca, tracks, expect.quality)
    });
    // The batch's columns as the products hold them (what the step reads).
    let (mut tuple_ev, mut hit_ev, mut cell_ev) = (vec![0i32], vec![0i32], vec![0i32]);
    let (mut hoff, mut hv, mut coff, mut cv) = (vec![0i32], Vec::new(), vec![0i32], Vec::new());
    let (mut quality, mut state, mut pt, mut chi2, mut alive) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut expected = Vec::new();
    for (e, (t, ca, tracks, q)) in per_event.iter().enumerate() {
        for i in 0..t.len() {
            hv.extend_from_slice(t.hits_of(i));
            hoff.push(hv.len() as i32);
            cv.extend_from_slice(
                &ca.tuple_cells
                    [ca.tuple_cell_offsets[i] as usize..ca.tuple_cell_offsets[i + 1] as usize],
            );
            coff.push(cv.len() as i32);
        }
        quality.extend(t.quality.iter().map(|&x| x as u8));
        state.extend_from_slice(tracks.state.as_flattened());
        pt.extend_from_slice(&tracks.pt);
        chi2.extend_from_slice(&tracks.chi2);
        alive.extend_from_slice(&ca.alive);
        tuple_ev.push(quality.len() as i32);
        hit_ev.push(hit_ev[e] + b.hits_per_event[e] as i32);
        cell_ev.push(alive.len() as i32);
        expected.push(q.clone());
    }
    assert_eq!(
        cell_ev.iter().map(|&x| x as u32).collect::<Vec<_>>(),
        cells.cell_off
    );
    let v = QualityColumnsView {
        hit_offsets: &hoff,
        hits: &hv,
        cell_offsets: &coff,
        cells: &cv,
        quality: &quality,
        state: &state,
        pt: &pt,
        chi2: &chi2,
        alive: arrow_array::BooleanArray::from(alive.clone()),
    };
    let late = cfg.ntuplets.late_fishbone;
    let qt = quality_tables(&v, &tuple_ev, &hit_ev, &cell_ev, late).unwrap();
    let (n_ev, n_tup, n_th, n_cells) = (per_event.len(), quality.len(), hv.len(), alive.len());
    let n_hits = *qt.hit_off.last().unwrap() as usize;
    let cuts = cuts_table(&cfg.quality);
    let per_list = cfg.ntuplets.max_cell_tracks;
    let dead = if late { qt.dead.clone() } else { vec![0u8] };
    // sh_cap 0: every event's codes in global memory; QX_SH: in shared memory where they fit.
    assert!(
        qt.tup_off
            .windows(2)
            .any(|w| w[1] > w[0] && w[1] - w[0] <= QX_SH as u32),
        "no event fits in shared memory"
    );
    // max_rounds 0: the duplicate remover's sequential loop; QX_ROUNDS: its parallel rounds.
    let mut most_rounds = 0;
    let runs = modes.iter().flat_map(|m| {
        [
            (m, 0u32, QX_ROUNDS),
            (m, QX_SH as u32, QX_ROUNDS),
            (m, QX_SH as u32, 0),
        ]
    });
    for (&mode, sh_cap, max_rounds) in runs {
        // The cells' tuple lists on the device, as the step builds them (every tuple listed).
        let coff_u: Vec<u32> = coff.iter().map(|&x| x as u32).collect();
        let dl = cell_track_lists(
            lib,
            mode,
            &qt.tup_off,
            u32::MAX,
            &coff_u[..n_tup],
            &coff_u[1..],
            &cv,
            &qt.cell_off,
            &qt.list_base,
            cv.len(),
            per_list,
        );
        assert!(
            !dl.bad
                && dl
                    .non_empty
                    .iter()
                    .all(|&k| (k as u64) < cfg.ntuplets.max_active_doublets as u64),
            "{name}: the step would hand the batch to the CPU"
        );
        let (counts, first, base, vals) = &dl.raw;
        let hoff_u: Vec<u32> = hoff.iter().map(|&x| x as u32).collect();
        let mut got = quality.clone();
        let (mut h2o, mut h2b, mut cl) = (
            vec![0u32; n_hits + n_ev],
            vec![0u32; n_th.max(1)],
            vec![0u32; n_cells.max(1)],
        );
        let (mut win, mut killed, mut r) = (
            vec![0u32; n_cells.max(1)],
            vec![0u32; n_tup],
            vec![0u32; n_ev],
        );
        let threads = if mode == Mode::Sequential {
            1
        } else {
            EMU_BLOCK
        };
        assert!(QX_BLOCK >= threads);
        HostLaunch::new(args::QxQuality::<HostLaunch> {
            n_events: &(n_ev as u32),
            tup_off: &qt.tup_off,
            thit_off: &hoff_u,
            thits: &hv,
            state: &state,
            pt: &pt,
            chi2: &chi2,
            cuts: &cuts,
            cell_off: &qt.cell_off,
            ct_count: counts,
            ct_first: first,
            ct_base: base,
            per_list: &per_list,
            ct_vals: vals,
            dead: &dead,
            late_fishbone: &(late as u32),
            hit_off: &qt.hit_off,
            h2t_off_all: &mut h2o,
            h2t_bins_all: &mut h2b,
            cl_all: &mut cl,
            win_all: &mut win,
            killed_all: &mut killed,
            sh_cap: &sh_cap,
            max_rounds: &max_rounds,
            rounds_all: &mut r,
            q_all: &mut got,
        })
        .run(lib, n_ev as u32, threads, mode == Mode::Threaded);
        if max_rounds == 0 {
            assert!(
                r.iter().all(|&x| x == u32::MAX),
                "{name}: max_rounds 0 must run the sequential loop"
            );
        } else {
            assert!(
                r.iter().all(|&x| x <= QX_ROUNDS),
                "{name}: an event did not settle in {QX_ROUNDS} rounds: {r:?}"
            );
            most_rounds = most_rounds.max(r.iter().copied().max().unwrap_or(0));
        }
        for (e, want) in expected.iter().enumerate() {
            let have = &got[qt.tup_off[e] as usize..qt.tup_off[e + 1] as usize];
            let differ = have.iter().zip(want).filter(|(x, y)| x != y).count();
            assert!(differ == 0 && have.len() == want.len(), "{name} ({mode:?}, sh_cap {sh_cap}, max_rounds {max_rounds}) event {e}: {differ} of {} qualities differ", want.len());
        }
        // The list overflows the step reports are the CPU replay's.
        for (e, (_, ca, _, _)) in per_event.iter().enumerate() {
            let replay = quiver_reco::tracks::ca_state_for_quality(
                &alive[cell_ev[e] as usize..cell_ev[e + 1] as usize],
                &ca.tuple_cells,
                &ca.tuple_cell_offsets,
                cfg,
            )
            .unwrap();
            assert_eq!(
                dl.dropped[e], replay.track_overflows,
                "{name} event {e}: list overflows"
            );
        }
    }
    let all: Vec<u8> = expected.into_iter().flatten().collect();
    let count = |f: &dyn Fn(u8) -> bool| all.iter().filter(|&&x| f(x)).count();
    let r = (n_tup, count(&|x| x >= 2), count(&|x| x == 1));
    let killed = alive.iter().filter(|&&a| !a).count();
    println!("quality {name}: {} tracks, {} loose, {} dup; {killed} cells killed by the fishbones; duplicate remover settled in ≤ {most_rounds} rounds", r.0, r.1, r.2);
    // Some cell's winner depends on an earlier cell's choice (else one round would do and the
    // iteration would be untested).
    assert!(
        most_rounds >= 2,
        "{name}: the duplicate remover settled in {most_rounds} round(s)"
    );
    assert!(
        !late || killed > 0,
        "{name}: the late fishbone killed no cell"
    );
    r
}

#[test]
fn quality_kernel_on_the_host_equals_the_cpu_step() {
    if emulator().is_none() {
        return;
    }
    let (n, loose, dup) = check_quality(
        "default",
        &CaConfig::default(),
        &[Mode::Sequential, Mode::Threaded],
        0.0,
    );
    assert!(
        n > 5_000 && loose > 500 && dup > 1_000,
        "{n} tracks, {loose} loose, {dup} dup"
    );
    // The late fishbone (alone: with the early one too it finds nothing left to kill here).
    let mut cfg = CaConfig::default();
    cfg.ntuplets.late_fishbone = true;
    cfg.ntuplets.early_fishbone = false;
    check_quality(
        "late fishbone only",
        &cfg,
        &[Mode::Sequential, Mode::Threaded],
        0.0,
    );
    // Few tuples per cell (the replayed lists capped), and a tight χ² cut.
    let mut cfg = CaConfig::default();
    cfg.ntuplets.max_cell_tracks = 2;
    cfg.quality.chi2_scale = 3.0;
    check_quality(
        "2 tuples per cell, chi2 scale 3",
        &cfg,
        &[Mode::Sequential],
        0.0,
    );
    // Tips on a 100 µm grid: equal |tip| among the triplets of one hit, where the CPU's
    // bin order (descending tuple index) decides which stays.
    check_quality(
        "tips on a 0.01 cm grid",
        &CaConfig::default(),
        &[Mode::Sequential, Mode::Threaded],
        0.01,
    );
}

/// `cn_check_cells`: the GPU `ca_ntuplets` checks device-resident cells with it (the CPU
/// step's "cell names a hit the event does not have"); it flags nothing on real cells and
/// flags one inner or outer index at its event's hit count.
#[test]
fn check_cells_kernel_flags_a_cell_past_its_event() {
    let Some(lib) = emulator() else { return };
    let (_, ds) = dataset();
    let b = batch();
    let cfg = CaConfig::default();
    let (cells, _) = run_device(lib, Mode::Sequential, &b, &cfg, &ds.conditions().cpe);
    let hit_off: Vec<u32> = std::iter::once(0)
        .chain(b.hits_per_event.iter().scan(0u32, |s, &n| {
            *s += n as u32;
            Some(*s)
        }))
        .collect();
    let n_ev = b.hits_per_event.len() as u32;
    let flag = |inner: &[u32], outer: &[u32]| -> u32 {
        let mut bad = [0u32; 1];
        let check = args::CnCheckCells::<HostLaunch> {
            inner,
            outer,
            n_cells: &(inner.len() as u32),
            cell_off: &cells.cell_off,
            n_events: &n_ev,
            hit_off: &hit_off,
            bad: &mut bad,
        };
        run_elements(lib, Mode::Threaded, inner.len(), HostLaunch::new(check));
        bad[0]
    };
    assert!(cells.inner.len() > 1000);
    assert_eq!(flag(&cells.inner, &cells.outer), 0, "real cells flagged");
    // The last cell of the first event with cells names its event's hit count.
    let e = (0..n_ev as usize)
        .find(|&e| cells.cell_off[e + 1] > cells.cell_off[e])
        .unwrap();
    let c = cells.cell_off[e + 1] as usize - 1;
    let (mut inner, mut outer) = (cells.inner.clone(), cells.outer.clone());
    outer[c] = b.hits_per_event[e] as u32;
    assert_eq!(flag(&cells.inner, &outer), 1, "outer index past the event");
    inner[c] = b.hits_per_event[e] as u32;
    assert_eq!(flag(&inner, &cells.outer), 1, "inner index past the event");
    outer[c] -= 1;
    assert_eq!(
        flag(&cells.inner, &outer),
        0,
        "the event's last hit is a hit"
    );
}

/// The cells' tuple lists and the early duplicate remover on the device (`ct_*`,
/// `nt_early_dup`) equal the CPU's replay and remover (`steps::ntuplet_event`) on random
/// events: tuples of 2 to 6 hits through random cells, lists capped at 3, and a tuple
/// overflow whose emptied last tuple counts as 0 hits. Both thread modes.
#[test]
fn tuple_list_kernels_equal_the_cpu_replay_on_random_tuples() {
    let Some(lib) = emulator() else { return };
    let mut n = quiver_reco::tracks::NtupletConfig::default();
    (n.max_cell_tracks, n.max_tuples) = (3, 40);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |m: u32| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % m as u64) as u32
    };
    // Per event: cells, found tuples, each tuple's hits and cells (the search's layout: a
    // tuple of k hits has k - 1 cells; the cells of the found tuples one after the other).
    let (mut cell_off, mut tup_off, mut hit_pos) = (vec![0u32], vec![0u32], vec![0u32]);
    let (mut tlen, mut thits, mut tcells, mut cstart, mut cend) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for e in 0..12u32 {
        let nc = 20 + rnd(40);
        let found = if e % 3 == 0 {
            n.max_tuples + 1 + rnd(5)
        } else {
            rnd(n.max_tuples)
        };
        for it in 0..found {
            // The last stored tuple of an overflowing event as long as any: a duplicate only
            // because the overflow empties it.
            let len = if found > n.max_tuples && it + 1 == n.max_tuples {
                6
            } else {
                2 + rnd(5)
            };
            tlen.push(len);
            let cp = tcells.len() as u32;
            for _ in 0..len {
                thits.push(rnd(50));
            }
            // Distinct cells (a path visits a cell once).
            let mut cs: Vec<u32> = Vec::new();
            while cs.len() < (len - 1) as usize {
                let c = rnd(nc);
                if !cs.contains(&c) {
                    cs.push(c);
                }
            }
            tcells.extend_from_slice(&cs);
            if it < n.max_tuples {
                cstart.push(cp);
                cend.push(cp + len - 1);
            } else {
                cstart.push(0);
                cend.push(0);
            }
        }
        cell_off.push(cell_off.last().unwrap() + nc);
        tup_off.push(tup_off.last().unwrap() + found);
        hit_pos.push(thits.len() as u32);
    }
    let n_ev = cell_off.len() - 1;
    let found: Vec<u32> = tup_off.windows(2).map(|w| w[1] - w[0]).collect();
    let base: Vec<u32> = (0..n_ev).map(|e| hit_pos[e] - tup_off[e]).collect();
    let (n_cells, n_tuples) = (*cell_off.last().unwrap() as usize, tlen.len());
    for mode in [Mode::Sequential, Mode::Threaded] {
        let dl = cell_track_lists(
            lib,
            mode,
            &tup_off,
            n.max_tuples,
            &cstart,
            &cend,
            &tcells,
            &cell_off,
            &base,
            tcells.len(),
            n.max_cell_tracks,
        );
        let (mut q, mut has_track) = (vec![0u8; n_tuples], vec![7u8; n_cells]);
        let (counts, first, base, vals) = &dl.raw;
        let dup = args::NtEarlyDup::<HostLaunch> {
            n_cells: &(n_cells as u32),
            cell_off: &cell_off,
            n_events: &(n_ev as u32),
            count: counts,
            first,
            base,
            vals,
            per_list: &n.max_cell_tracks,
            tup_off: &tup_off,
            tuple_len: &tlen,
            found: &found,
            max_tuples: &n.max_tuples,
            q: &mut q,
            has_track: &mut has_track,
        };
        run_elements(lib, mode, n_cells, HostLaunch::new(dup));
        let (mut dups, mut emptied_dup) = (0, 0);
        for e in 0..n_ev {
            let (t0, stored) = (tup_off[e] as usize, found[e].min(n.max_tuples) as usize);
            let cp = (hit_pos[e] - tup_off[e]) as usize;
            let ce = (hit_pos[e + 1] - tup_off[e + 1]) as usize;
            let lengths = &tlen[t0..t0 + stored];
            let nc = (cell_off[e + 1] - cell_off[e]) as usize;
            let (t, ca) = ntuplet_event(
                &n,
                nc,
                found[e],
                lengths,
                &thits[hit_pos[e] as usize..hit_pos[e + 1] as usize],
                &tcells[cp..ce],
                0,
            )
            .unwrap();
            assert_eq!(
                dl.lists[e], ca.cell_tracks,
                "{mode:?} event {e}: tuples per cell"
            );
            assert_eq!(
                dl.dropped[e], ca.track_overflows,
                "{mode:?} event {e}: list overflows"
            );
            let want: Vec<u8> = t.quality.iter().map(|&x| x as u8).collect();
            assert_eq!(
                q[t0..t0 + stored],
                want[..],
                "{mode:?} event {e}: early duplicate remover"
            );
            let has: Vec<u8> = ca
                .cell_tracks
                .iter()
                .map(|l| u8::from(!l.is_empty()))
                .collect();
            assert_eq!(
                has_track[cell_off[e] as usize..cell_off[e + 1] as usize],
                has[..],
                "{mode:?} event {e}: has_track"
            );
            dups += want.iter().filter(|&&x| x == 1).count();
            let last = stored.wrapping_sub(1) as u32;
            emptied_dup += usize::from(
                t.overflow
                    && want.last() == Some(&1)
                    && ca
                        .cell_tracks
                        .iter()
                        .any(|l| l.len() > 1 && l.contains(&last)),
            );
        }
        // The cases the kernels must get right occur: duplicates, capped lists, and an
        // emptied last tuple that is a duplicate only because it is emptied.
        assert!(
            dups > 20 && dl.dropped.iter().sum::<u32>() > 5 && emptied_dup > 0,
            "{dups} dups, {:?} dropped, {emptied_dup}",
            dl.dropped
        );
    }
}

/// `quality_columns` (what the GPU `track_quality` checks on the host) refuses exactly the
/// products the CPU step's `quality_inputs` refuses, on the chain's own products and on
/// damaged copies of them — except a tuple's cell past its event's cells, which the GPU step
/// checks on the device (`ct_count`'s flag) and hands to the CPU step for its message.
#[test]
fn quality_columns_refuse_what_the_cpu_step_refuses() {
    use arrow_array::{
        Array, ArrayRef, ListArray, RecordBatch, UInt16Array, UInt32Array, UInt8Array,
    };
    use quiver_columnar::{
        executor, plan, EventBatch, InputSpec, Product, ProductKey, Registry, Signature, Step,
        StepConfig, StepType,
    };
    use quiver_reco::steps::types::{CA_CELLS, HITS, NTUPLETS, TRACK_FITS};
    use quiver_reco::steps::{check_hit_columns, quality_columns, quality_inputs, HitDets};
    use std::sync::{Arc, Mutex};

    /// The GPU step's host checks of a host `hits` product: its columns (`HostDets`), then
    /// `quality_columns` on its detIndex.
    fn gpu_columns(
        h: &Product,
        n: &Product,
        c: &Product,
        f: &Product,
    ) -> quiver_columnar::Result<()> {
        let det = check_hit_columns(h)?;
        quality_columns(HitDets::new(det, h.offsets())?, n, c, f).map(|_| ())
    }

    /// `p` with column `name` replaced.
    fn with(p: &Product, name: &str, col: ArrayRef) -> Arc<Product> {
        let b = p.batch();
        let mut cols = b.columns().to_vec();
        cols[b.schema().index_of(name).unwrap()] = col;
        Arc::new(
            Product::new(
                RecordBatch::try_new(b.schema(), cols).unwrap(),
                p.offsets().clone(),
            )
            .unwrap(),
        )
    }
    /// A list column of `p` with its values changed by `f`.
    fn list_with(p: &Product, name: &str, f: impl Fn(&mut Vec<u32>)) -> Arc<Product> {
        let l = p
            .batch()
            .column_by_name(name)
            .unwrap()
            .as_any()
            .downcast_ref::<ListArray>()
            .unwrap()
            .clone();
        let mut v = l
            .values()
            .as_any()
            .downcast_ref::<UInt32Array>()
            .unwrap()
            .values()
            .to_vec();
        f(&mut v);
        let (field, offsets, _, nulls) = l.into_parts();
        with(
            p,
            name,
            Arc::new(ListArray::new(
                field,
                offsets,
                Arc::new(UInt32Array::from(v)),
                nulls,
            )),
        )
    }

    /// The cases checked (a step is built from a plain function: no captured state).
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    struct Check {
        keys: [ProductKey; 4],
        cpe: Arc<quiver_formats::conditions::CpeParams>,
    }
    impl Step for Check {
        fn process(&self, batch: &mut EventBatch) -> quiver_columnar::Result<()> {
            let [h, n, c, f] = [0, 1, 2, 3].map(|i| batch.get(&self.keys[i]).unwrap());
            let cfg = CaConfig::default();
            let (n_ev, n_tup) = (h.n_events(), n.batch().num_rows());
            if n_tup < 2 {
                return Ok(());
            }
            let first_hits = h.event_rows(0).len() as u32;
            let det =
                quiver_columnar::columns::values::<arrow_array::types::UInt16Type>(&h, "det_index")
                    .unwrap()
                    .to_vec();
            let q =
                quiver_columnar::columns::values::<arrow_array::types::UInt8Type>(&n, "quality")
                    .unwrap()
                    .to_vec();
            let mut fit_lengths: Vec<usize> = (0..n_ev).map(|e| f.event_rows(e).len()).collect();
            let mut cases: Vec<(&str, [Arc<Product>; 4], bool)> = vec![(
                "as produced",
                [h.clone(), n.clone(), c.clone(), f.clone()],
                true,
            )];
            let mut bad_q = q.clone();
            bad_q[1] = 9;
            cases.push((
                "quality code 9",
                [
                    h.clone(),
                    with(&n, "quality", Arc::new(UInt8Array::from(bad_q))),
                    c.clone(),
                    f.clone(),
                ],
                false,
            ));
            cases.push((
                "tuple hit past the event's hits",
                [
                    h.clone(),
                    list_with(&n, "hits", |v| v[0] = first_hits),
                    c.clone(),
                    f.clone(),
                ],
                false,
            ));
            let mut rev = det.clone();
            rev[..first_hits as usize].reverse();
            cases.push((
                "hits out of layer order",
                [
                    with(&h, "det_index", Arc::new(UInt16Array::from(rev))),
                    n.clone(),
                    c.clone(),
                    f.clone(),
                ],
                false,
            ));
            // One fitted track moved from the first event with tracks to the next event.
            if let Some(e) = (0..n_ev - 1).find(|&e| fit_lengths[e] > 0) {
                fit_lengths[e] -= 1;
                fit_lengths[e + 1] += 1;
                let moved = Arc::new(
                    Product::new(
                        f.batch().clone(),
                        arrow_buffer::OffsetBuffer::from_lengths(fit_lengths),
                    )
                    .unwrap(),
                );
                cases.push((
                    "fits of other events",
                    [h.clone(), n.clone(), c.clone(), moved],
                    false,
                ));
            }
            let mut seen = SEEN.lock().unwrap();
            for (what, [h, n, c, f], accepted) in &cases {
                let cpu = quality_inputs(h, n, c, f, &self.cpe, &cfg).map(|_| ());
                let gpu = gpu_columns(h, n, c, f).map(|_| ());
                assert_eq!(
                    cpu.is_ok(),
                    *accepted,
                    "{what}: the CPU step's inputs: {cpu:?}"
                );
                assert_eq!(
                    gpu.is_ok(),
                    *accepted,
                    "{what}: the GPU step's columns: {:?}",
                    gpu.err()
                );
                seen.push(what.to_string());
            }
            // A tuple's cell past its event's: the CPU's replay refuses it; the GPU step's
            // host checks leave it to the device.
            let n_cells0 = c.event_rows(0).len() as u32;
            let n2 = list_with(&n, "cells", |v| v[0] = n_cells0);
            assert!(
                quality_inputs(&h, &n2, &c, &f, &self.cpe, &cfg).is_err()
                    && gpu_columns(&h, &n2, &c, &f).is_ok()
            );
            Ok(())
        }
    }

    let (dir, _) = dataset();
    let out = tempfile::tempdir().unwrap();
    let job = crate::job_on(dir.path(), out.path().into());
    let mut r = Registry::with_builtin();
    quiver_reco::steps::register(&mut r);
    r.add(StepType {
        name: "quality_columns_check",
        doc: "quality_columns against quality_inputs",
        params: vec![],
        signature: Signature {
            inputs: vec![
                InputSpec::one("hits", HITS, "rec hits"),
                InputSpec::one("ntuplets", NTUPLETS, "tuples"),
                InputSpec::one("cells", CA_CELLS, "cells"),
                InputSpec::one("fits", TRACK_FITS, "fits"),
            ],
            outputs: vec![],
        },
        backends: vec![quiver_columnar::Backend::Cpu],
        build: |cfg: &StepConfig| {
            let keys = [
                cfg.input("hits")?,
                cfg.input("ntuplets")?,
                cfg.input("cells")?,
                cfg.input("fits")?,
            ];
            Ok(Box::new(Check {
                keys,
                cpe: cfg.condition()?,
            }))
        },
    });
    let plan_text = format!(
        "{}\n[[step]]\nlabel = \"check\"\ntype = \"quality_columns_check\"\nhits = \"hits:hits\"\nntuplets = \"ntuplets:ntuplets\"\ncells = \"ntuplets:ca_cells\"\nfits = \"fit:track_fits\"\n",
        include_str!("../../../plans/examples/chain.toml")
    );
    let spec = plan::PlanSpec::from_toml(&plan_text, "check").unwrap();
    let resolved = plan::validate(&spec, &r).unwrap();
    let steps = resolved.build(&r, job).unwrap();
    let opts = executor::RunOptions {
        threads: 1,
        batch_size: 3,
        first_event: 0,
        events: Some(3),
        progress: false,
        cycle_input: false,
    };
    executor::run(&resolved, &steps, &opts).unwrap();
    let seen = SEEN.lock().unwrap();
    assert_eq!(seen.len(), 5, "every case ran: {seen:?}");
}
