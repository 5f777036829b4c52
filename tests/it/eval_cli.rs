//! `wanda eval` end to end on a tiny model: the JSON it prints matches the library's numbers.

use std::process::Command;

use wanda::eval::perplexity::perplexity;
use wanda::model::{self, ModelRef};

use crate::common::{save_tiny_hf_folder, tiny_text, B};

#[test]
fn eval_json_reports_the_protocol_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("tiny");
    save_tiny_hf_folder(&folder, 9);
    let text_path = dir.path().join("text.txt");
    std::fs::write(&text_path, tiny_text(100)).unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args([
            "eval",
            "--device",
            "cpu",
            "--json",
            "--seqlen",
            "16",
            "--windows",
            "4",
            "--model",
        ])
        .arg(&folder)
        .arg("--text")
        .arg(&text_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["windows"], 4);
    assert_eq!(json["seqlen"], 16);
    assert_eq!(json["tokens"], 64);
    assert_eq!(json["predicted_tokens"], 60);
    assert_eq!(json["text_tokens"], 100);
    assert_eq!(json["available_windows"], 6);

    // The same number from the library, computed independently of the CLI.
    let loaded = model::load::<B>(&ModelRef::Folder(folder), &Default::default()).unwrap();
    let ids = loaded.tokenizer.encode(&tiny_text(100)).unwrap();
    let report = perplexity(&loaded.model, &ids, 16, Some(4), 128, |_, _| {}).unwrap();
    let ppl = json["perplexity"].as_f64().unwrap();
    assert!(
        (ppl - report.perplexity).abs() < 1e-9 * report.perplexity,
        "{ppl} vs {}",
        report.perplexity
    );
    // A random model over 21 reachable ids is far from a perfect predictor.
    assert!(ppl > 2.0, "{ppl}");
}

#[test]
fn eval_of_a_missing_model_fails_with_exit_2_and_names_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args([
            "eval",
            "--device",
            "cpu",
            "--model",
            "nowhere/model.gguf",
            "--text",
            "x.txt",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("`nowhere/model.gguf`"), "{err}");
}
