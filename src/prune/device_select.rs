//! Wanda's and magnitude's unstructured selection on the weights' own device, in Burn's tensor
//! ops: on a GPU the weights then never travel to the host and back (2.9 s of a 1B fp16 cell
//! on an H200, `results/gpu-h200-2026-11-27-cublas/`), where the reference sorts on the device.
//!
//! Burn 0.21 sorts on the host on CubeCL, so nothing here sorts: the `k`-th smallest score of
//! each comparison group is found by bisection on the scores' values, each step one comparison
//! and one count over the scores, until every group's interval has closed to two neighbouring
//! floats. The selection is that of the host functions to the bit ([`super::mask`]'s
//! `per_output_mask` and `matrix_threshold_mask`, ties included); where it cannot run (a score
//! that is not finite or above half of `f32::MAX`, a bisection that has not closed within its
//! steps) it returns `None` and the caller runs the host path, which also names a weight whose
//! score is not finite.
//!
//! On an H200 (`results/gpu-h200-2026-11-27-select/`) the cells' masks were the host's to the
//! bit; one Llama-2-7B-shaped layer was selected 2.7× (f32) and 1.7× (fp16) faster than by the
//! round trip, but within a whole cell the two took about the same time: some 400 small
//! operations per piece bound the bisection (12–19 ms even for a 135M model's linears). Since
//! then a step takes 8 operations instead of 12 ([`midpoint`] in two, no negated mask), about
//! 290 a piece, ties no longer go through a cumulative sum ([`nth_true_row`]), and weights of
//! the same input rows can share one selection ([`per_output_zeros_together`]: q, k, v and o
//! of a 1B layer). The next call (`results/gpu-h200-2026-11-27-load/`) still spent 1.5 s of a
//! 1B cell and 3.4 s of a 7B × 8 one here, 24–33 ms a piece: CubeCL (without autotuning)
//! reduces a column with one thread looping over all its rows, so each step's count ran on a
//! thousand threads. Counts and maxima now take two stages ([`column_blocks`]); not yet
//! measured on a GPU. On CUDA, both rules now run selection kernels of our own instead
//! (`Kernels::lowest_scores`: a radix select on the scores' bits), and this bisection where
//! those cannot run (no NVRTC) and under `WANDA_DEVICE_SELECT=bisection`.

use burn::prelude::*;
use burn::tensor::{DType, FloatDType};

use super::mask::{per_output_count, threshold_position};
use super::report::MatrixSparsity;
use super::{Method, MethodOptions, PruneError, Sparsity};
use crate::model::decoder::LinearInput;
use crate::model::kernels::{kernels, Lowest};

/// Bisection steps between two checks of whether every group's interval has closed (each check
/// waits for the device).
const STEPS_PER_CHECK: usize = 8;

/// Most bisection steps: about 24 for the mantissa plus one per octave between a group's largest
/// score and its threshold, so only a group whose threshold is some 10⁻⁶⁰ of its largest score
/// (denormal territory) runs out, and then the host selects.
const MAX_STEPS: usize = 224;

/// Weights a selection scores at once (64 MiB of f32 scores): the device holds one piece's
/// scores, comparison and counts, whatever the size of the matrix.
pub const PIECE: usize = 1 << 24;

/// The Wanda score `|W_ij| · norms_i` in f32, as the host's `wanda_scores` computes it, of the
/// weights `w` (all input rows, any of the columns).
///
/// # Shapes
/// - `w`: `[in, columns]`, `norms`: `[in, 1]` → `[in, columns]`
pub fn wanda_score<B: Backend>(w: Tensor<B, 2>, norms: &Tensor<B, 2>) -> Tensor<B, 2> {
    let dims = w.dims();
    w.cast(FloatDType::F32).abs() * norms.clone().expand(dims)
}

/// `norms` per input channel as an `[in, 1]` f32 column on `device`, for [`wanda_score`]:
/// created in f32 whatever the device's default float type (a half-precision default would
/// round the norms, and the scores would no longer be the host's).
pub fn norms_column<B: Backend>(norms: &[f32], device: &B::Device) -> Tensor<B, 2> {
    let data = TensorData::new(norms.to_vec(), [norms.len(), 1]);
    Tensor::from_data(data, (device, DType::F32))
}

/// The magnitude score `|W|` in f32.
pub fn magnitude_score<B: Backend>(w: Tensor<B, 2>) -> Tensor<B, 2> {
    w.cast(FloatDType::F32).abs()
}

