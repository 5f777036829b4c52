//! The seam between the decoder (and the other callers of its hot loops: layer-wise pruning,
//! perplexity, `wanda bench gemm`) and a backend's fast kernels.
//!
//! [`Kernels`] lists the operations a backend may run faster than Burn's generic ops; each
//! returns `None` where the fast path does not apply, and the caller then runs the generic
//! path. [`kernels`] picks the implementation for a backend type: the fused CPU kernels of
//! `fused.rs` (gemm products on borrowed f32 slices, with the vectorised element-wise kernels of
//! `vecmath.rs`) for burn-ndarray in f32, the default CPU backend; for every other backend Burn's
//! generic ops, except on CUDA (found by the type of the tensors' primitives): attention by
//! CubeCL's flash kernel (`cuda.rs`) or, with [`CUDA_ATTENTION_VAR`]`=cublas`, by cuBLAS and a
//! softmax kernel of our own (`cublas_attention.rs`, `attention_plan.rs`), the linears' and
//! other products by cuBLAS (`cublas.rs`), pruning's selection by kernels of our own
//! (`column_select.rs`; our kernels are CUDA C compiled by NVRTC, `nvrtc.rs`). Those are the
//! crate's only backend checks.
//!
//! The kernels see a model through borrowed views ([`LayerWeights`], [`HeadWeights`],
//! [`ModelWeights`]) that the decoder builds from its own layers, so the kernels never import
//! the decoder: the arrow points from the decoder down to this module.

#[cfg(any(feature = "cuda", test))]
mod attention_plan;
#[cfg(feature = "cuda")]
mod column_select;
#[cfg(feature = "cuda")]
mod cublas;
#[cfg(feature = "cuda")]
mod cublas_attention;
#[cfg(feature = "cuda")]
mod cuda;
mod fused;
mod host;
#[cfg(feature = "cuda")]
mod nvrtc;
mod routing;
pub mod sparse;
mod transpose;
mod vecmath;

pub use host::*;
pub(crate) use routing::{route, Routed};
pub use transpose::*;

use std::any::Any;
use std::sync::Arc;

use burn::backend::NdArray;
use burn::module::Param;
use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;

use crate::model::arch::{Activation, AttentionSettings, Experts, LogitScale, Residual};

pub use fused::{product_kernel_name, ATTENTION_ROWS, HEAD_ROWS};

/// Bytes of f32 scores that one block of query rows may hold where attention materialises
/// them: the generic path's blocks (which also hold their softmax, each this size at most) and
/// CUDA's cuBLAS attention's chunk of heads ([`CudaAttention::Cublas`]).
pub const ATTENTION_BLOCK_BYTES: u64 = 256 << 20;

/// The environment variable that picks CUDA's attention path ([`CudaAttention`]): `flash`
/// (the default) or `cublas`.
pub const CUDA_ATTENTION_VAR: &str = "WANDA_CUDA_ATTENTION";

/// How the CUDA backend computes causal attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CudaAttention {
    /// CubeCL's flash kernel in fp16, the generic blocked path in f32 and bf16.
    #[default]
    Flash,
    /// In every float type, per chunk of heads: the f32 scores by a cuBLAS batched product,
    /// a causal softmax kernel of our own written over them in the tensors' type, and their
    /// weighted sum of the values by a second batched product, accumulated in f32.
    Cublas,
}

impl std::str::FromStr for CudaAttention {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "flash" => Ok(Self::Flash),
            "cublas" => Ok(Self::Cublas),
            _ => Err(format!(
                "{CUDA_ATTENTION_VAR}=`{s}`: use `flash` (the default) or `cublas`"
            )),
        }
    }
}

/// CUDA's attention path from [`CUDA_ATTENTION_VAR`], read once per process; an error names
/// the variable, its value and the values it takes.
pub fn cuda_attention() -> Result<CudaAttention, String> {
    static PATH: std::sync::OnceLock<Result<CudaAttention, String>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| match std::env::var(CUDA_ATTENTION_VAR) {
        Ok(value) => value.parse(),
        Err(_) => Ok(CudaAttention::default()),
    })
    .clone()
}

