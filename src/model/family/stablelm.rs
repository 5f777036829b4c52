//! StableLM (`StableLmForCausalLM`, model type `stablelm`: Stability AI's StableLM-3B-4E1T,
//! StableLM 2 1.6B and 12B, StableCode-3B): Llama's names and SwiGLU MLP with
//! - LayerNorms (epsilon `layer_norm_eps`) instead of RMSNorms;
//! - partial rotary: the first `partial_rotary_factor` (0.25 in every released model) of each
//!   head's dimensions rotate, in the "rotate half" layout, the rest pass through;
//! - q/k/v biases where `use_qkv_bias` says (StableLM 2), never on the output projection;
//! - a parallel layer where `use_parallel_residual` says (StableLM 2 12B): attention and MLP
//!   read the one `input_layernorm` (held twice by the decoder, `shared_norm`), and the layer
//!   returns `x + attn + mlp`;
//! - an untied head.
//!
//! Per-head q/k LayerNorms (`qk_layernorm`, StableLM 2 12B's) are refused.

use std::collections::BTreeMap;

use super::{AttentionBiases, ClassDefaults, Family, FamilyRow, GgufMetadata};
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `StableLmForCausalLM`.
pub struct StableLm;

/// transformers' share of rotated dimensions when a config names none (`StableLmConfig`).
const DEFAULT_PARTIAL_ROTARY_FACTOR: f64 = 0.25;

/// `StableLmForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(32),
        head_dim: None,
        max_positions: 4096,
    },
    // llama.cpp's `stablelm`.
    gguf_arch: Some("stablelm"),
    ..FamilyRow::new("StableLmForCausalLM", "stablelm", &StableLm)
};

impl Family for StableLm {
    /// llama.cpp writes the rotated dimensions of the heads, not their width.
    fn read_gguf(&self, meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        hf.partial_rotary_factor = super::gguf_metadata::rotated_share(meta, hf);
    }

    /// q/k/v biases where `use_qkv_bias` says (default false); the output projection never.
    fn attention_biases(&self, hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases {
            qkv: hf.use_qkv_bias.unwrap_or(false),
            o: false,
        }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    /// The parallel layer's one norm is `input_layernorm`.
    fn checkpoint_name(&self, config: &LlamaConfig, name: &str) -> Option<String> {
        if !config.extras.shared_norm {
            return None;
        }
        super::shared_input_norm(name)
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, "StableLM")?;
        super::refuse_qk_layernorm(hf, "StableLM")?;
        let rotary_dim = super::partial_rotary(
            &ROW,
            hf,
            hf.partial_rotary_factor,
            "partial_rotary_factor",
            DEFAULT_PARTIAL_ROTARY_FACTOR,
        )?;
        let parallel = hf.use_parallel_residual.unwrap_or(false);
        Ok(DecoderExtras {
            layer_norm: true,
            parallel_residual: parallel,
            shared_norm: parallel,
            rotary_dim,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([
            ("layer_norm_eps", config.rms_norm_eps.into()),
            ("partial_rotary_factor", config.rotary_factor().into()),
            ("use_qkv_bias", config.qkv_bias.into()),
            (
                "use_parallel_residual",
                config.extras.parallel_residual.into(),
            ),
            ("qk_layernorm", false.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// stabilityai/stablelm-2-1_6b's `config.json`, as the hub has it.
    const STABLELM_2_1_6B: &str = r#"{"architectures":["StableLmForCausalLM"],
        "bos_token_id":100257,"eos_token_id":100257,"hidden_act":"silu","hidden_dropout":0.0,
        "hidden_size":2048,"initializer_range":0.02,"intermediate_size":5632,
        "layer_norm_eps":1e-05,"max_position_embeddings":4096,"model_type":"stablelm",
        "num_attention_heads":32,"num_hidden_layers":24,"num_key_value_heads":32,
        "partial_rotary_factor":0.25,"qk_layernorm":false,"rope_scaling":null,
        "rope_theta":10000,"tie_word_embeddings":false,"torch_dtype":"float16",
        "transformers_version":"4.40.0","use_cache":true,"use_parallel_residual":false,
        "use_qkv_bias":true,"vocab_size":100352}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn stablelm_2_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(STABLELM_2_1_6B).unwrap();
        assert_eq!(c.architecture, Architecture::StableLm);
        assert_eq!((c.head_dim, c.rotary_dim()), (64, 16));
        assert!(c.qkv_bias && !c.o_bias && !c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.layer_norm && !e.ungated_mlp && !e.mlp_bias);
        assert!(!e.parallel_residual && !e.shared_norm);
        // StableLM 2 1.6B's 1.64 B by its layout: 24 layers of 51,394,560, the final norm and
        // the untied embeddings and head.
        assert_eq!(ModelShape::from_config(&c).parameters, 1_644_515_328);
        let json = c.to_hf_json();
        assert_eq!(json["partial_rotary_factor"], 0.25);
        assert_eq!(json["use_qkv_bias"], true);
        assert_eq!(resolve(&json.to_string()).unwrap(), c);
        assert_eq!(
            StableLm.checkpoint_name(&c, "model.layers.3.post_attention_layernorm.bias"),
            None
        );
    }

    #[test]
    fn the_parallel_layer_shares_its_norm() {
        let c = resolve(&STABLELM_2_1_6B.replace(
            r#""use_parallel_residual":false"#,
            r#""use_parallel_residual":true"#,
        ))
        .unwrap();
        assert!(c.extras.parallel_residual && c.extras.shared_norm);
        assert_eq!(
            StableLm
                .checkpoint_name(&c, "model.layers.3.post_attention_layernorm.bias")
                .as_deref(),
            Some("model.layers.3.input_layernorm.bias")
        );
        assert_eq!(
            StableLm.checkpoint_name(&c, "model.layers.3.mlp.up_proj.weight"),
            None
        );
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        for (from, to, key) in [
            (
                r#""hidden_act":"silu""#,
                r#""hidden_act":"gelu""#,
                "hidden_act",
            ),
            (
                r#""qk_layernorm":false"#,
                r#""qk_layernorm":true"#,
                "qk_layernorm",
            ),
            (
                r#""partial_rotary_factor":0.25"#,
                r#""partial_rotary_factor":0.01"#,
                "partial_rotary_factor",
            ),
        ] {
            let e = resolve(&STABLELM_2_1_6B.replace(from, to)).unwrap_err();
            assert!(e.to_string().contains(key), "{to}: {e}");
        }
    }
}
