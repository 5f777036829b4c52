//! Metric-vs-sparsity curves as a standalone SVG: one polyline with markers per series (e.g.
//! method), linear or logarithmic y axis, ticks, grid and legend. Written by hand (plain SVG
//! text, no font metrics needed), so the same records always give the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::escape::escape;
use super::table::{axis_label, metric, prune_options};
use crate::pipeline::record::RunRecord;

/// What to plot.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotSpec {
    /// The x axis: `sparsity` (measured zeros of unstructured cells) or a numeric swept key.
    pub x: String,
    /// The metric on y (as `wanda table --metric`).
    pub y: String,
    /// The key that splits the points into series, e.g. `method`.
    pub series: String,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// Chart title.
    pub title: String,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// The points of each series, sorted by x: only cells whose x is a number (for `sparsity`,
/// the unstructured ones; N:M cells have no place on a ratio axis).
pub fn series(
    records: &[RunRecord],
    spec: &PlotSpec,
) -> Result<BTreeMap<String, Vec<(f64, f64)>>, String> {
    let mut out: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in records {
        let (Some(y), Some(x)) = (metric(r, &spec.y), x_value(r, &spec.x)) else {
            continue;
        };
        let name = axis_label(r, &spec.series)?;
        out.entry(name).or_default().push((x, y));
    }
    for points in out.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    }
    Ok(out)
}

fn x_value(r: &RunRecord, key: &str) -> Option<f64> {
    if key == "sparsity" {
        let prune = prune_options(r)?;
        return (prune["pattern"] == "unstructured").then(|| prune["sparsity"].as_f64())?;
    }
    r.cell.values.get(key)?.as_f64()
}

/// The SVG of `data`.
pub fn render(data: &BTreeMap<String, Vec<(f64, f64)>>, spec: &PlotSpec) -> Result<String, String> {
    let points: Vec<(f64, f64)> = data.values().flatten().copied().collect();
    if points.is_empty() {
        return Err(format!("no record has both `{}` and `{}`", spec.x, spec.y));
    }
    if spec.log_y && points.iter().any(|p| p.1 <= 0.0) {
        return Err("a logarithmic y axis needs positive values".into());
    }
    let ty = |v: f64| if spec.log_y { v.log10() } else { v };
    let (mut x0, mut x1) = min_max(points.iter().map(|p| p.0));
    let (mut y0, mut y1) = min_max(points.iter().map(|p| ty(p.1)));
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if spec.log_y {
        (y0, y1) = (y0.floor(), y1.ceil().max(y0.floor() + 1.0));
    } else if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let pad = (x1 - x0) * 0.03;
    (x0, x1) = (x0 - pad, x1 + pad);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * plot_w;
    let sy = |y: f64| TOP + plot_h - (ty(y) - y0) / (y1 - y0) * plot_h;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="28" text-anchor="middle" font-size="15">{}</text>"#,
        LEFT + plot_w / 2.0,
        escape(&spec.title)
    );
    // Y ticks: decades on a log axis, five steps on a linear one.
    let ticks: Vec<f64> = if spec.log_y {
        (y0 as i64..=y1 as i64)
            .map(|e| 10f64.powi(e as i32))
            .collect()
    } else {
        (0..=5).map(|i| y0 + (y1 - y0) * i as f64 / 5.0).collect()
    };
    for t in ticks {
        let y = sy(t);
        gridline(&mut svg, LEFT, LEFT + plot_w, y, &number(t));
    }
    let mut xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for x in xs {
        let px = sx(x);
        let label = if spec.x == "sparsity" {
            format!("{:.0}%", x * 100.0)
        } else {
            number(x)
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#eee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 18.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 15.0,
        escape(&spec.x)
    );
    let _ = writeln!(
        svg,
        r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}{}</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(&spec.y),
        if spec.log_y { " (log scale)" } else { "" }
    );
    for (i, (name, pts)) in data.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for &(x, y) in pts {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"/>"#,
                sx(x),
                sy(y)
            );
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = LEFT + plot_w + 15.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx}" y1="{ly}" x2="{:.1}" y2="{ly}" stroke="{colour}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0,
            escape(name)
        );
    }
    svg.push_str("</svg>\n");
    Ok(svg)
}

fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

/// A tick label: whole numbers plainly, others with up to three significant decimals.
/// A horizontal grid line of a plot from `left` to `right` at height `y`, labelled `label`
/// left of the axis.
pub(crate) fn gridline(svg: &mut String, left: f64, right: f64, y: f64, label: &str) {
    let _ = writeln!(
        svg,
        r##"<line x1="{left}" y1="{y:.1}" x2="{right:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
        left - 6.0,
        y + 4.0,
    );
}

fn number(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{v:.0e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}").trim_end_matches('0').to_string()
    }
}
