//! The report's headline numbers ([`Summary`], `summary.json`) and its tables (Parquet),
//! from the results of every event.

use std::path::Path;

use super::io::{self, Col};
use super::{
    Config, EventResult, HitResidual, LooseTrack, SelectedParticle, TrackKind, TrackResolution,
    VertexResult, QUANTITIES,
};
use crate::error::{Result, ValidationError};

/// Headline numbers of a report (`summary.json`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub events: usize,
    pub track_efficiency: f64,
    pub track_fake_rate: f64,
    pub track_duplicate_rate: f64,
    pub vertex_efficiency: f64,
    pub vertex_merge_rate: f64,
    pub vertex_split_rate: f64,
    /// Reco vertices with no matched track / reco vertices.
    pub vertex_fake_rate: f64,
    /// 68 % half-width of reco − true vertex z of found vertices, µm.
    pub vertex_z_resolution_um: f64,
    /// 68 % half-width of the zip pulls of matched loose tracks: how much wider than their
    /// errors the tracks' z residuals are; vertex separations are measured in errors × this.
    pub zip_pull_width: f64,
    /// Reconstructable vertices that are the smaller of a pair less than
    /// [`RESOLVABLE_SIGMA`] apart / reconstructable vertices: the merges to expect from any
    /// vertex finder that does not split single vertices as often.
    pub vertex_merge_floor: f64,
    /// Merged vertices at least [`RESOLVABLE_SIGMA`] from every other reconstructable
    /// vertex / reconstructable vertices.
    pub vertex_merge_rate_resolvable: f64,
    /// RMS of barrel non-edge hit residuals, µm.
    pub hit_residual_rms_x_um: f64,
    pub hit_residual_rms_y_um: f64,
    /// 68 % half-width of the same, µm.
    pub hit_residual_w68_x_um: f64,
    pub hit_residual_w68_y_um: f64,
    /// 68 % half-widths over matched loose tracks of primaries with pT > min_pt:
    /// pT/pT (fraction), φ (rad), cotθ, tip (µm), zip (µm).
    pub pt_resolution: f64,
    pub phi_resolution: f64,
    pub cot_theta_resolution: f64,
    pub tip_resolution_um: f64,
    pub zip_resolution_um: f64,
    /// Matched loose tracks with the truth's charge sign / matched loose tracks.
    pub charge_agreement: f64,
    /// Fake rate among loose tracks with ≥ 4 hits.
    pub track_fake_rate_4hits: f64,
    /// Efficiency denominator particles with matched rec hits on ≥ min_layers layers.
    pub efficiency_particles_with_rechits: f64,
    /// Rec hits with a particle / rec hits.
    pub hit_match_fraction: f64,
    /// Duplicates whose particle has ≥ 2 sim hits on one layer / duplicates.
    pub duplicate_double_hit_fraction: f64,
    /// Matched loose tracks of primaries (any pT) fitted with the reversed direction (φ off
    /// by more than π/2) / matched loose tracks of primaries.
    pub track_reversed_fraction: f64,
    /// Particles with both a reversed and a normal loose track (each makes a duplicate) /
    /// duplicates.
    pub duplicate_reversed_fraction: f64,
    pub efficiency_particles: usize,
    pub loose_tracks: usize,
    pub reconstructable_vertices: usize,
    pub mean_digis: f64,
    pub mean_clusters: f64,
    pub mean_hits: f64,
    pub mean_tracks: f64,
    pub mean_loose_tracks: f64,
    pub mean_vertices: f64,
    pub mean_pileup: f64,
    /// Capacities the run reached (its `capacity_overflows` files), by step and capacity.
    pub capacities_reached: Vec<crate::capacity::CapacityReached>,
    /// The run's second selection (a classifier's purity selection, a second vertex finder),
    /// measured against the same truth; its keys are the `plus_` ones of summary.json.
    pub plus: Option<Box<Summary>>,
    /// The classifier's ROC, when the run has `track_scores`.
    pub roc: Vec<super::RocPoint>,
}

