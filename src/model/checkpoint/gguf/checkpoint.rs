//! A GGUF file as a Llama-family checkpoint: the `{arch}.*` metadata as a resolved config, the
//! tensors under their Hugging Face names, the vocabulary as a tokenizer.
//!
//! llama.cpp's converter permutes the rows of `attn_q`/`attn_k` for its interleaved RoPE; the
//! model here uses the Hugging Face "rotate half" layout, so those rows are permuted back on
//! load (as transformers' GGUF loader does), for the families whose adapter says so.

use std::path::{Path, PathBuf};

use super::{tokenizer_json, GgufFile};
use crate::model::arch::{Architecture, FusedLinear};
use crate::model::arch::{
    ConfigError, HfExpertKeys, HfFalconKeys, HfGemmaKeys, HfLlamaConfig, HfMultiplierKeys,
    HfRopeScaling, LlamaConfig, RopeScaling,
};
use crate::model::checkpoint::LoadError;
use crate::model::checkpoint::Tokenizer;
use crate::model::checkpoint::{HostTensor, WeightError, WeightSource};
use crate::model::family::GgufMetadata;

/// An opened GGUF checkpoint.
pub struct GgufCheckpoint {
    path: PathBuf,
    file: GgufFile,
    config: LlamaConfig,
}

impl GgufCheckpoint {
    /// Opens the file and resolves its config from the metadata.
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        let file = GgufFile::open(path).map_err(WeightError::from)?;
        let arch = file.get_str("general.architecture").unwrap_or("<missing>");
        let config = config_from_metadata(&file, arch)?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            config,
        })
    }

    /// The resolved model config.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The tokenizer built from the GGUF vocabulary.
    pub fn tokenizer(&self) -> Result<Tokenizer, LoadError> {
        let json = tokenizer_json(&self.file).map_err(WeightError::from)?;
        Ok(Tokenizer::from_json(
            &json.to_string(),
            &self.path.display().to_string(),
        )?)
    }
}

impl GgufCheckpoint {
    /// The metadata's special token id `name` (`padding`, `unknown`).
    fn special_id(&self, name: &str) -> Option<u32> {
        self.file
            .get_u64(&format!("tokenizer.ggml.{name}_token_id"))
            .and_then(|id| u32::try_from(id).ok())
    }

    /// The `config.json` keys of a Hugging Face copy that the decoder's config does not hold:
    /// `pad_token_id` and `unk_token_id` where the metadata names them, as transformers' GGUF
    /// loader writes them.
    pub fn hf_config(&self) -> serde_json::Value {
        let mut keys = serde_json::Map::new();
        for (key, name) in [("pad_token_id", "padding"), ("unk_token_id", "unknown")] {
            if let Some(id) = self.special_id(name) {
                keys.insert(key.into(), id.into());
            }
        }
        keys.into()
    }

    /// `tokenizer_config.json`, `special_tokens_map.json` and `generation_config.json` for a
    /// Hugging Face copy of this model, from the BOS/EOS/unknown/padding ids, the context
    /// length and the chat template in the metadata.
    pub fn tokenizer_files(&self, tokenizer: &Tokenizer) -> Vec<(String, String)> {
        let token = |id: Option<u32>| id.and_then(|id| tokenizer.token(id));
        let mut special = serde_json::Map::new();
        for (key, id) in [
            ("bos_token", self.config.bos_token_id),
            ("eos_token", self.config.eos_token_id),
            ("unk_token", self.special_id("unknown")),
        ] {
            if let Some(text) = token(id) {
                special.insert(key.into(), text.into());
            }
        }
        let mut tokenizer_config = special.clone();
        tokenizer_config.insert("tokenizer_class".into(), "PreTrainedTokenizerFast".into());
        tokenizer_config.insert(
            "model_max_length".into(),
            self.config.max_position_embeddings.into(),
        );
        for (key, meta) in [
            ("add_bos_token", "tokenizer.ggml.add_bos_token"),
            ("add_eos_token", "tokenizer.ggml.add_eos_token"),
        ] {
            if let Some(flag) = self.file.get_bool(meta) {
                tokenizer_config.insert(key.into(), flag.into());
            }
        }
        if let Some(template) = self.file.get_str("tokenizer.chat_template") {
            tokenizer_config.insert("chat_template".into(), template.into());
        }
        let mut generation = serde_json::Map::new();
        for (key, id) in [
            ("bos_token_id", self.config.bos_token_id),
            ("eos_token_id", self.config.eos_token_id),
            ("pad_token_id", self.special_id("padding")),
        ] {
            if let Some(id) = id {
                generation.insert(key.into(), id.into());
            }
        }
        [
            ("tokenizer_config.json", tokenizer_config),
            ("special_tokens_map.json", special),
            ("generation_config.json", generation),
        ]
        .into_iter()
        .map(|(name, map)| {
            let text = serde_json::to_string_pretty(&serde_json::Value::Object(map))
                .expect("a JSON value always serialises");
            (name.to_string(), text)
        })
        .collect()
    }
}

/// A GGUF file's metadata under its architecture's prefix, as a family reads it.
struct ArchMetadata<'a> {
    file: &'a GgufFile,
    arch: &'a str,
}

impl GgufMetadata for ArchMetadata<'_> {
    fn u64(&self, key: &str) -> Option<u64> {
        self.file.get_u64(&format!("{}.{key}", self.arch))
    }

    fn f64(&self, key: &str) -> Option<f64> {
        self.file.get_f64(&format!("{}.{key}", self.arch))
    }
}

