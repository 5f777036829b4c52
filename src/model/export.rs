//! Writing a model as a Hugging Face folder (`config.json`, `tokenizer.json` and its config
//! files, `model.safetensors` or shards with `model.safetensors.index.json`) that transformers
//! and this tool load back.
//!
//! The folder is written beside its destination under a temporary name and renamed into place
//! at the end, so a crash never leaves a folder that looks complete.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use burn::prelude::*;
use safetensors::tensor::{Dtype, View};
use serde::{Deserialize, Serialize};

use super::config::LlamaConfig;
use super::llama::Llama;
use super::weights::{transpose, HostTensor};

/// Element type of the saved tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SaveDtype {
    /// 32-bit float.
    #[default]
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
}

/// Errors while saving a model folder.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A filesystem operation failed.
    #[error("cannot write `{path}`")]
    Io {
        /// The path.
        path: String,
        /// The I/O cause.
        #[source]
        source: std::io::Error,
    },
    /// safetensors refused the tensors.
    #[error("cannot serialise tensors to `{path}`: {reason}")]
    Serialize {
        /// The path.
        path: String,
        /// What safetensors said.
        reason: String,
    },
}

struct Encoded {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &Encoded {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn encode(t: &HostTensor, dtype: SaveDtype) -> Encoded {
    let bytes: Vec<u8> = match dtype {
        SaveDtype::F32 => t.data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        SaveDtype::F16 => t
            .data
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        SaveDtype::Bf16 => t
            .data
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
    };
    Encoded {
        dtype: match dtype {
            SaveDtype::F32 => Dtype::F32,
            SaveDtype::F16 => Dtype::F16,
            SaveDtype::Bf16 => Dtype::BF16,
        },
        shape: t.shape.clone(),
        bytes,
    }
}

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> HostTensor {
    let shape = t.dims().to_vec();
    let data = t
        .into_data()
        .convert::<f32>()
        .to_vec()
        .expect("converted to f32 above");
    HostTensor { shape, data }
}

/// A linear weight in PyTorch `[out, in]` layout from Burn's `[in, out]`.
fn linear_weight<B: Backend>(w: Tensor<B, 2>) -> HostTensor {
    let [d_in, d_out] = w.dims();
    let t = host(w);
    HostTensor {
        shape: vec![d_out, d_in],
        data: transpose(&t.data, d_in, d_out),
    }
}

/// Every tensor of the model under its Hugging Face name, in PyTorch layout.
pub fn hf_tensors<B: Backend>(model: &Llama<B>) -> Vec<(String, HostTensor)> {
    let mut out = vec![(
        "model.embed_tokens.weight".to_string(),
        host(model.embed_tokens.weight.val()),
    )];
    let mut push_linear = |name: String, l: &burn::nn::Linear<B>| {
        out.push((format!("{name}.weight"), linear_weight(l.weight.val())));
        if let Some(b) = &l.bias {
            out.push((format!("{name}.bias"), host(b.val())));
        }
    };
    for (i, layer) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let a = &layer.self_attn;
        push_linear(format!("{p}.self_attn.q_proj"), &a.q_proj);
        push_linear(format!("{p}.self_attn.k_proj"), &a.k_proj);
        push_linear(format!("{p}.self_attn.v_proj"), &a.v_proj);
        push_linear(format!("{p}.self_attn.o_proj"), &a.o_proj);
        push_linear(format!("{p}.mlp.gate_proj"), &layer.mlp.gate_proj);
        push_linear(format!("{p}.mlp.up_proj"), &layer.mlp.up_proj);
        push_linear(format!("{p}.mlp.down_proj"), &layer.mlp.down_proj);
    }
    if let Some(head) = &model.lm_head {
        push_linear("lm_head".to_string(), head);
    }
    for (i, layer) in model.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        out.push((
            format!("{p}.input_layernorm.weight"),
            host(layer.input_layernorm.weight.val()),
        ));
        out.push((
            format!("{p}.post_attention_layernorm.weight"),
            host(layer.post_attention_layernorm.weight.val()),
        ));
    }
    out.push((
        "model.norm.weight".to_string(),
        host(model.norm.weight.val()),
    ));
    out
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// How to write a model folder.
#[derive(Debug, Clone, PartialEq)]
pub struct SaveSpec {
    /// Element type of the weights.
    pub dtype: SaveDtype,
    /// Largest `model-XXXXX-of-YYYYY.safetensors` shard in bytes; a model that fits in one is
    /// written as a single `model.safetensors` without an index.
    pub max_shard_bytes: u64,
    /// Further files written into the folder as they are, by file name (tokenizer configs,
    /// `wanda_recipe.yaml`, the sparsity report).
    pub extra_files: Vec<(String, String)>,
}

/// Hugging Face's default `max_shard_size` of `save_pretrained` ("5GB").
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 5_000_000_000;

impl SaveSpec {
    /// Weights in `dtype`, shards of Hugging Face's default size, no further files.
    pub fn new(dtype: SaveDtype) -> Self {
        Self {
            dtype,
            max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
            extra_files: Vec::new(),
        }
    }
}

/// Writes `model` as a Hugging Face folder at `folder` (replacing an existing one only once the
/// new one is complete).
pub fn save_hf_folder<B: Backend>(
    model: &Llama<B>,
    config: &LlamaConfig,
    tokenizer_json: &str,
    folder: &Path,
    spec: &SaveSpec,
) -> Result<(), ExportError> {
    remove_stale_staging(folder);
    let staging = staging_path(folder);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let written = write_folder(model, config, tokenizer_json, &staging, spec);
    if let Err(e) = written {
        // Best effort: the error that matters is the one returned.
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    if folder.exists() {
        std::fs::remove_dir_all(folder).map_err(io(folder))?;
    }
    std::fs::rename(&staging, folder).map_err(io(folder))?;
    Ok(())
}

fn write_folder<B: Backend>(
    model: &Llama<B>,
    config: &LlamaConfig,
    tokenizer_json: &str,
    staging: &Path,
    spec: &SaveSpec,
) -> Result<(), ExportError> {
    let mut config_json = config.to_hf_json();
    config_json["torch_dtype"] = match spec.dtype {
        SaveDtype::F32 => "float32",
        SaveDtype::F16 => "float16",
        SaveDtype::Bf16 => "bfloat16",
    }
    .into();
    let write = |name: &str, text: &str| {
        let path = staging.join(name);
        std::fs::write(&path, text).map_err(io(&path))
    };
    write("config.json", &pretty_json(&config_json))?;
    write("tokenizer.json", tokenizer_json)?;
    for (name, text) in &spec.extra_files {
        write(name, text)?;
    }
    let encoded: Vec<(String, Encoded)> = hf_tensors(model)
        .iter()
        .map(|(n, t)| (n.clone(), encode(t, spec.dtype)))
        .collect();
    let shards = shard(&encoded, spec.max_shard_bytes);
    if shards.len() == 1 {
        return write_safetensors(&staging.join("model.safetensors"), &encoded);
    }
    let mut weight_map = serde_json::Map::new();
    let mut start = 0;
    for (i, &end) in shards.iter().enumerate() {
        let name = format!("model-{:05}-of-{:05}.safetensors", i + 1, shards.len());
        write_safetensors(&staging.join(&name), &encoded[start..end])?;
        for (tensor, _) in &encoded[start..end] {
            weight_map.insert(tensor.clone(), name.clone().into());
        }
        start = end;
    }
    let total_size: usize = encoded.iter().map(|(_, e)| e.bytes.len()).sum();
    let index = serde_json::json!({
        "metadata": { "total_size": total_size },
        "weight_map": weight_map,
    });
    write("model.safetensors.index.json", &pretty_json(&index))
}

fn pretty_json(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).expect("a JSON value always serialises")
}

/// End indices of consecutive shards: a new shard starts when the next tensor would take the
/// current one past `max_bytes` (a tensor larger than `max_bytes` gets a shard of its own), as
/// transformers' `save_pretrained` splits.
fn shard(tensors: &[(String, Encoded)], max_bytes: u64) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut size = 0u64;
    for (i, (_, t)) in tensors.iter().enumerate() {
        let bytes = t.bytes.len() as u64;
        if size > 0 && size + bytes > max_bytes {
            ends.push(i);
            size = 0;
        }
        size += bytes;
    }
    ends.push(tensors.len());
    ends
}

