//! The one place that names concrete Burn backends: `NdArray<f32>` on CPU (`cpu`,
//! `cpu-ndarray`), `Flex` (`cpu-flex`, burn's gemm-based CPU backend, measured ~10 % faster and
//! ~12 % lighter on SmolLM2 eval, not yet the default: run records made with `cpu` must rerun bit
//! for bit), `Cuda` behind the `cuda` feature. Everything below the CLI is generic over
//! `B: Backend`.

use std::str::FromStr;

use burn::prelude::Backend;

/// The `--device` argument: `cpu`, `cuda` / `cuda:N`, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceArg {
    /// The default pure-Rust CPU backend (burn-ndarray).
    Cpu,
    /// burn-ndarray, the previous CPU backend, kept for A/B comparisons.
    CpuNdarray,
    /// burn-flex (gemm-based CPU backend).
    CpuFlex,
    /// A CUDA GPU by index.
    Cuda(usize),
    /// CUDA:0 when built with CUDA support, else CPU.
    Auto,
}

impl FromStr for DeviceArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cpu" => Ok(DeviceArg::Cpu),
            "cpu-ndarray" => Ok(DeviceArg::CpuNdarray),
            "cpu-flex" => Ok(DeviceArg::CpuFlex),
            "auto" => Ok(DeviceArg::Auto),
            "cuda" => Ok(DeviceArg::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceArg::Cuda)
                .ok_or_else(|| {
                    format!("`{s}` is not a device; use `cpu`, `cpu-flex`, `cpu-ndarray`, `cuda`, `cuda:N` or `auto`")
                }),
        }
    }
}

/// Work that runs on whichever backend the device argument selects.
pub trait OnBackend {
    /// What the work returns.
    type Output;
    /// Runs the work on backend `B`; `label` describes the device for reports.
    fn run<B: Backend>(self, device: B::Device, label: String) -> anyhow::Result<Self::Output>;
}

/// Runs `work` on the backend chosen by `device`.
pub fn dispatch<W: OnBackend>(device: DeviceArg, work: W) -> anyhow::Result<W::Output> {
    let resolved = match device {
        DeviceArg::Auto if cfg!(feature = "cuda") => DeviceArg::Cuda(0),
        DeviceArg::Auto => DeviceArg::Cpu,
        other => other,
    };
    match resolved {
        DeviceArg::CpuFlex => work.run::<burn::backend::Flex>(
            burn::backend::flex::FlexDevice,
            "cpu (flex f32)".to_string(),
        ),
        DeviceArg::Cpu | DeviceArg::Auto | DeviceArg::CpuNdarray => work.run::<burn::backend::NdArray<f32>>(
            burn::backend::ndarray::NdArrayDevice::Cpu,
            "cpu (ndarray f32)".to_string(),
        ),
        #[cfg(feature = "cuda")]
        DeviceArg::Cuda(index) => work.run::<burn::backend::Cuda>(
            burn::backend::cuda::CudaDevice::new(index),
            format!("cuda:{index}"),
        ),
        #[cfg(not(feature = "cuda"))]
        DeviceArg::Cuda(_) => anyhow::bail!(
            "this build has no CUDA support; rebuild with `cargo build --release --features cuda` or use `--device cpu`"
        ),
    }
}
