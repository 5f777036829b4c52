//! GPT-OSS (`GptOssForCausalLM`, model type `gpt_oss`: gpt-oss-20b, gpt-oss-120b): Llama's
//! pre-norm layer with
//! - attention with biases on all four projections (`attention_bias`, default true) and a
//!   learned sink logit per head in its softmax (`self_attn.sinks`,
//!   [`crate::model::decoder`]); sliding layers (`layer_types`, by default every other
//!   one from the first) see the last `sliding_window` (128) positions; every layer rotates
//!   with YaRN (×32 over 4096 positions, `truncate: false`, where the config says no other);
//! - a mixture of `num_local_experts` experts of `intermediate_size`, `num_experts_per_tok` a
//!   token, chosen by a router with a bias (`mlp.router`), their probabilities renormalised over
//!   the chosen ones; each expert's linears carry biases, and its activation is the clamped GLU
//!   `(clamp(up, ±7) + 1) · g · σ(1.702 g)`, `g = min(gate, 7)` (`swiglu_limit`,
//!   `swiglu_alpha`; [`crate::model::arch::ClampedGlu`]).
//!
//! The checkpoints stack each layer's experts in 3-D tensors, their gate and up projections
//! interleaved ([`crate::model::checkpoint`]); the released ones hold those stacks in MXFP4
//! ([`crate::model::checkpoint`]), dequantised on loading as transformers does. Each expert's gate,
//! up and down projections are pruned as matrices of their own, as every other family's
//! experts (`mlp.experts.E.gate_proj`); a saved copy stacks them back, unquantised.

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::ExpertStacks;
use crate::model::arch::{invalid, LocalAttention};
use crate::model::arch::{ClampedGlu, Experts};
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, HfRopeScaling, LlamaConfig};

/// `GptOssForCausalLM`.
pub struct GptOss;

/// `GptOssConfig.default_theta`.
const DEFAULT_THETA: f64 = 150_000.0;

/// Without `layer_types`, every other layer attends in full, the first slides
/// (`GptOssConfig`).
const GLOBAL_EVERY: usize = 2;

/// `GptOssForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(8),
        head_dim: Some(64),
        max_positions: 131_072,
    },
    gguf_arch: Some("gpt-oss"),
    default_rope_theta: DEFAULT_THETA,
    expert_stacks: Some(ExpertStacks {
        module: "mlp.experts",
        gate_up: "mlp.experts.gate_up_proj",
        down: "mlp.experts.down_proj",
        halves: false,
        out_major: false,
    }),
    ..FamilyRow::new("GptOssForCausalLM", "gpt_oss", &GptOss)
};

impl Family for GptOss {
    fn attention_biases(&self, hf: &HfLlamaConfig) -> super::AttentionBiases {
        let bias = hf.attention_bias.unwrap_or(true);
        super::AttentionBiases { qkv: bias, o: bias }
    }

    /// Each expert's width, `intermediate_size` (`GptOssConfig`'s default 2880).
    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        Some(hf.intermediate_size.unwrap_or(2880))
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    /// `GptOssConfig`'s YaRN: ×32 over 4096 positions, the correction range not rounded.
    fn default_rope_scaling(&self) -> Option<HfRopeScaling> {
        Some(HfRopeScaling {
            rope_type: Some("yarn".into()),
            factor: Some(32.0),
            beta_fast: Some(32.0),
            beta_slow: Some(1.0),
            truncate: Some(false),
            original_max_position_embeddings: Some(4096),
            ..HfRopeScaling::default()
        })
    }

