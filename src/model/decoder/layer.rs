//! The Llama-family decoder on Burn: embeddings, RMSNorm, rotary attention with grouped-query
//! heads and a causal mask, SwiGLU MLP, tied or untied LM head, optional q/k/v bias (Qwen2).
//!
//! Field names equal the Hugging Face checkpoint keys (`self_attn.q_proj`, `mlp.down_proj`,
//! `input_layernorm`, …) so layer paths in results read like Python Wanda's. Linear weights are
//! in Burn's `[in, out]` layout, the transpose of PyTorch's.

use std::borrow::Cow;
use std::sync::Arc;

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::model::arch::rope;
use crate::model::arch::FusedLinear;
use crate::model::arch::LlamaConfig;
use crate::model::arch::LogitScale;
use crate::model::arch::Residual;
use crate::model::decoder::{LatentSelfAttention, SelfAttention};
use crate::model::kernels::sparse::SparseWeights;
use crate::model::kernels::{
    kernels, linear_forward, project, FeedForwardWeights, HeadWeights, LayerWeights, ModelWeights,
};

use super::blocks::{Attention, KvCache, LayerContext, Mlp, Norm, SINKS};
use crate::model::decoder::{
    SharedExpert, SparseMoe, CORRECTION, ROUTER, SHARED_EXPERT, SHARED_GATE,
};
pub use crate::model::kernels::LinearInput;
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
    /// How the attention and MLP outputs join the residual stream (GPT-NeoX's side by side,
    /// Granite's factor).
    #[module(skip)]
    pub residual: Residual,
    /// The linears the checkpoint stores as one matrix (Phi-3's `qkv_proj` and `gate_up_proj`,
    /// GPT-NeoX's `query_key_value`): pruning selects over each such matrix as a whole, as the
    /// reference code, which sees the checkpoint's modules, does.
    #[module(skip)]
    pub stacked: &'static [FusedLinear],
}

