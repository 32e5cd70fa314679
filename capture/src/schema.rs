//! Table schemas: what each binlog column is called and how its values map to [`Value`]s.
//!
//! The source of truth is the TABLE_MAP event's optional metadata
//! (`binlog_row_metadata=FULL`): names, signedness, charsets, ENUM/SET labels and
//! the primary key, always matching the rows that follow it, across ALTERs.
//! Where the server writes less (MINIMAL/NO_LOG), the missing parts come from
//! `information_schema` ([`InfoColumn`]), which reflects the *current* table.
//!
//! [`Value`]: tributary_proto::Value

use std::sync::Arc;

use mysql_async::binlog::events::{OptionalMetaExtractor, OptionalMetadataField, TableMapEvent};
use mysql_async::consts::{ColumnType, GeometryType};
use tributary_proto::{RecordSchemas, Row, Value};

use crate::column_default::DefaultExpr;
use crate::message_key::MessageKeyColumns;
use crate::value_plan::ValuePlan;

/// How a column's values are decoded and mapped (see `docs/types.md`).
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnKind {
    /// TINYINT..BIGINT; `bytes` is the storage width.
    Int {
        /// UNSIGNED column.
        unsigned: bool,
        /// Storage width in bytes (1, 2, 3, 4, 8).
        bytes: u8,
    },
    /// FLOAT (single precision).
    Float,
    /// DOUBLE.
    Double,
    /// DECIMAL/NUMERIC.
    Decimal,
    /// YEAR.
    Year,
    /// DATE.
    Date,
    /// TIME(fsp).
    Time,
    /// DATETIME(fsp).
    DateTime {
        /// Fractional-second digits.
        fsp: u8,
    },
    /// TIMESTAMP(fsp).
    Timestamp {
        /// Fractional-second digits.
        fsp: u8,
    },
    /// CHAR/VARCHAR/TEXT in a character set.
    Text(Charset),
    /// BINARY/VARBINARY/BLOB; BINARY(n) has a fixed length, and the binlog drops its trailing zero bytes.
    Binary {
        /// Declared length of BINARY(n); `None` for variable-length types.
        fixed_len: Option<usize>,
    },
    /// ENUM with its labels.
    Enum(Arc<[String]>),
    /// SET with its labels.
    Set(Arc<[String]>),
    /// BIT(n).
    Bit {
        /// Declared width in bits.
        bits: u32,
    },
    /// JSON (MySQL's binary JSON; MariaDB's JSON is LONGTEXT and arrives as text).
    Json,
    /// GEOMETRY and its subtypes.
    Geometry {
        /// Declared POINT (Debezium writes its values as `Point`s).
        point: bool,
    },
    /// BOOLEAN (PostgreSQL).
    Bool,
    /// UUID (PostgreSQL): its text (Debezium's `Uuid`).
    Uuid,
    /// XML (PostgreSQL): the document's text (Debezium's `Xml`).
    Xml,
    /// TIME(0..3) (PostgreSQL): milliseconds since midnight (Debezium's
    /// `Time`; wider TIMEs are [`ColumnKind::Time`], in microseconds).
    TimeMillis,
    /// TIME WITH TIME ZONE (PostgreSQL): the time in UTC as text ending in
    /// `Z` (Debezium's `ZonedTime`).
    ZonedTime,
    /// INTERVAL (PostgreSQL): microseconds, a month counted as 30.4375 days
    /// (Debezium's `MicroDuration`).
    Interval,
    /// NUMERIC without precision and scale (PostgreSQL): exact decimal text
    /// with the value's own scale (Debezium's `VariableScaleDecimal` when precise).
    VariableDecimal,
    /// Text whose values are written as they are, under no Connect name
    /// (PostgreSQL's `inet`, `cidr`, `macaddr`, ranges, and other types
    /// Debezium writes as their text).
    PlainText,
    /// An array (PostgreSQL) of the element kind.
    Array(Box<ColumnKind>),
    /// Anything else: passed through as bytes.
    Other,
}

pub use crate::charset::Charset;
use crate::charset::{Collations, TextError};

/// One column.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnSchema {
    /// Column name.
    pub name: String,
    /// How values map.
    pub kind: ColumnKind,
    /// The column may hold NULL.
    pub nullable: bool,
    /// What the declared type says beyond how values decode (the Connect
    /// schemas of events need it).
    pub declared: Declared,
    /// The value Debezium declares as its default (`information_schema`;
    /// see [`crate::column_default`]), in the capture's `values` modes.
    pub default: Option<Value>,
}

