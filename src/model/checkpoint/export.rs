//! Writing a model as a Hugging Face folder (`config.json`, `tokenizer.json` and its config
//! files, `model.safetensors` or shards with `model.safetensors.index.json`) that transformers
//! and this tool load back.
//!
//! The folder is written beside its destination under a temporary name and renamed into place
//! at the end, so a crash never leaves a folder that looks complete.

use std::path::{Path, PathBuf};

use burn::prelude::*;

use crate::model::arch::ExpertStacks;
use crate::model::arch::FusedLinear;
use crate::model::arch::LlamaConfig;
use crate::model::arch::EXPERT_COUNT_KEYS;
use crate::model::checkpoint::HostTensor;
use crate::model::checkpoint::Layers;
use crate::model::checkpoint::{encode, SaveDtype};
use crate::model::checkpoint::{stack_experts, stacked_experts};
use crate::model::decoder::{DecoderLayer, Llama, Norm};
use crate::model::kernels::kernels;
use crate::model::kernels::transpose;

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
    /// A layer could not be read (streamed) or does not have the shape of the others.
    #[error("cannot save the model: {0}")]
    Layers(String),
    /// The destination exists and is not a folder this tool wrote, so it is not replaced.
    #[error("`{path}` exists and {why}; save into a new folder, or remove it first if it may go")]
    NotReplaceable {
        /// The destination as given.
        path: String,
        /// What is there (a file, or a folder with other files: a few of their names).
        why: String,
    },
}

/// The recipe a saved model carries: the resolved cell as a pipeline that runs from anywhere.
pub const RECIPE_FILE: &str = "wanda_recipe.yaml";
/// How a synthetic model was made (`wanda synth`).
pub const SYNTH_FILE: &str = "wanda_synth.json";

/// `folder` as a destination that replacing may remove: its absolute path (symbolic links and
/// `.`/`..` resolved where it exists), where it does not exist, is an empty folder, or is a
/// folder this tool wrote (it holds [`RECIPE_FILE`] or [`SYNTH_FILE`]). Anything else — a file,
/// the working folder of someone's notes, a home folder, a model downloaded from the hub — is
/// refused before any work, so `--save ~/models` never empties `~/models`.
pub fn replaceable_destination(folder: &Path) -> Result<PathBuf, ExportError> {
    let refuse = |why: String| ExportError::NotReplaceable {
        path: folder.display().to_string(),
        why,
    };
    let resolved = if folder.exists() {
        folder.canonicalize().map_err(io(folder))?
    } else {
        std::path::absolute(folder).map_err(io(folder))?
    };
    if resolved.file_name().is_none() || resolved.parent().is_none() {
        return Err(refuse("is a root folder".into()));
    }
    if !resolved.exists() {
        return Ok(resolved);
    }
    if !resolved.is_dir() {
        return Err(refuse("is not a folder".into()));
    }
    let names: Vec<String> = std::fs::read_dir(&resolved)
        .map_err(io(&resolved))?
        .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()
        .map_err(io(&resolved))?;
    if names.is_empty() || names.iter().any(|n| n == RECIPE_FILE || n == SYNTH_FILE) {
        return Ok(resolved);
    }
    let mut shown: Vec<&str> = names.iter().map(String::as_str).collect();
    shown.sort_unstable();
    let more = shown.len().saturating_sub(3);
    shown.truncate(3);
    Err(refuse(format!(
        "was not written by wanda (it holds `{}`{}, and no `{RECIPE_FILE}` or `{SYNTH_FILE}`)",
        shown.join("`, `"),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )))
}

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> HostTensor {
    let shape = t.dims().to_vec();
    let data = crate::model::kernels::to_host_f32(t);
    HostTensor { shape, data }
}

/// A linear weight in PyTorch `[out, in]` layout from Burn's `[in, out]`: transposed straight
/// from the tensor's buffer where the backend's kernels can, through a host copy otherwise.
fn linear_weight<B: Backend>(w: Tensor<B, 2>) -> HostTensor {
    let [d_in, d_out] = w.dims();
    let data = kernels::<B>()
        .host_transposed(&w)
        .unwrap_or_else(|| transpose(&host(w).data, d_in, d_out));
    HostTensor {
        shape: vec![d_out, d_in],
        data,
    }
}

