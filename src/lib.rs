//! `wanda`: declarative LLM-pruning experiments (Wanda, SparseGPT, magnitude) on Burn.
//!
//! The library holds the domain code; the `wanda` binary (`src/main.rs`, `src/cli/`) names the
//! concrete backend and handles the command line.

pub mod data;
pub mod eval;
pub mod fuzzing;
pub mod memory;
pub mod model;
pub mod pipeline;
pub mod prune;
pub mod queue;
pub mod report;
pub mod serve;
pub mod stages;
pub mod sys;
