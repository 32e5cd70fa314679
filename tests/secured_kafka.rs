//! Every component against a broker that speaks only mutual TLS
//! (`tests/common/secured.rs`): capture (snapshot, streaming, its position
//! reloaded after a restart), a local table served over the lookup API with
//! routing between two instances, an enrichment job with a remote table
//! invalidated by CDC, a bounded run, and `tributary tail`. The processes are
//! given the TLS address only; a client that ignored `kafka.security` would
//! fail its handshake. Then the failures: each bad certificate, a plaintext
//! client and a missing client certificate end the command within the connect
//! timeout with one line naming the broker and the cause, and nothing written;
//! `tributary validate` catches what can be caught offline without printing a secret.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::secured::{SCRAM_USER, SecuredBroker};
use common::*;
use mysql_async::prelude::Queryable;
use serde_json::{Value as Json, json};
use tributary_proto::grpc::v1::lookup_client::LookupClient;
use tributary_proto::grpc::v1::{self};
use tributary_proto::grpc::{from_json, to_json};

/// `(id, name)` rows of `db.table`, as capture writes them.
async fn db_rows(conn: &mut mysql_async::Conn, db: &str, table: &str) -> BTreeMap<i64, Json> {
    let rows: Vec<(i64, String)> = conn
        .query(format!("SELECT id, name FROM `{db}`.`{table}`"))
        .await
        .unwrap();
    rows.into_iter()
        .map(|(id, name)| (id, json!({ "id": id, "name": name })))
        .collect()
}

async fn insert(conn: &mut mysql_async::Conn, db: &str, table: &str, ids: std::ops::Range<i64>) {
    let values: Vec<String> = ids.map(|i| format!("({i}, '{table} {i}')")).collect();
    conn.query_drop(format!(
        "INSERT INTO `{db}`.`{table}` VALUES {}",
        values.join(",")
    ))
    .await
    .unwrap();
}

async fn id_name_table(conn: &mut mysql_async::Conn, db: &str, table: &str, rows: i64) {
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.`{table}` (id BIGINT PRIMARY KEY, name VARCHAR(64))"
    ))
    .await
    .unwrap();
    insert(conn, db, table, 1..rows + 1).await;
}

/// The capture config of `setup` with the secured broker's `kafka:` section.
fn capture_yaml(setup: &CaptureSetup, broker: &SecuredBroker) -> String {
    let plain = format!("kafka: {{ brokers: '{}' }}", brokers());
    let yaml = setup.yaml();
    assert!(yaml.contains(&plain));
    yaml.replace(&plain, &broker.section(""))
}

/// A row looked up through an instance's API.
async fn lookup(client: &mut LookupClient<tonic::transport::Channel>, id: i64) -> Option<Json> {
    let response = client
        .get(v1::GetRequest {
            table: "items".into(),
            key: Some(from_json(&json!(id))),
            min_position: None,
            as_of_us: None,
        })
        .await
        .ok()?
        .into_inner();
    response.row.map(|r| to_json(&r).unwrap())
}

/// A capture through `broker` of a fresh `items` table and what it should show.
struct Captured {
    topic: String,
    /// The capture config (its `kafka:` section is the broker's).
    config: std::path::PathBuf,
    /// The table's rows once every change below was made.
    expected: BTreeMap<i64, Json>,
    /// Capture, still running.
    capture: TributaryProcess,
}

impl Captured {
    /// Stops capture, which must exit cleanly.
    fn stop(self) {
        let (clean, log) = self.capture.terminate(Duration::from_secs(30));
        assert!(clean, "capture log:\n{log}");
    }
}

