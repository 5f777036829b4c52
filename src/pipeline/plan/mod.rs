//! Validation and planning: pipeline file → [`Plan`], in milliseconds and without a tensor.
//!
//! Steps: read the YAML into a positioned tree; apply `--set` overrides to the tree (so they
//! are type-checked exactly like the file); read the typed spec; check the stage graph (ids,
//! `needs:`, cycles); resolve the sweep keys; expand the sweep into cells, each read again from
//! a copy of the tree with its values put in place (so a bad sweep value is reported at the
//! value); check each cell (ranges, patterns, files, the artifacts every stage needs); then
//! build the DAG: shared stages once, per-cell stages once per cell.
//!
//! A stage is per-cell when a swept key belongs to it (`prune.sparsity` → `prune`;
//! `calibration.*` and `seed` → `calibrate`; `evaluation.*` → `eval`) or when it needs a
//! per-cell stage. Every other stage is shared and covers all cells — `estimate` and `gate`
//! therefore see every cell's settings and must plan for the worst case.
//!
//! This file holds the plan's types, `--set` overrides and the steps in order; the stage graph
//! is in [`graph`], the sweep and cell ids in [`sweep`], the per-cell checks in [`checks`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::pipeline::error::{nearest, Diagnostic, PathKind, Problem, ValidationError};
pub use crate::pipeline::kinds::ArtifactKind;
use crate::pipeline::spec::{
    self, Parsed, Pattern, PipelineSpec, StageKind, StageLayout, StageOptions, StageSpec, Sweep,
};
use crate::pipeline::yaml::{self, Entry, KeyPath, Node, Origin, Seg, Value};

mod checks;
mod graph;
mod render;
mod sweep;

pub use render::GraphFormat;

use checks::{check_cell, CellProblems, Checker};
use graph::{build_graph, check_stage_graph};
use sweep::{expand_cells, resolve_sweep_keys, Owner, Target};

/// The artifacts a stage needs from upstream; `prune` needs calibration unless it is plain
/// `magnitude` (see [`crate::pipeline::spec::PruneOptions::needs_calibration`]).
pub fn requires(options: &StageOptions) -> Vec<ArtifactKind> {
    match options {
        StageOptions::Load(_) => vec![],
        StageOptions::Estimate(_) => vec![ArtifactKind::Model],
        StageOptions::Gate(_) => vec![ArtifactKind::Estimate],
        StageOptions::Calibrate(_) => vec![ArtifactKind::Model],
        StageOptions::Prune(p) if p.needs_calibration() => {
            vec![ArtifactKind::Model, ArtifactKind::Calibration]
        }
        StageOptions::Prune(_) => vec![ArtifactKind::Model],
        StageOptions::Eval(_) => vec![ArtifactKind::Model],
        StageOptions::Save(_) => vec![ArtifactKind::Model],
    }
}

/// The artifacts a stage of this kind produces.
pub fn produces(kind: StageKind) -> Vec<ArtifactKind> {
    match kind {
        StageKind::Load | StageKind::Prune => vec![ArtifactKind::Model],
        StageKind::Estimate => vec![ArtifactKind::Estimate],
        StageKind::Gate => vec![ArtifactKind::EffectiveSettings],
        StageKind::Calibrate => vec![ArtifactKind::Calibration],
        StageKind::Eval => vec![ArtifactKind::Metrics],
        StageKind::Save => vec![ArtifactKind::SavedModel],
    }
}

/// A cell's stable id: the first 12 hex digits of the SHA-256 of its canonical config.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct CellId(pub String);

impl fmt::Display for CellId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One point of the sweep (the only one without a sweep).
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Position in the sweep, 0-based (first axis varies slowest).
    pub index: usize,
    /// Stable id from the resolved config.
    pub id: CellId,
    /// Readable label, e.g. `wanda-0.5-unstructured`.
    pub label: String,
    /// The swept keys and this cell's values, in sweep order.
    pub values: Vec<(String, serde_json::Value)>,
    /// The resolved pipeline for this cell: sweep values in place, N:M sparsity filled in,
    /// no sweep.
    pub spec: PipelineSpec,
    /// The canonical config the id hashes: `spec` without `name` and `device`, which do not
    /// change results' meaning (device choice is an execution detail).
    pub config: serde_json::Value,
}

/// Whether a DAG node runs once or once per cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Runs once; its artifacts serve these cells (all of them).
    Shared {
        /// Indices of the cells covered.
        cells: Vec<usize>,
    },
    /// Runs for one cell.
    Cell(usize),
}

