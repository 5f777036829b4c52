//! The whole-sequence forward pass on the CPU with fused kernels over plain f32 slices: every
//! linear is `gemm` calls (pure-Rust AVX2/AVX-512/NEON kernels, one band of rows per core), the
//! residual adds are folded into the `o_proj` and `down_proj` products, RoPE is applied in
//! place, and causal grouped-query attention runs per kv group in blocks of query rows against
//! only the keys they may see, with no repeated kv heads, no mask tensor and no transposed
//! copies. Softmax, SwiGLU, RMSNorm and the NLL run on the vectorised kernels of
//! [`super::vecmath`]. A layer with experts routes its tokens on the host and runs each
//! expert's linears as one product over the tokens routed to it (`feed_forward.rs`).
//!
//! Burn's generic path does the same arithmetic through one tensor op at a time and spends more
//! than half of a forward pass outside matrix products (copies for `swap_dims`/`repeat_kv`,
//! separate element-wise passes). [`Fused`] is the [`Kernels`] of burn-ndarray in f32 (the
//! default CPU backend), chosen by [`super::kernels`]; it runs where the weights are contiguous.
//! It reads the model through the borrowed views of [`super`] (never the decoder's own types),
//! and the weights are borrowed, never copied.

use burn::backend::ndarray::NdArrayTensor;
use burn::backend::NdArray;
use burn::prelude::*;
use burn::tensor::TensorPrimitive;

use rayon::prelude::*;

use super::vecmath;
use super::{
    FeedForwardWeights, HeadWeights, HostKv, Kernels, LayerKv, LayerWeights, LinearInput,
    MlpWeights, ModelWeights, NormWeights,
};
use crate::model::arch::rope;
use crate::model::arch::{AttentionSettings, LogitScale, Residual};

mod attention;
mod feed_forward;
mod head;
mod held;
mod host;
mod norm;
mod product;

use super::sparse::SparseLinear;
use attention::{attend_rows, rope, Packing, RopeTables};
use feed_forward::{experts_block, FeedForwardRef};
pub use head::HEAD_ROWS;
use head::{fused_hidden_nll, fused_token_nlls};
use held::{dims_of, head_ref, hold_head, hold_layer, layer_ref, Held, HeldLayer};
use norm::{head_norm_in_place, norm_rows, pre_norm_rows, rms_norm_in_place};
pub use product::kernel_name as product_kernel_name;
use product::{compressed_matmul, matmul, View};

/// The backend these kernels serve.
type Nd = NdArray<f32>;

/// Query rows per attention block: each block attends to the keys up to its last row.
pub const ATTENTION_ROWS: usize = 64;

/// Rows of `x` up to which a linear held compressed multiplies in that form; more rows run
/// the dense product, bound by arithmetic rather than the bytes of the weight.
const SPARSE_ROWS: usize = 4;

/// One linear's borrowed weight `[in, out]` and optional bias `[out]`, and its compressed form
/// where the model holds one (then the weight may be empty: released, [`Llama::sparsify`]).
///
/// [`Llama::sparsify`]: crate::model::decoder::Llama::sparsify
struct LinearRef<'a> {
    weight: &'a [f32],
    bias: Option<&'a [f32]>,
    inputs: usize,
    outputs: usize,
    sparse: Option<&'a SparseLinear>,
}

impl LinearRef<'_> {
    /// `out[seq, outputs] (+)= x[seq, inputs] · W (+ bias)`: compressed for up to
    /// [`SPARSE_ROWS`] rows where the weight is held so; for more, the dense product, of panels
    /// expanded from the compressed form where the dense weight was released.
    fn apply(&self, x: &[f32], seq: usize, out: &mut [f32], accumulate: bool) {
        match self.sparse {
            Some(sparse) if seq <= SPARSE_ROWS => sparse.product(
                &x[..seq * self.inputs],
                seq,
                &mut out[..seq * self.outputs],
                accumulate,
            ),
            Some(sparse) if self.weight.is_empty() => compressed_matmul(
                &mut out[..seq * self.outputs],
                accumulate,
                View::dense(x, seq, self.inputs),
                sparse,
            ),
            _ => matmul(
                out,
                self.outputs,
                accumulate,
                View::dense(x, seq, self.inputs),
                View::dense(self.weight, self.inputs, self.outputs),
                true,
            ),
        }
        if let Some(bias) = self.bias {
            for row in out.chunks_mut(self.outputs) {
                row.iter_mut().zip(bias).for_each(|(o, b)| *o += b);
            }
        }
    }
}

/// A borrowed layer norm: an RMSNorm's gain, or a LayerNorm's gain and bias.
#[derive(Clone, Copy)]
struct NormRef<'a> {
    weight: &'a [f32],
    /// The bias of a LayerNorm, where it has one.
    bias: Option<&'a [f32]>,
    /// A LayerNorm (the mean taken off first); `false` for an RMSNorm.
    centred: bool,
}

/// A borrowed q/k norm: an RMSNorm over each `gain`-wide row, or, with a `group`, a bias-free
/// LayerNorm over each `group` elements (one head) with that part of the gain (Cohere).
#[derive(Clone, Copy)]
struct HeadNormRef<'a> {
    gain: &'a [f32],
    group: Option<usize>,
}

