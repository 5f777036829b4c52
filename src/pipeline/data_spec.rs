//! The `calibration:` and `evaluation:` sections of a pipeline: where the text comes from (a
//! file, a data set by name, any hub data set) and how much of it is used.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::Problem;
use crate::data::sets::{DataSource, DatasetName, HubData};

/// Calibration data: the text and how much of it the pruning statistics see. The text is
/// exactly one of `text` (a file), `dataset` (by name) or `hub` (any hub data set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    { "required": ["text"] }, { "required": ["dataset"] }, { "required": ["hub"] }
]))]
pub struct CalibrationSpec {
    /// A plain-text file (relative to the pipeline file's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<PathBuf>,
    /// A data set by name, read by the reference code's protocol: `c4` (the paper's
    /// calibration), `wikitext2` or `ptb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<DatasetName>,
    /// Any hub data set, `org/name`: the rows of `split` (or of `files`) joined with "\n\n".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<String>,
    /// Branch, tag or commit of the `hub` repository (default `main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The configuration (subset) folder of the `hub` repository, e.g. `wikitext-103-raw-v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The split of the `hub` repository read (`train`, `validation`, `test`); required unless
    /// `files` are named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
    /// The text column of the `hub` data (default `text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// Exactly these Parquet or JSON-lines files of the `hub` repository, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    /// Number of calibration sequences.
    #[serde(default = "default_nsamples")]
    #[schemars(range(min = 1))]
    pub nsamples: usize,
    /// Tokens per sequence.
    #[serde(default = "default_seqlen")]
    #[schemars(range(min = 1))]
    pub seqlen: usize,
}

/// Evaluation data: perplexity over non-overlapping windows of `seqlen` tokens. The text is
/// exactly one of `text` (a file), `dataset` (by name) or `hub` (any hub data set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    { "required": ["text"] }, { "required": ["dataset"] }, { "required": ["hub"] }
]))]
pub struct EvaluationSpec {
    /// A plain-text file (relative to the pipeline file's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<PathBuf>,
    /// A data set by name, read by the reference code's protocol: `wikitext2` (the paper's
    /// perplexity), `c4` (first 1100 validation documents, 256 windows) or `ptb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<DatasetName>,
    /// Any hub data set, `org/name`: the rows of `split` (or of `files`) joined with "\n\n".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<String>,
    /// Branch, tag or commit of the `hub` repository (default `main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The configuration (subset) folder of the `hub` repository, e.g. `wikitext-103-raw-v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The split of the `hub` repository read (`train`, `validation`, `test`); required unless
    /// `files` are named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
    /// The text column of the `hub` data (default `text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// Exactly these Parquet or JSON-lines files of the `hub` repository, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    /// Tokens per window.
    #[serde(default = "default_seqlen")]
    #[schemars(range(min = 2))]
    pub seqlen: usize,
    /// Only the first `windows` windows (all when absent), for quick runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<usize>,
}

/// The source keys of a `calibration:` or `evaluation:` section, borrowed.
struct SourceKeys<'a> {
    section: &'static str,
    text: &'a Option<PathBuf>,
    dataset: Option<DatasetName>,
    hub: &'a Option<String>,
    revision: &'a Option<String>,
    config: &'a Option<String>,
    split: &'a Option<String>,
    column: &'a Option<String>,
    files: &'a Option<Vec<String>>,
}

impl CalibrationSpec {
    /// The one source named, or the problem.
    pub fn source(&self) -> Result<DataSource, Problem> {
        data_source(SourceKeys {
            section: "calibration",
            text: &self.text,
            dataset: self.dataset,
            hub: &self.hub,
            revision: &self.revision,
            config: &self.config,
            split: &self.split,
            column: &self.column,
            files: &self.files,
        })
    }
}

impl EvaluationSpec {
    /// The one source named, or the problem.
    pub fn source(&self) -> Result<DataSource, Problem> {
        data_source(SourceKeys {
            section: "evaluation",
            text: &self.text,
            dataset: self.dataset,
            hub: &self.hub,
            revision: &self.revision,
            config: &self.config,
            split: &self.split,
            column: &self.column,
            files: &self.files,
        })
    }
}

/// The source of one section from its keys.
fn data_source(keys: SourceKeys<'_>) -> Result<DataSource, Problem> {
    let SourceKeys {
        section,
        text,
        dataset,
        hub,
        ..
    } = keys;
    let found: Vec<String> = [
        ("text", text.is_some()),
        ("dataset", dataset.is_some()),
        ("hub", hub.is_some()),
    ]
    .iter()
    .filter(|(_, given)| *given)
    .map(|(k, _)| k.to_string())
    .collect();
    if found.len() != 1 {
        return Err(Problem::DataSource { section, found });
    }
    let Some(repo) = hub else {
        let given = [
            ("revision", keys.revision.is_some()),
            ("config", keys.config.is_some()),
            ("split", keys.split.is_some()),
            ("column", keys.column.is_some()),
            ("files", keys.files.is_some()),
        ];
        if let Some((key, _)) = given.iter().find(|(_, g)| *g) {
            return Err(Problem::HubKeyWithoutHub { section, key });
        }
        return Ok(match (text, dataset) {
            (Some(path), _) => DataSource::Text(path.clone()),
            (_, Some(name)) => DataSource::Named(name),
            _ => unreachable!("exactly one source was found"),
        });
    };
    let mut parts = repo.split('/');
    let valid = matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(org), Some(name), None) if !org.is_empty() && !name.is_empty()
    );
    if !valid {
        return Err(Problem::InvalidDataHubId {
            section,
            id: repo.clone(),
        });
    }
    let files = keys.files.clone().unwrap_or_default();
    if files.is_empty() && keys.split.is_none() {
        return Err(Problem::HubSplitMissing { section });
    }
    // Paths inside the repository: plain names separated by `/`, never leaving it.
    let plain = |name: &str| {
        !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains(['\\', ':'])
            && !name.chars().any(char::is_control)
    };
    if let Some(file) = files.iter().find(|f| !f.split('/').all(plain)) {
        return Err(Problem::BadHubFile {
            section,
            file: file.clone(),
        });
    }
    Ok(DataSource::Hub(HubData {
        repo: repo.clone(),
        revision: keys.revision.clone(),
        config: keys.config.clone(),
        split: keys.split.clone(),
        column: keys.column.clone().unwrap_or_else(|| "text".to_owned()),
        files,
    }))
}

fn default_nsamples() -> usize {
    128
}

fn default_seqlen() -> usize {
    2048
}
