//! Slurm, used as it is: an sbatch script whose job array runs one cell per task
//! (`wanda run FILE --cell-index $SLURM_ARRAY_TASK_ID`), `sbatch --parsable` to submit it, and
//! `squeue` to see what is queued or running. Nothing here schedules anything.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the generated script asks Slurm for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlurmOptions {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--gpus-per-task`.
    pub gpus_per_task: Option<u32>,
    /// `--cpus-per-task`; also the task's `RAYON_NUM_THREADS`.
    pub cpus_per_task: Option<u32>,
    /// `--mem`, e.g. `64G`.
    pub mem: Option<String>,
    /// `--time`, e.g. `04:00:00`.
    pub time: Option<String>,
    /// At most this many tasks at once (`%K` of `--array`).
    pub max_parallel: Option<usize>,
    /// `--account`.
    pub account: Option<String>,
    /// Further `#SBATCH` arguments, each as written, e.g. `--qos=high`.
    pub extra: Vec<String>,
}

/// Everything the script needs besides the options.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayJob {
    /// The job name (`wanda-<pipeline>`), which `squeue -n` finds it by.
    pub name: String,
    /// The cell indices to run: the array's task ids.
    pub indices: Vec<usize>,
    /// Where each task's log goes (`<job id>_<task id>.out`).
    pub log_dir: PathBuf,
    /// The folder the tasks start in.
    pub workdir: PathBuf,
    /// The command each task runs; the script appends `--cell-index "$SLURM_ARRAY_TASK_ID"`.
    pub command: Vec<String>,
    /// The cell count of the whole pipeline, for the script's header.
    pub cells: usize,
}

/// Errors talking to Slurm.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// `sbatch` is not installed or not on PATH.
    #[error("cannot run `sbatch` ({0}); run this on a Slurm login node, or pass --dry-run to print the script")]
    NoSbatch(std::io::Error),
    /// `sbatch` refused the script.
    #[error("sbatch refused `{script}`: {message}")]
    Refused {
        /// The script path.
        script: String,
        /// What sbatch said.
        message: String,
    },
}

/// The job name Slurm knows a pipeline's array by.
pub fn job_name(pipeline: &str) -> String {
    format!("wanda-{pipeline}")
}

/// The `--array` value: sorted indices as ranges (`0-3,5,7-8`), then `%K` when a parallel
/// limit is given.
pub fn array_spec(indices: &[usize], max_parallel: Option<usize>) -> String {
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    let mut spec = parts.join(",");
    if let Some(k) = max_parallel {
        let _ = write!(spec, "%{}", k.max(1));
    }
    spec
}

/// Quotes `text` for bash when it needs it.
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// The sbatch script: `#SBATCH` header, then one `wanda run … --cell-index` per array task.
pub fn sbatch_script(job: &ArrayJob, options: &SlurmOptions) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "#!/bin/bash");
    let _ = writeln!(
        s,
        "# Written by `wanda submit`: {} of {} cell(s), one array task per cell (task id = cell index).",
        job.indices.len(),
        job.cells
    );
    let _ = writeln!(
        s,
        "# Submitting again runs only the cells without a run.json; `wanda status` shows progress."
    );
    let mut sbatch = |arg: String| {
        let _ = writeln!(s, "#SBATCH {arg}");
    };
    sbatch(format!("--job-name={}", job.name));
    sbatch(format!(
        "--array={}",
        array_spec(&job.indices, options.max_parallel)
    ));
    sbatch(format!(
        "--output={}",
        job.log_dir.join("%A_%a.out").display()
    ));
    sbatch("--ntasks=1".to_string());
    if let Some(p) = &options.partition {
        sbatch(format!("--partition={p}"));
    }
    if let Some(a) = &options.account {
        sbatch(format!("--account={a}"));
    }
    if let Some(g) = options.gpus_per_task {
        sbatch(format!("--gpus-per-task={g}"));
    }
    if let Some(c) = options.cpus_per_task {
        sbatch(format!("--cpus-per-task={c}"));
    }
    if let Some(m) = &options.mem {
        sbatch(format!("--mem={m}"));
    }
    if let Some(t) = &options.time {
        sbatch(format!("--time={t}"));
    }
    for extra in &options.extra {
        sbatch(extra.clone());
    }
    let _ = writeln!(s, "set -euo pipefail");
    if options.cpus_per_task.is_some() {
        let _ = writeln!(s, "export RAYON_NUM_THREADS=\"$SLURM_CPUS_PER_TASK\"");
    }
    let _ = writeln!(s, "cd {}", shell_quote(&job.workdir.display().to_string()));
    let command: Vec<String> = job.command.iter().map(|a| shell_quote(a)).collect();
    let _ = writeln!(
        s,
        "exec {} --cell-index \"$SLURM_ARRAY_TASK_ID\"",
        command.join(" ")
    );
    s
}

