//! DSnoT, training-free mask refinement (Zhang et al. 2024, "Dynamic Sparse No Training",
//! arXiv 2310.08915, repository zyxxmu/DSnoT `prune_DSnoT`): start from a Wanda, magnitude or
//! SparseGPT mask, then per output channel swap pruned and kept weights so that the pruned
//! weights' expected contribution to the output, `err = Σ_pruned w_j · s_j` (with `s_j` the
//! inputs' per-sample token sum, averaged over samples), moves toward zero.
//!
//! Each cycle, per output channel with `|err|` above the update threshold: regrow the pruned
//! weight whose contribution divided by the input variance (to the power `var_power`) is largest
//! in the direction of `err`, and prune a kept weight — unstructured, the kept weight of
//! opposite-signed contribution with the lowest Wanda score; N:M, the kept weight with the lowest
//! initial score in the regrown weight's group, and only while the swap keeps the sign of the
//! initial error. The reference's defaults: 50 cycles, threshold 0.1, `var_power` 1, and only
//! the attention linears refined (its `--skip_layer mlp`; the MLP linears keep the initial mask).
//!
//! Everything here follows the reference's order of operations. A channel whose updates stopped
//! changes no more (the reference keeps writing its mask while other channels go on, but those
//! writes restore what is already there). Deviations: the initial mask's ties go to the lower
//! input index (the reference's N:M sort leaves them unspecified); a channel stops where the
//! reference's pointers would run past its candidates (see `Channel::run`), so every swap
//! keeps the channel's count and N:M groups; and the SparseGPT initial score is the saliency
//! `w² / U_jj²` from the accumulated Hessian (the reference, at commit 4c029df, never
//! accumulates it: bug B1 in `docs/reference-methods.md`). No method's weight update is applied:
//! DSnoT only chooses which weights are zero.

use rayon::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::mask::per_output_or_nm_mask;
use super::{check_shape, PruneError, Sparsity};
use crate::model::kernels::transpose;

/// DSnoT's settings; [`Default`] gives the reference's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DsnotOptions {
    /// Most prune-and-grow cycles per linear (`--max_cycle_time`, 50).
    #[serde(default = "default_cycles")]
    pub cycles: usize,
    /// An output channel stops once `|err|` is at most this (`--update_threshold`, 0.1).
    #[serde(default = "default_update_threshold")]
    pub update_threshold: f64,
    /// Regrowing divides contributions by the input variance to this power; 0 turns it off
    /// (`--pow_of_var_regrowing`, 1).
    #[serde(default = "default_var_power")]
    pub var_power: f64,
    /// Which linears are refined: `attention` (the reference's default) or `all`.
    #[serde(default)]
    pub layers: DsnotLayers,
}

/// The linears DSnoT refines.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum DsnotLayers {
    /// `self_attn.*` only; MLP linears keep the initial mask (the reference's `--skip_layer mlp`).
    #[default]
    Attention,
    /// Every linear.
    All,
}

fn default_cycles() -> usize {
    50
}

fn default_update_threshold() -> f64 {
    0.1
}

fn default_var_power() -> f64 {
    1.0
}

impl Default for DsnotOptions {
    fn default() -> Self {
        Self {
            cycles: default_cycles(),
            update_threshold: default_update_threshold(),
            var_power: default_var_power(),
            layers: DsnotLayers::default(),
        }
    }
}

impl DsnotOptions {
    /// Whether the linear `name` (`self_attn.q_proj`, `mlp.down_proj`, …) is refined.
    pub fn refines(&self, name: &str) -> bool {
        self.layers == DsnotLayers::All || name.starts_with("self_attn.")
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), PruneError> {
        if !(self.update_threshold.is_finite() && self.update_threshold >= 0.0) {
            return Err(PruneError::InvalidOptions {
                reason: format!(
                    "dsnot `update_threshold` must be a non-negative number, got {}",
                    self.update_threshold
                ),
            });
        }
        if !self.var_power.is_finite() {
            return Err(PruneError::InvalidOptions {
                reason: format!("dsnot `var_power` must be finite, got {}", self.var_power),
            });
        }
        Ok(())
    }
}