/// Captures `rows` rows (the snapshot), `rows / 4` more while streaming, stops
/// capture cleanly, inserts `rows / 4` more and starts it again: the topic
/// replays to the table, and the snapshot was taken once (its position reloaded).
async fn capture_with_a_restart(
    conn: &mut mysql_async::Conn,
    broker: &SecuredBroker,
    prefix: &str,
    rows: i64,
) -> Captured {
    let kafka = broker.kafka();
    let db = create_db(conn, prefix).await;
    id_name_table(conn, &db, "items", rows).await;
    let setup = CaptureSetup::new(&db, "").with_snapshot(50);
    let config = write_config(&capture_yaml(&setup, broker));
    let capture = TributaryProcess::start(&["capture"], &config, &[]);
    let topic = setup.topic("items");
    let snapshot = read_topic_from(&kafka, &topic, Duration::from_secs(90), move |r| {
        r.len() >= rows as usize
    })
    .await;
    assert_eq!(
        snapshot.len(),
        rows as usize,
        "capture log:\n{}",
        capture.log()
    );
    let (more, last) = (rows / 4, rows + rows / 2);
    insert(conn, &db, "items", rows + 1..rows + more + 1).await;
    conn.query_drop(format!(
        "UPDATE `{db}`.items SET name = 'renamed' WHERE id <= 10"
    ))
    .await
    .unwrap();
    let (clean, log) = capture.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    insert(conn, &db, "items", rows + more + 1..last + 1).await;
    let capture = TributaryProcess::start(&["capture"], &config, &[]);
    // Read until the topic holds every row, not only the last one written: the
    // table's partitions are read side by side, and one may come in behind another.
    let expected = db_rows(conn, &db, "items").await;
    let wanted = expected.clone();
    let records = read_topic_from(&kafka, &topic, Duration::from_secs(90), move |r| {
        replay_map(r) == wanted
    })
    .await;
    let snapshot_reads = records
        .iter()
        .filter(|r| r.value.as_ref().is_some_and(|v| v["op"] == "r"))
        .count();
    assert_eq!(
        snapshot_reads, rows as usize,
        "one snapshot: the stored position was reloaded"
    );
    assert_eq!(
        replay_map(&records),
        expected,
        "capture log:\n{}",
        capture.log()
    );
    Captured {
        topic,
        config,
        expected,
        capture,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn capture_tables_routing_and_tail_work_through_mutual_tls() {
    let broker = SecuredBroker::mutual_tls();
    let mut conn = root_conn().await;
    let captured = capture_with_a_restart(&mut conn, &broker, "tls", 200).await;
    let (topic, expected) = (&captured.topic, &captured.expected);

    // Two instances split the partitioned table and route lookups to each other.
    let group = unique("tls_tables");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let ports = [free_port(), free_port()];
    let metrics_ports = [free_port(), free_port()];
    let instances: Vec<TributaryProcess> = dirs
        .iter()
        .zip(ports.into_iter().zip(metrics_ports))
        .map(|(dir, (port, metrics))| {
            let yaml = format!(
                "data_dir: '{}'\ngroup_id: '{group}'\n{}\ntables:\n  - {{ name: items, topic: '{topic}', mode: partitioned }}\n\
                 grpc: {{ listen: '127.0.0.1:{port}', routing: {{ publish_interval_ms: 300 }} }}\nmetrics: {{ listen: '127.0.0.1:{metrics}' }}\n",
                dir.path().display(),
                broker.section(""),
            );
            TributaryProcess::start(&["serve"], &write_config(&yaml), &[])
        })
        .collect();

    // Every row is answered by the first instance, some of them through the
    // second: the routing topic, read and written through TLS, says who holds what.
    // Connected on first use: the instance may still be starting.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", ports[0]))
        .unwrap()
        .connect_lazy();
    let mut client = LookupClient::new(channel);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut wrong = 0;
        for (id, row) in expected {
            if lookup(&mut client, *id).await.as_ref() != Some(row) {
                wrong += 1;
            }
        }
        let forwarded = try_http_get(metrics_ports[0], "/metrics")
            .await
            .map_or(0.0, |(_, m)| {
                metric_sum(&m, "tributary_table_grpc_forwarded_total")
            });
        if wrong == 0 && forwarded > 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{wrong} of {} lookups differ from the database, {forwarded} forwarded; instance logs:\n{}\n---\n{}",
            expected.len(),
            instances[0].log(),
            instances[1].log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // `tributary tail` reads the topic with the capture config's kafka section.
    let tail = TributaryProcess::start(
        &["tail"],
        &captured.config,
        &["--topic", topic, "--idle-timeout", "5"],
    );
    let stdout = tail.stdout_path();
    let (ok, log) = tail.wait_exit(Duration::from_secs(60));
    assert!(ok, "{log}");
    let lines = std::fs::read_to_string(stdout).unwrap();
    let ids: std::collections::BTreeSet<i64> = lines
        .lines()
        .map(|l| serde_json::from_str::<Json>(l).unwrap())
        .filter_map(|l| l["key"]["id"].as_i64())
        .collect();
    assert_eq!(ids.len(), 300, "tail printed records of every row");
    for instance in instances {
        let (clean, log) = instance.terminate(Duration::from_secs(30));
        assert!(clean, "{log}");
    }
    captured.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_enrichment_job_with_a_cdc_invalidated_remote_table_and_a_bounded_run_work_through_mutual_tls()
 {
    let broker = SecuredBroker::mutual_tls();
    let kafka = broker.kafka();
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "tls_enrich").await;
    id_name_table(&mut conn, &db, "users", 20).await;
    let setup = CaptureSetup::new(&db, "").with_snapshot(100);
    let _capture = TributaryProcess::capture(&capture_yaml(&setup, &broker));
    let users_topic = setup.topic("users");
    read_topic_from(&kafka, &users_topic, Duration::from_secs(60), |r| {
        r.len() >= 20
    })
    .await;

    let orders = unique("tls_orders");
    create_topic_on(&kafka, &orders, 3, "delete").await;
    let order = |id: i64| -> Produced {
        let value = json!({ "order_id": id, "user_id": id % 20 + 1 }).to_string();
        (
            (id % 3) as i32,
            Some(json!({ "order_id": id }).to_string().into_bytes()),
            Some(value.into_bytes()),
        )
    };
    produce_raw_on(&kafka, &orders, &(0..30).map(order).collect::<Vec<_>>()).await;

    let dir = tempfile::tempdir().unwrap();
    let (host, port) = mysql_host_port();
    std::fs::write(
        dir.path().join("tables.yaml"),
        format!(
            "data_dir: '{}'\n{}\nremote:\n  - name: users\n    mysql: {{ url: 'mysql://root@{host}:{port}', table: '{db}.users', key: [id] }}\n    cache: {{ ttl_s: 3600 }}\n    invalidate_from: '{users_topic}'\n",
            dir.path().join("data").display(),
            broker.section(""),
        ),
    )
    .unwrap();
    let job = |name: &str, metrics: u16| {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &path,
            format!(
                "{}\ntables: tables.yaml\nmetrics: {{ listen: '127.0.0.1:{metrics}' }}\njobs:\n  - name: {name}\n    group_id: '{orders}.{name}'\n    input: {{ topics: ['{orders}'] }}\n    joins: [{{ table: users, key: user_id, select: [name], into: user }}]\n    output: {{ topic: '{orders}.{name}', key: order_id }}\n    dead_letter: {{ topic: '{orders}.{name}.dlq' }}\n",
                broker.section(", consumer: { session.timeout.ms: '6000' }"),
            ),
        )
        .unwrap();
        path
    };
    let metrics_port = free_port();
    let enrich = TributaryProcess::start(&["enrich"], &job("live", metrics_port), &[]);
    let output = format!("{orders}.live");
    let name_of = |r: &Record| -> (i64, String) {
        let v = r.value.as_ref().unwrap();
        (
            v["order_id"].as_i64().unwrap(),
            v["user"]["name"].as_str().unwrap().to_owned(),
        )
    };
    let first = read_topic_from(&kafka, &output, Duration::from_secs(90), |r| r.len() >= 30).await;
    assert_eq!(first.len(), 30, "enrich log:\n{}", enrich.log());
    for (order_id, name) in first.iter().map(name_of) {
        assert_eq!(name, format!("users {}", order_id % 20 + 1));
    }

    // A change in the database evicts the cached rows through the change topic
    // (the cache would keep them an hour): later orders see the new names.
    conn.query_drop(format!(
        "UPDATE `{db}`.users SET name = CONCAT('renamed ', id) WHERE id <= 5"
    ))
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, metrics) = http_get(metrics_port, "/metrics").await;
        if metric_sum(&metrics, "tributary_table_remote_invalidations_total") >= 5.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no invalidations; log:\n{}",
            enrich.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    produce_raw_on(&kafka, &orders, &(30..60).map(order).collect::<Vec<_>>()).await;
    let all = read_topic_from(&kafka, &output, Duration::from_secs(60), |r| r.len() >= 60).await;
    let names: BTreeMap<i64, String> = db_rows(&mut conn, &db, "users")
        .await
        .into_iter()
        .map(|(id, row)| (id, row["name"].as_str().unwrap().to_owned()))
        .collect();
    for (order_id, name) in all.iter().map(name_of).filter(|(id, _)| *id >= 30) {
        assert_eq!(name, names[&(order_id % 20 + 1)], "order {order_id}");
    }
    let (clean, log) = enrich.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");

    // A bounded run over the same input ends by itself and enriches every order.
    let bounded = TributaryProcess::start(
        &["enrich"],
        &job("replay", free_port()),
        &["--from", "beginning", "--until", "end"],
    );
    let (ok, log) = bounded.wait_exit(Duration::from_secs(120));
    assert!(ok, "{log}");
    let replayed = read_topic_from(
        &kafka,
        &format!("{orders}.replay"),
        Duration::from_secs(30),
        |r| r.len() >= 60,
    )
    .await;
    assert_eq!(replayed.len(), 60);
}

