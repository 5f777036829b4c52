//! The Wanda paper's weight-update ablation (arXiv 2306.11695, §5 "Weight update"): magnitude's
//! or Wanda's pruning metric with SparseGPT's optimal-brain-surgeon update of the weights kept,
//! as the reference's `prune_ablate` and `AblateGPT.fasterprune` (locuslab/wanda `lib/prune.py`,
//! `lib/ablate.py`; its `--prune_method ablate_{mag,wanda}_{seq,iter}`).
//!
//! - **Sequential**: the method's own mask, chosen once from the dense weights (Wanda per output
//!   channel, magnitude per matrix, or N:M), then the update loop zeroes it block by block and
//!   corrects the weights kept.
//! - **Iterative**: the metric (`|W|·sqrt(scaler_row)` or `|W|`) is recomputed from the weights
//!   as updated so far: per block of 128 input channels one threshold over the whole block
//!   (unstructured), or at each group start the `n` lowest of the next `m` (N:M).
//!
//! The reference's `AblateGPT.add_batch` scales each sample's inputs by `sqrt(2/n)` before it
//! adds their squared norms to `scaler_row`, so sample `t` (from 1) enters Wanda's statistic
//! with weight `2/t²·t = 2/t` instead of equally; [`ablation_sample_weight`] is that weight, and
//! the pruning driver sums Wanda's norms with it under a weight update. The Hessian is
//! SparseGPT's, `2/n Σ x xᵀ`.

use super::magnitude::magnitude_mask;
use super::sparsegpt::{prune_with_obs, Hessian, ObsMask, SparseGptOptions, SparseGptOutcome};
use super::wanda::{wanda_mask, InputNorms};
use super::{Method, PruneError, Sparsity, WeightUpdate};

/// The pruning metric a weight update starts from.
#[derive(Debug, Clone, Copy)]
pub enum UpdateMetric<'a> {
    /// `|W|`.
    Magnitude,
    /// `|W| · ‖X‖`, with the norms summed by [`ablation_sample_weight`].
    Wanda(&'a InputNorms),
}

impl<'a> UpdateMetric<'a> {
    /// The metric of `method`; Wanda's needs `norms`. Only magnitude and Wanda have one.
    pub fn of(method: Method, norms: Option<&'a InputNorms>) -> Result<Self, PruneError> {
        match (method, norms) {
            (Method::Magnitude, _) => Ok(UpdateMetric::Magnitude),
            (Method::Wanda, Some(norms)) => Ok(UpdateMetric::Wanda(norms)),
            (Method::Wanda, None) => Err(PruneError::NoSamples {
                what: "input-norm accumulator",
            }),
            (other, _) => Err(PruneError::InvalidOptions {
                reason: format!(
                    "`weight_update` starts from magnitude's or wanda's metric, not `{other}`'s"
                ),
            }),
        }
    }
}

/// The weight of the `t`-th calibration sample (counted from 1) in Wanda's input statistic
/// under a weight update: `2/t`, as the reference's `AblateGPT.add_batch` accumulates it.
pub fn ablation_sample_weight(t: usize) -> f64 {
    2.0 / t.max(1) as f64
}

