//! Vision-language checkpoints read as their language model: Gemma 3 4B–27B
//! (`Gemma3ForConditionalGeneration`), Mistral Small 3.1 and 3.2
//! (`Mistral3ForConditionalGeneration`), LLaVA, Pixtral and their kin
//! (`LlavaForConditionalGeneration`), Qwen2-VL and Qwen2.5-VL
//! (`Qwen2VLForConditionalGeneration`, `Qwen2_5_VLForConditionalGeneration`), Qwen3-VL
//! (`Qwen3VLForConditionalGeneration`, and `Qwen3VLMoeForConditionalGeneration` over Qwen3-MoE,
//! its experts stacked as transformers 5 writes them, [`crate::model::checkpoint::stacks_in`])
//! and Llama 4 Scout and Maverick (`Llama4ForConditionalGeneration`). Their `config.json` holds the language model's config
//! under `text_config` (Qwen2-VL's and Qwen2.5-VL's hub configs at the top level, beside
//! `vision_config`), and their checkpoints its tensors under `language_model.` (transformers 5's
//! own modules: `model.language_model.`; Qwen2-VL's and Qwen2.5-VL's under `model.` itself)
//! beside the vision tower and the projector.
//!
//! Pruning and perplexity concern the language model alone, so that is what is loaded: its
//! config as a text-only checkpoint of its family would hold it ([`text_config`]), and its
//! tensors under the family's own names ([`text_tensor_name`]); the vision tower and the
//! projector are neither read nor counted. A saved copy is that text-only checkpoint
//! (`Gemma3ForCausalLM`, `Qwen2ForCausalLM`, …), which transformers loads as it is.
//!
//! Qwen's multimodal RoPE (`mrope_section`) gives each frequency the temporal, height or width
//! position of its section; for text alone the three positions are the token's own, so it is
//! the family's plain RoPE, which is what the language model runs.

use serde_json::{json, Map, Value};

/// A vision-language class whose language model this tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VisionLanguage {
    /// The class `config.json` names in `architectures`.
    pub class: &'static str,
    /// Its `model_type`.
    pub model_type: &'static str,
    /// The language model's `model_type` where `text_config` names none (the config class's
    /// default text config).
    pub text_model_type: &'static str,
    /// Whether the head is tied to the embeddings where neither the config nor its
    /// `text_config` says (the config class's `tie_word_embeddings`).
    pub ties_by_default: bool,
    /// The family the language model runs as, where its text config names a type of its own
    /// (Qwen2.5-VL's `qwen2_5_vl_text` is Qwen2's decoder); `None`: the type it names.
    pub text_family: Option<&'static str>,
    /// Whether a config without `text_config` holds the language model's keys at its top level
    /// (Qwen2-VL's and Qwen2.5-VL's hub configs).
    pub flat: bool,
}

/// Every vision-language class this tool reads the language model of.
pub const CLASSES: [VisionLanguage; 8] = [
    VisionLanguage {
        class: "Gemma3ForConditionalGeneration",
        model_type: "gemma3",
        text_model_type: "gemma3_text",
        ties_by_default: true,
        text_family: None,
        flat: false,
    },
    VisionLanguage {
        class: "Mistral3ForConditionalGeneration",
        model_type: "mistral3",
        text_model_type: "mistral",
        ties_by_default: true,
        text_family: None,
        flat: false,
    },
    VisionLanguage {
        class: "LlavaForConditionalGeneration",
        model_type: "llava",
        text_model_type: "llama",
        ties_by_default: false,
        text_family: None,
        flat: false,
    },
    VisionLanguage {
        class: "Qwen2VLForConditionalGeneration",
        model_type: "qwen2_vl",
        text_model_type: "qwen2_vl_text",
        ties_by_default: false,
        text_family: Some("qwen2"),
        flat: true,
    },
    VisionLanguage {
        class: "Qwen2_5_VLForConditionalGeneration",
        model_type: "qwen2_5_vl",
        text_model_type: "qwen2_5_vl_text",
        ties_by_default: false,
        text_family: Some("qwen2"),
        flat: true,
    },
    VisionLanguage {
        class: "Qwen3VLForConditionalGeneration",
        model_type: "qwen3_vl",
        text_model_type: "qwen3_vl_text",
        ties_by_default: false,
        text_family: Some("qwen3"),
        flat: false,
    },
    VisionLanguage {
        class: "Qwen3VLMoeForConditionalGeneration",
        model_type: "qwen3_vl_moe",
        text_model_type: "qwen3_vl_moe_text",
        ties_by_default: false,
        text_family: Some("qwen3_moe"),
        flat: false,
    },
    VisionLanguage {
        class: "Llama4ForConditionalGeneration",
        model_type: "llama4",
        text_model_type: "llama4_text",
        ties_by_default: false,
        text_family: None,
        flat: false,
    },
];

