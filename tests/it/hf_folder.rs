//! A tiny random Llama saved as a Hugging Face folder loads back with identical logits.

use wanda::model::export::{save_hf_folder, SaveDtype};
use wanda::model::{self, ModelRef};

use crate::common::{logits, tiny_config, tiny_model, tiny_tokenizer_json, B};

const IDS: [i64; 7] = [1, 5, 9, 3, 31, 0, 17];

fn round_trip(arch: &str, tied: bool, dtype: SaveDtype) -> (Vec<f32>, Vec<f32>) {
    let config = tiny_config(arch, tied);
    let model = tiny_model(&config, 11);
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("tiny");
    save_hf_folder(&model, &config, &tiny_tokenizer_json(), &folder, dtype).unwrap();
    let loaded = model::load::<B>(&ModelRef::Folder(folder), &Default::default()).unwrap();
    assert_eq!(loaded.config, config);
    (logits(&model, &IDS), logits(&loaded.model, &IDS))
}

#[test]
fn llama_untied_round_trips_exactly() {
    let (a, b) = round_trip("LlamaForCausalLM", false, SaveDtype::F32);
    assert_eq!(a, b);
}

#[test]
fn qwen2_with_qkv_bias_and_tied_head_round_trips_exactly() {
    let (a, b) = round_trip("Qwen2ForCausalLM", true, SaveDtype::F32);
    assert_eq!(a, b);
}

#[test]
fn half_precision_round_trips_within_rounding() {
    for dtype in [SaveDtype::F16, SaveDtype::Bf16] {
        let (a, b) = round_trip("LlamaForCausalLM", true, dtype);
        assert_ne!(a, b, "{dtype:?} should round the weights");
        let max = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(max < 0.05, "{dtype:?}: max logit difference {max}");
    }
}

#[test]
fn sharded_checkpoint_loads_like_a_single_file() {
    let config = tiny_config("LlamaForCausalLM", false);
    let model = tiny_model(&config, 5);
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("tiny");
    save_hf_folder(
        &model,
        &config,
        &tiny_tokenizer_json(),
        &folder,
        SaveDtype::F32,
    )
    .unwrap();
    // Split model.safetensors into two shards plus an index, as large checkpoints come.
    let bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    let (first, second) = names.split_at(names.len() / 2);
    let mut weight_map = serde_json::Map::new();
    for (file, part) in [
        ("model-00001-of-00002.safetensors", first),
        ("model-00002-of-00002.safetensors", second),
    ] {
        let views: Vec<(String, safetensors::tensor::TensorView)> = part
            .iter()
            .map(|n| (n.clone(), st.tensor(n).unwrap()))
            .collect();
        safetensors::serialize_to_file(views, None, &folder.join(file)).unwrap();
        for n in part {
            weight_map.insert(n.clone(), file.into());
        }
    }
    std::fs::remove_file(folder.join("model.safetensors")).unwrap();
    std::fs::write(
        folder.join("model.safetensors.index.json"),
        serde_json::json!({"metadata": {}, "weight_map": weight_map}).to_string(),
    )
    .unwrap();
    let loaded = model::load::<B>(&ModelRef::Folder(folder), &Default::default()).unwrap();
    assert_eq!(logits(&model, &IDS), logits(&loaded.model, &IDS));
}

#[test]
fn missing_tensor_is_named() {
    let config = tiny_config("LlamaForCausalLM", true);
    let model = tiny_model(&config, 2);
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("tiny");
    save_hf_folder(
        &model,
        &config,
        &tiny_tokenizer_json(),
        &folder,
        SaveDtype::F32,
    )
    .unwrap();
    // Declare an untied head that the checkpoint does not have.
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("config.json")).unwrap())
            .unwrap();
    cfg["tie_word_embeddings"] = false.into();
    std::fs::write(folder.join("config.json"), cfg.to_string()).unwrap();
    let err = match model::load::<B>(&ModelRef::Folder(folder), &Default::default()) {
        Ok(_) => panic!("loading must fail"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("`lm_head.weight` is missing"), "{err}");
}
