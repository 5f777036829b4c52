//! Qwen2: Llama's layer with biases on the q, k and v projections (never on the output
//! projection), whatever `attention_bias` says.

use super::{AttentionBiases, Family};
use crate::model::config::HfLlamaConfig;

/// `Qwen2ForCausalLM`.
pub struct Qwen2;

impl Family for Qwen2 {
    fn hf_class(&self) -> &'static str {
        "Qwen2ForCausalLM"
    }

    fn model_type(&self) -> &'static str {
        "qwen2"
    }

    fn gguf_arch(&self) -> Option<&'static str> {
        Some("qwen2")
    }

    fn attention_biases(&self, _hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases {
            qkv: true,
            o: false,
        }
    }
}
