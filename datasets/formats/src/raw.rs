//! Raw data as the reconstruction reads it: per event, the FEDs' ids and bytes in product
//! order. The `read_raw` source step takes a [`RawData`] from the job's conditions, so the
//! reconstruction reads a dataset without depending on the crate that writes one (a
//! `quiver_datasets::Dataset` is a [`RawSource`]).

use std::ops::Range;
use std::sync::Arc;

/// One event's raw data: (FED id, bytes) in product order.
pub type RawEvent<'a> = Vec<(u32, &'a [u8])>;

/// Something that holds the raw data of a run of events (a dataset directory, memory).
pub trait RawSource: Send + Sync {
    /// Number of events.
    fn n_events(&self) -> usize;
    /// The raw data of events `range`; the error names the file and what is wrong.
    fn raw_events(&self, range: Range<usize>) -> Result<Vec<RawEvent<'_>>, String>;
}

/// The raw data of a job, as a condition (the conditions store is keyed by type).
///
/// ```
/// use quiver_formats::raw::{RawData, RawEvent, RawSource};
/// struct Memory(Vec<Vec<(u32, Vec<u8>)>>);
/// impl RawSource for Memory {
///     fn n_events(&self) -> usize { self.0.len() }
///     fn raw_events(&self, r: std::ops::Range<usize>) -> Result<Vec<RawEvent<'_>>, String> {
///         let events = self.0.get(r.clone()).ok_or_else(|| format!("events {r:?} of {}", self.0.len()))?;
///         Ok(events.iter().map(|e| e.iter().map(|(f, b)| (*f, b.as_slice())).collect()).collect())
///     }
/// }
/// let raw = RawData::new(Memory(vec![vec![(1200, vec![0; 8])]]));
/// assert_eq!(raw.source().n_events(), 1);
/// assert_eq!(raw.source().raw_events(0..1).unwrap()[0][0].0, 1200);
/// assert!(raw.source().raw_events(0..2).is_err());
/// ```
#[derive(Clone)]
pub struct RawData(Arc<dyn RawSource>);

impl RawData {
    /// Wraps a source.
    pub fn new(source: impl RawSource + 'static) -> Self {
        RawData(Arc::new(source))
    }
    /// The source.
    pub fn source(&self) -> &dyn RawSource {
        self.0.as_ref()
    }
}
