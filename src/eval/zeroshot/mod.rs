//! Zero-shot accuracy, the other half of the paper's tables: lm-evaluation-harness's
//! multiple-choice tasks ([`tasks`]) scored natively ([`loglik`]), with lm-eval's metrics.
//!
//! Per document, each choice's loglikelihood is computed; `acc` is 1 when the largest is the
//! gold choice, `acc_norm` when the largest loglikelihood divided by the choice's length in
//! characters is (the first maximum wins, as `np.argmax`). Each metric's standard error is
//! lm-eval's `mean_stderr`: the sample standard deviation (n − 1) over √n.

pub mod loglik;
pub mod tasks;

use std::collections::BTreeMap;
use std::path::Path;

use burn::prelude::Backend;
use serde::{Deserialize, Serialize};

use crate::data::hub::HubRequest;
use crate::data::records::Record;
use crate::data::sets::{self, DataError, Provenance};
use crate::data::TextEncoder;
use crate::model::arch::LlamaConfig;
use crate::model::checkpoint::Layers;
use loglik::{encode_pair, loglikelihoods, EncodedPair};
pub use tasks::{Document, Task, LM_EVAL_VERSION};

/// Why a task could not be scored.
#[derive(Debug, thiserror::Error)]
pub enum ZeroshotError {
    /// The task's documents could not be read.
    #[error("{task}: {cause}")]
    Data {
        /// The task.
        task: &'static str,
        /// What went wrong (in the message, not repeated as a cause).
        cause: DataError,
    },
    /// A document does not have the task's schema.
    #[error("{task}: document {index}: {message}")]
    Document {
        /// The task.
        task: &'static str,
        /// Its position in the split.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The split has no documents.
    #[error("{task}: the split has no documents")]
    Empty {
        /// The task.
        task: &'static str,
    },
    /// The tokenizer failed.
    #[error("{task}: cannot tokenise document {index}: {message}")]
    Tokenize {
        /// The task.
        task: &'static str,
        /// The document.
        index: usize,
        /// The tokenizer's message.
        message: String,
    },
    /// A streamed layer could not be read.
    #[error("{0}")]
    Layers(String),
}

/// Where task documents come from.
#[derive(Debug, Clone, Copy)]
pub enum TaskSource<'a> {
    /// The hub (through its cache, offline when it says so).
    Hub(&'a HubRequest),
    /// A local folder laid out like the hub repositories: `{dir}/{repo}/{config}/{split}-*`.
    Local(&'a Path),
}

/// The first `limit` documents of `task`'s scored split, and where they came from.
pub fn task_documents(
    task: Task,
    source: TaskSource<'_>,
    limit: Option<usize>,
) -> Result<(Vec<Document>, Provenance), ZeroshotError> {
    let data = task.data();
    let (records, provenance) = match source {
        TaskSource::Hub(hub) => sets::split_records(data.repo, data.config, data.split, limit, hub),
        TaskSource::Local(dir) => {
            sets::local_split_records(dir, data.repo, data.config, data.split, limit)
        }
    }
    .map_err(|cause| ZeroshotError::Data {
        task: task.name(),
        cause,
    })?;
    let documents = documents_of(task, &records)?;
    Ok((documents, provenance))
}

/// The documents of `records` under `task`.
fn documents_of(task: Task, records: &[Record]) -> Result<Vec<Document>, ZeroshotError> {
    if records.is_empty() {
        return Err(ZeroshotError::Empty { task: task.name() });
    }
    records
        .iter()
        .enumerate()
        .map(|(index, record)| {
            task.document(record)
                .map_err(|message| ZeroshotError::Document {
                    task: task.name(),
                    index,
                    message,
                })
        })
        .collect()
}

/// One task's metrics, as run records keep them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskScore {
    /// Accuracy: the choice with the largest loglikelihood is the gold one.
    pub acc: f64,
    /// Its standard error (`None` for a single document).
    pub acc_stderr: Option<f64>,
    /// Length-normalised accuracy, for the tasks lm-eval reports it for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acc_norm: Option<f64>,
    /// Its standard error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acc_norm_stderr: Option<f64>,
    /// Documents scored.
    pub n: usize,
}

/// One document's outcome (what lm-eval's `--log_samples` shows).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DocumentScore {
    /// The document's position in the split.
    pub doc_id: usize,
    /// The loglikelihood of each choice.
    pub loglikelihoods: Vec<f64>,
    /// The gold choice.
    pub gold: usize,
    /// Whether the largest loglikelihood is the gold choice's.
    pub acc: bool,
    /// Whether the largest length-normalised loglikelihood is.
    pub acc_norm: bool,
    /// `(context, continuation)` per choice.
    pub requests: Vec<(String, String)>,
}

