//! Text ↔ token ids through Hugging Face `tokenizers`, built from a `tokenizer.json` file, from
//! a GPT-2 style `vocab.json` and `merges.txt` (OPT's hub folders), or from a GGUF vocabulary.
//! Special tokens follow the tokenizer's own setting (its post-processor): Llama-2/3 and OPT
//! prepend BOS, SmolLM2 adds nothing.

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
    /// The SHA-256 of its serialised definition, made on first use ([`Self::identity`]).
    identity: std::sync::OnceLock<Option<[u8; 32]>>,
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

    /// Loads the tokenizer of a Hugging Face folder: its `tokenizer.json`, or else, as
    /// transformers does for GPT-2 and OPT folders that ship only the slow tokenizer's files,
    /// the byte-level BPE of `vocab.json` and `merges.txt` ([`Tokenizer::from_vocab_merges`]).
    pub fn from_folder(folder: &Path) -> Result<Self, TokenizerError> {
        let json = folder.join("tokenizer.json");
        let vocab = folder.join("vocab.json");
        if json.is_file() || !vocab.is_file() {
            return Self::from_file(&json);
        }
        Self::from_vocab_merges(folder)
    }

    /// The byte-level BPE of `vocab.json` and `merges.txt` in `folder`, set up as
    /// transformers' converter of the GPT-2 slow tokenizer sets it up: the GPT-2
    /// pre-tokenizer (with a leading space only where `tokenizer_config.json` says
    /// `add_prefix_space`), the byte-level decoder, and the BOS token before each sequence only
    /// where it says `add_bos_token` (OPT's does). The special tokens of
    /// `special_tokens_map.json` and `tokenizer_config.json` are recognised in text.
    pub fn from_vocab_merges(folder: &Path) -> Result<Self, TokenizerError> {
        use tokenizers::models::bpe::BPE;
        use tokenizers::pre_tokenizers::byte_level::ByteLevel;
        use tokenizers::processors::template::TemplateProcessing;

        let vocab = folder.join("vocab.json");
        let merges = folder.join("merges.txt");
        let source_name = vocab.display().to_string();
        let load_error = |reason: String| TokenizerError::Load {
            source_name: source_name.clone(),
            reason,
        };
        let path_str = |p: &Path| {
            p.to_str()
                .map(str::to_owned)
                .ok_or_else(|| load_error(format!("`{}` is not UTF-8", p.display())))
        };
        let bpe = BPE::from_file(&path_str(&vocab)?, &path_str(&merges)?)
            .build()
            .map_err(|e| load_error(format!("with `{}`: {e}", merges.display())))?;
        let settings = SlowTokenizerSettings::read(folder).map_err(load_error)?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(ByteLevel::new(settings.add_prefix_space, true, true)));
        inner.with_decoder(Some(ByteLevel::default()));
        let specials: Vec<tokenizers::AddedToken> = settings
            .special_tokens
            .iter()
            .map(|t| tokenizers::AddedToken::from(t.clone(), true))
            .collect();
        inner.add_special_tokens(&specials);
        match settings.bos_token.filter(|_| settings.add_bos_token) {
            Some(bos) => {
                let id = inner.token_to_id(&bos).ok_or_else(|| {
                    load_error(format!(
                        "`add_bos_token` is set but the BOS token `{bos}` is not in the vocabulary"
                    ))
                })?;
                let processor = TemplateProcessing::builder()
                    .try_single(format!("{bos}:0 $A:0"))
                    .and_then(|b| b.try_pair(format!("{bos}:0 $A:0 $B:1")))
                    .map_err(load_error)?
                    .special_tokens(vec![(bos, id)])
                    .build()
                    .map_err(|e| load_error(e.to_string()))?;
                inner.with_post_processor(Some(processor));
            }
            None => {
                inner.with_post_processor(Some(ByteLevel::default().trim_offsets(false)));
            }
        }
        Ok(Self::new(inner, source_name))
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
        Ok(Self::new(inner, source_name.to_string()))
    }

    fn new(inner: tokenizers::Tokenizer, source_name: String) -> Self {
        Self {
            inner,
            source_name,
            identity: std::sync::OnceLock::new(),
        }
    }

    /// The SHA-256 of the whole definition as `tokenizers` serialises it (vocabulary, merges,
    /// normalizer, pre-tokenizer, post-processor, added tokens): the same definition gives
    /// the same hash however it was loaded, and equal hashes encode alike; `None` where it
    /// cannot be serialised. Made once.
    pub fn identity(&self) -> Option<[u8; 32]> {
        *self.identity.get_or_init(|| {
            use sha2::Digest;
            let json = self.inner.to_string(false).ok()?;
            Some(sha2::Sha256::digest(json.as_bytes()).into())
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

/// What transformers' slow GPT-2 tokenizer reads from `tokenizer_config.json` and
/// `special_tokens_map.json` (absent files and keys take its defaults).
#[derive(Debug, Default)]
struct SlowTokenizerSettings {
    add_prefix_space: bool,
    add_bos_token: bool,
    bos_token: Option<String>,
    /// Every special token named by either file, in the order first named.
    special_tokens: Vec<String>,
}

impl SlowTokenizerSettings {
    fn read(folder: &Path) -> Result<Self, String> {
        let mut settings = Self::default();
        let json = |name: &str| -> Result<Option<serde_json::Value>, String> {
            let path = folder.join(name);
            if !path.is_file() {
                return Ok(None);
            }
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{name}: {e}"))?;
            serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| format!("{name}: not valid JSON: {e}"))
        };
        // A token is written as its text or as `{"content": text, …}`.
        let content = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => Some(s.clone()),
            other => other.get("content")?.as_str().map(str::to_owned),
        };
        let add = |settings: &mut Self, token: Option<String>| {
            if let Some(t) = token.filter(|t| !settings.special_tokens.contains(t)) {
                settings.special_tokens.push(t);
            }
        };
        for name in ["special_tokens_map.json", "tokenizer_config.json"] {
            let Some(map) = json(name)? else { continue };
            for key in [
                "bos_token",
                "eos_token",
                "unk_token",
                "sep_token",
                "pad_token",
            ] {
                add(&mut settings, map.get(key).and_then(content));
            }
            if let Some(bos) = map.get("bos_token").and_then(content) {
                settings.bos_token = Some(bos);
            }
            if let Some(tokens) = map.get("added_tokens_decoder").and_then(|d| d.as_object()) {
                for token in tokens.values() {
                    if token.get("special").and_then(|s| s.as_bool()) == Some(true) {
                        add(&mut settings, content(token));
                    }
                }
            }
            let flag = |key: &str| map.get(key).and_then(|v| v.as_bool());
            settings.add_prefix_space =
                flag("add_prefix_space").unwrap_or(settings.add_prefix_space);
            settings.add_bos_token = flag("add_bos_token").unwrap_or(settings.add_bos_token);
        }
        Ok(settings)
    }
}

impl crate::data::TextEncoder for Tokenizer {
    type Error = TokenizerError;
    fn encode_text(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.encode(text)
    }

    fn identity(&self) -> Option<[u8; 32]> {
        Tokenizer::identity(self)
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
    fn identity_is_the_same_for_the_same_definition_and_differs_for_another() {
        let a = Tokenizer::from_json(&with_normalizer("null"), "a.json").unwrap();
        let b = Tokenizer::from_json(&with_normalizer("null"), "b.json").unwrap();
        let lower = Tokenizer::from_json(&with_normalizer(r#"{"type":"Lowercase"}"#), "c.json");
        let lower = lower.unwrap();
        assert!(a.identity().is_some());
        assert_eq!(
            a.identity(),
            b.identity(),
            "where it was read from does not matter"
        );
        assert_ne!(
            a.identity(),
            lower.identity(),
            "a normalizer changes the ids"
        );
        assert_eq!(lower.encode("CAT").unwrap(), vec![1]);
        assert_eq!(a.encode("CAT").unwrap(), vec![0]);
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
