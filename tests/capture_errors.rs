//! Bad configuration and unusable sources fail with the documented, actionable errors.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;

fn validate(yaml: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tributary"))
        .arg("validate")
        .arg(write_config(yaml))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn validate_names_the_bad_field() {
    let good = CaptureSetup::new("shop", "0-1-1").yaml();
    let (ok, err) = validate(&good);
    assert!(ok, "the good config validates: {err}");
    let cases = [
        (
            good.replace("password: tributary", "password: tributary, pasword: x"),
            "unknown field `pasword`",
        ),
        (
            good.replace("partitions: 3", "partitions: three"),
            "topics.partitions",
        ),
        (
            good.replace("partitions: 3", "partitions: 0"),
            "topics.partitions",
        ),
        (
            good.replace(
                "include: { databases: ['shop'] }",
                "include: { databases: ['('] }",
            ),
            "include.databases[0]",
        ),
        (
            good.replace(
                "password: tributary",
                "password: ${TRIBUTARY_TEST_UNSET_SECRET}",
            ),
            "TRIBUTARY_TEST_UNSET_SECRET",
        ),
    ];
    for (yaml, expected) in cases {
        let (ok, err) = validate(&yaml);
        assert!(!ok, "must fail: {yaml}");
        assert!(
            err.contains(expected),
            "error should mention {expected:?}:\n{err}"
        );
    }
}

fn capture_fails_with(yaml: &str, expected: &str) {
    let (ok, log) = TributaryProcess::capture(yaml).wait_exit(Duration::from_secs(60));
    assert!(!ok, "capture must exit with an error; log:\n{log}");
    assert!(
        log.contains(expected),
        "error should mention {expected:?}; log:\n{log}"
    );
}

#[test]
fn a_server_without_binlog_is_refused() {
    // The machine's own MariaDB on 3306 runs without a binlog.
    let setup = CaptureSetup::new("test", "0-1-1");
    let yaml = setup.yaml_on(3306).replace(
        "user: tributary, password: tributary",
        "user: root, password: ''",
    );
    capture_fails_with(&yaml, "the binary log is disabled (log_bin=OFF)");
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_grants_are_named() {
    let mut conn = root_conn().await;
    let user = unique("nogrant");
    for (grants, missing) in [
        ("SELECT", "BINLOG MONITOR"),
        ("SELECT, BINLOG MONITOR", "REPLICATION SLAVE"),
    ] {
        conn.query_drop(format!("DROP USER IF EXISTS '{user}'@'127.0.0.1'"))
            .await
            .unwrap();
        conn.query_drop(format!(
            "CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw'"
        ))
        .await
        .unwrap();
        conn.query_drop(format!("GRANT {grants} ON *.* TO '{user}'@'127.0.0.1'"))
            .await
            .unwrap();
        let setup = CaptureSetup::new("test", &gtid_now(&mut conn).await);
        let yaml = setup.yaml().replace(
            "user: tributary, password: tributary",
            &format!("user: {user}, password: pw"),
        );
        let expected = format!("lacks the {missing} privilege");
        tokio::task::spawn_blocking(move || capture_fails_with(&yaml, &expected))
            .await
            .unwrap();
    }
    conn.query_drop(format!("DROP USER '{user}'@'127.0.0.1'"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn statement_binlog_format_is_refused() {
    let server = PrivateMariaDb::start(&["--binlog-format=STATEMENT"]);
    let setup = CaptureSetup::new("test", "0-1-1");
    let yaml = setup.yaml_on(server.port);
    tokio::task::spawn_blocking(move || {
        capture_fails_with(&yaml, "binlog_format is STATEMENT, capture needs ROW")
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_database_is_retried_until_it_appears() {
    let port = free_port();
    let setup = CaptureSetup::new("shop", "0-1-1");
    let yaml = setup.yaml_on(port).replace(
        "start: { gtid: '0-1-1' }",
        "start: latest, connect_timeout_s: 2",
    );
    let capture = TributaryProcess::capture(&yaml);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = capture.log();
    assert!(
        log.contains(&format!("database 127.0.0.1:{port} is unreachable")),
        "log:\n{log}"
    );
    assert!(log.contains("reconnecting"), "log:\n{log}");
    assert_eq!(http_get(setup.metrics_port, "/healthz").await.0, 200);
    assert_eq!(
        http_get(setup.metrics_port, "/readyz").await.0,
        503,
        "not ready while the database is away"
    );

    let server = tokio::task::spawn_blocking(move || PrivateMariaDb::start_on(port, &[]))
        .await
        .unwrap();
    let mut conn = server.root_conn().await;
    conn.query_drop("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    // Capture starts at `latest` once connected: keep writing until a row shows up.
    let topic = setup.topic("t");
    for id in 1..=60 {
        conn.query_drop(format!("INSERT INTO shop.t VALUES ({id})"))
            .await
            .unwrap();
        if !read_topic(&topic, Duration::from_millis(500), |r| !r.is_empty())
            .await
            .is_empty()
        {
            assert_eq!(http_get(setup.metrics_port, "/readyz").await.0, 200);
            return;
        }
    }
    panic!("capture never recovered; log:\n{}", capture.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_broker_is_waited_for() {
    let port = free_port();
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "nobroker").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let yaml = setup.yaml_on_broker(port);
    let capture = TributaryProcess::capture(&yaml);
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (1)"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        http_get(setup.metrics_port, "/healthz").await.0,
        200,
        "alive while the broker is away"
    );
    let _broker = PrivateBroker::start_on(port);
    let topic = setup.topic("t");
    let records = read_topic_from(
        &format!("127.0.0.1:{port}"),
        &topic,
        Duration::from_secs(90),
        |r| !r.is_empty(),
    )
    .await;
    assert_eq!(
        records.len(),
        1,
        "the change made while the broker was away arrives; log:\n{}",
        capture.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_position_inside_a_transaction_is_refused() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "midtrx").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (1)"))
        .await
        .unwrap();
    // Find the rows event of that insert: starting there skips its TABLE_MAP.
    let status: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .unwrap();
    let file: String = status.get(0).unwrap();
    let events: Vec<mysql_async::Row> = conn
        .query(format!("SHOW BINLOG EVENTS IN '{file}'"))
        .await
        .unwrap();
    let rows_pos: u64 = events
        .iter()
        .rev()
        .find(|e| e.get::<String, _>(2).unwrap().starts_with("Write_rows"))
        .map(|e| e.get(1).unwrap())
        .expect("a Write_rows event");
    let setup = CaptureSetup::new(&db, "0-1-1");
    let yaml = setup.yaml().replace(
        "start: { gtid: '0-1-1' }",
        &format!("start: {{ binlog: {{ file: '{file}', pos: {rows_pos} }} }}"),
    );
    let expected = format!("{file}:{rows_pos}: rows event for table id");
    tokio::task::spawn_blocking(move || capture_fails_with(&yaml, &expected))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partial_row_image_is_refused_naming_the_missing_column() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "minimage").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.t (id INT PRIMARY KEY, qty INT, note VARCHAR(20))"
    ))
    .await
    .unwrap();
    let start = gtid_now(&mut conn).await;
    conn.query_drop(format!("INSERT INTO `{db}`.t VALUES (1, 5, 'kept')"))
        .await
        .unwrap();
    // A session may log less than the server's FULL images: only the key before, `qty` after.
    conn.query_drop(format!(
        "SET SESSION binlog_row_image=MINIMAL; UPDATE `{db}`.t SET qty = 6 WHERE id = 1"
    ))
    .await
    .unwrap();
    let yaml = CaptureSetup::new(&db, &start).yaml();
    let expected = "column `qty` is not in the row image";
    tokio::task::spawn_blocking(move || capture_fails_with(&yaml, expected))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_purged_position_is_named_and_when_needed_resnapshots() {
    let server =
        tokio::task::spawn_blocking(|| PrivateMariaDb::start(&["--binlog-row-metadata=FULL"]))
            .await
            .unwrap();
    let mut conn = server.root_conn().await;
    conn.query_drop("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY); INSERT INTO shop.t VALUES (1), (2)")
        .await
        .unwrap();
    let setup = CaptureSetup::new("shop", "").with_snapshot(100);
    let yaml = setup.yaml_on(server.port);
    let topic = setup.topic("t");

    // Capture, stop gracefully (the position is stored), then purge the binlog past it.
    let capture = TributaryProcess::capture(&yaml);
    conn.query_drop("INSERT INTO shop.t VALUES (3)")
        .await
        .unwrap();
    assert_eq!(
        read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 3)
            .await
            .len(),
        3
    );
    let (ok, log) = tokio::task::spawn_blocking(move || capture.terminate(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(ok, "{log}");
    conn.query_drop("INSERT INTO shop.t VALUES (4); FLUSH BINARY LOGS")
        .await
        .unwrap();
    let status: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .unwrap();
    let newest: String = status.get(0).unwrap();
    // A binlog still in use is not purged: the stopped capture's dump thread may
    // linger until it notices the closed socket, and MariaDB keeps a file until its
    // binlog checkpoint is written. Retry until only the newest file is left.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let dumps: Vec<u64> = conn
            .query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump'")
            .await
            .unwrap();
        for id in dumps {
            conn.query_drop(format!("KILL {id}")).await.ok();
        }
        conn.query_drop(format!("PURGE BINARY LOGS TO '{newest}'"))
            .await
            .unwrap();
        let logs: Vec<mysql_async::Row> = conn.query("SHOW BINARY LOGS").await.unwrap();
        if logs.len() == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "older binlogs were never purged"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let never = yaml.replace("mode: initial", "mode: never");
    tokio::task::spawn_blocking(move || {
        capture_fails_with(&never, "is no longer available on the server")
    })
    .await
    .unwrap();

    let _capture = TributaryProcess::capture(&yaml.replace("mode: initial", "mode: when_needed"));
    conn.query_drop("INSERT INTO shop.t VALUES (5)")
        .await
        .unwrap();
    let records = read_topic(&topic, Duration::from_secs(60), |r| {
        let ids: std::collections::BTreeSet<i64> =
            r.iter().filter_map(|r| r.key["id"].as_i64()).collect();
        ids.len() == 5
    })
    .await;
    let ids: std::collections::BTreeSet<i64> = records
        .iter()
        .filter_map(|r| r.key["id"].as_i64())
        .collect();
    assert_eq!(
        ids,
        (1..=5).collect(),
        "the new snapshot recovers row 4, lost with the purged binlog, and streaming goes on"
    );
    let row4 = records
        .iter()
        .find(|r| r.key["id"] == 4)
        .unwrap()
        .value
        .as_ref()
        .unwrap();
    assert_eq!(row4["op"], "r", "row 4 comes from the new snapshot");
}

#[tokio::test(flavor = "multi_thread")]
async fn capture_resumes_by_itself_after_the_database_crashes() {
    let mut server = tokio::task::spawn_blocking(|| PrivateMariaDb::start(&[]))
        .await
        .unwrap();
    let mut conn = server.root_conn().await;
    conn.query_drop("CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    let setup = CaptureSetup::new("shop", "").with_snapshot(100);
    let yaml = setup.yaml_on(server.port);
    let capture = TributaryProcess::capture(&yaml);
    let topic = setup.topic("t");
    conn.query_drop("INSERT INTO shop.t VALUES (1)")
        .await
        .unwrap();
    assert_eq!(
        read_topic(&topic, Duration::from_secs(60), |r| !r.is_empty())
            .await
            .len(),
        1
    );
    drop(conn);

    let server = tokio::task::spawn_blocking(move || {
        server.crash_and_restart(Duration::from_secs(2));
        server
    })
    .await
    .unwrap();
    let mut conn = server.root_conn().await;
    conn.query_drop("INSERT INTO shop.t VALUES (2), (3)")
        .await
        .unwrap();
    let records = read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 3).await;
    let ids: std::collections::BTreeSet<i64> = records
        .iter()
        .filter_map(|r| r.key["id"].as_i64())
        .collect();
    assert_eq!(ids, [1, 2, 3].into(), "log:\n{}", capture.log());
    assert!(
        capture.log().contains("reconnecting"),
        "the loss was noticed and retried"
    );
}

/// The broker goes away mid-stream and comes back. The test broker keeps its
/// data in memory, so the restarted broker starts empty: no topics, no stored
/// position, and no memory of the idempotent producer, whose queued batches it
/// refuses (`UNKNOWN_PRODUCER_ID`) until they time out (`message.timeout.ms`,
/// shortened here). Capture then starts over with a new producer, from the
/// stored position (here: its configured start, the broker lost the position).
/// A broker with disks keeps all three and the producer simply reconnects. What
/// this checks is capture's side: it keeps running, and every change made during
/// and after the outage arrives.
#[tokio::test(flavor = "multi_thread")]
async fn capture_resumes_by_itself_after_the_broker_restarts() {
    let port = free_port();
    let broker_url = format!("127.0.0.1:{port}");
    let broker = PrivateBroker::start_on(port);
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "brokerrestart").await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let yaml = setup.yaml().replace(
        &format!("brokers: '{}'", brokers()),
        &format!("brokers: '{broker_url}', producer: {{ message.timeout.ms: '10000' }}"),
    );
    assert!(yaml.contains("message.timeout.ms"));
    let capture = TributaryProcess::capture(&yaml);
    let topic = setup.topic("t");
    let insert = |ids: std::ops::RangeInclusive<i64>| {
        let values: Vec<String> = ids.map(|i| format!("({i})")).collect();
        format!("INSERT INTO `{db}`.t VALUES {}", values.join(", "))
    };
    conn.query_drop(insert(1..=10)).await.unwrap();
    let before = read_topic_from(&broker_url, &topic, Duration::from_secs(60), |r| {
        r.len() >= 10
    })
    .await;
    assert_eq!(before.len(), 10, "log:\n{}", capture.log());

    drop(broker);
    conn.query_drop(insert(11..=20)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        http_get(setup.metrics_port, "/healthz").await.0,
        200,
        "capture stays up while the broker is away"
    );
    let _broker = PrivateBroker::start_on(port);
    conn.query_drop(insert(21..=30)).await.unwrap();
    let wanted: std::collections::BTreeSet<i64> = (11..=30).collect();
    let all_arrived = {
        let wanted = wanted.clone();
        move |r: &[Record]| {
            wanted.is_subset(&r.iter().filter_map(|r| r.key["id"].as_i64()).collect())
        }
    };
    let records = read_topic_from(&broker_url, &topic, Duration::from_secs(120), all_arrived).await;
    let ids: std::collections::BTreeSet<i64> = records
        .iter()
        .filter_map(|r| r.key["id"].as_i64())
        .collect();
    assert!(
        wanted.is_subset(&ids),
        "every change made during and after the outage arrives; got {ids:?}; log:\n{}",
        capture.log()
    );
}
