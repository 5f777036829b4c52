//! What every formula reads and fills: the run's settings ([`PruneRun`]), the model's
//! dimensions as the formulas use them ([`Dims`]), and the breakdown of each stage
//! ([`StageEstimate`]), gathered in an [`Estimate`].

use serde::Serialize;

use crate::memory::device::{DeviceKind, Precision};
use crate::model::arch::{Breakdown, ModelShape, Place};
use crate::prune::dsnot::DsnotOptions;
use crate::prune::experts::ExpertAmount;
use crate::prune::profile::{OwlOptions, Profile};
use crate::prune::WeightUpdate;
use crate::prune::{Method, MethodOptions};

/// The settings of a run that memory depends on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PruneRun {
    /// The method; None for a run that only evaluates.
    pub method: Option<Method>,
    /// Calibration samples.
    pub nsamples: usize,
    /// Calibration sample length.
    pub seqlen: usize,
    /// Samples per forward pass.
    pub batch: usize,
    /// Evaluation window, when the run evaluates.
    pub eval_seqlen: Option<usize>,
    /// Whether the dense model stays beside the pruned copy.
    pub keeps_dense_copy: bool,
    /// Whether only the current layer's weights are on the device.
    pub streaming: bool,
    /// Bytes of the checkpoint file(s), memory-mapped while loading.
    pub checkpoint_bytes: u64,
    /// Bytes of the calibration text file.
    pub calibration_text_bytes: u64,
    /// Bytes of the evaluation text file.
    pub eval_text_bytes: u64,
    /// The compute device.
    pub device: DeviceKind,
    /// The precision weights and activations are stored in.
    #[serde(skip_serializing_if = "Precision::is_f32")]
    pub precision: Precision,
    /// The calibration activations wait in host memory between layers, one batch on the
    /// device at a time (a GPU only; the gate's choice).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub activations_on_host: bool,
    /// The GPU's memory, whose size sets CubeCL's pool pages ([`super::pool`]); None leaves
    /// the pool out.
    ///
    /// [`super::pool`]: crate::memory::pool
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_memory: Option<u64>,
    /// OWL's outlier pass runs before pruning (`profile: owl`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub owl: bool,
    /// DSnoT refines the masks.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dsnot: bool,
    /// The weights magnitude or Wanda keeps are updated (a Hessian per input, as SparseGPT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_update: Option<WeightUpdate>,
    /// `eval` scores zero-shot tasks.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub zeroshot: bool,
    /// Windows a streamed evaluation runs through each layer together, holding their residual
    /// streams: each layer is read once per group. Requested as the evaluation's windows, so
    /// that every layer is read once; the gate halves it when the streams do not fit.
    pub eval_group: usize,
    /// The experts a prune stage removes from every layer with experts, where one does: the
    /// stages after it hold a smaller model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_removal: Option<ExpertAmount>,
}

impl PruneRun {
    /// The method options this run prunes with as far as memory sees them: OWL and DSnoT at
    /// their defaults when the run uses them (what a probe prunes with).
    pub fn method_options(&self) -> MethodOptions {
        MethodOptions {
            profile: if self.owl {
                Profile::Owl(OwlOptions::default())
            } else {
                Profile::Uniform
            },
            dsnot: self.dsnot.then(DsnotOptions::default),
            weight_update: self.weight_update,
            ..MethodOptions::default()
        }
    }

    /// The shape of the model the stages after pruning hold: `shape` with fewer experts
    /// where the run removes some, else `shape` itself.
    pub fn pruned_shape(&self, shape: &ModelShape) -> ModelShape {
        match self.expert_removal {
            Some(amount) if shape.experts > 0 => {
                let removed = amount.removed_of(shape.experts).unwrap_or(0);
                shape.with_expert_count(shape.experts.saturating_sub(removed))
            }
            _ => shape.clone(),
        }
    }

    /// Whether the run draws calibration samples.
    pub fn calibrates(&self) -> bool {
        self.method
            .is_some_and(|m| self.method_options().needs_calibration(m))
    }
}

/// One stage's breakdown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageEstimate {
    /// `load`, `prune` or `eval`.
    pub stage: &'static str,
    /// What is alive at the stage's peak.
    pub breakdown: Breakdown,
}

