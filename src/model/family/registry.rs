//! The one match from a family's name ([`Architecture`]) to the family that runs it, and the
//! lookups by Hugging Face class, `model_type` and GGUF architecture.

use crate::model::arch::Architecture;

use super::*;

impl Architecture {
    /// The family's adapter.
    pub fn family(self) -> &'static dyn Family {
        match self {
            Architecture::Llama => &llama::Llama,
            Architecture::Mistral => &mistral::Mistral,
            Architecture::Ministral => &ministral::Ministral,
            Architecture::Qwen2 => &qwen2::Qwen2,
            Architecture::Qwen3 => &qwen3::Qwen3,
            Architecture::Phi3 => &phi3::Phi3,
            Architecture::Gemma2 => &gemma2::Gemma2,
            Architecture::Gemma3 => &gemma3::Gemma3,
            Architecture::Opt => &opt::Opt,
            Architecture::GptNeox => &gpt_neox::GptNeox,
            Architecture::Bloom => &bloom::Bloom,
            Architecture::Falcon => &falcon::Falcon,
            Architecture::Gemma => &gemma::Gemma,
            Architecture::Phi => &phi::Phi,
            Architecture::StableLm => &stablelm::StableLm,
            Architecture::Olmo2 => &olmo2::Olmo2,
            Architecture::Olmo3 => &olmo3::Olmo3,
            Architecture::SmolLm3 => &smollm3::SmolLm3,
            Architecture::Granite => &granite::Granite,
            Architecture::GraniteMoe => &granitemoe::GRANITE_MOE,
            Architecture::GraniteMoeShared => &granitemoe::GRANITE_MOE_SHARED,
            Architecture::GraniteMoeHybrid => &granitemoe::GRANITE_MOE_HYBRID,
            Architecture::Glm => &glm::GLM,
            Architecture::Glm4 => &glm::GLM4,
            Architecture::Cohere => &cohere::COHERE,
            Architecture::Cohere2 => &cohere::COHERE2,
            Architecture::Olmo => &olmo::Olmo,
            Architecture::Mixtral => &mixtral::Mixtral,
            Architecture::Qwen3Moe => &qwen3_moe::Qwen3Moe,
            Architecture::Olmoe => &olmoe::Olmoe,
            Architecture::Qwen2Moe => &qwen2_moe::Qwen2Moe,
            Architecture::Glm4Moe => &glm4_moe::Glm4Moe,
            Architecture::DeepseekV2 => &deepseek::DEEPSEEK_V2,
            Architecture::DeepseekV3 => &deepseek::DEEPSEEK_V3,
            Architecture::Llama4 => &llama4::Llama4,
            Architecture::Starcoder2 => &starcoder2::Starcoder2,
            Architecture::Gptj => &gptj::Gptj,
            Architecture::Nemotron => &nemotron::Nemotron,
            Architecture::Gpt2 => &gpt2::Gpt2,
            Architecture::GptBigCode => &gpt_bigcode::GptBigCode,
            Architecture::GptOss => &gpt_oss::GptOss,
            Architecture::Arcee => &arcee::Arcee,
            Architecture::Exaone4 => &exaone4::Exaone4,
            Architecture::GptNeo => &gpt_neo::GptNeo,
            Architecture::Ernie4_5 => &ernie4_5::Ernie4_5,
        }
    }

    /// The Hugging Face class name, as written in `config.json` `architectures`.
    pub fn hf_class(self) -> &'static str {
        self.family().hf_class()
    }

    /// The Hugging Face `model_type`.
    pub fn model_type(self) -> &'static str {
        self.family().model_type()
    }

    /// The family a `config.json` names, by class name or `model_type`.
    pub fn from_hf_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| {
            let family = a.family();
            family.hf_class() == name || family.model_type() == name
        })
    }

    /// The family of a GGUF file's `general.architecture`.
    pub fn from_gguf_arch(arch: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.family().gguf_arch() == Some(arch))
    }

    /// The class names this tool runs, for error messages.
    pub fn supported_hf_classes() -> String {
        Self::ALL.map(Architecture::hf_class).join(", ")
    }

    /// The GGUF architectures this tool reads, for error messages.
    pub fn supported_gguf_archs() -> String {
        let archs: Vec<&str> = Self::ALL
            .iter()
            .filter_map(|a| a.family().gguf_arch())
            .collect();
        archs.join(", ")
    }
}
