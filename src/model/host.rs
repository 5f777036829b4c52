//! Tensors between host and device memory: the one way values leave a Burn backend for
//! host-side code (pruning kernels, safetensors export, the perplexity sum, the CLI), and the one
//! way model weights enter it.

use burn::prelude::*;
use burn::tensor::DType;
use rayon::prelude::*;

use super::kernels::kernels;

/// The values of `t` in row-major order as `f32`, whatever float type the backend computes in
/// (bf16 and f16 travel in their own type and are widened exactly, in parallel). On the fused
/// CPU backend a contiguous buffer is copied in parallel (Burn would collect a shared one, such
/// as a parameter's, element by element).
pub fn to_host_f32<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    let n = t.shape().num_elements();
    if n > 0 {
        if let Some(values) = kernels::<B>().host_copy(&t.clone().reshape([1, n]), false) {
            return values;
        }
    }
    let data = t.into_data();
    let widened = match data.dtype {
        DType::F16 => data
            .as_slice::<half::f16>()
            .ok()
            .map(|v| v.par_iter().map(|x| x.to_f32()).collect()),
        DType::BF16 => data
            .as_slice::<half::bf16>()
            .ok()
            .map(|v| v.par_iter().map(|x| x.to_f32()).collect()),
        _ => None,
    };
    widened.unwrap_or_else(|| {
        data.convert::<f32>()
            .into_vec()
            .expect("converted to f32 above")
    })
}

/// A model weight on `device` from host values, allocated as a long-lived tensor.
///
/// On CUDA a plain upload goes to CubeCL's sliced pools, whose pages are a quarter, a sixteenth,
/// … of the GPU's memory and are never given back: on an H200 two 768 MiB tensors took an
/// 8.8 GiB page, and a Llama-2-7B-shaped model's 7.5 GiB of weights reserved 15.3 GiB
/// (`results/gpu-h200-2026-11-26/`). Persistent allocations take exactly the tensor's bytes, and
/// a pruned weight put back reuses its predecessor's. Other backends just create the tensor.
pub fn weight_tensor<B: Backend, const D: usize>(
    data: TensorData,
    device: &B::Device,
) -> Tensor<B, D> {
    B::memory_persistent_allocations(device, data, |data| Tensor::from_data(data, device))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    #[test]
    fn half_precision_values_come_back_widened_exactly() {
        use burn::backend::Flex;
        let device = Default::default();
        let values = [1.5f32, -0.0, 65504.0, 3.0e-5];
        let t = Tensor::<Flex, 1>::from_data(TensorData::new(values.to_vec(), [4]), &device);
        let back = |dtype| to_host_f32(t.clone().cast(dtype));
        let f16: Vec<f32> = values
            .iter()
            .map(|&v| half::f16::from_f32(v).to_f32())
            .collect();
        let bf16: Vec<f32> = values
            .iter()
            .map(|&v| half::bf16::from_f32(v).to_f32())
            .collect();
        assert_eq!(back(burn::tensor::FloatDType::F16), f16);
        assert_eq!(back(burn::tensor::FloatDType::BF16), bf16);
        assert_eq!(back(burn::tensor::FloatDType::F32), values);
    }

    #[test]
    fn values_come_back_in_row_major_order() {
        let device = Default::default();
        let t = Tensor::<NdArray<f32>, 2>::from_data(
            TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]),
            &device,
        );
        assert_eq!(
            to_host_f32(t.transpose()),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
    }
}
