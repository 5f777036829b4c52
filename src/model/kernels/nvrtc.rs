//! Kernels of our own in CUDA C (the `.cu` files beside this one), compiled by NVRTC once per
//! build and kept as PTX in the kernel cache (`<cache>/<build>/ptx/`), so a run after the
//! first only loads them.

use std::ffi::CString;

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
