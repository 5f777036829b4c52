//! Pruning's selection on CUDA by kernels of our own (`column_select.cu`, compiled by NVRTC
//! once per build and kept in the kernel cache), one launch per weight that reads it in its own
//! type and writes the mask: per column, the `k` lowest scores `|w|·norm` found exactly by a
//! radix select on the scores' bits (Wanda's per-output rule), or the `n` lowest of every `m`
//! rows (N:M); ties by the lower row, as the host's rules. Burn's ops bisect Wanda's rule with
//! some 290 small operations a weight (`prune::device_select`, 14–29 ms a weight on an H200),
//! and have no N:M rule. The launch queues on the stream cuBLAS uses, between one wait for
//! CubeCL's queue and one for that stream, as the linears' products do.

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
use super::Lowest;

/// The CUDA C source of the selection kernels, one per rule and weight type ([`KERNELS`]).
const SOURCE: &str = include_str!("column_select.cu");

/// The kernels of [`SOURCE`]: per column, then N:M, each for f32, fp16 and bf16 weights.
const KERNELS: [&str; 6] = [
    "lowest_per_column_f32",
    "lowest_per_column_f16",
    "lowest_per_column_bf16",
    "lowest_per_group_f32",
    "lowest_per_group_f16",
    "lowest_per_group_bf16",
];

/// Warps per block of the per-column kernel, each over a range of rows: `SELECT_WARPS` of
/// [`SOURCE`] (a block of another shape only sets the kernel's failure flag).
const WARPS: u32 = 8;

/// Columns per block of the per-column kernel: a warp's lanes.
const COLUMNS: usize = 32;

/// Threads per block of the N:M kernel, a group of one column each.
const GROUP_THREADS: u32 = 256;

/// The largest group the N:M kernel takes: it compares each score with the group's others, `m²`
/// reads per group (larger groups are selected on the host).
const MAX_GROUP: usize = 64;

thread_local! {
    /// This thread's selection kernels, compiled on first use in the context the cuBLAS handle
    /// made current; `None` where NVRTC or the module load failed.
    static SELECT: OnceCell<Option<[driver_sys::CUfunction; 6]>> = const { OnceCell::new() };
}

/// The weights of `weight` with the lowest scores `|w|·norms[row]` in f32 that `which` says,
/// ties by the lower row, as a mask (`true`: zero it) when `B` is the CUDA backend; `None`
/// where it is not, where NVRTC, cuBLAS's context or a launch fails, where a score is not
/// finite, or the shapes do not fit the kernels (`int`s, an N:M group that does not divide the
/// rows or exceeds [`MAX_GROUP`]).
///
/// # Shapes
/// - `weight`: `[rows, cols]`, `norms`: `rows` → `[rows, cols]`
pub fn lowest_scores<B: Backend>(
    weight: &Tensor<B, 2>,
    norms: &[f32],
    which: Lowest,
) -> Option<Tensor<B, 2, Bool>> {
    if !is_cuda::<B>() {
        return None;
    }
    let [rows, cols] = weight.dims();
    let int = |v: usize| i32::try_from(v).ok();
    let fits = match which {
        Lowest::PerColumn(k) => k <= rows,
        Lowest::PerGroup { n, m } => n <= m && m > 0 && m <= MAX_GROUP && rows % m == 0,
    };
    if !fits || norms.len() != rows || rows == 0 || cols == 0 {
        return None;
    }
    let ints = match which {
        Lowest::PerColumn(k) => [int(rows)?, int(cols)?, int(k)?, 0],
        Lowest::PerGroup { n, m } => [int(rows)?, int(cols)?, int(n)?, int(m)?],
    };
    let w = into_contiguous(cube(weight)?);
    let kernel = match w.dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        _ => return None,
    } + match which {
        Lowest::PerColumn(_) => 0,
        Lowest::PerGroup { .. } => 3,
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
        let launched = launch(function, which, pointers, ints);
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

/// Queues `function`, the kernel of rule `which`, on the legacy default stream (cuBLAS's),
/// with its pointers (weight, norms, mask, failure flag) and integers (rows, columns, then `k`,
/// or `n` and `m`).
fn launch(
    function: driver_sys::CUfunction,
    which: Lowest,
    [weight, norms, mask, failed]: [u64; 4],
    [rows, cols, first, second]: [i32; 4],
) -> Option<()> {
    let (mut weight, mut norms, mut mask, mut failed) = (weight, norms, mask, failed);
    let (mut rows, mut cols, mut first, mut second) = (rows, cols, first, second);
    let mut params = vec![
        (&mut weight as *mut u64).cast::<c_void>(),
        (&mut norms as *mut u64).cast::<c_void>(),
        (&mut mask as *mut u64).cast::<c_void>(),
        (&mut rows as *mut i32).cast::<c_void>(),
        (&mut cols as *mut i32).cast::<c_void>(),
        (&mut first as *mut i32).cast::<c_void>(),
    ];
    let (grid, block) = match which {
        Lowest::PerColumn(_) => {
            let blocks = (cols as usize).div_ceil(COLUMNS);
            (u32::try_from(blocks).ok()?, (COLUMNS as u32, WARPS, 1))
        }
        Lowest::PerGroup { .. } => {
            params.push((&mut second as *mut i32).cast::<c_void>());
            let groups = (rows / second) as usize * cols as usize;
            let blocks = groups.div_ceil(GROUP_THREADS as usize);
            (u32::try_from(blocks).ok()?, (GROUP_THREADS, 1, 1))
        }
    };
    params.push((&mut failed as *mut u64).cast::<c_void>());
    // SAFETY: `function` is a function of a module this thread loaded in the current context;
    // its parameters (three pointers, three `int`s, or four for N:M, a pointer) match
    // `params`, which live through the call (the driver copies them at launch). The pointers
    // address live allocations of CubeCL's pool that the caller holds until after the
    // stream's synchronisation: `rows × cols` weights and mask bytes, `rows` norms and one
    // `int`.
    #[allow(unsafe_code)]
    unsafe {
        driver::launch_kernel(
            function,
            (grid, 1, 1),
            block,
            0,
            driver::stream::null(),
            &mut params,
        )
        .ok()
    }
}

/// The selection kernels of [`SOURCE`] loaded into the current context (NVRTC's PTX kept in
/// the kernel cache); `None` (a line on stderr) where NVRTC or the module load fails.
fn compile() -> Option<[driver_sys::CUfunction; 6]> {
    load_functions(
        SOURCE,
        "column_select.ptx",
        KERNELS,
        "the pruning selection kernel",
        "the selection runs as Burn's operations",
    )
}