/// Per-input-channel moments DSnoT needs beyond Wanda's sum of squares: the token sum and the
/// population variance of each sample, accumulated in f64.
#[derive(Debug, Clone, PartialEq)]
pub struct InputMoments {
    sum: Vec<f64>,
    weighted_var: Vec<f64>,
    nsamples: usize,
    tokens: usize,
}

impl InputMoments {
    /// An empty accumulator for `in_features` channels.
    pub fn new(in_features: usize) -> Self {
        Self {
            sum: vec![0.0; in_features],
            weighted_var: vec![0.0; in_features],
            nsamples: 0,
            tokens: 0,
        }
    }

    /// Adds one calibration sample of `tokens` rows.
    ///
    /// # Shapes
    /// - `x`: `[tokens, in_features]`, row-major
    pub fn add_sample(&mut self, x: &[f32], tokens: usize) -> Result<(), PruneError> {
        let width = self.sum.len();
        check_shape("the calibration sample", x.len(), [tokens, width])?;
        let (mut s, mut q) = (vec![0.0f64; width], vec![0.0f64; width]);
        for row in x.chunks_exact(width.max(1)) {
            for ((s, q), &v) in s.iter_mut().zip(q.iter_mut()).zip(row) {
                let v = f64::from(v);
                *s += v;
                *q += v * v;
            }
        }
        let t = tokens.max(1) as f64;
        for c in 0..width {
            let mean = s[c] / t;
            let var = (q[c] / t - mean * mean).max(0.0);
            self.sum[c] += s[c];
            self.weighted_var[c] += var * tokens as f64;
        }
        self.nsamples += 1;
        self.tokens += tokens;
        Ok(())
    }

    /// The reference's `sum_metric_row`: each sample's token sum, averaged over samples.
    pub fn mean_token_sum(&self) -> Vec<f32> {
        let n = self.nsamples.max(1) as f64;
        self.sum.iter().map(|s| (s / n) as f32).collect()
    }

    /// The reference's `var`: the samples' population variances, weighted by their tokens.
    pub fn variance(&self) -> Vec<f32> {
        let t = self.tokens.max(1) as f64;
        self.weighted_var.iter().map(|v| (v / t) as f32).collect()
    }

    /// Samples added.
    pub fn nsamples(&self) -> usize {
        self.nsamples
    }
}

/// What one linear's refinement needs, all per input channel except the two score matrices.
pub struct DsnotInputs<'a> {
    /// The dense weight, `[in, out]`.
    pub weight: &'a [f32],
    /// The initial method's scores, `[in, out]` (its mask is the per-output or N:M selection).
    pub initial: &'a [f32],
    /// Wanda's scores `|W|·‖X‖`, `[in, out]`: the order in which kept weights are pruned.
    pub wanda: &'a [f32],
    /// [`InputMoments::mean_token_sum`], `[in]`.
    pub token_sum: &'a [f32],
    /// [`InputMoments::variance`], `[in]`.
    pub variance: &'a [f32],
}

/// The initial mask, refined by DSnoT when `refine` is set. `true` = pruned.
///
/// # Shapes
/// - all of `inputs` as documented there, `dims = [in, out]` → mask `[in, out]`
pub fn dsnot_mask(
    inputs: &DsnotInputs<'_>,
    dims: [usize; 2],
    sparsity: Sparsity,
    options: &DsnotOptions,
    refine: bool,
) -> Result<Vec<bool>, PruneError> {
    options.validate()?;
    let [in_features, out_features] = dims;
    for (what, len) in [
        ("the weight", inputs.weight.len()),
        ("the initial scores", inputs.initial.len()),
        ("the wanda scores", inputs.wanda.len()),
    ] {
        check_shape(what, len, dims)?;
    }
    for (what, len) in [
        ("the token sums", inputs.token_sum.len()),
        ("the variances", inputs.variance.len()),
    ] {
        if len != in_features {
            return Err(PruneError::FeatureMismatch {
                what,
                expected: in_features,
                got: len,
            });
        }
    }
    let mask = per_output_or_nm_mask(inputs.initial, dims, sparsity)?;
    if !refine || options.cycles == 0 || in_features == 0 || out_features == 0 {
        return Ok(mask);
    }
    // One contiguous row per output channel, as the reference's `[out, in]`.
    let rows = |m: &[f32]| transpose(m, in_features, out_features);
    let (w, initial, wanda) = (
        rows(inputs.weight),
        rows(inputs.initial),
        rows(inputs.wanda),
    );
    let mut mask_rows = transpose(&mask, in_features, out_features);
    mask_rows
        .par_chunks_mut(in_features)
        .enumerate()
        .for_each(|(o, row)| {
            let span = o * in_features..(o + 1) * in_features;
            Channel::new(
                &w[span.clone()],
                &initial[span.clone()],
                &wanda[span],
                row,
                inputs,
                sparsity,
                options,
            )
            .run(options.cycles, row);
        });
    let out = transpose(&mask_rows, out_features, in_features);
    Ok(out)
}