/// The environment variable that sets the tiling of CUDA's flash attention kernel,
/// `planes:seq_q:seq_kv` ([`FlashTiling`]); unset, `4:2:1`. For measuring other tilings with
/// `wanda bench attention` (B10): a tiling the kernel refuses leaves attention to the generic
/// path.
pub const FLASH_TILING_VAR: &str = "WANDA_FLASH_TILING";

/// The tiling of CubeCL's flash attention kernel (cubek's `BlackboxAcceleratedStrategy`): a
/// cube of `planes` planes (warps), each taking `seq_q` tiles of query rows and `seq_kv` tiles
/// of keys a step (a tile is the tensor cores' instruction size, 16 in fp16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashTiling {
    /// Planes (warps) per cube.
    pub planes: u8,
    /// Query tiles per plane.
    pub seq_q: u8,
    /// Key tiles per plane and step.
    pub seq_kv: u8,
}

impl Default for FlashTiling {
    /// `4:2:1`: the fastest of eight tilings at head widths 64 and 128 on an H200 (B10, fp16,
    /// 4 × 32 heads × 2048: 5 % and 1 % above `4:1:1`; results/gpu-h200-2026-11-27-load/).
    fn default() -> Self {
        Self {
            planes: 4,
            seq_q: 2,
            seq_kv: 1,
        }
    }
}

impl std::str::FromStr for FlashTiling {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<Option<u8>> = s
            .split(':')
            .map(|p| p.trim().parse().ok().filter(|&n| n > 0))
            .collect();
        match parts[..] {
            [Some(planes), Some(seq_q), Some(seq_kv)] => Ok(Self {
                planes,
                seq_q,
                seq_kv,
            }),
            _ => Err(format!(
                "{FLASH_TILING_VAR}=`{s}`: use `planes:seq_q:seq_kv`, three whole numbers from 1 \
                 to 255 (the default is 4:2:1)"
            )),
        }
    }
}

impl std::fmt::Display for FlashTiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.planes, self.seq_q, self.seq_kv)
    }
}

/// The flash kernel's tiling from [`FLASH_TILING_VAR`], read once per process; an error names
/// the variable, its value and the form it takes.
pub fn flash_tiling() -> Result<FlashTiling, String> {
    static TILING: std::sync::OnceLock<Result<FlashTiling, String>> = std::sync::OnceLock::new();
    TILING
        .get_or_init(|| match std::env::var(FLASH_TILING_VAR) {
            Ok(value) => value.parse(),
            Err(_) => Ok(FlashTiling::default()),
        })
        .clone()
}

/// The activations that feed a decoder layer's linears; linears that read the same tensor
/// share one entry (q/k/v read [`LinearInput::AttnIn`], gate/up read [`LinearInput::MlpIn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinearInput {
    /// Normed residual before attention → q/k/v projections.
    AttnIn,
    /// Attention heads, concatenated → `o_proj`.
    AttnOut,
    /// Normed residual before the MLP → gate/up projections.
    MlpIn,
    /// `act(gate) * up` (`act(up)` without a gate) → `down_proj`.
    MlpHidden,
    /// The tokens routed to expert `e` of a mixture of experts → its gate/up projections.
    ExpertIn(usize),
    /// Expert `e`'s `act(gate) * up` → its `down_proj`.
    ExpertHidden(usize),
    /// The queries' normed latent of a latent attention → `q_b_proj` (DeepSeek's).
    QueryLatent,
    /// The keys' and values' normed latent of a latent attention → `kv_b_proj`.
    KeyValueLatent,
}

/// A borrowed norm: per-channel gain `[hidden]` and the epsilon added to the mean square;
/// a LayerNorm's bias (a norm with a bias takes the mean off first).
#[derive(Clone, Copy)]
pub struct NormWeights<'a, B: Backend> {
    /// Per-channel gain, `[hidden]`.
    pub weight: &'a Param<Tensor<B, 1>>,
    /// Per-channel bias, `[hidden]` (a LayerNorm's, where it has one).
    pub bias: Option<&'a Param<Tensor<B, 1>>>,
    /// Added to the mean square for stability.
    pub eps: f64,
    /// Whether the mean is taken off first (a LayerNorm).
    pub centred: bool,
    /// Statistics over each `group` elements of a row, where not over the whole row.
    pub group: Option<usize>,
}

