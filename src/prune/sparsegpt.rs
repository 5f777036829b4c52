//! SparseGPT (Frantar & Alistarh 2023, arXiv 2301.00774, Algorithm 1): prune one input channel
//! at a time and correct the not-yet-pruned weights with the optimal-brain-surgeon update from
//! the inverse Hessian `H⁻¹` of the layer-wise reconstruction loss, `H = 2/n Σ x xᵀ`.
//!
//! This follows `fasterprune` of the reference (IST-DASLab/sparsegpt, as vendored in
//! locuslab/wanda `lib/sparsegpt.py`), whose weight is PyTorch's `[out, in]`: its columns are
//! input channels, which are the rows of the `[in, out]` weight here, so its column operations
//! become contiguous row operations. Everything runs in f64 (the reference: f32) and the weight
//! is written back only when every value is finite.

use rayon::prelude::*;

use super::linalg::{
    dots_1or2x8, pack_by_eight, upper_cholesky_of_inverse, NotPositiveDefinite, LANES,
};
use super::mask::threshold_position;
use super::{check_finite, check_shape, PruneError, Sparsity};

/// The accumulated Hessian of a linear layer's reconstruction loss, `H = 2/n Σ_tokens x xᵀ`.
///
/// `n` counts samples (sequences) as the reference's `add_batch` does (`H *= n/(n+tmp);
/// n += tmp; H += (sqrt(2/n)·X)(sqrt(2/n)·X)ᵀ`, `tmp` = batch size); this keeps `Σ x xᵀ` in f64
/// and scales once in [`Hessian::matrix`], the same matrix without the repeated rescaling.
#[derive(Debug, Clone, PartialEq)]
pub struct Hessian {
    in_features: usize,
    /// `Σ x xᵀ`; only the upper triangle is kept up to date.
    xtx: Vec<f64>,
    nsamples: usize,
    tokens: usize,
}

impl Hessian {
    /// An empty accumulator for a layer with `in_features` inputs.
    pub fn new(in_features: usize) -> Self {
        Self {
            in_features,
            xtx: vec![0.0; in_features * in_features],
            nsamples: 0,
            tokens: 0,
        }
    }

    /// Adds one calibration sample (one sequence) of `tokens` input rows, on the host.
    ///
    /// This costs `in² / 2` multiply-adds per token; for full calibration sets compute `XᵀX`
    /// on the device and use [`Hessian::add_gram`].
    ///
    /// # Shapes
    /// - `x`: `[tokens, in_features]`, row-major
    pub fn add_batch(
        &mut self,
        x: &[f32],
        tokens: usize,
        in_features: usize,
    ) -> Result<(), PruneError> {
        self.check_features(in_features)?;
        check_shape("the calibration batch", x.len(), [tokens, in_features])?;
        check_finite("the calibration batch", x)?;
        let n = in_features;
        // Channel-major copy (one contiguous token vector per channel), and the same packed
        // eight channels at a time for the register-blocked kernel: Σ x xᵀ is a matrix of
        // dot products over tokens.
        let mut by_channel = vec![0.0f64; n * tokens];
        for (t, row) in x.chunks_exact(n.max(1)).enumerate() {
            for (i, &v) in row.iter().enumerate() {
                by_channel[i * tokens + t] = f64::from(v);
            }
        }
        let mut packed = Vec::new();
        pack_by_eight(&by_channel, tokens, 0..n, 0..tokens, &mut packed);
        let group = |g: usize| &packed[g * tokens * LANES..(g + 1) * tokens * LANES];
        let channel = |i: usize| &by_channel[i * tokens..(i + 1) * tokens];
        // Row i's upper triangle, group g's sums added where they lie in it.
        let add = |out_row: &mut [f64], i: usize, g: usize, acc: [f64; LANES]| {
            for (t, v) in acc.iter().enumerate() {
                let j = g * LANES + t;
                if j >= i && j < n {
                    out_row[j] += v;
                }
            }
        };
        // Channels in pairs (an even one and the next, so both start at the same group), each
        // group's values loaded once for both ([`dots_1or2x8`]).
        self.xtx
            .par_chunks_mut(2 * n.max(1))
            .enumerate()
            .for_each(|(pair, rows)| {
                let i = 2 * pair;
                let (first, second) = rows.split_at_mut(n.min(rows.len()));
                let next = (!second.is_empty()).then(|| channel(i + 1));
                for g in i / LANES..n.div_ceil(LANES) {
                    let (acc0, acc1) = dots_1or2x8(channel(i), next, group(g));
                    add(first, i, g, acc0);
                    if let Some(acc1) = acc1 {
                        add(second, i + 1, g, acc1);
                    }
                }
            });
        self.nsamples += 1;
        self.tokens += tokens;
        Ok(())
    }

