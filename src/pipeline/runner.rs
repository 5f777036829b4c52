//! Executes a [`Plan`]: shared stages once, then each cell's stages, cell by cell; times every
//! stage, takes memory checkpoints around it, and writes each finished cell's `run.json` and
//! `memory_log.csv` atomically. A cell whose record exists is skipped (unless forced), so an
//! interrupted sweep resumes where it stopped and loses nothing that finished.
//!
//! What a stage does is not known here: an [`Executor`] runs it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use petgraph::graph::NodeIndex;

use crate::memory::log::MemoryLog;
use crate::pipeline::attempt::{Attempt, AttemptState};
use crate::pipeline::plan::{Cell, Plan, StageNode};
use crate::pipeline::record::{RecordError, RunRecord, StageMemory};
use crate::sys::io::IoBytes;

/// What a stage returns: go on, or stop the run with a reason (a gate said no → exit 1).
#[derive(Debug, Clone, PartialEq)]
pub enum StageOutcome {
    /// Continue with the next stage.
    Continue,
    /// Stop; no further stage runs.
    Halt {
        /// Why, for the user.
        reason: String,
    },
}

/// Error type of executors.
pub type StageFailure = Box<dyn std::error::Error + Send + Sync>;

/// Runs stages. Every stage gets a record to fill: a cell's own, or for shared stages a record
/// whose metrics, sparsity and effective values are copied into every cell they cover.
pub trait Executor {
    /// Runs one stage; `upstream` lists every stage it depends on, directly or not, so the
    /// executor can hand it the artifacts of exactly those stages. `cell` is the cell the
    /// stage runs for: its own for per-cell stages, the plan's only cell for shared stages of
    /// a pipeline without a sweep, and None for shared stages serving several cells.
    fn run_stage(
        &mut self,
        node: &StageNode,
        upstream: &[&StageNode],
        cell: Option<&Cell>,
        record: &mut RunRecord,
    ) -> Result<StageOutcome, StageFailure>;
    /// Called before the first stage of each cell that runs, to fill shared facts (hashes,
    /// effective values) into its record.
    fn begin_cell(&mut self, cell: &Cell, record: &mut RunRecord);
    /// Called after the last stage of each cell, before its record is written, to fill what
    /// was still being worked out while the stages ran (the model's hash).
    fn end_cell(&mut self, _cell: &Cell, _record: &mut RunRecord) -> Result<(), StageFailure> {
        Ok(())
    }
    /// For a finished cell: what among its inputs (model, texts) differs from what its
    /// record says it used, or None when nothing does (or nothing can be checked).
    fn changed_inputs(&mut self, _cell: &Cell, _record: &RunRecord) -> Option<String> {
        None
    }
}

/// What to do with a finished cell whose inputs changed since it ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnChanged {
    /// Run it again (its old record stays until the new one replaces it).
    #[default]
    Redo,
    /// Stop with an error naming the cell and the changed input.
    Refuse,
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `results/<pipeline>`: one folder per cell below it.
    pub results_dir: PathBuf,
    /// Run only the cell with this id or label.
    pub only: Option<String>,
    /// Re-run finished cells.
    pub force: bool,
    /// Write `memory_log.csv` beside each `run.json`.
    pub memory_log: bool,
    /// GPU index the memory log watches (None on CPU).
    pub gpu_index: Option<u32>,
    /// What to do with finished cells whose inputs changed.
    pub on_changed: OnChanged,
}

