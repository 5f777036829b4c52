//! The GGUF reader: parses the header, the metadata and the tensor table of a file (format
//! versions 2 and 3) with every length, count and data range checked against the bytes, and
//! serves metadata values and tensors ([`GgufFile`], [`GgufTensorInfo`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::dequant::dequantize;
use super::{
    as_int, GgmlType, GgufArray, GgufError, GgufValue, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS,
    T_ARRAY, T_BOOL, T_F32, T_F64, T_I16, T_I32, T_I64, T_I8, T_STRING, T_U16, T_U32, T_U64, T_U8,
};

/// Deepest accepted nesting of metadata arrays, so a hostile file cannot exhaust the stack.
const MAX_ARRAY_DEPTH: usize = 16;
/// Reservation cap for vectors whose length comes from the file: they grow as elements parse.
const MAX_RESERVE: usize = 4096;

/// Smallest encoding of one value of GGUF type `ty`, or `None` for an unknown type id.
fn min_encoded_size(ty: u32) -> Option<u64> {
    Some(match ty {
        T_U8 | T_I8 | T_BOOL => 1,
        T_U16 | T_I16 => 2,
        T_U32 | T_I32 | T_F32 => 4,
        T_U64 | T_I64 | T_F64 => 8,
        // A string is at least its u64 length; an array its u32 type and u64 count.
        T_STRING => 8,
        T_ARRAY => 12,
        _ => return None,
    })
}

/// One entry of the tensor table.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in GGUF order: `dims[0]` (ggml's `ne[0]`) varies fastest.
    pub dims: Vec<u64>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the data section (see [`GgufFile::data_offset`]).
    pub offset: u64,
}

impl GgufTensorInfo {
    /// The shape in row-major ("PyTorch") order, outermost dimension first: `dims` reversed.
    pub fn shape(&self) -> Vec<usize> {
        // Every dimension was checked to fit `usize` when the file was opened.
        self.dims
            .iter()
            .rev()
            .map(|&d| usize::try_from(d).unwrap_or(usize::MAX))
            .collect()
    }

    /// Number of elements (1 for a tensor without dimensions).
    pub fn n_elements(&self) -> u64 {
        // Checked not to overflow when the file was opened; saturating for hand-made infos.
        self.dims.iter().fold(1, |n, &d| n.saturating_mul(d))
    }

    /// Size of the tensor's data in bytes.
    pub fn n_bytes(&self) -> u64 {
        let ty = self.ggml_type;
        (self.n_elements() / ty.block_size() as u64).saturating_mul(ty.type_size() as u64)
    }
}

