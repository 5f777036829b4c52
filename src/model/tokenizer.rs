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

/// Rejects, with an error, the definitions on which `tokenizers` 0.22 panics instead of
/// returning one (found by fuzzing): text that is not JSON (its decoder reader `expect`s) and a
/// `Precompiled` normalizer whose fields do not deserialize (its normalizer reader `expect`s).
fn check_upstream_panics(json: &str) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("not valid JSON: {e}"))?;
    let mut pending = vec![("$".to_string(), &value)];
    while let Some((key, node)) = pending.pop() {
        match node {
            serde_json::Value::Object(map) => {
                if map.get("type").and_then(|t| t.as_str()) == Some("Precompiled") {
                    serde_json::from_value::<tokenizers::normalizers::precompiled::Precompiled>(
                        node.clone(),
                    )
                    .map_err(|e| format!("`{key}`: invalid Precompiled normalizer: {e}"))?;
                }
                pending.extend(map.iter().map(|(k, v)| (format!("{key}.{k}"), v)));
            }
            serde_json::Value::Array(items) => {
                pending.extend(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (format!("{key}[{i}]"), v)),
                );
            }
            _ => {}
        }
    }
    Ok(())
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
        let json = std::fs::read_to_string(path).map_err(|e| TokenizerError::Load {
            source_name: source_name.clone(),
            reason: e.to_string(),
        })?;
        Self::from_json(&json, &source_name)
    }

    /// Loads a tokenizer from the JSON text of a `tokenizer.json`.
    pub fn from_json(json: &str, source_name: &str) -> Result<Self, TokenizerError> {
        let load_error = |reason: String| TokenizerError::Load {
            source_name: source_name.to_string(),
            reason,
        };
        check_upstream_panics(json).map_err(load_error)?;
        let inner: tokenizers::Tokenizer = json
            .parse()
            .map_err(|e: tokenizers::Error| load_error(e.to_string()))?;
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
    ///
    /// Encoding a whole text takes ~100 bytes of heap per byte of text, all freed at the end;
    /// after a long text the freed heap goes back to the kernel, so it is not counted in the
    /// resident set of the rest of the run.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        /// Texts from this length on leave enough freed heap to hand back.
        const LONG_TEXT: usize = 1 << 16;
        let encoding = self
            .inner
            .encode(text, true)
            .map_err(|e| self.run_error(e))?;
        let ids = encoding.get_ids().to_vec();
        drop(encoding);
        if text.len() >= LONG_TEXT {
            crate::sys::allocator::release_freed_memory();
        }
        Ok(ids)
    }

    /// Encodes `text`, adding the tokenizer's special tokens (a BOS, say) only when `special`;
    /// special tokens written in the text are recognised either way.
    pub fn encode_with(&self, text: &str, special: bool) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode(text, special)
            .map_err(|e| self.run_error(e))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// One token as the text it decodes to, special tokens included (`<|endoftext|>`).
    pub fn token_text(&self, id: u32) -> Result<String, TokenizerError> {
        self.inner
            .decode(&[id], false)
            .map_err(|e| self.run_error(e))
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

impl crate::data::TextEncoder for Tokenizer {
    type Error = TokenizerError;
    fn encode_text(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.encode(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORD_LEVEL: &str = r#"{"version":"1.0","truncation":null,"padding":null,
"added_tokens":[],"normalizer":NORMALIZER,"pre_tokenizer":{"type":"Whitespace"},
"post_processor":null,"decoder":null,
"model":{"type":"WordLevel","vocab":{"[UNK]":0,"cat":1},"unk_token":"[UNK]"}}"#;

    fn with_normalizer(normalizer: &str) -> String {
        WORD_LEVEL.replace("NORMALIZER", normalizer)
    }

    #[test]
    fn a_well_formed_definition_loads_and_encodes() {
        let tokenizer = Tokenizer::from_json(&with_normalizer("null"), "t.json").unwrap();
        assert_eq!(tokenizer.encode("cat dog").unwrap(), vec![1, 0]);
    }

    #[test]
    fn text_that_is_not_json_is_an_error_naming_the_file_not_a_panic() {
        // The fuzz finding: a broken `decoder` value made `tokenizers` panic.
        let broken = with_normalizer("null").replace(r#""decoder":null"#, r#""decoder":lstrip"#);
        let err = Tokenizer::from_json(&broken, "models/x/tokenizer.json").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("models/x/tokenizer.json"), "{message}");
        assert!(message.contains("not valid JSON"), "{message}");
    }

    #[test]
    fn a_broken_precompiled_normalizer_is_an_error_naming_its_key() {
        let nested = r#"{"type":"Sequence","normalizers":[{"type":"Precompiled","precompiled_charsmap":"!!"}]}"#;
        let err = Tokenizer::from_json(&with_normalizer(nested), "t.json").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("$.normalizer.normalizers[0]"), "{message}");
        assert!(message.contains("Precompiled"), "{message}");
    }
}
