//! `wanda prune`: one pruning cell from the command line — load, calibrate + prune layer by
//! layer, evaluate perplexity, optionally save the pruned model as a Hugging Face folder.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use burn::prelude::Backend;
use serde::Serialize;

use super::backend::{dispatch, OnBackend};
use wanda::data::calibration::{self, CalibrationSet};
use wanda::data::read_tokenized;
use wanda::eval::perplexity::{perplexity, PerplexityReport};
use wanda::memory::device::{DeviceChoice, DeviceSpec};
use wanda::memory::log::MemoryLog;
use wanda::model::export::{save_hf_folder, SaveDtype, SaveSpec};
use wanda::model::{self, ModelRef};
use wanda::prune::layerwise::{prune_model, ModelSparsity};
use wanda::prune::{Method, MethodOptions, Pattern, Sparsity};
use wanda::stages::{RECIPE_FILE, SPARSITY_FILE};

/// Arguments of `wanda prune`.
#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// A GGUF file, a Hugging Face folder, or a hub id (`org/name[@revision]`).
    #[arg(long)]
    pub model: String,
    /// The pruning method.
    #[arg(long, value_enum, default_value_t = Method::Wanda)]
    pub method: Method,
    /// Fraction of weights to zero (unstructured).
    #[arg(long, default_value_t = 0.5)]
    pub sparsity: f64,
    /// `unstructured`, or `N:M` (N of every M consecutive input weights zeroed, e.g. `2:4`).
    #[arg(long, default_value = "unstructured")]
    pub pattern: Pattern,
    /// Wanda's per-row adaptive threshold (the reference's `--use_variant`).
    #[arg(long)]
    pub use_variant: bool,
    /// Calibration text (windows are drawn from it at seeded random offsets).
    #[arg(long)]
    pub calib_text: Option<PathBuf>,
    /// Calibration windows.
    #[arg(long, default_value_t = 128)]
    pub nsamples: usize,
    /// Calibration window length.
    #[arg(long, default_value_t = 2048)]
    pub seqlen: usize,
    /// Seed of the calibration draw.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Samples per forward pass during calibration.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Evaluation text; no evaluation without it.
    #[arg(long)]
    pub eval_text: Option<PathBuf>,
    /// Evaluation window length.
    #[arg(long, default_value_t = 2048)]
    pub eval_seqlen: usize,
    /// Evaluate only the first N windows.
    #[arg(long)]
    pub windows: Option<usize>,
    /// Save the pruned model as a Hugging Face folder here.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Element type of the saved tensors.
    #[arg(long, value_enum, default_value_t = SaveDtype::F32)]
    pub dtype: SaveDtype,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// `cpu`, `cpu-flex`, `cpu-ndarray`, `cuda`, `cuda:N` (`cuda-bf16`, `cuda:N-bf16`: compute in bfloat16) or `auto`.
    #[arg(long, default_value = "auto")]
    pub device: DeviceSpec,
}

/// What `wanda prune --json` prints.
#[derive(Debug, Serialize)]
pub struct PruneOutput {
    model: String,
    method: String,
    pattern: String,
    target_sparsity: f64,
    calibration: Option<CalibrationSet>,
    sparsity: ModelSparsity,
    perplexity: Option<PerplexityReport>,
    load_seconds: f64,
    prune_seconds: f64,
    eval_seconds: Option<f64>,
    peak_rss_bytes: Option<u64>,
    device: String,
}

impl PruneArgs {
    /// This command as a pipeline file (absolute paths), the recipe saved with the model.
    fn recipe_yaml(&self, origin: &ModelRef) -> anyhow::Result<String> {
        let absolute = |p: &std::path::Path| -> anyhow::Result<String> {
            Ok(std::path::absolute(p)?.display().to_string())
        };
        let model = match origin {
            ModelRef::Gguf(path) => serde_json::json!({ "gguf": absolute(path)? }),
            ModelRef::Folder(path) => serde_json::json!({ "path": absolute(path)? }),
            ModelRef::Hub { repo_id, revision } => {
                serde_json::json!({ "hub": repo_id, "revision": revision })
            }
        };
        let mut prune =
            serde_json::json!({ "method": self.method, "pattern": self.pattern.to_string() });
        if self.pattern == Pattern::Unstructured {
            prune["sparsity"] = self.sparsity.into();
        }
        if self.use_variant {
            prune["use_variant"] = true.into();
        }
        let mut recipe = serde_json::json!({
            "name": "wanda-prune",
            "seed": self.seed,
            "model": model,
            "stages": { "load": {} },
        });
        if let Some(text) = &self.calib_text {
            recipe["calibration"] = serde_json::json!({
                "text": absolute(text)?, "nsamples": self.nsamples, "seqlen": self.seqlen,
            });
            recipe["stages"]["calibrate"] = serde_json::json!({});
        }
        recipe["stages"]["prune"] = prune;
        if let Some(text) = &self.eval_text {
            let mut evaluation =
                serde_json::json!({ "text": absolute(text)?, "seqlen": self.eval_seqlen });
            if let Some(windows) = self.windows {
                evaluation["windows"] = windows.into();
            }
            recipe["evaluation"] = evaluation;
            recipe["stages"]["eval"] = serde_json::json!({});
        }
        recipe["stages"]["save"] = serde_json::json!({ "model": true, "dtype": self.dtype });
        Ok(format!(
            "# The `wanda prune` command that made this model, as a pipeline.\n{}",
            serde_saphyr::to_string(&recipe)?
        ))
    }
}

