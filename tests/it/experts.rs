//! Expert pruning end to end on the tiny mixtures of experts, calibrated on a real text mapped
//! onto their vocabulary (`tests/fixtures/data/fixture-words`, so tokens route apart and the
//! experts' saliencies differ): the pipeline removes experts, the saved folder is a model of
//! fewer experts that wanda reads back to the same perplexity, a grouped router loses equally
//! per group, experts then weights run as two prune stages, a streamed model prunes to the bit
//! like one in memory, and what cannot be done is refused before any work.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use wanda::model::arch::{HfLlamaConfig, LlamaConfig};
use wanda::model::checkpoint::{
    build_llama, Layers, SafetensorsSource, StreamedLlama, WeightSource,
};
use wanda::model::kernels::to_host_f32;
use wanda::pipeline::record::RunRecord;
use wanda::prune::experts::{prune_experts, ExpertAmount, ExpertOptions, ExpertsReport};
use wanda::prune::Method;

use crate::common::{output_ok, output_refused, B};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn fixture(family: &str) -> PathBuf {
    Path::new(ROOT).join(format!("tests/fixtures/models/tiny-{family}"))
}

fn words(file: &str) -> PathBuf {
    Path::new(ROOT).join(format!("tests/fixtures/data/fixture-words/{file}"))
}

/// A pipeline on `family` with `stages` (list form), calibration 8 × 64 and evaluation windows
/// of 64 of the fixture-words texts.
fn pipeline(dir: &Path, family: &str, stages: &str) -> PathBuf {
    let file = dir.join("pipeline.yaml");
    std::fs::write(
        &file,
        format!(
            "name: experts\nseed: 0\ndevice: cpu\nmodel: {{ path: {} }}\n\
             calibration: {{ text: {}, nsamples: 8, seqlen: 64 }}\n\
             evaluation: {{ text: {}, seqlen: 64 }}\nstages:\n{stages}",
            fixture(family).display(),
            words("calib.txt").display(),
            words("eval.txt").display(),
        ),
    )
    .unwrap();
    file
}

