//! Wanda, pruning by weights and activations (Sun et al. 2023, arXiv 2306.11695, Eq. 1): score
//! `S_ij = |W_ij| · ‖X_j‖₂`, compared within each output channel, plus the reference's adaptive
//! per-row threshold variant (`--use_variant`, the paper's Appendix).
//!
//! The input norms accumulate in f64 as plain sums of squares. The reference keeps a running
//! `scaler_row = Σ‖x‖² / nsamples` instead (`nsamples` counted per sequence, not per token) and
//! scores with `sqrt(scaler_row)`; the two differ by the positive factor `1/sqrt(nsamples)`, the
//! same for every weight of a matrix, which no per-output-channel comparison can see. Both give
//! the same masks (tested below); the paper's `‖X_j‖₂` is what is used here.

use rayon::prelude::*;

use super::mask::{apply_mask, per_output_count, per_output_or_nm_mask, prune_per_output};
use super::{check_finite, check_shape, PruneError, Sparsity};

/// Running per-input-channel sum of squares of a linear layer's inputs over calibration tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct InputNorms {
    sum_sq: Vec<f64>,
    nsamples: usize,
    tokens: usize,
}

impl InputNorms {
    /// An empty accumulator for a layer with `in_features` inputs.
    pub fn new(in_features: usize) -> Self {
        Self {
            sum_sq: vec![0.0; in_features],
            nsamples: 0,
            tokens: 0,
        }
    }

    /// Adds one calibration sample (one sequence, the reference's per-forward `tmp = 1`) of
    /// `tokens` rows.
    ///
    /// # Shapes
    /// - `x`: `[tokens, in_features]`, row-major
    pub fn add_batch(
        &mut self,
        x: &[f32],
        tokens: usize,
        in_features: usize,
    ) -> Result<(), PruneError> {
        if in_features != self.sum_sq.len() {
            return Err(PruneError::FeatureMismatch {
                what: "the calibration batch",
                expected: self.sum_sq.len(),
                got: in_features,
            });
        }
        check_shape("the calibration batch", x.len(), [tokens, in_features])?;
        check_finite("the calibration batch", x)?;
        for row in x.chunks_exact(in_features.max(1)) {
            for (s, &v) in self.sum_sq.iter_mut().zip(row) {
                let v = f64::from(v);
                *s += v * v;
            }
        }
        self.nsamples += 1;
        self.tokens += tokens;
        Ok(())
    }

    /// Adds per-channel sums of squares computed elsewhere (e.g. on the device) over
    /// `samples` samples holding `tokens` tokens.
    ///
    /// # Shapes
    /// - `sum_sq`: `[in_features]`
    pub fn add_sum_sq(
        &mut self,
        sum_sq: &[f64],
        samples: usize,
        tokens: usize,
    ) -> Result<(), PruneError> {
        if sum_sq.len() != self.sum_sq.len() {
            return Err(PruneError::FeatureMismatch {
                what: "the sums of squares",
                expected: self.sum_sq.len(),
                got: sum_sq.len(),
            });
        }
        check_finite("the sums of squares", sum_sq)?;
        for (s, &v) in self.sum_sq.iter_mut().zip(sum_sq) {
            *s += v;
        }
        self.nsamples += samples;
        self.tokens += tokens;
        Ok(())
    }

    /// Input channels.
    pub fn in_features(&self) -> usize {
        self.sum_sq.len()
    }

    /// Samples (sequences) added.
    pub fn nsamples(&self) -> usize {
        self.nsamples
    }

    /// Tokens added.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// `Σ_tokens x_j²` per input channel.
    pub fn sum_sq(&self) -> &[f64] {
        &self.sum_sq
    }

    /// `‖X_j‖₂ = sqrt(Σ_tokens x_j²)` per input channel, the paper's norm.
    pub fn norms(&self) -> Vec<f64> {
        self.sum_sq.iter().map(|s| s.sqrt()).collect()
    }

