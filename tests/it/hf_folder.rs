//! A tiny random Llama saved as a Hugging Face folder loads back with identical logits.

use wanda::model::checkpoint::{save_hf_folder, SaveDtype, SaveSpec};
use wanda::model::{self, ModelRef};

use crate::common::{logits, tiny_config, tiny_model, tiny_tokenizer_json, B};

const IDS: [i64; 7] = [1, 5, 9, 3, 31, 0, 17];

fn round_trip(arch: &str, tied: bool, dtype: SaveDtype) -> (Vec<f32>, Vec<f32>) {
    let config = tiny_config(arch, tied);
    let model = tiny_model(&config, 11);
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("tiny");
    save_hf_folder(
        &model,
        &config,
        &tiny_tokenizer_json(),
        &folder,
        &SaveSpec::new(dtype),
    )
    .unwrap();
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
fn qwen3_with_qk_norms_round_trips_exactly() {
    let (a, b) = round_trip("Qwen3ForCausalLM", true, SaveDtype::F32);
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
        &SaveSpec::new(SaveDtype::F32),
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
        &SaveSpec::new(SaveDtype::F32),
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

#[test]
fn large_models_are_saved_in_shards_with_an_index() {
    let config = tiny_config("LlamaForCausalLM", false);
    let model = tiny_model(&config, 5);
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("tiny");
    let single = dir.path().join("single");
    save_hf_folder(
        &model,
        &config,
        &tiny_tokenizer_json(),
        &single,
        &SaveSpec::new(SaveDtype::F32),
    )
    .unwrap();
    assert!(!single.join("model.safetensors.index.json").exists());
    let single_bytes = std::fs::metadata(single.join("model.safetensors"))
        .unwrap()
        .len();
    let max_shard_bytes = 4096;
    let mut spec = SaveSpec::new(SaveDtype::F32);
    spec.max_shard_bytes = max_shard_bytes;
    spec.extra_files = vec![("wanda_recipe.yaml".into(), "name: x\n".into())];
    save_hf_folder(&model, &config, &tiny_tokenizer_json(), &folder, &spec).unwrap();

    assert!(!folder.join("model.safetensors").exists());
    assert_eq!(
        std::fs::read_to_string(folder.join("wanda_recipe.yaml")).unwrap(),
        "name: x\n"
    );
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(folder.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    let weight_map = index["weight_map"].as_object().unwrap();
    let mut shards: Vec<&str> = weight_map.values().map(|v| v.as_str().unwrap()).collect();
    shards.sort();
    shards.dedup();
    assert!(shards.len() > 2, "expected several shards, got {shards:?}");
    let n = shards.len();
    let mut tensors = 0;
    let mut payload = 0u64;
    for (i, shard) in shards.iter().enumerate() {
        assert_eq!(*shard, format!("model-{:05}-of-{n:05}.safetensors", i + 1));
        let bytes = std::fs::read(folder.join(shard)).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let data: u64 = st
            .tensors()
            .iter()
            .map(|(_, t)| t.data().len() as u64)
            .sum();
        // A shard only exceeds the limit when it holds one tensor that alone does.
        assert!(
            data <= max_shard_bytes || st.len() == 1,
            "{shard}: {data} bytes"
        );
        for name in st.names() {
            assert_eq!(weight_map[name], *shard);
        }
        tensors += st.len();
        payload += data;
    }
    assert_eq!(tensors, weight_map.len());
    assert_eq!(index["metadata"]["total_size"], payload);
    assert!(payload < single_bytes);
    let loaded = model::load::<B>(&ModelRef::Folder(folder), &Default::default()).unwrap();
    assert_eq!(logits(&model, &IDS), logits(&loaded.model, &IDS));
}

/// A real (tiny, random) model served in the hub's layout loads with the logits it was saved
/// with.
#[test]
fn a_tiny_model_from_the_hub_loads_with_identical_logits() {
    let config = tiny_config("LlamaForCausalLM", false);
    let original = tiny_model(&config, 4);
    let saved = tempfile::tempdir().unwrap();
    let folder = saved.path().join("tiny");
    save_hf_folder(
        &original,
        &config,
        &tiny_tokenizer_json(),
        &folder,
        &SaveSpec::new(SaveDtype::F32),
    )
    .unwrap();
    let files = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    let (dir, _cache) = crate::common::fetch_from_fake_hub(files);
    let loaded = model::load::<B>(&ModelRef::Folder(dir), &Default::default()).unwrap();
    let ids = [1i64, 2, 0, 7];
    assert_eq!(logits(&original, &ids), logits(&loaded.model, &ids));
    assert_eq!(loaded.tokenizer.encode("the cat").unwrap(), vec![1, 2]);
}
