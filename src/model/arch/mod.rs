//! The ground floor of [`crate::model`]: names and descriptions only, which every floor above
//! reads. A config here is plain data; what needs a family to decide (resolving a
//! `config.json`, writing one back) lives in [`crate::model::family`].

pub mod alibi;
mod architecture;
mod attention;
mod config;
mod experts;
mod extras;
mod hf_config;
mod keys;
pub mod rope;
mod shape;
mod stacks;

pub use architecture::*;
pub use attention::*;
pub use config::*;
pub use experts::*;
pub use extras::*;
pub use hf_config::*;
pub use shape::*;
pub use stacks::*;