    /// The reference's `scaler_row`: `Σ_tokens x_j² / nsamples` (zero before any sample).
    pub fn scaler_row(&self) -> Vec<f64> {
        let n = self.nsamples.max(1) as f64;
        self.sum_sq.iter().map(|s| s / n).collect()
    }
}

/// Wanda scores `|W_ij| · norms_i` with `norms` per input channel (e.g. [`InputNorms::norms`]);
/// the product is taken in f32, as the reference does.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`, `norms`: `[in]` → scores `[in, out]`
pub fn wanda_scores(
    weight: &[f32],
    dims: [usize; 2],
    norms: &[f64],
) -> Result<Vec<f32>, PruneError> {
    let [in_features, out_features] = dims;
    check_shape("the weight", weight.len(), dims)?;
    if norms.len() != in_features {
        return Err(PruneError::FeatureMismatch {
            what: "the input norms",
            expected: in_features,
            got: norms.len(),
        });
    }
    let mut scores = vec![0.0f32; weight.len()];
    scores
        .par_chunks_mut(out_features.max(1))
        .zip(weight.par_chunks(out_features.max(1)))
        .zip(norms)
        .for_each(|((scores, row), &norm)| {
            let norm = norm as f32;
            for (s, w) in scores.iter_mut().zip(row) {
                *s = w.abs() * norm;
            }
        });
    Ok(scores)
}

/// The result of the adaptive-threshold variant.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantMask {
    /// The prune mask, `[in, out]`.
    pub mask: Vec<bool>,
    /// The `alpha` the search ended on.
    pub alpha: f64,
    /// The fraction of the matrix the mask prunes.
    pub sparsity: f64,
    /// Masks evaluated (1 + bisection steps, at most 11).
    pub evaluations: usize,
}

/// The reference's Wanda variant (`use_variant`): per output channel, the weights whose scores
/// sum to at most `alpha` times the channel's total are pruned, and `alpha` is bisected until the
/// matrix's sparsity is within 0.001 of `ratio`.
///
/// Per channel the scores are sorted ascending and cumulated; with `c` the number of cumulative
/// sums `≤ alpha · total`, the threshold is the `c`-th smallest score and every score `≤` it is
/// pruned (ties included). The search starts at `alpha = 0.4` in `[0, 0.8]` and halves toward
/// the side that moves the sparsity to the target until `|sparsity − ratio| ≤ 0.001` or the
/// bracket is narrower than 0.001 (ten halvings), exactly as `prune_wanda` does. Sums are in f64
/// here (f32 on the GPU there). One deviation: where no cumulative sum fits (`c = 0`, where the
/// reference's `gather` at index −1 would fail), the channel prunes nothing.
///
/// # Shapes
/// - `scores`: `[in, out]`, `dims = [in, out]` → mask `[in, out]`
pub fn variant_mask(
    scores: &[f32],
    dims: [usize; 2],
    ratio: f64,
) -> Result<VariantMask, PruneError> {
    Sparsity::unstructured(ratio)?;
    check_shape("the score matrix", scores.len(), dims)?;
    check_finite("the score matrix", scores)?;
    let [in_features, out_features] = dims;
    let numel = scores.len().max(1) as f64;
    // One sorted channel (ascending, stable) and its cumulative sums per output channel.
    let columns = crate::model::kernels::transpose(scores, in_features, out_features);
    let mut sorted = columns.clone();
    let mut cumsum = vec![0.0f64; columns.len()];
    let totals: Vec<f64> = (0..out_features)
        .map(|o| {
            let range = o * in_features..(o + 1) * in_features;
            let col = &mut sorted[range.clone()];
            col.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
            let mut acc = 0.0f64;
            for (c, &v) in cumsum[range.clone()].iter_mut().zip(col.iter()) {
                acc += f64::from(v);
                *c = acc;
            }
            // The reference sums the row separately (`W_metric.sum(dim=1)`), not as the last
            // cumulative sum; in f64 the two agree to rounding.
            columns[range].iter().map(|&v| f64::from(v)).sum()
        })
        .collect();
    // Threshold per channel for `alpha`, and the sparsity it gives.
    let thresholds = |alpha: f64| -> (Vec<Option<f32>>, f64) {
        let mut pruned = 0usize;
        let th: Vec<Option<f32>> = (0..out_features)
            .map(|o| {
                let range = o * in_features..(o + 1) * in_features;
                let limit = totals[o] * alpha;
                let count = cumsum[range.clone()]
                    .iter()
                    .filter(|&&c| c <= limit)
                    .count();
                let col = &sorted[range];
                let t = count.checked_sub(1).map(|k| col[k]);
                if let Some(t) = t {
                    pruned += col.partition_point(|&v| v <= t);
                }
                t
            })
            .collect();
        (th, pruned as f64 / numel)
    };
    let mut alpha = 0.4f64;
    let mut bracket = [0.0f64, 0.8];
    let (mut th, mut sparsity) = thresholds(alpha);
    let mut evaluations = 1;
    while (sparsity - ratio).abs() > 0.001 && bracket[1] - bracket[0] >= 0.001 {
        let next = if sparsity > ratio {
            bracket[1] = alpha;
            (alpha + bracket[0]) / 2.0
        } else {
            bracket[0] = alpha;
            (alpha + bracket[1]) / 2.0
        };
        alpha = next;
        (th, sparsity) = thresholds(alpha);
        evaluations += 1;
    }
    let mut mask = vec![false; scores.len()];
    for (i, row) in scores.chunks_exact(out_features.max(1)).enumerate() {
        for (o, &s) in row.iter().enumerate() {
            mask[i * out_features + o] = th[o].is_some_and(|t| s <= t);
        }
    }
    Ok(VariantMask {
        mask,
        alpha,
        sparsity,
        evaluations,
    })
}

