//! Calibration and evaluation text: files read and tokenised, data sets by name from the hub
//! (Parquet and JSON lines, as text or as whole records), seeded sampling of token windows, and
//! the ids of long texts and the digests of large files kept between runs.

pub mod calibration;
pub mod digest_cache;
pub mod hash;
pub mod hub;
pub mod parquet;
pub mod pyrandom;
pub mod records;
pub mod rows;
mod rows_error;
pub mod sets;
pub mod text;
pub mod token_cache;

pub use text::{read_tokenized, TextEncoder, TextError};
