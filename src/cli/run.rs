//! `wanda run`: execute a pipeline — shared stages once, then every sweep cell — writing
//! `results/<pipeline>/<cell-id>/run.json` per finished cell and resuming where it stopped.

use std::path::PathBuf;
use std::process::ExitCode;

use burn::prelude::Backend;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use super::backend::{dispatch, OnBackend};
use super::progress::{say, Counter};
use wanda::memory::device::DeviceChoice;
use wanda::pipeline::runner::{self, OnChanged, RunEvent, RunOptions, RunSummary};
use wanda::pipeline::spec::Budget;
use wanda::pipeline::{cell_is_finished, Plan};
use wanda::queue::local::{run_queue, worker_slots, QueueEvent};
use wanda::queue::manifest::{self, Manifest};
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
    #[arg(long, conflicts_with = "cell_index")]
    pub only: Option<String>,
    /// Run only the cell at this index of the sweep (as `wanda plan` numbers them; a Slurm
    /// array task passes `$SLURM_ARRAY_TASK_ID`).
    #[arg(long, value_name = "N")]
    pub cell_index: Option<usize>,
    /// With `--cell-index`: the manifest the index was taken from; the run stops if the
    /// pipeline now puts another cell at that index.
    #[arg(long, requires = "cell_index")]
    pub manifest: Option<PathBuf>,
    /// Run the cells in N worker processes at once, one cell per process; with GPUs each worker
    /// is pinned to one (`CUDA_VISIBLE_DEVICES`), on the CPU the cores are split between them.
    #[arg(long, value_name = "N", value_parser = super::at_least_one, conflicts_with_all = ["only", "cell_index", "dry_run"])]
    pub workers: Option<usize>,
    /// Re-run cells that already have a run.json.
    #[arg(long)]
    pub force: bool,
    /// Results root; cells go to `<results>/<pipeline name>/<cell id>/`.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Do not write memory_log.csv.
    #[arg(long)]
    pub no_memory_log: bool,
    /// A finished cell whose model or texts changed since it ran (by SHA-256): run it again,
    /// or stop with an error.
    #[arg(long, value_enum, default_value_t = OnChanged::Redo)]
    pub on_changed: OnChanged,
    /// Memory budget for the gate (e.g. `16GiB`), instead of the pipeline's.
    #[arg(long, value_parser = parse_budget)]
    pub budget: Option<Budget>,
}

impl RunArgs {
    /// The arguments a worker process for one cell gets: these, less the ones that choose
    /// cells or workers (the caller appends `--cell-index`).
    fn for_one_cell(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "run".into(),
            manifest::absolute(&self.file).into(),
            "--results".into(),
            manifest::absolute(&self.results).into(),
        ];
        for set in &self.set {
            args.push("--set".into());
            args.push(set.into());
        }
        if self.force {
            args.push("--force".into());
        }
        if self.no_memory_log {
            args.push("--no-memory-log".into());
        }
        if self.on_changed == OnChanged::Refuse {
            args.push("--on-changed".into());
            args.push("refuse".into());
        }
        if let Some(budget) = self.budget {
            args.push("--budget".into());
            args.push(budget.to_string().into());
        }
        args
    }
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

    fn run<B: Backend>(
        self,
        device: B::Device,
        choice: DeviceChoice,
    ) -> anyhow::Result<RunSummary> {
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
        let stage_bar = Counter::within(&bars, "    stage", "steps");
        let stage_progress = stage_bar.clone();
        let report_bar = bar.clone();
        let mut executor =
            PipelineExecutor::<B>::new(&self.plan, &self.options.results_dir, device, choice)
                .with_progress(move |_stage, done, total| stage_progress.advance(done, total))
                .with_report(move |text| say(&report_bar, text.trim_end()))
                .with_budget(self.budget);
        let summary = runner::run(
            &self.plan,
            &mut executor,
            &self.options,
            |event| match event {
                RunEvent::StageStarted { node, cell } => {
                    let who = cell.map_or("shared".to_string(), |c| c.label.clone());
                    let step = format!("{} ({who})", node.stage);
                    stage_bar.start(&step);
                    bar.set_message(step);
                }
                RunEvent::CellSkipped(_) => bar.inc(1),
                RunEvent::CellInputsChanged(cell, what) => say(
                    &bar,
                    &format!(
                        "redo     {:<32} finished before, but {what} changed since",
                        cell.label
                    ),
                ),
                RunEvent::CellFinished(cell, record, path) => {
                    bar.inc(1);
                    say(
                        &bar,
                        &format!(
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
                        ),
                    );
                }
            },
        )?;
        stage_bar.finish_and_clear();
        bar.finish_and_clear();
        Ok(summary)
    }
}

