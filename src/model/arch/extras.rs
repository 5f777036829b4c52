//! What a family's decoder layer adds to Llama's ([`DecoderExtras`]), with the activation,
//! local-attention and multiplier types it holds; [`crate::model::arch`] re-exports them.

use serde::{Deserialize, Serialize};

/// The MLP's gate activation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Activation {
    /// `silu(gate) · up` (SwiGLU; Llama, Qwen, Mistral, Phi-3).
    #[default]
    Silu,
    /// `gelu_tanh(gate) · up` (GeGLU with GELU's tanh approximation; Gemma).
    GeluTanh,
    /// `relu(x)` (OPT, whose MLP has no gate).
    Relu,
    /// `gelu(x) = x/2 · (1 + erf(x/√2))`, exact (GPT-NeoX, whose MLP has no gate).
    Gelu,
    /// `relu(x)²` (Nemotron, whose MLP has no gate).
    Relu2,
}

impl Activation {
    /// The name transformers gives it (`hidden_act`).
    pub fn hf_name(self) -> &'static str {
        match self {
            Activation::Silu => "silu",
            Activation::GeluTanh => "gelu_pytorch_tanh",
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
            Activation::Relu2 => "relu2",
        }
    }
}

/// Interleaved local and global attention (Gemma 2 and 3, OLMo 3, Cohere 2, Qwen2 and Qwen3
/// with `use_sliding_window`): the sliding layers see the last `window` positions and rotate
/// with their own RoPE base or the model's; the others attend in full.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalAttention {
    /// Keys a query of a sliding layer sees, itself included.
    pub window: usize,
    /// RoPE base of the sliding layers, unscaled (Gemma 3, OLMo 3); `None`: they rotate as
    /// the full layers do.
    pub rope_theta: Option<f64>,
    /// Per layer: `true` where it slides.
    pub layers: Vec<bool>,
}

impl LocalAttention {
    /// Per layer: `true` where it attends in full (the NoPE layers of Cohere 2 and EXAONE 4,
    /// where only the sliding ones rotate).
    pub fn full_layers(&self) -> Vec<bool> {
        self.layers.iter().map(|sliding| !sliding).collect()
    }
}

