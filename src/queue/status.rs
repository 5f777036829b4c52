//! Where each cell of a pipeline stands, from the results folder (`run.json`, `attempt.json`,
//! task logs) and, when Slurm is there, from `squeue`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::slurm::QueuedTask;
use super::{local_log_dir, slurm_log_dir};
use crate::pipeline::attempt::{Attempt, AttemptState};
use crate::pipeline::{Plan, RunRecord};

/// How many log lines a failed cell shows.
pub const LOG_TAIL_LINES: usize = 5;

/// A cell's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CellState {
    /// Its `run.json` exists.
    Done {
        /// The recorded perplexity.
        perplexity: Option<f64>,
    },
    /// A process (or Slurm task) is running it.
    Running {
        /// Where: `pid 123 on host` or the Slurm task.
        by: String,
    },
    /// The last attempt failed, or its process ended without a record.
    Failed {
        /// Why.
        error: String,
        /// The last lines of its log, when one was found.
        log_tail: Vec<String>,
        /// That log.
        log: Option<PathBuf>,
    },
    /// Not started; `queued` names the Slurm task waiting for it.
    Pending {
        /// The pending Slurm task, if any.
        queued: Option<String>,
    },
}

impl CellState {
    /// `done`, `running`, `failed` or `pending`.
    pub fn name(&self) -> &'static str {
        match self {
            CellState::Done { .. } => "done",
            CellState::Running { .. } => "running",
            CellState::Failed { .. } => "failed",
            CellState::Pending { .. } => "pending",
        }
    }
}

/// One cell and its state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellStatus {
    /// Cell index.
    pub index: usize,
    /// Cell id.
    pub id: String,
    /// Cell label.
    pub label: String,
    /// Its state.
    #[serde(flatten)]
    pub state: CellState,
}

/// What Slurm says about a pipeline's array tasks, by cell index.
#[derive(Debug, Clone, Default)]
pub struct SlurmView {
    /// Tasks `squeue` lists (pending or running); None without Slurm.
    pub queued: Option<BTreeMap<usize, QueuedTask>>,
    /// How tasks ended, from `sacct`; empty when accounting is off.
    pub ended: BTreeMap<usize, QueuedTask>,
}

/// The state of every cell of `plan` below `results_dir`, with what Slurm says.
pub fn cell_states(plan: &Plan, results_dir: &Path, slurm: &SlurmView) -> Vec<CellStatus> {
    let queued = slurm.queued.as_ref();
    plan.cells
        .iter()
        .map(|cell| {
            let record = RunRecord::read(&RunRecord::path(results_dir, &cell.id))
                .ok()
                .filter(|r| r.cell.id == cell.id);
            let attempt = Attempt::read(&Attempt::path(results_dir, &cell.id));
            let task = queued.and_then(|q| q.get(&cell.index));
            let mut state = classify(
                record.as_ref(),
                attempt.as_ref(),
                task,
                queued.is_some(),
                || newest_log(results_dir, cell.index),
            );
            if let (CellState::Failed { error, .. }, Some(ended)) =
                (&mut state, slurm.ended.get(&cell.index))
            {
                error.push_str(&format!(
                    " (Slurm: task {} {})",
                    ended.task,
                    ended.state.to_lowercase()
                ));
            }
            CellStatus {
                index: cell.index,
                id: cell.id.0.clone(),
                label: cell.label.clone(),
                state,
            }
        })
        .collect()
}

/// The rules, in order: a record means done; a task Slurm runs means running, one it holds
/// means pending; a failed attempt means failed; a running attempt whose process is gone (or
/// whose Slurm task is no longer queued) means failed; another running attempt means running;
/// anything else is pending.
fn classify(
    record: Option<&RunRecord>,
    attempt: Option<&Attempt>,
    task: Option<&QueuedTask>,
    slurm_known: bool,
    log: impl FnOnce() -> Option<PathBuf>,
) -> CellState {
    if let Some(record) = record {
        return CellState::Done {
            perplexity: record.metrics.perplexity,
        };
    }
    if let Some(task) = task {
        return if task.state == "PENDING" {
            CellState::Pending {
                queued: Some(task.task.clone()),
            }
        } else {
            CellState::Running {
                by: format!("Slurm task {} ({})", task.task, task.state.to_lowercase()),
            }
        };
    }
    let failed = |error: String| {
        let log = log();
        CellState::Failed {
            log_tail: log.as_deref().map(tail).unwrap_or_default(),
            log,
            error,
        }
    };
    match attempt {
        Some(a) if a.state == AttemptState::Failed => {
            failed(a.error.clone().unwrap_or_else(|| "failed".into()))
        }
        Some(a) if a.process_is_gone() => failed(format!(
            "process {} on {} ended without a record (killed or cancelled)",
            a.pid, a.host
        )),
        Some(Attempt {
            slurm_task: Some(t),
            ..
        }) if slurm_known => failed(format!(
            "Slurm task {t} is no longer queued and left no record (cancelled, timed out or killed)"
        )),
        Some(a) => CellState::Running {
            by: match &a.slurm_task {
                Some(t) => format!("Slurm task {t}"),
                None => format!("pid {} on {}", a.pid, a.host),
            },
        },
        None => CellState::Pending { queued: None },
    }
}

