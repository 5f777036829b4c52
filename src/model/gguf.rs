//! GGUF model files: a bounds-checked, memory-mapped reader (format versions 2 and 3), ggml
//! dequantisation to `f32` (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, bit-exact with
//! `ggml-quants.c`), a Hugging Face `tokenizer.json` builder for the embedded vocabulary, and a
//! small writer for tests and fuzz seeds.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use half::f16;
use memmap2::Mmap;
use serde_json::{json, Map, Value};

/// The four magic bytes every GGUF file starts with.
const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Data-section alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`: tensors have at most this many dimensions.
const MAX_DIMS: u32 = 4;
/// Deepest accepted nesting of metadata arrays, so a hostile file cannot exhaust the stack.
const MAX_ARRAY_DEPTH: usize = 16;
/// Reservation cap for vectors whose length comes from the file: they grow as elements parse.
const MAX_RESERVE: usize = 4096;
/// Below this many elements a tensor is dequantised on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

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
                | GgmlType::Q4_K
                | GgmlType::Q5_K
                | GgmlType::Q6_K
        )
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// GGUF metadata value type ids.
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
    fn require<'a, T>(
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
}

/// An integer value of any width, if it fits `T`.
fn as_int<T: TryFrom<i128>>(value: &GgufValue) -> Option<T> {
    value.as_i128().and_then(|v| T::try_from(v).ok())
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

/// Dequantises `n` elements of type `ty` from `data`, on several threads for large tensors.
fn dequantize(name: &str, ty: GgmlType, data: &[u8], n: usize) -> Result<Vec<f32>, GgufError> {
    if !ty.is_dequantizable() {
        return Err(GgufError::UnsupportedType {
            ggml_type: ty,
            tensor: name.to_owned(),
        });
    }
    let bad = |reason: String| GgufError::BadTensorData {
        tensor: name.to_owned(),
        reason,
    };
    let (block, type_size) = ty.layout();
    if !n.is_multiple_of(block) {
        return Err(bad(format!(
            "{n} elements is not a multiple of the {ty} block size {block}"
        )));
    }
    let n_blocks = n / block;
    let expected = n_blocks
        .checked_mul(type_size)
        .ok_or_else(|| bad(format!("{n} elements of {ty} overflow the address space")))?;
    if data.len() != expected {
        return Err(bad(format!(
            "expected {expected} bytes of {ty} data for {n} elements, found {}",
            data.len()
        )));
    }
    let mut out = vec![0f32; n];
    let threads = std::thread::available_parallelism()
        .map_or(2, std::num::NonZeroUsize::get)
        .max(2);
    if n < PARALLEL_MIN_ELEMENTS {
        dequantize_blocks(ty, data, &mut out);
    } else {
        // Whole blocks per thread, each writing its own disjoint slice of the output.
        let per_thread = n_blocks.div_ceil(threads);
        std::thread::scope(|s| {
            for (src, dst) in data
                .chunks(per_thread * type_size)
                .zip(out.chunks_mut(per_thread * block))
            {
                s.spawn(move || dequantize_blocks(ty, src, dst));
            }
        });
    }
    Ok(out)
}

/// Dequantises the whole blocks of `src` into `dst`; callers have matched the lengths and
/// checked that `ty` is dequantisable.
fn dequantize_blocks(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    match ty {
        GgmlType::F32 => each_block::<4, 1>(src, dst, |b, y| y[0] = f32::from_le_bytes(*b)),
        GgmlType::F16 => {
            each_block::<2, 1>(src, dst, |b, y| y[0] = f16::from_le_bytes(*b).to_f32())
        }
        GgmlType::BF16 => each_block::<2, 1>(src, dst, |b, y| y[0] = bf16_to_f32(*b)),
        GgmlType::Q8_0 => each_block(src, dst, dequant_q8_0),
        GgmlType::Q4_0 => each_block(src, dst, dequant_q4_0),
        GgmlType::Q4_1 => each_block(src, dst, dequant_q4_1),
        GgmlType::Q4_K => each_block(src, dst, dequant_q4_k),
        GgmlType::Q5_K => each_block(src, dst, dequant_q5_k),
        GgmlType::Q6_K => each_block(src, dst, dequant_q6_k),
        // Not dequantisable: rejected by `dequantize` before any thread starts.
        _ => {}
    }
}

/// Applies a per-block function to every whole block.
fn each_block<const TS: usize, const BS: usize>(
    src: &[u8],
    dst: &mut [f32],
    f: impl Fn(&[u8; TS], &mut [f32; BS]),
) {
    let (src, _) = src.as_chunks::<TS>();
    let (dst, _) = dst.as_chunks_mut::<BS>();
    for (block, out) in src.iter().zip(dst) {
        f(block, out);
    }
}

/// ggml's `GGML_BF16_TO_FP32`: the bf16 bits are the high half of the f32.
fn bf16_to_f32(bytes: [u8; 2]) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes(bytes)) << 16)
}

fn f16_to_f32(lo: u8, hi: u8) -> f32 {
    f16::from_le_bytes([lo, hi]).to_f32()
}

/// `dequantize_row_q8_0`: `{ f16 d; i8 qs[32] }`, `y = qs * d`.
fn dequant_q8_0(b: &[u8; 34], y: &mut [f32; 32]) {
    let d = f16_to_f32(b[0], b[1]);
    for (y, &q) in y.iter_mut().zip(&b[2..]) {
        *y = f32::from(q as i8) * d;
    }
}

/// `dequantize_row_q4_0`: `{ f16 d; u8 qs[16] }`; low nibbles are elements 0..16, high nibbles
/// 16..32, each `(q - 8) * d`.
fn dequant_q4_0(b: &[u8; 18], y: &mut [f32; 32]) {
    let d = f16_to_f32(b[0], b[1]);
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, lo), hi) in b[2..].iter().zip(lo).zip(hi) {
        *lo = f32::from(i16::from(q & 0x0F) - 8) * d;
        *hi = f32::from(i16::from(q >> 4) - 8) * d;
    }
}

/// `dequantize_row_q4_1`: `{ f16 d; f16 m; u8 qs[16] }`, nibbles as Q4_0, each `q * d + m`.
fn dequant_q4_1(b: &[u8; 20], y: &mut [f32; 32]) {
    let d = f16_to_f32(b[0], b[1]);
    let m = f16_to_f32(b[2], b[3]);
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, lo), hi) in b[4..].iter().zip(lo).zip(hi) {
        *lo = f32::from(q & 0x0F) * d + m;
        *hi = f32::from(q >> 4) * d + m;
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and minimum of sub-block `j` (0..8) from the
/// 12 packed bytes of a Q4_K/Q5_K super-block.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// `dequantize_row_q4_K`: `{ f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }`. Each 32 bytes of
/// `qs` hold two 32-element sub-blocks (low nibbles, then high), each `d*sc * q - dmin*m`.
fn dequant_q4_k(b: &[u8; 144], y: &mut [f32; 256]) {
    let d = f16_to_f32(b[0], b[1]);
    let min = f16_to_f32(b[2], b[3]);
    let scales = &b[4..16];
    for (pair, (qs, y)) in b[16..]
        .chunks_exact(32)
        .zip(y.chunks_exact_mut(64))
        .enumerate()
    {
        let (sc1, m1) = scale_min_k4(2 * pair, scales);
        let (sc2, m2) = scale_min_k4(2 * pair + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
        let (lo, hi) = y.split_at_mut(32);
        for ((&q, lo), hi) in qs.iter().zip(lo).zip(hi) {
            *lo = d1 * f32::from(q & 0x0F) - m1;
            *hi = d2 * f32::from(q >> 4) - m2;
        }
    }
}

/// `dequantize_row_q5_K`: `{ f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }`. As
/// Q4_K, with bit `2*pair` (low nibbles) or `2*pair + 1` (high) of `qh[l]` adding 16.
fn dequant_q5_k(b: &[u8; 176], y: &mut [f32; 256]) {
    let d = f16_to_f32(b[0], b[1]);
    let min = f16_to_f32(b[2], b[3]);
    let scales = &b[4..16];
    let qh = &b[16..48];
    for (pair, (qs, y)) in b[48..]
        .chunks_exact(32)
        .zip(y.chunks_exact_mut(64))
        .enumerate()
    {
        let (sc1, m1) = scale_min_k4(2 * pair, scales);
        let (sc2, m2) = scale_min_k4(2 * pair + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
        let (u1, u2) = (1u8 << (2 * pair), 2u8 << (2 * pair));
        let (lo, hi) = y.split_at_mut(32);
        for (((&q, &h), lo), hi) in qs.iter().zip(qh).zip(lo).zip(hi) {
            let high1 = if h & u1 != 0 { 16 } else { 0 };
            let high2 = if h & u2 != 0 { 16 } else { 0 };
            *lo = d1 * f32::from((q & 0x0F) + high1) - m1;
            *hi = d2 * f32::from((q >> 4) + high2) - m2;
        }
    }
}

/// `dequantize_row_q6_K`: `{ u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }`. Each 128-element
/// half takes 64 bytes of `ql` (low 4 bits), 32 of `qh` (2 high bits each) and 8 scales; element
/// `i` is `d * scales[i / 16] * (q - 32)`.
fn dequant_q6_k(b: &[u8; 210], y: &mut [f32; 256]) {
    let d = f16_to_f32(b[208], b[209]);
    let (ql, rest) = b.split_at(128);
    let (qh, rest) = rest.split_at(64);
    let scales = &rest[..16];
    for (((ql, qh), sc), y) in ql
        .chunks_exact(64)
        .zip(qh.chunks_exact(32))
        .zip(scales.chunks_exact(8))
        .zip(y.chunks_exact_mut(128))
    {
        for l in 0..32 {
            let is = l / 16;
            let q1 = i16::from((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i16::from((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i16::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i16::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            let s = |k: usize| d * f32::from(sc[is + k] as i8);
            y[l] = s(0) * f32::from(q1);
            y[l + 32] = s(2) * f32::from(q2);
            y[l + 64] = s(4) * f32::from(q3);
            y[l + 96] = s(6) * f32::from(q4);
        }
    }
}

/// GPT-2's split regex is ByteLevel's own; these are the Llama-3 and Qwen2 variants as they
/// appear in the upstream `tokenizer.json` files.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp token types (`tokenizer.ggml.token_type`).
const TOKEN_UNKNOWN: i64 = 2;
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

/// Converts the GGUF's embedded vocabulary into a Hugging Face `tokenizer.json` value, loadable
/// with `tokenizers::Tokenizer::from_str(&value.to_string())`.
///
/// Supports `tokenizer.ggml.model`:
/// - `gpt2`: byte-level BPE. `tokenizer.ggml.pre` picks the split regex: GPT-2's (ByteLevel with
///   `use_regex`) for `default`, `gpt-2`, `smollm`, `starcoder`, an absent key and kin, as
///   Hugging Face's GGUF converter does; Llama 3's or Qwen2's for theirs; other names are an
///   error. BOS is prepended only when `tokenizer.ggml.add_bos_token` is true (default false).
/// - `llama`: SentencePiece-style BPE as Hugging Face's GGUF converter builds it: merges from
///   `tokenizer.ggml.merges`, or derived from `tokenizer.ggml.scores`; `▁` for spaces (with a
///   leading one when `tokenizer.ggml.add_space_prefix`, default true); byte fallback to
///   `<0x..>` tokens; BOS prepended unless `tokenizer.ggml.add_bos_token` is false.
///
/// Control (type 3) and unknown (type 2) tokens become special added tokens, user-defined
/// (type 4) ones plain added tokens; EOS is appended when `tokenizer.ggml.add_eos_token` is true.
pub fn tokenizer_json(file: &GgufFile) -> Result<Value, GgufError> {
    let model = file.require("tokenizer.ggml.model", "a string", GgufValue::as_str)?;
    match model {
        "gpt2" => gpt2_tokenizer(file),
        "llama" => llama_tokenizer(file),
        other => Err(tokenizer_error(
            file,
            format!("unsupported tokenizer model `{other}` (supported: `gpt2`, `llama`)"),
        )),
    }
}

/// A string-array value, for [`GgufFile::get_checked`].
fn strings(value: &GgufValue) -> Option<&[String]> {
    value.as_array().and_then(GgufArray::as_strings)
}

fn tokenizer_error(file: &GgufFile, reason: String) -> GgufError {
    GgufError::Tokenizer {
        path: file.path().to_owned(),
        reason,
    }
}

/// The parts of `tokenizer.ggml.*` both models share.
struct Vocab<'a> {
    tokens: &'a [String],
    types: Option<Vec<i64>>,
    bos: Option<usize>,
    eos: Option<usize>,
    unk: Option<usize>,
    add_bos: bool,
    add_eos: bool,
}

impl<'a> Vocab<'a> {
    fn read(file: &'a GgufFile, default_add_bos: bool) -> Result<Self, GgufError> {
        let tokens = file.require("tokenizer.ggml.tokens", "an array of string", strings)?;
        let types = file.get_checked("tokenizer.ggml.token_type", "an array of integers", |v| {
            v.as_array().and_then(GgufArray::to_i64_vec)
        })?;
        if let Some(types) = &types {
            if types.len() != tokens.len() {
                return Err(tokenizer_error(
                    file,
                    format!(
                        "`tokenizer.ggml.token_type` has {} entries but `tokenizer.ggml.tokens` has {}",
                        types.len(),
                        tokens.len()
                    ),
                ));
            }
        }
        let id = |key: &str| -> Result<Option<usize>, GgufError> {
            let Some(id) = file.get_checked(key, "a token id", as_int::<usize>)? else {
                return Ok(None);
            };
            if id >= tokens.len() {
                return Err(tokenizer_error(
                    file,
                    format!(
                        "`{key}` is {id}, outside the vocabulary of {}",
                        tokens.len()
                    ),
                ));
            }
            Ok(Some(id))
        };
        let flag = |key: &str, default: bool| {
            file.get_checked(key, "a bool", GgufValue::as_bool)
                .map(|v| v.unwrap_or(default))
        };
        let vocab = Vocab {
            tokens,
            types,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token", default_add_bos)?,
            add_eos: flag("tokenizer.ggml.add_eos_token", false)?,
        };
        if vocab.add_bos && vocab.bos.is_none() {
            return Err(tokenizer_error(
                file,
                "BOS is to be added but `tokenizer.ggml.bos_token_id` is missing".into(),
            ));
        }
        if vocab.add_eos && vocab.eos.is_none() {
            return Err(tokenizer_error(
                file,
                "EOS is to be added but `tokenizer.ggml.eos_token_id` is missing".into(),
            ));
        }
        Ok(vocab)
    }

    fn token(&self, id: usize) -> &str {
        self.tokens.get(id).map_or("", String::as_str)
    }

    /// `added_tokens` entries: special for control/unknown tokens (or unk/bos/eos when the file
    /// has no token types), plain for user-defined ones.
    fn added_tokens(&self) -> Vec<Value> {
        let entry = |id: usize, special: bool| {
            json!({
                "id": id,
                "content": self.token(id),
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": special,
            })
        };
        match &self.types {
            Some(types) => types
                .iter()
                .enumerate()
                .filter_map(|(id, &ty)| match ty {
                    TOKEN_CONTROL | TOKEN_UNKNOWN => Some(entry(id, true)),
                    TOKEN_USER_DEFINED => Some(entry(id, false)),
                    _ => None,
                })
                .collect(),
            None => {
                let mut ids: Vec<usize> = [self.unk, self.bos, self.eos]
                    .into_iter()
                    .flatten()
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                ids.into_iter().map(|id| entry(id, true)).collect()
            }
        }
    }

    /// Token → id, the last occurrence winning for duplicated strings (as in Hugging Face's
    /// converter).
    fn vocab_map(&self) -> Map<String, Value> {
        self.tokens
            .iter()
            .enumerate()
            .map(|(id, t)| (t.clone(), json!(id)))
            .collect()
    }

    /// A `TemplateProcessing` adding BOS and/or EOS as configured.
    fn post_processor(&self) -> Value {
        let bos = self
            .bos
            .filter(|_| self.add_bos)
            .map(|id| (self.token(id), id));
        let eos = self
            .eos
            .filter(|_| self.add_eos)
            .map(|id| (self.token(id), id));
        let special =
            |tok: &str, type_id: u32| json!({ "SpecialToken": { "id": tok, "type_id": type_id } });
        let sequence =
            |id: &str, type_id: u32| json!({ "Sequence": { "id": id, "type_id": type_id } });
        let mut single = Vec::new();
        let mut pair = Vec::new();
        let mut special_tokens = Map::new();
        for (seq, type_id) in [("A", 0), ("B", 1)] {
            let out = if type_id == 0 { &mut single } else { &mut pair };
            if let Some((tok, _)) = bos {
                out.push(special(tok, type_id));
            }
            out.push(sequence(seq, type_id));
            if let Some((tok, _)) = eos {
                out.push(special(tok, type_id));
            }
        }
        let pair: Vec<Value> = single.iter().cloned().chain(pair).collect();
        for (tok, id) in bos.into_iter().chain(eos) {
            special_tokens.insert(
                tok.to_owned(),
                json!({ "id": tok, "ids": [id], "tokens": [tok] }),
            );
        }
        json!({
            "type": "TemplateProcessing",
            "single": single,
            "pair": pair,
            "special_tokens": special_tokens,
        })
    }
}

/// `tokenizer.ggml.merges` (`"left right"` strings) as `[left, right]` pairs, if present.
fn gguf_merges(file: &GgufFile) -> Result<Option<Vec<Value>>, GgufError> {
    let Some(merges) = file.get_checked("tokenizer.ggml.merges", "an array of string", strings)?
    else {
        return Ok(None);
    };
    merges
        .iter()
        .enumerate()
        .map(|(i, m)| match m.split_once(' ') {
            Some((l, r)) => Ok(json!([l, r])),
            None => Err(tokenizer_error(
                file,
                format!("merge {i} `{m}` of `tokenizer.ggml.merges` has no space"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The model section of a BPE `tokenizer.json`.
fn bpe_model(vocab: &Vocab<'_>, merges: Vec<Value>, spm: bool, ignore_merges: bool) -> Value {
    json!({
        "type": "BPE",
        "dropout": null,
        "unk_token": vocab.unk.map(|id| vocab.token(id)),
        "continuing_subword_prefix": null,
        "end_of_word_suffix": null,
        "fuse_unk": spm,
        "byte_fallback": spm,
        "ignore_merges": ignore_merges,
        "vocab": vocab.vocab_map(),
        "merges": merges,
    })
}

fn gpt2_tokenizer(file: &GgufFile) -> Result<Value, GgufError> {
    let vocab = Vocab::read(file, false)?;
    let merges = gguf_merges(file)?.ok_or_else(|| {
        tokenizer_error(file, "model `gpt2` needs `tokenizer.ggml.merges`".into())
    })?;
    let pre = file.get_checked("tokenizer.ggml.pre", "a string", GgufValue::as_str)?;
    let (pre_tokenizer, ignore_merges) = gpt2_pre_tokenizer(pre).ok_or_else(|| {
        tokenizer_error(
            file,
            format!(
                "unsupported pre-tokenizer `{}` for model `gpt2`",
                pre.unwrap_or_default()
            ),
        )
    })?;
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": vocab.added_tokens(),
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": vocab.post_processor(),
        "decoder": {
            "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true,
        },
        "model": bpe_model(&vocab, merges, false, ignore_merges),
    }))
}

/// The pre-tokenizer for llama.cpp's `tokenizer.ggml.pre` name, and whether BPE ignores merges
/// for whole-word vocabulary hits (Llama 3); `None` for names not mapped here.
fn gpt2_pre_tokenizer(pre: Option<&str>) -> Option<(Value, bool)> {
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true,
    });
    let split = |pattern: &str| {
        json!({
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split", "pattern": { "Regex": pattern },
                    "behavior": "Isolated", "invert": false,
                },
                {
                    "type": "ByteLevel", "add_prefix_space": false,
                    "trim_offsets": false, "use_regex": false,
                },
            ],
        })
    };
    Some(match pre.unwrap_or("default") {
        // llama.cpp splits off every digit before the GPT-2 regex for `smollm`, `starcoder` and
        // kin, as does upstream SmolLM2's tokenizer.json (a `Digits` pre-tokenizer); Hugging
        // Face's GGUF converter does not, and that changes a few tokens around whitespace before
        // digits (` \n\n\n 1`). This follows the converter, which the reference files match.
        "default" | "gpt-2" | "gpt2" | "phi-2" | "roberta-bpe" | "mpt" | "olmo" | "jais"
        | "smollm" | "starcoder" | "refact" | "codeshell" | "command-r" | "exaone" | "minerva" => {
            (byte_level, false)
        }
        "llama3" | "llama-v3" | "llama-bpe" => (split(LLAMA3_SPLIT), true),
        "dbrx" | "smaug-bpe" => (split(LLAMA3_SPLIT), false),
        "qwen2" => (split(QWEN2_SPLIT), false),
        _ => return None,
    })
}

fn llama_tokenizer(file: &GgufFile) -> Result<Value, GgufError> {
    let vocab = Vocab::read(file, true)?;
    let merges = match gguf_merges(file)? {
        Some(merges) => merges,
        None => {
            let scores = file.require("tokenizer.ggml.scores", "an array of floats", |v| {
                v.as_array().and_then(GgufArray::to_f32_vec)
            })?;
            if scores.len() != vocab.tokens.len() {
                return Err(tokenizer_error(
                    file,
                    format!(
                        "`tokenizer.ggml.scores` has {} entries but `tokenizer.ggml.tokens` has {}",
                        scores.len(),
                        vocab.tokens.len()
                    ),
                ));
            }
            merges_from_scores(vocab.tokens, &scores)
        }
    };
    let add_space_prefix = file
        .get_checked(
            "tokenizer.ggml.add_space_prefix",
            "a bool",
            GgufValue::as_bool,
        )?
        .unwrap_or(true);
    let mut normalizers = Vec::new();
    if add_space_prefix {
        normalizers.push(json!({ "type": "Prepend", "prepend": "\u{2581}" }));
    }
    normalizers
        .push(json!({ "type": "Replace", "pattern": { "String": " " }, "content": "\u{2581}" }));
    let mut decoders = vec![
        json!({ "type": "Replace", "pattern": { "String": "\u{2581}" }, "content": " " }),
        json!({ "type": "ByteFallback" }),
        json!({ "type": "Fuse" }),
    ];
    if add_space_prefix {
        decoders.push(json!({ "type": "Strip", "content": " ", "start": 1, "stop": 0 }));
    }
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": vocab.added_tokens(),
        "normalizer": { "type": "Sequence", "normalizers": normalizers },
        "pre_tokenizer": null,
        "post_processor": vocab.post_processor(),
        "decoder": { "type": "Sequence", "decoders": decoders },
        "model": bpe_model(&vocab, merges, true, false),
    }))
}

/// Merges for a SentencePiece BPE vocabulary, derived as Hugging Face's GGUF converter does:
/// every split of every token into two vocabulary pieces, ordered within a token by the pieces'
/// scores and overall (stably) by the merged token's score, both descending.
fn merges_from_scores(tokens: &[String], scores: &[f32]) -> Vec<Value> {
    let desc = |a: f32, b: f32| b.partial_cmp(&a).unwrap_or(std::cmp::Ordering::Equal);
    let score_of: HashMap<&str, f32> = tokens
        .iter()
        .map(String::as_str)
        .zip(scores.iter().copied())
        .collect();
    let mut seen = HashSet::new();
    let mut merges: Vec<(&str, &str, f32)> = Vec::new();
    for token in tokens {
        let Some(&piece_score) = score_of.get(token.as_str()) else {
            continue;
        };
        if !seen.insert(token.as_str()) {
            continue;
        }
        let mut local: Vec<(&str, &str, f32, f32)> = token
            .char_indices()
            .skip(1)
            .filter_map(|(at, _)| {
                let (l, r) = token.split_at(at);
                Some((l, r, *score_of.get(l)?, *score_of.get(r)?))
            })
            .collect();
        local.sort_by(|a, b| desc(a.2, b.2).then(desc(a.3, b.3)));
        merges.extend(local.into_iter().map(|(l, r, _, _)| (l, r, piece_score)));
    }
    merges.sort_by(|a, b| desc(a.2, b.2));
    merges.into_iter().map(|(l, r, _)| json!([l, r])).collect()
}

/// Builds small GGUF (version 3) files in memory: for tests, examples and fuzz seeds.
///
/// Tensors are given in row-major ("PyTorch") shape order, like [`GgufFile::tensor_f32`]
/// returns them, and stored with GGUF's reversed dimensions. Metadata is written in insertion
/// order; `general.alignment`, when set, controls the data alignment.
///
/// ```
/// # use wanda::model::gguf::{GgufFile, GgufWriter};
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

