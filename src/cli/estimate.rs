//! `wanda estimate`: the memory a run will need, before running it — from the model's config
//! and checkpoint headers alone. `--mode prune` predicts this tool's own pruning run (and with
//! `--probe` runs its first layers for real and compares); `inference` and `training` are the
//! calculators users know for other frameworks.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use burn::prelude::Backend;
use serde::Serialize;

use super::backend::{dispatch, OnBackend};
use wanda::data::calibration;
use wanda::data::read_tokenized;
use wanda::memory::calculator::{
    self, InferenceRequest, Lora, Optimizer, Parallelism, Precision, TrainingRequest,
};
use wanda::memory::device::DeviceKind;
use wanda::memory::device::{DeviceChoice, DeviceSpec, Precision as DevicePrecision};
use wanda::memory::estimate::{estimate_prune, render, Estimate, PruneRun};
use wanda::memory::log::MemoryLog;
use wanda::model::arch::{gib, Breakdown, ModelShape, Place};
use wanda::model::{self, ModelRef};
use wanda::prune::Method;
use wanda::prune::WeightUpdate;
use wanda::stages::probe::probe_prune;

/// Arguments of `wanda estimate`.
#[derive(Debug, clap::Args)]
pub struct EstimateArgs {
    /// A GGUF file, a Hugging Face folder, or a hub id (only its config.json is fetched).
    #[arg(long)]
    pub model: String,
    /// `prune` (this tool's run), `inference` or `training`.
    #[arg(long, default_value = "prune")]
    pub mode: String,
    /// The pruning method (prune mode).
    #[arg(long, value_enum, default_value_t = Method::Wanda)]
    pub method: Method,
    /// Precision of inference or training: fp32, fp16, bf16, int8, int4, nf4.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Inference without a KV cache.
    #[arg(long)]
    pub no_kv_cache: bool,
    /// Training optimizer: sgd, sgd-momentum, nesterov, adagrad, rmsprop, adam, adamw,
    /// adafactor, lamb, lion, nadam, amsgrad, sparse-adam, adabelief, shampoo.
    #[arg(long, default_value = "adamw")]
    pub optimizer: String,
    /// Training with gradient checkpointing.
    #[arg(long)]
    pub gradient_checkpointing: bool,
    /// FlashAttention (no materialised attention scores).
    #[arg(long)]
    pub flash_attention: bool,
    /// LoRA rank (training only the adapters).
    #[arg(long)]
    pub lora_rank: Option<usize>,
    /// LoRA target linears.
    #[arg(long, value_delimiter = ',', default_value = "q_proj,v_proj")]
    pub lora_targets: Vec<String>,
    /// QLoRA: LoRA over nf4 base weights.
    #[arg(long)]
    pub qlora: bool,
    /// DeepSpeed ZeRO stage, 0 to 3.
    #[arg(long, default_value_t = 0)]
    pub zero: u8,
    /// Data-parallel GPUs.
    #[arg(long, default_value_t = 1)]
    pub dp: usize,
    /// Tensor-parallel GPUs.
    #[arg(long, default_value_t = 1)]
    pub tp: usize,
    /// Pipeline-parallel stages.
    #[arg(long, default_value_t = 1)]
    pub pp: usize,
    /// Calibration samples.
    #[arg(long, default_value_t = 128, value_parser = super::at_least_one)]
    pub nsamples: usize,
    /// Calibration sample length (also the sequence length of inference and training).
    #[arg(long, default_value_t = 2048, value_parser = super::at_least_one)]
    pub seqlen: usize,
    /// Samples per forward pass (prune: calibration batch; inference/training: batch size).
    #[arg(long, default_value_t = 8, value_parser = super::at_least_one)]
    pub batch: usize,
    /// Evaluation window; no evaluation stage without it.
    #[arg(long, value_parser = super::at_least_one)]
    pub eval_seqlen: Option<usize>,
    /// Keep the dense model beside the pruned copy, as a pipeline with a sweep does.
    #[arg(long)]
    pub keep_dense: bool,
    /// Layer streaming: only the current layer's weights on the device.
    #[arg(long)]
    pub streaming: bool,
    /// OWL's per-layer sparsity (`profile: owl`): its dense outlier pass runs first.
    #[arg(long)]
    pub owl: bool,
    /// DSnoT refines the masks.
    #[arg(long)]
    pub dsnot: bool,
    /// The weights magnitude or Wanda keeps are updated (`sequential` or `iterative`): a
    /// Hessian per input, as SparseGPT.
    #[arg(long, value_enum)]
    pub weight_update: Option<WeightUpdate>,
    /// `eval` also scores zero-shot tasks (one batch of padded requests).
    #[arg(long)]
    pub zeroshot: bool,
    /// Windows a streamed evaluation runs through each layer together, holding their residual
    /// streams (a pipeline's gate asks for all its evaluation windows: each layer read once).
    #[arg(long, default_value_t = wanda::eval::perplexity::STREAMED_WINDOW_GROUP, value_parser = super::at_least_one)]
    pub eval_group: usize,
    /// The device to estimate for.
    #[arg(long, value_enum, default_value_t = DeviceKind::Cpu)]
    pub target: DeviceKind,
    /// The precision weights and activations are stored in on that device (`f16`, `bf16`:
    /// `--device cuda-f16` and the like; the default CPU backend computes in f32).
    #[arg(long, value_enum, default_value_t = DevicePrecision::F32)]
    pub precision: DevicePrecision,
    /// Keep the calibration activations in host memory between layers, one batch on the GPU
    /// at a time (the gate's choice when the device is short of memory).
    #[arg(long)]
    pub host_activations: bool,
    /// The GPU's memory (e.g. `24GiB`), whose size sets the CUDA pool's page sizes; default:
    /// GPU 0's as NVML reports it, else 80 GiB.
    #[arg(long, value_parser = super::parse_size)]
    pub gpu_memory: Option<u64>,
    /// Run load, calibration and the pruning of the first `--probe-layers` layers (and one
    /// evaluation window) for real and compare the measured peak resident set with the estimate.
    #[arg(long)]
    pub probe: bool,
    /// Layers the probe prunes (every layer has the same shapes, so its peak is the run's).
    #[arg(long, default_value_t = 2)]
    pub probe_layers: usize,
    /// Calibration text (its size counts; the probe reads it).
    #[arg(long)]
    pub calib_text: Option<PathBuf>,
    /// Evaluation text (its size counts; the probe reads it).
    #[arg(long)]
    pub eval_text: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What `wanda estimate --json` prints.
#[derive(Debug, Serialize)]
pub struct EstimateOutput {
    model: String,
    shape: ModelShape,
    run: PruneRun,
    estimate: Estimate,
    peak_stage: String,
    peak_bytes: u64,
    probe: Option<ProbeOutput>,
}

/// Measured peaks of a probe, per stage, beside the estimate's running peak.
#[derive(Debug, Serialize)]
pub struct ProbeOutput {
    layers: usize,
    stages: Vec<ProbeStage>,
}

/// One stage of a probe.
#[derive(Debug, Serialize)]
pub struct ProbeStage {
    stage: String,
    estimate_bytes: u64,
    measured_peak_rss_bytes: u64,
    ratio: f64,
}

impl EstimateArgs {
    fn prune_estimate(&self) -> anyhow::Result<EstimateOutput> {
        let origin = ModelRef::parse(&self.model)?;
        let (shape, checkpoint_bytes) = model::inspect(&origin)
            .with_context(|| format!("cannot read the config of `{origin}`"))?;
        let method = self.method;
        let device = self.target;
        if device == DeviceKind::Cpu && self.precision != DevicePrecision::F32 {
            anyhow::bail!(
                "`--precision {}`: the default CPU backend computes in f32; estimate for \
                 `--target cpu-flex` or `--target cuda` in reduced precision",
                self.precision.name()
            );
        }
        if self.host_activations && device != DeviceKind::Cuda {
            anyhow::bail!(
                "`--host-activations` keeps a GPU's calibration activations in host memory; \
                 on the CPU they are already there (use `--target cuda`)"
            );
        }
        let run = PruneRun {
            method: Some(method),
            nsamples: self.nsamples,
            seqlen: self.seqlen,
            batch: self.batch,
            eval_seqlen: self.eval_seqlen,
            keeps_dense_copy: self.keep_dense,
            streaming: self.streaming,
            checkpoint_bytes,
            calibration_text_bytes: file_bytes(self.calib_text.as_deref())?,
            eval_text_bytes: file_bytes(self.eval_text.as_deref())?,
            device,
            precision: self.precision,
            activations_on_host: self.host_activations,
            gpu_memory: (device == DeviceKind::Cuda).then(|| {
                self.gpu_memory
                    .or_else(|| DeviceChoice::cuda(0, self.precision).gpu_total_memory())
                    .unwrap_or(DEFAULT_GPU_MEMORY)
            }),
            owl: self.owl,
            dsnot: self.dsnot,
            weight_update: self.weight_update,
            zeroshot: self.zeroshot,
            eval_group: self.eval_group,
            expert_removal: None,
        };
        let estimate = estimate_prune(&shape, &run);
        let (peak_stage, peak_bytes) = estimate.peak(Place::Device);
        Ok(EstimateOutput {
            model: origin.to_string(),
            shape,
            run,
            peak_stage: peak_stage.to_string(),
            peak_bytes,
            estimate,
            probe: None,
        })
    }
}

/// The GPU size `--target cuda` assumes when none is given or seen: an 80 GiB A100/H100.
const DEFAULT_GPU_MEMORY: u64 = 80 << 30;

/// The size of an optional file (0 when absent).
fn file_bytes(path: Option<&std::path::Path>) -> anyhow::Result<u64> {
    path.map_or(Ok(0), |p| {
        Ok(std::fs::metadata(p)
            .with_context(|| format!("cannot read `{}`", p.display()))?
            .len())
    })
}

/// The probe on a backend: the estimate's stages run for real, peak RSS after each.
struct Probe {
    args: EstimateArgs,
    estimate: EstimateOutput,
}

impl OnBackend for Probe {
    type Output = EstimateOutput;

