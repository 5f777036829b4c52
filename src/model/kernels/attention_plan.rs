//! The launch plan of CUDA's causal attention by two batched products and a softmax between
//! them (`cublas_attention.rs`), kept apart from the CUDA calls so that tests run it on the host.
//!
//! For `units` heads (batch × heads) of `seq` positions and width `head_dim`, stored row-major
//! and contiguous (`[units, seq, head_dim]`), a chunk of heads at a time:
//! 1. `scores = q·kᵀ/√head_dim` in f32 into a `[chunk, seq, seq]` workspace, in [`PARTS`]
//!    parts of query rows, each against the keys up to its last row only (causal attention
//!    needs no more, so the products do 5/8 of the square's work);
//! 2. each score row's causal softmax in f32 ([`SOFTMAX_SOURCE`]), written back over its own row
//!    in the tensors' type (a 2-byte type fills the first half of each row), up to its part's
//!    last key;
//! 3. `out = p·v`, accumulated in f32, in the tensors' type, part by part over the same keys.
//!
//! cuBLAS is column-major: a row-major `[r, c]` matrix is its column-major `[c, r]` transpose,
//! so row-major `q·kᵀ` is the column-major `k·qᵀ` of the stored operands, and row-major `p·v`
//! the column-major `vᵀ·pᵀ`.

/// The CUDA C source of the causal softmax kernels, one per type the probabilities are
/// written in ([`SOFTMAX_KERNELS`]); compiled by NVRTC at first use.
pub const SOFTMAX_SOURCE: &str = include_str!("causal_softmax.cu");

/// The softmax kernels of [`SOFTMAX_SOURCE`] that write f32, fp16 and bf16 probabilities.
pub const SOFTMAX_KERNELS: [&str; 3] = [
    "causal_softmax_f32",
    "causal_softmax_f16",
    "causal_softmax_bf16",
];

/// Threads per block of the softmax kernel: a warp (32 threads) per score row.
pub const SOFTMAX_THREADS: usize = 256;

/// Parts of query rows whose scores and weighted sums are separate products.
pub const PARTS: usize = 4;

/// One `cublasGemmStridedBatchedEx` call in cuBLAS's column-major terms:
/// `C_i = α·op(A_i)·op(B_i)` for `i < batch`, `op(A_i)` being `[m, k]` and `op(B_i)` `[k, n]`;
/// `A_0` is at its operand's start (a head's first key or value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StridedGemm {
    /// `op(A)` is `A` transposed (`A` is stored `[k, m]`, leading dimension `lda`).
    pub transpose_a: bool,
    /// `op(B)` is `B` transposed.
    pub transpose_b: bool,
    /// Rows of `C`.
    pub m: usize,
    /// Columns of `C`.
    pub n: usize,
    /// The shared dimension.
    pub k: usize,
    /// Leading dimension of `A`, in its elements.
    pub lda: usize,
    /// Leading dimension of `B`, in its elements.
    pub ldb: usize,
    /// Leading dimension of `C`, in its elements.
    pub ldc: usize,
    /// Elements from one `A_i` to the next.
    pub stride_a: usize,
    /// Elements from one `B_i` to the next.
    pub stride_b: usize,
    /// Elements from one `C_i` to the next.
    pub stride_c: usize,
    /// Elements from the operand's start to `B_0`.
    pub offset_b: usize,
    /// Elements from the operand's start to `C_0`.
    pub offset_c: usize,
    /// Products in the call.
    pub batch: usize,
}

/// The calls of one attention: chunks of at most `chunk_units` heads, each a score product per
/// part of query rows, a softmax over `chunk × seq` rows and a weighted sum per part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionPlan {
    /// Heads in all (batch × heads).
    pub units: usize,
    /// Positions per head.
    pub seq: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// Heads per chunk: as many as keep the f32 scores within the byte budget, at least one.
    pub chunk_units: usize,
    /// Bytes of the workspace that holds one chunk's scores (and then its probabilities).
    pub workspace_bytes: usize,
    /// Elements of the tensors' type from one probability row to the next (the score rows'
    /// width in that type: `seq` in f32, `2·seq` in a 2-byte type).
    pub probability_row: usize,
    /// Query rows per part (the last part may hold fewer).
    pub part_rows: usize,
}

impl AttentionPlan {
    /// The plan for `units` heads of `seq × head_dim` in a type of `element_bytes` (4 or 2)
    /// bytes, one chunk's f32 scores within `budget_bytes` where a head's fit.
    pub fn new(
        units: usize,
        seq: usize,
        head_dim: usize,
        element_bytes: usize,
        budget_bytes: usize,
    ) -> Self {
        let head_scores = seq.saturating_mul(seq).saturating_mul(4).max(1);
        let chunk_units = (budget_bytes / head_scores).clamp(1, units.max(1));
        Self {
            units,
            seq,
            head_dim,
            chunk_units,
            workspace_bytes: chunk_units.saturating_mul(head_scores),
            probability_row: seq * 4 / element_bytes,
            part_rows: seq.div_ceil(PARTS).max(1),
        }
    }

