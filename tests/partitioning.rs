//! Tables over topics written the way applications write them, not only as
//! Kafka's Java client does: librdkafka's default partitioner (CRC32), murmur2
//! over keys with spaces, JsonConverter keys with a schema, integers written as
//! strings, a key that moved partitions. Global tables answer every key; a
//! partitioned table whose partitioner does not fit its topic fails loudly and
//! works once it is set right. Expectations come from what the test produced.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use prometheus_client::registry::Registry;
use serde_json::{Value as Json, json};
use tokio_util::sync::CancellationToken;
use tributary_proto::grpc::v1::{self, lookup_client::LookupClient};
use tributary_proto::grpc::{from_json, to_json};
use tributary_proto::partition::Partitioner;
use tributary_table_api::Table;
use tributary_tables::materializer::Materializer;
use tributary_tables::{TableError, TablesConfig, TablesMetrics};

const PARTITIONS: u32 = 3;

/// How a producer writes the key `{"id": N}`.
#[derive(Clone, Copy)]
enum KeyForm {
    /// `{"id": 7}`, as Python's `json.dumps`.
    Spaced,
    /// `{"id": "7"}`: the integer written as a string.
    QuotedSpaced,
    /// Kafka Connect's JsonConverter with schemas enabled.
    WithSchema,
}

impl KeyForm {
    fn key(self, id: u64) -> Vec<u8> {
        match self {
            KeyForm::Spaced => format!("{{\"id\": {id}}}"),
            KeyForm::QuotedSpaced => format!("{{\"id\": \"{id}\"}}"),
            KeyForm::WithSchema => format!(
                "{{\"schema\":{{\"type\":\"struct\",\"fields\":[{{\"type\":\"int64\",\"optional\":false,\
                 \"field\":\"id\"}}],\"optional\":false,\"name\":\"shop.shop.users.Key\"}},\
                 \"payload\":{{\"id\":{id}}}}}"
            ),
        }
        .into_bytes()
    }

    /// A Debezium change event (schema-wrapped for JsonConverter producers).
    fn value(self, op: &str, before: Option<&Json>, after: Option<&Json>) -> Vec<u8> {
        let event = json!({ "before": before, "after": after, "op": op, "source": { "ts_ms": 0 } });
        match self {
            KeyForm::WithSchema => {
                json!({ "schema": { "type": "struct", "name": "Envelope" }, "payload": event })
            }
            _ => event,
        }
        .to_string()
        .into_bytes()
    }
}

fn user(id: u64, name: &str, tier: &str) -> Json {
    json!({ "id": id, "name": name, "tier": tier })
}

/// A users change topic written by one producer, and the rows it should leave.
struct UsersTopic {
    topic: String,
    /// id → the row after the last change (`None`: deleted).
    expected: BTreeMap<u64, Option<Json>>,
}

/// Writes `n` users (creates; every 5th updated; every 7th deleted, with
/// Debezium's tombstone) with librdkafka's `partitioner` over keys in `form`.
async fn users_topic(n: u64, partitioner: &str, form: KeyForm) -> UsersTopic {
    let topic = unique("users");
    create_topic_with(&topic, PARTITIONS as i32, "compact").await;
    let mut expected = BTreeMap::new();
    let mut records = Vec::new();
    for id in 0..n {
        let created = user(id, &format!("user {id}"), "free");
        records.push((form.key(id), Some(form.value("c", None, Some(&created)))));
        expected.insert(id, Some(created.clone()));
        if id % 5 == 0 {
            let updated = user(id, &format!("user {id}"), "pro");
            records.push((
                form.key(id),
                Some(form.value("u", Some(&created), Some(&updated))),
            ));
            expected.insert(id, Some(updated));
        }
        if id % 7 == 0 {
            let before = expected[&id].clone();
            records.push((form.key(id), Some(form.value("d", before.as_ref(), None))));
            records.push((form.key(id), None));
            expected.insert(id, None);
        }
    }
    produce_partitioned(&topic, partitioner, &records).await;
    UsersTopic { topic, expected }
}