/// A Wanda mask and, for the variant, the `alpha` it settled on.
#[derive(Debug, Clone, PartialEq)]
pub struct WandaMask {
    /// The prune mask, `[in, out]`.
    pub mask: Vec<bool>,
    /// The variant's final `alpha`; `None` without the variant.
    pub alpha: Option<f64>,
}

/// What [`prune_wanda`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct WandaOutcome {
    /// Weights zeroed.
    pub zeroed: usize,
    /// The variant's final `alpha`, when the variant ran.
    pub alpha: Option<f64>,
}

/// The Wanda mask for `weight`, given the input statistics of its layer.
///
/// Unstructured: per output channel, the `floor(in × ratio)` lowest scores (ties by lower input
/// index), or with `use_variant` the adaptive threshold of [`variant_mask`]. N:M: the `n` lowest
/// of every `m` consecutive input channels; `use_variant` is ignored there, as in the reference.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`, `norms.in_features() == in` → mask `[in, out]`
pub fn wanda_mask(
    weight: &[f32],
    dims: [usize; 2],
    norms: &InputNorms,
    sparsity: Sparsity,
    use_variant: bool,
) -> Result<WandaMask, PruneError> {
    if norms.nsamples() == 0 {
        return Err(PruneError::NoSamples {
            what: "input-norm accumulator",
        });
    }
    let scores = wanda_scores(weight, dims, &norms.norms())?;
    match sparsity {
        Sparsity::Unstructured { ratio } if use_variant => {
            let v = variant_mask(&scores, dims, ratio)?;
            Ok(WandaMask {
                mask: v.mask,
                alpha: Some(v.alpha),
            })
        }
        _ => Ok(WandaMask {
            mask: per_output_or_nm_mask(&scores, dims, sparsity)?,
            alpha: None,
        }),
    }
}

