//! Gemma 3's text decoder (`Gemma3ForCausalLM`, model type `gemma3_text`: Gemma 3 270M and 1B,
//! and the language model of the larger ones): Llama's layer with
//! - four RMSNorms per layer, in the `1 + w` form: before attention, on the attention output,
//!   before the MLP and on the MLP output (the last two named `pre_feedforward_layernorm` and
//!   `post_feedforward_layernorm`; the output norms act before the residual add);
//! - a GELU-tanh gated MLP;
//! - token embeddings multiplied by `√hidden`;
//! - per-head q/k RMSNorm, queries scaled by `query_pre_attn_scalar^-0.5`;
//! - sliding-window attention with its own RoPE base on five layers of six (`layer_types`, or
//!   every `sliding_window_pattern`-th layer global), full attention on the others;
//! - a tied head;
//! - Gemma 2's soft-caps of the attention scores and the logits, where the config sets them.

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::{
    invalid, Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig, LocalAttention,
};

/// `Gemma3ForCausalLM`.
pub struct Gemma3;

/// `Gemma3ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(4),
        head_dim: Some(256),
        max_positions: 131_072,
    },
    // `Gemma3Config.default_theta["global"]`.
    default_rope_theta: 1_000_000.0,
    gguf_arch: Some("gemma3"),
    ties_embeddings: true,
    ..FamilyRow::new("Gemma3ForCausalLM", "gemma3_text", &Gemma3)
};

impl Family for Gemma3 {
    fn qk_norm(&self, _hf: &HfLlamaConfig) -> bool {
        true
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        if hf.gemma.use_bidirectional_attention == Some(true) {
            return Err(invalid(
                "use_bidirectional_attention",
                "is true (an encoder such as EmbeddingGemma); only the causal decoder runs".into(),
            ));
        }
        let local_theta = hf
            .gemma
            .rope_local_base_freq
            .or_else(|| {
                hf.rope_parameters
                    .as_ref()
                    .and_then(|p| p.local())
                    .and_then(|p| p.rope_theta)
            })
            .unwrap_or(10_000.0);
        gemma_extras(
            hf,
            &Gemma {
                name: "Gemma 3",
                global_every: 6,
                local_theta: Some(local_theta),
                final_softcap: None,
                attn_softcap: None,
            },
        )
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = gemma_hf_keys(config);
        if let Some(theta) = config
            .extras
            .local_attention
            .as_ref()
            .and_then(|l| l.rope_theta)
        {
            keys.insert("rope_local_base_freq", theta.into());
        }
        keys
    }
}

/// What one Gemma generation's configs leave to defaults.
pub(super) struct Gemma {
    /// The family's name in errors, e.g. `Gemma 3`.
    pub name: &'static str,
    /// Without `layer_types`, every `global_every`-th layer attends in full (unless the
    /// config's `sliding_window_pattern` says otherwise).
    pub global_every: usize,
    /// The RoPE base of the sliding layers; `None`: the model's RoPE.
    pub local_theta: Option<f64>,
    /// The final logits' soft-cap where the config has no `final_logit_softcapping`.
    pub final_softcap: Option<f64>,
    /// The attention scores' soft-cap where the config has no `attn_logit_softcapping`.
    pub attn_softcap: Option<f64>,
}

/// The decoder extras of a Gemma layer (Gemma 2 and 3): GeGLU, `1 + w` sandwich norms, scaled
/// embeddings, `query_pre_attn_scalar`, interleaved local and global attention and the
/// soft-caps.
pub(super) fn gemma_extras(
    hf: &HfLlamaConfig,
    gemma: &Gemma,
) -> Result<DecoderExtras, ConfigError> {
    match hf.activation_name() {
        None | Some("gelu_pytorch_tanh") | Some("gelu_tanh") => {}
        Some(other) => {
            return Err(invalid(
                "hidden_activation",
                format!("is `{other}`; {} takes `gelu_pytorch_tanh`", gemma.name),
            ))
        }
    }
    let layers =
        super::sliding_layers(hf, hf.sliding_window_pattern.unwrap_or(gemma.global_every))?;
    Ok(DecoderExtras {
        activation: Activation::GeluTanh,
        norm_offset: true,
        sandwich_norms: true,
        scale_embeddings: true,
        query_pre_attn_scalar: Some(hf.gemma.query_pre_attn_scalar.unwrap_or(256.0)),
        local_attention: Some(LocalAttention {
            window: hf.window_or(None).unwrap_or(4096),
            rope_theta: gemma.local_theta,
            layers,
        }),
        final_softcap: hf
            .gemma
            .final_logit_softcapping
            .unwrap_or(gemma.final_softcap),
        attn_softcap: hf
            .gemma
            .attn_logit_softcapping
            .unwrap_or(gemma.attn_softcap),
        ..DecoderExtras::default()
    })
}

