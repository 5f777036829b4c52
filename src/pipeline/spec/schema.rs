//! The JSON schema of the parts of a pipeline whose shape serde alone does not give: `stages:` in
//! either form, and the sweep.

use super::*;

impl StageKind {
    /// The option keys this kind accepts (from its options type's schema).
    pub fn option_names(self) -> Vec<String> {
        let schema = match self {
            StageKind::Load => schemars::schema_for!(LoadOptions),
            StageKind::Estimate => schemars::schema_for!(EstimateOptions),
            StageKind::Gate => schemars::schema_for!(GateOptions),
            StageKind::Calibrate => schemars::schema_for!(CalibrateOptions),
            StageKind::Prune => schemars::schema_for!(PruneOptions),
            StageKind::Eval => schemars::schema_for!(EvalOptions),
            StageKind::Save => schemars::schema_for!(SaveOptions),
        };
        schema_properties(&schema)
    }
}

/// The property names of an object schema, in schema order.
pub(crate) fn schema_properties(schema: &Schema) -> Vec<String> {
    schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// The `stages:` schema: the map form, or the list form with one entry shape per kind.
pub(crate) struct StagesSchema;

impl JsonSchema for StagesSchema {
    fn schema_name() -> Cow<'static, str> {
        "Stages".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut map_properties = serde_json::Map::new();
        let mut entries = Vec::new();
        for kind in StageKind::ALL {
            let options = match kind {
                StageKind::Load => generator.subschema_for::<LoadOptions>(),
                StageKind::Estimate => generator.subschema_for::<EstimateOptions>(),
                StageKind::Gate => generator.subschema_for::<GateOptions>(),
                StageKind::Calibrate => generator.subschema_for::<CalibrateOptions>(),
                StageKind::Prune => generator.subschema_for::<PruneOptions>(),
                StageKind::Eval => generator.subschema_for::<EvalOptions>(),
                StageKind::Save => generator.subschema_for::<SaveOptions>(),
            };
            map_properties.insert(
                kind.name().into(),
                json_schema!({ "anyOf": [options.clone(), { "type": "null" }] }).to_value(),
            );
            // The list entry: id/kind/needs beside the kind's own option properties.
            let inline = inline_options_schema(generator, kind);
            let mut properties = serde_json::Map::new();
            properties.insert(
                "id".into(),
                serde_json::json!({ "type": "string", "pattern": "^[A-Za-z0-9_-]+$", "description": "Unique stage id (defaults to the kind)." }),
            );
            properties.insert("kind".into(), serde_json::json!({ "const": kind.name() }));
            properties.insert(
                "needs".into(),
                serde_json::json!({ "type": "array", "items": { "type": "string" }, "description": "Ids of the stages this one takes artifacts from." }),
            );
            let mut required = vec![serde_json::Value::from("kind")];
            if let Some(props) = inline.get("properties").and_then(|p| p.as_object()) {
                properties.extend(props.clone());
            }
            if let Some(req) = inline.get("required").and_then(|r| r.as_array()) {
                required.extend(req.iter().cloned());
            }
            entries.push(serde_json::json!({
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false
            }));
        }
        json_schema!({
            "description": "A mapping of stage kinds (implicit order load → estimate → gate → calibrate → prune → eval → save), or a list of `{ id, kind, needs, …options }` for a custom DAG.",
            "oneOf": [
                { "type": "object", "properties": map_properties, "additionalProperties": false },
                { "type": "array", "items": { "oneOf": entries } }
            ]
        })
    }
}

/// A kind's options schema with `$ref`s left as they are, but its own properties inline.
fn inline_options_schema(generator: &mut SchemaGenerator, kind: StageKind) -> Schema {
    match kind {
        StageKind::Load => LoadOptions::json_schema(generator),
        StageKind::Estimate => EstimateOptions::json_schema(generator),
        StageKind::Gate => GateOptions::json_schema(generator),
        StageKind::Calibrate => CalibrateOptions::json_schema(generator),
        StageKind::Prune => PruneOptions::json_schema(generator),
        StageKind::Eval => EvalOptions::json_schema(generator),
        StageKind::Save => SaveOptions::json_schema(generator),
    }
}

/// The `sweep:` schema.
pub(crate) struct SweepSchema;

impl JsonSchema for SweepSchema {
    fn schema_name() -> Cow<'static, str> {
        "Sweep".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Keys (`<stage id>.<option>`, `calibration.*`, `evaluation.*`, `seed`) with lists of values; the cells are their cartesian product. Keys under `zip` advance together instead.",
            "type": "object",
            "properties": {
                "zip": {
                    "type": "object",
                    "additionalProperties": { "type": "array", "minItems": 1 }
                }
            },
            "additionalProperties": { "type": "array", "minItems": 1 }
        })
    }
}
