//! Enricher jobs against the real stack: the shop demo from MariaDB rows to
//! enriched events, dead letters for bad input, bounded runs, SIGKILLs, and two
//! instances sharing a job.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;
use serde_json::{Value as Json, json};
use tributary_proto::partition::partition_for_key;

/// A fresh directory holding a job file and the tables file it names.
struct JobFiles {
    dir: PathBuf,
    input: String,
    output: String,
    dead_letter: String,
    group: String,
    metrics_port: u16,
    brokers: String,
}

impl JobFiles {
    fn new(input: &str) -> Self {
        let dir = std::env::temp_dir()
            .join("tributary-tests")
            .join(unique("enrich"));
        std::fs::create_dir_all(&dir).unwrap();
        JobFiles {
            dir,
            input: input.to_owned(),
            output: format!("{input}.enriched"),
            dead_letter: format!("{input}.dlq"),
            // Tests run at once: each job has a group of its own.
            group: format!("{input}.group"),
            metrics_port: free_port(),
            brokers: brokers(),
        }
    }

    /// Writes `tables.yaml`, whose `tables:` is the YAML fragment `tables`.
    fn write_tables(&self, tables: &str) {
        std::fs::write(
            self.dir.join("tables.yaml"),
            format!(
                "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\ntables: {tables}\n",
                self.dir.join("data").display(),
                self.brokers
            ),
        )
        .unwrap();
    }

    /// Writes `tables.yaml` (when `tables` is given) and `job.yaml`; `joins` and
    /// `extra` are YAML fragments.
    fn write(&self, tables: Option<&str>, joins: &str, extra: &str) -> PathBuf {
        let tables_line = match tables {
            Some(tables) => {
                self.write_tables(tables);
                "tables: tables.yaml\n"
            }
            None => "",
        };
        let job = format!(
            "kafka: {{ brokers: '{}', consumer: {{ session.timeout.ms: '3000' }}, producer: {{ message.max.bytes: '16777216' }} }}\n{tables_line}\
             metrics: {{ listen: '127.0.0.1:{}' }}\n{extra}\n\
             jobs:\n  - name: shop\n    group_id: '{}'\n    input: {{ topics: ['{}'] }}\n    joins: {joins}\n    \
             output: {{ topic: '{}', key: order_id }}\n    dead_letter: {{ topic: '{}' }}\n",
            self.brokers, self.metrics_port, self.group, self.input, self.output, self.dead_letter
        );
        let path = self.dir.join("job.yaml");
        std::fs::write(&path, job).unwrap();
        path
    }

    /// Writes `tables.yaml` and `job.sql`: the settings, the input and output
    /// streams (the output keyed by `order_id`), then the statements `sql`,
    /// whose job reads `orders` and writes `enriched` (`$DLQ` and `$GROUP`
    /// stand for the files' dead-letter topic and group).
    fn write_sql(&self, tables: &str, sql: &str) -> PathBuf {
        self.write_tables(tables);
        let text = format!(
            "SET kafka.brokers = '{}';\nSET tables = 'tables.yaml';\nSET metrics.listen = '127.0.0.1:{}';\n\
             CREATE STREAM orders (proc_time AS PROCTIME()) WITH (topic = '{}');\n\
             CREATE STREAM enriched (PRIMARY KEY (order_id) NOT ENFORCED) WITH (topic = '{}');\n\
             {}",
            self.brokers,
            self.metrics_port,
            self.input,
            self.output,
            sql.replace("$DLQ", &self.dead_letter)
                .replace("$GROUP", &self.group)
        );
        let path = self.dir.join("job.sql");
        std::fs::write(&path, text).unwrap();
        path
    }

    async fn metric(&self, name: &str) -> f64 {
        match try_http_get(self.metrics_port, "/metrics").await {
            Some((200, body)) => metric_sum(&body, name),
            _ => 0.0,
        }
    }
}

/// An order of `user_id`, placed in the partition of the users table that holds
/// the user (the input is co-partitioned with the table).
fn order(order_id: u64, user_id: u64, partitions: u32) -> Produced {
    let event = json!({ "order_id": order_id, "user_id": user_id, "amount": order_id % 97,
                        "sku": format!("SKU-{}", order_id % 12) });
    order_event(order_id, user_id, &event, partitions)
}

/// The order `event`, keyed by `order_id`, in the partition of the users
/// table that holds `user_id`.
fn order_event(order_id: u64, user_id: u64, event: &Json, partitions: u32) -> Produced {
    let table_key = json!({ "id": user_id }).to_string();
    (
        partition_for_key(table_key.as_bytes(), partitions),
        Some(json!({ "order_id": order_id }).to_string().into_bytes()),
        Some(event.to_string().into_bytes()),
    )
}