/// The newest log of cell `index`: a Slurm task's (`slurm/logs/<job>_<index>.out`) or a local
/// worker's (`logs/cell-<index>.log`).
fn newest_log(results_dir: &Path, index: usize) -> Option<PathBuf> {
    let slurm_suffix = format!("_{index}.out");
    let local_name = super::local_log_name(index);
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for dir in [slurm_log_dir(results_dir), local_log_dir(results_dir)] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.ends_with(&slurm_suffix) || name == local_name {
                let modified = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                found.push((modified, entry.path()));
            }
        }
    }
    found.into_iter().max().map(|(_, path)| path)
}

/// The last non-empty lines of a log.
fn tail(path: &Path) -> Vec<String> {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text
        .lines()
        .flat_map(|l| l.rsplit('\r').next())
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

/// A status table: one line per cell, the failures' log tails under them, and the counts.
pub fn render(statuses: &[CellStatus]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for status in statuses {
        *counts.entry(status.state.name()).or_default() += 1;
        let detail = match &status.state {
            CellState::Done { perplexity } => {
                perplexity.map_or("no perplexity".into(), |p| format!("ppl {p:.3}"))
            }
            CellState::Running { by } => by.clone(),
            CellState::Failed { error, .. } => error.clone(),
            CellState::Pending { queued } => queued
                .as_ref()
                .map_or(String::new(), |t| format!("queued as Slurm task {t}")),
        };
        let _ = writeln!(
            s,
            "{:>4}  {:<12}  {:<32}  {:<7}  {}",
            status.index,
            status.id,
            status.label,
            status.state.name(),
            detail
        );
        if let CellState::Failed { log_tail, log, .. } = &status.state {
            if let Some(log) = log {
                let _ = writeln!(s, "{:>6}log {}:", "", log.display());
            }
            for line in log_tail {
                let _ = writeln!(s, "{:>8}{line}", "");
            }
        }
    }
    let total = statuses.len();
    let _ = writeln!(
        s,
        "{total} cell(s): {} done, {} running, {} failed, {} pending",
        counts.get("done").unwrap_or(&0),
        counts.get("running").unwrap_or(&0),
        counts.get("failed").unwrap_or(&0),
        counts.get("pending").unwrap_or(&0)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(state: AttemptState, pid: u32, slurm: Option<&str>) -> Attempt {
        let mut a = Attempt::start();
        a.state = state;
        a.pid = pid;
        a.slurm_task = slurm.map(str::to_string);
        if state == AttemptState::Failed {
            a.error = Some("stage `prune` failed: boom".into());
        }
        a
    }

    fn task(state: &str) -> QueuedTask {
        QueuedTask {
            task: "9_1".into(),
            state: state.into(),
        }
    }

    #[test]
    fn each_rule_gives_its_state() {
        let me = std::process::id();
        let dead = 1 << 23;
        let no_log = || None;
        let running = attempt(AttemptState::Running, me, None);
        assert_eq!(
            classify(None, None, None, false, no_log),
            CellState::Pending { queued: None }
        );
        assert_eq!(
            classify(None, None, Some(&task("PENDING")), true, no_log),
            CellState::Pending {
                queued: Some("9_1".into())
            }
        );
        assert_eq!(
            classify(None, Some(&running), Some(&task("RUNNING")), true, no_log).name(),
            "running"
        );
        assert_eq!(
            classify(None, Some(&running), None, false, no_log).name(),
            "running"
        );
        let gone = attempt(AttemptState::Running, dead, None);
        match classify(None, Some(&gone), None, false, no_log) {
            CellState::Failed { error, .. } => assert!(error.contains("ended without a record")),
            other => panic!("{other:?}"),
        }
        let cancelled = attempt(AttemptState::Running, me, Some("9_1"));
        match classify(None, Some(&cancelled), None, true, no_log) {
            CellState::Failed { error, .. } => assert!(error.contains("no longer queued")),
            other => panic!("{other:?}"),
        }
        let failed = attempt(AttemptState::Failed, me, None);
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("cell-0.log");
        std::fs::write(&log, "a\nb\n\nc\nd\ne\nf\nprogress 1\rprogress 2\n").unwrap();
        match classify(None, Some(&failed), None, false, || Some(log.clone())) {
            CellState::Failed {
                error, log_tail, ..
            } => {
                assert_eq!(error, "stage `prune` failed: boom");
                assert_eq!(log_tail, ["c", "d", "e", "f", "progress 2"]);
            }
            other => panic!("{other:?}"),
        }
    }
}
