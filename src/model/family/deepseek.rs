//! DeepSeek-V2 (`DeepseekV2ForCausalLM`: DeepSeek-V2, V2-Lite, V2.5, DeepSeek-Coder-V2) and
//! DeepSeek-V3 (`DeepseekV3ForCausalLM`: DeepSeek-V3, R1), as transformers runs them:
//! - multi-head latent attention ([`crate::model::decoder`]) from `q_lora_rank`
//!   (null: queries projected directly), `kv_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim`
//!   and `v_head_dim`, biases on `q_a_proj`, `kv_a_proj_with_mqa` and `o_proj` where
//!   `attention_bias` says; rotated dimensions paired as neighbours (V2's complex rotation, V3's
//!   `rope_interleave`, default true); the softmax scaled by YaRN's `mscale_all_dim` factor
//!   squared;
//! - from layer `first_k_dense_replace` on, `n_routed_experts` SwiGLU experts of
//!   `moe_intermediate_size` beside an ungated shared expert `n_shared_experts` times as wide
//!   (`mlp.shared_experts`); before it, dense SwiGLU MLPs of `intermediate_size`;
//! - V2 routes by the softmax ([`crate::model::arch::LimitedSoftmax`]: `greedy`, or
//!   `group_limited_greedy` within the best `topk_group` of `n_group` groups), never
//!   renormalised, times `routed_scaling_factor`; V3 as GLM-4.5 does
//!   ([`crate::model::arch::SigmoidRouting`], with `mlp.gate.e_score_correction_bias`).
//!
//! V3's multi-token-prediction layer (`model.layers.<num_hidden_layers>`) is not part of the
//! decoder, as in transformers; a saved copy has none and says so.

use std::collections::BTreeMap;

use super::{AttentionBiases, ClassDefaults, Family, FamilyRow};
use crate::model::arch::LatentAttention;
use crate::model::arch::{
    invalid, positive_number, yarn_mscale, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig,
};
use crate::model::arch::{Experts, LimitedSoftmax, SigmoidRouting};

/// A DeepSeek config class: its names and what differs between the two classes' class.
pub struct Deepseek {
    /// The router and rotation of this version.
    version: Version,
    /// The family's name in errors.
    name: &'static str,
    /// `q_lora_rank` where the key is absent.
    q_lora_rank: usize,
    /// The config class's defaults of the keys they name.
    intermediate_size: usize,
    moe_intermediate_size: usize,
    n_routed_experts: usize,
    n_shared_experts: usize,
    first_k_dense_replace: usize,
    routed_scaling_factor: f64,
    /// `num_experts_per_tok`, where the class has a default (V2's has none: its router needs
    /// the key).
    num_experts_per_tok: Option<usize>,
}

/// Which of DeepSeek's classes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Version {
    /// Softmax routing, the rotation always by neighbours.
    V2,
    /// Sigmoid routing, the rotation as `rope_interleave` says.
    V3,
}

/// `DeepseekV2ForCausalLM`.
pub const DEEPSEEK_V2: Deepseek = Deepseek {
    version: Version::V2,
    name: "DeepSeek-V2",
    q_lora_rank: 1536,
    intermediate_size: 11008,
    moe_intermediate_size: 1407,
    n_routed_experts: 64,
    n_shared_experts: 2,
    first_k_dense_replace: 0,
    routed_scaling_factor: 1.0,
    num_experts_per_tok: None,
};

/// `DeepseekV3ForCausalLM`.
pub const DEEPSEEK_V3: Deepseek = Deepseek {
    version: Version::V3,
    name: "DeepSeek-V3",
    q_lora_rank: 1536,
    intermediate_size: 18432,
    moe_intermediate_size: 2048,
    n_routed_experts: 256,
    n_shared_experts: 1,
    first_k_dense_replace: 3,
    routed_scaling_factor: 2.5,
    num_experts_per_tok: Some(8),
};

/// The decoder's name of the shared expert and the checkpoint's.
const SHARED: (&str, &str) = (".mlp.shared_expert.", ".mlp.shared_experts.");

