//! Families from GGUF files as llama.cpp's converter writes them: `scripts/make-gguf-fixture.py`
//! writes tiny fixtures (`tests/fixtures/models/tiny-<family>`) into `tests/fixtures/gguf/` —
//! Mixtral as `llama` with an expert count and q/k rows interleaved, Qwen2-MoE as `qwen2moe`
//! with its shared expert, Qwen3-MoE as `qwen3moe`, OLMoE as `olmoe` (every layer's experts
//! stacked into one `ffn_*_exps` tensor per projection), Phi-3 as `phi3` (`attn_qkv` and
//! `ffn_up` stacked, its rotated dimensions, window and LongRoPE factors), Gemma 2 as `gemma2`
//! (`1 + w` norms, caps, no query scale of its own), Cohere as `command-r` (R+'s q/k norms by
//! presence, an f32 logit scale), Granite as `granite` (q/k rows interleaved, its factors as
//! scales, MLP biases by presence), SmolLM3 as `smollm3` (NoPE every fourth layer), GLM-4 as
//! `glm4` (`ffn_up` stacked, half of each head rotating, its four norms under llama.cpp's
//! names), GPT-NeoX as `gptneox` (q/k/v stacked part by part, LayerNorm biases, a quarter or
//! half rotating, parallel or sequential), Phi as `phi2`, StableLM as `stablelm`, Falcon as
//! `falcon` (q/k/v stacked all queries, then keys, then values), BLOOM as `bloom` (stacked part
//! by part), OLMo 1 as `olmo` (q/k rows interleaved, no norm tensors), Cohere 2 as `cohere2`,
//! StarCoder2 as `starcoder2` (no window in the file), Nemotron as `nemotron` (`1 + w` norms),
//! GPT-2 as `gpt2` (`Conv1D` weights as linears, learned positions in `position_embd`),
//! GPT-BigCode as `starcoder` (one kv head), Arcee as `arcee` (q/k rows and biases interleaved,
//! YaRN from `rope.scaling.*`), EXAONE 4 as `exaone4` (which layers slide as a bool array, the
//! global ones NoPE; or none sliding), ERNIE 4.5 as `ernie4_5` (interleaved RoPE, biases by
//! presence), GPT-OSS as `gpt-oss` (gate and up apart, experts' biases stacked, sinks, the
//! MXFP4 fixture's experts as ggml's MXFP4 blocks; YaRN rounded and the GLU constants fixed,
//! as llama.cpp reads such a file), Granite MoE as `granitemoe` (the stacked gate and up split
//! by rows, its factors as scales; with `expert_shared_feed_forward_length`, the shared class),
//! Granite 4.0 with attention layers only as `granite` (the shared MLP as the dense one, kv
//! heads per layer, the Mamba mixer's keys beside).
//! Each file must load as its family with the folder's shape and give transformers' logits; so must the files converted before llama.cpp stacked experts, and quantised stacks
//! must read per expert.

use std::path::{Path, PathBuf};

use wanda::model::arch::Architecture;
use wanda::model::checkpoint::gguf::{GgufFile, GgufValue, GgufWriter};
use wanda::model::{self, ModelRef};

use crate::common::{logits, max_difference, B};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// The fixtures with a GGUF file, and the family each must load as.
const FAMILIES: [(&str, Architecture); 36] = [
    ("mixtral", Architecture::Mixtral),
    ("qwen2_moe", Architecture::Qwen2Moe),
    ("qwen3_moe", Architecture::Qwen3Moe),
    ("olmoe", Architecture::Olmoe),
    ("phi3", Architecture::Phi3),
    ("phi3-longrope", Architecture::Phi3),
    ("phi4-mini", Architecture::Phi3),
    ("gemma2", Architecture::Gemma2),
    ("cohere", Architecture::Cohere),
    ("cohere-qknorm", Architecture::Cohere),
    ("granite", Architecture::Granite),
    ("smollm3", Architecture::SmolLm3),
    ("glm4", Architecture::Glm4),
    ("gpt_neox", Architecture::GptNeox),
    ("gpt_neox-sequential", Architecture::GptNeox),
    ("phi", Architecture::Phi),
    ("stablelm", Architecture::StableLm),
    ("stablelm-parallel", Architecture::StableLm),
    ("falcon", Architecture::Falcon),
    ("falcon-new", Architecture::Falcon),
    ("bloom", Architecture::Bloom),
    ("olmo", Architecture::Olmo),
    ("cohere2", Architecture::Cohere2),
    ("starcoder2", Architecture::Starcoder2),
    ("nemotron", Architecture::Nemotron),
    ("gpt2", Architecture::Gpt2),
    ("gpt_bigcode", Architecture::GptBigCode),
    ("arcee", Architecture::Arcee),
    ("exaone4", Architecture::Exaone4),
    ("exaone4-full", Architecture::Exaone4),
    ("ernie4_5", Architecture::Ernie4_5),
    ("gpt_oss", Architecture::GptOss),
    ("gpt_oss-mxfp4", Architecture::GptOss),
    ("granitemoe", Architecture::GraniteMoe),
    ("granitemoeshared", Architecture::GraniteMoeShared),
    ("granitemoehybrid", Architecture::Granite),
];

