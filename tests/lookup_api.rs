//! The gRPC lookup API against the real stack: answers equal the database,
//! read-your-position, health after readiness, forwarding between instances,
//! TLS and tokens, malformed and oversized requests.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;
use prometheus_client::registry::Registry;
use serde_json::{Value as Json, json};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Request};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tributary_proto::grpc::v1::lookup_client::LookupClient;
use tributary_proto::grpc::v1::{self, scan_request::Range};
use tributary_proto::grpc::{from_json, to_json};
use tributary_tables::grpc::{LookupApi, ServedTables};
use tributary_tables::materializer::Materializer;
use tributary_tables::remote::RemoteTables;
use tributary_tables::{TablesConfig, TablesMetrics};

/// An in-process instance: materialized tables and their lookup API.
struct Instance {
    materializer: Materializer,
    api: LookupApi,
    remote: RemoteTables,
    registry: Registry,
    shutdown: CancellationToken,
}

impl Instance {
    async fn start(yaml: &str) -> Self {
        let config = TablesConfig::parse(yaml).unwrap();
        let mut registry = Registry::default();
        let metrics = TablesMetrics::register(&mut registry);
        let shutdown = CancellationToken::new();
        let materializer = Materializer::start(&config, metrics.clone(), shutdown.clone())
            .await
            .unwrap();
        let remote = tributary_tables::remote::start_all(&config, false, &metrics, &shutdown)
            .await
            .unwrap();
        let served = ServedTables {
            local: materializer.tables().to_vec(),
            progress: Some(materializer.progress()),
            remote: remote.tables.clone(),
        };
        let grpc = config.grpc.as_ref().unwrap();
        let api = tributary_tables::grpc::start(&config, grpc, served, metrics, shutdown.clone())
            .await
            .unwrap();
        Instance {
            materializer,
            remote,
            api,
            registry,
            shutdown,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.api.local_addr
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    async fn client(&self) -> LookupClient<Channel> {
        LookupClient::connect(self.url()).await.unwrap()
    }

    fn metric(&self, name: &str) -> f64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        metric_sum(&text, name)
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.materializer.join().await.unwrap();
        self.api.join().await.unwrap();
        self.remote.close().await;
    }
}

/// A tables file with one table and a `grpc:` section.
fn config_yaml(data_dir: &std::path::Path, group: &str, topic: &str, grpc: &str) -> String {
    format!(
        "data_dir: '{}'\ngroup_id: '{group}'\nkafka: {{ brokers: '{}' }}\ntables:\n  - {{ name: items, topic: '{topic}' }}\ngrpc: {grpc}\n",
        data_dir.display(),
        brokers(),
    )
}

fn key(json: Json) -> Option<v1::Value> {
    Some(from_json(&json))
}

fn get(key_json: Json) -> v1::GetRequest {
    v1::GetRequest {
        table: "items".into(),
        key: key(key_json),
        min_position: None,
        as_of_us: None,
    }
}

/// The lines `tributary lookup --endpoint <url> <args…>` prints, as JSON.
fn cli_lookup(url: &str, args: &[&str]) -> Vec<Json> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(["lookup", "--endpoint", url])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

fn row_of(response: v1::GetResponse) -> Option<Json> {
    assert_eq!(response.found, response.row.is_some());
    response.row.map(|r| to_json(&r).unwrap())
}

async fn scan_all(client: &mut LookupClient<Channel>, scan: v1::ScanRequest) -> Vec<(Json, Json)> {
    let mut stream = client.scan(scan).await.unwrap().into_inner();
    let mut rows = Vec::new();
    while let Some(row) = stream.message().await.unwrap() {
        rows.push((
            to_json(&row.key.unwrap()).unwrap(),
            to_json(&row.row.unwrap()).unwrap(),
        ));
    }
    rows
}

fn scan(range: Option<Range>, limit: u32) -> v1::ScanRequest {
    v1::ScanRequest {
        table: "items".into(),
        range,
        limit,
        min_position: None,
    }
}

async fn health_of(channel: Channel) -> ServingStatus {
    let mut health = HealthClient::new(channel);
    let answer = health
        .check(HealthCheckRequest {
            service: "tributary.v1.Lookup".into(),
        })
        .await
        .unwrap()
        .into_inner();
    ServingStatus::try_from(answer.status).unwrap()
}

/// The `items` rows of the database, as capture writes them.
async fn db_rows(conn: &mut mysql_async::Conn, db: &str) -> BTreeMap<i64, Json> {
    let rows: Vec<(i64, String, i64)> = conn
        .query(format!("SELECT id, name, qty FROM `{db}`.items"))
        .await
        .unwrap();
    rows.into_iter()
        .map(|(id, name, qty)| (id, json!({ "id": id, "name": name, "qty": qty })))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn lookups_equal_the_database_health_follows_readiness_and_reads_see_their_writes() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "api").await;
    conn.query_drop(format!(
        "CREATE TABLE `{db}`.items (id BIGINT PRIMARY KEY, name VARCHAR(40), qty INT)"
    ))
    .await
    .unwrap();
    for chunk in (1..=3000).collect::<Vec<i64>>().chunks(1000) {
        let values: Vec<String> = chunk
            .iter()
            .map(|i| format!("({i}, 'item {i}', {})", i * 3))
            .collect();
        conn.query_drop(format!(
            "INSERT INTO `{db}`.items VALUES {}",
            values.join(",")
        ))
        .await
        .unwrap();
    }
    let setup = CaptureSetup::new(&db, "").with_snapshot(500);
    let _capture = TributaryProcess::capture(&setup.yaml());
    let data = tempfile::tempdir().unwrap();
    let grpc = format!("{{ listen: '127.0.0.1:{}' }}", free_port());
    let instance = Instance::start(&config_yaml(
        data.path(),
        &unique("api"),
        &setup.topic("items"),
        &grpc,
    ))
    .await;

