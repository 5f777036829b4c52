//! Pruning's selection on CUDA by kernels of our own (`column_select.cu`, compiled by NVRTC
//! once per build and kept in the kernel cache), which read a weight in its own type and write
//! its mask: per column, the `k` lowest scores `|w|·norm` found exactly by a radix select on
//! the scores' bits (Wanda's per-output rule), or the `n` lowest of every `m` rows (N:M), ties
//! by the lower row, in one launch; every score at or below the matrix's `k`-th smallest
//! (magnitude's rule) in a chain of nine. Burn's ops bisect with some 290 small operations a
//! weight (`prune::device_select`, 14–29 ms a weight on an H200), and have no N:M rule. The
//! launches queue on the stream cuBLAS uses, between one wait for CubeCL's queue and one for
//! that stream, as the linears' products do.

use std::any::Any;
use std::cell::OnceCell;

use burn::prelude::*;
use burn::tensor::DType;
use burn_cubecl::cubecl::cuda::CudaRuntime;
use burn_cubecl::cubecl::future::block_on;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cudarc::driver::sys as driver_sys;

use super::cublas::{cube, is_cuda, synchronize, with_handle};
use super::nvrtc::{launch, load_functions, Arg};
use super::Lowest;

/// The CUDA C source of the selection kernels ([`KERNELS`]).
const SOURCE: &str = include_str!("column_select.cu");

/// The kernels of [`SOURCE`]: per column, N:M, the matrix's histogram and its mask, each for
/// f32, fp16 and bf16 weights (at [`PER_COLUMN`], [`PER_GROUP`], [`HISTOGRAM`] and [`MASK`]
/// plus 0, 1 or 2), then the matrix's digit pick.
const KERNELS: [&str; 13] = [
    "lowest_per_column_f32",
    "lowest_per_column_f16",
    "lowest_per_column_bf16",
    "lowest_per_group_f32",
    "lowest_per_group_f16",
    "lowest_per_group_bf16",
    "matrix_histogram_f32",
    "matrix_histogram_f16",
    "matrix_histogram_bf16",
    "matrix_mask_f32",
    "matrix_mask_f16",
    "matrix_mask_bf16",
    "matrix_pick",
];

/// Where each kernel's f32 version is in [`KERNELS`].
const PER_COLUMN: usize = 0;
/// See [`PER_COLUMN`].
const PER_GROUP: usize = 3;
/// See [`PER_COLUMN`].
const HISTOGRAM: usize = 6;
/// See [`PER_COLUMN`].
const MASK: usize = 9;
/// Where `matrix_pick` is in [`KERNELS`].
const PICK: usize = 12;

/// Warps per block of the per-column kernel, each over a range of rows: `SELECT_WARPS` of
/// [`SOURCE`] (a block of another shape only sets the kernel's failure flag).
const WARPS: u32 = 8;

/// Columns per block of the per-column kernel: a warp's lanes.
const COLUMNS: usize = 32;

/// Threads per block of the N:M kernel (a group of one column each) and of the matrix's
/// histogram and mask (`MATRIX_THREADS` of [`SOURCE`]).
const THREADS: u32 = 256;

/// The most blocks of the matrix's histogram and mask, whose threads stride over the weights.
const MATRIX_BLOCKS: usize = 2048;

/// The largest group the N:M kernel takes: it compares each score with the group's others, `m²`
/// reads per group (larger groups are selected on the host).
const MAX_GROUP: usize = 64;

/// Bytes of the scratch buffer each selection allocates: the failure flag (`int`), the
/// matrix's state (digits found, rank wanted) and its 256 counts (`unsigned`s).
const SCRATCH_BYTES: usize = 4 + 2 * 4 + 256 * 4;

thread_local! {
    /// This thread's selection kernels, compiled on first use in the context the cuBLAS handle
    /// made current; `None` where NVRTC or the module load failed.
    static SELECT: OnceCell<Option<[driver_sys::CUfunction; 13]>> = const { OnceCell::new() };
}

