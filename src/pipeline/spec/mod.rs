//! The pipeline file's types: settings (name, seed, device, model, calibration, evaluation),
//! stages (a map in the implicit order load → estimate → gate → calibrate → prune → eval →
//! save, or a list of `{ id, kind, needs, …options }` for custom DAGs) and the sweep.
//!
//! Settings and each stage's options are plain serde structs (`deny_unknown_fields`), read from
//! the positioned YAML tree by the engine's own deserializer (so errors keep line and column);
//! the two shapes of `stages:` and the sweep are assembled here by hand, because their shape
//! depends on values (`kind:`) that serde's derive cannot look ahead to. Their JSON Schema is
//! written by hand for the same reason.
//!
//! Changed from the architecture sketch: list-form entries carry their options flat beside
//! `id`, `kind` and `needs` (`- { id: p, kind: prune, needs: [load], method: wanda }`); `id`
//! defaults to the kind. Sweep keys are `<stage id>.<option>`, `calibration.*`,
//! `evaluation.*` or `seed`; a `zip:` mapping inside `sweep:` holds keys that advance together.

mod parse;
mod schema;

use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::{Deserialize, Serialize, Serializer};

pub use super::data_spec::{CalibrationSpec, EvaluationSpec};
use super::de::{from_entry, from_node};
use super::error::{nearest, Diagnostic, Problem};
pub use super::kinds::StageKind;
use super::yaml::{KeyPath, Node, Origin, Value};
pub use crate::memory::device::DeviceSpec;
pub use crate::memory::gate::{Floor, ReduceKey};
pub use crate::model::checkpoint::SaveDtype;
use crate::model::decoder::SparseMode;
use crate::model::ModelRef;
pub use crate::prune::dsnot::DsnotOptions;
pub use crate::prune::experts::ExpertAmount;
pub use crate::prune::profile::Profile;
pub use crate::prune::WeightUpdate;
pub use crate::prune::{Method, MethodOptions, Pattern};

pub(crate) use parse::{parse, Parsed, StageLayout};
pub(crate) use schema::{StagesSchema, SweepSchema};

/// Top-level keys that are not settings.
pub(crate) const STRUCTURE_KEYS: &[&str] = &["stages", "sweep"];

/// A parsed pipeline: settings, stages in declaration order (map form normalised to a chain),
/// and the sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PipelineSpec {
    /// Everything but the stages and the sweep.
    #[serde(flatten)]
    pub settings: Settings,
    /// The stages in declaration order; in map form their `needs` form the implicit chain.
    pub stages: Vec<StageSpec>,
    /// How `stages:` was written.
    #[serde(skip)]
    pub form: StagesForm,
    /// The sweep; empty when the file has none.
    #[serde(skip_serializing_if = "Sweep::is_empty")]
    pub sweep: Sweep,
}

impl PipelineSpec {
    /// The stage with this id.
    pub fn stage(&self, id: &str) -> Option<&StageSpec> {
        self.stages.iter().find(|s| s.id == id)
    }

    /// This pipeline as a YAML file that runs from anywhere: relative file paths (model,
    /// calibration and evaluation text) joined to `base_dir`, the pipeline file's folder.
    pub fn to_portable_yaml(&self, base_dir: &Path) -> String {
        let mut spec = self.clone();
        let settings = &mut spec.settings;
        for path in [&mut settings.model.gguf, &mut settings.model.path]
            .into_iter()
            .flatten()
            .chain(settings.calibration.as_mut().and_then(|c| c.text.as_mut()))
            .chain(settings.evaluation.as_mut().and_then(|e| e.text.as_mut()))
        {
            *path = base_dir.join(&*path);
        }
        serde_saphyr::to_string(&spec).expect("a pipeline always serialises to YAML")
    }
}

/// How `stages:` was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StagesForm {
    /// `stages: { load: {}, prune: {…} }`: ids are kinds, order is implicit.
    #[default]
    Map,
    /// `stages: [ { id, kind, needs, … } ]`: explicit DAG.
    List,
}

/// The settings shared by all stages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Pipeline name; results go to `results/<name>/`: letters, digits, `-`, `_` and `.`,
    /// not starting with `.`.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"))]
    pub name: String,
    /// Seed of every random choice (calibration sampling).
    #[serde(default)]
    pub seed: u64,
    /// Where tensors live: `auto`, `cpu`, `cuda` or `cuda:N`, the CUDA forms with `-bf16` to
    /// compute in bfloat16.
    #[serde(default)]
    pub device: DeviceSpec,
    /// The model to prune.
    pub model: ModelSpec,
    /// Calibration text and size (needed by `calibrate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationSpec>,
    /// Evaluation text and window length (needed by `eval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<EvaluationSpec>,
}

