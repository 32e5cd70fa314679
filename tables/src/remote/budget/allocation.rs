//! How a shared budget is divided between the instances that use it: a pure
//! function of what each instance announced.
//!
//! **Targets** are a weighted max-min fair division of the limit (water
//! filling): an instance that used less than its fair share wants what it used
//! plus room to grow ([`GROWTH`], at least [`IDLE_WANT`] of the limit) and gets
//! that; a hungry one (its callers wait for permits) wants without bound; what
//! the satisfied ones leave is split between the others by weight (the share
//! of input partitions they hold). With every instance hungry, the targets are
//! the partition shares, `limit × held / total`.
//!
//! **Steps** keep the sum of the rates in use under the limit while targets
//! move: an instance lowers its rate to its target at once (and announces it),
//! but raises it only into the headroom the others' announced rates leave,
//! each of the instances that want more taking an equal part of it, so two
//! instances raising at once do not take the same headroom twice.

/// What an instance announced about one budget.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// Its share of the work: the fraction of its jobs' input partitions it
    /// holds (1 for a lookup API without jobs).
    pub weight: f64,
    /// The rate it may use now (before its own back-off), permits per second.
    pub rate: f64,
    /// The rate it used lately.
    pub used: f64,
    /// Whether its callers wanted more than they got.
    pub hungry: bool,
}

/// Room to grow an instance that is not hungry wants, over what it used.
pub const GROWTH: f64 = 1.5;

/// The least an instance that is not hungry wants, as a fraction of the limit.
pub const IDLE_WANT: f64 = 0.02;

/// Weights below this count as this (an instance without partitions yet still
/// gets a share of what nobody wants).
const MIN_WEIGHT: f64 = 1e-3;

/// The target rate of every member, in order: a weighted max-min fair
/// division of `limit`.
pub fn targets(limit: f64, members: &[Member]) -> Vec<f64> {
    let wants: Vec<f64> = members
        .iter()
        .map(|m| {
            if m.hungry {
                f64::INFINITY
            } else {
                (m.used * GROWTH).max(limit * IDLE_WANT)
            }
        })
        .collect();
    let weights: Vec<f64> = members.iter().map(|m| m.weight.max(MIN_WEIGHT)).collect();
    let mut targets = vec![0.0; members.len()];
    let mut open: Vec<usize> = (0..members.len()).collect();
    let mut left = limit;
    loop {
        let total: f64 = open.iter().map(|&i| weights[i]).sum();
        let (satisfied, unsatisfied): (Vec<usize>, Vec<usize>) = open
            .iter()
            .partition(|&&i| wants[i] <= left * weights[i] / total);
        if satisfied.is_empty() {
            for &i in &unsatisfied {
                targets[i] = left * weights[i] / total;
            }
            return targets;
        }
        for &i in &satisfied {
            targets[i] = wants[i];
            left -= wants[i];
        }
        if unsatisfied.is_empty() {
            return targets;
        }
        open = unsatisfied;
    }
}