impl Summary {
    /// The summary as a JSON object (non-finite numbers as `null`).
    pub fn to_json(&self) -> String {
        let f = |v: f64| {
            if v.is_finite() {
                format!("{v}")
            } else {
                "null".into()
            }
        };
        let fields: Vec<(&str, String)> = vec![
            ("events", self.events.to_string()),
            ("track_efficiency", f(self.track_efficiency)),
            ("track_fake_rate", f(self.track_fake_rate)),
            ("track_duplicate_rate", f(self.track_duplicate_rate)),
            ("vertex_efficiency", f(self.vertex_efficiency)),
            ("vertex_merge_rate", f(self.vertex_merge_rate)),
            ("vertex_split_rate", f(self.vertex_split_rate)),
            ("vertex_fake_rate", f(self.vertex_fake_rate)),
            ("vertex_z_resolution_um", f(self.vertex_z_resolution_um)),
            ("zip_pull_width", f(self.zip_pull_width)),
            ("vertex_merge_floor", f(self.vertex_merge_floor)),
            (
                "vertex_merge_rate_resolvable",
                f(self.vertex_merge_rate_resolvable),
            ),
            ("hit_residual_rms_x_um", f(self.hit_residual_rms_x_um)),
            ("hit_residual_rms_y_um", f(self.hit_residual_rms_y_um)),
            ("hit_residual_w68_x_um", f(self.hit_residual_w68_x_um)),
            ("hit_residual_w68_y_um", f(self.hit_residual_w68_y_um)),
            ("pt_resolution", f(self.pt_resolution)),
            ("phi_resolution", f(self.phi_resolution)),
            ("cot_theta_resolution", f(self.cot_theta_resolution)),
            ("tip_resolution_um", f(self.tip_resolution_um)),
            ("zip_resolution_um", f(self.zip_resolution_um)),
            ("charge_agreement", f(self.charge_agreement)),
            ("track_fake_rate_4hits", f(self.track_fake_rate_4hits)),
            (
                "efficiency_particles_with_rechits",
                f(self.efficiency_particles_with_rechits),
            ),
            ("hit_match_fraction", f(self.hit_match_fraction)),
            (
                "duplicate_double_hit_fraction",
                f(self.duplicate_double_hit_fraction),
            ),
            ("track_reversed_fraction", f(self.track_reversed_fraction)),
            (
                "duplicate_reversed_fraction",
                f(self.duplicate_reversed_fraction),
            ),
            (
                "efficiency_particles",
                self.efficiency_particles.to_string(),
            ),
            ("loose_tracks", self.loose_tracks.to_string()),
            (
                "reconstructable_vertices",
                self.reconstructable_vertices.to_string(),
            ),
            ("mean_digis", f(self.mean_digis)),
            ("mean_clusters", f(self.mean_clusters)),
            ("mean_hits", f(self.mean_hits)),
            ("mean_tracks", f(self.mean_tracks)),
            ("mean_loose_tracks", f(self.mean_loose_tracks)),
            ("mean_vertices", f(self.mean_vertices)),
            ("mean_pileup", f(self.mean_pileup)),
            (
                "capacities_reached",
                self.capacities_reached.len().to_string(),
            ),
            (
                "capacity_overflow_events",
                self.capacities_reached
                    .iter()
                    .map(|c| c.events)
                    .max()
                    .unwrap_or(0)
                    .to_string(),
            ),
        ];
        let mut fields: Vec<(String, String)> = fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        if let Some(p) = &self.plus {
            fields.extend(super::plus::plus_json_fields(p));
        }
        let body: Vec<String> = fields
            .into_iter()
            .map(|(k, v)| format!("  \"{k}\": {v}"))
            .collect();
        format!("{{\n{}\n}}\n", body.join(",\n"))
    }
}

/// An efficiency-denominator particle with its event's pile-up.
struct Selected<'a> {
    p: &'a SelectedParticle,
    pileup: usize,
}

/// A binned variable of a table: name, bin edges, value.
type Binning<'a, T> = (&'a str, Vec<f64>, &'a dyn Fn(&T) -> f64);

/// True pT bins of the efficiency and resolution tables, GeV.
const PT_EDGES: [f64; 11] = [0.9, 1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 1e9];

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

/// Fewest finite values a 68 % half-width is measured from: below, the 16th and 84th
/// percentiles are the same or neighbouring values and the width (0 for one value) would
/// be drawn as a perfect resolution.
pub const MIN_FOR_WIDTH: usize = 5;

