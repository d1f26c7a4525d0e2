//! The reference's fixed capacities, by name, and the choice between them and capacities
//! sized from the event.
//!
//! The reference pre-allocates its GPU containers: hits per event, clusters per module,
//! doublets, per-hit cell lists, tuples... A columnar CPU chain has no reason to be bound
//! by them, but the default keeps them, so that products keep matching the reference's
//! wherever it does not overflow. Each step with a capacity takes the parameter
//! `capacities`:
//!
//! - `"reference"` (default): the reference's values; an event that reaches one is
//!   truncated as the reference truncates it, and the step records it in its
//!   `capacity_overflows` product (see [`quiver_columnar::overflow`]), which the run
//!   summary turns into a warning naming the step, the capacity and the events;
//! - `"sized"`: no truncation — every capacity is taken from the event itself.
//!
//! Below the reference's limits both settings give identical products. docs/products.md
//! lists every capacity with its value and what happens when it is reached.

use quiver_columnar::{ParamSpec, Result, StepConfig};

/// How a step sizes its containers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Capacities {
    /// The reference's fixed capacities (truncation recorded as an overflow).
    #[default]
    Reference,
    /// Sized from the event: nothing is truncated.
    Sized,
}

/// Parameter name.
pub const PARAM: &str = "capacities";

impl Capacities {
    /// The `capacities` parameter every step with a capacity declares.
    pub fn param() -> ParamSpec {
        ParamSpec::choice(
            PARAM,
            &["reference", "sized"],
            "\"reference\": the reference's fixed capacities, truncation recorded in capacity_overflows and warned; \
             \"sized\": sized from the event, nothing truncated",
        )
    }

    /// The step's setting (the plan validated it against [`Capacities::param`]; absent means
    /// the reference's).
    pub fn of(cfg: &StepConfig) -> Result<Self> {
        match cfg.params.get(PARAM) {
            None => Ok(Capacities::Reference),
            Some(quiver_columnar::ParamValue::Str(v)) if v == "reference" => {
                Ok(Capacities::Reference)
            }
            Some(quiver_columnar::ParamValue::Str(v)) if v == "sized" => Ok(Capacities::Sized),
            Some(other) => Err(cfg.param_error(
                PARAM,
                format!("{other:?} is not \"reference\" or \"sized\""),
            )),
        }
    }

    /// True for [`Capacities::Sized`].
    pub fn sized(self) -> bool {
        self == Capacities::Sized
    }
}

/// Names of the capacities, as they appear in `capacity_overflows.capacity`.
pub mod names {
    /// FED words decoded per event (`raw_to_digis`, 150 × 2000).
    pub const FED_WORDS: &str = "fed_words_per_event";
    /// Pixels clustered per module run (`clusterize`, 4000).
    pub const PIXELS_PER_MODULE: &str = "pixels_per_module";
    /// Clusters kept per module (`cluster_charge_cut`, 1024).
    pub const CLUSTERS_PER_MODULE: &str = "clusters_per_module";
    /// Hits per event (`rechits`, 48 × 1024; also checked by the tracking steps).
    pub const HITS_PER_EVENT: &str = "hits_per_event";
    /// Doublets (cells) per event (`ca_doublets`, 448 × 1024).
    pub const DOUBLETS: &str = "doublets_per_event";
    /// Cells listed per outer hit (`ca_doublets`, 128).
    pub const CELLS_PER_HIT: &str = "cells_per_hit";
    /// Outer neighbours per cell (`ca_ntuplets`, 36).
    pub const NEIGHBORS_PER_CELL: &str = "neighbors_per_cell";
    /// Tuples per cell (`ca_ntuplets`, 48).
    pub const TUPLES_PER_CELL: &str = "tuples_per_cell";
    /// Cells owning a neighbour or tuple list (`ca_ntuplets`, 64 × 1024).
    pub const ACTIVE_CELLS: &str = "cells_with_lists";
    /// Tuples per event (`ca_ntuplets`, 32 × 1024).
    pub const TUPLES: &str = "tuples_per_event";
    /// Fits per hit multiplicity (`track_fit`, 24 × 1024).
    pub const FITS_PER_MULTIPLICITY: &str = "fits_per_multiplicity";
}

/// The overflow records a step's core results imply, shared by the CPU and GPU adapters.
pub mod records {
    use quiver_columnar::overflow::Overflow;

    use super::names;
    use crate::local::charge_cut::ChargeCutOutput;
    use crate::local::clusterize::Clusters;
    use crate::local::raw_to_digis::error_type;
    use crate::local::PixelError;

    /// FEDs dropped because the event's word capacity was full (their `digi_errors` rows
    /// have type [`error_type::WORD_CAPACITY`]).
    pub fn fed_words(errors: &[PixelError], max_words: usize) -> Option<Overflow> {
        let dropped = errors
            .iter()
            .filter(|e| e.error_type == error_type::WORD_CAPACITY)
            .count() as u64;
        (dropped > 0).then_some(Overflow {
            capacity: names::FED_WORDS,
            limit: max_words as u64,
            demanded: None,
            truncated: dropped,
        })
    }

