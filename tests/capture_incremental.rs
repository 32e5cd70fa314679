//! On-demand (incremental) snapshots while streaming: requested with
//! `tributary snapshot`, merged with concurrent changes, resumed after a crash.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;
use serde_json::{Value as Json, json};

/// A database with table `t (id, v)` holding `rows` rows, and a capture of it that
/// streams from now on (the rows are not in the topic) and takes signals.
async fn setup(prefix: &str, rows: i64, chunk_rows: usize) -> (String, CaptureSetup, String) {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, prefix).await;
    conn.query_drop(format!("CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)"))
        .await
        .unwrap();
    for start in (1..=rows).step_by(5000) {
        let values: Vec<String> = (start..(start + 5000).min(rows + 1))
            .map(|id| format!("({id}, 0)"))
            .collect();
        conn.query_drop(format!("INSERT INTO `{db}`.t VALUES {}", values.join(",")))
            .await
            .unwrap();
    }
    // What a DBA does once: the signal table, and INSERT on it for the capture user.
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.signals (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT); \
         GRANT INSERT ON `{db}`.signals TO 'tributary'@'127.0.0.1'"
    ))
    .await
    .unwrap();
    let setup = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let yaml = setup.yaml().replace(
        "snapshot: { mode: never }",
        &format!(
            "snapshot: {{ mode: never, signal_table: '{db}.signals', incremental_chunk_rows: {chunk_rows} }}"
        ),
    );
    assert_ne!(yaml, setup.yaml(), "the snapshot settings were replaced");
    (db, setup, yaml)
}

/// Runs `tributary snapshot` for `db.t`; returns what it printed.
fn request_snapshot(config: &Path, db: &str) -> String {
    request_snapshots(config, &[&format!("{db}.t")])
}

/// Runs `tributary snapshot` for `tables`; returns what it printed.
fn request_snapshots(config: &Path, tables: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["snapshot", "--config"])
        .arg(config)
        .args(tables)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tributary snapshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

async fn table_state(db: &str) -> BTreeMap<i64, Json> {
    let mut conn = root_conn().await;
    let rows: Vec<(i64, i64)> = conn
        .query(format!("SELECT id, v FROM `{db}`.t"))
        .await
        .unwrap();
    rows.into_iter()
        .map(|(id, v)| (id, json!({ "id": id, "v": v })))
        .collect()
}

/// Reads the topic until it replays to `expected`; returns its records.
async fn read_until_equal(
    topic: &str,
    expected: &BTreeMap<i64, Json>,
    log: impl Fn() -> String,
) -> Vec<Record> {
    let target = expected.clone();
    let records = read_topic(topic, Duration::from_secs(120), move |r| {
        replay_map(r) == target
    })
    .await;
    let state = replay_map(&records);
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !state.contains_key(k))
        .take(10)
        .collect();
    let extra: Vec<_> = state
        .keys()
        .filter(|k| !expected.contains_key(k))
        .take(10)
        .collect();
    let stale: Vec<_> = expected
        .iter()
        .filter(|(k, v)| state.get(k).is_some_and(|s| s != *v))
        .take(10)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && stale.is_empty(),
        "topic differs from the table: missing {missing:?}, extra {extra:?}, stale {stale:?}; log:\n{}",
        log()
    );
    records
}

