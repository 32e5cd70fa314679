//! Remote tables: the [`Table`] trait over a store that is not local, protected
//! so that lookups cannot overload it.
//!
//! A lookup goes: the row cache (rows and misses, each with a TTL; concurrent
//! misses of one key share one load: single-flight) → [`fetcher`] (batching,
//! circuit breaker, rate limit, timeout, retries) → [`backend`] ([`mysql`],
//! [`http`], or [`lookup_api`]: another Tributary's tables). The rate limit is
//! a [`budget`], shared with other processes when it names a `budget_group`,
//! that backs off when the backend is overloaded.
//! A remote table can follow the change topic of its source table
//! ([`invalidation`]): each change evicts the key, so cached rows stay fresh
//! without a short TTL.

pub mod backend;
pub mod breaker;
pub mod budget;
pub mod fetcher;
pub mod http;
pub mod invalidation;
pub mod lookup_api;
pub mod mysql;
pub mod stats;

use std::hash::{Hash as _, Hasher as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use quick_cache::UnitWeighter;
use quick_cache::sync::{Cache, DefaultLifecycle, EntryAction, EntryResult};
use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tributary_table_api::key_values::{Expect, KeyValues, key_values};
use tributary_table_api::{KeyRange, LookupError, Table, TableDescription};

use crate::config::{BackendConfig, RemoteTableConfig};
use crate::error::TableError;
use crate::metrics::TablesMetrics;
use crate::remote::backend::Backend;
use crate::remote::breaker::Breaker;
use crate::remote::budget::{Budget, Budgets, Weights};
use crate::remote::fetcher::{Fetcher, Policy};
use crate::remote::stats::RemoteStats;

/// A looked-up row, or `None` for a key without one.
type Row = Option<Arc<Value>>;

/// A cached lookup, until it expires.
#[derive(Clone)]
struct Cached {
    row: Row,
    expires: Instant,
}

impl Cached {
    /// The row, if the lookup is still fresh at `now`.
    fn fresh(&self, now: Instant) -> Option<&Row> {
        (now < self.expires).then_some(&self.row)
    }
}

/// The row cache, by the JSON text of the key values: at most `max_entries`
/// lookups, the least recently and frequently used leaving first (CLOCK-Pro;
/// see [`row_cache`] for how it is sharded).
/// Keys are hashed with foldhash: a hit is on every enriched event's path, and
/// SipHash's resistance to chosen keys is not needed for keys bounded by the
/// cache's capacity.
type RowCache = Cache<String, Cached, UnitWeighter, foldhash::fast::RandomState>;

/// Entries per shard of the row cache, at least (but for a smaller cache).
const ENTRIES_PER_SHARD: u64 = 16_384;

/// A row cache of at most `max_entries`. Each shard holds its share of them,
/// and keys spread over the shards unevenly: a cache with many small shards,
/// sized to the keys in use, would keep missing the keys of its fullest
/// shards. So shards hold at least [`ENTRIES_PER_SHARD`] (the keys' spread is
/// then under 1% per shard), and a smaller cache is one shard, its bound
/// exact.
fn row_cache(max_entries: u64) -> RowCache {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let shards = usize::try_from(max_entries / ENTRIES_PER_SHARD)
        .unwrap_or(usize::MAX)
        .clamp(1, cores * 4);
    let options = quick_cache::OptionsBuilder::new()
        .estimated_items_capacity(usize::try_from(max_entries).unwrap_or(usize::MAX))
        .weight_capacity(max_entries)
        .shards(shards)
        .build()
        .expect("capacities and shards are set");
    Cache::with_options(
        options,
        UnitWeighter,
        foldhash::fast::RandomState::default(),
        DefaultLifecycle::default(),
    )
}

/// Rows live `hit`, misses `miss`.
struct Ttl {
    hit: Duration,
    miss: Duration,
}

impl Ttl {
    /// `row`, looked up at `now`, cached until it expires.
    fn cached(&self, row: Row, now: Instant) -> Cached {
        let ttl = if row.is_some() { self.hit } else { self.miss };
        Cached {
            expires: now + ttl,
            row,
        }
    }
}

/// Invalidation counters, one per stripe of keys.
const GENERATION_STRIPES: usize = 1024;

/// A table answered by a remote store.
pub struct RemoteTable {
    name: String,
    key_columns: Vec<String>,
    cache: Option<RowCache>,
    ttl: Ttl,
    /// Bumped by every invalidation of a key in the stripe: a load that saw its
    /// stripe change does not keep its row (it may predate the change).
    generations: Box<[AtomicU64]>,
    fetcher: Fetcher,
    stats: RemoteStats,
    source: String,
}

impl RemoteTable {
    /// Stops taking lookups; waits until those taken are answered.
    pub async fn close(&self) {
        self.fetcher.close().await;
    }

    /// A table over `backend`, with the layers `config` describes; its calls
    /// take permits of `budget` (its rate limit's).
    pub fn new(
        config: &RemoteTableConfig,
        backend: Arc<dyn Backend>,
        budget: Option<Arc<Budget>>,
        metrics: &TablesMetrics,
    ) -> Self {
        let stats = RemoteStats::new(&config.name, metrics);
        let policy = Policy {
            max_keys: config.batch.max_keys,
            window: Duration::from_millis(config.batch.window_ms),
            timeout: Duration::from_millis(config.timeout_ms),
            retries: config.retries.max,
            backoff: Duration::from_millis(config.retries.backoff_ms),
            max_wait: Duration::from_millis(
                config.rate_limit.as_ref().map_or(0, |l| l.max_wait_ms),
            ),
        };
        let breaker = Arc::new(Breaker::new(
            config.breaker.failures,
            Duration::from_secs(config.breaker.open_s),
        ));
        let max_entries = config.cache.max_entries;
        let cache = (max_entries > 0).then(|| row_cache(max_entries));
        RemoteTable {
            name: config.name.clone(),
            key_columns: config.key_columns().to_vec(),
            cache,
            ttl: Ttl {
                hit: Duration::from_secs(config.cache.ttl_s),
                miss: Duration::from_secs(config.cache.negative_ttl_s),
            },
            generations: (0..GENERATION_STRIPES).map(|_| AtomicU64::new(0)).collect(),
            fetcher: Fetcher::start(backend, policy, budget, breaker, stats.clone()),
            stats,
            source: match config.backend() {
                Some(BackendConfig::MySql(m)) => format!("mysql:{}", m.table),
                Some(BackendConfig::Http(h)) => h.url.clone(),
                Some(BackendConfig::Tributary(t)) => format!("{}#{}", t.endpoint, t.table),
                None => String::new(),
            },
        }
    }

    /// The key's values in key-column order (borrowed from `key`), and its
    /// cache key: nothing is cloned for a lookup the cache answers.
    fn key_values<'k>(&self, key: &'k Value) -> Result<(KeyValues<'k>, String), LookupError> {
        let values = key_values(&self.name, &self.key_columns, key, Expect::Full)?;
        let text = serde_json::to_string(values.as_slice()).expect("JSON serializes");
        Ok((values, text))
    }

    /// The table's name.
    pub fn name_str(&self) -> &str {
        &self.name
    }

    /// Evicts `key` (a change of the source row); the next lookup reads it again.
    /// A load of the key already under way does not keep its row in the cache.
    pub async fn invalidate(&self, key: &Value) {
        if let (Some(cache), Ok((_, text))) = (&self.cache, self.key_values(key)) {
            self.generation(&text).fetch_add(1, Ordering::SeqCst);
            cache.remove(text.as_str());
            self.stats.invalidations.inc();
        }
    }

    /// The invalidation counter of the stripe `key` falls in.
    fn generation(&self, key: &str) -> &AtomicU64 {
        let mut hasher = std::hash::DefaultHasher::new();
        key.hash(&mut hasher);
        &self.generations[hasher.finish() as usize % self.generations.len()]
    }

    /// Reads the row of `values` from the backend.
    async fn fetch(&self, values: KeyValues<'_>) -> Result<Row, fetcher::RemoteError> {
        self.fetcher
            .get(owned(values))
            .await
            .map(|r| r.map(Arc::new))
    }

    /// The row of `text` (a key the cache has not, or has expired): loaded
    /// and cached, or found cached by a concurrent lookup. Concurrent misses
    /// of one key wait for one load; a failed load caches nothing, and the
    /// next waiting lookup loads in its turn.
    async fn load(
        &self,
        cache: &RowCache,
        text: &str,
        values: KeyValues<'_>,
    ) -> Result<Row, fetcher::RemoteError> {
        let fresh = |_: &String, cached: &mut Cached| match cached.fresh(Instant::now()) {
            Some(row) => EntryAction::Retain(row.clone()),
            None => EntryAction::ReplaceWithGuard,
        };
        let guard = match cache.entry_async(text, fresh).await {
            EntryResult::Retained(row) => return Ok(row),
            EntryResult::Vacant(guard) | EntryResult::Replaced(guard, _) => guard,
            EntryResult::Removed(..) | EntryResult::Timeout => {
                unreachable!("the callback never removes, and the wait has no timeout")
            }
        };
        let generation = self.generation(text);
        let started = generation.load(Ordering::SeqCst);
        let row = self.fetch(values).await?;
        let _ = guard.insert(self.ttl.cached(row.clone(), Instant::now()));
        // The row changed while it was being loaded: the load may have read the
        // old row, so it must not stay in the cache.
        if generation.load(Ordering::SeqCst) != started {
            cache.remove(text);
        }
        Ok(row)
    }

    fn remote_error(&self, e: impl std::fmt::Display) -> LookupError {
        LookupError::Unavailable {
            table: self.name.clone(),
            problem: e.to_string(),
        }
    }
}

