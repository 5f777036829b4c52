//! Run records: one `results/<pipeline>/<cell-id>/run.json` per finished cell, with stable
//! top-level keys (`cell`, `config`, `effective`, `metrics`, `sparsity`, `timings`, `memory`,
//! `versions`, `hashes`). Written atomically (temp file in the same folder, fsync, rename), so
//! a crash leaves either the old record or the new one, and an interrupted sweep resumes by
//! skipping cells whose record exists and names the same cell.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::data::sets::Provenance;

use super::plan::{Cell, CellId, Plan};
use crate::prune::experts::ExpertsReport;
use crate::prune::layerwise::ModelSparsity;
use crate::sys::io::IoBytes;
use crate::sys::write_atomic;

/// Version of the record layout; bumped on incompatible changes.
pub const RECORD_VERSION: u32 = 1;

/// The record's file name inside a cell folder.
pub const RECORD_FILE: &str = "run.json";

/// Everything a finished cell reports, each number with how it was obtained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Which cell of which pipeline.
    pub cell: CellRecord,
    /// The cell's resolved config (what its id hashes).
    pub config: serde_json::Value,
    /// Settings in force after the gate, and the run's seed and device.
    pub effective: Effective,
    /// Evaluation results.
    #[serde(default)]
    pub metrics: Metrics,
    /// Measured sparsity of the pruned weights.
    #[serde(default)]
    pub sparsity: RecordedSparsity,
    /// The experts an expert-pruning stage removed, per layer, with their saliencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<ExpertsReport>,
    /// Wall time per stage.
    #[serde(default)]
    pub timings: Timings,
    /// Peak memory overall and per stage.
    #[serde(default)]
    pub memory: MemoryReport,
    /// Tool versions and the record layout version.
    pub versions: Versions,
    /// Content hashes of the inputs.
    #[serde(default)]
    pub hashes: Hashes,
    /// Where hub data sets came from (absent for text files).
    #[serde(default, skip_serializing_if = "DataRecord::is_empty")]
    pub data: DataRecord,
}

/// Identifies the cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellRecord {
    /// Stable id (hash of `config`).
    pub id: CellId,
    /// Readable label, e.g. `wanda-0.5-unstructured`.
    pub label: String,
    /// The pipeline's name.
    pub pipeline: String,
    /// The swept keys and this cell's values.
    #[serde(default)]
    pub values: BTreeMap<String, serde_json::Value>,
    /// The pipeline file, whose folder anchors the config's relative paths: absolute in memory,
    /// relative to the record's folder in run.json, so a results folder committed beside its
    /// pipelines still finds them after a clone elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_file: Option<PathBuf>,
}

/// Settings in force for the run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Effective {
    /// The seed of every random choice.
    pub seed: u64,
    /// The device the run used (`cpu`, `cuda:0`), after resolving `auto`.
    pub device: String,
    /// Calibration sequences actually used (after the gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsamples: Option<usize>,
    /// Calibration sequence length actually used (after the gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seqlen: Option<usize>,
    /// Evaluation window actually used (after the gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_seqlen: Option<usize>,
    /// Whether layer streaming was on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub streaming: bool,
    /// What the gate decided, in words (e.g. "reduced nsamples 128 → 64 to fit 12GiB").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
}

/// Evaluation results.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Metrics {
    /// Perplexity on `evaluation.text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perplexity: Option<f64>,
    /// Zero-shot accuracy per task and their mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zeroshot: Option<crate::eval::zeroshot::ZeroshotMetrics>,
    /// Further metrics by name.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// The measured sparsity of a cell's pruned model as run.json records it (fractions only).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RecordedSparsity {
    /// Zeros over all prunable weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// Per decoder layer, by checkpoint name (`model.layers.0`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub layers: BTreeMap<String, f64>,
    /// Per linear, by checkpoint name (`model.layers.0.self_attn.q_proj`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub linears: BTreeMap<String, f64>,
    /// Per decoder layer, the sparsity a per-layer profile pruned it at.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layer_targets: Vec<f64>,
    /// Per decoder layer, OWL's outlier ratio (percent) on the dense model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outlier_ratios: Vec<f64>,
}

impl From<&ModelSparsity> for RecordedSparsity {
    fn from(report: &ModelSparsity) -> Self {
        Self {
            total: Some(report.total),
            layers: report
                .per_layer
                .iter()
                .enumerate()
                .map(|(i, f)| (format!("model.layers.{i}"), *f))
                .collect(),
            linears: report
                .per_linear
                .iter()
                .map(|(name, s)| (name.clone(), s.fraction))
                .collect(),
            layer_targets: report.layer_targets.clone(),
            outlier_ratios: report.outlier_ratios.clone(),
        }
    }
}