/// What a column's declared type says beyond its [`ColumnKind`].
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Declared {
    /// Nothing more.
    #[default]
    Plain,
    /// DECIMAL(precision, scale).
    Decimal {
        /// Digits in all.
        precision: u16,
        /// Digits after the point.
        scale: u16,
    },
    /// A decimal of fixed scale and no declared precision (PostgreSQL's `money`).
    Scale(u16),
    /// ENUM with its labels (snapshot columns read labels as text).
    Enum(Arc<[String]>),
    /// SET with its labels.
    Set(Arc<[String]>),
}

impl Declared {
    /// From `information_schema.COLUMNS.COLUMN_TYPE` (`decimal(20,6)`, `enum('a','b')`).
    fn of_column_type(column_type: &str) -> Declared {
        let lower = column_type.to_ascii_lowercase();
        if lower.starts_with("enum(") {
            Declared::Enum(labels_of(column_type))
        } else if lower.starts_with("set(") {
            Declared::Set(labels_of(column_type))
        } else if lower.starts_with("decimal") || lower.starts_with("numeric") {
            let digits: Vec<u16> = lower
                .split(['(', ')', ','])
                .skip(1)
                .filter_map(|d| d.trim().parse().ok())
                .collect();
            match digits.as_slice() {
                [precision, scale] => Declared::Decimal {
                    precision: *precision,
                    scale: *scale,
                },
                [precision] => Declared::Decimal {
                    precision: *precision,
                    scale: 0,
                },
                _ => Declared::Decimal {
                    precision: 10,
                    scale: 0,
                },
            }
        } else {
            Declared::Plain
        }
    }
}

/// The shape of one table at one point of the binlog.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSchema {
    /// Database name.
    pub db: Arc<str>,
    /// Table name.
    pub table: Arc<str>,
    /// Columns in table order.
    pub columns: Vec<ColumnSchema>,
    /// Column names, shared by every row image.
    pub names: Arc<[String]>,
    /// Indexes of the key columns of its events, in key order: the primary key
    /// (or the unique key the server promoted to it), or `message_key_columns`;
    /// empty when the table has none (its events have a null Kafka key).
    pub key: Vec<usize>,
    /// Names of the key columns.
    pub key_names: Arc<[String]>,
    /// The Kafka Connect schemas of its records, when they carry them
    /// ([`crate::connect_schema::attach`]).
    pub record_schemas: Option<Arc<RecordSchemas>>,
    /// The columns its events' values carry and how they are mapped
    /// ([`crate::column_rules`]); `None`: every column, as decoded.
    pub value_plan: Option<Arc<ValuePlan>>,
}

/// A column as `information_schema.COLUMNS` describes it (the fallback source).
#[derive(Debug, Clone, PartialEq)]
pub struct InfoColumn {
    /// `COLUMN_NAME`.
    pub name: String,
    /// `COLUMN_TYPE`, e.g. `int(10) unsigned`, `enum('a','b')`.
    pub column_type: String,
    /// `CHARACTER_SET_NAME`.
    pub charset: Option<String>,
    /// `COLLATION_NAME`.
    pub collation: Option<String>,
    /// Position in the primary key (from 1): `SEQ_IN_INDEX` in the `PRIMARY`
    /// index, or in the unique index the server promoted to primary key.
    pub key_position: Option<u32>,
    /// `IS_NULLABLE = 'YES'`.
    pub nullable: bool,
    /// `CHARACTER_MAXIMUM_LENGTH`: declared length of a text column, in characters.
    pub char_length: Option<usize>,
    /// `COLUMN_DEFAULT` (with `EXTRA`).
    pub default: DefaultExpr,
}

impl InfoColumn {
    /// The key columns' indexes in key order (the binlog's primary-key metadata
    /// order), so snapshot keys and streamed keys are the same JSON bytes.
    pub fn key_of(info: &[InfoColumn]) -> Vec<usize> {
        let mut key: Vec<(u32, usize)> = info
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((c.key_position?, i)))
            .collect();
        key.sort_unstable();
        key.into_iter().map(|(_, i)| i).collect()
    }
}

