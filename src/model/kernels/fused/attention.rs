//! The fused path's attention on the host: rotary embeddings in place, and a block of query rows
//! attending to its keys under a causal, windowed or packed mask.

use super::*;

/// Rotary tables of one call: the first `half` entries of every `stride`-long row are the
/// cosines (sines) of position `row`, one per pair of rotated dimensions (`half` is
/// `head_dim / 2`, fewer where only part of a head rotates, GPT-NeoX); the rows of the
/// activations are consecutive sequences of `seq` positions each.
#[derive(Clone, Copy)]
pub(super) struct RopeTables<'a> {
    pub(super) cos: &'a [f32],
    pub(super) sin: &'a [f32],
    pub(super) stride: usize,
    pub(super) half: usize,
    pub(super) seq: usize,
    /// Which rows each row sees: `None` for causal attention over its sequence.
    pub(super) packing: Option<Packing<'a>>,
}

/// Rotates the first `2 · t.half` dimensions of every head of `x` in place, the rest passing
/// through: pair `i` is `(i, i + half)` (HF "rotate half" layout), or `(2i, 2i + 1)` where
/// `interleaved` (GLM); rows are positions `0..seq` of consecutive sequences.
///
/// # Shapes
/// - `x`: `[sequences * seq, heads * head_dim]`
pub(super) fn rope(x: &mut [f32], heads: usize, head_dim: usize, t: RopeTables, interleaved: bool) {
    let half = t.half;
    for (row_index, row) in x.chunks_mut(heads * head_dim).enumerate() {
        let pos = row_index % t.seq;
        let (c, s) = (
            &t.cos[pos * t.stride..][..half],
            &t.sin[pos * t.stride..][..half],
        );
        for head in row.chunks_mut(head_dim) {
            if interleaved {
                for (i, pair) in head[..2 * half].chunks_exact_mut(2).enumerate() {
                    let (a, b) = (pair[0], pair[1]);
                    pair[0] = a * c[i] - b * s[i];
                    pair[1] = b * c[i] + a * s[i];
                }
            } else {
                let (x1, x2) = head[..2 * half].split_at_mut(half);
                for i in 0..half {
                    let (a, b) = (x1[i], x2[i]);
                    x1[i] = a * c[i] - b * s[i];
                    x2[i] = b * c[i] + a * s[i];
                }
            }
        }
    }
}

/// Every query row of `q` attended, its row replaced by the attention output: the rows are
/// consecutive sequences of `tables.seq` positions each, or, after `start` cached positions,
/// positions `start..start + seq` of one sequence whose keys and values `k` and `v` hold from
/// position 0. One job per (sequence, kv head, block of query rows): many more jobs than cores,
/// so the blocks late in a sequence (more keys) do not leave a core idle.
///
/// # Shapes
/// - `q`: `[rows, heads · head_dim]`; `k`, `v`: `[start + rows, kv_heads · head_dim]`
pub(super) fn attend_rows(
    q: &mut [f32],
    k: &[f32],
    v: &[f32],
    start: usize,
    d: &Dims<'_>,
    tables: RopeTables,
    window: Option<usize>,
) {
    let seq = tables.seq;
    let (q_width, kv_width) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
    let sequences = q.len() / q_width / seq.max(1);
    assert!(start == 0 || sequences == 1, "a cache holds one sequence");
    let blocks = seq.div_ceil(ATTENTION_ROWS);
    let jobs: Vec<(usize, usize, usize)> = (0..sequences)
        .flat_map(|s| (0..d.kv_heads).flat_map(move |g| (0..blocks).map(move |b| (s, g, b))))
        .collect();
    let keys = (start + seq) * kv_width;
    let outputs: Vec<Vec<f32>> = jobs
        .par_iter()
        .map(|&(s, g, b)| {
            let first = start + b * ATTENTION_ROWS;
            attend_block(
                &q[s * seq * q_width..][..seq * q_width],
                start,
                &k[s * keys..][..keys],
                &v[s * keys..][..keys],
                g,
                first..first + ATTENTION_ROWS.min(start + seq - first),
                d,
                match tables.packing {
                    Some(p) => Mask::Packed(p),
                    None => Mask::Causal { window },
                },
            )
        })
        .collect();
    let group_width = q_width / d.kv_heads;
    for (&(s, g, b), out) in jobs.iter().zip(&outputs) {
        let first_row = s * seq + b * ATTENTION_ROWS;
        for (row, src) in q[first_row * q_width..]
            .chunks_mut(q_width)
            .zip(out.chunks(group_width))
        {
            row[g * group_width..(g + 1) * group_width].copy_from_slice(src);
        }
    }
}