/// Wall-clock times in seconds.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Timings {
    /// The whole cell, shared stages included.
    pub total_s: f64,
    /// Per stage id.
    #[serde(default)]
    pub stages: BTreeMap<String, f64>,
    /// Storage bytes each stage read and wrote (Linux only; page-cache hits are not reads).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub io: BTreeMap<String, IoBytes>,
}

/// Peak memory in bytes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MemoryReport {
    /// Peak resident set of the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// The estimated peak of the run (from the `estimate` stage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_peak_bytes: Option<u64>,
    /// Peak GPU memory (absent on CPU-only machines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_gpu_bytes: Option<u64>,
    /// Per stage id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stages: BTreeMap<String, StageMemory>,
}

/// One stage's peaks.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StageMemory {
    /// Peak resident set while the stage ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// Peak GPU memory while the stage ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_gpu_bytes: Option<u64>,
}

/// Versions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Versions {
    /// [`RECORD_VERSION`] of the writer.
    pub record: u32,
    /// The `wanda` crate version.
    pub wanda: String,
    /// The Burn version, when a model was involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burn: Option<String>,
    /// The git commit `wanda` was built from, when it was built in a git checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
}

impl Default for Versions {
    fn default() -> Self {
        Self {
            record: RECORD_VERSION,
            wanda: env!("CARGO_PKG_VERSION").into(),
            burn: None,
            git_commit: Some(env!("WANDA_GIT_COMMIT"))
                .filter(|c| !c.is_empty())
                .map(str::to_string),
        }
    }
}

/// SHA-256 hex digests of the inputs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Hashes {
    /// The pipeline file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// The model file (or `config.json` + weights).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The calibration text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
    /// The evaluation text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<String>,
}

/// The hub data sets a cell read: repository, revision, commit and each file's SHA-256.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DataRecord {
    /// The calibration data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Provenance>,
    /// The evaluation data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<Provenance>,
    /// Each zero-shot task's documents.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub zeroshot: BTreeMap<String, Provenance>,
}

impl DataRecord {
    /// Whether no hub data set was read.
    pub fn is_empty(&self) -> bool {
        self.calibration.is_none() && self.evaluation.is_none() && self.zeroshot.is_empty()
    }
}

/// Reading or writing a run record failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file could not be read.
    #[error("`{path}`: cannot read run record", path = .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file could not be written.
    #[error("`{path}`: cannot write run record", path = .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid JSON (e.g. truncated).
    #[error("`{path}`: corrupt run record (not valid json)", path = .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// The file is JSON but not a run record this version reads.
    #[error("`{path}`: not a wanda run record: {reason}", path = .path.display())]
    Foreign {
        /// The file.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
}

impl RunRecord {
    /// A record for a cell with what the plan knows; the runner fills in the rest.
    pub fn new(plan: &Plan, cell: &Cell) -> Self {
        Self {
            cell: CellRecord {
                id: cell.id.clone(),
                label: cell.label.clone(),
                pipeline: plan.name().to_string(),
                values: cell.values.iter().cloned().collect(),
                pipeline_file: std::path::absolute(&plan.file).ok(),
            },
            config: cell.config.clone(),
            effective: Effective {
                seed: cell.spec.settings.seed,
                device: cell.spec.settings.device.to_string(),
                nsamples: cell.spec.settings.calibration.as_ref().map(|c| c.nsamples),
                seqlen: cell.spec.settings.calibration.as_ref().map(|c| c.seqlen),
                eval_seqlen: cell.spec.settings.evaluation.as_ref().map(|e| e.seqlen),
                streaming: false,
                gate: None,
            },
            metrics: Metrics::default(),
            sparsity: RecordedSparsity::default(),
            experts: None,
            timings: Timings::default(),
            memory: MemoryReport::default(),
            versions: Versions::default(),
            hashes: Hashes::default(),
            data: DataRecord::default(),
        }
    }

    /// Where a cell's record lives: `<results_dir>/<cell-id>/run.json`.
    pub fn path(results_dir: &Path, cell: &CellId) -> PathBuf {
        results_dir.join(&cell.0).join(RECORD_FILE)
    }

