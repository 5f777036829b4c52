//! Routing tokens to experts on the host, from a layer's router logits: per token its
//! `top_k` experts by softmax probability (within the best groups where the router limits
//! them, DeepSeek-V2's) or by grouped sigmoid scores with correction biases (DeepSeek-V3's,
//! GLM-4.5's), with the weights of their outputs. The decoder's generic block and the fused
//! kernels route by these same functions, so both send every token to the same experts.

use crate::model::arch::{Experts, SigmoidRouting};

/// The tokens routed to one expert, in token order, with the weight of its output in each.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Routed {
    /// Rows of the flattened `[batch · seq]` tokens.
    pub tokens: Vec<usize>,
    /// The weight of the expert's output for each token.
    pub weights: Vec<f32>,
}

impl Routed {
    /// The runs of its tokens that belong to one sample of a batch of sequences of `seq`
    /// tokens, as ranges of its token list (in token order): how an expert's inputs are shown
    /// to calibration, one sample at a time.
    pub fn samples(&self, seq: usize) -> Vec<std::ops::Range<usize>> {
        let seq = seq.max(1);
        let mut runs = Vec::new();
        let mut start = 0;
        while start < self.tokens.len() {
            let sample = self.tokens[start] / seq;
            let count = self.tokens[start..]
                .iter()
                .take_while(|&&t| t / seq == sample)
                .count();
            runs.push(start..start + count);
            start += count;
        }
        runs
    }
}

/// Routes `tokens` tokens by their router logits (`[tokens, experts]`, row-major), per token
/// by the softmax ([`softmax_choice`]) or by grouped sigmoid scores with the experts'
/// `correction` biases ([`sigmoid_choice`]) as `routing` says. Returns per expert the tokens it
/// receives.
pub(crate) fn route(logits: &[f32], routing: Experts, correction: Option<&[f32]>) -> Vec<Routed> {
    let n = routing.count;
    let mut routed = vec![Routed::default(); n];
    for (token, row) in logits.chunks_exact(n.max(1)).enumerate() {
        let chosen = match routing.sigmoid {
            None => softmax_choice(row, routing),
            Some(sigmoid) => sigmoid_choice(row, routing, sigmoid, correction),
        };
        for (e, weight) in chosen {
            routed[e].tokens.push(token);
            routed[e].weights.push(weight);
        }
    }
    routed
}

/// One token's experts with their weights by the softmax of its logits in f32: the
/// `per_token` most probable (the lower index first among equals), within the best groups by
/// their best probability where the routing is [`LimitedSoftmax`]; their probabilities
/// renormalised in f32 where `routing` says so, times the limited softmax's scale.
fn softmax_choice(row: &[f32], routing: Experts) -> Vec<(usize, f32)> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f64> = row.iter().map(|&l| f64::from(l - max).exp()).collect();
    let total: f64 = exp.iter().sum();
    let probs: Vec<f32> = exp.iter().map(|&e| (e / total) as f32).collect();
    let mut order: Vec<usize> = match routing.limited_softmax {
        Some(limit) => experts_of_best_groups(&probs, limit.groups, limit.groups_per_token, |g| {
            g.iter().copied().fold(f32::NEG_INFINITY, f32::max)
        }),
        None => (0..row.len()).collect(),
    };
    // Stable: equal probabilities keep the lower expert first.
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
    order.truncate(routing.per_token);
    let sum: f32 = order.iter().map(|&e| probs[e]).sum();
    let scale = routing.limited_softmax.map_or(1.0, |l| l.scale as f32);
    order
        .into_iter()
        .map(|e| match routing.normalize {
            true => (e, probs[e] / sum * scale),
            false => (e, probs[e] * scale),
        })
        .collect()
}

