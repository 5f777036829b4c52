//! Granite (`GraniteForCausalLM`, model type `granite`: IBM's Granite 3.x dense models): Llama's
//! layer, names and SwiGLU MLP with four factors of its own, each applied in f32 as
//! transformers applies it:
//! - `embedding_multiplier`: the token embeddings are multiplied by it;
//! - `residual_multiplier`: the attention and MLP outputs are multiplied by it before each
//!   residual add;
//! - `attention_multiplier`: the factor of the attention scores `q·k`, in place of
//!   `head_dim^-0.5` (its default is 1, not `head_dim^-0.5`);
//! - `logits_scaling`: the logits are divided by it.

use std::collections::BTreeMap;

use super::{Family, FamilyRow, GgufMetadata};
use crate::model::arch::{
    positive_number, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig, Multipliers,
};

/// `GraniteForCausalLM`.
pub struct Granite;

/// `GraniteForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    gguf_arch: Some("granite"),
    // llama.cpp's converter permutes Granite's q/k rows as Llama's.
    gguf_interleaves_qk: true,
    ..FamilyRow::new("GraniteForCausalLM", "granite", &Granite)
};

impl Family for Granite {
    /// Without `attention.scale` llama.cpp scales the scores by `head_dim^-0.5`.
    fn read_gguf(&self, _meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        super::gguf_metadata::default_attention_scale(hf);
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        Ok(DecoderExtras {
            multipliers: Some(multipliers(hf)?),
            ..super::llama_layer(hf, "Granite")?
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = multiplier_keys(config);
        keys.insert("mlp_bias", config.extras.mlp_bias.into());
        keys
    }
}

/// Granite's four factors as `hf` gives them, each 1 where absent (Granite's MoE classes
/// read them alike).
pub(super) fn multipliers(hf: &HfLlamaConfig) -> Result<Multipliers, ConfigError> {
    let factor = |key: &str, value: Option<f64>| positive_number(key, value.unwrap_or(1.0));
    Ok(Multipliers {
        embedding: factor("embedding_multiplier", hf.multipliers.embedding_multiplier)?,
        residual: factor("residual_multiplier", hf.multipliers.residual_multiplier)?,
        attention: factor("attention_multiplier", hf.multipliers.attention_multiplier)?,
        logits: factor("logits_scaling", hf.multipliers.logits_scaling)?,
    })
}

/// The `config.json` keys of a saved copy's factors.
pub(super) fn multiplier_keys(config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
    let Some(m) = config.extras.multipliers else {
        return BTreeMap::new();
    };
    BTreeMap::from([
        ("embedding_multiplier", m.embedding.into()),
        ("residual_multiplier", m.residual.into()),
        ("attention_multiplier", m.attention.into()),
        ("logits_scaling", m.logits.into()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::LogitScale;
    use crate::model::arch::ModelShape;

    /// A config of Granite-3.1-8B's shape and factors.
    const GRANITE_8B: &str = r#"{"architectures":["GraniteForCausalLM"],"attention_bias":false,
        "attention_dropout":0.1,"attention_multiplier":0.0078125,"bos_token_id":0,
        "embedding_multiplier":12.0,"eos_token_id":0,"hidden_act":"silu","hidden_size":4096,
        "initializer_range":0.02,"intermediate_size":12800,"logits_scaling":16.0,
        "max_position_embeddings":131072,"mlp_bias":false,"model_type":"granite",
        "num_attention_heads":32,"num_hidden_layers":40,"num_key_value_heads":8,
        "pad_token_id":0,"residual_multiplier":0.22,"rms_norm_eps":1e-05,"rope_scaling":null,
        "rope_theta":10000000.0,"tie_word_embeddings":true,"torch_dtype":"bfloat16",
        "use_cache":true,"vocab_size":49155}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn granite_reads_its_four_factors_and_round_trips() {
        let c = resolve(GRANITE_8B).unwrap();
        assert_eq!(c.architecture, Architecture::Granite);
        assert_eq!(c.embed_scale(), Some(12.0));
        assert_eq!(c.residual().scale, Some(0.22));
        assert_eq!(c.query_scale(), Some(0.0078125));
        assert_eq!(c.logit_scale(), Some(LogitScale::Over(16.0)));
        assert!(c.tie_word_embeddings && !c.extras.mlp_bias);
        // 201.3 M tied embeddings + 40 × 199.2 M + the final norm: Granite-3.1-8B's 8.17 B.
        assert_eq!(ModelShape::from_config(&c).parameters, 8_170_848_256);
        let back = HfLlamaConfig::from_json(&c.to_hf_json().to_string())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn absent_factors_are_one_even_the_attention_scale() {
        let json = GRANITE_8B
            .replace(r#""attention_multiplier":0.0078125,"#, "")
            .replace(r#""logits_scaling":16.0,"#, "");
        let c = resolve(&json).unwrap();
        assert_eq!(
            c.query_scale(),
            Some(1.0),
            "GraniteConfig's default, not head_dim^-0.5"
        );
        assert_eq!(c.logit_scale(), Some(LogitScale::Over(1.0)));
    }

    #[test]
    fn bad_factors_and_activations_are_refused_by_name() {
        for (from, to, key) in [
            (
                "\"logits_scaling\":16.0",
                "\"logits_scaling\":0.0",
                "logits_scaling",
            ),
            (
                "\"residual_multiplier\":0.22",
                "\"residual_multiplier\":-1",
                "residual_multiplier",
            ),
            (
                "\"hidden_act\":\"silu\"",
                "\"hidden_act\":\"gelu\"",
                "hidden_act",
            ),
        ] {
            let err = resolve(&GRANITE_8B.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("`{key}`")), "{key}: {err}");
        }
    }

    #[test]
    fn llama_and_granite_read_mlp_biases() {
        let c = resolve(&GRANITE_8B.replace("\"mlp_bias\":false", "\"mlp_bias\":true")).unwrap();
        assert!(c.extras.mlp_bias);
        assert_eq!(c.to_hf_json()["mlp_bias"], true);
        let llama = resolve(
            r#"{"architectures":["LlamaForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"mlp_bias":true}"#,
        )
        .unwrap();
        assert!(llama.extras.mlp_bias);
        assert_eq!(llama.to_hf_json()["mlp_bias"], true);
    }
}
