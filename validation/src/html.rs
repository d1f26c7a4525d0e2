//! `report.html`: a self-contained page (no external JS, CSS or fonts) that shows a truth
//! report's headline numbers against the targets and inline SVG plots drawn with `plotters`
//! from the report's own Parquet tables.

use std::fmt::Write as _;
use std::path::Path;

use arrow_array::{Array, Float64Array, RecordBatch, StringArray, UInt64Array};
use plotters::prelude::*;

use crate::truth::Summary;
use crate::{Result, ValidationError};

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

/// One headline number with its target: (summary key, label, target, value passes).
type Target = (&'static str, &'static str, &'static str, fn(f64) -> bool);

/// The issue's targets for the headline numbers.
const TARGETS: [Target; 4] = [
    ("track_efficiency", "Track efficiency", "≥ 95 %", |v| {
        v >= 0.95
    }),
    ("track_fake_rate", "Track fake rate", "≤ 2 %", |v| {
        v <= 0.02
    }),
    (
        "track_duplicate_rate",
        "Track duplicate rate",
        "≤ 1 %",
        |v| v <= 0.01,
    ),
    ("vertex_efficiency", "Vertex efficiency", "≥ 90 %", |v| {
        v >= 0.90
    }),
];

/// Writes `report.html` into `dir`, which must already hold the report's tables
/// (`efficiency`, `resolution`, `vertex_efficiency`, `vertex_neighbours`, `hit_residuals`
/// `.parquet`, as [`crate::truth::summarize`] writes them); `s` is the report's summary.
/// Empty bins and undefined (NaN) numbers are left out of the plots and shown as `n/a`.
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
    std::fs::write(&p, html).map_err(|source| ValidationError::Io { path: p, source })
}