/// Every tensor of the model under its Llama name, in PyTorch layout, in the order they are
/// saved: embeddings, each layer's linears (apart) and norms, position table, LM head, final
/// norm.
pub fn hf_tensors<B: Backend>(model: &Llama<B>) -> Vec<(String, HostTensor)> {
    let mut out = vec![embed_tensor(model)];
    for (i, layer) in model.layers.iter().enumerate() {
        out.extend(layer_tensors(layer, i, &[], None, model.norm_offset));
    }
    out.extend(head_tensors(model));
    out
}

/// The Hugging Face name of the token embeddings.
const EMBED_NAME: &str = "model.embed_tokens.weight";
/// Rows of the embeddings copied and written at a time.
const EMBED_ROWS: usize = 4096;

fn embed_tensor<B: Backend>(model: &Llama<B>) -> (String, HostTensor) {
    (
        EMBED_NAME.to_string(),
        host(model.embed_tokens.weight.val()),
    )
}

/// The Llama name of the learned position table.
const POSITIONS_NAME: &str = "model.embed_positions.weight";

/// The Llama-style name of the embeddings' norm (BLOOM's `word_embeddings_layernorm`).
const EMBED_NORM_NAME: &str = "model.embed_norm";

/// The learned position table and the embeddings' norm (when the model has them), the LM head
/// (when not tied) and the final norm.
fn head_tensors<B: Backend>(model: &Llama<B>) -> Vec<(String, HostTensor)> {
    let mut out = Vec::new();
    if let Some(table) = &model.embed_positions {
        out.push((POSITIONS_NAME.to_string(), host(table.val())));
    }
    if let Some(norm) = &model.embed_norm {
        norm_tensors(&mut out, EMBED_NORM_NAME, norm, model.norm_offset);
    }
    if let Some(head) = &model.lm_head {
        linear_tensors(&mut out, "lm_head".to_string(), head);
    }
    norm_tensors(&mut out, "model.norm", &model.norm, model.norm_offset);
    out
}

/// A norm's gain as checkpoints store it (`w` where the model applies `1 + w`, `offset`), and
/// its bias where it has one; nothing for a norm whose gain the checkpoint does not hold.
fn norm_tensors<B: Backend>(
    out: &mut Vec<(String, HostTensor)>,
    name: &str,
    norm: &Norm<B>,
    offset: bool,
) {
    if !norm.learned {
        return;
    }
    let mut t = host(norm.weight.val());
    if offset {
        t.data.iter_mut().for_each(|g| *g -= 1.0);
    }
    // A grouped norm's gains are one row per group (Cohere's q/k norms: `[heads, head_dim]`).
    if let Some(group) = norm.group {
        t.shape = vec![t.data.len() / group, group];
    }
    out.push((format!("{name}.weight"), t));
    if let Some(bias) = &norm.bias {
        out.push((format!("{name}.bias"), host(bias.val())));
    }
}

fn linear_tensors<B: Backend>(
    out: &mut Vec<(String, HostTensor)>,
    name: String,
    linear: &burn::nn::Linear<B>,
) {
    out.push((format!("{name}.weight"), linear_weight(linear.weight.val())));
    if let Some(b) = &linear.bias {
        out.push((format!("{name}.bias"), host(b.val())));
    }
}

/// The tensors of decoder layer `i` under the decoder's names, in PyTorch's layout: its linears
/// (those the family stores stacked, `fused`, stacked again; its experts stacked where
/// `stacked_experts` gives their count and layout), then its norms and vectors.
fn layer_tensors<B: Backend>(
    layer: &DecoderLayer<B>,
    i: usize,
    fused: &[FusedLinear],
    stacked_experts: Option<(usize, ExpertStacks)>,
    norm_offset: bool,
) -> Vec<(String, HostTensor)> {
    let p = format!("model.layers.{i}");
    let mut out = Vec::new();
    for (name, _, linear) in layer.linears() {
        linear_tensors(&mut out, format!("{p}.{name}"), linear);
    }
    for (name, norm) in layer.norms() {
        norm_tensors(&mut out, &format!("{p}.{name}"), norm, norm_offset);
    }
    for (name, values) in layer.vectors() {
        let t = HostTensor {
            shape: vec![values.len()],
            data: values.to_vec(),
        };
        out.push((format!("{p}.{name}"), t));
    }
    if let Some((experts, stacks)) = stacked_experts {
        stack_experts(&mut out, &p, experts, stacks);
    }
    let kv_heads = layer.self_attn.heads().map_or(1, |a| a.settings.kv_heads);
    for f in fused {
        for kind in ["weight", "bias"] {
            stack(
                &mut out,
                &format!("{p}.{}.{kind}", f.fused),
                |part| format!("{p}.{part}.{kind}"),
                f,
                kv_heads,
            );
        }
    }
    out
}

