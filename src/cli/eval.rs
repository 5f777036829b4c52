//! `wanda eval`: perplexity of a model on a text file by the paper's protocol, and zero-shot
//! accuracy on lm-evaluation-harness's tasks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use burn::prelude::Backend;
use serde::Serialize;

use super::backend::{dispatch, OnBackend};
use super::progress::Counter;
use wanda::data::hub::HubRequest;
use wanda::data::read_tokenized;
use wanda::data::sets::{evaluation_ids, DataSource, DatasetName};
use wanda::eval::perplexity::{perplexity, window_tokens, PerplexityReport};
use wanda::eval::zeroshot::{self, Task, TaskSource, ZeroshotMetrics};
use wanda::memory::device::{DeviceChoice, DeviceSpec};
use wanda::memory::log::MemoryLog;
use wanda::model::{self, ModelRef};

/// Arguments of `wanda eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// A GGUF file, a Hugging Face folder, or a hub id (`org/name[@revision]`).
    #[arg(long)]
    pub model: String,
    /// The evaluation text (e.g. WikiText-2 raw test, joined with "\n\n").
    #[arg(long, required_unless_present_any = ["dataset", "zeroshot"], conflicts_with = "dataset")]
    pub text: Option<PathBuf>,
    /// Or a data set from the hub, by the reference's protocol: `wikitext2` (the paper's), `c4`
    /// (256 windows of the first 1100 validation documents) or `ptb`.
    #[arg(long, value_enum)]
    pub dataset: Option<DatasetName>,
    /// Window length in tokens.
    #[arg(long, default_value_t = 2048)]
    pub seqlen: usize,
    /// Evaluate only the first N windows.
    #[arg(long, value_parser = super::at_least_one)]
    pub windows: Option<usize>,
    /// Zero-shot tasks to score, comma-separated (lm-eval 0.4.13's definitions): boolq, rte,
    /// hellaswag, winogrande, arc_easy, arc_challenge, openbookqa.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub zeroshot: Vec<Task>,
    /// Score only the first N documents of each task (lm-eval's `--limit`).
    #[arg(long, requires = "zeroshot")]
    pub limit: Option<usize>,
    /// Read task documents from this folder, laid out like the hub repositories
    /// (`DIR/allenai/ai2_arc/ARC-Easy/test-00000-of-00001.parquet`), instead of the hub.
    #[arg(long, requires = "zeroshot")]
    pub task_data: Option<PathBuf>,
    /// Write every scored document (requests, loglikelihoods, gold, acc) here as JSON lines.
    #[arg(long, requires = "zeroshot")]
    pub log_samples: Option<PathBuf>,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// `cpu`, `cpu-ndarray`, `cpu-flex`, `cuda`, `cuda:N` or `auto` (CUDA:0 where the driver finds a GPU, else the CPU); `-bf16` or `-f16` after `cpu-flex` or a CUDA device computes in bfloat16 or fp16 (`cuda:0-f16`).
    #[arg(long, default_value = "auto")]
    pub device: DeviceSpec,
    /// Also write the first window's logits here (raw little-endian f32, `[seqlen, vocab]`),
    /// to compare with another implementation (`scripts/ab-transformers.sh` does).
    #[arg(long)]
    pub dump_logits: Option<PathBuf>,
}

/// What `wanda eval --json` prints.
#[derive(Debug, Serialize)]
pub struct EvalOutput {
    #[serde(flatten)]
    report: Option<PerplexityReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    zeroshot: Option<ZeroshotOutput>,
    model: String,
    text: String,
    device: String,
    load_seconds: f64,
    eval_seconds: f64,
    tokens_per_second: f64,
    peak_rss_bytes: Option<u64>,
}

/// The zero-shot part of `wanda eval --json`.
#[derive(Debug, Serialize)]
struct ZeroshotOutput {
    #[serde(flatten)]
    metrics: ZeroshotMetrics,
    /// Per task, seconds scoring and documents per second.
    seconds: BTreeMap<String, f64>,
    documents_per_second: BTreeMap<String, f64>,
}

impl OnBackend for EvalArgs {
    type Output = EvalOutput;

