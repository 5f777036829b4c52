//! Real-shaped checkpoints with random weights (`wanda synth`), so that scale — memory, speed,
//! streaming, I/O — can be tested on any machine without downloading a model.
//!
//! A shape is the published `config.json` of a real model (Llama-2-7B, Llama-3-8B, …) with the
//! vocabulary size taken from the tokenizer the user gives, so every id it produces is in range.
//! Weights are drawn uniformly from `±0.02·√3` (standard deviation 0.02, transformers'
//! `initializer_range`), norms are 1. The folder is a Hugging Face folder like the hub's:
//! `config.json`, `tokenizer.json`, sharded safetensors with `model.safetensors.index.json`, and
//! `wanda_synth.json` saying how it was made. Its perplexity is meaningless (about the
//! vocabulary size); only its shapes, sizes and timings are real.

use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;

use crate::model::arch::Architecture;
use crate::model::arch::{LlamaConfig, RopeScaling};
use crate::model::checkpoint::{
    io, pretty_json, write_atomically, write_weights, ExportError, PlannedTensor, SaveDtype,
    TensorValues, SYNTH_FILE,
};

/// A published model configuration to copy the shape of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SynthShape {
    /// SmolLM2-135M (576 wide, 30 layers, tied head).
    #[value(name = "smollm2-135m")]
    Smollm2_135m,
    /// Llama-3.2-1B (2048 wide, 16 layers, 8 KV heads, llama3 RoPE scaling, tied head).
    #[value(name = "llama32-1b")]
    Llama32_1b,
    /// Llama-3.2-3B (3072 wide, 28 layers, 8 KV heads, llama3 RoPE scaling, tied head).
    #[value(name = "llama32-3b")]
    Llama32_3b,
    /// Llama-2-7B (4096 wide, 32 layers, 11008 MLP).
    #[value(name = "llama2-7b")]
    Llama2_7b,
    /// Llama-3-8B (4096 wide, 32 layers, 8 KV heads, 14336 MLP).
    #[value(name = "llama3-8b")]
    Llama3_8b,
    /// Llama-2-13B (5120 wide, 40 layers, 13824 MLP).
    #[value(name = "llama2-13b")]
    Llama2_13b,
    /// Llama-2-70B (8192 wide, 80 layers, 8 KV heads, 28672 MLP).
    #[value(name = "llama2-70b")]
    Llama2_70b,
}

/// The numbers of a published config that differ between shapes.
struct Published {
    hidden: usize,
    intermediate: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    rope_theta: f64,
    max_positions: usize,
    llama3_scaling: bool,
    tied: bool,
    bos: u32,
    eos: u32,
}

impl SynthShape {
    fn published(self) -> Published {
        let llama2 = |hidden, intermediate, layers, heads, kv_heads| Published {
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            rope_theta: 10_000.0,
            max_positions: 4096,
            llama3_scaling: false,
            tied: false,
            bos: 1,
            eos: 2,
        };
        let llama3 = |hidden, intermediate, layers, heads, small: bool| Published {
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads: 8,
            rope_theta: 500_000.0,
            max_positions: if small { 131_072 } else { 8192 },
            llama3_scaling: small,
            tied: small,
            bos: 128_000,
            eos: 128_001,
        };
        match self {
            SynthShape::Smollm2_135m => Published {
                hidden: 576,
                intermediate: 1536,
                layers: 30,
                heads: 9,
                kv_heads: 3,
                rope_theta: 100_000.0,
                max_positions: 8192,
                llama3_scaling: false,
                tied: true,
                bos: 1,
                eos: 2,
            },
            SynthShape::Llama32_1b => llama3(2048, 8192, 16, 32, true),
            SynthShape::Llama32_3b => llama3(3072, 8192, 28, 24, true),
            SynthShape::Llama2_7b => llama2(4096, 11008, 32, 32, 32),
            SynthShape::Llama3_8b => llama3(4096, 14336, 32, 32, false),
            SynthShape::Llama2_13b => llama2(5120, 13824, 40, 40, 40),
            SynthShape::Llama2_70b => llama2(8192, 28672, 80, 64, 8),
        }
    }

