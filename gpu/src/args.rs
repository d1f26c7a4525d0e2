//! Each kernel's argument list, written once: a struct per kernel whose fields are its
//! parameters, named as in its `.cu` signature and pushed in that order ([`KernelArgs::push`])
//! into a [`KernelSink`]. The GPU steps push them into a device launch (`steps::Launch`,
//! cudarc's launch builder); the emulation tests push the same lists into a host launch
//! that calls the kernel compiled for the host. Both check the names and C types against
//! the signature (`kernels::check_launch`) before anything runs, so a misordered list fails
//! on any machine, and the emulation runs exactly the order the device gets.

use crate::kernels::CType;

/// Where a kernel's named arguments go, in the kernel's parameter order. `In<T>` and
/// `Out<T>` are how that side holds a buffer of `T` that the kernel reads or writes: device
/// views for a launch on the GPU, host slices for the emulation.
pub trait KernelSink<'a> {
    type In<T: CType + 'a>: ?Sized + 'a;
    type Out<T: CType + 'a>: ?Sized + 'a;
    /// A buffer the kernel only reads (`const T*`).
    fn input<T: CType + 'a>(&mut self, name: &'static str, v: &'a Self::In<T>);
    /// A buffer the kernel writes (`T*`).
    fn output<T: CType + 'a>(&mut self, name: &'static str, v: &'a mut Self::Out<T>);
    /// A scalar passed by value.
    fn value<T: CType + cudarc::driver::DeviceRepr + 'a>(&mut self, name: &'static str, v: &'a T);
}

/// A kernel's argument list ([`kernel_args!`]): the kernel's name and the push of every
/// argument, in order, into a sink.
pub trait KernelArgs<'a, S: KernelSink<'a>> {
    const KERNEL: &'static str;
    fn push(self, sink: &mut S);
}