/// The model source, as written. Exactly one of `gguf`, `path` and `hub` must be given;
/// [`ModelSpec::source`] checks that.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    { "required": ["gguf"], "not": { "anyOf": [{ "required": ["path"] }, { "required": ["hub"] }, { "required": ["revision"] }] } },
    { "required": ["path"], "not": { "anyOf": [{ "required": ["gguf"] }, { "required": ["hub"] }, { "required": ["revision"] }] } },
    { "required": ["hub"], "not": { "anyOf": [{ "required": ["gguf"] }, { "required": ["path"] }] } }
]))]
pub struct ModelSpec {
    /// A GGUF file (relative paths resolve against the pipeline file's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gguf: Option<PathBuf>,
    /// A Hugging Face folder: `config.json`, `tokenizer.json`, safetensors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// A Hugging Face hub repository, `org/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<String>,
    /// A hub revision (branch, tag or commit); only with `hub`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

impl ModelSpec {
    /// The one source named, as written (paths relative to the pipeline file's folder:
    /// [`ModelRef::resolved_against`] joins them), or the problem.
    pub fn source(&self) -> Result<ModelRef, Problem> {
        let found: Vec<String> = [
            ("gguf", self.gguf.is_some()),
            ("path", self.path.is_some()),
            ("hub", self.hub.is_some()),
        ]
        .iter()
        .filter(|(_, given)| *given)
        .map(|(k, _)| k.to_string())
        .collect();
        if found.len() != 1 {
            return Err(Problem::ModelSource { found });
        }
        if self.revision.is_some() && self.hub.is_none() {
            return Err(Problem::RevisionWithoutHub);
        }
        Ok(match (&self.gguf, &self.path, &self.hub) {
            (Some(file), _, _) => ModelRef::Gguf(file.clone()),
            (_, Some(dir), _) => ModelRef::Folder(dir.clone()),
            (_, _, Some(id)) => {
                let mut parts = id.split('/');
                let valid = matches!(
                    (parts.next(), parts.next(), parts.next()),
                    (Some(org), Some(name), None) if !org.is_empty() && !name.is_empty()
                );
                if !valid {
                    return Err(Problem::InvalidHubId { id: id.clone() });
                }
                ModelRef::Hub {
                    repo_id: id.clone(),
                    revision: self.revision.clone().unwrap_or_else(|| "main".to_string()),
                }
            }
            (None, None, None) => return Err(Problem::ModelSource { found: vec![] }),
        })
    }
}

/// Options of `load`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadOptions {
    /// When a streamed model's layers are checked against the config (every tensor present,
    /// of its shape and a readable type): `first-read` (default) as each layer is first read,
    /// `full` all of them once before calibration, so a broken checkpoint stops the run
    /// before any work, at the cost of a pass over the checkpoint. Left out of the resolved
    /// config at its default, so cell ids stay those of pipelines written before it existed.
    #[serde(default, skip_serializing_if = "LoadVerify::is_first_read")]
    pub verify: LoadVerify,
}

/// When a streamed model's layers are checked ([`LoadOptions::verify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LoadVerify {
    /// Each layer when it is first read.
    #[default]
    FirstRead,
    /// Every layer once, before calibration.
    Full,
}

impl LoadVerify {
    /// Whether this is the default, [`LoadVerify::FirstRead`].
    pub fn is_first_read(&self) -> bool {
        *self == LoadVerify::FirstRead
    }
}

/// Options of `estimate`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EstimateOptions {
    /// Also measure one layer's real peak to check the arithmetic.
    #[serde(default)]
    pub probe: bool,
}

/// Options of `gate`: the memory budget and how to fit into it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateOptions {
    /// `auto` (the device's free memory) or a size such as `12GiB`.
    #[serde(default)]
    pub budget: Budget,
    /// Fraction of the budget kept free, in [0, 1).
    #[serde(default = "default_headroom")]
    #[schemars(range(min = 0.0), extend("exclusiveMaximum" = 1.0))]
    pub headroom: f64,
    /// Settings the gate may lower, in order, to fit the budget.
    #[serde(default = "default_reduce")]
    pub reduce: Vec<ReduceKey>,
    /// Lowest values the gate may reduce to; below them it halts.
    #[serde(default)]
    pub floor: Floor,
}

impl Default for GateOptions {
    fn default() -> Self {
        Self {
            budget: Budget::Auto,
            headroom: default_headroom(),
            reduce: default_reduce(),
            floor: Floor::default(),
        }
    }
}

