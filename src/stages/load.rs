//! `load`: the model from the pipeline's `model:` onto the device (or, when a gate follows,
//! opened for streaming until the gate decides), and its hash.

use burn::prelude::Backend;

use super::PipelineExecutor;
use crate::model::stream::Decoder;
use crate::model::{self, ModelRef};
use crate::pipeline::runner::StageFailure;
use crate::pipeline::spec::{LoadOptions, LoadVerify, Settings};

/// The model `settings` name, its paths resolved against `base_dir` (the pipeline's folder).
pub fn model_ref(
    settings: &Settings,
    base_dir: &std::path::Path,
) -> Result<ModelRef, crate::pipeline::Problem> {
    Ok(settings.model.source()?.resolved_against(base_dir))
}

pub(super) fn run<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    _stage: &str,
    options: &LoadOptions,
    settings: &Settings,
) -> Result<(), StageFailure> {
    exec.artifacts.verify_layers = options.verify == LoadVerify::Full;
    let origin = model_ref(settings, &exec.ctx.base_dir)?;
    exec.hashes.recorded.model = exec.model_hash(settings)?;
    // With a gate ahead, the layers stay in the checkpoint until it decides whether the run
    // streams them (reading them now would already take the memory it may not have).
    exec.artifacts.base = Some(if exec.ctx.gated {
        model::load_streamed::<B>(&origin, &exec.ctx.device, &exec.ctx.results_dir)?
            .map_model(Decoder::Streamed)
    } else {
        model::load::<B>(&origin, &exec.ctx.device)?.map_model(Decoder::Resident)
    });
    Ok(())
}
