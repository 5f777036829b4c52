//! Decoder models on Burn, in five floors, each a folder whose face re-exports what the floors
//! above may use; arrows point down only (`tests/it/architecture.rs` holds them):
//! - [`arch`]: names and descriptions: the [`arch::Architecture`] enum, the config types, the
//!   layer-feature descriptors (experts, latent and chunked attention, logit scale, stacked
//!   linears), RoPE and ALiBi math, and the shape memory formulas read;
//! - [`kernels`]: the decoder's fast CPU path and the CUDA kernels behind one seam, with host
//!   copies and transposes of tensors;
//! - [`decoder`]: the shared blocks (norms, attention, MLP), the Llama-shaped layer, experts,
//!   latent, chunked and sink attention, sampling;
//! - [`family`]: what each model family adds to the shared decoder, one file each, the registry
//!   from names to families, and config resolution;
//! - [`checkpoint`]: sources (safetensors, GGUF, the hub, expert stacks), building a model from
//!   them, export, layer streaming and its store, synthetic models, the tokenizer, and loading
//!   a model by name.

pub mod arch;
pub mod checkpoint;
pub mod decoder;
pub mod family;
pub mod kernels;

pub use checkpoint::{inspect, load, load_streamed, LoadError, Loaded, LoadedModel, ModelRef};
