//! Running a sweep's cells as independent processes: the cell manifest ([`manifest`]), Slurm
//! job arrays ([`slurm`]), a local queue of worker processes ([`local`]) and where each cell
//! stands ([`status`]). Every process runs exactly one cell (`wanda run FILE --cell-index N`)
//! and writes the same result files as a sequential run.

use std::path::{Path, PathBuf};

pub mod local;
pub mod manifest;
pub mod slurm;
pub mod status;

/// `results/<pipeline>/slurm`: the manifest and sbatch script of the last submission.
pub fn slurm_dir(results_dir: &Path) -> PathBuf {
    results_dir.join("slurm")
}

/// `results/<pipeline>/slurm/logs`: one log per array task, `<job id>_<cell index>.out`.
pub fn slurm_log_dir(results_dir: &Path) -> PathBuf {
    slurm_dir(results_dir).join("logs")
}

/// `results/<pipeline>/logs`: one log per cell run by a local worker.
pub fn local_log_dir(results_dir: &Path) -> PathBuf {
    results_dir.join("logs")
}

/// A local worker's log name for cell `index`.
pub fn local_log_name(index: usize) -> String {
    format!("cell-{index}.log")
}