/// The borrowed linears of one MLP: `down(act(gate(x)) * up(x))`, or `down(act(up(x)))`
/// without a gate.
pub struct MlpWeights<'a, B: Backend> {
    /// `[hidden, intermediate]`; `None` in an MLP without a gate (OPT).
    pub gate_proj: Option<&'a Linear<B>>,
    /// `[hidden, intermediate]`.
    pub up_proj: &'a Linear<B>,
    /// `[intermediate, hidden]`.
    pub down_proj: &'a Linear<B>,
    /// The gate's activation (of `up` without a gate).
    pub activation: Activation,
}

/// The borrowed experts of a layer's mixture of experts and their router, as the decoder's
/// block routes them ([`route`]).
pub struct ExpertWeights<'a, B: Backend> {
    /// The router, `[hidden, experts]`.
    pub router: &'a Linear<B>,
    /// Each expert's MLP, in the router's column order.
    pub experts: Vec<MlpWeights<'a, B>>,
    /// The expert every token goes through, with the gate of its output where it has one
    /// (`[hidden, 1]`, Qwen2-MoE's).
    pub shared: Option<(MlpWeights<'a, B>, Option<&'a Linear<B>>)>,
    /// How tokens are routed.
    pub routing: Experts,
    /// The correction biases of a sigmoid router's choice.
    pub correction: Option<&'a [f32]>,
}

/// The borrowed block after a layer's attention.
// One per layer, built per forward pass: the variants' sizes matter less than no box.
#[allow(clippy::large_enum_variant)]
pub enum FeedForwardWeights<'a, B: Backend> {
    /// One MLP every token goes through.
    Dense(MlpWeights<'a, B>),
    /// Experts, each token through those its router picks.
    Experts(ExpertWeights<'a, B>),
}

/// The borrowed weights and head counts of one decoder layer; linear weights are `[in, out]`.
pub struct LayerWeights<'a, B: Backend> {
    /// `[hidden, heads * head_dim]`.
    pub q_proj: &'a Linear<B>,
    /// `[hidden, kv_heads * head_dim]`.
    pub k_proj: &'a Linear<B>,
    /// `[hidden, kv_heads * head_dim]`.
    pub v_proj: &'a Linear<B>,
    /// `[heads * head_dim, hidden]`.
    pub o_proj: &'a Linear<B>,
    /// The block after attention: one MLP, or experts and their router.
    pub feed_forward: FeedForwardWeights<'a, B>,
    /// Norm before attention; `None` where attention reads the residual stream (OLMo 2).
    pub input_norm: Option<NormWeights<'a, B>>,
    /// Norm before the MLP; `None` where the MLP reads the residual stream (OLMo 2).
    pub post_norm: Option<NormWeights<'a, B>>,
    /// Query norm, per head `[head_dim]` (Qwen3) or over all heads of a position
    /// `[heads * head_dim]` (OLMo 2).
    pub q_norm: Option<NormWeights<'a, B>>,
    /// Key norm, `[head_dim]` or `[kv_heads * head_dim]`.
    pub k_norm: Option<NormWeights<'a, B>>,
    /// Norms of the attention and the MLP output, applied before each residual add (Gemma).
    pub output_norms: Option<[NormWeights<'a, B>; 2]>,
    /// How the attention and MLP outputs join the residual stream: the decoder's own.
    pub residual: Residual,
    /// Heads, window, scale, soft-cap, rotation and bias: the decoder's own description.
    pub attention: &'a AttentionSettings,
}

impl<B: Backend> LayerWeights<'_, B> {
    /// The epsilon of the layer's norms (one for all of them): its first norm's.
    pub fn norm_eps(&self) -> f64 {
        self.input_norm
            .iter()
            .chain(self.output_norms.iter().flatten())
            .chain(&self.q_norm)
            .map(|n| n.eps)
            .next()
            .unwrap_or(1e-6)
    }
}