/// The weights to zero under the per-output-channel rule (Wanda's): in every column of
/// `weight`, the `floor(in × ratio)` lowest `score`s, ties by the lower input index; `None`
/// where the device cannot select (see the module's doc). Columns are scored and selected a
/// [`PIECE`] at a time.
///
/// # Shapes
/// - `weight`: `[in, out]`; `score`: `[in, columns]` → the same, non-negative → `[in, out]`,
///   `true`: zero it
pub fn per_output_zeros<B: Backend>(
    weight: &Tensor<B, 2>,
    ratio: f64,
    score: impl Fn(Tensor<B, 2>) -> Tensor<B, 2>,
) -> Option<Tensor<B, 2, Bool>> {
    per_output_zeros_in(PIECE, weight, ratio, score)
}

/// [`per_output_zeros`] of the scores of several weights with the same input rows, in one
/// selection over them side by side: the rule is per column, so each weight gets its own
/// selection, while a GPU runs the bisection's ~290 small operations once instead of once per
/// weight. The caller keeps them within [`PIECE`] values together; `None` where the device
/// cannot select.
///
/// # Shapes
/// - each of `scores`: `[in, cols_i]`, non-negative → each `[in, cols_i]`
pub fn per_output_zeros_together<B: Backend>(
    scores: Vec<Tensor<B, 2>>,
    ratio: f64,
) -> Option<Vec<Tensor<B, 2, Bool>>> {
    let rows = scores.first()?.dims()[0];
    let widths: Vec<usize> = scores.iter().map(|s| s.dims()[1]).collect();
    let side_by_side = Tensor::cat(scores, 1);
    let piece = side_by_side.dims().iter().product::<usize>().max(1);
    let zeros = per_output_zeros_in(piece, &side_by_side, ratio, |s| s)?;
    let mut start = 0;
    Some(
        widths
            .into_iter()
            .map(|width| {
                let columns = start..start + width;
                start += width;
                zeros.clone().slice([0..rows, columns])
            })
            .collect(),
    )
}

/// [`per_output_zeros`] scoring `piece` weights at once.
fn per_output_zeros_in<B: Backend>(
    piece: usize,
    weight: &Tensor<B, 2>,
    ratio: f64,
    score: impl Fn(Tensor<B, 2>) -> Tensor<B, 2>,
) -> Option<Tensor<B, 2, Bool>> {
    let [rows, cols] = weight.dims();
    let k = per_output_count(rows, ratio);
    let step = (piece / rows.max(1)).max(1);
    let mut pieces = Vec::with_capacity(cols.div_ceil(step));
    for c0 in (0..cols).step_by(step) {
        let scores = score(weight.clone().slice([0..rows, c0..(c0 + step).min(cols)]));
        if !all_in_range(&scores) {
            return None;
        }
        pieces.push(if k == 0 {
            scores.zeros_like().bool()
        } else {
            per_column_zeros(scores, k)?
        });
    }
    if pieces.is_empty() {
        return Some(weight.zeros_like().bool());
    }
    Some(Tensor::cat(pieces, 1))
}

/// Per column of finite, non-negative `scores`, the `k` lowest (`1 ≤ k ≤ rows`), ties by the
/// lower row.
///
/// # Shapes
/// - `scores`: `[rows, cols]` → `[rows, cols]`
fn per_column_zeros<B: Backend>(scores: Tensor<B, 2>, k: usize) -> Option<Tensor<B, 2, Bool>> {
    let dims = scores.dims();
    let count = |t: &Tensor<B, 2>| column_count(scores.clone().lower_equal(t.clone().expand(dims)));
    let threshold = kth_smallest(column_max(scores.clone()), k, count)?.expand(dims);
    let at_most = scores.clone().lower_equal(threshold.clone());
    let too_many = column_count(at_most.clone()).greater_elem(k as i64);
    if !any(too_many) {
        return Some(at_most);
    }
    // Ties at the threshold that cross `k`: those below it, then the first `wanted` of the
    // equal ones (at least one: fewer than `k` lie below the `k`-th smallest).
    let below = scores.clone().lower(threshold.clone());
    let wanted = column_count(below.clone()).neg().add_scalar(k as i64);
    let equal = scores.equal(threshold);
    let rows = row_index::<B>(dims, &equal.device());
    let last = nth_true_row(equal.clone(), rows.clone(), wanted);
    let first_equal = equal.bool_and(rows.lower_equal(last.expand(dims)));
    Some(below.bool_or(first_equal))
}

/// Each element's row, `[rows, cols]`.
fn row_index<B: Backend>(dims: [usize; 2], device: &B::Device) -> Tensor<B, 2, Int> {
    Tensor::<B, 1, Int>::arange(0..dims[0] as i64, device)
        .reshape([dims[0], 1])
        .expand(dims)
}

