//! `wanda plot RESULTS_DIR`: metric-vs-sparsity curves (one per series) as an SVG file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use wanda::report::plot::{render, series, PlotSpec};

/// Arguments of `wanda plot`.
#[derive(Debug, clap::Args)]
pub struct PlotArgs {
    /// The results folder (searched recursively for run.json).
    pub results: PathBuf,
    /// The x axis: `sparsity` (unstructured cells) or a numeric swept key.
    #[arg(long, default_value = "sparsity")]
    pub x: String,
    /// The metric on y: ppl, sparsity, prune_s, total_s, peak_rss_gib or a key of `metrics`.
    #[arg(long, default_value = "ppl")]
    pub y: String,
    /// The key that makes the series (as `wanda table --rows`).
    #[arg(long, default_value = "method")]
    pub series: String,
    /// Logarithmic y axis.
    #[arg(long)]
    pub log_y: bool,
    /// Chart title (default: the folder's name).
    #[arg(long)]
    pub title: Option<String>,
    /// The SVG file to write.
    #[arg(long, short = 'o')]
    pub output: PathBuf,
}

/// Runs `wanda plot`.
pub fn run(args: PlotArgs) -> anyhow::Result<ExitCode> {
    let records = super::results_records(&args.results)?;
    let spec = PlotSpec {
        title: args.title.unwrap_or_else(|| {
            args.results
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned())
        }),
        x: args.x,
        y: args.y,
        series: args.series,
        log_y: args.log_y,
    };
    let data = series(&records, &spec).map_err(|e| anyhow::anyhow!("`--series`: {e}"))?;
    let svg = render(&data, &spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::write(&args.output, svg)
        .with_context(|| format!("cannot write `{}`", args.output.display()))?;
    Ok(ExitCode::SUCCESS)
}
