//! Local tables against the real stack: state equals the source database, restart
//! without replay, SIGKILL during apply, partition hand-over, global mode.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;
use prometheus_client::registry::Registry;
use serde_json::{Value as Json, json};
use tokio_util::sync::CancellationToken;
use tributary_table_api::{AsOf, KeyRange, LookupError, Table};
use tributary_tables::materializer::Materializer;
use tributary_tables::store::{Keyspace, ScanBounds, Store};
use tributary_tables::{TablesConfig, TablesMetrics};

/// Partitions of the `split` table an instance holds, and whether all are ready.
async fn held(instance: &Instance) -> (Vec<i32>, bool) {
    let d = instance.table("split").describe().await;
    (
        d.partitions.iter().map(|p| p.partition).collect(),
        d.partitions.iter().all(|p| p.ready),
    )
}

/// A running in-process materializer and its metrics.
struct Instance {
    materializer: Materializer,
    registry: Registry,
    shutdown: CancellationToken,
}

impl Instance {
    async fn start(config_yaml: &str) -> Self {
        let config = TablesConfig::parse(config_yaml).unwrap();
        let mut registry = Registry::default();
        let metrics = TablesMetrics::register(&mut registry);
        let shutdown = CancellationToken::new();
        let materializer = Materializer::start(&config, metrics, shutdown.clone())
            .await
            .unwrap();
        Instance {
            materializer,
            registry,
            shutdown,
        }
    }

    fn table(&self, name: &str) -> Arc<tributary_tables::LocalTable> {
        self.materializer
            .tables()
            .iter()
            .find(|t| t.name() == name)
            .unwrap()
            .clone()
    }

