//! The Llama-family decoder on Burn: embeddings, RMSNorm, rotary attention with grouped-query
//! heads and a causal mask, SwiGLU MLP, tied or untied LM head, optional q/k/v bias (Qwen2).
//!
//! Field names equal the Hugging Face checkpoint keys (`self_attn.q_proj`, `mlp.down_proj`,
//! `input_layernorm`, …) so layer paths in results read like Python Wanda's. Linear weights are
//! in Burn's `[in, out]` layout, the transpose of PyTorch's.

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::prelude::*;
use burn::tensor::activation::{gelu, relu, silu};
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::FloatDType;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::config::{Activation, LlamaConfig};
use super::family::FusedLinear;
use super::kernels::{
    kernels, linear_forward, project, project_all, HeadWeights, LayerWeights, LogitScale,
    ModelWeights, NormWeights, ATTENTION_BLOCK_BYTES,
};
use super::latent_attention::{LatentSelfAttention, SelfAttention};
use super::llama4_attention::{chunk_mask, chunk_start, unit_rms, QueryTemperature};
use super::{alibi, rope};

pub use super::kernels::LinearInput;
use super::moe::{SharedExpert, SparseMoe, CORRECTION, ROUTER, SHARED_EXPERT, SHARED_GATE};
use super::sink_attention::attention_with_sinks;

/// The attention sinks of a layer (GPT-OSS's), named relative to the layer.
pub(crate) const SINKS: &str = "self_attn.sinks";

/// A layer norm: root-mean-square (`x / sqrt(mean(x²) + eps) * weight`, Llama and most
/// families) or PyTorch's LayerNorm (`(x − mean) / sqrt(var + eps) * weight + bias`, OPT; without
/// the bias, Cohere's).
#[derive(Module, Debug)]
pub struct Norm<B: Backend> {
    /// Per-channel gain, `[hidden]`.
    pub weight: Param<Tensor<B, 1>>,
    /// Per-channel bias, `[hidden]`: a LayerNorm's, where it has one.
    pub bias: Option<Param<Tensor<B, 1>>>,
    /// Added to the mean square (the variance) for stability.
    pub eps: f64,
    /// Whether the mean is taken off first (a LayerNorm).
    #[module(skip)]
    pub centred: bool,
    /// Statistics over each `group` elements of a row rather than the whole row, the gain
    /// spanning the row (Cohere's q/k norms: each head normed apart, with gains of its own).
    #[module(skip)]
    pub group: Option<usize>,
    /// Whether the checkpoint holds the gain (`false`: OLMo's norms, whose gains of one are
    /// held here and never saved).
    #[module(skip)]
    pub learned: bool,
}

impl<B: Backend> Norm<B> {
    /// An RMSNorm with gain `weight`.
    pub fn new(weight: Tensor<B, 1>, eps: f64) -> Self {
        Self {
            weight: Param::from_tensor(weight),
            bias: None,
            eps,
            centred: false,
            group: None,
            learned: true,
        }
    }

    /// A LayerNorm with gain `weight` and `bias`, where it has one.
    pub fn layer(weight: Tensor<B, 1>, bias: Option<Tensor<B, 1>>, eps: f64) -> Self {
        Self {
            weight: Param::from_tensor(weight),
            bias: bias.map(Param::from_tensor),
            eps,
            centred: true,
            group: None,
            learned: true,
        }
    }

    /// The norm a model of `config` holds with gain `weight`: an RMSNorm, or a LayerNorm with
    /// the bias `bias` gives unless the family's norms have none; a gain the checkpoint does
    /// not hold where they have none either (OLMo 1, `weight` then ones).
    pub fn of_family<E>(
        config: &LlamaConfig,
        weight: Tensor<B, 1>,
        bias: impl FnOnce() -> Result<Tensor<B, 1>, E>,
    ) -> Result<Self, E> {
        let (e, eps) = (&config.extras, config.rms_norm_eps);
        let norm = if e.layer_norm {
            let bias = (!e.layer_norm_without_bias).then(bias).transpose()?;
            Norm::layer(weight, bias, eps)
        } else {
            Norm::new(weight, eps)
        };
        Ok(match e.norms_without_gains {
            true => norm.without_learned_gain(),
            false => norm,
        })
    }

    /// This norm with gains the checkpoint does not hold (they must be ones).
    pub fn without_learned_gain(self) -> Self {
        Self {
            learned: false,
            ..self
        }
    }

