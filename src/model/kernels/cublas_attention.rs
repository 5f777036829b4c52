//! CUDA's causal attention by cuBLAS, picked by `WANDA_CUDA_ATTENTION=cublas`
//! ([`super::CudaAttention`]): for a chunk of heads at a time, the f32 scores by one batched
//! product, their causal softmax by a kernel of our own (`causal_softmax.cu`, compiled by NVRTC
//! once per build and kept in the kernel cache) written over them in the tensors' type, and the
//! weighted sum of the values by a second batched product accumulated in f32 (the layout is in
//! `attention_plan.rs`). Every call of every chunk queues on the stream cuBLAS uses, between one
//! wait for CubeCL's queue and one for that stream, as the linears' products do. Any float
//! type; the scores of one chunk stay within [`super::ATTENTION_BLOCK_BYTES`], the bound the
//! estimator counts for the generic path's blocks.

use std::cell::OnceCell;
use std::ffi::c_void;

use burn::prelude::*;
use burn::tensor::DType;
use burn_cubecl::cubecl::future::block_on;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::sys as driver_sys;

use super::attention_plan::{
    AttentionPlan, StridedGemm, SOFTMAX_KERNELS, SOFTMAX_SOURCE, SOFTMAX_THREADS,
};
use super::cublas::{cube, data_type, is_cuda, synchronize, tensor, with_handle};
use super::nvrtc::{launch, load_functions, Arg};

thread_local! {
    /// This thread's softmax kernels (f32, fp16, bf16 outputs), compiled on first use in the
    /// context the cuBLAS handle made current; `None` where NVRTC or the module load failed.
    static SOFTMAX: OnceCell<Option<[driver_sys::CUfunction; 3]>> = const { OnceCell::new() };
}

/// Causal `softmax(q·kᵀ/√head_dim)·v` when `B` is the CUDA backend, cuBLAS and NVRTC load, one
/// head's scores fit [`super::ATTENTION_BLOCK_BYTES`] and the shapes cuBLAS's integers; `None`
/// otherwise (the caller's other paths run).
///
/// # Shapes
/// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]` → `[batch, heads, seq, head_dim]`
pub fn causal_attention<B: Backend>(
    q: &Tensor<B, 4>,
    k: &Tensor<B, 4>,
    v: &Tensor<B, 4>,
) -> Option<Tensor<B, 4>> {
    let dtype = q.dtype();
    let same = |t: &Tensor<B, 4>| t.dims() == q.dims() && t.dtype() == dtype;
    if !is_cuda::<B>() || !same(k) || !same(v) {
        return None;
    }
    let kind = data_type(dtype)?;
    let kernel = match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        _ => 2,
    };
    let [batch, heads, seq, head_dim] = q.dims();
    // The plan reads each head as a contiguous `[seq, head_dim]` block.
    let contiguous = |t: &Tensor<B, 4>| cube(t).map(into_contiguous);
    let (q, k, v) = (contiguous(q)?, contiguous(k)?, contiguous(v)?);
    if k.device != q.device || v.device != q.device {
        return None;
    }
    let budget = super::ATTENTION_BLOCK_BYTES as usize;
    let plan = AttentionPlan::new(batch * heads, seq, head_dim, dtype.size(), budget);
    // A head whose scores alone exceed the budget (beyond 8,192 positions) is left to the
    // paths that hold blocks of query rows, as the estimate counts.
    let empty = batch * heads * seq * head_dim == 0;
    if empty || plan.workspace_bytes > budget || !plan.fits_cublas() {
        return None;
    }
    let (client, device) = (q.client.clone(), q.device.clone());
    let out = CubeTensor::new_contiguous(
        client.clone(),
        device.clone(),
        burn::tensor::Shape::new([batch, heads, seq, head_dim]),
        client.empty(batch * heads * seq * head_dim * dtype.size()),
        dtype,
    );
    // The resources hold their allocations (the workspace's with it) until this function
    // returns, after the wait for the stream.
    let resource = |handle| client.get_resource(handle).ok();
    let work_res = resource(client.empty(plan.workspace_bytes))?;
    let (q_res, k_res) = (resource(q.handle.clone())?, resource(k.handle.clone())?);
    let (v_res, out_res) = (resource(v.handle.clone())?, resource(out.handle.clone())?);
    let [q_ptr, k_ptr, v_ptr, out_ptr, work_ptr] =
        [&q_res, &k_res, &v_res, &out_res, &work_res].map(|r| r.resource().ptr);
    // CubeCL's queued kernels (those that write q, k and v) finish before cuBLAS reads them.
    block_on(client.sync()).ok()?;
    with_handle(device.index, |blas| {
        let softmax = SOFTMAX.with(|cell| *cell.get_or_init(compile_softmax))?[kernel];
        let scale = 1.0 / (head_dim as f32).sqrt();
        let head_bytes = (seq * head_dim * dtype.size()) as u64;
        let f32_type = blas_sys::cudaDataType::CUDA_R_32F;
        // A failed launch stops the chunks; those queued still finish before the wait below
        // returns, and the caller's other path computes the whole attention again.
        let launched = plan.chunks().try_for_each(|(first, heads)| {
            let at = first as u64 * head_bytes;
            let (q, k, v, out) = (
                (q_ptr + at, kind),
                (k_ptr + at, kind),
                (v_ptr + at, kind),
                (out_ptr + at, kind),
            );
            for part in plan.parts() {
                strided_gemm(
                    blas,
                    &plan.scores(heads, part),
                    scale,
                    k,
                    q,
                    (work_ptr, f32_type),
                )?;
            }
            let rows = (heads * seq) as i64;
            let blocks = plan.softmax_blocks(heads);
            launch_softmax(softmax, blocks, work_ptr, rows, [seq, plan.part_rows])?;
            plan.parts().try_for_each(|part| {
                strided_gemm(
                    blas,
                    &plan.weighted(heads, part),
                    1.0,
                    v,
                    (work_ptr, kind),
                    out,
                )
            })
        });
        launched.and(synchronize())
    })?;
    tensor::<B, 4>(out)
}

