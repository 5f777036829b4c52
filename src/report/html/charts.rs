//! The small inline-SVG bar charts of a cell's details: per-stage peak memory against the
//! estimate, per-layer sparsity against the profile's targets. Plain SVG text with fixed
//! decimals, so the same record always gives the same bytes.

use std::fmt::Write;

use crate::report::escape::escape;
use crate::report::plot::gridline;

/// A bar chart: one bar per label, optionally a horizontal reference line (the estimate, the
/// total sparsity) and a polyline over the bars (a per-layer profile's targets).
#[derive(Debug, Clone)]
pub(super) struct Bars {
    /// The chart's `aria-label` and caption.
    pub title: String,
    /// One label and value per bar.
    pub bars: Vec<(String, f64)>,
    /// A horizontal line across the chart at this value, with its legend text.
    pub reference: Option<(f64, String)>,
    /// One point per bar, joined by a line, with its legend text.
    pub overlay: Option<(Vec<f64>, String)>,
    /// The top of the y axis; the largest value plus a margin when `None`.
    pub y_max: Option<f64>,
    /// Formats a value for tick labels and bar tooltips.
    pub format: fn(f64) -> String,
}

const HEIGHT: f64 = 220.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 46.0;
const BAR_COLOUR: &str = "#4e79a7";
const REFERENCE_COLOUR: &str = "#d62728";
const OVERLAY_COLOUR: &str = "#f28e2b";

