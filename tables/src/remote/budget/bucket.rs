//! A token bucket whose rate and size change while it runs, and that says how
//! it is used.
//!
//! Permits are taken in turn (a fair queue): each caller waits until the
//! bucket holds what it asks for (a call larger than the bucket waits for a
//! full bucket and leaves it in debt, so the average rate holds), re-reading
//! the rate while it waits, so a lower rate or a pause applies at once to
//! callers already waiting. The bucket starts empty: a restarted process does
//! not begin with a burst. It counts the permits granted and whether callers
//! had to wait, which is the demand its share of a shared budget is sized by.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The longest a waiting caller sleeps before reading the rate again.
const RECHECK: Duration = Duration::from_millis(20);

/// The shortest sleep of a waiting caller (the timer's resolution).
const MIN_SLEEP: Duration = Duration::from_millis(1);

/// An adjustable token bucket.
pub struct Bucket {
    state: Mutex<State>,
    /// Callers take permits one after another, in arrival order.
    turn: tokio::sync::Mutex<()>,
    /// Callers waiting now.
    waiting: AtomicUsize,
}

struct State {
    /// Permits per second.
    rate: f64,
    /// Most permits held.
    capacity: f64,
    /// Permits held (negative: debt of a call larger than the bucket).
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
    /// No permits (nor refill) before this time (a backend's `Retry-After`).
    paused_until: Option<Instant>,
    /// Since the last [`Bucket::usage`].
    usage: Counts,
}

#[derive(Default)]
struct Counts {
    granted: f64,
    calls: u64,
    waited: u64,
    since: Option<Instant>,
}

/// How a bucket was used since the last look.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Permits granted per second.
    pub per_second: f64,
    /// Whether callers wanted more than they got: most calls waited, or some
    /// are waiting now.
    pub hungry: bool,
}

/// Why no permit was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoPermit;

impl Bucket {
    /// An empty bucket granting nothing until [`Bucket::set`] gives it a rate.
    pub fn new() -> Self {
        Bucket {
            state: Mutex::new(State {
                rate: 0.0,
                capacity: 1.0,
                tokens: 0.0,
                at: Instant::now(),
                paused_until: None,
                usage: Counts::default(),
            }),
            turn: tokio::sync::Mutex::new(()),
            waiting: AtomicUsize::new(0),
        }
    }

    /// From now on `rate` permits a second, holding at most `capacity`.
    pub fn set(&self, rate: f64, capacity: f64) {
        let mut state = self.state.lock().expect("bucket lock");
        state.refill(Instant::now());
        state.rate = rate.max(0.0);
        state.capacity = capacity.max(1.0);
        state.tokens = state.tokens.min(state.capacity);
    }

    /// No permits before `until`, and nothing saved up meanwhile.
    pub fn pause_until(&self, until: Instant) {
        let mut state = self.state.lock().expect("bucket lock");
        state.refill(Instant::now());
        state.tokens = state.tokens.min(0.0);
        state.paused_until = Some(state.paused_until.map_or(until, |p| p.max(until)));
    }

    /// Takes `permits`, waiting in turn up to `max_wait`; returns how long it
    /// waited.
    pub async fn acquire(&self, permits: f64, max_wait: Duration) -> Result<Duration, NoPermit> {
        let started = Instant::now();
        let deadline = started + max_wait;
        let _turn = tokio::time::timeout_at(deadline, self.turn.lock())
            .await
            .map_err(|_| self.refused())?;
        let mut waiting: Option<Waiting<'_>> = None;
        loop {
            let now = Instant::now();
            let wait = {
                let mut state = self.state.lock().expect("bucket lock");
                match state.take(permits, now) {
                    None => {
                        let queued = now - started > Duration::from_millis(1);
                        state.usage.granted += permits;
                        state.usage.calls += 1;
                        state.usage.waited += u64::from(waiting.is_some() || queued);
                        return Ok(now - started);
                    }
                    Some(wait) => wait,
                }
            };
            if now >= deadline {
                return Err(self.refused());
            }
            waiting.get_or_insert_with(|| Waiting::new(&self.waiting));
            tokio::time::sleep_until((now + wait.clamp(MIN_SLEEP, RECHECK)).min(deadline)).await;
        }
    }

    /// A refused call counts as a call that waited.
    fn refused(&self) -> NoPermit {
        let mut state = self.state.lock().expect("bucket lock");
        state.usage.calls += 1;
        state.usage.waited += 1;
        NoPermit
    }

