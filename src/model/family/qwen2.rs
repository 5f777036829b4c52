//! Qwen2: Llama's layer with biases on the q, k and v projections (never on the output
//! projection), whatever `attention_bias` says; sliding-window attention on the layers
//! `layer_types` names, by default those from `max_window_layers` on, where
//! `use_sliding_window` says (no released model does). Qwen3 reads the same keys.

use std::collections::BTreeMap;

use super::{AttentionBiases, ClassDefaults, Family, FamilyRow};
use crate::model::arch::{
    positive, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig, LocalAttention,
};

/// `Qwen2ForCausalLM`.
pub struct Qwen2;

/// `Qwen2Config.max_window_layers` (and Qwen3's) when a config names none.
const DEFAULT_MAX_WINDOW_LAYERS: usize = 28;

/// `Qwen2ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(32),
        head_dim: None,
        max_positions: 32_768,
    },
    gguf_arch: Some("qwen2"),
    ..FamilyRow::new("Qwen2ForCausalLM", "qwen2", &Qwen2)
};

impl Family for Qwen2 {
    fn attention_biases(&self, _hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases {
            qkv: true,
            o: false,
        }
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        qwen_extras(hf, "Qwen2")
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        qwen_hf_keys(config)
    }
}

/// Qwen2's and Qwen3's layer: SwiGLU, and the sliding layers where `use_sliding_window` is
/// true and `sliding_window` set, as `Qwen2Config` reads them: `layer_types` where given, else
/// the layers from `max_window_layers` (28) on. They rotate as the full layers do.
pub(super) fn qwen_extras(hf: &HfLlamaConfig, family: &str) -> Result<DecoderExtras, ConfigError> {
    super::refuse_all_but_silu(hf, family)?;
    let window = match (hf.use_sliding_window, hf.window_or(Some(4096))) {
        (Some(true), Some(window)) => window,
        _ => return Ok(DecoderExtras::default()),
    };
    positive("sliding_window", window)?;
    let layers = match hf.layer_types {
        Some(_) => super::sliding_layers(hf, 1)?,
        None => {
            let first = hf.max_window_layers.unwrap_or(DEFAULT_MAX_WINDOW_LAYERS);
            (0..hf.num_hidden_layers).map(|i| i >= first).collect()
        }
    };
    Ok(DecoderExtras {
        local_attention: layers.contains(&true).then_some(LocalAttention {
            window,
            rope_theta: None,
            layers,
        }),
        ..DecoderExtras::default()
    })
}

/// The sliding layers of a saved Qwen2 or Qwen3 copy, where it has them.
pub(super) fn qwen_hf_keys(config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
    let Some(local) = &config.extras.local_attention else {
        return BTreeMap::new();
    };
    BTreeMap::from([
        ("use_sliding_window", true.into()),
        ("sliding_window", local.window.into()),
        ("layer_types", super::layer_types_json(&local.layers)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen/Qwen2.5-0.5B's `config.json`, as the hub has it.
    const QWEN2_5_0_5B: &str = r#"{"architectures":["Qwen2ForCausalLM"],
        "attention_dropout":0.0,"bos_token_id":151643,"eos_token_id":151643,"hidden_act":"silu",
        "hidden_size":896,"initializer_range":0.02,"intermediate_size":4864,
        "max_position_embeddings":32768,"max_window_layers":24,"model_type":"qwen2",
        "num_attention_heads":14,"num_hidden_layers":24,"num_key_value_heads":2,
        "rms_norm_eps":1e-06,"rope_theta":1000000.0,"sliding_window":32768,
        "tie_word_embeddings":true,"torch_dtype":"bfloat16","transformers_version":"4.40.1",
        "use_cache":true,"use_mrope":false,"use_sliding_window":false,"vocab_size":151936}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    fn windows(c: &LlamaConfig) -> Vec<Option<usize>> {
        (0..c.num_hidden_layers)
            .map(|i| c.layer_window(i))
            .collect()
    }

    #[test]
    fn sliding_layers_only_where_use_sliding_window_says() {
        // Every released config: a window given, not used.
        let c = resolve(QWEN2_5_0_5B).unwrap();
        assert_eq!(c.extras.local_attention, None);
        assert!(windows(&c).iter().all(Option::is_none));
        // Used: the layers from max_window_layers on slide, and rotate as the others.
        let used = QWEN2_5_0_5B
            .replace(
                r#""use_sliding_window":false"#,
                r#""use_sliding_window":true"#,
            )
            .replace(r#""max_window_layers":24"#, r#""max_window_layers":21"#)
            .replace(r#""sliding_window":32768"#, r#""sliding_window":4096"#);
        let c = resolve(&used).unwrap();
        let w = windows(&c);
        assert!(w[..21].iter().all(Option::is_none), "{w:?}");
        assert!(w[21..].iter().all(|w| *w == Some(4096)), "{w:?}");
        assert_eq!(c.layer_inv_freq(23), None);
        // layer_types wins over max_window_layers.
        let types: Vec<&str> = (0..24)
            .map(|i| {
                if i == 3 {
                    "sliding_attention"
                } else {
                    "full_attention"
                }
            })
            .collect();
        let typed = used.replace(
            r#""use_mrope":false"#,
            &format!(
                r#""layer_types":{}"#,
                serde_json::to_string(&types).unwrap()
            ),
        );
        let w = windows(&resolve(&typed).unwrap());
        assert_eq!(w.iter().filter(|w| w.is_some()).count(), 1);
        assert_eq!(w[3], Some(4096));
        // Without a window nothing slides (Qwen2Config's window is None then).
        let none = used.replace(r#""sliding_window":4096"#, r#""sliding_window":null"#);
        assert_eq!(resolve(&none).unwrap().extras.local_attention, None);
    }

    #[test]
    fn sliding_layers_survive_a_saved_copy() {
        let used = QWEN2_5_0_5B
            .replace(
                r#""use_sliding_window":false"#,
                r#""use_sliding_window":true"#,
            )
            .replace(r#""max_window_layers":24"#, r#""max_window_layers":20"#);
        for json in [QWEN2_5_0_5B.to_string(), used] {
            let c = resolve(&json).unwrap();
            let saved = serde_json::to_string(&c.to_hf_json()).unwrap();
            let back = resolve(&saved).unwrap();
            assert_eq!(back, c, "{saved}");
        }
    }
}
