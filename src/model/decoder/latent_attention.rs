//! DeepSeek's multi-head latent attention (MLA; DeepSeek-V2 and V3), as transformers
//! computes it (`DeepseekV2Attention`, `DeepseekV3Attention`):
//! - queries straight from the layer's input (`q_proj`, DeepSeek-V2-Lite) or through a latent
//!   (`q_a_proj`, an RMSNorm `q_a_layernorm`, `q_b_proj`); each head's query is
//!   `qk_nope_head_dim` dimensions without position, then `qk_rope_head_dim` rotated;
//! - keys and values from one latent: `kv_a_proj_with_mqa` gives `kv_lora_rank` dimensions,
//!   normed (`kv_a_layernorm`) and expanded by `kv_b_proj` into each head's unrotated key and its
//!   value (`v_head_dim` wide), and `qk_rope_head_dim` more, rotated, that every head shares as
//!   the rest of its key;
//! - the softmax scaled by `(qk_nope + qk_rope)^-0.5`, times YaRN's `mscale_all_dim` factor
//!   squared where the config has one.
//!
//! Calibration sees the two latents as the inputs of `q_b_proj` and `kv_b_proj`
//! ([`LinearInput::QueryLatent`], [`LinearInput::KeyValueLatent`]), as the reference code's
//! hooks on those linears do.

use burn::nn::Linear;
use burn::prelude::*;

use crate::model::arch::rope;
use crate::model::arch::LatentAttention;
use crate::model::decoder::{
    blocked_attention, extend_cache, Attention, LayerContext, Norm, Scores,
};
use crate::model::kernels::{project, LinearInput};

/// The checkpoint's names of the latent attention's parts, relative to the layer.
const Q_PROJ: &str = "self_attn.q_proj";
const Q_A_PROJ: &str = "self_attn.q_a_proj";
const Q_A_NORM: &str = "self_attn.q_a_layernorm";
const Q_B_PROJ: &str = "self_attn.q_b_proj";
const KV_A_PROJ: &str = "self_attn.kv_a_proj_with_mqa";
const KV_A_NORM: &str = "self_attn.kv_a_layernorm";
const KV_B_PROJ: &str = "self_attn.kv_b_proj";
const O_PROJ: &str = "self_attn.o_proj";

/// The epsilon of the two latent norms: transformers builds them with its RMSNorm's default,
/// whatever `rms_norm_eps` says.
const LATENT_NORM_EPS: f64 = 1e-6;

/// How a latent attention's queries are projected.
// One per layer, as [`SelfAttention`]'s variants.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub(crate) enum Queries<B: Backend> {
    /// `q_proj`, `[hidden, heads · qk_head_dim]`.
    Direct(Linear<B>),
    /// Through the queries' latent.
    Latent(QueryLatent<B>),
}

/// `q_b_proj(q_a_layernorm(q_a_proj(x)))`.
#[derive(Module, Debug)]
pub(crate) struct QueryLatent<B: Backend> {
    /// `[hidden, q_lora_rank]`.
    pub q_a_proj: Linear<B>,
    /// RMSNorm over the latent, `[q_lora_rank]`.
    pub q_a_layernorm: Norm<B>,
    /// `[q_lora_rank, heads · qk_head_dim]`.
    pub q_b_proj: Linear<B>,
}

/// One layer's multi-head latent attention.
#[derive(Module, Debug)]
pub(crate) struct LatentSelfAttention<B: Backend> {
    /// The queries' projection.
    pub queries: Queries<B>,
    /// `[hidden, kv_lora_rank + qk_rope_head_dim]`: the latent, then the shared rotated key.
    pub kv_a_proj_with_mqa: Linear<B>,
    /// RMSNorm over the latent, `[kv_lora_rank]`.
    pub kv_a_layernorm: Norm<B>,
    /// `[kv_lora_rank, heads · (qk_nope_head_dim + v_head_dim)]`: per head its unrotated key,
    /// then its value.
    pub kv_b_proj: Linear<B>,
    /// `[heads · v_head_dim, hidden]`.
    pub o_proj: Linear<B>,
    /// Query heads.
    pub num_heads: usize,
    /// The widths and factors.
    #[module(skip)]
    pub shape: LatentAttention,
}