/// Borrowed weights of one decoder layer.
struct LayerRef<'a> {
    q: LinearRef<'a>,
    k: LinearRef<'a>,
    v: LinearRef<'a>,
    o: LinearRef<'a>,
    /// One MLP, or experts.
    feed_forward: FeedForwardRef<'a>,
    /// `None` where attention reads the residual stream (OLMo 2).
    input_norm: Option<NormRef<'a>>,
    /// `None` where the MLP reads the residual stream (OLMo 2).
    post_norm: Option<NormRef<'a>>,
    /// q and k norms, per head `[head_dim]` (Qwen3) or over a position's heads (OLMo 2,
    /// Cohere).
    q_norm: Option<HeadNormRef<'a>>,
    k_norm: Option<HeadNormRef<'a>>,
    /// Heads, window, scale, soft-cap, rotation and bias, as the decoder describes them.
    attention: &'a AttentionSettings,
    /// Norms of the attention and MLP outputs before the residual adds (Gemma).
    output_norms: Option<[&'a [f32]; 2]>,
    /// How the attention and MLP outputs join the residual stream (GPT-NeoX, Granite).
    residual: Residual,
}

/// Shapes shared by every layer.
#[derive(Clone, Copy)]
struct Dims<'a> {
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f64,
    /// The factor of `q·k`.
    scale: f32,
    /// Scaled scores `s` become `cap · tanh(s / cap)` before the mask (Gemma 2).
    softcap: Option<f32>,
    /// ALiBi's slope of each query head: `slope · key position` is added to the scaled
    /// scores (BLOOM).
    alibi: Option<&'a [f32]>,
    /// Queries, keys and values clamped to `±clip` after their projections (OLMo).
    clip_qkv: Option<f32>,
}

/// Borrowed weights of the whole model.
struct DecoderRef<'a> {
    layers: Vec<LayerRef<'a>>,
    head: HeadRef<'a>,
    inv_freq: &'a [f32],
    /// LongRoPE's frequencies past the pre-training context, with its length.
    long_inv_freq: Option<(usize, &'a [f32])>,
    /// The factor of the model's cosines and sines (YaRN's or LongRoPE's attention factor; 1).
    rope_scale: f32,
    dims: Dims<'a>,
}

/// Borrowed embeddings, final norm and LM head (the tied embeddings when `lm_head` is None).
struct HeadRef<'a> {
    embed: &'a [f32],
    /// The factor of the embeddings on their way into the first layer (Gemma).
    embed_scale: Option<f32>,
    vocab: usize,
    hidden: usize,
    norm: NormRef<'a>,
    eps: f64,
    lm_head: Option<LinearRef<'a>>,
    /// Learned position embeddings, position `p` at row `p + position_offset` (OPT's 2,
    /// GPT-2's 0).
    positions: Option<&'a [f32]>,
    /// The row of `positions` that holds position 0.
    position_offset: usize,
    /// The norm of the embeddings before the first layer (BLOOM).
    embed_norm: Option<NormRef<'a>>,
    /// Logits `l` become `cap · tanh(l / cap)` (Gemma 2).
    final_softcap: Option<f32>,
    /// The factor or divisor of the logits (Cohere, Granite).
    logit_scale: Option<LogitScale>,
}

impl HeadRef<'_> {
    /// Whether positions `0..count` have rows in the learned position table (always, without
    /// one).
    fn has_positions(&self, count: usize) -> bool {
        self.positions
            .is_none_or(|table| (count + self.position_offset) * self.hidden <= table.len())
    }
}

/// Work buffers of the layer pass, sized on first use and reused by every layer of a forward
/// pass: fresh buffers cost a page fault and a zeroed page per 4 KiB, in every layer. Each is
/// fully overwritten before it is read.
#[derive(Default)]
struct Scratch {
    normed: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    /// The attention block's output, held while the MLP runs beside it (parallel residual).
    attn_out: Vec<f32>,
    /// The experts' output.
    experts_out: Vec<f32>,
}

/// `buffer` resized to `len` values.
fn sized(buffer: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buffer.resize(len, 0.0);
    buffer
}

