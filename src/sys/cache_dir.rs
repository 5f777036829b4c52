//! The folders where a run keeps what later runs can reuse: the kernels the CUDA backend
//! compiles, the token ids of long texts and the digests of large files (the data module's
//! token and digest caches).
//!
//! CubeCL compiles every kernel a process launches (CUDA C++ to PTX, by NVRTC) the first time
//! the process launches it, and by default forgets it at exit, so every run, and every cell of
//! a sweep, compiles its kernels again. With a folder for them, a later run loads the PTX
//! instead (and the driver's own cache skips the PTX-to-machine-code step).
//!
//! Each kind of cache has its environment variable ([`KERNELS`]: `WANDA_KERNEL_CACHE`,
//! [`TOKENS`]: `WANDA_TOKEN_CACHE`, [`DIGESTS`]: `WANDA_DIGEST_CACHE`): unset,
//! `$XDG_CACHE_HOME/wanda/<kind>`, else `~/.cache/wanda/<kind>`; `off` (or `0`, or empty)
//! keeps none; anything else is the folder. Under it, kernels and token ids have one folder per
//! build of wanda (its version and the executable's size and time, as kernels of the same name,
//! or a tokenizer library's output, may differ between builds) and, for kernels, per GPU
//! (architecture and driver: PTX for one need not load on another), so machines sharing a home
//! folder never mix them; digests (SHA-256 is SHA-256 in every build) have one folder. A
//! build's folder untouched for [`STALE_DAYS`] days is removed by the next run.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A kind of cache: the environment variable that moves or switches it off, and its folder's
/// name under the default root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheKind {
    /// The environment variable: a folder, or `off`.
    pub var: &'static str,
    /// The folder's name under `~/.cache/wanda`.
    pub leaf: &'static str,
}

/// The CUDA backend's compiled kernels.
pub const KERNELS: CacheKind = CacheKind {
    var: "WANDA_KERNEL_CACHE",
    leaf: "kernels",
};

/// Token ids of long texts (the data module's token cache).
pub const TOKENS: CacheKind = CacheKind {
    var: "WANDA_TOKEN_CACHE",
    leaf: "tokens",
};

/// SHA-256 digests of large input files (the data module's digest cache).
pub const DIGESTS: CacheKind = CacheKind {
    var: "WANDA_DIGEST_CACHE",
    leaf: "digests",
};

/// Days after which another build's unused folder is removed.
pub const STALE_DAYS: u64 = 30;

/// The file whose time says when a build's folder was last used.
const LAST_USED: &str = "last-used";

/// The root folder of a cache of `kind` from the values of its variable, `XDG_CACHE_HOME` and
/// `HOME`; `None` when switched off or when no folder can be named.
pub fn cache_root(
    kind: CacheKind,
    setting: Option<OsString>,
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    match setting {
        Some(v) if v.is_empty() || v == "off" || v == "0" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => {
            let base = match xdg_cache_home.filter(|v| !v.is_empty()) {
                Some(xdg) => PathBuf::from(xdg),
                None => PathBuf::from(home.filter(|v| !v.is_empty())?).join(".cache"),
            };
            Some(base.join("wanda").join(kind.leaf))
        }
    }
}

