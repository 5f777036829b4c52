//! Wanda's per-output selection on CUDA by a kernel of our own (`column_select.cu`, compiled by
//! NVRTC once per build and kept in the kernel cache): per column of a weight, its `k` lowest
//! scores `|w|·norm` found exactly by a radix select on the scores' bits, ties by the lower row,
//! in one launch that reads the weight in its own type and writes the mask. Burn's ops would
//! bisect with some 290 small operations a weight (`prune::device_select`, 14–29 ms a weight on
//! an H200); the launch queues on the stream cuBLAS uses, between one wait for CubeCL's queue
//! and one for that stream, as the linears' products do.

use std::any::Any;
use std::cell::OnceCell;
use std::ffi::c_void;

use burn::prelude::*;
use burn::tensor::DType;
use burn_cubecl::cubecl::cuda::CudaRuntime;
use burn_cubecl::cubecl::future::block_on;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cudarc::driver::{result as driver, sys as driver_sys};

use super::cublas::{cube, is_cuda, synchronize, with_handle};
use super::nvrtc::load_functions;

/// The CUDA C source of the selection kernels, one per weight type ([`KERNELS`]).
const SOURCE: &str = include_str!("column_select.cu");

/// The kernels of [`SOURCE`] for f32, fp16 and bf16 weights.
const KERNELS: [&str; 3] = [
    "lowest_per_column_f32",
    "lowest_per_column_f16",
    "lowest_per_column_bf16",
];

/// Warps per block, each over a range of rows: `SELECT_WARPS` of [`SOURCE`] (a block of
/// another shape only sets the kernel's failure flag).
const WARPS: u32 = 8;

/// Columns per block: a warp's lanes.
const COLUMNS: usize = 32;

thread_local! {
    /// This thread's selection kernels, compiled on first use in the context the cuBLAS handle
    /// made current; `None` where NVRTC or the module load failed.
    static SELECT: OnceCell<Option<[driver_sys::CUfunction; 3]>> = const { OnceCell::new() };
}

/// Per column of `weight`, the `k` weights of lowest score `|w|·norms[row]` in f32, ties by the
/// lower row, as a mask (`true`: zero it) when `B` is the CUDA backend; `None` where it is not,
/// where NVRTC, cuBLAS's context or a launch fails, where a score is not finite or the shapes
/// exceed the kernel's `int`s.
///
/// # Shapes
/// - `weight`: `[rows, cols]`, `norms`: `rows` → `[rows, cols]`
pub fn lowest_per_column<B: Backend>(
    weight: &Tensor<B, 2>,
    norms: &[f32],
    k: usize,
) -> Option<Tensor<B, 2, Bool>> {
    if !is_cuda::<B>() {
        return None;
    }
    let [rows, cols] = weight.dims();
    let int = |v: usize| i32::try_from(v).ok();
    let (rows_i, cols_i, k_i) = (int(rows)?, int(cols)?, int(k)?);
    if norms.len() != rows || k > rows || rows == 0 || cols == 0 {
        return None;
    }
    let w = into_contiguous(cube(weight)?);
    let kernel = match w.dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        _ => return None,
    };
    let mask = bool_cube(Tensor::<B, 2, Bool>::empty([rows, cols], &weight.device()))?;
    // One byte per weight, 0 or 1, as the kernel writes it.
    if mask.dtype.size() != 1
        || !mask.is_contiguous()
        || !mask.is_contiguous_buffer()
        || mask.device != w.device
    {
        return None;
    }
    let client = w.client.clone();
    let norm_bytes: Vec<u8> = norms.iter().flat_map(|n| n.to_le_bytes()).collect();
    let norms = client.create_from_slice(&norm_bytes);
    let failed = client.create_from_slice(&0i32.to_le_bytes());
    // The resources hold their allocations until this function returns, after the wait for
    // the stream.
    let resource = |handle| client.get_resource(handle).ok();
    let (w_res, norms_res) = (resource(w.handle.clone())?, resource(norms)?);
    let (mask_res, failed_res) = (resource(mask.handle.clone())?, resource(failed.clone())?);
    let pointers = [&w_res, &norms_res, &mask_res, &failed_res].map(|r| r.resource().ptr);
    // CubeCL's queued kernels (those that wrote the weight, and the two uploads) finish first.
    block_on(client.sync()).ok()?;
    with_handle(w.device.index, |_| {
        let function = SELECT.with(|cell| *cell.get_or_init(compile))?[kernel];
        let blocks = u32::try_from(cols.div_ceil(COLUMNS)).ok()?;
        let launched = launch(function, blocks, pointers, [rows_i, cols_i, k_i]);
        // After a failed launch too, the stream finishes before the resources go.
        let finished = synchronize();
        launched.and(finished)
    })?;
    let flag = client.read_one(failed).ok()?;
    if flag.iter().any(|&byte| byte != 0) {
        return None;
    }
    let mask: Box<dyn Any> = Box::new(mask);
    let mask = mask.downcast::<B::BoolTensorPrimitive>().ok()?;
    Some(Tensor::from_primitive(*mask))
}

/// The CubeCL tensor under the bool tensor `t` when `B` is the CUDA backend.
fn bool_cube<B: Backend>(t: Tensor<B, 2, Bool>) -> Option<CubeTensor<CudaRuntime>> {
    let primitive: Box<dyn Any> = Box::new(t.into_primitive());
    primitive
        .downcast::<CubeTensor<CudaRuntime>>()
        .ok()
        .map(|t| *t)
}

/// Queues `function` over `blocks` blocks of 32 columns on the legacy default stream
/// (cuBLAS's), with its pointers (weight, norms, mask, failure flag) and integers (rows,
/// columns, k).
fn launch(
    function: driver_sys::CUfunction,
    blocks: u32,
    [weight, norms, mask, failed]: [u64; 4],
    [rows, cols, k]: [i32; 3],
) -> Option<()> {
    let (mut weight, mut norms, mut mask, mut failed) = (weight, norms, mask, failed);
    let (mut rows, mut cols, mut k) = (rows, cols, k);
    let mut params = [
        (&mut weight as *mut u64).cast::<c_void>(),
        (&mut norms as *mut u64).cast::<c_void>(),
        (&mut mask as *mut u64).cast::<c_void>(),
        (&mut rows as *mut i32).cast::<c_void>(),
        (&mut cols as *mut i32).cast::<c_void>(),
        (&mut k as *mut i32).cast::<c_void>(),
        (&mut failed as *mut u64).cast::<c_void>(),
    ];
    // SAFETY: `function` is a function of a module this thread loaded in the current context;
    // its parameters (three pointers, three `int`s, a pointer) match `params`, which live
    // through the call (the driver copies them at launch). The pointers address live
    // allocations of CubeCL's pool that the caller holds until after the stream's
    // synchronisation: `rows × cols` weights and mask bytes, `rows` norms and one `int`.
    #[allow(unsafe_code)]
    unsafe {
        driver::launch_kernel(
            function,
            (blocks, 1, 1),
            (COLUMNS as u32, WARPS, 1),
            0,
            driver::stream::null(),
            &mut params,
        )
        .ok()
    }
}

/// The selection kernels of [`SOURCE`] loaded into the current context (NVRTC's PTX kept in
/// the kernel cache); `None` (a line on stderr) where NVRTC or the module load fails.
fn compile() -> Option<[driver_sys::CUfunction; 3]> {
    load_functions(
        SOURCE,
        "column_select.ptx",
        KERNELS,
        "the pruning selection kernel",
        "the selection runs as Burn's operations",
    )
}
