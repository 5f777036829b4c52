//! The top floor of [`crate::model`]: checkpoints in and out. Sources ([`WeightSource`]:
//! safetensors folders, GGUF files, the hub, fp8 and MXFP4 tensors, experts stacked in 3-D
//! tensors), building a model from them, loading by name ([`load`]), saving a Hugging Face
//! folder ([`save_hf_folder`]), layer streaming with its store, synthetic models and the
//! tokenizer.

mod adapters;
mod build;
mod encode;
mod expert_stacks;
mod export;
mod fp8;
pub mod gguf;
mod load;
mod load_error;
mod mxfp4;
mod safetensors;
mod source;
mod stream;
mod synth;
mod tokenizer;

pub use adapters::*;
pub use build::*;
pub use encode::*;
pub use expert_stacks::*;
pub use export::*;
pub use load::*;
pub use load_error::*;
pub use safetensors::*;
pub use source::*;
pub use stream::*;
pub use synth::*;
pub use tokenizer::*;
