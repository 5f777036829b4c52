//! Model configuration: the Hugging Face `config.json` as a plain serde struct
//! ([`HfLlamaConfig`]) and the resolved, option-free [`LlamaConfig`] the model is built from.
//!
//! Every family shares one decoder shape; what differs (q/k/v bias, sliding window, RoPE
//! scaling, tied embeddings) is decided once here, with the family's adapter
//! ([`crate::model::family`]), and made explicit in the resolved config so the model code never
//! guesses.


use serde::{Deserialize, Serialize};

use super::architecture::Architecture;
use super::extras::{DecoderExtras, LogitScale};

/// Errors while reading or resolving a model configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read `{path}`")]
    Read {
        /// The file.
        path: String,
        /// The I/O cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid JSON for a model config.
    #[error("`{path}` is not a valid model config: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// What serde said.
        reason: String,
    },
    /// The architecture is not one this tool runs.
    #[error("unsupported architecture `{found}`; supported: {supported}")]
    UnsupportedArchitecture {
        /// What the config names.
        found: String,
        /// The names this tool runs.
        supported: String,
    },
    /// A value is missing or out of range.
    #[error("invalid model config: key `{key}` {problem}")]
    Invalid {
        /// The config key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// `rope_scaling` as it appears in `config.json`, or `rope_parameters` as transformers 5
/// writes it (the same keys plus `rope_theta`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HfRopeScaling {
    /// RoPE base (`rope_parameters` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    /// `rope_type` (newer configs) …
    #[serde(default)]
    pub rope_type: Option<String>,
    /// … or `type` (older configs).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Scaling factor.
    #[serde(default)]
    pub factor: Option<f64>,
    /// Llama-3: low-frequency factor.
    #[serde(default)]
    pub low_freq_factor: Option<f64>,
    /// Llama-3: high-frequency factor.
    #[serde(default)]
    pub high_freq_factor: Option<f64>,
    /// Llama-3: context length the model was pre-trained with.
    #[serde(default)]
    pub original_max_position_embeddings: Option<usize>,
    /// The share of each head's dimensions that rotate (`rope_parameters` only; GPT-NeoX).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_rotary_factor: Option<f64>,
    /// YaRN: rotations above which dimensions extrapolate (default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta_fast: Option<f64>,
    /// YaRN: rotations below which dimensions interpolate (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta_slow: Option<f64>,
    /// YaRN: the factor of the cosines and sines (default from `factor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_factor: Option<f64>,
    /// YaRN: `mscale` of the default attention factor (with `mscale_all_dim`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mscale: Option<f64>,
    /// YaRN: `mscale_all_dim` of the default attention factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mscale_all_dim: Option<f64>,
    /// YaRN: whether the correction range is rounded out to whole dimensions (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate: Option<bool>,
    /// LongRoPE: the divisor of each rotated pair's frequency within the pre-training context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_factor: Option<Vec<f64>>,
    /// LongRoPE: the divisor of each rotated pair's frequency past the pre-training context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_factor: Option<Vec<f64>>,
}

impl HfRopeScaling {
    /// The scaling's type: `rope_type`, else the legacy `type`.
    pub fn type_name(&self) -> Option<&str> {
        self.rope_type.as_deref().or(self.kind.as_deref())
    }
}

/// Falcon's `config.json` keys (`FalconConfig`); each absent key takes transformers' default in
/// [`crate::model::family::falcon`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HfFalconKeys {
    /// The MLP activation (default `gelu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation: Option<String>,
    /// The MLP's width (default 4 × hidden).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ffn_hidden_size: Option<usize>,
    /// Whether every linear carries a bias (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bias: Option<bool>,
    /// ALiBi instead of RoPE (default false; Falcon's ALiBi scales the bias with the scores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alibi: Option<bool>,
    /// One key/value head for all query heads (default true; Falcon-7B, GPT-BigCode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_query: Option<bool>,
    /// Attention and MLP read the layer's input side by side (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_attn: Option<bool>,
    /// Falcon-40B's and 180B's layer: grouped key/value heads and, by default, a norm each for
    /// attention and MLP (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_decoder_architecture: Option<bool>,
    /// Key/value heads of the new decoder architecture (default the query heads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_kv_heads: Option<usize>,
    /// Norms a parallel layer of the new architecture has (default 2; 1: shared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_ln_in_parallel_attn: Option<usize>,
}

