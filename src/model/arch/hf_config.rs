//! A Hugging Face `config.json` as a plain serde struct ([`HfLlamaConfig`]): the keys every
//! family's config class may hold, read as they are written; resolving them into a
//! [`super::LlamaConfig`] is the family's ([`crate::model::family`]).

use serde::{Deserialize, Serialize};

use super::attention::HfChunkedKeys;
use super::attention::HfLatentKeys;
use super::config::{invalid, ConfigError};
use super::experts::HfExpertKeys;
use super::extras::HfMultiplierKeys;

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
    /// Phi, StableLM: the share of each head's dimensions that rotate, outside
    /// `rope_parameters` (transformers 4's configs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_rotary_factor: Option<f64>,
    /// StableLM: whether q, k and v carry biases (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_qkv_bias: Option<bool>,
    /// StarCoder2: whether every linear carries a bias (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_bias: Option<bool>,
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
    /// Gemma's own keys ([`HfGemmaKeys`]).
    #[serde(flatten)]
    pub gemma: HfGemmaKeys,
    /// GPT-Neo's own keys ([`HfGptNeoKeys`]).
    #[serde(flatten)]
    pub gpt_neo: HfGptNeoKeys,
    /// GPT-2's own keys ([`HfGpt2Keys`]).
    #[serde(flatten)]
    pub gpt2: HfGpt2Keys,
    /// OPT's own keys ([`HfOptKeys`]).
    #[serde(flatten)]
    pub opt: HfOptKeys,
    /// Granite's factors ([`HfMultiplierKeys`]).
    #[serde(flatten)]
    pub multipliers: HfMultiplierKeys,
    /// Llama 4's chunked attention keys ([`HfChunkedKeys`]).
    #[serde(flatten)]
    pub chunked: HfChunkedKeys,
    /// DeepSeek's latent attention keys ([`HfLatentKeys`]).
    #[serde(flatten)]
    pub latent: HfLatentKeys,
    /// The keys of mixtures of experts ([`HfExpertKeys`]).
    #[serde(flatten)]
    pub experts: HfExpertKeys,
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
    #[serde(default, deserialize_with = "super::keys::present")]
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
    /// Gemma's name for the MLP activation (takes precedence over `hidden_act`).
    #[serde(default)]
    pub hidden_activation: Option<String>,
    /// Llama, Granite, SmolLM3: whether the MLP's linears carry biases (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp_bias: Option<bool>,
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
    /// Cohere: per-head LayerNorms of the queries and keys (Command R+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_qk_norm: Option<bool>,
    /// Qwen2-MoE: whether q, k and v carry biases (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qkv_bias: Option<bool>,
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
    /// Every other key of the file, where a family reads the keys it alone has
    /// ([`Self::own_key`]): GPT-NeoX's `rotary_pct`, GPT-J's `rotary_dim`, OLMo's `clip_qkv`,
    /// Cohere's `logit_scale`, Granite 4.0's `position_embedding_type`. A family's own key needs
    /// no field here.
    #[serde(flatten)]
    pub own_keys: serde_json::Map<String, serde_json::Value>,
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
    /// A key only the config's family reads, as a `T`; `None` where the file leaves it out or
    /// writes null. A value of another type is an error naming the key.
    pub fn own_key<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, ConfigError> {
        match self.own_keys.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(value) => T::deserialize(value)
                .map(Some)
                .map_err(|e| invalid(key, format!("is {value}: {e}"))),
        }
    }

    /// Sets (or, with `None`, leaves out) a key only the config's family reads: what a GGUF
    /// file says under the family's own name.
    pub fn set_own_key(&mut self, key: &str, value: Option<impl Into<serde_json::Value>>) {
        match value {
            Some(value) => self.own_keys.insert(key.to_string(), value.into()),
            None => self.own_keys.remove(key),
        };
    }

    /// `hidden_size / num_attention_heads`: the head width where a config gives none (0 heads
    /// read as 1; resolution refuses them).
    pub fn hidden_per_head(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

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

/// OPT's `config.json` keys (`OPTConfig`): its biases, norm placement, projection of the
/// embeddings and MLP width; flattened into [`HfLlamaConfig`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HfOptKeys {
    /// OPT's name for the width of the MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ffn_dim: Option<usize>,
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
}

