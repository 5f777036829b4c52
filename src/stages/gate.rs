//! `gate`: fit the run into the memory budget — the detected free memory of the device, or the
//! pipeline's `budget`, or `wanda run --budget` — by the policy of [`crate::memory::gate`];
//! halts the run (exit 1) with the breakdown when nothing fits.

use burn::prelude::Backend;

use super::{PipelineExecutor, StageError};
use crate::memory::device::{DeviceChoice, DeviceKind};
use crate::memory::estimate::{estimate_prune, render, PruneRun};
use crate::memory::gate::{decide, GatePolicy};
use crate::model::arch::{gib, Place};
use crate::model::checkpoint::Decoder;
use crate::pipeline::plan::Plan;
use crate::pipeline::runner::{StageFailure, StageOutcome};
use crate::pipeline::spec::{Budget, GateOptions, StageOptions};

pub(super) fn run<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    stage: &str,
    options: &GateOptions,
) -> Result<StageOutcome, StageFailure> {
    let estimated = exec
        .artifacts
        .estimated
        .as_ref()
        .ok_or_else(|| StageError::Missing {
            stage: stage.to_string(),
            what: "an estimate",
        })?;
    let (budget, label) = budget_of(
        exec.ctx.budget.unwrap_or(options.budget),
        exec.ctx.choice,
        stage,
    )?;
    // The host's free RAM bounds what a GPU run may move there.
    let host_budget = exec
        .ctx
        .choice
        .is_cuda()
        .then(|| crate::memory::device::host().free);
    let decision = decide(
        &estimated.shape,
        &gpu_sized(&estimated.run, budget),
        &policy(options, budget, host_budget),
    )?;
    let table = decision.render(&label);
    (exec.ctx.report)(&table);
    if !decision.fits {
        let stage_breakdown = decision
            .estimate
            .stages
            .iter()
            .map(|s| format!("{}:\n{}", s.stage, render(&s.breakdown)))
            .collect::<String>();
        return Ok(StageOutcome::Halt {
            reason: format!(
                "the run does not fit its memory budget; raise `budget` to at least {} or lower \
                 the gate's `floor`\n{table}{stage_breakdown}",
                gib(decision.smallest_budget)
            ),
        });
    }
    settle_layers(exec, decision.effective.streaming)?;
    exec.artifacts.gate = Some(decision);
    Ok(StageOutcome::Continue)
}

/// Keeps the model streamed when the gate counted on streaming, else reads all its layers into
/// memory. A streamed model's layers are checked as each is first read, or with
/// `load: { verify: full }` all now (one pass over the checkpoint), so a broken one stops the
/// run before calibration.
fn settle_layers<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    streaming: bool,
) -> Result<(), StageFailure> {
    let Some(base) = exec.artifacts.base.take() else {
        return Ok(());
    };
    let verify = exec.artifacts.verify_layers;
    exec.artifacts.base = Some(base.try_map_model(|model| match model {
        Decoder::Streamed(model) if streaming => {
            if verify {
                model.check()?;
            }
            Ok(Decoder::Streamed(model))
        }
        model => model.into_resident().map(Decoder::Resident),
    })?);
    Ok(())
}

/// The gate's decision for `plan` before anything runs (for `wanda run --dry-run`): the
/// model's shape from its config and checkpoint headers, the largest cell, the budget as the
/// gate stage would take it. None when the plan has no gate.
pub fn dry_run(
    plan: &Plan,
    device: DeviceChoice,
    budget: Option<Budget>,
) -> Result<Option<String>, StageFailure> {
    let Some(options) = plan.spec.stages.iter().find_map(|s| match &s.options {
        StageOptions::Gate(g) => Some(g),
        _ => None,
    }) else {
        return Ok(None);
    };
    let settings = &plan.spec.settings;
    let origin = super::load::model_ref(settings, &plan.base_dir)?;
    let (shape, _) = crate::model::inspect(&origin)?;
    let mut largest: Option<(u64, PruneRun)> = None;
    for cell in &plan.cells {
        let run =
            super::requested_run(&cell.spec, &plan.base_dir, device, !plan.prunes_in_place())?;
        let peak = estimate_prune(&shape, &run).peak(Place::Device).1;
        if largest.as_ref().is_none_or(|(p, _)| peak > *p) {
            largest = Some((peak, run));
        }
    }
    let Some((_, run)) = largest else {
        return Ok(None);
    };
    let (bytes, label) = budget_of(budget.unwrap_or(options.budget), device, "gate")?;
    let decision = decide(
        &shape,
        &gpu_sized(&run, bytes),
        &policy(options, bytes, None),
    )?;
    let e = &decision.effective;
    Ok(Some(format!(
        "{}effective: calibration.nsamples {}, calibration.seqlen {}, evaluation.seqlen {}, streaming {}\n",
        decision.render(&label),
        e.nsamples,
        e.seqlen,
        e.eval_seqlen.map_or("—".into(), |s| s.to_string()),
        if e.streaming { "on" } else { "off" }
    )))
}

/// `run` with a GPU size for the pool's pages: where no GPU was seen (a dry run elsewhere),
/// the budget stands for the GPU.
fn gpu_sized(run: &PruneRun, budget: u64) -> PruneRun {
    let mut run = run.clone();
    if run.device == DeviceKind::Cuda && run.gpu_memory.is_none() {
        run.gpu_memory = Some(budget);
    }
    run
}

/// The gate's policy for `options` and `budget` bytes.
fn policy(options: &GateOptions, budget: u64, host_budget: Option<u64>) -> GatePolicy {
    GatePolicy {
        budget,
        headroom: options.headroom,
        reduce: options.reduce.clone(),
        floor: options.floor.clone(),
        host_budget,
    }
}

/// Bytes and a label of `budget` on `device`.
fn budget_of(
    budget: Budget,
    device: DeviceChoice,
    stage: &str,
) -> Result<(u64, String), StageError> {
    match budget {
        Budget::Bytes(bytes) => Ok((bytes, gib(bytes))),
        Budget::Auto => {
            let free = device.free_memory().ok_or_else(|| StageError::NoBudget {
                stage: stage.to_string(),
                device: device.label(),
            })?;
            Ok((free, format!("{} free on {}", gib(free), device.label())))
        }
    }
}