    /// The shape's config with `vocab_size` ids and `layers` decoder layers (the published
    /// count when `None`). BOS/EOS ids outside the vocabulary are left out.
    pub fn config(self, vocab_size: usize, layers: Option<usize>) -> LlamaConfig {
        let p = self.published();
        let in_vocab = |id: u32| (id as usize) < vocab_size;
        LlamaConfig {
            architecture: Architecture::Llama,
            hidden_size: p.hidden,
            intermediate_size: p.intermediate,
            num_hidden_layers: layers.unwrap_or(p.layers),
            num_attention_heads: p.heads,
            num_key_value_heads: p.kv_heads,
            head_dim: p.hidden / p.heads,
            rms_norm_eps: 1e-5,
            rope_theta: p.rope_theta,
            rope_scaling: if p.llama3_scaling {
                RopeScaling::Llama3 {
                    factor: 32.0,
                    low_freq_factor: 1.0,
                    high_freq_factor: 4.0,
                    original_max_position_embeddings: 8192,
                }
            } else {
                RopeScaling::None
            },
            max_position_embeddings: p.max_positions,
            vocab_size,
            tie_word_embeddings: p.tied,
            qkv_bias: false,
            qk_norm: false,
            o_bias: false,
            sliding_window: None,
            bos_token_id: in_vocab(p.bos).then_some(p.bos),
            eos_token_id: in_vocab(p.eos).then_some(p.eos),
            extras: Default::default(),
        }
    }
}

/// How to make a synthetic checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthOptions {
    /// The published shape.
    pub shape: SynthShape,
    /// Decoder layers, when fewer (or more) than the published count.
    pub layers: Option<usize>,
    /// Element type of the safetensors.
    pub dtype: SaveDtype,
    /// Seed of the weights: the same seed gives the same bytes.
    pub seed: u64,
    /// Largest shard in bytes.
    pub max_shard_bytes: u64,
}

/// What `wanda synth` wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthSummary {
    /// The options it ran with.
    pub options: SynthOptions,
    /// The config written to `config.json`.
    pub config: serde_json::Value,
    /// Parameters in the checkpoint.
    pub parameters: u64,
    /// Bytes of tensor data (without the safetensors headers).
    pub tensor_bytes: u64,
    /// Safetensors files written.
    pub shards: usize,
}

/// Writes a synthetic checkpoint of `options.shape` into `folder` (atomically: the folder
/// appears only once complete), with `tokenizer_json` as its tokenizer and `vocab_size` taken
/// from it.
pub fn synthesize(
    options: &SynthOptions,
    tokenizer_json: &str,
    vocab_size: usize,
    folder: &Path,
) -> Result<SynthSummary, ExportError> {
    if options.layers == Some(0) || vocab_size == 0 {
        return Err(ExportError::Layers(
            "a synthetic model needs at least one layer and one token id".to_string(),
        ));
    }
    let config = options.shape.config(vocab_size, options.layers);
    let planned = plan(&config);
    let mut config_json = config.to_hf_json();
    config_json["torch_dtype"] = options.dtype.torch_name().into();
    let parameters = parameter_count(&planned);
    let mut summary = SynthSummary {
        options: options.clone(),
        config: config_json.clone(),
        parameters,
        tensor_bytes: parameters * options.dtype.size(),
        shards: 0,
    };
    write_atomically(folder, |staging| {
        let write = |name: &str, text: String| {
            let path = staging.join(name);
            std::fs::write(&path, text).map_err(io(&path))
        };
        write("config.json", pretty_json(&config_json))?;
        write("tokenizer.json", tokenizer_json.to_string())?;
        summary.shards = write_weights(
            staging,
            &planned,
            &mut RandomWeights { seed: options.seed },
            options.dtype,
            options.max_shard_bytes,
        )?;
        write(
            SYNTH_FILE,
            pretty_json(&serde_json::json!({
                "note": "random weights in a published shape, made by `wanda synth`: \
                         shapes, sizes and timings are real, perplexity is meaningless",
                "summary": summary,
            })),
        )
    })?;
    Ok(summary)
}

/// The parameters of `planned` tensors.
fn parameter_count(planned: &[PlannedTensor]) -> u64 {
    planned
        .iter()
        .map(|t| t.shape.iter().product::<usize>() as u64)
        .sum()
}

/// Every tensor of a Llama checkpoint of `config`, with its Hugging Face name and PyTorch shape,
/// in the order the hub's files hold them: embeddings, each layer's linears and norms, final
/// norm, LM head (unless tied).
fn plan(config: &LlamaConfig) -> Vec<PlannedTensor> {
    let (h, i) = (config.hidden_size, config.intermediate_size);
    let q = config.num_attention_heads * config.head_dim;
    let kv = config.num_key_value_heads * config.head_dim;
    let tensor = |name: String, shape: Vec<usize>, layer: Option<usize>| PlannedTensor {
        name,
        shape,
        layer,
    };
    let mut out = vec![tensor(
        "model.embed_tokens.weight".into(),
        vec![config.vocab_size, h],
        None,
    )];
    for l in 0..config.num_hidden_layers {
        let p = format!("model.layers.{l}");
        for (name, shape) in [
            ("self_attn.q_proj.weight", vec![q, h]),
            ("self_attn.k_proj.weight", vec![kv, h]),
            ("self_attn.v_proj.weight", vec![kv, h]),
            ("self_attn.o_proj.weight", vec![h, q]),
            ("mlp.gate_proj.weight", vec![i, h]),
            ("mlp.up_proj.weight", vec![i, h]),
            ("mlp.down_proj.weight", vec![h, i]),
            ("input_layernorm.weight", vec![h]),
            ("post_attention_layernorm.weight", vec![h]),
        ] {
            out.push(tensor(format!("{p}.{name}"), shape, Some(l)));
        }
    }
    out.push(tensor("model.norm.weight".into(), vec![h], None));
    if !config.tie_word_embeddings {
        out.push(tensor(
            "lm_head.weight".into(),
            vec![config.vocab_size, h],
            None,
        ));
    }
    out
}