    /// Adds a precomputed Gram matrix `XᵀX` of `samples` samples holding `tokens` tokens (only its
    /// upper triangle is read).
    ///
    /// # Shapes
    /// - `xtx`: `[in_features, in_features]`
    pub fn add_gram(
        &mut self,
        xtx: &[f32],
        samples: usize,
        tokens: usize,
    ) -> Result<(), PruneError> {
        let n = self.in_features;
        check_shape("the gram matrix", xtx.len(), [n, n])?;
        check_finite("the gram matrix", xtx)?;
        for (h, &g) in self.xtx.iter_mut().zip(xtx) {
            *h += f64::from(g);
        }
        self.nsamples += samples;
        self.tokens += tokens;
        Ok(())
    }

    /// Input channels.
    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// Samples (sequences) added.
    pub fn nsamples(&self) -> usize {
        self.nsamples
    }

    /// Tokens added.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// `H = 2/nsamples · Σ x xᵀ`, symmetric.
    ///
    /// # Shapes
    /// - returns `[in_features, in_features]`
    pub fn matrix(&self) -> Result<Vec<f64>, PruneError> {
        if self.nsamples == 0 {
            return Err(PruneError::NoSamples {
                what: "hessian accumulator",
            });
        }
        let n = self.in_features;
        let scale = 2.0 / self.nsamples as f64;
        let mut h = vec![0.0; n * n];
        for i in 0..n {
            for j in i..n {
                let v = self.xtx[i * n + j] * scale;
                h[i * n + j] = v;
                h[j * n + i] = v;
            }
        }
        Ok(h)
    }

    fn check_features(&self, got: usize) -> Result<(), PruneError> {
        if got == self.in_features {
            Ok(())
        } else {
            Err(PruneError::FeatureMismatch {
                what: "the calibration batch",
                expected: self.in_features,
                got,
            })
        }
    }
}

/// Settings of [`prune_sparsegpt`], the reference's defaults by [`Default`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SparseGptOptions {
    /// Input channels per lazy-update block (128).
    pub blocksize: usize,
    /// Dampening added to the diagonal, as a fraction of its mean (0.01).
    pub percdamp: f64,
}

impl Default for SparseGptOptions {
    fn default() -> Self {
        Self {
            blocksize: 128,
            percdamp: 0.01,
        }
    }
}

/// What [`prune_sparsegpt`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseGptOutcome {
    /// `Σ (w − q)² / (2 d²)` over the pruned weights: the reference's `Losses`, summed.
    pub loss: f64,
    /// Input channels that never fired (`H_ii = 0`); their weights were zeroed.
    pub dead_channels: usize,
}

/// Prunes `weight` in place with SparseGPT and updates the remaining weights.
///
/// Steps, as the reference (its "column i" is input channel `i`, a row here):
/// 1. dead channels (`H_ii = 0`): `H_ii = 1` and their weights are zeroed;
/// 2. `percdamp × mean(diag H)` is added to the diagonal, and `U`, the upper Cholesky factor of
///    `H⁻¹`, is formed (see [`upper_cholesky_of_inverse`]);
/// 3. per block of `blocksize` input channels: the unstructured mask is chosen once for the whole
///    block, over all its weights together, as `w² / U_ii² ≤ t` with `t` the score at sorted
///    position `int(numel × ratio)` of the block (so ties at `t` are pruned too, and `ratio = 0`
///    prunes nothing here); for N:M it is chosen at each group start, the `n` lowest `w² / U_ii²`
///    of the next `m` input channels per output channel, from the weights as updated so far;
/// 4. channel by channel, `err = (w − q) / U_ii` (`q` = `w` with the mask applied), the rest of
///    the block gets `W[j] −= err · U_ij`, then the channels after the block get the batched
///    `W[i2..] −= U[i1..i2, i2..]ᵀ · Err`.
///
/// On error the weight is left untouched. Fails when the dampened Hessian is not positive
/// definite, or if the result is not finite; both suggest more calibration samples or a larger
/// `percdamp`.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`, `hessian.in_features() == in`
pub fn prune_sparsegpt(
    weight: &mut [f32],
    dims: [usize; 2],
    hessian: &Hessian,
    sparsity: Sparsity,
    options: &SparseGptOptions,
) -> Result<SparseGptOutcome, PruneError> {
    prune_with_obs(weight, dims, hessian, sparsity, options, ObsMask::Saliency)
}