/// Half-width of the central 68 % of `v`'s finite values (NaN with fewer than
/// [`MIN_FOR_WIDTH`] of them: undefined, left out of plots, never 0).
///
/// ```
/// use quiver_validation::truth::half_width_68;
/// let v: Vec<f64> = (-50..=50).map(|i| i as f64).collect();
/// assert_eq!(half_width_68(&v), 34.0);
/// assert!(half_width_68(&[0.01]).is_nan()); // one track is no resolution
/// ```
pub fn half_width_68(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.len() < MIN_FOR_WIDTH {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let q = |f: f64| s[((f * (s.len() - 1) as f64).round() as usize).min(s.len() - 1)];
    0.5 * (q(0.84) - q(0.16))
}

fn mean_rms(v: &[f64]) -> (f64, f64) {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (m, (v.iter().map(|x| x * x).sum::<f64>() / n).sqrt())
}

/// Combines event results into the summary and the result tables; writes the tables into
/// `output` when given.
pub fn summarize(results: &[EventResult], cfg: &Config, output: Option<&Path>) -> Result<Summary> {
    summarize_with(results, cfg, output, None, None)
}

/// [`summarize`], measuring vertex separations with `zip_pull_width` instead of the zip pull
/// width of `results`' own tracks (the report's second selection uses the faithful one, so
/// that both are binned alike), and with the second selection's vertices (`plus_vertices`)
/// beside the first in `vertex_separation.parquet`.
pub(crate) fn summarize_with(
    results: &[EventResult],
    cfg: &Config,
    output: Option<&Path>,
    zip_pull_width: Option<f64>,
    plus_vertices: Option<&[VertexResult]>,
) -> Result<Summary> {
    let n = results.len();
    let sum = |f: &dyn Fn(&EventResult) -> usize| results.iter().map(f).sum::<usize>();
    let sel: Vec<Selected> = results
        .iter()
        .flat_map(|r| {
            r.selected.iter().map(move |p| Selected {
                p,
                pileup: r.n_pileup,
            })
        })
        .collect();
    let loose = sum(&|r| r.loose);
    let verts: Vec<VertexResult> = results
        .iter()
        .flat_map(|r| r.vertices.iter().copied())
        .collect();
    let res: Vec<TrackResolution> = results
        .iter()
        .flat_map(|r| r.resolution.iter().copied())
        .collect();
    let resid: Vec<HitResidual> = results
        .iter()
        .flat_map(|r| r.residuals.iter().copied())
        .collect();
    let mean = |k: &dyn Fn(&EventResult) -> usize| {
        if n == 0 {
            f64::NAN
        } else {
            sum(k) as f64 / n as f64
        }
    };
    let reco_vertices = sum(&|r| r.counts.vertices);
    let hi_pt: Vec<_> = res.iter().filter(|r| r.true_pt > cfg.min_pt).collect();
    let q = |i: usize| half_width_68(&hi_pt.iter().map(|r| r.residuals[i]).collect::<Vec<_>>());
    let barrel_non_edge: Vec<&HitResidual> =
        resid.iter().filter(|r| r.layer < 4 && r.non_edge).collect();
    let bnx: Vec<f64> = barrel_non_edge.iter().map(|r| r.dx_um).collect();
    let bny: Vec<f64> = barrel_non_edge.iter().map(|r| r.dy_um).collect();
    let found_dz: Vec<f64> = verts
        .iter()
        .filter(|v| v.found)
        .map(|v| v.dz * 1e4)
        .collect();
    let count = |f: &dyn Fn(&VertexResult) -> bool| verts.iter().filter(|v| f(v)).count();
    let zip_pull_width = zip_pull_width
        .unwrap_or_else(|| half_width_68(&res.iter().map(|r| r.pulls[4]).collect::<Vec<_>>()));
    let (merge_floor, merged_resolvable) = merge_floor(&verts, zip_pull_width);
    let s = Summary {
        events: n,
        track_efficiency: ratio(sel.iter().filter(|s| s.p.found).count(), sel.len()),
        track_fake_rate: ratio(sum(&|r| r.fake), loose),
        track_duplicate_rate: ratio(sum(&|r| r.duplicate), loose),
        vertex_efficiency: ratio(count(&|v| v.found), verts.len()),
        vertex_merge_rate: ratio(count(&|v| v.merged), verts.len()),
        vertex_split_rate: ratio(count(&|v| v.split), verts.len()),
        vertex_fake_rate: ratio(sum(&|r| r.fake_vertices), reco_vertices),
        vertex_z_resolution_um: half_width_68(&found_dz),
        zip_pull_width,
        vertex_merge_floor: merge_floor,
        vertex_merge_rate_resolvable: merged_resolvable,
        hit_residual_rms_x_um: mean_rms(&bnx).1,
        hit_residual_rms_y_um: mean_rms(&bny).1,
        hit_residual_w68_x_um: half_width_68(&bnx),
        hit_residual_w68_y_um: half_width_68(&bny),
        pt_resolution: q(0),
        phi_resolution: q(1),
        cot_theta_resolution: q(2),
        tip_resolution_um: q(3) * 1e4,
        zip_resolution_um: q(4) * 1e4,
        charge_agreement: ratio(sum(&|r| r.charge_agrees), sum(&|r| r.charge_compared)),
        track_fake_rate_4hits: fake_rate_4hits(results),
        efficiency_particles_with_rechits: ratio(
            sel.iter()
                .filter(|s| s.p.rechit_layers >= cfg.min_layers)
                .count(),
            sel.len(),
        ),
        hit_match_fraction: ratio(sum(&|r| r.hits_with_particle), sum(&|r| r.hits)),
        duplicate_double_hit_fraction: ratio(
            sum(&|r| r.duplicate_double_hits),
            sum(&|r| r.duplicate),
        ),
        track_reversed_fraction: ratio(sum(&|r| r.reversed), sum(&|r| r.reversed) + res.len()),
        duplicate_reversed_fraction: ratio(sum(&|r| r.reversed_pairs), sum(&|r| r.duplicate)),
        efficiency_particles: sel.len(),
        loose_tracks: loose,
        reconstructable_vertices: verts.len(),
        mean_digis: mean(&|r| r.counts.digis),
        mean_clusters: mean(&|r| r.counts.clusters),
        mean_hits: mean(&|r| r.counts.hits),
        mean_tracks: mean(&|r| r.counts.tracks),
        mean_loose_tracks: mean(&|r| r.counts.loose_tracks),
        mean_vertices: mean(&|r| r.counts.vertices),
        mean_pileup: if n == 0 {
            f64::NAN
        } else {
            results.iter().map(|r| r.n_pileup).sum::<usize>() as f64 / n as f64
        },
        capacities_reached: Vec::new(),
        plus: None,
        roc: Vec::new(),
    };
    if let Some(out) = output {
        let tables = Tables {
            sel: &sel,
            res: &res,
            verts: &verts,
            plus_verts: plus_vertices,
            resid: &resid,
        };
        write_tables(out, results, &tables, cfg, &s)?;
    }
    Ok(s)
}

/// The per-particle, per-track, per-vertex and per-hit results the tables are made of.
struct Tables<'a> {
    sel: &'a [Selected<'a>],
    res: &'a [TrackResolution],
    verts: &'a [VertexResult],
    /// The second selection's, when the report has one.
    plus_verts: Option<&'a [VertexResult]>,
    resid: &'a [HitResidual],
}

