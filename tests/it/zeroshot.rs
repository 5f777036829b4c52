//! Zero-shot accuracy against lm-evaluation-harness 0.4.13 itself: six documents of each of the
//! seven tasks in the hub's real schemas (`tests/fixtures/zeroshot`, made by
//! `scripts/make-zeroshot-data.py`), scored by lm-eval's `hf` model on SmolLM2-135M
//! (`scripts/zeroshot-reference.py`; its output is `lm-eval-reference.json`) and by wanda on the
//! same weights (the shared GGUF), in memory and streamed. The same data served by a hub
//! imitation on 127.0.0.1, and a pipeline's `eval: { zeroshot: }` through to `wanda table
//! --metric zeroshot`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use wanda::data::hub::HubRequest;
use wanda::eval::zeroshot::{self, Task, TaskSource};
use wanda::model::checkpoint::Layers;
use wanda::model::{self, Loaded, ModelRef};
use wanda::pipeline::RunRecord;

use crate::common::fake_hub::{walk, FakeHub, FakeRepo};
use crate::common::wanda_with_hub as wanda;
use crate::common::{shared, B};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/zeroshot");
const GGUF: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(Path::new(FIXTURES).join("lm-eval-reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every task's requests, gold indices and metrics agree with lm-eval's exactly, its
/// loglikelihoods to 1e-4 relative.
fn assert_matches_reference(run: &zeroshot::ZeroshotRun) {
    let reference = reference();
    for task in Task::ALL {
        let want = &reference["tasks"][task.name()];
        let got = &run.metrics.tasks[task.name()];
        assert_eq!(got.acc, want["acc"].as_f64().unwrap(), "{}", task.name());
        assert_eq!(got.acc_norm, want["acc_norm"].as_f64(), "{}", task.name());
        let docs = want["docs"].as_array().unwrap();
        let samples = &run.samples[task.name()];
        assert_eq!(samples.len(), docs.len());
        for (sample, doc) in samples.iter().zip(docs) {
            assert_eq!(sample.gold as u64, doc["gold"].as_u64().unwrap());
            let requests: Vec<(String, String)> =
                serde_json::from_value(doc["requests"].clone()).unwrap();
            assert_eq!(sample.requests, requests, "{}", task.name());
            let lls = doc["lls"].as_array().unwrap();
            assert_eq!(sample.loglikelihoods.len(), lls.len());
            for (ours, theirs) in sample.loglikelihoods.iter().zip(lls) {
                let theirs = theirs.as_f64().unwrap();
                assert!(
                    (ours - theirs).abs() <= 1e-4 * theirs.abs().max(1.0),
                    "{} document {}: {ours} vs lm-eval {theirs}",
                    task.name(),
                    sample.doc_id
                );
            }
        }
    }
}

/// All seven tasks of `source` scored on `loaded`.
fn score_all<M: Layers<B>>(loaded: &Loaded<M>, source: TaskSource<'_>) -> zeroshot::ZeroshotRun {
    zeroshot::evaluate(
        &loaded.model,
        &loaded.tokenizer,
        &loaded.config,
        &Task::ALL,
        source,
        None,
        |_, _, _| {},
    )
    .unwrap()
}

#[test]
fn all_seven_tasks_match_lm_eval_document_by_document() {
    let Some(gguf) = shared(GGUF) else {
        return;
    };
    let loaded = model::load::<B>(
        &ModelRef::parse(gguf.to_str().unwrap()).unwrap(),
        &Default::default(),
    )
    .unwrap();
    let run = score_all(&loaded, TaskSource::Local(Path::new(FIXTURES)));
    assert_matches_reference(&run);
    // The data's provenance names each file with its digest.
    let arc = &run.data["arc_easy"];
    assert_eq!(arc.files[0].name, "ARC-Easy/test-00000-of-00001.parquet");
    assert_eq!(arc.files[0].sha256.len(), 64);
    // `--limit` takes the first documents.
    let (docs, _) = zeroshot::task_documents(
        Task::Hellaswag,
        TaskSource::Local(Path::new(FIXTURES)),
        Some(2),
    )
    .unwrap();
    assert_eq!(docs.len(), 2);
}

#[test]
fn a_streamed_model_scores_like_lm_eval_too() {
    let Some(gguf) = shared(GGUF) else {
        return;
    };
    let store = tempfile::tempdir().unwrap();
    let origin = ModelRef::parse(gguf.to_str().unwrap()).unwrap();
    let loaded = model::load_streamed::<B>(&origin, &Default::default(), store.path()).unwrap();
    assert!(loaded.model.resident().is_none());
    let run = score_all(&loaded, TaskSource::Local(Path::new(FIXTURES)));
    assert_matches_reference(&run);
}

/// The fixture folder's files of one repository, by path inside it.
fn repo_files(repo: &str) -> BTreeMap<String, Vec<u8>> {
    let root = Path::new(FIXTURES).join(repo);
    walk(&root)
        .into_iter()
        .map(|p| {
            let name = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

fn fixture_hub() -> FakeHub {
    let repos: Vec<String> = Task::ALL.iter().map(|t| t.data().repo.to_owned()).collect();
    let mut repos: Vec<String> = repos;
    repos.sort();
    repos.dedup();
    FakeHub::start_many(
        repos
            .iter()
            .map(|r| {
                (
                    format!("datasets/{r}"),
                    FakeRepo {
                        files: repo_files(r),
                        token: None,
                        corrupt: false,
                    },
                )
            })
            .collect(),
    )
}

#[test]
fn task_data_comes_from_the_hub_then_from_its_cache_offline() {
    let Some(gguf) = shared(GGUF) else {
        return;
    };
    let hub = fixture_hub();
    let cache = tempfile::tempdir().unwrap();
    let access = |offline| HubRequest {
        endpoint: Some(hub.endpoint()),
        cache_dir: Some(cache.path().to_path_buf()),
        offline,
        ..HubRequest::default()
    };
    let loaded = model::load::<B>(
        &ModelRef::parse(gguf.to_str().unwrap()).unwrap(),
        &Default::default(),
    )
    .unwrap();
    let score = |offline| score_all(&loaded, TaskSource::Hub(&access(offline)));
    let online = score(false);
    assert_matches_reference(&online);
    assert_eq!(online.data["boolq"].repo, "aps/super_glue");
    assert_eq!(
        online.data["boolq"].files[0].name,
        "boolq/validation-00000-of-00001.parquet"
    );
    let offline = score(true);
    assert_eq!(offline.metrics, online.metrics);
}

#[test]
fn a_missing_task_split_and_a_bad_document_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = zeroshot::task_documents(Task::Boolq, TaskSource::Local(dir.path()), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("boolq") && err.contains("aps/super_glue/boolq") && err.contains("validation"),
        "{err}"
    );
    let folder = dir.path().join("nyu-mll/glue/rte");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("validation-00000-of-00001.jsonl"),
        "{\"sentence1\": \"a\", \"sentence2\": \"b\", \"label\": 0}\n{\"sentence1\": \"a\", \"label\": 1}\n",
    )
    .unwrap();
    let err = zeroshot::task_documents(Task::Rte, TaskSource::Local(dir.path()), None)
        .unwrap_err()
        .to_string();
    assert_eq!(err, "rte: document 1: it has no `sentence2`");
}

/// A pipeline pruning SmolLM2 by magnitude and scoring boolq and arc_easy (4 documents each)
/// from `data` (a local folder) or from the hub.
fn zeroshot_pipeline(dir: &Path, gguf: &Path, text: &Path, data: Option<&str>) -> PathBuf {
    let pipeline = dir.join("zeroshot.yaml");
    let data = data.map(|d| format!(", data: {d}")).unwrap_or_default();
    std::fs::write(
        &pipeline,
        format!(
            "name: zeroshot\nmodel: {{ gguf: {} }}\ncalibration: {{ text: {}, nsamples: 1, seqlen: 16 }}\nstages:\n  load: {{}}\n  prune: {{ method: magnitude, sparsity: 0.5 }}\n  eval:\n    perplexity: false\n    zeroshot: {{ tasks: [boolq, arc_easy], limit: 4{data} }}\n",
            gguf.display(),
            text.display(),
        ),
    )
    .unwrap();
    pipeline
}

fn only_record(results: &Path) -> RunRecord {
    let records: Vec<PathBuf> = walk(results)
        .into_iter()
        .filter(|p| p.ends_with("run.json"))
        .collect();
    assert_eq!(records.len(), 1);
    RunRecord::read(&records[0]).unwrap()
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_pipeline_records_zero_shot_accuracy_and_the_table_shows_it() {
    let (Some(gguf), Some(text)) = (
        shared(GGUF),
        shared("data/wikitext-2/wikitext2-v1-valid.txt"),
    ) else {
        return;
    };
    let hub = fixture_hub();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("hf");
    let local = dir.path().join("local");
    let results = local.join("results");
    std::fs::create_dir_all(&local).unwrap();
    let pipeline = zeroshot_pipeline(&local, &gguf, &text, Some(FIXTURES));
    let run = |pipeline: &Path, results: &Path, offline| {
        ok(&wanda(
            &[
                "run",
                pipeline.to_str().unwrap(),
                "--results",
                results.to_str().unwrap(),
            ],
            &hub,
            &home,
            offline,
        ))
    };
    run(&pipeline, &results, true);
    let record = only_record(&results);
    let z = record.metrics.zeroshot.clone().expect("zero-shot metrics");
    assert_eq!(z.tasks["boolq"].n, 4);
    assert_eq!(z.lm_eval, "0.4.13");
    assert!(z.tasks["arc_easy"].acc_norm.is_some() && z.tasks["boolq"].acc_norm.is_none());
    assert!((z.mean - (z.tasks["boolq"].acc + z.tasks["arc_easy"].acc) / 2.0).abs() < 1e-12);
    assert!(record.data.zeroshot["boolq"].dataset.starts_with("local:"));

    let table = ok(&wanda(
        &["table", results.to_str().unwrap(), "--metric", "zeroshot"],
        &hub,
        &home,
        true,
    ));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], "| acc % | boolq | arc_easy | mean |", "{table}");
    let values = format!(
        "| {:.2} | {:.2} | {:.2} |",
        100.0 * z.tasks["boolq"].acc,
        100.0 * z.tasks["arc_easy"].acc,
        100.0 * z.mean
    );
    // One pruned row: each of its values is its column's best (bold), accuracy being higher
    // is better.
    assert_eq!(lines[2].matches("**").count(), 6, "{table}");
    assert!(
        lines[2].replace("**", "").ends_with(&values),
        "{table}\n{values}"
    );

    // From the hub: offline with nothing cached fails before any work and names the task;
    // `wanda fetch` caches the task data; then the offline run gives the same metrics.
    let remote = dir.path().join("remote");
    std::fs::create_dir_all(&remote).unwrap();
    let pipeline = zeroshot_pipeline(&remote, &gguf, &text, None);
    let results = remote.join("results");
    let out = wanda(
        &[
            "run",
            pipeline.to_str().unwrap(),
            "--results",
            results.to_str().unwrap(),
        ],
        &hub,
        &home,
        true,
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("zero-shot (boolq)"), "{stderr}");
    let fetched = ok(&wanda(
        &["fetch", pipeline.to_str().unwrap()],
        &hub,
        &home,
        false,
    ));
    assert!(
        fetched.contains("aps/super_glue") && fetched.contains("allenai/ai2_arc"),
        "{fetched}"
    );
    run(&pipeline, &results, true);
    let record = only_record(&results);
    assert_eq!(record.metrics.zeroshot.as_ref(), Some(&z));
    assert_eq!(record.data.zeroshot["arc_easy"].repo, "allenai/ai2_arc");
}
