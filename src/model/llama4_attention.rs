//! What Llama 4's attention adds to the decoder's ([`Llama4Attention`], transformers'
//! `Llama4TextAttention`):
//! - chunked attention on the layers `layer_types` names `chunked_attention`: a query sees the
//!   keys of its own chunk of `attention_chunk_size` positions up to itself
//!   (`create_chunked_causal_mask`), [`chunk_mask`];
//! - on the layers that rotate, queries and keys scaled to unit RMS over each head after RoPE,
//!   without a gain, in f32 (`Llama4TextL2Norm` with `rms_norm_eps`, where `use_qk_norm`),
//!   [`unit_rms`];
//! - on the NoPE layers, queries scaled by a temperature that grows with the position,
//!   `log1p(floor((p + 1) / floor_scale)) · attn_scale + 1` (`attn_temperature_tuning`),
//!   [`QueryTemperature::apply`].

use burn::prelude::*;
use burn::tensor::FloatDType;
use serde::{Deserialize, Serialize};

/// Llama 4's attention additions ([`crate::model::config::DecoderExtras::llama4_attention`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Llama4Attention {
    /// Positions per chunk of the chunked layers (`attention_chunk_size`).
    pub chunk_size: usize,
    /// Per layer: `true` where it attends within chunks (`chunked_attention`).
    pub chunked_layers: Vec<bool>,
    /// Whether the rotating layers scale queries and keys to unit RMS after RoPE
    /// (`use_qk_norm`); the epsilon is the model's `rms_norm_eps`.
    pub unit_qk_norm: bool,
    /// The NoPE layers' query temperature (`attn_temperature_tuning`); `None` without it.
    pub temperature: Option<QueryTemperature>,
}

/// The temperature of a NoPE layer's queries (`floor_scale`, `attn_scale`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueryTemperature {
    /// Positions per step of the temperature (`floor_scale`).
    pub floor_scale: f64,
    /// The temperature's growth per step, on a log scale (`attn_scale`).
    pub attn_scale: f64,
}

impl QueryTemperature {
    /// The factor of the queries at position `p`, in f32 as transformers computes it:
    /// `log1p(floor((p + 1) / floor_scale)) · attn_scale + 1` (1 before `floor_scale − 1`).
    pub fn factor(self, p: usize) -> f32 {
        let steps = ((p as f32 + 1.0) / self.floor_scale as f32).floor();
        steps.ln_1p() * self.attn_scale as f32 + 1.0
    }

    /// `q` with each position's queries times its factor, multiplied in f32 and returned in
    /// `q`'s type; the queries are positions `offset, offset + 1, …`.
    ///
    /// # Shapes
    /// - `q`: `[batch, heads, seq, head_dim]` → same
    pub fn apply<B: Backend>(self, q: Tensor<B, 4>, offset: usize) -> Tensor<B, 4> {
        let seq = q.dims()[2];
        let factors: Vec<f32> = (offset..offset + seq).map(|p| self.factor(p)).collect();
        if factors.iter().all(|&f| f == 1.0) {
            return q;
        }
        let dtype = q.dtype();
        let factors = Tensor::<B, 1>::from_data(
            TensorData::new(factors, [seq]),
            (&q.device(), burn::tensor::DType::F32),
        )
        .reshape([1, 1, seq, 1]);
        (q.cast(FloatDType::F32) * factors).cast(dtype)
    }
}

/// `t` scaled to unit RMS over its last dimension, `t · rsqrt(mean(t²) + eps)`, computed in f32
/// and returned in `t`'s type (`Llama4TextL2Norm`).
///
/// # Shapes
/// - `t`: `[batch, heads, seq, head_dim]` → same
pub fn unit_rms<B: Backend>(t: Tensor<B, 4>, eps: f64) -> Tensor<B, 4> {
    let dtype = t.dtype();
    let x = t.cast(FloatDType::F32);
    // A division, not `recip`: NdArray's reciprocal is the hardware approximation
    // (see `Norm::forward`).
    let rms = (x.clone().square().mean_dim(3) + eps).sqrt();
    (x / rms).cast(dtype)
}

