//! Tensors between host and device memory: the one way values leave a Burn backend for
//! host-side code (pruning kernels, safetensors export, the perplexity sum, the CLI), and the one
//! way model weights enter it.

use burn::module::{Param, ParamId};
use burn::prelude::*;
use burn::tensor::{DType, TensorPrimitive};
use rayon::prelude::*;

use crate::model::kernels::kernels;

/// The values of `t` in row-major order as `f32`, whatever float type the backend computes in
/// (bf16 and f16 travel in their own type and are widened exactly, in parallel). On the fused
/// CPU backend the buffer of a tensor that holds it alone is moved out, and a shared one (a
/// parameter's) copied in parallel, where Burn would collect it element by element.
pub fn to_host_f32<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    let t = match kernels::<B>().host_values(t.into_primitive().tensor()) {
        Ok(values) => return values,
        Err(primitive) => Tensor::<B, D>::from_primitive(TensorPrimitive::Float(primitive)),
    };
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

/// The tensor of `param`, taken out and replaced by an empty one: a buffer the parameter held
/// alone is then held alone by the result, and [`to_host_f32`] moves it instead of copying.
/// The empty tensor is made only if it is read, so nothing is allocated on the device.
pub fn take_param<B: Backend, const D: usize>(param: &mut Param<Tensor<B, D>>) -> Tensor<B, D> {
    let empty = Param::uninitialized(
        ParamId::new(),
        |device, _| Tensor::empty([0; D], device),
        param.lazy_device(),
        false,
        Shape::new([0; D]),
    );
    std::mem::replace(param, empty).into_value()
}

/// A model weight on `device` from host values, allocated as a long-lived tensor.
///
/// On CUDA a plain upload goes to CubeCL's sliced pools, whose pages are a quarter, a sixteenth,
/// … of the GPU's memory and are never given back: on an H200 two 768 MiB tensors took an
/// 8.8 GiB page, and a Llama-2-7B-shaped model's 7.5 GiB of weights reserved 15.3 GiB
/// (`results/gpu-h200-2026-11-26/`). Persistent allocations take exactly the tensor's bytes, and
/// a pruned weight put back reuses its predecessor's. Other backends just create the tensor.
/// f32 values bound for a 16-bit float type are narrowed here, in parallel ([`narrowed`]).
pub fn weight_tensor<B: Backend, const D: usize>(
    data: TensorData,
    device: &B::Device,
) -> Tensor<B, D> {
    let data = narrowed(
        data,
        burn::tensor::get_device_settings::<B>(device)
            .float_dtype
            .into(),
    );
    B::memory_persistent_allocations(device, data, |data| Tensor::from_data(data, device))
}

/// f32 `data` in `dtype` where that is f16 or bf16, converted in parallel with `half`'s
/// rounding, which is the one Burn's `from_data` applies element by element on one core (a
/// 1B model's weights took 3 s there); any other data or type is returned as it is.
pub(crate) fn narrowed(data: TensorData, dtype: DType) -> TensorData {
    fn convert<T: burn::tensor::Element>(data: TensorData, f: fn(f32) -> T) -> TensorData {
        let Ok(values) = data.as_slice::<f32>() else {
            return data;
        };
        let mut out = Vec::with_capacity(values.len());
        values.par_iter().map(|&v| f(v)).collect_into_vec(&mut out);
        TensorData::new(out, data.shape.clone())
    }
    match (data.dtype, dtype) {
        (DType::F32, DType::F16) => convert(data, half::f16::from_f32),
        (DType::F32, DType::BF16) => convert(data, half::bf16::from_f32),
        _ => data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::ndarray::NdArrayTensor;
    use burn::backend::NdArray;

    #[test]
    fn a_buffer_held_alone_moves_to_the_host_and_a_shared_one_is_copied() {
        let values: Vec<f32> = (0..24).map(|v| v as f32 - 7.5).collect();
        let t = Tensor::<NdArray<f32>, 3>::from_data(
            TensorData::new(values.clone(), [2, 3, 4]),
            &Default::default(),
        );
        let address = |t: &Tensor<NdArray<f32>, 3>| match t.clone().into_primitive().tensor() {
            NdArrayTensor::F32(storage) => storage.view().as_ptr() as usize,
            other => panic!("an f32 tensor holds f32 storage, not {other:?}"),
        };
        let buffer = address(&t);
        let copied = to_host_f32(t.clone());
        assert_eq!(copied, values);
        assert_ne!(
            copied.as_ptr() as usize,
            buffer,
            "a shared buffer is copied"
        );
        assert_eq!(address(&t), buffer, "and stays where it was");
        // A view into part of a buffer gives its own elements only.
        assert_eq!(to_host_f32(t.clone().slice([1..2, 0..3])), values[12..]);
        let moved = to_host_f32(t);
        assert_eq!(
            moved.as_ptr() as usize,
            buffer,
            "a buffer held alone is moved"
        );
        assert_eq!(moved, values);
    }

    #[test]
    fn a_taken_parameter_leaves_an_empty_one_and_moves_to_the_host() {
        let values = vec![0.5f32, -1.0, 2.0, 4.0, -8.0, 16.0];
        let mut param = Param::from_tensor(Tensor::<NdArray<f32>, 2>::from_data(
            TensorData::new(values.clone(), [2, 3]),
            &Default::default(),
        ));
        let taken = take_param(&mut param);
        let buffer = match taken.clone().into_primitive().tensor() {
            NdArrayTensor::F32(storage) => storage.view().as_ptr() as usize,
            other => panic!("an f32 tensor holds f32 storage, not {other:?}"),
        };
        let moved = to_host_f32(taken);
        assert_eq!(moved, values);
        assert_eq!(
            moved.as_ptr() as usize,
            buffer,
            "the parameter held it alone"
        );
        assert_eq!(param.val().dims(), [0, 0]);
    }

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
