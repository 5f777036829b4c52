//! Rotary position embeddings (RoPE, Su et al. 2021) in the Hugging Face "rotate half" layout,
//! with linear, Llama-3, YaRN, LongRoPE and per-frequency (GGUF `rope_freqs`) scaling.

use burn::prelude::*;

use super::config::{LlamaConfig, RopeScaling};
use super::extras::DecoderExtras;

/// Inverse frequencies `1 / theta^(2i/d)` for `i in 0..d/2`, after the config's scaling, `d`
/// the dimensions of a head that rotate ([`LlamaConfig::rotary_dim`]).
///
/// Computed in f64 and rounded once to f32, which matches PyTorch's f32 computation to the
/// last bit for the bases in use and keeps every backend on the same values.
///
/// LongRoPE gives its short frequencies here, those of runs within the pre-training context;
/// [`long_inv_freq`] gives the others.
pub fn inv_freq(config: &LlamaConfig) -> Vec<f32> {
    let base = base_inv_freq(config);
    let scaled: Vec<f64> = match &config.rope_scaling {
        RopeScaling::None => base,
        RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
        RopeScaling::Factors(factors) => {
            let factors: Vec<f64> = factors.iter().map(|&f| f64::from(f)).collect();
            divided(&base, &factors)
        }
        RopeScaling::LongRope { short_factor, .. } => divided(&base, short_factor),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let old = *original_max_position_embeddings as f64;
            let low_wavelen = old / low_freq_factor;
            let high_wavelen = old / high_freq_factor;
            base.iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
        RopeScaling::Yarn {
            factor,
            original_max_position_embeddings,
            beta_fast,
            beta_slow,
            truncate,
            ..
        } => {
            // transformers' `_compute_yarn_parameters`: the dimension whose frequency turns
            // `rotations` times over the original context, …
            let (d, theta) = (config.rotary_dim() as f64, config.rope_theta);
            let original = *original_max_position_embeddings as f64;
            let correction = |rotations: f64| {
                d * (original / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln())
            };
            let (mut low, mut high) = (correction(*beta_fast), correction(*beta_slow));
            if *truncate {
                (low, high) = (low.floor(), high.ceil());
            }
            let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
            if low == high {
                high += 0.001;
            }
            // … and a linear ramp between them from kept to divided by `factor`.
            base.iter()
                .enumerate()
                .map(|(i, &f)| {
                    let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    let kept = 1.0 - ramp;
                    f / factor * (1.0 - kept) + f * kept
                })
                .collect()
        }
    };
    scaled.into_iter().map(|f| f as f32).collect()
}

/// LongRoPE's frequencies for runs past the pre-training context, with that context's length:
/// `(original_max_position_embeddings, frequencies)`; `None` for every other scaling.
pub fn long_inv_freq(config: &LlamaConfig) -> Option<(usize, Vec<f32>)> {
    match &config.rope_scaling {
        RopeScaling::LongRope {
            long_factor,
            original_max_position_embeddings,
            ..
        } => {
            let long = divided(&base_inv_freq(config), long_factor);
            Some((
                *original_max_position_embeddings,
                long.into_iter().map(|f| f as f32).collect(),
            ))
        }
        _ => None,
    }
}

/// The frequencies a run whose last position is `end - 1` rotates with: LongRoPE's long set
/// (`long`, taken past its context length) once `end` passes that length, else `inv_freq`.
/// transformers chooses the same way on each forward's `max(position_ids) + 1`.
pub fn frequencies_for<'a>(
    inv_freq: &'a [f32],
    long: Option<(usize, &'a [f32])>,
    end: usize,
) -> &'a [f32] {
    match long {
        Some((context, long)) if end > context => long,
        _ => inv_freq,
    }
}

/// Unscaled inverse frequencies `1 / theta^(2i/d)` in f64.
fn base_inv_freq(config: &LlamaConfig) -> Vec<f64> {
    let dim = config.rotary_dim();
    (0..dim / 2)
        .map(|i| 1.0 / config.rope_theta.powf((2 * i) as f64 / dim as f64))
        .collect()
}

