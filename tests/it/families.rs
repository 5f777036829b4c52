//! Conformance of every decoder family against transformers: `scripts/make-family-fixture.py`
//! makes a tiny random model of the family with transformers and saves it with its logits on
//! fixed ids (`tests/fixtures/models/tiny-<family>/`); here the folder loads and must give those
//! logits, on the fused CPU path and on Burn's generic ops, and streams and prunes to the bit
//! like the model in memory.

use std::path::Path;
use std::sync::Arc;

use burn::backend::Flex;
use burn::prelude::*;
use wanda::model::arch::HfLlamaConfig;
use wanda::model::checkpoint::{build_llama, SafetensorsSource, WeightSource};
use wanda::model::checkpoint::{Layers, StreamedLlama};
use wanda::model::kernels::to_host_f32;
use wanda::model::{self, ModelRef};
use wanda::prune::layerwise::prune_model;
use wanda::prune::{Method, MethodOptions, Sparsity};

use crate::common::{max_difference, output_ok, B};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/models");

/// Largest logit difference allowed (the issue's conformance bound).
const TOLERANCE: f32 = 1e-4;

/// The ids and transformers' logits of a fixture.
fn reference(folder: &Path) -> (Vec<i64>, Vec<f32>) {
    let text = std::fs::read_to_string(folder.join("logits.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = json["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let logits = json["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter())
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    (ids, logits)
}

/// Logits of `ids` from the folder loaded on backend `K`.
fn logits<K: Backend>(folder: &Path, ids: &[i64]) -> Vec<f32> {
    let loaded = model::load::<K>(&ModelRef::Folder(folder.to_path_buf()), &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e:#}", folder.display()));
    let tokens = Tensor::<K, 2, Int>::from_data(
        TensorData::new(ids.to_vec(), [1, ids.len()]),
        &Default::default(),
    );
    loaded.model.forward(tokens).into_data().to_vec().unwrap()
}

/// The names of the tensors in `folder/model.safetensors`.
fn tensor_names(folder: &Path) -> std::collections::BTreeSet<String> {
    let bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    meta.tensors().keys().cloned().collect()
}

/// A temporary folder holding `folder`'s `config.json` and `tokenizer.json`, for a test to
/// write weights of its own beside them.
fn config_and_tokenizer_of(folder: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(folder.join(file), dir.path().join(file)).unwrap();
    }
    dir
}

/// Logits of fixed ids from the folder at `path` loaded on the default backend.
fn folder_logits(path: &Path) -> Vec<f32> {
    let ids = [1i64, 5, 9, 3, 31, 0, 17, 64, 95, 2];
    let loaded =
        model::load::<B>(&ModelRef::Folder(path.to_path_buf()), &Default::default()).unwrap();
    crate::common::logits(&loaded.model, &ids)
}

#[test]
fn every_family_gives_transformers_logits() {
    for family in [
        "llama",
        "qwen2",
        "qwen3",
        "mistral",
        "ministral",
        "phi3",
        "gemma2",
        "gemma3",
        "opt",
        "gpt_neox",
        "gpt_neox-sequential",
        "bloom",
        "falcon",
        "falcon-new",
        "falcon-sequential",
        "phi",
        "gemma",
        "stablelm",
        "stablelm-parallel",
        "olmo2",
        "olmo3",
        "phi3-longrope",
        "phi4-mini",
        "smollm3",
        "granite",
        "glm",
        "glm4",
        "qwen2-sliding",
        "cohere",
        "cohere2",
        "smollm3-sliding",
        "cohere-qknorm",
        "olmo",
        "mixtral",
        "qwen3_moe",
        "olmoe",
        "qwen2_moe",
        "starcoder2",
        "gptj",
        "nemotron",
        "gpt2",
        "gpt_bigcode",
        "gpt_bigcode-mha",
        "arcee",
        "exaone4",
        "exaone4-full",
        "gpt_neo",
        "ernie4_5",
        "gpt_oss",
        "gpt_oss-mxfp4",
        "glm4_moe",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v3-fp8",
        "llama4",
        "granitemoe",
        "granitemoeshared",
        "granitemoehybrid",
        "granitemoehybrid-moe",
        // The language models of vision-language checkpoints (vision_language.rs).
        "gemma3-vl",
        "mistral3-vl",
        "llava",
        "qwen2_5-vl",
        "qwen3-vl",
        "qwen3-vl-moe",
        "llama4-vl",
    ] {
        let folder = Path::new(FIXTURES).join(format!("tiny-{family}"));
        let (ids, expected) = reference(&folder);
        let fused = logits::<B>(&folder, &ids);
        let generic = logits::<Flex>(&folder, &ids);
        let (fused_diff, generic_diff) = (
            max_difference(&fused, &expected),
            max_difference(&generic, &expected),
        );
        eprintln!(
            "{family}: max |logit difference| fused {fused_diff:.2e}, generic {generic_diff:.2e}"
        );
        assert!(fused_diff < TOLERANCE, "{family} fused: {fused_diff}");
        assert!(generic_diff < TOLERANCE, "{family} generic: {generic_diff}");
    }
}

/// Prunes `a` and `b` alike (`method` at 50 %, the same calibration windows) and checks that
/// they report the same sparsity, layer by layer.
fn prune_alike(
    a: &mut impl Layers<B>,
    b: &mut impl Layers<B>,
    method: Method,
    calibration: &[Vec<u32>],
) {
    prune_alike_at(
        a,
        b,
        method,
        Sparsity::unstructured(0.5).unwrap(),
        calibration,
    );
}

/// [`prune_alike`] at `sparsity`.
fn prune_alike_at(
    a: &mut impl Layers<B>,
    b: &mut impl Layers<B>,
    method: Method,
    sparsity: Sparsity,
    calibration: &[Vec<u32>],
) {
    let options = MethodOptions::default();
    let x = prune_model(a, method, &options, sparsity, calibration, 2, |_, _| {}).unwrap();
    let y = prune_model(b, method, &options, sparsity, calibration, 2, |_, _| {}).unwrap();
    assert_eq!(x, y, "{method:?}");
}

/// Qwen3's q/k norms, Gemma's `1 + w` norms and GeGLU, Gemma 3's four norms and local layers,
/// Gemma 2's soft-caps and Nemotron's `1 + w` LayerNorms and squared ReLU go through the layer
/// store and pruning exactly as the model in memory does.
#[test]
fn qwen3_gemma_and_nemotron_checkpoints_stream_and_prune_to_the_bit_like_in_memory() {
    for (family, norms) in [
        ("qwen3", 4),
        ("gemma", 2),
        ("gemma2", 4),
        ("gemma3", 6),
        ("nemotron", 2),
    ] {
        let folder = Path::new(FIXTURES).join(format!("tiny-{family}"));
        let source: Arc<dyn WeightSource> = Arc::new(SafetensorsSource::open(&folder).unwrap());
        let config = HfLlamaConfig::from_file(&folder.join("config.json"))
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(config.qk_norm, matches!(family, "qwen3" | "gemma3"));
        let device = Default::default();
        let store = tempfile::tempdir().unwrap();
        let mut resident = build_llama::<B>(&config, source.as_ref(), &device).unwrap();
        let mut streamed =
            StreamedLlama::<B>::open(&config, source, &device, store.path()).unwrap();
        let calibration: Vec<Vec<u32>> = (0..4)
            .map(|w| (0..12).map(|t| ((w * 11 + t * 5) % 96) as u32).collect())
            .collect();
        prune_alike(&mut resident, &mut streamed, Method::Wanda, &calibration);
        for i in 0..resident.layer_count() {
            let (x, y) = (
                resident.layer(i).unwrap().into_owned(),
                streamed.layer(i).unwrap().into_owned(),
            );
            for ((name, _, l), (_, _, m)) in x.linears().into_iter().zip(y.linears()) {
                assert_eq!(
                    to_host_f32(l.weight.val()),
                    to_host_f32(m.weight.val()),
                    "{family} layer {i} {name}"
                );
            }
            for ((name, n), (_, m)) in x.norms().into_iter().zip(y.norms()) {
                assert_eq!(
                    to_host_f32(n.weight.val()),
                    to_host_f32(m.weight.val()),
                    "{family} layer {i} {name}"
                );
            }
            assert_eq!(
                x.norms().len(),
                norms,
                "{family}: every norm survives the store"
            );
        }
        let ids: Vec<i64> = (0..16).map(|t| (t * 7 % 96) as i64).collect();
        let streamed = streamed.into_resident().unwrap();
        assert_eq!(
            crate::common::logits(&resident, &ids),
            crate::common::logits(&streamed, &ids),
            "{family}"
        );
    }
}

/// Gemma 1, 2 and 3 and Nemotron saved as folders (pruned at 0 %, so nothing changes) hold for
/// every norm a `w` whose `1 + w` (what transformers applies, in f32) is the checkpoint's to
/// the bit, under their names (two per layer in Gemma 1 and Nemotron, four in Gemma 2 and 3),
/// and each copy gives
/// transformers' logits (Gemma 2's soft-caps included: without either, the logits move by 8.8
/// and more). (The model holds `1 + w`, so
/// the last bits of an f32 `w` below 1 are rounded away; bf16 and f16 gains of 2^-16 and more
/// come back exactly.)
#[test]
fn a_saved_gemma_or_nemotron_holds_the_checkpoints_norms_and_gives_transformers_logits() {
    let sandwich = [
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ];
    for (family, layers, norms, qk_norms) in [
        ("gemma", 2, 2, false),
        ("gemma2", 3, 4, false),
        ("gemma3", 3, 4, true),
        ("nemotron", 2, 2, false),
    ] {
        let folder = Path::new(FIXTURES).join(format!("tiny-{family}"));
        let dir = tempfile::tempdir().unwrap();
        let saved = dir.path().join("copy");
        prune_and_save(&folder, &["--sparsity", "0"], &saved);
        let original = SafetensorsSource::open(&folder).unwrap();
        let copy = SafetensorsSource::open(&saved).unwrap();
        let layer_norms: Vec<&str> = sandwich[..norms]
            .iter()
            .copied()
            .chain(
                qk_norms
                    .then_some(["self_attn.q_norm", "self_attn.k_norm"])
                    .into_iter()
                    .flatten(),
            )
            .collect();
        let names = (0..layers)
            .flat_map(|i| {
                layer_norms
                    .iter()
                    .map(move |n| format!("model.layers.{i}.{n}.weight"))
            })
            .chain(["model.norm.weight".to_string()]);
        for name in names {
            let a = original.tensor(&name).unwrap().unwrap();
            let b = copy
                .tensor(&name)
                .unwrap()
                .unwrap_or_else(|| panic!("{family} {name}"));
            let gains = |t: &[f32]| t.iter().map(|w| 1.0 + w).collect::<Vec<f32>>();
            assert_eq!(gains(&a.data), gains(&b.data), "{family} {name}");
        }
        let (ids, expected) = reference(&folder);
        let diff = max_difference(&logits::<B>(&saved, &ids), &expected);
        assert!(diff < TOLERANCE, "{family}: {diff}");
    }
}

/// `wanda prune --method magnitude --device cpu` of `folder` with `args`, saved to `saved`;
/// fails the test with wanda's stderr when it fails.
fn prune_and_save(folder: &Path, args: &[&str], saved: &Path) {
    output_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_wanda"))
            .args(["prune", "--model", folder.to_str().unwrap()])
            .args(["--method", "magnitude", "--device", "cpu"])
            .args(args)
            .arg("--save")
            .arg(saved),
    );
}

#[test]
fn a_phi3_checkpoint_prunes_like_its_split_twin_and_saves_stacked() {
    use wanda::model::checkpoint::hf_source;
    use wanda::model::checkpoint::{save_hf_folder, SaveDtype, SaveSpec};

    let folder = Path::new(FIXTURES).join("tiny-phi3");
    let config = HfLlamaConfig::from_file(&folder.join("config.json"))
        .unwrap()
        .resolve()
        .unwrap();
    let tokenizer = std::fs::read_to_string(folder.join("tokenizer.json")).unwrap();
    let source = hf_source(&config, SafetensorsSource::open(&folder).unwrap());
    let device = Default::default();
    let mut stacked = build_llama::<B>(&config, source.as_ref(), &device).unwrap();

    // The same weights as a split checkpoint: Mistral's layer is Phi-3's, linears apart.
    let dir = tempfile::tempdir().unwrap();
    let mut twin_config = config.clone();
    twin_config.architecture = wanda::model::arch::Architecture::Mistral;
    let twin_folder = dir.path().join("twin");
    save_hf_folder(
        &stacked,
        &twin_config,
        &tokenizer,
        &twin_folder,
        &SaveSpec::new(SaveDtype::F32),
    )
    .unwrap();
    assert!(tensor_names(&twin_folder)
        .iter()
        .any(|n| n.ends_with("self_attn.k_proj.weight")));
    let mut split = model::load::<B>(&ModelRef::Folder(twin_folder), &device)
        .unwrap()
        .model;

    let calibration: Vec<Vec<u32>> = (0..4)
        .map(|w| (0..12).map(|t| ((w * 13 + t * 7) % 96) as u32).collect())
        .collect();
    // Wanda's per-output rule and SparseGPT's 2:4 select each output apart, so the stack
    // prunes as its parts would; unstructured magnitude and SparseGPT select over the whole
    // stack (`stacked_linears_are_pruned_as_the_one_matrix_the_checkpoint_holds`).
    let two_four = Sparsity::NM { n: 2, m: 4 };
    for (method, sparsity) in [
        (Method::Wanda, Sparsity::unstructured(0.5).unwrap()),
        (Method::Sparsegpt, two_four),
    ] {
        prune_alike_at(&mut stacked, &mut split, method, sparsity, &calibration);
    }
    for (x, y) in stacked.layers.iter().zip(&split.layers) {
        for ((name, _, l), (_, _, m)) in x.linears().into_iter().zip(y.linears()) {
            assert_eq!(
                to_host_f32(l.weight.val()),
                to_host_f32(m.weight.val()),
                "{name}"
            );
        }
    }

    // Saved as Phi-3 again: stacked names only, and the same logits back.
    let saved = dir.path().join("pruned");
    save_hf_folder(
        &stacked,
        &config,
        &tokenizer,
        &saved,
        &SaveSpec::new(SaveDtype::F32),
    )
    .unwrap();
    let saved_names = tensor_names(&saved);
    assert!(saved_names
        .iter()
        .any(|n| n == "model.layers.1.self_attn.qkv_proj.weight"));
    assert!(saved_names
        .iter()
        .any(|n| n == "model.layers.1.mlp.gate_up_proj.weight"));
    assert!(!saved_names.iter().any(|n| n.ends_with("q_proj.weight")
        || n.ends_with("up_proj.weight") && !n.ends_with("gate_up_proj.weight")));
    let reloaded = model::load::<B>(&ModelRef::Folder(saved), &device).unwrap();
    let ids = [1i64, 5, 9, 3, 31, 0, 17, 64, 95, 2];
    assert_eq!(
        crate::common::logits(&stacked, &ids),
        crate::common::logits(&reloaded.model, &ids)
    );
}

/// Magnitude's per-matrix threshold and SparseGPT's per-block one run over the matrix the
/// checkpoint stores (Phi-3's `qkv_proj` and `gate_up_proj`, GPT-NeoX's `query_key_value`), as
/// the reference code, which sees the checkpoint's modules, runs them: one magnitude threshold
/// for q, k and v together (every pruned weight at most every kept one, pooled), while the
/// parts' own sparsities differ from 50 %; Wanda's per-output rule gives the same either way.
#[test]
fn stacked_linears_are_pruned_as_the_one_matrix_the_checkpoint_holds() {
    for (family, stacks) in [
        (
            "phi3",
            vec![
                vec!["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
                vec!["mlp.gate_proj", "mlp.up_proj"],
            ],
        ),
        (
            "gpt_neox",
            vec![vec![
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
            ]],
        ),
        (
            "bloom",
            vec![vec![
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
            ]],
        ),
        (
            "falcon-new",
            vec![vec![
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
            ]],
        ),
    ] {
        let folder = Path::new(FIXTURES).join(format!("tiny-{family}"));
        let device = Default::default();
        let load = || {
            model::load::<B>(&ModelRef::Folder(folder.clone()), &device)
                .unwrap()
                .model
        };
        let (dense, mut pruned) = (load(), load());
        let sparsity = Sparsity::unstructured(0.5).unwrap();
        let report = prune_model(
            &mut pruned,
            Method::Magnitude,
            &MethodOptions::default(),
            sparsity,
            &[],
            1,
            |_, _| {},
        )
        .unwrap();
        let mut parts_off_half = 0;
        for (i, (d, p)) in dense.layers.iter().zip(&pruned.layers).enumerate() {
            let weights = |layer: &wanda::model::decoder::DecoderLayer<B>, name: &str| {
                let (_, _, l) = layer
                    .linears()
                    .into_iter()
                    .find(|(n, _, _)| *n == name)
                    .unwrap();
                to_host_f32(l.weight.val())
            };
            for stack in &stacks {
                let (mut largest_pruned, mut smallest_kept) = (0f32, f32::INFINITY);
                for name in stack {
                    for (w, after) in weights(d, name).into_iter().zip(weights(p, name)) {
                        if after == 0.0 {
                            largest_pruned = largest_pruned.max(w.abs());
                        } else {
                            smallest_kept = smallest_kept.min(w.abs());
                        }
                    }
                    let fraction = report.per_linear[&format!("model.layers.{i}.{name}")].fraction;
                    parts_off_half += usize::from((fraction - 0.5).abs() > 1e-3);
                }
                assert!(
                    largest_pruned <= smallest_kept,
                    "{family} layer {i} {stack:?}: pruned {largest_pruned} > kept {smallest_kept}"
                );
            }
        }
        assert!(
            parts_off_half > 0,
            "{family}: every part at 50 % on its own"
        );
    }
}

/// A saved copy keeps every key of the checkpoint's own config.json (transformers needs keys
/// this tool does not model: Phi-3's default `pad_token_id` is outside a small vocabulary),
/// and says the saved dtype.
#[test]
fn a_saved_copy_keeps_the_checkpoints_config_keys() {
    let folder = Path::new(FIXTURES).join("tiny-phi3");
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("pruned");
    prune_and_save(&folder, &["--sparsity", "0.5", "--dtype", "f16"], &saved);
    let read = |path: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let (original, copy) = (
        read(&folder.join("config.json")),
        read(&saved.join("config.json")),
    );
    for key in [
        "pad_token_id",
        "original_max_position_embeddings",
        "rope_parameters",
        "sliding_window",
    ] {
        assert_eq!(copy[key], original[key], "{key}");
    }
    assert_eq!(copy["dtype"], "float16");
    assert_eq!(copy["torch_dtype"], "float16");
    assert_eq!(copy["architectures"][0], "Phi3ForCausalLM");
}

/// A BLOOM copy saved by `wanda prune` keeps BLOOM's own spellings of its keys (`n_layer`,
/// `n_head`, `layer_norm_epsilon`) beside the usual ones it writes, and loads again: the two
/// spellings agreeing are read as one (serde aliases would refuse them as duplicates).
#[test]
fn a_saved_bloom_keeps_both_spellings_of_its_keys_and_loads_again() {
    let folder = Path::new(FIXTURES).join("tiny-bloom");
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("pruned");
    prune_and_save(&folder, &["--sparsity", "0.5"], &saved);
    let copy: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(saved.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        (&copy["n_layer"], &copy["num_hidden_layers"]),
        (&2.into(), &2.into())
    );
    assert_eq!(
        (&copy["n_head"], &copy["num_attention_heads"]),
        (&5.into(), &5.into())
    );
    assert_eq!(copy["layer_norm_epsilon"], 1e-5);
    assert_ne!(
        folder_logits(&saved),
        folder_logits(&folder),
        "nothing pruned"
    );
}

/// OPT (LayerNorms with biases, biased linears, the ungated ReLU MLP, learned positions, its
/// own tensor names): streamed through the layer store and pruned by every method exactly as
/// in memory, six linears a layer as `main_opt.py` prunes; saved under OPT's names with every
/// bias, and the copy gives the pruned model's logits back.
#[test]
fn an_opt_checkpoint_streams_prunes_and_saves_under_its_own_names() {
    use wanda::model::checkpoint::hf_source;
    use wanda::model::checkpoint::{save_hf_folder, SaveDtype, SaveSpec};

    let folder = Path::new(FIXTURES).join("tiny-opt");
    let config = HfLlamaConfig::from_file(&folder.join("config.json"))
        .unwrap()
        .resolve()
        .unwrap();
    let source = hf_source(&config, SafetensorsSource::open(&folder).unwrap());
    let device = Default::default();
    let calibration: Vec<Vec<u32>> = (0..4)
        .map(|w| (0..12).map(|t| ((w * 11 + t * 5) % 96) as u32).collect())
        .collect();
    let ids = [1i64, 5, 9, 3, 31, 0, 17, 64, 95, 2];
    for method in [Method::Magnitude, Method::Wanda, Method::Sparsegpt] {
        let store = tempfile::tempdir().unwrap();
        let mut resident = build_llama::<B>(&config, source.as_ref(), &device).unwrap();
        let mut streamed =
            StreamedLlama::<B>::open(&config, source.clone(), &device, store.path()).unwrap();
        prune_alike(&mut resident, &mut streamed, method, &calibration);
        let linears: Vec<String> = resident.layers[0]
            .linears()
            .into_iter()
            .map(|(name, _, _)| name)
            .collect();
        assert_eq!(
            linears,
            [
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "self_attn.o_proj",
                "mlp.up_proj",
                "mlp.down_proj"
            ]
        );
        let streamed = streamed.into_resident().unwrap();
        let pruned = crate::common::logits(&resident, &ids);
        assert_eq!(pruned, crate::common::logits(&streamed, &ids), "{method:?}");
        let dense = crate::common::logits(
            &build_llama::<B>(&config, source.as_ref(), &device).unwrap(),
            &ids,
        );
        assert_ne!(pruned, dense, "{method:?} pruned nothing");

        let saved = store.path().join("copy");
        let tokenizer = std::fs::read_to_string(folder.join("tokenizer.json")).unwrap();
        save_hf_folder(
            &resident,
            &config,
            &tokenizer,
            &saved,
            &SaveSpec::new(SaveDtype::F32),
        )
        .unwrap();
        assert_eq!(tensor_names(&saved), tensor_names(&folder), "{method:?}");
        let reloaded = model::load::<B>(&ModelRef::Folder(saved), &device).unwrap();
        assert_eq!(pruned, crate::common::logits(&reloaded.model, &ids));
    }
}

/// GPT-NeoX (Pythia's parallel residual and partial rotary, and the sequential layer with half
/// of each head rotating), BLOOM (ALiBi, the embeddings' norm), Falcon (one kv head and a
/// shared norm; grouped kv heads and two norms; the sequential layer), Phi (a shared
/// LayerNorm, partial rotary, the LM head's bias) and StableLM (LayerNorms with SwiGLU, q/k/v
/// biases, sequential and parallel), OLMo 2 and 3 (output norms alone, q/k norms across the
/// heads; OLMo 3's sliding layers and YaRN), LongRoPE Phi-3 and Phi-4-mini, SmolLM3, Granite,
/// GLM, Qwen2's sliding layers, Cohere (one bias-free LayerNorm a layer; Cohere 2's NoPE
/// full layers), StarCoder2 (biases everywhere, a sliding window), GPT-J (one shared
/// `ln_1`, interleaved partial rotary, the LM head's bias), GPT-2 (learned positions from row
/// 0, `Conv1D` weights stored `[in, out]`, q/k/v stacked part by part) and GPT-BigCode (one kv
/// head, or q/k/v head by head): streamed through the layer store and pruned by every method exactly as in memory, six linears a layer (seven with a gate), q/k/v split out of
/// `query_key_value` by kv head where the checkpoint stacks them; saved under the family's
/// names with `query_key_value` stacked by kv head again, `Conv1D` weights transposed back and
/// a shared norm written once
/// (unpruned, the very tensors of the checkpoint), and the pruned copy gives the pruned model's
/// logits back.
#[test]
fn checkpoints_under_their_own_names_stream_prune_and_save_alike() {
    use wanda::model::checkpoint::hf_source;
    use wanda::model::checkpoint::{save_hf_folder, SaveDtype, SaveSpec};

    for (family, parallel) in [
        ("gpt_neox", true),
        ("gpt_neox-sequential", false),
        ("bloom", false),
        ("falcon", true),
        ("falcon-new", true),
        ("falcon-sequential", false),
        ("phi", true),
        ("stablelm", false),
        ("stablelm-parallel", true),
        ("olmo2", false),
        ("olmo3", false),
        ("ministral", false),
        ("phi3-longrope", false),
        ("phi4-mini", false),
        ("smollm3", false),
        ("granite", false),
        ("glm", false),
        ("glm4", false),
        ("qwen2-sliding", false),
        ("cohere", true),
        ("cohere2", true),
        ("smollm3-sliding", false),
        ("cohere-qknorm", true),
        ("olmo", false),
        ("mixtral", false),
        ("qwen3_moe", false),
        ("olmoe", false),
        ("qwen2_moe", false),
        ("starcoder2", false),
        ("gptj", true),
        ("gpt2", false),
        ("gpt_bigcode", false),
        ("gpt_bigcode-mha", false),
        ("arcee", false),
        ("exaone4", false),
        ("exaone4-full", false),
        ("gpt_neo", false),
        ("ernie4_5", false),
        ("gpt_oss", false),
        ("glm4_moe", false),
        ("deepseek_v2", false),
        ("deepseek_v3", false),
        ("llama4", false),
        ("granitemoe", false),
        ("granitemoeshared", false),
        ("granitemoehybrid", false),
        ("granitemoehybrid-moe", false),
    ] {
        let folder = Path::new(FIXTURES).join(format!("tiny-{family}"));
        let config = HfLlamaConfig::from_file(&folder.join("config.json"))
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(config.extras.parallel_residual, parallel, "{family}");
        let source = hf_source(&config, SafetensorsSource::open(&folder).unwrap());
        let device = Default::default();
        let tokenizer = std::fs::read_to_string(folder.join("tokenizer.json")).unwrap();
        let store = tempfile::tempdir().unwrap();

        // Unpruned, the saved tensors are the checkpoint's, bit for bit.
        let dense = build_llama::<B>(&config, source.as_ref(), &device).unwrap();
        let copy = store.path().join("dense");
        save_hf_folder(
            &dense,
            &config,
            &tokenizer,
            &copy,
            &SaveSpec::new(SaveDtype::F32),
        )
        .unwrap();
        assert_eq!(tensor_names(&copy), tensor_names(&folder), "{family}");
        let (original, saved) = (
            SafetensorsSource::open(&folder).unwrap(),
            SafetensorsSource::open(&copy).unwrap(),
        );
        for name in tensor_names(&folder) {
            assert_eq!(
                original.tensor(&name).unwrap().unwrap().data,
                saved.tensor(&name).unwrap().unwrap().data,
                "{family} {name}"
            );
        }

        let calibration: Vec<Vec<u32>> = (0..4)
            .map(|w| (0..12).map(|t| ((w * 11 + t * 5) % 96) as u32).collect())
            .collect();
        let ids = [1i64, 5, 9, 3, 31, 0, 17, 64, 95, 2];
        let dense_logits = crate::common::logits(&dense, &ids);
        for method in [Method::Magnitude, Method::Wanda, Method::Sparsegpt] {
            let layers = tempfile::tempdir().unwrap();
            let mut resident = build_llama::<B>(&config, source.as_ref(), &device).unwrap();
            let mut streamed =
                StreamedLlama::<B>::open(&config, source.clone(), &device, layers.path()).unwrap();
            prune_alike(&mut resident, &mut streamed, method, &calibration);
            let gated = [
                "stablelm",
                "olmo",
                "phi3",
                "phi4",
                "smollm3",
                "granite",
                "glm",
                "qwen2",
                "cohere",
                "exaone",
                "ernie",
                "llama4",
                "ministral",
            ]
            .iter()
            .any(|f| family.starts_with(f));
            // With experts: attention's four, the router and four experts' three.
            let linears = match family {
                "mixtral" | "qwen3_moe" | "olmoe" | "gpt_oss" | "granitemoe" => 4 + 1 + 4 * 3,
                // And the ungated shared MLP's three.
                "granitemoeshared" | "granitemoehybrid-moe" => 4 + 1 + 4 * 3 + 3,
                // And the shared expert's three and its gate.
                "qwen2_moe" => 4 + 1 + 4 * 3 + 4,
                // Latent attention's q_proj, kv_a_proj_with_mqa, kv_b_proj and o_proj (V3:
                // q_a_proj and q_b_proj for q_proj), then the dense MLP's three.
                "deepseek_v2" => 4 + 3,
                "deepseek_v3" => 5 + 3,
                _ => 6 + usize::from(gated),
            };
            assert_eq!(resident.layers[0].linears().len(), linears);
            // After the dense first layer: the router, eight experts' three, the shared
            // expert's three and no gate of its output.
            let attention = match family {
                "glm4_moe" => Some(4),
                "deepseek_v2" => Some(4),
                "deepseek_v3" => Some(5),
                _ => None,
            };
            if let Some(attention) = attention {
                assert_eq!(
                    resident.layers[1].linears().len(),
                    attention + 1 + 8 * 3 + 3,
                    "{family}"
                );
            }
            // Llama 4's layers alternate: dense, then the router, four experts' three and the
            // shared expert's three.
            if family == "llama4" {
                assert_eq!(resident.layers[1].linears().len(), 4 + 1 + 4 * 3 + 3);
                assert_eq!(resident.layers[2].linears().len(), 7);
            }
            let streamed = streamed.into_resident().unwrap();
            let pruned = crate::common::logits(&resident, &ids);
            assert_eq!(
                pruned,
                crate::common::logits(&streamed, &ids),
                "{family} {method:?}"
            );
            assert_ne!(pruned, dense_logits, "{family} {method:?} pruned nothing");
            let saved = layers.path().join("copy");
            save_hf_folder(
                &resident,
                &config,
                &tokenizer,
                &saved,
                &SaveSpec::new(SaveDtype::F32),
            )
            .unwrap();
            let reloaded = model::load::<B>(&ModelRef::Folder(saved), &device).unwrap();
            assert_eq!(
                pruned,
                crate::common::logits(&reloaded.model, &ids),
                "{family} {method:?}"
            );
        }
    }
}

/// Older hub checkpoints keep buffers beside the parameters: Pythia's a boolean causal mask
/// per layer (`attention.bias`, `[1, 1, 2048, 2048]`) and a scalar `attention.masked_bias`;
/// GPT-2's (openai-community/gpt2, saved from the headless `GPT2Model`, every name without
/// `transformer.`) an f32 mask `attn.bias`, `[1, 1, 1024, 1024]`, and the scalar. Such a folder
/// loads to the same logits, and neither masks nor scalars count as parameters (the estimator
/// would otherwise count a million weights a layer that are not there).
#[test]
fn checkpoints_with_mask_buffers_load_the_same() {
    for (family, layers, mask_dtype, headless) in [
        (
            "gpt_neox",
            "gpt_neox.layers",
            safetensors::Dtype::BOOL,
            false,
        ),
        ("gpt2", "transformer.h", safetensors::Dtype::F32, true),
    ] {
        let folder = Path::new(FIXTURES).join(format!("tiny-{family}"));
        let dir = config_and_tokenizer_of(&folder);
        let bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
        let original = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mask = match mask_dtype {
            safetensors::Dtype::BOOL => vec![1u8; 128 * 128],
            _ => vec![0u8; 4 * 128 * 128],
        };
        let masked_bias = (-1e4f32).to_le_bytes();
        let mut tensors = original.tensors();
        let module = if family == "gpt2" {
            "attn"
        } else {
            "attention"
        };
        for i in 0..2 {
            tensors.push((
                format!("{layers}.{i}.{module}.bias"),
                safetensors::tensor::TensorView::new(mask_dtype, vec![1, 1, 128, 128], &mask)
                    .unwrap(),
            ));
            tensors.push((
                format!("{layers}.{i}.{module}.masked_bias"),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![], &masked_bias)
                    .unwrap(),
            ));
        }
        if headless {
            for (name, _) in &mut tensors {
                *name = name.trim_start_matches("transformer.").to_string();
            }
        }
        safetensors::serialize_to_file(tensors, None, &dir.path().join("model.safetensors"))
            .unwrap();
        let counted = |path: &Path| SafetensorsSource::open(path).unwrap().parameter_count();
        assert_eq!(counted(dir.path()), counted(&folder), "{family}");
        assert_eq!(
            folder_logits(dir.path()),
            folder_logits(&folder),
            "{family}"
        );
    }
}

/// The hub's OPT and BLOOM checkpoints were saved from the headless base model (`OPTModel`,
/// `BloomModel`): their tensors have no `model.` or `transformer.` prefix
/// (`decoder.layers.0.fc1.weight`, `h.0.mlp.dense_h_to_4h.weight`) and no `lm_head`. Such a
/// folder loads as the prefixed one does, to the same logits.
#[test]
fn checkpoints_saved_without_the_base_model_prefix_load_the_same() {
    for (family, prefix, example) in [
        ("opt", "model.", "decoder.layers.0.fc1.weight"),
        ("bloom", "transformer.", "h.0.mlp.dense_h_to_4h.weight"),
    ] {
        let folder = Path::new(FIXTURES).join(format!("tiny-{family}"));
        let dir = config_and_tokenizer_of(&folder);
        let bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
        let original = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let headless: Vec<(String, safetensors::tensor::TensorView<'_>)> = original
            .tensors()
            .into_iter()
            .map(|(name, view)| (name.strip_prefix(prefix).unwrap().to_string(), view))
            .collect();
        assert!(headless.iter().any(|(n, _)| n == example), "{family}");
        safetensors::serialize_to_file(headless, None, &dir.path().join("model.safetensors"))
            .unwrap();
        assert_eq!(
            folder_logits(dir.path()),
            folder_logits(&folder),
            "{family}"
        );
    }
}

/// Learned positions end where OPT's table ends: a window longer than
/// `max_position_embeddings` is refused by name, not run past the table.
#[test]
fn an_opt_window_past_its_position_table_is_refused() {
    let folder = Path::new(FIXTURES).join("tiny-opt");
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("calibration.txt");
    let words: Vec<String> = (0..600).map(|i| format!("w{}", 1 + i % 95)).collect();
    std::fs::write(&text, words.join(" ")).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wanda"))
        .args(["prune", "--model", folder.to_str().unwrap()])
        .args(["--method", "wanda", "--device", "cpu", "--seqlen", "200"])
        .arg("--calib-text")
        .arg(&text)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("max_position_embeddings"), "{stderr}");
}

/// An expert the router never chooses gets no calibration token; pruning still runs, with the
/// zero statistics the reference's hooks leave it: SparseGPT finds every input dead and zeroes
/// the expert, Wanda prunes half of it like the others, and the reached experts are pruned to
/// at least the sparsity asked.
#[test]
fn an_expert_no_calibration_token_reaches_is_pruned_from_zero_statistics() {
    use wanda::model::decoder::Llama;

    let config = HfLlamaConfig::from_json(
        r#"{"architectures":["MixtralForCausalLM"],"hidden_size":8,"intermediate_size":6,
        "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"vocab_size":16,
        "num_local_experts":3,"num_experts_per_tok":1}"#,
    )
    .unwrap()
    .resolve()
    .unwrap();
    let device = Default::default();
    // Router logits x·v, −x·v and 0: the larger of the first two is never below the third's,
    // and a tie goes to the lower expert, so expert 2 is never chosen.
    let v: Vec<f32> = (0..8).map(|i| i as f32 * 0.3 - 1.0).collect();
    let router: Vec<f32> = v.iter().flat_map(|&w| [w, -w, 0.0]).collect();
    let calibration: Vec<Vec<u32>> = (0..3)
        .map(|w| (0..10).map(|t| ((w * 7 + t * 3) % 16) as u32).collect())
        .collect();
    for (method, expert_2_zeros) in [(Method::Sparsegpt, 1.0), (Method::Wanda, 0.5)] {
        let mut model = Llama::<B>::init_random(&config, 3, &device);
        let gate = model.layers[0].linear_mut("mlp.gate").unwrap();
        gate.weight = burn::module::Param::from_tensor(Tensor::from_data(
            TensorData::new(router.clone(), [8, 3]),
            &device,
        ));
        let sparsity = Sparsity::unstructured(0.5).unwrap();
        let report = prune_model(
            &mut model,
            method,
            &MethodOptions::default(),
            sparsity,
            &calibration,
            2,
            |_, _| {},
        )
        .unwrap();
        // The router's third output is zero already, so it is left out.
        for (name, m) in report
            .per_linear
            .iter()
            .filter(|(n, _)| !n.ends_with("mlp.gate"))
        {
            // SparseGPT also zeroes the dead inputs of a reached linear (a hidden channel that
            // is zero for every routed token).
            let fits = match (name.contains("experts.2."), method) {
                (true, _) => m.fraction == expert_2_zeros,
                (false, Method::Sparsegpt) => m.fraction >= 0.5,
                (false, _) => m.fraction == 0.5,
            };
            assert!(fits, "{method:?} {name}: {}", m.fraction);
        }
    }
}

/// Loads the quantised fixture `quantised` and saves it in f32 as the save stage does (the
/// checkpoint's own config.json as the base of the saved one), checking what every quantised
/// checkpoint must give: a header parameter count equal to the config's, a copy under the
/// unquantised fixture's (`unquantised`) tensor names whose config has no
/// `quantization_config`, and that loads back to the same logits. Returns the quantised source
/// and the copy's, with the folder that holds the copy.
fn saves_unquantised(
    quantised: &str,
    unquantised: &str,
) -> (SafetensorsSource, SafetensorsSource, tempfile::TempDir) {
    use wanda::model::arch::ModelShape;
    use wanda::model::checkpoint::{save_hf_folder, SaveDtype, SaveSpec};

    let folder = Path::new(FIXTURES).join(quantised);
    let config = HfLlamaConfig::from_file(&folder.join("config.json"))
        .unwrap()
        .resolve()
        .unwrap();
    let source = SafetensorsSource::open(&folder).unwrap();
    assert_eq!(
        source.parameter_count(),
        ModelShape::from_config(&config).parameters,
        "{quantised}"
    );
    let device = Default::default();
    let loaded = model::load::<B>(&ModelRef::Folder(folder.clone()), &device).unwrap();
    let store = tempfile::tempdir().unwrap();
    let copy = store.path().join("copy");
    let tokenizer = std::fs::read_to_string(folder.join("tokenizer.json")).unwrap();
    let mut spec = SaveSpec::new(SaveDtype::F32);
    let base = std::fs::read_to_string(folder.join("config.json")).unwrap();
    spec.base_config = Some(serde_json::from_str(&base).unwrap());
    assert!(base.contains("quantization_config"));
    save_hf_folder(&loaded.model, &config, &tokenizer, &copy, &spec).unwrap();
    let unquantised = Path::new(FIXTURES).join(unquantised);
    assert_eq!(tensor_names(&copy), tensor_names(&unquantised));
    let saved_config = std::fs::read_to_string(copy.join("config.json")).unwrap();
    assert!(
        !saved_config.contains("quantization_config"),
        "{saved_config}"
    );
    let reloaded = model::load::<B>(&ModelRef::Folder(copy.clone()), &device).unwrap();
    let ids = [1i64, 5, 9, 3, 31, 0, 17, 64, 95, 2];
    assert_eq!(
        crate::common::logits(&loaded.model, &ids),
        crate::common::logits(&reloaded.model, &ids)
    );
    (source, SafetensorsSource::open(&copy).unwrap(), store)
}

/// DeepSeek-V3 as the hub holds it, every layer linear but the router in block-scaled FP8
/// (`tiny-deepseek_v3-fp8`: E4M3 weights beside their `weight_scale_inv`): its parameters are
/// counted one to an E4M3 value and none to a scale, as the config counts them; a copy saves
/// the dequantised weights unquantised under the f32 checkpoint's names (`tiny-deepseek_v3`)
/// and loads back to the same logits ([`saves_unquantised`]).
#[test]
fn a_deepseek_fp8_checkpoint_loads_dequantised_and_saves_unquantised() {
    let (source, saved, _store) = saves_unquantised("tiny-deepseek_v3-fp8", "tiny-deepseek_v3");
    // The saved weight is the E4M3 values times their scale, not the unquantised weight.
    let name = "model.layers.1.self_attn.kv_b_proj.weight";
    let dequantised = saved.tensor(name).unwrap().unwrap();
    assert_eq!(source.tensor(name).unwrap().unwrap(), dequantised);
    let original = SafetensorsSource::open(&Path::new(FIXTURES).join("tiny-deepseek_v3")).unwrap();
    let exact = original.tensor(name).unwrap().unwrap();
    assert_ne!(exact.data, dequantised.data, "nothing was quantised");
}

/// GPT-OSS as the hub holds it, its experts in MXFP4 (`tiny-gpt_oss-mxfp4`, made by
/// transformers' own dequantisation): its parameters are counted two to a packed byte, as the
/// config counts them; a copy saves the experts unquantised, stacked as the f32 checkpoint
/// (`tiny-gpt_oss`) names and shapes them, holding the dequantised values, and loads back to
/// the same logits ([`saves_unquantised`]).
#[test]
fn a_gpt_oss_mxfp4_checkpoint_loads_dequantised_and_saves_unquantised() {
    let (source, saved, _store) = saves_unquantised("tiny-gpt_oss-mxfp4", "tiny-gpt_oss");
    for stack in ["gate_up_proj", "down_proj", "gate_up_proj_bias"] {
        let name = format!("model.layers.1.mlp.experts.{stack}");
        let dequantised = source.tensor(&name).unwrap().unwrap();
        assert_eq!(saved.tensor(&name).unwrap().unwrap(), dequantised, "{name}");
        // One expert read alone (its bytes, or its blocks and scales) is its part of the whole.
        let per: usize = dequantised.shape[1..].iter().product();
        for source in [&source, &saved] {
            let entry = source.tensor_entry(&name, 2).unwrap().unwrap();
            assert_eq!(entry.shape, dequantised.shape[1..], "{name}");
            assert_eq!(entry.data, dequantised.data[2 * per..3 * per], "{name}");
        }
        assert!(source.tensor_entry(&name, 4).is_err(), "{name}");
    }
}

/// The families whose layers only the generic path runs (experts, latent attention) evaluate in
/// fp16 and bf16 (burn-flex with 16-bit default tensors) near their f32 perplexity: routing
/// weights made on the host stay f32 where they meet f32 products (GLM-4.5's and DeepSeek's
/// panicked on a dtype mismatch in 16 bits before), and FP8 weights dequantise in the 16-bit type.
#[test]
fn expert_and_latent_families_evaluate_in_half_precision() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("words.txt");
    let words: Vec<String> = (0..400)
        .map(|i| format!("w{}", (i * 37 + 11) % 95 + 1))
        .collect();
    std::fs::write(&text, words.join(" ")).unwrap();
    for family in [
        "mixtral",
        "qwen2_moe",
        "gpt_oss",
        "glm4_moe",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v3-fp8",
        "llama4",
        "granitemoehybrid-moe",
    ] {
        let folder = Path::new(FIXTURES).join(format!("tiny-{family}"));
        let ppl = |device: &str| -> f64 {
            let out = output_ok(
                std::process::Command::new(env!("CARGO_BIN_EXE_wanda"))
                    .args(["eval", "--json", "--seqlen", "32", "--windows", "8"])
                    .args(["--device", device, "--model"])
                    .arg(&folder)
                    .arg("--text")
                    .arg(&text),
            );
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            json["perplexity"].as_f64().unwrap()
        };
        let f32 = ppl("cpu-flex");
        for device in ["cpu-flex-f16", "cpu-flex-bf16"] {
            let half = ppl(device);
            let rel = (half - f32).abs() / f32;
            eprintln!("{family} {device}: {half:.4} against f32 {f32:.4} ({rel:.2e})");
            assert!(
                rel < 0.05,
                "{family} {device}: {half} vs f32 {f32} ({rel:.2e})"
            );
        }
    }
}
