//! Memory accounting: the per-run memory log.

pub mod log;