/// A node of the DAG: one stage, for all cells or for one.
#[derive(Debug, Clone, PartialEq)]
pub struct StageNode {
    /// The stage id from the file.
    pub stage: String,
    /// The kind.
    pub kind: StageKind,
    /// The options (the cell's, for a per-cell node).
    pub options: StageOptions,
    /// Shared or per cell.
    pub scope: Scope,
    /// Artifacts it needs from upstream.
    pub requires: Vec<ArtifactKind>,
    /// Artifacts it makes.
    pub produces: Vec<ArtifactKind>,
}

impl StageNode {
    /// Whether the node runs once for all cells.
    pub fn is_shared(&self) -> bool {
        matches!(self.scope, Scope::Shared { .. })
    }
}

/// A validated pipeline: cells and the stage DAG. Built once, never mutated.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The pipeline file, as named by the caller.
    pub file: PathBuf,
    /// The folder relative paths resolve against.
    pub base_dir: PathBuf,
    /// The spec as written, after `--set` overrides.
    pub spec: PipelineSpec,
    /// The sweep cells (one without a sweep).
    pub cells: Vec<Cell>,
    graph: DiGraph<StageNode, ()>,
}

impl Plan {
    /// The pipeline name.
    pub fn name(&self) -> &str {
        &self.spec.settings.name
    }

    /// The DAG. Edges run from a stage to the stages that need it.
    pub fn graph(&self) -> &DiGraph<StageNode, ()> {
        &self.graph
    }

    /// Execution order: shared stages first, then each cell's stages, cell by cell (so a cell
    /// finishes, and can be recorded, before the next starts). A topological order.
    pub fn order(&self) -> impl Iterator<Item = NodeIndex> + '_ {
        self.graph.node_indices()
    }

    /// The node's upstream nodes, in insertion order.
    pub fn needs(&self, node: NodeIndex) -> Vec<NodeIndex> {
        let mut needs: Vec<NodeIndex> = self
            .graph
            .edges_directed(node, Direction::Incoming)
            .map(|e| e.source())
            .collect();
        needs.sort();
        needs
    }

    /// Every node `node` depends on, directly or through others, in execution order.
    pub fn ancestors(&self, node: NodeIndex) -> Vec<NodeIndex> {
        let mut seen: Vec<NodeIndex> = Vec::new();
        let mut stack = self.needs(node);
        while let Some(n) = stack.pop() {
            if !seen.contains(&n) {
                seen.push(n);
                stack.extend(self.needs(n));
            }
        }
        seen.sort();
        seen
    }

    /// Whether one prune stage is the only stage that reads the dense model's weights, so it
    /// may prune the dense model itself instead of a copy (one cell; no evaluation, save or
    /// probe of the dense model).
    pub fn prunes_in_place(&self) -> bool {
        let readers: Vec<StageKind> = self
            .graph
            .node_indices()
            .filter(|&n| {
                let node = &self.graph[n];
                match &node.options {
                    StageOptions::Prune(_) => true,
                    StageOptions::Estimate(e) => e.probe,
                    StageOptions::Eval(_) | StageOptions::Save(_) => !self
                        .ancestors(n)
                        .iter()
                        .any(|&a| self.graph[a].kind == StageKind::Prune),
                    _ => false,
                }
            })
            .map(|n| self.graph[n].kind)
            .collect();
        readers == [StageKind::Prune]
    }

    /// The nodes that run for one cell.
    pub fn cell_nodes(&self, cell: usize) -> impl Iterator<Item = NodeIndex> + '_ {
        self.graph
            .node_indices()
            .filter(move |&n| self.graph[n].scope == Scope::Cell(cell))
    }

    /// A path from the file, resolved against the pipeline file's folder.
    pub fn resolve_path(&self, path: &Path) -> PathBuf {
        self.base_dir.join(path)
    }

    /// The graph as `dot`, `mermaid` or `text`; deterministic.
    pub fn render(&self, format: GraphFormat) -> String {
        render::render(self, format)
    }
}

/// A `--set key=value` override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// The dotted key, e.g. `prune.sparsity`.
    pub key: String,
    /// The value, read as YAML.
    pub value: String,
}

impl std::str::FromStr for Override {
    type Err = Problem;
    /// Parses `key=value`.
    fn from_str(arg: &str) -> Result<Self, Problem> {
        match arg.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => Ok(Override {
                key: key.trim().to_string(),
                value: value.to_string(),
            }),
            _ => Err(Problem::OverrideSyntax { arg: arg.into() }),
        }
    }
}

