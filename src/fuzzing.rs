//! Entry points for the fuzz targets (`fuzz/`, cargo-fuzz) and the corpus replay test
//! (`tests/it/fuzz_corpus.rs`): each feeds arbitrary bytes to one parser the way the tool
//! reads that file, and must return — an error is fine, a panic, a hang or an allocation the
//! file's length does not justify is a finding.
//!
//! Parsers that read from a path get the bytes through a scratch folder of this process.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use burn::backend::NdArray;

use crate::model::arch::HfLlamaConfig;
use crate::model::checkpoint::gguf::{tokenizer_json as gguf_tokenizer_json, GgufFile};
use crate::model::checkpoint::Tokenizer;
use crate::model::checkpoint::{shard_files, SafetensorsSource, WeightSource};
use crate::model::{load, ModelRef};
use crate::pipeline::{validate_source, ValidateOptions};

/// The fuzz targets, by name; `fuzz/fuzz_targets/<name>.rs` calls [`run`] with its name.
pub const TARGETS: &[&str] = &[
    "gguf",
    "safetensors",
    "safetensors_index",
    "hf_config",
    "pipeline_yaml",
    "tokenizer_json",
    "run_record",
];

/// Runs target `name` on `data`.
///
/// # Panics
/// If `name` is not in [`TARGETS`] — or, as a finding, if the parser panics.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "gguf" => gguf(data),
        "safetensors" => safetensors(data),
        "safetensors_index" => safetensors_index(data),
        "hf_config" => hf_config(data),
        "pipeline_yaml" => pipeline_yaml(data),
        "tokenizer_json" => tokenizer_json(data),
        "run_record" => run_record(data),
        other => panic!("unknown fuzz target `{other}`; known: {TARGETS:?}"),
    }
}

/// A scratch folder for this process.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("wanda-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the temp folder is writable");
        dir
    })
}

/// A GGUF file: header, metadata, tensor table, every tensor dequantised, the tokenizer, and
/// the whole model load (config from metadata, q/k un-permuting, shape checks).
fn gguf(data: &[u8]) {
    if let Ok(file) = GgufFile::from_bytes("fuzz.gguf", data.to_vec()) {
        for info in file.tensors() {
            let _ = file.tensor_f32(&info.name);
        }
        let _ = gguf_tokenizer_json(&file);
    }
    let path = scratch().join("model.gguf");
    std::fs::write(&path, data).expect("scratch is writable");
    let _ = load::<NdArray<f32>>(&ModelRef::Gguf(path), &Default::default());
}

/// The config the safetensors target's folder carries beside the fuzzed checkpoint: the tiny
/// model the seed checkpoints were written from, so a seed loads all the way.
const TINY_CONFIG: &str = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":16,
"intermediate_size":24,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
"vocab_size":32,"rms_norm_eps":1e-5,"rope_theta":10000.0,"max_position_embeddings":128,
"tie_word_embeddings":true}"#;

/// A one-token word-level tokenizer for the same folder.
const TINY_TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,
"decoder":null,"model":{"type":"WordLevel","vocab":{"[UNK]":0,"the":1},"unk_token":"[UNK]"}}"#;

/// `model.safetensors` (header and data) in a folder with a tiny config: every tensor read to
/// f32, then the model load.
fn safetensors(data: &[u8]) {
    let folder = scratch().join("hf");
    std::fs::create_dir_all(&folder).expect("scratch is writable");
    std::fs::write(folder.join("config.json"), TINY_CONFIG).expect("scratch is writable");
    std::fs::write(folder.join("tokenizer.json"), TINY_TOKENIZER).expect("scratch is writable");
    std::fs::write(folder.join("model.safetensors"), data).expect("scratch is writable");
    if let Ok(source) = SafetensorsSource::open(&folder) {
        let _ = source.parameter_count();
        for name in [
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "model.norm.weight",
        ] {
            let _ = source.tensor(name);
        }
    }
    let _ = load::<NdArray<f32>>(&ModelRef::Folder(folder), &Default::default());
}

/// `model.safetensors.index.json` → shard names.
fn safetensors_index(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = shard_files(text);
    }
}

/// `config.json` → resolved config.
fn hf_config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(config) = HfLlamaConfig::from_json(text) {
            if let Ok(resolved) = config.resolve() {
                let _ = resolved.to_hf_json();
            }
        }
    }
}

/// Pipeline YAML → validated plan (files not checked).
fn pipeline_yaml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let options = ValidateOptions {
            overrides: Vec::new(),
            check_files: false,
        };
        if let Ok(plan) = validate_source(text, Path::new("fuzz.yaml"), &options) {
            let _ = plan.render(crate::pipeline::GraphFormat::Text);
        }
    }
}

/// `tokenizer.json` → tokenizer, then a round trip of a short text.
fn tokenizer_json(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(tokenizer) = Tokenizer::from_json(text, "fuzz/tokenizer.json") {
            if let Ok(ids) = tokenizer.encode("The cat sat on the mat, 2 times.") {
                let _ = tokenizer.decode(&ids);
            }
        }
    }
}

/// A `run.json` as `wanda table` reads a results folder, then a table of it in every format.
fn run_record(data: &[u8]) {
    use crate::report::table::{build, read_records, render, Format, TableSpec};
    let folder = scratch().join("results/cell");
    std::fs::create_dir_all(&folder).expect("scratch is writable");
    std::fs::write(folder.join("run.json"), data).expect("scratch is writable");
    let (records, _skipped) = read_records(&scratch().join("results"));
    let records: Vec<_> = records.into_iter().map(|(_, r)| r).collect();
    let spec = TableSpec::perplexity();
    if let Ok(table) = build(&records, &spec) {
        for format in [Format::Markdown, Format::Csv, Format::Latex, Format::Json] {
            let _ = render(&table, format, spec.decimals);
        }
    }
}
