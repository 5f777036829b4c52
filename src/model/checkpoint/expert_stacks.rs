//! Experts stacked across a layer in 3-D tensors, as GPT-OSS's, Llama 4's and Granite's
//! checkpoints hold them ([`crate::model::family::FamilyRow::expert_stacks`]): per layer, under the
//! family's names (`mlp.experts.gate_up_proj`, Llama 4's `feed_forward.experts.gate_up_proj`,
//! Granite's `block_sparse_moe.input_linear.weight`)
//! - `gate_up_proj`, `[experts, hidden, 2 · width]`: each expert's `[in, out]` matrix of its
//!   gate and up projections, their outputs interleaved (GPT-OSS: the gate's in the even
//!   columns, the up projection's in the odd ones) or in halves (Llama 4: the gate's first), and
//!   `gate_up_proj_bias`, `[experts, 2 · width]`, alike (GPT-OSS);
//! - `down_proj`, `[experts, width, hidden]`, each expert's `[in, out]` matrix, and
//!   `down_proj_bias`, `[experts, hidden]` (GPT-OSS);
//! - or each expert's matrices `[out, in]` (Granite's, and transformers 5's own layout).
//!
//! The decoder sees each expert's `gate_proj`, `up_proj` and `down_proj` as linears of their own
//! ([`ExpertStackSource`]), so calibration and pruning treat them as every other family's
//! experts; a saved copy stacks them back ([`stack_experts`]).

use std::sync::{Arc, Mutex};

use crate::model::arch::ExpertStacks;
use crate::model::arch::LlamaConfig;
use crate::model::checkpoint::{HostTensor, WeightError, WeightSource};

/// The decoder's module of a layer's experts, relative to the layer.
const EXPERTS: &str = "mlp.experts";

/// One expert's linear in a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The gate projection: the even outputs of `gate_up_proj`, or its first half.
    Gate,
    /// The up projection: the odd outputs of `gate_up_proj`, or its second half.
    Up,
    /// The down projection.
    Down,
}

impl Part {
    /// The decoder's name of the linear.
    fn linear(self) -> &'static str {
        match self {
            Part::Gate => "gate_proj",
            Part::Up => "up_proj",
            Part::Down => "down_proj",
        }
    }

    /// `(first, step)`: of a stack's `outputs` columns, the part's are `first`, `first + step`,
    /// … up to `outputs / 2` of them (all of them for the down projection).
    fn outputs(self, halves: bool, outputs: usize) -> (usize, usize) {
        match (self, halves) {
            (Part::Down, _) => (0, 1),
            (Part::Gate, false) => (0, 2),
            (Part::Up, false) => (1, 2),
            (Part::Gate, true) => (0, 1),
            (Part::Up, true) => (outputs / 2, 1),
        }
    }

    /// The stack of `stacks` holding the part's weights, relative to the layer, with `_bias`
    /// for its biases.
    fn stack(self, stacks: &ExpertStacks, bias: bool) -> String {
        let stack = if self == Part::Down {
            stacks.down
        } else {
            stacks.gate_up
        };
        match bias {
            true => format!("{stack}_bias"),
            false => stack.to_string(),
        }
    }
}

/// Where the tensor `name` (`model.layers.N.<module>.E.gate_proj.weight`, the stacks' module
/// `module`) lies: the layer's prefix, the expert, the part and whether it is the bias.
fn locate(name: &str, module: &str) -> Option<(String, usize, Part, bool)> {
    let (layer, rest) = name.split_once(&format!(".{module}."))?;
    let (expert, rest) = rest.split_once('.')?;
    let (linear, kind) = rest.split_once('.')?;
    let part = [Part::Gate, Part::Up, Part::Down]
        .into_iter()
        .find(|p| p.linear() == linear)?;
    let bias = match kind {
        "weight" => false,
        "bias" => true,
        _ => return None,
    };
    Some((layer.to_string(), expert.parse().ok()?, part, bias))
}

/// The experts per layer and how they are stacked where `config`'s family stores them stacked
/// (GPT-OSS, Llama 4); `None` where each expert has linears of its own.
pub fn stacked_experts(config: &LlamaConfig) -> Option<(usize, ExpertStacks)> {
    let experts = config.extras.experts.map(|e| e.count)?;
    let stacks = config.architecture.row().expert_stacks?;
    Some((experts, stacks))
}

