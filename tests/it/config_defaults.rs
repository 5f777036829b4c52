//! Every fixture family's `config.json` with one key left out, resolved here and held to what
//! transformers' config class makes of the same file: `tests/fixtures/config-defaults.jsonl`,
//! written by `scripts/config-defaults.py` (its header says what it records and how to run it).
//! A default of wanda's that is not the class's fails here with the fixture and the key.

use serde_json::{Map, Value};
use wanda::model::arch::{HfLlamaConfig, LlamaConfig};
use wanda::model::family::vision_language;

/// One fixture's config without `without`, and what transformers read from it (from the
/// language model's config where the fixture is a vision-language model).
#[derive(serde::Deserialize)]
struct Case {
    fixture: String,
    without: String,
    transformers: Map<String, Value>,
}

/// Configs that wanda refuses with a key left out where transformers takes a default that it
/// then cannot run: (fixture, the key left out, the key the error names, why).
const REFUSED: &[(&str, &str, &str, &str)] = &[
    (
        "tiny-deepseek_v2",
        "n_group",
        "n_group",
        "group-limited routing with no groups",
    ),
    (
        "tiny-deepseek_v2",
        "topk_group",
        "topk_group",
        "group-limited routing with no groups",
    ),
    (
        "tiny-deepseek_v2",
        "num_experts_per_tok",
        "num_experts_per_tok",
        "DeepseekV2Config's router takes None experts a token",
    ),
    (
        "tiny-deepseek_v3",
        "n_group",
        "n_group",
        "8 groups of one expert, whose two best scores the router sums",
    ),
    (
        "tiny-deepseek_v3-fp8",
        "n_group",
        "n_group",
        "8 groups of one expert, whose two best scores the router sums",
    ),
    (
        "tiny-deepseek_v3",
        "num_experts_per_tok",
        "topk_group",
        "the class's 8 experts a token from two groups of 2",
    ),
    (
        "tiny-deepseek_v3-fp8",
        "num_experts_per_tok",
        "topk_group",
        "the class's 8 experts a token from two groups of 2",
    ),
    (
        "tiny-falcon-new",
        "new_decoder_architecture",
        "num_ln_in_parallel_attn",
        "two layer norms in the old layout, which has one",
    ),
    (
        "tiny-glm4_moe",
        "n_group",
        "topk_group",
        "two groups a token of the class's one",
    ),
    (
        "tiny-glm4_moe",
        "num_experts_per_tok",
        "topk_group",
        "the class's 8 experts a token from two groups of 2",
    ),
    (
        "tiny-gptj",
        "rotary_dim",
        "rotary_dim",
        "the class's 64 rotated dimensions of a 16-wide head",
    ),
    (
        "tiny-granitemoehybrid",
        "layer_types",
        "layer_types",
        "the class then makes every layer a Mamba layer, which wanda does not run",
    ),
    (
        "tiny-granitemoehybrid-moe",
        "layer_types",
        "layer_types",
        "the class then makes every layer a Mamba layer, which wanda does not run",
    ),
    (
        "tiny-granitemoehybrid",
        "num_local_experts",
        "num_experts_per_tok",
        "the class's 8 experts, of which the config routes 0 a token",
    ),
    (
        "tiny-smollm3-sliding",
        "sliding_window",
        "sliding_window",
        "sliding layers without a window (the class's is None)",
    ),
];

/// The value of `key` in wanda's reading of the config, named as the script names it.
fn ours(c: &LlamaConfig, key: &str) -> Value {
    let e = &c.extras;
    match key {
        "rope_theta" => c.rope_theta.into(),
        // The scaling's type, factor and original context, as `config.json` writes them.
        "rope" => match c.rope_scaling_json() {
            Value::Null => serde_json::json!({ "rope_type": "default" }),
            scaling => scaling,
        },
        "norm_eps" => c.rms_norm_eps.into(),
        "tie_word_embeddings" => c.tie_word_embeddings.into(),
        "windows" => (0..c.num_hidden_layers)
            .filter_map(|i| c.layer_window(i).map(|w| (i.to_string(), w.into())))
            .collect::<Map<_, _>>()
            .into(),
        "head_dim" => c.head_dim.into(),
        "kv_heads" => c.num_key_value_heads.into(),
        "max_position_embeddings" => c.max_position_embeddings.into(),
        "activation" => e.activation.hf_name().into(),
        "attn_softcap" => e.attn_softcap.into(),
        "final_softcap" => e.final_softcap.into(),
        // Compared as the factor of the scores it gives.
        "query_pre_attn_scalar" => c
            .query_scale()
            .unwrap_or(1.0 / (c.head_dim as f64).sqrt())
            .into(),
        "rotary_dim" => c.rotary_dim().into(),
        "experts" => e.experts.map(|x| x.count).into(),
        "experts_per_token" => e.experts.map(|x| x.per_token).into(),
        other => panic!("the script records `{other}`, which this test does not read"),
    }
}