/// Keys some families spell their own way (BLOOM, Falcon, StarCoder2, GPT-J, Nemotron, GPT-Neo),
/// and the name they are read under.
pub const KEY_ALIASES: [(&str, &str); 11] = [
    ("n_embed", "hidden_size"),
    ("n_embd", "hidden_size"),
    ("n_positions", "max_position_embeddings"),
    ("n_inner", "intermediate_size"),
    ("n_layer", "num_hidden_layers"),
    ("n_head", "num_attention_heads"),
    ("num_layers", "num_hidden_layers"),
    ("num_heads", "num_attention_heads"),
    ("layer_norm_epsilon", "layer_norm_eps"),
    ("norm_epsilon", "layer_norm_eps"),
    ("norm_eps", "layer_norm_eps"),
];

/// A Hugging Face `config.json` for a Llama-family model; field names equal the file's keys.
/// Unknown keys are ignored (real configs carry many that do not affect inference).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HfLlamaConfig {
    /// Class names, e.g. `["LlamaForCausalLM"]`.
    #[serde(default)]
    pub architectures: Option<Vec<String>>,
    /// e.g. `llama`.
    #[serde(default)]
    pub model_type: Option<String>,
    /// Width of the residual stream (BLOOM's older configs: `n_embed`, [`KEY_ALIASES`]).
    pub hidden_size: usize,
    /// Width of the MLP.
    #[serde(default)]
    pub intermediate_size: Option<usize>,
    /// OPT's name for the width of the MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ffn_dim: Option<usize>,
    /// Number of decoder layers (BLOOM: `n_layer`).
    pub num_hidden_layers: usize,
    /// Number of query heads (BLOOM: `n_head`).
    pub num_attention_heads: usize,
    /// Number of key/value heads (GQA); defaults to the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Per-head width; defaults to `hidden_size / num_attention_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    #[serde(default)]
    pub rms_norm_eps: Option<f64>,
    /// RoPE base.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// GPT-NeoX's name for the RoPE base (`rope_theta` wins where both are given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_emb_base: Option<f64>,
    /// GPT-NeoX: the share of each head's dimensions that rotate (the rest pass through).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_pct: Option<f64>,
    /// Phi, StableLM: the share of each head's dimensions that rotate, outside
    /// `rope_parameters` (transformers 4's configs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_rotary_factor: Option<f64>,
    /// StableLM: whether q, k and v carry biases (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_qkv_bias: Option<bool>,
    /// GPT-J: how many dimensions of each head rotate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_dim: Option<usize>,
    /// StarCoder2: whether every linear carries a bias (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_bias: Option<bool>,
    /// GPT-Neo: which layers attend globally and which locally, `[[["global", "local"], 12]]`
    /// (the pattern, repeated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_types: Option<serde_json::Value>,
    /// GPT-Neo: the span of its local layers' attention (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_size: Option<usize>,
    /// GPT-2, GPT-BigCode: whether attention scores are scaled by `head_dim^-0.5` (default
    /// true; false is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_attn_weights: Option<bool>,
    /// GPT-2: whether each layer's scores are also divided by its index + 1 (default false;
    /// true is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_attn_by_inverse_layer_idx: Option<bool>,
    /// Phi, StableLM: per-head LayerNorms of q and k (default false; true is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qk_layernorm: Option<bool>,
    /// GPT-NeoX: attention and MLP both read the layer's input and add to it together
    /// (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_parallel_residual: Option<bool>,
    /// GPT-NeoX's LayerNorm epsilon (BLOOM: `layer_norm_epsilon`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_norm_eps: Option<f64>,
    /// BLOOM: the residual is the normed input instead of the input (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_residual_connection_post_layernorm: Option<bool>,
    /// Falcon's fields: its own names of the MLP activation, width and biases, and its layouts.
    #[serde(flatten)]
    pub falcon: HfFalconKeys,
    /// RoPE scaling.
    #[serde(default)]
    pub rope_scaling: Option<HfRopeScaling>,
    /// RoPE base and scaling as transformers 5 writes them (in place of `rope_theta` and
    /// `rope_scaling`), once for the model or per layer type (Gemma 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_parameters: Option<HfRopeParameters>,
    /// Longest context the model supports.
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    /// Phi-3: the pre-training context length, outside `rope_scaling` (where both are given,
    /// this one wins, as transformers reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_position_embeddings: Option<usize>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Whether the LM head reuses the token embeddings.
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    /// Whether q/k/v/o carry biases (Llama); Qwen2 always has q/k/v biases.
    #[serde(default)]
    pub attention_bias: Option<bool>,
    /// The sliding-window attention span (Mistral's): `None` when the key is absent (the
    /// family's default, [`Self::window_or`]), `Some(None)` when it is null (no window).
    #[serde(default, deserialize_with = "present")]
    pub sliding_window: Option<Option<usize>>,
    /// Beginning-of-sequence token id.
    #[serde(default)]
    pub bos_token_id: Option<serde_json::Value>,
    /// End-of-sequence token id(s).
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
    /// Activation of the MLP's gate (`silu`, or `gelu_pytorch_tanh` for Gemma).
    #[serde(default)]
    pub hidden_act: Option<String>,
    /// OPT's name for the MLP activation (`relu`); Falcon's is `activation`, read with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_function: Option<String>,
    /// OPT: whether every linear carries a bias (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_bias: Option<bool>,
    /// OPT: norms before attention and the MLP (default true; false is OPT-350m's post-norm
    /// layout, which is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub do_layer_norm_before: Option<bool>,
    /// OPT: width of the token embeddings, projected to `hidden_size` when it differs
    /// (OPT-350m; refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word_embed_proj_dim: Option<usize>,
    /// OPT: whether the LayerNorms have gains and biases (default true; false is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_norm_elementwise_affine: Option<bool>,
    /// OPT: whether the final LayerNorm is left out (default false; true is refused).
    #[serde(
        default,
        rename = "_remove_final_layer_norm",
        skip_serializing_if = "Option::is_none"
    )]
    pub remove_final_layer_norm: Option<bool>,
    /// Gemma's name for the MLP activation (takes precedence over `hidden_act`).
    #[serde(default)]
    pub hidden_activation: Option<String>,
    /// Gemma: queries are scaled by `query_pre_attn_scalar^-0.5` instead of `head_dim^-0.5`.
    #[serde(default)]
    pub query_pre_attn_scalar: Option<f64>,
    /// Gemma 3: the RoPE base of the sliding-window layers.
    #[serde(default)]
    pub rope_local_base_freq: Option<f64>,
    /// Llama, Granite, SmolLM3: whether the MLP's linears carry biases (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp_bias: Option<bool>,
    /// Granite: the factor of the token embeddings (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding_multiplier: Option<f64>,
    /// Granite: the factor of the attention and MLP outputs before each residual add
    /// (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residual_multiplier: Option<f64>,
    /// Granite: the factor of the attention scores `q·k` (default 1, not `head_dim^-0.5`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_multiplier: Option<f64>,
    /// Granite: the divisor of the logits (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logits_scaling: Option<f64>,
    /// SmolLM3: per layer, 1 where it rotates queries and keys, 0 where it does not (NoPE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_rope_layers: Option<Vec<u8>>,
    /// SmolLM3: without `no_rope_layers`, every `n`-th layer is NoPE (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_rope_layer_interval: Option<usize>,
    /// SmolLM3, Qwen2, Qwen3: whether `sliding_window` applies (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_sliding_window: Option<bool>,
    /// Qwen2, Qwen3: without `layer_types`, the layers from this one on slide (default 28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_window_layers: Option<usize>,
    /// OLMo: queries, keys and values are clamped to `±clip_qkv` after their projections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip_qkv: Option<f64>,
    /// Cohere: the factor of the logits (default 0.0625).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_scale: Option<f64>,
    /// Cohere: per-head LayerNorms of the queries and keys (Command R+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_qk_norm: Option<bool>,
    /// Mixtral: experts per layer (and Qwen3-MoE's, as transformers 5 writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_local_experts: Option<usize>,
    /// Mixtral: experts each token goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts_per_tok: Option<usize>,
    /// Qwen3-MoE, OLMoE: experts per layer (transformers 5 writes Qwen3-MoE's as
    /// `num_local_experts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts: Option<usize>,
    /// Qwen3-MoE, Qwen2-MoE: each expert's MLP width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_intermediate_size: Option<usize>,
    /// Qwen2-MoE: the shared expert's MLP width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_expert_intermediate_size: Option<usize>,
    /// Granite MoE (shared), Granite 4.0: the width of the MLP every token goes through
    /// (`shared_mlp`; 0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_intermediate_size: Option<usize>,
    /// Granite 4.0: `rope`, or none (`nope`, null): then no layer rotates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_embedding_type: Option<String>,
    /// Qwen2-MoE: whether q, k and v carry biases (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qkv_bias: Option<bool>,
    /// Qwen3-MoE, OLMoE: whether the chosen experts' probabilities are renormalised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm_topk_prob: Option<bool>,
    /// Qwen3-MoE: every `n`-th layer has experts (default 1), unless in `mlp_only_layers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_sparse_step: Option<usize>,
    /// Qwen3-MoE: the layers with a dense MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp_only_layers: Option<Vec<usize>>,
    /// GLM-4.5 (DeepSeek-V3's keys): routed experts per layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_routed_experts: Option<usize>,
    /// GLM-4.5: shared experts, one MLP `n_shared_experts · moe_intermediate_size` wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_shared_experts: Option<usize>,
    /// GLM-4.5: the factor of the routing weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed_scaling_factor: Option<f64>,
    /// GLM-4.5: groups of experts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_group: Option<usize>,
    /// GLM-4.5: the groups a token's experts come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_group: Option<usize>,
    /// GLM-4.5: the first layers with a dense MLP instead of experts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_k_dense_replace: Option<usize>,
    /// DeepSeek: the queries' latent width; `Some(None)` where it is null (queries projected
    /// directly, DeepSeek-V2-Lite), `None` where absent.
    #[serde(default, deserialize_with = "present")]
    pub q_lora_rank: Option<Option<usize>>,
    /// DeepSeek: the keys' and values' latent width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_lora_rank: Option<usize>,
    /// DeepSeek: a head's query and key dimensions without position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qk_nope_head_dim: Option<usize>,
    /// DeepSeek: a head's rotated query and key dimensions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qk_rope_head_dim: Option<usize>,
    /// DeepSeek: a head's value width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v_head_dim: Option<usize>,
    /// DeepSeek-V2: `greedy` or `group_limited_greedy` routing (V3's `noaux_tc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_method: Option<String>,
    /// DeepSeek: `softmax` (V2) or `sigmoid` (V3) router scores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring_func: Option<String>,
    /// DeepSeek-V3: whether rotated dimensions pair up as neighbours (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_interleave: Option<bool>,
    /// GPT-OSS: the clamp of its experts' gate and up projections (default 7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swiglu_limit: Option<f64>,
    /// GPT-OSS: the gain inside its experts' sigmoid (default 1.702).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swiglu_alpha: Option<f64>,
    /// Gemma 3: `sliding_attention` or `full_attention` per layer.
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    /// Gemma 3 (older configs): every `n`-th layer attends in full, the others slide;
    /// EXAONE 4 writes it as letters, `"LLLG"` for 4 ([`pattern_period`]).
    #[serde(
        default,
        alias = "_sliding_window_pattern",
        deserialize_with = "pattern_period"
    )]
    pub sliding_window_pattern: Option<usize>,
    /// Gemma: soft-capping of the final logits, `cap · tanh(logit / cap)`: `None` when the
    /// key is absent (the family's default), `Some(None)` when it is null (no capping).
    #[serde(default, deserialize_with = "present")]
    pub final_logit_softcapping: Option<Option<f64>>,
    /// Gemma: soft-capping of the attention scores, as `final_logit_softcapping`.
    #[serde(default, deserialize_with = "present")]
    pub attn_logit_softcapping: Option<Option<f64>>,
    /// Gemma 3 as an encoder (EmbeddingGemma): attention in both directions (unsupported).
    #[serde(default)]
    pub use_bidirectional_attention: Option<bool>,
    /// Llama 4: the width of the dense layers' MLP (the experts' is `intermediate_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intermediate_size_mlp: Option<usize>,
    /// Llama 4: every `n`-th layer has experts (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interleave_moe_layer_step: Option<usize>,
    /// Llama 4: the layers with experts, where given (else from the step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_layers: Option<Vec<usize>>,
    /// Llama 4: positions per chunk of the chunked layers: `None` when the key is absent (8192),
    /// `Some(None)` when it is null (no chunks).
    #[serde(default, deserialize_with = "present")]
    pub attention_chunk_size: Option<Option<usize>>,
    /// Llama 4: whether the NoPE layers' queries take a temperature by position (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attn_temperature_tuning: Option<bool>,
    /// Llama 4: positions per step of that temperature (default 8192).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_scale: Option<f64>,
    /// Llama 4: the temperature's growth per step (default 0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attn_scale: Option<f64>,
}