/// The bytes of a GGUF file: memory-mapped from disk, or owned (see [`GgufFile::from_bytes`]).
enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    /// Drops the mapped pages read so far from the resident set (see
    /// [`GgufFile::release_pages`]).
    fn release_pages(&self) {
        if let Storage::Mapped(m) = self {
            // SAFETY: the map is read-only and file-backed, so MADV_DONTNEED only drops pages
            // that the next read faults in again from the file; no data is lost.
            #[allow(unsafe_code)]
            let _ = unsafe { m.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// An open, memory-mapped GGUF file with its parsed header, metadata and tensor table.
pub struct GgufFile {
    path: PathBuf,
    storage: Storage,
    version: u32,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
    by_name: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The metadata holds whole vocabularies: print a summary instead.
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("file_len", &self.storage.bytes().len())
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps `path` and parses its header, metadata and tensor table.
    ///
    /// Every length and count is checked against the bytes left before anything is allocated,
    /// and every tensor's data range is checked to lie inside the file, so a malformed file gives
    /// an error naming the offset and what was expected, never a panic or a huge allocation.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let io_err = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        if len < 4 {
            return Err(GgufError::Truncated {
                path: path.to_owned(),
                offset: 0,
                needed: 4,
                left: len,
                what: "the magic".into(),
            });
        }
        // SAFETY: the map is read-only and lives as long as `GgufFile`. As with any mapped file,
        // another process truncating or rewriting it while it is open is undefined behaviour;
        // model files are not modified in place while a run reads them.
        #[allow(unsafe_code)]
        let mmap = unsafe { Mmap::map(&file) }.map_err(io_err)?;
        Self::from_storage(path.to_owned(), Storage::Mapped(mmap))
    }

    /// Drops the pages of the mapped file read so far from the process's resident set; they
    /// stay in the kernel's page cache and are read again when next touched. Layer streaming
    /// calls it after each layer, so the file is not counted whole in the resident set.
    pub fn release_pages(&self) {
        self.storage.release_pages();
    }

    /// Parses a GGUF file held in memory (for tests and fuzzing); `path` only labels errors.
    pub fn from_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_storage(path.into(), Storage::Owned(bytes))
    }

    fn from_storage(path: PathBuf, storage: Storage) -> Result<GgufFile, GgufError> {
        let header = parse(&path, storage.bytes())?;
        let by_name = header
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            path,
            storage,
            version: header.version,
            metadata: header.metadata,
            tensors: header.tensors,
            by_name,
            alignment: header.alignment,
            data_offset: header.data_offset,
        })
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data-section alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute byte offset of the data section; tensor offsets are relative to it.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// All metadata key/value pairs.
    pub fn metadata(&self) -> &BTreeMap<String, GgufValue> {
        &self.metadata
    }

    /// The value of metadata key `key`, if present.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    /// Whether metadata key `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.metadata.contains_key(key)
    }

    /// Metadata `key` converted by `convert`, telling absence (`Ok(None)`) from a value that
    /// `convert` rejects (an error naming the key, the type found and `expected`).
    ///
    /// The `get_*` helpers are this with the error folded into `None`.
    pub fn get_checked<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        convert: impl FnOnce(&'a GgufValue) -> Option<T>,
    ) -> Result<Option<T>, GgufError> {
        let Some(value) = self.metadata.get(key) else {
            return Ok(None);
        };
        match convert(value) {
            Some(v) => Ok(Some(v)),
            None => {
                let found = match value {
                    GgufValue::String(_) | GgufValue::Array(_) => value.type_name(),
                    other => format!("{} `{}`", other.type_name(), display_scalar(other)),
                };
                Err(GgufError::WrongType {
                    path: self.path.clone(),
                    key: key.to_owned(),
                    expected,
                    found,
                })
            }
        }
    }

    /// Like [`GgufFile::get_checked`], with absence an error too.
    pub(super) fn require<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        convert: impl FnOnce(&'a GgufValue) -> Option<T>,
    ) -> Result<T, GgufError> {
        self.get_checked(key, expected, convert)?
            .ok_or_else(|| GgufError::MissingKey {
                path: self.path.clone(),
                key: key.to_owned(),
            })
    }

    /// Metadata `key` as `u32`, from any integer type whose value fits; `None` if absent or not.
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get(key).and_then(as_int)
    }

    /// Metadata `key` as `u64`, from any integer type whose value fits; `None` if absent or not.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(as_int)
    }

    /// Metadata `key` as `usize`, from any integer type whose value fits; `None` if absent or not.
    pub fn get_usize(&self, key: &str) -> Option<usize> {
        self.get(key).and_then(as_int)
    }

    /// Metadata `key` as `i64`, from any integer type whose value fits; `None` if absent or not.
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(as_int)
    }

    /// Metadata `key` as `f32`, from `float32`, `float64` (rounded) or any integer type.
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        match self.get(key)? {
            GgufValue::F32(v) => Some(*v),
            other => other.as_f64().map(|v| v as f32),
        }
    }

    /// Metadata `key` as `f64`, from `float32`, `float64` or any integer type.
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key)?.as_f64()
    }

    /// Metadata `key` as a bool; `None` if absent or not a bool.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    /// Metadata `key` as a string; `None` if absent or not a string.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// Metadata `key` as an array of any element type; `None` if absent or not an array.
    pub fn get_array(&self, key: &str) -> Option<&GgufArray> {
        self.get(key)?.as_array()
    }

    /// Metadata `key` as an array of strings; `None` if absent or of another type.
    pub fn get_string_array(&self, key: &str) -> Option<&[String]> {
        self.get_array(key)?.as_strings()
    }

    /// Metadata `key` as integers, from an array of any integer type whose values fit `i64`.
    pub fn get_i64_array(&self, key: &str) -> Option<Vec<i64>> {
        self.get_array(key)?.to_i64_vec()
    }

    /// Metadata `key` as `f32`s, from an array of `float32` or `float64`.
    pub fn get_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        self.get_array(key)?.to_f32_vec()
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The table entry of tensor `name`, if there is one.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.by_name.get(name).and_then(|&i| self.tensors.get(i))
    }

    fn find_tensor(&self, name: &str) -> Result<&GgufTensorInfo, GgufError> {
        self.tensor_info(name)
            .ok_or_else(|| GgufError::TensorNotFound {
                path: self.path.clone(),
                name: name.to_owned(),
            })
    }

    /// The raw (possibly quantised) bytes of tensor `name`.
    pub fn tensor_data(&self, name: &str) -> Result<&[u8], GgufError> {
        let info = self.find_tensor(name)?;
        // Ranges were checked at open; this re-check only guards hand-edited invariants.
        let start = self.data_offset.checked_add(info.offset);
        let start = start.and_then(|s| usize::try_from(s).ok());
        let len = usize::try_from(info.n_bytes()).ok();
        start
            .zip(len)
            .and_then(|(start, len)| self.storage.bytes().get(start..start.checked_add(len)?))
            .ok_or_else(|| GgufError::Invalid {
                path: self.path.clone(),
                offset: self.data_offset.saturating_add(info.offset),
                reason: format!("data of tensor `{name}` lies outside the file"),
            })
    }

    /// Tensor `name` dequantised to `f32`, with its shape in row-major ("PyTorch") order.
    ///
    /// # Shapes
    /// GGUF stores `ne[0]` (the fastest-varying dimension) first; the returned shape is reversed,
    /// outermost first, so `token_embd.weight` with `ne = [hidden, vocab]` comes back as
    /// `[vocab, hidden]` and the data is laid out row-major in that shape.
    ///
    /// Large tensors are dequantised on several threads, straight into the returned vector.
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>), GgufError> {
        let info = self.find_tensor(name)?;
        let data = self.tensor_data(name)?;
        let n = usize::try_from(info.n_elements()).map_err(|_| GgufError::BadTensorData {
            tensor: name.to_owned(),
            reason: "element count does not fit in memory".into(),
        })?;
        let values = dequantize(name, info.ggml_type, data, n)?;
        Ok((info.shape(), values))
    }

    /// Entry `index` of tensor `name`'s outermost dimension, dequantised to `f32`: expert
    /// `index` of llama.cpp's stacked `ffn_*_exps` tensors (`[experts, rows, cols]`), read
    /// without dequantising the other entries.
    ///
    /// # Shapes
    /// - `name`: `[outer, ...rest]` → `[...rest]`
    pub fn tensor_f32_entry(
        &self,
        name: &str,
        index: usize,
    ) -> Result<(Vec<usize>, Vec<f32>), GgufError> {
        let info = self.find_tensor(name)?;
        let shape = info.shape();
        let bad = |reason: String| GgufError::BadTensorData {
            tensor: name.to_owned(),
            reason,
        };
        let Some((&outer, rest)) = shape.split_first().filter(|(_, rest)| !rest.is_empty()) else {
            return Err(bad(format!(
                "has shape {shape:?}; an entry needs 2 dimensions or more"
            )));
        };
        if index >= outer {
            return Err(bad(format!(
                "has {outer} entries; entry {index} was asked for"
            )));
        }
        let data = self.tensor_data(name)?;
        // Rows are whole quantisation blocks (checked at open), so entries are equal byte runs.
        let bytes = data.len() / outer;
        let n = rest.iter().product::<usize>();
        let values = dequantize(name, info.ggml_type, &data[index * bytes..][..bytes], n)?;
        Ok((rest.to_vec(), values))
    }
}

