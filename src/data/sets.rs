//! Data sets by name and from the hub, read exactly as the papers' reference code reads them
//! (locuslab/wanda `lib/data.py`, IST-DASLab/sparsegpt `datautils.py`):
//!
//! | name | calibration | evaluation |
//! |---|---|---|
//! | `wikitext2` | `Salesforce/wikitext`, `wikitext-2-raw-v1` train, rows joined with " " | test, joined with "\n\n" |
//! | `ptb` | `ptb-text-only/ptb_text_only`, `penn_treebank` train, `sentence` joined with " " | test, joined with " " |
//! | `c4` | `allenai/c4` `en/c4-train.00000-of-01024.json.gz`: per sample, random documents until one is longer than `seqlen` tokens, then a random window of it | `en/c4-validation.00000-of-00008.json.gz`: the first 1100 documents joined with " ", the first 256 × `seqlen` tokens |
//!
//! Any other hub data set (`hub: org/name`) gives the rows of its split's files joined with
//! "\n\n". Files come through the hub cache ([`crate::data::hub`]); Parquet and JSON lines are
//! read by [`super::rows`].

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::calibration::{self, CalibrationError, CalibrationSet};
use super::hub::{self, HubError, HubRequest};
use super::records::{self, Record};
use super::rows::{self, DocumentStore, RowsError};
use super::text::TextEncoder;

/// A data set of the papers, by name.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum DatasetName {
    /// C4 (`allenai/c4`, English): the paper's calibration data.
    C4,
    /// WikiText-2 raw (`Salesforce/wikitext`): the paper's perplexity.
    Wikitext2,
    /// Penn Treebank (`ptb-text-only/ptb_text_only`), as SparseGPT evaluates it.
    Ptb,
}

impl DatasetName {
    /// The name as pipelines write it.
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetName::C4 => "c4",
            DatasetName::Wikitext2 => "wikitext2",
            DatasetName::Ptb => "ptb",
        }
    }
}

/// Any data set on the hub: the rows of one split, joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubData {
    /// The data-set repository, `org/name`.
    pub repo: String,
    /// Branch, tag or commit (`main` when absent).
    pub revision: Option<String>,
    /// The configuration (subset) folder, e.g. `wikitext-103-raw-v1`.
    pub config: Option<String>,
    /// The split whose files are read (`train`, `validation`, `test`) when `files` is empty.
    pub split: Option<String>,
    /// The text column.
    pub column: String,
    /// Exactly these files of the repository, in order (found from the split when empty).
    pub files: Vec<String>,
}

/// Where a stage's text comes from, once the pipeline has been checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    /// A local UTF-8 text file (read by the stages as before).
    Text(PathBuf),
    /// A data set by name, read by its reference protocol.
    Named(DatasetName),
    /// A hub data set by repository.
    Hub(HubData),
}

/// What the data are for: the protocols differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Calibration windows.
    Calibration,
    /// Perplexity.
    Evaluation,
}

/// How the rows of the files become the text that is tokenised.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// All rows joined with the separator, tokenised as one text.
    Joined(&'static str),
    /// One document at a time (C4 calibration).
    Documents,
    /// The first `count` rows joined with " ", the first `windows` × seqlen tokens (C4 evaluation).
    FirstDocuments { count: usize, windows: usize },
}

/// Which files of the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Files {
    /// Exactly these, at this revision.
    Exact {
        revision: String,
        names: Vec<String>,
    },
    /// The files of a split, found in the repository's listing, trying each revision in turn.
    Split {
        config: Option<String>,
        split: String,
        revisions: Vec<String>,
    },
}

/// A source made concrete for one role.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Protocol {
    /// What run records call the source (`c4`, `hub:org/name`).
    label: String,
    repo: String,
    files: Files,
    column: String,
    shape: Shape,
}

/// The revision the hub's Parquet conversion of a data set lives in.
const PARQUET_CONVERSION: &str = "refs/convert/parquet";

