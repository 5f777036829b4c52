//! Fetching from the Hugging Face hub: model checkpoints ([`fetch_model`]) and the files of
//! data-set repositories ([`fetch_files`], [`list_files`]).
//!
//! [`fetch_model`] materialises what the rest of the project reads from a model
//! folder (`config.json`, `tokenizer.json`, the optional tokenizer and
//! generation configs, and the safetensors weights, single-file or sharded
//! through `model.safetensors.index.json`) in the standard hub cache, and
//! returns the snapshot folder that holds them, so callers load it exactly like
//! a local Hugging Face folder.
//!
//! Settings follow the `huggingface_hub` conventions, as `hf-hub` does:
//!
//! * cache: [`HubRequest::cache_dir`], else `$HF_HOME/hub`, else
//!   `~/.cache/huggingface/hub`;
//! * endpoint: [`HubRequest::endpoint`], else `HF_ENDPOINT`, else
//!   [`DEFAULT_ENDPOINT`];
//! * token: `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`, else the token file
//!   `$HF_HOME/token` written by `huggingface-cli login`;
//! * offline mode: [`HubRequest::offline`] or `HF_HUB_OFFLINE=1`, in which case
//!   files are resolved from the cache alone and nothing touches the network.
//!
//! Files already in the cache for the requested revision are reused without a
//! network request, and files the hub does not have are remembered in
//! `.no_exist/{commit}/` markers as `huggingface_hub` does, so a fully cached
//! model loads without the network even online. A cached branch is not checked
//! for newer commits: pin a commit as the revision, or clear the cache, to
//! move on. The access token is sent to the hub but never kept in an
//! error, a `Debug` output or a log line: download failures carry the
//! repository, the file and the HTTP status or connection cause, nothing more.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use hf_hub::api::sync::{ApiBuilder, ApiError, ApiRepo};
use hf_hub::{Cache, CacheRepo, Repo, RepoType};
use thiserror::Error;

/// The hub's address when neither the request nor `HF_ENDPOINT` names one.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The revision fetched when a request leaves it empty.
pub const DEFAULT_REVISION: &str = "main";

/// The model configuration, required.
const CONFIG: &str = "config.json";
/// The tokenizer, required unless the slow tokenizer's two files stand in for it.
const TOKENIZER: &str = "tokenizer.json";
/// The slow GPT-2 style tokenizer's files, fetched where there is no [`TOKENIZER`] (OPT's hub
/// repositories ship only these).
const SLOW_TOKENIZER: [&str; 2] = ["vocab.json", "merges.txt"];
/// Fetched when the repository has them, skipped silently otherwise.
const OPTIONAL_FILES: [&str; 3] = [
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
];
/// Single-file weights, preferred when present.
const SINGLE_WEIGHTS: &str = "model.safetensors";
/// The shard index used when there are no single-file weights.
const WEIGHT_INDEX: &str = "model.safetensors.index.json";
/// How often `hf-hub` resumes an interrupted file body before giving up.
const DOWNLOAD_RETRIES: usize = 3;

/// What to fetch from the hub and where to keep it. The default is an empty repository id at
/// [`DEFAULT_REVISION`] with every setting taken from the environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HubRequest {
    /// The repository id, `name` or `org/name` (for example `meta-llama/Llama-2-7b-hf`).
    pub repo_id: String,
    /// The branch, tag or commit to fetch; an empty string means [`DEFAULT_REVISION`].
    pub revision: String,
    /// The hub cache folder; `$HF_HOME/hub` (default `~/.cache/huggingface/hub`) when `None`.
    pub cache_dir: Option<PathBuf>,
    /// The hub address; `HF_ENDPOINT`, else [`DEFAULT_ENDPOINT`], when `None`.
    pub endpoint: Option<String>,
    /// Resolve from the cache only; also on when `HF_HUB_OFFLINE` is set to a true value.
    pub offline: bool,
    /// A model repository (the default) or a data-set repository.
    pub kind: RepoKind,
}

/// The two kinds of hub repository this project reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RepoKind {
    /// `huggingface.co/{org}/{name}`, cached in `models--{org}--{name}`.
    #[default]
    Model,
    /// `huggingface.co/datasets/{org}/{name}`, cached in `datasets--{org}--{name}`.
    Dataset,
}

impl HubRequest {
    /// A request for `repo_id` at [`DEFAULT_REVISION`], with the default cache and endpoint, online.
    pub fn new(repo_id: impl Into<String>) -> Self {
        Self {
            repo_id: repo_id.into(),
            revision: DEFAULT_REVISION.to_owned(),
            cache_dir: None,
            endpoint: None,
            offline: false,
            kind: RepoKind::Model,
        }
    }
}

/// Why fetching a model from the hub failed.
#[derive(Debug, Error)]
pub enum HubError {
    /// The repository id or the revision is malformed.
    #[error("invalid hub request: {reason}")]
    InvalidRequest {
        /// What is wrong with the request.
        reason: String,
    },

    /// No cache folder was given and none could be derived.
    #[error("cannot locate the hub cache: set `HF_HOME` or pass a cache folder")]
    NoCacheDir,

    /// A required file does not exist in the repository at this revision.
    #[error("`{file}` was not found in `{repo}` at revision `{revision}`")]
    MissingFile {
        /// The repository id.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// The file that is missing.
        file: String,
    },