/// [`cache_root`] of this process's environment.
pub fn cache_root_from_env(kind: CacheKind) -> Option<PathBuf> {
    cache_root(
        kind,
        std::env::var_os(kind.var),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
}

/// This build's name among the cache's folders: the crate's version with the running
/// executable's size and modification time (a rebuild changes them), e.g. `0.1.0-1c9f2a0-65f1b2c3`.
pub fn build_id() -> String {
    let meta = std::env::current_exe().and_then(std::fs::metadata);
    let (len, secs) = meta.map_or((0, 0), |m| {
        let secs = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        (m.len(), secs)
    });
    format!("{}-{len:x}-{secs:x}", env!("CARGO_PKG_VERSION"))
}

/// Makes `root/build/sub` (creating it, marking `build` as used now, and removing other
/// builds' folders unused for [`STALE_DAYS`]) and returns it; an error says why the folder
/// cannot be used, and then the run keeps no cache.
pub fn prepare(root: &Path, build: &str, sub: &str) -> std::io::Result<PathBuf> {
    let dir = root.join(build).join(sub);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(root.join(build).join(LAST_USED), b"")?;
    remove_stale(root, build, SystemTime::now());
    Ok(dir)
}

/// Removes the folders under `root` other than `keep` whose [`LAST_USED`] (or, lacking it, the
/// folder itself) is older than [`STALE_DAYS`] at `now`. Best effort: what cannot be read or
/// removed stays.
fn remove_stale(root: &Path, keep: &str, now: SystemTime) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let limit = Duration::from_secs(STALE_DAYS * 24 * 3600);
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == keep || !path.is_dir() {
            continue;
        }
        let used = std::fs::metadata(path.join(LAST_USED))
            .or_else(|_| std::fs::metadata(&path))
            .and_then(|m| m.modified());
        let stale = used.is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > limit));
        if stale {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    #[test]
    fn root_follows_the_setting_then_xdg_then_home() {
        assert_eq!(cache_root(KERNELS, os("off"), os("/x"), os("/h")), None);
        assert_eq!(cache_root(KERNELS, os("0"), None, os("/h")), None);
        assert_eq!(cache_root(KERNELS, os(""), None, os("/h")), None);
        assert_eq!(
            cache_root(KERNELS, os("/scratch/k"), os("/x"), os("/h")),
            Some(PathBuf::from("/scratch/k"))
        );
        assert_eq!(
            cache_root(KERNELS, None, os("/x"), os("/h")),
            Some(PathBuf::from("/x/wanda/kernels"))
        );
        assert_eq!(
            cache_root(KERNELS, None, os(""), os("/h")),
            Some(PathBuf::from("/h/.cache/wanda/kernels"))
        );
        assert_eq!(cache_root(KERNELS, None, None, None), None);
        assert_eq!(
            cache_root(TOKENS, None, None, os("/h")),
            Some(PathBuf::from("/h/.cache/wanda/tokens"))
        );
    }

    #[test]
    fn build_id_names_the_version_and_the_executable() {
        let id = build_id();
        let parts: Vec<&str> = id.rsplitn(3, '-').collect();
        assert_eq!(parts.len(), 3, "{id}");
        assert_eq!(parts[2], env!("CARGO_PKG_VERSION"));
        let len = u64::from_str_radix(parts[1], 16).expect("hex size");
        let exe = std::fs::metadata(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(len, exe.len());
        assert_eq!(id, build_id(), "stable within a process");
    }

    #[test]
    fn prepare_makes_the_folder_and_removes_only_stale_builds() {
        let root = tempfile::tempdir().unwrap();
        let old = SystemTime::now() - Duration::from_secs((STALE_DAYS + 1) * 24 * 3600);
        let recent = SystemTime::now() - Duration::from_secs((STALE_DAYS - 1) * 24 * 3600);
        for (name, time) in [("old", old), ("recent", recent)] {
            std::fs::create_dir_all(root.path().join(name).join("sm_90")).unwrap();
            let marker = std::fs::File::create(root.path().join(name).join(LAST_USED)).unwrap();
            marker.set_modified(time).unwrap();
        }
        std::fs::write(root.path().join("a-file"), b"kept").unwrap();

        let dir = prepare(root.path(), "this", "sm_90-12080").unwrap();
        assert_eq!(dir, root.path().join("this").join("sm_90-12080"));
        assert!(dir.is_dir());
        assert!(root.path().join("this").join(LAST_USED).is_file());
        assert!(!root.path().join("old").exists(), "stale build removed");
        assert!(root.path().join("recent").join("sm_90").is_dir());
        assert!(root.path().join("a-file").is_file(), "files are not builds");
    }

    #[test]
    fn prepare_says_why_a_folder_cannot_be_used() {
        let root = tempfile::tempdir().unwrap();
        let blocker = root.path().join("not-a-folder");
        std::fs::write(&blocker, b"").unwrap();
        assert!(prepare(&blocker, "b", "sm_80").is_err());
    }
}
