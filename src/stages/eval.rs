//! `eval`: perplexity of the current model (pruned, or dense when no prune ran) by the paper's
//! protocol, zero-shot accuracy on lm-evaluation-harness's tasks, and decoding speed.

use burn::prelude::Backend;

use super::{PipelineExecutor, StageError};
use crate::data::hub::HubRequest;
use crate::data::read_tokenized;
use crate::data::sets::{self, DataSource};
use crate::eval::perplexity::perplexity_in_groups;
use crate::eval::speed;
use crate::eval::zeroshot::{self, TaskSource};
use crate::model::checkpoint::Decoder;
use crate::pipeline::plan::StageNode;
use crate::pipeline::record::RunRecord;
use crate::pipeline::runner::StageFailure;
use crate::pipeline::spec::{EvalOptions, Harness, Settings, SpeedOptions, ZeroshotOptions};
use crate::serve::harness;
use crate::serve::Served;

pub(super) fn run<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    stage: &str,
    upstream: &[&StageNode],
    options: &EvalOptions,
    settings: &Settings,
    record: &mut RunRecord,
) -> Result<(), StageFailure> {
    if options.perplexity {
        perplexity_of(exec, stage, upstream, settings, record)?;
    }
    if let Some(zeroshot) = &options.zeroshot {
        zeroshot_of(exec, stage, upstream, zeroshot, record)?;
    }
    if let Some(speed) = &options.speed {
        speed_of(exec, stage, upstream, speed, record)?;
    }
    Ok(())
}

/// Times decoding into `record`'s metrics: tokens/s of prefill and decode with the pruned
/// linears compressed (`decode_tokens_per_s`, `prefill_tokens_per_s`) and dense in the same rounds
/// (`dense_…`), their ratios (`decode_speedup`, `prefill_speedup`), the bytes of weights a
/// token reads either way and their ratio (`weight_bytes_ratio`), and the linears compressed.
fn speed_of<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    stage: &str,
    upstream: &[&StageNode],
    options: &SpeedOptions,
    record: &mut RunRecord,
) -> Result<(), StageFailure> {
    let (prompt, decode) = (options.prompt.get(), options.decode.get());
    let context = exec.base(stage)?.config.context_limit();
    if prompt + decode > context {
        return Err(format!(
            "stage `{stage}`: `speed.prompt` ({prompt}) plus `speed.decode` ({decode}) exceeds \
             the model's context of {context}; shorten them"
        )
        .into());
    }
    let Decoder::Resident(model) = exec.current(stage, upstream)? else {
        return Err(format!(
            "stage `{stage}`: `speed` times the model in memory, and this run streams its \
             layers; drop `speed`, or give a budget that keeps the model in memory"
        )
        .into());
    };
    let budget = crate::memory::log::spare_bytes();
    let report = speed::measure(
        model,
        [prompt, decode],
        options.repeats.get(),
        (options.sparse, budget),
        &exec.ctx.device,
    );
    let (dense_prefill, dense_decode) = report.dense;
    let metrics: [(&str, serde_json::Value); 10] = [
        ("prefill_tokens_per_s", report.prefill.into()),
        ("decode_tokens_per_s", report.decode.into()),
        ("dense_prefill_tokens_per_s", dense_prefill.into()),
        ("dense_decode_tokens_per_s", dense_decode.into()),
        ("prefill_speedup", (report.prefill / dense_prefill).into()),
        ("decode_speedup", (report.decode / dense_decode).into()),
        ("weight_bytes", report.weight_bytes.into()),
        ("dense_weight_bytes", report.dense_weight_bytes.into()),
        (
            "weight_bytes_ratio",
            (report.weight_bytes as f64 / report.dense_weight_bytes as f64).into(),
        ),
        ("compressed_linears", report.sparse.compressed.into()),
    ];
    for (key, value) in metrics {
        record.metrics.other.insert(key.into(), value);
    }
    Ok(())
}

