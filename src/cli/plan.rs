//! `wanda plan`: the expanded cells of a pipeline as a manifest (index, stable id, resolved
//! config, result path), for job arrays and scripts.

use std::path::PathBuf;
use std::process::ExitCode;

use wanda::queue::manifest::Manifest;

/// Arguments of `wanda plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The pipeline file.
    pub file: PathBuf,
    /// Override a key, e.g. `--set prune.sparsity=0.6` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Results root the result paths are under.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Write the manifest (JSON) here instead of printing it.
    #[arg(long, value_name = "OUT.json")]
    pub manifest: Option<PathBuf>,
}

/// Runs `wanda plan`.
pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let plan = match super::validate::plan(&args.file, &args.set) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let manifest = Manifest::new(&plan, &args.set, &args.results.join(plan.name()));
    match &args.manifest {
        Some(out) => {
            manifest.write(out).map_err(|e| {
                anyhow::anyhow!("cannot write the manifest `{}`: {e}", out.display())
            })?;
            println!(
                "{} cell(s) of `{}` → {}",
                manifest.cells.len(),
                manifest.pipeline,
                out.display()
            );
        }
        None => print!("{}", manifest.to_json()),
    }
    Ok(ExitCode::SUCCESS)
}