/// Prunes `weight` in place with Wanda (see [`wanda_mask`]).
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`, `norms.in_features() == in`
pub fn prune_wanda(
    weight: &mut [f32],
    dims: [usize; 2],
    norms: &InputNorms,
    sparsity: Sparsity,
    use_variant: bool,
) -> Result<WandaOutcome, PruneError> {
    if let (Sparsity::Unstructured { ratio }, false) = (sparsity, use_variant) {
        // The same mask as `wanda_mask`'s, without a score matrix in the weight's layout.
        check_shape("the weight", weight.len(), dims)?;
        let norms = checked_norms(norms, dims)?;
        let zeroed = prune_per_output(weight, dims, ratio, |i, w| w.abs() * norms[i])?;
        return Ok(WandaOutcome {
            zeroed,
            alpha: None,
        });
    }
    let WandaMask { mask, alpha } = wanda_mask(weight, dims, norms, sparsity, use_variant)?;
    let zeroed = apply_mask(weight, &mask)?;
    Ok(WandaOutcome { zeroed, alpha })
}

/// `‖X_j‖₂` per input channel in f32, as [`wanda_scores`] multiplies them, once `norms` is
/// known to hold samples and to match the weight's inputs.
pub(crate) fn checked_norms(norms: &InputNorms, dims: [usize; 2]) -> Result<Vec<f32>, PruneError> {
    if norms.nsamples() == 0 {
        return Err(PruneError::NoSamples {
            what: "input-norm accumulator",
        });
    }
    if norms.in_features() != dims[0] {
        return Err(PruneError::FeatureMismatch {
            what: "the input norms",
            expected: dims[0],
            got: norms.in_features(),
        });
    }
    Ok(norms.norms().into_iter().map(|n| n as f32).collect())
}

/// Weights each output channel keeps under the plain (non-variant) unstructured rule.
pub fn kept_per_output(in_features: usize, ratio: f64) -> usize {
    in_features - per_output_count(in_features, ratio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prune::noise;

    fn render(mask: &[bool], out: usize) -> Vec<String> {
        mask.chunks(out)
            .map(|r| r.iter().map(|&b| if b { '1' } else { '0' }).collect())
            .collect()
    }

    #[test]
    fn norms_accumulate_over_all_tokens() {
        let mut n = InputNorms::new(3);
        // Sample 1: 2 tokens; sample 2: 1 token.
        n.add_batch(&[1.0, 2.0, 0.0, 3.0, -2.0, 1.0], 2, 3).unwrap();
        n.add_batch(&[0.0, 0.0, 2.0], 1, 3).unwrap();
        assert_eq!(n.sum_sq(), [10.0, 8.0, 5.0]);
        assert_eq!(n.nsamples(), 2);
        assert_eq!(n.tokens(), 3);
        let norms = n.norms();
        assert!((norms[0] - 10f64.sqrt()).abs() < 1e-12);
        assert_eq!(n.scaler_row(), [5.0, 4.0, 2.5]);
        assert!(matches!(
            n.add_batch(&[1.0, 2.0], 1, 2),
            Err(PruneError::FeatureMismatch {
                expected: 3,
                got: 2,
                ..
            })
        ));
        assert!(matches!(
            n.add_batch(&[1.0, 2.0, 3.0], 2, 3),
            Err(PruneError::ShapeMismatch { .. })
        ));
        // Sums from elsewhere add up the same way.
        let mut m = InputNorms::new(3);
        m.add_sum_sq(&[10.0, 8.0, 5.0], 2, 3).unwrap();
        assert_eq!(m, n);
        assert!(m.add_sum_sq(&[1.0], 1, 1).is_err());
    }

    #[test]
    fn scaler_row_matches_the_reference_running_mean() {
        // scaler *= n/(n+1); n += 1; scaler += ‖x‖² / n — per sample, as in the reference.
        let batches: [&[f32]; 3] = [&[1.0, 2.0, 3.0, 4.0], &[0.5, -1.0], &[2.0, 2.0, -3.0, 1.0]];
        let tokens = [2, 1, 2];
        let mut acc = InputNorms::new(2);
        let mut scaler = [0.0f64; 2];
        let mut ns = 0.0;
        for (b, &t) in batches.iter().zip(&tokens) {
            acc.add_batch(b, t, 2).unwrap();
            for s in &mut scaler {
                *s *= ns / (ns + 1.0);
            }
            ns += 1.0;
            for row in b.chunks(2) {
                for (s, &v) in scaler.iter_mut().zip(row) {
                    *s += f64::from(v * v) / ns;
                }
            }
        }
        for (a, b) in acc.scaler_row().iter().zip(scaler) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
    }

    #[test]
    fn scores_scale_input_rows() {
        // [in = 2, out = 3]; input channel 1 carries a 10× larger norm.
        let w = [1.0f32, -2.0, 3.0, -0.5, 0.25, 1.0];
        let s = wanda_scores(&w, [2, 3], &[1.0, 10.0]).unwrap();
        assert_eq!(s, [1.0, 2.0, 3.0, 5.0, 2.5, 10.0]);
        assert!(matches!(
            wanda_scores(&w, [2, 3], &[1.0, 2.0, 3.0]),
            Err(PruneError::FeatureMismatch {
                expected: 2,
                got: 3,
                ..
            })
        ));
    }

    #[test]
    fn wanda_by_hand_on_3_by_5() {
        // [in = 3, out = 5]; norms of the inputs 1, 4, 0.5 (from one token each).
        #[rustfmt::skip]
        let w = [
            1.0f32, -1.0,  2.0, 0.1,  3.0,
            0.5,     0.2, -1.0, 0.1, -1.0,
            4.0,     1.0,  1.0, 0.1,  7.0,
        ];
        let mut norms = InputNorms::new(3);
        norms.add_batch(&[1.0, 4.0, 0.5], 1, 3).unwrap();
        // Scores: row 0: 1 1 2 0.1 3; row 1: 2 0.8 4 0.4 4; row 2: 2 0.5 0.5 0.05 3.5.
        // ratio 0.5 → one per output column: col0 → row0 (1); col1 → row2 (0.5);
        // col2 → row2 (0.5); col3 → row2 (0.05); col4 → row0 (3).
        let WandaMask { mask, alpha } = wanda_mask(
            &w,
            [3, 5],
            &norms,
            Sparsity::Unstructured { ratio: 0.5 },
            false,
        )
        .unwrap();
        assert_eq!(alpha, None);
        assert_eq!(render(&mask, 5), ["10001", "00000", "01110"]);
        // Magnitude alone would prune differently in column 0 (|0.5| in row 1).
        let mut pruned = w;
        let outcome = prune_wanda(
            &mut pruned,
            [3, 5],
            &norms,
            Sparsity::Unstructured { ratio: 0.5 },
            false,
        )
        .unwrap();
        assert_eq!(outcome.zeroed, 5);
        assert_eq!(pruned[0], 0.0);
        assert_eq!(pruned[5], 0.5);
    }

    #[test]
    fn wanda_nm_by_hand_on_8_by_3() {
        // [in = 8, out = 3], 2:4, norms 1 except input 3 (×100) and input 4 (×0).
        let w: Vec<f32> = (0..24).map(|k| (k % 5) as f32 + 1.0).collect();
        let mut norms = InputNorms::new(8);
        norms
            .add_batch(&[1.0, 1.0, 1.0, 100.0, 0.0, 1.0, 1.0, 1.0], 1, 8)
            .unwrap();
        let WandaMask { mask, .. } =
            wanda_mask(&w, [8, 3], &norms, Sparsity::NM { n: 2, m: 4 }, true).unwrap();
        // |W| rows: i0 1 2 3; i1 4 5 1; i2 2 3 4; i3 5 1 2 (×100); i4 3 4 5 (×0);
        // i5 1 2 3; i6 4 5 1; i7 2 3 4.
        // Group 0, o0: 1 4 2 500 → i0, i2; o1: 2 5 3 100 → i0, i2; o2: 3 1 4 200 → i1, i0.
        // Group 1, o0: 0 1 4 2 → i4, i5; o1: 0 2 5 3 → i4, i5; o2: 0 3 1 4 → i4, i6.
        assert_eq!(
            render(&mask, 3),
            ["111", "001", "110", "000", "111", "110", "001", "000"]
        );
    }

    #[test]
    fn masks_equal_with_scaler_row_or_raw_sums() {
        let (inp, out, tokens) = (48, 20, 7);
        let w: Vec<f32> = (0..inp * out).map(|k| noise(k, 1)).collect();
        let mut norms = InputNorms::new(inp);
        for sample in 0..5 {
            let x: Vec<f32> = (0..tokens * inp)
                .map(|k| noise(k, 100 + sample) * (1.0 + (k % inp) as f32 / 8.0))
                .collect();
            norms.add_batch(&x, tokens, inp).unwrap();
        }
        let reference: Vec<f64> = norms.scaler_row().iter().map(|s| s.sqrt()).collect();
        for sparsity in [
            Sparsity::Unstructured { ratio: 0.5 },
            Sparsity::Unstructured { ratio: 0.3 },
            Sparsity::NM { n: 2, m: 4 },
        ] {
            let ours = per_output_or_nm_mask(
                &wanda_scores(&w, [inp, out], &norms.norms()).unwrap(),
                [inp, out],
                sparsity,
            )
            .unwrap();
            let theirs = per_output_or_nm_mask(
                &wanda_scores(&w, [inp, out], &reference).unwrap(),
                [inp, out],
                sparsity,
            )
            .unwrap();
            assert_eq!(ours, theirs, "{sparsity}");
            let WandaMask { mask: via_api, .. } =
                wanda_mask(&w, [inp, out], &norms, sparsity, false).unwrap();
            assert_eq!(via_api, ours);
        }
    }

    /// `prune_wanda`'s in-place path zeroes exactly the weights of `wanda_mask`.
    #[test]
    fn in_place_pruning_equals_the_mask() {
        let dims = [97, 41];
        let w: Vec<f32> = (0..dims[0] * dims[1])
            .map(|k| (noise(k, 5) * 8.0).round() / 8.0)
            .collect();
        let mut norms = InputNorms::new(dims[0]);
        let x: Vec<f32> = (0..3 * dims[0]).map(|k| noise(k, 6)).collect();
        norms.add_batch(&x, 3, dims[0]).unwrap();
        for ratio in [0.2, 0.5, 0.7] {
            let sparsity = Sparsity::unstructured(ratio).unwrap();
            let mask = wanda_mask(&w, dims, &norms, sparsity, false).unwrap().mask;
            let mut expected = w.clone();
            let zeroed = apply_mask(&mut expected, &mask).unwrap();
            let mut pruned = w.clone();
            let outcome = prune_wanda(&mut pruned, dims, &norms, sparsity, false).unwrap();
            assert_eq!(pruned, expected, "{ratio}");
            assert_eq!(outcome.zeroed, zeroed);
        }
    }

    #[test]
    fn every_output_channel_keeps_in_minus_floor() {
        let (inp, out) = (576, 9);
        let w: Vec<f32> = (0..inp * out).map(|k| noise(k, 7)).collect();
        let mut norms = InputNorms::new(inp);
        let x: Vec<f32> = (0..inp * 3).map(|k| noise(k, 8)).collect();
        norms.add_batch(&x, 3, inp).unwrap();
        let WandaMask { mask, .. } = wanda_mask(
            &w,
            [inp, out],
            &norms,
            Sparsity::Unstructured { ratio: 0.3 },
            false,
        )
        .unwrap();
        for o in 0..out {
            let kept = (0..inp).filter(|&i| !mask[i * out + o]).count();
            assert_eq!(kept, 404);
        }
        assert_eq!(kept_per_output(576, 0.3), 404);
    }

    #[test]
    fn variant_by_hand() {
        // [in = 4, out = 2]. Column 0: 1 2 3 4 (sum 10, cumsum 1 3 6 10);
        // column 1: 4 4 1 1 (sum 10, sorted 1 1 4 4, cumsum 1 2 6 10).
        let scores = [1.0f32, 4.0, 2.0, 4.0, 3.0, 1.0, 4.0, 1.0];
        // Target 0.5: alpha 0.4 → limit 4: col 0 count 2 → t = 2 → prune 1, 2;
        // col 1 count 2 → t = 1 → prune both 1s. 4 of 8 = 0.5 at once.
        let v = variant_mask(&scores, [4, 2], 0.5).unwrap();
        assert_eq!(v.alpha, 0.4);
        assert_eq!(v.evaluations, 1);
        assert_eq!(v.sparsity, 0.5);
        assert_eq!(render(&v.mask, 2), ["10", "10", "01", "01"]);
        // Target 0.25: 0.5 > 0.25 → alpha 0.2 (limit 2): col 0 count 1 → t = 1 → one;
        // col 1 count 2 → t = 1 → both 1s: 3/8 = 0.375 > 0.25 → alpha 0.1 (limit 1): col 0 →
        // one, col 1 count 1 → t = 1 → both (ties): still 0.375, and so on down to the
        // bracket's end; below alpha 0.1 nothing fits and the channels prune nothing.
        let v = variant_mask(&scores, [4, 2], 0.25).unwrap();
        assert_eq!(v.evaluations, 11, "ten halvings of the 0.8-wide bracket");
        assert!(v.alpha < 0.1);
        assert_eq!(v.sparsity, 0.0);
    }

    #[test]
    fn variant_reaches_the_target_on_a_smooth_problem() {
        let (inp, out) = (512, 64);
        let scores: Vec<f32> = (0..inp * out).map(|k| noise(k, 3).abs() + 1e-3).collect();
        for ratio in [0.3, 0.5, 0.7] {
            let v = variant_mask(&scores, [inp, out], ratio).unwrap();
            assert!(
                (v.sparsity - ratio).abs() <= 0.001,
                "{ratio}: {}",
                v.sparsity
            );
            let measured = v.mask.iter().filter(|&&b| b).count() as f64 / v.mask.len() as f64;
            assert_eq!(measured, v.sparsity);
            assert!(v.alpha > 0.0 && v.alpha < 0.8);
            // The threshold is per output channel: channels prune different counts.
            let counts: Vec<usize> = (0..out)
                .map(|o| (0..inp).filter(|&i| v.mask[i * out + o]).count())
                .collect();
            assert!(counts.iter().any(|&c| c != counts[0]));
        }
    }

    #[test]
    fn wanda_needs_samples() {
        let norms = InputNorms::new(3);
        assert_eq!(
            wanda_mask(
                &[1.0; 6],
                [3, 2],
                &norms,
                Sparsity::Unstructured { ratio: 0.5 },
                false
            )
            .unwrap_err()
            .to_string(),
            "no calibration batch was added; the input-norm accumulator is empty"
        );
    }

    #[test]
    fn deterministic() {
        let (inp, out) = (256, 48);
        let w: Vec<f32> = (0..inp * out).map(|k| noise(k, 5)).collect();
        let mut norms = InputNorms::new(inp);
        norms
            .add_batch(
                &(0..inp * 4).map(|k| noise(k, 6)).collect::<Vec<_>>(),
                4,
                inp,
            )
            .unwrap();
        let a = wanda_mask(
            &w,
            [inp, out],
            &norms,
            Sparsity::Unstructured { ratio: 0.6 },
            true,
        )
        .unwrap();
        let b = wanda_mask(
            &w,
            [inp, out],
            &norms,
            Sparsity::Unstructured { ratio: 0.6 },
            true,
        )
        .unwrap();
        assert_eq!(a, b);
    }
}
