//! A pruned model's linears held compressed for decoding on the CPU ([`Llama::sparsify`]):
//! each decoder linear whose zeros pay for it gets a [`SparseLinear`] in place of its dense
//! weight (beside it where the fused kernels do not run the whole model), and the fused kernels
//! multiply up to a few rows (decoding) in that form, more rows (prefill) on panels expanded
//! from it.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use burn::module::Param;
use burn::prelude::*;

use super::layer::Llama;
use crate::model::kernels::sparse::{expands_in_registers, SparseLinear, SparseWeights};
use crate::model::kernels::{kernels, to_host_f32};

/// The fraction of zeros from which `auto` holds a linear compressed, on a CPU where the
/// compressed product runs its AVX-512 kernel ([`expands_in_registers`]; elsewhere its AVX2
/// kernel or its portable loop, neither measured to beat the dense product at every shape, so
/// `auto` holds none). Measured with
/// `wanda bench sparse` (one row, AVX-512): the compressed product at 20–30 % zeros already
/// matches the dense one (1.0–1.3× at Llama-3.2-1B's gate/up, 1.0× at SmolLM2's), at 50 % it
/// is about twice as fast (`results/decode-speed.md`).
pub const AUTO_SPARSITY: f64 = 0.3;

/// Which decoder linears [`Llama::sparsify`] holds compressed.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SparseMode {
    /// None: every product dense.
    Off,
    /// Every linear of every decoder layer, whatever its zeros.
    On,
    /// Each linear with at least [`AUTO_SPARSITY`] of its weights zero, where the CPU runs the
    /// compressed product's AVX-512 kernel; none elsewhere.
    #[default]
    Auto,
}

impl FromStr for SparseMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "auto" => Ok(Self::Auto),
            other => Err(format!("sparse mode `{other}`: use off, on or auto")),
        }
    }
}

impl fmt::Display for SparseMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Auto => "auto",
        })
    }
}

/// What [`Llama::sparsify`] held compressed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseSummary {
    /// The decoder linears looked at.
    pub linears: usize,
    /// Those held compressed.
    pub compressed: usize,
    /// The fraction of zeros over all the decoder linears' weights.
    pub sparsity: f64,
    /// The compressed linears' bytes as dense f32.
    pub dense_bytes: usize,
    /// The same linears' bytes compressed (mask, values, row offsets).
    pub sparse_bytes: usize,
    /// Linears that would have been compressed but left dense: their compressed form did not
    /// fit in the bytes given.
    pub over_budget: usize,
    /// Whether the compressed linears' dense weights were released (the kernels run the whole
    /// model), rather than held beside their forms.
    pub released: bool,
}

impl fmt::Display for SparseSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} linears compressed (their sparsity {:.3}; {:.1} MB dense → {:.1} MB {})",
            self.compressed,
            self.linears,
            self.sparsity,
            self.dense_bytes as f64 / 1e6,
            self.sparse_bytes as f64 / 1e6,
            match self.released {
                true => "in their place",
                false => "beside them",
            }
        )?;
        if self.over_budget > 0 {
            write!(
                f,
                "; {} left dense, out of memory to hold",
                self.over_budget
            )?;
        }
        Ok(())
    }
}