/// Per column of `mask`, the row of its `n`-th true value (`1 ≤ n ≤` the column's true values):
/// the smallest `r` with `n` true values in rows `0..=r`, by bisection on `r`. A fixed
/// `⌈log₂ rows⌉` steps and no wait for the device (a cumulative sum along the rows, the plain
/// way, is a kernel whose every element sums all the rows above it on CubeCL: 23 ms a call in a
/// 1B-shaped cell on an H200).
///
/// # Shapes
/// - `mask`, `rows` (each element's row): `[rows, cols]`; `n`: `[1, cols]` → `[1, cols]`
fn nth_true_row<B: Backend>(
    mask: Tensor<B, 2, Bool>,
    rows: Tensor<B, 2, Int>,
    n: Tensor<B, 2, Int>,
) -> Tensor<B, 2, Int> {
    let dims = mask.dims();
    // The row of each true value, `rows` (beyond every row) for the others.
    let at = rows.mask_fill(mask.bool_not(), dims[0] as i64);
    // lo: fewer than n true values in rows 0..=lo; hi: at least n. Each step halves hi − lo.
    let mut lo = n.zeros_like().sub_scalar(1);
    let mut hi = n.zeros_like().add_scalar(dims[0] as i64 - 1);
    for _ in 0..usize::BITS - dims[0].leading_zeros() {
        // lo + hi ≥ 0 wherever hi − lo ≥ 2, so the division rounds down there; where the two
        // are neighbours already, mid is one of them and nothing moves.
        let mid = (lo.clone() + hi.clone()).div_scalar(2);
        let enough =
            column_count(at.clone().lower_equal(mid.clone().expand(dims))).greater_equal(n.clone());
        hi = hi.mask_where(enough.clone(), mid.clone());
        lo = mid.mask_where(enough, lo);
    }
    hi
}

/// The weights to zero under the per-matrix threshold rule (magnitude's): every `score` at or
/// below the `floor(len × ratio)`-th smallest (0-based, at most the last), so ties at the
/// threshold all go, as the reference's `W_metric <= thresh`; nothing for a ratio of 0; `None`
/// where the device cannot select. Rows are scored a [`PIECE`] at a time, at every step.
///
/// # Shapes
/// - `weight`: `[rows, cols]`; `score`: `[r, cols]` → the same, non-negative → `[rows, cols]`,
///   `true`: zero it
pub fn matrix_threshold_zeros<B: Backend>(
    weight: &Tensor<B, 2>,
    ratio: f64,
    score: impl Fn(Tensor<B, 2>) -> Tensor<B, 2>,
) -> Option<Tensor<B, 2, Bool>> {
    matrix_threshold_zeros_in(PIECE, weight, ratio, score)
}

/// [`matrix_threshold_zeros`] scoring `piece` weights at once.
fn matrix_threshold_zeros_in<B: Backend>(
    piece: usize,
    weight: &Tensor<B, 2>,
    ratio: f64,
    score: impl Fn(Tensor<B, 2>) -> Tensor<B, 2>,
) -> Option<Tensor<B, 2, Bool>> {
    let [rows, cols] = weight.dims();
    let step = (piece / cols.max(1)).max(1);
    let pieces = || {
        (0..rows)
            .step_by(step)
            .map(|r0| score(weight.clone().slice([r0..(r0 + step).min(rows), 0..cols])))
    };
    let mut top = Vec::new();
    for scores in pieces() {
        if !all_in_range(&scores) {
            return None;
        }
        top.push(column_max(scores).max_dim(1));
    }
    let len = rows * cols;
    if ratio == 0.0 || len == 0 {
        return Some(weight.zeros_like().bool());
    }
    let k = threshold_position(len, ratio) + 1;
    let count = |t: &Tensor<B, 2>| {
        pieces()
            .map(|s| {
                let dims = s.dims();
                s.lower_equal(t.clone().expand(dims))
                    .int()
                    .sum()
                    .reshape([1, 1])
            })
            .reduce(|a, b| a + b)
            .expect("a non-empty matrix has a piece")
    };
    let threshold = kth_smallest(Tensor::cat(top, 1).max_dim(1), k, count)?;
    let zeros: Vec<_> = pieces()
        .map(|s| {
            let dims = s.dims();
            s.lower_equal(threshold.clone().expand(dims))
        })
        .collect();
    Some(Tensor::cat(zeros, 0))
}

/// The sparsity of `weight` once `zeros` are zeroed, measured on its device (only the
/// per-column counts come back): the same figures as [`MatrixSparsity::measure`] of the pruned
/// host copy.
///
/// # Shapes
/// - `weight`, `zeros`: `[in, out]`
pub fn measure_on_device<B: Backend>(
    weight: &Tensor<B, 2>,
    zeros: &Tensor<B, 2, Bool>,
) -> MatrixSparsity {
    let [rows, cols] = weight.dims();
    let kept: Vec<usize> = column_count(
        weight
            .clone()
            .not_equal_elem(0.0)
            .bool_and(zeros.clone().bool_not()),
    )
    .into_data()
    .convert::<i64>()
    .into_vec::<i64>()
    .expect("converted to i64 above")
    .into_iter()
    .map(|k| k as usize)
    .collect();
    MatrixSparsity::from_kept(&kept, rows * cols)
}