/// One decoder layer over `x` (consecutive sequences of `seq` tokens), updated in place;
/// with a `cache` (one sequence), `x`'s rows continue the positions whose keys and values it
/// holds, and their own are appended to it. `observe(input, rows, width)` sees the input of
/// every linear once per shared input. With
/// `output` false the layer stops once `down_proj`'s input is observed: `x` then holds the
/// residual stream after attention (the layer's input with a parallel residual), not the
/// layer's output.
///
/// # Shapes
/// - `x`: `[sequences * seq, hidden]`
#[allow(clippy::too_many_arguments)]
fn layer_forward(
    layer: &LayerRef,
    d: &Dims<'_>,
    x: &mut [f32],
    tables: RopeTables,
    output: bool,
    scratch: &mut Scratch,
    cache: Option<&mut LayerKv>,
    observe: &mut dyn FnMut(LinearInput, &[f32], usize),
) {
    let (hidden, hd) = (d.hidden, d.head_dim);
    let window = layer.attention.sliding_window;
    let rows = x.len() / hidden;
    let normed = sized(&mut scratch.normed, rows * hidden);
    let q = sized(&mut scratch.q, rows * d.heads * hd);
    let k = sized(&mut scratch.k, rows * d.kv_heads * hd);
    let v = sized(&mut scratch.v, rows * d.kv_heads * hd);
    pre_norm_rows(x, layer.input_norm, d.eps, normed);
    observe(LinearInput::AttnIn, normed, hidden);
    project_qkv(layer, d, normed, [&mut *q, &mut *k, &mut *v], tables);
    let q_width = d.heads * hd;
    match cache {
        Some((keys, values)) => {
            keys.extend_from_slice(k);
            values.extend_from_slice(v);
            let start = keys.len() / (d.kv_heads * hd) - rows;
            attend_rows(q, keys, values, start, d, tables, window);
        }
        None => attend_rows(q, k, v, 0, d, tables, window),
    }
    // q now holds the attention's output.
    let attn = q;
    observe(LinearInput::AttnOut, attn, q_width);
    // With a parallel residual the MLP reads the layer's input too: the attention's output
    // waits beside it, added with the MLP's at the end.
    let attn_out = if layer.residual.parallel {
        let attn_out = sized(&mut scratch.attn_out, rows * hidden);
        layer.o.apply(attn, rows, attn_out, false);
        Some(attn_out)
    } else {
        residual_add(
            &layer.o,
            attn,
            x,
            normed,
            OutputScale {
                norm: layer.output_norms.map(|[a, _]| a),
                eps: d.eps,
                factor: layer.residual.scale,
            },
        );
        None
    };
    pre_norm_rows(x, layer.post_norm, d.eps, normed);
    observe(LinearInput::MlpIn, normed, hidden);
    let scale = OutputScale {
        norm: layer.output_norms.map(|[_, m]| m),
        eps: d.eps,
        factor: layer.residual.scale,
    };
    let mlp = match &layer.feed_forward {
        FeedForwardRef::Dense(mlp) => mlp,
        FeedForwardRef::Experts(moe) => {
            let out = output.then(|| sized(&mut scratch.experts_out, rows * hidden));
            experts_block(moe, normed, tables.seq, out, observe);
            if output {
                add_output(x, &mut scratch.experts_out, attn_out.as_deref(), scale);
            }
            return;
        }
    };
    let intermediate = mlp.width();
    let gate = sized(&mut scratch.gate, rows * intermediate);
    mlp.hidden_into(normed, rows, gate, &mut scratch.up);
    observe(LinearInput::MlpHidden, gate, intermediate);
    if !output {
        return;
    }
    match attn_out {
        // `normed` is free: it takes the MLP's output.
        Some(attn_out) => {
            mlp.down.apply(gate, rows, normed, false);
            add_output(x, normed, Some(attn_out), scale);
        }
        None => residual_add(&mlp.down, gate, x, normed, scale),
    }
}

/// Queries, keys and values of `normed`'s rows into `qkv`: projected, clamped (OLMo), the
/// queries and keys normed (Qwen3, OLMo 2, Cohere) and rotated.
///
/// # Shapes
/// - `normed`: `[rows, hidden]`; `qkv`: `[rows, heads · head_dim]`, `[rows, kv_heads · head_dim]` ×2
fn project_qkv(
    layer: &LayerRef,
    d: &Dims<'_>,
    normed: &[f32],
    qkv: [&mut [f32]; 3],
    tables: RopeTables,
) {
    let rows = normed.len() / d.hidden;
    let [q, k, v] = qkv;
    layer.q.apply(normed, rows, q, false);
    layer.k.apply(normed, rows, k, false);
    layer.v.apply(normed, rows, v, false);
    if let Some(c) = d.clip_qkv {
        for t in [&mut *q, &mut *k, &mut *v] {
            t.par_chunks_mut(4096)
                .for_each(|t| t.iter_mut().for_each(|x| *x = x.clamp(-c, c)));
        }
    }
    if let (Some(q_norm), Some(k_norm)) = (layer.q_norm, layer.k_norm) {
        head_norm_in_place(q, q_norm, d.eps);
        head_norm_in_place(k, k_norm, d.eps);
    }
    if layer.attention.rotary {
        let interleaved = layer.attention.interleaved;
        rope(q, d.heads, d.head_dim, tables, interleaved);
        rope(k, d.kv_heads, d.head_dim, tables, interleaved);
    }
}

/// What happens to a block's output before the residual add: an output norm (Gemma) with its
/// epsilon, then a factor (Granite).
struct OutputScale<'a> {
    norm: Option<&'a [f32]>,
    eps: f64,
    factor: Option<f32>,
}

/// `x += input · W`, the product normed and scaled first as `scale` says (then in `buffer`,
/// `x`'s size); without either the residual add is folded into the product.
fn residual_add(
    linear: &LinearRef,
    input: &[f32],
    x: &mut [f32],
    buffer: &mut [f32],
    scale: OutputScale,
) {
    let rows = x.len() / linear.outputs.max(1);
    if scale.norm.is_none() && scale.factor.is_none() {
        return linear.apply(input, rows, x, true);
    }
    linear.apply(input, rows, buffer, false);
    add_output(x, buffer, None, scale);
}

/// `x += out`, `out` normed and scaled first as `scale` says; with a parallel residual's
/// `attn_out` (then without an output norm), `x += out · f + attn_out · f` in transformers'
/// order, `mlp_output + attn_output + hidden_states`.
fn add_output(x: &mut [f32], out: &mut [f32], attn_out: Option<&[f32]>, scale: OutputScale) {
    let f = scale.factor.unwrap_or(1.0);
    if let Some(attn_out) = attn_out {
        x.par_iter_mut()
            .zip(out.par_iter())
            .zip(attn_out.par_iter())
            // `(m + a) + x`, addition commuting exactly.
            .for_each(|((x, m), a)| *x += m * f + a * f);
        return;
    }
    if let Some(norm) = scale.norm {
        rms_norm_in_place(out, norm, scale.eps);
    }
    x.par_chunks_mut(4096)
        .zip(out.par_chunks(4096))
        .for_each(|(x, b)| x.iter_mut().zip(b).for_each(|(x, b)| *x += b * f));
}

