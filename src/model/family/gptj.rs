//! GPT-J (`GPTJForCausalLM`, model type `gptj`: EleutherAI's GPT-J-6B and its fine-tunes), a
//! parallel layer on one LayerNorm (`ln_1`, epsilon `layer_norm_epsilon`): the layer returns
//! `x + attn(ln_1(x)) + mlp(ln_1(x))`, with
//! - interleaved RoPE (`rotate_every_two`: neighbouring dimensions pair up) on the first
//!   `rotary_dim` dimensions of each head (64 of 256 in GPT-J-6B), base 10,000;
//! - q/k/v and output projections without biases, an MLP without a gate and with biases,
//!   `fc_out(gelu_tanh(fc_in(x)))`, `n_inner` wide (default 4 × hidden);
//! - an untied LM head with a bias of its own;
//! - GPT-2's key names (`n_embd`, `n_layer`, `n_head`, `n_positions`, `n_inner`) and every tensor
//!   under `transformer.` (`wte`, `h.N`, `ln_f`).

use std::collections::BTreeMap;

use super::{AttentionBiases, Family, FamilyRow};
use crate::model::arch::{
    invalid, Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig,
};

/// `GPTJForCausalLM`.
pub struct Gptj;

/// The decoder's names of a layer's tensors and GPT-J's, relative to the layer (the one norm
/// serves both of the decoder's).
const LAYER_NAMES: [(&str, &str); 8] = [
    ("self_attn.q_proj", "attn.q_proj"),
    ("self_attn.k_proj", "attn.k_proj"),
    ("self_attn.v_proj", "attn.v_proj"),
    ("self_attn.o_proj", "attn.out_proj"),
    ("mlp.up_proj", "mlp.fc_in"),
    ("mlp.down_proj", "mlp.fc_out"),
    ("input_layernorm", "ln_1"),
    ("post_attention_layernorm", "ln_1"),
];

/// The decoder's names of the tensors outside the layers and GPT-J's, without `model.`.
const MODEL_NAMES: [(&str, &str); 2] = [("embed_tokens", "wte"), ("norm", "ln_f")];

/// `GPTJForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow::new("GPTJForCausalLM", "gptj", &Gptj);

impl Family for Gptj {
    /// No attention projection carries a bias.
    fn attention_biases(&self, _hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases {
            qkv: false,
            o: false,
        }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    /// `n_inner` (read as `intermediate_size`), else four times the hidden width.
    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        super::width_or_four_hidden(hf)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        super::renamed(
            name,
            "transformer",
            "transformer.h",
            &LAYER_NAMES,
            &MODEL_NAMES,
        )
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let activation =
            super::gelu_activation(hf, "activation_function", "GPT-J", Activation::GeluTanh)?;
        super::refuse_grouped_heads(hf, "GPT-J")?;
        super::refuse_tied_biased_head(hf, "GPT-J")?;
        let head_dim = hf.hidden_per_head();
        // transformers rotates `rotary_dim` dimensions; without it, tables as wide as the
        // whole hidden state, which no head can take.
        let rotary = match hf.own_key::<usize>("rotary_dim")? {
            Some(r) if r > 0 && r <= head_dim && r.is_multiple_of(2) => r,
            other => {
                return Err(invalid(
                    "rotary_dim",
                    format!(
                        "is {other:?}; GPT-J rotates an even number of a head's {head_dim} \
                         dimensions (64 in GPT-J-6B)"
                    ),
                ))
            }
        };
        Ok(DecoderExtras {
            activation,
            layer_norm: true,
            ungated_mlp: true,
            mlp_bias: true,
            parallel_residual: true,
            shared_norm: true,
            rotary_dim: (rotary != head_dim).then_some(rotary),
            interleaved_rotary: true,
            lm_head_bias: true,
            ..DecoderExtras::default()
        })
    }

    /// GPT-2's keys and `rotary_dim`.
    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = super::gpt2::gpt2_hf_keys(config);
        keys.insert("rotary_dim", config.rotary_dim().into());
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// EleutherAI/gpt-j-6b's `config.json`, as the hub has it (its task parameters left out).
    const GPT_J_6B: &str = r#"{"activation_function":"gelu_new",
        "architectures":["GPTJForCausalLM"],"attn_pdrop":0.0,"bos_token_id":50256,
        "embd_pdrop":0.0,"eos_token_id":50256,"gradient_checkpointing":false,
        "initializer_range":0.02,"layer_norm_epsilon":1e-05,"model_type":"gptj","n_embd":4096,
        "n_head":16,"n_inner":null,"n_layer":28,"n_positions":2048,"resid_pdrop":0.0,
        "rotary":true,"rotary_dim":64,"scale_attn_weights":true,"tie_word_embeddings":false,
        "tokenizer_class":"GPT2Tokenizer","transformers_version":"4.18.0.dev0","use_cache":true,
        "vocab_size":50400}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn gpt_j_6b_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(GPT_J_6B).unwrap();
        assert_eq!(c.architecture, Architecture::Gptj);
        assert_eq!((c.hidden_size, c.num_hidden_layers), (4096, 28));
        assert_eq!((c.head_dim, c.rotary_dim()), (256, 64));
        assert_eq!(
            (c.intermediate_size, c.max_position_embeddings),
            (16384, 2048)
        );
        assert!(!c.qkv_bias && !c.o_bias && !c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.parallel_residual && e.shared_norm && e.layer_norm && e.ungated_mlp);
        assert!(e.mlp_bias && e.lm_head_bias && e.interleaved_rotary);
        assert_eq!(e.activation, Activation::GeluTanh);
        // GPT-J-6B's 6,050,882,784 (transformers' `num_parameters()`): 28 layers of
        // 201,355,264, the final norm, the embeddings and the biased head.
        assert_eq!(ModelShape::from_config(&c).parameters, 6_050_882_784);
        let json = c.to_hf_json();
        assert_eq!(json["rotary_dim"], 64);
        assert_eq!(json["n_inner"], 16384);
        assert_eq!(json["layer_norm_epsilon"], 1e-5);
    }

    #[test]
    fn names_map_to_gpt_j_checkpoints() {
        let c = resolve(GPT_J_6B).unwrap();
        let theirs = |n: &str| Gptj.checkpoint_name(&c, n);
        for (ours, gptj) in [
            (
                "model.layers.2.self_attn.o_proj.weight",
                "transformer.h.2.attn.out_proj.weight",
            ),
            (
                "model.layers.0.mlp.up_proj.bias",
                "transformer.h.0.mlp.fc_in.bias",
            ),
            (
                "model.layers.1.post_attention_layernorm.bias",
                "transformer.h.1.ln_1.bias",
            ),
            ("model.embed_tokens.weight", "transformer.wte.weight"),
            ("model.norm.weight", "transformer.ln_f.weight"),
        ] {
            assert_eq!(theirs(ours).as_deref(), Some(gptj), "{ours}");
        }
        assert_eq!(theirs("lm_head.bias"), None);
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        for (from, to, key) in [
            (r#""rotary_dim":64"#, r#""rotary_dim":null"#, "rotary_dim"),
            (r#""rotary_dim":64"#, r#""rotary_dim":63"#, "rotary_dim"),
            (r#""gelu_new""#, r#""relu""#, "activation_function"),
            (
                r#""tie_word_embeddings":false"#,
                r#""tie_word_embeddings":true"#,
                "tie_word_embeddings",
            ),
        ] {
            let err = resolve(&GPT_J_6B.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{to}: {err}");
        }
    }
}
