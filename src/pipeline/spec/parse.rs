//! Reading a pipeline's YAML tree into a [`PipelineSpec`]: the two shapes of `stages:` (a map in
//! the implicit order, or a list with `id`, `kind` and `needs`), each stage's options, and the
//! sweep's axes, with every problem a diagnostic that names its key and line.

use super::*;

/// The positioned form of the sweep, kept for cell expansion and error locations.
#[derive(Debug, Clone)]
pub(crate) struct SweepTree {
    pub axes: Vec<AxisTree>,
}

/// One axis with its nodes.
#[derive(Debug, Clone)]
pub(crate) struct AxisTree {
    /// Keys and where each key was written.
    pub keys: Vec<(String, Origin)>,
    /// `points[i][j]`: the value of key `j` at step `i`.
    pub points: Vec<Vec<Node>>,
}

/// Where each stage sits in the YAML tree, for locating its keys later.
#[derive(Debug, Clone)]
pub(crate) struct StageLayout {
    /// The stage id.
    pub id: String,
    /// The YAML path of the stage's mapping (`stages.prune` or `stages[3]`).
    pub node_path: KeyPath,
    /// Where the stage is named (map key, or the entry's `id`/`kind`).
    pub origin: Origin,
    /// Where each `needs` entry was written.
    pub need_origins: Vec<Origin>,
}

/// The parse result with the positions validation needs.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub spec: PipelineSpec,
    pub layout: Vec<StageLayout>,
    pub sweep: SweepTree,
}

/// Keys of the list form besides the options.
const ENTRY_KEYS: &[&str] = &["id", "kind", "needs"];

/// Reads the whole tree. Independent sections are all read, so every problem is reported.
pub(crate) fn parse(root: &Node) -> Result<Parsed, Vec<Diagnostic>> {
    let mut problems = Vec::new();
    let Some(entries) = root.as_map() else {
        return Err(vec![Diagnostic {
            origin: root.origin.clone(),
            problem: Problem::NotAMapping {
                found: root.describe(),
            },
        }]);
    };
    let settings_node = Node {
        value: Value::Map(
            entries
                .iter()
                .filter(|e| !STRUCTURE_KEYS.contains(&e.key.as_str()))
                .cloned()
                .collect(),
        ),
        origin: root.origin.clone(),
    };
    let settings = match from_node::<Settings>(&settings_node, KeyPath::root()) {
        Ok(settings) => Some(settings),
        Err(error) => {
            let (origin, problem) = Problem::from_de(&error, STRUCTURE_KEYS);
            problems.push(Diagnostic { origin, problem });
            None
        }
    };

    let stages = match root.entry("stages") {
        // A misspelt `stages:` is already reported as an unknown key with its correction.
        None if problems.iter().any(|d| {
            matches!(&d.problem, Problem::UnknownKey { suggestion: Some(s), .. } if s == "stages")
        }) =>
        {
            None
        }
        None => {
            problems.push(Diagnostic {
                origin: root.origin.clone(),
                problem: Problem::NoStages,
            });
            None
        }
        Some(entry) => parse_stages(&entry.value, &entry.key_origin, &mut problems),
    };

    let sweep = match root.entry("sweep") {
        None => Some((Sweep::default(), SweepTree { axes: vec![] })),
        Some(entry) => parse_sweep(&entry.value, &mut problems),
    };

    match (settings, stages, sweep) {
        (Some(settings), Some((stages, form, layout)), Some((sweep, sweep_tree)))
            if problems.is_empty() =>
        {
            Ok(Parsed {
                spec: PipelineSpec {
                    settings,
                    stages,
                    form,
                    sweep,
                },
                layout,
                sweep: sweep_tree,
            })
        }
        _ => Err(problems),
    }
}

type StagesParse = (Vec<StageSpec>, StagesForm, Vec<StageLayout>);

