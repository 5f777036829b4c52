//! Mistral: Llama's layer with sliding-window attention over `sliding_window` tokens. llama.cpp
//! writes Mistral GGUF files as `llama`, so they load as that family.

use super::Family;
use crate::model::config::HfLlamaConfig;

/// `MistralForCausalLM`.
pub struct Mistral;

impl Family for Mistral {
    fn hf_class(&self) -> &'static str {
        "MistralForCausalLM"
    }

    fn model_type(&self) -> &'static str {
        "mistral"
    }

    fn sliding_window(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.sliding_window
    }
}
