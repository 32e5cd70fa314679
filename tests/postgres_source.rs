//! PostgreSQL as a source, against the stack's private PostgreSQL
//! (`wal_level=logical`, deploy/local/up.sh). The `pgoutput` decoder reads
//! what the server itself sends for a slot (`pg_logical_slot_peek_binary_changes`,
//! protocol version 1), checked against the server's own answers: the
//! catalog for relations, `format('%s', col)` for values, `txid_current()` for
//! transactions.

mod common;

use anyhow::{Context, Result};
use common::postgres::pg_connect as connect;
use tokio_postgres::Client;
use tributary_capture::postgres::pgoutput::{self, Datum, Message, ReplicaIdentity};
use tributary_proto::lsn::Lsn;

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

/// How the server computes a column's expected value; `{c}` is the column.
#[derive(Clone, Copy)]
enum Expect {
    /// A boolean expression.
    Bool(&'static str),
    /// An `int8` expression.
    Int(&'static str),
    /// A `float8` expression, compared as `real` (a `real` column's value
    /// is the shortest text of its single-precision value, as Debezium's).
    Float4(&'static str),
    /// A `float8` expression.
    Float8(&'static str),
    /// A text expression.
    Text(&'static str),
    /// A hex text expression: the bytes.
    Hex(&'static str),
    /// An `int8` expression: a bit string's value, as `n` little-endian bytes.
    Bits(&'static str, usize),
    /// A `json` expression: equal to the value's JSON (arrays) or to the
    /// JSON its text holds (hstore).
    Json(&'static str),
    /// Two `float8` expressions: a point's x and y.
    Point(&'static str, &'static str),
}

/// One column of the type test: its type, the literals of its rows (NULL
/// where a row has none), and the server's expectation.
struct TypeCase {
    ty: String,
    literals: &'static [&'static str],
    expect: Expect,
}

fn case(ty: &str, literals: &'static [&'static str], expect: Expect) -> TypeCase {
    TypeCase {
        ty: ty.to_owned(),
        literals,
        expect,
    }
}

/// Every type family is decoded from what pgoutput sends to the value the
/// server's own functions compute from the row (epoch arithmetic for
/// temporal types, `encode` for bytes, `array_to_json`, `hstore_to_json`).
#[tokio::test]
async fn every_type_family_decodes_to_what_the_server_computes() -> Result<()> {
    use tributary_capture::postgres::catalog::CatalogTypes;
    use tributary_capture::postgres::text_value::{self, SESSION_SETTINGS};
    use tributary_proto::Value;

    let setup = connect().await?;
    let mood = common::unique("pg_mood");
    let price = common::unique("pg_price");
    setup
        .batch_execute(&format!(
            "CREATE EXTENSION IF NOT EXISTS hstore; \
             CREATE TYPE {mood} AS ENUM ('sad', 'ok', 'happy'); \
             CREATE DOMAIN {price} AS numeric(12,2) CHECK (VALUE >= 0);"
        ))
        .await?;
    let interval_micros = "trunc((((extract(year from {c}) * 12 + extract(month from {c}))::float8 * 30.4375 \
         + extract(day from {c})::float8) * 86400 \
         + (extract(hour from {c}) * 3600 + extract(minute from {c}) * 60 + extract(second from {c}))::float8) * 1e6)::int8";
    let cases = vec![
        case("boolean", &["true", "false"], Expect::Bool("{c}")),
        case("smallint", &["-32768", "32767"], Expect::Int("{c}")),
        case("integer", &["-2147483648"], Expect::Int("{c}")),
        case(
            "bigint",
            &["-9223372036854775808", "9223372036854775807"],
            Expect::Int("{c}"),
        ),
        case(
            "real",
            &["1.5", "0.1", "-3.4028235e38", "'-Infinity'"],
            Expect::Float4("{c}::float8"),
        ),
        case(
            "double precision",
            &["1e308", "-0.000123456789012345", "'Infinity'"],
            Expect::Float8("{c}"),
        ),
        case(
            "numeric(12,3)",
            &["-123456789.125", "0"],
            Expect::Text("{c}::text"),
        ),
        case(
            "numeric",
            &["1.2300", "'NaN'", "-1e-20"],
            Expect::Text("{c}::text"),
        ),
        case(
            "money",
            &["-1234.5", "92233720368547758.07"],
            Expect::Text("{c}::numeric::text"),
        ),
        case("char(5)", &["'ab'"], Expect::Text("concat({c})")),
        case("varchar(20)", &["'héllo ☃ 𝄞'"], Expect::Text("{c}::text")),
        case(
            "text",
            &["'line\nbreak \"quoted\" \\\\'"],
            Expect::Text("{c}"),
        ),
        case(
            "bytea",
            &["'\\x00ff10'", "''"],
            Expect::Hex("encode({c}, 'hex')"),
        ),
        case("json", &["'{\"a\": [1, 2.5]}'"], Expect::Text("{c}::text")),
        case(
            "jsonb",
            &["'{\"b\": null, \"a\": [1, 2.5]}'"],
            Expect::Text("{c}::text"),
        ),
        case("xml", &["'<a x=\"1\">t</a>'"], Expect::Text("{c}::text")),
        case(
            "uuid",
            &["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"],
            Expect::Text("{c}::text"),
        ),
        case(
            "date",
            &["'2024-02-29'", "'0044-03-15 BC'", "'1969-12-31'"],
            Expect::Int("{c} - date '1970-01-01'"),
        ),
        case(
            "time",
            &["'13:45:01.123456'", "'24:00:00'"],
            Expect::Int("(extract(epoch from {c}) * 1000000)::int8"),
        ),
        case(
            "time(3)",
            &["'13:45:01.123'"],
            Expect::Int("(extract(epoch from {c}) * 1000)::int8"),
        ),
        case(
            "timetz",
            &["'01:00:00.25-02'", "'23:30:00+05:30'"],
            Expect::Text("(({c}) AT TIME ZONE 'UTC')::time::text || 'Z'"),
        ),
        case(
            "timestamp",
            &[
                "'2024-02-29 12:34:56.789012'",
                "'0044-03-15 12:00:00 BC'",
                "'1969-12-31 23:59:59.999999'",
            ],
            Expect::Int("(extract(epoch from {c}) * 1000000)::int8"),
        ),
        case(
            "timestamp(3)",
            &["'1969-12-31 23:59:59.999'", "'2024-02-29 12:34:56.789'"],
            Expect::Int("floor(extract(epoch from {c}) * 1000)::int8"),
        ),
        case(
            "timestamptz",
            &[
                "'2024-02-29 12:34:56.789012+05:30'",
                "'1900-01-01 00:00:00-01'",
            ],
            Expect::Text("to_char({c} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"),
        ),
        case(
            "timestamptz(0)",
            &["'2024-02-29 23:59:59+00'"],
            Expect::Text("to_char({c} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"),
        ),
        case(
            "interval",
            &[
                "'1 year 2 mons -3 days +04:05:06.5'",
                "'-00:00:01.25'",
                "'100 years'",
            ],
            Expect::Int(interval_micros),
        ),
        case("bit(1)", &["B'1'", "B'0'"], Expect::Bool("{c} = B'1'")),
        case("bit(10)", &["B'1000000011'"], Expect::Bits("{c}::int", 2)),
        case(
            "varbit(20)",
            &["B'101'"],
            Expect::Bits("{c}::bit(3)::int", 1),
        ),
        case(&mood, &["'happy'"], Expect::Text("{c}::text")),
        case(&price, &["12.5"], Expect::Text("{c}::text")),
        case(
            "hstore",
            &["'\"a\"=>\"1\", \"b q\"=>NULL'", "''"],
            Expect::Json("hstore_to_json({c})"),
        ),
        case("point", &["'(1.5,-2)'"], Expect::Point("{c}[0]", "{c}[1]")),
        case(
            "int[]",
            &["'{1,NULL,3}'", "'{{1,2},{3,4}}'"],
            Expect::Json("array_to_json({c})"),
        ),
        case(
            "text[]",
            &["'{\"a,b\",NULL,\"q\\\"x\",\"NULL\"}'"],
            Expect::Json("array_to_json({c})"),
        ),
        case(
            "uuid[]",
            &["'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'"],
            Expect::Json("array_to_json({c})"),
        ),
        case("inet", &["'192.168.0.1/24'"], Expect::Text("{c}::text")),
        case("int4range", &["'[1,5)'"], Expect::Text("{c}::text")),
    ];
    let columns: Vec<String> = std::iter::once("id int PRIMARY KEY".to_owned())
        .chain(
            cases
                .iter()
                .enumerate()
                .map(|(i, c)| format!("c{i} {}", c.ty)),
        )
        .collect();
    let fx = Fixture::new(&columns.join(", ")).await?;
    let rows = cases.iter().map(|c| c.literals.len()).max().unwrap_or(0);
    for row in 0..rows {
        let values: Vec<String> = std::iter::once(row.to_string())
            .chain(cases.iter().map(|c| {
                c.literals
                    .get(row)
                    .map_or("NULL".into(), |l| (*l).to_owned())
            }))
            .collect();
        fx.client
            .batch_execute(&format!(
                "INSERT INTO {} VALUES ({})",
                fx.table,
                values.join(", ")
            ))
            .await
            .with_context(|| format!("row {row}"))?;
    }
    // What the text forms depend on, as capture's sessions set it.
    for (name, value) in SESSION_SETTINGS {
        fx.client
            .batch_execute(&format!("SET {name} = '{value}'"))
            .await?;
    }
    let messages = fx.messages().await?;
    let relation = messages
        .iter()
        .find_map(|(_, m)| match m {
            Message::Relation(r) => Some(r),
            _ => None,
        })
        .expect("a relation message");
    let oids: Vec<u32> = relation.columns.iter().map(|c| c.type_oid).collect();
    let types = CatalogTypes::read(&fx.client, &oids).await?;
    let inserts: Vec<&Vec<Datum>> = messages
        .iter()
        .filter_map(|(_, m)| match m {
            Message::Insert { new, .. } => Some(new),
            _ => None,
        })
        .collect();
    assert_eq!(inserts.len(), rows);
    let mut checked = 0;
    for (row, datums) in inserts.iter().enumerate() {
        for (i, case) in cases.iter().enumerate() {
            let column = &relation.columns[i + 1];
            let ty = types.resolve(column.type_oid, column.type_modifier)?;
            let Datum::Text(text) = &datums[i + 1] else {
                assert!(
                    case.literals.get(row).is_none(),
                    "{} row {row}: {:?}",
                    case.ty,
                    datums[i + 1]
                );
                continue;
            };
            let what = format!(
                "{} row {row} ({:?})",
                case.ty,
                String::from_utf8_lossy(text)
            );
            let got = text_value::decode(&ty, text).with_context(|| what.clone())?;
            let c = format!("c{i}");
            let expr = |e: &str| e.replace("{c}", &c);
            let select = |e: &str| format!("SELECT {} FROM {} WHERE id = $1", expr(e), fx.table);
            let id = row as i32;
            let one = |e: &str| {
                let sql = select(e);
                let client = &fx.client;
                async move { client.query_one(&sql, &[&id]).await }
            };
            match case.expect {
                Expect::Bool(e) => assert_eq!(got, Value::Bool(one(e).await?.get(0)), "{what}"),
                Expect::Int(e) => {
                    let want: i64 = one(&format!("({e})::int8")).await?.get(0);
                    assert_eq!(got, Value::Int(want), "{what}");
                }
                Expect::Float4(e) => {
                    let want: f64 = one(e).await?.get(0);
                    let Value::Float(got) = got else {
                        panic!("{what}: {got:?}")
                    };
                    assert_eq!(got as f32, want as f32, "{what}");
                }
                Expect::Float8(e) => {
                    let want: f64 = one(&format!("({e})::float8")).await?.get(0);
                    assert_eq!(got, Value::Float(want), "{what}");
                }
                Expect::Text(e) => {
                    let want: String = one(&format!("({e})::text")).await?.get(0);
                    assert_eq!(got, Value::String(want), "{what}");
                }
                Expect::Hex(e) => {
                    let hex: String = one(e).await?.get(0);
                    assert_eq!(got, Value::Bytes(hex::decode(hex)?), "{what}");
                }
                Expect::Bits(e, n) => {
                    let bits: i32 = one(e).await?.get(0);
                    let want = (bits as u64).to_le_bytes()[..n].to_vec();
                    assert_eq!(got, Value::Bytes(want), "{what}");
                }
                Expect::Json(e) => {
                    let text: String = one(&format!("({e})::text")).await?.get(0);
                    let want: serde_json::Value = serde_json::from_str(&text)?;
                    let got = match got {
                        Value::String(json) => serde_json::from_str(&json)?,
                        other => other.to_json(),
                    };
                    assert_eq!(got, want, "{what}");
                }
                Expect::Point(x, y) => {
                    let x: f64 = one(x).await?.get(0);
                    let y: f64 = one(y).await?.get(0);
                    let Value::Geometry(point) = got else {
                        panic!("{what}: {got:?}")
                    };
                    assert_eq!(point.point, Some((x, y)), "{what}");
                }
            }
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        cases.iter().map(|c| c.literals.len()).sum::<usize>()
    );
    fx.drop().await?;
    setup
        .batch_execute(&format!("DROP TYPE {mood}; DROP DOMAIN {price};"))
        .await?;
    Ok(())
}
