//! Devices: which one a run computes on ([`DeviceSpec`] as written in a pipeline or on the
//! command line, [`DeviceChoice`] once resolved — made once and passed down), and the memory of
//! the machine's devices: NVIDIA GPUs through NVML (loaded at run time, so a machine without a
//! driver simply has none) and host RAM through `sysinfo`.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use nvml_wrapper::Nvml;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// What computes: a CPU backend or a CUDA GPU (the estimator's `--target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// The default pure-Rust CPU backend (burn-ndarray, with the fused kernels).
    Cpu,
    /// burn-flex, burn's gemm-based CPU backend, for A/B comparisons.
    CpuFlex,
    /// A CUDA GPU.
    Cuda,
}

/// The float type a device computes in. Reduced precisions store weights and activations in
/// 16 bits and take every reduction (norms, softmax, log-probabilities, calibration sums) in
/// f32, as PyTorch does; they run on CUDA and on burn-flex, not on the fused ndarray kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 (the default).
    #[default]
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half precision (fp16).
    F16,
}

impl Precision {
    /// Bytes of one weight or activation stored in this precision.
    pub fn bytes(self) -> u64 {
        match self {
            Precision::F32 => 4,
            Precision::Bf16 | Precision::F16 => 2,
        }
    }

    /// Whether this is f32 (run records leave it out then).
    pub fn is_f32(&self) -> bool {
        *self == Precision::F32
    }

    /// The suffix a device is written with (`-bf16`, `-f16`; empty for f32).
    fn suffix(self) -> &'static str {
        match self {
            Precision::F32 => "",
            Precision::Bf16 => "-bf16",
            Precision::F16 => "-f16",
        }
    }

    /// The name in run records' labels and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }

    /// The text with a precision suffix taken off, and the precision it named.
    fn split(text: &str) -> (&str, Precision) {
        for precision in [Precision::Bf16, Precision::F16] {
            if let Some(rest) = text.strip_suffix(precision.suffix()) {
                return (rest, precision);
            }
        }
        (text, Precision::F32)
    }
}

/// A resolved device: what computes, which one, and in what precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceChoice {
    /// CPU backend or GPU.
    pub kind: DeviceKind,
    /// The GPU's index as CUDA numbers them (0 on the CPU).
    pub index: u32,
    /// The float type of the work.
    pub precision: Precision,
}

impl DeviceChoice {
    /// The default CPU backend in f32.
    pub const CPU: DeviceChoice = DeviceChoice {
        kind: DeviceKind::Cpu,
        index: 0,
        precision: Precision::F32,
    };

    /// CUDA device `index`, computing in `precision`.
    pub fn cuda(index: u32, precision: Precision) -> Self {
        DeviceChoice {
            kind: DeviceKind::Cuda,
            index,
            precision,
        }
    }

    /// burn-flex on the CPU, computing in `precision`.
    pub fn flex(precision: Precision) -> Self {
        DeviceChoice {
            kind: DeviceKind::CpuFlex,
            index: 0,
            precision,
        }
    }

    /// Whether a GPU computes.
    pub fn is_cuda(self) -> bool {
        self.kind == DeviceKind::Cuda
    }

    /// The GPU's index, None on the CPU.
    pub fn gpu_index(self) -> Option<u32> {
        self.is_cuda().then_some(self.index)
    }

    /// The device as run records name it: `cpu (ndarray f32)`, `cpu (flex f32)`,
    /// `cpu (flex bf16)`, `cuda:N`, `cuda:N (bf16)` or `cuda:N (f16)`.
    pub fn label(self) -> String {
        match (self.kind, self.precision) {
            (DeviceKind::Cpu, _) => "cpu (ndarray f32)".into(),
            (DeviceKind::CpuFlex, p) => format!("cpu (flex {})", p.name()),
            (DeviceKind::Cuda, Precision::F32) => format!("cuda:{}", self.index),
            (DeviceKind::Cuda, p) => format!("cuda:{} ({})", self.index, p.name()),
        }
    }

