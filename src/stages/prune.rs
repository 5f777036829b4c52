//! `prune`: the dense model pruned layer by layer with the cell's method and pattern: a copy
//! when other cells or stages still need the dense model, the model itself when none does.

use burn::prelude::Backend;

use super::{PipelineExecutor, Pruned};
use crate::pipeline::plan::StageNode;
use crate::pipeline::record::RunRecord;
use crate::pipeline::runner::StageFailure;
use crate::pipeline::spec::PruneOptions;
use crate::prune::layerwise::prune_model;
use crate::prune::Sparsity;

/// Samples per forward pass while calibrating, unless the gate lowered it.
pub(super) const BATCH: usize = 8;

pub(super) fn run<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    node: &StageNode,
    options: &PruneOptions,
    record: &mut RunRecord,
) -> Result<(), StageFailure> {
    let method_options = options.method_options();
    let sparsity = Sparsity::from_pattern(options.pattern, options.sparsity.unwrap_or(0.0))?;
    // A copy, unless nothing after this stage reads the dense model.
    let mut model = if exec.ctx.in_place {
        exec.take_dense(&node.stage)?
    } else {
        exec.base(&node.stage)?.model.clone()
    };
    let windows = match &exec.artifacts.calibration {
        Some(c) => &c.windows[..],
        None => &[][..],
    };
    let batching = exec.calibration_batching();
    let report = prune_model(
        &mut model,
        options.method,
        &method_options,
        sparsity,
        windows,
        batching,
        |done, total| (exec.ctx.progress)(&node.stage, done, total),
    )?;
    record.sparsity = (&report).into();
    let key = super::node_key(node);
    exec.artifacts.pruned.retain(|(k, _)| *k != key);
    exec.artifacts.pruned.push((key, Pruned { model, report }));
    Ok(())
}