/// `rope_parameters` as transformers 5 writes it: one set for the model, or one per layer type
/// (`full_attention`, `sliding_attention`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HfRopeParameters {
    /// One set per layer type.
    PerLayerType(std::collections::BTreeMap<String, HfRopeScaling>),
    /// One set for every layer.
    Model(Box<HfRopeScaling>),
}

impl HfRopeParameters {
    /// The parameters of the full-attention layers (or of every layer).
    pub fn global(&self) -> Option<&HfRopeScaling> {
        match self {
            HfRopeParameters::Model(p) => Some(p.as_ref()),
            HfRopeParameters::PerLayerType(map) => map.get("full_attention"),
        }
    }

    /// The parameters of the sliding-window layers, when given per layer type.
    pub fn local(&self) -> Option<&HfRopeScaling> {
        match self {
            HfRopeParameters::Model(_) => None,
            HfRopeParameters::PerLayerType(map) => map.get("sliding_attention"),
        }
    }
}

impl HfLlamaConfig {

    /// The RoPE scaling the config gives: `rope_scaling`, else `rope_parameters` (its
    /// full-attention layers' where it is given per layer type); `None` where it gives neither.
    pub fn given_rope_scaling(&self) -> Option<&HfRopeScaling> {
        self.rope_scaling.as_ref().or(self
            .rope_parameters
            .as_ref()
            .and_then(HfRopeParameters::global))
    }

