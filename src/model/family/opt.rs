//! OPT (`OPTForCausalLM`, the paper's second family: OPT-125m … OPT-66B): Llama's pre-norm
//! layer with
//! - LayerNorms (centred, with a bias, epsilon 1e-5) in place of RMSNorms;
//! - a bias on every linear (`enable_bias`);
//! - an MLP without a gate: `fc2(relu(fc1(x)))`, held as `mlp.up_proj` and `mlp.down_proj`;
//! - learned absolute positions added to the token embeddings, read from row `position + 2`
//!   of `embed_positions` (OPT's offset), and no RoPE;
//! - multi-head attention (no grouped heads) and a tied head;
//! - every tensor under `model.decoder.` with its own names (`self_attn.out_proj`, `fc1`,
//!   `self_attn_layer_norm`, …), mapped here to the decoder's.
//!
//! OPT-350m's post-norm layout with projected embeddings (`do_layer_norm_before: false`,
//! `word_embed_proj_dim` ≠ `hidden_size`) is refused.

use std::collections::BTreeMap;

use super::{Family, FamilyRow};
use crate::model::arch::{
    invalid, Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig,
};

/// `OPTForCausalLM`.
pub struct Opt;

/// The decoder's names of a layer's tensors and OPT's, relative to the layer.
const LAYER_NAMES: [(&str, &str); 8] = [
    ("self_attn.q_proj", "self_attn.q_proj"),
    ("self_attn.k_proj", "self_attn.k_proj"),
    ("self_attn.v_proj", "self_attn.v_proj"),
    ("self_attn.o_proj", "self_attn.out_proj"),
    ("mlp.up_proj", "fc1"),
    ("mlp.down_proj", "fc2"),
    ("input_layernorm", "self_attn_layer_norm"),
    ("post_attention_layernorm", "final_layer_norm"),
];

/// `OPTForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    ties_embeddings: true,
    ..FamilyRow::new("OPTForCausalLM", "opt", &Opt)
};

impl Family for Opt {
    fn attention_biases(&self, hf: &HfLlamaConfig) -> super::AttentionBiases {
        let bias = hf.opt.enable_bias.unwrap_or(true);
        super::AttentionBiases { qkv: bias, o: bias }
    }