impl Override {
    fn arg(&self) -> String {
        format!("{}={}", self.key, self.value)
    }
}

/// How to validate.
#[derive(Debug, Clone)]
pub struct ValidateOptions {
    /// `--set` overrides, applied in order before validation.
    pub overrides: Vec<Override>,
    /// Check that model and text files exist (off only where the data is known to be absent).
    pub check_files: bool,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        Self {
            overrides: Vec::new(),
            check_files: true,
        }
    }
}

/// Validates a pipeline file and plans it, with default options.
pub fn validate(path: impl AsRef<Path>) -> Result<Plan, ValidationError> {
    validate_with(path, &ValidateOptions::default())
}

/// Validates a pipeline file and plans it.
pub fn validate_with(
    path: impl AsRef<Path>,
    options: &ValidateOptions,
) -> Result<Plan, ValidationError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| {
        ValidationError::single(
            path.to_path_buf(),
            Origin::Unknown,
            Problem::Read { source },
        )
    })?;
    validate_source(&text, path, options)
}

/// Validates pipeline text as if read from `path` (which names it in messages and anchors
/// relative paths).
pub fn validate_source(
    text: &str,
    path: &Path,
    options: &ValidateOptions,
) -> Result<Plan, ValidationError> {
    let fail = |diagnostics: Vec<Diagnostic>| ValidationError {
        file: path.to_path_buf(),
        diagnostics,
    };
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut root = yaml::parse(text).map_err(|e| {
        fail(vec![Diagnostic {
            origin: e.origin,
            problem: Problem::Syntax { message: e.message },
        }])
    })?;
    apply_overrides(&mut root, &options.overrides).map_err(fail)?;
    let parsed = spec::parse(&root).map_err(fail)?;
    check_name(&root, &parsed.spec.settings.name).map_err(fail)?;
    check_stage_graph(&parsed).map_err(fail)?;
    let targets = resolve_sweep_keys(&parsed).map_err(fail)?;
    let mut checker = Checker {
        base_dir: &base_dir,
        check_files: options.check_files,
        files: HashMap::new(),
    };
    let cells = expand_cells(&root, &parsed, &targets, &mut checker).map_err(fail)?;
    let graph = build_graph(&parsed, &targets, &cells);
    Ok(Plan {
        file: path.to_path_buf(),
        base_dir,
        spec: parsed.spec,
        cells,
        graph,
    })
}

/// The pipeline's name is one folder name (results go to `results/<name>/`): no separator, no
/// `..`, nothing hidden.
fn check_name(root: &Node, name: &str) -> Result<(), Vec<Diagnostic>> {
    let valid = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        return Ok(());
    }
    let origin = root
        .get("name")
        .map_or(Origin::Unknown, |n| n.origin.clone());
    Err(vec![Diagnostic {
        origin,
        problem: Problem::InvalidName {
            name: name.to_string(),
        },
    }])
}

/// The node at a YAML path.
fn node_at<'a>(root: &'a Node, path: &KeyPath) -> Option<&'a Node> {
    let mut node = root;
    for seg in &path.0 {
        node = match (seg, &node.value) {
            (Seg::Key(k), Value::Map(_)) => node.get(k)?,
            (Seg::Index(i), Value::Seq(items)) => items.get(*i)?,
            _ => return None,
        };
    }
    Some(node)
}

/// Sets the value at a YAML path, creating mappings on the way; new keys get `key_origin`.
fn set_at(root: &mut Node, path: &[Seg], value: Node, key_origin: &Origin) -> Result<(), ()> {
    let Some((first, rest)) = path.split_first() else {
        *root = value;
        return Ok(());
    };
    if matches!(root.value, Value::Null) {
        root.value = Value::Map(Vec::new());
    }
    let child = match (first, &mut root.value) {
        (Seg::Key(k), Value::Map(entries)) => {
            let position = match entries.iter().position(|e| &e.key == k) {
                Some(p) => p,
                None => {
                    entries.push(Entry {
                        key: k.clone(),
                        key_origin: key_origin.clone(),
                        value: Node {
                            value: Value::Null,
                            origin: key_origin.clone(),
                        },
                    });
                    entries.len() - 1
                }
            };
            &mut entries[position].value
        }
        (Seg::Index(i), Value::Seq(items)) => items.get_mut(*i).ok_or(())?,
        _ => return Err(()),
    };
    set_at(child, rest, value, key_origin)
}

