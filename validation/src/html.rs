//! `report.html`: a self-contained page (no external JS, CSS or fonts) that shows a truth
//! report's headline numbers against the targets and inline SVG plots drawn with `plotters`
//! from the report's own Parquet tables.

use std::fmt::Write as _;
use std::path::Path;

use arrow_array::{Array, Float64Array, RecordBatch, StringArray, UInt64Array};
use plotters::prelude::*;

use crate::truth::Summary;
use crate::{Result, ValidationError};

mod plus;

/// Plot size in pixels.
const SIZE: (u32, u32) = (560, 360);
/// Series colours (matplotlib's tab10: readable on white, distinct).
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];
/// Upper edge drawn for open-ended last bins (pT in GeV, track counts).
const PT_MAX_DRAWN: f64 = 100.0;

/// One headline number with its target.
struct Target {
    /// Its summary.json key.
    key: &'static str,
    label: &'static str,
    target: &'static str,
    passes: fn(f64) -> bool,
    /// Why the reference algorithm itself misses the target, when it does, and the section
    /// of docs/physics.md that shows it; `{}` in the text is replaced by `detail`'s value.
    by_design: Option<(&'static str, &'static str)>,
    /// The summary.json key of a number that backs up the explanation.
    detail: Option<&'static str>,
}

/// Where the targets come from (one sentence for every row).
const TARGET_SOURCE: &str = "Quiver's physics goal for the pixel chain";

/// The targets for the headline numbers.
const TARGETS: [Target; 4] = [
    Target {
        key: "track_efficiency",
        label: "Track efficiency",
        target: "≥ 95 %",
        passes: |v| v >= 0.95,
        by_design: None,
        detail: None,
    },
    Target {
        key: "track_fake_rate",
        label: "Track fake rate",
        target: "≤ 2 %",
        passes: |v| v <= 0.02,
        by_design: Some((
            "Missed by design: the reference algorithm's loose selection keeps every 3-hit track \
             (triplet) that passes its region cuts, and most of those are fake; loose tracks with \
             ≥ 4 hits, the ones the vertexer uses, have {} fakes",
            "tracks",
        )),
        detail: Some("track_fake_rate_4hits"),
    },
    Target {
        key: "track_duplicate_rate",
        label: "Track duplicate rate",
        target: "≤ 1 %",
        passes: |v| v <= 0.01,
        by_design: None,
        detail: None,
    },
    Target {
        key: "vertex_efficiency",
        label: "Vertex efficiency",
        target: "≥ 90 %",
        passes: |v| v >= 0.90,
        by_design: Some((
            "Missed by design: the reference algorithm's clusteriser merges true vertices closer \
             than it can resolve (≈ 0.7 mm), and pile-up puts many that close; {} of the \
             reconstructable vertices were merged",
            "vertices",
        )),
        detail: Some("vertex_merge_rate"),
    },
];

/// Writes `report.html` into `dir`, which must already hold the report's tables
/// (`efficiency`, `resolution`, `vertex_efficiency`, `vertex_neighbours`, `hit_residuals`
/// `.parquet`, as [`crate::truth::summarize`] writes them); `s` is the report's summary.
/// Empty bins and undefined (NaN) numbers are left out of the plots and shown as `n/a`. With a
/// classifier's ROC in `s` (a run with a second selection), also `roc.svg`.
///
/// ```
/// use quiver_validation::truth::{summarize, Config};
/// let dir = tempfile::tempdir().unwrap();
/// // No events: every table is empty, every ratio undefined.
/// let s = summarize(&[], &Config::default(), Some(dir.path())).unwrap();
/// quiver_validation::html::write_report_html(dir.path(), &s).unwrap();
/// let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
/// assert_eq!(html.matches("<svg").count(), 12);
/// assert!(html.contains("<td>Track efficiency</td><td>n/a</td>"));
/// ```
pub fn write_report_html(dir: &Path, s: &Summary) -> Result<()> {
    let html = render(dir, s)?;
    let p = dir.join("report.html");
    std::fs::write(&p, html).map_err(|source| ValidationError::Io { path: p, source })?;
    // The ROC on its own, for documents that show it.
    if let Some(svg) = plus::roc_svg(s)? {
        let p = dir.join("roc.svg");
        std::fs::write(&p, svg).map_err(|source| ValidationError::Io { path: p, source })?;
    }
    Ok(())
}

