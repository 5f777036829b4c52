//! OLMo (`OlmoForCausalLM`, model type `olmo`: AI2's OLMo-1B-hf, OLMo-7B-hf and the 0424/0724
//! releases): Llama's names, layer and SwiGLU MLP with
//! - LayerNorms with neither gain nor bias (`OlmoLayerNorm`, epsilon 1e-5 whatever the config
//!   says): the checkpoint holds no norm tensors, the decoder gains of one, which a saved copy
//!   leaves out;
//! - queries, keys and values clamped to `±clip_qkv` after their projections, where the config
//!   sets it (OLMo-7B-0424 and 0724: 8).

use std::collections::BTreeMap;

use super::{Family, FamilyRow, GgufMetadata};
use crate::model::arch::{positive_number, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `OlmoForCausalLM`.
pub struct Olmo;

/// `OlmoLayerNorm`'s epsilon, fixed in its code.
const NORM_EPS: f64 = 1e-5;

/// `OlmoForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    // llama.cpp's `olmo` (OLMo 1), its q/k rows permuted for interleaved RoPE.
    gguf_arch: Some("olmo"),
    gguf_interleaves_qk: true,
    ..FamilyRow::new("OlmoForCausalLM", "olmo", &Olmo)
};

impl Family for Olmo {
    /// llama.cpp's clamp of q, k and v (`clip_qkv`).
    fn read_gguf(&self, meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        hf.set_own_key("clip_qkv", meta.f64("attention.clamp_kqv"));
    }

    fn norm_eps(&self, _hf: &HfLlamaConfig) -> f64 {
        NORM_EPS
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, "OLMo")?;
        Ok(DecoderExtras {
            layer_norm: true,
            layer_norm_without_bias: true,
            norms_without_gains: true,
            clip_qkv: hf
                .own_key("clip_qkv")?
                .map(|c| positive_number("clip_qkv", c))
                .transpose()?,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([("clip_qkv", config.extras.clip_qkv.into())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// allenai/OLMo-7B-0424-hf's `config.json`, as the hub has it.
    const OLMO_7B_0424: &str = r#"{"architectures":["OlmoForCausalLM"],
        "attention_bias":false,"attention_dropout":0.0,"bos_token_id":null,"clip_qkv":8.0,
        "eos_token_id":50279,"hidden_act":"silu","hidden_size":4096,"initializer_range":0.02,
        "intermediate_size":11008,"max_position_embeddings":4096,"model_type":"olmo",
        "num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":32,
        "pad_token_id":1,"pretraining_tp":1,"rope_scaling":null,"rope_theta":10000.0,
        "tie_word_embeddings":false,"torch_dtype":"float32","transformers_version":"4.40.0",
        "use_cache":true,"vocab_size":50304}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn olmo_7b_0424_has_gainless_norms_and_clips_qkv() {
        let c = resolve(OLMO_7B_0424).unwrap();
        assert_eq!(c.architecture, Architecture::Olmo);
        let e = &c.extras;
        assert!(e.layer_norm && e.layer_norm_without_bias && e.norms_without_gains);
        assert_eq!((e.clip_qkv, c.rms_norm_eps), (Some(8.0), 1e-5));
        assert!(!c.tie_word_embeddings);
        // No norm parameters: 2 × 50304 × 4096 + 32 × (4 × 4096² + 3 × 4096 × 11008).
        assert_eq!(ModelShape::from_config(&c).parameters, 6_888_095_744);
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
        let unclipped = resolve(&OLMO_7B_0424.replace(r#""clip_qkv":8.0"#, r#""clip_qkv":null"#));
        assert_eq!(unclipped.unwrap().extras.clip_qkv, None);
        let err = resolve(&OLMO_7B_0424.replace(r#""clip_qkv":8.0"#, r#""clip_qkv":0"#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`clip_qkv`"), "{err}");
    }
}