/// Order ids of enriched records.
fn order_ids(records: &[RawRecord]) -> BTreeSet<u64> {
    records
        .iter()
        .map(|r| r.json()["order_id"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn shop_orders_are_enriched_with_users_from_cdc_and_follow_row_changes() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "shop").await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.users (id INT PRIMARY KEY, name VARCHAR(40), tier VARCHAR(10))"
    ))
    .await
    .unwrap();
    let tiers = ["bronze", "silver", "gold"];
    let values: Vec<String> = (1..=50)
        .map(|i| format!("({i}, 'user {i}', '{}')", tiers[i % 3]))
        .collect();
    conn.query_drop(format!(
        "INSERT INTO {db}.users VALUES {}",
        values.join(",")
    ))
    .await
    .unwrap();
    // Products stay in MariaDB: a remote table (SKU-10 and SKU-11 do not exist).
    conn.query_drop(format!(
        "CREATE TABLE {db}.products (sku VARCHAR(20) PRIMARY KEY, title VARCHAR(60), price DECIMAL(10,2))"
    ))
    .await
    .unwrap();
    let products: Vec<String> = (0..10)
        .map(|i| format!("('SKU-{i}', 'product {i}', {i}.25)"))
        .collect();
    conn.query_drop(format!(
        "INSERT INTO {db}.products VALUES {}",
        products.join(",")
    ))
    .await
    .unwrap();
    let capture = CaptureSetup::new(&db, &gtid_now(&mut conn).await).with_snapshot(20);
    let _capture = TributaryProcess::capture(&capture.yaml());

    let orders = unique("orders");
    create_topic_with(&orders, 3, "delete").await;
    // Users 51..=60 do not exist: a left join gives them `user: null`.
    let placed: Vec<Produced> = (0..300).map(|n| order(n, 1 + n % 60, 3)).collect();
    produce_raw(&orders, &placed).await;

    let files = JobFiles::new(&orders);
    let (_, port) = mysql_host_port();
    let job = files.write(
        Some(&format!(
            "[{{ name: users, topic: '{}' }}]\nremote:\n  - {{ name: products, mysql: {{ url: 'mysql://tributary:tributary@127.0.0.1:{port}', table: {db}.products, key: [sku], columns: [sku, title, price] }} }}",
            capture.topic("users")
        )),
        "[{ table: users, key: user_id, select: [name, tier], rename: { name: user_name }, into: user }, { table: products, key: sku, select: [title, price], into: product }]",
        "",
    );
    let enricher = TributaryProcess::start(&["enrich"], &job, &[]);
    // The same job in SQL, in a process of its own (its own tables), writing
    // to another topic: the same records, byte for byte.
    let sql_files = JobFiles {
        output: format!("{orders}.sql-enriched"),
        group: format!("{orders}.sql-group"),
        ..JobFiles::new(&orders)
    };
    let sql_job = sql_files.write_sql(
        &format!(
            "[{{ name: users, topic: '{}' }}]\nremote:\n  - {{ name: products, mysql: {{ url: 'mysql://tributary:tributary@127.0.0.1:{port}', table: {db}.products, key: [sku], columns: [sku, title, price] }} }}",
            capture.topic("users")
        ),
        "CREATE TABLE users (PRIMARY KEY (id) NOT ENFORCED);
CREATE JOB shop WITH (dead_letter_topic = '$DLQ', group_id = '$GROUP') AS
INSERT INTO enriched
SELECT o.*,
  CASE WHEN u IS NOT NULL THEN STRUCT(u.name AS user_name, u.tier) END AS user,
  CASE WHEN p IS NOT NULL THEN STRUCT(p.title, p.price) END AS product
FROM orders AS o
LEFT JOIN users FOR SYSTEM_TIME AS OF o.proc_time AS u ON u.id = o.user_id
LEFT JOIN products FOR SYSTEM_TIME AS OF o.proc_time AS p ON p.sku = o.sku;",
    );
    let sql_enricher = TributaryProcess::start(&["enrich"], &sql_job, &[]);
    let out = read_raw(&files.output, Duration::from_secs(90), |r| r.len() >= 300).await;
    assert_eq!(out.len(), 300, "log:\n{}", enricher.log());
    let sql_out = read_raw(&sql_files.output, Duration::from_secs(90), |r| {
        r.len() >= 300
    })
    .await;
    assert_eq!(sql_out.len(), 300, "log:\n{}", sql_enricher.log());
    type KeyAndValue = (Option<Vec<u8>>, Option<Vec<u8>>);
    let by_order = |records: &[RawRecord]| -> BTreeMap<u64, KeyAndValue> {
        records
            .iter()
            .map(|r| {
                (
                    r.json()["order_id"].as_u64().unwrap(),
                    (r.key.clone(), r.value.clone()),
                )
            })
            .collect()
    };
    assert_eq!(
        by_order(&sql_out),
        by_order(&out),
        "the SQL job writes what the YAML job writes"
    );

    // Expected from the database itself.
    let rows: Vec<(u64, String, String)> = conn
        .query(format!("SELECT id, name, tier FROM {db}.users"))
        .await
        .unwrap();
    let users: BTreeMap<u64, Json> = rows
        .into_iter()
        .map(|(id, name, tier)| (id, json!({ "user_name": name, "tier": tier })))
        .collect();
    let rows: Vec<(String, String, String)> = conn
        .query(format!(
            "SELECT sku, title, CAST(price AS CHAR) FROM {db}.products"
        ))
        .await
        .unwrap();
    let products: BTreeMap<String, Json> = rows
        .into_iter()
        .map(|(sku, title, price)| (sku, json!({ "title": title, "price": price })))
        .collect();
    for record in &out {
        let event = record.json();
        let user_id = event["user_id"].as_u64().unwrap();
        let expected = users.get(&user_id).cloned().unwrap_or(Json::Null);
        assert_eq!(event["user"], expected, "{event}");
        let sku = event["sku"].as_str().unwrap();
        let product = products.get(sku).cloned().unwrap_or(Json::Null);
        assert_eq!(event["product"], product, "{event}");
        assert_eq!(event["amount"], event["order_id"].as_u64().unwrap() % 97);
        assert_eq!(record.headers["tributary.source.topic"], orders);
        assert_eq!(
            record.key.as_deref().unwrap(),
            json!({ "order_id": event["order_id"] })
                .to_string()
                .as_bytes()
        );
    }
    assert_eq!(order_ids(&out), (0..300).collect());
    assert_eq!(
        files
            .metric(
                "tributary_enrich_join_lookups_total{job=\"shop\",table=\"users\",result=\"miss\"}"
            )
            .await,
        50.0
    );

    // A row changed in MariaDB changes later enrichments.
    conn.query_drop(format!(
        "UPDATE {db}.users SET tier = 'platinum' WHERE id = 7"
    ))
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut next = 1000;
    loop {
        produce_raw(&orders, &[order(next, 7, 3)]).await;
        let wanted = next;
        let out = read_raw(&files.output, Duration::from_secs(20), move |r| {
            order_ids(r).contains(&wanted)
        })
        .await;
        let latest = out
            .iter()
            .map(RawRecord::json)
            .find(|e| e["order_id"] == wanted)
            .expect("the new order is enriched");
        if latest["user"]["tier"] == "platinum" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the update never reached enrichments: {latest}"
        );
        next += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let dead = read_raw(&files.dead_letter, Duration::from_secs(1), |_| false).await;
    assert!(dead.is_empty(), "no dead letters expected: {dead:?}");
}