fn write_safetensors(path: &Path, tensors: &[(String, Encoded)]) -> Result<(), ExportError> {
    let mut info = std::collections::HashMap::new();
    info.insert("format".to_string(), "pt".to_string());
    safetensors::serialize_to_file(
        tensors.iter().map(|(n, e)| (n.as_str(), e)),
        Some(info),
        path,
    )
    .map_err(|e| ExportError::Serialize {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// Removes the staging folders of `folder` that processes left when they died mid-save.
fn remove_stale_staging(folder: &Path) {
    let Some(name) = folder.file_name() else {
        return;
    };
    let parent = match folder.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    crate::pipeline::record::remove_orphans(
        parent,
        &format!(".{}.partial-", name.to_string_lossy()),
    );
}

fn staging_path(folder: &Path) -> PathBuf {
    let name = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_string());
    folder.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(bytes: usize) -> (String, Encoded) {
        let encoded = Encoded {
            dtype: Dtype::U8,
            shape: vec![bytes],
            bytes: vec![0; bytes],
        };
        (format!("t{bytes}"), encoded)
    }

    #[test]
    fn shards_close_before_the_tensor_that_would_overflow_them() {
        let tensors: Vec<_> = [40, 50, 20, 100, 30, 30].into_iter().map(tensor).collect();
        // 40+50 = 90 ≤ 100; +20 overflows → [40, 50] [20] [100 alone: 20+100 > 100] [30, 30].
        assert_eq!(shard(&tensors, 100), vec![2, 3, 4, 6]);
        assert_eq!(shard(&tensors, 1000), vec![6]);
        // A tensor larger than the limit still gets exactly one shard of its own.
        assert_eq!(shard(&tensors, 10), vec![1, 2, 3, 4, 5, 6]);
    }
}
