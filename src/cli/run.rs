//! `wanda run`: execute a pipeline — shared stages once, then every sweep cell — writing
//! `results/<pipeline>/<cell-id>/run.json` per finished cell and resuming where it stopped.

use std::path::PathBuf;
use std::process::ExitCode;

use burn::prelude::Backend;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use super::backend::{dispatch, DeviceArg, OnBackend};
use wanda::pipeline::runner::{self, RunEvent, RunOptions, RunSummary};
use wanda::pipeline::spec::{Budget, Device};
use wanda::pipeline::{cell_is_finished, Plan};
use wanda::stages::PipelineExecutor;

/// Arguments of `wanda run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The pipeline file.
    pub file: PathBuf,
    /// Override a key, e.g. `--set prune.sparsity=0.6` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Print the plan and what each stage would do; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run only this cell (id or label).
    #[arg(long)]
    pub only: Option<String>,
    /// Re-run cells that already have a run.json.
    #[arg(long)]
    pub force: bool,
    /// Results root; cells go to `<results>/<pipeline name>/<cell id>/`.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Do not write memory_log.csv.
    #[arg(long)]
    pub no_memory_log: bool,
    /// Memory budget for the gate (e.g. `16GiB`), instead of the pipeline's.
    #[arg(long, value_parser = parse_budget)]
    pub budget: Option<Budget>,
}

fn parse_budget(text: &str) -> Result<Budget, String> {
    Budget::parse(text).ok_or_else(|| format!("`{text}` is not `auto` or a size such as `16GiB`"))
}

struct Job {
    plan: Plan,
    options: RunOptions,
    budget: Option<Budget>,
}

impl OnBackend for Job {
    type Output = RunSummary;

    fn run<B: Backend>(self, device: B::Device, label: String) -> anyhow::Result<RunSummary> {
        let bars = MultiProgress::new();
        let bar = bars.add(
            ProgressBar::new(self.plan.cells.len() as u64).with_style(
                ProgressStyle::with_template(
                    "{prefix:>10} {bar:30} {pos}/{len} cells {elapsed} {msg}",
                )
                .expect("static template"),
            ),
        );
        bar.set_prefix("run");
        let stage_bar = bars.add(super::counter_bar("    stage", "steps"));
        let stage_progress = stage_bar.clone();
        let report_bar = bar.clone();
        let mut executor =
            PipelineExecutor::<B>::new(&self.plan, &self.options.results_dir, device, label)
                .with_progress(move |_stage, done, total| {
                    super::advance(&stage_progress, done, total)
                })
                .with_report(move |text| report_bar.println(text.trim_end()))
                .with_budget(self.budget);
        let summary = runner::run(
            &self.plan,
            &mut executor,
            &self.options,
            |event| match event {
                RunEvent::StageStarted { node, cell } => {
                    let who = cell.map_or("shared".to_string(), |c| c.label.clone());
                    bar.set_message(format!("{} ({who})", node.stage));
                    stage_bar.reset();
                }
                RunEvent::CellSkipped(_) => bar.inc(1),
                RunEvent::CellFinished(cell, record, path) => {
                    bar.inc(1);
                    bar.println(format!(
                        "finished {:<32} ppl {:>10} sparsity {:>6}  {}",
                        cell.label,
                        record
                            .metrics
                            .perplexity
                            .map_or("—".into(), |p| format!("{p:.3}")),
                        record
                            .sparsity
                            .total
                            .map_or("—".into(), |s| format!("{s:.4}")),
                        path.display()
                    ));
                }
            },
        )?;
        stage_bar.finish_and_clear();
        bar.finish_and_clear();
        Ok(summary)
    }
}

/// Runs `wanda run`.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let plan = match super::validate::plan(&args.file, &args.set) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let results_dir = args.results.join(plan.name());
    if args.dry_run {
        print!("{}", plan.render(wanda::pipeline::GraphFormat::Text));
        println!();
        for cell in &plan.cells {
            let state = if cell_is_finished(&results_dir, &cell.id) && !args.force {
                "finished, skipped"
            } else {
                "would run"
            };
            println!("{:<12} {:<32} {state}", cell.id.0, cell.label);
        }
        let label = match plan.spec.settings.device {
            Device::Cuda(i) => format!("cuda:{i}"),
            Device::Auto if cfg!(feature = "cuda") => "cuda:0".to_string(),
            _ => "cpu".to_string(),
        };
        match wanda::stages::gate_dry_run(&plan, &label, args.budget) {
            Ok(Some(text)) => print!("{text}"),
            Ok(None) => {}
            Err(e) => println!("gate: cannot decide before the run: {e}"),
        }
        println!("results: {}", results_dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let summary = execute(plan, &args, results_dir.clone())?;
    println!(
        "{} cell(s) finished, {} already finished and skipped; results in {}",
        summary.finished.len(),
        summary.skipped.len(),
        results_dir.display()
    );
    if !summary.memory_summary.is_empty() && !args.no_memory_log {
        println!("\n{}", summary.memory_summary);
    }
    if let Some(reason) = summary.halted {
        eprintln!("halted: {reason}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `plan` on the device it names, writing cells below `results_dir`.
pub(super) fn execute(
    plan: Plan,
    args: &RunArgs,
    results_dir: PathBuf,
) -> anyhow::Result<RunSummary> {
    let device = match plan.spec.settings.device {
        Device::Auto => DeviceArg::Auto,
        Device::Cpu => DeviceArg::Cpu,
        Device::Cuda(i) => DeviceArg::Cuda(i as usize),
    };
    let gpu_index = match device {
        DeviceArg::Cuda(i) => Some(i as u32),
        DeviceArg::Auto if cfg!(feature = "cuda") => Some(0),
        _ => None,
    };
    let options = RunOptions {
        results_dir,
        only: args.only.clone(),
        force: args.force,
        memory_log: !args.no_memory_log,
        gpu_index,
    };
    dispatch(
        device,
        Job {
            plan,
            options,
            budget: args.budget,
        },
    )
}
