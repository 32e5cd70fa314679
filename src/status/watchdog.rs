//! The progress watchdog: a pipeline that has work to do but whose committed
//! position has not moved for longer than a threshold is stuck.
//!
//! Fed with the same kind of observations as [`super::lag_eval`] (a committed
//! position and the end of what there is to process), plus whether the pipeline
//! is legitimately waiting (tables still loading, a snapshot chunk being read).
//! It judges one thing only, so a probe can act on it: restart the process.
//!
//! - work to do: `end > position`;
//! - stuck: work to do, not waiting, and `position` unchanged for longer than the threshold.
//!
//! An idle pipeline (nothing to do) and a waiting one are never stuck, however
//! long that lasts; the clock starts again when either ends.

/// What the watchdog concluded from an observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to do, or the position moved within the threshold.
    Progressing,
    /// Legitimately waiting: not judged.
    Waiting,
    /// Work to do and no progress for `for_ms` milliseconds, longer than the threshold.
    Stuck {
        /// How long the position has not moved.
        for_ms: i64,
    },
}

impl Verdict {
    /// Whether the pipeline is stuck.
    pub(crate) fn is_stuck(self) -> bool {
        matches!(self, Verdict::Stuck { .. })
    }
}

/// Watches one pipeline's committed position.
#[derive(Debug, Clone)]
pub(crate) struct Watchdog {
    threshold_ms: i64,
    /// The position, and since when it has not moved while there was work to do.
    unmoved: Option<(i64, i64)>,
    verdict: Verdict,
}

impl Watchdog {
    /// A watchdog that calls a pipeline stuck after `threshold_ms` without progress.
    pub(crate) fn new(threshold_ms: i64) -> Self {
        Watchdog {
            threshold_ms,
            unmoved: None,
            verdict: Verdict::Progressing,
        }
    }

    /// Takes the observation at `at_ms` and returns the verdict.
    pub(crate) fn observe(
        &mut self,
        at_ms: i64,
        position: i64,
        end: i64,
        waiting: bool,
    ) -> Verdict {
        self.verdict = if waiting {
            self.unmoved = None;
            Verdict::Waiting
        } else if end <= position {
            self.unmoved = None;
            Verdict::Progressing
        } else {
            match self.unmoved {
                Some((unmoved, since)) if unmoved == position => {
                    let for_ms = at_ms - since;
                    if for_ms > self.threshold_ms {
                        Verdict::Stuck { for_ms }
                    } else {
                        Verdict::Progressing
                    }
                }
                _ => {
                    self.unmoved = Some((position, at_ms));
                    Verdict::Progressing
                }
            }
        };
        self.verdict
    }

    /// The verdict of the last observation.
    pub(crate) fn verdict(&self) -> Verdict {
        self.verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds (position, end, waiting) one second apart; returns every verdict.
    fn run(threshold_ms: i64, points: &[(i64, i64, bool)]) -> Vec<Verdict> {
        let mut w = Watchdog::new(threshold_ms);
        points
            .iter()
            .enumerate()
            .map(|(i, &(p, e, waiting))| w.observe(i as i64 * 1000, p, e, waiting))
            .collect()
    }

    #[test]
    fn stuck_only_with_work_and_no_progress_past_the_threshold() {
        // The end moves on, the position stays: stuck once 3 s have passed.
        let stalled: Vec<_> = (0..6).map(|i| (10, 11 + i, false)).collect();
        let verdicts = run(3000, &stalled);
        assert!(verdicts[..4].iter().all(|v| !v.is_stuck()), "{verdicts:?}");
        assert_eq!(verdicts[4], Verdict::Stuck { for_ms: 4000 });
        assert_eq!(verdicts[5], Verdict::Stuck { for_ms: 5000 });

        // Slow but moving: never stuck.
        let crawling: Vec<_> = (0..20).map(|i| (i, 1000 + i * 10, false)).collect();
        assert!(run(3000, &crawling).iter().all(|v| !v.is_stuck()));

        // Idle (caught up) for a long time: never stuck.
        let idle: Vec<_> = (0..20).map(|_| (50, 50, false)).collect();
        assert!(run(3000, &idle).iter().all(|v| !v.is_stuck()));
    }

    #[test]
    fn waiting_resets_the_clock() {
        // 3 s unmoved, then waiting (tables loading) for 10 s, then 2 s unmoved.
        let mut points: Vec<_> = (0..3).map(|_| (10, 20, false)).collect();
        points.extend((0..10).map(|_| (10, 20, true)));
        points.extend((0..3).map(|_| (10, 20, false)));
        let verdicts = run(2500, &points);
        assert!(verdicts[3..13].iter().all(|v| *v == Verdict::Waiting));
        assert!(
            verdicts.iter().all(|v| !v.is_stuck()),
            "never 2.5 s unmoved outside a wait: {verdicts:?}"
        );
    }

    #[test]
    fn recovers_when_the_position_moves() {
        let mut w = Watchdog::new(1000);
        w.observe(0, 5, 9, false);
        assert!(w.observe(2000, 5, 9, false).is_stuck());
        assert_eq!(w.observe(3000, 6, 9, false), Verdict::Progressing);
        assert_eq!(w.verdict(), Verdict::Progressing);
        assert!(
            !w.observe(3500, 6, 9, false).is_stuck(),
            "the clock restarted"
        );
    }
}
