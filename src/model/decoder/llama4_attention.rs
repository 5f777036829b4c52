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
    use crate::model::arch::QueryTemperature;

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