fn config_from_metadata(file: &GgufFile, arch: &str) -> Result<LlamaConfig, ConfigError> {
    let architecture =
        Architecture::from_gguf_arch(arch).ok_or_else(|| ConfigError::UnsupportedArchitecture {
            found: format!("GGUF `{arch}`"),
            supported: Architecture::supported_gguf_archs(),
        })?;
    let key = |k: &str| format!("{arch}.{k}");
    let required = |k: &str| {
        file.get_u64(&key(k))
            .map(|v| v as usize)
            .ok_or_else(|| ConfigError::Invalid {
                key: key(k),
                problem: "is missing from the GGUF metadata".to_string(),
            })
    };
    let experts = file
        .get_u64(&key("expert_count"))
        .filter(|&n| n > 0)
        .map(|n| n as usize);
    // Granite MoE with a shared MLP is `granitemoe` with the shared width.
    let shared = file
        .get(&key("expert_shared_feed_forward_length"))
        .is_some();
    let architecture = match architecture {
        Architecture::GraniteMoe if shared => Architecture::GraniteMoeShared,
        other => other,
    };
    let architecture = with_experts(architecture, experts, &key("expert_count"))?;
    if let Some(gating) = file.get_u64(&key("expert_gating_func")).filter(|&g| g != 1) {
        return Err(ConfigError::Invalid {
            key: key("expert_gating_func"),
            problem: format!("is {gating}; only softmax routing (1) runs"),
        });
    }
    let hidden_size = required("embedding_length")?;
    let num_attention_heads = required("attention.head_count")?;
    let vocab_size = match file.get_u64(&key("vocab_size")) {
        Some(v) => v as usize,
        None => file
            .get_string_array("tokenizer.ggml.tokens")
            .map(|t| t.len())
            .ok_or_else(|| ConfigError::Invalid {
                key: key("vocab_size"),
                problem: "is missing and there is no `tokenizer.ggml.tokens`".to_string(),
            })?,
    };
    let rope_scaling = match longrope(file)? {
        Some(longrope) => Some(longrope),
        None => rope_scaling(file, &key)?,
    };
    // Always given (a family whose heads rotate in part reads the width its own way), and so
    // are the kv heads (llama.cpp's default: one per query head): a config class's own
    // defaults are for `config.json`s that leave them out.
    let head_dim = ["attention.key_length", "rope.dimension_count"]
        .iter()
        .find_map(|k| file.get_u64(&key(k)))
        .map_or(hidden_size / num_attention_heads.max(1), |v| v as usize);
    let num_key_value_heads =
        key_value_heads(file, &key("attention.head_count_kv"))?.or(Some(num_attention_heads));
    let feed_forward_length = required("feed_forward_length")?;
    let mut hf = HfLlamaConfig {
        architectures: Some(vec![architecture.hf_class().to_string()]),
        model_type: Some(architecture.model_type().to_string()),
        hidden_size,
        intermediate_size: Some(feed_forward_length),
        num_hidden_layers: required("block_count")?,
        num_attention_heads,
        num_key_value_heads,
        head_dim: Some(head_dim),
        rms_norm_eps: file.get_f64(&key("attention.layer_norm_rms_epsilon")),
        rope_theta: file.get_f64(&key("rope.freq_base")),
        original_max_position_embeddings: file
            .get_u64(&key("rope.scaling.original_context_length"))
            .map(|v| v as usize),
        use_parallel_residual: file.get_bool(&key("use_parallel_residual")),
        layer_norm_eps: file.get_f64(&key("attention.layer_norm_epsilon")),
        rope_scaling,
        max_position_embeddings: file.get_u64(&key("context_length")).map(|v| v as usize),
        vocab_size,
        tie_word_embeddings: Some(file.tensor_info("output.weight").is_none()),
        // Read for every family; only those that slide use it. 0 is none (Phi-4's), and so
        // is an absent key: llama.cpp writes the window of every model that has one.
        sliding_window: Some(
            file.get_u64(&key("attention.sliding_window"))
                .filter(|&w| w > 0)
                .map(|v| v as usize),
        ),
        sliding_window_pattern: file
            .get_u64(&key("attention.sliding_window_pattern"))
            .map(|v| v as usize),
        layer_types: sliding_layer_types(file, &key),
        bos_token_id: file.get_u64("tokenizer.ggml.bos_token_id").map(Into::into),
        eos_token_id: file.get_u64("tokenizer.ggml.eos_token_id").map(Into::into),
        gemma: HfGemmaKeys {
            // GGUF stores none: llama.cpp scales by `key_length^-0.5` (Gemma 2 and 3).
            query_pre_attn_scalar: file.get_u64(&key("attention.key_length")).map(|v| v as f64),
            rope_local_base_freq: file.get_f64(&key("rope.freq_base_swa")),
            final_logit_softcapping: file.get_f64(&key("final_logit_softcapping")).map(Some),
            attn_logit_softcapping: file.get_f64(&key("attn_logit_softcapping")).map(Some),
            ..HfGemmaKeys::default()
        },
        falcon: falcon_keys(
            file,
            num_attention_heads,
            num_key_value_heads,
            feed_forward_length,
        ),
        ..family_keys(file, &key, experts)
    };
    architecture
        .family()
        .read_gguf(&ArchMetadata { file, arch }, &mut hf);
    let mut config = hf.resolve()?;
    if file.tensor_info("rope_freqs.weight").is_some() {
        let (_, factors) =
            file.tensor_f32("rope_freqs.weight")
                .map_err(|e| ConfigError::Invalid {
                    key: "rope_freqs.weight".to_string(),
                    problem: e.to_string(),
                })?;
        config.rope_scaling = RopeScaling::Factors(factors);
    }
    Ok(config)
}

