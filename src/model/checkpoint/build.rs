//! Building a [`Llama`] (whole, its shell, or one layer) from a [`WeightSource`].

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::prelude::*;
use burn::tensor::DType;

use crate::model::arch::rope;
use crate::model::arch::LlamaConfig;
use crate::model::decoder::{DecoderLayer, Llama, Norm};
use crate::model::kernels::weight_tensor;
use crate::sys::phases::PhaseClock;

use super::{Shaped, WeightError, WeightSource};

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
    /// where the family stores `w` ([`crate::model::arch::DecoderExtras::norm_offset`]), or
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
        sparse: None,
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
        config.architecture.row().fused_linears,
        |name, inputs, outputs, bias| b.linear(&format!("{p}.{name}"), inputs, outputs, bias),
        |name, width| b.norm(&format!("{p}.{name}"), width, config),
        |name, len| b.fetch(&format!("{p}.{name}"), &[len]),
    )
}
