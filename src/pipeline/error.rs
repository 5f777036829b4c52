//! Validation errors: what is wrong ([`Problem`], structured so callers can branch), where
//! ([`Origin`]: file line and column, or the `--set` argument), and how to fix it
//! ([`Problem::help`]). Rendered as one `error: FILE:LINE:COL: message` line per problem,
//! then indented `caused by:` and `= help:` lines.

use std::fmt;
use std::path::PathBuf;

use super::de::{DeError, DeErrorKind};
use super::kinds::{ArtifactKind, StageKind};
use super::yaml::Origin;

/// Everything wrong with a pipeline file, found before anything is allocated.
#[derive(Debug)]
pub struct ValidationError {
    /// The pipeline file, as the caller named it.
    pub file: PathBuf,
    /// The problems, in the order found (at least one).
    pub diagnostics: Vec<Diagnostic>,
}

impl ValidationError {
    /// A validation error with a single problem.
    pub fn single(file: PathBuf, origin: Origin, problem: Problem) -> Self {
        Self {
            file,
            diagnostics: vec![Diagnostic { origin, problem }],
        }
    }

    /// The same problems named at `description` instead of at positions in the text, for a
    /// pipeline a command generated (from its flags, from a record) whose text the user never
    /// saw: `error: the flags of `wanda prune`: `prune.sparsity` is `1.5`, …`.
    pub fn generated(mut self, description: &str) -> Self {
        self.file = PathBuf::from(description);
        for diagnostic in &mut self.diagnostics {
            if matches!(diagnostic.origin, Origin::File { .. }) {
                diagnostic.origin = Origin::Unknown;
            }
        }
        self
    }

    /// The problems without their positions, for callers that branch on them.
    pub fn problems(&self) -> impl Iterator<Item = &Problem> {
        self.diagnostics.iter().map(|d| &d.problem)
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            diagnostic.render(&self.file, f)?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationError {}

/// One problem and where it is.
#[derive(Debug)]
pub struct Diagnostic {
    /// Where the offending key or value was written.
    pub origin: Origin,
    /// What is wrong.
    pub problem: Problem,
}

impl Diagnostic {
    fn render(&self, file: &std::path::Path, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = file.display();
        match &self.origin {
            Origin::File { line, column } => write!(f, "error: {file}:{line}:{column}: ")?,
            Origin::Set { arg } => write!(f, "error: {file}: `--set {arg}`: ")?,
            Origin::Unknown => write!(f, "error: {file}: ")?,
        }
        write!(f, "{}", self.problem)?;
        let mut source = std::error::Error::source(&self.problem);
        while let Some(cause) = source {
            write!(f, "\n  caused by: {cause}")?;
            source = cause.source();
        }
        if let Some(help) = self.problem.help() {
            write!(f, "\n  = help: {help}")?;
        }
        Ok(())
    }
}

/// Whether a path must name a file or a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// A regular file.
    File,
    /// A folder.
    Folder,
}

impl fmt::Display for PathKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathKind::File => "file",
            PathKind::Folder => "folder",
        })
    }
}

