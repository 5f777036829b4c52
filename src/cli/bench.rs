//! `wanda bench`: the benchmark figures of `../shared/bench/README.md` that this build can
//! produce — B1 (dense forward tokens/s) and B6 (GEMM GFLOP/s). Every figure is the median of
//! `--repeats` runs (at least 3), printed with min and max.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use burn::prelude::*;
use serde::Serialize;

use super::backend::{dispatch, DeviceArg, OnBackend};
use wanda::model::{self, ModelRef};

/// Arguments of `wanda bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Which figure to measure.
    #[command(subcommand)]
    pub what: BenchKind,
    /// Timed runs per figure (at least 3); one untimed warm-up run precedes them.
    #[arg(long, default_value_t = 5, global = true)]
    pub repeats: usize,
    /// Print one JSON object.
    #[arg(long, global = true)]
    pub json: bool,
    /// `cpu`, `cpu-flex`, `cpu-ndarray`, `cuda`, `cuda:N` or `auto`.
    #[arg(long, default_value = "auto", global = true)]
    pub device: DeviceArg,
}

/// The benchmark figures.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum BenchKind {
    /// B1: forward pass over one window, tokens/s.
    Forward {
        /// A GGUF file, a Hugging Face folder, or a hub id.
        #[arg(long)]
        model: String,
        /// Window length.
        #[arg(long, default_value_t = 512)]
        seqlen: usize,
    },
    /// B6: f32 GEMM `[m × k] · [k × n]`, GFLOP/s.
    Gemm {
        /// Rows of the left matrix.
        #[arg(long, default_value_t = 512)]
        m: usize,
        /// Shared dimension.
        #[arg(long, default_value_t = 576)]
        k: usize,
        /// Columns of the right matrix.
        #[arg(long, default_value_t = 1536)]
        n: usize,
    },
}

/// Median, min and max of repeated measurements.
#[derive(Debug, Serialize)]
pub struct Figure {
    name: String,
    unit: String,
    median: f64,
    min: f64,
    max: f64,
    runs: Vec<f64>,
    device: String,
}

fn figure(name: &str, unit: &str, mut runs: Vec<f64>, device: String) -> Figure {
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    runs.shrink_to_fit();
    Figure {
        name: name.to_string(),
        unit: unit.to_string(),
        median,
        min: sorted[0],
        max: sorted[sorted.len() - 1],
        runs,
        device,
    }
}

/// Times `f` once untimed, then `repeats` times; returns the rates `work / seconds`.
fn measure(repeats: usize, work: f64, mut f: impl FnMut()) -> Vec<f64> {
    f();
    (0..repeats)
        .map(|_| {
            let t = Instant::now();
            f();
            work / t.elapsed().as_secs_f64()
        })
        .collect()
}

pub struct BenchJob {
    what: BenchKind,
    repeats: usize,
}

impl OnBackend for BenchJob {
    type Output = Figure;

    fn run<B: Backend>(self, device: B::Device, label: String) -> anyhow::Result<Figure> {
        match self.what {
            BenchKind::Forward { model, seqlen } => {
                let origin = ModelRef::parse(&model)?;
                let loaded = model::load::<B>(&origin, &device)
                    .with_context(|| format!("cannot load model `{origin}`"))?;
                let vocab = loaded.config.vocab_size as i64;
                // A fixed, model-independent token pattern: timing does not depend on content.
                let ids: Vec<i64> = (0..seqlen as i64)
                    .map(|i| (i * 7919 + 13) % vocab)
                    .collect();
                let tokens =
                    Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, seqlen]), &device);
                let runs = measure(self.repeats, seqlen as f64, || {
                    let logits = loaded.model.forward(tokens.clone());
                    // Reading one value forces the whole lazy graph on every backend.
                    let _ = logits.narrow(1, seqlen - 1, 1).sum().into_scalar();
                });
                Ok(figure("B1 forward", "tokens/s", runs, label))
            }
            BenchKind::Gemm { m, k, n } => {
                let a =
                    Tensor::<B, 2>::random([m, k], burn::tensor::Distribution::Default, &device);
                let b =
                    Tensor::<B, 2>::random([k, n], burn::tensor::Distribution::Default, &device);
                let flops = 2.0 * (m * k * n) as f64;
                let runs = measure(self.repeats, flops / 1e9, || {
                    let _ = a
                        .clone()
                        .matmul(b.clone())
                        .slice([0..1, 0..1])
                        .into_scalar();
                });
                Ok(figure(
                    &format!("B6 gemm {m}x{k}·{k}x{n} f32"),
                    "GFLOP/s",
                    runs,
                    label,
                ))
            }
        }
    }
}

/// Runs `wanda bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.repeats >= 3,
        "--repeats must be at least 3 (the median of fewer runs is noise)"
    );
    let fig = dispatch(
        args.device,
        BenchJob {
            what: args.what,
            repeats: args.repeats,
        },
    )?;
    if args.json {
        println!("{}", serde_json::to_string(&fig)?);
    } else {
        println!(
            "{}: median {:.1} {} (min {:.1}, max {:.1}, {} runs) on {}",
            fig.name,
            fig.median,
            fig.unit,
            fig.min,
            fig.max,
            fig.runs.len(),
            fig.device
        );
    }
    Ok(ExitCode::SUCCESS)
}
