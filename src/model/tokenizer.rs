//! Text ↔ token ids through Hugging Face `tokenizers`, built from a `tokenizer.json` file or
//! from a GGUF vocabulary. Special tokens follow the tokenizer's own setting (its
//! post-processor): Llama-2/3 prepend BOS, SmolLM2 adds nothing.

use std::path::Path;

/// Errors while loading or running a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The definition could not be loaded.
    #[error("cannot load tokenizer from `{source_name}`: {reason}")]
    Load {
        /// File or checkpoint the tokenizer came from.
        source_name: String,
        /// What `tokenizers` said.
        reason: String,
    },
    /// Encoding or decoding failed.
    #[error("tokenizer `{source_name}` failed: {reason}")]
    Run {
        /// File or checkpoint the tokenizer came from.
        source_name: String,
        /// What `tokenizers` said.
        reason: String,
    },
}

/// A loaded tokenizer and where it came from.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    source_name: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("source", &self.source_name)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl Tokenizer {
    /// Loads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let source_name = path.display().to_string();
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| TokenizerError::Load {
            source_name: source_name.clone(),
            reason: e.to_string(),
        })?;
        Ok(Self { inner, source_name })
    }

    /// Loads a tokenizer from the JSON text of a `tokenizer.json`.
    pub fn from_json(json: &str, source_name: &str) -> Result<Self, TokenizerError> {
        let inner: tokenizers::Tokenizer =
            json.parse()
                .map_err(|e: tokenizers::Error| TokenizerError::Load {
                    source_name: source_name.to_string(),
                    reason: e.to_string(),
                })?;
        Ok(Self {
            inner,
            source_name: source_name.to_string(),
        })
    }

    /// The tokenizer definition as `tokenizer.json` text (for saving a model folder).
    pub fn to_json(&self) -> Result<String, TokenizerError> {
        self.inner.to_string(true).map_err(|e| self.run_error(e))
    }

    /// Encodes `text` as one sequence, adding special tokens as the tokenizer defines.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode(text, true)
            .map_err(|e| self.run_error(e))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Decodes ids to text, skipping special tokens.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner.decode(ids, true).map_err(|e| self.run_error(e))
    }

    /// Number of ids, including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The token text of `id`, if the vocabulary has it.
    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Where this tokenizer was loaded from.
    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    fn run_error(&self, e: tokenizers::Error) -> TokenizerError {
        TokenizerError::Run {
            source_name: self.source_name.clone(),
            reason: e.to_string(),
        }
    }
}
