//! SHA-256 digests of large input files kept between runs. Every run records the SHA-256 of
//! its checkpoint and data files, and one core hashes about 1.4 GB/s: a 10 GB shard of
//! Llama-2-7B takes 7 s, longer than PyTorch takes to load the whole model, and every process
//! (each `wanda prune`, each cell of a Slurm array) hashed it again.
//!
//! An entry is kept per file (named by the SHA-256 of its canonical path) with the file's
//! identity when it was hashed: device, inode, size, and modification and status-change times
//! to the nanosecond. A later run trusts the digest only while all of them are unchanged; any
//! write to the file changes its status-change time, which no tool can set back, so a file
//! rewritten in place or replaced under the same name is hashed again. A digest is stored only
//! when the identity is the same after hashing as before, and when the file's last change is
//! [`SETTLED`] old: file systems stamp times from a coarse clock (a few milliseconds, a second
//! on some), so a file changed again within one tick of its hashing would keep its times (git's
//! "racy clean" files). Entries are written atomically; a damaged one is a miss.
//!
//! The folder is `~/.cache/wanda/digests` (`WANDA_DIGEST_CACHE` moves it, `off` keeps none;
//! [`crate::sys::cache_dir`]); files under [`MIN_CACHED_BYTES`] are always hashed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::sys::atomic::write_atomic;
use crate::sys::cache_dir::{self, DIGESTS};

/// Files smaller than this are hashed every time (a config, a pipeline, a short text): reading
/// an entry would cost about what hashing them does.
pub const MIN_CACHED_BYTES: u64 = 16 << 20;

/// How long ago a file must have last changed for its digest to be remembered.
pub const SETTLED: Duration = Duration::from_secs(2);

/// The first line's first word of every entry (its format's version).
const MAGIC: &str = "wanda-digest-1";

/// What identifies a file's contents without reading them (`stat`'s fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    device: u64,
    inode: u64,
    bytes: u64,
    modified_ns: i128,
    changed_ns: i128,
}

impl Identity {
    /// The identity of the file `path` now; `None` where the platform gives no inode.
    fn of(path: &Path) -> std::io::Result<Option<Self>> {
        let meta = std::fs::metadata(path)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
            Ok(Some(Self {
                device: meta.dev(),
                inode: meta.ino(),
                bytes: meta.size(),
                modified_ns: ns(meta.mtime(), meta.mtime_nsec()),
                changed_ns: ns(meta.ctime(), meta.ctime_nsec()),
            }))
        }
        #[cfg(not(unix))]
        {
            let _ = meta;
            Ok(None)
        }
    }

    /// Whether the file last changed at least `settled` before `now`.
    fn settled(&self, now: SystemTime, settled: Duration) -> bool {
        let Ok(now) = now.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let last = self.modified_ns.max(self.changed_ns);
        i128::try_from(now.as_nanos()).is_ok_and(|now| now - last >= settled.as_nanos() as i128)
    }

    fn line(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.device, self.inode, self.bytes, self.modified_ns, self.changed_ns
        )
    }
}

/// A folder of remembered digests.
#[derive(Debug, Clone)]
pub struct DigestCache {
    dir: PathBuf,
    min_bytes: u64,
    settled: Duration,
}