    /// The model's RoPE base: `rope_theta` (or GPT-NeoX's `rotary_emb_base`), else that of
    /// `rope_parameters` (its full-attention layers' where it is given per layer type), else
    /// `default` (the family's). Not yet checked.
    pub fn rope_base(&self, default: f64) -> f64 {
        self.rope_theta
            .or(self.rotary_emb_base)
            .or_else(|| {
                self.rope_parameters
                    .as_ref()
                    .and_then(HfRopeParameters::global)
                    .and_then(|p| p.rope_theta)
            })
            .unwrap_or(default)
    }

    /// The MLP activation the config names (`hidden_activation`, else `hidden_act`, else
    /// `activation_function`), `None` when it names none.
    pub fn activation_name(&self) -> Option<&str> {
        self.hidden_activation
            .as_deref()
            .or(self.hidden_act.as_deref())
            .or(self.activation_function.as_deref())
            .or(self.falcon.activation.as_deref())
    }

    /// The sliding window `sliding_window` gives: `default` where the key is absent (the window
    /// the family's config class defaults to: 4096 for `MistralConfig`, none for most), `None`
    /// where it is null.
    pub fn window_or(&self, default: Option<usize>) -> Option<usize> {
        self.sliding_window.unwrap_or(default)
    }
}

/// Deserialises a key that is present, null or not, as `Some` (absent keys take the field's
/// default, `None`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// Deserialises `sliding_window_pattern` as the period of the full layers: a count (Gemma 3's
/// every `n`-th layer), or EXAONE 4's letters, local layers (`L`) then the one global (`G`):
/// `"LLLG"` is 4. Any other string is an error that shows it.
fn pattern_period<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Pattern {
        Count(usize),
        Letters(String),
    }
    match Option::<Pattern>::deserialize(d)? {
        None => Ok(None),
        Some(Pattern::Count(n)) => Ok(Some(n)),
        Some(Pattern::Letters(letters)) => match letters.strip_suffix('G') {
            Some(local) if local.chars().all(|c| c == 'L') => Ok(Some(letters.len())),
            _ => Err(serde::de::Error::custom(format!(
                "sliding_window_pattern `{letters}` is not local layers (`L`) then one global \
                 (`G`), e.g. `LLLG`"
            ))),
        },
    }
}


