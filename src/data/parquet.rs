//! One string column of a Parquet file, read row group by row group (the hub serves data sets
//! such as WikiText-2 and PTB as Parquet). Only the column asked for is decoded.

use std::fs::File;
use std::path::Path;

use parquet::basic::Type as PhysicalType;
use parquet::column::reader::{get_typed_column_reader, ColumnReader};
use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::reader::{FileReader, RowGroupReader};
use parquet::file::serialized_reader::SerializedFileReader;

use super::rows_error::RowsError;

/// Rows decoded per read call.
const BATCH: usize = 1024;

/// Calls `each` with every value of the string column `column` of the Parquet file `path`, in
/// row order. A null value, a column that is not a string, or a damaged file is an error that
/// names the file.
pub fn for_each_string(
    path: &Path,
    column: &str,
    mut each: impl FnMut(&str) -> Result<(), RowsError>,
) -> Result<(), RowsError> {
    let bad = |message: String| RowsError::Malformed {
        path: path.to_path_buf(),
        message,
    };
    let file = File::open(path).map_err(|source| RowsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| bad(format!("not a readable Parquet file: {e}")))?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    let index = schema
        .columns()
        .iter()
        .position(|c| c.path().string() == column)
        .ok_or_else(|| RowsError::MissingColumn {
            path: path.to_path_buf(),
            column: column.to_owned(),
            found: schema.columns().iter().map(|c| c.path().string()).collect(),
        })?;
    let descr = schema.column(index);
    if descr.physical_type() != PhysicalType::BYTE_ARRAY {
        return Err(bad(format!(
            "column `{column}` holds {:?} values, not strings",
            descr.physical_type()
        )));
    }
    let max_def = descr.max_def_level();
    for group in 0..reader.num_row_groups() {
        let row_group = reader
            .get_row_group(group)
            .map_err(|e| bad(format!("row group {group}: {e}")))?;
        read_group(&*row_group, index, max_def, column, &bad, &mut each)?;
    }
    Ok(())
}

/// The values of column `index` of one row group, handed to `each`.
fn read_group(
    row_group: &dyn RowGroupReader,
    index: usize,
    max_def: i16,
    column: &str,
    bad: &dyn Fn(String) -> RowsError,
    each: &mut dyn FnMut(&str) -> Result<(), RowsError>,
) -> Result<(), RowsError> {
    let rows = usize::try_from(row_group.metadata().num_rows()).unwrap_or(0);
    let reader = row_group
        .get_column_reader(index)
        .map_err(|e| bad(format!("column `{column}`: {e}")))?;
    let ColumnReader::ByteArrayColumnReader(_) = &reader else {
        return Err(bad(format!("column `{column}` is not a byte-array column")));
    };
    let mut typed = get_typed_column_reader::<ByteArrayType>(reader);
    let (mut values, mut defs) = (Vec::<ByteArray>::with_capacity(BATCH), Vec::new());
    let mut done = 0;
    while done < rows {
        values.clear();
        defs.clear();
        let (records, read_values, _) = typed
            .read_records(BATCH, (max_def > 0).then_some(&mut defs), None, &mut values)
            .map_err(|e| bad(format!("column `{column}`: {e}")))?;
        if records == 0 {
            return Err(bad(format!(
                "column `{column}` ends after {done} of its row group's {rows} rows (truncated?)"
            )));
        }
        if read_values != records {
            return Err(bad(format!(
                "column `{column}` has a null value near row {done}; every row needs a string"
            )));
        }
        for value in &values {
            let text = value
                .as_utf8()
                .map_err(|_| bad(format!("column `{column}` holds a value that is not UTF-8")))?;
            each(text)?;
        }
        done += records;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    /// Writes `rows` as a one-column (`text`) Parquet file, `per_group` rows per row group.
    pub(crate) fn write_text_column(path: &Path, rows: &[&str], per_group: usize) {
        let schema = Arc::new(
            parse_message_type("message schema { REQUIRED BYTE_ARRAY text (UTF8); }").unwrap(),
        );
        let props = Arc::new(WriterProperties::builder().build());
        let mut writer =
            SerializedFileWriter::new(File::create(path).unwrap(), schema, props).unwrap();
        for chunk in rows.chunks(per_group.max(1)) {
            let mut group = writer.next_row_group().unwrap();
            let mut column = group.next_column().unwrap().unwrap();
            let values: Vec<ByteArray> = chunk.iter().map(|r| ByteArray::from(*r)).collect();
            column
                .typed::<ByteArrayType>()
                .write_batch(&values, None, None)
                .unwrap();
            column.close().unwrap();
            group.close().unwrap();
        }
        writer.close().unwrap();
    }

    fn read_all(path: &Path, column: &str) -> Result<Vec<String>, RowsError> {
        let mut out = Vec::new();
        for_each_string(path, column, |s| {
            out.push(s.to_owned());
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn every_row_of_every_row_group_comes_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let rows: Vec<String> = (0..2500).map(|i| format!(" row {i} é\n")).collect();
        let refs: Vec<&str> = rows.iter().map(String::as_str).collect();
        write_text_column(&path, &refs, 1000);
        assert_eq!(read_all(&path, "text").unwrap(), rows);
    }

    #[test]
    fn a_missing_column_and_a_truncated_file_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        write_text_column(&path, &["a", "b"], 10);
        let err = read_all(&path, "sentence").unwrap_err();
        assert!(matches!(err, RowsError::MissingColumn { .. }), "{err}");
        assert!(err.to_string().contains("t.parquet"), "{err}");
        assert!(err.to_string().contains("it has: text"), "{err}");

        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let err = read_all(&path, "text").unwrap_err();
        assert!(matches!(err, RowsError::Malformed { .. }), "{err}");
        assert!(err.to_string().contains("t.parquet"), "{err}");
    }
}
