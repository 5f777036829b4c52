//! Llama 1/2/3 and the models of its shape (SmolLM, TinyLlama, …): the reference family; every
//! [`Family`] default is Llama's.

use std::collections::BTreeMap;

use super::{Family, FamilyRow};
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `LlamaForCausalLM`.
pub struct Llama;

/// `LlamaForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    gguf_arch: Some("llama"),
    gguf_interleaves_qk: true,
    ..FamilyRow::new("LlamaForCausalLM", "llama", &Llama)
};

impl Family for Llama {
    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::llama_layer(hf, "Llama")
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([("mlp_bias", config.extras.mlp_bias.into())])
    }
}
