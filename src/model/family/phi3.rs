//! Phi-3: Llama's layer, stored with the query, key and value projections stacked in one
//! `self_attn.qkv_proj` and the MLP's gate and up projections in one `mlp.gate_up_proj` (rows
//! in that order), with a sliding window. The decoder holds them as the separate matrices they
//! are; loading splits them ([`crate::model::checkpoint::SplitSource`]), pruning selects over each
//! stack as the one matrix the reference code sees ([`crate::model::decoder::DecoderLayer::stacked`]),
//! and saving stacks them again.
//!
//! The 128k models (Phi-3-mini/medium-128k, Phi-3.5-mini, Phi-4-mini) scale RoPE by LongRoPE
//! ([`crate::model::arch::RopeScaling::LongRope`]; the class reads the legacy `su` and `yarn`
//! types as LongRoPE), and Phi-4-mini rotates only the first `partial_rotary_factor` (0.75) of
//! each head.

use std::collections::BTreeMap;

use super::{ClassDefaults, Family, FamilyRow, GgufMetadata};
use crate::model::arch::FusedLinear;
use crate::model::arch::{ConfigError, DecoderExtras, HfLlamaConfig, LlamaConfig};

/// `Phi3ForCausalLM`.
pub struct Phi3;

/// `Phi3ForCausalLM`'s row.
pub const ROW: FamilyRow = FamilyRow {
    // `Phi3Config`'s `original_max_position_embeddings`, which LongRoPE reads over
    // `rope_scaling`'s.
    original_positions: Some(4096),
    class_defaults: ClassDefaults::positions(4096),
    gguf_arch: Some("phi3"),
    fused_linears: &[
        FusedLinear {
            fused: "self_attn.qkv_proj",
            parts: &["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
            per_kv_head: false,
        },
        FusedLinear {
            fused: "mlp.gate_up_proj",
            parts: &["mlp.gate_proj", "mlp.up_proj"],
            per_kv_head: false,
        },
    ],
    ..FamilyRow::new("Phi3ForCausalLM", "phi3", &Phi3)
};

impl Family for Phi3 {
    /// llama.cpp writes the rotated dimensions of the heads, not their width.
    fn read_gguf(&self, meta: &dyn GgufMetadata, hf: &mut HfLlamaConfig) {
        hf.partial_rotary_factor = super::gguf_metadata::rotated_share(meta, hf);
    }

    fn norm_eps(&self, hf: &HfLlamaConfig) -> f64 {
        hf.rms_norm_eps.unwrap_or(1e-5)
    }

    fn sliding_window(&self, hf: &HfLlamaConfig) -> Option<usize> {
        hf.window_or(None)
    }

    fn rope_type<'a>(&self, kind: &'a str) -> &'a str {
        match kind {
            "su" | "yarn" => "longrope",
            other => other,
        }
    }

    fn extras(&self, hf: &HfLlamaConfig) -> Result<DecoderExtras, ConfigError> {
        super::refuse_all_but_silu(hf, "Phi-3")?;
        Ok(DecoderExtras {
            rotary_dim: super::partial_rotary(
                &ROW,
                hf,
                hf.partial_rotary_factor,
                "partial_rotary_factor",
                1.0,
            )?,
            ..DecoderExtras::default()
        })
    }

    fn hf_keys(&self, config: &LlamaConfig) -> BTreeMap<&'static str, serde_json::Value> {
        BTreeMap::from([("partial_rotary_factor", config.rotary_factor().into())])
    }

}

#[cfg(test)]
mod tests {
    use crate::model::arch::{HfLlamaConfig, LlamaConfig, RopeScaling};

