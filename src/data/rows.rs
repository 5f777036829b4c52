//! Rows of data-set files: one string column of JSON-lines files (plain or gzip'd, as C4 is
//! served) and of Parquet files ([`super::parquet`]), and a document store that gives random
//! access to the rows of a large JSON-lines file without holding them in memory.
//!
//! The store is built once per file, in one streaming pass, beside the file's cached blob
//! (`.wanda-index/<blob>/`): `texts` holds the column's strings back to back, `offsets` the
//! little-endian u64 start of each (and the end of the last). Both are written to temporary
//! names and renamed into place, so a killed build leaves no half-made store.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;

pub use super::rows_error::RowsError;

/// Whether `name` is a JSON-lines file this module reads (`.jsonl`, `.json`, either `.gz`).
pub fn is_json_lines(name: &str) -> bool {
    let name = name.strip_suffix(".gz").unwrap_or(name);
    name.ends_with(".jsonl") || name.ends_with(".json")
}

/// Calls `each` with the string `column` of every row of `path` (Parquet or JSON lines, by its
/// name), in order, until `each` returns `Ok(false)`.
pub fn for_each_row(
    path: &Path,
    column: &str,
    mut each: impl FnMut(&str) -> Result<bool, RowsError>,
) -> Result<(), RowsError> {
    let name = path.to_string_lossy();
    if name.ends_with(".parquet") {
        let mut going = true;
        return super::parquet::for_each_string(path, column, |text| {
            if going {
                going = each(text)?;
            }
            Ok(())
        });
    }
    if !is_json_lines(&name) {
        return Err(RowsError::Malformed {
            path: path.to_path_buf(),
            message:
                "not a Parquet (`.parquet`) or JSON-lines (`.jsonl`, `.json`, `.json.gz`) file"
                    .to_owned(),
        });
    }
    let file = File::open(path).map_err(|source| RowsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let reader: Box<dyn Read> = if name.ends_with(".gz") {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut lines = BufReader::with_capacity(1 << 20, reader);
    let mut line = String::new();
    let mut number = 0usize;
    loop {
        line.clear();
        let read = lines
            .read_line(&mut line)
            .map_err(|e| RowsError::Malformed {
                path: path.to_path_buf(),
                message: format!("after line {number}: {e}"),
            })?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        if line.trim().is_empty() {
            continue;
        }
        let text = json_column(&line, column).map_err(|problem| match problem {
            ColumnProblem::Json(message) => RowsError::Malformed {
                path: path.to_path_buf(),
                message: format!("line {number}: {message}"),
            },
            ColumnProblem::Missing(found) => RowsError::MissingColumn {
                path: path.to_path_buf(),
                column: column.to_owned(),
                found,
            },
            ColumnProblem::NotAString => RowsError::Malformed {
                path: path.to_path_buf(),
                message: format!("line {number}: `{column}` is not a string"),
            },
        })?;
        if !each(&text)? {
            return Ok(());
        }
    }
}

/// What is wrong with one JSON line.
enum ColumnProblem {
    Json(String),
    Missing(Vec<String>),
    NotAString,
}

/// The string `column` of one JSON object line.
fn json_column(line: &str, column: &str) -> Result<String, ColumnProblem> {
    let mut row: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).map_err(|e| ColumnProblem::Json(e.to_string()))?;
    match row.remove(column) {
        Some(serde_json::Value::String(text)) => Ok(text),
        Some(_) => Err(ColumnProblem::NotAString),
        None => Err(ColumnProblem::Missing(row.keys().cloned().collect())),
    }
}

/// Random access to the strings of one column of a file, through its store on disk.
pub struct DocumentStore {
    texts: Mmap,
    offsets: Vec<u64>,
    /// The store's folder, removed when it proves damaged.
    dir: PathBuf,
}

impl DocumentStore {
    /// The store of `column` of `path`, built on first use (one pass over the file) and read
    /// back from disk afterwards.
    pub fn open(path: &Path, column: &str) -> Result<Self, RowsError> {
        let dir = store_dir(path, column);
        let (texts_path, offsets_path) = (dir.join("texts"), dir.join("offsets"));
        if !offsets_path.is_file() || !texts_path.is_file() {
            build_store(path, column, &dir)?;
        }
        let read = |p: &Path, source| RowsError::Read {
            path: p.to_path_buf(),
            source,
        };
        let raw = std::fs::read(&offsets_path).map_err(|e| read(&offsets_path, e))?;
        let offsets: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let file = File::open(&texts_path).map_err(|e| read(&texts_path, e))?;
        // SAFETY: the store is written once under a temporary name and renamed into place;
        // nothing writes to it afterwards, and every slice taken is checked against its length.
        #[allow(unsafe_code)]
        let texts = unsafe { Mmap::map(&file) }.map_err(|e| read(&texts_path, e))?;
        let consistent = offsets.first() == Some(&0)
            && offsets.windows(2).all(|w| w[0] <= w[1])
            && offsets.last() == Some(&(texts.len() as u64));
        let store = Self {
            texts,
            offsets,
            dir,
        };
        if !consistent {
            return Err(store.damaged("its offsets do not fit its texts"));
        }
        Ok(store)
    }

    /// Like [`DocumentStore::open`], after removing any store built before (to time the
    /// build: `wanda bench index-documents`).
    pub fn rebuild(path: &Path, column: &str) -> Result<Self, RowsError> {
        let _ = std::fs::remove_dir_all(store_dir(path, column));
        Self::open(path, column)
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether the store holds no document.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Document `i`; a store changed on disk since it was written (text that is no longer
    /// UTF-8) is removed, and the error says so.
    pub fn get(&self, i: usize) -> Result<&str, RowsError> {
        let (start, end) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        std::str::from_utf8(&self.texts[start..end])
            .map_err(|_| self.damaged(&format!("document {i} is not UTF-8")))
    }

    /// The error for a damaged store, after removing it so the next run rebuilds it.
    fn damaged(&self, what: &str) -> RowsError {
        let _ = std::fs::remove_dir_all(&self.dir);
        RowsError::Malformed {
            path: self.dir.clone(),
            message: format!(
                "the document store is damaged ({what}); it was removed, run again to rebuild it"
            ),
        }
    }
}

/// Where the store of `column` of `path` lives: beside the blob a hub-cache link points to
/// (`<repo>/.wanda-index/<blob>-<column>`), else beside the file.
fn store_dir(path: &Path, column: &str) -> PathBuf {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = real.parent().unwrap_or(Path::new("."));
    match parent.file_name() {
        Some(blobs) if blobs == "blobs" => parent
            .parent()
            .unwrap_or(parent)
            .join(".wanda-index")
            .join(format!("{name}-{column}")),
        _ => parent.join(format!(".{name}.wanda-index-{column}")),
    }
}

/// One pass over `path`: the column's strings into `dir/texts`, their offsets into
/// `dir/offsets`, both renamed into place only when the whole file was read.
fn build_store(path: &Path, column: &str, dir: &Path) -> Result<(), RowsError> {
    let write_err = |p: &Path, source| RowsError::Read {
        path: p.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| write_err(dir, e))?;
    let tag = format!(".tmp-{}", std::process::id());
    let (texts_tmp, offsets_tmp) = (
        dir.join(format!("texts{tag}")),
        dir.join(format!("offsets{tag}")),
    );
    let result = (|| {
        let mut texts =
            BufWriter::new(File::create(&texts_tmp).map_err(|e| write_err(&texts_tmp, e))?);
        let mut offsets =
            BufWriter::new(File::create(&offsets_tmp).map_err(|e| write_err(&offsets_tmp, e))?);
        let mut end = 0u64;
        offsets
            .write_all(&end.to_le_bytes())
            .map_err(|e| write_err(&offsets_tmp, e))?;
        for_each_row(path, column, |text| {
            texts
                .write_all(text.as_bytes())
                .map_err(|e| write_err(&texts_tmp, e))?;
            end += text.len() as u64;
            offsets
                .write_all(&end.to_le_bytes())
                .map_err(|e| write_err(&offsets_tmp, e))?;
            Ok(true)
        })?;
        texts.flush().map_err(|e| write_err(&texts_tmp, e))?;
        offsets.flush().map_err(|e| write_err(&offsets_tmp, e))?;
        std::fs::rename(&texts_tmp, dir.join("texts")).map_err(|e| write_err(dir, e))?;
        std::fs::rename(&offsets_tmp, dir.join("offsets")).map_err(|e| write_err(dir, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;

    fn gz(path: &Path, lines: &str) {
        let mut enc = GzEncoder::new(File::create(path).unwrap(), flate2::Compression::fast());
        enc.write_all(lines.as_bytes()).unwrap();
        enc.finish().unwrap();
    }

    fn rows(path: &Path, column: &str) -> Result<Vec<String>, RowsError> {
        let mut out = Vec::new();
        for_each_row(path, column, |t| {
            out.push(t.to_owned());
            Ok(true)
        })?;
        Ok(out)
    }

    #[test]
    fn json_lines_are_read_plain_and_gzipped_with_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let body = "{\"text\":\"a \\\"q\\\" \\u00e9\\n\",\"url\":\"u\"}\n\n{\"text\":\"b\",\"url\":\"v\"}\n";
        let plain = dir.path().join("d.jsonl");
        std::fs::write(&plain, body).unwrap();
        let zipped = dir.path().join("d.json.gz");
        gz(&zipped, body);
        for path in [&plain, &zipped] {
            assert_eq!(rows(path, "text").unwrap(), ["a \"q\" é\n", "b"]);
        }
        let err = rows(&zipped, "sentence").unwrap_err();
        assert!(
            err.to_string()
                .contains("no column `sentence` (it has: text, url)"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_crc_and_a_truncated_gzip_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.json.gz");
        let body: String = (0..200)
            .map(|i| format!("{{\"text\":\"row {i}\"}}\n"))
            .collect();
        gz(&path, &body);
        let good = std::fs::read(&path).unwrap();
        let mut bad_crc = good.clone();
        let n = bad_crc.len();
        bad_crc[n - 8] ^= 0xff;
        std::fs::write(&path, &bad_crc).unwrap();
        let err = rows(&path, "text").unwrap_err();
        assert!(matches!(err, RowsError::Malformed { .. }), "{err}");
        assert!(err.to_string().contains("d.json.gz"), "{err}");

        std::fs::write(&path, &good[..good.len() / 2]).unwrap();
        let err = rows(&path, "text").unwrap_err();
        assert!(matches!(err, RowsError::Malformed { .. }), "{err}");
    }

    #[test]
    fn the_store_gives_each_document_and_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c4.json.gz");
        gz(
            &path,
            "{\"text\":\"first\"}\n{\"text\":\"\"}\n{\"text\":\"thïrd\\ndoc\"}\n",
        );
        let store = DocumentStore::open(&path, "text").unwrap();
        assert_eq!(store.len(), 3);
        assert_eq!(
            (
                store.get(0).unwrap(),
                store.get(1).unwrap(),
                store.get(2).unwrap()
            ),
            ("first", "", "thïrd\ndoc")
        );
        let index = store_dir(&path, "text");
        assert!(index.join("texts").is_file() && index.join("offsets").is_file());
        // A second open reads the store, not the file.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            DocumentStore::open(&path, "text").unwrap().get(2).unwrap(),
            "thïrd\ndoc"
        );
    }

    #[test]
    fn a_store_damaged_on_disk_is_an_error_and_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c4.json.gz");
        gz(&path, "{\"text\":\"ab\"}\n{\"text\":\"cd\"}\n");
        DocumentStore::open(&path, "text").unwrap();
        let index = store_dir(&path, "text");
        std::fs::write(index.join("texts"), [b'a', b'b', 0xff, 0xfe]).unwrap();
        let store = DocumentStore::open(&path, "text").unwrap();
        assert_eq!(store.get(0).unwrap(), "ab");
        let err = store.get(1).unwrap_err();
        assert!(err.to_string().contains("document 1 is not UTF-8"), "{err}");
        assert!(!index.exists());
    }

    #[test]
    fn a_failed_build_leaves_no_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c4.json.gz");
        gz(&path, "{\"text\":\"ok\"}\n{\"url\":\"no text\"}\n");
        let err = DocumentStore::open(&path, "text")
            .err()
            .expect("missing column");
        assert!(matches!(err, RowsError::MissingColumn { .. }), "{err}");
        assert!(!store_dir(&path, "text").exists());
    }
}