/// What the TABLE_MAP's optional metadata says, per column.
#[derive(Default)]
struct OptionalMeta {
    names: Vec<String>,
    unsigned: Vec<bool>,
    charsets: Vec<u16>,
    /// Collation ids of the ENUM and SET columns, in column order.
    enum_set_charsets: Vec<u16>,
    /// Labels of each ENUM column, as the bytes of its character set.
    enum_labels: Vec<Vec<Vec<u8>>>,
    /// Labels of each SET column, as the bytes of its character set.
    set_labels: Vec<Vec<Vec<u8>>>,
    /// Whether each GEOMETRY column is declared POINT.
    points: Vec<bool>,
    primary_key: Vec<usize>,
}

/// Why a table's schema cannot be worked out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The TABLE_MAP gives no usable type for a column.
    #[error("column {index}: {problem}")]
    ColumnType {
        /// The column's position.
        index: usize,
        /// What is wrong with its type.
        problem: String,
    },
    /// The TABLE_MAP's optional metadata cannot be read.
    #[error("optional metadata: {0}")]
    OptionalMetadata(String),
    /// `information_schema` lists another number of columns than the binlog.
    #[error(
        "{table}: the binlog has {binlog} columns but information_schema lists {listed} \
         (the table changed since); set binlog_row_metadata=FULL on the server"
    )]
    ColumnsChanged {
        /// `db.table`.
        table: String,
        /// Columns in the binlog.
        binlog: usize,
        /// Columns `information_schema` lists.
        listed: usize,
    },
    /// Neither the TABLE_MAP nor `information_schema` names the columns.
    #[error("{0}: TABLE_MAP has no column names and no fallback was given")]
    NoColumnNames(String),
    /// ENUM or SET labels that are not text in their character set.
    #[error("{table}: column `{column}`: ENUM/SET labels: {problem}")]
    Labels {
        /// `db.table`.
        table: String,
        /// The column.
        column: String,
        /// Why a label cannot be read.
        problem: TextError,
    },
    /// `message_key_columns` names a column the table does not have.
    #[error("message_key_columns: {table} has no column `{column}` (its columns: {columns})")]
    NoKeyColumn {
        /// `db.table`.
        table: String,
        /// The column named.
        column: String,
        /// The table's columns, comma-separated.
        columns: String,
    },
}

impl OptionalMeta {
    fn read(tme: &TableMapEvent<'_>, columns: &[ColumnType]) -> Result<Self, SchemaError> {
        let bad = |e: std::io::Error| SchemaError::OptionalMetadata(e.to_string());
        let mut meta = OptionalMeta::default();
        for field in tme.iter_optional_meta() {
            match field.map_err(bad)? {
                OptionalMetadataField::EnumStrValue(values) => {
                    for labels in values.iter_values() {
                        let labels = labels.map_err(bad)?;
                        meta.enum_labels.push(
                            labels
                                .values()
                                .iter()
                                .map(|v| v.value_raw().to_vec())
                                .collect(),
                        );
                    }
                }
                OptionalMetadataField::GeometryType(types) => {
                    for geometry in types.iter_geometry_types() {
                        meta.points
                            .push(matches!(geometry, Ok(GeometryType::GEOM_POINT)));
                    }
                }
                OptionalMetadataField::SetStrValue(values) => {
                    for labels in values.iter_values() {
                        let labels = labels.map_err(bad)?;
                        meta.set_labels.push(
                            labels
                                .values()
                                .iter()
                                .map(|v| v.value_raw().to_vec())
                                .collect(),
                        );
                    }
                }
                _ => {}
            }
        }
        let extractor = OptionalMetaExtractor::new(tme.iter_optional_meta()).map_err(bad)?;
        for name in extractor.iter_column_name() {
            meta.names.push(name.map_err(bad)?.name().into_owned());
        }
        meta.unsigned = extractor.iter_signedness().collect();
        let text_columns = columns.iter().filter(|t| t.is_character_type()).count();
        for charset in extractor.iter_charset().take(text_columns) {
            meta.charsets.push(charset.map_err(bad)?);
        }
        let enum_set_columns = columns.iter().filter(|t| t.is_enum_or_set_type()).count();
        for charset in extractor.iter_enum_and_set_charset().take(enum_set_columns) {
            meta.enum_set_charsets.push(charset.map_err(bad)?);
        }
        for index in extractor.iter_primary_key() {
            meta.primary_key.push(index.map_err(bad)? as usize);
        }
        Ok(meta)
    }
}