impl<B: Backend> Llama<B> {
    /// Holds the decoder layers' linears compressed as `mode` says, in place of any held
    /// before: in order, while the compressed forms take at most `budget` bytes more than the
    /// dense weights they stand for (a linear past it stays dense). Where the backend's kernels
    /// run the whole model ([`Kernels::runs_whole`]), each compressed linear's dense weight is
    /// released, one at a time as its form is made, so a pruned model holds fewer bytes;
    /// elsewhere they stay beside their forms. Where the backend's kernels do not run on the
    /// host in f32 (burn-ndarray), none: only those kernels read the compressed form.
    ///
    /// A model with released weights is for running ([`Llama::forward`], [`Llama::hidden`],
    /// [`Llama::forward_cached`]; a call the kernels decline runs on a copy made dense,
    /// [`Llama::dense_weights`]); pruning, observing or saving reads its layers, so call
    /// `sparsify` with [`SparseMode::Off`] first to hold every weight dense again.
    ///
    /// [`Kernels::runs_whole`]: crate::model::kernels::Kernels::runs_whole
    pub fn sparsify(&mut self, mode: SparseMode, budget: usize) -> SparseSummary {
        if let Cow::Owned(dense) = self.dense_weights() {
            *self = dense;
        }
        self.sparse = None;
        let mut summary = SparseSummary::default();
        if mode == SparseMode::Off || !kernels::<B>().host_resident() {
            return summary;
        }
        summary.released = (self.weights()).is_some_and(|w| kernels::<B>().runs_whole(&w));
        let mut held = SparseWeights::default();
        let (mut zeros, mut weights, mut extra) = (0usize, 0usize, 0usize);
        for layer in &mut self.layers {
            let names: Vec<String> = layer.linears().into_iter().map(|l| l.0).collect();
            for name in names {
                let linear = layer.linear_mut(&name).expect("a linear it listed");
                let [inputs, outputs] = linear.weight.dims();
                let values = to_host_f32(linear.weight.val());
                let zero = values.iter().filter(|v| **v == 0.0).count();
                summary.linears += 1;
                (zeros, weights) = (zeros + zero, weights + values.len());
                let pays =
                    expands_in_registers() && zero as f64 >= AUTO_SPARSITY * values.len() as f64;
                if mode == SparseMode::On || pays {
                    let sparse = SparseLinear::from_in_out(&values, inputs, outputs);
                    if extra + sparse.bytes() > budget {
                        summary.over_budget += 1;
                        continue;
                    }
                    if !summary.released {
                        extra += sparse.bytes();
                    }
                    summary.compressed += 1;
                    summary.dense_bytes += values.len() * 4;
                    summary.sparse_bytes += sparse.bytes();
                    let id = linear.weight.id;
                    held.insert(id, sparse);
                    if summary.released {
                        let empty = Tensor::zeros([0, 0], &linear.weight.device());
                        linear.weight = Param::initialized(id, empty);
                    }
                }
            }
        }
        summary.sparsity = zeros as f64 / weights.max(1) as f64;
        summary.released &= !held.is_empty();
        if summary.released {
            // The dense weights freed into the heap go back to the kernel.
            crate::sys::allocator::release_freed_memory();
        }
        if !held.is_empty() {
            self.sparse = Some(Arc::new(held));
        }
        summary
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Flex, NdArray};
    use burn::module::Param;

    use super::super::blocks::KvCache;
    use super::super::layer::tests::fused_path::{cached_logits, close, tiny_fixtures};
    use super::*;

    type B = NdArray<f32>;

    /// Zeroes the weights of every decoder linear of `m` where a hash of the position says
    /// (`zero_in` of every 10): the same positions on every backend.
    fn prune<K: Backend>(m: &mut Llama<K>, zero_in: usize) {
        for layer in &mut m.layers {
            let names: Vec<String> = layer.linears().into_iter().map(|l| l.0).collect();
            for name in names {
                let linear = layer.linear_mut(&name).expect("a linear it listed");
                let weight = linear.weight.val();
                let (dims, device) = (weight.dims(), weight.device());
                let mut values = weight.into_data().to_vec::<f32>().unwrap();
                for (i, v) in values.iter_mut().enumerate() {
                    if (i * 2_654_435_761) % 97 % 10 < zero_in {
                        *v = 0.0;
                    }
                }
                let pruned = Tensor::from_data(TensorData::new(values, dims), &device);
                linear.weight = Param::from_tensor(pruned);
            }
        }
    }