/// Replaces the tensors `name_of(part)` of `fused`'s parts in `tensors` by one tensor `stacked`
/// holding their rows where [`FusedLinear::row_ranges`] puts them (part by part, or by kv head
/// over `kv_heads`), where the first part was; nothing when a part is missing or its rows do
/// not split over the kv heads.
fn stack(
    tensors: &mut Vec<(String, HostTensor)>,
    stacked: &str,
    name_of: impl Fn(&str) -> String,
    fused: &FusedLinear,
    kv_heads: usize,
) {
    let names: Vec<String> = fused.parts.iter().map(|p| name_of(p)).collect();
    let Some(first) = tensors.iter().position(|(n, _)| *n == names[0]) else {
        return;
    };
    let found: Option<Vec<usize>> = names
        .iter()
        .map(|name| tensors.iter().position(|(n, _)| n == name))
        .collect();
    let Some(found) = found else {
        return;
    };
    let part_rows: Vec<usize> = found.iter().map(|&at| tensors[at].1.shape[0]).collect();
    let Some(ranges) = fused.row_ranges(&part_rows, kv_heads) else {
        return;
    };
    let mut taken = Vec::with_capacity(names.len());
    for name in &names {
        let at = tensors
            .iter()
            .position(|(n, _)| n == name)
            .expect("found above");
        taken.push(tensors.remove(at).1);
    }
    let mut shape = taken[0].shape.clone();
    shape[0] = part_rows.iter().sum();
    let cols: usize = shape[1..].iter().product();
    let mut data = vec![0.0f32; shape[0] * cols];
    for (part, ranges) in taken.iter().zip(&ranges) {
        let mut from = 0;
        for rows in ranges {
            let len = rows.len() * cols;
            data[rows.start * cols..][..len].copy_from_slice(&part.data[from..from + len]);
            from += len;
        }
    }
    tensors.insert(first, (stacked.to_string(), HostTensor { shape, data }));
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
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
    /// The checkpoint's own `config.json`: the saved one keeps every key of it (transformers
    /// reads keys this tool does not model, such as `pad_token_id` or `layer_types`) but its
    /// `quantization_config`, adds the keys it lacks, and says the saved dtype.
    pub base_config: Option<serde_json::Value>,
}

/// A checkpoint's own `config.json` (`base`) rewritten for a model of `count` experts a
/// layer: every key of the expert count it holds ([`EXPERT_COUNT_KEYS`]: a family's own and
/// the aliases transformers also reads, at the top level and, where the checkpoint nests its
/// text model's keys, in `text_config`) says `count`, so no key the loader prefers keeps the
/// count before.
pub fn rewrite_expert_count(base: &mut serde_json::Value, count: usize) {
    let rewrite = |map: &mut serde_json::Value| {
        if let Some(map) = map.as_object_mut() {
            for key in EXPERT_COUNT_KEYS {
                if let Some(value) = map.get_mut(key) {
                    *value = count.into();
                }
            }
        }
    };
    rewrite(base);
    if let Some(text) = base.get_mut("text_config") {
        rewrite(text);
    }
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
            base_config: None,
        }
    }
}

