//! Sequential layer-wise pruning of a whole model, as the Wanda reference code does it
//! (`prune_wanda` / `prune_sparsegpt` in `lib/prune.py`, arXiv 2306.11695 and 2301.00774):
//! the calibration samples' inputs of decoder layer 0 are captured; for each layer, all samples
//! run through the (still dense) layer while the input statistics of every linear are
//! collected — q/k/v share one input, gate/up share one — then the layer's linears are pruned,
//! and the samples run through the pruned layer again to give the next layer's inputs.
//!
//! Magnitude pruning needs no calibration and prunes every linear directly. Every prunable
//! linear is pruned or the whole call fails: the model is never left partly pruned with a
//! success result.

use std::collections::{BTreeMap, BTreeSet};

use burn::module::Param;
use burn::prelude::*;
use burn::tensor::FloatDType;
use rayon::prelude::*;
use serde::Serialize;

use super::activations::{Activations, Batching};
use super::device_select::{
    magnitude_score, matrix_threshold_zeros, measure_on_device, norms_column, per_output_zeros,
    per_output_zeros_together, wanda_score, PIECE,
};
use super::dsnot::{dsnot_mask, DsnotInputs, InputMoments};
use super::magnitude::{magnitude_scores, prune_magnitude};
use super::mask::{apply_mask, per_output_count, threshold_position};
use super::profile::{outlier_ratio, owl_sparsities};
use super::report::MatrixSparsity;
use super::ria::prune_ria;
use super::skip::{check_skip, glob_matches, linear_path};
use super::sparsegpt::{obs_saliency, prune_sparsegpt, Hessian};
use super::wanda::{checked_norms, prune_wanda, wanda_scores, InputNorms};
use super::weight_update::{ablation_sample_weight, prune_with_update, UpdateMetric};
use super::WeightUpdate;
use super::{Method, MethodOptions, PruneError, Sparsity};
use crate::model::arch::FusedLinear;
use crate::model::kernels::{take_param, to_host_f32, weight_tensor};
use crate::model::kernels::{kernels, Lowest};
use crate::model::decoder::{DecoderLayer, LayerContext, LinearInput};
use crate::model::checkpoint::Layers;
use crate::sys::phases::PhaseClock;

/// The sparsity report of a pruned model: per linear (HF path), per layer, and total.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct ModelSparsity {
    /// Zeros over all prunable weights.
    pub total: f64,
    /// Per decoder layer: zeros over the layer's prunable weights.
    pub per_layer: Vec<f64>,
    /// Per linear, keyed `model.layers.{i}.self_attn.q_proj` etc.
    pub per_linear: BTreeMap<String, MatrixSparsity>,
    /// Per decoder layer, the sparsity it was pruned at, when a profile set one per layer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layer_targets: Vec<f64>,
    /// Per decoder layer, OWL's outlier ratio (percent of pooled Wanda scores above `M`× their
    /// mean) on the dense model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outlier_ratios: Vec<f64>,
}

/// Measures the sparsity of every prunable linear of `model`.
pub fn measure<B: Backend>(model: &impl Layers<B>) -> Result<ModelSparsity, PruneError> {
    let mut report = ModelSparsity::default();
    for i in 0..model.layer_count() {
        let layer = model.layer(i)?;
        let measured = layer
            .linears()
            .into_iter()
            .map(|(name, _, linear)| {
                let (w, dims) = host_weight(linear.weight.val());
                Ok((name, MatrixSparsity::measure(&w, dims)?))
            })
            .collect::<Result<Vec<_>, PruneError>>()?;
        report.add_layer(i, measured);
    }
    Ok(report)
}

impl ModelSparsity {
    /// Adds decoder layer `index` (the next one) from its linears' measurements and updates the
    /// total.
    fn add_layer(&mut self, index: usize, linears: Vec<(impl AsRef<str>, MatrixSparsity)>) {
        let zeros: usize = linears.iter().map(|(_, r)| r.zeros).sum();
        let total: usize = linears.iter().map(|(_, r)| r.total).sum();
        self.per_layer.push(zeros as f64 / total.max(1) as f64);
        for (name, r) in linears {
            self.per_linear
                .insert(format!("model.layers.{index}.{}", name.as_ref()), r);
        }
        let (zeros, total) = self
            .per_linear
            .values()
            .fold((0, 0), |(z, t), r| (z + r.zeros, t + r.total));
        self.total = zeros as f64 / total.max(1) as f64;
    }
}

fn host_weight<B: Backend>(w: Tensor<B, 2>) -> (Vec<f32>, [usize; 2]) {
    let dims = w.dims();
    (to_host_f32(w), dims)
}

/// Which statistics a layer's pruning reads.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Needs {
    /// Σ x x ᵀ (sparsegpt, a weight update); its diagonal gives the norms when `sum_sq` is off.
    gram: bool,
    /// Σ x² per channel beside the Gram matrix (always without one).
    sum_sq: bool,
    /// Each sample's Σ x² weighted as the reference's weight-update ablation weighs it
    /// ([`ablation_sample_weight`]) instead of equally.
    ablation_weights: bool,
    /// DSnoT's moments.
    moments: bool,
}

impl Needs {
    /// What `method` with `options` reads.
    fn of(method: Method, options: &MethodOptions) -> Self {
        let gram = method == Method::Sparsegpt || options.weight_update.is_some();
        // Wanda's norms under a weight update come from weighted sums; otherwise the Gram
        // matrix's diagonal holds them.
        let ablation_weights = options.weight_update.is_some() && method == Method::Wanda;
        Self {
            gram,
            sum_sq: !gram || ablation_weights,
            ablation_weights,
            moments: options.dsnot.is_some(),
        }
    }

    /// Σ x² alone: the norms of Wanda, RIA and OWL's outlier pass.
    fn sums_of_squares() -> Self {
        Self {
            sum_sq: true,
            ..Self::default()
        }
    }
}

/// One shared input's Σ x² per channel, summed sample by sample.
#[derive(Debug, Clone, Default)]
struct SumSq {
    sums: Vec<f64>,
    samples: usize,
}

impl SumSq {
    /// Adds one sample's sums: with weight 1, or [`ablation_sample_weight`] of its position.
    fn add(&mut self, sums: impl ExactSizeIterator<Item = f64>, ablation_weights: bool) {
        if self.sums.is_empty() {
            self.sums = vec![0.0; sums.len()];
        }
        self.samples += 1;
        let weight = match ablation_weights {
            true => ablation_sample_weight(self.samples),
            false => 1.0,
        };
        for (a, s) in self.sums.iter_mut().zip(sums) {
            *a += weight * s;
        }
    }
}

