//! GPT-NeoX (`GPTNeoXForCausalLM`: the Pythia suite, 70M … 12B, and GPT-NeoX-20B): a pre-norm
//! layer with
//! - a parallel residual (`use_parallel_residual`, true in every Pythia): attention and MLP
//!   both read the layer's input, each through its own LayerNorm, and the layer returns
//!   `x + attn(ln1(x)) + mlp(ln2(x))`; false gives the usual sequential layer;
//! - partial rotary: only the first `rotary_pct` (0.25 in Pythia) of each head's dimensions
//!   rotate, in the "rotate half" layout of those dimensions, the rest pass through;
//! - LayerNorms (epsilon `layer_norm_eps`), biases on every linear, an MLP without a gate,
//!   `dense_4h_to_h(gelu(dense_h_to_4h(x)))` with the exact (erf) GELU;
//! - q, k and v stacked in one `attention.query_key_value`, **head by head** (head 0's query,
//!   key and value rows, then head 1's, …): the decoder holds them apart, pruning selects over
//!   the stack as the one matrix the reference code sees, and saving stacks them back in that
//!   order;
//! - every tensor under `gpt_neox.` with its own names, and an untied head, `embed_out`.

use std::collections::BTreeMap;

use super::{AttentionBiases, Family, FamilyRow, GgufMetadata};
use crate::model::arch::{Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `GPTNeoXForCausalLM`.
pub struct GptNeox;

/// The decoder's names of a layer's tensors and GPT-NeoX's, relative to the layer.
const LAYER_NAMES: [(&str, &str); 6] = [
    ("self_attn.qkv_proj", "attention.query_key_value"),
    ("self_attn.o_proj", "attention.dense"),
    ("mlp.up_proj", "mlp.dense_h_to_4h"),
    ("mlp.down_proj", "mlp.dense_4h_to_h"),
    ("input_layernorm", "input_layernorm"),
    ("post_attention_layernorm", "post_attention_layernorm"),
];

/// transformers' default share of rotated dimensions when a config names none.
const DEFAULT_ROTARY_PCT: f64 = 0.25;

/// `GPTNeoXForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    // llama.cpp's `gptneox`, whose q/k/v stack is part by part (the loader regroups it).
    gguf_arch: Some("gptneox"),
    fused_linears: &super::QUERY_KEY_VALUE_BY_KV_HEAD,
    ..FamilyRow::new("GPTNeoXForCausalLM", "gpt_neox", &GptNeox)
};

impl Family for GptNeox {
    /// llama.cpp writes the rotated dimensions of the heads, not their width (`rotary_pct`).
    fn read_gguf(&self, meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        let share = super::gguf_metadata::rotated_share(meta, hf);
        hf.set_own_key("rotary_pct", share);
    }

