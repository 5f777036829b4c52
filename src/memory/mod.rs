//! Memory accounting: the per-run memory log, the model shape and breakdown types of the
//! estimators.

pub mod calculator;
pub mod device;
pub mod estimate;
pub mod gate;
pub mod log;
pub mod shape;
