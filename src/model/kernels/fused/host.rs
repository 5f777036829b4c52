//! The fused kernels' transfers to host memory: a tensor's values in row-major order, moved or
//! copied from its buffer, and a matrix's transpose read from it.

use burn::backend::ndarray::NdArrayTensor;
use burn::prelude::*;
use rayon::prelude::*;

use super::{contiguous, matrix_of, Nd};

/// [`Kernels::host_values`](super::super::Kernels::host_values): a buffer the tensor holds
/// alone moves out; any other contiguous f32 buffer is copied in parallel.
pub(super) fn values(x: NdArrayTensor) -> Result<Vec<f32>, NdArrayTensor> {
    let NdArrayTensor::F32(storage) = x else {
        return Err(x);
    };
    let x = if storage.is_unique() && storage.view().is_standard_layout() {
        let len = storage.len();
        match storage.into_shared().try_into_owned_nocopy() {
            Ok(array) => {
                let (mut values, offset) = array.into_raw_vec_and_offset();
                // A view into a larger buffer keeps only its own elements.
                values.drain(..offset.unwrap_or(0));
                values.truncate(len);
                return Ok(values);
            }
            Err(shared) => NdArrayTensor::from(shared),
        }
    } else {
        NdArrayTensor::F32(storage)
    };
    let Some(values) = contiguous(&x) else {
        return Err(x);
    };
    // A parallel copy: one core's memcpy is a fraction of the memory bandwidth.
    let mut out = vec![0.0f32; values.len()];
    out.par_chunks_mut(1 << 20)
        .zip(values.par_chunks(1 << 20))
        .for_each(|(o, v)| o.copy_from_slice(v));
    Ok(out)
}

/// [`Kernels::host_transposed`](super::super::Kernels::host_transposed), read from the buffer.
pub(super) fn transposed(x: &Tensor<Nd, 2>) -> Option<Vec<f32>> {
    let (primitive, [rows, cols]) = matrix_of(x)?;
    Some(crate::model::kernels::transpose(
        contiguous(&primitive)?,
        rows,
        cols,
    ))
}
