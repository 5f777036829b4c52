//! Unit tests of the decoder: hand-computed cases, cached decoding, and the fused CPU path
//! against Burn's generic ops.

use super::super::blocks::{
    attention_block_rows, blocked_attention, causal_attention, repeat_kv, Scores,
};
use super::*;
use crate::model::arch::{Activation, AttentionSettings, HfLlamaConfig};
use burn::backend::NdArray;
use burn::tensor::FloatDType;

type B = NdArray<f32>;

fn t<const D: usize>(v: Vec<f32>, shape: [usize; D]) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(v, shape), &Default::default())
}

fn close(a: &[f32], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((f64::from(*x) - y).abs() < tol, "{a:?} vs {b:?}");
    }
}

fn linear_from(w_in_out: Vec<f32>, i: usize, o: usize) -> Linear<B> {
    Linear {
        weight: Param::from_tensor(t(w_in_out, [i, o])),
        bias: None,
    }
}

#[test]
fn rms_norm_by_hand() {
    // x = [3, 4]: mean square = 12.5, rms = 3.5355; weight [1, 2] → [0.8485, 2.2627]
    let norm = Norm::new(t(vec![1.0, 2.0], [2]), 0.0);
    let out: Vec<f32> = norm
        .forward(t(vec![3.0, 4.0], [1, 1, 2]))
        .into_data()
        .to_vec()
        .unwrap();
    let rms = 12.5f64.sqrt();
    close(&out, &[3.0 / rms, 8.0 / rms], 1e-6);
}

#[test]
fn rms_norm_of_fp16_activations_past_its_range_is_right() {
    // 576 channels of ±300 in fp16 (Flex keeps the tensors' type): Σx² = 5.2e7 overflows
    // fp16's 65504, and a norm taken in fp16 gives zeros; in f32 it gives ±1 · weight.
    use burn::backend::Flex;
    let device = Default::default();
    let half = |v: Vec<f32>, shape: [usize; 3]| {
        Tensor::<Flex, 3>::from_data(TensorData::new(v, shape), &device).cast(FloatDType::F16)
    };
    let x: Vec<f32> = (0..576)
        .map(|i| if i % 2 == 0 { 300.0 } else { -300.0 })
        .collect();
    let weight = Tensor::<Flex, 1>::from_data(TensorData::new(vec![2.0f32; 576], [576]), &device)
        .cast(FloatDType::F16);
    let out = Norm::new(weight, 1e-5).forward(half(x, [1, 1, 576]));
    assert_eq!(out.dtype(), burn::tensor::DType::F16);
    let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
    for (i, v) in out.iter().enumerate() {
        let want = if i % 2 == 0 { 2.0 } else { -2.0 };
        assert!((v - want).abs() < 2e-3, "channel {i}: {v}");
    }
}

#[test]
fn rms_norm_is_exact_to_f32_rounding_on_simd_sized_rows() {
    // 64 rows × 16 channels (64 RMS values: enough for burn-ndarray's SIMD path), every
    // element against an f64 reference: an approximate reciprocal (2⁻¹⁴ relative) would miss
    // the 1e-6 bound.
    let (rows, width) = (64usize, 16usize);
    let x: Vec<f32> = (0..rows * width)
        .map(|k| ((k * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    let norm = Norm::new(t(vec![1.0; width], [width]), 1e-5);
    let out: Vec<f32> = norm
        .forward(t(x.clone(), [1, rows, width]))
        .into_data()
        .to_vec()
        .unwrap();
    for (row, got) in x.chunks(width).zip(out.chunks(width)) {
        let ms = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / width as f64;
        let rms = (ms + 1e-5).sqrt();
        for (v, g) in row.iter().zip(got) {
            let want = f64::from(*v) / rms;
            assert!(
                (f64::from(*g) - want).abs() <= 1e-6 * want.abs().max(1e-3),
                "{g} vs {want}"
            );
        }
    }
}

#[test]
fn swiglu_by_hand() {
    // hidden 2 → intermediate 3 → hidden 2, non-square weights in [in, out] layout.
    let mlp = Mlp {
        gate_proj: Some(linear_from(vec![1., 0., -1., 0., 1., 2.], 2, 3)),
        up_proj: linear_from(vec![2., 1., 0., 1., 0., 1.], 2, 3),
        down_proj: linear_from(vec![1., 0., 0., 1., 1., 1.], 3, 2),
        activation: Activation::Silu,
    };
    // x = [1, 2]: gate = [1, 2, 3], up = [4, 1, 2]
    // silu(g) = g * sigmoid(g); h = silu(g) * up; out = [h0 + h2, h1 + h2]
    let x = || t(vec![1.0, 2.0], [1, 1, 2]);
    let out: Vec<f32> = mlp
        .forward_observed(x(), &mut |_, _| {})
        .into_data()
        .to_vec()
        .unwrap();
    let silu = |g: f64| g / (1.0 + (-g).exp());
    let h = [silu(1.0) * 4.0, silu(2.0) * 1.0, silu(3.0) * 2.0];
    close(&out, &[h[0] + h[2], h[1] + h[2]], 1e-5);
    // GeGLU (Gemma): gelu_tanh(g) = g/2 · (1 + tanh(√(2/π) (g + 0.044715 g³))).
    let geglu = Mlp {
        activation: Activation::GeluTanh,
        ..mlp
    };
    let out: Vec<f32> = geglu
        .forward_observed(x(), &mut |_, _| {})
        .into_data()
        .to_vec()
        .unwrap();
    let gelu = |g: f64| {
        0.5 * g * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g.powi(3))).tanh())
    };
    let h = [gelu(1.0) * 4.0, gelu(2.0) * 1.0, gelu(3.0) * 2.0];
    close(&out, &[h[0] + h[2], h[1] + h[2]], 1e-5);
}

