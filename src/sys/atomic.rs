//! Files that appear whole or not at all: writes to a temporary name and a rename, and the
//! removal of what a process that died mid-write left behind.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` so that readers see the old file or the new one, never a part:
/// a temp file in the same folder (same file system, so the rename is atomic), fsync, rename,
/// then fsync of the folder so the rename itself survives a crash.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "path has no file name")
    })?;
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    remove_orphans(&dir, &prefix);
    let temp = dir.join(format!(
        "{prefix}{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, path)?;
        // Directory fsync makes the rename durable; not every platform allows opening a folder.
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// Removes what processes that died mid-write left in `dir`: entries named `{prefix}{pid}…`
/// (temp files, staging folders) whose process id no longer exists. Checked through `/proc`;
/// without it nothing is removed.
pub fn remove_orphans(dir: &Path, prefix: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !pid.is_empty() && !Path::new("/proc").join(&pid).exists() {
            let path = entry.path();
            let _ = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
        }
    }
}

/// Asks the kernel to start writing `file`'s dirty pages to storage without waiting for them
/// (Linux's `sync_file_range(SYNC_FILE_RANGE_WRITE)`), so a large file written in pieces reaches
/// the disk while the next pieces are made, and the final `sync_all` waits only for the last.
/// Elsewhere, and where the call fails, the pages go at the kernel's pace as before.
#[allow(unsafe_code)]
pub fn start_writeback(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor belongs to `file`, open for the whole call; the call only
        // schedules writeback of its pages and touches no memory of this process.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_the_file_whole_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "a temporary file was left behind");
    }

    #[test]
    fn leftovers_of_dead_processes_go_and_those_of_live_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join(".run.json.tmp-999999999-0");
        let live = dir
            .path()
            .join(format!(".run.json.tmp-{}-0", std::process::id()));
        let other = dir.path().join("notes.txt");
        for path in [&dead, &live, &other] {
            fs::write(path, b"x").unwrap();
        }
        remove_orphans(dir.path(), ".run.json.tmp-");
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
    }
}