/// What a family's decoder layer adds to Llama's; every field's default is Llama's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DecoderExtras {
    /// The MLP's gate activation.
    #[serde(default)]
    pub activation: Activation,
    /// RMSNorm gains are stored as `w` and applied as `1 + w` (Gemma). The model holds
    /// `1 + w`, computed in f32 as transformers does; loading adds the one, saving takes it off.
    #[serde(default)]
    pub norm_offset: bool,
    /// The attention and MLP outputs pass through their own RMSNorm before the residual add
    /// (Gemma's `post_attention_layernorm`, `post_feedforward_layernorm`).
    #[serde(default)]
    pub sandwich_norms: bool,
    /// Token embeddings are multiplied by `√hidden` (in f32) before the first layer (Gemma).
    #[serde(default)]
    pub scale_embeddings: bool,
    /// Queries are scaled by `query_pre_attn_scalar^-0.5` instead of `head_dim^-0.5`.
    #[serde(default)]
    pub query_pre_attn_scalar: Option<f64>,
    /// Interleaved local and global attention.
    #[serde(default)]
    pub local_attention: Option<LocalAttention>,
    /// The norms are LayerNorms (centred, with a bias) instead of RMSNorms (OPT).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub layer_norm: bool,
    /// The LayerNorms carry no bias (Cohere's `CohereLayerNorm`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub layer_norm_without_bias: bool,
    /// The factor of the logits (Cohere's `logit_scale`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_scale: Option<f64>,
    /// The LayerNorms have no gain either (OLMo's `OlmoLayerNorm`): the checkpoint holds no
    /// norm tensors; the model holds gains of one, which a saved copy leaves out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub norms_without_gains: bool,
    /// Queries, keys and values are clamped to `±clip_qkv` after their projections (OLMo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip_qkv: Option<f64>,
    /// The MLP has no gate: `down(act(up(x)))` (OPT's `fc1`, `fc2`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ungated_mlp: bool,
    /// The MLP is a sparse mixture of experts, each a gated MLP (Mixtral).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<crate::model::arch::Experts>,
    /// The MLP's linears carry biases (OPT).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mlp_bias: bool,
    /// Positions are a learned table added to the token embeddings, read from row
    /// `position + 2` (OPT's offset; [`Self::position_offset`]), instead of RoPE.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learned_positions: bool,
    /// The learned position table holds position 0 in its first row (GPT-2, GPT-BigCode), not
    /// in OPT's third.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub positions_from_row_zero: bool,
    /// Attention scores `s` (after the query scale) become `cap · tanh(s / cap)` before the
    /// mask and softmax (Gemma 2's `attn_logit_softcapping`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attn_softcap: Option<f64>,
    /// Logits `l` become `cap · tanh(l / cap)` (Gemma 2's `final_logit_softcapping`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_softcap: Option<f64>,
    /// Attention and MLP both read the layer's input, through their own norms, and the layer
    /// returns `x + attn + mlp` (GPT-NeoX's `use_parallel_residual`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parallel_residual: bool,
    /// Only the first `rotary_dim` dimensions of each head rotate, the rest pass through
    /// (GPT-NeoX's `rotary_pct`); `None`: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_dim: Option<usize>,
    /// Positions enter as ALiBi's bias of the attention scores, `slope_h · key position` per
    /// head ([`crate::model::arch::alibi`]), instead of RoPE (BLOOM).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub alibi: bool,
    /// The token embeddings pass through a norm before the first layer (BLOOM's
    /// `word_embeddings_layernorm`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub embed_norm: bool,
    /// Attention and MLP read the same normed input (Falcon-7B's one `input_layernorm` with a
    /// parallel residual): the layer holds that norm twice, as its input and post-attention
    /// norms, so every path runs unchanged, and a saved copy writes it once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_norm: bool,
    /// The LM head carries a bias (Phi's `lm_head`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lm_head_bias: bool,
    /// The layer has no norms before attention and the MLP, which read the residual stream
    /// itself; its only norms are the output norms of `sandwich_norms` (OLMo 2).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub post_norms_only: bool,
    /// The q/k norms span all heads of a position, `[heads · head_dim]` and
    /// `[kv_heads · head_dim]` gains (OLMo 2), instead of one head's `[head_dim]` (Qwen3).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qk_norm_across_heads: bool,
    /// The q/k norms span all heads of a position with gains of their own per head, each
    /// head's statistics apart (`[heads, head_dim]` in the checkpoint; Cohere's
    /// `use_qk_norm`, LayerNorms without a bias).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qk_norm_per_head_gains: bool,
    /// Per layer: `true` where queries and keys are not rotated (SmolLM3's NoPE layers,
    /// `no_rope_layers` 0); `None`: every layer rotates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nope_layers: Option<Vec<bool>>,
    /// Rotated dimensions pair up as neighbours, `(2i, 2i + 1)`, instead of as halves (GLM).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interleaved_rotary: bool,
    /// Granite's factors: of the token embeddings, of the attention and MLP outputs before
    /// each residual add, of the attention scores (in place of `head_dim^-0.5`), and the
    /// divisor of the logits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multipliers: Option<Multipliers>,
    /// Each attention head has a learned sink logit in its softmax (GPT-OSS's
    /// `self_attn.sinks`, one per query head).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attention_sinks: bool,
    /// DeepSeek's multi-head latent attention in place of per-head q/k/v projections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent_attention: Option<crate::model::arch::LatentAttention>,
    /// Llama 4's chunked attention, unit-RMS queries and keys, and NoPE query temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llama4_attention: Option<crate::model::arch::Llama4Attention>,
}

/// Granite's factors ([`DecoderExtras::multipliers`]), each applied as transformers applies it
/// in f32: `embeddings · embedding`, `x + out · residual`, `q·k · attention`, `logits / logits`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Multipliers {
    /// The factor of the token embeddings (`embedding_multiplier`).
    pub embedding: f64,
    /// The factor of the attention and MLP outputs (`residual_multiplier`).
    pub residual: f64,
    /// The factor of the attention scores (`attention_multiplier`).
    pub attention: f64,
    /// The divisor of the logits (`logits_scaling`).
    pub logits: f64,
}

impl DecoderExtras {
    /// Whether these are Llama's (nothing added).
    pub fn is_llama(&self) -> bool {
        *self == DecoderExtras::default()
    }

    /// The row of the learned position table that holds position 0: 2 in OPT, 0 in GPT-2 and
    /// GPT-BigCode (and without a table).
    pub fn position_offset(&self) -> usize {
        if self.learned_positions && !self.positions_from_row_zero {
            2
        } else {
            0
        }
    }
}

/// How a head scales its logits, in f32 as transformers does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LogitScale {
    /// `l · s` (Cohere's `logit_scale`).
    Times(f32),
    /// `l / s` (Granite's `logits_scaling`).
    Over(f32),
}

impl LogitScale {
    /// `logit` scaled.
    pub fn apply(self, logit: f32) -> f32 {
        match self {
            LogitScale::Times(s) => logit * s,
            LogitScale::Over(s) => logit / s,
        }
    }
}

/// Granite's `config.json` factors ([`Multipliers`]); flattened into
/// [`super::HfLlamaConfig`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HfMultiplierKeys {
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
}
