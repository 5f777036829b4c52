//! Layer streaming end to end on SmolLM2-135M: with a budget below the model's f32 weights the
//! gate switches streaming on, every layer is pruned, and the cell gives the perplexity of the
//! same cell run with the model in memory, to the bit, at a peak resident set below the weights.

use std::path::{Path, PathBuf};
use std::process::Command;

use wanda::pipeline::RunRecord;

use crate::common::shared;

/// SmolLM2-135M's parameters × 4 B: its weights in f32.
const WEIGHT_BYTES: u64 = 134_515_008 * 4;

/// A one-cell Wanda pipeline on SmolLM2 in `dir` with the gate's `budget`, streaming its only
/// reduction.
fn pipeline(dir: &Path, budget: &str) -> Option<PathBuf> {
    let model = shared("models/SmolLM2-135M-Instruct.Q4_1.gguf")?;
    let calibration = shared("data/wikitext-2/wikitext2-v1-valid.txt")?;
    let evaluation = shared("data/wikitext-2/wikitext2-raw-test.txt")?;
    let path = dir.join(format!("streamed-{budget}.yaml"));
    std::fs::write(
        &path,
        format!(
            r#"name: streamed
seed: 0
device: cpu
model: {{ gguf: {} }}
calibration: {{ text: {}, nsamples: 4, seqlen: 128 }}
evaluation: {{ text: {}, seqlen: 128, windows: 2 }}
stages:
  load: {{}}
  estimate: {{}}
  gate: {{ budget: {budget}, reduce: [streaming] }}
  calibrate: {{}}
  prune: {{ method: wanda, sparsity: 0.5 }}
  eval: {{}}
"#,
            model.display(),
            calibration.display(),
            evaluation.display()
        ),
    )
    .unwrap();
    Some(path)
}

/// Runs `pipeline` into `results` and returns its one record.
fn run(pipeline: &Path, results: &Path) -> RunRecord {
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .arg("run")
        .arg(pipeline)
        .arg("--results")
        .arg(results)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let cells = results.join("streamed");
    let cell = std::fs::read_dir(&cells)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("run.json").exists())
        .expect("one finished cell");
    let leftovers: Vec<_> = std::fs::read_dir(&cells)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".wanda-layers-"))
        .collect();
    assert!(leftovers.is_empty(), "layer stores left: {leftovers:?}");
    RunRecord::read(&cell.join("run.json")).unwrap()
}

#[test]
fn a_budget_below_the_weights_streams_every_layer_to_the_same_perplexity() {
    let dir = tempfile::tempdir().unwrap();
    let (Some(in_memory), Some(streamed)) =
        (pipeline(dir.path(), "4GiB"), pipeline(dir.path(), "450MiB"))
    else {
        return;
    };
    const { assert!(450 << 20 < WEIGHT_BYTES) };
    let a = run(&in_memory, &dir.path().join("a"));
    let b = run(&streamed, &dir.path().join("b"));
    assert!(!a.effective.streaming);
    assert!(b.effective.streaming);
    assert_eq!(
        b.effective.gate.as_deref(),
        Some("streaming off → on (only one layer on the device)")
    );
    // Every layer pruned, and the same numbers to the bit.
    assert_eq!(b.sparsity.layers.len(), 30);
    assert!(
        b.sparsity.layers.values().all(|f| *f == 0.5),
        "{:?}",
        b.sparsity.layers
    );
    assert_eq!(a.sparsity, b.sparsity);
    let (pa, pb) = (a.metrics.perplexity.unwrap(), b.metrics.perplexity.unwrap());
    assert_eq!(pa.to_bits(), pb.to_bits(), "{pa} vs {pb}");
    // The model in memory takes its weights and more; streamed, the whole run takes less.
    let peak = |r: &RunRecord| r.memory.peak_rss_bytes.expect("Linux reports the peak");
    assert!(peak(&a) > WEIGHT_BYTES, "{}", peak(&a));
    assert!(peak(&b) < WEIGHT_BYTES, "{}", peak(&b));
}
