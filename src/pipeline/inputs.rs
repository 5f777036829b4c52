//! The hub inputs of a plan — models (config, tokenizer, weights) and data-set files — fetched
//! into the cache ahead of time (`wanda fetch`, for clusters whose compute nodes are offline),
//! or checked to be cached before an offline run starts a cell.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::plan::Plan;
use super::spec::{EvalOptions, StageOptions};
use crate::data::hub::{self, HubError, HubRequest, RepoKind};
use crate::data::sets::{self, DataError, DataSource, Role};
use crate::model::ModelRef;

/// One repository a plan reads from the hub.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HubInput {
    /// What it is for: `model`, `calibration (c4)`, `evaluation (wikitext2)`.
    pub what: String,
    /// Model or data set.
    pub kind: InputKind,
    /// The repository.
    pub repo: String,
    /// The revision.
    pub revision: String,
}

/// What kind of repository an input is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum InputKind {
    /// A model: everything a model folder needs.
    Model,
    /// A data set: exactly these files, and the column whose document store runs read.
    Data(Vec<String>, Option<String>),
}

/// A repository resolved into the cache.
#[derive(Debug, Clone)]
pub struct CachedInput {
    /// Its files in the cache and their sizes.
    pub files: Vec<(String, PathBuf, u64)>,
}

/// Why the inputs could not be listed or fetched.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A data set's files could not be listed.
    #[error("{what}: {source}")]
    Data {
        /// The input.
        what: String,
        /// The cause.
        #[source]
        source: Box<DataError>,
    },
    /// Fetching from the hub (or, offline, finding in the cache) failed.
    #[error("{what}: {source}")]
    Hub {
        /// The input.
        what: String,
        /// The cause.
        #[source]
        source: Box<HubError>,
    },
}

/// Calls `each` with every hub repository the cells of `plan` read, once each, cell by cell
/// (model, zero-shot tasks, calibration, evaluation), as soon as it is known — or with the error that kept a
/// data set's files from being listed. Stops at the first error `each` returns. `hub` says how
/// to reach the hub (listing a split's files needs it, or a cached snapshot offline).
pub fn for_each_input(
    plan: &Plan,
    hub: &HubRequest,
    mut each: impl FnMut(Result<&HubInput, InputError>) -> Result<(), InputError>,
) -> Result<(), InputError> {
    let (mut seen, mut failed) = (BTreeSet::new(), BTreeSet::new());
    for cell in &plan.cells {
        let settings = &cell.spec.settings;
        if let Ok(ModelRef::Hub { repo_id, revision }) = settings.model.source() {
            let input = HubInput {
                what: "model".into(),
                kind: InputKind::Model,
                repo: repo_id,
                revision,
            };
            if seen.insert(input.clone()) {
                each(Ok(&input))?;
            }
        }
        let sources = [
            (
                "calibration",
                Role::Calibration,
                settings.calibration.as_ref().map(|c| c.source()),
            ),
            (
                "evaluation",
                Role::Evaluation,
                settings.evaluation.as_ref().map(|e| e.source()),
            ),
        ];
        // Zero-shot task data read from the hub (not from a local `data:` folder).
        let tasks = cell
            .spec
            .stages
            .iter()
            .filter_map(|stage| match &stage.options {
                StageOptions::Eval(EvalOptions {
                    zeroshot: Some(z), ..
                }) if z.data.is_none() => Some(&z.tasks),
                _ => None,
            });
        for task in tasks.flatten() {
            let data = task.data();
            let what = format!("zero-shot ({})", task.name());
            match sets::split_files(data.repo, data.config, data.split, hub) {
                Ok(needed) => {
                    let input = HubInput {
                        what,
                        kind: InputKind::Data(needed.files, None),
                        repo: needed.repo,
                        revision: needed.revision,
                    };
                    if seen.insert(input.clone()) {
                        each(Ok(&input))?;
                    }
                }
                Err(source) if failed.insert(what.clone()) => each(Err(InputError::Data {
                    what,
                    source: Box::new(source),
                }))?,
                Err(_) => {}
            }
        }
        for (section, role, source) in sources {
            let Some(Ok(source)) = source else { continue };
            let label = match &source {
                DataSource::Text(_) => continue,
                DataSource::Named(name) => name.as_str().to_owned(),
                DataSource::Hub(data) => data.repo.clone(),
            };
            let what = format!("{section} ({label})");
            match sets::needed_files(&source, role, hub) {
                Ok(Some(needed)) => {
                    let input = HubInput {
                        what,
                        kind: InputKind::Data(needed.files, needed.documents),
                        repo: needed.repo,
                        revision: needed.revision,
                    };
                    if seen.insert(input.clone()) {
                        each(Ok(&input))?;
                    }
                }
                Ok(None) => {}
                // Reported once, however many cells read the data set.
                Err(source) if failed.insert(what.clone()) => each(Err(InputError::Data {
                    what,
                    source: Box::new(source),
                }))?,
                Err(_) => {}
            }
        }
    }
    Ok(())
}

/// Resolves `input` into the cache as `hub` says (downloading unless offline); with
/// `build_stores`, also builds the document stores its protocol reads (C4's), so runs find
/// them ready.
pub fn fetch_input(
    input: &HubInput,
    hub: &HubRequest,
    build_stores: bool,
) -> Result<CachedInput, InputError> {
    let request = HubRequest {
        repo_id: input.repo.clone(),
        revision: input.revision.clone(),
        kind: match input.kind {
            InputKind::Model => RepoKind::Model,
            InputKind::Data(..) => RepoKind::Dataset,
        },
        ..hub.clone()
    };
    let failed = |source| InputError::Hub {
        what: input.what.clone(),
        source: Box::new(source),
    };
    let files: Vec<(String, PathBuf)> = match &input.kind {
        InputKind::Model => {
            let folder = hub::fetch_model(&request).map_err(failed)?;
            let mut names: Vec<(String, PathBuf)> = std::fs::read_dir(&folder)
                .map_err(|source| {
                    failed(HubError::Read {
                        path: folder.clone(),
                        source,
                    })
                })?
                .flatten()
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .collect();
            names.sort();
            names
        }
        InputKind::Data(names, documents) => {
            let files: Vec<(String, PathBuf)> = names
                .iter()
                .cloned()
                .zip(hub::fetch_files(&request, names).map_err(failed)?)
                .collect();
            if let Some(column) = documents.as_ref().filter(|_| build_stores) {
                for (name, path) in &files {
                    sets::prepare_documents(path, name, column).map_err(|source| {
                        InputError::Data {
                            what: input.what.clone(),
                            source: Box::new(source),
                        }
                    })?;
                }
            }
            files
        }
    };
    Ok(CachedInput {
        files: files
            .into_iter()
            .map(|(name, path)| {
                let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
                (name, path, bytes)
            })
            .collect(),
    })
}

/// With `HF_HUB_OFFLINE` on, the first hub input of `plan` that is not in the cache, as an
/// error naming the file; `Ok` when every input is cached or the hub is online. Only looks:
/// a missing document store is left to the stage that reads it.
pub fn check_offline(plan: &Plan) -> Result<(), InputError> {
    if !hub::offline_from_environment() {
        return Ok(());
    }
    let offline = HubRequest {
        offline: true,
        ..HubRequest::default()
    };
    for_each_input(plan, &offline, |input| {
        fetch_input(input?, &offline, false).map(drop)
    })
}