/// GPT-2's `config.json` keys of its attention's scaling (`GPT2Config`); flattened into
/// [`HfLlamaConfig`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HfGpt2Keys {
    /// GPT-2, GPT-BigCode: whether attention scores are scaled by `head_dim^-0.5` (default
    /// true; false is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_attn_weights: Option<bool>,
    /// GPT-2: whether each layer's scores are also divided by its index + 1 (default false;
    /// true is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_attn_by_inverse_layer_idx: Option<bool>,
}

/// GPT-Neo's `config.json` keys of its alternating global and local layers (`GPTNeoConfig`);
/// flattened into [`HfLlamaConfig`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HfGptNeoKeys {
    /// GPT-Neo: which layers attend globally and which locally, `[[["global", "local"], 12]]`
    /// (the pattern, repeated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_types: Option<serde_json::Value>,
    /// GPT-Neo: the span of its local layers' attention (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_size: Option<usize>,
}

/// Gemma 2's and 3's `config.json` keys: the query scalar, the soft-caps, the local layers'
/// RoPE base and bidirectional attention; flattened into [`HfLlamaConfig`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HfGemmaKeys {
    /// Gemma: queries are scaled by `query_pre_attn_scalar^-0.5` instead of `head_dim^-0.5`.
    #[serde(default)]
    pub query_pre_attn_scalar: Option<f64>,
    /// Gemma 3: the RoPE base of the sliding-window layers.
    #[serde(default)]
    pub rope_local_base_freq: Option<f64>,
    /// Gemma: soft-capping of the final logits, `cap · tanh(logit / cap)`: `None` when the
    /// key is absent (the family's default), `Some(None)` when it is null (no capping).
    #[serde(default, deserialize_with = "super::keys::present")]
    pub final_logit_softcapping: Option<Option<f64>>,
    /// Gemma: soft-capping of the attention scores, as `final_logit_softcapping`.
    #[serde(default, deserialize_with = "super::keys::present")]
    pub attn_logit_softcapping: Option<Option<f64>>,
    /// Gemma 3 as an encoder (EmbeddingGemma): attention in both directions (unsupported).
    #[serde(default)]
    pub use_bidirectional_attention: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(own: &str) -> HfLlamaConfig {
        serde_json::from_str(&format!(
            r#"{{"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,
            "vocab_size":16,"max_window_layers":3{own}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_family_reads_its_own_keys_by_name_and_type() {
        let c = config(r#","rotary_pct":0.25,"clip_qkv":null,"logit_scale":"big""#);
        assert_eq!(c.own_key::<f64>("rotary_pct").unwrap(), Some(0.25));
        assert_eq!(c.own_key::<f64>("clip_qkv").unwrap(), None, "null");
        assert_eq!(c.own_key::<usize>("rotary_dim").unwrap(), None, "absent");
        let e = c.own_key::<f64>("logit_scale").unwrap_err().to_string();
        assert!(e.contains("`logit_scale`") && e.contains("\"big\""), "{e}");
        // A key some field reads is not among the family's own.
        assert_eq!(c.max_window_layers, Some(3));
        assert!(!c.own_keys.contains_key("max_window_layers"));
    }

    #[test]
    fn a_gguf_value_is_set_under_the_familys_key_or_left_out() {
        let mut c = config("");
        c.set_own_key("clip_qkv", Some(8.0));
        assert_eq!(c.own_key::<f64>("clip_qkv").unwrap(), Some(8.0));
        c.set_own_key("clip_qkv", None::<f64>);
        assert_eq!(c.own_key::<f64>("clip_qkv").unwrap(), None);
    }
}
