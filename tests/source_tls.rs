//! TLS to the source database (`source.tls`), end to end against servers of
//! the test's own that accept the capture user only over TLS with a client
//! certificate: a MariaDB whose user is `REQUIRE X509`, and a PostgreSQL
//! whose `pg_hba.conf` has `hostssl … clientcert=verify-ca` and `hostnossl …
//! reject` for the capture role (replication sessions included). Capture
//! snapshots and streams each over mutual TLS and its topic ends as the
//! table (the server's own `SELECT`). Without `source.tls`, with a CA that
//! did not sign the server's certificate, or with a name the certificate
//! does not carry, it stops at once with an error saying why.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use common::pki::Pki;
use common::postgres::PrivatePostgres;
use common::{CaptureSetup, PrivateMariaDb, Record, TributaryProcess, brokers, free_port, unique};
use mysql_async::prelude::Queryable;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// The table a topic describes: key `id` → the row after the last change.
fn materialize(records: &[Record]) -> BTreeMap<i64, Value> {
    let mut rows = BTreeMap::new();
    for r in records {
        let id = r.key["id"].as_i64().expect("an id key");
        match r.value.as_ref().map(|v| &v["after"]) {
            Some(after) if !after.is_null() => {
                rows.insert(id, after.clone());
            }
            _ => {
                rows.remove(&id);
            }
        }
    }
    rows
}

/// `source.tls` presenting the client certificate, `verify: none`: the
/// server's certificate is not checked.
fn unverified_block(pki: &Pki) -> String {
    format!(
        "tls: {{ verify: none, cert_file: '{}', key_file: '{}' }}",
        pki.path("client.pem"),
        pki.path("client.key")
    )
}

