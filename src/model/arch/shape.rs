//! The numbers memory formulas need from a model, and the breakdown they produce.
//!
//! A [`ModelShape`] comes from a resolved config alone (plus, where a checkpoint's headers were
//! read, their exact parameter count); nothing here loads weights.

use serde::Serialize;

use crate::model::arch::LatentAttention;
use crate::model::arch::LlamaConfig;

/// The dimensions of a Llama-family decoder that memory depends on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelShape {
    /// All parameters (embeddings, every layer, final norm, untied head).
    pub parameters: u64,
    /// Model width `H`.
    pub hidden_size: usize,
    /// MLP width `I` (each expert's, with experts).
    pub intermediate_size: usize,
    /// Decoder layers `L`.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA).
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Vocabulary `V`.
    pub vocab_size: usize,
    /// Whether the LM head reuses the embedding matrix.
    pub tie_word_embeddings: bool,
    /// The longest context the model was trained for.
    pub max_position_embeddings: usize,
    /// Whether the MLP has a gate (three `H × I` matrices; two without, OPT).
    pub gated_mlp: bool,
    /// Whether attention and MLP run side by side, the attention's output held while the MLP
    /// runs (GPT-NeoX, Falcon, Phi, Cohere).
    pub parallel_residual: bool,
    /// Experts per layer where the MLP is a mixture of them (each `I` wide, with a router
    /// `H × E`); 0 for one MLP.
    pub experts: usize,
    /// The width of a shared expert beside the routed ones (three `H × S` matrices and a
    /// gate `H × 1` unless ungated); 0 without one.
    pub shared_expert_size: usize,
    /// Whether the shared expert's output passes a gate `H × 1` (Qwen2-MoE's; GLM-4.5's has
    /// none).
    pub shared_expert_gated: bool,
    /// The layers that have one dense MLP `dense_intermediate_size` wide instead of experts
    /// (GLM-4.5's first `first_k_dense_replace`, Llama 4's between those with experts); 0 where
    /// all layers are alike.
    pub dense_layers: usize,
    /// The MLP width of those dense layers.
    pub dense_intermediate_size: usize,
    /// DeepSeek's latent attention in place of q/k/v projections per head.
    pub latent_attention: Option<LatentAttention>,
    /// Whether its layers run on Burn's generic ops even on the default CPU backend, which
    /// has no fused kernels for them: DeepSeek's latent attention, GPT-OSS's sinks and clamped
    /// GLU, Llama 4's attention and expert inputs scaled by their weights.
    pub generic_layers: bool,
}

