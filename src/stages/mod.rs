//! The pipeline's stages on a Burn backend: one thin file per kind, each reading its options,
//! calling one domain function and storing the artifact in [`PipelineExecutor`].

mod calibrate;
mod estimate;
mod eval;
mod gate;
mod load;
pub mod probe;
mod prune;
mod save;

pub use estimate::requested_run;
pub use gate::dry_run as gate_dry_run;
pub use save::{RECIPE_FILE, SPARSITY_FILE};

use std::path::{Path, PathBuf};

use burn::prelude::Backend;

use crate::data::calibration::CalibrationSet;
use crate::eval::perplexity::PerplexityReport;
use crate::memory::device::DeviceChoice;
use crate::memory::gate::GateDecision;
use crate::model::checkpoint::{Decoder, Layers};
use crate::model::Loaded;
use crate::pipeline::plan::{Cell, Plan, Scope, StageNode};
use crate::pipeline::record::{DataRecord, Hashes, RunRecord};
use crate::pipeline::runner::{Executor, StageFailure, StageOutcome};
use crate::pipeline::spec::{Budget, PipelineSpec, Settings, StageKind, StageOptions};
use crate::prune::activations::Batching;
use crate::prune::experts::ExpertsReport;
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
    /// `budget: auto` on a device whose free memory cannot be read.
    #[error("stage `{stage}`: cannot read the free memory of `{device}` for `budget: auto`; set `budget: 12GiB` (or pass `--budget`)")]
    NoBudget {
        /// The stage id.
        stage: String,
        /// The device.
        device: String,
    },
    /// Calibration windows longer than a model with learned positions (OPT) has positions.
    #[error("stage `{stage}`: calibration seqlen {seqlen} exceeds the model's {max} learned positions (`max_position_embeddings` in its config.json); set `calibration: {{ seqlen: {max} }}` or less")]
    PastPositions {
        /// The stage id.
        stage: String,
        /// The window length asked for.
        seqlen: usize,
        /// Positions the model has.
        max: usize,
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

impl StageError {
    /// [`StageError::Read`] of `path`.
    fn read(path: &Path, source: std::io::Error) -> Self {
        Self::Read {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Receives `(stage, done, total)` from long stages.
type ProgressFn = dyn Fn(&str, usize, usize);

/// Runs the stages of one plan on backend `B`: a context every stage reads, the artifacts
/// stages hand each other, and the hashes of the inputs.
pub struct PipelineExecutor<B: Backend> {
    ctx: StageContext<B>,
    artifacts: Artifacts<B>,
    hashes: InputHashes,
}

/// What stages read and never change during a run: where files are, the device, facts of the
/// plan, and the callbacks.
struct StageContext<B: Backend> {
    base_dir: PathBuf,
    results_dir: PathBuf,
    device: B::Device,
    /// The device `device` is, as resolved once by the caller.
    choice: DeviceChoice,
    /// Whether a gate stage will decide on layer streaming (so `load` leaves the layers on
    /// disk until then).
    gated: bool,
    /// Whether the one prune stage is the only reader of the dense model, so it prunes the
    /// model itself rather than a copy ([`Plan::prunes_in_place`]).
    in_place: bool,
    /// Settings of the shared stages: keys they read are not swept, so every cell agrees.
    shared_settings: Settings,
    /// The pipeline as written, the recipe of what shared stages save.
    pipeline: PipelineSpec,
    /// Every cell's resolved pipeline, for shared stages that look at all of them.
    cell_specs: Vec<PipelineSpec>,
    /// A budget that overrides the pipeline's (`wanda run --budget`).
    budget: Option<Budget>,
    /// Told `(stage, done, total)` as long stages advance (layers pruned, windows evaluated).
    progress: Box<ProgressFn>,
    /// Shown what stages decide (the gate's table).
    report: Box<dyn Fn(&str)>,
}

/// What stages produce and later stages read.
struct Artifacts<B: Backend> {
    /// The loaded (dense) model, shared by every cell: streamed from its checkpoint from the
    /// `load` stage until a gate decides whether it stays streamed.
    base: Option<Loaded<Decoder<B>>>,
    /// Whether the dense model's layers were handed to an in-place prune.
    dense_taken: bool,
    /// Pruned copies, by the prune node that made them: (stage id, cell index or None).
    pruned: Vec<(NodeKey, Pruned<B>)>,
    calibration: Option<CalibrationSet>,
    /// Tokenised evaluation text, by file, so cells tokenise it once.
    eval_ids: Option<(String, Vec<u32>)>,
    /// The last perplexity measured, whole (run records keep its main figures).
    perplexity: Option<PerplexityReport>,
    /// The estimate the gate works from.
    estimated: Option<estimate::Estimated>,
    /// The gate's decision. Stages never read it: [`PipelineExecutor::effective_settings`]
    /// and [`PipelineExecutor::calibration_batching`] apply it to what they are given.
    gate: Option<GateDecision>,
    /// Whether a streamed model's layers are all read once before calibration
    /// (`load: { verify: full }`) rather than checked as each is first read.
    verify_layers: bool,
}

/// The hashes of the run's inputs.
struct InputHashes {
    /// What run records keep.
    recorded: Hashes,
    /// Where hub data came from, as run records keep it.
    data: DataRecord,
    /// SHA-256 of every input file hashed so far, so resuming and loading hash each once.
    files: std::collections::HashMap<PathBuf, String>,
    /// The model's files being hashed on a thread of their own since the load began: the run
    /// record needs their hash only when a cell ends, so calibration and pruning go on
    /// meanwhile ([`PipelineExecutor::settle_model_hash`]).
    pending_model: Option<load::PendingHash>,
}

/// A pruned copy of the model and its measured sparsity.
struct Pruned<B: Backend> {
    model: Decoder<B>,
    report: ModelSparsity,
    /// The experts a prune stage up to this one removed, where one did.
    experts: Option<ExpertsReport>,
}

impl<B: Backend> PipelineExecutor<B> {
    /// An executor for `plan` writing cell outputs below `results_dir`, computing on `device`,
    /// which is `choice`.
    pub fn new(plan: &Plan, results_dir: &Path, device: B::Device, choice: DeviceChoice) -> Self {
        let recorded = Hashes {
            pipeline: crate::data::hash::sha256_file(&plan.file).ok(),
            ..Hashes::default()
        };
        Self {
            ctx: StageContext {
                base_dir: plan.base_dir.clone(),
                results_dir: results_dir.to_path_buf(),
                device,
                choice,
                gated: plan
                    .spec
                    .stages
                    .iter()
                    .any(|s| matches!(s.options, StageOptions::Gate(_))),
                in_place: plan.prunes_in_place(),
                shared_settings: plan
                    .cells
                    .first()
                    .map_or_else(|| plan.spec.settings.clone(), |c| c.spec.settings.clone()),
                pipeline: plan.spec.clone(),
                cell_specs: plan.cells.iter().map(|c| c.spec.clone()).collect(),
                budget: None,
                progress: Box::new(|_, _, _| {}),
                report: Box::new(|_| {}),
            },
            artifacts: Artifacts {
                base: None,
                dense_taken: false,
                pruned: Vec::new(),
                calibration: None,
                eval_ids: None,
                perplexity: None,
                estimated: None,
                gate: None,
                verify_layers: false,
            },
            hashes: InputHashes {
                recorded,
                data: DataRecord::default(),
                files: std::collections::HashMap::new(),
                pending_model: None,
            },
        }
    }

    /// The settings a stage runs with: the cell's (or, for shared stages, the shared ones),
    /// with the gate's effective calibration size and evaluation window where a gate ran. The
    /// one place the gate's decision reaches the stages.
    fn effective_settings(&self, cell: Option<&Cell>) -> Settings {
        let mut settings = match cell {
            Some(c) => c.spec.settings.clone(),
            None => self.ctx.shared_settings.clone(),
        };
        if let Some(gate) = &self.artifacts.gate {
            let effective = &gate.effective;
            if let Some(calibration) = settings.calibration.as_mut() {
                calibration.nsamples = effective.nsamples;
                calibration.seqlen = effective.seqlen;
            }
            if let (Some(evaluation), Some(seqlen)) =
                (settings.evaluation.as_mut(), effective.eval_seqlen)
            {
                evaluation.seqlen = seqlen;
            }
        }
        settings
    }

    /// Windows a streamed evaluation runs through each layer together: the gate's choice (the
    /// evaluation's windows, halved where they do not fit), else
    /// [`crate::eval::perplexity::STREAMED_WINDOW_GROUP`].
    fn evaluation_group(&self) -> usize {
        self.artifacts
            .gate
            .as_ref()
            .map_or(crate::eval::perplexity::STREAMED_WINDOW_GROUP, |gate| {
                gate.effective.eval_group
            })
    }

    /// How calibration samples pass through the layers: [`prune::BATCH`] at a time on the
    /// device, unless the gate lowered the batch or moved the activations to the host to fit.
    fn calibration_batching(&self) -> Batching {
        match &self.artifacts.gate {
            Some(gate) => Batching {
                batch: gate.effective.batch,
                host_activations: gate.effective.activations_on_host,
            },
            None => Batching::from(prune::BATCH),
        }
    }

    /// The calibration draw of the last cell that calibrated (for `wanda prune`'s report).
    pub fn calibration(&self) -> Option<&CalibrationSet> {
        self.artifacts.calibration.as_ref()
    }

    /// The measured sparsity of the last pruned model, with every linear's counts (for `wanda
    /// prune`'s report: run records keep only the fractions).
    pub fn pruned_sparsity(&self) -> Option<&ModelSparsity> {
        self.artifacts.pruned.last().map(|(_, p)| &p.report)
    }

    /// The last perplexity measured (for `wanda prune`'s report).
    pub fn perplexity(&self) -> Option<&PerplexityReport> {
        self.artifacts.perplexity.as_ref()
    }

    /// Reports the progress of long stages to `progress(stage, done, total)`.
    pub fn with_progress(mut self, progress: impl Fn(&str, usize, usize) + 'static) -> Self {
        self.ctx.progress = Box::new(progress);
        self
    }

    /// Shows `report` what stages decide (the gate's table).
    pub fn with_report(mut self, report: impl Fn(&str) + 'static) -> Self {
        self.ctx.report = Box::new(report);
        self
    }

    /// Uses `budget` instead of the gate's own.
    pub fn with_budget(mut self, budget: Option<Budget>) -> Self {
        self.ctx.budget = budget;
        self
    }

    fn path(&self, p: &Path) -> PathBuf {
        self.ctx.base_dir.join(p)
    }

    /// SHA-256 of an input file, hashed once per run (and a large one's remembered between
    /// runs, [`crate::data::digest_cache`]).
    fn hash_of(&mut self, path: &Path) -> Result<String, StageError> {
        if let Some(hash) = self.hashes.files.get(path) {
            return Ok(hash.clone());
        }
        let hash = crate::data::digest_cache::sha256_file_remembered(path)
            .map_err(|e| StageError::read(path, e))?;
        self.hashes.files.insert(path.to_path_buf(), hash.clone());
        Ok(hash)
    }

    /// The hash of the model `settings` name, as run records keep it ([`load::ModelFiles`]);
    /// None for a hub model (its revision pins it).
    fn model_hash(&mut self, settings: &Settings) -> Result<Option<String>, StageFailure> {
        let origin = load::model_ref(settings, &self.ctx.base_dir)?;
        let Some(files) = load::ModelFiles::of(&origin)? else {
            return Ok(None);
        };
        let digests = files.missing_digests(&self.hashes.files)?;
        Ok(Some(self.model_hash_from(&files, digests)))
    }

    /// Waits for the model's hash the load stage began, if one is still being taken, and keeps
    /// it for the run records.
    fn settle_model_hash(&mut self) -> Result<(), StageError> {
        if let Some(pending) = self.hashes.pending_model.take() {
            let (files, digests) = pending.wait()?;
            self.hashes.recorded.model = Some(self.model_hash_from(&files, digests));
        }
        Ok(())
    }

    /// The model's hash once `digests` has every file's digest not hashed before.
    fn model_hash_from(
        &mut self,
        files: &load::ModelFiles,
        digests: Vec<(PathBuf, String)>,
    ) -> String {
        self.hashes.files.extend(digests);
        files.hash(&self.hashes.files)
    }

    fn base(&self, stage: &str) -> Result<&Loaded<Decoder<B>>, StageError> {
        self.artifacts
            .base
            .as_ref()
            .ok_or_else(|| StageError::Missing {
                stage: stage.to_string(),
                what: "a loaded model",
            })
    }

    /// The model a stage works on: the copy made by the last prune stage upstream of it, or
    /// the dense model when none is (e.g. a dense evaluation branch).
    fn current(&self, stage: &str, upstream: &[&StageNode]) -> Result<&Decoder<B>, StageError> {
        match self.pruned_upstream(stage, upstream)? {
            Some(pruned) => Ok(&pruned.model),
            None if self.artifacts.dense_taken => Err(StageError::Missing {
                stage: stage.to_string(),
                what: "the dense model (it was pruned in place)",
            }),
            None => Ok(&self.base(stage)?.model),
        }
    }

    /// The dense model for an in-place prune: its layers leave the base, which keeps its
    /// shell, config and tokenizer for the stages after.
    fn take_dense(&mut self, stage: &str) -> Result<Decoder<B>, StageError> {
        let base = self
            .artifacts
            .base
            .as_mut()
            .ok_or_else(|| StageError::Missing {
                stage: stage.to_string(),
                what: "a loaded model",
            })?;
        let mut shell = base.model.shell().clone();
        shell.layers.clear();
        self.artifacts.dense_taken = true;
        Ok(std::mem::replace(&mut base.model, Decoder::Resident(shell)))
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
        self.artifacts
            .pruned
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
        let settings = self.effective_settings(cell);
        match &node.options {
            StageOptions::Load(options) => load::run(self, &node.stage, options, &settings)?,
            StageOptions::Calibrate(_) => calibrate::run(self, &node.stage, &settings)?,
            StageOptions::Prune(options) => prune::run(self, node, upstream, options, record)?,
            StageOptions::Eval(options) => {
                eval::run(self, &node.stage, upstream, options, &settings, record)?
            }
            StageOptions::Save(options) => save::run(self, &node.stage, upstream, options, cell)?,
            StageOptions::Estimate(options) => {
                let specs = match cell {
                    Some(c) => vec![c.spec.clone()],
                    None => self.ctx.cell_specs.clone(),
                };
                estimate::run(self, &node.stage, options, &specs, record)?
            }
            StageOptions::Gate(options) => return gate::run(self, &node.stage, options),
        }
        Ok(StageOutcome::Continue)
    }

    fn changed_inputs(&mut self, cell: &Cell, record: &RunRecord) -> Option<String> {
        let settings = &cell.spec.settings;
        let mut changed = Vec::new();
        let mut compare = |what: String, recorded: &Option<String>, now: Option<String>| {
            if let (Some(old), Some(new)) = (recorded, now) {
                if *old != new {
                    changed.push(format!("{what} (sha256 {:.12} → {:.12})", old, new));
                }
            }
        };
        // An input that cannot be read now is left to the run itself to report.
        let model = self.model_hash(settings).ok().flatten();
        compare("the model".to_string(), &record.hashes.model, model);
        for (what, text, recorded) in [
            (
                "calibration text",
                settings.calibration.as_ref().and_then(|c| c.text.clone()),
                &record.hashes.calibration,
            ),
            (
                "evaluation text",
                settings.evaluation.as_ref().and_then(|e| e.text.clone()),
                &record.hashes.evaluation,
            ),
        ] {
            if let Some(text) = text {
                let path = self.path(&text);
                let now = self.hash_of(&path).ok();
                compare(format!("the {what} `{}`", path.display()), recorded, now);
            }
        }
        (!changed.is_empty()).then(|| changed.join(", "))
    }

    fn end_cell(&mut self, _cell: &Cell, record: &mut RunRecord) -> Result<(), StageFailure> {
        self.settle_model_hash()?;
        record.hashes.model = self.hashes.recorded.model.clone();
        Ok(())
    }

    fn begin_cell(&mut self, _cell: &Cell, record: &mut RunRecord) {
        // The previous cell's pruned copies are no longer needed; shared ones stay.
        self.artifacts
            .pruned
            .retain(|((_, cell), _)| cell.is_none());
        record.hashes = self.hashes.recorded.clone();
        record.data = self.hashes.data.clone();
        record.effective.device = self.ctx.choice.label();
        record.versions.burn = Some("0.21.0".to_string());
        record.memory.estimated_peak_bytes = self
            .artifacts
            .gate
            .as_ref()
            .map(|g| g.effective_peak)
            .or(self.artifacts.estimated.as_ref().map(|e| e.peak));
        if let Some(gate) = &self.artifacts.gate {
            let effective = &gate.effective;
            record.effective.eval_seqlen = effective.eval_seqlen;
            record.effective.streaming = effective.streaming;
            record.effective.gate = Some(if gate.steps.is_empty() {
                "fits as requested".to_string()
            } else {
                gate.steps
                    .iter()
                    .map(|s| format!("{} {} → {} ({})", s.key, s.from, s.to, s.reason))
                    .collect::<Vec<_>>()
                    .join("; ")
            });
        }
        if let Some(c) = &self.artifacts.calibration {
            record.effective.nsamples = Some(c.windows.len());
            record.effective.seqlen = Some(c.seqlen);
            record.metrics.other.insert(
                "calibration_offsets_hash".into(),
                c.offsets_hash.clone().into(),
            );
        }
    }
}
