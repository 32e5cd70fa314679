//! Reading a table in primary-key chunks (keyset pagination) and turning its rows
//! into `op: r` change events. Shared by the initial snapshot and by on-demand
//! (incremental) snapshots.
//!
//! A chunk is bounded as [`crate::chunk_size`] says: rows are taken as the
//! server sends them, and a chunk ends at the row that reaches the byte
//! bound. A table without a primary key cannot be cut: it is one chunk,
//! streamed row by row.

use std::sync::Arc;

use futures::TryStreamExt;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use mysql_async::{BinaryProtocol, Conn, Params, ResultSetStream, Row as MySqlRow};
use tracing::warn;
use tributary_proto::{ChangeEvent, Op, Row, SourceInfo, Value};

use crate::chunk_size::{ChunkAsk, ChunkBounds, FIXED_VALUE_BYTES};
use crate::config::UndecodableText;
use crate::error::CaptureError;
use crate::event_shape::DecodeOptions;
use crate::event_shape::EventShape;
use crate::position::BinlogPosition;
use crate::row_decoder::{ValueError, decode_value, text_value};
use crate::schema::{Charset, ColumnKind, InfoColumn, TableSchema};
use crate::source;

/// The queries and schema that read one table.
pub(crate) struct ChunkReader {
    schema: TableSchema,
    /// Primary-key columns (chunks follow them); empty without a primary key.
    chunk_key: Vec<usize>,
    /// Per chunk-key column: text outside UTF-8, sent back in hex (a parameter
    /// is text in the connection's utf8mb4, which other bytes are not).
    hex_key: Vec<bool>,
    /// Every row, no order (tables without a primary key).
    all: String,
    /// The first chunk; its one parameter is the row limit.
    first: String,
    /// The chunk after a key; its parameters are the key, then the row limit.
    next: String,
    /// Rows the next chunk asks for.
    ask: ChunkAsk,
    options: DecodeOptions,
}

/// One row of a chunk, decoded.
pub(crate) struct ChunkRow {
    /// The column values in table order.
    pub values: Vec<Value>,
    /// Text columns not valid in their character set, read as raw bytes
    /// (`source.undecodable_text: base64`).
    pub undecodable: Vec<Arc<str>>,
}

/// One chunk of rows, decoded.
pub(crate) struct Chunk {
    /// The rows in key order.
    pub rows: Vec<ChunkRow>,
    /// Where the chunk ended.
    pub end: ChunkEnd,
}

/// Where a chunk ended.
pub(crate) struct ChunkEnd {
    /// The key of the last row, to read the next chunk after.
    pub last_key: Option<Vec<mysql_async::Value>>,
    /// No rows follow this chunk.
    pub complete: bool,
}

/// The rows of one chunk, decoded as the server sends them.
pub(crate) struct ChunkRows<'a> {
    reader: &'a mut ChunkReader,
    stream: ResultSetStream<'a, 'a, 'static, MySqlRow, BinaryProtocol>,
    position: &'a BinlogPosition,
    /// Rows asked for (`usize::MAX`: the whole table).
    asked: usize,
    read: usize,
    bytes: u64,
    /// Rows published as raw bytes (`undecodable_text: base64`).
    raw: usize,
    last_key: Option<Vec<mysql_async::Value>>,
    /// The server sent its last row.
    ended: bool,
}

/// How a text key outside UTF-8 is sent back (and stored in on-demand
/// snapshot cursors): its bytes in hex, after this mark. A stored cursor
/// without it was written by an older version, as converted text.
const HEX_CURSOR: &str = "hex:";

fn hex_cursor(bytes: &[u8]) -> Vec<u8> {
    let hex: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
    format!("{HEX_CURSOR}{hex}").into_bytes()
}

fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

