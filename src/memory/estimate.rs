//! The memory a pruning run will need, predicted from the model's shape and the run's settings
//! alone — pure arithmetic, no tensors.
//!
//! The run is split into its stages (`load`, `prune` with calibration, `eval`); each gets a
//! [`Breakdown`] of what is alive at its peak, and the run's peak is the largest. Every share
//! is one formula below, in bytes, with `f` the bytes of the device's precision (4 for f32,
//! 2 for bf16 and f16: weights and activations are stored in it) and f32 = 4 B for what every
//! precision computes in f32 (attention, norms, log-probabilities, statistics). Symbols: `P`
//! parameters, `L` layers, `H` width, `I` MLP width, `nh` query heads, `d` head width, `V`
//! vocabulary, `n` calibration samples, `s` their length, `b` samples per forward pass
//! (`min(batch, n)`), `e` the evaluation window.
//!
//! - weights: `P × f` (checkpoints of any type are converted to the device's precision);
//! - tokenisation, while a text is read: its bytes × [`TOKENIZE_BYTES_PER_TEXT_BYTE`];
//! - checkpoint pages, while loading: the memory-mapped checkpoint's pages count in the
//!   resident set while they are read, and each tensor's leave it once it is read; in memory,
//!   the largest tensor's pages and host copies ([`tensor_being_read`]); streamed, the shell's
//!   share of the pages (its parameters over all) and one layer's, as an upper bound;
//! - pruned copy: `L × linears × f` when the dense model must stay for other cells (a
//!   pipeline); `wanda prune` prunes in place;
//! - calibration activations: `(n + b) × s × H × f` — every sample's input of the current
//!   layer, plus one batch's output while the next layer's inputs replace them batch by batch;
//!   kept on the host (`activations_on_host`, a GPU only), `n × s × H × f` there and the batch
//!   in and out, `2·b × s × H × f`, on the device;
//! - attention scores: on the generic path (CUDA, burn-flex) one block of `r` query rows at a
//!   time, `b × nh × r × s × 4 × ATTENTION_SCORE_COPIES` with `r` from
//!   [`attention_block_rows`]; the fused CPU kernels, in memory and streamed, one block of
//!   [`ATTENTION_ROWS`] rows of a kv group's query heads per thread (see [`forward`]);
//! - layer intermediates: `b × s × (4·nh·d × 4 + 3·I × f)` (q, k and v repeated to all heads
//!   and the attention output, in f32; gate, up and their product; with experts `I` is the
//!   wider of an expert and a shared expert, and `3·H × f` more for the gathered rows);
//! - statistics: Wanda `b × s × I × 4` (the squared MLP input, the widest); SparseGPT the
//!   Hessians of the four shared inputs `(H² + (nh·d)² + H² + I²) × (4 + 8)` (f32 sums on the
//!   device, f64 on the host);
//! - pruning buffers: the layer's pruned linears held until all seven succeed, as the masks of
//!   their zeros `linears/L × 1` (SparseGPT's updated weights `linears/L × 4`; nothing on the
//!   default CPU backend, where the layer's own buffers move to the host and back), plus for the
//!   widest linear `in × out × 12` (its host copy, its device copy while the mask is applied,
//!   scores or sort keys) or `in² × 8 × 3` (SparseGPT: Hessian, its Cholesky factor and
//!   inverse in f64), or with DSnoT at least `in × out ×` [`DSNOT_BYTES_PER_WEIGHT`];
//! - OWL: its dense pass holds what the pruning pass holds plus one layer's pooled Wanda scores,
//!   `linears/L × 4` (on the host); magnitude with OWL or DSnoT calibrates like Wanda;
//! - DSnoT: one batch's widest input copied to the host for its moments, `b × s × I × 4`;
//! - eval logits: with the fused CPU kernels [`HEAD_ROWS`] rows of logits at a time (the head
//!   read in place), elsewhere `e × V × 4 × LOGIT_COPIES` and on burn-flex the LM head's
//!   operands `V × H × f × HEAD_OPERAND_COPIES`, with the attention and intermediates of one
//!   window;
//! - framework overhead: [`CPU_OVERHEAD_BYTES`] (measured: the resident set of `wanda`
//!   with a tokenizer loaded and no model) or [`CUDA_OVERHEAD_BYTES`] on a GPU, and for a
//!   vocabulary above SmolLM2's [`TOKENIZER_BYTES_PER_TOKEN`] per further entry;
//! - on a GPU of known size (`gpu_memory`), the unused parts of CubeCL's pool pages: every
//!   transient device tensor above is a slice of a page whose size depends on the tensor's
//!   and the GPU's ([`super::pool`]), pages are never given back, so each stage counts the
//!   pages it needs and those earlier stages reserved, minus its tensors. On a GPU the LM
//!   head's product reads the weight in place (no operand copies).
//!
//! With layer streaming only the embeddings, the layer in use and the activations are in
//! memory (on the device): the other layers stay on disk, in the checkpoint (mapped while
//! layers are read from it) or, pruned, in the layer store; evaluation adds the residual
//! streams of `eval_group` windows ([`PruneRun::eval_group`]). On the CPU device and host
//! are one pool.

use serde::Serialize;

use super::device::DeviceKind;
use super::device::Precision;
use super::pool::{PoolLadder, PoolPages};
use crate::eval::zeroshot::loglik::BATCH_TOKENS as ZEROSHOT_BATCH_TOKENS;
use crate::model::arch::{gib, Breakdown, ModelShape, Place};
use crate::model::decoder::attention_block_rows;
use crate::model::kernels::{ATTENTION_ROWS, HEAD_ROWS};
use crate::prune::device_select;
use crate::prune::dsnot::DsnotOptions;
use crate::prune::experts::ExpertAmount;
use crate::prune::profile::{OwlOptions, Profile};
use crate::prune::WeightUpdate;
use crate::prune::{Method, MethodOptions};

/// Live `[b, nh, s, s]` buffers at the attention's peak on the CPU backend.
pub const ATTENTION_SCORE_COPIES: u64 = 2;
/// Threads that may each hold a block of attention scores at once (a bound: machines this
/// tool runs on have fewer cores).
pub const ATTENTION_THREADS: u64 = 64;
/// Live `[e, V]` buffers at the evaluation's peak beyond the head's operands, fitted to
/// SmolLM2 probes at e = 256, 512 and 1024 (the log-softmax works row by row on them).
pub const LOGIT_COPIES: u64 = 1;
/// Copies of the `V × H` LM-head matrix alive while the logits are computed (the tied
/// embedding transposed, and the GEMM's packed operands), fitted to the same probes.
pub const HEAD_OPERAND_COPIES: u64 = 3;
/// Transient bytes per byte of text while the tokenizer encodes a whole file (normalised
/// copies with per-byte alignments, pre-token splits, the encoding's per-token fields),
/// measured with the `tokenizers` crate on WikiText-2.
pub const TOKENIZE_BYTES_PER_TEXT_BYTE: u64 = 100;
/// Resident set of the process before any model is loaded (binary, tokenizer, thread pools,
/// allocator arenas), measured on the CPU backend with SmolLM2's tokenizer
/// ([`OVERHEAD_VOCAB`] tokens, 34 MB of it).
pub const CPU_OVERHEAD_BYTES: u64 = 64 << 20;
/// The vocabulary of the tokenizer [`CPU_OVERHEAD_BYTES`] was measured with (SmolLM2's).
pub const OVERHEAD_VOCAB: u64 = 49_152;
/// Resident bytes a loaded tokenizer takes per vocabulary entry beyond [`OVERHEAD_VOCAB`]
/// (its vocabulary both ways, its merges, its added tokens): Gemma 3's 262,144 entries and
/// 514,906 merges take 0.30 GB against SmolLM2's 34 MB, `(300 − 34) MB / 212,992`.
pub const TOKENIZER_BYTES_PER_TOKEN: u64 = 1_250;
/// CUDA context and kernel modules on a GPU.
pub const CUDA_OVERHEAD_BYTES: u64 = 512 << 20;
/// cuBLAS's handle, workspace and kernel modules beside CubeCL's pool: the device peaks of the
/// same runs rose by 68–70 MiB (f32) and up to 164 MiB (fp16) when the products moved to cuBLAS
/// (results/gpu-h200-2026-11-27-cublas/).
pub const CUBLAS_BYTES: u64 = 96 << 20;

