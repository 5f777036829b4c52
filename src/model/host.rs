//! Tensors to host memory: the one way values leave a Burn backend for host-side code
//! (pruning kernels, safetensors export, the perplexity sum, the CLI).

use burn::prelude::*;

use super::kernels::kernels;

/// The values of `t` in row-major order as `f32`, whatever float type the backend computes in
/// (bf16 and f16 are widened exactly). On the fused CPU backend a contiguous buffer is copied in
/// parallel (Burn would collect a shared one, such as a parameter's, element by element).
pub fn to_host_f32<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    let n = t.shape().num_elements();
    if n > 0 {
        if let Some(values) = kernels::<B>().host_copy(&t.clone().reshape([1, n])) {
            return values;
        }
    }
    t.into_data()
        .convert::<f32>()
        .into_vec()
        .expect("converted to f32 above")
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

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
