//! Qwen2-MoE (`Qwen2MoeForCausalLM`, model type `qwen2_moe`: Qwen1.5-MoE-A2.7B,
//! Qwen2-57B-A14B): Qwen2's attention (q/k/v biases from `qkv_bias`, default true; its sliding
//! layers) with, in every layer, `num_experts` routed SwiGLU experts of `moe_intermediate_size`
//! ([`crate::model::decoder`]; `num_experts_per_tok` per token, renormalised where `norm_topk_prob`
//! says, the weights rounded to the model's dtype) beside a shared expert of
//! `shared_expert_intermediate_size` that every token goes through, its output times
//! `sigmoid(shared_expert_gate(x))`. Checkpoint names are the decoder's (`mlp.shared_expert.*`,
//! `mlp.shared_expert_gate`).

use std::collections::BTreeMap;

use super::qwen2::{qwen_extras, qwen_hf_keys};
use super::qwen3_moe::refuse_dense_layers;
use super::{AttentionBiases, ClassDefaults, Family, FamilyRow};
use crate::model::arch::Experts;
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `Qwen2MoeForCausalLM`.
pub struct Qwen2Moe;

/// `Qwen2MoeForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(16),
        head_dim: None,
        max_positions: 32_768,
    },
    gguf_arch: Some("qwen2moe"),
    ..FamilyRow::new("Qwen2MoeForCausalLM", "qwen2_moe", &Qwen2Moe)
};

impl Family for Qwen2Moe {
    fn attention_biases(&self, hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases {
            qkv: hf.qkv_bias.unwrap_or(true),
            o: false,
        }
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let extras = qwen_extras(hf, "Qwen2-MoE")?;
        refuse_dense_layers(hf)?;
        let shared = hf.experts.shared_expert_intermediate_size.unwrap_or(5632);
        if shared == 0 {
            return Err(crate::model::arch::invalid(
                "shared_expert_intermediate_size",
                "must be at least 1".into(),
            ));
        }
        let defaults = Experts {
            normalize: false,
            round_weights: true,
            shared: Some(shared),
            ..Experts::softmax(60, 4, hf.experts.moe_intermediate_size.unwrap_or(1408))
        };
        Ok(DecoderExtras {
            experts: Some(super::topk_experts(hf, defaults)?),
            ..extras
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = qwen_hf_keys(config);
        keys.extend(super::expert_hf_keys(config, "num_experts"));
        let experts = config.extras.experts;
        keys.insert("moe_intermediate_size", experts.map(|e| e.width).into());
        keys.insert(
            "shared_expert_intermediate_size",
            experts.and_then(|e| e.shared).into(),
        );
        keys.insert("qkv_bias", config.qkv_bias.into());
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// Qwen/Qwen1.5-MoE-A2.7B's `config.json`, as the hub has it.
    const QWEN1_5_MOE_A2_7B: &str = r#"{"architectures":["Qwen2MoeForCausalLM"],
        "attention_dropout":0.0,"bos_token_id":151643,"decoder_sparse_step":1,
        "eos_token_id":151643,"hidden_act":"silu","hidden_size":2048,"initializer_range":0.02,
        "intermediate_size":5632,"max_position_embeddings":8192,"max_window_layers":21,
        "model_type":"qwen2_moe","moe_intermediate_size":1408,"norm_topk_prob":false,
        "num_attention_heads":16,"num_experts":60,"num_experts_per_tok":4,
        "num_hidden_layers":24,"num_key_value_heads":16,"output_router_logits":false,
        "rms_norm_eps":1e-06,"rope_theta":1000000.0,"router_aux_loss_coef":0.001,
        "shared_expert_intermediate_size":5632,"sliding_window":32768,
        "tie_word_embeddings":false,"torch_dtype":"bfloat16","transformers_version":"4.36.0.dev0",
        "use_cache":true,"use_sliding_window":false,"vocab_size":151936}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn qwen1_5_moe_routes_four_of_60_beside_a_shared_expert() {
        let c = resolve(QWEN1_5_MOE_A2_7B).unwrap();
        assert_eq!(c.architecture, Architecture::Qwen2Moe);
        let experts = Experts {
            normalize: false,
            round_weights: true,
            shared: Some(5632),
            ..Experts::softmax(60, 4, 1408)
        };
        assert_eq!(c.extras.experts, Some(experts));
        assert!(c.qkv_bias && !c.o_bias);
        // The model card's 14.3B: 2 × 151936 × 2048 + 24 × (4 × 2048² + 3 × 2048 (q/k/v
        // biases) + 60 × 3 × 2048 × 1408 + 60 × 2048 + 3 × 2048 × 5632 + 2048 + 2 × 2048)
        // + 2048.
        assert_eq!(ModelShape::from_config(&c).parameters, 14_315_784_192);
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
    }
}
