//! A tiny random Llama written as GGUF (q/k rows permuted as llama.cpp's converter does) loads
//! back with the logits of the original model; so do a Qwen3 (its own head width, per-head
//! q/k norms, rows as they are), a Gemma (`1 + w` norms) and an OLMo 2 (output norms alone).

use std::path::Path;

use wanda::model::arch::Architecture;
use wanda::model::arch::{HfLlamaConfig, LlamaConfig};
use wanda::model::checkpoint::gguf::{gguf_name, GgufValue, GgufWriter};
use wanda::model::checkpoint::hf_tensors;
use wanda::model::decoder::Llama;
use wanda::model::{self, ModelRef};

use crate::common::{logits, tiny_model, B};

/// hidden 32 and intermediate 64 so every row is a whole number of Q8_0 blocks.
pub(crate) fn config() -> LlamaConfig {
    HfLlamaConfig::from_json(
        r#"{"architectures":["LlamaForCausalLM"],"hidden_size":32,"intermediate_size":64,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":32,
        "rms_norm_eps":1e-5,"rope_theta":10000.0,"max_position_embeddings":64,
        "tie_word_embeddings":true,"bos_token_id":1,"eos_token_id":0}"#,
    )
    .unwrap()
    .resolve()
    .unwrap()
}

/// llama.cpp's `permute` for q/k rows (HF halves → GGUF pairs), written independently.
fn permute(data: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let d = data.len() / cols / heads;
    let mut out = vec![0.0; data.len()];
    for h in 0..heads {
        for r in 0..2 {
            for j in 0..d / 2 {
                let src = h * d + r * (d / 2) + j;
                let dst = h * d + 2 * j + r;
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

#[derive(Clone, Copy)]
pub(crate) enum Quant {
    F32,
    Q8_0,
}

pub(crate) fn write_gguf(path: &Path, config: &LlamaConfig, model: &Llama<B>, quant: Quant) {
    // llama.cpp writes Llama as `llama` with q/k rows permuted, Qwen3 and Gemma under their
    // own names as they are.
    let (arch, permuted) = match config.architecture {
        Architecture::Qwen3 => ("qwen3", false),
        Architecture::Gemma => ("gemma", false),
        Architecture::Olmo2 => ("olmo2", false),
        _ => ("llama", true),
    };
    let key = |k: &str| format!("{arch}.{k}");
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", arch)
        .metadata(key("embedding_length"), config.hidden_size as u32)
        .metadata(key("feed_forward_length"), config.intermediate_size as u32)
        .metadata(key("block_count"), config.num_hidden_layers as u32)
        .metadata(
            key("attention.head_count"),
            config.num_attention_heads as u32,
        )
        .metadata(
            key("attention.head_count_kv"),
            config.num_key_value_heads as u32,
        )
        .metadata(key("attention.key_length"), config.head_dim as u32)
        .metadata(
            key("attention.layer_norm_rms_epsilon"),
            config.rms_norm_eps as f32,
        )
        .metadata(key("rope.freq_base"), config.rope_theta as f32)
        .metadata(key("context_length"), config.max_position_embeddings as u32);
    // A byte-level BPE vocabulary of 32 tokens: one special, 26 letters, space and punctuation.
    let mut tokens = vec!["<|endoftext|>".to_string()];
    tokens.extend(('a'..='z').map(String::from));
    tokens.extend(["Ġ", ".", ",", "!", "?"].map(String::from));
    let mut types = vec![3i32];
    types.extend(std::iter::repeat_n(1, tokens.len() - 1));
    w.metadata("tokenizer.ggml.model", "gpt2")
        .metadata("tokenizer.ggml.pre", "gpt2")
        .metadata("tokenizer.ggml.tokens", tokens)
        .metadata("tokenizer.ggml.token_type", types)
        .metadata("tokenizer.ggml.merges", Vec::<String>::new())
        .metadata("tokenizer.ggml.bos_token_id", 0u32)
        .metadata("tokenizer.ggml.eos_token_id", 0u32);
    for (name, t) in hf_tensors(model) {
        let gguf = gguf_name(&name, config.extras.sandwich_norms).unwrap();
        let data = if config.extras.norm_offset && gguf.ends_with("norm.weight") {
            // llama.cpp's converter stores Gemma's norms as `1 + w`.
            t.data.iter().map(|w| w + 1.0).collect()
        } else if !permuted {
            t.data
        } else if gguf.contains("attn_q.weight") {
            permute(&t.data, config.num_attention_heads, t.shape[1])
        } else if gguf.contains("attn_k.weight") {
            permute(&t.data, config.num_key_value_heads, t.shape[1])
        } else {
            t.data
        };
        match quant {
            Quant::Q8_0 if t.shape.len() == 2 => w.tensor_q8_0(gguf, &t.shape, &data),
            _ => w.tensor_f32(gguf, &t.shape, &data),
        }
        .unwrap();
    }
    w.write(path).unwrap();
}

const IDS: [i64; 6] = [3, 7, 27, 1, 30, 12];

#[test]
fn qwen3_gguf_loads_with_identical_logits() {
    let config = HfLlamaConfig::from_json(
        r#"{"architectures":["Qwen3ForCausalLM"],"hidden_size":32,"intermediate_size":64,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,
        "vocab_size":32,"rms_norm_eps":1e-6,"rope_theta":1000000.0,"max_position_embeddings":64,
        "tie_word_embeddings":true,"bos_token_id":1,"eos_token_id":0}"#,
    )
    .unwrap()
    .resolve()
    .unwrap();
    let model = tiny_model(&config, 5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("qwen3.gguf");
    write_gguf(&path, &config, &model, Quant::F32);
    let loaded = model::load::<B>(&ModelRef::Gguf(path), &Default::default()).unwrap();
    assert_eq!(loaded.config.architecture, Architecture::Qwen3);
    assert_eq!(loaded.config.head_dim, 16);
    assert!(loaded.config.qk_norm);
    assert_eq!(logits(&model, &IDS), logits(&loaded.model, &IDS));
}

/// Gemma 1's file (`gemma`: `1 + w` norms, `ffn_norm` before the MLP, head_dim 16 ≠ hidden /
/// heads) loads as the Gemma family, with the model's logits to the bit.
#[test]
fn gemma_gguf_loads_with_identical_logits() {
    let config = HfLlamaConfig::from_json(
        r#"{"architectures":["GemmaForCausalLM"],"hidden_size":32,"intermediate_size":64,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":16,
        "vocab_size":32,"rms_norm_eps":1e-6,"rope_theta":10000.0,"max_position_embeddings":64,
        "hidden_act":"gelu","bos_token_id":1,"eos_token_id":0}"#,
    )
    .unwrap()
    .resolve()
    .unwrap();
    let model = tiny_model(&config, 8);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gemma.gguf");
    write_gguf(&path, &config, &model, Quant::F32);
    let loaded = model::load::<B>(&ModelRef::Gguf(path), &Default::default()).unwrap();
    assert_eq!(loaded.config.architecture, Architecture::Gemma);
    assert_eq!(loaded.config.extras, config.extras);
    assert_eq!(
        (loaded.config.head_dim, loaded.config.query_scale()),
        (16, None)
    );
    assert_eq!(logits(&model, &IDS), logits(&loaded.model, &IDS));
}

/// OLMo 2's file (`olmo2`: `post_attention_norm` and `post_ffw_norm` alone, q/k norms across
/// the heads, rows unpermuted) loads as the OLMo 2 family, with the model's logits to the bit;
/// with a sliding window (OLMo 3, which llama.cpp writes as `olmo2` too) it is refused.
#[test]
fn olmo2_gguf_loads_with_identical_logits() {
    let config = HfLlamaConfig::from_json(
        r#"{"architectures":["Olmo2ForCausalLM"],"hidden_size":32,"intermediate_size":64,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
        "vocab_size":32,"rms_norm_eps":1e-6,"rope_theta":500000.0,"max_position_embeddings":64,
        "bos_token_id":1,"eos_token_id":0}"#,
    )
    .unwrap()
    .resolve()
    .unwrap();
    let model = tiny_model(&config, 9);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("olmo2.gguf");
    write_gguf(&path, &config, &model, Quant::F32);
    let loaded = model::load::<B>(&ModelRef::Gguf(path.clone()), &Default::default()).unwrap();
    assert_eq!(loaded.config.architecture, Architecture::Olmo2);
    assert_eq!(loaded.config.extras, config.extras);
    assert_eq!(logits(&model, &IDS), logits(&loaded.model, &IDS));

    // The metadata again with keys more (the config is refused before any tensor is read).
    let with_all = |keys: &[(&str, GgufValue)]| {
        let file = wanda::model::checkpoint::gguf::GgufFile::open(&path).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in file.metadata() {
            w.metadata(k.clone(), v.clone());
        }
        for (key, value) in keys {
            w.metadata(*key, value.clone());
        }
        let changed = dir.path().join("changed.gguf");
        w.write(&changed).unwrap();
        match model::load::<B>(&ModelRef::Gguf(changed), &Default::default()) {
            Ok(_) => panic!("{keys:?} must be refused"),
            Err(e) => e.to_string(),
        }
    };
    let with = |key: &str, value: GgufValue| with_all(&[(key, value)]);
    let err = with("olmo2.attention.sliding_window", GgufValue::U32(4096));
    assert!(
        err.contains("sliding_window") && err.contains("OLMo 3"),
        "{err}"
    );
    // A scaling this does not read is refused, not read as unscaled; YaRN is read, and needs
    // its factor (and context) from the file.
    let err = with(
        "olmo2.rope.scaling.type",
        GgufValue::String("longrope".into()),
    );
    assert!(
        err.contains("`olmo2.rope.scaling.type`") && err.contains("longrope"),
        "{err}"
    );
    let yarn = |extra: Option<(&'static str, GgufValue)>| {
        let mut keys = vec![
            ("olmo2.rope.scaling.type", GgufValue::String("yarn".into())),
            ("olmo2.rope.scaling.factor", GgufValue::F32(4.0)),
        ];
        keys.extend(extra);
        with_all(&keys)
    };
    let err = yarn(None);
    assert!(
        err.contains("`olmo2.rope.scaling.original_context_length`"),
        "{err}"
    );
    // llama.cpp's own attention factor means something else in transformers: refused.
    let err = yarn(Some((
        "olmo2.rope.scaling.yarn_attn_factor",
        GgufValue::F32(1.2),
    )));
    assert!(
        err.contains("`olmo2.rope.scaling.yarn_attn_factor`"),
        "{err}"
    );
}

#[test]
fn f32_gguf_loads_with_identical_logits_and_its_tokenizer() {
    let config = config();
    let model = tiny_model(&config, 21);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(&path, &config, &model, Quant::F32);
    let loaded = model::load::<B>(&ModelRef::Gguf(path), &Default::default()).unwrap();
    assert_eq!(loaded.config.num_key_value_heads, 2);
    assert!(loaded.config.tie_word_embeddings);
    assert_eq!(logits(&model, &IDS), logits(&loaded.model, &IDS));
    // 'a' = 1, 'b' = 2, 'Ġ' (space) = 27; no BOS for a gpt2 vocabulary without add_bos_token.
    assert_eq!(loaded.tokenizer.encode("ab a").unwrap(), vec![1, 2, 27, 1]);
}

#[test]
fn q8_0_gguf_loads_close_to_the_original() {
    let config = config();
    let model = tiny_model(&config, 22);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-q8.gguf");
    write_gguf(&path, &config, &model, Quant::Q8_0);
    let loaded = model::load::<B>(&ModelRef::Gguf(path), &Default::default()).unwrap();
    let (a, b) = (logits(&model, &IDS), logits(&loaded.model, &IDS));
    assert_ne!(a, b, "Q8_0 must round the weights");
    // Q8_0 keeps each weight within 1/254 of its block's largest magnitude, so the logits move
    // by a small fraction of their range.
    let max = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let range = a.iter().map(|x| x.abs()).fold(0.0, f32::max);
    assert!(
        max < 0.02 * range,
        "max logit difference {max} of range {range}"
    );
}

/// The error of loading the tiny model's GGUF file with its metadata changed by `edit` (its
/// tensors left out: every case here fails on the metadata).
fn load_error_with_metadata(
    edit: impl FnOnce(&mut std::collections::BTreeMap<String, GgufValue>),
) -> String {
    let config = config();
    let model = tiny_model(&config, 23);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(&path, &config, &model, Quant::F32);
    let mut metadata = wanda::model::checkpoint::gguf::GgufFile::open(&path)
        .unwrap()
        .metadata()
        .clone();
    edit(&mut metadata);
    let mut w = GgufWriter::new();
    for (k, v) in metadata {
        w.metadata(k, v);
    }
    let edited = dir.path().join("edited.gguf");
    w.write(&edited).unwrap();
    match model::load::<B>(&ModelRef::Gguf(edited), &Default::default()) {
        Ok(_) => panic!("must fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_metadata_key_is_named() {
    let err = load_error_with_metadata(|m| {
        m.remove("llama.block_count");
    });
    assert!(err.contains("`llama.block_count`"), "{err}");
}

#[test]
fn truncated_gguf_is_an_error_not_a_panic() {
    let config = config();
    let model = tiny_model(&config, 24);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(&path, &config, &model, Quant::F32);
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let err = match model::load::<B>(&ModelRef::Gguf(cut), &Default::default()) {
        Ok(_) => panic!("must fail"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("cut.gguf"), "{err}");
}