/// Each frequency divided by its own factor (1 past the factors' end).
fn divided(base: &[f64], factors: &[f64]) -> Vec<f64> {
    base.iter()
        .enumerate()
        .map(|(i, f)| f / factors.get(i).copied().unwrap_or(1.0))
        .collect()
}

/// Cosine and sine tables for positions `offset..offset + len`, multiplied by `scale` (YaRN's
/// attention factor, [`LlamaConfig::rope_attention_factor`]; 1 otherwise).
///
/// # Shapes
/// - returns `(cos, sin)`, each `[len, head_dim]`: the `d/2` angles repeated twice, as in HF.
pub fn tables<B: Backend>(
    inv_freq: &[f32],
    scale: f32,
    offset: usize,
    len: usize,
    device: &B::Device,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let half = inv_freq.len();
    let dim = 2 * half;
    let positions: Vec<usize> = (offset..offset + len).collect();
    let (cos_half, sin_half) = angles(inv_freq, scale, &positions);
    // The `d/2` angles of each position repeated twice, as HF lays them out.
    let doubled = |half_rows: Vec<f32>| -> Vec<f32> {
        half_rows
            .chunks(half.max(1))
            .flat_map(|row| row.iter().chain(row).copied())
            .collect()
    };
    (
        Tensor::from_data(TensorData::new(doubled(cos_half), [len, dim]), device),
        Tensor::from_data(TensorData::new(doubled(sin_half), [len, dim]), device),
    )
}

/// Cosines and sines of `positions` at `inv_freq`, `[positions, inv_freq.len()]` row-major:
/// each angle formed in f32 (as PyTorch does), its cos/sin taken in f64 and rounded once, then
/// multiplied by `scale` in f32 (as transformers multiplies by its `attention_scaling`). The
/// generic path's [`tables`] and the fused kernels both read these.
pub fn angles(inv_freq: &[f32], scale: f32, positions: &[usize]) -> (Vec<f32>, Vec<f32>) {
    let n = positions.len() * inv_freq.len();
    let (mut cos, mut sin) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for &pos in positions {
        for f in inv_freq {
            let angle = f64::from(pos as f32 * f);
            cos.push(angle.cos() as f32 * scale);
            sin.push(angle.sin() as f32 * scale);
        }
    }
    (cos, sin)
}

/// Applies the rotation: `x * cos + rotate_half(x) * sin`, `rotate_half(x) = [-x2, x1]`, to
/// the first `rotary` dimensions of each head (the tables' width), the rest passing through
/// (GPT-NeoX's partial rotary).
///
/// # Shapes
/// - `x`: `[batch, heads, seq, head_dim]`
/// - `cos`, `sin`: `[seq, rotary]`, `rotary ≤ head_dim`
/// - returns `[batch, heads, seq, head_dim]`
pub fn apply<B: Backend>(x: Tensor<B, 4>, cos: &Tensor<B, 2>, sin: &Tensor<B, 2>) -> Tensor<B, 4> {
    let head_dim = x.dims()[3];
    let rotary = cos.dims()[1];
    if rotary < head_dim {
        let pass = x.clone().narrow(3, rotary, head_dim - rotary);
        let rotated = apply(x.narrow(3, 0, rotary), cos, sin);
        return Tensor::cat(vec![rotated, pass], 3);
    }
    let half = head_dim / 2;
    let x1 = x.clone().narrow(3, 0, half);
    let x2 = x.clone().narrow(3, half, half);
    let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
    let cos = cos.clone().unsqueeze::<4>();
    let sin = sin.clone().unsqueeze::<4>();
    x * cos + rotated * sin
}