/// Runs `wanda run`.
pub fn run(mut args: RunArgs) -> anyhow::Result<ExitCode> {
    let plan = match super::validate::plan(&args.file, &args.set) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let results_dir = args.results.join(plan.name());
    if !args.dry_run {
        if let Err(e) = wanda::pipeline::inputs::check_offline(&plan) {
            eprintln!(
                "error: {e}; run `wanda fetch {}` where the hub is reachable",
                args.file.display()
            );
            return Ok(ExitCode::from(2));
        }
    }
    if let Some(index) = args.cell_index {
        match cell_at(&plan, index, args.manifest.as_deref()) {
            Ok(id) => args.only = Some(id),
            Err(message) => {
                eprintln!("error: {message}");
                return Ok(ExitCode::from(2));
            }
        }
    }
    if let Some(workers) = args.workers {
        return run_workers(&plan, &args, &results_dir, workers);
    }
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
        let device = plan.spec.settings.device.resolve();
        match wanda::stages::gate_dry_run(&plan, device, args.budget) {
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
    let device = plan.spec.settings.device;
    let gpu_index = device.resolve().gpu_index();
    let options = RunOptions {
        results_dir,
        only: args.only.clone(),
        force: args.force,
        memory_log: !args.no_memory_log,
        gpu_index,
        on_changed: args.on_changed,
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

/// The id of the cell at `index`, checked against the manifest it came from.
fn cell_at(
    plan: &Plan,
    index: usize,
    manifest: Option<&std::path::Path>,
) -> Result<String, String> {
    let Some(cell) = plan.cells.get(index) else {
        return Err(format!(
            "--cell-index {index} is out of range: `{}` has {} cell(s), indices 0–{}; `wanda plan {}` lists them",
            plan.file.display(),
            plan.cells.len(),
            plan.cells.len().saturating_sub(1),
            plan.file.display()
        ));
    };
    if let Some(path) = manifest {
        let manifest = Manifest::read(path).map_err(|e| e.to_string())?;
        let listed = manifest.cells.iter().find(|c| c.index == index);
        if listed.map(|c| c.id.as_str()) != Some(cell.id.0.as_str()) {
            return Err(format!(
                "cell {index} of `{}` is now `{}` ({}), but the manifest `{}` lists {}: the pipeline or its overrides changed since it was written; submit again",
                plan.file.display(),
                cell.label,
                cell.id,
                path.display(),
                listed.map_or("no such cell".to_string(), |c| format!("`{}` ({})", c.label, c.id))
            ));
        }
    }
    Ok(cell.id.0.clone())
}

/// `--workers N`: every unfinished cell in its own `wanda run --cell-index` process, at most N
/// at once.
fn run_workers(
    plan: &Plan,
    args: &RunArgs,
    results_dir: &std::path::Path,
    workers: usize,
) -> anyhow::Result<ExitCode> {
    let todo: Vec<usize> = plan
        .cells
        .iter()
        .filter(|c| args.force || !cell_is_finished(results_dir, &c.id))
        .map(|c| c.index)
        .collect();
    let on_gpu = plan.spec.settings.device.resolve().is_cuda();
    let gpus: Vec<String> = if on_gpu {
        wanda::memory::device::gpus()
            .into_iter()
            .filter_map(|g| g.uuid)
            .collect()
    } else {
        Vec::new()
    };
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let slots = worker_slots(workers, &gpus, cpus);
    let exe = std::env::current_exe()?;
    let base = args.for_one_cell();
    let log_dir = wanda::queue::local_log_dir(results_dir);
    println!(
        "{} of {} cell(s) to run on {} worker(s){}; logs in {}",
        todo.len(),
        plan.cells.len(),
        slots.len(),
        match (gpus.len(), slots.first().and_then(|s| s.threads)) {
            (0, Some(t)) => format!(", {t} thread(s) each"),
            (n, _) => format!(", pinned to {n} GPU(s)"),
        },
        log_dir.display()
    );
    let label = |index: usize| plan.cells[index].label.clone();
    let ended = run_queue(
        &todo,
        &slots,
        |index| {
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(&base).arg("--cell-index").arg(index.to_string());
            cmd
        },
        &log_dir,
        |event| match event {
            QueueEvent::Started { cell, slot, .. } => {
                println!("worker {slot}: started  {:>4}  {}", cell, label(cell));
            }
            QueueEvent::Finished { cell, success, log } => {
                let outcome = if success {
                    record_summary(results_dir, &plan.cells[cell].id)
                } else {
                    format!("FAILED, see {}", log.display())
                };
                println!("finished {:>4}  {:<32} {outcome}", cell, label(cell));
            }
        },
    )?;
    let failed = ended.iter().filter(|(_, ok)| !ok).count();
    println!(
        "{} cell(s) finished, {} failed, {} already finished and skipped; results in {}",
        ended.len() - failed,
        failed,
        plan.cells.len() - todo.len(),
        results_dir.display()
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One line about a finished cell's record.
fn record_summary(results_dir: &std::path::Path, id: &wanda::pipeline::CellId) -> String {
    match wanda::pipeline::RunRecord::read(&wanda::pipeline::RunRecord::path(results_dir, id)) {
        Ok(r) => format!(
            "ppl {}",
            r.metrics
                .perplexity
                .map_or("—".into(), |p| format!("{p:.3}"))
        ),
        Err(e) => format!("exited 0 but its record cannot be read: {e}"),
    }
}