    /// A pruned model decoding with its linears compressed gives the logits of the same
    /// weights decoded dense (fused) and on Burn's generic ops, within 1e-5 of the largest
    /// logit, on every tiny fixture the fused path runs (experts included).
    #[test]
    fn compressed_decoding_equals_dense_decoding_on_every_fixture() {
        let mut decoded = 0;
        for (name, config) in tiny_fixtures() {
            let mut sparse_model = Llama::<B>::init_random(&config, 3, &Default::default());
            prune(&mut sparse_model, 5);
            let len = 75.min(config.max_position_embeddings) as i64;
            let ids: Vec<i64> = (0..len)
                .map(|i| (i * 13 + 5) % config.vocab_size as i64)
                .collect();
            let (dense, cache) = cached_logits(&sparse_model, &ids);
            if cache.host.len == 0 {
                continue;
            }
            let summary = sparse_model.sparsify(SparseMode::On, usize::MAX);
            assert_eq!(summary.compressed, summary.linears, "{name}");
            assert!(summary.released, "{name}: the fused path runs it whole");
            assert!((summary.sparsity - 0.5).abs() < 0.1, "{name}: {summary}");
            let (sparse, _) = cached_logits(&sparse_model, &ids);
            close(&sparse, &dense);
            let mut generic_model = Llama::<Flex>::init_random(&config, 3, &Default::default());
            prune(&mut generic_model, 5);
            let (generic, _) = cached_logits(&generic_model, &ids);
            close(&sparse, &generic);
            decoded += 1;
        }
        assert!(decoded >= 20, "only {decoded} fixtures decoded");
    }

    /// `auto` holds compressed the linears with enough zeros alone, `off` none; the compressed
    /// form is what decoding multiplies with (a wrong one changes the logits); a weight replaced
    /// after `sparsify` runs dense.
    #[test]
    fn auto_compresses_what_pays_and_a_replaced_weight_runs_dense() {
        let (_, config) = tiny_fixtures()
            .into_iter()
            .find(|(name, _)| name == "tiny-llama")
            .expect("the tiny Llama fixture");
        let mut m = Llama::<B>::init_random(&config, 3, &Default::default());
        let ids: Vec<i64> = (0..20).map(|i| (i * 7 + 1) % 50).collect();
        let (dense, _) = cached_logits(&m, &ids);
        // Dense random weights: no zeros, so auto holds none.
        let summary = m.sparsify(SparseMode::Auto, usize::MAX);
        assert_eq!((summary.compressed, summary.sparsity), (0, 0.0));
        assert!(m.sparse.is_none());
        // Prune one layer's up projection by half: auto holds that one alone.
        let up = m.layers[0].linear_mut("mlp.up_proj").unwrap();
        let [inputs, outputs] = up.weight.dims();
        let mut values = up.weight.val().into_data().to_vec::<f32>().unwrap();
        values.iter_mut().step_by(2).for_each(|v| *v = 0.0);
        let pruned = TensorData::new(values.clone(), [inputs, outputs]);
        up.weight = Param::from_tensor(Tensor::from_data(pruned, &Default::default()));
        let summary = m.sparsify(SparseMode::Auto, usize::MAX);
        let compressed = SparseLinear::from_in_out(&values, inputs, outputs);
        if expands_in_registers() {
            assert_eq!(summary.compressed, 1);
            assert_eq!(summary.dense_bytes, inputs * outputs * 4);
            assert_eq!(summary.sparse_bytes, compressed.bytes());
            // A budget short of its compressed bytes leaves it dense, and says so.
            let short = m.sparsify(SparseMode::Auto, compressed.bytes() - 1);
            assert_eq!((short.compressed, short.over_budget), (0, 1));
            assert!(short
                .to_string()
                .ends_with("; 1 left dense, out of memory to hold"));
            assert!(m.sparse.is_none());
        } else {
            // The portable loop, not measured to pay: auto holds none.
            assert_eq!((summary.compressed, summary.over_budget), (0, 0));
            assert!(summary.sparsity > 0.0 && m.sparse.is_none());
        }
        assert!(
            m.sparsify(SparseMode::Off, usize::MAX) == SparseSummary::default()
                && m.sparse.is_none()
        );
        // A compressed form of other values under the up projection's id changes the logits.
        let id = m.layers[0].linear_mut("mlp.up_proj").unwrap().weight.id;
        let (pruned_dense, _) = cached_logits(&m, &ids);
        let mut wrong = SparseWeights::default();
        wrong.insert(
            id,
            SparseLinear::from_in_out(&vec![0.5; values.len()], inputs, outputs),
        );
        m.sparse = Some(Arc::new(wrong));
        let (with_wrong, _) = cached_logits(&m, &ids);
        assert_ne!(with_wrong, pruned_dense);
        // Replaced after sparsify (as pruning again does): dense, to the bit.
        let up = m.layers[0].linear_mut("mlp.up_proj").unwrap();
        up.weight = Param::from_tensor(up.weight.val());
        let (replaced, _) = cached_logits(&m, &ids);
        assert_eq!(replaced, pruned_dense);
        assert_ne!(pruned_dense, dense);
    }