impl StageEstimate {
    /// The bytes of each transient device allocation alive at the stage's peak, in the order
    /// its shares list them (what a GPU's pool places in pages).
    pub fn device_allocations(&self) -> Vec<u64> {
        self.breakdown
            .items
            .iter()
            .filter(|i| i.place == Place::Device)
            .flat_map(|i| i.allocations.iter())
            .flat_map(|&(count, each)| std::iter::repeat_n(each, count as usize))
            .filter(|&bytes| bytes > 0)
            .collect()
    }
}

/// A run's estimate: per stage, and the peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// In run order.
    pub stages: Vec<StageEstimate>,
}

impl Estimate {
    /// The stage with the most memory at `place`, and that amount; on the CPU device and
    /// host are one pool, so ask for [`Place::Device`].
    pub fn peak(&self, place: Place) -> (&'static str, u64) {
        self.stages
            .iter()
            .map(|s| (s.stage, s.breakdown.total(place)))
            .max_by_key(|&(_, bytes)| bytes)
            .unwrap_or(("none", 0))
    }
}

/// The dimensions the formulas use, as u64.
pub(super) struct Dims {
    pub(super) h: u64,
    pub(super) i: u64,
    /// `nh · d`.
    pub(super) q: u64,
    pub(super) heads: u64,
    /// Query heads per kv head (a grouped-query attention block stacks them).
    pub(super) group: u64,
    pub(super) v: u64,
    pub(super) layers: u64,
    pub(super) linears_per_layer: u64,
    pub(super) in_out: [(u64, u64); 3],
    /// `I`-wide buffers of the MLP: gate, up and their product (up and its activation without
    /// a gate).
    pub(super) mlp_buffers: u64,
    /// Linears of the MLP: gate, up and down (up and down without a gate).
    pub(super) mlp_linears: u64,
    /// Attention and MLP side by side ([`ModelShape::parallel_residual`]).
    pub(super) parallel_residual: bool,
    /// Experts per layer ([`ModelShape::experts`]; 0 for one MLP).
    pub(super) experts: u64,
    /// A shared expert's width ([`ModelShape::shared_expert_size`]; 0 without one).
    pub(super) shared: u64,
    /// The MLP width of the first layers where they have a dense MLP before those with
    /// experts ([`ModelShape::dense_layers`]); 0 where all layers are alike.
    pub(super) dense: u64,
    /// Layers the fused CPU kernels do not run ([`ModelShape::generic_layers`]).
    pub(super) generic_layers: bool,
}

impl Dims {
    /// The dimensions of `shape`.
    pub(super) fn new(shape: &ModelShape) -> Self {
        let h = shape.hidden_size as u64;
        let i = shape.intermediate_size as u64;
        let q = (shape.num_attention_heads * shape.head_dim) as u64;
        let dense = match shape.dense_layers {
            0 => 0,
            _ => shape.dense_intermediate_size as u64,
        };
        // The widest MLP linears: an expert's, or a dense layer's.
        let wide = i.max(dense);
        Self {
            h,
            i,
            q,
            heads: shape.num_attention_heads as u64,
            group: (shape.num_attention_heads / shape.num_key_value_heads.max(1)).max(1) as u64,
            v: shape.vocab_size as u64,
            layers: shape.num_hidden_layers as u64,
            linears_per_layer: shape.linear_parameters_per_layer(),
            in_out: [(h, q), (h, wide), (wide, h)],
            mlp_buffers: if shape.gated_mlp { 3 } else { 2 },
            parallel_residual: shape.parallel_residual,
            mlp_linears: if shape.gated_mlp { 3 } else { 2 },
            experts: shape.experts as u64,
            shared: shape.shared_expert_size as u64,
            dense,
            generic_layers: shape.generic_layers,
        }
    }

    /// The widest MLP input of any layer: an expert's (or the one MLP's), or a dense layer's.
    pub(super) fn mlp_width(&self) -> u64 {
        self.i.max(self.dense)
    }

    /// Weights of the largest linear.
    pub(super) fn widest_linear(&self) -> u64 {
        self.in_out.iter().map(|(a, b)| a * b).max().unwrap_or(0)
    }
}

/// The tiny model and run every test of the estimator works by hand.
#[cfg(test)]
pub(super) mod fixtures {
    use super::*;
    use crate::eval::perplexity::STREAMED_WINDOW_GROUP;

