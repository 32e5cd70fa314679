//! Remote tables against the stack's MariaDB: the database sees no more than the
//! configured rate, a Zipf workload gets the cache hits it should, CDC keeps
//! cached rows fresh, the breaker fails fast while the database is away, and
//! a database out of connections makes the rate limit back off.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::counted::{products, selects_by};
use common::*;
use mysql_async::prelude::Queryable;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tributary_table_api::Table;
use tributary_tables::remote::{RemoteTable, RemoteTables};
use tributary_tables::{TablesConfig, TablesMetrics};

/// A remote `products` table with `settings` (YAML fields of the remote table).
async fn table(
    db: &str,
    user: &str,
    port: u16,
    settings: &str,
) -> (Arc<RemoteTable>, Registry, RemoteTables) {
    let config = TablesConfig::parse(&format!(
        "data_dir: /unused\nkafka: {{ brokers: '{}' }}\nremote:\n  - name: products\n    mysql: {{ url: 'mysql://{user}:pw@127.0.0.1:{port}', table: {db}.products, key: [sku] }}\n{settings}\n",
        brokers()
    ))
    .unwrap();
    let mut registry = Registry::default();
    let metrics = TablesMetrics::register(&mut registry);
    let shutdown = CancellationToken::new();
    let running = tributary_tables::remote::start_all(&config, false, &metrics, &shutdown)
        .await
        .unwrap();
    (running.tables[0].clone(), registry, running)
}

fn metric(registry: &Registry, name: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    metric_sum(&text, name)
}

fn stack_port() -> u16 {
    mysql_host_port().1
}

