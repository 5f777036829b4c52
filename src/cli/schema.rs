//! `wanda schema`: the JSON Schema of pipeline files (what `schemas/pipeline.schema.json` holds).

use std::process::ExitCode;

/// Runs `wanda schema`.
pub fn run() -> anyhow::Result<ExitCode> {
    print!("{}", wanda::pipeline::schema_json());
    Ok(ExitCode::SUCCESS)
}
