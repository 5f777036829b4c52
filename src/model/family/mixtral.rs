//! Mixtral (`MixtralForCausalLM`, model type `mixtral`: Mixtral-8x7B, Mixtral-8x22B and their
//! instruct models): Mistral's attention, sliding where `sliding_window` says, with a sparse
//! mixture of SwiGLU experts instead of the MLP ([`crate::model::decoder`]): a router
//! (`block_sparse_moe.gate`) sends each token to its `num_experts_per_tok` most probable of
//! `num_local_experts` experts, their probabilities renormalised over the chosen ones. An
//! expert's `w1`, `w3` and `w2` are the decoder's `gate_proj`, `up_proj` and `down_proj`.
//!
//! Pruning treats the router as a linear like any other, as the reference code's `find_layers`
//! does on the transformers 4 modules (it is an `nn.Linear` there); `--skip` leaves it dense.

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::Experts;
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `MixtralForCausalLM`.
pub struct Mixtral;

/// The decoder's names of an expert's linears and Mixtral's.
const EXPERT_LINEARS: [(&str, &str); 3] =
    [("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")];

/// `MixtralForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(8),
        head_dim: None,
        max_positions: 131_072,
    },
    // llama.cpp writes Mixtral as `llama` (with an expert count), q/k rows interleaved.
    gguf_interleaves_qk: true,
    default_rope_theta: 1_000_000.0,
    ..FamilyRow::new("MixtralForCausalLM", "mixtral", &Mixtral)
};

impl Family for Mixtral {
    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    fn sliding_window(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.window_or(None)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        let (layer, rest) = name.split_once(".mlp.")?;
        let theirs = match rest.strip_prefix("experts.") {
            None => rest.to_string(),
            Some(expert) => {
                let (e, rest) = expert.split_once('.')?;
                let (linear, kind) = rest.split_once('.')?;
                let (_, w) = EXPERT_LINEARS.iter().find(|(ours, _)| *ours == linear)?;
                format!("experts.{e}.{w}.{kind}")
            }
        };
        Some(format!("{layer}.block_sparse_moe.{theirs}"))
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, "Mixtral")?;
        Ok(DecoderExtras {
            experts: Some(super::checked_experts(
                Experts::softmax(
                    hf.experts.num_local_experts.unwrap_or(8),
                    hf.experts.num_experts_per_tok.unwrap_or(2),
                    hf.intermediate_size.unwrap_or(14_336),
                ),
                "num_local_experts",
            )?),
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = super::expert_hf_keys(config, "num_local_experts");
        // Mixtral always renormalises and has no such key.
        keys.remove("norm_topk_prob");
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// mistralai/Mixtral-8x7B-v0.1's `config.json`, as the hub has it.
    const MIXTRAL_8X7B: &str = r#"{"architectures":["MixtralForCausalLM"],
        "attention_dropout":0.0,"bos_token_id":1,"eos_token_id":2,"hidden_act":"silu",
        "hidden_size":4096,"initializer_range":0.02,"intermediate_size":14336,
        "max_position_embeddings":32768,"model_type":"mixtral","num_attention_heads":32,
        "num_experts_per_tok":2,"num_hidden_layers":32,"num_key_value_heads":8,
        "num_local_experts":8,"output_router_logits":false,"rms_norm_eps":1e-05,
        "rope_theta":1e6,"router_aux_loss_coef":0.02,"sliding_window":null,
        "tie_word_embeddings":false,"torch_dtype":"bfloat16","transformers_version":"4.36.0.dev0",
        "use_cache":true,"vocab_size":32000}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn mixtral_8x7b_routes_two_of_eight_experts() {
        let c = resolve(MIXTRAL_8X7B).unwrap();
        assert_eq!(c.architecture, Architecture::Mixtral);
        let experts = Experts::softmax(8, 2, 14_336);
        assert_eq!(c.extras.experts, Some(experts));
        assert_eq!(c.layer_window(0), None);
        // The model card's 46.7B: 2 × 32000 × 4096 + 32 × (4096 × (4096 + 2 × 1024 + 4096)
        // + 8 × 3 × 4096 × 14336 + 8 × 4096 + 2 × 4096) + 4096.
        assert_eq!(ModelShape::from_config(&c).parameters, 46_702_792_704);
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
        let err = resolve(
            &MIXTRAL_8X7B.replace(r#""num_experts_per_tok":2"#, r#""num_experts_per_tok":9"#),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("`num_experts_per_tok`"), "{err}");
    }

    #[test]
    fn expert_linears_take_mixtral_names() {
        let c = resolve(MIXTRAL_8X7B).unwrap();
        let name = |n: &str| Mixtral.checkpoint_name(&c, n);
        for (ours, theirs) in [
            (
                "model.layers.3.mlp.gate.weight",
                "model.layers.3.block_sparse_moe.gate.weight",
            ),
            (
                "model.layers.0.mlp.experts.7.gate_proj.weight",
                "model.layers.0.block_sparse_moe.experts.7.w1.weight",
            ),
            (
                "model.layers.0.mlp.experts.7.up_proj.weight",
                "model.layers.0.block_sparse_moe.experts.7.w3.weight",
            ),
            (
                "model.layers.31.mlp.experts.0.down_proj.weight",
                "model.layers.31.block_sparse_moe.experts.0.w2.weight",
            ),
        ] {
            assert_eq!(name(ours).as_deref(), Some(theirs));
        }
        assert_eq!(name("model.layers.0.self_attn.q_proj.weight"), None);
    }
}
