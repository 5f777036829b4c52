//! SHA-256 digests of input files, so every run record says exactly which bytes it used.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// Hex SHA-256 of a file's contents, streamed.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// Hex SHA-256 over several files in the given order (name and contents of each).
pub fn sha256_files(paths: &[&Path]) -> std::io::Result<String> {
    let mut hasher = FilesHasher::default();
    for path in paths {
        hasher.add(path, &sha256_file(path)?);
    }
    Ok(hasher.finish())
}

/// [`sha256_files`] from file digests already known: add each file's name and digest in order.
#[derive(Default)]
pub struct FilesHasher(Sha256);

impl FilesHasher {
    /// Adds one file: its name and its hex digest.
    pub fn add(&mut self, path: &Path, digest: &str) {
        self.0.update(
            path.file_name()
                .map(|n| n.as_encoded_bytes())
                .unwrap_or_default(),
        );
        self.0.update(digest.as_bytes());
    }

    /// The hex digest over every file added.
    pub fn finish(self) -> String {
        format!("{:x}", self.0.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("abc.txt");
        std::fs::write(&p, "abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_ne!(sha256_files(&[&p]).unwrap(), sha256_file(&p).unwrap());
    }
}