/// The settings of a run that memory depends on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PruneRun {
    /// The method; None for a run that only evaluates.
    pub method: Option<Method>,
    /// Calibration samples.
    pub nsamples: usize,
    /// Calibration sample length.
    pub seqlen: usize,
    /// Samples per forward pass.
    pub batch: usize,
    /// Evaluation window, when the run evaluates.
    pub eval_seqlen: Option<usize>,
    /// Whether the dense model stays beside the pruned copy.
    pub keeps_dense_copy: bool,
    /// Whether only the current layer's weights are on the device.
    pub streaming: bool,
    /// Bytes of the checkpoint file(s), memory-mapped while loading.
    pub checkpoint_bytes: u64,
    /// Bytes of the calibration text file.
    pub calibration_text_bytes: u64,
    /// Bytes of the evaluation text file.
    pub eval_text_bytes: u64,
    /// The compute device.
    pub device: DeviceKind,
    /// The precision weights and activations are stored in.
    #[serde(skip_serializing_if = "Precision::is_f32")]
    pub precision: Precision,
    /// The calibration activations wait in host memory between layers, one batch on the
    /// device at a time (a GPU only; the gate's choice).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub activations_on_host: bool,
    /// The GPU's memory, whose size sets CubeCL's pool pages ([`super::pool`]); None leaves
    /// the pool out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_memory: Option<u64>,
    /// OWL's outlier pass runs before pruning (`profile: owl`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub owl: bool,
    /// DSnoT refines the masks.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dsnot: bool,
    /// The weights magnitude or Wanda keeps are updated (a Hessian per input, as SparseGPT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_update: Option<WeightUpdate>,
    /// `eval` scores zero-shot tasks.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub zeroshot: bool,
    /// Windows a streamed evaluation runs through each layer together, holding their residual
    /// streams: each layer is read once per group. Requested as the evaluation's windows, so
    /// that every layer is read once; the gate halves it when the streams do not fit.
    pub eval_group: usize,
    /// The experts a prune stage removes from every layer with experts, where one does: the
    /// stages after it hold a smaller model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_removal: Option<ExpertAmount>,
}

impl PruneRun {
    /// The method options this run prunes with as far as memory sees them: OWL and DSnoT at
    /// their defaults when the run uses them (what a probe prunes with).
    pub fn method_options(&self) -> MethodOptions {
        MethodOptions {
            profile: if self.owl {
                Profile::Owl(OwlOptions::default())
            } else {
                Profile::Uniform
            },
            dsnot: self.dsnot.then(DsnotOptions::default),
            weight_update: self.weight_update,
            ..MethodOptions::default()
        }
    }

    /// The shape of the model the stages after pruning hold: `shape` with fewer experts
    /// where the run removes some, else `shape` itself.
    pub fn pruned_shape(&self, shape: &ModelShape) -> ModelShape {
        match self.expert_removal {
            Some(amount) if shape.experts > 0 => {
                let removed = amount.removed_of(shape.experts).unwrap_or(0);
                shape.with_expert_count(shape.experts.saturating_sub(removed))
            }
            _ => shape.clone(),
        }
    }

    /// Whether the run draws calibration samples.
    pub fn calibrates(&self) -> bool {
        self.method
            .is_some_and(|m| self.method_options().needs_calibration(m))
    }
}

/// One stage's breakdown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageEstimate {
    /// `load`, `prune` or `eval`.
    pub stage: &'static str,
    /// What is alive at the stage's peak.
    pub breakdown: Breakdown,
}

impl StageEstimate {
    /// The bytes of each transient device allocation alive at the stage's peak, in the order
    /// its shares list them (what a GPU's pool places in pages).
    pub fn device_allocations(&self) -> Vec<u64> {
        self.breakdown
            .items
            .iter()
            .filter(|i| i.place == Place::Device)
            .flat_map(|i| i.allocations.iter())
            .flat_map(|&(count, each)| std::iter::repeat_n(each, count as usize))
            .filter(|&bytes| bytes > 0)
            .collect()
    }
}

/// A run's estimate: per stage, and the peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// In run order.
    pub stages: Vec<StageEstimate>,
}

impl Estimate {
    /// The stage with the most memory at `place`, and that amount; on the CPU device and
    /// host are one pool, so ask for [`Place::Device`].
    pub fn peak(&self, place: Place) -> (&'static str, u64) {
        self.stages
            .iter()
            .map(|s| (s.stage, s.breakdown.total(place)))
            .max_by_key(|&(_, bytes)| bytes)
            .unwrap_or(("none", 0))
    }
}

const F32: u64 = 4;
/// DSnoT's bytes per weight of the widest linear: initial and Wanda scores (8), the weight and
/// both scores transposed per output channel (12), four masks (4), the initial selection's
/// transposed scores and order (12).
pub const DSNOT_BYTES_PER_WEIGHT: u64 = 36;

/// Predicts the memory of `run` on a model of `shape`.
pub fn estimate_prune(shape: &ModelShape, run: &PruneRun) -> Estimate {
    let m = Dims::new(shape);
    // Device placement: on the CPU everything is device memory (one pool).
    let host = match run.device {
        DeviceKind::Cpu | DeviceKind::CpuFlex => Place::Device,
        DeviceKind::Cuda => Place::Host,
    };
    let mut stages = Vec::new();

    let mut load = Breakdown::default();
    overhead(&mut load, run.device, host, &m);
    weights(&mut load, shape, run, &m, host, None);
    if run.streaming {
        // Streamed, the shell's share of the checkpoint pages (an upper bound: they are
        // released tensor by tensor), and one layer's in every stage (`weights`).
        let shell = shape.embedding_and_head_parameters();
        let pages = (u128::from(run.checkpoint_bytes) * u128::from(shell)
            / u128::from(shape.parameters.max(1))) as u64;
        load.push(
            "checkpoint pages (the embeddings')",
            pages,
            host,
            format!(
                "{} B of checkpoint files × {shell} / {} params",
                run.checkpoint_bytes, shape.parameters
            ),
        );
    } else {
        tensor_being_read(&mut load, shape, run, host);
    }
    stages.push(StageEstimate {
        stage: "load",
        breakdown: load,
    });

    if let Some(method) = run.method {
        if run.calibrates() {
            stages.push(tokenise(
                "calibration text",
                shape,
                run,
                &m,
                host,
                run.calibration_text_bytes,
            ));
        }
        let mut prune = Breakdown::default();
        overhead(&mut prune, run.device, host, &m);
        // The copy is whole until its layers are pruned.
        weights(&mut prune, shape, run, &m, host, Some(shape));
        if run.calibrates() {
            calibration(&mut prune, run, &m, host, method);
        }
        pruning_buffers(&mut prune, run, &m, host, method);
        stages.push(StageEstimate {
            stage: "prune",
            breakdown: prune,
        });
    }

    if let Some(e) = run.eval_seqlen {
        stages.push(tokenise(
            "eval text",
            shape,
            run,
            &m,
            host,
            run.eval_text_bytes,
        ));
        stages.push(eval_stage(shape, run, &m, host, e as u64));
    }
    if run.zeroshot {
        // One batch of requests, padded to `BATCH_TOKENS` at most, through the decoder (as
        // one sequence: the worst case of its attention); the head sees continuation rows a
        // block at a time.
        let t = ZEROSHOT_BATCH_TOKENS as u64;
        let mut zeroshot = Breakdown::default();
        overhead(&mut zeroshot, run.device, host, &m);
        let after = run.pruned_shape(shape);
        weights(
            &mut zeroshot,
            shape,
            run,
            &m,
            host,
            run.method.map(|_| &after),
        );
        zeroshot.push_allocations(
            "zero-shot logits (a block of rows)",
            1,
            HEAD_ROWS as u64 * m.v * F32,
            Place::Device,
            format!("{HEAD_ROWS} rows × {} × 4 B", m.v),
        );
        forward(&mut zeroshot, run, &m, 1, t);
        stages.push(StageEstimate {
            stage: "eval (zero-shot)",
            breakdown: zeroshot,
        });
    }
    if let (DeviceKind::Cuda, Some(memory)) = (run.device, run.gpu_memory) {
        pool_pages(&mut stages, memory);
    }
    Estimate { stages }
}