/// The first key a block of queries starting at absolute position `first_query` may see in
/// chunks of `chunk` positions: its chunk's start.
pub fn chunk_start(first_query: usize, chunk: usize) -> usize {
    first_query / chunk.max(1) * chunk.max(1)
}

/// The chunk mask (`true`: hidden) of `seq` queries that are the last of `keys` keys at the
/// absolute positions `first_key, first_key + 1, …`: key `j` is hidden from query `i` when it
/// lies in an earlier chunk of `chunk` positions; `None` when it hides nothing. Causality is
/// masked separately.
///
/// # Shapes
/// - returns `[batch, heads, seq, keys]`
pub fn chunk_mask<B: Backend>(
    [batch, heads, seq, keys]: [usize; 4],
    first_key: usize,
    chunk: usize,
    device: &B::Device,
) -> Option<Tensor<B, 4, Bool>> {
    let first_query = first_key + keys - seq;
    let hidden: Vec<bool> = (0..seq)
        .flat_map(|i| {
            let start = chunk_start(first_query + i, chunk);
            (0..keys).map(move |j| first_key + j < start)
        })
        .collect();
    if !hidden.contains(&true) {
        return None;
    }
    let mask = Tensor::<B, 2, Bool>::from_data(TensorData::new(hidden, [seq, keys]), device);
    Some(
        mask.reshape([1, 1, seq, keys])
            .expand([batch, heads, seq, keys]),
    )
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;

    use super::*;

    type Nd = NdArray<f32>;

    /// The temperature is 1 up to position `floor_scale − 2`, then `log1p(1)·s + 1` for the
    /// next `floor_scale` positions, `log1p(2)·s + 1` after.
    #[test]
    fn the_temperature_steps_every_floor_scale_positions() {
        let t = QueryTemperature {
            floor_scale: 4.0,
            attn_scale: 0.5,
        };
        let steps: Vec<f32> = (0..9).map(|p| t.factor(p)).collect();
        let one = 2f32.ln() * 0.5 + 1.0;
        let two = 3f32.ln() * 0.5 + 1.0;
        assert_eq!(steps, [1.0, 1.0, 1.0, one, one, one, one, two, two]);
        let q = Tensor::<Nd, 4>::ones([1, 1, 3, 2], &Default::default());
        let out: Vec<f32> = t.apply(q, 2).into_data().to_vec().unwrap();
        assert_eq!(out, [1.0, 1.0, one, one, one, one]);
    }

    /// `[3, 4]` has RMS `√12.5`: it becomes `[3, 4] / √(12.5 + eps)`.
    #[test]
    fn unit_rms_divides_by_the_root_mean_square() {
        let t = Tensor::<Nd, 4>::from_data(
            TensorData::new(vec![3.0f32, 4.0], [1, 1, 1, 2]),
            &Default::default(),
        );
        let out: Vec<f32> = unit_rms(t, 0.5).into_data().to_vec().unwrap();
        let rms = 13f32.sqrt();
        assert!((out[0] - 3.0 / rms).abs() < 1e-6 && (out[1] - 4.0 / rms).abs() < 1e-6);
    }

    /// Chunks of 3: the queries at positions 4 and 5 of keys 2 … 5 see keys from 3 on; a block
    /// within one chunk hides nothing.
    #[test]
    fn a_query_sees_the_keys_of_its_own_chunk() {
        let device = Default::default();
        let mask = chunk_mask::<Nd>([1, 1, 2, 4], 2, 3, &device).unwrap();
        let hidden: Vec<bool> = mask.into_data().to_vec().unwrap();
        assert_eq!(
            hidden,
            [true, false, false, false, true, false, false, false]
        );
        assert!(chunk_mask::<Nd>([1, 1, 2, 3], 3, 3, &device).is_none());
        assert_eq!(chunk_start(5, 3), 3);
        assert_eq!(chunk_start(6, 3), 6);
    }
}
