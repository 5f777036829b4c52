//! Sequential layer-wise pruning of a tiny model: exact per-row counts, N:M groups, the
//! statistics plumbing against a hand-assembled computation, sparsegpt's update, and what
//! `wanda prune --save` writes.

use std::path::PathBuf;

use burn::prelude::*;
use wanda::model::decoder::{DecoderLayer, LayerContext, LinearInput, Llama};
use wanda::prune::layerwise::{measure, prune_model};
use wanda::prune::sparsegpt::SparseGptOptions;
use wanda::prune::wanda::{wanda_mask, InputNorms};
use wanda::prune::Sparsity;
use wanda::prune::{Method, MethodOptions, PruneError};

use crate::common::{
    logits, output_ok, output_refused, save_tiny_hf_folder, tiny_config, tiny_model, tiny_text, B,
};

/// Four calibration windows of 8 tokens over the 32-token vocabulary.
fn windows() -> Vec<Vec<u32>> {
    (0..4u32)
        .map(|s| (0..8u32).map(|t| (s * 11 + t * 5 + 3) % 32).collect())
        .collect()
}

fn weights(m: &Llama<B>, layer: usize, name: &str) -> (Vec<f32>, [usize; 2]) {
    let linear = m.layers[layer]
        .linears()
        .into_iter()
        .find(|(n, _, _)| *n == name)
        .unwrap()
        .2;
    let w = linear.weight.val();
    let dims = w.dims();
    (w.into_data().to_vec().unwrap(), dims)
}

#[test]
fn wanda_unstructured_keeps_exactly_the_reference_count_per_output() {
    let config = tiny_config("LlamaForCausalLM", true);
    let mut model = tiny_model(&config, 1);
    let report = prune_model(
        &mut model,
        Method::Wanda,
        &MethodOptions::default(),
        Sparsity::unstructured(0.3).unwrap(),
        &windows(),
        3,
        |_, _| {},
    )
    .unwrap();
    // in = 16 → prune floor(4.8) = 4, keep 12; in = 24 (down_proj) → prune 7, keep 17.
    for (name, r) in &report.per_linear {
        let keep = if name.ends_with("down_proj") { 17 } else { 12 };
        assert_eq!((r.min_kept, r.max_kept), (keep, keep), "{name}");
    }
    assert_eq!(report.per_layer.len(), 2);
    // Zeros per layer: 4 of 16 inputs in q/k/v/o/gate/up (1536 weights), 7 of 24 in down (384).
    let expected = (384.0 + 112.0) / 1920.0;
    assert!((report.total - expected).abs() < 1e-12, "{}", report.total);
    assert_eq!(report, measure(&model).unwrap());
}

#[test]
fn n_m_prunes_n_of_every_m_consecutive_inputs() {
    let config = tiny_config("LlamaForCausalLM", true);
    for method in Method::ALL.into_iter().filter(|m| !m.removes_experts()) {
        let mut model = tiny_model(&config, 2);
        let report = prune_model(
            &mut model,
            method,
            &small_blocks(),
            Sparsity::nm(2, 4).unwrap(),
            &windows(),
            4,
            |_, _| {},
        )
        .unwrap();
        assert!(
            (report.total - 0.5).abs() < 1e-12,
            "{method:?}: {}",
            report.total
        );
        for layer in 0..2 {
            let (w, [d_in, d_out]) = weights(&model, layer, "mlp.gate_proj");
            for o in 0..d_out {
                for g in 0..d_in / 4 {
                    let zeros = (0..4).filter(|k| w[(g * 4 + k) * d_out + o] == 0.0).count();
                    assert_eq!(zeros, 2, "{method:?} layer {layer} output {o} group {g}");
                }
            }
        }
    }
}

/// How many samples share a forward pass moves no weight: the layer outputs and the input
/// statistics are the same for one sample at a time as for all four at once.
#[test]
fn the_calibration_batch_size_changes_nothing() {
    let config = tiny_config("LlamaForCausalLM", true);
    for method in Method::ALL.into_iter().filter(|m| !m.removes_experts()) {
        let pruned: Vec<Vec<f32>> = [1, 3, 4]
            .into_iter()
            .map(|batch| {
                let mut model = tiny_model(&config, 5);
                prune_model(
                    &mut model,
                    method,
                    &small_blocks(),
                    Sparsity::unstructured(0.6).unwrap(),
                    &windows(),
                    batch,
                    |_, _| {},
                )
                .unwrap();
                (0..2)
                    .flat_map(|l| weights(&model, l, "mlp.down_proj").0)
                    .collect()
            })
            .collect();
        assert_eq!(pruned[0], pruned[1], "{method:?}");
        assert_eq!(pruned[0], pruned[2], "{method:?}");
    }
}

