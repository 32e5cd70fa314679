//! Prometheus counters and histograms for the paths that several threads
//! update at once, such as a lookup's latency or a cache's hits: each thread
//! adds to its own stripe, on a cache line of its own, and a scrape sums the
//! stripes.
//!
//! prometheus-client's `Histogram` takes a write lock for every observation
//! and its `Counter` is one atomic: when two cores enrich events in turn, the
//! line holding the lock or the count moves from core to core on every
//! lookup (session 40's profile of `bench enrich` had `Histogram::observe`
//! alone at 2.8% of the process's samples). These types encode exactly as
//! theirs do, so a scrape cannot tell them apart.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Stripes per metric: a thread adds to stripe `its number % STRIPES`
/// (threads are numbered as they first update any striped metric).
const STRIPES: usize = 8;

/// The calling thread's stripe.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

/// A monotonic count, as prometheus-client's `Counter<u64>`.
#[derive(Clone, Default)]
pub struct StripedCounter {
    stripes: Arc<[CachePadded<AtomicU64>; STRIPES]>,
}

impl StripedCounter {
    /// Adds one.
    pub fn inc(&self) {
        self.inc_by(1);
    }

    /// Adds `v`.
    pub fn inc_by(&self, v: u64) {
        self.stripes[stripe()].fetch_add(v, Ordering::Relaxed);
    }

    /// The count: the sum of every stripe's.
    pub fn get(&self) -> u64 {
        self.stripes.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

impl fmt::Debug for StripedCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StripedCounter").field(&self.get()).finish()
    }
}

impl TypedMetric for StripedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for StripedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Most finite bucket bounds a [`StripedHistogram`] takes.
pub const MAX_BUCKETS: usize = 31;

/// One thread's share of a histogram: the sum of what it observed (an
/// `f64`'s bits) and a count per bucket, the last for values above every bound.
#[derive(Default)]
struct Stripe {
    sum: AtomicU64,
    buckets: [AtomicU64; MAX_BUCKETS + 1],
}

/// A distribution of observed values, as prometheus-client's `Histogram`.
#[derive(Clone)]
pub struct StripedHistogram {
    /// The finite upper bounds, ascending.
    bounds: Arc<[f64]>,
    stripes: Arc<[CachePadded<Stripe>; STRIPES]>,
}

impl StripedHistogram {
    /// A histogram with these finite upper bounds (ascending, at most
    /// [`MAX_BUCKETS`]), and the `+Inf` bucket.
    ///
    /// # Panics
    /// With more bounds than [`MAX_BUCKETS`] (a fixed, programmed choice).
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let bounds: Arc<[f64]> = bounds.into_iter().collect();
        assert!(
            bounds.len() <= MAX_BUCKETS,
            "a striped histogram has at most {MAX_BUCKETS} bounds"
        );
        StripedHistogram {
            bounds,
            stripes: Arc::default(),
        }
    }

    /// Counts `v` in the first bucket whose bound is at least `v`.
    pub fn observe(&self, v: f64) {
        let bucket = self
            .bounds
            .iter()
            .position(|bound| v <= *bound)
            .unwrap_or(self.bounds.len());
        let stripe = &self.stripes[stripe()];
        stripe.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        // Only threads sharing this stripe race on its sum: rarely, and briefly.
        let mut sum = stripe.sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(sum) + v).to_bits();
            match stripe
                .sum
                .compare_exchange_weak(sum, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => sum = now,
            }
        }
    }

    /// The sum of the values observed, how many there were, and the count
    /// of each bucket (not cumulative), by upper bound (`f64::MAX` for `+Inf`).
    pub fn get(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let bounds = self.bounds.iter().copied().chain([f64::MAX]);
        let buckets: Vec<(f64, u64)> = bounds
            .enumerate()
            .map(|(i, bound)| {
                let stripes = self.stripes.iter();
                (
                    bound,
                    stripes.map(|s| s.buckets[i].load(Ordering::Relaxed)).sum(),
                )
            })
            .collect();
        let sum = self.stripes.iter();
        let sum = sum
            .map(|s| f64::from_bits(s.sum.load(Ordering::Relaxed)))
            .sum();
        (sum, buckets.iter().map(|(_, n)| n).sum(), buckets)
    }
}

impl fmt::Debug for StripedHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (sum, count, _) = self.get();
        f.debug_struct("StripedHistogram")
            .field("sum", &sum)
            .field("count", &count)
            .finish()
    }
}

impl TypedMetric for StripedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for StripedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let (sum, count, buckets) = self.get();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::{Metric, Registry};

    use super::*;

    /// `metric` registered alone, as a scrape reads it.
    fn scraped(metric: impl Metric) -> String {
        let mut registry = Registry::default();
        registry.register("m", "What is measured", metric);
        let mut out = String::new();
        encode(&mut out, &registry).expect("encodes");
        out
    }

    #[test]
    fn counts_from_many_threads_add_up_and_scrape_as_a_counter_does() {
        let (ours, theirs) = (StripedCounter::default(), Counter::<u64>::default());
        std::thread::scope(|s| {
            for t in 0..(2 * STRIPES as u64 + 3) {
                let (ours, theirs) = (ours.clone(), theirs.clone());
                s.spawn(move || {
                    for _ in 0..1000 {
                        ours.inc();
                        theirs.inc();
                    }
                    ours.inc_by(t);
                    theirs.inc_by(t);
                });
            }
        });
        assert_eq!(ours.get(), theirs.get());
        assert_eq!(scraped(ours), scraped(theirs));
    }

    #[test]
    fn observations_from_many_threads_scrape_as_a_histogram_does() {
        let bounds = || [0.5, 1.0, 2.0, 4.0];
        let (ours, theirs) = (StripedHistogram::new(bounds()), Histogram::new(bounds()));
        std::thread::scope(|s| {
            for t in 0..(2 * STRIPES) {
                let (ours, theirs) = (ours.clone(), theirs.clone());
                s.spawn(move || {
                    // Values on, between, below and above the bounds (sums exact in binary).
                    for v in [0.25, 0.5, 0.75, 1.0, 3.0, 4.0, 16.0] {
                        for _ in 0..=t {
                            ours.observe(v);
                            theirs.observe(v);
                        }
                    }
                });
            }
        });
        let (sum, count, buckets) = ours.get();
        let n = (1..=2 * STRIPES as u64).sum::<u64>();
        assert_eq!(count, 7 * n);
        assert_eq!(sum, 25.5 * n as f64);
        assert_eq!(
            buckets,
            [
                (0.5, 2 * n),
                (1.0, 2 * n),
                (2.0, 0),
                (4.0, 2 * n),
                (f64::MAX, n)
            ]
        );
        assert_eq!(scraped(ours), scraped(theirs));
    }

    #[test]
    #[should_panic(expected = "at most")]
    fn too_many_bounds_are_refused() {
        StripedHistogram::new((0..=MAX_BUCKETS).map(|i| i as f64));
    }
}
