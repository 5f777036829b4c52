//! Prune masks from score matrices, with the selection rules of the Wanda reference code
//! (`lib/prune.py` of locuslab/wanda, arXiv 2306.11695): per-output-channel top-k, N:M groups
//! along the input dimension, and the per-matrix threshold of its magnitude baseline.
//!
//! Scores and masks are `[in, out]` row-major (`s[i * out + o]`); `true` in a mask means "set this
//! weight to zero". Ties are broken by input index, lower index pruned first, as the reference's
//! stable ascending sort does; scores must be finite (a NaN has no place in an order).

use std::cmp::Ordering;

use rayon::prelude::*;

use super::{check_finite, check_shape, PruneError, Sparsity};
use crate::model::kernels::{transpose, transpose_into};

/// Weights pruned out of `len` at `ratio`: Python's `int(len * ratio)`, the product taken in f64.
///
/// It truncates, so a group keeps `len − floor(len × ratio)`: 576 inputs at 0.3 prune 172 and
/// keep 404, a measured sparsity of 0.2986. The f64 product is kept on purpose, rounding and all
/// (`100 × 0.29 = 28.999…` prunes 28), because that is what the reference computes.
pub fn prune_count(len: usize, ratio: f64) -> usize {
    (len as f64 * ratio) as usize
}

/// Weights each output channel of `in_features` inputs loses under the per-output rule at
/// `ratio`: [`prune_count`], at most all of them. The host's and the device's selections both
/// count with it, so their masks agree.
pub fn per_output_count(in_features: usize, ratio: f64) -> usize {
    prune_count(in_features, ratio).min(in_features)
}

/// The 0-based sorted position of the per-matrix threshold among `len ≥ 1` scores at `ratio`:
/// the reference's `int(len × ratio)`, at most the last. The host's and the device's selections
/// both take it, so their masks agree.
pub fn threshold_position(len: usize, ratio: f64) -> usize {
    prune_count(len, ratio).min(len - 1)
}

/// Orders finite scores ascending (`-0.0 == 0.0`, as in PyTorch), ties by the lower index.
fn by_score_then_index(scores: &[f32]) -> impl Fn(&u32, &u32) -> Ordering + '_ {
    move |&a, &b| {
        scores[a as usize]
            .partial_cmp(&scores[b as usize])
            .unwrap_or(Ordering::Equal)
            .then(a.cmp(&b))
    }
}

/// Per-output-channel unstructured mask: in every output channel, the `floor(in × ratio)`
/// lowest-scoring weights are pruned (Wanda's comparison group, and the reference's
/// `torch.sort(W_metric, dim=-1, stable=True)[1][:, :int(in * ratio)]`).
///
/// Exactly that many are pruned in every output channel whatever the ties; among equal scores the
/// lower input index goes first.
///
/// # Shapes
/// - `scores`: `[in, out]`, `dims = [in, out]` → mask `[in, out]`
pub fn per_output_mask(
    scores: &[f32],
    dims: [usize; 2],
    ratio: f64,
) -> Result<Vec<bool>, PruneError> {
    Sparsity::unstructured(ratio)?;
    check_shape("the score matrix", scores.len(), dims)?;
    let [in_features, out_features] = dims;
    let k = per_output_count(in_features, ratio);
    if k == 0 || out_features == 0 {
        check_finite("the score matrix", scores)?;
        return Ok(vec![false; scores.len()]);
    }
    // One contiguous column per output channel, so each selection reads memory in order.
    let columns = transpose(scores, in_features, out_features);
    let pruned = select_per_output(&columns, in_features, k, |_, s| s)?;
    Ok(transpose(&pruned, out_features, in_features))
}

