//! Cohere (`CohereForCausalLM`, model type `cohere`: Command R, Aya 23, Aya Expanse) and
//! Cohere 2 (`Cohere2ForCausalLM`, model type `cohere2`: Command R7B, Command A): Llama's names
//! and SwiGLU MLP with
//! - LayerNorms without a bias (`CohereLayerNorm`, epsilon `layer_norm_eps`), one per layer:
//!   attention and MLP both read `input_layernorm` and the layer returns `x + attn + mlp`;
//! - interleaved RoPE over the whole head: dimensions `(2i, 2i + 1)` turn together;
//! - biases on all four attention projections where `attention_bias` says (default false);
//! - the logits multiplied by `logit_scale` (default 0.0625), the head tied by default.
//!
//! Cohere 2 adds sliding-window attention on three layers of four (`layer_types`, else every
//! `sliding_window_pattern`-th layer full), and only its sliding layers rotate: the full
//! layers are NoPE.
//!
//! Command R+ adds LayerNorms of the queries and keys (`use_qk_norm`): each head normed apart,
//! with gains of its own (`[heads, head_dim]` in the checkpoint), before RoPE.

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow, GgufMetadata};
use crate::model::arch::{
    invalid, positive, positive_number, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig,
    LocalAttention,
};

/// Cohere's layer: `CohereForCausalLM`, or with sliding NoPE-full layers `Cohere2ForCausalLM`.
pub struct Cohere {
    /// Sliding and full layers, the full ones NoPE (Cohere 2).
    sliding: bool,
}

/// `CohereForCausalLM`.
pub const COHERE: Cohere = Cohere { sliding: false };

/// `Cohere2ForCausalLM`.
pub const COHERE2: Cohere = Cohere { sliding: true };

/// The factor of the logits when a config names none (both config classes).
const DEFAULT_LOGIT_SCALE: f64 = 0.0625;

/// Without `layer_types`, every fourth Cohere 2 layer attends in full (`Cohere2Config`).
const GLOBAL_EVERY: usize = 4;

impl Cohere {
    fn name(&self) -> &'static str {
        if self.sliding {
            "Cohere 2"
        } else {
            "Cohere"
        }
    }

    /// Cohere 2's sliding layers (which alone rotate), refusing what `Cohere2Config` would
    /// read otherwise.
    fn local_attention(&self, hf: &HfLlamaConfig) -> Result<LocalAttention, ConfigError> {
        let head_dim = hf.hidden_per_head();
        if hf.head_dim.is_some_and(|d| d != head_dim) {
            return Err(invalid(
                "head_dim",
                format!(
                    "is not hidden_size / num_attention_heads ({head_dim}), which Cohere2Config \
                     takes whatever head_dim says; remove it"
                ),
            ));
        }
        let window = match hf.window_or(Some(4096)) {
            Some(window) => {
                positive("sliding_window", window)?;
                window
            }
            None => {
                return Err(invalid(
                    "sliding_window",
                    "is null; Cohere 2's sliding layers need a window (4096 in the released \
                     models)"
                        .into(),
                ))
            }
        };
        if hf.rope_scaling.is_some() {
            return Err(invalid(
                "rope_scaling",
                "is set; Cohere 2 runs here with plain RoPE (remove it)".into(),
            ));
        }
        Ok(LocalAttention {
            window,
            rope_theta: None,
            layers: super::sliding_layers(hf, hf.sliding_window_pattern.unwrap_or(GLOBAL_EVERY))?,
        })
    }
}

/// `CohereForCausalLM`'s row: GGUF files of llama.cpp's `command-r` (Command R, R+, Aya) load.
pub const COHERE_ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults::positions(8192),
    gguf_arch: Some("command-r"),
    // `CohereConfig.default_theta`.
    default_rope_theta: 500_000.0,
    ties_embeddings: true,
    ..FamilyRow::new("CohereForCausalLM", "cohere", &COHERE)
};

/// `Cohere2ForCausalLM`'s row: GGUF files of llama.cpp's `cohere2` (Command R7B, Command A)
/// load; `Cohere2Config` keeps a RoPE base of 10,000.
pub const COHERE2_ROW: FamilyRow = FamilyRow {
    hf_class: "Cohere2ForCausalLM",
    model_type: "cohere2",
    gguf_arch: Some("cohere2"),
    default_rope_theta: 10_000.0,
    hooks: &COHERE2,
    ..COHERE_ROW
};

