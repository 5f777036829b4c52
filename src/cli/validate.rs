//! `wanda validate`: parse and plan a pipeline without allocating a tensor.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use wanda::pipeline::{validate_with, Override, Plan, ValidateOptions};

/// Arguments of `wanda validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The pipeline file.
    pub file: PathBuf,
    /// Override a key, e.g. `--set prune.sparsity=0.6` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// Validates `file` with `--set` overrides; on failure prints the located errors to stderr and
/// returns exit code 2.
pub fn plan(file: &Path, set: &[String]) -> Result<Plan, ExitCode> {
    let mut overrides = Vec::new();
    for s in set {
        match s.parse::<Override>() {
            Ok(o) => overrides.push(o),
            Err(problem) => {
                eprintln!("error: `--set {s}`: {problem}");
                if let Some(help) = problem.help() {
                    eprintln!("  = help: {help}");
                }
                return Err(ExitCode::from(2));
            }
        }
    }
    let options = ValidateOptions {
        overrides,
        check_files: true,
    };
    validate_with(file, &options).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(2)
    })
}

/// Runs `wanda validate`.
pub fn run(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let plan = match plan(&args.file, &args.set) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    println!(
        "ok: `{}` — {} cell(s), {} stage node(s), validated in {:.1} ms",
        plan.name(),
        plan.cells.len(),
        plan.graph().node_count(),
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(ExitCode::SUCCESS)
}
