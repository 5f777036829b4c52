//! Layer streaming: a decoder whose layers are not all in memory at once.
//!
//! A [`StreamedLlama`] keeps in memory only what every token needs (embeddings, final norm, LM
//! head — its *shell*). Each decoder layer is read when asked for: a dense layer from the
//! checkpoint it was loaded from (dequantised again, exactly as a full load would), a layer
//! that was replaced (pruned) from its own safetensors file in a layer store on disk. Memory
//! then holds the shell, the layer in use and the activations, whatever the depth of the model.
//!
//! Clones are cheap and share files: a pruned copy of a streamed model starts with the dense
//! model's layer slots and writes only the layers it replaces. A stored file is deleted when
//! the last model that uses it is dropped, and the store's folder with it.
//!
//! [`Layers`] is what pruning, evaluation and saving need of a model, so they run unchanged on
//! a [`Llama`] in memory and on a streamed one; [`Decoder`] is either.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use burn::backend::NdArray;
use burn::module::Param;
use burn::nn::Linear;
use burn::prelude::*;
use rayon::prelude::*;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::model::arch::LlamaConfig;
use crate::model::checkpoint::{build_layer, build_shell, WeightError, WeightSource};
use crate::model::checkpoint::{encode, SaveDtype};
use crate::model::decoder::{DecoderLayer, Llama, Norm};
use crate::model::kernels::{take_param, to_host_f32, weight_tensor};

