//! Gemma 2 (`Gemma2ForCausalLM`, model type `gemma2`: Gemma 2 2B, 9B and 27B): Gemma 3's layer
//! ([`super::gemma3`]) without the per-head q/k norms, with
//! - the attention scores soft-capped, `50 · tanh(s / 50)` (`attn_logit_softcapping`), after the
//!   query scale and before the mask;
//! - the logits soft-capped, `30 · tanh(l / 30)` (`final_logit_softcapping`);
//! - sliding and full attention alternating from a sliding first layer, one RoPE base for both.
//!
//! Both caps default to transformers' values when the key is absent; a null turns one off.

use std::collections::BTreeMap;

use super::gemma3::{gemma_extras, gemma_hf_keys, Gemma};
use super::{ClassDefaults, Family, FamilyRow, GgufMetadata};
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `Gemma2ForCausalLM`.
pub struct Gemma2;

/// `Gemma2ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(4),
        head_dim: Some(256),
        max_positions: 8192,
    },
    gguf_arch: Some("gemma2"),
    ties_embeddings: true,
    ..FamilyRow::new("Gemma2ForCausalLM", "gemma2", &Gemma2)
};

impl Family for Gemma2 {
    /// GGUF stores no `query_pre_attn_scalar`: llama.cpp scales by `key_length^-0.5`, except for
    /// Gemma 2 27B (told by its 46 layers) by `(hidden / heads)^-0.5`.
    fn read_gguf(&self, meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        if meta.u64("block_count") == Some(46) {
            hf.gemma.query_pre_attn_scalar = Some(hf.hidden_per_head() as f64);
        }
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        gemma_extras(
            hf,
            &Gemma {
                name: "Gemma 2",
                global_every: 2,
                // One rotary embedding for every layer: the sliding layers rotate with the
                // model's base.
                local_theta: None,
                final_softcap: Some(30.0),
                attn_softcap: Some(50.0),
            },
        )
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        gemma_hf_keys(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gemma 2 2B's `config.json`, with `extra` keys appended.
    fn config(extra: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(&format!(
            r#"{{"architectures":["Gemma2ForCausalLM"],"model_type":"gemma2","hidden_size":2304,
            "intermediate_size":9216,"num_hidden_layers":26,"num_attention_heads":8,
            "num_key_value_heads":4,"head_dim":256,"vocab_size":256000,"sliding_window":4096,
            "rope_theta":10000.0,"hidden_activation":"gelu_pytorch_tanh",
            "max_position_embeddings":8192{extra}}}"#
        ))
        .unwrap()
        .resolve()
    }

    #[test]
    fn gemma2_2b_alternates_windows_and_caps_by_default() {
        let c = config("").unwrap();
        assert!(!c.qk_norm);
        assert!(
            c.tie_word_embeddings,
            "tied unless the config says otherwise"
        );
        let local = c.extras.local_attention.as_ref().unwrap();
        assert_eq!(&local.layers[..4], &[true, false, true, false]);
        assert_eq!(c.layer_window(0), Some(4096));
        assert_eq!(c.layer_window(1), None);
        // The sliding layers rotate as the full ones, by the model's tables.
        assert_eq!((local.rope_theta, c.layer_inv_freq(0)), (None, None));
        assert_eq!(c.extras.attn_softcap, Some(50.0));
        assert_eq!(c.extras.final_softcap, Some(30.0));
        assert_eq!(c.query_scale(), Some(1.0 / 16.0));
        let json = c.to_hf_json();
        assert_eq!(json["model_type"], "gemma2");
        assert_eq!(json["attn_logit_softcapping"], 50.0);
        assert_eq!(json["final_logit_softcapping"], 30.0);
        assert_eq!(json["layer_types"][1], "full_attention");
        assert!(json.get("rope_local_base_freq").is_none());
    }

    #[test]
    fn a_null_cap_is_off_and_a_bad_one_is_refused() {
        let c = config(r#","final_logit_softcapping":null,"attn_logit_softcapping":20.0"#).unwrap();
        assert_eq!(c.extras.final_softcap, None);
        assert_eq!(c.extras.attn_softcap, Some(20.0));
        assert!(c.to_hf_json()["final_logit_softcapping"].is_null());
        let e = config(r#","final_logit_softcapping":0.0"#).unwrap_err();
        assert!(e.to_string().contains("final_logit_softcapping"), "{e}");
    }

    #[test]
    fn other_families_refuse_soft_caps() {
        let e = HfLlamaConfig::from_json(
            r#"{"architectures":["LlamaForCausalLM"],"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":1,"vocab_size":4,
            "final_logit_softcapping":30.0}"#,
        )
        .unwrap()
        .resolve()
        .unwrap_err();
        assert!(e.to_string().contains("final_logit_softcapping"), "{e}");
        let c = HfLlamaConfig::from_json(
            r#"{"architectures":["LlamaForCausalLM"],"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":1,"vocab_size":4,
            "final_logit_softcapping":null}"#,
        )
        .unwrap()
        .resolve()
        .unwrap();
        assert!(c.extras.is_llama());
    }
}