/// The next rate of member `me`, given everyone's `targets`: its target when
/// that is lower than its rate, else its rate raised by an equal part of the
/// headroom under `limit` among the members that want more, up to its target.
pub fn next_rate(limit: f64, me: usize, members: &[Member], targets: &[f64]) -> f64 {
    let rate = members[me].rate;
    let target = targets[me];
    if target <= rate {
        return target;
    }
    let in_use: f64 = members.iter().map(|m| m.rate).sum();
    let headroom = (limit - in_use).max(0.0);
    let slack = limit * 1e-3;
    let raising = members
        .iter()
        .zip(targets)
        .filter(|(m, t)| **t > m.rate + slack)
        .count()
        .max(1);
    (rate + headroom / raising as f64).min(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(weight: f64, rate: f64, used: f64, hungry: bool) -> Member {
        Member {
            weight,
            rate,
            used,
            hungry,
        }
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    #[test]
    fn hungry_members_split_the_limit_by_their_partition_shares() {
        let third = 1.0 / 3.0;
        let all = [
            member(third, 0.0, 0.0, true),
            member(third, 0.0, 0.0, true),
            member(third, 0.0, 0.0, true),
        ];
        let t = targets(300.0, &all);
        assert!(close(&t, &[100.0, 100.0, 100.0]), "{t:?}");
        let skewed_weights = [
            member(0.5, 0.0, 0.0, true),
            member(0.25, 0.0, 0.0, true),
            member(0.25, 0.0, 0.0, true),
        ];
        let t = targets(400.0, &skewed_weights);
        assert!(close(&t, &[200.0, 100.0, 100.0]), "{t:?}");
    }

    #[test]
    fn what_idle_members_leave_goes_to_the_busy_one() {
        let third = 1.0 / 3.0;
        let skew = [
            member(third, 100.0, 100.0, true),
            member(third, 100.0, 0.0, false),
            member(third, 100.0, 4.0, false),
        ];
        let t = targets(300.0, &skew);
        // Idle: 2% of the limit (6); lightly used: 4 × 1.5 = 6; the rest to the busy one.
        assert!(close(&t, &[288.0, 6.0, 6.0]), "{t:?}");
        assert!(t.iter().sum::<f64>() <= 300.0 + 1e-9);
        // Nobody hungry: each gets what it wants, and the sum stays under the limit.
        let calm = [
            member(0.5, 10.0, 10.0, false),
            member(0.5, 10.0, 20.0, false),
        ];
        let t = targets(100.0, &calm);
        assert!(close(&t, &[15.0, 30.0]), "{t:?}");
    }

    #[test]
    fn rates_fall_at_once_and_rise_only_into_the_headroom_shared_by_those_raising() {
        let m = [
            member(0.5, 90.0, 90.0, false),
            member(0.25, 5.0, 5.0, true),
            member(0.25, 5.0, 5.0, true),
        ];
        let t = targets(100.0, &m);
        assert!(t[0] < 90.0);
        assert_eq!(next_rate(100.0, 0, &m, &t), t[0], "a decrease is immediate");
        // 100 − (90 + 5 + 5) = 0: no headroom until the first member announces its decrease.
        assert_eq!(next_rate(100.0, 1, &m, &t), 5.0);
        let announced = [
            member(0.5, t[0], 90.0, false),
            member(0.25, 5.0, 5.0, true),
            member(0.25, 5.0, 5.0, true),
        ];
        let r1 = next_rate(100.0, 1, &announced, &t);
        let r2 = next_rate(100.0, 2, &announced, &t);
        assert!(r1 > 5.0 && r2 > 5.0);
        assert!(
            t[0] + r1 + r2 <= 100.0 + 1e-9,
            "two members raising at once stay under the limit: {} {r1} {r2}",
            t[0]
        );
    }

    /// Each member steps from the others' announcements of the step before
    /// (their rates then), as on the topic; returns the rates after `steps`.
    fn simulate(limit: f64, members: &mut [Member], steps: usize) {
        for step in 0..steps {
            let announced: Vec<Member> = members.to_vec();
            for i in 0..members.len() {
                let mut view = announced.clone();
                view[i] = members[i];
                let t = targets(limit, &view);
                members[i].rate = next_rate(limit, i, &view, &t);
            }
            let sum: f64 = members.iter().map(|m| m.rate).sum();
            assert!(sum <= limit + 1e-6, "step {step}: {sum} over {limit}");
        }
    }

    #[test]
    fn members_reading_stale_announcements_converge_without_exceeding_the_limit() {
        let third = 1.0 / 3.0;
        let mut m = vec![member(third, 0.0, 0.0, true); 3];
        simulate(300.0, &mut m, 10);
        for member in &m {
            assert!((member.rate - 100.0).abs() < 1.0, "{m:?}");
        }
        // Skew: only the first is hungry; the others use little.
        m[1] = member(third, m[1].rate, 2.0, false);
        m[2] = member(third, m[2].rate, 0.0, false);
        simulate(300.0, &mut m, 10);
        assert!(m[0].rate >= 0.8 * 300.0, "{m:?}");
        // Demand returns to all: back to equal parts.
        for member in &mut m {
            member.hungry = true;
        }
        simulate(300.0, &mut m, 20);
        for member in &m {
            assert!((member.rate - 100.0).abs() < 1.0, "{m:?}");
        }
        // One dies (its announcements expire): the two others take its part.
        m.pop();
        for member in &mut m {
            member.weight = 0.5;
        }
        simulate(300.0, &mut m, 10);
        for member in &m {
            assert!((member.rate - 150.0).abs() < 1.0, "{m:?}");
        }
    }
}
