//! `wanda bench`: the benchmark figures of `../shared/bench/README.md` — B1 (dense forward
//! tokens/s), B2 (dense perplexity: wall s, tokens/s, peak RSS), B3–B5 (one prune cell: prune
//! wall s, eval wall s, peak RSS, perplexity), B6 (GEMM GFLOP/s) and B7 (one decoder layer of a
//! real shape pruned, s: the pruning bookkeeping at 7B scale), B8 (document store MB/s), B9
//! (model load, MB/s of checkpoint), B10 (causal attention of one layer, GFLOP/s), B11 (a
//! compressed sparse linear, GFLOP/s) and B12 (decoding with a cache, tokens/s). Every figure is
//! the median of `--repeats` runs (at least 3), printed with min and max. B2–B5 run each repeat
//! as a fresh `wanda eval` / `wanda prune` process, so every run's peak RSS is its own.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;
use wanda::data::rows::DocumentStore;
use wanda::prune::Method;

use anyhow::Context;
use burn::prelude::*;
use serde::Serialize;

use super::backend::{dispatch, OnBackend};
use wanda::eval::speed::{self, pattern_ids};
use wanda::memory::device::{DeviceChoice, DeviceSpec};
use wanda::model::checkpoint::SynthShape;
use wanda::model::decoder::{Llama, SparseMode};
use wanda::model::kernels;
use wanda::model::{self, ModelRef};
use wanda::prune::layerwise::prune_model;
use wanda::prune::{MethodOptions, Pattern, Sparsity};