    /// Reads a [`label`](Self::label) back (a run record's `effective.device`); None for text
    /// that is not one.
    pub fn from_label(label: &str) -> Option<Self> {
        if matches!(label, "cpu (ndarray f32)" | "cpu") {
            return Some(DeviceChoice::CPU);
        }
        let precisions = [Precision::F32, Precision::Bf16, Precision::F16];
        if let Some(name) = label
            .strip_prefix("cpu (flex ")
            .and_then(|l| l.strip_suffix(')'))
        {
            let precision = precisions.into_iter().find(|p| p.name() == name)?;
            return Some(DeviceChoice::flex(precision));
        }
        let (gpu, precision) = precisions[1..]
            .iter()
            .find_map(|p| Some((label.strip_suffix(&format!(" ({})", p.name()))?, *p)))
            .unwrap_or((label, Precision::F32));
        let index = gpu.strip_prefix("cuda:")?.parse().ok()?;
        Some(DeviceChoice::cuda(index, precision))
    }

    /// The GPU's whole memory; None on the CPU or when NVML cannot see it.
    pub fn gpu_total_memory(self) -> Option<u64> {
        gpus().get(self.gpu_index()? as usize).map(|g| g.total)
    }

    /// Free memory of this device now: available host RAM on the CPU, the GPU's free memory
    /// (None when NVML cannot see it).
    pub fn free_memory(self) -> Option<u64> {
        match self.gpu_index() {
            Some(index) => gpus().get(index as usize).map(|g| g.free),
            None => Some(host().free),
        }
    }
}

/// Formats as `cpu`, `cpu-flex[-bf16|-f16]` or `cuda:N[-bf16|-f16]`, the forms [`DeviceSpec`]
/// reads.
impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let suffix = self.precision.suffix();
        match self.kind {
            DeviceKind::Cpu => f.write_str("cpu"),
            DeviceKind::CpuFlex => write!(f, "cpu-flex{suffix}"),
            DeviceKind::Cuda => write!(f, "cuda:{}{suffix}", self.index),
        }
    }
}

/// A device as written in a pipeline's `device:` or a command's `--device`: `auto` or an exact
/// choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeviceSpec {
    /// CUDA device 0 where a build with CUDA support finds one ([`cuda_devices`]), else the
    /// CPU.
    #[default]
    Auto,
    /// This device.
    Exact(DeviceChoice),
}

impl DeviceSpec {
    /// The device the run computes on.
    pub fn resolve(self) -> DeviceChoice {
        match self {
            DeviceSpec::Exact(choice) => choice,
            DeviceSpec::Auto if cuda_devices().is_ok_and(|n| n > 0) => {
                DeviceChoice::cuda(0, Precision::F32)
            }
            DeviceSpec::Auto => DeviceChoice::CPU,
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Exact(choice) => choice.fmt(f),
        }
    }
}

/// The forms a device is written in, for messages.
const DEVICE_FORMS: &str = "`auto`, `cpu`, `cpu-ndarray`, `cpu-flex`, `cuda` or `cuda:N`, the \
     last three with `-bf16` or `-f16` for 16-bit work (`cuda:0-f16`)";

impl FromStr for DeviceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let not_a_device = || format!("`{s}` is not a device; use {DEVICE_FORMS}");
        match s {
            "auto" => return Ok(DeviceSpec::Auto),
            "cpu" | "cpu-ndarray" => return Ok(DeviceSpec::Exact(DeviceChoice::CPU)),
            _ => {}
        }
        let (gpu, precision) = Precision::split(s);
        if gpu == "cpu-flex" {
            return Ok(DeviceSpec::Exact(DeviceChoice::flex(precision)));
        }
        let index = match gpu {
            "cuda" => 0,
            _ => gpu
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .ok_or_else(not_a_device)?,
        };
        Ok(DeviceSpec::Exact(DeviceChoice::cuda(index, precision)))
    }
}

impl JsonSchema for DeviceSpec {
    fn schema_name() -> Cow<'static, str> {
        "Device".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "`auto`, `cpu` (`cpu-ndarray`), `cpu-flex`, `cuda` or `cuda:N`; `cpu-flex` and CUDA devices with `-bf16` or `-f16` compute in bfloat16 or fp16 (reductions in f32).",
            "type": "string",
            "pattern": "^(auto|cpu|cpu-ndarray|(cpu-flex|cuda(:[0-9]+)?)(-bf16|-f16)?)$"
        })
    }
}

impl Serialize for DeviceSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct DeviceVisitor;
        impl Visitor<'_> for DeviceVisitor {
            type Value = DeviceSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(DEVICE_FORMS)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<DeviceSpec, E> {
                s.parse()
                    .map_err(|_| E::invalid_value(Unexpected::Str(s), &self))
            }
        }
        d.deserialize_str(DeviceVisitor)
    }
}

