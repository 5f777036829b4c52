//! GPT-Neo (`GPTNeoForCausalLM`, model type `gpt_neo`: EleutherAI's GPT-Neo 125M, 1.3B and
//! 2.7B): GPT-2's pre-norm layer and learned positions ([`super::gpt2`]) with
//! - q, k and v as linears of their own without biases (`attn.attention.q_proj`, …), the output
//!   projection with one (`out_proj`), and plain linears throughout (no `Conv1D`);
//! - attention scores **not** scaled by `head_dim^-0.5` (the decoder's query scale set to 1);
//! - global and local layers by `attention_types` (`[[["global", "local"], 12]]`: alternating),
//!   the local ones seeing the last `window_size` positions (256);
//! - the key names `num_layers` and `num_heads`.

use std::collections::BTreeMap;

use super::{AttentionBiases, Family, FamilyRow};
use crate::model::arch::{
    invalid, positive, Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig,
    LocalAttention,
};

/// `GPTNeoForCausalLM`.
pub struct GptNeo;

/// The decoder's names of a layer's tensors and GPT-Neo's, relative to the layer.
const LAYER_NAMES: [(&str, &str); 8] = [
    ("self_attn.q_proj", "attn.attention.q_proj"),
    ("self_attn.k_proj", "attn.attention.k_proj"),
    ("self_attn.v_proj", "attn.attention.v_proj"),
    ("self_attn.o_proj", "attn.attention.out_proj"),
    ("mlp.up_proj", "mlp.c_fc"),
    ("mlp.down_proj", "mlp.c_proj"),
    ("input_layernorm", "ln_1"),
    ("post_attention_layernorm", "ln_2"),
];

/// `GPTNeoConfig`'s `window_size` when a config names none.
const DEFAULT_WINDOW: usize = 256;

/// Which layers attend locally (`true`), from `attention_types` (`[[kinds, repeats], …]`, each
/// entry's kinds repeated), as `GPTNeoConfig.expand_attention_types_params` expands them;
/// `GPTNeoConfig`'s alternating default where the key is absent.
fn local_layers(hf: &HfLlamaConfig) -> Result<Vec<bool>, ConfigError> {
    let bad = |problem: String| invalid("attention_types", problem);
    let Some(types) = &hf.gpt_neo.attention_types else {
        return Ok((0..hf.num_hidden_layers).map(|i| i % 2 == 1).collect());
    };
    let mut local = Vec::new();
    for entry in types.as_array().into_iter().flatten() {
        let (Some(kinds), Some(repeats)) = (
            entry.get(0).and_then(|k| k.as_array()),
            entry.get(1).and_then(|r| r.as_u64()),
        ) else {
            return Err(bad(format!(
                "has `{entry}`; each entry is `[[\"global\", \"local\"], repeats]`"
            )));
        };
        for _ in 0..repeats {
            for kind in kinds {
                local.push(match kind.as_str() {
                    Some("global") => false,
                    Some("local") => true,
                    _ => return Err(bad(format!("has `{kind}`; expected `global` or `local`"))),
                });
            }
        }
    }
    if local.len() != hf.num_hidden_layers {
        return Err(bad(format!(
            "names {} layers; the model has {} (num_layers)",
            local.len(),
            hf.num_hidden_layers
        )));
    }
    Ok(local)
}

/// `GPTNeoForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    ties_embeddings: true,
    ..FamilyRow::new("GPTNeoForCausalLM", "gpt_neo", &GptNeo)
};