/// The page as a string (see [`write_report_html`]).
pub fn render(dir: &Path, s: &Summary) -> Result<String> {
    let table = |n: &str| read_parquet(&dir.join(format!("{n}.parquet")));
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Quiver truth report</title>\n<style>\n");
    h.push_str("body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:0.5em 0 1.5em}");
    h.push_str("td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}th{background:#eee}td:first-child{text-align:left}");
    h.push_str(".pass{color:#070;font-weight:bold}.fail{color:#b00;font-weight:bold}figure{display:inline-block;margin:0.5em}\n");
    h.push_str("</style></head><body>\n<h1>Quiver truth report</h1>\n");
    let _ = writeln!(h, "<p>{} events, {} efficiency particles, {} loose tracks, {} reconstructable vertices, mean pile-up {}.</p>",
        s.events, s.efficiency_particles, s.loose_tracks, s.reconstructable_vertices, num(s.mean_pileup));

    // Headline numbers against the targets, then every summary.json key.
    h.push_str("<h2 id=\"summary\">Summary</h2>\n<table><tr><th>Quantity</th><th>Value</th><th>Target</th><th>Status</th></tr>\n");
    let fields = summary_fields(s);
    for (key, label, target, ok) in TARGETS {
        let v = fields
            .iter()
            .find(|f| f.0 == key)
            .and_then(|f| f.1.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        let (class, word) = if !v.is_finite() {
            ("fail", "n/a")
        } else if ok(v) {
            ("pass", "pass")
        } else {
            ("fail", "fail")
        };
        let _ = writeln!(h, "<tr><td>{label}</td><td>{}</td><td>{target}</td><td class=\"{class}\">{word}</td></tr>", pct(v));
    }
    h.push_str("</table>\n<details><summary>All summary.json values</summary><table><tr><th>Key</th><th>Value</th></tr>\n");
    for (k, v) in &fields {
        let _ = writeln!(h, "<tr><td>{k}</td><td>{v}</td></tr>");
    }
    h.push_str("</table></details>\n");

    // Capacities reached: every number of this page is biased in those events.
    h.push_str("<h2 id=\"capacities\">Capacities</h2>\n");
    if s.capacities_reached.is_empty() {
        h.push_str("<p>No step reached a capacity (or the run did not write its <code>capacity_overflows</code> files).</p>\n");
    } else {
        let _ = writeln!(h, "<p class=\"fail\">Truncated events: the products of these events are incomplete. Run with <code>capacities = \"sized\"</code> (plans/pixel-sized.toml) to size the steps from the event.</p>");
        h.push_str("<table><tr><th>Step</th><th>Capacity</th><th>Limit</th><th>Events</th><th>Largest demand</th><th>Cut</th></tr>\n");
        for c in &s.capacities_reached {
            let d = c
                .max_demanded
                .map_or("not counted".to_string(), |d| d.to_string());
            let _ = writeln!(h, "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} of {}</td><td>{d}</td><td>{}</td></tr>", c.label, c.capacity, c.limit, c.events, s.events, c.truncated);
        }
        h.push_str("</table>\n");
    }

    // Efficiency vs pT, η, φ, pile-up.
    h.push_str("<h2 id=\"efficiency\">Track efficiency</h2>\n");
    let e = table("efficiency")?;
    let (var, lo, hi) = (
        col_str(&e, "variable")?,
        col_f64(&e, "low")?,
        col_f64(&e, "high")?,
    );
    let (n, found) = (col_u64(&e, "n_particles")?, col_u64(&e, "n_found")?);
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

    // Resolutions: the overall table, and the 68 % half-width vs true pT.
    h.push_str("<h2 id=\"resolution\">Track parameter resolution</h2>\n");
    let r = table("resolution")?;
    let (q, bv, rlo, rhi, rn) = (
        col_str(&r, "quantity")?,
        col_str(&r, "bin_variable")?,
        col_f64(&r, "low")?,
        col_f64(&r, "high")?,
        col_u64(&r, "n")?,
    );
    let (mean, rms, w68, pm, prms) = (
        col_f64(&r, "mean")?,
        col_f64(&r, "rms")?,
        col_f64(&r, "half_width_68")?,
        col_f64(&r, "pull_mean")?,
        col_f64(&r, "pull_rms")?,
    );
    let pw68 = col_f64(&r, "pull_half_width_68")?;
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

    // Vertices.
    h.push_str("<h2 id=\"vertices\">Vertex efficiency</h2>\n");
    let v = table("vertex_efficiency")?;
    let (vmin, vmax, vn, vf) = (
        col_u64(&v, "min_tracks")?,
        col_u64(&v, "max_tracks")?,
        col_u64(&v, "n_true")?,
        col_u64(&v, "n_found")?,
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
    let nb = table("vertex_neighbours")?;
    let (dlo, dhi, dn, df) = (
        col_f64(&nb, "min_dz_cm")?,
        col_f64(&nb, "max_dz_cm")?,
        col_u64(&nb, "n_true")?,
        col_u64(&nb, "n_found")?,
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

    // Hit residual RMS per layer.
    h.push_str("<h2 id=\"residuals\">Hit residuals</h2>\n<p>Layers 0–3 barrel, 4–9 forward disks; µm, reco − sim hit.</p>\n");
    let hr = table("hit_residuals")?;
    let (layer, class, hn, rx, ry) = (
        col_u64(&hr, "layer")?,
        col_str(&hr, "class")?,
        col_u64(&hr, "n")?,
        col_f64(&hr, "rms_x_um")?,
        col_f64(&hr, "rms_y_um")?,
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
    h.push_str("</body></html>\n");
    Ok(h)
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

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.4}")
    } else {
        "n/a".into()
    }
}

fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{:.2} %", 100.0 * v)
    } else {
        "n/a".into()
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
    {
        let root = SVGBackend::with_string(&mut buf, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(title, e))?;
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(x0..x1, 0.0..1.05)
            .map_err(|e| plot_err(title, e))?;
        c.configure_mesh()
            .x_desc(xlabel)
            .y_desc("efficiency")
            .x_label_formatter(&|v| x_label(*v, log))
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
        let pts: Vec<(f64, f64, f64, f64)> = bins
            .iter()
            .filter(|b| b.n > 0)
            .map(|b| {
                let e = b.k as f64 / b.n as f64;
                let err = (e * (1.0 - e) / b.n as f64).sqrt().max(0.5 / b.n as f64);
                (tx(b.lo, log), tx(b.hi, log), e, err)
            })
            .collect();
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
                vec![(m, (e - err).max(0.0)), (m, (e + err).min(1.05))],
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

fn read_parquet(path: &Path) -> Result<RecordBatch> {
    let f = std::fs::File::open(path).map_err(|source| ValidationError::Io {
        path: path.into(),
        source,
    })?;
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)?;
    let schema = builder.schema().clone();
    let batches = builder
        .build()?
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(arrow_select::concat::concat_batches(&schema, &batches)?)
}