impl DataSource {
    /// The protocol of this source for `role`; `None` for a local text.
    fn protocol(&self, role: Role) -> Option<Protocol> {
        let split = |train: &str, test: &str| match role {
            Role::Calibration => train.to_owned(),
            Role::Evaluation => test.to_owned(),
        };
        let both = || vec!["main".to_owned(), PARQUET_CONVERSION.to_owned()];
        Some(match self {
            DataSource::Text(_) => return None,
            DataSource::Named(DatasetName::Wikitext2) => Protocol {
                label: "wikitext2".into(),
                repo: "Salesforce/wikitext".into(),
                files: Files::Split {
                    config: Some("wikitext-2-raw-v1".into()),
                    split: split("train", "test"),
                    revisions: both(),
                },
                column: "text".into(),
                shape: Shape::Joined(match role {
                    Role::Calibration => " ",
                    Role::Evaluation => "\n\n",
                }),
            },
            DataSource::Named(DatasetName::Ptb) => Protocol {
                label: "ptb".into(),
                repo: "ptb-text-only/ptb_text_only".into(),
                files: Files::Split {
                    config: Some("penn_treebank".into()),
                    split: split("train", "test"),
                    revisions: both(),
                },
                column: "sentence".into(),
                shape: Shape::Joined(" "),
            },
            DataSource::Named(DatasetName::C4) => Protocol {
                label: "c4".into(),
                repo: "allenai/c4".into(),
                files: Files::Exact {
                    revision: "main".into(),
                    names: vec![split(
                        "en/c4-train.00000-of-01024.json.gz",
                        "en/c4-validation.00000-of-00008.json.gz",
                    )],
                },
                column: "text".into(),
                shape: match role {
                    Role::Calibration => Shape::Documents,
                    Role::Evaluation => Shape::FirstDocuments {
                        count: 1100,
                        windows: 256,
                    },
                },
            },
            DataSource::Hub(data) => Protocol {
                label: format!("hub:{}", data.repo),
                repo: data.repo.clone(),
                files: if data.files.is_empty() {
                    Files::Split {
                        config: data.config.clone(),
                        split: data.split.clone().unwrap_or_else(|| "train".into()),
                        revisions: vec![data.revision.clone().unwrap_or_else(|| "main".into())],
                    }
                } else {
                    Files::Exact {
                        revision: data.revision.clone().unwrap_or_else(|| "main".into()),
                        names: data.files.clone(),
                    }
                },
                column: data.column.clone(),
                shape: Shape::Joined("\n\n"),
            },
        })
    }

    /// The size of the text tokenised at once for `role`, for the memory estimate: the file's
    /// size for a local text (`None`: read it), the joined split of a named data set as the hub
    /// serves it today, and an assumed 32 MiB for any other hub data set.
    pub fn typical_text_bytes(&self, role: Role) -> Option<u64> {
        let calibration = role == Role::Calibration;
        Some(match self {
            DataSource::Text(_) => return None,
            // Train joined: 10.9 MB; test joined: 1.30 MB.
            DataSource::Named(DatasetName::Wikitext2) if calibration => 10_918_892,
            DataSource::Named(DatasetName::Wikitext2) => 1_296_370,
            // Train: 5.1 MB; test: 0.45 MB (the data set card's sizes).
            DataSource::Named(DatasetName::Ptb) if calibration => 5_143_706,
            DataSource::Named(DatasetName::Ptb) => 453_710,
            // One document at a time, beside the store's offsets (356k documents × 8 B).
            DataSource::Named(DatasetName::C4) if calibration => 4 << 20,
            // The first 1100 validation documents.
            DataSource::Named(DatasetName::C4) => 3 << 20,
            DataSource::Hub(_) => 32 << 20,
        })
    }
}