impl Bars {
    /// The chart as an inline `<svg>`; widths grow with the number of bars.
    pub fn render(&self) -> String {
        let n = self.bars.len().max(1) as f64;
        let slot = if n > 12.0 { 18.0 } else { 56.0 };
        let plot_w = (slot * n).max(240.0);
        let width = LEFT + plot_w + RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let largest = self
            .bars
            .iter()
            .map(|b| b.1)
            .chain(self.reference.iter().map(|r| r.0))
            .chain(self.overlay.iter().flat_map(|o| o.0.iter().copied()))
            .fold(0.0f64, f64::max);
        let y_max = self.y_max.unwrap_or(largest * 1.15).max(f64::MIN_POSITIVE);
        let sy = |v: f64| TOP + plot_h - (v / y_max).clamp(0.0, 1.0) * plot_h;
        let step = plot_w / n;
        let sx = |i: usize| LEFT + step * (i as f64 + 0.5);
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="bars" width="{width:.0}" height="{HEIGHT:.0}" viewBox="0 0 {width:.0} {HEIGHT:.0}" role="img" aria-label="{title}" font-family="sans-serif" font-size="11"><title>{title}</title>"#,
            title = escape(&self.title)
        );
        for i in 0..=4 {
            let v = y_max * f64::from(i) / 4.0;
            let y = sy(v);
            gridline(&mut svg, LEFT, LEFT + plot_w, y, &escape(&(self.format)(v)));
        }
        let bar_w = step * 0.7;
        // At most 16 labels under the bars, so they never overlap.
        let label_every = self.bars.len().div_ceil(16).max(1);
        for (i, (label, value)) in self.bars.iter().enumerate() {
            let (x, y) = (sx(i), sy(*value));
            let _ = writeln!(
                svg,
                r#"<rect class="bar" x="{:.1}" y="{y:.1}" width="{bar_w:.1}" height="{:.1}" fill="{BAR_COLOUR}"><title>{}: {}</title></rect>"#,
                x - bar_w / 2.0,
                TOP + plot_h - y,
                escape(label),
                escape(&(self.format)(*value))
            );
            if i % label_every == 0 {
                let _ = writeln!(
                    svg,
                    r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                    TOP + plot_h + 14.0,
                    escape(label)
                );
            }
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT}" y="{TOP}" width="{plot_w:.1}" height="{plot_h:.1}" fill="none" stroke="black"/>"#
        );
        let mut legend = Vec::new();
        if let Some((points, name)) = &self.overlay {
            let path: Vec<String> = points
                .iter()
                .enumerate()
                .map(|(i, &v)| format!("{:.1},{:.1}", sx(i), sy(v)))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline class="overlay" points="{}" fill="none" stroke="{OVERLAY_COLOUR}" stroke-width="2"/>"#,
                path.join(" ")
            );
            legend.push((OVERLAY_COLOUR, name.clone()));
        }
        if let Some((value, name)) = &self.reference {
            let y = sy(*value);
            let _ = writeln!(
                svg,
                r#"<line class="reference" x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{REFERENCE_COLOUR}" stroke-width="2" stroke-dasharray="6 4"/>"#,
                LEFT + plot_w
            );
            legend.push((REFERENCE_COLOUR, name.clone()));
        }
        let mut lx = LEFT;
        for (colour, name) in legend {
            let _ = writeln!(
                svg,
                r#"<line x1="{lx:.1}" y1="14" x2="{:.1}" y2="14" stroke="{colour}" stroke-width="2"/><text x="{:.1}" y="18">{}</text>"#,
                lx + 20.0,
                lx + 24.0,
                escape(&name)
            );
            lx += 40.0 + 6.5 * name.chars().count() as f64;
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// Bytes as GiB (MiB below one GiB), two decimals.
pub(super) fn bytes(v: f64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    if v >= GIB {
        format!("{:.2} GiB", v / GIB)
    } else {
        format!("{:.0} MiB", v / MIB)
    }
}

/// A fraction as a percentage, one decimal.
pub(super) fn percent(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Bars {
        Bars {
            title: "memory <of> a & b".into(),
            bars: vec![
                ("load".into(), 2.0 * 1024.0 * 1024.0),
                ("prune".into(), 3e9),
            ],
            reference: Some((2.5e9, "estimate".into())),
            overlay: None,
            y_max: None,
            format: bytes,
        }
    }

    #[test]
    fn bars_scale_to_the_largest_value_and_draw_the_reference_line() {
        let svg = chart().render();
        assert_eq!(svg.matches(r#"class="bar""#).count(), 2);
        assert!(svg.contains(r#"class="reference""#));
        assert!(!svg.contains("polyline"));
        assert!(svg.contains("memory &lt;of&gt; a &amp; b"));
        assert!(!svg.contains("<of>"));
        // The tallest bar (3e9) reaches 1/1.15 of the plot's height: y = 28 + 146 - 146/1.15.
        let top = 28.0 + 146.0 - 146.0 / 1.15;
        assert!(svg.contains(&format!(r#"y="{top:.1}""#)), "{svg}");
        // The reference line sits below the tallest bar's top.
        let reference = 28.0 + 146.0 - 146.0 * 2.5 / 3.0 / 1.15;
        assert!(svg.contains(&format!(r#"y1="{reference:.1}""#)), "{svg}");
    }

    #[test]
    fn an_overlay_has_one_point_per_bar_within_a_fixed_axis() {
        let svg = Bars {
            title: "layers".into(),
            bars: (0..30).map(|i| (i.to_string(), 0.5)).collect(),
            reference: None,
            overlay: Some((
                (0..30).map(|i| 0.4 + 0.01 * f64::from(i)).collect(),
                "target".into(),
            )),
            y_max: Some(1.0),
            format: percent,
        }
        .render();
        let points = svg
            .split(r#"class="overlay" points=""#)
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("an overlay polyline");
        assert_eq!(points.split(' ').count(), 30);
        assert!(svg.contains(">100.0%<"), "the axis tops at y_max: {svg}");
        // Thirty bars label every other one.
        assert_eq!(svg.matches("text-anchor=\"middle\"").count(), 15);
    }

    #[test]
    fn sizes_and_fractions_print_in_their_units() {
        assert_eq!(bytes(1.5 * (1u64 << 30) as f64), "1.50 GiB");
        assert_eq!(bytes(300.0 * (1u64 << 20) as f64), "300 MiB");
        assert_eq!(percent(0.6), "60.0%");
    }
}
