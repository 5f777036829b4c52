//! StarCoder2 (`Starcoder2ForCausalLM`, model type `starcoder2`: BigCode's StarCoder2-3B, 7B
//! and 15B): Llama's names and attention with
//! - LayerNorms with biases (epsilon `norm_epsilon`) instead of RMSNorms;
//! - an MLP without a gate, `c_proj(gelu_tanh(c_fc(x)))` (`hidden_act`, `gelu_pytorch_tanh` in
//!   every released model);
//! - biases on every linear where `use_bias` says (default true, as released);
//! - sliding-window attention over `sliding_window` positions on every layer, where set (4096
//!   in the 3B and 7B);
//! - a head tied to the embeddings unless `tie_word_embeddings` is false.

use std::collections::BTreeMap;

use super::{AttentionBiases, ClassDefaults, Family, FamilyRow};
use crate::model::arch::{Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `Starcoder2ForCausalLM`.
pub struct Starcoder2;

/// The decoder's names of the MLP's linears and StarCoder2's, relative to the layer.
const MLP_NAMES: [(&str, &str); 2] = [("mlp.up_proj", "mlp.c_fc"), ("mlp.down_proj", "mlp.c_proj")];

impl Starcoder2 {
    /// `use_bias`, true unless the config says otherwise.
    fn bias(hf: &HfLlamaConfig) -> bool {
        hf.use_bias.unwrap_or(true)
    }
}

/// `Starcoder2ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(2),
        head_dim: None,
        max_positions: 4096,
    },
    // llama.cpp's `starcoder2` (its graph attends in full: no window in the file).
    gguf_arch: Some("starcoder2"),
    ties_embeddings: true,
    ..FamilyRow::new("Starcoder2ForCausalLM", "starcoder2", &Starcoder2)
};

impl Family for Starcoder2 {
    /// q, k, v and the output projection carry biases where `use_bias` says (default true).
    fn attention_biases(&self, hf: &HfLlamaConfig) -> AttentionBiases {
        let bias = Self::bias(hf);
        AttentionBiases { qkv: bias, o: bias }
    }

    /// `norm_epsilon` (read as `layer_norm_eps`), default 1e-5.
    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        super::renamed(name, "model", "model.layers", &MLP_NAMES, &[]).filter(|t| t != name)
    }

    fn sliding_window(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.window_or(None)
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let activation =
            super::gelu_activation(hf, "hidden_act", "StarCoder2", Activation::GeluTanh)?;
        Ok(DecoderExtras {
            activation,
            layer_norm: true,
            ungated_mlp: true,
            mlp_bias: Self::bias(hf),
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([
            ("norm_epsilon", config.rms_norm_eps.into()),
            ("use_bias", config.extras.mlp_bias.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// bigcode/starcoder2-3b's `config.json`, as the hub has it.
    const STARCODER2_3B: &str = r#"{"architectures":["Starcoder2ForCausalLM"],
        "attention_dropout":0.1,"residual_dropout":0.1,"embedding_dropout":0.1,
        "bos_token_id":0,"eos_token_id":0,"hidden_act":"gelu_pytorch_tanh","hidden_size":3072,
        "initializer_range":0.018042,"intermediate_size":12288,"max_position_embeddings":16384,
        "mlp_type":"default","model_type":"starcoder2","norm_epsilon":1e-05,
        "norm_type":"layer_norm","num_attention_heads":24,"num_hidden_layers":30,
        "num_key_value_heads":2,"rope_theta":999999.4420358813,"sliding_window":4096,
        "torch_dtype":"bfloat16","transformers_version":"4.37.0.dev0","use_bias":true,
        "use_cache":true,"vocab_size":49152}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn starcoder2_3b_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(STARCODER2_3B).unwrap();
        assert_eq!(c.architecture, Architecture::Starcoder2);
        assert_eq!((c.num_key_value_heads, c.head_dim), (2, 128));
        assert_eq!(c.rms_norm_eps, 1e-5);
        assert_eq!(c.sliding_window, Some(4096));
        assert!(c.tie_word_embeddings && c.qkv_bias);
        let e = &c.extras;
        assert!(e.layer_norm && e.ungated_mlp && e.mlp_bias);
        assert_eq!(e.activation, Activation::GeluTanh);
        // StarCoder2-3B's 3.03 B: 30 layers of 95,979,008, the final norm and the tied embeddings.
        assert_eq!(ModelShape::from_config(&c).parameters, 3_030_371_328);
        let json = c.to_hf_json();
        assert_eq!(json["norm_epsilon"], 1e-5);
        assert_eq!(json["use_bias"], true);
        assert_eq!(json["sliding_window"], 4096);
    }

    #[test]
    fn names_map_to_starcoder2_checkpoints() {
        let c = resolve(STARCODER2_3B).unwrap();
        let theirs = |n: &str| Starcoder2.checkpoint_name(&c, n);
        assert_eq!(
            theirs("model.layers.3.mlp.up_proj.bias").as_deref(),
            Some("model.layers.3.mlp.c_fc.bias")
        );
        assert_eq!(
            theirs("model.layers.0.mlp.down_proj.weight").as_deref(),
            Some("model.layers.0.mlp.c_proj.weight")
        );
        assert_eq!(theirs("model.layers.0.self_attn.q_proj.weight"), None);
        assert_eq!(theirs("model.norm.bias"), None);
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        let relu = STARCODER2_3B.replace("gelu_pytorch_tanh", "relu");
        let err = resolve(&relu).unwrap_err().to_string();
        assert!(err.contains("hidden_act") && err.contains("relu"), "{err}");
        let without_bias =
            resolve(&STARCODER2_3B.replace(r#""use_bias":true"#, r#""use_bias":false"#)).unwrap();
        assert!(!without_bias.qkv_bias && !without_bias.extras.mlp_bias);
    }
}
