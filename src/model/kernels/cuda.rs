//! The CUDA backend's fast path: CubeCL's flash attention kernel, which Burn 0.21 only reaches
//! through its autotuner (the plain `cuda` build runs the fallback that materialises every
//! score and its softmax in separate kernels). It takes queries, keys and values in the
//! tensors' own type and accumulates in f32, as PyTorch's fp16 attention does.

use std::any::Any;

use burn::prelude::*;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{DType, TensorPrimitive};
use burn_cubecl::cubecl::cuda::CudaRuntime;
use burn_cubecl::kernel::attention::{attention, AttentionStrategy};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cubek::attention::routines::blackbox_accelerated::BlackboxAcceleratedStrategy;

/// Causal `softmax(q·kᵀ/√head_dim)·v` by the flash kernel, when `B` is the CUDA backend in
/// fp16 and the kernel takes these shapes; `None` otherwise.
///
/// # Shapes
/// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]` → `[batch, heads, seq, head_dim]`
pub fn flash_attention<B: Backend>(
    q: &Tensor<B, 4>,
    k: &Tensor<B, 4>,
    v: &Tensor<B, 4>,
) -> Option<Tensor<B, 4>> {
    // The kernel refused f32 and bf16 on the GPUs measured (their logits stayed the fallback's
    // to the bit): asking first would only copy q, k and v for nothing on every layer.
    if q.dtype() != DType::F16 {
        return None;
    }
    // Contiguous copies where the tensors are views: on the `[batch, seq, heads, head_dim]`
    // views the projections give, the kernel's output was wrong (fp16 logits off by 19 where
    // PyTorch's are within 0.9, results/gpu-2026-11-26-flash/); its layout addresses a head
    // from `stride(1)` and the two last dimensions only.
    let cube = |t: &Tensor<B, 4>| -> Option<CubeTensor<CudaRuntime>> {
        let primitive: Box<dyn Any> = Box::new(t.clone().into_primitive().tensor());
        let tensor = primitive.downcast::<CubeTensor<CudaRuntime>>().ok()?;
        Some(into_contiguous(*tensor))
    };
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: true,
    };
    // `dispatch` refused a malformed tiling before any work.
    let tiling = super::flash_tiling().unwrap_or_default();
    let strategy = AttentionStrategy::FlashBlackboxAccelerated(BlackboxAcceleratedStrategy {
        num_planes: tiling.planes,
        seq_q: tiling.seq_q,
        seq_kv: tiling.seq_kv,
    });
    let out = attention(cube(q)?, cube(k)?, cube(v)?, None, None, options, strategy).ok()?;
    let out: Box<dyn Any> = Box::new(out);
    let out = out.downcast::<B::FloatTensorPrimitive>().ok()?;
    Some(Tensor::from_primitive(TensorPrimitive::Float(*out)))
}
