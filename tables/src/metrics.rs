//! Table metrics: names and labels in one place. What every lookup updates
//! (latencies, cache hits, the lookup API's requests) is striped
//! (`tributary-metrics`): many threads update it without contending.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;
use tributary_metrics::{StripedCounter, StripedHistogram};

/// Label: a table.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabel {
    /// Table name.
    pub table: String,
}

/// Labels: a table partition.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabel {
    /// Table name.
    pub table: String,
    /// Kafka partition.
    pub partition: String,
}

impl PartitionLabel {
    /// Label of `table`'s `partition`.
    pub fn new(table: &str, partition: i32) -> Self {
        PartitionLabel {
            table: table.to_owned(),
            partition: partition.to_string(),
        }
    }
}

fn latency_histogram() -> StripedHistogram {
    // 1 µs .. ~0.5 s
    StripedHistogram::new(exponential_buckets(1e-6, 2.0, 20))
}

/// Every table metric.
#[derive(Clone)]
pub struct TablesMetrics {
    /// Records applied to the store, per partition.
    pub applied: Family<PartitionLabel, Counter>,
    /// Records that could not be applied (malformed), per table; they are skipped.
    pub bad_records: Family<TableLabel, Counter>,
    /// Records of a partitioned table on another partition than its partitioner
    /// gives their key, per partition (the partition stops being ready).
    pub misplaced_records: Family<PartitionLabel, Counter>,
    /// Records of a global table not applied because a newer record of their key
    /// arrived on another partition (the producer moved the key).
    pub superseded_records: Family<TableLabel, Counter>,
    /// Placeholders of values the source did not send (PostgreSQL's unchanged
    /// TOAST) replaced by the held value (`fill_unavailable_values`).
    pub unavailable_values_filled: Family<TableLabel, Counter>,
    /// Such placeholders left in rows: no held value to fill them from.
    pub unavailable_values_unfilled: Family<TableLabel, Counter>,
    /// Records between the applied offset and the topic's end, per partition.
    pub lag_records: Family<PartitionLabel, Gauge>,
    /// 1 when the partition has caught up with its end at assignment.
    pub ready: Family<PartitionLabel, Gauge>,
    /// Latency of a local read, in seconds: of one key, or of a batch's keys
    /// read together (`multi_get`, `BatchGet`); the lookup API's reads
    /// answered from its encoded rows count too.
    pub get_seconds: Family<TableLabel, StripedHistogram, fn() -> StripedHistogram>,
    /// Versioned tables: bytes of the history on disk, per table.
    pub history_bytes: Family<TableLabel, Gauge>,
    /// Versioned tables: versions removed by retention, per table.
    pub versions_removed: Family<TableLabel, Counter>,
    /// SST bytes on disk.
    pub disk_bytes: Gauge<u64, AtomicU64>,
    /// Memtable and block-cache bytes.
    pub memory_bytes: Gauge<u64, AtomicU64>,
    /// Remote tables: backend calls by result (`ok`, `retried`, `failed`).
    pub remote_calls: Family<ResultLabel, Counter>,
    /// Remote tables: lookups answered by the cache (`hit`) or not (`miss`).
    pub remote_cache: Family<ResultLabel, StripedCounter>,
    /// Remote tables: keys per backend call.
    pub remote_batch_keys: Family<TableLabel, StripedHistogram, fn() -> StripedHistogram>,
    /// Remote tables: backend calls that waited for a rate-limiter permit.
    pub remote_limiter_waits: Family<TableLabel, Counter>,
    /// Remote tables: 1 while the circuit breaker is open.
    pub remote_breaker_open: Family<TableLabel, Gauge>,
    /// Remote tables: latency of `get`, in seconds.
    pub remote_get_seconds: Family<TableLabel, StripedHistogram, fn() -> StripedHistogram>,
    /// Remote tables: cached keys evicted by change events of the source.
    pub remote_invalidations: Family<TableLabel, Counter>,
    /// Rate limits: requests per second this process may send now (its part
    /// after back-off), per budget (the group, or the table).
    pub remote_budget_rate: Family<GroupLabel, Gauge<f64, AtomicU64>>,
    /// Rate limits: this process's part of the limit, before back-off.
    pub remote_budget_share: Family<GroupLabel, Gauge<f64, AtomicU64>>,
    /// Rate limits: processes sharing the budget, this one included.
    pub remote_budget_members: Family<GroupLabel, Gauge>,
    /// Rate limits: back-off decreases, by the overload signal that caused them.
    pub remote_budget_decreases: Family<ReasonLabel, Counter>,
    /// Rate limits: 1 for the reason of the last decrease (0 for earlier ones).
    pub remote_budget_last_decrease: Family<ReasonLabel, Gauge>,
    /// Lookup API: requests by method and status code.
    pub grpc_requests: Family<GrpcLabel, StripedCounter>,
    /// Lookup API: latency by method, in seconds.
    pub grpc_seconds: Family<MethodLabel, StripedHistogram, fn() -> StripedHistogram>,
    /// Lookup API: requests (or parts of them) forwarded to the owner of a partition.
    pub grpc_forwarded: Family<MethodLabel, Counter>,
    /// Lookup API: rows of local tables answered from the cache of encoded
    /// rows (`hit`) or read from the store (`miss`).
    pub grpc_row_cache: Family<ResultLabel, StripedCounter>,
    /// Jobs' joins: rows of local tables answered from the rows kept for
    /// joins (`hit`) or read from the store (`miss`).
    pub join_row_cache: Family<ResultLabel, StripedCounter>,
}

