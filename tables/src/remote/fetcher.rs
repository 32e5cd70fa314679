//! The path from a cache miss to the backend: concurrent gets are coalesced into
//! one batched call (within `window` or up to `max_keys`); each call passes the
//! circuit breaker and the rate limit's [`Budget`] (cache hits never get here,
//! so they are free; a call takes as many permits as requests the backend
//! serves for it), runs under a timeout, and is retried with jittered
//! exponential backoff on retryable errors only. Overload (a timeout, or what
//! the backend says) makes the budget back off.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::remote::backend::{Backend, BackendError, Overload};
use crate::remote::breaker::Breaker;
use crate::remote::budget::Budget;
use crate::remote::stats::RemoteStats;

/// How backend calls are made.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Most keys in one call.
    pub max_keys: usize,
    /// How long the first key of a batch waits for others.
    pub window: Duration,
    /// Time limit of one call.
    pub timeout: Duration,
    /// Further attempts after a retryable failure.
    pub retries: u32,
    /// Backoff before the first retry (doubled each time, jittered ±50%).
    pub backoff: Duration,
    /// Longest wait for a rate-limiter permit before the lookup fails.
    pub max_wait: Duration,
}

/// Why a lookup could not reach the backend or the backend failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The breaker is open: the backend failed repeatedly.
    #[error("circuit open after repeated backend failures; next attempt in {0:?}")]
    Open(Duration),
    /// No rate-limiter permit within the wait budget.
    #[error("rate limit: no permit within {0:?}")]
    RateLimited(Duration),
    /// The backend failed (after retries, where retryable).
    #[error("backend: {0}")]
    Backend(BackendError),
}

type Reply = oneshot::Sender<Result<Option<Value>, RemoteError>>;

/// Batches lookups into backend calls.
pub struct Fetcher {
    requests: mpsc::Sender<(Vec<Value>, Reply)>,
    /// Stops the batching task, which answers what it has taken first.
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
}

struct Caller {
    backend: Arc<dyn Backend>,
    policy: Policy,
    budget: Option<Arc<Budget>>,
    breaker: Arc<Breaker>,
    stats: RemoteStats,
}