    /// This norm with its statistics over each `group` elements of a row.
    pub fn grouped(self, group: usize) -> Self {
        Self {
            group: Some(group),
            ..self
        }
    }

    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, hidden]`
    ///
    /// Divides by the RMS rather than multiplying by `recip()`: burn-ndarray's SIMD `recip` is
    /// the hardware approximation (`rcp14`, about 6e-5 relative), and whether an element takes it
    /// or the exact scalar path depends on the buffer's alignment, so results would vary from
    /// process to process.
    ///
    /// In f32 whatever the tensors' type, then back to it before the gain, as transformers'
    /// `LlamaRMSNorm` does: in fp16 the sum of squares of a residual stream overflows 65504.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let dtype = x.dtype();
        let [batch, seq, width] = x.dims();
        let group = self.group.unwrap_or(width);
        let x = x
            .cast(FloatDType::F32)
            .reshape([batch, seq * width / group, group]);
        let x = if self.centred {
            x.clone() - x.mean_dim(2)
        } else {
            x
        };
        let rms = (x.clone().square().mean_dim(2) + self.eps).sqrt();
        let out =
            (x / rms).reshape([batch, seq, width]).cast(dtype) * self.weight.val().unsqueeze::<3>();
        match &self.bias {
            Some(bias) => out + bias.val().unsqueeze::<3>(),
            None => out,
        }
    }

    /// The borrowed view of this norm that the kernels read.
    fn weights(&self) -> NormWeights<'_, B> {
        NormWeights {
            weight: &self.weight,
            bias: self.bias.as_ref(),
            eps: self.eps,
            centred: self.centred,
            group: self.group,
        }
    }
}

/// Keys and values of the positions seen so far, per layer, for incremental decoding.
#[derive(Debug, Clone)]
pub struct KvCache<B: Backend> {
    layers: Vec<Option<(Tensor<B, 4>, Tensor<B, 4>)>>,
    len: usize,
}

impl<B: Backend> KvCache<B> {
    /// An empty cache for a model with `num_layers` decoder layers.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: vec![None; num_layers],
            len: 0,
        }
    }

    /// Number of positions already cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Per-call rotary tables and the cache slot of one layer.
pub struct LayerContext<'a, B: Backend> {
    /// Cosines for the positions of this call, `[seq, head_dim]`.
    pub cos: &'a Tensor<B, 2>,
    /// Sines for the positions of this call, `[seq, head_dim]`.
    pub sin: &'a Tensor<B, 2>,
    /// This layer's cached keys/values, extended in place when present.
    pub cache: Option<&'a mut Option<(Tensor<B, 4>, Tensor<B, 4>)>>,
}

/// Grouped-query self-attention with rotary positions.
#[derive(Module, Debug)]
pub(crate) struct Attention<B: Backend> {
    /// `[hidden, heads * head_dim]`.
    pub q_proj: Linear<B>,
    /// `[hidden, kv_heads * head_dim]`.
    pub k_proj: Linear<B>,
    /// `[hidden, kv_heads * head_dim]`.
    pub v_proj: Linear<B>,
    /// `[heads * head_dim, hidden]`.
    pub o_proj: Linear<B>,
    /// RMSNorm of the queries before RoPE: of each head, `[head_dim]` (Qwen3), or of all
    /// heads of a position, `[heads * head_dim]` (OLMo 2).
    pub q_norm: Option<Norm<B>>,
    /// RMSNorm of the keys before RoPE, `[head_dim]` or `[kv_heads * head_dim]`.
    pub k_norm: Option<Norm<B>>,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads.
    pub num_kv_heads: usize,
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
    /// Each head's sink logit, which joins its softmax as a key no value follows (GPT-OSS's
    /// `self_attn.sinks`; [`crate::model::sink_attention`]).
    pub sinks: Option<Vec<f32>>,
    /// A query sees only the keys of its own chunk of this many positions (Llama 4's chunked
    /// layers; [`crate::model::llama4_attention`]).
    pub chunk: Option<usize>,
    /// Queries and keys are scaled to unit RMS over each head after RoPE, with this epsilon
    /// (Llama 4's `use_qk_norm`).
    pub unit_qk_norm: Option<f64>,
    /// The queries' temperature by position (Llama 4's NoPE layers).
    #[module(skip)]
    pub temperature: Option<QueryTemperature>,
}

impl<B: Backend> Attention<B> {
    /// The attention block, showing `observe` the input of `o_proj` ([`LinearInput::AttnOut`]).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, hidden]`
    pub fn forward_observed(
        &self,
        x: Tensor<B, 3>,
        ctx: LayerContext<'_, B>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) -> Tensor<B, 3> {
        let [batch, seq, _hidden] = x.dims();
        let (heads, kv_heads, head_dim) = (self.num_heads, self.num_kv_heads, self.head_dim);
        // The position the cache has reached: a layer with its own RoPE base rotates from
        // there, and the queries' temperature counts from there.
        let offset = ctx
            .cache
            .as_ref()
            .and_then(|slot| slot.as_ref())
            .map_or(0, |(k, _)| k.dims()[2]);
        let own_tables = self
            .inv_freq
            .as_ref()
            .map(|inv_freq| rope::tables::<B>(inv_freq, 1.0, offset, seq, &x.device()));
        let (cos, sin) = match &own_tables {
            Some((cos, sin)) => (cos, sin),
            None => (ctx.cos, ctx.sin),
        };
        // Heads apart, each through its norm when the family has one: over each head (Qwen3)
        // or over all heads of a position (OLMo 2), as wide as the norm's gain.
        let split = |t: Tensor<B, 3>, n: usize, norm: &Option<Norm<B>>| {
            let t = match norm {
                Some(norm) => {
                    let width = norm.weight.dims()[0];
                    norm.forward(t.reshape([batch, seq * n * head_dim / width, width]))
                        .reshape([batch, seq, n * head_dim])
                }
                None => t,
            };
            t.reshape([batch, seq, n, head_dim]).swap_dims(1, 2)
        };
        let rotate = |t: Tensor<B, 4>| {
            if self.rotary && self.interleaved {
                rope::apply_interleaved(t, cos, sin)
            } else if self.rotary {
                rope::apply(t, cos, sin)
            } else {
                t
            }
        };
        let [q, k, v] = project_all([&self.q_proj, &self.k_proj, &self.v_proj], x).map(|t| {
            match self.clip_qkv {
                Some(c) => t.clamp(-c, c),
                None => t,
            }
        });
        let q = rotate(split(q, heads, &self.q_norm));
        let k = rotate(split(k, kv_heads, &self.k_norm));
        let (q, k) = match self.unit_qk_norm {
            Some(eps) => (unit_rms(q, eps), unit_rms(k, eps)),
            None => (q, k),
        };
        let q = match self.temperature {
            Some(t) => t.apply(q, offset),
            None => q,
        };
        let v = split(v, kv_heads, &None);
        let (k, v) = extend_cache(ctx.cache, k, v);
        let groups = heads / kv_heads;
        let k = repeat_kv(k, groups);
        let v = repeat_kv(v, groups);
        // A backend's own attention kernel where there is one for this case (CUDA's flash
        // kernel: no window or chunks, the default scale, no soft-cap, no ALiBi, no cache).
        let plain = self.sliding_window.is_none()
            && self.chunk.is_none()
            && self.scale.is_none()
            && self.softcap.is_none()
            && self.alibi.is_none()
            && self.sinks.is_none();
        let fast = (plain && k.dims()[2] == seq)
            .then(|| kernels::<B>().causal_attention(&q, &k, &v))
            .flatten();
        let out = match fast {
            Some(out) => out,
            None => blocked_attention(
                q,
                k,
                v,
                Scores {
                    window: self.sliding_window,
                    chunk: self.chunk,
                    scale: self.scale,
                    softcap: self.softcap,
                    alibi: self.alibi.as_deref(),
                    sinks: self.sinks.as_deref(),
                },
            ),
        }
        .swap_dims(1, 2)
        .reshape([batch, seq, heads * head_dim]);
        observe(LinearInput::AttnOut, &out);
        project(&self.o_proj, out)
    }
}

/// The keys and values a layer attends with: `k` and `v` after those of the cache, where there
/// is one, which then holds them all.
///
/// # Shapes
/// - `k`: `[batch, heads, new, k_dim]`, `v`: `[batch, heads, new, v_dim]` → `[batch, heads,
///   cached + new, _]` each
pub(crate) fn extend_cache<B: Backend>(
    cache: Option<&mut Option<(Tensor<B, 4>, Tensor<B, 4>)>>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let Some(slot) = cache else {
        return (k, v);
    };
    let (k, v) = match slot.take() {
        Some((pk, pv)) => (Tensor::cat(vec![pk, k], 2), Tensor::cat(vec![pv, v], 2)),
        None => (k, v),
    };
    *slot = Some((k.clone(), v.clone()));
    (k, v)
}

