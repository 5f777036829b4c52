//! Paper-style tables from run records: one row per value of the row axis (e.g. method), one
//! column per value of the column axis (e.g. sparsity), a dense baseline row from the cells
//! that pruned nothing, the best value of each column in bold.
//!
//! Records run with different settings (calibration size, evaluation window and count, data
//! and model hashes, seed) are never merged silently: when a table holds more than one set of
//! settings, every value carries a footnote mark naming its set. Output is deterministic
//! (sorted axes, fixed decimals), so tables diff cleanly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::pipeline::record::{RunRecord, RECORD_FILE};

/// What to tabulate.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    /// Axis keys of the rows, e.g. `["method"]` or `["pattern", "method"]`.
    pub rows: Vec<String>,
    /// Axis keys of the columns, e.g. `["sparsity"]`.
    pub cols: Vec<String>,
    /// The metric: `ppl`, `sparsity`, `prune_s`, `peak_rss_gib`, or a key of `metrics`.
    pub metric: String,
    /// Decimals printed.
    pub decimals: usize,
    /// Whether larger values are better (for the bold best of each column).
    pub higher_is_better: bool,
}

impl TableSpec {
    /// The paper's perplexity table: a row per method, a column per sparsity, two decimals,
    /// lower is better.
    pub fn perplexity() -> TableSpec {
        TableSpec {
            rows: vec!["method".into()],
            cols: vec!["sparsity".into()],
            metric: "ppl".into(),
            decimals: 2,
            higher_is_better: false,
        }
    }
}

/// A run record that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub reason: String,
}

/// Every `run.json` below `dir` (sorted by path), and those that could not be read.
pub fn read_records(dir: &Path) -> (Vec<(PathBuf, RunRecord)>, Vec<Skipped>) {
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    for path in files_named(dir, RECORD_FILE) {
        match RunRecord::read(&path) {
            Ok(r) => records.push((path, r)),
            Err(e) => skipped.push(Skipped {
                reason: e.to_string(),
                path,
            }),
        }
    }
    (records, skipped)
}

/// Every file called `name` below `dir`, sorted by path.
pub(crate) fn files_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    collect(dir, name, &mut files);
    files.sort();
    files
}

fn collect(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, name, out);
        } else if path.file_name().is_some_and(|n| n == name) {
            out.push(path);
        }
    }
}

/// One value of the table with its settings' footnote (1-based; 0 when the table has only one
/// set of settings).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Value {
    /// The metric.
    pub value: f64,
    /// Footnote number of its settings.
    pub note: usize,
    /// Whether it is the best of its column.
    pub best: bool,
}

/// A rendered-ready table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table {
    /// The metric's name.
    pub metric: String,
    /// Column labels, in order.
    pub cols: Vec<String>,
    /// Row labels with their values per column (several when settings differ).
    pub rows: Vec<(String, Vec<Vec<Value>>)>,
    /// The settings behind each footnote number (1-based), when there is more than one.
    pub footnotes: Vec<String>,
}

/// The metric that renders the paper's Table 2 shape: zero-shot accuracy (percent) per task as
/// columns, their mean last (`zeroshot_norm`: `acc_norm` where lm-eval reports it, else `acc`).
const ZEROSHOT_METRICS: [&str; 2] = ["zeroshot", "zeroshot_norm"];

/// The metric that renders the shape of the paper's speedup table (its Table 6): per row, the
/// decode and prefill tokens/s with the pruned linears compressed over dense, and the dense
/// weights' bytes over the compressed ones (records of an eval stage with `speed:`).
const SPEEDUP_METRIC: &str = "speedup";

/// Builds the table of `records` as `spec` asks.
pub fn build(records: &[RunRecord], spec: &TableSpec) -> Result<Table, String> {
    if spec.metric == SPEEDUP_METRIC {
        // Every column is a factor of gain: the largest is the best.
        let spec = TableSpec {
            higher_is_better: true,
            ..spec.clone()
        };
        let mut table = build_with(records, &spec, |r| Ok(speedup_columns(r)))?;
        table.metric = "× dense".to_owned();
        return Ok(table);
    }
    if ZEROSHOT_METRICS.contains(&spec.metric.as_str()) {
        let norm = spec.metric == "zeroshot_norm";
        // Accuracy: the largest is the best, whatever `--higher-is-better` says.
        let spec = TableSpec {
            higher_is_better: true,
            ..spec.clone()
        };
        let mut table = build_with(records, &spec, |r| Ok(zeroshot_columns(r, norm)))?;
        table.metric = if norm { "acc_norm/acc %" } else { "acc %" }.to_owned();
        return Ok(table);
    }
    build_with(records, spec, |r| {
        Ok(match metric(r, &spec.metric) {
            Some(value) => vec![(axis(r, &spec.cols)?, value)],
            None => Vec::new(),
        })
    })
}

