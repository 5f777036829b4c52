//! ERNIE 4.5 (`Ernie4_5ForCausalLM`, model type `ernie4_5`: Baidu's ERNIE-4.5-0.3B): Llama's
//! names, layer and SwiGLU MLP with
//! - interleaved RoPE over the whole head (GLM's `rotate_half`: dimensions `(2i, 2i + 1)` turn
//!   together), base 500,000 by default;
//! - biases on every linear where `use_bias` says (default false);
//! - a head tied to the embeddings unless `tie_word_embeddings` is false.

use std::collections::BTreeMap;

use super::{AttentionBiases, ClassDefaults, Family, FamilyRow};
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `Ernie4_5ForCausalLM`.
pub struct Ernie4_5;

/// `Ernie4_5ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(2),
        head_dim: Some(128),
        max_positions: 131_072,
    },
    // llama.cpp's `ernie4_5` (q/k rows as transformers has them: its graph rotates
    // neighbouring pairs).
    gguf_arch: Some("ernie4_5"),
    // `Ernie4_5Config.default_theta`.
    default_rope_theta: 500_000.0,
    ties_embeddings: true,
    ..FamilyRow::new("Ernie4_5ForCausalLM", "ernie4_5", &Ernie4_5)
};

impl Family for Ernie4_5 {
    /// All four projections from `use_bias` (default false).
    fn attention_biases(&self, hf: &HfLlamaConfig) -> AttentionBiases {
        let bias = hf.use_bias.unwrap_or(false);
        AttentionBiases { qkv: bias, o: bias }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, "ERNIE 4.5")?;
        Ok(DecoderExtras {
            mlp_bias: hf.use_bias.unwrap_or(false),
            interleaved_rotary: true,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([("use_bias", config.qkv_bias.into())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// A config of ERNIE-4.5-0.3B's layout: 18 layers 1,024 wide, 16 heads of 128 over 2 kv
    /// heads, SwiGLU 3,072 wide, tied, no biases.
    const ERNIE_03B: &str = r#"{"architectures":["Ernie4_5ForCausalLM"],"bos_token_id":1,
        "eos_token_id":2,"head_dim":128,"hidden_act":"silu","hidden_size":1024,
        "intermediate_size":3072,"max_position_embeddings":131072,"model_type":"ernie4_5",
        "num_attention_heads":16,"num_hidden_layers":18,"num_key_value_heads":2,"pad_token_id":0,
        "rms_norm_eps":1e-05,"rope_theta":500000,"tie_word_embeddings":true,"use_bias":false,
        "vocab_size":103424}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn a_03b_config_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(ERNIE_03B).unwrap();
        assert_eq!(c.architecture, Architecture::Ernie4_5);
        assert_eq!((c.head_dim, c.num_key_value_heads), (128, 2));
        assert!(c.tie_word_embeddings && !c.qkv_bias && !c.o_bias);
        assert!(c.extras.interleaved_rotary && !c.extras.mlp_bias);
        assert_eq!(c.rope_theta, 500_000.0);
        // transformers' `num_parameters()` of this config: 360,748,032.
        assert_eq!(ModelShape::from_config(&c).parameters, 360_748_032);
        let biased = resolve(&ERNIE_03B.replace(r#""use_bias":false"#, r#""use_bias":true"#));
        let biased = biased.unwrap();
        assert!(biased.qkv_bias && biased.o_bias && biased.extras.mlp_bias);
        assert_eq!(biased.to_hf_json()["use_bias"], true);
        // Without a base the class's default, 500,000.
        let default = resolve(&ERNIE_03B.replace(r#""rope_theta":500000,"#, "")).unwrap();
        assert_eq!(default.rope_theta, 500_000.0);
    }

    #[test]
    fn other_activations_are_refused_by_name() {
        let err = resolve(&ERNIE_03B.replace(r#""silu""#, r#""gelu""#)).unwrap_err();
        assert!(err.to_string().contains("hidden_act"), "{err}");
    }
}
