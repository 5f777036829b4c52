//! Layer streaming end to end: a streamed tiny model prunes and evaluates to the bit like the
//! same model in memory; and on SmolLM2-135M, with a budget below the model's f32 weights the
//! gate switches streaming on, every layer is pruned, and the cell gives the perplexity of the
//! same cell run with the model in memory, to the bit, at a peak resident set below the weights.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use wanda::eval::perplexity::{perplexity, perplexity_in_groups, STREAMED_WINDOW_GROUP};
use wanda::model::arch::{HfLlamaConfig, LlamaConfig};
use wanda::model::checkpoint::{build_llama, SafetensorsSource, WeightSource};
use wanda::model::checkpoint::{save_hf_folder, SaveDtype, SaveSpec};
use wanda::model::checkpoint::{Layers, StreamedLlama};
use wanda::model::decoder::Llama;
use wanda::model::kernels::to_host_f32;
use wanda::pipeline::RunRecord;
use wanda::prune::layerwise::{prune_model, ModelSparsity};
use wanda::prune::{Method, MethodOptions, Sparsity};

use crate::common::{shared, B};

/// Three layers (untied head, q/k/v bias) saved as a safetensors folder in `dir`.
fn checkpoint(dir: &Path) -> (LlamaConfig, Arc<dyn WeightSource>) {
    let config = HfLlamaConfig::from_json(
        r#"{"architectures":["Qwen2ForCausalLM"],"hidden_size":16,"intermediate_size":24,
        "num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,
        "vocab_size":40,"rms_norm_eps":1e-5,"tie_word_embeddings":false}"#,
    )
    .unwrap()
    .resolve()
    .unwrap();
    let model = Llama::<B>::init_random(&config, 7, &Default::default());
    let folder = dir.join("model");
    save_hf_folder(
        &model,
        &config,
        "{}",
        &folder,
        &SaveSpec::new(SaveDtype::F32),
    )
    .unwrap();
    (config, Arc::new(SafetensorsSource::open(&folder).unwrap()))
}

fn windows(count: usize, len: usize) -> Vec<Vec<u32>> {
    (0..count)
        .map(|w| (0..len).map(|t| ((w * 7 + t * 13) % 40) as u32).collect())
        .collect()
}