impl ModelShape {
    /// The shape of `config`, its parameters counted from the config
    /// ([`ModelShape::count_parameters`]).
    pub fn from_config(config: &LlamaConfig) -> Self {
        let mut shape = Self {
            parameters: 0,
            hidden_size: config.hidden_size,
            // With experts, theirs: no layer has a dense MLP.
            intermediate_size: config
                .extras
                .experts
                .map_or(config.intermediate_size, |e| e.width),
            num_hidden_layers: config.num_hidden_layers,
            num_attention_heads: config.num_attention_heads,
            num_key_value_heads: config.num_key_value_heads,
            head_dim: config.head_dim,
            vocab_size: config.vocab_size,
            tie_word_embeddings: config.tie_word_embeddings,
            max_position_embeddings: config.max_position_embeddings,
            gated_mlp: !config.extras.ungated_mlp,
            parallel_residual: config.extras.parallel_residual,
            experts: config.extras.experts.map_or(0, |e| e.count),
            shared_expert_size: config.extras.experts.and_then(|e| e.shared).unwrap_or(0),
            shared_expert_gated: config.extras.experts.is_some_and(|e| !e.shared_ungated),
            dense_layers: config
                .extras
                .experts
                .map_or(0, |e| e.dense_layers(config.num_hidden_layers)),
            dense_intermediate_size: config.intermediate_size,
            latent_attention: config.extras.latent_attention,
            generic_layers: config.extras.latent_attention.is_some()
                || config.extras.attention_sinks
                || config.extras.llama4_attention.is_some()
                || config
                    .extras
                    .experts
                    .is_some_and(|e| e.clamped_glu.is_some() || e.scaled_inputs),
        };
        let e = &config.extras;
        // Norm gains (and LayerNorm biases, where they have them): two per layer (four with
        // Gemma's output norms, two with OLMo 2's output norms alone), plus the q/k norms.
        let biased = e.layer_norm && !e.layer_norm_without_bias;
        let per_norm = match (e.norms_without_gains, biased) {
            (true, _) => 0,
            (false, true) => 2 * config.hidden_size,
            (false, false) => config.hidden_size,
        };
        let norms = if e.sandwich_norms && !e.post_norms_only {
            4
        } else if e.shared_norm {
            1
        } else {
            2
        };
        let qk_norms = match (
            config.qk_norm,
            e.qk_norm_across_heads || e.qk_norm_per_head_gains,
        ) {
            (false, _) => 0,
            (true, false) => 2 * config.head_dim,
            (true, true) => {
                (config.num_attention_heads + config.num_key_value_heads) * config.head_dim
            }
        };
        // DeepSeek's latent norms in place of q/k norms.
        let latent_norms = e.latent_attention.map_or(0, |l| l.norm_parameters());
        let layer_norms = norms * per_norm + qk_norms + latent_norms;
        // MLP biases: `I` for each matrix into the MLP, `H` for down_proj's.
        let mlp_bias = if e.mlp_bias {
            (shape.mlp_matrices() - 1) * config.intermediate_size as u64 + config.hidden_size as u64
        } else {
            0
        };
        // GPT-OSS: each expert's biases (`2·I` into it, `H` out of it) and the router's, and a
        // sink logit per head.
        let expert_bias = match e.experts {
            Some(x) if x.biased => (x.count * (2 * x.width + config.hidden_size) + x.count) as u64,
            _ => 0,
        };
        let sinks = if e.attention_sinks {
            config.num_attention_heads as u64
        } else {
            0
        };
        let positions = if e.learned_positions {
            ((config.max_position_embeddings + e.position_offset()) * config.hidden_size) as u64
        } else {
            0
        };
        shape.parameters = (shape.layer_parameters(config.qkv_bias, config.o_bias, layer_norms)
            + mlp_bias
            + expert_bias
            + sinks)
            * config.num_hidden_layers as u64
            // The dense layers' MLPs in place of their experts.
            + shape.dense_layers as u64 * shape.dense_mlp_parameters()
            - shape.dense_layers as u64 * shape.expert_parameters()
            + shape.embedding_and_head_parameters()
            + positions
            // The final norm, and BLOOM's norm of the embeddings.
            + per_norm as u64 * if e.embed_norm { 2 } else { 1 }
            // Phi's LM head bias.
            + if e.lm_head_bias && !config.tie_word_embeddings {
                config.vocab_size as u64
            } else {
                0
            };
        shape
    }

    /// The MLP's `H × I` matrices: gate, up and down, or up and down without a gate.
    fn mlp_matrices(&self) -> u64 {
        if self.gated_mlp {
            3
        } else {
            2
        }
    }

    /// The shape of this model with `count` experts in each layer that has them (its experts
    /// pruned): the removed experts' linears and router columns leave the parameters. The same
    /// shape without experts.
    pub fn with_expert_count(&self, count: usize) -> ModelShape {
        if self.experts == 0 {
            return self.clone();
        }
        let removed = self.experts.saturating_sub(count) as u64;
        let h = self.hidden_size as u64;
        let per_expert = self.mlp_matrices() * h * self.intermediate_size as u64 + h;
        let layers = self.num_hidden_layers.saturating_sub(self.dense_layers) as u64;
        ModelShape {
            experts: count,
            parameters: self
                .parameters
                .saturating_sub(layers * removed * per_expert),
            ..self.clone()
        }
    }