/// The residual stream of one sequence after the last layer.
///
/// # Shapes
/// - `tokens`: `seq` ids → `[seq, hidden]`
fn sequence_hidden(model: &DecoderRef, tokens: &[usize]) -> Vec<f32> {
    let positions: Vec<usize> = (0..tokens.len()).collect();
    run_layers(model, tokens, &positions, None, None)
}

/// The residual stream after the last layer of `tokens` at `positions` (rotary angles), every
/// row seeing the rows before it, or as `packing` says; with a `cache` (one layer each), also
/// the positions it holds, and their keys and values are appended to it.
///
/// # Shapes
/// - `tokens`, `positions`: `seq` values → `[seq, hidden]`
fn run_layers(
    model: &DecoderRef,
    tokens: &[usize],
    positions: &[usize],
    packing: Option<Packing>,
    mut cache: Option<&mut [LayerKv]>,
) -> Vec<f32> {
    let d = &model.dims;
    let (seq, hidden) = (tokens.len(), d.hidden);
    let mut x = Vec::with_capacity(seq * hidden);
    for &t in tokens {
        x.extend_from_slice(&model.head.embed[t * hidden..(t + 1) * hidden]);
    }
    if let Some(scale) = model.head.embed_scale {
        x.iter_mut().for_each(|v| *v *= scale);
    }
    if let Some(table) = model.head.positions {
        for (row, &p) in x.chunks_mut(hidden).zip(positions) {
            let at = (p + model.head.position_offset) * hidden;
            row.iter_mut()
                .zip(&table[at..at + hidden])
                .for_each(|(v, t)| *v += t);
        }
    }
    if let Some(norm) = model.head.embed_norm {
        let embedded = std::mem::replace(&mut x, vec![0.0; seq * hidden]);
        norm_rows(&embedded, norm, model.head.eps, &mut x);
    }
    let end = positions.iter().max().map_or(0, |p| p + 1);
    let inv_freq = rope::frequencies_for(model.inv_freq, model.long_inv_freq, end);
    let (cos, sin) = rope::angles(inv_freq, model.rope_scale, positions);
    // Gemma 3's local layers share one set of frequencies of their own.
    let local = model
        .layers
        .iter()
        .find_map(|l| l.attention.inv_freq.as_deref())
        .map(|f| (f, rope::angles(f, 1.0, positions)));
    let mut scratch = Scratch::default();
    for (i, layer) in model.layers.iter().enumerate() {
        let (cos, sin, stride) = match (layer.attention.inv_freq.as_deref(), &local) {
            (Some(own), Some((f, (cos, sin)))) if own == *f => (cos, sin, f.len()),
            _ => (&cos, &sin, inv_freq.len()),
        };
        let tables = RopeTables {
            cos,
            sin,
            stride,
            half: stride,
            seq,
            packing,
        };
        layer_forward(
            layer,
            d,
            &mut x,
            tables,
            true,
            &mut scratch,
            cache.as_deref_mut().map(|c| &mut c[i]),
            &mut |_, _, _| {},
        );
    }
    x
}

/// The f32 storage of a burn-ndarray tensor, when it is f32 and contiguous.
fn contiguous(tensor: &NdArrayTensor) -> Option<&[f32]> {
    match tensor {
        NdArrayTensor::F32(storage) => storage.view().to_slice(),
        _ => None,
    }
}

/// A burn-ndarray f32 tensor owning `values`.
fn to_tensor<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Option<Tensor<Nd, D>> {
    let array = ndarray::ArcArray::from_shape_vec(ndarray::IxDyn(&shape), values).ok()?;
    Some(Tensor::<Nd, D>::from_primitive(TensorPrimitive::Float(
        NdArrayTensor::from(array),
    )))
}

/// The fused CPU kernels, for burn-ndarray in f32 ([`super::kernels`] picks them). Each
/// operation takes contiguous f32 storage and returns `None` for any other layout.
pub(super) struct Fused;

