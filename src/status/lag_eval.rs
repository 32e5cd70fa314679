//! Burrow-style health of a consumer of a log: judged from a window of
//! observations (position, log end), not from a single sample.
//!
//! - `OK`: no lag at the last observation, or the position moves and the lag
//!   does not grow over the window.
//! - `WARN`: the position moves but the lag grew over the window (falling
//!   behind), or too few observations to judge a lag.
//! - `STALLED`: there is lag and the position did not move over the window, or
//!   over its last half (a pipeline that stopped is called so within half a window).
//! - `STOPPED`: no observation for longer than the window (nothing reports).

use std::collections::VecDeque;
use std::fmt;

/// One observation of a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Observation {
    /// When, in milliseconds since the epoch.
    pub(crate) at_ms: i64,
    /// How far the consumer has got (next offset, or a time for time-based positions).
    pub(crate) position: i64,
    /// The end of what there is to consume.
    pub(crate) end: i64,
}

impl Observation {
    /// What is left to consume.
    pub(crate) fn lag(&self) -> i64 {
        (self.end - self.position).max(0)
    }
}

/// The evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Health {
    /// Keeping up.
    Ok,
    /// Falling behind, or not enough observations yet.
    Warn,
    /// Lag and no progress.
    Stalled,
    /// Nothing reported for longer than the window.
    Stopped,
}

impl Health {
    /// The metric value: 0 OK, 1 WARN, 2 STALLED, 3 STOPPED.
    pub(crate) fn code(self) -> i64 {
        self as i64
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Health::Ok => "OK",
            Health::Warn => "WARN",
            Health::Stalled => "STALLED",
            Health::Stopped => "STOPPED",
        })
    }
}

/// What a window says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Evaluation {
    /// The verdict.
    pub(crate) health: Health,
    /// Why, in a few words.
    pub(crate) reason: &'static str,
    /// Lag at the last observation.
    pub(crate) lag: i64,
    /// How long ago the log ended where the consumer is now (the time it is
    /// behind); at least the window when that was before the window.
    pub(crate) lag_seconds: f64,
    /// Positions consumed per second over the window.
    pub(crate) rate: f64,
}

/// The observations of the last `window_ms`.
#[derive(Debug, Clone)]
pub(crate) struct LagWindow {
    window_ms: i64,
    samples: VecDeque<Observation>,
}

impl LagWindow {
    /// A window of `window_ms` milliseconds.
    pub(crate) fn new(window_ms: i64) -> Self {
        LagWindow {
            window_ms,
            samples: VecDeque::new(),
        }
    }

    /// Adds an observation, forgetting those older than the window.
    pub(crate) fn observe(&mut self, observation: Observation) {
        self.samples.push_back(observation);
        while self
            .samples
            .front()
            .is_some_and(|s| observation.at_ms - s.at_ms > self.window_ms)
        {
            self.samples.pop_front();
        }
    }

    /// The latest observation.
    pub(crate) fn latest(&self) -> Option<&Observation> {
        self.samples.back()
    }

    /// The evaluation at `now_ms`.
    pub(crate) fn evaluate(&self, now_ms: i64) -> Evaluation {
        let (Some(first), Some(last)) = (self.samples.front(), self.samples.back()) else {
            return verdict(Health::Stopped, "no observations", 0, 0.0, 0.0);
        };
        let span_ms = last.at_ms - first.at_ms;
        let rate = if span_ms > 0 {
            (last.position - first.position) as f64 * 1000.0 / span_ms as f64
        } else {
            0.0
        };
        // When did the log end where the consumer is now?
        let caught_up_at = self
            .samples
            .iter()
            .find(|s| s.end >= last.position)
            .map_or(first.at_ms - self.window_ms, |s| s.at_ms);
        let lag_seconds = if last.lag() == 0 {
            0.0
        } else {
            (last.at_ms - caught_up_at).max(0) as f64 / 1000.0
        };
        let (lag, late) = (last.lag(), now_ms - last.at_ms > self.window_ms);
        let (health, reason) = if late {
            (Health::Stopped, "no observation within the window")
        } else if lag == 0 {
            (Health::Ok, "caught up")
        } else if self.samples.len() < 3 || span_ms < self.window_ms / 4 {
            (Health::Warn, "lag, too few observations to judge yet")
        } else if last.position == first.position {
            (Health::Stalled, "lag and no progress over the window")
        } else if unmoved_ms(&self.samples) >= self.window_ms / 2 {
            (
                Health::Stalled,
                "lag and no progress over the last half of the window",
            )
        } else if lag > first.lag() && growing(&self.samples) {
            (Health::Warn, "lag grew over the window")
        } else {
            (Health::Ok, "progressing")
        };
        verdict(health, reason, lag, lag_seconds, rate)
    }
}

/// How long the position has been where it is at the last observation.
fn unmoved_ms(samples: &VecDeque<Observation>) -> i64 {
    let last = samples.back().expect("not empty");
    let since = samples
        .iter()
        .rev()
        .take_while(|s| s.position == last.position)
        .last()
        .map_or(last.at_ms, |s| s.at_ms);
    last.at_ms - since
}

/// Whether the lag grew in most steps of the window (not one burst).
fn growing(samples: &VecDeque<Observation>) -> bool {
    let steps = samples.len() - 1;
    let grew = samples
        .iter()
        .zip(samples.iter().skip(1))
        .filter(|(a, b)| b.lag() > a.lag())
        .count();
    grew * 2 > steps
}

