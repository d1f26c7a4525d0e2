//! The report's second selection beside the faithful chain (plans/pixel-plus.toml): the
//! headline numbers side by side, and the classifier's ROC with both working points.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::{num, pct, plot_err, COLOURS, SIZE};
use crate::truth::{RocPoint, Summary};
use crate::Result;

/// A headline number of both selections, with the second selection's target (⟨PU⟩ 50 and
/// ⟨PU⟩ 100 values) where it has one.
struct Row {
    label: &'static str,
    value: fn(&Summary) -> f64,
    percent: bool,
    target: Option<PlusTarget>,
}

/// The value at ⟨PU⟩ 50, at ⟨PU⟩ 100, and passes(v, target).
type PlusTarget = (f64, f64, fn(f64, f64) -> bool);

const AT_LEAST: fn(f64, f64) -> bool = |v, t| v >= t;
const AT_MOST: fn(f64, f64) -> bool = |v, t| v <= t;

const ROWS: [Row; 12] = [
    Row {
        label: "Track efficiency",
        value: |s| s.track_efficiency,
        percent: true,
        target: Some((0.95, 0.93, AT_LEAST)),
    },
    Row {
        label: "Track fake rate",
        value: |s| s.track_fake_rate,
        percent: true,
        target: Some((0.05, 0.10, AT_MOST)),
    },
    Row {
        label: "Track duplicate rate",
        value: |s| s.track_duplicate_rate,
        percent: true,
        target: None,
    },
    Row {
        label: "Fake rate, tracks with ≥ 4 hits",
        value: |s| s.track_fake_rate_4hits,
        percent: true,
        target: None,
    },
    Row {
        label: "Selected tracks",
        value: |s| s.loose_tracks as f64,
        percent: false,
        target: None,
    },
    Row {
        label: "Vertex efficiency",
        value: |s| s.vertex_efficiency,
        percent: true,
        target: Some((0.90, 0.85, AT_LEAST)),
    },
    Row {
        label: "Vertex merge rate",
        value: |s| s.vertex_merge_rate,
        percent: true,
        target: Some((0.05, f64::INFINITY, AT_MOST)),
    },
    Row {
        label: "of which ≥ 3σ from every other vertex",
        value: |s| s.vertex_merge_rate_resolvable,
        percent: true,
        target: None,
    },
    Row {
        label: "Merge floor: the smaller of a pair < 3σ apart",
        value: |s| s.vertex_merge_floor,
        percent: true,
        target: None,
    },
    Row {
        label: "Vertex split rate",
        value: |s| s.vertex_split_rate,
        percent: true,
        target: None,
    },
    Row {
        label: "Vertex fake rate",
        value: |s| s.vertex_fake_rate,
        percent: true,
        target: None,
    },
    Row {
        label: "Vertex z resolution, µm",
        value: |s| s.vertex_z_resolution_um,
        percent: false,
        target: None,
    },
];

/// The side-by-side table and the ROC, when the run has a second selection.
pub(super) fn section(h: &mut String, s: &Summary) -> Result<()> {
    let Some(p) = &s.plus else { return Ok(()) };
    // The targets of the second selection are set at ⟨PU⟩ 50 and 100: the nearer one applies.
    let high_pu = s.mean_pileup > 75.0;
    h.push_str("<h2 id=\"plus\">Faithful and plus selections</h2>\n");
    h.push_str(
        "<p>The run has a second selection (plans/pixel-plus.toml): tracks the classifier \
        marks <code>highPurity</code> instead of every <code>loose</code> track, and its second \
        vertex collection. Both are measured against the same truth and the same reconstructable \
        vertices (docs/validation.md, “Truth performance”; the plus_ keys of summary.json).</p>\n",
    );
    let _ = writeln!(h, "<table><tr><th>Quantity</th><th>Faithful</th><th>Plus</th><th>Plus target (⟨PU⟩ {})</th><th>Status</th></tr>",
        if high_pu { 100 } else { 50 });
    for r in &ROWS {
        let show = |v: f64| if r.percent { pct(v) } else { num(v) };
        let (f, v) = ((r.value)(s), (r.value)(p));
        let (target, status) = match r.target {
            Some((t50, t100, passes)) => {
                let t = if high_pu { t100 } else { t50 };
                if !t.is_finite() {
                    ("—".to_string(), String::new())
                } else {
                    let word = if !v.is_finite() {
                        "<span class=\"fail\">n/a</span>"
                    } else if passes(v, t) {
                        "<span class=\"pass\">pass</span>"
                    } else {
                        "<span class=\"fail\">fail</span>"
                    };
                    let op = if passes(1.0, 0.0) { "≥" } else { "≤" };
                    (format!("{op} {}", pct(t)), word.to_string())
                }
            }
            None => ("—".to_string(), String::new()),
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{target}</td><td>{status}</td></tr>",
            r.label,
            show(f),
            show(v)
        );
    }
    h.push_str("</table>\n");
    if let Some(svg) = roc_svg(s)? {
        h.push_str(&super::figure(&svg));
        h.push_str("<p>The classifier's ROC: efficiency and fake rate of <code>loose</code> tracks with \
            score ≥ t for t = 0, 0.01, …, 1 (roc.parquet); the faithful chain keeps every loose track, \
            the plus selection those at or above the working point.</p>\n");
    }
    Ok(())
}

