//! [`GgufWriter`]: builds small GGUF (version 3) files in memory, for tests, examples and fuzz
//! seeds.

use std::path::Path;

use half::f16;

use super::{
    GgmlType, GgufArray, GgufError, GgufValue, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS, T_ARRAY,
    T_BOOL, T_F32, T_F64, T_I16, T_I32, T_I64, T_I8, T_STRING, T_U16, T_U32, T_U64, T_U8,
};

/// Builds small GGUF (version 3) files in memory: for tests, examples and fuzz seeds.
///
/// Tensors are given in row-major ("PyTorch") shape order, like
/// [`GgufFile::tensor_f32`](super::GgufFile::tensor_f32) returns them, and stored with GGUF's
/// reversed dimensions. Metadata is written in insertion order; `general.alignment`, when set,
/// controls the data alignment.
///
/// ```
/// # use wanda::model::checkpoint::gguf::{GgufFile, GgufWriter};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut w = GgufWriter::new();
/// w.metadata("general.architecture", "llama").metadata("llama.block_count", 2u32);
/// w.tensor_f32("output_norm.weight", &[4], &[1.0; 4])?;
/// let path = std::env::temp_dir().join(format!("wanda-doc-{}.gguf", std::process::id()));
/// w.write(&path)?;
/// let file = GgufFile::open(&path)?;
/// assert_eq!(file.get_u64("llama.block_count"), Some(2));
/// assert_eq!(file.tensor_f32("output_norm.weight")?.1, vec![1.0; 4]);
/// # std::fs::remove_file(&path)?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<PendingTensor>,
}

#[derive(Debug, Clone)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ggml_type: GgmlType,
    data: Vec<u8>,
}

impl GgufWriter {
    /// An empty file: no metadata, no tensors.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets metadata `key` (replacing an earlier value of the same key).
    pub fn metadata(&mut self, key: impl Into<String>, value: impl Into<GgufValue>) -> &mut Self {
        let (key, value) = (key.into(), value.into());
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
        self
    }

    /// Adds an F32 tensor of row-major `shape`.
    pub fn tensor_f32(
        &mut self,
        name: impl Into<String>,
        shape: &[usize],
        data: &[f32],
    ) -> Result<&mut Self, GgufError> {
        let name = name.into();
        check_writer_shape(&name, shape, data.len(), 1)?;
        let bytes = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(self.tensor_raw(name, &gguf_dims(shape), GgmlType::F32, bytes))
    }

    /// Adds an F16 tensor of row-major `shape` (values rounded to nearest f16).
    pub fn tensor_f16(
        &mut self,
        name: impl Into<String>,
        shape: &[usize],
        data: &[f32],
    ) -> Result<&mut Self, GgufError> {
        let name = name.into();
        check_writer_shape(&name, shape, data.len(), 1)?;
        let bytes = data
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        Ok(self.tensor_raw(name, &gguf_dims(shape), GgmlType::F16, bytes))
    }

    /// Adds a Q8_0 tensor of row-major `shape`, quantised as ggml's `quantize_row_q8_0_ref`
    /// does; the last (fastest-varying) dimension must be a multiple of 32.
    pub fn tensor_q8_0(
        &mut self,
        name: impl Into<String>,
        shape: &[usize],
        data: &[f32],
    ) -> Result<&mut Self, GgufError> {
        let name = name.into();
        check_writer_shape(&name, shape, data.len(), 32)?;
        let (blocks, _) = data.as_chunks::<32>();
        let mut bytes = Vec::with_capacity(blocks.len() * 34);
        for block in blocks {
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            bytes.extend_from_slice(&f16::from_f32(d).to_le_bytes());
            // `as` saturates; |x * id| <= 127 up to rounding anyway.
            bytes.extend(block.iter().map(|&x| (x * id).round() as i8 as u8));
        }
        Ok(self.tensor_raw(name, &gguf_dims(shape), GgmlType::Q8_0, bytes))
    }

    /// Adds a tensor from raw bytes and GGUF-order `dims` (`dims[0]` fastest), unchecked: it can
    /// describe any type, or deliberately inconsistent data for error and fuzz tests.
    pub fn tensor_raw(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ggml_type: GgmlType,
        data: Vec<u8>,
    ) -> &mut Self {
        self.tensors.push(PendingTensor {
            name: name.into(),
            dims: dims.to_vec(),
            ggml_type,
            data,
        });
        self
    }

