//! The fused kernels' hold on a model's weights: the burn-ndarray primitives kept alive while
//! the kernels borrow their f32 slices ([`Held`]), and the borrowed views made from them
//! ([`super::LayerRef`], [`super::HeadRef`]); `None` wherever a weight is not contiguous f32 or
//! a layer is of a kind the kernels do not run.

use std::sync::Arc;

use burn::backend::ndarray::NdArrayTensor;
use burn::nn::Linear;
use burn::prelude::*;

use super::feed_forward::{ExpertsRef, FeedForwardRef, MlpRef};
use super::{
    contiguous, Dims, FeedForwardWeights, HeadNormRef, HeadRef, HeadWeights, LayerRef,
    LayerWeights, LinearRef, LogitScale, MlpWeights, Nd, NormRef, NormWeights,
};
use crate::model::arch::{Activation, AttentionSettings, Experts, Residual};
use crate::model::kernels::sparse::{SparseLinear, SparseWeights};

/// The primitives of a model's weights, held while their slices are borrowed, and the model's
/// compressed linears.
pub(super) struct Held {
    pub(super) tensors: Vec<NdArrayTensor>,
    sparse: Option<Arc<SparseWeights>>,
}

impl Held {
    /// Nothing held yet; the linears found in `sparse` run compressed.
    pub(super) fn new(sparse: Option<Arc<SparseWeights>>) -> Self {
        Self {
            tensors: Vec::new(),
            sparse,
        }
    }

    /// Holds `t`'s primitive; returns its index.
    pub(super) fn push<const D: usize>(&mut self, t: Tensor<Nd, D>) -> usize {
        self.tensors.push(t.into_primitive().tensor());
        self.tensors.len() - 1
    }

    /// The f32 values of the tensor held at `index`, when contiguous.
    pub(super) fn slice(&self, index: usize) -> Option<&[f32]> {
        contiguous(&self.tensors[index])
    }
}

/// Indices into [`Held`] of one linear, and its compressed form where the model has one.
pub(super) struct HeldLinear {
    weight: usize,
    bias: Option<usize>,
    dims: [usize; 2],
    sparse: Option<Arc<SparseLinear>>,
}

/// Holds a linear's weight, bias and compressed form; a weight released for its compressed
/// form (empty) takes its dimensions from that form.
pub(super) fn hold_linear(held: &mut Held, linear: &Linear<Nd>) -> HeldLinear {
    let weight = linear.weight.val();
    let sparse = held.sparse.as_ref().and_then(|s| s.get(&linear.weight.id));
    let dims = match (weight.dims(), &sparse) {
        ([0, 0], Some(s)) => [s.inputs, s.outputs],
        (dims, _) => dims,
    };
    HeldLinear {
        weight: held.push(weight),
        bias: linear.bias.as_ref().map(|b| held.push(b.val())),
        dims,
        sparse: sparse.filter(|s| [s.inputs, s.outputs] == dims),
    }
}

/// The borrowed linear of `l`; `None` unless its weight is contiguous f32, whole or released
/// for its compressed form.
pub(super) fn linear_ref<'a>(held: &'a Held, l: &'a HeldLinear) -> Option<LinearRef<'a>> {
    let weight = held.slice(l.weight)?;
    let whole = weight.len() == l.dims[0] * l.dims[1];
    Some(LinearRef {
        sparse: l.sparse.as_deref(),
        weight: (whole || (weight.is_empty() && l.sparse.is_some())).then_some(weight)?,
        bias: match l.bias {
            Some(b) => Some(held.slice(b)?),
            None => None,
        },
        inputs: l.dims[0],
        outputs: l.dims[1],
    })
}

/// Indices into [`Held`] of a norm's gain and a LayerNorm's bias; whether it is centred.
#[derive(Clone, Copy)]
pub(super) struct HeldNorm {
    weight: usize,
    bias: Option<usize>,
    centred: bool,
}

pub(super) fn hold_norm(held: &mut Held, norm: &NormWeights<Nd>) -> HeldNorm {
    HeldNorm {
        weight: held.push(norm.weight.val()),
        bias: norm.bias.map(|b| held.push(b.val())),
        centred: norm.centred,
    }
}

/// The index of an RMSNorm's gain (the output norms); `None` for a LayerNorm.
pub(super) fn hold_rms_norm(held: &mut Held, norm: &NormWeights<Nd>) -> Option<usize> {
    (!norm.centred).then(|| held.push(norm.weight.val()))
}

pub(super) fn norm_ref<'a>(held: &'a Held, n: HeldNorm) -> Option<NormRef<'a>> {
    Some(NormRef {
        weight: held.slice(n.weight)?,
        bias: match n.bias {
            Some(b) => Some(held.slice(b)?),
            None => None,
        },
        centred: n.centred,
    })
}

/// The index into [`Held`] of a q/k norm's gain, and its group where each head is a
/// bias-free LayerNorm of its own (Cohere); `None` for an RMSNorm over each gain-wide row.
#[derive(Clone, Copy)]
pub(super) struct HeldHeadNorm {
    weight: usize,
    group: Option<usize>,
}

