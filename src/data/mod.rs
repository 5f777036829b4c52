//! Calibration and evaluation text: seeded sampling of token windows.

pub mod calibration;
pub mod hash;
pub mod pyrandom;