/// The key/value heads (`key`, `attention.head_count_kv`): one count, or one per layer, as
/// llama.cpp writes Granite 4.0's (0 for a Mamba layer); counts that differ between layers are
/// refused, a Mamba layer's 0 among them.
fn key_value_heads(file: &GgufFile, key: &str) -> Result<Option<usize>, ConfigError> {
    if let Some(n) = file.get_u64(key) {
        return Ok(Some(n as usize));
    }
    let Some(per_layer) = file.get_i64_array(key) else {
        return Ok(None);
    };
    match per_layer[..] {
        [first, ..] if first > 0 && per_layer.iter().all(|&n| n == first) => {
            Ok(Some(first as usize))
        }
        _ => Err(ConfigError::Invalid {
            key: key.to_string(),
            problem: format!(
                "gives {per_layer:?} per layer; only one count for every layer runs (a 0 is a \
                 Mamba layer, which does not run)"
            ),
        }),
    }
}

/// The keys some families read beyond the shape, as llama.cpp's file gives them: biases and
/// norms by presence (q/k/v biases apart or on a stacked `attn_qkv`, under each family's key), Granite's and Cohere's scales, the experts, Gemma 2's soft-caps
/// (`head_dim` gives Granite's default attention scale; `experts` the expert count).
fn family_keys(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
    experts: Option<usize>,
) -> HfLlamaConfig {
    let present = |tensor: &str| Some(file.tensor_info(tensor).is_some());
    let shared_width = file
        .get_u64(&key("expert_shared_feed_forward_length"))
        .map(|v| v as usize);
    let qkv_biases = Some(
        ["blk.0.attn_q.bias", "blk.0.attn_qkv.bias"]
            .iter()
            .any(|t| file.tensor_info(t).is_some()),
    );
    HfLlamaConfig {
        attention_bias: qkv_biases,
        mlp_bias: present("blk.0.ffn_down.bias"),
        // Granite's factors, which llama.cpp's converter writes as scales where they are not 0;
        // without one llama.cpp scales the scores by `head_dim^-0.5` (`logit_scale` divides
        // Granite's logits and multiplies Cohere's, each family reading its own key).
        multipliers: HfMultiplierKeys {
            embedding_multiplier: file.get_f64(&key("embedding_scale")),
            residual_multiplier: file.get_f64(&key("residual_scale")),
            attention_multiplier: file.get_f64(&key("attention.scale")),
            logits_scaling: file.get_f64(&key("logit_scale")),
        },
        // Command R+'s: llama.cpp reads the norms where the file has them.
        use_qk_norm: present("blk.0.attn_q_norm.weight"),
        qkv_bias: qkv_biases,
        // StableLM's names for the q/k/v biases and the per-head q/k norms (StableLM 2 12B's);
        // StarCoder2's and ERNIE 4.5's for the biases of every linear.
        use_qkv_bias: qkv_biases,
        use_bias: qkv_biases,
        qk_layernorm: present("blk.0.attn_q_norm.weight"),
        experts: HfExpertKeys {
            num_local_experts: experts,
            num_experts_per_tok: file.get_u64(&key("expert_used_count")).map(|v| v as usize),
            moe_intermediate_size: file
                .get_u64(&key("expert_feed_forward_length"))
                .map(|v| v as usize),
            shared_expert_intermediate_size: shared_width,
            // Granite MoE's name for it.
            shared_intermediate_size: shared_width,
            // Where the file does not say, llama.cpp's graphs fix it by family (Qwen3-MoE's
            // `read_gguf`; Qwen2-MoE and OLMoE do not renormalise, Mixtral always does).
            norm_topk_prob: file.get_bool(&key("expert_weights_norm")),
            ..HfExpertKeys::default()
        },
        ..HfLlamaConfig::default()
    }
}

/// Which layers slide, where the file lists them (`attention.sliding_window_pattern` as one
/// bool per layer, true for sliding), as `layer_types`; a pattern given as a count, or none,
/// leaves the family's default (Cohere 2's every fourth layer full, as llama.cpp's).
fn sliding_layer_types(file: &GgufFile, key: &dyn Fn(&str) -> String) -> Option<Vec<String>> {
    match file.get_array(&key("attention.sliding_window_pattern"))? {
        super::GgufArray::Bool(sliding) => Some(
            sliding
                .iter()
                .map(|&s| match s {
                    true => "sliding_attention".to_string(),
                    false => "full_attention".to_string(),
                })
                .collect(),
        ),
        _ => None,
    }
}

/// Falcon's layout from what llama.cpp's file holds. Its graph is always the parallel layer,
/// without biases; the new decoder architecture is told by a norm each for attention and MLP
/// (`attn_norm_2`: 40B, 180B) or by grouped key/value heads (Falcon2-11B, one norm); else one
/// key/value head (Falcon-7B, `multi_query`) or one per query head. Biases are read where the
/// file holds them (llama.cpp would not load such a file).
fn falcon_keys(
    file: &GgufFile,
    heads: usize,
    kv_heads: Option<usize>,
    feed_forward_length: usize,
) -> HfFalconKeys {
    let kv = kv_heads.unwrap_or(heads);
    let two_norms = file.tensor_info("blk.0.attn_norm_2.weight").is_some();
    let new_architecture = two_norms || (kv != 1 && kv != heads);
    HfFalconKeys {
        ffn_hidden_size: Some(feed_forward_length),
        bias: Some(file.tensor_info("blk.0.attn_qkv.bias").is_some()),
        multi_query: Some(kv == 1),
        parallel_attn: Some(true),
        new_decoder_architecture: Some(new_architecture),
        num_kv_heads: Some(kv),
        num_ln_in_parallel_attn: new_architecture.then_some(if two_norms { 2 } else { 1 }),
        ..HfFalconKeys::default()
    }
}