/// The calibration's shares of the prune stage: the activations (on the device or the host),
/// one forward pass, the method's statistics, and OWL's and DSnoT's extras.
fn calibration(prune: &mut Breakdown, run: &PruneRun, m: &Dims, host: Place, method: Method) {
    let (n, s) = (run.nsamples as u64, run.seqlen as u64);
    let b = run.batch.clamp(1, run.nsamples.max(1)) as u64;
    let f = run.precision.bytes();
    if run.activations_on_host && run.device == DeviceKind::Cuda {
        prune.push(
            "calibration activations",
            n * s * m.h * f,
            host,
            format!("{n} samples × {s} × {} × {f} B", m.h),
        );
        prune.push_allocations(
            "calibration batch in and out",
            2,
            b * s * m.h * f,
            Place::Device,
            format!("2 × {b} samples × {s} × {} × {f} B", m.h),
        );
    } else {
        // Whole batches, the one in flight, and a last partial batch.
        let batch = s * m.h * f;
        prune.push_mixed(
            "calibration activations",
            &[(n / b + 1, b * batch), (1, (n % b) * batch)],
            Place::Device,
            format!("({n} + {b}) samples × {s} × {} × {f} B", m.h),
        );
    }
    forward(prune, run, m, b, s);
    // Wanda's norms beside a weight update's Hessians are summed from squared inputs too.
    let hessians = uses_hessians(run, method);
    if !hessians || method == Method::Wanda {
        prune.push_allocations(
            if hessians {
                "norms' statistics"
            } else {
                "statistics"
            },
            1,
            b * s * m.mlp_width() * F32,
            Place::Device,
            format!("{b} × {s} × {} × 4 B (squared MLP input)", m.mlp_width()),
        );
    }
    if hessians {
        // With experts, the router's input and each expert's two.
        let (squares, formula) = match m.experts {
            0 => (
                2 * m.h * m.h + m.q * m.q + m.i * m.i,
                format!("2·{}² + {}² + {}²", m.h, m.q, m.i),
            ),
            e => (
                // A dense layer before those with experts (where it is the larger).
                (2 * m.h * m.h + m.q * m.q + e * (m.h * m.h + m.i * m.i) + m.shared * m.shared)
                    .max(2 * m.h * m.h + m.q * m.q + m.dense * m.dense),
                // A shared expert's hidden input too, where there is one.
                format!("2·{}² + {}² + {e}·({}² + {}²)", m.h, m.q, m.h, m.i)
                    + &match m.shared {
                        0 => String::new(),
                        s => format!(" + {s}²"),
                    },
            ),
        };
        prune.push(
            "statistics",
            squares * (F32 + 8),
            Place::Device,
            format!("({formula}) × (4 + 8) B (Hessians, f32 sums + f64 host)"),
        )
    }
    if run.owl {
        // The dense pass holds what the pruning pass holds, plus the pooled scores.
        prune.push(
            "OWL pooled scores",
            m.linears_per_layer * F32,
            host,
            format!(
                "{} × 4 B (one layer's Wanda scores, in the dense pass)",
                m.linears_per_layer
            ),
        );
    }
    if run.dsnot {
        prune.push(
            "DSnoT activations on the host",
            b * s * m.mlp_width() * F32,
            host,
            format!(
                "{b} × {s} × {} × 4 B (one batch's MLP input, for its moments)",
                m.mlp_width()
            ),
        );
    }
}

/// Whether the run's pruning solves with a Hessian per input: SparseGPT, or a weight update.
fn uses_hessians(run: &PruneRun, method: Method) -> bool {
    method == Method::Sparsegpt || run.weight_update.is_some()
}

/// The prune stage's work buffers on the host: the layer's pruned weights and the method's
/// scores, masks or Hessian factors for its widest linear.
fn pruning_buffers(prune: &mut Breakdown, run: &PruneRun, m: &Dims, host: Place, method: Method) {
    let widest = m.widest_linear();
    let (method_bytes, method_formula) = if uses_hessians(run, method) {
        let cols = m.h.max(m.mlp_width()).max(m.q);
        let hessian = cols * cols * 8 * 3;
        let formula = format!("{cols}² × 8 B × 3 (Hessian, Cholesky, inverse in f64)");
        match method {
            // The update's mask and its f32 scores beside the update.
            Method::Wanda | Method::Magnitude => (
                hessian + widest * 5,
                format!("{formula} + {widest} × 5 B (scores and mask)"),
            ),
            _ => (hessian, formula),
        }
    } else {
        (
            widest * 12,
            format!(
                "{widest} × 12 B (the widest linear's host copy, its device copy while the \
                 mask is applied, scores or sort keys)"
            ),
        )
    };
    let (method_bytes, method_formula) = if run.dsnot {
        (
            method_bytes.max(widest * DSNOT_BYTES_PER_WEIGHT),
            format!(
                "max({method_formula}, {widest} × {DSNOT_BYTES_PER_WEIGHT} B (DSnoT: two \
                 score matrices, three transposed copies, four masks, the initial sort))"
            ),
        )
    } else {
        (method_bytes, method_formula)
    };
    // On a GPU, Wanda's and magnitude's selection runs on the device (prune::device_select's
    // bisection): one piece's f32 scores, counts and comparison at a time, and the layer's masks
    // until its linears are stored back. CUDA's selection kernel needs only the masks, so this
    // is its bound too (and N:M's, which only that kernel selects on the device).
    if run.device == DeviceKind::Cuda
        && matches!(method, Method::Wanda | Method::Magnitude)
        && !run.dsnot
        && run.weight_update.is_none()
    {
        // Wanda selects the linears that read hidden-width inputs (all but the MLP's down
        // projection) together while they fit a piece.
        let hidden_inputs = m.linears_per_layer.saturating_sub(m.h * m.i);
        let piece = widest.max(hidden_inputs).min(device_select::PIECE as u64);
        // One mask per linear: q and o, the MLP's, and k and v together.
        let mlp = m.mlp_linears;
        let kv = m
            .linears_per_layer
            .saturating_sub(2 * m.h * m.q + mlp * m.h * m.i);
        prune.push_mixed(
            "device selection",
            &[(3, piece * F32), (2, m.h * m.q), (mlp, m.h * m.i), (1, kv)],
            Place::Device,
            format!(
                "3 × {piece} × 4 B (a piece's scores, counts and comparison) + {} × 1 B (the \
                 layer's masks)",
                m.linears_per_layer
            ),
        );
    }
    // On the default CPU backend a layer's weights move to the host and back (the model gives
    // them up while its layer is pruned, prune::layerwise); a kept dense model's are copied, and
    // the pruned copy counts them. Elsewhere a zeroing method sends each linear back as the mask
    // of its zeros (1 B a weight); SparseGPT's update sends the weights (4 B).
    let (bytes, formula) = if run.device == DeviceKind::Cpu {
        (
            method_bytes,
            format!("{method_formula}; the layer's weights move to the host and back"),
        )
    } else {
        let (held, what) = if run.method_options().only_zeroes(method) {
            (1, "masks")
        } else {
            (F32, "pruned weights")
        };
        (
            m.linears_per_layer * held + method_bytes,
            format!(
                "{} × {held} B (one layer's {what}) + {method_formula}",
                m.linears_per_layer
            ),
        )
    };
    prune.push("pruning buffers", bytes, host, formula);
}

