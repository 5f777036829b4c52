//! Expert pruning of mixtures of experts: REAP (Lasby et al., ICLR 2026, repository
//! CerebrasResearch/reap) and the baselines its code offers. One calibration pass runs the
//! samples through the dense model layer by layer; at each layer with experts the tokens are
//! routed as the family routes them, every expert's output on its tokens is measured
//! ([`ExpertStats`]), and the same number of the least salient experts is removed from every
//! such layer ([`Removal`]): their MLPs, the router's columns and a sigmoid router's correction
//! biases. The next layer's inputs are the dense layer's outputs, as the reference observes the
//! whole dense model before it prunes.
//!
//! Where this follows the family rather than the reference code: the reference takes every
//! family's chosen experts as `topk(router_logits)` and their weights as the softmax of the
//! logits, renormalised over the top-k where `config.norm_topk_prob` is true. Here the tokens
//! and weights are the family's own routing ([`crate::model::decoder`]): the same for softmax
//! routers without groups, and the model's real choice and weights for group-limited and
//! sigmoid routers (DeepSeek-V2/V3, GLM-4.5, Llama 4) and for Mixtral, which always
//! renormalises.

mod choice;
mod saliency;

pub use choice::{ExpertAmount, Removal};
pub use saliency::ExpertStats;

use std::collections::BTreeMap;

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::activations::{window_length, Activations, Batching};
use super::skip::glob_matches;
use super::{Method, PruneError};
use crate::model::arch::LlamaConfig;
use crate::model::checkpoint::Layers;
use crate::model::decoder::LinearInput;

/// The report's file name beside a saved model.
pub const EXPERTS_FILE: &str = "wanda_experts.json";

/// What an expert-pruning stage is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertOptions {
    /// How many experts each layer loses.
    pub amount: ExpertAmount,
    /// Experts kept whatever their saliency, as globs over `model.layers.{i}.mlp.experts.{e}`.
    pub protect: Vec<String>,
}

/// One layer's expert pruning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerExperts {
    /// The decoder layer.
    pub layer: usize,
    /// Its experts before.
    pub experts: usize,
    /// The experts kept, by their index before, ascending.
    pub kept: Vec<usize>,
    /// The experts removed, ascending.
    pub removed: Vec<usize>,
    /// Calibration tokens that passed the layer.
    pub tokens: u64,
    /// Each expert's saliency by every expert method, by method name.
    pub saliency: BTreeMap<String, Vec<f64>>,
}

/// What an expert-pruning stage removed, per layer with experts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpertsReport {
    /// The saliency the experts were chosen by.
    pub method: Method,
    /// Experts removed from each layer with experts.
    pub removed_per_layer: usize,
    /// Experts per layer before and after.
    pub experts_before: usize,
    /// Experts per layer after.
    pub experts_after: usize,
    /// The layers with experts, in order.
    pub layers: Vec<LayerExperts>,
}

/// The expert methods, in the order reports list their saliencies.
const EXPERT_METHODS: [Method; 4] = [
    Method::Reap,
    Method::Frequency,
    Method::Ean,
    Method::WeightedFrequency,
];

