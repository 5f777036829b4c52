//! `eval: { zeroshot: { harness: lm-eval } }`: the installed lm-evaluation-harness scores the
//! model held in memory through [`serve`] on a free loopback port (its `local-completions`
//! model, token-id requests, the server's tokenizer), and its results JSON becomes the run
//! record's `metrics.zeroshot`. With a local task folder (`data:`), each task runs from a small
//! YAML that includes lm-eval's own task definition and only swaps its data files.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use burn::prelude::Backend;
use serde_json::Value;
use tokio::sync::oneshot;

use super::{serve, ServeError, ServeOptions, Served, Shutdown};
use crate::data::sets::{local_split_files, DataError};
use crate::eval::zeroshot::{Task, TaskScore, ZeroshotMetrics};

/// The environment variable that names the `lm_eval` to run instead of the one on `PATH`.
pub const LM_EVAL_ENV: &str = "WANDA_LM_EVAL";

/// Failures of a harness run.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// No `lm_eval` to run.
    #[error(
        "`zeroshot.harness: lm-eval` needs lm-evaluation-harness and found no `lm_eval` on PATH: \
         install it (`pip install 'lm-eval[api]==0.4.13'`) or point {LM_EVAL_ENV} at its \
         `lm_eval`; `harness: native` (the default) needs nothing"
    )]
    NotInstalled,
    /// lm_eval ended with an error.
    #[error("lm_eval failed ({status}); the end of its log `{log}`:\n{tail}")]
    Failed {
        /// Its exit status.
        status: String,
        /// Its whole output.
        log: PathBuf,
        /// The last lines.
        tail: String,
    },
    /// Its results are missing or unreadable.
    #[error("lm_eval's results under `{dir}`: {reason}")]
    Results {
        /// Where they were looked for.
        dir: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A local task folder lacks a task's files.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The server failed.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// Files or processes.
    #[error("lm_eval: {0}")]
    Io(#[from] std::io::Error),
}

/// The `lm_eval` executable: `$WANDA_LM_EVAL`, else the first on `PATH`.
fn find_lm_eval() -> Result<PathBuf, HarnessError> {
    if let Some(path) = std::env::var_os(LM_EVAL_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(HarnessError::NotInstalled)
        };
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("lm_eval"))
        .find(|p| p.is_file())
        .ok_or(HarnessError::NotInstalled)
}

/// The local task name lm-eval indexes for `task` (from the YAML written for it).
const LOCAL_PREFIX: &str = "wanda_zs_";

/// Task YAMLs that read `task`'s documents from `dir` (laid out like the hub repositories) and
/// otherwise include lm-eval's own definitions, which live in `tasks_dir`.
fn local_task_yamls(
    tasks: &[Task],
    dir: &Path,
    tasks_dir: &str,
    out: &Path,
) -> Result<(), HarnessError> {
    for &task in tasks {
        let data = task.data();
        // Never empty: a split without files is an error.
        let paths = local_split_files(dir, data.repo, data.config, data.split)?;
        let builder = if paths[0].extension().is_some_and(|e| e == "parquet") {
            "parquet"
        } else {
            "json"
        };
        let files = paths
            .iter()
            .map(|p| Ok(format!("{:?}", p.canonicalize()?.display().to_string())))
            .collect::<Result<Vec<_>, std::io::Error>>()?;
        let eval_key = if data.split == "test" {
            "test_split"
        } else {
            "validation_split"
        };
        let nulls: String = ["training_split", "validation_split", "test_split"]
            .iter()
            .filter(|k| **k != eval_key)
            .map(|k| format!("{k}: null\n"))
            .collect();
        let yaml = format!(
            "include: {tasks_dir}/{yaml}\ntask: {LOCAL_PREFIX}{name}\ntag: wanda_zs_local\n\
             dataset_path: {builder}\ndataset_name: null\n\
             dataset_kwargs: {{data_files: {{{split}: [{files}]}}}}\n{eval_key}: {split}\n{nulls}",
            yaml = task.lm_eval_yaml(),
            name = task.name(),
            split = data.split,
            files = files.join(", "),
        );
        std::fs::write(
            out.join(format!("{LOCAL_PREFIX}{}.yaml", task.name())),
            yaml,
        )?;
    }
    Ok(())
}

