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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::error::{nearest, Diagnostic, PathKind, Problem, ValidationError};
use super::render::{self, GraphFormat};
use super::spec::{
    self, CalibrationSpec, EvaluationSpec, ModelSource, Parsed, Pattern, PipelineSpec, StageKind,
    StageLayout, StageOptions, StageSpec, Sweep,
};
use super::yaml::{self, Entry, KeyPath, Node, Origin, Seg, Value};

/// What a stage needs or makes. Checked at plan time, before any tensor exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactKind {
    /// Model weights in memory (dense after `load`, pruned after `prune`).
    Model,
    /// A peak-memory estimate.
    Estimate,
    /// The effective settings after the gate (nsamples, seqlen).
    EffectiveSettings,
    /// Calibration sequences.
    Calibration,
    /// Evaluation results.
    Metrics,
    /// Weights written to disk.
    SavedModel,
}

impl ArtifactKind {
    /// The stage kind that produces it.
    pub fn producer_kind(self) -> StageKind {
        match self {
            ArtifactKind::Model => StageKind::Load,
            ArtifactKind::Estimate => StageKind::Estimate,
            ArtifactKind::EffectiveSettings => StageKind::Gate,
            ArtifactKind::Calibration => StageKind::Calibrate,
            ArtifactKind::Metrics => StageKind::Eval,
            ArtifactKind::SavedModel => StageKind::Save,
        }
    }
}

impl fmt::Display for ArtifactKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ArtifactKind::Model => "a model",
            ArtifactKind::Estimate => "a memory estimate",
            ArtifactKind::EffectiveSettings => "effective settings",
            ArtifactKind::Calibration => "calibration data",
            ArtifactKind::Metrics => "metrics",
            ArtifactKind::SavedModel => "a saved model",
        })
    }
}

