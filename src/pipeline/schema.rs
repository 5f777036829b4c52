//! The pipeline file's JSON Schema, generated from the spec types (schemars), for editors
//! (`# yaml-language-server: $schema=…`) and `wanda schema`. The committed copy in
//! `schemas/pipeline.schema.json` is checked against this by a test.

use schemars::JsonSchema;

use super::spec::{Settings, StagesSchema, SweepSchema};

/// The pipeline file as a whole: settings, `stages`, optional `sweep`. Only for the schema;
/// files are read by [`super::spec`].
#[derive(JsonSchema)]
#[schemars(
    title = "wanda pipeline",
    description = "A declarative LLM-pruning experiment: model, data, stages, sweep.",
    deny_unknown_fields
)]
#[allow(dead_code)]
struct PipelineFile {
    #[serde(flatten)]
    settings: Settings,
    /// The stages: a mapping by kind (implicit order), or a list with `id`, `kind`, `needs`.
    stages: StagesSchema,
    /// Values to sweep; the cells are their cartesian product (`zip` keys advance together).
    #[serde(default)]
    sweep: Option<SweepSchema>,
}

/// The JSON Schema of pipeline files, object keys sorted (so the text does not depend on
/// whether some crate switches on `serde_json/preserve_order`).
pub fn schema() -> serde_json::Value {
    sorted(schemars::schema_for!(PipelineFile).to_value())
}

fn sorted(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(String, serde_json::Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted).collect())
        }
        other => other,
    }
}

/// The JSON Schema, pretty-printed with a final newline: the exact contents of
/// `schemas/pipeline.schema.json`.
pub fn schema_json() -> String {
    let mut text = serde_json::to_string_pretty(&schema()).unwrap_or_default();
    text.push('\n');
    text
}
