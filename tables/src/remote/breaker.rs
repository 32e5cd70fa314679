//! A circuit breaker: after `failures` failed backend calls in a row it opens
//! and lookups fail fast for `open_for`; then one call is let through (half
//! open), and its success closes the breaker again.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
struct State {
    failures: u32,
    open_until: Option<Instant>,
    probing: bool,
}

/// The breaker of one remote table.
#[derive(Debug)]
pub struct Breaker {
    state: Mutex<State>,
    threshold: u32,
    open_for: Duration,
}

impl Breaker {
    /// Opens after `threshold` consecutive failures, for `open_for`.
    pub fn new(threshold: u32, open_for: Duration) -> Self {
        Breaker {
            state: Mutex::new(State {
                failures: 0,
                open_until: None,
                probing: false,
            }),
            threshold,
            open_for,
        }
    }

    /// `Err(remaining)` while open; `Ok` lets a call through (the only one,
    /// while half open).
    pub fn admit(&self) -> Result<(), Duration> {
        let mut s = self.state.lock().expect("breaker lock");
        match s.open_until {
            None => Ok(()),
            Some(until) if Instant::now() < until => Err(until - Instant::now()),
            Some(_) if s.probing => Err(Duration::ZERO),
            Some(_) => {
                s.probing = true;
                Ok(())
            }
        }
    }

    /// A call succeeded: close.
    pub fn success(&self) {
        let mut s = self.state.lock().expect("breaker lock");
        *s = State {
            failures: 0,
            open_until: None,
            probing: false,
        };
    }

    /// A call failed: count it, open at the threshold (again, after a failed probe).
    pub fn failure(&self) {
        let mut s = self.state.lock().expect("breaker lock");
        s.failures += 1;
        if s.failures >= self.threshold || s.probing {
            s.open_until = Some(Instant::now() + self.open_for);
            s.probing = false;
        }
    }

    /// A call admitted as the probe was not made (no rate-limiter permit, or a
    /// request that could never succeed): let the next one probe.
    pub fn abandon_probe(&self) {
        self.state.lock().expect("breaker lock").probing = false;
    }

    /// Whether lookups currently fail fast.
    pub fn is_open(&self) -> bool {
        self.state
            .lock()
            .expect("breaker lock")
            .open_until
            .is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_after_failures_probes_then_closes() {
        let b = Breaker::new(3, Duration::from_secs(10));
        b.failure();
        b.failure();
        assert!(b.admit().is_ok(), "two failures: still closed");
        b.failure();
        assert_eq!(b.admit(), Err(Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(b.admit().is_ok(), "half open: one probe");
        assert!(b.admit().is_err(), "only one probe at a time");
        b.failure();
        assert!(b.admit().is_err(), "a failed probe opens it again");
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(b.admit().is_ok());
        b.success();
        assert!(!b.is_open());
        assert!(b.admit().is_ok() && b.admit().is_ok(), "closed again");
    }
}
