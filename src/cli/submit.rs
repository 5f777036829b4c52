//! `wanda submit FILE --slurm`: the unfinished cells of a pipeline as one Slurm job array,
//! one task per cell (`wanda run FILE --cell-index $SLURM_ARRAY_TASK_ID`). Cells with a
//! run.json, and cells Slurm still holds or runs, are left out, so submitting again after
//! failures runs only what is missing.

use std::path::PathBuf;
use std::process::ExitCode;

use wanda::pipeline::cell_is_finished;
use wanda::queue::manifest::{absolute, Manifest};
use wanda::queue::slurm::{job_name, queued_tasks, sbatch_script, submit, ArrayJob, SlurmOptions};
use wanda::queue::{slurm_dir, slurm_log_dir};

/// Arguments of `wanda submit`.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The pipeline file.
    pub file: PathBuf,
    /// Submit to Slurm (`sbatch`), the one scheduler supported.
    #[arg(long, required = true)]
    pub slurm: bool,
    /// Override a key, e.g. `--set prune.sparsity=0.6` (repeatable); every task gets it.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Results root; cells go to `<results>/<pipeline name>/<cell id>/`.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// `#SBATCH --partition`.
    #[arg(long)]
    pub partition: Option<String>,
    /// `#SBATCH --gpus-per-task`.
    #[arg(long, value_name = "N")]
    pub gpus_per_task: Option<u32>,
    /// `#SBATCH --cpus-per-task` (also each task's thread count).
    #[arg(long, value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// `#SBATCH --mem`, e.g. `64G`.
    #[arg(long)]
    pub mem: Option<String>,
    /// `#SBATCH --time`, e.g. `04:00:00`.
    #[arg(long)]
    pub time: Option<String>,
    /// At most K tasks at once (`--array=…%K`).
    #[arg(long, value_name = "K")]
    pub max_parallel: Option<usize>,
    /// `#SBATCH --account`.
    #[arg(long)]
    pub account: Option<String>,
    /// Any other sbatch argument, as written (repeatable), e.g. `--sbatch-arg=--qos=high`.
    #[arg(long = "sbatch-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub sbatch_args: Vec<String>,
    /// Print the script; write and submit nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `wanda submit`.
pub fn run(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let plan = match super::validate::plan(&args.file, &args.set) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    if let Err(e) = wanda::pipeline::inputs::check_offline(&plan) {
        eprintln!(
            "error: {e}; run `wanda fetch {}` where the hub is reachable",
            args.file.display()
        );
        return Ok(ExitCode::from(2));
    }
    let results_dir = absolute(&args.results.join(plan.name()));
    let name = job_name(plan.name());
    let queued = queued_tasks(&name).unwrap_or_default();
    let finished = plan
        .cells
        .iter()
        .filter(|c| cell_is_finished(&results_dir, &c.id))
        .count();
    let indices: Vec<usize> = plan
        .cells
        .iter()
        .filter(|c| !cell_is_finished(&results_dir, &c.id) && !queued.contains_key(&c.index))
        .map(|c| c.index)
        .collect();
    if indices.is_empty() {
        println!(
            "nothing to submit: {} of {} cell(s) finished, {} queued or running in Slurm",
            finished,
            plan.cells.len(),
            queued.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let manifest_path = slurm_dir(&results_dir).join("manifest.json");
    let script_path = slurm_dir(&results_dir).join("submit.sbatch");
    let mut command = vec![
        std::env::current_exe()?.display().to_string(),
        "run".to_string(),
        absolute(&args.file).display().to_string(),
        "--results".to_string(),
        absolute(&args.results).display().to_string(),
    ];
    for set in &args.set {
        command.push("--set".into());
        command.push(set.clone());
    }
    command.push("--manifest".into());
    command.push(manifest_path.display().to_string());
    let job = ArrayJob {
        name,
        indices,
        log_dir: slurm_log_dir(&results_dir),
        workdir: absolute(&std::env::current_dir()?),
        command,
        cells: plan.cells.len(),
    };
    let options = SlurmOptions {
        partition: args.partition,
        gpus_per_task: args.gpus_per_task,
        cpus_per_task: args.cpus_per_task,
        mem: args.mem,
        time: args.time,
        max_parallel: args.max_parallel,
        account: args.account,
        extra: args.sbatch_args,
    };
    let script = sbatch_script(&job, &options);
    if args.dry_run {
        print!("{script}");
        return Ok(ExitCode::SUCCESS);
    }
    let write = |path: &std::path::Path, bytes: &[u8]| {
        wanda::sys::write_atomic(path, bytes)
            .map_err(|e| anyhow::anyhow!("cannot write `{}`: {e}", path.display()))
    };
    // Slurm does not create the log folder; a task whose log cannot be opened fails silently.
    std::fs::create_dir_all(&job.log_dir)
        .map_err(|e| anyhow::anyhow!("cannot create `{}`: {e}", job.log_dir.display()))?;
    Manifest::new(&plan, &args.set, &results_dir)
        .write(&manifest_path)
        .map_err(|e| anyhow::anyhow!("cannot write `{}`: {e}", manifest_path.display()))?;
    write(&script_path, script.as_bytes())?;
    let id = submit(&script_path)?;
    println!(
        "submitted job {id}: {} of {} cell(s) as array tasks {} ({} finished, {} already queued or running)",
        job.indices.len(),
        plan.cells.len(),
        wanda::queue::slurm::array_spec(&job.indices, options.max_parallel),
        finished,
        queued.len()
    );
    println!("script {}", script_path.display());
    println!("logs   {}", job.log_dir.display());
    println!("status wanda status {}", args.file.display());
    Ok(ExitCode::SUCCESS)
}