    /// The parts as `(first query row, rows)`; a part's rows see keys up to its last row.
    pub fn parts(&self) -> impl Iterator<Item = (usize, usize)> {
        spans(self.seq, self.part_rows)
    }

    /// The chunks as `(first head, heads)`.
    pub fn chunks(&self) -> impl Iterator<Item = (usize, usize)> {
        spans(self.units, self.chunk_units)
    }

    /// `scores_i = k_i·q_iᵀ` column-major (row-major `q_i·k_iᵀ`) of one part's query rows
    /// against the keys they see, for `heads` heads, with `A` the keys, `B` the queries and `C`
    /// the f32 workspace.
    pub fn scores(&self, heads: usize, (first, rows): (usize, usize)) -> StridedGemm {
        let (s, d) = (self.seq, self.head_dim);
        StridedGemm {
            transpose_a: true,
            transpose_b: false,
            m: first + rows,
            n: rows,
            k: d,
            lda: d,
            ldb: d,
            ldc: s,
            stride_a: s * d,
            stride_b: s * d,
            stride_c: s * s,
            offset_b: first * d,
            offset_c: first * s,
            batch: heads,
        }
    }

    /// `out_iᵀ = v_iᵀ·p_iᵀ` column-major (row-major `p_i·v_i`) of one part's query rows over
    /// the keys they see, for `heads` heads, with `A` the values, `B` the probabilities in the
    /// workspace and `C` the output.
    pub fn weighted(&self, heads: usize, (first, rows): (usize, usize)) -> StridedGemm {
        let (s, d) = (self.seq, self.head_dim);
        StridedGemm {
            transpose_a: false,
            transpose_b: false,
            m: d,
            n: rows,
            k: first + rows,
            lda: d,
            ldb: self.probability_row,
            ldc: d,
            stride_a: s * d,
            stride_b: s * self.probability_row,
            stride_c: s * d,
            offset_b: first * self.probability_row,
            offset_c: first * d,
            batch: heads,
        }
    }

    /// Blocks of [`SOFTMAX_THREADS`] threads for the softmax of `heads` heads' score rows.
    pub fn softmax_blocks(&self, heads: usize) -> usize {
        (heads * self.seq).div_ceil(SOFTMAX_THREADS / 32)
    }

    /// Whether every dimension, leading dimension and count fits cuBLAS's `int` and every
    /// stride its `long long`.
    pub fn fits_cublas(&self) -> bool {
        let int = i32::MAX as usize;
        let whole = (0, self.seq);
        [
            self.scores(self.chunk_units, whole),
            self.weighted(self.chunk_units, whole),
        ]
        .iter()
        .all(|g| {
            [g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch]
                .iter()
                .all(|&v| v <= int)
                && [g.stride_a, g.stride_b, g.stride_c]
                    .iter()
                    .all(|&v| v <= i64::MAX as usize)
        }) && self.softmax_blocks(self.chunk_units) <= int
            && self.chunk_units * self.seq <= i64::MAX as usize
            && self.seq <= int
    }
}