/// The page as a string (see [`write_report_html`]).
pub fn render(dir: &Path, s: &Summary) -> Result<String> {
    let table = |n: &str| read_parquet(&dir.join(format!("{n}.parquet")));
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Quiver truth report</title>\n<style>\n");
    h.push_str("body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:0.5em 0 1.5em}");
    h.push_str("td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}th{background:#eee}td:first-child{text-align:left}");
    h.push_str("td.why,th.why{text-align:left;max-width:36em;font-size:90%}");
    h.push_str(".pass{color:#070;font-weight:bold}.fail{color:#b00;font-weight:bold}figure{display:inline-block;margin:0.5em}\n");
    h.push_str("</style></head><body>\n<h1>Quiver truth report</h1>\n");
    let _ = writeln!(h, "<p>{} events, {} efficiency particles, {} loose tracks, {} reconstructable vertices, mean pile-up {}.</p>",
        s.events, s.efficiency_particles, s.loose_tracks, s.reconstructable_vertices, num(s.mean_pileup));
    summary_section(&mut h, s);
    plus::section(&mut h, s)?;
    capacities_section(&mut h, s);
    efficiency_section(&mut h, &table("efficiency")?)?;
    resolution_section(&mut h, &table("resolution")?)?;
    vertex_section(
        &mut h,
        &table("vertex_efficiency")?,
        &table("vertex_neighbours")?,
    )?;
    separation_section(&mut h, s, &table("vertex_separation")?)?;
    residual_section(&mut h, &table("hit_residuals")?)?;
    h.push_str("<p>The docs/ links point into Quiver's source tree (docs/physics.md there).</p>\n");
    h.push_str("</body></html>\n");
    Ok(h)
}

/// The headline numbers against the targets (each with where its target comes from and,
/// when the reference algorithm misses it by design, why), then every summary.json key.
fn summary_section(h: &mut String, s: &Summary) {
    h.push_str("<h2 id=\"summary\">Summary</h2>\n<table><tr><th>Quantity</th><th>Value</th><th>Target</th><th>Status</th><th class=\"why\">About the target</th></tr>\n");
    let fields = summary_fields(s);
    let value = |key: &str| {
        fields
            .iter()
            .find(|f| f.0 == key)
            .and_then(|f| f.1.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    for t in &TARGETS {
        let v = value(t.key);
        let (class, word) = if !v.is_finite() {
            ("fail", "n/a")
        } else if (t.passes)(v) {
            ("pass", "pass")
        } else {
            ("fail", "fail")
        };
        let mut why = format!("{TARGET_SOURCE}.");
        if let (Some((text, section)), false) = (t.by_design, class == "pass") {
            let detail = t.detail.map_or(String::new(), |k| pct(value(k)));
            let _ = write!(
                why,
                " {}; see <a href=\"docs/physics.md#{section}\">docs/physics.md, “{}”</a>.",
                text.replace("{}", &detail),
                capitalised(section)
            );
        }
        let _ = writeln!(h, "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{word}</td><td class=\"why\">{why}</td></tr>", t.label, pct(v), t.target);
    }
    h.push_str("</table>\n<details><summary>All summary.json values (rounded; summary.json has them in full)</summary><table><tr><th>Key</th><th>Value</th></tr>\n");
    for (k, v) in &fields {
        let shown = v.parse::<f64>().map_or(v.clone(), num);
        let _ = writeln!(h, "<tr><td>{k}</td><td>{shown}</td></tr>");
    }
    h.push_str("</table></details>\n");
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map_or(String::new(), |f| f.to_uppercase().chain(c).collect())
}

/// Capacities reached: every number of this page is biased in those events.
fn capacities_section(h: &mut String, s: &Summary) {
    h.push_str("<h2 id=\"capacities\">Capacities</h2>\n");
    if s.capacities_reached.is_empty() {
        h.push_str("<p>No step reached a capacity (or the run did not write its <code>capacity_overflows</code> files).</p>\n");
        return;
    }
    let _ = writeln!(h, "<p class=\"fail\">Truncated events: the products of these events are incomplete. Run with <code>capacities = \"sized\"</code> (plans/pixel-sized.toml) to size the steps from the event.</p>");
    h.push_str("<table><tr><th>Step</th><th>Capacity</th><th>Limit</th><th>Events</th><th>Largest demand</th><th>Cut</th></tr>\n");
    for c in &s.capacities_reached {
        let d = c
            .max_demanded
            .map_or("not counted".to_string(), |d| d.to_string());
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} of {}</td><td>{d}</td><td>{}</td></tr>",
            c.label, c.capacity, c.limit, c.events, s.events, c.truncated
        );
    }
    h.push_str("</table>\n");
}

