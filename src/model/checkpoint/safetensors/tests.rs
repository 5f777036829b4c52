//! The safetensors reader: decoding and transposing in one pass, shards, names, buffers.

use std::sync::Arc;

use super::*;
use crate::model::checkpoint::{build_llama, SplitSource};
use crate::model::kernels::narrowed;
use crate::model::kernels::{transpose, transpose_into};

#[test]
fn decoding_and_transposing_in_one_pass_equals_the_two_passes() {
    let (rows, cols) = (70, 45);
    let values: Vec<f32> = (0..rows * cols).map(|k| k as f32 * 0.25 - 300.0).collect();
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
        .collect();
    let element = |b: [u8; 2]| half::bf16::from_le_bytes(b).to_f32();
    let decoded = decode(&bytes, None, element);
    assert_eq!(
        decode(&bytes, Some([rows, cols]), element),
        transpose(&decoded, rows, cols)
    );
}

#[test]
fn transpose_non_square() {
    // [[1, 2, 3], [4, 5, 6]] → [[1, 4], [2, 5], [3, 6]]
    let t = transpose(&[1., 2., 3., 4., 5., 6.], 2, 3);
    assert_eq!(t, vec![1., 4., 2., 5., 3., 6.]);
    let big: Vec<f32> = (0..(70 * 45)).map(|x| x as f32).collect();
    let back = transpose(&transpose(&big, 70, 45), 45, 70);
    assert_eq!(big, back);
    // Several bands of output rows and partial tiles at both edges.
    let (rows, cols) = (37, 150);
    let wide: Vec<u32> = (0..(rows * cols) as u32).collect();
    let t = transpose(&wide, rows, cols);
    for r in 0..rows {
        for c in 0..cols {
            assert_eq!(t[c * rows + r], wide[r * cols + c], "({r}, {c})");
        }
    }
    // Into a buffer that held other values: every one is overwritten.
    let mut into = vec![u32::MAX; rows * cols];
    transpose_into(&mut into, &wide, rows, cols);
    assert_eq!(into, t);
}

/// A checkpoint without a single tensor.
struct EmptySource;

impl WeightSource for EmptySource {
    fn name(&self) -> String {
        "empty.gguf".into()
    }
    fn tensor(&self, _name: &str) -> Result<Option<HostTensor>, WeightError> {
        Ok(None)
    }
    fn parameter_count(&self) -> u64 {
        0
    }
}

/// One stacked `qkv_proj` (q, k and v of 2 rows each, 2 columns), counting reads.
struct StackedSource {
    reads: std::sync::atomic::AtomicUsize,
}

impl WeightSource for StackedSource {
    fn name(&self) -> String {
        "stacked".into()
    }
    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        if name != "model.layers.0.self_attn.qkv_proj.weight" {
            return Ok(None);
        }
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Some(HostTensor {
            shape: vec![6, 2],
            data: (0..12).map(|v| v as f32).collect(),
        }))
    }
    fn parameter_count(&self) -> u64 {
        12
    }
}