#[test]
fn repeat_kv_serves_consecutive_query_heads() {
    // 2 kv heads, groups 2 → heads [kv0, kv0, kv1, kv1]
    let x = t(vec![1.0, 2.0], [1, 2, 1, 1]);
    let out: Vec<f32> = repeat_kv(x, 2).into_data().to_vec().unwrap();
    assert_eq!(out, vec![1.0, 1.0, 2.0, 2.0]);
}

/// Causal GQA attention on a 2-head / 1-kv-head toy, against values worked out by hand.
#[test]
fn causal_gqa_attention_by_hand() {
    // hidden 2, head_dim 2, 2 query heads, 1 kv head, seq 2, rotation disabled (cos 1, sin 0).
    // q_proj [2, 4] = identity for head 0 and 2x for head 1; k_proj, v_proj [2, 2] identity;
    // o_proj [4, 2] sums head0 and head1 outputs.
    let attn = Attention {
        q_proj: linear_from(vec![1., 0., 2., 0., 0., 1., 0., 2.], 2, 4),
        k_proj: linear_from(vec![1., 0., 0., 1.], 2, 2),
        v_proj: linear_from(vec![1., 0., 0., 1.], 2, 2),
        o_proj: linear_from(vec![1., 0., 0., 1., 1., 0., 0., 1.], 4, 2),
        q_norm: None,
        k_norm: None,
        settings: AttentionSettings {
            heads: 2,
            kv_heads: 1,
            head_dim: 2,
            rotary: true,
            ..AttentionSettings::default()
        },
        chunk: None,
        unit_qk_norm: None,
        temperature: None,
        sinks: None,
    };
    let cos = t(vec![1.0; 4], [2, 2]);
    let sin = t(vec![0.0; 4], [2, 2]);
    // x0 = [1, 0], x1 = [0, 1]; k = v = x.
    let x = t(vec![1.0, 0.0, 0.0, 1.0], [1, 2, 2]);
    let out: Vec<f32> = attn
        .forward_observed(
            x,
            LayerContext {
                cos: &cos,
                sin: &sin,
                cache: None,
            },
            &mut |_, _| {},
        )
        .into_data()
        .to_vec()
        .unwrap();
    // Position 0 sees only itself: each head outputs v0 = [1, 0] → sum [2, 0].
    // Position 1, head 0: q = [0, 1], scores [0, 1]/√2; head 1: q = [0, 2], scores [0, 2]/√2.
    let s = std::f64::consts::SQRT_2;
    let softmax2 = |a: f64, b: f64| {
        let (ea, eb) = (a.exp(), b.exp());
        (ea / (ea + eb), eb / (ea + eb))
    };
    let (h0a, h0b) = softmax2(0.0, 1.0 / s);
    let (h1a, h1b) = softmax2(0.0, 2.0 / s);
    close(&out, &[2.0, 0.0, h0a + h1a, h0b + h1b], 1e-5);
}

/// ALiBi by hand: one head of width 1, zero scores, slope 1 — the second query weighs its two
/// keys by `softmax(0, 1)`, the first sees only itself.
#[test]
fn alibi_adds_the_slope_times_the_key_position() {
    let q = t(vec![0.0, 0.0], [1, 1, 2, 1]);
    let k = t(vec![1.0, 1.0], [1, 1, 2, 1]);
    let v = t(vec![2.0, 0.0], [1, 1, 2, 1]);
    let scores = Scores {
        alibi: Some(&[1.0]),
        ..Scores::default()
    };
    let out: Vec<f32> = blocked_attention(q, k, v, scores)
        .into_data()
        .to_vec()
        .unwrap();
    let e = 1f64.exp();
    close(&out, &[2.0, 2.0 / (1.0 + e)], 1e-6);
}