/// `None` for a q/k norm these kernels do not run (a LayerNorm with a bias, or not grouped).
fn hold_head_norm(held: &mut Held, norm: &NormWeights<Nd>) -> Option<HeldHeadNorm> {
    match (norm.centred, norm.bias, norm.group) {
        (false, None, None) | (true, None, Some(_)) => Some(HeldHeadNorm {
            weight: held.push(norm.weight.val()),
            group: norm.group,
        }),
        _ => None,
    }
}

fn head_norm_ref(held: &Held, n: HeldHeadNorm) -> Option<HeadNormRef<'_>> {
    Some(HeadNormRef {
        gain: held.slice(n.weight)?,
        group: n.group,
    })
}

/// Indices into [`Held`] of one decoder layer: its linears (no gate in an ungated MLP), two
/// norms, the per-head q/k norms and the output norms where the family has them; the layer's
/// own rotary frequencies.
pub(super) struct HeldLayer<'m> {
    q: HeldLinear,
    k: HeldLinear,
    v: HeldLinear,
    o: HeldLinear,
    feed_forward: HeldFeedForward<'m>,
    input_norm: Option<HeldNorm>,
    post_norm: Option<HeldNorm>,
    q_norm: Option<HeldHeadNorm>,
    k_norm: Option<HeldHeadNorm>,
    output_norms: Option<[usize; 2]>,
    attention: &'m AttentionSettings,
    residual: Residual,
}

/// Indices into [`Held`] of one MLP's linears, with its activation.
struct HeldMlp {
    gate: Option<HeldLinear>,
    up: HeldLinear,
    down: HeldLinear,
    activation: Activation,
}

/// Holds an MLP's linears.
fn hold_mlp(held: &mut Held, mlp: &MlpWeights<Nd>) -> HeldMlp {
    HeldMlp {
        gate: mlp.gate_proj.map(|g| hold_linear(held, g)),
        up: hold_linear(held, mlp.up_proj),
        down: hold_linear(held, mlp.down_proj),
        activation: mlp.activation,
    }
}

/// The borrowed MLP of `m`; `None` unless every weight is contiguous f32.
fn mlp_ref<'a>(held: &'a Held, m: &'a HeldMlp) -> Option<MlpRef<'a>> {
    Some(MlpRef {
        gate: match &m.gate {
            Some(g) => Some(linear_ref(held, g)?),
            None => None,
        },
        up: linear_ref(held, &m.up)?,
        down: linear_ref(held, &m.down)?,
        activation: m.activation,
    })
}

/// Indices into [`Held`] of a layer's block after attention.
// One per layer, built per forward pass: the variants' sizes matter less than no box.
#[allow(clippy::large_enum_variant)]
enum HeldFeedForward<'m> {
    Dense(HeldMlp),
    Experts {
        router: HeldLinear,
        experts: Vec<HeldMlp>,
        shared: Option<(HeldMlp, Option<HeldLinear>)>,
        routing: Experts,
        correction: Option<&'m [f32]>,
    },
}

/// Holds a layer's block after attention: its MLP, or its router and experts.
fn hold_feed_forward<'m>(
    held: &mut Held,
    block: &FeedForwardWeights<'m, Nd>,
) -> HeldFeedForward<'m> {
    match block {
        FeedForwardWeights::Dense(mlp) => HeldFeedForward::Dense(hold_mlp(held, mlp)),
        FeedForwardWeights::Experts(moe) => HeldFeedForward::Experts {
            router: hold_linear(held, moe.router),
            experts: moe.experts.iter().map(|m| hold_mlp(held, m)).collect(),
            shared: moe
                .shared
                .as_ref()
                .map(|(m, gate)| (hold_mlp(held, m), gate.map(|g| hold_linear(held, g)))),
            routing: moe.routing,
            correction: moe.correction,
        },
    }
}

/// The borrowed block of `f`; `None` unless every weight is contiguous f32.
fn feed_forward_ref<'a>(held: &'a Held, f: &'a HeldFeedForward<'a>) -> Option<FeedForwardRef<'a>> {
    Some(match f {
        HeldFeedForward::Dense(mlp) => FeedForwardRef::Dense(mlp_ref(held, mlp)?),
        HeldFeedForward::Experts {
            router,
            experts,
            shared,
            routing,
            correction,
        } => FeedForwardRef::Experts(ExpertsRef {
            router: linear_ref(held, router)?,
            experts: experts
                .iter()
                .map(|m| mlp_ref(held, m))
                .collect::<Option<_>>()?,
            shared: match shared {
                Some((mlp, gate)) => Some((
                    mlp_ref(held, mlp)?,
                    match gate {
                        Some(g) => Some(linear_ref(held, g)?),
                        None => None,
                    },
                )),
                None => None,
            },
            routing: *routing,
            correction: *correction,
        }),
    })
}