/// Writes the result tables and `summary.json` into `out`.
fn write_tables(
    out: &Path,
    results: &[EventResult],
    t: &Tables,
    cfg: &Config,
    s: &Summary,
) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|source| ValidationError::Io {
        path: out.into(),
        source,
    })?;
    write_efficiency(out, t.sel, cfg)?;
    write_resolution(out, t.res, cfg)?;
    write_vertex_efficiency(out, t.verts)?;
    let lt: Vec<LooseTrack> = results
        .iter()
        .flat_map(|r| r.loose_tracks.iter().copied())
        .collect();
    write_track_composition(out, &lt)?;
    write_vertex_neighbours(out, t.verts)?;
    write_vertex_separation(out, t.verts, t.plus_verts, s.zip_pull_width)?;
    write_hit_residuals(out, t.resid)?;
    let p = out.join("summary.json");
    std::fs::write(&p, s.to_json()).map_err(|source| ValidationError::Io { path: p, source })
}

/// Efficiency vs pT, η, φ, pile-up (`efficiency.parquet`).
fn write_efficiency(out: &Path, sel: &[Selected], cfg: &Config) -> Result<()> {
    let pi = std::f64::consts::PI;
    let eta_edges: Vec<f64> = (0..=24).map(|i| -2.4 + 0.2 * i as f64).collect();
    let phi_edges: Vec<f64> = (0..=16).map(|i| -pi + 2.0 * pi * i as f64 / 16.0).collect();
    let pu_edges: Vec<f64> = (0..=20).map(|i| 10.0 * i as f64).collect();
    let (mut var, mut lo, mut hi, mut tot, mut fnd, mut eff) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut hit3, mut any, mut dbl) = (vec![], vec![], vec![]);
    let vars: [Binning<Selected>; 4] = [
        ("pt", PT_EDGES.to_vec(), &|s| s.p.pt as f64),
        ("eta", eta_edges, &|s| s.p.eta as f64),
        ("phi", phi_edges, &|s| s.p.phi as f64),
        ("pileup", pu_edges, &|s| s.pileup as f64),
    ];
    for (name, edges, x) in vars {
        for w in edges.windows(2) {
            let inb: Vec<_> = sel
                .iter()
                .filter(|s| (w[0]..w[1]).contains(&x(s)))
                .collect();
            var.push(name.to_string());
            lo.push(w[0]);
            hi.push(w[1]);
            tot.push(inb.len() as u64);
            fnd.push(inb.iter().filter(|s| s.p.found).count() as u64);
            eff.push(ratio(inb.iter().filter(|s| s.p.found).count(), inb.len()));
            hit3.push(
                inb.iter()
                    .filter(|s| s.p.rechit_layers >= cfg.min_layers)
                    .count() as u64,
            );
            any.push(inb.iter().filter(|s| s.p.found_any_quality).count() as u64);
            dbl.push(inb.iter().filter(|s| s.p.double_layer_hits).count() as u64);
        }
    }
    io::write_table(
        &out.join("efficiency.parquet"),
        vec![
            ("variable", Col::Str(var)),
            ("low", Col::F64(lo)),
            ("high", Col::F64(hi)),
            ("n_particles", Col::U64(tot)),
            ("n_found", Col::U64(fnd)),
            ("efficiency", Col::F64(eff)),
            ("n_rechits_on_min_layers", Col::U64(hit3)),
            ("n_found_any_quality", Col::U64(any)),
            ("n_double_layer_hits", Col::U64(dbl)),
        ],
    )
}

