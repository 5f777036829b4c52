//! `wanda prune`: one pruning cell from the command line. The flags become a pipeline (load →
//! calibrate → prune → eval → save) that runs through the same runner and stages as `wanda run`,
//! so the recipe saved with the model is exactly what ran.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use burn::prelude::Backend;
use serde::Serialize;

use super::backend::{dispatch, OnBackend};
use super::progress::Counter;
use wanda::data::calibration::CalibrationSet;
use wanda::data::sets::DatasetName;
use wanda::eval::perplexity::PerplexityReport;
use wanda::memory::device::{DeviceChoice, DeviceSpec};
use wanda::model::checkpoint::{replaceable_destination, SaveDtype};
use wanda::model::ModelRef;
use wanda::pipeline::plan::{validate_source, Plan, ValidateOptions};
use wanda::pipeline::record::RunRecord;
use wanda::pipeline::runner::{self, RunOptions};
use wanda::prune::dsnot::{DsnotLayers, DsnotOptions};
use wanda::prune::layerwise::ModelSparsity;
use wanda::prune::profile::{OwlOptions, Profile};
use wanda::prune::WeightUpdate;
use wanda::prune::{Method, MethodOptions, Pattern, Sparsity};
use wanda::stages::PipelineExecutor;

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
    /// RIA with N:M: groups over importance-reallocated input channels (the reference's
    /// `--reallocation`).
    #[arg(long)]
    pub channel_permutation: bool,
    /// Leave these linears dense: a glob over their paths under Llama's names (`*`, `?`), e.g.
    /// `model.layers.0.self_attn.*` or a router's `model.layers.*.mlp.gate`, whatever the
    /// family's checkpoints call them; repeat the flag for more.
    #[arg(long, value_name = "GLOB")]
    pub skip: Vec<String>,
    /// How the sparsity is spread over decoder layers: `uniform`, `owl`, or a JSON list of
    /// per-layer ratios (`[0.4,0.6,…]`) or map of layer ranges (`{"0-3":0.3,"4-29":0.55}`).
    #[arg(long, default_value = "uniform")]
    pub profile: String,
    /// OWL's outlier multiple M (with `--profile owl`).
    #[arg(long, default_value_t = 5.0)]
    pub owl_m: f64,
    /// OWL's ratio spread λ (with `--profile owl`).
    #[arg(long, default_value_t = 0.08)]
    pub owl_lambda: f64,
    /// Refine the mask with DSnoT (wanda, magnitude or sparsegpt).
    #[arg(long)]
    pub dsnot: bool,
    /// DSnoT's most prune-and-grow cycles.
    #[arg(long, default_value_t = 50)]
    pub dsnot_cycles: usize,
    /// DSnoT stops an output channel at this |error|.
    #[arg(long, default_value_t = 0.1)]
    pub dsnot_update_threshold: f64,
    /// DSnoT divides regrowing scores by the input variance to this power (0: off).
    #[arg(long, default_value_t = 1.0)]
    pub dsnot_var_power: f64,
    /// Which linears DSnoT refines: `attention` (the reference's default) or `all`.
    #[arg(long, value_enum, default_value_t = DsnotLayers::Attention)]
    pub dsnot_layers: DsnotLayers,
    /// Update the weights magnitude or Wanda keeps with SparseGPT's step, the Wanda paper's
    /// ablation: `sequential` (mask first) or `iterative` (metric recomputed per block).
    #[arg(long, value_enum)]
    pub weight_update: Option<WeightUpdate>,
    /// Calibration text (windows are drawn from it at seeded random offsets).
    #[arg(long, conflicts_with = "calib_dataset")]
    pub calib_text: Option<PathBuf>,
    /// Calibration data set from the hub by the reference's protocol: `c4` (the paper's),
    /// `wikitext2` or `ptb`.
    #[arg(long, value_enum)]
    pub calib_dataset: Option<DatasetName>,
    /// Calibration windows.
    #[arg(long, default_value_t = 128)]
    pub nsamples: usize,
    /// Calibration window length.
    #[arg(long, default_value_t = 2048)]
    pub seqlen: usize,
    /// Seed of the calibration draw.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Evaluation text; no evaluation without it (or `--eval-dataset`).
    #[arg(long, conflicts_with = "eval_dataset")]
    pub eval_text: Option<PathBuf>,
    /// Evaluation data set from the hub by the reference's protocol: `wikitext2` (the paper's),
    /// `c4` or `ptb`.
    #[arg(long, value_enum)]
    pub eval_dataset: Option<DatasetName>,
    /// Evaluation window length.
    #[arg(long, default_value_t = 2048)]
    pub eval_seqlen: usize,
    /// Evaluate only the first N windows.
    #[arg(long)]
    pub windows: Option<usize>,
    /// Save the pruned model as a Hugging Face folder here: a new or empty folder, or one an
    /// earlier save wrote (replaced once the new one is complete); any other is refused.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Keep the cell's run.json and memory log in `DIR/wanda-prune/<cell>/` (by default they
    /// go to a temporary folder that is removed).
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Element type of the saved tensors.
    #[arg(long, value_enum, default_value_t = SaveDtype::F32)]
    pub dtype: SaveDtype,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// `cpu`, `cpu-ndarray`, `cpu-flex`, `cuda`, `cuda:N` or `auto` (CUDA:0 where the driver finds a GPU, else the CPU); `-bf16` or `-f16` after `cpu-flex` or a CUDA device computes in bfloat16 or fp16 (`cuda:0-f16`).
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
    /// Tokenising the calibration text and drawing its windows (none for magnitude).
    calibrate_seconds: Option<f64>,
    /// The calibration passes and the pruning, layer by layer.
    prune_seconds: f64,
    /// Tokenising the evaluation text and the perplexity.
    eval_seconds: Option<f64>,
    peak_rss_bytes: Option<u64>,
    device: String,
}

