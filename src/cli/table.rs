//! `wanda table RESULTS_DIR`: a paper-style table from every run.json below a folder; records
//! that cannot be read are named on stderr and skipped.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use wanda::report::table::{build, render, Format, TableSpec};

/// Arguments of `wanda table`.
#[derive(Debug, clap::Args)]
pub struct TableArgs {
    /// The results folder (searched recursively for run.json).
    pub results: PathBuf,
    /// Row axis keys, comma-separated: method, pattern, sparsity, model, nsamples, seqlen,
    /// eval_seqlen or a swept key.
    #[arg(long, value_delimiter = ',', default_value = "method")]
    pub rows: Vec<String>,
    /// Column axis keys, comma-separated (as `--rows`).
    #[arg(long, value_delimiter = ',', default_value = "sparsity")]
    pub cols: Vec<String>,
    /// The metric: ppl, sparsity, prune_s, total_s, peak_rss_gib, or a key of `metrics`;
    /// `zeroshot` (`zeroshot_norm`: acc_norm where a task has it) gives the paper's Table 2
    /// shape, accuracy in percent per task with their mean as columns; `speedup` its Table 6
    /// shape from `eval: { speed }` (decode ×, prefill ×, weight bytes ÷ as columns).
    #[arg(long, default_value = "ppl")]
    pub metric: String,
    /// md, csv, latex or json.
    #[arg(long, default_value = "md")]
    pub format: String,
    /// Decimals printed.
    #[arg(long, default_value_t = 2)]
    pub decimals: usize,
    /// Larger values are better (bold marks the column's largest).
    #[arg(long)]
    pub higher_is_better: bool,
    /// Write the table here instead of stdout.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
}

/// Runs `wanda table`.
pub fn run(args: TableArgs) -> anyhow::Result<ExitCode> {
    let format = match args.format.as_str() {
        "md" | "markdown" => Format::Markdown,
        "csv" => Format::Csv,
        "latex" | "tex" => Format::Latex,
        "json" => Format::Json,
        other => anyhow::bail!("`--format {other}` is not a format; use md, csv, latex or json"),
    };
    let records = super::results_records(&args.results)?;
    let spec = TableSpec {
        rows: args.rows,
        cols: args.cols,
        metric: args.metric,
        decimals: args.decimals,
        higher_is_better: args.higher_is_better,
    };
    let table = build(&records, &spec).map_err(|e| anyhow::anyhow!("`--rows`/`--cols`: {e}"))?;
    if table.rows.is_empty() {
        anyhow::bail!(
            "`--metric {}`: none of the {} record(s) has it; use ppl, sparsity, prune_s, total_s, \
             peak_rss_gib, zeroshot (records of an eval stage with `zeroshot:`), speedup (with \
             `speed:`) or a key of a record's `metrics`",
            spec.metric,
            records.len()
        );
    }
    let text = render(&table, format, spec.decimals);
    match &args.output {
        Some(path) => std::fs::write(path, &text)
            .with_context(|| format!("cannot write `{}`", path.display()))?,
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