/// Writes `model` as a Hugging Face folder at `folder` (replacing an existing one only once the
/// new one is complete). Tensors are encoded and written one decoder layer at a time, so a
/// streamed model ([`crate::model::checkpoint`]) is saved without ever being whole in memory.
pub fn save_hf_folder<B: Backend>(
    model: &impl Layers<B>,
    config: &LlamaConfig,
    tokenizer_json: &str,
    folder: &Path,
    spec: &SaveSpec,
) -> Result<(), ExportError> {
    write_atomically(folder, |staging| {
        write_folder(model, config, tokenizer_json, staging, spec)
    })
}

/// Runs `write` on an empty staging folder beside `folder`, then renames it to `folder`
/// (replacing an existing one only then, and only one [`replaceable_destination`] allows); a
/// failed `write` leaves nothing behind.
pub(crate) fn write_atomically(
    folder: &Path,
    write: impl FnOnce(&Path) -> Result<(), ExportError>,
) -> Result<(), ExportError> {
    let folder = &replaceable_destination(folder)?;
    remove_stale_staging(folder);
    let staging = staging_path(folder);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    if let Err(e) = write(&staging) {
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
    model: &impl Layers<B>,
    config: &LlamaConfig,
    tokenizer_json: &str,
    staging: &Path,
    spec: &SaveSpec,
) -> Result<(), ExportError> {
    let mut config_json = config.to_hf_json();
    if let (Some(base), Some(ours)) = (
        spec.base_config.as_ref().and_then(|b| b.as_object()),
        config_json.as_object_mut(),
    ) {
        for (key, value) in base {
            ours.insert(key.clone(), value.clone());
        }
    }
    // The weights are written unquantised (GPT-OSS's MXFP4 experts included): a checkpoint's
    // `quantization_config` would have transformers read them as quantised.
    if let Some(map) = config_json.as_object_mut() {
        map.remove("quantization_config");
    }
    // transformers 5 writes `dtype`, earlier versions `torch_dtype`: both say the saved one.
    config_json["torch_dtype"] = spec.dtype.torch_name().into();
    if config_json.get("dtype").is_some() {
        config_json["dtype"] = spec.dtype.torch_name().into();
    }
    let write = |name: &str, text: &str| {
        let path = staging.join(name);
        std::fs::write(&path, text).map_err(io(&path))
    };
    write("config.json", &pretty_json(&config_json))?;
    write("tokenizer.json", tokenizer_json)?;
    for (name, text) in &spec.extra_files {
        write(name, text)?;
    }
    let planned = plan(model, config)?;
    write_weights(
        staging,
        &planned,
        &mut TensorSource::new(model, config),
        spec.dtype,
        spec.max_shard_bytes,
    )
    .map(|_| ())
}

/// Writes `planned` tensors into `folder` in `dtype`: one `model.safetensors` when they fit in
/// `max_shard_bytes`, otherwise `model-XXXXX-of-YYYYY.safetensors` shards and
/// `model.safetensors.index.json`. Returns the number of safetensors files.
pub(crate) fn write_weights(
    folder: &Path,
    planned: &[PlannedTensor],
    source: &mut impl TensorValues,
    dtype: SaveDtype,
    max_shard_bytes: u64,
) -> Result<usize, ExportError> {
    let sizes: Vec<u64> = planned
        .iter()
        .map(|p| p.shape.iter().product::<usize>() as u64 * dtype.size())
        .collect();
    let shards = shard(&sizes, max_shard_bytes);
    if shards.len() == 1 {
        let path = folder.join("model.safetensors");
        return write_safetensors(&path, planned, source, dtype).map(|()| 1);
    }
    let mut weight_map = serde_json::Map::new();
    let mut start = 0;
    for (i, &end) in shards.iter().enumerate() {
        let name = format!("model-{:05}-of-{:05}.safetensors", i + 1, shards.len());
        let path = folder.join(&name);
        write_safetensors(&path, &planned[start..end], source, dtype)?;
        for tensor in &planned[start..end] {
            weight_map.insert(tensor.name.clone(), name.clone().into());
        }
        start = end;
    }
    let index = serde_json::json!({
        "metadata": { "total_size": sizes.iter().sum::<u64>() },
        "weight_map": weight_map,
    });
    let path = folder.join("model.safetensors.index.json");
    std::fs::write(&path, pretty_json(&index)).map_err(io(&path))?;
    Ok(shards.len())
}

pub(crate) fn pretty_json(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).expect("a JSON value always serialises")
}