/// Something wrong with a pipeline. Keys are written the way `--set` and `sweep:` name them
/// (`prune.sparsity`, `calibration.nsamples`).
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// The file could not be read.
    #[error("cannot read pipeline file")]
    Read {
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The YAML does not parse.
    #[error("invalid yaml: {message}")]
    Syntax {
        /// The parser's message.
        message: String,
    },
    /// The document is not a mapping.
    #[error("a pipeline must be a mapping of keys (`name`, `model`, `stages`, …), found {found}")]
    NotAMapping {
        /// What was found.
        found: String,
    },
    /// A key names nothing.
    #[error("unknown key `{key}` in {}", section_name(.section))]
    UnknownKey {
        /// The key.
        key: String,
        /// Where it was found (`prune`, `model`; empty for the top level).
        section: String,
        /// The nearest valid key, when one is close.
        suggestion: Option<String>,
        /// Every valid key there.
        valid: Vec<String>,
    },
    /// A value names no allowed choice.
    #[error("unknown value `{value}` for `{key}`")]
    UnknownValue {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// The nearest allowed value, when one is close.
        suggestion: Option<String>,
        /// The allowed values.
        valid: Vec<String>,
    },
    /// A value has the wrong type.
    #[error("`{key}` must be {expected}, found {found}")]
    WrongType {
        /// The key.
        key: String,
        /// What is expected, in words.
        expected: String,
        /// What was found, in words.
        found: String,
    },
    /// A value has the right type but is not acceptable.
    #[error("invalid value for `{key}`: {found}")]
    InvalidValue {
        /// The key.
        key: String,
        /// What was found.
        found: String,
        /// What is expected, in words.
        expected: String,
    },
    /// A required key is absent.
    #[error("{} is missing `{key}`", section_name(.section))]
    MissingKey {
        /// The mapping that lacks it (empty for the top level).
        section: String,
        /// The missing key.
        key: String,
    },
    /// A number is outside its range.
    #[error("`{key}` is `{value}`, outside {allowed}")]
    OutOfRange {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// The allowed range, e.g. `[0, 1)`.
        allowed: String,
    },
    /// A sparsity outside `[0, 1)`.
    #[error("`{key}` is `{value:?}`, outside [0, 1)")]
    SparsityOutOfRange {
        /// The key, e.g. `prune.sparsity`.
        key: String,
        /// The value.
        value: f64,
    },
    /// An unstructured prune stage without a sparsity.
    #[error("stage `{stage}` has no `sparsity`")]
    MissingSparsity {
        /// The stage id.
        stage: String,
    },
    /// An `N:M` pattern with `N >= M` (or `N = 0`).
    #[error("`{key}` is `{n}:{m}`, but an N:M pattern needs 0 < N < M")]
    PatternNotBelow {
        /// The key, e.g. `prune.pattern`.
        key: String,
        /// Weights pruned per group.
        n: u32,
        /// Group size.
        m: u32,
    },
    /// A sparsity that an `N:M` pattern contradicts.
    #[error(
        "sparsity `{sparsity:?}` of `{stage}` contradicts pattern `{n}:{m}`, which prunes exactly `{implied:?}`"
    )]
    PatternContradictsSparsity {
        /// The stage id.
        stage: String,
        /// The sparsity given.
        sparsity: f64,
        /// Weights pruned per group.
        n: u32,
        /// Group size.
        m: u32,
        /// `n / m`.
        implied: f64,
    },
    /// An option that the rest of the stage's options rule out.
    #[error("`{key}` cannot be used here: {reason}")]
    IncompatibleOption {
        /// The key.
        key: String,
        /// Why.
        reason: String,
        /// How to fix it.
        fix: String,
    },
    /// A file or folder that does not exist, or something else of that name (a device, a
    /// file where a folder is expected).
    #[error("`{key}`: {kind} `{written}` {state} (looked for `{resolved}`)", written = .written.display(), resolved = .resolved.display(), state = match (*.exists, .kind) { (false, _) => "does not exist", (true, PathKind::File) => "is not a regular file", (true, PathKind::Folder) => "is not a folder" })]
    MissingFile {
        /// The key, e.g. `model.gguf`.
        key: String,
        /// The path as written.
        written: PathBuf,
        /// The path looked for (relative paths resolve against the pipeline's folder).
        resolved: PathBuf,
        /// Whether a file or a folder is expected.
        kind: PathKind,
        /// Whether something else is there under that name.
        exists: bool,
    },
    /// `model` names zero or several sources.
    #[error("`model` must name exactly one of `gguf`, `path` or `hub`, found {}", names(.found))]
    ModelSource {
        /// The source keys given.
        found: Vec<String>,
    },
    /// A `calibration:` or `evaluation:` section names zero or several sources.
    #[error("`{section}` must name exactly one of `text`, `dataset` or `hub`, found {}", names(.found))]
    DataSource {
        /// The section.
        section: &'static str,
        /// The source keys given.
        found: Vec<String>,
    },
    /// A hub-only key (`split`, `files`, …) in a section that reads no hub data set.
    #[error("`{section}.{key}` only applies to `{section}.hub`")]
    HubKeyWithoutHub {
        /// The section.
        section: &'static str,
        /// The key.
        key: &'static str,
    },
    /// A data-set hub id that is not `org/name`.
    #[error("`{section}.hub` must be `org/name`, found `{id}`")]
    InvalidDataHubId {
        /// The section.
        section: &'static str,
        /// The id.
        id: String,
    },
    /// A hub data set with neither `split` nor `files`.
    #[error("`{section}.hub` needs `split` (or `files`) to know which rows to read")]
    HubSplitMissing {
        /// The section.
        section: &'static str,
    },
    /// A `files:` entry that is not a relative path inside the repository.
    #[error("`{section}.files` entry `{file}` is not a path inside the repository")]
    BadHubFile {
        /// The section.
        section: &'static str,
        /// The entry.
        file: String,
    },
    /// `model.revision` without `model.hub`.
    #[error("`model.revision` only applies to `model.hub`")]
    RevisionWithoutHub,
    /// A hub id that is not `org/name`.
    #[error("`model.hub` must be `org/name`, found `{id}`")]
    InvalidHubId {
        /// The id.
        id: String,
    },
    /// A stage that needs a top-level section the file lacks.
    #[error("stage `{stage}` needs a `{section}` section")]
    MissingSection {
        /// The stage id.
        stage: String,
        /// The section (`calibration`, `evaluation`).
        section: String,
    },
    /// The pipeline has no stages.
    #[error("the pipeline has no stages")]
    NoStages,
    /// A stage id with characters other than letters, digits, `-` and `_`.
    #[error("stage id `{id}` may only hold letters, digits, `-` and `_`")]
    InvalidStageId {
        /// The id.
        id: String,
    },
    /// Two stages share an id.
    #[error("duplicate stage id `{id}`")]
    DuplicateStageId {
        /// The id.
        id: String,
        /// The origin of the first stage with it.
        first: Origin,
    },
    /// `needs:` names a stage that does not exist.
    #[error("stage `{stage}` needs `{need}`, which is not a stage")]
    UnknownNeed {
        /// The stage.
        stage: String,
        /// The unknown need.
        need: String,
        /// The nearest stage id.
        suggestion: Option<String>,
    },
    /// `needs:` edges form a cycle.
    #[error("stages form a cycle: {}", cycle_text(.path))]
    Cycle {
        /// The stage ids along the cycle, first repeated at the end.
        path: Vec<String>,
    },
    /// A stage needs an artifact that no upstream stage produces.
    #[error(
        "stage `{stage}` needs {artifact}, but no stage upstream of it produces one{}",
        cells_suffix(.cells)
    )]
    MissingArtifact {
        /// The stage id.
        stage: String,
        /// The stage kind.
        kind: StageKind,
        /// The artifact it needs.
        artifact: ArtifactKind,
        /// A stage that produces it but is not upstream (list form), if any.
        producer: Option<String>,
        /// Labels of the sweep cells that need it, when only some do.
        cells: Vec<String>,
    },
    /// A sweep key with no values.
    #[error("sweep key `{key}` has no values")]
    EmptySweep {
        /// The key.
        key: String,
    },
    /// A sweep key that names no option.
    #[error("sweep key `{key}` names no option")]
    UnknownSweepKey {
        /// The key.
        key: String,
        /// The nearest sweepable key.
        suggestion: Option<String>,
    },
    /// A pipeline name that is not one folder name.
    #[error("pipeline name `{name}` is not a folder name: results go to `results/<name>/`")]
    InvalidName {
        /// The name as written.
        name: String,
    },
    /// Two cells of the sweep are one experiment (the same id).
    #[error("sweep cell {second} (`{label}`, id {id}) is the same experiment as cell {first}")]
    RepeatedCell {
        /// The earlier cell's number (from 1).
        first: usize,
        /// The later cell's number (from 1).
        second: usize,
        /// The later cell's label.
        label: String,
        /// Their id.
        id: String,
    },
    /// A key swept twice.
    #[error("sweep key `{key}` is given twice")]
    DuplicateSweepKey {
        /// The key.
        key: String,
    },
    /// Zipped lists of different lengths.
    #[error("zipped sweep key `{key}` has {len} value{} but `{first}` has {first_len}", if *.len == 1 { "" } else { "s" })]
    ZipLengthMismatch {
        /// The key.
        key: String,
        /// Its length.
        len: usize,
        /// The first zipped key.
        first: String,
        /// Its length.
        first_len: usize,
    },
    /// A `--set` argument without `=`.
    #[error("`--set {arg}` is not of the form `key=value`")]
    OverrideSyntax {
        /// The argument.
        arg: String,
    },
    /// A `--set` key that names nothing.
    #[error("`--set` key `{key}` names no setting")]
    UnknownOverrideKey {
        /// The key.
        key: String,
        /// The nearest valid key.
        suggestion: Option<String>,
    },
}