/// transformers' value of `key`, in the form [`ours`] gives it.
fn theirs(key: &str, value: &Value) -> Value {
    match (key, value.as_f64(), value.as_str()) {
        ("query_pre_attn_scalar", Some(scalar), _) => (1.0 / scalar.sqrt()).into(),
        // transformers' three names of GELU's tanh form, one function.
        ("activation", _, Some("gelu_new" | "gelu_fast")) => "gelu_pytorch_tanh".into(),
        _ => value.clone(),
    }
}

/// Whether two recorded values agree: numbers to a relative 1e-12 (the script's floats went
/// through Python's and serde's decimal forms), objects in the keys `b` has, the rest exactly.
fn agree(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => b
            .iter()
            .all(|(k, want)| a.get(k).is_some_and(|got| agree(got, want))),
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        _ => a == b,
    }
}

/// The case's config as the decoder reads it: the fixture's `config.json` without the key
/// (a vision-language model's language config without it, as its loader hands that on).
fn config_without(case: &Case) -> Result<String, String> {
    let path = format!(
        "{}/tests/fixtures/models/{}/config.json",
        env!("CARGO_MANIFEST_DIR"),
        case.fixture
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut config: Map<String, Value> = serde_json::from_str(&text).unwrap();
    let class = vision_language::of_config(&config);
    let holder = match config.get_mut("text_config") {
        Some(Value::Object(text)) if class.is_some() => text,
        _ => &mut config,
    };
    assert!(
        holder.remove(&case.without).is_some(),
        "{path}: no `{}`",
        case.without
    );
    match class {
        None => Ok(serde_json::to_string(&config).unwrap()),
        Some(class) => Ok(Value::Object(vision_language::text_config(&config, class)?).to_string()),
    }
}

#[test]
fn every_left_out_key_takes_the_config_classs_default() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/config-defaults.jsonl"
    ))
    .unwrap();
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let mut cases = 0;
    let mut wrong = Vec::new();
    for line in lines {
        let case: Case = serde_json::from_str(line).unwrap();
        cases += 1;
        let what = format!("{} without `{}`", case.fixture, case.without);
        let resolved = config_without(&case).and_then(|json| {
            HfLlamaConfig::from_json(&json).and_then(|hf| hf.resolve().map_err(|e| e.to_string()))
        });
        // Where transformers' own values cannot run (its attention or router would fail on
        // them), a refusal that names the key is what wanda owes.
        if let Some(key) = case.transformers.get("unrunnable").and_then(Value::as_str) {
            match resolved {
                Err(e) if e.contains(key) => {}
                Err(e) => wrong.push(format!("{what}: refused ({e}), not for `{key}`")),
                Ok(_) => wrong.push(format!("{what}: read, but transformers cannot run `{key}`")),
            }
            continue;
        }
        let refused = REFUSED
            .iter()
            .find(|(fixture, key, ..)| *fixture == case.fixture && *key == case.without);
        let c = match (resolved, refused) {
            (Ok(c), None) => c,
            (Err(e), None) => {
                wrong.push(format!("{what}: refused ({e}); transformers reads it"));
                continue;
            }
            (Err(e), Some((_, _, named, why))) => {
                if !e.contains(&format!("`{named}`")) {
                    wrong.push(format!("{what}: refused ({e}), not for `{named}` ({why})"));
                }
                continue;
            }
            (Ok(_), Some((.., why))) => {
                wrong.push(format!("{what}: now read, but listed as refused ({why})"));
                continue;
            }
        };
        for (key, want) in &case.transformers {
            let (got, want) = (ours(&c, key), theirs(key, want));
            if !agree(&got, &want) {
                wrong.push(format!(
                    "{what}: {key} is {got} here, {want} in transformers"
                ));
            }
        }
    }
    assert!(cases > 700, "only {cases} cases: was the file cut short?");
    assert!(
        wrong.is_empty(),
        "{} of {cases} cases differ from transformers {}:\n{}",
        wrong.len(),
        header["transformers_version"],
        wrong.join("\n")
    );
}
