//! Adaptive back-off (AIMD): the fraction of its share an instance uses.
//!
//! An overload signal from the backend (MySQL "too many connections" or a lock
//! wait timeout, HTTP 429 or 503, a call that timed out) halves the fraction,
//! at most once per [`COOLDOWN`] (one overload is seen by many calls at once),
//! down to the floor. Without signals for a cooldown, it recovers additively,
//! [`RECOVERY_PER_SECOND`] of the share each second, up to the whole share.

use std::time::Duration;

use tokio::time::Instant;

/// Signals within this time of a decrease do not decrease again.
pub const COOLDOWN: Duration = Duration::from_millis(500);

/// The fraction of the share regained each second without overload.
pub const RECOVERY_PER_SECOND: f64 = 0.2;

/// The decrease factor of one overload signal.
const DECREASE: f64 = 0.5;

/// The fraction of its share an instance uses now.
#[derive(Debug, Clone)]
pub struct Backoff {
    fraction: f64,
    floor: f64,
    last_decrease: Option<(Instant, &'static str)>,
    last_recovery: Instant,
}

impl Backoff {
    /// The whole share, never less than `floor` of it.
    pub fn new(floor: f64) -> Self {
        Backoff {
            fraction: 1.0,
            floor: floor.clamp(0.0, 1.0),
            last_decrease: None,
            last_recovery: Instant::now(),
        }
    }

    /// The fraction of the share in use.
    pub fn fraction(&self) -> f64 {
        self.fraction
    }

    /// The reason of the last decrease, if any.
    pub fn last_reason(&self) -> Option<&'static str> {
        self.last_decrease.map(|(_, reason)| reason)
    }

    /// The backend signalled overload (`reason`): true when this decreased the
    /// fraction (not within the cooldown of the last decrease).
    pub fn overloaded(&mut self, reason: &'static str, now: Instant) -> bool {
        if self
            .last_decrease
            .is_some_and(|(at, _)| now.saturating_duration_since(at) < COOLDOWN)
        {
            return false;
        }
        self.fraction = (self.fraction * DECREASE).max(self.floor);
        self.last_decrease = Some((now, reason));
        true
    }

    /// Regains what `now` allows since the last recovery (nothing within the
    /// cooldown of a decrease).
    pub fn recover(&mut self, now: Instant) {
        let quiet_since = match self.last_decrease {
            Some((at, _)) => (at + COOLDOWN).max(self.last_recovery),
            None => self.last_recovery,
        };
        let seconds = now.saturating_duration_since(quiet_since).as_secs_f64();
        self.fraction = (self.fraction + seconds * RECOVERY_PER_SECOND).min(1.0);
        self.last_recovery = now.max(self.last_recovery);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overload_halves_once_per_cooldown_down_to_the_floor_then_recovers_additively() {
        let start = Instant::now();
        let mut b = Backoff::new(0.1);
        assert!(b.overloaded("http_503", start));
        assert!(
            !b.overloaded("http_503", start + Duration::from_millis(100)),
            "within the cooldown"
        );
        assert_eq!(b.fraction(), 0.5);
        for i in 1..10 {
            b.overloaded("http_429", start + COOLDOWN * i);
        }
        assert_eq!(b.fraction(), 0.1, "never below the floor");
        assert_eq!(b.last_reason(), Some("http_429"));
        let last = start + COOLDOWN * 9;
        b.recover(last + Duration::from_millis(400));
        assert_eq!(b.fraction(), 0.1, "nothing within the cooldown");
        b.recover(last + COOLDOWN + Duration::from_secs(2));
        assert!((b.fraction() - 0.5).abs() < 1e-9, "{}", b.fraction());
        b.recover(last + COOLDOWN + Duration::from_secs(10));
        assert_eq!(b.fraction(), 1.0, "up to the whole share");
    }
}