/// The `config.json` keys of a saved Gemma copy that both generations write.
pub(super) fn gemma_hf_keys(config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
    let extras = &config.extras;
    let mut keys = BTreeMap::new();
    keys.insert("hidden_activation", extras.activation.hf_name().into());
    if let Some(scalar) = extras.query_pre_attn_scalar {
        // transformers' config validation takes an integer here.
        let value = if scalar.fract() == 0.0 && scalar.abs() < 1e15 {
            (scalar as i64).into()
        } else {
            scalar.into()
        };
        keys.insert("query_pre_attn_scalar", value);
    }
    if let Some(local) = &extras.local_attention {
        keys.insert("sliding_window", local.window.into());
        keys.insert("layer_types", super::layer_types_json(&local.layers));
    }
    keys.insert("final_logit_softcapping", extras.final_softcap.into());
    keys.insert("attn_logit_softcapping", extras.attn_softcap.into());
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> crate::model::arch::LlamaConfig {
        HfLlamaConfig::from_json(&format!(
            r#"{{"architectures":["Gemma3ForCausalLM"],"hidden_size":640,"intermediate_size":2048,
            "num_hidden_layers":7,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":256,
            "vocab_size":262144,"sliding_window":512,"rope_theta":1000000.0{extra}}}"#
        ))
        .unwrap()
        .resolve()
        .unwrap()
    }

    #[test]
    fn every_sixth_layer_is_global_by_default() {
        let c = config("");
        let local = c.extras.local_attention.as_ref().unwrap();
        assert_eq!(
            local.layers,
            vec![true, true, true, true, true, false, true]
        );
        assert_eq!(c.layer_window(0), Some(512));
        assert_eq!(c.layer_window(5), None);
        // `Gemma3TextConfig`'s context where the config names none.
        assert_eq!(c.context_limit(), 131_072);
        assert!(c.layer_inv_freq(5).is_none());
        // Layer 0 rotates with base 10000: its second frequency is 10000^(-2/256).
        let f = c.layer_inv_freq(0).unwrap();
        assert_eq!(f[1], (1.0 / 10_000f64.powf(2.0 / 256.0)) as f32);
        assert_eq!(c.query_scale(), Some(1.0 / 16.0));
        assert_eq!(c.embed_scale(), Some(640f64.sqrt() as f32));
        // A copy's config.json as transformers' strict config classes take it.
        let json = c.to_hf_json();
        assert_eq!(json["query_pre_attn_scalar"], serde_json::json!(256));
        assert_eq!(json["model_type"], "gemma3_text");
        assert_eq!(json["hidden_activation"], "gelu_pytorch_tanh");
        assert_eq!(json["layer_types"][5], "full_attention");
        assert_eq!(json["rope_local_base_freq"], 10_000.0);
    }

    #[test]
    fn layer_types_and_per_type_rope_parameters_are_read() {
        let c = config(
            r#","layer_types":["full_attention","sliding_attention","sliding_attention",
            "sliding_attention","sliding_attention","sliding_attention","full_attention"],
            "rope_parameters":{"full_attention":{"rope_type":"default","rope_theta":1000000.0},
            "sliding_attention":{"rope_type":"default","rope_theta":5000.0}},
            "query_pre_attn_scalar":144"#,
        );
        let local = c.extras.local_attention.as_ref().unwrap();
        assert!(!local.layers[0]);
        assert_eq!(local.rope_theta, Some(5000.0));
        assert_eq!(c.query_scale(), Some(1.0 / 12.0));
    }

    #[test]
    fn soft_caps_are_read_and_other_activations_are_refused() {
        let c = config(r#","final_logit_softcapping":30.0,"attn_logit_softcapping":null"#);
        assert_eq!(c.extras.final_softcap, Some(30.0));
        assert_eq!(c.extras.attn_softcap, None);
        assert_eq!(c.to_hf_json()["final_logit_softcapping"], 30.0);
        assert!(config("").extras.final_softcap.is_none());
        let e = HfLlamaConfig::from_json(
            r#"{"architectures":["Gemma3ForCausalLM"],"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":1,"num_key_value_heads":1,"vocab_size":4,
            "attn_logit_softcapping":-1.0}"#,
        )
        .unwrap()
        .resolve()
        .unwrap_err();
        assert!(e.to_string().contains("attn_logit_softcapping"), "{e}");
        let e = HfLlamaConfig::from_json(
            r#"{"architectures":["Gemma3ForCausalLM"],"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":1,"num_key_value_heads":1,"vocab_size":4,
            "hidden_activation":"relu"}"#,
        )
        .unwrap()
        .resolve()
        .unwrap_err();
        assert!(e.to_string().contains("gelu_pytorch_tanh"), "{e}");
    }
}
