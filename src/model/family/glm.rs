//! GLM (`GlmForCausalLM`, model type `glm`: THUDM's GLM-4-9B-chat-hf) and GLM-4
//! (`Glm4ForCausalLM`, model type `glm4`: the GLM-4-0414 9B and 32B models): Llama's layer with
//! - interleaved RoPE on the first half of each head (`partial_rotary_factor`, default 0.5):
//!   dimensions `(2i, 2i + 1)` turn together ([`crate::model::arch::rope::apply_interleaved`]);
//! - biases on the q, k and v projections (`attention_bias`, default true), never on `o_proj`;
//! - the MLP's gate and up projections stacked in `mlp.gate_up_proj` (gate rows first), held
//!   apart and pruned as the one matrix, as Phi-3's;
//! - GLM-4 only: RMSNorms on the attention and MLP outputs before each residual add
//!   (`post_self_attn_layernorm`, `post_mlp_layernorm`; its `post_attention_layernorm` is the
//!   MLP's input norm), the decoder's sandwich norms under GLM-4's names.
//!
//! `GlmConfig` and `Glm4Config` default `head_dim` to 128 and the kv heads to 2 whatever the
//! widths, and so do these (a checkpoint of other widths is then refused by its shapes, as
//! transformers refuses it).

use std::collections::BTreeMap;

use super::{AttentionBiases, ClassDefaults, Family, FamilyRow, GgufMetadata};
use crate::model::arch::FusedLinear;
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// GLM's layer: `GlmForCausalLM`, or with output norms `Glm4ForCausalLM`.
pub struct Glm {
    /// RMSNorms on the attention and MLP outputs under GLM-4's names.
    output_norms: bool,
}

/// `GlmForCausalLM`.
pub const GLM: Glm = Glm {
    output_norms: false,
};

/// `Glm4ForCausalLM`.
pub const GLM4: Glm = Glm { output_norms: true };

/// transformers' head width when a GLM config names none.
const DEFAULT_HEAD_DIM: usize = 128;

/// GLM-4's names of the sandwich norms (ours, theirs).
const GLM4_NORMS: [(&str, &str); 3] = [
    ("post_attention_layernorm", "post_self_attn_layernorm"),
    ("pre_feedforward_layernorm", "post_attention_layernorm"),
    ("post_feedforward_layernorm", "post_mlp_layernorm"),
];

/// The stacked gate and up projections of both classes.
const GATE_UP: [FusedLinear; 1] = [FusedLinear {
    fused: "mlp.gate_up_proj",
    parts: &["mlp.gate_proj", "mlp.up_proj"],
    per_kv_head: false,
}];

/// `GlmForCausalLM`'s row.
pub const GLM_ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(2),
        head_dim: Some(DEFAULT_HEAD_DIM),
        max_positions: 131_072,
    },
    fused_linears: &GATE_UP,
    ..FamilyRow::new("GlmForCausalLM", "glm", &GLM)
};

/// `Glm4ForCausalLM`'s row: GGUF files of llama.cpp's `glm4` (GLM-4-0414) load; the older GLM's
/// (`chatglm`) do not.
pub const GLM4_ROW: FamilyRow = FamilyRow {
    hf_class: "Glm4ForCausalLM",
    model_type: "glm4",
    gguf_arch: Some("glm4"),
    hooks: &GLM4,
    ..GLM_ROW
};

impl Family for Glm {
    /// llama.cpp writes the rotated dimensions of the heads, not their width.
    fn read_gguf(&self, meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        hf.partial_rotary_factor = super::gguf_metadata::rotated_share(meta, hf);
    }