    /// A Phi-3.5-mini-shaped config with `extra` keys (two rotated pairs a head: head_dim 4).
    fn resolve(extra: &str) -> Result<LlamaConfig, String> {
        let json = format!(
            r#"{{"architectures":["Phi3ForCausalLM"],"hidden_size":16,"intermediate_size":32,
            "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":4,
            "vocab_size":8,"max_position_embeddings":131072,{extra}}}"#
        );
        let hf: HfLlamaConfig = serde_json::from_str(&json).map_err(|e| e.to_string())?;
        hf.resolve().map_err(|e| e.to_string())
    }

    #[test]
    fn longrope_reads_phi3_5s_keys_and_its_attention_factor() {
        let c = resolve(
            r#""original_max_position_embeddings":4096,
            "rope_scaling":{"type":"longrope","short_factor":[1.0,1.5],"long_factor":[2.0,8.0]}"#,
        )
        .unwrap();
        let RopeScaling::LongRope {
            short_factor,
            long_factor,
            factor,
            original_max_position_embeddings,
            attention_factor,
        } = &c.rope_scaling
        else {
            panic!("{:?}", c.rope_scaling)
        };
        assert_eq!(
            (short_factor, long_factor),
            (&vec![1.0, 1.5], &vec![2.0, 8.0])
        );
        assert_eq!((*factor, *original_max_position_embeddings), (32.0, 4096));
        // transformers: √(1 + ln 32 / ln 4096) = √(1 + 5/12).
        assert!((attention_factor - (17.0f64 / 12.0).sqrt()).abs() < 1e-15);
        assert_eq!(c.rope_attention_factor(), (17.0f64 / 12.0).sqrt() as f32);
        assert_eq!(c.rotary_dim(), 4);
    }

    #[test]
    fn the_top_level_context_length_wins_and_legacy_types_read_as_longrope() {
        for kind in ["su", "yarn"] {
            let c = resolve(&format!(
                r#""original_max_position_embeddings":8192,
                "rope_scaling":{{"type":"{kind}","short_factor":[1.0,1.0],"long_factor":[1.0,1.0],
                "original_max_position_embeddings":2048}}"#
            ))
            .unwrap();
            assert!(
                matches!(
                    c.rope_scaling,
                    RopeScaling::LongRope {
                        original_max_position_embeddings: 8192,
                        factor: 16.0,
                        ..
                    }
                ),
                "{kind}: {:?}",
                c.rope_scaling
            );
        }
    }

    #[test]
    fn phi4_minis_partial_rotary_rotates_three_quarters_and_round_trips() {
        // head_dim 8, three quarters rotate: 6 dimensions, 3 pairs.
        let c = resolve(
            r#""head_dim":8,"partial_rotary_factor":0.75,"original_max_position_embeddings":4096,
            "rope_scaling":{"type":"longrope","short_factor":[1,1,2],"long_factor":[3,4,5]}"#,
        )
        .unwrap();
        assert_eq!(c.rotary_dim(), 6);
        let json = c.to_hf_json();
        assert_eq!(json["partial_rotary_factor"], 0.75);
        assert_eq!(json["original_max_position_embeddings"], 4096);
        assert_eq!(json["rope_scaling"]["rope_type"], "longrope");
        let back: HfLlamaConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back.resolve().unwrap(), c);
    }

    #[test]
    fn longrope_errors_name_the_key() {
        // No context length anywhere is `Phi3Config`'s 4096, as transformers reads it; one
        // under 2 is an error.
        let c = resolve(
            r#""rope_scaling":{"type":"longrope","short_factor":[1,1],"long_factor":[1,1]}"#,
        )
        .unwrap();
        assert!(matches!(
            c.rope_scaling,
            RopeScaling::LongRope {
                original_max_position_embeddings: 4096,
                ..
            }
        ));
        for (extra, key) in [
            (
                r#""original_max_position_embeddings":1,
                "rope_scaling":{"type":"longrope","short_factor":[1,1],"long_factor":[1,1]}"#,
                "original_max_position_embeddings",
            ),
            (
                r#""original_max_position_embeddings":4096,
                "rope_scaling":{"type":"longrope","short_factor":[1,1,1],"long_factor":[1,1]}"#,
                "rope_scaling.short_factor",
            ),
            (
                r#""original_max_position_embeddings":4096,
                "rope_scaling":{"type":"longrope","short_factor":[1,1]}"#,
                "rope_scaling.long_factor",
            ),
            (
                r#""original_max_position_embeddings":4096,
                "rope_scaling":{"type":"longrope","short_factor":[1,0],"long_factor":[1,1]}"#,
                "rope_scaling.short_factor",
            ),
        ] {
            let err = resolve(extra).unwrap_err();
            assert!(err.contains(&format!("`{key}`")), "{extra}: {err}");
        }
    }
}
