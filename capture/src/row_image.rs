//! Reads the row images of a rows event in place, straight from the event's bytes.
//!
//! mysql_common's row iterator rebuilds a full column definition for every
//! column of every row (schema, table and column names copied into new
//! allocations) and re-parses the TABLE_MAP's optional metadata per row; that
//! was most of capture's decoding time. Here the column types and metadata are
//! looked up once per rows event, each present value is parsed where it lies
//! ([`fast_value`] for the common types, mysql_common's parser and
//! [`decode_value`] for the rest), and a row costs one `Vec` per image (plus the
//! bytes of its string values).
//!
//! Row image layout (MySQL `log_event.cc`, `Rows_log_event`): per row, for each
//! image, [the shared-image options of a PARTIAL_UPDATE after image], a NULL
//! bitmap over the columns present in the image, then the non-NULL values of the
//! present columns in table order. Capture needs full images (every column
//! present): an event with a partial one is refused, naming the missing column.

use mysql_async::binlog::events::{RowsEventData, TableMapEvent};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::ColumnType;
use mysql_common::io::ParseBuf;
use tributary_proto::Value;

use crate::config::UndecodableText;
use crate::event_shape::DecodeOptions;
use crate::fast_value;
use crate::row_decoder::{ValueError, decode_value};
use crate::schema::{ColumnKind, TableSchema};

/// `binlog_row_value_options` bit: JSON columns of the after image may be diffs.
const PARTIAL_JSON_UPDATES: u64 = 1;

/// Why a rows event's images cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowsError {
    /// The event, its TABLE_MAP and the schema disagree on the columns.
    #[error("rows event has {rows} columns, its TABLE_MAP {table_map} and the schema {schema}")]
    ColumnCount {
        /// Columns of the rows event.
        rows: usize,
        /// Columns of the TABLE_MAP.
        table_map: u64,
        /// Columns of the schema.
        schema: usize,
    },
    /// The TABLE_MAP gives no usable type for a column.
    #[error("column {index}: {problem}")]
    ColumnType {
        /// The column's position.
        index: usize,
        /// What is wrong with its type.
        problem: String,
    },
    /// A column missing from a row image (`binlog_row_image` other than FULL).
    #[error(
        "column `{0}` is not in the row image: the change was logged with \
         binlog_row_image other than FULL (a session can set it), and capture \
         needs full images; set binlog_row_image=FULL globally and for every \
         writing session"
    )]
    NotFull(String),
    /// The image ends before its NULL bitmap or value options.
    #[error("row image ends early")]
    Truncated,
    /// A value that cannot be decoded.
    #[error("column `{column}` ({kind}): {problem}")]
    Value {
        /// The column's name.
        column: String,
        /// The column's kind.
        kind: String,
        /// Why its value cannot be decoded.
        problem: ValueError,
    },
}

/// A row change: the before and after images, each in table order.
pub type RowPair = (Option<Vec<Value>>, Option<Vec<Value>>);

/// The binlog type and TABLE_MAP metadata of one column.
struct BinlogColumn<'a> {
    column_type: ColumnType,
    meta: &'a [u8],
    unsigned: bool,
}

/// What one rows event's images hold, worked out once per event.
struct Layout<'a> {
    columns: Vec<BinlogColumn<'a>>,
    json_columns: usize,
    /// Rows carry a before image (updates, deletes).
    before: bool,
    /// Rows carry an after image (inserts, updates).
    after: bool,
    /// The event is a PARTIAL_UPDATE_ROWS_EVENT: after images start with value options.
    shared_image: bool,
    /// What text that is not valid in its character set does.
    options: DecodeOptions,
}

/// Iterator over the row changes of one rows event.
pub struct RowImages<'a> {
    schema: &'a TableSchema,
    layout: Layout<'a>,
    buf: ParseBuf<'a>,
    /// Columns of the last row read whose text went out as raw bytes.
    raw_text: Vec<usize>,
}

impl<'a> RowImages<'a> {
    /// Prepares to read `rows`, described by `tme` and decoded per `schema` (built from the same TABLE_MAP).
    pub fn new(
        schema: &'a TableSchema,
        tme: &'a TableMapEvent<'a>,
        rows: &'a RowsEventData<'a>,
        shared_image: bool,
        options: DecodeOptions,
    ) -> Result<Self, RowsError> {
        let count = rows.num_columns() as usize;
        if count != schema.columns.len() || count != tme.columns_count() as usize {
            return Err(RowsError::ColumnCount {
                rows: count,
                table_map: tme.columns_count(),
                schema: schema.columns.len(),
            });
        }
        let columns = schema
            .columns
            .iter()
            .enumerate()
            .map(|(i, column)| {
                let problem = |problem: String| RowsError::ColumnType { index: i, problem };
                let column_type = match tme.get_column_type(i) {
                    Ok(Some(t)) => t,
                    Ok(None) => return Err(problem("no type in TABLE_MAP".into())),
                    Err(e) => return Err(problem(e.to_string())),
                };
                Ok(BinlogColumn {
                    column_type,
                    meta: tme.get_column_metadata(i).unwrap_or(&[]),
                    unsigned: matches!(column.kind, ColumnKind::Int { unsigned: true, .. }),
                })
            })
            .collect::<Result<Vec<_>, RowsError>>()?;
        let json_columns = columns
            .iter()
            .filter(|c| c.column_type == ColumnType::MYSQL_TYPE_JSON)
            .count();
        for image in [rows.columns_before_image(), rows.columns_after_image()]
            .into_iter()
            .flatten()
        {
            if let Some(missing) = image.iter().position(|present| !*present) {
                // Read as NULL, it would overwrite the column's real value downstream.
                return Err(RowsError::NotFull(schema.columns[missing].name.clone()));
            }
        }
        let layout = Layout {
            columns,
            json_columns,
            before: rows.columns_before_image().is_some(),
            after: rows.columns_after_image().is_some(),
            shared_image,
            options,
        };
        Ok(RowImages {
            schema,
            layout,
            buf: ParseBuf(rows.rows_data()),
            raw_text: Vec::new(),
        })
    }