    /// q/k/v biases from `attention_bias` (default true), none on `o_proj`.
    fn attention_biases(&self, hf: &HfLlamaConfig) -> AttentionBiases {
        AttentionBiases {
            qkv: hf.attention_bias.unwrap_or(true),
            o: false,
        }
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1.5625e-7)
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        if !self.output_norms {
            return None;
        }
        let (index, rest) = name.strip_prefix("model.layers.")?.split_once('.')?;
        let (module, kind) = rest.rsplit_once('.')?;
        let (_, theirs) = GLM4_NORMS.iter().find(|(ours, _)| *ours == module)?;
        Some(format!("model.layers.{index}.{theirs}.{kind}"))
    }

    /// SwiGLU, interleaved partial rotary, and GLM-4's output norms.
    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let family = if self.output_norms { "GLM-4" } else { "GLM" };
        super::refuse_all_but_silu(hf, family)?;
        Ok(DecoderExtras {
            rotary_dim: super::partial_rotary(
                &GLM_ROW,
                hf,
                hf.partial_rotary_factor,
                "partial_rotary_factor",
                0.5,
            )?,
            interleaved_rotary: true,
            sandwich_norms: self.output_norms,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([
            ("partial_rotary_factor", config.rotary_factor().into()),
            ("attention_bias", config.qkv_bias.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::ModelShape;

    /// A config of GLM-4-9B-0414's shape.
    const GLM4_9B: &str = r#"{"architectures":["Glm4ForCausalLM"],"attention_bias":true,
        "attention_dropout":0.0,"eos_token_id":[151329,151336,151338],"head_dim":128,
        "hidden_act":"silu","hidden_size":4096,"initializer_range":0.02,
        "intermediate_size":13696,"max_position_embeddings":32768,"model_type":"glm4",
        "num_attention_heads":32,"num_hidden_layers":40,"num_key_value_heads":2,
        "pad_token_id":151329,"partial_rotary_factor":0.5,"rms_norm_eps":1e-05,
        "rope_theta":10000.0,"tie_word_embeddings":false,"torch_dtype":"bfloat16",
        "vocab_size":151552}"#;

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    #[test]
    fn glm4_has_interleaved_half_rotation_qkv_biases_and_sandwich_norms() {
        let c = resolve(GLM4_9B).unwrap();
        assert_eq!(c.architecture, Architecture::Glm4);
        assert!(c.extras.interleaved_rotary && c.extras.sandwich_norms);
        assert_eq!(c.rotary_dim(), 64);
        assert!(c.qkv_bias && !c.o_bias);
        // 2 × 620.8 M embeddings and head + 40 × 214.0 M: GLM-4-9B's 9.40 B.
        assert_eq!(ModelShape::from_config(&c).parameters, 9_400_279_040);
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
        let glm = resolve(
            &GLM4_9B
                .replace("Glm4ForCausalLM", "GlmForCausalLM")
                .replace("\"glm4\"", "\"glm\""),
        )
        .unwrap();
        assert!(glm.extras.interleaved_rotary && !glm.extras.sandwich_norms);
    }

    #[test]
    fn glm4_names_its_sandwich_norms_its_own_way() {
        let c = resolve(GLM4_9B).unwrap();
        let name = |ours: &str| GLM4.checkpoint_name(&c, ours);
        assert_eq!(
            name("model.layers.3.post_attention_layernorm.weight").as_deref(),
            Some("model.layers.3.post_self_attn_layernorm.weight")
        );
        assert_eq!(
            name("model.layers.3.pre_feedforward_layernorm.weight").as_deref(),
            Some("model.layers.3.post_attention_layernorm.weight")
        );
        assert_eq!(
            name("model.layers.0.post_feedforward_layernorm.weight").as_deref(),
            Some("model.layers.0.post_mlp_layernorm.weight")
        );
        assert_eq!(name("model.layers.0.input_layernorm.weight"), None);
        assert_eq!(name("model.layers.0.self_attn.q_proj.bias"), None);
    }

    #[test]
    fn glms_class_defaults_are_read_whatever_the_widths() {
        let without = GLM4_9B
            .replace("\"head_dim\":128,", "")
            .replace("\"num_key_value_heads\":2,", "")
            .replace("\"attention_bias\":true,", "")
            .replace("\"partial_rotary_factor\":0.5,", "");
        // 4096 / 32 = 128: the class default agrees.
        let c = resolve(&without).unwrap();
        assert_eq!(
            (c.head_dim, c.num_key_value_heads, c.rotary_dim()),
            (128, 2, 64)
        );
        assert!(c.qkv_bias);
        // 4096 / 64 = 64, but the class's 128 it is, and the rotated half of it.
        let c =
            resolve(&without.replace("\"num_attention_heads\":32", "\"num_attention_heads\":64"))
                .unwrap();
        assert_eq!((c.head_dim, c.rotary_dim()), (128, 64));
    }
}
