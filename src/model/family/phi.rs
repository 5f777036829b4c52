//! Phi (`PhiForCausalLM`, model type `phi`: Microsoft's phi-1, phi-1.5 and Phi-2, the third
//! family of SliceGPT's tables): a pre-norm parallel layer with
//! - one `input_layernorm` (a LayerNorm, epsilon `layer_norm_eps`) that attention and MLP both
//!   read (held twice by the decoder, `shared_norm`), and the layer returns
//!   `x + attn + mlp`;
//! - partial rotary: the first `partial_rotary_factor` (0.4 in Phi-2, 0.5 in phi-1 and 1.5) of
//!   each head's dimensions rotate, in the "rotate half" layout, the rest pass through;
//! - biases on every linear, the output projection named `dense`, an MLP without a gate,
//!   `fc2(gelu_new(fc1(x)))` (the tanh GELU);
//! - a final LayerNorm named `final_layernorm` and an untied LM head **with a bias**.
//!
//! Per-head q/k LayerNorms (`qk_layernorm`, false in every released model) and a tied head
//! (which would drop the head's bias) are refused.

use std::collections::BTreeMap;

use super::{AttentionBiases, Family, FamilyRow, GgufMetadata};
use crate::model::arch::{Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `PhiForCausalLM`.
pub struct Phi;

/// The decoder's names of a layer's tensors and Phi's, relative to the layer (q, k and v keep
/// theirs; both of the decoder's norms are the one `input_layernorm`).
const LAYER_NAMES: [(&str, &str); 8] = [
    ("self_attn.q_proj", "self_attn.q_proj"),
    ("self_attn.k_proj", "self_attn.k_proj"),
    ("self_attn.v_proj", "self_attn.v_proj"),
    ("self_attn.o_proj", "self_attn.dense"),
    ("mlp.up_proj", "mlp.fc1"),
    ("mlp.down_proj", "mlp.fc2"),
    ("input_layernorm", "input_layernorm"),
    ("post_attention_layernorm", "input_layernorm"),
];

/// transformers' share of rotated dimensions when a config names none (`PhiConfig`).
const DEFAULT_PARTIAL_ROTARY_FACTOR: f64 = 0.5;

/// `PhiForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    // llama.cpp's `phi2` (Phi-1, Phi-1.5, Phi-2): q, k and v apart, or stacked in the first files.
    gguf_arch: Some("phi2"),
    ..FamilyRow::new("PhiForCausalLM", "phi", &Phi)
};

impl Family for Phi {
    /// llama.cpp writes the rotated dimensions of the heads, not their width.
    fn read_gguf(&self, meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        hf.partial_rotary_factor = super::gguf_metadata::rotated_share(meta, hf);
    }