    /// The weights of every decoder linear of `m`, in order.
    fn linear_weights(m: &Llama<B>) -> Vec<Tensor<B, 2>> {
        let linears = m.layers.iter().flat_map(|l| l.linears());
        linears.map(|(_, _, l)| l.weight.val()).collect()
    }

    /// Released dense weights: a prefill (more rows than the compressed product takes)
    /// multiplies panels expanded from the compressed forms, the dense product's bits (within
    /// rounding where an expert is given few tokens); a call the kernels decline (two sequences
    /// with a cache) runs on a copy made dense; `off` holds every weight dense again, as it
    /// was.
    #[test]
    fn released_weights_give_the_dense_bits_and_come_back() {
        let device = Default::default();
        let mut exact = 0;
        for (name, config) in tiny_fixtures() {
            let mut m = Llama::<B>::init_random(&config, 5, &device);
            prune(&mut m, 5);
            let len = 40.min(config.max_position_embeddings);
            let ids: Vec<i64> = (0..2 * len as i64)
                .map(|i| (i * 11 + 3) % config.vocab_size as i64)
                .collect();
            let one = Tensor::<B, 2, Int>::from_data(
                TensorData::new(ids[..len].to_vec(), [1, len]),
                &device,
            );
            let two =
                Tensor::<B, 2, Int>::from_data(TensorData::new(ids.clone(), [2, len]), &device);
            let runs = |m: &Llama<B>| {
                let mut cache = KvCache::new(m.layers.len());
                let batch = m.forward_cached(two.clone(), &mut cache);
                (m.forward(one.clone()).into_data(), batch.into_data())
            };
            let dense = runs(&m);
            let weights = linear_weights(&m);
            let summary = m.sparsify(SparseMode::On, usize::MAX);
            if !summary.released {
                continue;
            }
            assert!(
                linear_weights(&m).iter().all(|w| w.dims() == [0, 0]),
                "{name}"
            );
            let released = runs(&m);
            match m.layers.iter().any(|l| l.experts().is_some()) {
                // An expert given a few tokens multiplies them compressed.
                true => {
                    let values = |d: &TensorData| d.to_vec::<f32>().unwrap();
                    close(&values(&released.0), &values(&dense.0));
                    close(&values(&released.1), &values(&dense.1));
                }
                false => {
                    assert_eq!(released, dense, "{name}");
                    exact += 1;
                }
            }
            assert_eq!(
                m.sparsify(SparseMode::Off, usize::MAX),
                SparseSummary::default()
            );
            let again = linear_weights(&m);
            for (w, a) in weights.iter().zip(&again) {
                assert_eq!(w.to_data(), a.to_data(), "{name}");
            }
        }
        assert!(exact >= 15, "only {exact} fixtures released and ran");
    }

    #[test]
    fn modes_parse_and_print_as_written() {
        for mode in ["off", "on", "auto"] {
            assert_eq!(mode.parse::<SparseMode>().unwrap().to_string(), mode);
        }
        let err = "always".parse::<SparseMode>().unwrap_err();
        assert_eq!(err, "sparse mode `always`: use off, on or auto");
    }
}