/// Attention within chunks of 4 is each chunk's causal attention on its own: positions 0–3,
/// 4–7 and 8–9 of 10 attend as three sequences.
#[test]
fn chunked_attention_is_each_chunks_attention_alone() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut random = |shape: [usize; 4]| {
        let n = shape.iter().product();
        t((0..n).map(|_| rng.random_range(-2.0..2.0)).collect(), shape)
    };
    let (q, k, v) = (
        random([1, 2, 10, 4]),
        random([1, 2, 10, 4]),
        random([1, 2, 10, 4]),
    );
    let scores = Scores {
        chunk: Some(4),
        ..Scores::default()
    };
    let chunked: Vec<f32> = blocked_attention(q.clone(), k.clone(), v.clone(), scores)
        .into_data()
        .to_vec()
        .unwrap();
    let part = |t: &Tensor<B, 4>, r: std::ops::Range<usize>| t.clone().slice(s![.., .., r, ..]);
    let apart = Tensor::cat(
        [0..4, 4..8, 8..10]
            .into_iter()
            .map(|r| {
                blocked_attention(
                    part(&q, r.clone()),
                    part(&k, r.clone()),
                    part(&v, r),
                    Scores::default(),
                )
            })
            .collect(),
        2,
    );
    let apart: Vec<f64> = apart
        .into_data()
        .to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect();
    close(&chunked, &apart, 1e-6);
}

/// Attention a few query rows at a time equals attention in one piece: causal, with a
/// sliding window, within chunks, with ALiBi, with sinks, and with queries that are the last
/// of a longer key sequence (a cache).
#[test]
fn attention_in_blocks_of_rows_equals_attention_in_one_piece() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut random = |shape: [usize; 4]| {
        let n = shape.iter().product();
        t((0..n).map(|_| rng.random_range(-2.0..2.0)).collect(), shape)
    };
    let slopes = [0.5, 0.25, 0.125];
    let sinks = [1.5, -0.5, 0.25];
    for (seq, keys, window, chunk, softcap, alibi, sinks) in [
        (10, 10, None, None, None, None, None),
        (10, 13, None, None, None, None, None),
        (10, 13, Some(4), None, None, None, None),
        (9, 9, Some(3), None, None, None, None),
        (10, 13, Some(4), None, Some(1.5), None, None),
        (10, 13, None, None, None, Some(&slopes[..]), None),
        (10, 13, Some(4), None, None, Some(&slopes[..]), None),
        (10, 10, None, None, None, None, Some(&sinks[..])),
        (10, 13, Some(4), None, None, None, Some(&sinks[..])),
        (10, 10, None, Some(4), None, None, None),
        (10, 13, None, Some(5), None, None, None),
    ] {
        let q = random([2, 3, seq, 4]);
        let k = random([2, 3, keys, 4]);
        let v = random([2, 3, keys, 4]);
        let scores = Scores {
            window,
            chunk,
            scale: None,
            softcap,
            alibi,
            sinks,
        };
        let whole: Vec<f32> = causal_attention(q.clone(), k.clone(), v.clone(), scores, 64)
            .into_data()
            .to_vec()
            .unwrap();
        for rows in [1, 3, 4] {
            let blocks: Vec<f32> = causal_attention(q.clone(), k.clone(), v.clone(), scores, rows)
                .into_data()
                .to_vec()
                .unwrap();
            let worst = whole
                .iter()
                .zip(&blocks)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < 1e-5,
                "seq {seq}, keys {keys}, window {window:?}, rows {rows}: {worst}"
            );
        }
    }
}

#[test]
fn attention_blocks_hold_their_byte_budget() {
    // 8 samples × 32 heads × 2048 keys × 4 B = 2 MiB a row: 128 rows in 256 MiB.
    assert_eq!(attention_block_rows(8, 32, 2048), 128);
    assert_eq!(attention_block_rows(1, 1, 16), (256 << 20) / 64);
    assert_eq!(attention_block_rows(64, 64, 1 << 20), 16);
}

fn tiny_config() -> LlamaConfig {
    HfLlamaConfig::from_json(
        r#"{"architectures":["LlamaForCausalLM"],"hidden_size":16,"intermediate_size":24,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":32,
        "rms_norm_eps":1e-5,"tie_word_embeddings":true}"#,
    )
    .unwrap()
    .resolve()
    .unwrap()
}

/// A tiny BLOOM: ALiBi over 3 heads (not a power of two), a norm of the embeddings, biases,
/// the ungated tanh-GELU MLP.
const BLOOM_JSON: &str = r#"{"architectures":["BloomForCausalLM"],"hidden_size":24,"n_layer":2,
    "n_head":3,"vocab_size":50}"#;

fn tiny_bloom_config() -> LlamaConfig {
    HfLlamaConfig::from_json(BLOOM_JSON)
        .unwrap()
        .resolve()
        .unwrap()
}