    /// The repository has neither single-file nor sharded safetensors weights.
    #[error(
        "`{repo}` at revision `{revision}` has neither `model.safetensors` nor `model.safetensors.index.json`"
    )]
    MissingWeights {
        /// The repository id.
        repo: String,
        /// The revision asked for.
        revision: String,
    },

    /// Downloading a file failed.
    #[error("cannot download `{file}` from `{repo}`")]
    Download {
        /// The repository id.
        repo: String,
        /// The file being downloaded.
        file: String,
        /// The HTTP status or connection cause, without request headers.
        #[source]
        source: TransferError,
    },

    /// Offline mode is on and a needed file is not in the local cache.
    #[error(
        "`{file}` of `{repo}` at revision `{revision}` is not in the local cache and offline mode is on"
    )]
    Offline {
        /// The repository id.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// The file that is not cached.
        file: String,
    },

    /// Offline mode is on and no snapshot of the repository is cached to list its files.
    #[error(
        "no snapshot of `{repo}` at revision `{revision}` is in the local cache (its file list comes from there) and offline mode is on"
    )]
    OfflineListing {
        /// The repository id.
        repo: String,
        /// The revision asked for.
        revision: String,
    },

    /// The shard index is malformed or names files that are not plain shard names.
    #[error("bad `model.safetensors.index.json` in `{repo}`: {reason}")]
    BadIndex {
        /// The repository id.
        repo: String,
        /// What is wrong with the index.
        reason: String,
    },

    /// A downloaded file does not match the SHA-256 the hub announced for it.
    #[error("`{file}` from `{repo}` does not match the hub's SHA-256 (announced {expected}, received {actual}); the download was removed from the cache, run again to download it anew")]
    Corrupt {
        /// The repository id.
        repo: String,
        /// The file.
        file: String,
        /// The SHA-256 the hub announced (the LFS object id).
        expected: String,
        /// The SHA-256 of what arrived.
        actual: String,
    },

    /// A cached file could not be read.
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying i/o error.
        #[source]
        source: std::io::Error,
    },

    /// A file landed in a different snapshot than `config.json`.
    #[error(
        "`{file}` of `{repo}` resolved to a different snapshot than `config.json`; the revision moved during the download, try again"
    )]
    SnapshotMismatch {
        /// The repository id.
        repo: String,
        /// The file in the other snapshot.
        file: String,
    },

    /// The HTTP client could not be set up.
    #[error("cannot set up the hub client")]
    Client {
        /// The cause, without request headers.
        #[source]
        source: TransferError,
    },
}

/// The cause of a failed transfer, stripped of request headers and credentials.
#[derive(Debug, Error)]
pub enum TransferError {
    /// The server answered with an HTTP error status.
    #[error("the server answered http status {status}{hint}", hint = status_hint(*status))]
    Status {
        /// The HTTP status code.
        status: u16,
    },

    /// The connection failed (name resolution, tcp, tls, proxy).
    #[error("connection failed: {message}")]
    Transport {
        /// What the HTTP client reported, with any credential removed.
        message: String,
    },

    /// The answer lacked what the hub protocol requires, or the cache was busy.
    #[error("unexpected answer: {message}")]
    Protocol {
        /// What was wrong, with any credential removed.
        message: String,
    },

    /// Writing into the cache failed.
    #[error("cache i/o failed")]
    Io(#[source] std::io::Error),
}

/// A short explanation of common hub statuses, appended to [`TransferError::Status`].
fn status_hint(status: u16) -> &'static str {
    match status {
        401 => " (the repository does not exist, or it is private or gated and needs a valid `HF_TOKEN`)",
        403 => " (access denied: accept the repository's terms on the hub or use a token that has access)",
        404 => " (not found)",
        429 => " (rate limited, try again later)",
        500..=599 => " (server error, try again later)",
        _ => "",
    }
}

/// Materialises `req` in the hub cache and returns the snapshot folder holding its files.
///
/// The token comes from `HF_TOKEN` (or `HUGGING_FACE_HUB_TOKEN`, or the
/// `huggingface-cli login` token file); see [`fetch_model_with_token`] to pass one explicitly.
pub fn fetch_model(req: &HubRequest) -> Result<PathBuf, HubError> {
    let env = Environment::from_process();
    let token = env.token();
    fetch_with(req, &env, token.as_deref(), false)
}

/// Materialises only `config.json` of `req` (for memory estimates) and returns its path.
pub fn fetch_config(req: &HubRequest) -> Result<PathBuf, HubError> {
    let env = Environment::from_process();
    let token = env.token();
    fetch_with(req, &env, token.as_deref(), true).map(|folder| folder.join(CONFIG))
}

/// Like [`fetch_model`], with an explicit access token (`None`: anonymous) instead of the environment's.
pub fn fetch_model_with_token(req: &HubRequest, token: Option<&str>) -> Result<PathBuf, HubError> {
    fetch_with(req, &Environment::from_process(), token, false)
}

/// What the process environment contributes to a fetch, read once so tests can supply their own.
#[derive(Debug, Clone)]
struct Environment {
    /// `$HF_HOME`, else `~/.cache/huggingface`.
    hf_home: Option<PathBuf>,
    /// `$HF_ENDPOINT`.
    endpoint: Option<String>,
    /// `$HF_HUB_OFFLINE` is set to a true value.
    offline: bool,
    /// Whether to draw download progress bars (stderr is a terminal).
    progress: bool,
}

