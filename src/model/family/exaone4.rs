//! EXAONE 4 (`Exaone4ForCausalLM`, model type `exaone4`: LG AI Research's EXAONE 4.0 1.2B and
//! 32B): Llama's names, attention and SwiGLU MLP with
//! - RMSNorms of each query and key head (`q_norm`, `k_norm`, Qwen3's) before RoPE;
//! - no pre-norms: the attention's and the MLP's outputs are normed before each residual add
//!   (`post_attention_layernorm`, `post_feedforward_layernorm`, OLMo 2's layer);
//! - with a `sliding_window` (the 32B), local attention on the layers `layer_types` names (else
//!   on all but every `sliding_window_pattern`-th, written as a count or as `"LLLG"`), and only
//!   those rotate: the global layers are NoPE. Without one (the 1.2B) every layer attends in
//!   full and rotates.

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::{
    positive, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig, LocalAttention,
};

/// `Exaone4ForCausalLM`.
pub struct Exaone4;

/// `Exaone4Config`'s `sliding_window_pattern` when a config with a window names none.
const GLOBAL_EVERY: usize = 4;

/// `Exaone4ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(32),
        ..ClassDefaults::LLAMA
    },
    // llama.cpp's `exaone4` (q/k rows as transformers has them; which layers slide as a bool
    // array).
    gguf_arch: Some("exaone4"),
    ..FamilyRow::new("Exaone4ForCausalLM", "exaone4", &Exaone4)
};

impl Family for Exaone4 {
    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    fn qk_norm(&self, _hf: &HfLlamaConfig) -> bool {
        true
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, "EXAONE 4")?;
        let local = match hf.window_or(Some(4096)) {
            Some(window) => {
                positive("sliding_window", window)?;
                let every = hf.sliding_window_pattern.unwrap_or(GLOBAL_EVERY);
                if hf.layer_types.is_none() {
                    positive("sliding_window_pattern", every)?;
                }
                Some(LocalAttention {
                    window,
                    rope_theta: None,
                    layers: super::sliding_layers(hf, every)?,
                })
            }
            None => None,
        };
        Ok(DecoderExtras {
            sandwich_norms: true,
            post_norms_only: true,
            nope_layers: local.as_ref().map(LocalAttention::full_layers),
            local_attention: local,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        match &config.extras.local_attention {
            Some(local) => BTreeMap::from([
                ("sliding_window", local.window.into()),
                ("layer_types", super::layer_types_json(&local.layers)),
            ]),
            None => BTreeMap::from([
                ("sliding_window", serde_json::Value::Null),
                (
                    "layer_types",
                    super::layer_types_json(&vec![false; config.num_hidden_layers]),
                ),
            ]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// A config of EXAONE-4.0-32B's layout: 64 layers 5,120 wide, 40 heads of 128 over 8 kv
    /// heads, three local layers (window 4,096) to one global, `"LLLG"`.
    const EXAONE_32B: &str = r#"{"architectures":["Exaone4ForCausalLM"],"bos_token_id":1,
        "eos_token_id":361,"head_dim":128,"hidden_act":"silu","hidden_size":5120,
        "intermediate_size":27392,"max_position_embeddings":131072,"model_type":"exaone4",
        "num_attention_heads":40,"num_hidden_layers":64,"num_key_value_heads":8,
        "rms_norm_eps":1e-05,"rope_scaling":{"factor":16.0,"high_freq_factor":4.0,
        "low_freq_factor":1.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},
        "rope_theta":1000000,"sliding_window":4096,"sliding_window_pattern":"LLLG",
        "tie_word_embeddings":false,"vocab_size":102400}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn a_32b_config_slides_three_layers_in_four_and_only_those_rotate() {
        let c = resolve(EXAONE_32B).unwrap();
        assert_eq!(c.architecture, Architecture::Exaone4);
        assert!(c.qk_norm && !c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.sandwich_norms && e.post_norms_only && !e.qk_norm_across_heads);
        let local = e.local_attention.as_ref().unwrap();
        assert_eq!(local.window, 4096);
        assert_eq!(&local.layers[..8], [true, true, true, false].repeat(2));
        let nope = e.nope_layers.as_ref().unwrap();
        assert!(nope.iter().zip(&local.layers).all(|(n, s)| n != s));
        // transformers' `num_parameters()` of this config (the pattern as the count 4, which
        // transformers reads without `layer_types`): 32,003,216,384.
        assert_eq!(ModelShape::from_config(&c).parameters, 32_003_216_384);
        let json = c.to_hf_json();
        assert_eq!(json["layer_types"][3], "full_attention");
        assert_eq!(json["sliding_window"], 4096);
    }

    #[test]
    fn without_a_window_every_layer_attends_in_full_and_rotates() {
        let c =
            resolve(&EXAONE_32B.replace(r#""sliding_window":4096"#, r#""sliding_window":null"#))
                .unwrap();
        assert!(c.extras.local_attention.is_none() && c.extras.nope_layers.is_none());
        assert_eq!(c.to_hf_json()["sliding_window"], serde_json::Value::Null);
        // Without the key, `Exaone4Config`'s window of 4,096.
        let absent = EXAONE_32B.replace(r#""sliding_window":4096,"#, "");
        assert_ne!(absent, EXAONE_32B);
        let c = resolve(&absent).unwrap();
        assert_eq!(c.extras.local_attention.unwrap().window, 4096);
        // The count form of the pattern is read too.
        let c = resolve(&EXAONE_32B.replace(r#""LLLG""#, "2")).unwrap();
        let local = c.extras.local_attention.unwrap();
        assert_eq!(&local.layers[..4], [true, false, true, false]);
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        for (from, to, key) in [
            (r#""silu""#, r#""gelu""#, "hidden_act"),
            (r#""LLLG""#, r#""LGLL""#, "sliding_window_pattern"),
            (
                r#""sliding_window":4096"#,
                r#""sliding_window":0"#,
                "sliding_window",
            ),
        ] {
            let json = EXAONE_32B.replace(from, to);
            let err = match HfLlamaConfig::from_json(&json) {
                Ok(hf) => hf.resolve().unwrap_err().to_string(),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(key), "{to}: {err}");
        }
    }
}
