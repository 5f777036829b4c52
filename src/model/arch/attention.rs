//! The settings of the attention variants a config describes: DeepSeek's latent attention and
//! Llama 4's chunked attention with its query temperature ([`crate::model::decoder`] runs them).

use burn::prelude::*;
use burn::tensor::FloatDType;
use serde::{Deserialize, Serialize};

/// The latent attention's widths and factors, as a DeepSeek config gives them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatentAttention {
    /// The queries' latent width (`q_lora_rank`); `None`: queries are projected directly.
    pub q_lora_rank: Option<usize>,
    /// The keys' and values' latent width (`kv_lora_rank`).
    pub kv_lora_rank: usize,
    /// The dimensions of a head's query and key without position (`qk_nope_head_dim`).
    pub qk_nope_head_dim: usize,
    /// The rotated dimensions of a head's query and of the shared key (`qk_rope_head_dim`).
    pub qk_rope_head_dim: usize,
    /// A head's value width (`v_head_dim`).
    pub v_head_dim: usize,
    /// YaRN's `mscale_all_dim` as the config gives it (0 or absent: none), kept for a saved
    /// copy.
    pub mscale_all_dim: Option<f64>,
    /// The factor of `q·k` where it is not `(qk_nope + qk_rope)^-0.5`: that times
    /// `(0.1 · mscale_all_dim · ln factor + 1)²` under a scaled RoPE.
    pub scale: Option<f64>,
    /// Whether the rotated dimensions pair up as neighbours (DeepSeek-V2's complex rotation,
    /// V3's `rope_interleave`) instead of as halves.
    pub interleaved: bool,
}

impl LatentAttention {
    /// A head's query and key width, `qk_nope_head_dim + qk_rope_head_dim`.
    pub fn qk_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }

    /// The parameters of one layer's latent attention's linears for a model `hidden` wide with
    /// `heads` heads, with their biases where `biased` (`q_a_proj`, `kv_a_proj_with_mqa` and
    /// `o_proj` carry them under `attention_bias`).
    pub fn linear_parameters(&self, hidden: usize, heads: usize, biased: bool) -> u64 {
        let (h, q, rope) = (hidden, heads * self.qk_head_dim(), self.qk_rope_head_dim);
        let kv_a = self.kv_lora_rank + rope;
        let queries = match self.q_lora_rank {
            None => h * q,
            Some(r) => h * r + r * q + if biased { r } else { 0 },
        };
        let kv = h * kv_a + self.kv_lora_rank * heads * self.kv_b_width();
        let out = heads * self.v_head_dim * h;
        let bias = if biased { kv_a + h } else { 0 };
        (queries + kv + out + bias) as u64
    }

    /// The gains of the two latent norms (`q_a_layernorm` where there is one, `kv_a_layernorm`).
    pub fn norm_parameters(&self) -> usize {
        self.q_lora_rank.unwrap_or(0) + self.kv_lora_rank
    }

    /// The rows of `kv_b_proj` per head: its unrotated key and its value.
    pub(crate) fn kv_b_width(&self) -> usize {
        self.qk_nope_head_dim + self.v_head_dim
    }
}

/// Llama 4's attention additions ([`crate::model::arch::DecoderExtras::llama4_attention`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Llama4Attention {
    /// Positions per chunk of the chunked layers (`attention_chunk_size`).
    pub chunk_size: usize,
    /// Per layer: `true` where it attends within chunks (`chunked_attention`).
    pub chunked_layers: Vec<bool>,
    /// Whether the rotating layers scale queries and keys to unit RMS after RoPE
    /// (`use_qk_norm`); the epsilon is the model's `rms_norm_eps`.
    pub unit_qk_norm: bool,
    /// The NoPE layers' query temperature (`attn_temperature_tuning`); `None` without it.
    pub temperature: Option<QueryTemperature>,
}

/// The temperature of a NoPE layer's queries (`floor_scale`, `attn_scale`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueryTemperature {
    /// Positions per step of the temperature (`floor_scale`).
    pub floor_scale: f64,
    /// The temperature's growth per step, on a log scale (`attn_scale`).
    pub attn_scale: f64,
}

