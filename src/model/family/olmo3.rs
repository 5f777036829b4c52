//! OLMo 3 (`Olmo3ForCausalLM`, model type `olmo3`: AI2's Olmo 3 7B and 32B): OLMo 2's layer
//! ([`super::olmo2`]: output norms alone, q/k norms across the heads) with
//! - sliding-window attention on three layers of four (`layer_types`, by default every fourth
//!   layer full), a window of `sliding_window` (4096) positions;
//! - RoPE per layer type (`rope_parameters.full_attention`, `.sliding_attention`): the full
//!   layers take the model's base and scaling (YaRN in the long-context releases), the
//!   sliding layers plain RoPE at their own base — which, as transformers reads a config
//!   without `rope_parameters`, is 500000 whatever the top-level `rope_theta` says.

use std::collections::BTreeMap;

use super::{Family, FamilyRow};
use crate::model::arch::{
    invalid, ConfigError, DecoderExtras, HfLlamaConfig, HfRopeScaling, LlamaConfig, LocalAttention,
};

/// `Olmo3ForCausalLM`.
pub struct Olmo3;

/// `Olmo3Config.default_theta`: the sliding layers' base when `rope_parameters` names none.
const DEFAULT_THETA: f64 = 500_000.0;

/// Without `layer_types`, every fourth layer attends in full (`Olmo3Config`).
const GLOBAL_EVERY: usize = 4;

/// `Olmo3ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    // `Olmo3Config.default_theta`.
    default_rope_theta: DEFAULT_THETA,
    ..FamilyRow::new("Olmo3ForCausalLM", "olmo3", &Olmo3)
};

impl Family for Olmo3 {
    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    fn qk_norm(&self, _hf: &HfLlamaConfig) -> bool {
        true
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let local = hf.rope_parameters.as_ref().and_then(|p| p.local());
        if let Some(kind) = local.and_then(HfRopeScaling::type_name) {
            if kind != "default" {
                return Err(invalid(
                    "rope_parameters.sliding_attention.rope_type",
                    format!("is `{kind}`; OLMo 3's sliding layers take plain RoPE (`default`)"),
                ));
            }
        }
        let layers = super::sliding_layers(hf, GLOBAL_EVERY)?;
        Ok(DecoderExtras {
            local_attention: Some(LocalAttention {
                window: hf.window_or(None).unwrap_or(4096),
                rope_theta: Some(local.and_then(|l| l.rope_theta).unwrap_or(DEFAULT_THETA)),
                layers,
            }),
            ..super::olmo2::olmo2_layer(hf, "OLMo 3")?
        })
    }

    /// `layer_types`, `sliding_window` and RoPE per layer type, so that transformers reads
    /// the sliding layers' base back (it would take 500000 from a top-level `rope_theta`).
    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = BTreeMap::new();
        let Some(local) = &config.extras.local_attention else {
            return keys;
        };
        keys.insert("layer_types", super::layer_types_json(&local.layers));
        keys.insert("sliding_window", local.window.into());
        let mut full = match config.rope_scaling_json() {
            serde_json::Value::Object(scaling) => scaling,
            _ => serde_json::Map::from_iter([("rope_type".to_string(), "default".into())]),
        };
        full.insert("rope_theta".into(), config.rope_theta.into());
        keys.insert(
            "rope_parameters",
            serde_json::json!({
                "full_attention": full,
                "sliding_attention": { "rope_type": "default", "rope_theta": local.rope_theta.unwrap_or(config.rope_theta) },
            }),
        );
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;
    use crate::model::arch::RopeScaling;

    /// A config in the form of the Olmo 3 7B release: the old top-level `rope_theta` and
    /// `rope_scaling` (YaRN ×8 over 8192 positions), 32 layers of which every fourth attends
    /// in full.
    fn olmo_3_7b() -> String {
        let types: Vec<&str> = (0..32)
            .map(|i| {
                if (i + 1) % 4 == 0 {
                    "full_attention"
                } else {
                    "sliding_attention"
                }
            })
            .collect();
        format!(
            r#"{{"architectures":["Olmo3ForCausalLM"],"attention_bias":false,"eos_token_id":100257,
            "hidden_act":"silu","hidden_size":4096,"intermediate_size":11008,
            "layer_types":{types},"max_position_embeddings":65536,"model_type":"olmo3",
            "num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":32,
            "pad_token_id":100277,"rms_norm_eps":1e-06,"rope_theta":500000,
            "rope_scaling":{{"attention_factor":1.2079441541679836,"beta_fast":32,"beta_slow":1,
            "factor":8.0,"original_max_position_embeddings":8192,"rope_type":"yarn"}},
            "sliding_window":4096,"tie_word_embeddings":false,"vocab_size":100278}}"#,
            types = serde_json::to_string(&types).unwrap()
        )
    }

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn olmo_3_resolves_to_sliding_layers_and_yarn_on_the_full_ones() {
        let c = resolve(&olmo_3_7b()).unwrap();
        assert_eq!(c.architecture, Architecture::Olmo3);
        let e = &c.extras;
        assert!(e.post_norms_only && e.qk_norm_across_heads && c.qk_norm);
        let local = e.local_attention.as_ref().unwrap();
        assert_eq!((local.window, local.rope_theta), (4096, Some(500_000.0)));
        assert_eq!(local.layers.iter().filter(|s| **s).count(), 24);
        assert!(!local.layers[31] && local.layers[30]);
        assert_eq!((c.layer_window(0), c.layer_window(3)), (Some(4096), None));
        assert!(matches!(
            c.rope_scaling,
            RopeScaling::Yarn { factor, original_max_position_embeddings: 8192, .. } if factor == 8.0
        ));
        assert_eq!(c.rope_attention_factor(), 1.207_944_2);
        // The sliding layers rotate unscaled, with their own tables.
        assert!(c.layer_inv_freq(0).is_some() && c.layer_inv_freq(3).is_none());
        // OLMo 2's 7B layout with Olmo 3's vocabulary.
        assert_eq!(ModelShape::from_config(&c).parameters, 7_298_011_136);
        // A saved copy names the RoPE of each layer type, and reads back the same.
        let json = c.to_hf_json();
        assert_eq!(
            json["rope_parameters"]["full_attention"]["rope_type"],
            "yarn"
        );
        assert_eq!(
            json["rope_parameters"]["sliding_attention"]["rope_theta"],
            500_000.0
        );
        assert_eq!(resolve(&json.to_string()).unwrap(), c);
    }

    #[test]
    fn default_layer_types_and_refusals() {
        let no_types = olmo_3_7b().replace(r#""layer_types":["#, r#""unused":["#);
        let c = resolve(&no_types).unwrap();
        let local = c.extras.local_attention.unwrap();
        assert_eq!(local.layers[..4], [true, true, true, false]);
        let scaled_sliding = r#"{"architectures":["Olmo3ForCausalLM"],"hidden_size":64,
            "intermediate_size":96,"num_hidden_layers":4,"num_attention_heads":4,"vocab_size":32,
            "rope_parameters":{"full_attention":{"rope_type":"default","rope_theta":10000.0},
            "sliding_attention":{"rope_type":"linear","factor":2.0,"rope_theta":10000.0}}}"#;
        let err = resolve(scaled_sliding).unwrap_err().to_string();
        assert!(err.contains("sliding_attention.rope_type"), "{err}");
        let yarn_without_context =
            olmo_3_7b().replace(r#""original_max_position_embeddings":8192,"#, "");
        let err = resolve(&yarn_without_context).unwrap_err().to_string();
        assert!(err.contains("original_max_position_embeddings"), "{err}");
    }
}
