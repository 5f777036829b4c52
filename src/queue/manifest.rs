//! The cell manifest: every expanded cell of a pipeline with its index, stable id, resolved
//! config and the path its `run.json` will have. Deterministic — the same pipeline, overrides
//! and results folder give the same bytes — so it can be diffed, committed, and handed to a
//! job array whose task ids are the cell indices.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pipeline::{Plan, RunRecord};
use crate::sys::write_atomic;

/// The manifest of one pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The pipeline's name.
    pub pipeline: String,
    /// The pipeline file, absolute.
    pub file: PathBuf,
    /// The `--set KEY=VALUE` overrides the cells were expanded with.
    pub overrides: Vec<String>,
    /// `results/<pipeline>`, absolute: one folder per cell below it.
    pub results_dir: PathBuf,
    /// Every cell, in sweep order.
    pub cells: Vec<ManifestCell>,
}

/// One cell of the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestCell {
    /// Position in the sweep: `wanda run FILE --cell-index INDEX` runs it.
    pub index: usize,
    /// The stable id (SHA-256 prefix of the resolved config).
    pub id: String,
    /// The readable label.
    pub label: String,
    /// The swept keys and their values for this cell, in sweep order.
    pub values: Vec<SweptValue>,
    /// The resolved config the id hashes.
    pub config: serde_json::Value,
    /// Where its `run.json` goes.
    pub result: PathBuf,
}

/// One swept key's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweptValue {
    /// The dotted key, e.g. `prune.sparsity`.
    pub key: String,
    /// Its value in this cell.
    pub value: serde_json::Value,
}

/// Errors reading a manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file cannot be read.
    #[error("cannot read manifest `{path}`: {source}")]
    Io {
        /// The manifest path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a manifest.
    #[error("`{path}` is not a wanda manifest: {source}; write one with `wanda plan FILE --manifest PATH`")]
    Parse {
        /// The manifest path.
        path: String,
        /// The JSON error.
        source: serde_json::Error,
    },
}

impl Manifest {
    /// The manifest of `plan` (expanded with `overrides`), its cells below `results_dir`
    /// (`results/<pipeline>`).
    pub fn new(plan: &Plan, overrides: &[String], results_dir: &Path) -> Self {
        let results_dir = absolute(results_dir);
        Self {
            pipeline: plan.name().to_string(),
            file: absolute(&plan.file),
            overrides: overrides.to_vec(),
            cells: plan
                .cells
                .iter()
                .map(|cell| ManifestCell {
                    index: cell.index,
                    id: cell.id.0.clone(),
                    label: cell.label.clone(),
                    values: cell
                        .values
                        .iter()
                        .map(|(key, value)| SweptValue {
                            key: key.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                    config: cell.config.clone(),
                    result: RunRecord::path(&results_dir, &cell.id),
                })
                .collect(),
            results_dir,
        }
    }

    /// Pretty JSON with a final newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a manifest always serialises");
        text.push('\n');
        text
    }

    /// Writes the manifest atomically, creating its folder.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        write_atomic(path, self.to_json().as_bytes())
    }

    /// Reads a manifest.
    pub fn read(path: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read(path).map_err(|source| ManifestError::Io {
            path: path.display().to_string(),
            source,
        })?;
        serde_json::from_slice(&text).map_err(|source| ManifestError::Parse {
            path: path.display().to_string(),
            source,
        })
    }
}

/// `path` made absolute against the working directory (not resolving links, so the paths
/// stay the ones the user typed, anchored).
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::{validate_source, ValidateOptions};

    const SWEEP: &str = r#"name: m
seed: 0
device: cpu
model: { path: model.gguf }
calibration: { text: calib.txt, nsamples: 4, seqlen: 16 }
evaluation: { text: eval.txt, seqlen: 16 }
stages:
  load: {}
  calibrate: {}
  prune: { method: wanda, sparsity: 0.5 }
  eval: {}
sweep:
  prune.method: [magnitude, wanda]
  prune.sparsity: [0.2, 0.4]
"#;

    #[test]
    fn a_manifest_lists_every_cell_with_its_result_path_and_is_deterministic() {
        let options = ValidateOptions {
            overrides: Vec::new(),
            check_files: false,
        };
        let plan = validate_source(SWEEP, Path::new("/p/m.yaml"), &options).unwrap();
        let a = Manifest::new(&plan, &[], Path::new("/r/m"));
        let b = Manifest::new(&plan, &[], Path::new("/r/m"));
        assert_eq!(a.to_json(), b.to_json());
        assert_eq!(a.cells.len(), 4);
        let labels: Vec<&str> = a.cells.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "magnitude-0.2-unstructured",
                "magnitude-0.4-unstructured",
                "wanda-0.2-unstructured",
                "wanda-0.4-unstructured"
            ]
        );
        for (i, cell) in a.cells.iter().enumerate() {
            assert_eq!(cell.index, i);
            assert_eq!(cell.id, plan.cells[i].id.0);
            assert_eq!(
                cell.result,
                Path::new("/r/m").join(&cell.id).join("run.json")
            );
            assert_eq!(cell.values.len(), 2);
        }
        assert_eq!(a.cells[3].values[1].value, serde_json::json!(0.4));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/manifest.json");
        a.write(&path).unwrap();
        assert_eq!(Manifest::read(&path).unwrap(), a);
        std::fs::write(&path, "{}").unwrap();
        let error = Manifest::read(&path).unwrap_err().to_string();
        assert!(error.contains("is not a wanda manifest"), "{error}");
    }
}