/// Which weights the optimal-brain-surgeon loop of [`prune_with_obs`] prunes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ObsMask<'a> {
    /// SparseGPT's saliency `w² / U_ii²`, chosen per block (unstructured) or per group (N:M)
    /// from the weights as updated so far.
    Saliency,
    /// `|w| · scale_i` (`scale`: `[in]`, one factor per input channel), chosen the same way
    /// from the updated weights: the Wanda paper's iterative weight-update ablation (Wanda's
    /// `sqrt(scaler_row)`, or ones for magnitude).
    Metric(&'a [f64]),
    /// A mask chosen before any update (`[in, out]`, `true`: prune): the sequential ablation.
    Fixed(&'a [bool]),
}

/// [`prune_sparsegpt`] with the pruned weights chosen by `mask` ([`ObsMask`]): the same
/// dead-channel handling, dampening, blocks and updates. `Metric` scores are compared like the
/// saliency (one threshold per block at sorted position `int(numel × ratio)`, ties pruned;
/// N:M per group), a `Fixed` mask is applied as it is, whatever the pattern.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]`, `hessian.in_features() == in`
pub fn prune_with_obs(
    weight: &mut [f32],
    dims: [usize; 2],
    hessian: &Hessian,
    sparsity: Sparsity,
    options: &SparseGptOptions,
    mask_rule: ObsMask<'_>,
) -> Result<SparseGptOutcome, PruneError> {
    let [in_features, out_features] = dims;
    check_obs_inputs(weight, dims, hessian, sparsity, options, mask_rule)?;
    let SparseGptOptions {
        blocksize,
        percdamp,
    } = *options;
    let fixed = match mask_rule {
        ObsMask::Fixed(mask) => Some(mask),
        _ => None,
    };
    let n = in_features;
    let out = out_features;
    if n == 0 || out == 0 {
        hessian.matrix()?;
        return Ok(SparseGptOutcome {
            loss: 0.0,
            dead_channels: 0,
        });
    }
    let mut w: Vec<f64> = weight.iter().map(|&v| f64::from(v)).collect();
    let (u, dead) = dampened_inverse_factor(hessian, percdamp)?;
    let mut dead_channels = 0;
    for (i, _) in dead.iter().enumerate().filter(|(_, &d)| d) {
        w[i * out..(i + 1) * out].fill(0.0);
        dead_channels += 1;
    }

    // The score the mask is chosen by, of weight `w` of input channel `i`.
    let diag_sq: Vec<f64> = (0..n).map(|i| u[i * n + i].powi(2)).collect();
    let score = |i: usize, w: f64| match mask_rule {
        ObsMask::Metric(scale) => w.abs() * scale[i],
        _ => w * w / diag_sq[i],
    };
    let mut loss = 0.0f64;
    let mut err = Vec::new();
    let mut mask = Vec::new();
    let mut coef = Vec::new();
    let mut packed_err = Vec::new();
    for i1 in (0..n).step_by(blocksize) {
        let i2 = (i1 + blocksize).min(n);
        let count = i2 - i1;
        mask.clear();
        match fixed {
            Some(fixed) => mask.extend_from_slice(&fixed[i1 * out..i2 * out]),
            None => mask.resize(count * out, false),
        }
        if let (Sparsity::Unstructured { ratio }, None) = (sparsity, fixed) {
            block_threshold_mask(&w[i1 * out..i2 * out], i1, out, ratio, &score, &mut mask);
        }
        err.clear();
        err.resize(count * out, 0.0);
        for k in 0..count {
            let i = i1 + k;
            if let (Sparsity::NM { n: prune_n, m }, None) = (sparsity, fixed) {
                if k % m == 0 {
                    group_mask(
                        &w[i * out..(i + m) * out],
                        i,
                        out,
                        prune_n,
                        &score,
                        &mut mask[k * out..(k + m) * out],
                    );
                }
            }
            let d = u[i * n + i];
            let (done, rest) = w[i1 * out..i2 * out].split_at_mut((k + 1) * out);
            let row = &mut done[k * out..];
            let e = &mut err[k * out..(k + 1) * out];
            for ((wv, ev), &pruned) in row.iter_mut().zip(e.iter_mut()).zip(&mask[k * out..]) {
                if pruned {
                    *ev = *wv / d;
                    loss += *ev * *ev / 2.0;
                    *wv = 0.0;
                }
            }
            // The rest of the block: W[j] −= U[i, j] · err.
            for (j, later) in rest.chunks_exact_mut(out).enumerate() {
                let c = u[i * n + i + 1 + j];
                if c != 0.0 {
                    for (wv, &ev) in later.iter_mut().zip(e.iter()) {
                        *wv -= c * ev;
                    }
                }
            }
        }
        if i2 < n {
            let scratch = (&mut coef, &mut packed_err);
            lazy_batch_update(&mut w, (i1, i2), [n, out], &u, &err, scratch);
        }
    }

    if let Some(index) = w
        .iter()
        .position(|v| !v.is_finite() || v.abs() > f64::from(f32::MAX))
    {
        return Err(PruneError::NonFiniteResult {
            channel: index / out.max(1),
            output: index % out.max(1),
            percdamp,
        });
    }
    for (dst, &src) in weight.iter_mut().zip(&w) {
        *dst = src as f32;
    }
    Ok(SparseGptOutcome {
        loss,
        dead_channels,
    })
}

/// Checks [`prune_with_obs`]'s inputs: the shapes, finite weights, the options, and N:M groups
/// that divide the inputs and the blocks where the mask is chosen here.
fn check_obs_inputs(
    weight: &[f32],
    dims: [usize; 2],
    hessian: &Hessian,
    sparsity: Sparsity,
    options: &SparseGptOptions,
    mask_rule: ObsMask<'_>,
) -> Result<(), PruneError> {
    let [in_features, _] = dims;
    sparsity.validate()?;
    check_shape("the weight", weight.len(), dims)?;
    check_finite("the weight", weight)?;
    if hessian.in_features() != in_features {
        return Err(PruneError::FeatureMismatch {
            what: "the hessian",
            expected: in_features,
            got: hessian.in_features(),
        });
    }
    let SparseGptOptions {
        blocksize,
        percdamp,
    } = *options;
    if blocksize == 0 {
        return Err(PruneError::InvalidOptions {
            reason: "`blocksize` must be at least 1".into(),
        });
    }
    if !(percdamp.is_finite() && percdamp >= 0.0) {
        return Err(PruneError::InvalidOptions {
            reason: format!("`percdamp` must be a finite non-negative number, got `{percdamp}`"),
        });
    }
    match mask_rule {
        ObsMask::Saliency => {}
        ObsMask::Metric(scale) => {
            check_shape("the metric's channel scale", scale.len(), [in_features, 1])?
        }
        ObsMask::Fixed(mask) => check_shape("the mask", mask.len(), dims)?,
    }
    if let (Sparsity::NM { n, m }, false) = (sparsity, matches!(mask_rule, ObsMask::Fixed(_))) {
        if in_features % m != 0 {
            return Err(PruneError::IndivisibleGroups { in_features, n, m });
        }
        if blocksize % m != 0 {
            return Err(PruneError::InvalidOptions {
                reason: format!(
                    "`blocksize` {blocksize} must be a multiple of the group size {m} of `{n}:{m}`"
                ),
            });
        }
    }
    Ok(())
}

/// The lazy batch update of the rows past block `i1..i2` of `w` (`[n, out]`): `W[j] −=
/// Σ_k U[i1 + k, j] · Err[k]` for `j ≥ i2`, with `scratch` (the coefficients, the packed errors)
/// reused between blocks.
fn lazy_batch_update(
    w: &mut [f64],
    (i1, i2): (usize, usize),
    [n, out]: [usize; 2],
    u: &[f64],
    err: &[f64],
    (coef, packed_err): (&mut Vec<f64>, &mut Vec<f64>),
) {
    let count = i2 - i1;
    coef.clear();
    for j in i2..n {
        coef.extend((i1..i2).map(|r| u[r * n + j]));
    }
    pack_by_eight_columns(err, count, out, packed_err);
    // Rows in pairs, each group of errors loaded once for both ([`dots_1or2x8`]).
    let group = |g: usize| &packed_err[g * count * LANES..(g + 1) * count * LANES];
    let subtract = |chunk: &mut [f64], acc: [f64; LANES]| {
        for (wv, a) in chunk.iter_mut().zip(acc) {
            *wv -= a;
        }
    };
    w[i2 * out..]
        .par_chunks_mut(2 * out)
        .zip(coef.par_chunks(2 * count))
        .for_each(|(rows, cs)| {
            let (first, second) = rows.split_at_mut(out);
            let (c0, c1) = cs.split_at(count);
            let c1 = (!second.is_empty()).then_some(c1);
            let mut second = second.chunks_mut(LANES);
            for (g, chunk0) in first.chunks_mut(LANES).enumerate() {
                let (acc0, acc1) = dots_1or2x8(c0, c1, group(g));
                subtract(chunk0, acc0);
                if let (Some(acc1), Some(chunk1)) = (acc1, second.next()) {
                    subtract(chunk1, acc1);
                }
            }
        });
}

/// Steps 1–2 of [`prune_sparsegpt`]: dead channels get `H_ii = 1`, the diagonal is dampened by
/// `percdamp × mean(diag H)`, and `U`, the upper Cholesky factor of `H⁻¹`, is returned with the
/// dead channels (whose weights the caller zeroes).
///
/// # Shapes
/// - returns `U`: `[in, in]`, dead: `[in]`
fn dampened_inverse_factor(
    hessian: &Hessian,
    percdamp: f64,
) -> Result<(Vec<f64>, Vec<bool>), PruneError> {
    let n = hessian.in_features();
    let mut h = hessian.matrix()?;
    let mut dead = vec![false; n];
    for (i, d) in dead.iter_mut().enumerate() {
        if h[i * n + i] == 0.0 {
            h[i * n + i] = 1.0;
            *d = true;
        }
    }
    let damp = percdamp * (0..n).map(|i| h[i * n + i]).sum::<f64>() / n.max(1) as f64;
    for i in 0..n {
        h[i * n + i] += damp;
    }
    let u = upper_cholesky_of_inverse(&h, n).map_err(|NotPositiveDefinite { index, pivot }| {
        PruneError::NotPositiveDefinite {
            channel: index,
            pivot,
            percdamp,
        }
    })?;
    Ok((u, dead))
}

/// SparseGPT's saliency `w² / U_ii²` (`U` from [`dampened_inverse_factor`], dead channels
/// scored 0) without any weight update: the initial score DSnoT refines from a SparseGPT start.
///
/// # Shapes
/// - `weight`: `[in, out]`, `dims = [in, out]` → scores `[in, out]`
pub fn obs_saliency(
    weight: &[f32],
    dims: [usize; 2],
    hessian: &Hessian,
    percdamp: f64,
) -> Result<Vec<f32>, PruneError> {
    let [n, out] = dims;
    check_shape("the weight", weight.len(), dims)?;
    if hessian.in_features() != n {
        return Err(PruneError::FeatureMismatch {
            what: "the hessian",
            expected: n,
            got: hessian.in_features(),
        });
    }
    let (u, dead) = dampened_inverse_factor(hessian, percdamp)?;
    let mut scores = Vec::with_capacity(weight.len());
    for (i, row) in weight.chunks_exact(out.max(1)).enumerate() {
        let d = u[i * n + i];
        scores.extend(row.iter().map(|&w| {
            if dead[i] {
                0.0
            } else {
                let w = f64::from(w);
                (w * w / (d * d)) as f32
            }
        }));
    }
    Ok(scores)
}

/// Packs `err` (`[count, out]`) eight output columns at a time:
/// `packed[(g · count + k) · 8 + t] = err[k][g · 8 + t]`, zero-padded past `out`.
fn pack_by_eight_columns(err: &[f64], count: usize, out: usize, packed: &mut Vec<f64>) {
    let groups = out.div_ceil(LANES);
    packed.clear();
    packed.resize(groups * count * LANES, 0.0);
    for (k, row) in err.chunks_exact(out).enumerate() {
        for (o, &v) in row.iter().enumerate() {
            packed[((o / LANES) * count + k) * LANES + o % LANES] = v;
        }
    }
}

/// Unstructured mask of one block (input channels from `i1`): `score(i, w) ≤ t`, `t` the score
/// at sorted position `int(numel × ratio)` over the whole block.
fn block_threshold_mask(
    block: &[f64],
    i1: usize,
    out: usize,
    ratio: f64,
    score: &impl Fn(usize, f64) -> f64,
    mask: &mut [bool],
) {
    if ratio == 0.0 || block.is_empty() {
        return;
    }
    let scores: Vec<f64> = block
        .chunks_exact(out)
        .enumerate()
        .flat_map(|(k, row)| row.iter().map(move |&w| score(i1 + k, w)))
        .collect();
    let k = threshold_position(scores.len(), ratio);
    let mut sorted = scores.clone();
    let (_, &mut thresh, _) = sorted.select_nth_unstable_by(k, f64::total_cmp);
    for (m, s) in mask.iter_mut().zip(&scores) {
        *m = *s <= thresh;
    }
}

/// N:M mask of the group of input channels starting at `i` (`group`: `[m, out]`): per output
/// channel, the `prune_n` lowest `score(channel, w)`, ties by the lower channel.
fn group_mask(
    group: &[f64],
    i: usize,
    out: usize,
    prune_n: usize,
    score: &impl Fn(usize, f64) -> f64,
    mask: &mut [bool],
) {
    let m = group.len() / out.max(1);
    let mut scores = vec![0.0f64; m];
    let mut idx: Vec<usize> = Vec::with_capacity(m);
    for o in 0..out {
        for (t, s) in scores.iter_mut().enumerate() {
            *s = score(i + t, group[t * out + o]);
        }
        idx.clear();
        idx.extend(0..m);
        idx.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
        for &t in &idx[..prune_n] {
            mask[t * out + o] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prune::noise;

    /// A seeded `[tokens, in]` batch whose channels are correlated: `Z A` with `Z` of rank
    /// `rank`, plus `jitter` of independent noise.
    fn correlated(tokens: usize, inp: usize, rank: usize, jitter: f32, seed: u64) -> Vec<f32> {
        let z: Vec<f32> = (0..tokens * rank).map(|k| noise(k, seed)).collect();
        let a: Vec<f32> = (0..rank * inp).map(|k| noise(k, seed + 1)).collect();
        let mut x = vec![0.0f32; tokens * inp];
        for t in 0..tokens {
            for i in 0..inp {
                let s: f32 = (0..rank).map(|r| z[t * rank + r] * a[r * inp + i]).sum();
                x[t * inp + i] = s + jitter * noise(t * inp + i, seed + 2);
            }
        }
        x
    }

    /// `‖X (W − V)‖²_F` for `X` `[tokens, in]` and `W`, `V` `[in, out]`.
    fn output_error(x: &[f32], w: &[f32], v: &[f32], inp: usize, out: usize) -> f64 {
        let mut total = 0.0;
        for row in x.chunks_exact(inp) {
            for o in 0..out {
                let d: f64 = (0..inp)
                    .map(|i| f64::from(row[i]) * f64::from(w[i * out + o] - v[i * out + o]))
                    .sum();
                total += d * d;
            }
        }
        total
    }

    fn hessian_of(x: &[f32], tokens: usize, inp: usize, samples: usize) -> Hessian {
        let mut h = Hessian::new(inp);
        let per = tokens / samples;
        for s in 0..samples {
            h.add_batch(&x[s * per * inp..(s + 1) * per * inp], per, inp)
                .unwrap();
        }
        h
    }

    #[test]
    fn hessian_is_two_over_nsamples_sum_xxt() {
        // Two samples: tokens (1, 2) and (3, −1), (0, 1).
        let mut h = Hessian::new(2);
        h.add_batch(&[1.0, 2.0], 1, 2).unwrap();
        h.add_batch(&[3.0, -1.0, 0.0, 1.0], 2, 2).unwrap();
        // Σ x xᵀ = [[1 + 9, 2 − 3], [·, 4 + 1 + 1]] = [[10, −1], [−1, 6]]; × 2/2.
        assert_eq!(h.matrix().unwrap(), [10.0, -1.0, -1.0, 6.0]);
        assert_eq!((h.nsamples(), h.tokens()), (2, 3));
        // The reference's running form: H *= n/(n+1); n += 1; H += (2/n) x xᵀ, per sample.
        let mut reference = [0.0f64; 4];
        let mut ns = 0.0;
        for batch in [&[1.0f64, 2.0][..], &[3.0, -1.0, 0.0, 1.0]] {
            for v in &mut reference {
                *v *= ns / (ns + 1.0);
            }
            ns += 1.0;
            for x in batch.chunks(2) {
                for a in 0..2 {
                    for b in 0..2 {
                        reference[a * 2 + b] += 2.0 / ns * x[a] * x[b];
                    }
                }
            }
        }
        for (a, b) in h.matrix().unwrap().iter().zip(reference) {
            assert!((a - b).abs() < 1e-12);
        }
        let mut g = Hessian::new(2);
        g.add_gram(&[10.0, -1.0, -1.0, 6.0], 2, 3).unwrap();
        assert_eq!(g.matrix(), h.matrix());
        assert!(matches!(
            Hessian::new(3).matrix(),
            Err(PruneError::NoSamples { .. })
        ));
        assert!(matches!(
            h.add_batch(&[1.0; 3], 1, 3),
            Err(PruneError::FeatureMismatch {
                expected: 2,
                got: 3,
                ..
            })
        ));
    }

    #[test]
    fn obs_update_by_hand_on_2_by_3() {
        // H = [[2, 1], [1, 2]] (Σ x xᵀ = H over 2 samples), no dampening.
        // H⁻¹ = 1/3 [[2, −1], [−1, 2]] → U = [[√(2/3), −1/√6], [0, √(1/2)]].
        let mut h = Hessian::new(2);
        h.add_gram(&[2.0, 1.0, 1.0, 2.0], 2, 2).unwrap();
        // W [in = 2, out = 3]. Scores w²/U_ii²: row 0 /(2/3): 1.5 6 3.375; row 1 /(1/2): 18 0.5 2.
        // ratio 0.4 → k = int(2.4) = 2, t = sorted[2] = 2 → prune 1.5, 0.5, 2.
        let mut w = [1.0f32, 2.0, -1.5, 3.0, 0.5, 1.0];
        let opts = SparseGptOptions {
            blocksize: 128,
            percdamp: 0.0,
        };
        let outcome = prune_sparsegpt(
            &mut w,
            [2, 3],
            &h,
            Sparsity::Unstructured { ratio: 0.4 },
            &opts,
        )
        .unwrap();
        // Pruning w[0, 0] = 1 moves w[1, 0] by −err·U_01 = −(1/√(2/3))(−1/√6) = +0.5
        // (OBS: δw = −w_q H⁻¹[:, q] / H⁻¹_qq = [−1, 0.5]).
        let expected = [0.0f32, 2.0, -1.5, 3.5, 0.0, 0.0];
        for (a, b) in w.iter().zip(expected) {
            assert!((a - b).abs() < 1e-6, "{w:?}");
        }
        // Loss: (1² / (2/3) + (0.5² + 1²) / (1/2)) / 2 = (1.5 + 2.5) / 2.
        assert!((outcome.loss - 2.0).abs() < 1e-12, "{}", outcome.loss);
        assert_eq!(outcome.dead_channels, 0);
    }

    #[test]
    fn sparsity_zero_leaves_weights_unchanged() {
        let (inp, out, tokens) = (40, 24, 160);
        let x = correlated(tokens, inp, 40, 0.1, 1);
        let h = hessian_of(&x, tokens, inp, 4);
        let original: Vec<f32> = (0..inp * out).map(|k| noise(k, 9)).collect();
        let mut w = original.clone();
        let outcome = prune_sparsegpt(
            &mut w,
            [inp, out],
            &h,
            Sparsity::Unstructured { ratio: 0.0 },
            &SparseGptOptions::default(),
        )
        .unwrap();
        for (a, b) in w.iter().zip(&original) {
            assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0));
        }
        assert_eq!(outcome.loss, 0.0);
    }

    #[test]
    fn obs_update_beats_masking_alone_on_a_low_rank_problem() {
        // X = Z A has rank 6 over 32 channels: pruned weights can be compensated exactly
        // through the correlated channels, which masking alone cannot do.
        let (inp, out, tokens) = (32, 12, 256);
        let x = correlated(tokens, inp, 6, 0.0, 21);
        let h = hessian_of(&x, tokens, inp, 8);
        let original: Vec<f32> = (0..inp * out).map(|k| noise(k, 22)).collect();
        for (sparsity, blocksize) in [
            (Sparsity::Unstructured { ratio: 0.5 }, 128),
            (Sparsity::Unstructured { ratio: 0.5 }, 8),
            (Sparsity::NM { n: 2, m: 4 }, 128),
        ] {
            let mut w = original.clone();
            let opts = SparseGptOptions {
                blocksize,
                percdamp: 0.01,
            };
            prune_sparsegpt(&mut w, [inp, out], &h, sparsity, &opts).unwrap();
            let masked: Vec<f32> = original
                .iter()
                .zip(&w)
                .map(|(&o, &p)| if p == 0.0 { 0.0 } else { o })
                .collect();
            let obs = output_error(&x, &original, &w, inp, out);
            let plain = output_error(&x, &original, &masked, inp, out);
            eprintln!("{sparsity} bs {blocksize}: {obs} vs {plain}");
            assert!(
                obs < 0.5 * plain,
                "{sparsity} bs {blocksize}: {obs} vs {plain}"
            );
        }
    }

    #[test]
    fn unstructured_block_mask_reaches_the_ratio() {
        let (inp, out, tokens) = (64, 20, 200);
        let x = correlated(tokens, inp, 64, 0.2, 5);
        let h = hessian_of(&x, tokens, inp, 2);
        let mut w: Vec<f32> = (0..inp * out).map(|k| noise(k, 6)).collect();
        prune_sparsegpt(
            &mut w,
            [inp, out],
            &h,
            Sparsity::Unstructured { ratio: 0.6 },
            &SparseGptOptions {
                blocksize: 16,
                percdamp: 0.01,
            },
        )
        .unwrap();
        // Each block of 16 × 20 = 320 weights prunes int(192) + 1 = 193 (no ties in continuous
        // data): the `<=` of the reference.
        for block in w.chunks(16 * out) {
            assert_eq!(block.iter().filter(|&&v| v == 0.0).count(), 193);
        }
        assert!(w.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn nm_groups_run_along_the_input() {
        let (inp, out, tokens) = (16, 6, 96);
        let x = correlated(tokens, inp, 16, 0.3, 7);
        let h = hessian_of(&x, tokens, inp, 3);
        let mut w: Vec<f32> = (0..inp * out).map(|k| noise(k, 8)).collect();
        prune_sparsegpt(
            &mut w,
            [inp, out],
            &h,
            Sparsity::NM { n: 2, m: 4 },
            &SparseGptOptions::default(),
        )
        .unwrap();
        for g in 0..inp / 4 {
            for o in 0..out {
                let zeros = (0..4).filter(|&t| w[(g * 4 + t) * out + o] == 0.0).count();
                assert_eq!(zeros, 2, "group {g}, output {o}");
            }
        }
    }

    #[test]
    fn nm_shape_errors() {
        let h = Hessian::new(6);
        let mut w = vec![1.0f32; 6 * 4];
        assert_eq!(
            prune_sparsegpt(
                &mut w,
                [6, 4],
                &h,
                Sparsity::NM { n: 2, m: 4 },
                &SparseGptOptions::default()
            ),
            Err(PruneError::IndivisibleGroups {
                in_features: 6,
                n: 2,
                m: 4
            })
        );
        let h = Hessian::new(8);
        let mut w = vec![1.0f32; 8 * 4];
        let opts = SparseGptOptions {
            blocksize: 6,
            percdamp: 0.01,
        };
        assert!(matches!(
            prune_sparsegpt(&mut w, [8, 4], &h, Sparsity::NM { n: 2, m: 4 }, &opts),
            Err(PruneError::InvalidOptions { .. })
        ));
    }

    #[test]
    fn dead_channels_are_zeroed() {
        let (inp, out, tokens) = (12, 5, 60);
        let mut x = correlated(tokens, inp, 12, 0.5, 3);
        for t in 0..tokens {
            x[t * inp + 3] = 0.0;
            x[t * inp + 10] = 0.0;
        }
        let h = hessian_of(&x, tokens, inp, 2);
        let mut w: Vec<f32> = (0..inp * out).map(|k| noise(k, 4) + 2.0).collect();
        let outcome = prune_sparsegpt(
            &mut w,
            [inp, out],
            &h,
            Sparsity::Unstructured { ratio: 0.0 },
            &SparseGptOptions::default(),
        )
        .unwrap();
        assert_eq!(outcome.dead_channels, 2);
        for i in 0..inp {
            let row = &w[i * out..(i + 1) * out];
            if i == 3 || i == 10 {
                assert!(row.iter().all(|&v| v == 0.0), "channel {i}");
            } else {
                assert!(
                    row.iter().all(|&v| v != 0.0 && v.is_finite()),
                    "channel {i}"
                );
            }
        }
    }

    #[test]
    fn indefinite_hessian_is_a_clear_error() {
        // A Gram matrix no real data gives: [[1, 2], [2, 1]] has eigenvalue −1, and 1 %
        // dampening cannot fix that.
        let mut h = Hessian::new(2);
        h.add_gram(&[1.0, 2.0, 2.0, 1.0], 2, 2).unwrap();
        let original = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut w = original;
        let err = prune_sparsegpt(
            &mut w,
            [2, 3],
            &h,
            Sparsity::Unstructured { ratio: 0.5 },
            &SparseGptOptions::default(),
        )
        .unwrap_err();
        assert!(
            matches!(err, PruneError::NotPositiveDefinite { percdamp, .. } if percdamp == 0.01)
        );
        let msg = err.to_string();
        assert!(msg.contains("not positive definite"), "{msg}");
        assert!(
            msg.contains("more calibration samples or a larger `percdamp`"),
            "{msg}"
        );
        assert_eq!(w, original, "an error leaves the weight untouched");
        // Enough dampening makes it definite: 2 × mean diag = 2 lifts the −1 eigenvalue to 1.
        let opts = SparseGptOptions {
            blocksize: 128,
            percdamp: 2.0,
        };
        assert!(prune_sparsegpt(
            &mut w,
            [2, 3],
            &h,
            Sparsity::Unstructured { ratio: 0.5 },
            &opts
        )
        .is_ok());
    }

    #[test]
    fn invalid_inputs_are_rejected() {
        let h = Hessian::new(4);
        let mut w = vec![1.0f32; 4 * 3];
        // No samples.
        assert!(matches!(
            prune_sparsegpt(
                &mut w,
                [4, 3],
                &h,
                Sparsity::Unstructured { ratio: 0.5 },
                &SparseGptOptions::default()
            ),
            Err(PruneError::NoSamples { .. })
        ));
        // Hessian of the wrong width: a transposed weight is caught.
        let mut w = vec![1.0f32; 3 * 4];
        assert!(matches!(
            prune_sparsegpt(
                &mut w,
                [3, 4],
                &h,
                Sparsity::Unstructured { ratio: 0.5 },
                &SparseGptOptions::default()
            ),
            Err(PruneError::FeatureMismatch {
                expected: 3,
                got: 4,
                ..
            })
        ));
        let mut w = vec![1.0f32; 4 * 3];
        let bad = SparseGptOptions {
            blocksize: 0,
            percdamp: 0.01,
        };
        assert!(matches!(
            prune_sparsegpt(
                &mut w,
                [4, 3],
                &h,
                Sparsity::Unstructured { ratio: 0.5 },
                &bad
            ),
            Err(PruneError::InvalidOptions { .. })
        ));
        let bad = SparseGptOptions {
            blocksize: 128,
            percdamp: f64::NAN,
        };
        assert!(prune_sparsegpt(
            &mut w,
            [4, 3],
            &h,
            Sparsity::Unstructured { ratio: 0.5 },
            &bad
        )
        .is_err());
        w[5] = f32::INFINITY;
        assert!(matches!(
            prune_sparsegpt(
                &mut w,
                [4, 3],
                &h,
                Sparsity::Unstructured { ratio: 0.5 },
                &SparseGptOptions::default()
            ),
            Err(PruneError::NonFinite { index: 5, .. })
        ));
    }

    /// The lazy batch update of later rows (here of 150 outputs, many groups of eight) against
    /// none at all: one block the width of the input applies every update inside the block.
    /// N:M masks do not depend on the block size, so the weights agree to rounding.
    #[test]
    fn lazy_batch_updates_equal_updates_inside_one_block() {
        let (inp, out, tokens) = (200, 150, 300);
        let x = correlated(tokens, inp, 50, 0.1, 41);
        let h = hessian_of(&x, tokens, inp, 3);
        let original: Vec<f32> = (0..inp * out).map(|k| noise(k, 42)).collect();
        let run = |blocksize| {
            let mut w = original.clone();
            prune_sparsegpt(
                &mut w,
                [inp, out],
                &h,
                Sparsity::NM { n: 2, m: 4 },
                &SparseGptOptions {
                    blocksize,
                    ..SparseGptOptions::default()
                },
            )
            .unwrap();
            w
        };
        let (lazy, whole) = (run(8), run(inp));
        let zeros = |w: &[f32]| w.iter().map(|v| *v == 0.0).collect::<Vec<_>>();
        assert_eq!(zeros(&lazy), zeros(&whole));
        let scale = whole.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (i, (a, b)) in lazy.iter().zip(&whole).enumerate() {
            assert!((a - b).abs() <= 1e-5 * scale, "weight {i}: {a} vs {b}");
        }
        assert_ne!(lazy, original);
    }

    #[test]
    fn deterministic() {
        let (inp, out, tokens) = (200, 30, 300);
        let x = correlated(tokens, inp, 50, 0.1, 31);
        let h = hessian_of(&x, tokens, inp, 3);
        let original: Vec<f32> = (0..inp * out).map(|k| noise(k, 32)).collect();
        let run = || {
            let mut w = original.clone();
            prune_sparsegpt(
                &mut w,
                [inp, out],
                &h,
                Sparsity::Unstructured { ratio: 0.5 },
                &SparseGptOptions::default(),
            )
            .unwrap();
            w
        };
        let a = run();
        let b = run();
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        // The same bits on one thread: no result depends on how rayon splits the work.
        let single = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(run);
        assert!(a
            .iter()
            .zip(&single)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}
