//! Sparse mixture-of-experts feed-forward blocks (Mixtral's `block_sparse_moe`): a router
//! (`gate`, a linear `hidden → experts`) scores every token, the token goes to its `top_k`
//! experts by softmax probability, and the block returns the experts' outputs weighted by those
//! probabilities (renormalised over the `top_k` where the family says so), or as DeepSeek-V3's
//! router does by grouped sigmoid scores ([`SigmoidRouting`], GLM-4.5's). Each expert is the
//! decoder's gated MLP, or GPT-OSS's clamped GLU with biases ([`ClampedGlu`]).
//!
//! Calibration sees each expert's inputs as the reference code's forward hooks on the expert's
//! linears see them: only the tokens routed to it, one sample at a time
//! ([`LinearInput::ExpertIn`], [`LinearInput::ExpertHidden`]).

use burn::module::Param;
use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::{DType, FloatDType, IndexingUpdateOp};

use crate::model::arch::Experts;
use crate::model::decoder::Mlp;
use crate::model::kernels::to_host_f32;
use crate::model::kernels::{project, project_all, route, ExpertWeights, LinearInput, Routed};

/// The router of a layer with experts, named relative to the layer.
pub(crate) const ROUTER: &str = "mlp.gate";

/// A layer's shared expert (Qwen2-MoE's), named relative to the layer.
pub(crate) const SHARED_EXPERT: &str = "mlp.shared_expert";

/// The gate of a shared expert's output, named relative to the layer.
pub(crate) const SHARED_GATE: &str = "mlp.shared_expert_gate";

/// A sigmoid router's correction biases ([`SigmoidRouting`]), named relative to the layer.
pub(crate) const CORRECTION: &str = "mlp.gate.e_score_correction_bias";

/// An expert every token goes through (Qwen2-MoE's `shared_expert`), its output times
/// `sigmoid(gate(x))` where it has a gate.
#[derive(Module, Debug)]
pub(crate) struct SharedExpert<B: Backend> {
    /// The expert, a gated MLP; its down projection reads [`LinearInput::MlpHidden`].
    pub mlp: Mlp<B>,
    /// `shared_expert_gate`, `[hidden, 1]`; `None` where the output is added ungated (GLM-4.5).
    pub gate: Option<Linear<B>>,
}

/// One decoder layer's experts and their router.
#[derive(Module, Debug)]
pub(crate) struct SparseMoe<B: Backend> {
    /// The router, `[hidden, experts]`.
    pub router: Linear<B>,
    /// The experts, each a gated MLP.
    pub experts: Vec<Mlp<B>>,
    /// The shared expert, where the family has one.
    pub shared: Option<SharedExpert<B>>,
    /// How tokens are routed.
    #[module(skip)]
    pub routing: Experts,
    /// Each expert's bias of the scores experts are chosen by, with sigmoid routing
    /// (`mlp.gate.e_score_correction_bias`), held on the host.
    #[module(skip)]
    pub correction: Option<Vec<f32>>,
}

impl<B: Backend> SparseMoe<B> {
    /// The block's linears with their names relative to the layer and the input they read: the
    /// router, each expert's three, then the shared expert's three and its gate.
    pub fn linears(&self) -> Vec<(String, LinearInput, &Linear<B>)> {
        let (input, hidden) = (LinearInput::MlpIn, LinearInput::MlpHidden);
        let mut linears = vec![(ROUTER.to_string(), input, &self.router)];
        for (e, m) in self.experts.iter().enumerate() {
            let prefix = format!("mlp.experts.{e}");
            linears.extend(m.linears(
                &prefix,
                LinearInput::ExpertIn(e),
                LinearInput::ExpertHidden(e),
            ));
        }
        if let Some(shared) = &self.shared {
            linears.extend(shared.mlp.linears(SHARED_EXPERT, input, hidden));
            linears.extend(shared.gate.iter().map(|g| (SHARED_GATE.into(), input, g)));
        }
        linears
    }

