//! `estimate`: the run's predicted peak memory from the loaded model's config and the
//! settings of the cells it serves (the largest when it serves several); with `probe: true`
//! the pruning of the first two layers also runs for real and its measured peak is recorded.

use burn::prelude::Backend;

use super::probe::probe_prune;
use super::{PipelineExecutor, StageError};
use crate::data::sets::{DataSource, Role};
use crate::eval::perplexity::STREAMED_WINDOW_GROUP;
use crate::memory::device::DeviceChoice;
use crate::memory::estimate::{estimate_prune, PruneRun};
use crate::model::arch::{ModelShape, Place};
use crate::pipeline::record::RunRecord;
use crate::pipeline::runner::StageFailure;
use crate::pipeline::spec::{EstimateOptions, EvalOptions, PipelineSpec, StageOptions};

/// Layers a probe prunes.
const PROBE_LAYERS: usize = 2;

/// The estimate the gate works from.
pub(super) struct Estimated {
    pub shape: ModelShape,
    pub run: PruneRun,
    /// The estimated peak of `run`.
    pub peak: u64,
}

pub(super) fn run<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    stage: &str,
    options: &EstimateOptions,
    specs: &[PipelineSpec],
    record: &mut RunRecord,
) -> Result<(), StageFailure> {
    let base = exec.base(stage)?;
    let shape = ModelShape::from_config(&base.config).with_parameters(base.parameter_count);
    let mut largest: Option<(u64, PruneRun)> = None;
    let device = exec.ctx.choice;
    for spec in specs {
        let run = requested_run(spec, &exec.ctx.base_dir, device, !exec.ctx.in_place)?;
        let peak = estimate_prune(&shape, &run).peak(Place::Device).1;
        if largest.as_ref().is_none_or(|(p, _)| peak > *p) {
            largest = Some((peak, run));
        }
    }
    let Some((peak, run)) = largest else {
        return Err(StageError::Missing {
            stage: stage.to_string(),
            what: "a cell to estimate",
        }
        .into());
    };
    record.memory.estimated_peak_bytes = Some(peak);
    if options.probe {
        if let (Some(calib), Some(method)) = (&specs[0].settings.calibration, run.method) {
            let seed = specs[0].settings.seed;
            let set =
                super::calibrate::windows(exec, stage, calib, run.nsamples, run.seqlen, seed)?;
            let measured = probe_prune(
                &exec.base(stage)?.model,
                method,
                &run.method_options(),
                &set.windows,
                run.batch,
                PROBE_LAYERS,
            )?;
            if let Some(bytes) = measured {
                record
                    .metrics
                    .other
                    .insert("probe_peak_rss_bytes".into(), bytes.into());
            }
        }
    }
    exec.artifacts.estimated = Some(Estimated { shape, run, peak });
    Ok(())
}

/// The settings of `spec` (a pipeline file in `base_dir`) as the estimator sees them, on
/// `device`; `keeps_dense_copy` when the dense model stays loaded beside the pruned copy (other
/// cells or stages read it: not [`crate::pipeline::plan::Plan::prunes_in_place`]).
pub fn requested_run(
    spec: &PipelineSpec,
    base_dir: &std::path::Path,
    device: DeviceChoice,
    keeps_dense_copy: bool,
) -> Result<PruneRun, StageError> {
    let settings = &spec.settings;
    let prune = spec.stages.iter().find_map(|s| match &s.options {
        StageOptions::Prune(p) => Some(p),
        _ => None,
    });
    let method = prune.map(|p| p.method);
    let size = |path: Option<&std::path::Path>| -> Result<u64, StageError> {
        let Some(path) = path else { return Ok(0) };
        size_of(base_dir, path)
    };
    let text_bytes = |source: Option<Result<DataSource, _>>, role| -> Result<u64, StageError> {
        match source {
            Some(Ok(DataSource::Text(path))) => size_of(base_dir, &path),
            Some(Ok(other)) => Ok(other.typical_text_bytes(role).unwrap_or(0)),
            // Checked before any stage runs.
            Some(Err(_)) | None => Ok(0),
        }
    };
    let model = &settings.model;
    let checkpoint = match (&model.gguf, &model.path) {
        (Some(file), _) => size(Some(file))?,
        (None, Some(folder)) => {
            crate::model::inspect(&crate::model::ModelRef::Folder(base_dir.join(folder)))
                .map_or(0, |(_, bytes)| bytes)
        }
        (None, None) => 0,
    };
    Ok(PruneRun {
        method,
        nsamples: settings.calibration.as_ref().map_or(0, |c| c.nsamples),
        seqlen: settings.calibration.as_ref().map_or(0, |c| c.seqlen),
        batch: super::prune::BATCH,
        eval_seqlen: settings.evaluation.as_ref().map(|e| e.seqlen),
        keeps_dense_copy,
        streaming: false,
        checkpoint_bytes: checkpoint,
        calibration_text_bytes: text_bytes(
            settings.calibration.as_ref().map(|c| c.source()),
            Role::Calibration,
        )?,
        eval_text_bytes: text_bytes(
            settings.evaluation.as_ref().map(|e| e.source()),
            Role::Evaluation,
        )?,
        device: device.kind,
        precision: device.precision,
        activations_on_host: false,
        gpu_memory: device.gpu_total_memory(),
        owl: prune.is_some_and(|p| p.profile.owl().is_some()),
        dsnot: prune.is_some_and(|p| p.dsnot.is_some()),
        weight_update: prune.and_then(|p| p.weight_update),
        zeroshot: spec.stages.iter().any(|s| {
            matches!(
                &s.options,
                StageOptions::Eval(EvalOptions {
                    zeroshot: Some(_),
                    ..
                })
            )
        }),
        // Every window in one group, so that a streamed evaluation reads each layer once; all
        // windows of the text (`windows` unset) are only counted once the text is read.
        eval_group: settings
            .evaluation
            .as_ref()
            .and_then(|e| e.windows)
            .unwrap_or(STREAMED_WINDOW_GROUP),
        expert_removal: spec.stages.iter().find_map(|s| match &s.options {
            StageOptions::Prune(p) if p.method.removes_experts() => p.experts,
            _ => None,
        }),
    })
}

/// The size of file `path` (relative to `base_dir`).
fn size_of(base_dir: &std::path::Path, path: &std::path::Path) -> Result<u64, StageError> {
    let path = base_dir.join(path);
    std::fs::metadata(&path)
        .map(|m| m.len())
        .map_err(|source| StageError::read(&path, source))
}