/// A [`ConfigError::Invalid`] for `key`.
pub(crate) fn invalid(key: &str, problem: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        problem,
    }
}

/// `value` where it is a finite positive number, else a [`ConfigError::Invalid`] for `key`.
pub(crate) fn positive_number(key: &str, value: f64) -> Result<f64, ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(invalid(key, format!("must be positive, got {value}")))
    }
}

pub(crate) fn positive(key: &str, value: usize) -> Result<(), ConfigError> {
    if value == 0 {
        Err(invalid(key, "must be positive, got 0".to_string()))
    } else {
        Ok(())
    }
}

/// transformers' `get_mscale` (`yarn_get_mscale`): `0.1 · m · ln(scale) + 1` above a scale of
/// 1, else 1.
pub(crate) fn yarn_mscale(scale: f64, m: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * m * scale.ln() + 1.0
    }
}

/// How rotary frequencies are rescaled for long contexts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Positions divided by `factor`.
    Linear {
        /// Divisor of every frequency.
        factor: f64,
    },
    /// Llama-3.1/3.2 frequency-dependent scaling.
    Llama3 {
        /// Divisor of the low frequencies.
        factor: f64,
        /// Wavelengths above `original / low_freq_factor` are fully scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// Pre-training context length.
        original_max_position_embeddings: usize,
    },
    /// Per-frequency divisors (GGUF's `rope_freqs.weight`, one per rotated pair).
    Factors(Vec<f32>),
    /// YaRN (Peng et al. 2023, as transformers computes it): the frequencies blend from kept
    /// (fast, past `beta_fast` rotations over the original context) to divided by `factor`
    /// (slow, under `beta_slow`) along a linear ramp, and the cosines and sines are multiplied
    /// by `attention_factor`.
    Yarn {
        /// Divisor of the slow frequencies.
        factor: f64,
        /// Pre-training context length.
        original_max_position_embeddings: usize,
        /// Rotations above which a dimension keeps its frequency.
        beta_fast: f64,
        /// Rotations below which a dimension is fully divided.
        beta_slow: f64,
        /// The factor of the cosines and sines.
        attention_factor: f64,
        /// Whether the ramp's ends are rounded out to whole dimensions.
        truncate: bool,
    },
    /// LongRoPE (Phi-3's 128k models, Phi-3.5, Phi-4-mini; as transformers computes it): each
    /// rotated pair's frequency divided by a factor of its own, from `short_factor` while a run's
    /// last position is within `original_max_position_embeddings` and from `long_factor` past
    /// it, and the cosines and sines multiplied by `attention_factor`.
    LongRope {
        /// Divisors within the pre-training context, one per rotated pair.
        short_factor: Vec<f64>,
        /// Divisors past it, one per rotated pair.
        long_factor: Vec<f64>,
        /// The context extension the factors were fitted for (what the attention factor
        /// derives from).
        factor: f64,
        /// Pre-training context length: runs longer than this take the long factors.
        original_max_position_embeddings: usize,
        /// The factor of the cosines and sines.
        attention_factor: f64,
    },
}

