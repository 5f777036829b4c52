//! Qwen3-MoE (`Qwen3MoeForCausalLM`, model type `qwen3_moe`: Qwen3-30B-A3B, Qwen3-235B-A22B,
//! Qwen3-Coder-30B-A3B): Qwen3's attention (per-head q/k RMSNorms, a `head_dim` of its own) with
//! a sparse mixture of `num_experts` SwiGLU experts of `moe_intermediate_size` in every layer
//! ([`crate::model::decoder`]), each token sent to `num_experts_per_tok` of them, their
//! probabilities renormalised where `norm_topk_prob` says and rounded to the model's dtype.
//! Sliding-window attention on every layer where `use_sliding_window` says (no released model
//! does). Checkpoint names are the decoder's (`mlp.gate`, `mlp.experts.E.gate_proj`).

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow, GgufMetadata};
use crate::model::arch::Experts;
use crate::model::arch::{invalid, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `Qwen3MoeForCausalLM`.
pub struct Qwen3Moe;

/// `Qwen3MoeForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(4),
        head_dim: None,
        max_positions: 32_768,
    },
    gguf_arch: Some("qwen3moe"),
    ..FamilyRow::new("Qwen3MoeForCausalLM", "qwen3_moe", &Qwen3Moe)
};

impl Family for Qwen3Moe {
    /// llama.cpp's graph renormalises the chosen experts' weights where the file does not say.
    fn read_gguf(&self, _meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        hf.experts.norm_topk_prob.get_or_insert(true);
    }

    fn qk_norm(&self, _hf: &HfLlamaConfig) -> bool {
        true
    }

    fn sliding_window(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.window_or(Some(4096))
            .filter(|_| hf.use_sliding_window == Some(true))
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, "Qwen3-MoE")?;
        refuse_dense_layers(hf)?;
        let defaults = Experts {
            normalize: false,
            round_weights: true,
            ..Experts::softmax(128, 8, hf.experts.moe_intermediate_size.unwrap_or(768))
        };
        Ok(DecoderExtras {
            experts: Some(super::topk_experts(hf, defaults)?),
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = super::expert_hf_keys(config, "num_experts");
        keys.insert(
            "moe_intermediate_size",
            config.extras.experts.map(|e| e.width).into(),
        );
        keys.insert("use_sliding_window", config.sliding_window.is_some().into());
        keys
    }
}

/// Refuses dense layers among the sparse ones (`decoder_sparse_step` other than 1, a
/// non-empty `mlp_only_layers`; none in a released Qwen MoE model), which are not run.
pub(super) fn refuse_dense_layers(hf: &HfLlamaConfig) -> Result<(), ConfigError> {
    if hf.experts.decoder_sparse_step.is_some_and(|step| step != 1) {
        return Err(invalid(
            "decoder_sparse_step",
            "is not 1: layers without experts among those with them are not run".into(),
        ));
    }
    if hf
        .experts
        .mlp_only_layers
        .as_ref()
        .is_some_and(|l| !l.is_empty())
    {
        return Err(invalid(
            "mlp_only_layers",
            "names layers without experts, which are not run; it must be empty".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// Qwen/Qwen3-30B-A3B's `config.json`, as the hub has it.
    const QWEN3_30B_A3B: &str = r#"{"architectures":["Qwen3MoeForCausalLM"],
        "attention_bias":false,"attention_dropout":0.0,"bos_token_id":151643,
        "decoder_sparse_step":1,"eos_token_id":151645,"head_dim":128,"hidden_act":"silu",
        "hidden_size":2048,"initializer_range":0.02,"intermediate_size":6144,
        "max_position_embeddings":40960,"max_window_layers":48,"mlp_only_layers":[],
        "model_type":"qwen3_moe","moe_intermediate_size":768,"norm_topk_prob":true,
        "num_attention_heads":32,"num_experts":128,"num_experts_per_tok":8,
        "num_hidden_layers":48,"num_key_value_heads":4,"output_router_logits":false,
        "rms_norm_eps":1e-06,"rope_scaling":null,"rope_theta":1000000.0,
        "router_aux_loss_coef":0.001,"sliding_window":null,"tie_word_embeddings":false,
        "torch_dtype":"bfloat16","transformers_version":"4.51.0","use_cache":true,
        "use_sliding_window":false,"vocab_size":151936}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn qwen3_30b_a3b_routes_eight_of_128_narrow_experts() {
        let c = resolve(QWEN3_30B_A3B).unwrap();
        assert_eq!(c.architecture, Architecture::Qwen3Moe);
        let experts = Experts {
            round_weights: true,
            ..Experts::softmax(128, 8, 768)
        };
        assert_eq!(c.extras.experts, Some(experts));
        assert!(c.qk_norm);
        assert_eq!((c.head_dim, c.sliding_window), (128, None));
        // The model card's 30.5B: 2 × 151936 × 2048 + 48 × (2048 × (4096 + 2 × 512) + 4096 ×
        // 2048 + 128 × 3 × 2048 × 768 + 128 × 2048 + 2 × 2048 + 2 × 128) + 2048.
        assert_eq!(ModelShape::from_config(&c).parameters, 30_532_122_624);
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
        for (key, value) in [("decoder_sparse_step", "2"), ("mlp_only_layers", "[3]")] {
            let json = QWEN3_30B_A3B.replace(
                &format!(
                    r#""{key}":{}"#,
                    if key == "decoder_sparse_step" {
                        "1"
                    } else {
                        "[]"
                    }
                ),
                &format!(r#""{key}":{value}"#),
            );
            let err = resolve(&json).unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{err}");
        }
    }
}