/// The defaults of a text config class (transformers 5.24's) for the keys the decoder needs
/// and its family does not default itself, by `model_type`. Configs saved by transformers 4
/// write only the keys of a `text_config` that differ from these (Gemma 3 4B's names five).
fn text_defaults(model_type: &str) -> Value {
    match model_type {
        "gemma3_text" => json!({
            "vocab_size": 262208,
            "hidden_size": 2304,
            "intermediate_size": 9216,
            "num_hidden_layers": 26,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-6,
            "query_pre_attn_scalar": 256,
            "sliding_window": 4096,
            "bos_token_id": 2,
            "eos_token_id": 1
        }),
        "mistral" => json!({
            "vocab_size": 32000,
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-6,
            "sliding_window": 4096,
            "bos_token_id": 1,
            "eos_token_id": 2
        }),
        "qwen2_vl_text" | "qwen2_5_vl_text" => json!({
            "vocab_size": 152064,
            "hidden_size": 8192,
            "intermediate_size": 29568,
            "num_hidden_layers": 80,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-5,
            "rope_theta": 1e6,
            "max_window_layers": 80,
            "bos_token_id": 151643,
            "eos_token_id": 151645
        }),
        "qwen3_vl_text" => json!({
            "vocab_size": 151936,
            "hidden_size": 4096,
            "intermediate_size": 22016,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "head_dim": 128,
            "max_position_embeddings": 128000,
            "rms_norm_eps": 1e-6,
            "rope_theta": 500000.0
        }),
        // Its router always renormalises (no `norm_topk_prob` key); transformers 5 writes
        // `num_experts` as `num_local_experts`, which Qwen3-MoE reads after `num_experts`.
        "qwen3_vl_moe_text" => json!({
            "vocab_size": 151936,
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "max_position_embeddings": 128000,
            "rms_norm_eps": 1e-6,
            "rope_theta": 500000.0,
            "moe_intermediate_size": 1408,
            "num_experts_per_tok": 4,
            "num_local_experts": 60,
            "norm_topk_prob": true
        }),
        "llama4_text" => json!({
            "vocab_size": 202048,
            "hidden_size": 5120,
            "num_hidden_layers": 48,
            "num_attention_heads": 40,
            "max_position_embeddings": 131072,
            "bos_token_id": 1,
            "eos_token_id": 2
        }),
        "llama" => json!({
            "vocab_size": 32000,
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-6,
            "bos_token_id": 1,
            "eos_token_id": 2
        }),
        _ => json!({}),
    }
}

/// The vision-language class a `config.json` object names (by `architectures`, else
/// `model_type`), if it names one of [`CLASSES`].
pub fn of_config(config: &Map<String, Value>) -> Option<&'static VisionLanguage> {
    let name = config
        .get("architectures")
        .and_then(|a| a.get(0))
        .or_else(|| config.get("model_type"))
        .and_then(Value::as_str)?;
    CLASSES
        .iter()
        .find(|c| c.class == name || c.model_type == name)
}

