//! Decoder families. Every family runs on the one shared decoder ([`crate::model::decoder`]), its
//! fast kernels, pruning, streaming, the estimator and `save`; a family says only what is its
//! own: its names in `config.json` and in GGUF files, and the config decisions that differ
//! between families (which projections carry biases, sliding-window attention, per-head q/k
//! norms, the row order of GGUF q/k weights). A family is one file here, holding its
//! [`FamilyRow`] (names and constants) and its [`Family`] hooks (decisions), and one entry in
//! [`crate::model::arch::families!`].

/// Declares the file of every family in [`crate::model::arch::families!`].
macro_rules! family_files {
    ($(mod $module:ident { $($(#[$doc:meta])* $variant:ident = $row:ident,)+ })*) => {
        $(pub mod $module;)*
    };
}

crate::model::arch::families!(family_files);

pub mod vision_language;

mod gguf_metadata;
mod hf_json;
mod registry;
mod resolve;

pub use gguf_metadata::GgufMetadata;

use std::collections::BTreeMap;

use crate::model::arch::{
    invalid, Activation, ConfigError, DecoderExtras, ExpertStacks, FusedLinear, HfLlamaConfig,
    HfRopeScaling, LlamaConfig,
};

/// What a family's transformers config class takes for the keys of the model's shape that a
/// config leaves out. A null is read the same way here, where some classes read it otherwise
/// (`MistralConfig` takes a null `num_key_value_heads` as one per query head).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassDefaults {
    /// `num_key_value_heads`; `None`: one per query head.
    pub key_value_heads: Option<usize>,
    /// `head_dim`; `None`: `hidden_size / num_attention_heads`.
    pub head_dim: Option<usize>,
    /// `max_position_embeddings` (GPT-2's `n_positions`).
    pub max_positions: usize,
}

impl ClassDefaults {
    /// `LlamaConfig`'s: a kv head per query head, `hidden_size / num_attention_heads` wide, and
    /// 2,048 positions.
    pub const LLAMA: ClassDefaults = ClassDefaults {
        key_value_heads: None,
        head_dim: None,
        max_positions: 2048,
    };

    /// Llama's, with `max_positions` positions.
    pub const fn positions(max_positions: usize) -> ClassDefaults {
        ClassDefaults {
            max_positions,
            ..ClassDefaults::LLAMA
        }
    }
}

/// The head width a config gives, read the family's way, else its class's default; `None`:
/// `hidden_size / num_attention_heads`.
pub(crate) fn given_head_dim(row: &FamilyRow, hf: &HfLlamaConfig) -> Option<usize> {
    row.hooks.head_dim(hf).or(row.class_defaults.head_dim)
}

/// Which projections of the attention block carry a bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionBiases {
    /// q, k and v.
    pub qkv: bool,
    /// The output projection.
    pub o: bool,
}

/// The checkpoint's name of the decoder's tensor `name` in a family that keeps its tensors under
/// a base model `base` with modules of its own: `model.layers.N.<module>.<kind>` is
/// `<layers>.N.<theirs>.<kind>`, `<theirs>` the module's entry in `layer_modules` (ours, theirs);
/// `model.<module>.<kind>` is `<base>.<theirs>.<kind>` by `model_modules`, or
/// `<base>.<module>.<kind>` for a module not in it. `None` for any other name (the LM head) and a
/// layer module not in the table.
pub(crate) fn renamed(
    name: &str,
    base: &str,
    layers: &str,
    layer_modules: &[(&str, &str)],
    model_modules: &[(&str, &str)],
) -> Option<String> {
    let theirs = |table: &[(&str, &str)], module: &str| {
        table
            .iter()
            .find(|(ours, _)| *ours == module)
            .map(|(_, theirs)| theirs.to_string())
    };
    let rest = name.strip_prefix("model.")?;
    if let Some(layer) = rest.strip_prefix("layers.") {
        let (index, rest) = layer.split_once('.')?;
        let (module, kind) = rest.rsplit_once('.')?;
        return Some(format!(
            "{layers}.{index}.{}.{kind}",
            theirs(layer_modules, module)?
        ));
    }
    let (module, kind) = rest.rsplit_once('.')?;
    let module = theirs(model_modules, module).unwrap_or_else(|| module.to_string());
    Some(format!("{base}.{module}.{kind}"))
}

/// The one norm of a parallel layer whose attention and MLP share it (StableLM 2 12B,
/// Cohere): the decoder's `post_attention_layernorm` is the checkpoint's `input_layernorm`.
pub(crate) fn shared_input_norm(name: &str) -> Option<String> {
    let (layer, kind) = name.split_once(".post_attention_layernorm.")?;
    Some(format!("{layer}.input_layernorm.{kind}"))
}

/// `query_key_value` stacked by kv head (GPT-NeoX, BLOOM, Falcon): the one stacked linear
/// of those families.
pub(crate) static QUERY_KEY_VALUE_BY_KV_HEAD: [FusedLinear; 1] = [FusedLinear {
    fused: "self_attn.qkv_proj",
    parts: &["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
    per_kv_head: true,
}];

/// `experts` where its counts make sense: at least one expert, and between one and all of them
/// per token (`count_key` names the config's key for the count).
pub(crate) fn checked_experts(
    experts: crate::model::arch::Experts,
    count_key: &str,
) -> Result<crate::model::arch::Experts, ConfigError> {
    if experts.count == 0 {
        return Err(invalid(count_key, "must be at least 1".into()));
    }
    if experts.per_token == 0 || experts.per_token > experts.count {
        return Err(invalid(
            "num_experts_per_tok",
            format!(
                "is {}; it must be between 1 and {count_key} ({})",
                experts.per_token, experts.count
            ),
        ));
    }
    if experts.width == 0 {
        return Err(invalid("intermediate_size", "must be at least 1".into()));
    }
    Ok(experts)
}

/// The shared experts (`n_shared_experts`, at least 1) and the dense first layers
/// (`first_k_dense_replace`, at most `num_hidden_layers`) of a DeepSeek-style layout (GLM-4.5,
/// DeepSeek-V2 and V3), `defaults` where the keys are absent; `family` names it in errors.
pub(crate) fn shared_and_dense_layers(
    hf: &HfLlamaConfig,
    family: &str,
    defaults: (usize, usize),
) -> Result<(usize, usize), ConfigError> {
    let shared = hf.experts.n_shared_experts.unwrap_or(defaults.0);
    if shared == 0 {
        return Err(invalid(
            "n_shared_experts",
            format!("must be at least 1: {family}'s layer always has its shared expert"),
        ));
    }
    let dense = hf.experts.first_k_dense_replace.unwrap_or(defaults.1);
    if dense > hf.num_hidden_layers {
        return Err(invalid(
            "first_k_dense_replace",
            format!(
                "is {dense}, more than the {} layers (num_hidden_layers)",
                hf.num_hidden_layers
            ),
        ));
    }
    Ok((shared, dense))
}

/// Refuses groups of `experts` that transformers' grouped routers cannot form: `n_group`
/// (`groups`) must divide the experts into groups of at least `smallest` (2 where a group is
/// scored by its two best experts), `topk_group` (`open`) be between 1 and `n_group`, and the
/// open groups hold at least `num_experts_per_tok` experts.
pub(crate) fn check_groups(
    experts: &crate::model::arch::Experts,
    groups: usize,
    open: usize,
    smallest: usize,
) -> Result<(), ConfigError> {
    if groups == 0 || !experts.count.is_multiple_of(groups) || experts.count / groups < smallest {
        return Err(invalid(
            "n_group",
            format!(
                "is {groups}; it must divide the {} experts (n_routed_experts) into groups of \
                 at least {smallest}",
                experts.count
            ),
        ));
    }
    if open == 0 || open > groups || open * (experts.count / groups) < experts.per_token {
        return Err(invalid(
            "topk_group",
            format!(
                "is {open}; it must be between 1 and n_group ({groups}), and its groups hold at \
                 least num_experts_per_tok ({}) experts",
                experts.per_token
            ),
        ));
    }
    Ok(())
}

/// The experts of a family whose router reads Qwen's keys (Qwen2-MoE, Qwen3-MoE, OLMoE):
/// `num_experts` (transformers 5 writes Qwen's as `num_local_experts`), `num_experts_per_tok`
/// and `norm_topk_prob` where the config gives them, else `defaults`' (its width and shared
/// expert the caller's); the weights rounded to the model's dtype, as these routers return
/// them; checked as [`checked_experts`].
pub(crate) fn topk_experts(
    hf: &HfLlamaConfig,
    defaults: crate::model::arch::Experts,
) -> Result<crate::model::arch::Experts, ConfigError> {
    let experts = crate::model::arch::Experts {
        count: hf
            .experts
            .num_experts
            .or(hf.experts.num_local_experts)
            .unwrap_or(defaults.count),
        per_token: hf.experts.num_experts_per_tok.unwrap_or(defaults.per_token),
        normalize: hf.experts.norm_topk_prob.unwrap_or(defaults.normalize),
        round_weights: true,
        ..defaults
    };
    checked_experts(experts, "num_experts")
}

/// The `config.json` keys of a saved copy's experts: their count under `count_key`, those per
/// token, and whether their probabilities are renormalised (`norm_topk_prob`).
pub(crate) fn expert_hf_keys(
    config: &LlamaConfig,
    count_key: &'static str,
) -> BTreeMap<&'static str, serde_json::Value> {
    let experts = config.extras.experts;
    BTreeMap::from([
        (count_key, experts.map(|e| e.count).into()),
        ("num_experts_per_tok", experts.map(|e| e.per_token).into()),
        ("norm_topk_prob", experts.map(|e| e.normalize).into()),
    ])
}

/// Refuses grouped key/value heads (`num_key_value_heads` other than the query heads) for a
/// family whose attention has a key and value per query head.
pub(crate) fn refuse_grouped_heads(hf: &HfLlamaConfig, family: &str) -> Result<(), ConfigError> {
    match hf.num_key_value_heads {
        Some(kv) if kv != hf.num_attention_heads => Err(invalid(
            "num_key_value_heads",
            format!(
                "({kv}) differs from the query heads ({}); {family} attends with every head",
                hf.num_attention_heads
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses an MLP activation other than SiLU (`hidden_act`) for a family whose layer takes
/// SwiGLU only; `family` names it in the error.
pub(crate) fn refuse_all_but_silu(hf: &HfLlamaConfig, family: &str) -> Result<(), ConfigError> {
    match hf.activation_name() {
        None | Some("silu") => Ok(()),
        Some(other) => Err(invalid(
            "hidden_act",
            format!("is `{other}`; {family} takes only `silu`"),
        )),
    }
}

/// The GELU a config names under `key` (`hidden_act`, GPT-J's `activation_function`): `gelu`
/// exact, `gelu_new`, `gelu_fast` and `gelu_pytorch_tanh` the tanh approximation (transformers'
/// three names of it), `default` where it names none; any other is refused for `family`.
pub(crate) fn gelu_activation(
    hf: &HfLlamaConfig,
    key: &str,
    family: &str,
    default: Activation,
) -> Result<Activation, ConfigError> {
    match hf.activation_name() {
        None => Ok(default),
        Some("gelu") => Ok(Activation::Gelu),
        Some("gelu_new" | "gelu_fast" | "gelu_pytorch_tanh") => Ok(Activation::GeluTanh),
        Some(other) => Err(invalid(
            key,
            format!(
                "is `{other}`; {family} takes `gelu` or the tanh GELU (`gelu_new`, `gelu_fast`, \
                 `gelu_pytorch_tanh`)"
            ),
        )),
    }
}

/// The squared ReLU (`relu2`, the default where `hidden_act` names none) of a family whose
/// MLP takes it alone (Nemotron, Arcee); any other activation is refused for `family`.
pub(crate) fn relu2_activation(
    hf: &HfLlamaConfig,
    family: &str,
) -> Result<Activation, ConfigError> {
    match hf.activation_name() {
        None | Some("relu2") => Ok(Activation::Relu2),
        Some(other) => Err(invalid(
            "hidden_act",
            format!("is `{other}`; {family} takes `relu2`"),
        )),
    }
}

/// The MLP's width of GPT-2's config lineage (GPT-2, GPT-BigCode, GPT-J, GPT-Neo):
/// `intermediate_size` (their `n_inner`, read under it) where given, else four times the
/// hidden width.
pub(crate) fn width_or_four_hidden(hf: &HfLlamaConfig) -> Option<usize> {
    hf.intermediate_size
        .or_else(|| hf.hidden_size.checked_mul(4))
}

/// Refuses `tie_word_embeddings: true` for a family whose LM head has a bias of its own (Phi,
/// GPT-J), which a head tied to the embeddings would drop.
pub(crate) fn refuse_tied_biased_head(hf: &HfLlamaConfig, family: &str) -> Result<(), ConfigError> {
    match hf.tie_word_embeddings {
        Some(true) => Err(invalid(
            "tie_word_embeddings",
            format!(
                "is true; {family}'s LM head keeps a bias of its own, which a head tied to the \
                 embeddings would drop (no released {family} model ties it)"
            ),
        )),
        _ => Ok(()),
    }
}

/// The extras of Llama's own layer as a config of `family` gives them: SwiGLU only, and
/// biases on the MLP's linears where `mlp_bias` says so (`LlamaConfig`'s key, which Granite's
/// and SmolLM3's configs share).
pub(crate) fn llama_layer(hf: &HfLlamaConfig, family: &str) -> Result<DecoderExtras, ConfigError> {
    refuse_all_but_silu(hf, family)?;
    Ok(DecoderExtras {
        mlp_bias: hf.mlp_bias.unwrap_or(false),
        ..DecoderExtras::default()
    })
}

/// Which layers slide (`true`) and which attend in full: `layer_types`
/// (`sliding_attention`, `full_attention`) where the config gives them, else every
/// `global_every`-th layer full (Gemma 2 and 3, OLMo 3).
pub(crate) fn sliding_layers(
    hf: &HfLlamaConfig,
    global_every: usize,
) -> Result<Vec<bool>, ConfigError> {
    match &hf.layer_types {
        Some(types) => types
            .iter()
            .map(|t| match t.as_str() {
                "sliding_attention" => Ok(true),
                "full_attention" => Ok(false),
                other => Err(invalid(
                    "layer_types",
                    format!("has `{other}`; expected `sliding_attention` or `full_attention`"),
                )),
            })
            .collect(),
        None => {
            let every = global_every.max(1);
            Ok((0..hf.num_hidden_layers)
                .map(|i| (i + 1) % every != 0)
                .collect())
        }
    }
}

/// `layer_types` as a saved copy writes it, from which layers slide.
pub(crate) fn layer_types_json(sliding: &[bool]) -> serde_json::Value {
    sliding
        .iter()
        .map(|&s| {
            if s {
                "sliding_attention"
            } else {
                "full_attention"
            }
        })
        .collect::<Vec<&str>>()
        .into()
}

/// Refuses per-head q/k LayerNorms (`qk_layernorm: true`: StableLM 2 12B's; no released Phi
/// model has them), which the decoder does not run.
pub(crate) fn refuse_qk_layernorm(hf: &HfLlamaConfig, family: &str) -> Result<(), ConfigError> {
    match hf.qk_layernorm {
        Some(true) => Err(invalid(
            "qk_layernorm",
            format!("is true (per-head q/k LayerNorms); {family} runs only without them"),
        )),
        _ => Ok(()),
    }
}

/// The dimensions of each head that rotate (`DecoderExtras::rotary_dim`, `None` where all of
/// them do), from the share a config gives: `rope_parameters`' `partial_rotary_factor`
/// (transformers 5), else `own` (the family's key, named `key` in errors), else `default`. As
/// transformers takes it, `int(head_dim · share)`, which must be even and at least 2.
pub(crate) fn partial_rotary(
    row: &FamilyRow,
    hf: &HfLlamaConfig,
    own: Option<f64>,
    key: &str,
    default: f64,
) -> Result<Option<usize>, ConfigError> {
    let share = hf
        .rope_parameters
        .as_ref()
        .and_then(|p| p.global())
        .and_then(|p| p.partial_rotary_factor)
        .or(own)
        .unwrap_or(default);
    if !(share > 0.0 && share <= 1.0) {
        return Err(invalid(key, format!("must be in (0, 1], got {share}")));
    }
    let head_dim = given_head_dim(row, hf).unwrap_or(hf.hidden_per_head());
    let rotary = (head_dim as f64 * share) as usize;
    if rotary == 0 || !rotary.is_multiple_of(2) {
        return Err(invalid(
            key,
            format!(
                "rotates {rotary} of the {head_dim} dimensions of a head; it must rotate an \
                 even number, at least 2"
            ),
        ));
    }
    Ok((rotary != head_dim).then_some(rotary))
}

/// A family as data: its names and the constants its config class and checkpoints fix, beside
/// `hooks`, the decisions it computes from a config. Each family's file holds its row (`ROW`),
/// the row [`crate::model::arch::families!`] names.
pub struct FamilyRow {
    /// The Hugging Face class name, as written in `config.json` `architectures`.
    pub hf_class: &'static str,
    /// The Hugging Face `model_type`.
    pub model_type: &'static str,
    /// The GGUF `general.architecture` llama.cpp writes for this family, when it has its own
    /// (Mistral files say `llama`).
    pub gguf_arch: Option<&'static str>,
    /// Whether llama.cpp's converter interleaved the rows of `attn_q`/`attn_k` for its RoPE, so
    /// the loader permutes them back to the "rotate half" layout.
    pub gguf_interleaves_qk: bool,
    /// Whether the LM head reuses the token embeddings when `tie_word_embeddings` is absent.
    pub ties_embeddings: bool,
    /// The config class's kv heads, head width and context length where a config gives none
    /// (`tests/it/config_defaults.rs` holds every family to its class).
    pub class_defaults: ClassDefaults,
    /// The linears the family's checkpoints store stacked in one tensor.
    pub fused_linears: &'static [FusedLinear],
    /// How the family's Hugging Face checkpoints stack a layer's experts in 3-D tensors
    /// ([`crate::model::checkpoint`], GPT-OSS's and Llama 4's); `None` where each expert has
    /// linears of its own.
    pub expert_stacks: Option<ExpertStacks>,
    /// The modules (checkpoint names relative to a layer, e.g. `attn.c_attn`) whose weights the
    /// family's Hugging Face checkpoints store transposed, `[in, out]` (GPT-2's `Conv1D`).
    pub transposed_linears: &'static [&'static str],
    /// The RoPE base when a config names none: the config class's `default_theta` in
    /// transformers 5 (10,000 unless the family says otherwise).
    pub default_rope_theta: f64,
    /// The top-level `original_max_position_embeddings` the config class takes where a config
    /// leaves it out, which LongRoPE then reads over its own (Phi-3's 4096); `None` where the
    /// class has no such key.
    pub original_positions: Option<usize>,
    /// Keys of Llama's `config.json` that the family's config class refuses (Falcon's
    /// `head_dim` is a read-only property), left out of a saved copy.
    pub hf_keys_refused: &'static [&'static str],
    /// The decisions the family computes from a config.
    pub hooks: &'static dyn Family,
}

impl FamilyRow {
    /// The row of the family named `hf_class` and `model_type` whose decisions are `hooks`,
    /// with Llama's constants: the base a family's row changes with `..`.
    pub const fn new(
        hf_class: &'static str,
        model_type: &'static str,
        hooks: &'static dyn Family,
    ) -> FamilyRow {
        FamilyRow {
            hf_class,
            model_type,
            gguf_arch: None,
            gguf_interleaves_qk: false,
            ties_embeddings: false,
            class_defaults: ClassDefaults::LLAMA,
            fused_linears: &[],
            expert_stacks: None,
            transposed_linears: &[],
            default_rope_theta: 10_000.0,
            original_positions: None,
            hf_keys_refused: &[],
            hooks,
        }
    }

    /// Whether the Hugging Face checkpoint tensor `name` is one of
    /// [`Self::transposed_linears`]' weights.
    pub fn stores_transposed(&self, name: &str) -> bool {
        name.strip_suffix(".weight").is_some_and(|module| {
            self.transposed_linears.iter().any(|linear| {
                module
                    .strip_suffix(linear)
                    .is_some_and(|layer| layer.ends_with('.'))
            })
        })
    }
}

/// What one decoder family decides from a config, beyond its [`FamilyRow`].
pub trait Family: Sync {
    /// Reads what the family's GGUF files say beyond the keys every family shares into `hf`
    /// (already read from those): the family's own spellings and llama.cpp's defaults for it.
    fn read_gguf(&self, _meta: &dyn GgufMetadata, _hf: &mut HfLlamaConfig) {}

    /// The biases the attention block carries, from `attention_bias` unless the family fixes
    /// them.
    fn attention_biases(&self, hf: &HfLlamaConfig) -> AttentionBiases {
        let bias = hf.attention_bias.unwrap_or(false);
        AttentionBiases { qkv: bias, o: bias }
    }

    /// The epsilon of the norms: `rms_norm_eps` unless the family fixes it.
    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-6)
    }

    /// The key/value heads: `num_key_value_heads` unless the family names them its own way;
    /// `None`: as many as query heads.
    fn key_value_heads(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.num_key_value_heads
    }

    /// The width of a head's queries and keys: `head_dim` unless the family derives it; `None`:
    /// `hidden_size / num_attention_heads`.
    fn head_dim(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.head_dim
    }

    /// The MLP's width: `intermediate_size` (OPT: `ffn_dim`) unless the family fixes it.
    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.intermediate_size.or(hf.opt.ffn_dim)
    }

    /// The checkpoint's name for the tensor the decoder calls `name` (Llama's names:
    /// `model.layers.3.mlp.up_proj.weight`) in a model of `config`, `None` where the family uses
    /// the same name.
    fn checkpoint_name(&self, _config: &LlamaConfig, _name: &str) -> Option<String> {
        None
    }

    /// The sliding-window span of every layer's attention, when the family uses one.
    fn sliding_window(&self, _hf: &HfLlamaConfig) -> Option<usize> {
        None
    }

    /// Whether queries and keys pass through norms of their own (`q_norm`, `k_norm`) between
    /// their projections and RoPE: an RMSNorm per head unless the extras say otherwise.
    fn qk_norm(&self, _hf: &HfLlamaConfig) -> bool {
        false
    }

    /// The RoPE scaling of a config that gives none (neither `rope_scaling` nor
    /// `rope_parameters`): the config class's default (GPT-OSS's YaRN), else none.
    fn default_rope_scaling(&self) -> Option<HfRopeScaling> {
        None
    }

    /// The RoPE scaling a `rope_scaling` type names for this family's config class (Phi-3
    /// reads its legacy `su` and `yarn` as LongRoPE).
    fn rope_type<'a>(&self, kind: &'a str) -> &'a str {
        kind
    }

    /// The `config.json` keys a saved copy needs beyond Llama's, from the resolved config.
    fn hf_keys(&self, _config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::new()
    }

    /// What the family's layer adds to Llama's. Llama's layer takes SwiGLU only, so any other
    /// activation the config names is an error.
    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        refuse_all_but_silu(hf, "this family")?;
        Ok(DecoderExtras::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;

    /// q of 4 rows, k and v of 2, over 2 kv heads: part by part, `[q q q q k k v v]`; by kv
    /// head, `[q q k v | q q k v]`.
    #[test]
    fn stacked_parts_lie_part_by_part_or_head_by_head() {
        let mut qkv = FusedLinear {
            fused: "self_attn.qkv_proj",
            parts: &["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
            per_kv_head: false,
        };
        assert_eq!(
            qkv.row_ranges(&[4, 2, 2], 2),
            Some(vec![vec![0..4], vec![4..6], vec![6..8]])
        );
        qkv.per_kv_head = true;
        assert_eq!(
            qkv.row_ranges(&[4, 2, 2], 2),
            Some(vec![vec![0..2, 4..6], vec![2..3, 6..7], vec![3..4, 7..8]])
        );
        assert_eq!(qkv.row_ranges(&[4, 3, 2], 2), None, "3 rows over 2 heads");
    }

    #[test]
    fn every_family_is_found_by_each_of_its_names() {
        for &arch in Architecture::ALL {
            let row = arch.row();
            assert_eq!(Architecture::from_hf_name(row.hf_class), Some(arch));
            assert_eq!(Architecture::from_hf_name(row.model_type), Some(arch));
            if let Some(gguf) = row.gguf_arch {
                assert_eq!(Architecture::from_gguf_arch(gguf), Some(arch));
            }
        }
        assert_eq!(Architecture::from_hf_name("MptForCausalLM"), None);
        assert_eq!(Architecture::from_gguf_arch("mistral"), None);
        assert_eq!(
            Architecture::supported_gguf_archs(),
            "llama, qwen2, qwen3, phi3, gemma2, gemma3, gptneox, bloom, falcon, gemma, phi2, \
             stablelm, olmo2, smollm3, granite, granitemoe, glm4, command-r, cohere2, olmo, \
             qwen3moe, olmoe, qwen2moe, starcoder2, nemotron, gpt2, arcee, exaone4, ernie4_5, \
             starcoder, gpt-oss"
        );
    }
}