/// Per-input statistics of one decoder layer: Σ x² per channel on the host in f64 (summed per
/// sample, so the result does not depend on how many samples share a forward pass), the Gram
/// matrix on the device, DSnoT's moments on the host.
struct LayerStats<B: Backend> {
    needs: Needs,
    /// Σ x² per channel (wanda, magnitude under OWL, RIA), per shared input.
    sum_sq: BTreeMap<LinearInput, SumSq>,
    /// Per shared input, each sample's Σ x² as `[1, channels]` f32 on the device, waiting to
    /// be added to `sum_sq` in sample order at [`Self::host`]: one download per input and layer
    /// instead of one per sample (where the fused kernels do not run).
    pending: BTreeMap<LinearInput, Vec<Tensor<B, 2>>>,
    /// Σ x xᵀ (sparsegpt), per shared input.
    gram: Option<BTreeMap<LinearInput, Tensor<B, 2>>>,
    /// Per shared input, when DSnoT needs them.
    moments: Option<BTreeMap<LinearInput, InputMoments>>,
    /// Per shared input, the samples and tokens it was shown: every sample for a dense
    /// layer's inputs, only those with tokens routed to it for an expert's.
    counts: BTreeMap<LinearInput, (usize, usize)>,
}

/// One shared input's statistics on the host.
struct HostStats {
    /// Σ x² per channel, where [`Needs::sum_sq`] asked for them.
    sum_sq: Option<Vec<f64>>,
    /// The Gram matrix `[in, in]`, where [`Needs::gram`] asked for it.
    gram: Option<Vec<f32>>,
    moments: Option<InputMoments>,
    samples: usize,
    tokens: usize,
}

impl HostStats {
    /// The input norms of a linear with `in_features` inputs: the sums of squares, or the Gram
    /// matrix's diagonal.
    fn norms(&self, in_features: usize) -> Result<InputNorms, PruneError> {
        let mut norms = InputNorms::new(in_features);
        let sum_sq: Vec<f64> = match (&self.sum_sq, &self.gram) {
            (Some(sums), _) => sums.clone(),
            (None, Some(gram)) => (0..in_features)
                .map(|c| f64::from(gram[c * in_features + c]))
                .collect(),
            (None, None) => {
                return Err(PruneError::NoSamples {
                    what: "layer input statistics",
                })
            }
        };
        norms.add_sum_sq(&sum_sq, self.samples, self.tokens)?;
        Ok(norms)
    }

    /// The Hessian of a linear with `in_features` inputs, from the Gram matrix.
    fn hessian(&self, in_features: usize) -> Result<Hessian, PruneError> {
        let gram = self.gram.as_ref().ok_or(PruneError::NoSamples {
            what: "hessian accumulator",
        })?;
        let mut h = Hessian::new(in_features);
        h.add_gram(gram, self.samples, self.tokens)?;
        Ok(h)
    }
}

impl<B: Backend> LayerStats<B> {
    fn new(needs: Needs) -> Self {
        Self {
            needs,
            sum_sq: BTreeMap::new(),
            pending: BTreeMap::new(),
            gram: needs.gram.then(BTreeMap::new),
            moments: needs.moments.then(BTreeMap::new),
            counts: BTreeMap::new(),
        }
    }

    /// Runs every batch of `inputs` through `layer` for its linears' input statistics.
    fn observe(
        &mut self,
        layer: &DecoderLayer<B>,
        inputs: &Activations<B>,
        cos: &Tensor<B, 2>,
        sin: &Tensor<B, 2>,
    ) -> Result<(), PruneError> {
        let mut failure = None;
        for x in inputs.iter() {
            let ctx = LayerContext {
                cos,
                sin,
                cache: None,
            };
            // Only the statistics are needed from this pass, not the layer's output.
            layer.observe_inputs(x, ctx, &mut |input, t| {
                if let Err(e) = self.add(input, t) {
                    failure.get_or_insert(e);
                }
            });
        }
        failure.map_or(Ok(()), Err)
    }

    /// [`LayerStats::observe`] and the layer's outputs in one pass, one forward per batch where
    /// the two take two: for a layer the statistics will not change (OWL's dense pass). The
    /// outputs are [`Activations::forward`]'s, the statistics `observe`'s.
    fn observe_forward(
        &mut self,
        layer: &DecoderLayer<B>,
        inputs: Activations<B>,
        cos: &Tensor<B, 2>,
        sin: &Tensor<B, 2>,
    ) -> Result<Activations<B>, PruneError> {
        let mut failure = None;
        let outputs = inputs.forward_observed(layer, cos, sin, &mut |input, t| {
            if let Err(e) = self.add(input, t) {
                failure.get_or_insert(e);
            }
        });
        failure.map_or(Ok(outputs), Err)
    }

    /// # Shapes
    /// - `x`: `[batch, seq, in]`
    fn add(&mut self, input: LinearInput, x: &Tensor<B, 3>) -> Result<(), PruneError> {
        let [batch, seq, channels] = x.dims();
        let count = self.counts.entry(input).or_default();
        count.0 += batch;
        count.1 += batch * seq;
        // Sums of squares and Gram matrices in f32 whatever the activations' type: in fp16 they
        // overflow 65504 within a few tokens. Made only where a path needs it (on the CPU a
        // reshape copies the activations).
        let flat = || {
            x.clone()
                .reshape([batch * seq, channels])
                .cast(FloatDType::F32)
        };
        if let Some(moments) = &mut self.moments {
            // Widened to f32 exactly, as `flat` is.
            let host = to_host_f32(x.clone());
            let entry = moments
                .entry(input)
                .or_insert_with(|| InputMoments::new(channels));
            for sample in host.chunks_exact((seq * channels).max(1)) {
                entry.add_sample(sample, seq)?;
            }
        }
        if let Some(grams) = &mut self.gram {
            // One sample at a time, added in sample order: the same sums whatever the batch.
            let flat = flat();
            for sample in 0..batch {
                let rows = flat
                    .clone()
                    .slice([sample * seq..(sample + 1) * seq, 0..channels]);
                let contribution = match kernels::<B>().gram(&rows) {
                    Some(gram) => gram,
                    None => rows.clone().transpose().matmul(rows),
                };
                let entry = match grams.remove(&input) {
                    Some(acc) => acc + contribution,
                    None => contribution,
                };
                grams.insert(input, entry);
            }
            if !self.needs.sum_sq {
                return Ok(());
            }
        }
        // Each sample's sums on their own, added in f64 in sample order: the same sums whatever
        // the batch. The fused CPU kernels read the activations' own buffer (a contiguous copy
        // where they are a view), exact in f64; Burn's ops otherwise sum every sample of the
        // batch in one set of kernels (on a GPU, one launch per sample and input added up).
        let samples = || flat().reshape([batch, seq, channels]);
        let kernels = kernels::<B>();
        let fused = kernels.column_sum_sq(x).or_else(|| {
            // Only a backend with host kernels makes the copy to try them again.
            match kernels.host_resident() {
                true => kernels.column_sum_sq(&samples()),
                false => None,
            }
        });
        let Some(per_sample) = fused else {
            self.pending
                .entry(input)
                .or_default()
                .push(column_sum_sq(samples()));
            return Ok(());
        };
        let sum_sq = self.sum_sq.entry(input).or_default();
        for sums in per_sample {
            sum_sq.add(sums.into_iter(), self.needs.ablation_weights);
        }
        Ok(())
    }

