//! The CUDA backend's matrix products by cuBLAS (through `cudarc`, which burn-cuda already links),
//! where Burn 0.21's own tensor-core matmul ran at a sixth of cuBLAS in fp16 on a 1B layer's
//! shapes (results/gpu-2026-11-26-flash/). PyTorch's settings: f32 products in f32 (no TF32),
//! fp16 and bf16 products accumulated in f32.
//!
//! cuBLAS runs on the CUDA primary context that CubeCL also uses, on the legacy default stream:
//! CubeCL's streams are non-blocking, so a product first waits for CubeCL's queued work (its
//! inputs) and the host waits for the product before CubeCL's next kernels read its output
//! (cubecl-cuda 0.10 does not expose its stream to queue cuBLAS behind its kernels instead).
//! Products of one input (q, k and v; gate and up) run between one pair of waits ([`linears`]).
//! Where `libcublas` cannot be loaded, where [`CUBLAS_VAR`] is `off`, or where a tensor is of
//! another type, the functions return `None` and Burn's matmul runs.

use std::any::{Any, TypeId};
use std::cell::OnceCell;
use std::ffi::c_void;

use burn::prelude::*;
use burn::tensor::{DType, TensorPrimitive};
use burn_cubecl::cubecl::cuda::CudaRuntime;
use burn_cubecl::cubecl::future::block_on;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::result as driver;

/// The environment variable that, set to `off`, keeps Burn's own matmul on CUDA (to compare
/// the two, or to step around a cuBLAS that misbehaves).
pub const CUBLAS_VAR: &str = "WANDA_CUBLAS";

thread_local! {
    /// This thread's cuBLAS handle, made on first use; `None` where cuBLAS is absent or its
    /// set-up failed (Burn's matmul runs then).
    static HANDLE: OnceCell<Option<Handle>> = const { OnceCell::new() };
}

/// A cuBLAS handle on the primary context of the device it was made for.
struct Handle {
    blas: blas_sys::cublasHandle_t,
    device: usize,
}

/// `x · weight` for a linear layer.
///
/// # Shapes
/// - `x`: `[batch, seq, in]`, `weight`: `[in, out]` → `[batch, seq, out]`
pub fn linear<B: Backend>(x: &Tensor<B, 3>, weight: &Tensor<B, 2>) -> Option<Tensor<B, 3>> {
    // Every linear of every backend asks; the others are sent back before any reshape.
    if !is_cuda::<B>() {
        return None;
    }
    let [batch, seq, width] = x.dims();
    let out = matmul(&x.clone().reshape([batch * seq, width]), weight)?;
    let outputs = out.dims()[1];
    Some(out.reshape([batch, seq, outputs]))
}

/// `x · weight` for each of `weights`: the products one after another between one wait for
/// CubeCL's queue and one for cuBLAS (q, k and v: two waits where one at a time takes six).
///
/// # Shapes
/// - `x`: `[batch, seq, in]`, each weight `[in, out_i]` → each `[batch, seq, out_i]`
pub fn linears<B: Backend>(
    x: &Tensor<B, 3>,
    weights: &[Tensor<B, 2>],
) -> Option<Vec<Tensor<B, 3>>> {
    if !is_cuda::<B>() {
        return None;
    }
    let [batch, seq, width] = x.dims();
    let x = cube(&x.clone().reshape([batch * seq, width]))?;
    // One copy for all the products where `x` is a view cuBLAS cannot read.
    let x = match column_major(&x) {
        Some(_) => x,
        None => into_contiguous(x),
    };
    let pairs = weights
        .iter()
        .map(|w| Some((x.clone(), cube(w)?)))
        .collect::<Option<Vec<_>>>()?;
    gemms(pairs)?
        .into_iter()
        .map(|out| {
            let outputs = out.meta.shape()[1];
            Some(tensor::<B, 2>(out)?.reshape([batch, seq, outputs]))
        })
        .collect()
}

/// Whether `B` is the CUDA backend (its float tensors are CubeCL's on CUDA).
pub fn is_cuda<B: Backend>() -> bool {
    TypeId::of::<B::FloatTensorPrimitive>() == TypeId::of::<CubeTensor<CudaRuntime>>()
}