/// Each branch of a packed sequence equals its unpacked `context + branch` row for row
/// (an empty branch included), and the context rows equal the context alone: with RoPE, and
/// with ALiBi, whose key positions in a branch follow the context's.
#[test]
fn packed_branches_equal_their_unpacked_sequences() {
    for config in [tiny_config(), tiny_bloom_config()] {
        packed_branches_equal_unpacked(&config);
    }
}

fn packed_branches_equal_unpacked(config: &LlamaConfig) {
    let device = Default::default();
    let model = Llama::<B>::init_random(config, 7, &device);
    let context = [3u32, 9, 14, 1, 27];
    let branches: [&[u32]; 3] = [&[5, 6, 7], &[], &[30, 2]];
    let mut tokens = context.to_vec();
    for b in branches {
        tokens.extend_from_slice(b);
    }
    let lens: Vec<usize> = branches.iter().map(|b| b.len()).collect();
    let packed = model
        .packed_hidden(&tokens, context.len(), &lens)
        .expect("burn-ndarray f32 packs");
    let packed: Vec<f32> = packed.into_data().to_vec().unwrap();
    let width = config.hidden_size;
    let mut start = context.len();
    for branch in branches {
        let ids: Vec<i64> = context
            .iter()
            .chain(branch)
            .map(|&t| i64::from(t))
            .collect();
        let len = ids.len();
        let tokens = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, len]), &device);
        let unpacked: Vec<f32> = model.hidden(tokens).into_data().to_vec().unwrap();
        let rows = (0..context.len())
            .map(|r| (r, r))
            .chain((0..branch.len()).map(|j| (context.len() + j, start + j)));
        for (unpacked_row, packed_row) in rows {
            let a = &unpacked[unpacked_row * width..][..width];
            let b = &packed[packed_row * width..][..width];
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= 1e-5 * x.abs().max(1.0),
                    "row {packed_row}: {a:?} vs {b:?}"
                );
            }
        }
        start += branch.len();
    }
    // Lengths that do not add up are refused.
    assert!(model.packed_hidden(&tokens, 2, &lens).is_none());
}

/// Regression: models built from one seed differed when another test thread drew random
/// tensors from the backend's global RNG at the same time.
#[test]
fn init_random_is_reproducible_while_other_threads_draw_random_tensors() {
    let device = Default::default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                B::seed(&Default::default(), 99);
                let _ = Tensor::<B, 1>::random(
                    [64],
                    burn::tensor::Distribution::Default,
                    &Default::default(),
                );
            }
        })
    };
    let ids = [1i64, 2, 3, 4];
    let logits = |m: &Llama<B>| -> Vec<f32> {
        let t = Tensor::<B, 2, Int>::from_data(TensorData::new(ids.to_vec(), [1, 4]), &device);
        m.forward(t).into_data().to_vec().unwrap()
    };
    let a = logits(&Llama::<B>::init_random(&tiny_config(), 5, &device));
    let b = logits(&Llama::<B>::init_random(&tiny_config(), 5, &device));
    let c = logits(&Llama::<B>::init_random(&tiny_config(), 6, &device));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    noise.join().unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

/// Also with a sliding window shorter than the ids: the cached steps see the window's
/// keys only, like the full (fused) forward.
#[test]
fn cached_decoding_equals_full_forward() {
    let sliding = HfLlamaConfig::from_json(
        r#"{"architectures":["MistralForCausalLM"],"hidden_size":16,"intermediate_size":24,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":32,
        "rms_norm_eps":1e-5,"tie_word_embeddings":true,"sliding_window":2}"#,
    )
    .unwrap()
    .resolve()
    .unwrap();
    assert_eq!(sliding.sliding_window, Some(2));
    // Gemma 3: a local layer (window 2, its own RoPE base) and a global one; the full
    // forward runs the fused kernels, the cached one the generic path.
    let gemma = HfLlamaConfig::from_json(
        r#"{"architectures":["Gemma3ForCausalLM"],"hidden_size":16,"intermediate_size":24,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":8,
        "vocab_size":32,"sliding_window":2,"query_pre_attn_scalar":6,"tie_word_embeddings":true,
        "layer_types":["sliding_attention","full_attention"]}"#,
    )
    .unwrap()
    .resolve()
    .unwrap();
    let opt = HfLlamaConfig::from_json(OPT_JSON)
        .unwrap()
        .resolve()
        .unwrap();
    for config in [tiny_config(), sliding, gemma, opt, tiny_bloom_config()] {
        cached_decoding_matches(&config);
    }
}

/// A tiny OPT: LayerNorms, biases, the ungated ReLU MLP, learned positions.
const OPT_JSON: &str = r#"{"architectures":["OPTForCausalLM"],"hidden_size":32,"ffn_dim":48,
    "num_hidden_layers":2,"num_attention_heads":4,"vocab_size":50,"max_position_embeddings":256,
    "word_embed_proj_dim":32}"#;