/// The first layer's q_proj mask equals the one computed by hand from the embeddings: the
/// captured statistics are the normed inputs of that linear, over all tokens of all windows.
#[test]
fn layer_zero_statistics_are_the_normed_embeddings() {
    let config = tiny_config("LlamaForCausalLM", true);
    let dense = tiny_model(&config, 3);
    let device = Default::default();
    let mut norms = InputNorms::new(config.hidden_size);
    for w in windows() {
        let ids: Vec<i64> = w.iter().map(|&t| i64::from(t)).collect();
        let tokens = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, 8]), &device);
        let x = dense.layers[0]
            .input_layernorm
            .as_ref()
            .unwrap()
            .forward(dense.embed(tokens));
        let flat: Vec<f32> = x.into_data().to_vec().unwrap();
        norms.add_batch(&flat, 8, config.hidden_size).unwrap();
    }
    let (w, dims) = weights(&dense, 0, "self_attn.q_proj");
    let sparsity = Sparsity::unstructured(0.5).unwrap();
    let expected = wanda_mask(&w, dims, &norms, sparsity, false).unwrap().mask;

    let mut pruned = tiny_model(&config, 3);
    prune_model(
        &mut pruned,
        Method::Wanda,
        &MethodOptions::default(),
        sparsity,
        &windows(),
        2,
        |_, _| {},
    )
    .unwrap();
    let (p, _) = weights(&pruned, 0, "self_attn.q_proj");
    let got: Vec<bool> = p
        .iter()
        .zip(&w)
        .map(|(a, b)| *a == 0.0 && *b != 0.0)
        .collect();
    assert_eq!(got, expected);
}

/// The Wanda mask of layer 1's `q_proj` when layer 1 sees `layer0`'s outputs, batched as the
/// driver batches (2 windows per call) and observed through the same layer pass.
fn layer_one_q_mask(dense: &Llama<B>, layer0: &DecoderLayer<B>, sparsity: Sparsity) -> Vec<bool> {
    let device = Default::default();
    let hidden = weights(dense, 1, "self_attn.q_proj").1[0];
    let (cos, sin) = dense.rope_tables(0, 8);
    let mut norms = InputNorms::new(hidden);
    for pair in windows().chunks(2) {
        let ids: Vec<i64> = pair.iter().flatten().map(|&t| i64::from(t)).collect();
        let tokens = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [2, 8]), &device);
        let ctx = || LayerContext {
            cos: &cos,
            sin: &sin,
            cache: None,
        };
        let x1 = layer0.forward(dense.embed(tokens), ctx());
        dense.layers[1].forward_observed(x1, ctx(), &mut |input, x| {
            if input == LinearInput::AttnIn {
                let [b, s, h] = x.dims();
                let flat: Vec<f32> = x.clone().into_data().to_vec().unwrap();
                norms.add_batch(&flat, b * s, h).unwrap();
            }
        });
    }
    let (w, dims) = weights(dense, 1, "self_attn.q_proj");
    wanda_mask(&w, dims, &norms, sparsity, false).unwrap().mask
}

/// The reference computes every layer's statistics from the outputs of the already pruned
/// layers before it, and at 70 % those differ most from the dense ones (one of the suspects
/// checked, and ruled out, when wanda's 70 % perplexity parted from PyTorch's in issue 22).
/// Layer 1's mask must be the one its pruned-input statistics give, not the dense-input one.
#[test]
fn at_70_percent_layer_one_is_scored_on_the_pruned_layer_zero_outputs() {
    let config = tiny_config("LlamaForCausalLM", true);
    let dense = tiny_model(&config, 5);
    let sparsity = Sparsity::unstructured(0.7).unwrap();
    let mut pruned = tiny_model(&config, 5);
    prune_model(
        &mut pruned,
        Method::Wanda,
        &MethodOptions::default(),
        sparsity,
        &windows(),
        2,
        |_, _| {},
    )
    .unwrap();
    let from_pruned = layer_one_q_mask(&dense, &pruned.layers[0], sparsity);
    let from_dense = layer_one_q_mask(&dense, &dense.layers[0], sparsity);
    assert_ne!(
        from_pruned, from_dense,
        "the test needs inputs that tell the two apart"
    );
    let (w, _) = weights(&dense, 1, "self_attn.q_proj");
    let (p, _) = weights(&pruned, 1, "self_attn.q_proj");
    let got: Vec<bool> = p
        .iter()
        .zip(&w)
        .map(|(a, b)| *a == 0.0 && *b != 0.0)
        .collect();
    assert_eq!(got, from_pruned);
}