/// `0..total` in spans of `step` (the last may be shorter), as `(first, length)`.
fn spans(total: usize, step: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..total)
        .step_by(step)
        .map(move |first| (first, step.min(total - first)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `cublasGemmStridedBatchedEx` computes, in f64, on host slices (column-major).
    fn strided_gemm(g: &StridedGemm, alpha: f64, a: &[f64], b: &[f64], c: &mut [f64]) {
        for p in 0..g.batch {
            for i in 0..g.m {
                for j in 0..g.n {
                    let sum: f64 = (0..g.k)
                        .map(|l| {
                            let a = if g.transpose_a {
                                a[p * g.stride_a + l + i * g.lda]
                            } else {
                                a[p * g.stride_a + i + l * g.lda]
                            };
                            let b = if g.transpose_b {
                                b[g.offset_b + p * g.stride_b + j + l * g.ldb]
                            } else {
                                b[g.offset_b + p * g.stride_b + l + j * g.ldb]
                            };
                            a * b
                        })
                        .sum();
                    c[g.offset_c + p * g.stride_c + i + j * g.ldc] = alpha * sum;
                }
            }
        }
    }

    /// What the softmax kernel writes: each f32 score row's causal softmax (row `r` of a head
    /// sees keys `0..=r % seq`; 0 for the others up to its part's last row), at
    /// `probability_row` elements a row. What it leaves stays NaN, as do the scores the
    /// products did not write, so that reading either shows.
    fn causal_softmax(plan: &AttentionPlan, heads: usize, scores: &[f64]) -> Vec<f64> {
        let (s, row) = (plan.seq, plan.probability_row);
        let mut p = vec![f64::NAN; heads * s * row];
        for r in 0..heads * s {
            let visible = r % s + 1;
            let x = &scores[r * s..r * s + visible];
            let max = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = x.iter().map(|v| (v - max).exp()).sum();
            let part_end = ((r % s) / plan.part_rows + 1) * plan.part_rows;
            for j in 0..part_end.min(s) {
                p[r * row + j] = if j < visible {
                    (x[j] - max).exp() / sum
                } else {
                    0.0
                };
            }
        }
        p
    }

    /// Causal attention straight from its definition, `[units, seq, head_dim]` row-major.
    fn attention(units: usize, s: usize, d: usize, q: &[f64], k: &[f64], v: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; units * s * d];
        for u in 0..units {
            let at = |t: &[f64], i: usize, c: usize| t[(u * s + i) * d + c];
            for i in 0..s {
                let scores: Vec<f64> = (0..=i)
                    .map(|j| (0..d).map(|c| at(q, i, c) * at(k, j, c)).sum::<f64>())
                    .map(|x| x / (d as f64).sqrt())
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = scores.iter().map(|x| (x - max).exp()).sum();
                for c in 0..d {
                    out[(u * s + i) * d + c] = (0..=i)
                        .map(|j| (scores[j] - max).exp() / sum * at(v, j, c))
                        .sum();
                }
            }
        }
        out
    }

    /// Runs `plan` chunk by chunk as the CUDA path does, with host stand-ins for its calls.
    fn run(plan: &AttentionPlan, q: &[f64], k: &[f64], v: &[f64]) -> Vec<f64> {
        let (s, d) = (plan.seq, plan.head_dim);
        let mut out = vec![f64::NAN; plan.units * s * d];
        let alpha = 1.0 / (d as f64).sqrt();
        for (first, heads) in plan.chunks() {
            let at = first * s * d;
            let mut scores = vec![f64::NAN; plan.chunk_units * s * s];
            for part in plan.parts() {
                let g = plan.scores(heads, part);
                strided_gemm(&g, alpha, &k[at..], &q[at..], &mut scores);
            }
            let p = causal_softmax(plan, heads, &scores);
            for part in plan.parts() {
                let g = plan.weighted(heads, part);
                strided_gemm(&g, 1.0, &v[at..], &p, &mut out[at..]);
            }
        }
        out
    }

    #[test]
    fn the_plan_run_on_the_host_is_causal_attention_in_f32_and_in_two_byte_types() {
        // Parts of 2, 2, 2 and 1 rows; of 3, 3, 3 and 1; one row (and no other part).
        for s in [7, 10, 1] {
            the_plan_run_on_the_host_is_causal_attention_at(5, s, 3);
        }
    }

    fn the_plan_run_on_the_host_is_causal_attention_at(units: usize, s: usize, d: usize) {
        let values = |seed: usize| -> Vec<f64> {
            (0..units * s * d)
                .map(|i| ((i * 7919 + seed * 104_729) % 997) as f64 / 499.0 - 1.0)
                .collect()
        };
        let (q, k, v) = (values(1), values(2), values(3));
        let expected = attention(units, s, d, &q, &k, &v);
        // Budgets of one head, two heads (a short last chunk) and all of them at once.
        for element_bytes in [4, 2] {
            for budget in [s * s * 4, 2 * s * s * 4 + 5, 1 << 20] {
                let plan = AttentionPlan::new(units, s, d, element_bytes, budget);
                assert!(plan.workspace_bytes <= budget.max(s * s * 4));
                let got = run(&plan, &q, &k, &v);
                for (g, e) in got.iter().zip(&expected) {
                    assert!(
                        (g - e).abs() < 1e-12,
                        "{g} vs {e} ({element_bytes} B, {budget})"
                    );
                }
            }
        }
    }

    #[test]
    fn chunks_cover_every_head_once_within_the_budget() {
        let plan = AttentionPlan::new(128, 2048, 64, 2, 256 << 20);
        assert_eq!(plan.chunk_units, 16);
        assert_eq!(plan.workspace_bytes, 256 << 20);
        assert_eq!(plan.probability_row, 4096);
        assert_eq!(plan.softmax_blocks(16), 16 * 2048 / 8);
        assert_eq!(plan.part_rows, 512);
        let parts: Vec<_> = plan.parts().collect();
        assert_eq!(parts, [(0, 512), (512, 512), (1024, 512), (1536, 512)]);
        let short = AttentionPlan::new(1, 7, 4, 4, 1 << 20);
        assert_eq!(
            short.parts().collect::<Vec<_>>(),
            [(0, 2), (2, 2), (4, 2), (6, 1)]
        );
        let chunks: Vec<_> = plan.chunks().collect();
        assert_eq!(chunks.len(), 8);
        assert!(chunks.iter().all(|&(_, n)| n == 16));
        // A head larger than the budget is a chunk of its own.
        let big = AttentionPlan::new(3, 16384, 128, 4, 256 << 20);
        assert_eq!(big.chunk_units, 1);
        assert_eq!(big.chunks().collect::<Vec<_>>(), [(0, 1), (1, 1), (2, 1)]);
        assert!(plan.fits_cublas() && big.fits_cublas());
        assert!(!AttentionPlan::new(1, 1 << 31, 64, 4, 1).fits_cublas());
    }

    #[test]
    fn the_source_defines_every_softmax_kernel_the_launcher_names() {
        for name in SOFTMAX_KERNELS {
            assert!(
                SOFTMAX_SOURCE.contains(&format!("CAUSAL_SOFTMAX({name},")),
                "{name}"
            );
        }
    }
}