/// End indices of consecutive shards of tensors of `sizes` bytes: a new shard starts when the
/// next tensor would take the current one past `max_bytes` (a tensor larger than `max_bytes`
/// gets a shard of its own), as transformers' `save_pretrained` splits.
fn shard(sizes: &[u64], max_bytes: u64) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut size = 0u64;
    for (i, &bytes) in sizes.iter().enumerate() {
        if size > 0 && size + bytes > max_bytes {
            ends.push(i);
            size = 0;
        }
        size += bytes;
    }
    ends.push(sizes.len());
    ends
}

/// A tensor to save: its Hugging Face name and PyTorch shape, and where its values are.
pub(crate) struct PlannedTensor {
    /// The Hugging Face name.
    pub name: String,
    /// The shape in PyTorch's layout.
    pub shape: Vec<usize>,
    /// The decoder layer that holds it; None for the embeddings, LM head and final norm.
    pub layer: Option<usize>,
}

/// Where the values of planned tensors come from.
pub(crate) trait TensorValues {
    /// Hands the values of `tensor` (f32, in PyTorch's row-major order) to `sink`, a block at a
    /// time.
    fn write_values(
        &mut self,
        tensor: &PlannedTensor,
        sink: &mut dyn FnMut(&[f32]) -> Result<(), ExportError>,
    ) -> Result<(), ExportError>;
}

/// One kind of layer's tensors (with experts or not), with the name prefix of the layer they
/// were read from.
type LayerTemplate = (bool, String, Vec<(String, HostTensor)>);

/// Every tensor to save, in order, under the checkpoint names of `family`; a decoder layer's
/// names and shapes are those of the first layer of its kind (all layers with experts have one
/// shape, all with a dense MLP another), checked again when each layer is written.
fn plan<B: Backend>(
    model: &impl Layers<B>,
    config: &LlamaConfig,
) -> Result<Vec<PlannedTensor>, ExportError> {
    let fused = config.architecture.row().fused_linears;
    let experts = stacked_experts(config);
    let shell = model.shell();
    let planned = |name: &str, shape: Vec<usize>| PlannedTensor {
        name: name.to_string(),
        shape,
        layer: None,
    };
    let mut out = vec![planned(
        EMBED_NAME,
        shell.embed_tokens.weight.dims().to_vec(),
    )];
    // Each kind of layer (with experts or with a dense MLP) takes the names and shapes of its
    // first layer.
    let mut templates: Vec<LayerTemplate> = Vec::new();
    for i in 0..model.layer_count() {
        let kind = config.layer_experts(i).is_some();
        if !templates.iter().any(|(k, ..)| *k == kind) {
            let layer = model.layer(i).map_err(layer_error)?;
            let tensors = layer_tensors(&layer, i, fused, experts, false);
            templates.push((kind, format!("model.layers.{i}."), tensors));
        }
        let (_, first, template) = templates
            .iter()
            .find(|(k, ..)| *k == kind)
            .expect("pushed above");
        let prefix = format!("model.layers.{i}.");
        out.extend(template.iter().map(|(name, t)| PlannedTensor {
            name: name.replacen(first, &prefix, 1),
            shape: t.shape.clone(),
            layer: Some(i),
        }));
    }
    drop(templates);
    // As `head_tensors` orders them; linear weights in PyTorch's `[out, in]`.
    if let Some(table) = &shell.embed_positions {
        out.push(planned(POSITIONS_NAME, table.dims().to_vec()));
    }
    if let Some(norm) = &shell.embed_norm {
        let width = norm.weight.dims().to_vec();
        out.push(planned(&format!("{EMBED_NORM_NAME}.weight"), width.clone()));
        if norm.bias.is_some() {
            out.push(planned(&format!("{EMBED_NORM_NAME}.bias"), width));
        }
    }
    if let Some(head) = &shell.lm_head {
        let [d_in, d_out] = head.weight.dims();
        out.push(planned("lm_head.weight", vec![d_out, d_in]));
        if let Some(bias) = &head.bias {
            out.push(planned("lm_head.bias", bias.dims().to_vec()));
        }
    }
    if shell.norm.learned {
        out.push(planned(
            "model.norm.weight",
            shell.norm.weight.dims().to_vec(),
        ));
    }
    if let Some(bias) = &shell.norm.bias {
        out.push(planned("model.norm.bias", bias.dims().to_vec()));
    }
    let row = config.architecture.row();
    for tensor in &mut out {
        tensor.name = saved_name(config, &tensor.name);
        if row.stores_transposed(&tensor.name) {
            tensor.shape.reverse();
        }
    }
    // One checkpoint tensor the decoder holds twice (Falcon's shared norm) is written once.
    let mut seen = std::collections::HashSet::new();
    out.retain(|tensor| seen.insert(tensor.name.clone()));
    Ok(out)
}

