//! `wanda table` on fixture run records: the paper layout (dense row, bold best per column,
//! N:M after the ratios), every format, the mixed-settings footnotes, and unreadable records
//! named and skipped.

use crate::common::{output_ok, output_refused};
use std::path::Path;
use std::process::Command;

/// A run record of one cell as `wanda run` writes it.
fn record(method: &str, pattern: &str, sparsity: f64, ppl: f64, nsamples: usize) -> String {
    let prune = if pattern == "unstructured" {
        serde_json::json!({ "id": "prune", "kind": "prune", "needs": ["calibrate"], "method": method,
                            "pattern": pattern, "sparsity": sparsity, "use_variant": false })
    } else {
        serde_json::json!({ "id": "prune", "kind": "prune", "needs": ["calibrate"], "method": method,
                            "pattern": pattern, "use_variant": false })
    };
    serde_json::json!({
        "cell": { "id": format!("{method}-{pattern}-{sparsity}"), "label": format!("{method}-{sparsity}-{pattern}"),
                  "pipeline": "fixture", "values": {} },
        "config": { "model": { "gguf": "../models/SmolLM2-135M-Instruct.Q4_1.gguf" }, "seed": 0,
                    "stages": [ { "id": "load", "kind": "load", "needs": [] }, prune ] },
        "effective": { "seed": 0, "device": "cpu", "nsamples": nsamples, "seqlen": 256, "eval_seqlen": 512 },
        "metrics": { "perplexity": ppl, "eval_windows": 8 },
        "sparsity": { "total": sparsity },
        "timings": { "total_s": 1.0, "stages": { "prune": 2.0 } },
        "memory": {},
        "versions": { "record": 1, "wanda": "0.1.0" },
        "hashes": { "calibration": "aaaaaaaaaaaa", "evaluation": "bbbbbbbbbbbb", "model": "cccccccccccc" }
    })
    .to_string()
}

fn write_fixture(dir: &Path, mixed: bool) {
    let cells = [
        ("magnitude", "unstructured", 0.0, 30.21, 8),
        ("magnitude", "unstructured", 0.5, 515.9, 8),
        ("wanda", "unstructured", 0.5, 63.32, 8),
        (
            "sparsegpt",
            "unstructured",
            0.5,
            52.44,
            if mixed { 32 } else { 8 },
        ),
        ("magnitude", "unstructured", 0.25, 41.5, 8),
        ("wanda", "unstructured", 0.25, 33.1, 8),
        ("sparsegpt", "unstructured", 0.25, 33.9, 8),
        ("magnitude", "2:4", 0.5, 1474.55, 8),
        ("wanda", "2:4", 0.5, 175.89, 8),
        ("sparsegpt", "2:4", 0.5, 120.4, 8),
    ];
    for (i, (m, p, s, ppl, n)) in cells.into_iter().enumerate() {
        let cell = dir.join(format!("cell{i:02}"));
        std::fs::create_dir_all(&cell).unwrap();
        std::fs::write(cell.join("run.json"), record(m, p, s, ppl, n)).unwrap();
    }
    let corrupt = dir.join("corrupt");
    std::fs::create_dir_all(&corrupt).unwrap();
    std::fs::write(corrupt.join("run.json"), "{ \"cell\": ").unwrap();
    let foreign = dir.join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("run.json"), "{ \"accuracy\": 0.9 }").unwrap();
}

fn table(dir: &Path, args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .arg("table")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

#[test]
fn paper_table_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path(), false);
    let (md, stderr) = table(dir.path(), &[]);
    insta::assert_snapshot!("table_markdown", md);
    // Unreadable records are named with their path and skipped.
    assert!(
        stderr.contains("corrupt/run.json") && stderr.contains("foreign/run.json"),
        "{stderr}"
    );
    insta::assert_snapshot!("table_csv", table(dir.path(), &["--format", "csv"]).0);
    insta::assert_snapshot!("table_latex", table(dir.path(), &["--format", "latex"]).0);
    let json: serde_json::Value =
        serde_json::from_str(&table(dir.path(), &["--format", "json"]).0).unwrap();
    assert_eq!(json["cols"], serde_json::json!(["25%", "50%", "2:4"]));
    // Deterministic: the same folder gives the same bytes.
    assert_eq!(table(dir.path(), &[]).0, md);
}

/// A folder without a readable record is an error for `table` and `plot`, not an empty table.
#[test]
fn a_folder_without_records_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let corrupt = dir.path().join("corrupt");
    std::fs::create_dir_all(&corrupt).unwrap();
    std::fs::write(corrupt.join("run.json"), "{ \"cell\": ").unwrap();
    for args in [
        &["table"][..],
        &["plot", "--x", "sparsity", "--y", "ppl", "-o", "x.svg"],
    ] {
        let stderr = output_refused(
            Command::new(env!("CARGO_BIN_EXE_wanda"))
                .arg(args[0])
                .arg(dir.path())
                .args(&args[1..])
                .current_dir(dir.path()),
        );
        assert!(stderr.contains("no readable run.json below"), "{stderr}");
        assert!(stderr.contains("(1 skipped)"), "{stderr}");
        assert!(!dir.path().join("x.svg").exists());
    }
}

/// A metric no record holds is an error naming it and the metrics there are, not an empty
/// table.
#[test]
fn a_metric_no_record_holds_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path(), false);
    for metric in ["zeroshot", "bogus"] {
        let stderr = output_refused(
            Command::new(env!("CARGO_BIN_EXE_wanda"))
                .arg("table")
                .arg(dir.path())
                .args(["--metric", metric]),
        );
        assert!(
            stderr.contains(&format!("`--metric {metric}`: none of the"))
                && stderr.contains("use ppl, sparsity"),
            "{stderr}"
        );
    }
}

#[test]
fn mixed_settings_are_footnoted_not_merged() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path(), true);
    let (md, _) = table(dir.path(), &["--decimals", "1"]);
    insta::assert_snapshot!("table_mixed_settings", md);
    assert!(md.contains("calibration 32 × 256"), "{md}");
    let (csv, _) = table(dir.path(), &["--format", "csv"]);
    assert!(
        csv.contains("52.44 [2]") && csv.contains("# [2] calibration 32 × 256"),
        "{csv}"
    );
}

#[test]
fn plot_draws_one_curve_per_method_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    write_fixture(dir.path(), false);
    let svg_path = dir.path().join("ppl.svg");
    let plot = || {
        output_ok(
            Command::new(env!("CARGO_BIN_EXE_wanda"))
                .arg("plot")
                .arg(dir.path())
                .args(["--log-y", "--title", "fixture", "-o"])
                .arg(&svg_path),
        );
        std::fs::read_to_string(&svg_path).unwrap()
    };
    let svg = plot();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // Three methods, one polyline each; magnitude has three unstructured points (0, 25, 50 %),
    // the others two (the 2:4 cells are not on a ratio axis).
    assert_eq!(svg.matches("<polyline").count(), 3);
    assert_eq!(svg.matches("<circle").count(), 7);
    for name in [
        "magnitude",
        "sparsegpt",
        "wanda",
        "(log scale)",
        ">25%<",
        ">1000<",
    ] {
        assert!(svg.contains(name), "{name} missing");
    }
    assert_eq!(plot(), svg);
}
