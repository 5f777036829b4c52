//! GGUF model files, split by what each part does with the format:
//! - `reader`: a bounds-checked, memory-mapped reader (format versions 2 and 3)
//!   and the tensor table ([`GgufFile`], [`GgufTensorInfo`]);
//! - `dequant`: ggml dequantisation to `f32` (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
//!   Q6_K, bit-exact with `ggml-quants.c`);
//! - `vocab`: a Hugging Face `tokenizer.json` builder for the embedded vocabulary
//!   ([`tokenizer_json`]);
//! - `writer`: a small writer for tests and fuzz seeds ([`GgufWriter`]);
//! - `checkpoint`: a GGUF file as a Llama-family checkpoint: config, tokenizer and weights under
//!   their Hugging Face names ([`GgufCheckpoint`], [`gguf_name`]).
//!
//! This file holds what the parts share: the error type, the ggml tensor types, the metadata
//! value types and the format's constants. The parts are private; their public items are
//! re-exported here, so callers name them as `crate::model::checkpoint::gguf::GgufFile` and so on.

mod checkpoint;
mod dequant;
mod reader;
mod vocab;
mod writer;

use std::fmt;
use std::path::PathBuf;

pub use checkpoint::{gguf_expert_name, gguf_name, GgufCheckpoint};
pub use reader::{GgufFile, GgufTensorInfo};
pub use vocab::tokenizer_json;
pub use writer::GgufWriter;

