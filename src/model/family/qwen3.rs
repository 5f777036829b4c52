//! Qwen3: Llama's layer with an RMSNorm over each query and key head (`q_norm`, `k_norm`,
//! `[head_dim]` gains, applied after the projections and before RoPE), no biases unless
//! `attention_bias` says so, a `head_dim` of its own (not `hidden / heads`), and Qwen2's
//! sliding layers where `use_sliding_window` says ([`super::qwen2`]).

use std::collections::BTreeMap;

use super::qwen2::{qwen_extras, qwen_hf_keys};
use super::{ClassDefaults, Family, FamilyRow};
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `Qwen3ForCausalLM`.
pub struct Qwen3;

/// `Qwen3ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(32),
        head_dim: Some(128),
        max_positions: 32_768,
    },
    gguf_arch: Some("qwen3"),
    ..FamilyRow::new("Qwen3ForCausalLM", "qwen3", &Qwen3)
};

impl Family for Qwen3 {
    fn qk_norm(&self, _hf: &HfLlamaConfig) -> bool {
        true
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        qwen_extras(hf, "Qwen3")
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        qwen_hf_keys(config)
    }
}