impl TableSchema {
    /// Whether the TABLE_MAP carries column names, i.e. needs no `information_schema` fallback.
    pub fn table_map_is_complete(tme: &TableMapEvent<'_>) -> bool {
        OptionalMetaExtractor::new(tme.iter_optional_meta())
            .map(|m| m.iter_column_name().next().is_some())
            .unwrap_or(false)
    }

    /// Builds the schema of a TABLE_MAP event. `fallback` supplies what the
    /// optional metadata lacks; it is required when [`Self::table_map_is_complete`] is false.
    pub fn from_table_map(
        tme: &TableMapEvent<'_>,
        fallback: Option<&[InfoColumn]>,
        collations: &Collations,
    ) -> Result<Self, SchemaError> {
        let count = tme.columns_count() as usize;
        let mut types = Vec::with_capacity(count);
        for index in 0..count {
            let problem = |problem: String| SchemaError::ColumnType { index, problem };
            match tme.get_column_type(index) {
                Ok(Some(t)) => types.push(t),
                Ok(None) => return Err(problem("no type in TABLE_MAP".into())),
                Err(e) => return Err(problem(e.to_string())),
            }
        }
        let meta = OptionalMeta::read(tme, &types)?;
        let db = tme.database_name().into_owned();
        let table = tme.table_name().into_owned();
        let fallback = match fallback {
            Some(cols) if cols.len() != count => {
                return Err(SchemaError::ColumnsChanged {
                    table: format!("{db}.{table}"),
                    binlog: count,
                    listed: cols.len(),
                });
            }
            other => other,
        };
        if meta.names.len() != count && fallback.is_none() {
            return Err(SchemaError::NoColumnNames(format!("{db}.{table}")));
        }

        let (mut numeric, mut text, mut enums, mut sets, mut enum_sets) = (0, 0, 0, 0, 0);
        let mut geometries = 0;
        let mut columns = Vec::with_capacity(count);
        for (i, col_type) in types.iter().enumerate() {
            let info = fallback.map(|f| &f[i]);
            let col_meta = tme.get_column_metadata(i).unwrap_or(&[]);
            let unsigned = if col_type.is_numeric_type() {
                numeric += 1;
                meta.unsigned
                    .get(numeric - 1)
                    .copied()
                    .or_else(|| info.map(|c| c.column_type.contains("unsigned")))
                    .unwrap_or(false)
            } else {
                false
            };
            let charset = if col_type.is_character_type() {
                text += 1;
                match (meta.charsets.get(text - 1), info) {
                    (Some(&id), _) => collations.charset(id),
                    (None, Some(c)) => c.charset.as_deref().and_then(Charset::from_name),
                    (None, None) => Some(Charset::Unsupported(
                        "unknown (the TABLE_MAP names none)".into(),
                    )),
                }
            } else {
                None
            };
            let labels = if col_type.is_enum_or_set_type() {
                enum_sets += 1;
                let raw = if col_type.is_enum_type() {
                    enums += 1;
                    meta.enum_labels.get(enums - 1)
                } else {
                    sets += 1;
                    meta.set_labels.get(sets - 1)
                };
                match raw {
                    // Labels are in the column's character set, as its values would be.
                    Some(raw) => {
                        let charset = match meta.enum_set_charsets.get(enum_sets - 1) {
                            Some(&id) => collations.charset(id).unwrap_or(Charset::Utf8),
                            None => Charset::Utf8,
                        };
                        let labels: Result<Arc<[String]>, TextError> =
                            raw.iter().map(|label| charset.decode(label)).collect();
                        Some(labels.map_err(|problem| SchemaError::Labels {
                            table: format!("{db}.{table}"),
                            column: meta.names.get(i).map_or("?", String::as_str).to_owned(),
                            problem,
                        })?)
                    }
                    None => info.map(|c| labels_of(&c.column_type)),
                }
            } else {
                None
            };
            let declared = match (col_type, &labels) {
                (ColumnType::MYSQL_TYPE_NEWDECIMAL | ColumnType::MYSQL_TYPE_DECIMAL, _) => {
                    match (col_meta.first(), col_meta.get(1), info) {
                        (Some(&precision), Some(&scale), _) => Declared::Decimal {
                            precision: precision.into(),
                            scale: scale.into(),
                        },
                        (_, _, Some(c)) => Declared::of_column_type(&c.column_type),
                        _ => Declared::Plain,
                    }
                }
                (t, Some(labels)) if t.is_enum_type() => Declared::Enum(labels.clone()),
                (_, Some(labels)) => Declared::Set(labels.clone()),
                _ => info.map_or(Declared::Plain, |c| {
                    Declared::of_column_type(&c.column_type)
                }),
            };
            let mut kind = column_kind(*col_type, col_meta, unsigned, charset, || {
                labels.unwrap_or_else(|| Arc::from(Vec::new()))
            });
            if let ColumnKind::Geometry { point } = &mut kind {
                geometries += 1;
                *point = match meta.points.get(geometries - 1) {
                    Some(declared) => *declared,
                    None => info.is_some_and(|c| c.column_type.eq_ignore_ascii_case("point")),
                };
            }
            let name = meta
                .names
                .get(i)
                .cloned()
                .or_else(|| info.map(|c| c.name.clone()))
                .unwrap_or_else(|| format!("col_{i}"));
            let nullable = tme.null_bitmask().get(i).is_some_and(|bit| *bit);
            columns.push(ColumnSchema {
                name,
                kind,
                nullable,
                declared,
                default: None,
            });
        }

        let key = if !meta.primary_key.is_empty() {
            meta.primary_key.clone()
        } else {
            fallback.map(InfoColumn::key_of).unwrap_or_default()
        };
        Ok(Self::assemble(db, table, columns, key))
    }