/// Every linear's weight, layer by layer.
fn weights(model: &impl Layers<B>) -> Vec<Vec<f32>> {
    (0..model.layer_count())
        .flat_map(|i| {
            let layer = model.layer(i).unwrap().into_owned();
            layer
                .linears()
                .into_iter()
                .map(|(_, _, l)| to_host_f32(l.weight.val()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `method` at 50 % on the same calibration, on a copy of `dense` in memory and on `streamed`:
/// the two reports and every pruned weight are the same. Returns the pruned copy and the report.
fn prune_in_memory_and_streamed(
    dense: &Llama<B>,
    streamed: &mut StreamedLlama<B>,
    method: Method,
) -> (Llama<B>, ModelSparsity) {
    let calibration = windows(5, 6);
    let sparsity = Sparsity::unstructured(0.5).unwrap();
    let options = MethodOptions::default();
    let mut resident = dense.clone();
    let a = prune_model(
        &mut resident,
        method,
        &options,
        sparsity,
        &calibration,
        2,
        |_, _| {},
    )
    .unwrap();
    let b = prune_model(
        streamed,
        method,
        &options,
        sparsity,
        &calibration,
        2,
        |_, _| {},
    )
    .unwrap();
    assert_eq!(a, b);
    assert_eq!(weights(&resident), weights(streamed));
    (resident, a)
}

#[test]
fn a_streamed_model_prunes_and_evaluates_to_the_bit_like_one_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (config, source) = checkpoint(dir.path());
    let device = Default::default();
    let dense = build_llama::<B>(&config, source.as_ref(), &device).unwrap();
    let mut streamed = StreamedLlama::<B>::open(&config, source, &device, dir.path()).unwrap();
    assert!(streamed.shell().layers.is_empty());
    let (resident, a) = prune_in_memory_and_streamed(&dense, &mut streamed, Method::Wanda);
    assert!((a.total - 0.5).abs() < 1e-9, "{}", a.total);
    // More windows than one streamed group, and a last group that is not full.
    let ids: Vec<u32> = windows(1, 8 * (STREAMED_WINDOW_GROUP + 3)).remove(0);
    let in_memory = perplexity(&resident, &ids, 8, None, 64, |_, _| {})
        .unwrap()
        .perplexity;
    let mut seen = Vec::new();
    let layer_by_layer = perplexity(&streamed, &ids, 8, None, 64, |done, total| {
        seen.push((done, total))
    })
    .unwrap()
    .perplexity;
    assert_eq!(in_memory.to_bits(), layer_by_layer.to_bits());
    let windows = STREAMED_WINDOW_GROUP + 3;
    assert_eq!(seen, [(STREAMED_WINDOW_GROUP, windows), (windows, windows)]);
    // Every window in one group (each layer read once), and groups of 3: the same bits.
    for group in [windows, 3] {
        let mut seen = Vec::new();
        let grouped = perplexity_in_groups(&streamed, &ids, 8, None, 64, group, |done, _| {
            seen.push(done)
        })
        .unwrap()
        .perplexity;
        assert_eq!(grouped.to_bits(), in_memory.to_bits(), "group {group}");
        let ends: Vec<usize> = (1..=windows.div_ceil(group))
            .map(|g| (g * group).min(windows))
            .collect();
        assert_eq!(seen, ends, "group {group}");
    }
}

/// SparseGPT changes the weights it keeps: a streamed layer's weights, moved to the host,
/// updated there and moved back, equal those of a model in memory, whose weights are copied.
#[test]
fn a_streamed_model_takes_sparsegpt_updates_to_the_bit_like_one_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (config, source) = checkpoint(dir.path());
    let device = Default::default();
    let dense = build_llama::<B>(&config, source.as_ref(), &device).unwrap();
    let mut streamed = StreamedLlama::<B>::open(&config, source, &device, dir.path()).unwrap();
    let (resident, _) = prune_in_memory_and_streamed(&dense, &mut streamed, Method::Sparsegpt);
    let pruned = weights(&resident);
    // The dense model the in-memory one was cloned from is untouched, and the kept weights moved.
    let before = weights(&dense);
    assert_ne!(pruned, before);
    let kept_and_changed = pruned
        .iter()
        .flatten()
        .zip(before.iter().flatten())
        .filter(|(p, d)| **p != 0.0 && p != d)
        .count();
    assert!(kept_and_changed > 0, "SparseGPT updated no kept weight");
}

/// A streamed model opens without reading its layers; a layer the checkpoint lacks is an error
/// naming the missing tensor when that layer is first read, or up front from
/// [`StreamedLlama::check`] (`load: { verify: full }`).
#[test]
fn a_broken_layer_is_found_when_first_read_or_by_the_full_check() {
    let dir = tempfile::tempdir().unwrap();
    let (config, source) = checkpoint(dir.path());
    // The config claims a fourth layer that the checkpoint does not hold.
    let mut claimed = config.clone();
    claimed.num_hidden_layers = 4;
    let device = Default::default();
    let streamed = StreamedLlama::<B>::open(&claimed, source, &device, dir.path()).unwrap();
    for i in 0..3 {
        assert!(streamed.layer(i).is_ok(), "layer {i}");
    }
    let first_read = streamed.layer(3).unwrap_err().to_string();
    let full = streamed.check().unwrap_err().to_string();
    for message in [&first_read, &full] {
        assert!(
            message.contains("tensor `model.layers.3.") && message.contains("is missing"),
            "{message}"
        );
    }
}

/// SmolLM2-135M's parameters × 4 B: its weights in f32.
const WEIGHT_BYTES: u64 = 134_515_008 * 4;

/// A one-cell Wanda pipeline on SmolLM2 in `dir` with the gate's `budget`, streaming its only
/// reduction.
fn pipeline(dir: &Path, budget: &str) -> Option<PathBuf> {
    let model = shared("models/SmolLM2-135M-Instruct.Q4_1.gguf")?;
    let calibration = shared("data/wikitext-2/wikitext2-v1-valid.txt")?;
    let evaluation = shared("data/wikitext-2/wikitext2-raw-test.txt")?;
    let path = dir.join(format!("streamed-{budget}.yaml"));
    std::fs::write(
        &path,
        format!(
            r#"name: streamed
seed: 0
device: cpu
model: {{ gguf: {} }}
calibration: {{ text: {}, nsamples: 4, seqlen: 128 }}
evaluation: {{ text: {}, seqlen: 128, windows: 2 }}
stages:
  load: {{}}
  estimate: {{}}
  gate: {{ budget: {budget}, reduce: [streaming] }}
  calibrate: {{}}
  prune: {{ method: wanda, sparsity: 0.5 }}
  eval: {{}}
"#,
            model.display(),
            calibration.display(),
            evaluation.display()
        ),
    )
    .unwrap();
    Some(path)
}

/// Runs `pipeline` into `results` and returns its one record.
fn run(pipeline: &Path, results: &Path) -> RunRecord {
    let out = Command::new(env!("CARGO_BIN_EXE_wanda"))
        .arg("run")
        .arg(pipeline)
        .arg("--results")
        .arg(results)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let cells = results.join("streamed");
    let cell = std::fs::read_dir(&cells)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("run.json").exists())
        .expect("one finished cell");
    let leftovers: Vec<_> = std::fs::read_dir(&cells)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".wanda-layers-"))
        .collect();
    assert!(leftovers.is_empty(), "layer stores left: {leftovers:?}");
    RunRecord::read(&cell.join("run.json")).unwrap()
}

#[test]
fn a_budget_below_the_weights_streams_every_layer_to_the_same_perplexity() {
    let dir = tempfile::tempdir().unwrap();
    let (Some(in_memory), Some(streamed)) =
        (pipeline(dir.path(), "4GiB"), pipeline(dir.path(), "450MiB"))
    else {
        return;
    };
    const { assert!(450 << 20 < WEIGHT_BYTES) };
    let a = run(&in_memory, &dir.path().join("a"));
    let b = run(&streamed, &dir.path().join("b"));
    assert!(!a.effective.streaming);
    assert!(b.effective.streaming);
    assert_eq!(
        b.effective.gate.as_deref(),
        Some(
            "calibration.batch 4 → 2 (halved to fit; the same numbers); \
             calibration.batch 2 → 1 (halved to fit; the same numbers); \
             streaming off → on (only one layer on the device)"
        )
    );
    // Every layer pruned, and the same numbers to the bit.
    assert_eq!(b.sparsity.layers.len(), 30);
    assert!(
        b.sparsity.layers.values().all(|f| *f == 0.5),
        "{:?}",
        b.sparsity.layers
    );
    assert_eq!(a.sparsity, b.sparsity);
    let (pa, pb) = (a.metrics.perplexity.unwrap(), b.metrics.perplexity.unwrap());
    assert_eq!(pa.to_bits(), pb.to_bits(), "{pa} vs {pb}");
    // The model in memory takes its weights and more; streamed, the whole run takes less.
    let peak = |r: &RunRecord| r.memory.peak_rss_bytes.expect("Linux reports the peak");
    assert!(peak(&a) > WEIGHT_BYTES, "{}", peak(&a));
    assert!(peak(&b) < WEIGHT_BYTES, "{}", peak(&b));
}
