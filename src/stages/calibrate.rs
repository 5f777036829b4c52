//! `calibrate`: read the calibration data (a text file, or a data set from the hub by its
//! reference protocol) and draw the seeded windows (as many and as long as the effective
//! settings say: the gate's, where one ran).

use burn::prelude::Backend;

use super::{PipelineExecutor, StageError};
use crate::data::calibration::{self, CalibrationSet};
use crate::data::hub::HubRequest;
use crate::data::read_tokenized;
use crate::data::sets::{self, DataSource};
use crate::pipeline::runner::StageFailure;
use crate::pipeline::spec::{CalibrationSpec, Settings};

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
    exec.artifacts.calibration = Some(windows(
        exec,
        stage,
        spec,
        spec.nsamples,
        spec.seqlen,
        settings.seed,
    )?);
    Ok(())
}

/// `nsamples` windows of `seqlen` tokens of `spec`'s data, drawn with `seed`; the input's hash
/// (and, for hub data, its provenance) is kept for run records.
pub(super) fn windows<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    stage: &str,
    spec: &CalibrationSpec,
    nsamples: usize,
    seqlen: usize,
    seed: u64,
) -> Result<CalibrationSet, StageFailure> {
    let config = &exec.base(stage)?.config;
    if config.extras.learned_positions && seqlen > config.max_position_embeddings {
        return Err(StageError::PastPositions {
            stage: stage.to_string(),
            seqlen,
            max: config.max_position_embeddings,
        }
        .into());
    }
    Ok(match spec.source()? {
        DataSource::Text(text) => {
            let path = exec.path(&text);
            exec.hashes.recorded.calibration = Some(exec.hash_of(&path)?);
            let ids = read_tokenized(&path, &exec.base(stage)?.tokenizer)?;
            calibration::draw(&ids, nsamples, seqlen, seed)?
        }
        source => {
            let tokenizer = &exec.base(stage)?.tokenizer;
            let (set, provenance) = sets::calibration_set(
                &source,
                tokenizer,
                (nsamples, seqlen, seed),
                &HubRequest::default(),
            )?;
            exec.hashes.recorded.calibration = Some(provenance.digest());
            exec.hashes.data.calibration = Some(provenance);
            set
        }
    })
}