    fn run<B: Backend>(
        self,
        device: B::Device,
        choice: DeviceChoice,
    ) -> anyhow::Result<EvalOutput> {
        let origin = ModelRef::parse(&self.model)?;
        // Fail before the (long) model load when the text cannot be opened.
        if let Some(text) = &self.text {
            std::fs::File::open(text)
                .with_context(|| format!("cannot read eval text `{}`", text.display()))?;
        }
        let started = Instant::now();
        let loaded = model::load::<B>(&origin, &device)
            .with_context(|| format!("cannot load model `{origin}`"))?;
        let load_seconds = started.elapsed().as_secs_f64();
        let (ids, text) = match (&self.text, self.dataset) {
            (None, None) if !self.zeroshot.is_empty() => (Vec::new(), String::new()),
            (Some(path), _) => (
                read_tokenized(path, &loaded.tokenizer)?,
                path.display().to_string(),
            ),
            (None, Some(name)) => {
                let source = DataSource::Named(name);
                let (ids, provenance) = evaluation_ids(
                    &source,
                    &loaded.tokenizer,
                    self.seqlen,
                    &HubRequest::default(),
                )?;
                let commit = provenance.commit.unwrap_or_default();
                (
                    ids,
                    format!("{} ({}@{commit})", name.as_str(), provenance.repo),
                )
            }
            (None, None) => anyhow::bail!("pass `--text FILE` or `--dataset wikitext2`"),
        };
        if let Some(path) = &self.dump_logits {
            let window = ids.get(..self.seqlen).with_context(|| {
                format!("the text has fewer than {} tokens to dump", self.seqlen)
            })?;
            let logits = loaded.model.forward(window_tokens::<B>(window, &device));
            let values = wanda::model::kernels::to_host_f32(logits);
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(path, bytes)
                .with_context(|| format!("cannot write logits to `{}`", path.display()))?;
        }
        let started = Instant::now();
        let report = if text.is_empty() {
            None
        } else {
            let bar = Counter::new("perplexity", "windows");
            let report = perplexity(
                &loaded.model,
                &ids,
                self.seqlen,
                self.windows,
                loaded.config.context_limit(),
                |done, total| bar.advance(done, total),
            )?;
            bar.finish_and_clear();
            Some(report)
        };
        let eval_seconds = started.elapsed().as_secs_f64();
        let zeroshot = if self.zeroshot.is_empty() {
            None
        } else {
            Some(self.zeroshot(&loaded)?)
        };
        Ok(EvalOutput {
            tokens_per_second: report
                .as_ref()
                .map_or(0.0, |r| r.tokens as f64 / eval_seconds),
            report,
            zeroshot,
            model: origin.to_string(),
            text,
            device: choice.label(),
            load_seconds,
            eval_seconds,
            peak_rss_bytes: MemoryLog::with_gpu(None).checkpoint("end").peak_rss,
        })
    }
}

impl EvalArgs {
    /// Scores the `--zeroshot` tasks; writes `--log-samples`.
    fn zeroshot<B: Backend>(
        &self,
        loaded: &model::Loaded<wanda::model::decoder::Llama<B>>,
    ) -> anyhow::Result<ZeroshotOutput> {
        let hub = HubRequest::default();
        let source = match &self.task_data {
            Some(dir) => TaskSource::Local(dir),
            None => TaskSource::Hub(&hub),
        };
        let bar = Counter::new("zero-shot", "requests");
        let mut current = String::new();
        let run = zeroshot::evaluate(
            &loaded.model,
            &loaded.tokenizer,
            &loaded.config,
            &self.zeroshot,
            source,
            self.limit,
            |task, done, total| {
                if task != current {
                    bar.start(task);
                    current = task.to_owned();
                }
                bar.advance(done, total);
            },
        )?;
        bar.finish_and_clear();
        if let Some(path) = &self.log_samples {
            let mut lines = String::new();
            for (task, samples) in &run.samples {
                for sample in samples {
                    let mut value = serde_json::to_value(sample)?;
                    value["task"] = task.clone().into();
                    lines.push_str(&serde_json::to_string(&value)?);
                    lines.push('\n');
                }
            }
            wanda::sys::atomic::write_atomic(path, lines.as_bytes())
                .with_context(|| format!("cannot write `{}`", path.display()))?;
        }
        let documents_per_second = run
            .seconds
            .iter()
            .map(|(task, s)| (task.clone(), run.metrics.tasks[task].n as f64 / s.max(1e-9)))
            .collect();
        Ok(ZeroshotOutput {
            metrics: run.metrics,
            seconds: run.seconds,
            documents_per_second,
        })
    }
}

/// Runs `wanda eval`.
pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let json = args.json;
    let out = dispatch(args.device, args)?;
    if json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!("model       {}", out.model);
        println!("device      {}", out.device);
        if let Some(r) = &out.report {
            println!("text        {} ({} tokens)", out.text, r.text_tokens);
            println!(
                "windows     {} of {} × {} tokens ({} predicted)",
                r.windows, r.available_windows, r.seqlen, r.predicted_tokens
            );
            println!("perplexity  {:.4}", r.perplexity);
            println!(
                "time        load {:.1} s, eval {:.1} s ({:.0} tokens/s)",
                out.load_seconds, out.eval_seconds, out.tokens_per_second
            );
        }
        if let Some(z) = &out.zeroshot {
            println!(
                "zero-shot   lm-eval {} task definitions; acc (acc_norm) ± stderr",
                z.metrics.lm_eval
            );
            for (task, s) in &z.metrics.tasks {
                let norm = s
                    .acc_norm
                    .map(|n| format!("  ({:.4})", n))
                    .unwrap_or_default();
                println!(
                    "  {task:<14} {:.4}{norm}  ± {:.4}  n={}  {:.1} docs/s",
                    s.acc,
                    s.acc_stderr.unwrap_or(f64::NAN),
                    s.n,
                    z.documents_per_second[task]
                );
            }
            println!("  {:<14} {:.4}", "mean (acc)", z.metrics.mean);
        }
        if let Some(rss) = out.peak_rss_bytes {
            println!("peak RSS    {:.2} GiB", rss as f64 / f64::from(1u32 << 30));
        }
    }
    Ok(ExitCode::SUCCESS)
}
