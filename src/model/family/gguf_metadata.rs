//! What a family reads of a GGUF file beyond the keys every family shares: the metadata view
//! ([`GgufMetadata`]) that [`super::Family::read_gguf`] takes, and the reading that several
//! families share.

use crate::model::arch::HfLlamaConfig;

/// A GGUF file's metadata as a family reads it: the values under the file's architecture
/// prefix (`<arch>.<key>`).
pub trait GgufMetadata {
    /// The unsigned integer at `<arch>.<key>`.
    fn u64(&self, key: &str) -> Option<u64>;
    /// The number at `<arch>.<key>`.
    fn f64(&self, key: &str) -> Option<f64>;
}

/// For a family whose heads rotate in part, where llama.cpp writes the rotated dimensions
/// (`rope.dimension_count`) and not the head's width: sets the width (`attention.key_length`,
/// else `hidden_size / num_attention_heads`) and returns the rotated share of it (Phi-4-mini
/// rotates 96 of 128, GLM-4 and Nemotron half of each head, Pythia and StableLM a quarter,
/// Phi-2 two fifths).
pub(crate) fn rotated_share(meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) -> Option<f64> {
    let width = meta
        .u64("attention.key_length")
        .map_or(hf.hidden_per_head(), |w| w as usize);
    hf.head_dim = Some(width);
    meta.u64("rope.dimension_count")
        .map(|rotated| rotated as f64 / width as f64)
}

/// Granite's attention factor where the file gives none (the converter leaves out a 0
/// multiplier): `head_dim^-0.5`, as llama.cpp scales the scores then.
pub(crate) fn default_attention_scale(hf: &mut HfLlamaConfig) {
    let head_dim = hf.head_dim.unwrap_or(hf.hidden_per_head());
    hf.multipliers
        .attention_multiplier
        .get_or_insert((head_dim as f64).powf(-0.5));
}