/// Per group, the `k`-th smallest of finite, non-negative scores (`1 ≤ k ≤` the group's size):
/// the smallest `t` with `count(t) ≥ k`, where `count(t)` counts each group's scores `≤ t` and
/// `top` holds each group's largest score. `None` if some group's bisection has not closed
/// within [`MAX_STEPS`].
///
/// # Shapes
/// - `top`, `count(t)` and `t`: `[1, groups]` → `[1, groups]`
fn kth_smallest<B: Backend>(
    top: Tensor<B, 2>,
    k: usize,
    count: impl Fn(&Tensor<B, 2>) -> Tensor<B, 2, Int>,
) -> Option<Tensor<B, 2>> {
    let enough = |t: &Tensor<B, 2>| count(t).greater_equal_elem(k as i64);
    // hi: at least k scores at or below it; lo: fewer than k (0 already holds k in a group
    // with that many zeros, and then lo = hi = 0, closed from the start).
    let mut lo = top.zeros_like();
    let mut hi = top.mask_fill(enough(&lo), 0.0);
    for _ in 0..MAX_STEPS / STEPS_PER_CHECK {
        for _ in 0..STEPS_PER_CHECK {
            let mid = midpoint(&lo, &hi);
            let enough = enough(&mid);
            hi = hi.mask_where(enough.clone(), mid.clone());
            lo = mid.mask_where(enough, lo);
        }
        // Closed where no float lies strictly between lo and hi: the midpoint is one of them.
        let mid = midpoint(&lo, &hi);
        let open = mid
            .clone()
            .greater(lo.clone())
            .bool_and(mid.lower(hi.clone()));
        if !any(open) {
            return Some(hi);
        }
    }
    None
}

/// The true values of each column of `mask`, counted in two stages ([`column_blocks`]).
///
/// # Shapes
/// - `mask`: `[rows, cols]` → `[1, cols]`
fn column_count<B: Backend>(mask: Tensor<B, 2, Bool>) -> Tensor<B, 2, Int> {
    let [rows, cols] = mask.dims();
    match column_blocks(rows) {
        1 => mask.int().sum_dim(0),
        blocks => mask
            .int()
            .reshape([blocks, rows / blocks, cols])
            .sum_dim(1)
            .sum_dim(0)
            .reshape([1, cols]),
    }
}

/// The largest value of each column of `t`, found in two stages ([`column_blocks`]).
///
/// # Shapes
/// - `t`: `[rows, cols]` → `[1, cols]`
fn column_max<B: Backend>(t: Tensor<B, 2>) -> Tensor<B, 2> {
    let [rows, cols] = t.dims();
    match column_blocks(rows) {
        1 => t.max_dim(0),
        blocks => t
            .reshape([blocks, rows / blocks, cols])
            .max_dim(1)
            .max_dim(0)
            .reshape([1, cols]),
    }
}

/// Blocks of rows a column reduction of `rows` rows takes in its first stage: the largest
/// divisor of `rows` at most `√rows` (1 where there is none but 1). CubeCL reduces a column
/// with one thread looping over all its rows, so `[4096, 4096]` counts ran on 1,024 threads
/// (vectors of four columns) each reading 4,096 rows, once per bisection step; in two stages
/// the first has 64 times the threads and each stage loops over 64 rows. Counts and maxima are
/// exact in any order, so the selection's bits do not change.
fn column_blocks(rows: usize) -> usize {
    let root = (rows as f64).sqrt() as usize;
    (1..=root.max(1))
        .rev()
        .find(|&b| rows.is_multiple_of(b))
        .unwrap_or(1)
}

/// `(lo + hi) / 2` of `0 ≤ lo ≤ hi ≤` [`HALF_MAX`]: within `[lo, hi]` (rounding is monotone,
/// and `2·lo`, `2·hi` and their halves are exact), and strictly between them wherever a float
/// lies there (the nearest float to the exact midpoint then does). Two operations, where a
/// clamped `lo + (hi − lo) / 2` takes five, in the bisection's every step.
fn midpoint<B: Backend>(lo: &Tensor<B, 2>, hi: &Tensor<B, 2>) -> Tensor<B, 2> {
    (lo.clone() + hi.clone()).mul_scalar(0.5)
}

/// The largest score the bisection takes: the sum of two stays finite.
const HALF_MAX: f32 = f32::MAX / 2.0;