fn verdict(
    health: Health,
    reason: &'static str,
    lag: i64,
    lag_seconds: f64,
    rate: f64,
) -> Evaluation {
    Evaluation {
        health,
        reason,
        lag,
        lag_seconds,
        rate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window of 60 s fed one observation every 5 s from (position, end) pairs.
    fn window(points: &[(i64, i64)]) -> (LagWindow, i64) {
        let mut w = LagWindow::new(60_000);
        let mut at = 0;
        for (i, (position, end)) in points.iter().enumerate() {
            at = i as i64 * 5_000;
            w.observe(Observation {
                at_ms: at,
                position: *position,
                end: *end,
            });
        }
        (w, at)
    }

    #[test]
    fn verdicts() {
        let health = |points: &[(i64, i64)]| {
            let (w, now) = window(points);
            w.evaluate(now).health
        };
        let caught_up: Vec<_> = (0..13).map(|i| (i * 10, i * 10)).collect();
        assert_eq!(health(&caught_up), Health::Ok);
        let keeping_pace: Vec<_> = (0..13).map(|i| (i * 10, i * 10 + 5)).collect();
        assert_eq!(
            health(&keeping_pace),
            Health::Ok,
            "constant lag while moving"
        );
        let catching_up: Vec<_> = (0..13).map(|i| (i * 20, 200 + i * 10)).collect();
        assert_eq!(health(&catching_up), Health::Ok);
        let falling_behind: Vec<_> = (0..13).map(|i| (i * 10, i * 20)).collect();
        assert_eq!(health(&falling_behind), Health::Warn);
        let stuck: Vec<_> = (0..13).map(|i| (100, 100 + i)).collect();
        assert_eq!(health(&stuck), Health::Stalled);
        // Moving for the first half of the window, then not at all.
        let stopped: Vec<_> = (0..13).map(|i| (i.min(6) * 10, 100 + i * 10)).collect();
        assert_eq!(health(&stopped), Health::Stalled);
        let stopping: Vec<_> = (0..13).map(|i| (i.min(7) * 10, 100 + i * 10)).collect();
        assert_ne!(
            health(&stopping),
            Health::Stalled,
            "25 s unmoved: not yet half the window"
        );
        let stuck_but_caught_up: Vec<_> = (0..13).map(|_| (100, 100)).collect();
        assert_eq!(health(&stuck_but_caught_up), Health::Ok, "idle is fine");
        assert_eq!(
            health(&[(0, 10), (5, 10)]),
            Health::Warn,
            "too early to judge"
        );
        let one_burst: Vec<_> = (0..13)
            .map(|i| (i * 10, if i == 12 { i * 10 + 50 } else { i * 10 }))
            .collect();
        assert_eq!(
            health(&one_burst),
            Health::Ok,
            "one burst of lag is not a trend"
        );
        let (w, now) = window(&caught_up);
        assert_eq!(w.evaluate(now + 61_000).health, Health::Stopped);
        assert_eq!(LagWindow::new(1).evaluate(0).health, Health::Stopped);
    }

    /// A capture datastream observed every 2 s in source-time milliseconds: the
    /// committed position's commit time against the present less a 10 s slack.
    fn datastream(committed_at: impl Fn(i64) -> i64) -> (LagWindow, i64) {
        let mut w = LagWindow::new(60_000);
        let start = 1_700_000_000_000;
        let mut at = start;
        for i in 0..31 {
            at = start + i * 2_000;
            let position = committed_at(at);
            w.observe(Observation {
                at_ms: at,
                position,
                end: (at - 10_000).max(position),
            });
        }
        (w, at)
    }

    #[test]
    fn the_crawl_after_crashes_is_not_ok() {
        // Issue 21: after a restart capture advanced 1 s of source time per 5 s of
        // wall time, 8 minutes behind and falling further back.
        let (w, now) = datastream(|at| (at - 480_000) - (at - 1_700_000_000_000) * 4 / 5);
        let e = w.evaluate(now);
        assert_eq!(e.health, Health::Warn, "{e:?}");
        assert!(
            (e.rate - 200.0).abs() < 1.0,
            "source ms per second: {}",
            e.rate
        );
        // The committed position stopped moving altogether.
        let (w, now) = datastream(|_| 1_700_000_000_000 - 480_000);
        let e = w.evaluate(now);
        assert_eq!(e.health, Health::Stalled, "{e:?}");
        assert_eq!(e.rate, 0.0);
        // Keeping up: the position trails the present by a few seconds.
        let (w, now) = datastream(|at| at - 3_000);
        assert_eq!(w.evaluate(now).health, Health::Ok);
        // Catching up after a restart: far behind, but the lag shrinks.
        let (w, now) = datastream(|at| (at - 480_000) + (at - 1_700_000_000_000) * 3);
        assert_eq!(w.evaluate(now).health, Health::Ok);
    }

    #[test]
    fn rate_and_time_behind() {
        // The consumer is where the log ended 20 s before the last observation.
        let points: Vec<_> = (0..13).map(|i| (i * 50, i * 50 + 200)).collect();
        let (w, now) = window(&points);
        let e = w.evaluate(now);
        assert_eq!(e.lag, 200);
        assert!((e.rate - 10.0).abs() < 1e-9, "{}", e.rate);
        assert!((e.lag_seconds - 20.0).abs() < 1e-9, "{}", e.lag_seconds);
        assert_eq!(e.health.to_string(), "OK");
        assert_eq!(Health::Stalled.code(), 2);
    }
}
