//! Mistral: Llama's layer with sliding-window attention over `sliding_window` tokens. llama.cpp
//! writes Mistral GGUF files as `llama`, so they load as that family.

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::{HfLlamaConfig, LlamaConfig};

/// `MistralConfig`'s window where a config leaves `sliding_window` out.
const MISTRAL_WINDOW: usize = 4096;

/// `MistralForCausalLM`.
pub struct Mistral;

/// `MistralForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(8),
        head_dim: None,
        max_positions: 131_072,
    },
    ..FamilyRow::new("MistralForCausalLM", "mistral", &Mistral)
};

impl Family for Mistral {
    fn sliding_window(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.window_or(Some(MISTRAL_WINDOW))
    }

    /// A model without a window says so (`null`): transformers would give it 4096.
    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        match config.sliding_window {
            Some(_) => BTreeMap::new(),
            None => BTreeMap::from([("sliding_window", serde_json::Value::Null)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::arch::HfLlamaConfig;

    /// A Mistral config, `sliding_window` as `window` says (`None`: the key left out).
    fn resolve(window: Option<&str>) -> crate::model::arch::LlamaConfig {
        let key = window.map_or(String::new(), |w| format!(r#","sliding_window":{w}"#));
        let json = format!(
            r#"{{"architectures":["MistralForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,"vocab_size":10{key}}}"#
        );
        HfLlamaConfig::from_json(&json).unwrap().resolve().unwrap()
    }

    #[test]
    fn an_absent_window_is_mistral_configs_4096_and_a_null_none() {
        assert_eq!(resolve(None).sliding_window, Some(4096));
        assert_eq!(resolve(Some("null")).sliding_window, None);
        assert_eq!(resolve(Some("16")).sliding_window, Some(16));
    }

    #[test]
    fn a_saved_config_keeps_its_window_or_its_lack_of_one() {
        for window in [Some("null"), Some("16"), None] {
            let c = resolve(window);
            let json = c.to_hf_json();
            assert_eq!(
                json["sliding_window"],
                serde_json::json!(c.sliding_window),
                "{window:?}"
            );
            let back = HfLlamaConfig::from_json(&json.to_string())
                .unwrap()
                .resolve()
                .unwrap();
            assert_eq!(back, c, "{window:?}");
        }
    }
}