/// One output channel's refinement state.
struct Channel {
    /// `w_j · s_j` per input.
    contribution: Vec<f32>,
    /// Pruned first to last when regrowing (ascending `g / var^p`, kept weights at 0).
    grow_order: Vec<usize>,
    /// Unstructured: kept weights in the order they are pruned from each end.
    prune_order: Vec<usize>,
    /// N:M: the initial scores, `+∞` where pruned or already chosen.
    group_scores: Vec<f32>,
    err: f32,
    sign0: f32,
    nm: Option<usize>,
    threshold: f32,
}

impl Channel {
    fn new(
        w: &[f32],
        initial: &[f32],
        wanda: &[f32],
        pruned: &[bool],
        inputs: &DsnotInputs<'_>,
        sparsity: Sparsity,
        options: &DsnotOptions,
    ) -> Channel {
        let len = w.len();
        let contribution: Vec<f32> = w
            .iter()
            .zip(inputs.token_sum)
            .map(|(&w, &s)| w * s)
            .collect();
        let err = (0..len)
            .filter(|&j| pruned[j])
            .map(|j| f64::from(contribution[j]))
            .sum::<f64>() as f32;
        let mut g: Vec<f32> = (0..len)
            .map(|j| if pruned[j] { contribution[j] } else { 0.0 })
            .collect();
        if options.var_power != 0.0 {
            for (g, &v) in g.iter_mut().zip(inputs.variance) {
                *g /= v.powf(options.var_power as f32);
            }
        }
        let grow_order = stable_ascending(&g);
        let nm = match sparsity {
            Sparsity::NM { m, .. } => Some(m),
            Sparsity::Unstructured { .. } => None,
        };
        let (prune_order, group_scores) = match nm {
            None => {
                // Kept weights by ascending Wanda score, then: negative contributions in that
                // order, the first kept weight once per exact-zero contribution, positive ones
                // in reverse (the reference's `return_reorder_indice`).
                let scores: Vec<f32> = (0..len)
                    .map(|j| if pruned[j] { f32::INFINITY } else { wanda[j] })
                    .collect();
                let kept: Vec<usize> = stable_ascending(&scores)
                    .into_iter()
                    .take(len - pruned.iter().filter(|&&p| p).count())
                    .collect();
                let value = |k: &usize| contribution[*k];
                let mut order: Vec<usize> =
                    kept.iter().copied().filter(|k| value(k) < 0.0).collect();
                let zeros = kept.iter().filter(|k| value(k) == 0.0).count();
                order.extend(std::iter::repeat_n(
                    kept.first().copied().unwrap_or(0),
                    zeros,
                ));
                order.extend(kept.iter().rev().copied().filter(|k| value(k) > 0.0));
                (order, Vec::new())
            }
            Some(_) => {
                let scores = (0..len)
                    .map(|j| if pruned[j] { f32::INFINITY } else { initial[j] })
                    .collect();
                (Vec::new(), scores)
            }
        };
        Channel {
            contribution,
            grow_order,
            prune_order,
            group_scores,
            err,
            sign0: sign(err),
            nm,
            threshold: options.update_threshold as f32,
        }
    }