#[test]
fn layer_norm_and_the_ungated_relu_mlp_by_hand() {
    // x = [1, 2, 3, 6]: mean 3, variance 3.5; gains [1, 2, 1, 0.5], biases [0, 0, 1, -1].
    let norm = Norm::layer(
        t(vec![1.0, 2.0, 1.0, 0.5], [4]),
        Some(t(vec![0.0, 0.0, 1.0, -1.0], [4])),
        0.0,
    );
    let x = || t(vec![1.0, 2.0, 3.0, 6.0], [1, 1, 4]);
    let out: Vec<f32> = norm.forward(x()).into_data().to_vec().unwrap();
    let sd = 3.5f64.sqrt();
    close(&out, &[-2.0 / sd, -2.0 / sd, 1.0, 1.5 / sd - 1.0], 1e-6);
    // Without a bias (Cohere's), still centred.
    let norm = Norm::layer(t(vec![1.0, 2.0, 1.0, 0.5], [4]), None, 0.0);
    let out: Vec<f32> = norm.forward(x()).into_data().to_vec().unwrap();
    close(&out, &[-2.0 / sd, -2.0 / sd, 0.0, 1.5 / sd], 1e-6);
    // Grouped (Cohere's q/k norms): each half of the row normed apart, the gain spanning it.
    let norm = Norm::layer(t(vec![1.0, 2.0, 3.0, 4.0], [4]), None, 0.0).grouped(2);
    let out: Vec<f32> = norm.forward(x()).into_data().to_vec().unwrap();
    close(&out, &[-1.0, 2.0, -3.0, 4.0], 1e-6);
    // fc2(relu(fc1(x))): x = [1, 2], fc1 [2 → 3] with bias [0, -5, 1], fc2 [3 → 1].
    let mut up = linear_from(vec![1., 0., -1., 0., 1., 2.], 2, 3);
    up.bias = Some(Param::from_tensor(t(vec![0.0, -5.0, 1.0], [3])));
    let mlp = Mlp {
        gate_proj: None,
        up_proj: up,
        down_proj: linear_from(vec![1., 10., 100.], 3, 1),
        activation: Activation::Relu,
    };
    // fc1(x) = [1, 2 − 5, 3 + 1] = [1, −3, 4] → relu [1, 0, 4] → 1 + 0 + 400.
    let out: Vec<f32> = mlp
        .forward_observed(t(vec![1.0, 2.0], [1, 1, 2]), &mut |_, _| {})
        .into_data()
        .to_vec()
        .unwrap();
    close(&out, &[401.0], 1e-5);
}

fn cached_decoding_matches(config: &LlamaConfig) {
    let device = Default::default();
    let model = Llama::<B>::init_random(config, 7, &device);
    let ids = [3i64, 17, 5, 9, 30];
    let tokens = Tensor::<B, 2, Int>::from_data(TensorData::new(ids.to_vec(), [1, 5]), &device);
    let full: Vec<f32> = model.forward(tokens).into_data().to_vec().unwrap();
    let mut cache = KvCache::new(config.num_hidden_layers);
    let mut stepped = Vec::new();
    let prefix =
        Tensor::<B, 2, Int>::from_data(TensorData::new(ids[..3].to_vec(), [1, 3]), &device);
    stepped.extend(
        model
            .forward_cached(prefix, &mut cache)
            .into_data()
            .to_vec::<f32>()
            .unwrap(),
    );
    for id in &ids[3..] {
        let one = Tensor::<B, 2, Int>::from_data(TensorData::new(vec![*id], [1, 1]), &device);
        stepped.extend(
            model
                .forward_cached(one, &mut cache)
                .into_data()
                .to_vec::<f32>()
                .unwrap(),
        );
    }
    assert_eq!(cache.len(), 5);
    for (a, b) in full.iter().zip(&stepped) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
}

/// Llama 4's layers decode from their cache as in one pass: the chunks (of 2, so that the five
/// ids cross two boundaries) and the NoPE layer's temperature (stepping every 2 positions) count
/// positions from the cache's length.
#[test]
fn llama4_attention_decodes_with_its_cache_as_in_one_pass() {
    let mut json: serde_json::Value = serde_json::from_str(include_str!(
        "../../../../tests/fixtures/models/tiny-llama4/config.json"
    ))
    .unwrap();
    json["attention_chunk_size"] = 2.into();
    json["floor_scale"] = 2.into();
    let config = HfLlamaConfig::from_json(&json.to_string())
        .unwrap()
        .resolve()
        .unwrap();
    let attention = config.extras.llama4_attention.as_ref().unwrap();
    assert_eq!(attention.chunk_size, 2);
    assert!(attention.temperature.is_some());
    cached_decoding_matches(&config);
}

