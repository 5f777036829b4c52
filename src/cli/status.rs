//! `wanda status`: done / running / failed / pending for every cell of a pipeline, from its
//! results folder and, where Slurm is installed, `squeue` (and `sacct` for how tasks ended).

use std::path::PathBuf;
use std::process::ExitCode;

use wanda::queue::slurm::{accounted_tasks, job_name, queued_tasks};
use wanda::queue::status::{cell_states, render, SlurmView};

/// Arguments of `wanda status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The pipeline file.
    pub file: PathBuf,
    /// Override a key, e.g. `--set prune.sparsity=0.6` (repeatable), as the run had them.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Results root; cells are in `<results>/<pipeline name>/<cell id>/`.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `wanda status`.
pub fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let plan = match super::validate::plan(&args.file, &args.set) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let results_dir = args.results.join(plan.name());
    let name = job_name(plan.name());
    let slurm = SlurmView {
        queued: queued_tasks(&name),
        ended: accounted_tasks(&name).unwrap_or_default(),
    };
    let statuses = cell_states(&plan, &results_dir, &slurm);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&statuses)?);
    } else {
        print!("{}", render(&statuses));
    }
    Ok(ExitCode::SUCCESS)
}