/// Efficiency vs pT, η, φ, pile-up.
fn efficiency_section(h: &mut String, e: &RecordBatch) -> Result<()> {
    h.push_str("<h2 id=\"efficiency\">Track efficiency</h2>\n");
    let (var, lo, hi) = (
        col_str(e, "variable")?,
        col_f64(e, "low")?,
        col_f64(e, "high")?,
    );
    let (n, found) = (col_u64(e, "n_particles")?, col_u64(e, "n_found")?);
    for (v, xlabel, log) in [
        ("pt", "true pT [GeV]", true),
        ("eta", "true η", false),
        ("phi", "true φ [rad]", false),
        ("pileup", "pile-up interactions", false),
    ] {
        let bins: Vec<Bin> = (0..var.len())
            .filter(|&i| var[i] == v)
            .map(|i| Bin {
                lo: lo[i],
                hi: hi[i].min(if v == "pt" {
                    PT_MAX_DRAWN
                } else {
                    f64::INFINITY
                }),
                k: found[i],
                n: n[i],
            })
            .collect();
        let title = format!(
            "Efficiency vs {}",
            xlabel.split(" [").next().unwrap_or(xlabel)
        );
        h.push_str(&figure(&efficiency_plot(&title, xlabel, &bins, log, 0.95)?));
    }
    Ok(())
}