    /// The same shape with the exact count read from a checkpoint's headers.
    pub fn with_parameters(mut self, parameters: u64) -> Self {
        self.parameters = parameters;
        self
    }

    /// `V × H`: the embedding matrix (and an untied head, the same again).
    pub fn embedding_parameters(&self) -> u64 {
        (self.vocab_size * self.hidden_size) as u64
    }

    /// The embeddings and, when untied, the LM head: what a streamed model keeps in memory
    /// besides its layers.
    pub fn embedding_and_head_parameters(&self) -> u64 {
        self.embedding_parameters() * if self.tie_word_embeddings { 1 } else { 2 }
    }

    /// Parameters of the prunable linears of one layer:
    /// `H·(nh·d) + 2·H·(kv·d) + (nh·d)·H + 3·H·I` (`2·H·I` in an MLP without a gate; with `E`
    /// experts, `E·3·H·I + H·E`, the router's, and the shared expert's); the larger layer's
    /// where the first layers have a dense MLP.
    pub fn linear_parameters_per_layer(&self) -> u64 {
        let mlp = match self.dense_layers {
            0 => self.expert_parameters(),
            _ => self.expert_parameters().max(self.dense_mlp_parameters()),
        };
        self.attention_parameters(false, false) + mlp
    }

    /// The attention block's linears, with their biases where `qkv_bias` and `o_bias` say:
    /// `H·(nh·d) + 2·H·(kv·d) + (nh·d)·H`, or the latent attention's.
    fn attention_parameters(&self, qkv_bias: bool, o_bias: bool) -> u64 {
        let h = self.hidden_size as u64;
        if let Some(latent) = self.latent_attention {
            return latent.linear_parameters(self.hidden_size, self.num_attention_heads, qkv_bias);
        }
        let q = (self.num_attention_heads * self.head_dim) as u64;
        let kv = (self.num_key_value_heads * self.head_dim) as u64;
        let bias = if qkv_bias { q + 2 * kv } else { 0 } + if o_bias { h } else { 0 };
        h * q + 2 * h * kv + q * h + bias
    }

    /// The linears of a layer's MLP: one MLP `I` wide, or `E` experts with their router and
    /// the shared expert with its gate.
    fn expert_parameters(&self) -> u64 {
        let h = self.hidden_size as u64;
        let mlp = self.mlp_matrices() * h * self.intermediate_size as u64;
        let mlp = match self.experts as u64 {
            0 => mlp,
            e => e * mlp + h * e,
        };
        let shared = match self.shared_expert_size as u64 {
            0 => 0,
            s => self.mlp_matrices() * h * s + if self.shared_expert_gated { h } else { 0 },
        };
        mlp + shared
    }

    /// The linears of a dense layer's MLP before the layers with experts.
    fn dense_mlp_parameters(&self) -> u64 {
        self.mlp_matrices() * (self.hidden_size * self.dense_intermediate_size) as u64
    }

    /// Parameters of one decoder layer with the model's MLP (its experts, where it has them):
    /// its linears, their biases where the architecture has them, and its `norms` RMSNorm
    /// gains.
    fn layer_parameters(&self, qkv_bias: bool, o_bias: bool, norms: usize) -> u64 {
        self.attention_parameters(qkv_bias, o_bias) + self.expert_parameters() + norms as u64
    }
}

/// Where a share of memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Place {
    /// The compute device (a GPU; the CPU when that is the device).
    Device,
    /// Host RAM besides the device.
    Host,
}

