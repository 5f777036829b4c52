//! Folders that ship the slow GPT-2 style tokenizer (`vocab.json`, `merges.txt`; OPT's hub
//! repositories) instead of a `tokenizer.json`: the ids are transformers' (fixture made by
//! `scripts/make-bpe-tokenizer-fixture.py`), the hub fetches them, and at scale (SmolLM2's
//! vocabulary and merges written out as the two files) they are the `tokenizer.json` ids.

use std::path::Path;

use wanda::model::checkpoint::Tokenizer;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tokenizers/opt-style"
);

/// The fixture's texts and transformers' ids for them, OPT's way and GPT-2's.
fn expected() -> (Vec<String>, Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let text = std::fs::read_to_string(Path::new(FIXTURE).join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |key: &str| serde_json::from_value(v[key].clone()).unwrap();
    let texts = serde_json::from_value(v["texts"].clone()).unwrap();
    (texts, ids("opt"), ids("gpt2"))
}

/// A copy of the fixture with only `files` of it.
fn copy_of(files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in files {
        std::fs::copy(Path::new(FIXTURE).join(file), dir.path().join(file)).unwrap();
    }
    dir
}

#[test]
fn vocab_and_merges_give_the_ids_transformers_gives() {
    let (texts, opt, gpt2) = expected();
    let tokenizer = Tokenizer::from_folder(Path::new(FIXTURE)).unwrap();
    for (text, ids) in texts.iter().zip(&opt) {
        assert_eq!(&tokenizer.encode(text).unwrap(), ids, "OPT: {text:?}");
    }
    // Without OPT's tokenizer config: GPT-2's defaults, no BOS and no special tokens.
    let bare = copy_of(&["vocab.json", "merges.txt"]);
    let tokenizer = Tokenizer::from_folder(bare.path()).unwrap();
    for (text, ids) in texts.iter().zip(&gpt2) {
        assert_eq!(&tokenizer.encode(text).unwrap(), ids, "GPT-2: {text:?}");
    }
    assert_eq!(tokenizer.decode(&gpt2[1]).unwrap(), texts[1]);
}

#[test]
fn a_missing_merges_file_is_an_error_naming_it() {
    let dir = copy_of(&["vocab.json", "tokenizer_config.json"]);
    let err = Tokenizer::from_folder(dir.path()).unwrap_err().to_string();
    assert!(err.contains("merges.txt"), "{err}");
}

#[test]
fn the_hub_fetches_the_slow_tokenizer_where_there_is_no_tokenizer_json() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-opt");
    let mut files: Vec<(String, Vec<u8>)> = ["config.json", "model.safetensors"]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(model.join(f)).unwrap()))
        .collect();
    for f in [
        "vocab.json",
        "merges.txt",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ] {
        files.push((
            f.to_string(),
            std::fs::read(Path::new(FIXTURE).join(f)).unwrap(),
        ));
    }
    let (dir, _cache) = crate::common::fetch_from_fake_hub(files.into_iter().collect());
    let (texts, opt, _) = expected();
    let tokenizer = Tokenizer::from_folder(&dir).unwrap();
    assert_eq!(tokenizer.encode(&texts[0]).unwrap(), opt[0]);
}

/// SmolLM2's tokenizer is a GPT-2 style byte-level BPE: written out as `vocab.json` and
/// `merges.txt`, it gives its `tokenizer.json`'s ids on the whole WikiText-2 test text (as
/// transformers does: `scripts/make-bpe-tokenizer-fixture.py --check-text`).
#[test]
fn smollm2_as_vocab_and_merges_tokenizes_wikitext_as_its_tokenizer_json() {
    let (Some(json), Some(text)) = (
        crate::common::shared("models/smollm2-135m-hf/tokenizer.json"),
        crate::common::shared("data/wikitext-2/wikitext2-raw-test.txt"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    write_vocab_and_merges(&json, dir.path());
    let text = std::fs::read_to_string(text).unwrap();
    let fast = Tokenizer::from_file(&json).unwrap().encode(&text).unwrap();
    let slow = Tokenizer::from_folder(dir.path()).unwrap();
    assert_eq!(slow.encode(&text).unwrap(), fast);
    assert!(fast.len() > 300_000, "{}", fast.len());
}

/// The BPE model of a `tokenizer.json` as the slow tokenizer's two files in `dir`.
fn write_vocab_and_merges(json: &Path, dir: &Path) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let model = &v["model"];
    std::fs::write(dir.join("vocab.json"), model["vocab"].to_string()).unwrap();
    let mut merges = String::from("#version: 0.2\n");
    for merge in model["merges"].as_array().unwrap() {
        let line = match merge {
            serde_json::Value::String(pair) => pair.clone(),
            pair => format!(
                "{} {}",
                pair[0].as_str().unwrap(),
                pair[1].as_str().unwrap()
            ),
        };
        merges.push_str(&line);
        merges.push('\n');
    }
    std::fs::write(dir.join("merges.txt"), merges).unwrap();
}
