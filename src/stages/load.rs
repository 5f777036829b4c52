//! `load`: the model from the pipeline's `model:` onto the device (or, when a gate follows,
//! opened for streaming until the gate decides), and its hash.

use std::collections::HashMap;
use std::path::PathBuf;

use burn::prelude::Backend;
use rayon::prelude::*;

use super::{PipelineExecutor, StageError};
use crate::model::checkpoint::Decoder;
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
    // An earlier load stage's hash, if one is still being taken, is settled first.
    exec.settle_model_hash()?;
    // The checkpoint is hashed on a thread of its own, which the run record waits for only when
    // the cell ends: both read the same pages, and neither the load nor the pruning waits for
    // one core's SHA-256 (1.4 GB/s: a 2 GB shard takes longer than a 1B model's whole load).
    exec.hashes.recorded.model = None;
    exec.hashes.pending_model =
        ModelFiles::of(&origin)?.map(|files| PendingHash::start(files, exec.hashes.files.clone()));
    let ctx = &exec.ctx;
    // With a gate ahead, the layers stay in the checkpoint until it decides whether the run
    // streams them (reading them now would already take the memory it may not have).
    let base = if ctx.gated {
        model::load_streamed::<B>(&origin, &ctx.device, &ctx.results_dir)
            .map(|loaded| loaded.map_model(Decoder::Streamed))
    } else {
        model::load::<B>(&origin, &ctx.device).map(|loaded| loaded.map_model(Decoder::Resident))
    };
    exec.artifacts.base = Some(base?);
    Ok(())
}

/// A model's files and the digests a thread took of those not known before.
type Hashed = (ModelFiles, Vec<(PathBuf, String)>);

/// A model's files being hashed on a thread of their own ([`ModelFiles::missing_digests`]).
pub(super) struct PendingHash(std::thread::JoinHandle<Result<Hashed, StageError>>);

impl PendingHash {
    /// Starts hashing the files of `files` that `known` has no digest for.
    fn start(files: ModelFiles, known: HashMap<PathBuf, String>) -> Self {
        Self(std::thread::spawn(move || {
            let digests = files.missing_digests(&known)?;
            Ok((files, digests))
        }))
    }

    /// The files and the digests taken, once the thread has finished.
    pub(super) fn wait(self) -> Result<Hashed, StageError> {
        self.0
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// The files a model's hash covers: a GGUF file, or a folder's `config.json` and safetensors
/// files in name order. The hash is the GGUF file's SHA-256, or a folder's over its files'
/// names and digests ([`crate::data::hash::FilesHasher`]).
pub(super) struct ModelFiles {
    files: Vec<PathBuf>,
    folder: bool,
}

impl ModelFiles {
    /// The files of the model `origin`; None for a hub model (its revision pins it).
    pub(super) fn of(origin: &ModelRef) -> Result<Option<Self>, StageError> {
        Ok(match origin {
            ModelRef::Gguf(path) => Some(Self {
                files: vec![path.clone()],
                folder: false,
            }),
            ModelRef::Folder(dir) => {
                let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                    .map_err(|e| StageError::read(dir, e))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                        name == "config.json" || name.ends_with(".safetensors")
                    })
                    .collect();
                files.sort();
                Some(Self {
                    files,
                    folder: true,
                })
            }
            ModelRef::Hub { .. } => None,
        })
    }

    /// The SHA-256 of each file `known` lacks. A large checkpoint's shards are hashed in
    /// parallel (one core hashes SHA-256 slower than the disk reads), and an unchanged file's
    /// digest is remembered between runs ([`crate::data::digest_cache`]).
    pub(super) fn missing_digests(
        &self,
        known: &HashMap<PathBuf, String>,
    ) -> Result<Vec<(PathBuf, String)>, StageError> {
        self.files
            .par_iter()
            .filter(|f| !known.contains_key(*f))
            .map(
                |f| match crate::data::digest_cache::sha256_file_remembered(f) {
                    Ok(hash) => Ok((f.clone(), hash)),
                    Err(e) => Err(StageError::read(f, e)),
                },
            )
            .collect()
    }

    /// The model's hash, `digests` holding every file's.
    pub(super) fn hash(&self, digests: &HashMap<PathBuf, String>) -> String {
        let digest = |f: &PathBuf| digests[f].clone();
        if !self.folder {
            return digest(&self.files[0]);
        }
        let mut hasher = crate::data::hash::FilesHasher::default();
        for file in &self.files {
            hasher.add(file, &digest(file));
        }
        hasher.finish()
    }
}