/// Scores `documents` of `task` on `model`: every choice's loglikelihood, then the metrics.
/// `prefix_token` conditions an empty context; `max_length` is the model's context.
pub fn score_task<B: Backend, T: TextEncoder>(
    model: &impl Layers<B>,
    tokenizer: &T,
    task: Task,
    documents: &[Document],
    prefix_token: u32,
    max_length: usize,
    progress: impl FnMut(usize, usize),
) -> Result<(TaskScore, Vec<DocumentScore>), ZeroshotError>
where
    T::Error: std::fmt::Display,
{
    let mut pairs: Vec<EncodedPair> = Vec::new();
    let mut owners: Vec<usize> = Vec::new();
    for (index, doc) in documents.iter().enumerate() {
        for (context, continuation) in &doc.requests {
            owners.push(index);
            pairs.push(
                encode_pair(tokenizer, context, continuation, prefix_token).map_err(|e| {
                    ZeroshotError::Tokenize {
                        task: task.name(),
                        index,
                        message: e.to_string(),
                    }
                })?,
            );
        }
    }
    let lls = loglikelihoods(model, &pairs, &owners, max_length, progress)
        .map_err(|e| ZeroshotError::Layers(e.to_string()))?;
    let mut lls = lls.into_iter();
    let scores: Vec<DocumentScore> = documents
        .iter()
        .enumerate()
        .map(|(doc_id, doc)| {
            let loglikelihoods: Vec<f64> = lls.by_ref().take(doc.requests.len()).collect();
            let normalised: Vec<f64> = loglikelihoods
                .iter()
                .zip(&doc.choices)
                .map(|(ll, choice)| ll / choice.chars().count() as f64)
                .collect();
            DocumentScore {
                doc_id,
                acc: first_max(&loglikelihoods) == Some(doc.gold),
                acc_norm: first_max(&normalised) == Some(doc.gold),
                gold: doc.gold,
                loglikelihoods,
                requests: doc.requests.clone(),
            }
        })
        .collect();
    let acc: Vec<f64> = scores.iter().map(|s| f64::from(u8::from(s.acc))).collect();
    let norm: Vec<f64> = scores
        .iter()
        .map(|s| f64::from(u8::from(s.acc_norm)))
        .collect();
    let score = TaskScore {
        acc: mean(&acc),
        acc_stderr: mean_stderr(&acc),
        acc_norm: task.has_acc_norm().then(|| mean(&norm)),
        acc_norm_stderr: task.has_acc_norm().then(|| mean_stderr(&norm)).flatten(),
        n: scores.len(),
    };
    Ok((score, scores))
}

/// Every task of a zero-shot evaluation: metrics, per-document outcomes, data provenance and
/// seconds, by task name.
#[derive(Debug, Clone)]
pub struct ZeroshotRun {
    /// The metrics, for the run record.
    pub metrics: ZeroshotMetrics,
    /// Per task, each document's outcome.
    pub samples: BTreeMap<String, Vec<DocumentScore>>,
    /// Per task, where its documents came from.
    pub data: BTreeMap<String, Provenance>,
    /// Per task, seconds spent scoring (tokenising included, reading excluded).
    pub seconds: BTreeMap<String, f64>,
}