/// Causal grouped-query attention of the query heads that share kv head `group`, for the
/// query rows `first..first + rows` (`rows` below; `q`'s first row is position `q_start`),
/// which see the keys `0..first + rows`, or
/// only the last `window` of them up to their own position when the attention slides. With
/// ALiBi each head's scaled scores get its slope times the key's position added, the
/// position in the unpacked sequence where continuations are packed.
///
/// The group's queries are stacked position-major (row `r · per_group + h` is head `h` at
/// position `first + r`), so one product per block serves every head of the group, and the
/// output rows come out in the attention output's own layout.
///
/// # Shapes
/// - `q`: `[seq, heads * head_dim]`, `k`, `v`: `[q_start + seq, kv_heads * head_dim]`
/// - returns `[rows, per_group * head_dim]`, the group's columns of the attention output
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_block(
    q: &[f32],
    q_start: usize,
    k: &[f32],
    v: &[f32],
    group: usize,
    rows: std::ops::Range<usize>,
    d: &Dims<'_>,
    mask: Mask,
) -> Vec<f32> {
    let (first, rows) = (rows.start, rows.len());
    let hd = d.head_dim;
    let per_group = d.heads / d.kv_heads;
    let (q_stride, kv_stride, width) = (d.heads * hd, d.kv_heads * hd, per_group * hd);
    // Soft-capped scores and those ALiBi biases are scaled first; the softmax then scales by
    // one.
    let prescaled = d.softcap.is_some() || d.alibi.is_some();
    let scale = if prescaled { 1.0 } else { d.scale };
    let keys = first + rows;
    let mut stacked = Vec::with_capacity(rows * width);
    for r in first..keys {
        stacked.extend_from_slice(&q[(r - q_start) * q_stride + group * width..][..width]);
    }
    let k_t = View {
        data: &k[group * hd..],
        rows: hd,
        cols: keys,
        row_stride: 1,
        col_stride: kv_stride,
    };
    let stacked_rows = rows * per_group;
    let mut scores = vec![0.0f32; stacked_rows * keys];
    matmul(
        &mut scores,
        keys,
        false,
        View::dense(&stacked, stacked_rows, hd),
        k_t,
        false,
    );
    let mut live = Vec::new();
    for (i, row) in scores.chunks_mut(keys).enumerate() {
        let visible = first + i / per_group + 1;
        if let Some(cap) = d.softcap {
            vecmath::soft_cap(&mut row[..visible], d.scale, cap);
        }
        if let Some(slopes) = d.alibi {
            let slope = slopes[group * per_group + i % per_group];
            // Packed, the row's own branch follows the shared context in its sequence.
            let (own, shared) = match mask {
                Mask::Packed(p) => {
                    let own = p.own_start[visible - 1];
                    (own, p.prefix.min(own))
                }
                Mask::Causal { .. } => (0, 0),
            };
            let prescale = if d.softcap.is_some() { 1.0 } else { d.scale };
            let bias = |keys: &mut [f32], first: usize| {
                for (j, s) in keys.iter_mut().enumerate() {
                    *s = *s * prescale + slope * (first + j) as f32;
                }
            };
            let (context, own_keys) = row[..visible].split_at_mut(own);
            bias(context, 0);
            bias(own_keys, shared);
        }
        if let Mask::Packed(p) = mask {
            // The shared context and the row's own branch, side by side in their order: the
            // softmax of exactly the keys the unpacked sequence has.
            let own = p.own_start[visible - 1];
            let shared = p.prefix.min(own);
            live.clear();
            live.extend_from_slice(&row[..shared]);
            live.extend_from_slice(&row[own..visible]);
            let n = live.len();
            vecmath::softmax_row(&mut live, n, scale);
            row[..shared].copy_from_slice(&live[..shared]);
            row[shared..own].fill(0.0);
            row[own..visible].copy_from_slice(&live[shared..]);
            row[visible..].fill(0.0);
            continue;
        }
        // A sliding window hides the keys before its start, as the causal mask the later ones.
        let start = match mask {
            Mask::Causal { window: Some(w) } => visible.saturating_sub(w),
            _ => 0,
        };
        row[..start].fill(0.0);
        vecmath::softmax_row(&mut row[start..], visible - start, scale);
    }
    let v_block = View {
        data: &v[group * hd..],
        rows: keys,
        cols: hd,
        row_stride: kv_stride,
        col_stride: 1,
    };
    // `stacked` is free again: it takes the output, in the same layout.
    matmul(
        &mut stacked,
        hd,
        false,
        View::dense(&scores, stacked_rows, keys),
        v_block,
        false,
    );
    stacked
}

/// The keys each query row of [`attend_block`] sees.
#[derive(Clone, Copy)]
pub(super) enum Mask<'a> {
    /// Its position and the ones before, or only the last `window` of them.
    Causal { window: Option<usize> },
    /// The shared context and its own branch.
    Packed(Packing<'a>),
}

/// Continuations that share a context, packed into one sequence: the context's `prefix` rows,
/// then each branch's rows. Row `r` sees the context and the rows of its own branch from
/// `own_start[r]` (0 for a context row) up to itself.
#[derive(Clone, Copy)]
pub(super) struct Packing<'a> {
    pub(super) prefix: usize,
    pub(super) own_start: &'a [usize],
}
