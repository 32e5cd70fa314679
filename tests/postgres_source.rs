//! PostgreSQL as a source, against the stack's private PostgreSQL
//! (`wal_level=logical`, deploy/local/up.sh). The `pgoutput` decoder reads
//! what the server itself sends for a slot (`pg_logical_slot_peek_binary_changes`,
//! protocol version 1), checked against the server's own answers: the
//! catalog for relations, `format('%s', col)` for values, `txid_current()` for
//! transactions.

mod common;

use anyhow::{Context, Result};
use tokio_postgres::{Client, NoTls};
use tributary_capture::postgres::lsn::Lsn;
use tributary_capture::postgres::pgoutput::{self, Datum, Message, ReplicaIdentity};

/// The stack's PostgreSQL, as its superuser.
fn pg_url() -> String {
    std::env::var("TRIBUTARY_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5433/postgres".into())
}

async fn connect() -> Result<Client> {
    let (client, connection) = tokio_postgres::connect(&pg_url(), NoTls)
        .await
        .context("connect to the stack's PostgreSQL (deploy/local/up.sh)")?;
    tokio::spawn(connection);
    Ok(client)
}

/// A table, its publication and a `pgoutput` slot; dropped at the end.
struct Fixture {
    client: Client,
    table: String,
    slot: String,
    publication: String,
}