/// Removes experts from every layer of `model` (whose config is `config`) by `method`'s
/// saliency on the `calibration` windows, as `options` asks, and says what went.
/// `progress(step, steps)` after each layer. Everything that could refuse the removal (the
/// amount, the router's groups, `top_k`, `protect`) is checked before any layer changes.
pub fn prune_experts<B: Backend>(
    model: &mut impl Layers<B>,
    config: &LlamaConfig,
    method: Method,
    options: &ExpertOptions,
    calibration: &[Vec<u32>],
    batching: impl Into<Batching>,
    mut progress: impl FnMut(usize, usize),
) -> Result<ExpertsReport, PruneError> {
    let layers = model.layer_count();
    if !method.removes_experts() {
        return Err(choice::refused(format!(
            "`{method}` prunes weights; expert pruning takes `reap`, `frequency`, `ean` or \
             `weighted_frequency`"
        )));
    }
    let routing = (0..layers)
        .find_map(|i| config.layer_experts(i))
        .ok_or_else(|| {
            choice::refused(format!(
                "`{method}` removes experts, and this model ({}) has none; prune its weights \
                 with `wanda`, `sparsegpt`, `ria` or `magnitude`",
                config.architecture.row().hf_class
            ))
        })?;
    let removal = Removal::plan(&routing, options.amount)?;
    let protected = protected_experts(config, layers, &options.protect)?;
    for (i, protected) in protected.iter().enumerate() {
        if config.layer_experts(i).is_some() {
            removal.kept(i, &vec![0.0; routing.count], protected)?;
        }
    }
    let seqlen = window_length(calibration)?;
    let shell = model.shell();
    let device = shell.embed_tokens.weight.device();
    let batching = batching.into();
    let mut inputs = Activations::embed(shell, calibration, seqlen, batching, &device);
    let (cos, sin) = shell.rope_tables(0, seqlen);
    let mut report = ExpertsReport {
        method,
        removed_per_layer: removal.removed,
        experts_before: removal.count,
        experts_after: removal.count - removal.removed,
        layers: Vec::new(),
    };
    for (i, protected) in protected.iter().enumerate() {
        if config.layer_experts(i).is_none() {
            let layer = model.layer(i)?;
            inputs = inputs.forward(&layer, &cos, &sin);
            progress(i + 1, layers);
            continue;
        }
        let mut layer = model.take_layer(i)?;
        let moe = layer.experts().ok_or_else(|| {
            PruneError::Layers(format!(
                "decoder layer {i} has no experts, and its config does"
            ))
        })?;
        let mut stats = ExpertStats::new(moe.routing.count);
        inputs = inputs.forward_observed(&layer, &cos, &sin, &mut |input, x| {
            if input != LinearInput::MlpIn {
                return;
            }
            let [batch, seq, _] = x.dims();
            stats.tokens += (batch * seq) as u64;
            for (e, (routed, norms)) in moe.routed_output_norms(x.clone()).iter().enumerate() {
                stats.add(e, &routed.weights, norms);
            }
        });
        let chosen_by = stats.saliency(method).expect("an expert method");
        let kept = removal.kept(i, &chosen_by, protected)?;
        if let Some(moe) = layer.experts_mut() {
            moe.keep_experts(&kept);
        }
        model.set_layer(i, layer)?;
        report.layers.push(LayerExperts {
            layer: i,
            experts: removal.count,
            removed: (0..removal.count).filter(|e| !kept.contains(e)).collect(),
            kept,
            tokens: stats.tokens,
            saliency: EXPERT_METHODS
                .iter()
                .filter_map(|&m| Some((m.name().to_string(), stats.saliency(m)?)))
                .collect(),
        });
        progress(i + 1, layers);
    }
    drop(inputs);
    crate::sys::allocator::release_freed_memory();
    Ok(report)
}