    /// The statistics on the host of every input of `layer`'s linears: those it observed, and
    /// for an input no calibration token reached (an expert the router never chose) what the
    /// reference's forward hooks leave, zero sums over one sample, so Wanda scores every weight
    /// of that expert zero and SparseGPT finds every input dead.
    fn host_for(self, layer: &DecoderLayer<B>) -> BTreeMap<LinearInput, HostStats> {
        let needs = self.needs;
        let mut host = self.host();
        for (_, input, linear) in layer.linears() {
            let channels = linear.weight.dims()[0];
            host.entry(input).or_insert_with(|| HostStats {
                sum_sq: (needs.sum_sq || !needs.gram).then(|| vec![0.0; channels]),
                gram: needs.gram.then(|| vec![0.0; channels * channels]),
                moments: needs.moments.then(|| InputMoments::new(channels)),
                samples: 1,
                tokens: 0,
            });
        }
        host
    }

    /// The statistics on the host, per shared input.
    fn host(mut self) -> BTreeMap<LinearInput, HostStats> {
        for (input, sums) in std::mem::take(&mut self.pending) {
            let Some(channels) = sums.first().map(|t| t.dims()[1]) else {
                continue;
            };
            let host = to_host_f32(Tensor::cat(sums, 0));
            let sum_sq = self.sum_sq.entry(input).or_default();
            for sample in host.chunks_exact(channels.max(1)) {
                sum_sq.add(
                    sample.iter().map(|&v| v.into()),
                    self.needs.ablation_weights,
                );
            }
        }
        let mut moments = self.moments.unwrap_or_default();
        let mut grams: BTreeMap<LinearInput, Vec<f32>> = self
            .gram
            .unwrap_or_default()
            .into_iter()
            .map(|(k, t)| (k, to_host_f32(t)))
            .collect();
        let mut sum_sq = self.sum_sq;
        let inputs: BTreeSet<LinearInput> = grams.keys().chain(sum_sq.keys()).copied().collect();
        inputs
            .into_iter()
            .map(|k| {
                let (samples, tokens) = self.counts.get(&k).copied().unwrap_or_default();
                let stats = HostStats {
                    sum_sq: sum_sq.remove(&k).map(|s| s.sums),
                    gram: grams.remove(&k),
                    moments: moments.remove(&k),
                    samples,
                    tokens,
                };
                (k, stats)
            })
            .collect()
    }
}

/// `Σ x²` per column of each sample on the backend, summed over blocks of up to 64 rows and then
/// over the blocks: one f32 running sum over thousands of tokens rounds every small square
/// against a massive activation (SmolLM2's MLP hidden at position 0) and drifts by ~1e-4
/// relative, enough to move Wanda's masks at 70 % (issue 22); the fused CPU kernel sums in f64.
///
/// # Shapes
/// - `x`: `[samples, rows, width]` → `[samples, width]`
fn column_sum_sq<B: Backend>(x: Tensor<B, 3>) -> Tensor<B, 2> {
    let [samples, rows, width] = x.dims();
    let block = (1..=64)
        .rev()
        .find(|&b| rows.is_multiple_of(b))
        .unwrap_or(1);
    x.square()
        .reshape([samples, rows / block, block, width])
        .sum_dim(2)
        .reshape([samples, rows / block, width])
        .sum_dim(1)
        .reshape([samples, width])
}

