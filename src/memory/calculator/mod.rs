//! The memory calculators users know from other frameworks — inference and training (LoRA,
//! QLoRA, ZeRO, tensor and pipeline parallelism) from a [`ModelShape`](crate::model::arch::ModelShape) alone — behind
//! `wanda estimate --mode inference|training`. Pipelines never use it: their own estimate is
//! [`crate::memory::estimate`]. [`inference`] and [`training`] hold the two calculators; this
//! file their shared types and helpers.
//!
//! Pure arithmetic, no tensors and no I/O; the Rust version of the "GPU memory calculator"
//! guide and the "LLM/VLM per-GPU memory estimator" guide, with activations from EleutherAI's
//! Transformer Math 101 and Korthikanti et al. 2022 ("Reducing Activation Recomputation in
//! Large Transformer Models"). Every share is on the device; all sizes are bytes.
//!
//! Notation: `P` parameters, `T` trainable parameters, `L` layers, `H` hidden, `I` MLP width,
//! `a` query heads, `kv` key/value heads, `d` head width, `V` vocabulary, `s` tokens, `b` batch,
//! `p` bytes per weight of the precision, `c` bytes per activation (the precision's bytes, or 2
//! when the precision is quantized: int8/int4/nf4 quantize weights only).
//!
//! Inference (calculator guide):
//! - weights = `P × p`
//! - kv cache = `2 × L × b × s × kv × d × c` (GQA-aware)
//! - activations = `b × s × (H + a·d + 2·kv·d + 2·I) × c` for one layer at a time, plus the
//!   attention scores `b × a × s² × 4` (fp32), or with flash attention only its running max and
//!   sum `b × a × s × 4 × 2`
//! - logits = `b × s × V × 4` (fp32; Hugging Face computes every position)
//! - overhead = [`CUDA_CONTEXT_BYTES`]
//!
//! Training (estimator guide, Transformer Math 101):
//! - weights = `P × p` (QLoRA: `P × 0.5625`, nf4 with its scales)
//! - lora adapters = `T × c` (LoRA only; `T` = [`lora_parameters`])
//! - gradients = `T × c`
//! - optimizer states = `T × 4 × k`, `k` = [`Optimizer::state_multiplier`], kept in fp32
//! - master weights = `T × 4` when training in fp16/bf16 (mixed precision)
//! - activations = `L × s × b × H × (34 + 5·a·s/H)` bytes at 16 bits (Korthikanti, no
//!   recomputation), without the `5·a·s/H` term under flash attention, doubled at fp32; with
//!   gradient checkpointing only the layer inputs `s × b × H × c × L` plus one full layer
//! - logits = `b × s × V × 4 × 2` (fp32 logits and their gradient)
//! - overhead = [`CUDA_CONTEXT_BYTES`]
//!
//! Per GPU under [`Parallelism`]: tensor parallelism divides weights, gradients, optimizer
//! states, activations (as with sequence parallelism) and logits (vocab-parallel); pipeline
//! parallelism gives each stage `⌈L/pp⌉` layers and divides weights, gradients and optimizer
//! states; ZeRO over `dp` divides optimizer states and master weights (stage 1), also gradients
//! (stage 2), also weights (stage 3). Divisions round up.

use std::fmt;
use std::str::FromStr;

mod inference;
mod training;

pub use inference::{inference, InferenceRequest};
pub use training::{lora_parameters, training, Lora, Optimizer, Parallelism, TrainingRequest};

/// The GPU sizes, in GiB, that [`fits_on`] checks.
pub const COMMON_GPUS_GIB: [u64; 8] = [8, 12, 16, 24, 40, 48, 80, 141];

/// CUDA context plus cuBLAS workspace on one GPU, 0.5 GiB: the estimator guide's "CUDA/cuBLAS
/// overhead" constant, scaled to inference-only use.
pub const CUDA_CONTEXT_BYTES: u64 = 1 << 29;

/// Bytes per value of fp32, which logits, scores, optimizer states and master weights use.
const FP32_BYTES: u64 = 4;

/// Bytes per value of the 16-bit dtype that quantized weights compute in.
const FP16_BYTES: u64 = 2;

/// Every precision, in the order error messages list them.
const PRECISIONS: [Precision; 6] = [
    Precision::Fp32,
    Precision::Fp16,
    Precision::Bf16,
    Precision::Int8,
    Precision::Int4,
    Precision::Nf4,
];

