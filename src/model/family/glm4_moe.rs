//! GLM-4.5 (`Glm4MoeForCausalLM`, model type `glm4_moe`: GLM-4.5, GLM-4.5-Air, GLM-4.6):
//! - attention with q/k/v biases from `attention_bias` (default false), per-head q/k RMSNorms
//!   where `use_qk_norm` says, and RoPE on the first `partial_rotary_factor` (default 0.5) of
//!   each head, its halves rotating (not GLM-4's neighbours);
//! - from layer `first_k_dense_replace` (default 1) on, `n_routed_experts` SwiGLU experts of
//!   `moe_intermediate_size` routed as DeepSeek-V3 routes ([`crate::model::arch::SigmoidRouting`]:
//!   sigmoid scores, the choice biased by `mlp.gate.e_score_correction_bias`, within the best
//!   `topk_group` of `n_group` groups, renormalised where `norm_topk_prob` says, times
//!   `routed_scaling_factor`; the router in f32), beside a shared expert
//!   `n_shared_experts · moe_intermediate_size` wide (`mlp.shared_experts`) whose output is added
//!   ungated;
//! - before it, layers with one dense SwiGLU MLP of `intermediate_size`.
//!
//! The checkpoints' multi-token-prediction layer (`model.layers.<num_hidden_layers>`,
//! `num_nextn_predict_layers`) is not part of the decoder: transformers does not load it and
//! neither does this tool; a saved copy has none and says so.

use std::collections::BTreeMap;

use super::{AttentionBiases, ClassDefaults, Family, FamilyRow};
use crate::model::arch::{positive_number, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};
use crate::model::arch::{Experts, SigmoidRouting};

/// `Glm4MoeForCausalLM`.
pub struct Glm4Moe;

/// The decoder's name of the shared expert and the checkpoint's.
const SHARED: (&str, &str) = (".mlp.shared_expert.", ".mlp.shared_experts.");

/// `Glm4MoeForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(8),
        head_dim: None,
        max_positions: 131_072,
    },
    ..FamilyRow::new("Glm4MoeForCausalLM", "glm4_moe", &Glm4Moe)
};

impl Family for Glm4Moe {
    /// q/k/v biases from `attention_bias` (default false), none on `o_proj`.
    fn attention_biases(&self, hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases {
            qkv: hf.attention_bias.unwrap_or(false),
            o: false,
        }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.intermediate_size.or(Some(10944))
    }

