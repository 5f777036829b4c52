//! A resolved config written back as a Hugging Face `config.json`, with its family's own keys.

use crate::model::arch::{LlamaConfig, RopeScaling};

impl LlamaConfig {
    /// Writes this config back as a Hugging Face `config.json` value.
    pub fn to_hf_json(&self) -> serde_json::Value {
        let rope_scaling = self.rope_scaling_json();
        let mut v = serde_json::json!({
            "architectures": [self.architecture.hf_class()],
            "model_type": self.architecture.model_type(),
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": rope_scaling,
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.o_bias,
            "hidden_act": self.extras.activation.hf_name(),
            "torch_dtype": "float32",
        });
        if let Some(map) = v.as_object_mut() {
            let row = self.architecture.row();
            for key in row.hf_keys_refused {
                map.remove(*key);
            }
            for (key, value) in row.hooks.hf_keys(self) {
                map.insert(key.into(), value);
            }
            if let Some(b) = self.bos_token_id {
                map.insert("bos_token_id".into(), b.into());
            }
            if let Some(e) = self.eos_token_id {
                map.insert("eos_token_id".into(), e.into());
            }
            if let Some(w) = self.sliding_window {
                map.insert("sliding_window".into(), w.into());
            }
            // Phi-3's config class reads its own top-level key (default 4096) over
            // `rope_scaling`'s.
            if let RopeScaling::LongRope {
                original_max_position_embeddings,
                ..
            } = self.rope_scaling
            {
                map.insert(
                    "original_max_position_embeddings".into(),
                    original_max_position_embeddings.into(),
                );
            }
        }
        v
    }
}
