//! GPT-2 (`GPT2LMHeadModel`, model type `gpt2`: OpenAI's GPT-2 124M … 1.5B, DistilGPT-2 and
//! their fine-tunes), a pre-norm layer with
//! - LayerNorms (`ln_1`, `ln_2`, epsilon `layer_norm_epsilon`) and biases on every linear;
//! - learned absolute positions (`wpe`, position `p` in row `p`) added to the token
//!   embeddings, and no RoPE;
//! - multi-head attention with q, k and v stacked **part by part** in `attn.c_attn` (all
//!   queries, then keys, then values): the decoder holds them apart, pruning selects over the
//!   stack as the one matrix the reference code sees, saving stacks them back;
//! - an MLP without a gate, `c_proj(gelu_new(c_fc(x)))`, `n_inner` wide (default 4 × hidden);
//! - a tied head;
//! - every linear a `Conv1D`, whose weight is stored transposed, `[in, out]`: loading turns it
//!   into PyTorch's `[out, in]` ([`crate::model::checkpoint::TransposedSource`]), saving turns it
//!   back;
//! - the key names `n_embd`, `n_layer`, `n_head`, `n_positions`, `n_inner` and every tensor
//!   under `transformer.` (`wte`, `wpe`, `h.N`, `ln_f`; the hub's files leave the prefix out).
//!
//! Attention scores unscaled (`scale_attn_weights: false`) or divided by the layer's index
//! (`scale_attn_by_inverse_layer_idx`) are refused; no released GPT-2 uses either.

use std::collections::BTreeMap;

use super::{AttentionBiases, ClassDefaults, Family, FamilyRow};
use crate::model::arch::FusedLinear;
use crate::model::arch::{
    invalid, Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig,
};

/// `GPT2LMHeadModel`.
pub struct Gpt2;

/// The decoder's names of a layer's tensors and GPT-2's (and GPT-BigCode's), relative to the
/// layer.
pub(super) const LAYER_NAMES: [(&str, &str); 6] = [
    ("self_attn.qkv_proj", "attn.c_attn"),
    ("self_attn.o_proj", "attn.c_proj"),
    ("mlp.up_proj", "mlp.c_fc"),
    ("mlp.down_proj", "mlp.c_proj"),
    ("input_layernorm", "ln_1"),
    ("post_attention_layernorm", "ln_2"),
];

/// The decoder's names of the tensors outside the layers and GPT-2's, without `model.`.
pub(super) const MODEL_NAMES: [(&str, &str); 3] = [
    ("embed_tokens", "wte"),
    ("embed_positions", "wpe"),
    ("norm", "ln_f"),
];

/// The decoder's name of a GPT-2 or GPT-BigCode tensor: `transformer.wte`, `transformer.h.N.…`
/// (the LM head keeps its name).
pub(super) fn gpt2_name(name: &str) -> Option<String> {
    super::renamed(
        name,
        "transformer",
        "transformer.h",
        &LAYER_NAMES,
        &MODEL_NAMES,
    )
}

/// `attn.c_attn`: q, k and v stacked part by part.
const C_ATTN: [FusedLinear; 1] = [FusedLinear {
    fused: "self_attn.qkv_proj",
    parts: &["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
    per_kv_head: false,
}];

/// The layer GPT-2 and GPT-BigCode share, as a config of `family` gives it: `activation` the
/// GELU of `activation_function` (`default` without one); scores scaled by `head_dim^-0.5`
/// only.
pub(super) fn gpt2_layer(
    hf: &HfLlamaConfig,
    family: &str,
    default: Activation,
) -> Result<DecoderExtras, ConfigError> {
    let activation = super::gelu_activation(hf, "activation_function", family, default)?;
    if hf.gpt2.scale_attn_weights == Some(false) {
        return Err(invalid(
            "scale_attn_weights",
            format!("is false (unscaled attention scores); {family} runs only with it true"),
        ));
    }
    if hf.gpt2.scale_attn_by_inverse_layer_idx == Some(true) {
        return Err(invalid(
            "scale_attn_by_inverse_layer_idx",
            format!("is true (scores divided by the layer's index); {family} runs only without"),
        ));
    }
    Ok(DecoderExtras {
        activation,
        layer_norm: true,
        ungated_mlp: true,
        mlp_bias: true,
        learned_positions: true,
        positions_from_row_zero: true,
        ..DecoderExtras::default()
    })
}

/// The `config.json` keys of GPT-2, GPT-BigCode and GPT-J beyond Llama's: `n_inner`,
/// `layer_norm_epsilon`, `activation_function`.
pub(super) fn gpt2_hf_keys(config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
    BTreeMap::from([
        ("n_inner", config.intermediate_size.into()),
        ("layer_norm_epsilon", config.rms_norm_eps.into()),
        (
            "activation_function",
            config.extras.activation.hf_name().into(),
        ),
    ])
}

/// `GPT2LMHeadModel`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults::positions(1024),
    // llama.cpp's `gpt2`, whose converter transposes the `Conv1D` weights into linears.
    gguf_arch: Some("gpt2"),
    ties_embeddings: true,
    fused_linears: &C_ATTN,
    transposed_linears: &["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"],
    ..FamilyRow::new("GPT2LMHeadModel", "gpt2", &Gpt2)
};

