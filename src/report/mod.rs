//! Reports from a results folder: paper-style tables and metric-vs-sparsity plots.

pub mod plot;
pub mod table;