/// The pipeline file's name for a `wanda prune` run.
const PIPELINE_NAME: &str = "wanda-prune";

impl PruneArgs {
    /// `--profile` with `--owl-m` and `--owl-lambda`.
    fn profile(&self) -> anyhow::Result<Profile> {
        let text = self.profile.trim();
        let profile: Profile = match text {
            "uniform" | "owl" => serde_json::from_value(text.into())?,
            _ => serde_json::from_str(text).with_context(|| {
                format!(
                    "`--profile {text}` is not `uniform`, `owl`, a JSON list of layer ratios or \
                     a JSON map of layer ranges such as '{{\"0-3\":0.3,\"4-29\":0.55}}'"
                )
            })?,
        };
        Ok(match profile {
            Profile::Owl(_) => Profile::Owl(OwlOptions {
                m: self.owl_m,
                lambda: self.owl_lambda,
            }),
            other => other,
        })
    }

    /// This command as a pipeline (absolute paths), validated into a plan.
    fn plan(&self, origin: &ModelRef) -> anyhow::Result<Plan> {
        let absolute = |p: &Path| -> anyhow::Result<String> {
            Ok(std::path::absolute(p)?.display().to_string())
        };
        let profile = self.profile()?;
        let dsnot = self.dsnot.then_some(DsnotOptions {
            cycles: self.dsnot_cycles,
            update_threshold: self.dsnot_update_threshold,
            var_power: self.dsnot_var_power,
            layers: self.dsnot_layers,
        });
        let needs_calibration = MethodOptions {
            profile: profile.clone(),
            dsnot,
            weight_update: self.weight_update,
            ..MethodOptions::default()
        }
        .needs_calibration(self.method);
        if needs_calibration && self.calib_text.is_none() && self.calib_dataset.is_none() {
            anyhow::bail!(
                "`--method {}`{} needs calibration data; pass `--calib-dataset c4` or `--calib-text FILE`",
                self.method,
                if self.method.needs_calibration() {
                    ""
                } else {
                    " with OWL, DSnoT or a weight update"
                }
            );
        }
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
        if self.channel_permutation {
            prune["channel_permutation"] = true.into();
        }
        if !self.skip.is_empty() {
            prune["skip"] = self.skip.clone().into();
        }
        if !profile.is_uniform() {
            prune["profile"] = serde_json::to_value(&profile)?;
        }
        if let Some(dsnot) = dsnot {
            prune["dsnot"] = serde_json::to_value(dsnot)?;
        }
        if let Some(update) = self.weight_update {
            prune["weight_update"] = update.name().into();
        }
        let mut pipeline = serde_json::json!({
            "name": PIPELINE_NAME,
            "seed": self.seed,
            "device": self.device.to_string(),
            "model": model,
            "stages": { "load": {} },
        });
        if needs_calibration {
            let mut calibration =
                serde_json::json!({ "nsamples": self.nsamples, "seqlen": self.seqlen });
            match (&self.calib_text, self.calib_dataset) {
                (Some(text), _) => calibration["text"] = absolute(text)?.into(),
                (None, Some(name)) => calibration["dataset"] = name.as_str().into(),
                (None, None) => unreachable!("checked above"),
            }
            pipeline["calibration"] = calibration;
            pipeline["stages"]["calibrate"] = serde_json::json!({});
        }
        pipeline["stages"]["prune"] = prune;
        if self.eval_text.is_some() || self.eval_dataset.is_some() {
            let mut evaluation = serde_json::json!({ "seqlen": self.eval_seqlen });
            match (&self.eval_text, self.eval_dataset) {
                (Some(text), _) => evaluation["text"] = absolute(text)?.into(),
                (None, Some(name)) => evaluation["dataset"] = name.as_str().into(),
                (None, None) => unreachable!("one of them is given"),
            }
            if let Some(windows) = self.windows {
                evaluation["windows"] = windows.into();
            }
            pipeline["evaluation"] = evaluation;
            pipeline["stages"]["eval"] = serde_json::json!({});
        }
        if self.save.is_some() {
            pipeline["stages"]["save"] = serde_json::json!({ "model": true, "dtype": self.dtype });
        }
        let text = serde_saphyr::to_string(&pipeline)?;
        // Paths are absolute, so the pipeline's own (virtual) place does not matter.
        let file = std::env::current_dir()?.join(format!("{PIPELINE_NAME}.yaml"));
        validate_source(&text, &file, &ValidateOptions::default())
            .map_err(|e| anyhow::Error::new(e.generated("the flags of `wanda prune`")))
    }
}

