//! `calibrate`: tokenise the calibration text and draw the seeded windows (as many and as
//! long as the effective settings say: the gate's, where one ran).

use burn::prelude::Backend;

use super::{PipelineExecutor, StageError};
use crate::data::{calibration, read_tokenized};
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
    exec.hashes.recorded.calibration = Some(exec.hash_of(&path).map_err(read)?);
    let ids = read_tokenized(&path, &exec.base(stage)?.tokenizer)?;
    exec.artifacts.calibration = Some(calibration::draw(
        &ids,
        spec.nsamples,
        spec.seqlen,
        settings.seed,
    )?);
    Ok(())
}
