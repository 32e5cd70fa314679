//! One rate limit for a whole job, however many instances run it: enricher
//! processes of one job share a remote table's `budget_group` against the
//! stack's MariaDB (statements counted by its own `USER_STATISTICS`) and
//! against an HTTP service served here (requests counted as they arrive).
//!
//! Demand is a backlog the job could enrich thousands of events a second:
//! far more than ten times the limit. Measurement windows: counts are sampled
//! every 100–250 ms; a window's rate is the count between the samples at its
//! ends over the time between them. Rates are read over 10 s windows that
//! start 3 s after the instances settle (their partitions assigned, every
//! instance counted by each budget); "any second" checks read consecutive 1 s
//! windows. Bounds: ±5% of the limit over 10 s, at most +10% in any second.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::counted::{products, selects_by};
use common::*;
use serde_json::json;

/// Counts sampled over time: (when, count so far).
#[derive(Clone)]
struct Samples(Arc<Mutex<Vec<(Instant, u64)>>>);

impl Samples {
    /// Samples `read` every `every` until dropped with the returned task.
    fn start<F, Fut>(every: Duration, read: F) -> (Self, tokio::task::JoinHandle<()>)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = u64> + Send,
    {
        let samples = Samples(Arc::default());
        let writing = samples.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                let count = read().await;
                writing.0.lock().unwrap().push((Instant::now(), count));
            }
        });
        (samples, task)
    }

    /// The last sample at or before `at`.
    fn at(&self, at: Instant) -> (Instant, u64) {
        let samples = self.0.lock().unwrap();
        *samples
            .iter()
            .rev()
            .find(|(when, _)| *when <= at)
            .unwrap_or_else(|| panic!("no sample before {at:?}"))
    }

    /// The rate between the samples nearest `from` and `to` (per second).
    fn rate(&self, from: Instant, to: Instant) -> f64 {
        let ((t0, c0), (t1, c1)) = (self.at(from), self.at(to));
        (c1 - c0) as f64 / (t1 - t0).as_secs_f64()
    }

    /// Rates of consecutive 1 s windows from `from` to `to`.
    fn per_second(&self, from: Instant, to: Instant) -> Vec<f64> {
        let mut rates = Vec::new();
        let mut start = from;
        while start + Duration::from_secs(1) <= to {
            rates.push(self.rate(start, start + Duration::from_secs(1)));
            start += Duration::from_secs(1);
        }
        rates
    }

    /// Waits until `until` has been sampled.
    async fn wait_past(&self, until: Instant) {
        while self
            .0
            .lock()
            .unwrap()
            .last()
            .is_none_or(|(t, _)| *t < until)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `rate` is `limit` ±5%.
fn assert_near(rate: f64, limit: f64, what: &str, logs: &dyn Fn() -> String) {
    eprintln!("{what}: {rate:.1}/s");
    assert!(
        (rate - limit).abs() <= limit * 0.05,
        "{what}: {rate:.1}/s, the limit is {limit}/s ±5%; logs:\n{}",
        logs()
    );
}

/// No 1 s window above `limit` + 10%.
fn assert_never_above(rates: &[f64], limit: f64, what: &str) {
    let worst = rates.iter().copied().fold(0.0, f64::max);
    assert!(
        worst <= limit * 1.1,
        "{what}: a second at {worst:.1}/s, over the limit {limit}/s + 10%: {rates:.1?}"
    );
}

/// One job run by several processes, each with its own files and port.
struct Job {
    dir: PathBuf,
    input: String,
    partitions: u32,
    group: String,
    /// The remote table's YAML entry.
    table: String,
    extra: String,
    ports: Vec<u16>,
    processes: Vec<Option<TributaryProcess>>,
    /// Assignments each instance had logged when the last one started.
    baseline: Vec<usize>,
}

impl Job {
    fn new(input: &str, partitions: u32, table: String, extra: &str) -> Self {
        let dir = std::env::temp_dir()
            .join("tributary-tests")
            .join(unique("budget"));
        std::fs::create_dir_all(&dir).unwrap();
        Job {
            dir,
            input: input.to_owned(),
            partitions,
            group: format!("{input}.group"),
            table,
            extra: extra.to_owned(),
            ports: Vec::new(),
            processes: Vec::new(),
            baseline: Vec::new(),
        }
    }

    fn output(&self) -> String {
        format!("{}.enriched", self.input)
    }

    fn dead_letter(&self) -> String {
        format!("{}.dlq", self.input)
    }

    /// Starts another instance.
    fn start(&mut self) {
        let i = self.processes.len();
        self.baseline = (0..=i).map(|j| self.assignments(j)).collect();
        let dir = self.dir.join(format!("instance-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("tables.yaml"),
            format!(
                "data_dir: '{}'\nkafka: {{ brokers: '{}' }}\nremote:\n{}\n",
                dir.join("data").display(),
                brokers(),
                self.table
            ),
        )
        .unwrap();
        let port = free_port();
        let job = format!(
            "kafka: {{ brokers: '{}', consumer: {{ session.timeout.ms: '3000' }} }}\ntables: tables.yaml\n\
             metrics: {{ listen: '127.0.0.1:{port}' }}\nconcurrency: 64\n\
             jobs:\n  - name: shop\n    group_id: '{}'\n    input: {{ topics: ['{}'] }}\n    \
             joins: [{{ table: products, key: sku, select: [title] }}]\n    \
             output: {{ topic: '{}', key: order_id }}\n    dead_letter: {{ topic: '{}' }}\n{}\n",
            brokers(),
            self.group,
            self.input,
            self.output(),
            self.dead_letter(),
            self.extra
        );
        let path = dir.join("job.yaml");
        std::fs::write(&path, job).unwrap();
        let instance = format!("instance-{i}");
        self.ports.push(port);
        self.processes.push(Some(TributaryProcess::start_with_env(
            &["enrich"],
            &path,
            &[],
            &[("TRIBUTARY_INSTANCE", &instance)],
        )));
    }

    async fn metric(&self, i: usize, name: &str) -> f64 {
        match try_http_get(self.ports[i], "/metrics").await {
            Some((200, body)) => metric_sum(&body, name),
            _ => 0.0,
        }
    }

    fn running(&self) -> Vec<usize> {
        (0..self.processes.len())
            .filter(|i| self.processes[*i].is_some())
            .collect()
    }

    fn logs(&self) -> String {
        self.processes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                p.as_ref()
                    .map(|p| format!("--- instance {i}:\n{}", p.log()))
            })
            .collect()
    }

    /// Times instance `i` logged an assignment.
    fn assignments(&self, i: usize) -> usize {
        self.processes
            .get(i)
            .and_then(Option::as_ref)
            .map_or(0, |p| p.log().matches("input partitions assigned").count())
    }

    /// The input partitions instance `i` was last assigned.
    fn held(&self, i: usize) -> BTreeSet<i32> {
        let log = self.processes[i].as_ref().unwrap().log();
        let line = log
            .lines()
            .rev()
            .find(|l| l.contains("input partitions assigned"))
            .unwrap()
            .to_owned();
        line.split(&format!("\"{}\", ", self.input))
            .skip(1)
            .map(|rest| rest.split(')').next().unwrap().trim().parse().unwrap())
            .collect()
    }

    /// Waits until every running instance was assigned partitions since the
    /// last one started, they hold every partition, and each one's budget
    /// counts them all and has a rate.
    async fn settle(&self) {
        let running = self.running();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut settled = true;
            for &i in &running {
                let members = self
                    .metric(i, "tributary_table_remote_budget_members")
                    .await;
                let rate = self.metric(i, "tributary_table_remote_budget_rate").await;
                settled &= members == running.len() as f64 && rate > 0.0;
            }
            let reassigned = running
                .iter()
                .all(|&i| self.assignments(i) > self.baseline[i]);
            let held: usize = if reassigned {
                running.iter().map(|&i| self.held(i).len()).sum()
            } else {
                0
            };
            if settled && reassigned && held == self.partitions as usize {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the instances did not settle; logs:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn kill(&mut self, i: usize) {
        self.processes[i].take().unwrap().kill();
    }
}

/// `n` orders from `first`, each of a distinct product, in `partitions`
/// (all of them when `None`), round robin.
async fn produce_orders(input: &str, first: u64, n: u64, partitions: &[i32]) {
    let records: Vec<Produced> = (first..first + n)
        .map(|id| {
            let event = json!({ "order_id": id, "sku": format!("SKU-{}", id % 2000) });
            (
                partitions[id as usize % partitions.len()],
                Some(json!({ "order_id": id }).to_string().into_bytes()),
                Some(event.to_string().into_bytes()),
            )
        })
        .collect();
    produce_raw(input, &records).await;
}

const PARTITIONS: u32 = 6;

#[tokio::test(flavor = "multi_thread")]
async fn three_instances_keep_the_database_at_the_limit_through_a_sigkill() {
    const LIMIT: f64 = 100.0;
    let (db, user) = products(2000).await;
    let (_, port) = mysql_host_port();
    let input = unique("budget-orders");
    create_topic_with(&input, PARTITIONS as i32, "delete").await;
    let all: Vec<i32> = (0..PARTITIONS as i32).collect();
    produce_orders(&input, 0, 30_000, &all).await;
    let group = unique("orders-db");
    let table = format!(
        "  - name: products\n    mysql: {{ url: 'mysql://{user}:pw@127.0.0.1:{port}', table: {db}.products, key: [sku] }}\n    \
         cache: {{ max_entries: 0 }}\n    batch: {{ max_keys: 1 }}\n    \
         rate_limit: {{ per_second: {LIMIT}, burst: 10, max_wait_ms: 30000, budget_group: {group} }}"
    );
    let mut job = Job::new(&input, PARTITIONS, table, "");
    let (samples, sampler) = Samples::start(Duration::from_millis(250), move || {
        let user = user.clone();
        async move { selects_by(&user).await }
    });
    for instances in 1..=3 {
        job.start();
        job.settle().await;
        let from = Instant::now() + Duration::from_secs(3);
        let to = from + Duration::from_secs(10);
        samples.wait_past(to).await;
        let mut parts = Vec::new();
        for i in job.running() {
            parts.push((
                job.metric(i, "tributary_table_remote_budget_share").await,
                job.metric(i, "tributary_table_remote_budget_rate").await,
            ));
        }
        let what = format!(
            "{instances} instance(s), 10 s window (each second: {:.1?}; parts and rates now: {parts:.1?})",
            samples.per_second(from, to)
        );
        assert_near(samples.rate(from, to), LIMIT, &what, &|| job.logs());
        assert_never_above(&samples.per_second(from, to), LIMIT, &what);
    }
    // SIGKILL one: its part is free after the budget's member timeout (2 s),
    // before its partitions move (session timeout 3 s).
    let assigned: Vec<usize> = [0, 1].map(|i| job.assignments(i)).to_vec();
    let killed = Instant::now();
    job.kill(2);
    let deadline = killed + Duration::from_secs(30);
    while [0, 1].iter().any(|&i| job.assignments(i) == assigned[i]) {
        assert!(
            Instant::now() < deadline,
            "no rebalance; logs:\n{}",
            job.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rebalanced = Instant::now();
    let to = rebalanced + Duration::from_secs(11);
    samples.wait_past(to).await;
    sampler.abort();
    eprintln!(
        "SIGKILL: rebalance {:?} after it; each second from it: {:.1?}",
        rebalanced - killed,
        samples.per_second(killed, to)
    );
    assert_never_above(
        &samples.per_second(killed, to),
        LIMIT,
        "from the SIGKILL on",
    );
    let from = rebalanced + Duration::from_secs(1);
    assert_near(
        samples.rate(from, to),
        LIMIT,
        "two instances, from 1 s after the rebalance",
        &|| job.logs(),
    );
}

/// An HTTP catalog that counts requests, and answers 503 while `overloaded`
/// (without `Retry-After`: the back-off alone lowers the rate).
struct Catalog {
    port: u16,
    requests: Arc<AtomicU64>,
    overloaded: Arc<AtomicBool>,
}

impl Catalog {
    async fn start() -> Self {
        use axum::extract::Path;
        use axum::http::StatusCode;
        let requests = Arc::new(AtomicU64::new(0));
        let overloaded = Arc::new(AtomicBool::new(false));
        let (counted, refusing) = (requests.clone(), overloaded.clone());
        let app = axum::Router::new().route(
            "/products/{sku}",
            axum::routing::get(move |Path(sku): Path<String>| {
                counted.fetch_add(1, Ordering::SeqCst);
                let refuse = refusing.load(Ordering::SeqCst);
                async move {
                    if refuse {
                        (StatusCode::SERVICE_UNAVAILABLE, String::new())
                    } else {
                        let row = json!({ "sku": sku, "title": format!("title of {sku}") });
                        (StatusCode::OK, row.to_string())
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Catalog {
            port,
            requests,
            overloaded,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_backend_sees_the_limit_under_skew_and_backs_off_on_503() {
    const LIMIT: f64 = 100.0;
    let catalog = Catalog::start().await;
    let input = unique("budget-http");
    create_topic_with(&input, PARTITIONS as i32, "delete").await;
    let group = unique("catalog");
    let table = format!(
        "  - name: products\n    http: {{ url: 'http://127.0.0.1:{}/products/{{sku}}', key: [sku] }}\n    \
         cache: {{ max_entries: 0 }}\n    batch: {{ max_keys: 5 }}\n    retries: {{ max: 0 }}\n    \
         breaker: {{ failures: 100000 }}\n    \
         rate_limit: {{ per_second: {LIMIT}, burst: 10, max_wait_ms: 30000, budget_group: {group} }}",
        catalog.port
    );
    let retry =
        format!("    retry: {{ topic: '{input}.retry', delay_ms: 1000, max_attempts: 100 }}");
    let mut job = Job::new(&input, PARTITIONS, table, &retry);
    let requests = catalog.requests.clone();
    let (samples, sampler) = Samples::start(Duration::from_millis(100), move || {
        let count = requests.load(Ordering::SeqCst);
        async move { count }
    });
    for _ in 0..3 {
        job.start();
    }
    job.settle().await;

    // Skew: every event on instance 0's partitions.
    let busy: Vec<i32> = job.held(0).into_iter().collect();
    let skewed = 2_000;
    produce_orders(&input, 0, skewed, &busy).await;
    let produced = Instant::now();
    let (from, to) = (
        produced + Duration::from_secs(10),
        produced + Duration::from_secs(13),
    );
    samples.wait_past(to).await;
    let rate = samples.rate(from, to);
    eprintln!("skew: 10–13 s after the backlog, {rate:.1}/s");
    assert!(
        rate >= LIMIT * 0.8,
        "the busy instance reaches {rate:.1}/s 10 s after the skew; 80% of the limit is {}; logs:\n{}",
        LIMIT * 0.8,
        job.logs()
    );
    assert_never_above(&samples.per_second(produced, to), LIMIT, "under skew");

    // All busy: the instances split the limit.
    let all: Vec<i32> = (0..PARTITIONS as i32).collect();
    let uniform = 4_500;
    produce_orders(&input, skewed, uniform, &all).await;
    let from = Instant::now() + Duration::from_secs(3);
    let to = from + Duration::from_secs(10);
    samples.wait_past(to).await;
    assert_near(
        samples.rate(from, to),
        LIMIT,
        "three busy instances, 10 s window",
        &|| job.logs(),
    );
    assert_never_above(&samples.per_second(from, to), LIMIT, "three busy instances");

    // 503 for 5 s: the rate drops, then recovers, and no event is lost.
    catalog.overloaded.store(true, Ordering::SeqCst);
    let outage = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    catalog.overloaded.store(false, Ordering::SeqCst);
    let back = Instant::now();
    let during = samples.rate(outage + Duration::from_secs(2), back);
    eprintln!("503: seconds 2–5 of the outage, {during:.1}/s");
    assert!(
        during <= LIMIT * 0.5,
        "the rate drops while the backend answers 503: {during:.1}/s; logs:\n{}",
        job.logs()
    );
    let (from, to) = (
        back + Duration::from_secs(8),
        back + Duration::from_secs(10),
    );
    samples.wait_past(to).await;
    let after = samples.rate(from, to);
    eprintln!("503: 8–10 s after the outage, {after:.1}/s");
    assert!(
        after >= LIMIT * 0.9,
        "the rate recovers within 8 s after the outage: {after:.1}/s; logs:\n{}",
        job.logs()
    );
    for i in 0..3 {
        let decreases = job
            .metric(
                i,
                &format!("tributary_table_remote_budget_decreases_total{{group=\"{group}\",reason=\"http_503\"}}"),
            )
            .await;
        assert!(
            decreases >= 1.0,
            "instance {i} backed off on 503: {decreases}"
        );
    }
    let total = skewed + uniform;
    let out = read_raw(&job.output(), Duration::from_secs(120), move |r| {
        r.iter()
            .map(|r| r.json()["order_id"].as_u64().unwrap())
            .collect::<BTreeSet<_>>()
            .len() as u64
            >= total
    })
    .await;
    sampler.abort();
    let ids: BTreeSet<u64> = out
        .iter()
        .map(|r| r.json()["order_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, (0..total).collect(), "every order is enriched");
    for record in &out {
        let event = record.json();
        assert_eq!(
            event["title"],
            format!("title of {}", event["sku"].as_str().unwrap())
        );
    }
    let dead = read_raw(&job.dead_letter(), Duration::from_secs(1), |_| false).await;
    assert!(dead.is_empty(), "nothing dead-lettered: {dead:?}");
}