impl Fetcher {
    /// Starts the batching task (it stops when the fetcher is closed or dropped).
    pub fn start(
        backend: Arc<dyn Backend>,
        policy: Policy,
        budget: Option<Arc<Budget>>,
        breaker: Arc<Breaker>,
        stats: RemoteStats,
    ) -> Self {
        let (requests, incoming) = mpsc::channel(4096);
        let caller = Arc::new(Caller {
            backend,
            policy,
            budget,
            breaker,
            stats,
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(batch(incoming, caller, stop.clone()));
        Fetcher {
            requests,
            stop,
            task: Mutex::new(Some(task)),
        }
    }

    /// Stops taking lookups and waits until every one taken has its answer.
    pub async fn close(&self) {
        self.stop.cancel();
        let task = self.task.lock().expect("fetcher task lock").take();
        if let Some(task) = task {
            task.await.expect("the batching task does not panic");
        }
    }

    /// The row of `key` (its values in key-column order).
    pub async fn get(&self, key: Vec<Value>) -> Result<Option<Value>, RemoteError> {
        let (reply, answer) = oneshot::channel();
        let gone = || RemoteError::Backend(BackendError::permanent("the table is shutting down"));
        self.requests.send((key, reply)).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// Collects requests into batches and calls the backend once per batch, until
/// `stop` (or every sender is gone); then answers the requests already sent and
/// waits for every call in flight.
async fn batch(
    mut incoming: mpsc::Receiver<(Vec<Value>, Reply)>,
    caller: Arc<Caller>,
    stop: CancellationToken,
) {
    let mut calls = JoinSet::new();
    loop {
        let first = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            Some(_) = calls.join_next(), if !calls.is_empty() => continue,
            first = incoming.recv() => match first {
                Some(request) => request,
                None => break,
            },
        };
        let mut requests = vec![first];
        let deadline = Instant::now() + caller.policy.window;
        while requests.len() < caller.policy.max_keys {
            tokio::select! {
                biased;
                next = incoming.recv() => match next {
                    Some(request) => requests.push(request),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        calls.spawn(caller.clone().answer(requests));
    }
    // Lookups sent before the stop still get answers; later ones are refused.
    incoming.close();
    let mut rest = Vec::new();
    while let Some(request) = incoming.recv().await {
        rest.push(request);
        if rest.len() == caller.policy.max_keys {
            calls.spawn(caller.clone().answer(std::mem::take(&mut rest)));
        }
    }
    if !rest.is_empty() {
        calls.spawn(caller.clone().answer(rest));
    }
    while calls.join_next().await.is_some() {}
}

impl Caller {
    /// One backend call for the distinct keys of `requests`; every request gets its row.
    async fn answer(self: Arc<Self>, requests: Vec<(Vec<Value>, Reply)>) {
        let mut keys: Vec<Vec<Value>> = Vec::new();
        let mut index = HashMap::new();
        let slots: Vec<usize> = requests
            .iter()
            .map(|(key, _)| {
                let text = serde_json::to_string(key).expect("JSON serializes");
                *index.entry(text).or_insert_with(|| {
                    keys.push(key.clone());
                    keys.len() - 1
                })
            })
            .collect();
        let result = self.fetch(&keys).await;
        for ((_, reply), slot) in requests.into_iter().zip(slots) {
            let row = result.as_ref().map(|rows| rows[slot].clone());
            reply.send(row.map_err(Clone::clone)).ok();
        }
    }

    async fn fetch(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, RemoteError> {
        self.breaker.admit().map_err(RemoteError::Open)?;
        let mut attempt = 0;
        loop {
            if let Some(budget) = &self.budget {
                let permits = self.backend.requests(keys.len());
                match budget.acquire(permits, self.policy.max_wait).await {
                    Err(_) => {
                        self.breaker.abandon_probe();
                        return Err(RemoteError::RateLimited(self.policy.max_wait));
                    }
                    Ok(waited) if waited > Duration::from_micros(100) => {
                        self.stats.limiter_waits.inc();
                    }
                    Ok(_) => {}
                }
            }
            self.stats.batch_keys.observe(keys.len() as f64);
            let result =
                match tokio::time::timeout(self.policy.timeout, self.backend.fetch(keys)).await {
                    Ok(result) => result,
                    Err(_) => Err(BackendError::overloaded(
                        format!("no answer within {:?}", self.policy.timeout),
                        Overload {
                            reason: "timeout",
                            retry_after: None,
                        },
                    )),
                };
            if let (
                Err(BackendError {
                    overload: Some(overload),
                    ..
                }),
                Some(budget),
            ) = (&result, &self.budget)
            {
                budget.overloaded(overload);
            }
            match result {
                Ok(rows) => {
                    self.stats.call("ok");
                    self.breaker.success();
                    self.stats.breaker_open(false);
                    return Ok(rows);
                }
                Err(e) if e.retryable && attempt < self.policy.retries => {
                    self.stats.call("retried");
                    attempt += 1;
                    tokio::time::sleep(jittered(self.policy.backoff * 2u32.pow(attempt - 1))).await;
                }
                Err(e) => {
                    self.stats.call("failed");
                    if e.retryable {
                        self.breaker.failure(); // the backend is unwell, not the request
                    } else {
                        self.breaker.abandon_probe();
                    }
                    self.stats.breaker_open(self.breaker.is_open());
                    return Err(RemoteError::Backend(e));
                }
            }
        }
    }
}

/// `base` × a factor in [0.5, 1.5), from the clock's low bits.
fn jittered(base: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    base.mul_f64(0.5 + f64::from(nanos % 1000) / 1000.0)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use serde_json::json;

    use super::*;

    /// Answers `[id]` with `{"id": id}` for even ids; fails the first `failures` calls.
    struct Fake {
        calls: Mutex<Vec<usize>>,
        failures: Mutex<u32>,
        retryable: bool,
        delay: Duration,
    }

    #[async_trait]
    impl Backend for Fake {
        async fn fetch(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, BackendError> {
            self.calls.lock().unwrap().push(keys.len());
            tokio::time::sleep(self.delay).await;
            let mut failures = self.failures.lock().unwrap();
            if *failures > 0 {
                *failures -= 1;
                return Err(if self.retryable {
                    BackendError::transient("down")
                } else {
                    BackendError::permanent("down")
                });
            }
            Ok(keys
                .iter()
                .map(|k| {
                    k[0].as_u64()
                        .unwrap()
                        .is_multiple_of(2)
                        .then(|| json!({ "id": k[0] }))
                })
                .collect())
        }
    }

    fn fake(failures: u32, retryable: bool, delay: Duration) -> Arc<Fake> {
        Arc::new(Fake {
            calls: Mutex::new(Vec::new()),
            failures: Mutex::new(failures),
            retryable,
            delay,
        })
    }

    fn policy() -> Policy {
        Policy {
            max_keys: 10,
            window: Duration::from_millis(5),
            timeout: Duration::from_millis(100),
            retries: 2,
            backoff: Duration::from_millis(10),
            max_wait: Duration::from_secs(1),
        }
    }

    fn fetcher(backend: Arc<Fake>, policy: Policy, breaker: Arc<Breaker>) -> Arc<Fetcher> {
        Arc::new(Fetcher::start(
            backend,
            policy,
            None,
            breaker,
            RemoteStats::for_tests(),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_gets_share_batched_calls() {
        let backend = fake(0, true, Duration::ZERO);
        let f = fetcher(
            backend.clone(),
            policy(),
            Arc::new(Breaker::new(5, Duration::from_secs(1))),
        );
        // 20 concurrent gets of 5 keys: two batches of 10 (max_keys), 5 distinct keys each.
        let gets: Vec<_> = (0..20u64)
            .map(|i| {
                let f = f.clone();
                tokio::spawn(async move { f.get(vec![json!(i % 5)]).await })
            })
            .collect();
        for (i, get) in gets.into_iter().enumerate() {
            let row = get.await.unwrap().unwrap();
            let id = i as u64 % 5;
            assert_eq!(row, id.is_multiple_of(2).then(|| json!({ "id": id })));
        }
        assert_eq!(*backend.calls.lock().unwrap(), [5, 5]);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_retryable_errors_only_and_times_out() {
        let backend = fake(2, true, Duration::ZERO);
        let f = fetcher(
            backend.clone(),
            policy(),
            Arc::new(Breaker::new(5, Duration::from_secs(1))),
        );
        assert_eq!(f.get(vec![json!(2)]).await, Ok(Some(json!({ "id": 2 }))));
        assert_eq!(
            backend.calls.lock().unwrap().len(),
            3,
            "two retries, then success"
        );

        let backend = fake(1, false, Duration::ZERO);
        let f = fetcher(
            backend.clone(),
            policy(),
            Arc::new(Breaker::new(5, Duration::from_secs(1))),
        );
        assert!(
            matches!(f.get(vec![json!(2)]).await, Err(RemoteError::Backend(e)) if !e.retryable)
        );
        assert_eq!(
            backend.calls.lock().unwrap().len(),
            1,
            "a permanent error is not retried"
        );

        let slow = fake(0, true, Duration::from_secs(5));
        let f = fetcher(
            slow.clone(),
            policy(),
            Arc::new(Breaker::new(5, Duration::from_secs(1))),
        );
        let started = Instant::now();
        let err = f.get(vec![json!(2)]).await.unwrap_err();
        assert!(err.to_string().contains("no answer within 100ms"), "{err}");
        assert_eq!(slow.calls.lock().unwrap().len(), 3);
        // 3 × 100 ms timeouts + 10 ms and 20 ms backoff (±50%) + the batch window.
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(320) && took < Duration::from_millis(400),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_breaker_fails_fast_while_the_backend_is_down() {
        let backend = fake(u32::MAX, true, Duration::ZERO);
        let breaker = Arc::new(Breaker::new(2, Duration::from_secs(10)));
        let no_retries = Policy {
            retries: 0,
            ..policy()
        };
        let f = fetcher(backend.clone(), no_retries, breaker.clone());
        for _ in 0..2 {
            assert!(matches!(
                f.get(vec![json!(2)]).await,
                Err(RemoteError::Backend(_))
            ));
        }
        assert!(matches!(
            f.get(vec![json!(2)]).await,
            Err(RemoteError::Open(_))
        ));
        assert_eq!(
            backend.calls.lock().unwrap().len(),
            2,
            "an open breaker calls nothing"
        );
        *backend.failures.lock().unwrap() = 0; // the backend returns
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(f.get(vec![json!(2)]).await, Ok(Some(json!({ "id": 2 }))));
        assert!(!breaker.is_open());
    }

    #[tokio::test(start_paused = true)]
    async fn close_answers_every_lookup_taken_and_refuses_later_ones() {
        let slow = fake(0, true, Duration::from_millis(50));
        let f = fetcher(
            slow.clone(),
            policy(),
            Arc::new(Breaker::new(5, Duration::from_secs(1))),
        );
        let in_flight: Vec<_> = (0..25u64)
            .map(|i| {
                let f = f.clone();
                tokio::spawn(async move { f.get(vec![json!(i)]).await })
            })
            .collect();
        tokio::task::yield_now().await; // the lookups are sent
        f.close().await;
        assert_eq!(
            slow.calls.lock().unwrap().iter().sum::<usize>(),
            25,
            "every lookup sent before the close reached the backend"
        );
        for (i, get) in in_flight.into_iter().enumerate() {
            let id = i as u64;
            let want = id.is_multiple_of(2).then(|| json!({ "id": id }));
            assert_eq!(get.await.unwrap(), Ok(want));
        }
        let late = f.get(vec![json!(2)]).await.unwrap_err();
        assert!(late.to_string().contains("shutting down"), "{late}");
    }
}