/// The borrowed embeddings, final norm and LM head of a model.
pub struct HeadWeights<'a, B: Backend> {
    /// Token embeddings, `[vocab, hidden]`.
    pub embed: &'a Param<Tensor<B, 2>>,
    /// Final norm.
    pub norm: NormWeights<'a, B>,
    /// Untied LM head `[hidden, vocab]`; `None` when tied to the embeddings.
    pub lm_head: Option<&'a Linear<B>>,
    /// The factor of the token embeddings on their way into the first layer (Gemma).
    pub embed_scale: Option<f32>,
    /// Learned position embeddings added to the token embeddings (OPT).
    pub positions: Option<&'a Param<Tensor<B, 2>>>,
    /// The row of `positions` that holds position 0 (OPT's 2, GPT-2's 0).
    pub position_offset: usize,
    /// The norm of the embeddings before the first layer (BLOOM).
    pub embed_norm: Option<NormWeights<'a, B>>,
    /// Logits `l` become `cap · tanh(l / cap)` (Gemma 2).
    pub final_softcap: Option<f64>,
    /// The factor or divisor of the logits (Cohere, Granite).
    pub logit_scale: Option<LogitScale>,
}

/// The borrowed weights of a whole decoder.
pub struct ModelWeights<'a, B: Backend> {
    /// Decoder layers, in order.
    pub layers: Vec<LayerWeights<'a, B>>,
    /// Embeddings, final norm and LM head.
    pub head: HeadWeights<'a, B>,
    /// Rotary inverse frequencies, `rotary_dim / 2` values (`head_dim / 2` but in GPT-NeoX).
    pub inv_freq: &'a [f32],
    /// LongRoPE's frequencies past the pre-training context, with its length.
    pub long_inv_freq: Option<(usize, &'a [f32])>,
    /// The factor of the model's rotary cosines and sines (YaRN's or LongRoPE's attention
    /// factor; 1).
    pub rope_scale: f32,
    /// The linears held compressed, where the model holds any ([`sparse::SparseWeights`]).
    pub sparse: Option<Arc<sparse::SparseWeights>>,
}

/// Which weights [`Kernels::lowest_scores`] marks: in each column of a weight, or in the whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lowest {
    /// The `k` lowest scores of the column (Wanda's per-output rule).
    PerColumn(usize),
    /// The `n` lowest of every `m` consecutive rows (the N:M rule).
    PerGroup {
        /// Weights marked per group.
        n: usize,
        /// Rows per group.
        m: usize,
    },
    /// Every score at or below the whole weight's `k`-th smallest (`k ≥ 1`), ties at it
    /// included (magnitude's per-matrix threshold).
    MatrixThreshold(usize),
}

/// Keys and values one layer has cached on the host: `[positions, kv_heads · head_dim]` each,
/// the keys normed and rotated as attention reads them.
pub type LayerKv = (Vec<f32>, Vec<f32>);

/// Keys and values of the positions seen so far, per layer, as the fused CPU kernels cache them
/// for incremental decoding ([`Kernels::forward_cached`]).
#[derive(Debug, Clone, Default)]
pub struct HostKv {
    /// Positions held.
    pub len: usize,
    /// Each layer's keys and values.
    pub layers: Vec<LayerKv>,
}

/// Operations a backend may run faster than Burn's generic ops. Every method returns `None`
/// where its fast path does not apply (another layout, shapes it does not take); the caller then
/// runs the generic Burn path, which computes the same function. The defaults are all `None`.
pub trait Kernels<B: Backend>: Sync {
    /// One decoder layer without a cache, showing `observe` the input of every linear once per
    /// shared input, as the decoder's generic layer does.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, hidden]`
    /// - `cos`, `sin`: `[seq, rotary]` as made by [`crate::model::arch::rope::tables`] (`rotary`: the
    ///   dimensions of a head that rotate, `head_dim` but in GPT-NeoX)
    fn layer_forward(
        &self,
        _layer: &LayerWeights<'_, B>,
        _x: &Tensor<B, 3>,
        _cos: &Tensor<B, 2>,
        _sin: &Tensor<B, 2>,
        _observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) -> Option<Tensor<B, 3>> {
        None
    }

    /// [`Kernels::layer_forward`] without the layer's output: it stops once `down_proj`'s input
    /// is observed. `None` when the fast path does not apply (nothing was observed then).
    fn layer_inputs(
        &self,
        _layer: &LayerWeights<'_, B>,
        _x: &Tensor<B, 3>,
        _cos: &Tensor<B, 2>,
        _sin: &Tensor<B, 2>,
        _observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) -> Option<()> {
        None
    }