impl QueryTemperature {
    /// The factor of the queries at position `p`, in f32 as transformers computes it:
    /// `log1p(floor((p + 1) / floor_scale)) · attn_scale + 1` (1 before `floor_scale − 1`).
    pub fn factor(self, p: usize) -> f32 {
        let steps = ((p as f32 + 1.0) / self.floor_scale as f32).floor();
        steps.ln_1p() * self.attn_scale as f32 + 1.0
    }

    /// `q` with each position's queries times its factor, multiplied in f32 and returned in
    /// `q`'s type; the queries are positions `offset, offset + 1, …`.
    ///
    /// # Shapes
    /// - `q`: `[batch, heads, seq, head_dim]` → same
    pub fn apply<B: Backend>(self, q: Tensor<B, 4>, offset: usize) -> Tensor<B, 4> {
        let seq = q.dims()[2];
        let factors: Vec<f32> = (offset..offset + seq).map(|p| self.factor(p)).collect();
        if factors.iter().all(|&f| f == 1.0) {
            return q;
        }
        let dtype = q.dtype();
        let factors = Tensor::<B, 1>::from_data(
            TensorData::new(factors, [seq]),
            (&q.device(), burn::tensor::DType::F32),
        )
        .reshape([1, 1, seq, 1]);
        (q.cast(FloatDType::F32) * factors).cast(dtype)
    }
}

/// How a layer adds its attention and MLP outputs to the residual stream, made once
/// ([`super::LlamaConfig::residual`]) and held whole by both paths.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Residual {
    /// Attention and MLP both read the layer's input and are added to it together
    /// (GPT-NeoX): `x + attn(norm(x)) + mlp(post_norm(x))`.
    pub parallel: bool,
    /// The factor of the attention and MLP outputs before each residual add (Granite).
    pub scale: Option<f32>,
}

/// How one layer's attention runs beside its weights: one description, made from the config
/// ([`super::LlamaConfig::attention_settings`]), that the decoder's generic path holds and
/// lends whole to the fused kernels.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AttentionSettings {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Per-head width.
    pub head_dim: usize,
    /// Each position attends to itself and the `window − 1` before it, when set (Mistral's
    /// `sliding_window`, as transformers masks it: key `j` is seen from query `i` iff
    /// `i − window < j ≤ i`).
    pub sliding_window: Option<usize>,
    /// The factor of `q·k` when it is not `head_dim^-0.5` (Gemma's `query_pre_attn_scalar`).
    pub scale: Option<f64>,
    /// Scaled scores `s` become `cap · tanh(s / cap)` before the mask (Gemma 2).
    pub softcap: Option<f64>,
    /// This layer's own rotary inverse frequencies, when they are not the model's (Gemma 3's
    /// sliding layers): the layer then rotates with tables of its own.
    pub inv_freq: Option<Vec<f32>>,
    /// Whether queries and keys are rotated (false where positions are learned, OPT, or
    /// enter as ALiBi's bias, BLOOM).
    pub rotary: bool,
    /// Whether rotated dimensions pair up as neighbours, `(2i, 2i + 1)`, instead of as the
    /// halves `(i, i + d/2)` (GLM's interleaved RoPE).
    pub interleaved: bool,
    /// ALiBi's slope of each query head, where positions enter as its bias of the scores
    /// (BLOOM).
    pub alibi: Option<Vec<f32>>,
    /// Queries, keys and values are clamped to `±clip` after their projections (OLMo).
    pub clip_qkv: Option<f32>,
}

/// DeepSeek's `config.json` keys of its latent attention ([`LatentAttention`]); flattened into
/// [`super::HfLlamaConfig`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HfLatentKeys {
    /// DeepSeek: the queries' latent width; `Some(None)` where it is null (queries projected
    /// directly, DeepSeek-V2-Lite), `None` where absent.
    #[serde(default, deserialize_with = "super::keys::present")]
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
    /// DeepSeek-V3: whether rotated dimensions pair up as neighbours (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_interleave: Option<bool>,
}

/// Llama 4's `config.json` keys of its chunked attention and query temperature
/// ([`Llama4Attention`]); flattened into [`super::HfLlamaConfig`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HfChunkedKeys {
    /// Llama 4: positions per chunk of the chunked layers: `None` when the key is absent (8192),
    /// `Some(None)` when it is null (no chunks).
    #[serde(default, deserialize_with = "super::keys::present")]
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