/// Arguments of `wanda bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Which figure to measure.
    #[command(subcommand)]
    pub what: BenchKind,
    /// Timed runs per figure (at least 3); one untimed warm-up run precedes them.
    #[arg(long, default_value_t = 5, global = true)]
    pub repeats: usize,
    /// Print one JSON object per figure, one per line.
    #[arg(long, global = true)]
    pub json: bool,
    /// `cpu`, `cpu-ndarray`, `cpu-flex`, `cuda`, `cuda:N` or `auto` (CUDA:0 where the driver finds a GPU, else the CPU); `-bf16` or `-f16` after `cpu-flex` or a CUDA device computes in bfloat16 or fp16 (`cuda:0-f16`).
    #[arg(long, default_value = "auto", global = true)]
    pub device: DeviceSpec,
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
        #[arg(long, default_value_t = 512, value_parser = super::at_least_one)]
        seqlen: usize,
    },
    /// B2: dense perplexity (wall s, tokens/s, peak RSS), one `wanda eval` process per run.
    Perplexity {
        /// A GGUF file, a Hugging Face folder, or a hub id.
        #[arg(long)]
        model: String,
        /// The evaluation text.
        #[arg(long)]
        text: PathBuf,
        /// Window length.
        #[arg(long, default_value_t = 512, value_parser = super::at_least_one)]
        seqlen: usize,
        /// Windows evaluated.
        #[arg(long, default_value_t = 64, value_parser = super::at_least_one)]
        windows: usize,
    },
    /// B3–B5: one prune cell (prune wall s, eval wall s, peak RSS, perplexity), one
    /// `wanda prune` process per run. B3: `--method wanda`; B4: `--method sparsegpt`; B5:
    /// `--method wanda --pattern 2:4`.
    Prune {
        /// A GGUF file, a Hugging Face folder, or a hub id.
        #[arg(long)]
        model: String,
        /// Calibration text.
        #[arg(long)]
        calib_text: PathBuf,
        /// Evaluation text.
        #[arg(long)]
        eval_text: PathBuf,
        #[command(flatten)]
        cell: PruneSettings,
        /// Calibration windows.
        #[arg(long, default_value_t = 32, value_parser = super::at_least_one)]
        nsamples: usize,
        /// Calibration window length (also the eval window length).
        #[arg(long, default_value_t = 512, value_parser = super::at_least_one)]
        seqlen: usize,
        /// Evaluation windows.
        #[arg(long, default_value_t = 64, value_parser = super::at_least_one)]
        windows: usize,
    },
    /// B7: seconds to prune one decoder layer of a real model's shape (random weights): the
    /// statistics of a short calibration input, scoring, selection and the weights' round trip —
    /// everything of a layer's pruning except a full-size calibration forward.
    PruneLayer {
        /// The published shape of the layer.
        #[arg(long, value_enum, default_value_t = SynthShape::Llama2_7b)]
        shape: SynthShape,
        #[command(flatten)]
        cell: PruneSettings,
        /// Calibration tokens run through the layer (one window).
        #[arg(long, default_value_t = 16, value_parser = super::at_least_one)]
        tokens: usize,
    },
    /// B8: building the document store of a JSON-lines file (C4's calibration shard is
    /// indexed this way once), MB/s of the file as stored (gzip'd).
    IndexDocuments {
        /// A `.json.gz`, `.jsonl` or Parquet file; the store is written beside it.
        #[arg(long)]
        file: PathBuf,
        /// The text column.
        #[arg(long, default_value = "text")]
        column: String,
    },
    /// B9: loading a model (checkpoint read, converted to the device's float type, laid out for
    /// the decoder, with its tokenizer), MB/s of checkpoint bytes; run it twice to time it from
    /// the page cache.
    Load {
        /// A GGUF file or a Hugging Face folder.
        #[arg(long)]
        model: String,
    },
    /// B6: GEMM `[m × k] · [k × n]` in the backend's float type, GFLOP/s.
    Gemm {
        /// Rows of the left matrix.
        #[arg(long, default_value_t = 512, value_parser = super::at_least_one)]
        m: usize,
        /// Shared dimension.
        #[arg(long, default_value_t = 576, value_parser = super::at_least_one)]
        k: usize,
        /// Columns of the right matrix.
        #[arg(long, default_value_t = 1536, value_parser = super::at_least_one)]
        n: usize,
    },
    /// B11: a pruned linear held compressed (a bitmask and the kept values, compressed-tensors'
    /// `sparse-bitmask` layout) multiplying `[m × k]` inputs, in dense-equivalent GFLOP/s
    /// (`2·m·k·n`, so it reads against B6's); the name gives the same product dense in the
    /// same run and the bytes of the two weights. The weight is random with the lowest
    /// `sparsity` of each output's magnitudes zeroed.
    Sparse {
        /// Rows of the inputs (1 for decoding a token).
        #[arg(long, default_value_t = 1, value_parser = super::at_least_one)]
        m: usize,
        /// Inputs of the linear.
        #[arg(long, default_value_t = 576, value_parser = super::at_least_one)]
        k: usize,
        /// Outputs of the linear.
        #[arg(long, default_value_t = 1536, value_parser = super::at_least_one)]
        n: usize,
        /// The fraction of each output's weights that are zero.
        #[arg(long, default_value_t = 0.5)]
        sparsity: f64,
    },
    /// B12: decoding at batch 1 with a KV cache, tokens/s of the decode steps after a prompt
    /// (fixed ids, each step fed the next, as greedy decoding runs); the name gives the
    /// prompt's prefill tokens/s, the bytes of weights a step reads (every parameter once) and
    /// the GB/s that makes at the median. Where `--sparse` holds linears compressed, the same
    /// decoding dense runs in the same rounds, alternately, and the name gives both.
    Decode {
        /// A GGUF file, a Hugging Face folder, or a hub id.
        #[arg(long)]
        model: String,
        /// Prompt tokens, run as one prefill.
        #[arg(long, default_value_t = 128, value_parser = super::at_least_one)]
        prompt: usize,
        /// Tokens decoded one at a time after the prompt.
        #[arg(long, default_value_t = 64, value_parser = super::at_least_one)]
        tokens: usize,
        /// Pruned linears held compressed: `auto` those with at least 30 % zeros on an AVX-512
        /// CPU, `on` every decoder linear, `off` none.
        #[arg(long, default_value_t = SparseMode::Auto)]
        sparse: SparseMode,
    },
    /// B10: causal attention `softmax(q·kᵀ/√head_dim)·v` of one layer, GFLOP/s (the causal
    /// half of `4·batch·heads·seq²·head_dim`), random q, k and v: the backend's own kernel where
    /// it has one (CUDA: CubeCL's flash kernel in fp16, tiled by `WANDA_FLASH_TILING`, or with
    /// `WANDA_CUDA_ATTENTION=cublas` cuBLAS and a softmax kernel in every type), else the
    /// decoder's blocked path (the default CPU backend's fused decoder attends in its own
    /// kernel, not measured here); the name gives the largest difference to the blocked path.
    Attention {
        /// Sequences at once.
        #[arg(long, default_value_t = 4, value_parser = super::at_least_one)]
        batch: usize,
        /// Attention heads.
        #[arg(long, default_value_t = 32, value_parser = super::at_least_one)]
        heads: usize,
        /// Positions per sequence.
        #[arg(long, default_value_t = 2048, value_parser = super::at_least_one)]
        seq: usize,
        /// Width of a head.
        #[arg(long, default_value_t = 64, value_parser = super::at_least_one)]
        head_dim: usize,
    },
}

