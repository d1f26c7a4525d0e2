//! The host side of the GPU `ca_ntuplets`: one event's products from what the device
//! computed ([`ntuplet_event_listed`]), or with the CPU's list replay where
//! `max_active_doublets` binds ([`ntuplet_event`]); the connect's capped lists
//! ([`capped_neighbors`]). Plain host code, tested without a GPU.

use quiver_reco::tracks::ntuplets::{early_duplicate_remover, CaState, Tuples};
use quiver_reco::tracks::Quality;

use crate::error::GpuError;

/// One event's neighbour lists of the CA connect from what the device computed: for each
/// cell, the number of cells that connect to it (`count`) and those cells by ascending index
/// (`pushed`, list after list, in cell order). Applies the CPU's list capacities: at most
/// `max_cell_neighbors` per list (the first ones, by index), the rest counted as overflows.
/// `None` when `max_active_doublets` would bind (as many non-empty lists as it allows, or
/// more): the lists opened then depend on the CPU's push order across lists, which this
/// does not reproduce — the caller hands such events to the CPU.
///
/// ```
/// use quiver_gpu::steps::capped_neighbors;
/// let (csr, overflows) = capped_neighbors(&[2, 0, 1], &[4, 7, 9], 100, 1).unwrap();
/// assert_eq!((csr.offsets, csr.values, overflows), (vec![0, 1, 1, 2], vec![4, 9], 1));
/// // Two non-empty lists and room for one open list (max_active_doublets 2): the CPU's
/// // push order decides, so no answer here.
/// assert!(capped_neighbors(&[2, 0, 1], &[4, 7, 9], 2, 1).is_none());
/// ```
pub fn capped_neighbors(
    count: &[u32],
    pushed: &[u32],
    max_active_doublets: u32,
    max_cell_neighbors: u32,
) -> Option<(quiver_reco::tracks::doublets::Csr, u32)> {
    // The CPU opens a list at its first push while fewer than max_active_doublets − 1 are
    // open: with fewer non-empty lists than that, every list opens.
    let non_empty = count.iter().filter(|&&c| c > 0).count() as u64;
    if non_empty + 1 > max_active_doublets as u64
        || count.iter().map(|&c| c as u64).sum::<u64>() != pushed.len() as u64
    {
        return None;
    }
    let mut offsets = Vec::with_capacity(count.len() + 1);
    offsets.push(0u32);
    let mut values = Vec::new();
    let (mut at, mut overflows) = (0usize, 0u32);
    for &c in count {
        let keep = c.min(max_cell_neighbors);
        values.extend_from_slice(&pushed[at..at + keep as usize]);
        overflows += c - keep;
        at += c as usize;
        offsets.push(values.len() as u32);
    }
    Some((
        quiver_reco::tracks::doublets::Csr { offsets, values },
        overflows,
    ))
}

/// One event of `ca_ntuplets` from what the device search wrote: `found` tuples in the
/// CPU's order, of which the first `lengths.len()` (at most `max_tuples`) were stored with
/// `lengths[i]` hits each, their `hits` and `cells` (inner to outer, tuple after tuple;
/// longer slices are cut to what the lengths use), and the neighbours the connect dropped
/// past `max_cell_neighbors`. Finishes the search as the CPU's `find_ntuplets` does — the
/// tuple lists of the cells (the CPU's capped lists, filled in tuple order), the tuple
/// overflow (the last stored tuple emptied) — and runs the early duplicate remover: the
/// tuples and a CA state (without its cells) equal to the CPU's.
///
/// ```
/// use quiver_gpu::steps::ntuplet_event;
/// use quiver_reco::tracks::{NtupletConfig, Quality};
/// // Two tuples sharing cell 0: the shorter one is a duplicate.
/// let (t, ca) = ntuplet_event(&NtupletConfig::default(), 4, 2, &[4, 3], &[0, 1, 2, 3, 0, 1, 4], &[0, 1, 2, 0, 3], 0).unwrap();
/// assert_eq!(t.quality, [Quality::Bad, Quality::Dup]);
/// assert_eq!(ca.tuple_cell_offsets, [0, 3, 5]);
/// assert_eq!(ca.cell_tracks.of(0), &[0, 1]);
/// // What the device wrote must hang together; the step reports it as an error naming the event.
/// let n = NtupletConfig::default();
/// assert_eq!(ntuplet_event(&n, 4, 2, &[3, 3, 3], &[0; 9], &[0; 6], 0).unwrap_err().to_string(), "3 tuples stored of 2 found with room for 32768");
/// assert_eq!(ntuplet_event(&n, 4, 1, &[1], &[0], &[], 0).unwrap_err().to_string(), "tuple 0 has 1 hits");
/// assert!(ntuplet_event(&n, 4, 1, &[3], &[0, 1], &[0, 1], 0).unwrap_err().to_string().contains("for tuples of 3 hits"));
/// assert!(ntuplet_event(&n, 2, 1, &[3], &[0, 1, 2], &[0, 5], 0).unwrap_err().to_string().contains("cell 5 of 2"));
/// ```
pub fn ntuplet_event(
    n: &quiver_reco::tracks::NtupletConfig,
    n_cells: usize,
    found: u32,
    lengths: &[u32],
    hits: &[u32],
    cells: &[u32],
    neighbor_overflows: u32,
) -> std::result::Result<(Tuples, CaState), GpuError> {
    let (mut t, mut ca) = stored_tuples(n, found, lengths, hits, cells, neighbor_overflows)?;
    // The lists from the cells as the search wrote them (the overflow empties hits only).
    let (tc, tco) = (
        std::mem::take(&mut ca.tuple_cells),
        std::mem::take(&mut ca.tuple_cell_offsets),
    );
    ca.replay_tracks_of(n_cells, &tc, &tco, n)
        .map_err(|e| GpuError::Layout(e.to_string()))?;
    (ca.tuple_cells, ca.tuple_cell_offsets) = (tc, tco);
    early_duplicate_remover(&ca, &mut t);
    Ok((t, ca))
}

