//! Phi-3: Llama's layer, stored with the query, key and value projections stacked in one
//! `self_attn.qkv_proj` and the MLP's gate and up projections in one `mlp.gate_up_proj` (rows
//! in that order), with a sliding window. The decoder holds them as the separate matrices they
//! are; loading splits them ([`crate::model::weights::SplitSource`]), pruning selects over each
//! stack as the one matrix the reference code sees ([`crate::model::llama::DecoderLayer::stacked`]),
//! and saving stacks them again.

use super::{Family, FusedLinear};
use crate::model::config::HfLlamaConfig;

/// `Phi3ForCausalLM`.
pub struct Phi3;

impl Family for Phi3 {
    fn hf_class(&self) -> &'static str {
        "Phi3ForCausalLM"
    }

    fn model_type(&self) -> &'static str {
        "phi3"
    }

    fn sliding_window(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.sliding_window
    }

    fn fused_linears(&self) -> &'static [FusedLinear] {
        &[
            FusedLinear {
                fused: "self_attn.qkv_proj",
                parts: &["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
                per_kv_head: false,
            },
            FusedLinear {
                fused: "mlp.gate_up_proj",
                parts: &["mlp.gate_proj", "mlp.up_proj"],
                per_kv_head: false,
            },
        ]
    }
}
