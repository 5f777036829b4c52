//! DeepSeek's configs as the hub has them, resolved; each count checked against transformers'.

use super::*;
use crate::model::arch::Architecture;
use crate::model::arch::ModelShape;

/// deepseek-ai/DeepSeek-V2-Lite's `config.json` (without `auto_map`).
const V2_LITE: &str = r#"{"architectures":["DeepseekV2ForCausalLM"],"attention_bias":false,
        "attention_dropout":0.0,"aux_loss_alpha":0.001,"bos_token_id":100000,
        "eos_token_id":100001,"first_k_dense_replace":1,"hidden_act":"silu","hidden_size":2048,
        "initializer_range":0.02,"intermediate_size":10944,"kv_lora_rank":512,
        "max_position_embeddings":163840,"model_type":"deepseek_v2",
        "moe_intermediate_size":1408,"moe_layer_freq":1,"n_group":1,"n_routed_experts":64,
        "n_shared_experts":2,"norm_topk_prob":false,"num_attention_heads":16,
        "num_experts_per_tok":6,"num_hidden_layers":27,"num_key_value_heads":16,
        "pretraining_tp":1,"q_lora_rank":null,"qk_nope_head_dim":128,"qk_rope_head_dim":64,
        "rms_norm_eps":1e-06,"rope_scaling":{"beta_fast":32,"beta_slow":1,"factor":40,
        "mscale":0.707,"mscale_all_dim":0.707,"original_max_position_embeddings":4096,
        "type":"yarn"},"rope_theta":10000,"routed_scaling_factor":1.0,"scoring_func":"softmax",
        "seq_aux":true,"tie_word_embeddings":false,"topk_group":1,"topk_method":"greedy",
        "torch_dtype":"bfloat16","transformers_version":"4.33.1","use_cache":true,
        "v_head_dim":128,"vocab_size":102400}"#;

/// deepseek-ai/DeepSeek-V3's `config.json` (without its FP8 `quantization_config`).
const V3_CONFIG: &str = r#"{"architectures":["DeepseekV3ForCausalLM"],"attention_bias":false,
        "attention_dropout":0.0,"bos_token_id":0,"eos_token_id":1,"ep_size":1,
        "first_k_dense_replace":3,"hidden_act":"silu","hidden_size":7168,
        "initializer_range":0.02,"intermediate_size":18432,"kv_lora_rank":512,
        "max_position_embeddings":163840,"model_type":"deepseek_v3",
        "moe_intermediate_size":2048,"moe_layer_freq":1,"n_group":8,"n_routed_experts":256,
        "n_shared_experts":1,"norm_topk_prob":true,"num_attention_heads":128,
        "num_experts_per_tok":8,"num_hidden_layers":61,"num_key_value_heads":128,
        "num_nextn_predict_layers":1,"q_lora_rank":1536,"qk_nope_head_dim":128,
        "qk_rope_head_dim":64,"rms_norm_eps":1e-06,"rope_scaling":{"beta_fast":32,"beta_slow":1,
        "factor":40,"mscale":1.0,"mscale_all_dim":1.0,"original_max_position_embeddings":4096,
        "type":"yarn"},"rope_theta":10000,"routed_scaling_factor":2.5,"scoring_func":"sigmoid",
        "tie_word_embeddings":false,"topk_group":4,"topk_method":"noaux_tc",
        "torch_dtype":"bfloat16","transformers_version":"4.33.1","use_cache":true,
        "v_head_dim":128,"vocab_size":129280}"#;

fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
    HfLlamaConfig::from_json(json).unwrap().resolve()
}

/// `json` with `key` set to `value`.
fn with(json: &str, key: &str, value: serde_json::Value) -> Result<LlamaConfig, ConfigError> {
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
    v[key] = value;
    resolve(&v.to_string())
}

#[test]
fn v2_lite_projects_queries_directly_and_routes_six_of_64_by_the_softmax() {
    let c = resolve(V2_LITE).unwrap();
    assert_eq!(c.architecture, Architecture::DeepseekV2);
    let latent = c.extras.latent_attention.unwrap();
    assert_eq!(latent.q_lora_rank, None);
    assert_eq!(
        (
            latent.kv_lora_rank,
            latent.qk_nope_head_dim,
            latent.qk_rope_head_dim,
            latent.v_head_dim
        ),
        (512, 128, 64, 128)
    );
    assert!(latent.interleaved);
    assert_eq!((c.head_dim, c.rotary_dim()), (192, 64));
    // transformers' `self.scaling` of this config: 192^-0.5 · (0.1 · 0.707 · ln 40 + 1)².
    let scale = latent.scale.unwrap();
    assert!((scale - 0.1147213867929261).abs() < 1e-15, "{scale}");
    let experts = c.extras.experts.unwrap();
    assert_eq!(
        (experts.count, experts.per_token, experts.width),
        (64, 6, 1408)
    );
    assert_eq!(experts.shared, Some(2 * 1408));
    assert!(experts.shared_ungated && !experts.normalize && experts.sigmoid.is_none());
    assert_eq!(
        experts.limited_softmax,
        Some(LimitedSoftmax {
            groups: 1,
            groups_per_token: 1,
            scale: 1.0
        })
    );
    assert_eq!(c.layer_experts(0), None);
    assert_eq!(c.layer_experts(1), Some(experts));
    // transformers' `num_parameters()` of the model on the meta device.
    assert_eq!(ModelShape::from_config(&c).parameters, 15_706_484_224);
    let back = resolve(&c.to_hf_json().to_string()).unwrap();
    assert_eq!(back, c);
}

