//! `wanda run` end to end on a tiny model: a 3 methods × 4 ratios sweep writes one run.json per
//! cell, a re-run skips them all, and a sweep killed half way resumes with only the missing cells.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wanda::pipeline::RunRecord;

use crate::common::{output_ok, save_tiny_hf_folder, tiny_text};

/// A folder with a tiny model, texts and a 12-cell sweep pipeline; returns the pipeline path.
pub(crate) fn sweep_fixture(dir: &Path) -> PathBuf {
    save_tiny_hf_folder(&dir.join("tiny"), 8);
    std::fs::write(dir.join("calib.txt"), tiny_text(400)).unwrap();
    std::fs::write(dir.join("eval.txt"), tiny_text(300)).unwrap();
    let pipeline = dir.join("sweep.yaml");
    std::fs::write(
        &pipeline,
        r#"name: tiny-sweep
seed: 0
device: cpu
model: { path: tiny }
calibration: { text: calib.txt, nsamples: 4, seqlen: 16 }
evaluation: { text: eval.txt, seqlen: 16 }
stages:
  load: {}
  calibrate: {}
  prune: { method: wanda, sparsity: 0.5 }
  eval: {}
  save: {}
sweep:
  prune.method: [magnitude, wanda, sparsegpt]
  prune.sparsity: [0.2, 0.4, 0.6, 0.8]
"#,
    )
    .unwrap();
    pipeline
}

fn wanda(pipeline: &Path, results: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wanda"));
    cmd.arg("run").arg(pipeline).arg("--results").arg(results);
    cmd
}

fn records(results: &Path) -> Vec<RunRecord> {
    let dir = results.join("tiny-sweep");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<RunRecord> = entries
        .filter_map(|e| {
            let path = e.ok()?.path().join("run.json");
            path.exists()
                .then(|| RunRecord::read(&path).expect("every run.json is complete"))
        })
        .collect();
    out.sort_by(|a, b| a.cell.label.cmp(&b.cell.label));
    out
}

#[test]
fn sweep_runs_every_cell_once_and_a_rerun_skips_them() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = sweep_fixture(dir.path());
    let results = dir.path().join("results");
    let out = wanda(&pipeline, &results).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = records(&results);
    assert_eq!(recs.len(), 12);
    // The model's hash (taken while it loads) is the folder's config and weights, in name order.
    let tiny = dir.path().join("tiny");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&tiny)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.ends_with("config.json") || p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let folder_hash = wanda::data::hash::sha256_files(&paths).unwrap();
    for r in &recs {
        assert_eq!(r.hashes.model.as_deref(), Some(folder_hash.as_str()));
        let ppl = r.metrics.perplexity.expect("every cell is evaluated");
        assert!(ppl.is_finite() && ppl > 1.0, "{}: {ppl}", r.cell.label);
        let target: f64 = r.cell.values["prune.sparsity"].as_f64().unwrap();
        let total = r.sparsity.total.unwrap();
        // Magnitude prunes ties at the threshold too, so it may exceed the target slightly.
        assert!(
            total >= target - 0.07 && total <= target + 0.02,
            "{}: {total}",
            r.cell.label
        );
        assert!(r.timings.stages.contains_key("prune"));
        assert_eq!(
            (r.effective.nsamples, r.effective.seqlen),
            (Some(4), Some(16))
        );
        assert!(r.metrics.other.contains_key("calibration_offsets_hash"));
        assert!(r.hashes.model.is_some() && r.hashes.evaluation.is_some());
        if Path::new(env!("CARGO_MANIFEST_DIR")).join(".git").exists() {
            let commit = r.versions.git_commit.as_deref().unwrap_or_default();
            assert!(
                commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()),
                "{commit:?}"
            );
        }
        assert!(dir
            .path()
            .join("results/tiny-sweep")
            .join(&r.cell.id.0)
            .join("memory_log.csv")
            .exists());
    }
    // Higher sparsity hurts wanda's perplexity on the same model.
    let wanda: Vec<f64> = recs
        .iter()
        .filter(|r| r.cell.label.starts_with("wanda"))
        .map(|r| r.metrics.perplexity.unwrap())
        .collect();
    assert!(wanda[3] > wanda[0], "{wanda:?}");

    let again = wanda_rerun(&pipeline, &results);
    assert!(
        again.contains("0 cell(s) finished, 12 already finished"),
        "{again}"
    );
}