    /// The complete file.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        let alignment = match self.metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, v)) => v
                .as_i128()
                .and_then(|a| u64::try_from(a).ok())
                .filter(|a| a.is_power_of_two())
                .ok_or_else(|| GgufError::WriterInput {
                    reason: format!("`general.alignment` must be a power of two, found {v:?}"),
                })?,
        };
        let align = |n: u64| n.next_multiple_of(alignment);
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_string(&mut out, key);
            out.extend_from_slice(&value.value_type_id().to_le_bytes());
            write_value(&mut out, value);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            offsets.push(offset);
            write_string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ggml_type.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = align(offset + t.data.len() as u64);
        }
        let data_start = align(out.len() as u64);
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize((data_start + off) as usize, 0);
            out.extend_from_slice(&t.data);
        }
        out.resize(align(out.len() as u64) as usize, 0);
        Ok(out)
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: &Path) -> Result<(), GgufError> {
        std::fs::write(path, self.to_bytes()?).map_err(|source| GgufError::Write {
            path: path.to_owned(),
            source,
        })
    }
}

/// Row-major shape → GGUF dims (`ne[0]` first).
fn gguf_dims(shape: &[usize]) -> Vec<u64> {
    shape.iter().rev().map(|&d| d as u64).collect()
}

fn check_writer_shape(
    name: &str,
    shape: &[usize],
    len: usize,
    block: usize,
) -> Result<(), GgufError> {
    let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if n != Some(len) {
        return Err(GgufError::WriterInput {
            reason: format!("tensor `{name}` has shape {shape:?} but {len} values"),
        });
    }
    let row = shape.last().copied().unwrap_or(1);
    if !row.is_multiple_of(block) {
        return Err(GgufError::WriterInput {
            reason: format!(
                "tensor `{name}` has a last dimension of {row}, not a multiple of {block}"
            ),
        });
    }
    if shape.len() > MAX_DIMS as usize {
        return Err(GgufError::WriterInput {
            reason: format!(
                "tensor `{name}` has {} dimensions, at most {MAX_DIMS} are supported",
                shape.len()
            ),
        });
    }
    Ok(())
}