    /// The text columns of the last row read (either image) that are not valid in
    /// their character set and went out as raw bytes (`undecodable_text: base64`).
    pub fn raw_text_columns(&self) -> &[usize] {
        &self.raw_text
    }

    fn next_pair(&mut self) -> Result<RowPair, RowsError> {
        let layout = &self.layout;
        self.raw_text.clear();
        let raw_text = &mut self.raw_text;
        let before = if layout.before {
            Some(layout.image(&mut self.buf, self.schema, false, raw_text)?)
        } else {
            None
        };
        let after = if layout.after {
            Some(layout.image(&mut self.buf, self.schema, layout.shared_image, raw_text)?)
        } else {
            None
        };
        raw_text.sort_unstable();
        raw_text.dedup();
        Ok((before, after))
    }
}

impl<'a> Layout<'a> {
    /// Reads one full image (every column present, as `RowImages::new` checked);
    /// text columns read as raw bytes are added to `raw_text`.
    fn image(
        &self,
        buf: &mut ParseBuf<'a>,
        schema: &TableSchema,
        shared_image: bool,
        raw_text: &mut Vec<usize>,
    ) -> Result<Vec<Value>, RowsError> {
        let mut partial_json: &[u8] = &[];
        if shared_image {
            let options = buf.checked_eat_lenenc_int().ok_or(RowsError::Truncated)?;
            if options & PARTIAL_JSON_UPDATES != 0 {
                partial_json = buf
                    .checked_eat(self.json_columns.div_ceil(8))
                    .ok_or(RowsError::Truncated)?;
            }
        }
        let nulls = buf
            .checked_eat(self.columns.len().div_ceil(8))
            .ok_or(RowsError::Truncated)?;
        let mut values = Vec::with_capacity(self.columns.len());
        let mut json_index = 0;
        for (index, (column, schema_column)) in self.columns.iter().zip(&schema.columns).enumerate()
        {
            let is_partial = column.column_type == ColumnType::MYSQL_TYPE_JSON && {
                json_index += 1;
                bit(partial_json, json_index - 1)
            };
            if bit(nulls, index) {
                values.push(Value::Null);
                continue;
            }
            let described = |problem: ValueError| RowsError::Value {
                column: schema_column.name.clone(),
                kind: format!("{:?}", schema_column.kind),
                problem,
            };
            let at = buf.0;
            let value = if !is_partial
                && let Some(value) =
                    fast_value::decode(column.column_type, column.meta, &schema_column.kind, buf)
            {
                value
            } else {
                let raw: BinlogValue<'_> = buf
                    .parse((column.column_type, column.meta, column.unsigned, is_partial))
                    .map_err(|e| described(ValueError::Binlog(e.to_string())))?;
                decode_value(&schema_column.kind, Some(raw))
            };
            let value = match value {
                Err(ValueError::Text(_))
                    if self.options.undecodable == UndecodableText::Base64
                        && matches!(schema_column.kind, ColumnKind::Text(_)) =>
                {
                    raw_text.push(index);
                    self.raw_bytes(column, at, buf).map_err(described)?
                }
                other => other
                    .and_then(|value| self.options.modes.apply(&schema_column.kind, value))
                    .map_err(described)?,
            };
            values.push(value);
        }
        Ok(values)
    }

    /// The bytes of the text value at `at`, read again as they are; `buf` goes on after it.
    fn raw_bytes(
        &self,
        column: &BinlogColumn<'a>,
        at: &'a [u8],
        buf: &mut ParseBuf<'a>,
    ) -> Result<Value, ValueError> {
        let mut again = ParseBuf(at);
        let raw: BinlogValue<'_> = again
            .parse((column.column_type, column.meta, column.unsigned, false))
            .map_err(|e| ValueError::Binlog(e.to_string()))?;
        *buf = again;
        match raw {
            BinlogValue::Value(mysql_async::Value::Bytes(bytes)) => Ok(Value::Bytes(bytes)),
            other => Err(ValueError::Unexpected {
                value: format!("{other:?}"),
                kind: "text (read as raw bytes)".into(),
            }),
        }
    }
}

impl Iterator for RowImages<'_> {
    type Item = Result<RowPair, RowsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let pair = self.next_pair();
        if pair.is_err() {
            self.buf = ParseBuf(&[]); // the rest cannot be located
        }
        Some(pair)
    }
}

/// Bit `i` of a little-endian bitmap (bit 0 is the low bit of byte 0).
fn bit(bitmap: &[u8], i: usize) -> bool {
    bitmap
        .get(i / 8)
        .is_some_and(|byte| byte >> (i % 8) & 1 == 1)
}