fn wanda_rerun(pipeline: &Path, results: &Path) -> String {
    let out = wanda(pipeline, results).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_killed_sweep_resumes_with_only_the_missing_cells() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = sweep_fixture(dir.path());
    let results = dir.path().join("results");
    let mut child = wanda(&pipeline, &results)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while records(&results).is_empty() && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = records(&results);
    assert!(
        !before.is_empty(),
        "the sweep should have finished a cell before the kill"
    );
    let out = wanda_rerun(&pipeline, &results);
    let expected = format!(
        "{} cell(s) finished, {} already finished",
        12 - before.len(),
        before.len()
    );
    assert!(out.contains(&expected), "{out}");
    let after = records(&results);
    assert_eq!(after.len(), 12);
    // Cells finished before the kill were left exactly as they were.
    for r in &before {
        let same = after.iter().find(|a| a.cell.id == r.cell.id).unwrap();
        assert_eq!(same, r);
    }
}

/// A one-cell tiny pipeline with `estimate` and `gate` and the given gate options.
fn gate_fixture(dir: &Path, gate: &str) -> PathBuf {
    sweep_fixture(dir);
    let pipeline = dir.join("gated.yaml");
    std::fs::write(
        &pipeline,
        format!(
            r#"name: gated
seed: 0
device: cpu
model: {{ path: tiny }}
calibration: {{ text: calib.txt, nsamples: 8, seqlen: 16 }}
evaluation: {{ text: eval.txt, seqlen: 16 }}
stages:
  load: {{}}
  estimate: {{}}
  gate: {gate}
  calibrate: {{}}
  prune: {{ method: wanda, sparsity: 0.5 }}
  eval: {{}}
"#
        ),
    )
    .unwrap();
    pipeline
}

/// The estimated peak of the gated fixture's cell at `batch` samples per forward pass.
fn gated_peak(pipeline: &Path, batch: usize) -> u64 {
    use wanda::memory::device::DeviceChoice;
    use wanda::memory::estimate::estimate_prune;
    use wanda::model::arch::Place;
    let plan = wanda::pipeline::plan::validate(pipeline).unwrap();
    let (shape, _) =
        wanda::model::inspect(&wanda::model::ModelRef::Folder(plan.base_dir.join("tiny"))).unwrap();
    let mut run = wanda::stages::requested_run(
        &plan.cells[0].spec,
        &plan.base_dir,
        DeviceChoice::CPU,
        !plan.prunes_in_place(),
    )
    .unwrap();
    run.batch = batch;
    estimate_prune(&shape, &run).peak(Place::Device).1
}