/// Moves live users `ids` to another partition, as a producer that changed
/// partitioners would (a newer version there), then tombstones their former
/// copies, as a clean-up of the old partition does.
async fn move_users(users: &mut UsersTopic, ids: &[u64], form: KeyForm) {
    let old: Vec<i32> = ids
        .iter()
        .map(|&id| Partitioner::ConsistentRandom.partition(&form.key(id), PARTITIONS))
        .collect();
    let moved: Vec<Produced> = ids
        .iter()
        .zip(&old)
        .map(|(&id, &p)| {
            let row = user(id, &format!("moved {id}"), "pro");
            let value = form.value("u", users.expected[&id].as_ref(), Some(&row));
            users.expected.insert(id, Some(row));
            ((p + 1) % PARTITIONS as i32, Some(form.key(id)), Some(value))
        })
        .collect();
    produce_raw(&users.topic, &moved).await;
    let cleanups: Vec<Produced> = ids
        .iter()
        .zip(&old)
        .map(|(&id, &p)| (p, Some(form.key(id)), None))
        .collect();
    produce_raw(&users.topic, &cleanups).await;
}

/// A tables file with a data directory of its own; `tables` is YAML of the list items.
fn tables_file(dir: &Path, tables: &[String]) -> PathBuf {
    tables_file_in(dir, &dir.join(unique("data")), tables)
}

