//! What a layer's pruning reads of its inputs: Σ x² per channel in f64, the Gram matrix,
//! DSnoT's moments ([`LayerStats`]), gathered as the calibration samples run through the layer.

use super::*;

/// Which statistics a layer's pruning reads.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct Needs {
    /// Σ x x ᵀ (sparsegpt, a weight update); its diagonal gives the norms when `sum_sq` is off.
    pub(super) gram: bool,
    /// Σ x² per channel beside the Gram matrix (always without one).
    pub(super) sum_sq: bool,
    /// Each sample's Σ x² weighted as the reference's weight-update ablation weighs it
    /// ([`ablation_sample_weight`]) instead of equally.
    ablation_weights: bool,
    /// DSnoT's moments.
    pub(super) moments: bool,
}

impl Needs {
    /// What `method` with `options` reads.
    pub(super) fn of(method: Method, options: &MethodOptions) -> Self {
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
    pub(super) fn sums_of_squares() -> Self {
        Self {
            sum_sq: true,
            ..Self::default()
        }
    }
}

/// One shared input's Σ x² per channel, summed sample by sample.
#[derive(Debug, Clone, Default)]
pub(super) struct SumSq {
    sums: Vec<f64>,
    pub(super) samples: usize,
}

impl SumSq {
    /// Adds one sample's sums: with weight 1, or [`ablation_sample_weight`] of its position.
    pub(super) fn add(&mut self, sums: impl ExactSizeIterator<Item = f64>, ablation_weights: bool) {
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
pub(super) struct LayerStats<B: Backend> {
    needs: Needs,
    /// Σ x² per channel (wanda, magnitude under OWL, RIA), per shared input.
    pub(super) sum_sq: BTreeMap<LinearInput, SumSq>,
    /// Per shared input, each sample's Σ x² as `[1, channels]` f32 on the device, waiting to
    /// be added to `sum_sq` in sample order at [`Self::host`]: one download per input and layer
    /// instead of one per sample (where the fused kernels do not run).
    pending: BTreeMap<LinearInput, Vec<Tensor<B, 2>>>,
    /// Σ x xᵀ (sparsegpt), per shared input.
    pub(super) gram: Option<BTreeMap<LinearInput, Tensor<B, 2>>>,
    /// Per shared input, when DSnoT needs them.
    pub(super) moments: Option<BTreeMap<LinearInput, InputMoments>>,
    /// Per shared input, the samples and tokens it was shown: every sample for a dense
    /// layer's inputs, only those with tokens routed to it for an expert's.
    counts: BTreeMap<LinearInput, (usize, usize)>,
}

/// One shared input's statistics on the host.
pub(super) struct HostStats {
    /// Σ x² per channel, where [`Needs::sum_sq`] asked for them.
    pub(super) sum_sq: Option<Vec<f64>>,
    /// The Gram matrix `[in, in]`, where [`Needs::gram`] asked for it.
    pub(super) gram: Option<Vec<f32>>,
    pub(super) moments: Option<InputMoments>,
    pub(super) samples: usize,
    pub(super) tokens: usize,
}

impl HostStats {
    /// The input norms of a linear with `in_features` inputs: the sums of squares, or the Gram
    /// matrix's diagonal.
    pub(super) fn norms(&self, in_features: usize) -> Result<InputNorms, PruneError> {
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
    pub(super) fn hessian(&self, in_features: usize) -> Result<Hessian, PruneError> {
        let gram = self.gram.as_ref().ok_or(PruneError::NoSamples {
            what: "hessian accumulator",
        })?;
        let mut h = Hessian::new(in_features);
        h.add_gram(gram, self.samples, self.tokens)?;
        Ok(h)
    }
}

impl<B: Backend> LayerStats<B> {
    pub(super) fn new(needs: Needs) -> Self {
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
    pub(super) fn observe(
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
    pub(super) fn observe_forward(
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
    pub(super) fn add(&mut self, input: LinearInput, x: &Tensor<B, 3>) -> Result<(), PruneError> {
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
    pub(super) fn host_for(self, layer: &DecoderLayer<B>) -> BTreeMap<LinearInput, HostStats> {
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
    pub(super) fn host(mut self) -> BTreeMap<LinearInput, HostStats> {
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
pub(super) fn column_sum_sq<B: Backend>(x: Tensor<B, 3>) -> Tensor<B, 2> {
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

/// The Wanda norms (f32) of the input `entry`'s weight reads, from the input statistics `host`;
/// `None` where there are none.
pub(super) fn wanda_norms<B: Backend>(
    (w, input): &(Tensor<B, 2>, LinearInput),
    host: Option<&BTreeMap<LinearInput, HostStats>>,
) -> Option<Vec<f32>> {
    let dims = w.dims();
    let stat = host?.get(input)?;
    checked_norms(&stat.norms(dims[0]).ok()?, dims).ok()
}
