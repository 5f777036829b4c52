//! Falcon (`FalconForCausalLM`: TII's Falcon-7B, 40B, 180B, Falcon2-11B), pre-norm layers with
//! LayerNorms (epsilon `layer_norm_epsilon`), RoPE, an MLP without a gate
//! (`dense_4h_to_h(gelu(dense_h_to_4h(x)))`, `ffn_hidden_size` wide, default 4 × hidden),
//! biases where `bias` says (none in the released models), a head tied to the embeddings, every
//! tensor under `transformer.`, and three layouts:
//! - Falcon-7B's (`parallel_attn`, `multi_query`): attention and MLP read the same normed input
//!   (one `input_layernorm`, held twice by the decoder, `shared_norm`), the layer returns
//!   `x + (mlp + attn)`, and one key/value head serves every query head;
//! - the new decoder architecture (`new_decoder_architecture`: 40B, 180B, Falcon2-11B):
//!   `num_kv_heads` grouped key/value heads, and a norm each for attention and MLP (`ln_attn`,
//!   `ln_mlp`), or the shared one where `num_ln_in_parallel_attn` is 1;
//! - the sequential layer (`parallel_attn: false`), with `post_attention_layernorm`.
//!
//! q, k and v are stacked in `self_attention.query_key_value` by key/value head (each kv
//! head's query heads, then its key, then its value), which covers all three: with one kv head
//! that is q, k, v part by part, with as many as query heads it is head by head. The decoder
//! holds them apart, pruning selects over the stack as the one matrix the reference code
//! sees, and saving stacks them back in that order.
//!
//! Falcon's ALiBi (`alibi: true`, Falcon-RW) scales the bias with the scores, unlike BLOOM's,
//! and is refused, as are layouts transformers itself cannot run.

use std::collections::BTreeMap;

use super::{AttentionBiases, Family, FamilyRow};
use crate::model::arch::{
    invalid, Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig,
};

/// `FalconForCausalLM`.
pub struct Falcon;

/// The decoder's names of a layer's linears and Falcon's, relative to the layer.
const LAYER_NAMES: [(&str, &str); 4] = [
    ("self_attn.qkv_proj", "self_attention.query_key_value"),
    ("self_attn.o_proj", "self_attention.dense"),
    ("mlp.up_proj", "mlp.dense_h_to_4h"),
    ("mlp.down_proj", "mlp.dense_4h_to_h"),
];

/// The decoder's names of the tensors outside the layers and Falcon's, without `model.`.
const MODEL_NAMES: [(&str, &str); 2] = [("embed_tokens", "word_embeddings"), ("norm", "ln_f")];

impl Falcon {
    /// Whether the layer is the new decoder architecture's (grouped kv heads).
    fn new_architecture(hf: &HfLlamaConfig) -> bool {
        hf.falcon.new_decoder_architecture.unwrap_or(false)
    }

    /// Whether attention and MLP read the layer's input side by side.
    fn parallel(hf: &HfLlamaConfig) -> bool {
        hf.falcon.parallel_attn.unwrap_or(true)
    }
}

/// `FalconForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    // llama.cpp's `falcon`, whose q/k/v stack is part by part (the loader regroups it by kv head).
    gguf_arch: Some("falcon"),
    ties_embeddings: true,
    fused_linears: &super::QUERY_KEY_VALUE_BY_KV_HEAD,
    // `FalconConfig.head_dim` is a property, which transformers cannot set from a file.
    hf_keys_refused: &["head_dim"],
    ..FamilyRow::new("FalconForCausalLM", "falcon", &Falcon)
};

impl Family for Falcon {
    /// Every linear carries a bias where `bias` says so (default false).
    fn attention_biases(&self, hf: &HfLlamaConfig) -> AttentionBiases {
        let bias = hf.falcon.bias.unwrap_or(false);
        AttentionBiases { qkv: bias, o: bias }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    /// The new architecture's `num_kv_heads`; otherwise one (`multi_query`, the default) or one
    /// per query head.
    fn key_value_heads(&self, hf: &HfLlamaConfig) -> Option<usize> {
        if Self::new_architecture(hf) {
            hf.falcon.num_kv_heads
        } else if hf.falcon.multi_query.unwrap_or(true) {
            Some(1)
        } else {
            None
        }
    }

    /// `ffn_hidden_size`, else four times the hidden width.
    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.falcon
            .ffn_hidden_size
            .or_else(|| hf.hidden_size.checked_mul(4))
    }