/// How attention scores are formed beyond causality: a sliding window or chunks, a scale other
/// than `head_dim^-0.5`, a soft-cap, ALiBi's bias, sinks. The default is plain causal attention.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Scores<'a> {
    /// Keys a query sees, itself included, when the attention slides.
    pub window: Option<usize>,
    /// Positions per chunk when a query sees only the keys of its own chunk (Llama 4).
    pub chunk: Option<usize>,
    /// The factor of `q·k` when it is not `head_dim^-0.5`.
    pub scale: Option<f64>,
    /// Scaled scores `s` become `cap · tanh(s / cap)` before the mask (Gemma 2).
    pub softcap: Option<f64>,
    /// ALiBi's slope of each head: `slope · key position` is added to the scaled scores
    /// (BLOOM).
    pub alibi: Option<&'a [f32]>,
    /// Each head's sink logit in the softmax (GPT-OSS).
    pub sinks: Option<&'a [f32]>,
}

/// Causal attention on the generic path: scores, softmax and their weighted sum in f32
/// whatever the tensors' type, as PyTorch's attention kernels accumulate, a block of query rows
/// at a time ([`causal_attention`], [`attention_block_rows`]); queries are the last of the keys'
/// positions.
///
/// # Shapes
/// - `q`: `[batch, heads, seq, head_dim]`; `k`, `v`: `[batch, heads, keys, head_dim]`,
///   `keys ≥ seq` → `[batch, heads, seq, head_dim]`
pub fn blocked_attention<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    scores: Scores<'_>,
) -> Tensor<B, 4> {
    let [batch, heads, _, _] = q.dims();
    let dtype = q.dtype();
    let f32 = |t: Tensor<B, 4>| t.cast(FloatDType::F32);
    let rows = attention_block_rows(batch, heads, k.dims()[2]);
    causal_attention(f32(q), f32(k), f32(v), scores, rows).cast(dtype)
}

/// Query rows per block of [`causal_attention`] on the generic path: as many as keep one
/// `[batch, heads, rows, keys]` f32 score tensor within [`ATTENTION_BLOCK_BYTES`], at least 16.
pub fn attention_block_rows(batch: usize, heads: usize, keys: usize) -> usize {
    let per_row = (batch * heads * keys * 4).max(1) as u64;
    ((ATTENTION_BLOCK_BYTES / per_row) as usize).max(16)
}

/// Causal attention of `q`'s rows, the last of `k`'s positions, `rows` query rows at a time:
/// the scores of a block of queries against the keys it may see (causal, and within the
/// sliding window when there is one) are all that is ever materialised, never `seq²`.
///
/// # Shapes
/// - `q`: `[batch, heads, seq, head_dim]`; `k`, `v`: `[batch, heads, keys, head_dim]`,
///   `keys ≥ seq` → `[batch, heads, seq, head_dim]`
fn causal_attention<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    scores: Scores<'_>,
    rows: usize,
) -> Tensor<B, 4> {
    let [batch, heads, seq, _] = q.dims();
    let keys = k.dims()[2];
    let offset = keys - seq;
    let (window, chunk) = (scores.window, scores.chunk);
    let options = AttentionModuleOptions {
        scale: scores.scale,
        softcap: scores.softcap,
        is_causal: true,
    };
    // A block's queries against the keys from position `first_key`.
    let block = |q: Tensor<B, 4>, k: Tensor<B, 4>, v: Tensor<B, 4>, first_key: usize| {
        let [_, _, seq, _] = q.dims();
        let keys = k.dims()[2];
        let device = k.device();
        let window = window.and_then(|w| window_mask::<B>(batch, heads, seq, keys, w, &device));
        let chunks =
            chunk.and_then(|c| chunk_mask::<B>([batch, heads, seq, keys], first_key, c, &device));
        let mask = match (window, chunks) {
            (Some(w), Some(c)) => Some(w.bool_or(c)),
            (w, c) => w.or(c),
        };
        let bias = scores.alibi.map(|slopes| {
            alibi::bias::<B>(slopes, first_key..first_key + keys, batch, seq, &device)
        });
        match scores.sinks {
            Some(sinks) => attention_with_sinks(q, k, v, mask, bias, options, sinks),
            None => attention(q, k, v, mask, bias, options),
        }
    };
    if seq <= rows {
        return block(q, k, v, 0);
    }
    let blocks = (0..seq)
        .step_by(rows.max(1))
        .map(|start| {
            let end = (start + rows).min(seq);
            // Query `i` sits at position `offset + i`: it sees keys up to there and, with a
            // window, none `window` or more behind it, with chunks none before its chunk's.
            let first = offset + start;
            let first_key = window
                .map_or(0, |w| (first + 1).saturating_sub(w))
                .max(chunk.map_or(0, |c| chunk_start(first, c)));
            let last_key = offset + end;
            block(
                q.clone().slice(s![.., .., start..end, ..]),
                k.clone().slice(s![.., .., first_key..last_key, ..]),
                v.clone().slice(s![.., .., first_key..last_key, ..]),
                first_key,
            )
        })
        .collect();
    Tensor::cat(blocks, 2)
}

/// The sliding-window mask (`true`: hidden) of `seq` queries that are the last of `keys`
/// positions: key `j` is hidden from query `i` when `i − j ≥ window`; `None` when the window
/// hides nothing. Causality is masked separately.
///
/// # Shapes
/// - returns `[batch, heads, seq, keys]`
fn window_mask<B: Backend>(
    batch: usize,
    heads: usize,
    seq: usize,
    keys: usize,
    window: usize,
    device: &B::Device,
) -> Option<Tensor<B, 4, Bool>> {
    if keys <= window {
        return None;
    }
    let offset = keys - seq;
    let hidden: Vec<bool> = (0..seq)
        .flat_map(|i| (0..keys).map(move |j| offset + i >= j + window))
        .collect();
    let mask = Tensor::<B, 2, Bool>::from_data(TensorData::new(hidden, [seq, keys]), device);
    Some(
        mask.reshape([1, 1, seq, keys])
            .expand([batch, heads, seq, keys]),
    )
}

/// Repeats each key/value head `groups` times so head `h` of the queries reads kv head `h / groups`.
///
/// # Shapes
/// - `x`: `[batch, kv_heads, seq, head_dim]` → `[batch, kv_heads * groups, seq, head_dim]`
fn repeat_kv<B: Backend>(x: Tensor<B, 4>, groups: usize) -> Tensor<B, 4> {
    if groups == 1 {
        return x;
    }
    let [batch, kv_heads, seq, head_dim] = x.dims();
    x.unsqueeze_dim::<5>(2)
        .expand([batch, kv_heads, groups, seq, head_dim])
        .reshape([batch, kv_heads * groups, seq, head_dim])
}

/// The feed-forward block: gated, `down(act(gate(x)) * up(x))` with `act` SiLU (SwiGLU) or
/// GELU's tanh approximation (Gemma's GeGLU); or without a gate, `down(act(up(x)))` (OPT's
/// `fc2(relu(fc1(x)))`).
#[derive(Module, Debug)]
pub(crate) struct Mlp<B: Backend> {
    /// `[hidden, intermediate]`; `None` in an MLP without a gate.
    pub gate_proj: Option<Linear<B>>,
    /// `[hidden, intermediate]`.
    pub up_proj: Linear<B>,
    /// `[intermediate, hidden]`.
    pub down_proj: Linear<B>,
    /// The gate's activation.
    #[module(skip)]
    pub activation: Activation,
}