/// The `k` lowest scores `score(i, column[i])` of each contiguous row of `columns` (`[out, in]`,
/// one output channel per row; ties by the lower input index), as a mask of the same layout.
/// The keys `(score, index)` are one integer, so selection needs no comparator; rows are
/// selected in parallel. A non-finite score is an error naming its place in `[in, out]`.
fn select_per_output(
    columns: &[f32],
    in_features: usize,
    k: usize,
    score: impl Fn(usize, f32) -> f32 + Sync,
) -> Result<Vec<bool>, PruneError> {
    let out_features = columns.len() / in_features;
    let mut pruned = vec![false; columns.len()];
    let first_bad = pruned
        .par_chunks_mut(in_features)
        .zip(columns.par_chunks(in_features))
        .enumerate()
        .map_init(
            || Vec::with_capacity(in_features),
            |keys: &mut Vec<u64>, (o, (pruned, column))| {
                keys.clear();
                let mut bad = None;
                keys.extend(column.iter().enumerate().map(|(i, &w)| {
                    let s = score(i, w);
                    if !s.is_finite() && bad.is_none() {
                        bad = Some(i * out_features + o);
                    }
                    (u64::from(order_key(s)) << 32) | i as u64
                }));
                if bad.is_some() {
                    return bad;
                }
                keys.select_nth_unstable(k - 1);
                for &key in &keys[..k] {
                    pruned[(key & 0xFFFF_FFFF) as usize] = true;
                }
                None
            },
        )
        .flatten()
        .min();
    match first_bad {
        None => Ok(pruned),
        Some(index) => Err(PruneError::NonFinite {
            what: "the score matrix",
            index,
        }),
    }
}

/// Prunes `weight` in place with the per-output-channel rule of [`per_output_mask`], scoring
/// each weight as `score(input, w)`, and returns the number of weights it zeroed. The same mask
/// as [`per_output_mask`] of the materialised scores, without materialising them: each output
/// channel's scores are formed where it is selected, and the mask is applied in bands.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`
pub fn prune_per_output(
    weight: &mut [f32],
    dims: [usize; 2],
    ratio: f64,
    score: impl Fn(usize, f32) -> f32 + Sync,
) -> Result<usize, PruneError> {
    Sparsity::unstructured(ratio)?;
    check_shape("the weight", weight.len(), dims)?;
    let [in_features, out_features] = dims;
    let k = per_output_count(in_features, ratio);
    if k == 0 || out_features == 0 {
        return Ok(0);
    }
    let mut columns = transpose(weight, in_features, out_features);
    let pruned = select_per_output(&columns, in_features, k, score)?;
    // Zeroed where the rows of both are contiguous, then transposed back in blocks: applying
    // `pruned` straight to `[in, out]` read it a column at a time, a page apart, and took more
    // than half of a Llama-2-7B layer's pruning.
    let zeroed = apply_mask(&mut columns, &pruned)?;
    drop(pruned);
    transpose_into(weight, &columns, out_features, in_features);
    Ok(zeroed)
}

/// N:M mask: in every group of `m` consecutive input channels of each output channel, the `n`
/// lowest scores are pruned (the reference's `torch.topk(tmp, prune_n, dim=1, largest=False)`).
///
/// `topk` leaves the order of ties unspecified; here the lower input index is pruned first.
///
/// # Shapes
/// - `scores`: `[in, out]`, `dims = [in, out]` with `in % m == 0` → mask `[in, out]`
pub fn nm_mask(
    scores: &[f32],
    dims: [usize; 2],
    n: usize,
    m: usize,
) -> Result<Vec<bool>, PruneError> {
    Sparsity::nm(n, m)?;
    check_shape("the score matrix", scores.len(), dims)?;
    check_finite("the score matrix", scores)?;
    let [in_features, out_features] = dims;
    if in_features % m != 0 {
        return Err(PruneError::IndivisibleGroups { in_features, n, m });
    }
    let mut mask = vec![false; scores.len()];
    if out_features == 0 {
        return Ok(mask);
    }
    // A group of m input rows is a contiguous `[m, out]` slab in this layout.
    mask.par_chunks_mut(m * out_features)
        .zip(scores.par_chunks(m * out_features))
        .for_each(|(mask_slab, score_slab)| {
            let mut group = vec![0.0f32; m];
            let mut idx: Vec<u32> = Vec::with_capacity(m);
            for o in 0..out_features {
                for (k, g) in group.iter_mut().enumerate() {
                    *g = score_slab[k * out_features + o];
                }
                idx.clear();
                idx.extend(0..m as u32);
                idx.sort_by(by_score_then_index(&group));
                for &k in &idx[..n] {
                    mask_slab[k as usize * out_features + o] = true;
                }
            }
        });
    Ok(mask)
}

