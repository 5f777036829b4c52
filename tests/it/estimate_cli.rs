//! `wanda estimate` on the configs of real models (tests/fixtures/models: config.json only, as
//! the hub serves them): parameter counts as published, and the calculator's numbers by hand.

use crate::common::{assert_zero_refused, output_ok};
use std::path::{Path, PathBuf};
use std::process::Command;

use wanda::model::{inspect, ModelRef};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/models")
        .join(name)
}

fn estimate_json(args: &[&str]) -> serde_json::Value {
    let out = output_ok(
        Command::new(env!("CARGO_BIN_EXE_wanda"))
            .arg("estimate")
            .arg("--json")
            .args(args),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn item(out: &serde_json::Value, name: &str) -> u64 {
    out["breakdown"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .and_then(|i| i["bytes"].as_u64())
        .unwrap_or_else(|| panic!("no `{name}` in {out}"))
}

#[test]
fn configs_alone_give_the_published_parameter_counts() {
    let count = |name| {
        inspect(&ModelRef::Folder(fixture(name)))
            .unwrap()
            .0
            .parameters
    };
    assert_eq!(count("llama-3.2-1b"), 1_235_814_400);
    assert_eq!(count("llama-2-7b"), 6_738_415_616);
}

#[test]
fn llama2_7b_inference_weights_and_kv_cache() {
    let model = fixture("llama-2-7b");
    let out = estimate_json(&[
        "--model",
        model.to_str().unwrap(),
        "--mode",
        "inference",
        "--dtype",
        "fp16",
        "--seqlen",
        "4096",
        "--batch",
        "1",
    ]);
    // 6,738,415,616 × 2 B; 2 (K, V) × 32 layers × 4096 tokens × 32 heads × 128 × 2 B = 2 GiB.
    assert_eq!(item(&out, "weights"), 13_476_831_232);
    assert_eq!(item(&out, "kv cache"), 1 << 31);
    let fits: Vec<u64> = serde_json::from_value(out["fits_on_gib"].clone()).unwrap();
    assert_eq!(fits, [24, 40, 48, 80, 141]);
}

#[test]
fn llama2_7b_adamw_training_keeps_eight_bytes_of_state_per_parameter() {
    let model = fixture("llama-2-7b");
    let out = estimate_json(&[
        "--model",
        model.to_str().unwrap(),
        "--mode",
        "training",
        "--dtype",
        "bf16",
        "--optimizer",
        "adamw",
        "--seqlen",
        "2048",
        "--batch",
        "1",
    ]);
    assert_eq!(item(&out, "optimizer states"), 6_738_415_616 * 8);
    assert_eq!(item(&out, "gradients"), 6_738_415_616 * 2);
}

#[test]
fn an_unknown_optimizer_is_named_with_the_choices() {
    let model = fixture("llama-2-7b");
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args([
            "estimate",
            "--mode",
            "training",
            "--optimizer",
            "adamx",
            "--model",
        ])
        .arg(&model)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("adamx") && stderr.contains("adamw"),
        "{stderr}"
    );
}

/// A zero count (samples, positions, batch, evaluation window or group) is refused by name
/// instead of estimating a run that cannot happen.
#[test]
fn zero_counts_are_refused_by_name() {
    let model = fixture("llama-2-7b");
    let model = model.to_str().unwrap();
    for flag in [
        "--nsamples",
        "--seqlen",
        "--batch",
        "--eval-seqlen",
        "--eval-group",
    ] {
        assert_zero_refused(&["estimate", flag, "0", "--model", model], flag);
    }
}
