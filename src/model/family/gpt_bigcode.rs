//! GPT-BigCode (`GPTBigCodeForCausalLM`, model type `gpt_bigcode`: BigCode's StarCoder 1,
//! StarCoderBase, SantaCoder, WizardCoder 15B, Granite-20B-Code): GPT-2's layer and names
//! ([`super::gpt2`]) with
//! - multi-query attention (`multi_query`, default true): one key/value head for all query
//!   heads; false gives one per query head;
//! - q, k and v stacked in `attn.c_attn` **by kv head**: with one kv head, all queries, the
//!   key, the value; without multi-query, head by head (each head's query, key and value rows
//!   in turn, as transformers splits them);
//! - plain linears (no `Conv1D`: weights in PyTorch's `[out, in]`);
//! - the tanh GELU (`gelu_pytorch_tanh`) by default.

use std::collections::BTreeMap;

use super::gpt2::{gpt2_hf_keys, gpt2_layer, gpt2_name};
use super::{AttentionBiases, ClassDefaults, Family, FamilyRow};
use crate::model::arch::{Activation, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `GPTBigCodeForCausalLM`.
pub struct GptBigCode;

/// `GPTBigCodeForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults::positions(1024),
    // llama.cpp's `starcoder` (multi-query only: its converter writes one kv head).
    gguf_arch: Some("starcoder"),
    ties_embeddings: true,
    fused_linears: &super::QUERY_KEY_VALUE_BY_KV_HEAD,
    ..FamilyRow::new("GPTBigCodeForCausalLM", "gpt_bigcode", &GptBigCode)
};

impl Family for GptBigCode {
    /// Every attention projection carries a bias.
    fn attention_biases(&self, _hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases { qkv: true, o: true }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.layer_norm_eps.unwrap_or(1e-5)
    }

    /// One with `multi_query` (the default), else one per query head; transformers derives
    /// `num_key_value_heads` the same way, whatever the file says.
    fn key_value_heads(&self, hf: &HfLlamaConfig) -> Option<usize> {
        Some(match hf.falcon.multi_query.unwrap_or(true) {
            true => 1,
            false => hf.num_attention_heads,
        })
    }

    /// `n_inner` (read as `intermediate_size`), else four times the hidden width.
    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        super::width_or_four_hidden(hf)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        gpt2_name(name)
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        gpt2_layer(hf, "GPT-BigCode", Activation::GeluTanh)
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = gpt2_hf_keys(config);
        keys.insert("multi_query", (config.num_key_value_heads == 1).into());
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// bigcode/starcoderbase-1b's `config.json` (its inference-runner keys left out).
    const STARCODERBASE_1B: &str = r#"{"activation_function":"gelu_pytorch_tanh",
        "architectures":["GPTBigCodeForCausalLM"],"attention_softmax_in_fp32":true,
        "attn_pdrop":0.1,"bos_token_id":0,"embd_pdrop":0.1,"eos_token_id":0,
        "initializer_range":0.02,"layer_norm_epsilon":1e-05,"model_type":"gpt_bigcode",
        "multi_query":true,"n_embd":2048,"n_head":16,"n_inner":8192,"n_layer":24,
        "n_positions":8192,"resid_pdrop":0.1,"scale_attention_softmax_in_fp32":true,
        "scale_attn_weights":true,"use_cache":true,"vocab_size":49152}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn starcoderbase_1b_resolves_to_its_layer_and_parameter_count() {
        let c = resolve(STARCODERBASE_1B).unwrap();
        assert_eq!(c.architecture, Architecture::GptBigCode);
        assert_eq!((c.head_dim, c.num_key_value_heads), (128, 1));
        assert_eq!(
            (c.intermediate_size, c.max_position_embeddings),
            (8192, 8192)
        );
        assert!(c.qkv_bias && c.o_bias && c.tie_word_embeddings);
        let e = &c.extras;
        assert!(e.layer_norm && e.ungated_mlp && e.mlp_bias && e.learned_positions);
        assert_eq!(e.position_offset(), 0);
        assert_eq!(e.activation, Activation::GeluTanh);
        // transformers' `num_parameters()` of this config: 1,137,207,296.
        assert_eq!(ModelShape::from_config(&c).parameters, 1_137_207_296);
        assert_eq!(c.to_hf_json()["multi_query"], true);
        assert_eq!(
            GptBigCode.checkpoint_name(&c, "model.layers.5.self_attn.qkv_proj.bias"),
            Some("transformer.h.5.attn.c_attn.bias".into())
        );
        assert!(!ROW.stores_transposed("transformer.h.5.attn.c_attn.weight"));
    }

    #[test]
    fn without_multi_query_every_head_has_its_key_and_value() {
        let json = STARCODERBASE_1B.replace(r#""multi_query":true"#, r#""multi_query":false"#);
        let c = resolve(&json).unwrap();
        assert_eq!(c.num_key_value_heads, 16);
        assert_eq!(c.to_hf_json()["multi_query"], false);
        // transformers ignores the file's own count: `multi_query` decides.
        let json =
            STARCODERBASE_1B.replace(r#""n_head":16"#, r#""n_head":16,"num_key_value_heads":4"#);
        assert_eq!(resolve(&json).unwrap().num_key_value_heads, 1);
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        for (from, to, key) in [
            (r#""gelu_pytorch_tanh""#, r#""silu""#, "activation_function"),
            (
                r#""scale_attn_weights":true"#,
                r#""scale_attn_weights":false"#,
                "scale_attn_weights",
            ),
        ] {
            let err = resolve(&STARCODERBASE_1B.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{to}: {err}");
        }
    }
}