/// Resolutions and pulls, overall and in true pT and |η| bins (`resolution.parquet`).
fn write_resolution(out: &Path, res: &[TrackResolution], cfg: &Config) -> Result<()> {
    let mut t: [Vec<f64>; 8] = Default::default();
    let (mut tq, mut tb, mut tn, mut to) = (vec![], vec![], vec![], vec![]);
    let bins: Vec<(String, f64, f64)> = [("all", 0.0, 1e9)]
        .into_iter()
        .map(|(a, b, c)| (a.to_string(), b, c))
        .chain(
            PT_EDGES[..PT_EDGES.len() - 1]
                .iter()
                .zip(&PT_EDGES[1..])
                .map(|(a, b)| ("pt".to_string(), *a, *b)),
        )
        .chain(
            [0.0, 0.8, 1.6, 2.4, 3.0]
                .windows(2)
                .map(|w| ("abs_eta".to_string(), w[0], w[1])),
        )
        .collect();
    for (qi, qn) in QUANTITIES.iter().enumerate() {
        for (bn, a, b) in &bins {
            let rows: Vec<_> = res
                .iter()
                .filter(|r| match bn.as_str() {
                    "all" => r.true_pt > cfg.min_pt,
                    "pt" => (*a..*b).contains(&(r.true_pt as f64)),
                    _ => (*a..*b).contains(&(r.true_eta.abs() as f64)) && r.true_pt > cfg.min_pt,
                })
                .collect();
            let v: Vec<f64> = rows.iter().map(|r| r.residuals[qi]).collect();
            let p: Vec<f64> = rows.iter().map(|r| r.pulls[qi]).collect();
            let (m, rms) = mean_rms(&v);
            let (pm, prms) = mean_rms(&p);
            tq.push(qn.to_string());
            tb.push(bn.clone());
            tn.push(rows.len() as u64);
            to.push(p.iter().filter(|x| x.abs() > 5.0).count() as u64);
            for (k, x) in [
                a.to_owned(),
                b.to_owned(),
                m,
                rms,
                half_width_68(&v),
                pm,
                prms,
                half_width_68(&p),
            ]
            .into_iter()
            .enumerate()
            {
                t[k].push(x);
            }
        }
    }
    let [t0, t1, t2, t3, t4, t5, t6, t7] = t;
    io::write_table(
        &out.join("resolution.parquet"),
        vec![
            ("quantity", Col::Str(tq)),
            ("bin_variable", Col::Str(tb)),
            ("low", Col::F64(t0)),
            ("high", Col::F64(t1)),
            ("n", Col::U64(tn)),
            ("mean", Col::F64(t2)),
            ("rms", Col::F64(t3)),
            ("half_width_68", Col::F64(t4)),
            ("pull_mean", Col::F64(t5)),
            ("pull_rms", Col::F64(t6)),
            ("pull_half_width_68", Col::F64(t7)),
            ("n_pull_above_5", Col::U64(to)),
        ],
    )
}