impl<B: Backend> Mlp<B> {
    /// The feed-forward block, showing `observe` the input of `down_proj`
    /// ([`LinearInput::MlpHidden`]).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, hidden]`
    pub fn forward_observed(
        &self,
        x: Tensor<B, 3>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) -> Tensor<B, 3> {
        let hidden = self.hidden(x);
        observe(LinearInput::MlpHidden, &hidden);
        project(&self.down_proj, hidden)
    }

    /// Its linears as [`DecoderLayer::linears`] lists them, named under `prefix` (e.g.
    /// `mlp.experts.3`): gate (where it has one) and up reading `input`, down reading `hidden`.
    pub(crate) fn linears(
        &self,
        prefix: &str,
        input: LinearInput,
        hidden: LinearInput,
    ) -> Vec<(String, LinearInput, &Linear<B>)> {
        let name = |proj: &str| format!("{prefix}.{proj}");
        let gate = self.gate_proj.as_ref();
        let gate = gate.map(|gate| (name("gate_proj"), input, gate));
        gate.into_iter()
            .chain([
                (name("up_proj"), input, &self.up_proj),
                (name("down_proj"), hidden, &self.down_proj),
            ])
            .collect()
    }

    /// Mutable access to `gate_proj`, `up_proj` or `down_proj`.
    pub(crate) fn linear_mut(&mut self, name: &str) -> Option<&mut Linear<B>> {
        match name {
            "gate_proj" => self.gate_proj.as_mut(),
            "up_proj" => Some(&mut self.up_proj),
            "down_proj" => Some(&mut self.down_proj),
            _ => None,
        }
    }

    /// The input of `down_proj`: `act(gate(x)) * up(x)`, or `act(up(x))` without a gate.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, intermediate]`
    pub fn hidden(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let act = |t: Tensor<B, 3>| match self.activation {
            Activation::Silu => silu(t),
            Activation::GeluTanh => gelu_tanh(t),
            Activation::Relu => relu(t),
            Activation::Gelu => gelu_exact(t),
            Activation::Relu2 => {
                let r = relu(t);
                r.clone() * r
            }
        };
        match &self.gate_proj {
            Some(gate) => {
                let [gate, up] = project_all([gate, &self.up_proj], x);
                act(gate) * up
            }
            None => act(project(&self.up_proj, x)),
        }
    }
}

/// A layer's feed-forward block: one MLP, or a sparse mixture of experts (Mixtral).
// One per layer: the variants' sizes matter less than reaching the MLP without a box.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub(crate) enum FeedForward<B: Backend> {
    /// One MLP every token goes through.
    Dense(Mlp<B>),
    /// Experts a router picks per token.
    Experts(SparseMoe<B>),
}

impl<B: Backend> FeedForward<B> {
    /// The block's output, showing `observe` the inputs of its linears after the block's
    /// own input ([`LinearInput::MlpIn`], which the layer shows).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, hidden]`
    fn forward_observed(
        &self,
        x: Tensor<B, 3>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) -> Tensor<B, 3> {
        match self {
            FeedForward::Dense(mlp) => mlp.forward_observed(x, observe),
            FeedForward::Experts(moe) => moe
                .forward_observed(x, observe, true)
                .expect("asked for the output"),
        }
    }

    /// Shows `observe` the inputs of the block's linears after its own input, without the
    /// output.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]`
    fn observe_inputs(&self, x: Tensor<B, 3>, observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>)) {
        match self {
            FeedForward::Dense(mlp) => observe(LinearInput::MlpHidden, &mlp.hidden(x)),
            FeedForward::Experts(moe) => {
                moe.forward_observed(x, observe, false);
            }
        }
    }
}

/// GELU with its tanh approximation, `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`
/// (PyTorch's `gelu(approximate="tanh")`), computed in f32.
///
/// # Shapes
/// - `x`: any → same
fn gelu_tanh<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let dtype = x.dtype();
    let x = x.cast(FloatDType::F32);
    let inner =
        (x.clone() + x.clone().powi_scalar(3) * 0.044715) * (2.0 / std::f64::consts::PI).sqrt();
    (x * 0.5 * (inner.tanh() + 1.0)).cast(dtype)
}

/// GELU, `x/2 · (1 + erf(x/√2))` (PyTorch's `gelu`), computed in f32.
///
/// # Shapes
/// - `x`: any → same
fn gelu_exact<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let dtype = x.dtype();
    gelu(x.cast(FloatDType::F32)).cast(dtype)
}

/// The norms a layer applies to its attention and MLP outputs before each residual add
/// (Gemma's `post_attention_layernorm` and `post_feedforward_layernorm`).
#[derive(Module, Debug)]
pub struct OutputNorms<B: Backend> {
    /// On the attention output.
    pub attention: Norm<B>,
    /// On the MLP output.
    pub mlp: Norm<B>,
}

/// `norm(x)`, or `x` itself where the layer has no such norm (OLMo 2's attention and MLP read
/// the residual stream).
///
/// # Shapes
/// - `x`: `[batch, seq, hidden]` → `[batch, seq, hidden]`
fn pre_norm<B: Backend>(norm: &Option<Norm<B>>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    match norm {
        Some(norm) => norm.forward(x),
        None => x,
    }
}

/// One decoder layer: pre-norms (Llama), sandwich norms (Gemma) or output norms only (OLMo 2).
#[derive(Module, Debug)]
pub struct DecoderLayer<B: Backend> {
    /// Attention block.
    pub(crate) self_attn: SelfAttention<B>,
    /// Feed-forward block.
    pub(crate) mlp: FeedForward<B>,
    /// Norm before attention; `None` where attention reads the residual stream itself
    /// (OLMo 2).
    pub input_layernorm: Option<Norm<B>>,
    /// Norm before the MLP (Llama's `post_attention_layernorm`, Gemma's
    /// `pre_feedforward_layernorm`); `None` where the MLP reads the residual stream (OLMo 2).
    pub post_attention_layernorm: Option<Norm<B>>,
    /// Norms of the attention and MLP outputs, where the family has them (Gemma).
    pub output_norms: Option<OutputNorms<B>>,
    /// Attention and MLP both read the layer's input and are added to it together
    /// (GPT-NeoX): `x + attn(norm(x)) + mlp(post_norm(x))`.
    #[module(skip)]
    pub parallel_residual: bool,
    /// The linears the checkpoint stores as one matrix (Phi-3's `qkv_proj` and `gate_up_proj`,
    /// GPT-NeoX's `query_key_value`): pruning selects over each such matrix as a whole, as the
    /// reference code, which sees the checkpoint's modules, does.
    #[module(skip)]
    pub stacked: &'static [FusedLinear],
    /// The factor of the attention and MLP outputs before each residual add (Granite).
    #[module(skip)]
    pub residual_scale: Option<f32>,
}

