//! `wanda eval`: perplexity of a model on a text file by the paper's protocol.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use burn::prelude::Backend;
use serde::Serialize;

use super::backend::{dispatch, OnBackend};
use wanda::data::hub::HubRequest;
use wanda::data::read_tokenized;
use wanda::data::sets::{evaluation_ids, DataSource, DatasetName};
use wanda::eval::perplexity::{perplexity, window_tokens, PerplexityReport};
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
    #[arg(long, required_unless_present = "dataset", conflicts_with = "dataset")]
    pub text: Option<PathBuf>,
    /// Or a data set from the hub, by the reference's protocol: `wikitext2` (the paper's), `c4`
    /// (256 windows of the first 1100 validation documents) or `ptb`.
    #[arg(long, value_enum)]
    pub dataset: Option<DatasetName>,
    /// Window length in tokens.
    #[arg(long, default_value_t = 2048)]
    pub seqlen: usize,
    /// Evaluate only the first N windows.
    #[arg(long)]
    pub windows: Option<usize>,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// `cpu`, `cpu-flex`, `cpu-ndarray`, `cuda`, `cuda:N` (`cuda-bf16`, `cuda:N-bf16`: compute in bfloat16) or `auto`.
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
    report: PerplexityReport,
    model: String,
    text: String,
    device: String,
    load_seconds: f64,
    eval_seconds: f64,
    tokens_per_second: f64,
    peak_rss_bytes: Option<u64>,
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
            let values = wanda::model::host::to_host_f32(logits);
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(path, bytes)
                .with_context(|| format!("cannot write logits to `{}`", path.display()))?;
        }
        let bar = super::counter_bar("perplexity", "windows");
        let started = Instant::now();
        let report = perplexity(
            &loaded.model,
            &ids,
            self.seqlen,
            self.windows,
            loaded.config.context_limit(),
            |done, total| super::advance(&bar, done, total),
        )?;
        bar.finish_and_clear();
        let eval_seconds = started.elapsed().as_secs_f64();
        Ok(EvalOutput {
            tokens_per_second: report.tokens as f64 / eval_seconds,
            report,
            model: origin.to_string(),
            text,
            device: choice.label(),
            load_seconds,
            eval_seconds,
            peak_rss_bytes: MemoryLog::with_gpu(None).checkpoint("end").peak_rss,
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
        let r = &out.report;
        println!("model       {}", out.model);
        println!("text        {} ({} tokens)", out.text, r.text_tokens);
        println!("device      {}", out.device);
        println!(
            "windows     {} of {} × {} tokens ({} predicted)",
            r.windows, r.available_windows, r.seqlen, r.predicted_tokens
        );
        println!("perplexity  {:.4}", r.perplexity);
        println!(
            "time        load {:.1} s, eval {:.1} s ({:.0} tokens/s)",
            out.load_seconds, out.eval_seconds, out.tokens_per_second
        );
        if let Some(rss) = out.peak_rss_bytes {
            println!("peak RSS    {:.2} GiB", rss as f64 / f64::from(1u32 << 30));
        }
    }
    Ok(ExitCode::SUCCESS)
}
