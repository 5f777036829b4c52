//! One cell's details on the report page: its recipe (swept values, settings, the resolved
//! config), provenance (versions, commit, hashes, data files), per-stage time and memory (the
//! peak RSS of each stage against the run's estimate) and per-layer sparsity (against a
//! profile's targets, e.g. OWL's non-uniform ratios).

use std::fmt::Write;
use std::path::Path;

use super::charts::{self, Bars};
use crate::pipeline::record::{relative_path, RunRecord};
use crate::report::escape::escape;

/// The `<section>` of record `r`, whose `id` is `anchor`; `path` is the record as the page shows
/// it, `folder` the folder it was read from.
pub(super) fn details(r: &RunRecord, path: &str, folder: &Path, anchor: &str) -> String {
    let mut html = String::new();
    let _ = writeln!(
        html,
        "<section class=\"cell\" id=\"{}\">\n<h3>{} <small><code>{}</code></small></h3>\n\
         <p>Record <code>{}</code>.</p>",
        escape(anchor),
        escape(&r.cell.label),
        escape(&r.cell.id.0),
        escape(path)
    );
    recipe(&mut html, r);
    provenance(&mut html, r, folder);
    html.push_str("<h4>Memory</h4>\n");
    if r.memory.estimated_peak_bytes.is_none() {
        html.push_str(
            "<p class=\"note\">No memory estimate in this record (a pipeline with an \
             <code>estimate</code> stage records one).</p>\n",
        );
    }
    html.push_str(&memory_chart(r).unwrap_or_else(|| {
        "<p class=\"note\">This record has no per-stage memory.</p>\n".to_string()
    }));
    html.push_str("<h4>Per-layer sparsity</h4>\n");
    html.push_str(&layer_chart(r).unwrap_or_else(|| {
        "<p class=\"note\">This record has no per-layer sparsity (nothing was pruned).</p>\n"
            .to_string()
    }));
    html.push_str("</section>\n");
    html
}

