//! Pruning kernels: sparsity patterns, masks (per-output top-k, N:M, per-matrix threshold) and the
//! magnitude, Wanda (arXiv 2306.11695), SparseGPT (arXiv 2301.00774) and RIA (ICLR 2024) methods,
//! DSnoT's mask refinement (arXiv 2310.08915), the Wanda paper's weight-update ablation and
//! per-layer sparsity profiles with OWL (arXiv 2310.05175), all as pure host-side functions on `f32` matrices, except
//! [`device_select`]: Wanda's and magnitude's unstructured selection in Burn's ops, on a GPU.
//!
//! Every weight here is in Burn's `Linear` layout `[in, out]`, row-major (`W[i * out + o]`, `i` an
//! input channel, `o` an output channel) — the transpose of PyTorch's `[out, in]`. Functions take
//! the dims as `[in_features, out_features]`, so `tensor.dims()` of a Burn weight fits directly.
//! The comparison group of Wanda and of the per-output masks is one output channel (a column
//! here); N:M groups run along the input dimension (`M` consecutive input channels of one output
//! channel). A mask is a `Vec<bool>` of the weight's shape and layout, `true` = set to zero.
//!
//! The selection rules are those of the reference code (locuslab/wanda `lib/prune.py`,
//! `lib/layerwrapper.py`, `lib/sparsegpt.py`). Where this deviates, on purpose:
//! - sparsity 0 prunes nothing in the magnitude threshold and SparseGPT's block threshold (the
//!   reference's `<=` would still prune the smallest weight(s) of the matrix or of each block);
//! - ties are broken by the lower input index everywhere, also where the reference's `topk`
//!   leaves their order unspecified (N:M);
//! - statistics, the Hessian and the whole SparseGPT update run in f64, not f32, and `H⁻¹`'s
//!   factor comes from one Cholesky factorisation of the index-reversed `H` (see
//!   [`linalg::upper_cholesky_of_inverse`]);
//! - the Wanda variant prunes nothing in an output channel where no cumulative sum fits under
//!   the threshold (the reference would `gather` at index −1 there);
//! - inputs that would crash or silently misbehave there are errors here (an `in` that is not a
//!   multiple of `m`, a NaN score, a SparseGPT block size that splits an N:M group).

use rayon::prelude::*;

pub mod activations;
pub mod device_select;
pub mod dsnot;
pub mod experts;
pub mod layerwise;
pub mod linalg;
pub mod magnitude;
pub mod mask;
pub mod method;
pub mod pattern;
pub mod profile;
pub mod report;
pub mod ria;
pub mod skip;
pub mod sparsegpt;
pub mod wanda;
pub mod weight_update;

pub use method::{Method, MethodOptions, WeightUpdate};
pub use pattern::{Pattern, Sparsity};

impl From<crate::model::checkpoint::StreamError> for PruneError {
    fn from(e: crate::model::checkpoint::StreamError) -> Self {
        PruneError::Layers(e.to_string())
    }
}