    /// The norms' names follow the layout: `ln_attn` and `ln_mlp` with a norm each in a
    /// parallel layer, `input_layernorm` for both where they share it, `input_layernorm` and
    /// `post_attention_layernorm` in the sequential layer.
    fn checkpoint_name(&self, config: &LlamaConfig, name: &str) -> Option<String> {
        let e = &config.extras;
        let norms = match (e.parallel_residual, e.shared_norm) {
            (true, false) => ["ln_attn", "ln_mlp"],
            (true, true) => ["input_layernorm", "input_layernorm"],
            (false, _) => ["input_layernorm", "post_attention_layernorm"],
        };
        let layer_modules = [
            LAYER_NAMES[0],
            LAYER_NAMES[1],
            LAYER_NAMES[2],
            LAYER_NAMES[3],
            ("input_layernorm", norms[0]),
            ("post_attention_layernorm", norms[1]),
        ];
        super::renamed(
            name,
            "transformer",
            "transformer.h",
            &layer_modules,
            &MODEL_NAMES,
        )
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let activation = match hf.activation_name() {
            None | Some("gelu") => Activation::Gelu,
            Some("gelu_new" | "gelu_fast" | "gelu_pytorch_tanh") => Activation::GeluTanh,
            Some("relu") => Activation::Relu,
            Some(other) => {
                return Err(invalid(
                    "activation",
                    format!("is `{other}`; Falcon takes `gelu`, `gelu_new` or `relu`"),
                ))
            }
        };
        if hf.falcon.alibi == Some(true) {
            return Err(invalid(
                "alibi",
                "is true (Falcon-RW's ALiBi, which scales the bias with the scores); only \
                 Falcon with RoPE is supported"
                    .into(),
            ));
        }
        let parallel = Self::parallel(hf) || Self::new_architecture(hf);
        let norms = hf.falcon.num_ln_in_parallel_attn;
        if Self::new_architecture(hf) && !Self::parallel(hf) {
            return Err(invalid(
                "parallel_attn",
                "is false with new_decoder_architecture, a layout transformers cannot run".into(),
            ));
        }
        if !Self::new_architecture(hf) && parallel && norms == Some(2) {
            return Err(invalid(
                "num_ln_in_parallel_attn",
                "is 2 without new_decoder_architecture, a layout transformers cannot run".into(),
            ));
        }
        if norms.is_some_and(|n| n != 1 && n != 2) {
            return Err(invalid(
                "num_ln_in_parallel_attn",
                format!("must be 1 or 2, got {}", norms.unwrap_or(0)),
            ));
        }
        let two_norms = Self::new_architecture(hf) && norms.unwrap_or(2) == 2;
        Ok(DecoderExtras {
            activation,
            layer_norm: true,
            ungated_mlp: true,
            mlp_bias: hf.falcon.bias.unwrap_or(false),
            parallel_residual: parallel,
            shared_norm: parallel && !two_norms,
            ..DecoderExtras::default()
        })
    }

    /// The layout's keys: the new architecture where the layer has a norm each for attention
    /// and MLP, or grouped kv heads (neither one nor one per query head), else Falcon-7B's or
    /// the sequential layer's.
    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let e = &config.extras;
        let (heads, kv) = (config.num_attention_heads, config.num_key_value_heads);
        let new_architecture = e.parallel_residual && (!e.shared_norm || (kv != 1 && kv != heads));
        let norms = match (new_architecture, e.shared_norm) {
            (false, _) => serde_json::Value::Null,
            (true, true) => 1.into(),
            (true, false) => 2.into(),
        };
        BTreeMap::from([
            ("layer_norm_epsilon", config.rms_norm_eps.into()),
            ("activation", e.activation.hf_name().into()),
            ("ffn_hidden_size", config.intermediate_size.into()),
            ("bias", e.mlp_bias.into()),
            ("alibi", false.into()),
            ("parallel_attn", e.parallel_residual.into()),
            ("new_decoder_architecture", new_architecture.into()),
            ("num_ln_in_parallel_attn", norms),
            ("multi_query", (!new_architecture && kv == 1).into()),
            ("num_kv_heads", kv.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// tiiuae/falcon-7b's `config.json`, as the hub has it.
    const FALCON_7B: &str = r#"{"alibi":false,"apply_residual_connection_post_layernorm":false,
        "architectures":["FalconForCausalLM"],"attention_dropout":0.0,"bias":false,
        "bos_token_id":11,"eos_token_id":11,"hidden_dropout":0.0,"hidden_size":4544,
        "initializer_range":0.02,"layer_norm_epsilon":1e-05,"model_type":"falcon",
        "multi_query":true,"new_decoder_architecture":false,"num_attention_heads":71,
        "num_hidden_layers":32,"parallel_attn":true,"torch_dtype":"bfloat16",
        "transformers_version":"4.27.4","use_cache":true,"vocab_size":65024}"#;

    /// tiiuae/falcon-40b's layout: 128 query heads in 8 groups, a norm each for attention
    /// and MLP.
    const FALCON_40B: &str = r#"{"alibi":false,"architectures":["FalconForCausalLM"],
        "bias":false,"hidden_size":8192,"layer_norm_epsilon":1e-05,"model_type":"falcon",
        "new_decoder_architecture":true,"num_attention_heads":128,"num_hidden_layers":60,
        "num_kv_heads":8,"parallel_attn":true,"vocab_size":65024}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    /// Written back and read again, a config is the same (and has no `head_dim`, which
    /// transformers refuses for Falcon).
    fn round_trips(c: &LlamaConfig) {
        assert!(c.to_hf_json().get("head_dim").is_none());
        let back = HfLlamaConfig::from_json(&c.to_hf_json().to_string())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(&back, c);
    }

    #[test]
    fn falcon_7b_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(FALCON_7B).unwrap();
        assert_eq!(c.architecture, Architecture::Falcon);
        assert_eq!((c.num_attention_heads, c.num_key_value_heads), (71, 1));
        assert_eq!((c.head_dim, c.intermediate_size), (64, 4 * 4544));
        assert!(!c.qkv_bias && !c.o_bias && c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.parallel_residual && e.shared_norm && e.layer_norm && e.ungated_mlp);
        assert!(!e.mlp_bias && c.rotary());
        assert_eq!(e.activation, Activation::Gelu);
        // One norm a layer: 6,921,720,704 parameters, as published.
        assert_eq!(ModelShape::from_config(&c).parameters, 6_921_720_704);
        round_trips(&c);
    }

