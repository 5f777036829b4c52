//! Host-side weight sources and building a [`Llama`] from them.
//!
//! A [`WeightSource`] answers "give me the tensor with this Hugging Face name as f32, PyTorch
//! layout". Safetensors folders (single file or sharded, memory-mapped) and GGUF files
//! implement it, so the model builder has one code path for every format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::prelude::*;
use burn::tensor::DType;
use half::{bf16, f16};
use memmap2::Mmap;
use rayon::prelude::*;
use safetensors::tensor::{Dtype, Metadata};

use super::config::LlamaConfig;
use super::expert_stacks::ExpertStackSource;
use super::family::FusedLinear;
use super::host::{narrowed, weight_tensor};
use super::llama::{DecoderLayer, Llama, Norm};
use super::rope;
use crate::sys::phases::PhaseClock;

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
    Gguf(#[from] super::gguf::GgufError),
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
fn transposed_shape(shape: &[usize]) -> Vec<usize> {
    match *shape {
        [rows, cols] => vec![cols, rows],
        _ => shape.to_vec(),
    }
}

/// A checkpoint seen under the decoder's (Llama's) tensor names, for a family whose
/// checkpoints name tensors their own way ([`crate::model::family::Family::checkpoint_name`]:
/// OPT's `model.decoder.layers.N.fc1` is the decoder's `model.layers.N.mlp.up_proj`).
struct RenamedSource {
    inner: Arc<dyn WeightSource>,
    config: LlamaConfig,
}

impl RenamedSource {
    fn checkpoint_name<'n>(&self, name: &'n str) -> std::borrow::Cow<'n, str> {
        let family = self.config.architecture.family();
        match family.checkpoint_name(&self.config, name) {
            Some(theirs) => theirs.into(),
            None => name.into(),
        }
    }
}

impl WeightSource for RenamedSource {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        self.inner.tensor(&self.checkpoint_name(name))
    }

    fn tensor_transposed(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        self.inner.tensor_transposed(&self.checkpoint_name(name))
    }

    fn tensor_transposed_in(
        &self,
        name: &str,
        dtype: DType,
    ) -> Result<Option<HostData>, WeightError> {
        self.inner
            .tensor_transposed_in(&self.checkpoint_name(name), dtype)
    }

    fn parameter_count(&self) -> u64 {
        self.inner.parameter_count()
    }

    fn release_pages(&self) {
        self.inner.release_pages();
    }
}

/// A Hugging Face checkpoint whose family stores some linear weights transposed, `[in, out]`
/// (GPT-2's `Conv1D`; [`crate::model::family::Family::transposed_linears`]), seen with every
/// weight in PyTorch's `[out, in]`. Names are the checkpoint's; GGUF files store those weights
/// as linears, so only folders are wrapped.
pub struct TransposedSource {
    inner: Arc<dyn WeightSource>,
    family: &'static dyn crate::model::family::Family,
}

impl TransposedSource {
    /// `inner` with the transposed weights of `config`'s family turned, when it has any.
    pub fn for_family(config: &LlamaConfig, inner: Arc<dyn WeightSource>) -> Arc<dyn WeightSource> {
        let family = config.architecture.family();
        if family.transposed_linears().is_empty() {
            return inner;
        }
        #[allow(clippy::arc_with_non_send_sync)]
        let source = Arc::new(Self { inner, family });
        source
    }
}

/// A Hugging Face checkpoint as the decoder reads it: under Llama's names, in PyTorch's
/// layout ([`TransposedSource`]), its stacked linears ([`SplitSource`]) and experts
/// ([`ExpertStackSource`]) apart.
pub fn hf_source(config: &LlamaConfig, checkpoint: SafetensorsSource) -> Arc<dyn WeightSource> {
    let stacks = super::expert_stacks::stacks_in(config, |name| checkpoint.has_tensor(name));
    let experts = ExpertStackSource::wrap(config, stacks, Arc::new(checkpoint));
    SplitSource::for_family(config, TransposedSource::for_family(config, experts))
}

/// `t` with its shape's two dimensions swapped (its values as they are).
fn swapped(mut t: HostTensor) -> HostTensor {
    t.shape.reverse();
    t
}

impl WeightSource for TransposedSource {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        if self.family.stores_transposed(name) {
            return Ok(self.inner.tensor_transposed(name)?.map(swapped));
        }
        self.inner.tensor(name)
    }

    fn tensor_transposed(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        if self.family.stores_transposed(name) {
            return Ok(self.inner.tensor(name)?.map(swapped));
        }
        self.inner.tensor_transposed(name)
    }

    fn tensor_transposed_in(
        &self,
        name: &str,
        dtype: DType,
    ) -> Result<Option<HostData>, WeightError> {
        if self.family.stores_transposed(name) {
            return Ok(self
                .tensor_transposed(name)?
                .map(|t| HostData::from_transposed(t, dtype)));
        }
        self.inner.tensor_transposed_in(name, dtype)
    }

    fn parameter_count(&self) -> u64 {
        self.inner.parameter_count()
    }

    fn release_pages(&self) {
        self.inner.release_pages();
    }
}

