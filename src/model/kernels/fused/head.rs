//! The fused kernels' LM head: logits of the residual stream after the last layer, and the
//! next-token NLLs of an evaluation, a pass of rows over blocks of the vocabulary at a time.

use std::ops::Range;

use burn::backend::ndarray::NdArrayTensor;
use burn::prelude::*;
use rayon::prelude::*;

use super::{
    head_ref, hold_head, matmul, norm_rows, vecmath, HeadRef, HeadWeights, Held, Nd, View,
};

impl HeadRef<'_> {
    /// Logits of the residual stream `x` after the last layer, written into `out`.
    ///
    /// # Shapes
    /// - `x`: `[seq, hidden]`, `out`: `[seq, vocab]`
    pub(super) fn logits_into(&self, x: &[f32], out: &mut [f32]) {
        let seq = x.len() / self.hidden.max(1);
        self.block_logits(&self.normed(x), seq, 0..self.vocab, out);
    }

    /// The final norm of the residual stream `x`.
    ///
    /// # Shapes
    /// - `x`: `[seq, hidden]` → `[seq, hidden]`
    fn normed(&self, x: &[f32]) -> Vec<f32> {
        let mut normed = vec![0.0f32; x.len()];
        norm_rows(x, self.norm, self.eps, &mut normed);
        normed
    }

    /// The logits of the vocabulary entries `entries` from normed rows, soft-capped where the
    /// model caps them: each element is the same as in the whole row's (gemm's blocking of the
    /// inner dimension depends on it alone).
    ///
    /// # Shapes
    /// - `normed`: `[seq, hidden]`, `out`: `[seq, entries.len()]`
    fn block_logits(&self, normed: &[f32], seq: usize, entries: Range<usize>, out: &mut [f32]) {
        let width = entries.len();
        let a = View::dense(normed, seq, self.hidden);
        match &self.lm_head {
            Some(head) => {
                let b = View {
                    data: &head.weight[entries.start..],
                    rows: head.inputs,
                    cols: width,
                    row_stride: head.outputs,
                    col_stride: 1,
                };
                matmul(out, width, false, a, b, true);
                if let Some(bias) = head.bias {
                    for row in out.chunks_mut(width.max(1)) {
                        row.iter_mut()
                            .zip(&bias[entries.clone()])
                            .for_each(|(o, b)| *o += b);
                    }
                }
            }
            None => {
                let b = View::transposed(
                    &self.embed[entries.start * self.hidden..],
                    self.hidden,
                    width,
                );
                matmul(out, width, false, a, b, true);
            }
        }
        if let Some(s) = self.logit_scale {
            out.par_iter_mut().for_each(|l| *l = s.apply(*l));
        }
        if let Some(cap) = self.final_softcap {
            out.par_chunks_mut(width.max(1))
                .for_each(|row| vecmath::soft_cap(row, 1.0, cap));
        }
    }
}

/// Logits an evaluation holds at once are at most `HEAD_ROWS` rows' worth
/// ([`Kernels::hidden_nll`]).
pub const HEAD_ROWS: usize = 64;

/// Rows of the residual stream whose next-token NLLs one pass over the LM head computes.
const HEAD_PASS_ROWS: usize = 512;

/// [`Kernels::hidden_nll`] of the fused kernels.
///
/// # Shapes
/// - `hidden`: `[1, seq, hidden]`, `window`: `seq` ids
pub(super) fn fused_hidden_nll(
    head: &HeadWeights<Nd>,
    x: &Tensor<Nd, 3>,
    window: &[u32],
) -> Option<f64> {
    let [batch, seq, width] = x.dims();
    if batch != 1 || window.len() != seq || width != head.embed.dims()[1] {
        return None;
    }
    // The last position predicts nothing.
    let per_token = fused_token_nlls(head, x.clone().into_primitive().tensor(), &window[1..])?;
    Some(per_token.iter().sum())
}

/// The next-token NLL of each of the first `targets.len()` rows of the residual stream `x`
/// (any rank, `hidden` values per row) for its target, through the final norm and LM head.
/// `None` when the shapes do not fit or a target is out of the vocabulary.
///
/// Up to [`HEAD_PASS_ROWS`] rows go through the head together, a block of the vocabulary at a
/// time, holding at most [`HEAD_ROWS`] rows' worth of logits: the head is read once per pass,
/// not once per 64 rows (Gemma 3's 262,144 × 640 head is 671 MB). The softmax denominators
/// run across the blocks ([`vecmath::SoftmaxSum`]).
pub(super) fn fused_token_nlls(
    head: &HeadWeights<Nd>,
    x: NdArrayTensor,
    targets: &[u32],
) -> Option<Vec<f64>> {
    let [vocab, hidden_size] = head.embed.dims();
    if targets.iter().any(|&t| t as usize >= vocab) {
        return None;
    }
    let mut held = Held::new(None);
    let head_index = hold_head(&mut held, head);
    held.tensors.push(x);
    let x_index = held.tensors.len() - 1;
    let head = head_ref(&held, &head_index)?;
    let rows = held.slice(x_index)?.get(..targets.len() * hidden_size)?;
    let pass_rows = targets.len().clamp(1, HEAD_PASS_ROWS);
    // Whole multiples of 256 entries (the exponentials' block), at least one.
    let block = (HEAD_ROWS * vocab / pass_rows / 256 * 256).clamp(256.min(vocab), vocab.max(1));
    let mut logits = vec![0.0f32; pass_rows * block];
    let mut per_token = Vec::with_capacity(targets.len());
    for (chunk, targets) in rows
        .chunks(pass_rows * hidden_size)
        .zip(targets.chunks(pass_rows))
    {
        let n = targets.len();
        let normed = head.normed(chunk);
        let mut sums = vec![vecmath::SoftmaxSum::default(); n];
        let mut target_logits = vec![0.0f32; n];
        for start in (0..vocab).step_by(block) {
            let width = block.min(vocab - start);
            let out = &mut logits[..n * width];
            head.block_logits(&normed, n, start..start + width, out);
            sums.par_iter_mut()
                .zip(target_logits.par_iter_mut())
                .zip(out.par_chunks(width))
                .zip(targets.par_iter())
                .for_each(|(((sum, logit), row), &target)| {
                    vecmath::softmax_sum_add(sum, row);
                    if let Some(v) = (target as usize)
                        .checked_sub(start)
                        .and_then(|i| row.get(i))
                    {
                        *logit = *v;
                    }
                });
        }
        per_token.extend(sums.iter().zip(&target_logits).map(|(s, &l)| s.nll(l)));
    }
    Some(per_token)
}