/// Transformers 5's stacks of a family whose own checkpoints keep a linear per expert:
/// `mlp.experts.gate_up_proj` `[experts, hidden, 2 · width]` (the hub's) or `[experts,
/// 2 · width, hidden]` (as transformers 5 saves it), the gate's half first, as Qwen3-VL-MoE's
/// checkpoints hold Qwen3-MoE's experts.
const TRANSFORMERS_STACKS: ExpertStacks = ExpertStacks {
    module: EXPERTS,
    gate_up: "mlp.experts.gate_up_proj",
    down: "mlp.experts.down_proj",
    halves: true,
    out_major: true,
};

/// How a checkpoint of `config` stacks its experts: as its family's do, else, where the first
/// layer with experts holds `mlp.experts.gate_up_proj` (`holds` says whether the checkpoint
/// has a tensor), in transformers 5's halves (Qwen3-VL-MoE's); `None` where each expert has
/// linears of its own.
pub fn stacks_in(config: &LlamaConfig, holds: impl Fn(&str) -> bool) -> Option<ExpertStacks> {
    config.extras.experts?;
    if let Some(stacks) = config.architecture.row().expert_stacks {
        return Some(stacks);
    }
    let first = (0..config.num_hidden_layers).find(|&i| config.layer_experts(i).is_some())?;
    let gate_up = TRANSFORMERS_STACKS.gate_up;
    holds(&format!("model.layers.{first}.{gate_up}")).then_some(TRANSFORMERS_STACKS)
}

/// A checkpoint with stacked experts seen with each expert's linears apart, in PyTorch's
/// layout, under the checkpoint's names: `model.layers.N.<module>.E.gate_proj.weight` is
/// `[width, hidden]`, read from expert `E`'s gate outputs in `<module>.gate_up_proj`. Every
/// other name passes through.
pub struct ExpertStackSource {
    inner: Arc<dyn WeightSource>,
    experts: usize,
    stacks: ExpertStacks,
    /// The model's width: the inputs of `gate_up_proj`, the outputs of `down_proj`.
    hidden: usize,
    /// The stack entries of the expert being read (its gate and up projections share one),
    /// each read from the checkpoint alone ([`WeightSource::tensor_entry`]), never a whole
    /// stack.
    held: Mutex<Vec<(String, usize, Arc<HostTensor>)>>,
}

impl ExpertStackSource {
    /// `inner`, a checkpoint of `config`, with its experts apart where it stacks them as
    /// `stacks` says ([`stacks_in`]).
    pub fn wrap(
        config: &LlamaConfig,
        stacks: Option<ExpertStacks>,
        inner: Arc<dyn WeightSource>,
    ) -> Arc<dyn WeightSource> {
        let (Some(experts), Some(stacks)) = (config.extras.experts.map(|e| e.count), stacks) else {
            return inner;
        };
        // Shared as the other wrappers are, one thread at a time.
        #[allow(clippy::arc_with_non_send_sync)]
        let source = Arc::new(Self {
            inner,
            experts,
            stacks,
            hidden: config.hidden_size,
            held: Mutex::new(Vec::new()),
        });
        source
    }