impl Kernels<Nd> for Fused {
    /// `None` unless the weights, input and rotary tables are contiguous f32.
    fn layer_forward(
        &self,
        layer: &LayerWeights<'_, Nd>,
        x: &Tensor<Nd, 3>,
        cos: &Tensor<Nd, 2>,
        sin: &Tensor<Nd, 2>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<Nd, 3>),
    ) -> Option<Tensor<Nd, 3>> {
        let [batch, seq, hidden] = x.dims();
        let values = fused_layer(layer, x, cos, sin, true, observe)?;
        to_tensor(values, [batch, seq, hidden])
    }

    fn layer_inputs(
        &self,
        layer: &LayerWeights<'_, Nd>,
        x: &Tensor<Nd, 3>,
        cos: &Tensor<Nd, 2>,
        sin: &Tensor<Nd, 2>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<Nd, 3>),
    ) -> Option<()> {
        fused_layer(layer, x, cos, sin, false, observe).map(|_| ())
    }

    fn forward(
        &self,
        model: &ModelWeights<'_, Nd>,
        tokens: &Tensor<Nd, 2, Int>,
    ) -> Option<Tensor<Nd, 3>> {
        fused_sequences(model, tokens, true)
    }

    fn hidden(
        &self,
        model: &ModelWeights<'_, Nd>,
        tokens: &Tensor<Nd, 2, Int>,
    ) -> Option<Tensor<Nd, 3>> {
        fused_sequences(model, tokens, false)
    }

    /// One pass per row for the maximum and one for the exponentials (accumulated in f64),
    /// rows in parallel, summed in order (the result does not depend on how rayon splits the
    /// rows).
    fn window_nll(&self, logits: &Tensor<Nd, 3>, window: &[u32]) -> Option<f64> {
        let [batch, seq, vocab] = logits.dims();
        if batch != 1 || window.len() != seq || window[1..].iter().any(|&t| t as usize >= vocab) {
            return None;
        }
        let primitive = logits.clone().into_primitive().tensor();
        let data = contiguous(&primitive)?;
        let per_token: Vec<f64> = data
            .par_chunks(vocab)
            .zip(window[1..].par_iter())
            .map(|(row, &target)| vecmath::token_nll(row, target as usize))
            .collect();
        Some(per_token.iter().sum())
    }

    /// The final norm and LM head run [`HEAD_ROWS`] rows at a time, with the kernels of
    /// [`Kernels::forward`], and the per-token terms are summed in the order
    /// [`Kernels::window_nll`] sums them, so the result is the same to the bit.
    fn hidden_nll(
        &self,
        head: &HeadWeights<'_, Nd>,
        hidden: &Tensor<Nd, 3>,
        window: &[u32],
    ) -> Option<f64> {
        fused_hidden_nll(head, hidden, window)
    }

    fn forward_cached(
        &self,
        model: &ModelWeights<'_, Nd>,
        tokens: &Tensor<Nd, 2, Int>,
        cache: &mut HostKv,
    ) -> Option<Tensor<Nd, 3>> {
        fused_forward_cached(model, tokens, cache)
    }

    fn runs_whole(&self, model: &ModelWeights<'_, Nd>) -> bool {
        with_decoder(model, |_| Some(())).is_some()
    }

    fn packed_hidden(
        &self,
        model: &ModelWeights<'_, Nd>,
        tokens: &[u32],
        prefix: usize,
        branches: &[usize],
    ) -> Option<Tensor<Nd, 2>> {
        fused_packed_hidden(model, tokens, prefix, branches)
    }

    fn token_nlls(
        &self,
        head: &HeadWeights<'_, Nd>,
        rows: &Tensor<Nd, 2>,
        targets: &[u32],
    ) -> Option<Vec<f64>> {
        let [count, width] = rows.dims();
        if count != targets.len() || width != head.embed.dims()[1] {
            return None;
        }
        fused_token_nlls(head, rows.clone().into_primitive().tensor(), targets)
    }

    /// One gemm call on every core.
    fn gram(&self, x: &Tensor<Nd, 2>) -> Option<Tensor<Nd, 2>> {
        let (primitive, [rows, width]) = matrix_of(x)?;
        let data = contiguous(&primitive)?;
        let mut gram = vec![0.0f32; width * width];
        matmul(
            &mut gram,
            width,
            false,
            View::transposed(data, width, rows),
            View::dense(data, rows, width),
            true,
        );
        to_tensor(gram, [width, width])
    }

    /// In parallel over blocks of columns, each column summed in f64 and rounded once. An f32
    /// running sum is not enough: a token with a massive activation (SmolLM2's MLP hidden at
    /// position 0 is ~10³× the rest) makes every later square round against it, which moved
    /// these sums by ~1e-4 relative and Wanda's 70 % masks with them (issue 22).
    fn column_sum_sq(&self, x: &Tensor<Nd, 3>) -> Option<Vec<Vec<f64>>> {
        let [samples, rows, width] = x.dims();
        let primitive = x.clone().into_primitive().tensor();
        let data = contiguous(&primitive)?;
        let sample_sums = |sample: &[f32]| {
            let mut sums = vec![0.0f64; width];
            sums.par_chunks_mut(COLUMN_BLOCK)
                .enumerate()
                .for_each(|(block, acc)| {
                    let columns = block * COLUMN_BLOCK..block * COLUMN_BLOCK + acc.len();
                    for row in sample.chunks_exact(width.max(1)) {
                        for (a, &v) in acc.iter_mut().zip(&row[columns.clone()]) {
                            let v = f64::from(v);
                            *a += v * v;
                        }
                    }
                });
            sums
        };
        let per_sample = (rows * width).max(1);
        Some(
            data.chunks_exact(per_sample)
                .take(samples)
                .map(sample_sums)
                .collect(),
        )
    }

    fn host_resident(&self) -> bool {
        true
    }

    fn host_values(&self, x: NdArrayTensor) -> Result<Vec<f32>, NdArrayTensor> {
        host::values(x)
    }

    fn host_transposed(&self, x: &Tensor<Nd, 2>) -> Option<Vec<f32>> {
        host::transposed(x)
    }

    /// A linear's product by the fused GEMM, for what runs on Burn's generic ops here (a
    /// layer with experts, decoding with a cache): `None` for a layout it does not read.
    fn linear(&self, x: &Tensor<Nd, 3>, weight: &Tensor<Nd, 2>) -> Option<Tensor<Nd, 3>> {
        let [batch, seq, inputs] = x.dims();
        let outputs = weight.dims()[1];
        let rows = x.clone().reshape([batch * seq, inputs]);
        let y = self.matmul(&rows, weight)?;
        Some(y.reshape([batch, seq, outputs]))
    }

    /// The product every fused linear uses (one band of rows per core): what
    /// `wanda bench gemm` (B6) measures as the default CPU backend's GEMM.
    fn matmul(&self, a: &Tensor<Nd, 2>, b: &Tensor<Nd, 2>) -> Option<Tensor<Nd, 2>> {
        let (a, [m, k]) = matrix_of(a)?;
        let (b, [k_b, n]) = matrix_of(b)?;
        if k != k_b {
            return None;
        }
        let mut out = vec![0.0f32; m * n];
        matmul(
            &mut out,
            n,
            false,
            View::dense(contiguous(&a)?, m, k),
            View::dense(contiguous(&b)?, k, n),
            true,
        );
        to_tensor(out, [m, n])
    }
}

