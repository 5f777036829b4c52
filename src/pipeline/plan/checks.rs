//! The checks of each cell: ranges, patterns, files that must exist, and the artifacts every
//! stage needs, each reported at the value it is about.

use super::*;
use crate::data::sets::DataSource;
use crate::model::ModelRef;

/// File checks, cached per resolved path.
pub(super) struct Checker<'a> {
    pub(super) base_dir: &'a Path,
    pub(super) check_files: bool,
    pub(super) files: HashMap<PathBuf, bool>,
}

impl Checker<'_> {
    pub(super) fn exists(
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
                    exists: resolved.exists(),
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
pub(super) struct CellProblems {
    pub(super) order: Vec<(Origin, String)>,
    pub(super) found: HashMap<(Origin, String), (Diagnostic, Vec<usize>)>,
}

impl CellProblems {
    pub(super) fn add(&mut self, diagnostic: Diagnostic, cell: usize) {
        let key = (diagnostic.origin.clone(), diagnostic.problem.to_string());
        match self.found.get_mut(&key) {
            Some((_, cells)) => cells.push(cell),
            None => {
                self.order.push(key.clone());
                self.found.insert(key, (diagnostic, vec![cell]));
            }
        }
    }

    pub(super) fn into_diagnostics(mut self, labels: &[String]) -> Vec<Diagnostic> {
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

/// Where a stage option's value was written: the value, else the key, else the stage.
pub(super) fn option_origin(tree: &Node, layout: &StageLayout, option: &str) -> Origin {
    node_at(tree, &layout.node_path)
        .and_then(|n| n.entry(option))
        .map(|e| e.value.origin.clone())
        .unwrap_or_else(|| layout.origin.clone())
}

/// Where a setting was written (value, else its section key, else the top).
pub(super) fn setting_origin(tree: &Node, section: &str, field: Option<&str>) -> Origin {
    let Some(entry) = tree.entry(section) else {
        return tree.origin.clone();
    };
    match field.and_then(|f| entry.value.entry(f)) {
        Some(e) => e.value.origin.clone(),
        None => entry.key_origin.clone(),
    }
}

/// The source of a `calibration:` or `evaluation:` section: one of text, dataset, hub, and a
/// text file that exists.
fn check_source(
    tree: &Node,
    section: &'static str,
    source: Result<DataSource, Problem>,
    checker: &mut Checker<'_>,
    problems: &mut Vec<Diagnostic>,
) {
    match source {
        Err(problem) => {
            let key = match &problem {
                Problem::HubKeyWithoutHub { key, .. } => Some(*key),
                Problem::InvalidDataHubId { .. } | Problem::HubSplitMissing { .. } => Some("hub"),
                Problem::BadHubFile { .. } => Some("files"),
                _ => None,
            };
            problems.push(Diagnostic {
                origin: setting_origin(tree, section, key),
                problem,
            });
        }
        Ok(DataSource::Text(file)) => checker.exists(
            &file,
            PathKind::File,
            &format!("{section}.text"),
            setting_origin(tree, section, Some("text")),
            problems,
        ),
        Ok(DataSource::Named(_) | DataSource::Hub(_)) => {}
    }
}

/// Value-level checks of one cell: ranges, patterns, model source, files, sections, and the
/// artifacts every stage needs.
pub(super) fn check_cell(
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
        Ok(ModelRef::Gguf(file)) => checker.exists(
            &file,
            PathKind::File,
            "model.gguf",
            setting_origin(tree, "model", Some("gguf")),
            &mut problems,
        ),
        Ok(ModelRef::Folder(dir)) => checker.exists(
            &dir,
            PathKind::Folder,
            "model.path",
            setting_origin(tree, "model", Some("path")),
            &mut problems,
        ),
        Ok(ModelRef::Hub { .. }) => {}
    }
    if let Some(calibration) = &settings.calibration {
        let (nsamples, seqlen) = (calibration.nsamples, calibration.seqlen);
        check_source(
            tree,
            "calibration",
            calibration.source(),
            checker,
            &mut problems,
        );
        for (field, value) in [("nsamples", nsamples), ("seqlen", seqlen)] {
            if value == 0 {
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
    if let Some(evaluation) = &settings.evaluation {
        let (seqlen, windows) = (&evaluation.seqlen, &evaluation.windows);
        check_source(
            tree,
            "evaluation",
            evaluation.source(),
            checker,
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

pub(super) fn check_stage_options(
    tree: &Node,
    spec: &PipelineSpec,
    stage: &StageSpec,
    layout: &StageLayout,
    problems: &mut Vec<Diagnostic>,
) {
    let id = &stage.id;
    let at = |option: &str| option_origin(tree, layout, option);
    let missing = |section: &str| Diagnostic {
        origin: layout.origin.clone(),
        problem: Problem::MissingSection {
            stage: id.clone(),
            section: section.into(),
        },
    };
    match &stage.options {
        StageOptions::Calibrate(_) if spec.settings.calibration.is_none() => {
            problems.push(missing("calibration"))
        }
        StageOptions::Eval(e) if e.perplexity && spec.settings.evaluation.is_none() => {
            problems.push(missing("evaluation"))
        }
        StageOptions::Gate(g) => check_gate_options(tree, spec, id, layout, g, problems),
        StageOptions::Prune(p) => {
            if !p.method.removes_experts() {
                check_sparsity_and_pattern(id, p, &layout.origin, &at, problems);
            }
            if let Some((option, reason, fix)) = prune_option_conflict(p) {
                problems.push(Diagnostic {
                    origin: at(option),
                    problem: Problem::IncompatibleOption {
                        key: format!("{id}.{option}"),
                        reason,
                        fix: fix.into(),
                    },
                });
            }
        }
        _ => {}
    }
}

/// The gate's headroom in [0, 1), and each floor written out between 1 and its setting.
fn check_gate_options(
    tree: &Node,
    spec: &PipelineSpec,
    id: &str,
    layout: &StageLayout,
    g: &spec::GateOptions,
    problems: &mut Vec<Diagnostic>,
) {
    if !(0.0..1.0).contains(&g.headroom) {
        problems.push(Diagnostic {
            origin: option_origin(tree, layout, "headroom"),
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

/// A prune stage's sparsity in [0, 1), its N:M pattern below one and agreeing with the
/// sparsity, and a sparsity where the pattern is unstructured.
fn check_sparsity_and_pattern(
    id: &str,
    p: &spec::PruneOptions,
    stage_origin: &Origin,
    at: &dyn Fn(&str) -> Origin,
    problems: &mut Vec<Diagnostic>,
) {
    if let Some(s) = p.sparsity.filter(|s| !(0.0..1.0).contains(s)) {
        problems.push(Diagnostic {
            origin: at("sparsity"),
            problem: Problem::SparsityOutOfRange {
                key: format!("{id}.sparsity"),
                value: s,
            },
        });
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
                        stage: id.to_string(),
                        sparsity: s,
                        n,
                        m,
                        implied,
                    },
                });
            }
        }
        Pattern::Unstructured if p.sparsity.is_none() => problems.push(Diagnostic {
            origin: stage_origin.clone(),
            problem: Problem::MissingSparsity {
                stage: id.to_string(),
            },
        }),
        Pattern::Unstructured => {}
    }
}

/// The first option of a prune stage that its other options rule out: the option, why, and the
/// fix.
fn prune_option_conflict(p: &spec::PruneOptions) -> Option<(&'static str, String, &'static str)> {
    if p.method.removes_experts() {
        return expert_option_conflict(p);
    }
    if p.experts.is_some() || !p.protect.is_empty() {
        let option = if p.experts.is_some() {
            "experts"
        } else {
            "protect"
        };
        return Some((
            option,
            format!(
                "`{option}` is for removing experts, and this stage prunes weights by `{}`",
                p.method.name()
            ),
            "remove it, or use `method: reap`, `frequency`, `ean` or `weighted_frequency`",
        ));
    }
    if p.use_variant && p.method != spec::Method::Wanda {
        return Some((
            "use_variant",
            format!(
                "the variant is Wanda's, and this stage prunes by `{}`",
                p.method.name()
            ),
            "remove `use_variant`, or use `method: wanda`",
        ));
    }
    if p.channel_permutation
        && (p.method != spec::Method::Ria || p.pattern == Pattern::Unstructured)
    {
        return Some((
            "channel_permutation",
            format!(
                "the permutation regroups RIA's N:M groups, and this stage prunes by `{}` with \
                 pattern `{}`",
                p.method.name(),
                p.pattern
            ),
            "remove `channel_permutation`, or use `method: ria` with an N:M pattern",
        ));
    }
    if p.dsnot.is_some() && (p.method == spec::Method::Ria || p.use_variant) {
        let reason = if p.use_variant {
            "dsnot refines the per-row mask, and `use_variant` chooses another"
        } else {
            "dsnot refines a wanda, magnitude or sparsegpt mask, and this stage prunes by `ria`"
        };
        return Some((
            "dsnot",
            reason.into(),
            "remove `dsnot`, or use `method: wanda` without `use_variant`",
        ));
    }
    if let Some((update, reason)) = p.weight_update.zip(weight_update_conflict(p)) {
        return Some((
            "weight_update",
            format!(
                "`weight_update: {}` updates what magnitude or wanda keeps, and {reason}",
                update.name()
            ),
            "remove `weight_update`, or use `method: wanda` or `magnitude` without \
             `use_variant`, `dsnot` or `profile`",
        ));
    }
    if !p.profile.is_uniform() && p.pattern != Pattern::Unstructured {
        return Some((
            "profile",
            format!(
                "the profile sets a sparsity per layer, and pattern `{}` fixes one",
                p.pattern
            ),
            "remove `profile`, or use `pattern: unstructured` with a `sparsity`",
        ));
    }
    let profile =
        p.profile
            .validate()
            .and_then(|()| match (p.profile.declared_mean(), p.sparsity) {
                (Some(mean), Some(s)) => p.profile.explicit_ratios_mean_check(mean, s),
                _ => Ok(()),
            });
    if let Err(e) = profile {
        return Some((
            "profile",
            e.to_string(),
            "give each layer a ratio in [0, 1), once, with their mean at `sparsity`",
        ));
    }
    if p.use_variant && p.pattern != Pattern::Unstructured {
        return Some((
            "use_variant",
            format!(
                "the variant chooses per-row sparsity, which pattern `{}` fixes",
                p.pattern
            ),
            "remove `use_variant`, or use `pattern: unstructured`",
        ));
    }
    None
}

/// The first option of an expert-pruning stage that does not apply to it: a weight-pruning
/// option, a missing or malformed `experts`.
fn expert_option_conflict(p: &spec::PruneOptions) -> Option<(&'static str, String, &'static str)> {
    let weight_options = [
        ("sparsity", p.sparsity.is_some()),
        ("pattern", p.pattern != Pattern::Unstructured),
        ("use_variant", p.use_variant),
        ("channel_permutation", p.channel_permutation),
        ("skip", !p.skip.is_empty()),
        ("profile", !p.profile.is_uniform()),
        ("dsnot", p.dsnot.is_some()),
        ("weight_update", p.weight_update.is_some()),
    ];
    if let Some((option, _)) = weight_options.iter().find(|(_, set)| *set) {
        return Some((
            option,
            format!(
                "`{}` removes whole experts, and `{option}` tunes the pruning of weights",
                p.method.name()
            ),
            "remove it here, and prune the weights in a second prune stage that needs this one",
        ));
    }
    match p.experts {
        None => Some((
            "experts",
            format!(
                "`{}` removes experts, and this stage does not say how many",
                p.method.name()
            ),
            "add `experts: 0.25` (a fraction of each layer's experts) or a whole count",
        )),
        Some(amount) => amount.check().err().map(|e| {
            (
                "experts",
                e.to_string(),
                "write a fraction in (0, 1), e.g. `experts: 0.25`, or a whole count ≥ 1",
            )
        }),
    }
}

/// Why a prune stage's `weight_update` cannot run (the reference updates magnitude's and
/// Wanda's plain masks only), or None.
fn weight_update_conflict(p: &spec::PruneOptions) -> Option<String> {
    if !matches!(p.method, spec::Method::Magnitude | spec::Method::Wanda) {
        Some(format!("this stage prunes by `{}`", p.method.name()))
    } else if p.use_variant {
        Some("this stage uses Wanda's variant".into())
    } else if p.dsnot.is_some() {
        Some("this stage refines its mask with `dsnot`".into())
    } else if !p.profile.is_uniform() {
        Some("this stage sets a sparsity per layer with `profile`".into())
    } else {
        None
    }
}

/// Every stage's required artifacts must be made by a stage upstream of it.
pub(super) fn check_artifacts(
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