fn parse_stages(
    node: &Node,
    key_origin: &Origin,
    problems: &mut Vec<Diagnostic>,
) -> Option<StagesParse> {
    let before = problems.len();
    let mut stages = Vec::new();
    let mut layout = Vec::new();
    let form = match &node.value {
        Value::Map(entries) => {
            // Map form: keys are kinds; order is the implicit one whatever the file order.
            let mut found: Vec<(StageKind, &super::super::yaml::Entry)> = Vec::new();
            for entry in entries {
                match StageKind::from_name(&entry.key) {
                    Some(kind) => found.push((kind, entry)),
                    None => {
                        let valid: Vec<String> = StageKind::ALL
                            .iter()
                            .map(|k| k.name().to_string())
                            .collect();
                        problems.push(Diagnostic {
                            origin: entry.key_origin.clone(),
                            problem: Problem::UnknownKey {
                                key: entry.key.clone(),
                                section: "stages".into(),
                                suggestion: nearest(&entry.key, valid.iter().map(String::as_str))
                                    .map(Into::into),
                                valid,
                            },
                        });
                    }
                }
            }
            found.sort_by_key(|(kind, _)| *kind);
            let mut previous: Option<String> = None;
            for (kind, entry) in found {
                let id = kind.name().to_string();
                match kind.parse_options(
                    &entry.value,
                    KeyPath::keys([id.clone()]),
                    &entry.key_origin,
                ) {
                    Ok(options) => stages.push(StageSpec {
                        id: id.clone(),
                        needs: previous.iter().cloned().collect(),
                        options,
                    }),
                    Err(error) => {
                        let (origin, problem) = Problem::from_de(&error, &[]);
                        problems.push(Diagnostic { origin, problem });
                    }
                }
                layout.push(StageLayout {
                    id: id.clone(),
                    node_path: KeyPath::keys(["stages", id.as_str()]),
                    origin: entry.key_origin.clone(),
                    need_origins: previous.iter().map(|_| entry.key_origin.clone()).collect(),
                });
                previous = Some(id);
            }
            StagesForm::Map
        }
        Value::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                if let Some((stage, stage_layout)) = parse_entry(item, i, problems) {
                    stages.push(stage);
                    layout.push(stage_layout);
                }
            }
            StagesForm::List
        }
        _ => {
            problems.push(Diagnostic {
                origin: node.origin.clone(),
                problem: Problem::WrongType {
                    key: "stages".into(),
                    expected: "a mapping of stage kinds, or a list of stages".into(),
                    found: node.describe(),
                },
            });
            return None;
        }
    };
    if problems.len() > before {
        return None;
    }
    if stages.is_empty() {
        problems.push(Diagnostic {
            origin: key_origin.clone(),
            problem: Problem::NoStages,
        });
        return None;
    }
    Some((stages, form, layout))
}

/// One list-form entry: `{ id, kind, needs, …options }`.
fn parse_entry(
    item: &Node,
    index: usize,
    problems: &mut Vec<Diagnostic>,
) -> Option<(StageSpec, StageLayout)> {
    let entry_path = KeyPath::keys(["stages"]).index(index);
    let Some(entries) = item.as_map() else {
        problems.push(Diagnostic {
            origin: item.origin.clone(),
            problem: Problem::WrongType {
                key: entry_path.to_string(),
                expected: "a mapping `{ id, kind, needs, …options }`".into(),
                found: item.describe(),
            },
        });
        return None;
    };
    // The kind decides which options are valid, so it is read first.
    let Some(kind_entry) = item.entry("kind") else {
        problems.push(Diagnostic {
            origin: item.origin.clone(),
            problem: Problem::MissingKey {
                section: entry_path.to_string(),
                key: "kind".into(),
            },
        });
        return None;
    };
    let kind = match from_node::<StageKind>(&kind_entry.value, entry_path.key("kind")) {
        Ok(kind) => kind,
        Err(error) => {
            let (origin, problem) = Problem::from_de(&error, &[]);
            problems.push(Diagnostic { origin, problem });
            return None;
        }
    };
    let (id, id_origin) = match item.entry("id") {
        None => (kind.name().to_string(), kind_entry.value.origin.clone()),
        Some(entry) => match from_node::<String>(&entry.value, entry_path.key("id")) {
            Ok(id) => (id, entry.value.origin.clone()),
            Err(error) => {
                let (origin, problem) = Problem::from_de(&error, &[]);
                problems.push(Diagnostic { origin, problem });
                return None;
            }
        },
    };
    let (needs, need_origins) = match item.entry("needs") {
        None => (Vec::new(), Vec::new()),
        Some(entry) => {
            match from_node::<Vec<String>>(&entry.value, KeyPath::keys([id.as_str(), "needs"])) {
                Ok(needs) => {
                    let origins = match &entry.value.value {
                        Value::Seq(items) => items.iter().map(|n| n.origin.clone()).collect(),
                        _ => vec![entry.value.origin.clone(); needs.len()],
                    };
                    (needs, origins)
                }
                Err(error) => {
                    let (origin, problem) = Problem::from_de(&error, &[]);
                    problems.push(Diagnostic { origin, problem });
                    return None;
                }
            }
        }
    };
    let options_node = Node {
        value: Value::Map(
            entries
                .iter()
                .filter(|e| !ENTRY_KEYS.contains(&e.key.as_str()))
                .cloned()
                .collect(),
        ),
        origin: item.origin.clone(),
    };
    let options =
        match kind.parse_options(&options_node, KeyPath::keys([id.as_str()]), &item.origin) {
            Ok(options) => options,
            Err(error) => {
                let (origin, mut problem) = Problem::from_de(&error, &[]);
                // In the list form `id`, `kind` and `needs` sit beside the options.
                if let Problem::UnknownKey {
                    key,
                    suggestion,
                    valid,
                    ..
                } = &mut problem
                {
                    valid.splice(0..0, ENTRY_KEYS.iter().map(|s| s.to_string()));
                    *suggestion = nearest(key, valid.iter().map(String::as_str)).map(Into::into);
                }
                problems.push(Diagnostic { origin, problem });
                return None;
            }
        };
    Some((
        StageSpec {
            id: id.clone(),
            needs,
            options,
        },
        StageLayout {
            id,
            node_path: entry_path,
            origin: id_origin,
            need_origins,
        },
    ))
}