/// `r`'s decode and prefill speedups and the factor its weights' bytes shrank by, as columns;
/// none for a record without them.
fn speedup_columns(r: &RunRecord) -> Vec<(AxisKey, f64)> {
    let metric = |key: &str| r.metrics.other.get(key).and_then(|v| v.as_f64());
    let columns = [
        ("decode ×", metric("decode_speedup")),
        ("prefill ×", metric("prefill_speedup")),
        (
            "weight bytes ÷",
            metric("weight_bytes_ratio").map(|ratio| 1.0 / ratio),
        ),
    ];
    columns
        .into_iter()
        .enumerate()
        .filter_map(|(order, (label, value))| {
            let key = AxisKey {
                order: vec![(0, order as i64, String::new())],
                label: label.to_owned(),
            };
            Some((key, value?))
        })
        .collect()
}

/// Per task a column of `r`'s zero-shot accuracy in percent (`acc_norm` where it has it and
/// `norm`), in the paper's task order, then the mean of those columns.
fn zeroshot_columns(r: &RunRecord, norm: bool) -> Vec<(AxisKey, f64)> {
    use crate::eval::zeroshot::Task;
    let Some(z) = &r.metrics.zeroshot else {
        return Vec::new();
    };
    let mut columns: Vec<(AxisKey, f64)> = Vec::new();
    for (order, task) in Task::ALL.iter().enumerate() {
        if let Some(score) = z.tasks.get(task.name()) {
            let value = if norm {
                score.acc_norm.unwrap_or(score.acc)
            } else {
                score.acc
            };
            columns.push((
                AxisKey {
                    order: vec![(0, order as i64, String::new())],
                    label: task.name().to_owned(),
                },
                100.0 * value,
            ));
        }
    }
    let mean = columns.iter().map(|(_, v)| v).sum::<f64>() / columns.len().max(1) as f64;
    if !columns.is_empty() {
        columns.push((
            AxisKey {
                order: vec![(1, 0, String::new())],
                label: "mean".to_owned(),
            },
            mean,
        ));
    }
    columns
}

/// Builds a table whose cells `values` gives per record: `(column, value)` pairs.
fn build_with(
    records: &[RunRecord],
    spec: &TableSpec,
    values: impl Fn(&RunRecord) -> Result<Vec<(AxisKey, f64)>, String>,
) -> Result<Table, String> {
    let mut settings: Vec<String> = Vec::new();
    // (row, col) → values with their settings index.
    let mut cells: BTreeMap<(AxisKey, AxisKey), Vec<(f64, usize)>> = BTreeMap::new();
    let mut dense: BTreeMap<AxisKey, Vec<(f64, usize)>> = BTreeMap::new();
    for r in records {
        let pairs = values(r)?;
        if pairs.is_empty() {
            continue;
        }
        let signature = settings_of(r);
        let index = match settings.iter().position(|s| *s == signature) {
            Some(i) => i,
            None => {
                settings.push(signature);
                settings.len() - 1
            }
        };
        if is_dense(r) {
            for (col, value) in pairs {
                dense.entry(col).or_default().push((value, index));
            }
            continue;
        }
        let row = axis(r, &spec.rows)?;
        for (col, value) in pairs {
            cells
                .entry((row.clone(), col))
                .or_default()
                .push((value, index));
        }
    }
    let mut cols: Vec<AxisKey> = cells.keys().map(|(_, c)| c.clone()).collect();
    cols.sort();
    cols.dedup();
    let mut row_keys: Vec<AxisKey> = cells.keys().map(|(r, _)| r.clone()).collect();
    row_keys.sort();
    row_keys.dedup();
    let noted = settings.len() > 1;
    let to_values = |v: &[(f64, usize)]| -> Vec<Value> {
        let mut v: Vec<(f64, usize)> = v.to_vec();
        v.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.total_cmp(&b.0)));
        v.dedup();
        v.into_iter()
            .map(|(value, i)| Value {
                value,
                note: if noted { i + 1 } else { 0 },
                best: false,
            })
            .collect()
    };
    let mut rows: Vec<(String, Vec<Vec<Value>>)> = Vec::new();
    if !dense.is_empty() {
        // A dense record's value applies to every column (the same model at every ratio)
        // unless its values are per column (zero-shot tasks).
        let all: Vec<(f64, usize)> = dense.values().flatten().copied().collect();
        let per_column = cols.iter().any(|c| dense.contains_key(c));
        let values = if per_column {
            cols.iter()
                .map(|c| dense.get(c).map_or_else(Vec::new, |v| to_values(v)))
                .collect()
        } else {
            vec![to_values(&all); cols.len().max(1)]
        };
        rows.push(("dense".into(), values));
    }
    for row in &row_keys {
        let values = cols
            .iter()
            .map(|c| {
                cells
                    .get(&(row.clone(), c.clone()))
                    .map_or_else(Vec::new, |v| to_values(v))
            })
            .collect();
        rows.push((row.label.clone(), values));
    }
    // Bold: the best pruned value of each column (the dense row is the reference, not a
    // contender).
    let first_pruned = usize::from(!dense.is_empty());
    for c in 0..cols.len() {
        let best = rows[first_pruned..]
            .iter()
            .flat_map(|(_, v)| v[c].iter().map(|x| x.value))
            .filter(|v| v.is_finite())
            .reduce(|a, b| {
                if (b > a) == spec.higher_is_better {
                    b
                } else {
                    a
                }
            });
        if let Some(best) = best {
            for (_, values) in &mut rows[first_pruned..] {
                for v in &mut values[c] {
                    v.best = v.value == best;
                }
            }
        }
    }
    Ok(Table {
        metric: spec.metric.clone(),
        cols: cols.into_iter().map(|c| c.label).collect(),
        rows,
        footnotes: if noted { settings } else { Vec::new() },
    })
}

