//! Granite's mixtures of experts and Granite 4.0's attention-only models, as transformers 5
//! runs them: Granite's layer and four factors ([`super::granite`]) with
//! - `GraniteMoeForCausalLM` (`granitemoe`: granite-3.x-1b-a400m, -3b-a800m): in every layer
//!   `num_local_experts` SwiGLU experts of `intermediate_size`, each token sent to the
//!   `num_experts_per_tok` with the highest router logits and weighted by the softmax over
//!   those (renormalised, rounded to the model's dtype); the experts stacked `[experts, out,
//!   in]` in `block_sparse_moe.input_linear` (each expert's gate rows, then its up rows) and
//!   `block_sparse_moe.output_linear`, the router `block_sparse_moe.router.layer`;
//! - `GraniteMoeSharedForCausalLM` (`granitemoeshared`): beside them an ungated SwiGLU MLP of
//!   `shared_intermediate_size` every token goes through (`shared_mlp.input_linear`, gate and up
//!   rows stacked, and `shared_mlp.output_linear`; a width of 0: none);
//! - `GraniteMoeHybridForCausalLM` (`granitemoehybrid`: Granite 4.0) whose layers are all
//!   attention layers (`layer_types`; granite-4.0-micro, -1b, -350m): the shared MLP alone
//!   where `num_local_experts` is 0 (the decoder's dense MLP), else beside the experts; RoPE
//!   where `position_embedding_type` is `rope`, else no layer rotates. Mamba layers (the `-h-`
//!   models) are refused by name.
//!
//! Saved copies keep the class and the checkpoint's names and layout.

use std::collections::BTreeMap;

use super::{Family, FamilyRow, GgufMetadata};
use crate::model::arch::ExpertStacks;
use crate::model::arch::Experts;
use crate::model::arch::FusedLinear;
use crate::model::arch::{invalid, ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// One of Granite's MoE config classes.
pub struct GraniteMoe {
    /// The family's name in errors.
    name: &'static str,
    /// What the class's layers hold.
    kind: Kind,
}

/// What a class's layers hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Routed experts alone.
    Routed,
    /// Routed experts beside a shared MLP (`shared_intermediate_size`, default 0).
    Shared,
    /// Granite 4.0: a shared MLP (default 1024 wide), routed experts beside it where
    /// `num_local_experts` is not 0, attention or Mamba layers by `layer_types`.
    Hybrid,
}

/// `GraniteMoeForCausalLM`.
pub const GRANITE_MOE: GraniteMoe = GraniteMoe {
    name: "Granite MoE",
    kind: Kind::Routed,
};

/// `GraniteMoeSharedForCausalLM`.
pub const GRANITE_MOE_SHARED: GraniteMoe = GraniteMoe {
    name: "Granite MoE (shared)",
    kind: Kind::Shared,
};

/// `GraniteMoeHybridForCausalLM`.
pub const GRANITE_MOE_HYBRID: GraniteMoe = GraniteMoe {
    name: "Granite 4.0",
    kind: Kind::Hybrid,
};

/// The checkpoint's names of the shared MLP's linears, for the decoder's shared expert and,
/// without experts, its dense MLP: (ours, theirs), relative to the layer.
const SHARED_MLP: [(&str, &str); 4] = [
    (
        ".mlp.shared_expert.gate_up_proj.",
        ".shared_mlp.input_linear.",
    ),
    (
        ".mlp.shared_expert.down_proj.",
        ".shared_mlp.output_linear.",
    ),
    (".mlp.gate_up_proj.", ".shared_mlp.input_linear."),
    (".mlp.down_proj.", ".shared_mlp.output_linear."),
];

/// The shared MLP's gate and up projections, stacked by rows in `shared_mlp.input_linear`.
const SHARED_GATE_UP: [FusedLinear; 2] = [
    FusedLinear {
        fused: "mlp.shared_expert.gate_up_proj",
        parts: &["mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj"],
        per_kv_head: false,
    },
    FusedLinear {
        fused: "mlp.gate_up_proj",
        parts: &["mlp.gate_proj", "mlp.up_proj"],
        per_kv_head: false,
    },
];

