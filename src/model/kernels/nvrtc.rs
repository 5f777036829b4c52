//! Kernels of our own in CUDA C (the `.cu` files beside this one), compiled by NVRTC once per
//! build and kept as PTX in the kernel cache (`<cache>/<build>/ptx/`), so a run after the
//! first only loads them; and their launches.

use std::ffi::{c_void, CString};

use cudarc::driver::{result as driver, sys as driver_sys};

use crate::sys::atomic::write_atomic;
use crate::sys::cache_dir;

/// The functions `names` of the CUDA C `source`, loaded into the current context: from the PTX
/// file `ptx` that an earlier run of this build left in the kernel cache, else compiled by NVRTC
/// (about 0.1 s) and kept there. `None`, after a line on stderr that names `what` and says what
/// runs `instead`, where NVRTC or the module load fails.
pub(super) fn load_functions<const N: usize>(
    source: &str,
    ptx: &str,
    names: [&str; N],
    what: &str,
    instead: &str,
) -> Option<[driver_sys::CUfunction; N]> {
    let cached = cache_dir::cache_root_from_env(cache_dir::KERNELS)
        .and_then(|root| cache_dir::prepare(&root, &cache_dir::build_id(), "ptx").ok())
        .map(|folder| folder.join(ptx));
    // PTX another driver cannot load (or a damaged file) is compiled again.
    let kept = cached.as_ref().and_then(|path| std::fs::read(path).ok());
    if let Some(functions) = kept.and_then(|image| load(CString::new(image).ok()?, names)) {
        return Some(functions);
    }
    let warn = |why: String| {
        eprintln!("warning: {what} did not compile ({why}); {instead}");
    };
    // SAFETY: only tries to open the library (cudarc's loader panics where it is absent).
    #[allow(unsafe_code)]
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        warn("no NVRTC library found".to_string());
        return None;
    }
    let image = match cudarc::nvrtc::compile_ptx(source) {
        Ok(image) => CString::new(image.to_src()).ok()?,
        Err(e) => {
            warn(e.to_string());
            return None;
        }
    };
    if let Some(path) = &cached {
        // Best effort: a cache that cannot be written only means compiling again next run.
        let _ = write_atomic(path, image.as_bytes());
    }
    load(image, names)
}

/// The functions `names` of the PTX `image`, loaded into the current context.
fn load<const N: usize>(image: CString, names: [&str; N]) -> Option<[driver_sys::CUfunction; N]> {
    // SAFETY: `image` is NUL-terminated PTX text; the module stays loaded for the process (the
    // callers keep its functions in a thread-local for every later call).
    #[allow(unsafe_code)]
    unsafe {
        let module = driver::module::load_data(image.as_ptr().cast()).ok()?;
        let mut functions = [std::ptr::null_mut(); N];
        for (slot, name) in functions.iter_mut().zip(names) {
            *slot = driver::module::get_function(module, CString::new(name).ok()?).ok()?;
        }
        Some(functions)
    }
}

/// An argument of a kernel: a device address, an `int` or a `long long`.
#[derive(Debug, Clone, Copy)]
pub(super) enum Arg {
    /// A device address (any pointer parameter).
    Pointer(u64),
    /// An `int`.
    Int(i32),
    /// A `long long`.
    Long(i64),
}

/// Queues `function` over `blocks` blocks of `block` threads on the legacy default stream
/// (cuBLAS's), with `args` in the order of its parameters; `None` where the launch fails.
pub(super) fn launch(
    function: driver_sys::CUfunction,
    blocks: usize,
    block: (u32, u32, u32),
    args: &mut [Arg],
) -> Option<()> {
    let blocks = u32::try_from(blocks).ok()?;
    let mut params: Vec<*mut c_void> = args
        .iter_mut()
        .map(|arg| match arg {
            Arg::Pointer(v) => (v as *mut u64).cast::<c_void>(),
            Arg::Int(v) => (v as *mut i32).cast::<c_void>(),
            Arg::Long(v) => (v as *mut i64).cast::<c_void>(),
        })
        .collect();
    // SAFETY: `function` is a function of a module this thread loaded in the current context,
    // and the callers pass `args` in the order and types of its parameters (`Pointer` for a
    // pointer, `Int` for an `int`, `Long` for a `long long`), which live through the call (the
    // driver copies them at launch). The callers' addresses are of live allocations of
    // CubeCL's pool that they hold until after the stream's synchronisation, of at least the
    // sizes the kernel's integer arguments address.
    #[allow(unsafe_code)]
    unsafe {
        driver::launch_kernel(
            function,
            (blocks, 1, 1),
            block,
            0,
            driver::stream::null(),
            &mut params,
        )
        .ok()
    }
}