/// Progress events, for a caller that shows bars or logs.
#[derive(Debug, Clone)]
pub enum RunEvent<'a> {
    /// A stage starts (`cell` is None for shared stages).
    StageStarted {
        /// The stage.
        node: &'a StageNode,
        /// Its cell.
        cell: Option<&'a Cell>,
    },
    /// A cell was skipped because its record exists.
    CellSkipped(&'a Cell),
    /// A finished cell runs again because an input changed (what changed).
    CellInputsChanged(&'a Cell, String),
    /// A cell finished and its record was written here.
    CellFinished(&'a Cell, &'a RunRecord, &'a Path),
}

/// What a run did.
#[derive(Debug, Default)]
pub struct RunSummary {
    /// Cells run to completion, with their records.
    pub finished: Vec<RunRecord>,
    /// Labels of cells skipped as already finished.
    pub skipped: Vec<String>,
    /// Set when a stage halted the run.
    pub halted: Option<String>,
    /// The memory log of the shared stages and the last cell.
    pub memory_summary: String,
}

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `--only` names no cell.
    #[error("no cell has the id or label `{0}`; `wanda graph` lists them")]
    UnknownCell(String),
    /// A finished cell's inputs changed and the options say not to redo it.
    #[error("cell `{cell}` was finished with other inputs: {what}; restore them, or pass `--on-changed redo` to run it again")]
    InputsChanged {
        /// The cell label.
        cell: String,
        /// What changed.
        what: String,
    },
    /// A stage failed.
    #[error("stage `{stage}`{cell} failed", cell = .cell.as_ref().map(|c| format!(" of cell `{c}`")).unwrap_or_default())]
    Stage {
        /// The stage id.
        stage: String,
        /// The cell label, for per-cell stages.
        cell: Option<String>,
        /// What went wrong.
        #[source]
        source: StageFailure,
    },
    /// What a cell's record needs after its stages (the model's hash) could not be had.
    #[error("cell `{cell}` ran, but its record could not be completed")]
    EndCell {
        /// The cell label.
        cell: String,
        /// What went wrong.
        #[source]
        source: StageFailure,
    },
    /// A record could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A cell's attempt marker could not be written.
    #[error("cannot write `{path}`")]
    Attempt {
        /// The marker's path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The memory log could not be written.
    #[error("cannot write the memory log into `{dir}`")]
    MemoryLog {
        /// The cell folder.
        dir: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

fn selected<'a>(plan: &'a Plan, options: &RunOptions) -> Result<Vec<&'a Cell>, RunError> {
    let cells: Vec<&Cell> = match &options.only {
        Some(only) => plan
            .cells
            .iter()
            .filter(|c| &c.id.0 == only || &c.label == only)
            .collect(),
        None => plan.cells.iter().collect(),
    };
    match &options.only {
        Some(only) if cells.is_empty() => Err(RunError::UnknownCell(only.clone())),
        _ => Ok(cells),
    }
}

/// The selected cells that must run: those without a finished record, those whose inputs
/// changed since (as `options.on_changed` says), or all with `options.force`. The others are
/// skipped into `summary`.
fn cells_to_run<'p>(
    plan: &'p Plan,
    executor: &mut dyn Executor,
    options: &RunOptions,
    summary: &mut RunSummary,
    on_event: &mut impl FnMut(RunEvent<'p>),
) -> Result<Vec<&'p Cell>, RunError> {
    let mut todo = Vec::new();
    for cell in selected(plan, options)? {
        let finished = RunRecord::read(&RunRecord::path(&options.results_dir, &cell.id))
            .ok()
            .filter(|r| r.cell.id == cell.id);
        match finished {
            Some(record) if !options.force => match executor.changed_inputs(cell, &record) {
                None => {
                    remove_stale_attempt(&options.results_dir, cell);
                    summary.skipped.push(cell.label.clone());
                    on_event(RunEvent::CellSkipped(cell));
                }
                Some(what) if options.on_changed == OnChanged::Refuse => {
                    return Err(RunError::InputsChanged {
                        cell: cell.label.clone(),
                        what,
                    });
                }
                Some(what) => {
                    on_event(RunEvent::CellInputsChanged(cell, what));
                    todo.push(cell);
                }
            },
            _ => todo.push(cell),
        }
    }
    Ok(todo)
}

/// Runs the plan with `executor`.
pub fn run(
    plan: &Plan,
    executor: &mut dyn Executor,
    options: &RunOptions,
    mut on_event: impl FnMut(RunEvent<'_>),
) -> Result<RunSummary, RunError> {
    let mut summary = RunSummary::default();
    let todo = cells_to_run(plan, executor, options, &mut summary, &mut on_event)?;
    let mut shared_log = MemoryLog::with_gpu(options.gpu_index);
    let Some(first) = todo.first() else {
        return Ok(summary);
    };
    let mut shared_record = RunRecord::new(plan, first);
    shared_log.checkpoint("start");
    let mut shared_times = Vec::new();
    let sole_cell = match plan.cells.as_slice() {
        [only] => Some(only),
        _ => None,
    };
    for index in plan.order() {
        let node = &plan.graph()[index];
        if !node.is_shared() {
            continue;
        }
        let step = Step {
            plan,
            index,
            cell: None,
            record_cell: sole_cell,
        };
        let outcome = step.run(executor, &mut shared_log, &mut shared_record, &mut on_event);
        let (outcome, cost) = match outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                // None of this process's cells can run now.
                let attempt = Attempt::start().failed(error_chain(&error));
                for cell in &todo {
                    mark(&attempt, &options.results_dir, cell);
                }
                return Err(error);
            }
        };
        shared_times.push((node.stage.clone(), cost));
        if let StageOutcome::Halt { reason } = outcome {
            let attempt = Attempt::start().failed(format!("halted: {reason}"));
            for cell in &todo {
                mark(&attempt, &options.results_dir, cell);
            }
            summary.halted = Some(reason);
            summary.memory_summary = shared_log.summary();
            return Ok(summary);
        }
    }
    for cell in todo {
        let mut log = MemoryLog::continued_from(&shared_log, options.gpu_index);
        let mut record = RunRecord::new(plan, cell);
        // What shared stages measured applies to every cell; the executor then adds the
        // shared facts it holds (hashes, effective calibration size).
        record.metrics = shared_record.metrics.clone();
        record.sparsity = shared_record.sparsity.clone();
        record.experts = shared_record.experts.clone();
        executor.begin_cell(cell, &mut record);
        let attempt = Attempt::start();
        let attempt_path = Attempt::path(&options.results_dir, &cell.id);
        attempt
            .write(&attempt_path)
            .map_err(|source| RunError::Attempt {
                path: attempt_path.display().to_string(),
                source,
            })?;
        // A failure of this cell marks its attempt as failed, with the error's chain.
        let failed = |error: RunError| {
            mark(
                &attempt.clone().failed(error_chain(&error)),
                &options.results_dir,
                cell,
            );
            error
        };
        let started = Instant::now();
        for (stage, cost) in &shared_times {
            record_stage(&mut record, stage, *cost);
        }
        for index in plan.cell_nodes(cell.index) {
            let node = &plan.graph()[index];
            let step = Step {
                plan,
                index,
                cell: Some(cell),
                record_cell: Some(cell),
            };
            let (outcome, cost) = step
                .run(executor, &mut log, &mut record, &mut on_event)
                .map_err(failed)?;
            record_stage(&mut record, &node.stage, cost);
            if let StageOutcome::Halt { reason } = outcome {
                mark(
                    &attempt.clone().failed(format!("halted: {reason}")),
                    &options.results_dir,
                    cell,
                );
                summary.halted = Some(reason);
                summary.memory_summary = log.summary();
                return Ok(summary);
            }
        }
        executor.end_cell(cell, &mut record).map_err(|source| {
            failed(RunError::EndCell {
                cell: cell.label.clone(),
                source,
            })
        })?;
        record.timings.total_s = started.elapsed().as_secs_f64()
            + shared_times.iter().map(|(_, c)| c.seconds).sum::<f64>();
        record.memory.peak_rss_bytes = log.peak_rss();
        record.memory.peak_gpu_bytes = log.peak_gpu();
        let path = RunRecord::path(&options.results_dir, &cell.id);
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        if options.memory_log {
            log.write_csv(&dir).map_err(|source| RunError::MemoryLog {
                dir: dir.display().to_string(),
                source,
            })?;
        }
        // The record is written last: its presence is what marks the cell as finished.
        record.write(&path)?;
        // Finished: the record says so now; a leftover attempt would only confuse `status`.
        let _ = std::fs::remove_file(&attempt_path);
        on_event(RunEvent::CellFinished(cell, &record, &path));
        summary.memory_summary = log.summary();
        summary.finished.push(record);
    }
    Ok(summary)
}