fn write_string(out: &mut Vec<u8>, s: &str) {
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

#[cfg(test)]
// Index loops mirror the ggml formulas the expectations come from.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use std::str::FromStr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A file path in the temp dir, removed on drop.
    struct TempPath(PathBuf);

    impl TempPath {
        fn new(tag: &str) -> Self {
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

    fn h(bits: u16) -> [u8; 2] {
        bits.to_le_bytes()
    }

    fn deq(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
        dequantize("t", ty, bytes, n).expect("dequantize")
    }

    fn assert_truncated_fails(ty: GgmlType, block: &[u8]) {
        let n = ty.block_size();
        let err = dequantize("t", ty, &block[..block.len() - 1], n).unwrap_err();
        assert!(
            matches!(&err, GgufError::BadTensorData { tensor, .. } if tensor == "t"),
            "{err}"
        );
        assert!(err.to_string().contains("expected"), "{err}");
        // One block too few for twice the elements.
        assert!(dequantize("t", ty, block, 2 * n).is_err());
        if n > 1 {
            // Element counts that are not whole blocks.
            assert!(dequantize("t", ty, block, n - 1).is_err());
        }
    }

    // ---- dequantisation: hand-built blocks, expectations from the ggml formulas ----

    #[test]
    fn f32_is_read_little_endian() {
        let vals = [1.5f32, -2.25, 0.0, 3.0e-5, f32::MAX];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(deq(GgmlType::F32, &bytes, 5), vals);
        assert_truncated_fails(GgmlType::F32, &bytes[..4]);
    }

    #[test]
    fn f16_converts_normals_subnormals_and_max() {
        let bytes = [h(0x3C00), h(0xC000), h(0x3555), h(0x0001), h(0x7BFF)].concat();
        let expected = [1.0, -2.0, 0.333_251_95, 5.960_464_5e-8, 65504.0];
        assert_eq!(deq(GgmlType::F16, &bytes, 5), expected);
        assert_truncated_fails(GgmlType::F16, &bytes[..2]);
    }

    #[test]
    fn bf16_is_the_high_half_of_f32() {
        let bytes = [h(0x3F80), h(0xC0A0), h(0x3EAB), h(0x0001)].concat();
        // 0x3EAB0000: 2^-2 * (1 + 43/128).
        let expected = [
            1.0,
            -5.0,
            0.25 * (1.0 + 43.0 / 128.0),
            f32::from_bits(0x0001_0000),
        ];
        assert_eq!(deq(GgmlType::BF16, &bytes, 4), expected);
        assert_truncated_fails(GgmlType::BF16, &bytes[..2]);
    }

    #[test]
    fn q8_0_scales_signed_bytes() {
        // Block 0: d = 0.25; block 1: d = -1.5.
        let q0: Vec<i8> = (0..32)
            .map(|j| [-128, -1, 0, 1, 127, 5, -77, 33][j % 8])
            .collect();
        let q1: Vec<i8> = (0..32).map(|j| (j as i8) * 3 - 40).collect();
        let mut bytes = h(0x3400).to_vec();
        bytes.extend(q0.iter().map(|&q| q as u8));
        bytes.extend(h(0xBE00));
        bytes.extend(q1.iter().map(|&q| q as u8));
        let y = deq(GgmlType::Q8_0, &bytes, 64);
        for j in 0..32 {
            assert_eq!(y[j], f32::from(q0[j]) * 0.25);
            assert_eq!(y[32 + j], f32::from(q1[j]) * -1.5);
        }
        assert_eq!((y[0], y[4], y[32], y[63]), (-32.0, 31.75, 60.0, -79.5));
        assert_truncated_fails(GgmlType::Q8_0, &bytes[..34]);
    }

    #[test]
    fn q4_0_low_nibbles_first_then_high() {
        // d = 0.5; byte j holds lo = j, hi = 15 - j.
        let mut bytes = h(0x3800).to_vec();
        bytes.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = deq(GgmlType::Q4_0, &bytes, 32);
        for j in 0..16 {
            assert_eq!(y[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(y[16 + j], ((15 - j) as f32 - 8.0) * 0.5);
        }
        assert_eq!((y[0], y[15], y[16], y[31]), (-4.0, 3.5, 3.5, -4.0));
        assert_truncated_fails(GgmlType::Q4_0, &bytes);
    }

    #[test]
    fn q4_1_adds_the_minimum() {
        // d = 0.25, m = -1.5; byte j holds lo = 3j mod 16, hi = 7j + 1 mod 16.
        let lo = |j: usize| (3 * j % 16) as u8;
        let hi = |j: usize| ((7 * j + 1) % 16) as u8;
        let mut bytes = [h(0x3400), h(0xBE00)].concat();
        bytes.extend((0..16).map(|j| lo(j) | (hi(j) << 4)));
        let y = deq(GgmlType::Q4_1, &bytes, 32);
        for j in 0..16 {
            assert_eq!(y[j], f32::from(lo(j)) * 0.25 - 1.5);
            assert_eq!(y[16 + j], f32::from(hi(j)) * 0.25 - 1.5);
        }
        assert_eq!((y[0], y[16], y[5], y[21]), (-1.5, -1.25, 2.25, -0.5));
        assert_truncated_fails(GgmlType::Q4_1, &bytes);
    }

    /// Sub-block scales and minimums (6 bits each) exercising the upper-2-bit packing.
    const K_SCALES: [u8; 8] = [1, 63, 7, 32, 45, 2, 60, 17];
    const K_MINS: [u8; 8] = [0, 5, 63, 12, 33, 48, 1, 9];

    /// Packs scales/mins into the 12 bytes `get_scale_min_k4` reads (its inverse).
    fn pack_k4_scales(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
        let mut q = [0u8; 12];
        for j in 0..4 {
            q[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
            q[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
            q[j + 8] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
        }
        q
    }

    #[test]
    fn q4_k_unpacks_six_bit_scales_and_nibbles() {
        // d = 0.5, dmin = 0.125; element e of sub-block s = e / 32 has q = (5e + 3) mod 16.
        let q = |e: usize| ((5 * e + 3) % 16) as u8;
        let mut qs = [0u8; 128];
        for e in 0..256 {
            let (s, l) = (e / 32, e % 32);
            let byte = &mut qs[32 * (s / 2) + l];
            *byte |= if s % 2 == 0 { q(e) } else { q(e) << 4 };
        }
        let bytes = [
            &h(0x3800)[..],
            &h(0x3000),
            &pack_k4_scales(K_SCALES, K_MINS),
            &qs,
        ]
        .concat();
        let y = deq(GgmlType::Q4_K, &bytes, 256);
        for e in 0..256 {
            let s = e / 32;
            let expected =
                0.5 * f32::from(K_SCALES[s]) * f32::from(q(e)) - 0.125 * f32::from(K_MINS[s]);
            assert_eq!(y[e], expected, "element {e}");
        }
        // By hand: e = 0: 0.5*1*3; e = 32: 0.5*63*3 - 0.125*5; e = 255: 0.5*17*14 - 0.125*9.
        assert_eq!((y[0], y[32], y[255]), (1.5, 93.875, 117.875));
        assert_truncated_fails(GgmlType::Q4_K, &bytes);
    }

    #[test]
    fn q5_k_adds_the_high_bit_per_sub_block() {
        // d = 0.5, dmin = 0.125; q = (11e + 7) mod 32, the fifth bit in qh[l] bit s.
        let q = |e: usize| ((11 * e + 7) % 32) as u8;
        let mut qs = [0u8; 128];
        let mut qh = [0u8; 32];
        for e in 0..256 {
            let (s, l) = (e / 32, e % 32);
            let low = q(e) & 0x0F;
            qs[32 * (s / 2) + l] |= if s % 2 == 0 { low } else { low << 4 };
            qh[l] |= (q(e) >> 4) << s;
        }
        let bytes = [
            &h(0x3800)[..],
            &h(0x3000),
            &pack_k4_scales(K_SCALES, K_MINS),
            &qh,
            &qs,
        ]
        .concat();
        let y = deq(GgmlType::Q5_K, &bytes, 256);
        for e in 0..256 {
            let s = e / 32;
            let expected =
                0.5 * f32::from(K_SCALES[s]) * f32::from(q(e)) - 0.125 * f32::from(K_MINS[s]);
            assert_eq!(y[e], expected, "element {e}");
        }
        // By hand: e = 1: q = 18, 0.5*1*18; e = 200 (s = 6): q = 2207 mod 32 = 31, 0.5*60*31 - 0.125.
        assert_eq!((y[1], y[200]), (9.0, 929.875));
        assert_truncated_fails(GgmlType::Q5_K, &bytes);
    }

    #[test]
    fn q6_k_combines_low_and_high_bits_with_signed_scales() {
        // d = 0.5; q = (13e + 5) mod 64, value q - 32, scale scales[e / 16].
        let scales: [i8; 16] = [
            1, -2, 3, 127, -128, 5, -7, 11, 13, -17, 19, 23, -29, 31, 37, -41,
        ];
        let q = |e: usize| ((13 * e + 5) % 64) as u8;
        let mut ql = [0u8; 128];
        let mut qh = [0u8; 64];
        for e in 0..256 {
            let (half, r) = (e / 128, e % 128);
            let (group, l) = (r / 32, r % 32);
            let low = q(e) & 0x0F;
            let byte = &mut ql[64 * half + 32 * (group % 2) + l];
            *byte |= if group < 2 { low } else { low << 4 };
            qh[32 * half + l] |= (q(e) >> 4) << (2 * group);
        }
        let sc: Vec<u8> = scales.iter().map(|&s| s as u8).collect();
        let bytes = [&ql[..], &qh, &sc, &h(0x3800)].concat();
        let y = deq(GgmlType::Q6_K, &bytes, 256);
        for e in 0..256 {
            let expected = 0.5 * f32::from(scales[e / 16]) * (f32::from(q(e)) - 32.0);
            assert_eq!(y[e], expected, "element {e}");
        }
        // By hand: e = 0: 0.5*1*(5-32); e = 64 (scale -128): q = 837 mod 64 = 5, 0.5*-128*-27.
        assert_eq!((y[0], y[64]), (-13.5, 1728.0));
        assert_truncated_fails(GgmlType::Q6_K, &bytes);
    }

    #[test]
    fn unsupported_types_are_named() {
        let err = dequantize("x", GgmlType::Q2_K, &[0; 84], 256).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported ggml type `Q2_K` for tensor `x`"
        );
        assert!(!GgmlType::IQ4_XS.is_dequantizable());
        for ty in [
            GgmlType::F32,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::BF16,
        ] {
            assert!(ty.is_dequantizable());
        }
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

    #[test]
    fn parallel_dequantisation_matches_one_thread() {
        let n_blocks = 1100;
        let mut state = 0x9E37_79B9u32;
        let mut bytes = Vec::with_capacity(n_blocks * 210);
        for _ in 0..n_blocks {
            for _ in 0..208 {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                bytes.push(state as u8);
            }
            bytes.extend(h(0x2C00 + (state % 512) as u16));
        }
        let n = n_blocks * 256;
        assert!(n >= PARALLEL_MIN_ELEMENTS);
        let parallel = deq(GgmlType::Q6_K, &bytes, n);
        let mut serial = vec![0f32; n];
        dequantize_blocks(GgmlType::Q6_K, &bytes, &mut serial);
        assert_eq!(parallel, serial);
    }

    // ---- writer ↔ reader ----

    fn sample_writer() -> GgufWriter {
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

    // ---- tokenizer.json ----

    fn load(json: &Value) -> tokenizers::Tokenizer {
        tokenizers::Tokenizer::from_str(&json.to_string()).expect("tokenizer loads")
    }

    fn gpt2_writer(add_bos: Option<bool>) -> GgufWriter {
        let tokens = vec![
            "<|endoftext|>",
            "<s>",
            "h",
            "e",
            "l",
            "o",
            "Ġ",
            "w",
            "r",
            "d",
            "he",
            "ll",
            "hell",
            "hello",
            "Ġw",
            "or",
            "Ġwor",
            "ld",
            "Ġworld",
            "<tool>",
        ];
        let mut types = vec![1i32; tokens.len()];
        types[0] = 3;
        types[1] = 3;
        types[19] = 4;
        let merges = vec![
            "h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld",
        ];
        let mut w = GgufWriter::new();
        w.metadata("tokenizer.ggml.model", "gpt2")
            .metadata("tokenizer.ggml.pre", "smollm")
            .metadata("tokenizer.ggml.tokens", tokens)
            .metadata("tokenizer.ggml.token_type", types)
            .metadata("tokenizer.ggml.merges", merges)
            .metadata("tokenizer.ggml.bos_token_id", 1u32)
            .metadata("tokenizer.ggml.eos_token_id", 0u32);
        if let Some(add) = add_bos {
            w.metadata("tokenizer.ggml.add_bos_token", add);
        }
        w
    }

    fn tokenizer_of(w: &GgufWriter) -> Result<Value, GgufError> {
        tokenizer_json(
            &GgufFile::from_bytes("tok.gguf", w.to_bytes().expect("bytes")).expect("parse"),
        )
    }

    #[test]
    fn gpt2_vocabulary_becomes_byte_level_bpe() {
        let tok = load(&tokenizer_of(&gpt2_writer(Some(false))).expect("json"));
        let enc = tok.encode("hello world", true).expect("encode");
        assert_eq!(enc.get_ids(), [13, 18]);
        assert_eq!(enc.get_tokens(), ["hello", "Ġworld"]);
        assert_eq!(
            tok.decode(enc.get_ids(), false).expect("decode"),
            "hello world"
        );
        // Control and user-defined tokens match whole; control ones are special.
        let enc = tok
            .encode("<s>hello<tool><|endoftext|>", true)
            .expect("encode");
        assert_eq!(enc.get_ids(), [1, 13, 19, 0]);
        assert_eq!(
            tok.decode(enc.get_ids(), true).expect("decode"),
            "hello<tool>"
        );
        // Absent add_bos_token means no BOS for gpt2.
        let tok = load(&tokenizer_of(&gpt2_writer(None)).expect("json"));
        assert_eq!(tok.encode("hello", true).expect("encode").get_ids(), [13]);
    }

    #[test]
    fn gpt2_adds_bos_only_when_asked() {
        let tok = load(&tokenizer_of(&gpt2_writer(Some(true))).expect("json"));
        assert_eq!(
            tok.encode("hello world", true).expect("encode").get_ids(),
            [1, 13, 18]
        );
        assert_eq!(
            tok.encode("hello world", false).expect("encode").get_ids(),
            [13, 18]
        );
        let pair = tok.encode(("hello", "world"), true).expect("encode");
        assert_eq!(pair.get_ids(), [1, 13, 1, 7, 15, 17]);
    }

    #[test]
    fn unsupported_tokenizers_are_named() {
        let mut w = gpt2_writer(None);
        w.metadata("tokenizer.ggml.model", "bert");
        let err = tokenizer_of(&w).unwrap_err().to_string();
        assert_eq!(
            err,
            "`tok.gguf`: cannot build tokenizer: unsupported tokenizer model `bert` (supported: `gpt2`, `llama`)"
        );
        let mut w = gpt2_writer(None);
        w.metadata("tokenizer.ggml.pre", "deepseek-llm");
        assert!(tokenizer_of(&w)
            .unwrap_err()
            .to_string()
            .contains("unsupported pre-tokenizer `deepseek-llm`"));
        let mut w = gpt2_writer(None);
        w.metadata("tokenizer.ggml.token_type", vec![1i32; 3]);
        assert!(tokenizer_of(&w)
            .unwrap_err()
            .to_string()
            .contains("has 3 entries"));
        let mut w = gpt2_writer(Some(true));
        w.metadata("tokenizer.ggml.bos_token_id", 99u32);
        assert!(tokenizer_of(&w)
            .unwrap_err()
            .to_string()
            .contains("outside the vocabulary"));
    }

    #[test]
    fn llama3_and_qwen2_split_regexes_load() {
        for pre in ["llama-bpe", "qwen2", "dbrx"] {
            let mut w = gpt2_writer(None);
            w.metadata("tokenizer.ggml.pre", pre);
            let tok = load(&tokenizer_of(&w).expect("json"));
            assert_eq!(
                tok.encode("hello world", false).expect("encode").get_ids(),
                [13, 18],
                "{pre}"
            );
        }
    }

    /// `<unk> <s> </s>`, 256 byte tokens, then SentencePiece pieces with descending scores.
    fn llama_writer() -> GgufWriter {
        let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        let mut types = vec![2i32, 3, 3];
        let mut scores = vec![0f32; 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
            scores.push(0.0);
        }
        for (i, piece) in ["▁", "H", "e", "l", "o", "ll", "▁H", "▁He", "llo", "▁Hello"]
            .iter()
            .enumerate()
        {
            tokens.push((*piece).into());
            types.push(1);
            scores.push(-1.0 - i as f32);
        }
        let mut w = GgufWriter::new();
        w.metadata("tokenizer.ggml.model", "llama")
            .metadata("tokenizer.ggml.tokens", tokens)
            .metadata("tokenizer.ggml.scores", scores)
            .metadata("tokenizer.ggml.token_type", types)
            .metadata("tokenizer.ggml.bos_token_id", 1u32)
            .metadata("tokenizer.ggml.eos_token_id", 2u32)
            .metadata("tokenizer.ggml.unknown_token_id", 0u32);
        w
    }

    #[test]
    fn llama_vocabulary_becomes_sentencepiece_bpe() {
        let json = tokenizer_of(&llama_writer()).expect("json");
        // Merges derived from scores, best merged piece first.
        assert_eq!(
            json["model"]["merges"],
            json!([
                ["l", "l"],
                ["▁", "H"],
                ["▁H", "e"],
                ["ll", "o"],
                ["▁He", "llo"]
            ])
        );
        let tok = load(&json);
        let enc = tok.encode("Hello", true).expect("encode");
        assert_eq!(enc.get_ids(), [1, 268]);
        // "i" is not a piece: it falls back to its byte token <0x69> = 3 + 0x69.
        let enc = tok.encode("Hi", true).expect("encode");
        assert_eq!(enc.get_ids(), [1, 265, 3 + 0x69]);
        assert_eq!(tok.decode(enc.get_ids(), true).expect("decode"), "Hi");
        assert_eq!(tok.encode("Hello", false).expect("encode").get_ids(), [268]);

        let mut w = llama_writer();
        w.metadata("tokenizer.ggml.add_bos_token", false)
            .metadata("tokenizer.ggml.add_space_prefix", false)
            .metadata("tokenizer.ggml.add_eos_token", true);
        let tok = load(&tokenizer_of(&w).expect("json"));
        // No leading "▁": "Hello" → H, e, ll, o, then EOS.
        assert_eq!(
            tok.encode("Hello", true).expect("encode").get_ids(),
            [260, 261, 267, 2]
        );
    }
}