    /// Logits of `tokens` through the whole model.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq]` → logits `[batch, seq, vocab]`
    fn forward(
        &self,
        _model: &ModelWeights<'_, B>,
        _tokens: &Tensor<B, 2, Int>,
    ) -> Option<Tensor<B, 3>> {
        None
    }

    /// Logits of `tokens` that continue the positions `cache` holds, their keys and values
    /// appended to it; `None`, the cache untouched, where the backend has no such path (then
    /// the decoder's generic layers keep a cache of their own).
    ///
    /// # Shapes
    /// - `tokens`: `[batch, new]` → logits `[batch, new, vocab]`
    fn forward_cached(
        &self,
        _model: &ModelWeights<'_, B>,
        _tokens: &Tensor<B, 2, Int>,
        _cache: &mut HostKv,
    ) -> Option<Tensor<B, 3>> {
        None
    }

    /// [`Kernels::forward`] without the final norm and LM head: the residual stream after the
    /// last layer.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq]` → `[batch, seq, hidden]`
    fn hidden(
        &self,
        _model: &ModelWeights<'_, B>,
        _tokens: &Tensor<B, 2, Int>,
    ) -> Option<Tensor<B, 3>> {
        None
    }

    /// Sum of the next-token NLLs of one window from its logits.
    ///
    /// # Shapes
    /// - `logits`: `[1, seq, vocab]`, `window`: `seq` ids
    fn window_nll(&self, _logits: &Tensor<B, 3>, _window: &[u32]) -> Option<f64> {
        None
    }

    /// [`Kernels::window_nll`] of the logits of `hidden` (the residual stream after the last
    /// layer) through `head`, without holding a whole window's logits at once.
    ///
    /// # Shapes
    /// - `hidden`: `[1, seq, hidden]`, `window`: `seq` ids
    fn hidden_nll(
        &self,
        _head: &HeadWeights<'_, B>,
        _hidden: &Tensor<B, 3>,
        _window: &[u32],
    ) -> Option<f64> {
        None
    }

    /// The next-token NLL of each row of `rows` (residual streams after the last layer) for
    /// its target, through `head`, a few rows at a time (as [`Kernels::hidden_nll`]).
    ///
    /// # Shapes
    /// - `rows`: `[n, hidden]`, `targets`: `n` ids → `n` NLLs
    fn token_nlls(
        &self,
        _head: &HeadWeights<'_, B>,
        _rows: &Tensor<B, 2>,
        _targets: &[u32],
    ) -> Option<Vec<f64>> {
        None
    }

    /// The residual stream after the last layer of continuations that share a context, packed
    /// as one sequence: the context's `prefix` tokens, then each branch's tokens (`branches`
    /// lengths). A branch sees the context and itself, at the positions that follow the
    /// context, so each of its rows equals that row of the unpacked `context + branch`, and the
    /// context runs once for all branches.
    ///
    /// # Shapes
    /// - `tokens`: `n` ids → `[n, hidden]`
    fn packed_hidden(
        &self,
        _model: &ModelWeights<'_, B>,
        _tokens: &[u32],
        _prefix: usize,
        _branches: &[usize],
    ) -> Option<Tensor<B, 2>> {
        None
    }

    /// Whether [`Kernels::forward`], [`Kernels::hidden`] and [`Kernels::forward_cached`] run
    /// the whole of `model`, every layer and the head, for one sequence of ids inside its
    /// vocabulary and positions: then the generic path needs none of its dense weights.
    fn runs_whole(&self, _model: &ModelWeights<'_, B>) -> bool {
        false
    }

    /// `xᵀ · x`.
    ///
    /// # Shapes
    /// - `x`: `[rows, width]` → `[width, width]`
    fn gram(&self, _x: &Tensor<B, 2>) -> Option<Tensor<B, 2>> {
        None
    }

    /// Per sample, `Σ_rows x²` per column, summed in f64 on the host (exact to f64 rounding),
    /// read from `x`'s own buffer.
    ///
    /// # Shapes
    /// - `x`: `[samples, rows, width]` → `samples` of `[width]`
    fn column_sum_sq(&self, _x: &Tensor<B, 3>) -> Option<Vec<Vec<f64>>> {
        None
    }

