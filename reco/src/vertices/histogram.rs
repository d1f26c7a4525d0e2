//! The 1 mm z histogram the clusterings search neighbours in (reference `HistoContainer<uint8_t,
//! 256, 16000>`), reproduced with its exact in-bin order since neighbour ties depend on it.

/// Number of z bins (1 mm each, ±12.8 cm; outside tracks pile up in the edge bins).
pub(crate) const NBINS: usize = 256;

/// Tracks grouped by z bin.
pub(crate) struct ZHist {
    /// Bin of each track.
    pub izt: Vec<u8>,
    /// Start of each bin in `bins`; `off[NBINS]` = number of tracks.
    off: Vec<u32>,
    /// Track indices, by ascending bin, and within a bin by *descending* track index: the
    /// reference fills each bin from its end in track order.
    pub bins: Vec<u32>,
}

/// Bin of a z value: truncation toward zero of z·10 (computed in double as the reference, so
/// (−0.1, 0.1) cm is one 2 mm bin), clamped to the i8 range, shifted to 0..=255.
pub(crate) fn z_bin(z: f32) -> u8 {
    let iz = (z as f64 * 10.0) as i32;
    (iz.clamp(i8::MIN as i32, i8::MAX as i32) - i8::MIN as i32) as u8
}

impl ZHist {
    pub(crate) fn new(zt: &[f32]) -> Self {
        let izt: Vec<u8> = zt.iter().map(|&z| z_bin(z)).collect();
        let mut off = vec![0u32; NBINS + 1];
        for &b in &izt {
            off[b as usize + 1] += 1;
        }
        for b in 0..NBINS {
            off[b + 1] += off[b];
        }
        // Fill from each bin's end, in track order.
        let mut end: Vec<u32> = off[1..].to_vec();
        let mut bins = vec![0u32; zt.len()];
        for (i, &b) in izt.iter().enumerate() {
            end[b as usize] -= 1;
            bins[end[b as usize] as usize] = i as u32;
        }
        Self { izt, off, bins }
    }

    /// Tracks in the bins `b − 1 ..= b + 1` (clipped to the histogram), in histogram order.
    pub(crate) fn around(&self, b: u8) -> &[u32] {
        let lo = (b as usize).saturating_sub(1);
        let hi = (b as usize + 1).min(NBINS - 1);
        &self.bins[self.off[lo] as usize..self.off[hi + 1] as usize]
    }

    /// Range of histogram positions of the bins `b − 1 ..= b + 1` (clipped).
    pub(crate) fn around_range(&self, b: u8) -> std::ops::Range<usize> {
        let lo = (b as usize).saturating_sub(1);
        let hi = (b as usize + 1).min(NBINS - 1);
        self.off[lo] as usize..self.off[hi + 1] as usize
    }

    /// `values` permuted into histogram order, so that a window is a contiguous slice.
    pub(crate) fn gather<T: Copy>(&self, values: &[T]) -> Vec<T> {
        self.bins.iter().map(|&j| values[j as usize]).collect()
    }

    /// Tracks from histogram position `k + 1` to the end of bin `b + 1` (clipped): the
    /// forward-only window of the iterative clustering.
    pub(crate) fn after(&self, k: usize, b: u8) -> &[u32] {
        let hi = (b as usize + 1).min(NBINS - 1);
        let end = self.off[hi + 1] as usize;
        &self.bins[(k + 1).min(end)..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binning_truncates_toward_zero_and_clamps() {
        assert_eq!(z_bin(0.0), 128);
        assert_eq!(z_bin(0.099), 128);
        assert_eq!(z_bin(-0.099), 128);
        assert_eq!(z_bin(0.1), 129);
        assert_eq!(z_bin(-0.15), 127);
        assert_eq!(z_bin(100.0), 255);
        assert_eq!(z_bin(-100.0), 0);
    }

    #[test]
    fn bins_hold_tracks_in_reverse_fill_order() {
        let zt = [0.35, 0.05, 0.31, 0.0, -0.25, 0.33];
        let h = ZHist::new(&zt);
        // bin 128: tracks 1, 3 ; bin 131: tracks 0, 2, 5 ; bin 126: track 4
        assert_eq!(h.bins, vec![4, 3, 1, 5, 2, 0]);
        assert_eq!(h.around(130), &[5, 2, 0]);
        assert_eq!(h.around(127), &[4, 3, 1]);
        assert_eq!(h.around(0), &[] as &[u32]);
        assert_eq!(h.after(3, 131), &[2, 0]);
    }
}