/// DeepSeek's latent attention decodes from its cache as in one pass: V2's direct queries and
/// V3's query latent, each with its rotated key shared by the heads.
#[test]
fn latent_attention_decodes_with_its_cache_as_in_one_pass() {
    for json in [
        include_str!("../../../../tests/fixtures/models/tiny-deepseek_v2/config.json"),
        include_str!("../../../../tests/fixtures/models/tiny-deepseek_v3/config.json"),
    ] {
        let config = HfLlamaConfig::from_json(json).unwrap().resolve().unwrap();
        assert!(config.extras.latent_attention.is_some());
        cached_decoding_matches(&config);
    }
}

#[test]
fn future_tokens_do_not_change_past_logits() {
    let device = Default::default();
    let model = Llama::<B>::init_random(&tiny_config(), 3, &device);
    let a = Tensor::<B, 2, Int>::from_data(TensorData::new(vec![1i64, 2, 3, 4], [1, 4]), &device);
    let b = Tensor::<B, 2, Int>::from_data(TensorData::new(vec![1i64, 2, 3, 31], [1, 4]), &device);
    let la: Vec<f32> = model
        .forward(a)
        .narrow(1, 0, 3)
        .into_data()
        .to_vec()
        .unwrap();
    let lb: Vec<f32> = model
        .forward(b)
        .narrow(1, 0, 3)
        .into_data()
        .to_vec()
        .unwrap();
    for (x, y) in la.iter().zip(&lb) {
        assert!((x - y).abs() < 1e-5);
    }
}

/// The decoder's fused path (the kernels of burn-ndarray in f32) against its generic path.
pub(in crate::model::decoder) mod fused_path {
    use super::*;
    use burn::backend::Flex;

    fn model<K: Backend>(json: &str, seed: u64) -> Llama<K> {
        let config = HfLlamaConfig::from_json(json).unwrap().resolve().unwrap();
        Llama::<K>::init_random(&config, seed, &Default::default())
    }

