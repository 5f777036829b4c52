//! Expert saliencies from calibration, as REAP's observer accumulates them
//! (CerebrasResearch/reap, `pruning_metrics.py`, `update_pruning_state`): per expert the
//! calibration tokens routed to it, the sum of their routing weights, and the sum of the L2
//! norms of the expert's output on them, plain and weighted. Every sum is in f64 (the
//! reference keeps its running means in f32).

use crate::prune::Method;

/// One layer's routing statistics, per expert.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExpertStats {
    /// Calibration tokens that passed the layer.
    pub tokens: u64,
    /// Tokens routed to each expert (the reference's `expert_frequency`).
    pub routed: Vec<u64>,
    /// Sum of each expert's routing weights over its tokens
    /// (`weighted_expert_frequency_sum`).
    pub weight_sum: Vec<f64>,
    /// Sum of the L2 norms of each expert's output over its tokens (`ean_sum`).
    pub norm_sum: Vec<f64>,
    /// Sum of routing weight × output norm over each expert's tokens (`weighted_ean_sum`).
    pub weighted_norm_sum: Vec<f64>,
}

impl ExpertStats {
    /// Empty statistics of `experts` experts.
    pub fn new(experts: usize) -> Self {
        Self {
            tokens: 0,
            routed: vec![0; experts],
            weight_sum: vec![0.0; experts],
            norm_sum: vec![0.0; experts],
            weighted_norm_sum: vec![0.0; experts],
        }
    }

    /// Adds the tokens routed to `expert`: their routing weights and the norms of the expert's
    /// output on them (one each, in the same order).
    pub fn add(&mut self, expert: usize, weights: &[f32], norms: &[f64]) {
        debug_assert_eq!(weights.len(), norms.len());
        self.routed[expert] += weights.len() as u64;
        for (&w, &norm) in weights.iter().zip(norms) {
            let w = f64::from(w);
            self.weight_sum[expert] += w;
            self.norm_sum[expert] += norm;
            self.weighted_norm_sum[expert] += w * norm;
        }
    }

    /// Each expert's saliency by an expert method, the higher the more it matters:
    /// - `reap`: the mean over its tokens of routing weight × output norm;
    /// - `frequency`: its token count;
    /// - `ean`: the mean over its tokens of its output norm;
    /// - `weighted_frequency`: the sum of its routing weights.
    ///
    /// An expert no token reached has saliency 0 by every method. `None` for a method that
    /// prunes weights, not experts.
    pub fn saliency(&self, method: Method) -> Option<Vec<f64>> {
        let per_token = |sums: &[f64]| -> Vec<f64> {
            sums.iter()
                .zip(&self.routed)
                .map(|(&s, &n)| if n == 0 { 0.0 } else { s / n as f64 })
                .collect()
        };
        Some(match method {
            Method::Reap => per_token(&self.weighted_norm_sum),
            Method::Ean => per_token(&self.norm_sum),
            Method::Frequency => self.routed.iter().map(|&n| n as f64).collect(),
            Method::WeightedFrequency => self.weight_sum.clone(),
            Method::Magnitude | Method::Wanda | Method::Sparsegpt | Method::Ria => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saliencies_are_the_reference_means_and_sums() {
        // Expert 0: tokens with weights 0.5 and 0.25, output norms 2 and 4 → reap
        // (1 + 1)/2 = 1, ean 3, frequency 2, weighted frequency 0.75. Expert 1: one token,
        // weight 1, norm 0.5. Expert 2: never routed.
        let mut stats = ExpertStats::new(3);
        stats.add(0, &[0.5], &[2.0]);
        stats.add(0, &[0.25], &[4.0]);
        stats.add(1, &[1.0], &[0.5]);
        assert_eq!(stats.saliency(Method::Reap), Some(vec![1.0, 0.5, 0.0]));
        assert_eq!(stats.saliency(Method::Ean), Some(vec![3.0, 0.5, 0.0]));
        assert_eq!(stats.saliency(Method::Frequency), Some(vec![2.0, 1.0, 0.0]));
        assert_eq!(
            stats.saliency(Method::WeightedFrequency),
            Some(vec![0.75, 1.0, 0.0])
        );
        assert_eq!(stats.saliency(Method::Wanda), None);
    }
}