impl Environment {
    /// Reads the hub settings from the process environment.
    fn from_process() -> Self {
        let hf_home = env_var("HF_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::home_dir().map(|home| home.join(".cache").join("huggingface")));
        Self {
            hf_home,
            endpoint: env_var("HF_ENDPOINT"),
            offline: env_var("HF_HUB_OFFLINE").is_some_and(|value| is_truthy(&value)),
            progress: std::io::stderr().is_terminal(),
        }
    }

    /// The access token from `HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN` or `$HF_HOME/token`.
    fn token(&self) -> Option<String> {
        env_var("HF_TOKEN")
            .or_else(|| env_var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| {
                let text = std::fs::read_to_string(self.hf_home.as_ref()?.join("token")).ok()?;
                non_empty(&text)
            })
    }
}

/// The trimmed value of environment variable `name`, if set and not blank.
fn env_var(name: &str) -> Option<String> {
    non_empty(&std::env::var(name).ok()?)
}

/// `text` trimmed, or `None` when that leaves nothing.
fn non_empty(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// Whether an environment flag such as `HF_HUB_OFFLINE` means "on".
fn is_truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// Validates `req`, fills in its defaults from `env`, and fetches it (only its config with
/// `config_only`).
fn fetch_with(
    req: &HubRequest,
    env: &Environment,
    token: Option<&str>,
    config_only: bool,
) -> Result<PathBuf, HubError> {
    fetcher(req, env, token)?.fetch(config_only)
}

/// Resolves `files` (paths inside the repository, `/`-separated) of `req` into the cache,
/// downloading what is missing unless offline, and returns their cached paths in order.
/// Files in a data-set repository are usually LFS objects, checked against the hub's SHA-256.
pub fn fetch_files(req: &HubRequest, files: &[String]) -> Result<Vec<PathBuf>, HubError> {
    let env = Environment::from_process();
    let token = env.token();
    let fetcher = fetcher(req, &env, token.as_deref())?;
    files
        .iter()
        .map(|file| {
            validate_file_path(file)?;
            fetcher.require(file)
        })
        .collect()
}

/// The files of `req`'s revision: the hub's listing online, the cached snapshot's files offline
/// (or when the hub cannot be reached and a snapshot is cached). Sorted.
pub fn list_files(req: &HubRequest) -> Result<Vec<String>, HubError> {
    let env = Environment::from_process();
    let token = env.token();
    let fetcher = fetcher(req, &env, token.as_deref())?;
    if let Some(api) = &fetcher.api {
        let info = api.info().map_err(|err| HubError::Download {
            repo: fetcher.repo_id.to_owned(),
            file: "(the repository's file list)".to_owned(),
            source: transfer_error(err, fetcher.token),
        })?;
        let mut names: Vec<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
        names.sort();
        return Ok(names);
    }
    let commit = std::fs::read_to_string(fetcher.repo_dir.join("refs").join(fetcher.revision))
        .map_err(|_| HubError::OfflineListing {
            repo: fetcher.repo_id.to_owned(),
            revision: fetcher.revision.to_owned(),
        })?;
    let snapshot = fetcher.repo_dir.join("snapshots").join(commit.trim());
    let mut names = Vec::new();
    let mut stack = vec![snapshot.clone()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| HubError::Read {
            path: dir.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(&snapshot) {
                names.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    names.sort();
    Ok(names)
}

/// Whether `HF_HUB_OFFLINE` is set to a true value in this process.
pub fn offline_from_environment() -> bool {
    Environment::from_process().offline
}

/// The commit of the snapshot a cached `file` (a path returned for repository file `name`)
/// lies in: `…/snapshots/{commit}/{name}`.
pub fn snapshot_commit(path: &Path, name: &str) -> Option<String> {
    let mut folder = path;
    for _ in name.split('/') {
        folder = folder.parent()?;
    }
    Some(folder.file_name()?.to_string_lossy().into_owned())
}

/// Removes a cached file: its snapshot link and the blob it points to, so the next fetch
/// downloads it anew. Best effort: a file that is already gone is not an error.
pub fn evict(path: &Path) {
    if let Ok(blob) = std::fs::canonicalize(path) {
        // `hf-hub` leaves an empty `{blob}.lock` beside each download.
        let _ = std::fs::remove_file(blob.with_extension("lock"));
        let _ = std::fs::remove_file(blob);
    }
    let _ = std::fs::remove_file(path);
}

/// The fetcher for `req`, its defaults filled in from `env`.
fn fetcher<'a>(
    req: &'a HubRequest,
    env: &Environment,
    token: Option<&'a str>,
) -> Result<Fetcher<'a>, HubError> {
    let revision = if req.revision.trim().is_empty() {
        DEFAULT_REVISION
    } else {
        req.revision.trim()
    };
    validate_repo_id(&req.repo_id)?;
    validate_revision(revision)?;
    let cache_dir = match &req.cache_dir {
        Some(dir) => dir.clone(),
        None => env
            .hf_home
            .as_ref()
            .ok_or(HubError::NoCacheDir)?
            .join("hub"),
    };
    let repo_type = match req.kind {
        RepoKind::Model => RepoType::Model,
        RepoKind::Dataset => RepoType::Dataset,
    };
    let repo = Repo::with_revision(req.repo_id.clone(), repo_type, revision.to_owned());
    let cache = Cache::new(cache_dir);
    let repo_dir = cache.path().join(repo.folder_name());
    let api = if req.offline || env.offline {
        None
    } else {
        let endpoint = req
            .endpoint
            .as_deref()
            .and_then(non_empty)
            .or_else(|| env.endpoint.clone())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        let api = ApiBuilder::from_cache(cache.clone())
            .with_endpoint(endpoint.trim_end_matches('/').to_owned())
            .with_token(token.map(str::to_owned))
            .with_progress(env.progress)
            .with_retries(DOWNLOAD_RETRIES)
            .build()
            .map_err(|err| HubError::Client {
                source: transfer_error(err, token),
            })?;
        Some(api.repo(repo.clone()))
    };
    Ok(Fetcher {
        repo_id: &req.repo_id,
        revision,
        repo_dir,
        cache: cache.repo(repo),
        api,
        token,
    })
}

/// Checks that a file path inside a repository is made of plain names (no `..`, no absolute path).
fn validate_file_path(file: &str) -> Result<(), HubError> {
    if file.split('/').all(is_plain_name) {
        Ok(())
    } else {
        Err(HubError::InvalidRequest {
            reason: format!("file `{file}` is not a relative path of plain names"),
        })
    }
}

/// Checks that `repo_id` is `name` or `org/name` made of plain name characters.
fn validate_repo_id(repo_id: &str) -> Result<(), HubError> {
    let parts: Vec<&str> = repo_id.split('/').collect();
    if parts.len() > 2 || !parts.iter().all(|part| is_plain_name(part)) {
        return Err(HubError::InvalidRequest {
            reason: format!("repository id `{repo_id}` is not `name` or `org/name`"),
        });
    }
    Ok(())
}

/// Checks that `revision` cannot escape the cache's `refs` folder or break the URL.
fn validate_revision(revision: &str) -> Result<(), HubError> {
    let bad_segment = revision
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..");
    let bad_char = revision
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '\\' | '?' | '#' | '%'));
    if bad_segment || bad_char {
        return Err(HubError::InvalidRequest {
            reason: format!("revision `{revision}` is not a branch, tag or commit name"),
        });
    }
    Ok(())
}

/// Whether `name` is one safe path component: ASCII letters, digits, `-`, `_` and `.`, without `..`.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && !name.contains("..")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Resolves the files of one repository revision, from the cache first.
struct Fetcher<'a> {
    /// The repository id.
    repo_id: &'a str,
    /// The revision asked for.
    revision: &'a str,
    /// The repository's cache folder, `{cache}/models--{org}--{name}`.
    repo_dir: PathBuf,
    /// The repository's cache entries.
    cache: CacheRepo,
    /// The hub, or `None` in offline mode.
    api: Option<ApiRepo>,
    /// The token, kept only to scrub it from error text.
    token: Option<&'a str>,
}