/// Key values to hand to the backend.
fn owned(values: KeyValues<'_>) -> Vec<Value> {
    values.into_iter().cloned().collect()
}

#[async_trait]
impl Table for RemoteTable {
    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self, key: &Value) -> Result<Option<Value>, LookupError> {
        Ok(self.get_shared(key).await?.map(|row| (*row).clone()))
    }

    async fn get_shared(&self, key: &Value) -> Result<Option<Arc<Value>>, LookupError> {
        let started = Instant::now();
        let (values, text) = self.key_values(key)?;
        let row = match &self.cache {
            None => {
                self.stats.misses.inc();
                self.fetch(values).await
            }
            Some(cache) => match cache.get(text.as_str()) {
                Some(cached) if cached.fresh(started).is_some() => {
                    self.stats.hits.inc();
                    Ok(cached.row)
                }
                _ => {
                    self.stats.misses.inc();
                    self.load(cache, &text, values).await
                }
            },
        }
        .map_err(|e| self.remote_error(e))?;
        self.stats
            .get_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(row)
    }

    async fn multi_get(&self, keys: &[Value]) -> Result<Vec<Option<Value>>, LookupError> {
        // At once, so that the misses share backend calls.
        futures::future::try_join_all(keys.iter().map(|k| self.get(k))).await
    }

    async fn scan(&self, _: &KeyRange, _: usize) -> Result<Vec<(Value, Value)>, LookupError> {
        Err(LookupError::Unsupported {
            table: self.name.clone(),
            operation: "scan (remote tables answer point lookups only)",
        })
    }

    async fn describe(&self) -> TableDescription {
        TableDescription {
            name: self.name.clone(),
            kind: "remote",
            topic: self.source.clone(),
            key_columns: self.key_columns.clone(),
            partition_count: 0,
            global: false,
            rows_estimate: 0,
            partitions: Vec::new(),
        }
    }
}

