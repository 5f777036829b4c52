//! OLMoE (`OlmoeForCausalLM`, model type `olmoe`: AI2's OLMoE-1B-7B-0924 and 0125 and their
//! instruct models): Llama's pre-norm layer with RMSNorms of the queries and keys across all
//! heads of a position (OLMo 2's), and a sparse mixture of `num_experts` SwiGLU experts of
//! `intermediate_size` in every layer ([`crate::model::decoder`]), each token sent to
//! `num_experts_per_tok` of them, their probabilities renormalised where `norm_topk_prob` says
//! (not by default) and rounded to the model's dtype. Checkpoint names are the decoder's.

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow, GgufMetadata};
use crate::model::arch::Experts;
use crate::model::arch::{invalid, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `OlmoeForCausalLM`.
pub struct Olmoe;

/// `OlmoeForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults::positions(4096),
    gguf_arch: Some("olmoe"),
    ..FamilyRow::new("OlmoeForCausalLM", "olmoe", &Olmoe)
};

impl Family for Olmoe {
    /// llama.cpp's clamp of q, k and v (`clip_qkv`).
    fn read_gguf(&self, meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        hf.set_own_key("clip_qkv", meta.f64("attention.clamp_kqv"));
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    fn qk_norm(&self, _hf: &HfLlamaConfig) -> bool {
        true
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, "OLMoE")?;
        // OLMoE clamps after its q/k norms; the decoder clamps before them (OLMo 1's order).
        if hf.own_key::<f64>("clip_qkv")?.is_some() {
            return Err(invalid(
                "clip_qkv",
                "is set: OLMoE clamps after its q/k norms, which is not run; it must be null"
                    .into(),
            ));
        }
        let defaults = Experts {
            normalize: false,
            round_weights: true,
            ..Experts::softmax(64, 8, hf.intermediate_size.unwrap_or(2048))
        };
        Ok(DecoderExtras {
            qk_norm_across_heads: true,
            experts: Some(super::topk_experts(hf, defaults)?),
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = super::expert_hf_keys(config, "num_experts");
        keys.insert("clip_qkv", serde_json::Value::Null);
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// allenai/OLMoE-1B-7B-0924's `config.json`, as the hub has it.
    const OLMOE_1B_7B: &str = r#"{"architectures":["OlmoeForCausalLM"],
        "attention_bias":false,"attention_dropout":0.0,"clip_qkv":null,"eos_token_id":50279,
        "hidden_act":"silu","hidden_size":2048,"initializer_range":0.02,
        "intermediate_size":1024,"max_position_embeddings":4096,"model_type":"olmoe",
        "norm_topk_prob":false,"num_attention_heads":16,"num_experts":64,
        "num_experts_per_tok":8,"num_hidden_layers":16,"num_key_value_heads":16,
        "output_router_logits":false,"pad_token_id":1,"rms_norm_eps":1e-05,"rope_scaling":null,
        "rope_theta":10000.0,"router_aux_loss_coef":0.01,"tie_word_embeddings":false,
        "torch_dtype":"bfloat16","transformers_version":"4.43.0.dev0","use_cache":true,
        "vocab_size":50304}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn olmoe_1b_7b_routes_eight_of_64_experts_without_renormalising() {
        let c = resolve(OLMOE_1B_7B).unwrap();
        assert_eq!(c.architecture, Architecture::Olmoe);
        let experts = Experts {
            normalize: false,
            round_weights: true,
            ..Experts::softmax(64, 8, 1024)
        };
        assert_eq!(c.extras.experts, Some(experts));
        assert!(c.qk_norm && c.extras.qk_norm_across_heads);
        // The model card's 6.9B: 2 × 50304 × 2048 + 16 × (4 × 2048² + 64 × 3 × 2048 × 1024
        // + 64 × 2048 + 4 × 2048) + 2048.
        assert_eq!(ModelShape::from_config(&c).parameters, 6_919_161_856);
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
        let err = resolve(&OLMOE_1B_7B.replace(r#""clip_qkv":null"#, r#""clip_qkv":8"#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`clip_qkv`"), "{err}");
    }
}