/// The four magic bytes every GGUF file starts with.
const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Data-section alignment used when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`: tensors have at most this many dimensions.
const MAX_DIMS: u32 = 4;

/// Everything that can go wrong reading, interpreting or writing a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened, inspected or mapped.
    #[error("`{path}`: cannot read file", path = .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file could not be written.
    #[error("`{path}`: cannot write file", path = .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The first four bytes are not `GGUF`.
    #[error(
        "`{path}`: not a gguf file: expected magic `GGUF` at offset 0, found `{found}`",
        path = .path.display()
    )]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The bytes found, escaped.
        found: String,
    },
    /// The format version is not 2 or 3.
    #[error(
        "`{path}`: unsupported gguf version `{version}` (only versions 2 and 3 are supported{hint})",
        path = .path.display()
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version read (little-endian).
        version: u32,
        /// Extra explanation, e.g. for big-endian files; may be empty.
        hint: String,
    },
    /// Fewer bytes are left than a field or tensor needs.
    #[error(
        "`{path}`: truncated at offset {offset}: expected {needed} bytes for {what}, {left} left",
        path = .path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Byte offset where the field starts.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the file from `offset`.
        left: u64,
        /// What was being read.
        what: String,
    },
    /// A field holds a value the format does not allow.
    #[error("`{path}`: invalid data at offset {offset}: {reason}", path = .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Byte offset of the offending field.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A required metadata key is absent.
    #[error("`{path}`: metadata key `{key}` is missing", path = .path.display())]
    MissingKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// A metadata value has a type (or range) the caller cannot use.
    #[error(
        "`{path}`: metadata key `{key}` holds {found}, expected {expected}",
        path = .path.display()
    )]
    WrongType {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What the caller asked for.
        expected: &'static str,
        /// What the file holds.
        found: String,
    },
    /// No tensor has the requested name.
    #[error("`{path}`: no tensor named `{name}`", path = .path.display())]
    TensorNotFound {
        /// The file.
        path: PathBuf,
        /// The requested name.
        name: String,
    },
    /// The tensor's ggml type cannot be dequantised by this module.
    #[error("unsupported ggml type `{ggml_type}` for tensor `{tensor}`")]
    UnsupportedType {
        /// The tensor's type.
        ggml_type: GgmlType,
        /// The tensor.
        tensor: String,
    },
    /// Tensor bytes do not match the element count and type.
    #[error("tensor `{tensor}`: {reason}")]
    BadTensorData {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// The embedded vocabulary cannot be turned into a `tokenizer.json`.
    #[error("`{path}`: cannot build tokenizer: {reason}", path = .path.display())]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// [`GgufWriter`] was given inconsistent input.
    #[error("invalid gguf writer input: {reason}")]
    WriterInput {
        /// What is wrong.
        reason: String,
    },
}

/// A ggml tensor element type, with the numeric ids used in GGUF files.
///
/// Every type ggml knows is listed so that files holding them still open and their sizes can
/// be checked; [`GgmlType::is_dequantizable`] says which ones [`GgufFile::tensor_f32`] converts.
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// 4-bit, blocks of 32 with one f16 scale.
    Q4_0,
    /// 4-bit, blocks of 32 with an f16 scale and an f16 minimum.
    Q4_1,
    /// 5-bit, blocks of 32 with one scale.
    Q5_0,
    /// 5-bit, blocks of 32 with a scale and a minimum.
    Q5_1,
    /// 8-bit, blocks of 32 with one f16 scale.
    Q8_0,
    /// 8-bit, blocks of 32 with a scale and a sum (used for activations).
    Q8_1,
    /// 2-bit k-quant, super-blocks of 256.
    Q2_K,
    /// 3-bit k-quant, super-blocks of 256.
    Q3_K,
    /// 4-bit k-quant, super-blocks of 256 with 6-bit sub-block scales and minimums.
    Q4_K,
    /// 5-bit k-quant, super-blocks of 256 with 6-bit sub-block scales and minimums.
    Q5_K,
    /// 6-bit k-quant, super-blocks of 256 with 8-bit sub-block scales.
    Q6_K,
    /// 8-bit k-quant, super-blocks of 256 (used for activations).
    Q8_K,
    /// i-quant, 2.06 bits per weight.
    IQ2_XXS,
    /// i-quant, 2.31 bits per weight.
    IQ2_XS,
    /// i-quant, 3.06 bits per weight.
    IQ3_XXS,
    /// i-quant, 1.56 bits per weight.
    IQ1_S,
    /// i-quant, 4.5 bits per weight, blocks of 32.
    IQ4_NL,
    /// i-quant, 3.44 bits per weight.
    IQ3_S,
    /// i-quant, 2.5 bits per weight.
    IQ2_S,
    /// i-quant, 4.25 bits per weight.
    IQ4_XS,
    /// 8-bit integer.
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// 64-bit IEEE float.
    F64,
    /// i-quant, 1.75 bits per weight.
    IQ1_M,
    /// bfloat16.
    BF16,
    /// Ternary, 1.69 bits per weight.
    TQ1_0,
    /// Ternary, 2.06 bits per weight.
    TQ2_0,
    /// Microscaling FP4, blocks of 32.
    MXFP4,
    /// NVIDIA FP4, blocks of 64.
    NVFP4,
    /// 1-bit, blocks of 128.
    Q1_0,
}

impl GgmlType {
    /// The type with GGUF id `id`, or `None` for ids ggml does not (or no longer) define.
    pub fn from_id(id: u32) -> Option<Self> {
        use GgmlType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            16 => IQ2_XXS,
            17 => IQ2_XS,
            18 => IQ3_XXS,
            19 => IQ1_S,
            20 => IQ4_NL,
            21 => IQ3_S,
            22 => IQ2_S,
            23 => IQ4_XS,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => IQ1_M,
            30 => BF16,
            34 => TQ1_0,
            35 => TQ2_0,
            39 => MXFP4,
            40 => NVFP4,
            41 => Q1_0,
            _ => return None,
        })
    }

    /// The GGUF id of this type.
    pub fn id(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2_K => 10,
            Q3_K => 11,
            Q4_K => 12,
            Q5_K => 13,
            Q6_K => 14,
            Q8_K => 15,
            IQ2_XXS => 16,
            IQ2_XS => 17,
            IQ3_XXS => 18,
            IQ1_S => 19,
            IQ4_NL => 20,
            IQ3_S => 21,
            IQ2_S => 22,
            IQ4_XS => 23,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            IQ1_M => 29,
            BF16 => 30,
            TQ1_0 => 34,
            TQ2_0 => 35,
            MXFP4 => 39,
            NVFP4 => 40,
            Q1_0 => 41,
        }
    }

    /// The name ggml uses for this type, e.g. `Q4_K`.
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
            NVFP4 => "NVFP4",
            Q1_0 => "Q1_0",
        }
    }

    /// Elements per block (1 for plain scalar types).
    pub fn block_size(self) -> usize {
        self.layout().0
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.layout().1
    }

    /// `(elements per block, bytes per block)`, as in ggml's type traits.
    fn layout(self) -> (usize, usize) {
        use GgmlType::*;
        match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q4_0 | IQ4_NL => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            MXFP4 => (32, 17),
            NVFP4 => (64, 36),
            Q1_0 => (128, 18),
            Q2_K => (256, 84),
            Q3_K | IQ3_S => (256, 110),
            Q4_K => (256, 144),
            Q5_K => (256, 176),
            Q6_K => (256, 210),
            Q8_K => (256, 292),
            IQ2_XXS | TQ2_0 => (256, 66),
            IQ2_XS => (256, 74),
            IQ3_XXS => (256, 98),
            IQ1_S => (256, 50),
            IQ2_S => (256, 82),
            IQ4_XS => (256, 136),
            IQ1_M => (256, 56),
            TQ1_0 => (256, 54),
        }
    }

    /// Whether [`GgufFile::tensor_f32`] can convert tensors of this type.
    pub fn is_dequantizable(self) -> bool {
        matches!(
            self,
            GgmlType::F32
                | GgmlType::F16
                | GgmlType::BF16
                | GgmlType::Q8_0
                | GgmlType::Q4_0
                | GgmlType::Q4_1
                | GgmlType::Q5_0
                | GgmlType::Q5_1
                | GgmlType::Q4_K
                | GgmlType::Q5_K
                | GgmlType::Q6_K
                | GgmlType::MXFP4
        )
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// GGUF metadata value type ids, shared by the reader and the writer.
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// `uint8`.
    U8(u8),
    /// `int8`.
    I8(i8),
    /// `uint16`.
    U16(u16),
    /// `int16`.
    I16(i16),
    /// `uint32`.
    U32(u32),
    /// `int32`.
    I32(i32),
    /// `float32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// UTF-8 `string`.
    String(String),
    /// Homogeneous `array`.
    Array(GgufArray),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float64`.
    F64(f64),
}

/// A homogeneous metadata array, stored compactly by element type.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufArray {
    /// `uint8` elements.
    U8(Vec<u8>),
    /// `int8` elements.
    I8(Vec<i8>),
    /// `uint16` elements.
    U16(Vec<u16>),
    /// `int16` elements.
    I16(Vec<i16>),
    /// `uint32` elements.
    U32(Vec<u32>),
    /// `int32` elements.
    I32(Vec<i32>),
    /// `float32` elements.
    F32(Vec<f32>),
    /// `bool` elements.
    Bool(Vec<bool>),
    /// `string` elements.
    String(Vec<String>),
    /// Nested arrays (each may have its own element type).
    Array(Vec<GgufArray>),
    /// `uint64` elements.
    U64(Vec<u64>),
    /// `int64` elements.
    I64(Vec<i64>),
    /// `float64` elements.
    F64(Vec<f64>),
}

impl GgufValue {
    /// The value as an integer, whatever its integer width; `None` for non-integers.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            GgufValue::U8(v) => v.into(),
            GgufValue::I8(v) => v.into(),
            GgufValue::U16(v) => v.into(),
            GgufValue::I16(v) => v.into(),
            GgufValue::U32(v) => v.into(),
            GgufValue::I32(v) => v.into(),
            GgufValue::U64(v) => v.into(),
            GgufValue::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The value as `f64`, from any float or integer type; `None` otherwise.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            // Integers in metadata are small (counts, ids): the rounding of huge ones is moot.
            _ => self.as_i128().map(|v| v as f64),
        }
    }

    /// The value as a string slice, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a bool, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as an array, if it is one.
    pub fn as_array(&self) -> Option<&GgufArray> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The GGUF name of the value's type, with the element type for arrays (`array of string`).
    pub fn type_name(&self) -> String {
        match self {
            GgufValue::U8(_) => "uint8".into(),
            GgufValue::I8(_) => "int8".into(),
            GgufValue::U16(_) => "uint16".into(),
            GgufValue::I16(_) => "int16".into(),
            GgufValue::U32(_) => "uint32".into(),
            GgufValue::I32(_) => "int32".into(),
            GgufValue::F32(_) => "float32".into(),
            GgufValue::Bool(_) => "bool".into(),
            GgufValue::String(_) => "string".into(),
            GgufValue::Array(a) => format!("array of {}", a.element_type_name()),
            GgufValue::U64(_) => "uint64".into(),
            GgufValue::I64(_) => "int64".into(),
            GgufValue::F64(_) => "float64".into(),
        }
    }
}

impl GgufArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            GgufArray::U8(v) => v.len(),
            GgufArray::I8(v) => v.len(),
            GgufArray::U16(v) => v.len(),
            GgufArray::I16(v) => v.len(),
            GgufArray::U32(v) => v.len(),
            GgufArray::I32(v) => v.len(),
            GgufArray::F32(v) => v.len(),
            GgufArray::Bool(v) => v.len(),
            GgufArray::String(v) => v.len(),
            GgufArray::Array(v) => v.len(),
            GgufArray::U64(v) => v.len(),
            GgufArray::I64(v) => v.len(),
            GgufArray::F64(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as `i64`, for any integer element type whose values all fit.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        fn conv<T: Copy>(v: &[T]) -> Option<Vec<i64>>
        where
            i64: TryFrom<T>,
        {
            v.iter().map(|&x| i64::try_from(x).ok()).collect()
        }
        match self {
            GgufArray::U8(v) => conv(v),
            GgufArray::I8(v) => conv(v),
            GgufArray::U16(v) => conv(v),
            GgufArray::I16(v) => conv(v),
            GgufArray::U32(v) => conv(v),
            GgufArray::I32(v) => conv(v),
            GgufArray::U64(v) => conv(v),
            GgufArray::I64(v) => Some(v.clone()),
            _ => None,
        }
    }

    /// The elements as `f32`, for float element types (f64 is rounded).
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        match self {
            GgufArray::F32(v) => Some(v.clone()),
            GgufArray::F64(v) => Some(v.iter().map(|&x| x as f32).collect()),
            _ => None,
        }
    }

    /// The elements, if they are strings.
    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            GgufArray::String(v) => Some(v),
            _ => None,
        }
    }

    /// The GGUF name of the element type.
    pub fn element_type_name(&self) -> &'static str {
        match self {
            GgufArray::U8(_) => "uint8",
            GgufArray::I8(_) => "int8",
            GgufArray::U16(_) => "uint16",
            GgufArray::I16(_) => "int16",
            GgufArray::U32(_) => "uint32",
            GgufArray::I32(_) => "int32",
            GgufArray::F32(_) => "float32",
            GgufArray::Bool(_) => "bool",
            GgufArray::String(_) => "string",
            GgufArray::Array(_) => "array",
            GgufArray::U64(_) => "uint64",
            GgufArray::I64(_) => "int64",
            GgufArray::F64(_) => "float64",
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl From<$t> for GgufValue {
            fn from(v: $t) -> Self {
                GgufValue::$variant(v)
            }
        }
        impl From<Vec<$t>> for GgufValue {
            fn from(v: Vec<$t>) -> Self {
                GgufValue::Array(GgufArray::$variant(v))
            }
        }
    )*};
}

value_from!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, u64 => U64, i64 => I64, f64 => F64,
);

impl From<&str> for GgufValue {
    fn from(v: &str) -> Self {
        GgufValue::String(v.to_owned())
    }
}

impl From<Vec<&str>> for GgufValue {
    fn from(v: Vec<&str>) -> Self {
        GgufValue::Array(GgufArray::String(
            v.into_iter().map(str::to_owned).collect(),
        ))
    }
}

impl From<GgufArray> for GgufValue {
    fn from(v: GgufArray) -> Self {
        GgufValue::Array(v)
    }
}

/// An integer value of any width, if it fits `T`.
fn as_int<T: TryFrom<i128>>(value: &GgufValue) -> Option<T> {
    value.as_i128().and_then(|v| T::try_from(v).ok())
}

/// A string-array value, for [`GgufFile::get_checked`].
fn strings(value: &GgufValue) -> Option<&[String]> {
    value.as_array().and_then(GgufArray::as_strings)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A file path in the temp dir, removed on drop.
    pub(super) struct TempPath(pub(super) PathBuf);

    impl TempPath {
        pub(super) fn new(tag: &str) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            TempPath(std::env::temp_dir().join(format!(
                "wanda-gguf-test-{}-{n}-{tag}.gguf",
                std::process::id()
            )))
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// A writer holding one metadata entry of every value type, nested arrays included.
    pub(super) fn sample_writer() -> GgufWriter {
        let mut w = GgufWriter::new();
        w.metadata("general.architecture", "llama")
            .metadata("a.u8", 7u8)
            .metadata("a.i8", -7i8)
            .metadata("a.u16", 700u16)
            .metadata("a.i16", -700i16)
            .metadata("a.u32", 70_000u32)
            .metadata("a.i32", -70_000i32)
            .metadata("a.f32", 0.5f32)
            .metadata("a.bool", true)
            .metadata("a.u64", 5_000_000_000u64)
            .metadata("a.i64", -5i64)
            .metadata("a.f64", 1e-6f64)
            .metadata("a.strings", vec!["x", "", "ü"])
            .metadata("a.i32s", vec![1i32, -2, 3])
            .metadata("a.f32s", vec![0.25f32, -1.0])
            .metadata("a.bools", vec![true, false])
            .metadata(
                "a.nested",
                GgufArray::Array(vec![
                    GgufArray::U8(vec![1, 2]),
                    GgufArray::String(vec!["s".into()]),
                    GgufArray::F64(vec![]),
                ]),
            );
        w
    }

    #[test]
    fn ggml_type_ids_round_trip() {
        for id in 0..64 {
            if let Some(ty) = GgmlType::from_id(id) {
                assert_eq!(ty.id(), id);
                assert!(ty.block_size() >= 1 && ty.type_size() >= 1);
            }
        }
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::from_id(12), Some(GgmlType::Q4_K));
    }
}