    fn run<B: Backend>(
        self,
        device: B::Device,
        _choice: DeviceChoice,
    ) -> anyhow::Result<EstimateOutput> {
        let Probe { args, mut estimate } = self;
        let method = args.method;
        let mut log = MemoryLog::new();
        let mut measured = Vec::new();
        let origin = ModelRef::parse(&args.model)?;
        let loaded = model::load::<B>(&origin, &device)
            .with_context(|| format!("cannot load model `{origin}`"))?;
        measured.push(("load", log.checkpoint("load").peak_rss));

        if estimate.run.calibrates() || args.calib_text.is_some() {
            let path = args
                .calib_text
                .as_ref()
                .context("`--probe` with a calibration method needs `--calib-text FILE`")?;
            let ids = read_tokenized(path, &loaded.tokenizer)?;
            measured.push((
                "calibration text",
                log.checkpoint("calibration text").peak_rss,
            ));
            let set = calibration::draw(&ids, args.nsamples, args.seqlen, 0)?;
            probe_prune(
                &loaded.model,
                method,
                &estimate.run.method_options(),
                &set.windows,
                args.batch,
                args.probe_layers,
            )?;
            measured.push(("prune", log.checkpoint("prune").peak_rss));
        }
        if let (Some(seqlen), Some(path)) = (args.eval_seqlen, &args.eval_text) {
            let ids = read_tokenized(path, &loaded.tokenizer)?;
            measured.push(("eval text", log.checkpoint("eval text").peak_rss));
            wanda::eval::perplexity::perplexity(
                &loaded.model,
                &ids,
                seqlen,
                Some(1),
                loaded.config.context_limit(),
                |_, _| {},
            )?;
            measured.push(("eval", log.checkpoint("eval").peak_rss));
        }
        // The resident set's peak never falls, so each stage compares with the estimate's
        // running peak up to it.
        let mut running = 0;
        let mut stages = Vec::new();
        for stage in &estimate.estimate.stages {
            running = running.max(stage.breakdown.total(Place::Device));
            if let Some((_, Some(peak))) = measured.iter().find(|(s, _)| *s == stage.stage) {
                stages.push(ProbeStage {
                    stage: stage.stage.to_string(),
                    estimate_bytes: running,
                    measured_peak_rss_bytes: *peak,
                    ratio: running as f64 / *peak as f64,
                });
            }
        }
        estimate.probe = Some(ProbeOutput {
            layers: args.probe_layers,
            stages,
        });
        Ok(estimate)
    }
}

/// What `wanda estimate --mode inference|training --json` prints.
#[derive(Debug, Serialize)]
struct CalculatorOutput {
    model: String,
    mode: String,
    shape: ModelShape,
    breakdown: Breakdown,
    total_bytes: u64,
    fits_on_gib: Vec<u64>,
}

/// Headroom kept free when saying which GPUs a total fits on.
const FITS_HEADROOM: f64 = 0.1;

impl EstimateArgs {
    fn calculator(&self) -> anyhow::Result<CalculatorOutput> {
        let origin = ModelRef::parse(&self.model)?;
        let (shape, _) = model::inspect(&origin)
            .with_context(|| format!("cannot read the config of `{origin}`"))?;
        let precision: Precision = self
            .dtype
            .parse()
            .map_err(|e: String| anyhow::anyhow!("`--dtype`: {e}"))?;
        let breakdown = match self.mode.as_str() {
            "inference" => calculator::inference(
                &shape,
                &InferenceRequest {
                    precision,
                    seqlen: self.seqlen,
                    batch: self.batch,
                    kv_cache: !self.no_kv_cache,
                    flash_attention: self.flash_attention,
                },
            ),
            _ => {
                let optimizer: Optimizer = self
                    .optimizer
                    .parse()
                    .map_err(|e: String| anyhow::anyhow!("`--optimizer`: {e}"))?;
                let parallelism = Parallelism {
                    zero: self.zero,
                    dp: self.dp,
                    tp: self.tp,
                    pp: self.pp,
                };
                parallelism.validate().map_err(|e| anyhow::anyhow!(e))?;
                let lora = match (self.lora_rank, self.qlora) {
                    (None, false) => None,
                    (rank, qlora) => {
                        let lora = Lora {
                            rank: rank.unwrap_or(8),
                            targets: self.lora_targets.clone(),
                            quantized_base: qlora,
                        };
                        calculator::lora_parameters(&shape, &lora)
                            .map_err(|e| anyhow::anyhow!("`--lora-targets`: {e}"))?;
                        Some(lora)
                    }
                };
                calculator::training(
                    &shape,
                    &TrainingRequest {
                        precision,
                        seqlen: self.seqlen,
                        batch: self.batch,
                        optimizer,
                        gradient_checkpointing: self.gradient_checkpointing,
                        flash_attention: self.flash_attention,
                        lora,
                        parallelism,
                    },
                )
            }
        };
        let total_bytes = breakdown.total(Place::Device);
        Ok(CalculatorOutput {
            model: origin.to_string(),
            mode: self.mode.clone(),
            shape,
            fits_on_gib: calculator::fits_on(total_bytes, FITS_HEADROOM),
            breakdown,
            total_bytes,
        })
    }
}

fn fits_line(fits: &[u64]) -> String {
    match fits {
        [] => format!(
            "fits on: none of {} GiB (with {:.0} % headroom)",
            calculator::COMMON_GPUS_GIB.map(|g| g.to_string()).join("/"),
            FITS_HEADROOM * 100.0
        ),
        sizes => format!(
            "fits on: {} GiB GPUs (with {:.0} % headroom)",
            sizes
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            FITS_HEADROOM * 100.0
        ),
    }
}

/// Runs `wanda estimate`.
pub fn run(args: EstimateArgs) -> anyhow::Result<ExitCode> {
    let json = args.json;
    match args.mode.as_str() {
        "prune" => {}
        "inference" | "training" => {
            let out = args.calculator()?;
            if json {
                println!("{}", serde_json::to_string(&out)?);
            } else {
                println!(
                    "model {} ({} mode): {} parameters, {} layers, hidden {}, vocabulary {}",
                    out.model,
                    out.mode,
                    out.shape.parameters,
                    out.shape.num_hidden_layers,
                    out.shape.hidden_size,
                    out.shape.vocab_size
                );
                print!("{}", render(&out.breakdown));
                println!("  {:<28} {:>10}", "total", gib(out.total_bytes));
                println!("{}", fits_line(&out.fits_on_gib));
            }
            return Ok(ExitCode::SUCCESS);
        }
        other => {
            anyhow::bail!("`--mode {other}` is not a mode; use `prune`, `inference` or `training`")
        }
    }
    let estimate = args.prune_estimate()?;
    let out = if args.probe {
        dispatch(
            DeviceSpec::Exact(DeviceChoice::CPU),
            Probe { args, estimate },
        )?
    } else {
        estimate
    };
    if json {
        println!("{}", serde_json::to_string(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "model {}: {} parameters, {} layers, hidden {}, vocabulary {}",
        out.model,
        out.shape.parameters,
        out.shape.num_hidden_layers,
        out.shape.hidden_size,
        out.shape.vocab_size
    );
    for stage in &out.estimate.stages {
        println!(
            "{:<6} {}",
            stage.stage,
            gib(stage.breakdown.total(Place::Device))
        );
        print!("{}", render(&stage.breakdown));
    }
    println!("peak   {} ({})", gib(out.peak_bytes), out.peak_stage);
    if out.run.device == DeviceKind::Cuda {
        println!(
            "{}",
            fits_line(&calculator::fits_on(out.peak_bytes, FITS_HEADROOM))
        );
    }
    if let Some(probe) = &out.probe {
        println!("probe ({} layers pruned for real):", probe.layers);
        for s in &probe.stages {
            println!(
                "  {:<6} estimate {}  measured peak RSS {}  ratio {:.3}",
                s.stage,
                gib(s.estimate_bytes),
                gib(s.measured_peak_rss_bytes),
                s.ratio
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