    /// PyTorch's `nn.LayerNorm` default; OPT's configs do not set it.
    fn norm_eps(&self, _hf: &HfLlamaConfig) -> f64 {
        1e-5
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        super::renamed(
            name,
            "model.decoder",
            "model.decoder.layers",
            &LAYER_NAMES,
            &[("norm", "final_layer_norm")],
        )
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        match hf.activation_name() {
            None | Some("relu") => {}
            Some(other) => {
                return Err(invalid(
                    "activation_function",
                    format!("is `{other}`; OPT takes `relu`"),
                ))
            }
        }
        if hf.opt.do_layer_norm_before == Some(false) {
            return Err(invalid(
                "do_layer_norm_before",
                "is false (OPT-350m's post-norm layout), which is not supported".into(),
            ));
        }
        if let Some(width) = hf.opt.word_embed_proj_dim.filter(|&w| w != hf.hidden_size) {
            return Err(invalid(
                "word_embed_proj_dim",
                format!(
                    "({width}) differs from hidden_size ({}): projected embeddings \
                     (OPT-350m) are not supported",
                    hf.hidden_size
                ),
            ));
        }
        if hf.opt.layer_norm_elementwise_affine == Some(false) {
            return Err(invalid(
                "layer_norm_elementwise_affine",
                "is false; only LayerNorms with gains and biases are supported".into(),
            ));
        }
        if hf.opt.remove_final_layer_norm == Some(true) {
            return Err(invalid(
                "_remove_final_layer_norm",
                "is true; only OPT with its final LayerNorm is supported".into(),
            ));
        }
        Ok(DecoderExtras {
            activation: Activation::Relu,
            layer_norm: true,
            ungated_mlp: true,
            mlp_bias: hf.opt.enable_bias.unwrap_or(true),
            learned_positions: true,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([
            ("ffn_dim", config.intermediate_size.into()),
            (
                "activation_function",
                config.extras.activation.hf_name().into(),
            ),
            ("do_layer_norm_before", true.into()),
            ("enable_bias", config.extras.mlp_bias.into()),
            ("word_embed_proj_dim", config.hidden_size.into()),
            ("layer_norm_elementwise_affine", true.into()),
            ("_remove_final_layer_norm", false.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// OPT-125m's `config.json`, as the hub has it.
    const OPT_125M: &str = r#"{"_name_or_path":"facebook/opt-125m","_remove_final_layer_norm":false,
        "activation_dropout":0.0,"activation_function":"relu","architectures":["OPTForCausalLM"],
        "attention_dropout":0.0,"bos_token_id":2,"do_layer_norm_before":true,"dropout":0.1,
        "eos_token_id":2,"ffn_dim":3072,"hidden_size":768,"init_std":0.02,"layerdrop":0.0,
        "max_position_embeddings":2048,"model_type":"opt","num_attention_heads":12,
        "num_hidden_layers":12,"pad_token_id":1,"prefix":"</s>","torch_dtype":"float16",
        "transformers_version":"4.21.0.dev0","use_cache":true,"vocab_size":50272,
        "word_embed_proj_dim":768}"#;

    #[test]
    fn opt_125m_resolves_to_its_shapes_and_writes_back() {
        let c = HfLlamaConfig::from_json(OPT_125M)
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(c.architecture, Architecture::Opt);
        assert_eq!((c.intermediate_size, c.head_dim), (3072, 64));
        assert_eq!(c.num_key_value_heads, 12);
        assert!(c.tie_word_embeddings && c.qkv_bias && c.o_bias);
        assert_eq!(c.rms_norm_eps, 1e-5);
        let e = &c.extras;
        assert!(e.layer_norm && e.ungated_mlp && e.mlp_bias && e.learned_positions);
        assert_eq!(e.activation, Activation::Relu);
        let json = c.to_hf_json();
        assert_eq!(json["ffn_dim"], 3072);
        assert_eq!(json["activation_function"], "relu");
        assert_eq!(json["word_embed_proj_dim"], 768);
        let again = HfLlamaConfig::from_json(&json.to_string())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(again, c);
        // OPT-125m's published parameter count: embeddings, 2050 learned positions, twelve
        // layers of six biased linears and two LayerNorms, the final LayerNorm.
        let shape = ModelShape::from_config(&c);
        assert_eq!(shape.parameters, 125_239_296);
        assert_eq!(
            shape.linear_parameters_per_layer(),
            4 * 768 * 768 + 2 * 768 * 3072
        );
    }

    #[test]
    fn every_tensor_is_found_under_its_opt_name() {
        let c = HfLlamaConfig::from_json(OPT_125M)
            .unwrap()
            .resolve()
            .unwrap();
        let names = [
            (
                "model.embed_tokens.weight",
                "model.decoder.embed_tokens.weight",
            ),
            (
                "model.embed_positions.weight",
                "model.decoder.embed_positions.weight",
            ),
            ("model.norm.bias", "model.decoder.final_layer_norm.bias"),
            (
                "model.layers.11.self_attn.o_proj.weight",
                "model.decoder.layers.11.self_attn.out_proj.weight",
            ),
            (
                "model.layers.0.self_attn.q_proj.bias",
                "model.decoder.layers.0.self_attn.q_proj.bias",
            ),
            (
                "model.layers.3.mlp.up_proj.bias",
                "model.decoder.layers.3.fc1.bias",
            ),
            (
                "model.layers.3.mlp.down_proj.weight",
                "model.decoder.layers.3.fc2.weight",
            ),
            (
                "model.layers.2.input_layernorm.weight",
                "model.decoder.layers.2.self_attn_layer_norm.weight",
            ),
            (
                "model.layers.2.post_attention_layernorm.bias",
                "model.decoder.layers.2.final_layer_norm.bias",
            ),
        ];
        for (ours, theirs) in names {
            assert_eq!(
                Opt.checkpoint_name(&c, ours).as_deref(),
                Some(theirs),
                "{ours}"
            );
        }
        assert_eq!(Opt.checkpoint_name(&c, "lm_head.weight"), None);
        assert_eq!(
            Opt.checkpoint_name(&c, "model.layers.0.mlp.gate_proj.weight"),
            None
        );
    }

    #[test]
    fn the_post_norm_and_projected_layouts_are_refused_by_name() {
        for (key, value) in [
            ("do_layer_norm_before", "false"),
            ("word_embed_proj_dim", "512"),
            ("activation_function", r#""gelu""#),
            ("_remove_final_layer_norm", "true"),
        ] {
            let json = OPT_125M.replacen(
                &format!(r#""{key}":"#),
                &format!(r#""{key}":{value},"ignored_{key}":"#),
                1,
            );
            let e = HfLlamaConfig::from_json(&json)
                .unwrap()
                .resolve()
                .unwrap_err();
            assert!(e.to_string().contains(key), "{key}: {e}");
        }
    }
}