    /// The schema of a table as `information_schema` describes it now (snapshots).
    /// Text columns (and ENUM/SET labels) are read as the bytes the table holds
    /// (the snapshot connection sets `character_set_results = binary`) and
    /// decoded in their own character set, as in the binlog.
    pub fn from_info_columns(db: &str, table: &str, info: &[InfoColumn]) -> Self {
        let columns = info
            .iter()
            .map(|c| ColumnSchema {
                name: c.name.clone(),
                kind: ColumnKind::of_snapshot_column(&c.column_type, c.charset.as_deref()),
                nullable: c.nullable,
                declared: Declared::of_column_type(&c.column_type),
                default: None,
            })
            .collect();
        Self::assemble(
            db.to_owned(),
            table.to_owned(),
            columns,
            InfoColumn::key_of(info),
        )
    }

    /// The schema with the key columns `message_key_columns` names for its table,
    /// if it names it ([`crate::message_key`]).
    pub fn keyed_by(mut self, keys: &MessageKeyColumns) -> Result<Self, SchemaError> {
        let Some(columns) = keys.for_table(&self.db, &self.table) else {
            return Ok(self);
        };
        let key = columns
            .iter()
            .map(|c| {
                self.names
                    .iter()
                    .position(|n| n == c)
                    .ok_or_else(|| SchemaError::NoKeyColumn {
                        table: format!("{}.{}", self.db, self.table),
                        column: c.clone(),
                        columns: self.names.join(", "),
                    })
            })
            .collect::<Result<Vec<usize>, SchemaError>>()?;
        self.key_names = key.iter().map(|&i| self.names[i].clone()).collect();
        self.key = key;
        Ok(self)
    }

    /// Completes a schema (`key` empty: no key).
    pub(crate) fn assemble(
        db: String,
        table: String,
        columns: Vec<ColumnSchema>,
        key: Vec<usize>,
    ) -> Self {
        let names: Arc<[String]> = columns.iter().map(|c| c.name.clone()).collect();
        let key_names = key.iter().map(|&i| names[i].clone()).collect();
        TableSchema {
            db: db.into(),
            table: table.into(),
            columns,
            names,
            key,
            key_names,
            record_schemas: None,
            value_plan: None,
        }
    }

    /// An event's value row of a decoded row (every column, in table order).
    pub fn value_row(&self, values: Vec<Value>) -> Row {
        match &self.value_plan {
            Some(plan) => plan.apply(values),
            None => Row {
                columns: self.names.clone(),
                values,
            },
        }
    }
}