/// The language model's config of the vision-language `config` (of class `class`), as a
/// text-only checkpoint of its family holds it: `text_config` (for a [`VisionLanguage::flat`]
/// class without one, the top level less `vision_config` and the image and video token ids)
/// with its `model_type` (the class's default where it names none), `architectures` the
/// family's class, the text config class's
/// defaults for the keys it leaves out ([`text_defaults`]), multimodal RoPE as the plain RoPE it
/// is for text ([`plain_rope`]), the weights' dtype of the whole model where it gives none, and
/// `tie_word_embeddings` from the whole model's config, else `text_config`'s, else the class's
/// default. An error names what is missing.
pub fn text_config(
    config: &Map<String, Value>,
    class: &VisionLanguage,
) -> Result<Map<String, Value>, String> {
    let mut text = match config.get("text_config") {
        Some(Value::Object(text)) => text.clone(),
        None if class.flat => {
            let mut text = config.clone();
            text.retain(|key, _| {
                let wrapper =
                    ["vision_config", "architectures", "model_type"].contains(&key.as_str());
                let media_token = key.ends_with("_token_id")
                    && ["image", "video", "vision"]
                        .iter()
                        .any(|p| key.starts_with(p));
                !wrapper && !media_token
            });
            text
        }
        _ => {
            return Err(format!(
                "`text_config` is missing or not an object; a {} config holds its language \
                 model's config there",
                class.class
            ))
        }
    };
    let model_type = text
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or(class.text_model_type)
        .to_string();
    let runs_as = class.text_family.unwrap_or(&model_type);
    let family = crate::model::arch::Architecture::from_hf_name(runs_as).ok_or_else(|| {
        format!(
            "`text_config.model_type` is `{model_type}`, not a decoder family this tool runs \
             (the language model of a {} must be one of: {})",
            class.class,
            crate::model::arch::Architecture::supported_hf_classes()
        )
    })?;
    if let Value::Object(defaults) = text_defaults(&model_type) {
        for (key, value) in defaults {
            let given = text.contains_key(&key)
                || (key == "rope_theta" && text.contains_key("rope_parameters"));
            if !given {
                text.insert(key, value);
            }
        }
    }
    text.insert("model_type".into(), family.model_type().into());
    text.insert("architectures".into(), vec![family.hf_class()].into());
    for key in ["rope_scaling", "rope_parameters"] {
        if let Some(Value::Object(rope)) = text.get_mut(key) {
            plain_rope(rope);
        }
    }
    // A legacy `rope_scaling` that said only `mrope` scales nothing.
    if let Some(Value::Object(rope)) = text.get("rope_scaling") {
        let kind = |k: &str| rope.get(k).and_then(Value::as_str);
        let default = rope.keys().all(|k| k == "type" || k == "rope_type")
            && [kind("type"), kind("rope_type")]
                .iter()
                .all(|t| matches!(t, None | Some("default")));
        if default {
            text.remove("rope_scaling");
        }
    }
    for key in ["torch_dtype", "dtype"] {
        if let (Some(dtype), false) = (config.get(key), text.contains_key(key)) {
            text.insert(key.into(), dtype.clone());
        }
    }
    let tie = config
        .get("tie_word_embeddings")
        .or_else(|| text.get("tie_word_embeddings"))
        .and_then(Value::as_bool)
        .unwrap_or(class.ties_by_default);
    text.insert("tie_word_embeddings".into(), tie.into());
    Ok(text)
}

/// Turns Qwen's multimodal RoPE in `rope` (a `rope_scaling` or `rope_parameters` object) into
/// the plain RoPE it is for text: drops `mrope_section` and `mrope_interleaved`, and reads a
/// `type`/`rope_type` of `mrope` (Qwen2-VL's legacy name) as `default`.
fn plain_rope(rope: &mut Map<String, Value>) {
    rope.remove("mrope_section");
    rope.remove("mrope_interleaved");
    for key in ["type", "rope_type"] {
        if rope.get(key).and_then(Value::as_str) == Some("mrope") {
            rope.insert(key.into(), "default".into());
        }
    }
}

