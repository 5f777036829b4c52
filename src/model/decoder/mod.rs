//! The decoder on Burn: the shared blocks ([`Norm`], attention, the MLP), the Llama-shaped layer
//! every family runs ([`DecoderLayer`], [`Llama`]), sparse mixtures of experts, DeepSeek's latent
//! attention, Llama 4's chunked attention, GPT-OSS's attention sinks, and sampling.

mod blocks;
mod latent_attention;
mod layer;
mod llama4_attention;
mod moe;
mod sample;
mod sink_attention;
mod sparse;

pub use blocks::*;
pub(crate) use latent_attention::*;
pub use layer::*;
pub use llama4_attention::*;
pub(crate) use moe::*;
pub use sample::pick;
pub(crate) use sink_attention::*;
pub use sparse::*;