impl<B: Backend> LatentSelfAttention<B> {
    /// The latent attention of a layer from its parts: `linear(name, inputs, outputs, bias)`
    /// and `norm(name, width)` as [`crate::model::decoder::DecoderLayer`] assembles a layer;
    /// `biased`: `attention_bias`.
    pub(crate) fn assemble<E>(
        shape: LatentAttention,
        hidden: usize,
        heads: usize,
        biased: bool,
        linear: &impl Fn(&str, usize, usize, bool) -> Result<Linear<B>, E>,
        norm: &impl Fn(&str, usize) -> Result<Norm<B>, E>,
    ) -> Result<Self, E> {
        let rms = |name: &str, width: usize| {
            Ok(Norm {
                eps: LATENT_NORM_EPS,
                ..norm(name, width)?
            })
        };
        let q = heads * shape.qk_head_dim();
        let queries = match shape.q_lora_rank {
            None => Queries::Direct(linear(Q_PROJ, hidden, q, false)?),
            Some(rank) => Queries::Latent(QueryLatent {
                q_a_proj: linear(Q_A_PROJ, hidden, rank, biased)?,
                q_a_layernorm: rms(Q_A_NORM, rank)?,
                q_b_proj: linear(Q_B_PROJ, rank, q, false)?,
            }),
        };
        let (rank, rope) = (shape.kv_lora_rank, shape.qk_rope_head_dim);
        Ok(LatentSelfAttention {
            queries,
            kv_a_proj_with_mqa: linear(KV_A_PROJ, hidden, rank + rope, biased)?,
            kv_a_layernorm: rms(KV_A_NORM, rank)?,
            kv_b_proj: linear(KV_B_PROJ, rank, heads * shape.kv_b_width(), false)?,
            o_proj: linear(O_PROJ, heads * shape.v_head_dim, hidden, biased)?,
            num_heads: heads,
            shape,
        })
    }

    /// The attention block, showing `observe` the inputs of `q_b_proj` (where there is one),
    /// `kv_b_proj` and `o_proj`. The cache holds each head's expanded keys and values.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, hidden]`; `ctx`'s tables
    ///   `[seq, qk_rope_head_dim]`
    pub fn forward_observed(
        &self,
        x: Tensor<B, 3>,
        ctx: LayerContext<'_, B>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) -> Tensor<B, 3> {
        let [batch, seq, _hidden] = x.dims();
        let s = self.shape;
        let (heads, nope, rope_dim, v_dim) = (
            self.num_heads,
            s.qk_nope_head_dim,
            s.qk_rope_head_dim,
            s.v_head_dim,
        );
        let q = match &self.queries {
            Queries::Direct(q_proj) => project(q_proj, x.clone()),
            Queries::Latent(latent) => {
                let inner = latent
                    .q_a_layernorm
                    .forward(project(&latent.q_a_proj, x.clone()));
                observe(LinearInput::QueryLatent, &inner);
                project(&latent.q_b_proj, inner)
            }
        };
        let q = q
            .reshape([batch, seq, heads, nope + rope_dim])
            .swap_dims(1, 2);
        let compressed = project(&self.kv_a_proj_with_mqa, x);
        let latent = self
            .kv_a_layernorm
            .forward(compressed.clone().narrow(2, 0, s.kv_lora_rank));
        observe(LinearInput::KeyValueLatent, &latent);
        let rotate = |t: Tensor<B, 4>| match s.interleaved {
            true => rope::apply_interleaved(t, ctx.cos, ctx.sin),
            false => rope::apply(t, ctx.cos, ctx.sin),
        };
        let k_rot = rotate(
            compressed
                .narrow(2, s.kv_lora_rank, rope_dim)
                .reshape([batch, 1, seq, rope_dim]),
        );
        let q = Tensor::cat(
            vec![
                q.clone().narrow(3, 0, nope),
                rotate(q.narrow(3, nope, rope_dim)),
            ],
            3,
        );
        let kv = project(&self.kv_b_proj, latent)
            .reshape([batch, seq, heads, nope + v_dim])
            .swap_dims(1, 2);
        let k = Tensor::cat(
            vec![
                kv.clone().narrow(3, 0, nope),
                k_rot.expand([batch, heads, seq, rope_dim]),
            ],
            3,
        );
        let (k, v) = extend_cache(ctx.cache, k, kv.narrow(3, nope, v_dim));
        let scores = Scores {
            scale: s.scale,
            ..Scores::default()
        };
        let out =
            blocked_attention(q, k, v, scores)
                .swap_dims(1, 2)
                .reshape([batch, seq, heads * v_dim]);
        observe(LinearInput::AttnOut, &out);
        project(&self.o_proj, out)
    }

