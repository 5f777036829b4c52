//! The one place that names concrete Burn backends: `NdArray<f32>` on CPU (`cpu`,
//! `cpu-ndarray`), `Flex` (`cpu-flex`, burn's gemm-based CPU backend, measured ~10 % faster and
//! ~12 % lighter on SmolLM2 eval, not yet the default: run records made with `cpu` must rerun bit
//! for bit), `Cuda` behind the `cuda` feature, computing in f32 (`cuda`, `cuda:N`) or bf16
//! (`cuda-bf16`, `cuda:N-bf16`). Everything below the CLI is generic over `B: Backend`.
//!
//! f16 is not offered: on an H100, Burn's `Cuda<f16>` gave a dense perplexity of 49735 where f32
//! gave 1103494 and bf16 1096656 (a SmolLM2-shaped random model, 64 windows of 512;
//! `results/gpu-h100-2026-11-23/`), a wrong result rather than a rounded one.

use burn::prelude::Backend;
#[cfg(feature = "cuda")]
use wanda::memory::device::Precision;
use wanda::memory::device::{DeviceChoice, DeviceKind, DeviceSpec};

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

/// Runs `work` on the backend of `device` (resolved once here: `auto` is CUDA:0 in a build with
/// CUDA support, else the CPU).
pub fn dispatch<W: OnBackend>(device: DeviceSpec, work: W) -> anyhow::Result<W::Output> {
    let choice = device.resolve();
    match (choice.kind, choice.precision) {
        (DeviceKind::CpuFlex, _) => {
            work.run::<burn::backend::Flex>(burn::backend::flex::FlexDevice, choice)
        }
        (DeviceKind::Cpu, _) => work.run::<burn::backend::NdArray<f32>>(
            burn::backend::ndarray::NdArrayDevice::Cpu,
            choice,
        ),
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
        #[cfg(not(feature = "cuda"))]
        (DeviceKind::Cuda, _) => anyhow::bail!(
            "this build has no CUDA support; rebuild with `cargo build --release --features cuda` or use `--device cpu`"
        ),
    }
}