/// A checkpoint whose family stores linears stacked in one tensor (Phi-3's `qkv_proj`,
/// `gate_up_proj`), seen with the linears apart: `model.layers.N.self_attn.k_proj.weight` is
/// the rows of `model.layers.N.self_attn.qkv_proj.weight` after the query's. Every other name,
/// and a checkpoint that already has the linears apart, passes through.
pub struct SplitSource {
    inner: Arc<dyn WeightSource>,
    fused: &'static [FusedLinear],
    config: LlamaConfig,
    /// The stacked tensor read last: its parts are asked for one after another, and each
    /// would otherwise read and convert the whole stack again.
    last: std::sync::Mutex<Option<(String, Arc<HostTensor>)>>,
}

impl SplitSource {
    /// `inner` as the decoder reads it: under Llama's names ([`RenamedSource`]), split when
    /// the family of `config` stacks linears.
    pub fn for_family(config: &LlamaConfig, inner: Arc<dyn WeightSource>) -> Arc<dyn WeightSource> {
        // The loaders share sources as `Arc<dyn WeightSource>` on one thread at a time; the
        // trait does not require Send or Sync, so neither do these wrappers.
        #[allow(clippy::arc_with_non_send_sync)]
        let inner: Arc<dyn WeightSource> = Arc::new(RenamedSource {
            inner,
            config: config.clone(),
        });
        let fused = config.architecture.family().fused_linears();
        if fused.is_empty() {
            return inner;
        }
        #[allow(clippy::arc_with_non_send_sync)]
        let split = Arc::new(Self {
            inner,
            fused,
            config: config.clone(),
            last: std::sync::Mutex::new(None),
        });
        split
    }

    /// The stacked tensor `name`, from the one held when it is that one.
    fn stacked(&self, name: &str) -> Result<Option<Arc<HostTensor>>, WeightError> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((held, t)) = last.as_ref() {
            if held == name {
                return Ok(Some(Arc::clone(t)));
            }
        }
        // Drop the previous stack before reading the next.
        *last = None;
        let Some(t) = self.inner.tensor(name)? else {
            return Ok(None);
        };
        let t = Arc::new(t);
        *last = Some((name.to_owned(), Arc::clone(&t)));
        Ok(Some(t))
    }

    /// Where part `name` lives: the stacked tensor's name and the part's rows in it, one range
    /// (stacked part by part) or one per kv head (stacked by kv head).
    fn locate(&self, name: &str) -> Option<(String, Vec<std::ops::Range<usize>>)> {
        let rest = name.strip_prefix("model.layers.")?;
        let (layer, rest) = rest.split_once('.')?;
        let (module, kind) = rest.rsplit_once('.')?;
        let fused = self.fused.iter().find(|f| f.parts.contains(&module))?;
        let stacked = format!("model.layers.{layer}.{}.{kind}", fused.fused);
        let rows: Option<Vec<usize>> = fused
            .parts
            .iter()
            .map(|part| self.config.linear_outputs(part))
            .collect();
        let index = fused.parts.iter().position(|p| *p == module)?;
        let mut ranges = fused.row_ranges(&rows?, self.config.num_key_value_heads)?;
        Some((stacked, ranges.swap_remove(index)))
    }
}

impl WeightSource for SplitSource {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        if let Some(t) = self.inner.tensor(name)? {
            return Ok(Some(t));
        }
        let Some((stacked, ranges)) = self.locate(name) else {
            return Ok(None);
        };
        let Some(t) = self.stacked(&stacked)? else {
            return Ok(None);
        };
        let cols: usize = t.shape[1..].iter().product();
        let total = t.shape.first().copied().unwrap_or(0);
        let end = ranges.iter().map(|r| r.end).max().unwrap_or(0);
        if end > total {
            return Err(WeightError::Shape {
                name: stacked,
                source_name: self.inner.name(),
                expected: vec![end],
                found: t.shape.clone(),
            });
        }
        let mut shape = t.shape.clone();
        shape[0] = ranges.iter().map(|r| r.len()).sum();
        let mut data = Vec::with_capacity(shape[0] * cols);
        for rows in &ranges {
            data.extend_from_slice(&t.data[rows.start * cols..rows.end * cols]);
        }
        if end == total {
            // The stack's last part: nothing more will be asked of it.
            *self.last.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        Ok(Some(HostTensor { data, shape }))
    }

    fn parameter_count(&self) -> u64 {
        self.inner.parameter_count()
    }

    fn release_pages(&self) {
        self.inner.release_pages();
    }
}

/// One tensor of a safetensors shard, as stored.
struct Stored<'s> {
    name: String,
    path: &'s Path,
    bytes: &'s [u8],
    dtype: Dtype,
    shape: &'s [usize],
}