/// `Debug`-style text of a scalar for error messages.
fn display_scalar(v: &GgufValue) -> String {
    match v {
        GgufValue::F32(x) => x.to_string(),
        GgufValue::F64(x) => x.to_string(),
        GgufValue::Bool(b) => b.to_string(),
        other => other.as_i128().map(|i| i.to_string()).unwrap_or_default(),
    }
}

/// What [`parse`] extracts from the bytes.
struct Header {
    version: u32,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
    alignment: u64,
    data_offset: u64,
}

/// A bounds-checked little-endian cursor over the whole file.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn truncated(&self, needed: u64, what: String) -> GgufError {
        GgufError::Truncated {
            path: self.path.to_owned(),
            offset: self.pos as u64,
            needed,
            left: self.left() as u64,
            what,
        }
    }

    fn invalid(&self, offset: usize, reason: String) -> GgufError {
        GgufError::Invalid {
            path: self.path.to_owned(),
            offset: offset as u64,
            reason,
        }
    }

    /// Fails unless `needed` bytes are left; `what` is only built on failure.
    fn ensure(&self, needed: u64, what: impl FnOnce() -> String) -> Result<usize, GgufError> {
        match usize::try_from(needed) {
            Ok(n) if n <= self.left() => Ok(n),
            _ => Err(self.truncated(needed, what())),
        }
    }

    fn take(&mut self, needed: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], GgufError> {
        let n = self.ensure(needed, what)?;
        let bytes = self.buf.get(self.pos..self.pos + n).unwrap_or_default();
        self.pos += n;
        Ok(bytes)
    }

    fn bytes<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N], GgufError> {
        let slice = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, GgufError> {
        self.bytes(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64, GgufError> {
        self.bytes(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.u64(|| format!("the length of {}", what()))?;
        let start = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| self.invalid(start, format!("{} is not valid utf-8: {e}", what())))
    }

    /// Reads `count` fixed-size numbers after checking they are all present.
    fn numbers<T, const N: usize>(
        &mut self,
        count: u64,
        convert: fn([u8; N]) -> T,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<T>, GgufError> {
        let needed = count.saturating_mul(N as u64);
        let bytes = self.take(needed, || format!("{count} elements of {}", what()))?;
        let (chunks, _) = bytes.as_chunks::<N>();
        Ok(chunks.iter().map(|&c| convert(c)).collect())
    }

    fn value(
        &mut self,
        ty: u32,
        ty_offset: usize,
        what: &dyn Fn() -> String,
        depth: usize,
    ) -> Result<GgufValue, GgufError> {
        Ok(match ty {
            T_U8 => GgufValue::U8(u8::from_le_bytes(self.bytes(what)?)),
            T_I8 => GgufValue::I8(i8::from_le_bytes(self.bytes(what)?)),
            T_U16 => GgufValue::U16(u16::from_le_bytes(self.bytes(what)?)),
            T_I16 => GgufValue::I16(i16::from_le_bytes(self.bytes(what)?)),
            T_U32 => GgufValue::U32(u32::from_le_bytes(self.bytes(what)?)),
            T_I32 => GgufValue::I32(i32::from_le_bytes(self.bytes(what)?)),
            T_F32 => GgufValue::F32(f32::from_le_bytes(self.bytes(what)?)),
            T_BOOL => GgufValue::Bool(self.bytes::<1>(what)?[0] != 0),
            T_STRING => GgufValue::String(self.string(what)?),
            T_ARRAY => GgufValue::Array(self.array(what, depth)?),
            T_U64 => GgufValue::U64(u64::from_le_bytes(self.bytes(what)?)),
            T_I64 => GgufValue::I64(i64::from_le_bytes(self.bytes(what)?)),
            T_F64 => GgufValue::F64(f64::from_le_bytes(self.bytes(what)?)),
            other => {
                return Err(self.invalid(
                    ty_offset,
                    format!("unknown value type `{other}` for {}", what()),
                ))
            }
        })
    }

    fn array(&mut self, what: &dyn Fn() -> String, depth: usize) -> Result<GgufArray, GgufError> {
        let ty_offset = self.pos;
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.invalid(
                ty_offset,
                format!(
                    "{} nests arrays deeper than {MAX_ARRAY_DEPTH} levels",
                    what()
                ),
            ));
        }
        let ty = self.u32(|| format!("the element type of {}", what()))?;
        let count = self.u64(|| format!("the length of {}", what()))?;
        let min = min_encoded_size(ty).ok_or_else(|| {
            self.invalid(
                ty_offset,
                format!("unknown array element type `{ty}` for {}", what()),
            )
        })?;
        // Refuse counts the rest of the file cannot hold before reserving anything.
        self.ensure(count.saturating_mul(min), || {
            format!("{count} elements of {}", what())
        })?;
        Ok(match ty {
            T_U8 => GgufArray::U8(self.numbers(count, u8::from_le_bytes, what)?),
            T_I8 => GgufArray::I8(self.numbers(count, i8::from_le_bytes, what)?),
            T_U16 => GgufArray::U16(self.numbers(count, u16::from_le_bytes, what)?),
            T_I16 => GgufArray::I16(self.numbers(count, i16::from_le_bytes, what)?),
            T_U32 => GgufArray::U32(self.numbers(count, u32::from_le_bytes, what)?),
            T_I32 => GgufArray::I32(self.numbers(count, i32::from_le_bytes, what)?),
            T_F32 => GgufArray::F32(self.numbers(count, f32::from_le_bytes, what)?),
            T_BOOL => GgufArray::Bool(self.numbers(count, |[b]: [u8; 1]| b != 0, what)?),
            T_U64 => GgufArray::U64(self.numbers(count, u64::from_le_bytes, what)?),
            T_I64 => GgufArray::I64(self.numbers(count, i64::from_le_bytes, what)?),
            T_F64 => GgufArray::F64(self.numbers(count, f64::from_le_bytes, what)?),
            T_STRING => {
                let mut out = Vec::with_capacity(reserve(count));
                for i in 0..count {
                    out.push(self.string(&|| format!("element {i} of {}", what()))?);
                }
                GgufArray::String(out)
            }
            _ => {
                let mut out = Vec::with_capacity(reserve(count));
                for i in 0..count {
                    out.push(self.array(&|| format!("element {i} of {}", what()), depth + 1)?);
                }
                GgufArray::Array(out)
            }
        })
    }
}

/// Capacity to reserve for `count` file-declared elements.
fn reserve(count: u64) -> usize {
    usize::try_from(count)
        .unwrap_or(usize::MAX)
        .min(MAX_RESERVE)
}

/// Parses everything but the tensor data, validating the data ranges against `buf`.
fn parse(path: &Path, buf: &[u8]) -> Result<Header, GgufError> {
    let mut r = Reader { buf, pos: 0, path };
    let magic: [u8; 4] = r.bytes(|| "the magic".into())?;
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic {
            path: path.to_owned(),
            found: magic.escape_ascii().to_string(),
        });
    }
    let version = r.u32(|| "the version".into())?;
    if version != 2 && version != 3 {
        let hint = match version.swap_bytes() {
            2 | 3 => "; this looks like a big-endian file".to_owned(),
            _ if version == 1 => "; version 1 files predate 64-bit counts".to_owned(),
            _ => String::new(),
        };
        return Err(GgufError::UnsupportedVersion {
            path: path.to_owned(),
            version,
            hint,
        });
    }
    let tensor_count = r.u64(|| "the tensor count".into())?;
    let kv_count = r.u64(|| "the metadata count".into())?;

    // Each entry needs at least a key length, a value type and a one-byte value.
    r.ensure(kv_count.saturating_mul(8 + 4 + 1), || {
        format!("the metadata ({kv_count} entries)")
    })?;
    let mut metadata = BTreeMap::new();
    let mut alignment_offset = 0;
    for i in 0..kv_count {
        let key_offset = r.pos;
        let key = r.string(&|| format!("the key of metadata entry {i}"))?;
        let ty_offset = r.pos;
        let ty = r.u32(|| format!("the value type of metadata `{key}`"))?;
        let value = r.value(ty, ty_offset, &|| format!("metadata `{key}`"), 0)?;
        if key == "general.alignment" {
            alignment_offset = ty_offset + 4;
        }
        if metadata.contains_key(&key) {
            return Err(r.invalid(key_offset, format!("duplicate metadata key `{key}`")));
        }
        metadata.insert(key, value);
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_i128().and_then(|a| u64::try_from(a).ok()) {
            Some(a) if a.is_power_of_two() => a,
            _ => {
                return Err(r.invalid(
                    alignment_offset,
                    format!(
                        "`general.alignment` must be a power of two, found {} `{}`",
                        v.type_name(),
                        display_scalar(v)
                    ),
                ))
            }
        },
    };

    // Each tensor entry needs a name length, a dimension count, a type and an offset.
    r.ensure(tensor_count.saturating_mul(8 + 4 + 4 + 8), || {
        format!("the tensor infos ({tensor_count} entries)")
    })?;
    let mut tensors = Vec::with_capacity(reserve(tensor_count));
    let mut entry_offsets = Vec::with_capacity(reserve(tensor_count));
    let mut names = HashSet::new();
    for i in 0..tensor_count {
        let entry_offset = r.pos;
        let name = r.string(&|| format!("the name of tensor {i}"))?;
        let dims_offset = r.pos;
        let n_dims = r.u32(|| format!("the dimension count of tensor `{name}`"))?;
        if n_dims > MAX_DIMS {
            return Err(r.invalid(
                dims_offset,
                format!(
                    "tensor `{name}` has {n_dims} dimensions, at most {MAX_DIMS} are supported"
                ),
            ));
        }
        let dims = r.numbers(u64::from(n_dims), u64::from_le_bytes, &|| {
            format!("the dimensions of tensor `{name}`")
        })?;
        let ty_offset = r.pos;
        let ty_id = r.u32(|| format!("the type of tensor `{name}`"))?;
        let ggml_type = GgmlType::from_id(ty_id).ok_or_else(|| {
            r.invalid(
                ty_offset,
                format!("tensor `{name}` has unknown ggml type id `{ty_id}`"),
            )
        })?;
        let offset = r.u64(|| format!("the data offset of tensor `{name}`"))?;
        if !names.insert(name.clone()) {
            return Err(r.invalid(entry_offset, format!("duplicate tensor name `{name}`")));
        }
        let info = GgufTensorInfo {
            name,
            dims,
            ggml_type,
            offset,
        };
        check_tensor_shape(&r, &info, dims_offset, alignment)?;
        tensors.push(info);
        entry_offsets.push(entry_offset);
    }

    let data_offset = (r.pos as u64)
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| r.invalid(r.pos, "data section offset overflows".into()))?;
    let file_len = buf.len() as u64;
    for (info, &entry_offset) in tensors.iter().zip(&entry_offsets) {
        let start = data_offset.checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(info.n_bytes()));
        match (start, end) {
            (Some(_), Some(end)) if end <= file_len => {}
            (Some(start), _) if start <= file_len => {
                return Err(GgufError::Truncated {
                    path: path.to_owned(),
                    offset: start,
                    needed: info.n_bytes(),
                    left: file_len - start,
                    what: format!("the data of tensor `{}`", info.name),
                })
            }
            _ => {
                return Err(r.invalid(
                    entry_offset,
                    format!(
                        "tensor `{}` has data offset {} past the end of the file ({file_len} bytes, data section at {data_offset})",
                        info.name, info.offset
                    ),
                ))
            }
        }
    }
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// Checks a tensor's element count, block divisibility, byte size and offset alignment.
fn check_tensor_shape(
    r: &Reader<'_>,
    info: &GgufTensorInfo,
    dims_offset: usize,
    alignment: u64,
) -> Result<(), GgufError> {
    let name = &info.name;
    let n_elements = info
        .dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64 && info.dims.iter().all(|&d| usize::try_from(d).is_ok()))
        .ok_or_else(|| {
            r.invalid(
                dims_offset,
                format!(
                    "tensor `{name}` has too many elements: dims {:?}",
                    info.dims
                ),
            )
        })?;
    let ty = info.ggml_type;
    let block = ty.block_size() as u64;
    let row = info.dims.first().copied().unwrap_or(1);
    if !row.is_multiple_of(block) {
        return Err(r.invalid(
            dims_offset,
            format!(
                "tensor `{name}` has a first dimension of {row}, not a multiple of the {ty} block size {block}"
            ),
        ));
    }
    (n_elements / block)
        .checked_mul(ty.type_size() as u64)
        .ok_or_else(|| r.invalid(dims_offset, format!("size of tensor `{name}` overflows")))?;
    if !info.offset.is_multiple_of(alignment) {
        return Err(r.invalid(
            dims_offset,
            format!(
                "tensor `{name}` has data offset {}, not a multiple of the alignment {alignment}",
                info.offset
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::tests::{sample_writer, TempPath};
    use super::super::writer::write_string;
    use super::super::{strings, tokenizer_json, GgufWriter};
    use super::*;

    #[test]
    fn typed_getters_accept_any_fitting_integer_width() {
        let f = GgufFile::from_bytes("m.gguf", sample_writer().to_bytes().expect("bytes"))
            .expect("parse");
        assert_eq!(f.get_u32("a.u8").expect("u8"), 7);
        assert_eq!(f.get_u32("a.u16").expect("u16"), 700);
        assert_eq!(f.get_i64("a.i8").expect("i8"), -7);
        assert_eq!(f.get_usize("a.u64").expect("u64"), 5_000_000_000);
        assert_eq!(f.get_u64("a.u32").expect("u32"), 70_000);
        assert_eq!(f.get_f32("a.f32").expect("f32"), 0.5);
        assert_eq!(f.get_f32("a.f64").expect("f64"), 1e-6);
        assert_eq!(f.get_f32("a.u32").expect("int as f32"), 70_000.0);
        assert!(f.get_bool("a.bool").expect("bool"));
        assert_eq!(f.get_str("general.architecture").expect("str"), "llama");
        assert_eq!(
            f.get_string_array("a.strings").expect("strings"),
            ["x", "", "ü"]
        );
        assert_eq!(f.get_i64_array("a.i32s").expect("ints"), [1, -2, 3]);
        assert_eq!(f.get_f32_array("a.f32s").expect("floats"), [0.25, -1.0]);
        assert_eq!(f.get_array("a.nested").expect("nested").len(), 3);

        assert_eq!(f.get_f64("a.f32"), Some(0.5));
        // Values of another type, or out of range, read as absent ...
        assert_eq!(f.get_u32("a.u64"), None);
        assert_eq!(f.get_u32("a.i8"), None);
        assert_eq!(f.get_str("a.u8"), None);
        assert_eq!(f.get_string_array("a.i32s"), None);
        assert_eq!(f.get_u32("missing.key"), None);
        // ... and `get_checked` tells them apart.
        let err = f
            .get_checked("a.u64", "an integer in the `u32` range", as_int::<u32>)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "`m.gguf`: metadata key `a.u64` holds uint64 `5000000000`, expected an integer in the `u32` range"
        );
        let err = f.get_checked("a.i8", "a u32", as_int::<u32>).unwrap_err();
        assert!(err.to_string().contains("holds int8 `-7`"), "{err}");
        let err = f
            .get_checked("a.u8", "a string", GgufValue::as_str)
            .unwrap_err();
        assert!(
            err.to_string()
                .ends_with("holds uint8 `7`, expected a string"),
            "{err}"
        );
        let err = f
            .get_checked("a.i32s", "an array of string", strings)
            .unwrap_err();
        assert!(
            err.to_string()
                .ends_with("holds array of int32, expected an array of string"),
            "{err}"
        );
        assert_eq!(
            f.get_checked("missing.key", "a u32", as_int::<u32>).ok(),
            Some(None)
        );
        assert_eq!(
            f.get_checked("a.u16", "a u32", as_int::<u32>).ok(),
            Some(Some(700))
        );
        let err = f
            .require("missing.key", "a u32", as_int::<u32>)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "`m.gguf`: metadata key `missing.key` is missing"
        );
        assert!(f.get("a.bool").is_some() && f.contains_key("a.i16") && !f.contains_key("b"));
    }

    #[test]
    fn unsupported_tensor_type_opens_but_does_not_dequantise() {
        let mut w = GgufWriter::new();
        w.tensor_raw("x", &[256], GgmlType::Q2_K, vec![0; 84]);
        let f = GgufFile::from_bytes("m.gguf", w.to_bytes().expect("bytes")).expect("parse");
        let err = f.tensor_f32("x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported ggml type `Q2_K` for tensor `x`"
        );
    }

    // ---- malformed files ----

    /// A header with the given counts followed by `rest`.
    fn raw_file(version: u32, n_tensors: u64, n_kv: u64, rest: &[u8]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(version.to_le_bytes());
        out.extend(n_tensors.to_le_bytes());
        out.extend(n_kv.to_le_bytes());
        out.extend(rest);
        out
    }

    /// One metadata entry `key` of value type `ty` with raw payload.
    fn raw_kv(key: &str, ty: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_string(&mut out, key);
        out.extend(ty.to_le_bytes());
        out.extend(payload);
        out
    }

    fn parse_err(bytes: Vec<u8>) -> String {
        GgufFile::from_bytes("bad.gguf", bytes)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bad_magic_and_versions_are_refused() {
        let mut bytes = raw_file(3, 0, 0, &[]);
        bytes[3] = b'X';
        assert_eq!(
            parse_err(bytes),
            "`bad.gguf`: not a gguf file: expected magic `GGUF` at offset 0, found `GGUX`"
        );
        assert!(parse_err(raw_file(1, 0, 0, &[])).contains("unsupported gguf version `1`"));
        assert!(parse_err(raw_file(4, 0, 0, &[])).contains("unsupported gguf version `4`"));
        assert!(parse_err(raw_file(3u32.swap_bytes(), 0, 0, &[])).contains("big-endian"));
        assert!(GgufFile::from_bytes("ok.gguf", raw_file(2, 0, 0, &[])).is_ok());
        assert!(GgufFile::from_bytes("ok.gguf", raw_file(3, 0, 0, &[])).is_ok());
    }

    #[test]
    fn truncation_names_offset_and_field() {
        let bytes = raw_file(3, 0, 0, &[])[..11].to_vec();
        assert_eq!(
            parse_err(bytes),
            "`bad.gguf`: truncated at offset 8: expected 8 bytes for the tensor count, 3 left"
        );
        let path = TempPath::new("short");
        std::fs::write(&path.0, b"GG").expect("write");
        let err = GgufFile::open(&path.0).unwrap_err().to_string();
        assert!(
            err.ends_with("truncated at offset 0: expected 4 bytes for the magic, 2 left"),
            "{err}"
        );
        let err = GgufFile::open(Path::new("/nonexistent/x.gguf")).unwrap_err();
        assert_eq!(err.to_string(), "`/nonexistent/x.gguf`: cannot read file");
    }

    #[test]
    fn every_prefix_of_a_valid_file_fails_cleanly() {
        let mut w = sample_writer();
        w.tensor_f32("t", &[2, 2], &[1.0, 2.0, 3.0, 4.0])
            .expect("t");
        let bytes = w.to_bytes().expect("bytes");
        let data_end = bytes.len() - 16; // 16 bytes of f32 data, already 32-aligned
        for len in 0..data_end {
            let result = GgufFile::from_bytes("p.gguf", bytes[..len].to_vec());
            assert!(result.is_err(), "prefix of {len} bytes parsed");
        }
        assert!(GgufFile::from_bytes("p.gguf", bytes).is_ok());
    }

    #[test]
    fn huge_counts_fail_before_allocating() {
        // Key length u64::MAX.
        let mut rest = u64::MAX.to_le_bytes().to_vec();
        rest.extend([b'a'; 16]);
        let err = parse_err(raw_file(3, 0, 1, &rest));
        assert_eq!(
            err,
            "`bad.gguf`: truncated at offset 32: expected 18446744073709551615 bytes for the key of metadata entry 0, 16 left"
        );
        // Array of 2^62 u32s.
        let mut payload = T_U32.to_le_bytes().to_vec();
        payload.extend((1u64 << 62).to_le_bytes());
        let err = parse_err(raw_file(3, 0, 1, &raw_kv("k", T_ARRAY, &payload)));
        assert!(err.contains("elements of metadata `k`"), "{err}");
        // Array of 2^40 strings.
        let mut payload = T_STRING.to_le_bytes().to_vec();
        payload.extend((1u64 << 40).to_le_bytes());
        assert!(
            parse_err(raw_file(3, 0, 1, &raw_kv("k", T_ARRAY, &payload))).contains("truncated")
        );
        // Entry counts.
        assert!(parse_err(raw_file(3, 0, u64::MAX, &[]))
            .contains("the metadata (18446744073709551615 entries)"));
        assert!(parse_err(raw_file(3, u64::MAX, 0, &[]))
            .contains("the tensor infos (18446744073709551615 entries)"));
    }

    #[test]
    fn invalid_metadata_is_refused() {
        let err = parse_err(raw_file(3, 0, 1, &raw_kv("k", 13, &[0; 8])));
        assert_eq!(
            err,
            "`bad.gguf`: invalid data at offset 33: unknown value type `13` for metadata `k`"
        );
        let mut payload = 99u32.to_le_bytes().to_vec();
        payload.extend(0u64.to_le_bytes());
        assert!(
            parse_err(raw_file(3, 0, 1, &raw_kv("k", T_ARRAY, &payload)))
                .contains("unknown array element type `99`")
        );
        // Arrays nested past the depth limit.
        let mut payload = Vec::new();
        for _ in 0..=MAX_ARRAY_DEPTH {
            payload.extend(T_ARRAY.to_le_bytes());
            payload.extend(1u64.to_le_bytes());
        }
        payload.extend(T_U8.to_le_bytes());
        payload.extend(0u64.to_le_bytes());
        assert!(
            parse_err(raw_file(3, 0, 1, &raw_kv("k", T_ARRAY, &payload))).contains("deeper than")
        );
        // Duplicate keys, invalid utf-8, bad alignment.
        let kv = raw_kv("k", T_U8, &[1]);
        assert!(parse_err(raw_file(3, 0, 2, &[kv.clone(), kv].concat()))
            .contains("duplicate metadata key `k`"));
        let mut bad_utf8 = Vec::new();
        write_string(&mut bad_utf8, "\u{0}\u{0}");
        bad_utf8[8] = 0xFF;
        assert!(
            parse_err(raw_file(3, 0, 1, &raw_kv("k", T_STRING, &bad_utf8)))
                .contains("not valid utf-8")
        );
        let kv = raw_kv("general.alignment", T_U32, &3u32.to_le_bytes());
        assert!(parse_err(raw_file(3, 0, 1, &kv)).contains("must be a power of two"));
    }

    /// A file with one tensor-info entry built by hand and `data` after the header.
    fn one_tensor(n_dims: u32, dims: &[u64], ty: u32, offset: u64, data: &[u8]) -> Vec<u8> {
        let mut info = Vec::new();
        write_string(&mut info, "t");
        info.extend(n_dims.to_le_bytes());
        for d in dims {
            info.extend(d.to_le_bytes());
        }
        info.extend(ty.to_le_bytes());
        info.extend(offset.to_le_bytes());
        let mut bytes = raw_file(3, 1, 0, &info);
        bytes.resize(bytes.len().next_multiple_of(32), 0);
        bytes.extend(data);
        bytes
    }

    #[test]
    fn invalid_tensor_infos_are_refused() {
        assert!(GgufFile::from_bytes("ok.gguf", one_tensor(1, &[2], 0, 0, &[0; 8])).is_ok());
        assert!(parse_err(one_tensor(5, &[1; 5], 0, 0, &[0; 4]))
            .contains("has 5 dimensions, at most 4"));
        assert!(parse_err(one_tensor(1, &[2], 4, 0, &[0; 8])).contains("unknown ggml type id `4`"));
        assert!(parse_err(one_tensor(1, &[16], 8, 0, &[0; 34]))
            .contains("not a multiple of the Q8_0 block size 32"));
        assert!(
            parse_err(one_tensor(2, &[1 << 40, 1 << 40], 0, 0, &[])).contains("too many elements")
        );
        assert!(parse_err(one_tensor(1, &[2], 0, 4, &[0; 12]))
            .contains("not a multiple of the alignment 32"));
        let err = parse_err(one_tensor(1, &[4], 0, 0, &[0; 8]));
        assert_eq!(
            err,
            "`bad.gguf`: truncated at offset 64: expected 16 bytes for the data of tensor `t`, 8 left"
        );
        assert!(parse_err(one_tensor(1, &[1], 0, 1 << 20, &[0; 4]))
            .contains("past the end of the file"));
        assert!(parse_err(one_tensor(1, &[1], 0, u64::MAX - 31, &[0; 4])).contains("past the end"));
        let mut w = GgufWriter::new();
        w.tensor_raw("d", &[1], GgmlType::F32, vec![0; 4])
            .tensor_raw("d", &[1], GgmlType::F32, vec![0; 4]);
        assert!(parse_err(w.to_bytes().expect("bytes")).contains("duplicate tensor name `d`"));
    }

    /// An entry of a stacked tensor is that slice of the whole, quantised or not, and an entry
    /// past the end or of a vector is an error naming the tensor.
    #[test]
    fn an_entry_of_a_stacked_tensor_is_its_slice_of_the_whole() {
        let values: Vec<f32> = (0..3 * 2 * 64).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut w = GgufWriter::new();
        w.tensor_f32("f", &[3, 2, 64], &values).expect("f");
        w.tensor_q8_0("q", &[3, 2, 64], &values).expect("q");
        w.tensor_f32("v", &[4], &[1.0; 4]).expect("v");
        let f = GgufFile::from_bytes("stacked.gguf", w.to_bytes().expect("bytes")).expect("open");
        for name in ["f", "q"] {
            let (shape, whole) = f.tensor_f32(name).expect("whole");
            assert_eq!(shape, vec![3, 2, 64]);
            for e in 0..3 {
                let (shape, entry) = f.tensor_f32_entry(name, e).expect("entry");
                assert_eq!(shape, vec![2, 64]);
                assert_eq!(entry, whole[e * 128..(e + 1) * 128], "{name} entry {e}");
            }
        }
        let err = f.tensor_f32_entry("q", 3).unwrap_err().to_string();
        assert!(err.contains("`q`") && err.contains("3 entries"), "{err}");
        let err = f.tensor_f32_entry("v", 0).unwrap_err().to_string();
        assert!(err.contains("`v`") && err.contains("2 dimensions"), "{err}");
    }

    #[test]
    fn mutated_files_never_panic() {
        let mut w = sample_writer();
        w.metadata("tokenizer.ggml.model", "gpt2")
            .metadata("tokenizer.ggml.tokens", vec!["a", "b", "ab"])
            .metadata("tokenizer.ggml.merges", vec!["a b"]);
        w.tensor_f32("f", &[2, 3], &[1.0; 6]).expect("f");
        w.tensor_q8_0("q", &[1, 32], &[0.5; 32]).expect("q");
        w.tensor_raw("k", &[256], GgmlType::Q4_K, vec![7; 144]);
        let original = w.to_bytes().expect("bytes");
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..3000 {
            let mut bytes = original.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = match next() % 3 {
                    0 => next() as u8,
                    1 => 0xFF,
                    _ => bytes[at] ^ (1 << (next() % 8)),
                };
            }
            if next() % 8 == 0 {
                bytes.truncate((next() % bytes.len() as u64) as usize);
            }
            if let Ok(f) = GgufFile::from_bytes("fuzz.gguf", bytes) {
                for t in f.tensors().to_vec() {
                    let _ = f.tensor_f32(&t.name);
                }
                let _ = tokenizer_json(&f);
            }
        }
    }
}