impl OnBackend for PruneArgs {
    type Output = PruneOutput;

    fn run<B: Backend>(
        self,
        device: B::Device,
        choice: DeviceChoice,
    ) -> anyhow::Result<PruneOutput> {
        let method = self.method;
        let options = MethodOptions {
            use_variant: self.use_variant,
            ..MethodOptions::default()
        };
        let sparsity = Sparsity::from_pattern(self.pattern, self.sparsity)?;
        let origin = ModelRef::parse(&self.model)?;
        let started = Instant::now();
        let mut loaded = model::load::<B>(&origin, &device)
            .with_context(|| format!("cannot load model `{origin}`"))?;
        let load_seconds = started.elapsed().as_secs_f64();

        let calibration = match (&self.calib_text, method.needs_calibration()) {
            (Some(path), true) => {
                let ids = read_tokenized(path, &loaded.tokenizer)?;
                Some(calibration::draw(
                    &ids,
                    self.nsamples,
                    self.seqlen,
                    self.seed,
                )?)
            }
            (None, true) => anyhow::bail!(
                "`--method {}` needs calibration data; pass `--calib-text FILE`",
                method.name()
            ),
            (_, false) => None,
        };
        let bar = super::counter_bar("prune", "layers");
        let started = Instant::now();
        let windows = calibration.as_ref().map_or(&[][..], |c| &c.windows[..]);
        let report = prune_model(
            &mut loaded.model,
            method,
            &options,
            sparsity,
            windows,
            self.batch,
            |done, total| super::advance(&bar, done, total),
        )?;
        bar.finish_and_clear();
        let prune_seconds = started.elapsed().as_secs_f64();

        let (perplexity, eval_seconds) = match &self.eval_text {
            Some(path) => {
                let ids = read_tokenized(path, &loaded.tokenizer)?;
                let bar = super::counter_bar("perplexity", "windows");
                let started = Instant::now();
                let r = perplexity(
                    &loaded.model,
                    &ids,
                    self.eval_seqlen,
                    self.windows,
                    loaded.config.context_limit(),
                    |d, t| super::advance(&bar, d, t),
                )?;
                bar.finish_and_clear();
                (Some(r), Some(started.elapsed().as_secs_f64()))
            }
            None => (None, None),
        };
        if let Some(folder) = &self.save {
            let mut spec = SaveSpec::new(self.dtype);
            spec.extra_files = loaded.tokenizer_files.clone();
            spec.extra_files
                .push((RECIPE_FILE.into(), self.recipe_yaml(&origin)?));
            spec.extra_files
                .push((SPARSITY_FILE.into(), serde_json::to_string_pretty(&report)?));
            save_hf_folder(
                &loaded.model,
                &loaded.config,
                &loaded.tokenizer.to_json()?,
                folder,
                &spec,
            )?;
        }
        Ok(PruneOutput {
            model: origin.to_string(),
            method: method.name().to_string(),
            pattern: sparsity.to_string(),
            target_sparsity: sparsity.target_ratio(),
            calibration,
            sparsity: report,
            perplexity,
            load_seconds,
            prune_seconds,
            eval_seconds,
            peak_rss_bytes: MemoryLog::with_gpu(None).checkpoint("end").peak_rss,
            device: choice.label(),
        })
    }
}

/// Runs `wanda prune`.
pub fn run(args: PruneArgs) -> anyhow::Result<ExitCode> {
    let json = args.json;
    let out = dispatch(args.device, args)?;
    if json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!("model       {}", out.model);
        println!("method      {} {}", out.method, out.pattern);
        println!(
            "sparsity    {:.4} measured over all prunable linears (target {:.4})",
            out.sparsity.total, out.target_sparsity
        );
        let layers: Vec<String> = out
            .sparsity
            .per_layer
            .iter()
            .map(|f| format!("{f:.3}"))
            .collect();
        println!("per layer   {}", layers.join(" "));
        if let Some(p) = &out.perplexity {
            println!(
                "perplexity  {:.4} ({} windows × {})",
                p.perplexity, p.windows, p.seqlen
            );
        }
        println!(
            "time        load {:.1} s, prune {:.1} s{}",
            out.load_seconds,
            out.prune_seconds,
            out.eval_seconds
                .map_or(String::new(), |s| format!(", eval {s:.1} s"))
        );
        if let Some(rss) = out.peak_rss_bytes {
            println!("peak RSS    {:.2} GiB", rss as f64 / f64::from(1u32 << 30));
        }
    }
    Ok(ExitCode::SUCCESS)
}
