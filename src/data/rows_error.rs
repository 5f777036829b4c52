//! Why the rows of a Parquet or JSON-lines file could not be read ([`RowsError`]), shared by
//! [`super::parquet`] and [`super::rows`].

use std::path::PathBuf;

/// Why the rows of a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RowsError {
    /// The file could not be opened or read.
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is damaged or not in the format its name says.
    #[error("`{}` is damaged or not what its name says: {message}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The rows have no such column.
    #[error("`{}` has no column `{column}` (it has: {}); set `column:`", path.display(), found.join(", "))]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The column asked for.
        column: String,
        /// The columns (or keys of the first row) found.
        found: Vec<String>,
    },
}