/// Top-level settings that `--set` may name directly.
const SETTING_KEYS: &[&str] = &[
    "name",
    "seed",
    "device",
    "model",
    "calibration",
    "evaluation",
];

/// Stage ids and their YAML paths, read loosely before the spec is parsed (for `--set`).
fn scan_stage_paths(root: &Node) -> Vec<(String, KeyPath)> {
    match root.get("stages").map(|n| &n.value) {
        Some(Value::Map(entries)) => entries
            .iter()
            .map(|e| (e.key.clone(), KeyPath::keys(["stages", e.key.as_str()])))
            .collect(),
        Some(Value::Seq(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| {
                let id = item.get("id").or_else(|| item.get("kind"))?.as_str()?;
                Some((id.to_string(), KeyPath::keys(["stages"]).index(i)))
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn apply_overrides(root: &mut Node, overrides: &[Override]) -> Result<(), Vec<Diagnostic>> {
    for o in overrides {
        let arg = o.arg();
        let origin = Origin::Set { arg: arg.clone() };
        let value = yaml::parse_override_value(&o.value, &arg).map_err(|e| {
            vec![Diagnostic {
                origin: origin.clone(),
                problem: Problem::Syntax { message: e.message },
            }]
        })?;
        let segs: Vec<&str> = o.key.split('.').collect();
        let stages = scan_stage_paths(root);
        let path: Option<KeyPath> = match segs.as_slice() {
            ["sweep", "zip", rest @ ..] if !rest.is_empty() => {
                Some(KeyPath::keys(["sweep", "zip"]).key(rest.join(".")))
            }
            ["sweep", rest @ ..] if !rest.is_empty() => {
                Some(KeyPath::keys(["sweep"]).key(rest.join(".")))
            }
            [first, ..] if SETTING_KEYS.contains(first) => {
                Some(KeyPath::keys(segs.iter().copied()))
            }
            [first, rest @ ..] => stages.iter().find(|(id, _)| id == first).map(|(_, p)| {
                KeyPath(
                    p.0.iter()
                        .cloned()
                        .chain(rest.iter().map(|s| Seg::Key(s.to_string())))
                        .collect(),
                )
            }),
            [] => None,
        };
        let unknown = || {
            let mut candidates: Vec<String> = SETTING_KEYS.iter().map(|s| s.to_string()).collect();
            candidates.extend(stages.iter().map(|(id, _)| id.clone()));
            candidates.push("sweep".into());
            let first = segs.first().copied().unwrap_or_default();
            let suggestion = nearest(first, candidates.iter().map(String::as_str)).map(|s| {
                std::iter::once(s)
                    .chain(segs.iter().skip(1).copied())
                    .collect::<Vec<_>>()
                    .join(".")
            });
            Diagnostic {
                origin: origin.clone(),
                problem: Problem::UnknownOverrideKey {
                    key: o.key.clone(),
                    suggestion,
                },
            }
        };
        let Some(path) = path else {
            return Err(vec![unknown()]);
        };
        set_at(root, &path.0, value, &origin).map_err(|()| vec![unknown()])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::sweep::{canonical_json, short_ratio};
    use super::*;

    #[test]
    fn labels_show_ratios_with_at_most_four_decimals() {
        assert_eq!(short_ratio(0.0), "0");
        assert_eq!(short_ratio(0.5), "0.5");
        assert_eq!(short_ratio(0.1), "0.1");
        assert_eq!(short_ratio(3.0 / 7.0), "0.4286");
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let value =
            serde_json::json!({ "b": 1, "a": { "d": [1, { "z": 0, "y": 0.5 }], "c": null } });
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"c":null,"d":[1,{"y":0.5,"z":0}]},"b":1}"#
        );
    }

    #[test]
    fn override_parses_key_and_value() {
        let o: Override = "prune.sparsity=0.6".parse().expect("valid override");
        assert_eq!(o.key, "prune.sparsity");
        assert_eq!(o.value, "0.6");
        assert!("prune.sparsity".parse::<Override>().is_err());
        assert!("=1".parse::<Override>().is_err());
    }

    #[test]
    fn set_at_creates_missing_mappings() {
        let mut root = yaml::parse("a: { b: 1 }\n").expect("valid yaml");
        let value = Node::synthetic(Value::UInt(2));
        set_at(
            &mut root,
            &KeyPath::keys(["a", "c", "d"]).0,
            value,
            &Origin::Unknown,
        )
        .expect("settable");
        assert_eq!(
            root.to_json(),
            serde_json::json!({ "a": { "b": 1, "c": { "d": 2 } } })
        );
    }
}
