//! Gemma (`GemmaForCausalLM`, model type `gemma`: Gemma 2B and 7B, CodeGemma, Gemma 1.1):
//! Llama's layer with
//! - RMSNorms in the `1 + w` form, computed in f32;
//! - a GELU-tanh gated MLP (the released configs say `hidden_act: "gelu"`, which transformers
//!   reads as the tanh approximation, as Google meant it);
//! - token embeddings multiplied by `√hidden`;
//! - a head tied to the embeddings;
//! - queries scaled by `head_dim^-0.5`, with `head_dim` (256) apart from `hidden / heads` in
//!   Gemma 7B.
//!
//! Gemma 2 and 3 ([`super::gemma2`], [`super::gemma3`]) add output norms, soft-caps and
//! sliding layers to this layer. GGUF files of architecture `gemma` load too (llama.cpp stores
//! the norms as `1 + w`).

use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::{invalid, Activation, ConfigError, DecoderExtras, HfLlamaConfig};

/// `GemmaForCausalLM`.
pub struct Gemma;

/// `GemmaForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(16),
        head_dim: Some(256),
        max_positions: 8192,
    },
    gguf_arch: Some("gemma"),
    ties_embeddings: true,
    ..FamilyRow::new("GemmaForCausalLM", "gemma", &Gemma)
};

impl Family for Gemma {
    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        // `hidden_act` is what transformers reads; Gemma 1.1's configs add a
        // `hidden_activation` that says the same.
        let name = hf.hidden_act.as_deref().or(hf.hidden_activation.as_deref());
        match name {
            None | Some("gelu" | "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast") => {}
            Some(other) => {
                return Err(invalid(
                    "hidden_act",
                    format!("is `{other}`; Gemma takes `gelu` (read as `gelu_pytorch_tanh`)"),
                ))
            }
        }
        Ok(DecoderExtras {
            activation: Activation::GeluTanh,
            norm_offset: true,
            scale_embeddings: true,
            ..DecoderExtras::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::LlamaConfig;
    use crate::model::arch::ModelShape;

    /// google/gemma-7b's `config.json`, as the hub has it.
    const GEMMA_7B: &str = r#"{"architectures":["GemmaForCausalLM"],"attention_bias":false,
        "attention_dropout":0.0,"bos_token_id":2,"eos_token_id":1,"head_dim":256,
        "hidden_act":"gelu","hidden_size":3072,"initializer_range":0.02,
        "intermediate_size":24576,"max_position_embeddings":8192,"model_type":"gemma",
        "num_attention_heads":16,"num_hidden_layers":28,"num_key_value_heads":16,
        "pad_token_id":0,"rms_norm_eps":1e-06,"rope_scaling":null,"rope_theta":10000.0,
        "torch_dtype":"bfloat16","transformers_version":"4.38.0.dev0","use_cache":true,
        "vocab_size":256000}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn gemma_7b_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(GEMMA_7B).unwrap();
        assert_eq!(c.architecture, Architecture::Gemma);
        assert_eq!((c.head_dim, c.num_key_value_heads), (256, 16));
        assert!(
            c.tie_word_embeddings,
            "tied unless the config says otherwise"
        );
        let e = &c.extras;
        assert_eq!(
            e.activation,
            Activation::GeluTanh,
            "`gelu` is the tanh GELU"
        );
        assert!(e.norm_offset && e.scale_embeddings);
        assert!(!e.sandwich_norms && e.local_attention.is_none() && !c.qk_norm);
        assert_eq!(c.query_scale(), None, "head_dim^-0.5");
        assert_eq!(c.embed_scale(), Some(3072f64.sqrt() as f32));
        // Gemma 7B's 8.54 B: 28 layers of 276,830,208, the final norm and the embeddings.
        assert_eq!(ModelShape::from_config(&c).parameters, 8_537_680_896);
        let json = c.to_hf_json();
        assert_eq!(json["hidden_act"], "gelu_pytorch_tanh");
        assert_eq!(resolve(&json.to_string()).unwrap(), c);
    }

    #[test]
    fn other_activations_are_refused_by_name() {
        let e = resolve(&GEMMA_7B.replace(r#""hidden_act":"gelu""#, r#""hidden_act":"silu""#))
            .unwrap_err();
        assert!(e.to_string().contains("hidden_act"), "{e}");
        // Gemma 1.1 names the activation twice.
        let c = resolve(&GEMMA_7B.replace(
            r#""hidden_act":"gelu""#,
            r#""hidden_act":"gelu","hidden_activation":"gelu_pytorch_tanh""#,
        ))
        .unwrap();
        assert_eq!(c.extras.activation, Activation::GeluTanh);
    }
}