/// Resolutions: the overall table, and the 68 % half-width vs true pT.
fn resolution_section(h: &mut String, r: &RecordBatch) -> Result<()> {
    h.push_str("<h2 id=\"resolution\">Track parameter resolution</h2>\n");
    let (q, bv, rlo, rhi, rn) = (
        col_str(r, "quantity")?,
        col_str(r, "bin_variable")?,
        col_f64(r, "low")?,
        col_f64(r, "high")?,
        col_u64(r, "n")?,
    );
    let (mean, rms, w68, pm, prms) = (
        col_f64(r, "mean")?,
        col_f64(r, "rms")?,
        col_f64(r, "half_width_68")?,
        col_f64(r, "pull_mean")?,
        col_f64(r, "pull_rms")?,
    );
    let pw68 = col_f64(r, "pull_half_width_68")?;
    h.push_str("<p>Matched loose tracks of primaries above the pT cut, fitted in the particle's direction (reco − true; pT as (reco − true)/true). Tracks fitted reversed — the returning leg of a low-pT looper — are left out and counted in <code>track_reversed_fraction</code>.</p>\n");
    h.push_str("<table><tr><th>Quantity</th><th>n</th><th>mean</th><th>RMS</th><th>68 % half-width</th><th>pull mean</th><th>pull RMS</th><th>pull 68 % half-width</th></tr>\n");
    for i in (0..q.len()).filter(|&i| bv[i] == "all") {
        let (u, f) = unit(&q[i]);
        let _ = writeln!(h, "<tr><td>{} [{u}]</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            q[i], rn[i], num(mean[i] * f), num(rms[i] * f), num(w68[i] * f), num(pm[i]), num(prms[i]), num(pw68[i]));
    }
    h.push_str("</table>\n");
    for name in crate::truth::QUANTITIES {
        let (u, f) = unit(name);
        let pts: Vec<(f64, f64, f64)> = (0..q.len())
            .filter(|&i| q[i] == name && bv[i] == "pt" && rn[i] > 0)
            .map(|i| (rlo[i], rhi[i].min(PT_MAX_DRAWN), w68[i] * f))
            .collect();
        let svg = step_plot(
            &format!("{name} resolution vs pT"),
            "true pT [GeV]",
            &format!("68 % half-width [{u}]"),
            &[(name.to_string(), pts)],
            true,
        )?;
        h.push_str(&figure(&svg));
    }
    Ok(())
}

/// Vertex efficiency vs the true vertex's tracks and vs its nearest neighbour.
fn vertex_section(h: &mut String, v: &RecordBatch, nb: &RecordBatch) -> Result<()> {
    h.push_str("<h2 id=\"vertices\">Vertex efficiency</h2>\n");
    let (vmin, vmax, vn, vf) = (
        col_u64(v, "min_tracks")?,
        col_u64(v, "max_tracks")?,
        col_u64(v, "n_true")?,
        col_u64(v, "n_found")?,
    );
    let bins: Vec<Bin> = (0..vmin.len())
        .map(|i| Bin {
            lo: vmin[i] as f64,
            hi: if vmax[i] == u64::MAX {
                2.0 * vmin[i] as f64
            } else {
                vmax[i] as f64
            },
            k: vf[i],
            n: vn[i],
        })
        .collect();
    h.push_str(&figure(&efficiency_plot(
        "Vertex efficiency vs reconstructable tracks",
        "reconstructable tracks of the true vertex",
        &bins,
        true,
        0.90,
    )?));
    let (dlo, dhi, dn, df) = (
        col_f64(nb, "min_dz_cm")?,
        col_f64(nb, "max_dz_cm")?,
        col_u64(nb, "n_true")?,
        col_u64(nb, "n_found")?,
    );
    let bins: Vec<Bin> = (0..dlo.len())
        .map(|i| Bin {
            lo: dlo[i].max(0.01) * 1e4,
            hi: if dhi[i].is_finite() {
                dhi[i] * 1e4
            } else {
                2.0 * dlo[i] * 1e4
            },
            k: df[i],
            n: dn[i],
        })
        .collect();
    h.push_str(&figure(&efficiency_plot(
        "Vertex efficiency vs nearest true vertex",
        "|Δz| to the nearest reconstructable vertex [µm]",
        &bins,
        true,
        0.90,
    )?));
    Ok(())
}

/// Merges against the separation of a true vertex from its least separated neighbour.
fn separation_section(h: &mut String, s: &Summary, t: &RecordBatch) -> Result<()> {
    let _ = writeln!(h, "<h3 id=\"separation\">Merges and the vertices' separation</h3>\n<p>σ: the \
        pair's combined z resolution from its reconstructable tracks' errors, scaled by the zip pull \
        width ({}). A pair closer than {} σ cannot be told from one vertex by its tracks' z alone: \
        {} of the reconstructable vertices are the smaller of such a pair (the merge floor), and \
        {} were merged although farther than that from every other vertex{} \
        (vertex_separation.parquet).</p>",
        num(s.zip_pull_width), crate::truth::RESOLVABLE_SIGMA, pct(s.vertex_merge_floor),
        pct(s.vertex_merge_rate_resolvable),
        s.plus.as_ref().map_or(String::new(), |p| format!(" ({} with the plus selection's vertices)",
            pct(p.vertex_merge_rate_resolvable))));
    let plus = t.schema().index_of("plus_n_merged").is_ok();
    let (lo, hi) = (col_f64(t, "min_sigma")?, col_f64(t, "max_sigma")?);
    let names = [
        "n_true",
        "n_smaller_partner",
        "n_found",
        "n_merged",
        "n_split",
    ];
    let mut cols = names
        .iter()
        .map(|n| col_u64(t, n))
        .collect::<Result<Vec<_>>>()?;
    h.push_str("<table><tr><th>Separation</th><th>True</th><th>Smaller of the pair</th><th>Found</th><th>Merged</th><th>Split</th>");
    if plus {
        for n in ["plus_n_found", "plus_n_merged", "plus_n_split"] {
            cols.push(col_u64(t, n)?);
        }
        h.push_str("<th>Plus found</th><th>Plus merged</th><th>Plus split</th>");
    }
    h.push_str("</tr>\n");
    for i in 0..lo.len() {
        let range = if hi[i].is_finite() {
            format!("{}–{} σ", lo[i], hi[i])
        } else {
            format!("≥ {} σ", lo[i])
        };
        let cells: String = cols.iter().map(|c| format!("<td>{}</td>", c[i])).collect();
        let _ = writeln!(h, "<tr><td>{range}</td>{cells}</tr>");
    }
    h.push_str("</table>\n");
    Ok(())
}

/// Hit residual RMS per layer.
fn residual_section(h: &mut String, hr: &RecordBatch) -> Result<()> {
    h.push_str("<h2 id=\"residuals\">Hit residuals</h2>\n<p>Layers 0–3 barrel, 4–9 forward disks; µm, reco − sim hit.</p>\n");
    let (layer, class, hn, rx, ry) = (
        col_u64(hr, "layer")?,
        col_str(hr, "class")?,
        col_u64(hr, "n")?,
        col_f64(hr, "rms_x_um")?,
        col_f64(hr, "rms_y_um")?,
    );
    let series = |c: &str, val: &[f64]| -> Vec<(f64, f64, f64)> {
        (0..layer.len())
            .filter(|&i| class[i] == c && hn[i] > 0)
            .map(|i| (layer[i] as f64 - 0.5, layer[i] as f64 + 0.5, val[i]))
            .collect()
    };
    let svg = step_plot(
        "Hit residual RMS per layer",
        "layer",
        "RMS [µm]",
        &[
            ("x, non-edge".into(), series("non_edge", &rx)),
            ("y, non-edge".into(), series("non_edge", &ry)),
            ("x, edge".into(), series("edge", &rx)),
            ("y, edge".into(), series("edge", &ry)),
        ],
        false,
    )?;
    h.push_str(&figure(&svg));
    Ok(())
}

/// (key, value) of every summary.json field, in its order.
fn summary_fields(s: &Summary) -> Vec<(String, String)> {
    s.to_json()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.trim().trim_end_matches(',').split_once(": ")?;
            Some((k.trim_matches('"').to_string(), v.to_string()))
        })
        .collect()
}