/// The resolved configuration of a Llama-family decoder: every default applied, every value checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaConfig {
    /// Decoder family.
    pub architecture: Architecture,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads.
    pub num_key_value_heads: usize,
    /// Per-head width.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base.
    pub rope_theta: f64,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
    /// Longest context the model supports.
    pub max_position_embeddings: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Whether the LM head reuses the token embeddings.
    pub tie_word_embeddings: bool,
    /// Whether q/k/v projections carry a bias.
    pub qkv_bias: bool,
    /// Whether the output projection carries a bias.
    pub o_bias: bool,
    /// Mistral sliding-window span, when the model uses one.
    pub sliding_window: Option<usize>,
    /// Whether each query and key head is RMS-normalised before RoPE (Qwen3's `q_norm`,
    /// `k_norm`).
    #[serde(default)]
    pub qk_norm: bool,
    /// Beginning-of-sequence token id.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token id.
    pub eos_token_id: Option<u32>,
    /// What the family's layer adds to Llama's (Gemma's norms, activation, embedding scale,
    /// interleaved local attention); the default for Llama's own layer.
    #[serde(default, skip_serializing_if = "DecoderExtras::is_llama")]
    pub extras: DecoderExtras,
}

impl LlamaConfig {
    /// The scaling as `config.json`'s `rope_scaling` writes it (`null` without one).
    pub fn rope_scaling_json(&self) -> serde_json::Value {
        match &self.rope_scaling {
            RopeScaling::None | RopeScaling::Factors(_) => serde_json::Value::Null,
            RopeScaling::Linear { factor } => {
                serde_json::json!({ "rope_type": "linear", "factor": factor })
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => serde_json::json!({
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor,
                "original_max_position_embeddings": original_max_position_embeddings,
            }),
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                attention_factor,
                truncate,
            } => serde_json::json!({
                "rope_type": "yarn",
                "factor": factor,
                "original_max_position_embeddings": original_max_position_embeddings,
                "beta_fast": beta_fast,
                "beta_slow": beta_slow,
                "attention_factor": attention_factor,
                "truncate": truncate,
            }),
            RopeScaling::LongRope {
                short_factor,
                long_factor,
                factor,
                original_max_position_embeddings,
                attention_factor,
            } => serde_json::json!({
                "rope_type": "longrope",
                "short_factor": short_factor,
                "long_factor": long_factor,
                "factor": factor,
                "original_max_position_embeddings": original_max_position_embeddings,
                "attention_factor": attention_factor,
            }),
        }
    }

    /// Longest window the model runs: `max_position_embeddings` (what the gate clamps to). A
    /// sliding window limits what each position sees, not the window: Phi-3-mini's 2047 must
    /// not refuse the paper's 2048-token windows, and transformers runs them.
    pub fn context_limit(&self) -> usize {
        self.max_position_embeddings
    }

    /// The output width of the decoder linear `name` (relative to the layer, e.g.
    /// `self_attn.k_proj`), `None` for a name that is not one.
    pub fn linear_outputs(&self, name: &str) -> Option<usize> {
        Some(match name {
            "self_attn.q_proj" => self.num_attention_heads * self.head_dim,
            "self_attn.k_proj" | "self_attn.v_proj" => self.num_key_value_heads * self.head_dim,
            "self_attn.o_proj" | "mlp.down_proj" | "mlp.shared_expert.down_proj" => {
                self.hidden_size
            }
            "mlp.gate_proj" | "mlp.up_proj" => self.intermediate_size,
            "mlp.shared_expert.gate_proj" | "mlp.shared_expert.up_proj" => {
                self.extras.experts?.shared?
            }
            _ => return None,
        })
    }

    /// The shape in which a checkpoint stores the `width` gains of the norm `name` (without
    /// `.weight`): `[width]`, or one row per head for Cohere's q/k norms.
    pub fn norm_shape(&self, name: &str, width: usize) -> Vec<usize> {
        let per_head = name.ends_with("self_attn.q_norm") || name.ends_with("self_attn.k_norm");
        if per_head && self.extras.qk_norm_per_head_gains {
            vec![width / self.head_dim, self.head_dim]
        } else {
            vec![width]
        }
    }