/// `source.tls` presenting the client certificate, checking the server's
/// against `ca` (a file of the test PKI), plus `extra` fields.
fn tls_block(pki: &Pki, ca: &str, extra: &str) -> String {
    format!(
        "tls: {{ ca_file: '{}', cert_file: '{}', key_file: '{}'{extra} }}",
        pki.path(ca),
        pki.path("client.pem"),
        pki.path("client.key")
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_is_captured_over_mutual_tls_and_a_refused_certificate_stops_capture() -> Result<()>
{
    let pki = Pki::new();
    let args = [
        format!("--ssl-ca={}", pki.path("ca.pem")),
        format!("--ssl-cert={}", pki.path("server.pem")),
        format!("--ssl-key={}", pki.path("server.key")),
    ];
    let server = tokio::task::spawn_blocking(move || {
        PrivateMariaDb::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await?;
    let mut conn = server.root_conn().await;
    conn.query_drop(
        "CREATE USER 'cdc_tls'@'127.0.0.1' IDENTIFIED BY 'tributary' REQUIRE X509; \
         GRANT SELECT, RELOAD, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'cdc_tls'@'127.0.0.1'; \
         CREATE DATABASE shop; \
         CREATE TABLE shop.t (id INT PRIMARY KEY, name VARCHAR(40)); \
         INSERT INTO shop.t VALUES (1, 'one'), (2, 'two'), (3, 'three'), (4, 'four'), (5, 'five')",
    )
    .await?;
    let setup = CaptureSetup::new("shop", "").with_snapshot(2);
    let config = |tls: &str| {
        setup
            .yaml_on(server.port)
            .replace("user: tributary", "user: cdc_tls")
            .replace(
                &format!("server_id: {}", setup.server_id),
                &format!("server_id: {}, {tls}", setup.server_id),
            )
    };

    // The user exists only for TLS with a client certificate: without
    // source.tls the server refuses it.
    let (ok, text) = common::validate_connect(&config(""));
    assert!(!ok && text.contains("Access denied"), "{text}");

    let capture = TributaryProcess::capture(&config(&tls_block(&pki, "ca.pem", "")));
    conn.query_drop(
        "INSERT INTO shop.t VALUES (6, 'six'), (7, 'seven'); \
         UPDATE shop.t SET name = 'ONE' WHERE id = 1; DELETE FROM shop.t WHERE id = 2",
    )
    .await?;
    let rows: Vec<(i64, String)> = conn.query("SELECT id, name FROM shop.t").await?;
    let expected: BTreeMap<i64, Value> = rows
        .into_iter()
        .map(|(id, name)| (id, json!({ "id": id, "name": name })))
        .collect();
    let want = expected.clone();
    let records =
        common::read_topic(&setup.topic("t"), WAIT, move |r| materialize(r) == want).await;
    assert_eq!(materialize(&records), expected, "log:\n{}", capture.log());
    drop(capture);

    // A CA that did not sign the server's certificate: capture stops at
    // once (no retry), saying which certificate check failed.
    let refused = TributaryProcess::capture(&config(&tls_block(&pki, "other-ca.pem", "")));
    let (ok, log) =
        tokio::task::spawn_blocking(move || refused.wait_exit(Duration::from_secs(30))).await?;
    assert!(!ok, "{log}");
    assert!(
        log.contains("TLS to the source database failed") && log.contains("UnknownIssuer"),
        "{log}"
    );

    // The certificate names 127.0.0.1 and localhost: a server_name it
    // carries is accepted, another refused.
    let (ok, text) = common::validate_connect(&config(&tls_block(
        &pki,
        "ca.pem",
        ", server_name: localhost",
    )));
    assert!(ok, "{text}");
    let (ok, text) = common::validate_connect(&config(&tls_block(
        &pki,
        "ca.pem",
        ", server_name: db.example.com",
    )));
    assert!(
        !ok && text.contains("not valid for name \"db.example.com\""),
        "{text}"
    );
    // verify: none encrypts without checking the server's certificate.
    let (ok, text) = common::validate_connect(&config(&unverified_block(&pki)));
    assert!(ok, "{text}");

    // The stack's MariaDB offers no TLS: refused, saying so, never plain text.
    let plain_server = setup.yaml().replace(
        &format!("server_id: {}", setup.server_id),
        &format!("server_id: {}, {}", setup.server_id, unverified_block(&pki)),
    );
    let (ok, text) = common::validate_connect(&plain_server);
    assert!(
        !ok && text.contains("the server does not offer TLS"),
        "{text}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn postgresql_is_captured_over_mutual_tls_replication_included() -> Result<()> {
    let pki = Pki::new();
    let files = ["ca.pem", "server.pem", "server.key"].map(|f| pki.file(f));
    let server = tokio::task::spawn_blocking(move || {
        PrivatePostgres::start(
            &[
                "hostnossl all cdc_tls 127.0.0.1/32 reject",
                "hostssl all cdc_tls 127.0.0.1/32 scram-sha-256 clientcert=verify-ca",
            ],
            &files.iter().map(|f| f.as_path()).collect::<Vec<_>>(),
            &[
                "ssl=on",
                "ssl_ca_file=ca.pem",
                "ssl_cert_file=server.pem",
                "ssl_key_file=server.key",
            ],
        )
    })
    .await?;
    let client = server.connect().await?;
    client
        .batch_execute(
            "CREATE ROLE cdc_tls LOGIN REPLICATION PASSWORD 'tributary'; \
             CREATE TABLE t (id int PRIMARY KEY, name text); GRANT SELECT ON t TO cdc_tls; \
             CREATE PUBLICATION tls_pub FOR TABLE t; \
             INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 5) g;",
        )
        .await?;
    let server_name = unique("pgtls");
    let config = |tls: &str| {
        format!(
            "server_name: {server_name}\n\
             source: {{ kind: postgres, host: 127.0.0.1, port: {}, user: cdc_tls, password: tributary, \
               database: postgres, slot.name: tls_slot, publication.name: tls_pub, \
               publication.autocreate.mode: disabled, slot.drop.on.stop: true, heartbeat_s: 1{tls} }}\n\
             include: {{ tables: ['public\\.t'] }}\n\
             snapshot: {{ mode: initial, chunk_rows: 2 }}\n\
             kafka: {{ brokers: '{}' }}\n\
             commit_interval_ms: 200\n\
             metrics: {{ listen: '127.0.0.1:{}' }}\n",
            server.port,
            brokers(),
            free_port()
        )
    };

    // pg_hba.conf refuses the role without TLS.
    let (ok, text) = common::validate_connect(&config(""));
    assert!(!ok && text.contains("pg_hba.conf"), "{text}");
    let (ok, text) = common::validate_connect(&config(&format!(
        ", {}",
        tls_block(&pki, "other-ca.pem", "")
    )));
    assert!(
        !ok && text.contains("TLS to the source database failed") && text.contains("UnknownIssuer"),
        "{text}"
    );

    let (ok, text) = common::validate_connect(&config(&format!(
        ", {}",
        tls_block(&pki, "ca.pem", ", server_name: db.example.com")
    )));
    assert!(
        !ok && text.contains("not valid for name \"db.example.com\""),
        "{text}"
    );
    let (ok, text) = common::validate_connect(&config(&format!(", {}", unverified_block(&pki))));
    assert!(ok, "verify: none accepts any server certificate: {text}");
    // The stack's PostgreSQL offers no TLS: refused, saying so, never plain text.
    let plain_server = config(&format!(", {}", unverified_block(&pki))).replace(
        &format!("port: {}", server.port),
        &format!("port: {}", common::postgres::pg_port()),
    );
    let (ok, text) = common::validate_connect(&plain_server);
    assert!(
        !ok && text.contains("the server does not offer TLS"),
        "{text}"
    );
    // By a name the certificate carries (not the address connected to):
    // checked by both clients, the session's and the replication stream's.
    let capture = TributaryProcess::capture(&config(&format!(
        ", {}",
        tls_block(&pki, "ca.pem", ", server_name: localhost")
    )));
    // Streamed once the replication session runs (over TLS: pg_hba.conf
    // leaves it no other way).
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let streaming = client
            .query_opt(
                "SELECT s.ssl, s.client_dn FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
                 WHERE a.usename = 'cdc_tls' AND a.backend_type = 'walsender' \
                 AND a.query LIKE 'START_REPLICATION%'",
                &[],
            )
            .await?;
        if let Some(row) = streaming {
            assert!(
                row.get::<_, bool>(0),
                "the replication session is encrypted"
            );
            assert!(
                row.get::<_, Option<String>>(1).is_some(),
                "the replication session presented the client certificate"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no replication session; log:\n{}",
            capture.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    client
        .batch_execute(
            "INSERT INTO t VALUES (6, 'six'); UPDATE t SET name = 'ONE' WHERE id = 1; \
             DELETE FROM t WHERE id = 2;",
        )
        .await?;
    let expected: BTreeMap<i64, Value> = client
        .query("SELECT id::int8, name FROM t", &[])
        .await?
        .iter()
        .map(|r| {
            let id: i64 = r.get(0);
            (id, json!({ "id": id, "name": r.get::<_, String>(1) }))
        })
        .collect();
    let want = expected.clone();
    let topic = format!("{server_name}.public.t");
    let records = common::read_topic(&topic, WAIT, move |r| materialize(r) == want).await;
    assert_eq!(materialize(&records), expected, "log:\n{}", capture.log());
    let (clean, log) =
        tokio::task::spawn_blocking(move || capture.terminate(Duration::from_secs(30))).await?;
    assert!(clean, "{log}");
    Ok(())
}
