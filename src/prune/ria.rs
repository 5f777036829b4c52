//! RIA, relative importance and activations (Zhang et al. 2024, "Plug-and-Play", ICLR 2024;
//! reference: biomedical-cybernetics/Relative-importance-and-activation-pruning, `lib/prune.py:
//! prune_ria`): score `S_ij = (|W_ij| / Σ_o |W_io| + |W_ij| / Σ_i |W_ij|) · ‖X_i‖₂^a`, with
//! `a = 0.5`, compared across the whole matrix for unstructured sparsity (the reference's default,
//! without `--per_outneuron`) and within N:M groups of each output channel otherwise.
//!
//! The activation term is the reference's `sqrt(scaler_row) ** a` (the Wanda statistic of
//! [`InputNorms::scaler_row`]); the relative-importance sums are taken in f64 and rounded to f32,
//! the score itself is f32. The reference computes the relative importance in the model's dtype
//! (fp16 on its GPUs); here, as in the f32 PyTorch port it is checked against, it is f32.

use super::mask::{apply_mask, matrix_threshold_or_nm_mask, nm_mask};
use super::wanda::InputNorms;
use super::{check_shape, PruneError, Sparsity};

/// The reference's default exponent of the activation norm (`--a 0.5`).
pub const DEFAULT_EXPONENT: f64 = 0.5;

/// RIA scores `(|W| / Σ_out |W| + |W| / Σ_in |W|) · ‖X‖₂^a` per weight.
///
/// The first sum runs over the output channels of one input channel (PyTorch's `sum(dim=0)` of
/// an `[out, in]` weight), the second over the input channels of one output channel
/// (`sum(dim=1)`). A sum of zero (a channel whose weights are all zero) contributes 0 instead of
/// the reference's `0 / 0 = NaN`: those weights are zero already.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`, `scaler_row`: `[in]` → scores `[in, out]`
pub fn ria_scores(
    weight: &[f32],
    dims: [usize; 2],
    scaler_row: &[f64],
    exponent: f64,
) -> Result<Vec<f32>, PruneError> {
    let [in_features, out_features] = dims;
    check_shape("the weight", weight.len(), dims)?;
    if scaler_row.len() != in_features {
        return Err(PruneError::FeatureMismatch {
            what: "the input statistics",
            expected: in_features,
            got: scaler_row.len(),
        });
    }
    let width = out_features.max(1);
    // Σ over the outputs of each input channel (a row here), and Σ over the inputs of each
    // output channel (a column here).
    let mut per_input = vec![0.0f64; in_features];
    let mut per_output = vec![0.0f64; out_features];
    for (row, sum) in weight.chunks_exact(width).zip(per_input.iter_mut()) {
        for (w, column) in row.iter().zip(per_output.iter_mut()) {
            let a = f64::from(w.abs());
            *sum += a;
            *column += a;
        }
    }
    let share = |a: f32, sum: f64| if sum == 0.0 { 0.0 } else { a / sum as f32 };
    let mut scores = Vec::with_capacity(weight.len());
    for ((row, &sum_in), &scaler) in weight.chunks_exact(width).zip(&per_input).zip(scaler_row) {
        let activation = scaler.sqrt().powf(exponent) as f32;
        scores.extend(row.iter().zip(&per_output).map(|(w, &sum_out)| {
            let a = w.abs();
            (share(a, sum_in) + share(a, sum_out)) * activation
        }));
    }
    Ok(scores)
}

/// The reference's channel reallocation for N:M (`--reallocation`, without its optional linear
/// sum assignment): input channels sorted by their summed score (ascending) are cut into `m`
/// equal chunks, and permuted position `g · m + c` takes element `g` of chunk `c`, counted from
/// the front for even `c` and from the back for odd `c` (a zig-zag), so every group of `m`
/// permuted channels mixes channels of every importance band. Returns the input channel at each
/// permuted position.
///
/// # Shapes
/// - `scores`: `[in, out]`, `dims = [in, out]` with `in % m == 0` → `[in]`
pub fn reallocation_order(scores: &[f32], dims: [usize; 2], m: usize) -> Vec<usize> {
    let [in_features, out_features] = dims;
    let importance: Vec<f64> = scores
        .chunks_exact(out_features.max(1))
        .map(|row| row.iter().map(|&s| f64::from(s)).sum())
        .collect();
    let mut sorted: Vec<usize> = (0..in_features).collect();
    sorted.sort_by(|&a, &b| importance[a].total_cmp(&importance[b]).then(a.cmp(&b)));
    let groups = in_features / m.max(1);
    let mut order = vec![0usize; in_features];
    for (c, chunk) in sorted.chunks_exact(groups.max(1)).take(m).enumerate() {
        for g in 0..groups {
            let pick = if c % 2 == 0 { g } else { groups - 1 - g };
            order[g * m + c] = chunk[pick];
        }
    }
    order
}