fn gguf_path(family: &str) -> PathBuf {
    Path::new(FIXTURES).join(format!("gguf/tiny-{family}.gguf"))
}

fn folder(family: &str) -> PathBuf {
    Path::new(FIXTURES).join(format!("models/tiny-{family}"))
}

/// The fixture's ids and transformers' logits of them: the folder's, or where the file cannot
/// hold the folder's config (Gemma 2's query scale, SmolLM3's NoPE layers), transformers' under
/// the config llama.cpp reads from the file (`tiny-<family>.gguf.logits.json`).
fn reference(family: &str) -> (Vec<i64>, Vec<f32>) {
    let own = Path::new(FIXTURES).join(format!("gguf/tiny-{family}.gguf.logits.json"));
    let path = match own.exists() {
        true => own,
        false => folder(family).join("logits.json"),
    };
    let text = std::fs::read_to_string(path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = json["ids"].as_array().unwrap();
    let rows = json["logits"].as_array().unwrap();
    (
        ids.iter().map(|v| v.as_i64().unwrap()).collect(),
        rows.iter()
            .flat_map(|row| row.as_array().unwrap())
            .map(|v| v.as_f64().unwrap() as f32)
            .collect(),
    )
}

/// The config transformers ran under for an own reference (`tiny-<family>.gguf.logits.json`).
fn own_reference_config(family: &str) -> Option<serde_json::Value> {
    let own = Path::new(FIXTURES).join(format!("gguf/tiny-{family}.gguf.logits.json"));
    let text = std::fs::read_to_string(own).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json.get("config").cloned()
}

/// The logits of the GGUF at `path` on the fixture's ids, after checking it loads as `arch`
/// with the shape of `family`'s folder: experts, biases, rotated dimensions, window, RoPE
/// scaling (LongRoPE's factors as f32), tied head and parameter count.
fn gguf_logits(path: &Path, family: &str, arch: Architecture) -> Vec<f32> {
    let loaded = model::load::<B>(&ModelRef::Gguf(path.to_path_buf()), &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    let from_folder = model::inspect(&ModelRef::Folder(folder(family))).unwrap().0;
    assert_eq!(loaded.config.architecture, arch, "{family}");
    let config = wanda::model::arch::HfLlamaConfig::from_file(&folder(family).join("config.json"))
        .unwrap()
        .resolve()
        .unwrap();
    // A file that cannot hold the folder's GLU constants (GPT-OSS's: llama.cpp fixes them)
    // has its own reference under llama.cpp's.
    let own_glu = own_reference_config(family).and_then(|c| {
        Some(wanda::model::arch::ClampedGlu {
            alpha: c.get("swiglu_alpha")?.as_f64()?,
            limit: c.get("swiglu_limit")?.as_f64()?,
        })
    });
    let experts = config.extras.experts.map(|e| wanda::model::arch::Experts {
        clamped_glu: own_glu.or(e.clamped_glu),
        ..e
    });
    assert_eq!(loaded.config.extras.experts, experts, "{family}");
    let (got, want) = (&loaded.config, &config);
    assert_eq!(got.qkv_bias, want.qkv_bias, "{family}");
    assert_eq!(got.qk_norm, want.qk_norm, "{family}");
    assert_eq!(got.extras.mlp_bias, want.extras.mlp_bias, "{family}");
    assert_eq!(
        (got.extras.parallel_residual, got.extras.layer_norm),
        (want.extras.parallel_residual, want.extras.layer_norm),
        "{family}"
    );
    // GGUF holds the logit scale and Granite's factors as f32s.
    let f32_factors = |c: &wanda::model::arch::LlamaConfig| {
        c.extras
            .multipliers
            .map(|m| [m.embedding, m.residual, m.attention, m.logits].map(|f| f as f32))
    };
    assert_eq!(f32_factors(got), f32_factors(want), "{family}");
    let f32_scale = |c: &wanda::model::arch::LlamaConfig| c.extras.logit_scale.map(|s| s as f32);
    assert_eq!(f32_scale(got), f32_scale(want), "{family}");
    assert_eq!(
        (got.head_dim, got.rotary_dim()),
        (want.head_dim, want.rotary_dim()),
        "{family}"
    );
    let windows = |c: &wanda::model::arch::LlamaConfig| {
        (0..c.num_hidden_layers)
            .map(|l| c.layer_window(l))
            .collect::<Vec<_>>()
    };
    // A file that cannot hold the folder's window (StarCoder2's: llama.cpp attends in full)
    // has its own reference without one.
    let unwindowed = own_reference_config(family)
        .is_some_and(|c| c.get("sliding_window").is_some_and(|w| w.is_null()));
    let expected = match unwindowed {
        true => vec![None; want.num_hidden_layers],
        false => windows(want),
    };
    assert_eq!(windows(got), expected, "{family}");
    assert_eq!(
        (got.extras.attn_softcap, got.extras.final_softcap),
        (want.extras.attn_softcap, want.extras.final_softcap),
        "{family}"
    );
    assert_eq!(
        got.tie_word_embeddings, want.tie_word_embeddings,
        "{family}"
    );
    assert_eq!(
        std::mem::discriminant(&got.rope_scaling),
        std::mem::discriminant(&want.rope_scaling),
        "{family}: {:?}",
        got.rope_scaling
    );
    assert_eq!(loaded.parameter_count, from_folder.parameters, "{family}");
    logits(&loaded.model, &reference(family).0)
}

#[test]
fn gguf_files_give_transformers_logits() {
    for (family, arch) in FAMILIES {
        let (_, expected) = reference(family);
        let got = gguf_logits(&gguf_path(family), family, arch);
        let diff = max_difference(&got, &expected);
        eprintln!("{family}: GGUF max |logit difference| {diff:.2e}");
        assert!(diff < 1e-4, "{family}: {diff}");
    }
}

/// Rewrites the GGUF at `from` into `to`, each tensor through `write` (which adds it to the
/// writer in its own way), the metadata through `edit`.
fn rewrite(
    from: &Path,
    to: &Path,
    edit: impl FnOnce(&mut std::collections::BTreeMap<String, GgufValue>),
    mut write: impl FnMut(&mut GgufWriter, &str, Vec<usize>, Vec<f32>),
) {
    let file = GgufFile::open(from).unwrap();
    let mut metadata = file.metadata().clone();
    edit(&mut metadata);
    let mut w = GgufWriter::new();
    for (k, v) in metadata {
        w.metadata(k, v);
    }
    for t in file.tensors() {
        let (shape, data) = file.tensor_f32(&t.name).unwrap();
        write(&mut w, &t.name, shape, data);
    }
    w.write(to).unwrap();
}

/// Files converted before llama.cpp stacked experts (early 2024) hold each expert's projection
/// as `blk.N.ffn_gate.E.weight`; they load with the same logits as the stacked file.
#[test]
fn per_expert_tensors_of_older_files_load_as_the_stacked_ones() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("legacy.gguf");
    rewrite(
        &gguf_path("mixtral"),
        &legacy,
        |_| {},
        |w, name, shape, data| match name.strip_suffix("_exps.weight") {
            Some(stem) => {
                let per = data.len() / shape[0];
                for (e, chunk) in data.chunks(per).enumerate() {
                    w.tensor_f32(format!("{stem}.{e}.weight"), &shape[1..], chunk)
                        .unwrap();
                }
            }
            None => {
                w.tensor_f32(name, &shape, &data).unwrap();
            }
        },
    );
    assert!(GgufFile::open(&legacy)
        .unwrap()
        .tensor_info("blk.1.ffn_down.3.weight")
        .is_some());
    assert_eq!(
        gguf_logits(&legacy, "mixtral", Architecture::Mixtral),
        gguf_logits(&gguf_path("mixtral"), "mixtral", Architecture::Mixtral)
    );
}

/// llama.cpp's first Phi-2 files stack q, k and v in one `attn_qkv` (weight and bias), part
/// by part: each is read from its rows of the stack, with the logits of the file that keeps
/// them apart.
#[test]
fn phi2_files_with_a_stacked_qkv_load_as_the_separate_ones() {
    let dir = tempfile::tempdir().unwrap();
    let stacked = dir.path().join("stacked.gguf");
    let file = GgufFile::open(&gguf_path("phi")).unwrap();
    rewrite(
        &gguf_path("phi"),
        &stacked,
        |_| {},
        |w, name, shape, data| {
            let Some((layer, kind)) = name.split_once(".attn_q.") else {
                if !name.contains(".attn_k.") && !name.contains(".attn_v.") {
                    w.tensor_f32(name, &shape, &data).unwrap();
                }
                return;
            };
            let mut rows = shape[0];
            let mut all = data;
            for part in ["k", "v"] {
                let (s, d) = file
                    .tensor_f32(&format!("{layer}.attn_{part}.{kind}"))
                    .unwrap();
                rows += s[0];
                all.extend(d);
            }
            let mut shape = shape;
            shape[0] = rows;
            w.tensor_f32(format!("{layer}.attn_qkv.{kind}"), &shape, &all)
                .unwrap();
        },
    );
    let rewritten = GgufFile::open(&stacked).unwrap();
    assert!(rewritten.tensor_info("blk.1.attn_qkv.bias").is_some());
    assert!(rewritten.tensor_info("blk.1.attn_k.weight").is_none());
    assert_eq!(
        gguf_logits(&stacked, "phi", Architecture::Phi),
        gguf_logits(&gguf_path("phi"), "phi", Architecture::Phi)
    );
}

/// Cohere 2's sliding layers come from `attention.sliding_window_pattern` where the file has
/// it, one bool per layer (true: sliding) as llama.cpp's converters write it, or a count (every
/// n-th layer full); without it every fourth layer attends in full, as llama.cpp reads it.
#[test]
fn sliding_layers_follow_the_files_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let windows = |pattern: Option<GgufValue>| {
        let path = dir.path().join("pattern.gguf");
        rewrite(
            &gguf_path("cohere2"),
            &path,
            |m| {
                if let Some(p) = pattern {
                    m.insert("cohere2.attention.sliding_window_pattern".into(), p);
                }
            },
            |w, name, shape, data| {
                w.tensor_f32(name, &shape, &data).unwrap();
            },
        );
        let loaded = model::load::<B>(&ModelRef::Gguf(path), &Default::default()).unwrap();
        (0..4)
            .map(|l| loaded.config.layer_window(l))
            .collect::<Vec<_>>()
    };
    let (s, f) = (Some(6), None);
    assert_eq!(windows(None), [s, s, s, f]);
    assert_eq!(
        windows(Some(vec![false, true, true, false].into())),
        [f, s, s, f]
    );
    assert_eq!(windows(Some(2u32.into())), [s, f, s, f]);
}