/// Errors of a streamed model's layers.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The layer store could not be written or read.
    #[error("layer store `{path}`: {source}; check that the results folder's disk has room for the pruned layers")]
    Io {
        /// The file or folder.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A stored layer file does not hold what was written.
    #[error("layer store file `{path}` is damaged ({reason}); run again")]
    Damaged {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A layer could not be read from the checkpoint.
    #[error(transparent)]
    Checkpoint(#[from] WeightError),
    /// A layer index past the model's depth.
    #[error("layer {index} asked of a model with {count} layers")]
    NoSuchLayer {
        /// The index.
        index: usize,
        /// The model's layers.
        count: usize,
    },
}

/// What pruning, evaluation and saving need of a model: its shell and its layers one at a time.
pub trait Layers<B: Backend> {
    /// Embeddings, final norm, LM head and rotary frequencies (its `layers` may be empty).
    fn shell(&self) -> &Llama<B>;
    /// Number of decoder layers.
    fn layer_count(&self) -> usize;
    /// Decoder layer `i`: borrowed when in memory, read from disk when streamed.
    fn layer(&self, i: usize) -> Result<Cow<'_, DecoderLayer<B>>, StreamError>;
    /// Replaces decoder layer `i` (a streamed model writes it to its layer store).
    fn set_layer(&mut self, i: usize, layer: DecoderLayer<B>) -> Result<(), StreamError>;
    /// Decoder layer `i`, to be replaced by [`Layers::set_layer`]. In memory the model gives up
    /// the layer's linear weights, so their buffers are the returned layer's alone and pruning
    /// moves them to the host instead of copying them (a copy would hold the layer twice); a
    /// streamed model reads it from disk. Until the layer is set again the model lacks those
    /// weights: after an error its callers drop it.
    fn take_layer(&mut self, i: usize) -> Result<DecoderLayer<B>, StreamError> {
        self.layer(i).map(Cow::into_owned)
    }
    /// The whole model when every layer is in memory.
    fn resident(&self) -> Option<&Llama<B>>;
}

impl<B: Backend> Layers<B> for Llama<B> {
    fn shell(&self) -> &Llama<B> {
        self
    }

    fn layer_count(&self) -> usize {
        self.layers.len()
    }

    fn layer(&self, i: usize) -> Result<Cow<'_, DecoderLayer<B>>, StreamError> {
        self.layers
            .get(i)
            .map(Cow::Borrowed)
            .ok_or(StreamError::NoSuchLayer {
                index: i,
                count: self.layers.len(),
            })
    }

    fn set_layer(&mut self, i: usize, layer: DecoderLayer<B>) -> Result<(), StreamError> {
        let count = self.layers.len();
        let slot = self
            .layers
            .get_mut(i)
            .ok_or(StreamError::NoSuchLayer { index: i, count })?;
        *slot = layer;
        Ok(())
    }

    fn take_layer(&mut self, i: usize) -> Result<DecoderLayer<B>, StreamError> {
        let layer = self.layer(i)?.into_owned();
        let slot = &mut self.layers[i];
        for (name, _, _) in layer.linears() {
            if let Some(linear) = slot.linear_mut(&name) {
                drop(take_param(&mut linear.weight));
            }
        }
        Ok(layer)
    }

    fn resident(&self) -> Option<&Llama<B>> {
        Some(self)
    }
}

/// A folder of stored layers, removed with its last file.
#[derive(Debug)]
struct StoreDir {
    path: PathBuf,
    next: AtomicUsize,
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        // Best effort: a folder left behind is removed by the next run (see `create`).
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Prefix of store folders; the process id follows, so a later run can tell stale ones.
const STORE_PREFIX: &str = ".wanda-layers-";

impl StoreDir {
    /// A new, empty store folder below `root`; folders that processes no longer running left
    /// there are removed first.
    fn create(root: &Path) -> Result<Self, StreamError> {
        static STORES: AtomicUsize = AtomicUsize::new(0);
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| StreamError::Io { path, source }
        };
        std::fs::create_dir_all(root).map_err(io(root))?;
        remove_stale_stores(root);
        let path = root.join(format!(
            "{STORE_PREFIX}{}-{}",
            std::process::id(),
            STORES.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).map_err(io(&path))?;
        Ok(Self {
            path,
            next: AtomicUsize::new(0),
        })
    }
}

/// Removes the store folders below `root` whose process is gone (Linux only: elsewhere there
/// is no cheap way to tell, and a live run's folder must never be removed).
fn remove_stale_stores(root: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(STORE_PREFIX)) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or_default();
        if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// One stored layer, deleted when no model uses it any more.
#[derive(Debug)]
struct LayerFile {
    path: PathBuf,
    /// The layer's expert count where it differs from the model's config (its experts were
    /// pruned), so it is read back with the count it was written with.
    experts: Option<usize>,
    _store: Arc<StoreDir>,
}

impl Drop for LayerFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where a streamed layer is read from.
#[derive(Debug, Clone)]
enum Slot {
    /// The checkpoint, unchanged.
    Checkpoint,
    /// A replaced layer in the store.
    Stored(Arc<LayerFile>),
}

/// A model streamed layer by layer from its checkpoint and a layer store on disk.
#[derive(Clone)]
pub struct StreamedLlama<B: Backend> {
    shell: Llama<B>,
    slots: Vec<Slot>,
    checkpoint: Arc<dyn WeightSource>,
    config: LlamaConfig,
    store: Arc<StoreDir>,
    device: B::Device,
}

impl<B: Backend> StreamedLlama<B> {
    /// Opens `checkpoint` for streaming: the shell is loaded, the layers are read when asked
    /// for (see [`StreamedLlama::check`]). Replaced layers are stored in a new folder below
    /// `store_root`.
    pub fn open(
        config: &LlamaConfig,
        checkpoint: Arc<dyn WeightSource>,
        device: &B::Device,
        store_root: &Path,
    ) -> Result<Self, StreamError> {
        let shell = build_shell(config, checkpoint.as_ref(), device)?;
        checkpoint.release_pages();
        Ok(Self {
            shell,
            slots: vec![Slot::Checkpoint; config.num_hidden_layers],
            checkpoint,
            config: config.clone(),
            store: Arc::new(StoreDir::create(store_root)?),
            device: device.clone(),
        })
    }

    /// Reads every layer not yet replaced from the checkpoint once, into host memory, and drops
    /// it: a missing or misshapen tensor is an error now rather than when the layer's turn
    /// comes, and the device's memory pool does not grow by a layer it does not use yet.
    pub fn check(&self) -> Result<(), StreamError> {
        let host = Default::default();
        for (i, slot) in self.slots.iter().enumerate() {
            if let Slot::Checkpoint = slot {
                build_layer::<NdArray<f32>>(&self.config, self.checkpoint.as_ref(), i, &host)?;
                self.checkpoint.release_pages();
            }
        }
        Ok(())
    }

    /// Every layer read into memory: the model as a plain [`Llama`].
    pub fn into_resident(self) -> Result<Llama<B>, StreamError> {
        let layers = (0..self.slots.len())
            .map(|i| self.layer(i).map(Cow::into_owned))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Llama {
            layers,
            ..self.shell
        })
    }

    /// The folder replaced layers are written to.
    pub fn store_path(&self) -> &Path {
        &self.store.path
    }
}

impl<B: Backend> Layers<B> for StreamedLlama<B> {
    fn shell(&self) -> &Llama<B> {
        &self.shell
    }

    fn layer_count(&self) -> usize {
        self.slots.len()
    }

    fn layer(&self, i: usize) -> Result<Cow<'_, DecoderLayer<B>>, StreamError> {
        match self.slots.get(i) {
            None => Err(StreamError::NoSuchLayer {
                index: i,
                count: self.slots.len(),
            }),
            Some(Slot::Checkpoint) => {
                let layer = build_layer(&self.config, self.checkpoint.as_ref(), i, &self.device);
                self.checkpoint.release_pages();
                Ok(Cow::Owned(layer?))
            }
            Some(Slot::Stored(file)) => {
                let config = match file.experts {
                    Some(count) => Cow::Owned(self.config.with_expert_count(count)),
                    None => Cow::Borrowed(&self.config),
                };
                Ok(Cow::Owned(read_layer(
                    &file.path,
                    &config,
                    i,
                    &self.device,
                )?))
            }
        }
    }

    fn set_layer(&mut self, i: usize, layer: DecoderLayer<B>) -> Result<(), StreamError> {
        let count = self.slots.len();
        if i >= count {
            return Err(StreamError::NoSuchLayer { index: i, count });
        }
        let n = self.store.next.fetch_add(1, Ordering::Relaxed);
        let path = self
            .store
            .path
            .join(format!("layer-{i:05}-{n}.safetensors"));
        let experts = layer
            .experts()
            .map(|moe| moe.routing.count)
            .filter(|&count| Some(count) != self.config.layer_experts(i).map(|e| e.count));
        write_layer(layer, &path)?;
        self.slots[i] = Slot::Stored(Arc::new(LayerFile {
            path,
            experts,
            _store: self.store.clone(),
        }));
        Ok(())
    }

    fn resident(&self) -> Option<&Llama<B>> {
        None
    }
}