impl Problem {
    /// How to fix it, when there is more to say than the message.
    pub fn help(&self) -> Option<String> {
        Some(match self {
            Problem::Read { .. } => "check that the path names a readable pipeline file".into(),
            Problem::Syntax { .. } => "fix the yaml syntax at the position shown".into(),
            Problem::NotAMapping { .. } => {
                "start from an example in `pipelines/`: `name:`, `model:`, `stages:` …".into()
            }
            Problem::UnknownKey {
                suggestion, valid, ..
            } => match suggestion {
                Some(s) => format!("did you mean `{s}`?"),
                None if valid.is_empty() => "remove it: nothing is allowed here".into(),
                None => format!("valid keys here: {}", names(valid)),
            },
            Problem::UnknownValue {
                suggestion, valid, ..
            } => match suggestion {
                Some(s) => format!("did you mean `{s}`? (one of {})", names(valid)),
                None => format!("use one of {}", names(valid)),
            },
            Problem::WrongType { key, expected, .. } => {
                format!("write {expected} for `{}`", last_segment(key))
            }
            Problem::InvalidValue { expected, .. } => format!("expected {expected}"),
            Problem::MissingKey { key, .. } => format!("add `{key}: …`"),
            Problem::OutOfRange { allowed, .. } => format!("use a value in {allowed}"),
            Problem::SparsityOutOfRange { .. } => {
                "sparsity is the fraction of weights removed: use a value from 0 up to (not including) 1, e.g. `0.5`".into()
            }
            Problem::MissingSparsity { .. } => {
                "add `sparsity: 0.5` (or any fraction in [0, 1)), or use an N:M `pattern` such as `\"2:4\"`".into()
            }
            Problem::PatternNotBelow { .. } => {
                "write N:M with 0 < N < M, e.g. `\"2:4\"` or `\"4:8\"`".into()
            }
            Problem::PatternContradictsSparsity { implied, .. } => {
                format!("remove `sparsity` (an N:M pattern implies it) or set it to `{implied:?}`")
            }
            Problem::IncompatibleOption { fix, .. } => fix.clone(),
            Problem::MissingFile { exists: false, .. } => {
                "relative paths resolve against the pipeline file's folder: fix the path or create the file".into()
            }
            Problem::MissingFile { kind, .. } => {
                format!("relative paths resolve against the pipeline file's folder: name a {kind} there")
            }
            Problem::ModelSource { .. } => {
                "write one of `model: { gguf: file.gguf }`, `model: { path: folder }` or `model: { hub: org/name }`".into()
            }
            Problem::RevisionWithoutHub => {
                "remove `revision`, or load from the hub with `hub: org/name`".into()
            }
            Problem::DataSource { section, .. } => format!(
                "write one of `{section}: {{ text: file.txt }}`, `{section}: {{ dataset: {} }}` or `{section}: {{ hub: org/name, split: {} }}`",
                if *section == "calibration" { "c4" } else { "wikitext2" },
                if *section == "calibration" { "train" } else { "test" },
            ),
            Problem::HubKeyWithoutHub { key, .. } => {
                format!("remove `{key}`, or read a hub data set with `hub: org/name`")
            }
            Problem::InvalidDataHubId { .. } => {
                "write the data-set repository id, e.g. `Salesforce/wikitext`".into()
            }
            Problem::BadHubFile { .. } => {
                "write the file as the repository lists it, e.g. `wikitext-103-raw-v1/test-00000-of-00001.parquet`".into()
            }
            Problem::HubSplitMissing { .. } => {
                "add `split: train` (or `validation`, `test`), or list the files with `files: [...]`".into()
            }
            Problem::InvalidHubId { .. } => "write the repository id, e.g. `meta-llama/Llama-3.2-1B`".into(),
            Problem::MissingSection { section, .. } => match section.as_str() {
                "calibration" => {
                    "add `calibration: { dataset: c4, nsamples: 128, seqlen: 2048 }` (or `text: calib.txt`)".into()
                }
                _ => format!("add `{section}: {{ dataset: wikitext2, seqlen: 2048 }}` (or `text: file.txt`)"),
            },
            Problem::NoStages => "add `stages:`, e.g. `stages: { load: {}, eval: {} }`".into(),
            Problem::InvalidStageId { .. } => "rename the stage, e.g. `prune-wanda`".into(),
            Problem::DuplicateStageId { first, .. } => match first {
                Origin::File { line, .. } => format!("rename one of them; the first is on line {line}"),
                _ => "rename one of them".into(),
            },
            Problem::UnknownNeed { suggestion, .. } => match suggestion {
                Some(s) => format!("did you mean `{s}`?"),
                None => "name a stage id defined in `stages:`".into(),
            },
            Problem::Cycle { .. } => "remove one of the `needs:` entries along the cycle".into(),
            Problem::MissingArtifact {
                stage,
                kind,
                artifact,
                producer,
                ..
            } => {
                let add = match producer {
                    Some(p) => format!("add `{p}` to the `needs:` of `{stage}`"),
                    None => {
                        let kind = artifact.producer_kind().name();
                        let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
                        format!("add {article} `{kind}` stage before `{stage}`")
                    }
                };
                if *kind == StageKind::Prune && *artifact == ArtifactKind::Calibration {
                    format!("{add}, or prune with `method: magnitude`, which needs no calibration")
                } else {
                    add
                }
            }
            Problem::EmptySweep { .. } => "list at least one value, or remove the key".into(),
            Problem::UnknownSweepKey { suggestion, .. } => match suggestion {
                Some(s) => format!("did you mean `{s}`?"),
                None => "sweep keys are `<stage id>.<option>` (e.g. `prune.sparsity`), `calibration.*`, `evaluation.*` or `seed`".into(),
            },
            Problem::InvalidName { .. } => {
                "use letters, digits, `-`, `_` and `.`, not starting with `.`, e.g. `llama2-7b-wanda`".into()
            }
            Problem::RepeatedCell { .. } => "a sweep value repeats, or two differ only where it changes nothing (an N:M pattern fixes the sparsity): list each experiment once".into(),
            Problem::DuplicateSweepKey { .. } => "sweep each key once, either alone or in `zip`".into(),
            Problem::ZipLengthMismatch { .. } => {
                "zipped keys advance together: give them lists of the same length".into()
            }
            Problem::OverrideSyntax { .. } => "write `--set prune.sparsity=0.6`".into(),
            Problem::UnknownOverrideKey { suggestion, .. } => match suggestion {
                Some(s) => format!("did you mean `{s}`?"),
                None => "name a top-level setting (`calibration.nsamples`) or a stage option (`prune.sparsity`)".into(),
            },
        })
    }

