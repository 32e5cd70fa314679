//! PostgreSQL column types as capture reads them: [`PgType`], resolved from
//! the catalog (`pg_type`: a domain is its base type, an array its element
//! type, an enum its labels) and the column's type modifier, and the
//! [`ColumnKind`] its values are written as (Debezium's PostgreSQL mapping;
//! `docs/types.md` has the table).
//!
//! Built-in types are known by OID, which is fixed for them; types from
//! extensions (`hstore`, `citext`) have OIDs of their own in each database
//! and are known by name.

use std::sync::Arc;

use crate::schema::{ColumnKind, Declared};

/// A column's type, as far as decoding and writing its values go.
#[derive(Debug, Clone, PartialEq)]
pub enum PgType {
    /// `boolean`.
    Bool,
    /// `smallint`.
    Int2,
    /// `integer`.
    Int4,
    /// `bigint`.
    Int8,
    /// `oid`.
    Oid,
    /// `real`.
    Float4,
    /// `double precision`.
    Float8,
    /// `numeric(precision, scale)`, or `numeric` with neither (`None`).
    Numeric(Option<(u32, u32)>),
    /// `money`: text such as `-$1,234.56` (with `lc_monetary=C`).
    Money,
    /// Text written as a plain string: `text`, `varchar`, `char` (padded),
    /// `name`, `citext`.
    Text,
    /// Other types Debezium writes as their text: `inet`, `cidr`,
    /// `macaddr`, ranges, `tsvector`, and any type not named here.
    OtherText,
    /// `bytea` (hex output).
    Bytea,
    /// `json` and `jsonb`.
    Json,
    /// `xml`.
    Xml,
    /// `uuid`.
    Uuid,
    /// `date`.
    Date,
    /// `time(precision)` (6 when not declared).
    Time(u8),
    /// `time with time zone`.
    TimeTz,
    /// `timestamp(precision)` (6 when not declared).
    Timestamp(u8),
    /// `timestamp with time zone(precision)` (6 when not declared).
    TimestampTz(u8),
    /// `interval`.
    Interval,
    /// `bit(n)` or `bit varying(n)` (`Some(n)`), or `bit varying` (`None`).
    Bit(Option<u32>),
    /// An enum type, with its labels in their sort order.
    Enum(Arc<[String]>),
    /// `hstore` (extension): written as a JSON object's text, as Debezium's
    /// `hstore.handling.mode=json`.
    Hstore,
    /// `point`: Debezium's `Point` struct.
    Point,
    /// An array of the element type.
    Array(Box<PgType>),
}

/// The length Debezium declares for `bit varying` without one (PgJDBC's
/// unknown length).
const UNLIMITED_BITS: u32 = 2_147_483_647;

/// Precision of time types when the column declares none.
const DEFAULT_TIME_PRECISION: u8 = 6;

/// What the catalog says of a type (`pg_type`), enough to resolve it.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogType {
    /// `oid`.
    pub oid: u32,
    /// `typname`.
    pub name: String,
    /// `typtype`: `b` base, `d` domain, `e` enum, `r` range, `c` composite, `p` pseudo.
    pub kind: u8,
    /// `typelem` of an array type (`typcategory = 'A'`), else 0.
    pub element: u32,
    /// `typbasetype` of a domain, else 0.
    pub base: u32,
    /// `typtypmod` of a domain (its base type's modifier), else -1.
    pub base_modifier: i32,
    /// An enum's labels in `enumsortorder`; empty otherwise.
    pub labels: Vec<String>,
}

/// Why a type could not be resolved.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error(
    "type oid {oid} is not in the catalog that was read (a type created after capture read it?)"
)]
pub struct UnknownType {
    /// The type's OID.
    pub oid: u32,
}

