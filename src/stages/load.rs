//! `load`: the model from the pipeline's `model:` onto the device, and its hash.

use burn::prelude::Backend;

use super::{PipelineExecutor, StageError};
use crate::data::hash::{sha256_file, sha256_files};
use crate::model::{self, ModelRef};
use crate::pipeline::runner::StageFailure;
use crate::pipeline::spec::{ModelSource, Settings};

/// The model `settings` name, its paths resolved against `base_dir` (the pipeline's folder).
pub fn model_ref(
    settings: &Settings,
    base_dir: &std::path::Path,
) -> Result<ModelRef, crate::pipeline::Problem> {
    Ok(match settings.model.source()? {
        ModelSource::Gguf(p) => ModelRef::Gguf(base_dir.join(p)),
        ModelSource::Folder(p) => ModelRef::Folder(base_dir.join(p)),
        ModelSource::Hub { id, revision } => ModelRef::Hub {
            repo_id: id,
            revision: revision.unwrap_or_else(|| "main".to_string()),
        },
    })
}

pub(super) fn run<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    _stage: &str,
    settings: &Settings,
) -> Result<(), StageFailure> {
    let origin = model_ref(settings, &exec.base_dir)?;
    let read = |path: &std::path::Path, source| StageError::Read {
        path: path.display().to_string(),
        source,
    };
    exec.hashes.model = match &origin {
        ModelRef::Gguf(p) => Some(sha256_file(p).map_err(|e| read(p, e))?),
        ModelRef::Folder(dir) => {
            let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
                .map_err(|e| read(dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                    name == "config.json" || name.ends_with(".safetensors")
                })
                .collect();
            files.sort();
            let refs: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
            Some(sha256_files(&refs).map_err(|e| read(dir, e))?)
        }
        ModelRef::Hub { .. } => None,
    };
    exec.base = Some(model::load::<B>(&origin, &exec.device)?);
    Ok(())
}
