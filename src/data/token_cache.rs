//! Token ids of long texts kept between runs: every cell of a sweep, and every run of a study,
//! tokenises the same calibration and evaluation texts, about 0.7 s for WikiText-2's test split
//! on one core (as long as the model's forward passes in a 1B fp16 cell on an H200). The ids
//! are the tokenizer's own; a run finds them again only for the same text under the same
//! tokenizer, in the same build of wanda.
//!
//! The key is the SHA-256 of the tokenizer's whole definition (as `tokenizers` serialises it:
//! model, normalizer, pre-tokenizer, post-processor, added tokens) and of the text; the folder
//! is one per build ([`crate::sys::cache_dir`], `WANDA_TOKEN_CACHE`, `off` keeps none), so
//! another version of the tokenizer library never reads ids it did not make. An entry is
//! written atomically and carries its own checksum: a truncated or altered file is a miss, and
//! the text is tokenised again. A folder that cannot be made is a one-line warning and a run
//! that tokenises as before; an entry that cannot be written is skipped.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::sys::atomic::write_atomic;
use crate::sys::cache_dir::{self, TOKENS};

/// Texts shorter than this are tokenised every time (a prompt, a C4 document): the hashing
/// and the file would cost about what they save.
pub const MIN_CACHED_BYTES: usize = 1 << 16;

/// The first bytes of every entry (its format's version).
const MAGIC: &[u8; 8] = b"WTOKIDS1";

/// A folder of token ids.
#[derive(Debug, Clone)]
pub struct TokenCache {
    dir: PathBuf,
}