impl ChunkReader {
    /// Reads `db.table`'s columns from `information_schema`; `None` if it has none
    /// (the table does not exist). Events are keyed as `keys` says; chunks follow
    /// the primary key.
    pub(crate) async fn new(
        conn: &mut Conn,
        db: &str,
        table: &str,
        bounds: ChunkBounds,
        shape: &EventShape,
    ) -> Result<Option<Self>, CaptureError> {
        let columns = source::info_columns_on(conn, db, table).await?;
        if columns.is_empty() {
            return Ok(None);
        }
        let schema = shape
            .table(
                TableSchema::from_info_columns(db, table, &columns),
                Some(&columns),
            )
            .map_err(|problem| CaptureError::Config {
                field: "message_key_columns".into(),
                problem: problem.to_string(),
            })?;
        let names: Vec<String> = schema.columns.iter().map(|c| quote(&c.name)).collect();
        let chunk_key = InfoColumn::key_of(&columns);
        let key: Vec<String> = chunk_key.iter().map(|&i| names[i].clone()).collect();
        let all = format!(
            "SELECT {} FROM {}.{}",
            names.join(", "),
            quote(db),
            quote(table)
        );
        let first = format!("{all} ORDER BY {} LIMIT ?", key.join(", "));
        // The last key comes back as a parameter; a DECIMAL one is sent as text, which
        // MySQL's rules compare with a DECIMAL as a double (MariaDB compares it
        // exactly): cast it back to the column's type. Text comes back as the
        // bytes the table holds: outside UTF-8 they go back in hex, read as the
        // column's character set and collation, so that the comparison is with
        // the very key read (two byte sequences can be one character).
        let (placeholders, hex_key): (Vec<String>, Vec<bool>) = chunk_key
            .iter()
            .map(|&i| match (&schema.columns[i].kind, &columns[i]) {
                (ColumnKind::Decimal, column) => {
                    let column_type = &column.column_type;
                    let declared = column_type
                        .find(')')
                        .map_or(column_type.as_str(), |end| &column_type[..=end]);
                    (format!("CAST(? AS {declared})"), false)
                }
                (
                    ColumnKind::Text(charset),
                    InfoColumn {
                        charset: Some(name),
                        collation: Some(collation),
                        ..
                    },
                ) if *charset != Charset::Utf8 => (
                    format!(
                        "CONVERT(UNHEX(SUBSTRING(?, {})) USING {name}) COLLATE {collation}",
                        HEX_CURSOR.len() + 1
                    ),
                    true,
                ),
                _ => ("?".to_owned(), false),
            })
            .unzip();
        let next = format!(
            "{all} WHERE ({}) > ({}) ORDER BY {} LIMIT ?",
            key.join(", "),
            placeholders.join(", "),
            key.join(", ")
        );
        Ok(Some(ChunkReader {
            chunk_key,
            hex_key,
            schema,
            all,
            first,
            next,
            ask: ChunkAsk::new(bounds),
            options: shape.decode,
        }))
    }

    /// The schema rows are decoded with.
    pub(crate) fn schema(&self) -> &TableSchema {
        &self.schema
    }

    /// Whether the table has a primary key (without one, the table can only be
    /// read in one pass).
    pub(crate) fn has_primary_key(&self) -> bool {
        !self.chunk_key.is_empty()
    }

    /// Whether events are keyed by the primary key (not by `message_key_columns`).
    pub(crate) fn keyed_by_primary_key(&self) -> bool {
        self.has_primary_key() && self.schema.key == self.chunk_key
    }

