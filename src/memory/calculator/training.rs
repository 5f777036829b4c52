//! The training calculator: weights, LoRA adapters, gradients, optimizer states, master weights
//! and activations per GPU under ZeRO, tensor and pipeline parallelism (formulas in the parent
//! module's documentation).

use std::fmt;
use std::str::FromStr;

use super::{product, scaled, split, Precision, CUDA_CONTEXT_BYTES, FP16_BYTES, FP32_BYTES};
use crate::model::arch::{Breakdown, ModelShape, Place};

/// Every optimizer, in the order error messages list them.
pub(super) const OPTIMIZERS: [Optimizer; 15] = [
    Optimizer::Sgd,
    Optimizer::SgdMomentum,
    Optimizer::Nesterov,
    Optimizer::Adagrad,
    Optimizer::Rmsprop,
    Optimizer::Adam,
    Optimizer::Adamw,
    Optimizer::Adafactor,
    Optimizer::Lamb,
    Optimizer::Lion,
    Optimizer::Nadam,
    Optimizer::Amsgrad,
    Optimizer::SparseAdam,
    Optimizer::Adabelief,
    Optimizer::Shampoo,
];

/// The linear layers LoRA can target.
pub(super) const LORA_TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// The optimizer whose states training keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Optimizer {
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: one buffer.
    SgdMomentum,
    /// Nesterov momentum: one buffer.
    Nesterov,
    /// Adagrad: summed squares.
    Adagrad,
    /// RMSprop: a running mean of squares.
    Rmsprop,
    /// Adam: first and second moments.
    Adam,
    /// AdamW: first and second moments.
    Adamw,
    /// Adafactor: factored second moments, about half a value per parameter.
    Adafactor,
    /// LAMB: first and second moments.
    Lamb,
    /// Lion: one momentum.
    Lion,
    /// NAdam: first and second moments.
    Nadam,
    /// AMSGrad: two moments and the running maximum.
    Amsgrad,
    /// Sparse Adam: first and second moments.
    SparseAdam,
    /// AdaBelief: first moment and belief.
    Adabelief,
    /// Shampoo: preconditioners, about 2.5 values per parameter.
    Shampoo,
}

impl Optimizer {
    /// fp32 state values kept per trainable parameter.
    pub fn state_multiplier(self) -> f64 {
        match self {
            Optimizer::Sgd => 0.0,
            Optimizer::SgdMomentum
            | Optimizer::Nesterov
            | Optimizer::Adagrad
            | Optimizer::Rmsprop
            | Optimizer::Lion => 1.0,
            Optimizer::Adam
            | Optimizer::Adamw
            | Optimizer::Lamb
            | Optimizer::Nadam
            | Optimizer::SparseAdam
            | Optimizer::Adabelief => 2.0,
            Optimizer::Amsgrad => 3.0,
            Optimizer::Adafactor => 0.5,
            Optimizer::Shampoo => 2.5,
        }
    }

    /// The name the CLI takes.
    fn name(self) -> &'static str {
        match self {
            Optimizer::Sgd => "sgd",
            Optimizer::SgdMomentum => "sgd-momentum",
            Optimizer::Nesterov => "nesterov",
            Optimizer::Adagrad => "adagrad",
            Optimizer::Rmsprop => "rmsprop",
            Optimizer::Adam => "adam",
            Optimizer::Adamw => "adamw",
            Optimizer::Adafactor => "adafactor",
            Optimizer::Lamb => "lamb",
            Optimizer::Lion => "lion",
            Optimizer::Nadam => "nadam",
            Optimizer::Amsgrad => "amsgrad",
            Optimizer::SparseAdam => "sparse-adam",
            Optimizer::Adabelief => "adabelief",
            Optimizer::Shampoo => "shampoo",
        }
    }
}