    fn metric(&self, name: &str) -> f64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        metric_sum(&text, name)
    }

    async fn wait_serving(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.materializer.progress().serving() {
            assert!(Instant::now() < deadline, "not serving within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until at least `n` records have been applied.
    async fn wait_applied(&self, n: f64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.metric("tributary_table_applied_records_total") < n {
            assert!(
                Instant::now() < deadline,
                "fewer than {n} records applied within a minute"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.materializer.join().await.unwrap();
    }
}

fn tables_yaml(data_dir: &std::path::Path, group: &str, tables: &[(&str, &str, &str)]) -> String {
    let tables: Vec<String> = tables
        .iter()
        .map(|(name, topic, mode)| {
            format!("  - {{ name: {name}, topic: '{topic}', mode: {mode} }}")
        })
        .collect();
    format!(
        "data_dir: '{}'\ngroup_id: '{group}'\nkafka: {{ brokers: '{}' }}\nbatch_max_records: 500\ntables:\n{}\n",
        data_dir.display(),
        brokers(),
        tables.join("\n")
    )
}

/// The table's rows as the database has them, as Debezium JSON.
async fn source_rows(conn: &mut mysql_async::Conn, db: &str) -> BTreeMap<i64, Json> {
    let rows: Vec<(i64, String, i64, Option<String>)> = conn
        .query(format!(
            "SELECT id, name, qty, CAST(price AS CHAR) FROM `{db}`.items"
        ))
        .await
        .unwrap();
    rows.into_iter()
        .map(|(id, name, qty, price)| {
            (
                id,
                json!({ "id": id, "name": name, "qty": qty, "price": price }),
            )
        })
        .collect()
}

/// Compares every source row with the table, and the table's row count with the source's.
async fn differences(
    table: &tributary_tables::LocalTable,
    expected: &BTreeMap<i64, Json>,
) -> Vec<String> {
    // A join's lookup decodes only the columns it selects.
    let columns = ["price", "name", "absent"].map(String::from);
    let mut diffs = Vec::new();
    for (id, row) in expected {
        let key = json!({ "id": id });
        match table.get(&key).await {
            Ok(Some(got)) if &got == row => {}
            other => diffs.push(format!("id {id}: expected {row}, got {other:?}")),
        }
        let selected: Vec<Option<&Json>> = columns.iter().map(|c| row.get(c)).collect();
        match table.get_columns(&key, &columns).await {
            Ok(Some(got))
                if columns
                    .iter()
                    .enumerate()
                    .all(|(i, c)| got.get(i, c).as_deref() == selected[i]) => {}
            other => diffs.push(format!(
                "id {id}: expected columns {selected:?}, got {other:?}"
            )),
        }
        match table.get_shared(&key).await {
            Ok(Some(got)) if *got == *row => {}
            other => diffs.push(format!("id {id}: expected {row} shared, got {other:?}")),
        }
    }
    let all = table.scan(&KeyRange::all(), 1_000_000).await.unwrap();
    if all.len() != expected.len() {
        diffs.push(format!(
            "table has {} rows, source {}",
            all.len(),
            expected.len()
        ));
    }
    diffs
}

/// Waits (a minute at most) until the table holds exactly the source's rows.
async fn until_equal(table: &tributary_tables::LocalTable, expected: &BTreeMap<i64, Json>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let diffs = differences(table, expected).await;
        if diffs.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "table never matched the source: {:?}",
            &diffs[..diffs.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn materialized_state_equals_the_source_and_restarts_without_replay() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "tbl").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT)"
    ))
    .await
    .unwrap();
    // Existing rows, read by capture's snapshot…
    let values: Vec<String> = (1..=300)
        .map(|i| format!("({i}, 'item {i}', {i})"))
        .collect();
    conn.query_drop(format!(
        "INSERT INTO `{db}`.items VALUES {}",
        values.join(",")
    ))
    .await
    .unwrap();
    let setup = CaptureSetup::new(&db, "").with_snapshot(100);
    let _capture = TributaryProcess::capture(&setup.yaml());
    // …then mixed changes streamed from the binlog: updates, deletes, key changes, a schema change.
    conn.query_drop(format!(
        "UPDATE `{db}`.items SET qty = qty * 10 WHERE id % 3 = 0"
    ))
    .await
    .unwrap();
    conn.query_drop(format!("DELETE FROM `{db}`.items WHERE id % 7 = 0"))
        .await
        .unwrap();
    conn.query_drop(format!(
        "UPDATE `{db}`.items SET id = id + 1000 WHERE id <= 5"
    ))
    .await
    .unwrap();
    conn.query_drop(format!(
        "ALTER TABLE `{db}`.items ADD COLUMN price DECIMAL(8,2) NULL"
    ))
    .await
    .unwrap();
    conn.query_drop(format!("UPDATE `{db}`.items SET price = id / 4"))
        .await
        .unwrap();
    conn.query_drop(format!(
        "INSERT INTO `{db}`.items VALUES (5000, 'late', 1, 9.99)"
    ))
    .await
    .unwrap();
    let expected = source_rows(&mut conn, &db).await;

    let data = tempfile::tempdir().unwrap();
    // With a row cache: after the restart rows come from table files, where it
    // answers, and a later change must still win over what it holds.
    let yaml = tables_yaml(
        data.path(),
        &unique("grp"),
        &[("items", &setup.topic("items"), "partitioned")],
    ) + "rocksdb: { row_cache_mb: 16 }\n";
    let instance = Instance::start(&yaml).await;
    instance.wait_serving(Duration::from_secs(60)).await;
    let table = instance.table("items");
    until_equal(&table, &expected).await;
    assert_eq!(
        table.get(&json!({ "id": 7 })).await.unwrap(),
        None,
        "deleted rows are gone"
    );
    assert_eq!(
        table.get(&json!({ "id": 1 })).await.unwrap(),
        None,
        "a changed key leaves nothing behind"
    );
    assert_eq!(
        table.get(&json!(1001)).await.unwrap().unwrap()["price"],
        "250.25",
        "bare single-column keys work"
    );
    assert!(instance.metric("tributary_table_applied_records_total") > 0.0);
    drop(table);
    instance.stop().await;

    // Restart on the same disk: nothing is re-read, and new changes still apply.
    let instance = Instance::start(&yaml).await;
    instance.wait_serving(Duration::from_secs(60)).await;
    assert_eq!(
        instance.metric("tributary_table_applied_records_total"),
        0.0,
        "a restart replays nothing"
    );
    let table = instance.table("items");
    // Read (and row-cached, and kept decoded for joins) before the update.
    let key = json!({ "id": 5000 });
    let qty = ["qty".to_owned()];
    let joined = |table: Arc<tributary_tables::LocalTable>| {
        let (key, qty) = (key.clone(), qty.clone());
        async move {
            let whole = table.get_shared(&key).await.unwrap().unwrap();
            let selected = table.get_columns(&key, &qty).await.unwrap().unwrap();
            (
                whole["qty"].clone(),
                selected.get(0, "qty").map(Cow::into_owned),
            )
        }
    };
    assert_eq!(table.get(&key).await.unwrap().unwrap()["qty"], 1);
    assert_eq!(joined(table.clone()).await, (json!(1), Some(json!(1))));
    conn.query_drop(format!("UPDATE `{db}`.items SET qty = -1 WHERE id = 5000"))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while table.get(&key).await.unwrap().unwrap()["qty"] != -1 {
        assert!(
            Instant::now() < deadline,
            "the update after the restart never arrived"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        joined(table.clone()).await,
        (json!(-1), Some(json!(-1))),
        "a join's lookup after the commit never sees the replaced row"
    );
    assert!(instance.metric("tributary_table_join_row_cache_total") >= 2.0);
    assert_eq!(
        instance.metric("tributary_table_applied_records_total"),
        1.0,
        "only the new change was applied"
    );
    let described = table.describe().await;
    assert_eq!(described.key_columns, ["id"]);
    assert_eq!(described.partitions.len(), 3);
    assert!(described.partitions.iter().all(|p| p.ready));
    drop(table);
    instance.stop().await;
}

/// Topics written with Debezium's defaults (`compat: debezium`: keys and
/// values `{"schema", "payload"}`, the key bytes a Java producer with the
/// JsonConverter hashes) materialize into the same rows; a partitioned table
/// finds each key's partition from its values (`key_format: json_with_schema`).
#[tokio::test(flavor = "multi_thread")]
async fn a_topic_with_debeziums_schemas_materializes_the_same_rows() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "tblschema").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT, price DECIMAL(8,2))"
    ))
    .await
    .unwrap();
    let values: Vec<String> = (1..=50)
        .map(|i| format!("({i}, 'item {i}', {i}, {i}.25)"))
        .collect();
    conn.query_drop(format!(
        "INSERT INTO `{db}`.items VALUES {}",
        values.join(",")
    ))
    .await
    .unwrap();
    let mut setup = CaptureSetup::new(&db, "").with_snapshot(20);
    setup.extra = "compat: debezium\nvalues: { decimal.handling.mode: string }\n".into();
    let _capture = TributaryProcess::capture(&setup.yaml());
    conn.query_drop(format!(
        "UPDATE `{db}`.items SET qty = -qty WHERE id % 2 = 0"
    ))
    .await
    .unwrap();
    conn.query_drop(format!("DELETE FROM `{db}`.items WHERE id % 5 = 0"))
        .await
        .unwrap();
    let expected = source_rows(&mut conn, &db).await;
    let topic = setup.topic("items");
    let records = read_raw(&topic, Duration::from_secs(60), |r| !r.is_empty()).await;
    let key: Json = serde_json::from_slice(records[0].key.as_deref().unwrap()).unwrap();
    assert_eq!(
        key["schema"]["name"],
        format!("{}.{db}.items.Key", setup.server_name),
        "{key}"
    );

    let data = tempfile::tempdir().unwrap();
    let yaml = tables_yaml(
        data.path(),
        &unique("grp"),
        &[("items", &topic, "partitioned, key_format: json_with_schema")],
    );
    let instance = Instance::start(&yaml).await;
    instance.wait_serving(Duration::from_secs(60)).await;
    let table = instance.table("items");
    until_equal(&table, &expected).await;
    drop(table);
    instance.stop().await;
}

