//! Pruning a layer's linears: one at a time ([`prune_linear`]), or those that read the same
//! input together on the device ([`prune_jointly`]), and how each goes back ([`PrunedWeight`]).

use super::*;

/// Prunes one linear (`name`, e.g. `self_attn.q_proj`) with its input statistics.
pub(super) fn prune_linear(
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
            Method::Reap | Method::Frequency | Method::Ean | Method::WeightedFrequency => {
                return Err(weights_only(method))
            }
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
        Method::Reap | Method::Frequency | Method::Ean | Method::WeightedFrequency => {
            Err(weights_only(method))
        }
    }
}

/// The refusal of an expert method where weights are pruned.
pub(super) fn weights_only(method: Method) -> PruneError {
    PruneError::InvalidOptions {
        reason: format!(
            "`{method}` removes experts, not weights: use it in a pipeline's prune stage with \
             `experts:` (a fraction or a count) instead of a sparsity"
        ),
    }
}

/// How a pruned linear goes back to the device.
pub(super) enum PrunedWeight<B: Backend> {
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
    pub(super) fn from_host(w: Vec<f32>, zeroes_only: bool) -> Self {
        if zeroes_only {
            PrunedWeight::Zeroed(w.par_iter().map(|v| v.to_bits() == 0).collect())
        } else {
            PrunedWeight::Updated(w)
        }
    }
}

/// What [`prune_layer`] is to do with one layer.
pub(super) struct LayerPlan<'a> {
    /// The layer's index in the model.
    pub(super) index: usize,
    /// Glob patterns of linears left as they are.
    pub(super) skip: &'a [String],
    /// Whether pruning only zeroes weights, which then go back as masks of their zeros.
    pub(super) zeroes_only: bool,
    /// Whether the selection treats every output apart ([`rows_apart`]).
    pub(super) rows_apart: bool,
}

/// Whether the device's rule selects each output of a weight apart from the others (Wanda's
/// per-output rule, the N:M rule), so a stacked matrix's parts may be selected one by one with
/// the same result as the whole.
pub(super) fn rows_apart(rule: Option<DeviceRule>) -> bool {
    matches!(
        rule,
        Some(DeviceRule::PerOutput { .. } | DeviceRule::Groups { .. })
    )
}

/// The linears of a layer pruned as the one matrix the checkpoint stacks them in
/// ([`DecoderLayer::stacked`]): for each stack, the indices in `linears` of its parts that are
/// not skipped, where two or more read the same input and have as many inputs.
pub(super) fn joint_groups(
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
pub(super) fn prune_jointly<'a, B: Backend>(
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
pub(super) type PrunedPart<'a, B> = (&'a str, MatrixSparsity, PrunedWeight<B>, [usize; 2]);