/// Whether every value of `t` is at most [`HALF_MAX`], so none is NaN or infinite (one read
/// back from the device).
fn all_in_range<B: Backend>(t: &Tensor<B, 2>) -> bool {
    !any(t.clone().lower_equal_elem(HALF_MAX).bool_not())
}

/// Whether any value of `t` is true (one read back from the device).
fn any<B: Backend, const D: usize>(t: Tensor<B, D, Bool>) -> bool {
    t.any()
        .int()
        .into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .expect("converted to i64 above")
        .first()
        .is_some_and(|&v| v != 0)
}

/// A selection rule [`device_select`] runs on the weights' device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum DeviceRule {
    /// Wanda's per-output-channel rule at `ratio`: by the backend's selection kernel where
    /// `kernel` is set and the backend has one
    /// ([`Kernels::lowest_scores`](crate::model::kernels::Kernels::lowest_scores)), else by
    /// bisection.
    PerOutput { ratio: f64, kernel: bool },
    /// Magnitude's per-matrix threshold at `ratio`: by the backend's selection kernel where
    /// `kernel` is set and the backend has one, else by bisection.
    MatrixThreshold { ratio: f64, kernel: bool },
    /// The `n` lowest of every `m` input rows of each output, of Wanda's scores (`wanda`) or
    /// magnitude's: by the backend's selection kernel only.
    Groups { n: usize, m: usize, wanda: bool },
}

/// The environment variable that says where the selection runs: `auto` (the default: on the
/// device on a GPU), `on` (on the device on any backend), `off` (on the host), `bisection` (on
/// the device, by Burn's operations only: to compare with the backend's kernels).
pub(super) const DEVICE_SELECT_VAR: &str = "WANDA_DEVICE_SELECT";

/// Where the selection runs ([`DEVICE_SELECT_VAR`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SelectOn {
    /// On the host, on a copy of each weight.
    Host,
    /// On the weights' device, by the backend's selection kernels where it has them.
    Device,
    /// On the weights' device, by bisection in Burn's operations only.
    DeviceBisection,
}

/// Where the selection runs ([`DEVICE_SELECT_VAR`]; by default on the device where the
/// backend's kernels say so), read once per run, before any work.
pub(super) fn device_selects<B: Backend>() -> Result<SelectOn, PruneError> {
    let device = |on: bool| if on { SelectOn::Device } else { SelectOn::Host };
    match std::env::var(DEVICE_SELECT_VAR).as_deref() {
        Err(_) | Ok("auto") => Ok(device(kernels::<B>().selects_on_device())),
        Ok("on") => Ok(SelectOn::Device),
        Ok("off") => Ok(SelectOn::Host),
        Ok("bisection") => Ok(SelectOn::DeviceBisection),
        Ok(other) => Err(PruneError::InvalidOptions {
            reason: format!(
                "environment variable {DEVICE_SELECT_VAR}=`{other}`: use auto, on, off or \
                 bisection"
            ),
        }),
    }
}

/// The rule the device runs for `method` (refined by DSnoT when `options` say so) at
/// `sparsity`, where the device selects (`on`, see [`device_selects`]) and has the method's
/// rule: Wanda's per-output (without the variant) and magnitude's per-matrix unstructured
/// selection, and with the backend's selection kernel ([`SelectOn::Device`]) the N:M rule of
/// both (Wanda's variant leaves N:M as it is).
pub(super) fn device_rule(
    on: SelectOn,
    method: Method,
    options: &MethodOptions,
    sparsity: Sparsity,
) -> Option<DeviceRule> {
    if on == SelectOn::Host || options.dsnot.is_some() || options.weight_update.is_some() {
        return None;
    }
    match (sparsity, method) {
        (Sparsity::Unstructured { ratio }, Method::Wanda) if !options.use_variant => {
            Some(DeviceRule::PerOutput {
                ratio,
                kernel: on == SelectOn::Device,
            })
        }
        (Sparsity::Unstructured { ratio }, Method::Magnitude) => {
            Some(DeviceRule::MatrixThreshold {
                ratio,
                kernel: on == SelectOn::Device,
            })
        }
        (Sparsity::NM { n, m }, Method::Wanda | Method::Magnitude) if on == SelectOn::Device => {
            Some(DeviceRule::Groups {
                n,
                m,
                wanda: method == Method::Wanda,
            })
        }
        _ => None,
    }
}

/// The Wanda input norms of a weight with the input it reads, `None` where there are none.
pub(super) type NormsOf<'a, B> = dyn Fn(&(Tensor<B, 2>, LinearInput)) -> Option<Vec<f32>> + 'a;