/// Vertices vs reconstructable tracks (`vertex_efficiency.parquet`).
fn write_vertex_efficiency(out: &Path, verts: &[VertexResult]) -> Result<()> {
    let vb = [4usize, 5, 7, 10, 15, 20, 30, 50, 100, usize::MAX];
    let mut c: [Vec<u64>; 6] = Default::default();
    for w in vb.windows(2) {
        let inb: Vec<_> = verts
            .iter()
            .filter(|v| v.tracks >= w[0] && v.tracks < w[1])
            .collect();
        c[0].push(w[0] as u64);
        c[1].push(if w[1] == usize::MAX {
            u64::MAX
        } else {
            w[1] as u64
        });
        c[2].push(inb.len() as u64);
        c[3].push(inb.iter().filter(|v| v.found).count() as u64);
        c[4].push(inb.iter().filter(|v| v.merged).count() as u64);
        c[5].push(inb.iter().filter(|v| v.split).count() as u64);
    }
    let [c0, c1, c2, c3, c4, c5] = c;
    io::write_table(
        &out.join("vertex_efficiency.parquet"),
        vec![
            ("min_tracks", Col::U64(c0)),
            ("max_tracks", Col::U64(c1)),
            ("n_true", Col::U64(c2)),
            ("n_found", Col::U64(c3)),
            ("n_merged", Col::U64(c4)),
            ("n_split", Col::U64(c5)),
        ],
    )
}

/// Loose-track composition vs hits, pT, η (`track_composition.parquet`).
fn write_track_composition(out: &Path, lt: &[LooseTrack]) -> Result<()> {
    let (mut fv, mut fl, mut fh, mut fn_, mut ff, mut fd, mut f1) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let fvars: [Binning<LooseTrack>; 3] = [
        ("n_hits", vec![3.0, 4.0, 5.0, 6.0, 100.0], &|t| {
            t.hits as f64
        }),
        ("pt", vec![0.0, 0.5, 0.9, 1.5, 3.0, 10.0, 1e9], &|t| {
            t.pt as f64
        }),
        (
            "eta",
            (0..=16).map(|i| -4.0 + 0.5 * i as f64).collect(),
            &|t| t.eta as f64,
        ),
    ];
    for (name, edges, x) in fvars {
        for w in edges.windows(2) {
            let inb: Vec<_> = lt.iter().filter(|t| (w[0]..w[1]).contains(&x(t))).collect();
            fv.push(name.to_string());
            fl.push(w[0]);
            fh.push(w[1]);
            fn_.push(inb.len() as u64);
            ff.push(inb.iter().filter(|t| t.kind == TrackKind::Fake).count() as u64);
            fd.push(
                inb.iter()
                    .filter(|t| t.kind == TrackKind::Duplicate)
                    .count() as u64,
            );
            // Fakes whose hits all but one come from one particle.
            f1.push(
                inb.iter()
                    .filter(|t| t.kind == TrackKind::Fake && t.best_share + 1 == t.hits)
                    .count() as u64,
            );
        }
    }
    io::write_table(
        &out.join("track_composition.parquet"),
        vec![
            ("variable", Col::Str(fv)),
            ("low", Col::F64(fl)),
            ("high", Col::F64(fh)),
            ("n_loose", Col::U64(fn_)),
            ("n_fake", Col::U64(ff)),
            ("n_duplicate", Col::U64(fd)),
            ("n_fake_one_foreign_hit", Col::U64(f1)),
        ],
    )
}