/// The dtype weights are stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// 32-bit float.
    Fp32,
    /// 16-bit float.
    Fp16,
    /// 16-bit brain float.
    Bf16,
    /// 8-bit integer weights.
    Int8,
    /// 4-bit integer weights.
    Int4,
    /// 4-bit NormalFloat weights with their scales (QLoRA).
    Nf4,
}

impl Precision {
    /// Bytes per weight: 4, 2, 2, 1, 0.5, and 0.5625 for nf4 (4 bits plus scales and zeros).
    pub fn bytes(self) -> f64 {
        match self {
            Precision::Fp32 => 4.0,
            Precision::Fp16 | Precision::Bf16 => 2.0,
            Precision::Int8 => 1.0,
            Precision::Int4 => 0.5,
            Precision::Nf4 => 0.5625,
        }
    }

    /// Bytes per activation, KV entry or gradient: fp16 when the weights are quantized.
    fn compute_bytes(self) -> u64 {
        match self {
            Precision::Fp32 => FP32_BYTES,
            _ => FP16_BYTES,
        }
    }

    /// Whether training in this precision keeps fp32 master weights.
    fn is_mixed(self) -> bool {
        matches!(self, Precision::Fp16 | Precision::Bf16)
    }

    /// The name the CLI takes.
    fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
            Precision::Int4 => "int4",
            Precision::Nf4 => "nf4",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        PRECISIONS
            .iter()
            .copied()
            .find(|x| x.name() == wanted)
            .ok_or_else(|| {
                let names: Vec<&str> = PRECISIONS.iter().map(|x| x.name()).collect();
                format!(
                    "unknown precision `{s}`; choose one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// The product of `factors`, saturating instead of overflowing.
fn product(factors: &[u64]) -> u64 {
    factors.iter().fold(1, |acc, &f| acc.saturating_mul(f))
}

/// `count × bytes` rounded to the nearest byte.
fn scaled(count: u64, bytes: f64) -> u64 {
    (count as f64 * bytes).round() as u64
}

/// `bytes` per GPU when split over the `parts` greater than 1 (rounded up), and the formula's
/// suffix saying so (empty when nothing splits it).
fn split(bytes: u64, parts: &[(&str, usize)]) -> (u64, String) {
    let used: Vec<&(&str, usize)> = parts.iter().filter(|(_, n)| *n > 1).collect();
    let n = used
        .iter()
        .fold(1u64, |acc, (_, n)| acc.saturating_mul(*n as u64));
    if used.is_empty() {
        return (bytes, String::new());
    }
    let names: Vec<String> = used.iter().map(|(name, n)| format!("{name} {n}")).collect();
    (bytes.div_ceil(n), format!(" ÷ {n} ({})", names.join(" × ")))
}

/// The [`COMMON_GPUS_GIB`] sizes that hold `total_bytes` with a `headroom` fraction left free.
pub fn fits_on(total_bytes: u64, headroom: f64) -> Vec<u64> {
    COMMON_GPUS_GIB
        .iter()
        .copied()
        .filter(|&gib| total_bytes as f64 <= (gib << 30) as f64 * (1.0 - headroom))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::training::{LORA_TARGETS, OPTIMIZERS};
    use super::*;
    use crate::model::arch::{gib, Breakdown, ModelShape, Place};

    /// H=4, I=6, L=2, a=2, kv=1, d=2, V=10, untied. Parameters: linears per layer
    /// 4·4 + 2·4·2 + 4·4 + 3·4·6 = 120, × 2 layers = 240; embeddings + head 2·10·4 = 80;
    /// norms 2·2·4 + 4 = 20; total 340.
    fn tiny() -> ModelShape {
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
            max_position_embeddings: 16,
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

    fn llama2_7b() -> ModelShape {
        ModelShape {
            parameters: 6_738_415_616,
            hidden_size: 4096,
            intermediate_size: 11008,
            num_hidden_layers: 32,
            num_attention_heads: 32,
            num_key_value_heads: 32,
            head_dim: 128,
            vocab_size: 32000,
            tie_word_embeddings: false,
            max_position_embeddings: 4096,
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

    /// The bytes of the item called `name`, `None` when absent.
    fn item(b: &Breakdown, name: &str) -> Option<u64> {
        b.items.iter().find(|i| i.name == name).map(|i| i.bytes)
    }

    fn names(b: &Breakdown) -> Vec<&str> {
        b.items.iter().map(|i| i.name.as_str()).collect()
    }

    fn infer(precision: Precision, batch: usize, kv_cache: bool, flash: bool) -> Breakdown {
        inference(
            &tiny(),
            &InferenceRequest {
                precision,
                seqlen: 3,
                batch,
                kv_cache,
                flash_attention: flash,
            },
        )
    }

    /// bf16 AdamW, s=3, b=1, no LoRA, no flash, no checkpointing, one GPU.
    fn train_req() -> TrainingRequest {
        TrainingRequest {
            precision: Precision::Bf16,
            seqlen: 3,
            batch: 1,
            optimizer: Optimizer::Adamw,
            gradient_checkpointing: false,
            flash_attention: false,
            lora: None,
            parallelism: Parallelism::default(),
        }
    }

    fn lora_qv(quantized_base: bool) -> Lora {
        Lora {
            rank: 2,
            targets: vec!["q_proj".to_string(), "v_proj".to_string()],
            quantized_base,
        }
    }

    fn zero(stage: u8) -> TrainingRequest {
        TrainingRequest {
            parallelism: Parallelism {
                zero: stage,
                dp: 4,
                tp: 1,
                pp: 1,
            },
            ..train_req()
        }
    }

    #[test]
    fn inference_fp16_kv_cache_no_flash() {
        let b = infer(Precision::Fp16, 1, true, false);
        assert_eq!(
            names(&b),
            ["weights", "kv cache", "activations", "logits", "overhead"]
        );
        // 340 × 2
        assert_eq!(item(&b, "weights"), Some(680));
        assert_eq!(b.items[0].formula, "340 params × 2 B");
        // 2 × 2 layers × 1 batch × 3 tokens × 1 kv head × 2 head dim × 2 B
        assert_eq!(item(&b, "kv cache"), Some(48));
        // 1 × 3 × (4 + 4 + 2·2 + 2·6 = 24) × 2 = 144; scores 1 × 2 × 3² × 4 = 72
        assert_eq!(item(&b, "activations"), Some(216));
        // 1 × 3 × 10 × 4
        assert_eq!(item(&b, "logits"), Some(120));
        assert_eq!(item(&b, "overhead"), Some(536_870_912));
        // 680 + 48 + 216 + 120 + 536870912
        assert_eq!(b.total(Place::Device), 536_871_976);
        assert_eq!(b.total(Place::Host), 0);
    }

    #[test]
    fn inference_int4_flash_no_kv_cache() {
        let b = infer(Precision::Int4, 2, false, true);
        assert_eq!(names(&b), ["weights", "activations", "logits", "overhead"]);
        // 340 × 0.5
        assert_eq!(item(&b, "weights"), Some(170));
        // activations in fp16: 2 × 3 × 24 × 2 = 288; flash max/sum 2 × 2 × 3 × 4 × 2 = 96
        assert_eq!(item(&b, "activations"), Some(384));
        // 2 × 3 × 10 × 4
        assert_eq!(item(&b, "logits"), Some(240));
    }

    #[test]
    fn inference_fp32_and_nf4() {
        let b = infer(Precision::Fp32, 1, true, false);
        // 340 × 4
        assert_eq!(item(&b, "weights"), Some(1360));
        // 2 × 2 × 1 × 3 × 1 × 2 × 4 B
        assert_eq!(item(&b, "kv cache"), Some(96));
        // 1 × 3 × 24 × 4 = 288, + 72 scores
        assert_eq!(item(&b, "activations"), Some(360));
        // 340 × 0.5625 = 191.25, rounded
        let b = infer(Precision::Nf4, 1, false, false);
        assert_eq!(item(&b, "weights"), Some(191));
        // int8: 340 × 1; KV in fp16: 48
        let b = infer(Precision::Int8, 1, true, false);
        assert_eq!(item(&b, "weights"), Some(340));
        assert_eq!(item(&b, "kv cache"), Some(48));
    }

    #[test]
    fn training_adamw_bf16() {
        let b = training(&tiny(), &train_req());
        assert_eq!(
            names(&b),
            [
                "weights",
                "gradients",
                "optimizer states",
                "master weights",
                "activations",
                "logits",
                "overhead"
            ]
        );
        // 340 × 2
        assert_eq!(item(&b, "weights"), Some(680));
        assert_eq!(item(&b, "gradients"), Some(680));
        // 340 × 4 × 2
        assert_eq!(item(&b, "optimizer states"), Some(2720));
        // 340 × 4
        assert_eq!(item(&b, "master weights"), Some(1360));
        // per layer 34·3·1·4 = 408 + 5·2·3²·1 = 90 → 498; × 2 layers
        assert_eq!(item(&b, "activations"), Some(996));
        // 1 × 3 × 10 × 4 × 2
        assert_eq!(item(&b, "logits"), Some(240));
        // 680 + 680 + 2720 + 1360 + 996 + 240 + 536870912
        assert_eq!(b.total(Place::Device), 536_877_588);
    }

    #[test]
    fn training_sgd_fp32() {
        let req = TrainingRequest {
            precision: Precision::Fp32,
            optimizer: Optimizer::Sgd,
            ..train_req()
        };
        let b = training(&tiny(), &req);
        // 340 × 4 each
        assert_eq!(item(&b, "weights"), Some(1360));
        assert_eq!(item(&b, "gradients"), Some(1360));
        // 340 × 4 × 0
        assert_eq!(item(&b, "optimizer states"), Some(0));
        // fp32 training keeps no master copy
        assert_eq!(item(&b, "master weights"), None);
        // 996 × 2 (fp32)
        assert_eq!(item(&b, "activations"), Some(1992));
        assert_eq!(item(&b, "logits"), Some(240));
    }

    #[test]
    fn training_fractional_optimizer_states() {
        // Adafactor: 340 × 4 × 0.5; Shampoo: 340 × 4 × 2.5; AMSGrad: 340 × 4 × 3
        for (optimizer, bytes) in [
            (Optimizer::Adafactor, 680),
            (Optimizer::Shampoo, 3400),
            (Optimizer::Amsgrad, 4080),
        ] {
            let b = training(
                &tiny(),
                &TrainingRequest {
                    optimizer,
                    ..train_req()
                },
            );
            assert_eq!(item(&b, "optimizer states"), Some(bytes));
        }
    }

    #[test]
    fn lora_parameters_by_hand() {
        // q_proj 2·(4 + 4) = 16, v_proj 2·(4 + 2) = 12; 28 per layer × 2 layers
        assert_eq!(lora_parameters(&tiny(), &lora_qv(false)), Ok(56));
        // all seven: q 16 + k 12 + v 12 + o 16 + gate 2·10 + up 20 + down 20 = 116, × 2
        let all = Lora {
            targets: LORA_TARGETS.iter().map(|t| t.to_string()).collect(),
            ..lora_qv(false)
        };
        assert_eq!(lora_parameters(&tiny(), &all), Ok(232));
        // a repeated target counts once
        let twice = Lora {
            targets: vec!["q_proj".to_string(), "q_proj".to_string()],
            ..lora_qv(false)
        };
        assert_eq!(lora_parameters(&tiny(), &twice), Ok(32));
    }

    #[test]
    fn lora_parameters_errors() {
        let bad = Lora {
            targets: vec!["q_proj".to_string(), "qkv_proj".to_string()],
            ..lora_qv(false)
        };
        assert_eq!(
            lora_parameters(&tiny(), &bad),
            Err(
                "unknown LoRA target `qkv_proj`; valid targets: q_proj, k_proj, v_proj, \
                 o_proj, gate_proj, up_proj, down_proj"
                    .to_string()
            )
        );
        let none = Lora {
            targets: Vec::new(),
            ..lora_qv(false)
        };
        assert_eq!(
            lora_parameters(&tiny(), &none),
            Err(
                "LoRA needs at least one target; valid targets: q_proj, k_proj, v_proj, \
                 o_proj, gate_proj, up_proj, down_proj"
                    .to_string()
            )
        );
        let rank0 = Lora {
            rank: 0,
            ..lora_qv(false)
        };
        assert_eq!(
            lora_parameters(&tiny(), &rank0),
            Err("LoRA rank must be at least 1".to_string())
        );
    }

    #[test]
    fn training_lora_rank2_qv() {
        let req = TrainingRequest {
            lora: Some(lora_qv(false)),
            ..train_req()
        };
        let b = training(&tiny(), &req);
        assert_eq!(
            names(&b),
            [
                "weights",
                "lora adapters",
                "gradients",
                "optimizer states",
                "master weights",
                "activations",
                "logits",
                "overhead"
            ]
        );
        // frozen base 340 × 2
        assert_eq!(item(&b, "weights"), Some(680));
        // 56 × 2
        assert_eq!(item(&b, "lora adapters"), Some(112));
        assert_eq!(item(&b, "gradients"), Some(112));
        // 56 × 4 × 2
        assert_eq!(item(&b, "optimizer states"), Some(448));
        // 56 × 4
        assert_eq!(item(&b, "master weights"), Some(224));
        assert_eq!(item(&b, "activations"), Some(996));
    }

    #[test]
    fn training_qlora_weights() {
        let req = TrainingRequest {
            lora: Some(lora_qv(true)),
            ..train_req()
        };
        let b = training(&tiny(), &req);
        // 340 × 0.5625 = 191.25, rounded
        assert_eq!(item(&b, "weights"), Some(191));
        assert_eq!(b.items[0].formula, "340 params × 0.5625 B");
        assert_eq!(item(&b, "lora adapters"), Some(112));
    }

    #[test]
    fn training_zero_stages_dp4() {
        // stage 0: nothing divided
        let b = training(&tiny(), &zero(0));
        assert_eq!(item(&b, "optimizer states"), Some(2720));
        // stage 1: optimizer 2720 / 4, master 1360 / 4
        let b = training(&tiny(), &zero(1));
        assert_eq!(item(&b, "weights"), Some(680));
        assert_eq!(item(&b, "gradients"), Some(680));
        assert_eq!(item(&b, "optimizer states"), Some(680));
        assert_eq!(item(&b, "master weights"), Some(340));
        assert_eq!(
            b.items[2].formula,
            "340 trainable × 4 B × 2 states (adamw) ÷ 4 (dp 4)"
        );
        // stage 2: also gradients 680 / 4
        let b = training(&tiny(), &zero(2));
        assert_eq!(item(&b, "weights"), Some(680));
        assert_eq!(item(&b, "gradients"), Some(170));
        assert_eq!(item(&b, "optimizer states"), Some(680));
        // stage 3: also weights 680 / 4
        let b = training(&tiny(), &zero(3));
        assert_eq!(item(&b, "weights"), Some(170));
        assert_eq!(item(&b, "gradients"), Some(170));
        assert_eq!(item(&b, "optimizer states"), Some(680));
        assert_eq!(item(&b, "master weights"), Some(340));
        // activations and logits are per rank either way
        assert_eq!(item(&b, "activations"), Some(996));
        assert_eq!(item(&b, "logits"), Some(240));
    }

    #[test]
    fn training_tp2_and_pp2() {
        let tp = TrainingRequest {
            parallelism: Parallelism {
                tp: 2,
                ..Parallelism::default()
            },
            ..train_req()
        };
        let b = training(&tiny(), &tp);
        // every model share halves: 680/2, 680/2, 2720/2, 1360/2, 996/2, 240/2
        assert_eq!(item(&b, "weights"), Some(340));
        assert_eq!(item(&b, "gradients"), Some(340));
        assert_eq!(item(&b, "optimizer states"), Some(1360));
        assert_eq!(item(&b, "master weights"), Some(680));
        assert_eq!(item(&b, "activations"), Some(498));
        assert_eq!(item(&b, "logits"), Some(120));
        assert_eq!(item(&b, "overhead"), Some(CUDA_CONTEXT_BYTES));

        let pp = TrainingRequest {
            parallelism: Parallelism {
                pp: 2,
                ..Parallelism::default()
            },
            ..train_req()
        };
        let b = training(&tiny(), &pp);
        // weights, gradients, optimizer halve; one layer of activations (498); logits whole
        assert_eq!(item(&b, "weights"), Some(340));
        assert_eq!(item(&b, "gradients"), Some(340));
        assert_eq!(item(&b, "optimizer states"), Some(1360));
        assert_eq!(item(&b, "activations"), Some(498));
        assert_eq!(item(&b, "logits"), Some(240));
    }

    #[test]
    fn training_flash_and_checkpointing() {
        let flash = TrainingRequest {
            flash_attention: true,
            ..train_req()
        };
        // 34·3·1·4 = 408 per layer, × 2
        assert_eq!(item(&training(&tiny(), &flash), "activations"), Some(816));
        let ckpt = TrainingRequest {
            gradient_checkpointing: true,
            ..train_req()
        };
        // inputs 3·1·4·2 B·2 layers = 48, + one full layer 498
        assert_eq!(item(&training(&tiny(), &ckpt), "activations"), Some(546));
        let both = TrainingRequest {
            gradient_checkpointing: true,
            flash_attention: true,
            ..train_req()
        };
        // 48 + 408
        assert_eq!(item(&training(&tiny(), &both), "activations"), Some(456));
    }

    #[test]
    fn training_does_not_panic_on_odd_parallelism() {
        let req = TrainingRequest {
            parallelism: Parallelism {
                zero: 9,
                dp: 0,
                tp: 64,
                pp: 0,
            },
            ..train_req()
        };
        let b = training(&tiny(), &req);
        // ⌈680 / 64⌉ = 11; dp 0 and pp 0 count as 1
        assert_eq!(item(&b, "weights"), Some(11));
        // ⌈996 / 64⌉ = 16
        assert_eq!(item(&b, "activations"), Some(16));
    }

    #[test]
    fn parallelism_validate() {
        assert_eq!(Parallelism::default().validate(), Ok(()));
        let dp0 = Parallelism {
            dp: 0,
            ..Parallelism::default()
        };
        assert_eq!(
            dp0.validate(),
            Err("dp must be at least 1, got 0".to_string())
        );
        let zero4 = Parallelism {
            zero: 4,
            ..Parallelism::default()
        };
        assert_eq!(
            zero4.validate(),
            Err("ZeRO stage must be 0 to 3, got 4".to_string())
        );
    }

    #[test]
    fn llama2_7b_sanity() {
        let shape = llama2_7b();
        // 32 × 202375168 linears + 2 × 32000 × 4096 + 65 × 4096 norms
        assert_eq!(
            32 * shape.linear_parameters_per_layer() + 2 * shape.embedding_parameters() + 65 * 4096,
            6_738_415_616
        );
        let b = inference(
            &shape,
            &InferenceRequest {
                precision: Precision::Fp16,
                seqlen: 4096,
                batch: 1,
                kv_cache: true,
                flash_attention: true,
            },
        );
        // 6738415616 × 2
        assert_eq!(item(&b, "weights"), Some(13_476_831_232));
        assert_eq!(gib(13_476_831_232), "12.55 GiB");
        // 2 · 32 · 4096 · 4096 · 2 = 2^31
        assert_eq!(item(&b, "kv cache"), Some(2 << 30));
        let t = training(
            &shape,
            &TrainingRequest {
                seqlen: 4096,
                ..train_req()
            },
        );
        // 6738415616 × 8
        assert_eq!(item(&t, "optimizer states"), Some(53_907_324_928));
    }

    #[test]
    fn fits_on_sizes() {
        assert_eq!(fits_on(10 << 30, 0.0), [12, 16, 24, 40, 48, 80, 141]);
        // equal fits
        assert_eq!(fits_on(8 << 30, 0.0), COMMON_GPUS_GIB);
        // 8 GiB × 0.9 = 7.2 GiB < 8 GiB
        assert_eq!(fits_on(8 << 30, 0.1), [12, 16, 24, 40, 48, 80, 141]);
        // 12 GiB × 0.9 = 11596411699.2 B
        assert_eq!(fits_on(11_596_411_699, 0.1), [12, 16, 24, 40, 48, 80, 141]);
        assert_eq!(fits_on(11_596_411_700, 0.1), [16, 24, 40, 48, 80, 141]);
        assert_eq!(fits_on(200 << 30, 0.0), Vec::<u64>::new());
    }

    #[test]
    fn from_str_names_and_errors() {
        assert_eq!("bf16".parse(), Ok(Precision::Bf16));
        assert_eq!("NF4".parse(), Ok(Precision::Nf4));
        assert_eq!("sparse-adam".parse(), Ok(Optimizer::SparseAdam));
        assert_eq!("sgd-momentum".parse(), Ok(Optimizer::SgdMomentum));
        for p in PRECISIONS {
            assert_eq!(p.to_string().parse(), Ok(p));
        }
        for o in OPTIMIZERS {
            assert_eq!(o.to_string().parse(), Ok(o));
        }
        assert_eq!(
            "fp8".parse::<Precision>(),
            Err(
                "unknown precision `fp8`; choose one of: fp32, fp16, bf16, int8, int4, nf4"
                    .to_string()
            )
        );
        assert_eq!(
            "adam8bit".parse::<Optimizer>(),
            Err(
                "unknown optimizer `adam8bit`; choose one of: sgd, sgd-momentum, nesterov, \
                 adagrad, rmsprop, adam, adamw, adafactor, lamb, lion, nadam, amsgrad, \
                 sparse-adam, adabelief, shampoo"
                    .to_string()
            )
        );
    }
}
