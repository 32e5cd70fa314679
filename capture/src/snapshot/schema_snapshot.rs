//! The schema change records an initial snapshot starts with
//! (`events.schema.changes.format: debezium`), in Debezium 3.6's order
//! (`BinlogSnapshotChangeEventSource.readTableStructure`): the server's
//! character set (`SET character_set_server=…, collation_server=…`), a `DROP
//! TABLE IF EXISTS` per table, then per database `DROP DATABASE IF EXISTS`,
//! `CREATE DATABASE … CHARSET … COLLATE …` and `USE`, and each of its tables'
//! `SHOW CREATE TABLE` as the table's `CREATE`. The tables are every table of
//! the captured tables' databases, as with Debezium's default
//! `schema.history.internal.store.only.captured.tables.ddl=false`: a table a
//! filter leaves out is described too.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use tributary_proto::SourceInfo;

use crate::ddl_statement::{DdlEffect, TableChangeKind};
use crate::error::CaptureError;
use crate::schema_change_record::DescribedChange;
use crate::snapshot_source::SnapshotTable;
use crate::table_definition::Flavor;
use crate::table_model;

/// The records, each with `source` as its `source` block (read on the
/// snapshot's connection, `character_set_results = binary`).
pub(crate) async fn schema_changes(
    conn: &mut Conn,
    tables: &[SnapshotTable],
    source: &SourceInfo,
    flavor: Flavor,
) -> Result<Vec<DescribedChange>, CaptureError> {
    let record = |effect: DdlEffect, definition| DescribedChange {
        source: source.clone(),
        effects: vec![(effect, definition)],
    };
    let statement = |db: &str, ddl: String| DdlEffect {
        db: db.to_owned(),
        ddl,
        table: None,
        parsed: true,
    };
    let (charset, collation): (Vec<u8>, Vec<u8>) = conn
        .query_first("SELECT @@character_set_server, @@collation_server")
        .await?
        .unwrap_or_default();
    let mut records = vec![record(
        statement(
            "",
            format!(
                "SET character_set_server={}, collation_server={}",
                text(charset),
                text(collation)
            ),
        ),
        None,
    )];
    let mut databases: Vec<&str> = tables.iter().map(|t| t.db.as_str()).collect();
    databases.sort_unstable();
    databases.dedup();
    let mut described: Vec<(String, String)> = Vec::new();
    for db in &databases {
        let names: Vec<Vec<u8>> = conn
            .exec(
                "SELECT TABLE_NAME FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME",
                (*db,),
            )
            .await?;
        described.extend(names.into_iter().map(|name| ((*db).to_owned(), text(name))));
    }
    for (db, table) in &described {
        records.push(record(
            DdlEffect {
                table: Some((TableChangeKind::Drop, table.clone())),
                ..statement(
                    db,
                    format!("DROP TABLE IF EXISTS {}", quoted_table(db, table)),
                )
            },
            None,
        ));
    }
    for db in databases {
        let locale: Option<Locale> = conn
            .exec_first(
                "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME \
                 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
                (db,),
            )
            .await?;
        let (charset, collation) = locale.unwrap_or_default();
        let mut create = format!("CREATE DATABASE {}", quoted(db));
        if let Some(charset) = charset {
            create.push_str(&format!(" CHARSET {}", text(charset)));
        }
        if let Some(collation) = collation {
            create.push_str(&format!(" COLLATE {}", text(collation)));
        }
        for ddl in [
            format!("DROP DATABASE IF EXISTS {}", quoted(db)),
            create,
            format!("USE {}", quoted(db)),
        ] {
            records.push(record(statement(db, ddl), None));
        }
        for (_, table) in described.iter().filter(|(table_db, _)| table_db == db) {
            let shown: Option<(Vec<u8>, Vec<u8>)> = conn
                .query_first(format!("SHOW CREATE TABLE {}", quoted_table(db, table)))
                .await?;
            let Some((_, ddl)) = shown else { continue };
            let definition = table_model::read_definition(conn, db, table, flavor).await?;
            records.push(record(
                DdlEffect {
                    table: Some((TableChangeKind::Create, table.clone())),
                    ..statement(db, text(ddl))
                },
                definition,
            ));
        }
    }
    Ok(records)
}

/// A database's default character set and collation.
type Locale = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Text the server sent as bytes (names and statements are UTF-8).
fn text(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `` `name` `` (a backtick doubled).
fn quoted(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

fn quoted_table(db: &str, table: &str) -> String {
    format!("{}.{}", quoted(db), quoted(table))
}