/// [`apply`] with the rotated dimensions paired as neighbours, `(2i, 2i + 1)` turning by pair
/// `i`'s angle (GLM's interleaved RoPE: transformers' `rotate_half` of even and odd
/// dimensions, with each angle's cosine and sine repeated in place), the rest passing through.
///
/// # Shapes
/// - `x`: `[batch, heads, seq, head_dim]`
/// - `cos`, `sin`: `[seq, rotary]` as [`tables`] lays them out (each half the `rotary / 2`
///   angles), `rotary ≤ head_dim`
/// - returns `[batch, heads, seq, head_dim]`
pub fn apply_interleaved<B: Backend>(
    x: Tensor<B, 4>,
    cos: &Tensor<B, 2>,
    sin: &Tensor<B, 2>,
) -> Tensor<B, 4> {
    let [batch, heads, seq, head_dim] = x.dims();
    let rotary = cos.dims()[1];
    let half = rotary / 2;
    let pairs = x
        .clone()
        .narrow(3, 0, rotary)
        .reshape([batch, heads, seq, half, 2]);
    let even = pairs.clone().narrow(4, 0, 1);
    let odd = pairs.narrow(4, 1, 1);
    let angle = |t: &Tensor<B, 2>| t.clone().narrow(1, 0, half).reshape([1, 1, seq, half, 1]);
    let (c, s) = (angle(cos), angle(sin));
    let rotated = Tensor::cat(
        vec![
            even.clone() * c.clone() - odd.clone() * s.clone(),
            odd * c + even * s,
        ],
        4,
    )
    .reshape([batch, heads, seq, rotary]);
    if rotary < head_dim {
        Tensor::cat(vec![rotated, x.narrow(3, rotary, head_dim - rotary)], 3)
    } else {
        rotated
    }
}