    /// `attention_bias` (default true) for q/k/v and the output projection alike.
    fn attention_biases(&self, hf: &HfLlamaConfig) -> AttentionBiases {
        let bias = hf.attention_bias.unwrap_or(true);
        AttentionBiases { qkv: bias, o: bias }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        if name == "lm_head.weight" {
            return Some("embed_out.weight".into());
        }
        super::renamed(
            name,
            "gpt_neox",
            "gpt_neox.layers",
            &LAYER_NAMES,
            &[("norm", "final_layer_norm"), ("embed_tokens", "embed_in")],
        )
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        // Pythia's exact GELU by default; GPT-NeoX-20B's `gelu_fast` is the tanh one.
        let activation = super::gelu_activation(hf, "hidden_act", "GPT-NeoX", Activation::Gelu)?;
        super::refuse_grouped_heads(hf, "GPT-NeoX")?;
        let rotary_dim =
            super::partial_rotary(
                &ROW,
                hf,
                hf.own_key("rotary_pct")?,
                "rotary_pct",
                DEFAULT_ROTARY_PCT,
            )?;
        Ok(DecoderExtras {
            activation,
            layer_norm: true,
            ungated_mlp: true,
            mlp_bias: true,
            parallel_residual: hf.use_parallel_residual.unwrap_or(true),
            rotary_dim,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([
            ("layer_norm_eps", config.rms_norm_eps.into()),
            ("rotary_pct", config.rotary_factor().into()),
            (
                "use_parallel_residual",
                config.extras.parallel_residual.into(),
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// EleutherAI/pythia-160m's `config.json`, as the hub has it.
    const PYTHIA_160M: &str = r#"{"architectures":["GPTNeoXForCausalLM"],"bos_token_id":0,
        "eos_token_id":0,"hidden_act":"gelu","hidden_size":768,"initializer_range":0.02,
        "intermediate_size":3072,"layer_norm_eps":1e-05,"max_position_embeddings":2048,
        "model_type":"gpt_neox","num_attention_heads":12,"num_hidden_layers":12,
        "rotary_emb_base":10000,"rotary_pct":0.25,"tie_word_embeddings":false,
        "torch_dtype":"float16","transformers_version":"4.24.0","use_cache":true,
        "use_parallel_residual":true,"vocab_size":50304}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn pythia_160m_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(PYTHIA_160M).unwrap();
        assert_eq!(c.architecture, Architecture::GptNeox);
        assert_eq!((c.head_dim, c.rotary_dim()), (64, 16));
        assert_eq!(c.rms_norm_eps, 1e-5);
        assert_eq!(c.rope_theta, 10_000.0);
        assert!(c.qkv_bias && c.o_bias && !c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.parallel_residual && e.layer_norm && e.ungated_mlp && e.mlp_bias);
        assert_eq!(e.activation, Activation::Gelu);
        // The hub's model card: 162,322,944 parameters (embed_in and embed_out apart).
        assert_eq!(ModelShape::from_config(&c).parameters, 162_322_944);
    }

    #[test]
    fn transformers_5_keys_and_the_sequential_layer_resolve_too() {
        let c = resolve(
            r#"{"architectures":["GPTNeoXForCausalLM"],"hidden_size":64,"intermediate_size":112,
            "num_attention_heads":4,"num_hidden_layers":2,"vocab_size":96,
            "rope_parameters":{"rope_type":"default","rope_theta":500.0,"partial_rotary_factor":0.5},
            "use_parallel_residual":false,"attention_bias":false,"hidden_act":"gelu_fast"}"#,
        )
        .unwrap();
        assert_eq!((c.rotary_dim(), c.rope_theta), (8, 500.0));
        assert!(!c.extras.parallel_residual && !c.qkv_bias && !c.o_bias);
        assert!(c.extras.mlp_bias, "the MLP's linears always carry biases");
        assert_eq!(c.extras.activation, Activation::GeluTanh);
        // Every dimension rotating is the usual rotary.
        let full = resolve(&PYTHIA_160M.replace(r#""rotary_pct":0.25"#, r#""rotary_pct":1.0"#));
        assert_eq!(full.unwrap().extras.rotary_dim, None);
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        for (from, to, key) in [
            (
                r#""hidden_act":"gelu""#,
                r#""hidden_act":"relu""#,
                "hidden_act",
            ),
            (r#""rotary_pct":0.25"#, r#""rotary_pct":0"#, "rotary_pct"),
            // 64 · 0.02 = 1.28: one dimension, which cannot rotate as a pair.
            (r#""rotary_pct":0.25"#, r#""rotary_pct":0.02"#, "rotary_pct"),
            (
                r#""num_attention_heads":12"#,
                r#""num_attention_heads":12,"num_key_value_heads":4"#,
                "num_key_value_heads",
            ),
        ] {
            let e = resolve(&PYTHIA_160M.replace(from, to)).unwrap_err();
            assert!(e.to_string().contains(key), "{to}: {e}");
        }
    }

    #[test]
    fn names_map_to_gpt_neox_checkpoints() {
        let (f, c) = (GptNeox, resolve(PYTHIA_160M).unwrap());
        for (ours, theirs) in [
            ("model.embed_tokens.weight", "gpt_neox.embed_in.weight"),
            ("model.norm.bias", "gpt_neox.final_layer_norm.bias"),
            ("lm_head.weight", "embed_out.weight"),
            (
                "model.layers.3.self_attn.qkv_proj.weight",
                "gpt_neox.layers.3.attention.query_key_value.weight",
            ),
            (
                "model.layers.0.self_attn.o_proj.bias",
                "gpt_neox.layers.0.attention.dense.bias",
            ),
            (
                "model.layers.11.mlp.down_proj.weight",
                "gpt_neox.layers.11.mlp.dense_4h_to_h.weight",
            ),
            (
                "model.layers.2.post_attention_layernorm.weight",
                "gpt_neox.layers.2.post_attention_layernorm.weight",
            ),
        ] {
            assert_eq!(
                f.checkpoint_name(&c, ours).as_deref(),
                Some(theirs),
                "{ours}"
            );
        }
    }
}