/// The zeros `rule` selects on the weights' device in each of `asked` (a layer's linears with
/// the input each reads), Wanda's by the input norms `norms_of` gives (`None`: none); `None` for a linear the host
/// is to select (no rule, or see [`device_select`]). Each rule runs the backend's selection
/// kernels where the rule says so and there are some (on CUDA); otherwise magnitude's bisects,
/// and Wanda's per-output rule selects consecutive linears with the same input rows (q, k, v
/// and o) together while they hold at most a [`PIECE`] of weights
/// ([`per_output_zeros_together`]). The N:M rule runs only the backend's kernel.
///
/// # Shapes
/// - each weight `[in, out]` → its zeros `[in, out]`
pub(super) fn select_on_device<B: Backend>(
    rule: Option<DeviceRule>,
    asked: &[(Tensor<B, 2>, LinearInput)],
    norms_of: &NormsOf<'_, B>,
) -> Vec<Option<Tensor<B, 2, Bool>>> {
    match rule {
        None => vec![None; asked.len()],
        Some(DeviceRule::MatrixThreshold { ratio, kernel }) => asked
            .iter()
            .map(|(w, _)| {
                let [rows, cols] = w.dims();
                let len = rows * cols;
                let by_kernel = (kernel && ratio > 0.0 && len > 0).then(|| {
                    // The 1-based rank of the host's threshold.
                    let k = threshold_position(len, ratio) + 1;
                    let ones = vec![1.0; rows];
                    kernels::<B>().lowest_scores(w, &ones, Lowest::MatrixThreshold(k))
                });
                by_kernel
                    .flatten()
                    .or_else(|| matrix_threshold_zeros(w, ratio, magnitude_score))
            })
            .collect(),
        Some(DeviceRule::Groups { n, m, wanda }) => asked
            .iter()
            .map(|entry| {
                // Norms of 1 make the kernel's scores magnitude's, `|w|`, exactly.
                let norms = if wanda {
                    norms_of(entry)?
                } else {
                    vec![1.0; entry.0.dims()[0]]
                };
                kernels::<B>().lowest_scores(&entry.0, &norms, Lowest::PerGroup { n, m })
            })
            .collect(),
        Some(DeviceRule::PerOutput { ratio, kernel }) => {
            let mut zeros = Vec::with_capacity(asked.len());
            // Consecutive weights of the same rows, and their scorers, not yet selected.
            let mut group = Vec::new();
            for entry in asked {
                let Some(norms) = norms_of(entry) else {
                    select_group(&mut group, ratio, &mut zeros);
                    zeros.push(None);
                    continue;
                };
                let [rows, cols] = entry.0.dims();
                let k = per_output_count(rows, ratio);
                let selected = kernel
                    .then(|| kernels::<B>().lowest_scores(&entry.0, &norms, Lowest::PerColumn(k)))
                    .flatten();
                if let Some(mask) = selected {
                    select_group(&mut group, ratio, &mut zeros);
                    zeros.push(Some(mask));
                    continue;
                }
                let column = norms_column::<B>(&norms, &entry.0.device());
                let score = move |w: Tensor<B, 2>| wanda_score(w, &column);
                let held: usize = group.iter().map(|(w, _)| w.dims()[1]).sum::<usize>() * rows;
                let fits = group
                    .first()
                    .is_some_and(|(w, _)| w.dims()[0] == rows && held + rows * cols <= PIECE);
                if !fits {
                    select_group(&mut group, ratio, &mut zeros);
                }
                group.push((&entry.0, score));
            }
            select_group(&mut group, ratio, &mut zeros);
            zeros
        }
    }
}

