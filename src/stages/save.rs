//! `save`: with `model: true`, the current model as a Hugging Face folder in the cell's results
//! folder (`<cell>/model/`, or `model/` beside the cells when several cells share the stage), written
//! atomically, with the tokenizer's config files, the recipe that made it
//! (`wanda_recipe.yaml`), its sparsity report (`wanda_sparsity.json`) and, where experts were
//! removed, which (`wanda_experts.json`), its config saying the smaller expert count.

use std::borrow::Cow;

use burn::prelude::Backend;

use super::PipelineExecutor;
pub use crate::model::checkpoint::RECIPE_FILE;
use crate::model::checkpoint::{rewrite_expert_count, save_hf_folder, SaveSpec};
use crate::pipeline::plan::{Cell, StageNode};
use crate::pipeline::runner::StageFailure;
use crate::pipeline::spec::SaveOptions;
use crate::prune::experts::EXPERTS_FILE;

/// The sparsity report's file name in a saved folder.
pub const SPARSITY_FILE: &str = "wanda_sparsity.json";

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
    let base = exec.base(stage)?;
    // A save for one cell goes into its folder; one shared by several (no sweep key reaches it)
    // once beside the cells, with the whole pipeline as its recipe.
    let (folder, recipe) = match cell {
        Some(cell) => (
            exec.ctx.results_dir.join(&cell.id.0).join("model"),
            format!(
                "# The resolved cell `{}` ({}) that made this model.\n{}",
                cell.label,
                cell.id,
                cell.spec.to_portable_yaml(&exec.ctx.base_dir)
            ),
        ),
        None => (
            exec.ctx.results_dir.join("model"),
            format!(
                "# The pipeline that made this model.\n{}",
                exec.ctx.pipeline.to_portable_yaml(&exec.ctx.base_dir)
            ),
        ),
    };
    let mut spec = SaveSpec::new(options.dtype);
    if let Some(size) = options.max_shard_size {
        spec.max_shard_bytes = size.0;
    }
    spec.extra_files = base.tokenizer_files.clone();
    spec.base_config = base.hf_config.clone();
    spec.extra_files.push((RECIPE_FILE.to_string(), recipe));
    let mut config = Cow::Borrowed(&base.config);
    if let Some(pruned) = exec.pruned_upstream(stage, upstream)? {
        let report = serde_json::to_string_pretty(&pruned.report)
            .expect("a sparsity report always serialises");
        spec.extra_files.push((SPARSITY_FILE.to_string(), report));
        // A model whose experts were pruned is saved as a model of fewer experts.
        if let Some(experts) = &pruned.experts {
            let fewer = base.config.with_expert_count(experts.experts_after);
            if let Some(own) = &mut spec.base_config {
                rewrite_expert_count(own, experts.experts_after);
            }
            config = Cow::Owned(fewer);
            let report =
                serde_json::to_string_pretty(experts).expect("an experts report always serialises");
            spec.extra_files.push((EXPERTS_FILE.to_string(), report));
        }
    }
    save_hf_folder(
        exec.current(stage, upstream)?,
        &config,
        &base.tokenizer.to_json()?,
        &folder,
        &spec,
    )?;
    Ok(())
}