/// Per layer, per expert, whether a `protect` glob names it
/// (`model.layers.{i}.mlp.experts.{e}`); a glob that names no expert is an error.
fn protected_experts(
    config: &LlamaConfig,
    layers: usize,
    protect: &[String],
) -> Result<Vec<Vec<bool>>, PruneError> {
    let mut matched = vec![false; protect.len()];
    let protected = (0..layers)
        .map(|i| {
            let count = config.layer_experts(i).map_or(0, |e| e.count);
            (0..count)
                .map(|e| {
                    let name = format!("model.layers.{i}.mlp.experts.{e}");
                    let mut hit = false;
                    for (p, pattern) in protect.iter().enumerate() {
                        if glob_matches(pattern, &name) {
                            matched[p] = true;
                            hit = true;
                        }
                    }
                    hit
                })
                .collect()
        })
        .collect();
    match matched.iter().position(|&m| !m) {
        Some(p) => Err(choice::refused(format!(
            "`protect` pattern `{}` names no expert of this model; experts are named like \
             `model.layers.{}.mlp.experts.0`",
            protect[p],
            (0..layers)
                .find(|&i| config.layer_experts(i).is_some())
                .unwrap_or(0)
        ))),
        None => Ok(protected),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::{Experts, SigmoidRouting};
    use crate::model::kernels::route;

    /// The statistics of tokens with router `logits` (four experts each), expert `e`'s output
    /// norm on token `t` being `norm(t, e)`.
    fn stats_of(
        logits: &[f32],
        routing: Experts,
        correction: Option<&[f32]>,
        norm: impl Fn(usize, usize) -> f64,
    ) -> ExpertStats {
        let mut stats = ExpertStats::new(4);
        for (e, routed) in route(logits, routing, correction).iter().enumerate() {
            let norms: Vec<f64> = routed.tokens.iter().map(|&t| norm(t, e)).collect();
            stats.add(e, &routed.weights, &norms);
        }
        stats
    }

    fn close(got: &[f64], want: &[f64]) {
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() < 1e-6 * w.abs().max(1.0),
                "{got:?} vs {want:?}"
            );
        }
    }

    #[test]
    fn softmax_saliencies_by_hand_with_and_without_renormalising() {
        // Token 0: probabilities 0.1, 0.2, 0.3, 0.4 → experts 3 and 2; token 1: logits 1, 0,
        // 0, 0 → experts 0 and 1 (e/(e + 3) and 1/(e + 3)). Expert e's output norm is e + 1 on
        // token 0 and e + 2 on token 1.
        let l = |v: f64| v.ln() as f32;
        let logits = [0.0, l(2.0), l(3.0), l(4.0), 1.0, 0.0, 0.0, 0.0];
        let norm = |t: usize, e: usize| (e + 1 + t) as f64;
        let e = std::f64::consts::E;
        let renormalised = stats_of(&logits, Experts::softmax(4, 2, 8), None, norm);
        // Renormalised over the two: 4/7 and 3/7; e/(e + 1) and 1/(e + 1).
        let weights = [e / (e + 1.0), 1.0 / (e + 1.0), 3.0 / 7.0, 4.0 / 7.0];
        let norms = [2.0, 3.0, 3.0, 4.0];
        let reap: Vec<f64> = weights.iter().zip(norms).map(|(w, n)| w * n).collect();
        close(&renormalised.saliency(Method::Reap).unwrap(), &reap);
        close(&renormalised.saliency(Method::Ean).unwrap(), &norms);
        close(
            &renormalised.saliency(Method::WeightedFrequency).unwrap(),
            &weights,
        );
        close(
            &renormalised.saliency(Method::Frequency).unwrap(),
            &[1.0; 4],
        );
        // The softmax probabilities themselves where the family does not renormalise (OLMoE).
        let raw = Experts {
            normalize: false,
            ..Experts::softmax(4, 2, 8)
        };
        let raw = stats_of(&logits, raw, None, norm);
        let weights = [e / (e + 3.0), 1.0 / (e + 3.0), 0.3, 0.4];
        let reap: Vec<f64> = weights.iter().zip(norms).map(|(w, n)| w * n).collect();
        close(&raw.saliency(Method::Reap).unwrap(), &reap);
        close(&raw.saliency(Method::WeightedFrequency).unwrap(), &weights);
    }

    #[test]
    fn sigmoid_saliencies_by_hand_with_and_without_renormalising() {
        // Logits 0, 1, 2, -1 in two groups of two, one open, two experts a token, scale 2.
        // With the correction +0.6 on expert 3 the second group wins: experts 2 and 3, weights
        // 2σ(2)/(σ(2) + σ(-1)) and 2σ(-1)/(σ(2) + σ(-1)). Without renormalising or correction
        // the first group: experts 0 and 1, weights 2σ(0) and 2σ(1).
        let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
        let routing = Experts {
            sigmoid: Some(SigmoidRouting {
                groups: 2,
                groups_per_token: 1,
                scale: 2.0,
                uncorrected: false,
            }),
            ..Experts::softmax(4, 2, 8)
        };
        let logits = [0.0, 1.0, 2.0, -1.0];
        let norm = |_: usize, e: usize| 10.0 * (e + 1) as f64;
        let corrected = stats_of(&logits, routing, Some(&[0.0, 0.0, 0.0, 0.6]), norm);
        let (two, three) = (sig(2.0), sig(-1.0));
        let w = [
            0.0,
            0.0,
            2.0 * two / (two + three),
            2.0 * three / (two + three),
        ];
        close(
            &corrected.saliency(Method::Reap).unwrap(),
            &[0.0, 0.0, 30.0 * w[2], 40.0 * w[3]],
        );
        close(&corrected.saliency(Method::WeightedFrequency).unwrap(), &w);
        let plain = Experts {
            normalize: false,
            ..routing
        };
        let plain = stats_of(&logits, plain, None, norm);
        close(
            &plain.saliency(Method::Reap).unwrap(),
            &[10.0 * 2.0 * sig(0.0), 20.0 * 2.0 * sig(1.0), 0.0, 0.0],
        );
        close(
            &plain.saliency(Method::Frequency).unwrap(),
            &[1.0, 1.0, 0.0, 0.0],
        );
    }
}