impl Fixture {
    async fn new(columns: &str) -> Result<Self> {
        let client = connect().await?;
        let table = common::unique("pg_t");
        let slot = common::unique("pg_s");
        let publication = common::unique("pg_p");
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} ({columns}); CREATE PUBLICATION {publication} FOR TABLE {table};"
            ))
            .await?;
        client
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await?;
        Ok(Fixture {
            client,
            table,
            slot,
            publication,
        })
    }

    /// Every message the slot holds, decoded, with the LSN the server gives it.
    async fn messages(&self) -> Result<Vec<(Lsn, Message)>> {
        let rows = self
            .client
            .query(
                "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, \
                 'proto_version', '1', 'publication_names', $2, 'messages', 'true')",
                &[&self.slot, &self.publication],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let lsn: Lsn = row.get::<_, &str>(0).parse()?;
                let message =
                    pgoutput::decode(row.get(1)).with_context(|| format!("message at {lsn}"))?;
                Ok((lsn, message))
            })
            .collect()
    }

    /// The row with `id` as each type's output function writes it (what
    /// pgoutput sends): `format('%s', col)`, which calls it (`col::text`
    /// does not for every type: `true` vs `t`).
    async fn texts(&self, id: i32) -> Result<Vec<Datum>> {
        let columns = self.column_names().await?;
        let list: Vec<String> = columns
            .iter()
            .map(|c| format!("CASE WHEN {c} IS NULL THEN NULL ELSE format('%s', {c}) END"))
            .collect();
        let row = self
            .client
            .query_one(
                &format!(
                    "SELECT {} FROM {} WHERE id = $1",
                    list.join(", "),
                    self.table
                ),
                &[&id],
            )
            .await?;
        Ok((0..columns.len())
            .map(|i| match row.get::<_, Option<&str>>(i) {
                None => Datum::Null,
                Some(text) => Datum::Text(text.as_bytes().to_vec()),
            })
            .collect())
    }

    async fn column_names(&self) -> Result<Vec<String>> {
        Ok(self
            .client
            .query(
                "SELECT attname::text FROM pg_attribute WHERE attrelid = $1::text::regclass \
                 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                &[&self.table],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect())
    }

    async fn drop(self) -> Result<()> {
        self.client
            .execute("SELECT pg_drop_replication_slot($1)", &[&self.slot])
            .await?;
        self.client
            .batch_execute(&format!(
                "DROP PUBLICATION {}; DROP TABLE {};",
                self.publication, self.table
            ))
            .await?;
        Ok(())
    }
}

fn changes(messages: &[(Lsn, Message)]) -> Vec<&Message> {
    messages
        .iter()
        .map(|(_, m)| m)
        .filter(|m| {
            matches!(
                m,
                Message::Insert { .. }
                    | Message::Update { .. }
                    | Message::Delete { .. }
                    | Message::Truncate { .. }
            )
        })
        .collect()
}

#[tokio::test]
async fn pgoutput_messages_decode_as_the_server_reads_its_rows() -> Result<()> {
    let fx = Fixture::new(
        "id int PRIMARY KEY, big bigint, price numeric(12,3), name varchar(20), body text, \
         flag boolean, at timestamptz, raw bytea, doc jsonb, tags int[], uid uuid, span interval",
    )
    .await?;
    let t = &fx.table;
    // One transaction, its xid read in it.
    let tx = insert_two(&fx.client, t).await?;
    let inserted = [fx.texts(1).await?, fx.texts(2).await?];
    // An update that leaves the TOASTed `body` alone, one that moves the key, a delete.
    fx.client
        .batch_execute(&format!("UPDATE {t} SET name = 'renamed' WHERE id = 1"))
        .await?;
    let updated = fx.texts(1).await?;
    fx.client
        .batch_execute(&format!("UPDATE {t} SET id = 3 WHERE id = 2"))
        .await?;
    let moved = fx.texts(3).await?;
    fx.client
        .batch_execute(&format!("DELETE FROM {t} WHERE id = 1"))
        .await?;
    // With REPLICA IDENTITY FULL a delete carries the whole row.
    let before_full_delete = fx.texts(3).await?;
    fx.client
        .batch_execute(&format!(
            "ALTER TABLE {t} REPLICA IDENTITY FULL; DELETE FROM {t} WHERE id = 3; TRUNCATE {t} RESTART IDENTITY"
        ))
        .await?;
    let oid: u32 = fx
        .client
        .query_one("SELECT $1::text::regclass::oid", &[t])
        .await?
        .get(0);

    let messages = fx.messages().await?;
    // The relation, as the catalog describes it.
    let Some(Message::Relation(relation)) = messages
        .iter()
        .map(|(_, m)| m)
        .find(|m| matches!(m, Message::Relation(_)))
    else {
        panic!("no relation message in {messages:?}");
    };
    let catalog = fx
        .client
        .query(
            "SELECT a.attname::text, a.atttypid, a.atttypmod, \
                    coalesce(a.attnum = ANY(i.indkey), false) \
             FROM pg_attribute a LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary \
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[&oid],
        )
        .await?;
    assert_eq!(relation.oid, oid);
    assert_eq!(relation.name, *t);
    assert_eq!(relation.namespace, "public");
    assert_eq!(relation.replica_identity, ReplicaIdentity::Default);
    assert_eq!(relation.columns.len(), catalog.len());
    for (column, row) in relation.columns.iter().zip(&catalog) {
        assert_eq!(column.name, row.get::<_, String>(0));
        assert_eq!(column.type_oid, row.get::<_, u32>(1), "{}", column.name);
        assert_eq!(
            column.type_modifier,
            row.get::<_, i32>(2),
            "{}",
            column.name
        );
        assert_eq!(column.key, row.get::<_, bool>(3), "{}", column.name);
    }

    // The first transaction: BEGIN with the xid the server gave it, two inserts, COMMIT.
    let begin = messages
        .iter()
        .find_map(|(_, m)| match m {
            Message::Begin { xid, final_lsn, .. } => Some((*xid, *final_lsn)),
            _ => None,
        })
        .expect("a BEGIN");
    assert_eq!(begin.0, tx);
    let commit = messages
        .iter()
        .find_map(|(_, m)| match m {
            Message::Commit {
                commit_lsn,
                end_lsn,
                ..
            } => Some((*commit_lsn, *end_lsn)),
            _ => None,
        })
        .expect("a COMMIT");
    assert_eq!(commit.0, begin.1, "BEGIN announces its COMMIT's LSN");
    assert!(commit.1 > commit.0);

    let changes = changes(&messages);
    assert_eq!(changes.len(), 7, "{changes:#?}");
    for (change, row) in changes[..2].iter().zip(&inserted) {
        assert_eq!(
            **change,
            Message::Insert {
                relation: oid,
                new: row.clone()
            }
        );
    }
    // `body` was not changed and is TOASTed: the server leaves it out.
    let body = 4;
    let Message::Update { old: None, new, .. } = changes[2] else {
        panic!("{:?}", changes[2]);
    };
    assert_eq!(new[body], Datum::UnchangedToast);
    for (i, (got, want)) in new.iter().zip(&updated).enumerate() {
        if i != body {
            assert_eq!(got, want, "column {i}");
        }
    }
    // A moved key: the old key, other columns null.
    let Message::Update {
        old: Some(old),
        new,
        ..
    } = changes[3]
    else {
        panic!("{:?}", changes[3]);
    };
    assert!(old.key_only);
    assert_eq!(old.tuple[0], Datum::Text(b"2".to_vec()));
    assert!(old.tuple[1..].iter().all(|d| *d == Datum::Null));
    assert_eq!(*new, moved);
    let Message::Delete { old, .. } = changes[4] else {
        panic!("{:?}", changes[4]);
    };
    assert!(old.key_only);
    assert_eq!(old.tuple[0], Datum::Text(b"1".to_vec()));
    let Message::Delete { old, .. } = changes[5] else {
        panic!("{:?}", changes[5]);
    };
    assert!(!old.key_only, "REPLICA IDENTITY FULL sends the whole row");
    assert_eq!(old.tuple, before_full_delete);
    assert_eq!(
        *changes[6],
        Message::Truncate {
            relations: vec![oid],
            cascade: false,
            restart_identity: true
        }
    );
    fx.drop().await
}

/// Inserts two rows (one with a TOASTed `body`) in one transaction and
/// returns its xid, as the server reports it inside the transaction.
async fn insert_two(client: &Client, table: &str) -> Result<u32> {
    client.batch_execute("BEGIN").await?;
    let xid: i64 = client.query_one("SELECT txid_current()", &[]).await?.get(0);
    client
        .batch_execute(&format!(
            "INSERT INTO {table} VALUES \
             (1, 9223372036854775807, -123456789.125, 'héllo', \
              (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 2000) g), true, \
              '2024-02-29 12:34:56.789012+05:30', '\\x00ff10', '{{\"a\": [1, 2.5, null]}}', \
              '{{1,NULL,3}}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1 year 2 days 03:04:05.5'), \
             (2, NULL, NULL, NULL, 'short', false, NULL, NULL, NULL, NULL, NULL, NULL); \
             COMMIT"
        ))
        .await?;
    Ok(u32::try_from(xid)?)
}