/// Per-matrix threshold mask, the reference's magnitude baseline:
/// `thresh = sort(scores.flatten())[int(numel × ratio)]; mask = scores <= thresh`.
///
/// With `k = int(numel × ratio)` and `t` the score at sorted position `k` (0-based), every weight
/// scoring `≤ t` is pruned: the `k` below it, the one at position `k` itself and every other weight
/// tied with `t`. So at least `k + 1` weights go, and more where scores tie at `t` — common for
/// the magnitudes of a quantised checkpoint, which take few distinct values. The one deviation:
/// `ratio == 0` prunes nothing (the reference's `<=` would still prune the smallest weight(s)).
///
/// # Shapes
/// - `scores`: `[in, out]`, `dims = [in, out]` → mask `[in, out]`
pub fn matrix_threshold_mask(
    scores: &[f32],
    dims: [usize; 2],
    ratio: f64,
) -> Result<Vec<bool>, PruneError> {
    Sparsity::unstructured(ratio)?;
    check_shape("the score matrix", scores.len(), dims)?;
    check_finite("the score matrix", scores)?;
    if ratio == 0.0 || scores.is_empty() {
        return Ok(vec![false; scores.len()]);
    }
    let k = threshold_position(scores.len(), ratio);
    let thresh = kth_smallest_key(scores, k, |s| s);
    Ok(scores.par_iter().map(|&s| order_key(s) <= thresh).collect())
}

/// Prunes `weight` in place with the per-matrix threshold rule of [`matrix_threshold_mask`] on
/// the scores `score(w)`, and returns the number of weights it zeroed: the same weights as that
/// mask of the materialised scores, without materialising them.
///
/// # Shapes
/// - `weight`: any
pub fn prune_below_threshold(
    weight: &mut [f32],
    ratio: f64,
    score: impl Fn(f32) -> f32 + Sync,
) -> Result<usize, PruneError> {
    Sparsity::unstructured(ratio)?;
    if let Some(index) = super::first_where(weight, |w| !score(w).is_finite()) {
        return Err(PruneError::NonFinite {
            what: "the score matrix",
            index,
        });
    }
    if ratio == 0.0 || weight.is_empty() {
        return Ok(0);
    }
    let k = threshold_position(weight.len(), ratio);
    let thresh = kth_smallest_key(weight, k, &score);
    Ok(weight
        .par_chunks_mut(1 << 16)
        .map(|chunk| {
            let mut zeroed = 0;
            for w in chunk {
                let prune = order_key(score(*w)) <= thresh;
                *w = if prune { 0.0 } else { *w };
                zeroed += usize::from(prune);
            }
            zeroed
        })
        .sum())
}

/// The mask a per-output method (Wanda) uses for `sparsity`: [`per_output_mask`] for an
/// unstructured ratio, [`nm_mask`] for N:M.
///
/// # Shapes
/// - `scores`: `[in, out]`, `dims = [in, out]` → mask `[in, out]`
pub fn per_output_or_nm_mask(
    scores: &[f32],
    dims: [usize; 2],
    sparsity: Sparsity,
) -> Result<Vec<bool>, PruneError> {
    match sparsity {
        Sparsity::Unstructured { ratio } => per_output_mask(scores, dims, ratio),
        Sparsity::NM { n, m } => nm_mask(scores, dims, n, m),
    }
}