/// One share of a memory estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Item {
    /// What it is, e.g. `weights`, `calibration activations`.
    pub name: String,
    /// Bytes.
    pub bytes: u64,
    /// Where it lives.
    pub place: Place,
    /// The formula with the numbers put in, e.g. `134515008 params × 4 B`.
    pub formula: String,
    /// The device allocations it is made of, `(count, bytes each)`, where a GPU's memory pool
    /// places them (the estimator's pool model); empty for host memory and for persistent
    /// allocations (weights), which take exactly their bytes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<(u64, u64)>,
}

/// A memory estimate as a list of shares.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Breakdown {
    /// The shares, in the order they are printed.
    pub items: Vec<Item>,
}

impl Breakdown {
    /// Adds a share.
    pub fn push(&mut self, name: &str, bytes: u64, place: Place, formula: String) {
        self.items.push(Item {
            name: name.to_string(),
            bytes,
            place,
            formula,
            allocations: Vec::new(),
        });
    }

    /// Adds a share made of `count` device allocations of `each` bytes (transient tensors, which
    /// a GPU's pool places in pages).
    pub fn push_allocations(
        &mut self,
        name: &str,
        count: u64,
        each: u64,
        place: Place,
        formula: String,
    ) {
        self.push_mixed(name, &[(count, each)], place, formula);
    }

    /// Adds a share made of device allocations of several sizes, `(count, bytes each)`.
    pub fn push_mixed(&mut self, name: &str, parts: &[(u64, u64)], place: Place, formula: String) {
        self.items.push(Item {
            name: name.to_string(),
            bytes: parts.iter().map(|(n, each)| n * each).sum(),
            place,
            formula,
            allocations: parts.to_vec(),
        });
    }

    /// The sum of the shares at `place`.
    pub fn total(&self, place: Place) -> u64 {
        self.items
            .iter()
            .filter(|i| i.place == place)
            .map(|i| i.bytes)
            .sum()
    }
}

/// Bytes as GiB with two decimals, e.g. `1.43 GiB`.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::HfLlamaConfig;

    fn config(json: &str) -> LlamaConfig {
        HfLlamaConfig::from_json(json).unwrap().resolve().unwrap()
    }

    #[test]
    fn parameters_are_counted_by_hand_on_a_tiny_config() {
        // H=4, I=6, L=2, 2 heads of 2, 1 kv head, V=10, untied.
        let c = config(
            r#"{"architectures":["LlamaForCausalLM"],"hidden_size":4,"intermediate_size":6,
            "num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,
            "vocab_size":10,"tie_word_embeddings":false}"#,
        );
        let shape = ModelShape::from_config(&c);
        // Linears per layer: q 4·4 + k,v 2·4·2 + o 4·4 + mlp 3·4·6 = 16 + 16 + 16 + 72 = 120.
        assert_eq!(shape.linear_parameters_per_layer(), 120);
        // Layers 2·(120 + 2·4) = 256, embeddings + head 2·40 = 80, final norm 4.
        assert_eq!(shape.parameters, 340);
    }

    #[test]
    fn smollm2_count_matches_its_gguf_headers() {
        let c = config(
            r#"{"architectures":["LlamaForCausalLM"],"hidden_size":576,"intermediate_size":1536,
            "num_hidden_layers":30,"num_attention_heads":9,"num_key_value_heads":3,
            "vocab_size":49152,"tie_word_embeddings":true,"max_position_embeddings":8192}"#,
        );
        // The integration test `dense_perplexity_matches_pytorch_on_two_windows` reads
        // 134,515,008 from the GGUF's tensor table.
        assert_eq!(ModelShape::from_config(&c).parameters, 134_515_008);
    }

    #[test]
    fn breakdown_totals_by_place() {
        let mut b = Breakdown::default();
        b.push("a", 10, Place::Device, "10".into());
        b.push("b", 5, Place::Host, "5".into());
        b.push("c", 7, Place::Device, "7".into());
        assert_eq!((b.total(Place::Device), b.total(Place::Host)), (17, 5));
        assert_eq!(gib(3 << 29), "1.50 GiB");
    }
}
