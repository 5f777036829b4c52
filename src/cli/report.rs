//! `wanda report RESULTS_DIR`: one self-contained HTML page of a results folder (tables, the
//! perplexity plot, every cell's recipe, provenance, memory and per-layer sparsity), written
//! atomically.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use wanda::report::html::{render, Page};

/// Arguments of `wanda report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The results folder (searched recursively for run.json).
    pub results: PathBuf,
    /// The HTML file to write.
    #[arg(long, short = 'o', alias = "output", default_value = "report.html")]
    pub out: PathBuf,
    /// The page's heading (default: the folder's name).
    #[arg(long)]
    pub title: Option<String>,
}

/// Runs `wanda report`.
pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let dir = &args.results;
    if !dir.is_dir() {
        anyhow::bail!(
            "results folder `{}` does not exist; pass the folder `wanda run` wrote (results/<pipeline>)",
            dir.display()
        );
    }
    let title = args.title.unwrap_or_else(|| {
        dir.file_name().map_or(dir.display().to_string(), |n| {
            n.to_string_lossy().into_owned()
        })
    });
    let page = Page::read(dir, title);
    for f in &page.failures {
        eprintln!("skipped {}: {}", f.path.display(), f.reason);
    }
    if page.records.is_empty() {
        anyhow::bail!(
            "no readable run.json below `{}` ({} failed or unreadable); pass the folder `wanda run` \
             wrote (results/<pipeline>), once a cell has finished",
            dir.display(),
            page.failures.len()
        );
    }
    wanda::sys::write_atomic(&args.out, render(&page).as_bytes())
        .with_context(|| format!("cannot write `{}`", args.out.display()))?;
    Ok(ExitCode::SUCCESS)
}