#[test]
fn v3_routes_by_grouped_sigmoid_scores_through_a_query_latent() {
    let c = resolve(V3_CONFIG).unwrap();
    assert_eq!(c.architecture, Architecture::DeepseekV3);
    let latent = c.extras.latent_attention.unwrap();
    assert_eq!(latent.q_lora_rank, Some(1536));
    assert!(latent.interleaved);
    let scale = latent.scale.unwrap();
    assert!((scale - 0.1352337788608801).abs() < 1e-15, "{scale}");
    let experts = c.extras.experts.unwrap();
    assert_eq!(
        (experts.count, experts.per_token, experts.width),
        (256, 8, 2048)
    );
    assert_eq!(experts.first_dense_layers, 3);
    assert!(experts.normalize && experts.limited_softmax.is_none());
    assert_eq!(
        experts.sigmoid,
        Some(SigmoidRouting {
            groups: 8,
            groups_per_token: 4,
            scale: 2.5,
            uncorrected: false,
        })
    );
    // transformers' count: the multi-token-prediction layer is not loaded, the correction
    // biases are buffers.
    assert_eq!(ModelShape::from_config(&c).parameters, 671_026_404_352);
    let back = resolve(&c.to_hf_json().to_string()).unwrap();
    assert_eq!(back, c);
    assert_eq!(c.to_hf_json()["num_nextn_predict_layers"], 0);
    assert_eq!(c.to_hf_json()["rope_scaling"]["mscale_all_dim"], 1.0);
}

#[test]
fn a_rotation_by_halves_and_a_default_rope_are_taken_as_configured() {
    let c = with(V3_CONFIG, "rope_interleave", false.into()).unwrap();
    assert!(!c.extras.latent_attention.unwrap().interleaved);
    let plain = with(V3_CONFIG, "rope_scaling", serde_json::Value::Null).unwrap();
    assert_eq!(plain.extras.latent_attention.unwrap().scale, None);
}

#[test]
fn group_limited_greedy_takes_the_groups_and_the_scale() {
    let mut v: serde_json::Value = serde_json::from_str(V2_LITE).unwrap();
    v["topk_method"] = "group_limited_greedy".into();
    v["n_group"] = 8.into();
    v["topk_group"] = 3.into();
    v["routed_scaling_factor"] = 16.0.into();
    let c = resolve(&v.to_string()).unwrap();
    assert_eq!(
        c.extras.experts.unwrap().limited_softmax,
        Some(LimitedSoftmax {
            groups: 8,
            groups_per_token: 3,
            scale: 16.0
        })
    );
    assert_eq!(resolve(&c.to_hf_json().to_string()).unwrap(), c);
}

#[test]
fn configs_transformers_cannot_run_are_refused_naming_the_key() {
    let refused = |json: &str, key: &str, value: serde_json::Value| {
        let err = with(json, key, value).unwrap_err().to_string();
        assert!(err.contains(key), "{key}: {err}");
    };
    refused(V2_LITE, "topk_method", "noaux_tc".into());
    refused(V2_LITE, "scoring_func", "sigmoid".into());
    refused(V3_CONFIG, "scoring_func", "softmax".into());
    refused(V2_LITE, "num_key_value_heads", 8.into());
    refused(V2_LITE, "qk_rope_head_dim", 63.into());
    refused(V2_LITE, "kv_lora_rank", 0.into());
    refused(V3_CONFIG, "n_group", 7.into());
    refused(V3_CONFIG, "topk_group", 0.into());
    refused(V3_CONFIG, "n_shared_experts", 0.into());
    refused(V2_LITE, "mlp_bias", true.into());
    refused(V2_LITE, "num_experts_per_tok", serde_json::Value::Null);
    let mut v: serde_json::Value = serde_json::from_str(V2_LITE).unwrap();
    v["topk_method"] = "group_limited_greedy".into();
    v["n_group"] = serde_json::Value::Null;
    let err = resolve(&v.to_string()).unwrap_err().to_string();
    assert!(err.contains("n_group"), "{err}");
}