    fn qk_norm(&self, hf: &HfLlamaConfig) -> bool {
        hf.use_qk_norm.unwrap_or(false)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        name.contains(SHARED.0)
            .then(|| name.replacen(SHARED.0, SHARED.1, 1))
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, "GLM-4.5")?;
        let width = hf.experts.moe_intermediate_size.unwrap_or(1408);
        let (shared, first_dense_layers) = super::shared_and_dense_layers(hf, "GLM-4.5", (1, 1))?;
        let routing = SigmoidRouting {
            groups: hf.experts.n_group.unwrap_or(1),
            groups_per_token: hf.experts.topk_group.unwrap_or(1),
            scale: positive_number(
                "routed_scaling_factor",
                hf.experts.routed_scaling_factor.unwrap_or(1.0),
            )?,
            uncorrected: false,
        };
        let experts = super::checked_experts(
            Experts {
                normalize: hf.experts.norm_topk_prob.unwrap_or(true),
                // The router's weights stay in f32 and multiply the experts' outputs so.
                round_weights: false,
                shared: Some(shared * width),
                shared_ungated: true,
                sigmoid: Some(routing),
                first_dense_layers,
                ..Experts::softmax(
                    hf.experts.n_routed_experts.unwrap_or(128),
                    hf.experts.num_experts_per_tok.unwrap_or(8),
                    width,
                )
            },
            "n_routed_experts",
        )?;
        super::check_groups(&experts, routing.groups, routing.groups_per_token, 2)?;
        Ok(DecoderExtras {
            experts: Some(experts),
            rotary_dim: super::partial_rotary(
                &ROW,
                hf,
                hf.partial_rotary_factor,
                "partial_rotary_factor",
                0.5,
            )?,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = super::expert_hf_keys(config, "n_routed_experts");
        if let Some(experts) = config.extras.experts {
            let routing = experts.sigmoid.expect("GLM-4.5's experts route by sigmoid");
            keys.extend([
                ("moe_intermediate_size", experts.width.into()),
                (
                    "n_shared_experts",
                    (experts.shared.unwrap_or(0) / experts.width.max(1)).into(),
                ),
                ("first_k_dense_replace", experts.first_dense_layers.into()),
                ("n_group", routing.groups.into()),
                ("topk_group", routing.groups_per_token.into()),
                ("routed_scaling_factor", routing.scale.into()),
            ]);
        }
        keys.extend([
            ("partial_rotary_factor", config.rotary_factor().into()),
            ("attention_bias", config.qkv_bias.into()),
            ("use_qk_norm", config.qk_norm.into()),
            // A saved copy holds no multi-token-prediction layer.
            ("num_nextn_predict_layers", 0.into()),
        ]);
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// zai-org/GLM-4.5-Air's `config.json`.
    const GLM_4_5_AIR: &str = r#"{"architectures":["Glm4MoeForCausalLM"],
        "attention_bias":true,"attention_dropout":0.0,"pad_token_id":151329,
        "eos_token_id":[151329,151336,151338],"head_dim":128,"hidden_act":"silu",
        "hidden_size":4096,"partial_rotary_factor":0.5,"initializer_range":0.02,
        "intermediate_size":10944,"max_position_embeddings":131072,"model_type":"glm4_moe",
        "moe_intermediate_size":1408,"norm_topk_prob":true,"num_attention_heads":96,
        "n_group":1,"topk_group":1,"n_routed_experts":128,"n_shared_experts":1,
        "routed_scaling_factor":1.0,"num_experts_per_tok":8,"first_k_dense_replace":1,
        "num_hidden_layers":46,"num_key_value_heads":8,"rms_norm_eps":1e-05,
        "rope_scaling":null,"rope_theta":1000000,"num_nextn_predict_layers":1,
        "tie_word_embeddings":false,"torch_dtype":"bfloat16","transformers_version":"4.54.0",
        "use_cache":true,"use_qk_norm":false,"vocab_size":151552}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    /// GLM-4.5-Air with `key` set to `value`.
    fn air_with(key: &str, value: serde_json::Value) -> Result<LlamaConfig, ConfigError> {
        let mut json: serde_json::Value = serde_json::from_str(GLM_4_5_AIR).unwrap();
        json[key] = value;
        resolve(&json.to_string())
    }

    #[test]
    fn glm_4_5_air_routes_eight_of_128_by_sigmoid_after_one_dense_layer() {
        let c = resolve(GLM_4_5_AIR).unwrap();
        assert_eq!(c.architecture, Architecture::Glm4Moe);
        let experts = c.extras.experts.unwrap();
        assert_eq!(
            (experts.count, experts.per_token, experts.width),
            (128, 8, 1408)
        );
        assert_eq!(experts.shared, Some(1408));
        assert!(experts.shared_ungated && experts.normalize && !experts.round_weights);
        assert_eq!(
            experts.sigmoid,
            Some(SigmoidRouting {
                groups: 1,
                groups_per_token: 1,
                scale: 1.0,
                uncorrected: false,
            })
        );
        assert_eq!(c.layer_experts(0), None);
        assert_eq!(c.layer_experts(1), Some(experts));
        assert_eq!(c.intermediate_size, 10944);
        assert_eq!(c.rotary_dim(), 64);
        assert!(c.qkv_bias && !c.o_bias && !c.qk_norm);
        assert!(!c.extras.interleaved_rotary);
        // transformers' `num_parameters()` of the model on the meta device (the correction
        // biases are buffers; the multi-token-prediction layer is not loaded).
        assert_eq!(ModelShape::from_config(&c).parameters, 106_852_245_504);
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn glm_4_5_has_three_dense_layers_qk_norms_and_scaled_weights() {
        let mut json: serde_json::Value = serde_json::from_str(GLM_4_5_AIR).unwrap();
        for (key, value) in [
            ("hidden_size", serde_json::json!(5120)),
            ("intermediate_size", 12288.into()),
            ("moe_intermediate_size", 1536.into()),
            ("n_routed_experts", 160.into()),
            ("routed_scaling_factor", 2.5.into()),
            ("first_k_dense_replace", 3.into()),
            ("num_hidden_layers", 92.into()),
        ] {
            json[key] = value;
        }
        json["use_qk_norm"] = true.into();
        let c = resolve(&json.to_string()).unwrap();
        assert!(c.qk_norm);
        assert_eq!(c.layer_experts(2), None);
        assert_eq!(c.layer_experts(3).unwrap().sigmoid.unwrap().scale, 2.5);
        // zai-org/GLM-4.5's 355B less its multi-token-prediction layer, as transformers
        // counts it.
        assert_eq!(ModelShape::from_config(&c).parameters, 352_797_814_784);
        assert_eq!(resolve(&c.to_hf_json().to_string()).unwrap(), c);
    }

    #[test]
    fn groups_the_router_cannot_form_are_refused_by_key() {
        let key = |r: Result<LlamaConfig, ConfigError>| match r {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("accepted or another error: {other:?}"),
        };
        assert_eq!(key(air_with("n_group", 3.into())), "n_group");
        assert_eq!(key(air_with("n_group", 128.into())), "n_group");
        assert_eq!(key(air_with("topk_group", 2.into())), "topk_group");
        let mut json: serde_json::Value = serde_json::from_str(GLM_4_5_AIR).unwrap();
        json["n_group"] = 8.into();
        json["topk_group"] = 0.into();
        assert_eq!(key(resolve(&json.to_string())), "topk_group");
        // Eight groups of 16, four of them open: 64 experts to choose eight from.
        json["topk_group"] = 4.into();
        assert!(resolve(&json.to_string()).is_ok());
        assert_eq!(
            key(air_with("n_shared_experts", 0.into())),
            "n_shared_experts"
        );
        assert_eq!(
            key(air_with("first_k_dense_replace", 47.into())),
            "first_k_dense_replace"
        );
        assert_eq!(
            key(air_with("routed_scaling_factor", 0.into())),
            "routed_scaling_factor"
        );
    }
}
