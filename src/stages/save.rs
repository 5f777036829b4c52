//! `save`: with `model: true`, the current model as a Hugging Face folder in the cell's results
//! folder (`<cell>/model/`, or `model/` beside the cells when the stage is shared), written
//! atomically.

use burn::prelude::Backend;

use super::PipelineExecutor;
use crate::model::export::{save_hf_folder, SaveDtype};
use crate::pipeline::plan::{Cell, StageNode};
use crate::pipeline::runner::StageFailure;
use crate::pipeline::spec::{Dtype, SaveOptions};

pub(super) fn run<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    stage: &str,
    upstream: &[&StageNode],
    options: &SaveOptions,
    cell: Option<&Cell>,
) -> Result<(), StageFailure> {
    if !options.model {
        return Ok(());
    }
    let dtype = match options.dtype {
        Dtype::F32 => SaveDtype::F32,
        Dtype::F16 => SaveDtype::F16,
        Dtype::Bf16 => SaveDtype::Bf16,
    };
    let base = exec.base(stage)?;
    // A per-cell save goes into the cell's folder; a shared one (no sweep key reaches it) once
    // beside the cells.
    let folder = match cell {
        Some(cell) => exec.results_dir.join(&cell.id.0).join("model"),
        None => exec.results_dir.join("model"),
    };
    save_hf_folder(
        exec.current(stage, upstream)?,
        &base.config,
        &base.tokenizer.to_json()?,
        &folder,
        dtype,
    )?;
    Ok(())
}