impl Fetcher<'_> {
    /// Resolves every file the project needs (only `config.json` with `config_only`) and
    /// returns their common snapshot folder.
    fn fetch(&self, config_only: bool) -> Result<PathBuf, HubError> {
        let config = self.require(CONFIG)?;
        if config_only {
            return Ok(config.parent().unwrap_or(Path::new("")).to_path_buf());
        }
        let mut files = Vec::new();
        match self.lookup(TOKENIZER)? {
            Some(path) => files.push((TOKENIZER.to_owned(), path)),
            None => {
                // Neither tokenizer: the error names the one most repositories have.
                if self.lookup(SLOW_TOKENIZER[0])?.is_none() {
                    return Err(self.absent(TOKENIZER));
                }
                for name in SLOW_TOKENIZER {
                    files.push((name.to_owned(), self.require(name)?));
                }
            }
        }
        for name in OPTIONAL_FILES {
            if let Some(path) = self.lookup(name)? {
                files.push((name.to_owned(), path));
            }
        }
        if let Some(path) = self.lookup(SINGLE_WEIGHTS)? {
            files.push((SINGLE_WEIGHTS.to_owned(), path));
        } else {
            let index = self
                .lookup(WEIGHT_INDEX)?
                .ok_or_else(|| self.no_weights())?;
            let text = std::fs::read_to_string(&index).map_err(|source| HubError::Read {
                path: index.clone(),
                source,
            })?;
            let shards = shard_names(self.repo_id, &text)?;
            files.push((WEIGHT_INDEX.to_owned(), index));
            for shard in shards {
                let path = self.require(&shard)?;
                files.push((shard, path));
            }
        }

        let snapshot = config.parent().unwrap_or(Path::new("")).to_path_buf();
        if let Some((file, _)) = files
            .iter()
            .find(|(name, path)| *path != snapshot.join(name))
        {
            return Err(HubError::SnapshotMismatch {
                repo: self.repo_id.to_owned(),
                file: file.clone(),
            });
        }
        Ok(snapshot)
    }

    /// The local path of `file`, or `None` when the repository (online) or the cache (offline) lacks it.
    ///
    /// Online, a cached file is used as is; a file the hub answered `404` for is
    /// remembered, like `huggingface_hub` does, in an empty marker
    /// `.no_exist/{commit}/{file}`, so a fully cached model needs no network.
    fn lookup(&self, file: &str) -> Result<Option<PathBuf>, HubError> {
        if let Some(path) = self.cache.get(file) {
            return Ok(Some(path));
        }
        let Some(api) = &self.api else {
            return Ok(None);
        };
        if self
            .no_exist_marker(file)
            .is_some_and(|marker| marker.is_file())
        {
            return Ok(None);
        }
        match api.download(file) {
            Ok(path) => self.verify(file, &path).map(|()| Some(path)),
            Err(err) => match transfer_error(err, self.token) {
                TransferError::Status { status: 404 } => {
                    self.mark_missing(file);
                    Ok(None)
                }
                source => Err(HubError::Download {
                    repo: self.repo_id.to_owned(),
                    file: file.to_owned(),
                    source,
                }),
            },
        }
    }

    /// Checks a fresh download against the hub's hash where it gives one: LFS files (the
    /// weights) are stored as blobs named by their SHA-256, which must match the content. Git
    /// files are named by their git blob id (SHA-1), not checked here. A mismatch removes the
    /// blob and its snapshot link so the next run downloads it again.
    fn verify(&self, file: &str, path: &Path) -> Result<(), HubError> {
        let blob = std::fs::canonicalize(path).map_err(|source| HubError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let expected = blob
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let is_sha256 =
            expected.len() == 64 && expected.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'));
        if !is_sha256 {
            return Ok(());
        }
        let actual = crate::data::hash::sha256_file(&blob).map_err(|source| HubError::Read {
            path: blob.clone(),
            source,
        })?;
        if actual == expected {
            return Ok(());
        }
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(&blob);
        Err(HubError::Corrupt {
            repo: self.repo_id.to_owned(),
            file: file.to_owned(),
            expected,
            actual,
        })
    }

    /// The marker saying `file` does not exist at the commit the revision points to in the cache.
    fn no_exist_marker(&self, file: &str) -> Option<PathBuf> {
        let refs = self.repo_dir.join("refs").join(self.revision);
        let commit = std::fs::read_to_string(refs).ok()?;
        let commit = commit.trim();
        is_plain_name(commit).then(|| self.repo_dir.join(".no_exist").join(commit).join(file))
    }

    /// Records that the hub has no `file` at the cached commit; best effort, as it only saves requests.
    fn mark_missing(&self, file: &str) {
        if let Some(marker) = self.no_exist_marker(file) {
            if let Some(folder) = marker.parent() {
                let _ = std::fs::create_dir_all(folder).and_then(|()| {
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&marker)
                });
            }
        }
    }

    /// The local path of `file`, which must exist.
    fn require(&self, file: &str) -> Result<PathBuf, HubError> {
        self.lookup(file)?.ok_or_else(|| self.absent(file))
    }

    /// The error for a required `file` that could not be found.
    fn absent(&self, file: &str) -> HubError {
        let (repo, revision, file) = (
            self.repo_id.to_owned(),
            self.revision.to_owned(),
            file.to_owned(),
        );
        if self.api.is_some() {
            HubError::MissingFile {
                repo,
                revision,
                file,
            }
        } else {
            HubError::Offline {
                repo,
                revision,
                file,
            }
        }
    }

    /// The error for a repository with neither weights file.
    fn no_weights(&self) -> HubError {
        if self.api.is_some() {
            HubError::MissingWeights {
                repo: self.repo_id.to_owned(),
                revision: self.revision.to_owned(),
            }
        } else {
            self.absent(SINGLE_WEIGHTS)
        }
    }
}

