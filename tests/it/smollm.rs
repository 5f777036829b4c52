//! Checks against the real SmolLM2-135M in `../shared`: the GGUF tokenizer and config against
//! the files transformers converted from the same GGUF, and the dense perplexity against the
//! PyTorch stack.

use wanda::eval::perplexity::perplexity;
use wanda::model::config::HfLlamaConfig;
use wanda::model::gguf_model::GgufCheckpoint;
use wanda::model::tokenizer::Tokenizer;
use wanda::model::{self, ModelRef};

use crate::common::{shared, B};

const GGUF: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const RAW_TEST: &str = "data/wikitext-2/wikitext2-raw-test.txt";

#[test]
fn gguf_tokenizer_matches_tokenizer_json_on_all_of_wikitext2_test() {
    let (Some(gguf), Some(json), Some(text)) = (
        shared(GGUF),
        shared("models/smollm2-135m-hf/tokenizer.json"),
        shared(RAW_TEST),
    ) else {
        return;
    };
    let ours = GgufCheckpoint::open(&gguf).unwrap().tokenizer().unwrap();
    let reference = Tokenizer::from_file(&json).unwrap();
    let hello = "Hello world, this is a test.";
    assert_eq!(
        ours.encode(hello).unwrap(),
        [19556, 905, 28, 451, 314, 253, 1028, 30]
    );
    assert_eq!(
        reference.encode(hello).unwrap(),
        [19556, 905, 28, 451, 314, 253, 1028, 30]
    );
    let text = std::fs::read_to_string(text).unwrap();
    let a = ours.encode(&text).unwrap();
    let b = reference.encode(&text).unwrap();
    assert_eq!(a.len(), 304_986);
    if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
        panic!("first difference at token {i}: {} vs {}", a[i], b[i]);
    }
    assert_eq!(a, b);
}

#[test]
fn gguf_config_matches_the_transformers_conversion() {
    let (Some(gguf), Some(config)) = (shared(GGUF), shared("models/smollm2-135m-hf/config.json"))
    else {
        return;
    };
    let ours = GgufCheckpoint::open(&gguf).unwrap().config().clone();
    let reference = HfLlamaConfig::from_file(&config)
        .unwrap()
        .resolve()
        .unwrap();
    assert_eq!(ours, reference);
}

/// Dense perplexity over the first 2 windows of 512 tokens. The reference is the PyTorch stack
/// on the same GGUF, computed with
/// `python scripts/transformers-ppl.py --gguf ../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf
///  --hf-dir ../shared/models/smollm2-135m-hf --text ../shared/data/wikitext-2/wikitext2-raw-test.txt
///  --seqlen 512 --windows 2` (torch 2.5.1, transformers 4.45.2, f32): 28.232812881469727.
#[test]
fn dense_perplexity_matches_pytorch_on_two_windows() {
    let (Some(gguf), Some(text)) = (shared(GGUF), shared(RAW_TEST)) else {
        return;
    };
    let loaded = model::load::<B>(&ModelRef::Gguf(gguf), &Default::default()).unwrap();
    assert_eq!(loaded.parameter_count, 134_515_008);
    let ids = loaded
        .tokenizer
        .encode(&std::fs::read_to_string(text).unwrap())
        .unwrap();
    let report = perplexity(&loaded.model, &ids, 512, Some(2), 8192, |_, _| {}).unwrap();
    assert_eq!(
        (
            report.windows,
            report.predicted_tokens,
            report.available_windows
        ),
        (2, 1022, 595)
    );
    let reference = 28.232812881469727;
    let rel = (report.perplexity - reference).abs() / reference;
    assert!(
        rel < 1e-4,
        "perplexity {} vs PyTorch {reference} (relative {rel:e})",
        report.perplexity
    );
}