impl<'s> Stored<'s> {
    /// Entry `index` along the first dimension, a tensor of the others (of checkpoint
    /// `source`, for the error where there is no such entry).
    fn entry(&self, index: usize, source: &str) -> Result<Stored<'s>, WeightError> {
        let outer = self.shape.first().copied().unwrap_or(0);
        if self.shape.len() < 2 || index >= outer {
            return Err(WeightError::Shape {
                name: self.name.clone(),
                source_name: source.to_string(),
                expected: vec![index + 1, 0],
                found: self.shape.to_vec(),
            });
        }
        let per = self.bytes.len() / outer;
        Ok(Stored {
            name: self.name.clone(),
            path: self.path,
            bytes: &self.bytes[index * per..][..per],
            dtype: self.dtype,
            shape: &self.shape[1..],
        })
    }

    /// The `[rows, cols]` to transpose, when `transposed` and the tensor is a matrix.
    fn matrix(&self, transposed: bool) -> Option<[usize; 2]> {
        match self.shape {
            &[rows, cols] if transposed => Some([rows, cols]),
            _ => None,
        }
    }

    /// The values as f32 (f32, f16 or bf16 stored; widening is exact) mapped by `map`, a
    /// `matrix` transposed in the same pass ([`decode`]); `None` for any other stored type.
    fn widened<T: Copy + Default + Send>(
        &self,
        matrix: Option<[usize; 2]>,
        map: impl Fn(f32) -> T + Sync,
    ) -> Option<Vec<T>> {
        Some(match self.dtype {
            Dtype::F32 => decode(self.bytes, matrix, |b| map(f32::from_le_bytes(b))),
            Dtype::F16 => decode(self.bytes, matrix, |b| map(f16::from_le_bytes(b).to_f32())),
            Dtype::BF16 => decode(self.bytes, matrix, |b| map(bf16::from_le_bytes(b).to_f32())),
            _ => return None,
        })
    }

    /// The values in the 16-bit type `T` (stored as `own`, read by `read`), a matrix
    /// transposed: stored as `own` they are copied, stored as f32, f16 or bf16 they are
    /// narrowed from f32 by `narrow`; `None` for any other stored type.
    fn narrowed<T: burn::tensor::Element + Default>(
        &self,
        own: Dtype,
        read: fn([u8; 2]) -> T,
        narrow: fn(f32) -> T,
    ) -> Option<TensorData> {
        let matrix = self.matrix(true);
        let values = match self.dtype {
            d if d == own => decode(self.bytes, matrix, read),
            _ => self.widened(matrix, narrow)?,
        };
        Some(TensorData::new(values, transposed_shape(self.shape)))
    }

    /// The error for a tensor of a type no model here computes in.
    fn unsupported(&self) -> WeightError {
        WeightError::Dtype {
            name: self.name.clone(),
            path: self.path.display().to_string(),
            dtype: format!("{:?}", self.dtype),
        }
    }
}

struct Shard {
    path: PathBuf,
    mmap: Mmap,
    data_start: usize,
    metadata: Metadata,
}

/// A Hugging Face safetensors checkpoint: `model.safetensors` or a sharded set listed in
/// `model.safetensors.index.json`. Files are memory-mapped; tensors are converted to f32
/// straight from the map into their final buffer.
pub struct SafetensorsSource {
    folder: PathBuf,
    shards: Vec<Shard>,
    /// tensor name → shard index
    index: BTreeMap<String, usize>,
    /// The checkpoint's own name of each tensor the index holds under another
    /// ([`Self::text_decoder_only`]).
    renamed: BTreeMap<String, String>,
}

impl SafetensorsSource {
    /// The tensor `name` converted to f32 straight from the map, a matrix transposed in the
    /// same pass when `transposed` ([`WeightSource::tensor_transposed`]).
    fn read(&self, name: &str, transposed: bool) -> Result<Option<HostTensor>, WeightError> {
        let Some(stored) = self.stored(name) else {
            return self.read_mxfp4(name, None);
        };
        if stored.dtype == Dtype::F8_E4M3 {
            return self.read_fp8(&stored, transposed, |v| v).map(Some);
        }
        let data = stored
            .widened(stored.matrix(transposed), |v| v)
            .ok_or_else(|| stored.unsupported())?;
        Ok(Some(HostTensor {
            shape: stored.shape.to_vec(),
            data,
        }))
    }

    /// The matrix `name` transposed and converted to `dtype` in one pass from the map
    /// ([`WeightSource::tensor_transposed_in`]): 16-bit values go to f16 or bf16 without an
    /// f32 copy, with the rounding the f32 route gives (widening to f32 is exact).
    fn read_in(&self, name: &str, dtype: DType) -> Result<Option<HostData>, WeightError> {
        let Some(stored) = self.stored(name) else {
            let dequantised = self.read_mxfp4(name, None)?;
            return Ok(dequantised.map(|t| HostData::from_transposed(t, dtype)));
        };
        if stored.dtype == Dtype::F8_E4M3 {
            // Value and scale each in the model's dtype, as transformers multiplies them.
            let round: fn(f32) -> f32 = match dtype {
                DType::F16 => |v| f16::from_f32(v).to_f32(),
                DType::BF16 => |v| bf16::from_f32(v).to_f32(),
                _ => |v| v,
            };
            let t = self.read_fp8(&stored, true, round)?;
            return Ok(Some(HostData::from_transposed(t, dtype)));
        }
        let data = match dtype {
            DType::F16 => stored.narrowed(Dtype::F16, f16::from_le_bytes, f16::from_f32),
            DType::BF16 => stored.narrowed(Dtype::BF16, bf16::from_le_bytes, bf16::from_f32),
            _ => None,
        };
        let Some(data) = data else {
            return Ok(self
                .read(name, true)?
                .map(|t| HostData::from_transposed(t, dtype)));
        };
        Ok(Some(HostData {
            data,
            shape: stored.shape.to_vec(),
        }))
    }