    /// The prunable linears with their names relative to the layer and the input they read.
    fn linears(&self) -> Vec<(String, LinearInput, &Linear<B>)> {
        let mut linears: Vec<(&str, LinearInput, &Linear<B>)> = match &self.queries {
            Queries::Direct(q_proj) => vec![(Q_PROJ, LinearInput::AttnIn, q_proj)],
            Queries::Latent(l) => vec![
                (Q_A_PROJ, LinearInput::AttnIn, &l.q_a_proj),
                (Q_B_PROJ, LinearInput::QueryLatent, &l.q_b_proj),
            ],
        };
        linears.extend([
            (KV_A_PROJ, LinearInput::AttnIn, &self.kv_a_proj_with_mqa),
            (KV_B_PROJ, LinearInput::KeyValueLatent, &self.kv_b_proj),
            (O_PROJ, LinearInput::AttnOut, &self.o_proj),
        ]);
        linears
            .into_iter()
            .map(|(name, input, linear)| (name.to_string(), input, linear))
            .collect()
    }

    /// Mutable access to the linear named as in [`Self::linears`].
    fn linear_mut(&mut self, name: &str) -> Option<&mut Linear<B>> {
        match (name, &mut self.queries) {
            (Q_PROJ, Queries::Direct(q_proj)) => Some(q_proj),
            (Q_A_PROJ, Queries::Latent(l)) => Some(&mut l.q_a_proj),
            (Q_B_PROJ, Queries::Latent(l)) => Some(&mut l.q_b_proj),
            (KV_A_PROJ, _) => Some(&mut self.kv_a_proj_with_mqa),
            (KV_B_PROJ, _) => Some(&mut self.kv_b_proj),
            (O_PROJ, _) => Some(&mut self.o_proj),
            _ => None,
        }
    }

    /// The latent norms with their names relative to the layer.
    fn norms(&self) -> Vec<(&'static str, &Norm<B>)> {
        let q = match &self.queries {
            Queries::Latent(l) => Some((Q_A_NORM, &l.q_a_layernorm)),
            Queries::Direct(_) => None,
        };
        q.into_iter()
            .chain([(KV_A_NORM, &self.kv_a_layernorm)])
            .collect()
    }
}

/// A layer's attention block: heads with their own keys and values (or groups of them), or
/// DeepSeek's latent attention.
// One per layer: the variants' sizes matter less than reaching the attention without a box.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub(crate) enum SelfAttention<B: Backend> {
    /// q/k/v projections per head (Llama and every family but DeepSeek's).
    Heads(Attention<B>),
    /// Multi-head latent attention.
    Latent(LatentSelfAttention<B>),
}

impl<B: Backend> SelfAttention<B> {
    /// The attention block, showing `observe` the inputs of its linears after the block's own.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, hidden]`
    pub fn forward_observed(
        &self,
        x: Tensor<B, 3>,
        ctx: LayerContext<'_, B>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) -> Tensor<B, 3> {
        match self {
            SelfAttention::Heads(a) => a.forward_observed(x, ctx, observe),
            SelfAttention::Latent(a) => a.forward_observed(x, ctx, observe),
        }
    }

    /// The prunable linears with their names relative to the layer and the input they read:
    /// q, k, v and o; or the latent attention's.
    pub fn linears(&self) -> Vec<(String, LinearInput, &Linear<B>)> {
        match self {
            SelfAttention::Heads(a) => vec![
                ("self_attn.q_proj".into(), LinearInput::AttnIn, &a.q_proj),
                ("self_attn.k_proj".into(), LinearInput::AttnIn, &a.k_proj),
                ("self_attn.v_proj".into(), LinearInput::AttnIn, &a.v_proj),
                (O_PROJ.into(), LinearInput::AttnOut, &a.o_proj),
            ],
            SelfAttention::Latent(a) => a.linears(),
        }
    }

    /// Mutable access to the linear named as in [`Self::linears`].
    pub fn linear_mut(&mut self, name: &str) -> Option<&mut Linear<B>> {
        match self {
            SelfAttention::Heads(a) => match name {
                "self_attn.q_proj" => Some(&mut a.q_proj),
                "self_attn.k_proj" => Some(&mut a.k_proj),
                "self_attn.v_proj" => Some(&mut a.v_proj),
                O_PROJ => Some(&mut a.o_proj),
                _ => None,
            },
            SelfAttention::Latent(a) => a.linear_mut(name),
        }
    }

    /// The block's norms with their names relative to the layer: the per-head q/k norms where
    /// the family has them, or the latent norms.
    pub fn norms(&self) -> Vec<(&'static str, &Norm<B>)> {
        match self {
            SelfAttention::Heads(a) => {
                let q = a.q_norm.as_ref().map(|n| ("self_attn.q_norm", n));
                let k = a.k_norm.as_ref().map(|n| ("self_attn.k_norm", n));
                q.into_iter().chain(k).collect()
            }
            SelfAttention::Latent(a) => a.norms(),
        }
    }

    /// The heads' attention where it is not latent.
    pub fn heads(&self) -> Option<&Attention<B>> {
        match self {
            SelfAttention::Heads(a) => Some(a),
            SelfAttention::Latent(_) => None,
        }
    }
}