/// Total and free memory of one device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceMemory {
    /// `cpu`, or `cuda:N` numbered as CUDA sees them (after `CUDA_VISIBLE_DEVICES`).
    pub device: String,
    /// The device's name (the GPU model, or `host RAM`).
    pub name: String,
    /// Bytes in all.
    pub total: u64,
    /// Bytes free now (available RAM for the host).
    pub free: u64,
    /// The GPU's UUID (`GPU-…`), which pins it in `CUDA_VISIBLE_DEVICES`; None for the host.
    pub uuid: Option<String>,
}

/// How many devices the CUDA driver numbers, or why CUDA cannot run here: a build without CUDA
/// support, a driver library that cannot be loaded (a machine without an NVIDIA driver) or one
/// that does not start. Asked once per process.
pub fn cuda_devices() -> Result<usize, String> {
    static DEVICES: std::sync::OnceLock<Result<usize, String>> = std::sync::OnceLock::new();
    DEVICES.get_or_init(probe_cuda).clone()
}

#[cfg(feature = "cuda")]
fn probe_cuda() -> Result<usize, String> {
    use cudarc::driver::{result, sys};
    // SAFETY: `is_culib_present` only tries to open the driver library; every driver call
    // below is made only once it has been found (cudarc panics on a missing library).
    #[allow(unsafe_code)]
    let present = unsafe { sys::is_culib_present() };
    if !present {
        return Err("the CUDA driver library (libcuda.so) cannot be loaded on this machine".into());
    }
    result::init().map_err(|e| format!("the CUDA driver does not start ({e})"))?;
    let count = result::device::get_count()
        .map_err(|e| format!("the CUDA driver cannot count its devices ({e})"))?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// CUDA device `index`'s architecture and the driver's version, as `sm_90-12080`: what decides
/// whether a compiled kernel loads on it ([`crate::sys::cache_dir`]).
#[cfg(feature = "cuda")]
pub fn cuda_architecture(index: usize) -> Result<String, String> {
    use cudarc::driver::{result, sys};
    cuda_devices()?;
    let ordinal = i32::try_from(index).map_err(|_| format!("no CUDA device {index}"))?;
    let dev = result::device::get(ordinal).map_err(|e| format!("CUDA device {index}: {e}"))?;
    let attribute = |a| {
        // SAFETY: `dev` was returned by `device::get` above, after the driver started.
        #[allow(unsafe_code)]
        unsafe { result::device::get_attribute(dev, a) }
            .map_err(|e| format!("CUDA device {index}: {e}"))
    };
    let major = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let mut driver = 0;
    // SAFETY: writes one int; the driver library was loaded and started by `cuda_devices`.
    #[allow(unsafe_code)]
    unsafe { sys::cuDriverGetVersion(&mut driver) }
        .result()
        .map_err(|e| format!("the CUDA driver's version: {e}"))?;
    Ok(format!("sm_{major}{minor}-{driver}"))
}

#[cfg(not(feature = "cuda"))]
fn probe_cuda() -> Result<usize, String> {
    Err(
        "this build has no CUDA support (rebuild with `cargo build --release --features cuda`)"
            .into(),
    )
}

/// Host RAM: total and available.
pub fn host() -> DeviceMemory {
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    DeviceMemory {
        device: "cpu".into(),
        name: "host RAM".into(),
        total: system.total_memory(),
        free: system.available_memory(),
        uuid: None,
    }
}

/// The GPUs CUDA will number 0, 1, …: all NVML devices, or those `CUDA_VISIBLE_DEVICES` lists
/// (by index or UUID, in its order). Empty when NVML or its driver is missing.
pub fn gpus() -> Vec<DeviceMemory> {
    let Ok(nvml) = Nvml::init() else {
        return Vec::new();
    };
    let count = nvml.device_count().unwrap_or(0);
    let mut all = Vec::new();
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        let (Ok(info), name, uuid) = (
            device.memory_info(),
            device.name().unwrap_or_else(|_| "NVIDIA GPU".into()),
            device.uuid().unwrap_or_default(),
        ) else {
            continue;
        };
        all.push((index, uuid, name, info.total, info.free));
    }
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    visible_order(visible.as_deref(), &all)
        .into_iter()
        .enumerate()
        .map(|(cuda_index, (_, uuid, name, total, free))| DeviceMemory {
            device: format!("cuda:{cuda_index}"),
            name: name.clone(),
            total: *total,
            free: *free,
            uuid: Some(uuid.clone()).filter(|u| !u.is_empty()),
        })
        .collect()
}

type NvmlDevice = (u32, String, String, u64, u64);