    /// Converts a deserialization error. `extra_keys` are keys valid at the top level that the
    /// typed struct does not hold (`stages`, `sweep`).
    pub(crate) fn from_de(error: &DeError, extra_keys: &[&str]) -> (Origin, Problem) {
        let origin = error.origin.clone().unwrap_or(Origin::Unknown);
        let path = error.path.clone().unwrap_or_default();
        let key = path.to_string();
        let problem = match &error.kind {
            DeErrorKind::UnknownField { field, expected } => {
                let mut valid: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
                if path.is_root() {
                    valid.extend(extra_keys.iter().map(|s| s.to_string()));
                }
                Problem::UnknownKey {
                    key: field.clone(),
                    section: key,
                    suggestion: nearest(field, valid.iter().map(String::as_str)).map(Into::into),
                    valid,
                }
            }
            DeErrorKind::UnknownVariant { variant, expected } => Problem::UnknownValue {
                key,
                value: variant.clone(),
                suggestion: nearest(variant, expected.iter().copied()).map(Into::into),
                valid: expected.iter().map(|s| s.to_string()).collect(),
            },
            DeErrorKind::InvalidType { found, expected } => Problem::WrongType {
                key,
                expected: friendly_type(expected),
                found: found.clone(),
            },
            DeErrorKind::InvalidValue { found, expected } => Problem::InvalidValue {
                key,
                found: found.clone(),
                expected: expected.clone(),
            },
            DeErrorKind::InvalidLength { len, expected } => Problem::InvalidValue {
                key,
                found: format!("a list of {len}"),
                expected: expected.clone(),
            },
            DeErrorKind::MissingField { field } => Problem::MissingKey {
                section: key,
                key: field.to_string(),
            },
            DeErrorKind::DuplicateField { field } => Problem::InvalidValue {
                key: path.key(*field).to_string(),
                found: "a key given twice".into(),
                expected: "each key once".into(),
            },
            DeErrorKind::Custom(message) => Problem::InvalidValue {
                key,
                found: message.clone(),
                expected: "a valid value".into(),
            },
        };
        (origin, problem)
    }
}

