//! Data sets by name from a hub imitation on 127.0.0.1, in the real repositories' layouts:
//! C4's gzip'd JSON lines (`tests/fixtures/data/c4`, made by `scripts/make-c4-fixture.py`) and
//! WikiText-2 as Parquet (written here from the shared text's paragraphs). The C4 draws are
//! compared with `scripts/c4-reference-draws.py`, a transcription of the reference's `get_c4`
//! run on the same fixture (its output is `tests/fixtures/data/c4/reference-draws.json`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use wanda::data::hub::HubRequest;
use wanda::data::sets::{calibration_set, evaluation_ids, DataError, DataSource, DatasetName};
use wanda::model::checkpoint::Tokenizer;
use wanda::pipeline::RunRecord;

use crate::common::fake_hub::{walk, FakeHub, FakeRepo, COMMIT};
use crate::common::shared;
use crate::common::wanda_with_hub as wanda;

const C4_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/data/c4");
const C4_TRAIN: &str = "en/c4-train.00000-of-01024.json.gz";
const C4_VALID: &str = "en/c4-validation.00000-of-00008.json.gz";
const WIKI_TEST: &str = "wikitext-2-raw-v1/test-00000-of-00001.parquet";
const WIKI_TRAIN: &str = "wikitext-2-raw-v1/train-00000-of-00001.parquet";
const GGUF: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const TOKENIZER: &str = "models/smollm2-135m-hf/tokenizer.json";
const RAW_TEST: &str = "data/wikitext-2/wikitext2-raw-test.txt";
const VALID: &str = "data/wikitext-2/wikitext2-v1-valid.txt";

/// `rows` as a Parquet file with one string column `column`, 1000 rows per row group.
fn parquet(column: &str, rows: &[&str]) -> Vec<u8> {
    let schema = Arc::new(
        parse_message_type(&format!(
            "message schema {{ REQUIRED BYTE_ARRAY {column} (UTF8); }}"
        ))
        .unwrap(),
    );
    let props = Arc::new(WriterProperties::builder().build());
    let mut bytes = Vec::new();
    let mut writer = SerializedFileWriter::new(&mut bytes, schema, props).unwrap();
    for chunk in rows.chunks(1000) {
        let mut group = writer.next_row_group().unwrap();
        let mut col = group.next_column().unwrap().unwrap();
        let values: Vec<ByteArray> = chunk.iter().map(|r| ByteArray::from(*r)).collect();
        col.typed::<ByteArrayType>()
            .write_batch(&values, None, None)
            .unwrap();
        col.close().unwrap();
        group.close().unwrap();
    }
    writer.close().unwrap();
    bytes
}

/// A public repository with `files`.
fn repo(files: BTreeMap<String, Vec<u8>>) -> FakeRepo {
    FakeRepo {
        files,
        token: None,
        corrupt: false,
    }
}

/// The C4 and WikiText-2 repositories with the given files.
fn hub(c4: BTreeMap<String, Vec<u8>>, wikitext: BTreeMap<String, Vec<u8>>) -> FakeHub {
    FakeHub::start_many(vec![
        ("datasets/allenai/c4".into(), repo(c4)),
        ("datasets/Salesforce/wikitext".into(), repo(wikitext)),
    ])
}

/// The C4 fixture files.
fn c4_files() -> BTreeMap<String, Vec<u8>> {
    [C4_TRAIN, C4_VALID]
        .iter()
        .map(|f| {
            (
                f.to_string(),
                std::fs::read(Path::new(C4_DIR).join(f)).unwrap(),
            )
        })
        .collect()
}

/// WikiText-2 as Parquet: the shared raw test text's paragraphs (split on "\n\n", so the
/// reference's join gives the text back) and the v1 validation text's as train.
fn wikitext_files(test: &str, train: &str) -> BTreeMap<String, Vec<u8>> {
    let test_rows: Vec<&str> = test.split("\n\n").collect();
    let train_rows: Vec<&str> = train.split("\n\n").collect();
    BTreeMap::from([
        (WIKI_TEST.to_string(), parquet("text", &test_rows)),
        (WIKI_TRAIN.to_string(), parquet("text", &train_rows)),
    ])
}

