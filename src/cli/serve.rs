//! `wanda serve`: a model behind an OpenAI-compatible API on a local port
//! ([`wanda::serve`]), until SIGINT or SIGTERM.

use std::process::ExitCode;

use anyhow::Context;
use burn::prelude::*;

use super::backend::{dispatch, OnBackend};
use wanda::memory::device::{DeviceChoice, DeviceSpec};
use wanda::model::decoder::SparseMode;
use wanda::model::{self, ModelRef};
use wanda::serve::{serve, ServeOptions, Served, Shutdown};

/// Arguments of `wanda serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A GGUF file, a Hugging Face folder, or a hub id (`org/name[@revision]`).
    #[arg(long)]
    pub model: String,
    /// The name clients pass as `model` (default: the file or folder name, or the hub id).
    #[arg(long)]
    pub name: Option<String>,
    /// Address to listen on; only this machine reaches 127.0.0.1.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// Port; 0 takes a free one (printed when listening).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Requests that may wait for the model; more get a 503.
    #[arg(long, default_value_t = ServeOptions::default().queue)]
    pub queue: usize,
    /// Largest request body (`8MiB`, bytes); larger ones get a 413.
    #[arg(long, default_value = "8MiB", value_parser = super::parse_size)]
    pub max_body: u64,
    /// Prompts in one completion request at most.
    #[arg(long, default_value_t = ServeOptions::default().max_prompts)]
    pub max_prompts: usize,
    /// `cpu`, `cpu-ndarray`, `cpu-flex`, `cuda`, `cuda:N` or `auto` (CUDA:0 where the driver finds a GPU, else the CPU); `-bf16` or `-f16` after `cpu-flex` or a CUDA device computes in bfloat16 or fp16 (`cuda:0-f16`).
    #[arg(long, default_value = "auto")]
    pub device: DeviceSpec,
    /// Decode with pruned linears held compressed (CPU): `auto` those with at least 30 % zeros
    /// on an AVX-512 CPU, `on` every decoder linear, `off` none.
    #[arg(long, default_value_t = SparseMode::Auto)]
    pub sparse: SparseMode,
}

/// The name a model is served under when none is given.
fn default_name(origin: &ModelRef) -> String {
    match origin {
        ModelRef::Gguf(path) | ModelRef::Folder(path) => path
            .file_name()
            .map_or_else(|| origin.to_string(), |n| n.to_string_lossy().into_owned()),
        ModelRef::Hub { repo_id, .. } => repo_id.clone(),
    }
}

impl OnBackend for ServeArgs {
    type Output = ();

    fn run<B: Backend>(self, device: B::Device, choice: DeviceChoice) -> anyhow::Result<()> {
        let origin = ModelRef::parse(&self.model)?;
        let listener = std::net::TcpListener::bind((self.host, self.port))
            .with_context(|| format!("cannot listen on {}:{}", self.host, self.port))?;
        let mut loaded = model::load::<B>(&origin, &device)
            .with_context(|| format!("cannot load model `{origin}`"))?;
        super::sparsify(&mut loaded.model, self.sparse, "wanda serve");
        let served = Served {
            model: &loaded.model,
            tokenizer: &loaded.tokenizer,
            config: &loaded.config,
            name: self.name.unwrap_or_else(|| default_name(&origin)),
        };
        let options = ServeOptions {
            queue: self.queue,
            max_body_bytes: usize::try_from(self.max_body).unwrap_or(usize::MAX),
            max_prompts: self.max_prompts,
        };
        let name = served.name.clone();
        serve(&served, listener, options, Shutdown::Signals, |address| {
            eprintln!(
                "wanda serve: `{name}` on {} at http://{address}/v1 (queue {}, bodies up to {} \
                 bytes, {} prompts per request); Ctrl-C or SIGTERM stops",
                choice.label(),
                options.queue,
                options.max_body_bytes,
                options.max_prompts
            );
        })?;
        Ok(())
    }
}

/// Runs `wanda serve`.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    dispatch(args.device, args)?;
    Ok(ExitCode::SUCCESS)
}
