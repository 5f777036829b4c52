//! Reading a `config.json` and resolving it, with the family it names, into the [`LlamaConfig`]
//! the model is built from: the family's defaults, checks and RoPE scaling.

use std::path::Path;

use crate::model::arch::*;

use super::FamilyRow;

impl HfLlamaConfig {
    /// Reads and parses `config.json`.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text).map_err(|reason| ConfigError::Parse {
            path: path.display().to_string(),
            reason,
        })
    }

    /// Parses `config.json` text; a key some family spells its own way ([`KEY_ALIASES`]) is
    /// read under the usual name where that is absent (a copy saved by this tool keeps both).
    /// A vision-language config is read as its language model's
    /// ([`crate::model::family::vision_language::text_config`]).
    pub fn from_json(text: &str) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let Some(map) = value.as_object() else {
            return serde_json::from_str(text).map_err(|e| e.to_string());
        };
        if let Some(class) = crate::model::family::vision_language::of_config(map) {
            let text = crate::model::family::vision_language::text_config(map, class)?;
            return Self::from_json(&serde_json::Value::Object(text).to_string())
                .map_err(|e| format!("in `text_config`: {e}"));
        }
        if !KEY_ALIASES
            .iter()
            .any(|(alias, _)| map.contains_key(*alias))
        {
            // Parsed from the text, errors keep their line and column.
            return serde_json::from_str(text).map_err(|e| e.to_string());
        }
        let mut map = map.clone();
        for (alias, key) in KEY_ALIASES {
            let Some(theirs) = map.remove(alias) else {
                continue;
            };
            match map.get(key) {
                Some(ours) if *ours != theirs => {
                    return Err(format!(
                        "`{alias}` ({theirs}) and `{key}` ({ours}) disagree; keep one of them"
                    ))
                }
                Some(_) => {}
                None => {
                    map.insert(key.to_string(), theirs);
                }
            }
        }
        serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| e.to_string())
    }

    /// Resolves defaults and checks every value, producing the config the model is built from.
    pub fn resolve(&self) -> Result<LlamaConfig, ConfigError> {
        let arch_name = self
            .architectures
            .as_ref()
            .and_then(|a| a.first().cloned())
            .or_else(|| self.model_type.clone())
            .unwrap_or_else(|| "<none>".to_string());
        let architecture = Architecture::from_hf_name(&arch_name).ok_or_else(|| {
            ConfigError::UnsupportedArchitecture {
                found: arch_name,
                supported: Architecture::supported_hf_classes(),
            }
        })?;
        let row = architecture.row();
        let family = row.hooks;
        let num_heads = self.num_attention_heads;
        let defaults = row.class_defaults;
        let num_kv_heads = family
            .key_value_heads(self)
            .or(defaults.key_value_heads)
            .unwrap_or(num_heads);
        let intermediate_size = family
            .intermediate_size(self)
            .ok_or_else(|| invalid("intermediate_size", "is missing".to_string()))?;
        positive("hidden_size", self.hidden_size)?;
        positive("intermediate_size", intermediate_size)?;
        positive("num_hidden_layers", self.num_hidden_layers)?;
        positive("num_attention_heads", num_heads)?;
        positive("num_key_value_heads", num_kv_heads)?;
        positive("vocab_size", self.vocab_size)?;
        if !num_heads.is_multiple_of(num_kv_heads) {
            return Err(invalid(
                "num_key_value_heads",
                format!("({num_kv_heads}) must divide num_attention_heads ({num_heads})"),
            ));
        }
        // The family's own checks first: they name its keys (DeepSeek's head width is the sum
        // of two of them).
        let extras = family.extras(self)?;
        let head_dim = match crate::model::family::given_head_dim(row, self) {
            Some(d) => d,
            None => {
                if !self.hidden_size.is_multiple_of(num_heads) {
                    return Err(invalid(
                        "head_dim",
                        "is missing and hidden_size is not a multiple of num_attention_heads"
                            .to_string(),
                    ));
                }
                self.hidden_size / num_heads
            }
        };
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(invalid(
                "head_dim",
                format!("must be even and positive, got {head_dim}"),
            ));
        }
        let rope_theta = positive_number("rope_theta", self.rope_base(row.default_rope_theta))?;
        let rms_norm_eps = positive_number("rms_norm_eps", family.norm_eps(self))?;
        let default_scaling = family.default_rope_scaling();
        let rope_scaling = match self.given_rope_scaling().or(default_scaling.as_ref()) {
            None => RopeScaling::None,
            Some(s) => resolve_rope_scaling(s, self, row)?,
        };
        let biases = family.attention_biases(self);
        if let RopeScaling::LongRope {
            short_factor,
            long_factor,
            ..
        } = &rope_scaling
        {
            let pairs = extras.rotary_dim.unwrap_or(head_dim) / 2;
            for (key, factors) in [("short_factor", short_factor), ("long_factor", long_factor)] {
                if factors.len() != pairs {
                    return Err(invalid(
                        &format!("rope_scaling.{key}"),
                        format!(
                            "has {} factors; the model rotates {pairs} pairs of dimensions a head",
                            factors.len()
                        ),
                    ));
                }
            }
        }
        for (key, cap, taken) in [
            (
                "final_logit_softcapping",
                self.gemma.final_logit_softcapping,
                extras.final_softcap,
            ),
            (
                "attn_logit_softcapping",
                self.gemma.attn_logit_softcapping,
                extras.attn_softcap,
            ),
        ] {
            if cap.flatten().is_some() && taken.is_none() {
                return Err(invalid(
                    key,
                    format!(
                        "is set, and {} does not soft-cap (only Gemma does); remove it or set it to null",
                        architecture.hf_class()
                    ),
                ));
            }
            if let Some(cap) = taken {
                positive_number(key, cap)?;
            }
        }
        if let Some(local) = &extras.local_attention {
            if local.layers.len() != self.num_hidden_layers {
                return Err(invalid(
                    "layer_types",
                    format!(
                        "has {} entries for {} layers",
                        local.layers.len(),
                        self.num_hidden_layers
                    ),
                ));
            }
        }
        Ok(LlamaConfig {
            architecture,
            hidden_size: self.hidden_size,
            intermediate_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: num_heads,
            num_key_value_heads: num_kv_heads,
            head_dim,
            rms_norm_eps,
            rope_theta,
            rope_scaling,
            max_position_embeddings: self
                .max_position_embeddings
                .unwrap_or(defaults.max_positions),
            vocab_size: self.vocab_size,
            tie_word_embeddings: self.tie_word_embeddings.unwrap_or(row.ties_embeddings),
            qkv_bias: biases.qkv,
            o_bias: biases.o,
            sliding_window: family.sliding_window(self),
            qk_norm: family.qk_norm(self),
            bos_token_id: first_id(&self.bos_token_id),
            eos_token_id: first_id(&self.eos_token_id),
            extras,
        })
    }
}