impl GraniteMoe {
    /// Whether a config of this class has routed experts: always, but in Granite 4.0 where
    /// `num_local_experts` is 0.
    fn routes(&self, hf: &HfLlamaConfig) -> bool {
        self.kind != Kind::Hybrid || hf.experts.num_local_experts.unwrap_or(8) > 0
    }

    /// The shared MLP's width: `shared_intermediate_size`, or the class's default.
    fn shared_width(&self, hf: &HfLlamaConfig) -> usize {
        match self.kind {
            Kind::Routed => 0,
            Kind::Shared => hf.experts.shared_intermediate_size.unwrap_or(0),
            Kind::Hybrid => hf.experts.shared_intermediate_size.unwrap_or(1024),
        }
    }
}

/// Granite 4.0's layers: refuses any that is not an attention layer (`attention`, or
/// transformers 5's `full_attention`), and a config without `layer_types` (the class then
/// makes every layer a Mamba layer).
fn check_attention_layers(hf: &HfLlamaConfig) -> Result<(), ConfigError> {
    let Some(types) = &hf.layer_types else {
        return Err(invalid(
            "layer_types",
            "is missing, and GraniteMoeHybridConfig then makes every layer a Mamba layer; \
             only Granite 4.0 models whose layers are all `attention` run"
                .into(),
        ));
    };
    if types.len() != hf.num_hidden_layers {
        return Err(invalid(
            "layer_types",
            format!(
                "has {} entries for {} layers",
                types.len(),
                hf.num_hidden_layers
            ),
        ));
    }
    if let Some((i, kind)) = types
        .iter()
        .enumerate()
        .find(|(_, t)| !matches!(t.as_str(), "attention" | "full_attention"))
    {
        return Err(invalid(
            "layer_types",
            format!(
                "makes layer {i} a `{kind}` layer; only Granite 4.0 models whose layers are all \
                 `attention` run (granite-4.0-micro, -1b, -350m), not the Mamba layers of the \
                 hybrid `-h-` models"
            ),
        ));
    }
    Ok(())
}

/// `GraniteMoeForCausalLM`'s row. llama.cpp's converter writes both MoE classes as
/// `granitemoe` (the shared one with `expert_shared_feed_forward_length`, which the GGUF reader
/// turns into that class), and Granite 4.0 with attention layers only as `granitemoe` or,
/// without experts, `granite`. The converter is Granite's, which permutes q/k rows as Llama's.
pub const GRANITE_MOE_ROW: FamilyRow = FamilyRow {
    gguf_arch: Some("granitemoe"),
    gguf_interleaves_qk: true,
    fused_linears: &SHARED_GATE_UP,
    expert_stacks: Some(ExpertStacks {
        module: "mlp.experts",
        gate_up: "block_sparse_moe.input_linear.weight",
        down: "block_sparse_moe.output_linear.weight",
        halves: true,
        out_major: true,
    }),
    ..FamilyRow::new("GraniteMoeForCausalLM", "granitemoe", &GRANITE_MOE)
};

/// `GraniteMoeSharedForCausalLM`'s row.
pub const GRANITE_MOE_SHARED_ROW: FamilyRow = FamilyRow {
    hf_class: "GraniteMoeSharedForCausalLM",
    model_type: "granitemoeshared",
    gguf_arch: None,
    hooks: &GRANITE_MOE_SHARED,
    ..GRANITE_MOE_ROW
};

/// `GraniteMoeHybridForCausalLM`'s row.
pub const GRANITE_MOE_HYBRID_ROW: FamilyRow = FamilyRow {
    hf_class: "GraniteMoeHybridForCausalLM",
    model_type: "granitemoehybrid",
    gguf_arch: None,
    hooks: &GRANITE_MOE_HYBRID,
    ..GRANITE_MOE_ROW
};

impl Family for GraniteMoe {
    /// Without `attention.scale` llama.cpp scales the scores by `head_dim^-0.5`.
    fn read_gguf(&self, _meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        super::gguf_metadata::default_attention_scale(hf);
    }

    /// Granite 4.0 without experts: the dense MLP is the shared one (of no width, `extras`
    /// refuses it under its own key).
    fn intermediate_size(&self, hf: &HfLlamaConfig) -> Option<usize> {
        let shared = self.shared_width(hf);
        match self.routes(hf) || shared == 0 {
            true => hf.intermediate_size,
            false => Some(shared),
        }
    }