    /// Entry `index` of the tensor `name` along its first dimension, converted straight from
    /// its bytes in the map (from its MXFP4 blocks and scales where it is held so).
    fn read_entry(&self, name: &str, index: usize) -> Result<Option<HostTensor>, WeightError> {
        let Some(stored) = self.stored(name) else {
            return self.read_mxfp4(name, Some(index));
        };
        let part = stored.entry(index, &self.name())?;
        let data = part
            .widened(None, |v| v)
            .ok_or_else(|| part.unsupported())?;
        Ok(Some(HostTensor {
            shape: part.shape.to_vec(),
            data,
        }))
    }

    /// The tensor `name` dequantised from MXFP4 `name_blocks` and `name_scales`
    /// ([`super::mxfp4`]), where the checkpoint holds it so (GPT-OSS's experts): whole, or
    /// only its entry `entry` along the first dimension; `None` where it holds neither.
    fn read_mxfp4(
        &self,
        name: &str,
        entry: Option<usize>,
    ) -> Result<Option<HostTensor>, WeightError> {
        let blocks = self.stored(&format!("{name}{}", super::mxfp4::BLOCKS));
        let scales = self.stored(&format!("{name}{}", super::mxfp4::SCALES));
        let (Some(blocks), Some(scales)) = (blocks, scales) else {
            return Ok(None);
        };
        for stored in [&blocks, &scales] {
            if stored.dtype != Dtype::U8 {
                return Err(stored.unsupported());
            }
        }
        let bad = |reason: String| WeightError::BadSafetensors {
            path: blocks.path.display().to_string(),
            reason: format!("MXFP4 tensor `{}`: {reason}", blocks.name),
        };
        let Some(index) = entry else {
            let t =
                super::mxfp4::dequantize(blocks.bytes, blocks.shape, scales.bytes, scales.shape);
            return t.map(Some).map_err(bad);
        };
        let source = self.name();
        let (b, sc) = (blocks.entry(index, &source)?, scales.entry(index, &source)?);
        // One expert as a stack of one.
        let one = |shape: &[usize]| [&[1][..], shape].concat();
        let t = super::mxfp4::dequantize(b.bytes, &one(b.shape), sc.bytes, &one(sc.shape))
            .map_err(bad)?;
        Ok(Some(HostTensor {
            shape: t.shape[1..].to_vec(),
            data: t.data,
        }))
    }

    /// The E4M3 matrix `stored` dequantised by its block scales (`<name>_scale_inv`, f32, bf16,
    /// f16 or E8M0; [`super::fp8`]), value and scale rounded by `round`; transposed where
    /// `transposed`.
    fn read_fp8(
        &self,
        stored: &Stored<'_>,
        transposed: bool,
        round: fn(f32) -> f32,
    ) -> Result<HostTensor, WeightError> {
        let bad = |reason: String| WeightError::BadSafetensors {
            path: stored.path.display().to_string(),
            reason: format!("FP8 tensor `{}`: {reason}", stored.name),
        };
        let scales_name = format!("{}{}", stored.name, super::fp8::SCALES);
        let scales = self
            .stored(&scales_name)
            .ok_or_else(|| bad(format!("its block scales `{scales_name}` are missing")))?;
        let values = match scales.dtype {
            Dtype::F8_E8M0 => scales
                .bytes
                .iter()
                .map(|&b| super::mxfp4::e8m0(b))
                .collect(),
            _ => scales
                .widened(None, |v| v)
                .ok_or_else(|| scales.unsupported())?,
        };
        super::fp8::dequantize(
            stored.bytes,
            stored.shape,
            &values,
            scales.shape,
            transposed,
            round,
        )
        .map_err(bad)
    }