    /// Mutable access to the linear named `mlp.<proj>` in [`SparseMoe::linears`].
    pub fn linear_mut(&mut self, proj: &str) -> Option<&mut Linear<B>> {
        match proj.strip_prefix("experts.") {
            None if proj == "gate" => Some(&mut self.router),
            None => {
                let shared = self.shared.as_mut()?;
                match proj.strip_prefix("shared_expert.") {
                    Some(proj) => shared.mlp.linear_mut(proj),
                    None => (proj == "shared_expert_gate")
                        .then_some(shared.gate.as_mut())
                        .flatten(),
                }
            }
            Some(rest) => {
                let (e, proj) = rest.split_once('.')?;
                self.experts
                    .get_mut(e.parse::<usize>().ok()?)?
                    .linear_mut(proj)
            }
        }
    }

    /// The block's output, showing `observe` each expert's inputs (those of its gate and up
    /// projections, then of its down projection) sample by sample; with `output` false the
    /// down projections are skipped and `None` returned (calibration's first pass).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, hidden]`
    pub fn forward_observed(
        &self,
        x: Tensor<B, 3>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
        output: bool,
    ) -> Option<Tensor<B, 3>> {
        let [batch, seq, hidden] = x.dims();
        let device = x.device();
        let flat = x.reshape([batch * seq, hidden]);
        let routing = self.routing;
        let routed = self.route_tokens(&flat);
        let mut out = output.then(|| flat.zeros_like());
        for (e, (expert, routed)) in self.experts.iter().zip(&routed).enumerate() {
            if routed.tokens.is_empty() {
                continue;
            }
            let n = routed.tokens.len();
            let rows = index_tensor::<B>(&routed.tokens, &device);
            // In f32 whatever the device's type, rounded to it where the router returns them so.
            let weights = Tensor::<B, 2>::from_data(
                TensorData::new(routed.weights.clone(), [n, 1]),
                (&device, DType::F32),
            );
            let weights = match routing.round_weights {
                true => weights.cast(flat.dtype()).cast(FloatDType::F32),
                false => weights,
            };
            let input = flat.clone().select(0, rows.clone());
            // Llama 4 scales the expert's input by its weight, in the model's type.
            let input = match routing.scaled_inputs {
                true => {
                    let dtype = input.dtype();
                    input * weights.clone().cast(dtype)
                }
                false => input,
            }
            .unsqueeze::<3>();
            observe_by_sample(&input, routed, seq, LinearInput::ExpertIn(e), observe);
            let inner = self.expert_hidden(expert, input);
            observe_by_sample(&inner, routed, seq, LinearInput::ExpertHidden(e), observe);
            if let Some(acc) = out.take() {
                let y = project(&expert.down_proj, inner).reshape([n, hidden]);
                // The weights multiply the output in f32, unless they scaled the input.
                let y = match routing.scaled_inputs {
                    true => y,
                    false => (y.cast(FloatDType::F32) * weights).cast(acc.dtype()),
                };
                out = Some(acc.select_assign(0, rows, y, IndexingUpdateOp::Add));
            }
        }
        let Some(shared) = &self.shared else {
            return out.map(|o| o.reshape([batch, seq, hidden]));
        };
        // Every token's input, which the layer showed as the MLP's.
        let x = flat.unsqueeze::<3>();
        let inner = shared.mlp.hidden(x.clone());
        observe(
            LinearInput::MlpHidden,
            &inner.clone().reshape([batch, seq, inner.dims()[2]]),
        );
        let routed = out?;
        let y = project(&shared.mlp.down_proj, inner);
        let y = match &shared.gate {
            Some(gate) => y * burn::tensor::activation::sigmoid(project(gate, x)),
            None => y,
        };
        Some((routed.unsqueeze::<3>() + y).reshape([batch, seq, hidden]))
    }

