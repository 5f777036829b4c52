//! The block after a layer's attention on the fused path: one MLP over every row, or a mixture
//! of experts. The experts' tokens are routed on the host by the decoder's own routing
//! ([`route`]) and gathered per expert into one panel, so each expert's linears are one
//! product each over its tokens, and its weighted output is added back to its tokens' rows in
//! the order the generic block adds them (expert by expert, in index order).

use rayon::prelude::*;

use super::{vecmath, LinearRef};
use crate::model::arch::{Activation, Experts};
use crate::model::kernels::{route, LinearInput, Routed};

/// Borrowed linears of one MLP: `down(act(gate(x)) * up(x))`, or `down(act(up(x)))` without a
/// gate (OPT).
pub(super) struct MlpRef<'a> {
    /// `[hidden, width]`; `None` without a gate.
    pub(super) gate: Option<LinearRef<'a>>,
    /// `[hidden, width]`.
    pub(super) up: LinearRef<'a>,
    /// `[width, hidden]`.
    pub(super) down: LinearRef<'a>,
    /// The gate's activation (of `up` without a gate).
    pub(super) activation: Activation,
}

impl MlpRef<'_> {
    /// The width of its hidden activations (`down`'s input).
    pub(super) fn width(&self) -> usize {
        self.up.outputs
    }

    /// `down`'s input for `rows` rows of `x` into `hidden` (`[rows, width]`), with `up` as
    /// scratch.
    pub(super) fn hidden_into(
        &self,
        x: &[f32],
        rows: usize,
        hidden: &mut [f32],
        up: &mut Vec<f32>,
    ) {
        let width = self.width();
        match &self.gate {
            Some(gate_proj) => {
                let up = super::sized(up, rows * width);
                gate_proj.apply(x, rows, hidden, false);
                self.up.apply(x, rows, up, false);
                let activation = match self.activation {
                    Activation::Silu => vecmath::silu_mul,
                    Activation::GeluTanh => vecmath::gelu_tanh_mul,
                    Activation::Relu => vecmath::relu_mul,
                    Activation::Gelu => vecmath::gelu_mul,
                    Activation::Relu2 => vecmath::relu2_mul,
                };
                hidden
                    .par_chunks_mut(width)
                    .zip(up.par_chunks(width))
                    .for_each(|(g, u)| activation(g, u));
            }
            // Without a gate the activation acts on `up(x)` itself.
            None => {
                self.up.apply(x, rows, hidden, false);
                let activation = match self.activation {
                    Activation::Gelu => vecmath::gelu,
                    Activation::GeluTanh => vecmath::gelu_tanh,
                    Activation::Relu => vecmath::relu,
                    Activation::Silu => vecmath::silu,
                    Activation::Relu2 => vecmath::relu2,
                };
                hidden.par_chunks_mut(width).for_each(activation);
            }
        }
    }
}

/// Borrowed experts of one layer, their router and the shared expert.
pub(super) struct ExpertsRef<'a> {
    /// `[hidden, experts]`.
    pub(super) router: LinearRef<'a>,
    /// Each expert, in the router's column order.
    pub(super) experts: Vec<MlpRef<'a>>,
    /// The expert every token goes through, and the gate of its output (`[hidden, 1]`).
    pub(super) shared: Option<(MlpRef<'a>, Option<LinearRef<'a>>)>,
    /// How tokens are routed ([`route`]).
    pub(super) routing: Experts,
    /// A sigmoid router's correction biases of the choice.
    pub(super) correction: Option<&'a [f32]>,
}