    /// The rows of the chunk after `after` (the first when `None`), as the
    /// server sends them; a table without a primary key is one chunk.
    /// `position` names where the rows are from in errors.
    pub(crate) async fn rows<'a>(
        &'a mut self,
        conn: &'a mut Conn,
        after: Option<&[mysql_async::Value]>,
        position: &'a BinlogPosition,
    ) -> Result<ChunkRows<'a>, CaptureError> {
        let legacy_cursor = after.is_some_and(|values| {
            values.iter().zip(&self.hex_key).any(|(value, &hex)| {
                hex && !matches!(value, mysql_async::Value::Bytes(b) if b.starts_with(HEX_CURSOR.as_bytes()))
            })
        });
        if legacy_cursor {
            // Converted text cannot be compared as the table's bytes: read the
            // table again from its start (its rows are upserts of the same rows).
            warn!(
                table = %format!("{}.{}", self.schema.db, self.schema.table),
                "an on-demand snapshot cursor stored by an older version; the table is read again from its first row"
            );
        }
        let after = after.filter(|_| !legacy_cursor);
        let ask = mysql_async::Value::from(self.ask.rows());
        let (query, params, asked) = match after {
            None if !self.has_primary_key() => (&self.all, Params::Empty, usize::MAX),
            None => (&self.first, Params::Positional(vec![ask]), self.ask.rows()),
            Some(values) => {
                let mut params = values.to_vec();
                params.push(ask);
                (&self.next, Params::Positional(params), self.ask.rows())
            }
        };
        let stream = conn.exec_stream(query.as_str(), params).await?;
        Ok(ChunkRows {
            reader: self,
            stream,
            position,
            asked,
            read: 0,
            bytes: 0,
            raw: 0,
            last_key: None,
            ended: false,
        })
    }

    /// The chunk after `after` (the first when `None`), collected.
    pub(crate) async fn read(
        &mut self,
        conn: &mut Conn,
        after: Option<&[mysql_async::Value]>,
        position: &BinlogPosition,
    ) -> Result<Chunk, CaptureError> {
        let mut rows = self.rows(conn, after, position).await?;
        let mut collected = Vec::new();
        while let Some(row) = rows.next().await? {
            collected.push(row);
        }
        Ok(Chunk {
            rows: collected,
            end: rows.end(),
        })
    }

    /// The key a chunk after this row starts after.
    fn cursor_of(&self, row: &MySqlRow) -> Vec<mysql_async::Value> {
        self.chunk_key
            .iter()
            .zip(&self.hex_key)
            .map(|(&i, &hex)| match row.as_ref(i) {
                Some(mysql_async::Value::Bytes(bytes)) if hex => {
                    mysql_async::Value::Bytes(hex_cursor(bytes))
                }
                value => value.cloned().unwrap_or(mysql_async::Value::NULL),
            })
            .collect()
    }

    /// One row's values in table order.
    fn decode(
        &self,
        mut row: MySqlRow,
        position: &BinlogPosition,
    ) -> Result<ChunkRow, CaptureError> {
        let mut values = Vec::with_capacity(self.schema.columns.len());
        let mut undecodable = Vec::new();
        for (i, column) in self.schema.columns.iter().enumerate() {
            let raw = row.take::<mysql_async::Value, _>(i);
            let value = match (&column.kind, raw) {
                (ColumnKind::Text(charset), Some(mysql_async::Value::Bytes(bytes))) => {
                    match text_value(charset, &bytes) {
                        Err(ValueError::Text(_))
                            if self.options.undecodable == UndecodableText::Base64 =>
                        {
                            undecodable.push(column.name.as_str().into());
                            Ok(Value::Bytes(bytes))
                        }
                        decoded => decoded,
                    }
                }
                (kind, raw) => decode_value(kind, raw.map(BinlogValue::Value))
                    .and_then(|value| self.options.modes.apply(kind, value)),
            };
            values.push(value.map_err(|e| CaptureError::Decode {
                file: position.file.clone(),
                pos: position.pos,
                detail: format!(
                    "snapshot of {}.{}, column `{}`: {e}",
                    self.schema.db, self.schema.table, column.name
                ),
            })?);
        }
        Ok(ChunkRow {
            values,
            undecodable,
        })
    }

    /// The `op: r` event of one row; `source` gives everything but the table.
    pub(crate) fn event(&self, row: ChunkRow, source: &SourceInfo) -> ChangeEvent {
        let schema = &self.schema;
        let ChunkRow {
            values,
            undecodable,
        } = row;
        ChangeEvent {
            op: Op::Read,
            key: Row {
                columns: schema.key_names.clone(),
                values: schema.key.iter().map(|&i| values[i].clone()).collect(),
            },
            before: None,
            after: Some(schema.value_row(values)),
            source: SourceInfo {
                db: schema.db.clone(),
                table: schema.table.clone(),
                ..source.clone()
            },
            ts_ms: source.ts_ms,
            transaction: None,
            undecodable,
            schemas: schema.record_schemas.clone(),
            key_change: None,
        }
    }
}

/// The bytes a row holds, as the chunk bound counts them.
fn row_bytes(row: &MySqlRow) -> u64 {
    (0..row.len())
        .map(|i| match row.as_ref(i) {
            Some(mysql_async::Value::Bytes(bytes)) => bytes.len() as u64,
            _ => FIXED_VALUE_BYTES,
        })
        .sum()
}

impl ChunkRows<'_> {
    /// The next row; `None` once the chunk ends (the server sent its last
    /// row, or the rows read reached the byte bound).
    pub(crate) async fn next(&mut self) -> Result<Option<ChunkRow>, CaptureError> {
        if self.ended || self.full() {
            return Ok(None);
        }
        let Some(row) = self.stream.try_next().await? else {
            self.ended = true;
            return Ok(None);
        };
        self.read += 1;
        self.bytes += row_bytes(&row);
        if self.reader.has_primary_key() {
            self.last_key = Some(self.reader.cursor_of(&row));
        }
        let row = self.reader.decode(row, self.position)?;
        self.raw += usize::from(!row.undecodable.is_empty());
        Ok(Some(row))
    }

    /// The `op: r` event of one row of this chunk.
    pub(crate) fn event(&self, row: ChunkRow, source: &SourceInfo) -> ChangeEvent {
        self.reader.event(row, source)
    }

    /// The rows read reached the byte bound (a table without a primary key
    /// cannot be cut: it is streamed whole).
    fn full(&self) -> bool {
        self.reader.has_primary_key() && self.reader.ask.full(self.bytes)
    }

    /// Where the chunk ended; sizes the next chunk from this one's rows. Rows
    /// the server sent past a byte cut are skipped with the connection's next
    /// query.
    pub(crate) fn end(self) -> ChunkEnd {
        let cut = self.full();
        let reader = self.reader;
        let complete = !reader.has_primary_key() || (self.ended && self.read < self.asked);
        reader.ask.after(self.read, self.bytes, cut);
        if self.raw > 0 {
            warn!(
                table = %format!("{}.{}", reader.schema.db, reader.schema.table),
                rows = self.raw,
                "snapshot text not valid in its character set published as raw bytes (undecodable_text: base64)"
            );
        }
        ChunkEnd {
            last_key: self.last_key,
            complete,
        }
    }
}