/// The experts, in index order, of the `open` of `groups` equal groups of `values` (one per
/// expert) whose `score` is highest (the lower group first among equals).
fn experts_of_best_groups(
    values: &[f32],
    groups: usize,
    open: usize,
    score: impl Fn(&[f32]) -> f32,
) -> Vec<usize> {
    let size = (values.len() / groups.max(1)).max(1);
    let scores: Vec<f32> = values.chunks(size).map(score).collect();
    let mut best: Vec<usize> = (0..scores.len()).collect();
    best.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    best.truncate(open);
    (0..values.len())
        .filter(|e| best.contains(&(e / size)))
        .collect()
}

/// One token's experts with their weights by [`SigmoidRouting`], in f32 as transformers
/// computes them: the sigmoid of each logit; the choice by sigmoid plus `correction`, within
/// the best groups by the sum of their two best choice scores (the lower index first among
/// equals); the chosen sigmoids, divided by their sum (plus 1e-20) where `routing.normalize`
/// says, times the scale.
fn sigmoid_choice(
    row: &[f32],
    routing: Experts,
    sigmoid: SigmoidRouting,
    correction: Option<&[f32]>,
) -> Vec<(usize, f32)> {
    let scores: Vec<f32> = row.iter().map(|&l| 1.0 / (1.0 + (-l).exp())).collect();
    let choice: Vec<f32> = match correction {
        Some(bias) => scores.iter().zip(bias).map(|(s, b)| s + b).collect(),
        None => scores.clone(),
    };
    let mut order =
        experts_of_best_groups(&choice, sigmoid.groups, sigmoid.groups_per_token, |group| {
            let mut best = group.to_vec();
            best.sort_by(|a, b| b.total_cmp(a));
            best.iter().take(2).sum()
        });
    order.sort_by(|&a, &b| choice[b].total_cmp(&choice[a]));
    order.truncate(routing.per_token);
    let sum = match routing.normalize {
        true => order.iter().map(|&e| scores[e]).sum::<f32>() + 1e-20,
        false => 1.0,
    };
    let scale = sigmoid.scale as f32;
    order
        .into_iter()
        .map(|e| (e, scores[e] / sum * scale))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::LimitedSoftmax;

    const TWO_OF_FOUR: Experts = Experts::softmax(4, 2, 5);

    #[test]
    fn an_experts_tokens_split_into_their_samples() {
        let routed = Routed {
            tokens: vec![1, 3, 4, 9, 10, 11],
            weights: vec![1.0; 6],
        };
        // Samples of 4 tokens: 1 and 3 in the first, 4 in the second, 9 to 11 in the third.
        assert_eq!(routed.samples(4), vec![0..2, 2..3, 3..6]);
        assert!(Routed::default().samples(4).is_empty());
    }

    #[test]
    fn routing_picks_the_two_most_probable_and_renormalises() {
        // Token 0: logits 0, ln 2, ln 3, ln 4 → probabilities 0.1, 0.2, 0.3, 0.4: experts 3
        // and 2, weights 0.4/0.7 and 0.3/0.7. Token 1: expert 0 and then 1 (equal to 2 and 3,
        // the lower index first), weights e/(e + 1) and 1/(e + 1).
        let l = |v: f64| v.ln() as f32;
        let logits = [0.0, l(2.0), l(3.0), l(4.0), 1.0, 0.0, 0.0, 0.0];
        let routed = route(&logits, TWO_OF_FOUR, None);
        assert_eq!(routed[0].tokens, vec![1]);
        assert_eq!(routed[1].tokens, vec![1]);
        assert_eq!(routed[2].tokens, vec![0]);
        assert_eq!(routed[3].tokens, vec![0]);
        let close = |a: f32, b: f64| assert!((f64::from(a) - b).abs() < 1e-6, "{a} vs {b}");
        close(routed[3].weights[0], 4.0 / 7.0);
        close(routed[2].weights[0], 3.0 / 7.0);
        let e = std::f64::consts::E;
        close(routed[0].weights[0], e / (e + 1.0));
        close(routed[1].weights[0], 1.0 / (e + 1.0));
        // Without renormalising, the softmax probabilities themselves.
        let raw = route(
            &logits,
            Experts {
                normalize: false,
                ..TWO_OF_FOUR
            },
            None,
        );
        close(raw[3].weights[0], 0.4);
        close(raw[0].weights[0], e / (e + 3.0));
    }

    #[test]
    fn sigmoid_routing_chooses_by_corrected_scores_within_the_best_groups() {
        // Four experts in two groups of two, one group open, two experts a token, renormalised
        // and scaled by 2. The sigmoids are 0.5, σ(1) = 0.731, σ(2) = 0.881, σ(-1) = 0.269; a
        // correction of +0.6 on expert 3 makes the second group's sum 0.881 + 0.869 = 1.750
        // beat the first's 1.231, so the token goes to experts 2 and 3, weighted by their
        // sigmoids (not the corrected scores): 2·σ(2)/(σ(2) + σ(-1)) and 2·σ(-1)/(σ(2) + σ(-1)).
        let routing = Experts {
            sigmoid: Some(SigmoidRouting {
                groups: 2,
                groups_per_token: 1,
                scale: 2.0,
                uncorrected: false,
            }),
            ..TWO_OF_FOUR
        };
        let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
        let routed = route(&[0.0, 1.0, 2.0, -1.0], routing, Some(&[0.0, 0.0, 0.0, 0.6]));
        assert!(routed[0].tokens.is_empty() && routed[1].tokens.is_empty());
        let (two, three) = (sig(2.0), sig(-1.0));
        let close = |a: f32, b: f64| assert!((f64::from(a) - b).abs() < 1e-6, "{a} vs {b}");
        close(routed[2].weights[0], 2.0 * two / (two + three));
        close(routed[3].weights[0], 2.0 * three / (two + three));
        // Without the corrections the first group wins (1.231 against 0.881 + 0.269 = 1.150),
        // and without renormalising the weights are 2·σ.
        let plain = route(
            &[0.0, 1.0, 2.0, -1.0],
            Experts {
                normalize: false,
                ..routing
            },
            None,
        );
        close(plain[0].weights[0], 2.0 * 0.5);
        close(plain[1].weights[0], 2.0 * sig(1.0));
        assert!(plain[2].tokens.is_empty() && plain[3].tokens.is_empty());
    }

    #[test]
    fn limited_softmax_routes_within_the_best_group_and_scales_unnormalised() {
        // Logits ln 1, ln 2, ln 3, ln 4: probabilities 0.1, 0.2, 0.3, 0.4. In two groups of
        // two with one open, the token's best probability (0.4, expert 3) opens the second
        // group: experts 3 and 2, weighted 3·0.4 and 3·0.3, not renormalised. A logit of
        // ln 4.5 on expert 0 gives the first group the best probability (4.5 of 13.5 against
        // 4), so experts 0 and 1 (3·4.5/13.5 and 3·2/13.5), though expert 3 outranks expert 1.
        let routing = Experts {
            normalize: false,
            limited_softmax: Some(LimitedSoftmax {
                groups: 2,
                groups_per_token: 1,
                scale: 3.0,
            }),
            ..TWO_OF_FOUR
        };
        let l = |v: f64| v.ln() as f32;
        let close = |a: f32, b: f64| assert!((f64::from(a) - b).abs() < 1e-6, "{a} vs {b}");
        let routed = route(&[l(1.0), l(2.0), l(3.0), l(4.0)], routing, None);
        assert!(routed[0].tokens.is_empty() && routed[1].tokens.is_empty());
        close(routed[3].weights[0], 3.0 * 0.4);
        close(routed[2].weights[0], 3.0 * 0.3);
        let routed = route(&[l(4.5), l(2.0), l(3.0), l(4.0)], routing, None);
        assert!(routed[2].tokens.is_empty() && routed[3].tokens.is_empty());
        close(routed[0].weights[0], 3.0 * 4.5 / 13.5);
        close(routed[1].weights[0], 3.0 * 2.0 / 13.5);
    }
}
