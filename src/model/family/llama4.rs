//! Llama 4 (`Llama4ForCausalLM`, model type `llama4_text`: the language model of Llama 4 Scout
//! and Maverick, whose released checkpoints are `Llama4ForConditionalGeneration`,
//! [`crate::model::family::vision_language`]):
//! - attention ([`crate::model::decoder`]) with RoPE on neighbouring pairs on the
//!   layers `no_rope_layers` marks 1 (by default three of every four) and none on the others
//!   (NoPE); the rotating layers attend within chunks of `attention_chunk_size` (8192) and scale
//!   queries and keys to unit RMS after RoPE (`use_qk_norm`); the NoPE layers attend in full
//!   with a query temperature by position (`attn_temperature_tuning`, `floor_scale`,
//!   `attn_scale`);
//! - on the layers `moe_layers` names (every `interleave_moe_layer_step`-th), `num_local_experts`
//!   SwiGLU experts of `intermediate_size`, stacked in 3-D tensors
//!   (`feed_forward.experts.gate_up_proj`, gate then up, and `down_proj`), each token going to
//!   its `num_experts_per_tok` best by router logit with the logit's sigmoid scaling the expert's
//!   input ([`crate::model::arch::Experts::scaled_inputs`]), beside an ungated shared expert of
//!   `intermediate_size`; the other layers one SwiGLU MLP of `intermediate_size_mlp`;
//! - the layer's modules under `feed_forward` (`feed_forward.router` the router).

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::ExpertStacks;
use crate::model::arch::{
    invalid, positive_number, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig,
};
use crate::model::arch::{Experts, SigmoidRouting};
use crate::model::arch::{Llama4Attention, QueryTemperature};

/// `Llama4ForCausalLM`.
pub struct Llama4;

/// `Llama4TextConfig`'s `attention_chunk_size`.
const CHUNK: usize = 8192;

/// `Llama4ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(8),
        head_dim: Some(128),
        max_positions: 131_072,
    },
    // `Llama4TextConfig.default_theta`.
    default_rope_theta: 500_000.0,
    expert_stacks: Some(ExpertStacks {
        module: "feed_forward.experts",
        gate_up: "feed_forward.experts.gate_up_proj",
        down: "feed_forward.experts.down_proj",
        halves: true,
        out_major: false,
    }),
    ..FamilyRow::new("Llama4ForCausalLM", "llama4_text", &Llama4)
};

impl Family for Llama4 {
    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    /// The dense layers' width, `intermediate_size_mlp` (default 16384); the experts' is
    /// `intermediate_size`.
    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.experts.intermediate_size_mlp.or(Some(16384))
    }

    /// The layer's MLP is `feed_forward` (its router `feed_forward.router`).
    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        if let Some(layer) = name.strip_suffix(".mlp.gate.weight") {
            return Some(format!("{layer}.feed_forward.router.weight"));
        }
        name.contains(".mlp.")
            .then(|| name.replacen(".mlp.", ".feed_forward.", 1))
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, "Llama 4")?;
        let nope = super::smollm3::nope_layers(&HfLlamaConfig {
            // An empty list is the default's, as `Llama4TextConfig` reads it.
            no_rope_layers: hf.no_rope_layers.clone().filter(|l| !l.is_empty()),
            ..hf.clone()
        })?;
        let chunk_size = match hf.chunked.attention_chunk_size {
            None => Some(CHUNK),
            Some(size) => size,
        };
        if chunk_size == Some(0) {
            return Err(invalid("attention_chunk_size", "must be positive".into()));
        }
        let chunked_layers = chunked_layers(hf, &nope, chunk_size.is_some())?;
        let temperature = match hf.chunked.attn_temperature_tuning.unwrap_or(true) {
            true => Some(QueryTemperature {
                floor_scale: positive_number(
                    "floor_scale",
                    hf.chunked.floor_scale.unwrap_or(8192.0),
                )?,
                attn_scale: hf.chunked.attn_scale.unwrap_or(0.1),
            }),
            false => None,
        };
        Ok(DecoderExtras {
            interleaved_rotary: true,
            nope_layers: Some(nope),
            experts: experts(hf)?,
            llama4_attention: Some(Llama4Attention {
                chunk_size: chunk_size.unwrap_or(CHUNK),
                chunked_layers,
                unit_qk_norm: hf.use_qk_norm.unwrap_or(true),
                temperature,
            }),
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let layers = config.num_hidden_layers;
        let rotary: Vec<u8> = (0..layers)
            .map(|i| u8::from(config.layer_rotary(i)))
            .collect();
        let moe_layers: Vec<usize> = (0..layers)
            .filter(|&i| config.layer_experts(i).is_some())
            .collect();
        let mut keys = BTreeMap::from([
            ("intermediate_size_mlp", config.intermediate_size.into()),
            ("no_rope_layers", rotary.into()),
            ("moe_layers", moe_layers.into()),
        ]);
        if let Some(experts) = config.extras.experts {
            keys.extend([
                ("intermediate_size", experts.width.into()),
                ("num_local_experts", experts.count.into()),
                ("num_experts_per_tok", experts.per_token.into()),
                ("interleave_moe_layer_step", experts.layer_step.into()),
            ]);
        }
        if let Some(a) = &config.extras.llama4_attention {
            let types: Vec<&str> = a
                .chunked_layers
                .iter()
                .map(|&c| match c {
                    true => "chunked_attention",
                    false => "full_attention",
                })
                .collect();
            keys.extend([
                ("attention_chunk_size", a.chunk_size.into()),
                ("layer_types", types.into()),
                ("use_qk_norm", a.unit_qk_norm.into()),
                ("attn_temperature_tuning", a.temperature.is_some().into()),
            ]);
            if let Some(t) = a.temperature {
                keys.extend([
                    ("floor_scale", t.floor_scale.into()),
                    ("attn_scale", t.attn_scale.into()),
                ]);
            }
        }
        keys
    }
}