    /// Runs up to `cycles` cycles on this channel's mask `pruned`, until its error is within
    /// the threshold (or, N:M, a swap would flip its sign). It also stops where the next
    /// candidate to regrow is not pruned or the next to prune is not kept: the reference goes
    /// on there (its pointers run past the candidates only with more cycles than a channel has
    /// candidates), and swapping such weights would change the channel's count or N:M groups.
    fn run(mut self, cycles: usize, pruned: &mut [bool]) {
        let len = self.contribution.len() as isize;
        let mut grow_ptr = [0isize, len - 1];
        let mut prune_ptr = [0isize, self.prune_order.len() as isize - 1];
        let at = |list: &[usize], ptr: isize| {
            usize::try_from(ptr).ok().and_then(|p| list.get(p).copied())
        };
        for _ in 0..cycles {
            let up = usize::from(self.err > 0.0);
            let Some(gcol) = at(&self.grow_order, grow_ptr[up]) else {
                return;
            };
            let gm = self.contribution[gcol];
            let pcol = match self.nm {
                None => {
                    let down = usize::from(self.err < 0.0);
                    let Some(pcol) = at(&self.prune_order, prune_ptr[down]) else {
                        return;
                    };
                    prune_ptr[down] += STEP[down];
                    pcol
                }
                Some(m) => {
                    let start = gcol - gcol % m;
                    let group = &self.group_scores[start..start + m];
                    let best = (0..m).fold(0, |b, j| if group[j] < group[b] { j } else { b });
                    start + best
                }
            };
            let pm = self.contribution[pcol];
            if self.err.abs() <= self.threshold
                || (self.nm.is_some() && sign(self.err + pm - gm) != self.sign0)
                || !pruned[gcol]
                || pruned[pcol]
            {
                return;
            }
            if self.nm.is_some() {
                self.group_scores[pcol] = f32::INFINITY;
            }
            pruned[pcol] = true;
            pruned[gcol] = false;
            self.err += pm;
            self.err -= gm;
            grow_ptr[up] += STEP[up];
        }
    }
}

/// Pointer steps: from the front (`0`) forward, from the back (`1`) backward.
const STEP: [isize; 2] = [1, -1];