/// Scores the zero-shot tasks into `record`.
fn zeroshot_of<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    stage: &str,
    upstream: &[&StageNode],
    options: &ZeroshotOptions,
    record: &mut RunRecord,
) -> Result<(), StageFailure> {
    if options.harness == Harness::LmEval {
        return harness_of(exec, stage, upstream, options, record);
    }
    let hub = HubRequest::default();
    let dir = options.data.as_ref().map(|d| exec.path(d));
    let source = match &dir {
        Some(dir) => TaskSource::Local(dir),
        None => TaskSource::Hub(&hub),
    };
    let base = exec.base(stage)?;
    let run = zeroshot::evaluate(
        exec.current(stage, upstream)?,
        &base.tokenizer,
        &base.config,
        &options.tasks,
        source,
        options.limit,
        |_, done, total| (exec.ctx.progress)(stage, done, total),
    )?;
    record.metrics.zeroshot = Some(run.metrics);
    // Cells after a shared eval take the data's provenance from the executor, as they do the
    // perplexity text's.
    exec.hashes.data.zeroshot.extend(run.data.clone());
    record.data.zeroshot = run.data;
    Ok(())
}

/// Scores the zero-shot tasks with the installed lm-eval through `wanda serve` into `record`;
/// its log and results stay in the cell's folder (`lm-eval/`).
fn harness_of<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    stage: &str,
    upstream: &[&StageNode],
    options: &ZeroshotOptions,
    record: &mut RunRecord,
) -> Result<(), StageFailure> {
    let dir = options.data.as_ref().map(|d| exec.path(d));
    let base = exec.base(stage)?;
    let Decoder::Resident(model) = exec.current(stage, upstream)? else {
        return Err(format!(
            "stage `{stage}`: `zeroshot.harness: lm-eval` serves the model from memory, and this \
             run streams its layers; use `harness: native`, which scores streamed models, or a \
             budget that keeps the model in memory"
        )
        .into());
    };
    let served = Served {
        model,
        tokenizer: &base.tokenizer,
        config: &base.config,
        name: "wanda".into(),
    };
    let work = exec.ctx.results_dir.join(&record.cell.id.0).join("lm-eval");
    let metrics = harness::lm_eval(
        &served,
        &options.tasks,
        options.limit,
        dir.as_deref(),
        &work,
    )?;
    record.metrics.zeroshot = Some(metrics);
    Ok(())
}

/// Measures perplexity into `record`.
fn perplexity_of<B: Backend>(
    exec: &mut PipelineExecutor<B>,
    stage: &str,
    upstream: &[&StageNode],
    settings: &Settings,
    record: &mut RunRecord,
) -> Result<(), StageFailure> {
    let spec = settings
        .evaluation
        .as_ref()
        .ok_or_else(|| StageError::Missing {
            stage: stage.to_string(),
            what: "an `evaluation:` section",
        })?;
    let source = spec.source()?;
    // One key per text: the file, or the data set and the window length (C4 keeps 256 windows).
    let key = match &source {
        DataSource::Text(text) => exec.path(text).display().to_string(),
        other => format!("{other:?} {}", spec.seqlen),
    };
    if exec
        .artifacts
        .eval_ids
        .as_ref()
        .is_none_or(|(k, _)| k != &key)
    {
        let ids = match source {
            DataSource::Text(text) => {
                let path = exec.path(&text);
                exec.hashes.recorded.evaluation = Some(exec.hash_of(&path)?);
                read_tokenized(&path, &exec.base(stage)?.tokenizer)?
            }
            source => {
                let tokenizer = &exec.base(stage)?.tokenizer;
                let (ids, provenance) =
                    sets::evaluation_ids(&source, tokenizer, spec.seqlen, &HubRequest::default())?;
                exec.hashes.recorded.evaluation = Some(provenance.digest());
                exec.hashes.data.evaluation = Some(provenance);
                ids
            }
        };
        exec.artifacts.eval_ids = Some((key, ids));
    }
    let (_, ids) = exec.artifacts.eval_ids.as_ref().expect("set just above");
    let context = exec.base(stage)?.config.context_limit();
    let seqlen = spec.seqlen;
    let report = perplexity_in_groups(
        exec.current(stage, upstream)?,
        ids,
        seqlen,
        spec.windows,
        context,
        exec.evaluation_group(),
        |done, total| (exec.ctx.progress)(stage, done, total),
    )?;
    record.metrics.perplexity = Some(report.perplexity);
    record.hashes.evaluation = exec.hashes.recorded.evaluation.clone();
    record.data.evaluation = exec.hashes.data.evaluation.clone();
    for (key, value) in [
        ("eval_windows", report.windows),
        ("eval_seqlen", report.seqlen),
        ("eval_predicted_tokens", report.predicted_tokens),
    ] {
        record.metrics.other.insert(key.into(), value.into());
    }
    exec.artifacts.perplexity = Some(report);
    Ok(())
}
