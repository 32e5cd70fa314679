//! A remote table's metric handles, resolved once per table.

use prometheus_client::metrics::counter::Counter;
use tributary_metrics::{StripedCounter, StripedHistogram};

use crate::metrics::{ResultLabel, TableLabel, TablesMetrics};

/// Metric handles of one remote table.
#[derive(Clone)]
pub struct RemoteStats {
    table: String,
    metrics: TablesMetrics,
    /// Keys per backend call.
    pub batch_keys: StripedHistogram,
    /// Calls that waited for a permit.
    pub limiter_waits: Counter,
    /// Cache hits.
    pub hits: StripedCounter,
    /// Cache misses.
    pub misses: StripedCounter,
    /// Lookup latency.
    pub get_seconds: StripedHistogram,
    /// Invalidated keys.
    pub invalidations: Counter,
}

impl RemoteStats {
    /// The handles of `table`.
    pub fn new(table: &str, metrics: &TablesMetrics) -> Self {
        let label = TableLabel {
            table: table.to_owned(),
        };
        let result = |r: &str| ResultLabel {
            table: table.to_owned(),
            result: r.to_owned(),
        };
        // One statement each: a family's read guard lives to the end of its statement,
        // and a second `get_or_create` on it in the same statement would deadlock.
        let hits = metrics.remote_cache.get_or_create(&result("hit")).clone();
        let misses = metrics.remote_cache.get_or_create(&result("miss")).clone();
        let batch_keys = metrics.remote_batch_keys.get_or_create(&label).clone();
        let limiter_waits = metrics.remote_limiter_waits.get_or_create(&label).clone();
        let get_seconds = metrics.remote_get_seconds.get_or_create(&label).clone();
        let invalidations = metrics.remote_invalidations.get_or_create(&label).clone();
        RemoteStats {
            table: table.to_owned(),
            batch_keys,
            limiter_waits,
            hits,
            misses,
            get_seconds,
            invalidations,
            metrics: metrics.clone(),
        }
    }

    /// Counts a backend call with `result`.
    pub fn call(&self, result: &str) {
        self.metrics
            .remote_calls
            .get_or_create(&ResultLabel {
                table: self.table.clone(),
                result: result.to_owned(),
            })
            .inc();
    }

    /// Records whether the breaker is open.
    pub fn breaker_open(&self, open: bool) {
        self.metrics
            .remote_breaker_open
            .get_or_create(&TableLabel {
                table: self.table.clone(),
            })
            .set(i64::from(open));
    }

    /// Handles registered nowhere (unit tests).
    #[cfg(test)]
    pub fn for_tests() -> Self {
        Self::new("test", &TablesMetrics::default())
    }
}