/// The scaling `rope_scaling` (or `rope_parameters`) of `hf`, a config of the family of `row`, describes.
pub(crate) fn resolve_rope_scaling(
    s: &HfRopeScaling,
    hf: &HfLlamaConfig,
    row: &FamilyRow,
) -> Result<RopeScaling, ConfigError> {
    let kind = row.hooks.rope_type(s.type_name().unwrap_or("default"));
    let factor = || {
        s.factor
            .filter(|f| f.is_finite() && *f > 0.0)
            .ok_or_else(|| {
                invalid(
                    "rope_scaling.factor",
                    "must be a positive number".to_string(),
                )
            })
    };
    match kind {
        "default" => Ok(RopeScaling::None),
        "linear" => Ok(RopeScaling::Linear { factor: factor()? }),
        "llama3" => {
            let low = s.low_freq_factor.unwrap_or(1.0);
            let high = s.high_freq_factor.unwrap_or(4.0);
            // Equal factors leave no band between the kept and the divided frequencies (Llama 4
            // Scout's 1 and 1).
            if high < low {
                return Err(invalid(
                    "rope_scaling.high_freq_factor",
                    format!("({high}) must not be below low_freq_factor ({low})"),
                ));
            }
            Ok(RopeScaling::Llama3 {
                factor: factor()?,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: s
                    .original_max_position_embeddings
                    .unwrap_or(8192),
            })
        }
        "yarn" => {
            let factor = factor()?;
            let original = s.original_max_position_embeddings.ok_or_else(|| {
                invalid(
                    "rope_scaling.original_max_position_embeddings",
                    "is missing; YaRN needs the pre-training context length".to_string(),
                )
            })?;
            let attention_factor = match (s.attention_factor, s.mscale, s.mscale_all_dim) {
                (Some(a), _, _) => a,
                (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                    yarn_mscale(factor, m) / yarn_mscale(factor, all)
                }
                _ => yarn_mscale(factor, 1.0),
            };
            Ok(RopeScaling::Yarn {
                factor,
                original_max_position_embeddings: original,
                beta_fast: s.beta_fast.filter(|b| *b != 0.0).unwrap_or(32.0),
                beta_slow: s.beta_slow.filter(|b| *b != 0.0).unwrap_or(1.0),
                attention_factor,
                truncate: s.truncate.unwrap_or(true),
            })
        }
        "longrope" => resolve_long_rope(s, hf, row),
        other => Err(invalid(
            "rope_scaling.rope_type",
            format!(
                "`{other}` is not supported; supported: default, linear, llama3, yarn, longrope"
            ),
        )),
    }
}