    /// Where the tensor `name` lies in its shard's map, and its type and shape.
    fn stored<'s>(&'s self, name: &str) -> Option<Stored<'s>> {
        let (name, i) = self.locate(name)?;
        let shard = &self.shards[i];
        let name = self.renamed.get(name).map_or(name, String::as_str);
        let info = shard
            .metadata
            .info(name)
            .expect("the index was built from this shard's metadata");
        let (start, end) = info.data_offsets;
        Some(Stored {
            name: name.to_string(),
            path: &shard.path,
            bytes: &shard.mmap[shard.data_start + start..shard.data_start + end],
            dtype: info.dtype,
            shape: &info.shape,
        })
    }

    /// The name `name` has in this checkpoint and its shard. A checkpoint saved from the
    /// headless base model has its tensors without the base model's prefix (the hub's OPT
    /// checkpoints, from `OPTModel`, name `decoder.layers.0.fc1`; BLOOM's, from `BloomModel`,
    /// `h.0.mlp.dense_h_to_4h`), which transformers' `base_model_prefix` adds back on
    /// loading; so does this, dropping the name's first part where the whole name is missing.
    fn locate<'n>(&self, name: &'n str) -> Option<(&'n str, usize)> {
        if let Some(&i) = self.index.get(name) {
            return Some((name, i));
        }
        let (_, headless) = name.split_once('.')?;
        self.index.get(headless).map(|&i| (headless, i))
    }

    /// The language model of a vision-language checkpoint
    /// ([`crate::model::vision_language`]): its tensors under the family's own names, every
    /// other tensor (the vision tower's, the projector's) neither read nor counted.
    pub fn text_decoder_only(mut self) -> Self {
        let index = std::mem::take(&mut self.index);
        for (theirs, shard) in index {
            if let Some(ours) = super::vision_language::text_tensor_name(&theirs) {
                self.index.insert(ours.clone(), shard);
                self.renamed.insert(ours, theirs);
            }
        }
        self
    }

    /// Whether the checkpoint holds a tensor called `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.locate(name).is_some()
    }

    /// Opens the checkpoint in `folder`.
    pub fn open(folder: &Path) -> Result<Self, WeightError> {
        let single = folder.join("model.safetensors");
        let index_path = folder.join("model.safetensors.index.json");
        let files: Vec<PathBuf> = if single.exists() {
            vec![single]
        } else if index_path.exists() {
            let text = std::fs::read_to_string(&index_path).map_err(|source| WeightError::Io {
                path: index_path.display().to_string(),
                source,
            })?;
            shard_files(&text)
                .map_err(|reason| WeightError::BadSafetensors {
                    path: index_path.display().to_string(),
                    reason,
                })?
                .into_iter()
                .map(|f| folder.join(f))
                .collect()
        } else {
            return Err(WeightError::Io {
                path: single.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "neither model.safetensors nor model.safetensors.index.json exists",
                ),
            });
        };
        let mut shards = Vec::with_capacity(files.len());
        let mut index = BTreeMap::new();
        for path in files {
            let shard = open_shard(&path)?;
            for (name, _) in shard.metadata.tensors() {
                index.insert(name, shards.len());
            }
            shards.push(shard);
        }
        Ok(Self {
            folder: folder.to_path_buf(),
            shards,
            index,
            renamed: BTreeMap::new(),
        })
    }

    /// The checkpoint's safetensors files.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }
}

/// The distinct shard file names of a `model.safetensors.index.json`, in first-seen order.
/// Names with path separators or `..` are refused.
pub fn shard_files(index_json: &str) -> Result<Vec<String>, String> {
    let value: serde_json::Value = serde_json::from_str(index_json).map_err(|e| e.to_string())?;
    let map = value
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or("key `weight_map` is missing or not an object")?;
    let mut files: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| format!("`weight_map.{tensor}` is not a string"))?;
        if file.contains('/') || file.contains('\\') || file.contains("..") || file.is_empty() {
            return Err(format!("shard name `{file}` is not a plain file name"));
        }
        if !files.iter().any(|f| f == file) {
            files.push(file.to_string());
        }
    }
    if files.is_empty() {
        return Err("`weight_map` lists no shards".to_string());
    }
    Ok(files)
}

fn open_shard(path: &Path) -> Result<Shard, WeightError> {
    let io = |source| WeightError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and lives as long as the source; a checkpoint modified by
    // another process while it is read is outside what this tool can guard against.
    #[allow(unsafe_code)]
    let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
    let (header_len, metadata) =
        safetensors::SafeTensors::read_metadata(&mmap[..]).map_err(|e| {
            WeightError::BadSafetensors {
                path: path.display().to_string(),
                reason: e.to_string(),
            }
        })?;
    Ok(Shard {
        path: path.to_path_buf(),
        data_start: 8 + header_len,
        mmap,
        metadata,
    })
}

impl WeightSource for SafetensorsSource {
    fn release_pages(&self) {
        for shard in &self.shards {
            // SAFETY: the maps are read-only and file-backed, so MADV_DONTNEED only drops
            // pages that the next read faults in again from the file.
            #[allow(unsafe_code)]
            let _ = unsafe {
                shard
                    .mmap
                    .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
            };
        }
    }

    fn name(&self) -> String {
        self.folder.display().to_string()
    }

    fn tensor_transposed(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        self.read(name, true)
    }

    fn tensor_transposed_in(
        &self,
        name: &str,
        dtype: DType,
    ) -> Result<Option<HostData>, WeightError> {
        self.read_in(name, dtype)
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        self.read(name, false)
    }

    fn tensor_entry(&self, name: &str, index: usize) -> Result<Option<HostTensor>, WeightError> {
        self.read_entry(name, index)
    }

    /// Elements of the floating-point tensors of one to three dimensions: integer and boolean
    /// ones are buffers, not parameters (old GPT-NeoX checkpoints keep a `[1, 1, 2048, 2048]`
    /// causal mask per layer), and so are GPT-2's float masks, `[1, 1, 1024, 1024]`, and its
    /// scalar `masked_bias`, and a sigmoid router's `e_score_correction_bias`. MXFP4 blocks count
    /// two parameters a byte; FP8 weights one, their block scales none.
    fn parameter_count(&self) -> u64 {
        self.index
            .iter()
            .map(|(name, &shard)| {
                let name = self.renamed.get(name).unwrap_or(name);
                let info = self.shards[shard]
                    .metadata
                    .info(name)
                    .expect("the index was built from this shard's metadata");
                let elements = info.shape.iter().product::<usize>() as u64;
                let float = matches!(
                    info.dtype,
                    Dtype::F16 | Dtype::BF16 | Dtype::F32 | Dtype::F64 | Dtype::F8_E4M3
                );
                // FP8 block scales, and a sigmoid router's correction biases (a buffer in
                // transformers).
                let scales = name.ends_with(super::fp8::SCALES)
                    || name.ends_with(".e_score_correction_bias");
                if float && !scales && (1..=3).contains(&info.shape.len()) {
                    elements
                } else if info.dtype == Dtype::U8 && name.ends_with(super::mxfp4::BLOCKS) {
                    2 * elements
                } else {
                    0
                }
            })
            .sum()
    }
}

