//! The sweep: which keys may be swept, their resolution to stages and settings, and the
//! expansion into cells with stable ids (SHA-256 of the canonical cell config) and labels.

use super::*;

/// What a sweep key changes.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Owner {
    /// An option of this stage (index into the stages).
    Stage(usize),
    /// A top-level setting: `calibration.*`, `evaluation.*`, `seed`.
    Setting(&'static str),
}

/// A resolved sweep key.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// Where its values go in the tree.
    pub(super) path: KeyPath,
    pub(super) owner: Owner,
}

pub(super) const CALIBRATION_FIELDS: &[&str] = &["text", "nsamples", "seqlen"];
pub(super) const EVALUATION_FIELDS: &[&str] = &["text", "seqlen", "windows"];

/// Every key a sweep may name, for suggestions.
pub(super) fn sweepable_keys(parsed: &Parsed) -> Vec<String> {
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

pub(super) fn resolve_sweep_keys(parsed: &Parsed) -> Result<Vec<Vec<Target>>, Vec<Diagnostic>> {
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

/// Every cell of the sweep, checked. Without a sweep: one cell from the file itself.
pub(super) fn expand_cells(
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
    let mut seen: HashMap<&CellId, usize> = HashMap::new();
    for cell in &cells {
        if let Some(first) = seen.insert(&cell.id, cell.index) {
            let origin = root
                .get("sweep")
                .map_or(Origin::Unknown, |n| n.origin.clone());
            let problem = Problem::RepeatedCell {
                first: first + 1,
                second: cell.index + 1,
                label: cell.label.clone(),
                id: cell.id.to_string(),
            };
            problems.add(Diagnostic { origin, problem }, cell.index);
        }
    }
    if problems.order.is_empty() {
        Ok(cells)
    } else {
        Err(problems.into_diagnostics(&labels))
    }
}

/// Fills in what defaults imply, so equal experiments hash equal: an N:M pattern's sparsity.
pub(super) fn normalise(spec: &mut PipelineSpec) {
    for stage in &mut spec.stages {
        if let StageOptions::Prune(p) = &mut stage.options {
            p.sparsity = p.effective_sparsity();
        }
    }
}

/// The config a cell id hashes: the resolved spec without `name` and `device`.
pub(super) fn cell_config(spec: &PipelineSpec) -> serde_json::Value {
    let mut config = serde_json::to_value(spec).unwrap_or(serde_json::Value::Null);
    if let Some(map) = config.as_object_mut() {
        map.remove("name");
        map.remove("device");
    }
    config
}

/// JSON with object keys sorted at every level, no whitespace: the same config always gives
/// the same bytes (whatever `serde_json` features other crates switch on).
pub(super) fn canonical_json(value: &serde_json::Value) -> String {
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

pub(super) fn hex12(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// A ratio with at most 4 decimals, trailing zeros dropped: `0.5`, `0.4286` (for 3:7).
pub(super) fn short_ratio(x: f64) -> String {
    let text = format!("{x:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `method-sparsity-pattern` of each prune stage (`method-experts-amount` of one removing
/// experts), joined by `+`, `dense` without one, then
/// any other swept value as `option=value`.
pub(super) fn cell_label(spec: &PipelineSpec, values: &[(String, serde_json::Value)]) -> String {
    let prunes: Vec<(&str, String)> = spec
        .stages
        .iter()
        .filter_map(|s| match &s.options {
            StageOptions::Prune(p) => Some((
                s.id.as_str(),
                match p.experts {
                    Some(amount) if p.method.removes_experts() => {
                        format!("{}-experts-{}", p.method.name(), short_ratio(amount.0))
                    }
                    _ => format!(
                        "{}-{}-{}",
                        p.method.name(),
                        p.effective_sparsity()
                            .map(short_ratio)
                            .unwrap_or_else(|| "?".into()),
                        p.pattern
                    ),
                },
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
                .is_some_and(|o| matches!(o, "method" | "sparsity" | "pattern" | "experts"))
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