/// The distinct shard files named by the `weight_map` of a `model.safetensors.index.json`, sorted.
fn shard_names(repo: &str, index_json: &str) -> Result<Vec<String>, HubError> {
    let bad = |reason: String| HubError::BadIndex {
        repo: repo.to_owned(),
        reason,
    };
    let index: serde_json::Value =
        serde_json::from_str(index_json).map_err(|err| bad(format!("not valid json: {err}")))?;
    let weight_map = index
        .get("weight_map")
        .and_then(serde_json::Value::as_object)
        .ok_or_else(|| bad("it has no `weight_map` object".to_owned()))?;
    let mut shards = BTreeSet::new();
    for (tensor, shard) in weight_map {
        let shard = shard
            .as_str()
            .ok_or_else(|| bad(format!("the shard of tensor `{tensor}` is not a string")))?;
        if !is_plain_name(shard) || !shard.ends_with(".safetensors") {
            return Err(bad(format!(
                "shard `{shard}` of tensor `{tensor}` is not a plain `.safetensors` file name"
            )));
        }
        shards.insert(shard.to_owned());
    }
    if shards.is_empty() {
        return Err(bad("its `weight_map` is empty".to_owned()));
    }
    Ok(shards.into_iter().collect())
}

/// Turns an `hf-hub` error into a [`TransferError`] that carries no headers and no `token`.
fn transfer_error(err: ApiError, token: Option<&str>) -> TransferError {
    match err {
        ApiError::RequestError(inner) => {
            // `hf-hub` does not re-export `ureq`, so the status is read from its
            // message, `{url}: status code {status}`.
            let text = inner.to_string();
            match http_status(&text) {
                Some(status) => TransferError::Status { status },
                None => TransferError::Transport {
                    message: redact(&text, token),
                },
            }
        }
        ApiError::TooManyRetries(inner) => transfer_error(*inner, token),
        ApiError::IoError(err) => TransferError::Io(err),
        ApiError::MissingHeader(header) => TransferError::Protocol {
            message: format!("the response lacks the `{header}` header"),
        },
        ApiError::InvalidHeader(header) => TransferError::Protocol {
            message: format!("the response's `{header}` header is invalid"),
        },
        ApiError::LockAcquisition(path) => TransferError::Protocol {
            message: format!("another process holds the cache lock `{}`", path.display()),
        },
        other => TransferError::Protocol {
            message: redact(&other.to_string().to_lowercase(), token),
        },
    }
}