fn incremental_reads(records: &[Record]) -> usize {
    events(records)
        .iter()
        .filter(|v| v["op"] == "r")
        .inspect(|v| assert_eq!(v["source"]["snapshot"], "incremental", "{v}"))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_on_demand_snapshot_under_concurrent_writes_converges_to_the_table() {
    const ROWS: i64 = 5_000;
    let (db, setup, yaml) = setup("incr", ROWS, 100).await;
    let config = write_config(&yaml);
    let capture = TributaryProcess::start(&["capture"], &config, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_random_writer(
        db.clone(),
        vec!["t".to_owned()],
        ROWS,
        0x9e37_79b9_7f4a_7c15,
        Duration::from_millis(2),
        stop.clone(),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    let printed = request_snapshot(&config, &db);
    assert!(printed.contains(&format!("{db}.t")), "{printed}");
    capture
        .wait_for_log("table snapshot done", Duration::from_secs(120))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    let expected = table_state(&db).await;
    let records = read_until_equal(&setup.topic("t"), &expected, || capture.log()).await;
    let reads = incremental_reads(&records);
    // Rows the writer never touched reach the topic only through the snapshot.
    assert!(
        reads > (ROWS as usize) / 2 && reads <= ROWS as usize + 1000,
        "{reads} snapshot reads of {ROWS} rows"
    );
    let metrics = http_get(setup.metrics_port, "/metrics").await.1;
    let read = metric_sum(&metrics, "tributary_capture_snapshot_rows_done");
    assert!(
        read >= reads as f64 && read < 1.5 * ROWS as f64,
        "progress exported: {read} rows read, {reads} sent"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_on_demand_snapshot_resumes_from_its_last_chunk() {
    const ROWS: i64 = 60_000;
    let (db, setup, yaml) = setup("incrkill", ROWS, 200).await;
    // Positions (with the snapshot's last key) stored every 20 ms: what a crash
    // re-sends is what was sent since, far less than starting over would.
    let config = write_config(&yaml.replace("commit_interval_ms: 200", "commit_interval_ms: 20"));
    let mut capture = TributaryProcess::start(&["capture"], &config, &[]);
    capture
        .wait_for_log("binlog stream opened", Duration::from_secs(60))
        .await;
    request_snapshot(&config, &db);

    // SIGKILL once a third of the table has been sent.
    let deadline = Instant::now() + Duration::from_secs(120);
    let done_at_kill = loop {
        let metrics = http_get(setup.metrics_port, "/metrics").await.1;
        let done = metric_sum(&metrics, "tributary_capture_snapshot_rows_done");
        if done >= (ROWS / 3) as f64 {
            capture.kill();
            break done;
        }
        assert!(Instant::now() < deadline, "log:\n{}", capture.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        done_at_kill < ROWS as f64,
        "the snapshot finished before the kill ({done_at_kill} rows): make the table larger"
    );
    let capture = TributaryProcess::start(&["capture"], &config, &[]);
    capture
        .wait_for_log("resuming the on-demand snapshot", Duration::from_secs(60))
        .await;
    capture
        .wait_for_log("table snapshot done", Duration::from_secs(120))
        .await;
    let resumed_after = resumed_after_id(&capture.log());

    let expected = table_state(&db).await;
    assert_eq!(expected.len(), ROWS as usize);
    let records = read_until_equal(&setup.topic("t"), &expected, || capture.log()).await;
    // The rows up to the stored position were sent once; only those sent after
    // it (before the kill) were sent again. Starting over would have sent every
    // row read before the kill twice.
    let mut reads: BTreeMap<i64, usize> = BTreeMap::new();
    for event in events(&records).iter().filter(|v| v["op"] == "r") {
        *reads
            .entry(event["after"]["id"].as_i64().unwrap())
            .or_default() += 1;
    }
    let twice: Vec<i64> = reads
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect();
    assert!(
        twice.iter().all(|id| *id > resumed_after),
        "rows at or before the stored position {resumed_after} were sent again: {:?}",
        twice
            .iter()
            .filter(|id| **id <= resumed_after)
            .take(10)
            .collect::<Vec<_>>()
    );
    assert!(
        resumed_after > 0 && (twice.len() as f64) < done_at_kill,
        "resumed after id {resumed_after}, {} rows sent twice; the kill came after {done_at_kill}",
        twice.len()
    );
}

/// The key after which the log says the on-demand snapshot resumed (`after=id=N`).
fn resumed_after_id(log: &str) -> i64 {
    let line = log
        .lines()
        .find(|l| l.contains("resuming the on-demand snapshot"))
        .expect("the resume is logged");
    let after = line
        .split_once("after=id=")
        .unwrap_or_else(|| panic!("no stored key in {line:?}"))
        .1;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("a key in {line:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn tables_that_cannot_be_snapshotted_are_skipped_and_the_rest_are_read() {
    const ROWS: i64 = 300;
    let (db, setup, yaml) = setup("incrskip", ROWS, 64).await;
    let mut conn = root_conn().await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.nopk (v INT); INSERT INTO `{db}`.nopk VALUES (1)"
    ))
    .await
    .unwrap();
    let config = write_config(&yaml);
    let capture = TributaryProcess::start(&["capture"], &config, &[]);
    capture
        .wait_for_log("binlog stream opened", Duration::from_secs(60))
        .await;
    let (missing, nopk, t) = (
        format!("{db}.missing"),
        format!("{db}.nopk"),
        format!("{db}.t"),
    );
    // A malformed signal row is logged and skipped; capture goes on.
    conn.query_drop(format!(
        "INSERT INTO `{db}`.signals VALUES ('bad', 'execute-snapshot', '{{not json')"
    ))
    .await
    .unwrap();
    request_snapshots(&config, &[&missing, &nopk, &t]);
    capture
        .wait_for_log("table snapshot done", Duration::from_secs(60))
        .await;
    let log = capture.log();
    assert!(
        log.contains("ignoring a signal row") && log.contains("`data` is not JSON"),
        "{log}"
    );
    assert!(log.contains("does not exist; skipped"), "{log}");
    assert!(
        log.contains("without a primary key cannot be snapshotted"),
        "{log}"
    );
    let expected = table_state(&db).await;
    let records = read_until_equal(&setup.topic("t"), &expected, || capture.log()).await;
    assert_eq!(incremental_reads(&records), ROWS as usize);

    // A table outside the include patterns is refused by the command itself.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["snapshot", "--config"])
        .arg(&config)
        .arg("mysql.user")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"mysql.user\" is not a `database.table` this capture"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schema_change_during_an_on_demand_snapshot_is_merged() {
    const ROWS: i64 = 5_000;
    let (db, setup, yaml) = setup("incrddl", ROWS, 50).await;
    let config = write_config(&yaml);
    let capture = TributaryProcess::start(&["capture"], &config, &[]);
    capture
        .wait_for_log("binlog stream opened", Duration::from_secs(60))
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_random_writer(
        db.clone(),
        vec!["t".to_owned()],
        ROWS,
        0x5eed_0000_0000_0dd1,
        Duration::from_millis(2),
        stop.clone(),
    );
    // Hold the table while the snapshot starts, so that its first chunk waits
    // for the lock and the ALTER lands in the middle of it.
    let mut dba = root_conn().await;
    dba.query_drop(format!("LOCK TABLES `{db}`.t WRITE"))
        .await
        .unwrap();
    request_snapshot(&config, &db);
    capture
        .wait_for_log(
            "on-demand snapshot of the table starts",
            Duration::from_secs(60),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    dba.query_drop(format!(
        "ALTER TABLE `{db}`.t ADD COLUMN note VARCHAR(10) NOT NULL DEFAULT 'x'; UNLOCK TABLES"
    ))
    .await
    .unwrap();
    capture
        .wait_for_log("table snapshot done", Duration::from_secs(120))
        .await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    // Rows last read or changed before the ALTER keep their old shape (no row
    // events come with it): compare `id` and `v`, which every image has.
    let expected = table_state(&db).await;
    let target = expected.clone();
    let project = |state: BTreeMap<i64, Json>| -> BTreeMap<i64, Json> {
        state
            .into_iter()
            .map(|(id, row)| (id, json!({ "id": id, "v": row["v"] })))
            .collect()
    };
    let records = read_topic(&setup.topic("t"), Duration::from_secs(120), move |r| {
        project(replay_map(r)) == target
    })
    .await;
    let state: BTreeMap<i64, Json> = replay_map(&records)
        .into_iter()
        .map(|(id, row)| (id, json!({ "id": id, "v": row["v"] })))
        .collect();
    assert_eq!(state, expected, "log:\n{}", capture.log());
    assert!(
        capture.log().contains("read again"),
        "the chunk in hand at the ALTER was dropped"
    );
    // Chunks read after the ALTER carry the new column.
    let reads = events(&records);
    let new_shape = reads
        .iter()
        .filter(|v| v["op"] == "r" && v["after"]["note"] == "x")
        .count();
    assert!(
        new_shape > 0,
        "no snapshot row with the new column; log:\n{}",
        capture.log()
    );
}

/// Rows of 2 MiB streamed from the binlog and read again by an on-demand
/// snapshot: capture's resident memory stays within its byte bounds (the
/// producer's queue, `max_pending_mb`; a chunk, `snapshot.chunk_max_mb`) plus
/// a fixed allowance, whatever the table's size, and every row arrives whole.
/// Streaming rows this large costs 35–50 MiB whatever the bounds (the copies
/// of a row on its way, kept a while by the allocator's per-thread caches);
/// the snapshot adds 20–30 MiB with 4 MiB bounds. With the defaults (256 and
/// 64 MiB; 1024 rows a chunk) it adds 140 MiB: the whole table in one chunk.
#[tokio::test(flavor = "multi_thread")]
async fn large_rows_are_captured_within_the_byte_bounds() {
    const ROW_BYTES: usize = 2 << 20;
    const ROWS: i64 = 120;
    const BOUND_MB: u64 = 4;
    /// What streaming 2 MiB rows costs whatever the bounds.
    const FIXED_MB: u64 = 64;
    let (db, setup, yaml) = setup("bigrows", 0, 1024).await;
    let mut conn = root_conn().await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.big (id INT PRIMARY KEY, b LONGBLOB NOT NULL)"
    ))
    .await
    .unwrap();
    let yaml = yaml
        .replace(
            "incremental_chunk_rows: 1024",
            &format!("incremental_chunk_rows: 1024, chunk_max_mb: {BOUND_MB}"),
        )
        .replace(
            &format!("brokers: '{}'", brokers()),
            &format!(
                "brokers: '{}', producer: {{ message.max.bytes: '16777216' }}",
                brokers()
            ),
        );
    let yaml = format!("{yaml}max_pending_mb: {BOUND_MB}\n");
    let config = write_config(&yaml);
    let capture = TributaryProcess::start_for_memory(&["capture"], &config);
    capture
        .wait_for_log("binlog stream opened", Duration::from_secs(30))
        .await;

    // The binlog holds all the rows when capture reads again.
    let insert = async {
        for id in 1..=ROWS {
            conn.query_drop(format!(
                "INSERT INTO `{db}`.big VALUES ({id}, REPEAT(CHAR(65 + {id} % 26), {ROW_BYTES}))"
            ))
            .await
            .unwrap();
        }
    };
    let idle_kib = capture.fed_a_backlog(insert).await;
    let port = setup.metrics_port;
    wait_for_events(&capture, port, ROWS).await;
    request_snapshots(&config, &[&format!("{db}.big")]);
    wait_for_events(&capture, port, 2 * ROWS).await;
    capture
        .wait_for_log("table snapshot done", Duration::from_secs(60))
        .await;
    let grown_mib = capture.peak_growth_mib(idle_kib);
    let input_mib = (ROWS as u64 * ROW_BYTES as u64) >> 20;
    eprintln!("grew {grown_mib} MiB for {input_mib} MiB of rows, streamed and snapshotted");

    // Every row, streamed and read again, as the database holds it.
    let mut conn = root_conn().await;
    let expected: BTreeMap<i64, (usize, String)> = conn
        .query::<(i64, usize, String), _>(format!(
            "SELECT id, LENGTH(b), HEX(RIGHT(b, 16)) FROM `{db}`.big"
        ))
        .await
        .unwrap()
        .into_iter()
        .map(|(id, length, tail)| (id, (length, tail)))
        .collect();
    assert_eq!(expected.len(), ROWS as usize);
    let records = read_topic(&setup.topic("big"), Duration::from_secs(120), |r| {
        r.len() >= 2 * ROWS as usize
    })
    .await;
    for op in ["c", "r"] {
        let seen: BTreeMap<i64, (usize, String)> = events(&records)
            .into_iter()
            .filter(|v| v["op"] == op)
            .map(|v| {
                let blob = base64_decode(v["after"]["b"].as_str().unwrap());
                let tail = hex(&blob[blob.len().saturating_sub(16)..]);
                (v["after"]["id"].as_i64().unwrap(), (blob.len(), tail))
            })
            .collect();
        assert_eq!(seen, expected, "`{op}` events differ from the table");
    }
    assert!(
        grown_mib <= FIXED_MB + 8 * BOUND_MB,
        "resident memory grew {grown_mib} MiB with max_pending_mb and chunk_max_mb {BOUND_MB} \
         ({input_mib} MiB of rows); log:\n{}",
        capture.log()
    );
    let (ok, log) = capture.terminate(Duration::from_secs(30));
    assert!(ok, "{log}");
}

/// Waits until capture has written `count` events (its metrics on `port`).
async fn wait_for_events(capture: &TributaryProcess, port: u16, count: i64) {
    let written = || async {
        let (_, body) = try_http_get(port, "/metrics").await?;
        Some(metric_sum(&body, "tributary_capture_events_total") as i64)
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while written().await < Some(count) {
        assert!(
            Instant::now() < deadline,
            "fewer than {count} events; log:\n{}",
            capture.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
