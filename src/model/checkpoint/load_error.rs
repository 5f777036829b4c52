//! Why a model could not be loaded ([`LoadError`]), from any of its sources.

use crate::data::hub;
use crate::model::arch::ConfigError;

use super::{TokenizerError, WeightError};

/// Errors while loading a model.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The model argument names nothing loadable.
    #[error("model `{arg}` {reason}")]
    UnknownModelArg {
        /// What was given.
        arg: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// config.json problems.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Weight problems.
    #[error(transparent)]
    Weights(#[from] WeightError),
    /// Tokenizer problems.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// Hub problems.
    #[error(transparent)]
    Hub(#[from] hub::HubError),
    /// Layer streaming problems.
    #[error(transparent)]
    Stream(#[from] super::StreamError),
    /// A file of the model folder could not be read.
    #[error("cannot read `{path}`")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The tokenizer and the model disagree.
    #[error(
        "tokenizer of `{model}` has {tokenizer} ids but the model's vocabulary has {model_vocab}"
    )]
    VocabMismatch {
        /// The model.
        model: String,
        /// Tokenizer vocabulary size.
        tokenizer: usize,
        /// Model vocabulary size.
        model_vocab: usize,
    },
}