/// The gated fixture's one finished record under `results`.
fn gated_record(pipeline: &Path, results: &Path) -> RunRecord {
    let out = wanda(pipeline, results).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let cell = std::fs::read_dir(results.join("gated"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("run.json").exists())
        .expect("one finished cell");
    RunRecord::read(&cell.join("run.json")).unwrap()
}

/// A budget the fixture fits only with one sample per forward pass: the gate lowers the batch,
/// which changes no number — the perplexity equals the ungated run's to the bit — and keeps
/// every calibration sample. (Halving nsamples is tested on the estimator's own shapes in
/// `memory::gate` and by the dry runs below: on a model this small the tokeniser's constant
/// outweighs what a sample holds once the batch is 1.)
#[test]
fn the_gate_lowers_the_batch_first_and_records_the_effective_values() {
    let dir = tempfile::tempdir().unwrap();
    let probe = gate_fixture(dir.path(), "{}");
    let (one, eight) = (gated_peak(&probe, 1), gated_peak(&probe, 8));
    assert!(one < eight, "{one} {eight}");
    let free = gated_record(
        &gate_fixture(dir.path(), "{ budget: 100GiB }"),
        &dir.path().join("free"),
    );
    let budget = (one as f64 / 0.9).ceil() as u64;
    let record = gated_record(
        &gate_fixture(
            dir.path(),
            &format!("{{ budget: {budget}, floor: {{ nsamples: 2, seqlen: 8 }} }}"),
        ),
        &dir.path().join("tight"),
    );
    assert_eq!(free.effective.gate.as_deref(), Some("fits as requested"));
    assert_eq!(record.effective.nsamples, Some(8));
    assert_eq!(record.effective.seqlen, Some(16));
    assert!(
        record.effective.gate.as_deref().is_some_and(|g| g
            .starts_with("calibration.batch 8 → 4 (halved to fit; the same numbers)")
            && !g.contains("nsamples")),
        "{:?}",
        record.effective.gate
    );
    assert_eq!(record.metrics.perplexity, free.metrics.perplexity);
    assert_eq!(
        record.memory.estimated_peak_bytes.map(|p| p <= budget),
        Some(true)
    );
}

#[test]
fn a_run_that_cannot_fit_halts_with_exit_1_and_writes_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = gate_fixture(dir.path(), "{ budget: 1MiB }");
    let results = dir.path().join("results");
    let out = wanda(&pipeline, &results).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("does not fit") && stderr.contains("raise `budget` to at least"),
        "{stderr}"
    );
    assert!(records(&results).is_empty());
}

/// `wanda run --dry-run` of `tests/fixtures/gate/{name}` with `extra` arguments: its stdout,
/// once it succeeded.
fn gate_dry_run(name: &str, extra: &[&str]) -> String {
    let pipeline = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gate")
        .join(name);
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args(["run", "--dry-run"])
        .args(extra)
        .arg(&pipeline)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}");
    stdout
}

/// What a dry run's gate changed, in order: the first word of each `before → after` line.
fn gate_steps(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.contains(" → "))
        .map(|l| l.split_whitespace().next().unwrap_or_default())
        .collect()
}

#[test]
fn dry_run_shows_the_gate_halving_a_context_length_seqlen_on_a_16_gib_gpu() {
    let stdout = gate_dry_run("llama1b-16gib.yaml", &[]);
    assert!(stdout.contains("budget 16.00 GiB"), "{stdout}");
    // Attention in blocks of query rows holds no seqlen² scores: 8 windows of 32768 fit.
    assert!(
        stdout.contains(
            "effective: calibration.nsamples 8, calibration.seqlen 32768, evaluation.seqlen 2048, streaming off"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("fits"), "{stdout}");
}

/// Llama-2-70B (config only) at the paper's 128 × 2048 on a 24 GiB GPU: the steps that change
/// no number (batch 1, the calibration activations on the host), then streaming (one layer of
/// 70B's 80 on the device), and it fits with the paper's calibration sizes.
#[test]
fn dry_run_streams_a_70b_model_on_a_24_gib_gpu_with_the_papers_calibration() {
    let stdout = gate_dry_run("llama70b-24gib.yaml", &[]);
    assert_eq!(
        gate_steps(&stdout),
        [
            "calibration.batch",
            "calibration.activations",
            "streaming",
            "estimated"
        ],
        "{stdout}"
    );
    assert!(stdout.contains("281.93 GiB → 9.48 GiB   fits"), "{stdout}");
    assert!(
        stdout.contains(
            "effective: calibration.nsamples 128, calibration.seqlen 2048, evaluation.seqlen 2048, streaming on"
        ),
        "{stdout}"
    );
}

/// Llama-3.2-1B in 8 GiB: batch 1 with the activations on the host, then the calibration sizes
/// at their floors, and it still does not fit (the evaluation at 2048 holds the 4.6 GiB of f32
/// weights, the head's operands and 2048 rows of logits); layer streaming, listed last by
/// default, keeps one layer and the embeddings in memory and makes it fit.
#[test]
fn dry_run_counts_on_layer_streaming_after_the_calibration_sizes() {
    let stdout = gate_dry_run("llama1b-16gib.yaml", &["--budget", "8GiB"]);
    assert_eq!(
        gate_steps(&stdout),
        [
            "calibration.batch",
            "calibration.activations",
            "calibration.nsamples",
            "calibration.seqlen",
            "streaming",
            "estimated"
        ],
        "{stdout}"
    );
    assert!(stdout.contains("→ 5.13 GiB   fits"), "{stdout}");
    assert!(stdout.contains("streaming on"), "{stdout}");
}

/// For Wanda (mask only) and SparseGPT (mask and weight updates, so any activation that differs
/// in its last bit shows in the perplexity), each cell in its own process and its rerun in
/// another. SparseGPT differed here by 1e-9…5e-7 relative until RMSNorm stopped using
/// burn-ndarray's alignment-dependent approximate `recip`.
#[test]
fn rerun_of_a_record_gives_the_identical_perplexity() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = sweep_fixture(dir.path());
    for label in ["wanda-0.6-unstructured", "sparsegpt-0.6-unstructured"] {
        let results = dir.path().join(label);
        output_ok(wanda(&pipeline, &results).args(["--only", label]));
        let original = records(&results).remove(0);
        assert_eq!(original.cell.label, label);
        rerun_matches(&results, &original);
    }
    rerun_of_a_refused_config_names_the_record(&dir.path().join("wanda-0.6-unstructured"));
}