/// Whether the fused CPU kernels run the model: on the default CPU backend, for a model
/// without experts (a layer with experts runs Burn's generic ops, as on other backends).
fn fused_kernels(run: &PruneRun, m: &Dims) -> bool {
    run.device == DeviceKind::Cpu && m.experts == 0
}

/// The perplexity stage over windows of `e` tokens.
fn eval_stage(shape: &ModelShape, run: &PruneRun, m: &Dims, host: Place, e: u64) -> StageEstimate {
    let mut eval = Breakdown::default();
    overhead(&mut eval, run.device, host, m);
    let after = run.pruned_shape(shape);
    weights(&mut eval, shape, run, m, host, run.method.map(|_| &after));
    if fused_kernels(run, m) {
        // The fused kernels read the head in place and hold at most HEAD_ROWS rows' worth
        // of logits, in memory and streamed.
        let rows = (HEAD_ROWS as u64).min(e);
        eval.push(
            "eval logits (a block of rows)",
            rows * m.v * F32,
            Place::Device,
            format!("{rows} rows × {} × 4 B", m.v),
        );
    } else {
        // On a GPU the head's product reads the weight in place (the H200 run's pool
        // reserved no page for a copy of a 768 MiB head); burn-flex copies its operands.
        if run.device == DeviceKind::CpuFlex {
            let f = run.precision.bytes();
            eval.push(
                "LM head operands",
                m.v * m.h * f * HEAD_OPERAND_COPIES,
                Place::Device,
                format!("{} × {} × {f} B × {HEAD_OPERAND_COPIES}", m.v, m.h),
            );
        }
        eval.push_allocations(
            "eval logits",
            LOGIT_COPIES,
            e * m.v * F32,
            Place::Device,
            format!("{e} × {} × 4 B × {LOGIT_COPIES}", m.v),
        );
    }
    forward(&mut eval, run, m, 1, e);
    if run.streaming {
        let group = run.eval_group.max(1) as u64;
        let f = run.precision.bytes();
        eval.push_allocations(
            "residual streams",
            group,
            e * m.h * f,
            Place::Device,
            format!("{group} windows × {e} × {} × {f} B", m.h),
        );
    }
    StageEstimate {
        stage: "eval",
        breakdown: eval,
    }
}

/// Adds to each stage the unused parts of the CUDA pool's pages ([`super::pool`]): the pages
/// its device allocations need, and every page an earlier stage reserved (pools keep them).
fn pool_pages(stages: &mut [StageEstimate], memory: u64) {
    let ladder = PoolLadder::for_gpu(memory);
    let mut reserved = PoolPages::default();
    for stage in stages {
        let allocations = stage.device_allocations();
        let live: u64 = allocations.iter().sum();
        if live == 0 && reserved.pages.iter().all(|&n| n == 0) {
            continue;
        }
        let (pages, formula) = match ladder.pages(&allocations) {
            Ok(pages) => {
                reserved = reserved.max(&pages);
                let bytes = ladder.bytes(&reserved);
                (
                    bytes.saturating_sub(live),
                    format!(
                        "{} of pages reserved (a {} GPU's pool) − {} of tensors in them",
                        gib(bytes),
                        gib(memory),
                        gib(live)
                    ),
                )
            }
            // CubeCL cannot place it: no page is that large. The estimate says so by the
            // size it would need.
            Err(bytes) => (
                bytes,
                format!(
                    "one tensor of {} exceeds the largest page of a {} GPU ({})",
                    gib(bytes),
                    gib(memory),
                    gib(memory / 4)
                ),
            ),
        };
        stage.breakdown.push(
            "memory pool pages (unused parts)",
            pages,
            Place::Device,
            formula,
        );
    }
}

/// The stage that tokenises a text file of `text_bytes`.
fn tokenise(
    stage: &'static str,
    shape: &ModelShape,
    run: &PruneRun,
    m: &Dims,
    host: Place,
    text_bytes: u64,
) -> StageEstimate {
    let mut b = Breakdown::default();
    overhead(&mut b, run.device, host, m);
    weights(&mut b, shape, run, m, host, None);
    b.push(
        "tokenisation",
        text_bytes * TOKENIZE_BYTES_PER_TEXT_BYTE,
        host,
        format!("{text_bytes} B of text × {TOKENIZE_BYTES_PER_TEXT_BYTE}"),
    );
    StageEstimate {
        stage,
        breakdown: b,
    }
}

/// The dimensions the formulas use, as u64.
struct Dims {
    h: u64,
    i: u64,
    /// `nh · d`.
    q: u64,
    heads: u64,
    /// Query heads per kv head (a grouped-query attention block stacks them).
    group: u64,
    v: u64,
    layers: u64,
    linears_per_layer: u64,
    in_out: [(u64, u64); 3],
    /// `I`-wide buffers of the MLP: gate, up and their product (up and its activation without
    /// a gate).
    mlp_buffers: u64,
    /// Linears of the MLP: gate, up and down (up and down without a gate).
    mlp_linears: u64,
    /// Attention and MLP side by side ([`ModelShape::parallel_residual`]).
    parallel_residual: bool,
    /// Experts per layer ([`ModelShape::experts`]; 0 for one MLP).
    experts: u64,
    /// A shared expert's width ([`ModelShape::shared_expert_size`]; 0 without one).
    shared: u64,
    /// The MLP width of the first layers where they have a dense MLP before those with
    /// experts ([`ModelShape::dense_layers`]); 0 where all layers are alike.
    dense: u64,
}

impl Dims {
    fn new(shape: &ModelShape) -> Self {
        let h = shape.hidden_size as u64;
        let i = shape.intermediate_size as u64;
        let q = (shape.num_attention_heads * shape.head_dim) as u64;
        let dense = match shape.dense_layers {
            0 => 0,
            _ => shape.dense_intermediate_size as u64,
        };
        // The widest MLP linears: an expert's, or a dense layer's.
        let wide = i.max(dense);
        Self {
            h,
            i,
            q,
            heads: shape.num_attention_heads as u64,
            group: (shape.num_attention_heads / shape.num_key_value_heads.max(1)).max(1) as u64,
            v: shape.vocab_size as u64,
            layers: shape.num_hidden_layers as u64,
            linears_per_layer: shape.linear_parameters_per_layer(),
            in_out: [(h, q), (h, wide), (wide, h)],
            mlp_buffers: if shape.gated_mlp { 3 } else { 2 },
            parallel_residual: shape.parallel_residual,
            mlp_linears: if shape.gated_mlp { 3 } else { 2 },
            experts: shape.experts as u64,
            shared: shape.shared_expert_size as u64,
            dense,
        }
    }

    /// The widest MLP input of any layer: an expert's (or the one MLP's), or a dense layer's.
    fn mlp_width(&self) -> u64 {
        self.i.max(self.dense)
    }

    /// Weights of the largest linear.
    fn widest_linear(&self) -> u64 {
        self.in_out.iter().map(|(a, b)| a * b).max().unwrap_or(0)
    }
}