/// Display unit and factor of a resolution quantity (lengths stored in cm).
fn unit(q: &str) -> (&'static str, f64) {
    match q {
        "pt" => ("fraction", 1.0),
        "phi" => ("rad", 1.0),
        "tip" | "zip" => ("µm", 1e4),
        _ => ("1", 1.0),
    }
}

/// A number for reading: 4 significant digits (all digits before the point), without
/// trailing zeros (`50.3`, not `50.3000`); `n/a` when undefined.
fn num(v: f64) -> String {
    sig(v, 4)
}

/// A fraction as a percentage with 3 significant digits (`29.4 %`, `0.152 %`).
fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{} %", sig(100.0 * v, 3))
    } else {
        "n/a".into()
    }
}

fn sig(v: f64, digits: i32) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let magnitude = v.abs().log10().floor() as i32;
    if magnitude < -4 {
        let d = (digits - 1) as usize;
        return format!("{v:.d$e}");
    }
    let decimals = (digits - 1 - magnitude).max(0) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

fn figure(svg: &str) -> String {
    format!("<figure>{svg}</figure>\n")
}

/// A bin of an efficiency plot: edges, passing and total counts.
struct Bin {
    lo: f64,
    hi: f64,
    k: u64,
    n: u64,
}

fn plot_err(title: &str, e: impl std::fmt::Display) -> ValidationError {
    ValidationError::Data(format!("report.html: drawing '{title}': {e}"))
}

