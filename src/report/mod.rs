//! Reports from a results folder: paper-style tables.

pub mod table;
