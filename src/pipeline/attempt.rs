//! A cell's `attempt.json`: written when a process starts a cell, rewritten as failed when a
//! stage fails, removed once the cell's `run.json` is written. With `run.json` it tells
//! `wanda status` whether a cell is done, running, failed, or was never started — also for
//! cells run by other processes (Slurm array tasks, local workers).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::plan::CellId;
use crate::sys::write_atomic;

/// The file name inside a cell's folder.
pub const ATTEMPT_FILE: &str = "attempt.json";

/// Where an attempt stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptState {
    /// A process is (or was, if it died without a word) running the cell.
    Running,
    /// A stage failed; `error` says why.
    Failed,
}

/// One process's attempt at a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// Running or failed.
    pub state: AttemptState,
    /// The process id.
    pub pid: u32,
    /// The machine it runs on.
    pub host: String,
    /// Start, seconds since the Unix epoch.
    pub started_unix: u64,
    /// `<array job id>_<task id>` when Slurm runs it.
    pub slurm_task: Option<String>,
    /// The failure, for failed attempts.
    pub error: Option<String>,
}

impl Attempt {
    /// An attempt of this process, starting now.
    pub fn start() -> Self {
        let slurm_task = match (
            std::env::var("SLURM_ARRAY_JOB_ID"),
            std::env::var("SLURM_ARRAY_TASK_ID"),
        ) {
            (Ok(job), Ok(task)) => Some(format!("{job}_{task}")),
            _ => std::env::var("SLURM_JOB_ID").ok(),
        };
        Self {
            state: AttemptState::Running,
            pid: std::process::id(),
            host: host_name(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            slurm_task,
            error: None,
        }
    }

    /// The same attempt, failed with `error`.
    pub fn failed(mut self, error: String) -> Self {
        self.state = AttemptState::Failed;
        self.error = Some(error);
        self
    }

    /// `<results>/<cell>/attempt.json`.
    pub fn path(results_dir: &Path, cell: &CellId) -> PathBuf {
        results_dir.join(&cell.0).join(ATTEMPT_FILE)
    }

    /// Writes the attempt atomically, creating the cell folder.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let json = serde_json::to_vec_pretty(self).expect("an attempt always serialises");
        write_atomic(path, &json)
    }

    /// Reads an attempt; None when there is none or it cannot be read.
    pub fn read(path: &Path) -> Option<Self> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// Whether the process is known to be gone: it ran on this machine and no process with its
    /// id exists. False when that cannot be told (another machine, no `/proc`).
    pub fn process_is_gone(&self) -> bool {
        self.host == host_name()
            && Path::new("/proc/self").exists()
            && !Path::new("/proc").join(self.pid.to_string()).exists()
    }
}

/// This machine's host name ("unknown" when the system does not say).
pub fn host_name() -> String {
    sysinfo::System::host_name().unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_round_trips_and_knows_a_dead_process_on_this_host() {
        let dir = tempfile::tempdir().unwrap();
        let path = Attempt::path(dir.path(), &CellId("abc".into()));
        let mut attempt = Attempt::start();
        attempt.write(&path).unwrap();
        let read = Attempt::read(&path).unwrap();
        assert_eq!(read, attempt);
        assert_eq!(read.state, AttemptState::Running);
        assert!(!read.process_is_gone(), "this very process is alive");
        // pid_max on Linux is at most 2²²: a pid above it never exists.
        attempt.pid = 1 << 23;
        assert!(attempt.process_is_gone());
        attempt.host = "another-machine".into();
        assert!(!attempt.process_is_gone(), "cannot tell on another host");
        let failed = Attempt::start().failed("stage `prune` failed".into());
        assert_eq!(failed.state, AttemptState::Failed);
        assert_eq!(failed.error.as_deref(), Some("stage `prune` failed"));
    }
}
