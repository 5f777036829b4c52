//! The decoder families by name: [`Architecture`], serialised in resolved configs and run
//! records; [`crate::model::family`] maps each to the family that runs it.

use serde::{Deserialize, Serialize};

/// The decoder family a checkpoint belongs to: the serialisable name of a [`Family`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Architecture {
    /// `LlamaForCausalLM` (Llama 1/2/3, SmolLM, TinyLlama, …).
    Llama,
    /// `MistralForCausalLM`.
    Mistral,
    /// `MinistralForCausalLM` (Ministral-8B: Mistral's config, the window on the sliding
    /// layers of `layer_types` only).
    Ministral,
    /// `Qwen2ForCausalLM` (q/k/v projections carry a bias).
    Qwen2,
    /// `Qwen3ForCausalLM` (per-head q/k RMSNorm).
    Qwen3,
    /// `Phi3ForCausalLM` (stacked `qkv_proj` and `gate_up_proj`).
    Phi3,
    /// `Gemma2ForCausalLM` (Gemma 3's layer without q/k norms, with soft-capped attention
    /// scores and logits).
    Gemma2,
    /// `Gemma3ForCausalLM` (Gemma 3's text decoder: four `1 + w` norms per layer, GELU,
    /// scaled embeddings, interleaved local and global attention).
    Gemma3,
    /// `OPTForCausalLM` (LayerNorms, biases everywhere, a ReLU MLP without a gate, learned
    /// positions).
    Opt,
    /// `GPTNeoXForCausalLM` (Pythia, GPT-NeoX-20B: parallel residual, partial rotary, a
    /// GELU MLP without a gate, q/k/v stacked head by head).
    GptNeox,
    /// `BloomForCausalLM` (ALiBi instead of positions, a LayerNorm of the embeddings,
    /// LayerNorms, biases everywhere, a GELU MLP without a gate, q/k/v stacked head by head).
    Bloom,
    /// `FalconForCausalLM` (Falcon-7B's multi-query parallel layer with one norm, the new
    /// architecture's grouped heads and two norms, q/k/v stacked by kv head).
    Falcon,
    /// `GemmaForCausalLM` (Gemma 1: Llama's layer with `1 + w` norms, GeGLU, scaled
    /// embeddings, a tied head).
    Gemma,
    /// `PhiForCausalLM` (phi-1, phi-1.5, Phi-2: a parallel layer on one LayerNorm, partial
    /// rotary, biases everywhere, the LM head's too).
    Phi,
    /// `StableLmForCausalLM` (StableLM-3B-4E1T, StableLM 2: Llama's layer with LayerNorms,
    /// partial rotary, q/k/v biases, optionally parallel on one norm).
    StableLm,
    /// `Olmo2ForCausalLM` (OLMo 2: Llama's layer with output norms instead of pre-norms and
    /// q/k norms across the heads).
    Olmo2,
    /// `Olmo3ForCausalLM` (OLMo 3: OLMo 2's layer with sliding-window attention on three
    /// layers of four and RoPE per layer type).
    Olmo3,
    /// `SmolLM3ForCausalLM` (SmolLM3: Llama's layer with NoPE layers, a tied head).
    SmolLm3,
    /// `GraniteForCausalLM` (Granite 3.x: Llama's layer with factors of the embeddings, the
    /// residual adds, the attention scores and the logits).
    Granite,
    /// `GraniteMoeForCausalLM` (Granite 3.x MoE: Granite's layer with routed experts stacked
    /// in 3-D tensors).
    GraniteMoe,
    /// `GraniteMoeSharedForCausalLM` (Granite MoE with a shared MLP beside the experts).
    GraniteMoeShared,
    /// `GraniteMoeHybridForCausalLM` (Granite 4.0 whose layers are all attention layers: a
    /// shared MLP, with or without experts, RoPE or none).
    GraniteMoeHybrid,
    /// `GlmForCausalLM` (GLM-4-9B-chat-hf: Llama's layer with interleaved half rotation,
    /// q/k/v biases, stacked gate and up projections).
    Glm,
    /// `Glm4ForCausalLM` (GLM-4-0414: GLM's layer with output norms).
    Glm4,
    /// `CohereForCausalLM` (Command R, Aya: a parallel layer on one bias-free LayerNorm,
    /// interleaved RoPE, scaled logits).
    Cohere,
    /// `Cohere2ForCausalLM` (Command R7B: Cohere's layer, sliding layers that alone rotate).
    Cohere2,
    /// `OlmoForCausalLM` (OLMo 1: Llama's layer with LayerNorms without gain or bias, q/k/v
    /// clamped).
    Olmo,
    /// `MixtralForCausalLM` (Mistral's attention with a sparse mixture of SwiGLU experts).
    Mixtral,
    /// `Qwen3MoeForCausalLM` (Qwen3's attention with a sparse mixture of SwiGLU experts).
    Qwen3Moe,
    /// `OlmoeForCausalLM` (q/k norms across the heads, a sparse mixture of SwiGLU experts).
    Olmoe,
    /// `Qwen2MoeForCausalLM` (Qwen2's attention, routed experts beside a gated shared one).
    Qwen2Moe,
    /// `Starcoder2ForCausalLM` (StarCoder2: Llama's attention with biases, LayerNorms, a tanh
    /// GELU MLP without a gate, a sliding window).
    Starcoder2,
    /// `GPTJForCausalLM` (GPT-J: a parallel layer on one LayerNorm, interleaved partial
    /// rotary, an ungated MLP with biases, the LM head's bias).
    Gptj,
    /// `NemotronForCausalLM` (Nemotron, Minitron: Llama's attention with `1 + w` LayerNorms,
    /// partial rotary, a squared-ReLU MLP without a gate).
    Nemotron,
    /// `GPT2LMHeadModel` (GPT-2: learned positions, LayerNorms, biases everywhere, a GELU MLP
    /// without a gate, `Conv1D` weights stored transposed, q/k/v stacked part by part).
    Gpt2,
    /// `ArceeForCausalLM` (AFM-4.5B: Llama's layer with a squared-ReLU MLP without a gate).
    Arcee,
    /// `Exaone4ForCausalLM` (EXAONE 4.0: output norms alone, per-head q/k norms, local layers
    /// that alone rotate).
    Exaone4,
    /// `GPTNeoForCausalLM` (GPT-Neo: GPT-2's layer with unscaled scores and alternating
    /// global and local layers).
    GptNeo,
    /// `Ernie4_5ForCausalLM` (ERNIE 4.5: Llama's layer with interleaved RoPE and biases from
    /// `use_bias`).
    Ernie4_5,
    /// `GPTBigCodeForCausalLM` (StarCoder 1, SantaCoder: GPT-2's layer with multi-query
    /// attention and plain linears).
    GptBigCode,
    /// `GptOssForCausalLM` (gpt-oss-20b, gpt-oss-120b: attention with biases and sinks,
    /// alternating sliding and full layers, experts with biases and a clamped GLU stacked in
    /// 3-D tensors).
    GptOss,
    /// `Glm4MoeForCausalLM` (GLM-4.5, GLM-4.5-Air, GLM-4.6: partial rotary, sigmoid-routed
    /// experts in groups beside an ungated shared one, the first layers dense).
    Glm4Moe,
    /// `DeepseekV2ForCausalLM` (DeepSeek-V2, V2-Lite, V2.5: latent attention, softmax-routed
    /// experts beside an ungated shared one).
    DeepseekV2,
    /// `DeepseekV3ForCausalLM` (DeepSeek-V3, R1: latent attention, sigmoid-routed
    /// experts in groups).
    DeepseekV3,
    /// `Llama4ForCausalLM` (Llama 4 Scout and Maverick's language model: chunked attention,
    /// NoPE layers, sigmoid-routed experts scaling their inputs, stacked in 3-D tensors).
    Llama4,
}