/// The block after a layer's attention.
// One per layer, built per forward pass: the variants' sizes matter less than no box.
#[allow(clippy::large_enum_variant)]
pub(super) enum FeedForwardRef<'a> {
    /// One MLP over every row.
    Dense(MlpRef<'a>),
    /// Experts, each over the rows routed to it.
    Experts(ExpertsRef<'a>),
}

/// The mixture of experts over `normed` (`[rows, hidden]`, consecutive sequences of `seq`
/// tokens), showing `observe` each expert's inputs sample by sample as the generic block does
/// ([`LinearInput::ExpertIn`], [`LinearInput::ExpertHidden`], then the shared expert's
/// [`LinearInput::MlpHidden`]); with `out` (`[rows, hidden]`) the block's output written
/// there, without it the down projections skipped.
pub(super) fn experts_block(
    moe: &ExpertsRef,
    normed: &[f32],
    seq: usize,
    mut out: Option<&mut [f32]>,
    observe: &mut dyn FnMut(LinearInput, &[f32], usize),
) {
    let hidden = moe.router.inputs;
    let rows = normed.len() / hidden.max(1);
    let mut logits = vec![0.0f32; rows * moe.routing.count];
    moe.router.apply(normed, rows, &mut logits, false);
    let routed = route(&logits, moe.routing, moe.correction);
    if let Some(out) = out.as_deref_mut() {
        out.fill(0.0);
    }
    let mut up = Vec::new();
    for (e, (expert, routed)) in moe.experts.iter().zip(&routed).enumerate() {
        let n = routed.tokens.len();
        if n == 0 {
            continue;
        }
        let mut panel = Vec::with_capacity(n * hidden);
        for &t in &routed.tokens {
            panel.extend_from_slice(&normed[t * hidden..][..hidden]);
        }
        let tokens = (routed, seq);
        observe_by_sample(&panel, hidden, tokens, LinearInput::ExpertIn(e), observe);
        let width = expert.width();
        let mut inner = vec![0.0f32; n * width];
        expert.hidden_into(&panel, n, &mut inner, &mut up);
        observe_by_sample(&inner, width, tokens, LinearInput::ExpertHidden(e), observe);
        let Some(out) = out.as_deref_mut() else {
            continue;
        };
        // The panel is free again: it takes the expert's output.
        expert.down.apply(&inner, n, &mut panel, false);
        for ((&t, &weight), y) in routed
            .tokens
            .iter()
            .zip(&routed.weights)
            .zip(panel.chunks(hidden))
        {
            let row = &mut out[t * hidden..][..hidden];
            row.iter_mut().zip(y).for_each(|(o, &y)| *o += y * weight);
        }
    }
    if let Some((mlp, gate)) = &moe.shared {
        shared_expert(mlp, gate.as_ref(), normed, out, observe);
    }
}

/// A shared expert over every row of `normed`, showing `observe` its hidden activations
/// ([`LinearInput::MlpHidden`]); with `out`, its output (times `sigmoid(gate(x))` where it has
/// a gate) added to `out`.
fn shared_expert(
    mlp: &MlpRef,
    gate: Option<&LinearRef>,
    normed: &[f32],
    out: Option<&mut [f32]>,
    observe: &mut dyn FnMut(LinearInput, &[f32], usize),
) {
    let hidden = mlp.down.outputs;
    let rows = normed.len() / hidden.max(1);
    let width = mlp.width();
    let mut inner = vec![0.0f32; rows * width];
    mlp.hidden_into(normed, rows, &mut inner, &mut Vec::new());
    observe(LinearInput::MlpHidden, &inner, width);
    let Some(out) = out else {
        return;
    };
    let mut y = vec![0.0f32; rows * hidden];
    mlp.down.apply(&inner, rows, &mut y, false);
    if let Some(gate) = gate {
        let mut g = vec![0.0f32; rows];
        gate.apply(normed, rows, &mut g, false);
        for (row, g) in y.chunks_mut(hidden).zip(&g) {
            let factor = 1.0 / (1.0 + (-g).exp());
            row.iter_mut().for_each(|v| *v *= factor);
        }
    }
    out.par_chunks_mut(4096)
        .zip(y.par_chunks(4096))
        .for_each(|(o, y)| o.iter_mut().zip(y).for_each(|(o, y)| *o += y));
}

/// Shows `observe` the rows of `x` (`width` wide, one per token of `routed`) one sample at a
/// time ([`Routed::samples`]), as the generic block shows them.
fn observe_by_sample(
    x: &[f32],
    width: usize,
    (routed, seq): (&Routed, usize),
    input: LinearInput,
    observe: &mut dyn FnMut(LinearInput, &[f32], usize),
) {
    for rows in routed.samples(seq) {
        observe(input, &x[rows.start * width..rows.end * width], width);
    }
}
