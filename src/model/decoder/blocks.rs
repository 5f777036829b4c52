//! The blocks every decoder layer is made of: norms, attention (with its KV cache and the
//! blocked causal softmax) and the MLP.

use burn::module::Param;
use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::activation::{gelu, relu, silu};
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::FloatDType;

use crate::model::arch::QueryTemperature;
use crate::model::arch::{alibi, rope};
use crate::model::arch::{Activation, AttentionSettings, LlamaConfig};
use crate::model::decoder::{chunk_mask, chunk_start, unit_rms};
use crate::model::kernels::{
    kernels, project, project_all, HostKv, MlpWeights, NormWeights, ATTENTION_BLOCK_BYTES,
};

use crate::model::decoder::attention_with_sinks;
pub use crate::model::kernels::LinearInput;

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
    pub(super) fn weights(&self) -> NormWeights<'_, B> {
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
    pub(super) layers: Vec<Option<(Tensor<B, 4>, Tensor<B, 4>)>>,
    /// The same on the host, where the fused CPU kernels decode (then `layers` stay empty).
    pub(super) host: HostKv,
    pub(super) len: usize,
}

impl<B: Backend> KvCache<B> {
    /// An empty cache for a model with `num_layers` decoder layers.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: vec![None; num_layers],
            host: HostKv::default(),
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
    /// Heads, window, scale, soft-cap, rotation and bias: what the fused kernels read too.
    #[module(skip)]
    pub settings: AttentionSettings,
    /// Each head's sink logit, which joins its softmax as a key no value follows (GPT-OSS's
    /// `self_attn.sinks`; [`crate::model::decoder`]).
    pub sinks: Option<Vec<f32>>,
    /// A query sees only the keys of its own chunk of this many positions (Llama 4's chunked
    /// layers; [`crate::model::decoder`]).
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
        let AttentionSettings {
            heads,
            kv_heads,
            head_dim,
            ..
        } = self.settings;
        // The position the cache has reached: a layer with its own RoPE base rotates from
        // there, and the queries' temperature counts from there.
        let offset = ctx
            .cache
            .as_ref()
            .and_then(|slot| slot.as_ref())
            .map_or(0, |(k, _)| k.dims()[2]);
        let own_tables = self
            .settings
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
            if self.settings.rotary && self.settings.interleaved {
                rope::apply_interleaved(t, cos, sin)
            } else if self.settings.rotary {
                rope::apply(t, cos, sin)
            } else {
                t
            }
        };
        let [q, k, v] = project_all([&self.q_proj, &self.k_proj, &self.v_proj], x).map(|t| {
            match self.settings.clip_qkv {
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
        let plain = self.settings.sliding_window.is_none()
            && self.chunk.is_none()
            && self.settings.scale.is_none()
            && self.settings.softcap.is_none()
            && self.settings.alibi.is_none()
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
                    window: self.settings.sliding_window,
                    chunk: self.chunk,
                    scale: self.settings.scale,
                    softcap: self.settings.softcap,
                    alibi: self.settings.alibi.as_deref(),
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
pub(super) fn causal_attention<B: Backend>(
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
pub(super) fn repeat_kv<B: Backend>(x: Tensor<B, 4>, groups: usize) -> Tensor<B, 4> {
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

    /// The borrowed view of its linears that the kernels read.
    pub(crate) fn weights(&self) -> MlpWeights<'_, B> {
        MlpWeights {
            gate_proj: self.gate_proj.as_ref(),
            up_proj: &self.up_proj,
            down_proj: &self.down_proj,
            activation: self.activation,
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