/// `sweep: { key: [values], zip: { key: [values], … } }`.
fn parse_sweep(node: &Node, problems: &mut Vec<Diagnostic>) -> Option<(Sweep, SweepTree)> {
    let before = problems.len();
    let Some(entries) = node.as_map() else {
        problems.push(Diagnostic {
            origin: node.origin.clone(),
            problem: Problem::WrongType {
                key: "sweep".into(),
                expected: "a mapping of `key: [values]`".into(),
                found: node.describe(),
            },
        });
        return None;
    };
    let mut axes = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for entry in entries {
        if entry.key == "zip" {
            let Some(zipped) = entry.value.as_map() else {
                problems.push(Diagnostic {
                    origin: entry.value.origin.clone(),
                    problem: Problem::WrongType {
                        key: "sweep.zip".into(),
                        expected: "a mapping of `key: [values]` advancing together".into(),
                        found: entry.value.describe(),
                    },
                });
                continue;
            };
            let mut keys = Vec::new();
            let mut columns: Vec<&[Node]> = Vec::new();
            for z in zipped {
                if let Some(values) =
                    sweep_values(z, &format!("sweep.zip.{}", z.key), &mut seen, problems)
                {
                    if let Some(((first, _), first_col)) = keys.first().zip(columns.first()) {
                        if values.len() != first_col.len() {
                            problems.push(Diagnostic {
                                origin: z.key_origin.clone(),
                                problem: Problem::ZipLengthMismatch {
                                    key: z.key.clone(),
                                    len: values.len(),
                                    first: String::clone(first),
                                    first_len: first_col.len(),
                                },
                            });
                            continue;
                        }
                    }
                    keys.push((z.key.clone(), z.key_origin.clone()));
                    columns.push(values);
                }
            }
            if let Some(first) = columns.first() {
                let points = (0..first.len())
                    .map(|i| columns.iter().map(|c| c[i].clone()).collect())
                    .collect();
                axes.push(AxisTree { keys, points });
            }
        } else if let Some(values) =
            sweep_values(entry, &format!("sweep.{}", entry.key), &mut seen, problems)
        {
            axes.push(AxisTree {
                keys: vec![(entry.key.clone(), entry.key_origin.clone())],
                points: values.iter().map(|v| vec![v.clone()]).collect(),
            });
        }
    }
    if problems.len() > before {
        return None;
    }
    let sweep = Sweep {
        axes: axes
            .iter()
            .map(|a| SweepAxis {
                keys: a.keys.iter().map(|(k, _)| k.clone()).collect(),
                points: a
                    .points
                    .iter()
                    .map(|p| p.iter().map(Node::to_json).collect())
                    .collect(),
            })
            .collect(),
    };
    Some((sweep, SweepTree { axes }))
}