/// x-axis transform: log10 for logarithmic axes (labels show the original values).
fn tx(x: f64, log: bool) -> f64 {
    if log {
        x.max(1e-9).log10()
    } else {
        x
    }
}

/// Tick label: the value with 2 significant digits on log axes (ticks are evenly spaced in
/// log10), 3 decimals at most otherwise.
fn x_label(v: f64, log: bool) -> String {
    let (x, decimals) = if log {
        let x = 10f64.powf(v);
        (x, (1 - x.abs().log10().floor() as i32).max(0) as usize)
    } else {
        (v, 3)
    };
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Efficiency per bin (bins without entries skipped) with binomial errors and a target line.
fn efficiency_plot(
    title: &str,
    xlabel: &str,
    bins: &[Bin],
    log: bool,
    target: f64,
) -> Result<String> {
    let mut buf = String::new();
    // The x range spans the bins with entries (all bins when none has any).
    let filled: Vec<&Bin> = bins.iter().filter(|b| b.n > 0).collect();
    let span: Vec<&Bin> = if filled.is_empty() {
        bins.iter().collect()
    } else {
        filled
    };
    let (x0, x1) = span
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), bn| {
            (a.min(tx(bn.lo, log)), b.max(tx(bn.hi, log)))
        });
    let (x0, x1) = if x0 < x1 { (x0, x1) } else { (0.0, 1.0) };
    let pts: Vec<(f64, f64, f64, f64)> = bins
        .iter()
        .filter(|b| b.n > 0)
        .map(|b| {
            let e = b.k as f64 / b.n as f64;
            let err = (e * (1.0 - e) / b.n as f64).sqrt().max(0.5 / b.n as f64);
            (tx(b.lo, log), tx(b.hi, log), e, err)
        })
        .collect();
    let (y0, y1) = (efficiency_floor(&pts, target), 1.02);
    {
        let root = SVGBackend::with_string(&mut buf, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(title, e))?;
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| plot_err(title, e))?;
        c.configure_mesh()
            .x_desc(xlabel)
            .y_desc("efficiency")
            .x_label_formatter(&|v| x_label(*v, log))
            .y_label_formatter(&|v| num(*v))
            .draw()
            .map_err(|e| plot_err(title, e))?;
        let red = RED.mix(0.7);
        c.draw_series(std::iter::once(PathElement::new(
            vec![(x0, target), (x1, target)],
            red.stroke_width(1),
        )))
        .map_err(|e| plot_err(title, e))?
        .label(format!("target {:.0} %", 100.0 * target))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], red));
        let style = BLUE.stroke_width(2);
        c.draw_series(
            pts.iter()
                .map(|&(a, b, e, _)| PathElement::new(vec![(a, e), (b, e)], style)),
        )
        .map_err(|e| plot_err(title, e))?
        .label("efficiency")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        c.draw_series(pts.iter().map(|&(a, b, e, err)| {
            let m = 0.5 * (a + b);
            PathElement::new(
                vec![(m, (e - err).max(y0)), (m, (e + err).min(y1))],
                BLUE.stroke_width(1),
            )
        }))
        .map_err(|e| plot_err(title, e))?;
        c.draw_series(
            pts.iter()
                .map(|&(a, b, e, _)| Circle::new((0.5 * (a + b), e), 3, BLUE.filled())),
        )
        .map_err(|e| plot_err(title, e))?;
        c.configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| plot_err(title, e))?;
        root.present().map_err(|e| plot_err(title, e))?;
    }
    Ok(buf)
}

/// The lower edge of an efficiency plot's y axis: 0.05 below the lowest efficiency or the
/// target, whichever is lower, on a multiple of 0.05. Efficiencies near the target (0.9–1.0)
/// then fill the plot instead of its top tenth; a low bin still shows, on a longer axis.
fn efficiency_floor(pts: &[(f64, f64, f64, f64)], target: f64) -> f64 {
    let lowest = pts.iter().map(|p| p.2).fold(target, f64::min);
    // The 1e-9 keeps 0.95 − 0.05 on 0.90 rather than one rounding error below it.
    (((lowest - 0.05) * 20.0 + 1e-9).floor() / 20.0).max(0.0)
}