fn column_kind(
    col_type: ColumnType,
    meta: &[u8],
    unsigned: bool,
    charset: Option<Charset>,
    labels: impl FnOnce() -> Arc<[String]>,
) -> ColumnKind {
    use ColumnType::*;
    let fsp = meta.first().copied().unwrap_or(0);
    match col_type {
        MYSQL_TYPE_TINY => ColumnKind::Int { unsigned, bytes: 1 },
        MYSQL_TYPE_SHORT => ColumnKind::Int { unsigned, bytes: 2 },
        MYSQL_TYPE_INT24 => ColumnKind::Int { unsigned, bytes: 3 },
        MYSQL_TYPE_LONG => ColumnKind::Int { unsigned, bytes: 4 },
        MYSQL_TYPE_LONGLONG => ColumnKind::Int { unsigned, bytes: 8 },
        MYSQL_TYPE_FLOAT => ColumnKind::Float,
        MYSQL_TYPE_DOUBLE => ColumnKind::Double,
        MYSQL_TYPE_DECIMAL | MYSQL_TYPE_NEWDECIMAL => ColumnKind::Decimal,
        MYSQL_TYPE_YEAR => ColumnKind::Year,
        MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => ColumnKind::Date,
        MYSQL_TYPE_TIME | MYSQL_TYPE_TIME2 => ColumnKind::Time,
        MYSQL_TYPE_DATETIME => ColumnKind::DateTime { fsp: 0 },
        MYSQL_TYPE_DATETIME2 => ColumnKind::DateTime { fsp },
        MYSQL_TYPE_TIMESTAMP => ColumnKind::Timestamp { fsp: 0 },
        MYSQL_TYPE_TIMESTAMP2 => ColumnKind::Timestamp { fsp },
        MYSQL_TYPE_STRING => match charset {
            Some(cs) => ColumnKind::Text(cs),
            None => ColumnKind::Binary {
                fixed_len: Some(string_length(meta)),
            },
        },
        MYSQL_TYPE_VARCHAR
        | MYSQL_TYPE_VAR_STRING
        | MYSQL_TYPE_BLOB
        | MYSQL_TYPE_TINY_BLOB
        | MYSQL_TYPE_MEDIUM_BLOB
        | MYSQL_TYPE_LONG_BLOB => match charset {
            Some(cs) => ColumnKind::Text(cs),
            None => ColumnKind::Binary { fixed_len: None },
        },
        MYSQL_TYPE_ENUM => ColumnKind::Enum(labels()),
        MYSQL_TYPE_SET => ColumnKind::Set(labels()),
        MYSQL_TYPE_BIT => {
            let bits = u32::from(meta.get(1).copied().unwrap_or(0)) * 8 + u32::from(fsp);
            ColumnKind::Bit { bits }
        }
        MYSQL_TYPE_JSON => ColumnKind::Json,
        MYSQL_TYPE_GEOMETRY => ColumnKind::Geometry { point: false },
        _ => ColumnKind::Other,
    }
}

impl ColumnKind {
    /// How a column of a snapshot query maps, from its `information_schema.COLUMNS.COLUMN_TYPE`
    /// (`int(10) unsigned`, `datetime(3)`, `binary(16)`, …) and character set. Query
    /// results carry text, and ENUM/SET as their labels, in the column's character
    /// set (no conversion: `character_set_results = binary`), so those are text in it.
    pub fn of_snapshot_column(column_type: &str, charset: Option<&str>) -> ColumnKind {
        let lower = column_type.to_ascii_lowercase();
        let base = lower.split(['(', ' ']).next().unwrap_or_default();
        let unsigned = lower.contains("unsigned");
        let width = || -> Option<u32> {
            let start = lower.find('(')? + 1;
            lower[start..].split([')', ',']).next()?.trim().parse().ok()
        };
        let fsp = || width().unwrap_or(0) as u8;
        match base {
            "tinyint" | "bool" | "boolean" => ColumnKind::Int { unsigned, bytes: 1 },
            "smallint" => ColumnKind::Int { unsigned, bytes: 2 },
            "mediumint" => ColumnKind::Int { unsigned, bytes: 3 },
            "int" | "integer" => ColumnKind::Int { unsigned, bytes: 4 },
            "bigint" => ColumnKind::Int { unsigned, bytes: 8 },
            "float" => ColumnKind::Float,
            "double" | "real" => ColumnKind::Double,
            "decimal" | "numeric" => ColumnKind::Decimal,
            "year" => ColumnKind::Year,
            "date" => ColumnKind::Date,
            "time" => ColumnKind::Time,
            "datetime" => ColumnKind::DateTime { fsp: fsp() },
            "timestamp" => ColumnKind::Timestamp { fsp: fsp() },
            "binary" => ColumnKind::Binary {
                fixed_len: width().map(|w| w as usize),
            },
            "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
                ColumnKind::Binary { fixed_len: None }
            }
            "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext"
                if charset == Some("binary") =>
            {
                ColumnKind::Binary { fixed_len: None }
            }
            // Query results carry ENUM and SET as their labels.
            "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum"
            | "set" => ColumnKind::Text(charset.map_or(Charset::Utf8, |name| {
                Charset::from_name(name).unwrap_or(Charset::Utf8)
            })),
            "bit" => ColumnKind::Bit {
                bits: width().unwrap_or(1),
            },
            "json" => ColumnKind::Json,
            "point" => ColumnKind::Geometry { point: true },
            "geometry" | "linestring" | "polygon" | "multipoint" | "multilinestring"
            | "multipolygon" | "geometrycollection" => ColumnKind::Geometry { point: false },
            _ => ColumnKind::Other,
        }
    }
}

