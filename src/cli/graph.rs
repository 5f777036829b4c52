//! `wanda graph`: the planned DAG as DOT, Mermaid or text.

use std::path::PathBuf;
use std::process::ExitCode;

use wanda::pipeline::GraphFormat;

/// Arguments of `wanda graph`.
#[derive(Debug, clap::Args)]
pub struct GraphArgs {
    /// The pipeline file.
    pub file: PathBuf,
    /// `dot`, `mermaid` or `text`.
    #[arg(long, default_value = "text")]
    pub format: GraphFormat,
    /// Override a key, e.g. `--set prune.sparsity=0.6` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// Runs `wanda graph`.
pub fn run(args: GraphArgs) -> anyhow::Result<ExitCode> {
    match super::validate::plan(&args.file, &args.set) {
        Ok(plan) => {
            print!("{}", plan.render(args.format));
            Ok(ExitCode::SUCCESS)
        }
        Err(code) => Ok(code),
    }
}