/// The method and sparsity a pruning benchmark runs.
#[derive(Debug, Clone, clap::Args)]
pub struct PruneSettings {
    /// The pruning method.
    #[arg(long, value_enum, default_value_t = Method::Wanda)]
    method: Method,
    /// Unstructured ratio.
    #[arg(long, default_value_t = 0.5)]
    sparsity: f64,
    /// `unstructured` or `N:M`.
    #[arg(long, default_value = "unstructured")]
    pattern: String,
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
    runs.shrink_to_fit();
    Figure {
        name: name.to_string(),
        unit: unit.to_string(),
        median: speed::median(&sorted),
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

/// [`measure`] of work that may fail: the first error, where a run failed.
fn measure_fallible<E>(
    repeats: usize,
    work: f64,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<Vec<f64>, E> {
    let mut failure = None;
    let runs = measure(repeats, work, || {
        if let Err(e) = f() {
            failure.get_or_insert(e);
        }
    });
    failure.map_or(Ok(runs), Err)
}

pub struct BenchJob {
    what: BenchKind,
    repeats: usize,
}

impl OnBackend for BenchJob {
    type Output = Figure;

    fn run<B: Backend>(self, device: B::Device, choice: DeviceChoice) -> anyhow::Result<Figure> {
        match self.what {
            BenchKind::Forward { model, seqlen } => {
                let origin = ModelRef::parse(&model)?;
                let loaded = model::load::<B>(&origin, &device)
                    .with_context(|| format!("cannot load model `{origin}`"))?;
                let ids = pattern_ids(seqlen, loaded.config.vocab_size);
                let tokens =
                    Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, seqlen]), &device);
                let runs = measure(self.repeats, seqlen as f64, || {
                    let logits = loaded.model.forward(tokens.clone());
                    // Reading one value forces the whole lazy graph on every backend.
                    let _ = logits.narrow(1, seqlen - 1, 1).sum().into_scalar();
                });
                Ok(figure("B1 forward", "tokens/s", runs, choice.label()))
            }
            BenchKind::Perplexity { .. } | BenchKind::Prune { .. } => {
                unreachable!("process benchmarks are run by `child_figures`, not on a backend")
            }
            BenchKind::PruneLayer {
                shape,
                cell,
                tokens,
            } => prune_layer_figure::<B>(&device, choice, self.repeats, (shape, cell, tokens)),
            BenchKind::IndexDocuments { file, column } => {
                let bytes = std::fs::metadata(&file)
                    .with_context(|| format!("cannot read `{}`", file.display()))?
                    .len();
                let mut documents = 0;
                let runs = measure_fallible(self.repeats, bytes as f64 / 1e6, || {
                    DocumentStore::rebuild(&file, &column).map(|store| documents = store.len())
                })?;
                eprintln!("{documents} documents, {bytes} bytes");
                Ok(figure("index_documents", "MB/s", runs, choice.label()))
            }
            BenchKind::Load { model } => {
                let origin = ModelRef::parse(&model)?;
                let (_, bytes) = model::inspect(&origin)
                    .with_context(|| format!("cannot read model `{origin}`"))?;
                anyhow::ensure!(bytes > 0, "`{origin}` has no local checkpoint to load");
                let runs = measure_fallible(self.repeats, bytes as f64 / 1e6, || {
                    model::load::<B>(&origin, &device).map(drop)
                })?;
                Ok(figure("B9 load", "MB/s", runs, choice.label()))
            }
            BenchKind::Attention {
                batch,
                heads,
                seq,
                head_dim,
            } => {
                attention_figure::<B>(&device, choice, self.repeats, [batch, heads, seq, head_dim])
            }
            BenchKind::Gemm { m, k, n } => {
                gemm_figure::<B>(&device, choice, self.repeats, [m, k, n])
            }
            BenchKind::Sparse { m, k, n, sparsity } => {
                sparse_figure::<B>(&device, choice, self.repeats, [m, k, n], sparsity)
            }
            BenchKind::Decode {
                model,
                prompt,
                tokens,
                sparse,
            } => {
                let steps = [prompt, tokens];
                decode_figure::<B>(&device, choice, self.repeats, (&model, sparse), steps)
            }
        }
    }
}

