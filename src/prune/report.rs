//! Measured sparsity of a pruned weight: the fraction of exact zeros (what the reference's
//! `check_sparsity` prints) and how many weights each output channel keeps.

use rayon::prelude::*;

use super::{check_shape, PruneError};

/// Non-zero weights of each output channel.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]` → `[out]`
pub fn kept_per_output_channel(weight: &[f32], dims: [usize; 2]) -> Result<Vec<usize>, PruneError> {
    check_shape("the weight", weight.len(), dims)?;
    let [_, out_features] = dims;
    // Bands of input rows counted in parallel, then summed.
    let count = |mut kept: Vec<usize>, rows: &[f32]| {
        for row in rows.chunks_exact(out_features.max(1)) {
            for (k, &w) in kept.iter_mut().zip(row) {
                *k += usize::from(w != 0.0);
            }
        }
        kept
    };
    let band = out_features.max(1) * 64;
    Ok(weight
        .par_chunks(band)
        .fold(|| vec![0usize; out_features], count)
        .reduce(
            || vec![0usize; out_features],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        ))
}

/// The sparsity of one pruned matrix (a linear's weight).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MatrixSparsity {
    /// Exact zeros.
    pub zeros: usize,
    /// All weights (`in × out`).
    pub total: usize,
    /// `zeros / total`.
    pub fraction: f64,
    /// Fewest non-zero weights in one output channel.
    pub min_kept: usize,
    /// Most non-zero weights in one output channel.
    pub max_kept: usize,
}

impl MatrixSparsity {
    /// Measures `weight`.
    ///
    /// # Shapes
    /// - `weight`: `[in, out]`, `dims = [in, out]`
    pub fn measure(weight: &[f32], dims: [usize; 2]) -> Result<Self, PruneError> {
        let kept = kept_per_output_channel(weight, dims)?;
        Ok(Self::from_kept(&kept, weight.len()))
    }

    /// The figures of a matrix of `total` weights whose output channels keep `kept` non-zero
    /// weights each (exact zeros, `-0.0` included, are not kept).
    pub fn from_kept(kept: &[usize], total: usize) -> Self {
        let zeros = total - kept.iter().sum::<usize>();
        Self {
            zeros,
            total,
            // 0 for an empty matrix.
            fraction: zeros as f64 / total.max(1) as f64,
            min_kept: kept.iter().copied().min().unwrap_or(0),
            max_kept: kept.iter().copied().max().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_3_by_5() {
        #[rustfmt::skip]
        let w = [
            0.0f32, 1.0, 0.0, 2.0, -0.0,
            3.0,    0.0, 4.0, 5.0,  6.0,
            0.0,    7.0, 8.0, 0.0,  9.0,
        ];
        let fraction = |w: &[f32], dims| MatrixSparsity::measure(w, dims).unwrap().fraction;
        assert_eq!(fraction(&w, [3, 5]), 6.0 / 15.0);
        assert_eq!(
            kept_per_output_channel(&w, [3, 5]).unwrap(),
            [1, 2, 2, 2, 2]
        );
        let r = MatrixSparsity::measure(&w, [3, 5]).unwrap();
        assert_eq!(
            r,
            MatrixSparsity {
                zeros: 6,
                total: 15,
                fraction: 0.4,
                min_kept: 1,
                max_kept: 2
            }
        );
        assert!(kept_per_output_channel(&w, [5, 3]).unwrap() != [1, 2, 2, 2, 2]);
        assert!(kept_per_output_channel(&w, [4, 5]).is_err());
        assert_eq!(fraction(&[], [0, 5]), 0.0);
    }
}