fn overhead(b: &mut Breakdown, device: DeviceKind, host: Place, m: &Dims) {
    b.push(
        "framework overhead",
        CPU_OVERHEAD_BYTES,
        host,
        "measured constant (CPU process)".into(),
    );
    let extra_vocab = m.v.saturating_sub(OVERHEAD_VOCAB);
    if extra_vocab > 0 {
        b.push(
            "tokenizer (beyond the overhead's)",
            extra_vocab * TOKENIZER_BYTES_PER_TOKEN,
            host,
            format!(
                "({} − {OVERHEAD_VOCAB}) tokens × {TOKENIZER_BYTES_PER_TOKEN} B",
                m.v
            ),
        );
    }
    if device == DeviceKind::Cuda {
        b.push(
            "CUDA context",
            CUDA_OVERHEAD_BYTES,
            Place::Device,
            "constant".into(),
        );
        b.push(
            "cuBLAS workspace and kernels",
            CUBLAS_BYTES,
            Place::Device,
            "constant".into(),
        );
    }
}

/// In memory, each tensor's mapped pages leave the resident set once it is read. Beyond the
/// weights (which count each tensor's device copy), the largest tensor holds, while it is
/// read, its pages (`c` checkpoint bytes a parameter) and its host copy in f32 less the device
/// copy not yet made, `c + 4 − f`; then its f32 copy beside the conversion to `f`, or the host
/// copy beside the device copy, at most 4: `largest × max(c + 4 − f, 4)`. The largest is the
/// embedding matrix or the head (`V·H`), a stacked `gate_up_proj` (`2·I·H`) or q/k/v stacked
/// (`(nh + 2·kv)·d·H`).
fn tensor_being_read(b: &mut Breakdown, shape: &ModelShape, run: &PruneRun, host: Place) {
    let (h, i, v) = (
        shape.hidden_size as u64,
        shape.intermediate_size as u64,
        shape.vocab_size as u64,
    );
    let qkv = ((shape.num_attention_heads + 2 * shape.num_key_value_heads) * shape.head_dim) as u64;
    let largest = (v * h).max(2 * i * h).max(qkv * h);
    // Bytes a parameter, to the nearest (a file's header and metadata are no bytes of it).
    let params = shape.parameters.max(1);
    let c = (run.checkpoint_bytes + params / 2) / params;
    let f = run.precision.bytes();
    let per = (c + 4).saturating_sub(f).max(4);
    b.push(
        "the tensor being read",
        largest * per,
        host,
        format!("{largest} params × max({c} + 4 − {f}, 4) B"),
    );
}

/// The mapped checkpoint pages of the layer being read: dropped from the resident set once
/// it is read.
fn layer_pages(b: &mut Breakdown, run: &PruneRun, m: &Dims, host: Place) {
    let layers = m.layers.max(1);
    b.push(
        "checkpoint pages (one layer's)",
        run.checkpoint_bytes / layers,
        host,
        format!(
            "{} B of checkpoint files / {layers} layers",
            run.checkpoint_bytes
        ),
    );
}

/// The weights, where they live, and the pruned copy when one is kept (`pruned`).
fn weights(
    b: &mut Breakdown,
    shape: &ModelShape,
    run: &PruneRun,
    m: &Dims,
    host: Place,
    pruned: Option<&ModelShape>,
) {
    let f = run.precision.bytes();
    if run.streaming {
        // The shell (embeddings, LM head, final norm) and the layer in use; the other layers
        // stay in the checkpoint (dense) or the layer store on disk (pruned), and the
        // checkpoint stays mapped while layers are read from it.
        let embeddings = shape.embedding_and_head_parameters();
        b.push(
            "weights (embeddings + one layer)",
            (embeddings + m.linears_per_layer) * f,
            Place::Device,
            format!("({embeddings} + {}) params × {f} B", m.linears_per_layer),
        );
        layer_pages(b, run, m, host);
        return;
    }
    // Pruned in place, the model is the pruned one (smaller where experts went).
    let held = match pruned {
        Some(after) if !run.keeps_dense_copy => after,
        _ => shape,
    };
    b.push(
        "weights",
        held.parameters * f,
        Place::Device,
        format!("{} params × {f} B", held.parameters),
    );
    if let (Some(after), true) = (pruned, run.keeps_dense_copy) {
        let per_layer = after.linear_parameters_per_layer();
        b.push(
            "pruned copy",
            m.layers * per_layer * f,
            host,
            format!("{} layers × {per_layer} params × {f} B", m.layers),
        );
    }
}

/// Attention scores and layer intermediates of one forward pass of `b` samples of length `s`.
///
/// The generic path (CUDA, burn-flex) holds the scores of one block of query rows
/// ([`attention_block_rows`]). The default CPU backend counts the scores as the fused kernels
/// hold them, in memory and streamed: one block of [`ATTENTION_ROWS`] query rows of every
/// query head of a kv group per thread (measured streamed prune peaks on SmolLM2 at 32 × 256,
/// 512 and 1024: 0.31, 0.37 and 0.58 GiB against 0.33, 0.38 and 0.56 estimated; in memory
/// `results/estimator-accuracy.md`).
fn forward(out: &mut Breakdown, run: &PruneRun, m: &Dims, b: u64, s: u64) {
    if !fused_kernels(run, m) {
        let rows = (attention_block_rows(b as usize, m.heads as usize, s as usize) as u64).min(s);
        out.push_allocations(
            "attention score blocks",
            ATTENTION_SCORE_COPIES,
            b * m.heads * rows * s * F32,
            Place::Device,
            format!(
                "{b} × {} heads × {rows} rows × {s} × 4 B × {ATTENTION_SCORE_COPIES}",
                m.heads
            ),
        );
    } else {
        // The fused kernels, in memory and streamed.
        let rows = ATTENTION_ROWS as u64;
        out.push(
            "attention score blocks",
            ATTENTION_THREADS * m.group * rows * s * F32,
            Place::Device,
            format!(
                "{ATTENTION_THREADS} threads × {} heads × {rows} rows × {s} × 4 B",
                m.group
            ),
        );
    }
    let f = run.precision.bytes();
    let mut parts = vec![(4, b * s * m.q * F32)];
    let mut held = String::new();
    // A parallel layer holds the attention's output while the MLP runs.
    if m.parallel_residual {
        parts.push((1, b * s * m.h * F32));
        held = format!(" + {} × 4 B", m.h);
    }
    // A shared expert runs over every token after the routed ones have freed their buffers,
    // so the MLP's buffers are as wide as the wider of the two.
    let width = m.mlp_width().max(m.shared);
    parts.push((m.mlp_buffers, b * s * width * f));
    // Experts: at most every token goes to one expert, whose gathered inputs and weighted
    // outputs are held beside the block's output.
    if m.experts > 0 {
        parts.push((3, b * s * m.h * f));
        held = format!("{held} + 3·{} × {f} B", m.h);
    }
    out.push_mixed(
        "layer intermediates",
        &parts,
        Place::Device,
        format!(
            "{b} × {s} × (4·{} × 4 B{held} + {}·{width} × {f} B)",
            m.q, m.mlp_buffers
        ),
    );
}