    /// The values of a float tensor of any rank in row-major order: a contiguous buffer the
    /// tensor holds alone is moved out, a shared one (a parameter's) copied straight from the
    /// buffer, where Burn would collect it element by element. `Err(x)` gives the tensor back
    /// where there is no such path.
    fn host_values(&self, x: FloatTensor<B>) -> Result<Vec<f32>, FloatTensor<B>> {
        Err(x)
    }

    /// The values of `xᵀ` in row-major order, read from `x`'s buffer without a copy of `x`
    /// first.
    ///
    /// # Shapes
    /// - `x`: `[rows, width]` → `width × rows` values
    fn host_transposed(&self, _x: &Tensor<B, 2>) -> Option<Vec<f32>> {
        None
    }

    /// Causal attention `softmax(q·kᵀ/√head_dim)·v` of queries that are the last of the keys'
    /// positions, with no window, accumulated in f32 whatever the tensors' type.
    ///
    /// # Shapes
    /// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]` → `[batch, heads, seq, head_dim]`
    fn causal_attention(
        &self,
        _q: &Tensor<B, 4>,
        _k: &Tensor<B, 4>,
        _v: &Tensor<B, 4>,
    ) -> Option<Tensor<B, 4>> {
        None
    }

    /// `a · b` with the product the fast linears use.
    ///
    /// # Shapes
    /// - `a`: `[m, k]`, `b`: `[k, n]` → `[m, n]`
    fn matmul(&self, _a: &Tensor<B, 2>, _b: &Tensor<B, 2>) -> Option<Tensor<B, 2>> {
        None
    }

    /// `x · weight`, a linear layer's product (its bias is the caller's).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, in]`, `weight`: `[in, out]` → `[batch, seq, out]`
    fn linear(&self, _x: &Tensor<B, 3>, _weight: &Tensor<B, 2>) -> Option<Tensor<B, 3>> {
        None
    }

    /// `x · weight` for each of `weights` (linear layers that read the same input: q, k and v,
    /// or gate and up), run together where that saves the backend work; `None` where the
    /// backend runs them one at a time ([`Kernels::linear`]).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, in]`, each weight `[in, out_i]` → each `[batch, seq, out_i]`
    fn linears(&self, _x: &Tensor<B, 3>, _weights: &[Tensor<B, 2>]) -> Option<Vec<Tensor<B, 3>>> {
        None
    }

    /// The weights of `weight` with the lowest scores `|w|·norms[row]` in f32 (Wanda's; norms
    /// of 1 give magnitude's) that `which` says, as a mask (`true`: zero it): the host's
    /// selection to the bit, by the backend's own kernels; `None` where the backend has none,
    /// or a score is not finite (the caller's other path runs, and the host's names the
    /// weight).
    ///
    /// # Shapes
    /// - `weight`: `[rows, cols]`, `norms`: `rows` → `[rows, cols]`
    fn lowest_scores(
        &self,
        _weight: &Tensor<B, 2>,
        _norms: &[f32],
        _which: Lowest,
    ) -> Option<Tensor<B, 2, Bool>> {
        None
    }

    /// Whether pruning should select on the device, leaving the weights there, rather than
    /// copy them to the host and back: on a GPU, where the copies are the cost.
    fn selects_on_device(&self) -> bool {
        false
    }

    /// Whether tensors live in host memory as f32, so a host copy becomes a tensor again by
    /// moving its buffer: cheaper than sending back a mask and zeroing on the device.
    fn host_resident(&self) -> bool {
        false
    }
}

/// `x · weight + bias` by the backend's product for linear layers where it has one (cuBLAS on
/// CUDA), Burn's `linear` otherwise.
///
/// # Shapes
/// - `x`: `[batch, seq, in]`, `weight`: `[in, out]`, `bias`: `[out]` → `[batch, seq, out]`
pub fn linear_forward<B: Backend>(
    x: Tensor<B, 3>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
) -> Tensor<B, 3> {
    match kernels::<B>().linear(&x, &weight) {
        Some(y) => match bias {
            Some(bias) => y + bias.unsqueeze::<3>(),
            None => y,
        },
        None => burn::tensor::module::linear(x, weight, bias),
    }
}

