//! Subcommands, one file each; this module holds the argument types and the dispatch.

mod backend;
mod bench;
mod completions;
mod devices;
mod estimate;
mod eval;
mod fetch;
mod generate;
mod graph;
mod plan;
mod plot;
mod progress;
mod prune;
mod report;
mod rerun;
mod run;
mod schema;
mod serve;
mod status;
mod submit;
mod synth;
mod table;
mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Declarative LLM-pruning experiments: Wanda, SparseGPT and magnitude pruning of Llama-family
/// models, WikiText-2 perplexity by the paper's protocol, on CPU or CUDA.
#[derive(Debug, Parser)]
#[command(name = "wanda", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a pipeline file: shared stages once, then every sweep cell; resumes where it stopped.
    Run(run::RunArgs),
    /// Download every model, tokenizer and data file the pipelines read from the hub into the
    /// cache (for offline compute nodes), and list what is cached.
    Fetch(fetch::FetchArgs),
    /// Check a pipeline file (keys, values, files, DAG) without loading anything.
    Validate(validate::ValidateArgs),
    /// Print a pipeline's planned DAG (`--format dot|mermaid|text`).
    Graph(graph::GraphArgs),
    /// Print the JSON Schema of pipeline files.
    Schema,
    /// Measure perplexity of a model on a text (non-overlapping windows, as in the paper).
    Eval(eval::EvalArgs),
    /// Continue a prompt with a model (KV-cached decoding).
    Generate(generate::GenerateArgs),
    /// Serve a model behind an OpenAI-compatible API (`/v1/completions`, `/v1/models`) on a
    /// local port, for lm-evaluation-harness's `local-completions` and other clients.
    Serve(serve::ServeArgs),
    /// Prune a model once (load, calibrate + prune layer by layer, evaluate, save).
    Prune(prune::PruneArgs),
    /// Benchmarks B1–B12: forward, perplexity, pruning, GEMM, C4 indexing, loading, attention, a sparse linear, decoding.
    Bench(bench::BenchArgs),
    /// Predict the memory of a run from the model's config alone (`--probe` checks it).
    Estimate(estimate::EstimateArgs),
    /// List GPUs (NVML) and host RAM with their total and free memory.
    Devices(devices::DevicesArgs),
    /// A paper-style table (Markdown, CSV, LaTeX, JSON) from the run.json files of a folder.
    Table(table::TableArgs),
    /// Metric-vs-sparsity curves per method as an SVG, from the run.json files of a folder.
    Plot(plot::PlotArgs),
    /// One self-contained HTML page of a results folder: tables, plots and every cell's recipe,
    /// provenance, memory and per-layer sparsity.
    Report(report::ReportArgs),
    /// Print the completion script of a shell (`wanda completions bash > …`; see `docs/commands.md`).
    Completions(completions::CompletionsArgs),
    /// Print the man page, or write a page per subcommand with `--out DIR`.
    Man(completions::ManArgs),
    /// Re-execute exactly the cell a run.json describes and compare its perplexity.
    Rerun(rerun::RerunArgs),
    /// The expanded cells (index, stable id, resolved config, result path) as a manifest.
    Plan(plan::PlanArgs),
    /// Submit the unfinished cells as a Slurm job array, one task per cell.
    Submit(submit::SubmitArgs),
    /// Done / running / failed / pending per cell, from the results folder and Slurm.
    Status(status::StatusArgs),
    /// Write a folder in a real model's shape (Llama-2-7B, …) with random weights, for testing
    /// scale; its perplexity is meaningless.
    Synth(synth::SynthArgs),
}

/// A byte size as options take it (`2GB`, `512MiB`, bytes), for clap's `value_parser`.
fn parse_size(text: &str) -> Result<u64, String> {
    wanda::pipeline::spec::ByteSize::parse(text)
        .map(|b| b.0)
        .ok_or_else(|| format!("`{text}` is not a size: write bytes or e.g. 2GB, 512MiB"))
}

/// `model`'s linears held compressed as `--sparse` says, within
/// [`wanda::memory::log::spare_bytes`]; what it holds is said on stderr by `command`.
fn sparsify<B: burn::prelude::Backend>(
    model: &mut wanda::model::decoder::Llama<B>,
    mode: wanda::model::decoder::SparseMode,
    command: &str,
) {
    let summary = model.sparsify(mode, wanda::memory::log::spare_bytes());
    say_compressed(command, &summary);
}

/// Says on stderr, as `command`, what `summary` held compressed or left dense for want of
/// memory; nothing where it did neither.
fn say_compressed(command: &str, summary: &wanda::model::decoder::SparseSummary) {
    if summary.compressed + summary.over_budget > 0 {
        eprintln!("{command}: {summary}");
    }
}

/// A count that must be at least 1 (samples, positions, a batch), for clap's `value_parser`.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("`{text}` is not a count: {e}")),
    }
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Fetch(args) => fetch::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Graph(args) => graph::run(args),
        Command::Schema => schema::run(),
        Command::Eval(args) => eval::run(args),
        Command::Generate(args) => generate::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Prune(args) => prune::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Estimate(args) => estimate::run(args),
        Command::Devices(args) => devices::run(args),
        Command::Table(args) => table::run(args),
        Command::Plot(args) => plot::run(args),
        Command::Report(args) => report::run(args),
        Command::Completions(args) => completions::run(args),
        Command::Man(args) => completions::run_man(args),
        Command::Rerun(args) => rerun::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Submit(args) => submit::run(args),
        Command::Status(args) => status::run(args),
        Command::Synth(args) => synth::run(args),
    }
}

/// Every readable run record below `dir`; unreadable ones are named on stderr and skipped, and
/// a folder with none is an error.
fn results_records(dir: &std::path::Path) -> anyhow::Result<Vec<wanda::pipeline::RunRecord>> {
    if !dir.is_dir() {
        anyhow::bail!(
            "results folder `{}` does not exist; pass the folder `wanda run` wrote (results/<pipeline>)",
            dir.display()
        );
    }
    let (records, skipped) = wanda::report::table::read_records(dir);
    for s in &skipped {
        eprintln!("skipped {}: {}", s.path.display(), s.reason);
    }
    if records.is_empty() {
        anyhow::bail!(
            "no readable run.json below `{}` ({} skipped); pass the folder `wanda run` wrote \
             (results/<pipeline>), once a cell has finished",
            dir.display(),
            skipped.len()
        );
    }
    Ok(records.into_iter().map(|(_, r)| r).collect())
}