impl<B: Backend> DecoderLayer<B> {
    /// Layer `i` of a model of `config` from its parts: `linear(name, inputs, outputs, bias)`
    /// and `norm(name, width)` give the linear and the norm a checkpoint names `name` (relative
    /// to the layer, without `.weight`, in Llama's names), the norm of the kind `config` says;
    /// `vector(name, len)` the values of the tensor `name` itself (GPT-OSS's sinks).
    /// `stacked` are the linears the checkpoint stores as one matrix ([`Self::stacked`]).
    pub(crate) fn assemble<E>(
        config: &LlamaConfig,
        i: usize,
        stacked: &'static [FusedLinear],
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
                settings: config.attention_settings(i),
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
            residual: config.residual(),
            stacked,
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
        if self.residual.parallel {
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
        match self.residual.scale {
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
        let mlp_in = if self.residual.parallel {
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

    /// The borrowed view of this layer that the kernels read; `None` for latent attention,
    /// Llama 4's attention, sinks, or experts that only the generic path runs
    /// ([`SparseMoe::weights`]): what [`crate::model::arch::ModelShape::generic_layers`] says.
    fn weights(&self) -> Option<LayerWeights<'_, B>> {
        let a = self.self_attn.heads()?;
        // Llama 4's attention and GPT-OSS's sinks run on the generic path alone.
        if a.chunk.is_some()
            || a.unit_qk_norm.is_some()
            || a.temperature.is_some()
            || a.sinks.is_some()
        {
            return None;
        }
        let feed_forward = match &self.mlp {
            FeedForward::Dense(m) => FeedForwardWeights::Dense(m.weights()),
            FeedForward::Experts(moe) => FeedForwardWeights::Experts(moe.weights()?),
        };
        Some(LayerWeights {
            q_proj: &a.q_proj,
            k_proj: &a.k_proj,
            v_proj: &a.v_proj,
            o_proj: &a.o_proj,
            feed_forward,
            input_norm: self.input_layernorm.as_ref().map(Norm::weights),
            post_norm: self.post_attention_layernorm.as_ref().map(Norm::weights),
            q_norm: a.q_norm.as_ref().map(Norm::weights),
            k_norm: a.k_norm.as_ref().map(Norm::weights),
            output_norms: self
                .output_norms
                .as_ref()
                .map(|n| [n.attention.weights(), n.mlp.weights()]),
            residual: self.residual,
            attention: &a.settings,
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

    /// The layer's experts and their router, where it has them.
    pub(crate) fn experts(&self) -> Option<&SparseMoe<B>> {
        match &self.mlp {
            FeedForward::Experts(moe) => Some(moe),
            FeedForward::Dense(_) => None,
        }
    }

    /// Mutable access to the layer's experts, where it has them.
    pub(crate) fn experts_mut(&mut self) -> Option<&mut SparseMoe<B>> {
        match &mut self.mlp {
            FeedForward::Experts(moe) => Some(moe),
            FeedForward::Dense(_) => None,
        }
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
    /// Linears held compressed, for the fused CPU kernels to decode with ([`Llama::sparsify`]):
    /// beside their dense weights, or in their place (the weights then empty); a weight
    /// replaced since runs dense.
    #[module(skip)]
    pub sparse: Option<Arc<SparseWeights>>,
}

impl<B: Backend> Llama<B> {
    /// A model with seeded random weights (uniform, PyTorch's default ranges), for tests and
    /// benchmarks; the same seed gives the same weights on every run and thread. Without a
    /// checkpoint no linears are stacked: pruning selects over each part alone.
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
                    &[],
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
            sparse: None,
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
    /// [`crate::model::kernels::Kernels::hidden_nll`]).
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
    pub(super) fn weights(&self) -> Option<ModelWeights<'_, B>> {
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
            sparse: self.sparse.clone(),
        })
    }

    /// The model with every weight dense: itself, or, where [`Llama::sparsify`] released the
    /// dense weights of compressed linears, a copy (its other tensors shared) with them
    /// expanded again and nothing held compressed, for the generic path.
    pub fn dense_weights(&self) -> Cow<'_, Self> {
        let Some(sparse) = &self.sparse else {
            return Cow::Borrowed(self);
        };
        // Per layer, the names of its released (empty) weights.
        let released: Vec<Vec<String>> = (self.layers.iter())
            .map(|layer| {
                let linears = layer.linears().into_iter();
                let empty = linears.filter(|(_, _, l)| l.weight.dims() == [0, 0]);
                empty.map(|l| l.0).collect()
            })
            .collect();
        if released.iter().all(Vec::is_empty) {
            return Cow::Borrowed(self);
        }
        let mut dense = self.clone();
        dense.sparse = None;
        for (layer, names) in dense.layers.iter_mut().zip(released) {
            for name in names {
                let linear = layer.linear_mut(&name).expect("a linear it listed");
                let id = linear.weight.id;
                let form = sparse
                    .get(&id)
                    .expect("a released weight's compressed form");
                let values = TensorData::new(form.to_in_out(), [form.inputs, form.outputs]);
                let weight = Tensor::from_data(values, &linear.weight.device());
                linear.weight = Param::initialized(id, weight);
            }
        }
        Cow::Owned(dense)
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
    /// Where the backend has fast kernels ([`crate::model::kernels`]: burn-ndarray in f32) this runs
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
    /// Where the backend has fast kernels ([`crate::model::kernels`]: burn-ndarray in f32) this runs
    /// them.
    pub fn hidden(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        match (self.weights()).and_then(|w| kernels::<B>().hidden(&w, &tokens)) {
            Some(hidden) => hidden,
            None => self.hidden_generic(tokens),
        }
    }

    /// The residual stream after the last layer of continuations sharing a context, packed as
    /// one sequence ([`crate::model::kernels::Kernels::packed_hidden`]); `None` where the backend's
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

    /// [`Llama::hidden`] layer by layer, on any backend (with every weight dense:
    /// [`Llama::dense_weights`]).
    fn hidden_generic(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let dense = self.dense_weights();
        let this = dense.as_ref();
        let [_batch, seq] = tokens.dims();
        let (cos, sin) = this.rope_tables(0, seq);
        let mut x = this.embed(tokens);
        for layer in &this.layers {
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
    /// Where the backend has fast kernels that decode
    /// ([`crate::model::kernels::Kernels::forward_cached`]) and the cache holds nothing of the
    /// generic path's, they run.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, new]` → logits `[batch, new, vocab]`
    pub fn forward_cached(
        &self,
        tokens: Tensor<B, 2, Int>,
        cache: &mut KvCache<B>,
    ) -> Tensor<B, 3> {
        let [_batch, seq] = tokens.dims();
        if cache.host.len == cache.len {
            let fused = (self.weights())
                .and_then(|w| kernels::<B>().forward_cached(&w, &tokens, &mut cache.host));
            if let Some(logits) = fused {
                cache.len += seq;
                return logits;
            }
        }
        let dense = self.dense_weights();
        let this = dense.as_ref();
        let (cos, sin) = this.rope_tables(cache.len, seq);
        let mut x = this.embed_from(tokens, cache.len);
        for (layer, slot) in this.layers.iter().zip(cache.layers.iter_mut()) {
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
        this.head(x)
    }
}

#[cfg(test)]
pub(super) mod tests;
