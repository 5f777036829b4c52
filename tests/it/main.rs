//! The one integration-test binary; a module per area.

mod architecture;
mod common;
mod cuda_on_host;
mod datasets;
mod estimate_cli;
mod eval_cli;
mod families;
mod faults;
mod fuzz_corpus;
mod gemma3;
mod gguf_model;
mod hf_folder;
mod pipeline;
mod pool_replay;
mod prune;
mod prune_methods;
mod queue_cli;
mod run_cli;
mod secrets;
mod serve;
mod smollm;
mod streaming;
mod synth;
mod table;
mod tokenizer_files;
mod zeroshot;