impl PgType {
    /// The type of a column of type `oid` with modifier `modifier`
    /// (`atttypmod`; -1 when none), looking types up with `lookup`.
    pub fn resolve<'a>(
        oid: u32,
        modifier: i32,
        lookup: &impl Fn(u32) -> Option<&'a CatalogType>,
    ) -> Result<PgType, UnknownType> {
        if let Some(builtin) = Self::builtin(oid, modifier) {
            return Ok(builtin);
        }
        let ty = lookup(oid).ok_or(UnknownType { oid })?;
        Ok(match ty.kind {
            b'd' => Self::resolve(ty.base, ty.base_modifier.max(modifier), lookup)?,
            b'e' => PgType::Enum(ty.labels.clone().into()),
            // An array's modifier is its element's (`numeric(10,2)[]`).
            _ if ty.element != 0 => {
                PgType::Array(Box::new(Self::resolve(ty.element, modifier, lookup)?))
            }
            _ => match ty.name.as_str() {
                "hstore" => PgType::Hstore,
                "citext" => PgType::Text,
                _ => PgType::OtherText,
            },
        })
    }

    /// A built-in scalar type, by its fixed OID.
    fn builtin(oid: u32, modifier: i32) -> Option<PgType> {
        let precision = || {
            u8::try_from(modifier)
                .ok()
                .filter(|p| *p <= 6)
                .unwrap_or(DEFAULT_TIME_PRECISION)
        };
        Some(match oid {
            16 => PgType::Bool,
            17 => PgType::Bytea,
            18 | 19 | 25 | 1042 | 1043 => PgType::Text,
            20 => PgType::Int8,
            21 => PgType::Int2,
            23 => PgType::Int4,
            26 => PgType::Oid,
            114 | 3802 => PgType::Json,
            142 => PgType::Xml,
            600 => PgType::Point,
            700 => PgType::Float4,
            701 => PgType::Float8,
            790 => PgType::Money,
            1082 => PgType::Date,
            1083 => PgType::Time(precision()),
            1114 => PgType::Timestamp(precision()),
            1184 => PgType::TimestampTz(precision()),
            1186 => PgType::Interval,
            1266 => PgType::TimeTz,
            1560 | 1562 => PgType::Bit(u32::try_from(modifier).ok()),
            1700 => PgType::Numeric(numeric_modifier(modifier)),
            2950 => PgType::Uuid,
            _ => return None,
        })
    }

    /// How values of this type are written.
    pub fn column_kind(&self) -> ColumnKind {
        match self {
            PgType::Bool => ColumnKind::Bool,
            PgType::Int2 => ColumnKind::Int {
                unsigned: false,
                bytes: 2,
            },
            PgType::Int4 => ColumnKind::Int {
                unsigned: false,
                bytes: 4,
            },
            PgType::Int8 => ColumnKind::Int {
                unsigned: false,
                bytes: 8,
            },
            PgType::Oid => ColumnKind::Int {
                unsigned: true,
                bytes: 4,
            },
            PgType::Float4 => ColumnKind::Float,
            PgType::Float8 => ColumnKind::Double,
            PgType::Numeric(Some(_)) | PgType::Money => ColumnKind::Decimal,
            PgType::Numeric(None) => ColumnKind::VariableDecimal,
            PgType::Text => ColumnKind::Text(crate::schema::Charset::Utf8),
            PgType::OtherText => ColumnKind::PlainText,
            PgType::Bytea => ColumnKind::Binary { fixed_len: None },
            PgType::Json | PgType::Hstore => ColumnKind::Json,
            PgType::Xml => ColumnKind::Xml,
            PgType::Uuid => ColumnKind::Uuid,
            PgType::Date => ColumnKind::Date,
            PgType::Time(p) if *p <= 3 => ColumnKind::TimeMillis,
            PgType::Time(_) => ColumnKind::Time,
            PgType::TimeTz => ColumnKind::ZonedTime,
            PgType::Timestamp(p) => ColumnKind::DateTime { fsp: *p },
            PgType::TimestampTz(p) => ColumnKind::Timestamp { fsp: *p },
            PgType::Interval => ColumnKind::Interval,
            PgType::Bit(n) => ColumnKind::Bit {
                bits: n.unwrap_or(UNLIMITED_BITS),
            },
            PgType::Enum(labels) => ColumnKind::Enum(labels.clone()),
            PgType::Point => ColumnKind::Geometry { point: true },
            PgType::Array(element) => ColumnKind::Array(Box::new(element.column_kind())),
        }
    }

    /// What the type declares beyond its kind: a `numeric(p, s)`'s digits,
    /// a `money`'s scale (2).
    pub fn declared(&self) -> Declared {
        let digits = |n: u32| u16::try_from(n).unwrap_or(u16::MAX);
        match self {
            PgType::Numeric(Some((precision, scale))) => Declared::Decimal {
                precision: digits(*precision),
                scale: digits(*scale),
            },
            PgType::Money => Declared::Scale(2),
            _ => Declared::Plain,
        }
    }
}

