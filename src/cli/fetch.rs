//! `wanda fetch`: everything the pipelines read from the hub — models with their tokenizers,
//! data-set files — downloaded into the hub cache once (on a login node), so runs on offline
//! compute nodes (`HF_HUB_OFFLINE=1`) find them there.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use wanda::data::hub::HubRequest;
use wanda::pipeline::inputs::{fetch_input, for_each_input, InputKind};

/// `wanda fetch` arguments.
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// Pipeline files; every cell of each is looked at.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Only list what is needed and whether it is cached; download nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `wanda fetch`.
pub fn run(args: FetchArgs) -> anyhow::Result<ExitCode> {
    let hub = HubRequest {
        offline: args.dry_run,
        ..HubRequest::default()
    };
    let (mut total, mut missing) = (0u64, 0usize);
    for file in &args.files {
        let plan = match super::validate::plan(file, &[]) {
            Ok(p) => p,
            Err(code) => return Ok(code),
        };
        println!("{}", file.display());
        let mut any = false;
        for_each_input(&plan, &hub, |input| {
            any = true;
            let input = match input {
                Ok(input) => input,
                Err(e) if args.dry_run => {
                    missing += 1;
                    println!("  not cached: {e}");
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            let at = format!("{}@{}", input.repo, input.revision);
            // A dry run only looks: no download, no document store.
            match fetch_input(input, &hub, !args.dry_run) {
                Ok(cached) => {
                    let bytes: u64 = cached.files.iter().map(|(_, _, b)| b).sum();
                    total += bytes;
                    println!(
                        "  {:<26} {at}: {} file(s), {}, cached",
                        input.what,
                        cached.files.len(),
                        human(bytes)
                    );
                    if let InputKind::Data(..) = input.kind {
                        for (name, path, bytes) in &cached.files {
                            println!("    {name} ({}) {}", human(*bytes), path.display());
                        }
                    }
                    Ok(())
                }
                Err(e) if args.dry_run => {
                    missing += 1;
                    println!("  not cached: {e}");
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })?;
        if !any {
            println!("  nothing from the hub: every input is a local file");
        }
    }
    if missing > 0 {
        println!(
            "{missing} input(s) not cached; run `wanda fetch` without `--dry-run` to download them"
        );
        return Ok(ExitCode::from(1));
    }
    println!("all inputs cached: {} in the hub cache", human(total));
    Ok(ExitCode::SUCCESS)
}

/// Bytes as `1.23 GiB`, `4.5 MiB`, `12 KiB`.
fn human(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        b_ if b_ >= 1 << 30 => format!("{:.2} GiB", b / f64::from(1u32 << 30)),
        b_ if b_ >= 1 << 20 => format!("{:.1} MiB", b / f64::from(1u32 << 20)),
        b_ if b_ >= 1 << 10 => format!("{:.0} KiB", b / 1024.0),
        _ => format!("{bytes} B"),
    }
}