/// The cell, planned and placed: where its results go while it runs.
struct Job {
    args: PruneArgs,
    origin: ModelRef,
    plan: Plan,
    results: PathBuf,
}

impl OnBackend for Job {
    type Output = PruneOutput;

    fn run<B: Backend>(
        self,
        device: B::Device,
        choice: DeviceChoice,
    ) -> anyhow::Result<PruneOutput> {
        let Job {
            args,
            origin,
            plan,
            results,
        } = self;
        let results_dir = results.join(plan.name());
        let bar = Counter::new("prune", "steps");
        let progress = bar.clone();
        let mut executor = PipelineExecutor::<B>::new(&plan, &results_dir, device, choice)
            .with_progress(move |_stage, done, total| progress.advance(done, total));
        let options = RunOptions {
            results_dir: results_dir.clone(),
            only: None,
            force: true,
            memory_log: true,
            gpu_index: choice.gpu_index(),
            on_changed: Default::default(),
        };
        let summary = runner::run(&plan, &mut executor, &options, |event| {
            if let runner::RunEvent::StageStarted { node, .. } = event {
                bar.start(&node.stage);
            }
        })?;
        bar.finish_and_clear();
        let record = summary
            .finished
            .first()
            .context("the prune cell did not finish")?;
        if let Some(folder) = &args.save {
            move_saved_model(&results_dir, record, folder)?;
        }
        let sparsity = executor
            .pruned_sparsity()
            .context("the prune stage left no pruned model")?
            .clone();
        let target = Sparsity::from_pattern(args.pattern, args.sparsity)?;
        let stage_seconds = |stage: &str| record.timings.stages.get(stage).copied();
        Ok(PruneOutput {
            model: origin.to_string(),
            method: args.method.to_string(),
            pattern: target.to_string(),
            target_sparsity: target.target_ratio(),
            calibration: executor.calibration().cloned(),
            sparsity,
            perplexity: executor.perplexity().cloned(),
            load_seconds: stage_seconds("load").unwrap_or(0.0),
            calibrate_seconds: stage_seconds("calibrate"),
            prune_seconds: stage_seconds("prune").unwrap_or(0.0),
            eval_seconds: stage_seconds("eval"),
            peak_rss_bytes: record.memory.peak_rss_bytes,
            device: record.effective.device.clone(),
        })
    }
}

/// Moves the model the save stage wrote into the cell's folder to `folder`, replacing what is
/// there only where [`replaceable_destination`] allows (an empty folder, or one wanda wrote).
fn move_saved_model(results_dir: &Path, record: &RunRecord, folder: &Path) -> anyhow::Result<()> {
    let saved = results_dir.join(&record.cell.id.0).join("model");
    let folder = &replaceable_destination(folder)?;
    if folder.exists() {
        std::fs::remove_dir_all(folder)
            .with_context(|| format!("cannot replace `{}`", folder.display()))?;
    }
    if let Some(parent) = folder.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create `{}`", parent.display()))?;
    }
    std::fs::rename(&saved, folder)
        .with_context(|| format!("cannot move the saved model to `{}`", folder.display()))
}

/// Runs `wanda prune`.
pub fn run(args: PruneArgs) -> anyhow::Result<ExitCode> {
    let json = args.json;
    let origin = ModelRef::parse(&args.model)?;
    let plan = args.plan(&origin)?;
    // Before any work: a destination that is not ours is refused now, not after the pruning.
    if let Some(save) = &args.save {
        replaceable_destination(save)?;
    }
    // Results go beside `--save` (a rename then stays on one file system) or to `--results`;
    // a temporary folder of this process otherwise, removed at the end.
    let (results, temporary) = match (&args.results, &args.save) {
        (Some(dir), _) => (dir.clone(), false),
        (None, Some(save)) => {
            let parent = std::path::absolute(save)?
                .parent()
                .map_or_else(std::env::temp_dir, Path::to_path_buf);
            (
                parent.join(format!(".wanda-prune-{}", std::process::id())),
                true,
            )
        }
        (None, None) => (
            std::env::temp_dir().join(format!("wanda-prune-{}", std::process::id())),
            true,
        ),
    };
    let device = args.device;
    let job = Job {
        args,
        origin,
        plan,
        results: results.clone(),
    };
    let out = dispatch(device, job);
    if temporary {
        let _ = std::fs::remove_dir_all(&results);
    }
    let out = out?;
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
            "time        load {:.1} s, {}prune {:.1} s{}",
            out.load_seconds,
            out.calibrate_seconds
                .map_or(String::new(), |s| format!("calibrate {s:.1} s, ")),
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
