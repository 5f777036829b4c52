//! `wanda devices`: the memory of every device a run could use — NVIDIA GPUs through NVML
//! (numbered as CUDA numbers them under `CUDA_VISIBLE_DEVICES`) and host RAM.

use std::process::ExitCode;

use serde::Serialize;
use wanda::memory::device::{self, DeviceMemory};
use wanda::model::arch::gib;

/// Arguments of `wanda devices`.
#[derive(Debug, clap::Args)]
pub struct DevicesArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Devices {
    gpus: Vec<DeviceMemory>,
    host: DeviceMemory,
}

/// Runs `wanda devices`.
pub fn run(args: DevicesArgs) -> anyhow::Result<ExitCode> {
    let devices = Devices {
        gpus: device::gpus(),
        host: device::host(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&devices)?);
        return Ok(ExitCode::SUCCESS);
    }
    if devices.gpus.is_empty() {
        println!("no NVIDIA GPU found (no NVML driver, or CUDA_VISIBLE_DEVICES hides them all); runs use the CPU");
    }
    for d in devices.gpus.iter().chain(std::iter::once(&devices.host)) {
        println!(
            "{:<8} {:<28} total {:>10}  free {:>10}",
            d.device,
            d.name,
            gib(d.total),
            gib(d.free)
        );
    }
    Ok(ExitCode::SUCCESS)
}