/// B12 (see [`BenchKind::Decode`]) on backend `B`: [`speed::measure`], with the dense
/// decoding of the same rounds in the name where linears are held compressed.
fn decode_figure<B: Backend>(
    device: &B::Device,
    choice: DeviceChoice,
    repeats: usize,
    (model, sparse): (&str, SparseMode),
    [prompt, tokens]: [usize; 2],
) -> anyhow::Result<Figure> {
    let origin = ModelRef::parse(model)?;
    let loaded = model::load::<B>(&origin, device)
        .with_context(|| format!("cannot load model `{origin}`"))?;
    let context = loaded.config.max_position_embeddings;
    anyhow::ensure!(
        prompt + tokens <= context,
        "--prompt ({prompt}) plus --tokens ({tokens}) exceeds the model's context of {context}"
    );
    let budget = wanda::memory::log::spare_bytes();
    let report = speed::measure(
        &loaded.model,
        [prompt, tokens],
        repeats,
        (sparse, budget),
        device,
    );
    let figure = figure("B12 decode", "tokens/s", report.decode_runs, choice.label());
    let summary = &report.sparse;
    super::say_compressed("wanda bench decode", summary);
    let dense = match summary.compressed {
        0 => String::new(),
        _ => format!(
            "; {summary}; dense in the same rounds {:.1} tokens/s, prefill {:.1}",
            report.dense.1, report.dense.0
        ),
    };
    let bytes = report.weight_bytes as f64;
    Ok(Figure {
        name: format!(
            "B12 decode ({tokens} tokens after a {prompt}-token prompt at {:.1} tokens/s; \
             {:.3} GB of weights a token, {:.1} GB/s{dense})",
            report.prefill,
            bytes / 1e9,
            bytes * figure.median / 1e9
        ),
        ..figure
    })
}

/// B7 (see [`BenchKind::PruneLayer`]) on backend `B`: seconds to prune one layer of `shape`
/// by `cell`, calibrated on one window of `tokens` tokens.
fn prune_layer_figure<B: Backend>(
    device: &B::Device,
    choice: DeviceChoice,
    repeats: usize,
    (shape, cell, tokens): (SynthShape, PruneSettings, usize),
) -> anyhow::Result<Figure> {
    let PruneSettings {
        method,
        sparsity,
        pattern,
    } = cell;
    let pattern: Pattern = pattern.parse()?;
    let sparsity = Sparsity::from_pattern(pattern, sparsity)?;
    // One layer at full width; a small vocabulary keeps the embeddings out of the way.
    let config = shape.config(256, Some(1));
    let dense = Llama::<B>::init_random(&config, 0, device);
    let window: Vec<u32> = (0..tokens as u32).map(|t| (t * 37 + 11) % 256).collect();
    // Rates of one layer per second, turned back into seconds per layer.
    let rates = measure_fallible(repeats, 1.0, || {
        let mut model = dense.clone();
        prune_model(
            &mut model,
            method,
            &MethodOptions::default(),
            sparsity,
            std::slice::from_ref(&window),
            1,
            |_, _| {},
        )
        .map(drop)
    })?;
    let runs = rates.into_iter().map(|rate| 1.0 / rate).collect();
    Ok(figure(
        &format!(
            "B7 prune one {} layer ({method} {sparsity})",
            clap::ValueEnum::to_possible_value(&shape)
                .map(|v| v.get_name().to_string())
                .unwrap_or_default()
        ),
        "s",
        runs,
        choice.label(),
    ))
}