/// [`ntuplet_event`] where the device built the cells' tuple lists and ran the early
/// duplicate remover (`ct_*`, `nt_early_dup` in [`crate::kernels_ca::CA_NTUPLETS`]): the
/// tuples with the device's quality codes (one per stored tuple) and the CA state with the
/// list overflows the device counted (`track_overflows`); the state carries no lists (the
/// product does not either).
///
/// ```
/// use quiver_gpu::steps::{ntuplet_event, ntuplet_event_listed};
/// use quiver_reco::tracks::NtupletConfig;
/// let n = NtupletConfig::default();
/// let (l, h, c) = ([4, 3], [0, 1, 2, 3, 0, 1, 4], [0, 1, 2, 0, 3]);
/// let (t, ca) = ntuplet_event(&n, 4, 2, &l, &h, &c, 0).unwrap();
/// let (dt, dca) = ntuplet_event_listed(&n, 2, &l, &h, &c, &[0, 1], 0, 0).unwrap();
/// assert_eq!((t, ca.tuple_cell_offsets), (dt, dca.tuple_cell_offsets));
/// assert_eq!(ntuplet_event_listed(&n, 2, &l, &h, &c, &[0, 9], 0, 0).unwrap_err().to_string(), "tuple 1: quality code 9");
/// ```
#[allow(clippy::too_many_arguments)]
pub fn ntuplet_event_listed(
    n: &quiver_reco::tracks::NtupletConfig,
    found: u32,
    lengths: &[u32],
    hits: &[u32],
    cells: &[u32],
    quality: &[u8],
    neighbor_overflows: u32,
    track_overflows: u32,
) -> std::result::Result<(Tuples, CaState), GpuError> {
    let (mut t, mut ca) = stored_tuples(n, found, lengths, hits, cells, neighbor_overflows)?;
    if quality.len() != t.len() {
        return Err(GpuError::Layout(format!(
            "{} quality codes for {} tuples",
            quality.len(),
            t.len()
        )));
    }
    for (i, (q, &code)) in t.quality.iter_mut().zip(quality).enumerate() {
        *q = Quality::from_u8(code)
            .filter(|q| *q <= Quality::Dup)
            .ok_or_else(|| GpuError::Layout(format!("tuple {i}: quality code {code}")))?;
    }
    ca.track_overflows = track_overflows;
    Ok((t, ca))
}

/// The stored tuples (all bad) and their cells, checked, with the tuple overflow applied.
fn stored_tuples(
    n: &quiver_reco::tracks::NtupletConfig,
    found: u32,
    lengths: &[u32],
    hits: &[u32],
    cells: &[u32],
    neighbor_overflows: u32,
) -> std::result::Result<(Tuples, CaState), GpuError> {
    let stored = lengths.len();
    if stored as u64 > found as u64
        || stored as u64 > n.max_tuples as u64
        || (found > n.max_tuples && stored as u64 != n.max_tuples as u64)
    {
        return Err(GpuError::Layout(format!(
            "{stored} tuples stored of {found} found with room for {}",
            n.max_tuples
        )));
    }
    let mut offsets = Vec::with_capacity(stored + 1);
    let mut cell_offsets = Vec::with_capacity(stored + 1);
    offsets.push(0u32);
    cell_offsets.push(0u32);
    for (i, &l) in lengths.iter().enumerate() {
        if l < 2 || l as usize > quiver_reco::tracks::ntuplets::MAX_DEPTH + 1 {
            return Err(GpuError::Layout(format!("tuple {i} has {l} hits")));
        }
        offsets.push(offsets[i] + l);
        cell_offsets.push(cell_offsets[i] + l - 1);
    }
    let (nh, nc) = (
        *offsets.last().unwrap_or(&0) as usize,
        *cell_offsets.last().unwrap_or(&0) as usize,
    );
    let (Some(hits), Some(cells)) = (hits.get(..nh), cells.get(..nc)) else {
        return Err(GpuError::Layout(format!(
            "{} hits and {} cells for tuples of {nh} hits and {nc} cells",
            hits.len(),
            cells.len()
        )));
    };
    let ca = CaState {
        neighbor_overflows,
        tuple_overflows: found - stored as u32,
        tuple_cells: cells.to_vec(),
        tuple_cell_offsets: cell_offsets,
        ..Default::default()
    };
    let mut t = Tuples {
        offsets,
        hits: hits.to_vec(),
        quality: vec![Quality::Bad; stored],
        overflow: found as usize > stored,
    };
    if t.overflow && !t.is_empty() {
        // As the CPU's (and the reference's) overflow finalisation: the last tuple closes empty.
        let start = t.offsets[stored - 1];
        t.offsets[stored] = start;
        t.hits.truncate(start as usize);
    }
    Ok((t, ca))
}