/// A tables file keeping its tables in `data`.
fn tables_file_in(dir: &Path, data: &Path, tables: &[String]) -> PathBuf {
    let path = dir.join(format!("{}.yaml", unique("tables")));
    let text = format!(
        "data_dir: '{}'\ngroup_id: '{}'\nkafka: {{ brokers: '{}' }}\ntables:\n{}\n",
        data.display(),
        unique("grp"),
        brokers(),
        tables
            .iter()
            .map(|t| format!("  - {t}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A job enriching `input` with left joins (`table` into `field`, selecting name and tier).
fn job_file(dir: &Path, tables: &Path, input: &str, joins: &[(&str, &str)]) -> (PathBuf, String) {
    let output = format!("{input}.enriched");
    let joins: Vec<String> = joins
        .iter()
        .map(|(table, into)| {
            format!(
                "{{ table: {table}, key: user_id, select: [name, tier], into: {into}, type: left }}"
            )
        })
        .collect();
    let job = format!(
        "kafka: {{ brokers: '{}' }}\ntables: '{}'\nmetrics: {{ listen: '127.0.0.1:{}' }}\n\
         jobs:\n  - name: orders\n    group_id: '{}'\n    input: {{ topics: ['{input}'] }}\n    \
         joins: [{}]\n    output: {{ topic: '{output}', key: order_id }}\n    \
         dead_letter: {{ topic: '{input}.dlq' }}\n",
        brokers(),
        tables.display(),
        free_port(),
        unique("grp"),
        joins.join(", ")
    );
    let path = dir.join(format!("{}.yaml", unique("job")));
    std::fs::write(&path, job).unwrap();
    (path, output)
}

/// Runs the job over everything in its input and returns the enriched events by order id.
async fn run_to_end(job: &Path, output: &str, orders: usize) -> BTreeMap<u64, Json> {
    let run = TributaryProcess::start(&["enrich"], job, &["--from", "beginning", "--until", "end"]);
    let (ok, log) = tokio::task::spawn_blocking(move || run.wait_exit(Duration::from_secs(120)))
        .await
        .unwrap();
    assert!(ok, "the job failed; log:\n{log}");
    let out = read_raw(output, Duration::from_secs(30), move |r| r.len() >= orders).await;
    assert_eq!(out.len(), orders, "one output per order");
    out.iter()
        .map(|r| (r.json()["order_id"].as_u64().unwrap(), r.json()))
        .collect()
}

/// `tributary validate [--connect] FILE`: (success, stdout + stderr).
fn validate(file: &Path, connect: bool) -> (bool, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tributary"));
    command.arg("validate").arg(file);
    if connect {
        command.arg("--connect");
    }
    let out = command.env("TRIBUTARY_LOG", "warn").output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Starts an in-process materializer of `file`.
async fn materialize(file: &Path) -> Result<(Materializer, CancellationToken), TableError> {
    let config = TablesConfig::load(file).unwrap();
    let metrics = TablesMetrics::register(&mut Registry::default());
    let shutdown = CancellationToken::new();
    let materializer = Materializer::start(&config, metrics, shutdown.clone()).await?;
    Ok((materializer, shutdown))
}

async fn wait_serving(materializer: &Materializer) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !materializer.progress().serving() {
        assert!(
            Instant::now() < deadline,
            "tables not ready within a minute"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every difference between the table and `expected`, looking each id up as
/// a number, as a key object, and as a string.
async fn differences(table: &dyn Table, expected: &BTreeMap<u64, Option<Json>>) -> Vec<String> {
    let mut diffs = Vec::new();
    for (id, row) in expected {
        for key in [json!(id), json!({ "id": id }), json!(id.to_string())] {
            let got = table.get(&key).await.unwrap();
            if &got != row {
                diffs.push(format!(
                    "{} {key}: expected {row:?}, got {got:?}",
                    table.name()
                ));
            }
        }
    }
    diffs
}

/// Orders of live users only, so any null join is a miss; returns (order id, user id).
async fn orders_of(live: &[u64], count: u64) -> (String, Vec<(u64, u64)>) {
    let input = unique("orders");
    create_topic_with(&input, PARTITIONS as i32, "delete").await;
    let orders: Vec<(u64, u64)> = (0..count)
        .map(|o| (o, live[(o as usize * 7919) % live.len()]))
        .collect();
    let records: Vec<Produced> = orders
        .iter()
        .map(|&(o, u)| {
            let event = json!({ "order_id": o, "user_id": u, "amount": o % 97 });
            (
                (o % u64::from(PARTITIONS)) as i32,
                Some(json!({ "order_id": o }).to_string().into_bytes()),
                Some(event.to_string().into_bytes()),
            )
        })
        .collect();
    produce_raw(&input, &records).await;
    (input, orders)
}

/// The columns a join selects from the expected row.
fn selected(row: &Json) -> Json {
    json!({ "name": row["name"], "tier": row["tier"] })
}

#[tokio::test(flavor = "multi_thread")]
async fn our_partitioners_agree_with_librdkafkas() {
    let topic = unique("partitioners");
    create_topic_with(&topic, 7, "delete").await;
    let keys: Vec<Vec<u8>> = (0..60u64)
        .flat_map(|id| [KeyForm::Spaced, KeyForm::WithSchema].map(|f| f.key(id * 7_777)))
        .collect();
    for (librdkafka, ours) in [
        ("murmur2_random", Partitioner::Murmur2),
        ("consistent", Partitioner::Crc32),
        ("consistent_random", Partitioner::ConsistentRandom),
        ("fnv1a", Partitioner::Fnv1a),
    ] {
        let records: Vec<(Vec<u8>, Option<Vec<u8>>)> = keys
            .iter()
            .map(|k| (k.clone(), Some(b"{}".to_vec())))
            .collect();
        let landed = produce_partitioned(&topic, librdkafka, &records).await;
        let computed: Vec<i32> = keys.iter().map(|k| ours.partition(k, 7)).collect();
        assert_eq!(landed, computed, "{librdkafka}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn global_tables_answer_every_key_whatever_the_partitioner_and_key_form() {
    const USERS: u64 = 500;
    // librdkafka's default, as confluent-kafka for Python writes by default.
    let mut python = users_topic(USERS, "consistent_random", KeyForm::Spaced).await;
    move_users(&mut python, &[1, 2, 3, 4, 5, 6, 8, 9], KeyForm::Spaced).await;
    let quoted = users_topic(USERS, "murmur2_random", KeyForm::QuotedSpaced).await;
    let connect = users_topic(USERS, "murmur2_random", KeyForm::WithSchema).await;
    let dir = tempfile::tempdir().unwrap();
    let topics = [("py", &python), ("quoted", &quoted), ("connect", &connect)];
    let tables: Vec<String> = topics
        .iter()
        .map(|(name, t)| format!("{{ name: {name}, topic: '{}', mode: global }}", t.topic))
        .collect();
    let file = tables_file(dir.path(), &tables);

    let (materializer, shutdown) = materialize(&file).await.unwrap();
    wait_serving(&materializer).await;
    let mut diffs = Vec::new();
    for (table, (_, topic)) in materializer.tables().iter().zip(&topics) {
        diffs.extend(differences(table.as_ref(), &topic.expected).await);
    }
    assert!(diffs.is_empty(), "{} differences: {diffs:#?}", diffs.len());
    shutdown.cancel();
    materializer.join().await.unwrap();

    // An enrichment job joining all three gives every order its user.
    let live: Vec<u64> = (0..USERS).filter(|id| id % 7 != 0).collect();
    let (input, orders) = orders_of(&live, 2_000).await;
    let (job, output) = job_file(
        dir.path(),
        &file,
        &input,
        &[("py", "py"), ("quoted", "quoted"), ("connect", "connect")],
    );
    let enriched = run_to_end(&job, &output, orders.len()).await;
    for (order, user) in orders {
        let event = &enriched[&order];
        for (field, topic) in topics {
            let row = topic.expected[&user].as_ref().unwrap();
            assert_eq!(
                event[field],
                selected(row),
                "order {order} {field}: {event}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_whose_mode_changes_is_rebuilt_from_its_topic() {
    let users = users_topic(200, "consistent_random", KeyForm::Spaced).await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let partitioned = format!(
        "{{ name: users, topic: '{}', partitioner: consistent_random, key_format: json_spaced }}",
        users.topic
    );
    let global = format!("{{ name: users, topic: '{}', mode: global }}", users.topic);
    // Rows per partition (as a partitioned table, or a global one of an earlier
    // version), then one keyspace, then per partition again: each start finds
    // every stored offset at the topic's end, so only a rebuild can fill the table.
    for table in [&partitioned, &global, &partitioned] {
        let file = tables_file_in(dir.path(), &data, std::slice::from_ref(table));
        let (materializer, shutdown) = materialize(&file).await.unwrap();
        wait_serving(&materializer).await;
        let diffs = differences(materializer.tables()[0].as_ref(), &users.expected).await;
        assert!(diffs.is_empty(), "{table}: {diffs:#?}");
        shutdown.cancel();
        materializer.join().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_table_with_the_wrong_partitioner_fails_loudly_and_works_once_set_right() {
    const USERS: u64 = 300;
    let users = users_topic(USERS, "consistent_random", KeyForm::Spaced).await;
    let dir = tempfile::tempdir().unwrap();
    let defaults = tables_file(
        dir.path(),
        &[format!("{{ name: users, topic: '{}' }}", users.topic)],
    );

    // Offline validation cannot know; --connect samples the topic and refuses.
    assert!(validate(&defaults, false).0);
    let (ok, text) = validate(&defaults, true);
    assert!(!ok, "{text}");
    for expected in [
        "table users",
        &users.topic,
        "lookups would miss rows",
        "`partitioner: consistent_random, key_format: json_spaced`",
        "mode: global",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    // So does starting the table.
    match materialize(&defaults).await {
        Err(TableError::Partitioning { table, problem }) => {
            assert_eq!(table, "users");
            assert!(
                problem.contains("partitioner: crc32, key_format: json_spaced"),
                "{problem}"
            );
        }
        Err(other) => panic!("expected a partitioning error, got {other}"),
        Ok(_) => panic!("a table whose lookups would miss rows started"),
    }

    let fitting = tables_file(
        dir.path(),
        &[format!(
            "{{ name: users, topic: '{}', partitioner: consistent_random, key_format: json_spaced }}",
            users.topic
        )],
    );
    let (ok, text) = validate(&fitting, true);
    assert!(ok && text.contains("agree with"), "{text}");

    // A co-partitioned job: orders keyed like their user, by the same kind of producer.
    let live: Vec<u64> = (0..USERS).filter(|id| id % 7 != 0).collect();
    let input = unique("orders");
    create_topic_with(&input, PARTITIONS as i32, "delete").await;
    let orders: Vec<(u64, u64)> = (0..1_500)
        .map(|o| (o, live[o as usize % live.len()]))
        .collect();
    let records: Vec<(Vec<u8>, Option<Vec<u8>>)> = orders
        .iter()
        .map(|&(o, u)| {
            let event = json!({ "order_id": o, "user_id": u });
            (KeyForm::Spaced.key(u), Some(event.to_string().into_bytes()))
        })
        .collect();
    produce_partitioned(&input, "consistent_random", &records).await;
    let (job, output) = job_file(dir.path(), &fitting, &input, &[("users", "user")]);
    let enriched = run_to_end(&job, &output, orders.len()).await;
    for (order, user) in orders {
        let row = users.expected[&user].as_ref().unwrap();
        assert_eq!(enriched[&order]["user"], selected(row), "order {order}");
    }

    // The lookup API finds every user in the partition the table's partitioner gives it.
    let (port, grpc_port) = (free_port(), free_port());
    let served = dir.path().join("served.yaml");
    std::fs::write(
        &served,
        std::fs::read_to_string(&fitting).unwrap()
            + &format!(
                "metrics: {{ listen: '127.0.0.1:{port}' }}\ngrpc: {{ listen: '127.0.0.1:{grpc_port}' }}\n"
            ),
    )
    .unwrap();
    let tables = TributaryProcess::start(&["serve"], &served, &[]);
    wait_for_http(port, "/readyz", 200, &tables).await;
    let mut api = LookupClient::connect(format!("http://127.0.0.1:{grpc_port}"))
        .await
        .unwrap();
    let ids: Vec<u64> = users.expected.keys().copied().collect();
    let batch = v1::BatchGetRequest {
        table: "users".into(),
        keys: ids
            .iter()
            .map(|id| from_json(&json!({ "id": id })))
            .collect(),
        min_position: None,
        as_of_us: None,
    };
    let answers = api.batch_get(batch).await.unwrap().into_inner().results;
    for (id, answer) in ids.iter().zip(answers) {
        let row = answer.row.map(|r| to_json(&r).unwrap());
        assert_eq!(&row, &users.expected[id], "user {id} over the lookup API");
    }

    // Records a producer then puts elsewhere: counted, logged, not ready.
    let misplaced: Vec<Produced> = (USERS..USERS + 3)
        .map(|id| {
            let key = KeyForm::Spaced.key(id);
            let right = Partitioner::ConsistentRandom.partition(&key, PARTITIONS);
            let row = user(id, "late", "free");
            let value = KeyForm::Spaced.value("c", None, Some(&row));
            ((right + 1) % PARTITIONS as i32, Some(key), Some(value))
        })
        .collect();
    produce_raw(&users.topic, &misplaced).await;
    wait_for_http(port, "/readyz", 503, &tables).await;
    let (_, metrics) = http_get(port, "/metrics").await;
    assert_eq!(
        metric_sum(&metrics, "tributary_table_misplaced_records_total"),
        3.0,
        "{metrics}"
    );
    let log = tables.log();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("ERROR") && l.contains("is not on the partition"))
            .count(),
        3,
        "{log}"
    );
    assert!(log.contains(&users.topic), "{log}");
    // A user of a partition that received a misplaced record.
    let id = *ids
        .iter()
        .find(|&&id| {
            Partitioner::ConsistentRandom.partition(&KeyForm::Spaced.key(id), PARTITIONS)
                == misplaced[0].0
        })
        .unwrap();
    let get = v1::GetRequest {
        table: "users".into(),
        key: Some(from_json(&json!({ "id": id }))),
        min_position: None,
        as_of_us: None,
    };
    let described = api
        .describe_table(v1::DescribeTableRequest {
            table: "users".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!described.global && !described.ready, "{described:?}");
    let misplaced_counts: u64 = described
        .partitions
        .iter()
        .map(|p| p.misplaced_records)
        .sum();
    assert_eq!(misplaced_counts, 3, "{described:?}");
    let refused = api.get(get).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("its partitioner puts elsewhere"),
        "{refused:?}"
    );
}

/// Waits until `path` answers `status` (the process still running).
async fn wait_for_http(port: u16, path: &str, status: u16, process: &TributaryProcess) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while try_http_get(port, path).await.map(|(s, _)| s) != Some(status) {
        assert!(
            Instant::now() < deadline,
            "{path} never answered {status}; log:\n{}",
            process.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