/// Fakes among the loose tracks with ≥ 4 hits.
fn fake_rate_4hits(results: &[EventResult]) -> f64 {
    let l4 = results
        .iter()
        .flat_map(|r| r.loose_tracks.iter())
        .filter(|t| t.hits >= 4);
    let (f4, n4) = l4.fold((0, 0), |(f, n), t| {
        (f + (t.kind == TrackKind::Fake) as usize, n + 1)
    });
    ratio(f4, n4)
}

/// Separation, in σ, below which two true vertices count as unresolvable: their tracks' z
/// overlap so much that a vertex finder splitting such pairs also splits single vertices
/// (the faithful and the annealing vertex finders both merge about one vertex of every such
/// pair, docs/physics.md).
pub const RESOLVABLE_SIGMA: f64 = 3.0;

/// Bin edges of `vertex_separation.parquet`, σ.
const SEPARATION_EDGES: [f64; 7] = [0.0, 1.0, 2.0, 3.0, 5.0, 10.0, f64::INFINITY];

/// [`Summary::vertex_merge_floor`] and [`Summary::vertex_merge_rate_resolvable`] of
/// `verts`, their separations divided by `zip_pull_width` (both NaN when it is not finite and
/// positive, or without vertices).
fn merge_floor(verts: &[VertexResult], zip_pull_width: f64) -> (f64, f64) {
    if !(zip_pull_width.is_finite() && zip_pull_width > 0.0) {
        return (f64::NAN, f64::NAN);
    }
    let close = |v: &VertexResult| v.separation / zip_pull_width < RESOLVABLE_SIGMA;
    let floor = verts.iter().filter(|v| v.smaller_partner && close(v));
    let resolvable = verts.iter().filter(|v| v.merged && !close(v));
    (
        ratio(floor.count(), verts.len()),
        ratio(resolvable.count(), verts.len()),
    )
}

/// Vertices vs their separation from the least separated other reconstructable vertex, in
/// σ (`vertex_separation.parquet`): found, merged, split for the faithful vertices and, when
/// the run has them, the second ones (`plus_` columns).
fn write_vertex_separation(
    out: &Path,
    faithful: &[VertexResult],
    plus: Option<&[VertexResult]>,
    zip_pull_width: f64,
) -> Result<()> {
    let bins: Vec<[f64; 2]> = SEPARATION_EDGES.windows(2).map(|w| [w[0], w[1]]).collect();
    let in_bin = |v: &VertexResult, b: &[f64; 2]| {
        let s = v.separation / zip_pull_width;
        s >= b[0] && s < b[1]
    };
    let counts = |verts: &[VertexResult], f: fn(&VertexResult) -> bool| -> Vec<u64> {
        bins.iter()
            .map(|b| verts.iter().filter(|v| in_bin(v, b) && f(v)).count() as u64)
            .collect()
    };
    let mut cols = vec![
        ("min_sigma", Col::F64(bins.iter().map(|b| b[0]).collect())),
        ("max_sigma", Col::F64(bins.iter().map(|b| b[1]).collect())),
        ("n_true", Col::U64(counts(faithful, |_| true))),
        (
            "n_smaller_partner",
            Col::U64(counts(faithful, |v| v.smaller_partner)),
        ),
        ("n_found", Col::U64(counts(faithful, |v| v.found))),
        ("n_merged", Col::U64(counts(faithful, |v| v.merged))),
        ("n_split", Col::U64(counts(faithful, |v| v.split))),
    ];
    if let Some(p) = plus {
        cols.push(("plus_n_found", Col::U64(counts(p, |v| v.found))));
        cols.push(("plus_n_merged", Col::U64(counts(p, |v| v.merged))));
        cols.push(("plus_n_split", Col::U64(counts(p, |v| v.split))));
    }
    io::write_table(&out.join("vertex_separation.parquet"), cols)
}

