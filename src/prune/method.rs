//! The pruning method: one type for the pipeline file, the command line, the estimator and the
//! layer-wise driver, and the options that tune a method.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::dsnot::DsnotOptions;
use super::profile::Profile;
use super::sparsegpt::SparseGptOptions;

/// A pruning method.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// |W|, no calibration.
    Magnitude,
    /// |W| · ‖X‖₂ (arXiv 2306.11695).
    Wanda,
    /// Optimal brain surgeon with Hessian updates (arXiv 2301.00774).
    Sparsegpt,
    /// Relative importance · ‖X‖₂^0.5, compared per matrix (RIA, ICLR 2024).
    Ria,
    /// Removes the experts of least mean routing weight × output norm over their tokens
    /// (REAP, ICLR 2026). The expert methods are a pipeline's (`experts:`), not `--method`'s.
    #[value(skip)]
    Reap,
    /// Removes the experts the fewest calibration tokens are routed to.
    #[value(skip)]
    Frequency,
    /// Removes the experts of least mean output norm over their tokens (EAN).
    #[value(skip)]
    Ean,
    /// Removes the experts of least summed routing weight.
    #[serde(rename = "weighted_frequency")]
    #[value(skip)]
    WeightedFrequency,
}

impl Method {
    /// Every method, in the order help texts list them.
    pub const ALL: [Method; 8] = [
        Method::Magnitude,
        Method::Wanda,
        Method::Sparsegpt,
        Method::Ria,
        Method::Reap,
        Method::Frequency,
        Method::Ean,
        Method::WeightedFrequency,
    ];

    /// The name used in pipeline files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Method::Magnitude => "magnitude",
            Method::Wanda => "wanda",
            Method::Sparsegpt => "sparsegpt",
            Method::Ria => "ria",
            Method::Reap => "reap",
            Method::Frequency => "frequency",
            Method::Ean => "ean",
            Method::WeightedFrequency => "weighted_frequency",
        }
    }

    /// Whether the method removes whole experts of a mixture of experts
    /// ([`super::experts`]) rather than weights.
    pub fn removes_experts(self) -> bool {
        matches!(
            self,
            Method::Reap | Method::Frequency | Method::Ean | Method::WeightedFrequency
        )
    }

    /// Whether the method needs calibration activations.
    pub fn needs_calibration(self) -> bool {
        !matches!(self, Method::Magnitude)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Method {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "`{s}` is not a method; use `magnitude`, `wanda`, `sparsegpt` or `ria` \
                     (weights), or `reap`, `frequency`, `ean` or `weighted_frequency` (experts)"
                )
            })
    }
}

/// The options that tune a method (each method reads its own) and the linears it leaves alone.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MethodOptions {
    /// Wanda: the reference's `--use_variant` (per-row adaptive threshold).
    pub use_variant: bool,
    /// SparseGPT: block size and dampening.
    pub sparsegpt: SparseGptOptions,
    /// RIA with N:M: form the groups over importance-reallocated input channels (the
    /// reference's `--reallocation`).
    pub channel_permutation: bool,
    /// Linears left dense, as globs over their HF paths (see [`super::skip`]).
    pub skip: Vec<String>,
    /// How the target is spread over decoder layers (see [`super::profile`]).
    pub profile: Profile,
    /// Refine the method's mask with DSnoT (see [`super::dsnot`]).
    pub dsnot: Option<DsnotOptions>,
    /// Update the weights magnitude or Wanda keeps, the Wanda paper's ablation (see
    /// [`super::weight_update`]).
    pub weight_update: Option<WeightUpdate>,
}

impl MethodOptions {
    /// Whether `method` with these options needs calibration activations: every method but
    /// magnitude, and magnitude too under OWL (its outlier ratios come from Wanda scores) or
    /// DSnoT (which reads the inputs' moments).
    pub fn needs_calibration(&self, method: Method) -> bool {
        method.needs_calibration()
            || self.profile.owl().is_some()
            || self.dsnot.is_some()
            || self.weight_update.is_some()
    }

    /// Whether pruning with `method` and these options only zeroes weights: SparseGPT and a
    /// weight update change the weights they keep, unless DSnoT uses SparseGPT's saliency only
    /// to order a mask. A zeroing method's pruned linears go back as the masks of their zeros.
    pub fn only_zeroes(&self, method: Method) -> bool {
        self.weight_update.is_none() && (method != Method::Sparsegpt || self.dsnot.is_some())
    }
}

/// How the weights a method keeps are updated after its mask: the Wanda paper's ablation.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum WeightUpdate {
    /// The mask chosen once from the dense weights, then SparseGPT's update (`*_seq`).
    Sequential,
    /// The metric recomputed from the updated weights, block by block (`*_iter`).
    Iterative,
}

impl WeightUpdate {
    /// The name used in pipeline files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            WeightUpdate::Sequential => "sequential",
            WeightUpdate::Iterative => "iterative",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_other_words_are_refused() {
        for method in Method::ALL {
            assert_eq!(method.to_string().parse::<Method>(), Ok(method));
            assert_eq!(
                serde_json::to_value(method).unwrap(),
                serde_json::json!(method.name())
            );
        }
        let err = "obs".parse::<Method>().unwrap_err();
        assert!(err.contains("`obs` is not a method"), "{err}");
        assert!(!Method::Magnitude.needs_calibration());
        assert!(Method::Wanda.needs_calibration() && Method::Sparsegpt.needs_calibration());
        assert!(Method::Ria.needs_calibration());
    }

    #[test]
    fn a_weight_update_calibrates_and_changes_kept_weights() {
        let update = MethodOptions {
            weight_update: Some(WeightUpdate::Sequential),
            ..MethodOptions::default()
        };
        assert!(update.needs_calibration(Method::Magnitude));
        assert!(!update.only_zeroes(Method::Magnitude) && !update.only_zeroes(Method::Wanda));
        let plain = MethodOptions::default();
        assert!(!plain.needs_calibration(Method::Magnitude));
        assert!(plain.only_zeroes(Method::Wanda) && !plain.only_zeroes(Method::Sparsegpt));
        let dsnot = MethodOptions {
            dsnot: Some(DsnotOptions::default()),
            ..MethodOptions::default()
        };
        assert!(dsnot.only_zeroes(Method::Sparsegpt));
    }
}
