//! Memory accounting: the per-run memory log, the estimators and the gate (the model shape and
//! breakdown types they use live in [`crate::model::arch`]).

pub mod calculator;
pub mod device;
pub mod estimate;
pub mod gate;
pub mod log;
pub mod pool;