/// B6 (see [`BenchKind::Gemm`]) on backend `B`: GFLOP/s of the product the model's linears run.
fn gemm_figure<B: Backend>(
    device: &B::Device,
    choice: DeviceChoice,
    repeats: usize,
    [m, k, n]: [usize; 3],
) -> anyhow::Result<Figure> {
    let a = Tensor::<B, 2>::random([m, k], burn::tensor::Distribution::Default, device);
    let b = Tensor::<B, 2>::random([k, n], burn::tensor::Distribution::Default, device);
    let (runs, path) = product_runs(&a, &b, repeats);
    let dtype = format!("{:?}", a.dtype()).to_lowercase();
    Ok(figure(
        &format!("B6 gemm {m}x{k}·{k}x{n} {dtype} ({path})"),
        "GFLOP/s",
        runs,
        choice.label(),
    ))
}

/// B11 (see [`BenchKind::Sparse`]): the compressed product's dense-equivalent GFLOP/s, beside
/// the dense product of the same weight on backend `B` in the same run.
fn sparse_figure<B: Backend>(
    device: &B::Device,
    choice: DeviceChoice,
    repeats: usize,
    [m, k, n]: [usize; 3],
    sparsity: f64,
) -> anyhow::Result<Figure> {
    anyhow::ensure!(
        (0.0..1.0).contains(&sparsity),
        "--sparsity {sparsity}: use a fraction from 0 to below 1"
    );
    let random = |len: usize, seed: u64| -> Vec<f32> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    };
    let x = random(m * k, 1);
    let mut w = random(k * n, 2);
    // Per output (a column of `[k, n]`), its lowest magnitudes zeroed.
    let pruned = (k as f64 * sparsity) as usize;
    for o in 0..n {
        let mut order: Vec<usize> = (0..k).collect();
        order.sort_by(|&a, &b| w[a * n + o].abs().total_cmp(&w[b * n + o].abs()));
        order[..pruned].iter().for_each(|&i| w[i * n + o] = 0.0);
    }
    let sparse = kernels::sparse::SparseLinear::from_in_out(&w, k, n);
    let tensor = |values: Vec<f32>, shape: [usize; 2]| {
        Tensor::<B, 2>::from_data(TensorData::new(values, shape), device)
    };
    let (dense_runs, path) = product_runs(&tensor(x.clone(), [m, k]), &tensor(w, [k, n]), repeats);
    let mut out = vec![0.0f32; m * n];
    let flops = 2.0 * (m * k * n) as f64;
    let runs = measure(repeats, flops / 1e9, || {
        sparse.product(&x, m, &mut out, false)
    });
    let dense = speed::median(&dense_runs);
    let kernel = kernels::sparse::kernel_name();
    Ok(figure(
        &format!(
            "B11 sparse linear {m}x{k}·{k}x{n} at {sparsity} ({kernel}; {:.3}× dense f32's bytes; \
             dense {dense:.2} GFLOP/s by {path} in this run)",
            sparse.bytes() as f64 / (k * n * 4) as f64
        ),
        "GFLOP/s",
        runs,
        choice.label(),
    ))
}