fn layer_error(e: crate::model::checkpoint::StreamError) -> ExportError {
    ExportError::Layers(e.to_string())
}

/// The name the checkpoints of `config`'s family give the decoder's tensor `ours`.
fn saved_name(config: &LlamaConfig, ours: &str) -> String {
    config
        .architecture
        .family()
        .checkpoint_name(config, ours)
        .unwrap_or_else(|| ours.to_string())
}

/// `tensors` under the names the checkpoints of `config`'s family give them, in its layout
/// (transposed where it stores a linear as `[in, out]`, GPT-2's `Conv1D`).
fn saved_names(
    config: &LlamaConfig,
    tensors: Vec<(String, HostTensor)>,
) -> Vec<(String, HostTensor)> {
    let row = config.architecture.row();
    tensors
        .into_iter()
        .map(|(name, t)| {
            let name = saved_name(config, &name);
            match t.shape[..] {
                [rows, cols] if row.stores_transposed(&name) => {
                    let data = transpose(&t.data, rows, cols);
                    let shape = vec![cols, rows];
                    (name, HostTensor { shape, data })
                }
                _ => (name, t),
            }
        })
        .collect()
}

/// Hands out the values of planned tensors (named as the checkpoints of `config`'s family name
/// them), holding one decoder layer's at a time.
struct TensorSource<'a, B: Backend, M: Layers<B>> {
    model: &'a M,
    config: &'a LlamaConfig,
    layer: Option<(usize, Vec<(String, HostTensor)>)>,
    _backend: std::marker::PhantomData<B>,
}

impl<'a, B: Backend, M: Layers<B>> TensorSource<'a, B, M> {
    fn new(model: &'a M, config: &'a LlamaConfig) -> Self {
        Self {
            model,
            config,
            layer: None,
            _backend: std::marker::PhantomData,
        }
    }

    /// The values of `tensor`, checked against its planned shape.
    fn values(&mut self, tensor: &PlannedTensor) -> Result<HostTensor, ExportError> {
        let found = match tensor.layer {
            Some(i) => {
                if self.layer.as_ref().is_none_or(|(held, _)| *held != i) {
                    let layer = self.model.layer(i).map_err(layer_error)?;
                    let offset = self.model.shell().norm_offset;
                    let fused = self.config.architecture.row().fused_linears;
                    let experts = stacked_experts(self.config);
                    let tensors = layer_tensors(&layer, i, fused, experts, offset);
                    self.layer = Some((i, saved_names(self.config, tensors)));
                }
                let (_, tensors) = self.layer.as_mut().expect("set just above");
                tensors
                    .iter_mut()
                    .find(|(n, _)| *n == tensor.name)
                    .map(|(_, t)| std::mem::take(t))
            }
            None => saved_names(self.config, head_tensors(self.model.shell()))
                .into_iter()
                .find(|(n, _)| *n == tensor.name)
                .map(|(_, t)| t),
        };
        match found {
            Some(t) if t.shape == tensor.shape => Ok(t),
            _ => Err(ExportError::Layers(format!(
                "tensor `{}` is missing or not of shape {:?} like the first layer of its kind",
                tensor.name, tensor.shape
            ))),
        }
    }
}

