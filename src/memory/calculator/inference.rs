//! The inference calculator: weights, KV cache, one layer's activations (or FlashAttention's
//! running statistics) and logits (formulas in the parent module's documentation).

use super::{product, scaled, Precision, CUDA_CONTEXT_BYTES, FP32_BYTES};
use crate::model::arch::{Breakdown, ModelShape, Place};

/// What an inference estimate is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InferenceRequest {
    /// Weight precision.
    pub precision: Precision,
    /// Tokens per sequence.
    pub seqlen: usize,
    /// Sequences per batch.
    pub batch: usize,
    /// Whether keys and values are cached.
    pub kv_cache: bool,
    /// Whether attention scores are never materialized.
    pub flash_attention: bool,
}

/// Per-device memory to run the model forward: weights, KV cache, activations, logits, overhead.
pub fn inference(shape: &ModelShape, req: &InferenceRequest) -> Breakdown {
    let mut out = Breakdown::default();
    let p = shape.parameters;
    let c = req.precision.compute_bytes();
    let (s, b) = (req.seqlen as u64, req.batch as u64);
    let (h, i, l) = (
        shape.hidden_size as u64,
        shape.intermediate_size as u64,
        shape.num_hidden_layers as u64,
    );
    let (a, kv, d, v) = (
        shape.num_attention_heads as u64,
        shape.num_key_value_heads as u64,
        shape.head_dim as u64,
        shape.vocab_size as u64,
    );

    let pb = req.precision.bytes();
    out.push(
        "weights",
        scaled(p, pb),
        Place::Device,
        format!("{p} params × {pb} B"),
    );

    if req.kv_cache {
        out.push(
            "kv cache",
            product(&[2, l, b, s, kv, d, c]),
            Place::Device,
            format!(
                "2 × {l} layers × {b} batch × {s} tokens × {kv} kv heads × {d} head dim × {c} B"
            ),
        );
    }

    let widths = h + a * d + 2 * kv * d + 2 * i;
    let layer = product(&[b, s, widths, c]);
    let (scores, scores_formula) = if req.flash_attention {
        (
            product(&[b, a, s, FP32_BYTES, 2]),
            format!("{b} batch × {a} heads × {s} tokens × 4 B × 2 (flash running max, sum)"),
        )
    } else {
        (
            product(&[b, a, s, s, FP32_BYTES]),
            format!("{b} batch × {a} heads × {s}² tokens × 4 B (fp32 scores)"),
        )
    };
    out.push(
        "activations",
        layer.saturating_add(scores),
        Place::Device,
        format!(
            "{b} batch × {s} tokens × ({h} + {} + 2·{} + 2·{i}) × {c} B + {scores_formula}",
            a * d,
            kv * d
        ),
    );

    out.push(
        "logits",
        product(&[b, s, v, FP32_BYTES]),
        Place::Device,
        format!("{b} batch × {s} tokens × {v} vocab × 4 B (fp32)"),
    );
    out.push(
        "overhead",
        CUDA_CONTEXT_BYTES,
        Place::Device,
        format!("{CUDA_CONTEXT_BYTES} B CUDA context + cuBLAS workspace"),
    );
    out
}
