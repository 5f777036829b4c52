//! The one place that names concrete Burn backends: `NdArray<f32>` on CPU (`cpu`,
//! `cpu-ndarray`), `Flex` (`cpu-flex`, burn's gemm-based CPU backend, measured ~10 % faster and
//! ~12 % lighter on SmolLM2 eval, not yet the default: run records made with `cpu` must rerun bit
//! for bit), `Cuda` behind the `cuda` feature, computing in f32 (`cuda`, `cuda:N`) or bf16
//! (`cuda-bf16`, `cuda:N-bf16`). Everything below the CLI is generic over `B: Backend`.
//!
//! f16 is not offered: on an H100, Burn's `Cuda<f16>` gave a dense perplexity of 49735 where f32
//! gave 1103494 and bf16 1096656 (a SmolLM2-shaped random model, 64 windows of 512;
//! `results/gpu-h100-2026-11-23/`), a wrong result rather than a rounded one.

use std::str::FromStr;

use burn::prelude::Backend;

/// The float type a CUDA device computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CudaFloat {
    /// f32 (the default).
    #[default]
    F32,
    /// bfloat16.
    Bf16,
}

impl CudaFloat {
    /// The suffix of the device name (`-bf16`; none for f32).
    pub fn suffix(self) -> &'static str {
        match self {
            CudaFloat::F32 => "",
            CudaFloat::Bf16 => "-bf16",
        }
    }
}

/// The `--device` argument: `cpu`, `cuda` / `cuda:N` (optionally `-bf16`), or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceArg {
    /// The default pure-Rust CPU backend (burn-ndarray).
    Cpu,
    /// burn-ndarray, the previous CPU backend, kept for A/B comparisons.
    CpuNdarray,
    /// burn-flex (gemm-based CPU backend).
    CpuFlex,
    /// A CUDA GPU by index, and the float type it computes in.
    Cuda(usize, CudaFloat),
    /// CUDA:0 when built with CUDA support, else CPU.
    Auto,
}

impl FromStr for DeviceArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let not_a_device = || {
            format!("`{s}` is not a device; use `cpu`, `cpu-flex`, `cpu-ndarray`, `cuda`, `cuda:N` (either with `-bf16` to compute in bfloat16) or `auto`")
        };
        match s {
            "cpu" => return Ok(DeviceArg::Cpu),
            "cpu-ndarray" => return Ok(DeviceArg::CpuNdarray),
            "cpu-flex" => return Ok(DeviceArg::CpuFlex),
            "auto" => return Ok(DeviceArg::Auto),
            _ => {}
        }
        let (gpu, float) = match s.rsplit_once('-') {
            Some((gpu, "bf16")) => (gpu, CudaFloat::Bf16),
            _ => (s, CudaFloat::F32),
        };
        let index = match gpu {
            "cuda" => 0,
            _ => gpu
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .ok_or_else(not_a_device)?,
        };
        Ok(DeviceArg::Cuda(index, float))
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
        DeviceArg::Auto if cfg!(feature = "cuda") => DeviceArg::Cuda(0, CudaFloat::F32),
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
        DeviceArg::Cuda(index, CudaFloat::F32) => work.run::<burn::backend::Cuda>(
            burn::backend::cuda::CudaDevice::new(index),
            format!("cuda:{index}"),
        ),
        #[cfg(feature = "cuda")]
        DeviceArg::Cuda(index, CudaFloat::Bf16) => work.run::<burn::backend::Cuda<half::bf16>>(
            burn::backend::cuda::CudaDevice::new(index),
            format!("cuda:{index} (bf16)"),
        ),
        #[cfg(not(feature = "cuda"))]
        DeviceArg::Cuda(..) => anyhow::bail!(
            "this build has no CUDA support; rebuild with `cargo build --release --features cuda` or use `--device cpu`"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_devices_name_their_index_and_float_type() {
        let parse = |s: &str| s.parse::<DeviceArg>();
        assert_eq!(parse("cuda"), Ok(DeviceArg::Cuda(0, CudaFloat::F32)));
        assert_eq!(parse("cuda:2"), Ok(DeviceArg::Cuda(2, CudaFloat::F32)));
        assert_eq!(parse("cuda-bf16"), Ok(DeviceArg::Cuda(0, CudaFloat::Bf16)));
        assert_eq!(
            parse("cuda:1-bf16"),
            Ok(DeviceArg::Cuda(1, CudaFloat::Bf16))
        );
        assert_eq!(parse("cpu-flex"), Ok(DeviceArg::CpuFlex));
        for bad in ["cuda:x", "cuda-f16", "cpu-bf16", "gpu"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(&format!("`{bad}` is not a device")), "{err}");
        }
    }
}