/// Rows of `<th>key</th><td>value</td>`, values escaped.
fn key_values(html: &mut String, rows: &[(&str, String)]) {
    html.push_str("<table class=\"kv\">\n");
    for (k, v) in rows {
        let _ = writeln!(
            html,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(k),
            escape(v)
        );
    }
    html.push_str("</table>\n");
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The stage ids in the config's order, then any others the record names.
fn stage_order<'a>(r: &'a RunRecord, named: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut order: Vec<String> = r.config["stages"]
        .as_array()
        .map(|stages| {
            stages
                .iter()
                .filter_map(|s| s["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    for id in named {
        if !order.contains(id) {
            order.push(id.clone());
        }
    }
    order
}

/// The swept values, the settings in force, the metrics and the resolved config.
fn recipe(html: &mut String, r: &RunRecord) {
    html.push_str("<h4>Recipe</h4>\n");
    let e = &r.effective;
    let mut rows: Vec<(&str, String)> = r
        .cell
        .values
        .iter()
        .map(|(k, v)| (k.as_str(), json_text(v)))
        .collect();
    rows.push(("seed", e.seed.to_string()));
    rows.push(("device", e.device.clone()));
    if let (Some(n), Some(s)) = (e.nsamples, e.seqlen) {
        rows.push(("calibration", format!("{n} × {s} tokens")));
    }
    if let Some(s) = e.eval_seqlen {
        rows.push(("evaluation window", format!("{s} tokens")));
    }
    if e.streaming {
        rows.push(("streaming", "on".into()));
    }
    if let Some(g) = &e.gate {
        rows.push(("gate", g.clone()));
    }
    if let Some(p) = r.metrics.perplexity {
        rows.push(("perplexity", format!("{p:.4}")));
    }
    if let Some(z) = &r.metrics.zeroshot {
        rows.push(("zero-shot mean acc", format!("{:.2}%", 100.0 * z.mean)));
    }
    for (k, v) in &r.metrics.other {
        rows.push((k.as_str(), json_text(v)));
    }
    if let Some(t) = r.sparsity.total {
        rows.push(("measured sparsity", charts::percent(t)));
    }
    let stages = stage_order(r, r.timings.stages.keys());
    let times: Vec<String> = stages
        .iter()
        .filter_map(|s| Some(format!("{s} {:.2}", r.timings.stages.get(s)?)))
        .collect();
    rows.push((
        "wall time (s)",
        format!("{:.2} total; {}", r.timings.total_s, times.join(", ")),
    ));
    key_values(html, &rows);
    let config = serde_json::to_string_pretty(&r.config).unwrap_or_else(|_| r.config.to_string());
    let _ = writeln!(
        html,
        "<details><summary>Resolved config</summary><pre>{}</pre></details>",
        escape(&config)
    );
}

/// Versions, commit, hashes, and the files the cell read (`folder`: the record's folder).
fn provenance(html: &mut String, r: &RunRecord, folder: &Path) {
    html.push_str("<h4>Provenance</h4>\n");
    let v = &r.versions;
    let dash = |o: &Option<String>| o.clone().unwrap_or_else(|| "—".into());
    let mut rows: Vec<(&str, String)> = vec![
        ("wanda", v.wanda.clone()),
        ("burn", dash(&v.burn)),
        ("git commit", dash(&v.git_commit)),
        ("record layout", v.record.to_string()),
        ("pipeline", r.cell.pipeline.clone()),
    ];
    if let Some(f) = &r.cell.pipeline_file {
        // As run.json stores it (relative to the record's folder), so the page names no path
        // of the machine that rendered it.
        let shown = std::path::absolute(folder)
            .ok()
            .and_then(|base| relative_path(f, &base))
            .unwrap_or(f.clone());
        rows.push(("pipeline file", shown.display().to_string()));
    }
    let model = &r.config["model"];
    if let Some((k, m)) = ["gguf", "path", "hub"]
        .iter()
        .find_map(|k| model[k].as_str().map(|m| (k, m)))
    {
        rows.push(("model file", format!("{m} ({k})")));
    }
    for part in ["calibration", "evaluation"] {
        let c = &r.config[part];
        if let Some(t) = c["text"].as_str().or_else(|| c["dataset"].as_str()) {
            rows.push((
                if part == "calibration" {
                    "calibration data"
                } else {
                    "evaluation data"
                },
                t.to_string(),
            ));
        }
    }
    let h = &r.hashes;
    rows.push(("sha256 pipeline", dash(&h.pipeline)));
    rows.push(("sha256 model", dash(&h.model)));
    rows.push(("sha256 calibration", dash(&h.calibration)));
    rows.push(("sha256 evaluation", dash(&h.evaluation)));
    key_values(html, &rows);
    if !r.data.is_empty() {
        let data = serde_json::to_string_pretty(&r.data).unwrap_or_default();
        let _ = writeln!(
            html,
            "<details><summary>Hub data files</summary><pre>{}</pre></details>",
            escape(&data)
        );
    }
}

/// Per-stage peak RSS as bars in the config's stage order, the estimate as a dashed line.
fn memory_chart(r: &RunRecord) -> Option<String> {
    let m = &r.memory;
    let bars: Vec<(String, f64)> = stage_order(r, m.stages.keys())
        .into_iter()
        .filter_map(|s| {
            let peak = m.stages.get(&s)?.peak_rss_bytes?;
            Some((s, peak as f64))
        })
        .collect();
    if bars.is_empty() {
        return None;
    }
    let reference = m
        .estimated_peak_bytes
        .map(|e| (e as f64, format!("estimate {}", charts::bytes(e as f64))));
    Some(
        Bars {
            title: format!("{}: peak RSS per stage", r.cell.label),
            bars,
            reference,
            overlay: None,
            y_max: None,
            format: charts::bytes,
        }
        .render(),
    )
}

/// Measured sparsity per decoder layer (in layer order), the profile's targets as a line
/// and the total as a dashed line.
fn layer_chart(r: &RunRecord) -> Option<String> {
    let s = &r.sparsity;
    let mut layers: Vec<(usize, f64)> = s
        .layers
        .iter()
        .map(|(name, &v)| {
            let index = name.rsplit('.').next().and_then(|i| i.parse().ok());
            (index.unwrap_or(usize::MAX), v)
        })
        .collect();
    if layers.is_empty() {
        return None;
    }
    layers.sort_by_key(|l| l.0);
    let overlay = (s.layer_targets.len() == layers.len())
        .then(|| (s.layer_targets.clone(), "profile target".to_string()));
    Some(
        Bars {
            title: format!("{}: sparsity per layer", r.cell.label),
            bars: layers
                .into_iter()
                .map(|(i, v)| (i.to_string(), v))
                .collect(),
            reference: s
                .total
                .map(|t| (t, format!("total {}", charts::percent(t)))),
            overlay,
            y_max: Some(1.0),
            format: charts::percent,
        }
        .render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owl_record() -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "cell": { "id": "abc123", "label": "wanda-<0.7>", "pipeline": "p&q",
                      "values": { "prune.method": "wanda" },
                      "pipeline_file": "/r/pipelines/p.yaml" },
            "config": { "model": { "gguf": "../m.gguf" },
                        "calibration": { "text": "calib.txt" },
                        "stages": [ { "id": "load", "kind": "load" },
                                    { "id": "prune", "kind": "prune", "method": "wanda",
                                      "pattern": "unstructured", "sparsity": 0.7 } ] },
            "effective": { "seed": 3, "device": "cpu", "nsamples": 8, "seqlen": 256 },
            "metrics": { "perplexity": 80.5 },
            "sparsity": { "total": 0.7,
                          "layers": { "model.layers.0": 0.6, "model.layers.1": 0.8,
                                      "model.layers.10": 0.7 },
                          "layer_targets": [0.6, 0.8, 0.7] },
            "timings": { "total_s": 3.0, "stages": { "load": 1.0, "prune": 2.0 } },
            "memory": { "estimated_peak_bytes": 900000000u64,
                        "stages": { "prune": { "peak_rss_bytes": 1000000000u64 },
                                    "load": { "peak_rss_bytes": 500000000u64 } } },
            "versions": { "record": 1, "wanda": "0.1.0", "git_commit": "deadbeef" },
            "hashes": { "model": "cafe" }
        }))
        .unwrap()
    }

    #[test]
    fn details_hold_the_recipe_provenance_and_both_charts() {
        let html = details(
            &owl_record(),
            "abc123/run.json",
            Path::new("/r/p/abc123"),
            "cell-abc123",
        );
        assert!(html.starts_with("<section class=\"cell\" id=\"cell-abc123\">"));
        assert!(html.contains("wanda-&lt;0.7&gt;"));
        assert!(!html.contains("wanda-<0.7>"));
        assert!(html.contains("<td>p&amp;q</td>"));
        assert!(html.contains("<td>deadbeef</td>"));
        assert!(html.contains("<td>../../pipelines/p.yaml</td>"), "{html}");
        assert!(html.contains("<td>../m.gguf (gguf)</td>"));
        assert!(html.contains("<td>calib.txt</td>"));
        assert!(html.contains("<td>8 × 256 tokens</td>"));
        assert!(html.contains("3.00 total; load 1.00, prune 2.00"));
        assert_eq!(html.matches("<svg").count(), 2);
        assert!(html.contains("estimate 858 MiB"), "{html}");
        assert!(html.contains("profile target"));
        assert!(html.contains("total 70.0%"));
    }

    #[test]
    fn bars_follow_the_config_stage_order_and_the_layer_index() {
        let svg = memory_chart(&owl_record()).unwrap();
        let load = svg.find("<title>load:").unwrap();
        let prune = svg.find("<title>prune:").unwrap();
        assert!(load < prune, "load before prune, as the config orders them");
        let svg = layer_chart(&owl_record()).unwrap();
        let titles: Vec<&str> = svg
            .match_indices("<title>")
            .skip(1)
            .map(|(i, _)| &svg[i + 7..i + 9])
            .collect();
        assert_eq!(
            titles,
            ["0:", "1:", "10"],
            "layer 10 sorts after 1 numerically"
        );
    }

    #[test]
    fn a_dense_record_without_memory_says_so_instead_of_drawing() {
        let mut r = owl_record();
        r.sparsity = Default::default();
        r.memory = Default::default();
        let html = details(&r, "x/run.json", Path::new("/r/p/x"), "cell-x");
        assert!(!html.contains("<svg"));
        assert!(html.contains("no per-stage memory"));
        assert!(html.contains("no per-layer sparsity"));
    }
}