#[test]
fn skipped_linears_stay_dense_and_a_pattern_naming_nothing_is_refused() {
    let config = tiny_config("LlamaForCausalLM", true);
    let dense = tiny_model(&config, 2);
    let mut model = tiny_model(&config, 2);
    let options = MethodOptions {
        skip: vec!["model.layers.0.self_attn.*".into(), "*.down_proj".into()],
        ..MethodOptions::default()
    };
    let sparsity = Sparsity::unstructured(0.5).unwrap();
    let report = prune_model(
        &mut model,
        Method::Wanda,
        &options,
        sparsity,
        &windows(),
        2,
        |_, _| {},
    )
    .unwrap();
    let mut skipped = 0;
    for (path, r) in &report.per_linear {
        let (layer, name) = path
            .strip_prefix("model.layers.")
            .and_then(|rest| rest.split_once('.'))
            .unwrap();
        let layer: usize = layer.parse().unwrap();
        let (now, _) = weights(&model, layer, name);
        let (before, _) = weights(&dense, layer, name);
        if (layer == 0 && name.starts_with("self_attn.")) || name == "mlp.down_proj" {
            assert_eq!(now, before, "{path} must stay dense");
            skipped += 1;
        } else {
            assert!(r.zeros * 2 >= r.total, "{path} must be pruned: {r:?}");
        }
    }
    // Four attention linears of layer 0 and the down_proj of both layers.
    assert_eq!(skipped, 6);
    let typo = MethodOptions {
        skip: vec!["model.layers.9.*".into()],
        ..MethodOptions::default()
    };
    let mut untouched = tiny_model(&config, 2);
    let err = prune_model(
        &mut untouched,
        Method::Magnitude,
        &typo,
        sparsity,
        &[],
        2,
        |_, _| {},
    )
    .unwrap_err();
    assert!(
        matches!(&err, PruneError::SkipMatchesNothing { pattern, .. } if pattern == "model.layers.9.*"),
        "{err}"
    );
    assert_eq!(
        weights(&untouched, 0, "mlp.up_proj"),
        weights(&dense, 0, "mlp.up_proj")
    );
}

#[test]
fn sparsegpt_updates_kept_weights_and_magnitude_needs_no_calibration() {
    let config = tiny_config("LlamaForCausalLM", true);
    let dense = tiny_model(&config, 4);
    let mut sg = tiny_model(&config, 4);
    prune_model(
        &mut sg,
        Method::Sparsegpt,
        &small_blocks(),
        Sparsity::unstructured(0.5).unwrap(),
        &windows(),
        4,
        |_, _| {},
    )
    .unwrap();
    let (before, _) = weights(&dense, 1, "mlp.down_proj");
    let (after, _) = weights(&sg, 1, "mlp.down_proj");
    let changed_kept = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| **a != 0.0 && a != b)
        .count();
    assert!(
        changed_kept > 0,
        "the OBS update must move some kept weights"
    );

    let mut mag = tiny_model(&config, 4);
    let report = prune_model(
        &mut mag,
        Method::Magnitude,
        &MethodOptions::default(),
        Sparsity::unstructured(0.5).unwrap(),
        &[],
        1,
        |_, _| {},
    )
    .unwrap();
    assert!(report.total >= 0.5, "{}", report.total);
    assert_ne!(logits(&mag, &[1, 2, 3]), logits(&dense, &[1, 2, 3]));
}

#[test]
fn calibration_methods_refuse_an_empty_calibration_set() {
    let config = tiny_config("LlamaForCausalLM", true);
    let mut model = tiny_model(&config, 5);
    let before = logits(&model, &[1, 2, 3]);
    let err = prune_model(
        &mut model,
        Method::Wanda,
        &MethodOptions::default(),
        Sparsity::unstructured(0.5).unwrap(),
        &[],
        1,
        |_, _| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("calibration"), "{err}");
    assert_eq!(
        before,
        logits(&model, &[1, 2, 3]),
        "a refused run must not touch the model"
    );
}

/// A tiny model's folder (weights from `seed`) and a calibration text, in `dir`.
fn tiny_with_calibration(dir: &std::path::Path, seed: u64) -> (PathBuf, PathBuf) {
    let tiny = dir.join("tiny");
    save_tiny_hf_folder(&tiny, seed);
    let calib = dir.join("calib.txt");
    std::fs::write(&calib, tiny_text(200)).unwrap();
    (tiny, calib)
}

