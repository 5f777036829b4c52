//! Calibration and evaluation text: files read and tokenised, and seeded sampling of token
//! windows.

pub mod calibration;
pub mod hash;
pub mod pyrandom;
pub mod text;

pub use text::{read_tokenized, TextEncoder, TextError};