/// Label: a rate-limit budget.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    /// The `budget_group`, or the table's name for a limit of its own.
    pub group: String,
}

/// Labels: a budget and an overload signal.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// The budget.
    pub group: String,
    /// `http_429`, `http_503`, `mysql_too_many_connections`, `timeout`, …
    pub reason: String,
}

/// Label: a lookup API method.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabel {
    /// `Get`, `BatchGet`, `Scan`, `ListTables`, `DescribeTable`.
    pub method: &'static str,
}

/// Labels: a lookup API method and the status it answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabel {
    /// The method.
    pub method: &'static str,
    /// gRPC status code name (`Ok`, `InvalidArgument`, ...).
    pub code: String,
}

/// Labels: a table and an outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// Table name.
    pub table: String,
    /// Outcome.
    pub result: String,
}

fn batch_histogram() -> StripedHistogram {
    // 1 .. 512 keys
    StripedHistogram::new(exponential_buckets(1.0, 2.0, 10))
}

impl Default for TablesMetrics {
    fn default() -> Self {
        TablesMetrics {
            applied: Family::default(),
            bad_records: Family::default(),
            misplaced_records: Family::default(),
            superseded_records: Family::default(),
            unavailable_values_filled: Family::default(),
            unavailable_values_unfilled: Family::default(),
            lag_records: Family::default(),
            ready: Family::default(),
            get_seconds: Family::new_with_constructor(latency_histogram),
            history_bytes: Family::default(),
            versions_removed: Family::default(),
            disk_bytes: Gauge::default(),
            memory_bytes: Gauge::default(),
            remote_calls: Family::default(),
            remote_cache: Family::default(),
            remote_batch_keys: Family::new_with_constructor(batch_histogram),
            remote_limiter_waits: Family::default(),
            remote_breaker_open: Family::default(),
            remote_get_seconds: Family::new_with_constructor(latency_histogram),
            remote_invalidations: Family::default(),
            remote_budget_rate: Family::default(),
            remote_budget_share: Family::default(),
            remote_budget_members: Family::default(),
            remote_budget_decreases: Family::default(),
            remote_budget_last_decrease: Family::default(),
            grpc_requests: Family::default(),
            grpc_seconds: Family::new_with_constructor(latency_histogram),
            grpc_forwarded: Family::default(),
            grpc_row_cache: Family::default(),
            join_row_cache: Family::default(),
        }
    }
}