/// The HTTP status in a `ureq` status error message (`{url}: status code {status}`).
fn http_status(text: &str) -> Option<u16> {
    let (_, rest) = text.rsplit_once(": status code ")?;
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// `text` with every occurrence of `token` masked.
fn redact(text: &str, token: Option<&str>) -> String {
    match token {
        Some(token) if !token.is_empty() => text.replace(token, "***"),
        _ => text.to_owned(),
    }
}

/// The hub imitation the tests below share with the integration tests.
#[cfg(test)]
#[path = "../../tests/it/common/fake_hub.rs"]
mod fake_hub;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    use super::fake_hub::*;

    fn weights(len: usize, salt: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
            .collect()
    }

    fn single_file_repo(token: Option<&str>) -> FakeRepo {
        let files = [
            (
                CONFIG,
                br#"{"model_type":"llama","hidden_size":8}"#.to_vec(),
            ),
            (TOKENIZER, br#"{"version":"1.0","model":{}}"#.to_vec()),
            ("generation_config.json", br#"{"bos_token_id":1}"#.to_vec()),
            (SINGLE_WEIGHTS, weights(5000, 7)),
        ];
        FakeRepo {
            files: files
                .into_iter()
                .map(|(name, bytes)| (name.to_owned(), bytes))
                .collect(),
            token: token.map(str::to_owned),
            corrupt: false,
        }
    }

    fn sharded_repo(index: &str) -> FakeRepo {
        let files = [
            (CONFIG, br#"{"model_type":"llama"}"#.to_vec()),
            (TOKENIZER, br#"{"version":"1.0"}"#.to_vec()),
            ("tokenizer_config.json", br#"{"bos_token":"<s>"}"#.to_vec()),
            (WEIGHT_INDEX, index.as_bytes().to_vec()),
            (SHARD_1, weights(3000, 1)),
            (SHARD_2, weights(2000, 2)),
        ];
        FakeRepo {
            files: files
                .into_iter()
                .map(|(name, bytes)| (name.to_owned(), bytes))
                .collect(),
            token: None,
            corrupt: false,
        }
    }

    fn two_shard_index() -> String {
        format!(
            r#"{{"metadata":{{"total_size":5000}},"weight_map":{{
                "model.embed_tokens.weight":"{SHARD_1}",
                "model.layers.0.mlp.up_proj.weight":"{SHARD_1}",
                "lm_head.weight":"{SHARD_2}"}}}}"#
        )
    }

    fn request(endpoint: &str, cache: &Path) -> HubRequest {
        HubRequest {
            repo_id: REPO.to_owned(),
            revision: DEFAULT_REVISION.to_owned(),
            cache_dir: Some(cache.to_path_buf()),
            endpoint: Some(endpoint.to_owned()),
            offline: false,
            kind: RepoKind::Model,
        }
    }

    /// An environment that contributes nothing, so tests never read process variables.
    fn no_env() -> Environment {
        Environment {
            hf_home: None,
            endpoint: None,
            offline: false,
            progress: false,
        }
    }

    /// The error's message followed by those of all its sources, like `{:#}` in anyhow.
    fn chain(err: &dyn std::error::Error) -> String {
        let mut text = err.to_string();
        let mut source = err.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }

    fn assert_same_files(dir: &Path, repo: &FakeRepo) {
        for (name, bytes) in &repo.files {
            let local = std::fs::read(dir.join(name)).unwrap();
            assert_eq!(&local, bytes, "contents of `{name}`");
        }
    }

    #[test]
    fn config_only_fetch_downloads_nothing_else() {
        let hub = FakeHub::start(single_file_repo(None));
        let cache = tempfile::tempdir().unwrap();
        let dir = fetch_with(
            &request(&hub.endpoint(), cache.path()),
            &no_env(),
            None,
            true,
        )
        .unwrap();
        assert!(dir.join(CONFIG).is_file());
        assert!(!dir.join(TOKENIZER).exists() && !dir.join(SINGLE_WEIGHTS).exists());
        assert!(hub.seen().iter().all(|s| !s.path.contains(SINGLE_WEIGHTS)));
    }

    #[test]
    fn downloads_a_single_file_repo() {
        let repo = single_file_repo(None);
        let expected = single_file_repo(None);
        let hub = FakeHub::start(repo);
        let cache = tempfile::tempdir().unwrap();
        let dir = fetch_with(
            &request(&hub.endpoint(), cache.path()),
            &no_env(),
            None,
            false,
        )
        .unwrap();

        assert!(dir.starts_with(cache.path()));
        assert!(dir.ends_with(Path::new("models--org--tiny-llama/snapshots").join(COMMIT)));
        assert_same_files(&dir, &expected);
        assert!(!dir.join("tokenizer_config.json").exists());
        assert!(!dir.join(WEIGHT_INDEX).exists());
        let seen = hub.seen();
        assert!(seen.iter().all(|s| !s.path.contains(WEIGHT_INDEX)));
        assert!(seen.iter().all(|s| s.authorization.is_none()));
        assert!(seen
            .iter()
            .any(|s| s.path == format!("/{REPO}/resolve/main/{SINGLE_WEIGHTS}")));
    }

    #[test]
    fn downloads_a_pinned_commit() {
        let hub = FakeHub::start(single_file_repo(None));
        let cache = tempfile::tempdir().unwrap();
        let mut req = request(&hub.endpoint(), cache.path());
        req.revision = COMMIT.to_owned();
        let dir = fetch_with(&req, &no_env(), None, false).unwrap();
        assert!(dir.ends_with(COMMIT));
        assert_same_files(&dir, &single_file_repo(None));
    }

    #[test]
    fn downloads_a_sharded_repo() {
        let index = two_shard_index();
        let hub = FakeHub::start(sharded_repo(&index));
        let cache = tempfile::tempdir().unwrap();
        let dir = fetch_with(
            &request(&hub.endpoint(), cache.path()),
            &no_env(),
            None,
            false,
        )
        .unwrap();

        assert_same_files(&dir, &sharded_repo(&index));
        assert!(!dir.join(SINGLE_WEIGHTS).exists());
        assert!(!dir.join("generation_config.json").exists());
        let seen = hub.seen();
        for shard in [SHARD_1, SHARD_2] {
            assert!(seen
                .iter()
                .any(|s| s.path == format!("/{REPO}/resolve/main/{shard}")));
        }
    }

    #[test]
    fn second_call_offline_uses_the_cache_alone() {
        let index = two_shard_index();
        let mut hub = FakeHub::start(sharded_repo(&index));
        let cache = tempfile::tempdir().unwrap();
        let mut req = request(&hub.endpoint(), cache.path());
        let online = fetch_with(&req, &no_env(), None, false).unwrap();
        let requests = hub.seen().len();
        hub.shutdown();

        // Files the hub lacks are remembered the way `huggingface_hub` does.
        let no_exist = cache
            .path()
            .join("models--org--tiny-llama/.no_exist")
            .join(COMMIT);
        for file in [
            SINGLE_WEIGHTS,
            "special_tokens_map.json",
            "generation_config.json",
        ] {
            assert!(no_exist.join(file).is_file(), "no marker for `{file}`");
        }
        // So even an online call needs no request once everything is cached.
        assert_eq!(fetch_with(&req, &no_env(), None, false).unwrap(), online);

        req.offline = true;
        let offline = fetch_with(&req, &no_env(), None, false).unwrap();
        assert_eq!(offline, online);
        assert_same_files(&offline, &sharded_repo(&index));

        // `HF_HUB_OFFLINE` has the same effect as the request flag.
        req.offline = false;
        let env = Environment {
            offline: true,
            ..no_env()
        };
        assert_eq!(fetch_with(&req, &env, None, false).unwrap(), online);
        assert_eq!(hub.seen().len(), requests);
    }

    #[test]
    fn offline_with_an_empty_cache_names_the_missing_file() {
        let cache = tempfile::tempdir().unwrap();
        let mut req = request("http://127.0.0.1:9", cache.path());
        req.offline = true;
        let err = fetch_with(&req, &no_env(), None, false).unwrap_err();
        assert!(
            matches!(&err, HubError::Offline { file, repo, .. } if file == CONFIG && repo == REPO),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("`config.json`"), "{message}");
        assert!(message.contains("offline mode is on"), "{message}");
    }

    #[test]
    fn offline_names_a_shard_missing_from_the_cache() {
        let hub = FakeHub::start(sharded_repo(&two_shard_index()));
        let cache = tempfile::tempdir().unwrap();
        let mut req = request(&hub.endpoint(), cache.path());
        let dir = fetch_with(&req, &no_env(), None, false).unwrap();
        std::fs::remove_file(dir.join(SHARD_2)).unwrap();

        req.offline = true;
        let err = fetch_with(&req, &no_env(), None, false).unwrap_err();
        assert!(
            matches!(&err, HubError::Offline { file, .. } if file == SHARD_2),
            "{err:?}"
        );
    }

    #[test]
    fn token_is_sent_but_never_printed() {
        let secret = "hf_FakeSecret7q2Z9xLmNoPq";

        // The right token opens a private repository, on every hub request.
        let hub = FakeHub::start(single_file_repo(Some(secret)));
        let cache = tempfile::tempdir().unwrap();
        let req = request(&hub.endpoint(), cache.path());
        fetch_with(&req, &no_env(), Some(secret), false).unwrap();
        let resolves: Vec<Seen> = hub
            .seen()
            .into_iter()
            .filter(|s| s.path.contains("/resolve/"))
            .collect();
        assert!(!resolves.is_empty());
        let bearer = format!("Bearer {secret}");
        assert!(resolves
            .iter()
            .all(|s| s.authorization.as_deref() == Some(bearer.as_str())));

        // A token the hub refuses (401) fails without leaking it.
        let hub = FakeHub::start(single_file_repo(Some("hf_TheRealOne")));
        let cache = tempfile::tempdir().unwrap();
        let err = fetch_with(
            &request(&hub.endpoint(), cache.path()),
            &no_env(),
            Some(secret),
            false,
        )
        .unwrap_err();
        assert!(
            matches!(&err, HubError::Download { file, source: TransferError::Status { status: 401 }, .. } if file == CONFIG),
            "{err:?}"
        );
        assert!(hub
            .seen()
            .iter()
            .any(|s| s.authorization.as_deref() == Some(bearer.as_str())));
        let shown = chain(&err);
        assert!(shown.contains(REPO) && shown.contains(CONFIG) && shown.contains("401"));

        // A missing shard (404) and an unreachable hub fail without leaking it either.
        let mut repo = sharded_repo(&two_shard_index());
        repo.files.remove(SHARD_2);
        let hub = FakeHub::start(repo);
        let cache = tempfile::tempdir().unwrap();
        let missing = fetch_with(
            &request(&hub.endpoint(), cache.path()),
            &no_env(),
            Some(secret),
            false,
        )
        .unwrap_err();
        assert!(
            matches!(&missing, HubError::MissingFile { file, .. } if file == SHARD_2),
            "{missing:?}"
        );

        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let cache = tempfile::tempdir().unwrap();
        let unreachable = fetch_with(
            &request(&format!("http://{closed}"), cache.path()),
            &no_env(),
            Some(secret),
            false,
        )
        .unwrap_err();
        assert!(
            matches!(
                &unreachable,
                HubError::Download {
                    source: TransferError::Transport { .. },
                    ..
                }
            ),
            "{unreachable:?}"
        );

        for err in [&err, &missing, &unreachable] {
            for text in [chain(err), format!("{err:?}"), format!("{err:#?}")] {
                assert!(!text.contains(secret), "token leaked: {text}");
                assert!(!text.contains("FakeSecret"), "token leaked: {text}");
            }
        }
    }

    #[test]
    fn a_download_that_does_not_match_the_hubs_sha256_is_refused_and_removed() {
        let mut repo = single_file_repo(None);
        repo.corrupt = true;
        let hub = FakeHub::start(repo);
        let cache = tempfile::tempdir().unwrap();
        let req = request(&hub.endpoint(), cache.path());
        let err = fetch_with(&req, &no_env(), None, false).unwrap_err();
        let HubError::Corrupt {
            file,
            expected,
            actual,
            ..
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!(file, SINGLE_WEIGHTS);
        assert_eq!(expected, &lfs_oid(&weights(5000, 7)));
        assert_ne!(expected, actual);
        assert!(chain(&err).contains("run again to download it anew"));
        // Nothing of the bad download stays in the cache.
        let blobs: Vec<_> = walk(cache.path())
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy() == *expected)
            })
            .collect();
        assert!(blobs.is_empty(), "{blobs:?}");

        // The intact file passes the same check.
        let hub = FakeHub::start(single_file_repo(None));
        let cache = tempfile::tempdir().unwrap();
        fetch_with(
            &request(&hub.endpoint(), cache.path()),
            &no_env(),
            None,
            false,
        )
        .unwrap();
    }

    #[test]
    fn an_index_with_an_unsafe_shard_name_is_refused() {
        let index = r#"{"weight_map":{"a.weight":"model-00001-of-00002.safetensors","b.weight":"../evil.safetensors"}}"#;
        let hub = FakeHub::start(sharded_repo(index));
        let cache = tempfile::tempdir().unwrap();
        let err = fetch_with(
            &request(&hub.endpoint(), cache.path()),
            &no_env(),
            None,
            false,
        )
        .unwrap_err();
        assert!(
            matches!(&err, HubError::BadIndex { repo, .. } if repo == REPO),
            "{err:?}"
        );
        assert!(err.to_string().contains("`../evil.safetensors`"), "{err}");
        // Validation happens before any shard is requested.
        assert!(hub
            .seen()
            .iter()
            .all(|s| !s.path.contains("evil") && !s.path.contains(SHARD_1)));
    }

    #[test]
    fn missing_required_files_are_reported() {
        let mut repo = single_file_repo(None);
        repo.files.remove(TOKENIZER);
        let hub = FakeHub::start(repo);
        let cache = tempfile::tempdir().unwrap();
        let err = fetch_with(
            &request(&hub.endpoint(), cache.path()),
            &no_env(),
            None,
            false,
        )
        .unwrap_err();
        assert!(
            matches!(&err, HubError::MissingFile { file, revision, .. } if file == TOKENIZER && revision == "main"),
            "{err:?}"
        );

        let mut repo = single_file_repo(None);
        repo.files.remove(SINGLE_WEIGHTS);
        let hub = FakeHub::start(repo);
        let cache = tempfile::tempdir().unwrap();
        let err = fetch_with(
            &request(&hub.endpoint(), cache.path()),
            &no_env(),
            None,
            false,
        )
        .unwrap_err();
        assert!(matches!(&err, HubError::MissingWeights { .. }), "{err:?}");
    }

    #[test]
    fn shard_names_are_validated_and_deduplicated() {
        let names = shard_names(REPO, &two_shard_index()).unwrap();
        assert_eq!(names, [SHARD_1, SHARD_2]);

        for shard in [
            "../x.safetensors",
            "a/b.safetensors",
            "a\\b.safetensors",
            "..safetensors",
            "",
            "model.bin",
            "x y.safetensors",
        ] {
            let index = serde_json::json!({ "weight_map": { "w": shard } }).to_string();
            assert!(
                matches!(shard_names(REPO, &index), Err(HubError::BadIndex { .. })),
                "accepted `{shard}`"
            );
        }
        for index in [
            "not json",
            "{}",
            r#"{"weight_map":{}}"#,
            r#"{"weight_map":{"w":3}}"#,
        ] {
            assert!(matches!(
                shard_names(REPO, index),
                Err(HubError::BadIndex { .. })
            ));
        }
    }

    #[test]
    fn bad_requests_are_refused_before_any_io() {
        let cache = tempfile::tempdir().unwrap();
        for (repo_id, revision) in [
            ("", "main"),
            ("a/b/c", "main"),
            ("../etc", "main"),
            ("org/with space", "main"),
            (REPO, "../main"),
            (REPO, "refs//pr"),
        ] {
            let mut req = request("http://127.0.0.1:9", cache.path());
            req.repo_id = repo_id.to_owned();
            req.revision = revision.to_owned();
            let err = fetch_with(&req, &no_env(), None, false).unwrap_err();
            assert!(matches!(err, HubError::InvalidRequest { .. }), "{err:?}");
        }
        assert!(std::fs::read_dir(cache.path()).unwrap().next().is_none());
    }

    #[test]
    fn helpers_parse_statuses_and_mask_tokens() {
        assert_eq!(
            http_status("http://h/o/r/resolve/main/f: status code 404"),
            Some(404)
        );
        assert_eq!(
            http_status("http://h/x: status code 401 (redirected from http://h/y)"),
            Some(401)
        );
        assert_eq!(http_status("http://h/x: Connection Failed: refused"), None);
        assert_eq!(redact("a tok b tok", Some("tok")), "a *** b ***");
        assert_eq!(redact("a b", Some("")), "a b");
        assert!(is_truthy("1") && is_truthy("TRUE") && !is_truthy("0"));
        assert_eq!(HubRequest::new(REPO).revision, DEFAULT_REVISION);
    }
}
