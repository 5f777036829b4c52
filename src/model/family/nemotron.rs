//! Nemotron (`NemotronForCausalLM`, model type `nemotron`: NVIDIA's Nemotron-3 and -4, and the
//! Minitron models pruned and distilled from them, Minitron-4B/8B and
//! Llama-3.1-Minitron-4B-Width): Llama's names and attention with
//! - LayerNorms with biases whose gains are stored as `w` and applied as `1 + w`
//!   (`NemotronLayerNorm1P`, epsilon `norm_eps`);
//! - an MLP without a gate, `down_proj(relu(up_proj(x))²)` (`hidden_act: relu2`), biases where
//!   `mlp_bias` says;
//! - RoPE on the first `partial_rotary_factor` (default 0.5) of each head, "rotate half";
//! - biases on the attention projections where `attention_bias` says, an untied head.

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow, GgufMetadata};
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `NemotronForCausalLM`.
pub struct Nemotron;

/// `NemotronConfig`'s share of rotated dimensions when a config names none.
const DEFAULT_PARTIAL_ROTARY_FACTOR: f64 = 0.5;

/// `NemotronForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults::positions(4096),
    // llama.cpp's `nemotron` (its norms stored as `1 + w`, the rotated part of a head as
    // `rope.dimension_count`).
    gguf_arch: Some("nemotron"),
    ..FamilyRow::new("NemotronForCausalLM", "nemotron", &Nemotron)
};

impl Family for Nemotron {
    /// llama.cpp writes the rotated dimensions of the heads, not their width.
    fn read_gguf(&self, meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        hf.partial_rotary_factor = super::gguf_metadata::rotated_share(meta, hf);
    }

    /// `norm_eps` (read as `layer_norm_eps`), default 1e-5.
    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let activation = super::relu2_activation(hf, "Nemotron")?;
        let rotary_dim = super::partial_rotary(
            &ROW,
            hf,
            hf.partial_rotary_factor,
            "partial_rotary_factor",
            DEFAULT_PARTIAL_ROTARY_FACTOR,
        )?;
        Ok(DecoderExtras {
            activation,
            layer_norm: true,
            norm_offset: true,
            ungated_mlp: true,
            mlp_bias: hf.mlp_bias.unwrap_or(false),
            rotary_dim,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([
            ("norm_eps", config.rms_norm_eps.into()),
            ("partial_rotary_factor", config.rotary_factor().into()),
            ("mlp_bias", config.extras.mlp_bias.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Activation;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// nvidia/Minitron-4B-Base's `config.json`, as the hub has it.
    const MINITRON_4B: &str = r#"{"architectures":["NemotronForCausalLM"],
        "attention_bias":false,"attention_dropout":0.0,"bos_token_id":2,"eos_token_id":3,
        "head_dim":128,"hidden_act":"relu2","hidden_size":3072,"initializer_range":0.0134,
        "intermediate_size":9216,"max_position_embeddings":4096,"mlp_bias":false,
        "model_type":"nemotron","norm_eps":1e-05,"num_attention_heads":24,
        "num_hidden_layers":32,"num_key_value_heads":8,"partial_rotary_factor":0.5,
        "rope_scaling":null,"rope_theta":10000,"tie_word_embeddings":false,
        "torch_dtype":"bfloat16","transformers_version":"4.32.0.dev0","use_cache":true,
        "vocab_size":256000}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn minitron_4b_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(MINITRON_4B).unwrap();
        assert_eq!(c.architecture, Architecture::Nemotron);
        assert_eq!(
            (c.head_dim, c.rotary_dim(), c.num_key_value_heads),
            (128, 64, 8)
        );
        assert_eq!(c.rms_norm_eps, 1e-5);
        assert!(!c.qkv_bias && !c.o_bias && !c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.layer_norm && e.norm_offset && e.ungated_mlp && !e.mlp_bias);
        assert_eq!(e.activation, Activation::Relu2);
        // transformers' `num_parameters()` of the same config.
        assert_eq!(ModelShape::from_config(&c).parameters, 4_190_509_056);
        let json = c.to_hf_json();
        assert_eq!(json["norm_eps"], 1e-5);
        assert_eq!(json["partial_rotary_factor"], 0.5);
        assert_eq!(json["hidden_act"], "relu2");
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        let err = resolve(&MINITRON_4B.replace(r#""relu2""#, r#""silu""#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("hidden_act") && err.contains("silu"), "{err}");
        let err = resolve(&MINITRON_4B.replace(
            r#""partial_rotary_factor":0.5"#,
            r#""partial_rotary_factor":1.5"#,
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("partial_rotary_factor"), "{err}");
    }
}