impl Family for GptNeo {
    /// q, k and v without biases, the output projection with one.
    fn attention_biases(&self, _hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases {
            qkv: false,
            o: true,
        }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    /// `intermediate_size`, else four times the hidden width.
    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        super::width_or_four_hidden(hf)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        super::renamed(
            name,
            "transformer",
            "transformer.h",
            &LAYER_NAMES,
            &super::gpt2::MODEL_NAMES,
        )
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_grouped_heads(hf, "GPT-Neo")?;
        let window = hf.gpt_neo.window_size.unwrap_or(DEFAULT_WINDOW);
        positive("window_size", window)?;
        let layers = local_layers(hf)?;
        Ok(DecoderExtras {
            activation: super::gelu_activation(
                hf,
                "activation_function",
                "GPT-Neo",
                Activation::GeluTanh,
            )?,
            layer_norm: true,
            ungated_mlp: true,
            mlp_bias: true,
            learned_positions: true,
            positions_from_row_zero: true,
            // Scores unscaled: `query_pre_attn_scalar^-0.5` with a scalar of 1.
            query_pre_attn_scalar: Some(1.0),
            local_attention: layers.contains(&true).then_some(LocalAttention {
                window,
                rope_theta: None,
                layers,
            }),
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let local = config.extras.local_attention.as_ref();
        let kinds: Vec<&str> = (0..config.num_hidden_layers)
            .map(|i| match local.is_some_and(|l| l.layers[i]) {
                true => "local",
                false => "global",
            })
            .collect();
        BTreeMap::from([
            ("attention_types", serde_json::json!([[kinds, 1]])),
            (
                "window_size",
                local.map_or(DEFAULT_WINDOW, |l| l.window).into(),
            ),
            ("layer_norm_epsilon", config.rms_norm_eps.into()),
            (
                "activation_function",
                config.extras.activation.hf_name().into(),
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// EleutherAI/gpt-neo-125m's `config.json` (its task parameters left out).
    const GPT_NEO_125M: &str = r#"{"activation_function":"gelu_new",
        "architectures":["GPTNeoForCausalLM"],"attention_dropout":0,
        "attention_layers":["global","local","global","local","global","local","global","local",
        "global","local","global","local"],"attention_types":[[["global","local"],6]],
        "bos_token_id":50256,"embed_dropout":0,"eos_token_id":50256,"gradient_checkpointing":false,
        "hidden_size":768,"initializer_range":0.02,"intermediate_size":null,
        "layer_norm_epsilon":1e-05,"max_position_embeddings":2048,"model_type":"gpt_neo",
        "num_heads":12,"num_layers":12,"resid_dropout":0,"summary_activation":null,
        "summary_first_dropout":0.1,"summary_proj_to_labels":true,"summary_type":"cls_index",
        "summary_use_proj":true,"use_cache":true,"vocab_size":50257,"window_size":256}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn gpt_neo_125m_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(GPT_NEO_125M).unwrap();
        assert_eq!(c.architecture, Architecture::GptNeo);
        assert_eq!((c.num_hidden_layers, c.num_attention_heads), (12, 12));
        assert_eq!((c.intermediate_size, c.head_dim), (3072, 64));
        assert!(!c.qkv_bias && c.o_bias && c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.learned_positions && e.layer_norm && e.ungated_mlp && e.mlp_bias);
        assert_eq!(
            (e.position_offset(), e.query_pre_attn_scalar),
            (0, Some(1.0))
        );
        let local = e.local_attention.as_ref().unwrap();
        assert_eq!(local.window, 256);
        assert_eq!(&local.layers[..4], [false, true, false, true]);
        // transformers' `num_parameters()` of GPT-Neo 125M: 125,198,592.
        assert_eq!(ModelShape::from_config(&c).parameters, 125_198_592);
        let json = c.to_hf_json();
        assert_eq!(json["attention_types"][0][0][1], "local");
        assert_eq!(json["window_size"], 256);
    }

    #[test]
    fn names_map_to_gpt_neo_checkpoints() {
        let c = resolve(GPT_NEO_125M).unwrap();
        for (ours, theirs) in [
            (
                "model.layers.3.self_attn.o_proj.bias",
                "transformer.h.3.attn.attention.out_proj.bias",
            ),
            (
                "model.layers.0.mlp.up_proj.weight",
                "transformer.h.0.mlp.c_fc.weight",
            ),
            ("model.embed_positions.weight", "transformer.wpe.weight"),
        ] {
            assert_eq!(GptNeo.checkpoint_name(&c, ours).as_deref(), Some(theirs));
        }
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        for (from, to, key) in [
            (r#"6]]"#, r#"5]]"#, "attention_types"),
            (
                r#""global","local"]"#,
                r#""global","sparse"]"#,
                "attention_types",
            ),
            (r#""window_size":256"#, r#""window_size":0"#, "window_size"),
            (r#""gelu_new""#, r#""silu""#, "activation_function"),
        ] {
            let json = GPT_NEO_125M.replace(from, to);
            assert_ne!(json, GPT_NEO_125M, "{from}");
            let err = resolve(&json).unwrap_err().to_string();
            assert!(err.contains(key), "{to}: {err}");
        }
    }
}