/// Why hub data could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// Fetching from the hub failed (missing file, offline without it, corrupt download).
    #[error(transparent)]
    Hub(#[from] HubError),
    /// A file's rows could not be read; a damaged hub file was removed from the cache.
    #[error("{source}{}", if *.evicted { "; it was removed from the hub cache, run again to download it anew" } else { "" })]
    Rows {
        /// The problem, naming the file.
        #[source]
        source: RowsError,
        /// Whether the file was removed from the cache.
        evicted: bool,
    },
    /// No file of the repository matches the split.
    #[error("`{repo}` has no Parquet or JSON-lines files for split `{split}` under {where_} (revisions tried: {}); name them with `files:`", revisions.join(", "))]
    NoFiles {
        /// The repository.
        repo: String,
        /// The split.
        split: String,
        /// The folders looked in.
        where_: String,
        /// The revisions listed.
        revisions: Vec<String>,
    },
    /// A local task-data folder has no files for the split.
    #[error("`{}` has no Parquet or JSON-lines files for split `{split}` (`{split}-*` or `{split}/*`); lay the folder out like the hub repository", folder.display())]
    NoLocalFiles {
        /// The folder looked in (`{dir}/{repo}/{config}`).
        folder: PathBuf,
        /// The split.
        split: String,
    },
    /// The split's rows hold no text.
    #[error("`{what}` holds no text")]
    Empty {
        /// The data named.
        what: String,
    },
    /// The tokenizer failed.
    #[error("cannot tokenise {what}")]
    Tokenize {
        /// The data named.
        what: String,
        /// The tokenizer's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Drawing calibration windows failed.
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
}

/// One file read, for run records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileDigest {
    /// The path inside the repository.
    pub name: String,
    /// The file's SHA-256.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
}

/// Where the data of a run came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Provenance {
    /// `c4`, `wikitext2`, `ptb` or `hub:org/name`.
    pub dataset: String,
    /// The data-set repository.
    pub repo: String,
    /// The revision asked for.
    pub revision: String,
    /// The commit the files came from.
    pub commit: Option<String>,
    /// The files read, in order.
    pub files: Vec<FileDigest>,
}

impl Provenance {
    /// One SHA-256 over the files' names and digests, as run records keep for a text file.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for f in &self.files {
            h.update(f.name.as_bytes());
            h.update([0]);
            h.update(f.sha256.as_bytes());
        }
        format!("{:x}", h.finalize())
    }
}

/// A file of the repository in the cache.
struct Fetched {
    name: String,
    path: PathBuf,
}

/// The repository files a hub source reads for one role: what `wanda fetch` downloads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NeededFiles {
    /// The data-set repository.
    pub repo: String,
    /// The revision the files are read at.
    pub revision: String,
    /// The files, in order.
    pub files: Vec<String>,
    /// The column whose document store the protocol reads (C4 calibration), built by
    /// [`prepare_documents`] so runs find it ready.
    pub documents: Option<String>,
}

/// The files `source` needs for `role` (`None` for a local text). Listing a split's files needs
/// the hub (or a cached snapshot).
pub fn needed_files(
    source: &DataSource,
    role: Role,
    hub: &HubRequest,
) -> Result<Option<NeededFiles>, DataError> {
    let Some(protocol) = source.protocol(role) else {
        return Ok(None);
    };
    let (revision, files) = resolve_names(&protocol, hub)?;
    Ok(Some(NeededFiles {
        documents: (protocol.shape == Shape::Documents).then(|| protocol.column.clone()),
        repo: protocol.repo,
        revision,
        files,
    }))
}

/// One split of a data-set repository: `{config}/{split}-*` or `{config}/{split}/*`, looked
/// for on `main`, then in the hub's Parquet conversion (where script-based data sets such as
/// `Rowan/hellaswag` keep theirs).
fn split_protocol(repo: &str, config: &str, split: &str) -> Protocol {
    Protocol {
        label: format!("hub:{repo}"),
        repo: repo.to_owned(),
        files: Files::Split {
            config: Some(config.to_owned()),
            split: split.to_owned(),
            revisions: vec!["main".to_owned(), PARQUET_CONVERSION.to_owned()],
        },
        column: String::new(),
        shape: Shape::Joined("\n\n"),
    }
}

/// The repository files of one split of `repo` (what `wanda fetch` downloads for a zero-shot
/// task).
pub fn split_files(
    repo: &str,
    config: &str,
    split: &str,
    hub: &HubRequest,
) -> Result<NeededFiles, DataError> {
    let (revision, files) = resolve_names(&split_protocol(repo, config, split), hub)?;
    Ok(NeededFiles {
        repo: repo.to_owned(),
        revision,
        files,
        documents: None,
    })
}

/// The rows of one split of `repo` from the hub cache (fetched when missing), at most `limit`,
/// with where they came from. A file that cannot be parsed is removed from the cache.
pub fn split_records(
    repo: &str,
    config: &str,
    split: &str,
    limit: Option<usize>,
    hub: &HubRequest,
) -> Result<(Vec<Record>, Provenance), DataError> {
    let (files, provenance) = fetch(&split_protocol(repo, config, split), hub)?;
    let records = records_of(&files, limit, evict_if_damaged)?;
    Ok((records, provenance))
}