/// A named series of (low edge, high edge, value) bins.
type Series = (String, Vec<(f64, f64, f64)>);

/// Values per bin as horizontal steps with a marker at the bin centre; one colour per series.
fn step_plot(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[Series],
    log: bool,
) -> Result<String> {
    let mut buf = String::new();
    let all = series
        .iter()
        .flat_map(|s| s.1.iter())
        .filter(|p| p.2.is_finite());
    let (x0, x1, ymax) = all.fold(
        (f64::INFINITY, f64::NEG_INFINITY, 0.0f64),
        |(a, b, m), p| (a.min(tx(p.0, log)), b.max(tx(p.1, log)), m.max(p.2)),
    );
    let (x0, x1) = if x0 < x1 { (x0, x1) } else { (0.0, 1.0) };
    let ymax = if ymax > 0.0 { 1.15 * ymax } else { 1.0 };
    {
        let root = SVGBackend::with_string(&mut buf, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(title, e))?;
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0.0..ymax)
            .map_err(|e| plot_err(title, e))?;
        c.configure_mesh()
            .x_desc(xlabel)
            .y_desc(ylabel)
            .x_label_formatter(&|v| x_label(*v, log))
            .y_label_formatter(&|v| num(*v))
            .draw()
            .map_err(|e| plot_err(title, e))?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()].to_rgba();
            let style = colour.stroke_width(2);
            let pts: Vec<(f64, f64, f64)> = pts
                .iter()
                .filter(|p| p.2.is_finite())
                .map(|&(a, b, v)| (tx(a, log), tx(b, log), v))
                .collect();
            c.draw_series(
                pts.iter()
                    .map(|&(a, b, v)| PathElement::new(vec![(a, v), (b, v)], style)),
            )
            .map_err(|e| plot_err(title, e))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
            c.draw_series(
                pts.iter()
                    .map(|&(a, b, v)| Circle::new((0.5 * (a + b), v), 3, colour.filled())),
            )
            .map_err(|e| plot_err(title, e))?;
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| plot_err(title, e))?;
        root.present().map_err(|e| plot_err(title, e))?;
    }
    Ok(buf)
}

fn column<'a, T: 'static>(b: &'a RecordBatch, name: &str, what: &str) -> Result<&'a T> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| ValidationError::MissingColumn {
            product: "truth report table".into(),
            column: name.into(),
        })?;
    c.as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| ValidationError::ColumnType {
            column: name.into(),
            data_type: c.data_type().to_string(),
            expected: format!("expected {what}"),
        })
}

fn col_f64(b: &RecordBatch, name: &str) -> Result<Vec<f64>> {
    Ok(column::<Float64Array>(b, name, "Float64")?
        .values()
        .to_vec())
}

fn col_u64(b: &RecordBatch, name: &str) -> Result<Vec<u64>> {
    Ok(column::<UInt64Array>(b, name, "UInt64")?.values().to_vec())
}

fn col_str(b: &RecordBatch, name: &str) -> Result<Vec<String>> {
    Ok(column::<StringArray>(b, name, "Utf8")?
        .iter()
        .map(|s| s.unwrap_or_default().to_string())
        .collect())
}

