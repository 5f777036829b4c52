//! The pipeline's stages on a Burn backend: one thin file per kind, each reading its options,
//! calling one domain function and storing the artifact in [`PipelineExecutor`].
//!
//! Not yet available: `estimate` and `gate` (the memory estimator); a pipeline that lists them
//! fails at that stage with a message saying so.

mod calibrate;
mod eval;
mod load;
mod prune;
mod save;

pub use save::{RECIPE_FILE, SPARSITY_FILE};

use std::path::{Path, PathBuf};

use burn::prelude::Backend;

use crate::data::calibration::CalibrationSet;
use crate::model::llama::Llama;
use crate::model::LoadedModel;
use crate::pipeline::plan::{Cell, Plan, Scope, StageNode};
use crate::pipeline::record::{Hashes, RunRecord};
use crate::pipeline::runner::{Executor, StageFailure, StageOutcome};
use crate::pipeline::spec::{PipelineSpec, Settings, StageKind, StageOptions};
use crate::prune::layerwise::ModelSparsity;

/// Errors of the stages themselves (domain errors pass through boxed).
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// A stage ran before the stage that makes its input (the plan prevents this).
    #[error("stage `{stage}` needs {what}, which no earlier stage produced")]
    Missing {
        /// The stage.
        stage: String,
        /// The artifact.
        what: &'static str,
    },
    /// The stage kind has no implementation in this version.
    #[error("stage kind `{kind}` is not available in this version of wanda; remove stage `{stage}` from `stages`")]
    Unavailable {
        /// The stage id.
        stage: String,
        /// Its kind.
        kind: String,
    },
    /// A file could not be read.
    #[error("cannot read `{path}`")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Receives `(stage, done, total)` from long stages.
type ProgressFn = dyn Fn(&str, usize, usize);

/// Runs the stages of one plan on backend `B`, holding the artifacts between them.
pub struct PipelineExecutor<B: Backend> {
    base_dir: PathBuf,
    results_dir: PathBuf,
    device: B::Device,
    device_label: String,
    /// The loaded (dense) model, shared by every cell.
    base: Option<LoadedModel<B>>,
    /// Pruned copies, by the prune node that made them: (stage id, cell index or None).
    pruned: Vec<(NodeKey, Pruned<B>)>,
    calibration: Option<CalibrationSet>,
    /// Tokenised evaluation text, by file, so cells tokenise it once.
    eval_ids: Option<(PathBuf, Vec<u32>)>,
    hashes: Hashes,
    /// Settings of the shared stages: keys they read are not swept, so every cell agrees.
    shared_settings: Settings,
    /// Told `(stage, done, total)` as long stages advance (layers pruned, windows evaluated).
    progress: Box<ProgressFn>,
    /// The pipeline as written, the recipe of what shared stages save.
    pipeline: PipelineSpec,
}

/// A pruned copy of the model and its measured sparsity.
struct Pruned<B: Backend> {
    model: Llama<B>,
    report: ModelSparsity,
}

impl<B: Backend> PipelineExecutor<B> {
    /// An executor for `plan` writing cell outputs below `results_dir`.
    pub fn new(plan: &Plan, results_dir: &Path, device: B::Device, device_label: String) -> Self {
        let hashes = Hashes {
            pipeline: crate::data::hash::sha256_file(&plan.file).ok(),
            ..Hashes::default()
        };
        Self {
            base_dir: plan.base_dir.clone(),
            results_dir: results_dir.to_path_buf(),
            device,
            device_label,
            base: None,
            pruned: Vec::new(),
            calibration: None,
            eval_ids: None,
            hashes,
            shared_settings: plan
                .cells
                .first()
                .map_or_else(|| plan.spec.settings.clone(), |c| c.spec.settings.clone()),
            progress: Box::new(|_, _, _| {}),
            pipeline: plan.spec.clone(),
        }
    }

    /// Reports the progress of long stages to `progress(stage, done, total)`.
    pub fn with_progress(mut self, progress: impl Fn(&str, usize, usize) + 'static) -> Self {
        self.progress = Box::new(progress);
        self
    }

    fn path(&self, p: &Path) -> PathBuf {
        self.base_dir.join(p)
    }

    fn base(&self, stage: &str) -> Result<&LoadedModel<B>, StageError> {
        self.base.as_ref().ok_or_else(|| StageError::Missing {
            stage: stage.to_string(),
            what: "a loaded model",
        })
    }

    /// The model a stage works on: the copy made by the last prune stage upstream of it, or
    /// the dense model when none is (e.g. a dense evaluation branch).
    fn current(&self, stage: &str, upstream: &[&StageNode]) -> Result<&Llama<B>, StageError> {
        match self.pruned_upstream(stage, upstream)? {
            Some(pruned) => Ok(&pruned.model),
            None => Ok(&self.base(stage)?.model),
        }
    }

    /// The copy made by the last prune stage upstream of `stage`, if any prunes.
    fn pruned_upstream(
        &self,
        stage: &str,
        upstream: &[&StageNode],
    ) -> Result<Option<&Pruned<B>>, StageError> {
        let Some(key) = upstream
            .iter()
            .rev()
            .find(|n| n.kind == StageKind::Prune)
            .map(|n| node_key(n))
        else {
            return Ok(None);
        };
        self.pruned
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, p)| Some(p))
            .ok_or_else(|| StageError::Missing {
                stage: stage.to_string(),
                what: "the pruned model",
            })
    }
}

/// Identifies a node's artifacts: its stage id and, for per-cell nodes, the cell index.
type NodeKey = (String, Option<usize>);

fn node_key(node: &StageNode) -> NodeKey {
    let cell = match node.scope {
        Scope::Cell(i) => Some(i),
        Scope::Shared { .. } => None,
    };
    (node.stage.clone(), cell)
}

impl<B: Backend> Executor for PipelineExecutor<B> {
    fn run_stage(
        &mut self,
        node: &StageNode,
        upstream: &[&StageNode],
        cell: Option<&Cell>,
        record: &mut RunRecord,
    ) -> Result<StageOutcome, StageFailure> {
        let settings = match cell {
            Some(c) => c.spec.settings.clone(),
            None => self.shared_settings.clone(),
        };
        match &node.options {
            StageOptions::Load(_) => load::run(self, &node.stage, &settings)?,
            StageOptions::Calibrate(_) => calibrate::run(self, &node.stage, &settings)?,
            StageOptions::Prune(options) => prune::run(self, node, options, record)?,
            StageOptions::Eval(options) => {
                eval::run(self, &node.stage, upstream, options, &settings, record)?
            }
            StageOptions::Save(options) => save::run(self, &node.stage, upstream, options, cell)?,
            StageOptions::Estimate(_) | StageOptions::Gate(_) => {
                return Err(StageError::Unavailable {
                    stage: node.stage.clone(),
                    kind: format!("{:?}", node.kind).to_lowercase(),
                }
                .into())
            }
        }
        Ok(StageOutcome::Continue)
    }

    fn begin_cell(&mut self, _cell: &Cell, record: &mut RunRecord) {
        // The previous cell's pruned copies are no longer needed; shared ones stay.
        self.pruned.retain(|((_, cell), _)| cell.is_none());
        record.hashes = self.hashes.clone();
        record.effective.device = self.device_label.clone();
        record.versions.burn = Some("0.21.0".to_string());
        if let Some(c) = &self.calibration {
            record.effective.nsamples = Some(c.windows.len());
            record.effective.seqlen = Some(c.seqlen);
            record.metrics.other.insert(
                "calibration_offsets_hash".into(),
                c.offsets_hash.clone().into(),
            );
        }
    }
}
