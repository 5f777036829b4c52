//! OLMo 2 (`Olmo2ForCausalLM`, model type `olmo2`: AI2's OLMo-2 1B, 7B, 13B and 32B): Llama's
//! names, SwiGLU MLP and rotary attention, with
//! - no norms before attention and the MLP: both read the residual stream itself;
//! - RMSNorms on the attention and MLP outputs before each residual add
//!   (`post_attention_layernorm`, `post_feedforward_layernorm`, plain `w` gains);
//! - q/k RMSNorms over all heads of a position (`q_norm` `[heads · head_dim]`, `k_norm`
//!   `[kv_heads · head_dim]`), after the projections and before RoPE;
//! - an untied head.

use super::{Family, FamilyRow};
use crate::model::arch::{invalid, ConfigError, DecoderExtras, HfLlamaConfig};

/// `Olmo2ForCausalLM`.
pub struct Olmo2;

/// `Olmo2ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    // llama.cpp's `olmo2`, q/k rows as transformers has them (no permutation).
    gguf_arch: Some("olmo2"),
    ..FamilyRow::new("Olmo2ForCausalLM", "olmo2", &Olmo2)
};

impl Family for Olmo2 {
    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    fn qk_norm(&self, _hf: &HfLlamaConfig) -> bool {
        true
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        // OLMo 3's sliding layers (llama.cpp writes OLMo 3 as `olmo2` with a window) would
        // attend in full here.
        if hf.window_or(None).is_some() {
            return Err(invalid(
                "sliding_window",
                "is set; OLMo 2 attends in full (an OLMo 3 GGUF? its sliding layers need \
                 OLMo 3's Hugging Face folder)"
                    .into(),
            ));
        }
        olmo2_layer(hf, "OLMo 2")
    }
}

/// The decoder extras of OLMo 2's layer (OLMo 3's too): output norms alone, q/k norms across
/// the heads, SwiGLU.
pub(super) fn olmo2_layer(hf: &HfLlamaConfig, family: &str) -> Result<DecoderExtras, ConfigError> {
    super::refuse_all_but_silu(hf, family)?;
    Ok(DecoderExtras {
        sandwich_norms: true,
        post_norms_only: true,
        qk_norm_across_heads: true,
        ..DecoderExtras::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::LlamaConfig;
    use crate::model::arch::ModelShape;

    /// allenai/OLMo-2-1124-7B's `config.json`, as the hub has it.
    const OLMO_2_7B: &str = r#"{"architectures":["Olmo2ForCausalLM"],"attention_bias":false,
        "attention_dropout":0.0,"eos_token_id":100257,"hidden_act":"silu","hidden_size":4096,
        "initializer_range":0.02,"intermediate_size":11008,"max_position_embeddings":4096,
        "model_type":"olmo2","num_attention_heads":32,"num_hidden_layers":32,
        "num_key_value_heads":32,"pad_token_id":100277,"rms_norm_eps":1e-06,
        "rope_scaling":null,"rope_theta":500000,"tie_word_embeddings":false,
        "torch_dtype":"float32","transformers_version":"4.47.0.dev0","use_cache":true,
        "vocab_size":100352}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn olmo_2_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(OLMO_2_7B).unwrap();
        assert_eq!(c.architecture, Architecture::Olmo2);
        assert_eq!(
            (c.head_dim, c.rms_norm_eps, c.rope_theta),
            (128, 1e-6, 500_000.0)
        );
        assert!(c.qk_norm && !c.qkv_bias && !c.o_bias && !c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.sandwich_norms && e.post_norms_only && e.qk_norm_across_heads);
        assert!(!e.norm_offset && !e.layer_norm && !e.scale_embeddings);
        // OLMo-2 7B's 7.30 B by its layout: 32 layers of 202,391,552 (two output norms and
        // 4096-wide q/k norms, no pre-norms), the final norm, the untied embeddings and head.
        assert_eq!(ModelShape::from_config(&c).parameters, 7_298_617_344);
        assert_eq!(resolve(&c.to_hf_json().to_string()).unwrap(), c);
    }

    #[test]
    fn another_activation_is_refused_by_name() {
        let json = OLMO_2_7B.replace(r#""hidden_act":"silu""#, r#""hidden_act":"gelu""#);
        let err = resolve(&json).unwrap_err().to_string();
        assert!(
            err.contains("hidden_act") && err.contains("OLMo 2"),
            "{err}"
        );
    }
}