/// Appends `s` as a GGUF string: its `u64` byte length, then its UTF-8 bytes.
pub(super) fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &GgufValue) {
    match value {
        GgufValue::U8(v) => out.push(*v),
        GgufValue::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::Bool(v) => out.push(u8::from(*v)),
        GgufValue::String(s) => write_string(out, s),
        GgufValue::Array(a) => write_array(out, a),
        GgufValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}

fn write_array(out: &mut Vec<u8>, array: &GgufArray) {
    out.extend_from_slice(&array.element_type_id().to_le_bytes());
    out.extend_from_slice(&(array.len() as u64).to_le_bytes());
    macro_rules! numbers {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match array {
        GgufArray::U8(v) => out.extend_from_slice(v),
        GgufArray::I8(v) => numbers!(v),
        GgufArray::U16(v) => numbers!(v),
        GgufArray::I16(v) => numbers!(v),
        GgufArray::U32(v) => numbers!(v),
        GgufArray::I32(v) => numbers!(v),
        GgufArray::F32(v) => numbers!(v),
        GgufArray::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        GgufArray::String(v) => v.iter().for_each(|s| write_string(out, s)),
        GgufArray::Array(v) => v.iter().for_each(|a| write_array(out, a)),
        GgufArray::U64(v) => numbers!(v),
        GgufArray::I64(v) => numbers!(v),
        GgufArray::F64(v) => numbers!(v),
    }
}

impl GgufValue {
    /// The GGUF type id of the value.
    fn value_type_id(&self) -> u32 {
        match self {
            GgufValue::U8(_) => T_U8,
            GgufValue::I8(_) => T_I8,
            GgufValue::U16(_) => T_U16,
            GgufValue::I16(_) => T_I16,
            GgufValue::U32(_) => T_U32,
            GgufValue::I32(_) => T_I32,
            GgufValue::F32(_) => T_F32,
            GgufValue::Bool(_) => T_BOOL,
            GgufValue::String(_) => T_STRING,
            GgufValue::Array(_) => T_ARRAY,
            GgufValue::U64(_) => T_U64,
            GgufValue::I64(_) => T_I64,
            GgufValue::F64(_) => T_F64,
        }
    }
}

impl GgufArray {
    /// The GGUF type id of the elements.
    fn element_type_id(&self) -> u32 {
        match self {
            GgufArray::U8(_) => T_U8,
            GgufArray::I8(_) => T_I8,
            GgufArray::U16(_) => T_U16,
            GgufArray::I16(_) => T_I16,
            GgufArray::U32(_) => T_U32,
            GgufArray::I32(_) => T_I32,
            GgufArray::F32(_) => T_F32,
            GgufArray::Bool(_) => T_BOOL,
            GgufArray::String(_) => T_STRING,
            GgufArray::Array(_) => T_ARRAY,
            GgufArray::U64(_) => T_U64,
            GgufArray::I64(_) => T_I64,
            GgufArray::F64(_) => T_F64,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::tests::{sample_writer, TempPath};
    use super::super::GgufFile;
    use super::*;

    #[test]
    fn writer_output_reads_back() {
        let mut w = sample_writer();
        // A non-square [rows = 2, cols = 3] tensor: GGUF dims are [3, 2].
        w.tensor_f32("w.f32", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
            .expect("f32");
        w.tensor_f16("w.f16", &[3], &[0.5, -2.0, 0.1]).expect("f16");
        // Q8_0 rows whose quantisation is exact: amax 127 → d = 1; amax 63.5 → d = 0.5.
        let row0: Vec<f32> = (0..32)
            .map(|i| (i as f32 * 8.0) - 127.0)
            .map(|v| v.clamp(-127.0, 127.0))
            .collect();
        let row1: Vec<f32> = (0..32)
            .map(|i| (i as f32 - 16.0) * 0.5)
            .chain([63.5])
            .skip(1)
            .collect();
        let q8: Vec<f32> = row0.iter().chain(&row1).copied().collect();
        w.tensor_q8_0("w.q8", &[2, 32], &q8).expect("q8");
        let path = TempPath::new("roundtrip");
        w.write(&path.0).expect("write");

        let f = GgufFile::open(&path.0).expect("open");
        assert_eq!(f.version(), 3);
        assert_eq!(f.alignment(), 32);
        assert_eq!(f.data_offset() % 32, 0);
        let expected: BTreeMap<String, GgufValue> = sample_writer().metadata.into_iter().collect();
        assert_eq!(f.metadata(), &expected);

        let info = f.tensor_info("w.f32").expect("info");
        assert_eq!(info.dims, [3, 2]);
        assert_eq!(info.shape(), [2, 3]);
        assert_eq!(f.tensors().len(), 3);
        assert_eq!(
            f.tensor_f32("w.f32").expect("f32"),
            (vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        );
        let (shape, v) = f.tensor_f32("w.f16").expect("f16");
        assert_eq!(
            (shape, v),
            (vec![3], vec![0.5, -2.0, f16::from_f32(0.1).to_f32()])
        );
        let (shape, v) = f.tensor_f32("w.q8").expect("q8");
        assert_eq!(shape, [2, 32]);
        assert_eq!(v, q8);
        assert_eq!(
            f.tensor_info("w.q8").expect("info").ggml_type,
            GgmlType::Q8_0
        );
        assert_eq!(f.tensor_data("w.q8").expect("data").len(), 68);

        let err = f.tensor_f32("nope").unwrap_err();
        assert!(err.to_string().ends_with("no tensor named `nope`"), "{err}");
    }

    #[test]
    fn general_alignment_is_honoured() {
        let mut w = GgufWriter::new();
        w.metadata("general.alignment", 64u32);
        w.tensor_f32("a", &[3], &[1.0, 2.0, 3.0]).expect("a");
        w.tensor_f32("b", &[2], &[4.0, 5.0]).expect("b");
        let f = GgufFile::from_bytes("m.gguf", w.to_bytes().expect("bytes")).expect("parse");
        assert_eq!(f.alignment(), 64);
        assert_eq!(f.data_offset() % 64, 0);
        assert_eq!(f.tensor_info("b").expect("b").offset, 64);
        assert_eq!(f.tensor_f32("b").expect("b").1, [4.0, 5.0]);
    }
}