/// The fused layer for both layer entry points: the residual stream after the layer (or, with
/// `output` false, after its attention), row-major `[batch · seq, hidden]`; `None` unless the
/// weights, input and rotary tables are contiguous and the tables are `[seq, head_dim]`.
/// `observe` sees each linear's input as the decoder's generic layer shows it.
fn fused_layer(
    layer: &LayerWeights<Nd>,
    x: &Tensor<Nd, 3>,
    cos: &Tensor<Nd, 2>,
    sin: &Tensor<Nd, 2>,
    output: bool,
    observe: &mut dyn FnMut(LinearInput, &Tensor<Nd, 3>),
) -> Option<Vec<f32>> {
    let [batch, seq, hidden] = x.dims();
    let head_dim = layer.attention.head_dim;
    // The tables' width: the dimensions of a head that rotate.
    let rotary = cos.dims()[1];
    if cos.dims() != [seq, rotary] || sin.dims() != [seq, rotary] || rotary > head_dim {
        return None;
    }
    let mut held = Held::new(None);
    let layer_index = hold_layer(&mut held, layer)?;
    let x_index = held.push(x.clone());
    let cos_index = held.push(cos.clone());
    let sin_index = held.push(sin.clone());
    let refs = layer_ref(&held, &layer_index)?;
    // A layer with frequencies of its own rotates by its own tables (positions from 0: the
    // generic path calls without a cache only).
    let own = layer.attention.inv_freq.as_deref().map(|f| {
        let positions: Vec<usize> = (0..seq).collect();
        (rope::angles(f, 1.0, &positions), f.len())
    });
    let tables = match &own {
        Some(((cos, sin), half)) => RopeTables {
            cos,
            sin,
            stride: *half,
            half: *half,
            seq,
            packing: None,
        },
        None => RopeTables {
            cos: held.slice(cos_index)?,
            sin: held.slice(sin_index)?,
            stride: rotary,
            half: rotary / 2,
            seq,
            packing: None,
        },
    };
    let d = dims_of(layer, hidden, layer.norm_eps());
    let mut values = held.slice(x_index)?.to_vec();
    let mut failed = false;
    layer_forward(
        &refs,
        &d,
        &mut values,
        tables,
        output,
        &mut Scratch::default(),
        None,
        // An expert's tokens come one sample at a time, `[1, tokens, width]`, as the generic
        // block shows them.
        &mut |input, data, width| {
            let rows = data.len() / width.max(1);
            let shape = match rows == batch * seq {
                true => [batch, seq, width],
                false => [1, rows, width],
            };
            match to_tensor(data.to_vec(), shape) {
                Some(t) => observe(input, &t),
                None => failed = true,
            }
        },
    );
    (!failed).then_some(values)
}

/// The contiguous f32 storage of a burn-ndarray matrix, with its shape.
fn matrix_of(x: &Tensor<Nd, 2>) -> Option<(NdArrayTensor, [usize; 2])> {
    let dims = x.dims();
    let primitive = x.clone().into_primitive().tensor();
    contiguous(&primitive)?;
    Some((primitive, dims))
}

/// Columns summed per parallel job in [`Kernels::column_sum_sq`].
const COLUMN_BLOCK: usize = 128;

/// Each row of `tokens` through the fused layers, then through the head when `logits`; `None`
/// unless every weight is contiguous and every id is inside the vocabulary.
///
/// # Shapes
/// - `tokens`: `[batch, seq]` → logits `[batch, seq, vocab]`, or `[batch, seq, hidden]`
fn fused_sequences(
    model: &ModelWeights<Nd>,
    tokens: &Tensor<Nd, 2, Int>,
    logits: bool,
) -> Option<Tensor<Nd, 3>> {
    let [batch, seq] = tokens.dims();
    let ids: Vec<i64> = tokens.clone().into_data().convert::<i64>().to_vec().ok()?;
    with_decoder(model, |refs| {
        let vocab = refs.head.vocab;
        let ids = in_vocabulary(&ids, vocab)?;
        if !refs.head.has_positions(seq) {
            return None;
        }
        let width = if logits { vocab } else { refs.head.hidden };
        // Each sequence writes its rows in place: a whole batch of logits is the largest buffer
        // of the pass, and a second copy of it would cost its size again in page faults and
        // memory.
        let mut out = vec![0.0f32; batch * seq * width];
        for (row, dst) in ids
            .chunks(seq.max(1))
            .zip(out.chunks_mut((seq * width).max(1)))
        {
            let x = sequence_hidden(refs, row);
            if logits {
                refs.head.logits_into(&x, dst);
            } else {
                dst.copy_from_slice(&x);
            }
        }
        to_tensor(out, [batch, seq, width])
    })
}

/// `ids` as indices of the embedding table; `None` where one lies outside the vocabulary.
fn in_vocabulary(ids: &[i64], vocab: usize) -> Option<Vec<usize>> {
    ids.iter()
        .map(|&t| usize::try_from(t).ok().filter(|&t| t < vocab))
        .collect()
}

