//! The bottom floor: file-system and process helpers every other module may use and that use
//! nothing of this crate — atomic writes and orphan cleanup ([`atomic`]) and the allocator's
//! tuning ([`allocator`]), phase timing for finding where a backend loses time ([`phases`]),
//! the process's storage I/O ([`io`]), the folders where compiled kernels and token ids persist
//! between runs ([`cache_dir`]).

pub mod allocator;
pub mod atomic;
pub mod cache_dir;
pub mod io;
pub mod phases;

pub use atomic::{remove_orphans, start_writeback, write_atomic};