    // Health: NOT_SERVING until every held partition has caught up.
    let channel = Endpoint::from_shared(instance.url())
        .unwrap()
        .connect_lazy();
    let first = health_of(channel.clone()).await;
    assert_eq!(
        first,
        ServingStatus::NotServing,
        "the group has not assigned partitions yet"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while health_of(channel.clone()).await != ServingStatus::Serving {
        assert!(Instant::now() < deadline, "never SERVING");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut client = instance.client().await;
    let described = client
        .describe_table(v1::DescribeTableRequest {
            table: "items".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(described.ready && described.partitions.iter().all(|p| p.ready));
    assert_eq!(described.partitions.len(), 3);
    assert_eq!(described.key_columns, ["id"]);
    let listed = client
        .list_tables(v1::ListTablesRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = listed.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["items"]);
    assert_eq!(listed.tables[0].kind, "local");

    // The whole table, scanned, equals the database (capture may still be streaming).
    let expected = db_rows(&mut conn, &db).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = scan_all(&mut client, scan(None, 0)).await;
        let got: BTreeMap<i64, Json> = rows
            .iter()
            .map(|(k, r)| (k["id"].as_i64().unwrap(), r.clone()))
            .collect();
        if got == expected {
            let ids: Vec<i64> = rows
                .iter()
                .map(|(k, _)| k["id"].as_i64().unwrap())
                .collect();
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "scan is in key order");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "scan never matched: {} of {} rows",
            got.len(),
            expected.len()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Point lookups, keys given every way a key may be given.
    for id in (1..=3000).step_by(97) {
        let forms = [json!(id), json!([id]), json!({ "id": id })];
        for form in forms {
            let row = row_of(client.get(get(form)).await.unwrap().into_inner());
            assert_eq!(row.as_ref(), expected.get(&id), "id {id}");
        }
    }
    assert_eq!(
        row_of(client.get(get(json!(99_999))).await.unwrap().into_inner()),
        None
    );
    // Batches, with missing keys, in request order.
    let ids: Vec<i64> = (2950..=3050).rev().collect();
    let batch = v1::BatchGetRequest {
        table: "items".into(),
        keys: ids.iter().map(|id| from_json(&json!(id))).collect(),
        min_position: None,
        as_of_us: None,
    };
    let results = client.batch_get(batch).await.unwrap().into_inner().results;
    assert_eq!(results.len(), ids.len());
    for (id, result) in ids.iter().zip(results) {
        assert_eq!(row_of(result).as_ref(), expected.get(id), "id {id}");
    }
    // Scans by prefix, by range, with a limit.
    let one = scan_all(
        &mut client,
        scan(Some(Range::Prefix(from_json(&json!(42)))), 0),
    )
    .await;
    assert_eq!(one, [(json!({ "id": 42 }), expected[&42].clone())]);
    let between = v1::KeyRange {
        from: key(json!(100)),
        to: key(json!({ "id": 200 })),
    };
    let ranged = scan_all(&mut client, scan(Some(Range::Between(between)), 0)).await;
    let want: Vec<(Json, Json)> = (100..200)
        .map(|id| (json!({ "id": id }), expected[&id].clone()))
        .collect();
    assert_eq!(ranged, want);
    let first7 = scan_all(&mut client, scan(None, 7)).await;
    assert_eq!(first7, want_ids(&expected, 1..8));

    // The command-line client prints the same row.
    let printed = cli_lookup(&instance.url(), &["items", "42"]);
    assert_eq!(printed, [expected[&42].clone()]);

    // Read your own write: a row changed just before is seen through its GTID.
    let mut stale_without_position = 0;
    for i in 0..20i64 {
        let id = 1 + i * 149;
        let qty = 1_000_000 + i;
        let update = format!("UPDATE `{db}`.items SET qty = {qty} WHERE id = {id}");
        let (plain, row) = write_and_read(&mut conn, &mut client, &update, id).await;
        stale_without_position += i32::from(plain.unwrap()["qty"] != qty);
        assert_eq!(
            row.unwrap()["qty"],
            qty,
            "the read at the update's GTID saw the old row"
        );
    }
    println!(
        "reads without a position that missed the write just made: {stale_without_position}/20"
    );
    // Rows kept encoded (those read above, before and after their writes) are
    // never older than the table: a deleted row, then every changed one.
    assert!(row_of(client.get(get(json!(2))).await.unwrap().into_inner()).is_some());
    let delete = format!("DELETE FROM `{db}`.items WHERE id = 2");
    let (_, deleted) = write_and_read(&mut conn, &mut client, &delete, 2).await;
    assert_eq!(
        deleted, None,
        "the read at the delete's GTID saw the old row"
    );
    // Every write above has been applied (each was read back through its GTID).
    let changed: Vec<i64> = std::iter::once(2)
        .chain((0..20).map(|i| 1 + i * 149))
        .collect();
    let batch = v1::BatchGetRequest {
        table: "items".into(),
        keys: changed.iter().map(|id| from_json(&json!(id))).collect(),
        min_position: None,
        as_of_us: None,
    };
    let results = client.batch_get(batch).await.unwrap().into_inner().results;
    let expected = db_rows(&mut conn, &db).await;
    assert_eq!(expected.get(&2), None);
    for (id, result) in changed.iter().zip(results) {
        assert_eq!(row_of(result).as_ref(), expected.get(id), "id {id}");
    }
    let cached = |result: &str| {
        instance.metric(&format!(
            "tributary_table_grpc_row_cache_total{{table=\"items\",result=\"{result}\"}}"
        ))
    };
    assert!(
        cached("hit") > 0.0 && cached("miss") > 0.0,
        "rows were read from the cache of encoded rows and from the store"
    );
    // A position nobody has reached waits until the deadline, and says how far it got.
    let gtid: String = conn
        .query_first("SELECT @@last_gtid")
        .await
        .unwrap()
        .unwrap();
    let (prefix, seq) = gtid.rsplit_once('-').unwrap();
    let future = format!("{prefix}-{}", seq.parse::<u64>().unwrap() + 1000);
    let mut request = Request::new(v1::GetRequest {
        min_position: Some(v1::Position {
            kind: Some(v1::position::Kind::Gtid(future.clone())),
        }),
        ..get(json!(1))
    });
    request.set_timeout(Duration::from_millis(300));
    let err = client.get(request).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(
        err.message().contains(&format!("not yet GTID {future}")),
        "{}",
        err.message()
    );

    assert!(instance.metric("tributary_table_grpc_requests_total") > 0.0);
    instance.stop().await;
}

/// Runs `statement`, then reads the row of `id` without a position and at
/// the statement's GTID (waiting up to 10 s for it).
async fn write_and_read(
    conn: &mut mysql_async::Conn,
    client: &mut LookupClient<Channel>,
    statement: &str,
    id: i64,
) -> (Option<Json>, Option<Json>) {
    conn.query_drop(statement).await.unwrap();
    let gtid: String = conn
        .query_first("SELECT @@last_gtid")
        .await
        .unwrap()
        .unwrap();
    let plain = row_of(client.get(get(json!(id))).await.unwrap().into_inner());
    let mut request = Request::new(v1::GetRequest {
        min_position: Some(v1::Position {
            kind: Some(v1::position::Kind::Gtid(gtid)),
        }),
        ..get(json!(id))
    });
    request.set_timeout(Duration::from_secs(10));
    let at_position = row_of(client.get(request).await.unwrap().into_inner());
    (plain, at_position)
}

fn want_ids(expected: &BTreeMap<i64, Json>, ids: std::ops::Range<i64>) -> Vec<(Json, Json)> {
    ids.map(|id| (json!({ "id": id }), expected[&id].clone()))
        .collect()
}

/// Plain JSON rows `{"id": n, "v": "value n"}` keyed `{"id": n}`, where the
/// default partitioner puts them.
async fn plain_topic(partitions: u32, rows: i64) -> (String, BTreeMap<i64, Json>) {
    let topic = unique("api_items");
    create_topic(&topic, partitions as i32).await;
    let expected: BTreeMap<i64, Json> = (1..=rows)
        .map(|id| (id, json!({ "id": id, "v": format!("value {id}") })))
        .collect();
    let records: Vec<(Json, Option<Vec<u8>>)> = expected
        .iter()
        .map(|(id, row)| (json!({ "id": id }), Some(serde_json::to_vec(row).unwrap())))
        .collect();
    produce(&topic, partitions, &records).await;
    (topic, expected)
}

async fn wait_serving(instance: &Instance) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !instance.materializer.progress().serving() {
        assert!(Instant::now() < deadline, "not serving within a minute");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_and_oversized_requests_are_refused_cleanly() {
    let (topic, expected) = plain_topic(1, 50).await;
    let data = tempfile::tempdir().unwrap();
    let grpc = format!(
        "{{ listen: '127.0.0.1:{}', max_batch_keys: 10, max_message_bytes: 4096, max_scan_rows: 20 }}",
        free_port()
    );
    let instance = Instance::start(&config_yaml(data.path(), &unique("api"), &topic, &grpc)).await;
    wait_serving(&instance).await;
    let mut client = instance.client().await;
    let refused = |result: Result<tonic::Response<v1::GetResponse>, tonic::Status>| {
        let status = result.unwrap_err();
        (status.code(), status.message().to_owned())
    };

    let (code, message) = refused(
        client
            .get(v1::GetRequest {
                table: "nope".into(),
                ..get(json!(1))
            })
            .await,
    );
    assert_eq!(code, Code::NotFound);
    assert!(
        message.contains("\"nope\"") && message.contains("items"),
        "{message}"
    );
    let (code, message) = refused(
        client
            .get(v1::GetRequest {
                key: None,
                ..get(json!(1))
            })
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (Code::InvalidArgument, "key is required")
    );
    let (code, message) = refused(client.get(get(json!({ "sku": 1 }))).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("`sku` is not a key column"), "{message}");
    let (code, message) = refused(client.get(get(json!([1, 2]))).await);
    assert_eq!(code, Code::InvalidArgument, "{message}");
    let nan = v1::Value {
        kind: Some(v1::value::Kind::DoubleValue(f64::NAN)),
    };
    let (code, message) = refused(
        client
            .get(v1::GetRequest {
                key: Some(nan),
                ..get(json!(1))
            })
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("not a JSON number"), "{message}");
    let empty = v1::Value { kind: None };
    let (code, _) = refused(
        client
            .get(v1::GetRequest {
                key: Some(empty),
                ..get(json!(1))
            })
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    let bad_gtid = v1::Position {
        kind: Some(v1::position::Kind::Gtid("yesterday".into())),
    };
    let (code, message) = refused(
        client
            .get(v1::GetRequest {
                min_position: Some(bad_gtid.clone()),
                ..get(json!(1))
            })
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("min_position.gtid"), "{message}");

    let batch = |n: i64| v1::BatchGetRequest {
        table: "items".into(),
        keys: (1..=n).map(|id| from_json(&json!(id))).collect(),
        min_position: None,
        as_of_us: None,
    };
    let status = client.batch_get(batch(11)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("grpc.max_batch_keys"),
        "{}",
        status.message()
    );
    let huge = client
        .get(get(json!("x".repeat(10_000))))
        .await
        .unwrap_err();
    assert!(
        matches!(huge.code(), Code::OutOfRange | Code::ResourceExhausted),
        "an oversized message: {huge:?}"
    );
    let status = client.scan(scan(None, 21)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("grpc.max_scan_rows"),
        "{}",
        status.message()
    );
    let status = client
        .scan(v1::ScanRequest {
            min_position: Some(bad_gtid),
            ..scan(None, 5)
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let gtid_scan = v1::Position {
        kind: Some(v1::position::Kind::Gtid("0-1-1".into())),
    };
    let status = client
        .scan(v1::ScanRequest {
            min_position: Some(gtid_scan),
            ..scan(None, 5)
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("pass offsets"),
        "{}",
        status.message()
    );

    // Still healthy, still right.
    let results = client
        .batch_get(batch(10))
        .await
        .unwrap()
        .into_inner()
        .results;
    let rows: Vec<Json> = results.into_iter().map(|r| row_of(r).unwrap()).collect();
    let want: Vec<Json> = (1..=10).map(|id| expected[&id].clone()).collect();
    assert_eq!(rows, want);
    let scanned = scan_all(&mut client, scan(None, 20)).await;
    assert_eq!(scanned.len(), 20);
    assert!(
        instance
            .metric("tributary_table_grpc_requests_total{method=\"Get\",code=\"InvalidArgument\"")
            >= 5.0
    );
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_for_partitions_held_elsewhere_are_forwarded_or_name_the_owner() {
    let (topic, expected) = plain_topic(4, 400).await;
    let group = unique("api_route");
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (port_a, port_b) = (free_port(), free_port());
    let routing = "routing: { publish_interval_ms: 300 }";
    let a = Instance::start(&config_yaml(
        dir_a.path(),
        &group,
        &topic,
        &format!("{{ listen: '127.0.0.1:{port_a}', {routing} }}"),
    ))
    .await;
    // The second instance is the `tributary serve` command, answering with the owner
    // instead of forwarding.
    let config_b = write_config(&config_yaml(
        dir_b.path(),
        &group,
        &topic,
        &format!(
            "{{ listen: '127.0.0.1:{port_b}', routing: {{ publish_interval_ms: 300, forward: false }} }}\nmetrics: {{ listen: '127.0.0.1:{}' }}",
            free_port()
        ),
    ));
    let b = TributaryProcess::start(&["serve"], &config_b, &[]);
    let url_b = format!("http://127.0.0.1:{port_b}");

    // Both hold some partitions, and A answers every key (some through B).
    let mut client_a = a.client().await;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let held = a.materializer.progress().of_table("items").len();
        let all = futures::future::join_all(expected.keys().map(|id| {
            let mut client = client_a.clone();
            let request = get(json!(id));
            async move { client.get(request).await }
        }))
        .await;
        let answered = all.iter().filter(|r| r.is_ok()).count();
        if (1..4).contains(&held)
            && a.materializer.progress().serving()
            && answered == expected.len()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "A holds {held} partitions, answers {answered} keys; B log:\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for (id, row) in &expected {
        let got = row_of(client_a.get(get(json!(id))).await.unwrap().into_inner());
        assert_eq!(got.as_ref(), Some(row), "id {id}");
    }
    assert!(
        a.metric("tributary_table_grpc_forwarded_total") > 0.0,
        "some keys were B's"
    );
    let ids: Vec<i64> = expected.keys().copied().collect();
    for chunk in ids.chunks(100) {
        let batch = v1::BatchGetRequest {
            table: "items".into(),
            keys: chunk.iter().map(|id| from_json(&json!(id))).collect(),
            min_position: None,
            as_of_us: None,
        };
        let results = client_a
            .batch_get(batch)
            .await
            .unwrap()
            .into_inner()
            .results;
        let rows: Vec<Option<Json>> = results.into_iter().map(row_of).collect();
        let want: Vec<Option<Json>> = chunk.iter().map(|id| expected.get(id).cloned()).collect();
        assert_eq!(rows, want);
    }
    let scanned = scan_all(&mut client_a, scan(None, 0)).await;
    assert_eq!(
        scanned,
        want_ids(&expected, 1..401),
        "a scan merges both instances in key order"
    );

    // B does not forward: it names A for A's keys and answers its own.
    let held_by_a: Vec<i32> = a
        .materializer
        .progress()
        .of_table("items")
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let mut client_b = LookupClient::connect(url_b).await.unwrap();
    let (mut named_owner, mut answered) = (0, 0);
    for id in expected.keys() {
        let key = serde_json::to_vec(&json!({ "id": id })).unwrap();
        let partition = tributary_proto::partition::partition_for_key(&key, 4);
        match client_b.get(get(json!(id))).await {
            Ok(answer) => {
                assert!(!held_by_a.contains(&partition));
                assert_eq!(row_of(answer.into_inner()).as_ref(), expected.get(id));
                answered += 1;
            }
            Err(status) => {
                assert!(held_by_a.contains(&partition), "{status:?}");
                assert_eq!(status.code(), Code::FailedPrecondition);
                assert_eq!(
                    status.metadata().get("x-tributary-owner").unwrap(),
                    &a.addr().to_string()
                );
                named_owner += 1;
            }
        }
    }
    assert!(
        named_owner > 0 && answered > 0,
        "owner named {named_owner}, answered {answered}"
    );
    let (clean, log) = b.terminate(Duration::from_secs(30));
    assert!(clean, "{log}");
    // B said goodbye before it exited: its last announcement is a tombstone.
    let b_address = format!("127.0.0.1:{port_b}").into_bytes();
    let said_goodbye = {
        let b_address = b_address.clone();
        move |r: &RawRecord| r.key.as_deref() == Some(&b_address[..]) && r.value.is_none()
    };
    let routing_records = read_raw(
        &format!("{group}.routing"),
        Duration::from_secs(20),
        move |records| records.iter().any(&said_goodbye),
    )
    .await;
    let last_of_b = routing_records
        .iter()
        .rfind(|r| r.key.as_deref() == Some(&b_address[..]));
    assert!(
        last_of_b.is_some_and(|r| r.value.is_none()),
        "B's last routing record is not a tombstone: {last_of_b:?}"
    );
    a.stop().await;
}

/// The lookup API's client side of the test PKI.
trait ClientTls {
    fn client_tls(&self, with_cert: bool) -> ClientTlsConfig;
}

impl ClientTls for Pki {
    fn client_tls(&self, with_cert: bool) -> ClientTlsConfig {
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(self.read("ca.pem")));
        if with_cert {
            tls.identity(Identity::from_pem(
                self.read("client.pem"),
                self.read("client.key"),
            ))
        } else {
            tls
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_and_a_token_are_required_when_configured() {
    let (topic, expected) = plain_topic(1, 10).await;
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let grpc = format!(
        "{{ listen: '127.0.0.1:{port}', token: s3cret, routing: {{ enabled: false }}, tls: {{ cert: '{}', key: '{}', client_ca: '{}' }} }}",
        pki.path("server.pem"),
        pki.path("server.key"),
        pki.path("ca.pem")
    );
    let instance = Instance::start(&config_yaml(data.path(), &unique("api"), &topic, &grpc)).await;
    wait_serving(&instance).await;
    let https = format!("https://127.0.0.1:{port}");
    let with_token = |token: Option<&str>| {
        let mut request = Request::new(get(json!(3)));
        if let Some(token) = token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        request
    };

    // Plaintext, or TLS without a client certificate: no answer.
    let plain = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_lazy();
    assert!(
        LookupClient::new(plain)
            .get(with_token(Some("s3cret")))
            .await
            .is_err()
    );
    let no_cert = Endpoint::from_shared(https.clone())
        .unwrap()
        .tls_config(pki.client_tls(false))
        .unwrap()
        .connect_lazy();
    assert!(
        LookupClient::new(no_cert)
            .get(with_token(Some("s3cret")))
            .await
            .is_err()
    );

    // Mutual TLS: the token decides.
    let channel = Endpoint::from_shared(https)
        .unwrap()
        .tls_config(pki.client_tls(true))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = LookupClient::new(channel.clone());
    for token in [None, Some("wrong")] {
        let status = client.get(with_token(token)).await.unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "token {token:?}");
    }
    let row = row_of(
        client
            .get(with_token(Some("s3cret")))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(row.as_ref(), expected.get(&3));
    let deadline = Instant::now() + Duration::from_secs(5);
    while health_of(channel.clone()).await != ServingStatus::Serving {
        assert!(
            Instant::now() < deadline,
            "health (which needs no token) never SERVING"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The command-line client over mutual TLS with the token.
    let (ca, cert, key) = (
        pki.path("ca.pem"),
        pki.path("client.pem"),
        pki.path("client.key"),
    );
    let lines = cli_lookup(
        &format!("https://127.0.0.1:{port}"),
        &[
            "--ca", &ca, "--cert", &cert, "--key", &key, "--token", "s3cret", "items", "4", "5",
        ],
    );
    assert_eq!(
        lines,
        [
            json!({ "key": 4, "row": expected[&4] }),
            json!({ "key": 5, "row": expected[&5] })
        ]
    );
    instance.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_table_reads_another_instances_tables_through_the_api() {
    use tributary_table_api::Table as _;
    let (topic, expected) = plain_topic(1, 30).await;
    let data = tempfile::tempdir().unwrap();
    let grpc = format!(
        "{{ listen: '127.0.0.1:{}', token: s3cret, routing: {{ enabled: false }} }}",
        free_port()
    );
    let server = Instance::start(&config_yaml(data.path(), &unique("api"), &topic, &grpc)).await;
    wait_serving(&server).await;
    let shutdown = CancellationToken::new();
    let remote = |token: &str, table: &str| {
        let yaml = format!(
            "data_dir: /unused\nkafka: {{ brokers: '{}' }}\nremote:\n  - name: far\n    tributary: {{ endpoint: '{}', table: {table}, key: [id], token: {token} }}\n    retries: {{ max: 0 }}\n",
            brokers(),
            server.url()
        );
        let config = TablesConfig::parse(&yaml).unwrap();
        let shutdown = shutdown.clone();
        async move {
            tributary_tables::remote::start_all(
                &config,
                false,
                &TablesMetrics::default(),
                &shutdown,
            )
            .await
            .unwrap()
            .tables
            .remove(0)
        }
    };
    let far = remote("s3cret", "items").await;
    for (id, row) in &expected {
        assert_eq!(
            far.get(&json!(id)).await.unwrap().as_ref(),
            Some(row),
            "id {id}"
        );
    }
    assert_eq!(far.get(&json!(999)).await.unwrap(), None);
    let keys: Vec<Json> = (25..=35).map(|id| json!({ "id": id })).collect();
    let rows = far.multi_get(&keys).await.unwrap();
    let want: Vec<Option<Json>> = (25..=35).map(|id| expected.get(&id).cloned()).collect();
    assert_eq!(rows, want, "a batch, misses included");

    let err = remote("wrong", "items")
        .await
        .get(&json!(1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Unauthenticated"), "{err}");
    let err = remote("s3cret", "nope")
        .await
        .get(&json!(1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NotFound"), "{err}");
    shutdown.cancel();
    server.stop().await;
}

/// Versioned tables on the real stack. `users` is dated by the binlog's
/// commit times (whole seconds, so changes run ≥ 1.2 s apart): each change's
/// row, as the database's own SELECT showed it right after the change, is
/// what a read as of the time after the change answers, and the row before
/// it what a read just before the change's second answers (a snapshot row
/// from the epoch on; a key not inserted yet: absent). `prices` is dated by
/// a DATETIME(6) column written out of order: reads answer the version with
/// the newest valid-from at or before their time, computed here from the
/// writes; a later version moves the horizon and retention removes exactly
/// the versions behind it. A restart (no replay) and a replica restored from
/// a checkpoint answer the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_versioned_table_answers_as_of_a_time_what_the_database_held_then() {
    let mut conn = root_conn().await;
    let db = create_db(&mut conn, "asof").await;
    for ddl in [
        "CREATE TABLE `{db}`.users (id BIGINT PRIMARY KEY, tier VARCHAR(20))",
        "CREATE TABLE `{db}`.prices (sku VARCHAR(10) PRIMARY KEY, price INT, valid_from DATETIME(6))",
        "INSERT INTO `{db}`.users VALUES (1, 'free')",
        "INSERT INTO `{db}`.prices VALUES ('Z', 0, '2026-01-01 00:00:00')",
    ] {
        conn.query_drop(ddl.replace("{db}", &db)).await.unwrap();
    }
    let setup = CaptureSetup::new(&db, "").with_snapshot(100);
    let _capture = TributaryProcess::capture(&setup.yaml());
    let yaml = |dir: &std::path::Path, group: &str, port: u16| {
        format!(
            "data_dir: '{}'\ngroup_id: '{group}'\nkafka: {{ brokers: '{}' }}\ntables:\n  \
             - {{ name: users, topic: '{}', versioned: {{ history: 30d }} }}\n  \
             - {{ name: prices, topic: '{}', versioned: {{ history: 60s, column: valid_from, unit: us }} }}\n\
             grpc: {{ listen: '127.0.0.1:{port}' }}\n",
            dir.display(),
            brokers(),
            setup.topic("users"),
            setup.topic("prices"),
        )
    };
    let data = tempfile::tempdir().unwrap();
    let (group, port) = (unique("asof"), free_port());
    let instance = Instance::start(&yaml(data.path(), &group, port)).await;
    wait_serving(&instance).await;
    let mut client = instance.client().await;
    let latest = |table: &str, key: Json| v1::GetRequest {
        table: table.into(),
        key: Some(from_json(&key)),
        ..Default::default()
    };
    // The snapshot row is in before the changes start.
    let deadline = Instant::now() + Duration::from_secs(60);
    while row_of(
        client
            .get(latest("users", json!(1)))
            .await
            .unwrap()
            .into_inner(),
    )
    .is_none()
    {
        assert!(Instant::now() < deadline, "the snapshot row never arrived");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // users: each change, with the server's clock around it and the row after it.
    let steps = [
        (1, "UPDATE `{db}`.users SET tier = 'pro' WHERE id = 1"),
        (2, "INSERT INTO `{db}`.users VALUES (2, 'new')"),
        (1, "UPDATE `{db}`.users SET tier = 'plus' WHERE id = 1"),
        (1, "DELETE FROM `{db}`.users WHERE id = 1"),
        (1, "INSERT INTO `{db}`.users VALUES (1, 'back')"),
        (2, "UPDATE `{db}`.users SET tier = 'newer' WHERE id = 2"),
    ];
    let log = timed_changes::run(&mut conn, &db, &steps).await;
    // Every change applied: the latest rows equal the database's.
    for id in [1, 2] {
        let expected = timed_changes::user_row(&mut conn, &db, id).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while row_of(
            client
                .get(latest("users", json!(id)))
                .await
                .unwrap()
                .into_inner(),
        ) != expected
        {
            assert!(Instant::now() < deadline, "user {id} never caught up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let as_of = |table: &str, key: Json, t: i64| v1::GetRequest {
        as_of_us: Some(t),
        ..latest(table, key)
    };
    let second = 1_000_000;
    let after = |i: usize| log.changes[i].after_us;
    let mut reads: Vec<(v1::GetRequest, Option<Json>)> = log
        .probe_times()
        .into_iter()
        .map(|(id, t)| (as_of("users", json!(id), t), log.state_at(id, t)))
        .collect();
    reads.push((as_of("users", json!(3), after(0)), None));
    for (request, expected) in &reads {
        let answer = client.get(request.clone()).await.unwrap().into_inner();
        assert!(!answer.beyond_history, "{request:?}");
        assert_eq!(&row_of(answer), expected, "{request:?}");
    }
    // The same keys in one BatchGet as of one time.
    let t = after(2); // after id 1 became 'plus', id 2 'new'
    let batch = client
        .batch_get(v1::BatchGetRequest {
            table: "users".into(),
            keys: vec![from_json(&json!(1)), from_json(&json!(2))],
            as_of_us: Some(t),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let rows: Vec<Option<Json>> = batch.results.into_iter().map(row_of).collect();
    assert_eq!(rows, [log.state_at(1, t), log.state_at(2, t)]);
    // And through the command line (epoch milliseconds).
    let as_of_ms = (after(0) / 1000).to_string();
    let printed = cli_lookup(&instance.url(), &["users", "1", "--as-of", &as_of_ms]);
    let row = log.changes[0].row.clone().unwrap_or_default();
    assert_eq!(printed, [row], "the CLI's as-of read");

    // prices: versions dated by their column, written out of order.
    let base = 1_767_225_600 * second; // 2026-01-01T00:00:00Z
    let mut versions: Vec<(i64, i64)> = Vec::new(); // (valid_from µs, price)
    let write_price = |offset_us: i64, price: i64, insert: bool| {
        let at = format!("TIMESTAMPADD(MICROSECOND, {offset_us}, '2026-01-01 00:00:00')");
        if insert {
            format!("INSERT INTO `{db}`.prices VALUES ('A', {price}, {at})")
        } else {
            format!("UPDATE `{db}`.prices SET price = {price}, valid_from = {at} WHERE sku = 'A'")
        }
    };
    for (offset, price, insert) in [
        (0, 1, true),
        (20 * second, 2, false),
        (10 * second, 3, false),
    ] {
        conn.query_drop(write_price(offset, price, insert))
            .await
            .unwrap();
        versions.push((base + offset, price));
    }
    // The version valid at `t`: the newest valid-from at or before it.
    let valid_at = |versions: &[(i64, i64)], t: i64| {
        versions
            .iter()
            .filter(|(from, _)| *from <= t)
            .max_by_key(|(from, _)| *from)
            .map(|(_, price)| *price)
    };
    let price_reads = |versions: &[(i64, i64)]| {
        let times = [
            -1,
            0,
            10 * second - 1,
            10 * second,
            20 * second,
            30 * second,
        ];
        times.map(|offset| (base + offset, valid_at(versions, base + offset)))
    };
    let price_of =
        |answer: v1::GetResponse| row_of(answer).map(|row| row["price"].as_i64().unwrap());
    let wait_price = |client: &mut LookupClient<Channel>, price: i64| {
        let mut client = client.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let answer = client.get(latest("prices", json!("A"))).await.unwrap();
                if price_of(answer.into_inner()) == Some(price) {
                    break;
                }
                assert!(Instant::now() < deadline, "price {price} never arrived");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    wait_price(&mut client, 3).await;
    for (t, expected) in price_reads(&versions) {
        let answer = client.get(as_of("prices", json!("A"), t)).await.unwrap();
        assert_eq!(price_of(answer.into_inner()), expected, "price as of {t}");
    }
    // A version 100 s on: the horizon moves to 40 s, the versions of 0 s and
    // 10 s go (20 s stays: it answers reads at the horizon).
    conn.query_drop(write_price(100 * second, 4, false))
        .await
        .unwrap();
    versions.push((base + 100 * second, 4));
    wait_price(&mut client, 4).await;
    let horizon = base + 40 * second;
    let beyond = client
        .get(as_of("prices", json!("A"), horizon - 1))
        .await
        .unwrap()
        .into_inner();
    assert!(beyond.beyond_history && !beyond.found, "{beyond:?}");
    assert_eq!(beyond.history_horizon_us, horizon);
    for offset in [40, 99, 100, 1000] {
        let t = base + offset * second;
        let answer = client.get(as_of("prices", json!("A"), t)).await.unwrap();
        assert_eq!(
            price_of(answer.into_inner()),
            valid_at(&versions, t),
            "price as of {t}"
        );
    }
    assert_eq!(
        instance.metric("tributary_table_versions_removed_total"),
        2.0,
        "retention removed the versions of 0 s and 10 s"
    );

    // Every read, kept to compare after a restart and on a restored replica.
    let mut all: Vec<v1::GetRequest> = reads.iter().map(|(r, _)| r.clone()).collect();
    all.extend([39, 40, 100].map(|s| as_of("prices", json!("A"), base + s * second)));
    all.push(as_of("prices", json!("Z"), base));
    let answers = |url: String, all: Vec<v1::GetRequest>| async move {
        let mut client = LookupClient::connect(url).await.unwrap();
        let mut answers = Vec::new();
        for request in all {
            answers.push(client.get(request).await.unwrap().into_inner());
        }
        answers
    };
    let first = answers(instance.url(), all.clone()).await;
    assert_eq!(
        price_of(first.last().unwrap().clone()),
        Some(0),
        "Z's snapshot row"
    );
    let checkpoints = tempfile::tempdir().unwrap();
    tributary_tables::checkpoint::create(
        &instance.materializer.store(),
        data.path(),
        checkpoints.path(),
        1,
    )
    .unwrap();
    instance.stop().await;

    let restarted = Instance::start(&yaml(data.path(), &group, port)).await;
    wait_serving(&restarted).await;
    assert_eq!(
        answers(restarted.url(), all.clone()).await,
        first,
        "after a restart"
    );
    assert_eq!(
        restarted.metric("tributary_table_applied_records_total"),
        0.0,
        "a restart replays nothing"
    );
    restarted.stop().await;

    let replica = tempfile::tempdir().unwrap();
    let restored = replica.path().join("db");
    tributary_tables::checkpoint::restore(checkpoints.path(), None, &restored).unwrap();
    let replica = Instance::start(&yaml(&restored, &unique("asof"), free_port())).await;
    wait_serving(&replica).await;
    assert_eq!(
        answers(replica.url(), all).await,
        first,
        "a restored replica"
    );
    replica.stop().await;
}
