//! Cells as independent processes on a tiny model: `wanda plan` manifests, `wanda run
//! --cell-index`, `wanda submit --slurm --dry-run`, `wanda run --workers`, `wanda status`,
//! and (with a running Slurm, see `scripts/slurm-e2e.sh`) a real job array.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use wanda::pipeline::RunRecord;
use wanda::queue::manifest::Manifest;

use crate::common::{save_tiny_hf_folder, tiny_text};

/// A tiny model, texts (`eval_words` words of evaluation text) and pipeline `name` whose
/// `sweep:` block is `sweep`; returns the pipeline path.
fn tiny_pipeline(dir: &Path, name: &str, prune: &str, sweep: &str, eval_words: usize) -> PathBuf {
    save_tiny_hf_folder(&dir.join("tiny"), 8);
    std::fs::write(dir.join("calib.txt"), tiny_text(400)).unwrap();
    std::fs::write(dir.join("eval.txt"), tiny_text(eval_words)).unwrap();
    let pipeline = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &pipeline,
        format!(
            "name: {name}
seed: 0
device: cpu
model: {{ path: tiny }}
calibration: {{ text: calib.txt, nsamples: 4, seqlen: 16 }}
evaluation: {{ text: eval.txt, seqlen: 16 }}
stages:
  load: {{}}
  calibrate: {{}}
  prune: {prune}
  eval: {{}}
sweep:
{sweep}"
        ),
    )
    .unwrap();
    pipeline
}

/// 2 methods × 2 ratios.
fn four_cells(dir: &Path, eval_words: usize) -> PathBuf {
    tiny_pipeline(
        dir,
        "four",
        "{ method: wanda, sparsity: 0.5 }",
        "  prune.method: [magnitude, wanda]\n  prune.sparsity: [0.4, 0.6]\n",
        eval_words,
    )
}

fn wanda(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Perplexity and sparsity of every record below `results/four`, by cell id.
fn metrics(results: &Path) -> BTreeMap<String, (Option<f64>, Option<f64>)> {
    let dir = results.join("four");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = entry.path().join("run.json");
        if path.exists() {
            let r = RunRecord::read(&path).unwrap();
            out.insert(
                r.cell.id.0.clone(),
                (r.metrics.perplexity, r.sparsity.total),
            );
        }
    }
    out
}

#[test]
fn plan_writes_the_manifest_and_cell_index_runs_exactly_that_cell() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    four_cells(d, 300);
    let out = wanda(&["plan", "four.yaml", "--manifest", "m.json"], d);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("4 cell(s) of `four`"), "{}", text(&out));
    let manifest = Manifest::read(&d.join("m.json")).unwrap();
    assert_eq!(manifest.cells.len(), 4);
    // Deterministic: a second plan gives the same bytes.
    let again = wanda(&["plan", "four.yaml"], d);
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        std::fs::read_to_string(d.join("m.json")).unwrap()
    );

    let out = wanda(
        &[
            "run",
            "four.yaml",
            "--cell-index",
            "2",
            "--manifest",
            "m.json",
        ],
        d,
    );
    assert!(out.status.success(), "{}", text(&out));
    let cell = &manifest.cells[2];
    assert_eq!(cell.label, "wanda-0.4-unstructured");
    let record = RunRecord::read(&cell.result).unwrap();
    assert_eq!(record.cell.id.0, cell.id);
    assert_eq!(metrics(&d.join("results")).len(), 1, "only cell 2 ran");
    assert!(
        !cell.result.with_file_name("attempt.json").exists(),
        "a finished cell leaves no attempt marker"
    );

    let out = wanda(&["run", "four.yaml", "--cell-index", "9"], d);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("--cell-index 9 is out of range: `four.yaml` has 4 cell(s)"),
        "{}",
        text(&out)
    );
    // The pipeline changed since the manifest: index 2 is another cell now.
    let out = wanda(
        &[
            "run",
            "four.yaml",
            "--set",
            "seed=1",
            "--cell-index",
            "2",
            "--manifest",
            "m.json",
        ],
        d,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("changed since it was written; submit again"),
        "{}",
        text(&out)
    );
}