/// LongRoPE's scaling as transformers' `_compute_longrope_parameters` reads it: the context
/// length from the top-level `original_max_position_embeddings` (Phi-3's, 4096 where absent)
/// first, then from `rope_scaling`; `factor` given or `max_position_embeddings / original`; the
/// attention factor given or `√(1 + ln factor / ln original)` (1 at a factor of at most 1); one
/// short and one long factor per rotated pair.
fn resolve_long_rope(
    s: &HfRopeScaling,
    hf: &HfLlamaConfig,
    row: &FamilyRow,
) -> Result<RopeScaling, ConfigError> {
    let original = hf
        .original_max_position_embeddings
        .or(row.original_positions)
        .or(s.original_max_position_embeddings)
        .filter(|&o| o > 1)
        .ok_or_else(|| {
            invalid(
                "original_max_position_embeddings",
                "is missing (or under 2); LongRoPE needs the pre-training context length"
                    .to_string(),
            )
        })?;
    let factor = match s.factor {
        Some(f) => positive_number("rope_scaling.factor", f)?,
        None => {
            let positions = hf
                .max_position_embeddings
                .unwrap_or(row.class_defaults.max_positions);
            positions as f64 / original as f64
        }
    };
    let attention_factor = match s.attention_factor {
        Some(a) => positive_number("rope_scaling.attention_factor", a)?,
        None if factor <= 1.0 => 1.0,
        None => (1.0 + factor.ln() / (original as f64).ln()).sqrt(),
    };
    let factors = |key: &str, given: &Option<Vec<f64>>| {
        let given = given.as_ref().ok_or_else(|| {
            invalid(
                &format!("rope_scaling.{key}"),
                "is missing; LongRoPE needs one factor per rotated pair".to_string(),
            )
        })?;
        if let Some(bad) = given.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
            return Err(invalid(
                &format!("rope_scaling.{key}"),
                format!("holds {bad}; every factor must be positive"),
            ));
        }
        Ok(given.clone())
    };
    Ok(RopeScaling::LongRope {
        short_factor: factors("short_factor", &s.short_factor)?,
        long_factor: factors("long_factor", &s.long_factor)?,
        factor,
        original_max_position_embeddings: original,
        attention_factor,
    })
}