/// The RoPE scaling `{arch}.rope.scaling.type` names (`key` makes the metadata key): none or
/// linear; any other is refused by key.
fn rope_scaling(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
) -> Result<Option<HfRopeScaling>, ConfigError> {
    Ok(match file.get_str(&key("rope.scaling.type")) {
        Some("linear") => Some(HfRopeScaling {
            rope_type: Some("linear".into()),
            factor: file.get_f64(&key("rope.scaling.factor")),
            ..HfRopeScaling::default()
        }),
        None | Some("none") => None,
        Some("yarn") => Some(yarn(file, key)?),
        // LongRoPE by type: read as unscaled it would give wrong logits without a word.
        Some(other) => {
            return Err(ConfigError::Invalid {
                key: key("rope.scaling.type"),
                problem: format!("is `{other}`; only `none`, `linear` and `yarn` RoPE scaling run"),
            })
        }
    })
}

/// YaRN as llama.cpp's converter writes it (`rope.scaling.factor`, `original_context_length`,
/// `yarn_beta_fast`/`yarn_beta_slow` where the config had them), read as transformers reads the
/// config it came from: the attention factor `0.1 · ln(factor) + 1` in both. A file's own
/// `yarn_attn_factor`, `yarn_ext_factor` or `yarn_log_multiplier` is refused by key: llama.cpp
/// multiplies the first into its own factor where transformers replaces it, and the others
/// have no transformers counterpart this reads.
fn yarn(file: &GgufFile, key: &dyn Fn(&str) -> String) -> Result<HfRopeScaling, ConfigError> {
    for unread in [
        "rope.scaling.yarn_attn_factor",
        "rope.scaling.yarn_ext_factor",
        "rope.scaling.yarn_log_multiplier",
    ] {
        if file.get(&key(unread)).is_some() {
            return Err(ConfigError::Invalid {
                key: key(unread),
                problem: "is set; YaRN runs here only with llama.cpp's default factors".into(),
            });
        }
    }
    let required = |name: &str| {
        let name = key(name);
        file.get_f64(&name).ok_or_else(|| ConfigError::Invalid {
            key: name,
            problem: "is missing; YaRN needs it".into(),
        })
    };
    Ok(HfRopeScaling {
        rope_type: Some("yarn".into()),
        factor: Some(required("rope.scaling.factor")?),
        original_max_position_embeddings: Some(
            required("rope.scaling.original_context_length")? as usize
        ),
        beta_fast: file.get_f64(&key("rope.scaling.yarn_beta_fast")),
        beta_slow: file.get_f64(&key("rope.scaling.yarn_beta_slow")),
        ..HfRopeScaling::default()
    })
}

/// LongRoPE as llama.cpp writes Phi-3's 128k models: no scaling type, the factors in the
/// tensors `rope_factors_long` and `rope_factors_short` (the pre-training context in
/// `rope.scaling.original_context_length`; the attention factor follows from it, as
/// transformers computes it).
fn longrope(file: &GgufFile) -> Result<Option<HfRopeScaling>, ConfigError> {
    let factors = |name: &str| -> Result<Option<Vec<f64>>, ConfigError> {
        if file.tensor_info(name).is_none() {
            return Ok(None);
        }
        let (_, values) = file.tensor_f32(name).map_err(|e| ConfigError::Invalid {
            key: name.to_string(),
            problem: e.to_string(),
        })?;
        Ok(Some(values.into_iter().map(f64::from).collect()))
    };
    let long_factor = factors("rope_factors_long.weight")?;
    let short_factor = factors("rope_factors_short.weight")?;
    if long_factor.is_none() && short_factor.is_none() {
        return Ok(None);
    }
    Ok(Some(HfRopeScaling {
        rope_type: Some("longrope".into()),
        long_factor,
        short_factor,
        ..HfRopeScaling::default()
    }))
}

/// The family of a file whose `general.architecture` names `family` and whose `expert_count`
/// (`key`) is `experts`: llama.cpp writes Mixtral as `llama` with an expert count.
fn with_experts(
    family: Architecture,
    experts: Option<usize>,
    key: &str,
) -> Result<Architecture, ConfigError> {
    use Architecture::{
        GptOss, GraniteMoe, GraniteMoeShared, Llama, Mixtral, Olmoe, Qwen2Moe, Qwen3Moe,
    };
    let invalid = |problem: String| ConfigError::Invalid {
        key: key.to_string(),
        problem,
    };
    let sparse = matches!(
        family,
        Mixtral | Qwen2Moe | Qwen3Moe | Olmoe | GptOss | GraniteMoe | GraniteMoeShared
    );
    match experts {
        Some(_) if family == Llama => Ok(Mixtral),
        Some(n) if !sparse => Err(invalid(format!(
            "is {n}, but {} has no experts",
            family.hf_class()
        ))),
        None if sparse => Err(invalid("is missing from the GGUF metadata".to_string())),
        _ => Ok(family),
    }
}

