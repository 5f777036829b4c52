//! SmolLM3 (`SmolLM3ForCausalLM`, model type `smollm3`: Hugging Face's SmolLM3-3B): Llama's
//! layer, names and SwiGLU MLP, with NoPE layers, whose queries and keys are not rotated
//! (`no_rope_layers`: 1 rotates, 0 does not; without it every `no_rope_layer_interval`-th layer,
//! by default the fourth, is NoPE), and embeddings tied by default.

use std::collections::BTreeMap;

use super::Family;
use crate::model::config::{invalid, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `SmolLM3ForCausalLM`.
pub struct SmolLm3;

impl Family for SmolLm3 {
    fn hf_class(&self) -> &'static str {
        "SmolLM3ForCausalLM"
    }

    fn model_type(&self) -> &'static str {
        "smollm3"
    }

    /// `SmolLM3Config.default_theta`.
    fn default_rope_theta(&self) -> f64 {
        2_000_000.0
    }

    fn ties_embeddings_by_default(&self) -> bool {
        true
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        // transformers slides the NoPE layers where `use_sliding_window` and a window are
        // both set; no released SmolLM3 does.
        if hf.use_sliding_window == Some(true) && hf.sliding_window.is_some() {
            return Err(invalid(
                "use_sliding_window",
                "is true with a sliding_window; SmolLM3 runs here with full attention only \
                 (set use_sliding_window to false, as the released models have it)"
                    .into(),
            ));
        }
        Ok(DecoderExtras {
            nope_layers: Some(nope_layers(hf)?),
            ..super::llama_layer(hf, "SmolLM3")?
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let rotary: Vec<u8> = (0..config.num_hidden_layers)
            .map(|i| u8::from(config.layer_rotary(i)))
            .collect();
        BTreeMap::from([
            ("no_rope_layers", rotary.into()),
            ("use_sliding_window", false.into()),
            ("mlp_bias", config.extras.mlp_bias.into()),
        ])
    }
}

/// `true` for each NoPE layer: where `no_rope_layers` says 0, else every
/// `no_rope_layer_interval`-th layer (`(i + 1) % interval == 0`, as `SmolLM3Config`).
fn nope_layers(hf: &HfLlamaConfig) -> Result<Vec<bool>, ConfigError> {
    let layers = hf.num_hidden_layers;
    match &hf.no_rope_layers {
        Some(flags) => {
            if flags.len() != layers {
                return Err(invalid(
                    "no_rope_layers",
                    format!("has {} entries for {layers} layers", flags.len()),
                ));
            }
            if let Some(bad) = flags.iter().find(|f| **f > 1) {
                return Err(invalid(
                    "no_rope_layers",
                    format!("holds {bad}; each entry is 1 (rotates) or 0 (NoPE)"),
                ));
            }
            Ok(flags.iter().map(|&f| f == 0).collect())
        }
        None => {
            let interval = hf.no_rope_layer_interval.unwrap_or(4);
            if interval == 0 {
                return Err(invalid("no_rope_layer_interval", "must be positive".into()));
            }
            Ok((0..layers).map(|i| (i + 1) % interval == 0).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::family::Architecture;
    use crate::model::shape::ModelShape;

    /// HuggingFaceTB/SmolLM3-3B's `config.json`, as the hub has it (its 36 flags written out
    /// below).
    fn smollm3_3b() -> String {
        let flags: Vec<String> = (0..36)
            .map(|i| u8::from((i + 1) % 4 != 0).to_string())
            .collect();
        format!(
            r#"{{"architectures":["SmolLM3ForCausalLM"],"attention_bias":false,
            "attention_dropout":0.0,"bos_token_id":null,"eos_token_id":128012,
            "hidden_act":"silu","hidden_size":2048,"initializer_range":0.02,
            "intermediate_size":11008,"max_position_embeddings":65536,"max_window_layers":28,
            "mlp_bias":false,"model_type":"smollm3","no_rope_layer_interval":4,
            "no_rope_layers":[{}],"num_attention_heads":16,"num_hidden_layers":36,
            "num_key_value_heads":4,"pad_token_id":128004,"pretraining_tp":2,
            "rms_norm_eps":1e-06,"rope_scaling":null,"rope_theta":5000000.0,
            "sliding_window":null,"torch_dtype":"bfloat16","use_cache":false,
            "use_sliding_window":false,"vocab_size":128256}}"#,
            flags.join(",")
        )
    }

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn smollm3_3b_has_a_nope_layer_in_four_and_a_tied_head() {
        let c = resolve(&smollm3_3b()).unwrap();
        assert_eq!(c.architecture, Architecture::SmolLm3);
        assert!(c.tie_word_embeddings);
        let rotary: Vec<bool> = (0..36).map(|i| c.layer_rotary(i)).collect();
        assert_eq!(rotary.iter().filter(|r| !**r).count(), 9);
        assert!(rotary[0] && rotary[2] && !rotary[3] && !rotary[35]);
        // 262.7 M tied embeddings + 36 × 78.1 M + the final norm: the hub's "3.08B".
        assert_eq!(ModelShape::from_config(&c).parameters, 3_075_098_624);
    }

    #[test]
    fn the_interval_stands_in_for_the_list_and_the_list_round_trips() {
        let json = smollm3_3b();
        let start = json.find("\"no_rope_layers\"").unwrap();
        let end = start + json[start..].find(']').unwrap() + 2;
        let without = json[..start].to_string() + &json[end..];
        let without = without.replace(
            "\"no_rope_layer_interval\":4",
            "\"no_rope_layer_interval\":3",
        );
        let c = resolve(&without).unwrap();
        assert!(c.layer_rotary(0) && c.layer_rotary(1) && !c.layer_rotary(2) && !c.layer_rotary(5));
        let back = HfLlamaConfig::from_json(&c.to_hf_json().to_string())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn bad_nope_keys_and_sliding_windows_are_refused_by_name() {
        let json = smollm3_3b();
        for (from, to, key) in [
            ("\"no_rope_layers\":[1,", "\"no_rope_layers\":[", "no_rope_layers"),
            ("\"no_rope_layers\":[1,", "\"no_rope_layers\":[2,", "no_rope_layers"),
            (
                "\"sliding_window\":null,\"torch_dtype\":\"bfloat16\",\"use_cache\":false,\n            \"use_sliding_window\":false",
                "\"sliding_window\":8,\"torch_dtype\":\"bfloat16\",\"use_cache\":false,\n            \"use_sliding_window\":true",
                "use_sliding_window",
            ),
            ("\"hidden_act\":\"silu\"", "\"hidden_act\":\"gelu\"", "hidden_act"),
        ] {
            assert!(json.contains(from), "{from}");
            let err = resolve(&json.replacen(from, to, 1)).unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{key}: {err}");
        }
    }
}