    /// How the bucket was used since the last call (the first: since it was made).
    pub fn usage(&self) -> Usage {
        let now = Instant::now();
        let mut state = self.state.lock().expect("bucket lock");
        let counts = std::mem::take(&mut state.usage);
        state.usage.since = Some(now);
        let seconds = counts
            .since
            .map_or(0.0, |since| (now - since).as_secs_f64());
        Usage {
            per_second: if seconds > 0.0 {
                counts.granted / seconds
            } else {
                0.0
            },
            hungry: self.waiting.load(Ordering::SeqCst) > 0 || counts.waited * 2 > counts.calls,
        }
    }
}

/// Counts a caller as waiting while it lives (also when its call is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Default for Bucket {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    /// Brings `tokens` up to `now`.
    fn refill(&mut self, now: Instant) {
        let from = match self.paused_until {
            Some(until) if until > now => {
                self.at = now;
                return;
            }
            Some(until) => {
                self.paused_until = None;
                until.max(self.at)
            }
            None => self.at,
        };
        let earned = (now - from).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(self.capacity);
        self.at = now;
    }

    /// Takes `permits` now (`None`), or says how long until they may be there.
    fn take(&mut self, permits: f64, now: Instant) -> Option<Duration> {
        self.refill(now);
        if let Some(until) = self.paused_until {
            return Some(until - now);
        }
        let needed = permits.min(self.capacity);
        // Within rounding of the refill arithmetic.
        if self.tokens >= needed - 1e-9 {
            self.tokens -= permits;
            return None;
        }
        Some(if self.rate > 0.0 {
            Duration::from_secs_f64((needed - self.tokens) / self.rate)
        } else {
            RECHECK
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn permits_come_at_the_rate_and_a_new_rate_applies_to_waiting_callers() {
        let bucket = Arc::new(Bucket::new());
        bucket.set(10.0, 1.0);
        let started = Instant::now();
        for _ in 0..10 {
            bucket.acquire(1.0, Duration::from_secs(5)).await.unwrap();
        }
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(990) && took <= Duration::from_millis(1100),
            "an empty bucket at 10/s grants 10 permits in 1 s: {took:?}"
        );
        // A caller waiting at 1/s is served at once when the rate rises to 1000/s.
        bucket.set(1.0, 1.0);
        let waiting = tokio::spawn({
            let bucket = bucket.clone();
            async move { bucket.acquire(1.0, Duration::from_secs(5)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        bucket.set(1000.0, 1.0);
        let waited = waiting.await.unwrap().unwrap();
        assert!(waited < Duration::from_millis(150), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_gives_up_after_its_wait_budget_and_a_pause_grants_nothing() {
        let bucket = Bucket::new();
        assert_eq!(
            bucket.acquire(1.0, Duration::from_millis(100)).await,
            Err(NoPermit),
            "an empty bucket without a rate grants nothing"
        );
        bucket.set(100.0, 100.0);
        tokio::time::sleep(Duration::from_secs(1)).await;
        bucket.pause_until(Instant::now() + Duration::from_secs(2));
        let started = Instant::now();
        bucket.acquire(1.0, Duration::from_secs(5)).await.unwrap();
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_millis(2100),
            "nothing before the pause ends, and no burst saved up: {waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_larger_than_the_bucket_leaves_debt_and_the_average_holds() {
        let bucket = Bucket::new();
        bucket.set(10.0, 2.0);
        let started = Instant::now();
        for _ in 0..5 {
            bucket.acquire(10.0, Duration::from_secs(10)).await.unwrap();
        }
        let took = started.elapsed().as_secs_f64();
        // 50 permits at 10/s: the first waits for a full bucket (0.2 s), then
        // each pays its debt of 8 and waits for 2 more: 0.2 + 4 × 1 s.
        assert!((4.1..4.4).contains(&took), "{took}");
    }

    #[tokio::test(start_paused = true)]
    async fn usage_counts_grants_and_hunger() {
        let bucket = Arc::new(Bucket::new());
        bucket.set(100.0, 100.0);
        bucket.usage();
        tokio::time::sleep(Duration::from_secs(1)).await;
        for _ in 0..50 {
            bucket.acquire(1.0, Duration::ZERO).await.unwrap();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle = bucket.usage();
        assert!((idle.per_second - 25.0).abs() < 0.1, "{idle:?}");
        assert!(!idle.hungry, "nothing waited");
        for _ in 0..300 {
            bucket.acquire(1.0, Duration::from_secs(10)).await.unwrap();
        }
        let busy = bucket.usage();
        assert!(busy.hungry, "most calls waited: {busy:?}");
        // A full bucket (100), then 200 more at 100/s: 300 in 2 s.
        assert!((busy.per_second - 150.0).abs() < 5.0, "{busy:?}");
    }
}
