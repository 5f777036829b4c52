//! Ministral (`MinistralForCausalLM`, model type `ministral`: Ministral-8B-Instruct-2410):
//! Mistral's config class and Llama's layer, bias-free, with the window on the layers
//! `layer_types` names sliding only — by default every layer where `sliding_window` is set,
//! none where it is null — and one RoPE for all layers.

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig, LocalAttention};

/// `MinistralConfig`'s window (`MistralConfig`'s) where a config leaves `sliding_window` out.
const MINISTRAL_WINDOW: usize = 4096;

/// `MinistralForCausalLM`.
pub struct Ministral;

/// `MinistralForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    // `MistralConfig`'s, which `MinistralConfig` extends.
    class_defaults: ClassDefaults {
        key_value_heads: Some(8),
        head_dim: None,
        max_positions: 131_072,
    },
    ..FamilyRow::new("MinistralForCausalLM", "ministral", &Ministral)
};

impl Family for Ministral {
    /// The window lies on the sliding layers alone ([`Family::extras`]), not on every layer.
    fn sliding_window(&self, _hf: &HfLlamaConfig) -> Option<usize> {
        None
    }

    /// The sliding layers of `layer_types` (without it: all of them where there is a window,
    /// as `MinistralConfig` fills it in), seeing `sliding_window` positions; none without a
    /// window, whatever `layer_types` says, as transformers' sliding mask then sees them all.
    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let Some(window) = hf.window_or(Some(MINISTRAL_WINDOW)) else {
            return Ok(DecoderExtras::default());
        };
        let layers = match &hf.layer_types {
            Some(_) => super::sliding_layers(hf, 1)?,
            None => vec![true; hf.num_hidden_layers],
        };
        Ok(DecoderExtras {
            local_attention: Some(LocalAttention {
                window,
                rope_theta: None,
                layers,
            }),
            ..DecoderExtras::default()
        })
    }

    /// `layer_types` and `sliding_window` (null without a window: transformers would read
    /// 4096).
    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        match &config.extras.local_attention {
            Some(local) => BTreeMap::from([
                ("layer_types", super::layer_types_json(&local.layers)),
                ("sliding_window", local.window.into()),
            ]),
            None => BTreeMap::from([("sliding_window", serde_json::Value::Null)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::arch::{HfLlamaConfig, LlamaConfig};

    /// A three-layer Ministral config with `extra` keys.
    fn resolve(extra: &str) -> LlamaConfig {
        let json = format!(
            r#"{{"architectures":["MinistralForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":3,"num_attention_heads":2,"num_key_value_heads":2,"head_dim":4,
            "vocab_size":10{extra}}}"#
        );
        HfLlamaConfig::from_json(&json).unwrap().resolve().unwrap()
    }

    #[test]
    fn the_window_lies_on_the_sliding_layers_and_defaults_as_the_config_class_does() {
        let named = resolve(
            r#","sliding_window":5,"layer_types":["sliding_attention","full_attention","sliding_attention"]"#,
        );
        let local = named.extras.local_attention.clone().unwrap();
        assert_eq!((local.window, local.layers), (5, vec![true, false, true]));
        assert_eq!(named.sliding_window, None);
        let absent = resolve("").extras.local_attention.unwrap();
        assert_eq!((absent.window, absent.layers), (4096, vec![true; 3]));
        assert_eq!(
            resolve(r#","sliding_window":null"#).extras.local_attention,
            None
        );
        let bad = HfLlamaConfig::from_json(
            r#"{"architectures":["MinistralForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,"vocab_size":10,
            "layer_types":["chunked_attention"]}"#,
        )
        .unwrap()
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(bad.contains("layer_types"), "{bad}");
    }

    #[test]
    fn a_saved_config_reads_back_the_same() {
        for extra in [
            r#","sliding_window":5,"layer_types":["full_attention","sliding_attention","full_attention"]"#,
            r#","sliding_window":null"#,
            "",
        ] {
            let c = resolve(extra);
            let back = HfLlamaConfig::from_json(&c.to_hf_json().to_string())
                .unwrap()
                .resolve()
                .unwrap();
            assert_eq!(back, c, "{extra}");
        }
    }
}
