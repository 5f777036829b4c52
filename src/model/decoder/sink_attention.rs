//! Attention with sinks (GPT-OSS): each head's learned logit `s_h` joins every query's softmax
//! as one more key that every query sees and that adds nothing to the output,
//! `p_ij = exp(a_ij) / (Σ_j' exp(a_ij') + exp(s_h))` — transformers' GPT-OSS attention
//! concatenates the sink to the scores, takes the softmax and drops the sink's column.

use burn::prelude::*;
use burn::tensor::activation::softmax;
use burn::tensor::ops::AttentionModuleOptions;

/// Causal attention of `q`'s rows, the last of `k`'s positions, with one sink logit per head:
/// the scores `q·k · scale` (soft-capped where `options` says), the keys `mask` hides and those
/// after each query removed, `bias` added, then the softmax over the keys and the head's sink,
/// in the tensors' type (f32 on the generic path).
///
/// # Shapes
/// - `q`: `[batch, heads, seq, head_dim]`; `k`, `v`: `[batch, heads, keys, head_dim]`,
///   `keys ≥ seq`; `mask`, `bias`: `[batch, heads, seq, keys]`; `sinks`: one per head
///   → `[batch, heads, seq, head_dim]`
pub(crate) fn attention_with_sinks<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    mask: Option<Tensor<B, 4, Bool>>,
    bias: Option<Tensor<B, 4>>,
    options: AttentionModuleOptions,
    sinks: &[f32],
) -> Tensor<B, 4> {
    let [batch, heads, seq, head_dim] = q.dims();
    let keys = k.dims()[2];
    let device = q.device();
    let scale = options
        .scale
        .unwrap_or_else(|| 1.0 / (head_dim as f64).sqrt());
    let mut scores = q.matmul(k.swap_dims(2, 3)) * scale;
    if let Some(cap) = options.softcap {
        scores = (scores / cap).tanh() * cap;
    }
    if let Some(mask) = mask {
        scores = scores.mask_fill(mask, f32::NEG_INFINITY);
    }
    // Key `j` comes after query `i`, at position `keys − seq + i`, when `j > keys − seq + i`.
    let offset = keys - seq;
    let future: Vec<bool> = (0..seq)
        .flat_map(|i| (0..keys).map(move |j| j > offset + i))
        .collect();
    let future = Tensor::<B, 2, Bool>::from_data(TensorData::new(future, [seq, keys]), &device)
        .reshape([1, 1, seq, keys])
        .expand([batch, heads, seq, keys]);
    scores = scores.mask_fill(future, f32::NEG_INFINITY);
    if let Some(bias) = bias {
        scores = scores + bias;
    }
    let sinks = Tensor::<B, 1>::from_data(TensorData::new(sinks.to_vec(), [heads]), &device)
        .cast(scores.dtype())
        .reshape([1, heads, 1, 1])
        .expand([batch, heads, seq, 1]);
    let probs = softmax(Tensor::cat(vec![scores, sinks], 3), 3);
    probs.slice(s![.., .., .., 0..keys]).matmul(v)
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;
    use burn::tensor::module::attention;

    use super::*;

    type Nd = NdArray<f32>;

    fn tensor(values: &[f32], shape: [usize; 4]) -> Tensor<Nd, 4> {
        Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
    }

    fn options() -> AttentionModuleOptions {
        AttentionModuleOptions {
            scale: None,
            softcap: None,
            is_causal: true,
        }
    }

    /// One head of width 1, two positions, sink `s`: query 0 sees key 0 and the sink, query 1
    /// both keys and the sink; each output is the weighted values, the sink's weight lost.
    #[test]
    fn the_sink_takes_its_share_of_every_querys_softmax() {
        let (q, k, v, s) = ([0.5f32, 2.0], [1.0f32, -1.0], [3.0f32, 5.0], 0.25f32);
        let out = attention_with_sinks(
            tensor(&q, [1, 1, 2, 1]),
            tensor(&k, [1, 1, 2, 1]),
            tensor(&v, [1, 1, 2, 1]),
            None,
            None,
            options(),
            &[s],
        );
        let out: Vec<f32> = out.into_data().to_vec().unwrap();
        let e = |x: f32| f64::from(x).exp();
        let a = |i: usize, j: usize| q[i] * k[j];
        let want0 = e(a(0, 0)) * f64::from(v[0]) / (e(a(0, 0)) + e(s));
        let (e10, e11) = (e(a(1, 0)), e(a(1, 1)));
        let want1 = (e10 * f64::from(v[0]) + e11 * f64::from(v[1])) / (e10 + e11 + e(s));
        for (got, want) in out.iter().zip([want0, want1]) {
            assert!((f64::from(*got) - want).abs() < 1e-6, "{out:?} vs {want}");
        }
    }

    /// A sink far below every score takes nothing: plain causal attention, a window's mask and
    /// more keys than queries (a cached prefix) included.
    #[test]
    fn a_vanishing_sink_is_plain_causal_attention() {
        let (batch, heads, seq, keys, d) = (2, 3, 4, 6, 5);
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 29 + seed * 13) % 37) as f32 - 18.0) / 9.0)
                .collect()
        };
        let q = tensor(&values(batch * heads * seq * d, 1), [batch, heads, seq, d]);
        let k = tensor(
            &values(batch * heads * keys * d, 2),
            [batch, heads, keys, d],
        );
        let v = tensor(
            &values(batch * heads * keys * d, 3),
            [batch, heads, keys, d],
        );
        // Keys three or more positions behind a query are hidden.
        let hidden: Vec<bool> = (0..seq)
            .flat_map(|i| (0..keys).map(move |j| keys - seq + i >= j + 3))
            .collect();
        let mask = Tensor::<Nd, 2, Bool>::from_data(
            TensorData::new(hidden, [seq, keys]),
            &Default::default(),
        )
        .reshape([1, 1, seq, keys])
        .expand([batch, heads, seq, keys]);
        let opts = AttentionModuleOptions {
            scale: Some(0.3),
            ..options()
        };
        let with_sinks = attention_with_sinks(
            q.clone(),
            k.clone(),
            v.clone(),
            Some(mask.clone()),
            None,
            opts,
            &[-1e30; 3],
        );
        let plain = attention(q, k, v, Some(mask), None, opts);
        let (a, b): (Vec<f32>, Vec<f32>) = (
            with_sinks.into_data().to_vec().unwrap(),
            plain.into_data().to_vec().unwrap(),
        );
        let diff = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(diff < 1e-6, "{diff}");
    }
}