/// Prunes `weight` in place by `metric` at `sparsity` and updates the weights it keeps with
/// SparseGPT's loop (`options`: its block size and dampening), chosen `update`'s way.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`, `hessian.in_features() == in`
pub fn prune_with_update(
    weight: &mut [f32],
    dims: [usize; 2],
    hessian: &Hessian,
    metric: UpdateMetric<'_>,
    sparsity: Sparsity,
    update: WeightUpdate,
    options: &SparseGptOptions,
) -> Result<SparseGptOutcome, PruneError> {
    sparsity.validate()?;
    match update {
        WeightUpdate::Sequential => {
            let mask = match metric {
                UpdateMetric::Magnitude => magnitude_mask(weight, dims, sparsity)?,
                UpdateMetric::Wanda(norms) => {
                    wanda_mask(weight, dims, norms, sparsity, false)?.mask
                }
            };
            let rule = ObsMask::Fixed(&mask);
            prune_with_obs(weight, dims, hessian, sparsity, options, rule)
        }
        WeightUpdate::Iterative => {
            let scale = match metric {
                UpdateMetric::Magnitude => vec![1.0; dims[0]],
                UpdateMetric::Wanda(norms) => {
                    if norms.nsamples() == 0 {
                        return Err(PruneError::NoSamples {
                            what: "input-norm accumulator",
                        });
                    }
                    norms.norms()
                }
            };
            let rule = ObsMask::Metric(&scale);
            prune_with_obs(weight, dims, hessian, sparsity, options, rule)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prune::magnitude::prune_magnitude;
    use crate::prune::noise;
    use crate::prune::wanda::prune_wanda;

    /// A Hessian over `inp` channels from `samples` seeded samples of `tokens` rows, channels
    /// mixed through a rank-`rank` map (`independent`: none, each channel its own scale).
    fn hessian(inp: usize, samples: usize, tokens: usize, independent: bool) -> Hessian {
        let mut h = Hessian::new(inp);
        for s in 0..samples {
            let x: Vec<f32> = (0..tokens * inp)
                .map(|k| {
                    let (t, i) = (k / inp, k % inp);
                    if independent {
                        // One channel per token: x xᵀ is diagonal.
                        if t % inp == i {
                            (1 + i) as f32
                        } else {
                            0.0
                        }
                    } else {
                        noise(k, 7 + s as u64) + 0.8 * noise(t * 3 + i % 3, 99 + s as u64)
                    }
                })
                .collect();
            h.add_batch(&x, tokens, inp).unwrap();
        }
        h
    }

    fn norms(inp: usize) -> InputNorms {
        let mut n = InputNorms::new(inp);
        let sums: Vec<f64> = (0..inp).map(|i| 1.0 + (i % 5) as f64).collect();
        n.add_sum_sq(&sums, 4, 32).unwrap();
        n
    }

    fn zeros(w: &[f32]) -> Vec<bool> {
        w.iter().map(|v| *v == 0.0).collect()
    }

    fn run(
        w: &[f32],
        dims: [usize; 2],
        h: &Hessian,
        metric: UpdateMetric<'_>,
        sparsity: Sparsity,
        update: WeightUpdate,
    ) -> Vec<f32> {
        let mut w = w.to_vec();
        let opts = SparseGptOptions {
            blocksize: 8,
            ..SparseGptOptions::default()
        };
        prune_with_update(&mut w, dims, h, metric, sparsity, update, &opts).unwrap();
        w
    }

    /// Where the inputs' channels are uncorrelated (`H` diagonal) the update moves no kept
    /// weight: the sequential ablation is the method itself, weights and mask, for magnitude
    /// and Wanda, unstructured and N:M.
    #[test]
    fn sequential_with_a_diagonal_hessian_is_the_method_alone() {
        let dims = [16, 6];
        let h = hessian(16, 2, 32, true);
        let w: Vec<f32> = (0..96).map(|k| noise(k, 3)).collect();
        let norms = norms(16);
        for sparsity in [
            Sparsity::Unstructured { ratio: 0.5 },
            Sparsity::NM { n: 2, m: 4 },
        ] {
            let mut plain = w.clone();
            prune_magnitude(&mut plain, dims, sparsity).unwrap();
            let updated = run(
                &w,
                dims,
                &h,
                UpdateMetric::Magnitude,
                sparsity,
                WeightUpdate::Sequential,
            );
            assert_eq!(updated, plain, "magnitude {sparsity}");
            let mut plain = w.clone();
            prune_wanda(&mut plain, dims, &norms, sparsity, false).unwrap();
            let metric = UpdateMetric::Wanda(&norms);
            let updated = run(&w, dims, &h, metric, sparsity, WeightUpdate::Sequential);
            assert_eq!(updated, plain, "wanda {sparsity}");
        }
    }

    /// The iterative ablation by hand: one block, magnitude, 2 inputs × 2 outputs,
    /// `H = [[2, 1], [1, 2]]` (no dampening). `U`, the upper factor of `H⁻¹`:
    /// `[[√(2/3), −1/√6], [0, √(1/2)]]`.
    #[test]
    fn iterative_magnitude_by_hand() {
        let mut h = Hessian::new(2);
        h.add_gram(&[2.0, 1.0, 1.0, 2.0], 2, 2).unwrap();
        // W [in = 2, out = 2]: row 0 (channel 0) = [0.5, 3], row 1 = [2, 0.4]. Ratio 0.5 over
        // the block: |w| sorted 0.4 0.5 2 3, k = 2, t = 2 → prune 0.5, 2 and 0.4 (`≤ t`).
        let w = [0.5f32, 3.0, 2.0, 0.4];
        let opts = SparseGptOptions {
            blocksize: 128,
            percdamp: 0.0,
        };
        // Iterative: channel 0, output 0 pruned: err = 0.5/√(2/3); W[1, 0] −= U_01 · err =
        // +0.25, but W[1, 0] is pruned too. Output 1 keeps 3 (channel 0) and loses 0.4 (channel
        // 1). Sequential: magnitude's per-matrix threshold on the dense weights, int(4·0.5) = 2 →
        // t = 2, the same three weights; the update of W[1, 0] is again zeroed.
        let sparsity = Sparsity::Unstructured { ratio: 0.5 };
        for update in [WeightUpdate::Iterative, WeightUpdate::Sequential] {
            let mut pruned = w;
            let metric = UpdateMetric::Magnitude;
            prune_with_update(&mut pruned, [2, 2], &h, metric, sparsity, update, &opts).unwrap();
            assert_eq!(pruned, [0.0, 3.0, 0.0, 0.0], "{update:?}");
        }
    }

    /// A kept weight after a pruned one in the same output channel moves by the OBS update:
    /// `W[1] −= U_01 · w_0 / U_00 = w_0 · (−1/√6) / √(2/3) · (−1) = +w_0 / 2`.
    #[test]
    fn a_kept_weight_is_corrected_by_hand() {
        let mut h = Hessian::new(2);
        h.add_gram(&[2.0, 1.0, 1.0, 2.0], 2, 2).unwrap();
        let mut norms = InputNorms::new(2);
        // Wanda scores |w| · ‖X‖: channel 0 scaled by 1, channel 1 by 10.
        norms.add_sum_sq(&[1.0, 100.0], 1, 1).unwrap();
        // One output: w = [1, 0.5] → scores 1, 5 → the 1:2 pattern prunes channel 0 and
        // moves channel 1 to 0.5 + 1/2.
        let opts = SparseGptOptions {
            blocksize: 2,
            percdamp: 0.0,
        };
        for update in [WeightUpdate::Sequential, WeightUpdate::Iterative] {
            let mut w = [1.0f32, 0.5];
            let metric = UpdateMetric::Wanda(&norms);
            let outcome = prune_with_update(
                &mut w,
                [2, 1],
                &h,
                metric,
                Sparsity::NM { n: 1, m: 2 },
                update,
                &opts,
            )
            .unwrap();
            assert!(
                (w[1] - 1.0).abs() < 1e-6 && w[0] == 0.0,
                "{update:?}: {w:?}"
            );
            // Loss: w_0² / (2 U_00²) = 1 / (4/3).
            assert!((outcome.loss - 0.75).abs() < 1e-12, "{}", outcome.loss);
        }
    }

    /// With correlated inputs the two orders differ: the iterative metric reads the updated
    /// weights of later blocks, the sequential one the dense weights. Both reach the ratio per
    /// matrix (per block for iterative), keep the sequential mask where they prune, and leave
    /// the reconstruction error below that of the mask alone.
    #[test]
    fn correlated_inputs_update_the_kept_weights() {
        let (inp, out) = (32, 12);
        let h = hessian(inp, 3, 48, false);
        let w: Vec<f32> = (0..inp * out).map(|k| noise(k, 11)).collect();
        let norms = norms(inp);
        let sparsity = Sparsity::Unstructured { ratio: 0.5 };
        let metric = UpdateMetric::Wanda(&norms);
        let seq = run(
            &w,
            [inp, out],
            &h,
            metric,
            sparsity,
            WeightUpdate::Sequential,
        );
        let iter = run(
            &w,
            [inp, out],
            &h,
            metric,
            sparsity,
            WeightUpdate::Iterative,
        );
        let mut plain = w.clone();
        prune_wanda(&mut plain, [inp, out], &norms, sparsity, false).unwrap();
        assert_eq!(zeros(&seq), zeros(&plain), "sequential keeps Wanda's mask");
        assert_ne!(seq, plain, "and updates the weights it keeps");
        let pruned = |v: &[f32]| v.iter().filter(|x| **x == 0.0).count();
        assert_eq!(pruned(&seq), inp * out / 2);
        // Iterative: each block of 8 channels × 12 outputs prunes at least int(96 · 0.5).
        assert!(pruned(&iter) >= inp * out / 2, "{}", pruned(&iter));
        assert_ne!(
            zeros(&iter),
            zeros(&seq),
            "the updated weights move the mask"
        );
        // The layer-wise loss (wᵀ H w over the difference) is smaller with the update.
        let hm = h.matrix().unwrap();
        let loss = |v: &[f32]| -> f64 {
            (0..out)
                .map(|o| {
                    let d: Vec<f64> = (0..inp)
                        .map(|i| f64::from(w[i * out + o] - v[i * out + o]))
                        .collect();
                    (0..inp)
                        .map(|a| (0..inp).map(|b| d[a] * hm[a * inp + b] * d[b]).sum::<f64>())
                        .sum::<f64>()
                })
                .sum()
        };
        assert!(
            loss(&seq) < loss(&plain),
            "{} vs {}",
            loss(&seq),
            loss(&plain)
        );
    }

    #[test]
    fn only_magnitude_and_wanda_have_a_metric() {
        for method in [Method::Sparsegpt, Method::Ria] {
            let err = UpdateMetric::of(method, None).unwrap_err();
            assert!(err.to_string().contains("weight_update"), "{err}");
        }
        assert!(UpdateMetric::of(Method::Wanda, None).is_err());
        assert!(matches!(
            UpdateMetric::of(Method::Magnitude, None),
            Ok(UpdateMetric::Magnitude)
        ));
        assert_eq!(ablation_sample_weight(1), 2.0);
        assert_eq!(ablation_sample_weight(4), 0.5);
    }
}