/// Values handed out per block: generated in parallel, then encoded and written.
const BLOCK: usize = 1 << 22;
/// Values per independently seeded stream inside a block.
const STREAM: usize = 1 << 16;

/// Seeded uniform weights: a tensor's values depend only on the seed, its name and position,
/// never on the thread count.
struct RandomWeights {
    seed: u64,
}

impl TensorValues for RandomWeights {
    fn write_values(
        &mut self,
        tensor: &PlannedTensor,
        sink: &mut dyn FnMut(&[f32]) -> Result<(), ExportError>,
    ) -> Result<(), ExportError> {
        let len: usize = tensor.shape.iter().product();
        if tensor.shape.len() == 1 {
            // RMSNorm gains: 1, as initialised.
            return sink(&vec![1.0; len]);
        }
        let key = name_key(&tensor.name) ^ self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let bound = 0.02 * 3f32.sqrt();
        let mut block = vec![0.0f32; BLOCK.min(len)];
        for start in (0..len).step_by(BLOCK) {
            let values = &mut block[..BLOCK.min(len - start)];
            values
                .par_chunks_mut(STREAM)
                .enumerate()
                .for_each(|(k, chunk)| {
                    let mut state =
                        key ^ ((start / STREAM + k) as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
                    for v in chunk {
                        *v = (unit(splitmix(&mut state)) * 2.0 - 1.0) * bound;
                    }
                });
            sink(values)?;
        }
        Ok(())
    }
}

/// FNV-1a of a tensor name: its stream of random values.
fn name_key(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// SplitMix64: the next value of `state`'s stream.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The top 24 bits of `bits` as a float in `[0, 1)`.
fn unit(bits: u64) -> f32 {
    (bits >> 40) as f32 / (1u64 << 24) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama2_7b_has_its_published_parameter_count() {
        // Llama-2-7b-hf: 6,738,415,616 parameters with its 32000-id vocabulary.
        let config = SynthShape::Llama2_7b.config(32_000, None);
        assert_eq!(parameter_count(&plan(&config)), 6_738_415_616);
        // Llama-3.2-1B: 1,235,814,400 with 128256 ids and a tied head.
        let config = SynthShape::Llama32_1b.config(128_256, None);
        assert_eq!(parameter_count(&plan(&config)), 1_235_814_400);
    }

    #[test]
    fn ids_outside_the_vocabulary_are_dropped() {
        let config = SynthShape::Llama3_8b.config(49_152, Some(2));
        assert_eq!((config.bos_token_id, config.eos_token_id), (None, None));
        assert_eq!(config.num_hidden_layers, 2);
        let config = SynthShape::Llama2_7b.config(49_152, None);
        assert_eq!(
            (config.bos_token_id, config.eos_token_id),
            (Some(1), Some(2))
        );
    }

    #[test]
    fn weights_are_seeded_bounded_and_spread() {
        let tensor = PlannedTensor {
            name: "model.layers.0.mlp.up_proj.weight".into(),
            shape: vec![300, 1000],
            layer: Some(0),
        };
        let draw = |seed| {
            let mut values = Vec::new();
            RandomWeights { seed }
                .write_values(&tensor, &mut |v| {
                    values.extend_from_slice(v);
                    Ok(())
                })
                .unwrap();
            values
        };
        let (a, b, c) = (draw(0), draw(0), draw(1));
        assert_eq!(a.len(), 300_000);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let bound = 0.02 * 3f32.sqrt();
        assert!(a.iter().all(|v| v.abs() <= bound));
        let mean = a.iter().map(|&v| f64::from(v)).sum::<f64>() / a.len() as f64;
        let var = a
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / a.len() as f64;
        assert!(mean.abs() < 2e-4, "{mean}");
        assert!((var.sqrt() - 0.02).abs() < 2e-4, "{}", var.sqrt());
    }
}