/// Little-endian elements of `N` bytes decoded by `element`; when `matrix` gives
/// `[rows, cols]`, transposed into `[cols, rows]` in the same pass.
fn decode<const N: usize, T: Copy + Default + Send>(
    bytes: &[u8],
    matrix: Option<[usize; 2]>,
    element: impl Fn([u8; N]) -> T + Sync,
) -> Vec<T> {
    let (elements, _) = bytes.as_chunks::<N>();
    match matrix {
        Some([rows, cols]) => transpose_map(elements, rows, cols, |&b| element(b)),
        None => {
            let mut out = Vec::with_capacity(elements.len());
            elements
                .par_iter()
                .map(|&b| element(b))
                .collect_into_vec(&mut out);
            out
        }
    }
}

/// Transposes a row-major `[rows, cols]` matrix into `[cols, rows]`.
pub fn transpose<T: Copy + Default + Send + Sync>(data: &[T], rows: usize, cols: usize) -> Vec<T> {
    transpose_map(data, rows, cols, |&v| v)
}

/// Transposes a row-major `[rows, cols]` matrix into `out`, `[cols, rows]`, as [`transpose`]
/// does, without allocating.
///
/// # Panics
/// When `out` and `data` differ in length (a caller's bug: both are one matrix's values).
pub fn transpose_into<T: Copy + Default + Send + Sync>(
    out: &mut [T],
    data: &[T],
    rows: usize,
    cols: usize,
) {
    assert_eq!(
        out.len(),
        data.len(),
        "a transposed matrix has its source's length"
    );
    // SAFETY: `MaybeUninit<T>` has `T`'s layout, and `transpose_map_into` only writes
    // initialised values into the slots, so `out` stays initialised.
    #[allow(unsafe_code)]
    let slots = unsafe { &mut *(std::ptr::from_mut(out) as *mut [std::mem::MaybeUninit<T>]) };
    transpose_map_into(slots, data, rows, cols, |&v| v);
}

/// `f` of every value of a row-major `[rows, cols]` matrix, transposed into `[cols, rows]`, in
/// a new buffer that is never zeroed first and is backed by huge pages where the kernel allows
/// ([`transpose_map_into`]).
#[allow(unsafe_code)]
fn transpose_map<S: Sync, T: Copy + Default + Send>(
    data: &[S],
    rows: usize,
    cols: usize,
    f: impl Fn(&S) -> T + Sync,
) -> Vec<T> {
    let len = rows * cols;
    let mut out = Vec::with_capacity(len);
    if len == 0 {
        return out;
    }
    let slots = &mut out.spare_capacity_mut()[..len];
    crate::sys::allocator::prefer_huge_pages(slots);
    transpose_map_into(slots, data, rows, cols, f);
    // SAFETY: `transpose_map_into` initialises every one of the first `len` slots.
    unsafe { out.set_len(len) };
    out
}

/// Writes `f` of every value of a row-major `[rows, cols]` matrix, transposed into
/// `[cols, rows]`, into every one of the `rows × cols` slots: bands of output rows in parallel,
/// each filled a block of input rows at a time (the block's runs of the band's columns read in
/// order and converted into a local buffer laid out by output row, then copied as runs of
/// `BLOCK` values of each output row).
fn transpose_map_into<S: Sync, T: Copy + Default + Send>(
    slots: &mut [std::mem::MaybeUninit<T>],
    data: &[S],
    rows: usize,
    cols: usize,
    f: impl Fn(&S) -> T + Sync,
) {
    const BLOCK: usize = 16;
    if slots.is_empty() {
        return;
    }
    // Long runs of each input row, but at least four bands per thread.
    let band_width = (cols / (4 * rayon::current_num_threads())).clamp(BLOCK, 256);
    // The bands split the slots into runs of `width × rows` (the last possibly shorter, still a
    // multiple of `rows`); the blocks of band `b` cover every `r < rows`, and each writes slot
    // `j·rows + r` for every `j < width` and each of its rows `r`: every slot is written.
    slots
        .par_chunks_mut(band_width * rows)
        .enumerate()
        .for_each(|(b, band)| {
            let c0 = b * band_width;
            let width = band.len() / rows;
            // `block[j·BLOCK + i]`: column `c0 + j` of input row `r0 + i`.
            let mut block = vec![T::default(); BLOCK * width];
            for r0 in (0..rows).step_by(BLOCK) {
                let height = BLOCK.min(rows - r0);
                prefetch_runs(
                    data,
                    cols,
                    r0 + BLOCK..(r0 + 2 * BLOCK).min(rows),
                    c0,
                    width,
                );
                for i in 0..height {
                    let start = (r0 + i) * cols + c0;
                    for (j, v) in data[start..start + width].iter().enumerate() {
                        block[j * BLOCK + i] = f(v);
                    }
                }
                for (j, run) in block.chunks_exact(BLOCK).enumerate() {
                    let start = j * rows + r0;
                    for (slot, &v) in band[start..start + height].iter_mut().zip(run) {
                        slot.write(v);
                    }
                }
            }
        });
}