    /// Number of query heads served by each key/value head.
    pub fn kv_groups(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }

    /// Whether layer `i` is one of Gemma 3's sliding (local) layers.
    pub(crate) fn is_local(&self, i: usize) -> bool {
        self.extras
            .local_attention
            .as_ref()
            .is_some_and(|local| local.layers.get(i).copied().unwrap_or(false))
    }

    /// The sliding window of layer `i`'s attention: Gemma 3's local window on its sliding
    /// layers, else the model's `sliding_window` (Mistral, Phi-3).
    pub fn layer_window(&self, i: usize) -> Option<usize> {
        match &self.extras.local_attention {
            Some(local) if self.is_local(i) => Some(local.window),
            _ => self.sliding_window,
        }
    }

    /// The factor of the model's rotary cosines and sines: YaRN's or LongRoPE's attention
    /// factor, else 1.
    pub fn rope_attention_factor(&self) -> f32 {
        match self.rope_scaling {
            RopeScaling::Yarn {
                attention_factor, ..
            }
            | RopeScaling::LongRope {
                attention_factor, ..
            } => attention_factor as f32,
            _ => 1.0,
        }
    }

    /// The dimensions of each head that rotate: the first `rotary_dim`, all by default.
    pub fn rotary_dim(&self) -> usize {
        self.extras.rotary_dim.unwrap_or(self.head_dim)
    }

    /// The share of each head's dimensions that rotate, as a config writes it
    /// (`rotary_pct`, `partial_rotary_factor`): the smallest `f` with
    /// `int(head_dim · f) == rotary_dim`, as transformers reads it back (`rotary / head_dim`
    /// alone can fall an ulp short, and truncate to one dimension fewer).
    pub fn rotary_factor(&self) -> f64 {
        let (rotary, head_dim) = (self.rotary_dim() as f64, self.head_dim as f64);
        let mut factor = rotary / head_dim;
        while head_dim * factor < rotary {
            factor = f64::from_bits(factor.to_bits() + 1);
        }
        factor
    }

    /// The factor of the attention scores `q·k` where the family sets one
    /// (`query_pre_attn_scalar^-0.5`, Gemma); `None` for the usual `head_dim^-0.5`.
    pub fn query_scale(&self) -> Option<f64> {
        match self.extras.multipliers {
            Some(m) => Some(m.attention),
            None => self
                .extras
                .query_pre_attn_scalar
                .map(|scalar| 1.0 / scalar.sqrt()),
        }
    }

    /// The factor of the attention and MLP outputs before each residual add (Granite's
    /// `residual_multiplier`), when there is one.
    pub fn residual_scale(&self) -> Option<f32> {
        self.extras.multipliers.map(|m| m.residual as f32)
    }

    /// How the logits are scaled: times Cohere's `logit_scale`, over Granite's
    /// `logits_scaling`; `None` where they are not.
    pub fn logit_scale(&self) -> Option<LogitScale> {
        match self.extras.logit_scale {
            Some(s) => Some(LogitScale::Times(s as f32)),
            None => self
                .extras
                .multipliers
                .map(|m| LogitScale::Over(m.logits as f32)),
        }
    }

    /// Whether queries and keys are rotated: not where positions are learned (OPT) or
    /// enter as ALiBi's bias (BLOOM).
    pub fn rotary(&self) -> bool {
        !(self.extras.learned_positions || self.extras.alibi)
    }

    /// The experts of layer `i`: the model's, unless `i` is one of the first layers with a
    /// dense MLP ([`crate::model::arch::Experts::first_dense_layers`]) or one between the layers
    /// with experts ([`crate::model::arch::Experts::layer_step`]); `None` for a dense layer.
    pub fn layer_experts(&self, i: usize) -> Option<crate::model::arch::Experts> {
        self.extras.experts.filter(|experts| experts.in_layer(i))
    }

    /// Whether layer `i` rotates its queries and keys: the model does, and the layer is not
    /// one of SmolLM3's NoPE layers.
    pub fn layer_rotary(&self, i: usize) -> bool {
        let nope = self
            .extras
            .nope_layers
            .as_ref()
            .is_some_and(|nope| nope.get(i).copied().unwrap_or(false));
        self.rotary() && !nope
    }

