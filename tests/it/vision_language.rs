//! Vision-language checkpoints read as their language model
//! (`scripts/make-vision-language-fixture.py`: Gemma 3 with a `text_config` as sparse as the
//! hub's, Mistral 3 with a head of its own, LLaVA over a Llama, Qwen2.5-VL's flat hub config,
//! Qwen3-VL's multimodal RoPE, Qwen3-VL-MoE's and Llama 4's stacked experts), each with a
//! vision tower and a
//! projector: the language model gives transformers' logits (in `families.rs`), its parameters
//! alone are counted, and a saved copy is the text-only checkpoint of its family.

use std::path::Path;

use wanda::model::checkpoint::{save_hf_folder, SaveDtype, SaveSpec};
use wanda::model::checkpoint::{SafetensorsSource, WeightSource};
use wanda::model::{self, ModelRef};

use crate::common::B;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/models");

/// The fixtures, with the class each one's saved copy must name.
const FIXTURES_AND_TEXT_CLASSES: [(&str, &str); 7] = [
    ("tiny-gemma3-vl", "Gemma3ForCausalLM"),
    ("tiny-mistral3-vl", "MistralForCausalLM"),
    ("tiny-llava", "LlamaForCausalLM"),
    ("tiny-qwen2_5-vl", "Qwen2ForCausalLM"),
    ("tiny-qwen3-vl", "Qwen3ForCausalLM"),
    ("tiny-qwen3-vl-moe", "Qwen3MoeForCausalLM"),
    ("tiny-llama4-vl", "Llama4ForCausalLM"),
];

/// transformers' count of the language model's parameters, from the fixture's `logits.json`.
fn text_parameters(folder: &Path) -> u64 {
    let text = std::fs::read_to_string(folder.join("logits.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["text_parameters"].as_u64().unwrap()
}

#[test]
fn only_the_language_model_is_counted_and_a_saved_copy_is_text_only() {
    let device = Default::default();
    for (fixture, text_class) in FIXTURES_AND_TEXT_CLASSES {
        let folder = Path::new(FIXTURES).join(fixture);
        let all = SafetensorsSource::open(&folder).unwrap().parameter_count();
        let loaded = model::load::<B>(&ModelRef::Folder(folder.clone()), &device).unwrap();
        assert_eq!(
            loaded.parameter_count,
            text_parameters(&folder),
            "{fixture}"
        );
        assert!(
            all > loaded.parameter_count,
            "{fixture}: a vision tower to leave out"
        );
        let (shape, _) = model::inspect(&ModelRef::Folder(folder.clone())).unwrap();
        assert_eq!(
            shape.parameters, loaded.parameter_count,
            "{fixture}: the estimate's"
        );
        // Gemma 3's fixture has no head of its own: tied; the others' heads are their own.
        let tied = fixture == "tiny-gemma3-vl";
        assert_eq!(loaded.config.tie_word_embeddings, tied, "{fixture}");

        let store = tempfile::tempdir().unwrap();
        let copy = store.path().join("copy");
        let tokenizer = std::fs::read_to_string(folder.join("tokenizer.json")).unwrap();
        let mut spec = SaveSpec::new(SaveDtype::F32);
        spec.base_config = loaded.hf_config.clone();
        save_hf_folder(&loaded.model, &loaded.config, &tokenizer, &copy, &spec).unwrap();
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(copy.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(saved["architectures"], serde_json::json!([text_class]));
        for key in ["text_config", "vision_config", "image_token_index"] {
            assert!(saved.get(key).is_none(), "{fixture}: {key} in {saved}");
        }
        let names = SafetensorsSource::open(&copy).unwrap();
        assert_eq!(names.parameter_count(), loaded.parameter_count, "{fixture}");
        let reloaded = model::load::<B>(&ModelRef::Folder(copy.clone()), &device).unwrap();
        assert_eq!(reloaded.config, loaded.config, "{fixture}");
        let ids = [1i64, 5, 9, 3, 31, 0, 17, 64, 2];
        assert_eq!(
            crate::common::logits(&loaded.model, &ids),
            crate::common::logits(&reloaded.model, &ids),
            "{fixture}"
        );
    }
}

/// A `text_config` naming a model type this tool does not run is refused with the key named,
/// as is a vision-language config without one.
#[test]
fn a_text_config_that_cannot_run_is_named_in_the_error() {
    let folder = Path::new(FIXTURES).join("tiny-llava");
    for (edit, expected) in [
        (
            r#"{"model_type": "vicuna"}"#,
            "`text_config.model_type` is `vicuna`",
        ),
        ("null", "`text_config` is missing"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        for file in ["model.safetensors", "tokenizer.json"] {
            std::fs::copy(folder.join(file), dir.path().join(file)).unwrap();
        }
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(folder.join("config.json")).unwrap())
                .unwrap();
        config["text_config"] = serde_json::from_str(edit).unwrap();
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        let err = model::load::<B>(
            &ModelRef::Folder(dir.path().to_path_buf()),
            &Default::default(),
        )
        .err()
        .expect("refused");
        let message = format!("{err:#}");
        assert!(message.contains(expected), "{message}");
        assert!(message.contains("config.json"), "names the file: {message}");
    }
}