/// Asks the CPU to bring the runs `data[r · cols + c0 .. + width]` of `rows` into cache: the
/// next block's input of [`transpose_map`], whose short runs of rows far apart the hardware
/// prefetchers do not follow (the loads of the checkpoint were most of its time).
fn prefetch_runs<S>(
    data: &[S],
    cols: usize,
    rows: std::ops::Range<usize>,
    c0: usize,
    width: usize,
) {
    #[cfg(target_arch = "x86_64")]
    for r in rows {
        let run = &data[r * cols + c0..r * cols + c0 + width];
        let bytes = std::mem::size_of_val(run);
        let start = run.as_ptr().cast::<i8>();
        for offset in (0..bytes).step_by(64) {
            // SAFETY: a prefetch is a hint that never faults, and `start + offset` lies within
            // `run`. SSE is part of every x86_64 CPU.
            #[allow(unsafe_code)]
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(start.add(offset));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, cols, rows, c0, width);
}

/// A tensor read from a checkpoint, by its checkpoint shape.
trait Shaped {
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

/// Wall time of a model's load, split into reading the checkpoint (decoding and transposing on
/// the host) and moving the values to the device ([`PhaseClock`], `WANDA_PHASE_TIMES=1`).
type LoadClock<'a> = std::cell::RefCell<PhaseClock<Box<dyn Fn() + 'a>>>;

struct Builder<'a, 'c, B: Backend> {
    source: &'a dyn WeightSource,
    device: &'a B::Device,
    clock: &'a LoadClock<'c>,
    /// The float type the device computes in, which linears' weights are read in.
    dtype: DType,
}

impl<'a, 'c, B: Backend> Builder<'a, 'c, B> {
    fn new(source: &'a dyn WeightSource, device: &'a B::Device, clock: &'a LoadClock<'c>) -> Self {
        Self {
            source,
            device,
            clock,
            dtype: burn::tensor::get_device_settings::<B>(device)
                .float_dtype
                .into(),
        }
    }

    /// The tensor `name` in f32, checked to have the shape `expected`. Its mapped checkpoint
    /// pages leave the resident set once it is read ([`WeightSource::release_pages`]), so a
    /// load holds the weights and one tensor's pages, never the whole shell's beside its copies.
    fn fetch(&self, name: &str, expected: &[usize]) -> Result<Vec<f32>, WeightError> {
        let found = self.source.tensor(name)?;
        self.source.release_pages();
        self.clock.borrow_mut().lap("read checkpoint");
        Ok(self.checked(name, found, expected)?.data)
    }

    /// `found`, the tensor `name`, checked to be there with the shape `expected`.
    fn checked<T: Shaped>(
        &self,
        name: &str,
        found: Option<T>,
        expected: &[usize],
    ) -> Result<T, WeightError> {
        let t = found.ok_or_else(|| WeightError::Missing {
            name: name.to_string(),
            source_name: self.source.name(),
        })?;
        if t.shape() != expected {
            return Err(WeightError::Shape {
                name: name.to_string(),
                source_name: self.source.name(),
                found: t.shape().to_vec(),
                expected: expected.to_vec(),
            });
        }
        Ok(t)
    }

    fn vector(&self, name: &str, len: usize) -> Result<Tensor<B, 1>, WeightError> {
        let data = self.fetch(name, &[len])?;
        Ok(self.to_device(TensorData::new(data, [len])))
    }

    /// `data` as a weight on the device, its time counted as the load's `to device` phase.
    fn to_device<const D: usize>(&self, data: TensorData) -> Tensor<B, D> {
        let tensor = weight_tensor(data, self.device);
        self.clock.borrow_mut().lap("to device");
        tensor
    }

    /// The norm `name` (without `.weight`) of width `len`: an RMSNorm holding `1 + w` in f32
    /// where the family stores `w` ([`crate::model::config::DecoderExtras::norm_offset`]), or
    /// a LayerNorm with its `.bias` (unless the family's have none) where the family's norms
    /// are those.
    fn norm(&self, name: &str, len: usize, config: &LlamaConfig) -> Result<Norm<B>, WeightError> {
        let data = if config.extras.norms_without_gains {
            vec![1.0f32; len]
        } else {
            let mut data = self.fetch(&format!("{name}.weight"), &config.norm_shape(name, len))?;
            if config.extras.norm_offset {
                data.iter_mut().for_each(|w| *w += 1.0);
            }
            data
        };
        let weight = self.to_device(TensorData::new(data, [len]));
        Norm::of_family(config, weight, || self.vector(&format!("{name}.bias"), len))
    }

    /// A linear layer from the PyTorch `[out, in]` weight, stored as Burn's `[in, out]`.
    fn linear(
        &self,
        prefix: &str,
        d_in: usize,
        d_out: usize,
        bias: bool,
    ) -> Result<Linear<B>, WeightError> {
        let name = format!("{prefix}.weight");
        let found = self.source.tensor_transposed_in(&name, self.dtype)?;
        self.source.release_pages();
        self.clock.borrow_mut().lap("read checkpoint");
        let w = self.checked(&name, found, &[d_out, d_in])?;
        let weight = self.to_device(w.data);
        let bias = if bias {
            Some(Param::from_tensor(
                self.vector(&format!("{prefix}.bias"), d_out)?,
            ))
        } else {
            None
        };
        Ok(Linear {
            weight: Param::from_tensor(weight),
            bias,
        })
    }
}

/// Builds the model from a checkpoint, checking every tensor's shape against the config.
pub fn build_llama<B: Backend>(
    config: &LlamaConfig,
    source: &dyn WeightSource,
    device: &B::Device,
) -> Result<Llama<B>, WeightError> {
    let clock = load_clock::<B>(device, true);
    // Layer by layer, not `with_capacity(num_hidden_layers)`: the count comes from the file,
    // and each layer must find its tensors there before it takes memory. Each tensor's mapped
    // checkpoint pages leave the resident set once it is read (`Builder`), so the load holds
    // the weights and one tensor's pages, not the whole file twice.
    let mut layers = Vec::new();
    for i in 0..config.num_hidden_layers {
        layers.push(layer_with(config, source, i, device, &clock)?);
    }
    let shell = shell_with(config, source, device, &clock)?;
    Ok(Llama { layers, ..shell })
}

/// A clock for one load, on with `WANDA_PHASE_TIMES=1` where `timed` (a streamed model's
/// layers, read one at a time all run long, are not).
fn load_clock<'a, B: Backend>(device: &'a B::Device, timed: bool) -> LoadClock<'a> {
    let sync: Box<dyn Fn() + 'a> = Box::new(move || {
        let _ = B::sync(device);
    });
    std::cell::RefCell::new(match timed {
        true => PhaseClock::new("load", sync),
        false => PhaseClock::off("load", sync),
    })
}

