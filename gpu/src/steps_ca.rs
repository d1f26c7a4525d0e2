//! The GPU implementation of `ca_doublets` (kernels in [`crate::kernels_ca`]): the same
//! parameters, input and product as the CPU step, bit for bit.
//!
//! On the host: each event's layer starts from its hits' detIndex (which also checks their
//! order), and the table of work items; between the count and the write pass, the events'
//! cell counts (one small download) to size the products. Everything else is on the device.
//! Batches whose hits the CPU core rejects are handed to the CPU implementation, which
//! reports its exact error.

use quiver_reco::tracks::doublets::LAYER_PAIRS;

/// The host tables of a batch for the doublet kernels.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DoubletBatch {
    /// Batch hit offset of each event, `n_events + 1` entries.
    pub hit_off: Vec<u32>,
    /// Event-local layer starts, 11 per event.
    pub layer_start: Vec<u32>,
    /// First work item of each (event, pair), `n_events·n_pairs + 1` entries; the items of
    /// (event, pair) are its inner layer's hits, in hit order.
    pub item_start: Vec<u32>,
    /// Layer pairs used (the leading rows of [`LAYER_PAIRS`]).
    pub n_pairs: u32,
}

impl DoubletBatch {
    /// From each event's layer starts and number of hits.
    ///
    /// ```
    /// use quiver_gpu::steps_ca::DoubletBatch;
    /// let ls = [0, 2, 3, 3, 3, 4, 4, 4, 4, 4, 5];
    /// let b = DoubletBatch::new(&[ls, [0; 11]], &[5, 0], 3).unwrap();
    /// assert_eq!(b.hit_off, [0, 5, 5]);
    /// // Pairs (0,1), (0,4), (0,7): two inner hits each, then an empty event.
    /// assert_eq!(b.item_start, [0, 2, 4, 6, 6, 6, 6]);
    /// assert_eq!(b.n_items(), 6);
    /// ```
    pub fn new(layer_starts: &[[u32; 11]], hits_per_event: &[usize], n_pairs: usize) -> Result<Self, String> {
        if layer_starts.len() != hits_per_event.len() {
            return Err(format!("{} layer-start rows for {} events", layer_starts.len(), hits_per_event.len()));
        }
        if n_pairs == 0 || n_pairs > LAYER_PAIRS.len() {
            return Err(format!("{n_pairs} layer pairs, expected 1..={}", LAYER_PAIRS.len()));
        }
        let mut b = DoubletBatch { n_pairs: n_pairs as u32, ..Default::default() };
        b.hit_off.push(0u32);
        b.item_start.push(0u32);
        let (mut hits, mut items) = (0u64, 0u64);
        for (ls, &n) in layer_starts.iter().zip(hits_per_event) {
            if ls.windows(2).any(|w| w[0] > w[1]) || ls[10] as usize > n {
                return Err(format!("layer starts {ls:?} are not non-decreasing up to {n} hits"));
            }
            hits += n as u64;
            b.hit_off.push(u32::try_from(hits).map_err(|_| "more than 2^32 hits in a batch".to_string())?);
            b.layer_start.extend_from_slice(ls);
            for &(inner, _) in &LAYER_PAIRS[..n_pairs] {
                items += (ls[inner as usize + 1] - ls[inner as usize]) as u64;
                b.item_start.push(u32::try_from(items).map_err(|_| "more than 2^32 work items in a batch".to_string())?);
            }
        }
        Ok(b)
    }

    pub fn n_events(&self) -> usize {
        self.hit_off.len() - 1
    }

    pub fn n_hits(&self) -> usize {
        *self.hit_off.last().unwrap_or(&0) as usize
    }

    pub fn n_items(&self) -> usize {
        *self.item_start.last().unwrap_or(&0) as usize
    }
}

/// Each event's cells from its count of doublets passing the cuts: the batch cell offsets
/// (`n_events + 1` entries, at most `max_doublets` cells per event) and whether each event
/// overflowed (more than `max_doublets`, as the CPU search reports it).
///
/// ```
/// use quiver_gpu::steps_ca::cell_offsets;
/// assert_eq!(cell_offsets(&[3, 0, 9], 5).unwrap(), (vec![0, 3, 3, 8], vec![false, false, true]));
/// ```
pub fn cell_offsets(event_total: &[u32], max_doublets: u32) -> Result<(Vec<u32>, Vec<bool>), String> {
    let mut off = Vec::with_capacity(event_total.len() + 1);
    off.push(0u32);
    let mut overflow = Vec::with_capacity(event_total.len());
    for &t in event_total {
        let end = off.last().unwrap_or(&0).checked_add(t.min(max_doublets)).ok_or("more than 2^32 cells in a batch")?;
        off.push(end);
        overflow.push(t > max_doublets);
    }
    Ok((off, overflow))
}
