//! Llama 1/2/3 and the models of its shape (SmolLM, TinyLlama, …): the reference family; every
//! [`Family`] default is Llama's.

use std::collections::BTreeMap;

use super::Family;
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `LlamaForCausalLM`.
pub struct Llama;

impl Family for Llama {
    fn hf_class(&self) -> &'static str {
        "LlamaForCausalLM"
    }

    fn model_type(&self) -> &'static str {
        "llama"
    }

    fn gguf_arch(&self) -> Option<&'static str> {
        Some("llama")
    }

    fn gguf_interleaves_qk(&self) -> bool {
        true
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::llama_layer(hf, "Llama")
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([("mlp_bias", config.extras.mlp_bias.into())])
    }
}