/// Vertices vs the distance to the nearest other reconstructable true vertex
/// (`vertex_neighbours.parquet`).
fn write_vertex_neighbours(out: &Path, verts: &[VertexResult]) -> Result<()> {
    let db = [0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, f64::INFINITY];
    let mut c: [Vec<f64>; 2] = Default::default();
    let mut d: [Vec<u64>; 4] = Default::default();
    for w in db.windows(2) {
        let inb: Vec<_> = verts
            .iter()
            .filter(|v| v.nearest_dz >= w[0] && v.nearest_dz < w[1])
            .collect();
        c[0].push(w[0]);
        c[1].push(w[1]);
        d[0].push(inb.len() as u64);
        d[1].push(inb.iter().filter(|v| v.found).count() as u64);
        d[2].push(inb.iter().filter(|v| v.merged).count() as u64);
        d[3].push(inb.iter().filter(|v| v.split).count() as u64);
    }
    let ([c0, c1], [d0, d1, d2, d3]) = (c, d);
    io::write_table(
        &out.join("vertex_neighbours.parquet"),
        vec![
            ("min_dz_cm", Col::F64(c0)),
            ("max_dz_cm", Col::F64(c1)),
            ("n_true", Col::U64(d0)),
            ("n_found", Col::U64(d1)),
            ("n_merged", Col::U64(d2)),
            ("n_split", Col::U64(d3)),
        ],
    )
}

/// Hit residuals per layer and edge class (`hit_residuals.parquet`).
fn write_hit_residuals(out: &Path, resid: &[HitResidual]) -> Result<()> {
    let mut h: [Vec<f64>; 6] = Default::default();
    let (mut hl, mut he, mut hn) = (vec![], vec![], vec![]);
    for layer in 0..10usize {
        for edge in [false, true] {
            let rows: Vec<_> = resid
                .iter()
                .filter(|r| r.layer == layer && r.non_edge != edge)
                .collect();
            let x: Vec<f64> = rows.iter().map(|r| r.dx_um).collect();
            let y: Vec<f64> = rows.iter().map(|r| r.dy_um).collect();
            hl.push(layer as u64);
            he.push(if edge { "edge" } else { "non_edge" }.to_string());
            hn.push(rows.len() as u64);
            let ((mx, rx), (my, ry)) = (mean_rms(&x), mean_rms(&y));
            for (k, v) in [mx, rx, half_width_68(&x), my, ry, half_width_68(&y)]
                .into_iter()
                .enumerate()
            {
                h[k].push(v);
            }
        }
    }
    let [h0, h1, h2, h3, h4, h5] = h;
    io::write_table(
        &out.join("hit_residuals.parquet"),
        vec![
            ("layer", Col::U64(hl)),
            ("class", Col::Str(he)),
            ("n", Col::U64(hn)),
            ("mean_x_um", Col::F64(h0)),
            ("rms_x_um", Col::F64(h1)),
            ("w68_x_um", Col::F64(h2)),
            ("mean_y_um", Col::F64(h3)),
            ("rms_y_um", Col::F64(h4)),
            ("w68_y_um", Col::F64(h5)),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(separation: f64, smaller_partner: bool, merged: bool) -> VertexResult {
        VertexResult {
            tracks: 5,
            found: !merged,
            merged,
            split: false,
            dz: f64::NAN,
            pull: f64::NAN,
            nearest_dz: 1.0,
            separation,
            smaller_partner,
        }
    }

    #[test]
    fn the_merge_floor_counts_smaller_partners_below_three_sigma_after_the_pull_scale() {
        let verts = [
            v(5.0, true, true),   // 2.5 σ after the scale: the floor, not resolvable
            v(5.0, false, false), // its partner
            v(7.0, true, true),   // 3.5 σ: a resolvable merge
            v(7.0, true, false),  // 3.5 σ, found: neither
            v(f64::INFINITY, false, false),
        ];
        assert_eq!(merge_floor(&verts, 2.0), (0.2, 0.2));
        // Without the scale (1) both are ≥ 3 σ.
        assert_eq!(merge_floor(&verts, 1.0), (0.0, 0.4));
        for bad in [f64::NAN, 0.0, -1.0, f64::INFINITY] {
            let (f, r) = merge_floor(&verts, bad);
            assert!(f.is_nan() && r.is_nan(), "{bad}");
        }
        assert!(merge_floor(&[], 1.5).0.is_nan());
    }
}
