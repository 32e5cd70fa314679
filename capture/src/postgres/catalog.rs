//! What capture reads from a PostgreSQL database's catalog: the types of
//! the columns it decodes ([`CatalogTypes`], for [`PgType::resolve`]), and
//! a table's columns with their nullability and primary key
//! ([`table_columns`]), and a table's definition as text ([`definition`]).

use std::collections::HashMap;

use tokio_postgres::Client;

use crate::postgres::pg_type::{CatalogType, PgType, UnknownType};
use crate::postgres::server::quote;

/// Types read from `pg_type`, by OID.
#[derive(Debug, Clone, Default)]
pub struct CatalogTypes {
    types: HashMap<u32, CatalogType>,
}

/// The types asked for, and every type they are made of (an array's
/// element, a domain's base), with enums' labels.
const TYPES_QUERY: &str = "\
WITH RECURSIVE wanted(oid) AS (
    SELECT unnest($1::oid[])
  UNION
    SELECT part FROM pg_type t JOIN wanted w ON t.oid = w.oid,
      LATERAL (VALUES (CASE WHEN t.typcategory = 'A' THEN t.typelem ELSE 0 END), (t.typbasetype)) p(part)
    WHERE part <> 0
)
SELECT t.oid, t.typname::text, t.typtype,
       CASE WHEN t.typcategory = 'A' THEN t.typelem ELSE 0 END,
       t.typbasetype, t.typtypmod,
       ARRAY(SELECT enumlabel::text FROM pg_enum e WHERE e.enumtypid = t.oid ORDER BY enumsortorder)
FROM pg_type t JOIN wanted w ON t.oid = w.oid";

impl CatalogTypes {
    /// Reads the types `oids` name (and what they are made of) on `client`.
    pub async fn read(
        client: &Client,
        oids: &[u32],
    ) -> Result<CatalogTypes, tokio_postgres::Error> {
        let mut types = HashMap::new();
        for row in client.query(TYPES_QUERY, &[&oids]).await? {
            let kind: i8 = row.get(2);
            let ty = CatalogType {
                oid: row.get(0),
                name: row.get(1),
                kind: kind as u8,
                element: row.get(3),
                base: row.get(4),
                base_modifier: row.get(5),
                labels: row.get(6),
            };
            types.insert(ty.oid, ty);
        }
        Ok(CatalogTypes { types })
    }

    /// The type of a column of type `oid` with modifier `modifier`.
    pub fn resolve(&self, oid: u32, modifier: i32) -> Result<PgType, UnknownType> {
        PgType::resolve(oid, modifier, &|oid| self.types.get(&oid))
    }
}

/// A table's column as the catalog describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogColumn {
    /// `attname`.
    pub name: String,
    /// `attnotnull`.
    pub not_null: bool,
    /// Its place in the primary key, from 1; `None` outside it.
    pub key_position: Option<u16>,
    /// `atttypid`.
    pub type_oid: u32,
    /// `atttypmod`.
    pub type_modifier: i32,
    /// The type as SQL declares it (`format_type`: `numeric(10,2)`).
    pub type_name: String,
    /// Its `DEFAULT` expression as the server shows it (`pg_get_expr`); none
    /// for a generated column.
    pub default: Option<String>,
}

/// The OID of the table (plain or partitioned) `schema.table`, if there is one.
pub async fn table_oid(
    client: &Client,
    schema: &str,
    table: &str,
) -> Result<Option<u32>, tokio_postgres::Error> {
    Ok(client
        .query_opt(
            "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
            &[&schema, &table],
        )
        .await?
        .map(|row| row.get(0)))
}

/// The live columns of the table with OID `relid`, in order.
pub async fn table_columns(
    client: &Client,
    relid: u32,
) -> Result<Vec<CatalogColumn>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT a.attname::text, a.attnotnull, array_position(i.indkey::int2[], a.attnum), \
                    a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod), \
                    CASE WHEN a.attgenerated = '' THEN pg_get_expr(d.adbin, d.adrelid) END \
             FROM pg_attribute a \
             LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary \
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[&relid],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| CatalogColumn {
            name: row.get(0),
            not_null: row.get(1),
            key_position: row
                .get::<_, Option<i32>>(2)
                .and_then(|p| u16::try_from(p).ok()),
            type_oid: row.get(3),
            type_modifier: row.get(4),
            type_name: row.get(5),
            default: row.get(6),
        })
        .collect())
}

/// `CREATE TABLE schema.table (…)` with the columns as the catalog declares
/// them and the primary key: what the schema history records of a table
/// whose shape a Relation message announced (pgoutput sends no DDL).
pub fn definition(schema: &str, table: &str, columns: &[CatalogColumn]) -> String {
    let mut parts: Vec<String> = columns
        .iter()
        .map(|c| {
            let not_null = if c.not_null { " NOT NULL" } else { "" };
            format!("{} {}{not_null}", quote(&c.name), c.type_name)
        })
        .collect();
    let mut key: Vec<(u16, &str)> = columns
        .iter()
        .filter_map(|c| Some((c.key_position?, c.name.as_str())))
        .collect();
    key.sort_unstable();
    if !key.is_empty() {
        let names: Vec<String> = key.iter().map(|(_, n)| quote(n)).collect();
        parts.push(format!("PRIMARY KEY ({})", names.join(", ")));
    }
    format!(
        "CREATE TABLE {}.{} ({})",
        quote(schema),
        quote(table),
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_lists_columns_then_the_key_in_key_order() {
        let column = |name: &str, type_name: &str, not_null, key_position| CatalogColumn {
            name: name.to_owned(),
            not_null,
            key_position,
            type_oid: 0,
            type_modifier: -1,
            type_name: type_name.to_owned(),
            default: None,
        };
        let columns = [
            column("b", "integer", true, Some(2)),
            column("a \"q\"", "text", true, Some(1)),
            column("price", "numeric(10,2)", false, None),
        ];
        assert_eq!(
            definition("public", "t", &columns),
            "CREATE TABLE \"public\".\"t\" (\"b\" integer NOT NULL, \"a \"\"q\"\"\" text NOT NULL, \
             \"price\" numeric(10,2), PRIMARY KEY (\"a \"\"q\"\"\", \"b\"))"
        );
    }
}