/// [`Kernels::forward_cached`] of the fused kernels: one sequence's new tokens through the fused
/// layers after the positions `cache` holds, their keys and values appended to it, then through
/// the head; `None`, the cache untouched, for a batch of more than one sequence or where
/// [`fused_sequences`] refuses.
///
/// # Shapes
/// - `tokens`: `[1, new]` → logits `[1, new, vocab]`
fn fused_forward_cached(
    model: &ModelWeights<Nd>,
    tokens: &Tensor<Nd, 2, Int>,
    cache: &mut HostKv,
) -> Option<Tensor<Nd, 3>> {
    let [batch, seq] = tokens.dims();
    if batch != 1 || seq == 0 {
        return None;
    }
    let ids: Vec<i64> = tokens.clone().into_data().convert::<i64>().to_vec().ok()?;
    with_decoder(model, |refs| {
        let (start, vocab) = (cache.len, refs.head.vocab);
        let tokens = in_vocabulary(&ids, vocab)?;
        if !refs.head.has_positions(start + seq) {
            return None;
        }
        let positions: Vec<usize> = (start..start + seq).collect();
        cache
            .layers
            .resize_with(refs.layers.len(), LayerKv::default);
        let x = run_layers(refs, &tokens, &positions, None, Some(&mut cache.layers));
        cache.len += seq;
        let mut logits = vec![0.0f32; seq * vocab];
        refs.head.logits_into(&x, &mut logits);
        to_tensor(logits, [1, seq, vocab])
    })
}

/// `f` on the borrowed weights of `model`; `None` unless every weight is contiguous f32.
fn with_decoder<R>(
    model: &ModelWeights<Nd>,
    f: impl FnOnce(&DecoderRef) -> Option<R>,
) -> Option<R> {
    let mut held = Held::new(model.sparse.clone());
    let head = hold_head(&mut held, &model.head);
    let layers: Vec<HeldLayer> = model
        .layers
        .iter()
        .map(|l| hold_layer(&mut held, l))
        .collect::<Option<_>>()?;
    let refs = DecoderRef {
        layers: layers
            .iter()
            .map(|l| layer_ref(&held, l))
            .collect::<Option<_>>()?,
        head: head_ref(&held, &head)?,
        inv_freq: model.inv_freq,
        long_inv_freq: model.long_inv_freq,
        rope_scale: model.rope_scale,
        dims: dims_of(model.layers.first()?, head.hidden, model.head.norm.eps),
    };
    f(&refs)
}

/// [`Kernels::packed_hidden`] of the fused kernels; `None` for a model with sliding-window
/// attention (a branch's window would have to skip the other branches).
fn fused_packed_hidden(
    model: &ModelWeights<Nd>,
    tokens: &[u32],
    prefix: usize,
    branches: &[usize],
) -> Option<Tensor<Nd, 2>> {
    if prefix + branches.iter().sum::<usize>() != tokens.len() {
        return None;
    }
    let mut positions: Vec<usize> = (0..prefix).collect();
    let mut own_start = vec![0usize; prefix];
    let mut start = prefix;
    for &len in branches {
        positions.extend(prefix..prefix + len);
        own_start.extend(std::iter::repeat_n(start, len));
        start += len;
    }
    with_decoder(model, |refs| {
        if refs
            .layers
            .iter()
            .any(|l| l.attention.sliding_window.is_some())
            || tokens.iter().any(|&t| t as usize >= refs.head.vocab)
            || !refs
                .head
                .has_positions(positions.iter().max().map_or(0, |p| p + 1))
        {
            return None;
        }
        let ids: Vec<usize> = tokens.iter().map(|&t| t as usize).collect();
        let packing = Packing {
            prefix,
            own_start: &own_start,
        };
        let x = run_layers(refs, &ids, &positions, Some(packing), None);
        to_tensor(x, [tokens.len(), refs.head.hidden])
    })
}

#[cfg(test)]
mod tests {
    use super::super::kernels;
    use super::attention::{attend_block, Mask};
    use super::*;

    use burn::backend::Flex;

    type B = NdArray<f32>;

    /// Regression (issue 22): a massive first row followed by thousands of ordinary ones, as
    /// SmolLM2's MLP hidden has at position 0. The column sums are the exact sums (f64), on a
    /// width that is not a multiple of the column block; an f32 running sum is ~1e-4 off.
    #[test]
    fn column_sum_sq_is_exact_after_a_massive_row() {
        let (rows, width) = (4096, COLUMN_BLOCK + 21);
        let (values, exact) = crate::model::kernels::massive_first_row(rows, width);
        let running: Vec<f64> = (0..width)
            .map(|c| {
                let sum: f32 = (0..rows).map(|r| values[r * width + c].powi(2)).sum();
                f64::from(sum)
            })
            .collect();
        let worst = |sums: &[f64]| {
            sums.iter()
                .zip(&exact)
                .map(|(s, e)| ((s - e) / e).abs())
                .fold(0.0f64, f64::max)
        };
        assert!(
            worst(&running) > 1e-5,
            "the input must defeat an f32 running sum"
        );
        // Two samples: the values, and the same values again; each gets its own sums.
        let twice = [values.clone(), values].concat();
        let x = Tensor::<B, 3>::from_data(
            TensorData::new(twice, [2, rows, width]),
            &Default::default(),
        );
        let fused = kernels::<B>().column_sum_sq(&x).unwrap();
        assert_eq!(fused.len(), 2);
        assert_eq!(fused[0], fused[1]);
        assert_eq!(fused[0].len(), width);
        assert!(worst(&fused[0]) <= 1e-14, "{}", worst(&fused[0]));
    }

