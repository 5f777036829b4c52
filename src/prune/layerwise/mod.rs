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

mod joint;
mod stats;

use joint::{joint_groups, prune_jointly, prune_linear, rows_apart, LayerPlan, PrunedWeight};
use stats::{wanda_norms, HostStats, LayerStats, Needs};

use std::collections::{BTreeMap, BTreeSet};

use burn::module::Param;
use burn::prelude::*;
use burn::tensor::FloatDType;
use rayon::prelude::*;
use serde::Serialize;

use super::activations::{window_length, Activations, Batching};
use super::device_select::{
    device_rule, device_selects, measure_on_device, select_on_device, DeviceRule, SelectOn,
};
use super::dsnot::{dsnot_mask, DsnotInputs, InputMoments};
use super::magnitude::{magnitude_scores, prune_magnitude};
use super::mask::apply_mask;
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
use crate::model::checkpoint::Layers;
use crate::model::decoder::{DecoderLayer, LayerContext, LinearInput};
use crate::model::kernels::kernels;
use crate::model::kernels::{take_param, to_host_f32, weight_tensor};
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
    if method.removes_experts() {
        return Err(joint::weights_only(method));
    }
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
    let seqlen = window_length(calibration)?;
    let shell = model.shell();
    // Inputs of layer 0, one tensor per batch of samples: the calibration activations.
    let embed = || Activations::embed(shell, calibration, seqlen, batching, &device);
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
            |asked| select_on_device(rule, asked, &|entry| wanda_norms(entry, Some(&host))),
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
            |asked| select_on_device(rule, asked, &|_| None),
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

    use super::stats::column_sum_sq;
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
