//! Whole rows of data-set files as JSON objects: what a zero-shot task reads of each document
//! (strings, integers, lists of strings, structs of lists). Parquet through the `parquet`
//! crate's record reader (nested columns included, no Arrow), JSON lines through serde_json.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::{Map, Value};

use super::rows::{is_json_lines, RowsError};

/// One row: column name → value.
pub type Record = Map<String, Value>;

/// The rows of `path` (Parquet or JSON lines, by its name), in order, at most `limit` of them.
/// A damaged file, a line that is not a JSON object, or another format is an error naming the
/// file.
pub fn read_records(path: &Path, limit: Option<usize>) -> Result<Vec<Record>, RowsError> {
    let limit = limit.unwrap_or(usize::MAX);
    let bad = |message: String| RowsError::Malformed {
        path: path.to_path_buf(),
        message,
    };
    let name = path.to_string_lossy();
    let file = File::open(path).map_err(|source| RowsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut records = Vec::new();
    if name.ends_with(".parquet") {
        let reader = SerializedFileReader::new(file)
            .map_err(|e| bad(format!("not a readable Parquet file: {e}")))?;
        let rows = reader
            .get_row_iter(None)
            .map_err(|e| bad(format!("cannot read its rows: {e}")))?;
        for (number, row) in rows.take(limit).enumerate() {
            let row = row.map_err(|e| bad(format!("row {number}: {e}")))?;
            match row.to_json_value() {
                Value::Object(record) => records.push(record),
                other => return Err(bad(format!("row {number} is not a record: {other}"))),
            }
        }
        return Ok(records);
    }
    if !is_json_lines(&name) {
        return Err(bad(
            "not a Parquet (`.parquet`) or JSON-lines (`.jsonl`, `.json`, `.json.gz`) file"
                .to_owned(),
        ));
    }
    let reader: Box<dyn Read> = if name.ends_with(".gz") {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    for (number, line) in BufReader::new(reader).lines().enumerate() {
        if records.len() >= limit {
            break;
        }
        let line = line.map_err(|e| bad(format!("after line {number}: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(&line)
            .map_err(|e| bad(format!("line {}: not a JSON object: {e}", number + 1)))?;
        records.push(record);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    #[test]
    fn json_lines_rows_keep_their_types() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("validation.jsonl");
        std::fs::write(
            &path,
            "{\"q\": \"a\", \"label\": 1, \"choices\": {\"text\": [\"x\", \"y\"]}}\n\n{\"q\": \"b\", \"label\": 0, \"choices\": {\"text\": []}}\n",
        )
        .unwrap();
        let rows = read_records(&path, None).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["label"], Value::from(1));
        assert_eq!(rows[0]["choices"]["text"][1], Value::from("y"));
        assert_eq!(read_records(&path, Some(1)).unwrap().len(), 1);
    }

    #[test]
    fn a_line_that_is_not_an_object_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("test.jsonl");
        std::fs::write(&path, "{\"a\": 1}\n[1, 2]\n").unwrap();
        let err = read_records(&path, None).unwrap_err().to_string();
        assert!(
            err.contains("test.jsonl") && err.contains("line 2"),
            "{err}"
        );
    }

    #[test]
    fn parquet_rows_with_a_list_column_and_an_integer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("validation-00000-of-00001.parquet");
        let schema = Arc::new(
            parse_message_type(
                "message doc {
                   required binary ctx (UTF8);
                   required group endings (LIST) {
                     repeated group list { required binary element (UTF8); }
                   }
                   required int64 label;
                 }",
            )
            .unwrap(),
        );
        let props = Arc::new(WriterProperties::builder().build());
        let file = File::create(&path).unwrap();
        let mut writer = SerializedFileWriter::new(file, schema, props).unwrap();
        let mut group = writer.next_row_group().unwrap();
        // ctx: two rows.
        let mut column = group.next_column().unwrap().unwrap();
        column
            .typed::<ByteArrayType>()
            .write_batch(
                &[ByteArray::from("first"), ByteArray::from("second")],
                None,
                None,
            )
            .unwrap();
        column.close().unwrap();
        // endings: ["a", "b"] and ["c"] (repetition levels 0 start a row, 1 continue it).
        let mut column = group.next_column().unwrap().unwrap();
        column
            .typed::<ByteArrayType>()
            .write_batch(
                &[
                    ByteArray::from("a"),
                    ByteArray::from("b"),
                    ByteArray::from("c"),
                ],
                Some(&[1, 1, 1]),
                Some(&[0, 1, 0]),
            )
            .unwrap();
        column.close().unwrap();
        let mut column = group.next_column().unwrap().unwrap();
        column
            .typed::<Int64Type>()
            .write_batch(&[3, 0], None, None)
            .unwrap();
        column.close().unwrap();
        group.close().unwrap();
        writer.close().unwrap();

        let rows = read_records(&path, None).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["ctx"], Value::from("first"));
        assert_eq!(rows[0]["endings"], serde_json::json!(["a", "b"]));
        assert_eq!(rows[1]["endings"], serde_json::json!(["c"]));
        assert_eq!(rows[0]["label"], Value::from(3));
    }
}