/// A model with all its layers in memory, or streamed.
// Both variants hold a model's shell (a few hundred bytes of handles); one is made per model.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum Decoder<B: Backend> {
    /// Every layer in memory.
    Resident(Llama<B>),
    /// One layer at a time.
    Streamed(StreamedLlama<B>),
}

impl<B: Backend> Decoder<B> {
    /// The model with every layer in memory.
    pub fn into_resident(self) -> Result<Llama<B>, StreamError> {
        match self {
            Decoder::Resident(model) => Ok(model),
            Decoder::Streamed(model) => model.into_resident(),
        }
    }
}

impl<B: Backend> Layers<B> for Decoder<B> {
    fn shell(&self) -> &Llama<B> {
        match self {
            Decoder::Resident(m) => m.shell(),
            Decoder::Streamed(m) => m.shell(),
        }
    }

    fn layer_count(&self) -> usize {
        match self {
            Decoder::Resident(m) => m.layer_count(),
            Decoder::Streamed(m) => m.layer_count(),
        }
    }

    fn layer(&self, i: usize) -> Result<Cow<'_, DecoderLayer<B>>, StreamError> {
        match self {
            Decoder::Resident(m) => m.layer(i),
            Decoder::Streamed(m) => m.layer(i),
        }
    }

    fn set_layer(&mut self, i: usize, layer: DecoderLayer<B>) -> Result<(), StreamError> {
        match self {
            Decoder::Resident(m) => m.set_layer(i, layer),
            Decoder::Streamed(m) => m.set_layer(i, layer),
        }
    }

    fn take_layer(&mut self, i: usize) -> Result<DecoderLayer<B>, StreamError> {
        match self {
            Decoder::Resident(m) => m.take_layer(i),
            Decoder::Streamed(m) => m.take_layer(i),
        }
    }

    fn resident(&self) -> Option<&Llama<B>> {
        match self {
            Decoder::Resident(m) => Some(m),
            Decoder::Streamed(_) => None,
        }
    }
}