#[test]
fn submit_dry_run_prints_an_array_of_the_unfinished_cells() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    four_cells(d, 300);
    let out = wanda(&["run", "four.yaml", "--cell-index", "1"], d);
    assert!(out.status.success(), "{}", text(&out));
    let out = wanda(
        &[
            "submit",
            "four.yaml",
            "--slurm",
            "--dry-run",
            "--max-parallel",
            "2",
            "--partition",
            "gpu",
            "--time",
            "01:00:00",
            "--sbatch-arg=--qos=low",
        ],
        d,
    );
    let script = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}", text(&out));
    for line in [
        "#SBATCH --job-name=wanda-four",
        "#SBATCH --array=0,2-3%2",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=01:00:00",
        "#SBATCH --qos=low",
        "--cell-index \"$SLURM_ARRAY_TASK_ID\"",
        "# Written by `wanda submit`: 3 of 4 cell(s)",
    ] {
        assert!(script.contains(line), "`{line}` missing from\n{script}");
    }
    assert!(
        !d.join("results/four/slurm").exists(),
        "a dry run writes nothing"
    );
    let out = wanda(&["submit", "four.yaml"], d);
    assert!(!out.status.success());
    assert!(text(&out).contains("--slurm"), "{}", text(&out));
}

#[test]
fn workers_give_the_same_records_as_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    four_cells(d, 300);
    let out = wanda(&["run", "four.yaml", "--results", "one"], d);
    assert!(out.status.success(), "{}", text(&out));
    let out = wanda(
        &["run", "four.yaml", "--results", "two", "--workers", "2"],
        d,
    );
    let stdout = text(&out);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("4 of 4 cell(s) to run on 2 worker(s), 1 thread(s) each"),
        "{stdout}"
    );
    assert!(stdout.contains("worker 1: started"), "{stdout}");
    let (one, two) = (metrics(&d.join("one")), metrics(&d.join("two")));
    assert_eq!(one.len(), 4);
    assert_eq!(one, two, "same cells, same perplexity and sparsity bits");
    for i in 0..4 {
        assert!(d.join(format!("two/four/logs/cell-{i}.log")).exists());
    }
    let out = wanda(
        &["run", "four.yaml", "--results", "two", "--workers", "2"],
        d,
    );
    assert!(
        text(&out).contains("0 of 4 cell(s) to run"),
        "{}",
        text(&out)
    );
}

#[test]
fn status_shows_done_failed_and_pending_cells_with_the_failure_log() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 3:7 does not divide the tiny model's 16 input channels: those cells fail in `prune`.
    tiny_pipeline(
        d,
        "four",
        "{ method: wanda, pattern: \"2:4\" }",
        "  prune.method: [magnitude, wanda]\n  prune.pattern: [\"2:4\", \"3:7\"]\n",
        300,
    );
    let out = wanda(&["status", "four.yaml"], d);
    assert!(
        text(&out).contains("4 cell(s): 0 done, 0 running, 0 failed, 4 pending"),
        "{}",
        text(&out)
    );
    let out = wanda(&["run", "four.yaml", "--workers", "2"], d);
    assert_eq!(out.status.code(), Some(1), "two cells fail: {}", text(&out));
    assert!(
        text(&out).contains("2 cell(s) finished, 2 failed"),
        "{}",
        text(&out)
    );
    let out = wanda(&["status", "four.yaml", "--json"], d);
    let statuses: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let states: Vec<&str> = statuses
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["done", "failed", "done", "failed"]);
    let error = statuses[1]["error"].as_str().unwrap();
    assert!(
        error.contains("stage `prune` of cell `magnitude-")
            && error.contains("-0.4286-3:7` failed")
            && error.contains("not a multiple of the group size"),
        "{error}"
    );
    assert!(statuses[0]["perplexity"].as_f64().unwrap() > 1.0);
    let table = text(&wanda(&["status", "four.yaml"], d));
    assert!(
        table.contains("4 cell(s): 2 done, 0 running, 2 failed, 0 pending"),
        "{table}"
    );
    assert!(
        table.contains("log "),
        "the failure's log is named:\n{table}"
    );
}