    #[test]
    fn the_new_architecture_and_the_sequential_layer_resolve_too() {
        let c = resolve(FALCON_40B).unwrap();
        assert_eq!((c.num_attention_heads, c.num_key_value_heads), (128, 8));
        assert!(c.extras.parallel_residual && !c.extras.shared_norm);
        round_trips(&c);
        // Falcon2-11B: the new architecture with one norm.
        let one = resolve(&FALCON_40B.replace(
            r#""num_kv_heads":8"#,
            r#""num_kv_heads":8,"num_ln_in_parallel_attn":1"#,
        ))
        .unwrap();
        assert!(one.extras.parallel_residual && one.extras.shared_norm);
        round_trips(&one);
        let sequential = resolve(
            &FALCON_7B
                .replace(r#""multi_query":true"#, r#""multi_query":false"#)
                .replace(r#""parallel_attn":true"#, r#""parallel_attn":false"#)
                .replace(r#""bias":false"#, r#""bias":true,"ffn_hidden_size":9000"#),
        )
        .unwrap();
        assert_eq!(sequential.intermediate_size, 9000);
        assert_eq!(sequential.num_key_value_heads, 71);
        assert!(!sequential.extras.parallel_residual && !sequential.extras.shared_norm);
        assert!(sequential.qkv_bias && sequential.extras.mlp_bias);
        round_trips(&sequential);
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        for (from, to, key) in [
            (r#""alibi":false"#, r#""alibi":true"#, "alibi"),
            (
                r#""parallel_attn":true"#,
                r#""parallel_attn":true,"num_ln_in_parallel_attn":2"#,
                "num_ln_in_parallel_attn",
            ),
            (
                r#""bias":false"#,
                r#""bias":false,"activation":"silu""#,
                "activation",
            ),
        ] {
            let e = resolve(&FALCON_7B.replace(from, to)).unwrap_err();
            assert!(e.to_string().contains(key), "{to}: {e}");
        }
        let e = resolve(&FALCON_40B.replace(r#""parallel_attn":true"#, r#""parallel_attn":false"#))
            .unwrap_err();
        assert!(e.to_string().contains("parallel_attn"), "{e}");
    }

    #[test]
    fn norms_are_named_by_the_layout() {
        let f = Falcon;
        let (seven, forty) = (resolve(FALCON_7B).unwrap(), resolve(FALCON_40B).unwrap());
        let sequential = resolve(
            &FALCON_7B
                .replace(r#""parallel_attn":true"#, r#""parallel_attn":false"#)
                .replace(r#""multi_query":true"#, r#""multi_query":false"#),
        )
        .unwrap();
        let name = |c: &LlamaConfig, ours: &str| f.checkpoint_name(c, ours).unwrap();
        let (attn, mlp) = (
            "model.layers.3.input_layernorm.weight",
            "model.layers.3.post_attention_layernorm.weight",
        );
        assert_eq!(name(&seven, attn), "transformer.h.3.input_layernorm.weight");
        assert_eq!(name(&seven, mlp), "transformer.h.3.input_layernorm.weight");
        assert_eq!(name(&forty, attn), "transformer.h.3.ln_attn.weight");
        assert_eq!(name(&forty, mlp), "transformer.h.3.ln_mlp.weight");
        assert_eq!(
            name(&sequential, mlp),
            "transformer.h.3.post_attention_layernorm.weight"
        );
        for (ours, theirs) in [
            (
                "model.embed_tokens.weight",
                "transformer.word_embeddings.weight",
            ),
            ("model.norm.bias", "transformer.ln_f.bias"),
            (
                "model.layers.0.self_attn.qkv_proj.weight",
                "transformer.h.0.self_attention.query_key_value.weight",
            ),
            (
                "model.layers.1.mlp.down_proj.weight",
                "transformer.h.1.mlp.dense_4h_to_h.weight",
            ),
        ] {
            assert_eq!(name(&seven, ours), theirs);
        }
    }
}