/// Q8_0 stacks (the experts' gate and up projections, 64 columns) are read expert by expert:
/// the logits move by the rounding alone.
#[test]
fn quantised_expert_stacks_read_per_expert() {
    let dir = tempfile::tempdir().unwrap();
    let q8 = dir.path().join("q8.gguf");
    rewrite(
        &gguf_path("qwen3_moe"),
        &q8,
        |_| {},
        |w, name, shape, data| {
            if name.contains("_exps.") && shape[shape.len() - 1] % 32 == 0 {
                w.tensor_q8_0(name, &shape, &data).unwrap();
            } else {
                w.tensor_f32(name, &shape, &data).unwrap();
            }
        },
    );
    let (_, expected) = reference("qwen3_moe");
    let got = gguf_logits(&q8, "qwen3_moe", Architecture::Qwen3Moe);
    let diff = max_difference(&got, &expected);
    let range = expected.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    assert!(diff > 0.0, "Q8_0 must round the experts");
    assert!(diff < 0.05 * range, "{diff} of {range}");
}

/// The metadata the experts need is checked by key: a `qwen2moe` file without its expert count,
/// a dense architecture with one, routing other than softmax.
#[test]
fn expert_metadata_errors_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let load_error =
        |family: &str, edit: &dyn Fn(&mut std::collections::BTreeMap<String, GgufValue>)| {
            let path = dir.path().join("edited.gguf");
            rewrite(&gguf_path(family), &path, edit, |w, name, shape, data| {
                w.tensor_f32(name, &shape, &data).unwrap();
            });
            match model::load::<B>(&ModelRef::Gguf(path), &Default::default()) {
                Ok(_) => panic!("must fail"),
                Err(e) => e.to_string(),
            }
        };
    let err = load_error("qwen2_moe", &|m| {
        m.remove("qwen2moe.expert_count");
    });
    assert!(err.contains("`qwen2moe.expert_count` is missing"), "{err}");
    let err = load_error("qwen3_moe", &|m| {
        m.insert("qwen3moe.expert_gating_func".into(), 2u32.into());
    });
    assert!(err.contains("`qwen3moe.expert_gating_func`"), "{err}");
    let err = load_error("qwen3_moe", &|m| {
        let renamed: Vec<(String, GgufValue)> = std::mem::take(m)
            .into_iter()
            .map(|(k, v)| (k.replacen("qwen3moe.", "qwen3.", 1), v))
            .collect();
        m.extend(renamed);
        m.insert("general.architecture".into(), "qwen3".into());
    });
    assert!(
        err.contains("`qwen3.expert_count`") && err.contains("no experts"),
        "{err}"
    );
}