/// The model without its decoder layers: embeddings, final norm, LM head and rotary
/// frequencies (what layer streaming keeps in memory).
pub fn build_shell<B: Backend>(
    config: &LlamaConfig,
    source: &dyn WeightSource,
    device: &B::Device,
) -> Result<Llama<B>, WeightError> {
    shell_with(config, source, device, &load_clock::<B>(device, false))
}

fn shell_with<B: Backend>(
    config: &LlamaConfig,
    source: &dyn WeightSource,
    device: &B::Device,
    clock: &LoadClock<'_>,
) -> Result<Llama<B>, WeightError> {
    let b = Builder::<B>::new(source, device, clock);
    let h = config.hidden_size;
    let embed = b.fetch("model.embed_tokens.weight", &[config.vocab_size, h])?;
    let embed_tokens = Embedding {
        weight: Param::from_tensor(b.to_device(TensorData::new(embed, [config.vocab_size, h]))),
    };
    let lm_head = if config.tie_word_embeddings {
        None
    } else {
        Some(b.linear("lm_head", h, config.vocab_size, config.extras.lm_head_bias)?)
    };
    let embed_positions = if config.extras.learned_positions {
        let rows = config.max_position_embeddings + config.extras.position_offset();
        let table = b.fetch("model.embed_positions.weight", &[rows, h])?;
        Some(Param::from_tensor(
            b.to_device(TensorData::new(table, [rows, h])),
        ))
    } else {
        None
    };
    Ok(Llama {
        embed_tokens,
        layers: Vec::new(),
        norm: b.norm("model.norm", h, config)?,
        lm_head,
        inv_freq: rope::inv_freq(config),
        long_inv_freq: rope::long_inv_freq(config),
        rope_scale: config.rope_attention_factor(),
        embed_positions,
        position_offset: config.extras.position_offset(),
        embed_scale: config.embed_scale(),
        embed_norm: config
            .extras
            .embed_norm
            .then(|| b.norm("model.embed_norm", h, config))
            .transpose()?,
        norm_offset: config.extras.norm_offset,
        final_softcap: config.extras.final_softcap,
        logit_scale: config.logit_scale(),
    })
}

/// Decoder layer `i` from a checkpoint, its shapes checked against the config.
pub fn build_layer<B: Backend>(
    config: &LlamaConfig,
    source: &dyn WeightSource,
    i: usize,
    device: &B::Device,
) -> Result<DecoderLayer<B>, WeightError> {
    layer_with(config, source, i, device, &load_clock::<B>(device, false))
}

fn layer_with<B: Backend>(
    config: &LlamaConfig,
    source: &dyn WeightSource,
    i: usize,
    device: &B::Device,
    clock: &LoadClock<'_>,
) -> Result<DecoderLayer<B>, WeightError> {
    let b = Builder::<B>::new(source, device, clock);
    let p = format!("model.layers.{i}");
    DecoderLayer::assemble(
        config,
        i,
        |name, inputs, outputs, bias| b.linear(&format!("{p}.{name}"), inputs, outputs, bias),
        |name, width| b.norm(&format!("{p}.{name}"), width, config),
        |name, len| b.fetch(&format!("{p}.{name}"), &[len]),
    )
}

#[cfg(test)]
mod tests;
