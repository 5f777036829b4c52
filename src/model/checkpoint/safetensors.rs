//! Host-side weight sources and building a [`Llama`] from them.
//!
//! A [`WeightSource`] answers "give me the tensor with this Hugging Face name as f32, PyTorch
//! layout". Safetensors folders (single file or sharded, memory-mapped) and GGUF files
//! implement it, so the model builder has one code path for every format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::prelude::*;
use burn::tensor::DType;
use half::{bf16, f16};
use memmap2::Mmap;
use rayon::prelude::*;
use safetensors::tensor::{Dtype, Metadata};

use crate::model::kernels::transpose_map;

use super::{transposed_shape, HostData, HostTensor, WeightError, WeightSource};

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
    /// ([`crate::model::checkpoint`]), where the checkpoint holds it so (GPT-OSS's experts): whole, or
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
    /// f16 or E8M0; [`crate::model::checkpoint`]), value and scale rounded by `round`; transposed where
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
    /// ([`crate::model::family::vision_language`]): its tensors under the family's own names, every
    /// other tensor (the vision tower's, the projector's) neither read nor counted.
    pub fn text_decoder_only(mut self) -> Self {
        let index = std::mem::take(&mut self.index);
        for (theirs, shard) in index {
            if let Some(ours) = crate::model::family::vision_language::text_tensor_name(&theirs) {
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

#[cfg(test)]
mod tests;
