//! `wanda report`: one self-contained HTML page of a results folder, regenerated from its
//! run.json records alone — the perplexity table and plot, zero-shot and speed tables where
//! records hold them, and per cell its recipe, provenance, memory and per-layer sparsity
//! ([`cell`]), with the cells that failed or could not be read named. No network, scripts or
//! fonts: inline CSS and SVG only, and no timestamp, so the same folder gives the same bytes.

mod cell;
mod charts;

use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::escape::escape;
use super::plot::{self, PlotSpec};
use super::table::{
    axis_label, build, files_named, is_dense, metric, prune_options, read_records, Skipped, Table,
    TableSpec,
};
use crate::pipeline::attempt::{Attempt, AttemptState, ATTEMPT_FILE};
use crate::pipeline::record::{RunRecord, RECORD_FILE};

/// What a page shows: the readable records of a folder and the cells that have none.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The heading.
    pub title: String,
    /// The results folder, for showing paths relative to it.
    pub dir: PathBuf,
    /// Every readable record, sorted by path.
    pub records: Vec<(PathBuf, RunRecord)>,
    /// Records that could not be read and cells whose last attempt failed or never finished.
    pub failures: Vec<Skipped>,
}

impl Page {
    /// Reads every run.json below `dir`, and every attempt.json of a cell without one.
    pub fn read(dir: &Path, title: String) -> Self {
        let (records, mut failures) = read_records(dir);
        for path in files_named(dir, ATTEMPT_FILE) {
            if path.with_file_name(RECORD_FILE).exists() {
                continue;
            }
            let reason = match Attempt::read(&path) {
                Some(a) if a.state == AttemptState::Failed => {
                    format!("failed: {}", a.error.as_deref().unwrap_or("no error recorded"))
                }
                Some(a) => format!(
                    "no record: started by process {} on `{}` and not finished (running, or killed)",
                    a.pid, a.host
                ),
                None => "no record, and an attempt.json that cannot be read".into(),
            };
            failures.push(Skipped { path, reason });
        }
        failures.sort_by(|a, b| a.path.cmp(&b.path));
        Self {
            title,
            dir: dir.to_path_buf(),
            records,
            failures,
        }
    }

    /// `path` relative to the results folder, for display.
    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.dir)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// The anchor of each record (`cell-<id>`, made unique by a suffix where two records share an
