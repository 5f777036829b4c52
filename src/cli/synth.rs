//! `wanda synth`: a Hugging Face folder in a real model's shape with random weights, for
//! testing scale (memory, speed, streaming, I/O) without downloading the model.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use wanda::model::checkpoint::SaveDtype;
use wanda::model::checkpoint::Tokenizer;
use wanda::model::checkpoint::{synthesize, SynthOptions, SynthShape};

/// Arguments of `wanda synth`.
#[derive(Debug, clap::Args)]
pub struct SynthArgs {
    /// The published model whose config.json is copied (vocabulary size aside).
    #[arg(long, value_enum)]
    pub shape: SynthShape,
    /// Decoder layers, to keep the width with fewer layers for quick checks (default: the
    /// published count).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Element type of the weights.
    #[arg(long, value_enum, default_value_t = SaveDtype::Bf16)]
    pub dtype: SaveDtype,
    /// Seed of the weights (the same seed writes the same bytes).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A `tokenizer.json`; it is copied into the folder and sets the vocabulary size.
    #[arg(long)]
    pub tokenizer: PathBuf,
    /// Largest safetensors shard (`2GB`, `5GiB`, bytes).
    #[arg(long, default_value = "2GB", value_parser = super::parse_size)]
    pub max_shard_size: u64,
    /// The folder to write: a new or empty folder, or one wanda wrote (replaced once the new
    /// one is complete); any other is refused.
    #[arg(long)]
    pub out: PathBuf,
    /// Print what was written as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `wanda synth`.
pub fn run(args: SynthArgs) -> anyhow::Result<ExitCode> {
    let tokenizer_json = std::fs::read_to_string(&args.tokenizer)
        .with_context(|| format!("cannot read the tokenizer `{}`", args.tokenizer.display()))?;
    let tokenizer = Tokenizer::from_json(&tokenizer_json, &args.tokenizer.display().to_string())?;
    let options = SynthOptions {
        shape: args.shape,
        layers: args.layers,
        dtype: args.dtype,
        seed: args.seed,
        max_shard_bytes: args.max_shard_size,
    };
    let started = std::time::Instant::now();
    let summary = synthesize(&options, &tokenizer_json, tokenizer.vocab_size(), &args.out)
        .with_context(|| format!("cannot write the synthetic model `{}`", args.out.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        let mut value = serde_json::to_value(&summary)?;
        value["seconds"] = seconds.into();
        println!("{}", serde_json::to_string(&value)?);
    } else {
        println!(
            "wrote {} ({} parameters, {:.2} GB of {:?} tensors in {} file(s)) in {seconds:.1} s; \
             random weights: its perplexity is meaningless",
            args.out.display(),
            summary.parameters,
            summary.tensor_bytes as f64 / 1e9,
            args.dtype,
            summary.shards,
        );
    }
    Ok(ExitCode::SUCCESS)
}