    /// Writes the record atomically to `path`, creating its folder.
    pub fn write(&self, path: &Path) -> Result<(), RecordError> {
        let mut stored = self.clone();
        let record_dir = path.parent().and_then(|d| std::path::absolute(d).ok());
        if let (Some(file), Some(dir)) = (&self.cell.pipeline_file, record_dir) {
            stored.cell.pipeline_file = Some(relative_path(file, &dir).unwrap_or(file.clone()));
        }
        let mut text = serde_json::to_string_pretty(&stored).map_err(|e| RecordError::Write {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
        text.push('\n');
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|source| RecordError::Write {
                path: path.to_path_buf(),
                source,
            })?;
        }
        write_atomic(path, text.as_bytes()).map_err(|source| RecordError::Write {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Reads a record, telling corrupt files (not JSON) from foreign ones (JSON, not a record).
    pub fn read(path: &Path) -> Result<RunRecord, RecordError> {
        let bytes = fs::read(path).map_err(|source| RecordError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|source| RecordError::Corrupt {
                path: path.to_path_buf(),
                source,
            })?;
        let foreign = |reason: String| RecordError::Foreign {
            path: path.to_path_buf(),
            reason,
        };
        let Some(object) = value.as_object() else {
            return Err(foreign("the top level is not an object".into()));
        };
        for key in ["cell", "config", "versions"] {
            if !object.contains_key(key) {
                return Err(foreign(format!("key `{key}` is missing")));
            }
        }
        match object["versions"].get("record").and_then(|v| v.as_u64()) {
            Some(v) if v == u64::from(RECORD_VERSION) => {}
            Some(v) => {
                return Err(foreign(format!(
                    "record version `{v}`, this wanda reads version `{RECORD_VERSION}`"
                )))
            }
            None => return Err(foreign("key `versions.record` is missing".into())),
        }
        let mut record: RunRecord =
            serde_json::from_value(value).map_err(|e| foreign(e.to_string()))?;
        if let Some(file) = record
            .cell
            .pipeline_file
            .as_mut()
            .filter(|f| f.is_relative())
        {
            let dir = path.parent().unwrap_or(Path::new("."));
            let dir = std::path::absolute(dir).unwrap_or(dir.to_path_buf());
            *file = normalize_lexically(&dir.join(&*file));
        }
        Ok(record)
    }
}

/// `target` as a path relative to the folder `base` (both absolute), or `None` when they share
/// no root.
pub fn relative_path(target: &Path, base: &Path) -> Option<PathBuf> {
    let (target, base) = (normalize_lexically(target), normalize_lexically(base));
    let (target, base): (Vec<_>, Vec<_>) =
        (target.components().collect(), base.components().collect());
    if target.first() != base.first() {
        return None;
    }
    let common = target.iter().zip(&base).take_while(|(a, b)| a == b).count();
    let mut relative: PathBuf = base[common..].iter().map(|_| "..").collect();
    relative.extend(&target[common..]);
    Some(relative)
}

/// `path` with `.` dropped and each `..` taking away the component before it, without touching
/// the file system.
fn normalize_lexically(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether a cell has finished: its `run.json` exists, parses, and names the same cell.
pub fn cell_is_finished(results_dir: &Path, cell: &CellId) -> bool {
    RunRecord::read(&RunRecord::path(results_dir, cell)).is_ok_and(|r| &r.cell.id == cell)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: &str) -> RunRecord {
        RunRecord {
            cell: CellRecord {
                id: CellId(id.into()),
                label: "wanda-0.5-unstructured".into(),
                pipeline: "p".into(),
                values: BTreeMap::new(),
                pipeline_file: None,
            },
            config: serde_json::json!({ "seed": 0 }),
            effective: Effective {
                seed: 0,
                device: "cpu".into(),
                nsamples: Some(128),
                seqlen: Some(2048),
                eval_seqlen: Some(2048),
                streaming: false,
                gate: None,
            },
            metrics: Metrics {
                perplexity: Some(12.5),
                zeroshot: None,
                other: BTreeMap::new(),
            },
            sparsity: RecordedSparsity {
                total: Some(0.5),
                ..RecordedSparsity::default()
            },
            experts: None,
            timings: Timings::default(),
            memory: MemoryReport::default(),
            versions: Versions::default(),
            hashes: Hashes::default(),
            data: DataRecord::default(),
        }
    }

    #[test]
    fn top_level_keys_are_stable() {
        let value = serde_json::to_value(sample("abc")).expect("serialisable");
        let keys: Vec<&str> = value
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = [
            "cell",
            "config",
            "effective",
            "metrics",
            "sparsity",
            "timings",
            "memory",
            "versions",
            "hashes",
        ];
        expected.sort_unstable();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(keys, expected);
        assert_eq!(value["metrics"]["perplexity"], 12.5);
        assert_eq!(value["sparsity"]["total"], 0.5);
    }

    #[test]
    fn the_pipeline_file_is_stored_relative_to_the_record_and_found_after_a_move() {
        let root = tempfile::tempdir().expect("temp dir");
        let repo = root.path().join("repo");
        let pipeline = repo.join("pipelines/sweep.yaml");
        let path = RunRecord::path(&repo.join("results/sweep"), &CellId("abc123abc123".into()));
        let mut record = sample("abc123abc123");
        record.cell.pipeline_file = Some(pipeline.clone());
        record.write(&path).expect("written");
        let text = fs::read_to_string(&path).expect("readable");
        let stored: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(
            stored["cell"]["pipeline_file"], "../../../pipelines/sweep.yaml",
            "{text}"
        );
        assert_eq!(RunRecord::read(&path).expect("readable"), record);
        // The whole repository moves (a clone elsewhere): the record follows it.
        let moved = root.path().join("elsewhere/clone");
        fs::create_dir_all(moved.parent().expect("parent")).expect("created");
        fs::rename(&repo, &moved).expect("moved");
        let read =
            RunRecord::read(&moved.join("results/sweep/abc123abc123/run.json")).expect("readable");
        assert_eq!(
            read.cell.pipeline_file,
            Some(moved.join("pipelines/sweep.yaml"))
        );
    }

    #[test]
    fn relative_paths_climb_to_the_common_folder() {
        let rel = |t: &str, b: &str| relative_path(Path::new(t), Path::new(b));
        assert_eq!(rel("/a/b/c.yaml", "/a/b"), Some(PathBuf::from("c.yaml")));
        assert_eq!(
            rel("/a/p/c.yaml", "/a/r/s"),
            Some(PathBuf::from("../../p/c.yaml"))
        );
        assert_eq!(rel("/a/./p/../c.yaml", "/a"), Some(PathBuf::from("c.yaml")));
        assert_eq!(rel("/c.yaml", "/x/y"), Some(PathBuf::from("../../c.yaml")));
    }

    #[test]
    fn write_then_read_round_trips_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = RunRecord::path(dir.path(), &CellId("abc123abc123".into()));
        let record = sample("abc123abc123");
        record.write(&path).expect("written");
        record.write(&path).expect("overwritten");
        assert_eq!(RunRecord::read(&path).expect("readable"), record);
        let names: Vec<_> = fs::read_dir(path.parent().expect("folder"))
            .expect("listable")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(RECORD_FILE)]);
        assert!(cell_is_finished(dir.path(), &CellId("abc123abc123".into())));
    }