/// The first id a config gives (`bos_token_id`, `eos_token_id`: a number or a list).
fn first_id(v: &Option<serde_json::Value>) -> Option<u32> {
    match v {
        Some(serde_json::Value::Number(n)) => n.as_u64().and_then(|x| u32::try_from(x).ok()),
        Some(serde_json::Value::Array(a)) => a
            .first()
            .and_then(|x| x.as_u64())
            .and_then(|x| u32::try_from(x).ok()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smollm_json() -> &'static str {
        r#"{"architectures":["LlamaForCausalLM"],"hidden_size":576,"intermediate_size":1536,
            "num_hidden_layers":30,"num_attention_heads":9,"num_key_value_heads":3,"head_dim":64,
            "rms_norm_eps":1e-5,"rope_theta":100000.0,"vocab_size":49152,"tie_word_embeddings":true,
            "max_position_embeddings":8192,"bos_token_id":1,"eos_token_id":2,"unknown_key":3}"#
    }

    #[test]
    fn resolves_smollm_config() {
        let c = HfLlamaConfig::from_json(smollm_json())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(c.architecture, Architecture::Llama);
        assert_eq!(c.kv_groups(), 3);
        assert_eq!(c.head_dim, 64);
        assert!(c.tie_word_embeddings && !c.qkv_bias);
        assert_eq!(c.rope_scaling, RopeScaling::None);
        assert_eq!(c.eos_token_id, Some(2));
    }

    #[test]
    fn qwen2_has_qkv_bias_and_llama3_scaling_parses() {
        let json = r#"{"architectures":["Qwen2ForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,"vocab_size":10,
            "rope_scaling":{"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,
            "high_freq_factor":4.0,"original_max_position_embeddings":8192}}"#;
        let c = HfLlamaConfig::from_json(json).unwrap().resolve().unwrap();
        assert!(c.qkv_bias && !c.o_bias);
        assert_eq!(c.head_dim, 4);
        assert!(matches!(c.rope_scaling, RopeScaling::Llama3 { factor, .. } if factor == 32.0));
    }

    /// transformers 5 writes the RoPE base and scaling as `rope_parameters`; read as if they
    /// were 500000 and 100000 it would have been the default 10000 (found on a GPU machine: a
    /// folder saved by transformers 5.17 evaluated 2.4 % away from PyTorch's perplexity).
    #[test]
    fn transformers_5_rope_parameters_give_the_base_and_the_scaling() {
        let json = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"vocab_size":10,
            "rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":8.0,
            "low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}}"#;
        let c = HfLlamaConfig::from_json(json).unwrap().resolve().unwrap();
        assert_eq!(c.rope_theta, 500000.0);
        assert!(matches!(c.rope_scaling, RopeScaling::Llama3 { factor, .. } if factor == 8.0));
        let plain = smollm_json().replace(
            r#""rope_theta":100000.0"#,
            r#""rope_parameters":{"rope_type":"default","rope_theta":100000.0}"#,
        );
        let c = HfLlamaConfig::from_json(&plain).unwrap().resolve().unwrap();
        assert_eq!(c.rope_theta, 100000.0);
        assert_eq!(c.rope_scaling, RopeScaling::None);
    }

    #[test]
    fn unknown_architecture_is_refused_by_name() {
        let json = r#"{"architectures":["MptForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"vocab_size":10}"#;
        let err = HfLlamaConfig::from_json(json)
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(err.to_string().contains("`MptForCausalLM`"), "{err}");
    }

    #[test]
    fn kv_heads_must_divide_heads() {
        let json = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":12,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":2,"vocab_size":10}"#;
        let err = HfLlamaConfig::from_json(json)
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(err.to_string().contains("num_key_value_heads"), "{err}");
    }

    #[test]
    fn a_sliding_window_does_not_limit_the_context() {
        let json = r#"{"architectures":["MistralForCausalLM"],"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,"vocab_size":10,
            "max_position_embeddings":32768,"sliding_window":4096}"#;
        let c = HfLlamaConfig::from_json(json).unwrap().resolve().unwrap();
        assert_eq!(c.context_limit(), 32768);
        let c = HfLlamaConfig::from_json(smollm_json())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(c.context_limit(), 8192);
    }

    #[test]
    fn hf_json_round_trips() {
        let c = HfLlamaConfig::from_json(smollm_json())
            .unwrap()
            .resolve()
            .unwrap();
        let back = HfLlamaConfig::from_json(&c.to_hf_json().to_string())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(c, back);
    }

    /// 30 of 44 dimensions: `30 / 44 · 44` is 29.999…, which `int()` truncates to 29.
    #[test]
    fn the_written_rotary_factor_reads_back_to_the_same_dimensions() {
        let mut c = HfLlamaConfig::from_json(smollm_json())
            .unwrap()
            .resolve()
            .unwrap();
        let head_dim = std::hint::black_box(44.0f64);
        assert!(head_dim * (30.0 / head_dim) < 30.0);
        c.head_dim = 44;
        for rotary in (2..=44).step_by(2) {
            c.extras.rotary_dim = Some(rotary);
            assert_eq!((44.0 * c.rotary_factor()) as usize, rotary);
        }
    }
}