impl Family for Gpt2 {
    /// Every attention projection carries a bias.
    fn attention_biases(&self, _hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases { qkv: true, o: true }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    /// `n_inner` (read as `intermediate_size`), else four times the hidden width.
    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        super::width_or_four_hidden(hf)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        gpt2_name(name)
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_grouped_heads(hf, "GPT-2")?;
        gpt2_layer(hf, "GPT-2", Activation::GeluTanh)
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        gpt2_hf_keys(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// openai-community/gpt2's `config.json`, as the hub has it (its task parameters left out).
    const GPT2: &str = r#"{"activation_function":"gelu_new","architectures":["GPT2LMHeadModel"],
        "attn_pdrop":0.1,"bos_token_id":50256,"embd_pdrop":0.1,"eos_token_id":50256,
        "initializer_range":0.02,"layer_norm_epsilon":1e-05,"model_type":"gpt2","n_ctx":1024,
        "n_embd":768,"n_head":12,"n_layer":12,"n_positions":1024,"resid_pdrop":0.1,
        "summary_activation":null,"summary_first_dropout":0.1,"summary_proj_to_labels":true,
        "summary_type":"cls_index","summary_use_proj":true,"vocab_size":50257}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn gpt2_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(GPT2).unwrap();
        assert_eq!(c.architecture, Architecture::Gpt2);
        assert_eq!((c.hidden_size, c.num_hidden_layers), (768, 12));
        assert_eq!((c.head_dim, c.num_key_value_heads), (64, 12));
        assert_eq!(
            (c.intermediate_size, c.max_position_embeddings),
            (3072, 1024)
        );
        assert!(c.qkv_bias && c.o_bias && c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.layer_norm && e.ungated_mlp && e.mlp_bias && e.learned_positions);
        assert_eq!(e.position_offset(), 0);
        assert_eq!(e.activation, Activation::GeluTanh);
        // transformers' `num_parameters()` of GPT-2: 124,439,808.
        assert_eq!(ModelShape::from_config(&c).parameters, 124_439_808);
        let json = c.to_hf_json();
        assert_eq!(json["n_inner"], 3072);
        assert_eq!(json["layer_norm_epsilon"], 1e-5);
    }

    #[test]
    fn names_map_to_gpt2_checkpoints_and_conv1d_weights_are_known() {
        let c = resolve(GPT2).unwrap();
        let theirs = |n: &str| Gpt2.checkpoint_name(&c, n);
        for (ours, gpt2) in [
            (
                "model.layers.2.self_attn.qkv_proj.weight",
                "transformer.h.2.attn.c_attn.weight",
            ),
            (
                "model.layers.0.self_attn.o_proj.bias",
                "transformer.h.0.attn.c_proj.bias",
            ),
            (
                "model.layers.11.mlp.down_proj.weight",
                "transformer.h.11.mlp.c_proj.weight",
            ),
            (
                "model.layers.1.post_attention_layernorm.bias",
                "transformer.h.1.ln_2.bias",
            ),
            ("model.embed_positions.weight", "transformer.wpe.weight"),
            ("model.norm.weight", "transformer.ln_f.weight"),
        ] {
            assert_eq!(theirs(ours).as_deref(), Some(gpt2), "{ours}");
        }
        assert_eq!(theirs("lm_head.weight"), None);
        for (name, transposed) in [
            ("transformer.h.3.attn.c_attn.weight", true),
            ("h.3.mlp.c_proj.weight", true),
            ("transformer.h.3.attn.c_attn.bias", false),
            ("transformer.h.3.ln_1.weight", false),
            ("transformer.wte.weight", false),
            ("transformer.h.3.attn.xc_attn.weight", false),
        ] {
            assert_eq!(ROW.stores_transposed(name), transposed, "{name}");
        }
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        for (from, to, key) in [
            (r#""gelu_new""#, r#""relu""#, "activation_function"),
            (
                r#""n_ctx""#,
                r#""scale_attn_weights":false,"n_ctx""#,
                "scale_attn_weights",
            ),
            (
                r#""n_ctx""#,
                r#""scale_attn_by_inverse_layer_idx":true,"n_ctx""#,
                "scale_attn_by_inverse_layer_idx",
            ),
            (
                r#""n_ctx""#,
                r#""num_key_value_heads":4,"n_ctx""#,
                "num_key_value_heads",
            ),
        ] {
            let err = resolve(&GPT2.replace(from, to)).unwrap_err().to_string();
            assert!(err.contains(key), "{to}: {err}");
        }
    }
}
