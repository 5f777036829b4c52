//! The calibration activations between layers: every sample's input of the layer being
//! pruned, in batches, on the device or — when the device is short of memory — in host memory,
//! with one batch on the device at a time (as llm-compressor's sequential onloading keeps them
//! on the CPU). Where they live changes memory and transfer time, never a number.

use burn::prelude::*;

use super::PruneError;

use crate::model::decoder::{DecoderLayer, LayerContext, LinearInput, Llama};

/// How calibration samples pass through the layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Samples per forward pass.
    pub batch: usize,
    /// The activations wait in host memory between passes instead of on the device.
    pub host_activations: bool,
}

/// A batch size with the activations on the device.
impl From<usize> for Batching {
    fn from(batch: usize) -> Self {
        Self {
            batch,
            host_activations: false,
        }
    }
}

/// The length of the calibration `windows`, or an error where there are none, they are
/// empty or not all of one length.
pub(crate) fn window_length(windows: &[Vec<u32>]) -> Result<usize, PruneError> {
    let seqlen = windows.first().map(Vec::len).unwrap_or(0);
    if seqlen == 0 || windows.iter().any(|w| w.len() != seqlen) {
        return Err(PruneError::NoSamples {
            what: "calibration set (empty or windows of unequal length)",
        });
    }
    Ok(seqlen)
}

/// Every sample's activations at one layer boundary, one entry per batch.
pub(crate) struct Activations<B: Backend> {
    batches: Vec<Stored<B>>,
    device: B::Device,
}

enum Stored<B: Backend> {
    Device(Tensor<B, 3>),
    Host(TensorData),
}

impl<B: Backend> Activations<B> {
    /// The batches, each moved to host memory as it comes when `host` says so (so a lazy
    /// iterator never has more than one batch on the device).
    pub fn new(
        batches: impl IntoIterator<Item = Tensor<B, 3>>,
        host: bool,
        device: &B::Device,
    ) -> Self {
        Self {
            batches: batches.into_iter().map(|t| store(t, host)).collect(),
            device: device.clone(),
        }
    }

    /// The inputs of decoder layer 0 for the calibration `windows` (token ids, each `seqlen`
    /// long), `batching.batch` samples to a batch, kept where `batching` says.
    pub fn embed(
        shell: &Llama<B>,
        windows: &[Vec<u32>],
        seqlen: usize,
        batching: Batching,
        device: &B::Device,
    ) -> Self {
        let batches = windows.chunks(batching.batch.max(1)).map(|chunk| {
            let ids: Vec<i64> = chunk.iter().flatten().map(|&t| i64::from(t)).collect();
            let tokens =
                Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [chunk.len(), seqlen]), device);
            shell.embed(tokens)
        });
        Self::new(batches, batching.host_activations, device)
    }

    /// Batch `i` on the device (a copy uploaded from the host when it lives there).
    pub fn get(&self, i: usize) -> Tensor<B, 3> {
        match &self.batches[i] {
            Stored::Device(t) => t.clone(),
            Stored::Host(data) => Tensor::from_data(data.clone(), &self.device),
        }
    }

    /// Batches.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// Each batch on the device, in order.
    pub fn iter(&self) -> impl Iterator<Item = Tensor<B, 3>> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The outputs of `layer` for every batch, kept where the inputs were; each input is
    /// dropped once its output exists.
    pub fn forward(self, layer: &DecoderLayer<B>, cos: &Tensor<B, 2>, sin: &Tensor<B, 2>) -> Self {
        self.forward_observed(layer, cos, sin, &mut |_, _| {})
    }

    /// [`Activations::forward`] that shows `observe` the input of every linear of each batch,
    /// as [`DecoderLayer::forward_observed`] does: statistics and outputs in one pass.
    pub fn forward_observed(
        self,
        layer: &DecoderLayer<B>,
        cos: &Tensor<B, 2>,
        sin: &Tensor<B, 2>,
        observe: &mut dyn FnMut(LinearInput, &Tensor<B, 3>),
    ) -> Self {
        let Self { batches, device } = self;
        let batches = batches
            .into_iter()
            .map(|stored| {
                let (x, host) = match stored {
                    Stored::Device(t) => (t, false),
                    Stored::Host(data) => (Tensor::from_data(data, &device), true),
                };
                let ctx = LayerContext {
                    cos,
                    sin,
                    cache: None,
                };
                store(layer.forward_observed(x, ctx, observe), host)
            })
            .collect();
        Self { batches, device }
    }
}

fn store<B: Backend>(t: Tensor<B, 3>, host: bool) -> Stored<B> {
    if host {
        Stored::Host(t.into_data())
    } else {
        Stored::Device(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f32>;

    #[test]
    fn host_and_device_activations_hold_the_same_values() {
        let device = Default::default();
        let batches = || {
            (0..3)
                .map(|i| {
                    let v: Vec<f32> = (0..8).map(|j| (i * 8 + j) as f32 * 0.5).collect();
                    Tensor::<B, 3>::from_data(TensorData::new(v, [2, 2, 2]), &device)
                })
                .collect::<Vec<_>>()
        };
        let on_device = Activations::new(batches(), false, &device);
        let on_host = Activations::new(batches(), true, &device);
        assert!(matches!(on_host.batches[0], Stored::Host(_)));
        assert!(matches!(on_device.batches[0], Stored::Device(_)));
        for (a, b) in on_device.iter().zip(on_host.iter()) {
            assert_eq!(a.into_data(), b.into_data());
        }
        assert_eq!(on_host.len(), 3);
    }
}
