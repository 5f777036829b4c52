//! BLOOM (`BloomForCausalLM`: BigScience's BLOOM, 560M … 176B, and BLOOMZ; SparseGPT's second
//! family): a pre-norm layer with
//! - ALiBi in place of positions: each head's attention scores get `slope_h · key position`
//!   added ([`crate::model::arch::alibi`]); nothing rotates and no position is embedded;
//! - a LayerNorm of the token embeddings before the first layer
//!   (`word_embeddings_layernorm`);
//! - LayerNorms (epsilon `layer_norm_epsilon`), a bias on every linear, an MLP without a gate
//!   4 × hidden wide, `dense_4h_to_h(gelu_tanh(dense_h_to_4h(x)))`;
//! - q, k and v stacked in one `self_attention.query_key_value` **head by head**, as GPT-NeoX
//!   stacks them: the decoder holds them apart, pruning selects over the stack as the one
//!   matrix the reference code sees, and saving stacks them back in that order;
//! - every tensor under `transformer.` with its own names (`h.N`, `ln_f`, …), or without that
//!   prefix as BigScience's hub checkpoints store them, and the head tied to the embeddings.
//!
//! `apply_residual_connection_post_layernorm: true` (the residual taken after the norm) is
//! refused.

use std::collections::BTreeMap;

use super::{AttentionBiases, Family, FamilyRow};
use crate::model::arch::{
    invalid, Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig,
};

/// `BloomForCausalLM`.
pub struct Bloom;

/// The decoder's names of a layer's tensors and BLOOM's, relative to the layer.
const LAYER_NAMES: [(&str, &str); 6] = [
    ("self_attn.qkv_proj", "self_attention.query_key_value"),
    ("self_attn.o_proj", "self_attention.dense"),
    ("mlp.up_proj", "mlp.dense_h_to_4h"),
    ("mlp.down_proj", "mlp.dense_4h_to_h"),
    ("input_layernorm", "input_layernorm"),
    ("post_attention_layernorm", "post_attention_layernorm"),
];

/// The decoder's names of the tensors outside the layers and BLOOM's, without `model.`.
const MODEL_NAMES: [(&str, &str); 3] = [
    ("embed_tokens", "word_embeddings"),
    ("embed_norm", "word_embeddings_layernorm"),
    ("norm", "ln_f"),
];

/// `BloomForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    // llama.cpp's `bloom`, whose q/k/v stack is part by part (the loader regroups it head by head).
    gguf_arch: Some("bloom"),
    ties_embeddings: true,
    fused_linears: &super::QUERY_KEY_VALUE_BY_KV_HEAD,
    ..FamilyRow::new("BloomForCausalLM", "bloom", &Bloom)
};