/// Runs `tributary <command>` with `config` and returns its stderr once it has
/// exited, asserting it failed within `within`.
fn fails(command: &[&str], config: &str, extra: &[&str], within: Duration) -> String {
    let started = Instant::now();
    let process = TributaryProcess::start(command, &write_config(config), extra);
    let (ok, log) = process.wait_exit(within + Duration::from_secs(15));
    assert!(!ok, "{command:?} succeeded:\n{log}");
    assert!(
        started.elapsed() < within,
        "{command:?} took {:?}:\n{log}",
        started.elapsed()
    );
    log
}

/// The single error line of a failed command's log.
fn error_line(log: &str) -> &str {
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("Error:") || l.contains(" ERROR "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line:\n{log}");
    errors[0]
}

/// The topics of a cluster.
fn topics_of(kafka: &tributary_kafka::KafkaConfig) -> Vec<String> {
    use rdkafka::consumer::Consumer;
    use tributary_kafka::BaseConsumer;
    let client: BaseConsumer = kafka.consumer("test", "test-topics").create().unwrap();
    let metadata = client
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    metadata
        .topics()
        .iter()
        .map(|t| t.name().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_certificates_and_plaintext_clients_fail_fast_naming_the_broker_and_the_cause() {
    let db = create_db(&mut root_conn().await, "tls_fail").await;
    for (server, cause) in [
        ("server-untrusted", "certificate verify failed"),
        ("server-expired", "certificate expired"),
    ] {
        let broker = SecuredBroker::presenting(server);
        let setup = CaptureSetup::new(&db, "").with_snapshot(10);
        let log = fails(
            &["capture"],
            &capture_yaml(&setup, &broker),
            &[],
            Duration::from_secs(30),
        );
        let line = error_line(&log);
        assert!(
            line.contains(&format!("cannot reach Kafka at {}", broker.address()))
                && line.contains(cause),
            "{server}: {line}"
        );
        // Nothing was written: seen by a client that accepts this certificate.
        let mut inspector = broker.kafka();
        inspector
            .properties
            .insert("enable.ssl.certificate.verification".into(), "false".into());
        let written: Vec<String> = topics_of(&inspector)
            .into_iter()
            .filter(|t| t.starts_with(&setup.server_name))
            .collect();
        assert!(written.is_empty(), "{server}: capture wrote {written:?}");
    }

    let broker = SecuredBroker::mutual_tls();
    let topic = unique("tls_fail");
    create_topic_on(&broker.kafka(), &topic, 1, "delete").await;
    let plaintext = format!(
        "kafka: {{ brokers: '{}', connect_timeout_s: 5 }}\n",
        broker.address()
    );
    let line = error_line(&fails(
        &["tail"],
        &plaintext,
        &["--topic", &topic],
        Duration::from_secs(30),
    ))
    .to_owned();
    assert!(
        line.contains(&format!("cannot reach Kafka at {}", broker.address()))
            && line.contains("no answer within 5 s"),
        "plaintext client: {line}"
    );
    let no_client_cert = format!(
        "kafka: {{ brokers: '{}', connect_timeout_s: 5, security: {{ protocol: ssl, tls: {{ ca_file: '{}' }} }} }}\n",
        broker.address(),
        broker.pki.path("ca.pem")
    );
    let line = error_line(&fails(
        &["tail"],
        &no_client_cert,
        &["--topic", &topic],
        Duration::from_secs(30),
    ))
    .to_owned();
    assert!(
        line.contains(&format!("cannot reach Kafka at {}", broker.address())),
        "no client certificate: {line}"
    );
}

#[test]
fn validate_names_the_field_offline_and_never_prints_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "hunter2-do-not-print";
    let password = dir.path().join("password");
    std::fs::write(&password, format!("{secret}\n")).unwrap();
    let pki = Pki::new();
    let base = |security: &str| {
        format!(
            "data_dir: /tmp/unused\nkafka: {{ brokers: 'kafka:9093', security: {security} }}\ntables: [{{ name: t, topic: t }}]\n"
        )
    };
    let validate = |text: &str| {
        let path = write_config(text);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tributary"))
            .arg("validate")
            .arg(&path)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains(secret), "printed the secret:\n{text}");
        (out.status.success(), text)
    };
    let sasl = |extra: &str| {
        format!(
            "{{ protocol: sasl_ssl, tls: {{ ca_file: '{}' }}, sasl: {{ mechanism: SCRAM-SHA-512, username: tributary{extra} }} }}",
            pki.path("ca.pem")
        )
    };
    let (ok, text) = validate(&base(&sasl(&format!(
        ", password_file: '{}'",
        password.display()
    ))));
    assert!(ok, "{text}");
    for (security, field) in [
        (
            "{ protocol: ssl, tls: { ca_file: /nonexistent/ca.pem } }".to_owned(),
            "kafka.security.tls.ca_file",
        ),
        (
            format!(
                "{{ protocol: ssl, tls: {{ cert_file: '{}', key_file: /nonexistent/client.key }} }}",
                pki.path("client.pem")
            ),
            "kafka.security.tls.key_file",
        ),
        ("{ protocol: tls }".to_owned(), "kafka.security.protocol"),
        (sasl(""), "kafka.security.sasl.password_file"),
        (
            sasl(", password_env: TRIBUTARY_TEST_NO_SUCH_VARIABLE"),
            "kafka.security.sasl.password_env",
        ),
        (
            format!(
                "{{ protocol: sasl_ssl, sasl: {{ mechanism: GSSAPI, username: u, password_file: '{}' }} }}",
                password.display()
            ),
            "kafka.security.sasl.mechanism",
        ),
    ] {
        let (ok, text) = validate(&base(&security));
        assert!(
            !ok && text.contains(field),
            "{security}: expected {field}:\n{text}"
        );
    }
    // A secret in a pass-through map is refused, and not echoed.
    let inline = format!(
        "data_dir: /tmp/unused\nkafka: {{ brokers: 'kafka:9093', properties: {{ sasl.password: '{secret}' }} }}\ntables: [{{ name: t, topic: t }}]\n"
    );
    let (ok, text) = validate(&inline);
    assert!(
        !ok && text.contains("kafka.properties.sasl.password"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn capture_a_local_table_a_bounded_job_and_tail_authenticate_with_scram_over_tls() {
    let broker = SecuredBroker::scram();
    let kafka = broker.kafka();
    let mut conn = root_conn().await;
    let captured = capture_with_a_restart(&mut conn, &broker, "scram", 100).await;
    let (topic, expected) = (&captured.topic, &captured.expected);

    // A bounded job joins orders with a local table materialized from the change topic.
    let orders = unique("scram_orders");
    create_topic_on(&kafka, &orders, 2, "delete").await;
    let placed: Vec<Produced> = (0..40i64)
        .map(|id| {
            let value = json!({ "order_id": id, "item_id": id % 150 + 1 }).to_string();
            (
                (id % 2) as i32,
                Some(json!({ "order_id": id }).to_string().into_bytes()),
                Some(value.into_bytes()),
            )
        })
        .collect();
    produce_raw_on(&kafka, &orders, &placed).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tables.yaml"),
        format!(
            "data_dir: '{}'\n{}\ntables:\n  - {{ name: items, topic: '{topic}', mode: global }}\n",
            dir.path().join("data").display(),
            broker.section(""),
        ),
    )
    .unwrap();
    let job = dir.path().join("job.yaml");
    std::fs::write(
        &job,
        format!(
            "{}\ntables: tables.yaml\nmetrics: {{ listen: '127.0.0.1:0' }}\njobs:\n  - name: scram\n    group_id: '{orders}.group'\n    input: {{ topics: ['{orders}'] }}\n    joins: [{{ table: items, key: item_id, select: [name], into: item }}]\n    output: {{ topic: '{orders}.out', key: order_id }}\n    dead_letter: {{ topic: '{orders}.dlq' }}\n",
            broker.section(""),
        ),
    )
    .unwrap();
    let run = TributaryProcess::start(
        &["enrich"],
        &job,
        &["--from", "beginning", "--until", "end"],
    );
    let (ok, log) = run.wait_exit(Duration::from_secs(90));
    assert!(ok, "{log}");
    let out = read_topic_from(
        &kafka,
        &format!("{orders}.out"),
        Duration::from_secs(30),
        |r| r.len() >= 40,
    )
    .await;
    assert_eq!(out.len(), 40);
    for record in &out {
        let v = record.value.as_ref().unwrap();
        let item = v["item_id"].as_i64().unwrap();
        assert_eq!(
            v["item"]["name"], expected[&item]["name"],
            "order {}",
            v["order_id"]
        );
    }

    // `tributary tail` with SCRAM-SHA-256, the user's other credential.
    let tail_config = write_config(&broker.scram_section(
        "SCRAM-SHA-256",
        SCRAM_USER,
        &password_file_of(&broker),
        "",
    ));
    let tail = TributaryProcess::start(
        &["tail"],
        &tail_config,
        &["--topic", topic, "--idle-timeout", "5"],
    );
    let stdout = tail.stdout_path();
    let (ok, log) = tail.wait_exit(Duration::from_secs(60));
    assert!(ok, "{log}");
    let ids: std::collections::BTreeSet<i64> = std::fs::read_to_string(stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).unwrap()["key"]["id"].as_i64())
        .collect();
    assert_eq!(ids.len(), 150);
    captured.stop();
}

/// The password file a SCRAM broker's own section names.
fn password_file_of(broker: &SecuredBroker) -> std::path::PathBuf {
    let section = broker.kafka();
    section.security.sasl.unwrap().password_file.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_an_unknown_user_or_mechanism_fail_fast_and_write_nothing() {
    let broker = SecuredBroker::scram();
    let db = create_db(&mut root_conn().await, "scram_fail").await;
    let wrong = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(wrong.path(), "not-the-password\n").unwrap();
    let right = password_file_of(&broker);
    for (mechanism, user, password, cause) in [
        ("SCRAM-SHA-512", SCRAM_USER, wrong.path(), "invalid-proof"),
        ("SCRAM-SHA-256", "nobody", right.as_path(), "unknown-user"),
        ("PLAIN", SCRAM_USER, right.as_path(), "PLAIN"),
    ] {
        let section = broker.scram_section(mechanism, user, password, ", connect_timeout_s: 5");
        let setup = CaptureSetup::new(&db, "").with_snapshot(10);
        let plain = format!("kafka: {{ brokers: '{}' }}", brokers());
        let config = setup.yaml().replace(&plain, &section);
        let line =
            error_line(&fails(&["capture"], &config, &[], Duration::from_secs(30))).to_owned();
        assert!(
            line.contains(&format!("cannot reach Kafka at {}", broker.address()))
                && line.contains(cause),
            "{mechanism} as {user}: {line}"
        );
        let secret = std::fs::read_to_string(password).unwrap();
        assert!(
            !line.contains(secret.trim()),
            "the password is not printed: {line}"
        );
        let written: Vec<String> = topics_of(&broker.kafka())
            .into_iter()
            .filter(|t| t.starts_with(&setup.server_name))
            .collect();
        assert!(written.is_empty(), "{mechanism}: capture wrote {written:?}");
    }
}