/// The latent attention a config describes, its rotation paired as neighbours where
/// `interleaved`; each width must be positive and the rotated one even.
fn latent_attention(
    hf: &HfLlamaConfig,
    class: &Deepseek,
    interleaved: bool,
) -> Result<LatentAttention, ConfigError> {
    let width = |key: &str, value: Option<usize>, default: usize| match value.unwrap_or(default) {
        0 => Err(invalid(key, "must be at least 1".into())),
        w => Ok(w),
    };
    let q_lora_rank = match hf.latent.q_lora_rank {
        None => Some(class.q_lora_rank),
        Some(rank) => rank.map(|r| width("q_lora_rank", Some(r), 0)).transpose()?,
    };
    let qk_rope_head_dim = width("qk_rope_head_dim", hf.latent.qk_rope_head_dim, 64)?;
    if !qk_rope_head_dim.is_multiple_of(2) {
        return Err(invalid(
            "qk_rope_head_dim",
            format!("is {qk_rope_head_dim}; the rotated dimensions pair up, so it must be even"),
        ));
    }
    let mut latent = LatentAttention {
        q_lora_rank,
        kv_lora_rank: width("kv_lora_rank", hf.latent.kv_lora_rank, 512)?,
        qk_nope_head_dim: width("qk_nope_head_dim", hf.latent.qk_nope_head_dim, 128)?,
        qk_rope_head_dim,
        v_head_dim: width("v_head_dim", hf.latent.v_head_dim, 128)?,
        mscale_all_dim: None,
        scale: None,
        interleaved,
    };
    // transformers' `yarn_apply_mscale`: under any scaled RoPE with a non-zero
    // `mscale_all_dim`, the softmax factor times `(0.1 · mscale_all_dim · ln factor + 1)²`.
    if let Some(rope) = hf.given_rope_scaling() {
        let kind = rope.type_name();
        let all_dim = rope.mscale_all_dim.filter(|m| *m != 0.0);
        if let (Some(all_dim), Some(kind)) = (all_dim, kind.filter(|k| *k != "default")) {
            let factor = rope.factor.ok_or_else(|| {
                invalid(
                    "rope_scaling.factor",
                    format!("is missing; the `{kind}` scaling needs it"),
                )
            })?;
            let mscale = yarn_mscale(factor, all_dim);
            latent.mscale_all_dim = Some(all_dim);
            latent.scale = Some((latent.qk_head_dim() as f64).powf(-0.5) * mscale * mscale);
        }
    }
    Ok(latent)
}

/// The experts of a DeepSeek config, routed as `sigmoid` or `limited` says, with `class`'s
/// defaults where keys are absent; refuses counts transformers cannot route.
fn experts(
    hf: &HfLlamaConfig,
    class: &Deepseek,
    sigmoid: Option<SigmoidRouting>,
    limited: Option<LimitedSoftmax>,
    normalize: bool,
) -> Result<Experts, ConfigError> {
    let width = hf
        .experts
        .moe_intermediate_size
        .unwrap_or(class.moe_intermediate_size);
    let (shared, first_dense_layers) = super::shared_and_dense_layers(
        hf,
        class.name,
        (class.n_shared_experts, class.first_k_dense_replace),
    )?;
    let per_token = hf
        .experts
        .num_experts_per_tok
        .or(class.num_experts_per_tok)
        .ok_or_else(|| {
            invalid(
                "num_experts_per_tok",
                "is missing; transformers' router needs it".into(),
            )
        })?;
    let experts = super::checked_experts(
        Experts {
            normalize,
            // The routers' weights stay in f32 and multiply the experts' outputs so.
            round_weights: false,
            shared: Some(shared * width),
            shared_ungated: true,
            sigmoid,
            first_dense_layers,
            limited_softmax: limited,
            ..Experts::softmax(
                hf.experts
                    .n_routed_experts
                    .unwrap_or(class.n_routed_experts),
                per_token,
                width,
            )
        },
        "n_routed_experts",
    )?;
    if let Some(r) = sigmoid {
        super::check_groups(&experts, r.groups, r.groups_per_token, 2)?;
    }
    if let Some(r) = limited {
        super::check_groups(&experts, r.groups, r.groups_per_token, 1)?;
    }
    Ok(experts)
}