/// Declared byte length of a CHAR/BINARY column from its TABLE_MAP metadata
/// (two bytes: real type with the length's high bits folded in, then the low byte).
fn string_length(meta: &[u8]) -> usize {
    let (byte0, byte1) = (
        usize::from(meta.first().copied().unwrap_or(0)),
        usize::from(meta.get(1).copied().unwrap_or(0)),
    );
    if byte0 & 0x30 != 0x30 {
        byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
    } else {
        byte1
    }
}

/// Labels of `enum('a','b')` / `set('x','y')` as `information_schema` writes them.
fn labels_of(column_type: &str) -> Arc<[String]> {
    let inner = column_type
        .find('(')
        .and_then(|start| {
            column_type
                .rfind(')')
                .map(|end| &column_type[start + 1..end])
        })
        .unwrap_or("");
    let mut labels = Vec::new();
    let mut current = String::new();
    let mut chars = inner.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('\'', false) => quoted = true,
            ('\'', true) if chars.peek() == Some(&'\'') => {
                chars.next();
                current.push('\'');
            }
            ('\'', true) => {
                quoted = false;
                labels.push(std::mem::take(&mut current));
            }
            ('\\', true) => current.extend(chars.next()),
            (c, true) => current.push(c),
            _ => {}
        }
    }
    labels.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_labels_from_column_type() {
        assert_eq!(&*labels_of("enum('a','b c','it''s')"), ["a", "b c", "it's"]);
        assert_eq!(&*labels_of("set('x',',y')"), ["x", ",y"]);
    }

    #[test]
    fn fixed_string_lengths() {
        assert_eq!(string_length(&[0xfe, 4]), 4); // BINARY(4)
        assert_eq!(string_length(&[0xee, 0x2c]), 300); // CHAR(300): high bits folded into byte 0
    }

    #[test]
    fn kinds_from_information_schema() {
        let kind = |t: &str| ColumnKind::of_snapshot_column(t, None);
        assert_eq!(
            kind("int(10) unsigned"),
            ColumnKind::Int {
                unsigned: true,
                bytes: 4
            }
        );
        assert_eq!(
            kind("bigint(20)"),
            ColumnKind::Int {
                unsigned: false,
                bytes: 8
            }
        );
        assert_eq!(kind("datetime(3)"), ColumnKind::DateTime { fsp: 3 });
        assert_eq!(kind("timestamp"), ColumnKind::Timestamp { fsp: 0 });
        assert_eq!(kind("decimal(20,6)"), ColumnKind::Decimal);
        assert_eq!(kind("binary(4)"), ColumnKind::Binary { fixed_len: Some(4) });
        assert_eq!(kind("bit(12)"), ColumnKind::Bit { bits: 12 });
        assert_eq!(kind("enum('s','m')"), ColumnKind::Text(Charset::Utf8));
        assert_eq!(
            ColumnKind::of_snapshot_column("varchar(10)", Some("latin1")),
            ColumnKind::Text(Charset::from_name("latin1").unwrap())
        );
        assert_eq!(
            ColumnKind::of_snapshot_column("set('a','b')", Some("cp1251")),
            ColumnKind::Text(Charset::from_name("cp1251").unwrap())
        );
    }
}