    /// H=4, I=6, L=2, 2 heads of 2, 1 kv head, V=10, 340 parameters (see `shape.rs`).
    pub(in crate::memory::estimate) fn tiny() -> ModelShape {
        ModelShape {
            parameters: 340,
            hidden_size: 4,
            intermediate_size: 6,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            num_key_value_heads: 1,
            head_dim: 2,
            vocab_size: 10,
            tie_word_embeddings: false,
            max_position_embeddings: 64,
            gated_mlp: true,
            parallel_residual: false,
            experts: 0,
            shared_expert_size: 0,
            shared_expert_gated: false,
            dense_layers: 0,
            dense_intermediate_size: 0,
            latent_attention: None,
            generic_layers: false,
        }
    }

    /// A CPU run in f32 of 3 samples of 5 tokens, 2 a batch, evaluated on windows of 4.
    pub(in crate::memory::estimate) fn run(method: Method) -> PruneRun {
        PruneRun {
            method: Some(method),
            nsamples: 3,
            seqlen: 5,
            batch: 2,
            eval_seqlen: Some(4),
            keeps_dense_copy: true,
            streaming: false,
            checkpoint_bytes: 1000,
            calibration_text_bytes: 10,
            eval_text_bytes: 20,
            device: DeviceKind::Cpu,
            precision: Precision::F32,
            activations_on_host: false,
            gpu_memory: None,
            owl: false,
            dsnot: false,
            weight_update: None,
            zeroshot: false,
            eval_group: STREAMED_WINDOW_GROUP,
            expert_removal: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{run, tiny};
    use super::*;

    #[test]
    fn dims_of_the_tiny_model() {
        let m = Dims::new(&tiny());
        assert_eq!(
            (m.h, m.i, m.q, m.heads, m.group, m.v, m.layers),
            (4, 6, 4, 2, 2, 10, 2)
        );
        // q 16 + k, v 2·8 + o 16 + MLP 3·24; the widest linear 4 × 6.
        assert_eq!(m.linears_per_layer, 120);
        assert_eq!(
            (m.widest_linear(), m.mlp_width(), m.mlp_buffers),
            (24, 6, 3)
        );
    }

    #[test]
    fn magnitude_calibrates_only_with_owl_dsnot_or_a_weight_update() {
        assert!(run(Method::Wanda).calibrates());
        assert!(run(Method::Sparsegpt).calibrates());
        let mut r = run(Method::Magnitude);
        assert!(!r.calibrates());
        r.owl = true;
        assert!(r.calibrates());
        r.method = None;
        assert!(!r.calibrates());
    }

    #[test]
    fn only_removed_experts_change_the_pruned_shape() {
        let shape = ModelShape {
            experts: 4,
            parameters: 1000,
            ..tiny()
        };
        let mut r = run(Method::Reap);
        assert_eq!(r.pruned_shape(&shape), shape);
        r.expert_removal = Some(ExpertAmount(0.5));
        let after = r.pruned_shape(&shape);
        assert_eq!((after.experts, after.parameters), (2, 696));
        // A model without experts keeps its shape.
        assert_eq!(r.pruned_shape(&tiny()), tiny());
    }

    #[test]
    fn the_peak_is_the_largest_stage_and_the_pool_sees_transient_device_tensors() {
        let mut load = Breakdown::default();
        load.push("weights", 100, Place::Device, String::new());
        load.push("tokenisation", 1000, Place::Host, String::new());
        let mut prune = Breakdown::default();
        prune.push("weights", 100, Place::Device, String::new());
        prune.push_mixed(
            "activations",
            &[(2, 30), (1, 0)],
            Place::Device,
            String::new(),
        );
        prune.push_allocations("scores", 1, 50, Place::Host, String::new());
        let prune = StageEstimate {
            stage: "prune",
            breakdown: prune,
        };
        // Weights (persistent), host tensors and empty slices take no pages.
        assert_eq!(prune.device_allocations(), [30, 30]);
        let load = StageEstimate {
            stage: "load",
            breakdown: load,
        };
        let e = Estimate {
            stages: vec![load, prune],
        };
        assert_eq!(e.peak(Place::Device), ("prune", 160));
        assert_eq!(e.peak(Place::Host), ("load", 1000));
        assert_eq!(Estimate { stages: vec![] }.peak(Place::Device), ("none", 0));
    }
}