#[test]
fn split_parts_are_the_stacks_rows_and_the_stack_is_read_once() {
    let config = crate::model::arch::HfLlamaConfig::from_json(
        r#"{"architectures":["Phi3ForCausalLM"],"hidden_size":2,"intermediate_size":2,
        "num_hidden_layers":1,"num_attention_heads":1,"num_key_value_heads":1,"head_dim":2,
        "vocab_size":4,"rms_norm_eps":1e-5}"#,
    )
    .unwrap()
    .resolve()
    .unwrap();
    let inner = Arc::new(StackedSource {
        reads: std::sync::atomic::AtomicUsize::new(0),
    });
    let split = SplitSource::for_family(&config, inner.clone());
    let part = |p: &str| {
        split
            .tensor(&format!("model.layers.0.self_attn.{p}.weight"))
            .unwrap()
            .unwrap()
    };
    let (q, k, v) = (part("q_proj"), part("k_proj"), part("v_proj"));
    assert_eq!((q.shape, q.data), (vec![2, 2], vec![0., 1., 2., 3.]));
    assert_eq!((k.shape, k.data), (vec![2, 2], vec![4., 5., 6., 7.]));
    assert_eq!((v.shape, v.data), (vec![2, 2], vec![8., 9., 10., 11.]));
    assert_eq!(inner.reads.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The last part let the stack go: asking again reads it again.
    part("q_proj");
    assert_eq!(inner.reads.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// Regression (fuzz finding `fuzz/regressions/gguf/oom-layer-count`): a file claiming
/// billions of layers aborted on a memory reservation sized by that count.
#[test]
fn a_huge_layer_count_without_tensors_is_an_error_not_an_abort() {
    let mut config = crate::model::arch::HfLlamaConfig::from_json(
        r#"{"architectures":["LlamaForCausalLM"],"hidden_size":16,"intermediate_size":24,
        "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":32,
        "rms_norm_eps":1e-5,"tie_word_embeddings":true}"#,
    )
    .unwrap()
    .resolve()
    .unwrap();
    config.num_hidden_layers = 3_000_000_000;
    let device = Default::default();
    let err =
        build_llama::<burn::backend::NdArray<f32>>(&config, &EmptySource, &device).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("empty.gguf"), "{message}");
    assert!(message.contains("model.layers.0."), "{message}");
}

/// Values every conversion must keep to the bit: ties of f16's and bf16's rounding, f16's
/// subnormals and values below them, the largest finite ones and beyond, infinities.
fn awkward_values(count: usize) -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        1.003_906_2,
        1.000_488_3,
        -1.000_488_3,
        5.96e-8,
        2.98e-8,
        6.1e-5,
        -3.0e-6,
        65504.0,
        65520.0,
        1.0e20,
        -3.4e38,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1.0e-40,
    ];
    (0..count)
        .map(|k| match special.get(k) {
            Some(&v) => v,
            None => ((k as f32) * 0.618_034).sin() * 10f32.powi((k % 13) as i32 - 6),
        })
        .collect()
}