/// Declares one struct per kernel: `in name: T` a `const T*`, `out name: T` a `T*`,
/// `val name: T` a scalar, in the order of the kernel's parameters. The same list gives
/// [`lists`]: every kernel's (name, C type) pairs, checked against the sources without a
/// device.
macro_rules! kernel_args {
    ($(
        $(#[$doc:meta])*
        $name:ident = $kernel:literal { $($dir:ident $field:ident: $t:ty),* $(,)? }
    )*) => {
        $(
            $(#[$doc])*
            pub struct $name<'a, S: KernelSink<'a>> {
                $(pub $field: kernel_args!(@ty $dir 'a S $t),)*
            }
            impl<'a, S: KernelSink<'a>> KernelArgs<'a, S> for $name<'a, S> {
                const KERNEL: &'static str = $kernel;
                fn push(self, sink: &mut S) {
                    $(kernel_args!(@push $dir sink $field self.$field);)*
                }
            }
        )*
        /// Every kernel with an argument list here: its name and the (parameter, C type)
        /// pairs its list passes.
        pub fn lists() -> Vec<(&'static str, Vec<(&'static str, String)>)> {
            vec![$(($kernel, vec![$((stringify!($field), kernel_args!(@c $dir $t)),)*]),)*]
        }
    };
    (@ty in $a:lifetime $s:ident $t:ty) => { &$a $s::In<$t> };
    (@ty out $a:lifetime $s:ident $t:ty) => { &$a mut $s::Out<$t> };
    (@ty val $a:lifetime $s:ident $t:ty) => { &$a $t };
    (@push in $sink:ident $f:ident $v:expr) => { $sink.input(stringify!($f), $v) };
    (@push out $sink:ident $f:ident $v:expr) => { $sink.output(stringify!($f), $v) };
    (@push val $sink:ident $f:ident $v:expr) => { $sink.value(stringify!($f), $v) };
    (@c val $t:ty) => { <$t as CType>::C.to_string() };
    (@c $dir:ident $t:ty) => { format!("{}*", <$t as CType>::C) };
}

kernel_args! {
    /// `raw_to_digis.cu`: one thread per payload word.
    RawToDigis = "raw_to_digis" {
        in words: u32,
        val n_words: u32,
        in seg_start: u32,
        in seg_fed: u32,
        val n_seg: u32,
        in c_link: u32,
        in c_roc: u32,
        in c_raw_id: u32,
        in c_roc_in_det: u32,
        in c_module_id: u32,
        in c_bad_rocs: u8,
        in c_mod_to_unp: u8,
        val c_size: u32,
        val use_quality: u32,
        out xx: u16,
        out yy: u16,
        out adc_out: u16,
        out module_out: u16,
        out raw_id_out: u32,
        out pdigi_out: u32,
        out err_count: u32,
        out err_index: u32,
        out err_type: u8,
        out err_raw: u32,
        out status: u32,
    }

    /// `calibrate.cu`: one thread per digi.
    Calibrate = "calibrate" {
        in module_in: u16,
        in xx: u16,
        in yy: u16,
        in adc_in: u16,
        val n: u32,
        in range_first: u32,
        in range_last: u32,
        in range_cols: i32,
        val n_ranges: u32,
        in data: u8,
        val data_len: u64,
        val min_ped: f32,
        val min_gain: f32,
        val ped_precision: f32,
        val gain_precision: f32,
        val rows_averaged: u32,
        val dead_flag: u32,
        val noisy_flag: u32,
        val is_run2: u32,
        val l1_modules: u32,
        val gain_l1: f32,
        val offset_l1: f32,
        val gain_other: f32,
        val offset_other: f32,
        val min_electrons: i32,
        out module_out: u16,
        out adc_out: u16,
        out status: u32,
    }

    /// `clusterize.cu`: every digi's event-local index.
    ClusInit = "clus_init" {
        out clus: i32,
        val n: u32,
        in event_offsets: u32,
        val n_events: u32,
    }

    /// `clusterize.cu`: one block per run slot.
    Clusterize = "clusterize" {
        in module: u16,
        in xx: u16,
        in yy: u16,
        in run_first: u32,
        in run_end: u32,
        in run_base: u32,
        out clus_all: i32,
        out bins_all: u32,
        out found_out: u32,
    }

    /// `module_runs.cu`: the run start flags, one thread per digi.
    MrFlag = "mr_flag" {
        in module: u16,
        in xx: u16,
        in yy: u16,
        val n: u32,
        in event_offsets: u32,
        val n_events: u32,
        out start: u32,
        out status: u32,
    }

    /// `module_runs.cu`: each run start writes its run slot.
    MrFill = "mr_fill" {
        in module: u16,
        val n: u32,
        in event_offsets: u32,
        val n_events: u32,
        in start: u32,
        in pos: u32,
        val max_pix: u32,
        out run_first: u32,
        out run_end: u32,
        out run_base: u32,
        out run_module: u16,
        out worst: u32,
        out over: u32,
        out cut: u64,
    }

    /// `module_runs.cu`: whether each table row's first digi is of its module.
    RunCheck = "run_check" {
        in module: u16,
        val n_rows: u32,
        in row_first: u32,
        in row_module: u16,
        out status: u32,
    }

    /// `module_runs.cu`: each host run's end.
    RunEnds = "run_ends" {
        in module: u16,
        val n_runs: u32,
        in run_first: u32,
        in run_module: u16,
        in run_limit: u32,
        out run_end: u32,
    }

    /// `module_runs.cu`: each run slot's end.
    SlotEnds = "slot_ends" {
        in module: u16,
        val n_slots: u32,
        val slots_per_event: u32,
        in slot_first: u32,
        in slot_module: u16,
        in slot_nclus: u32,
        in event_offsets: u32,
        out slot_end: u32,
    }

    /// `cluster_charge_cut.cu`: one block per run, modules and clusters cut in place.
    ChargeCut = "charge_cut" {
        out module: u16,
        out clus: i32,
        in adc: u16,
        in run_first: u32,
        in run_end: u32,
        in run_nclus: u32,
        in run_module: u16,
        val max_per_module: u32,
        val l1_modules: u32,
        val min_charge_l1: i32,
        val min_charge: i32,
        out ncl_out: u32,
    }

    /// `rechits.cu`: one block per run.
    RecHits = "rechits" {
        in module: u16,
        in clus: i32,
        in xx: u16,
        in yy: u16,
        in adc: u16,
        in run_first: u32,
        in run_end: u32,
        in run_nclus: u32,
        in run_me: u16,
        in run_hit: u32,
        in beam: f32,
        val beam_stride: u32,
        val cap: u32,
        in det: f32,
        val thickness_b: f32,
        val thickness_e: f32,
        val pitch_x: f32,
        val pitch_y: f32,
        out x_local: f32,
        out y_local: f32,
        out xerr_local: f32,
        out yerr_local: f32,
        out x_global: f32,
        out y_global: f32,
        out z_global: f32,
        out r_global: f32,
        out iphi: i16,
        out charge: i32,
        out size_x: i16,
        out size_y: i16,
        out det_index: u16,
        out status: u32,
    }

    /// `vertices.cu`: one block per event, the whole vertex finding.
    VxFind = "vx_find" {
        in sel_off: u32,
        val n_events: u32,
        in zt_all: f32,
        in ezt2_all: f32,
        in ptt2_all: f32,
        val mode: u32,
        val min_t: i32,
        val eps: f32,
        val errmax: f32,
        val chi2max: f32,
        val chi2_first: f32,
        val chi2_split: f32,
        val chi2_final: f32,
        out izt_all: u32,
        out bins_all: u32,
        out off_all: u32,
        out nn_all: i32,
        out ptr_all: i32,
        out iv_all: i32,
        out s_it_all: u32,
        out s_zz_all: f32,
        out s_ww_all: f32,
        out s_new_all: u8,
        out zv_all: f32,
        out wv_all: f32,
        out chi2_all: f32,
        out ndof_all: i32,
        out ptv2_all: f32,
        out sort_all: u16,
        out nv_out: u32,
        out err: u32,
    }

    /// `track_fit.cu`: one thread per job, the Broken Line fit (`track_fit_riemann` takes
    /// the same list: [`TrackFit::RIEMANN`]).
    TrackFit = "track_fit_bl" {
        val n_jobs: u32,
        in job_hits: u32,
        in job_n: u8,
        in x: f32,
        in y: f32,
        in z: f32,
        in xerr: f32,
        in yerr: f32,
        in det: u16,
        in frames: f32,
        val b_field: f32,
        out out: f32,
        val write_raw: u32,
        out raw: f64,
    }

    /// `track_fit.cu`: each job's hits from the tuples' hit lists.
    FitJobHits = "fit_job_hits" {
        val n_jobs: u32,
        in job_row: u32,
        in job_n: u8,
        val n_events: u32,
        in tup_off: u32,
        in hit_start: u32,
        in list_off: u32,
        in list_hits: u32,
        out job_hits: u32,
    }

    /// `track_fit.cu`: each job's values into its tuple's row.
    FitScatter = "fit_scatter" {
        val n_jobs: u32,
        in job_row: u32,
        in vals: f32,
        val inv_b: f32,
        out state: f32,
        out pt: f32,
        out chi2: f32,
    }

    /// `track_quality.cu`: one block per event, classification and cleaners.
    QxQuality = "qx_quality" {
        val n_events: u32,
        in tup_off: u32,
        in thit_off: u32,
        in thits: u32,
        in state: f32,
        in pt: f32,
        in chi2: f32,
        in cuts: f32,
        in cell_off: u32,
        in ct_count: u32,
        in ct_first: u32,
        in ct_base: u32,
        val per_list: u32,
        in ct_vals: u32,
        in dead: u8,
        val late_fishbone: u32,
        in hit_off: u32,
        out h2t_off_all: u32,
        out h2t_bins_all: u32,
        out cl_all: u32,
        out win_all: u32,
        out killed_all: u32,
        val sh_cap: u32,
        val max_rounds: u32,
        out rounds_all: u32,
        out q_all: u8,
    }

    /// `ca_doublets.cu`: each layer's φ-bin counts, one thread per hit
    CaBinCount = "ca_bin_count" {
        in det: u16,
        in iphi: i16,
        val n_hits: u32,
        in hit_off: u32,
        in layer_start: u32,
        val n_events: u32,
        out bin_count: u32,
    }

    /// `ca_doublets.cu`: the bins' starts, one thread per event
    CaBinScan = "ca_bin_scan" {
        in bin_count: u32,
        in hit_off: u32,
        val n_events: u32,
        out bin_start: u32,
        out cursor: u32,
    }

    /// `ca_doublets.cu`: each hit into its bin
    CaBinFill = "ca_bin_fill" {
        in det: u16,
        in iphi: i16,
        val n_hits: u32,
        in hit_off: u32,
        in layer_start: u32,
        val n_events: u32,
        out cursor: u32,
        out packed_idx: u32,
    }

    /// `ca_doublets.cu`: each bin sorted by descending hit index, its hits packed
    CaBinSort = "ca_bin_sort" {
        in bin_start: u32,
        val n_events: u32,
        in hit_off: u32,
        in z: f32,
        in r: f32,
        in iphi: i16,
        in size_y: i16,
        out packed_idx: u32,
        out packed_z: f32,
        out packed_r: f32,
        out packed_iphi: i16,
        out packed_sy: i16,
    }

    /// `ca_doublets.cu`: the candidate scan of every work item: count, or write at the scanned places
    CaDoublets = "ca_doublets" {
        val write: u32,
        val n_items: u32,
        in item_start: u32,
        val n_pairs: u32,
        val n_events: u32,
        in hit_off: u32,
        in layer_start: u32,
        in z: f32,
        in r: f32,
        in iphi: i16,
        in size_y: i16,
        in det: u16,
        in bin_start: u32,
        in packed_idx: u32,
        in packed_z: f32,
        in packed_r: f32,
        in packed_iphi: i16,
        in packed_sy: i16,
        in pair_i: i32,
        in pair_f: f32,
        val flags: u32,
        val z0_cut: f32,
        val dzdr_fact: f32,
        val min_radius2_t4: f32,
        val i2p: f32,
        val max_dy_pred: i32,
        val max_doublets: u32,
        out item_count: u32,
        in item_first: u32,
        in cell_off: u32,
        out out_inner: u32,
        out out_outer: u32,
        out out_pair: u8,
    }

    /// `ca_doublets.cu`: the work items' first cells and the events' totals, one block per event
    CaItemScan = "ca_item_scan" {
        in item_count: u32,
        in item_start: u32,
        val n_pairs: u32,
        out item_first: u32,
        out event_total: u32,
    }

    /// `ca_doublets.cu`: the cells per outer hit
    CaListedCount = "ca_listed_count" {
        in outer: u32,
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        in hit_off: u32,
        out outer_count: u32,
    }

    /// `ca_doublets.cu`: the cells listed on their outer hits
    CaListed = "ca_listed" {
        in outer: u32,
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        in hit_off: u32,
        in outer_count: u32,
        val max_cells_per_hit: u32,
        out listed: u8,
    }

    /// `ca_doublets.cu`: the first cells of the overfull hits, one thread per hit
    CaListedOverfull = "ca_listed_overfull" {
        in outer: u32,
        in cell_off: u32,
        val n_events: u32,
        in hit_off: u32,
        val n_hits: u32,
        in outer_count: u32,
        val max_cells_per_hit: u32,
        out listed: u8,
    }

    /// `ca_doublets.cu`: per event, the cells not listed and the fullest hit
    CaOverflowStats = "ca_overflow_stats" {
        in outer_count: u32,
        val n_hits: u32,
        in hit_off: u32,
        in listed: u8,
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        out unlisted: u32,
        out worst: u32,
    }

    /// `ca_ntuplets.cu`: whether every cell names existing hits of its event
    CnCheckCells = "cn_check_cells" {
        in inner: u32,
        in outer: u32,
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        in hit_off: u32,
        out bad: u32,
    }

    /// `ca_ntuplets.cu`: the cells per inner (or outer) hit
    CnIndexCount = "cn_index_count" {
        in key: u32,
        val filter: u32,
        in only: u8,
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        in hit_off: u32,
        out count: u32,
    }

    /// `ca_ntuplets.cu`: the hits' first cells, one thread per event
    CnIndexScan = "cn_index_scan" {
        in count: u32,
        in hit_off: u32,
        in cell_off: u32,
        val n_events: u32,
        out start: u32,
        out cursor: u32,
    }

    /// `ca_ntuplets.cu`: each cell into its hit's list
    CnIndexFill = "cn_index_fill" {
        in key: u32,
        val filter: u32,
        in only: u8,
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        in hit_off: u32,
        out cursor: u32,
        out index: u32,
    }

    /// `ca_ntuplets.cu`: each hit's cells in index order
    CnIndexRank = "cn_index_rank" {
        in start: u32,
        val n_hits: u32,
        in index: u32,
        out sorted: u32,
    }

    /// `ca_ntuplets.cu`: each listed cell's neighbours: count, or write at the scanned places
    CnConnect = "cn_connect" {
        val write: u32,
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        in hit_off: u32,
        in x: f32,
        in y: f32,
        in z: f32,
        in r: f32,
        in det: u16,
        in inner: u32,
        in outer: u32,
        in listed: u8,
        in start: u32,
        in by_inner: u32,
        val ptmin: f32,
        val theta_barrel: f32,
        val theta_forward: f32,
        val dca_inner: f32,
        val dca_outer: f32,
        val hard_curv: f32,
        out count: u32,
        in first: u32,
        in push_off: u32,
        out out: u32,
        out used: u8,
        out kept: u32,
    }

    /// `ca_ntuplets.cu`: the fishbone, one thread per hit
    NtFishbone = "nt_fishbone" {
        val n_hits: u32,
        in hit_off: u32,
        val n_events: u32,
        in cell_off: u32,
        in x: f32,
        in y: f32,
        in z: f32,
        in det: u16,
        in inner: u32,
        in start: u32,
        in by_outer: u32,
        in used: u8,
        val check_track: u32,
        in has_track: u8,
        out dead: u8,
    }

    /// `ca_ntuplets.cu`: the depth-first search from every starting cell: count, or write
    NtSearch = "nt_search" {
        val write: u32,
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        in inner: u32,
        in outer: u32,
        in pair: u8,
        in dead: u8,
        in ncount: u32,
        in first: u32,
        in push_off: u32,
        in nbr: u32,
        val per_list: u32,
        val min_hits: u32,
        val max_tuples: u32,
        out n_tuples: u32,
        out n_hits: u32,
        in tuple_first: u32,
        in hit_first: u32,
        in tuple_off: u32,
        in hit_off_out: u32,
        out tuple_len: u32,
        out tuple_cstart: u32,
        out tuple_cend: u32,
        out out_hits: u32,
        out out_cells: u32,
        out error: u32,
    }

    /// `ca_ntuplets.cu`: the neighbour lists' statistics
    NtListStats = "nt_list_stats" {
        in count: u32,
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        val per_list: u32,
        out non_empty: u32,
        out dropped: u32,
    }

    /// `ca_ntuplets.cu`: the early duplicate remover, one thread per cell
    NtEarlyDup = "nt_early_dup" {
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        in count: u32,
        in first: u32,
        in base: u32,
        in vals: u32,
        val per_list: u32,
        in tup_off: u32,
        in tuple_len: u32,
        in found: u32,
        val max_tuples: u32,
        out q: u8,
        out has_track: u8,
    }

    /// `ca_ntuplets.cu`: the tuples' hit-list offsets
    NtListOffsets = "nt_list_offsets" {
        val n: u32,
        in first: u32,
        in total: u32,
        out hit_off: u32,
        out cell_off: u32,
    }

    /// `ca_ntuplets.cu`: the cells' alive flags packed into bits
    NtAliveBits = "nt_alive_bits" {
        in dead: u8,
        val n_cells: u32,
        out words: u32,
    }

    /// `ca_ntuplets.cu`: the tuples per cell
    CtCount = "ct_count" {
        val n_tuples: u32,
        in tup_off: u32,
        val n_events: u32,
        val limit: u32,
        in cstart: u32,
        in cend: u32,
        in cells: u32,
        in cell_off: u32,
        out count: u32,
        out bad: u32,
    }

    /// `ca_ntuplets.cu`: each tuple into its cells' lists
    CtFill = "ct_fill" {
        val n_tuples: u32,
        in tup_off: u32,
        val n_events: u32,
        val limit: u32,
        in cstart: u32,
        in cend: u32,
        in cells: u32,
        in cell_off: u32,
        in first: u32,
        in base: u32,
        out cursor: u32,
        out vals: u32,
    }

    /// `ca_ntuplets.cu`: each cell's list sorted by tuple index
    CtSort = "ct_sort" {
        val n_cells: u32,
        in cell_off: u32,
        val n_events: u32,
        in count: u32,
        in first: u32,
        in base: u32,
        out vals: u32,
    }

    /// `ca_ntuplets.cu`: the segmented scan's tile sums.
    SgTileSum = "sg_tile_sum" {
        in value: u32,
        in seg_off: u32,
        val tiles: u32,
        val tile: u32,
        out tile_sum: u32,
    }

    /// `ca_ntuplets.cu`: the segmented scan within each tile, offset by the tiles before.
    SgTileScan = "sg_tile_scan" {
        in value: u32,
        in seg_off: u32,
        val tiles: u32,
        val tile: u32,
        in tile_sum: u32,
        out first: u32,
        out total: u32,
    }
}

/// Kernels launched with another kernel's list: (kernel, the kernel whose list it takes).
pub const SHARED_LISTS: &[(&str, &str)] = &[("track_fit_riemann", "track_fit_bl")];

impl<'a, S: KernelSink<'a>> TrackFit<'a, S> {
    /// The Riemann fit's kernel: the same parameters as the Broken Line's.
    pub const RIEMANN: &'static str = SHARED_LISTS[0].0;
    /// The kernel of the fit `riemann` selects.
    pub fn kernel(riemann: bool) -> &'static str {
        if riemann {
            Self::RIEMANN
        } else {
            <Self as KernelArgs<'a, S>>::KERNEL
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::check_launch;

    #[test]
    fn every_argument_list_matches_its_kernel_signature() {
        let lists = lists();
        assert_eq!(lists.len(), 43);
        for (kernel, args) in &lists {
            check_launch(kernel, args).unwrap_or_else(|e| panic!("{e}"));
        }
        for (kernel, of) in SHARED_LISTS {
            let args = &lists.iter().find(|l| l.0 == *of).unwrap().1;
            check_launch(kernel, args).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn a_list_with_two_same_typed_arguments_swapped_fails_the_check() {
        let (_, mut args) = lists().into_iter().find(|(k, _)| *k == "rechits").unwrap();
        // `x_global` and `y_global`, both float*: the types alone cannot tell them apart.
        args.swap(22, 23);
        let e = check_launch("rechits", &args).unwrap_err().to_string();
        assert!(
            e.contains(
                "argument 23 is passed as 'y_global' but the kernel's parameter is 'x_global'"
            ),
            "{e}"
        );
    }
}