/// `torch.sign` of an f32: −1, 0 or 1.
fn sign(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// Indices in ascending order of `values`, ties by the lower index; NaN last (as `torch.sort`).
fn stable_ascending(values: &[f32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    idx.sort_by(|&a, &b| {
        let (x, y) = (values[a], values[b]);
        // Where either is NaN there is no order: NaN goes after any number.
        x.partial_cmp(&y)
            .unwrap_or_else(|| x.is_nan().cmp(&y.is_nan()))
            .then(a.cmp(&b))
    });
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two output channels with the same column (layout `[in, out]`), so both must come out
    /// the same.
    fn twice(v: &[f32]) -> Vec<f32> {
        v.iter().flat_map(|&x| [x, x]).collect()
    }

    fn refine(w: &[f32], sparsity: Sparsity, options: &DsnotOptions) -> Vec<bool> {
        let (w2, scores) = (
            twice(w),
            twice(&w.iter().map(|x| x.abs()).collect::<Vec<_>>()),
        );
        let ones = vec![1.0f32; w.len()];
        let inputs = DsnotInputs {
            weight: &w2,
            initial: &scores,
            wanda: &scores,
            token_sum: &ones,
            variance: &ones,
        };
        let mask = dsnot_mask(&inputs, [w.len(), 2], sparsity, options, true).unwrap();
        let (a, b): (Vec<bool>, Vec<bool>) = mask.chunks(2).map(|pair| (pair[0], pair[1])).unzip();
        assert_eq!(a, b, "both output channels are the same");
        a
    }

    fn pruned(mask: &[bool]) -> Vec<usize> {
        (0..mask.len()).filter(|&j| mask[j]).collect()
    }

    /// w = (1, −1, 2, 0.5), token sums and variances 1, scores |w|, 50 %. The initial mask prunes
    /// 3 (0.5) and 0 (1, the lower index of the tie): err = 1 + 0.5 = 1.5. Grow order by
    /// contribution of the pruned (kept at 0): 1, 2, 3, 0; prune order over the kept {1, 2}:
    /// the negative one (1) from the front, the positive one (2) from the back.
    /// Cycle 1 (err > 0): regrow the last of the grow order, 0, prune the front, 1:
    /// err = 1.5 − 1 − 1 = −0.5. Cycle 2 (err < 0): regrow the first, 1 (the weight just
    /// pruned, at 0 in the grow order as in the reference), prune the back, 2: err = 2.5.
    #[test]
    fn unstructured_cycles_by_hand() {
        let w = [1.0, -1.0, 2.0, 0.5];
        let half = Sparsity::unstructured(0.5).unwrap();
        let with = |cycles, update_threshold| DsnotOptions {
            cycles,
            update_threshold,
            ..DsnotOptions::default()
        };
        assert_eq!(pruned(&refine(&w, half, &with(0, 0.1))), [0, 3]);
        assert_eq!(pruned(&refine(&w, half, &with(1, 0.1))), [1, 3]);
        assert_eq!(pruned(&refine(&w, half, &with(2, 0.1))), [2, 3]);
        // At threshold 0.6 cycle 2 stops (|−0.5| ≤ 0.6): the cycle-1 mask stays.
        assert_eq!(pruned(&refine(&w, half, &with(50, 0.6))), [1, 3]);
    }

    /// 2:4 over w = (1, −1, 2, 0.5 | 3, 1, −1.5, 0.25), sums and variances 1, scores |w|. The
    /// initial mask prunes {0, 3} and {5, 7}: err = 1 + 0.5 + 1 + 0.25 = 2.75 (sign +). The grow
    /// order ends with 0 then 5 (both contribute 1; stable). Cycle 1: regrow 5, and prune the
    /// lowest kept score of its group {4: 3, 6: 1.5}, 6: err = 2.75 − 1.5 − 1 = 0.25, still
    /// positive, so the swap is made. Cycle 2: regrow 0, prune 1 (score 1, the lowest kept of
    /// group 0): err would be 0.25 − 1 − 1 < 0, a sign change, so nothing is swapped and the
    /// loop ends with 2 of every 4 pruned.
    #[test]
    fn n_m_cycles_by_hand() {
        let w = [1.0, -1.0, 2.0, 0.5, 3.0, 1.0, -1.5, 0.25];
        let two_four = Sparsity::nm(2, 4).unwrap();
        let initial = refine(
            &w,
            two_four,
            &DsnotOptions {
                cycles: 0,
                ..DsnotOptions::default()
            },
        );
        assert_eq!(pruned(&initial), [0, 3, 5, 7]);
        let refined = refine(&w, two_four, &DsnotOptions::default());
        assert_eq!(pruned(&refined), [0, 3, 6, 7]);
    }

    /// Samples (1, 3) and (2, 2, 2) in one channel: token sums 4 and 6, mean 5; variances 1
    /// and 0, token-weighted (2·1 + 3·0)/5 = 0.4.
    #[test]
    fn moments_by_hand() {
        let mut m = InputMoments::new(1);
        m.add_sample(&[1.0, 3.0], 2).unwrap();
        m.add_sample(&[2.0, 2.0, 2.0], 3).unwrap();
        assert_eq!(m.mean_token_sum(), vec![5.0]);
        assert!((m.variance()[0] - 0.4).abs() < 1e-7);
        assert_eq!(m.nsamples(), 2);
        assert!(m.add_sample(&[1.0], 2).is_err());
    }

    #[test]
    fn mlp_linears_keep_the_initial_mask_unless_all_are_refined() {
        let options = DsnotOptions::default();
        assert!(options.refines("self_attn.o_proj") && !options.refines("mlp.down_proj"));
        let all = DsnotOptions {
            layers: DsnotLayers::All,
            ..options
        };
        assert!(all.refines("mlp.down_proj"));
        let bad = DsnotOptions {
            update_threshold: -1.0,
            ..options
        };
        assert!(bad.validate().is_err());
    }
}