impl TokenCache {
    /// The cache at `dir` (made if missing).
    pub fn at(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// This process's cache: this build's folder under [`TOKENS`]' root, prepared once; `None`
    /// where it is switched off or cannot be made (a one-line warning says why).
    pub fn from_env() -> Option<&'static Self> {
        static CACHE: OnceLock<Option<TokenCache>> = OnceLock::new();
        CACHE
            .get_or_init(|| {
                let root = cache_dir::cache_root_from_env(TOKENS)?;
                match cache_dir::prepare(&root, &cache_dir::build_id(), "ids") {
                    Ok(dir) => Some(Self { dir }),
                    Err(why) => {
                        eprintln!(
                            "warning: token cache {}: {why}; tokenising every text this run (set \
                             {} to a writable folder, or to `off`)",
                            root.display(),
                            TOKENS.var
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The ids stored under `key`, if an intact entry holds them.
    pub fn get(&self, key: &[u8; 32]) -> Option<Vec<u32>> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        decode(&bytes, key)
    }

    /// Stores `ids` under `key`, atomically; best effort (an error leaves no partial entry).
    pub fn put(&self, key: &[u8; 32], ids: &[u32]) -> std::io::Result<()> {
        write_atomic(&self.path(key), &encode(key, ids))
    }

    fn path(&self, key: &[u8; 32]) -> PathBuf {
        self.dir.join(format!("{}.ids", hex(key)))
    }
}

/// The key of `text` under the tokenizer whose definition hashes to `tokenizer`.
pub fn key(tokenizer: &[u8; 32], text: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(tokenizer);
    hasher.update((text.len() as u64).to_le_bytes());
    hasher.update(text.as_bytes());
    hasher.finalize().into()
}

/// `encode(text)` through the cache `cache()` gives where the text is long enough and the
/// tokenizer has an identity (`cache()` and `identity()` are asked only then, so a process that
/// tokenises only short texts never makes the cache's folder): ids found are returned, ids made
/// are stored.
pub fn encode_through<'c, E>(
    cache: impl FnOnce() -> Option<&'c TokenCache>,
    text: &str,
    identity: impl FnOnce() -> Option<[u8; 32]>,
    encode: impl FnOnce(&str) -> Result<Vec<u32>, E>,
) -> Result<Vec<u32>, E> {
    let cache = (text.len() >= MIN_CACHED_BYTES).then(cache).flatten();
    let key = cache.and_then(|_| identity()).map(|id| key(&id, text));
    let (Some(cache), Some(key)) = (cache, key) else {
        return encode(text);
    };
    if let Some(ids) = cache.get(&key) {
        return Ok(ids);
    }
    let ids = encode(text)?;
    let _ = cache.put(&key, &ids);
    Ok(ids)
}

/// An entry: [`MAGIC`], the key, the count (u64), the ids (u32, little-endian each), and the
/// SHA-256 of all that.
fn encode(key: &[u8; 32], ids: &[u32]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(MAGIC.len() + 32 + 8 + ids.len() * 4 + 32);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(key);
    bytes.extend_from_slice(&(ids.len() as u64).to_le_bytes());
    for id in ids {
        bytes.extend_from_slice(&id.to_le_bytes());
    }
    let sum: [u8; 32] = Sha256::digest(&bytes).into();
    bytes.extend_from_slice(&sum);
    bytes
}

/// The ids of an entry written by [`encode`] under `key`; `None` for anything else.
fn decode(bytes: &[u8], key: &[u8; 32]) -> Option<Vec<u32>> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    let (magic, rest) = body.split_at_checked(MAGIC.len())?;
    let (stored_key, rest) = rest.split_at_checked(32)?;
    let (count, ids) = rest.split_at_checked(8)?;
    let count = u64::from_le_bytes(count.try_into().ok()?);
    if magic != MAGIC
        || stored_key != key
        || Some(ids.len() as u64) != count.checked_mul(4)
        || Sha256::digest(body).as_slice() != sum
    {
        return None;
    }
    Some(
        ids.chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

/// Lower-case hexadecimal.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long_text() -> String {
        "a line of text\n".repeat(MIN_CACHED_BYTES / 15 + 1)
    }

    #[test]
    fn ids_made_once_are_found_again_and_an_altered_entry_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TokenCache::at(dir.path()).unwrap();
        let text = long_text();
        let encoded = std::cell::Cell::new(0);
        let run = |cache: &TokenCache| {
            encode_through(
                || Some(cache),
                &text,
                || Some([7; 32]),
                |t| -> Result<Vec<u32>, ()> {
                    encoded.set(encoded.get() + 1);
                    Ok(t.lines().map(|l| l.len() as u32).collect())
                },
            )
            .unwrap()
        };
        let first = run(&cache);
        assert_eq!(first.len(), MIN_CACHED_BYTES / 15 + 1);
        assert_eq!(run(&cache), first);
        assert_eq!(encoded.get(), 1, "the second run read the entry");

        let entry = std::fs::read_dir(dir.path()).unwrap().next().unwrap();
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[60] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(run(&cache), first);
        assert_eq!(encoded.get(), 2, "an altered entry is tokenised again");
        assert_eq!(run(&cache), first);
        assert_eq!(encoded.get(), 2, "and rewritten");
    }

    #[test]
    fn short_texts_and_tokenizers_without_identity_are_not_cached() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TokenCache::at(dir.path()).unwrap();
        let ids = |t: &str| -> Result<Vec<u32>, ()> { Ok(vec![t.len() as u32]) };
        let asked = std::cell::Cell::new(false);
        let identity = || {
            asked.set(true);
            Some([1; 32])
        };
        let opened = std::cell::Cell::new(false);
        let open = || {
            opened.set(true);
            Some(&cache)
        };
        encode_through(open, "short", identity, ids).unwrap();
        assert!(!asked.get(), "no identity is computed for a short text");
        assert!(!opened.get(), "nor is the cache opened");
        encode_through(|| Some(&cache), &long_text(), || None, ids).unwrap();
        encode_through(|| None, &long_text(), || Some([1; 32]), ids).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_encoding_error_is_returned_and_nothing_stored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TokenCache::at(dir.path()).unwrap();
        let failed = encode_through(
            || Some(&cache),
            &long_text(),
            || Some([1; 32]),
            |_| Err("no"),
        );
        assert_eq!(failed, Err("no"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn keys_differ_by_tokenizer_and_text_and_entries_by_key() {
        let text = long_text();
        let k = key(&[1; 32], &text);
        assert_ne!(k, key(&[2; 32], &text));
        assert_ne!(k, key(&[1; 32], &text[1..]));
        let entry = encode(&k, &[1, 2, 3]);
        assert_eq!(decode(&entry, &k), Some(vec![1, 2, 3]));
        assert_eq!(decode(&entry, &key(&[2; 32], &text)), None);
        assert_eq!(decode(&entry[..entry.len() - 1], &k), None);
        assert_eq!(decode(&[], &k), None);
        assert_eq!(decode(&encode(&k, &[]), &k), Some(vec![]));
    }
}