/// `a · b`.
///
/// # Shapes
/// - `a`: `[m, k]`, `b`: `[k, n]` → `[m, n]`
pub fn matmul<B: Backend>(a: &Tensor<B, 2>, b: &Tensor<B, 2>) -> Option<Tensor<B, 2>> {
    let out = gemms(vec![(cube(a)?, cube(b)?)])?.pop()?;
    tensor(out)
}

/// The tensor of `B` (the CUDA backend) over CubeCL's `t`.
pub(super) fn tensor<B: Backend, const D: usize>(
    t: CubeTensor<CudaRuntime>,
) -> Option<Tensor<B, D>> {
    let t: Box<dyn Any> = Box::new(t);
    let t = t.downcast::<B::FloatTensorPrimitive>().ok()?;
    Some(Tensor::from_primitive(TensorPrimitive::Float(*t)))
}

/// `xᵀ · x`.
///
/// # Shapes
/// - `x`: `[rows, width]` → `[width, width]`
pub fn gram<B: Backend>(x: &Tensor<B, 2>) -> Option<Tensor<B, 2>> {
    matmul(&x.clone().transpose(), x)
}

/// The CubeCL tensor under `t` when `B` is the CUDA backend.
pub(super) fn cube<B: Backend, const D: usize>(
    t: &Tensor<B, D>,
) -> Option<CubeTensor<CudaRuntime>> {
    let primitive: Box<dyn Any> = Box::new(t.clone().into_primitive().tensor());
    primitive
        .downcast::<CubeTensor<CudaRuntime>>()
        .ok()
        .map(|t| *t)
}

/// How cuBLAS (column-major) reads a row-major `[rows, cols]` operand: transposed or not, and
/// its leading dimension. `None` when neither of its strides is 1 (a copy makes it contiguous).
fn column_major(t: &CubeTensor<CudaRuntime>) -> Option<(blas_sys::cublasOperation_t, usize)> {
    let strides = t.meta.strides();
    let shape = t.meta.shape();
    let (rows, cols) = (shape[0], shape[1]);
    if strides[1] == 1 && strides[0] >= cols.max(1) {
        // Stored row-major: cuBLAS sees its transpose, `[cols, rows]`, leading dimension
        // `strides[0]`.
        Some((blas_sys::cublasOperation_t::CUBLAS_OP_N, strides[0]))
    } else if strides[0] == 1 && strides[1] >= rows.max(1) {
        // Stored column-major (a transposed view): cuBLAS sees the matrix itself.
        Some((blas_sys::cublasOperation_t::CUBLAS_OP_T, strides[1]))
    } else {
        None
    }
}