/// A linear layer applied to `x` by [`linear_forward`].
///
/// # Shapes
/// - `x`: `[batch, seq, in]` → `[batch, seq, out]`
pub fn project<B: Backend>(layer: &Linear<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    linear_forward(x, layer.weight.val(), layer.bias.as_ref().map(|b| b.val()))
}

/// The linear layers `layers` applied to the same `x`, as [`project`] each, together where the
/// backend has [`Kernels::linears`] (on CUDA: one wait for the queued kernels before the
/// products and one after them all, where one product alone waits twice).
///
/// # Shapes
/// - `x`: `[batch, seq, in]` → each `[batch, seq, out_i]`
pub fn project_all<B: Backend, const N: usize>(
    layers: [&Linear<B>; N],
    x: Tensor<B, 3>,
) -> [Tensor<B, 3>; N] {
    let weights: Vec<Tensor<B, 2>> = layers.iter().map(|l| l.weight.val()).collect();
    let together = kernels::<B>()
        .linears(&x, &weights)
        .and_then(|ys| <[Tensor<B, 3>; N]>::try_from(ys).ok());
    match together {
        Some(ys) => {
            let mut layer = layers.iter();
            ys.map(|y| match layer.next().and_then(|l| l.bias.as_ref()) {
                Some(bias) => y + bias.val().unsqueeze::<3>(),
                None => y,
            })
        }
        None => layers.map(|l| project(l, x.clone())),
    }
}

/// The kernels of every backend but the fused CPU one: Burn's generic ops, except on CUDA,
/// where attention takes CubeCL's flash kernel and the products cuBLAS.
struct Portable;

impl<B: Backend> Kernels<B> for Portable {
    #[cfg(feature = "cuda")]
    fn matmul(&self, a: &Tensor<B, 2>, b: &Tensor<B, 2>) -> Option<Tensor<B, 2>> {
        cublas::matmul(a, b)
    }

    #[cfg(feature = "cuda")]
    fn linear(&self, x: &Tensor<B, 3>, weight: &Tensor<B, 2>) -> Option<Tensor<B, 3>> {
        cublas::linear(x, weight)
    }

    #[cfg(feature = "cuda")]
    fn linears(&self, x: &Tensor<B, 3>, weights: &[Tensor<B, 2>]) -> Option<Vec<Tensor<B, 3>>> {
        cublas::linears(x, weights)
    }

    #[cfg(feature = "cuda")]
    fn gram(&self, x: &Tensor<B, 2>) -> Option<Tensor<B, 2>> {
        cublas::gram(x)
    }

    #[cfg(feature = "cuda")]
    fn lowest_scores(
        &self,
        weight: &Tensor<B, 2>,
        norms: &[f32],
        which: Lowest,
    ) -> Option<Tensor<B, 2, Bool>> {
        column_select::lowest_scores(weight, norms, which)
    }

    #[cfg(feature = "cuda")]
    fn selects_on_device(&self) -> bool {
        cublas::is_cuda::<B>()
    }

    #[cfg(feature = "cuda")]
    fn causal_attention(
        &self,
        q: &Tensor<B, 4>,
        k: &Tensor<B, 4>,
        v: &Tensor<B, 4>,
    ) -> Option<Tensor<B, 4>> {
        match cuda_attention().unwrap_or_default() {
            CudaAttention::Flash => cuda::flash_attention(q, k, v),
            CudaAttention::Cublas => cublas_attention::causal_attention(q, k, v),
        }
    }
}

/// The kernels of backend `B`: the fused CPU kernels for burn-ndarray in f32, for every other
/// backend Burn's generic ops (with CUDA's flash attention and cuBLAS products). It compares
/// type ids only, so it costs nothing at run time.
pub fn kernels<B: Backend>() -> &'static dyn Kernels<B> {
    let fused: &'static dyn Kernels<NdArray<f32>> = &fused::Fused;
    match (&fused as &dyn Any).downcast_ref::<&'static dyn Kernels<B>>() {
        Some(kernels) => *kernels,
        None => &Portable,
    }
}