    /// The router is `mlp.router`; the experts' names are the decoder's, which
    /// [`crate::model::checkpoint`] reads from the stacks.
    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        let (layer, kind) = name.split_once(".mlp.gate.")?;
        Some(format!("{layer}.mlp.router.{kind}"))
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let glu = ClampedGlu {
            alpha: hf.experts.swiglu_alpha.unwrap_or(1.702),
            limit: hf.experts.swiglu_limit.unwrap_or(7.0),
        };
        for (key, value) in [("swiglu_alpha", glu.alpha), ("swiglu_limit", glu.limit)] {
            if !(value.is_finite() && value > 0.0) {
                return Err(invalid(
                    key,
                    format!("is {value}; it must be a positive number"),
                ));
            }
        }
        let experts = Experts {
            // The router's softmax is taken in the model's dtype.
            round_weights: true,
            biased: true,
            clamped_glu: Some(glu),
            ..Experts::softmax(
                hf.experts
                    .num_local_experts
                    .or(hf.experts.num_experts)
                    .unwrap_or(128),
                hf.experts.num_experts_per_tok.unwrap_or(4),
                self.intermediate_size(hf).unwrap_or(2880),
            )
        };
        Ok(DecoderExtras {
            experts: Some(super::checked_experts(experts, "num_local_experts")?),
            local_attention: Some(LocalAttention {
                window: hf.window_or(None).unwrap_or(128),
                rope_theta: None,
                layers: super::sliding_layers(hf, GLOBAL_EVERY)?,
            }),
            attention_sinks: true,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = super::expert_hf_keys(config, "num_local_experts");
        // GPT-OSS always renormalises and has no such key.
        keys.remove("norm_topk_prob");
        if let Some(glu) = config.extras.experts.and_then(|e| e.clamped_glu) {
            keys.insert("swiglu_alpha", glu.alpha.into());
            keys.insert("swiglu_limit", glu.limit.into());
        }
        if let Some(local) = &config.extras.local_attention {
            keys.insert("layer_types", super::layer_types_json(&local.layers));
            keys.insert("sliding_window", local.window.into());
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;
    use crate::model::arch::RopeScaling;

    /// openai/gpt-oss-20b's `config.json`, as the hub has it (24 alternating `layer_types`).
    fn gpt_oss_20b() -> String {
        let types = ["sliding_attention", "full_attention"].repeat(12);
        format!(
            r#"{{"architectures":["GptOssForCausalLM"],"attention_bias":true,
            "attention_dropout":0.0,"eos_token_id":200002,"experts_per_token":4,"head_dim":64,
            "hidden_act":"silu","hidden_size":2880,"initial_context_length":4096,
            "initializer_range":0.02,"intermediate_size":2880,"layer_types":{},
            "max_position_embeddings":131072,"model_type":"gpt_oss","num_attention_heads":64,
            "num_experts_per_tok":4,"num_hidden_layers":24,"num_key_value_heads":8,
            "num_local_experts":32,"output_router_logits":false,"pad_token_id":199999,
            "quantization_config":{{"modules_to_not_convert":["model.layers.*.self_attn",
            "model.layers.*.mlp.router","model.embed_tokens","lm_head"],"quant_method":"mxfp4"}},
            "rms_norm_eps":1e-05,"rope_scaling":{{"beta_fast":32.0,"beta_slow":1.0,"factor":32.0,
            "original_max_position_embeddings":4096,"rope_type":"yarn","truncate":false}},
            "rope_theta":150000,"router_aux_loss_coef":0.9,"sliding_window":128,
            "swiglu_limit":7.0,"tie_word_embeddings":false,"transformers_version":"4.55.0.dev0",
            "use_cache":true,"vocab_size":201088}}"#,
            serde_json::to_string(&types).unwrap()
        )
    }

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn gpt_oss_20b_routes_four_of_32_biased_experts_beside_sinks_and_sliding_layers() {
        let c = resolve(&gpt_oss_20b()).unwrap();
        assert_eq!(c.architecture, Architecture::GptOss);
        let glu = ClampedGlu {
            alpha: 1.702,
            limit: 7.0,
        };
        let experts = c.extras.experts.unwrap();
        assert_eq!(
            (experts.count, experts.per_token, experts.width),
            (32, 4, 2880)
        );
        assert!(experts.normalize && experts.biased && experts.shared.is_none());
        assert_eq!(experts.clamped_glu, Some(glu));
        assert!(c.extras.attention_sinks && c.qkv_bias && c.o_bias);
        assert_eq!((c.layer_window(0), c.layer_window(1)), (Some(128), None));
        assert_eq!(c.rope_theta, 150_000.0);
        let RopeScaling::Yarn {
            factor,
            truncate,
            original_max_position_embeddings,
            ..
        } = c.rope_scaling
        else {
            panic!("{:?}", c.rope_scaling);
        };
        assert_eq!(
            (factor, truncate, original_max_position_embeddings),
            (32.0, false, 4096)
        );
        // transformers' `num_parameters()` of this config (meta device, transformers 5.24):
        // 2 × 201088 × 2880 + 24 × (attention with biases 2 × 2880 × 4096 + 4096 + 2 × (2880
        // × 512 + 512) + 2880, 64 sinks, 2 norms, the router 2880 × 32 + 32, 32 experts of
        // 2880 × 5760 + 5760 + 2880 × 2880 + 2880) + 2880.
        assert_eq!(ModelShape::from_config(&c).parameters, 20_914_757_184);
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
    }

    /// gpt-oss-120b: 36 layers of 128 experts, its other keys the defaults.
    #[test]
    fn gpt_oss_120b_counts_its_published_parameters() {
        let json = r#"{"architectures":["GptOssForCausalLM"],"num_hidden_layers":36,
            "num_local_experts":128,"hidden_size":2880,"intermediate_size":2880,
            "num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,
            "vocab_size":201088}"#;
        let c = resolve(json).unwrap();
        assert_eq!(ModelShape::from_config(&c).parameters, 116_829_156_672);
        // Without `rope_scaling` or `layer_types`: GptOssConfig's YaRN and alternation.
        assert!(matches!(
            c.rope_scaling,
            RopeScaling::Yarn {
                factor: 32.0,
                truncate: false,
                ..
            }
        ));
        assert_eq!((c.layer_window(34), c.layer_window(35)), (Some(128), None));
    }

    #[test]
    fn a_glu_that_is_not_positive_is_refused_by_key() {
        let json = gpt_oss_20b().replace(r#""swiglu_limit":7.0"#, r#""swiglu_limit":-1.0"#);
        let err = resolve(&json).unwrap_err().to_string();
        assert!(err.contains("swiglu_limit"), "{err}");
    }
}