/// The devices `CUDA_VISIBLE_DEVICES` keeps, in its order; all when it is unset. Entries are
/// indices or (prefixes of) UUIDs; the list stops at the first entry that matches nothing, as
/// CUDA's does.
fn visible_order<'a>(visible: Option<&str>, all: &'a [NvmlDevice]) -> Vec<&'a NvmlDevice> {
    let Some(list) = visible else {
        return all.iter().collect();
    };
    let mut out = Vec::new();
    for entry in list.split(',').map(str::trim) {
        let found = match entry.parse::<u32>() {
            Ok(i) => all.iter().find(|d| d.0 == i),
            Err(_) if !entry.is_empty() => all.iter().find(|d| d.1.starts_with(entry)),
            Err(_) => None,
        };
        match found {
            Some(d) if !out.iter().any(|o: &&NvmlDevice| o.0 == d.0) => out.push(d),
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices() -> Vec<NvmlDevice> {
        (0..3)
            .map(|i| (i, format!("GPU-{i}aaa"), "A100".into(), 80 << 30, 70 << 30))
            .collect()
    }

    #[test]
    fn cuda_visible_devices_selects_and_orders() {
        let all = devices();
        let ids =
            |v: Option<&str>| -> Vec<u32> { visible_order(v, &all).iter().map(|d| d.0).collect() };
        assert_eq!(ids(None), vec![0, 1, 2]);
        assert_eq!(ids(Some("2,0")), vec![2, 0]);
        assert_eq!(ids(Some("GPU-1")), vec![1]);
        // CUDA stops at the first invalid entry; an empty list hides every GPU.
        assert_eq!(ids(Some("1,7,0")), vec![1]);
        assert_eq!(ids(Some("")), Vec::<u32>::new());
        assert_eq!(ids(Some("-1")), Vec::<u32>::new());
    }

    #[test]
    fn devices_parse_print_and_resolve() {
        let parse = |s: &str| s.parse::<DeviceSpec>();
        for text in [
            "auto",
            "cpu",
            "cpu-flex",
            "cpu-flex-f16",
            "cpu-flex-bf16",
            "cuda:1",
            "cuda:0-bf16",
            "cuda:0-f16",
        ] {
            assert_eq!(parse(text).unwrap().to_string(), text);
        }
        let exact = |s: &str| match parse(s).unwrap() {
            DeviceSpec::Exact(choice) => choice,
            DeviceSpec::Auto => panic!("{s} is not auto"),
        };
        assert_eq!(exact("cuda"), DeviceChoice::cuda(0, Precision::F32));
        assert_eq!(exact("cuda-bf16"), DeviceChoice::cuda(0, Precision::Bf16));
        assert_eq!(exact("cuda:1-bf16"), DeviceChoice::cuda(1, Precision::Bf16));
        assert_eq!(exact("cuda-f16"), DeviceChoice::cuda(0, Precision::F16));
        assert_eq!(exact("cpu-flex-f16"), DeviceChoice::flex(Precision::F16));
        assert_eq!(exact("cpu-ndarray"), DeviceChoice::CPU);
        for bad in ["cuda:x", "cuda-f8", "cpu-bf16", "cpu-f16", "gpu", "tpu"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(&format!("`{bad}` is not a device")), "{err}");
        }
        // `auto` takes CUDA only where the driver finds a device (a CUDA build on a machine
        // without one runs on the CPU).
        let auto = DeviceSpec::Auto.resolve();
        assert_eq!(auto.is_cuda(), cuda_devices().is_ok_and(|n| n > 0));
        if !cfg!(feature = "cuda") {
            assert!(cuda_devices().unwrap_err().contains("no CUDA support"));
        }
        for choice in [
            DeviceChoice::CPU,
            exact("cpu-flex"),
            exact("cuda:3"),
            exact("cuda:2-bf16"),
            exact("cuda:1-f16"),
            exact("cpu-flex-bf16"),
            exact("cpu-flex-f16"),
        ] {
            assert_eq!(DeviceChoice::from_label(&choice.label()), Some(choice));
        }
        assert_eq!(
            DeviceChoice::from_label("cuda:2 (bf16)")
                .unwrap()
                .gpu_index(),
            Some(2)
        );
        assert_eq!(DeviceChoice::from_label("a toaster"), None);
    }

    #[test]
    fn host_memory_is_read() {
        let h = host();
        assert!(h.total > 0 && h.free <= h.total, "{h:?}");
    }
}