    /// Per expert, the tokens of `flat` routed to it with their weights: the router's logits
    /// (in f32 from an f32 input where the family's router computes so: DeepSeek's, GLM-4.5's;
    /// in the model's type otherwise) routed on the host by [`route`].
    ///
    /// # Shapes
    /// - `flat`: `[tokens, hidden]`
    fn route_tokens(&self, flat: &Tensor<B, 2>) -> Vec<Routed> {
        let routing = self.routing;
        let in_f32 = !routing.scaled_inputs
            && (routing.sigmoid.is_some() || routing.limited_softmax.is_some());
        let logits = match in_f32 {
            // DeepSeek's routers compute in f32 from the input in f32, as transformers keeps
            // them (`_keep_in_fp32_modules_strict`, `F.linear` of f32 casts); Llama 4's in the
            // model's type.
            true => flat
                .clone()
                .cast(FloatDType::F32)
                .matmul(self.router.weight.val().cast(FloatDType::F32)),
            false => {
                let tokens = flat.dims()[0];
                project(&self.router, flat.clone().unsqueeze::<3>())
                    .cast(FloatDType::F32)
                    .reshape([tokens, routing.count])
            }
        };
        route(&to_host_f32(logits), routing, self.correction.as_deref())
    }

    /// Per expert, the tokens of `x` routed to it, their weights and the L2 norm of the
    /// expert's unweighted output on each (computed in f64 from the output in f32), which
    /// expert pruning's saliencies read. The output is the expert's on the token itself, also
    /// where the family scales an expert's input by its weight (Llama 4), as REAP's observer
    /// computes it (`experts(routed_in)`, "we do not apply router_scores").
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]`
    pub fn routed_output_norms(&self, x: Tensor<B, 3>) -> Vec<(Routed, Vec<f64>)> {
        let [batch, seq, hidden] = x.dims();
        let device = x.device();
        let flat = x.reshape([batch * seq, hidden]);
        let routed = self.route_tokens(&flat);
        self.experts
            .iter()
            .zip(routed)
            .map(|(expert, routed)| {
                if routed.tokens.is_empty() {
                    return (routed, Vec::new());
                }
                let rows = index_tensor::<B>(&routed.tokens, &device);
                let input = flat.clone().select(0, rows).unsqueeze::<3>();
                let y = project(&expert.down_proj, self.expert_hidden(expert, input));
                let norms = to_host_f32(y.cast(FloatDType::F32))
                    .chunks_exact(hidden.max(1))
                    .map(|row| {
                        row.iter()
                            .map(|&v| f64::from(v).powi(2))
                            .sum::<f64>()
                            .sqrt()
                    })
                    .collect();
                (routed, norms)
            })
            .collect()
    }

    /// Keeps only the experts `kept` (ascending indices): their MLPs, the router's columns
    /// and bias entries, and the correction biases of a sigmoid router, so the block routes
    /// among them as a model of `kept.len()` experts.
    pub fn keep_experts(&mut self, kept: &[usize]) {
        let device = self.router.weight.device();
        let columns = index_tensor::<B>(kept, &device);
        // Rebuilt from its values: burn-ndarray's column selection is column-major, which the
        // fused kernels do not read (the layer would fall back to the generic path).
        let weight = self.router.weight.val().select(1, columns.clone());
        self.router.weight = Param::from_tensor(Tensor::from_data(weight.into_data(), &device));
        if let Some(bias) = &self.router.bias {
            self.router.bias = Some(Param::from_tensor(bias.val().select(0, columns)));
        }
        let mut experts = std::mem::take(&mut self.experts)
            .into_iter()
            .map(Some)
            .collect::<Vec<_>>();
        self.experts = kept
            .iter()
            .filter_map(|&e| experts.get_mut(e)?.take())
            .collect();
        if let Some(correction) = &self.correction {
            self.correction = Some(kept.iter().map(|&e| correction[e]).collect());
        }
        self.routing.count = kept.len();
    }

    /// The borrowed view of the block that the kernels read; `None` where only the generic
    /// path runs it: experts with GPT-OSS's clamped GLU, or inputs scaled by their weights
    /// (Llama 4).
    pub(crate) fn weights(&self) -> Option<ExpertWeights<'_, B>> {
        if self.routing.clamped_glu.is_some() || self.routing.scaled_inputs {
            return None;
        }
        Some(ExpertWeights {
            router: &self.router,
            experts: self.experts.iter().map(Mlp::weights).collect(),
            shared: self
                .shared
                .as_ref()
                .map(|s| (s.mlp.weights(), s.gate.as_ref())),
            routing: self.routing,
            correction: self.correction.as_deref(),
        })
    }

    /// The input of an expert's down projection: the decoder's gated MLP, or the family's
    /// clamped GLU ([`Experts::clamped_glu`]).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, hidden]` → `[batch, seq, width]`
    fn expert_hidden(&self, expert: &Mlp<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
        match (self.routing.clamped_glu, &expert.gate_proj) {
            (Some(glu), Some(gate)) => {
                let [gate, up] = project_all([gate, &expert.up_proj], x);
                glu.apply(gate, up)
            }
            _ => expert.hidden(x),
        }
    }
}