    #[test]
    fn gram_by_hand() {
        // x = [[1, 2], [3, 4], [5, 6]]: xᵀx = [[1+9+25, 2+12+30], [.., 4+16+36]].
        let x = Tensor::<B, 2>::from_data(
            TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [3, 2]),
            &Default::default(),
        );
        let gram = kernels::<B>().gram(&x).unwrap().into_data();
        assert_eq!(gram.shape.dims::<2>(), [2, 2]);
        assert_eq!(gram.to_vec::<f32>().unwrap(), vec![35.0, 44.0, 44.0, 56.0]);
        let flex = Tensor::<Flex, 2>::from_data(
            TensorData::new(vec![1.0f32; 4], [2, 2]),
            &Default::default(),
        );
        assert!(
            kernels::<Flex>().gram(&flex).is_none(),
            "only burn-ndarray takes the fused path"
        );
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-5 * scale, "{x} vs {y} (scale {scale})");
        }
    }

    #[test]
    fn window_nll_by_hand() {
        // vocab 3, seq 3: row 0 = [0, ln 2, 0] → p(1) = 1/2; row 1 = [ln 3, 0, 0] → p(0) = 3/5.
        let (ln2, ln3) = (2f32.ln(), 3f32.ln());
        let logits = Tensor::<B, 3>::from_data(
            TensorData::new(vec![0.0, ln2, 0.0, ln3, 0.0, 0.0, 5.0, 5.0, 5.0], [1, 3, 3]),
            &Default::default(),
        );
        let nll = kernels::<B>().window_nll(&logits, &[0, 1, 9]);
        assert_eq!(nll, None, "target 9 is outside the vocabulary");
        // The first token is never a target, so any id is fine there.
        let nll = kernels::<B>()
            .window_nll(&logits, &[9, 1, 0])
            .expect("ndarray f32 logits");
        let want = -(0.5f64.ln()) - 0.6f64.ln();
        assert!((nll - want).abs() < 1e-6, "{nll} vs {want}");
    }

    #[test]
    fn causal_attention_of_one_head_by_hand() {
        // 1 head, 1 kv head, head_dim 2, seq 2: row 0 sees only v0; row 1 mixes v0 and v1 with
        // softmax([q1·k0, q1·k1] / √2).
        let d = Dims {
            hidden: 2,
            heads: 1,
            kv_heads: 1,
            head_dim: 2,
            eps: 0.0,
            scale: 1.0 / 2f32.sqrt(),
            softcap: None,
            alibi: None,
            clip_qkv: None,
        };
        let q = [1.0, 0.0, 0.0, 2.0];
        let k = [1.0, 0.0, 0.0, 1.0];
        let v = [1.0, 2.0, 3.0, 5.0];
        let out = attend_block(&q, 0, &k, &v, 0, 0..2, &d, Mask::Causal { window: None });
        let s = std::f32::consts::SQRT_2;
        let (e0, e1) = ((0.0f32 / s).exp(), (2.0f32 / s).exp());
        let (p0, p1) = (e0 / (e0 + e1), e1 / (e0 + e1));
        let want = [1.0, 2.0, p0 * 1.0 + p1 * 3.0, p0 * 2.0 + p1 * 5.0];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{out:?} vs {want:?}");
        }
    }

    #[test]
    fn a_group_of_query_heads_attends_as_each_head_alone() {
        // 2 query heads share 1 kv head over 3 positions; each head's output columns must equal
        // that head attended on its own.
        let group = Dims {
            hidden: 4,
            heads: 2,
            kv_heads: 1,
            head_dim: 2,
            eps: 0.0,
            scale: 1.0 / 2f32.sqrt(),
            softcap: None,
            alibi: None,
            clip_qkv: None,
        };
        let single = Dims {
            hidden: 2,
            heads: 1,
            ..group
        };
        let q = [
            1.0, 0.5, -1.0, 2.0, 0.0, 1.0, 3.0, -0.5, 2.0, 2.0, -1.0, 0.25,
        ];
        let k = [1.0, 0.0, 0.5, 1.0, -1.0, 2.0];
        let v = [1.0, 2.0, 3.0, 5.0, -2.0, 0.5];
        let together = attend_block(
            &q,
            0,
            &k,
            &v,
            0,
            0..3,
            &group,
            Mask::Causal { window: None },
        );
        for head in 0..2 {
            let q_head: Vec<f32> = q
                .chunks(4)
                .flat_map(|r| r[head * 2..][..2].to_vec())
                .collect();
            let alone = attend_block(
                &q_head,
                0,
                &k,
                &v,
                0,
                0..3,
                &single,
                Mask::Causal { window: None },
            );
            let columns: Vec<f32> = together
                .chunks(4)
                .flat_map(|r| r[head * 2..][..2].to_vec())
                .collect();
            assert_eq!(columns, alone, "head {head}");
        }
    }

    #[test]
    fn banded_product_equals_one_call_to_the_bit() {
        // 300 rows: two bands of 150 on two threads, or one band on one.
        let (m, k, n) = (300, 37, 29);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 31) % 97) as f32 / 13.0 - 3.0)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 17) % 89) as f32 / 11.0 - 4.0)
            .collect();
        let device = Default::default();
        let at = Tensor::<B, 2>::from_data(TensorData::new(a.clone(), [m, k]), &device);
        let bt = Tensor::<B, 2>::from_data(TensorData::new(b.clone(), [k, n]), &device);
        let banded: Vec<f32> = kernels::<B>()
            .matmul(&at, &bt)
            .unwrap()
            .into_data()
            .to_vec()
            .unwrap();
        let mut whole = vec![0.0f32; m * n];
        matmul(
            &mut whole,
            n,
            false,
            View::dense(&a, m, k),
            View::dense(&b, k, n),
            false,
        );
        assert_eq!(banded, whole);
        let reference: Vec<f32> = at.matmul(bt).into_data().to_vec().unwrap();
        close(&banded, &reference);
    }
}
