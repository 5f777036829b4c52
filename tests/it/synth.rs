//! `wanda synth` end to end: a real-shaped folder with random weights that the loaders,
//! `wanda eval` and `wanda prune` take like a downloaded one.

use std::path::Path;
use std::process::{Command, Output};

use wanda::model::{self, ModelRef};

use crate::common::{tiny_text, tiny_tokenizer_json, B};

fn wanda(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args(args)
        .output()
        .unwrap()
}

fn synth(tokenizer: &Path, out: &Path, seed: &str) -> serde_json::Value {
    let run = wanda(&[
        "synth",
        "--shape",
        "smollm2-135m",
        "--layers",
        "2",
        "--seed",
        seed,
        "--max-shard-size",
        "2MB",
        "--tokenizer",
        &tokenizer.display().to_string(),
        "--out",
        &out.display().to_string(),
        "--json",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).unwrap()
}

#[test]
fn a_synthetic_smollm2_shape_loads_evaluates_and_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = dir.path().join("tokenizer.json");
    std::fs::write(&tokenizer, tiny_tokenizer_json()).unwrap();
    let folder = dir.path().join("synth");
    let summary = synth(&tokenizer, &folder, "7");

    // SmolLM2-135M's layer (576 wide, 9 heads of 64, 3 KV heads, MLP 1536), two of them, a
    // tied head, and the tokenizer's 21 ids: 2 × 3,540,096 + 2 × 576 norms + 576 + 29 × 576.
    let layer = 576 * 576 * 2 + 576 * 192 * 2 + 3 * 576 * 1536 + 2 * 576;
    let parameters = 2 * layer + 576 + 21 * 576;
    assert_eq!(summary["parameters"], parameters);
    assert_eq!(summary["tensor_bytes"], 2 * parameters);
    let shards = summary["shards"].as_u64().unwrap();
    assert!(shards > 2, "2 MB shards of 14 MB: {shards}");
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(folder.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(index["metadata"]["total_size"], 2 * parameters);
    assert!(folder.join("wanda_synth.json").exists());

    let loaded = model::load::<B>(&ModelRef::Folder(folder.clone()), &Default::default()).unwrap();
    assert_eq!(loaded.config.vocab_size, 21);
    assert_eq!(loaded.config.hidden_size, 576);
    assert_eq!(loaded.model.layers.len(), 2);
    let (_, _, down) = loaded.model.layers[1]
        .linears()
        .into_iter()
        .find(|(name, _, _)| *name == "mlp.down_proj")
        .unwrap();
    assert_eq!(down.weight.dims(), [1536, 576]);
    let w: Vec<f32> = down.weight.val().into_data().to_vec().unwrap();
    let bound = 0.02 * 3f32.sqrt();
    assert!(w.iter().all(|v| v.abs() <= bound * 1.01));
    assert!(w.iter().all(|&v| half::bf16::from_f32(v).to_f32() == v));
    let spread = w.iter().filter(|v| v.abs() > bound / 2.0).count() as f64 / w.len() as f64;
    assert!((spread - 0.5).abs() < 0.01, "{spread}");

    // The same seed writes the same bytes; another seed other ones.
    let again = dir.path().join("again");
    synth(&tokenizer, &again, "7");
    let other = dir.path().join("other");
    synth(&tokenizer, &other, "8");
    let shard = format!("model-00002-of-{shards:05}.safetensors");
    let bytes = |f: &Path| std::fs::read(f.join(&shard)).unwrap();
    assert_eq!(bytes(&folder), bytes(&again));
    assert_ne!(bytes(&folder), bytes(&other));

    // It prunes and evaluates like any folder.
    let text = dir.path().join("text.txt");
    std::fs::write(&text, tiny_text(400)).unwrap();
    let text = text.display().to_string();
    let run = wanda(&[
        "prune",
        "--model",
        &folder.display().to_string(),
        "--method",
        "wanda",
        "--sparsity",
        "0.5",
        "--calib-text",
        &text,
        "--nsamples",
        "2",
        "--seqlen",
        "32",
        "--eval-text",
        &text,
        "--eval-seqlen",
        "32",
        "--windows",
        "2",
        "--device",
        "cpu",
        "--json",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let sparsity = json["sparsity"]["total"].as_f64().unwrap();
    assert!((sparsity - 0.5).abs() < 1e-3, "{sparsity}");
    // Random weights over 21 ids: about as good as a uniform guess.
    let ppl = json["perplexity"]["perplexity"].as_f64().unwrap();
    assert!(ppl > 15.0 && ppl < 30.0, "{ppl}");
}

#[test]
fn a_missing_tokenizer_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("synth");
    let run = wanda(&[
        "synth",
        "--shape",
        "llama2-7b",
        "--tokenizer",
        "no/tokenizer.json",
        "--out",
        &out.display().to_string(),
    ]);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("`no/tokenizer.json`"), "{err}");
    assert!(!out.exists());
}