/// `routed_scaling_factor`, positive, or `class`'s default.
fn routing_scale(hf: &HfLlamaConfig, class: &Deepseek) -> Result<f64, ConfigError> {
    positive_number(
        "routed_scaling_factor",
        hf.experts
            .routed_scaling_factor
            .unwrap_or(class.routed_scaling_factor),
    )
}

/// The checks and keys both config classes share: SwiGLU, a key and value per head (the
/// latent expands into every head's), and `scoring_func`, where given, the class's own.
fn check_common(hf: &HfLlamaConfig, name: &str, scoring: &str) -> Result<(), ConfigError> {
    super::refuse_all_but_silu(hf, name)?;
    super::refuse_grouped_heads(hf, name)?;
    if hf.mlp_bias == Some(true) {
        return Err(invalid(
            "mlp_bias",
            format!("is true; {name}'s experts carry no biases, so this tool runs it only false"),
        ));
    }
    match hf.experts.scoring_func.as_deref() {
        None => Ok(()),
        Some(s) if s == scoring => Ok(()),
        Some(other) => Err(invalid(
            "scoring_func",
            format!("is `{other}`; {name}'s router in transformers scores by `{scoring}`"),
        )),
    }
}

/// The `config.json` keys of a saved copy that both classes share.
fn common_hf_keys(config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
    let mut keys = super::expert_hf_keys(config, "n_routed_experts");
    if let Some(experts) = config.extras.experts {
        keys.extend([
            ("moe_intermediate_size", experts.width.into()),
            (
                "n_shared_experts",
                (experts.shared.unwrap_or(0) / experts.width.max(1)).into(),
            ),
            ("first_k_dense_replace", experts.first_dense_layers.into()),
        ]);
    }
    if let Some(latent) = config.extras.latent_attention {
        keys.extend([
            ("q_lora_rank", latent.q_lora_rank.into()),
            ("kv_lora_rank", latent.kv_lora_rank.into()),
            ("qk_nope_head_dim", latent.qk_nope_head_dim.into()),
            ("qk_rope_head_dim", latent.qk_rope_head_dim.into()),
            ("v_head_dim", latent.v_head_dim.into()),
            // transformers' own: the rotated width (it sets it so itself).
            ("head_dim", latent.qk_rope_head_dim.into()),
        ]);
        let mut rope = config.rope_scaling_json();
        if let (Some(map), Some(all_dim)) = (rope.as_object_mut(), latent.mscale_all_dim) {
            map.insert("mscale_all_dim".into(), all_dim.into());
        }
        keys.insert("rope_scaling", rope);
    }
    keys.insert("attention_bias", config.qkv_bias.into());
    keys
}

impl Deepseek {
    /// V2's router ([`LimitedSoftmax`]): `greedy` or `group_limited_greedy`.
    fn limited_softmax(&self, hf: &HfLlamaConfig) -> Result<LimitedSoftmax, ConfigError> {
        let scale = routing_scale(hf, self)?;
        match hf.experts.topk_method.as_deref().unwrap_or("greedy") {
            "greedy" => Ok(LimitedSoftmax {
                groups: 1,
                groups_per_token: 1,
                scale,
            }),
            "group_limited_greedy" => Ok(LimitedSoftmax {
                groups: group_key(hf.experts.n_group, "n_group")?,
                groups_per_token: group_key(hf.experts.topk_group, "topk_group")?,
                scale,
            }),
            other => Err(invalid(
                "topk_method",
                format!("is `{other}`; DeepSeek-V2 routes by `greedy` or `group_limited_greedy`"),
            )),
        }
    }
}

/// `DeepseekV2ForCausalLM`'s row.
pub const DEEPSEEK_V2_ROW: FamilyRow =
    FamilyRow::new("DeepseekV2ForCausalLM", "deepseek_v2", &DEEPSEEK_V2);