/// An axis value: its label and the key it sorts by (numbers numerically, N:M after the
/// unstructured ratios).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct AxisKey {
    order: Vec<(u8, i64, String)>,
    label: String,
}

fn axis(r: &RunRecord, keys: &[String]) -> Result<AxisKey, String> {
    let mut order = Vec::new();
    let mut labels = Vec::new();
    for key in keys {
        let (sort, label) = axis_value(r, key)?;
        order.push(sort);
        labels.push(label);
    }
    Ok(AxisKey {
        order,
        label: labels.join(" "),
    })
}

/// The options of a record's prune stage, `None` where it has none.
pub(crate) fn prune_options(r: &RunRecord) -> Option<&serde_json::Value> {
    prune_stages(r).next()
}

/// Every prune stage of `r`'s pipeline, in order (experts removed, then weights, say).
fn prune_stages(r: &RunRecord) -> impl Iterator<Item = &serde_json::Value> {
    r.config["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["kind"] == "prune")
}

/// The prune stage of `r` that removes experts (`experts:` set), if one does.
fn expert_stage(r: &RunRecord) -> Option<&serde_json::Value> {
    prune_stages(r).find(|s| !s["experts"].is_null())
}

/// The prune stage of `r` that prunes weights, if one does.
fn weight_stage(r: &RunRecord) -> Option<&serde_json::Value> {
    prune_stages(r).find(|s| s["experts"].is_null())
}

/// Whether `r` pruned nothing (no prune stage, or unstructured at 0 %): the table's dense row.
pub(crate) fn is_dense(r: &RunRecord) -> bool {
    match prune_options(r) {
        None => true,
        Some(p) => p["pattern"] == "unstructured" && p["sparsity"].as_f64() == Some(0.0),
    }
}

fn axis_value(r: &RunRecord, key: &str) -> Result<((u8, i64, String), String), String> {
    let prune = weight_stage(r);
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Ok(match key {
        "method" => {
            let labels: Vec<String> = prune_stages(r).map(method_label).collect();
            let m = match labels.is_empty() {
                true => "dense".to_string(),
                false => labels.join("+"),
            };
            ((0, 0, m.clone()), m)
        }
        "experts" => match expert_stage(r).and_then(|p| p["experts"].as_f64()) {
            Some(f) if f < 1.0 => (
                (0, (f * 1000.0).round() as i64, String::new()),
                format!("{:.0}%", f * 100.0),
            ),
            Some(n) => ((1, n as i64, String::new()), format!("{n}")),
            None => ((0, 0, String::new()), "none".into()),
        },
        "pattern" => {
            let p = prune.map_or("dense".into(), |p| text(&p["pattern"]));
            ((0, 0, p.clone()), p)
        }
        "sparsity" => {
            let pattern = prune.map_or(String::new(), |p| text(&p["pattern"]));
            if pattern.contains(':') {
                let (n, m) = pattern.split_once(':').unwrap_or(("0", "1"));
                let (n, m): (i64, i64) = (n.parse().unwrap_or(0), m.parse().unwrap_or(1));
                ((1, n * 1000 / m.max(1), format!("{m:08}")), pattern)
            } else {
                let s = prune.and_then(|p| p["sparsity"].as_f64()).unwrap_or(0.0);
                (
                    (0, (s * 1000.0).round() as i64, String::new()),
                    format!("{:.0}%", s * 100.0),
                )
            }
        }
        "model" => {
            let m = &r.config["model"];
            let name = ["gguf", "path", "hub"]
                .iter()
                .find_map(|k| m[k].as_str())
                .map(|s| {
                    Path::new(s)
                        .file_stem()
                        .map_or(s.to_string(), |n| n.to_string_lossy().into_owned())
                })
                .unwrap_or_else(|| "?".into());
            ((0, 0, name.clone()), name)
        }
        "nsamples" | "seqlen" | "eval_seqlen" => {
            let v = match key {
                "nsamples" => r.effective.nsamples,
                "seqlen" => r.effective.seqlen,
                _ => r.effective.eval_seqlen,
            }
            .unwrap_or(0);
            ((0, v as i64, String::new()), v.to_string())
        }
        other => match r.cell.values.get(other) {
            Some(v) => {
                let label = text(v);
                let n = v.as_f64().map_or(0, |f| (f * 1000.0).round() as i64);
                ((0, n, label.clone()), label)
            }
            None => {
                return Err(format!(
                    "axis `{other}` is not `method`, `pattern`, `sparsity`, `experts`, `model`, \
                     `nsamples`, `seqlen`, `eval_seqlen` or a swept key of the records"
                ))
            }
        },
    })
}

/// A prune stage's method as tables name it: `wanda`, and with a per-layer profile, DSnoT or a
/// weight update `wanda+owl`, `wanda+profile`, `wanda+dsnot`, `wanda+owl+dsnot`,
/// `wanda+seq-update`, `wanda+iter-update`.
fn method_label(prune: &serde_json::Value) -> String {
    let mut label = match &prune["method"] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match &prune["profile"] {
        serde_json::Value::Null => {}
        serde_json::Value::String(s) if s == "uniform" => {}
        serde_json::Value::String(s) => label = format!("{label}+{s}"),
        serde_json::Value::Object(o) if o.contains_key("owl") => label.push_str("+owl"),
        _ => label.push_str("+profile"),
    }
    if !prune["dsnot"].is_null() {
        label.push_str("+dsnot");
    }
    match &prune["weight_update"] {
        serde_json::Value::String(s) if s == "sequential" => label.push_str("+seq-update"),
        serde_json::Value::String(s) if s == "iterative" => label.push_str("+iter-update"),
        _ => {}
    }
    label
}

/// The label of axis `key` of a record (as the table prints it).
pub(crate) fn axis_label(r: &RunRecord, key: &str) -> Result<String, String> {
    axis_value(r, key).map(|(_, label)| label)
}

/// The metric `name` of a record, if it has it.
pub(crate) fn metric(r: &RunRecord, name: &str) -> Option<f64> {
    match name {
        "ppl" | "perplexity" => r.metrics.perplexity,
        "sparsity" => r.sparsity.total,
        "prune_s" => r.timings.stages.get("prune").copied(),
        "total_s" => Some(r.timings.total_s),
        "peak_rss_gib" => r
            .memory
            .peak_rss_bytes
            .map(|b| b as f64 / (1u64 << 30) as f64),
        other => r.metrics.other.get(other).and_then(|v| v.as_f64()),
    }
}

/// The settings that make two values comparable, in words.
fn settings_of(r: &RunRecord) -> String {
    let short = |h: &Option<String>| {
        h.as_deref()
            .map_or("—".to_string(), |h| h.chars().take(8).collect())
    };
    let e = &r.effective;
    let windows = r
        .metrics
        .other
        .get("eval_windows")
        .map_or("all".to_string(), |w| w.to_string());
    format!(
        "calibration {} × {} (text {}), eval {} windows × {} (text {}), model {}, seed {}",
        e.nsamples.map_or("—".into(), |n| n.to_string()),
        e.seqlen.map_or("—".into(), |n| n.to_string()),
        short(&r.hashes.calibration),
        windows,
        e.eval_seqlen.map_or("—".into(), |n| n.to_string()),
        short(&r.hashes.evaluation),
        short(&r.hashes.model),
        e.seed
    )
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// GitHub Markdown, best values in bold.
    Markdown,
    /// Comma-separated values (no bold; settings marks as ` [n]`, footnotes as `#` lines).
    Csv,
    /// A LaTeX tabular, best values in `\textbf`.
    Latex,
    /// The table as JSON.
    Json,
}

/// Renders `table` in `format`.
pub fn render(table: &Table, format: Format, decimals: usize) -> String {
    let marks = ["", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"];
    let cell = |values: &[Value], bold: (&str, &str), plain: bool| -> String {
        if values.is_empty() {
            return if plain { String::new() } else { "—".into() };
        }
        values
            .iter()
            .map(|v| {
                let n = format!("{:.decimals$}", v.value);
                let mark = if v.note == 0 {
                    String::new()
                } else if plain {
                    format!(" [{}]", v.note)
                } else if v.note < marks.len() {
                    marks[v.note].to_string()
                } else {
                    format!("[{}]", v.note)
                };
                if v.best && !plain {
                    format!("{}{n}{}{mark}", bold.0, bold.1)
                } else {
                    format!("{n}{mark}")
                }
            })
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let mut out = String::new();
    match format {
        Format::Json => {
            out = serde_json::to_string_pretty(table).expect("a table always serialises");
            out.push('\n');
        }
        Format::Markdown => {
            out.push_str(&format!(
                "| {} | {} |\n",
                table.metric,
                table.cols.join(" | ")
            ));
            out.push_str(&format!("|---|{}\n", "---:|".repeat(table.cols.len())));
            for (label, values) in &table.rows {
                let cells: Vec<String> = values
                    .iter()
                    .map(|v| cell(v, ("**", "**"), false))
                    .collect();
                out.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
            }
            footnotes(&mut out, table, &marks, "");
        }
        Format::Csv => {
            let quote = |s: &str| {
                if s.contains([',', '"']) {
                    format!("\"{}\"", s.replace('"', "\"\""))
                } else {
                    s.to_string()
                }
            };
            let header: Vec<String> = std::iter::once(table.metric.clone())
                .chain(table.cols.iter().cloned())
                .map(|s| quote(&s))
                .collect();
            out.push_str(&header.join(","));
            out.push('\n');
            for (label, values) in &table.rows {
                let cells: Vec<String> = values.iter().map(|v| cell(v, ("", ""), true)).collect();
                out.push_str(&format!("{},{}\n", quote(label), cells.join(",")));
            }
            for (i, f) in table.footnotes.iter().enumerate() {
                out.push_str(&format!("# [{}] {f}\n", i + 1));
            }
        }
        Format::Latex => {
            let esc = |s: &str| s.replace('%', "\\%").replace('_', "\\_");
            out.push_str(&format!(
                "\\begin{{tabular}}{{l{}}}\n\\toprule\n",
                "r".repeat(table.cols.len())
            ));
            out.push_str(&format!(
                "{} & {} \\\\\n\\midrule\n",
                esc(&table.metric),
                table
                    .cols
                    .iter()
                    .map(|c| esc(c))
                    .collect::<Vec<_>>()
                    .join(" & ")
            ));
            for (label, values) in &table.rows {
                let cells: Vec<String> = values
                    .iter()
                    .map(|v| cell(v, ("\\textbf{", "}"), false))
                    .collect();
                out.push_str(&format!("{} & {} \\\\\n", esc(label), cells.join(" & ")));
            }
            out.push_str("\\bottomrule\n\\end{tabular}\n");
            footnotes(&mut out, table, &marks, "% ");
        }
    }
    out
}

fn footnotes(out: &mut String, table: &Table, marks: &[&str], prefix: &str) {
    if table.footnotes.is_empty() {
        return;
    }
    out.push('\n');
    for (i, f) in table.footnotes.iter().enumerate() {
        let mark = marks
            .get(i + 1)
            .map_or(format!("[{}]", i + 1), |m| m.to_string());
        out.push_str(&format!("{prefix}{mark} {f}\n"));
        if prefix.is_empty() {
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_labels_name_the_profile_dsnot_and_weight_update() {
        let label = |v: serde_json::Value| method_label(&v);
        assert_eq!(label(serde_json::json!({"method": "wanda"})), "wanda");
        assert_eq!(
            label(serde_json::json!({"method": "wanda", "profile": "uniform"})),
            "wanda"
        );
        assert_eq!(
            label(
                serde_json::json!({"method": "wanda", "profile": {"owl": {"m": 5}}, "dsnot": {}})
            ),
            "wanda+owl+dsnot"
        );
        assert_eq!(
            label(serde_json::json!({"method": "magnitude", "profile": [0.4, 0.6]})),
            "magnitude+profile"
        );
        assert_eq!(
            label(serde_json::json!({"method": "wanda", "weight_update": "sequential"})),
            "wanda+seq-update"
        );
        assert_eq!(
            label(serde_json::json!({"method": "magnitude", "weight_update": "iterative"})),
            "magnitude+iter-update"
        );
    }
}