    /// The factor of the token embeddings, `√hidden` in f32 (Gemma) or Granite's
    /// `embedding_multiplier`, when there is one.
    pub fn embed_scale(&self) -> Option<f32> {
        self.extras
            .scale_embeddings
            .then(|| (self.hidden_size as f64).sqrt() as f32)
            .or(self.extras.multipliers.map(|m| m.embedding as f32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smollm_json() -> &'static str {
        r#"{"architectures":["LlamaForCausalLM"],"hidden_size":576,"intermediate_size":1536,
            "num_hidden_layers":30,"num_attention_heads":9,"num_key_value_heads":3,"head_dim":64,
            "rms_norm_eps":1e-5,"rope_theta":100000.0,"vocab_size":49152,"tie_word_embeddings":true,
            "max_position_embeddings":8192,"bos_token_id":1,"eos_token_id":2,"unknown_key":3}"#
    }

    #[test]
    fn resolves_smollm_config() {
        let c = HfLlamaConfig::from_json(smollm_json())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(c.architecture, Architecture::Llama);
        assert_eq!(c.kv_groups(), 3);
        assert_eq!(c.head_dim, 64);
        assert!(c.tie_word_embeddings && !c.qkv_bias);
        assert_eq!(c.rope_scaling, RopeScaling::None);
        assert_eq!(c.eos_token_id, Some(2));
    }

    #[test]
    fn qwen2_has_qkv_bias_and_llama3_scaling_parses() {
        let json = r#"{"architectures":["Qwen2ForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,"vocab_size":10,
            "rope_scaling":{"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,
            "high_freq_factor":4.0,"original_max_position_embeddings":8192}}"#;
        let c = HfLlamaConfig::from_json(json).unwrap().resolve().unwrap();
        assert!(c.qkv_bias && !c.o_bias);
        assert_eq!(c.head_dim, 4);
        assert!(matches!(c.rope_scaling, RopeScaling::Llama3 { factor, .. } if factor == 32.0));
    }

    /// transformers 5 writes the RoPE base and scaling as `rope_parameters`; read as if they
    /// were 500000 and 100000 it would have been the default 10000 (found on a GPU machine: a
    /// folder saved by transformers 5.17 evaluated 2.4 % away from PyTorch's perplexity).
    #[test]
    fn transformers_5_rope_parameters_give_the_base_and_the_scaling() {
        let json = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"vocab_size":10,
            "rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":8.0,
            "low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}}"#;
        let c = HfLlamaConfig::from_json(json).unwrap().resolve().unwrap();
        assert_eq!(c.rope_theta, 500000.0);
        assert!(matches!(c.rope_scaling, RopeScaling::Llama3 { factor, .. } if factor == 8.0));
        let plain = smollm_json().replace(
            r#""rope_theta":100000.0"#,
            r#""rope_parameters":{"rope_type":"default","rope_theta":100000.0}"#,
        );
        let c = HfLlamaConfig::from_json(&plain).unwrap().resolve().unwrap();
        assert_eq!(c.rope_theta, 100000.0);
        assert_eq!(c.rope_scaling, RopeScaling::None);
    }

    #[test]
    fn unknown_architecture_is_refused_by_name() {
        let json = r#"{"architectures":["MptForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"vocab_size":10}"#;
        let err = HfLlamaConfig::from_json(json)
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(err.to_string().contains("`MptForCausalLM`"), "{err}");
    }

    #[test]
    fn kv_heads_must_divide_heads() {
        let json = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":12,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":2,"vocab_size":10}"#;
        let err = HfLlamaConfig::from_json(json)
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(err.to_string().contains("num_key_value_heads"), "{err}");
    }

    #[test]
    fn a_sliding_window_does_not_limit_the_context() {
        let json = r#"{"architectures":["MistralForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,"vocab_size":10,
            "max_position_embeddings":32768,"sliding_window":4096}"#;
        let c = HfLlamaConfig::from_json(json).unwrap().resolve().unwrap();
        assert_eq!(c.context_limit(), 32768);
        let c = HfLlamaConfig::from_json(smollm_json())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(c.context_limit(), 8192);
    }

    #[test]
    fn hf_json_round_trips() {
        let c = HfLlamaConfig::from_json(smollm_json())
            .unwrap()
            .resolve()
            .unwrap();
        let back = HfLlamaConfig::from_json(&c.to_hf_json().to_string())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(c, back);
    }

    /// 30 of 44 dimensions: `30 / 44 · 44` is 29.999…, which `int()` truncates to 29.
    #[test]
    fn the_written_rotary_factor_reads_back_to_the_same_dimensions() {
        let mut c = HfLlamaConfig::from_json(smollm_json())
            .unwrap()
            .resolve()
            .unwrap();
        let head_dim = std::hint::black_box(44.0f64);
        assert!(head_dim * (30.0 / head_dim) < 30.0);
        c.head_dim = 44;
        for rotary in (2..=44).step_by(2) {
            c.extras.rotary_dim = Some(rotary);
            assert_eq!((44.0 * c.rotary_factor()) as usize, rotary);
        }
    }
}
