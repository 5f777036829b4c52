//! Texts from files, tokenised: the one place a calibration or evaluation text is read and
//! turned into token ids.

use std::path::{Path, PathBuf};

/// Text to token ids: what reading a data set needs of a tokenizer (the model's tokenizer
/// implements it; data does not depend on the model).
pub trait TextEncoder {
    /// Why encoding failed.
    type Error: std::error::Error + Send + Sync + 'static;
    /// The token ids of the whole `text`, with the tokenizer's own special-token setting.
    fn encode_text(&self, text: &str) -> Result<Vec<u32>, Self::Error>;

    /// A hash of everything that decides the ids (equal hashes: equal ids for every text),
    /// which lets long texts' ids be reused between runs ([`super::token_cache`]); `None`: never
    /// reused.
    fn identity(&self) -> Option<[u8; 32]> {
        None
    }
}

/// `tokenizer`'s ids of `text`, from this process's token cache where it holds them
/// ([`super::token_cache`]: long texts, a tokenizer with an identity), else tokenised (and
/// kept there).
pub fn encode_cached<T: TextEncoder>(tokenizer: &T, text: &str) -> Result<Vec<u32>, T::Error> {
    super::token_cache::encode_through(
        super::token_cache::TokenCache::from_env,
        text,
        || tokenizer.identity(),
        |t| tokenizer.encode_text(t),
    )
}

/// Why a text could not be read and tokenised.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The tokenizer failed on the text.
    #[error("cannot tokenise `{}`", path.display())]
    Tokenize {
        /// The file.
        path: PathBuf,
        /// The tokenizer's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Reads the UTF-8 text at `path` and tokenises it whole with `tokenizer`.
pub fn read_tokenized<T: TextEncoder>(path: &Path, tokenizer: &T) -> Result<Vec<u32>, TextError> {
    let text = std::fs::read_to_string(path).map_err(|source| TextError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    encode_cached(tokenizer, &text).map_err(|e| TextError::Tokenize {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One id per whitespace-separated word: its length; refuses the word "boom".
    struct WordLengths;

    impl TextEncoder for WordLengths {
        type Error = std::fmt::Error;
        fn encode_text(&self, text: &str) -> Result<Vec<u32>, std::fmt::Error> {
            text.split_whitespace()
                .map(|w| {
                    if w == "boom" {
                        Err(std::fmt::Error)
                    } else {
                        Ok(w.len() as u32)
                    }
                })
                .collect()
        }
    }

    #[test]
    fn a_file_is_read_and_tokenised_and_failures_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("text.txt");
        std::fs::write(&path, "a bb  ccc\n").unwrap();
        assert_eq!(read_tokenized(&path, &WordLengths).unwrap(), vec![1, 2, 3]);

        let missing = dir.path().join("missing.txt");
        let err = read_tokenized(&missing, &WordLengths).unwrap_err();
        assert!(matches!(err, TextError::Read { .. }));
        assert!(err.to_string().contains("missing.txt"), "{err}");

        std::fs::write(&path, "a boom").unwrap();
        let err = read_tokenized(&path, &WordLengths).unwrap_err();
        assert!(matches!(err, TextError::Tokenize { .. }));
        assert!(err.to_string().contains("text.txt"), "{err}");
    }
}