    /// Entry `expert` of the stack `name` (of the layer `layer`), from those held when it is
    /// one of them; reading another expert's lets the held ones go first.
    fn entry(
        &self,
        layer: &str,
        name: &str,
        expert: usize,
    ) -> Result<Option<Arc<HostTensor>>, WeightError> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((.., t)) = held.iter().find(|(n, e, _)| n == name && *e == expert) {
            return Ok(Some(Arc::clone(t)));
        }
        let layer = format!("{layer}.");
        held.retain(|(n, e, _)| *e == expert && n.starts_with(&layer));
        let Some(t) = self.inner.tensor_entry(name, expert)? else {
            return Ok(None);
        };
        let t = Arc::new(t);
        held.push((name.to_string(), expert, Arc::clone(&t)));
        Ok(Some(t))
    }

    /// The values of the decoder's tensor `name` in `[in, out]` order (a weight; a bias as it
    /// is) with its PyTorch shape, where it is an expert's; `None` for any other name.
    fn part(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        let module = self.stacks.module;
        let Some((layer, expert, part, bias)) = locate(name, module) else {
            return Ok(None);
        };
        let stack_name = format!("{layer}.{}", part.stack(&self.stacks, bias));
        if expert >= self.experts {
            return Err(WeightError::Shape {
                name: stack_name,
                source_name: self.inner.name(),
                expected: vec![expert + 1],
                found: vec![self.experts],
            });
        }
        let Some(entry) = self.entry(&layer, &stack_name, expert)? else {
            return Ok(None);
        };
        // A weight's entry is `[in, out]` (or `[out, in]`, turned first), a bias's `[out]`;
        // gate and up share `out` evenly.
        let (rows, cols) = match (bias, &entry.shape[..]) {
            (true, &[cols]) => (1, cols),
            (false, &[rows, cols]) => (rows, cols),
            _ => (0, 0),
        };
        // `[in, out]` unmistakably: a stack's inputs are the model's width for gate and up, its
        // outputs for down.
        let in_out = match part {
            Part::Down => cols == self.hidden && rows != cols,
            _ => rows == self.hidden && rows != cols,
        };
        // An `[out, in]` entry (out-major): the part's outputs are rows of it, picked whole and
        // turned to `[in, out]` once; an `[in, out]` one's are columns.
        let out_major = !bias && self.stacks.out_major && !in_out;
        let (all_outputs, inputs) = if out_major {
            (rows, cols)
        } else {
            (cols, rows)
        };
        let shared = part != Part::Down;
        if all_outputs == 0 || (shared && all_outputs % 2 != 0) {
            return Err(WeightError::BadSafetensors {
                path: self.inner.name(),
                reason: format!(
                    "`{stack_name}` holds experts of shape {:?}; a stack of weights is [experts, in, out] (or [experts, out, in]) and of biases [experts, out], out even where it holds gate and up",
                    entry.shape
                ),
            });
        }
        let outputs = if shared { all_outputs / 2 } else { all_outputs };
        let (first, step) = part.outputs(self.stacks.halves, all_outputs);
        let data: Vec<f32> = if out_major {
            let mut picked = Vec::with_capacity(outputs * inputs);
            for o in (first..).step_by(step).take(outputs) {
                picked.extend_from_slice(&entry.data[o * inputs..(o + 1) * inputs]);
            }
            crate::model::kernels::transpose(&picked, outputs, inputs)
        } else {
            entry
                .data
                .chunks_exact(cols)
                .flat_map(|row| row.iter().skip(first).step_by(step).take(outputs).copied())
                .collect()
        };
        let shape = if bias {
            vec![outputs]
        } else {
            vec![outputs, inputs]
        };
        Ok(Some(HostTensor { shape, data }))
    }
}

impl WeightSource for ExpertStackSource {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        match self.part(name)? {
            Some(t) => Ok(Some(match t.shape[..] {
                [outputs, inputs] => HostTensor {
                    data: crate::model::kernels::transpose(&t.data, inputs, outputs),
                    shape: t.shape,
                },
                _ => t,
            })),
            None => self.inner.tensor(name),
        }
    }

    fn tensor_transposed(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
        match self.part(name)? {
            Some(t) => Ok(Some(t)),
            None => self.inner.tensor_transposed(name),
        }
    }

    fn tensor_transposed_in(
        &self,
        name: &str,
        dtype: burn::tensor::DType,
    ) -> Result<Option<crate::model::checkpoint::HostData>, WeightError> {
        match self.part(name)? {
            Some(t) => Ok(Some(crate::model::checkpoint::HostData::from_transposed(
                t, dtype,
            ))),
            None => self.inner.tensor_transposed_in(name, dtype),
        }
    }

    fn parameter_count(&self) -> u64 {
        self.inner.parameter_count()
    }

    fn release_pages(&self) {
        self.inner.release_pages();
    }
}

