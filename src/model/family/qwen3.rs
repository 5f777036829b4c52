//! Qwen3: Llama's layer with an RMSNorm over each query and key head (`q_norm`, `k_norm`,
//! `[head_dim]` gains, applied after the projections and before RoPE), no biases unless
//! `attention_bias` says so, and a `head_dim` of its own (not `hidden / heads`).

use super::Family;

/// `Qwen3ForCausalLM`.
pub struct Qwen3;

impl Family for Qwen3 {
    fn hf_class(&self) -> &'static str {
        "Qwen3ForCausalLM"
    }

    fn model_type(&self) -> &'static str {
        "qwen3"
    }

    fn gguf_arch(&self) -> Option<&'static str> {
        Some("qwen3")
    }

    fn qk_norm(&self) -> bool {
        true
    }
}
