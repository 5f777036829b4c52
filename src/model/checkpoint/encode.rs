//! The element types a saved tensor is written in ([`SaveDtype`]) and their little-endian bytes.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Element type of the saved tensors (a pipeline's `save.dtype`, `wanda prune --dtype`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Dtype")]
pub enum SaveDtype {
    /// 32-bit float.
    F32,
    /// 16-bit float (IEEE half), the default of a pipeline's `save` stage.
    #[default]
    F16,
    /// bfloat16.
    Bf16,
}

/// The little-endian bytes of `values` in `dtype` into `bytes` (its allocation reused),
/// converted in parallel blocks.
pub(crate) fn encode(values: &[f32], dtype: SaveDtype, bytes: &mut Vec<u8>) {
    const BLOCK: usize = 1 << 14;
    let size = dtype.size() as usize;
    bytes.resize(values.len() * size, 0);
    bytes
        .par_chunks_mut(BLOCK * size)
        .zip(values.par_chunks(BLOCK))
        .for_each(|(out, values)| {
            let slots = out.chunks_exact_mut(size).zip(values);
            match dtype {
                SaveDtype::F32 => slots.for_each(|(o, v)| o.copy_from_slice(&v.to_le_bytes())),
                SaveDtype::F16 => slots
                    .for_each(|(o, v)| o.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes())),
                SaveDtype::Bf16 => slots
                    .for_each(|(o, v)| o.copy_from_slice(&half::bf16::from_f32(*v).to_le_bytes())),
            }
        });
}

impl SaveDtype {
    /// Bytes per element.
    pub(crate) fn size(self) -> u64 {
        match self {
            SaveDtype::F32 => 4,
            SaveDtype::F16 | SaveDtype::Bf16 => 2,
        }
    }

    /// PyTorch's name of the type, as `config.json` writes it (`torch_dtype`).
    pub(crate) fn torch_name(self) -> &'static str {
        match self {
            SaveDtype::F32 => "float32",
            SaveDtype::F16 => "float16",
            SaveDtype::Bf16 => "bfloat16",
        }
    }

    /// The safetensors header's name of the type.
    pub(crate) fn header_name(self) -> &'static str {
        match self {
            SaveDtype::F32 => "F32",
            SaveDtype::F16 => "F16",
            SaveDtype::Bf16 => "BF16",
        }
    }
}