/// The files of one split in a local folder laid out like the hub repository: those of
/// `{dir}/{repo}` that the hub's listing would give for the split, in name order.
fn local_split(
    dir: &Path,
    repo: &str,
    config: &str,
    split: &str,
) -> Result<Vec<Fetched>, DataError> {
    let root = dir.join(repo);
    let mut listed = Vec::new();
    list_folder(&root, &root.join(config), &mut listed);
    let mut names = in_split(listed, &split_prefixes(Some(config), split));
    names.sort();
    if names.is_empty() {
        return Err(DataError::NoLocalFiles {
            folder: root.join(config),
            split: split.to_owned(),
        });
    }
    Ok(names
        .into_iter()
        .map(|name| Fetched {
            path: root.join(&name),
            name,
        })
        .collect())
}

/// The paths of [`local_split`]'s files (what `zeroshot.harness: lm-eval` hands lm-eval).
pub fn local_split_files(
    dir: &Path,
    repo: &str,
    config: &str,
    split: &str,
) -> Result<Vec<PathBuf>, DataError> {
    Ok(local_split(dir, repo, config, split)?
        .into_iter()
        .map(|f| f.path)
        .collect())
}

/// [`split_records`] from a local folder laid out like the hub repository ([`local_split`]).
pub fn local_split_records(
    dir: &Path,
    repo: &str,
    config: &str,
    split: &str,
    limit: Option<usize>,
) -> Result<(Vec<Record>, Provenance), DataError> {
    let files = local_split(dir, repo, config, split)?;
    let digests = files
        .iter()
        .map(|f| digest(f, false))
        .collect::<Result<Vec<_>, _>>()?;
    let records = records_of(&files, limit, |_, source| DataError::Rows {
        source,
        evicted: false,
    })?;
    Ok((
        records,
        Provenance {
            dataset: format!("local:{}", dir.display()),
            repo: repo.to_owned(),
            revision: "local".to_owned(),
            commit: None,
            files: digests,
        },
    ))
}

/// The files below `folder`, as `/`-separated paths relative to `root`.
fn list_folder(root: &Path, folder: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            list_folder(root, &path, out);
        } else if let Ok(relative) = path.strip_prefix(root) {
            let parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push(parts.join("/"));
        }
    }
}

/// Builds (once) the document store of `column` of the cached file `path`, repository file
/// `name`; a damaged file is removed from the cache.
pub fn prepare_documents(
    path: &std::path::Path,
    name: &str,
    column: &str,
) -> Result<usize, DataError> {
    let file = Fetched {
        name: name.to_owned(),
        path: path.to_path_buf(),
    };
    DocumentStore::open(path, column)
        .map(|store| store.len())
        .map_err(|source| evict_if_damaged(&file, source))
}

/// The request for `repo` at `revision`, reaching the hub as `hub` says (endpoint, cache,
/// offline).
fn request(hub: &HubRequest, repo: &str, revision: &str) -> HubRequest {
    HubRequest {
        repo_id: repo.to_owned(),
        revision: revision.to_owned(),
        kind: hub::RepoKind::Dataset,
        ..hub.clone()
    }
}

/// Where a split's files lie in a repository: `{config}/{split}-*` or `{config}/{split}/…`
/// (without a config: under `data/` or at the top).
fn split_prefixes(config: Option<&str>, split: &str) -> Vec<String> {
    match config {
        Some(c) => vec![format!("{c}/{split}-"), format!("{c}/{split}/")],
        None => vec![
            format!("data/{split}-"),
            format!("data/{split}/"),
            format!("{split}-"),
            format!("{split}/"),
        ],
    }
}

/// The Parquet and JSON-lines files among `names` (paths inside the repository) under one of
/// `prefixes`, in the given order.
fn in_split(names: Vec<String>, prefixes: &[String]) -> Vec<String> {
    names
        .into_iter()
        .filter(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())))
        .filter(|n| n.ends_with(".parquet") || rows::is_json_lines(n))
        .collect()
}