/// Prunes every decoder layer of `model` in place and returns the measured sparsity.
///
/// `calibration` holds the token windows (each the same length); it is required unless
/// [`MethodOptions::needs_calibration`] says otherwise. `batching` says how many samples run
/// through a layer at once and where their activations wait between layers (a batch size
/// alone: on the device). `progress(step, steps)` is called after each layer of each pass.
/// Layers are taken one at a time and put back pruned, so a streamed model
/// ([`crate::model::checkpoint`]) holds one layer in memory. Under OWL a first pass runs the
/// calibration samples through the dense model for the outlier ratios (the first half of the
/// steps), and then the pruning pass runs as usual.
pub fn prune_model<B: Backend>(
    model: &mut impl Layers<B>,
    method: Method,
    options: &MethodOptions,
    sparsity: Sparsity,
    calibration: &[Vec<u32>],
    batching: impl Into<Batching>,
    mut progress: impl FnMut(usize, usize),
) -> Result<ModelSparsity, PruneError> {
    let batching = batching.into();
    sparsity.validate()?;
    options.profile.validate()?;
    let on_device = device_selects::<B>()?;
    if let Some(update) = options.weight_update {
        check_weight_update(update, method, options)?;
    }
    if let Some(d) = &options.dsnot {
        d.validate()?;
        if method == Method::Ria {
            return Err(PruneError::InvalidOptions {
                reason: "dsnot refines a wanda, magnitude or sparsegpt mask, not ria's".into(),
            });
        }
    }
    let layers = model.layer_count();
    let mut measured_sparsity = ModelSparsity::default();
    let target = match sparsity {
        Sparsity::Unstructured { ratio } => ratio,
        Sparsity::NM { .. } if !options.profile.is_uniform() => {
            return Err(PruneError::InvalidProfile {
                reason: format!(
                    "profile `{}` sets a ratio per layer, and pattern `{sparsity}` fixes one; \
                     use an unstructured sparsity or `profile: uniform`",
                    options.profile.label()
                ),
            })
        }
        Sparsity::NM { .. } => 0.0,
    };
    let mut per_layer = match options.profile.explicit_ratios(layers, target)? {
        Some(ratios) => ratios
            .into_iter()
            .map(Sparsity::unstructured)
            .collect::<Result<Vec<_>, _>>()?,
        None => vec![sparsity; layers],
    };
    let device = model.shell().embed_tokens.weight.device();
    let mut clock = PhaseClock::new("prune", || {
        let _ = B::sync(&device);
    });
    if !options.needs_calibration(method) {
        let measured =
            prune_by_magnitude(model, options, &per_layer, on_device, &mut clock, progress)?;
        return Ok(report(measured, options, &per_layer, Vec::new()));
    }
    let seqlen = calibration.first().map(Vec::len).unwrap_or(0);
    if calibration.is_empty() || seqlen == 0 || calibration.iter().any(|w| w.len() != seqlen) {
        return Err(PruneError::NoSamples {
            what: "calibration set (empty or windows of unequal length)",
        });
    }
    let shell = model.shell();
    let batch = batching.batch.max(1);
    // Inputs of layer 0, one tensor per batch of samples: the calibration activations.
    let embed = || -> Activations<B> {
        let batches = calibration.chunks(batch).map(|chunk| {
            let ids: Vec<i64> = chunk.iter().flatten().map(|&t| i64::from(t)).collect();
            let tokens = Tensor::<B, 2, Int>::from_data(
                TensorData::new(ids, [chunk.len(), seqlen]),
                &device,
            );
            shell.embed(tokens)
        });
        Activations::new(batches, batching.host_activations, &device)
    };
    let (cos, sin) = shell.rope_tables(0, seqlen);
    let mut outlier_ratios = Vec::new();
    let owl = options.profile.owl();
    // Under OWL its dense pass is the first `layers` steps of the progress.
    let done_before = if owl.is_some() { layers } else { 0 };
    let steps = done_before + layers;
    if let Some(owl) = owl {
        let mut dense_done = |i| progress(i, steps);
        outlier_ratios = owl_outlier_ratios(model, embed(), &cos, &sin, owl.m, &mut dense_done)?;
        clock.lap("owl's dense pass");
        per_layer = owl_layer_sparsities(&outlier_ratios, target, owl.lambda)?;
    }
    if !method.needs_calibration() && options.dsnot.is_none() && options.weight_update.is_none() {
        // Magnitude under OWL: the calibration samples were for the ratios alone.
        let after_owl = |done, _| progress(done_before + done, steps);
        let measured =
            prune_by_magnitude(model, options, &per_layer, on_device, &mut clock, after_owl)?;
        return Ok(report(measured, options, &per_layer, outlier_ratios));
    }
    let mut inputs = embed();
    clock.lap("embed");
    let needs = Needs::of(method, options);
    let zeroes_only = zeros_go_back_as_masks::<B>(options.only_zeroes(method));
    for (i, &layer_sparsity) in per_layer.iter().enumerate() {
        let mut layer = take_checked_layer(model, i, &options.skip)?;
        clock.lap("read layer");
        let mut stats = LayerStats::<B>::new(needs);
        stats.observe(&layer, &inputs, &cos, &sin)?;
        clock.lap("observe");
        let host = stats.host_for(&layer);
        clock.lap("statistics to host");
        let rule = device_rule(on_device, method, options, layer_sparsity);
        let plan = LayerPlan {
            index: i,
            skip: &options.skip,
            zeroes_only,
            rows_apart: rows_apart(rule),
        };
        let measured = prune_layer(
            &mut layer,
            plan,
            &mut clock,
            |asked| select_on_device(rule, asked, Some(&host)),
            |w, dims, name, input| {
                let stat = host.get(&input).ok_or(PruneError::NoSamples {
                    what: "layer input statistics",
                })?;
                prune_linear(w, dims, name, stat, method, options, layer_sparsity)
            },
        )?;
        measured_sparsity.add_layer(i, measured);
        inputs = inputs.forward(&layer, &cos, &sin);
        clock.lap("forward");
        model.set_layer(i, layer)?;
        clock.lap("write layer");
        progress(done_before + i + 1, steps);
    }
    // The calibration activations and work buffers are gone; the heap need not keep them.
    drop(inputs);
    crate::sys::allocator::release_freed_memory();
    Ok(report(
        measured_sparsity,
        options,
        &per_layer,
        outlier_ratios,
    ))
}

/// Refuses a weight update where the reference has none: a method other than magnitude or Wanda,
/// Wanda's variant, DSnoT, or a per-layer profile.
fn check_weight_update(
    update: WeightUpdate,
    method: Method,
    options: &MethodOptions,
) -> Result<(), PruneError> {
    let other = if !matches!(method, Method::Magnitude | Method::Wanda) {
        format!("method `{method}`")
    } else if options.use_variant {
        "`use_variant`".into()
    } else if options.dsnot.is_some() {
        "`dsnot`".into()
    } else if !options.profile.is_uniform() {
        format!("profile `{}`", options.profile.label())
    } else {
        return Ok(());
    };
    Err(PruneError::InvalidOptions {
        reason: format!(
            "`weight_update: {}` updates what magnitude or wanda keeps (uniform profile, no \
             variant, no dsnot), and this run has {other}",
            update.name()
        ),
    })
}

/// Magnitude pruning of every layer at its sparsity in `per_layer`: no calibration, each
/// layer read, pruned (selected where `on_device` says) and put back in turn.
fn prune_by_magnitude<B: Backend>(
    model: &mut impl Layers<B>,
    options: &MethodOptions,
    per_layer: &[Sparsity],
    on_device: SelectOn,
    clock: &mut PhaseClock<impl Fn()>,
    mut progress: impl FnMut(usize, usize),
) -> Result<ModelSparsity, PruneError> {
    let layers = model.layer_count();
    let mut measured_sparsity = ModelSparsity::default();
    for (i, &layer_sparsity) in per_layer.iter().enumerate() {
        let mut layer = take_checked_layer(model, i, &options.skip)?;
        let rule = device_rule(on_device, Method::Magnitude, options, layer_sparsity);
        let plan = LayerPlan {
            index: i,
            skip: &options.skip,
            zeroes_only: zeros_go_back_as_masks::<B>(true),
            rows_apart: rows_apart(rule),
        };
        let measured = prune_layer(
            &mut layer,
            plan,
            clock,
            |asked| select_on_device(rule, asked, None),
            |w, dims, _, _| prune_magnitude(w, dims, layer_sparsity).map(|_| ()),
        )?;
        measured_sparsity.add_layer(i, measured);
        model.set_layer(i, layer)?;
        progress(i + 1, layers);
    }
    Ok(measured_sparsity)
}

