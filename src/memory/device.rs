//! The memory of the machine's devices: NVIDIA GPUs through NVML (loaded at run time, so a
//! machine without a driver simply has none) and host RAM through `sysinfo`.

use nvml_wrapper::Nvml;
use serde::Serialize;

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
    fn host_memory_is_read() {
        let h = host();
        assert!(h.total > 0 && h.free <= h.total, "{h:?}");
    }
}