/// The language model's name (the family's, e.g. `model.layers.0.mlp.up_proj.weight`) of the
/// vision-language checkpoint's tensor `name`: `language_model.model.X` or transformers 5's
/// `model.language_model.X` is `model.X`, `language_model.lm_head.X` is `lm_head.X`, and
/// `lm_head.X` and the decoder's own `model.layers.`, `model.embed_tokens.` and `model.norm.`
/// (Qwen2-VL's) stay; `None` for the vision tower's and the projector's tensors.
pub fn text_tensor_name(name: &str) -> Option<String> {
    for kept in ["model.layers.", "model.embed_tokens.", "model.norm."] {
        if name.starts_with(kept) {
            return Some(name.to_string());
        }
    }
    for (theirs, ours) in [
        ("language_model.model.", "model."),
        ("model.language_model.", "model."),
        ("language_model.lm_head.", "lm_head."),
        ("lm_head.", "lm_head."),
    ] {
        if let Some(rest) = name.strip_prefix(theirs) {
            return Some(format!("{ours}{rest}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    /// Gemma 3 4B's config as the hub serves it, `text_config` with five keys.
    const GEMMA3_4B: &str = r#"{"architectures":["Gemma3ForConditionalGeneration"],
        "model_type":"gemma3","torch_dtype":"bfloat16","mm_tokens_per_image":256,
        "text_config":{"hidden_size":2560,"intermediate_size":10240,"model_type":"gemma3_text",
        "num_hidden_layers":34,"rope_scaling":{"factor":8.0,"rope_type":"linear"},
        "sliding_window":1024},"vision_config":{"model_type":"siglip_vision_model"}}"#;

    #[test]
    fn a_sparse_text_config_takes_its_class_defaults_and_the_family_class() {
        let config = object(GEMMA3_4B);
        let class = of_config(&config).unwrap();
        assert_eq!(class.class, "Gemma3ForConditionalGeneration");
        let text = text_config(&config, class).unwrap();
        assert_eq!(
            text["architectures"],
            serde_json::json!(["Gemma3ForCausalLM"])
        );
        assert_eq!(text["hidden_size"], 2560, "given keys win");
        assert_eq!(text["sliding_window"], 1024);
        assert_eq!(text["num_attention_heads"], 8, "the class default");
        assert_eq!(text["head_dim"], 256);
        assert_eq!(text["vocab_size"], 262_208);
        assert_eq!(text["rms_norm_eps"], 1e-6);
        assert_eq!(text["torch_dtype"], "bfloat16", "the whole model's dtype");
        assert_eq!(text["tie_word_embeddings"], true, "Gemma3Config's default");
        let hf = crate::model::arch::HfLlamaConfig::from_json(&Value::Object(text).to_string())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(
            (hf.num_key_value_heads, hf.head_dim, hf.num_hidden_layers),
            (4, 256, 34)
        );
    }

    #[test]
    fn the_tie_comes_from_the_whole_model_then_the_text_config_then_the_class() {
        let with = |outer: &str, inner: &str| {
            let config = object(&format!(
                r#"{{"architectures":["Mistral3ForConditionalGeneration"]{outer},
                "text_config":{{"model_type":"mistral"{inner}}}}}"#
            ));
            text_config(&config, of_config(&config).unwrap()).unwrap()["tie_word_embeddings"]
                .clone()
        };
        assert_eq!(with(r#","tie_word_embeddings":false"#, ""), false);
        assert_eq!(with("", r#","tie_word_embeddings":false"#), false);
        assert_eq!(with("", ""), true, "Mistral3Config's default");
    }

    /// Qwen2.5-VL 7B's config as the hub serves it (abridged): the language model's keys at
    /// the top level, multimodal RoPE in transformers 4's `rope_scaling`.
    const QWEN2_5_VL_7B: &str = r#"{"architectures":["Qwen2_5_VLForConditionalGeneration"],
        "model_type":"qwen2_5_vl","hidden_size":3584,"intermediate_size":18944,
        "num_attention_heads":28,"num_hidden_layers":28,"num_key_value_heads":4,
        "rms_norm_eps":1e-06,"rope_theta":1000000.0,"sliding_window":32768,
        "use_sliding_window":false,"max_window_layers":28,"tie_word_embeddings":false,
        "vocab_size":152064,"rope_scaling":{"type":"mrope","mrope_section":[16,24,24]},
        "vision_config":{"depth":32,"hidden_size":1280}}"#;

    #[test]
    fn a_flat_qwen_config_is_qwen2_with_plain_rope() {
        let config = object(QWEN2_5_VL_7B);
        let text = text_config(&config, of_config(&config).unwrap()).unwrap();
        assert_eq!(
            text["architectures"],
            serde_json::json!(["Qwen2ForCausalLM"])
        );
        assert_eq!(text["model_type"], "qwen2");
        assert!(
            text.get("rope_scaling").is_none(),
            "mrope alone scales nothing"
        );
        assert!(text.get("vision_config").is_none());
        assert_eq!(text["rope_theta"], 1e6);
        let resolved =
            crate::model::arch::HfLlamaConfig::from_json(&Value::Object(text).to_string())
                .unwrap()
                .resolve()
                .unwrap();
        assert_eq!(resolved.head_dim, 128);
        assert_eq!(resolved.rope_scaling, crate::model::arch::RopeScaling::None);
        // transformers 5's form: the sections inside `rope_parameters`.
        let mut rope = object(
            r#"{"rope_type":"default","mrope_section":[2,3,3],"mrope_interleaved":true,"rope_theta":5e6}"#,
        );
        plain_rope(&mut rope);
        assert_eq!(
            Value::Object(rope),
            serde_json::json!({"rope_type":"default","rope_theta":5e6})
        );
        assert_eq!(
            text_tensor_name("model.layers.3.self_attn.q_proj.bias").as_deref(),
            Some("model.layers.3.self_attn.q_proj.bias")
        );
        assert_eq!(text_tensor_name("visual.blocks.0.attn.qkv.weight"), None);
        assert_eq!(
            text_tensor_name("model.visual.blocks.0.attn.qkv.weight"),
            None
        );
    }

    #[test]
    fn a_missing_or_foreign_text_config_is_named() {
        let config = object(r#"{"model_type":"llava"}"#);
        let err = text_config(&config, of_config(&config).unwrap()).unwrap_err();
        assert!(err.contains("`text_config` is missing"), "{err}");
        let config = object(r#"{"model_type":"llava","text_config":{"model_type":"vicuna"}}"#);
        let err = text_config(&config, of_config(&config).unwrap()).unwrap_err();
        assert!(
            err.contains("`text_config.model_type` is `vicuna`"),
            "{err}"
        );
        assert!(of_config(&object(r#"{"model_type":"llama"}"#)).is_none());
    }

    #[test]
    fn tensors_keep_the_language_models_names_and_drop_the_rest() {
        let name = |n: &str| text_tensor_name(n);
        assert_eq!(
            name("language_model.model.layers.0.mlp.up_proj.weight").as_deref(),
            Some("model.layers.0.mlp.up_proj.weight")
        );
        assert_eq!(
            name("model.language_model.embed_tokens.weight").as_deref(),
            Some("model.embed_tokens.weight")
        );
        assert_eq!(
            name("language_model.lm_head.weight").as_deref(),
            Some("lm_head.weight")
        );
        assert_eq!(name("lm_head.weight").as_deref(), Some("lm_head.weight"));
        assert_eq!(
            name("vision_tower.vision_model.post_layernorm.weight"),
            None
        );
        assert_eq!(name("model.vision_tower.patch_conv.weight"), None);
        assert_eq!(name("multi_modal_projector.linear_1.weight"), None);
    }
}