/// Replaces each expert's linears in `tensors` (the layer's tensors under the decoder's names,
/// prefixed `layer`, weights in PyTorch's layout) by the stacks of the checkpoint's layout
/// `stacks`, under its names (`mlp.experts.gate_up_proj`, Granite's
/// `block_sparse_moe.input_linear.weight`), where the first expert's gate projection was;
/// nothing where an expert's weight is missing. Biases are stacked where the experts have them.
pub fn stack_experts(
    tensors: &mut Vec<(String, HostTensor)>,
    layer: &str,
    experts: usize,
    stacks: ExpertStacks,
) {
    let name = |e: usize, part: Part, bias: bool| {
        let kind = if bias { "bias" } else { "weight" };
        format!("{layer}.{EXPERTS}.{e}.{}.{kind}", part.linear())
    };
    let biased = tensors.iter().any(|(n, _)| *n == name(0, Part::Gate, true));
    let Some(first) = tensors
        .iter()
        .position(|(n, _)| *n == name(0, Part::Gate, false))
    else {
        return;
    };
    let mut take = |e: usize, part: Part, bias: bool| {
        let at = tensors
            .iter()
            .position(|(n, _)| *n == name(e, part, bias))?;
        Some(tensors.remove(at).1)
    };
    let mut stacked = Vec::new();
    for (parts, stack) in [
        (&[Part::Gate, Part::Up][..], stacks.gate_up),
        (&[Part::Down][..], stacks.down),
    ] {
        for bias in [false, true].into_iter().filter(|&b| biased || !b) {
            let mut data = Vec::new();
            let mut shape = Vec::new();
            for e in 0..experts {
                let taken: Option<Vec<HostTensor>> =
                    parts.iter().map(|&p| take(e, p, bias)).collect();
                let Some(taken) = taken else {
                    return;
                };
                // `[out, in]` (or `[out]`) parts, their outputs interleaved or in turn (halves),
                // into `[in, out·n]`, or into `[out·n, in]` where the stacks are out-major.
                let (outputs, inputs) = match taken[0].shape[..] {
                    [o, i] => (o, i),
                    [o] => (o, 1),
                    _ => return,
                };
                let out_major = stacks.out_major && !bias;
                match (out_major, stacks.halves) {
                    (true, true) => {
                        for t in &taken {
                            data.extend_from_slice(&t.data);
                        }
                    }
                    (true, false) => {
                        for o in 0..outputs {
                            for t in &taken {
                                data.extend_from_slice(&t.data[o * inputs..(o + 1) * inputs]);
                            }
                        }
                    }
                    (false, true) => {
                        for i in 0..inputs {
                            for t in &taken {
                                data.extend((0..outputs).map(|o| t.data[o * inputs + i]));
                            }
                        }
                    }
                    (false, false) => {
                        for i in 0..inputs {
                            for o in 0..outputs {
                                data.extend(taken.iter().map(|t| t.data[o * inputs + i]));
                            }
                        }
                    }
                }
                shape = match (bias, out_major) {
                    (true, _) => vec![experts, outputs * parts.len()],
                    (false, true) => vec![experts, outputs * parts.len(), inputs],
                    (false, false) => vec![experts, inputs, outputs * parts.len()],
                };
            }
            let suffix = if bias { "_bias" } else { "" };
            stacked.push((
                format!("{layer}.{stack}{suffix}"),
                HostTensor { shape, data },
            ));
        }
    }
    let at = first.min(tensors.len());
    tensors.splice(at..at, stacked);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer's four stacks of two experts, `hidden` 3 and `width` 2, with distinct values.
    fn stacks() -> Vec<(String, HostTensor)> {
        let tensor = |shape: Vec<usize>, base: f32| HostTensor {
            data: (0..shape.iter().product::<usize>())
                .map(|k| base + k as f32)
                .collect(),
            shape,
        };
        vec![
            (
                "model.layers.0.mlp.experts.gate_up_proj".into(),
                tensor(vec![2, 3, 4], 0.0),
            ),
            (
                "model.layers.0.mlp.experts.gate_up_proj_bias".into(),
                tensor(vec![2, 4], 100.0),
            ),
            (
                "model.layers.0.mlp.experts.down_proj".into(),
                tensor(vec![2, 2, 3], 200.0),
            ),
            (
                "model.layers.0.mlp.experts.down_proj_bias".into(),
                tensor(vec![2, 3], 300.0),
            ),
        ]
    }

    /// The stacks as a source.
    struct Stacks(Vec<(String, HostTensor)>);

    impl WeightSource for Stacks {
        fn name(&self) -> String {
            "stacks".into()
        }
        fn tensor(&self, name: &str) -> Result<Option<HostTensor>, WeightError> {
            Ok(self
                .0
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.clone()))
        }
        fn parameter_count(&self) -> u64 {
            0
        }
    }

    /// GPT-OSS's stacks: `mlp.experts`, gate and up interleaved.
    const INTERLEAVED: ExpertStacks = ExpertStacks {
        module: "mlp.experts",
        gate_up: "mlp.experts.gate_up_proj",
        down: "mlp.experts.down_proj",
        halves: false,
        out_major: false,
    };

    fn source() -> ExpertStackSource {
        ExpertStackSource {
            inner: Arc::new(Stacks(stacks())),
            experts: 2,
            stacks: INTERLEAVED,
            hidden: 3,
            held: Mutex::new(Vec::new()),
        }
    }

    /// Expert 1's gate is the even columns of its `[3, 4]` block (values 12 … 23), as
    /// `[out, in]`; its up projection the odd ones; its down projection its `[2, 3]` block
    /// transposed; biases likewise.
    #[test]
    fn an_experts_linears_are_its_columns_of_the_stacks() {
        let s = source();
        let get = |name: &str| {
            s.tensor(&format!("model.layers.0.mlp.experts.1.{name}"))
                .unwrap()
                .unwrap()
        };
        let gate = get("gate_proj.weight");
        assert_eq!(gate.shape, vec![2, 3]);
        assert_eq!(gate.data, vec![12.0, 16.0, 20.0, 14.0, 18.0, 22.0]);
        assert_eq!(
            get("up_proj.weight").data,
            vec![13.0, 17.0, 21.0, 15.0, 19.0, 23.0]
        );
        let down = get("down_proj.weight");
        assert_eq!(down.shape, vec![3, 2]);
        assert_eq!(down.data, vec![206.0, 209.0, 207.0, 210.0, 208.0, 211.0]);
        assert_eq!(get("gate_proj.bias").data, vec![104.0, 106.0]);
        assert_eq!(get("up_proj.bias").data, vec![105.0, 107.0]);
        assert_eq!(get("down_proj.bias").data, vec![303.0, 304.0, 305.0]);
        // In Burn's layout, the same values transposed.
        let burn = s
            .tensor_transposed("model.layers.0.mlp.experts.1.gate_proj.weight")
            .unwrap()
            .unwrap();
        assert_eq!(burn.shape, vec![2, 3]);
        assert_eq!(burn.data, vec![12.0, 14.0, 16.0, 18.0, 20.0, 22.0]);
        assert!(s
            .tensor("model.layers.0.mlp.experts.2.gate_proj.weight")
            .is_err());
        assert!(s.tensor("model.norm.weight").unwrap().is_none());
    }

    /// Every expert's linears read apart and stacked again give the stacks back, value for
    /// value, where the first expert's gate was.
    #[test]
    fn stacking_the_experts_back_gives_the_checkpoints_stacks() {
        let s = source();
        let mut tensors = vec![(
            "model.layers.0.input_layernorm.weight".to_string(),
            HostTensor::default(),
        )];
        for e in 0..2 {
            for linear in ["gate_proj", "up_proj", "down_proj"] {
                for kind in ["weight", "bias"] {
                    let name = format!("model.layers.0.mlp.experts.{e}.{linear}.{kind}");
                    let t = s.tensor(&name).unwrap().unwrap();
                    tensors.push((name, t));
                }
            }
        }
        let apart = tensors.clone();
        stack_experts(&mut tensors, "model.layers.0", 2, INTERLEAVED);
        assert_eq!(tensors[0].0, "model.layers.0.input_layernorm.weight");
        assert_eq!(tensors[1..], stacks()[..]);
        // Stacked out-major, each expert's `[2 · width, hidden]` (its gate's and up's rows
        // interleaved), the stacks read back as the same linears.
        let out_major = ExpertStacks {
            out_major: true,
            ..INTERLEAVED
        };
        let mut turned = apart.clone();
        stack_experts(&mut turned, "model.layers.0", 2, out_major);
        assert_eq!(turned[1].1.shape, vec![2, 4, 3]);
        let read = ExpertStackSource {
            inner: Arc::new(Stacks(turned)),
            experts: 2,
            stacks: out_major,
            hidden: 3,
            held: Mutex::new(Vec::new()),
        };
        for (name, t) in &apart[1..] {
            assert_eq!(&read.tensor(name).unwrap().unwrap(), t, "{name}");
        }
    }

    /// Llama 4's stacks under `feed_forward.experts`, without biases: expert 1's gate is the
    /// first two columns of its `[3, 4]` block (values 12 … 23), its up projection the last
    /// two; stacked again they give the checkpoint's values back. Transformers 5's `[out, in]`
    /// stacks (Qwen3-VL-MoE's as it saves them) give the same linears.
    #[test]
    fn halves_hold_the_gate_then_the_up_projection() {
        let halves = ExpertStacks {
            module: "feed_forward.experts",
            gate_up: "feed_forward.experts.gate_up_proj",
            down: "feed_forward.experts.down_proj",
            halves: true,
            out_major: false,
        };
        let renamed: Vec<(String, HostTensor)> = stacks()
            .into_iter()
            .filter(|(n, _)| !n.ends_with("_bias"))
            .map(|(n, t)| (n.replace(".mlp.", ".feed_forward."), t))
            .collect();
        let s = ExpertStackSource {
            inner: Arc::new(Stacks(renamed.clone())),
            experts: 2,
            stacks: halves,
            hidden: 3,
            held: Mutex::new(Vec::new()),
        };
        let get = |e: usize, name: &str| {
            s.tensor(&format!(
                "model.layers.0.feed_forward.experts.{e}.{name}.weight"
            ))
            .unwrap()
            .unwrap()
        };
        assert_eq!(
            get(1, "gate_proj").data,
            vec![12.0, 16.0, 20.0, 13.0, 17.0, 21.0]
        );
        assert_eq!(
            get(1, "up_proj").data,
            vec![14.0, 18.0, 22.0, 15.0, 19.0, 23.0]
        );
        // Under the decoder's names, as a saved copy holds them before stacking.
        let mut tensors = Vec::new();
        for e in 0..2 {
            for linear in ["gate_proj", "up_proj", "down_proj"] {
                tensors.push((
                    format!("model.layers.0.mlp.experts.{e}.{linear}.weight"),
                    get(e, linear),
                ));
            }
        }
        let apart = tensors.clone();
        stack_experts(&mut tensors, "model.layers.0", 2, halves);
        assert_eq!(tensors, renamed, "stacked under the checkpoint's names");
        // The same stacks saved by transformers 5, each expert's matrix `[out, in]`, read alike.
        let turned: Vec<(String, HostTensor)> = renamed
            .iter()
            .map(|(n, t)| {
                let [e, rows, cols] = t.shape[..] else {
                    unreachable!()
                };
                let data = t
                    .data
                    .chunks_exact(rows * cols)
                    .flat_map(|m| crate::model::kernels::transpose(m, rows, cols))
                    .collect();
                let shape = vec![e, cols, rows];
                (
                    n.replace(".feed_forward.", ".mlp."),
                    HostTensor { shape, data },
                )
            })
            .collect();
        let saved = ExpertStackSource {
            inner: Arc::new(Stacks(turned.clone())),
            experts: 2,
            stacks: TRANSFORMERS_STACKS,
            hidden: 3,
            held: Mutex::new(Vec::new()),
        };
        for (e, linear) in [(0, "gate_proj"), (1, "up_proj"), (1, "down_proj")] {
            let name = format!("model.layers.0.mlp.experts.{e}.{linear}.weight");
            assert_eq!(
                saved.tensor(&name).unwrap().unwrap(),
                get(e, linear),
                "{name}"
            );
        }
        // Stacked out-major (as Granite's checkpoints hold them), the linears give those stacks.
        let mut out_major = apart;
        stack_experts(&mut out_major, "model.layers.0", 2, TRANSFORMERS_STACKS);
        assert_eq!(out_major, turned);
    }
}