impl Family for Bloom {
    /// Every linear of BLOOM's attention carries a bias.
    fn attention_biases(&self, _hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases { qkv: true, o: true }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    /// `BloomMLP` is always four times the hidden width.
    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.hidden_size.checked_mul(4)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        super::renamed(
            name,
            "transformer",
            "transformer.h",
            &LAYER_NAMES,
            &MODEL_NAMES,
        )
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        if hf.apply_residual_connection_post_layernorm == Some(true) {
            return Err(invalid(
                "apply_residual_connection_post_layernorm",
                "is true (the residual taken after the norm), which is not supported".into(),
            ));
        }
        super::refuse_grouped_heads(hf, "BLOOM")?;
        Ok(DecoderExtras {
            // `bloom_gelu_forward`, GELU's tanh approximation; BLOOM's configs name none.
            activation: Activation::GeluTanh,
            layer_norm: true,
            ungated_mlp: true,
            mlp_bias: true,
            alibi: true,
            embed_norm: true,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([
            ("layer_norm_epsilon", config.rms_norm_eps.into()),
            ("apply_residual_connection_post_layernorm", false.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// bigscience/bloom-560m's `config.json`, as the hub has it.
    const BLOOM_560M: &str = r#"{"apply_residual_connection_post_layernorm":false,
        "architectures":["BloomForCausalLM"],"attention_dropout":0.0,
        "attention_softmax_in_fp32":true,"bias_dropout_fusion":true,"bos_token_id":1,
        "eos_token_id":2,"hidden_dropout":0.0,"hidden_size":1024,"initializer_range":0.02,
        "layer_norm_epsilon":1e-05,"masked_softmax_fusion":true,"model_type":"bloom",
        "n_head":16,"n_inner":null,"n_layer":24,"offset_alibi":100,"pad_token_id":3,
        "pretraining_tp":1,"skip_bias_add":true,"skip_bias_add_qkv":false,
        "slow_but_exact":false,"unk_token_id":0,"use_cache":true,"vocab_size":250880}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn bloom_560m_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(BLOOM_560M).unwrap();
        assert_eq!(c.architecture, Architecture::Bloom);
        assert_eq!((c.num_hidden_layers, c.num_attention_heads), (24, 16));
        assert_eq!((c.head_dim, c.intermediate_size), (64, 4096));
        assert_eq!(c.rms_norm_eps, 1e-5);
        assert!(c.qkv_bias && c.o_bias && c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.alibi && e.embed_norm && e.layer_norm && e.ungated_mlp && e.mlp_bias);
        assert!(!e.parallel_residual && !c.rotary());
        assert_eq!(e.activation, Activation::GeluTanh);
        assert_eq!(c.alibi_slopes().map(|s| s.len()), Some(16));
        // The hub's model card: 559,214,592 parameters.
        assert_eq!(ModelShape::from_config(&c).parameters, 559_214_592);
        // Written back, the copy reads the same.
        let back = HfLlamaConfig::from_json(&c.to_hf_json().to_string())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn bloom_spellings_of_keys_and_bad_keys() {
        let c = resolve(&BLOOM_560M.replace(r#""hidden_size":1024"#, r#""n_embed":1024"#));
        assert_eq!(c.unwrap().hidden_size, 1024);
        // A copy saved by this tool keeps the checkpoint's keys beside its own: read when they
        // agree, refused by name when they do not.
        let both = BLOOM_560M.replace(r#""n_layer":24"#, r#""n_layer":24,"num_hidden_layers":24"#);
        assert_eq!(resolve(&both).unwrap().num_hidden_layers, 24);
        let e = HfLlamaConfig::from_json(
            &BLOOM_560M.replace(r#""n_layer":24"#, r#""n_layer":24,"num_hidden_layers":12"#),
        )
        .unwrap_err();
        assert!(
            e.contains("`n_layer` (24) and `num_hidden_layers` (12)"),
            "{e}"
        );
        let e = resolve(&BLOOM_560M.replace(
            r#""apply_residual_connection_post_layernorm":false"#,
            r#""apply_residual_connection_post_layernorm":true"#,
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("apply_residual_connection_post_layernorm"),
            "{e}"
        );
    }

    #[test]
    fn names_map_to_bloom_checkpoints() {
        let (f, c) = (Bloom, resolve(BLOOM_560M).unwrap());
        for (ours, theirs) in [
            (
                "model.embed_tokens.weight",
                "transformer.word_embeddings.weight",
            ),
            (
                "model.embed_norm.bias",
                "transformer.word_embeddings_layernorm.bias",
            ),
            ("model.norm.weight", "transformer.ln_f.weight"),
            (
                "model.layers.3.self_attn.qkv_proj.weight",
                "transformer.h.3.self_attention.query_key_value.weight",
            ),
            (
                "model.layers.0.self_attn.o_proj.bias",
                "transformer.h.0.self_attention.dense.bias",
            ),
            (
                "model.layers.23.mlp.down_proj.weight",
                "transformer.h.23.mlp.dense_4h_to_h.weight",
            ),
            (
                "model.layers.2.post_attention_layernorm.weight",
                "transformer.h.2.post_attention_layernorm.weight",
            ),
        ] {
            assert_eq!(
                f.checkpoint_name(&c, ours).as_deref(),
                Some(theirs),
                "{ours}"
            );
        }
        assert_eq!(f.checkpoint_name(&c, "lm_head.weight"), None);
    }
}