/// A GGUF mixture of experts streams layer by layer (each expert read from its stack when its
/// layer is reached), and so do Phi-3 (its parts read from `attn_qkv` and `ffn_up`) and
/// GPT-NeoX (its regrouped `attn_qkv`), GPT-2 (its learned positions) and GPT-OSS (its
/// experts' MXFP4 blocks, biases and sinks); all prune with SparseGPT to the bit like the model
/// loaded whole.
#[test]
fn gguf_files_stream_and_prune_like_the_model_in_memory() {
    use wanda::model::checkpoint::Layers;
    use wanda::model::kernels::to_host_f32;
    use wanda::prune::layerwise::prune_model;
    use wanda::prune::{Method, MethodOptions, Sparsity};

    for (family, linears) in [
        ("mixtral", 17),
        ("qwen2_moe", 21),
        ("phi3", 7),
        ("gpt_neox", 6),
        ("falcon-new", 6),
        ("bloom", 6),
        ("gpt2", 6),
        ("gpt_oss-mxfp4", 17),
    ] {
        let origin = ModelRef::Gguf(gguf_path(family));
        let device = Default::default();
        let store = tempfile::tempdir().unwrap();
        let mut resident = model::load::<B>(&origin, &device).unwrap().model;
        let mut streamed = model::load_streamed::<B>(&origin, &device, store.path())
            .unwrap()
            .model;
        let calibration: Vec<Vec<u32>> = (0..4)
            .map(|w| (0..12).map(|t| ((w * 11 + t * 5) % 96) as u32).collect())
            .collect();
        let (options, sparsity) = (
            MethodOptions::default(),
            Sparsity::unstructured(0.5).unwrap(),
        );
        let method = Method::Sparsegpt;
        let x = prune_model(
            &mut resident,
            method,
            &options,
            sparsity,
            &calibration,
            2,
            |_, _| {},
        );
        let y = prune_model(
            &mut streamed,
            method,
            &options,
            sparsity,
            &calibration,
            2,
            |_, _| {},
        );
        assert_eq!(x.unwrap(), y.unwrap(), "{family}");
        for i in 0..resident.layer_count() {
            let (a, b) = (
                resident.layer(i).unwrap().into_owned(),
                streamed.layer(i).unwrap().into_owned(),
            );
            let (a, b) = (a.linears(), b.linears());
            assert_eq!(a.len(), linears, "{family}");
            for ((name, _, l), (_, _, m)) in a.into_iter().zip(b) {
                assert_eq!(
                    to_host_f32(l.weight.val()),
                    to_host_f32(m.weight.val()),
                    "{family} layer {i} {name}"
                );
            }
        }
    }
}