/// Test input for column sums of squares: `rows × width` values in [-0.5, 0.5) whose first row
/// is 4096× larger, as SmolLM2's MLP hidden is at position 0 (one f32 running sum drifts ~1e-4
/// on it), and the exact sums of squares of its columns.
#[cfg(test)]
pub(crate) fn massive_first_row(rows: usize, width: usize) -> (Vec<f32>, Vec<f64>) {
    let values: Vec<f32> = (0..rows * width)
        .map(|i| {
            let v = ((i * 7919) % 1000) as f32 / 997.0 - 0.5;
            if i < width {
                v * 4096.0
            } else {
                v
            }
        })
        .collect();
    let exact = (0..width)
        .map(|c| {
            (0..rows)
                .map(|r| f64::from(values[r * width + c]).powi(2))
                .sum()
        })
        .collect();
    (values, exact)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    /// A linear layer `[in, out]` with (or without) a bias, from a small LCG.
    fn layer<B: Backend>(inputs: usize, outputs: usize, bias: bool, seed: usize) -> Linear<B> {
        let values = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * 7919 + seed * 104_729) % 211) as f32 / 211.0 - 0.5)
                .collect()
        };
        let device = Default::default();
        let weight = Tensor::from_data(
            TensorData::new(values(inputs * outputs), [inputs, outputs]),
            &device,
        );
        Linear {
            weight: Param::from_tensor(weight),
            bias: bias.then(|| {
                Param::from_tensor(Tensor::from_data(
                    TensorData::new(values(outputs), [outputs]),
                    &device,
                ))
            }),
        }
    }

    fn projections_together_equal_each_alone<B: Backend>() {
        let (a, b, c) = (
            layer::<B>(6, 4, true, 1),
            layer::<B>(6, 2, false, 2),
            layer::<B>(6, 3, true, 3),
        );
        let values: Vec<f32> = (0..2 * 5 * 6)
            .map(|i| (i % 13) as f32 * 0.1 - 0.6)
            .collect();
        let x = Tensor::<B, 3>::from_data(TensorData::new(values, [2, 5, 6]), &Default::default());
        let together = project_all([&a, &b, &c], x.clone());
        for (y, l) in together.into_iter().zip([&a, &b, &c]) {
            let alone: Vec<f32> = project(l, x.clone()).into_data().to_vec().unwrap();
            let y: Vec<f32> = y.into_data().to_vec().unwrap();
            assert_eq!(y, alone);
        }
    }

    #[test]
    fn cuda_attention_paths_parse_and_others_name_the_variable() {
        assert_eq!("flash".parse(), Ok(CudaAttention::Flash));
        assert_eq!(" cublas".parse(), Ok(CudaAttention::Cublas));
        assert_eq!(CudaAttention::default(), CudaAttention::Flash);
        for bad in ["", "Flash", "cuBLAS", "sdpa"] {
            let err = bad.parse::<CudaAttention>().unwrap_err();
            assert!(
                err.contains(CUDA_ATTENTION_VAR) && err.contains("`cublas`"),
                "{err}"
            );
        }
    }

    #[test]
    fn flash_tilings_parse_and_print_as_planes_seq_q_seq_kv() {
        let t: FlashTiling = "8:2:4".parse().unwrap();
        assert_eq!(
            t,
            FlashTiling {
                planes: 8,
                seq_q: 2,
                seq_kv: 4
            }
        );
        assert_eq!(t.to_string(), "8:2:4");
        assert_eq!(FlashTiling::default().to_string(), "4:2:1");
        for bad in ["", "4", "4:1", "4:1:1:1", "4:0:1", "4:x:1", "256:1:1"] {
            let err = bad.parse::<FlashTiling>().unwrap_err();
            assert!(
                err.contains(FLASH_TILING_VAR) && err.contains("planes:seq_q:seq_kv"),
                "{err}"
            );
        }
    }

    #[test]
    fn projections_together_equal_each_alone_with_their_biases() {
        projections_together_equal_each_alone::<NdArray<f32>>();
        projections_together_equal_each_alone::<Flex>();
    }

    #[test]
    fn burn_ndarray_in_f32_gets_the_fused_kernels_and_other_backends_none() {
        let x = Tensor::<NdArray<f32>, 2>::from_data(
            TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]),
            &Default::default(),
        );
        assert!(kernels::<NdArray<f32>>().gram(&x).is_some());
        let x = Tensor::<Flex, 2>::from_data(
            TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]),
            &Default::default(),
        );
        assert!(kernels::<Flex>().gram(&x).is_none());
    }
}
