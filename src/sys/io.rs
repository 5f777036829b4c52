//! Bytes the process moved to and from storage, from Linux's `/proc/self/io` (all threads,
//! page-fault reads of memory maps included; reads served from the page cache are not storage
//! reads and do not count). Absent on other systems.

use serde::{Deserialize, Serialize};

/// Storage bytes read and written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoBytes {
    /// Bytes fetched from storage (`read_bytes`).
    pub read_bytes: u64,
    /// Bytes sent to storage, less those truncated before they were written back
    /// (`write_bytes − cancelled_write_bytes`).
    pub write_bytes: u64,
}

impl IoBytes {
    /// The process's totals so far; `None` where `/proc/self/io` cannot be read.
    pub fn now() -> Option<Self> {
        std::fs::read_to_string("/proc/self/io")
            .ok()
            .and_then(|text| Self::parse(&text))
    }

    /// What was moved between `earlier` and `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
        }
    }

    fn parse(text: &str) -> Option<Self> {
        let field = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let cancelled = field("cancelled_write_bytes").unwrap_or(0);
        Some(Self {
            read_bytes: field("read_bytes")?,
            write_bytes: field("write_bytes")?.saturating_sub(cancelled),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_self_io_is_parsed_and_differenced() {
        let text = "rchar: 6976\nwchar: 10\nsyscr: 10\nsyscw: 0\nread_bytes: 45056\n\
                    write_bytes: 8192\ncancelled_write_bytes: 4096\n";
        let now = IoBytes::parse(text).unwrap();
        assert_eq!(
            now,
            IoBytes {
                read_bytes: 45056,
                write_bytes: 4096
            }
        );
        let earlier = IoBytes {
            read_bytes: 4096,
            write_bytes: 0,
        };
        assert_eq!(now.since(earlier).read_bytes, 40960);
        assert_eq!(IoBytes::parse("rchar: 1\n"), None);
        if cfg!(target_os = "linux") {
            assert!(IoBytes::now().is_some());
        }
    }
}
