//! `calibrate`: tokenise the calibration text and draw the seeded windows (as many and as
//! long as the gate allowed, where one ran).

use burn::prelude::Backend;

use super::{PipelineExecutor, StageError};
use crate::data::calibration;
use crate::pipeline::runner::StageFailure;
use crate::pipeline::spec::Settings;

pub(super) fn run<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    stage: &str,
    settings: &Settings,
) -> Result<(), StageFailure> {
    let spec = settings
        .calibration
        .as_ref()
        .ok_or_else(|| StageError::Missing {
            stage: stage.to_string(),
            what: "a `calibration:` section",
        })?;
    let path = exec.path(&spec.text);
    let read = |source| StageError::Read {
        path: path.display().to_string(),
        source,
    };
    let text = std::fs::read_to_string(&path).map_err(read)?;
    exec.hashes.calibration = Some(exec.hash_of(&path).map_err(read)?);
    let ids = exec.base(stage)?.tokenizer.encode(&text)?;
    // The gate's effective sizes where a gate ran.
    let (nsamples, seqlen) = exec
        .gate
        .as_ref()
        .map_or((spec.nsamples, spec.seqlen), |g| {
            (g.effective.nsamples, g.effective.seqlen)
        });
    exec.calibration = Some(calibration::draw(&ids, nsamples, seqlen, settings.seed)?);
    Ok(())
}