/// Removes a finished cell's `attempt.json` left by a process killed between renaming the
/// record into place and removing its marker; a marker of a live process (a forced re-run
/// elsewhere) or of a failure stays.
fn remove_stale_attempt(results_dir: &Path, cell: &Cell) {
    let path = Attempt::path(results_dir, &cell.id);
    if let Some(attempt) = Attempt::read(&path) {
        if attempt.state == AttemptState::Running && attempt.process_is_gone() {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Records a cell's failed attempt. Best effort: the run's own error is what the caller must
/// see, not a second one about the marker.
fn mark(attempt: &Attempt, results_dir: &Path, cell: &Cell) {
    let _ = attempt.write(&Attempt::path(results_dir, &cell.id));
}

/// The error and its sources, joined by `: `.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Every node `node` depends on, directly or through others.
fn upstream(plan: &Plan, node: NodeIndex) -> Vec<&StageNode> {
    plan.ancestors(node)
        .into_iter()
        .map(|n| &plan.graph()[n])
        .collect()
}

/// One stage node to run: shared (`cell` None) or for a cell; `record_cell` is the cell the
/// executor is told about (a pipeline without a sweep gives its only cell to shared stages).
struct Step<'a> {
    plan: &'a Plan,
    index: NodeIndex,
    cell: Option<&'a Cell>,
    record_cell: Option<&'a Cell>,
}

impl Step<'_> {
    /// Announces the node, runs it between two memory checkpoints, and returns its outcome and
    /// what it cost (wall seconds, the peak RSS seen at its end, storage bytes), or the failure
    /// named after the stage and cell. Shared and per-cell stages both run through here.
    fn run<'p>(
        &self,
        executor: &mut dyn Executor,
        log: &mut MemoryLog,
        record: &mut RunRecord,
        on_event: &mut impl FnMut(RunEvent<'p>),
    ) -> Result<(StageOutcome, StageCost), RunError>
    where
        Self: 'p,
    {
        let node = &self.plan.graph()[self.index];
        on_event(RunEvent::StageStarted {
            node,
            cell: self.cell,
        });
        let upstream = upstream(self.plan, self.index);
        let (outcome, cost) = timed(log, &node.stage, || {
            executor.run_stage(node, &upstream, self.record_cell, record)
        });
        let outcome = outcome.map_err(|source| RunError::Stage {
            stage: node.stage.clone(),
            cell: self.cell.map(|c| c.label.clone()),
            source,
        })?;
        Ok((outcome, cost))
    }
}

/// Puts a stage's wall time, storage bytes and peak into a cell's record.
fn record_stage(record: &mut RunRecord, stage: &str, cost: StageCost) {
    record
        .timings
        .stages
        .insert(stage.to_string(), cost.seconds);
    if let Some(io) = cost.io {
        record.timings.io.insert(stage.to_string(), io);
    }
    record.memory.stages.insert(
        stage.to_string(),
        StageMemory {
            peak_rss_bytes: cost.peak,
            peak_gpu_bytes: None,
        },
    );
}

/// Runs `f` between two checkpoints named after the stage; returns its result and what it
/// cost: wall seconds, the storage bytes it moved and the peak RSS seen at the end checkpoint.
fn timed<T>(log: &mut MemoryLog, stage: &str, f: impl FnOnce() -> T) -> (T, StageCost) {
    log.checkpoint(format!("{stage}:start"));
    let io_before = IoBytes::now();
    let started = Instant::now();
    let out = f();
    let seconds = started.elapsed().as_secs_f64();
    let io = IoBytes::now()
        .zip(io_before)
        .map(|(after, before)| after.since(before));
    let end = log.checkpoint(format!("{stage}:end"));
    let cost = StageCost {
        seconds,
        peak: end.peak_rss.or(end.rss),
        io,
    };
    (out, cost)
}

/// What a stage cost: wall seconds, the peak RSS seen at its end and the storage bytes it
/// moved.
#[derive(Debug, Clone, Copy)]
struct StageCost {
    seconds: f64,
    peak: Option<u64>,
    io: Option<IoBytes>,
}