/// One batched product `c = α·op(a)·op(b)` of `gemm`, each operand a device address and its
/// type (the gemm's offsets of `b` and `c` counted from there), accumulated in f32; `None`
/// where cuBLAS refuses it.
fn strided_gemm(
    blas: blas_sys::cublasHandle_t,
    gemm: &StridedGemm,
    alpha: f32,
    (a, a_type): (u64, blas_sys::cudaDataType),
    (b, b_type): (u64, blas_sys::cudaDataType),
    (c, c_type): (u64, blas_sys::cudaDataType),
) -> Option<()> {
    let op = |t: bool| {
        if t {
            blas_sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            blas_sys::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let zero = 0.0f32;
    let at = |address: u64, offset: usize, kind| {
        let bytes = match kind {
            blas_sys::cudaDataType::CUDA_R_32F => 4,
            _ => 2,
        };
        (address + (offset * bytes) as u64) as *const c_void
    };
    // `AttentionPlan::fits_cublas` checked every value against `int` and `long long`.
    let int = |v: usize| v as i32;
    let long = |v: usize| v as i64;
    // SAFETY: `a`, `b` and `c` are addresses inside live allocations of CubeCL's pool (the
    // caller holds their resources until after the stream's synchronisation) that the plan's
    // offsets, dimensions, leading dimensions and strides keep within; α and β are host f32 values, as
    // cuBLAS's default pointer mode reads them for a 32F compute type.
    #[allow(unsafe_code)]
    let status = unsafe {
        blas::gemm_strided_batched_ex(
            blas,
            op(gemm.transpose_a),
            op(gemm.transpose_b),
            int(gemm.m),
            int(gemm.n),
            int(gemm.k),
            (&alpha as *const f32).cast::<c_void>(),
            a as *const c_void,
            a_type,
            int(gemm.lda),
            long(gemm.stride_a),
            at(b, gemm.offset_b, b_type),
            b_type,
            int(gemm.ldb),
            long(gemm.stride_b),
            (&zero as *const f32).cast::<c_void>(),
            at(c, gemm.offset_c, c_type).cast_mut(),
            c_type,
            int(gemm.ldc),
            long(gemm.stride_c),
            int(gemm.batch),
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    };
    status.ok()
}

/// Queues the softmax over `rows` score rows of `seq` keys at `scores`, in parts of
/// `part_rows` query rows, on the legacy default stream (cuBLAS's).
fn launch_softmax(
    kernel: driver_sys::CUfunction,
    blocks: usize,
    scores: u64,
    rows: i64,
    [seq, part_rows]: [usize; 2],
) -> Option<()> {
    // The kernel's parameters: `float*`, `long long`, `int`, `int`; `scores` addresses `rows ×
    // seq` f32 values in a live allocation that the caller holds until after the stream's
    // synchronisation.
    let args = &mut [
        Arg::Pointer(scores),
        Arg::Long(rows),
        Arg::Int(i32::try_from(seq).ok()?),
        Arg::Int(i32::try_from(part_rows).ok()?),
    ];
    launch(kernel, blocks, (SOFTMAX_THREADS as u32, 1, 1), args)
}

/// The softmax kernels of [`SOFTMAX_SOURCE`] loaded into the current context (NVRTC's PTX
/// kept in the kernel cache); `None` (a line on stderr) where NVRTC or the module load fails.
fn compile_softmax() -> Option<[driver_sys::CUfunction; 3]> {
    load_functions(
        SOFTMAX_SOURCE,
        "causal_softmax.ptx",
        SOFTMAX_KERNELS,
        "the attention softmax kernel",
        "attention runs the flash or generic path",
    )
}
