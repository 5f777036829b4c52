//! The resolved, option-free [`LlamaConfig`] the model is built from, its RoPE scaling and the
//! errors of reading one.
//!
//! Every family shares one decoder shape; what differs (q/k/v bias, sliding window, RoPE
//! scaling, tied embeddings) is decided once, by the family ([`crate::model::family`], from a
//! [`super::HfLlamaConfig`]), and made explicit here so the model code never guesses.

use serde::{Deserialize, Serialize};

use super::architecture::Architecture;
use super::attention::{AttentionSettings, Residual};
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
    /// Layer `i`'s attention settings: its heads, window, scale, soft-cap, rotation and bias.
    pub fn attention_settings(&self, i: usize) -> AttentionSettings {
        AttentionSettings {
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            sliding_window: self.layer_window(i),
            scale: self.query_scale(),
            softcap: self.extras.attn_softcap,
            inv_freq: self.layer_inv_freq(i),
            rotary: self.layer_rotary(i),
            interleaved: self.extras.interleaved_rotary,
            alibi: self.alibi_slopes(),
            clip_qkv: self.extras.clip_qkv.map(|c| c as f32),
        }
    }

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

    /// How every layer adds its blocks to the residual stream: side by side (GPT-NeoX's
    /// parallel residual), each output times Granite's `residual_multiplier` where set.
    pub fn residual(&self) -> Residual {
        Residual {
            parallel: self.extras.parallel_residual,
            scale: self.extras.multipliers.map(|m| m.residual as f32),
        }
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

    /// This config with `count` experts in each layer that has them (a model whose experts
    /// were pruned); the same config where it has no experts.
    pub fn with_expert_count(&self, count: usize) -> LlamaConfig {
        let mut config = self.clone();
        if let Some(experts) = &mut config.extras.experts {
            experts.count = count;
        }
        config
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
