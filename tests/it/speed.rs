//! `eval: { speed }` end to end on a tiny model: a sweep records decoding with the pruned
//! linears compressed and dense in the same rounds, and `wanda table --metric speedup` renders
//! the paper's speedup table shape from the results folder.

use std::path::Path;
use std::process::Command;

use wanda::pipeline::RunRecord;

use crate::common::{output_ok, save_tiny_hf_folder, tiny_text};

/// Writes a tiny model, a text and a pipeline whose eval stage is `eval`, sweeping magnitude's
/// sparsity over 0.2 and 0.6; returns the pipeline's path.
fn speed_pipeline(dir: &Path, eval: &str) -> std::path::PathBuf {
    save_tiny_hf_folder(&dir.join("tiny"), 3);
    std::fs::write(dir.join("eval.txt"), tiny_text(100)).unwrap();
    let pipeline = dir.join("speed.yaml");
    let text = [
        "name: tiny-speed",
        "seed: 0",
        "device: cpu",
        "model: { path: tiny }",
        "evaluation: { text: eval.txt, seqlen: 16 }",
        "stages:",
        "  load: {}",
        "  prune: { method: magnitude, sparsity: 0.5 }",
        &format!("  eval: {eval}"),
        "sweep:",
        "  prune.sparsity: [0.2, 0.6]",
    ]
    .join("\n");
    std::fs::write(&pipeline, text).unwrap();
    pipeline
}

fn run(pipeline: &Path, results: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wanda"))
        .arg("run")
        .arg(pipeline)
        .arg("--results")
        .arg(results)
        .output()
        .unwrap()
}

#[test]
fn a_sweep_records_decoding_speed_and_renders_the_speedup_table() {
    let dir = tempfile::tempdir().unwrap();
    let eval = "{ perplexity: false, speed: { prompt: 8, decode: 4, repeats: 3 } }";
    let pipeline = speed_pipeline(dir.path(), eval);
    let results = dir.path().join("results");
    let out = run(&pipeline, &results);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut records: Vec<RunRecord> = std::fs::read_dir(results.join("tiny-speed"))
        .unwrap()
        .map(|e| RunRecord::read(&e.unwrap().path().join("run.json")).unwrap())
        .collect();
    records.sort_by(|a, b| a.cell.label.cmp(&b.cell.label));
    assert_eq!(records.len(), 2);
    let metric = |r: &RunRecord, key: &str| r.metrics.other[key].as_f64().unwrap();
    // 20 % zeros: below auto's 30 %, so dense alone, timed once a round.
    let light = &records[0];
    assert!(light.cell.label.contains("0.2"), "{}", light.cell.label);
    assert_eq!(metric(light, "compressed_linears"), 0.0);
    assert_eq!(metric(light, "decode_speedup"), 1.0);
    assert_eq!(
        metric(light, "weight_bytes"),
        metric(light, "dense_weight_bytes")
    );
    // 60 %: every decoder linear (2 layers × 7) compressed, fewer bytes a token, where the CPU
    // runs the compressed product's AVX-512 kernel (elsewhere auto holds none).
    let heavy = &records[1];
    let ratio = metric(heavy, "weight_bytes_ratio");
    match wanda::model::kernels::sparse::expands_in_registers() {
        true => assert!(
            metric(heavy, "compressed_linears") == 14.0 && ratio < 1.0,
            "{ratio}"
        ),
        false => assert!(
            metric(heavy, "compressed_linears") == 0.0 && ratio == 1.0,
            "{ratio}"
        ),
    }
    let expected = metric(heavy, "weight_bytes") / metric(heavy, "dense_weight_bytes");
    assert_eq!(ratio, expected);
    for key in [
        "decode_tokens_per_s",
        "dense_decode_tokens_per_s",
        "prefill_speedup",
    ] {
        assert!(metric(heavy, key) > 0.0, "{key}");
    }
    let table = output_ok(
        Command::new(env!("CARGO_BIN_EXE_wanda"))
            .args(["table", "--metric", "speedup", "--rows", "method,sparsity"])
            .arg(&results),
    );
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.contains("decode ×") && text.contains("prefill ×") && text.contains("weight bytes ÷"),
        "{text}"
    );
    // The 60 % row's last column is the bytes' factor, as recorded.
    let row = text.lines().find(|l| l.contains("magnitude 60%"));
    let row = row.unwrap_or_else(|| panic!("no 60 % row in\n{text}"));
    let shrink = format!("{:.2}", 1.0 / ratio);
    assert!(row.contains(&shrink), "{row} lacks {shrink}");
}

#[test]
fn a_speed_longer_than_the_context_or_of_zero_tokens_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let long = speed_pipeline(dir.path(), "{ speed: { prompt: 120, decode: 9 } }");
    let out = run(&long, &results);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "`speed.prompt` (120) plus `speed.decode` (9) exceeds the model's context of 128"
        ),
        "{err}"
    );
    let zero = speed_pipeline(dir.path(), "{ speed: { decode: 0 } }");
    let out = run(&zero, &results);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("decode"), "{err}");
}
