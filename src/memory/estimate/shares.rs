//! The formula of each share of a stage's memory, and the stages made of shares alone
//! (tokenisation, evaluation), with the constants they use (measured or fitted).

use super::dims::{Dims, PruneRun, StageEstimate};
use crate::memory::device::DeviceKind;
use crate::model::arch::{Breakdown, ModelShape, Place};
use crate::model::decoder::attention_block_rows;
use crate::model::kernels::{ATTENTION_ROWS, HEAD_ROWS};
use crate::prune::device_select;
use crate::prune::Method;

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

/// Bytes of an f32, what every precision computes attention, norms and statistics in.
pub(super) const F32: u64 = 4;
/// DSnoT's bytes per weight of the widest linear: initial and Wanda scores (8), the weight and
/// both scores transposed per output channel (12), four masks (4), the initial selection's
/// transposed scores and order (12).
pub const DSNOT_BYTES_PER_WEIGHT: u64 = 36;

/// The calibration's shares of the prune stage: the activations (on the device or the host),
/// one forward pass, the method's statistics, and OWL's and DSnoT's extras.
pub(super) fn calibration(
    prune: &mut Breakdown,
    run: &PruneRun,
    m: &Dims,
    host: Place,
    method: Method,
) {
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
pub(super) fn pruning_buffers(
    prune: &mut Breakdown,
    run: &PruneRun,
    m: &Dims,
    host: Place,
    method: Method,
) {
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

/// Whether the fused CPU kernels run the model: on the default CPU backend, unless its
/// layers are of a kind only Burn's generic ops run ([`Dims::generic_layers`]).
fn fused_kernels(run: &PruneRun, m: &Dims) -> bool {
    run.device == DeviceKind::Cpu && !m.generic_layers
}

/// The perplexity stage over windows of `e` tokens.
pub(super) fn eval_stage(
    shape: &ModelShape,
    run: &PruneRun,
    m: &Dims,
    host: Place,
    e: u64,
) -> StageEstimate {
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

/// The stage that tokenises a text file of `text_bytes`.
pub(super) fn tokenise(
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

/// The process's fixed memory: the framework, a tokenizer's vocabulary beyond
/// [`OVERHEAD_VOCAB`], and on a GPU CUDA's context and cuBLAS.
pub(super) fn overhead(b: &mut Breakdown, device: DeviceKind, host: Place, m: &Dims) {
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
pub(super) fn tensor_being_read(
    b: &mut Breakdown,
    shape: &ModelShape,
    run: &PruneRun,
    host: Place,
) {
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
pub(super) fn weights(
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
pub(super) fn forward(out: &mut Breakdown, run: &PruneRun, m: &Dims, b: u64, s: u64) {
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

#[cfg(test)]
mod tests {
    use super::super::dims::fixtures::{run, tiny};
    use super::*;

    /// The bytes of the share called `name`, run by `add` on an empty breakdown.
    fn share(add: impl FnOnce(&mut Breakdown), name: &str) -> u64 {
        let mut b = Breakdown::default();
        add(&mut b);
        b.items
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.bytes)
            .unwrap_or_else(|| panic!("no `{name}` in {b:?}"))
    }

    #[test]
    fn a_forward_pass_on_the_fused_kernels_and_on_burns_ops() {
        let m = Dims::new(&tiny());
        let r = run(Method::Wanda);
        // 64 threads × 2 query heads of a kv group × 64 rows × s × 4.
        let scores = share(|b| forward(b, &r, &m, 2, 5), "attention score blocks");
        assert_eq!(scores, 64 * 2 * 64 * 5 * 4);
        // b × s × (4·nh·d + 3·I) × 4 = 10 × (16 + 18) × 4.
        let intermediates = share(|b| forward(b, &r, &m, 2, 5), "layer intermediates");
        assert_eq!(intermediates, 1360);
        // burn-flex: a block of query rows of every head, b × nh × rows × s × 4 × copies.
        let mut flex = run(Method::Wanda);
        flex.device = DeviceKind::CpuFlex;
        let rows = attention_block_rows(2, 2, 5).min(5) as u64;
        assert_eq!(
            share(|b| forward(b, &flex, &m, 2, 5), "attention score blocks"),
            2 * 2 * rows * 5 * 4 * ATTENTION_SCORE_COPIES
        );
    }

    #[test]
    fn calibration_holds_the_activations_and_the_methods_statistics() {
        let m = Dims::new(&tiny());
        let calibrate = |method, name| {
            let r = run(method);
            share(|b| calibration(b, &r, &m, Place::Device, method), name)
        };
        // (n + b) × s × H × 4 = 5 × 5 × 4 × 4.
        assert_eq!(calibrate(Method::Wanda, "calibration activations"), 400);
        // Wanda: b × s × I × 4; SparseGPT: (2·H² + (nh·d)² + I²) × 12.
        assert_eq!(calibrate(Method::Wanda, "statistics"), 240);
        assert_eq!(calibrate(Method::Sparsegpt, "statistics"), 1008);
    }

    #[test]
    fn pruning_buffers_of_the_widest_linear() {
        let m = Dims::new(&tiny());
        let buffers = |r: &PruneRun, method| {
            share(
                |b| pruning_buffers(b, r, &m, Place::Device, method),
                "pruning buffers",
            )
        };
        // (4 × 6) × 12 on the default CPU backend, whose layers move to the host and back.
        assert_eq!(buffers(&run(Method::Wanda), Method::Wanda), 288);
        // SparseGPT: the widest input's 6² × 8 × 3.
        assert_eq!(buffers(&run(Method::Sparsegpt), Method::Sparsegpt), 864);
        // Elsewhere the layer's 120 masks as well.
        let mut flex = run(Method::Magnitude);
        flex.device = DeviceKind::CpuFlex;
        assert_eq!(buffers(&flex, Method::Magnitude), 120 + 288);
    }

    #[test]
    fn overhead_counts_a_large_vocabulary_and_a_gpus_context() {
        let mut b = Breakdown::default();
        overhead(&mut b, DeviceKind::Cpu, Place::Device, &Dims::new(&tiny()));
        assert_eq!(b.total(Place::Device), CPU_OVERHEAD_BYTES);
        let large = ModelShape {
            vocab_size: 262_144,
            ..tiny()
        };
        let mut b = Breakdown::default();
        overhead(&mut b, DeviceKind::Cuda, Place::Host, &Dims::new(&large));
        assert_eq!(
            b.total(Place::Host),
            CPU_OVERHEAD_BYTES + (262_144 - 49_152) * 1_250
        );
        assert_eq!(b.total(Place::Device), CUDA_OVERHEAD_BYTES + CUBLAS_BYTES);
    }

    #[test]
    fn weights_whole_with_a_pruned_copy_or_streamed_with_one_layers_pages() {
        let (shape, m) = (tiny(), Dims::new(&tiny()));
        let r = run(Method::Wanda);
        let whole = |name| {
            share(
                |b| weights(b, &shape, &r, &m, Place::Device, Some(&shape)),
                name,
            )
        };
        assert_eq!(whole("weights"), 340 * 4);
        // Two layers of 120 linear weights in f32.
        assert_eq!(whole("pruned copy"), 2 * 120 * 4);
        // The largest tensor, a stacked gate/up's 48 weights, at max(3 + 4 − 4, 4) B.
        let read = share(
            |b| tensor_being_read(b, &shape, &r, Place::Device),
            "the tensor being read",
        );
        assert_eq!(read, 48 * 4);
        // Streamed: embeddings and head 2 × V × H and one layer, and that layer's pages.
        let mut r = run(Method::Wanda);
        r.streaming = true;
        let streamed = |name| {
            share(
                |b| weights(b, &shape, &r, &m, Place::Device, Some(&shape)),
                name,
            )
        };
        assert_eq!(streamed("weights (embeddings + one layer)"), (80 + 120) * 4);
        assert_eq!(streamed("checkpoint pages (one layer's)"), 500);
    }

    #[test]
    fn tokenising_and_evaluating_on_the_fused_kernels() {
        let (shape, m) = (tiny(), Dims::new(&tiny()));
        let r = run(Method::Wanda);
        let text = tokenise("eval text", &shape, &r, &m, Place::Device, 20);
        let bytes = |stage: &StageEstimate, name: &str| {
            stage
                .breakdown
                .items
                .iter()
                .find(|i| i.name == name)
                .unwrap()
                .bytes
        };
        assert_eq!(bytes(&text, "tokenisation"), 20 * 100);
        // e rows of logits, e × V × 4, the head read in place.
        let eval = eval_stage(&shape, &r, &m, Place::Device, 4);
        assert_eq!(eval.stage, "eval");
        assert_eq!(bytes(&eval, "eval logits (a block of rows)"), 160);
        assert_eq!(bytes(&eval, "layer intermediates"), 544);
    }
}
