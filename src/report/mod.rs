//! Reports from a results folder: paper-style tables, metric-vs-sparsity plots and a
//! self-contained HTML page of the whole folder.

pub mod escape;
pub mod html;
pub mod plot;
pub mod table;
