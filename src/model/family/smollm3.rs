//! SmolLM3 (`SmolLM3ForCausalLM`, model type `smollm3`: Hugging Face's SmolLM3-3B): Llama's
//! layer, names and SwiGLU MLP, with NoPE layers, whose queries and keys are not rotated
//! (`no_rope_layers`: 1 rotates, 0 does not; without it every `no_rope_layer_interval`-th layer,
//! by default the fourth, is NoPE), embeddings tied by default, and sliding layers where
//! `layer_types` or `use_sliding_window` say (by default the NoPE layers slide then).

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::{
    invalid, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig, LocalAttention,
};

/// `SmolLM3ForCausalLM`.
pub struct SmolLm3;

/// `SmolLM3ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(4),
        head_dim: None,
        max_positions: 32_768,
    },
    // llama.cpp's `smollm3`, which fixes the NoPE layers at every fourth (the released
    // models' `no_rope_layer_interval`), as this reads a config without `no_rope_layers`.
    gguf_arch: Some("smollm3"),
    // llama.cpp's converter permutes SmolLM3's q/k rows as Llama's.
    gguf_interleaves_qk: true,
    // `SmolLM3Config.default_theta`.
    default_rope_theta: 2_000_000.0,
    ties_embeddings: true,
    ..FamilyRow::new("SmolLM3ForCausalLM", "smollm3", &SmolLm3)
};

impl Family for SmolLm3 {
    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let nope = nope_layers(hf)?;
        Ok(DecoderExtras {
            local_attention: local_attention(hf, &nope)?,
            nope_layers: Some(nope),
            ..super::llama_layer(hf, "SmolLM3")?
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let rotary: Vec<u8> = (0..config.num_hidden_layers)
            .map(|i| u8::from(config.layer_rotary(i)))
            .collect();
        let local = &config.extras.local_attention;
        let mut keys = BTreeMap::from([
            ("no_rope_layers", rotary.into()),
            ("use_sliding_window", local.is_some().into()),
            ("mlp_bias", config.extras.mlp_bias.into()),
        ]);
        if let Some(local) = local {
            keys.insert("sliding_window", local.window.into());
            keys.insert("layer_types", super::layer_types_json(&local.layers));
        }
        keys
    }
}

/// The sliding layers, as `SmolLM3Config` and the masks transformers builds from it read
/// them: those `layer_types` names, else the NoPE layers where `use_sliding_window` is true and
/// a window set (no released model slides). They rotate as they would without a window.
fn local_attention(
    hf: &HfLlamaConfig,
    nope: &[bool],
) -> Result<Option<LocalAttention>, ConfigError> {
    let layers = match (&hf.layer_types, hf.use_sliding_window, hf.window_or(None)) {
        (Some(_), _, _) => super::sliding_layers(hf, 1)?,
        (None, Some(true), Some(_)) => nope.to_vec(),
        _ => return Ok(None),
    };
    if !layers.contains(&true) {
        return Ok(None);
    }
    match hf.window_or(None) {
        Some(window) if window > 0 => Ok(Some(LocalAttention {
            window,
            rope_theta: None,
            layers,
        })),
        _ => Err(invalid(
            "sliding_window",
            "must be a positive window where layer_types names sliding layers".into(),
        )),
    }
}

/// `true` for each NoPE layer: where `no_rope_layers` says 0, else every
/// `no_rope_layer_interval`-th layer (`(i + 1) % interval == 0`, as `SmolLM3Config`).
pub(crate) fn nope_layers(hf: &HfLlamaConfig) -> Result<Vec<bool>, ConfigError> {
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
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

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

    /// SmolLM3-3B's config with a window of 8 used, and the `layer_types` (replacing
    /// `pretraining_tp`) given.
    fn sliding(layer_types: Option<&str>) -> String {
        let json = smollm3_3b()
            .replace("\"sliding_window\":null", "\"sliding_window\":8")
            .replace(
                "\"use_sliding_window\":false",
                "\"use_sliding_window\":true",
            );
        match layer_types {
            Some(types) => {
                json.replace("\"pretraining_tp\":2", &format!("\"layer_types\":{types}"))
            }
            None => json,
        }
    }

    #[test]
    fn sliding_layers_are_the_nope_layers_or_those_layer_types_names() {
        let c = resolve(&sliding(None)).unwrap();
        for i in 0..36 {
            let window = (!c.layer_rotary(i)).then_some(8);
            assert_eq!(c.layer_window(i), window, "layer {i}");
        }
        let types: Vec<&str> = (0..36)
            .map(|i| {
                if i == 0 {
                    "sliding_attention"
                } else {
                    "full_attention"
                }
            })
            .collect();
        let c = resolve(&sliding(Some(&serde_json::to_string(&types).unwrap()))).unwrap();
        assert_eq!(c.layer_window(0), Some(8));
        assert!(
            c.layer_rotary(0),
            "a sliding layer rotates where no_rope_layers says so"
        );
        assert!((1..36).all(|i| c.layer_window(i).is_none()));
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
        // A window in a config that does not use it changes nothing (the released config).
        let unused = smollm3_3b().replace("\"sliding_window\":null", "\"sliding_window\":8");
        assert_eq!(resolve(&unused).unwrap().extras.local_attention, None);
    }

    #[test]
    fn bad_nope_keys_and_sliding_windows_are_refused_by_name() {
        let json = smollm3_3b();
        let all_sliding = serde_json::to_string(&vec!["sliding_attention"; 36]).unwrap();
        let no_window =
            sliding(Some(&all_sliding)).replace("\"sliding_window\":8", "\"sliding_window\":null");
        for (json, from, to, key) in [
            (
                &json,
                "\"no_rope_layers\":[1,",
                "\"no_rope_layers\":[",
                "no_rope_layers",
            ),
            (
                &json,
                "\"no_rope_layers\":[1,",
                "\"no_rope_layers\":[2,",
                "no_rope_layers",
            ),
            (&no_window, "", "", "sliding_window"),
            (
                &json,
                "\"hidden_act\":\"silu\"",
                "\"hidden_act\":\"gelu\"",
                "hidden_act",
            ),
        ] {
            assert!(json.contains(from), "{from}");
            let err = resolve(&json.replacen(from, to, 1))
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("`{key}`")), "{key}: {err}");
        }
    }
}