/// The GGUF tensor name of a Hugging Face checkpoint's tensor name, in any family's spelling
/// (Llama's `model.layers.N`, GPT-NeoX's `gpt_neox.layers.N`, BLOOM's and Falcon's
/// `transformer.h.N`). With `sandwich_norms` (Gemma) the layer's four norms take llama.cpp's
/// Gemma names: `post_attention_layernorm` is then the norm of the attention output, and the
/// MLP's input norm is `pre_feedforward_layernorm`.
pub fn gguf_name(hf: &str, sandwich_norms: bool) -> Option<String> {
    // GPT-OSS's sinks are a parameter of the attention itself, without a `.weight`.
    if let Some(layer) = hf.strip_suffix(".self_attn.sinks") {
        return gguf_name(&format!("{layer}.self_attn.sinks.weight"), sandwich_norms);
    }
    let (module, kind) = hf.rsplit_once('.')?;
    let outside = match module {
        "model.embed_tokens"
        | "gpt_neox.embed_in"
        | "transformer.word_embeddings"
        | "transformer.wte" => Some("token_embd"),
        "transformer.wpe" => Some("position_embd"),
        "transformer.word_embeddings_layernorm" => Some("token_embd_norm"),
        "model.norm"
        | "model.final_layernorm"
        | "gpt_neox.final_layer_norm"
        | "transformer.ln_f" => Some("output_norm"),
        "lm_head" | "embed_out" => Some("output"),
        _ => None,
    };
    if let Some(short) = outside {
        return Some(format!("{short}.{kind}"));
    }
    let rest = ["model.layers.", "gpt_neox.layers.", "transformer.h."]
        .iter()
        .find_map(|prefix| module.strip_prefix(prefix))?;
    let (layer, module) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let short = match module {
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" | "self_attn.dense" => "attn_output",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" | "mlp.fc1" | "mlp.c_fc" => "ffn_up",
        "mlp.down_proj" | "mlp.fc2" | "mlp.c_proj" => "ffn_down",
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" if sandwich_norms => "post_attention_norm",
        // GLM-4's names for the attention's and the MLP's output norms.
        "post_self_attn_layernorm" => "post_attention_norm",
        "post_mlp_layernorm" => "post_ffw_norm",
        "post_attention_layernorm" | "pre_feedforward_layernorm" => "ffn_norm",
        "post_feedforward_layernorm" => "post_ffw_norm",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "self_attn.qkv_proj" => "attn_qkv",
        "mlp.gate_up_proj" => "ffn_up",
        "mlp.gate" | "block_sparse_moe.gate" | "mlp.router" | "block_sparse_moe.router.layer" => {
            "ffn_gate_inp"
        }
        "self_attn.sinks" => "attn_sinks",
        "mlp.shared_expert.gate_proj" => "ffn_gate_shexp",
        "mlp.shared_expert.up_proj" => "ffn_up_shexp",
        "mlp.shared_expert.down_proj" | "shared_mlp.output_linear" => "ffn_down_shexp",
        "mlp.shared_expert_gate" => "ffn_gate_inp_shexp",
        // GPT-NeoX's, BLOOM's and Falcon's names (Falcon-40B's MLP norm is llama.cpp's first).
        "attention.query_key_value" | "self_attention.query_key_value" => "attn_qkv",
        "attention.dense" | "self_attention.dense" => "attn_output",
        "mlp.dense_h_to_4h" => "ffn_up",
        "mlp.dense_4h_to_h" => "ffn_down",
        "ln_mlp" => "attn_norm",
        "ln_attn" => "attn_norm_2",
        // GPT-2's and GPT-BigCode's.
        "attn.c_attn" => "attn_qkv",
        "attn.c_proj" => "attn_output",
        "ln_1" => "attn_norm",
        "ln_2" => "ffn_norm",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}.{kind}"))
}

/// Where an expert's linear (`mlp.experts.E.gate_proj`, Mixtral's
/// `block_sparse_moe.experts.E.w1`) lies in a GGUF file: `(stacked, index, legacy)`, entry
/// `index` of llama.cpp's stacked `blk.N.ffn_*_exps.weight` (`[experts, rows, cols]`), or, in
/// files converted before stacking (early 2024), a tensor of its own, `blk.N.ffn_*.E.weight`;
/// an expert's bias (GPT-OSS's) the same of `blk.N.ffn_*_exps.bias` (`[experts, rows]`).
pub fn gguf_expert_name(hf: &str) -> Option<(String, usize, String)> {
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest
        .split_once(".mlp.experts.")
        .or_else(|| rest.split_once(".block_sparse_moe.experts."))?;
    let layer: usize = layer.parse().ok()?;
    let (expert, rest) = rest.split_once('.')?;
    let expert: usize = expert.parse().ok()?;
    let (linear, kind) = rest.split_once('.')?;
    let short = match linear {
        "gate_proj" | "w1" => "ffn_gate",
        "up_proj" | "w3" => "ffn_up",
        "down_proj" | "w2" => "ffn_down",
        _ => return None,
    };
    if !matches!(kind, "weight" | "bias") {
        return None;
    }
    Some((
        format!("blk.{layer}.{short}_exps.{kind}"),
        expert,
        format!("blk.{layer}.{short}.{expert}.{kind}"),
    ))
}

/// Whether `name` is one of llama.cpp's RoPE frequency tables, which a Hugging Face checkpoint
/// holds as config keys, not parameters.
fn is_rope_table(name: &str) -> bool {
    matches!(
        name,
        "rope_freqs.weight" | "rope_factors_long.weight" | "rope_factors_short.weight"
    )
}