/// `wanda prune --model tiny --calib-text calib`, for the caller's other arguments.
fn prune_command(tiny: &std::path::Path, calib: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_wanda"));
    command
        .arg("prune")
        .arg("--model")
        .arg(tiny)
        .arg("--calib-text")
        .arg(calib);
    command
}

/// `wanda prune --save` writes the model with its recipe (a pipeline that validates and runs the
/// same cell) and its sparsity report (the numbers the command printed).
#[test]
fn prune_cli_saves_a_recipe_and_the_sparsity_report() {
    let dir = tempfile::tempdir().unwrap();
    let (tiny, calib) = tiny_with_calibration(dir.path(), 4);
    let saved = dir.path().join("pruned");
    let out = output_ok(
        prune_command(&tiny, &calib)
            .args(["--device", "cpu", "--json", "--method", "wanda"])
            .args(["--pattern", "2:4", "--nsamples", "4", "--seqlen", "16"])
            .arg("--save")
            .arg(&saved),
    );
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(saved.join(wanda::stages::SPARSITY_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(report, printed["sparsity"]);
    assert_eq!(report["total"], 0.5);

    let plan = wanda::pipeline::plan::validate(saved.join(wanda::stages::RECIPE_FILE)).unwrap();
    let spec = &plan.cells[0].spec;
    let calibration = spec.settings.calibration.as_ref().unwrap();
    assert_eq!((calibration.nsamples, calibration.seqlen), (4, 16));
    assert_eq!(calibration.text, Some(std::path::absolute(&calib).unwrap()));
    let prune = serde_json::to_value(&spec.stage("prune").unwrap().options).unwrap();
    assert_eq!(
        (&prune["method"], &prune["pattern"]),
        (&"wanda".into(), &"2:4".into())
    );
}

/// Default options, with SparseGPT blocks of 8 to fit the tiny model's widths.
fn small_blocks() -> MethodOptions {
    MethodOptions {
        sparsegpt: SparseGptOptions {
            blocksize: 8,
            percdamp: 0.01,
        },
        ..MethodOptions::default()
    }
}

/// Calibration activations kept on the host between layers (the gate's step for a GPU short of
/// memory) and batches of any size prune to the same weights as one batch on the device, for
/// a method that reads the statistics (wanda) and one that updates weights (sparsegpt).
#[test]
fn activations_on_the_host_and_any_batch_prune_to_the_same_weights() {
    use wanda::prune::activations::Batching;
    let config = tiny_config("LlamaForCausalLM", true);
    for method in [Method::Wanda, Method::Sparsegpt] {
        let prune = |batching: Batching| {
            let mut model = tiny_model(&config, 3);
            prune_model(
                &mut model,
                method,
                &MethodOptions::default(),
                Sparsity::unstructured(0.5).unwrap(),
                &windows(),
                batching,
                |_, _| {},
            )
            .unwrap();
            weights(&model, 1, "mlp.down_proj").0
        };
        let reference = prune(Batching::from(4));
        for (batch, host_activations) in [(4, true), (1, true), (3, false)] {
            assert_eq!(
                prune(Batching {
                    batch,
                    host_activations
                }),
                reference,
                "{method:?}, batch {batch}, on the host: {host_activations}"
            );
        }
    }
}

/// Selecting on the device (`WANDA_DEVICE_SELECT=on`: Wanda's and magnitude's unstructured
/// rules in Burn's ops, as on a GPU without a selection kernel; `bisection` the same on every
/// backend; N:M falls back to the host without a backend's kernel) saves the same model and
/// reports the same sparsity as selecting on the host, on the fused f32 backend and on a
/// backend in f16.
#[test]
fn selecting_on_the_device_saves_what_the_host_selection_saves() {
    let dir = tempfile::tempdir().unwrap();
    let (tiny, calib) = tiny_with_calibration(dir.path(), 9);
    let flag = |sparsity: &str| {
        if sparsity.contains(':') {
            "--pattern"
        } else {
            "--sparsity"
        }
    };
    let run = |select: &str, device: &str, method: &str, sparsity: &str| {
        let saved = dir
            .path()
            .join(format!("{select}-{device}-{method}-{sparsity}"));
        let out = output_ok(
            prune_command(&tiny, &calib)
                .env("WANDA_DEVICE_SELECT", select)
                .env("WANDA_PHASE_TIMES", "1")
                .args(["--json", "--device", device, "--method", method])
                .args([
                    flag(sparsity),
                    sparsity,
                    "--nsamples",
                    "4",
                    "--seqlen",
                    "16",
                ])
                .arg("--save")
                .arg(&saved),
        );
        let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // Tokenising the calibration text is a stage of its own, reported apart from the
        // pruning (magnitude reads no calibration text).
        assert_eq!(
            printed["calibrate_seconds"].is_f64(),
            method == "wanda",
            "{printed}"
        );
        let weights = std::fs::read(saved.join("model.safetensors")).unwrap();
        // The phase timer names where each linear was selected.
        let phases = String::from_utf8_lossy(&out.stderr);
        // N:M selects on the device only by a backend's kernel (CUDA's), so here on the host.
        assert_eq!(
            phases.contains("select on device"),
            select != "off" && !sparsity.contains(':'),
            "{select} {sparsity}: {phases}"
        );
        (printed["sparsity"].clone(), weights)
    };
    for device in ["cpu", "cpu-flex-f16"] {
        let cases = [
            ("wanda", "0.5"),
            ("wanda", "0.7"),
            ("magnitude", "0.6"),
            ("wanda", "2:4"),
        ];
        for (method, sparsity) in cases {
            let host = run("off", device, method, sparsity);
            assert!(host.0["total"].as_f64().unwrap() > 0.45, "{}", host.0);
            let selects = if device == "cpu" {
                &["on", "bisection"][..]
            } else {
                &["on"]
            };
            for &select in selects {
                let on_device = run(select, device, method, sparsity);
                assert_eq!(on_device.0, host.0, "{select} {device} {method} {sparsity}");
                assert!(
                    on_device.1 == host.1,
                    "{select} {device} {method} {sparsity}: saved weights differ"
                );
            }
        }
    }
}

/// An unknown `WANDA_DEVICE_SELECT` is refused with the variable and its values named.
#[test]
fn an_unknown_device_selection_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (tiny, calib) = tiny_with_calibration(dir.path(), 9);
    let out = prune_command(&tiny, &calib)
        .env("WANDA_DEVICE_SELECT", "gpu")
        .args([
            "--device",
            "cpu",
            "--method",
            "wanda",
            "--nsamples",
            "2",
            "--seqlen",
            "16",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("WANDA_DEVICE_SELECT=`gpu`: use auto, on, off or bisection"),
        "{stderr}"
    );
}

/// A flag value the pipeline check refuses is named as the command's flag, once per line, with
/// its help, and not at a line of the pipeline the command generated (which no file holds).
#[test]
fn a_refused_flag_is_named_as_a_flag_with_one_error_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let (tiny, calib) = tiny_with_calibration(dir.path(), 9);
    let stderr = output_refused(prune_command(&tiny, &calib).args([
        "--device",
        "cpu",
        "--method",
        "wanda",
        "--sparsity",
        "1.5",
    ]));
    assert!(
        stderr.starts_with(
            "error: the flags of `wanda prune`: `prune.sparsity` is `1.5`, outside [0, 1)\n  = help:"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
    assert!(!stderr.contains("wanda-prune.yaml"), "{stderr}");
}

/// `--save` into a folder wanda did not write is refused before any work and leaves it as it
/// was (a save used to replace whatever was there: `--save ~/models` emptied `~/models`); an
/// earlier save of wanda's own is replaced.
#[test]
fn save_refuses_a_folder_it_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let (tiny, calib) = tiny_with_calibration(dir.path(), 9);
    let theirs = dir.path().join("theirs");
    std::fs::create_dir_all(theirs.join("sub")).unwrap();
    std::fs::write(theirs.join("notes.txt"), "precious").unwrap();
    let save = |to: &std::path::Path, sparsity: &str| {
        let mut command = prune_command(&tiny, &calib);
        command
            .args(["--device", "cpu", "--method", "magnitude"])
            .args(["--sparsity", sparsity])
            .arg("--save")
            .arg(to);
        command
    };
    // Refused before pruning: nothing printed on stdout.
    let stderr = output_refused(&mut save(&theirs, "0.5"));
    assert!(
        stderr.contains("was not written by wanda (it holds `notes.txt`, `sub`"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(theirs.join("notes.txt")).unwrap(),
        "precious"
    );
    assert!(theirs.join("sub").is_dir());

    let ours = dir.path().join("ours");
    for sparsity in ["0.5", "0.25"] {
        output_ok(&mut save(&ours, sparsity));
    }
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ours.join(wanda::stages::SPARSITY_FILE)).unwrap(),
    )
    .unwrap();
    // Magnitude's one threshold per matrix keeps ties, so 25 % is met to within a few weights.
    let total = report["total"].as_f64().unwrap();
    assert!(
        (total - 0.25).abs() < 0.01,
        "the second save replaced the first: {total}"
    );
}