/// The experts of a Llama 4 config: `None` where no layer has them (`moe_layers` empty), else
/// on every `interleave_moe_layer_step`-th layer (the layers `moe_layers` names, which must be
/// those), the sigmoid of the best logits scaling their inputs.
fn experts(hf: &HfLlamaConfig) -> Result<Option<Experts>, ConfigError> {
    let layers = hf.num_hidden_layers;
    let step = match &hf.experts.moe_layers {
        Some(moe) if moe.is_empty() => return Ok(None),
        Some(moe) => {
            let step = moe[0] + 1;
            let every: Vec<usize> = (step - 1..layers).step_by(step).collect();
            if *moe != every {
                return Err(invalid(
                    "moe_layers",
                    format!(
                        "is {moe:?}; this tool runs experts on every n-th layer \
                         (interleave_moe_layer_step n: layers n-1, 2n-1, …), which these are not"
                    ),
                ));
            }
            step
        }
        None => match hf.experts.interleave_moe_layer_step.unwrap_or(1) {
            0 => {
                return Err(invalid(
                    "interleave_moe_layer_step",
                    "must be positive".into(),
                ))
            }
            step => step,
        },
    };
    let experts = super::checked_experts(
        Experts {
            normalize: false,
            // The sigmoids return in the model's type.
            round_weights: true,
            shared: Some(hf.intermediate_size.unwrap_or(8192)),
            shared_ungated: true,
            sigmoid: Some(SigmoidRouting::LLAMA4),
            layer_step: step,
            scaled_inputs: true,
            ..Experts::softmax(
                hf.experts.num_local_experts.unwrap_or(16),
                hf.experts.num_experts_per_tok.unwrap_or(1),
                hf.intermediate_size.unwrap_or(8192),
            )
        },
        "num_local_experts",
    )?;
    Ok(Some(experts))
}