/// Serde's type names in words a pipeline author reads.
fn friendly_type(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number (0 or more)".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a string" | "a boolean" | "a sequence" => expected.replace("a sequence", "a list"),
        "path string" => "a path".into(),
        other if other.starts_with("struct ") => "a mapping".into(),
        other if other.starts_with("a sequence") || other.starts_with("a list") => "a list".into(),
        other => other.into(),
    }
}

fn section_name(section: &str) -> String {
    if section.is_empty() {
        "the pipeline".into()
    } else {
        format!("`{section}`")
    }
}

fn last_segment(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

fn names(list: &[String]) -> String {
    list.iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn cycle_text(path: &[String]) -> String {
    format!("`{}`", path.join(" → "))
}

fn cells_suffix(cells: &[String]) -> String {
    match cells {
        [] => String::new(),
        [one] => format!(" (sweep cell `{one}`)"),
        [first, rest @ ..] => format!(" (sweep cells `{first}` and {} more)", rest.len()),
    }
}

/// The candidate closest to `word` by edit distance (with transpositions), if close enough to
/// be a likely typo; a case-insensitive match wins outright.
pub(crate) fn nearest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let candidates: Vec<&str> = candidates.into_iter().collect();
    if let Some(exact) = candidates.iter().find(|c| c.eq_ignore_ascii_case(word)) {
        return Some(exact);
    }
    let limit = match word.chars().count() {
        0..=3 => 1,
        4..=8 => 2,
        n => n / 3,
    };
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent
/// transpositions each cost 1.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_transpositions_once() {
        assert_eq!(edit_distance("sparsty", "sparsity"), 1);
        assert_eq!(edit_distance("wnada", "wanda"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn nearest_prefers_close_candidates_and_refuses_far_ones() {
        let keys = ["method", "sparsity", "pattern", "use_variant"];
        assert_eq!(nearest("sparsty", keys), Some("sparsity"));
        assert_eq!(nearest("Method", keys), Some("method"));
        assert_eq!(nearest("banana", keys), None);
    }

    #[test]
    fn renders_location_message_and_help() {
        let err = ValidationError::single(
            PathBuf::from("p.yaml"),
            Origin::File { line: 3, column: 5 },
            Problem::EmptySweep {
                key: "prune.sparsity".into(),
            },
        );
        assert_eq!(
            err.to_string(),
            "error: p.yaml:3:5: sweep key `prune.sparsity` has no values\n  = help: list at least one value, or remove the key"
        );
    }
}
