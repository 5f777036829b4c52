//! Arcee (`ArceeForCausalLM`, model type `arcee`: Arcee's AFM-4.5B): Llama's names, attention
//! and RMSNorms with
//! - an MLP without a gate, `down_proj(relu(up_proj(x))²)` (`hidden_act: relu2`), biases where
//!   `mlp_bias` says;
//! - biases on the attention projections where `attention_bias` says, an untied head, and
//!   RoPE scaling as the config gives it (YaRN in AFM-4.5B).

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `ArceeForCausalLM`.
pub struct Arcee;

/// `ArceeForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults::positions(4096),
    // llama.cpp's `arcee`, whose converter (Llama's) interleaves the q/k rows.
    gguf_arch: Some("arcee"),
    gguf_interleaves_qk: true,
    ..FamilyRow::new("ArceeForCausalLM", "arcee", &Arcee)
};

impl Family for Arcee {
    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        Ok(DecoderExtras {
            activation: super::relu2_activation(hf, "Arcee")?,
            ungated_mlp: true,
            mlp_bias: hf.mlp_bias.unwrap_or(false),
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([("mlp_bias", config.extras.mlp_bias.into())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;
    use crate::model::arch::{Activation, RopeScaling};

    /// An Arcee config of AFM-4.5B's layout: 36 layers 2,560 wide, 20 query heads of 128 over 4
    /// kv heads, an ungated squared-ReLU MLP 18,432 wide, YaRN ×16 from 4,096 to 65,536 positions.
    const AFM: &str = r#"{"architectures":["ArceeForCausalLM"],"attention_bias":false,
        "bos_token_id":128000,"eos_token_id":128001,"head_dim":128,"hidden_act":"relu2",
        "hidden_size":2560,"intermediate_size":18432,"max_position_embeddings":65536,
        "mlp_bias":false,"model_type":"arcee","num_attention_heads":20,"num_hidden_layers":36,
        "num_key_value_heads":4,"rms_norm_eps":1e-05,"rope_scaling":{"beta_fast":32.0,
        "beta_slow":1.0,"factor":16.0,"mscale":1.0,"original_max_position_embeddings":4096,
        "rope_type":"yarn","type":"yarn"},"rope_theta":10000.0,"tie_word_embeddings":false,
        "vocab_size":128004}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn an_afm_config_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(AFM).unwrap();
        assert_eq!(c.architecture, Architecture::Arcee);
        assert_eq!((c.head_dim, c.num_key_value_heads), (128, 4));
        let e = &c.extras;
        assert!(e.ungated_mlp && !e.mlp_bias && !e.layer_norm);
        assert_eq!(e.activation, Activation::Relu2);
        assert!(matches!(c.rope_scaling, RopeScaling::Yarn { .. }));
        // transformers' `num_parameters()` of this config: 4,619,184,640.
        assert_eq!(ModelShape::from_config(&c).parameters, 4_619_184_640);
        assert_eq!(c.to_hf_json()["hidden_act"], "relu2");
    }

    #[test]
    fn other_activations_are_refused_by_name() {
        let err = resolve(&AFM.replace(r#""relu2""#, r#""silu""#)).unwrap_err();
        assert!(err.to_string().contains("hidden_act"), "{err}");
    }
}