    /// Fused logits against Burn's generic ops (the same seeded model on the Flex backend, which
    /// never takes the fused path) on a random model with GQA, a sequence longer than one
    /// attention block, (second case) q/k/v biases and an untied head, and (third) Qwen3's
    /// per-head q/k norms with a head width of its own, (fourth) OPT, and (fifth) BLOOM's ALiBi
    /// over several blocks of query rows.
    #[test]
    fn fused_forward_equals_the_generic_path() {
        let tied = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":32,"intermediate_size":48,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":50,
            "rms_norm_eps":1e-5,"tie_word_embeddings":true}"#;
        let biased = r#"{"architectures":["Qwen2ForCausalLM"],"hidden_size":32,"intermediate_size":40,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,"vocab_size":50,
            "rms_norm_eps":1e-6,"tie_word_embeddings":false}"#;
        let qk_norm = r#"{"architectures":["Qwen3ForCausalLM"],"hidden_size":32,"intermediate_size":40,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,
            "vocab_size":50,"rms_norm_eps":1e-6,"tie_word_embeddings":true}"#;
        for (json, seq) in [
            (tied, 150usize),
            (biased, 70),
            (qk_norm, 90),
            (OPT_JSON, 130),
            (BLOOM_JSON, 140),
        ] {
            fused_forward_matches(json, seq);
        }
    }

    /// Fused logits of two sequences of `seq` tokens against Burn's generic ops.
    fn fused_forward_matches(json: &str, seq: usize) {
        let ids: Vec<i64> = (0..2 * seq as i64).map(|i| (i * 17 + 3) % 50).collect();
        let fused: Vec<f32> = {
            let m = model::<B>(json, 11);
            let tokens = Tensor::<B, 2, Int>::from_data(
                TensorData::new(ids.clone(), [2, seq]),
                &Default::default(),
            );
            kernels::<B>()
                .forward(&m.weights().unwrap(), &tokens)
                .expect("ndarray f32 takes the fused path")
                .into_data()
                .to_vec()
                .unwrap()
        };
        let m = model::<Flex>(json, 11);
        let tokens =
            Tensor::<Flex, 2, Int>::from_data(TensorData::new(ids, [2, seq]), &Default::default());
        assert!(
            kernels::<Flex>()
                .forward(&m.weights().unwrap(), &tokens)
                .is_none(),
            "flex keeps Burn's ops"
        );
        let generic: Vec<f32> = m.forward(tokens).into_data().to_vec().unwrap();
        close(&fused, &generic);
    }

    /// The configurations of the fixtures with experts that the fused path runs: softmax
    /// routing renormalised or not (Mixtral, OLMoE, Qwen3-MoE), a gated shared expert
    /// (Qwen2-MoE), Granite's shared MLP, and grouped sigmoid routing with correction biases
    /// and an ungated shared expert (GLM-4.5, 16 experts in 4 groups).
    const EXPERT_FIXTURES: [&str; 6] = [
        include_str!("../../../../tests/fixtures/models/tiny-mixtral/config.json"),
        include_str!("../../../../tests/fixtures/models/tiny-olmoe/config.json"),
        include_str!("../../../../tests/fixtures/models/tiny-qwen3_moe/config.json"),
        include_str!("../../../../tests/fixtures/models/tiny-qwen2_moe/config.json"),
        include_str!("../../../../tests/fixtures/models/tiny-granitemoeshared/config.json"),
        include_str!("../../../../tests/fixtures/models/tiny-glm4_moe-16e/config.json"),
    ];

    /// Every tiny fixture's name and resolved configuration (the others are real models'
    /// configs alone).
    pub(in crate::model::decoder) fn tiny_fixtures() -> Vec<(String, LlamaConfig)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models");
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&root).unwrap() {
            let dir = entry.unwrap().path();
            let name = dir.file_name().unwrap().to_string_lossy().to_string();
            if !name.starts_with("tiny-") {
                continue;
            }
            let Ok(json) = std::fs::read_to_string(dir.join("config.json")) else {
                continue;
            };
            if let Some(config) = HfLlamaConfig::from_json(&json)
                .ok()
                .and_then(|c| c.resolve().ok())
            {
                found.push((name, config));
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found
    }

    /// Every fixture's layers take the fused path exactly where the estimator's shape says
    /// they do ([`crate::model::arch::ModelShape::generic_layers`]).
    #[test]
    fn the_shape_knows_which_layers_the_fused_path_runs() {
        let (mut fused, mut generic) = (Vec::new(), Vec::new());
        for (name, config) in tiny_fixtures() {
            let shape = crate::model::arch::ModelShape::from_config(&config);
            let m = Llama::<B>::init_random(&config, 1, &Default::default());
            let takes_fused = m.layers.iter().all(|l| l.weights().is_some());
            assert_eq!(takes_fused, !shape.generic_layers, "{name}");
            match takes_fused {
                true => fused.push(name),
                false => generic.push(name),
            }
        }
        for name in [
            "tiny-mixtral",
            "tiny-qwen3_moe",
            "tiny-glm4_moe",
            "tiny-llama",
        ] {
            assert!(fused.iter().any(|n| n == name), "{name} in {fused:?}");
        }
        for name in ["tiny-gpt_oss", "tiny-llama4", "tiny-deepseek_v3"] {
            assert!(generic.iter().any(|n| n == name), "{name} in {generic:?}");
        }
    }

    /// The logits of `ids` decoded with a cache: all but the last five as a prompt in two
    /// parts (the first 40 ids, then the rest, which continue a cache across a block of query
    /// rows), then one token at a time; with the cache.
    pub(in crate::model::decoder) fn cached_logits<K: Backend>(
        m: &Llama<K>,
        ids: &[i64],
    ) -> (Vec<f32>, KvCache<K>) {
        let device = Default::default();
        let mut cache = KvCache::new(m.layers.len());
        let prompt = ids.len() - 5;
        let mut logits = Vec::new();
        let (first, rest) = ids[..prompt].split_at(40.min(prompt / 2));
        for part in [first, rest].into_iter().chain(ids[prompt..].chunks(1)) {
            let tokens = Tensor::<K, 2, Int>::from_data(
                TensorData::new(part.to_vec(), [1, part.len()]),
                &device,
            );
            let step = m.forward_cached(tokens, &mut cache);
            logits.extend(step.into_data().to_vec::<f32>().unwrap());
        }
        (logits, cache)
    }

    /// Decoding with a cache on the fused path (keys and values on the host) gives the logits
    /// of the generic path's cached decoding, on every tiny fixture the fused path runs (sliding
    /// windows, ALiBi, learned positions, q/k norms, parallel residuals, experts…): a prompt
    /// longer than one block of query rows, then one token at a time.
    #[test]
    fn fused_cached_decoding_equals_the_generic_path() {
        let mut decoded = 0;
        for (name, config) in tiny_fixtures() {
            let fused_model = Llama::<B>::init_random(&config, 3, &Default::default());
            if fused_model.weights().is_none() {
                continue;
            }
            let len = 75.min(config.max_position_embeddings) as i64;
            let ids: Vec<i64> = (0..len)
                .map(|i| (i * 13 + 5) % config.vocab_size as i64)
                .collect();
            let (fused, cache) = cached_logits(&fused_model, &ids);
            assert_eq!(
                cache.host.len,
                ids.len(),
                "{name} decodes on the fused path"
            );
            let generic_model = Llama::<Flex>::init_random(&config, 3, &Default::default());
            let (generic, cache) = cached_logits(&generic_model, &ids);
            assert_eq!(cache.host.len, 0, "{name}: flex keeps Burn's ops");
            close(&fused, &generic);
            decoded += 1;
        }
        assert!(decoded >= 20, "only {decoded} fixtures decoded");
    }

    /// Layers with experts take the fused path and give the generic block's logits.
    #[test]
    fn fused_experts_forward_equals_the_generic_path() {
        for json in EXPERT_FIXTURES {
            fused_forward_matches(json, 70);
        }
    }

    /// The layer path shows `observe` the same four inputs as Burn's ops, in the same order, and
    /// returns the same output; a layer with experts (the model's last: GLM-4.5's first is
    /// dense) the same inputs of each expert.
    #[test]
    fn fused_layer_observes_what_the_generic_layer_observes() {
        let json = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":32,"intermediate_size":48,
            "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":50,
            "rms_norm_eps":1e-5,"tie_word_embeddings":true}"#;
        fn run<K: Backend>(json: &str) -> (Vec<f32>, Vec<(LinearInput, Vec<f32>)>) {
            let m = model::<K>(json, 5);
            let ids: Vec<i64> = (0..3 * 80).map(|i| (i * 7 + 1) % 50).collect();
            let tokens =
                Tensor::<K, 2, Int>::from_data(TensorData::new(ids, [3, 80]), &Default::default());
            let (cos, sin) = m.rope_tables(0, 80);
            let mut seen = Vec::new();
            let out = m.layers.last().unwrap().forward_observed(
                m.embed(tokens),
                LayerContext {
                    cos: &cos,
                    sin: &sin,
                    cache: None,
                },
                &mut |input, t| seen.push((input, t.clone().into_data().to_vec().unwrap())),
            );
            (out.into_data().to_vec().unwrap(), seen)
        }
        for json in [json, OPT_JSON, BLOOM_JSON] {
            let (fused_out, fused_seen) = run::<B>(json);
            let (generic_out, generic_seen) = run::<Flex>(json);
            close(&fused_out, &generic_out);
            assert_eq!(fused_seen.len(), 4);
            for ((fi, f), (gi, g)) in fused_seen.iter().zip(&generic_seen) {
                assert_eq!(fi, gi);
                close(f, g);
            }
        }
        // With experts: each expert's inputs sample by sample, the shared expert's after them.
        for json in EXPERT_FIXTURES {
            let (fused_out, fused_seen) = run::<B>(json);
            let (generic_out, generic_seen) = run::<Flex>(json);
            close(&fused_out, &generic_out);
            let order = |seen: &[(LinearInput, Vec<f32>)]| -> Vec<(LinearInput, usize)> {
                seen.iter().map(|(i, v)| (*i, v.len())).collect()
            };
            assert_eq!(order(&fused_seen), order(&generic_seen));
            assert!(
                fused_seen
                    .iter()
                    .filter(|(i, _)| matches!(i, LinearInput::ExpertIn(_)))
                    .count()
                    > 3,
                "three samples reach the experts"
            );
            for ((_, f), (_, g)) in fused_seen.iter().zip(&generic_seen) {
                close(f, g);
            }
        }
    }

    /// `observe_inputs` shows the same four inputs as `forward_observed`, on the fused path
    /// (burn-ndarray) and on Burn's ops (Flex), without computing the output.
    #[test]
    fn observe_inputs_sees_what_the_full_layer_sees() {
        let json = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":32,"intermediate_size":48,
            "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":50,
            "rms_norm_eps":1e-5,"tie_word_embeddings":true}"#;
        fn run<K: Backend>(json: &str, full: bool) -> Vec<(LinearInput, Vec<f32>)> {
            let m = model::<K>(json, 9);
            let ids: Vec<i64> = (0..2 * 70).map(|i| (i * 11 + 3) % 50).collect();
            let tokens =
                Tensor::<K, 2, Int>::from_data(TensorData::new(ids, [2, 70]), &Default::default());
            let (cos, sin) = m.rope_tables(0, 70);
            let ctx = LayerContext {
                cos: &cos,
                sin: &sin,
                cache: None,
            };
            let mut seen = Vec::new();
            let mut observe = |input, t: &Tensor<K, 3>| {
                seen.push((input, t.clone().into_data().to_vec().unwrap()))
            };
            if full {
                let _ =
                    m.layers
                        .last()
                        .unwrap()
                        .forward_observed(m.embed(tokens), ctx, &mut observe);
            } else {
                m.layers
                    .last()
                    .unwrap()
                    .observe_inputs(m.embed(tokens), ctx, &mut observe);
            }
            seen
        }
        for (inputs_only, full) in [
            (run::<B>(json, false), run::<B>(json, true)),
            (run::<Flex>(json, false), run::<Flex>(json, true)),
        ] {
            assert_eq!(inputs_only.len(), 4);
            assert_eq!(inputs_only, full);
        }
        // A layer with experts shows each expert's inputs without its down projection.
        for json in EXPERT_FIXTURES {
            let inputs_only = run::<B>(json, false);
            assert!(inputs_only.len() > 4);
            assert_eq!(inputs_only, run::<B>(json, true));
        }
    }

    /// `a` and `b` agree within 1e-5 of `b`'s largest magnitude.
    pub(in crate::model::decoder) fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-5 * scale, "{x} vs {y} (scale {scale})");
        }
    }
}