/// A job joins orders with a local table materialized from a PostgreSQL
/// capture (its events carry WAL coordinates), and follows the table's
/// changes; expectations from PostgreSQL's own `SELECT`.
#[tokio::test(flavor = "multi_thread")]
async fn orders_are_enriched_with_users_captured_from_postgres() {
    let pg = common::postgres::PgCapture::new("id int PRIMARY KEY, name text, tier text")
        .await
        .unwrap();
    let users = &pg.table;
    pg.client
        .batch_execute(&format!(
            "INSERT INTO {users} SELECT g, 'user ' || g, (ARRAY['bronze', 'silver', 'gold'])[g % 3 + 1] \
             FROM generate_series(1, 50) g"
        ))
        .await
        .unwrap();
    let capture = TributaryProcess::capture(&pg.yaml());
    let orders = unique("pgorders");
    create_topic_with(&orders, 3, "delete").await;
    // Users 51..=60 do not exist: a left join gives them `user: null`.
    let placed: Vec<Produced> = (0..120).map(|n| order(n, 1 + n % 60, 3)).collect();
    produce_raw(&orders, &placed).await;
    let files = JobFiles::new(&orders);
    let job = files.write(
        Some(&format!("[{{ name: users, topic: '{}' }}]", pg.topic())),
        "[{ table: users, key: user_id, select: [name, tier], rename: { name: user_name }, into: user }]",
        "",
    );
    let enricher = TributaryProcess::start(&["enrich"], &job, &[]);
    let out = read_raw(&files.output, Duration::from_secs(90), |r| r.len() >= 120).await;
    assert_eq!(
        out.len(),
        120,
        "log:\n{}\ncapture:\n{}",
        enricher.log(),
        capture.log()
    );
    let rows = pg
        .client
        .query(&format!("SELECT id::int8, name, tier FROM {users}"), &[])
        .await
        .unwrap();
    let expected: BTreeMap<u64, Json> = rows
        .iter()
        .map(|r| {
            let (id, name, tier): (i64, String, String) = (r.get(0), r.get(1), r.get(2));
            (id as u64, json!({ "user_name": name, "tier": tier }))
        })
        .collect();
    for record in &out {
        let event = record.json();
        let user_id = event["user_id"].as_u64().unwrap();
        let user = expected.get(&user_id).cloned().unwrap_or(Json::Null);
        assert_eq!(event["user"], user, "{event}");
    }
    assert_eq!(order_ids(&out), (0..120).collect());

    // A row changed in PostgreSQL changes later enrichments.
    pg.client
        .batch_execute(&format!(
            "UPDATE {users} SET tier = 'platinum' WHERE id = 7"
        ))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut next = 1000;
    loop {
        produce_raw(&orders, &[order(next, 7, 3)]).await;
        let wanted = next;
        let out = read_raw(&files.output, Duration::from_secs(20), move |r| {
            order_ids(r).contains(&wanted)
        })
        .await;
        let latest = out
            .iter()
            .map(RawRecord::json)
            .find(|e| e["order_id"] == wanted)
            .expect("the new order is enriched");
        if latest["user"]["tier"] == "platinum" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the update never reached enrichments: {latest}"
        );
        next += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drop(enricher);
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    pg.drop().await.unwrap();
}