/// Per layer, whether it attends within chunks: as `layer_types` names it
/// (`chunked_attention`, `full_attention`), else the rotating layers where there are chunks.
fn chunked_layers(
    hf: &HfLlamaConfig,
    nope: &[bool],
    chunks: bool,
) -> Result<Vec<bool>, ConfigError> {
    let Some(types) = &hf.layer_types else {
        return Ok(nope.iter().map(|&n| chunks && !n).collect());
    };
    if types.len() != hf.num_hidden_layers {
        return Err(invalid(
            "layer_types",
            format!(
                "has {} entries for {} layers",
                types.len(),
                hf.num_hidden_layers
            ),
        ));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            "chunked_attention" if chunks => Ok(true),
            "chunked_attention" => Err(invalid(
                "layer_types",
                "names chunked layers but attention_chunk_size is null".into(),
            )),
            "full_attention" => Ok(false),
            other => Err(invalid(
                "layer_types",
                format!("has `{other}`; expected `chunked_attention` or `full_attention`"),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// meta-llama/Llama-4-Scout-17B-16E-Instruct's `text_config`, as the hub has it (its
    /// 48 `no_rope_layers` flags written out below), as a text-only config.
    fn scout() -> serde_json::Value {
        let flags: Vec<u8> = (0..48).map(|i| u8::from((i + 1) % 4 != 0)).collect();
        serde_json::json!({
            "architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text",
            "attention_bias": false, "attention_chunk_size": 8192, "attention_dropout": 0.0,
            "attn_scale": 0.1, "attn_temperature_tuning": true, "bos_token_id": 200000,
            "eos_token_id": [200001, 200007, 200008], "floor_scale": 8192, "head_dim": 128,
            "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02,
            "interleave_moe_layer_step": 1, "intermediate_size": 8192,
            "intermediate_size_mlp": 16384, "max_position_embeddings": 10485760,
            "moe_layers": (0..48).collect::<Vec<usize>>(), "no_rope_layers": flags,
            "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48,
            "num_key_value_heads": 8, "num_local_experts": 16, "output_router_logits": false,
            "pad_token_id": 200018, "rms_norm_eps": 1e-05,
            "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "rope_theta": 500000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
            "torch_dtype": "bfloat16", "use_cache": true, "use_qk_norm": true,
            "vocab_size": 202048
        })
    }

    fn resolve(json: &serde_json::Value) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(&json.to_string())
            .unwrap()
            .resolve()
    }

    #[test]
    fn scout_routes_one_of_16_experts_on_every_layer_and_chunks_its_rotating_layers() {
        let c = resolve(&scout()).unwrap();
        assert_eq!(c.architecture, Architecture::Llama4);
        let experts = c.extras.experts.unwrap();
        assert_eq!(
            (experts.count, experts.per_token, experts.width),
            (16, 1, 8192)
        );
        assert_eq!(experts.shared, Some(8192));
        assert!(experts.shared_ungated && experts.scaled_inputs && !experts.normalize);
        assert!((0..48).all(|i| c.layer_experts(i).is_some()));
        assert!(c.extras.interleaved_rotary);
        assert!(c.layer_rotary(0) && !c.layer_rotary(3) && c.layer_rotary(4));
        let a = c.extras.llama4_attention.as_ref().unwrap();
        assert_eq!(a.chunk_size, 8192);
        assert_eq!(&a.chunked_layers[..4], &[true, true, true, false]);
        assert!(a.unit_qk_norm);
        assert_eq!(
            a.temperature,
            Some(QueryTemperature {
                floor_scale: 8192.0,
                attn_scale: 0.1
            })
        );
        assert_eq!((c.head_dim, c.num_key_value_heads), (128, 8));
        assert!(!c.qk_norm && !c.qkv_bias && !c.o_bias);
        // transformers' `num_parameters()` of `Llama4ForCausalLM` on the meta device.
        assert_eq!(ModelShape::from_config(&c).parameters, 107_769_861_120);
        let back = resolve(&c.to_hf_json()).unwrap();
        assert_eq!(back, c);
    }

    /// Maverick's layout: experts on every second layer, the others dense and
    /// `intermediate_size_mlp` wide; `moe_layers` that are not every n-th are refused.
    #[test]
    fn experts_on_every_second_layer_leave_dense_layers_between() {
        let mut json = scout();
        json["interleave_moe_layer_step"] = 2.into();
        json["moe_layers"] = (0..24).map(|i| 2 * i + 1).collect::<Vec<usize>>().into();
        let c = resolve(&json).unwrap();
        assert_eq!(c.intermediate_size, 16384);
        assert!(c.layer_experts(0).is_none() && c.layer_experts(1).is_some());
        assert_eq!(c.extras.experts.unwrap().dense_layers(48), 24);
        assert_eq!(resolve(&c.to_hf_json()).unwrap(), c);
        json["moe_layers"] = serde_json::json!([1, 2, 5]);
        let err = resolve(&json).unwrap_err().to_string();
        assert!(err.contains("moe_layers"), "{err}");
        json["moe_layers"] = serde_json::json!([]);
        assert!(resolve(&json).unwrap().extras.experts.is_none());
    }

    /// Without chunks (`attention_chunk_size` null) no layer is chunked; `layer_types` naming
    /// chunked layers then is refused, and so is an unknown type.
    #[test]
    fn a_null_chunk_size_chunks_no_layer() {
        let mut json = scout();
        json["attention_chunk_size"] = serde_json::Value::Null;
        let c = resolve(&json).unwrap();
        let a = c.extras.llama4_attention.as_ref().unwrap();
        assert!(a.chunked_layers.iter().all(|&c| !c));
        json["layer_types"] = std::iter::repeat_n("chunked_attention", 48)
            .collect::<Vec<_>>()
            .into();
        assert!(resolve(&json)
            .unwrap_err()
            .to_string()
            .contains("layer_types"));
        json["attention_chunk_size"] = 16.into();
        json["layer_types"][2] = "sliding_attention".into();
        assert!(resolve(&json)
            .unwrap_err()
            .to_string()
            .contains("sliding_attention"));
    }

    /// The decoder's names are the checkpoint's under `feed_forward`.
    #[test]
    fn the_mlp_is_named_feed_forward() {
        let c = resolve(&scout()).unwrap();
        let name = |n: &str| Llama4.checkpoint_name(&c, n);
        assert_eq!(
            name("model.layers.3.mlp.gate.weight").as_deref(),
            Some("model.layers.3.feed_forward.router.weight")
        );
        assert_eq!(
            name("model.layers.3.mlp.shared_expert.up_proj.weight").as_deref(),
            Some("model.layers.3.feed_forward.shared_expert.up_proj.weight")
        );
        assert_eq!(
            name("model.layers.0.mlp.gate_proj.weight").as_deref(),
            Some("model.layers.0.feed_forward.gate_proj.weight")
        );
        assert_eq!(name("model.layers.0.self_attn.q_proj.weight"), None);
    }
}