    #[test]
    fn a_record_naming_another_cell_does_not_finish_this_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let id = CellId("aaaaaaaaaaaa".into());
        sample("bbbbbbbbbbbb")
            .write(&RunRecord::path(dir.path(), &id))
            .expect("written");
        assert!(!cell_is_finished(dir.path(), &id));
        assert!(!cell_is_finished(
            dir.path(),
            &CellId("cccccccccccc".into())
        ));
    }

    #[test]
    fn corrupt_and_foreign_files_are_told_apart_and_name_the_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let corrupt = dir.path().join("corrupt.json");
        fs::write(&corrupt, "{\"cell\": {\"id\": ").expect("written");
        let err = RunRecord::read(&corrupt).expect_err("truncated json");
        assert!(matches!(err, RecordError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains("corrupt.json"), "{err}");

        let foreign = dir.path().join("package.json");
        fs::write(&foreign, "{\"name\": \"left-pad\"}").expect("written");
        let err = RunRecord::read(&foreign).expect_err("not a record");
        assert!(matches!(err, RecordError::Foreign { .. }), "{err:?}");
        assert!(err.to_string().contains("package.json"), "{err}");
        assert!(err.to_string().contains("`cell`"), "{err}");
        assert!(!cell_is_finished(dir.path(), &CellId("x".into())));
    }

    #[test]
    fn newer_record_versions_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("run.json");
        let mut value = serde_json::to_value(sample("abc")).expect("serialisable");
        value["versions"]["record"] = 99.into();
        fs::write(&path, value.to_string()).expect("written");
        let err = RunRecord::read(&path).expect_err("newer version");
        assert!(err.to_string().contains("record version `99`"), "{err}");
    }
}