/// Wanda's zeros of each weight of `group` (weights of the same rows, each with its scorer),
/// selected together where there are several, appended to `zeros`; `group` is left empty.
pub(super) fn select_group<B: Backend>(
    group: &mut Vec<(&Tensor<B, 2>, impl Fn(Tensor<B, 2>) -> Tensor<B, 2>)>,
    ratio: f64,
    zeros: &mut Vec<Option<Tensor<B, 2, Bool>>>,
) {
    match group.len() {
        0 => {}
        1 => {
            let (w, score) = group.pop().expect("one weight");
            zeros.push(per_output_zeros(w, ratio, score));
        }
        n => {
            let scores: Vec<_> = group.drain(..).map(|(w, score)| score(w.clone())).collect();
            match per_output_zeros_together(scores, ratio) {
                Some(each) => zeros.extend(each.into_iter().map(Some)),
                None => zeros.extend(std::iter::repeat_n(None, n)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prune::mask::{apply_mask, matrix_threshold_mask, per_output_mask};
    use crate::prune::wanda::wanda_scores;
    use burn::backend::{Flex, NdArray};

    /// `rows × cols` scores from a small LCG: `distinct` sets how many different values there
    /// are (few: many ties), and every `zeros`-th is 0 (none for 0).
    fn scores(rows: usize, cols: usize, seed: u64, distinct: u64, zeros: usize) -> Vec<f32> {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (0..rows * cols)
            .map(|i| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if zeros > 0 && i % zeros == 0 {
                    0.0
                } else {
                    ((state >> 33) % distinct) as f32 * 0.37 + 1e-3
                }
            })
            .collect()
    }

    fn tensor<B: Backend>(values: &[f32], dims: [usize; 2]) -> Tensor<B, 2> {
        Tensor::from_data(TensorData::new(values.to_vec(), dims), &Default::default())
    }

    fn bools<B: Backend>(mask: Tensor<B, 2, Bool>) -> Vec<bool> {
        mask.into_data().to_vec::<bool>().unwrap()
    }

    /// The scores as given (they are non-negative f32 already).
    fn identity<B: Backend>(t: Tensor<B, 2>) -> Tensor<B, 2> {
        t
    }

    /// `(dims, distinct values, every how many a zero)`: no ties, many ties, zeros, one column
    /// of one value, half zeros, ties among hundreds of rows.
    const CASES: [([usize; 2], u64, usize); 6] = [
        ([64, 48], 1 << 30, 0),
        ([64, 48], 5, 0),
        ([37, 11], 3, 4),
        ([16, 3], 1, 0),
        ([128, 8], 1 << 20, 2),
        ([300, 5], 2, 7),
    ];

    fn per_output_equals_the_host<B: Backend>() {
        for (seed, (dims, distinct, zeros)) in CASES.into_iter().enumerate() {
            let s = scores(dims[0], dims[1], seed as u64, distinct, zeros);
            let t = tensor::<B>(&s, dims);
            for ratio in [0.0, 0.01, 0.3, 0.5, 0.7, 0.8, 0.99] {
                let host = per_output_mask(&s, dims, ratio).unwrap();
                // Whole, and in pieces of one to a few columns.
                for piece in [PIECE, 1, 100] {
                    let device = per_output_zeros_in(piece, &t, ratio, identity).map(bools);
                    assert_eq!(
                        device.as_ref(),
                        Some(&host),
                        "{dims:?} distinct {distinct} ratio {ratio} piece {piece}"
                    );
                }
            }
        }
    }

    fn matrix_threshold_equals_the_host<B: Backend>() {
        for (seed, (dims, distinct, zeros)) in CASES.into_iter().enumerate() {
            let s = scores(dims[0], dims[1], seed as u64, distinct, zeros);
            let t = tensor::<B>(&s, dims);
            for ratio in [0.0, 0.1, 0.5, 0.7, 0.99] {
                let host = matrix_threshold_mask(&s, dims, ratio).unwrap();
                for piece in [PIECE, 1, 100] {
                    let device = matrix_threshold_zeros_in(piece, &t, ratio, identity).map(bools);
                    assert_eq!(
                        device.as_ref(),
                        Some(&host),
                        "{dims:?} distinct {distinct} ratio {ratio} piece {piece}"
                    );
                }
            }
        }
    }

    #[test]
    fn per_output_selection_equals_the_hosts_on_ndarray_and_flex() {
        per_output_equals_the_host::<NdArray<f32>>();
        per_output_equals_the_host::<Flex>();
    }

    #[test]
    fn matrix_threshold_equals_the_hosts_on_ndarray_and_flex() {
        matrix_threshold_equals_the_host::<NdArray<f32>>();
        matrix_threshold_equals_the_host::<Flex>();
    }

    #[test]
    fn weights_selected_together_get_each_its_own_selection() {
        let widths = [11, 5, 20];
        let parts: Vec<Vec<f32>> = (0..3)
            .map(|i| scores(37, widths[i], i as u64, 5, 4))
            .collect();
        for ratio in [0.0, 0.3, 0.5, 0.8] {
            let together = per_output_zeros_together(
                (0..3)
                    .map(|i| tensor::<NdArray<f32>>(&parts[i], [37, widths[i]]))
                    .collect(),
                ratio,
            )
            .unwrap();
            assert_eq!(together.len(), 3);
            for (i, zeros) in together.into_iter().enumerate() {
                let host = per_output_mask(&parts[i], [37, widths[i]], ratio).unwrap();
                assert_eq!(bools(zeros), host, "ratio {ratio}, weight {i}");
            }
        }
        let bad = vec![
            tensor::<NdArray<f32>>(&[1.0, 2.0], [2, 1]),
            tensor::<NdArray<f32>>(&[f32::NAN, 2.0], [2, 1]),
        ];
        assert!(per_output_zeros_together(bad, 0.5).is_none());
    }

    #[test]
    fn column_counts_and_maxima_in_two_stages_equal_one_pass() {
        assert_eq!(
            [1, 2, 4096, 11008, 8192, 2048, 37, 300, 1].map(column_blocks),
            [1, 1, 64, 86, 64, 32, 1, 15, 1]
        );
        // Rows with no divisor but 1 (37), a square (64), and 300 = 15 blocks of 20.
        for rows in [37, 64, 300] {
            let cols = 7;
            let s = scores(rows, cols, rows as u64, 50, 3);
            let t = tensor::<NdArray<f32>>(&s, [rows, cols]);
            let max: Vec<f32> = column_max(t.clone()).into_data().to_vec().unwrap();
            let one_pass: Vec<f32> = t.clone().max_dim(0).into_data().to_vec().unwrap();
            assert_eq!(max, one_pass, "rows {rows}");
            let mask = t.lower_equal_elem(0.37 * 20.0);
            let counts: Vec<i64> = column_count(mask.clone()).into_data().to_vec().unwrap();
            let one_pass: Vec<i64> = mask.int().sum_dim(0).into_data().to_vec().unwrap();
            assert_eq!(counts, one_pass, "rows {rows}");
            assert!(
                counts.iter().all(|&c| c > 0 && c < rows as i64),
                "{counts:?}"
            );
        }
    }

    #[test]
    fn ties_at_the_threshold_go_by_the_lower_input_index() {
        // One column [in = 5]: scores 2 1 1 1 3, ratio 0.5 → k = 2: the 1 at index 1 and the 1
        // at index 2, not the one at index 3.
        let t = tensor::<NdArray<f32>>(&[2.0, 1.0, 1.0, 1.0, 3.0], [5, 1]);
        let m = per_output_zeros(&t, 0.5, identity).map(bools);
        assert_eq!(m.unwrap(), [false, true, true, false, false]);
        // Magnitude's rule prunes every tie: threshold sorted[2] = 1 → all three 1s.
        let m = matrix_threshold_zeros(&t, 0.5, identity).map(bools);
        assert_eq!(m.unwrap(), [false, true, true, true, false]);
    }

    #[test]
    fn a_threshold_far_below_the_largest_score_still_closes() {
        // Scores 1e-30 … 3.1e-29 and one 1e30: the threshold is 59 orders of magnitude below
        // the top, some 200 bisection steps.
        let mut s: Vec<f32> = (1..=31).map(|i| 1e-30 * i as f32).collect();
        s.push(1e30);
        let host = per_output_mask(&s, [32, 1], 0.5).unwrap();
        let t = tensor::<NdArray<f32>>(&s, [32, 1]);
        assert_eq!(per_output_zeros(&t, 0.5, identity).map(bools), Some(host));
    }

    #[test]
    fn a_score_not_finite_or_near_f32_max_leaves_the_selection_to_the_host() {
        for bad in [f32::NAN, f32::INFINITY, f32::MAX] {
            let t = tensor::<NdArray<f32>>(&[1.0, bad, 2.0, 3.0], [2, 2]);
            assert!(per_output_zeros(&t, 0.5, identity).is_none());
            assert!(per_output_zeros(&t, 0.0, identity).is_none());
            assert!(matrix_threshold_zeros(&t, 0.5, identity).is_none());
        }
    }

    #[test]
    fn scores_and_measure_equal_the_hosts() {
        let dims = [6, 4];
        let w: Vec<f32> = scores(6, 4, 3, 9, 5)
            .iter()
            .enumerate()
            .map(|(i, &v)| if i % 3 == 0 { -v } else { v })
            .collect();
        let norms = [0.5f64, 2.0, 1.25, 3.0, 0.1, 7.0];
        let host = wanda_scores(&w, dims, &norms).unwrap();
        let t = tensor::<NdArray<f32>>(&w, dims);
        let norms32: Vec<f32> = norms.iter().map(|&n| n as f32).collect();
        let column = norms_column::<NdArray<f32>>(&norms32, &Default::default());
        let device: Vec<f32> = wanda_score(t.clone(), &column)
            .into_data()
            .to_vec()
            .unwrap();
        assert_eq!(device, host);
        let magnitude: Vec<f32> = magnitude_score(t.clone()).into_data().to_vec().unwrap();
        assert_eq!(magnitude, w.iter().map(|v| v.abs()).collect::<Vec<_>>());

        let zeros = per_output_zeros(&t, 0.5, |w| wanda_score(w, &column)).unwrap();
        let mut pruned = w.clone();
        apply_mask(&mut pruned, &bools(zeros.clone())).unwrap();
        let expected = MatrixSparsity::measure(&pruned, dims).unwrap();
        assert!(expected.zeros >= 12, "{expected:?}");
        assert_eq!(measure_on_device(&t, &zeros), expected);
    }
}
