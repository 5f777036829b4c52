//! The one place that names concrete Burn backends: `NdArray<f32>` on CPU (`cpu`,
//! `cpu-ndarray`), `Flex` (`cpu-flex`, burn's gemm-based CPU backend, measured ~10 % faster and
//! ~12 % lighter on SmolLM2 eval, not yet the default: run records made with `cpu` must rerun bit
//! for bit; `cpu-flex-bf16`/`cpu-flex-f16` make its tensors 16-bit by default), `Cuda` behind
//! the `cuda` feature, computing in f32 (`cuda`, `cuda:N`), bf16 (`cuda-bf16`) or fp16
//! (`cuda-f16`). Everything below the CLI is generic over `B: Backend`; the decoder takes its
//! reductions in f32 whatever the tensors' type.

use burn::backend::flex::FlexDevice;
use burn::backend::Flex;
use burn::prelude::Backend;
use burn::tensor::{FloatDType, IntDType};
use wanda::memory::device::Precision;
use wanda::memory::device::{cuda_devices, DeviceChoice, DeviceKind, DeviceSpec};

/// Work that runs on whichever backend the device selects.
pub trait OnBackend {
    /// What the work returns.
    type Output;
    /// Runs the work on backend `B`, on `device`, which is `choice`.
    fn run<B: Backend>(
        self,
        device: B::Device,
        choice: DeviceChoice,
    ) -> anyhow::Result<Self::Output>;
}

/// Runs `work` on the backend of `device` (resolved once here: `auto` is CUDA:0 where a build
/// with CUDA support finds a device, else the CPU). A CUDA device that is not there is an
/// error that says why, before any work.
pub fn dispatch<W: OnBackend>(device: DeviceSpec, work: W) -> anyhow::Result<W::Output> {
    let choice = device.resolve();
    if choice.is_cuda() {
        let count = cuda_devices().map_err(|why| {
            anyhow::anyhow!(
                "device {choice}: {why}; use `--device cpu` (`device: cpu` in a pipeline)"
            )
        })?;
        anyhow::ensure!(
            (choice.index as usize) < count,
            "device {choice}: the CUDA driver sees {count} device(s), cuda:0 to cuda:{}; pick one of them or `cpu`",
            count.saturating_sub(1)
        );
        wanda::model::kernels::flash_tiling().map_err(|e| anyhow::anyhow!(e))?;
        wanda::model::kernels::cuda_attention().map_err(|e| anyhow::anyhow!(e))?;
        #[cfg(feature = "cuda")]
        use_kernel_cache(choice.index as usize);
    }
    match (choice.kind, choice.precision) {
        (DeviceKind::CpuFlex, precision) => {
            let float = match precision {
                Precision::F32 => None,
                Precision::Bf16 => Some(FloatDType::BF16),
                Precision::F16 => Some(FloatDType::F16),
            };
            // Before any tensor exists: the first operation fixes the device's defaults.
            if let Some(float) = float {
                burn::tensor::set_default_dtypes::<Flex>(&FlexDevice, float, IntDType::I32)
                    .map_err(|e| anyhow::anyhow!("cpu-flex in {precision:?}: {e}"))?;
            }
            work.run::<Flex>(FlexDevice, choice)
        }
        (DeviceKind::Cpu, _) => work
            .run::<burn::backend::NdArray<f32>>(burn::backend::ndarray::NdArrayDevice::Cpu, choice),
        #[cfg(feature = "cuda")]
        (DeviceKind::Cuda, Precision::F32) => work.run::<burn::backend::Cuda>(
            burn::backend::cuda::CudaDevice::new(choice.index as usize),
            choice,
        ),
        #[cfg(feature = "cuda")]
        (DeviceKind::Cuda, Precision::Bf16) => work.run::<burn::backend::Cuda<half::bf16>>(
            burn::backend::cuda::CudaDevice::new(choice.index as usize),
            choice,
        ),
        #[cfg(feature = "cuda")]
        (DeviceKind::Cuda, Precision::F16) => work.run::<burn::backend::Cuda<half::f16>>(
            burn::backend::cuda::CudaDevice::new(choice.index as usize),
            choice,
        ),
        #[cfg(not(feature = "cuda"))]
        (DeviceKind::Cuda, _) => unreachable!("cuda_devices refused CUDA in a build without it"),
    }
}

/// Points CubeCL's compilation cache at this build's folder for GPU `index`
/// ([`wanda::sys::cache_dir`]), so a run loads the kernels an earlier run compiled. Once
/// per process, before CubeCL reads its settings; a `cubecl.toml` (or `burn.toml`) that names
/// a compilation cache keeps it. A folder that cannot be used is a one-line warning and a run
/// that compiles as before.
#[cfg(feature = "cuda")]
fn use_kernel_cache(index: usize) {
    use burn_cubecl::cubecl::config::{cache::CacheConfig, CubeClRuntimeConfig, RuntimeConfig};
    use wanda::sys::cache_dir;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Some(root) = cache_dir::cache_root_from_env(cache_dir::KERNELS) else {
            return;
        };
        if CubeClRuntimeConfig::storage().lock().is_some() {
            return; // CubeCL has read its settings already; they cannot change now.
        }
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        if config.compilation.cache.is_none() {
            let folder = wanda::memory::device::cuda_architecture(index).and_then(|device| {
                cache_dir::prepare(&root, &cache_dir::build_id(), &device)
                    .map_err(|e| e.to_string())
            });
            match folder {
                Ok(folder) => config.compilation.cache = Some(CacheConfig::File(folder)),
                Err(why) => eprintln!(
                    "warning: kernel cache {}: {why}; compiling every kernel this run (set {} to \
                     a writable folder, or to `off`)",
                    root.display(),
                    cache_dir::KERNELS.var
                ),
            }
        }
        CubeClRuntimeConfig::set(config);
    });
}