/// GFLOP/s of `a · b` by the product the model's linears run (the fused one where it applies),
/// with the name of that product.
fn product_runs<B: Backend>(
    a: &Tensor<B, 2>,
    b: &Tensor<B, 2>,
    repeats: usize,
) -> (Vec<f64>, String) {
    let ([m, k], n) = (a.dims(), b.dims()[1]);
    let flops = 2.0 * (m * k * n) as f64;
    let kernels = wanda::model::kernels::kernels::<B>();
    let fused = kernels.matmul(a, b).is_some();
    let runs = measure(repeats, flops / 1e9, || {
        if fused {
            let _ = kernels.matmul(a, b);
        } else {
            let _ = a
                .clone()
                .matmul(b.clone())
                .slice([0..1, 0..1])
                .into_scalar();
        }
    });
    let path = match fused {
        true => format!(
            "fused linear, {}",
            wanda::model::kernels::product_kernel_name(m)
        ),
        false => "Burn matmul".to_string(),
    };
    (runs, path)
}

/// B10 (see [`BenchKind::Attention`]) on backend `B`.
fn attention_figure<B: Backend>(
    device: &B::Device,
    choice: DeviceChoice,
    repeats: usize,
    [batch, heads, seq, head_dim]: [usize; 4],
) -> anyhow::Result<Figure> {
    let dims = [batch, heads, seq, head_dim];
    let random = || Tensor::<B, 4>::random(dims, burn::tensor::Distribution::Default, device);
    let (q, k, v) = (random(), random(), random());
    let blocked = || {
        wanda::model::decoder::blocked_attention(
            q.clone(),
            k.clone(),
            v.clone(),
            Default::default(),
        )
    };
    let fast = kernels::kernels::<B>().causal_attention(&q, &k, &v);
    let (path, gap) = match &fast {
        Some(out) => {
            let gap = (out.clone().cast(burn::tensor::FloatDType::F32)
                - blocked().cast(burn::tensor::FloatDType::F32))
            .abs()
            .max()
            .into_scalar()
            .elem::<f64>();
            let path = match kernels::cuda_attention().unwrap_or_default() {
                kernels::CudaAttention::Flash => {
                    format!(
                        "flash, tiling {}",
                        kernels::flash_tiling().unwrap_or_default()
                    )
                }
                kernels::CudaAttention::Cublas => "cuBLAS and softmax kernel".to_string(),
            };
            (path, format!(", max |Δ| {gap:.2e} to the blocked path"))
        }
        None => ("blocked".to_string(), String::new()),
    };
    let flops = 2.0 * (batch * heads * seq * seq * head_dim) as f64;
    let runs = measure(repeats, flops / 1e9, || {
        let out = fast
            .as_ref()
            .and_then(|_| kernels::kernels::<B>().causal_attention(&q, &k, &v))
            .unwrap_or_else(blocked);
        // Reading one value waits for the kernels on every backend.
        let _ = out.slice([0..1, 0..1, 0..1, 0..1]).into_scalar();
    });
    let dtype = format!("{:?}", q.dtype()).to_lowercase();
    Ok(figure(
        &format!("B10 attention {batch}x{heads}x{seq}x{head_dim} {dtype} ({path}{gap})"),
        "GFLOP/s",
        runs,
        choice.label(),
    ))
}

/// Runs `wanda <args> --json` `repeats` times, each a fresh process, and reads the figures named
/// by `fields` (`(name, unit, JSON pointer, scale)`) from its output.
fn child_figures(
    args: &[String],
    repeats: usize,
    fields: &[(&str, &str, &str, f64)],
) -> anyhow::Result<Vec<Figure>> {
    let exe = std::env::current_exe().context("cannot find the wanda executable")?;
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); fields.len()];
    let mut device = String::new();
    for _ in 0..repeats {
        let out = Command::new(&exe)
            .args(args)
            .arg("--json")
            .output()
            .with_context(|| format!("cannot run `{}`", exe.display()))?;
        anyhow::ensure!(
            out.status.success(),
            "`wanda {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)
            .context("cannot read the JSON a benchmark run printed")?;
        device = json["device"].as_str().unwrap_or_default().to_string();
        for ((_, _, pointer, scale), values) in fields.iter().zip(&mut runs) {
            let value = json
                .pointer(pointer)
                .and_then(serde_json::Value::as_f64)
                .with_context(|| format!("a benchmark run printed no `{pointer}`"))?;
            values.push(value * scale);
        }
    }
    Ok(fields
        .iter()
        .zip(runs)
        .map(|((name, unit, _, _), values)| figure(name, unit, values, device.clone()))
        .collect())
}