/// The weights of `weight` with the lowest scores `|w|·norms[row]` in f32 that `which` says,
/// as a mask (`true`: zero it) when `B` is the CUDA backend; `None` where it is not, where
/// NVRTC, cuBLAS's context or a launch fails, where a score is not finite, or the shapes do not
/// fit the kernels (`int`s and `unsigned` counts, an N:M group that does not divide the rows or
/// exceeds [`MAX_GROUP`]).
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
    let len = rows.checked_mul(cols)?;
    let fits = match which {
        Lowest::PerColumn(k) => k <= rows,
        Lowest::PerGroup { n, m } => n <= m && m > 0 && m <= MAX_GROUP && rows % m == 0,
        Lowest::MatrixThreshold(k) => k >= 1 && k <= len && u32::try_from(len).is_ok(),
    };
    if !fits || norms.len() != rows || len == 0 {
        return None;
    }
    // Rows may lie a pitch apart (CUDA's allocator pads them); a view of another layout is
    // copied first.
    let w = cube(weight)?;
    let w = match rows_apart(&w) {
        Some(_) => w,
        None => into_contiguous(w),
    };
    let weight_stride = rows_apart(&w)?;
    let kind = match w.dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        _ => return None,
    };
    let mask = bool_cube(Tensor::<B, 2, Bool>::empty([rows, cols], &weight.device()))?;
    // One byte per weight, 0 or 1, as the kernels write it.
    let mask_stride = rows_apart(&mask)?;
    if mask.dtype.size() != 1 || mask.device != w.device {
        return None;
    }
    let client = w.client.clone();
    let norm_bytes: Vec<u8> = norms.iter().flat_map(|n| n.to_le_bytes()).collect();
    let norms = client.create_from_slice(&norm_bytes);
    let mut scratch = vec![0u8; SCRATCH_BYTES];
    if let Lowest::MatrixThreshold(k) = which {
        // The rank the matrix's pick first wants.
        scratch[8..12].copy_from_slice(&u32::try_from(k).ok()?.to_le_bytes());
    }
    let scratch = client.create_from_slice(&scratch);
    // The resources hold their allocations until this function returns, after the wait for
    // the stream.
    let resource = |handle| client.get_resource(handle).ok();
    let (w_res, norms_res) = (resource(w.handle.clone())?, resource(norms)?);
    let (mask_res, scratch_res) = (resource(mask.handle.clone())?, resource(scratch.clone())?);
    let [weight, norms, mask_at, failed] =
        [&w_res, &norms_res, &mask_res, &scratch_res].map(|r| r.resource().ptr);
    // CubeCL's queued kernels (those that wrote the weight, and the uploads) finish first.
    block_on(client.sync()).ok()?;
    with_handle(w.device.index, |_| {
        let functions = SELECT.with(|cell| *cell.get_or_init(compile))?;
        let launched = queue(
            &functions,
            kind,
            which,
            [weight, norms, mask_at, failed],
            [rows, cols, weight_stride, mask_stride],
        );
        // After a failed launch too, the stream finishes before the resources go.
        let finished = synchronize();
        launched.and(finished)
    })?;
    let scratch = client.read_one(scratch).ok()?;
    if scratch.get(..4)?.iter().any(|&byte| byte != 0) {
        return None;
    }
    let mask: Box<dyn Any> = Box::new(mask);
    let mask = mask.downcast::<B::BoolTensorPrimitive>().ok()?;
    Some(Tensor::from_primitive(*mask))
}