impl LlamaConfig {
    /// Layer `i`'s own rotary inverse frequencies where they differ from the model's (Gemma 3's
    /// sliding layers rotate with their own base and no scaling).
    pub fn layer_inv_freq(&self, i: usize) -> Option<Vec<f32>> {
        let theta = self.extras.local_attention.as_ref()?.rope_theta?;
        self.is_local(i).then(|| {
            crate::model::arch::rope::inv_freq(&LlamaConfig {
                rope_theta: theta,
                rope_scaling: RopeScaling::None,
                extras: DecoderExtras::default(),
                ..self.clone()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::HfLlamaConfig;
    use burn::backend::NdArray;

    type B = NdArray<f32>;

    fn config(head_dim: usize, theta: f64, scaling: RopeScaling) -> LlamaConfig {
        let mut c = HfLlamaConfig::from_json(&format!(
            r#"{{"architectures":["LlamaForCausalLM"],"hidden_size":{h},"intermediate_size":4,
            "num_hidden_layers":1,"num_attention_heads":1,"vocab_size":4,"rope_theta":{theta}}}"#,
            h = head_dim
        ))
        .unwrap()
        .resolve()
        .unwrap();
        c.rope_scaling = scaling;
        c
    }

    #[test]
    fn inv_freq_matches_hand_values() {
        // d = 4, theta = 100: [1, 100^-0.5] = [1, 0.1]
        let f = inv_freq(&config(4, 100.0, RopeScaling::None));
        assert_eq!(f.len(), 2);
        assert!(
            (f[0] - 1.0).abs() < 1e-7 && (f[1] - 0.1).abs() < 1e-7,
            "{f:?}"
        );
    }

    #[test]
    fn llama3_scaling_keeps_high_scales_low_and_blends_middle() {
        // d = 6, theta = 10000: inv_freq = [1, 10000^-1/3, 10000^-2/3] = [1, 0.046416, 0.0021544],
        // wavelengths 2π/f = [6.283, 135.367, 2916.4].
        let scaling = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 256,
        };
        // original = 256: low_wavelen = 256 / 1 = 256, high_wavelen = 256 / 4 = 64.
        // f0 (6.28 < 64) is kept, f2 (2916 > 256) is divided by 8, and
        // f1 (135.36) is in between → smooth = (256/135.367 - 1) / 3 = 0.297051
        // scaled = (1 - s) * f/8 + s * f = f * (0.702949/8 + 0.297051) = f * 0.384920
        let f = inv_freq(&config(6, 10000.0, scaling));
        let base1 = 10000f64.powf(-1.0 / 3.0);
        let wavelen1 = 2.0 * std::f64::consts::PI / base1;
        let s = (256.0 / wavelen1 - 1.0) / 3.0;
        assert!((s - 0.297051).abs() < 1e-6, "{s}");
        assert!((f[0] - 1.0).abs() < 1e-7);
        assert!(
            (f64::from(f[1]) - base1 * 0.384920).abs() < 1e-7,
            "{}",
            f[1]
        );
        assert!((f64::from(f[2]) - 10000f64.powf(-2.0 / 3.0) / 8.0).abs() < 1e-8);
    }

    /// transformers' `_compute_yarn_parameters` (5.24, in f32 where ours rounds once from f64) on d = 16, theta = 10000, an
    /// original context of 128: the ramp runs over dimensions 0 to 3 (truncated), so the first
    /// frequency is kept, the next two blend and the rest are divided by the factor; with
    /// `truncate: false` and betas of its own, the ramp's ends stay fractional.
    #[test]
    fn yarn_frequencies_are_transformers_within_4_ulp() {
        let yarn = |factor, beta_fast, beta_slow, truncate| RopeScaling::Yarn {
            factor,
            original_max_position_embeddings: 128,
            beta_fast,
            beta_slow,
            attention_factor: 1.0,
            truncate,
        };
        for (scaling, theirs) in [
            (
                yarn(4.0, 32.0, 1.0, true),
                [
                    1.0f32,
                    0.237_170_82,
                    0.049_999_997,
                    0.007_905_695,
                    0.0025,
                    0.000_790_569_47,
                    0.000_25,
                    7.905_695e-5,
                ],
            ),
            (
                yarn(8.0, 16.0, 2.0, false),
                [
                    1.0,
                    0.195_175_5,
                    0.013_275_13,
                    0.003_952_847_3,
                    0.001_25,
                    0.000_395_284_73,
                    0.000_125,
                    3.952_847_3e-5,
                ],
            ),
        ] {
            let ours = inv_freq(&config(16, 10000.0, scaling));
            for (a, b) in ours.iter().zip(theirs) {
                assert!((a - b).abs() <= 4.0 * b * f32::EPSILON, "{ours:?}");
            }
        }
    }

    /// YaRN's attention factor multiplies every cosine and sine.
    #[test]
    fn the_tables_carry_the_attention_factor() {
        let device = Default::default();
        let (cos, sin) = tables::<B>(&[0.5], 1.25, 3, 1, &device);
        let (cos, sin) = (
            cos.into_data().to_vec::<f32>().unwrap(),
            sin.into_data().to_vec::<f32>().unwrap(),
        );
        assert_eq!(cos, vec![(1.5f64.cos() as f32) * 1.25; 2]);
        assert_eq!(sin, vec![(1.5f64.sin() as f32) * 1.25; 2]);
    }

    #[test]
    fn linear_scaling_divides_every_frequency() {
        let f = inv_freq(&config(4, 100.0, RopeScaling::Linear { factor: 2.0 }));
        assert!((f[0] - 0.5).abs() < 1e-7 && (f[1] - 0.05).abs() < 1e-7);
    }

    #[test]
    fn rotation_of_one_vector_by_hand() {
        // d = 4, inv_freq [1, 0.1], position 2: angles [2, 0.2].
        // x = [1, 2, 3, 4]: x1 = [1, 2], x2 = [3, 4]; rotate_half = [-3, -4, 1, 2]
        // out = x * [cos2, cos.2, cos2, cos.2] + [-3, -4, 1, 2] * [sin2, sin.2, sin2, sin.2]
        let device = Default::default();
        let (cos, sin) = tables::<B>(&[1.0, 0.1], 1.0, 2, 1, &device);
        let x = Tensor::<B, 4>::from_data(
            TensorData::new(vec![1.0f32, 2., 3., 4.], [1, 1, 1, 4]),
            &device,
        );
        let out: Vec<f32> = apply(x, &cos, &sin).into_data().to_vec().unwrap();
        let (c2, s2, c02, s02) = (2f64.cos(), 2f64.sin(), 0.2f64.cos(), 0.2f64.sin());
        let expected = [
            1.0 * c2 - 3.0 * s2,
            2.0 * c02 - 4.0 * s02,
            3.0 * c2 + 1.0 * s2,
            4.0 * c02 + 2.0 * s02,
        ];
        for (o, e) in out.iter().zip(expected) {
            assert!((f64::from(*o) - e).abs() < 1e-5, "{out:?} vs {expected:?}");
        }
    }

    #[test]
    fn partial_rotation_turns_the_first_dimensions_and_passes_the_rest() {
        // GPT-NeoX's partial rotary: head_dim 6, rotary 2 (inv_freq [1]), position 3: the
        // pair (x0, x1) turns by 3 radians, x2..x5 pass through.
        let device = Default::default();
        let (cos, sin) = tables::<B>(&[1.0], 1.0, 3, 1, &device);
        let x = Tensor::<B, 4>::from_data(
            TensorData::new(vec![1.0f32, 2., 3., 4., 5., 6.], [1, 1, 1, 6]),
            &device,
        );
        let out: Vec<f32> = apply(x, &cos, &sin).into_data().to_vec().unwrap();
        let (c, s) = (3f64.cos(), 3f64.sin());
        let expected = [c - 2.0 * s, 2.0 * c + s, 3.0, 4.0, 5.0, 6.0];
        for (o, e) in out.iter().zip(expected) {
            assert!((f64::from(*o) - e).abs() < 1e-6, "{out:?} vs {expected:?}");
        }
        // The frequencies come from the rotated width, not the head's.
        let mut c = config(8, 10_000.0, RopeScaling::None);
        c.extras.rotary_dim = Some(4);
        assert_eq!(inv_freq(&c), vec![1.0, 0.01]);
    }

    #[test]
    fn longrope_divides_by_the_short_factors_until_a_run_passes_the_context() {
        // d = 4, theta = 100: base [1, 0.1]; short [1, 2] → [1, 0.05]; long [4, 8] →
        // [0.25, 0.0125]; a run ending at position 10 (end 10) is within a context of 10.
        let c = config(
            4,
            100.0,
            RopeScaling::LongRope {
                short_factor: vec![1.0, 2.0],
                long_factor: vec![4.0, 8.0],
                factor: 4.0,
                original_max_position_embeddings: 10,
                attention_factor: 1.25,
            },
        );
        let short = inv_freq(&c);
        let (context, long) = long_inv_freq(&c).unwrap();
        assert_eq!((short.clone(), context), (vec![1.0, 0.05], 10));
        assert_eq!(long, vec![0.25, 0.0125]);
        let both = Some((context, long.as_slice()));
        assert_eq!(frequencies_for(&short, both, 10), short.as_slice());
        assert_eq!(frequencies_for(&short, both, 11), long.as_slice());
        assert_eq!(frequencies_for(&short, None, 11), short.as_slice());
        assert!(long_inv_freq(&config(4, 100.0, RopeScaling::None)).is_none());
        assert_eq!(c.rope_attention_factor(), 1.25);
    }

    #[test]
    fn interleaved_rotation_turns_neighbouring_pairs() {
        // head_dim 6, rotary 4 (inv_freq [1, 0.5]), position 2: (x0, x1) turns by 2 radians,
        // (x2, x3) by 1, x4 and x5 pass through.
        let device = Default::default();
        let (cos, sin) = tables::<B>(&[1.0, 0.5], 1.0, 2, 1, &device);
        let x = Tensor::<B, 4>::from_data(
            TensorData::new(vec![1.0f32, 2., 3., 4., 5., 6.], [1, 1, 1, 6]),
            &device,
        );
        let out: Vec<f32> = apply_interleaved(x, &cos, &sin)
            .into_data()
            .to_vec()
            .unwrap();
        let (c2, s2, c1, s1) = (2f64.cos(), 2f64.sin(), 1f64.cos(), 1f64.sin());
        let expected = [
            c2 - 2.0 * s2,
            2.0 * c2 + s2,
            3.0 * c1 - 4.0 * s1,
            4.0 * c1 + 3.0 * s1,
            5.0,
            6.0,
        ];
        for (o, e) in out.iter().zip(expected) {
            assert!((f64::from(*o) - e).abs() < 1e-6, "{out:?} vs {expected:?}");
        }
    }
}
