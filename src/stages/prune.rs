//! `prune`: the model upstream pruned layer by layer with the cell's method and pattern, or its
//! experts removed by an expert method: a copy when other cells or stages still need the model
//! it read, the dense model itself when none does.

use burn::prelude::Backend;

use super::{PipelineExecutor, Pruned};
use crate::pipeline::plan::StageNode;
use crate::pipeline::record::RunRecord;
use crate::pipeline::runner::StageFailure;
use crate::pipeline::spec::PruneOptions;
use crate::prune::experts::{prune_experts, ExpertOptions};
use crate::prune::layerwise::{measure, prune_model};
use crate::prune::Sparsity;

/// Samples per forward pass while calibrating, unless the gate lowered it.
pub(super) const BATCH: usize = 8;

pub(super) fn run<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    node: &StageNode,
    upstream: &[&StageNode],
    options: &PruneOptions,
    record: &mut RunRecord,
) -> Result<(), StageFailure> {
    let stage = &node.stage;
    // A copy of the model upstream (the dense one, or what an earlier prune stage left), unless
    // nothing after this stage reads the dense model.
    let (mut model, mut experts) = if exec.ctx.in_place {
        (exec.take_dense(stage)?, None)
    } else {
        let experts = exec
            .pruned_upstream(stage, upstream)?
            .and_then(|p| p.experts.clone());
        (exec.current(stage, upstream)?.clone(), experts)
    };
    let windows = match &exec.artifacts.calibration {
        Some(c) => &c.windows[..],
        None => &[][..],
    };
    let batching = exec.calibration_batching();
    let progress = |done, total| (exec.ctx.progress)(stage, done, total);
    let report = match options.experts {
        Some(amount) if options.method.removes_experts() => {
            let expert_options = ExpertOptions {
                amount,
                protect: options.protect.clone(),
            };
            // The model as it comes: with fewer experts where an earlier stage removed some.
            let base = &exec.base(stage)?.config;
            let config = match &experts {
                Some(earlier) => base.with_expert_count(earlier.experts_after),
                None => base.clone(),
            };
            let removed = prune_experts(
                &mut model,
                &config,
                options.method,
                &expert_options,
                windows,
                batching,
                progress,
            )?;
            experts = Some(removed);
            measure(&model)?
        }
        _ => {
            let sparsity =
                Sparsity::from_pattern(options.pattern, options.sparsity.unwrap_or(0.0))?;
            let method_options = options.method_options();
            prune_model(
                &mut model,
                options.method,
                &method_options,
                sparsity,
                windows,
                batching,
                progress,
            )?
        }
    };
    record.sparsity = (&report).into();
    record.experts.clone_from(&experts);
    let key = super::node_key(node);
    exec.artifacts.pruned.retain(|(k, _)| *k != key);
    let pruned = Pruned {
        model,
        report,
        experts,
    };
    exec.artifacts.pruned.push((key, pruned));
    Ok(())
}
