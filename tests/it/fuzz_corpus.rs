//! The fuzz inputs, replayed: the seed inputs (built here from tiny real files), every input in
//! `fuzz/regressions/<target>/` (tracked in git: each is a past crash) and whatever a local
//! fuzzing run left in `fuzz/corpus/<target>/` (generated, not tracked) go through their target
//! (`wanda::fuzzing::run`) on the stable toolchain, so CI re-checks every finding without
//! libFuzzer. `write_seed_corpora` (ignored; `scripts/fuzz-seed-corpus.sh`) writes the seeds
//! into `fuzz/corpus/` to start a fuzzing run from.

use std::path::{Path, PathBuf};

use wanda::fuzzing::{run, TARGETS};
use wanda::model::checkpoint::gguf::{GgmlType, GgufWriter};
use wanda::model::checkpoint::{save_hf_folder, SaveDtype, SaveSpec};

use crate::common::{tiny_config, tiny_model, tiny_tokenizer_json};
use crate::gguf_model::{config as gguf_config, write_gguf, Quant};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.is_file());
    files.sort();
    files
}

#[test]
fn every_seed_corpus_and_regression_input_replays_without_a_panic() {
    let seeds = seed_inputs();
    let mut replayed = 0;
    for target in TARGETS {
        let mut cases: Vec<(String, Vec<u8>)> = seeds
            .iter()
            .filter(|seed| seed.target == *target)
            .map(|seed| (format!("seed {}", seed.name), seed.bytes.clone()))
            .collect();
        assert!(
            !cases.is_empty(),
            "no seed input for the fuzz target `{target}`"
        );
        let corpus = inputs(&fuzz_dir().join("corpus").join(target));
        let regressions = inputs(&fuzz_dir().join("regressions").join(target));
        for path in corpus.iter().chain(&regressions) {
            cases.push((path.display().to_string(), std::fs::read(path).unwrap()));
        }
        for (name, data) in &cases {
            let outcome = std::panic::catch_unwind(|| run(target, data));
            assert!(
                outcome.is_ok(),
                "`{target}` panicked on {name}; write it to a file and reproduce with \
                 `cargo +nightly fuzz run {target} FILE`"
            );
            replayed += 1;
        }
    }
    assert!(replayed >= TARGETS.len());
    // The regressions are tracked in git; losing them would silently drop past crashes.
    for (target, file) in [
        ("gguf", "oom-layer-count"),
        ("tokenizer_json", "panic-decoder-not-json"),
    ] {
        assert!(
            fuzz_dir()
                .join("regressions")
                .join(target)
                .join(file)
                .is_file(),
            "fuzz/regressions/{target}/{file} is missing"
        );
    }
}

/// A GGUF with one tensor of every block type the loader dequantises, filled with a byte
/// pattern (k-quant super-blocks of 256, the others blocks of 32).
fn every_block_type() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", "llama");
    for (name, ty, block_bytes, per_block) in [
        ("f32", GgmlType::F32, 4usize, 1usize),
        ("f16", GgmlType::F16, 2, 1),
        ("bf16", GgmlType::BF16, 2, 1),
        ("q8_0", GgmlType::Q8_0, 34, 32),
        ("q4_0", GgmlType::Q4_0, 18, 32),
        ("q4_1", GgmlType::Q4_1, 20, 32),
        ("q4_k", GgmlType::Q4_K, 144, 256),
        ("q5_k", GgmlType::Q5_K, 176, 256),
        ("q6_k", GgmlType::Q6_K, 210, 256),
    ] {
        let elements = 256usize;
        let bytes: Vec<u8> = (0..elements / per_block * block_bytes)
            .map(|i| (i * 37 % 251) as u8 & 0x3f)
            .collect();
        w.tensor_raw(name, &[elements as u64], ty, bytes);
    }
    w.to_bytes().unwrap()
}

/// One seed input of a fuzz target.
struct Seed {
    target: &'static str,
    name: String,
    bytes: Vec<u8>,
}