/// Reads and scores each of `tasks` (the first `limit` documents of each) on `model`, whose
/// configuration is `config`: its context is lm-eval's `max_length`, and its BOS token (else
/// EOS) lm-eval's `prefix_token_id`, which conditions an empty context.
/// `progress(task, done, total)` follows the requests of each task.
pub fn evaluate<B: Backend, T: TextEncoder>(
    model: &impl Layers<B>,
    tokenizer: &T,
    config: &LlamaConfig,
    tasks: &[Task],
    source: TaskSource<'_>,
    limit: Option<usize>,
    mut progress: impl FnMut(&str, usize, usize),
) -> Result<ZeroshotRun, ZeroshotError>
where
    T::Error: std::fmt::Display,
{
    let mut scores = BTreeMap::new();
    let mut run = ZeroshotRun {
        metrics: ZeroshotMetrics::default(),
        samples: BTreeMap::new(),
        data: BTreeMap::new(),
        seconds: BTreeMap::new(),
    };
    for &task in tasks {
        let (documents, provenance) = task_documents(task, source, limit)?;
        let started = std::time::Instant::now();
        let (score, samples) = score_task(
            model,
            tokenizer,
            task,
            &documents,
            config.bos_token_id.or(config.eos_token_id).unwrap_or(0),
            config.max_position_embeddings,
            |done, total| progress(task.name(), done, total),
        )?;
        let name = task.name().to_owned();
        run.seconds
            .insert(name.clone(), started.elapsed().as_secs_f64());
        scores.insert(name.clone(), score);
        run.samples.insert(name.clone(), samples);
        run.data.insert(name, provenance);
    }
    run.metrics = ZeroshotMetrics::new(scores);
    Ok(run)
}

/// The index of the first largest value (`np.argmax`; NaN never wins).
fn first_max(values: &[f64]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &v) in values.iter().enumerate() {
        if best.is_none_or(|b| v > values[b]) && !v.is_nan() {
            best = Some(i);
        }
    }
    best
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// lm-eval's `mean_stderr`: the sample standard deviation (n − 1) over √n; `None` below two
/// values.
fn mean_stderr(values: &[f64]) -> Option<f64> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mu = mean(values);
    let variance = values.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / (n - 1) as f64;
    Some(variance.sqrt() / (n as f64).sqrt())
}

/// Zero-shot results as run records keep them: per task, the mean of `acc` over the tasks, and
/// which lm-eval release's task definitions were used.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ZeroshotMetrics {
    /// Per task, by lm-eval's name.
    #[serde(flatten)]
    pub tasks: BTreeMap<String, TaskScore>,
    /// The mean of the tasks' `acc`.
    pub mean: f64,
    /// The lm-eval release whose task definitions were scored.
    pub lm_eval: String,
}

impl ZeroshotMetrics {
    /// The record of `scores`.
    pub fn new(scores: BTreeMap<String, TaskScore>) -> Self {
        let accs: Vec<f64> = scores.values().map(|s| s.acc).collect();
        ZeroshotMetrics {
            mean: mean(&accs),
            tasks: scores,
            lm_eval: LM_EVAL_VERSION.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_first_maximum() {
        assert_eq!(first_max(&[-2.0, -1.0, -1.0]), Some(1));
        assert_eq!(first_max(&[f64::NAN, -3.0]), Some(1));
        assert_eq!(first_max(&[]), None);
    }

    #[test]
    fn stderr_by_hand() {
        // [1, 0, 1, 1]: mean 0.75, sample variance (3·0.0625 + 0.5625)/3 = 0.25, stderr 0.5/2.
        assert_eq!(mean_stderr(&[1.0, 0.0, 1.0, 1.0]), Some(0.25));
        assert_eq!(mean_stderr(&[1.0]), None);
    }

    #[test]
    fn metrics_mean_is_over_tasks() {
        let score = |acc| TaskScore {
            acc,
            acc_stderr: None,
            acc_norm: None,
            acc_norm_stderr: None,
            n: 1,
        };
        let m = ZeroshotMetrics::new(BTreeMap::from([
            ("boolq".to_owned(), score(0.5)),
            ("rte".to_owned(), score(0.7)),
        ]));
        assert!((m.mean - 0.6).abs() < 1e-12);
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["boolq"]["acc"], 0.5);
        assert_eq!(json["lm_eval"], LM_EVAL_VERSION);
    }
}