impl<B: Backend> DecoderLayer<B> {
    /// Layer `i` of a model of `config` from its parts: `linear(name, inputs, outputs, bias)`
    /// and `norm(name, width)` give the linear and the norm a checkpoint names `name` (relative
    /// to the layer, without `.weight`, in Llama's names), the norm of the kind `config` says;
    /// `vector(name, len)` the values of the tensor `name` itself (GPT-OSS's sinks).
    pub(crate) fn assemble<E>(
        config: &LlamaConfig,
        i: usize,
        linear: impl Fn(&str, usize, usize, bool) -> Result<Linear<B>, E>,
        norm: impl Fn(&str, usize) -> Result<Norm<B>, E>,
        vector: impl Fn(&str, usize) -> Result<Vec<f32>, E>,
    ) -> Result<Self, E> {
        let (h, heads, kv, d, inter) = (
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            config.intermediate_size,
        );
        let head_norm = |name: &str, heads: usize| {
            let e = &config.extras;
            let width = if e.qk_norm_across_heads || e.qk_norm_per_head_gains {
                heads * d
            } else {
                d
            };
            let norm = config.qk_norm.then(|| norm(name, width)).transpose()?;
            Ok(match e.qk_norm_per_head_gains {
                true => norm.map(|n| n.grouped(d)),
                false => norm,
            })
        };
        let sandwich = config.extras.sandwich_norms;
        let pre_norm = |name: &str| {
            (!config.extras.post_norms_only)
                .then(|| norm(name, h))
                .transpose()
        };
        // An MLP named under `prefix`, `width` wide: gated unless the family's has no gate,
        // biased where the family's dense MLP is (experts where the routing says).
        let mlp = |prefix: &str, width: usize, gated: bool, bias: bool| -> Result<Mlp<B>, E> {
            let name = |proj: &str| format!("{prefix}.{proj}");
            Ok(Mlp {
                gate_proj: gated
                    .then(|| linear(&name("gate_proj"), h, width, bias))
                    .transpose()?,
                up_proj: linear(&name("up_proj"), h, width, bias)?,
                down_proj: linear(&name("down_proj"), width, h, bias)?,
                activation: config.extras.activation,
            })
        };
        let mlp = match config.layer_experts(i) {
            None => FeedForward::Dense(mlp(
                "mlp",
                inter,
                !config.extras.ungated_mlp,
                config.extras.mlp_bias,
            )?),
            Some(routing) => FeedForward::Experts(SparseMoe {
                router: linear(ROUTER, h, routing.count, routing.biased)?,
                experts: (0..routing.count)
                    .map(|e| {
                        let prefix = format!("mlp.experts.{e}");
                        mlp(&prefix, routing.width, true, routing.biased)
                    })
                    .collect::<Result<_, E>>()?,
                shared: routing
                    .shared
                    .map(|width| {
                        Ok(SharedExpert {
                            mlp: mlp(SHARED_EXPERT, width, true, false)?,
                            gate: (!routing.shared_ungated)
                                .then(|| linear(SHARED_GATE, h, 1, false))
                                .transpose()?,
                        })
                    })
                    .transpose()?,
                correction: routing
                    .sigmoid
                    .filter(|sigmoid| !sigmoid.uncorrected)
                    .map(|_| vector(CORRECTION, routing.count))
                    .transpose()?,
                routing,
            }),
        };
        let llama4 = config.extras.llama4_attention.as_ref();
        let self_attn = match config.extras.latent_attention {
            Some(shape) => SelfAttention::Latent(LatentSelfAttention::assemble(
                shape,
                h,
                heads,
                config.qkv_bias,
                &linear,
                &norm,
            )?),
            None => SelfAttention::Heads(Attention {
                q_proj: linear("self_attn.q_proj", h, heads * d, config.qkv_bias)?,
                k_proj: linear("self_attn.k_proj", h, kv * d, config.qkv_bias)?,
                v_proj: linear("self_attn.v_proj", h, kv * d, config.qkv_bias)?,
                o_proj: linear("self_attn.o_proj", heads * d, h, config.o_bias)?,
                q_norm: head_norm("self_attn.q_norm", heads)?,
                k_norm: head_norm("self_attn.k_norm", kv)?,
                num_heads: heads,
                num_kv_heads: kv,
                head_dim: d,
                sliding_window: config.layer_window(i),
                scale: config.query_scale(),
                softcap: config.extras.attn_softcap,
                inv_freq: config.layer_inv_freq(i),
                rotary: config.layer_rotary(i),
                interleaved: config.extras.interleaved_rotary,
                alibi: config.alibi_slopes(),
                clip_qkv: config.extras.clip_qkv.map(|c| c as f32),
                sinks: config
                    .extras
                    .attention_sinks
                    .then(|| vector(SINKS, heads))
                    .transpose()?,
                chunk: llama4
                    .filter(|a| a.chunked_layers.get(i).copied().unwrap_or(false))
                    .map(|a| a.chunk_size),
                unit_qk_norm: llama4
                    .filter(|a| a.unit_qk_norm && config.layer_rotary(i))
                    .map(|_| config.rms_norm_eps),
                temperature: llama4
                    .and_then(|a| a.temperature)
                    .filter(|_| !config.layer_rotary(i)),
            }),
        };
        Ok(DecoderLayer {
            self_attn,
            mlp,
            input_layernorm: pre_norm("input_layernorm")?,
            post_attention_layernorm: if sandwich {
                pre_norm("pre_feedforward_layernorm")?
            } else {
                pre_norm("post_attention_layernorm")?
            },
            output_norms: if sandwich {
                Some(OutputNorms {
                    attention: norm("post_attention_layernorm", h)?,
                    mlp: norm("post_feedforward_layernorm", h)?,
                })
            } else {
                None
            },
            parallel_residual: config.extras.parallel_residual,
            stacked: config.architecture.family().fused_linears(),
            residual_scale: config.residual_scale(),
        })
    }

    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, hidden]`
    pub fn forward(&self, x: Tensor<B, 3>, ctx: LayerContext<'_, B>) -> Tensor<B, 3> {
        self.forward_observed(x, ctx, &mut |_, _| {})
    }

    /// [`DecoderLayer::forward`] that shows `observe` the input of every linear, once per
    /// shared input: this is how calibration collects per-input-channel statistics.
    pub fn forward_observed(
        &self,
        x: Tensor<B, 3>,
        ctx: LayerContext<'_, B>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) -> Tensor<B, 3> {
        if let (None, Some(weights)) = (&ctx.cache, self.weights()) {
            if let Some(out) = kernels::<B>().layer_forward(&weights, &x, ctx.cos, ctx.sin, observe)
            {
                return out;
            }
        }
        if self.parallel_residual {
            let attn_in = pre_norm(&self.input_layernorm, x.clone());
            observe(LinearInput::AttnIn, &attn_in);
            let attn = self.self_attn.forward_observed(attn_in, ctx, observe);
            let mlp_in = pre_norm(&self.post_attention_layernorm, x.clone());
            observe(LinearInput::MlpIn, &mlp_in);
            // In transformers' order: `mlp_output + attn_output + hidden_states`.
            let mlp = self.mlp.forward_observed(mlp_in, observe);
            return self.scaled(mlp) + self.scaled(attn) + x;
        }
        let h = self.attention_residual(x, ctx, observe);
        let mlp_in = pre_norm(&self.post_attention_layernorm, h.clone());
        observe(LinearInput::MlpIn, &mlp_in);
        let out = self.mlp.forward_observed(mlp_in, observe);
        h + self.scaled(match &self.output_norms {
            Some(norms) => norms.mlp.forward(out),
            None => out,
        })
    }

    /// A block's output as the residual add takes it: times the layer's residual factor
    /// where it has one (Granite).
    ///
    /// # Shapes
    /// - `out`: `[batch, seq, hidden]` → same
    fn scaled(&self, out: Tensor<B, 3>) -> Tensor<B, 3> {
        match self.residual_scale {
            Some(m) => out * m,
            None => out,
        }
    }

    /// The residual stream after the attention block: `x + attn(norm(x))`, the attention output
    /// normed first where the layer has output norms.
    fn attention_residual(
        &self,
        x: Tensor<B, 3>,
        ctx: LayerContext<'_, B>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) -> Tensor<B, 3> {
        let attn_in = pre_norm(&self.input_layernorm, x.clone());
        observe(LinearInput::AttnIn, &attn_in);
        let out = self.self_attn.forward_observed(attn_in, ctx, observe);
        x + self.scaled(match &self.output_norms {
            Some(norms) => norms.attention.forward(out),
            None => out,
        })
    }

    /// Runs each of `inputs` (separate batches of one length) through the layer, without a
    /// cache: the step of layer-by-layer calibration and streamed evaluation.
    ///
    /// # Shapes
    /// - each input: `[batch, seq, hidden]` → `[batch, seq, hidden]`; `cos`, `sin`: `[seq, head_dim]`
    pub fn forward_each(
        &self,
        inputs: Vec<Tensor<B, 3>>,
        cos: &Tensor<B, 2>,
        sin: &Tensor<B, 2>,
    ) -> Vec<Tensor<B, 3>> {
        inputs
            .into_iter()
            .map(|x| {
                let ctx = LayerContext {
                    cos,
                    sin,
                    cache: None,
                };
                self.forward(x, ctx)
            })
            .collect()
    }

    /// Shows `observe` the input of every linear as [`DecoderLayer::forward_observed`] does,
    /// without computing the layer's output (`down_proj` is never applied): calibration's
    /// first pass over a layer needs only these inputs.
    pub fn observe_inputs(
        &self,
        x: Tensor<B, 3>,
        ctx: LayerContext<'_, B>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) {
        if let (None, Some(weights)) = (&ctx.cache, self.weights()) {
            if kernels::<B>()
                .layer_inputs(&weights, &x, ctx.cos, ctx.sin, observe)
                .is_some()
            {
                return;
            }
        }
        let mlp_in = if self.parallel_residual {
            let attn_in = pre_norm(&self.input_layernorm, x.clone());
            observe(LinearInput::AttnIn, &attn_in);
            self.self_attn.forward_observed(attn_in, ctx, observe);
            pre_norm(&self.post_attention_layernorm, x)
        } else {
            let h = self.attention_residual(x, ctx, observe);
            pre_norm(&self.post_attention_layernorm, h)
        };
        observe(LinearInput::MlpIn, &mlp_in);
        self.mlp.observe_inputs(mlp_in, observe);
    }

    /// The borrowed view of this layer that the kernels read; `None` for a layer with
    /// experts or Llama 4's attention, which only the generic path runs.
    fn weights(&self) -> Option<LayerWeights<'_, B>> {
        let a = self.self_attn.heads()?;
        // Llama 4's attention runs on the generic path alone.
        if a.chunk.is_some() || a.unit_qk_norm.is_some() || a.temperature.is_some() {
            return None;
        }
        let FeedForward::Dense(m) = &self.mlp else {
            return None;
        };
        Some(LayerWeights {
            q_proj: &a.q_proj,
            k_proj: &a.k_proj,
            v_proj: &a.v_proj,
            o_proj: &a.o_proj,
            gate_proj: m.gate_proj.as_ref(),
            up_proj: &m.up_proj,
            down_proj: &m.down_proj,
            input_norm: self.input_layernorm.as_ref().map(Norm::weights),
            post_norm: self.post_attention_layernorm.as_ref().map(Norm::weights),
            q_norm: a.q_norm.as_ref().map(Norm::weights),
            k_norm: a.k_norm.as_ref().map(Norm::weights),
            sliding_window: a.sliding_window,
            output_norms: self
                .output_norms
                .as_ref()
                .map(|n| [n.attention.weights(), n.mlp.weights()]),
            activation: m.activation,
            parallel_residual: self.parallel_residual,
            residual_scale: self.residual_scale,
            scale: a.scale,
            softcap: a.softcap,
            inv_freq: a.inv_freq.as_deref(),
            rotary: a.rotary,
            interleaved_rotary: a.interleaved,
            alibi: a.alibi.as_deref(),
            clip_qkv: a.clip_qkv,
            heads: a.num_heads,
            kv_heads: a.num_kv_heads,
            head_dim: a.head_dim,
        })
    }

    /// The prunable linears with their names relative to the layer and the input they read:
    /// seven, six in an MLP without a gate; with experts, the four of attention, the router
    /// and each expert's three.
    pub fn linears(&self) -> Vec<(String, LinearInput, &Linear<B>)> {
        let mut linears = self.self_attn.linears();
        let (input, hidden) = (LinearInput::MlpIn, LinearInput::MlpHidden);
        match &self.mlp {
            FeedForward::Dense(m) => linears.extend(m.linears("mlp", input, hidden)),
            FeedForward::Experts(moe) => linears.extend(moe.linears()),
        }
        linears
    }

    /// The norms with their names relative to the layer, as checkpoints name them: the two
    /// layer norms (four with output norms, Gemma's names), then the per-head q/k norms where
    /// the family has them.
    pub fn norms(&self) -> Vec<(&'static str, &Norm<B>)> {
        let mut norms: Vec<_> = self
            .input_layernorm
            .iter()
            .map(|n| ("input_layernorm", n))
            .collect();
        let pre_mlp = self.post_attention_layernorm.as_ref();
        match &self.output_norms {
            None => norms.extend(pre_mlp.map(|n| ("post_attention_layernorm", n))),
            Some(out) => {
                norms.push(("post_attention_layernorm", &out.attention));
                norms.extend(pre_mlp.map(|n| ("pre_feedforward_layernorm", n)));
                norms.push(("post_feedforward_layernorm", &out.mlp));
            }
        }
        norms.extend(self.self_attn.norms());
        norms
    }

    /// The layer's tensors that are neither linears nor norms, with their names relative to the
    /// layer: GPT-OSS's attention sinks, one per head; a sigmoid router's correction biases,
    /// one per expert.
    pub fn vectors(&self) -> Vec<(&'static str, &[f32])> {
        let correction = match &self.mlp {
            FeedForward::Experts(moe) => moe.correction.as_deref(),
            FeedForward::Dense(_) => None,
        };
        let sinks = self.self_attn.heads().and_then(|a| a.sinks.as_deref());
        sinks
            .map(|sinks| (SINKS, sinks))
            .into_iter()
            .chain(correction.map(|bias| (CORRECTION, bias)))
            .collect()
    }

    /// Mutable access to the linear named as in [`DecoderLayer::linears`].
    pub fn linear_mut(&mut self, name: &str) -> Option<&mut Linear<B>> {
        if name.starts_with("self_attn.") {
            return self.self_attn.linear_mut(name);
        }
        let proj = name.strip_prefix("mlp.")?;
        match &mut self.mlp {
            FeedForward::Dense(m) => m.linear_mut(proj),
            FeedForward::Experts(moe) => moe.linear_mut(proj),
        }
    }
}

/// A Llama-family causal language model.
#[derive(Module, Debug)]
pub struct Llama<B: Backend> {
    /// Token embeddings, `[vocab, hidden]`.
    pub embed_tokens: Embedding<B>,
    /// Decoder layers.
    pub layers: Vec<DecoderLayer<B>>,
    /// Final norm.
    pub norm: Norm<B>,
    /// Untied LM head `[hidden, vocab]`; `None` when tied to the embeddings.
    pub lm_head: Option<Linear<B>>,
    /// Rotary inverse frequencies, `rotary_dim / 2` values (`head_dim / 2` but in GPT-NeoX).
    pub inv_freq: Vec<f32>,
    /// LongRoPE's frequencies for runs past the pre-training context, with its length
    /// ([`rope::long_inv_freq`]).
    #[module(skip)]
    pub long_inv_freq: Option<(usize, Vec<f32>)>,
    /// The factor of the rotary cosines and sines (YaRN's or LongRoPE's attention factor; 1
    /// otherwise).
    pub rope_scale: f32,
    /// Learned position embeddings, `[positions + position_offset, hidden]`, position `p` at
    /// row `p + position_offset` (OPT, GPT-2), where the model has them instead of RoPE.
    pub embed_positions: Option<Param<Tensor<B, 2>>>,
    /// The row of `embed_positions` that holds position 0 (OPT's 2, GPT-2's 0).
    pub position_offset: usize,
    /// The factor of the token embeddings (Gemma's `√hidden`), when there is one.
    pub embed_scale: Option<f32>,
    /// The norm of the token embeddings before the first layer (BLOOM's
    /// `word_embeddings_layernorm`), when there is one.
    pub embed_norm: Option<Norm<B>>,
    /// Whether every norm holds `1 + w` for a checkpoint's `w` (Gemma), which saving undoes.
    pub norm_offset: bool,
    /// Logits `l` become `cap · tanh(l / cap)` (Gemma 2), when set.
    pub final_softcap: Option<f64>,
    /// The factor or divisor of the logits (Cohere's `logit_scale`, Granite's
    /// `logits_scaling`), when set.
    pub logit_scale: Option<LogitScale>,
}

impl<B: Backend> Llama<B> {
    /// A model with seeded random weights (uniform, PyTorch's default ranges), for tests and
    /// benchmarks; the same seed gives the same weights on every run and thread.
    pub fn init_random(config: &LlamaConfig, seed: u64, device: &B::Device) -> Self {
        // A local RNG, not the backend's global one: the same seed gives the same model even
        // when other threads draw random tensors at the same time (parallel tests).
        let rng = std::cell::RefCell::new(StdRng::seed_from_u64(seed));
        let draws = |n: usize, low: f32, high: f32| -> Vec<f32> {
            (0..n)
                .map(|_| rng.borrow_mut().random_range(low..high))
                .collect()
        };
        let uniform = |shape: Vec<usize>, low: f32, high: f32| {
            TensorData::new(draws(shape.iter().product(), low, high), shape)
        };
        let lin = |i: usize, o: usize, bias: bool| {
            // PyTorch's default: U(-1/√in, 1/√in) for weight and bias.
            let k = 1.0 / (i as f32).sqrt();
            Linear {
                weight: Param::from_tensor(Tensor::from_data(uniform(vec![i, o], -k, k), device)),
                bias: bias.then(|| {
                    Param::from_tensor(Tensor::from_data(uniform(vec![o], -k, k), device))
                }),
            }
        };
        let h = config.hidden_size;
        // Non-unit gains (and non-zero biases) make the norms observable in tests.
        let norm = |n: usize| {
            let weight = match config.extras.norms_without_gains {
                true => Tensor::ones([n], device),
                false => Tensor::from_data(uniform(vec![n], 0.5, 1.5), device),
            };
            let bias = || Ok(Tensor::from_data(uniform(vec![n], -0.5, 0.5), device));
            Norm::of_family::<std::convert::Infallible>(config, weight, bias)
                .unwrap_or_else(|never| match never {})
        };
        let embed_tokens = Embedding {
            weight: Param::from_tensor(Tensor::from_data(
                uniform(vec![config.vocab_size, h], -1.0, 1.0),
                device,
            )),
        };
        let layers = (0..config.num_hidden_layers)
            .map(|i| {
                let assembled: Result<_, std::convert::Infallible> = DecoderLayer::assemble(
                    config,
                    i,
                    |_, inputs, outputs, bias| Ok(lin(inputs, outputs, bias)),
                    |_, width| Ok(norm(width)),
                    |_, len| Ok(draws(len, -1.0, 1.0)),
                );
                match assembled {
                    Ok(layer) => layer,
                }
            })
            .collect();
        Self {
            embed_tokens,
            layers,
            norm: norm(h),
            lm_head: (!config.tie_word_embeddings)
                .then(|| lin(h, config.vocab_size, config.extras.lm_head_bias)),
            inv_freq: rope::inv_freq(config),
            long_inv_freq: rope::long_inv_freq(config),
            rope_scale: config.rope_attention_factor(),
            embed_positions: config.extras.learned_positions.then(|| {
                let rows = config.max_position_embeddings + config.extras.position_offset();
                Param::from_tensor(Tensor::from_data(uniform(vec![rows, h], -1.0, 1.0), device))
            }),
            position_offset: config.extras.position_offset(),
            embed_scale: config.embed_scale(),
            embed_norm: config.extras.embed_norm.then(|| norm(h)),
            norm_offset: config.extras.norm_offset,
            final_softcap: config.extras.final_softcap,
            logit_scale: config.logit_scale(),
        }
    }

    /// Token embeddings of `tokens` at positions from 0, with their learned positions where
    /// the model has them, through the embeddings' norm where it has one.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq]` → `[batch, seq, hidden]`
    pub fn embed(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.embed_from(tokens, 0)
    }

    /// [`Llama::embed`] of tokens at positions `offset..`.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq]` → `[batch, seq, hidden]`
    fn embed_from(&self, tokens: Tensor<B, 2, Int>, offset: usize) -> Tensor<B, 3> {
        let seq = tokens.dims()[1];
        let x = self.embed_tokens.forward(tokens);
        let x = match self.embed_scale {
            Some(scale) => x * scale,
            None => x,
        };
        let x = match &self.embed_positions {
            Some(table) => {
                let start = offset + self.position_offset;
                let rows = table.val().slice(s![start..start + seq, ..]);
                x + rows.unsqueeze::<3>()
            }
            None => x,
        };
        match &self.embed_norm {
            Some(norm) => norm.forward(x),
            None => x,
        }
    }

    /// Final norm and LM head.
    ///
    /// # Shapes
    /// - `hidden`: `[batch, seq, hidden]` → logits `[batch, seq, vocab]`
    pub fn head(&self, hidden: Tensor<B, 3>) -> Tensor<B, 3> {
        let x = self.norm.forward(hidden);
        let logits = match &self.lm_head {
            Some(head) => project(head, x),
            None => linear_forward(x, self.embed_tokens.weight.val().transpose(), None),
        };
        let logits = match self.logit_scale {
            Some(LogitScale::Times(s)) => logits * s,
            Some(LogitScale::Over(s)) => logits / s,
            None => logits,
        };
        match self.final_softcap {
            Some(cap) => (logits / cap).tanh() * cap,
            None => logits,
        }
    }

    /// The borrowed view of the embeddings, final norm and LM head that the kernels read (for
    /// [`super::kernels::Kernels::hidden_nll`]).
    pub fn head_weights(&self) -> HeadWeights<'_, B> {
        HeadWeights {
            embed: &self.embed_tokens.weight,
            norm: self.norm.weights(),
            lm_head: self.lm_head.as_ref(),
            embed_scale: self.embed_scale,
            positions: self.embed_positions.as_ref(),
            position_offset: self.position_offset,
            embed_norm: self.embed_norm.as_ref().map(Norm::weights),
            final_softcap: self.final_softcap,
            logit_scale: self.logit_scale,
        }
    }

    /// The borrowed view of the whole model that the kernels read; `None` for a model with
    /// experts.
    fn weights(&self) -> Option<ModelWeights<'_, B>> {
        Some(ModelWeights {
            layers: self
                .layers
                .iter()
                .map(DecoderLayer::weights)
                .collect::<Option<_>>()?,
            head: self.head_weights(),
            inv_freq: &self.inv_freq,
            long_inv_freq: self.long_inv_freq(),
            rope_scale: self.rope_scale,
        })
    }

    /// LongRoPE's long frequencies and the context length past which a run takes them.
    fn long_inv_freq(&self) -> Option<(usize, &[f32])> {
        self.long_inv_freq
            .as_ref()
            .map(|(context, f)| (*context, f.as_slice()))
    }

    /// Rotary tables for positions `offset..offset + len` (LongRoPE's long frequencies where
    /// `offset + len` passes the pre-training context).
    pub fn rope_tables(&self, offset: usize, len: usize) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let device = self.embed_tokens.weight.device();
        let inv_freq = rope::frequencies_for(&self.inv_freq, self.long_inv_freq(), offset + len);
        rope::tables(inv_freq, self.rope_scale, offset, len, &device)
    }

    /// Full causal forward pass.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq]` → logits `[batch, seq, vocab]`
    ///
    /// Where the backend has fast kernels ([`super::kernels`]: burn-ndarray in f32) this runs
    /// them; elsewhere it is [`Llama::forward_generic`].
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        match (self.weights()).and_then(|w| kernels::<B>().forward(&w, &tokens)) {
            Some(logits) => logits,
            None => self.forward_generic(tokens),
        }
    }

    /// The residual stream after the last layer (the input of [`Llama::head`]).
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq]` → `[batch, seq, hidden]`
    ///
    /// Where the backend has fast kernels ([`super::kernels`]: burn-ndarray in f32) this runs
    /// them.
    pub fn hidden(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        match (self.weights()).and_then(|w| kernels::<B>().hidden(&w, &tokens)) {
            Some(hidden) => hidden,
            None => self.hidden_generic(tokens),
        }
    }

    /// The residual stream after the last layer of continuations sharing a context, packed as
    /// one sequence ([`super::kernels::Kernels::packed_hidden`]); `None` where the backend's
    /// kernels do not pack (run `context + branch` through [`Llama::hidden`] instead).
    ///
    /// # Shapes
    /// - `tokens`: `n` ids → `[n, hidden]`
    pub fn packed_hidden(
        &self,
        tokens: &[u32],
        prefix: usize,
        branches: &[usize],
    ) -> Option<Tensor<B, 2>> {
        kernels::<B>().packed_hidden(&self.weights()?, tokens, prefix, branches)
    }

    /// [`Llama::hidden`] layer by layer, on any backend.
    fn hidden_generic(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [_batch, seq] = tokens.dims();
        let (cos, sin) = self.rope_tables(0, seq);
        let mut x = self.embed(tokens);
        for layer in &self.layers {
            x = layer.forward(
                x,
                LayerContext {
                    cos: &cos,
                    sin: &sin,
                    cache: None,
                },
            );
        }
        x
    }

    /// The full causal forward pass layer by layer, on any backend (each layer still takes the
    /// fused kernels where [`DecoderLayer::forward_observed`] can).
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq]` → logits `[batch, seq, vocab]`
    pub fn forward_generic(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.head(self.hidden_generic(tokens))
    }

    /// Forward pass over new tokens that continue the cached positions; extends the cache.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, new]` → logits `[batch, new, vocab]`
    pub fn forward_cached(
        &self,
        tokens: Tensor<B, 2, Int>,
        cache: &mut KvCache<B>,
    ) -> Tensor<B, 3> {
        let [_batch, seq] = tokens.dims();
        let (cos, sin) = self.rope_tables(cache.len, seq);
        let mut x = self.embed_from(tokens, cache.len);
        for (layer, slot) in self.layers.iter().zip(cache.layers.iter_mut()) {
            x = layer.forward(
                x,
                LayerContext {
                    cos: &cos,
                    sin: &sin,
                    cache: Some(slot),
                },
            );
        }
        cache.len += seq;
        self.head(x)
    }
}

#[cfg(test)]
mod tests;