/// Undoes llama.cpp's q/k row permutation: GGUF row `h·d + 2j + r` becomes HF row
/// `h·d + r·d/2 + j` (pairs → halves), for `heads` heads of `d` rows each.
///
/// # Shapes
/// - `data`: `[heads · d, cols]` row-major → same shape
fn unpermute_rows(data: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let rows = data.len() / cols.max(1);
    let d = rows / heads.max(1);
    let half = d / 2;
    let mut out = vec![0.0f32; data.len()];
    for h in 0..heads {
        for j in 0..half {
            for r in 0..2 {
                let src = h * d + 2 * j + r;
                let dst = h * d + r * half + j;
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

impl GgufCheckpoint {
    /// Whether the checkpoint's `post_attention_layernorm` is llama.cpp's `post_attention_norm`
    /// ([`gguf_name`]'s `sandwich_norms`): Gemma's, the norm of the attention output among its
    /// four, and GPT-OSS's, the MLP's input norm, which its converter so names. GLM-4 has four
    /// norms too, but its checkpoint names the attention's output norm
    /// `post_self_attn_layernorm` and gives `post_attention_layernorm` to the MLP's input norm,
    /// as a Llama does.
    fn gemma_norm_names(&self) -> bool {
        let architecture = self.config.architecture;
        (self.config.extras.sandwich_norms && architecture != Architecture::Glm4)
            || architecture == Architecture::GptOss
    }

    /// Whether `name` is a part of a linear the family stacks (Phi-3's q/k/v, gate/up) that
    /// this file holds stacked (`attn_qkv`; `ffn_up` holding gate and up): the stack's first
    /// part has no tensor of its own. The decoder then reads the stack
    /// ([`crate::model::checkpoint::SplitSource`]); `ffn_up` alone is not the up projection.
    fn stacked_in_file(&self, name: &str) -> bool {
        let Some((layer, module)) = name
            .strip_prefix("model.layers.")
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(layer, rest)| Some((layer, rest.rsplit_once('.')?.0)))
        else {
            return false;
        };
        let Some(stack) = self
            .config
            .architecture
            .row()
            .fused_linears
            .iter()
            .find(|f| f.parts.contains(&module))
        else {
            return false;
        };
        let first = format!("model.layers.{layer}.{}.weight", stack.parts[0]);
        gguf_name(&first, self.gemma_norm_names())
            .is_none_or(|g| self.file.tensor_info(&g).is_none())
    }
}

impl GgufCheckpoint {
    /// Tensor `gguf` of the file, or where the file stacks q, k and v in one `attn_qkv` (as
    /// llama.cpp's first Phi-2 files do) and `gguf` is one of them, its rows of the stack.
    fn read(&self, gguf: &str) -> Result<Option<HostTensor>, WeightError> {
        if self.file.tensor_info(gguf).is_some() {
            let (shape, data) = self.file.tensor_f32(gguf)?;
            return Ok(Some(HostTensor { shape, data }));
        }
        let Some((layer, rest)) = gguf.split_once(".attn_") else {
            return Ok(None);
        };
        let Some((part, kind)) = rest.split_once('.') else {
            return Ok(None);
        };
        let Some(index) = ["q", "k", "v"].iter().position(|p| *p == part) else {
            return Ok(None);
        };
        let stacked = format!("{layer}.attn_qkv.{kind}");
        if self.file.tensor_info(&stacked).is_none() {
            return Ok(None);
        }
        let (mut shape, data) = self.file.tensor_f32(&stacked)?;
        let rows = self.qkv_rows();
        let cols: usize = shape.iter().skip(1).product();
        let start: usize = rows[..index].iter().sum();
        if rows.iter().sum::<usize>() != shape[0] {
            return Err(WeightError::Shape {
                name: stacked,
                source_name: self.path.display().to_string(),
                expected: vec![rows.iter().sum()],
                found: shape,
            });
        }
        shape[0] = rows[index];
        let part = data[start * cols..(start + rows[index]) * cols].to_vec();
        Ok(Some(HostTensor { shape, data: part }))
    }

    /// The rows of q, k and v.
    fn qkv_rows(&self) -> [usize; 3] {
        let c = &self.config;
        let kv = c.num_key_value_heads * c.head_dim;
        [c.num_attention_heads * c.head_dim, kv, kv]
    }

    /// llama.cpp's `attn_qkv` (q, k and v part by part: the converters of GPT-NeoX, BLOOM and
    /// Falcon restack their checkpoints' so) in the checkpoint's order where the family stacks
    /// by key/value head: each kv head's query heads, key and value in turn (head by head
    /// where there are as many kv heads as query heads); a bias the same way.
    fn stacked_by_kv_head(&self, data: Vec<f32>, shape: &[usize]) -> Vec<f32> {
        let Some(fused) = self
            .config
            .architecture
            .row()
            .fused_linears
            .iter()
            .find(|f| f.per_kv_head && f.fused == "self_attn.qkv_proj")
        else {
            return data;
        };
        let rows = self.qkv_rows();
        if shape.first() != Some(&rows.iter().sum()) {
            return data; // the decoder's shape check names the tensor
        }
        let kv = self.config.num_key_value_heads;
        let part_by_part = FusedLinear {
            per_kv_head: false,
            ..*fused
        };
        let (Some(from), Some(to)) = (
            part_by_part.row_ranges(&rows, kv),
            fused.row_ranges(&rows, kv),
        ) else {
            return data;
        };
        let cols: usize = shape.iter().skip(1).product();
        let mut out = vec![0.0f32; data.len()];
        for (from, to) in from.iter().zip(&to) {
            let mut src = from.iter().flat_map(|r| r.clone());
            for row in to.iter().flat_map(|r| r.clone()) {
                let Some(s) = src.next() else { break };
                out[row * cols..(row + 1) * cols].copy_from_slice(&data[s * cols..(s + 1) * cols]);
            }
        }
        out
    }
}

impl WeightSource for GgufCheckpoint {
    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn release_pages(&self) {
        self.file.release_pages();
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        if let Some((stacked, expert, legacy)) = gguf_expert_name(name) {
            let (shape, data) = if self.file.tensor_info(&stacked).is_some() {
                self.file.tensor_f32_entry(&stacked, expert)?
            } else if self.file.tensor_info(&legacy).is_some() {
                self.file.tensor_f32(&legacy)?
            } else {
                return Ok(None);
            };
            return Ok(Some(HostTensor { shape, data }));
        }
        if self.stacked_in_file(name) {
            return Ok(None);
        }
        let Some(gguf) = gguf_name(name, self.gemma_norm_names()) else {
            return Ok(None);
        };
        let Some(HostTensor { mut shape, data }) = self.read(&gguf)? else {
            return Ok(None);
        };
        // Qwen2-MoE's shared expert gate is `[1, hidden]`; quantised files hold it as `[hidden]`.
        if gguf.ends_with("ffn_gate_inp_shexp.weight") && shape.len() == 1 {
            shape.insert(0, 1);
        }
        let heads = if gguf.contains(".attn_q.") {
            Some(self.config.num_attention_heads)
        } else if gguf.contains(".attn_k.") {
            Some(self.config.num_key_value_heads)
        } else {
            None
        };
        let data = match gguf.contains(".attn_qkv.") {
            true => self.stacked_by_kv_head(data, &shape),
            false => data,
        };
        let data = match heads {
            Some(heads) if self.config.architecture.row().gguf_interleaves_qk => {
                let cols = if shape.len() == 2 { shape[1] } else { 1 };
                unpermute_rows(&data, heads, cols)
            }
            _ => data,
        };
        // llama.cpp stores Gemma's norms as `1 + w`; the Hugging Face tensor is `w` (as
        // transformers' GGUF loader computes it, in f32).
        let data = if self.config.extras.norm_offset && gguf.ends_with("norm.weight") {
            data.into_iter().map(|g| g - 1.0).collect()
        } else {
            data
        };
        Ok(Some(HostTensor { shape, data }))
    }

    fn parameter_count(&self) -> u64 {
        self.file
            .tensors()
            .iter()
            .filter(|t| !is_rope_table(&t.name))
            .map(|t| t.dims.iter().product::<u64>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::checkpoint::gguf::GgufWriter;

    /// llama.cpp's query scale for files without `query_pre_attn_scalar`: `key_length`, but
    /// `hidden / heads` for Gemma 2 27B (46 layers: 4608 / 32 = 144, its config's value).
    #[test]
    fn gemma2_27b_scales_queries_by_hidden_over_heads() {
        let scalar = |arch: &str, layers: u32| {
            let mut w = GgufWriter::new();
            w.metadata(format!("{arch}.block_count"), layers)
                .metadata(format!("{arch}.embedding_length"), 4608u32)
                .metadata(format!("{arch}.feed_forward_length"), 64u32)
                .metadata(format!("{arch}.attention.head_count"), 32u32)
                .metadata(format!("{arch}.attention.key_length"), 128u32)
                .metadata(format!("{arch}.vocab_size"), 8u32);
            let file = GgufFile::from_bytes("g.gguf", w.to_bytes().unwrap()).unwrap();
            let config = config_from_metadata(&file, arch).unwrap();
            config.extras.query_pre_attn_scalar
        };
        assert_eq!(scalar("gemma2", 46), Some(144.0));
        assert_eq!(scalar("gemma2", 42), Some(128.0));
        assert_eq!(scalar("gemma3", 46), Some(128.0));
    }

    /// A Granite file without `attention.scale` (the converter leaves out a 0 multiplier)
    /// scales the scores by `head_dim^-0.5`, as llama.cpp does; the other factors default to 1.
    #[test]
    fn granite_without_an_attention_scale_takes_llama_cpps() {
        let mut w = GgufWriter::new();
        w.metadata("granite.block_count", 1u32)
            .metadata("granite.embedding_length", 64u32)
            .metadata("granite.feed_forward_length", 128u32)
            .metadata("granite.attention.head_count", 4u32)
            .metadata("granite.vocab_size", 8u32)
            .metadata("granite.embedding_scale", 12.0f32);
        let file = GgufFile::from_bytes("g.gguf", w.to_bytes().unwrap()).unwrap();
        let config = config_from_metadata(&file, "granite").unwrap();
        let m = config.extras.multipliers.unwrap();
        assert_eq!((m.embedding, m.residual, m.logits), (12.0, 1.0, 1.0));
        assert_eq!(m.attention, 0.25, "16^-0.5");
    }

    /// Granite 4.0's kv heads come one per layer: one count for all layers is read, counts
    /// that differ or a Mamba layer's 0 are refused under the key; a Granite MoE file with the
    /// shared width is the shared class, and its scores default to `head_dim^-0.5` too.
    #[test]
    fn kv_heads_per_layer_and_granite_moe_read_as_llama_cpp_writes_them() {
        let file = |arch: &str, kv: Vec<i32>, shared: Option<u32>| {
            let mut w = GgufWriter::new();
            w.metadata(format!("{arch}.block_count"), kv.len() as u32)
                .metadata(format!("{arch}.embedding_length"), 64u32)
                .metadata(format!("{arch}.feed_forward_length"), 32u32)
                .metadata(format!("{arch}.attention.head_count"), 4u32)
                .metadata(format!("{arch}.attention.head_count_kv"), kv)
                .metadata(format!("{arch}.vocab_size"), 8u32);
            if arch == "granitemoe" {
                w.metadata("granitemoe.expert_count", 4u32)
                    .metadata("granitemoe.expert_used_count", 2u32);
            }
            if let Some(width) = shared {
                w.metadata(format!("{arch}.expert_shared_feed_forward_length"), width);
            }
            GgufFile::from_bytes("g.gguf", w.to_bytes().unwrap()).unwrap()
        };
        let dense = config_from_metadata(&file("granite", vec![2, 2, 2], Some(32)), "granite");
        let dense = dense.unwrap();
        assert_eq!(
            (dense.architecture, dense.num_key_value_heads),
            (Architecture::Granite, 2)
        );
        for kv in [vec![2, 4], vec![0, 2]] {
            let err = config_from_metadata(&file("granite", kv, None), "granite").unwrap_err();
            let err = err.to_string();
            assert!(
                err.contains("granite.attention.head_count_kv") && err.contains("Mamba"),
                "{err}"
            );
        }
        let routed = config_from_metadata(&file("granitemoe", vec![2], None), "granitemoe");
        let routed = routed.unwrap();
        assert_eq!(routed.architecture, Architecture::GraniteMoe);
        assert_eq!(routed.extras.experts.unwrap().shared, None);
        assert_eq!(
            routed.extras.multipliers.unwrap().attention,
            0.25,
            "16^-0.5"
        );
        let shared = config_from_metadata(&file("granitemoe", vec![2], Some(40)), "granitemoe");
        let shared = shared.unwrap();
        assert_eq!(shared.architecture, Architecture::GraniteMoeShared);
        assert_eq!(shared.extras.experts.unwrap().shared, Some(40));
    }

    #[test]
    fn names_map_to_gguf() {
        assert_eq!(
            gguf_name("model.layers.3.self_attn.q_proj.weight", false).unwrap(),
            "blk.3.attn_q.weight"
        );
        assert_eq!(
            gguf_name("model.layers.0.mlp.down_proj.weight", false).unwrap(),
            "blk.0.ffn_down.weight"
        );
        assert_eq!(
            gguf_name("model.layers.12.post_attention_layernorm.weight", false).unwrap(),
            "blk.12.ffn_norm.weight"
        );
        assert_eq!(
            gguf_name("model.layers.1.self_attn.q_proj.bias", false).unwrap(),
            "blk.1.attn_q.bias"
        );
        // Qwen3's per-head norms, as llama.cpp's converter names them.
        assert_eq!(
            gguf_name("model.layers.2.self_attn.k_norm.weight", false).unwrap(),
            "blk.2.attn_k_norm.weight"
        );
        assert_eq!(gguf_name("lm_head.weight", false).unwrap(), "output.weight");
        assert!(gguf_name("model.layers.x.mlp.up_proj.weight", false).is_none());
        // Gemma's four norms.
        let gemma = |n: &str| gguf_name(&format!("model.layers.0.{n}.weight"), true).unwrap();
        assert_eq!(gemma("input_layernorm"), "blk.0.attn_norm.weight");
        assert_eq!(
            gemma("post_attention_layernorm"),
            "blk.0.post_attention_norm.weight"
        );
        assert_eq!(gemma("pre_feedforward_layernorm"), "blk.0.ffn_norm.weight");
        assert_eq!(
            gemma("post_feedforward_layernorm"),
            "blk.0.post_ffw_norm.weight"
        );
        // GPT-OSS's sinks, router and expert biases.
        assert_eq!(
            gguf_name("model.layers.4.self_attn.sinks", false).unwrap(),
            "blk.4.attn_sinks.weight"
        );
        assert_eq!(
            gguf_name("model.layers.4.mlp.router.bias", false).unwrap(),
            "blk.4.ffn_gate_inp.bias"
        );
        let expert = gguf_expert_name("model.layers.4.mlp.experts.3.up_proj.bias").unwrap();
        assert_eq!(
            expert,
            (
                "blk.4.ffn_up_exps.bias".into(),
                3,
                "blk.4.ffn_up.3.bias".into()
            )
        );
        assert!(gguf_expert_name("model.layers.4.mlp.experts.3.up_proj.scale").is_none());
    }

    /// llama.cpp's `permute` (HF → GGUF), written independently to check the inverse.
    fn permute(data: &[f32], heads: usize, cols: usize) -> Vec<f32> {
        let d = data.len() / cols / heads;
        let mut out = vec![0.0; data.len()];
        // reshape(heads, 2, d/2, cols).swapaxes(1, 2): out[h, j, r] = in[h, r, j]
        for h in 0..heads {
            for r in 0..2 {
                for j in 0..d / 2 {
                    let src = h * d + r * (d / 2) + j;
                    let dst = h * d + j * 2 + r;
                    out[dst * cols..(dst + 1) * cols]
                        .copy_from_slice(&data[src * cols..(src + 1) * cols]);
                }
            }
        }
        out
    }

    #[test]
    fn unpermute_by_hand_and_as_inverse() {
        // one head, d = 4, cols = 1: GGUF rows [a0, b0, a1, b1] → HF rows [a0, a1, b0, b1]
        assert_eq!(
            unpermute_rows(&[0., 10., 1., 11.], 1, 1),
            vec![0., 1., 10., 11.]
        );
        let hf: Vec<f32> = (0..(3 * 8 * 5)).map(|x| x as f32).collect();
        assert_eq!(unpermute_rows(&permute(&hf, 3, 5), 3, 5), hf);
    }
}