impl fmt::Display for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Optimizer {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        OPTIMIZERS
            .iter()
            .copied()
            .find(|x| x.name() == wanted)
            .ok_or_else(|| {
                let names: Vec<&str> = OPTIMIZERS.iter().map(|x| x.name()).collect();
                format!(
                    "unknown optimizer `{s}`; choose one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// Low-rank adapters on some linear layers of every decoder layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lora {
    /// Adapter rank `r`.
    pub rank: usize,
    /// Targeted linears: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj.
    pub targets: Vec<String>,
    /// QLoRA: the frozen base weights are stored as nf4.
    pub quantized_base: bool,
}

/// How training is split over GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallelism {
    /// ZeRO stage, 0 to 3.
    pub zero: u8,
    /// Data-parallel GPUs.
    pub dp: usize,
    /// Tensor-parallel GPUs.
    pub tp: usize,
    /// Pipeline stages.
    pub pp: usize,
}

impl Default for Parallelism {
    fn default() -> Self {
        Parallelism {
            zero: 0,
            dp: 1,
            tp: 1,
            pp: 1,
        }
    }
}

impl Parallelism {
    /// Checks that `dp`, `tp` and `pp` are at least 1 and the ZeRO stage at most 3.
    pub fn validate(&self) -> Result<(), String> {
        for (name, n) in [("dp", self.dp), ("tp", self.tp), ("pp", self.pp)] {
            if n == 0 {
                return Err(format!("{name} must be at least 1, got 0"));
            }
        }
        if self.zero > 3 {
            return Err(format!("ZeRO stage must be 0 to 3, got {}", self.zero));
        }
        Ok(())
    }
}

/// What a training estimate is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingRequest {
    /// Training precision (fp16/bf16 mean mixed precision with fp32 master weights).
    pub precision: Precision,
    /// Tokens per sequence.
    pub seqlen: usize,
    /// Sequences per batch (per data-parallel rank).
    pub batch: usize,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// Whether only layer inputs are kept and the rest recomputed.
    pub gradient_checkpointing: bool,
    /// Whether attention scores are never stored.
    pub flash_attention: bool,
    /// Adapters instead of full fine-tuning.
    pub lora: Option<Lora>,
    /// The split over GPUs.
    pub parallelism: Parallelism,
}

/// Input and output widths of a LoRA target, `None` for an unknown name.
fn lora_dims(shape: &ModelShape, target: &str) -> Option<(u64, u64)> {
    let h = shape.hidden_size as u64;
    let q = (shape.num_attention_heads * shape.head_dim) as u64;
    let kv = (shape.num_key_value_heads * shape.head_dim) as u64;
    let i = shape.intermediate_size as u64;
    match target {
        "q_proj" => Some((h, q)),
        "k_proj" | "v_proj" => Some((h, kv)),
        "o_proj" => Some((q, h)),
        "gate_proj" | "up_proj" => Some((h, i)),
        "down_proj" => Some((i, h)),
        _ => None,
    }
}

/// Adapter parameters over the known, distinct targets (unknown ones count nothing).
fn known_lora_parameters(shape: &ModelShape, lora: &Lora) -> u64 {
    let mut names: Vec<&str> = lora.targets.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    let per_layer: u64 = names
        .iter()
        .filter_map(|n| lora_dims(shape, n))
        .map(|(i, o)| product(&[lora.rank as u64, i + o]))
        .fold(0, u64::saturating_add);
    product(&[per_layer, shape.num_hidden_layers as u64])
}

/// LoRA parameters: `rank × (in + out)` per distinct targeted linear, per layer.
pub fn lora_parameters(shape: &ModelShape, lora: &Lora) -> Result<u64, String> {
    if lora.rank == 0 {
        return Err("LoRA rank must be at least 1".to_string());
    }
    if lora.targets.is_empty() {
        return Err(format!(
            "LoRA needs at least one target; valid targets: {}",
            LORA_TARGETS.join(", ")
        ));
    }
    if let Some(bad) = lora.targets.iter().find(|t| lora_dims(shape, t).is_none()) {
        return Err(format!(
            "unknown LoRA target `{bad}`; valid targets: {}",
            LORA_TARGETS.join(", ")
        ));
    }
    Ok(known_lora_parameters(shape, lora))
}

/// Per-GPU memory to train: weights, adapters, gradients, optimizer, activations, overhead.
pub fn training(shape: &ModelShape, req: &TrainingRequest) -> Breakdown {
    let mut out = Breakdown::default();
    let par = &req.parallelism;
    let p = shape.parameters;
    let c = req.precision.compute_bytes();
    let (s, b) = (req.seqlen as u64, req.batch as u64);
    let (h, a, v) = (
        shape.hidden_size as u64,
        shape.num_attention_heads as u64,
        shape.vocab_size as u64,
    );
    let dp_if = |stage: u8| if par.zero >= stage { par.dp } else { 1 };
    let weight_parts = [("tp", par.tp), ("pp", par.pp), ("dp", dp_if(3))];
    let gradient_parts = [("tp", par.tp), ("pp", par.pp), ("dp", dp_if(2))];
    let optimizer_parts = [("tp", par.tp), ("pp", par.pp), ("dp", dp_if(1))];

    let pb = match &req.lora {
        Some(lora) if lora.quantized_base => Precision::Nf4.bytes(),
        _ => req.precision.bytes(),
    };
    let (bytes, by) = split(scaled(p, pb), &weight_parts);
    out.push(
        "weights",
        bytes,
        Place::Device,
        format!("{p} params × {pb} B{by}"),
    );

    let trainable = match &req.lora {
        Some(lora) => {
            let t = known_lora_parameters(shape, lora);
            let (bytes, by) = split(product(&[t, c]), &weight_parts);
            out.push(
                "lora adapters",
                bytes,
                Place::Device,
                format!("{t} params × {c} B{by}"),
            );
            t
        }
        None => p,
    };

    let (bytes, by) = split(product(&[trainable, c]), &gradient_parts);
    out.push(
        "gradients",
        bytes,
        Place::Device,
        format!("{trainable} trainable × {c} B{by}"),
    );

    let k = req.optimizer.state_multiplier();
    let (bytes, by) = split(
        scaled(product(&[trainable, FP32_BYTES]), k),
        &optimizer_parts,
    );
    out.push(
        "optimizer states",
        bytes,
        Place::Device,
        format!(
            "{trainable} trainable × 4 B × {k} states ({}){by}",
            req.optimizer
        ),
    );

    if req.precision.is_mixed() {
        let (bytes, by) = split(product(&[trainable, FP32_BYTES]), &optimizer_parts);
        out.push(
            "master weights",
            bytes,
            Place::Device,
            format!("{trainable} trainable × 4 B (fp32){by}"),
        );
    }

    let layers_total = shape.num_hidden_layers;
    let layers = layers_total.div_ceil(par.pp.max(1)) as u64;
    let layers_formula = if par.pp > 1 {
        format!("⌈{layers_total}/pp {}⌉ = {layers} layers", par.pp)
    } else {
        format!("{layers} layers")
    };
    let scale = c / FP16_BYTES;
    let scale_formula = if scale > 1 { " × 2 (fp32)" } else { "" };
    let (scores, scores_formula) = if req.flash_attention {
        (0, String::new())
    } else {
        (
            product(&[5, a, s, s, b]),
            format!(" + 5 × {a} heads × {s}² tokens × {b} batch"),
        )
    };
    let one_layer = product(&[34, s, b, h])
        .saturating_add(scores)
        .saturating_mul(scale);
    let one_formula =
        format!("(34 × {s} tokens × {b} batch × {h} hidden{scores_formula}) B{scale_formula}");
    let (activations, activations_formula) = if req.gradient_checkpointing {
        (
            product(&[s, b, h, c, layers]).saturating_add(one_layer),
            format!(
                "{s} tokens × {b} batch × {h} hidden × {c} B × {layers_formula} + one layer {one_formula}"
            ),
        )
    } else {
        (
            product(&[layers, one_layer]),
            format!("{layers_formula} × {one_formula}"),
        )
    };
    let (bytes, by) = split(activations, &[("tp", par.tp)]);
    out.push(
        "activations",
        bytes,
        Place::Device,
        format!("{activations_formula}{by}"),
    );

    let (bytes, by) = split(product(&[b, s, v, FP32_BYTES, 2]), &[("tp", par.tp)]);
    out.push(
        "logits",
        bytes,
        Place::Device,
        format!("{b} batch × {s} tokens × {v} vocab × 4 B × 2 (fp32 logits + gradient){by}"),
    );
    out.push(
        "overhead",
        CUDA_CONTEXT_BYTES,
        Place::Device,
        format!("{CUDA_CONTEXT_BYTES} B CUDA context + cuBLAS workspace"),
    );
    out
}
