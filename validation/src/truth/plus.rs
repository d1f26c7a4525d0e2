//! The report's second selection (plans/pixel-plus.toml): the classifier's ROC, the per-track
//! truth labels a classifier is trained on, and the summary keys of the second selection.

use std::path::Path;

use super::io::{self, Col};
use super::{EventResult, Summary, TrackKind};
use crate::error::Result;

/// Score thresholds of the ROC: 0, 0.01, …, 1.
pub const ROC_STEPS: usize = 100;

/// One point of a classifier's ROC: the selection `loose` and score ≥ `threshold`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RocPoint {
    pub threshold: f64,
    /// Efficiency particles found by a selected track / efficiency particles.
    pub efficiency: f64,
    /// Selected tracks matched to no particle / selected tracks (NaN when none is selected).
    pub fake_rate: f64,
    pub tracks: u64,
}

/// The ROC of the scores in `results` ([`super::RocEvent`]), at [`ROC_STEPS`] + 1 thresholds.
///
/// ```
/// use quiver_validation::truth::{roc, EventResult, RocEvent};
/// let r = EventResult {
///     roc: RocEvent { particles: vec![0.9, 0.4], tracks: vec![(0.9, false), (0.4, false), (0.2, true)] },
///     ..Default::default()
/// };
/// let points = roc(&[r]);
/// assert_eq!((points[0].efficiency, points[0].fake_rate), (1.0, 1.0 / 3.0));
/// assert_eq!((points[50].efficiency, points[50].fake_rate), (0.5, 0.0));
/// ```
pub fn roc(results: &[EventResult]) -> Vec<RocPoint> {
    let mut best: Vec<f32> = results
        .iter()
        .flat_map(|r| r.roc.particles.iter().copied())
        .collect();
    let mut tracks: Vec<(f32, bool)> = results
        .iter()
        .flat_map(|r| r.roc.tracks.iter().copied())
        .collect();
    best.sort_by(f32::total_cmp);
    tracks.sort_by(|a, b| a.0.total_cmp(&b.0));
    let fakes_from: Vec<u64> = {
        // fakes_from[i] = fakes among tracks[i..]
        let mut v = vec![0u64; tracks.len() + 1];
        for i in (0..tracks.len()).rev() {
            v[i] = v[i + 1] + tracks[i].1 as u64;
        }
        v
    };
    (0..=ROC_STEPS)
        .map(|k| {
            let t = k as f64 / ROC_STEPS as f64;
            let first_p = best.partition_point(|&s| (s as f64) < t);
            let first_t = tracks.partition_point(|&(s, _)| (s as f64) < t);
            let n = (tracks.len() - first_t) as u64;
            RocPoint {
                threshold: t,
                efficiency: ratio((best.len() - first_p) as u64, best.len() as u64),
                fake_rate: ratio(fakes_from[first_t], n),
                tracks: n,
            }
        })
        .collect()
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

/// `roc.parquet`: threshold, efficiency, fake_rate, tracks.
pub(crate) fn write_roc(out: &Path, points: &[RocPoint]) -> Result<()> {
    io::write_table(
        &out.join("roc.parquet"),
        vec![
            (
                "threshold",
                Col::F64(points.iter().map(|p| p.threshold).collect()),
            ),
            (
                "efficiency",
                Col::F64(points.iter().map(|p| p.efficiency).collect()),
            ),
            (
                "fake_rate",
                Col::F64(points.iter().map(|p| p.fake_rate).collect()),
            ),
            (
                "tracks",
                Col::U64(points.iter().map(|p| p.tracks).collect()),
            ),
        ],
    )
}

/// `track_truth.parquet`: every track of the run against the truth, the labels a track
/// classifier is trained on. `event` (u32), `track` (row within the event's tracks, u32),
/// `quality` (u8), `particle` (i64, −1 for none), `kind` (u8: 0 matched, 1 duplicate, 2 fake;
/// below loose, 0 or 2 by the match alone).
pub(crate) fn write_track_truth(out: &Path, events: &[u32], results: &[EventResult]) -> Result<()> {
    let (mut ev, mut tr, mut q, mut p, mut k) = (vec![], vec![], vec![], vec![], vec![]);
    for (&e, r) in events.iter().zip(results) {
        for (i, t) in r.track_truth.iter().enumerate() {
            ev.push(e);
            tr.push(i as u32);
            q.push(t.quality);
            p.push(t.particle.map_or(-1, i64::from));
            k.push(match t.kind {
                TrackKind::Matched => 0,
                TrackKind::Duplicate => 1,
                TrackKind::Fake => 2,
            });
        }
    }
    io::write_table(
        &out.join("track_truth.parquet"),
        vec![
            ("event", Col::U32(ev)),
            ("track", Col::U32(tr)),
            ("quality", Col::U8(q)),
            ("particle", Col::I64(p)),
            ("kind", Col::U8(k)),
        ],
    )
}

/// The keys of the second selection in summary.json (each prefixed `plus_`).
pub const PLUS_KEYS: [&str; 11] = [
    "track_efficiency",
    "track_fake_rate",
    "track_duplicate_rate",
    "track_fake_rate_4hits",
    "loose_tracks",
    "vertex_efficiency",
    "vertex_merge_rate",
    "vertex_merge_rate_resolvable",
    "vertex_split_rate",
    "vertex_fake_rate",
    "vertex_z_resolution_um",
];

/// The `plus_` lines of summary.json from the second selection's summary.
pub(crate) fn plus_json_fields(plus: &Summary) -> Vec<(String, String)> {
    plus.to_json()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.trim().trim_end_matches(',').split_once(": ")?;
            let k = k.trim_matches('"');
            PLUS_KEYS
                .contains(&k)
                .then(|| (format!("plus_{k}"), v.to_string()))
        })
        .collect()
}