/// `indices` as a tensor of indices on `device` (rows of tokens, columns of experts).
fn index_tensor<B: Backend>(indices: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let values: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(values, [indices.len()]), device)
}

/// Shows `observe` the rows of `x` (`[1, rows, width]`, the tokens of `routed`, of a batch of
/// sequences of `seq` tokens) one sample at a time ([`Routed::samples`]), as `[1, n, width]`.
fn observe_by_sample<B: Backend>(
    x: &Tensor<B, 3>,
    routed: &Routed,
    seq: usize,
    input: LinearInput,
    observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
) {
    let width = x.dims()[2];
    let samples = routed.samples(seq);
    match samples.as_slice() {
        [_] => observe(input, x),
        _ => {
            for rows in samples {
                observe(input, &x.clone().slice([0..1, rows, 0..width]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;
    use burn::module::Param;

    use super::*;
    use crate::model::arch::Activation;
    use crate::model::arch::SigmoidRouting;

    type Nd = NdArray<f32>;

    const TWO_OF_FOUR: Experts = Experts::softmax(4, 2, 5);

    /// A seeded `[in, out]` linear without a bias.
    fn linear(inputs: usize, outputs: usize, seed: usize) -> Linear<Nd> {
        let values: Vec<f32> = (0..inputs * outputs)
            .map(|i| (((i * 37 + seed * 101) % 61) as f32 - 30.0) / 40.0)
            .collect();
        Linear {
            weight: Param::from_tensor(Tensor::from_data(
                TensorData::new(values, [inputs, outputs]),
                &Default::default(),
            )),
            bias: None,
        }
    }

    /// Each token's output by hand: every expert's SwiGLU on the token alone, weighted by
    /// the routing of its own logits; each expert's observed rows are the tokens routed to
    /// it, sample by sample.
    #[test]
    fn the_block_weights_each_tokens_chosen_experts_and_shows_them_their_tokens() {
        let (hidden, inter, batch, seq) = (6, 5, 2, 7);
        let moe = SparseMoe::<Nd> {
            router: linear(hidden, 4, 0),
            experts: (0..4)
                .map(|e| Mlp {
                    gate_proj: Some(linear(hidden, inter, 3 * e + 1)),
                    up_proj: linear(hidden, inter, 3 * e + 2),
                    down_proj: linear(inter, hidden, 3 * e + 3),
                    activation: Activation::Silu,
                })
                .collect(),
            routing: TWO_OF_FOUR,
            shared: None,
            correction: None,
        };
        let values: Vec<f32> = (0..batch * seq * hidden)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 10.0)
            .collect();
        let x = Tensor::<Nd, 3>::from_data(
            TensorData::new(values.clone(), [batch, seq, hidden]),
            &Default::default(),
        );
        let mut seen: Vec<(LinearInput, usize)> = Vec::new();
        let out = moe
            .forward_observed(x, &mut |input, t| seen.push((input, t.dims()[1])), true)
            .unwrap();
        let out = to_host_f32(out);
        let host = |l: &Linear<Nd>| to_host_f32(l.weight.val());
        let matvec = |w: &[f32], x: &[f32], outputs: usize| -> Vec<f32> {
            (0..outputs)
                .map(|o| {
                    x.iter()
                        .enumerate()
                        .map(|(i, v)| v * w[i * outputs + o])
                        .sum()
                })
                .collect()
        };
        let mut routed_rows = [0usize; 4];
        for (t, token) in values.chunks(hidden).enumerate() {
            let logits = matvec(&host(&moe.router), token, 4);
            let mut want = vec![0.0f32; hidden];
            for (e, r) in route(&logits, TWO_OF_FOUR, None).iter().enumerate() {
                if r.tokens.is_empty() {
                    continue;
                }
                routed_rows[e] += 1;
                let m = &moe.experts[e];
                let gate = matvec(&host(m.gate_proj.as_ref().unwrap()), token, inter);
                let up = matvec(&host(&m.up_proj), token, inter);
                let act: Vec<f32> = gate
                    .iter()
                    .zip(&up)
                    .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                    .collect();
                for (w, y) in want
                    .iter_mut()
                    .zip(matvec(&host(&m.down_proj), &act, hidden))
                {
                    *w += r.weights[0] * y;
                }
            }
            for (got, want) in out[t * hidden..(t + 1) * hidden].iter().zip(&want) {
                assert!((got - want).abs() < 1e-4, "token {t}: {got} vs {want}");
            }
        }
        // Each expert saw its tokens once as its input and once as its down projection's,
        // in at most one piece per sample.
        for (e, &rows) in routed_rows.iter().enumerate() {
            for input in [LinearInput::ExpertIn(e), LinearInput::ExpertHidden(e)] {
                let pieces: Vec<usize> = seen
                    .iter()
                    .filter(|(i, _)| *i == input)
                    .map(|(_, n)| *n)
                    .collect();
                assert_eq!(pieces.iter().sum::<usize>(), rows, "{input:?}");
                assert!(pieces.len() <= batch, "{input:?}");
            }
        }
        assert_eq!(routed_rows.iter().sum::<usize>(), 2 * batch * seq);
    }

    /// Llama 4's routing by hand: each token goes to the expert of its best logit, whose
    /// sigmoid scales the token before the expert (so calibration sees it scaled), and the
    /// expert's output is added as it is.
    #[test]
    fn scaled_inputs_feed_each_expert_its_tokens_times_their_sigmoid() {
        let (hidden, inter, seq) = (4, 3, 5);
        let routing = Experts {
            count: 2,
            per_token: 1,
            normalize: false,
            width: inter,
            round_weights: true,
            sigmoid: Some(SigmoidRouting::LLAMA4),
            scaled_inputs: true,
            ..TWO_OF_FOUR
        };
        let moe = SparseMoe::<Nd> {
            router: linear(hidden, 2, 0),
            experts: (0..2)
                .map(|e| Mlp {
                    gate_proj: Some(linear(hidden, inter, 3 * e + 1)),
                    up_proj: linear(hidden, inter, 3 * e + 2),
                    down_proj: linear(inter, hidden, 3 * e + 3),
                    activation: Activation::Silu,
                })
                .collect(),
            routing,
            shared: None,
            correction: None,
        };
        let values: Vec<f32> = (0..seq * hidden)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0)
            .collect();
        let x = Tensor::<Nd, 3>::from_data(
            TensorData::new(values.clone(), [1, seq, hidden]),
            &Default::default(),
        );
        let mut seen = vec![Vec::new(); 2];
        let out = moe
            .forward_observed(
                x,
                &mut |input, t| {
                    if let LinearInput::ExpertIn(e) = input {
                        seen[e].extend(to_host_f32(t.clone()));
                    }
                },
                true,
            )
            .unwrap();
        let out = to_host_f32(out);
        let host = |l: &Linear<Nd>| to_host_f32(l.weight.val());
        let matvec = |w: &[f32], x: &[f32], outputs: usize| -> Vec<f32> {
            (0..outputs)
                .map(|o| {
                    x.iter()
                        .enumerate()
                        .map(|(i, v)| v * w[i * outputs + o])
                        .sum()
                })
                .collect()
        };
        let mut want_seen = vec![Vec::new(); 2];
        for (t, token) in values.chunks(hidden).enumerate() {
            let logits = matvec(&host(&moe.router), token, 2);
            let e = usize::from(logits[1] > logits[0]);
            let s = 1.0 / (1.0 + (-logits[e]).exp());
            let scaled: Vec<f32> = token.iter().map(|v| v * s).collect();
            let m = &moe.experts[e];
            let gate = matvec(&host(m.gate_proj.as_ref().unwrap()), &scaled, inter);
            let up = matvec(&host(&m.up_proj), &scaled, inter);
            let act: Vec<f32> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let want = matvec(&host(&m.down_proj), &act, hidden);
            for (got, want) in out[t * hidden..(t + 1) * hidden].iter().zip(&want) {
                assert!((got - want).abs() < 1e-5, "token {t}: {got} vs {want}");
            }
            want_seen[e].extend(scaled);
        }
        for e in 0..2 {
            assert_eq!(seen[e].len(), want_seen[e].len(), "expert {e}");
            for (got, want) in seen[e].iter().zip(&want_seen[e]) {
                assert!((got - want).abs() < 1e-6, "expert {e}: {got} vs {want}");
            }
        }
        assert!(
            !want_seen[0].is_empty() && !want_seen[1].is_empty(),
            "both experts hit"
        );
    }

    /// Keeping experts 1 and 3 of four under a sigmoid router with correction biases gives the
    /// block of those two built directly: their MLPs, the router's two columns, their biases;
    /// and each kept expert's output norms are the norms of its rows.
    #[test]
    fn kept_experts_route_as_a_block_of_only_them() {
        let (hidden, inter) = (6, 5);
        let expert = |e: usize| Mlp {
            gate_proj: Some(linear(hidden, inter, 3 * e + 1)),
            up_proj: linear(hidden, inter, 3 * e + 2),
            down_proj: linear(inter, hidden, 3 * e + 3),
            activation: Activation::Silu,
        };
        let routing = Experts {
            sigmoid: Some(SigmoidRouting {
                groups: 1,
                groups_per_token: 1,
                scale: 1.5,
                uncorrected: false,
            }),
            ..TWO_OF_FOUR
        };
        let router = linear(hidden, 4, 0);
        let mut four = SparseMoe::<Nd> {
            router: router.clone(),
            experts: (0..4).map(expert).collect(),
            routing,
            shared: None,
            correction: Some(vec![0.1, -0.2, 0.3, 0.05]),
        };
        four.keep_experts(&[1, 3]);
        let columns = to_host_f32(router.weight.val());
        let two_columns: Vec<f32> = columns.chunks(4).flat_map(|row| [row[1], row[3]]).collect();
        let two = SparseMoe::<Nd> {
            router: Linear {
                weight: Param::from_tensor(Tensor::from_data(
                    TensorData::new(two_columns, [hidden, 2]),
                    &Default::default(),
                )),
                bias: None,
            },
            experts: vec![expert(1), expert(3)],
            routing: Experts {
                count: 2,
                ..routing
            },
            shared: None,
            correction: Some(vec![-0.2, 0.05]),
        };
        assert_eq!(four.routing, two.routing);
        assert_eq!(four.correction, two.correction);
        // Row-major, as the fused kernels read a weight.
        match four.router.weight.val().into_primitive().tensor() {
            burn::backend::ndarray::NdArrayTensor::F32(s) => assert!(s.view().to_slice().is_some()),
            _ => panic!("an f32 router"),
        }
        let values: Vec<f32> = (0..3 * hidden)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0)
            .collect();
        let x = || {
            Tensor::<Nd, 3>::from_data(
                TensorData::new(values.clone(), [1, 3, hidden]),
                &Default::default(),
            )
        };
        let out =
            |m: &SparseMoe<Nd>| to_host_f32(m.forward_observed(x(), &mut |_, _| {}, true).unwrap());
        assert_eq!(out(&four), out(&two));
        // Each token goes to both experts left; the norms are those of their unweighted rows.
        let norms = four.routed_output_norms(x());
        for (e, (routed, norms)) in norms.iter().enumerate() {
            assert_eq!(routed.tokens, vec![0, 1, 2]);
            let m = &four.experts[e];
            let y = to_host_f32(project(&m.down_proj, m.hidden(x())));
            for (t, norm) in norms.iter().enumerate() {
                let row = &y[t * hidden..(t + 1) * hidden];
                let want = row
                    .iter()
                    .map(|v| f64::from(*v).powi(2))
                    .sum::<f64>()
                    .sqrt();
                assert!((norm - want).abs() < 1e-12, "expert {e} token {t}");
            }
        }
    }
}
