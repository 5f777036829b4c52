//! The decoder families by name: [`Architecture`], serialised in resolved configs and run
//! records, made from the one list of families, [`families!`], which
//! [`crate::model::family`] expands into its files and their rows.

use serde::{Deserialize, Serialize};

/// The one list of families: each `mod` is a file of `model/family/`, each entry in it a
/// variant of [`Architecture`] and the row (a `FamilyRow` const of that file) that runs it.
/// `families!(then)` hands the list to the macro `then`: this file makes the enum of it, and
/// `model::family` the modules and the match from a variant to its row. A new family is a
/// file and one entry here.
macro_rules! families {
    ($then:ident) => {
        $then! {
            mod llama {
                /// `LlamaForCausalLM` (Llama 1/2/3, SmolLM, TinyLlama, …).
                Llama = ROW,
            }
            mod mistral {
                /// `MistralForCausalLM`.
                Mistral = ROW,
            }
            mod ministral {
                /// `MinistralForCausalLM` (Ministral-8B: Mistral's config, the window on the
                /// sliding layers of `layer_types` only).
                Ministral = ROW,
            }
            mod qwen2 {
                /// `Qwen2ForCausalLM` (q/k/v projections carry a bias).
                Qwen2 = ROW,
            }
            mod qwen3 {
                /// `Qwen3ForCausalLM` (per-head q/k RMSNorm).
                Qwen3 = ROW,
            }
            mod phi3 {
                /// `Phi3ForCausalLM` (stacked `qkv_proj` and `gate_up_proj`).
                Phi3 = ROW,
            }
            mod gemma2 {
                /// `Gemma2ForCausalLM` (Gemma 3's layer without q/k norms, with soft-capped
                /// attention scores and logits).
                Gemma2 = ROW,
            }
            mod gemma3 {
                /// `Gemma3ForCausalLM` (Gemma 3's text decoder: four `1 + w` norms per layer, GELU,
                /// scaled embeddings, interleaved local and global attention).
                Gemma3 = ROW,
            }
            mod opt {
                /// `OPTForCausalLM` (LayerNorms, biases everywhere, a ReLU MLP without a gate,
                /// learned positions).
                Opt = ROW,
            }
            mod gpt_neox {
                /// `GPTNeoXForCausalLM` (Pythia, GPT-NeoX-20B: parallel residual, partial rotary, a
                /// GELU MLP without a gate, q/k/v stacked head by head).
                GptNeox = ROW,
            }
            mod bloom {
                /// `BloomForCausalLM` (ALiBi instead of positions, a LayerNorm of the embeddings,
                /// LayerNorms, biases everywhere, a GELU MLP without a gate, q/k/v stacked head by
                /// head).
                Bloom = ROW,
            }
            mod falcon {
                /// `FalconForCausalLM` (Falcon-7B's multi-query parallel layer with one norm, the
                /// new architecture's grouped heads and two norms, q/k/v stacked by kv head).
                Falcon = ROW,
            }
            mod gemma {
                /// `GemmaForCausalLM` (Gemma 1: Llama's layer with `1 + w` norms, GeGLU, scaled
                /// embeddings, a tied head).
                Gemma = ROW,
            }
            mod phi {
                /// `PhiForCausalLM` (phi-1, phi-1.5, Phi-2: a parallel layer on one LayerNorm,
                /// partial rotary, biases everywhere, the LM head's too).
                Phi = ROW,
            }
            mod stablelm {
                /// `StableLmForCausalLM` (StableLM-3B-4E1T, StableLM 2: Llama's layer with
                /// LayerNorms, partial rotary, q/k/v biases, optionally parallel on one norm).
                StableLm = ROW,
            }
            mod olmo2 {
                /// `Olmo2ForCausalLM` (OLMo 2: Llama's layer with output norms instead of pre-norms
                /// and q/k norms across the heads).
                Olmo2 = ROW,
            }
            mod olmo3 {
                /// `Olmo3ForCausalLM` (OLMo 3: OLMo 2's layer with sliding-window attention on
                /// three layers of four and RoPE per layer type).
                Olmo3 = ROW,
            }
            mod smollm3 {
                /// `SmolLM3ForCausalLM` (SmolLM3: Llama's layer with NoPE layers, a tied head).
                SmolLm3 = ROW,
            }
            mod granite {
                /// `GraniteForCausalLM` (Granite 3.x: Llama's layer with factors of the embeddings,
                /// the residual adds, the attention scores and the logits).
                Granite = ROW,
            }
            mod granitemoe {
                /// `GraniteMoeForCausalLM` (Granite 3.x MoE: Granite's layer with routed experts
                /// stacked in 3-D tensors).
                GraniteMoe = GRANITE_MOE_ROW,
                /// `GraniteMoeSharedForCausalLM` (Granite MoE with a shared MLP beside the
                /// experts).
                GraniteMoeShared = GRANITE_MOE_SHARED_ROW,
                /// `GraniteMoeHybridForCausalLM` (Granite 4.0 whose layers are all attention
                /// layers: a shared MLP, with or without experts, RoPE or none).
                GraniteMoeHybrid = GRANITE_MOE_HYBRID_ROW,
            }
            mod glm {
                /// `GlmForCausalLM` (GLM-4-9B-chat-hf: Llama's layer with interleaved half
                /// rotation, q/k/v biases, stacked gate and up projections).
                Glm = GLM_ROW,
                /// `Glm4ForCausalLM` (GLM-4-0414: GLM's layer with output norms).
                Glm4 = GLM4_ROW,
            }
            mod cohere {
                /// `CohereForCausalLM` (Command R, Aya: a parallel layer on one bias-free
                /// LayerNorm, interleaved RoPE, scaled logits).
                Cohere = COHERE_ROW,
                /// `Cohere2ForCausalLM` (Command R7B: Cohere's layer, sliding layers that alone
                /// rotate).
                Cohere2 = COHERE2_ROW,
            }
            mod olmo {
                /// `OlmoForCausalLM` (OLMo 1: Llama's layer with LayerNorms without gain or bias,
                /// q/k/v clamped).
                Olmo = ROW,
            }
            mod mixtral {
                /// `MixtralForCausalLM` (Mistral's attention with a sparse mixture of SwiGLU
                /// experts).
                Mixtral = ROW,
            }
            mod qwen3_moe {
                /// `Qwen3MoeForCausalLM` (Qwen3's attention with a sparse mixture of SwiGLU
                /// experts).
                Qwen3Moe = ROW,
            }
            mod olmoe {
                /// `OlmoeForCausalLM` (q/k norms across the heads, a sparse mixture of SwiGLU
                /// experts).
                Olmoe = ROW,
            }
            mod qwen2_moe {
                /// `Qwen2MoeForCausalLM` (Qwen2's attention, routed experts beside a gated shared
                /// one).
                Qwen2Moe = ROW,
            }
            mod starcoder2 {
                /// `Starcoder2ForCausalLM` (StarCoder2: Llama's attention with biases, LayerNorms,
                /// a tanh GELU MLP without a gate, a sliding window).
                Starcoder2 = ROW,
            }
            mod gptj {
                /// `GPTJForCausalLM` (GPT-J: a parallel layer on one LayerNorm, interleaved partial
                /// rotary, an ungated MLP with biases, the LM head's bias).
                Gptj = ROW,
            }
            mod nemotron {
                /// `NemotronForCausalLM` (Nemotron, Minitron: Llama's attention with `1 + w`
                /// LayerNorms, partial rotary, a squared-ReLU MLP without a gate).
                Nemotron = ROW,
            }
            mod gpt2 {
                /// `GPT2LMHeadModel` (GPT-2: learned positions, LayerNorms, biases everywhere, a
                /// GELU MLP without a gate, `Conv1D` weights stored transposed, q/k/v stacked part
                /// by part).
                Gpt2 = ROW,
            }
            mod arcee {
                /// `ArceeForCausalLM` (AFM-4.5B: Llama's layer with a squared-ReLU MLP without a
                /// gate).
                Arcee = ROW,
            }
            mod exaone4 {
                /// `Exaone4ForCausalLM` (EXAONE 4.0: output norms alone, per-head q/k norms, local
                /// layers that alone rotate).
                Exaone4 = ROW,
            }
            mod gpt_neo {
                /// `GPTNeoForCausalLM` (GPT-Neo: GPT-2's layer with unscaled scores and alternating
                /// global and local layers).
                GptNeo = ROW,
            }
            mod ernie4_5 {
                /// `Ernie4_5ForCausalLM` (ERNIE 4.5: Llama's layer with interleaved RoPE and biases
                /// from `use_bias`).
                Ernie4_5 = ROW,
            }
            mod gpt_bigcode {
                /// `GPTBigCodeForCausalLM` (StarCoder 1, SantaCoder: GPT-2's layer with multi-query
                /// attention and plain linears).
                GptBigCode = ROW,
            }
            mod gpt_oss {
                /// `GptOssForCausalLM` (gpt-oss-20b, gpt-oss-120b: attention with biases and sinks,
                /// alternating sliding and full layers, experts with biases and a clamped GLU
                /// stacked in 3-D tensors).
                GptOss = ROW,
            }
            mod glm4_moe {
                /// `Glm4MoeForCausalLM` (GLM-4.5, GLM-4.5-Air, GLM-4.6: partial rotary,
                /// sigmoid-routed experts in groups beside an ungated shared one, the first layers
                /// dense).
                Glm4Moe = ROW,
            }
            mod deepseek {
                /// `DeepseekV2ForCausalLM` (DeepSeek-V2, V2-Lite, V2.5: latent attention,
                /// softmax-routed experts beside an ungated shared one).
                DeepseekV2 = DEEPSEEK_V2_ROW,
                /// `DeepseekV3ForCausalLM` (DeepSeek-V3, R1: latent attention, sigmoid-routed
                /// experts in groups).
                DeepseekV3 = DEEPSEEK_V3_ROW,
            }
            mod llama4 {
                /// `Llama4ForCausalLM` (Llama 4 Scout and Maverick's language model: chunked
                /// attention, NoPE layers, sigmoid-routed experts scaling their inputs, stacked in
                /// 3-D tensors).
                Llama4 = ROW,
            }
        }
    };
}
pub(crate) use families;

/// Makes [`Architecture`] and [`Architecture::ALL`] of the list.
macro_rules! architecture_enum {
    ($(mod $module:ident { $($(#[$doc:meta])* $variant:ident = $row:ident,)+ })*) => {
        /// The decoder family a checkpoint belongs to: the serialisable name of a family.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Architecture {
            $($($(#[$doc])* $variant,)+)*
        }

        impl Architecture {
            /// Every family this tool runs, in the list's order.
            pub const ALL: &'static [Architecture] = &[$($(Architecture::$variant,)+)*];
        }
    };
}

families!(architecture_enum);
