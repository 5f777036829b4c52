//! What every checkpoint format answers ([`WeightSource`]): a tensor by its Hugging Face name,
//! as f32 or in its stored type ([`HostTensor`], [`HostData`]), and the errors of reading one.

use burn::prelude::*;
use burn::tensor::DType;

use crate::model::kernels::narrowed;
use crate::model::kernels::transpose;

/// Errors while reading weights.
#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    /// A file could not be opened or mapped.
    #[error("cannot read `{path}`")]
    Io {
        /// The file.
        path: String,
        /// The I/O cause.
        #[source]
        source: std::io::Error,
    },
    /// A safetensors header or index is malformed.
    #[error("`{path}` is not a valid safetensors file: {reason}")]
    BadSafetensors {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor the model needs is absent.
    #[error("tensor `{name}` is missing from `{source_name}`")]
    Missing {
        /// Hugging Face tensor name.
        name: String,
        /// The checkpoint.
        source_name: String,
    },
    /// A tensor has the wrong shape for the config.
    #[error("tensor `{name}` in `{source_name}` has shape {found:?}, expected {expected:?}")]
    Shape {
        /// Hugging Face tensor name.
        name: String,
        /// The checkpoint.
        source_name: String,
        /// Shape in the file.
        found: Vec<usize>,
        /// Shape the config implies.
        expected: Vec<usize>,
    },
    /// A dtype this loader does not read.
    #[error("tensor `{name}` in `{path}` has dtype `{dtype}`; supported: F32, F16, BF16 and block-scaled F8_E4M3")]
    Dtype {
        /// Tensor name.
        name: String,
        /// The file.
        path: String,
        /// The dtype found.
        dtype: String,
    },
    /// A GGUF-level error.
    #[error(transparent)]
    Gguf(#[from] crate::model::checkpoint::gguf::GgufError),
}

/// A tensor on the host: row-major f32 data in PyTorch layout.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostTensor {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub data: Vec<f32>,
}

/// Something that can hand out checkpoint tensors by Hugging Face name.
pub trait WeightSource {
    /// Short description for messages (file or folder).
    fn name(&self) -> String;
    /// The tensor called `name` (HF naming), or `None` if the checkpoint does not have it.
    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError>;
    /// The parameter count of every tensor in the checkpoint, read from headers only.
    fn parameter_count(&self) -> u64;
    /// The matrix called `name` with its values transposed: `shape` is still the checkpoint's
    /// `[rows, cols]`, `data` is `[cols, rows]` row-major (a linear weight in Burn's layout). A
    /// source that can convert and transpose in one pass overrides it.
    fn tensor_transposed(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        Ok(self.tensor(name)?.map(|t| match t.shape[..] {
            [rows, cols] => HostTensor {
                data: transpose(&t.data, rows, cols),
                shape: t.shape,
            },
            _ => t,
        }))
    }
    /// [`Self::tensor_transposed`] with its values in the float type `dtype`, the one the
    /// device computes in: by default converted from f32 ([`narrowed`]); a source of 16-bit
    /// values overrides it to convert each value once, straight into that type.
    fn tensor_transposed_in(
        &self,
        name: &str,
        dtype: DType,
    ) -> Result<Option<HostData>, WeightError> {
        Ok(self
            .tensor_transposed(name)?
            .map(|t| HostData::from_transposed(t, dtype)))
    }
    /// Entry `index` of the tensor `name` along its first dimension (one expert of a 3-D
    /// expert stack), shaped as the rest of its dimensions; `None` if the checkpoint does not
    /// have the tensor. By default the whole tensor is read and the entry copied out; a source
    /// that can read the entry alone overrides it.
    fn tensor_entry(&self, name: &str, index: usize) -> Result<Option<HostTensor>, WeightError> {
        let Some(t) = self.tensor(name)? else {
            return Ok(None);
        };
        Ok(Some(entry_of(name, &self.name(), t.shape, &t.data, index)?))
    }
    /// Drops the pages of memory-mapped files read so far from the process's resident set
    /// (they stay in the page cache); layer streaming calls it after reading each layer.
    fn release_pages(&self) {}
}

/// Entry `index` along the first dimension of the tensor `name` (of `source`), whose `shape`
/// and row-major `data` are given; an error naming the tensor where it has no such entry.
fn entry_of(
    name: &str,
    source: &str,
    shape: Vec<usize>,
    data: &[f32],
    index: usize,
) -> Result<HostTensor, WeightError> {
    let outer = shape.first().copied().unwrap_or(0);
    if shape.len() < 2 || index >= outer {
        return Err(WeightError::Shape {
            name: name.to_string(),
            source_name: source.to_string(),
            expected: vec![index + 1, 0],
            found: shape,
        });
    }
    let rest = shape[1..].to_vec();
    let len: usize = rest.iter().product();
    Ok(HostTensor {
        data: data[index * len..][..len].to_vec(),
        shape: rest,
    })
}

/// A checkpoint matrix transposed into Burn's layout, in the device's float type
/// ([`WeightSource::tensor_transposed_in`]).
pub struct HostData {
    /// The checkpoint's shape, `[rows, cols]`.
    pub shape: Vec<usize>,
    /// The values, `[cols, rows]`.
    pub data: TensorData,
}

impl HostData {
    /// `t` from [`WeightSource::tensor_transposed`], converted to `dtype`.
    pub(crate) fn from_transposed(t: HostTensor, dtype: DType) -> Self {
        Self {
            data: narrowed(TensorData::new(t.data, transposed_shape(&t.shape)), dtype),
            shape: t.shape,
        }
    }
}

/// The shape of a matrix's values once transposed (`[cols, rows]`); any other tensor's own.
pub(crate) fn transposed_shape(shape: &[usize]) -> Vec<usize> {
    match *shape {
        [rows, cols] => vec![cols, rows],
        _ => shape.to_vec(),
    }
}

/// A tensor read from a checkpoint, by its checkpoint shape.
pub(crate) trait Shaped {
    fn shape(&self) -> &[usize];
}

impl Shaped for HostTensor {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
}

impl Shaped for HostData {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
}