/// A tensor's values as stored: bf16 when every value is one exactly (its low 16 bits are
/// zero: the weights of a bf16 checkpoint that pruning only zeroed), else f32. Lossless either
/// way; a bf16 checkpoint pruned by Wanda, magnitude or RIA stores half the bytes.
fn stored_bytes(values: &[f32]) -> (Dtype, Vec<u8>) {
    /// Values a task encodes, into its own part of one buffer.
    const BLOCK: usize = 1 << 14;
    // bf16 first, each block noting whether a value had a nonzero low half: one pass over the
    // values when they are all bf16, a pass cut short when they are not.
    let mut bytes = vec![0u8; values.len() * 2];
    let exact = bytes
        .par_chunks_mut(BLOCK * 2)
        .zip(values.par_chunks(BLOCK))
        .all(|(out, values)| {
            let mut low = 0;
            for (o, v) in out.chunks_exact_mut(2).zip(values) {
                let bits = v.to_bits();
                low |= bits & 0xffff;
                o.copy_from_slice(&((bits >> 16) as u16).to_le_bytes());
            }
            low == 0
        });
    if exact {
        return (Dtype::BF16, bytes);
    }
    // The f32 bytes are the save path's; its bf16 rounds, where the store keeps the high half.
    encode(values, SaveDtype::F32, &mut bytes);
    (Dtype::F32, bytes)
}