/// The values of one sweep key: a non-empty list, key not seen before.
fn sweep_values<'a>(
    entry: &'a super::super::yaml::Entry,
    display: &str,
    seen: &mut Vec<String>,
    problems: &mut Vec<Diagnostic>,
) -> Option<&'a [Node]> {
    if seen.contains(&entry.key) {
        problems.push(Diagnostic {
            origin: entry.key_origin.clone(),
            problem: Problem::DuplicateSweepKey {
                key: entry.key.clone(),
            },
        });
        return None;
    }
    seen.push(entry.key.clone());
    match &entry.value.value {
        Value::Seq(items) if items.is_empty() => {
            problems.push(Diagnostic {
                origin: entry.key_origin.clone(),
                problem: Problem::EmptySweep {
                    key: entry.key.clone(),
                },
            });
            None
        }
        Value::Seq(items) => Some(items),
        _ => {
            problems.push(Diagnostic {
                origin: entry.value.origin.clone(),
                problem: Problem::WrongType {
                    key: display.into(),
                    expected: "a list of values".into(),
                    found: entry.value.describe(),
                },
            });
            None
        }
    }
}

impl StageKind {
    /// Reads this kind's options from a node (a mapping, or null for defaults) held by a key
    /// written at `origin`.
    fn parse_options(
        self,
        node: &Node,
        path: KeyPath,
        origin: &Origin,
    ) -> Result<StageOptions, super::super::de::DeError> {
        Ok(match self {
            StageKind::Load => StageOptions::Load(from_entry(node, path, origin)?),
            StageKind::Estimate => StageOptions::Estimate(from_entry(node, path, origin)?),
            StageKind::Gate => StageOptions::Gate(from_entry(node, path, origin)?),
            StageKind::Calibrate => StageOptions::Calibrate(from_entry(node, path, origin)?),
            StageKind::Prune => StageOptions::Prune(from_entry(node, path, origin)?),
            StageKind::Eval => StageOptions::Eval(from_entry(node, path, origin)?),
            StageKind::Save => StageOptions::Save(from_entry(node, path, origin)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::yaml;

    fn parse_text(text: &str) -> Result<Parsed, Vec<Diagnostic>> {
        parse(&yaml::parse(text).expect("valid yaml"))
    }

    const HEAD: &str = "name: t\nmodel: { gguf: m.gguf }\n";

    #[test]
    fn map_form_is_ordered_and_chained_whatever_the_file_order() {
        let parsed = parse_text(&format!(
            "{HEAD}stages:\n  eval: {{}}\n  prune: {{ method: magnitude, sparsity: 0.5 }}\n  load:\n"
        ))
        .expect("valid");
        let ids: Vec<_> = parsed
            .spec
            .stages
            .iter()
            .map(|s| (s.id.as_str(), s.needs.clone()))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("load", vec![]),
                ("prune", vec!["load".to_string()]),
                ("eval", vec!["prune".to_string()])
            ]
        );
        assert_eq!(parsed.spec.form, StagesForm::Map);
    }

    #[test]
    fn list_form_reads_flat_options_and_defaults_the_id_to_the_kind() {
        let parsed = parse_text(&format!(
            "{HEAD}stages:\n  - kind: load\n  - {{ id: p, kind: prune, needs: [load], method: wanda, pattern: \"2:4\" }}\n"
        ))
        .expect("valid");
        let prune = parsed.spec.stage("p").expect("stage p");
        assert_eq!(prune.needs, vec!["load".to_string()]);
        let StageOptions::Prune(options) = &prune.options else {
            panic!("not prune: {prune:?}");
        };
        assert_eq!(options.pattern, Pattern::NM { n: 2, m: 4 });
        assert_eq!(options.effective_sparsity(), Some(0.5));
        assert_eq!(parsed.spec.stages[0].id, "load");
    }

    #[test]
    fn budget_parses_units() {
        assert_eq!(Budget::parse("12GiB"), Some(Budget::Bytes(12 << 30)));
        assert_eq!(Budget::parse("1.5 GB"), Some(Budget::Bytes(1_500_000_000)));
        assert_eq!(Budget::parse("auto"), Some(Budget::Auto));
        assert_eq!(Budget::parse("12 parsecs"), None);
        assert_eq!(Budget::Bytes(12 << 30).to_string(), "12GiB");
    }

    #[test]
    fn byte_sizes_print_in_the_largest_exact_unit() {
        assert_eq!(ByteSize::parse("5GB"), Some(ByteSize(5_000_000_000)));
        assert_eq!(ByteSize::parse("200 mb"), Some(ByteSize(200_000_000)));
        assert_eq!(ByteSize::parse("0"), None);
        assert_eq!(ByteSize::parse("auto"), None);
        assert_eq!(ByteSize(5_000_000_000).to_string(), "5GB");
        assert_eq!(ByteSize(3 << 20).to_string(), "3MiB");
        assert_eq!(ByteSize(1234).to_string(), "1234B");
    }

    #[test]
    fn portable_yaml_anchors_relative_paths_and_reads_back() {
        let src = "name: p\nmodel: { gguf: m.gguf }\ncalibration: { text: /abs/c.txt, nsamples: 4, seqlen: 8 }\nevaluation: { text: e.txt, seqlen: 8 }\nstages: { load: {}, eval: {} }\n";
        let parsed = parse_text(src).expect("valid pipeline");
        let yaml = parsed.spec.to_portable_yaml(Path::new("/base/dir"));
        let again = parse_text(&yaml).expect("portable YAML is a valid pipeline");
        let settings = &again.spec.settings;
        assert_eq!(settings.model.gguf, Some(PathBuf::from("/base/dir/m.gguf")));
        assert_eq!(
            settings.calibration.as_ref().and_then(|c| c.text.clone()),
            Some(PathBuf::from("/abs/c.txt"))
        );
        assert_eq!(
            settings.evaluation.as_ref().and_then(|e| e.text.clone()),
            Some(PathBuf::from("/base/dir/e.txt"))
        );
        assert_eq!(again.spec.stages, parsed.spec.stages);
    }

    #[test]
    fn option_names_come_from_the_schema() {
        let mut names = StageKind::Prune.option_names();
        names.sort();
        assert_eq!(
            names,
            [
                "channel_permutation",
                "dsnot",
                "experts",
                "method",
                "pattern",
                "profile",
                "protect",
                "skip",
                "sparsity",
                "use_variant",
                "weight_update"
            ]
        );
        assert_eq!(StageKind::Load.option_names(), ["verify"]);
    }

    #[test]
    fn load_verifies_at_first_read_unless_asked_for_a_full_pass() {
        let load = |options: &str| {
            parse_text(&format!("{HEAD}stages: {{ load: {options} }}\n")).map(|p| {
                match &p.spec.stages[0].options {
                    StageOptions::Load(o) => o.verify,
                    other => panic!("{other:?}"),
                }
            })
        };
        assert_eq!(load("{}").unwrap(), LoadVerify::FirstRead);
        assert_eq!(load("{ verify: full }").unwrap(), LoadVerify::Full);
        let err = format!("{:?}", load("{ verify: sometimes }").unwrap_err());
        assert!(
            err.contains("verify") && err.contains("first-read"),
            "{err}"
        );
        // At its default it stays out of the resolved config, so cell ids do not move.
        let value = serde_json::to_value(LoadOptions::default()).unwrap();
        assert_eq!(value, serde_json::json!({}));
    }

    #[test]
    fn sweep_reads_axes_and_zip_in_file_order() {
        let parsed = parse_text(&format!(
            "{HEAD}stages: {{ load: {{}} }}\nsweep:\n  prune.sparsity: [0.5, 0.6]\n  zip:\n    prune.method: [wanda, sparsegpt]\n    prune.pattern: [unstructured, \"2:4\"]\n"
        ))
        .expect("valid");
        let sweep = &parsed.spec.sweep;
        assert_eq!(sweep.axes.len(), 2);
        assert_eq!(sweep.axes[1].keys, ["prune.method", "prune.pattern"]);
        assert_eq!(
            sweep.axes[1].points[1],
            vec![serde_json::json!("sparsegpt"), serde_json::json!("2:4")]
        );
        assert_eq!(sweep.cell_count(), 4);
    }
}
