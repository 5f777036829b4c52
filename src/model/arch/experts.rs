//! How a family routes tokens to its experts: the routers' settings and the experts' activation, as a
//! config gives them ([`crate::model::decoder`] runs them).

use burn::prelude::*;
use serde::{Deserialize, Serialize};

/// How a family routes tokens to its experts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Experts {
    /// Experts per layer (Mixtral's `num_local_experts`).
    pub count: usize,
    /// Experts each token goes to (`num_experts_per_tok`).
    pub per_token: usize,
    /// Whether the chosen experts' probabilities are renormalised to sum to one (Mixtral
    /// always; `norm_topk_prob` elsewhere).
    pub normalize: bool,
    /// Each expert's MLP width (Mixtral's `intermediate_size`, Qwen3-MoE's
    /// `moe_intermediate_size`).
    pub width: usize,
    /// Whether the routing weights are rounded to the model's dtype before they multiply the
    /// experts' outputs (Qwen3-MoE's and OLMoE's routers return them so; Mixtral's keep f32).
    pub round_weights: bool,
    /// The width of a shared expert every token goes through beside the routed ones, its output
    /// gated by `sigmoid(shared_expert_gate(x))` (Qwen2-MoE's) unless `shared_ungated`; `None`
    /// without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<usize>,
    /// Whether the shared expert's output is added as it is, without a gate (GLM-4.5's
    /// `shared_experts`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_ungated: bool,
    /// Tokens are routed by grouped sigmoid scores instead of the softmax (DeepSeek-V3's router,
    /// GLM-4.5's); `None`: the softmax.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigmoid: Option<SigmoidRouting>,
    /// The first layers have one dense MLP of the decoder's `intermediate_size` instead of
    /// experts (GLM-4.5's `first_k_dense_replace`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub first_dense_layers: usize,
    /// Whether the router and every expert's linears carry biases (GPT-OSS).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub biased: bool,
    /// The experts' clamped GLU in place of the decoder's activation (GPT-OSS); `None`: the
    /// decoder's gated MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clamped_glu: Option<ClampedGlu>,
    /// Tokens are routed by the softmax within the best groups and the weights scaled
    /// (DeepSeek-V2's router); `None`: over all experts, unscaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_softmax: Option<LimitedSoftmax>,
    /// Only every `layer_step`-th layer has experts, layers `step − 1, 2·step − 1, …` (Llama 4's
    /// `interleave_moe_layer_step`); the others a dense MLP of the decoder's
    /// `intermediate_size`. 1: every layer past the dense first ones.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub layer_step: usize,
    /// The routing weights scale each expert's input instead of its output, and the router
    /// computes in the model's type (Llama 4's `Llama4TextMoe`: `experts(x · w)`, the experts'
    /// outputs summed unweighted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scaled_inputs: bool,
}

impl Experts {
    /// Mixtral's routing: `per_token` of `count` experts `width` wide chosen by the softmax
    /// over all of them, their probabilities renormalised and kept in f32, on every layer,
    /// with nothing beside them. The other families change a field or two of it.
    pub const fn softmax(count: usize, per_token: usize, width: usize) -> Experts {
        Experts {
            count,
            per_token,
            normalize: true,
            width,
            round_weights: false,
            shared: None,
            shared_ungated: false,
            sigmoid: None,
            first_dense_layers: 0,
            biased: false,
            clamped_glu: None,
            limited_softmax: None,
            layer_step: 1,
            scaled_inputs: false,
        }
    }

    /// Whether layer `i` of a model with these experts has them: past the dense first layers,
    /// and one of every [`Self::layer_step`].
    pub fn in_layer(&self, i: usize) -> bool {
        let step = self.layer_step.max(1);
        i >= self.first_dense_layers && (i + 1).is_multiple_of(step)
    }

    /// The layers, of `layers`, that have a dense MLP instead.
    pub fn dense_layers(&self, layers: usize) -> usize {
        (0..layers).filter(|&i| !self.in_layer(i)).count()
    }
}

/// `serde`'s test for a count left out of a config when it is 0.
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `serde`'s default of [`Experts::layer_step`].
fn one() -> usize {
    1
}

/// `serde`'s test for a step left out of a config when it is 1.
fn is_one(n: &usize) -> bool {
    *n == 1
}

/// DeepSeek-V3's router (transformers' `DeepseekV3TopkRouter`, GLM-4.5's `Glm4MoeTopkRouter`):
/// per token the sigmoid of each router logit, computed in f32; the experts are chosen by that
/// score plus the expert's correction bias (`e_score_correction_bias`), among the
/// `groups_per_token` of `groups` equal groups whose two best such scores sum highest; each
/// chosen expert's weight is its sigmoid, renormalised over the chosen where
/// [`Experts::normalize`] says, times `scale`. Llama 4's router (`Llama4Router`) is the case of
/// one group, no correction biases (`uncorrected`), no renormalisation and a scale of 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SigmoidRouting {
    /// Groups of experts (`n_group`).
    pub groups: usize,
    /// Groups a token's experts come from (`topk_group`).
    pub groups_per_token: usize,
    /// The factor of the routing weights (`routed_scaling_factor`).
    pub scale: f64,
    /// The choice is by the sigmoids alone: the router has no correction biases (Llama 4's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub uncorrected: bool,
}