/// Queues the launches of rule `which` for weights of type `kind` (0 f32, 1 fp16, 2 bf16) at
/// the device addresses of the weight, the norms, the mask and the scratch buffer (the failure
/// flag, then the matrix's state and counts), for `[rows, cols]` weights and the two tensors'
/// row strides; `None` where a launch fails or an integer exceeds the kernels' own.
fn queue(
    functions: &[driver_sys::CUfunction; 13],
    kind: usize,
    which: Lowest,
    [weight, norms, mask, failed]: [u64; 4],
    [rows, cols, weight_stride, mask_stride]: [usize; 4],
) -> Option<()> {
    let (state, counts) = (failed + 4, failed + 12);
    let int = |v: usize| Some(Arg::Int(i32::try_from(v).ok()?));
    let (rows_arg, cols_arg) = (int(rows)?, int(cols)?);
    let (ws, ms) = (int(weight_stride)?, int(mask_stride)?);
    let (ptr, long) = (Arg::Pointer, Arg::Long);
    let len = rows * cols;
    // The per-column and N:M kernels take the same parameters around their rule's own.
    let around = |rule: &[Arg]| -> Vec<Arg> {
        [
            ptr(weight),
            ws,
            ptr(norms),
            ptr(mask),
            ms,
            rows_arg,
            cols_arg,
        ]
        .into_iter()
        .chain(rule.iter().copied())
        .chain([ptr(failed)])
        .collect()
    };
    match which {
        Lowest::PerColumn(k) => launch(
            functions[PER_COLUMN + kind],
            cols.div_ceil(COLUMNS),
            (COLUMNS as u32, WARPS, 1),
            &mut around(&[int(k)?]),
        ),
        Lowest::PerGroup { n, m } => launch(
            functions[PER_GROUP + kind],
            (rows / m * cols).div_ceil(THREADS as usize),
            (THREADS, 1, 1),
            &mut around(&[int(n)?, int(m)?]),
        ),
        Lowest::MatrixThreshold(_) => {
            let blocks = len.div_ceil(THREADS as usize).min(MATRIX_BLOCKS);
            let len = long(i64::try_from(len).ok()?);
            let per_pass = [24, 16, 8, 0].into_iter().try_for_each(|shift| {
                launch(
                    functions[HISTOGRAM + kind],
                    blocks,
                    (THREADS, 1, 1),
                    &mut [
                        ptr(weight),
                        ws,
                        ptr(norms),
                        len,
                        cols_arg,
                        Arg::Int(shift),
                        ptr(state),
                        ptr(counts),
                        ptr(failed),
                    ],
                )?;
                launch(
                    functions[PICK],
                    1,
                    (1, 1, 1),
                    &mut [ptr(state), ptr(counts)],
                )
            });
            per_pass.and_then(|()| {
                launch(
                    functions[MASK + kind],
                    blocks,
                    (THREADS, 1, 1),
                    &mut [
                        ptr(weight),
                        ws,
                        ptr(norms),
                        len,
                        cols_arg,
                        ptr(state),
                        ptr(mask),
                        ms,
                    ],
                )
            })
        }
    }
}

/// How many elements apart the rows of the 2-D tensor `t` lie, where its columns are adjacent
/// and its buffer holds every row (a contiguous tensor, or one whose rows CUDA's allocator
/// padded to its pitch); `None` for another layout.
fn rows_apart(t: &CubeTensor<CudaRuntime>) -> Option<usize> {
    let (shape, strides) = (t.meta.shape(), t.meta.strides());
    if shape.len() != 2 || strides.len() != 2 {
        return None;
    }
    let (rows, cols, step) = (shape[0], shape[1], strides[1]);
    // A single row's stride says nothing; it is read as if rows were `cols` apart.
    let stride = if rows <= 1 { cols } else { strides[0] };
    let needed = (rows.checked_sub(1)?.checked_mul(stride)?).checked_add(cols)?;
    let fits = needed.checked_mul(t.dtype.size())? as u64 <= t.handle.size_in_used();
    (step == 1 && stride >= cols && fits).then_some(stride)
}

/// The CubeCL tensor under the bool tensor `t` when `B` is the CUDA backend.
fn bool_cube<B: Backend>(t: Tensor<B, 2, Bool>) -> Option<CubeTensor<CudaRuntime>> {
    let primitive: Box<dyn Any> = Box::new(t.into_primitive());
    primitive
        .downcast::<CubeTensor<CudaRuntime>>()
        .ok()
        .map(|t| *t)
}

/// The selection kernels of [`SOURCE`] loaded into the current context (NVRTC's PTX kept in
/// the kernel cache); `None` (a line on stderr) where NVRTC or the module load fails.
fn compile() -> Option<[driver_sys::CUfunction; 13]> {
    load_functions(
        SOURCE,
        "column_select.ptx",
        KERNELS,
        "the pruning selection kernel",
        "pruning selects by Burn's operations on the device, or on the host",
    )
}