fn default_headroom() -> f64 {
    0.1
}

/// Calibration sizes first, then streaming (kept as it was when streaming was added, so cell
/// ids do not change); `reduce: [streaming, nsamples, seqlen]` tries first what changes no
/// number of the run, only its time.
fn default_reduce() -> Vec<ReduceKey> {
    vec![ReduceKey::Nsamples, ReduceKey::Seqlen, ReduceKey::Streaming]
}

/// A memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Budget {
    /// The device's free memory at run time.
    #[default]
    Auto,
    /// A fixed number of bytes.
    Bytes(u64),
}

impl Budget {
    /// Parses `auto` or a size as [`ByteSize::parse`] reads it.
    pub fn parse(text: &str) -> Option<Budget> {
        if text.trim() == "auto" {
            return Some(Budget::Auto);
        }
        ByteSize::parse(text).map(|b| Budget::Bytes(b.0))
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Budget::Auto => f.write_str("auto"),
            Budget::Bytes(b) => ByteSize(b).fmt(f),
        }
    }
}

impl Serialize for Budget {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Budget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SizeVisitor {
            parse: Budget::parse,
            from_bytes: Budget::Bytes,
            expected: "`auto` or a size such as `12GiB`",
        })
    }
}

impl JsonSchema for Budget {
    fn schema_name() -> Cow<'static, str> {
        "Budget".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": format!("`auto` (the device's free memory) or a size: {SIZE_FORMS}."),
            "anyOf": [
                { "type": "string", "pattern": format!("^(auto|{SIZE_PATTERN})$") },
                { "type": "integer", "minimum": 1 }
            ]
        })
    }
}

/// A size in bytes, written as a byte count or a number with a unit (`5GB`, `512MiB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// How sizes may be written, for descriptions.
const SIZE_FORMS: &str = "bytes, or a number with B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)";

/// The regular expression of a size with a unit, for the JSON Schema.
const SIZE_PATTERN: &str = "[0-9]+(\\.[0-9]+)?\\s*(([kKmMgGtT][iI]?)?[bB])?";

impl ByteSize {
    /// Parses a byte count, or a size with a unit: `B`, `KB`/`MB`/`GB`/`TB` (powers of 1000) or
    /// `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024); units case-insensitive, decimals allowed; at
    /// least one byte.
    pub fn parse(text: &str) -> Option<ByteSize> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: f64 = number.parse().ok()?;
        let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            "tib" => 1 << 40,
            _ => return None,
        };
        let bytes = number * scale as f64;
        (bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64)
            .then(|| ByteSize(bytes.round() as u64))
    }
}

/// The largest unit that divides the size exactly: binary units first, then decimal ones.
impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (unit, scale) in [
            ("TiB", 1u64 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
            ("TB", 1_000_000_000_000),
            ("GB", 1_000_000_000),
            ("MB", 1_000_000),
            ("KB", 1_000),
        ] {
            if b.is_multiple_of(scale) {
                return write!(f, "{}{unit}", b / scale);
            }
        }
        write!(f, "{b}B")
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SizeVisitor {
            parse: ByteSize::parse,
            from_bytes: ByteSize,
            expected: "a size such as `5GB` or `500MiB`",
        })
    }
}

impl JsonSchema for ByteSize {
    fn schema_name() -> Cow<'static, str> {
        "ByteSize".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": format!("A size: {SIZE_FORMS}."),
            "anyOf": [
                { "type": "string", "pattern": format!("^{SIZE_PATTERN}$") },
                { "type": "integer", "minimum": 1 }
            ]
        })
    }
}

/// Reads a size written as text (`parse`) or as a positive byte count (`from_bytes`).
struct SizeVisitor<T> {
    parse: fn(&str) -> Option<T>,
    from_bytes: fn(u64) -> T,
    expected: &'static str,
}

impl<T> Visitor<'_> for SizeVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expected)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        (self.parse)(s).ok_or_else(|| E::invalid_value(Unexpected::Str(s), &self))
    }
    fn visit_u64<E: de::Error>(self, b: u64) -> Result<T, E> {
        if b == 0 {
            return Err(E::invalid_value(Unexpected::Unsigned(0), &self));
        }
        Ok((self.from_bytes)(b))
    }
}

/// `calibrate` takes no options (sizes live in `calibration:`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalibrateOptions {}