/// Writes `layer` to `path` as safetensors in Burn's layout (linear weights `[in, out]`), each
/// tensor in bf16 or f32 by [`stored_bytes`], through a temporary file renamed into place, so a
/// file that exists is complete. The layer is consumed: linear weights it holds alone move to
/// the host uncopied.
fn write_layer<B: Backend>(mut layer: DecoderLayer<B>, path: &Path) -> Result<(), StreamError> {
    let mut tensors: Vec<(String, Vec<usize>, Dtype, Vec<u8>)> = Vec::new();
    let mut push = |name: String, shape: Vec<usize>, values: Vec<f32>| {
        let (dtype, bytes) = stored_bytes(&values);
        tensors.push((name, shape, dtype, bytes));
    };
    let names: Vec<String> = layer.linears().into_iter().map(|(name, ..)| name).collect();
    for name in names {
        let linear = layer
            .linear_mut(&name)
            .expect("names come from DecoderLayer::linears");
        let w = take_param(&mut linear.weight);
        push(format!("{name}.weight"), w.dims().to_vec(), to_host_f32(w));
        if let Some(bias) = &linear.bias {
            let b = bias.val();
            push(format!("{name}.bias"), b.dims().to_vec(), to_host_f32(b));
        }
    }
    for (name, norm) in layer.norms() {
        let w = norm.weight.val();
        push(format!("{name}.weight"), w.dims().to_vec(), to_host_f32(w));
        if let Some(bias) = &norm.bias {
            let b = bias.val();
            push(format!("{name}.bias"), b.dims().to_vec(), to_host_f32(b));
        }
    }
    for (name, values) in layer.vectors() {
        push(name.to_string(), vec![values.len()], values.to_vec());
    }
    let damaged = |reason: String| StreamError::Damaged {
        path: path.display().to_string(),
        reason,
    };
    let views = tensors
        .iter()
        .map(|(name, shape, dtype, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes)
                .map(|v| (name.as_str(), v))
                .map_err(|e| damaged(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let partial = path.with_extension("partial");
    safetensors::serialize_to_file(views, None, &partial).map_err(|e| StreamError::Io {
        path: partial.display().to_string(),
        source: std::io::Error::other(e.to_string()),
    })?;
    std::fs::rename(&partial, path).map_err(|source| StreamError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Reads layer `index` as [`write_layer`] wrote it (norms hold their gains as applied).
fn read_layer<B: Backend>(
    path: &Path,
    config: &LlamaConfig,
    index: usize,
    device: &B::Device,
) -> Result<DecoderLayer<B>, StreamError> {
    let shown = || path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| StreamError::Io {
        path: shown(),
        source,
    })?;
    let damaged = |reason: String| StreamError::Damaged {
        path: shown(),
        reason,
    };
    let file = SafeTensors::deserialize(&bytes).map_err(|e| damaged(e.to_string()))?;
    /// Values and shape.
    type Stored = (Vec<f32>, Vec<usize>);
    let tensor = |name: &str| -> Result<Option<Stored>, StreamError> {
        let view = match file.tensor(name) {
            Ok(view) => view,
            Err(safetensors::SafeTensorError::TensorNotFound(_)) => return Ok(None),
            Err(e) => return Err(damaged(e.to_string())),
        };
        let values = match view.dtype() {
            Dtype::F32 => view
                .data()
                .par_chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::BF16 => view
                .data()
                .par_chunks_exact(2)
                .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
                .collect(),
            other => return Err(damaged(format!("`{name}` is {other:?}, not F32 or BF16"))),
        };
        Ok(Some((values, view.shape().to_vec())))
    };
    let required =
        |name: String| tensor(&name)?.ok_or_else(|| damaged(format!("`{name}` is missing")));
    let linear = |name: &str| -> Result<Linear<B>, StreamError> {
        let (w, shape) = required(format!("{name}.weight"))?;
        let [d_in, d_out] = <[usize; 2]>::try_from(shape)
            .map_err(|s| damaged(format!("`{name}.weight` has shape {s:?}")))?;
        let bias = tensor(&format!("{name}.bias"))?
            .map(|(b, shape)| Param::from_tensor(weight_tensor(TensorData::new(b, shape), device)));
        Ok(Linear {
            weight: Param::from_tensor(weight_tensor(TensorData::new(w, [d_in, d_out]), device)),
            bias,
        })
    };
    let norm = |name: &str, _width: usize| -> Result<Norm<B>, StreamError> {
        let (w, shape) = required(format!("{name}.weight"))?;
        let weight = weight_tensor(TensorData::new(w, shape), device);
        Norm::of_family(config, weight, || {
            let (b, shape) = required(format!("{name}.bias"))?;
            Ok(weight_tensor(TensorData::new(b, shape), device))
        })
    };
    DecoderLayer::assemble(
        config,
        index,
        config.architecture.row().fused_linears,
        |name, _inputs, _outputs, _bias| linear(name),
        norm,
        |name, len| match required(name.to_string())? {
            (values, shape) if shape == [len] => Ok(values),
            (_, shape) => Err(damaged(format!(
                "`{name}` has shape {shape:?}, not [{len}]"
            ))),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::HfLlamaConfig;
    use crate::model::checkpoint::{build_llama, SafetensorsSource};
    use crate::model::checkpoint::{save_hf_folder, SaveDtype, SaveSpec};

    type B = NdArray<f32>;

    /// Three layers (untied head, q/k/v bias) saved as a safetensors folder in `dir`.
    fn checkpoint(dir: &Path) -> (LlamaConfig, Arc<dyn WeightSource>) {
        let config = HfLlamaConfig::from_json(
            r#"{"architectures":["Qwen2ForCausalLM"],"hidden_size":16,"intermediate_size":24,
            "num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,
            "vocab_size":40,"rms_norm_eps":1e-5,"tie_word_embeddings":false}"#,
        )
        .unwrap()
        .resolve()
        .unwrap();
        let model = Llama::<B>::init_random(&config, 7, &Default::default());
        let folder = dir.join("model");
        save_hf_folder(
            &model,
            &config,
            "{}",
            &folder,
            &SaveSpec::new(SaveDtype::F32),
        )
        .unwrap();
        (config, Arc::new(SafetensorsSource::open(&folder).unwrap()))
    }

    fn weights(model: &impl Layers<B>) -> Vec<Vec<f32>> {
        (0..model.layer_count())
            .flat_map(|i| {
                let layer = model.layer(i).unwrap().into_owned();
                layer
                    .linears()
                    .into_iter()
                    .map(|(.., l)| to_host_f32(l.weight.val()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// A layer taken from a model in memory holds its linear weights alone (so pruning moves
    /// them instead of copying the layer), the model lacks them until the layer is set again,
    /// and setting it back restores the model.
    #[test]
    fn a_taken_layer_holds_its_weights_alone_until_it_is_set_back() {
        let dir = tempfile::tempdir().unwrap();
        let (config, source) = checkpoint(dir.path());
        let mut model = build_llama::<B>(&config, source.as_ref(), &Default::default()).unwrap();
        let before = weights(&model);
        let alone = |layer: &mut DecoderLayer<B>, name: &str| {
            let linear = layer.linear_mut(name).unwrap();
            let weight = take_param(&mut linear.weight);
            let primitive = weight.clone().into_primitive().tensor();
            let burn::backend::ndarray::NdArrayTensor::F32(storage) = primitive else {
                panic!("{name} is not f32");
            };
            drop(weight);
            let unique = storage.is_unique();
            let weight =
                Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(storage.into()));
            linear.weight = Param::from_tensor(weight);
            unique
        };
        // A borrowed copy shares every weight with the model.
        let mut copy = model.layer(1).unwrap().into_owned();
        assert!(!alone(&mut copy, "self_attn.q_proj"));
        drop(copy);
        let mut layer = model.take_layer(1).unwrap();
        let names: Vec<String> = layer.linears().into_iter().map(|(name, ..)| name).collect();
        for name in names {
            assert!(alone(&mut layer, &name), "{name}");
            let left = model.layers[1].linear_mut(&name).unwrap().weight.val();
            assert_eq!(left.dims(), [0, 0], "{name}");
        }
        model.set_layer(1, layer).unwrap();
        assert_eq!(weights(&model), before);
    }

    /// The stored bytes are each value's own: its f32 bytes, or the high half of its bits when
    /// every value has a zero low half (NaN payloads, signed zeros and infinities unchanged),
    /// across the encoding's blocks.
    #[test]
    fn stored_bytes_are_each_values_bits() {
        let specials = [f32::from_bits(0x7fc1_0000), -0.0, f32::INFINITY, -1.5, 0.0];
        let mut values: Vec<f32> = (0..3 * (1 << 14) + 5)
            .map(|i| half::bf16::from_f32(i as f32 * 0.37 - 900.0).to_f32())
            .collect();
        values[..specials.len()].copy_from_slice(&specials);
        let (dtype, bytes) = stored_bytes(&values);
        assert_eq!(dtype, Dtype::BF16);
        let want: Vec<u8> = values
            .iter()
            .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
            .collect();
        assert_eq!(bytes, want);
        values[7] = 0.1;
        let (dtype, bytes) = stored_bytes(&values);
        assert_eq!(dtype, Dtype::F32);
        let want: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(bytes, want);
    }

    /// A layer whose values are all bf16 numbers (a bf16 checkpoint, pruned by zeroing) is
    /// stored in half the bytes and read back to the bit; any other value keeps f32.
    #[test]
    fn stored_layers_are_bf16_when_that_is_lossless_and_f32_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let (config, source) = checkpoint(dir.path());
        let device = Default::default();
        let f32_layer =
            crate::model::checkpoint::build_layer::<B>(&config, source.as_ref(), 0, &device)
                .unwrap();
        // The same layer rounded to bf16 values, as a bf16 checkpoint loads.
        let mut bf16_layer = f32_layer.clone();
        for (name, _, _) in f32_layer.linears() {
            let linear = bf16_layer.linear_mut(&name).unwrap();
            let values: Vec<f32> = to_host_f32(linear.weight.val())
                .iter()
                .map(|v| half::bf16::from_f32(*v).to_f32())
                .collect();
            let dims = linear.weight.val().dims();
            linear.weight =
                Param::from_tensor(Tensor::from_data(TensorData::new(values, dims), &device));
        }
        let values = |layer: &DecoderLayer<B>| -> Vec<Vec<f32>> {
            layer
                .linears()
                .into_iter()
                .map(|(.., l)| to_host_f32(l.weight.val()))
                .collect()
        };
        let mut sizes = Vec::new();
        for (i, layer) in [&f32_layer, &bf16_layer].into_iter().enumerate() {
            let path = dir.path().join(format!("layer-{i}.safetensors"));
            write_layer(layer.clone(), &path).unwrap();
            sizes.push(std::fs::metadata(&path).unwrap().len());
            let back = read_layer::<B>(&path, &config, 0, &device).unwrap();
            assert_eq!(values(&back), values(layer), "layer {i}");
        }
        let linear_values: u64 = f32_layer
            .linears()
            .iter()
            .map(|(_, _, l)| l.weight.val().dims().iter().product::<usize>() as u64)
            .sum();
        // Two bytes fewer per weight; the headers differ by a few bytes ("BF16" vs "F32").
        let saved = sizes[0] - sizes[1];
        assert!(
            (linear_values * 2..linear_values * 2 + 64).contains(&saved),
            "{sizes:?}"
        );
    }

    #[test]
    fn clones_share_stored_layers_until_they_replace_them_and_the_last_drop_removes_them() {
        let dir = tempfile::tempdir().unwrap();
        let (config, source) = checkpoint(dir.path());
        let device = Default::default();
        let dense = StreamedLlama::<B>::open(&config, source, &device, dir.path()).unwrap();
        let store = dense.store_path().to_path_buf();
        let files = || std::fs::read_dir(&store).map_or(0, |d| d.count());
        let mut pruned = dense.clone();
        let mut layer = pruned.layer(1).unwrap().into_owned();
        let up = layer.linear_mut("mlp.up_proj").unwrap();
        up.weight = Param::from_tensor(up.weight.val().zeros_like());
        pruned.set_layer(1, layer).unwrap();
        assert_eq!(files(), 1);
        let zeros = |m: &StreamedLlama<B>| {
            let layer = m.layer(1).unwrap();
            let linears = layer.linears();
            let (.., up) = linears.iter().find(|(n, ..)| n == "mlp.up_proj").unwrap();
            to_host_f32(up.weight.val())
                .iter()
                .filter(|v| **v == 0.0)
                .count()
        };
        assert_eq!(zeros(&pruned), 16 * 24);
        assert_eq!(
            zeros(&dense),
            0,
            "the dense model still reads the checkpoint"
        );
        let copy = pruned.clone();
        drop(pruned);
        assert_eq!(zeros(&copy), 16 * 24, "a clone keeps the stored layer");
        let resident = copy.clone().into_resident().unwrap();
        assert_eq!(resident.layers.len(), 3);
        drop(copy);
        assert_eq!(files(), 0, "the last model using the file removed it");
        drop(dense);
        assert!(!store.exists(), "the store folder goes with its last model");
    }

    #[test]
    fn a_streamed_model_saves_the_same_files_as_one_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let (config, source) = checkpoint(dir.path());
        let device = Default::default();
        let resident = build_llama::<B>(&config, source.as_ref(), &device).unwrap();
        let streamed = StreamedLlama::<B>::open(&config, source, &device, dir.path()).unwrap();
        // Small shards, so layers are split across files.
        let mut spec = SaveSpec::new(SaveDtype::Bf16);
        spec.max_shard_bytes = 3000;
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        save_hf_folder(&resident, &config, "{}", &a, &spec).unwrap();
        save_hf_folder(&streamed, &config, "{}", &b, &spec).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(&a)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert!(names.len() > 4, "{names:?}");
        for name in names {
            assert_eq!(
                std::fs::read(a.join(&name)).unwrap(),
                std::fs::read(b.join(&name)).unwrap(),
                "{name:?}"
            );
        }
        // And the shards load back as the model, to bf16 rounding.
        let back =
            build_llama::<B>(&config, &SafetensorsSource::open(&b).unwrap(), &device).unwrap();
        for (x, y) in weights(&resident)
            .concat()
            .iter()
            .zip(weights(&back).concat())
        {
            assert!((x - y).abs() <= x.abs() / 128.0, "{x} vs {y}");
        }
    }

    #[test]
    fn a_damaged_store_file_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let (config, source) = checkpoint(dir.path());
        let device = Default::default();
        let mut model = StreamedLlama::<B>::open(&config, source, &device, dir.path()).unwrap();
        let layer = model.layer(0).unwrap().into_owned();
        model.set_layer(0, layer).unwrap();
        let Slot::Stored(file) = &model.slots[0] else {
            panic!("layer 0 was stored");
        };
        std::fs::write(&file.path, b"not safetensors").unwrap();
        let err = model.layer(0).unwrap_err().to_string();
        assert!(err.contains("layer-00000-0.safetensors"), "{err}");
        assert!(err.contains("damaged"), "{err}");
        assert!(matches!(
            model.layer(3),
            Err(StreamError::NoSuchLayer { index: 3, count: 3 })
        ));
    }
}