/// Runs `pipeline` into `dir/results` and returns the one cell's folder and record.
fn run(pipeline: &Path, dir: &Path) -> (PathBuf, RunRecord) {
    let results = dir.join("results");
    output_ok(
        Command::new(env!("CARGO_BIN_EXE_wanda"))
            .arg("run")
            .arg(pipeline)
            .arg("--results")
            .arg(&results),
    );
    let cell = std::fs::read_dir(results.join("experts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("run.json").exists())
        .expect("one finished cell");
    let record = RunRecord::read(&cell.join("run.json")).unwrap();
    (cell, record)
}

/// Stages that remove a quarter of the experts by REAP, evaluate and save in f32.
const REAP_A_QUARTER: &str = "  - { id: load, kind: load }\n  \
     - { id: calibrate, kind: calibrate, needs: [load] }\n  \
     - { id: prune, kind: prune, needs: [calibrate], method: reap, experts: 0.25 }\n  \
     - { id: eval, kind: eval, needs: [prune] }\n  \
     - { id: save, kind: save, needs: [prune], model: true, dtype: f32 }\n";

/// The `config.json` of a saved folder.
fn saved_config(folder: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(folder.join("config.json")).unwrap()).unwrap()
}

/// The perplexity `wanda eval` gives the saved folder on the same evaluation text.
fn saved_perplexity(folder: &Path) -> f64 {
    let out = output_ok(
        Command::new(env!("CARGO_BIN_EXE_wanda"))
            .args(["eval", "--json", "--seqlen", "64", "--model"])
            .arg(folder)
            .arg("--text")
            .arg(words("eval.txt")),
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json["perplexity"].as_f64().expect("a perplexity")
}

/// In each layer and each of its `groups` equal groups of experts, the kept experts'
/// saliencies apart from the removed ones' by more than rounding.
fn assert_chosen_apart(report: &ExpertsReport, groups: usize) {
    let method = report.method.name();
    let size = report.experts_before / groups;
    for layer in &report.layers {
        let s = &layer.saliency[method];
        let scale = s.iter().copied().fold(0.0, f64::max);
        for g in 0..groups {
            let of = |set: &[usize]| -> Vec<f64> {
                set.iter()
                    .filter(|&&e| e / size == g)
                    .map(|&e| s[e])
                    .collect()
            };
            let kept = of(&layer.kept).into_iter().fold(f64::INFINITY, f64::min);
            let removed = of(&layer.removed)
                .into_iter()
                .fold(f64::NEG_INFINITY, f64::max);
            assert!(
                kept - removed > 1e-5 * scale,
                "layer {} group {g}: {s:?}",
                layer.layer
            );
        }
    }
}

#[test]
fn reap_removes_a_quarter_of_mixtrals_experts_and_saves_a_smaller_model() {
    let dir = tempfile::tempdir().unwrap();
    let file = pipeline(dir.path(), "mixtral", REAP_A_QUARTER);
    let (cell, record) = run(&file, dir.path());
    assert!(
        record.cell.label.starts_with("reap-experts-0.25"),
        "{}",
        record.cell.label
    );
    let report = record.experts.expect("the experts removed");
    assert_eq!((report.experts_before, report.experts_after), (4, 3));
    assert_eq!(report.layers.len(), 2);
    for layer in &report.layers {
        assert_eq!((layer.kept.len(), layer.removed.len()), (3, 1));
        // 8 windows of 64 tokens, two experts each.
        assert_eq!(layer.tokens, 512);
        assert_eq!(layer.saliency["frequency"].iter().sum::<f64>(), 1024.0);
    }
    assert_chosen_apart(&report, 1);
    // The saved folder: three experts a layer under Mixtral's key, the report beside it, and
    // read back by wanda to the perplexity of the model in memory, to the bit.
    let saved = cell.join("model");
    let config = saved_config(&saved);
    assert_eq!(config["num_local_experts"], 3);
    let beside: ExpertsReport =
        serde_json::from_str(&std::fs::read_to_string(saved.join("wanda_experts.json")).unwrap())
            .unwrap();
    assert_eq!(beside.layers, report.layers);
    let ppl = record.metrics.perplexity.expect("a perplexity");
    assert_eq!(saved_perplexity(&saved), ppl);
}

#[test]
fn a_grouped_router_loses_one_expert_per_group_and_its_correction_biases() {
    let dir = tempfile::tempdir().unwrap();
    let file = pipeline(dir.path(), "deepseek_v3-16e", REAP_A_QUARTER);
    let (cell, record) = run(&file, dir.path());
    let report = record.experts.expect("the experts removed");
    // A dense first layer, then two layers of 16 experts in 4 groups of 4.
    assert_eq!(report.layers.len(), 2);
    for layer in &report.layers {
        let groups: Vec<usize> = layer.removed.iter().map(|e| e / 4).collect();
        assert_eq!(groups, vec![0, 1, 2, 3], "removed {:?}", layer.removed);
    }
    assert_chosen_apart(&report, 4);
    let saved = cell.join("model");
    let config = saved_config(&saved);
    assert_eq!(config["n_routed_experts"], 12);
    let source = SafetensorsSource::open(&saved).unwrap();
    let bias = source
        .tensor("model.layers.1.mlp.gate.e_score_correction_bias")
        .unwrap()
        .expect("the correction biases");
    assert_eq!(bias.shape, vec![12]);
    assert_eq!(
        saved_perplexity(&saved),
        record.metrics.perplexity.expect("a perplexity")
    );
}

#[test]
fn experts_then_weights_run_as_two_prune_stages() {
    let dir = tempfile::tempdir().unwrap();
    let file = pipeline(
        dir.path(),
        "qwen3_moe",
        "  - { id: load, kind: load }\n  - { id: calibrate, kind: calibrate, needs: [load] }\n  \
         - { id: experts, kind: prune, needs: [calibrate], method: frequency, experts: 2 }\n  \
         - { id: weights, kind: prune, needs: [experts], method: wanda, sparsity: 0.5 }\n  \
         - { id: eval, kind: eval, needs: [weights] }\n  \
         - { id: save, kind: save, needs: [weights], model: true, dtype: f32 }\n",
    );
    let (cell, record) = run(&file, dir.path());
    assert_eq!(
        record.cell.label,
        "frequency-experts-2+wanda-0.5-unstructured"
    );
    let report = record.experts.expect("the first stage's experts");
    assert_eq!(report.experts_after, 2);
    // Half of every pruned linear's weights, counted over the two experts left.
    let total = record.sparsity.total.expect("a sparsity");
    assert!((total - 0.5).abs() < 0.01, "{total}");
    assert!(record
        .sparsity
        .linears
        .keys()
        .all(|name| !name.contains("experts.2") && !name.contains("experts.3")));
    // The fixture's config names the count `num_local_experts` (transformers 5.24 wrote it),
    // Qwen3-MoE's own key is `num_experts`: both say two.
    let saved = cell.join("model");
    let config = saved_config(&saved);
    assert_eq!(
        (
            config["num_experts"].as_u64(),
            config["num_local_experts"].as_u64()
        ),
        (Some(2), Some(2))
    );
    assert_eq!(
        saved_perplexity(&saved),
        record.metrics.perplexity.expect("a perplexity")
    );
}

#[test]
fn a_streamed_model_loses_the_same_experts_to_the_bit() {
    let folder = fixture("olmoe");
    let source: Arc<dyn WeightSource> = Arc::new(SafetensorsSource::open(&folder).unwrap());
    let config = HfLlamaConfig::from_file(&folder.join("config.json"))
        .unwrap()
        .resolve()
        .unwrap();
    let device = Default::default();
    let store = tempfile::tempdir().unwrap();
    let mut resident = build_llama::<B>(&config, source.as_ref(), &device).unwrap();
    let mut streamed = StreamedLlama::<B>::open(&config, source, &device, store.path()).unwrap();
    let calibration: Vec<Vec<u32>> = (0..4)
        .map(|w| {
            (0..16)
                .map(|t| 1 + ((w * 11 + t * 5) % 95) as u32)
                .collect()
        })
        .collect();
    let options = ExpertOptions {
        amount: ExpertAmount(0.5),
        protect: vec!["model.layers.1.mlp.experts.0".into()],
    };
    let a = ean_removal(&mut resident, &config, &options, &calibration);
    let b = ean_removal(&mut streamed, &config, &options, &calibration);
    assert_eq!(a, b);
    assert!(
        a.layers[1].kept.contains(&0),
        "protected: {:?}",
        a.layers[1]
    );
    for i in 0..resident.layer_count() {
        let (x, y) = (
            resident.layer(i).unwrap().into_owned(),
            streamed.layer(i).unwrap().into_owned(),
        );
        let (x, y) = (x.linears(), y.linears());
        assert_eq!(
            x.len(),
            4 + 1 + 2 * 3,
            "layer {i}: attention, router, two experts"
        );
        for ((name, _, l), (_, _, m)) in x.into_iter().zip(y) {
            assert_eq!(
                to_host_f32(l.weight.val()),
                to_host_f32(m.weight.val()),
                "layer {i} {name}"
            );
        }
    }
}

/// `options`' removal by EAN from `model` (of `config`) on `calibration`, 2 samples a batch.
fn ean_removal(
    model: &mut impl Layers<B>,
    config: &LlamaConfig,
    options: &ExpertOptions,
    calibration: &[Vec<u32>],
) -> ExpertsReport {
    prune_experts(
        model,
        config,
        Method::Ean,
        options,
        calibration,
        2,
        |_, _| {},
    )
    .unwrap()
}

#[test]
fn what_cannot_be_removed_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let stages = |family: &str, prune: &str| {
        pipeline(
            dir.path(),
            family,
            &format!(
                "  - {{ id: load, kind: load }}\n  - {{ id: calibrate, kind: calibrate, needs: [load] }}\n  \
                 - {{ id: prune, kind: prune, needs: [calibrate], {prune} }}\n"
            ),
        )
    };
    let refused = |file: PathBuf| {
        output_refused(
            Command::new(env!("CARGO_BIN_EXE_wanda"))
                .arg("run")
                .arg(file)
                .arg("--results")
                .arg(dir.path().join("results")),
        )
    };
    for (family, prune, want) in [
        ("llama", "method: reap, experts: 0.25", "has none"),
        (
            "mixtral",
            "method: reap, experts: 0.25, sparsity: 0.5",
            "prune.sparsity",
        ),
        (
            "mixtral",
            "method: wanda, sparsity: 0.5, experts: 0.25",
            "prune.experts",
        ),
        ("mixtral", "method: ean", "does not say how many"),
        ("mixtral", "method: ean, experts: 1.5", "neither a fraction"),
        (
            "mixtral",
            "method: reap, experts: 3",
            "fewer than the 2 each token goes to",
        ),
        (
            "deepseek_v3",
            "method: reap, experts: 0.25",
            "multiple of 4",
        ),
        (
            "deepseek_v3",
            "method: reap, experts: 0.5",
            "remove at most 0",
        ),
        (
            "mixtral",
            "method: reap, experts: 1, protect: [\"*.experts.9\"]",
            "names no expert",
        ),
    ] {
        let err = refused(stages(family, prune));
        assert!(err.contains(want), "{family} `{prune}`: {err}");
    }
    assert!(
        !dir.path().join("results/experts").exists()
            || std::fs::read_dir(dir.path().join("results/experts"))
                .unwrap()
                .all(|e| !e.unwrap().path().join("run.json").exists()),
        "no refused run left a finished cell"
    );
}