impl DigestCache {
    /// The cache at `dir` (made if missing), remembering files of at least `min_bytes` whose
    /// last change is `settled` old.
    pub fn at(dir: &Path, min_bytes: u64, settled: Duration) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            min_bytes,
            settled,
        })
    }

    /// This process's cache under [`DIGESTS`]' root, prepared once; `None` where it is
    /// switched off or cannot be made (a one-line warning says why).
    pub fn from_env() -> Option<&'static Self> {
        static CACHE: OnceLock<Option<DigestCache>> = OnceLock::new();
        CACHE
            .get_or_init(|| {
                let root = cache_dir::cache_root_from_env(DIGESTS)?;
                match cache_dir::prepare(&root, "sha256", "files") {
                    Ok(dir) => {
                        remove_stale_entries(&dir, SystemTime::now());
                        Some(Self {
                            dir,
                            min_bytes: MIN_CACHED_BYTES,
                            settled: SETTLED,
                        })
                    }
                    Err(why) => {
                        eprintln!(
                            "warning: digest cache {}: {why}; hashing every input file this run \
                             (set {} to a writable folder, or to `off`)",
                            root.display(),
                            DIGESTS.var
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The hex SHA-256 of `path`'s contents: remembered where an entry holds the file as it is
    /// now, else hashed (and remembered when the file is large enough, did not change while it
    /// was read and had settled). An entry that cannot be written is skipped.
    pub fn sha256(&self, path: &Path) -> std::io::Result<String> {
        let before = Identity::of(path)?;
        let Some(before) = before.filter(|id| id.bytes >= self.min_bytes) else {
            return super::hash::sha256_file(path);
        };
        let canonical = std::fs::canonicalize(path)?;
        let entry = self.entry_path(&canonical);
        if let Some(digest) = std::fs::read_to_string(&entry)
            .ok()
            .and_then(|text| parse(&text, &canonical, &before))
        {
            return Ok(digest);
        }
        let digest = super::hash::sha256_file(path)?;
        if Identity::of(path)? == Some(before) && before.settled(SystemTime::now(), self.settled) {
            let _ = write_atomic(&entry, render(&canonical, &before, &digest).as_bytes());
        }
        Ok(digest)
    }

    fn entry_path(&self, canonical: &Path) -> PathBuf {
        let key = Sha256::digest(canonical.as_os_str().as_encoded_bytes());
        self.dir.join(format!("{key:x}"))
    }
}

/// The hex SHA-256 of `path`'s contents, through this process's [`DigestCache`] where there is
/// one (the digest of an unchanged large file is not computed again). The cache is opened only
/// for a file of [`MIN_CACHED_BYTES`] or more, so a run that hashes only small files makes no
/// cache folder and scans none.
pub fn sha256_file_remembered(path: &Path) -> std::io::Result<String> {
    let large = std::fs::metadata(path)?.len() >= MIN_CACHED_BYTES;
    match large.then(DigestCache::from_env).flatten() {
        Some(cache) => cache.sha256(path),
        None => super::hash::sha256_file(path),
    }
}

/// Removes the entries under `dir` written more than [`cache_dir::STALE_DAYS`] before `now`
/// (those of files long deleted, such as a test's temporary models; a file still in use is
/// hashed once again). Best effort.
fn remove_stale_entries(dir: &Path, now: SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let limit = Duration::from_secs(cache_dir::STALE_DAYS * 24 * 3600);
    for entry in entries.flatten() {
        let written = entry.metadata().and_then(|m| m.modified());
        if written.is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > limit)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// An entry: the format, the file's canonical path, its identity and its digest, a line each.
fn render(canonical: &Path, identity: &Identity, digest: &str) -> String {
    format!(
        "{MAGIC}\n{}\n{}\n{digest}\n",
        canonical.display(),
        identity.line()
    )
}

/// The digest an entry holds when it was written by [`render`] for `canonical` as `identity`
/// says it is; `None` for anything else.
fn parse(text: &str, canonical: &Path, identity: &Identity) -> Option<String> {
    let mut lines = text.split('\n');
    let fields = (lines.next()?, lines.next()?, lines.next()?, lines.next()?);
    let (magic, path, stamp, digest) = fields;
    let well_formed = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
    (magic == MAGIC
        && path == canonical.display().to_string()
        && stamp == identity.line()
        && well_formed
        && lines.next() == Some("")
        && lines.next().is_none())
    .then(|| digest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::hash::sha256_file;

    /// A cache of files from 1 KiB that remembers files however recently they changed.
    fn cache(dir: &Path) -> DigestCache {
        DigestCache::at(&dir.join("digests"), 1024, Duration::ZERO).unwrap()
    }

    /// Longer than a file system's timestamp tick, so a rewrite gets new times.
    fn tick() {
        std::thread::sleep(Duration::from_millis(50));
    }

    fn entries(cache: &DigestCache) -> Vec<PathBuf> {
        std::fs::read_dir(&cache.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    #[test]
    fn a_large_file_is_hashed_once_and_its_entry_then_answers() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let file = dir.path().join("shard.safetensors");
        std::fs::write(&file, vec![7u8; 4096]).unwrap();
        let digest = cache.sha256(&file).unwrap();
        assert_eq!(digest, sha256_file(&file).unwrap());
        let written = entries(&cache);
        assert_eq!(written.len(), 1);
        // The entry is what answers now: one that says another digest is believed while the
        // file is unchanged (which is how the test sees that nothing was hashed).
        let text = std::fs::read_to_string(&written[0]).unwrap();
        let planted = "f".repeat(64);
        std::fs::write(&written[0], text.replace(&digest, &planted)).unwrap();
        assert_eq!(cache.sha256(&file).unwrap(), planted);
        // Any path to the same file finds the same entry.
        let indirect = dir.path().join(".").join("shard.safetensors");
        assert_eq!(cache.sha256(&indirect).unwrap(), planted);
    }

    #[test]
    fn a_file_rewritten_in_place_with_the_same_size_is_hashed_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let file = dir.path().join("model.gguf");
        std::fs::write(&file, vec![1u8; 2048]).unwrap();
        let first = cache.sha256(&file).unwrap();
        let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
        tick();
        std::fs::write(&file, vec![2u8; 2048]).unwrap();
        // Even with its modification time set back, the status-change time has moved.
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        let second = cache.sha256(&file).unwrap();
        assert_ne!(first, second);
        assert_eq!(second, sha256_file(&file).unwrap());
        assert_eq!(
            cache.sha256(&file).unwrap(),
            second,
            "the new entry answers"
        );
        assert_eq!(entries(&cache).len(), 1, "one entry per file");
    }

    #[test]
    fn a_file_replaced_under_its_name_is_hashed_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let file = dir.path().join("model.safetensors");
        std::fs::write(&file, vec![3u8; 2048]).unwrap();
        let first = cache.sha256(&file).unwrap();
        let other = dir.path().join("other");
        tick();
        std::fs::write(&other, vec![4u8; 2048]).unwrap();
        std::fs::rename(&other, &file).unwrap();
        assert_ne!(cache.sha256(&file).unwrap(), first);
        assert_eq!(cache.sha256(&file).unwrap(), sha256_file(&file).unwrap());
    }

    #[test]
    fn small_files_are_not_remembered_and_damaged_entries_are_misses() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let small = dir.path().join("config.json");
        std::fs::write(&small, b"{}").unwrap();
        assert_eq!(cache.sha256(&small).unwrap(), sha256_file(&small).unwrap());
        assert!(entries(&cache).is_empty());

        let file = dir.path().join("big");
        std::fs::write(&file, vec![5u8; 1024]).unwrap();
        let digest = cache.sha256(&file).unwrap();
        let entry = entries(&cache).remove(0);
        let text = std::fs::read_to_string(&entry).unwrap();
        for damaged in [
            text[..text.len() - 2].to_string(),
            text.replace(MAGIC, "wanda-digest-0"),
            text.replace(&digest, &"g".repeat(64)),
            format!("{text}extra\n"),
            String::new(),
        ] {
            std::fs::write(&entry, &damaged).unwrap();
            assert_eq!(cache.sha256(&file).unwrap(), digest, "{damaged:?}");
            assert_eq!(std::fs::read_to_string(&entry).unwrap(), text, "rewritten");
        }
    }

    #[test]
    fn a_file_changed_within_the_settling_time_is_not_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let digests = dir.path().join("digests");
        let cache = DigestCache::at(&digests, 1024, Duration::from_secs(3600)).unwrap();
        let file = dir.path().join("fresh");
        std::fs::write(&file, vec![6u8; 4096]).unwrap();
        assert_eq!(cache.sha256(&file).unwrap(), sha256_file(&file).unwrap());
        assert!(entries(&cache).is_empty());
        let now = SystemTime::now();
        let id = Identity::of(&file).unwrap().unwrap();
        assert!(!id.settled(now, Duration::from_secs(3600)));
        assert!(id.settled(now + Duration::from_secs(3601), Duration::from_secs(3600)));
    }

    #[test]
    fn entries_unwritten_for_the_stale_days_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let file = dir.path().join("big");
        std::fs::write(&file, vec![8u8; 2048]).unwrap();
        cache.sha256(&file).unwrap();
        let days = |d: u64| Duration::from_secs(d * 24 * 3600);
        remove_stale_entries(
            &cache.dir,
            SystemTime::now() + days(cache_dir::STALE_DAYS - 1),
        );
        assert_eq!(entries(&cache).len(), 1);
        remove_stale_entries(
            &cache.dir,
            SystemTime::now() + days(cache_dir::STALE_DAYS + 1),
        );
        assert!(entries(&cache).is_empty());
    }

    #[test]
    fn a_missing_file_is_an_error_and_leaves_no_entry() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path());
        let err = cache.sha256(&dir.path().join("absent")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert!(entries(&cache).is_empty());
    }
}