/// The folder lm-eval's task definitions are installed in, asked of the Python that runs `exe`.
fn tasks_dir(exe: &Path) -> Result<String, HarnessError> {
    let script = std::fs::read_to_string(exe)?;
    let python = script
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("#!"))
        .map(str::trim)
        .unwrap_or("python3")
        .to_string();
    let out = Command::new(&python)
        .args([
            "-c",
            "import os, lm_eval.tasks; print(os.path.dirname(lm_eval.tasks.__file__))",
        ])
        .output()?;
    if !out.status.success() {
        return Err(HarnessError::Failed {
            status: out.status.to_string(),
            log: exe.to_path_buf(),
            tail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Scores `tasks` (the first `limit` documents of each; from `data` when given, else the hub)
/// with the installed lm-eval against `served`, working in `work` (its log and results stay
/// there).
pub fn lm_eval<B: Backend>(
    served: &Served<'_, B>,
    tasks: &[Task],
    limit: Option<usize>,
    data: Option<&Path>,
    work: &Path,
) -> Result<ZeroshotMetrics, HarnessError> {
    let exe = find_lm_eval()?;
    std::fs::create_dir_all(work)?;
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    let address = listener.local_addr()?;
    let mut names: Vec<String> = tasks.iter().map(|t| t.name().to_string()).collect();
    let mut args: Vec<String> = vec![
        "--model".into(),
        "local-completions".into(),
        "--model_args".into(),
        format!(
            "model={},base_url=http://{address}/v1/completions,tokenizer_backend=remote,\
             tokenized_requests=True,max_length={},num_concurrent=1",
            served.name, served.config.max_position_embeddings
        ),
        "--num_fewshot".into(),
        "0".into(),
        "--output_path".into(),
        work.join("results").display().to_string(),
    ];
    if let Some(limit) = limit {
        args.extend(["--limit".into(), limit.to_string()]);
    }
    if let Some(dir) = data {
        let yamls = work.join("tasks");
        std::fs::create_dir_all(&yamls)?;
        local_task_yamls(tasks, dir, &tasks_dir(&exe)?, &yamls)?;
        args.extend(["--include_path".into(), yamls.display().to_string()]);
        names = names.iter().map(|n| format!("{LOCAL_PREFIX}{n}")).collect();
    }
    args.extend(["--tasks".into(), names.join(",")]);
    let log = work.join("lm_eval.log");
    let (stop, stopped) = oneshot::channel();
    let status = std::thread::scope(|scope| {
        let run = scope.spawn(|| {
            let log_file = std::fs::File::create(&log)?;
            let status = Command::new(&exe)
                .args(&args)
                .stdin(Stdio::null())
                .stdout(log_file.try_clone()?)
                .stderr(log_file)
                .status();
            let _ = stop.send(());
            status
        });
        let served_result = serve(
            served,
            listener,
            ServeOptions::default(),
            Shutdown::When(stopped),
            |_| {},
        );
        let status = run.join().expect("the lm_eval thread does not panic");
        served_result?;
        Ok::<_, HarnessError>(status?)
    })?;
    if !status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        return Err(HarnessError::Failed {
            status: status.to_string(),
            log,
            tail,
        });
    }
    read_results(&work.join("results"), tasks, &names)
}

/// The newest `results_*.json` under `dir`.
fn results_file(dir: &Path) -> Option<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("results_"))
            {
                found.push(path);
            }
        }
    }
    found.into_iter().max()
}

/// lm-eval's results JSON as the run record's metrics; `names[i]` is the name lm-eval ran
/// `tasks[i]` under.
fn read_results(
    dir: &Path,
    tasks: &[Task],
    names: &[String],
) -> Result<ZeroshotMetrics, HarnessError> {
    let bad = |reason: String| HarnessError::Results {
        dir: dir.to_path_buf(),
        reason,
    };
    let path = results_file(dir).ok_or_else(|| bad("no results_*.json".into()))?;
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)
        .map_err(|e| bad(format!("{}: {e}", path.display())))?;
    let mut scores = std::collections::BTreeMap::new();
    for (&task, key) in tasks.iter().zip(names) {
        let r = &json["results"][key];
        let metric = |name: &str| r[format!("{name},none")].as_f64();
        let acc = metric("acc").ok_or_else(|| bad(format!("no `acc` for {key}")))?;
        let n = json["n-samples"][key]["effective"]
            .as_u64()
            .ok_or_else(|| bad(format!("no sample count for {key}")))? as usize;
        scores.insert(
            task.name().to_string(),
            TaskScore {
                acc,
                acc_stderr: metric("acc_stderr"),
                acc_norm: metric("acc_norm"),
                acc_norm_stderr: metric("acc_norm_stderr"),
                n,
            },
        );
    }
    let mut metrics = ZeroshotMetrics::new(scores);
    let version = json["lm_eval_version"].as_str().unwrap_or("unknown");
    metrics.lm_eval =
        format!("{version} (installed lm_eval, local-completions through wanda serve)");
    Ok(metrics)
}