/// The mask of a per-matrix method (magnitude, RIA) for `sparsity`: [`matrix_threshold_mask`]
/// for an unstructured ratio, [`nm_mask`] for N:M.
///
/// # Shapes
/// - `scores`: `[in, out]`, `dims = [in, out]` → mask `[in, out]`
pub fn matrix_threshold_or_nm_mask(
    scores: &[f32],
    dims: [usize; 2],
    sparsity: Sparsity,
) -> Result<Vec<bool>, PruneError> {
    match sparsity {
        Sparsity::Unstructured { ratio } => matrix_threshold_mask(scores, dims, ratio),
        Sparsity::NM { n, m } => nm_mask(scores, dims, n, m),
    }
}

/// Zeroes the weights where `mask` is true and returns how many it zeroed.
///
/// # Shapes
/// - `weight` and `mask`: the same length (any layout, as long as both share it)
pub fn apply_mask(weight: &mut [f32], mask: &[bool]) -> Result<usize, PruneError> {
    if weight.len() != mask.len() {
        return Err(PruneError::LengthMismatch {
            what: "the mask",
            expected: weight.len(),
            got: mask.len(),
        });
    }
    Ok(weight
        .par_chunks_mut(1 << 16)
        .zip(mask.par_chunks(1 << 16))
        .map(|(w, m)| {
            let mut zeroed = 0;
            for (w, &m) in w.iter_mut().zip(m) {
                *w = if m { 0.0 } else { *w };
                zeroed += usize::from(m);
            }
            zeroed
        })
        .sum())
}