/// A record whose config the pipeline check refuses (here edited by hand) is named with the
/// problem, not a line of the pipeline text `rerun` generated from it.
fn rerun_of_a_refused_config_names_the_record(results: &Path) {
    let record = records(results).remove(0);
    let folder = results.join("tiny-sweep").join(&record.cell.id.0);
    let mut edited: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("run.json")).unwrap()).unwrap();
    let stages = edited["config"]["stages"].as_array_mut().unwrap();
    let prune = stages.iter_mut().find(|s| s["kind"] == "prune").unwrap();
    prune["sparsity"] = 1.5.into();
    let path = folder.join("edited.json");
    std::fs::write(&path, serde_json::to_vec(&edited).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .arg("rerun")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let expected = format!(
        "error: the config in {}: `prune.sparsity` is `1.5`, outside [0, 1)",
        path.display()
    );
    assert!(stderr.starts_with(&expected), "{stderr}");
    assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
}

/// Reruns `original`'s record from another working directory and checks the bits.
fn rerun_matches(results: &Path, original: &RunRecord) {
    let record_path = results
        .join("tiny-sweep")
        .join(&original.cell.id.0)
        .join("run.json");
    // From another working directory: the record anchors its paths itself.
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .arg("rerun")
        .arg(&record_path)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("identical to the record"), "{stdout}");
    let again = RunRecord::read(
        &record_path
            .parent()
            .unwrap()
            .join("rerun/tiny-sweep")
            .join(&original.cell.id.0)
            .join("run.json"),
    )
    .unwrap();
    assert_eq!(again.metrics.perplexity, original.metrics.perplexity);
    assert_eq!(again.sparsity, original.sparsity);
}

/// A run whose inputs are all small (a tiny model, short texts) hashes them directly and makes
/// no digest cache folder (`WANDA_DIGEST_CACHE`), while its record still has every hash.
#[test]
fn small_inputs_open_no_digest_cache() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = sweep_fixture(dir.path());
    let results = dir.path().join("results");
    let cache = dir.path().join("digests");
    output_ok(
        wanda(&pipeline, &results)
            .args(["--only", "wanda-0.4-unstructured"])
            .env("WANDA_DIGEST_CACHE", &cache),
    );
    let recs = records(&results);
    assert_eq!(recs.len(), 1);
    assert!(recs[0].hashes.model.is_some() && recs[0].hashes.evaluation.is_some());
    assert!(!cache.exists(), "a digest cache was made for small files");
}