/// The mode of a versioned `kv`, as [`tables_yaml`] splices it.
const VERSIONED_KV: &str = "partitioned, versioned: { history: 30d }";

/// A global table `kv` on a 3-partition topic, run by `tributary tables run`
/// processes (to be SIGKILLed) on a data directory and HTTP port of its own.
struct KvTable {
    data: tempfile::TempDir,
    port: u16,
    config: std::path::PathBuf,
}

impl KvTable {
    fn on(topic: &str) -> Self {
        Self::with_mode(topic, "global")
    }

    /// A partitioned table `kv` that keeps its history (the mode is spliced
    /// into the table's flow mapping).
    fn versioned_on(topic: &str) -> Self {
        Self::with_mode(topic, VERSIONED_KV)
    }

    fn with_mode(topic: &str, mode: &str) -> Self {
        let data = tempfile::tempdir().unwrap();
        let port = free_port();
        let yaml = format!(
            "{}metrics: {{ listen: '127.0.0.1:{port}' }}\n",
            tables_yaml(data.path(), &unique("grp"), &[("kv", topic, mode)])
        );
        let config = write_config(&yaml);
        KvTable { data, port, config }
    }

    fn start(&self) -> std::process::Child {
        std::process::Command::new(env!("CARGO_BIN_EXE_tributary"))
            .args(["tables", "run", "--config"])
            .arg(&self.config)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_apply_reconsumes_at_most_one_batch() {
    const KEYS: i64 = 50_000;
    const BATCH: f64 = 500.0;
    let topic = unique("upserts");
    create_topic(&topic, 3).await;
    // Every key twice: the second version must win.
    let records: Vec<(Json, Option<Vec<u8>>)> = (0..2)
        .flat_map(|version| {
            (0..KEYS).map(move |id| {
                (
                    json!({ "id": id }),
                    Some(format!(r#"{{"id":{id},"v":{version}}}"#).into_bytes()),
                )
            })
        })
        .collect();
    let total = records.len() as f64;
    produce(&topic, 3, &records).await;

    let kv = KvTable::on(&topic);
    let (data, port, run) = (&kv.data, kv.port, || kv.start());
    let applied = |port| async move {
        let (_, body) = try_http_get(port, "/metrics").await?;
        Some(metric_sum(&body, "tributary_table_applied_records_total"))
    };

    let mut first = run();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if applied(port).await.is_some_and(|n| n >= 20_000.0) {
            break;
        }
        assert!(Instant::now() < deadline, "the first run never got going");
    }
    first.kill().unwrap();
    first.wait().unwrap();

    let store = Store::open_read_only(data.path()).unwrap();
    let committed: f64 = (0..3)
        .map(|p| store.stored_offset("kv", p).unwrap().map_or(0, |o| o + 1) as f64)
        .sum();
    drop(store);
    assert!(
        committed > 0.0 && committed < total,
        "killed in the middle: {committed} of {total} committed"
    );

    let mut second = run();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut reapplied = 0.0;
    while committed + reapplied < total {
        assert!(
            Instant::now() < deadline,
            "the restart did not finish: {committed} + {reapplied} < {total}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Some(n) = applied(port).await {
            reapplied = n;
        }
    }
    let overlap = committed + reapplied - total;
    println!(
        "committed before the kill: {committed}, applied after the restart: {reapplied}, re-consumed: {overlap}"
    );
    assert!(
        (0.0..=BATCH).contains(&overlap),
        "re-consumed {overlap} records; at most one batch ({BATCH}) allowed"
    );
    second.kill().unwrap();
    second.wait().unwrap();

    let store = Store::open_read_only(data.path()).unwrap();
    let mut rows = 0;
    // A global table: one keyspace for every partition.
    for (_, raw) in store
        .scan("kv", Keyspace::Global, &ScanBounds::default(), usize::MAX)
        .unwrap()
    {
        let row: Json = serde_json::from_slice(&raw).unwrap();
        assert_eq!(row["v"], 1, "the last version wins: {row}");
        rows += 1;
    }
    assert_eq!(rows, KEYS);
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_sigkills_under_load_leave_the_table_equal_to_the_topic() {
    let topic = unique("kills");
    let kv = KvTable::on(&topic);
    // Upserts and deletes (tombstones) of random keys.
    let records = sigkills_under_load(&kv, &topic, |id, version, seed| {
        let value = (!next_random(seed).is_multiple_of(5))
            .then(|| format!(r#"{{"id":{id},"v":{version}}}"#).into_bytes());
        vec![(json!({ "id": id }), value)]
    })
    .await;
    // The topic replayed (newest value per key, a tombstone removes it) ...
    let mut expected = BTreeMap::new();
    for r in records {
        let id = serde_json::from_slice::<Json>(r.key.as_deref().unwrap()).unwrap()["id"]
            .as_u64()
            .unwrap();
        match r.value {
            Some(v) => expected.insert(id, serde_json::from_slice::<Json>(&v).unwrap()),
            None => expected.remove(&id),
        };
    }
    // ... is what the table holds.
    let store = Store::open_read_only(kv.data.path()).unwrap();
    let mut held = BTreeMap::new();
    for (_, raw) in store
        .scan("kv", Keyspace::Global, &ScanBounds::default(), usize::MAX)
        .unwrap()
    {
        let row: Json = serde_json::from_slice(&raw).unwrap();
        held.insert(row["id"].as_u64().unwrap(), row);
    }
    assert!(
        expected.len() > SIGKILL_KEYS as usize / 2,
        "the load wrote most keys"
    );
    assert_eq!(held.len(), expected.len(), "rows (seed printed above)");
    assert_eq!(held, expected, "rows (seed printed above)");
}

/// The same kills on a versioned table fed change events committed at
/// times out of order (a delete followed by its tombstone, as capture writes
/// it): every key's history, read as of each of its versions' times, is the
/// topic's (the version with the newest time at or before it, the later
/// offset of two at one time).
#[tokio::test(flavor = "multi_thread")]
async fn twenty_sigkills_under_load_leave_a_versioned_tables_history_equal_to_the_topic() {
    let topic = unique("kills_versioned");
    let kv = KvTable::versioned_on(&topic);
    const FIRST_MS: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let records = sigkills_under_load(&kv, &topic, |id, version, seed| {
        let ts_ms = FIRST_MS + version * 1000 + next_random(seed) % 3000;
        let key = json!({ "id": id });
        let event = |op: &str, before: Json, after: Json| {
            let event =
                json!({ "op": op, "before": before, "after": after, "source": { "ts_ms": ts_ms } });
            Some(event.to_string().into_bytes())
        };
        if next_random(seed).is_multiple_of(5) {
            vec![
                (key.clone(), event("d", key.clone(), Json::Null)),
                (key, None),
            ]
        } else {
            let row = json!({ "id": id, "v": version });
            vec![(key, event("u", Json::Null, row))]
        }
    })
    .await;
    // Each key's versions from the topic: (time µs, offset, row or absent).
    let mut versions: BTreeMap<u64, Vec<(i64, i64, Option<Json>)>> = BTreeMap::new();
    for r in &records {
        let Some(value) = &r.value else {
            continue; // a tombstone after its delete
        };
        let event: Json = serde_json::from_slice(value).unwrap();
        let id = serde_json::from_slice::<Json>(r.key.as_deref().unwrap()).unwrap()["id"]
            .as_u64()
            .unwrap();
        let t = event["source"]["ts_ms"].as_i64().unwrap() * 1000;
        let row = Some(event["after"].clone()).filter(|after| !after.is_null());
        versions.entry(id).or_default().push((t, r.offset, row));
    }
    // Read in-process, on the data directory the killed runs left.
    let yaml = tables_yaml(
        kv.data.path(),
        &unique("grp"),
        &[("kv", &topic, VERSIONED_KV)],
    );
    let instance = Instance::start(&yaml).await;
    instance.wait_serving(Duration::from_secs(120)).await;
    let table = instance.table("kv");
    let mut reads = 0;
    for (id, key_versions) in &versions {
        for (t, ..) in key_versions {
            let expected = key_versions
                .iter()
                .filter(|(from, ..)| from <= t)
                .max_by_key(|(from, offset, _)| (*from, *offset))
                .and_then(|(.., row)| row.clone());
            let found = match table.get_as_of(&json!(id), *t).await.unwrap().answer {
                AsOf::Row(row) => Some(row),
                AsOf::Absent => None,
                beyond => panic!("key {id} as of {t}: {beyond:?}"),
            };
            assert_eq!(
                found, expected,
                "key {id} as of {t} µs (seed printed above)"
            );
            reads += 1;
        }
    }
    assert!(reads > 1000, "only {reads} versions were read");
    drop(table);
    instance.stop().await;
}

/// Keys the SIGKILL tests' load writes.
const SIGKILL_KEYS: u64 = 5000;

/// Records (key, value or tombstone) to produce to a topic.
type Records = Vec<(Json, Option<Vec<u8>>)>;

/// Runs `kv` twenty times, SIGKILLing each run after 0.3–1.5 s, while
/// batches of 500 records made by `record(id, version, seed)` of random keys
/// go to `topic`; then once more until it has caught up. Returns the records.
async fn sigkills_under_load(
    kv: &KvTable,
    topic: &str,
    record: fn(u64, u64, &mut u64) -> Records,
) -> Vec<RawRecord> {
    create_topic(topic, 3).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut seed = random_seed();
    let load = {
        let (topic, stop) = (topic.to_owned(), stop.clone());
        let mut seed = seed;
        tokio::spawn(async move {
            let mut version = 0;
            let mut produced = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                version += 1;
                let records: Records = (0..500)
                    .flat_map(|_| {
                        let id = next_random(&mut seed) % SIGKILL_KEYS;
                        record(id, version, &mut seed)
                    })
                    .collect();
                produce(&topic, 3, &records).await;
                produced += records.len();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            produced
        })
    };
    for _ in 0..20 {
        let mut tables = kv.start();
        tokio::time::sleep(Duration::from_millis(300 + next_random(&mut seed) % 1200)).await;
        tables.kill().unwrap();
        tables.wait().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let produced = load.await.unwrap();

    // A last run until the table has caught up with the topic's end.
    let mut last = kv.start();
    let deadline = Instant::now() + Duration::from_secs(120);
    while try_http_get(kv.port, "/readyz").await.map(|(code, _)| code) != Some(200) {
        assert!(Instant::now() < deadline, "the last run never caught up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    last.kill().unwrap();
    last.wait().unwrap();
    let records = read_raw(topic, Duration::from_secs(60), move |r| r.len() >= produced).await;
    assert_eq!(records.len(), produced);
    records
}

#[tokio::test(flavor = "multi_thread")]
async fn partitions_move_between_instances_and_global_tables_stay_whole() {
    let (split, whole) = (unique("split"), unique("whole"));
    create_topic(&split, 3).await;
    create_topic(&whole, 3).await;
    let mut records: Vec<(Json, Option<Vec<u8>>)> = (0..300)
        .map(|id| {
            (
                json!({ "id": id }),
                Some(format!(r#"{{"id":{id}}}"#).into_bytes()),
            )
        })
        .collect();
    produce(&whole, 3, &records).await;
    // A malformed record is skipped, not fatal.
    records.push((json!({ "id": 999 }), Some(b"{not json".to_vec())));
    produce(&split, 3, &records).await;

    let group = unique("grp");
    let specs = [
        ("split", split.as_str(), "partitioned"),
        ("whole", whole.as_str(), "global"),
    ];
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Instance::start(&tables_yaml(dir_a.path(), &group, &specs)).await;
    a.wait_serving(Duration::from_secs(60)).await;
    assert_eq!(
        a.table("split").describe().await.partitions.len(),
        3,
        "alone, A holds every partition"
    );

    let b = Instance::start(&tables_yaml(dir_b.path(), &group, &specs)).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ((pa, ra), (pb, rb)) = (held(&a).await, held(&b).await);
        let mut all: Vec<i32> = pa.iter().chain(&pb).copied().collect();
        all.sort();
        if !pa.is_empty() && !pb.is_empty() && all == [0, 1, 2] && ra && rb {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no hand-over: A holds {pa:?}, B holds {pb:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in 0..300 {
        let key = json!({ "id": id });
        let (from_a, from_b) = (
            a.table("split").get(&key).await,
            b.table("split").get(&key).await,
        );
        match (from_a, from_b) {
            (Ok(Some(row)), Err(LookupError::NotOwned { .. }))
            | (Err(LookupError::NotOwned { .. }), Ok(Some(row))) => {
                assert_eq!(row, json!({ "id": id }));
            }
            other => panic!("key {id}: exactly one instance should answer, got {other:?}"),
        }
        for instance in [&a, &b] {
            assert_eq!(
                instance.table("whole").get(&key).await.unwrap(),
                Some(json!({ "id": id })),
                "global tables are whole"
            );
        }
    }
    // Each instance that materialized the malformed record's partition skipped it once.
    let bad = a.metric("tributary_table_bad_records_total")
        + b.metric("tributary_table_bad_records_total");
    assert!(
        (1.0..=2.0).contains(&bad),
        "the malformed record was counted and skipped: {bad}"
    );
    let owner = if a.table("split").get(&json!({ "id": 999 })).await.is_ok() {
        &a
    } else {
        &b
    };
    assert_eq!(
        owner
            .table("split")
            .get(&json!({ "id": 999 }))
            .await
            .unwrap(),
        None
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn restore_from_a_checkpoint_plus_the_tail_equals_a_full_replay() {
    let topic = unique("ckpt");
    create_topic(&topic, 3).await;
    let row = |id: i64, v: i64| {
        (
            json!({ "id": id }),
            Some(format!(r#"{{"id":{id},"v":{v}}}"#).into_bytes()),
        )
    };
    let before: Vec<_> = (0..2000).map(|id| row(id, 0)).collect();
    produce(&topic, 3, &before).await;

    let (dir_a, dir_b, dir_c, dest) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let spec = [("t", topic.as_str(), "global")];
    let a = Instance::start(&tables_yaml(dir_a.path(), &unique("grp"), &spec)).await;
    a.wait_applied(2000.0).await;
    let stats =
        tributary_tables::checkpoint::create(&a.materializer.store(), dir_a.path(), dest.path(), 3)
            .unwrap();
    assert!(stats.files_copied > 0);

    // The tail: updates, new rows and deletes after the checkpoint.
    let mut tail: Vec<_> = (1500..2500).map(|id| row(id, 1)).collect();
    tail.extend((0..100).map(|id| (json!({ "id": id }), None)));
    produce(&topic, 3, &tail).await;
    a.stop().await;

    let restored = dir_b.path().join("db");
    tributary_tables::checkpoint::restore(dest.path(), None, &restored).unwrap();
    let b = Instance::start(&tables_yaml(&restored, &unique("grp"), &spec)).await;
    let c = Instance::start(&tables_yaml(dir_c.path(), &unique("grp"), &spec)).await;
    b.wait_applied(tail.len() as f64).await;
    c.wait_applied((before.len() + tail.len()) as f64).await;
    assert_eq!(
        b.metric("tributary_table_applied_records_total"),
        tail.len() as f64,
        "the restored instance replays only the tail"
    );
    let (rows_b, rows_c) = (
        b.table("t").scan(&KeyRange::all(), 10_000).await.unwrap(),
        c.table("t").scan(&KeyRange::all(), 10_000).await.unwrap(),
    );
    assert_eq!(rows_b.len(), 2400);
    assert_eq!(rows_b, rows_c, "checkpoint + tail equals a full replay");
    b.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scans_by_key_prefix_and_range_over_a_composite_key() {
    let topic = unique("composite");
    create_topic(&topic, 3).await;
    let records: Vec<(Json, Option<Vec<u8>>)> = ["eu", "us"]
        .iter()
        .flat_map(|region| {
            (0..50).map(move |id| {
                let key = json!({ "region": region, "id": id });
                (
                    key.clone(),
                    Some(
                        serde_json::to_vec(&json!({ "region": region, "id": id, "n": id * 2 }))
                            .unwrap(),
                    ),
                )
            })
        })
        .collect();
    produce(&topic, 3, &records).await;
    let dir = tempfile::tempdir().unwrap();
    let instance = Instance::start(&tables_yaml(
        dir.path(),
        &unique("grp"),
        &[("t", &topic, "global")],
    ))
    .await;
    instance.wait_applied(100.0).await;
    let table = instance.table("t");

    let eu = table
        .scan(&KeyRange::Prefix(json!({ "region": "eu" })), 1000)
        .await
        .unwrap();
    let ids: Vec<i64> = eu.iter().map(|(k, _)| k["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, (0..50).collect::<Vec<_>>(), "one region, in key order");
    assert!(
        eu.iter()
            .all(|(k, row)| k["region"] == "eu" && row["n"] == k["id"].as_i64().unwrap() * 2)
    );

    let range = KeyRange::Between {
        from: Some(json!(["eu", 10])),
        to: Some(json!(["eu", 20])),
    };
    let ids: Vec<i64> = table
        .scan(&range, 1000)
        .await
        .unwrap()
        .iter()
        .map(|(k, _)| k["id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ids,
        (10..20).collect::<Vec<_>>(),
        "from inclusive, to exclusive"
    );

    let limited = table.scan(&KeyRange::all(), 7).await.unwrap();
    assert_eq!(limited.len(), 7);
    assert_eq!(limited[0].0, json!({ "region": "eu", "id": 0 }));
    let err = table
        .scan(&KeyRange::Prefix(json!({ "id": 3 })), 10)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("leading key columns"), "{err}");
    drop(table);
    instance.stop().await;
}

/// Rows of several MiB each, a backlog far larger than `batch_max_mb`: every
/// row is applied, and the process's resident memory grows by a small
/// multiple of the bound (the write batch, the consumer's prefetch and fetch,
/// RocksDB's write buffers set to the same size, a row's parsed copies), not
/// by the size of the backlog (86–93 MiB seen for 160 MiB of rows; 404 MiB
/// with `batch_max_mb: 1024`).
#[tokio::test(flavor = "multi_thread")]
async fn large_rows_are_applied_within_the_batch_byte_bound() {
    const ROW_BYTES: usize = 2 << 20;
    const ROWS: i64 = 80;
    const BOUND_MB: u64 = 8;
    let topic = unique("large-rows");
    create_topic(&topic, 1).await;
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let yaml = format!(
        "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\nbatch_max_mb: {BOUND_MB}\n\
         rocksdb: {{ write_buffer_mb: {BOUND_MB}, block_cache_mb: {BOUND_MB} }}\n\
         metrics: {{ listen: '127.0.0.1:{port}' }}\n\
         tables:\n  - {{ name: kv, topic: '{topic}', mode: global }}\n",
        data.path().display(),
        brokers()
    );
    let tables = TributaryProcess::start_for_memory(&["tables", "run"], &write_config(&yaml));
    let metric = |name: &'static str| async move {
        let (_, body) = try_http_get(port, "/metrics").await?;
        Some(metric_sum(&body, name))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric("tributary_table_ready").await != Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "not ready; log:\n{}",
            tables.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let blob = "x".repeat(ROW_BYTES);
    let rows: Vec<(Json, Option<Vec<u8>>)> = (0..ROWS)
        .map(|id| {
            let row = json!({ "id": id, "blob": blob }).to_string().into_bytes();
            (json!({ "id": id }), Some(row))
        })
        .collect();
    drop(blob);
    // The whole backlog is there when the table reads again.
    let idle_kib = tables.fed_a_backlog(produce(&topic, 1, &rows)).await;
    drop(rows);
    let deadline = Instant::now() + Duration::from_secs(120);
    while metric("tributary_table_applied_records_total").await < Some(ROWS as f64) {
        assert!(
            Instant::now() < deadline,
            "not applied; log:\n{}",
            tables.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(metric("tributary_table_bad_records_total").await, Some(0.0));
    let grown_mib = tables.peak_growth_mib(idle_kib);
    let input_mib = (ROWS as u64 * ROW_BYTES as u64) >> 20;
    eprintln!("grew {grown_mib} MiB for {input_mib} MiB of rows");
    assert!(
        grown_mib <= 15 * BOUND_MB,
        "resident memory grew {grown_mib} MiB with batch_max_mb {BOUND_MB} ({input_mib} MiB of rows)"
    );
    let (ok, log) = tables.terminate(Duration::from_secs(30));
    assert!(ok, "{log}");
}