/// The artifacts a stage needs from upstream; `prune` needs calibration unless its method is
/// `magnitude`.
pub fn requires(options: &StageOptions) -> Vec<ArtifactKind> {
    match options {
        StageOptions::Load(_) => vec![],
        StageOptions::Estimate(_) => vec![ArtifactKind::Model],
        StageOptions::Gate(_) => vec![ArtifactKind::Estimate],
        StageOptions::Calibrate(_) => vec![ArtifactKind::Model],
        StageOptions::Prune(p) if p.method.needs_calibration() => {
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

/// Ids, `needs:` and cycles, on the declared stages.
fn check_stage_graph(parsed: &Parsed) -> Result<(), Vec<Diagnostic>> {
    let mut problems = Vec::new();
    let mut first_seen: HashMap<&str, &StageLayout> = HashMap::new();
    for layout in &parsed.layout {
        let valid = !layout.id.is_empty()
            && layout
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            problems.push(Diagnostic {
                origin: layout.origin.clone(),
                problem: Problem::InvalidStageId {
                    id: layout.id.clone(),
                },
            });
        }
        match first_seen.get(layout.id.as_str()) {
            Some(first) => problems.push(Diagnostic {
                origin: layout.origin.clone(),
                problem: Problem::DuplicateStageId {
                    id: layout.id.clone(),
                    first: first.origin.clone(),
                },
            }),
            None => {
                first_seen.insert(&layout.id, layout);
            }
        }
    }
    let ids: Vec<&str> = parsed.spec.stages.iter().map(|s| s.id.as_str()).collect();
    for (stage, layout) in parsed.spec.stages.iter().zip(&parsed.layout) {
        for (need, origin) in stage.needs.iter().zip(&layout.need_origins) {
            if !ids.contains(&need.as_str()) {
                problems.push(Diagnostic {
                    origin: origin.clone(),
                    problem: Problem::UnknownNeed {
                        stage: stage.id.clone(),
                        need: need.clone(),
                        suggestion: nearest(need, ids.iter().copied().filter(|i| *i != stage.id))
                            .map(Into::into),
                    },
                });
            }
        }
    }
    if problems.is_empty() {
        if let Some((path, origin)) = find_cycle(parsed) {
            problems.push(Diagnostic {
                origin,
                problem: Problem::Cycle { path },
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The first cycle by declaration order, as ids along the data flow (`a → b → a`: b needs a,
/// a needs b), with the origin of the `needs:` entry that closes it.
fn find_cycle(parsed: &Parsed) -> Option<(Vec<String>, Origin)> {
    let stages = &parsed.spec.stages;
    let index: HashMap<&str, usize> = stages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    // dependents[i]: stages that need i, in declaration order.
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); stages.len()];
    for (j, stage) in stages.iter().enumerate() {
        for need in &stage.needs {
            if let Some(&i) = index.get(need.as_str()) {
                dependents[i].push(j);
            }
        }
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    fn visit(
        v: usize,
        dependents: &[Vec<usize>],
        marks: &mut [Mark],
        stack: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        marks[v] = Mark::Active;
        stack.push(v);
        for &w in &dependents[v] {
            match marks[w] {
                Mark::Active => {
                    let start = stack.iter().position(|&s| s == w).unwrap_or(0);
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(w);
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(cycle) = visit(w, dependents, marks, stack) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks[v] = Mark::Done;
        None
    }
    let mut marks = vec![Mark::New; stages.len()];
    for start in 0..stages.len() {
        if marks[start] == Mark::New {
            if let Some(cycle) = visit(start, &dependents, &mut marks, &mut Vec::new()) {
                // The closing edge: the last stage needs the one before it.
                let (closer, needed) = (cycle[cycle.len() - 1], cycle[cycle.len() - 2]);
                let layout = &parsed.layout[closer];
                let origin = stages[closer]
                    .needs
                    .iter()
                    .position(|n| n == &stages[needed].id)
                    .and_then(|p| layout.need_origins.get(p))
                    .cloned()
                    .unwrap_or_else(|| layout.origin.clone());
                let path = cycle.iter().map(|&i| stages[i].id.clone()).collect();
                return Some((path, origin));
            }
        }
    }
    None
}

/// What a sweep key changes.
#[derive(Debug, Clone, PartialEq)]
enum Owner {
    /// An option of this stage (index into the stages).
    Stage(usize),
    /// A top-level setting: `calibration.*`, `evaluation.*`, `seed`.
    Setting(&'static str),
}

/// A resolved sweep key.
#[derive(Debug, Clone)]
struct Target {
    /// Where its values go in the tree.
    path: KeyPath,
    owner: Owner,
}

const CALIBRATION_FIELDS: &[&str] = &["text", "nsamples", "seqlen"];
const EVALUATION_FIELDS: &[&str] = &["text", "seqlen", "windows"];

/// Every key a sweep may name, for suggestions.
fn sweepable_keys(parsed: &Parsed) -> Vec<String> {
    let mut keys: Vec<String> = parsed
        .spec
        .stages
        .iter()
        .flat_map(|s| {
            s.kind()
                .option_names()
                .into_iter()
                .map(move |o| format!("{}.{o}", s.id))
        })
        .collect();
    keys.extend(
        CALIBRATION_FIELDS
            .iter()
            .map(|f| format!("calibration.{f}")),
    );
    keys.extend(EVALUATION_FIELDS.iter().map(|f| format!("evaluation.{f}")));
    keys.push("seed".into());
    keys
}

fn resolve_sweep_keys(parsed: &Parsed) -> Result<Vec<Vec<Target>>, Vec<Diagnostic>> {
    let mut problems = Vec::new();
    let mut targets = Vec::new();
    for axis in &parsed.sweep.axes {
        let mut axis_targets = Vec::new();
        for (key, origin) in &axis.keys {
            let segs: Vec<&str> = key.split('.').collect();
            let target = match segs.as_slice() {
                ["seed"] => Some(Target {
                    path: KeyPath::keys(["seed"]),
                    owner: Owner::Setting("seed"),
                }),
                ["calibration", field] if CALIBRATION_FIELDS.contains(field) => Some(Target {
                    path: KeyPath::keys(["calibration", field]),
                    owner: Owner::Setting("calibration"),
                }),
                ["evaluation", field] if EVALUATION_FIELDS.contains(field) => Some(Target {
                    path: KeyPath::keys(["evaluation", field]),
                    owner: Owner::Setting("evaluation"),
                }),
                [stage, option, rest @ ..] => parsed
                    .spec
                    .stages
                    .iter()
                    .position(|s| s.id == *stage)
                    .and_then(|i| {
                        let kind = parsed.spec.stages[i].kind();
                        kind.option_names()
                            .iter()
                            .any(|o| o == option)
                            .then(|| Target {
                                path: KeyPath(
                                    parsed.layout[i]
                                        .node_path
                                        .0
                                        .iter()
                                        .cloned()
                                        .chain(std::iter::once(Seg::Key(option.to_string())))
                                        .chain(rest.iter().map(|s| Seg::Key(s.to_string())))
                                        .collect(),
                                ),
                                owner: Owner::Stage(i),
                            })
                    }),
                _ => None,
            };
            match target {
                Some(target) => axis_targets.push(target),
                None => {
                    let keys = sweepable_keys(parsed);
                    problems.push(Diagnostic {
                        origin: origin.clone(),
                        problem: Problem::UnknownSweepKey {
                            key: key.clone(),
                            suggestion: nearest(key, keys.iter().map(String::as_str))
                                .map(Into::into),
                        },
                    });
                }
            }
        }
        targets.push(axis_targets);
    }
    if problems.is_empty() {
        Ok(targets)
    } else {
        Err(problems)
    }
}

/// File checks, cached per resolved path.
struct Checker<'a> {
    base_dir: &'a Path,
    check_files: bool,
    files: HashMap<PathBuf, bool>,
}

impl Checker<'_> {
    fn exists(
        &mut self,
        written: &Path,
        kind: PathKind,
        key: &str,
        origin: Origin,
        problems: &mut Vec<Diagnostic>,
    ) {
        if !self.check_files {
            return;
        }
        let resolved = self.base_dir.join(written);
        let ok = *self
            .files
            .entry(resolved.clone())
            .or_insert_with(|| match kind {
                PathKind::File => resolved.is_file(),
                PathKind::Folder => resolved.is_dir(),
            });
        if !ok {
            problems.push(Diagnostic {
                origin,
                problem: Problem::MissingFile {
                    key: key.into(),
                    written: written.to_path_buf(),
                    resolved,
                    kind,
                },
            });
        }
    }
}

/// Problems gathered over cells: each distinct (origin, message) once, with the cells it
/// occurred in.
#[derive(Default)]
struct CellProblems {
    order: Vec<(Origin, String)>,
    found: HashMap<(Origin, String), (Diagnostic, Vec<usize>)>,
}

impl CellProblems {
    fn add(&mut self, diagnostic: Diagnostic, cell: usize) {
        let key = (diagnostic.origin.clone(), diagnostic.problem.to_string());
        match self.found.get_mut(&key) {
            Some((_, cells)) => cells.push(cell),
            None => {
                self.order.push(key.clone());
                self.found.insert(key, (diagnostic, vec![cell]));
            }
        }
    }

    fn into_diagnostics(mut self, labels: &[String]) -> Vec<Diagnostic> {
        let total = labels.len();
        let mut out = Vec::new();
        for key in self.order {
            if let Some((mut diagnostic, cells)) = self.found.remove(&key) {
                if let Problem::MissingArtifact { cells: names, .. } = &mut diagnostic.problem {
                    if cells.len() < total {
                        *names = cells
                            .iter()
                            .filter_map(|&c| labels.get(c).cloned())
                            .collect();
                    }
                }
                out.push(diagnostic);
            }
        }
        out
    }
}

/// Every cell of the sweep, checked. Without a sweep: one cell from the file itself.
fn expand_cells(
    root: &Node,
    parsed: &Parsed,
    targets: &[Vec<Target>],
    checker: &mut Checker<'_>,
) -> Result<Vec<Cell>, Vec<Diagnostic>> {
    let axes = &parsed.sweep.axes;
    let count: usize = axes.iter().map(|a| a.points.len()).product();
    let mut cells = Vec::with_capacity(count);
    let mut problems = CellProblems::default();
    let mut labels = Vec::with_capacity(count);
    for index in 0..count {
        // Mixed-radix digits, first axis slowest.
        let mut rest = index;
        let mut steps = vec![0; axes.len()];
        for (a, axis) in axes.iter().enumerate().rev() {
            steps[a] = rest % axis.points.len();
            rest /= axis.points.len();
        }
        let mut tree = root.clone();
        let mut values = Vec::new();
        for ((axis, step), axis_targets) in axes.iter().zip(&steps).zip(targets) {
            for (((key, key_origin), value), target) in
                axis.keys.iter().zip(&axis.points[*step]).zip(axis_targets)
            {
                if set_at(&mut tree, &target.path.0, value.clone(), key_origin).is_err() {
                    problems.add(
                        Diagnostic {
                            origin: key_origin.clone(),
                            problem: Problem::UnknownSweepKey {
                                key: key.clone(),
                                suggestion: None,
                            },
                        },
                        index,
                    );
                }
                values.push((key.clone(), value.to_json()));
            }
        }
        let cell_parsed = match spec::parse(&tree) {
            Ok(p) => p,
            Err(diagnostics) => {
                for d in diagnostics {
                    problems.add(d, index);
                }
                labels.push(format!("cell {index}"));
                continue;
            }
        };
        let mut cell_spec = cell_parsed.spec;
        cell_spec.sweep = Sweep::default();
        let label = cell_label(&cell_spec, &values);
        labels.push(label.clone());
        for d in check_cell(&tree, &cell_spec, &parsed.layout, checker) {
            problems.add(d, index);
        }
        if !problems.found.is_empty() {
            // Keep checking later cells for their own problems, but build no more cells.
            continue;
        }
        normalise(&mut cell_spec);
        let config = cell_config(&cell_spec);
        let id = CellId(hex12(&canonical_json(&config)));
        cells.push(Cell {
            index,
            id,
            label,
            values,
            spec: cell_spec,
            config,
        });
    }
    if problems.order.is_empty() {
        Ok(cells)
    } else {
        Err(problems.into_diagnostics(&labels))
    }
}

/// Fills in what defaults imply, so equal experiments hash equal: an N:M pattern's sparsity.
fn normalise(spec: &mut PipelineSpec) {
    for stage in &mut spec.stages {
        if let StageOptions::Prune(p) = &mut stage.options {
            p.sparsity = p.effective_sparsity();
        }
    }
}

/// The config a cell id hashes: the resolved spec without `name` and `device`.
fn cell_config(spec: &PipelineSpec) -> serde_json::Value {
    let mut config = serde_json::to_value(spec).unwrap_or(serde_json::Value::Null);
    if let Some(map) = config.as_object_mut() {
        map.remove("name");
        map.remove("device");
    }
    config
}

/// JSON with object keys sorted at every level, no whitespace: the same config always gives
/// the same bytes (whatever `serde_json` features other crates switch on).
pub fn canonical_json(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Object(map) => {
            let sorted: BTreeMap<&String, &serde_json::Value> = map.iter().collect();
            let body: Vec<String> = sorted
                .into_iter()
                .map(|(k, v)| {
                    format!(
                        "{}:{}",
                        serde_json::Value::String(k.clone()),
                        canonical_json(v)
                    )
                })
                .collect();
            format!("{{{}}}", body.join(","))
        }
        serde_json::Value::Array(items) => {
            format!(
                "[{}]",
                items
                    .iter()
                    .map(canonical_json)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        }
        other => other.to_string(),
    }
}

fn hex12(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// A ratio with at most 4 decimals, trailing zeros dropped: `0.5`, `0.4286` (for 3:7).
fn short_ratio(x: f64) -> String {
    let text = format!("{x:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `method-sparsity-pattern` of each prune stage (joined by `+`), `dense` without one, then
/// any other swept value as `option=value`.
fn cell_label(spec: &PipelineSpec, values: &[(String, serde_json::Value)]) -> String {
    let prunes: Vec<(&str, String)> = spec
        .stages
        .iter()
        .filter_map(|s| match &s.options {
            StageOptions::Prune(p) => Some((
                s.id.as_str(),
                format!(
                    "{}-{}-{}",
                    p.method.name(),
                    p.effective_sparsity()
                        .map(short_ratio)
                        .unwrap_or_else(|| "?".into()),
                    p.pattern
                ),
            )),
            _ => None,
        })
        .collect();
    let mut label = if prunes.is_empty() {
        "dense".to_string()
    } else {
        prunes
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("+")
    };
    for (key, value) in values {
        let in_label = prunes.iter().any(|(id, _)| {
            key.strip_prefix(id)
                .and_then(|r| r.strip_prefix('.'))
                .is_some_and(|o| matches!(o, "method" | "sparsity" | "pattern"))
        });
        if !in_label {
            let option = key.rsplit('.').next().unwrap_or(key);
            let text = value
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            label.push_str(&format!("-{option}={text}"));
        }
    }
    label
}

/// Where a stage option's value was written: the value, else the key, else the stage.
fn option_origin(tree: &Node, layout: &StageLayout, option: &str) -> Origin {
    node_at(tree, &layout.node_path)
        .and_then(|n| n.entry(option))
        .map(|e| e.value.origin.clone())
        .unwrap_or_else(|| layout.origin.clone())
}

/// Where a setting was written (value, else its section key, else the top).
fn setting_origin(tree: &Node, section: &str, field: Option<&str>) -> Origin {
    let Some(entry) = tree.entry(section) else {
        return tree.origin.clone();
    };
    match field.and_then(|f| entry.value.entry(f)) {
        Some(e) => e.value.origin.clone(),
        None => entry.key_origin.clone(),
    }
}

/// Value-level checks of one cell: ranges, patterns, model source, files, sections, and the
/// artifacts every stage needs.
fn check_cell(
    tree: &Node,
    spec: &PipelineSpec,
    layout: &[StageLayout],
    checker: &mut Checker<'_>,
) -> Vec<Diagnostic> {
    let mut problems = Vec::new();
    let settings = &spec.settings;
    let model_origin = setting_origin(tree, "model", None);
    match settings.model.source() {
        Err(problem) => problems.push(Diagnostic {
            origin: match problem {
                Problem::RevisionWithoutHub => setting_origin(tree, "model", Some("revision")),
                Problem::InvalidHubId { .. } => setting_origin(tree, "model", Some("hub")),
                _ => model_origin,
            },
            problem,
        }),
        Ok(ModelSource::Gguf(file)) => checker.exists(
            &file,
            PathKind::File,
            "model.gguf",
            setting_origin(tree, "model", Some("gguf")),
            &mut problems,
        ),
        Ok(ModelSource::Folder(dir)) => checker.exists(
            &dir,
            PathKind::Folder,
            "model.path",
            setting_origin(tree, "model", Some("path")),
            &mut problems,
        ),
        Ok(ModelSource::Hub { .. }) => {}
    }
    if let Some(CalibrationSpec {
        text,
        nsamples,
        seqlen,
    }) = &settings.calibration
    {
        checker.exists(
            text,
            PathKind::File,
            "calibration.text",
            setting_origin(tree, "calibration", Some("text")),
            &mut problems,
        );
        for (field, value) in [("nsamples", nsamples), ("seqlen", seqlen)] {
            if *value == 0 {
                problems.push(Diagnostic {
                    origin: setting_origin(tree, "calibration", Some(field)),
                    problem: Problem::OutOfRange {
                        key: format!("calibration.{field}"),
                        value: "0".into(),
                        allowed: "1 or more".into(),
                    },
                });
            }
        }
    }
    if let Some(EvaluationSpec {
        text,
        seqlen,
        windows,
    }) = &settings.evaluation
    {
        checker.exists(
            text,
            PathKind::File,
            "evaluation.text",
            setting_origin(tree, "evaluation", Some("text")),
            &mut problems,
        );
        if *seqlen < 2 {
            problems.push(Diagnostic {
                origin: setting_origin(tree, "evaluation", Some("seqlen")),
                problem: Problem::OutOfRange {
                    key: "evaluation.seqlen".into(),
                    value: seqlen.to_string(),
                    allowed: "2 or more (a window predicts its tokens after the first)".into(),
                },
            });
        }
        if *windows == Some(0) {
            problems.push(Diagnostic {
                origin: setting_origin(tree, "evaluation", Some("windows")),
                problem: Problem::OutOfRange {
                    key: "evaluation.windows".into(),
                    value: "0".into(),
                    allowed: "1 or more (or leave it out for all windows)".into(),
                },
            });
        }
    }
    for (stage, stage_layout) in spec.stages.iter().zip(layout) {
        check_stage_options(tree, spec, stage, stage_layout, &mut problems);
    }
    check_artifacts(tree, spec, layout, &mut problems);
    problems
}

fn check_stage_options(
    tree: &Node,
    spec: &PipelineSpec,
    stage: &StageSpec,
    layout: &StageLayout,
    problems: &mut Vec<Diagnostic>,
) {
    let id = &stage.id;
    let at = |option: &str| option_origin(tree, layout, option);
    match &stage.options {
        StageOptions::Calibrate(_) if spec.settings.calibration.is_none() => {
            problems.push(Diagnostic {
                origin: layout.origin.clone(),
                problem: Problem::MissingSection {
                    stage: id.clone(),
                    section: "calibration".into(),
                },
            })
        }
        StageOptions::Eval(e) if e.perplexity && spec.settings.evaluation.is_none() => problems
            .push(Diagnostic {
                origin: layout.origin.clone(),
                problem: Problem::MissingSection {
                    stage: id.clone(),
                    section: "evaluation".into(),
                },
            }),
        StageOptions::Gate(g) => {
            if !(0.0..1.0).contains(&g.headroom) {
                problems.push(Diagnostic {
                    origin: at("headroom"),
                    problem: Problem::OutOfRange {
                        key: format!("{id}.headroom"),
                        value: g.headroom.to_string(),
                        allowed: "[0, 1)".into(),
                    },
                });
            }
            // Only a floor written out is checked against the setting: a default floor above a
            // small setting just means the gate cannot reduce that setting.
            let floor_origin = |field: &str| {
                node_at(tree, &layout.node_path)
                    .and_then(|n| n.get("floor"))
                    .and_then(|f| f.entry(field))
                    .map(|e| e.value.origin.clone())
            };
            let calibration = spec.settings.calibration.as_ref();
            for (field, floor, setting) in [
                (
                    "nsamples",
                    g.floor.nsamples,
                    calibration.map(|c| c.nsamples),
                ),
                ("seqlen", g.floor.seqlen, calibration.map(|c| c.seqlen)),
            ] {
                let ceiling = setting.unwrap_or(usize::MAX);
                let Some(origin) = floor_origin(field) else {
                    continue;
                };
                if floor == 0 || floor > ceiling {
                    problems.push(Diagnostic {
                        origin,
                        problem: Problem::OutOfRange {
                            key: format!("{id}.floor.{field}"),
                            value: floor.to_string(),
                            allowed: match setting {
                                Some(s) => format!("[1, {s}] (at most `calibration.{field}`)"),
                                None => "1 or more".into(),
                            },
                        },
                    });
                }
            }
        }
        StageOptions::Prune(p) => {
            if let Some(s) = p.sparsity {
                if !(0.0..1.0).contains(&s) {
                    problems.push(Diagnostic {
                        origin: at("sparsity"),
                        problem: Problem::SparsityOutOfRange {
                            key: format!("{id}.sparsity"),
                            value: s,
                        },
                    });
                }
            }
            match p.pattern {
                Pattern::NM { n, m } if n == 0 || n >= m => problems.push(Diagnostic {
                    origin: at("pattern"),
                    problem: Problem::PatternNotBelow {
                        key: format!("{id}.pattern"),
                        n,
                        m,
                    },
                }),
                Pattern::NM { n, m } => {
                    let implied = f64::from(n) / f64::from(m);
                    if let Some(s) = p.sparsity.filter(|s| (s - implied).abs() > 1e-9) {
                        problems.push(Diagnostic {
                            origin: at("sparsity"),
                            problem: Problem::PatternContradictsSparsity {
                                stage: id.clone(),
                                sparsity: s,
                                n,
                                m,
                                implied,
                            },
                        });
                    }
                }
                Pattern::Unstructured if p.sparsity.is_none() => problems.push(Diagnostic {
                    origin: layout.origin.clone(),
                    problem: Problem::MissingSparsity { stage: id.clone() },
                }),
                Pattern::Unstructured => {}
            }
            if p.use_variant && p.method != spec::Method::Wanda {
                problems.push(Diagnostic {
                    origin: at("use_variant"),
                    problem: Problem::IncompatibleOption {
                        key: format!("{id}.use_variant"),
                        reason: format!(
                            "the variant is Wanda's, and this stage prunes by `{}`",
                            p.method.name()
                        ),
                        fix: "remove `use_variant`, or use `method: wanda`".into(),
                    },
                });
            } else if p.use_variant && p.pattern != Pattern::Unstructured {
                problems.push(Diagnostic {
                    origin: at("use_variant"),
                    problem: Problem::IncompatibleOption {
                        key: format!("{id}.use_variant"),
                        reason: format!(
                            "the variant chooses per-row sparsity, which pattern `{}` fixes",
                            p.pattern
                        ),
                        fix: "remove `use_variant`, or use `pattern: unstructured`".into(),
                    },
                });
            }
        }
        _ => {}
    }
}

/// Every stage's required artifacts must be made by a stage upstream of it.
fn check_artifacts(
    tree: &Node,
    spec: &PipelineSpec,
    layout: &[StageLayout],
    problems: &mut Vec<Diagnostic>,
) {
    let index: HashMap<&str, usize> = spec
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    for (i, stage) in spec.stages.iter().enumerate() {
        // Upstream: everything reachable through `needs` (no cycles by now).
        let mut upstream = HashSet::new();
        let mut todo: Vec<usize> = stage
            .needs
            .iter()
            .filter_map(|n| index.get(n.as_str()).copied())
            .collect();
        while let Some(u) = todo.pop() {
            if upstream.insert(u) {
                todo.extend(
                    spec.stages[u]
                        .needs
                        .iter()
                        .filter_map(|n| index.get(n.as_str()).copied()),
                );
            }
        }
        for artifact in requires(&stage.options) {
            let made = upstream
                .iter()
                .any(|&u| produces(spec.stages[u].kind()).contains(&artifact));
            if made {
                continue;
            }
            let producer = spec
                .stages
                .iter()
                .enumerate()
                .find(|(j, s)| *j != i && produces(s.kind()).contains(&artifact))
                .map(|(_, s)| s.id.clone());
            let origin = if artifact == ArtifactKind::Calibration {
                option_origin(tree, &layout[i], "method")
            } else {
                layout[i].origin.clone()
            };
            problems.push(Diagnostic {
                origin,
                problem: Problem::MissingArtifact {
                    stage: stage.id.clone(),
                    kind: stage.kind(),
                    artifact,
                    producer,
                    cells: Vec::new(),
                },
            });
        }
    }
}

/// The DAG: stages in dependency order (declaration order breaking ties); shared nodes
/// first, then each cell's nodes.
fn build_graph(parsed: &Parsed, targets: &[Vec<Target>], cells: &[Cell]) -> DiGraph<StageNode, ()> {
    let stages = &parsed.spec.stages;
    let index: HashMap<&str, usize> = stages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let order = topological(stages, &index);

    // Directly swept stages, then everything downstream of them.
    let mut per_cell = vec![false; stages.len()];
    for target in targets.iter().flatten() {
        match target.owner {
            Owner::Stage(i) => per_cell[i] = true,
            Owner::Setting(section) => {
                let kind = if section == "evaluation" {
                    StageKind::Eval
                } else {
                    StageKind::Calibrate
                };
                for (i, s) in stages.iter().enumerate() {
                    if s.kind() == kind {
                        per_cell[i] = true;
                    }
                }
            }
        }
    }
    for &i in &order {
        if stages[i]
            .needs
            .iter()
            .any(|n| index.get(n.as_str()).is_some_and(|&u| per_cell[u]))
        {
            per_cell[i] = true;
        }
    }

    let all: Vec<usize> = (0..cells.len()).collect();
    let mut graph = DiGraph::new();
    let mut shared_nodes: HashMap<usize, NodeIndex> = HashMap::new();
    let node = |stage: &StageSpec, scope: Scope| StageNode {
        stage: stage.id.clone(),
        kind: stage.kind(),
        requires: requires(&stage.options),
        produces: produces(stage.kind()),
        options: stage.options.clone(),
        scope,
    };
    for &i in order.iter().filter(|&&i| !per_cell[i]) {
        // Shared options are the same in every cell; take them from the first.
        let stage = cells
            .first()
            .and_then(|c| c.spec.stage(&stages[i].id))
            .unwrap_or(&stages[i]);
        let n = graph.add_node(node(stage, Scope::Shared { cells: all.clone() }));
        for need in &stages[i].needs {
            if let Some(&u) = index.get(need.as_str()).and_then(|u| shared_nodes.get(u)) {
                graph.add_edge(u, n, ());
            }
        }
        shared_nodes.insert(i, n);
    }
    for (c, cell) in cells.iter().enumerate() {
        let mut cell_nodes: HashMap<usize, NodeIndex> = HashMap::new();
        for &i in order.iter().filter(|&&i| per_cell[i]) {
            let stage = cell.spec.stage(&stages[i].id).unwrap_or(&stages[i]);
            let n = graph.add_node(node(stage, Scope::Cell(c)));
            for need in &stages[i].needs {
                let Some(&u) = index.get(need.as_str()) else {
                    continue;
                };
                if let Some(&from) = cell_nodes.get(&u).or_else(|| shared_nodes.get(&u)) {
                    graph.add_edge(from, n, ());
                }
            }
            cell_nodes.insert(i, n);
        }
    }
    graph
}

/// Kahn's algorithm, lowest declaration index first among the ready stages.
fn topological(stages: &[StageSpec], index: &HashMap<&str, usize>) -> Vec<usize> {
    let mut pending: Vec<usize> = stages
        .iter()
        .map(|s| {
            s.needs
                .iter()
                .filter(|n| index.contains_key(n.as_str()))
                .count()
        })
        .collect();
    let mut done = vec![false; stages.len()];
    let mut order = Vec::with_capacity(stages.len());
    while order.len() < stages.len() {
        let Some(next) = (0..stages.len()).find(|&i| !done[i] && pending[i] == 0) else {
            break; // a cycle; ruled out before this runs
        };
        done[next] = true;
        order.push(next);
        for (j, s) in stages.iter().enumerate() {
            pending[j] -= s
                .needs
                .iter()
                .filter(|n| n.as_str() == stages[next].id)
                .count();
        }
    }
    order
}

#[cfg(test)]
mod tests {
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
