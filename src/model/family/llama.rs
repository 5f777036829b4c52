//! Llama 1/2/3 and the models of its shape (SmolLM, TinyLlama, …): the reference family; every
//! [`Family`] default is Llama's.

use super::Family;

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
}