/// The breakdown as aligned text lines: name (marked `[host]` when not on the device), GiB,
/// formula.
pub fn render(breakdown: &Breakdown) -> String {
    let mut out = String::new();
    for item in &breakdown.items {
        let name = match item.place {
            Place::Device => item.name.clone(),
            Place::Host => format!("{} [host]", item.name),
        };
        out.push_str(&format!(
            "  {:<36} {:>10}  {}\n",
            name,
            gib(item.bytes),
            item.formula
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::perplexity::STREAMED_WINDOW_GROUP;

    /// H=4, I=6, L=2, 2 heads of 2, 1 kv head, V=10, 340 parameters (see `shape.rs`).
    fn tiny() -> ModelShape {
        ModelShape {
            parameters: 340,
            hidden_size: 4,
            intermediate_size: 6,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            num_key_value_heads: 1,
            head_dim: 2,
            vocab_size: 10,
            tie_word_embeddings: false,
            max_position_embeddings: 64,
            gated_mlp: true,
            parallel_residual: false,
            experts: 0,
            shared_expert_size: 0,
            shared_expert_gated: false,
            dense_layers: 0,
            dense_intermediate_size: 0,
            latent_attention: None,
        }
    }

    fn run(method: Method) -> PruneRun {
        PruneRun {
            method: Some(method),
            nsamples: 3,
            seqlen: 5,
            batch: 2,
            eval_seqlen: Some(4),
            keeps_dense_copy: true,
            streaming: false,
            checkpoint_bytes: 1000,
            calibration_text_bytes: 10,
            eval_text_bytes: 20,
            device: DeviceKind::Cpu,
            precision: Precision::F32,
            activations_on_host: false,
            gpu_memory: None,
            owl: false,
            dsnot: false,
            weight_update: None,
            zeroshot: false,
            eval_group: STREAMED_WINDOW_GROUP,
            expert_removal: None,
        }
    }

    fn item(e: &Estimate, stage: &str, name: &str) -> u64 {
        let stage = e.stages.iter().find(|s| s.stage == stage).unwrap();
        stage
            .breakdown
            .items
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.bytes)
            .unwrap_or_else(|| panic!("no `{name}` in {stage:?}"))
    }

    #[test]
    fn wanda_run_by_hand() {
        let e = estimate_prune(&tiny(), &run(Method::Wanda));
        let names: Vec<_> = e.stages.iter().map(|s| s.stage).collect();
        assert_eq!(
            names,
            ["load", "calibration text", "prune", "eval text", "eval"]
        );
        assert_eq!(item(&e, "load", "weights"), 340 * 4);
        // The largest tensor, a stacked gate/up's 2 × 6 × 4 = 48 (the embeddings' 40, q/k/v's
        // 32), its pages at 1000 / 340 ≈ 3 B a parameter and its f32 copy beyond the 4 B the
        // weights count, or its host and device copies: 48 × max(3 + 4 − 4, 4).
        assert_eq!(item(&e, "load", "the tensor being read"), 48 * 4);
        let load = &e.stages[0].breakdown.items;
        assert!(load.iter().all(|i| !i.name.starts_with("checkpoint pages")));
        assert_eq!(item(&e, "calibration text", "tokenisation"), 10 * 100);
        assert_eq!(item(&e, "eval text", "tokenisation"), 20 * 100);
        // Linears per layer: q 16 + k, v 2·8 + o 16 + MLP 3·24 = 120; two layers, f32.
        assert_eq!(item(&e, "prune", "pruned copy"), 2 * 120 * 4);
        // (n + b) × s × H × 4 = 5 × 5 × 4 × 4.
        assert_eq!(item(&e, "prune", "calibration activations"), 400);
        // The fused kernels' blocks: 64 threads × 2 query heads of a kv group × 64 rows × s × 4.
        assert_eq!(
            item(&e, "prune", "attention score blocks"),
            64 * 2 * 64 * 5 * 4
        );
        // b × s × (4·nh·d + 3·I) × 4 = 10 × (16 + 18) × 4.
        assert_eq!(item(&e, "prune", "layer intermediates"), 1360);
        // b × s × I × 4.
        assert_eq!(item(&e, "prune", "statistics"), 240);
        // The widest linear (4 × 6) × 12; the layer's weights move to the host and back.
        assert_eq!(item(&e, "prune", "pruning buffers"), 288);
        // The fused kernels: e rows of logits, e × V × 4, the head read in place.
        assert_eq!(item(&e, "eval", "eval logits (a block of rows)"), 160);
        assert!(e.stages[4]
            .breakdown
            .items
            .iter()
            .all(|i| i.name != "LM head operands"));
        // 64 × 2 × 64 × e × 4; 1 × e × 34 × 4.
        assert_eq!(
            item(&e, "eval", "attention score blocks"),
            64 * 2 * 64 * 4 * 4
        );
        assert_eq!(item(&e, "eval", "layer intermediates"), 544);
        // The prune stage holds the most (overhead, weights, pruned copy and its buffers).
        let prune = CPU_OVERHEAD_BYTES + 1360 + 960 + 400 + 163_840 + 1360 + 240 + 288;
        assert_eq!(e.peak(Place::Device), ("prune", prune));
        // burn-flex computes the head with Burn's ops: V × H × 4 × 3 operands, e × V × 4.
        let mut flex = run(Method::Wanda);
        flex.device = DeviceKind::CpuFlex;
        let e = estimate_prune(&tiny(), &flex);
        assert_eq!(item(&e, "eval", "LM head operands"), 480);
        assert_eq!(item(&e, "eval", "eval logits"), 160);
    }

    #[test]
    fn a_parallel_layer_holds_the_attention_output_beside_the_mlp() {
        let shape = ModelShape {
            parallel_residual: true,
            ..tiny()
        };
        let e = estimate_prune(&shape, &run(Method::Wanda));
        // b × s × (4·nh·d + H + 3·I) × 4 = 10 × (16 + 4 + 18) × 4.
        assert_eq!(item(&e, "prune", "layer intermediates"), 1520);
        assert_eq!(
            item(&e, "eval", "layer intermediates"),
            4 * (16 + 4 + 18) * 4
        );
    }

    #[test]
    fn experts_add_their_hessians_and_gathered_rows_and_leave_the_fused_kernels() {
        let shape = ModelShape {
            experts: 3,
            ..tiny()
        };
        let e = estimate_prune(&shape, &run(Method::Sparsegpt));
        // (2·H² + (nh·d)² + E·(H² + I²)) × 12 = (32 + 16 + 3 · 52) × 12.
        assert_eq!(item(&e, "prune", "statistics"), (32 + 16 + 3 * 52) * 12);
        // b × s × (4·nh·d + 3·H + 3·I) × 4 = 10 × (16 + 12 + 18) × 4.
        assert_eq!(item(&e, "prune", "layer intermediates"), 1840);
        // Burn's generic attention, not the fused kernels' per-thread blocks: b × nh × s × s
        // × 4 × copies.
        let rows = attention_block_rows(2, 2, 5).min(5) as u64;
        assert_eq!(
            item(&e, "prune", "attention score blocks"),
            2 * 2 * rows * 5 * 4 * ATTENTION_SCORE_COPIES
        );
        // A shared expert wider than the routed ones widens the MLP's buffers to its width:
        // 10 × (16 + 12 + 3 · 8) × 4; one narrower leaves them as they were.
        let with_shared = |width| {
            let shape = ModelShape {
                shared_expert_size: width,
                ..shape.clone()
            };
            item(
                &estimate_prune(&shape, &run(Method::Sparsegpt)),
                "prune",
                "layer intermediates",
            )
        };
        assert_eq!(with_shared(8), 2080);
        assert_eq!(with_shared(2), 1840);
    }

    #[test]
    fn removed_experts_leave_the_model_the_stages_after_pruning_hold() {
        // Four experts a layer (H = 4, I = 6: 3·4·6 + 4 = 76 parameters each with its router
        // column), two layers: removing half takes 2 · 2 · 76 = 304 of 1,000 parameters.
        let shape = ModelShape {
            experts: 4,
            parameters: 1000,
            ..tiny()
        };
        let mut r = run(Method::Reap);
        r.expert_removal = Some(ExpertAmount(0.5));
        let after = r.pruned_shape(&shape);
        assert_eq!((after.experts, after.parameters), (2, 696));
        let e = estimate_prune(&shape, &r);
        // The copy is whole while it is pruned; the evaluation holds the dense model and the
        // copy of two experts a layer: attention (4·4 + 2·4·2 + 4·4 = 48) + 2 · 76 a layer.
        assert_eq!(item(&e, "prune", "pruned copy"), 2 * (48 + 4 * 76) * 4);
        assert_eq!(item(&e, "eval", "pruned copy"), 2 * (48 + 2 * 76) * 4);
        assert_eq!(item(&e, "eval", "weights"), 1000 * 4);
        // In place, the evaluation holds the smaller model alone.
        r.keeps_dense_copy = false;
        let e = estimate_prune(&shape, &r);
        assert_eq!(item(&e, "eval", "weights"), 696 * 4);
        assert_eq!(item(&e, "prune", "weights"), 1000 * 4);
    }

    #[test]
    fn sparsegpt_holds_its_updated_weights_and_other_methods_their_masks() {
        // Off the default CPU backend, whose layers move to the host and back whole.
        let buffers = |method, dsnot| {
            let mut r = run(method);
            r.dsnot = dsnot;
            r.device = DeviceKind::CpuFlex;
            item(&estimate_prune(&tiny(), &r), "prune", "pruning buffers")
        };
        // 120 × 4 + cols² × 8 × 3 with cols = max(H, I, nh·d) = 6.
        assert_eq!(buffers(Method::Sparsegpt, false), 480 + 6 * 6 * 8 * 3);
        // With DSnoT SparseGPT's saliency only orders a mask.
        assert_eq!(
            buffers(Method::Sparsegpt, true),
            120 + (6 * 6 * 8 * 3).max(24 * DSNOT_BYTES_PER_WEIGHT)
        );
        assert_eq!(buffers(Method::Magnitude, false), 120 + 288);
        // A weight update holds SparseGPT's factors and updated weights, plus a mask and its
        // scores, and collects SparseGPT's Hessians beside Wanda's squared inputs.
        let mut r = run(Method::Wanda);
        r.weight_update = Some(WeightUpdate::Sequential);
        r.device = DeviceKind::CpuFlex;
        let e = estimate_prune(&tiny(), &r);
        assert_eq!(
            item(&e, "prune", "pruning buffers"),
            480 + 6 * 6 * 8 * 3 + 24 * 5
        );
        r.device = DeviceKind::Cpu;
        let e = estimate_prune(&tiny(), &r);
        assert_eq!(item(&e, "prune", "pruning buffers"), 6 * 6 * 8 * 3 + 24 * 5);
        let sparsegpt = estimate_prune(&tiny(), &run(Method::Sparsegpt));
        assert_eq!(
            item(&e, "prune", "statistics"),
            item(&sparsegpt, "prune", "statistics")
        );
        assert!(item(&e, "prune", "norms' statistics") > 0);
    }

    #[test]
    fn a_gpu_in_half_precision_stores_two_bytes_and_holds_blocks_of_scores() {
        let mut r = run(Method::Wanda);
        r.device = DeviceKind::Cuda;
        r.precision = Precision::F16;
        let e = estimate_prune(&tiny(), &r);
        assert_eq!(item(&e, "load", "weights"), 340 * 2);
        assert_eq!(item(&e, "prune", "pruned copy"), 2 * 120 * 2);
        // (n + b) × s × H × 2 = 5 × 5 × 4 × 2.
        assert_eq!(item(&e, "prune", "calibration activations"), 200);
        // All 5 rows fit one block: b × nh × 5 × s × 4 × 2 = 2 × 2 × 5 × 5 × 4 × 2.
        assert_eq!(item(&e, "prune", "attention score blocks"), 800);
        // b × s × (4·nh·d × 4 + 3·I × 2) = 10 × (64 + 36).
        assert_eq!(item(&e, "prune", "layer intermediates"), 1000);
        // The head's product reads the weight in place on a GPU.
        assert!(e.stages[4]
            .breakdown
            .items
            .iter()
            .all(|i| i.name != "LM head operands"));
        // The activations on the host: n × s × H × 2 there, a batch in and out on the device.
        r.activations_on_host = true;
        let e = estimate_prune(&tiny(), &r);
        let prune = &e.stages[2].breakdown;
        let on = |name: &str| prune.items.iter().find(|i| i.name == name).unwrap();
        assert_eq!(on("calibration activations").bytes, 3 * 5 * 4 * 2);
        assert_eq!(on("calibration activations").place, Place::Host);
        assert_eq!(on("calibration batch in and out").bytes, 2 * 2 * 5 * 4 * 2);
        assert_eq!(on("calibration batch in and out").place, Place::Device);
    }

    /// Issue 25's target: Llama-2-70B, streamed, wanda at the paper's 128 × 2048 in fp16 fits
    /// a 24 GiB GPU with its headroom, the pool's pages included (39.14 GiB before: whole f32
    /// scores, 4-byte weights).
    #[test]
    fn a_streamed_70b_prune_at_the_papers_settings_fits_24_gib_in_fp16() {
        let shape = ModelShape {
            parameters: 68_976_648_192,
            hidden_size: 8192,
            intermediate_size: 28672,
            num_hidden_layers: 80,
            num_attention_heads: 64,
            num_key_value_heads: 8,
            head_dim: 128,
            vocab_size: 32000,
            tie_word_embeddings: false,
            max_position_embeddings: 4096,
            gated_mlp: true,
            parallel_residual: false,
            experts: 0,
            shared_expert_size: 0,
            shared_expert_gated: false,
            dense_layers: 0,
            dense_intermediate_size: 0,
            latent_attention: None,
        };
        let r = PruneRun {
            nsamples: 128,
            seqlen: 2048,
            batch: 8,
            eval_seqlen: None,
            keeps_dense_copy: false,
            streaming: true,
            checkpoint_bytes: 0,
            device: DeviceKind::Cuda,
            precision: Precision::F16,
            gpu_memory: Some(24 << 30),
            ..run(Method::Wanda)
        };
        let (_, peak) = estimate_prune(&shape, &r).peak(Place::Device);
        assert!(peak < (24u64 << 30) * 9 / 10, "{}", gib(peak));
        let e = estimate_prune(&shape, &r);
        // 8 × 64 heads × 64 rows × 2048 keys × 4 B × 2, not 16 GiB of whole scores.
        assert_eq!(item(&e, "prune", "attention score blocks"), 512 << 20);
    }

    /// On a 24 GiB GPU the tiny model's tensors all go to the 24 MiB pages (slices up to
    /// 1.5 MiB): one page, reserved in the first stage that allocates and kept after it.
    #[test]
    fn a_gpu_run_counts_the_pools_pages_and_keeps_them_across_stages() {
        let mut r = run(Method::Wanda);
        r.device = DeviceKind::Cuda;
        r.gpu_memory = Some(24 << 30);
        let e = estimate_prune(&tiny(), &r);
        let live = |stage: &str| -> u64 {
            let stage = e.stages.iter().find(|s| s.stage == stage).unwrap();
            stage
                .breakdown
                .items
                .iter()
                .flat_map(|i| i.allocations.iter())
                .map(|(n, each)| n * each)
                .sum()
        };
        let page = 24u64 << 20;
        for stage in ["prune", "eval text", "eval"] {
            assert_eq!(
                item(&e, stage, "memory pool pages (unused parts)") + live(stage),
                page,
                "{stage}"
            );
        }
        // Nothing allocated before calibration, so no pages then.
        let load = &e.stages[0].breakdown;
        assert!(load
            .items
            .iter()
            .all(|i| !i.name.starts_with("memory pool")));
        // A GPU whose size is not known leaves the pool out.
        r.gpu_memory = None;
        let e = estimate_prune(&tiny(), &r);
        assert!(e.stages.iter().all(|s| s
            .breakdown
            .items
            .iter()
            .all(|i| !i.name.starts_with("memory pool"))));
    }

    /// The NVML device peaks of `wanda run scripts/gpu/cell.yaml` on an H200 (143,771 MiB;
    /// `results/gpu-h200-2026-11-27-cublas/`, with cuBLAS's products): wanda 50 %, calibration
    /// 16 × 512, eval 4 × 512, random SmolLM2-135M-, Llama-3.2-1B- and 8-layer
    /// Llama-2-7B-shaped models with a 49,152-token vocabulary; in memory in f32 and f16, and
    /// lean (batch 1, activations on the host, streamed) in f16. With the pool's pages the
    /// estimate is within 15 % of each (0.24–0.84 of them without).
    #[test]
    fn gpu_estimates_are_within_15_percent_of_the_measured_h200_peaks() {
        let shape = |parameters, h, i, layers, heads, kv, tie, context| ModelShape {
            parameters,
            hidden_size: h,
            intermediate_size: i,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            head_dim: h / heads,
            vocab_size: 49152,
            tie_word_embeddings: tie,
            max_position_embeddings: context,
            gated_mlp: true,
            parallel_residual: false,
            experts: 0,
            shared_expert_size: 0,
            shared_expert_gated: false,
            dense_layers: 0,
            dense_intermediate_size: 0,
            latent_attention: None,
        };
        let smollm2 = shape(134_515_008, 576, 1536, 30, 9, 3, true, 8192);
        let llama1b = shape(1_073_809_408, 2048, 8192, 16, 32, 8, true, 131_072);
        let llama7b = shape(2_021_724_160, 4096, 11008, 8, 32, 32, false, 4096);
        let measured = [
            (&smollm2, Precision::F32, false, 4_343_201_792u64),
            (&smollm2, Precision::F16, false, 4_106_223_616),
            (&smollm2, Precision::F16, true, 3_837_788_160),
            (&llama1b, Precision::F32, false, 8_101_298_176),
            (&llama1b, Precision::F16, false, 6_253_707_264),
            (&llama1b, Precision::F16, true, 4_139_778_048),
            (&llama7b, Precision::F32, false, 13_503_561_728),
            (&llama7b, Precision::F16, false, 8_703_180_800),
            (&llama7b, Precision::F16, true, 5_112_856_576),
        ];
        for (shape, precision, lean, peak) in measured {
            let r = PruneRun {
                nsamples: 16,
                seqlen: 512,
                batch: if lean { 1 } else { 8 },
                eval_seqlen: Some(512),
                keeps_dense_copy: false,
                streaming: lean,
                checkpoint_bytes: 0,
                device: DeviceKind::Cuda,
                precision,
                activations_on_host: lean,
                gpu_memory: Some(143_771 << 20),
                ..run(Method::Wanda)
            };
            let (_, estimate) = estimate_prune(shape, &r).peak(Place::Device);
            let ratio = estimate as f64 / peak as f64;
            assert!(
                (0.85..=1.15).contains(&ratio),
                "H {} {precision:?} lean {lean}: {} estimated, {} measured",
                shape.hidden_size,
                gib(estimate),
                gib(peak)
            );
        }
    }

    #[test]
    fn sparsegpt_holds_hessians_in_f32_and_f64() {
        let e = estimate_prune(&tiny(), &run(Method::Sparsegpt));
        // (2·H² + (nh·d)² + I²) × 12 = (32 + 16 + 36) × 12.
        assert_eq!(item(&e, "prune", "statistics"), 1008);
        // The widest input's 6² × 8 × 3; the updated weights are the layer's own buffers.
        assert_eq!(item(&e, "prune", "pruning buffers"), 864);
    }

    #[test]
    fn magnitude_needs_no_calibration_and_a_cli_run_no_copy() {
        let mut r = run(Method::Magnitude);
        r.keeps_dense_copy = false;
        let e = estimate_prune(&tiny(), &r);
        let names: Vec<_> = e.stages.iter().map(|s| s.stage).collect();
        assert_eq!(names, ["load", "prune", "eval text", "eval"]);
        let prune = &e.stages[1].breakdown;
        assert!(prune
            .items
            .iter()
            .all(|i| i.name != "calibration activations" && i.name != "pruned copy"));
    }

    #[test]
    fn streaming_on_a_gpu_keeps_one_layer_and_the_embeddings_on_the_device() {
        let mut r = run(Method::Wanda);
        r.device = DeviceKind::Cuda;
        r.streaming = true;
        let e = estimate_prune(&tiny(), &r);
        // Untied: embeddings and head 2 × V × H, plus one layer's 120 linear weights.
        assert_eq!(
            item(&e, "prune", "weights (embeddings + one layer)"),
            (80 + 120) * 4
        );
        // The host holds one layer's pages of the 1000 B checkpoint and no f32 weights, and
        // pruned layers go to the layer store on disk, not to a pruned copy.
        assert_eq!(item(&e, "prune", "checkpoint pages (one layer's)"), 500);
        let host = e.stages[2].breakdown.total(Place::Host);
        assert_eq!(host, CPU_OVERHEAD_BYTES + 500 + 408);
    }

    /// Streamed, loading reads the shell (embeddings and head: 80 of the 340 parameters)
    /// from the 1000 B checkpoint first, and its pages stay while the layers are read.
    #[test]
    fn streamed_loading_counts_the_shells_checkpoint_pages() {
        let mut r = run(Method::Wanda);
        r.streaming = true;
        let e = estimate_prune(&tiny(), &r);
        assert_eq!(
            item(&e, "load", "checkpoint pages (the embeddings')"),
            1000 * 80 / 340
        );
        assert_eq!(item(&e, "load", "checkpoint pages (one layer's)"), 500);
    }

    /// A vocabulary above SmolLM2's adds its tokenizer's extra bytes to every stage (Gemma 3's
    /// 262,144 entries: 0.27 GB more); one at or below it adds nothing.
    #[test]
    fn a_large_vocabulary_counts_its_tokenizer() {
        let mut shape = tiny();
        let small = estimate_prune(&shape, &run(Method::Wanda));
        shape.vocab_size = 262_144;
        let large = estimate_prune(&shape, &run(Method::Wanda));
        for (a, b) in small.stages.iter().zip(&large.stages) {
            assert!(a
                .breakdown
                .items
                .iter()
                .all(|i| i.name != "tokenizer (beyond the overhead's)"));
            let extra = b
                .breakdown
                .items
                .iter()
                .find(|i| i.name == "tokenizer (beyond the overhead's)")
                .map(|i| i.bytes);
            assert_eq!(extra, Some((262_144 - 49_152) * 1_250), "{}", b.stage);
        }
    }

    #[test]
    fn streaming_on_the_cpu_counts_one_layer_and_the_residual_streams_of_a_window_group() {
        let mut r = run(Method::Wanda);
        let whole = estimate_prune(&tiny(), &r);
        r.streaming = true;
        let streamed = estimate_prune(&tiny(), &r);
        for stage in ["prune", "eval"] {
            // Whole weights 340 × 4 and the pruned copy 960 out; the shell, one layer and one
            // layer's pages of the checkpoint in.
            let (a, b) = (
                whole.stages.iter().find(|s| s.stage == stage).unwrap(),
                streamed.stages.iter().find(|s| s.stage == stage).unwrap(),
            );
            // The same attention blocks and rows of logits; in eval (b = 1, s = 4) the
            // residual streams of a window group in.
            let (added, removed) = if stage == "eval" {
                (STREAMED_WINDOW_GROUP as u64 * 4 * 4 * 4, 0)
            } else {
                (0, 0)
            };
            assert_eq!(
                b.breakdown.total(Place::Device) + 340 * 4 + 960 + removed,
                a.breakdown.total(Place::Device) + (80 + 120) * 4 + 500 + added,
                "{stage}"
            );
        }
        assert_eq!(
            item(&streamed, "eval", "residual streams"),
            STREAMED_WINDOW_GROUP as u64 * 4 * 4 * 4
        );
    }
}