/// The ROC plot (also written as `roc.svg`), when the run has a classifier's scores.
pub(super) fn roc_svg(s: &Summary) -> Result<Option<String>> {
    match (&s.plus, s.roc.is_empty()) {
        (Some(p), false) => {
            let faithful = (s.track_fake_rate, s.track_efficiency);
            let plus = (p.track_fake_rate, p.track_efficiency);
            Ok(Some(roc_plot(&s.roc, faithful, plus)?))
        }
        _ => Ok(None),
    }
}

/// Efficiency vs fake rate of the score thresholds, with the two selections marked.
fn roc_plot(points: &[RocPoint], faithful: (f64, f64), plus: (f64, f64)) -> Result<String> {
    let title = "Track classifier: efficiency vs fake rate";
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.fake_rate.is_finite() && p.efficiency.is_finite())
        .map(|p| (p.fake_rate, p.efficiency))
        .collect();
    let marks = [faithful, plus];
    let finite = pts
        .iter()
        .chain(&marks)
        .filter(|p| p.0.is_finite() && p.1.is_finite());
    let (xmax, ymin) = finite.fold((0.0f64, 1.0f64), |(x, y), p| (x.max(p.0), y.min(p.1)));
    let (xmax, ymin) = (1.1 * xmax.max(0.01), (ymin - 0.02).max(0.0));
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(title, e))?;
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, ymin..1.0)
            .map_err(|e| plot_err(title, e))?;
        c.configure_mesh()
            .x_desc("fake rate")
            .y_desc("efficiency")
            .x_label_formatter(&|v| num(*v))
            .y_label_formatter(&|v| num(*v))
            .draw()
            .map_err(|e| plot_err(title, e))?;
        let line = COLOURS[0].stroke_width(2);
        c.draw_series(std::iter::once(PathElement::new(pts.clone(), line)))
            .map_err(|e| plot_err(title, e))?
            .label("score ≥ t")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], line));
        for (i, (name, m)) in [("faithful (loose)", faithful), ("plus (highPurity)", plus)]
            .into_iter()
            .enumerate()
        {
            if !(m.0.is_finite() && m.1.is_finite()) {
                continue;
            }
            let colour = COLOURS[i + 1].filled();
            c.draw_series(std::iter::once(Circle::new(m, 5, colour)))
                .map_err(|e| plot_err(title, e))?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 8, y), 4, colour));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::truth::{summarize, Config};

    #[test]
    fn both_selections_side_by_side_with_the_roc() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = summarize(&[], &Config::default(), Some(dir.path())).unwrap();
        let without = super::super::render(dir.path(), &s).unwrap();
        assert!(!without.contains("id=\"plus\""));
        s.mean_pileup = 50.0;
        (s.track_efficiency, s.track_fake_rate) = (0.969, 0.296);
        let mut p = s.clone();
        (p.track_efficiency, p.track_fake_rate) = (0.955, 0.061);
        (p.vertex_efficiency, p.vertex_merge_rate) = (0.91, 0.04);
        s.plus = Some(Box::new(p));
        s.roc = (0..=100)
            .map(|k| RocPoint {
                threshold: k as f64 / 100.0,
                efficiency: 0.969 - 0.2 * (k as f64 / 100.0).powi(2),
                fake_rate: 0.296 * (1.0 - k as f64 / 100.0),
                tracks: 100 - k,
            })
            .collect();
        let html = super::super::render(dir.path(), &s).unwrap();
        let plus = &html[html.find("id=\"plus\"").unwrap()..];
        let row = |label: &str| {
            let start = plus.find(&format!("<tr><td>{label}</td>")).unwrap();
            &plus[start..start + plus[start..].find("</tr>").unwrap()]
        };
        let fake = row("Track fake rate");
        assert!(
            fake.contains("<td>29.6 %</td><td>6.1 %</td><td>≤ 5 %</td>"),
            "{fake}"
        );
        assert!(fake.contains("fail"), "{fake}");
        let eff = row("Vertex efficiency");
        assert!(
            eff.contains("<td>91 %</td><td>≥ 90 %</td>") && eff.contains("pass"),
            "{eff}"
        );
        assert_eq!(
            html.matches("<svg").count(),
            without.matches("<svg").count() + 1
        );
        assert!(plus.contains("Track classifier: efficiency vs fake rate"));
        // At ⟨PU⟩ 100 the ⟨PU⟩ 100 targets apply.
        s.mean_pileup = 100.0;
        let html = super::super::render(dir.path(), &s).unwrap();
        assert!(html.contains("Plus target (⟨PU⟩ 100)"));
        assert!(html.contains("<td>6.1 %</td><td>≤ 10 %</td>"));
    }
}