/// Errors of the pruning kernels.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PruneError {
    /// A sparsity pattern string could not be read.
    #[error("invalid sparsity pattern `{input}`: {reason}")]
    InvalidPattern {
        /// The text as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An unstructured ratio outside `[0, 1)`.
    #[error("sparsity ratio `{ratio}` is outside [0, 1)")]
    RatioOutOfRange {
        /// The ratio as given.
        ratio: f64,
    },
    /// An N:M pattern that prunes nothing or everything.
    #[error("n:m pattern `{n}:{m}` must prune at least one and fewer than all weights of a group (0 < n < m)")]
    InvalidNm {
        /// Weights pruned per group.
        n: usize,
        /// Group size.
        m: usize,
    },
    /// The input dimension does not split into whole N:M groups.
    #[error(
        "input dimension {in_features} is not a multiple of the group size of pattern `{n}:{m}`"
    )]
    IndivisibleGroups {
        /// Input channels of the matrix.
        in_features: usize,
        /// Weights pruned per group.
        n: usize,
        /// Group size.
        m: usize,
    },
    /// A buffer does not hold `in × out` values.
    #[error("{what} has {len} values, but shape [{in_features}, {out_features}] needs {expected}")]
    ShapeMismatch {
        /// Which buffer.
        what: &'static str,
        /// Its length.
        len: usize,
        /// Input channels.
        in_features: usize,
        /// Output channels.
        out_features: usize,
        /// `in_features × out_features`.
        expected: usize,
    },
    /// Two buffers that must have the same length do not.
    #[error("{what} has {got} values, expected {expected}")]
    LengthMismatch {
        /// Which buffer.
        what: &'static str,
        /// The length it should have.
        expected: usize,
        /// The length it has.
        got: usize,
    },
    /// Calibration statistics of another width than the weight's input dimension.
    #[error("{what} has {got} input features, expected {expected}")]
    FeatureMismatch {
        /// Which statistic or buffer.
        what: &'static str,
        /// The width it should have.
        expected: usize,
        /// The width it has.
        got: usize,
    },
    /// A NaN or infinity in an input.
    #[error("{what} holds a non-finite value at index {index}")]
    NonFinite {
        /// Which buffer.
        what: &'static str,
        /// Flat index of the first offending value.
        index: usize,
    },
    /// A `skip` pattern that names no linear of the model.
    #[error("skip pattern `{pattern}` matches no linear of this model; linears are named like `{example}`")]
    SkipMatchesNothing {
        /// The pattern as given.
        pattern: String,
        /// The path of one linear, to show the form.
        example: String,
    },
    /// A per-layer sparsity profile that cannot apply.
    #[error("invalid sparsity profile: {reason}")]
    InvalidProfile {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// Statistics were used before any calibration batch was added.
    #[error("no calibration batch was added; the {what} is empty")]
    NoSamples {
        /// Which accumulator.
        what: &'static str,
    },
    /// The dampened Hessian has no Cholesky factor.
    #[error(
        "the dampened hessian is not positive definite (cholesky pivot {pivot:e} at input channel {channel}); \
         use more calibration samples or a larger `percdamp` (now `{percdamp}`)"
    )]
    NotPositiveDefinite {
        /// Input channel whose pivot failed.
        channel: usize,
        /// The failing pivot (not positive, or not finite).
        pivot: f64,
        /// The dampening used.
        percdamp: f64,
    },
    /// SparseGPT settings that cannot work.
    #[error("invalid sparsegpt options: {reason}")]
    InvalidOptions {
        /// What is wrong.
        reason: String,
    },
    /// A streamed layer could not be read or stored (the message of the
    /// [`crate::model::checkpoint::StreamError`]).
    #[error("{0}")]
    Layers(String),
    /// SparseGPT produced a NaN or infinite weight.
    #[error(
        "sparsegpt produced a non-finite weight at input channel {channel}, output channel {output}; \
         use more calibration samples or a larger `percdamp` (now `{percdamp}`)"
    )]
    NonFiniteResult {
        /// Input channel of the first offending weight.
        channel: usize,
        /// Output channel of the first offending weight.
        output: usize,
        /// The dampening used.
        percdamp: f64,
    },
}

/// Checks that a buffer holds exactly `in × out` values.
pub(crate) fn check_shape(
    what: &'static str,
    len: usize,
    dims: [usize; 2],
) -> Result<(), PruneError> {
    let [in_features, out_features] = dims;
    let expected = in_features * out_features;
    if len == expected {
        Ok(())
    } else {
        Err(PruneError::ShapeMismatch {
            what,
            len,
            in_features,
            out_features,
            expected,
        })
    }
}

/// Checks that every value is finite (searched in parallel); the error names the first one
/// that is not.
pub(crate) fn check_finite<T: Copy + Into<f64> + Sync>(
    what: &'static str,
    values: &[T],
) -> Result<(), PruneError> {
    match first_where(values, |v| !v.into().is_finite()) {
        None => Ok(()),
        Some(index) => Err(PruneError::NonFinite { what, index }),
    }
}

/// The index of the first value for which `hit` holds, searched in parallel blocks, each
/// scanned without a branch per value first (rayon's `position_first` took 10 ns a value, two
/// thirds of magnitude pruning a Llama-2-7B layer).
pub(crate) fn first_where<T: Copy + Sync>(
    values: &[T],
    hit: impl Fn(T) -> bool + Sync,
) -> Option<usize> {
    const BLOCK: usize = 1 << 14;
    values
        .par_chunks(BLOCK)
        .enumerate()
        .find_map_first(|(b, block)| {
            let any = block.iter().fold(false, |any, &v| any | hit(v));
            any.then(|| {
                let i = block.iter().position(|&v| hit(v));
                b * BLOCK + i.expect("the block holds a hit")
            })
        })
}

/// A seeded value in `[-1, 1)` for tests: `(k, seed)` always give the same number.
#[cfg(test)]
pub(crate) fn noise(k: usize, seed: u64) -> f32 {
    let mut s =
        (k as u64 ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    s ^= s >> 29;
    s = s.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    s ^= s >> 32;
    ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}