/// `None` for a layer these kernels do not run: q/k norms neither RMSNorms nor Cohere's,
/// output norms that are not RMSNorms, or output norms with a parallel residual.
pub(super) fn hold_layer<'m>(
    held: &mut Held,
    layer: &LayerWeights<'m, Nd>,
) -> Option<HeldLayer<'m>> {
    if layer.residual.parallel && layer.output_norms.is_some() {
        return None;
    }
    let output_norms = match &layer.output_norms {
        Some([a, m]) => Some([hold_rms_norm(held, a)?, hold_rms_norm(held, m)?]),
        None => None,
    };
    Some(HeldLayer {
        q: hold_linear(held, layer.q_proj),
        k: hold_linear(held, layer.k_proj),
        v: hold_linear(held, layer.v_proj),
        o: hold_linear(held, layer.o_proj),
        feed_forward: hold_feed_forward(held, &layer.feed_forward),
        input_norm: layer.input_norm.as_ref().map(|n| hold_norm(held, n)),
        post_norm: layer.post_norm.as_ref().map(|n| hold_norm(held, n)),
        q_norm: match &layer.q_norm {
            Some(n) => Some(hold_head_norm(held, n)?),
            None => None,
        },
        k_norm: match &layer.k_norm {
            Some(n) => Some(hold_head_norm(held, n)?),
            None => None,
        },
        output_norms,
        attention: layer.attention,
        residual: layer.residual,
    })
}

pub(super) fn layer_ref<'a>(held: &'a Held, l: &'a HeldLayer<'a>) -> Option<LayerRef<'a>> {
    Some(LayerRef {
        q: linear_ref(held, &l.q)?,
        k: linear_ref(held, &l.k)?,
        v: linear_ref(held, &l.v)?,
        o: linear_ref(held, &l.o)?,
        feed_forward: feed_forward_ref(held, &l.feed_forward)?,
        input_norm: match l.input_norm {
            Some(n) => Some(norm_ref(held, n)?),
            None => None,
        },
        post_norm: match l.post_norm {
            Some(n) => Some(norm_ref(held, n)?),
            None => None,
        },
        q_norm: match l.q_norm {
            Some(n) => Some(head_norm_ref(held, n)?),
            None => None,
        },
        k_norm: match l.k_norm {
            Some(n) => Some(head_norm_ref(held, n)?),
            None => None,
        },
        output_norms: match l.output_norms {
            Some([a, m]) => Some([held.slice(a)?, held.slice(m)?]),
            None => None,
        },
        attention: l.attention,
        residual: l.residual,
    })
}

pub(super) fn dims_of<'a>(layer: &LayerWeights<'a, Nd>, hidden: usize, eps: f64) -> Dims<'a> {
    let a = layer.attention;
    Dims {
        hidden,
        heads: a.heads,
        kv_heads: a.kv_heads,
        head_dim: a.head_dim,
        eps,
        scale: a
            .scale
            .map_or(1.0 / (a.head_dim as f32).sqrt(), |s| s as f32),
        softcap: a.softcap.map(|c| c as f32),
        alibi: a.alibi.as_deref(),
        clip_qkv: a.clip_qkv,
    }
}

/// Indices into [`Held`] of the embeddings, learned positions, final norm and LM head, with
/// their sizes.
pub(super) struct HeldHead {
    embed: usize,
    embed_scale: Option<f32>,
    positions: Option<usize>,
    position_offset: usize,
    embed_norm: Option<HeldNorm>,
    norm: HeldNorm,
    lm_head: Option<HeldLinear>,
    final_softcap: Option<f32>,
    logit_scale: Option<LogitScale>,
    eps: f64,
    vocab: usize,
    pub(super) hidden: usize,
}

pub(super) fn hold_head(held: &mut Held, head: &HeadWeights<Nd>) -> HeldHead {
    let [vocab, hidden] = head.embed.dims();
    HeldHead {
        embed: held.push(head.embed.val()),
        embed_scale: head.embed_scale,
        positions: head.positions.map(|table| held.push(table.val())),
        position_offset: head.position_offset,
        embed_norm: head.embed_norm.as_ref().map(|n| hold_norm(held, n)),
        norm: hold_norm(held, &head.norm),
        lm_head: head.lm_head.map(|h| hold_linear(held, h)),
        final_softcap: head.final_softcap.map(|c| c as f32),
        logit_scale: head.logit_scale,
        eps: head.norm.eps,
        vocab,
        hidden,
    }
}

pub(super) fn head_ref<'a>(held: &'a Held, h: &'a HeldHead) -> Option<HeadRef<'a>> {
    Some(HeadRef {
        embed: held.slice(h.embed)?,
        embed_scale: h.embed_scale,
        vocab: h.vocab,
        hidden: h.hidden,
        norm: norm_ref(held, h.norm)?,
        eps: h.eps,
        lm_head: match &h.lm_head {
            Some(l) => Some(linear_ref(held, l)?),
            None => None,
        },
        positions: match h.positions {
            Some(table) => Some(held.slice(table)?),
            None => None,
        },
        position_offset: h.position_offset,
        embed_norm: match h.embed_norm {
            Some(n) => Some(norm_ref(held, n)?),
            None => None,
        },
        final_softcap: h.final_softcap,
        logit_scale: h.logit_scale,
    })
}