impl<B: Backend, M: Layers<B>> TensorValues for TensorSource<'_, B, M> {
    fn write_values(
        &mut self,
        tensor: &PlannedTensor,
        sink: &mut dyn FnMut(&[f32]) -> Result<(), ExportError>,
    ) -> Result<(), ExportError> {
        if tensor.name == saved_name(self.config, EMBED_NAME) {
            // The largest tensor, copied off the device a block of rows at a time.
            let embed = self.model.shell().embed_tokens.weight.val();
            let [rows, width] = embed.dims();
            for first in (0..rows).step_by(EMBED_ROWS) {
                let last = rows.min(first + EMBED_ROWS);
                sink(&host(embed.clone().slice([first..last, 0..width])).data)?;
            }
            return Ok(());
        }
        sink(&self.values(tensor)?.data)
    }
}

/// Values encoded and written at a time (4 MiB of f32).
const ENCODE_CHUNK: usize = 1 << 20;

/// Bytes written between requests to start their writeback ([`crate::sys::start_writeback`]).
const WRITEBACK_BYTES: usize = 64 << 20;

/// Writes `tensors` as one safetensors file: the header from their shapes, then each tensor's
/// bytes as it is encoded, in the header's order.
fn write_safetensors(
    path: &Path,
    tensors: &[PlannedTensor],
    source: &mut impl TensorValues,
    dtype: SaveDtype,
) -> Result<(), ExportError> {
    use std::io::Write;
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".to_string(),
        serde_json::json!({ "format": "pt" }),
    );
    let mut offset = 0u64;
    for t in tensors {
        let bytes = t.shape.iter().product::<usize>() as u64 * dtype.size();
        header.insert(
            t.name.clone(),
            serde_json::json!({
                "dtype": dtype.header_name(),
                "shape": t.shape,
                "data_offsets": [offset, offset + bytes],
            }),
        );
        offset += bytes;
    }
    let mut header = serde_json::to_vec(&header).expect("a JSON map always serialises");
    // Data starts 8-byte aligned, as the safetensors library writes it.
    header.resize(header.len().div_ceil(8) * 8, b' ');
    let file = std::fs::File::create(path).map_err(io(path))?;
    let mut out = std::io::BufWriter::new(file);
    out.write_all(&(header.len() as u64).to_le_bytes())
        .and_then(|()| out.write_all(&header))
        .map_err(io(path))?;
    let mut bytes = Vec::new();
    let mut unflushed = 0;
    for t in tensors {
        let expected = t.shape.iter().product::<usize>();
        let mut written = 0;
        source.write_values(t, &mut |values| {
            written += values.len();
            // Encoded a slice at a time: no second copy of a large tensor.
            for chunk in values.chunks(ENCODE_CHUNK) {
                encode(chunk, dtype, &mut bytes);
                out.write_all(&bytes).map_err(io(path))?;
                unflushed += bytes.len();
                if unflushed >= WRITEBACK_BYTES {
                    crate::sys::start_writeback(out.get_ref());
                    unflushed = 0;
                }
            }
            Ok(())
        })?;
        if written != expected {
            return Err(ExportError::Layers(format!(
                "tensor `{}` gave {written} values where its shape {:?} holds {expected}",
                t.name, t.shape
            )));
        }
    }
    out.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .map_err(io(path))
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
    crate::sys::remove_orphans(parent, &format!(".{}.partial-", name.to_string_lossy()));
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

    /// A destination may be replaced where it is new, empty or wanda's own; a file, a root and
    /// a folder of other files are refused, naming what is there, and stay as they were.
    #[test]
    fn only_new_empty_or_wandas_own_folders_are_replaceable() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("new");
        assert_eq!(replaceable_destination(&new).unwrap(), new);
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(replaceable_destination(&empty).is_ok());
        for marker in [RECIPE_FILE, SYNTH_FILE] {
            let ours = dir.path().join(marker);
            std::fs::create_dir(&ours).unwrap();
            std::fs::write(ours.join(marker), "").unwrap();
            std::fs::write(ours.join("model.safetensors"), "").unwrap();
            assert!(replaceable_destination(&ours).is_ok(), "{marker}");
        }
        // Through `..`, resolved to the folder it names.
        let via = empty.join("..").join("empty");
        assert_eq!(
            replaceable_destination(&via).unwrap(),
            empty.canonicalize().unwrap()
        );

        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        for name in ["b.txt", "a.txt", "c", "d"] {
            std::fs::write(theirs.join(name), "kept").unwrap();
        }
        let refused = replaceable_destination(&theirs).unwrap_err().to_string();
        assert!(
            refused.contains("holds `a.txt`, `b.txt`, `c` and 1 more")
                && refused.contains("save into a new folder"),
            "{refused}"
        );
        let file = theirs.join("a.txt");
        let refused = replaceable_destination(&file).unwrap_err().to_string();
        assert!(refused.contains("is not a folder"), "{refused}");
        let refused = replaceable_destination(Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("root"), "{refused}");

        let written = write_atomically(&theirs, |staging| {
            std::fs::write(staging.join("x"), "").map_err(io(staging))
        });
        assert!(matches!(written, Err(ExportError::NotReplaceable { .. })));
        assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 4);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept");
    }

    /// `[in, out]` = `[37, 70]`: the fused kernels' transposition from the tensor's buffer (NdArray)
    /// and the host copy then transposition (Flex) give PyTorch's `[out, in]` layout.
    #[test]
    fn linear_weights_are_saved_in_pytorchs_layout_on_every_backend() {
        use burn::backend::{Flex, NdArray};
        let (d_in, d_out) = (37, 70);
        let values: Vec<f32> = (0..d_in * d_out).map(|v| v as f32 * 0.5).collect();
        let expected: Vec<f32> = (0..d_out)
            .flat_map(|o| (0..d_in).map(move |i| (i * d_out + o) as f32 * 0.5))
            .collect();
        fn saved<B: Backend>(values: &[f32], shape: [usize; 2]) -> HostTensor {
            let data = TensorData::new(values.to_vec(), shape);
            linear_weight(Tensor::<B, 2>::from_data(data, &Default::default()))
        }
        assert!(kernels::<NdArray>()
            .host_transposed(&Tensor::zeros([2, 2], &Default::default()))
            .is_some());
        for t in [
            saved::<NdArray>(&values, [d_in, d_out]),
            saved::<Flex>(&values, [d_in, d_out]),
        ] {
            assert_eq!(t.shape, vec![d_out, d_in]);
            assert_eq!(t.data, expected);
        }
    }

    #[test]
    fn parallel_encoding_gives_each_values_own_bytes() {
        // Across block boundaries, with values that round (ties to even), overflow f16,
        // underflow to subnormals, and are not numbers.
        let mut values: Vec<f32> = (0..40_000)
            .map(|i| (i as f32 - 20_000.0) * 1.000_123_4e-3 * (1 + i % 7) as f32)
            .collect();
        values.extend([
            1.0 + f32::EPSILON * 128.0,
            70_000.0,
            -1e-7,
            f32::INFINITY,
            f32::NAN,
            -0.0,
        ]);
        for dtype in [SaveDtype::F32, SaveDtype::F16, SaveDtype::Bf16] {
            let expected: Vec<u8> = values
                .iter()
                .flat_map(|&v| match dtype {
                    SaveDtype::F32 => v.to_le_bytes().to_vec(),
                    SaveDtype::F16 => half::f16::from_f32(v).to_le_bytes().to_vec(),
                    SaveDtype::Bf16 => half::bf16::from_f32(v).to_le_bytes().to_vec(),
                })
                .collect();
            // A buffer reused from a longer encoding holds exactly the new bytes.
            let mut bytes = vec![7u8; 3 * expected.len()];
            encode(&values, dtype, &mut bytes);
            assert_eq!(bytes, expected, "{dtype:?}");
        }
    }

    #[test]
    fn shards_close_before_the_tensor_that_would_overflow_them() {
        let tensors = [40, 50, 20, 100, 30, 30];
        // 40+50 = 90 ≤ 100; +20 overflows → [40, 50] [20] [100 alone: 20+100 > 100] [30, 30].
        assert_eq!(shard(&tensors, 100), vec![2, 3, 4, 6]);
        assert_eq!(shard(&tensors, 1000), vec![6]);
        // A tensor larger than the limit still gets exactly one shard of its own.
        assert_eq!(shard(&tensors, 10), vec![1, 2, 3, 4, 5, 6]);
    }
}