#[test]
fn weights_read_in_the_devices_type_equal_the_f32_route_to_the_bit() {
    use safetensors::tensor::TensorView;
    let (rows, cols) = (7, 5);
    let values = awkward_values(rows * cols);
    let stored: [(Dtype, Vec<u8>); 3] = [
        (
            Dtype::F32,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        (
            Dtype::F16,
            values
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect(),
        ),
        (
            Dtype::BF16,
            values
                .iter()
                .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
                .collect(),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let views: Vec<(String, TensorView)> = stored
        .iter()
        .map(|(dtype, bytes)| {
            let view = TensorView::new(*dtype, vec![rows, cols], bytes).unwrap();
            (format!("{dtype:?}.weight"), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.path().join("model.safetensors")).unwrap();
    let source = SafetensorsSource::open(dir.path()).unwrap();
    let bits = |data: &TensorData| -> Vec<u32> {
        match data.dtype {
            DType::F32 => data
                .as_slice::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect(),
            DType::F16 => data
                .as_slice::<f16>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits().into())
                .collect(),
            DType::BF16 => data
                .as_slice::<bf16>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits().into())
                .collect(),
            other => panic!("no weight is read as {other:?}"),
        }
    };
    for (dtype, _) in &stored {
        let name = format!("{dtype:?}.weight");
        for target in [DType::F32, DType::F16, DType::BF16] {
            let direct = source.tensor_transposed_in(&name, target).unwrap().unwrap();
            let by_f32 = HostData::from_transposed(
                source.tensor_transposed(&name).unwrap().unwrap(),
                target,
            );
            assert_eq!(direct.shape, [rows, cols]);
            assert_eq!(direct.data.shape, by_f32.data.shape);
            assert_eq!(direct.data.shape, Shape::new([cols, rows]));
            assert_eq!(direct.data.dtype, target, "{dtype:?} → {target:?}");
            assert_eq!(
                bits(&direct.data),
                bits(&by_f32.data),
                "{dtype:?} → {target:?}"
            );
        }
    }
    // The narrowing itself is half's rounding: 1 + 2⁻¹¹ is a tie that goes to even in f16.
    let tie = narrowed(TensorData::new(vec![1.000_488_3f32], [1]), DType::F16);
    assert_eq!(tie.as_slice::<f16>().unwrap(), [f16::from_f32(1.0)]);
}

#[test]
fn shard_names_with_paths_are_refused() {
    let ok =
        r#"{"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors","c":"m-1.safetensors"}}"#;
    assert_eq!(
        shard_files(ok).unwrap(),
        vec!["m-1.safetensors", "m-2.safetensors"]
    );
    let bad = r#"{"weight_map":{"a":"../etc/passwd"}}"#;
    assert!(shard_files(bad).unwrap_err().contains("`../etc/passwd`"));
    assert!(shard_files("{}").unwrap_err().contains("weight_map"));
}

/// A block-scaled FP8 weight reads as its E4M3 values times their block's scale (f32, bf16
/// or E8M0 scales), transposed like any weight; in bf16 the scale is rounded to bf16 before
/// the product, as transformers multiplies in the model's dtype; a weight without its scales
/// is an error naming them.
#[test]
fn fp8_weights_read_dequantised_by_their_block_scales() {
    use safetensors::tensor::TensorView;
    // [2, 3] of 1, 2, −2, 448, 2⁻⁹, 0.
    let values: Vec<u8> = vec![0x38, 0x40, 0xc0, 0x7e, 0x01, 0x00];
    let exact = [1.0f32, 2.0, -2.0, 448.0, 2f32.powi(-9), 0.0];
    let scale = 1.0f32 + 2f32.powi(-12);
    let f32_scale = scale.to_le_bytes().to_vec();
    let bf16_scale = bf16::from_f32(0.5).to_le_bytes().to_vec();
    let e8m0_scale = vec![129u8]; // 2²
    let dir = tempfile::tempdir().unwrap();
    let weight = |name: &str| {
        (
            format!("{name}.weight"),
            TensorView::new(Dtype::F8_E4M3, vec![2, 3], &values).unwrap(),
        )
    };
    let views = vec![
        weight("a"),
        (
            "a.weight_scale_inv".into(),
            TensorView::new(Dtype::F32, vec![1, 1], &f32_scale).unwrap(),
        ),
        weight("b"),
        (
            "b.weight_scale_inv".into(),
            TensorView::new(Dtype::BF16, vec![1, 1], &bf16_scale).unwrap(),
        ),
        weight("c"),
        (
            "c.weight_scale_inv".into(),
            TensorView::new(Dtype::F8_E8M0, vec![1, 1], &e8m0_scale).unwrap(),
        ),
        weight("unscaled"),
    ];
    safetensors::serialize_to_file(views, None, &dir.path().join("model.safetensors")).unwrap();
    let source = SafetensorsSource::open(dir.path()).unwrap();
    let read = |name: &str| source.tensor(name).unwrap().unwrap();
    let times = |s: f32| exact.iter().map(|v| v * s).collect::<Vec<f32>>();
    assert_eq!(read("a.weight").data, times(scale));
    assert_eq!(read("b.weight").data, times(0.5));
    assert_eq!(read("c.weight").data, times(4.0));
    let t = source.tensor_transposed("a.weight").unwrap().unwrap();
    assert_eq!((t.shape.clone(), t.data[1]), (vec![2, 3], 448.0 * scale));
    // In bf16 the scale 1 + 2⁻¹² rounds to 1 first: the values themselves.
    let b = source
        .tensor_transposed_in("a.weight", DType::BF16)
        .unwrap()
        .unwrap();
    let expected: Vec<bf16> = [0, 3, 1, 4, 2, 5]
        .iter()
        .map(|&i| bf16::from_f32(exact[i]))
        .collect();
    assert_eq!(b.data.as_slice::<bf16>().unwrap(), expected);
    let err = source.tensor("unscaled.weight").unwrap_err().to_string();
    assert!(err.contains("unscaled.weight_scale_inv"), "{err}");
    // Six values a weight, no parameter a scale.
    assert_eq!(source.parameter_count(), 4 * 6);
}
