//! Writing a model as a Hugging Face folder (`config.json`, `tokenizer.json`,
//! `model.safetensors`) that transformers and this tool load back.
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

/// Writes `model` as a Hugging Face folder at `folder` (replacing an existing one only once the
/// new one is complete).
pub fn save_hf_folder<B: Backend>(
    model: &Llama<B>,
    config: &LlamaConfig,
    tokenizer_json: &str,
    folder: &Path,
    dtype: SaveDtype,
) -> Result<(), ExportError> {
    let staging = staging_path(folder);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let mut config_json = config.to_hf_json();
    config_json["torch_dtype"] = match dtype {
        SaveDtype::F32 => "float32",
        SaveDtype::F16 => "float16",
        SaveDtype::Bf16 => "bfloat16",
    }
    .into();
    let config_path = staging.join("config.json");
    let pretty =
        serde_json::to_string_pretty(&config_json).expect("a JSON value always serialises");
    std::fs::write(&config_path, pretty).map_err(io(&config_path))?;
    let tok_path = staging.join("tokenizer.json");
    std::fs::write(&tok_path, tokenizer_json).map_err(io(&tok_path))?;
    let encoded: Vec<(String, Encoded)> = hf_tensors(model)
        .iter()
        .map(|(n, t)| (n.clone(), encode(t, dtype)))
        .collect();
    let st_path = staging.join("model.safetensors");
    let mut info = std::collections::HashMap::new();
    info.insert("format".to_string(), "pt".to_string());
    safetensors::serialize_to_file(
        encoded.iter().map(|(n, e)| (n.as_str(), e)),
        Some(info),
        &st_path,
    )
    .map_err(|e| ExportError::Serialize {
        path: st_path.display().to_string(),
        reason: e.to_string(),
    })?;
    if folder.exists() {
        std::fs::remove_dir_all(folder).map_err(io(folder))?;
    }
    std::fs::rename(&staging, folder).map_err(io(folder))?;
    Ok(())
}

fn staging_path(folder: &Path) -> PathBuf {
    let name = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_string());
    folder.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}