const GIB: f64 = 1.0 / (1u64 << 30) as f64;

/// Runs `wanda bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.repeats >= 3,
        "--repeats must be at least 3 (the median of fewer runs is noise)"
    );
    let device = args.device.to_string();
    let path = |p: &PathBuf| p.display().to_string();
    let figures = match &args.what {
        BenchKind::Perplexity {
            model,
            text,
            seqlen,
            windows,
        } => child_figures(
            &child_args(
                "eval",
                &[
                    ("--model", model.clone()),
                    ("--text", path(text)),
                    ("--seqlen", seqlen.to_string()),
                    ("--windows", windows.to_string()),
                    ("--device", device),
                ],
            ),
            args.repeats,
            &[
                ("B2 perplexity", "", "/perplexity", 1.0),
                ("B2 eval wall", "s", "/eval_seconds", 1.0),
                ("B2 eval", "tokens/s", "/tokens_per_second", 1.0),
                ("B2 peak RSS", "GiB", "/peak_rss_bytes", GIB),
            ],
        )?,
        BenchKind::Prune {
            model,
            calib_text,
            eval_text,
            cell:
                PruneSettings {
                    method,
                    sparsity,
                    pattern,
                },
            nsamples,
            seqlen,
            windows,
        } => {
            let cell = format!("{method} {pattern} {sparsity}");
            let names = ["prune wall", "eval wall", "peak RSS", "perplexity"]
                .map(|n| format!("prune cell ({cell}) {n}"));
            child_figures(
                &child_args(
                    "prune",
                    &[
                        ("--model", model.clone()),
                        ("--calib-text", path(calib_text)),
                        ("--nsamples", nsamples.to_string()),
                        ("--seqlen", seqlen.to_string()),
                        ("--seed", "0".into()),
                        ("--eval-text", path(eval_text)),
                        ("--eval-seqlen", seqlen.to_string()),
                        ("--windows", windows.to_string()),
                        ("--method", method.to_string()),
                        ("--sparsity", sparsity.to_string()),
                        ("--pattern", pattern.clone()),
                        ("--device", device),
                    ],
                ),
                args.repeats,
                &[
                    (&names[0], "s", "/prune_seconds", 1.0),
                    (&names[1], "s", "/eval_seconds", 1.0),
                    (&names[2], "GiB", "/peak_rss_bytes", GIB),
                    (&names[3], "", "/perplexity/perplexity", 1.0),
                ],
            )?
        }
        _ => vec![dispatch(
            args.device,
            BenchJob {
                what: args.what.clone(),
                repeats: args.repeats,
            },
        )?],
    };
    print_figures(&figures, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// `wanda` arguments: `subcommand`, then each flag with its value.
fn child_args(subcommand: &str, flags: &[(&str, String)]) -> Vec<String> {
    std::iter::once(subcommand.to_string())
        .chain(
            flags
                .iter()
                .flat_map(|(flag, value)| [flag.to_string(), value.clone()]),
        )
        .collect()
}

/// Prints each figure: a JSON line, or its median, range and device.
fn print_figures(figures: &[Figure], json: bool) -> anyhow::Result<()> {
    for fig in figures {
        if json {
            println!("{}", serde_json::to_string(fig)?);
        } else {
            println!(
                "{}: median {:.4} {} (min {:.4}, max {:.4}, {} runs) on {}",
                fig.name,
                fig.median,
                fig.unit,
                fig.min,
                fig.max,
                fig.runs.len(),
                fig.device
            );
        }
    }
    Ok(())
}