    fn checkpoint_name(&self, config: &LlamaConfig, name: &str) -> Option<String> {
        if let Some(layer) = name.strip_suffix(".mlp.gate.weight") {
            return Some(format!("{layer}.block_sparse_moe.router.layer.weight"));
        }
        // The dense MLP's names are the shared MLP's only without experts.
        let pairs = match config.extras.experts {
            Some(_) => &SHARED_MLP[..2],
            None => &SHARED_MLP[2..],
        };
        pairs
            .iter()
            .find(|(ours, _)| name.contains(ours))
            .map(|(ours, theirs)| name.replacen(ours, theirs, 1))
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        let base = DecoderExtras {
            multipliers: Some(super::granite::multipliers(hf)?),
            ..super::llama_layer(hf, self.name)?
        };
        let mut nope_layers = None;
        if self.kind == Kind::Hybrid {
            check_attention_layers(hf)?;
            match hf.own_key::<String>("position_embedding_type")?.as_deref() {
                Some("rope") => {}
                None | Some("nope") => nope_layers = Some(vec![true; hf.num_hidden_layers]),
                Some(other) => {
                    return Err(invalid(
                        "position_embedding_type",
                        format!("is `{other}`; Granite 4.0 takes `rope`, or `nope` or null"),
                    ))
                }
            }
        }
        let shared = self.shared_width(hf);
        if !self.routes(hf) {
            if shared == 0 {
                return Err(invalid(
                    "shared_intermediate_size",
                    "is 0 where num_local_experts is 0: the layers would have no MLP".into(),
                ));
            }
            return Ok(DecoderExtras {
                nope_layers,
                ..base
            });
        }
        let experts = Experts {
            round_weights: true,
            shared: (shared > 0).then_some(shared),
            shared_ungated: true,
            ..Experts::softmax(
                hf.experts.num_local_experts.unwrap_or(8),
                hf.experts.num_experts_per_tok.unwrap_or(2),
                hf.intermediate_size.unwrap_or(0),
            )
        };
        Ok(DecoderExtras {
            experts: Some(super::checked_experts(experts, "num_local_experts")?),
            nope_layers,
            ..base
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        let mut keys = super::granite::multiplier_keys(config);
        let experts = config.extras.experts;
        keys.insert("num_local_experts", experts.map_or(0, |e| e.count).into());
        keys.insert(
            "num_experts_per_tok",
            experts.map_or(0, |e| e.per_token).into(),
        );
        if self.kind != Kind::Routed {
            let shared = match experts {
                Some(e) => e.shared.unwrap_or(0),
                None => config.intermediate_size,
            };
            keys.insert("shared_intermediate_size", shared.into());
        }
        if self.kind == Kind::Hybrid {
            let layers = vec!["attention"; config.num_hidden_layers];
            keys.insert("layer_types", layers.into());
            let rotates = config.extras.nope_layers.is_none();
            let kind = if rotates { "rope" } else { "nope" };
            keys.insert("position_embedding_type", kind.into());
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::Architecture;
    use crate::model::arch::LogitScale;
    use crate::model::arch::ModelShape;

    /// A config of granite-3.1-1b-a400m's shape and factors.
    const GRANITE_1B_A400M: &str = r#"{"architectures":["GraniteMoeForCausalLM"],
        "attention_bias":false,"attention_dropout":0.1,"attention_multiplier":0.015625,
        "bos_token_id":0,"embedding_multiplier":12.0,"eos_token_id":0,"hidden_act":"silu",
        "hidden_size":1024,"initializer_range":0.02,"intermediate_size":512,
        "logits_scaling":6.0,"max_position_embeddings":131072,"model_type":"granitemoe",
        "num_attention_heads":16,"num_experts_per_tok":8,"num_hidden_layers":24,
        "num_key_value_heads":8,"num_local_experts":32,"output_router_logits":false,
        "pad_token_id":0,"residual_multiplier":0.22,"rms_norm_eps":1e-06,"rope_scaling":null,
        "rope_theta":10000000.0,"router_aux_loss_coef":0.0,"tie_word_embeddings":true,
        "torch_dtype":"bfloat16","vocab_size":49155}"#;

    /// A config of granite-4.0-micro's shape: 40 attention layers, no experts, the shared
    /// MLP 8192 wide.
    fn granite_4_micro() -> String {
        let layers = vec!["\"attention\""; 40].join(",");
        format!(
            r#"{{"architectures":["GraniteMoeHybridForCausalLM"],"attention_bias":false,
            "attention_multiplier":0.0078125,"bos_token_id":100257,"embedding_multiplier":12,
            "eos_token_id":100257,"hidden_act":"silu","hidden_size":2560,
            "intermediate_size":8192,"layer_types":[{layers}],"logits_scaling":10,
            "mamba_d_head":40,"mamba_n_heads":128,"max_position_embeddings":131072,
            "model_type":"granitemoehybrid","num_attention_heads":40,"num_experts_per_tok":0,
            "num_hidden_layers":40,"num_key_value_heads":8,"num_local_experts":0,
            "pad_token_id":100256,"position_embedding_type":"rope","residual_multiplier":0.22,
            "rms_norm_eps":1e-05,"rope_scaling":null,"rope_theta":10000000,
            "shared_intermediate_size":8192,"tie_word_embeddings":true,"vocab_size":100352}}"#
        )
    }

    fn resolve(json: &str) -> Result<LlamaConfig, ConfigError> {
        HfLlamaConfig::from_json(json).unwrap().resolve()
    }

    fn round_trips(c: &LlamaConfig) {
        let back = resolve(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(&back, c);
    }

    #[test]
    fn granite_moe_routes_eight_of_32_stacked_experts_with_granites_factors() {
        let c = resolve(GRANITE_1B_A400M).unwrap();
        assert_eq!(c.architecture, Architecture::GraniteMoe);
        let e = c.extras.experts.unwrap();
        assert_eq!((e.count, e.per_token, e.width), (32, 8, 512));
        assert!(e.normalize && e.round_weights && e.shared.is_none());
        assert_eq!(c.embed_scale(), Some(12.0));
        assert_eq!(c.residual().scale, Some(0.22));
        assert_eq!(c.query_scale(), Some(0.015625));
        assert_eq!(c.logit_scale(), Some(LogitScale::Over(6.0)));
        // 50.3 M tied embeddings + 24 × (3.1 M attention + 32 × 1.57 M experts + the router
        // and norms) + the final norm: the model card's 1.3B.
        assert_eq!(ModelShape::from_config(&c).parameters, 1_334_628_352);
        round_trips(&c);
        let name = |n: &str| GRANITE_MOE.checkpoint_name(&c, n);
        assert_eq!(
            name("model.layers.3.mlp.gate.weight").as_deref(),
            Some("model.layers.3.block_sparse_moe.router.layer.weight")
        );
        assert_eq!(name("model.layers.3.mlp.experts.5.up_proj.weight"), None);
        assert_eq!(name("model.layers.3.self_attn.q_proj.weight"), None);
    }

    #[test]
    fn the_shared_class_adds_an_ungated_shared_mlp_where_it_is_wide() {
        let json = GRANITE_1B_A400M
            .replace("GraniteMoeForCausalLM", "GraniteMoeSharedForCausalLM")
            .replace("\"granitemoe\"", "\"granitemoeshared\"");
        let none = resolve(&json).unwrap();
        assert_eq!(none.architecture, Architecture::GraniteMoeShared);
        assert_eq!(none.extras.experts.unwrap().shared, None, "default 0: none");
        let c = resolve(&json.replace(
            "\"pad_token_id\"",
            "\"shared_intermediate_size\":1024,\"pad_token_id\"",
        ))
        .unwrap();
        let e = c.extras.experts.unwrap();
        assert_eq!(e.shared, Some(1024));
        assert!(e.shared_ungated);
        assert_eq!(c.linear_outputs("mlp.shared_expert.up_proj"), Some(1024));
        assert_eq!(
            ModelShape::from_config(&c).parameters - ModelShape::from_config(&none).parameters,
            24 * 3 * 1024 * 1024
        );
        round_trips(&c);
        round_trips(&none);
        let name = |n: &str| GRANITE_MOE_SHARED.checkpoint_name(&c, n);
        assert_eq!(
            name("model.layers.0.mlp.shared_expert.gate_up_proj.weight").as_deref(),
            Some("model.layers.0.shared_mlp.input_linear.weight")
        );
        assert_eq!(
            name("model.layers.0.mlp.shared_expert.down_proj.weight").as_deref(),
            Some("model.layers.0.shared_mlp.output_linear.weight")
        );
        assert_eq!(name("model.layers.0.mlp.experts.0.down_proj.weight"), None);
    }

    #[test]
    fn granite_4_micro_is_a_dense_model_whose_mlp_is_the_shared_one() {
        let c = resolve(&granite_4_micro()).unwrap();
        assert_eq!(c.architecture, Architecture::GraniteMoeHybrid);
        assert!(c.extras.experts.is_none());
        assert_eq!(c.intermediate_size, 8192);
        assert_eq!(c.extras.nope_layers, None, "position_embedding_type rope");
        assert_eq!(c.logit_scale(), Some(LogitScale::Over(10.0)));
        // 256.9 M tied embeddings + 40 × (15.7 M attention + 62.9 M MLP + norms) + the norm.
        assert_eq!(ModelShape::from_config(&c).parameters, 3_402_836_480);
        round_trips(&c);
        let name = |n: &str| GRANITE_MOE_HYBRID.checkpoint_name(&c, n);
        assert_eq!(
            name("model.layers.7.mlp.gate_up_proj.weight").as_deref(),
            Some("model.layers.7.shared_mlp.input_linear.weight")
        );
        assert_eq!(
            name("model.layers.7.mlp.down_proj.weight").as_deref(),
            Some("model.layers.7.shared_mlp.output_linear.weight")
        );
        let nope = resolve(&granite_4_micro().replace("\"rope\"", "\"nope\"")).unwrap();
        assert_eq!(nope.extras.nope_layers, Some(vec![true; 40]));
        round_trips(&nope);
        let absent = granite_4_micro().replace("\"position_embedding_type\":\"rope\",", "");
        assert_eq!(
            resolve(&absent).unwrap().extras.nope_layers,
            Some(vec![true; 40])
        );
        // With experts, the shared MLP stands beside them at its own width.
        let routed = granite_4_micro()
            .replace("\"num_local_experts\":0", "\"num_local_experts\":4")
            .replace("\"num_experts_per_tok\":0", "\"num_experts_per_tok\":2")
            .replace("\"intermediate_size\":8192", "\"intermediate_size\":512");
        let r = resolve(&routed).unwrap();
        let e = r.extras.experts.unwrap();
        assert_eq!((e.count, e.width, e.shared), (4, 512, Some(8192)));
        round_trips(&r);
    }

    #[test]
    fn mamba_layers_and_bad_keys_are_refused_by_name() {
        let micro = granite_4_micro();
        let mamba = micro.replacen("\"attention\"", "\"mamba\"", 1);
        for (json, key, says) in [
            (mamba, "layer_types", "layer 0 a `mamba` layer"),
            (
                micro.replacen("\"attention\",", "", 1),
                "layer_types",
                "39 entries for 40 layers",
            ),
            (
                micro.replace("\"rope\"", "\"alibi\""),
                "position_embedding_type",
                "`alibi`",
            ),
            (
                micro.replace(
                    "\"shared_intermediate_size\":8192",
                    "\"shared_intermediate_size\":0",
                ),
                "shared_intermediate_size",
                "no MLP",
            ),
            (
                GRANITE_1B_A400M.replace("\"num_experts_per_tok\":8", "\"num_experts_per_tok\":33"),
                "num_experts_per_tok",
                "between 1 and num_local_experts",
            ),
            (
                GRANITE_1B_A400M.replace("\"hidden_act\":\"silu\"", "\"hidden_act\":\"gelu\""),
                "hidden_act",
                "gelu",
            ),
        ] {
            let err = resolve(&json).unwrap_err().to_string();
            assert!(
                err.contains(&format!("`{key}`")) && err.contains(says),
                "{key}: {err}"
            );
        }
        let absent = {
            let start = micro.find("\"layer_types\"").unwrap();
            let end = start + micro[start..].find(']').unwrap() + 2;
            format!("{}{}", &micro[..start], &micro[end..])
        };
        let err = resolve(&absent).unwrap_err().to_string();
        assert!(
            err.contains("`layer_types`") && err.contains("missing"),
            "{err}"
        );
    }
}