fn template(hub: &FakeHub, cache: &Path, offline: bool) -> HubRequest {
    HubRequest {
        endpoint: Some(hub.endpoint()),
        cache_dir: Some(cache.to_path_buf()),
        offline,
        ..HubRequest::default()
    }
}

fn reference_draws() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(Path::new(C4_DIR).join("reference-draws.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn as_usizes(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

#[test]
fn c4_draws_equal_the_reference_transcription() {
    let Some(tokenizer) = shared(TOKENIZER) else {
        return;
    };
    let tokenizer = Tokenizer::from_file(&tokenizer).unwrap();
    let hub = hub(c4_files(), BTreeMap::new());
    let cache = tempfile::tempdir().unwrap();
    let access = template(&hub, cache.path(), false);
    let c4 = DataSource::Named(DatasetName::C4);
    for case in reference_draws() {
        let (n, seqlen, seed) = (
            case["nsamples"].as_u64().unwrap() as usize,
            case["seqlen"].as_u64().unwrap() as usize,
            case["seed"].as_u64().unwrap(),
        );
        let (set, provenance) =
            calibration_set(&c4, &tokenizer, (n, seqlen, seed), &access).unwrap();
        eprintln!(
            "c4 {n} x {seqlen} seed {seed}: documents {:?} offsets {:?}",
            set.documents, set.offsets
        );
        assert_eq!(set.documents, as_usizes(&case["documents"]), "{case}");
        assert_eq!(set.offsets, as_usizes(&case["offsets"]), "{case}");
        for (window, first) in set
            .windows
            .iter()
            .zip(case["first_ids"].as_array().unwrap())
        {
            let first: Vec<u32> = as_usizes(first).iter().map(|&x| x as u32).collect();
            assert_eq!(window[..4], first[..]);
            assert_eq!(window.len(), seqlen);
        }
        assert_eq!(provenance.dataset, "c4");
        assert_eq!(provenance.files[0].name, C4_TRAIN);
        assert_eq!(provenance.commit.as_deref(), Some(COMMIT));

        let (ids, _) = evaluation_ids(&c4, &tokenizer, seqlen, &access).unwrap();
        assert_eq!(
            ids.len(),
            case["validation_tokens"].as_u64().unwrap() as usize
        );
        let head: Vec<u32> = as_usizes(&case["validation_head"])
            .iter()
            .map(|&x| x as u32)
            .collect();
        assert_eq!(ids[..8], head[..]);
    }
    // The document store was built once, beside the blob.
    let index = cache.path().join("datasets--allenai--c4/.wanda-index");
    assert_eq!(std::fs::read_dir(index).unwrap().count(), 1);
}

#[test]
fn wikitext2_rows_joined_give_the_shared_text_online_then_offline() {
    let (Some(tokenizer), Some(raw), Some(valid)) =
        (shared(TOKENIZER), shared(RAW_TEST), shared(VALID))
    else {
        return;
    };
    let tokenizer = Tokenizer::from_file(&tokenizer).unwrap();
    let raw = std::fs::read_to_string(raw).unwrap();
    let valid = std::fs::read_to_string(valid).unwrap();
    let hub = hub(BTreeMap::new(), wikitext_files(&raw, &valid));
    let cache = tempfile::tempdir().unwrap();
    let wiki = DataSource::Named(DatasetName::Wikitext2);

    let (ids, provenance) =
        evaluation_ids(&wiki, &tokenizer, 512, &template(&hub, cache.path(), false)).unwrap();
    assert_eq!(ids.len(), 304_986);
    assert_eq!(ids, tokenizer.encode(&raw).unwrap());
    assert_eq!(provenance.repo, "Salesforce/wikitext");
    assert_eq!(provenance.files.len(), 1);
    assert_eq!(provenance.files[0].name, WIKI_TEST);
    // The join rule on the cached Parquet rows gives the shared text byte for byte.
    let cached = cache
        .path()
        .join("datasets--Salesforce--wikitext/snapshots")
        .join(COMMIT)
        .join(WIKI_TEST);
    let mut rows = Vec::new();
    wanda::data::rows::for_each_row(&cached, "text", |row| {
        rows.push(row.to_owned());
        Ok(true)
    })
    .unwrap();
    let joined = rows.join("\n\n");
    use sha2::{Digest, Sha256};
    assert_eq!(
        format!("{:x}", Sha256::digest(joined.as_bytes())),
        "696cca6b65a171b0a358a4be6732cdfdf2dd6164a32e20fd70e3c13fc4dfae83",
        "SHA256SUMS of wikitext2-raw-test.txt"
    );

    // Offline, from the cache alone: the same ids, no request.
    let requests = hub.seen().len();
    let (again, _) =
        evaluation_ids(&wiki, &tokenizer, 512, &template(&hub, cache.path(), true)).unwrap();
    assert_eq!(again, ids);
    assert_eq!(hub.seen().len(), requests);

    // Calibration reads the train split joined with " ", as the reference does.
    let (set, provenance) = calibration_set(
        &wiki,
        &tokenizer,
        (4, 64, 0),
        &template(&hub, cache.path(), false),
    )
    .unwrap();
    assert_eq!(provenance.files[0].name, WIKI_TRAIN);
    let joined = valid.split("\n\n").collect::<Vec<_>>().join(" ");
    let expected =
        wanda::data::calibration::draw(&tokenizer.encode(&joined).unwrap(), 4, 64, 0).unwrap();
    assert_eq!(set.offsets, expected.offsets);

    // Offline without a cache: the error says what is missing.
    let empty = tempfile::tempdir().unwrap();
    let err = evaluation_ids(&wiki, &tokenizer, 512, &template(&hub, empty.path(), true))
        .unwrap_err()
        .to_string();
    assert!(err.contains("Salesforce/wikitext"), "{err}");
    assert!(err.contains("offline"), "{err}");
}

#[test]
fn hostile_files_are_errors_naming_them_and_leave_nothing_in_the_cache() {
    let good = parquet("text", &["a b c", "d e f"]);
    let mut truncated_parquet = good.clone();
    truncated_parquet.truncate(good.len() - 12);
    let train = std::fs::read(Path::new(C4_DIR).join(C4_TRAIN)).unwrap();
    let mut bad_crc = train.clone();
    let n = bad_crc.len();
    bad_crc[n - 8] ^= 0xff;
    let no_text = {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(b"{\"content\":\"no text column\"}\n")
            .unwrap();
        enc.finish().unwrap()
    };
    let empty_split = parquet("text", &[]);

    // (case, source, files served, expected in the error, removed from the cache)
    type Case<'a> = (
        &'a str,
        DataSource,
        BTreeMap<String, Vec<u8>>,
        &'a str,
        bool,
    );
    let cases: Vec<Case> = vec![
        (
            "truncated parquet",
            DataSource::Named(DatasetName::Wikitext2),
            BTreeMap::from([(WIKI_TEST.to_string(), truncated_parquet)]),
            "test-00000-of-00001.parquet",
            true,
        ),
        (
            "gzip with a bad crc",
            DataSource::Named(DatasetName::C4),
            BTreeMap::from([(C4_VALID.to_string(), bad_crc)]),
            "c4-validation.00000-of-00008.json.gz",
            true,
        ),
        (
            "json lines without text",
            DataSource::Named(DatasetName::C4),
            BTreeMap::from([(C4_VALID.to_string(), no_text)]),
            "has no column `text` (it has: content)",
            false,
        ),
        (
            "empty split",
            DataSource::Named(DatasetName::Wikitext2),
            BTreeMap::from([(WIKI_TEST.to_string(), empty_split)]),
            "holds no text",
            false,
        ),
    ];
    for (name, source, files, expected, evicted) in cases {
        let hub = match &source {
            DataSource::Named(DatasetName::C4) => hub(files, BTreeMap::new()),
            _ => hub(BTreeMap::new(), files),
        };
        let cache = tempfile::tempdir().unwrap();
        let err = evaluation_ids(&source, &Words, 64, &template(&hub, cache.path(), false))
            .expect_err(name);
        let text = err.to_string();
        assert!(text.contains(expected), "{name}: {text}");
        assert!(
            matches!(err, DataError::Rows { .. } | DataError::Empty { .. }),
            "{name}: {err:?}"
        );
        if evicted {
            assert!(
                text.contains("removed from the hub cache"),
                "{name}: {text}"
            );
            let left: Vec<PathBuf> = walk(cache.path())
                .into_iter()
                .filter(|p| {
                    p.to_string_lossy().contains("/blobs/")
                        || p.to_string_lossy().contains("/snapshots/")
                })
                .collect();
            assert!(left.is_empty(), "{name}: left in the cache: {left:?}");
        }
    }
}

/// Writes the paper-protocol pipeline (C4 calibration, WikiText-2 evaluation) on SmolLM2.
fn paper_pipeline(dir: &Path, gguf: &Path) -> PathBuf {
    let path = dir.join("paper.yaml");
    std::fs::write(
        &path,
        format!(
            "name: paper\nseed: 0\ndevice: cpu\nmodel: {{ gguf: {} }}\n\
             calibration: {{ dataset: c4, nsamples: 8, seqlen: 64 }}\n\
             evaluation: {{ dataset: wikitext2, seqlen: 128, windows: 4 }}\n\
             stages:\n  load: {{}}\n  calibrate: {{}}\n  prune: {{ method: wanda, sparsity: 0.5 }}\n  eval: {{}}\n",
            gguf.display()
        ),
    )
    .unwrap();
    path
}

fn only_record(results: &Path) -> RunRecord {
    let cells: Vec<PathBuf> = std::fs::read_dir(results.join("paper"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("run.json").exists())
        .collect();
    assert_eq!(cells.len(), 1, "{cells:?}");
    RunRecord::read(&cells[0].join("run.json")).unwrap()
}

#[test]
fn a_pipeline_runs_from_c4_and_wikitext2_then_offline_from_the_cache() {
    let (Some(gguf), Some(raw), Some(valid)) = (shared(GGUF), shared(RAW_TEST), shared(VALID))
    else {
        return;
    };
    let raw = std::fs::read_to_string(raw).unwrap();
    let valid = std::fs::read_to_string(valid).unwrap();
    let hub = hub(c4_files(), wikitext_files(&raw, &valid));
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("hf");
    let pipeline = paper_pipeline(dir.path(), &gguf);
    let pipeline_arg = pipeline.to_str().unwrap();

    // `wanda fetch` downloads the data files and says what is cached.
    let out = wanda(&["fetch", pipeline_arg], &hub, &home, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    for expected in [
        "calibration (c4)",
        C4_TRAIN,
        "evaluation (wikitext2)",
        WIKI_TEST,
        "all inputs cached",
    ] {
        assert!(stdout.contains(expected), "{expected}: {stdout}");
    }
    // C4's document store is built by the fetch, not by the first run.
    let store = home.join("hub/datasets--allenai--c4/.wanda-index");
    assert_eq!(std::fs::read_dir(store).unwrap().count(), 1);

    // `wanda eval --dataset wikitext2` equals `--text` on the shared file.
    let gguf_arg = gguf.to_str().unwrap();
    let raw_path = shared(RAW_TEST).unwrap();
    let eval = |source: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "eval",
            "--model",
            gguf_arg,
            "--seqlen",
            "128",
            "--windows",
            "2",
        ];
        args.extend_from_slice(source);
        args.extend_from_slice(&["--json", "--device", "cpu"]);
        let out = wanda(&args, &hub, &home, false);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let by_name = eval(&["--dataset", "wikitext2"]);
    let by_file = eval(&["--text", raw_path.to_str().unwrap()]);
    assert_eq!(by_name["perplexity"], by_file["perplexity"]);
    assert_eq!(by_name["text_tokens"], 304_986);

    let online = dir.path().join("online");
    let out = wanda(
        &["run", pipeline_arg, "--results", online.to_str().unwrap()],
        &hub,
        &home,
        false,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let record = only_record(&online);
    let calibration = record.data.calibration.as_ref().expect("c4 provenance");
    assert_eq!(calibration.dataset, "c4");
    assert_eq!(calibration.files[0].name, C4_TRAIN);
    assert_eq!(
        calibration.files[0].sha256,
        wanda::data::hash::sha256_file(&Path::new(C4_DIR).join(C4_TRAIN)).unwrap()
    );
    let evaluation = record
        .data
        .evaluation
        .as_ref()
        .expect("wikitext2 provenance");
    assert_eq!(evaluation.files[0].name, WIKI_TEST);
    assert_eq!(record.hashes.calibration, Some(calibration.digest()));
    let ppl = record.metrics.perplexity.unwrap();
    assert!(ppl.is_finite() && ppl > 1.0, "{ppl}");

    // Offline from the cache: the same perplexity to the bit.
    let offline = dir.path().join("offline");
    let out = wanda(
        &["run", pipeline_arg, "--results", offline.to_str().unwrap()],
        &hub,
        &home,
        true,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(only_record(&offline).metrics.perplexity, Some(ppl));

    // Offline without the cache: stopped before any cell, naming the file and the fix.
    std::fs::remove_dir_all(&home).unwrap();
    let none = dir.path().join("none");
    let out = wanda(
        &["run", pipeline_arg, "--results", none.to_str().unwrap()],
        &hub,
        &home,
        true,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(C4_TRAIN), "{stderr}");
    assert!(stderr.contains("wanda fetch"), "{stderr}");
    assert!(!none.join("paper").exists());
}

/// Words as ids: the id of each word is its index in the joined text's words, so the ids say
/// exactly which rows were read and in which order.
struct Words;

impl wanda::data::TextEncoder for Words {
    type Error = std::fmt::Error;
    fn encode_text(&self, text: &str) -> Result<Vec<u32>, std::fmt::Error> {
        Ok(text
            .split(' ')
            .map(|w| w.trim_start_matches('w').parse().unwrap_or(u32::MAX))
            .collect())
    }
}

#[test]
fn ptb_and_any_hub_data_set_are_found_by_split_and_joined() {
    let rows =
        |from: u32, n: u32| -> Vec<String> { (from..from + n).map(|i| format!("w{i}")).collect() };
    let refs = |v: &[String]| -> Vec<u8> {
        let r: Vec<&str> = v.iter().map(String::as_str).collect();
        parquet("sentence", &r)
    };
    let ptb_files = BTreeMap::from([
        (
            "penn_treebank/train-00000-of-00001.parquet".to_string(),
            refs(&rows(0, 50)),
        ),
        (
            "penn_treebank/test-00000-of-00001.parquet".to_string(),
            refs(&rows(100, 7)),
        ),
        (
            "penn_treebank/validation-00000-of-00001.parquet".to_string(),
            refs(&rows(200, 5)),
        ),
        (
            "ptb_text_only.py".to_string(),
            b"# a loading script".to_vec(),
        ),
    ]);
    let own_files = BTreeMap::from([
        (
            "cfg/validation-00000-of-00002.parquet".to_string(),
            refs(&rows(0, 3)),
        ),
        (
            "cfg/validation-00001-of-00002.parquet".to_string(),
            refs(&rows(3, 2)),
        ),
        (
            "cfg/test-00000-of-00001.parquet".to_string(),
            refs(&rows(9, 2)),
        ),
        (
            "other/validation-00000-of-00001.parquet".to_string(),
            refs(&rows(50, 2)),
        ),
    ]);
    let hub = FakeHub::start_many(vec![
        (
            "datasets/ptb-text-only/ptb_text_only".into(),
            repo(ptb_files),
        ),
        ("datasets/org/own".into(), repo(own_files)),
    ]);
    let cache = tempfile::tempdir().unwrap();
    let access = template(&hub, cache.path(), false);

    // PTB: the test split's sentences joined with " " (SparseGPT's `get_ptb`).
    let ptb = DataSource::Named(DatasetName::Ptb);
    let (ids, provenance) = evaluation_ids(&ptb, &Words, 4, &access).unwrap();
    assert_eq!(ids, (100..107).collect::<Vec<u32>>());
    assert_eq!(
        provenance.files[0].name,
        "penn_treebank/test-00000-of-00001.parquet"
    );
    let (set, _) = calibration_set(&ptb, &Words, (3, 4, 0), &access).unwrap();
    assert!(set.windows.iter().all(|w| w.len() == 4 && w[0] < 50));

    // Any data set: the split's shards in order; `files` instead of the split.
    let own = |split: Option<&str>, files: &[&str]| {
        DataSource::Hub(wanda::data::sets::HubData {
            repo: "org/own".into(),
            revision: None,
            config: Some("cfg".into()),
            split: split.map(str::to_owned),
            column: "sentence".into(),
            files: files.iter().map(|f| f.to_string()).collect(),
        })
    };
    // Rows are joined with "\n\n": the encoder sees "w0\n\nw1…", one id per shard row here.
    struct Rows;
    impl wanda::data::TextEncoder for Rows {
        type Error = std::fmt::Error;
        fn encode_text(&self, text: &str) -> Result<Vec<u32>, std::fmt::Error> {
            Ok(text
                .split("\n\n")
                .map(|w| w[1..].parse().unwrap())
                .collect())
        }
    }
    let (ids, provenance) =
        evaluation_ids(&own(Some("validation"), &[]), &Rows, 4, &access).unwrap();
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    assert_eq!(provenance.dataset, "hub:org/own");
    assert_eq!(provenance.files.len(), 2);
    let chosen = own(
        None,
        &[
            "other/validation-00000-of-00001.parquet",
            "cfg/test-00000-of-00001.parquet",
        ],
    );
    let (ids, _) = evaluation_ids(&chosen, &Rows, 4, &access).unwrap();
    assert_eq!(ids, [50, 51, 9, 10]);
    let err = evaluation_ids(&own(Some("train"), &[]), &Rows, 4, &access)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no Parquet or JSON-lines files for split `train`"),
        "{err}"
    );
    assert!(err.contains("`files:`"), "{err}");
}

#[test]
fn fetch_lists_everything_the_paper_pipeline_reads() {
    let (Some(raw), Some(valid)) = (shared(RAW_TEST), shared(VALID)) else {
        return;
    };
    let (raw, valid) = (
        std::fs::read_to_string(raw).unwrap(),
        std::fs::read_to_string(valid).unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    crate::common::save_tiny_hf_folder(&model, 3);
    let model_files: BTreeMap<String, Vec<u8>> = std::fs::read_dir(&model)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    let hub = FakeHub::start_many(vec![
        ("meta-llama/Llama-2-7b-hf".into(), repo(model_files)),
        ("datasets/allenai/c4".into(), repo(c4_files())),
        (
            "datasets/Salesforce/wikitext".into(),
            repo(wikitext_files(&raw, &valid)),
        ),
    ]);
    let home = dir.path().join("hf");
    let pipeline = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/pipelines/llama2-7b-paper.yaml"
    );
    let out = wanda(&["fetch", "--dry-run", pipeline], &hub, &home, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("3 input(s) not cached"), "{stdout}");
    let out = wanda(&["fetch", pipeline], &hub, &home, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    for expected in [
        "model                      meta-llama/Llama-2-7b-hf@main",
        "calibration (c4)           allenai/c4@main",
        "evaluation (wikitext2)     Salesforce/wikitext@main",
        "all inputs cached",
    ] {
        assert!(stdout.contains(expected), "{expected}: {stdout}");
    }
    // Everything is now in the cache: offline, nothing is missing.
    let out = wanda(&["fetch", "--dry-run", pipeline], &hub, &home, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