    /// Every linear carries a bias.
    fn attention_biases(&self, _hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases { qkv: true, o: true }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        super::renamed(
            name,
            "model",
            "model.layers",
            &LAYER_NAMES,
            &[("norm", "final_layernorm")],
        )
        .filter(|theirs| theirs != name)
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let activation = super::gelu_activation(hf, "hidden_act", "Phi", Activation::GeluTanh)?;
        super::refuse_qk_layernorm(hf, "Phi")?;
        super::refuse_tied_biased_head(hf, "Phi")?;
        let rotary_dim = super::partial_rotary(
            &ROW,
            hf,
            hf.partial_rotary_factor,
            "partial_rotary_factor",
            DEFAULT_PARTIAL_ROTARY_FACTOR,
        )?;
        Ok(DecoderExtras {
            activation,
            layer_norm: true,
            ungated_mlp: true,
            mlp_bias: true,
            parallel_residual: true,
            shared_norm: true,
            rotary_dim,
            lm_head_bias: true,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([
            ("layer_norm_eps", config.rms_norm_eps.into()),
            ("partial_rotary_factor", config.rotary_factor().into()),
            ("qk_layernorm", false.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// microsoft/phi-2's `config.json`, as the hub has it.
    const PHI_2: &str = r#"{"_name_or_path":"microsoft/phi-2","architectures":["PhiForCausalLM"],
        "attention_dropout":0.0,"bos_token_id":50256,"embd_pdrop":0.0,"eos_token_id":50256,
        "hidden_act":"gelu_new","hidden_size":2560,"initializer_range":0.02,
        "intermediate_size":10240,"layer_norm_eps":1e-05,"max_position_embeddings":2048,
        "model_type":"phi","num_attention_heads":32,"num_hidden_layers":32,
        "num_key_value_heads":32,"partial_rotary_factor":0.4,"qk_layernorm":false,
        "resid_pdrop":0.1,"rope_scaling":null,"rope_theta":10000.0,"tie_word_embeddings":false,
        "torch_dtype":"float16","transformers_version":"4.37.0","use_cache":true,
        "vocab_size":51200}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn phi_2_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(PHI_2).unwrap();
        assert_eq!(c.architecture, Architecture::Phi);
        assert_eq!((c.head_dim, c.rotary_dim()), (80, 32));
        assert_eq!(c.rms_norm_eps, 1e-5);
        assert!(c.qkv_bias && c.o_bias && !c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.parallel_residual && e.shared_norm && e.layer_norm && e.ungated_mlp);
        assert!(e.mlp_bias && e.lm_head_bias);
        assert_eq!(e.activation, Activation::GeluTanh);
        // Phi-2's 2.78 B: 32 layers of 78,671,360, the final norm, the embeddings and the
        // biased head.
        assert_eq!(ModelShape::from_config(&c).parameters, 2_779_683_840);
        let json = c.to_hf_json();
        assert_eq!(json["partial_rotary_factor"], 0.4);
        // The same tanh GELU under PyTorch's name.
        assert_eq!(json["hidden_act"], "gelu_pytorch_tanh");
        assert_eq!(resolve(&json.to_string()).unwrap(), c);
    }

    #[test]
    fn transformers_5_keys_and_the_default_factor_resolve() {
        let c = resolve(
            r#"{"architectures":["PhiForCausalLM"],"hidden_size":64,"intermediate_size":112,
            "num_attention_heads":4,"num_key_value_heads":2,"num_hidden_layers":2,
            "vocab_size":96,"rope_parameters":{"rope_type":"default","rope_theta":500.0,
            "partial_rotary_factor":0.25}}"#,
        )
        .unwrap();
        assert_eq!(
            (c.rotary_dim(), c.rope_theta, c.num_key_value_heads),
            (4, 500.0, 2)
        );
        let c = resolve(&PHI_2.replace(r#""partial_rotary_factor":0.4,"#, "")).unwrap();
        assert_eq!(c.rotary_dim(), 40, "phi-1's default of one half");
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        for (from, to, key) in [
            (
                r#""hidden_act":"gelu_new""#,
                r#""hidden_act":"relu""#,
                "hidden_act",
            ),
            (
                r#""qk_layernorm":false"#,
                r#""qk_layernorm":true"#,
                "qk_layernorm",
            ),
            (
                r#""tie_word_embeddings":false"#,
                r#""tie_word_embeddings":true"#,
                "tie_word_embeddings",
            ),
            (
                r#""partial_rotary_factor":0.4"#,
                r#""partial_rotary_factor":1.5"#,
                "partial_rotary_factor",
            ),
            // 80 · 0.01 = 0.8: no dimension rotates.
            (
                r#""partial_rotary_factor":0.4"#,
                r#""partial_rotary_factor":0.01"#,
                "partial_rotary_factor",
            ),
        ] {
            let e = resolve(&PHI_2.replace(from, to)).unwrap_err();
            assert!(e.to_string().contains(key), "{to}: {e}");
        }
    }

    #[test]
    fn names_map_to_phi_checkpoints() {
        let (f, c) = (Phi, resolve(PHI_2).unwrap());
        for (ours, theirs) in [
            ("model.norm.weight", Some("model.final_layernorm.weight")),
            ("model.norm.bias", Some("model.final_layernorm.bias")),
            ("model.embed_tokens.weight", None),
            ("lm_head.bias", None),
            ("model.layers.3.self_attn.q_proj.bias", None),
            (
                "model.layers.0.self_attn.o_proj.weight",
                Some("model.layers.0.self_attn.dense.weight"),
            ),
            (
                "model.layers.31.mlp.up_proj.bias",
                Some("model.layers.31.mlp.fc1.bias"),
            ),
            (
                "model.layers.2.mlp.down_proj.weight",
                Some("model.layers.2.mlp.fc2.weight"),
            ),
            (
                "model.layers.2.post_attention_layernorm.weight",
                Some("model.layers.2.input_layernorm.weight"),
            ),
            ("model.layers.2.input_layernorm.bias", None),
        ] {
            assert_eq!(f.checkpoint_name(&c, ours).as_deref(), theirs, "{ours}");
        }
    }
}