impl SigmoidRouting {
    /// Llama 4's router: the sigmoids of the top logits, unscaled, in one group.
    pub const LLAMA4: SigmoidRouting = SigmoidRouting {
        groups: 1,
        groups_per_token: 1,
        scale: 1.0,
        uncorrected: true,
    };
}

/// DeepSeek-V2's router (transformers' `DeepseekV2TopkRouter`): per token the softmax of the
/// router logits in f32; the experts chosen by that probability among the `groups_per_token`
/// of `groups` equal groups whose best probability is highest (`group_limited_greedy`; one
/// group open to all is `greedy`); each chosen expert's weight its probability, renormalised
/// where [`Experts::normalize`] says (DeepSeek-V2's never is), times `scale`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LimitedSoftmax {
    /// Groups of experts (`n_group`; 1 under `greedy`).
    pub groups: usize,
    /// Groups a token's experts come from (`topk_group`).
    pub groups_per_token: usize,
    /// The factor of the routing weights (`routed_scaling_factor`).
    pub scale: f64,
}

/// GPT-OSS's expert activation: with `g = min(gate, limit)` and `u = clamp(up, ±limit)`, the
/// down projection reads `(u + 1) · g · σ(alpha · g)` (transformers' `GptOssExperts`,
/// `swiglu_limit` and `swiglu_alpha`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClampedGlu {
    /// The gain inside the sigmoid (`swiglu_alpha`, 1.702).
    pub alpha: f64,
    /// The clamp of the gate (above) and the up projection (both sides) (`swiglu_limit`, 7).
    pub limit: f64,
}

impl ClampedGlu {
    /// `(clamp(up, ±limit) + 1) · g · σ(alpha · g)`, `g = min(gate, limit)`, in the tensors'
    /// type, as transformers computes it.
    ///
    /// # Shapes
    /// - `gate`, `up`: any, the same → same
    pub fn apply<B: Backend, const D: usize>(
        self,
        gate: Tensor<B, D>,
        up: Tensor<B, D>,
    ) -> Tensor<B, D> {
        let gate = gate.clamp_max(self.limit);
        let up = up.clamp(-self.limit, self.limit);
        let glu = gate.clone() * burn::tensor::activation::sigmoid(gate * self.alpha);
        (up + 1.0) * glu
    }
}

/// The `config.json` keys that give a layer's expert count in one family or another
/// (transformers reads several of them as aliases of one another).
pub const EXPERT_COUNT_KEYS: [&str; 3] = ["num_local_experts", "num_experts", "n_routed_experts"];

/// The `config.json` keys of mixtures of experts, each family reading its own (Mixtral's
/// `num_local_experts`, DeepSeek's `n_routed_experts`, Llama 4's `interleave_moe_layer_step`,
/// …); flattened into [`super::HfLlamaConfig`], so they sit at the top level of the file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HfExpertKeys {
    /// Mixtral: experts per layer (and Qwen3-MoE's, as transformers 5 writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_local_experts: Option<usize>,
    /// Mixtral: experts each token goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts_per_tok: Option<usize>,
    /// Qwen3-MoE, OLMoE: experts per layer (transformers 5 writes Qwen3-MoE's as
    /// `num_local_experts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts: Option<usize>,
    /// Qwen3-MoE, Qwen2-MoE: each expert's MLP width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_intermediate_size: Option<usize>,
    /// Qwen2-MoE: the shared expert's MLP width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_expert_intermediate_size: Option<usize>,
    /// Granite MoE (shared), Granite 4.0: the width of the MLP every token goes through
    /// (`shared_mlp`; 0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_intermediate_size: Option<usize>,
    /// Qwen3-MoE, OLMoE: whether the chosen experts' probabilities are renormalised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm_topk_prob: Option<bool>,
    /// Qwen3-MoE: every `n`-th layer has experts (default 1), unless in `mlp_only_layers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_sparse_step: Option<usize>,
    /// Qwen3-MoE: the layers with a dense MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp_only_layers: Option<Vec<usize>>,
    /// GLM-4.5 (DeepSeek-V3's keys): routed experts per layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_routed_experts: Option<usize>,
    /// GLM-4.5: shared experts, one MLP `n_shared_experts · moe_intermediate_size` wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_shared_experts: Option<usize>,
    /// GLM-4.5: the factor of the routing weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed_scaling_factor: Option<f64>,
    /// GLM-4.5: groups of experts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_group: Option<usize>,
    /// GLM-4.5: the groups a token's experts come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_group: Option<usize>,
    /// GLM-4.5: the first layers with a dense MLP instead of experts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_k_dense_replace: Option<usize>,
    /// DeepSeek-V2: `greedy` or `group_limited_greedy` routing (V3's `noaux_tc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_method: Option<String>,
    /// DeepSeek: `softmax` (V2) or `sigmoid` (V3) router scores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring_func: Option<String>,
    /// GPT-OSS: the clamp of its experts' gate and up projections (default 7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swiglu_limit: Option<f64>,
    /// GPT-OSS: the gain inside its experts' sigmoid (default 1.702).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swiglu_alpha: Option<f64>,
    /// Llama 4: the width of the dense layers' MLP (the experts' is `intermediate_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intermediate_size_mlp: Option<usize>,
    /// Llama 4: every `n`-th layer has experts (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interleave_moe_layer_step: Option<usize>,
    /// Llama 4: the layers with experts, where given (else from the step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_layers: Option<Vec<usize>>,
}
