//! ALiBi (Press et al. 2022, "Train Short, Test Long"), BLOOM's positions: no position enters
//! the embeddings or rotates a head; instead every attention score of head `h` gets
//! `slope_h · j` added, `j` being the key's position, before the causal softmax. With the
//! causal mask this equals the paper's `slope_h · (j − i)` (a row's constant shift leaves its
//! softmax unchanged); the bias is formed as transformers forms it, `slope · j` in f32, added
//! to the scaled `q·k`.

use burn::prelude::*;

/// The slope of each of `heads` heads, as transformers' `_get_alibi_slopes`: for the largest
/// power of two `c ≤ heads`, `base^1 … base^c` with `base = 2^(−8/c)`; the remaining heads take
/// the odd powers `1, 3, 5, …` of `2^(−4/c)` (the slopes of `2c` heads that a power of two
/// would skip). Computed in f64 from the f32 base and rounded once: correctly rounded, where
/// PyTorch's f32 `pow` is within an ulp of it.
pub fn slopes(heads: usize) -> Vec<f32> {
    if heads == 0 {
        return Vec::new();
    }
    let closest = 1usize << heads.ilog2();
    // transformers builds each base in f64 and stores it as an f32 tensor.
    let base = |count: usize| f64::from((2f64).powf(-8.0 / count as f64) as f32);
    let power = |base: f64, k: usize| base.powi(k as i32) as f32;
    let first = base(closest);
    let mut out: Vec<f32> = (1..=closest).map(|k| power(first, k)).collect();
    if closest != heads {
        let (extra, odd) = ((heads - closest).min(closest), base(2 * closest));
        out.extend((1..2 * extra).step_by(2).map(|k| power(odd, k)));
    }
    out
}

/// The bias of every head's scores against the keys at positions `keys`, the same for each
/// of `rows` query rows: `slopes[h] · j` in f32.
///
/// # Shapes
/// - returns `[batch, slopes.len(), rows, keys.len()]`
pub fn bias<B: Backend>(
    slopes: &[f32],
    keys: std::ops::Range<usize>,
    batch: usize,
    rows: usize,
    device: &B::Device,
) -> Tensor<B, 4> {
    let heads = slopes.len();
    let width = keys.len();
    let values: Vec<f32> = slopes
        .iter()
        .flat_map(|&slope| keys.clone().map(move |j| slope * j as f32))
        .collect();
    Tensor::<B, 2>::from_data(TensorData::new(values, [heads, width]), device)
        .reshape([1, heads, 1, width])
        .expand([batch, heads, rows, width])
}

impl crate::model::arch::LlamaConfig {
    /// ALiBi's slope of every query head where positions enter as its bias (BLOOM).
    pub fn alibi_slopes(&self) -> Option<Vec<f32>> {
        self.extras
            .alibi
            .then(|| crate::model::arch::alibi::slopes(self.num_attention_heads))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// transformers 5.24's `_get_alibi_slopes` on the CPU, as printed by PyTorch.
    #[test]
    fn slopes_are_transformers_for_powers_of_two_and_the_rest() {
        // BLOOM-560m's 16 heads: powers of 2^(−1/2), each within an ulp of PyTorch's (the
        // bits it gives).
        let torch16 = [
            0x3f35_04f3_u32,
            0x3eff_ffff,
            0x3eb5_04f3,
            0x3e7f_ffff,
            0x3e35_04f2,
            0x3dff_fffe,
            0x3db5_04f2,
            0x3d7f_fffe,
            0x3d35_04f1,
            0x3cff_fffd,
            0x3cb5_04f1,
            0x3c7f_fffd,
            0x3c35_04f0,
            0x3bff_fffc,
            0x3bb5_04f0,
            0x3b7f_fffb,
        ]
        .map(f32::from_bits);
        let within_an_ulp = |a: f32, b: f32| (a - b).abs() <= b * f32::EPSILON;
        for (k, (s, torch)) in slopes(16).into_iter().zip(torch16).enumerate() {
            assert!(within_an_ulp(s, torch), "{k}: {s} vs {torch}");
        }
        // 5 heads: 2^(−2k) for four, then 2^(−1), the first odd power of 2c = 8 heads' base.
        assert_eq!(slopes(5), vec![0.25, 0.0625, 0.015625, 0.003_906_25, 0.5]);
        // BLOOM-176B's 112 heads: 64 of base 2^(−1/8), then 48 odd powers of 2^(−1/16).
        let s112 = slopes(112);
        assert_eq!(s112.len(), 112);
        for (i, torch) in [
            (0, 0.917_004_05_f32),
            (63, 0.003_906_251_4),
            (64, 0.957_603_3),
            (111, 0.016_316_77),
        ] {
            assert!(
                (s112[i] - torch).abs() <= torch * 1.2e-7,
                "{i}: {}",
                s112[i]
            );
        }
        assert_eq!(slopes(1), vec![2f32.powi(-8)]);
        assert!(slopes(0).is_empty());
    }

    #[test]
    fn the_bias_is_each_heads_slope_times_the_key_position() {
        type B = burn::backend::NdArray<f32>;
        let device = Default::default();
        let bias = bias::<B>(&[0.5, 0.25], 3..6, 2, 4, &device);
        assert_eq!(bias.dims(), [2, 2, 4, 3]);
        let values = bias.into_data().to_vec::<f32>().unwrap();
        // Batch 1, head 1, row 3: 0.25 · (3, 4, 5).
        let at = |b: usize, h: usize, r: usize| (((b * 2 + h) * 4) + r) * 3;
        assert_eq!(values[at(1, 1, 3)..at(1, 1, 3) + 3], [0.75, 1.0, 1.25]);
        assert_eq!(values[at(0, 0, 0)..at(0, 0, 0) + 3], [1.5, 2.0, 2.5]);
    }
}