/// A key that orders finite floats as numbers (`-0.0` equal to `0.0`), for integer selection.
fn order_key(v: f32) -> u32 {
    // Adding +0.0 turns -0.0 into +0.0; negative floats order reversed by their bits.
    let bits = (v + 0.0).to_bits();
    if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// The `k`-th smallest order key (0-based) of `score(s)` over `scores`: a parallel histogram of
/// the keys' top 16 bits finds the bucket that holds it, and only that bucket is selected in.
fn kth_smallest_key(scores: &[f32], k: usize, score: impl Fn(f32) -> f32 + Sync) -> u32 {
    const BUCKETS: usize = 1 << 16;
    let histogram = scores
        .par_chunks(1 << 16)
        .fold(
            || vec![0usize; BUCKETS],
            |mut h, chunk| {
                for &s in chunk {
                    h[(order_key(score(s)) >> 16) as usize] += 1;
                }
                h
            },
        )
        .reduce(
            || vec![0usize; BUCKETS],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        );
    let mut below = 0;
    let mut bucket = 0;
    for (b, &count) in histogram.iter().enumerate() {
        if below + count > k {
            bucket = b as u32;
            break;
        }
        below += count;
    }
    let mut keys: Vec<u32> = scores
        .par_iter()
        .map(|&s| order_key(score(s)))
        .filter(|key| key >> 16 == bucket)
        .collect();
    *keys.select_nth_unstable(k - below).1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a mask as rows of `0`/`1` (one row per input channel) for readable asserts.
    fn render(mask: &[bool], out: usize) -> Vec<String> {
        mask.chunks(out)
            .map(|r| r.iter().map(|&b| if b { '1' } else { '0' }).collect())
            .collect()
    }

    // `[in = 3, out = 5]`: input channel i is row i, output channel o is column o.
    const S35: [f32; 15] = [
        3.0, 1.0, 5.0, 2.0, 9.0, //
        1.0, 4.0, 2.0, 2.0, 8.0, //
        2.0, 0.5, 7.0, 2.0, 7.0,
    ];

    /// The first hit across parallel blocks (of 2¹⁴ values), at either end and in between.
    #[test]
    fn the_first_non_finite_value_is_found_across_blocks() {
        use crate::prune::first_where;
        let bad = |v: f32| !v.is_finite();
        let mut values = vec![1.0f32; 100_000];
        assert_eq!(first_where(&values, bad), None);
        for (spots, first) in [
            (vec![90_000, 70_001], 70_001),
            (vec![99_999], 99_999),
            (vec![16_384, 16_383], 16_383),
            (vec![5, 0], 0),
        ] {
            let mut v = values.clone();
            for &s in &spots {
                v[s] = f32::NAN;
            }
            assert_eq!(first_where(&v, bad), Some(first), "{spots:?}");
        }
        values[42] = f32::INFINITY;
        assert_eq!(first_where(&values, bad), Some(42));
    }

    #[test]
    fn per_output_prunes_lowest_of_each_output_channel() {
        // in = 3, ratio 0.5 → int(1.5) = 1 pruned per output channel (column).
        let mask = per_output_mask(&S35, [3, 5], 0.5).unwrap();
        // col 0: [3,1,2] → row 1; col 1: [1,4,0.5] → row 2; col 2: [5,2,7] → row 1;
        // col 3: [2,2,2] all tied → row 0 (lowest index); col 4: [9,8,7] → row 2.
        assert_eq!(render(&mask, 5), ["00010", "10100", "01001"]);
        // ratio 0.7 → int(2.1) = 2 per column.
        let mask = per_output_mask(&S35, [3, 5], 0.7).unwrap();
        assert_eq!(render(&mask, 5), ["01110", "10111", "11001"]);
    }

    #[test]
    fn per_output_groups_are_columns_not_rows() {
        // One weight per output column, whatever the rows hold; reading the same buffer with
        // in and out swapped gives another mask.
        let mask = per_output_mask(&S35, [3, 5], 0.5).unwrap();
        let pruned_per_column: Vec<usize> = (0..5)
            .map(|o| (0..3).filter(|&i| mask[i * 5 + o]).count())
            .collect();
        assert_eq!(pruned_per_column, [1, 1, 1, 1, 1]);
        assert!(per_output_mask(&S35, [5, 3], 0.5).unwrap() != mask);
    }

    #[test]
    fn floor_rule_matches_smollm2_measurement() {
        assert_eq!(prune_count(576, 0.3), 172);
        assert_eq!(576 - prune_count(576, 0.3), 404);
        assert_eq!(prune_count(1536, 0.5), 768);
        assert_eq!(prune_count(100, 0.29), 28, "f64 rounding kept as in Python");
        assert_eq!(prune_count(3, 0.5), 1);
        // in = 576, out = 7: each output channel keeps exactly 404.
        let scores: Vec<f32> = (0..576 * 7).map(|k| ((k * 7919) % 1009) as f32).collect();
        let mask = per_output_mask(&scores, [576, 7], 0.3).unwrap();
        for o in 0..7 {
            let pruned = (0..576).filter(|&i| mask[i * 7 + o]).count();
            assert_eq!(pruned, 172);
        }
        let measured = mask.iter().filter(|&&b| b).count() as f64 / mask.len() as f64;
        assert!((measured - 0.2986).abs() < 1e-4, "{measured}");
    }

    #[test]
    fn per_output_ties_prune_lower_index_first() {
        // [in = 4, out = 2], every score equal: int(4 × 0.5) = 2 → rows 0 and 1.
        let mask = per_output_mask(&[1.0; 8], [4, 2], 0.5).unwrap();
        assert_eq!(render(&mask, 2), ["11", "11", "00", "00"]);
        // -0.0 and 0.0 are equal, so the index decides.
        let mask = per_output_mask(&[0.0, -0.0, 1.0], [3, 1], 0.4).unwrap();
        assert_eq!(render(&mask, 1), ["1", "0", "0"]);
    }

    /// Scores with many ties (few distinct values, as a quantised checkpoint's), negative
    /// zeros and negatives, `[in, out]`.
    fn tied_scores(len: usize) -> Vec<f32> {
        (0..len)
            .map(|k| match crate::prune::noise(k, 3) {
                v if v < -0.9 => -0.0,
                v if v < -0.8 => v,
                v => (v * 16.0).round() / 16.0 + 1.0,
            })
            .collect()
    }

    /// The parallel selections equal the serial definitions (a stable sort per column; the
    /// sorted matrix's k-th value as threshold) to the bit, ties and negative zeros included.
    #[test]
    fn parallel_selection_equals_the_serial_definition() {
        let dims = [301, 67];
        let scores = tied_scores(dims[0] * dims[1]);
        let by_value = |a: &f32, b: &f32| a.partial_cmp(b).unwrap();
        for ratio in [0.1, 0.5, 0.7, 0.99] {
            let k = prune_count(dims[0], ratio);
            let mut serial = vec![false; scores.len()];
            for o in 0..dims[1] {
                let mut column: Vec<(f32, usize)> =
                    (0..dims[0]).map(|i| (scores[i * dims[1] + o], i)).collect();
                column.sort_by(|a, b| by_value(&a.0, &b.0));
                for &(_, i) in &column[..k] {
                    serial[i * dims[1] + o] = true;
                }
            }
            assert_eq!(per_output_mask(&scores, dims, ratio).unwrap(), serial);

            let mut sorted = scores.clone();
            sorted.sort_by(by_value);
            let thresh = sorted[prune_count(scores.len(), ratio)];
            let serial: Vec<bool> = scores.iter().map(|&s| s <= thresh).collect();
            assert_eq!(matrix_threshold_mask(&scores, dims, ratio).unwrap(), serial);
        }
    }

    #[test]
    fn per_output_ratio_zero_and_errors() {
        assert!(per_output_mask(&S35, [3, 5], 0.0)
            .unwrap()
            .iter()
            .all(|&b| !b));
        assert!(matches!(
            per_output_mask(&S35, [5, 5], 0.5),
            Err(PruneError::ShapeMismatch { expected: 25, .. })
        ));
        assert_eq!(
            per_output_mask(&S35, [3, 5], 1.0),
            Err(PruneError::RatioOutOfRange { ratio: 1.0 })
        );
        let mut nan = S35;
        nan[7] = f32::NAN;
        assert_eq!(
            per_output_mask(&nan, [3, 5], 0.5),
            Err(PruneError::NonFinite {
                what: "the score matrix",
                index: 7
            })
        );
    }

    #[test]
    fn nm_2_4_on_8_by_3() {
        // [in = 8, out = 3]; groups are input rows 0..4 and 4..8 of each output column.
        #[rustfmt::skip]
        let scores: [f32; 24] = [
            // o0   o1    o2
            4.0,  1.0,  3.0,   // i0
            3.0,  2.0,  3.0,   // i1
            2.0,  3.0,  3.0,   // i2
            1.0,  4.0,  3.0,   // i3
            0.5,  9.0, -1.0,   // i4
            8.0,  0.1,  5.0,   // i5
            0.7,  7.0,  6.0,   // i6
            9.0,  0.2,  0.0,   // i7
        ];
        let mask = nm_mask(&scores, [8, 3], 2, 4).unwrap();
        // o0 group 0: lowest two are i3 (1), i2 (2); group 1: i4 (0.5), i6 (0.7).
        // o1 group 0: i0, i1; group 1: i5 (0.1), i7 (0.2).
        // o2 group 0: all tied → i0, i1; group 1: i4 (-1), i7 (0).
        assert_eq!(
            render(&mask, 3),
            ["011", "011", "100", "100", "101", "010", "100", "011"]
        );
        for o in 0..3 {
            for g in 0..2 {
                let pruned = (0..4).filter(|&k| mask[(g * 4 + k) * 3 + o]).count();
                assert_eq!(pruned, 2);
            }
        }
        // 1:4 keeps three of four.
        let mask = nm_mask(&scores, [8, 3], 1, 4).unwrap();
        assert_eq!(
            render(&mask, 3),
            ["011", "000", "000", "100", "101", "010", "000", "000"]
        );
    }

    #[test]
    fn nm_4_8_and_errors() {
        let scores: Vec<f32> = (0..16 * 3).map(|k| ((k * 37) % 17) as f32).collect();
        let mask = nm_mask(&scores, [16, 3], 4, 8).unwrap();
        assert_eq!(mask.iter().filter(|&&b| b).count(), 2 * 3 * 4);
        assert_eq!(
            nm_mask(&scores[..12 * 3], [12, 3], 4, 8),
            Err(PruneError::IndivisibleGroups {
                in_features: 12,
                n: 4,
                m: 8
            })
        );
        assert_eq!(
            nm_mask(&scores, [16, 3], 4, 8).map(|m| m.len()),
            Ok(48),
            "`[16, 3]` splits into groups of 8 along the input"
        );
        // [3, 16] has an input dimension that is no multiple of 8: the groups are not along out.
        assert!(nm_mask(&scores, [3, 16], 4, 8).is_err());
        assert_eq!(
            nm_mask(&scores, [16, 3], 4, 4),
            Err(PruneError::InvalidNm { n: 4, m: 4 })
        );
        let err = nm_mask(&scores[..12 * 3], [12, 3], 4, 8).unwrap_err();
        assert_eq!(
            err.to_string(),
            "input dimension 12 is not a multiple of the group size of pattern `4:8`"
        );
    }

    #[test]
    fn matrix_threshold_prunes_ties_at_the_threshold() {
        // numel 15, ratio 0.2 → k = 3; sorted: 0.5 1 1 2 2 2 2 2 ... → t = sorted[3] = 2,
        // so every score ≤ 2 goes: 8 weights, not 3.
        let mask = matrix_threshold_mask(&S35, [3, 5], 0.2).unwrap();
        assert_eq!(render(&mask, 5), ["01010", "10110", "11010"]);
        // ratio 0.1 → k = 1, t = sorted[1] = 1 → 0.5, 1, 1 pruned (k + 1 plus one tie).
        let mask = matrix_threshold_mask(&S35, [3, 5], 0.1).unwrap();
        assert_eq!(render(&mask, 5), ["01000", "10000", "01000"]);
        // Distinct scores: exactly k + 1.
        let distinct: Vec<f32> = (0..15).map(|k| ((k * 7) % 15) as f32).collect();
        let mask = matrix_threshold_mask(&distinct, [3, 5], 0.5).unwrap();
        assert_eq!(mask.iter().filter(|&&b| b).count(), 7 + 1);
        // Ratio 0 prunes nothing.
        assert!(matrix_threshold_mask(&S35, [3, 5], 0.0)
            .unwrap()
            .iter()
            .all(|&b| !b));
    }

    #[test]
    fn apply_mask_zeroes_and_counts() {
        let mut w = [1.0f32, -2.0, 3.0, 4.0, 5.0, 6.0];
        let n = apply_mask(&mut w, &[true, false, false, true, true, false]).unwrap();
        assert_eq!(n, 3);
        assert_eq!(w, [0.0, -2.0, 3.0, 0.0, 0.0, 6.0]);
        assert_eq!(
            apply_mask(&mut w, &[true]).unwrap_err().to_string(),
            "the mask has 1 values, expected 6"
        );
    }

    #[test]
    fn dispatch_follows_the_pattern() {
        let s: Vec<f32> = (0..24).map(|k| ((k * 5) % 11) as f32).collect();
        assert_eq!(
            per_output_or_nm_mask(&s, [8, 3], Sparsity::NM { n: 2, m: 4 }),
            nm_mask(&s, [8, 3], 2, 4)
        );
        assert_eq!(
            per_output_or_nm_mask(&s, [8, 3], Sparsity::Unstructured { ratio: 0.5 }),
            per_output_mask(&s, [8, 3], 0.5)
        );
    }
}
