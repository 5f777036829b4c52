//! The kinds of stage and of artifact a pipeline names, below everything that parses, plans or
//! reports on them.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The kinds of stage, in their implicit (map-form) order.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StageKind {
    /// Read the model.
    Load,
    /// Predict peak memory from the config.
    Estimate,
    /// Compare the estimate with the budget; reduce nsamples/seqlen or halt.
    Gate,
    /// Sample calibration sequences.
    Calibrate,
    /// Prune the model.
    Prune,
    /// Measure perplexity.
    Eval,
    /// Write the outputs (and optionally the weights).
    Save,
}

impl StageKind {
    /// Every kind in the implicit order.
    pub const ALL: [StageKind; 7] = [
        StageKind::Load,
        StageKind::Estimate,
        StageKind::Gate,
        StageKind::Calibrate,
        StageKind::Prune,
        StageKind::Eval,
        StageKind::Save,
    ];

    /// The name used in pipeline files.
    pub fn name(self) -> &'static str {
        match self {
            StageKind::Load => "load",
            StageKind::Estimate => "estimate",
            StageKind::Gate => "gate",
            StageKind::Calibrate => "calibrate",
            StageKind::Prune => "prune",
            StageKind::Eval => "eval",
            StageKind::Save => "save",
        }
    }

    /// The kind with this name.
    pub fn from_name(name: &str) -> Option<StageKind> {
        StageKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for StageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a stage needs or makes. Checked at plan time, before any tensor exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactKind {
    /// Model weights in memory (dense after `load`, pruned after `prune`).
    Model,
    /// A peak-memory estimate.
    Estimate,
    /// The effective settings after the gate (nsamples, seqlen).
    EffectiveSettings,
    /// Calibration sequences.
    Calibration,
    /// Evaluation results.
    Metrics,
    /// Weights written to disk.
    SavedModel,
}

impl ArtifactKind {
    /// The stage kind that produces it.
    pub fn producer_kind(self) -> StageKind {
        match self {
            ArtifactKind::Model => StageKind::Load,
            ArtifactKind::Estimate => StageKind::Estimate,
            ArtifactKind::EffectiveSettings => StageKind::Gate,
            ArtifactKind::Calibration => StageKind::Calibrate,
            ArtifactKind::Metrics => StageKind::Eval,
            ArtifactKind::SavedModel => StageKind::Save,
        }
    }
}

impl fmt::Display for ArtifactKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ArtifactKind::Model => "a model",
            ArtifactKind::Estimate => "a memory estimate",
            ArtifactKind::EffectiveSettings => "effective settings",
            ArtifactKind::Calibration => "calibration data",
            ArtifactKind::Metrics => "metrics",
            ArtifactKind::SavedModel => "a saved model",
        })
    }
}