/// The remote tables of a tables file and the tasks that keep their caches
/// fresh and share their rate limits.
#[derive(Default)]
pub struct RemoteTables {
    /// The tables, in the order of the file.
    pub tables: Vec<Arc<RemoteTable>>,
    /// Where jobs say which share of their input this process holds.
    pub weights: Arc<Weights>,
    /// CDC invalidation followers.
    followers: JoinSet<()>,
    /// The budgets' announcer, reader and resizer.
    budgets: JoinSet<Result<(), TableError>>,
}

impl RemoteTables {
    /// After the shutdown given to [`start_all`]: waits for the invalidation
    /// followers and the budget tasks, then closes every table (lookups
    /// already taken are answered).
    pub async fn close(mut self) {
        while self.followers.join_next().await.is_some() {}
        while let Some(done) = self.budgets.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "a rate-limit budget task failed"),
                Err(e) => tracing::warn!(error = %e, "a rate-limit budget task panicked"),
            }
        }
        for table in &self.tables {
            table.close().await;
        }
    }
}

/// Builds every remote table of `config`, starts their CDC invalidation and
/// the sharing of their rate limits (which run until `shutdown`); `jobs`:
/// enricher jobs will say which share of their input this process holds.
pub async fn start_all(
    config: &crate::TablesConfig,
    jobs: bool,
    metrics: &TablesMetrics,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<RemoteTables, TableError> {
    let budgets = Budgets::new(&config.remote, jobs, metrics);
    let mut started = RemoteTables {
        weights: budgets.weights(),
        ..RemoteTables::default()
    };
    budgets
        .start(
            &config.kafka,
            &config.budgets,
            shutdown.clone(),
            &mut started.budgets,
        )
        .await?;
    for remote in &config.remote {
        let unusable = |e: &dyn std::fmt::Display| TableError::Backend {
            table: remote.name.clone(),
            problem: e.to_string(),
        };
        let backend: Arc<dyn Backend> = match remote.backend() {
            Some(BackendConfig::MySql(m)) => {
                Arc::new(mysql::MySqlBackend::new(m).map_err(|e| unusable(&e))?)
            }
            Some(BackendConfig::Http(h)) => Arc::new(http::HttpBackend::new(h)),
            Some(BackendConfig::Tributary(t)) => {
                Arc::new(lookup_api::LookupApiBackend::new(t).map_err(|e| unusable(&e))?)
            }
            None => unreachable!("validated: one backend per remote table"),
        };
        let table = Arc::new(RemoteTable::new(
            remote,
            backend,
            budgets.of(remote),
            metrics,
        ));
        if let Some(topic) = &remote.invalidate_from {
            let follow =
                invalidation::follow(table.clone(), &config.kafka, topic, shutdown.clone());
            started.followers.spawn(follow.await?);
        }
        started.tables.push(table);
    }
    Ok(started)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::remote::backend::BackendError;

    /// Answers every key but `"missing"` after `delay`, recording each call's keys.
    struct Slow {
        calls: Mutex<Vec<Vec<Vec<Value>>>>,
        delay: Duration,
    }

    #[async_trait]
    impl Backend for Slow {
        async fn fetch(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, BackendError> {
            self.calls.lock().unwrap().push(keys.to_vec());
            tokio::time::sleep(self.delay).await;
            Ok(keys
                .iter()
                .map(|k| (k[0] != "missing").then(|| json!({ "sku": k[0] })))
                .collect())
        }
    }

    fn table(settings: &str, delay: Duration) -> (Arc<RemoteTable>, Arc<Slow>) {
        let config = crate::TablesConfig::parse(&format!(
            "data_dir: /x\nkafka: {{ brokers: b }}\nremote:\n  - name: t\n    mysql: {{ url: 'mysql://u@h', table: d.t, key: [sku] }}\n{settings}\n"
        ))
        .unwrap();
        let backend = Arc::new(Slow {
            calls: Mutex::new(Vec::new()),
            delay,
        });
        let metrics = TablesMetrics::default();
        let budgets = Budgets::new(&config.remote, false, &metrics);
        let table = RemoteTable::new(
            &config.remote[0],
            backend.clone(),
            budgets.of(&config.remote[0]),
            &metrics,
        );
        (Arc::new(table), backend)
    }

    #[tokio::test]
    async fn concurrent_misses_of_one_key_make_one_call() {
        let (table, backend) = table("", Duration::from_millis(50));
        let gets: Vec<_> = (0..10)
            .map(|_| {
                let table = table.clone();
                tokio::spawn(async move { table.get(&json!("A")).await })
            })
            .collect();
        for get in gets {
            assert_eq!(get.await.unwrap().unwrap(), Some(json!({ "sku": "A" })));
        }
        assert_eq!(*backend.calls.lock().unwrap(), [vec![vec![json!("A")]]]);
    }

    /// Keys the backend was asked for, over every call.
    fn fetched(backend: &Slow) -> Vec<Value> {
        let calls = backend.calls.lock().unwrap();
        calls.iter().flatten().map(|key| key[0].clone()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn rows_and_misses_are_cached_until_their_own_ttls() {
        let (table, backend) = table(
            "    cache: { ttl_s: 60, negative_ttl_s: 5 }",
            Duration::ZERO,
        );
        let both = async || {
            assert_eq!(
                table.get(&json!("A")).await.unwrap(),
                Some(json!({ "sku": "A" }))
            );
            assert_eq!(table.get(&json!("missing")).await.unwrap(), None);
        };
        both().await;
        both().await;
        assert_eq!(fetched(&backend), [json!("A"), json!("missing")]);
        tokio::time::advance(Duration::from_secs(6)).await;
        both().await;
        assert_eq!(
            fetched(&backend),
            [json!("A"), json!("missing"), json!("missing")],
            "the miss expired, the row did not"
        );
        tokio::time::advance(Duration::from_secs(55)).await;
        both().await;
        assert_eq!(
            fetched(&backend)[3..],
            [json!("A"), json!("missing")],
            "both expired"
        );
    }

    /// Looks up `n` distinct keys, `passes` times over, each found.
    async fn look_up_keys(table: &RemoteTable, n: usize, passes: usize) {
        let keys: Vec<Value> = (0..n).map(|i| json!(format!("K{i}"))).collect();
        for _ in 0..passes {
            for key in &keys {
                assert!(table.get(key).await.unwrap().is_some());
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_cache_sized_to_its_keys_holds_every_one() {
        let (table, backend) = table("    cache: { max_entries: 3000 }", Duration::ZERO);
        look_up_keys(&table, 3_000, 3).await;
        assert_eq!(fetched(&backend).len(), 3_000, "each key fetched once");
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_holds_at_most_max_entries() {
        let (table, backend) = table("    cache: { max_entries: 100 }", Duration::ZERO);
        look_up_keys(&table, 1_000, 2).await;
        // Each key was fetched once on the first pass; on the second, at most
        // the 100 the cache could hold were answered without the backend.
        let fetched = fetched(&backend).len();
        assert!((1_900..=2_000).contains(&fetched), "{fetched} keys fetched");
    }

    #[tokio::test]
    async fn a_lookup_fails_when_no_permit_comes_within_the_wait_budget() {
        let (table, backend) = table(
            "    cache: { max_entries: 0 }\n    batch: { max_keys: 1 }\n    rate_limit: { per_second: 10, burst: 1, max_wait_ms: 150 }",
            Duration::ZERO,
        );
        // The bucket starts empty: one permit after 100 ms, the next after 200 ms,
        // past the wait budget of the lookups asking at once.
        let started = std::time::Instant::now();
        let gets = ["A", "B", "C"].map(|k| {
            let table = table.clone();
            tokio::spawn(async move { table.get(&json!(k)).await })
        });
        let mut refused = 0;
        for get in gets {
            match get.await.unwrap() {
                Ok(row) => assert!(row.is_some()),
                Err(err) => {
                    assert!(
                        err.to_string()
                            .contains("rate limit: no permit within 150ms"),
                        "{err}"
                    );
                    refused += 1;
                }
            }
        }
        assert_eq!(refused, 2);
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(
            backend.calls.lock().unwrap().len(),
            1,
            "the refused lookups called nothing"
        );
    }

    /// Answers `version` of the row, after `release` when one is set.
    struct Versioned {
        version: AtomicU64,
        release: Option<Arc<tokio::sync::Notify>>,
        calls: AtomicU64,
    }

    #[async_trait]
    impl Backend for Versioned {
        async fn fetch(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, BackendError> {
            let version = self.version.load(Ordering::SeqCst);
            self.calls.fetch_add(1, Ordering::SeqCst);
            if let Some(release) = &self.release {
                release.notified().await;
            }
            Ok(keys.iter().map(|_| Some(json!({ "v": version }))).collect())
        }
    }

    #[tokio::test]
    async fn a_change_during_a_load_does_not_leave_the_old_row_cached() {
        let config = crate::TablesConfig::parse(
            "data_dir: /x\nkafka: { brokers: b }\nremote:\n  - name: t\n    mysql: { url: 'mysql://u@h', table: d.t, key: [k] }\n",
        )
        .unwrap();
        let release = Arc::new(tokio::sync::Notify::new());
        let backend = Arc::new(Versioned {
            version: AtomicU64::new(1),
            release: Some(release.clone()),
            calls: AtomicU64::new(0),
        });
        let table = Arc::new(RemoteTable::new(
            &config.remote[0],
            backend.clone(),
            None,
            &TablesMetrics::default(),
        ));
        let load = tokio::spawn({
            let table = table.clone();
            async move { table.get(&json!("a")).await }
        });
        while backend.calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // The row changes (version 2) while version 1 is being loaded.
        backend.version.store(2, Ordering::SeqCst);
        table.invalidate(&json!("a")).await;
        release.notify_one();
        assert_eq!(load.await.unwrap().unwrap(), Some(json!({ "v": 1 })));
        release.notify_one(); // lets the next load through at once
        assert_eq!(
            table.get(&json!("a")).await.unwrap(),
            Some(json!({ "v": 2 })),
            "the row loaded before the change was not kept"
        );
        assert_eq!(backend.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn keys_are_given_as_objects_arrays_or_bare_values() {
        let (table, _) = table("", Duration::ZERO);
        for key in [json!("A"), json!(["A"]), json!({ "sku": "A" })] {
            assert_eq!(table.get(&key).await.unwrap(), Some(json!({ "sku": "A" })));
        }
        let err = table.get(&json!({ "id": 1 })).await.unwrap_err();
        assert!(
            err.to_string().contains("`id` is not a key column"),
            "{err}"
        );
        assert!(table.get(&json!(["A", "B"])).await.is_err());
    }
}
