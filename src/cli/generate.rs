//! `wanda generate`: continue a prompt with KV-cached decoding.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use burn::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::backend::{dispatch, OnBackend};
use wanda::memory::device::{DeviceChoice, DeviceSpec};
use wanda::model::decoder::pick;
use wanda::model::decoder::{KvCache, SparseMode};
use wanda::model::{self, ModelRef};

/// Arguments of `wanda generate`.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// A GGUF file, a Hugging Face folder, or a hub id (`org/name[@revision]`).
    #[arg(long)]
    pub model: String,
    /// The text to continue.
    #[arg(long)]
    pub prompt: String,
    /// Tokens to generate at most (stops early at end-of-sequence).
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
    /// Sampling temperature; 0 picks the most likely token every step.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `cpu`, `cpu-ndarray`, `cpu-flex`, `cuda`, `cuda:N` or `auto` (CUDA:0 where the driver finds a GPU, else the CPU); `-bf16` or `-f16` after `cpu-flex` or a CUDA device computes in bfloat16 or fp16 (`cuda:0-f16`).
    #[arg(long, default_value = "auto")]
    pub device: DeviceSpec,
    /// Decode with pruned linears held compressed (CPU): `auto` those with at least 30 % zeros
    /// on an AVX-512 CPU, `on` every decoder linear, `off` none.
    #[arg(long, default_value_t = SparseMode::Auto)]
    pub sparse: SparseMode,
}

impl OnBackend for GenerateArgs {
    type Output = ();

    fn run<B: Backend>(self, device: B::Device, _choice: DeviceChoice) -> anyhow::Result<()> {
        let origin = ModelRef::parse(&self.model)?;
        let mut loaded = model::load::<B>(&origin, &device)
            .with_context(|| format!("cannot load model `{origin}`"))?;
        super::sparsify(&mut loaded.model, self.sparse, "wanda generate");
        let prompt_ids = loaded.tokenizer.encode(&self.prompt)?;
        anyhow::ensure!(
            !prompt_ids.is_empty(),
            "the prompt encodes to no tokens; give some text"
        );
        let limit = loaded.config.max_position_embeddings;
        anyhow::ensure!(
            prompt_ids.len() + self.max_new_tokens <= limit,
            "prompt ({} tokens) plus --max-new-tokens ({}) exceeds the model's context of {limit}",
            prompt_ids.len(),
            self.max_new_tokens
        );
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut cache = KvCache::new(loaded.config.num_hidden_layers);
        let mut generated: Vec<u32> = Vec::new();
        let mut input = prompt_ids.clone();
        let mut printed = String::new();
        let mut stdout = std::io::stdout();
        write!(stdout, "{}", self.prompt)?;
        for _ in 0..self.max_new_tokens {
            let tokens: Vec<i64> = input.iter().map(|&t| i64::from(t)).collect();
            let n = tokens.len();
            let tokens = Tensor::<B, 2, Int>::from_data(TensorData::new(tokens, [1, n]), &device);
            let logits = loaded.model.forward_cached(tokens, &mut cache);
            let [_, seq, vocab] = logits.dims();
            let last =
                wanda::model::kernels::to_host_f32(logits.narrow(1, seq - 1, 1).reshape([vocab]));
            let next = pick(&last, self.temperature, &mut rng);
            if Some(next) == loaded.config.eos_token_id {
                break;
            }
            generated.push(next);
            // Decode the whole continuation each step so multi-byte characters print whole.
            let text = loaded.tokenizer.decode(&generated)?;
            if let Some(new) = text.strip_prefix(printed.as_str()) {
                write!(stdout, "{new}")?;
                stdout.flush()?;
            }
            printed = text;
            input = vec![next];
        }
        writeln!(stdout)?;
        Ok(())
    }
}

/// Runs `wanda generate`.
pub fn run(args: GenerateArgs) -> anyhow::Result<ExitCode> {
    dispatch(args.device, args)?;
    Ok(ExitCode::SUCCESS)
}