use crate::truth::read_parquet;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::truth::{summarize, Config};

    /// The report of a run with the faithful chain's numbers at ⟨PU⟩ 50.
    fn page() -> String {
        let dir = tempfile::tempdir().unwrap();
        let mut s = summarize(&[], &Config::default(), Some(dir.path())).unwrap();
        s.track_efficiency = 0.9687;
        s.track_fake_rate = 0.29385;
        s.track_fake_rate_4hits = 0.00803;
        s.track_duplicate_rate = 0.00152;
        s.vertex_efficiency = 0.82612;
        s.vertex_merge_rate = 0.1441;
        s.mean_pileup = 50.3;
        render(dir.path(), &s).unwrap()
    }

    fn row<'a>(html: &'a str, label: &str) -> &'a str {
        let start = html.find(&format!("<tr><td>{label}</td>")).unwrap();
        &html[start..start + html[start..].find("</tr>").unwrap()]
    }

    #[test]
    fn failed_targets_say_where_they_come_from_and_why_they_fail() {
        let html = page();
        let fake = row(&html, "Track fake rate");
        assert!(fake.contains("<td>29.4 %</td>"), "{fake}");
        assert!(fake.contains("class=\"fail\">fail<"), "{fake}");
        assert!(fake.contains(TARGET_SOURCE), "{fake}");
        assert!(fake.contains("Missed by design"), "{fake}");
        assert!(fake.contains("3-hit track"), "{fake}");
        assert!(fake.contains("≥ 4 hits, the ones the vertexer uses, have 0.803 % fakes"));
        assert!(
            fake.contains("<a href=\"docs/physics.md#tracks\">"),
            "{fake}"
        );
        let vertex = row(&html, "Vertex efficiency");
        assert!(vertex.contains("<td>82.6 %</td>"), "{vertex}");
        assert!(vertex.contains("Missed by design"), "{vertex}");
        assert!(vertex.contains("14.4 % of the reconstructable vertices were merged"));
        assert!(
            vertex.contains("<a href=\"docs/physics.md#vertices\">"),
            "{vertex}"
        );
        // Met targets: where they come from, and no excuse.
        for label in ["Track efficiency", "Track duplicate rate"] {
            let r = row(&html, label);
            assert!(r.contains("class=\"pass\">pass<"), "{r}");
            assert!(r.contains(TARGET_SOURCE), "{r}");
            assert!(!r.contains("by design") && !r.contains("href"), "{r}");
        }
        assert!(row(&html, "Track duplicate rate").contains("<td>0.152 %</td>"));
    }

    #[test]
    fn numbers_are_shown_with_the_digits_they_have() {
        let html = page();
        assert!(html.contains("mean pile-up 50.3.</p>"), "{html}");
        // Outside the plots, no number is padded with zeros or printed to 17 digits.
        let mut text = html.clone();
        while let Some(a) = text.find("<svg") {
            let b = a + text[a..].find("</svg>").unwrap() + 6;
            text.replace_range(a..b, "");
        }
        assert!(!text.contains("000<") && !text.contains(".0<"), "{text}");
        assert!(text.contains("<td>mean_pileup</td><td>50.3</td>"), "{text}");
        assert!(
            text.contains("<td>track_fake_rate</td><td>0.2939</td>"),
            "{text}"
        );
        assert_eq!(num(16652.3), "16652");
        assert_eq!(num(-0.000012345), "-1.234e-5");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(f64::NAN), "n/a");
        assert_eq!(pct(0.9), "90 %");
    }

    #[test]
    fn efficiency_axes_show_the_detail_near_the_target() {
        let bins: Vec<Bin> = [(960, 1000), (975, 1000), (981, 1000)]
            .iter()
            .enumerate()
            .map(|(i, &(k, n))| Bin {
                lo: i as f64,
                hi: i as f64 + 1.0,
                k,
                n,
            })
            .collect();
        let svg = efficiency_plot("t", "x", &bins, false, 0.95).unwrap();
        // The y axis starts at 0.9, not 0: its labels step through 0.9 … 1.0.
        let label = |v: &str| svg.contains(&format!(">\n{v}\n</text>"));
        assert!(label("0.9") && label("0.96") && label("1"), "{svg}");
        assert!(!label("0.2") && !label("0.4"), "{svg}");
        // A low bin lengthens the axis rather than falling off it.
        let pt = |e| (0.0, 1.0, e, 0.01);
        assert_eq!(efficiency_floor(&[pt(0.96), pt(0.98)], 0.95), 0.9);
        assert_eq!(efficiency_floor(&[pt(0.64), pt(0.98)], 0.9), 0.55);
        assert_eq!(efficiency_floor(&[pt(0.01)], 0.9), 0.0);
        assert_eq!(efficiency_floor(&[], 0.9), 0.85);
    }
}