impl TablesMetrics {
    /// Creates the metrics and registers them under `tributary_table_*`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = TablesMetrics::default();
        let r = registry.sub_registry_with_prefix("tributary_table");
        r.register(
            "applied_records",
            "Records applied to local tables",
            m.applied.clone(),
        );
        r.register(
            "bad_records",
            "Malformed records skipped",
            m.bad_records.clone(),
        );
        r.register(
            "misplaced_records",
            "Records on another partition than the table's partitioner gives their key",
            m.misplaced_records.clone(),
        );
        r.register(
            "superseded_records",
            "Global-table records skipped for a newer record of their key on another partition",
            m.superseded_records.clone(),
        );
        r.register(
            "unavailable_values_filled",
            "Placeholders of values the source did not send, filled from the held row",
            m.unavailable_values_filled.clone(),
        );
        r.register(
            "unavailable_values_unfilled",
            "Placeholders of values the source did not send, left for want of a held value",
            m.unavailable_values_unfilled.clone(),
        );
        r.register(
            "lag_records",
            "Records not yet applied",
            m.lag_records.clone(),
        );
        r.register(
            "ready",
            "1 when the partition has caught up",
            m.ready.clone(),
        );
        r.register(
            "get_seconds",
            "Latency of local lookups",
            m.get_seconds.clone(),
        );
        r.register(
            "history_bytes",
            "Bytes of a versioned table's history on disk (SST files)",
            m.history_bytes.clone(),
        );
        r.register(
            "versions_removed",
            "Versions of a versioned table removed by retention",
            m.versions_removed.clone(),
        );
        r.register("disk_bytes", "RocksDB SST bytes", m.disk_bytes.clone());
        r.register(
            "memory_bytes",
            "RocksDB memtable, block and row cache bytes, and the lookup API's cache of encoded rows",
            m.memory_bytes.clone(),
        );
        r.register(
            "remote_calls",
            "Backend calls of remote tables, by result",
            m.remote_calls.clone(),
        );
        r.register(
            "remote_cache",
            "Remote-table lookups answered by the cache (hit) or not (miss)",
            m.remote_cache.clone(),
        );
        r.register(
            "remote_batch_keys",
            "Keys per backend call",
            m.remote_batch_keys.clone(),
        );
        r.register(
            "remote_limiter_waits",
            "Backend calls that waited for a rate-limiter permit",
            m.remote_limiter_waits.clone(),
        );
        r.register(
            "remote_breaker_open",
            "1 while a remote table's circuit breaker is open",
            m.remote_breaker_open.clone(),
        );
        r.register(
            "remote_get_seconds",
            "Latency of remote-table lookups",
            m.remote_get_seconds.clone(),
        );
        r.register(
            "remote_invalidations",
            "Cached keys evicted by change events",
            m.remote_invalidations.clone(),
        );
        r.register(
            "remote_budget_rate",
            "Requests per second this process may send to a rate-limited backend now (its part of the budget after back-off)",
            m.remote_budget_rate.clone(),
        );
        r.register(
            "remote_budget_share",
            "This process's part of a rate-limit budget, before back-off",
            m.remote_budget_share.clone(),
        );
        r.register(
            "remote_budget_members",
            "Processes sharing a rate-limit budget, this one included",
            m.remote_budget_members.clone(),
        );
        r.register(
            "remote_budget_decreases",
            "Back-off decreases of a rate-limit budget, by overload signal",
            m.remote_budget_decreases.clone(),
        );
        r.register(
            "remote_budget_last_decrease",
            "1 for the overload signal of a budget's last back-off decrease",
            m.remote_budget_last_decrease.clone(),
        );
        r.register(
            "grpc_requests",
            "Lookup API requests by method and status code",
            m.grpc_requests.clone(),
        );
        r.register(
            "grpc_seconds",
            "Latency of lookup API requests",
            m.grpc_seconds.clone(),
        );
        r.register(
            "grpc_forwarded",
            "Lookup API requests forwarded to a partition's owner",
            m.grpc_forwarded.clone(),
        );
        r.register(
            "grpc_row_cache",
            "Lookup API rows answered from the cache of encoded rows (hit) or read from the store (miss)",
            m.grpc_row_cache.clone(),
        );
        r.register(
            "join_row_cache",
            "Jobs' joins: rows answered from the rows kept for joins (hit) or read from the store (miss)",
            m.join_row_cache.clone(),
        );
        m
    }
}