/// The revision and file names of `protocol`.
fn resolve_names(
    protocol: &Protocol,
    hub: &HubRequest,
) -> Result<(String, Vec<String>), DataError> {
    match &protocol.files {
        Files::Exact { revision, names } => Ok((revision.clone(), names.clone())),
        Files::Split {
            config,
            split,
            revisions,
        } => {
            let prefixes = split_prefixes(config.as_deref(), split);
            let (mut last_err, mut listed_any) = (None, false);
            for revision in revisions {
                let listed = match hub::list_files(&request(hub, &protocol.repo, revision)) {
                    Ok(listed) => listed,
                    Err(err) => {
                        last_err.get_or_insert(err);
                        continue;
                    }
                };
                listed_any = true;
                let names = in_split(listed, &prefixes);
                if !names.is_empty() {
                    return Ok((revision.clone(), names));
                }
            }
            // No revision could be listed at all (offline without a cached snapshot, or the
            // repository is unreachable): that is the error to report.
            if let (Some(err), false) = (last_err, listed_any) {
                return Err(err.into());
            }
            Err(DataError::NoFiles {
                repo: protocol.repo.clone(),
                split: split.clone(),
                where_: prefixes
                    .iter()
                    .map(|p| format!("`{p}*`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                revisions: revisions.clone(),
            })
        }
    }
}

/// Fetches the files of `protocol` and describes them.
fn fetch(protocol: &Protocol, hub: &HubRequest) -> Result<(Vec<Fetched>, Provenance), DataError> {
    let (revision, names) = resolve_names(protocol, hub)?;
    let paths = hub::fetch_files(&request(hub, &protocol.repo, &revision), &names)?;
    let mut files = Vec::new();
    let mut digests = Vec::new();
    for (name, path) in names.into_iter().zip(paths) {
        let file = Fetched { name, path };
        digests.push(digest(&file, true)?);
        files.push(file);
    }
    let commit = files
        .first()
        .and_then(|f| hub::snapshot_commit(&f.path, &f.name));
    Ok((
        files,
        Provenance {
            dataset: protocol.label.clone(),
            repo: protocol.repo.clone(),
            revision,
            commit,
            files: digests,
        },
    ))
}

/// The name, SHA-256 and size of `file` for run records. With `trust_blob_names`, a file that
/// links to a blob named by 64 hex digits (an LFS blob of the hub cache, checked against that
/// SHA-256 when it was downloaded) is not hashed again.
fn digest(file: &Fetched, trust_blob_names: bool) -> Result<FileDigest, DataError> {
    let blob = std::fs::canonicalize(&file.path).unwrap_or_else(|_| file.path.clone());
    let read = |source| DataError::Rows {
        source: RowsError::Read {
            path: file.path.clone(),
            source,
        },
        evicted: false,
    };
    let bytes = std::fs::metadata(&blob).map_err(read)?.len();
    let blob_name = blob
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sha256 = if trust_blob_names
        && blob_name.len() == 64
        && blob_name.bytes().all(|b| b.is_ascii_hexdigit())
    {
        blob_name
    } else {
        super::digest_cache::sha256_file_remembered(&blob).map_err(read)?
    };
    Ok(FileDigest {
        name: file.name.clone(),
        sha256,
        bytes,
    })
}

/// The rows of `files` in order, at most `limit`; `error` makes the error of a file that
/// cannot be read.
fn records_of(
    files: &[Fetched],
    limit: Option<usize>,
    error: impl Fn(&Fetched, RowsError) -> DataError,
) -> Result<Vec<Record>, DataError> {
    let mut records = Vec::new();
    for file in files {
        let left = limit.map(|l| l.saturating_sub(records.len()));
        if left == Some(0) {
            break;
        }
        records.extend(records::read_records(&file.path, left).map_err(|e| error(file, e))?);
    }
    Ok(records)
}

/// `f` over the rows of one fetched file; a file that cannot be parsed is removed from the
/// cache (it came whole from the hub, so it is damaged at the source or in the cache).
fn rows_of(
    file: &Fetched,
    column: &str,
    each: impl FnMut(&str) -> Result<bool, RowsError>,
) -> Result<(), DataError> {
    rows::for_each_row(&file.path, column, each).map_err(|source| evict_if_damaged(file, source))
}

/// The error for `source`, after removing a damaged `file` from the cache.
fn evict_if_damaged(file: &Fetched, source: RowsError) -> DataError {
    let evicted = matches!(source, RowsError::Malformed { .. });
    if evicted {
        hub::evict(&file.path);
    }
    DataError::Rows { source, evicted }
}

/// The text of `protocol`'s files with its rows joined (at most `limit` rows).
fn joined_text(
    files: &[Fetched],
    column: &str,
    separator: &str,
    limit: Option<usize>,
) -> Result<String, DataError> {
    let mut text = String::new();
    let mut count = 0usize;
    for file in files {
        let mut more = true;
        rows_of(file, column, |row| {
            if count > 0 {
                text.push_str(separator);
            }
            text.push_str(row);
            count += 1;
            more = limit.is_none_or(|l| count < l);
            Ok(more)
        })?;
        if !more {
            break;
        }
    }
    Ok(text)
}

/// Token ids of `text` under `tokenizer`.
fn encode<T: TextEncoder>(tokenizer: &T, text: &str, what: &str) -> Result<Vec<u32>, DataError> {
    super::text::encode_cached(tokenizer, text).map_err(|e| DataError::Tokenize {
        what: what.to_owned(),
        source: Box::new(e),
    })
}

/// The evaluation token ids of a hub `source` (`seqlen` bounds C4's 256 windows). `hub` says
/// how to reach the hub (endpoint, cache, offline; its repository and revision are not used):
/// [`HubRequest::default`] follows the environment.
pub fn evaluation_ids<T: TextEncoder>(
    source: &DataSource,
    tokenizer: &T,
    seqlen: usize,
    hub: &HubRequest,
) -> Result<(Vec<u32>, Provenance), DataError> {
    let protocol = source
        .protocol(Role::Evaluation)
        .expect("local texts are read by the stage");
    let (files, provenance) = fetch(&protocol, hub)?;
    let what = format!("the {} evaluation text", protocol.label);
    let (text, cap) = match protocol.shape {
        Shape::FirstDocuments { count, windows } => (
            joined_text(&files, &protocol.column, " ", Some(count))?,
            Some(windows * seqlen),
        ),
        Shape::Joined(sep) => (joined_text(&files, &protocol.column, sep, None)?, None),
        Shape::Documents => unreachable!("documents are a calibration shape"),
    };
    if text.is_empty() {
        return Err(DataError::Empty { what });
    }
    let mut ids = encode(tokenizer, &text, &what)?;
    if let Some(cap) = cap {
        ids.truncate(cap);
    }
    Ok((ids, provenance))
}

/// The calibration windows of a hub `source`, reaching the hub as `hub` says (see
/// [`evaluation_ids`]).
pub fn calibration_set<T: TextEncoder>(
    source: &DataSource,
    tokenizer: &T,
    (nsamples, seqlen, seed): (usize, usize, u64),
    hub: &HubRequest,
) -> Result<(CalibrationSet, Provenance), DataError> {
    let protocol = source
        .protocol(Role::Calibration)
        .expect("local texts are read by the stage");
    let (files, provenance) = fetch(&protocol, hub)?;
    let what = format!("the {} calibration text", protocol.label);
    let set = match protocol.shape {
        Shape::Documents => {
            let file = &files[0];
            let store = DocumentStore::open(&file.path, &protocol.column)
                .map_err(|source| evict_if_damaged(file, source))?;
            if store.is_empty() {
                return Err(DataError::Empty {
                    what: format!("`{}`", file.name),
                });
            }
            calibration::draw_from_documents(
                store.len(),
                |i| {
                    let text = store.get(i).map_err(|source| DataError::Rows {
                        source,
                        evicted: false,
                    })?;
                    encode(tokenizer, text, &format!("document {i} of `{}`", file.name))
                },
                nsamples,
                seqlen,
                seed,
            )?
        }
        Shape::Joined(sep) => {
            let text = joined_text(&files, &protocol.column, sep, None)?;
            if text.is_empty() {
                return Err(DataError::Empty { what });
            }
            calibration::draw(&encode(tokenizer, &text, &what)?, nsamples, seqlen, seed)?
        }
        Shape::FirstDocuments { .. } => unreachable!("an evaluation shape"),
    };
    Ok((set, provenance))
}