    /// Module runs cut at `max_pix_in_module` digis.
    pub fn pixels_per_module(c: &Clusters, max_pix: usize) -> Option<Overflow> {
        (c.truncated_runs > 0).then_some(Overflow {
            capacity: names::PIXELS_PER_MODULE,
            limit: max_pix as u64,
            demanded: Some(c.max_run_pixels as u64),
            truncated: c.truncated_pixels,
        })
    }

    /// Modules with more clusters than the cap.
    pub fn clusters_per_module(r: &ChargeCutOutput, max_per_module: u32) -> Option<Overflow> {
        (r.truncated_modules > 0).then_some(Overflow {
            capacity: names::CLUSTERS_PER_MODULE,
            limit: max_per_module as u64,
            demanded: Some(r.max_clusters_in_module as u64),
            truncated: r.truncated_clusters,
        })
    }

    /// Module runs longer than `max_pix` digis, from the digis' modules alone (a run: the
    /// digis from a valid digi of a new module up to the next valid digi of another one),
    /// for steps that do not run the CPU core.
    ///
    /// ```
    /// use quiver_reco::capacity::records::pixel_runs;
    /// let o = pixel_runs(&[3, 3, 3, 9999, 3, 5], 2).unwrap();
    /// assert_eq!((o.demanded, o.truncated), (Some(5), 3));
    /// ```
    pub fn pixel_runs(module: &[u16], max_pix: usize) -> Option<Overflow> {
        let invalid = crate::local::INVALID_MODULE;
        let (mut worst, mut cut, mut runs) = (0usize, 0u64, 0u32);
        let mut first: Option<(usize, u16)> = None;
        let mut close = |start: usize, end: usize| {
            worst = worst.max(end - start);
            if end - start > max_pix {
                runs += 1;
                cut += (end - start - max_pix) as u64;
            }
        };
        for (i, &m) in module.iter().enumerate() {
            if m == invalid {
                continue;
            }
            match first {
                Some((_, cur)) if cur == m => {}
                Some((start, _)) => {
                    close(start, i);
                    first = Some((i, m));
                }
                None => first = Some((i, m)),
            }
        }
        if let Some((start, _)) = first {
            close(start, module.len());
        }
        pixel_run_stats(worst as u64, runs, cut, max_pix)
    }

    /// [`pixel_runs`]' record from its statistics: the longest run, the runs longer than
    /// `max_pix` and the digis cut from them (what a device counts without the host).
    ///
    /// ```
    /// use quiver_reco::capacity::records::pixel_run_stats;
    /// assert_eq!(pixel_run_stats(5, 1, 3, 2).unwrap().truncated, 3);
    /// assert!(pixel_run_stats(2, 0, 0, 2).is_none());
    /// ```
    pub fn pixel_run_stats(
        worst: u64,
        runs_over: u32,
        cut: u64,
        max_pix: usize,
    ) -> Option<Overflow> {
        (runs_over > 0).then_some(Overflow {
            capacity: names::PIXELS_PER_MODULE,
            limit: max_pix as u64,
            demanded: Some(worst),
            truncated: cut,
        })
    }

    /// Modules whose cluster count (before the charge cut) is above the cap.
    ///
    /// ```
    /// use quiver_reco::capacity::records::cluster_counts;
    /// let o = cluster_counts(&[3, 1100, 1030], 1024).unwrap();
    /// assert_eq!((o.demanded, o.truncated), (Some(1100), 82));
    /// ```
    pub fn cluster_counts(counts: &[u32], max_per_module: u32) -> Option<Overflow> {
        let over = counts.iter().filter(|&&c| c > max_per_module);
        let cut: u64 = over.clone().map(|&c| (c - max_per_module) as u64).sum();
        over.max().map(|&m| Overflow {
            capacity: names::CLUSTERS_PER_MODULE,
            limit: max_per_module as u64,
            demanded: Some(m as u64),
            truncated: cut,
        })
    }

    /// Hits beyond `max_hits`, from the clusters per module id (each counted up to
    /// `max_per_module`).
    ///
    /// ```
    /// use quiver_reco::capacity::records::hits_per_event;
    /// let o = hits_per_event(&[3, 5, 2000], 1024, 1000).unwrap();
    /// assert_eq!((o.demanded, o.truncated), (Some(1032), 32));
    /// assert!(hits_per_event(&[3, 5], 1024, 1000).is_none());
    /// ```
    pub fn hits_per_event(
        n_clusters_in_module: &[u32],
        max_per_module: u32,
        max_hits: u32,
    ) -> Option<Overflow> {
        let demanded: u64 = n_clusters_in_module
            .iter()
            .map(|&c| c.min(max_per_module) as u64)
            .sum();
        (demanded > max_hits as u64).then_some(Overflow {
            capacity: names::HITS_PER_EVENT,
            limit: max_hits as u64,
            demanded: Some(demanded),
            truncated: demanded - max_hits as u64,
        })
    }
}