/// `DeepseekV3ForCausalLM`'s row.
pub const DEEPSEEK_V3_ROW: FamilyRow = FamilyRow {
    class_defaults: ClassDefaults {
        key_value_heads: Some(128),
        head_dim: None,
        max_positions: 4096,
    },
    ..FamilyRow::new("DeepseekV3ForCausalLM", "deepseek_v3", &DEEPSEEK_V3)
};

impl Family for Deepseek {
    /// `attention_bias` (default false) on `q_a_proj`, `kv_a_proj_with_mqa` and `o_proj`.
    fn attention_biases(&self, hf: &HfLlamaConfig) -> AttentionBiases {
        let bias = hf.attention_bias.unwrap_or(false);
        AttentionBiases { qkv: bias, o: bias }
    }

    /// `qk_nope_head_dim + qk_rope_head_dim` (defaults 128 and 64): transformers' `head_dim`
    /// is the rotated part alone.
    fn head_dim(&self, hf: &HfLlamaConfig) -> Option<usize> {
        Some(hf.latent.qk_nope_head_dim.unwrap_or(128) + hf.latent.qk_rope_head_dim.unwrap_or(64))
    }

    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.intermediate_size.or(Some(self.intermediate_size))
    }

    fn checkpoint_name(&self, _config: &LlamaConfig, name: &str) -> Option<String> {
        name.contains(SHARED.0)
            .then(|| name.replacen(SHARED.0, SHARED.1, 1))
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let (experts, interleaved) = match self.version {
            Version::V2 => {
                check_common(hf, self.name, "softmax")?;
                // transformers' V2 router never renormalises, whatever `norm_topk_prob` says.
                let limited = self.limited_softmax(hf)?;
                (experts(hf, self, None, Some(limited), false)?, true)
            }
            Version::V3 => {
                check_common(hf, self.name, "sigmoid")?;
                let routing = SigmoidRouting {
                    groups: hf.experts.n_group.unwrap_or(8),
                    groups_per_token: hf.experts.topk_group.unwrap_or(4),
                    scale: routing_scale(hf, self)?,
                    uncorrected: false,
                };
                let normalize = hf.experts.norm_topk_prob.unwrap_or(true);
                let experts = experts(hf, self, Some(routing), None, normalize)?;
                (experts, hf.latent.rope_interleave.unwrap_or(true))
            }
        };
        let latent = latent_attention(hf, self, interleaved)?;
        Ok(DecoderExtras {
            experts: Some(experts),
            rotary_dim: Some(latent.qk_rope_head_dim),
            latent_attention: Some(latent),
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = common_hf_keys(config);
        let experts = config.extras.experts;
        if let Some(limited) = experts.and_then(|e| e.limited_softmax) {
            let method = match limited.groups {
                1 => "greedy",
                _ => "group_limited_greedy",
            };
            keys.extend([
                ("topk_method", method.into()),
                ("n_group", limited.groups.into()),
                ("topk_group", limited.groups_per_token.into()),
                ("routed_scaling_factor", limited.scale.into()),
            ]);
        }
        if let Some(routing) = experts.and_then(|e| e.sigmoid) {
            keys.extend([
                ("n_group", routing.groups.into()),
                ("topk_group", routing.groups_per_token.into()),
                ("routed_scaling_factor", routing.scale.into()),
            ]);
        }
        if self.version == Version::V3 {
            let interleaved = config.extras.latent_attention.is_none_or(|l| l.interleaved);
            keys.extend([
                ("rope_interleave", interleaved.into()),
                // A saved copy holds no multi-token-prediction layer.
                ("num_nextn_predict_layers", 0.into()),
            ]);
        }
        keys
    }
}

/// A group count `group_limited_greedy` needs (`key`): present.
fn group_key(value: Option<usize>, key: &str) -> Result<usize, ConfigError> {
    value.ok_or_else(|| {
        invalid(
            key,
            "is missing; `group_limited_greedy` routing needs n_group and topk_group".into(),
        )
    })
}

#[cfg(test)]
mod tests;