/// Row-major `a · b` of each pair by `cublasGemmEx`, in the operands' type, accumulated in f32:
/// one wait for CubeCL's queued kernels (those that write the operands) before the products and
/// one for the products before CubeCL's next kernels read them. `None` (and Burn's matmul) where
/// a pair does not fit: another type, mismatched shapes, more than `i32` can count.
fn gemms(
    pairs: Vec<(CubeTensor<CudaRuntime>, CubeTensor<CudaRuntime>)>,
) -> Option<Vec<CubeTensor<CudaRuntime>>> {
    let layout = |t: CubeTensor<CudaRuntime>| match column_major(&t) {
        Some(layout) => Some((t, layout)),
        None => {
            let t = into_contiguous(t);
            column_major(&t).map(|layout| (t, layout))
        }
    };
    let limit = i32::MAX as usize;
    let device = pairs.first()?.0.device.clone();
    let client = pairs.first()?.0.client.clone();
    let mut products = Vec::with_capacity(pairs.len());
    for (a, b) in pairs {
        let kind = data_type(a.dtype)?;
        if b.dtype != a.dtype || a.device != device || b.device != device {
            return None;
        }
        let (m, k, n) = (a.meta.shape()[0], a.meta.shape()[1], b.meta.shape()[1]);
        if b.meta.shape()[0] != k || m == 0 || n == 0 || k == 0 {
            return None;
        }
        if m > limit || n > limit || k > limit {
            return None;
        }
        let (a, (op_a, ld_a)) = layout(a)?;
        let (b, (op_b, ld_b)) = layout(b)?;
        if ld_a > limit || ld_b > limit {
            return None;
        }
        let out = CubeTensor::new_contiguous(
            client.clone(),
            device.clone(),
            burn::tensor::Shape::new([m, n]),
            client.empty(m * n * a.dtype.size()),
            a.dtype,
        );
        let a_res = client.get_resource(a.handle.clone()).ok()?;
        let b_res = client.get_resource(b.handle.clone()).ok()?;
        let out_res = client.get_resource(out.handle.clone()).ok()?;
        products.push((
            out,
            [a_res, b_res, out_res],
            kind,
            [m, k, n],
            [op_a, op_b],
            [ld_a, ld_b],
        ));
    }
    // CubeCL's queued kernels (those that write the operands) finish before cuBLAS reads them.
    block_on(client.sync()).ok()?;
    let done = with_handle(device.index, |blas| {
        let (one, zero) = (1.0f32, 0.0f32);
        let mut launched = Some(());
        for (_, [a_res, b_res, out_res], kind, [m, k, n], [op_a, op_b], [ld_a, ld_b]) in &products {
            // Row-major C[m, n] = A·B is column-major Cᵀ[n, m] = Bᵀ·Aᵀ: cuBLAS's first operand
            // is b.
            // SAFETY: the three pointers are live device allocations of CubeCL's pool (the
            // managed resources in `products` hold them) of at least the sizes these dimensions
            // and leading dimensions address; the stream synchronisation below, which runs
            // whether or not every product was launched, finishes before they are dropped.
            #[allow(unsafe_code)]
            let status = unsafe {
                blas::gemm_ex(
                    blas,
                    *op_b,
                    *op_a,
                    *n as i32,
                    *m as i32,
                    *k as i32,
                    (&one as *const f32).cast::<c_void>(),
                    b_res.resource().ptr as *const c_void,
                    *kind,
                    *ld_b as i32,
                    a_res.resource().ptr as *const c_void,
                    *kind,
                    *ld_a as i32,
                    (&zero as *const f32).cast::<c_void>(),
                    out_res.resource().ptr as *mut c_void,
                    *kind,
                    *n as i32,
                    blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            };
            if status.is_err() {
                // The products launched before this one still write their outputs: the wait
                // below comes first, then Burn's matmul computes them all again.
                launched = None;
                break;
            }
        }
        launched.and(synchronize())
    });
    done.map(|()| products.into_iter().map(|(out, ..)| out).collect())
}

/// Runs `work` with this thread's cuBLAS handle for device `device`, made (and its context
/// made current on this thread) on first use; `None` where cuBLAS is absent, turned off or the
/// handle is another device's.
pub(super) fn with_handle<R>(
    device: usize,
    work: impl FnOnce(blas_sys::cublasHandle_t) -> Option<R>,
) -> Option<R> {
    HANDLE.with(|cell| {
        let handle = cell.get_or_init(|| Handle::new(device)).as_ref()?;
        if handle.device != device {
            return None;
        }
        work(handle.blas)
    })
}

/// Waits for the legacy default stream, where cuBLAS's products (and the kernels queued with
/// them) run; `None` where a launched operation failed.
pub(super) fn synchronize() -> Option<()> {
    // SAFETY: a stream synchronisation on the current context, which `with_handle` set.
    #[allow(unsafe_code)]
    unsafe {
        driver::stream::synchronize(driver::stream::null()).ok()
    }
}

/// cuBLAS's name for the float type `dtype`; `None` for other types.
pub(super) fn data_type(dtype: DType) -> Option<blas_sys::cudaDataType> {
    match dtype {
        DType::F32 => Some(blas_sys::cudaDataType::CUDA_R_32F),
        DType::F16 => Some(blas_sys::cudaDataType::CUDA_R_16F),
        DType::BF16 => Some(blas_sys::cudaDataType::CUDA_R_16BF),
        _ => None,
    }
}

impl Handle {
    /// A handle on device `device`'s primary context, made current on this thread; `None` where
    /// the cuBLAS library cannot be loaded.
    fn new(device: usize) -> Option<Self> {
        // SAFETY: `is_culib_present` only tries to open the library; the context calls take a
        // device ordinal CubeCL already opened, and the handle is made after its context is
        // current, as cuBLAS requires.
        #[allow(unsafe_code)]
        unsafe {
            if std::env::var(CUBLAS_VAR).is_ok_and(|v| v == "off") || !blas_sys::is_culib_present()
            {
                return None;
            }
            let ordinal = driver::device::get(i32::try_from(device).ok()?).ok()?;
            let context = driver::primary_ctx::retain(ordinal).ok()?;
            driver::ctx::set_current(context).ok()?;
            let blas = blas::create_handle().ok()?;
            Some(Self { blas, device })
        }
    }
}