/// `numeric`'s modifier: `((precision << 16) | scale) + 4`, or -1 for none.
fn numeric_modifier(modifier: i32) -> Option<(u32, u32)> {
    let m = u32::try_from(modifier.checked_sub(4)?).ok()?;
    Some((m >> 16, m & 0x7ff))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Vec<CatalogType> {
        let ty = |oid, name: &str, kind, element, base, base_modifier| CatalogType {
            oid,
            name: name.to_owned(),
            kind,
            element,
            base,
            base_modifier,
            labels: vec![],
        };
        vec![
            ty(1007, "_int4", b'b', 23, 0, -1),
            ty(1231, "_numeric", b'b', 1700, 0, -1),
            ty(90001, "price", b'd', 0, 1700, (12 << 16 | 2) + 4),
            ty(90002, "_price", b'b', 90001, 0, -1),
            ty(90003, "hstore", b'b', 0, 0, -1),
            ty(90004, "int4range", b'r', 0, 0, -1),
            CatalogType {
                labels: vec!["sad".into(), "ok".into()],
                ..ty(90005, "mood", b'e', 0, 0, -1)
            },
        ]
    }

    fn resolve(oid: u32, modifier: i32) -> Result<PgType, UnknownType> {
        let catalog = catalog();
        PgType::resolve(oid, modifier, &|oid| catalog.iter().find(|t| t.oid == oid))
    }

    #[test]
    fn modifiers_give_precision_scale_and_length() {
        assert_eq!(
            resolve(1700, (10 << 16 | 3) + 4),
            Ok(PgType::Numeric(Some((10, 3))))
        );
        assert_eq!(resolve(1700, -1), Ok(PgType::Numeric(None)));
        assert_eq!(resolve(1114, -1), Ok(PgType::Timestamp(6)));
        assert_eq!(resolve(1114, 2), Ok(PgType::Timestamp(2)));
        assert_eq!(resolve(1184, 0), Ok(PgType::TimestampTz(0)));
        assert_eq!(resolve(1560, 12), Ok(PgType::Bit(Some(12))));
        assert_eq!(
            resolve(1083, 3).unwrap().column_kind(),
            ColumnKind::TimeMillis
        );
        assert_eq!(resolve(1083, 4).unwrap().column_kind(), ColumnKind::Time);
    }

    #[test]
    fn domains_arrays_enums_and_extensions_resolve_through_the_catalog() {
        assert_eq!(resolve(90001, -1), Ok(PgType::Numeric(Some((12, 2)))));
        assert_eq!(
            resolve(90002, -1),
            Ok(PgType::Array(Box::new(PgType::Numeric(Some((12, 2))))))
        );
        assert_eq!(resolve(1007, -1), Ok(PgType::Array(Box::new(PgType::Int4))));
        assert_eq!(resolve(90003, -1), Ok(PgType::Hstore));
        assert_eq!(resolve(90004, -1), Ok(PgType::OtherText));
        assert_eq!(
            resolve(90005, -1),
            Ok(PgType::Enum(vec!["sad".to_owned(), "ok".to_owned()].into()))
        );
        assert_eq!(resolve(12345, -1), Err(UnknownType { oid: 12345 }));
    }
}