impl Architecture {
    /// Every family this tool runs.
    pub const ALL: [Architecture; 45] = [
        Architecture::Llama,
        Architecture::Mistral,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Phi3,
        Architecture::Gemma2,
        Architecture::Gemma3,
        Architecture::Opt,
        Architecture::GptNeox,
        Architecture::Bloom,
        Architecture::Falcon,
        Architecture::Gemma,
        Architecture::Phi,
        Architecture::StableLm,
        Architecture::Olmo2,
        Architecture::Olmo3,
        Architecture::SmolLm3,
        Architecture::Granite,
        Architecture::Glm,
        Architecture::Glm4,
        Architecture::Cohere,
        Architecture::Cohere2,
        Architecture::Olmo,
        Architecture::Mixtral,
        Architecture::Qwen3Moe,
        Architecture::Olmoe,
        Architecture::Qwen2Moe,
        Architecture::Starcoder2,
        Architecture::Gptj,
        Architecture::Nemotron,
        Architecture::Gpt2,
        Architecture::GptBigCode,
        Architecture::Arcee,
        Architecture::Exaone4,
        Architecture::GptNeo,
        Architecture::Ernie4_5,
        Architecture::GptOss,
        Architecture::Glm4Moe,
        Architecture::DeepseekV2,
        Architecture::DeepseekV3,
        Architecture::Llama4,
        Architecture::GraniteMoe,
        Architecture::GraniteMoeShared,
        Architecture::GraniteMoeHybrid,
        Architecture::Ministral,
    ];
}