/// Options of `prune`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PruneOptions {
    /// The pruning method.
    pub method: Method,
    /// Fraction of weights removed, in [0, 1); implied by an N:M pattern.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0), extend("exclusiveMaximum" = 1.0))]
    pub sparsity: Option<f64>,
    /// `unstructured`, or `N:M` (N of every M consecutive input weights removed).
    #[serde(default)]
    pub pattern: Pattern,
    /// Wanda's variant: per-row sparsity chosen by a search over the cumulative score
    /// (unstructured Wanda only).
    #[serde(default)]
    pub use_variant: bool,
    /// RIA's channel permutation for N:M (the reference's `--reallocation`): the groups of M
    /// are formed over input channels reordered by importance (RIA with an N:M pattern only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub channel_permutation: bool,
    /// Linears left dense, as globs over their paths under Llama's names (`*` any run, `?` one
    /// character), e.g. `model.layers.0.self_attn.*` or a router's `model.layers.*.mlp.gate`,
    /// whatever the family's checkpoints call them. The reported sparsity counts them as dense.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip: Vec<String>,
    /// How `sparsity` is spread over the decoder layers: `uniform` (the default), `owl`
    /// (outlier-weighed, with `{ owl: { m, lambda } }` to tune it), one ratio per layer, or
    /// ratios per layer range (`{ "0-3": 0.3, "4-29": 0.55 }`); unstructured only.
    #[serde(default, skip_serializing_if = "Profile::is_uniform")]
    pub profile: Profile,
    /// Refine the method's mask with DSnoT (wanda, magnitude or sparsegpt): `{}` for the
    /// reference's settings, or any of `cycles`, `update_threshold`, `var_power`, `layers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsnot: Option<DsnotOptions>,
    /// Update the weights magnitude or Wanda keeps with SparseGPT's optimal-brain-surgeon
    /// step, the Wanda paper's ablation: `sequential` (the mask chosen once, then the update)
    /// or `iterative` (the metric recomputed from the updated weights, block by block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_update: Option<WeightUpdate>,
    /// With an expert method (`reap`, `frequency`, `ean`, `weighted_frequency`): the experts
    /// removed from every layer with experts, a fraction of them (`0.25`, rounded down) or a
    /// whole count (`2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<ExpertAmount>,
    /// With an expert method: experts kept whatever their saliency, as globs over
    /// `model.layers.{i}.mlp.experts.{e}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protect: Vec<String>,
}

impl PruneOptions {
    /// Whether this stage needs calibration data (see [`MethodOptions::needs_calibration`]).
    pub fn needs_calibration(&self) -> bool {
        self.method_options().needs_calibration(self.method)
    }

    /// The options the pruning driver reads.
    pub fn method_options(&self) -> MethodOptions {
        MethodOptions {
            use_variant: self.use_variant,
            channel_permutation: self.channel_permutation,
            skip: self.skip.clone(),
            profile: self.profile.clone(),
            dsnot: self.dsnot,
            weight_update: self.weight_update,
            ..MethodOptions::default()
        }
    }

    /// The sparsity this stage reaches: the given one, or N/M for an N:M pattern.
    pub fn effective_sparsity(&self) -> Option<f64> {
        match (self.sparsity, self.pattern) {
            (Some(s), _) => Some(s),
            (None, Pattern::NM { n, m }) => Some(f64::from(n) / f64::from(m)),
            (None, Pattern::Unstructured) => None,
        }
    }
}

/// Options of `eval`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalOptions {
    /// Measure perplexity on `evaluation.text`.
    #[serde(default = "default_true")]
    pub perplexity: bool,
    /// Also score zero-shot tasks (lm-evaluation-harness 0.4.13's definitions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zeroshot: Option<ZeroshotOptions>,
    /// Also time decoding and prefill at batch 1, with the pruned linears held compressed and
    /// dense in the same rounds (`wanda bench decode`'s measurement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<SpeedOptions>,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            perplexity: true,
            zeroshot: None,
            speed: None,
        }
    }
}

/// Decoding speed in `eval`: medians of `repeats` rounds after an untimed one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpeedOptions {
    /// Prompt tokens (fixed ids), run as one prefill.
    #[serde(default = "default_speed_prompt")]
    pub prompt: NonZeroUsize,
    /// Tokens decoded one at a time after the prompt.
    #[serde(default = "default_speed_decode")]
    pub decode: NonZeroUsize,
    /// Timed rounds.
    #[serde(default = "default_speed_repeats")]
    pub repeats: NonZeroUsize,
    /// Pruned linears held compressed (on the CPU): `auto` those with at least 30 % zeros on
    /// an AVX-512 CPU, `on` every decoder linear, `off` none.
    #[serde(default)]
    pub sparse: SparseMode,
}

fn default_speed_prompt() -> NonZeroUsize {
    NonZeroUsize::new(128).expect("nonzero")
}