#[tokio::test(flavor = "multi_thread")]
async fn the_database_sees_no_more_than_the_configured_rate() {
    let (db, user) = products(2000).await;
    let (table, _registry, _stop) = table(
        &db,
        &user,
        stack_port(),
        "    cache: { max_entries: 0 }\n    batch: { max_keys: 1 }\n    rate_limit: { per_second: 20, burst: 1, max_wait_ms: 60000 }",
    )
    .await;
    table.get(&json!("SKU-0")).await.unwrap(); // connect first
    // Demand: 200 lookups a second of distinct keys, 10× the limit, for 4 s.
    let demand = tokio::spawn({
        let table = table.clone();
        async move {
            for i in 1..800 {
                let table = table.clone();
                tokio::spawn(async move { table.get(&json!(format!("SKU-{i}"))).await });
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (before, started) = (selects_by(&user).await, Instant::now());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = selects_by(&user).await - before;
    let expected = 20.0 * started.elapsed().as_secs_f64();
    demand.abort();
    assert!(
        // ±5%, plus the burst of 1 and up to 2 statements of a connection the pool opens.
        (seen as f64) <= expected * 1.05 + 3.0 && (seen as f64) >= expected * 0.95 - 1.0,
        "the database saw {seen} SELECTs in {:?}; the limit allows {expected:.0}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zipf_workload_is_answered_from_the_cache() {
    let (db, user) = products(1000).await;
    let (table, registry, _stop) =
        table(&db, &user, stack_port(), "    cache: { ttl_s: 3600 }").await;
    // Zipf(s = 1) over 1000 keys, by inverse CDF with a fixed seed.
    let weights: Vec<f64> = (1..=1000).map(|k| 1.0 / f64::from(k)).collect();
    let total: f64 = weights.iter().sum();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut keys = Vec::new();
    for _ in 0..5000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut target = (rng >> 11) as f64 / (1u64 << 53) as f64 * total;
        let rank = weights
            .iter()
            .position(|w| {
                target -= w;
                target <= 0.0
            })
            .unwrap_or(999);
        keys.push(rank);
    }
    // Connect first (connecting runs SELECTs of its own), with a key outside the workload.
    assert!(table.get(&json!("none")).await.unwrap().is_none());
    let before = selects_by(&user).await;
    for key in &keys {
        let row = table
            .get(&json!(format!("SKU-{key}")))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row["title"], format!("product {key}"));
        assert_eq!(row["price"], format!("{}.50", key % 100));
    }
    let distinct = keys.iter().collect::<BTreeSet<_>>().len() as f64;
    let (hits, misses) = (
        metric(
            &registry,
            "tributary_table_remote_cache_total{table=\"products\",result=\"hit\"}",
        ),
        metric(
            &registry,
            "tributary_table_remote_cache_total{table=\"products\",result=\"miss\"}",
        ),
    );
    assert_eq!(
        misses,
        distinct + 1.0,
        "one miss per distinct key (and the first lookup)"
    );
    assert_eq!(hits, 5000.0 - distinct);
    // One SELECT per miss; the pool may open another connection now and then,
    // which runs a SELECT of its own. The server's statistics can trail the
    // last statement by a moment (seen: one short), so read them until they settle.
    let mut selects = (selects_by(&user).await - before) as f64;
    let settle = Instant::now() + Duration::from_secs(3);
    while selects < distinct && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(100)).await;
        selects = (selects_by(&user).await - before) as f64;
    }
    assert!(
        (distinct..=distinct + 5.0).contains(&selects),
        "{selects} SELECTs for {distinct} misses"
    );
    println!(
        "Zipf(1) over 1000 keys, 5000 lookups: hit ratio {:.3}",
        hits / 5000.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn changes_evict_cached_rows_through_cdc() {
    let (db, user) = products(10).await;
    let mut conn = root_conn().await;
    let capture = CaptureSetup::new(&db, &gtid_now(&mut conn).await);
    let _capture = TributaryProcess::capture(&capture.yaml());
    let topic = capture.topic("products");
    // Make the change topic exist before the table follows it.
    conn.query_drop(format!(
        "UPDATE {db}.products SET price = 1 WHERE sku = 'SKU-9'"
    ))
    .await
    .unwrap();
    read_topic(&topic, Duration::from_secs(30), |r| !r.is_empty()).await;
    let (table, registry, _stop) = table(
        &db,
        &user,
        stack_port(),
        &format!("    cache: {{ ttl_s: 3600 }}\n    invalidate_from: '{topic}'"),
    )
    .await;
    let title = |row: Option<serde_json::Value>| row.unwrap()["title"].clone();
    assert_eq!(
        title(table.get(&json!("SKU-1")).await.unwrap()),
        "product 1"
    );
    assert_eq!(
        title(table.get(&json!("SKU-1")).await.unwrap()),
        "product 1"
    ); // cached
    conn.query_drop(format!(
        "UPDATE {db}.products SET title = 'renamed' WHERE sku = 'SKU-1'"
    ))
    .await
    .unwrap();
    let updated = Instant::now();
    while title(table.get(&json!("SKU-1")).await.unwrap()) != "renamed" {
        assert!(
            updated.elapsed() < Duration::from_secs(1),
            "the cached row is still stale 1 s after the update (TTL is an hour)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("fresh after {:?}", updated.elapsed());
    assert!(metric(&registry, "tributary_table_remote_invalidations_total") >= 1.0);
}

/// A TCP relay to MariaDB that can be taken down (connections cut and refused).
struct Relay {
    port: u16,
    up: Arc<AtomicBool>,
    generation: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Relay {
    async fn start(target: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = tokio::sync::watch::channel(0u64);
        let generation = Arc::new(generation);
        let (accepting, cuts) = (up.clone(), generation.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !accepting.load(Ordering::SeqCst) {
                    continue; // dropped: refused
                }
                let mut cut = cuts.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Relay {
            port,
            up,
            generation,
        }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            self.generation.send_modify(|g| *g += 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_breaker_fails_fast_while_the_database_is_away() {
    let (db, user) = products(10).await;
    let relay = Relay::start(stack_port()).await;
    let (table, registry, _stop) = table(
        &db,
        &user,
        relay.port,
        "    cache: { max_entries: 0 }\n    timeout_ms: 500\n    retries: { max: 1, backoff_ms: 10 }\n    breaker: { failures: 2, open_s: 1 }",
    )
    .await;
    assert!(table.get(&json!("SKU-1")).await.unwrap().is_some());
    relay.set_up(false);
    tokio::time::sleep(Duration::from_millis(100)).await; // the cut connections close
    for _ in 0..2 {
        let err = table.get(&json!("SKU-1")).await.unwrap_err();
        assert!(err.to_string().contains("backend"), "{err}");
    }
    let started = Instant::now();
    let err = table.get(&json!("SKU-1")).await.unwrap_err();
    assert!(err.to_string().contains("circuit open"), "{err}");
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "fails fast: {:?}",
        started.elapsed()
    );
    assert_eq!(
        metric(&registry, "tributary_table_remote_breaker_open"),
        1.0
    );
    relay.set_up(true);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(
        table.get(&json!("SKU-1")).await.unwrap().is_some(),
        "recovers"
    );
    assert_eq!(
        metric(&registry, "tributary_table_remote_breaker_open"),
        0.0
    );
}

/// Two lookup servers (tables files without jobs) sharing a budget group:
/// the database sees one limit between them, each taking half.
#[tokio::test(flavor = "multi_thread")]
async fn lookup_servers_in_one_budget_group_share_its_limit() {
    let (db, user) = products(2000).await;
    let group = unique("lookups");
    let settings = format!(
        "    cache: {{ max_entries: 0 }}\n    batch: {{ max_keys: 1 }}\n    rate_limit: {{ per_second: 40, burst: 4, max_wait_ms: 60000, budget_group: {group} }}"
    );
    let mut servers = Vec::new();
    for _ in 0..2 {
        servers.push(table(&db, &user, stack_port(), &settings).await);
    }
    // Demand from each: lookups of distinct keys, far beyond the limit.
    let stop = Arc::new(AtomicBool::new(false));
    for (s, (table, _, _)) in servers.iter().enumerate() {
        for worker in 0..20 {
            let (table, stop) = (table.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = worker;
                while !stop.load(Ordering::SeqCst) {
                    table
                        .get(&json!(format!("SKU-{}", (i * 2 + s) % 2000)))
                        .await
                        .ok();
                    i += 20;
                }
            });
        }
    }
    // Each counts the other once both have announced (within a second).
    let deadline = Instant::now() + Duration::from_secs(20);
    while servers
        .iter()
        .any(|(_, r, _)| metric(r, "tributary_table_remote_budget_members") < 2.0)
    {
        assert!(
            Instant::now() < deadline,
            "the servers never saw each other"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (before, started) = (selects_by(&user).await, Instant::now());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let seen = selects_by(&user).await - before;
    let rate = seen as f64 / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    assert!(
        (rate - 40.0).abs() <= 2.0,
        "the database saw {rate:.1} SELECTs/s from two servers sharing 40/s"
    );
    for (_, registry, _) in &servers {
        let share = metric(registry, "tributary_table_remote_budget_share");
        assert!((share - 20.0).abs() < 1.0, "each takes half: {share}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_out_of_connections_makes_the_rate_limit_back_off() {
    let (db, user) = products(10).await;
    let mut root = root_conn().await;
    root.query_drop(format!(
        "GRANT USAGE ON *.* TO '{user}'@'%' WITH MAX_USER_CONNECTIONS 1"
    ))
    .await
    .unwrap();
    // Another client holds the user's one connection.
    let (host, port) = mysql_host_port();
    let hog = mysql_async::Conn::from_url(format!("mysql://{user}:pw@{host}:{port}"))
        .await
        .unwrap();
    let (table, registry, _stop) = table(
        &db,
        &user,
        stack_port(),
        "    cache: { max_entries: 0 }\n    retries: { max: 0 }\n    rate_limit: { per_second: 100, max_wait_ms: 5000 }",
    )
    .await;
    let err = table.get(&json!("SKU-1")).await.unwrap_err();
    assert!(err.to_string().contains("max_user_connections"), "{err}");
    let decreases = "tributary_table_remote_budget_decreases_total{group=\"products\",reason=\"mysql_user_limit\"}";
    assert_eq!(metric(&registry, decreases), 1.0);
    let rate = metric(&registry, "tributary_table_remote_budget_rate");
    assert!(
        (rate - 50.0).abs() < 1.0,
        "the rate in use is halved: {rate}"
    );
    hog.disconnect().await.unwrap();
    assert!(
        table.get(&json!("SKU-1")).await.unwrap().is_some(),
        "lookups succeed once a connection is free"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_service_backs_a_remote_table() {
    use axum::extract::Path;
    use axum::http::StatusCode;
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = requests.clone();
    let app = axum::Router::new().route(
        "/products/{sku}",
        axum::routing::get(move |Path(sku): Path<String>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                match sku.as_str() {
                    "broken" => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
                    "SKU 1" => (
                        StatusCode::OK,
                        json!({ "sku": sku, "title": "one" }).to_string(),
                    ),
                    _ => (StatusCode::NOT_FOUND, String::new()),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let config = TablesConfig::parse(&format!(
        "data_dir: /unused\nkafka: {{ brokers: unused }}\nremote:\n  - name: catalog\n    http: {{ url: 'http://127.0.0.1:{port}/products/{{sku}}', key: [sku] }}\n    retries: {{ max: 2, backoff_ms: 5 }}\n"
    ))
    .unwrap();
    let metrics = TablesMetrics::register(&mut Registry::default());
    let table =
        tributary_tables::remote::start_all(&config, false, &metrics, &CancellationToken::new())
            .await
            .unwrap()
            .tables
            .remove(0);
    let count = || requests.load(Ordering::SeqCst);

    let row = table.get(&json!("SKU 1")).await.unwrap().unwrap();
    assert_eq!(
        row,
        json!({ "sku": "SKU 1", "title": "one" }),
        "the key is percent-encoded"
    );
    assert!(table.get(&json!("SKU 1")).await.unwrap().is_some());
    assert_eq!(count(), 1, "the second lookup is a cache hit");
    assert_eq!(
        table.get(&json!("nope")).await.unwrap(),
        None,
        "404 is no row"
    );
    assert_eq!(table.get(&json!("nope")).await.unwrap(), None);
    assert_eq!(count(), 2, "misses are cached too");
    let err = table.get(&json!("broken")).await.unwrap_err();
    assert!(err.to_string().contains("500"), "{err}");
    assert_eq!(count(), 5, "a 5xx is retried twice");
}