/// id), in the order of `records`.
fn anchors(records: &[(PathBuf, RunRecord)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(records.len());
    for (_, r) in records {
        let safe: String = r
            .cell
            .id
            .0
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let base = format!("cell-{safe}");
        let mut anchor = base.clone();
        let mut n = 1;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.push(anchor);
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;\
padding:0 1em;color:#222}h1{margin-bottom:.2em}h2{border-bottom:1px solid #ccc;margin-top:2em}\
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:.2em .6em}\
td.num{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}\
a{color:#1f5fa6;text-decoration:none}a:hover{text-decoration:underline}\
.note{color:#666;font-style:italic}table.kv th{text-align:left}svg{max-width:100%;height:auto}\
section.cell{border:1px solid #ddd;border-radius:6px;padding:.5em 1em;margin:1em 0}\
section.cell:target{border-color:#1f5fa6;box-shadow:0 0 0 3px #cfe0f5}\
pre{background:#f7f7f7;padding:.5em;overflow:auto;font-size:85%}code{font-size:90%}\
.failures li{color:#a00}";

/// The page as one HTML document.
pub fn render(page: &Page) -> String {
    let records: Vec<RunRecord> = page.records.iter().map(|(_, r)| r.clone()).collect();
    let anchors = anchors(&page.records);
    let order = cell_order(&page.records);
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n",
        title = escape(&page.title)
    );
    let mut pipelines: Vec<&str> = records.iter().map(|r| r.cell.pipeline.as_str()).collect();
    pipelines.sort_unstable();
    pipelines.dedup();
    let _ = writeln!(
        html,
        "<p>{} cell record(s) of pipeline {} in <code>{}</code>; {} failed or unreadable. \
         Regenerate with <code>wanda report {}</code>.</p>",
        records.len(),
        pipelines
            .iter()
            .map(|p| format!("<code>{}</code>", escape(p)))
            .collect::<Vec<_>>()
            .join(", "),
        escape(&page.dir.display().to_string()),
        page.failures.len(),
        escape(&page.dir.display().to_string()),
    );
    html.push_str(
        "<nav><a href=\"#perplexity\">Perplexity</a> · <a href=\"#zeroshot\">Zero-shot</a> · \
         <a href=\"#speed\">Speed</a> · <a href=\"#cells\">Cells</a> · \
         <a href=\"#failures\">Failures</a></nav>\n",
    );
    perplexity_section(&mut html, &records, &anchors, &page.title);
    zeroshot_section(&mut html, &records, &anchors);
    speed_section(&mut html, &records, &anchors);
    cells_section(&mut html, page, &anchors, &order);
    failures_section(&mut html, page);
    html.push_str("<h2>Cell details</h2>\n");
    for &i in &order {
        let ((path, r), anchor) = (&page.records[i], &anchors[i]);
        let folder = path.parent().unwrap_or(&page.dir);
        html.push_str(&cell::details(r, &page.shown(path), folder, anchor));
    }
    html.push_str("</body>\n</html>\n");
    html
}

/// Finds the record behind a table value: the row's records (by the row keys' labels, or the
/// dense ones), in the value's column where the column is a record's axis, with that value.
struct Lookup<'a> {
    records: &'a [RunRecord],
    rows: &'a [&'a str],
    col: Option<&'a str>,
    value: &'a dyn Fn(&RunRecord) -> Option<f64>,
}

impl Lookup<'_> {
    fn find(&self, row: &str, col: &str, value: f64) -> Option<usize> {
        self.records.iter().position(|r| {
            let in_row = if row == "dense" {
                is_dense(r)
            } else {
                !is_dense(r)
                    && self
                        .rows
                        .iter()
                        .map(|k| axis_label(r, k).unwrap_or_default())
                        .collect::<Vec<_>>()
                        .join(" ")
                        == row
            };
            let in_col = row == "dense"
                || self
                    .col
                    .is_none_or(|k| axis_label(r, k).is_ok_and(|l| l == col));
            let same = self
                .col
                .is_none_or(|_| (self.value)(r).is_some_and(|v| v == value));
            in_row && in_col && same
        })
    }
}

/// `table` as HTML: the best value of each column bold, settings marks as superscripts and
/// footnotes, each value linked to its cell's details.
fn table_html(table: &Table, decimals: usize, lookup: &Lookup, anchors: &[String]) -> String {
    let mut out = String::from("<table>\n<thead><tr>");
    let _ = write!(out, "<th>{}</th>", escape(&table.metric));
    for c in &table.cols {
        let _ = write!(out, "<th>{}</th>", escape(c));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for (label, values) in &table.rows {
        let _ = write!(out, "<tr><th>{}</th>", escape(label));
        for (col, cell) in table.cols.iter().zip(values) {
            let shown: Vec<String> = cell
                .iter()
                .map(|v| {
                    let mut n = format!("{:.decimals$}", v.value);
                    if let Some(i) = lookup.find(label, col, v.value) {
                        n = format!("<a href=\"#{}\">{n}</a>", escape(&anchors[i]));
                    }
                    if v.best {
                        n = format!("<strong>{n}</strong>");
                    }
                    if v.note > 0 {
                        let _ = write!(n, "<sup>{}</sup>", v.note);
                    }
                    n
                })
                .collect();
            let text = if shown.is_empty() {
                "—".to_string()
            } else {
                shown.join(" / ")
            };
            let _ = write!(out, "<td class=\"num\">{text}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    if !table.footnotes.is_empty() {
        out.push_str("<ol class=\"footnotes\">\n");
        for f in &table.footnotes {
            let _ = writeln!(out, "<li>{}</li>", escape(f));
        }
        out.push_str("</ol>\n");
    }
    out
}

/// A one-line note in place of a section without data; `` `x` `` becomes code.
fn note(html: &mut String, text: &str) {
    let text: String = escape(text)
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part.to_string()
            }
        })
        .collect();
    let _ = writeln!(html, "<p class=\"note\">{text}</p>");
}

/// The perplexity table (as `wanda table`) and the perplexity-vs-sparsity plot (log y).
fn perplexity_section(html: &mut String, records: &[RunRecord], anchors: &[String], title: &str) {
    html.push_str("<h2 id=\"perplexity\">Perplexity</h2>\n");
    let spec = TableSpec::perplexity();
    let ppl = |r: &RunRecord| metric(r, "ppl");
    let lookup = Lookup {
        records,
        rows: &["method"],
        col: Some("sparsity"),
        value: &ppl,
    };
    match build(records, &spec) {
        Ok(t) if !t.rows.is_empty() => html.push_str(&table_html(&t, 2, &lookup, anchors)),
        _ => return note(html, "No record has a perplexity."),
    }
    let spec = PlotSpec {
        x: "sparsity".into(),
        y: "ppl".into(),
        series: "method".into(),
        log_y: true,
        title: format!("{title}: perplexity vs sparsity"),
    };
    let svg = plot::series(records, &spec).and_then(|data| plot::render(&data, &spec));
    match svg {
        Ok(svg) => {
            html.push_str("<figure class=\"plot\">\n");
            html.push_str(&svg);
            html.push_str(
                "<figcaption>Unstructured cells only (N:M patterns have no place on a ratio \
                 axis).</figcaption>\n</figure>\n",
            );
        }
        Err(e) => note(html, &format!("No plot: {e}.")),
    }
}

/// Zero-shot accuracy per task (the paper's Table 2 shape), one row per method and sparsity.
fn zeroshot_section(html: &mut String, records: &[RunRecord], anchors: &[String]) {
    html.push_str("<h2 id=\"zeroshot\">Zero-shot accuracy</h2>\n");
    let spec = TableSpec {
        rows: vec!["method".into(), "sparsity".into()],
        cols: vec!["task".into()],
        metric: "zeroshot".into(),
        decimals: 2,
        higher_is_better: true,
    };
    let none = |_: &RunRecord| None;
    let with_zeroshot: Vec<RunRecord> = records
        .iter()
        .filter(|r| r.metrics.zeroshot.is_some())
        .cloned()
        .collect();
    let lookup = Lookup {
        records: &with_zeroshot,
        rows: &["method", "sparsity"],
        col: None,
        value: &none,
    };
    // Anchors of the filtered records, so a found index still names the right cell.
    let filtered_anchors: Vec<String> = records
        .iter()
        .zip(anchors)
        .filter(|(r, _)| r.metrics.zeroshot.is_some())
        .map(|(_, a)| a.clone())
        .collect();
    match build(&with_zeroshot, &spec) {
        Ok(t) if !t.rows.is_empty() => {
            html.push_str(&table_html(&t, 2, &lookup, &filtered_anchors));
        }
        _ => note(
            html,
            "No record has zero-shot metrics (an eval stage with `zeroshot:` writes them).",
        ),
    }
}

/// Whether a metric key names a speed measurement (tokens per second, a speedup).
fn is_speed_key(key: &str) -> bool {
    key.contains("speedup") || key.contains("tokens_per_s") || key.ends_with("tok_s")
}

/// One table per speed metric the records hold, rows by method, columns by sparsity.
fn speed_section(html: &mut String, records: &[RunRecord], anchors: &[String]) {
    html.push_str("<h2 id=\"speed\">Speed</h2>\n");
    let mut keys: Vec<&String> = records
        .iter()
        .flat_map(|r| r.metrics.other.iter())
        .filter(|(k, v)| is_speed_key(k) && v.is_number())
        .map(|(k, _)| k)
        .collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.is_empty() {
        return note(
            html,
            "No record holds a speed measurement (a metric named `*speedup*`, `*tokens_per_s*` \
             or `*tok_s`); nothing to tabulate.",
        );
    }
    for key in keys {
        let spec = TableSpec {
            rows: vec!["method".into()],
            cols: vec!["sparsity".into()],
            metric: key.clone(),
            decimals: 2,
            higher_is_better: true,
        };
        let value = |r: &RunRecord| metric(r, key);
        let lookup = Lookup {
            records,
            rows: &["method"],
            col: Some("sparsity"),
            value: &value,
        };
        if let Ok(t) = build(records, &spec) {
            html.push_str(&table_html(&t, 2, &lookup, anchors));
        }
    }
}

/// The records' indices by method, then unstructured ratios before N:M patterns, then sparsity.
fn cell_order(records: &[(PathBuf, RunRecord)]) -> Vec<usize> {
    let key = |r: &RunRecord| {
        let prune = prune_options(r);
        let pattern = prune.and_then(|p| p["pattern"].as_str()).unwrap_or("");
        let sparsity = prune.and_then(|p| p["sparsity"].as_f64()).unwrap_or(0.0);
        (
            axis_label(r, "method").unwrap_or_default(),
            pattern.contains(':'),
            (sparsity * 1e6).round() as i64,
            r.cell.label.clone(),
        )
    };
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.sort_by_cached_key(|&i| key(&records[i].1));
    order
}

/// Every cell in one list (in `order`), each linked to its details.
fn cells_section(html: &mut String, page: &Page, anchors: &[String], order: &[usize]) {
    html.push_str(
        "<h2 id=\"cells\">Cells</h2>\n<table>\n<thead><tr><th>cell</th><th>method</th>\
         <th>sparsity</th><th>ppl</th><th>measured sparsity</th><th>total s</th>\
         <th>peak RSS</th></tr></thead>\n<tbody>\n",
    );
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("—".to_string(), f);
    for &i in order {
        let (r, anchor) = (&page.records[i].1, &anchors[i]);
        let _ = writeln!(
            html,
            "<tr><td><a href=\"#{}\">{}</a></td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{:.1}</td><td class=\"num\">{}</td></tr>",
            escape(anchor),
            escape(&r.cell.label),
            escape(&axis_label(r, "method").unwrap_or_default()),
            escape(&axis_label(r, "sparsity").unwrap_or_default()),
            opt(r.metrics.perplexity, &|v| format!("{v:.2}")),
            opt(r.sparsity.total, &charts::percent),
            r.timings.total_s,
            opt(r.memory.peak_rss_bytes.map(|b| b as f64), &charts::bytes),
        );
    }
    html.push_str("</tbody>\n</table>\n");
}

/// The cells without a usable record, each with the reason.
fn failures_section(html: &mut String, page: &Page) {
    html.push_str("<h2 id=\"failures\">Failed and unreadable cells</h2>\n");
    if page.failures.is_empty() {
        return note(
            html,
            "None: every cell below the folder has a readable record.",
        );
    }
    html.push_str("<ul class=\"failures\">\n");
    for f in &page.failures {
        // A record's error names its path first; the page names it once, relative.
        let prefix = format!("`{}`: ", f.path.display());
        let reason = f.reason.strip_prefix(&prefix).unwrap_or(&f.reason);
        let _ = writeln!(
            html,
            "<li><code>{}</code>: {}</li>",
            escape(&page.shown(&f.path)),
            escape(reason)
        );
    }
    html.push_str("</ul>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, method: &str, sparsity: f64, ppl: f64) -> RunRecord {
        let stages = if sparsity == 0.0 {
            serde_json::json!([{ "id": "load", "kind": "load" }])
        } else {
            serde_json::json!([{ "id": "load", "kind": "load" },
                               { "id": "prune", "kind": "prune", "method": method,
                                 "pattern": "unstructured", "sparsity": sparsity }])
        };
        serde_json::from_value(serde_json::json!({
            "cell": { "id": id, "label": format!("{method}-{sparsity}"), "pipeline": "tiny" },
            "config": { "model": { "gguf": "m.gguf" }, "stages": stages },
            "effective": { "seed": 0, "device": "cpu" },
            "metrics": { "perplexity": ppl },
            "sparsity": { "total": sparsity },
            "versions": { "record": 1, "wanda": "0.1.0" }
        }))
        .unwrap()
    }

    fn page(records: Vec<RunRecord>) -> Page {
        Page {
            title: "tiny <sweep>".into(),
            dir: PathBuf::from("results/tiny"),
            records: records
                .into_iter()
                .map(|r| {
                    (
                        PathBuf::from(format!("results/tiny/{}/run.json", r.cell.id.0)),
                        r,
                    )
                })
                .collect(),
            failures: Vec::new(),
        }
    }

    fn tiny() -> Vec<RunRecord> {
        vec![
            record("d0", "dense", 0.0, 30.0),
            record("m5", "magnitude", 0.5, 300.0),
            record("w5", "wanda", 0.5, 60.0),
            record("w6", "wanda", 0.6, 150.0),
        ]
    }

    #[test]
    fn the_title_is_escaped() {
        let html = render(&page(tiny()));
        assert!(html.contains("<title>tiny &lt;sweep&gt;</title>"));
        assert!(!html.contains("tiny <sweep>"));
    }

    #[test]
    fn anchors_are_unique_and_safe() {
        let mut records = page(tiny()).records;
        records.push(records[1].clone());
        records[0].1.cell.id.0 = "a b\"<".into();
        assert_eq!(
            anchors(&records),
            ["cell-a-b--", "cell-m5", "cell-w5", "cell-w6", "cell-m5-2"]
        );
    }

    #[test]
    fn table_values_link_to_their_cells_and_the_plot_is_inline() {
        let html = render(&page(tiny()));
        // Wanda's 50 % perplexity, bold (best of its column), links to its cell's section.
        assert!(
            html.contains("<strong><a href=\"#cell-w5\">60.00</a></strong>"),
            "{html}"
        );
        assert!(html.contains("<a href=\"#cell-m5\">300.00</a>"));
        assert!(
            html.contains("<a href=\"#cell-d0\">30.00</a>"),
            "the dense row links too"
        );
        assert!(html.contains("<section class=\"cell\" id=\"cell-w5\">"));
        assert_eq!(html.matches("<section class=\"cell\"").count(), 4);
        // Details by method, then sparsity: dense, magnitude, wanda 50 %, wanda 60 %.
        let at = |id: &str| {
            html.find(&format!("<section class=\"cell\" id=\"{id}\">"))
                .unwrap()
        };
        assert!(at("cell-d0") < at("cell-m5") && at("cell-m5") < at("cell-w5"));
        assert!(at("cell-w5") < at("cell-w6"));
        // The plot: one polyline per pruning method, log scale.
        let plot = &html[html.find("<figure class=\"plot\">").unwrap()..];
        assert_eq!(
            plot[..plot.find("</figure>").unwrap()]
                .matches("<polyline")
                .count(),
            2
        );
        assert!(html.contains("ppl (log scale)"));
        assert!(!html.contains("<script"), "no script, no network");
        let offline = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        assert!(
            !offline.contains("http") && !offline.contains("<link"),
            "nothing fetched"
        );
    }

    #[test]
    fn sections_without_data_are_replaced_by_a_note() {
        let html = render(&page(tiny()));
        assert!(html.contains("No record has zero-shot metrics"));
        assert!(html.contains("No record holds a speed measurement"));
        assert!(html.contains("None: every cell below the folder has a readable record."));
        let mut no_ppl = tiny();
        for r in &mut no_ppl {
            r.metrics.perplexity = None;
        }
        let html = render(&page(no_ppl));
        assert!(html.contains("No record has a perplexity."));
        assert!(!html.contains("<figure"));
    }

    #[test]
    fn speed_and_zero_shot_tables_appear_when_records_hold_them() {
        let mut records = tiny();
        records[2]
            .metrics
            .other
            .insert("decode_tokens_per_s".into(), serde_json::json!(123.456));
        records[2].metrics.zeroshot = serde_json::from_value(serde_json::json!({
            "boolq": { "acc": 0.625, "acc_stderr": null, "n": 8 },
            "mean": 0.625, "lm_eval": "0.4"
        }))
        .unwrap();
        let html = render(&page(records));
        assert!(html.contains("<th>decode_tokens_per_s</th>"));
        assert!(html.contains("<a href=\"#cell-w5\">123.46</a>"));
        assert!(!html.contains("No record holds a speed measurement"));
        assert!(html.contains("<th>boolq</th>"));
        assert!(html.contains("<tr><th>wanda 50%</th>"));
        assert!(html.contains("<a href=\"#cell-w5\">62.50</a>"));
        assert!(!html.contains("No record has zero-shot metrics"));
    }

    #[test]
    fn failed_and_unreadable_cells_are_named_with_their_reason() {
        let dir = std::env::temp_dir().join(format!("wanda-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (cell, file, text) in [
            ("ok", RECORD_FILE, serde_json::to_string(&tiny()[1]).unwrap()),
            ("broken", RECORD_FILE, "{ \"cell\": ".to_string()),
            (
                "died",
                ATTEMPT_FILE,
                r#"{"state":"failed","pid":1,"host":"h","started_unix":0,"slurm_task":null,"error":"out of <memory>"}"#.to_string(),
            ),
        ] {
            std::fs::create_dir_all(dir.join(cell)).unwrap();
            std::fs::write(dir.join(cell).join(file), text).unwrap();
        }
        let page = Page::read(&dir, "t".into());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(page.records.len(), 1);
        let html = render(&page);
        assert!(
            html.contains(
                "<li><code>broken/run.json</code>: corrupt run record (not valid json)</li>"
            ),
            "{html}"
        );
        assert!(html.contains("corrupt run record"));
        assert!(
            html.contains("<li><code>died/attempt.json</code>: failed: out of &lt;memory&gt;</li>")
        );
    }
}