/// A real Slurm: a 4-cell sweep submitted as a job array, one running task cancelled with
/// `scancel`, a resubmission that runs only the missing cell, and records equal to a local
/// run's. Needs a running cluster: `scripts/slurm-e2e.sh` starts one, runs this, and stops it.
#[test]
#[ignore = "needs a Slurm cluster: run scripts/slurm-e2e.sh"]
fn slurm_job_array_survives_a_cancelled_task_and_a_resubmission() {
    assert!(
        std::env::var_os("SLURM_CONF").is_some(),
        "SLURM_CONF is not set: start a cluster with scripts/slurm-e2e.sh (or scripts/slurm-cluster.sh)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A long evaluation text makes each cell run for seconds, long enough to cancel one.
    four_cells(d, 120_000);
    let started = Instant::now();
    let out = wanda(
        &[
            "submit",
            "four.yaml",
            "--slurm",
            "--max-parallel",
            "2",
            "--cpus-per-task",
            "1",
        ],
        d,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("array tasks 0-3%2"), "{}", text(&out));
    let manifest = Manifest::read(&d.join("results/four/slurm/manifest.json")).unwrap();

    // Cancel the first task seen running inside its cell (its attempt marker exists).
    let victim = wait_for(Duration::from_secs(120), || {
        let status = status_json(d);
        status.iter().find_map(|s| {
            let index = s["index"].as_u64()? as usize;
            let running = s["state"] == "running";
            let marker = manifest.cells[index]
                .result
                .with_file_name("attempt.json")
                .exists();
            (running && marker).then_some(index)
        })
    })
    .expect("no task was seen running within 120 s");
    let job = squeue_task(victim).expect("the running task is listed by squeue");
    let out = Command::new("scancel").arg(&job).output().unwrap();
    assert!(out.status.success(), "scancel {job}: {}", text(&out));

    wait_for(Duration::from_secs(300), || queue_empty().then_some(()))
        .expect("the array did not drain within 300 s");
    let status = status_json(d);
    let states: Vec<&str> = status
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    let mut expected = vec!["done"; 4];
    expected[victim] = "failed";
    assert_eq!(states, expected, "{status:#?}");

    let out = wanda(
        &["submit", "four.yaml", "--slurm", "--cpus-per-task", "1"],
        d,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("1 of 4 cell(s) as array tasks {victim} ")),
        "{}",
        text(&out)
    );
    wait_for(Duration::from_secs(300), || queue_empty().then_some(()))
        .expect("the resubmission did not drain within 300 s");
    let status = status_json(d);
    assert!(status.iter().all(|s| s["state"] == "done"), "{status:#?}");
    let out = wanda(&["submit", "four.yaml", "--slurm"], d);
    assert!(text(&out).contains("nothing to submit"), "{}", text(&out));
    let slurm_wall = started.elapsed();

    let out = wanda(&["run", "four.yaml", "--results", "local"], d);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(metrics(&d.join("results")), metrics(&d.join("local")));
    eprintln!(
        "slurm end to end: 4 cells, task {victim} cancelled and resubmitted, {:.1} s",
        slurm_wall.as_secs_f64()
    );
}

fn status_json(dir: &Path) -> Vec<serde_json::Value> {
    let out = wanda(&["status", "four.yaml", "--json"], dir);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The `<job>_<index>` squeue lists for cell `index` of job `wanda-four`.
fn squeue_task(index: usize) -> Option<String> {
    let out = Command::new("squeue")
        .args(["-h", "-r", "-n", "wanda-four", "-o", "%i"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .find(|t| t.ends_with(&format!("_{index}")))
        .map(str::to_string)
}

fn queue_empty() -> bool {
    Command::new("squeue")
        .args(["-h", "-n", "wanda-four"])
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.iter().all(u8::is_ascii_whitespace))
}

fn wait_for<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(v) = probe() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}