impl Family for Cohere {
    /// The logits' factor; Cohere 2's sliding layers alone rotate, at their own base where the
    /// file gives one.
    fn read_gguf(&self, meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        hf.set_own_key("logit_scale", meta.f64("logit_scale"));
        if let Some(base) = meta.f64("rope.freq_base_swa").filter(|_| self.sliding) {
            hf.rope_theta = Some(base);
        }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    /// Command R+'s `use_qk_norm` (which `Cohere2Config` does not read).
    fn qk_norm(&self, hf: &HfLlamaConfig) -> bool {
        !self.sliding && hf.use_qk_norm.unwrap_or(false)
    }

    /// The layer's one norm is `input_layernorm`.
    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        super::shared_input_norm(name)
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, self.name())?;
        let logit_scale =
            positive_number(
            "logit_scale",
            hf.own_key("logit_scale")?.unwrap_or(DEFAULT_LOGIT_SCALE),
        )?;
        let local = self.sliding.then(|| self.local_attention(hf)).transpose()?;
        Ok(DecoderExtras {
            layer_norm: true,
            layer_norm_without_bias: true,
            parallel_residual: true,
            shared_norm: true,
            interleaved_rotary: true,
            qk_norm_per_head_gains: self.qk_norm(hf),
            logit_scale: Some(logit_scale),
            nope_layers: local.as_ref().map(LocalAttention::full_layers),
            local_attention: local,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = BTreeMap::from([
            ("layer_norm_eps", config.rms_norm_eps.into()),
            ("logit_scale", config.extras.logit_scale.into()),
            ("attention_bias", config.qkv_bias.into()),
        ]);
        if let Some(local) = &config.extras.local_attention {
            keys.insert("sliding_window", local.window.into());
            keys.insert("layer_types", super::layer_types_json(&local.layers));
        } else {
            keys.insert("use_qk_norm", config.qk_norm.into());
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::LogitScale;
    use crate::model::arch::ModelShape;

    /// CohereForAI/aya-23-8B's `config.json`, as the hub has it.
    const AYA_23_8B: &str = r#"{"architectures":["CohereForCausalLM"],"attention_bias":false,
        "attention_dropout":0.0,"bos_token_id":5,"eos_token_id":255001,"hidden_act":"silu",
        "hidden_size":4096,"initializer_range":0.02,"intermediate_size":14336,
        "layer_norm_eps":1e-05,"logit_scale":0.125,"max_position_embeddings":8192,
        "model_type":"cohere","num_attention_heads":32,"num_hidden_layers":32,
        "num_key_value_heads":8,"pad_token_id":0,"rope_theta":10000,"torch_dtype":"float16",
        "transformers_version":"4.40.0.dev0","use_cache":true,"use_qk_norm":false,
        "vocab_size":256000}"#;

    /// CohereForAI/c4ai-command-r7b-12-2024's `config.json`, as the hub has it.
    const COMMAND_R7B: &str = r#"{"architectures":["Cohere2ForCausalLM"],
        "attention_bias":false,"attention_dropout":0.0,"bos_token_id":5,"cache_implementation":"hybrid",
        "eos_token_id":255001,"head_dim":128,"hidden_act":"silu","hidden_size":4096,
        "initializer_range":0.02,"intermediate_size":14336,"layer_norm_eps":1e-05,
        "logit_scale":0.25,"max_position_embeddings":8192,"model_type":"cohere2",
        "num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,
        "order_of_interleaved_layers":"local_attn_first","pad_token_id":0,
        "position_embedding_type":"rope_gptj","rope_scaling":null,"rope_theta":50000,
        "rotary_pct":1.0,"sliding_window":4096,"sliding_window_pattern":4,
        "torch_dtype":"bfloat16","transformers_version":"4.48.0.dev0","use_cache":true,
        "use_embedding_sharing":true,"use_gated_activation":true,"use_parallel_block":true,
        "use_parallel_embedding":true,"vocab_size":256000}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn aya_23_resolves_to_cohere_layer_and_parameter_count() {
        let c = resolve(AYA_23_8B).unwrap();
        assert_eq!(c.architecture, Architecture::Cohere);
        let e = &c.extras;
        assert!(e.layer_norm && e.layer_norm_without_bias && e.parallel_residual);
        assert!(e.shared_norm && e.interleaved_rotary && c.tie_word_embeddings);
        assert_eq!(c.logit_scale(), Some(LogitScale::Times(0.125)));
        assert_eq!(
            (c.rms_norm_eps, c.rope_theta, c.head_dim),
            (1e-5, 10_000.0, 128)
        );
        assert!((0..32).all(|i| c.layer_rotary(i) && c.layer_window(i).is_none()));
        // Aya-23-8B: 8,028,033,024 parameters (one norm per layer, no biases, tied head).
        assert_eq!(ModelShape::from_config(&c).parameters, 8_028_033_024);
        // The shared norm is `input_layernorm` in the checkpoint.
        let family = c.architecture.family();
        assert_eq!(
            family.checkpoint_name(&c, "model.layers.3.post_attention_layernorm.weight"),
            Some("model.layers.3.input_layernorm.weight".into())
        );
        assert_eq!(family.checkpoint_name(&c, "model.norm.weight"), None);
        // Defaults: CohereConfig's logit scale and RoPE base.
        let bare = AYA_23_8B
            .replace(r#""logit_scale":0.125,"#, "")
            .replace(r#""rope_theta":10000,"#, "");
        let c = resolve(&bare).unwrap();
        assert_eq!(c.logit_scale(), Some(LogitScale::Times(0.0625)));
        assert_eq!(c.rope_theta, 500_000.0);
    }

    #[test]
    fn command_r_plus_norms_each_query_and_key_head_with_gains_of_its_own() {
        // Command R+'s shape: 64 layers 12288 wide, 96 query heads and 8 kv heads.
        let json = AYA_23_8B
            .replace(r#""use_qk_norm":false"#, r#""use_qk_norm":true"#)
            .replace(r#""hidden_size":4096"#, r#""hidden_size":12288"#)
            .replace(
                r#""intermediate_size":14336"#,
                r#""intermediate_size":33792"#,
            )
            .replace(r#""num_attention_heads":32"#, r#""num_attention_heads":96"#)
            .replace(r#""num_hidden_layers":32"#, r#""num_hidden_layers":64"#);
        let c = resolve(&json).unwrap();
        assert!(c.qk_norm && c.extras.qk_norm_per_head_gains);
        assert_eq!(
            c.norm_shape("model.layers.0.self_attn.q_norm", 96 * 128),
            [96, 128]
        );
        assert_eq!(
            c.norm_shape("model.layers.0.self_attn.k_norm", 8 * 128),
            [8, 128]
        );
        assert_eq!(
            c.norm_shape("model.layers.0.input_layernorm", 12288),
            [12288]
        );
        // 104 B: per layer 1,572,864,000 in the linears, 12,288 + 104 × 128 in the norms.
        assert_eq!(ModelShape::from_config(&c).parameters, 103_810_674_688);
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
        // Cohere2Config has no q/k norms: the key is not read.
        let r7b = COMMAND_R7B.replace(r#""use_cache":true"#, r#""use_qk_norm":true"#);
        assert!(!resolve(&r7b).unwrap().qk_norm);
    }

    #[test]
    fn command_r7b_slides_three_layers_of_four_and_rotates_only_those() {
        let c = resolve(COMMAND_R7B).unwrap();
        assert_eq!(c.architecture, Architecture::Cohere2);
        for i in 0..32 {
            let sliding = (i + 1) % 4 != 0;
            assert_eq!(c.layer_window(i), sliding.then_some(4096), "layer {i}");
            assert_eq!(c.layer_rotary(i), sliding, "layer {i}");
            assert_eq!(c.layer_inv_freq(i), None, "layer {i}");
        }
        assert_eq!(c.logit_scale(), Some(LogitScale::Times(0.25)));
        assert_eq!(c.rope_theta, 50_000.0);
        // Command R7B: 8,028,033,024 parameters, Aya 23 8B's shape.
        assert_eq!(ModelShape::from_config(&c).parameters, 8_028_033_024);
        // Without the key, `Cohere2Config`'s window, the same.
        let absent = COMMAND_R7B.replace(r#""sliding_window":4096,"#, "");
        assert_ne!(absent, COMMAND_R7B);
        assert_eq!(resolve(&absent).unwrap(), c);
    }

    #[test]
    fn what_cohere_does_not_run_is_refused_by_name() {
        for (json, from, to, key) in [
            (
                AYA_23_8B,
                r#""logit_scale":0.125"#,
                r#""logit_scale":0"#,
                "logit_scale",
            ),
            (
                AYA_23_8B,
                r#""hidden_act":"silu""#,
                r#""hidden_act":"gelu""#,
                "hidden_act",
            ),
            (
                COMMAND_R7B,
                r#""sliding_window":4096"#,
                r#""sliding_window":null"#,
                "sliding_window",
            ),
            (
                COMMAND_R7B,
                r#""head_dim":128"#,
                r#""head_dim":64"#,
                "head_dim",
            ),
            (
                COMMAND_R7B,
                r#""rope_scaling":null"#,
                r#""rope_scaling":{"rope_type":"linear","factor":2.0}"#,
                "rope_scaling",
            ),
        ] {
            let changed = json.replace(from, to);
            assert_ne!(changed, json, "{from}");
            let err = resolve(&changed).unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{key}: {err}");
        }
    }

    #[test]
    fn both_classes_survive_a_saved_copy() {
        for json in [AYA_23_8B, COMMAND_R7B] {
            let c = resolve(json).unwrap();
            let saved = serde_json::to_string(&c.to_hf_json()).unwrap();
            let back = resolve(&saved).unwrap();
            assert_eq!(back, c, "{saved}");
        }
    }
}