/// The measured sparsity of the pruned model, with each layer's target when a profile set
/// them and OWL's outlier ratios.
fn report(
    mut report: ModelSparsity,
    options: &MethodOptions,
    per_layer: &[Sparsity],
    outlier_ratios: Vec<f64>,
) -> ModelSparsity {
    if !options.profile.is_uniform() {
        report.layer_targets = per_layer.iter().map(Sparsity::target_ratio).collect();
    }
    report.outlier_ratios = outlier_ratios;
    report
}

/// Each layer's sparsity from OWL's outlier ratios ([`owl_sparsities`]); a ratio outside
/// [0, 1) is an error that says how to avoid it.
fn owl_layer_sparsities(
    outlier_ratios: &[f64],
    target: f64,
    lambda: f64,
) -> Result<Vec<Sparsity>, PruneError> {
    owl_sparsities(outlier_ratios, target, lambda)
        .into_iter()
        .enumerate()
        .map(|(i, ratio)| {
            Sparsity::unstructured(ratio).map_err(|_| PruneError::InvalidProfile {
                reason: format!(
                    "owl puts decoder layer {i} at sparsity {ratio:.4}, outside [0, 1); \
                     lower `lambda` (now {lambda}) or the target"
                ),
            })
        })
        .collect()
}

/// OWL's first pass: the calibration samples run once through each dense layer (nothing is
/// pruned or stored; the reference runs each layer twice, for the statistics and for the
/// outputs, which are the same), and each layer's outlier ratio is taken from the Wanda scores
/// of all its linears pooled, `|W|·sqrt(scaler_row)` as the reference scores them.
/// `progress(i)` after `i` layers.
fn owl_outlier_ratios<B: Backend>(
    model: &impl Layers<B>,
    mut inputs: Activations<B>,
    cos: &Tensor<B, 2>,
    sin: &Tensor<B, 2>,
    m: f64,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<f64>, PruneError> {
    let mut ratios = Vec::with_capacity(model.layer_count());
    for i in 0..model.layer_count() {
        let layer = model.layer(i)?;
        let mut stats = LayerStats::<B>::new(Needs::sums_of_squares());
        inputs = stats.observe_forward(&layer, inputs, cos, sin)?;
        let host = stats.host_for(&layer);
        let mut pooled = Vec::new();
        for (_, input, linear) in layer.linears() {
            let stat = host.get(&input).ok_or(PruneError::NoSamples {
                what: "layer input statistics",
            })?;
            let (w, dims) = host_weight(linear.weight.val());
            let scaler = stat.norms(dims[0])?.scaler_row();
            let root: Vec<f64> = scaler.iter().map(|s| s.sqrt()).collect();
            pooled.extend(wanda_scores(&w, dims, &root)?);
        }
        ratios.push(outlier_ratio(&pooled, m));
        progress(i + 1);
    }
    Ok(ratios)
}

/// Prunes one linear (`name`, e.g. `self_attn.q_proj`) with its input statistics.
fn prune_linear(
    w: &mut [f32],
    dims: [usize; 2],
    name: &str,
    stat: &HostStats,
    method: Method,
    options: &MethodOptions,
    sparsity: Sparsity,
) -> Result<(), PruneError> {
    let norms = || stat.norms(dims[0]);
    let hessian = || stat.hessian(dims[0]);
    if let Some(update) = options.weight_update {
        let norms = match method {
            Method::Wanda => Some(norms()?),
            _ => None,
        };
        let h = hessian()?;
        let metric = UpdateMetric::of(method, norms.as_ref())?;
        return prune_with_update(w, dims, &h, metric, sparsity, update, &options.sparsegpt)
            .map(|_| ());
    }
    if let (Some(dsnot), Some(moments)) = (&options.dsnot, &stat.moments) {
        let norms = norms()?;
        let wanda = wanda_scores(w, dims, &norms.norms())?;
        let initial = match method {
            Method::Wanda => wanda.clone(),
            Method::Magnitude => magnitude_scores(w),
            Method::Sparsegpt => obs_saliency(w, dims, &hessian()?, options.sparsegpt.percdamp)?,
            Method::Ria => unreachable!("prune_model refuses dsnot with ria"),
        };
        let inputs = DsnotInputs {
            weight: w,
            initial: &initial,
            wanda: &wanda,
            token_sum: &moments.mean_token_sum(),
            variance: &moments.variance(),
        };
        let mask = dsnot_mask(&inputs, dims, sparsity, dsnot, dsnot.refines(name))?;
        return apply_mask(w, &mask).map(|_| ());
    }
    match method {
        Method::Wanda => prune_wanda(w, dims, &norms()?, sparsity, options.use_variant).map(|_| ()),
        Method::Ria => {
            prune_ria(w, dims, &norms()?, sparsity, options.channel_permutation).map(|_| ())
        }
        Method::Sparsegpt => {
            prune_sparsegpt(w, dims, &hessian()?, sparsity, &options.sparsegpt).map(|_| ())
        }
        Method::Magnitude => prune_magnitude(w, dims, sparsity).map(|_| ()),
    }
}

/// Decoder layer `i` taken from `model` to be pruned ([`Layers::take_layer`]); before the
/// first one, the `skip` patterns are checked ([`check_skip_in`]), so a refused pattern leaves
/// the model as it was.
fn take_checked_layer<B: Backend>(
    model: &mut impl Layers<B>,
    i: usize,
    skip: &[String],
) -> Result<DecoderLayer<B>, PruneError> {
    if i == 0 && !skip.is_empty() {
        check_skip_in(model, skip)?;
    }
    Ok(model.take_layer(i)?)
}

/// [`check_skip`] with the linears of `model`'s layer 0 and, where a pattern matches none of
/// them, also those of its last layer: a mixture of experts' first layers can have a dense MLP
/// (GLM-4.5's `first_k_dense_replace`), its router and experts only in the later ones. Each
/// layer is read and let go in turn (a streamed model holds one at a time).
fn check_skip_in<B: Backend>(model: &impl Layers<B>, skip: &[String]) -> Result<(), PruneError> {
    let layers = model.layer_count();
    let names = |i| -> Result<Vec<String>, PruneError> {
        let layer = model.layer(i)?;
        Ok(layer
            .linears()
            .into_iter()
            .map(|(name, _, _)| name)
            .collect())
    };
    let mut all = names(0)?;
    match check_skip(skip, layers, &all) {
        Err(_) if layers > 1 => {
            all.extend(names(layers - 1)?);
            check_skip(skip, layers, &all)
        }
        checked => checked,
    }
}

/// How a pruned linear goes back to the device.
enum PrunedWeight<B: Backend> {
    /// Where the method only zeroed weights: which ones (`true`: now zero), 1 byte a weight
    /// instead of the weight's 2 or 4, applied on the device.
    Zeroed(Vec<bool>),
    /// Where it changed values too (SparseGPT's update): the whole weight.
    Updated(Vec<f32>),
    /// Where the device selected (see [`DeviceRule`]): which ones to zero, there already.
    ZeroedOnDevice(Tensor<B, 2, Bool>),
}

impl<B: Backend> PrunedWeight<B> {
    /// A host copy `w` pruned: the mask of its zeros where pruning only zeroed
    /// (`zeroes_only`), else the whole weight.
    fn from_host(w: Vec<f32>, zeroes_only: bool) -> Self {
        if zeroes_only {
            PrunedWeight::Zeroed(w.par_iter().map(|v| v.to_bits() == 0).collect())
        } else {
            PrunedWeight::Updated(w)
        }
    }
}

/// A selection rule [`device_select`] runs on the weights' device.
#[derive(Debug, Clone, Copy, PartialEq)]
enum DeviceRule {
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
const DEVICE_SELECT_VAR: &str = "WANDA_DEVICE_SELECT";

/// Where the selection runs ([`DEVICE_SELECT_VAR`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SelectOn {
    /// On the host, on a copy of each weight.
    Host,
    /// On the weights' device, by the backend's selection kernels where it has them.
    Device,
    /// On the weights' device, by bisection in Burn's operations only.
    DeviceBisection,
}

/// Where the selection runs ([`DEVICE_SELECT_VAR`]; by default on the device where the
/// backend's kernels say so), read once per run, before any work.
fn device_selects<B: Backend>() -> Result<SelectOn, PruneError> {
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
fn device_rule(
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

/// The Wanda norms (f32) of the input `entry`'s weight reads, from the input statistics `host`;
/// `None` where there are none.
fn wanda_norms<B: Backend>(
    (w, input): &(Tensor<B, 2>, LinearInput),
    host: Option<&BTreeMap<LinearInput, HostStats>>,
) -> Option<Vec<f32>> {
    let dims = w.dims();
    let stat = host?.get(input)?;
    checked_norms(&stat.norms(dims[0]).ok()?, dims).ok()
}

/// The zeros `rule` selects on the weights' device in each of `asked` (a layer's linears with
/// the input each reads), Wanda's from the input statistics `host`; `None` for a linear the host
/// is to select (no rule, or see [`device_select`]). Each rule runs the backend's selection
/// kernels where the rule says so and there are some (on CUDA); otherwise magnitude's bisects,
/// and Wanda's per-output rule selects consecutive linears with the same input rows (q, k, v
/// and o) together while they hold at most a [`PIECE`] of weights
/// ([`per_output_zeros_together`]). The N:M rule runs only the backend's kernel.
///
/// # Shapes
/// - each weight `[in, out]` → its zeros `[in, out]`
fn select_on_device<B: Backend>(
    rule: Option<DeviceRule>,
    asked: &[(Tensor<B, 2>, LinearInput)],
    host: Option<&BTreeMap<LinearInput, HostStats>>,
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
                    wanda_norms(entry, host)?
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
                let Some(norms) = wanda_norms(entry, host) else {
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
fn select_group<B: Backend>(
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

/// What [`prune_layer`] is to do with one layer.
struct LayerPlan<'a> {
    /// The layer's index in the model.
    index: usize,
    /// Glob patterns of linears left as they are.
    skip: &'a [String],
    /// Whether pruning only zeroes weights, which then go back as masks of their zeros.
    zeroes_only: bool,
    /// Whether the selection treats every output apart ([`rows_apart`]).
    rows_apart: bool,
}

/// Whether the device's rule selects each output of a weight apart from the others (Wanda's
/// per-output rule, the N:M rule), so a stacked matrix's parts may be selected one by one with
/// the same result as the whole.
fn rows_apart(rule: Option<DeviceRule>) -> bool {
    matches!(
        rule,
        Some(DeviceRule::PerOutput { .. } | DeviceRule::Groups { .. })
    )
}

/// The linears of a layer pruned as the one matrix the checkpoint stacks them in
/// ([`DecoderLayer::stacked`]): for each stack, the indices in `linears` of its parts that are
/// not skipped, where two or more read the same input and have as many inputs.
fn joint_groups(
    stacked: &[FusedLinear],
    linears: &[(String, LinearInput, bool, [usize; 2])],
) -> Vec<Vec<usize>> {
    stacked
        .iter()
        .filter_map(|f| {
            let members: Vec<usize> = f
                .parts
                .iter()
                .filter_map(|part| {
                    linears
                        .iter()
                        .position(|(name, _, skipped, _)| name == part && !skipped)
                })
                .collect();
            let first = &linears[*members.first()?];
            let alike = members.iter().all(|&i| {
                let (_, input, _, dims) = &linears[i];
                *input == first.1 && dims[0] == first.3[0]
            });
            (members.len() > 1 && alike).then_some(members)
        })
        .collect()
}

/// Prunes the linears `parts` of `layer` (one stack's parts with their `[in, out]`, reading
/// `input`) as one matrix: their weights side by side, `[in, Σ out]`, pruned by `prune` under
/// the first part's name, then apart again. Returns each part's name, measured sparsity, and
/// how it goes back.
fn prune_jointly<'a, B: Backend>(
    layer: &DecoderLayer<B>,
    parts: &[(&'a str, [usize; 2])],
    input: LinearInput,
    zeroes_only: bool,
    prune: &mut impl FnMut(&mut [f32], [usize; 2], &str, LinearInput) -> Result<(), PruneError>,
) -> Result<Vec<PrunedPart<'a, B>>, PruneError> {
    let all = layer.linears();
    let weights: Vec<Vec<f32>> = parts
        .iter()
        .map(|(name, _)| {
            let (_, _, linear) = all
                .iter()
                .find(|(n, _, _)| n == name)
                .expect("names come from DecoderLayer::linears");
            to_host_f32(linear.weight.val())
        })
        .collect();
    let rows = parts[0].1[0];
    let width: usize = parts.iter().map(|(_, [_, cols])| cols).sum();
    let mut joint = Vec::with_capacity(rows * width);
    for r in 0..rows {
        for (w, (_, [_, cols])) in weights.iter().zip(parts) {
            joint.extend_from_slice(&w[r * cols..(r + 1) * cols]);
        }
    }
    drop(weights);
    prune(&mut joint, [rows, width], parts[0].0, input)?;
    let mut out = Vec::with_capacity(parts.len());
    let mut offset = 0;
    for &(name, dims) in parts {
        let cols = dims[1];
        let w: Vec<f32> = joint
            .chunks(width)
            .flat_map(|row| &row[offset..offset + cols])
            .copied()
            .collect();
        offset += cols;
        let measured = MatrixSparsity::measure(&w, dims)?;
        out.push((
            name,
            measured,
            PrunedWeight::from_host(w, zeroes_only),
            dims,
        ));
    }
    Ok(out)
}

/// One pruned linear: its name, measured sparsity, how it goes back, its dims.
type PrunedPart<'a, B> = (&'a str, MatrixSparsity, PrunedWeight<B>, [usize; 2]);

/// Whether pruned weights go back to the device as masks of their zeros (`zeroes_only` of
/// [`prune_layer`]): when pruning only zeroes, and the device is not the host's memory, where
/// the host copy itself goes back by moving its buffer (1.1 s less per Llama-2-7B layer than
/// building a mask and zeroing, B7).
fn zeros_go_back_as_masks<B: Backend>(only_zeroes: bool) -> bool {
    only_zeroes && !kernels::<B>().host_resident()
}

/// Prunes the linears of layer `plan.index` with `prune(weight, [in, out], name, input)`, except those a
/// `plan.skip` pattern names; all weights are pruned on the host first and stored back only when
/// every one succeeded. Returns the sparsity of every linear, measured on the host copies. After
/// an error the layer may lack weights: its callers drop it.
///
/// `zeroes_only` says `prune` changes no value but to zero it: each weight then goes back as
/// the mask of its zeros (`+0.0`, as pruning writes them; an original `-0.0` is left as it
/// was), which gives the same tensor as uploading the host copy with a quarter of an f32
/// weight's bytes — on a GPU, where the upload is the cost (`results/gpu-h200-2026-11-26-phases/`).
/// Otherwise a weight goes back whole, so it is taken out of the layer before going to the
/// host: a buffer the layer holds alone (a streamed layer's) then moves instead of being copied.
///
/// The parts of a matrix the checkpoint stacks ([`DecoderLayer::stacked`]) are pruned as that
/// one matrix on the host ([`prune_jointly`]), unless `rows_apart` says the selection treats
/// every output apart (then each part alone gives the same zeros).
///
/// `on_device` is asked first, once, with every other linear that is not skipped (its weight
/// and the input it reads): for each, the zeros selected on the weight's device, or `None` to
/// prune it on the host.
fn prune_layer<B: Backend>(
    layer: &mut DecoderLayer<B>,
    plan: LayerPlan,
    clock: &mut PhaseClock<impl Fn()>,
    on_device: impl Fn(&[(Tensor<B, 2>, LinearInput)]) -> Vec<Option<Tensor<B, 2, Bool>>>,
    mut prune: impl FnMut(&mut [f32], [usize; 2], &str, LinearInput) -> Result<(), PruneError>,
) -> Result<Vec<(String, MatrixSparsity)>, PruneError> {
    let LayerPlan {
        index,
        skip,
        zeroes_only,
        rows_apart,
    } = plan;
    let mut pruned = Vec::with_capacity(7);
    let mut measured = Vec::with_capacity(7);
    let described: Vec<(String, LinearInput, bool, [usize; 2])> = layer
        .linears()
        .into_iter()
        .map(|(name, input, linear)| {
            let path = linear_path(index, &name);
            let skipped = skip.iter().any(|p| glob_matches(p, &path));
            (name, input, skipped, linear.weight.dims())
        })
        .collect();
    let groups = if rows_apart {
        Vec::new()
    } else {
        joint_groups(layer.stacked, &described)
    };
    let grouped = |i: usize| groups.iter().any(|g| g.contains(&i));
    let asked: Vec<(Tensor<B, 2>, LinearInput)> = layer
        .linears()
        .into_iter()
        .zip(&described)
        .enumerate()
        .filter(|(i, (_, (_, _, skipped, _)))| !skipped && !grouped(*i))
        .map(|(_, ((_, input, linear), _))| (linear.weight.val(), input))
        .collect();
    let selections = on_device(&asked);
    drop(asked);
    let mut selected = selections.into_iter();
    for (i, (name, input, skipped, _)) in described.iter().enumerate() {
        let (name, input, skipped) = (name.as_str(), *input, *skipped);
        if let Some(group) = groups.iter().find(|g| g.contains(&i)) {
            if group[0] == i {
                let parts: Vec<(&str, [usize; 2])> = group
                    .iter()
                    .map(|&j| (described[j].0.as_str(), described[j].3))
                    .collect();
                for (name, sparsity, back, dims) in
                    prune_jointly(layer, &parts, input, zeroes_only, &mut prune)?
                {
                    measured.push((name.to_string(), sparsity));
                    pruned.push((name, back, dims));
                }
                clock.lap("prune on host");
            }
            continue;
        }
        let linear = layer
            .linear_mut(name)
            .expect("names come from DecoderLayer::linears");
        if let Some(zeros) = (!skipped).then(|| selected.next().flatten()).flatten() {
            let weight = linear.weight.val();
            measured.push((name.to_string(), measure_on_device(&weight, &zeros)));
            pruned.push((name, PrunedWeight::ZeroedOnDevice(zeros), weight.dims()));
            clock.lap("select on device");
            continue;
        }
        let weight = if skipped || zeroes_only {
            linear.weight.val()
        } else {
            take_param(&mut linear.weight)
        };
        let dims = weight.dims();
        let mut w = to_host_f32(weight);
        clock.lap("weights to host");
        if !skipped {
            prune(&mut w, dims, name, input)?;
        }
        measured.push((name.to_string(), MatrixSparsity::measure(&w, dims)?));
        if !skipped {
            pruned.push((name, PrunedWeight::from_host(w, zeroes_only), dims));
        }
        clock.lap("prune on host");
    }
    for (name, back, dims) in pruned {
        let linear = layer
            .linear_mut(name)
            .expect("names come from DecoderLayer::linears");
        let device = linear.weight.lazy_device();
        let mask = match back {
            PrunedWeight::ZeroedOnDevice(mask) => mask,
            PrunedWeight::Zeroed(zeros) => {
                Tensor::<B, 2, Bool>::from_data(TensorData::new(zeros, dims), &device)
            }
            PrunedWeight::Updated(w) => {
                linear.weight =
                    Param::from_tensor(weight_tensor(TensorData::new(w, dims), &device));
                continue;
            }
        };
        let old = linear.weight.val();
        // A long-lived tensor, as a weight upload is (model::host::weight_tensor).
        let weight = B::memory_persistent_allocations(&device, (old, mask), |(w, mask)| {
            w.mask_fill(mask, 0.0)
        });
        linear.weight = Param::from_tensor(weight);
    }
    clock.lap("weights to device");
    Ok(measured)
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;

    use super::*;

    /// The sums of squares of four samples, in one batch and one at a time.
    fn batched_and_single_sums<B: Backend>() -> (Vec<f64>, Vec<f64>) {
        let (samples, seq, width) = (4, 64, 24);
        let (values, _) = crate::model::kernels::massive_first_row(samples * seq, width);
        let device = Default::default();
        let tensor = |rows: &[f32], batch: usize| {
            Tensor::<B, 3>::from_data(TensorData::new(rows.to_vec(), [batch, seq, width]), &device)
        };
        let sums = |stats: LayerStats<B>| match stats.host().remove(&LinearInput::MlpIn) {
            Some(HostStats {
                sum_sq: Some(sums),
                samples: 4,
                tokens: 256,
                ..
            }) => sums,
            _ => panic!("expected the sums of squares of 4 samples"),
        };
        let mut whole = LayerStats::new(Needs::sums_of_squares());
        whole
            .add(LinearInput::MlpIn, &tensor(&values, samples))
            .unwrap();
        let mut single = LayerStats::new(Needs::sums_of_squares());
        for sample in values.chunks_exact(seq * width) {
            single.add(LinearInput::MlpIn, &tensor(sample, 1)).unwrap();
        }
        (sums(whole), sums(single))
    }

    /// The sums of squares of four samples are the same to the bit whether the samples come
    /// in one batch or one at a time, so the calibration batch size never moves a mask: with
    /// the fused kernels (NdArray) and with Burn's ops, whose per-sample sums wait on the
    /// device until the statistics go to the host (Flex).
    #[test]
    fn sums_of_squares_do_not_depend_on_the_batch_size() {
        let (fused, fused_single) = batched_and_single_sums::<NdArray<f32>>();
        assert!(fused.iter().all(|s| *s > 0.0));
        assert_eq!(fused, fused_single);
        let (generic, generic_single) = batched_and_single_sums::<burn::backend::Flex>();
        assert_eq!(generic, generic_single);
        // Both sum each sample's column sums in f64; the per-sample sums differ in rounding.
        for (g, f) in generic.iter().zip(&fused) {
            assert!(((g - f) / f).abs() < 2e-6, "{g} vs {f}");
        }
    }

    /// OWL's one pass over a dense layer gives what observing it and then running it give:
    /// the same statistics and the same outputs, to the bit, with the fused kernels (NdArray)
    /// and with Burn's ops (Flex).
    fn one_pass_equals_two<B: Backend>() {
        let device = Default::default();
        let config = crate::model::arch::HfLlamaConfig::from_json(
            r#"{"architectures":["LlamaForCausalLM"],"hidden_size":16,"intermediate_size":24,
            "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,
            "vocab_size":32,"rms_norm_eps":1e-5}"#,
        )
        .unwrap()
        .resolve()
        .unwrap();
        let model = crate::model::decoder::Llama::<B>::init_random(&config, 3, &device);
        let layer = &model.layers[0];
        let (seq, hidden) = (12, 16);
        let inputs = || {
            let batches = [(2usize, 0.5f32), (1, -0.25)].map(|(batch, phase)| {
                let values: Vec<f32> = (0..batch * seq * hidden)
                    .map(|i| (i as f32 * 0.37 + phase).sin())
                    .collect();
                Tensor::<B, 3>::from_data(TensorData::new(values, [batch, seq, hidden]), &device)
            });
            Activations::new(batches, false, &device)
        };
        let (cos, sin) = model.rope_tables(0, seq);
        let sums = |stats: LayerStats<B>| -> Vec<(LinearInput, Vec<f64>, usize, usize)> {
            stats
                .host()
                .into_iter()
                .map(|(input, stat)| {
                    let sums = stat.sum_sq.expect("sums of squares were asked for");
                    (input, sums, stat.samples, stat.tokens)
                })
                .collect()
        };
        let outputs = |a: &Activations<B>| -> Vec<Vec<f32>> {
            a.iter()
                .map(|t| t.into_data().to_vec::<f32>().unwrap())
                .collect()
        };
        let mut two = LayerStats::<B>::new(Needs::sums_of_squares());
        two.observe(layer, &inputs(), &cos, &sin).unwrap();
        let forwarded = inputs().forward(layer, &cos, &sin);
        let mut one = LayerStats::<B>::new(Needs::sums_of_squares());
        let passed = one.observe_forward(layer, inputs(), &cos, &sin).unwrap();
        let (two, one) = (sums(two), sums(one));
        assert_eq!(one.len(), 4, "every shared input is observed");
        assert!(one
            .iter()
            .all(|(_, _, samples, tokens)| (*samples, *tokens) == (3, 36)));
        assert_eq!(one, two);
        assert_eq!(outputs(&passed), outputs(&forwarded));
    }

    #[test]
    fn owls_one_pass_equals_observing_then_forwarding() {
        one_pass_equals_two::<NdArray<f32>>();
        one_pass_equals_two::<burn::backend::Flex>();
    }

    /// The backend-generic sums (used where the fused kernel is not) after a massive first row:
    /// within 2e-6 of the exact sums, where one f32 running sum drifts past 1e-5 (issue 22).
    #[test]
    fn blocked_column_sums_survive_a_massive_row() {
        let (rows, width) = (4096, 24);
        let (values, exact) = crate::model::kernels::massive_first_row(rows, width);
        let relative = |sums: &[f32]| {
            sums.iter()
                .zip(&exact)
                .map(|(&s, &e)| ((f64::from(s) - e) / e).abs())
                .fold(0.0f64, f64::max)
        };
        let x = Tensor::<NdArray<f32>, 2>::from_data(
            TensorData::new(values, [rows, width]),
            &Default::default(),
        );
        let running: Vec<f32> = x.clone().square().sum_dim(0).into_data().to_vec().unwrap();
        assert!(
            relative(&running) > 1e-5,
            "the input must defeat a running sum"
        );
        let blocked: Vec<f32> = column_sum_sq(x.reshape([1, rows, width]))
            .into_data()
            .to_vec()
            .unwrap();
        assert!(relative(&blocked) < 2e-6, "{}", relative(&blocked));
    }
}