/// The seed inputs, from tiny real files: GGUF models (f32, Q8_0, every block type), a
/// safetensors checkpoint and its sharded index, config.json, the repository's pipelines and
/// fixtures, tokenizer.json, and run.json records.
fn seed_inputs() -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut put = |target: &'static str, name: &str, bytes: &[u8]| {
        seeds.push(Seed {
            target,
            name: name.to_string(),
            bytes: bytes.to_vec(),
        });
    };
    let tmp = tempfile::tempdir().unwrap();

    let config = gguf_config();
    let model = tiny_model(&config, 3);
    for (quant, name) in [(Quant::F32, "f32.gguf"), (Quant::Q8_0, "q8_0.gguf")] {
        let path = tmp.path().join(name);
        write_gguf(&path, &config, &model, quant);
        put("gguf", name, &std::fs::read(&path).unwrap());
    }
    put("gguf", "every-block-type.gguf", &every_block_type());

    let tiny = tiny_config("LlamaForCausalLM", true);
    let folder = tmp.path().join("hf");
    save_hf_folder(
        &tiny_model(&tiny, 4),
        &tiny,
        &tiny_tokenizer_json(),
        &folder,
        &SaveSpec::new(SaveDtype::F32),
    )
    .unwrap();
    put(
        "safetensors",
        "tiny-f32.safetensors",
        &std::fs::read(folder.join("model.safetensors")).unwrap(),
    );
    put(
        "hf_config",
        "tiny.json",
        &std::fs::read(folder.join("config.json")).unwrap(),
    );
    put(
        "tokenizer_json",
        "word-level.json",
        tiny_tokenizer_json().as_bytes(),
    );
    let sharded = tmp.path().join("sharded");
    let mut spec = SaveSpec::new(SaveDtype::Bf16);
    spec.max_shard_bytes = 2_000;
    save_hf_folder(
        &tiny_model(&tiny, 5),
        &tiny,
        &tiny_tokenizer_json(),
        &sharded,
        &spec,
    )
    .unwrap();
    put(
        "safetensors_index",
        "index.json",
        &std::fs::read(sharded.join("model.safetensors.index.json")).unwrap(),
    );
    let first_shard = inputs(&sharded)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .unwrap();
    put(
        "safetensors",
        "tiny-bf16-shard.safetensors",
        &std::fs::read(first_shard).unwrap(),
    );
    for fixture in ["llama-3.2-1b", "llama-2-7b"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/models")
            .join(fixture)
            .join("config.json");
        put("hf_config", fixture, &std::fs::read(path).unwrap());
    }

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut yamls = inputs(&root.join("pipelines"));
    yamls.extend(inputs(&root.join("tests/fixtures/pipelines/valid")));
    yamls.extend(
        inputs(&root.join("tests/fixtures/pipelines/invalid"))
            .into_iter()
            .take(12),
    );
    for path in yamls {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        put("pipeline_yaml", &name, &std::fs::read(&path).unwrap());
    }

    let records = root.join("results/smollm2-135m-sweep");
    let mut cells: Vec<PathBuf> = std::fs::read_dir(&records)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("run.json"))
        .filter(|p| p.exists())
        .collect();
    cells.sort();
    for path in cells.iter().take(3) {
        let id = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy();
        put(
            "run_record",
            &format!("{id}.json"),
            &std::fs::read(path).unwrap(),
        );
    }
    seeds
}

/// Writes `fuzz/corpus/<target>/seed-*` from [`seed_inputs`], the starting corpus of a fuzzing
/// run (`scripts/fuzz-seed-corpus.sh`).
#[test]
#[ignore = "writes the seed corpora into fuzz/corpus"]
fn write_seed_corpora() {
    let corpus = fuzz_dir().join("corpus");
    for seed in seed_inputs() {
        let dir = corpus.join(seed.target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("seed-{}", seed.name)), &seed.bytes).unwrap();
    }
}