/// One fuzzed event: its bytes (`None`: a tombstone) and the reason expected.
fn fuzzed(i: u64, rng: &mut u64) -> (Option<Vec<u8>>, &'static str) {
    let mut next = || {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    let noise: String = (0..next() % 40)
        .map(|_| char::from(b' ' + (next() % 90) as u8))
        .collect();
    match i % 7 {
        // An object that never closes is never JSON, whatever the noise.
        0 => (
            Some(format!("{{\"order_id\": {i}, {noise}").into_bytes()),
            "value is not JSON",
        ),
        1 => (
            Some(
                (0..1 + next() % 30)
                    .map(|_| 0x80 | (next() % 128) as u8)
                    .collect(),
            ),
            "value is not JSON",
        ),
        2 => (
            Some(json!([i, noise]).to_string().into_bytes()),
            "event is not a JSON object",
        ),
        3 => (
            Some(json!({ "id": i, "note": noise }).to_string().into_bytes()),
            "output missing key field `order_id`",
        ),
        4 => (
            Some(json!({ "order_id": { "n": i } }).to_string().into_bytes()),
            "output key field `order_id` is an object",
        ),
        5 => (
            Some(
                json!({ "order_id": i, "pad": "x".repeat(600) })
                    .to_string()
                    .into_bytes(),
            ),
            "event is ",
        ),
        _ => (None, "record has no value"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_events_are_dead_lettered_with_reasons_and_the_job_keeps_running() {
    let input = unique("fuzz");
    create_topic_with(&input, 2, "delete").await;
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut expected = BTreeMap::new();
    let mut records = Vec::new();
    for i in 0..10_000u64 {
        let (value, reason) = fuzzed(i, &mut rng);
        let key = format!("bad-{i}").into_bytes();
        expected.insert(key.clone(), (value.clone(), reason, (i % 2) as i32));
        records.push(((i % 2) as i32, Some(key), value));
    }
    for i in 0..100u64 {
        let value = json!({ "order_id": i }).to_string().into_bytes();
        records.push(((i % 2) as i32, None, Some(value)));
    }
    produce_raw(&input, &records).await;

    let files = JobFiles::new(&input);
    let job = files.write(None, "[]", "max_event_bytes: 512");
    let enricher = TributaryProcess::start(&["enrich"], &job, &[]);
    let dead = read_raw(&files.dead_letter, Duration::from_secs(90), |r| {
        r.len() >= 10_000
    })
    .await;
    assert_eq!(dead.len(), 10_000, "log:\n{}", enricher.log());
    let mut sources = BTreeSet::new();
    for record in &dead {
        let key = record.key.clone().unwrap();
        let (value, reason, partition) = &expected[&key];
        let got = &record.headers["tributary.error"];
        assert!(
            got.starts_with(reason),
            "{got:?} should start with {reason:?}"
        );
        assert_eq!(
            record.value.as_deref().unwrap_or_default(),
            value.as_deref().unwrap_or_default(),
            "the original bytes"
        );
        assert_eq!(record.headers["tributary.source.topic"], input);
        assert_eq!(
            record.headers["tributary.source.partition"],
            partition.to_string()
        );
        sources.insert((
            record.headers["tributary.source.partition"].clone(),
            record.headers["tributary.source.offset"].clone(),
        ));
    }
    assert_eq!(
        sources.len(),
        10_000,
        "each dead letter names its own source offset"
    );

    let out = read_raw(&files.output, Duration::from_secs(30), |r| r.len() >= 100).await;
    assert_eq!(order_ids(&out), (0..100).collect());
    assert_eq!(http_get(files.metrics_port, "/healthz").await.0, 200);
    assert_eq!(
        files.metric("tributary_enrich_dead_lettered_total").await,
        10_000.0
    );
    // Still running, and still enriching.
    produce_raw(&input, &[(0, None, Some(br#"{"order_id": 100}"#.to_vec()))]).await;
    let out = read_raw(&files.output, Duration::from_secs(30), |r| r.len() >= 101).await;
    assert!(order_ids(&out).contains(&100));
    let (clean, log) = enricher.terminate(Duration::from_secs(30));
    assert!(clean, "SIGTERM drains and exits cleanly; log:\n{log}");
}

/// An event whose enriched form is larger than the producer may send (its
/// user's name is long) goes to the dead-letter topic as it came, saying why;
/// the events around it are enriched.
#[tokio::test(flavor = "multi_thread")]
async fn an_enriched_event_too_big_to_send_is_dead_lettered_as_it_came() {
    const ORDERS: u64 = 200;
    let users = unique("users");
    create_topic_with(&users, 1, "compact").await;
    let long_name = "n".repeat(3_000);
    let rows: Vec<(Json, Option<Vec<u8>>)> = [(0, "user 0"), (1, long_name.as_str())]
        .into_iter()
        .map(|(id, name)| {
            let row = json!({ "id": id, "name": name }).to_string().into_bytes();
            (json!({ "id": id }), Some(row))
        })
        .collect();
    produce_on(&brokers(), &users, 1, &rows).await;
    let input = unique("orders");
    create_topic_with(&input, 1, "delete").await;
    let placed: Vec<Produced> = (0..ORDERS).map(|o| order(o, o % 2, 1)).collect();
    produce_raw(&input, &placed).await;
    let files = JobFiles::new(&input);
    let job = files.write(
        Some(&format!("[{{ name: users, topic: '{users}' }}]")),
        JOIN_USERS,
        "",
    );
    let text = std::fs::read_to_string(&job).unwrap();
    let limited = text.replace("message.max.bytes: '16777216'", "message.max.bytes: '2000'");
    assert_ne!(text, limited);
    std::fs::write(&job, limited).unwrap();

    assert_eq!(
        bounded_run(&job, "beginning", "end").await,
        (ORDERS, ORDERS / 2, ORDERS / 2)
    );
    let out = read_raw(&files.output, Duration::from_secs(30), |r| {
        r.len() as u64 >= ORDERS / 2
    })
    .await;
    assert_eq!(order_ids(&out), (0..ORDERS).step_by(2).collect());
    let mut dead = read_raw(&files.dead_letter, Duration::from_secs(30), |r| {
        r.len() as u64 >= ORDERS / 2
    })
    .await;
    assert_eq!(dead.len() as u64, ORDERS / 2);
    dead.sort_by_key(|r| r.headers["tributary.source.offset"].parse::<u64>().unwrap());
    for (record, order_id) in dead.iter().zip((1..ORDERS).step_by(2)) {
        let (_, _, original) = order(order_id, 1, 1);
        assert_eq!(record.value, original, "the original bytes");
        let reason = &record.headers["tributary.error"];
        assert!(
            reason.starts_with("the enriched event was rejected by the broker")
                && reason.contains("too large"),
            "{reason}"
        );
        assert_eq!(
            record.headers["tributary.source.offset"],
            order_id.to_string()
        );
    }
}

/// Runs the job file `job` (its job `shop`) bounded `--from` `from`
/// `--until` `until`; its summary's (in, out, dead-lettered).
async fn bounded_run(job: &std::path::Path, from: &str, until: &str) -> (u64, u64, u64) {
    let run = TributaryProcess::start(&["enrich"], job, &["--from", from, "--until", until]);
    summary_counts(&wait_stdout(run).await, "shop")
}

/// The summary row of `job` printed by a bounded run: (in, out, dead-lettered).
fn summary_counts(stdout: &str, job: &str) -> (u64, u64, u64) {
    let row = stdout
        .lines()
        .find(|l| l.starts_with(&format!("| {job} |")))
        .unwrap_or_else(|| panic!("no summary for {job} in {stdout:?}"));
    let cells: Vec<u64> = row
        .split('|')
        .skip(2)
        .take(3)
        .map(|c| c.trim().parse().unwrap())
        .collect();
    (cells[0], cells[1], cells[2])
}

#[tokio::test(flavor = "multi_thread")]
async fn bounded_runs_stop_by_themselves_with_the_right_counts() {
    let input = unique("backfill");
    create_topic_with(&input, 1, "delete").await;
    // Every 50th event is not JSON.
    let bad = |n: u64| n % 50 == 7;
    let events: Vec<Produced> = (0..500u64)
        .map(|n| {
            let value = if bad(n) {
                b"{nope".to_vec()
            } else {
                json!({ "order_id": n }).to_string().into_bytes()
            };
            (0, None, Some(value))
        })
        .collect();
    produce_raw(&input, &events).await;
    let files = JobFiles::new(&input);
    let job = files.write(None, "[]", "");

    let in_range = |from: u64, to: u64| (from..to).filter(|n| !bad(*n)).count() as u64;
    assert_eq!(
        bounded_run(&job, "100", "end").await,
        (400, in_range(100, 500), 400 - in_range(100, 500))
    );
    // Events after the run's end are not read; a range by offsets stops at its bound.
    produce_raw(&input, &[(0, None, Some(br#"{"order_id": 999}"#.to_vec()))]).await;
    assert_eq!(
        bounded_run(&job, "beginning", "250").await,
        (250, in_range(0, 250), 250 - in_range(0, 250))
    );
    let expected = (in_range(100, 500) + in_range(0, 250)) as usize;
    let out = read_raw(&files.output, Duration::from_secs(30), move |r| {
        r.len() >= expected
    })
    .await;
    assert_eq!(out.len(), expected);
    assert!(!order_ids(&out).contains(&999));
}

/// Events of several MiB each, far more of them than the job may hold: it
/// enriches them all, and its resident memory grows by a small multiple of
/// `max_in_flight_mb` (held input, the consumer's prefetch, the producer's
/// queue), not by the size of the backlog.
#[tokio::test(flavor = "multi_thread")]
async fn large_events_are_held_within_the_byte_bound() {
    const EVENT_BYTES: usize = 2 << 20;
    const EVENTS: u64 = 40;
    const BOUND_MB: u64 = 8;
    let input = unique("large");
    create_topic_with(&input, 2, "delete").await;
    let files = JobFiles::new(&input);
    let job = files.write(
        None,
        "[]",
        &format!(
            "max_in_flight_mb: {BOUND_MB}\nmax_event_bytes: {}",
            2 * EVENT_BYTES
        ),
    );
    let enricher = TributaryProcess::start_for_memory(&["enrich"], &job);
    // Running once its in-flight gauge is exported.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(try_http_get(files.metrics_port, "/metrics").await,
        Some((200, body)) if body.contains("tributary_enrich_in_flight_bytes{"))
    {
        assert!(
            Instant::now() < deadline,
            "the job did not start; log:\n{}",
            enricher.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let blob = "x".repeat(EVENT_BYTES);
    let events: Vec<Produced> = (0..EVENTS)
        .map(|n| {
            let value = json!({ "order_id": n, "blob": blob })
                .to_string()
                .into_bytes();
            ((n % 2) as i32, None, Some(value))
        })
        .collect();
    drop(blob);
    // The whole backlog is there when the job reads again.
    let idle_kib = enricher.fed_a_backlog(produce_raw(&input, &events)).await;
    drop(events);
    let out = read_raw(&files.output, Duration::from_secs(120), |r| {
        r.len() >= EVENTS as usize
    })
    .await;
    let ids: BTreeSet<u64> = out
        .iter()
        .map(|r| {
            let value: Json = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
            assert_eq!(value["blob"].as_str().map(str::len), Some(EVENT_BYTES));
            value["order_id"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(ids, (0..EVENTS).collect(), "log:\n{}", enricher.log());
    let grown_mib = enricher.peak_growth_mib(idle_kib);
    let input_mib = (EVENTS * EVENT_BYTES as u64) >> 20;
    eprintln!("grew {grown_mib} MiB for {input_mib} MiB of input");
    assert!(
        grown_mib <= 8 * BOUND_MB,
        "resident memory grew {grown_mib} MiB with max_in_flight_mb {BOUND_MB} ({input_mib} MiB of input)"
    );
    let (ok, log) = enricher.terminate(Duration::from_secs(30));
    assert!(ok, "{log}");
}

/// Waits for a bounded run to exit successfully, having logged no error, and
/// returns what it printed.
async fn wait_stdout(process: TributaryProcess) -> String {
    tokio::task::spawn_blocking(move || {
        let stdout = process.stdout_path();
        let (ok, log) = process.wait_exit(Duration::from_secs(90));
        assert!(ok, "bounded run failed; log:\n{log}");
        // ERROR means "act now": reaching a partition's end is not that.
        let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
        assert!(
            errors.is_empty(),
            "a run that went well logged errors: {errors:#?}"
        );
        std::fs::read_to_string(stdout).unwrap()
    })
    .await
    .unwrap()
}

/// A users topic of `n` plain rows keyed like capture's keys, and a co-partitioned
/// orders topic of `orders` events (user `order_id % n`).
async fn users_and_orders(n: u64, orders: u64, partitions: u32) -> (String, String) {
    users_and_orders_on(&brokers(), n, orders, partitions).await
}

/// [`users_and_orders`] on another broker.
async fn users_and_orders_on(
    brokers: &str,
    n: u64,
    orders: u64,
    partitions: u32,
) -> (String, String) {
    let users = unique("users");
    create_topic_on(brokers, &users, partitions as i32, "compact").await;
    let rows: Vec<(Json, Option<Vec<u8>>)> = (0..n)
        .map(|id| {
            let row = json!({ "id": id, "name": format!("user {id}") });
            (json!({ "id": id }), Some(row.to_string().into_bytes()))
        })
        .collect();
    produce_on(brokers, &users, partitions, &rows).await;
    let input = unique("orders");
    create_topic_on(brokers, &input, partitions as i32, "delete").await;
    let placed: Vec<Produced> = (0..orders).map(|o| order(o, o % n, partitions)).collect();
    produce_raw_on(brokers, &input, &placed).await;
    (users, input)
}

/// Produces orders `ids`, of users `id % users`, co-partitioned with the users table.
async fn produce_orders(input: &str, ids: std::ops::Range<u64>, users: u64, partitions: u32) {
    let placed: Vec<Produced> = ids.map(|o| order(o, o % users, partitions)).collect();
    produce_raw(input, &placed).await;
}

/// Checks that every order is in `out`, each enriched with its user's name.
fn assert_all_enriched(out: &[RawRecord], orders: u64, users: u64) {
    for record in out {
        let event = record.json();
        let user_id = event["user_id"].as_u64().unwrap();
        assert_eq!(event["name"], format!("user {user_id}"), "{event}");
        assert_eq!(user_id, event["order_id"].as_u64().unwrap() % users);
    }
    let seen = order_ids(out);
    let missing: Vec<u64> = (0..orders).filter(|o| !seen.contains(o)).take(10).collect();
    assert!(
        missing.is_empty(),
        "orders missing from the output: {missing:?}…"
    );
}

const JOIN_USERS: &str =
    "[{ table: users, key: user_id, select: [name], type: inner, on_miss: dlq }]";

#[tokio::test(flavor = "multi_thread")]
async fn twenty_sigkills_during_a_run_lose_no_event() {
    sigkills_during_a_run("").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_sigkills_in_exactly_once_mode_commit_each_output_once() {
    sigkills_during_a_run("delivery: exactly_once\ncommit_interval_ms: 500").await;
}

/// 20 SIGKILLs of an enricher (`extra`: more job settings) while orders keep
/// arriving; then one run to the end. Every order is enriched; with exactly-once
/// delivery, each is committed exactly once for a read_committed consumer (the
/// transaction markers are read from the raw batches).
async fn sigkills_during_a_run(extra: &str) {
    const ORDERS: u64 = 60_000;
    const USERS: u64 = 1000;
    let exactly_once = extra.contains("exactly_once");
    let (users, input) = users_and_orders(USERS, 0, 3).await;
    let files = JobFiles::new(&input);
    let job = files.write(
        Some(&format!("[{{ name: users, topic: '{users}' }}]")),
        JOIN_USERS,
        extra,
    );
    // Orders keep arriving (2000 a second) while the enricher is killed and restarted.
    let producer = {
        let input = input.clone();
        tokio::spawn(async move {
            for chunk in 0..ORDERS / 2000 {
                produce_orders(&input, chunk * 2000..(chunk + 1) * 2000, USERS, 3).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let mut rng = 0x9e37_79b9_u64;
    for kill in 0..20 {
        let mut enricher = TributaryProcess::start(&["enrich"], &job, &[]);
        // Kill at a random moment once this process has its partitions.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !enricher.log().contains("input partitions assigned") {
            assert!(
                Instant::now() < deadline,
                "run {kill} got no partitions; log:\n{}",
                enricher.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        tokio::time::sleep(Duration::from_millis(300 + (rng >> 54))).await; // 0.3..1.3 s
        enricher.kill();
    }
    producer.await.unwrap();
    let enricher = TributaryProcess::start(&["enrich"], &job, &[]);
    let out = if exactly_once {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let (out, _) = committed::read_topic(&files.output, 3).await;
            if order_ids(&out).len() as u64 == ORDERS || Instant::now() > deadline {
                let ids = order_ids(&out);
                assert_eq!(
                    out.len(),
                    ids.len(),
                    "an order committed twice; log:\n{}",
                    enricher.log()
                );
                break out;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    } else {
        read_raw(&files.output, Duration::from_secs(180), move |r| {
            r.len() as u64 >= ORDERS && order_ids(r).len() as u64 == ORDERS
        })
        .await
    };
    assert!(
        out.len() as u64 >= ORDERS,
        "only {} outputs; log:\n{}",
        out.len(),
        enricher.log()
    );
    assert_all_enriched(&out, ORDERS, USERS);
    let dead = read_raw(&files.dead_letter, Duration::from_secs(1), |_| false).await;
    assert!(dead.is_empty(), "every user exists: {:?}", dead.first());
}

/// A job whose private broker stops answering (SIGSTOP) in the middle of a
/// backlog: its waits for delivery reports give up after `kafka.stall_timeout_s`,
/// the job starts again in-process from its committed offsets, and once the
/// broker answers again every order is enriched.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_whose_broker_stops_answering_starts_again_and_loses_nothing() {
    const ORDERS: u64 = 150_000;
    const USERS: u64 = 500;
    let port = free_port();
    let broker = PrivateBroker::start_on(port);
    let brokers = format!("127.0.0.1:{port}");
    let (users, input) = users_and_orders_on(&brokers, USERS, ORDERS, 1).await;
    let mut files = JobFiles::new(&input);
    files.brokers = brokers.clone();
    let job = files.write(
        Some(&format!("[{{ name: users, topic: '{users}' }}]")),
        JOIN_USERS,
        "recovery_timeout_s: 120",
    );
    let job_text = std::fs::read_to_string(&job).unwrap().replace(
        "session.timeout.ms: '3000' }",
        "session.timeout.ms: '3000' }, stall_timeout_s: 2",
    );
    assert!(job_text.contains("stall_timeout_s: 2"), "{job_text}");
    std::fs::write(&job, job_text).unwrap();
    let enricher = TributaryProcess::start(&["enrich"], &job, &[]);
    // Paused while the backlog is being written out.
    let deadline = Instant::now() + Duration::from_secs(60);
    while files.metric("tributary_enrich_events_out_total").await < 10_000.0 {
        assert!(Instant::now() < deadline, "log:\n{}", enricher.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pause = |signal: &str| {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &broker.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    pause("STOP");
    tokio::time::sleep(Duration::from_secs(6)).await;
    pause("CONT");
    let out = read_raw_from(
        &brokers,
        &files.output,
        Duration::from_secs(120),
        move |r| r.len() as u64 >= ORDERS && order_ids(r).len() as u64 == ORDERS,
    )
    .await;
    assert_all_enriched(&out, ORDERS, USERS);
    let log = enricher.log();
    assert!(
        log.contains("job interrupted; starting it again from the committed offsets"),
        "log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_instances_split_the_partitions_and_together_enrich_everything() {
    two_instances("").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_exactly_once_instances_abort_on_rebalance_and_lose_nothing() {
    two_instances("delivery: exactly_once\ncommit_interval_ms: 2000").await;
}

/// Two instances of one job (`extra`: more settings), started together: the
/// second one's arrival revokes partitions from the first.
async fn two_instances(extra: &str) {
    const ORDERS: u64 = 20_000;
    const USERS: u64 = 500;
    let (users, input) = users_and_orders(USERS, 0, 4).await;
    let files: Vec<JobFiles> = (0..2).map(|_| JobFiles::new(&input)).collect();
    let tables = format!("[{{ name: users, topic: '{users}' }}]");
    // Orders keep arriving while the second instance joins.
    let producer = {
        let input = input.clone();
        tokio::spawn(async move {
            for chunk in 0..ORDERS / 1000 {
                produce_orders(&input, chunk * 1000..(chunk + 1) * 1000, USERS, 4).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    // Each instance has its own data directory, port and transactional id; both are one group.
    let start = |i: usize| {
        let job = files[i].write(Some(&tables), JOIN_USERS, extra);
        let instance = format!("instance-{i}");
        TributaryProcess::start_with_env(
            &["enrich"],
            &job,
            &[],
            &[("TRIBUTARY_INSTANCE", &instance)],
        )
    };
    let first = start(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while files[0].metric("tributary_enrich_events_out_total").await < 1.0 {
        assert!(Instant::now() < deadline, "log:\n{}", first.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let processes = [first, start(1)];
    producer.await.unwrap();
    let out = read_raw(&files[0].output, Duration::from_secs(120), move |r| {
        r.len() as u64 >= ORDERS && order_ids(r).len() as u64 == ORDERS
    })
    .await;
    assert_all_enriched(&out, ORDERS, USERS);
    // Held partitions are exported every 2 s.
    let mut shares = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while shares.is_empty() || (Instant::now() < deadline && shares.iter().any(|(_, h)| *h < 1.0)) {
        shares.clear();
        for f in &files {
            let held = f.metric("tributary_table_ready{table=\"users\"").await;
            shares.push((f.metric("tributary_enrich_events_in_total").await, held));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        shares
            .iter()
            .all(|(events, held)| *events > 0.0 && *held >= 1.0 && *held < 4.0),
        "each instance enriches events of, and holds, part of the partitions: {shares:?}; logs:\n{}\n{}",
        processes[0].log(),
        processes[1].log()
    );
    if extra.contains("exactly_once") {
        assert!(
            processes[0]
                .log()
                .contains("partitions revoked: aborting the open transaction"),
            "the first instance aborts its transaction when the second joins; log:\n{}",
            processes[0].log()
        );
    }
}

/// Committed offsets of `group` on `topic`'s partitions.
async fn committed(group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    use rdkafka::consumer::Consumer;
    use tributary_kafka::BaseConsumer;
    let (group, topic) = (group.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = tributary_kafka::KafkaConfig::plaintext(&brokers())
            .consumer("test", &group)
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(&topic, p);
        }
        let offsets = consumer
            .committed_offsets(tpl, Duration::from_secs(10))
            .unwrap();
        (0..partitions)
            .map(|p| {
                offsets
                    .find_partition(&topic, p)
                    .and_then(|e| e.offset().to_raw())
                    .unwrap_or(-1)
            })
            .collect()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_commits_outputs_and_offsets_in_transactions() {
    let input = unique("eos");
    create_topic_with(&input, 2, "delete").await;
    let batch = |ids: std::ops::Range<u64>| -> Vec<Produced> {
        ids.map(|n| {
            let value = json!({ "order_id": n }).to_string().into_bytes();
            ((n % 2) as i32, None, Some(value))
        })
        .collect()
    };
    produce_raw(&input, &batch(0..5000)).await;
    let files = JobFiles::new(&input);
    let job = files.write(
        None,
        "[]",
        "delivery: exactly_once\ncommit_interval_ms: 100",
    );
    let enricher = TributaryProcess::start(&["enrich"], &job, &[]);
    // The reader is read_committed (librdkafka's default): it sees committed transactions only.
    let out = read_raw(&files.output, Duration::from_secs(60), |r| r.len() >= 5000).await;
    assert_eq!(
        order_ids(&out),
        (0..5000).collect(),
        "log:\n{}",
        enricher.log()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while committed(&files.group, &input, 2).await != [2500, 2500] {
        assert!(
            Instant::now() < deadline,
            "offsets are committed with the outputs"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (clean, log) = enricher.terminate(Duration::from_secs(30));
    assert!(clean, "log:\n{log}");
    assert!(log.contains("exactly-once"), "log:\n{log}");

    // A restart resumes after the committed offsets: nothing is enriched twice.
    produce_raw(&input, &batch(5000..6000)).await;
    let _enricher = TributaryProcess::start(&["enrich"], &job, &[]);
    let out = read_raw(&files.output, Duration::from_secs(60), |r| r.len() >= 6000).await;
    assert_eq!(order_ids(&out), (0..6000).collect());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let out = read_raw(&files.output, Duration::from_secs(2), |_| false).await;
    assert_eq!(out.len(), 6000, "no event enriched twice");
    assert_eq!(committed(&files.group, &input, 2).await, [3000, 3000]);
}

#[tokio::test(flavor = "multi_thread")]
async fn missed_rows_are_retried_after_a_delay_then_dead_lettered() {
    let (users, input) = users_and_orders(10, 0, 2).await;
    let files = JobFiles::new(&input);
    let retry_topic = format!("{input}.retry");
    let job = files.write(
        Some(&format!("[{{ name: users, topic: '{users}' }}]")),
        "[{ table: users, key: user_id, select: [name], type: inner, on_miss: retry }]",
        "",
    );
    // The job is the file's last entry: its `retry` section goes at the end.
    let mut text = std::fs::read_to_string(&job).unwrap();
    text.push_str(&format!(
        "    retry: {{ topic: '{retry_topic}', delay_ms: 1500, max_attempts: 3 }}\n"
    ));
    std::fs::write(&job, text).unwrap();
    // Order 1's user exists, order 2's arrives a second late, order 3's never does.
    let orders = [order(1, 3, 2), order(2, 42, 2), order(3, 77, 2)];
    produce_raw(&input, &orders).await;
    let started = Instant::now();
    let enricher = TributaryProcess::start(&["enrich"], &job, &[]);
    read_raw(&files.output, Duration::from_secs(30), |r| {
        order_ids(r).contains(&1)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let late_user = json!({ "id": 42, "name": "user 42" })
        .to_string()
        .into_bytes();
    produce(&users, 2, &[(json!({ "id": 42 }), Some(late_user))]).await;

    let out = read_raw(&files.output, Duration::from_secs(30), |r| {
        order_ids(r).contains(&2)
    })
    .await;
    let late = out
        .iter()
        .map(RawRecord::json)
        .find(|e| e["order_id"] == 2)
        .unwrap_or_else(|| {
            panic!(
                "order 2 is enriched once its user arrives; log:\n{}",
                enricher.log()
            )
        });
    assert_eq!(late["name"], "user 42");
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "not before the delay"
    );

    let dead = read_raw(&files.dead_letter, Duration::from_secs(30), |r| {
        !r.is_empty()
    })
    .await;
    assert_eq!(dead.len(), 1, "log:\n{}", enricher.log());
    assert_eq!(
        dead[0].headers["tributary.error"],
        "join `users`: no row with key 77 (after 3 attempts)"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(3000),
        "two delays before giving up"
    );
    // Dead letters and outputs name the input record, not the retry record.
    assert_eq!(dead[0].headers["tributary.source.topic"], input);
    assert_eq!(dead[0].value.as_deref(), orders[2].2.as_deref());
    let retried = read_raw(&retry_topic, Duration::from_secs(2), |_| false).await;
    let attempts_of_3: Vec<&str> = retried
        .iter()
        .filter(|r| r.json()["order_id"] == 3)
        .map(|r| r.headers["tributary.attempt"].as_str())
        .collect();
    assert_eq!(attempts_of_3, ["2", "3"]);
    assert!(
        retried
            .iter()
            .all(|r| r.headers["tributary.source.topic"] == input)
    );
    assert_eq!(
        files.metric("tributary_enrich_retried_total").await,
        retried.len() as f64
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn events_wait_in_the_retry_topic_while_a_remote_table_is_unavailable() {
    use axum::extract::Path;
    use axum::http::StatusCode;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    // A catalog service that answers 503 until it is up.
    let up = Arc::new(AtomicBool::new(false));
    let serving = up.clone();
    let app = axum::Router::new().route(
        "/products/{sku}",
        axum::routing::get(move |Path(sku): Path<String>| {
            let up = serving.load(Ordering::SeqCst);
            async move {
                if up {
                    (
                        StatusCode::OK,
                        json!({ "sku": sku, "title": format!("title of {sku}") }).to_string(),
                    )
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, String::new())
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let input = unique("outage");
    create_topic_with(&input, 1, "delete").await;
    let events: Vec<Produced> = (0..3u64)
        .map(|n| {
            (
                0,
                None,
                Some(
                    json!({ "order_id": n, "sku": format!("S{n}") })
                        .to_string()
                        .into_bytes(),
                ),
            )
        })
        .collect();
    produce_raw(&input, &events).await;
    let files = JobFiles::new(&input);
    // A SQL job, whose remote table is declared in the SQL.
    let job = files.write_sql(
        "[]",
        &format!(
            "CREATE TABLE catalog (PRIMARY KEY (sku) NOT ENFORCED)
  WITH (http.url = 'http://127.0.0.1:{port}/products/{{sku}}', retries.max = 0);
CREATE JOB shop WITH (dead_letter_topic = '$DLQ', group_id = '$GROUP', c.on_miss = 'dlq',
  retry_topic = '{input}.retry', retry_delay_ms = 1000, retry_max_attempts = 20) AS
INSERT INTO enriched
SELECT o.*, c.title FROM orders AS o
JOIN catalog FOR SYSTEM_TIME AS OF o.proc_time AS c ON c.sku = o.sku;"
        ),
    );
    let enricher = TributaryProcess::start(&["enrich"], &job, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while files.metric("tributary_enrich_retried_total").await < 3.0 {
        assert!(
            Instant::now() < deadline,
            "no retries; log:\n{}",
            enricher.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    up.store(true, Ordering::SeqCst);
    let out = read_raw(&files.output, Duration::from_secs(30), |r| r.len() >= 3).await;
    assert_eq!(
        order_ids(&out),
        (0..3).collect(),
        "log:\n{}",
        enricher.log()
    );
    for record in &out {
        let event = record.json();
        assert_eq!(
            event["title"],
            format!("title of {}", event["sku"].as_str().unwrap())
        );
    }
    let dead = read_raw(&files.dead_letter, Duration::from_secs(1), |_| false).await;
    assert!(
        dead.is_empty(),
        "an outage is waited out, not dead-lettered: {dead:?}"
    );
}

/// An as-of join on the real stack: a user's changes in MariaDB ≥ 1.2 s apart
/// (binlog times are whole seconds), then orders placed between them,
/// produced afterwards in reverse time order and enriched late in a bounded
/// run: each carries the user as the database showed it when the order was
/// placed (the update log, noted here), through an update, a delete and a
/// re-insert; a user inserted later is absent before its insert.
#[tokio::test(flavor = "multi_thread")]
async fn late_orders_are_enriched_with_the_user_as_it_was_when_each_was_placed() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "asof").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.users (id BIGINT PRIMARY KEY, tier VARCHAR(20))"
    ))
    .await
    .unwrap();
    conn.query_drop(format!(
        "INSERT INTO `{db}`.users VALUES (1, 'free'), (2, 'free')"
    ))
    .await
    .unwrap();
    let capture = CaptureSetup::new(&db, "").with_snapshot(100);
    let _capture = TributaryProcess::capture(&capture.yaml());
    // Wait for the snapshot before changing anything.
    read_raw(&capture.topic("users"), Duration::from_secs(60), |r| {
        r.len() >= 2
    })
    .await;
    let steps = [
        (1, "UPDATE `{db}`.users SET tier = 'pro' WHERE id = 1"),
        (3, "INSERT INTO `{db}`.users VALUES (3, 'new')"),
        (2, "UPDATE `{db}`.users SET tier = 'gold' WHERE id = 2"),
        (1, "DELETE FROM `{db}`.users WHERE id = 1"),
        (1, "INSERT INTO `{db}`.users VALUES (1, 'back')"),
        (2, "UPDATE `{db}`.users SET tier = 'platinum' WHERE id = 2"),
    ];
    let log = timed_changes::run(&mut conn, &db, &steps).await;
    // Every change is in the topic (an update is one record, a delete two).
    let records = 2 + steps.len() + 1;
    read_raw(&capture.topic("users"), Duration::from_secs(60), move |r| {
        r.len() >= records
    })
    .await;

    let orders = unique("orders");
    create_topic_with(&orders, 3, "delete").await;
    let mut placed: Vec<(u64, u64, i64)> = log
        .probe_times()
        .into_iter()
        .chain([
            (3, log.changes[0].after_us),
            (2, log.changes[0].before_us - 5_000_000),
        ])
        .enumerate()
        .map(|(n, (id, t))| (n as u64, id as u64, t))
        .collect();
    placed.sort_by_key(|(_, _, t)| std::cmp::Reverse(*t));
    let records: Vec<Produced> = placed
        .iter()
        .map(|&(order_id, user_id, t)| {
            let event = json!({ "order_id": order_id, "user_id": user_id, "placed_at": t });
            order_event(order_id, user_id, &event, 3)
        })
        .collect();
    produce_raw(&orders, &records).await;

    let files = JobFiles::new(&orders);
    let job = files.write(
        Some(&format!(
            "[{{ name: users, topic: '{}', versioned: {{ history: 30d }} }}]",
            capture.topic("users")
        )),
        "[{ table: users, key: user_id, select: [tier], as_of: { field: placed_at, unit: us } }]",
        "",
    );
    assert_eq!(
        bounded_run(&job, "beginning", "end").await,
        (placed.len() as u64, placed.len() as u64, 0)
    );
    let expected = placed.len();
    let out = read_raw(&files.output, Duration::from_secs(30), move |r| {
        r.len() >= expected
    })
    .await;
    assert_eq!(out.len(), placed.len());
    for record in &out {
        let event = record.json();
        let (id, t) = (
            event["user_id"].as_i64().unwrap(),
            event["placed_at"].as_i64().unwrap(),
        );
        let expected = log
            .state_at(id, t)
            .map_or(Json::Null, |row| row["tier"].clone());
        assert_eq!(event["tier"], expected, "user {id} as of {t}: {event}");
        assert_eq!(event.get("id"), None, "only the selected column: {event}");
    }
    // Every state of the log was joined somewhere, absence included.
    let tiers: BTreeSet<String> = out.iter().map(|r| r.json()["tier"].to_string()).collect();
    let states = ["free", "pro", "new", "gold", "back", "platinum"].map(|t| format!("\"{t}\""));
    for state in states.iter().map(String::as_str).chain(["null"]) {
        assert!(tiers.contains(state), "no order joined {state}: {tiers:?}");
    }
}
