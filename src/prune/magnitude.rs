//! Magnitude pruning, the baseline of the Wanda paper (arXiv 2306.11695, Table 1): score `|W|`,
//! a per-matrix threshold for unstructured sparsity and N:M groups otherwise, as the reference's
//! `prune_magnitude`.

use rayon::prelude::*;

use super::mask::{apply_mask, matrix_threshold_or_nm_mask, prune_below_threshold};
use super::{check_shape, PruneError, Sparsity};

/// `|W|`, elementwise.
///
/// # Shapes
/// - `weight`: any → the same
pub fn magnitude_scores(weight: &[f32]) -> Vec<f32> {
    weight.par_iter().map(|w| w.abs()).collect()
}

/// The magnitude mask, [`matrix_threshold_or_nm_mask`] of `|W|`: one threshold for the whole
/// matrix for an unstructured ratio (so ties at the threshold are all pruned), N:M groups for N:M.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]` → mask `[in, out]`
pub fn magnitude_mask(
    weight: &[f32],
    dims: [usize; 2],
    sparsity: Sparsity,
) -> Result<Vec<bool>, PruneError> {
    check_shape("the weight", weight.len(), dims)?;
    matrix_threshold_or_nm_mask(&magnitude_scores(weight), dims, sparsity)
}

/// Prunes `weight` in place by magnitude and returns the number of weights it zeroed (weights
/// that were already zero count when the mask selects them).
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`
pub fn prune_magnitude(
    weight: &mut [f32],
    dims: [usize; 2],
    sparsity: Sparsity,
) -> Result<usize, PruneError> {
    if let Sparsity::Unstructured { ratio } = sparsity {
        // The same weights as `magnitude_mask`'s, without a score matrix or a mask.
        check_shape("the weight", weight.len(), dims)?;
        return prune_below_threshold(weight, ratio, f32::abs);
    }
    let mask = magnitude_mask(weight, dims, sparsity)?;
    apply_mask(weight, &mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unstructured_uses_one_threshold_for_the_whole_matrix() {
        // [in = 2, out = 4]. |W| sorted: 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8; ratio 0.25 → k = 2,
        // threshold sorted[2] = 0.3 → three weights (0.1, 0.2, 0.3), wherever they sit: two in
        // output channel 0, none in channels 2 and 3.
        let mut w = [-0.1f32, 0.8, 0.5, -0.6, 0.2, -0.3, 0.7, 0.4];
        let zeroed =
            prune_magnitude(&mut w, [2, 4], Sparsity::Unstructured { ratio: 0.25 }).unwrap();
        assert_eq!(zeroed, 3);
        assert_eq!(w, [0.0, 0.8, 0.5, -0.6, 0.0, 0.0, 0.7, 0.4]);
    }

    #[test]
    fn nm_uses_absolute_values_along_the_input() {
        // [in = 4, out = 2], 2:4: per output column, the two smallest |W| of the four inputs.
        let mut w = [
            -5.0f32, 1.0, //
            0.5, -2.0, //
            -0.1, 3.0, //
            4.0, -0.2,
        ];
        prune_magnitude(&mut w, [4, 2], Sparsity::NM { n: 2, m: 4 }).unwrap();
        assert_eq!(w, [-5.0, 0.0, 0.0, -2.0, 0.0, 3.0, 4.0, 0.0]);
    }

    /// The in-place path zeroes exactly the weights of `magnitude_mask`, ties included.
    #[test]
    fn in_place_pruning_equals_the_mask() {
        let dims = [53, 29];
        let w: Vec<f32> = (0..dims[0] * dims[1])
            .map(|k| (crate::prune::noise(k, 9) * 6.0).round() / 6.0)
            .collect();
        for ratio in [0.1, 0.5, 0.8] {
            let sparsity = Sparsity::unstructured(ratio).unwrap();
            let mut expected = w.clone();
            let zeroed = apply_mask(&mut expected, &magnitude_mask(&w, dims, sparsity).unwrap());
            let mut pruned = w.clone();
            assert_eq!(prune_magnitude(&mut pruned, dims, sparsity), zeroed);
            assert_eq!(pruned, expected, "{ratio}");
        }
    }

    #[test]
    fn shape_is_checked() {
        let mut w = [1.0f32; 6];
        assert!(matches!(
            prune_magnitude(&mut w, [4, 2], Sparsity::Unstructured { ratio: 0.5 }),
            Err(PruneError::ShapeMismatch { .. })
        ));
        assert_eq!(w, [1.0; 6], "an error leaves the weight untouched");
    }
}