/// Submits `script` with `sbatch --parsable`; returns the job id.
pub fn submit(script: &Path) -> Result<String, SlurmError> {
    let out = Command::new("sbatch")
        .arg("--parsable")
        .arg(script)
        .output()
        .map_err(SlurmError::NoSbatch)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(SlurmError::Refused {
            script: script.display().to_string(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    // `--parsable` prints `jobid` or `jobid;cluster`.
    let id = stdout
        .trim()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    if id.is_empty() {
        return Err(SlurmError::Refused {
            script: script.display().to_string(),
            message: "sbatch printed no job id".into(),
        });
    }
    Ok(id)
}

/// One queued or running array task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedTask {
    /// `<job id>_<task id>`.
    pub task: String,
    /// Slurm's state name: `PENDING`, `RUNNING`, `COMPLETING`, …
    pub state: String,
}

/// The tasks of this user's jobs named `name` that `squeue` still lists, by array task id (= cell index); None when
/// `squeue` cannot be run (no Slurm here).
pub fn queued_tasks(name: &str) -> Option<BTreeMap<usize, QueuedTask>> {
    let out = Command::new("squeue")
        .args(["--me", "-h", "-r", "-n", name, "-o", "%i %T"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| parse_squeue(&String::from_utf8_lossy(&out.stdout)))
}

/// How the tasks of this user's jobs named `name` ended, by array task id, from `sacct` (the
/// newest submission wins); None when `sacct` is missing or accounting is off.
pub fn accounted_tasks(name: &str) -> Option<BTreeMap<usize, QueuedTask>> {
    let out = Command::new("sacct")
        .args(["-n", "-P", "-X", "--name", name, "-o", "JobID,State"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| parse_sacct(&String::from_utf8_lossy(&out.stdout)))
}

/// Reads `sacct -n -P -X -o JobID,State` lines (`1234_5|CANCELLED by 0`); later lines (newer
/// jobs) replace earlier ones for the same task.
pub fn parse_sacct(text: &str) -> BTreeMap<usize, QueuedTask> {
    let squeue_like: String = text
        .lines()
        .filter_map(|line| {
            let (id, state) = line.split_once('|')?;
            let state = state.split_whitespace().next()?;
            Some(format!("{id} {state}\n"))
        })
        .collect();
    parse_squeue(&squeue_like)
}

/// Reads `squeue -h -r -o '%i %T'` lines (`1234_5 RUNNING`); lines of a pending array that
/// `-r` did not expand (`1234_[6-9%2] PENDING`) are expanded here.
pub fn parse_squeue(text: &str) -> BTreeMap<usize, QueuedTask> {
    let mut tasks = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(id), Some(state)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((job, task)) = id.split_once('_') else {
            continue;
        };
        let task = task.trim_start_matches('[').trim_end_matches(']');
        let task = task.split('%').next().unwrap_or_default();
        for part in task.split(',') {
            let range = match part.split_once('-') {
                Some((a, b)) => a.parse::<usize>().ok().zip(b.parse::<usize>().ok()),
                None => part.parse::<usize>().ok().map(|a| (a, a)),
            };
            let Some((a, b)) = range else { continue };
            for index in a..=b {
                tasks.insert(
                    index,
                    QueuedTask {
                        task: format!("{job}_{index}"),
                        state: state.to_string(),
                    },
                );
            }
        }
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_spec_joins_runs_of_indices_and_adds_the_limit() {
        assert_eq!(array_spec(&[0, 1, 2, 3], None), "0-3");
        assert_eq!(array_spec(&[7, 0, 1, 2, 5, 8], Some(4)), "0-2,5,7-8%4");
        assert_eq!(array_spec(&[3], Some(0)), "3%1");
        assert_eq!(array_spec(&[], None), "");
    }

    #[test]
    fn the_script_runs_one_cell_per_task_with_every_option() {
        let job = ArrayJob {
            name: job_name("paper"),
            indices: vec![0, 1, 2, 4],
            log_dir: PathBuf::from("/r/paper/slurm/logs"),
            workdir: PathBuf::from("/home/me/exp"),
            command: vec![
                "/opt/wanda".into(),
                "run".into(),
                "/home/me/exp/p.yaml".into(),
                "--set".into(),
                "evaluation.text=my file.txt".into(),
            ],
            cells: 5,
        };
        let options = SlurmOptions {
            partition: Some("gpu".into()),
            gpus_per_task: Some(1),
            cpus_per_task: Some(8),
            mem: Some("64G".into()),
            time: Some("04:00:00".into()),
            max_parallel: Some(2),
            account: Some("lab".into()),
            extra: vec!["--qos=high".into()],
        };
        let script = sbatch_script(&job, &options);
        let expected = "#!/bin/bash
# Written by `wanda submit`: 4 of 5 cell(s), one array task per cell (task id = cell index).
# Submitting again runs only the cells without a run.json; `wanda status` shows progress.
#SBATCH --job-name=wanda-paper
#SBATCH --array=0-2,4%2
#SBATCH --output=/r/paper/slurm/logs/%A_%a.out
#SBATCH --ntasks=1
#SBATCH --partition=gpu
#SBATCH --account=lab
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=04:00:00
#SBATCH --qos=high
set -euo pipefail
export RAYON_NUM_THREADS=\"$SLURM_CPUS_PER_TASK\"
cd /home/me/exp
exec /opt/wanda run /home/me/exp/p.yaml --set 'evaluation.text=my file.txt' --cell-index \"$SLURM_ARRAY_TASK_ID\"
";
        assert_eq!(script, expected);
    }

    #[test]
    fn sacct_lines_give_the_newest_end_state_per_task() {
        let tasks =
            parse_sacct("41_0|COMPLETED\n41_1|CANCELLED by 0\n41_2|OUT_OF_MEMORY\n52_1|TIMEOUT\n");
        let states: Vec<(usize, &str, &str)> = tasks
            .iter()
            .map(|(i, t)| (*i, t.task.as_str(), t.state.as_str()))
            .collect();
        assert_eq!(
            states,
            [
                (0, "41_0", "COMPLETED"),
                (1, "52_1", "TIMEOUT"),
                (2, "41_2", "OUT_OF_MEMORY")
            ]
        );
    }

    #[test]
    fn squeue_lines_map_to_cell_indices() {
        let tasks = parse_squeue("77_3 RUNNING\n77_[5-6,9%2] PENDING\n\ngarbage\n");
        let states: Vec<(usize, &str, &str)> = tasks
            .iter()
            .map(|(i, t)| (*i, t.task.as_str(), t.state.as_str()))
            .collect();
        assert_eq!(
            states,
            [
                (3, "77_3", "RUNNING"),
                (5, "77_5", "PENDING"),
                (6, "77_6", "PENDING"),
                (9, "77_9", "PENDING")
            ]
        );
    }
}