/// The RIA mask, [`matrix_threshold_or_nm_mask`] of the scores: for an unstructured ratio every
/// score `≤` the `int(numel × ratio)`-th smallest is pruned, ties included, as the reference's
/// `W_metric <= thresh`; [`nm_mask`] for N:M — over the channels in
/// [`reallocation_order`] when `channel_permutation` is set (N:M only; the weights stay where
/// they are, only the groups change).
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`, `norms.in_features() == in` → mask `[in, out]`
pub fn ria_mask(
    weight: &[f32],
    dims: [usize; 2],
    norms: &InputNorms,
    sparsity: Sparsity,
    channel_permutation: bool,
) -> Result<Vec<bool>, PruneError> {
    if norms.nsamples() == 0 {
        return Err(PruneError::NoSamples {
            what: "input-norm accumulator",
        });
    }
    let scores = ria_scores(weight, dims, &norms.scaler_row(), DEFAULT_EXPONENT)?;
    match sparsity {
        Sparsity::NM { n, m } if channel_permutation && dims[0].is_multiple_of(m) => {
            let width = dims[1];
            let order = reallocation_order(&scores, dims, m);
            let permuted: Vec<f32> = order
                .iter()
                .flat_map(|&i| scores[i * width..(i + 1) * width].iter().copied())
                .collect();
            let permuted_mask = nm_mask(&permuted, dims, n, m)?;
            let mut mask = vec![false; scores.len()];
            for (p, &i) in order.iter().enumerate() {
                mask[i * width..(i + 1) * width]
                    .copy_from_slice(&permuted_mask[p * width..(p + 1) * width]);
            }
            Ok(mask)
        }
        _ => matrix_threshold_or_nm_mask(&scores, dims, sparsity),
    }
}

/// Prunes `weight` in place with RIA (see [`ria_mask`]) and returns the number of weights zeroed.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`, `norms.in_features() == in`
pub fn prune_ria(
    weight: &mut [f32],
    dims: [usize; 2],
    norms: &InputNorms,
    sparsity: Sparsity,
    channel_permutation: bool,
) -> Result<usize, PruneError> {
    let mask = ria_mask(weight, dims, norms, sparsity, channel_permutation)?;
    apply_mask(weight, &mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-6 * y.abs().max(1.0), "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn scores_by_hand_on_a_non_square_matrix() {
        // [in = 2, out = 3], row-major: input 0 has weights 1, -2, 1 to the three outputs,
        // input 1 has 3, 0, -1.
        // Σ per input: 4, 4. Σ per output: 4, 2, 2.
        // scaler_row 16 and 81 → ‖X‖ 4 and 9 → ^0.5: 2 and 3.
        // input 0: (1/4 + 1/4)·2 = 1, (2/4 + 2/2)·2 = 3, (1/4 + 1/2)·2 = 1.5
        // input 1: (3/4 + 3/4)·3 = 4.5, 0, (1/4 + 1/2)·3 = 2.25
        let w = [1.0f32, -2.0, 1.0, 3.0, 0.0, -1.0];
        let s = ria_scores(&w, [2, 3], &[16.0, 81.0], 0.5).unwrap();
        close(&s, &[1.0, 3.0, 1.5, 4.5, 0.0, 2.25]);
        // a = 1: the activation term is the norm itself (4 and 9).
        let s = ria_scores(&w, [2, 3], &[16.0, 81.0], 1.0).unwrap();
        close(&s, &[2.0, 6.0, 3.0, 13.5, 0.0, 6.75]);
    }

    #[test]
    fn a_channel_of_zeros_scores_zero_not_nan() {
        // Output 1 is all zero: Σ per output = 0 there.
        let w = [1.0f32, 0.0, 2.0, 0.0];
        let s = ria_scores(&w, [2, 2], &[1.0, 1.0], 0.5).unwrap();
        assert!(s.iter().all(|v| v.is_finite()), "{s:?}");
        close(&s, &[1.0 + 1.0 / 3.0, 0.0, 1.0 + 2.0 / 3.0, 0.0]);
    }

    #[test]
    fn unstructured_compares_across_the_whole_matrix() {
        // Scores of the first test: 1, 3, 1.5 / 4.5, 0, 2.25. Ratio 0.5 → k = 3, threshold =
        // sorted[3] = 2.25: four weights go (0, 1, 1.5, 2.25) — output 0 loses input 0 only,
        // output 2 loses both inputs, so the comparison group is not one output channel.
        let mut norms = InputNorms::new(2);
        norms.add_sum_sq(&[16.0, 81.0], 1, 4).unwrap();
        let w = [1.0f32, -2.0, 1.0, 3.0, 0.0, -1.0];
        let mask = ria_mask(
            &w,
            [2, 3],
            &norms,
            Sparsity::Unstructured { ratio: 0.5 },
            false,
        )
        .unwrap();
        assert_eq!(mask, [true, false, true, false, true, true]);
    }

    #[test]
    fn n_m_groups_run_along_the_input_dimension() {
        // [in = 4, out = 2], one 2:4 group per output channel.
        // Σ per input: 2, 2, 4, 4. Σ per output: 1+1+1+3 = 6, 1+1+3+1 = 6. All norms 1.
        // output 0: 1/2+1/6, 1/2+1/6, 1/4+1/6, 3/4+1/2 → the two 1/4+1/6 … lowest: inputs 2, then
        //   a tie between inputs 0 and 1 (lower index first) → prunes 0 and 2.
        // output 1: 1/2+1/6, 1/2+1/6, 3/4+1/2, 1/4+1/6 → prunes 3 and 0.
        let mut norms = InputNorms::new(4);
        norms.add_sum_sq(&[1.0; 4], 1, 1).unwrap();
        let w = [1.0f32, 1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 1.0];
        let mask = ria_mask(&w, [4, 2], &norms, Sparsity::NM { n: 2, m: 4 }, false).unwrap();
        assert_eq!(mask, [true, true, false, false, true, false, false, true]);
    }

    #[test]
    fn reallocation_zig_zags_through_the_importance_chunks() {
        // [in = 8, out = 1]: importance = the score itself. Ascending: inputs 1 5 3 7 0 6 2 4;
        // 2 groups, chunks [1 5] [3 7] [0 6] [2 4]; chunks 1 and 3 are read back to front.
        let scores = [5.0f32, 1.0, 7.0, 3.0, 8.0, 2.0, 6.0, 4.0];
        assert_eq!(
            reallocation_order(&scores, [8, 1], 4),
            [1, 7, 0, 4, 5, 3, 6, 2]
        );
    }

    #[test]
    fn channel_permutation_forms_the_n_m_groups_across_importance_bands() {
        // One output channel, weights 1…8, all norms 1: scores rise with the input index.
        // Plain 2:4 prunes the two lowest of inputs 0–3 and of 4–7. Permuted, the groups are
        // inputs [0 3 4 7] and [1 2 5 6], and the four lowest inputs go.
        let mut norms = InputNorms::new(8);
        norms.add_sum_sq(&[1.0; 8], 1, 1).unwrap();
        let w: Vec<f32> = (1..=8).map(|v| v as f32).collect();
        let nm = Sparsity::NM { n: 2, m: 4 };
        let plain = ria_mask(&w, [8, 1], &norms, nm, false).unwrap();
        assert_eq!(plain, [true, true, false, false, true, true, false, false]);
        let permuted = ria_mask(&w, [8, 1], &norms, nm, true).unwrap();
        assert_eq!(
            permuted,
            [true, true, true, true, false, false, false, false]
        );
    }

    #[test]
    fn no_samples_and_wrong_widths_are_errors() {
        let w = [1.0f32; 6];
        let empty = InputNorms::new(2);
        let sparsity = Sparsity::Unstructured { ratio: 0.5 };
        assert!(matches!(
            ria_mask(&w, [2, 3], &empty, sparsity, false),
            Err(PruneError::NoSamples { .. })
        ));
        assert!(matches!(
            ria_scores(&w, [2, 3], &[1.0; 3], 0.5),
            Err(PruneError::FeatureMismatch { .. })
        ));
    }
}