fn default_speed_decode() -> NonZeroUsize {
    NonZeroUsize::new(64).expect("nonzero")
}

fn default_speed_repeats() -> NonZeroUsize {
    NonZeroUsize::new(3).expect("nonzero")
}

/// Zero-shot accuracy in `eval`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ZeroshotOptions {
    /// The tasks: boolq, rte, hellaswag, winogrande, arc_easy, arc_challenge, openbookqa.
    pub tasks: Vec<crate::eval::zeroshot::Task>,
    /// Score only the first N documents of each task (lm-eval's `--limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Read the tasks' documents from this folder, laid out like the hub repositories
    /// (`DIR/allenai/ai2_arc/ARC-Easy/test-00000-of-00001.parquet`), instead of the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<PathBuf>,
    /// Who scores: `native` (wanda's scorer, the default) or `lm-eval` (the installed
    /// lm-evaluation-harness, through `wanda serve` on a free loopback port).
    #[serde(default, skip_serializing_if = "Harness::is_native")]
    pub harness: Harness,
}

/// Who scores zero-shot tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Harness {
    /// wanda's own scorer of lm-eval 0.4.13's definitions.
    #[default]
    Native,
    /// The installed `lm_eval`, with its `local-completions` model against `wanda serve`.
    LmEval,
}

impl Harness {
    /// Whether this is the default.
    pub fn is_native(&self) -> bool {
        *self == Harness::Native
    }
}

fn default_true() -> bool {
    true
}

/// Options of `save`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SaveOptions {
    /// Also write the pruned weights (safetensors), not just the run record.
    #[serde(default)]
    pub model: bool,
    /// Precision of written weights.
    #[serde(default)]
    pub dtype: SaveDtype,
    /// Largest safetensors file; a bigger model is split into shards with an index
    /// (`model.safetensors.index.json`). Hugging Face's default, `5GB`, when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_shard_size: Option<ByteSize>,
}

/// A stage's options, by kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum StageOptions {
    /// `load`.
    Load(LoadOptions),
    /// `estimate`.
    Estimate(EstimateOptions),
    /// `gate`.
    Gate(GateOptions),
    /// `calibrate`.
    Calibrate(CalibrateOptions),
    /// `prune`.
    Prune(PruneOptions),
    /// `eval`.
    Eval(EvalOptions),
    /// `save`.
    Save(SaveOptions),
}

impl StageOptions {
    /// The kind these options belong to.
    pub fn kind(&self) -> StageKind {
        match self {
            StageOptions::Load(_) => StageKind::Load,
            StageOptions::Estimate(_) => StageKind::Estimate,
            StageOptions::Gate(_) => StageKind::Gate,
            StageOptions::Calibrate(_) => StageKind::Calibrate,
            StageOptions::Prune(_) => StageKind::Prune,
            StageOptions::Eval(_) => StageKind::Eval,
            StageOptions::Save(_) => StageKind::Save,
        }
    }
}

/// One stage: id, kind (from its options), the stages it needs, its options.
#[derive(Debug, Clone, PartialEq)]
pub struct StageSpec {
    /// Unique id (the kind in map form).
    pub id: String,
    /// Ids of the stages this one runs after and takes artifacts from.
    pub needs: Vec<String>,
    /// The options, which also fix the kind.
    pub options: StageOptions,
}

impl StageSpec {
    /// The kind.
    pub fn kind(&self) -> StageKind {
        self.options.kind()
    }
}

impl Serialize for StageSpec {
    /// Flat, as in the list form: `{ id, kind, needs, …options }`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Flat<'a> {
            id: &'a str,
            kind: StageKind,
            needs: &'a [String],
            #[serde(flatten)]
            options: &'a StageOptions,
        }
        Flat {
            id: &self.id,
            kind: self.kind(),
            needs: &self.needs,
            options: &self.options,
        }
        .serialize(s)
    }
}

/// The sweep: axes whose cartesian product gives the cells.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Sweep {
    /// The axes, in file order (the first varies slowest).
    pub axes: Vec<SweepAxis>,
}

impl Sweep {
    /// Whether there is nothing to sweep.
    pub fn is_empty(&self) -> bool {
        self.axes.is_empty()
    }

    /// Number of cells (1 without a sweep).
    pub fn cell_count(&self) -> usize {
        self.axes.iter().map(|a| a.points.len()).product()
    }
}

/// One axis: a single key, or several zipped keys that advance together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepAxis {
    /// The swept keys (`prune.sparsity`); several for a `zip` axis.
    pub keys: Vec<String>,
    /// The points; each holds one value per key.
    pub points: Vec<Vec<serde_json::Value>>,
}
