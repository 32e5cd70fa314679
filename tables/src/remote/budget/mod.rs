//! Rate limits of remote tables: one budget per backend, however many
//! processes use it, that backs off when the backend says it is overloaded.
//!
//! A remote table's `rate_limit` is a [`Budget`]. Without a `budget_group` it
//! is this process's alone. With one, every process whose remote tables name
//! the group (instances of a job, other jobs, lookup APIs) shares its limit and
//! burst: each announces on the budgets topic ([`crate::announce`]) its weight
//! (the share of its jobs' input partitions it holds), the part it claims, the
//! rate it uses, and whether its callers wait; each divides the limit from
//! those announcements ([`allocation`]) and sizes its bucket ([`bucket`]) to
//! its part. A part in use lowers at once; a raise is claimed first, and used
//! only once an announcement holding it has been acknowledged and the others
//! have had [`READ_DELAY`] to read it, and never beyond what the others'
//! claims leave free. An instance that stops announcing loses its part after
//! `member_timeout_ms`; one whose announcements go unacknowledged for half
//! that uses nothing (the others may soon take its part). A new instance uses
//! nothing until it has read the topic up to its own first announcement (so
//! it knows every live instance's). Overload
//! signals shrink the part this instance uses ([`backoff`]); a `Retry-After`
//! pauses it.

pub mod allocation;
pub mod backoff;
pub mod bucket;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use self::allocation::Member;
use self::backoff::Backoff;
use self::bucket::{Bucket, NoPermit};
use crate::announce::{Announce, Board, Topic};
use crate::config::{BudgetsConfig, KafkaConfig, RateLimitConfig};
use crate::error::TableError;
use crate::metrics::{GroupLabel, ReasonLabel, TablesMetrics};
use crate::remote::backend::Overload;

/// How often shares are recomputed.
const TICK: Duration = Duration::from_millis(100);

/// How long the others get to read a raised claim before it is used (their
/// readers wait at most 100 ms for a fetch).
pub const READ_DELAY: Duration = Duration::from_millis(250);

/// How long a new instance may take to read the topic before it says so.
const SLOW_START: Duration = Duration::from_secs(10);

/// How long announcements are kept (members republish every interval; a
/// member's last announcement before it died goes after this).
const RETENTION: Duration = Duration::from_secs(3600);

/// Longest `Retry-After` honoured.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// The rate limit of one backend in this process.
pub struct Budget {
    /// The group, or the table's name for a budget of its own.
    name: String,
    shared: bool,
    limit: f64,
    burst: f64,
    bucket: Bucket,
    state: Mutex<State>,
    stats: Stats,
}

struct State {
    /// The part this process claims (announced: the others leave it free).
    claim: f64,
    /// The largest claim the others have had time to read.
    settled: f64,
    /// The part in use, before back-off: the settled claim, within what the
    /// others' claims leave free.
    using: f64,
    /// Raised claims not yet in use, oldest first.
    raises: VecDeque<Raise>,
    backoff: Backoff,
    /// Permits per second used lately (smoothed).
    used: f64,
    /// Callers wanted more than they got until then.
    hungry_until: Option<Instant>,
}

/// A raised claim, on its way to being used.
struct Raise {
    claim: f64,
    /// When an announcement holding it was written for the publisher.
    written: Option<Instant>,
    /// When an announcement holding it was seen acknowledged.
    acked: Option<Instant>,
}

#[derive(Clone)]
struct Stats {
    rate: Gauge<f64, AtomicU64>,
    share: Gauge<f64, AtomicU64>,
    members: Gauge,
    metrics: TablesMetrics,
}

impl Budget {
    fn new(name: &str, limit: &RateLimitConfig, metrics: &TablesMetrics) -> Self {
        let label = GroupLabel {
            group: name.to_owned(),
        };
        let rate = metrics.remote_budget_rate.get_or_create(&label).clone();
        let share = metrics.remote_budget_share.get_or_create(&label).clone();
        let members = metrics.remote_budget_members.get_or_create(&label).clone();
        let shared = limit.budget_group.is_some();
        // Alone, the whole limit at once; shared, nothing before the others are known.
        let start = if shared {
            0.0
        } else {
            f64::from(limit.per_second)
        };
        let budget = Budget {
            name: name.to_owned(),
            shared,
            limit: f64::from(limit.per_second),
            burst: f64::from(limit.burst),
            bucket: Bucket::new(),
            state: Mutex::new(State {
                claim: start,
                settled: start,
                using: start,
                raises: VecDeque::new(),
                backoff: Backoff::new(limit.floor),
                used: 0.0,
                hungry_until: None,
            }),
            stats: Stats {
                rate,
                share,
                members,
                metrics: metrics.clone(),
            },
        };
        budget.stats.members.set(1);
        budget.apply(&mut budget.state.lock().expect("budget lock"));
        budget
    }

    /// Takes `permits` (requests the backend will see), waiting up to
    /// `max_wait`; returns how long it waited.
    pub async fn acquire(&self, permits: usize, max_wait: Duration) -> Result<Duration, NoPermit> {
        self.bucket.acquire(permits as f64, max_wait).await
    }

    /// The backend said it is overloaded: this process uses less of its part
    /// (and nothing until its `Retry-After`).
    pub fn overloaded(&self, overload: &Overload) {
        let now = Instant::now();
        if let Some(after) = overload.retry_after {
            self.bucket.pause_until(now + after.min(MAX_PAUSE));
        }
        let mut state = self.state.lock().expect("budget lock");
        let previous = state.backoff.last_reason();
        if state.backoff.overloaded(overload.reason, now) {
            let label = |reason: &str| ReasonLabel {
                group: self.name.clone(),
                reason: reason.to_owned(),
            };
            if let Some(previous) = previous {
                self.stats
                    .metrics
                    .remote_budget_last_decrease
                    .get_or_create(&label(previous))
                    .set(0);
            }
            self.stats
                .metrics
                .remote_budget_last_decrease
                .get_or_create(&label(overload.reason))
                .set(1);
            self.stats
                .metrics
                .remote_budget_decreases
                .get_or_create(&label(overload.reason))
                .inc();
            info!(budget = %self.name, reason = overload.reason, fraction = state.backoff.fraction(),
                "backend overloaded: using less of the rate limit");
            self.apply(&mut state);
        }
    }

    /// Sizes the bucket to the part in use and the back-off (the burst in
    /// proportion: at least one request, so a call can go at all).
    fn apply(&self, state: &mut State) {
        let rate = state.using * state.backoff.fraction();
        let burst = (self.burst * rate / self.limit).max(1.0);
        self.bucket.set(rate, burst);
        self.stats.rate.set(rate);
        self.stats.share.set(state.using);
    }

    /// Notes the bucket's use since the last tick and recovers from back-off;
    /// returns what this process announces.
    fn tick(&self, weight: f64, now: Instant) -> Member {
        let usage = self.bucket.usage();
        let mut state = self.state.lock().expect("budget lock");
        state.used = 0.7 * state.used + 0.3 * usage.per_second;
        if usage.hungry {
            state.hungry_until = Some(now + Duration::from_secs(1));
        }
        state.backoff.recover(now);
        self.apply(&mut state);
        Member {
            weight,
            rate: state.claim,
            used: state.used,
            hungry: state.hungry_until.is_some_and(|until| until > now),
        }
    }

    /// Moves toward its next part of the limit, given the other members'
    /// announcements and when this process's were last acknowledged.
    fn share(&self, me: Member, others: &[Member], published: Option<Instant>, now: Instant) {
        let mut members = Vec::with_capacity(others.len() + 1);
        members.push(me);
        members.extend_from_slice(others);
        let targets = allocation::targets(self.limit, &members);
        let next = allocation::next_rate(self.limit, 0, &members, &targets);
        let free = (self.limit - others.iter().map(|m| m.rate).sum::<f64>()).max(0.0);
        self.stats.members.set(members.len() as i64);
        let mut state = self.state.lock().expect("budget lock");
        if next < state.claim {
            state.claim = next;
            state.settled = state.settled.min(next);
            for raise in &mut state.raises {
                raise.claim = raise.claim.min(next);
            }
        } else if next > state.claim {
            state.claim = next;
            state.raises.push_back(Raise {
                claim: next,
                written: None,
                acked: None,
            });
        }
        for raise in &mut state.raises {
            let announced = raise.written.zip(published).is_some_and(|(w, p)| p >= w);
            if raise.acked.is_none() && announced {
                raise.acked = Some(now);
            }
        }
        while let Some(raise) = state.raises.front() {
            match raise.acked {
                Some(acked) if now >= acked + READ_DELAY => {
                    state.settled = state.settled.max(raise.claim);
                    state.raises.pop_front();
                }
                _ => break,
            }
        }
        state.using = state.settled.min(state.claim).min(free);
        self.apply(&mut state);
    }

    /// Cannot announce: uses nothing (the others may soon take its part).
    fn stand_down(&self) {
        let mut state = self.state.lock().expect("budget lock");
        state.claim = 0.0;
        state.settled = 0.0;
        state.using = 0.0;
        state.raises.clear();
        self.apply(&mut state);
    }

    /// The claims decided so far are in the announcement written at `now`.
    fn written(&self, now: Instant) {
        let mut state = self.state.lock().expect("budget lock");
        for raise in &mut state.raises {
            raise.written.get_or_insert(now);
        }
    }

    /// The part claimed now.
    fn claim(&self) -> f64 {
        self.state.lock().expect("budget lock").claim
    }
}

/// The weight of this process in its budgets: the mean, over its jobs, of the
/// fraction of their input partitions it holds (1 without jobs).
#[derive(Default)]
pub struct Weights {
    jobs: Mutex<BTreeMap<String, f64>>,
    expect_jobs: bool,
}

impl Weights {
    /// `expect_jobs`: jobs will say what they hold (until then the weight is 0).
    pub fn new(expect_jobs: bool) -> Self {
        Weights {
            jobs: Mutex::default(),
            expect_jobs,
        }
    }

    /// `job` holds `held` of its `total` input partitions.
    pub fn hold(&self, job: &str, held: usize, total: usize) {
        let fraction = held as f64 / total.max(1) as f64;
        self.jobs
            .lock()
            .expect("weights lock")
            .insert(job.to_owned(), fraction);
    }

    /// The weight now.
    pub fn weight(&self) -> f64 {
        let jobs = self.jobs.lock().expect("weights lock");
        if jobs.is_empty() {
            return if self.expect_jobs { 0.0 } else { 1.0 };
        }
        jobs.values().sum::<f64>() / jobs.len() as f64
    }
}

/// What this process announces: its part of every shared budget.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Announcement {
    /// Budget group → this process's part.
    pub groups: BTreeMap<String, Member>,
}

/// The budgets of a tables file: one per group (or per table without one).
pub struct Budgets {
    by_name: HashMap<String, Arc<Budget>>,
    weights: Arc<Weights>,
    /// The last announcement, shared with the publisher.
    announced: Arc<Mutex<Announcement>>,
}

/// Announces the parts of this process's shared budgets.
struct Parts(Arc<Mutex<Announcement>>);

impl Announce for Parts {
    type State = Announcement;

    fn current(&self) -> Announcement {
        self.0.lock().expect("announcement lock").clone()
    }

    /// A changed claim (a raise waits for it), a change of hunger or a new
    /// group is heard of at once.
    fn urgent(&self, published: &Announcement, now: &Announcement) -> bool {
        now.groups.iter().any(|(group, m)| {
            published
                .groups
                .get(group)
                .is_none_or(|p| (m.rate - p.rate).abs() > 1e-9 || m.hungry != p.hungry)
        })
    }
}

impl Budgets {
    /// A budget for every rate-limited remote table of `remote` (tables of one
    /// group share one); `expect_jobs`: the weight comes from jobs.
    pub fn new(
        remote: &[crate::config::RemoteTableConfig],
        expect_jobs: bool,
        metrics: &TablesMetrics,
    ) -> Self {
        let mut by_name = HashMap::new();
        for table in remote {
            if let Some(limit) = &table.rate_limit {
                let name = limit.budget_group.as_deref().unwrap_or(&table.name);
                by_name
                    .entry(name.to_owned())
                    .or_insert_with(|| Arc::new(Budget::new(name, limit, metrics)));
            }
        }
        Budgets {
            by_name,
            weights: Arc::new(Weights::new(expect_jobs)),
            announced: Arc::default(),
        }
    }

    /// The budget of `table` (with its rate limit).
    pub fn of(&self, table: &crate::config::RemoteTableConfig) -> Option<Arc<Budget>> {
        let limit = table.rate_limit.as_ref()?;
        let name = limit.budget_group.as_deref().unwrap_or(&table.name);
        self.by_name.get(name).cloned()
    }

    /// Where jobs say which share of their input they hold.
    pub fn weights(&self) -> Arc<Weights> {
        self.weights.clone()
    }

    /// Starts sharing: announces on the budgets topic and resizes every budget
    /// each tick, until `shutdown` (tasks in `tasks`). Budgets of their own
    /// only recover from back-off.
    pub async fn start(
        &self,
        kafka: &KafkaConfig,
        settings: &BudgetsConfig,
        shutdown: CancellationToken,
        tasks: &mut JoinSet<Result<(), TableError>>,
    ) -> Result<(), TableError> {
        let budgets: Vec<Arc<Budget>> = self.by_name.values().cloned().collect();
        if budgets.is_empty() {
            return Ok(()); // no rate limit: nothing to resize
        }
        let board = if budgets.iter().any(|b| b.shared) {
            let interval = Duration::from_millis(settings.publish_interval_ms);
            let me = member_name();
            info!(topic = %settings.topic, member = %me, "sharing rate limits");
            let topic = Topic {
                kafka,
                name: settings.topic.clone(),
                component: "tables.budgets",
                reader_group: format!("{}.reader", settings.topic),
                interval,
                check: TICK,
                retention: Some(RETENTION),
            };
            let parts = Parts(self.announced.clone());
            Some(Board::start(topic, me, parts, shutdown.clone(), tasks).await?)
        } else {
            None
        };
        let exchange = Exchange {
            budgets,
            weights: self.weights.clone(),
            announced: self.announced.clone(),
            board,
            timeout: Duration::from_millis(settings.member_timeout_ms),
        };
        tasks.spawn(exchange.run(shutdown));
        Ok(())
    }
}

/// The task that resizes the budgets from the announcements.
struct Exchange {
    budgets: Vec<Arc<Budget>>,
    weights: Arc<Weights>,
    announced: Arc<Mutex<Announcement>>,
    board: Option<Arc<Board<Announcement>>>,
    timeout: Duration,
}

impl Exchange {
    async fn run(self, shutdown: CancellationToken) -> Result<(), TableError> {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let started = Instant::now();
        let (mut lost, mut slow) = (false, false);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                _ = ticks.tick() => {}
            }
            let now = Instant::now();
            let weight = self.weights.weight();
            let others = self
                .board
                .as_ref()
                .map(|b| b.live(self.timeout))
                .unwrap_or_default();
            // A new member waits to have heard everyone once; one whose
            // announcements go unacknowledged stands down.
            let warm = self.board.as_ref().is_none_or(|b| b.caught_up());
            let published = self.board.as_ref().and_then(|b| b.published_at());
            let coordinated = published.is_some_and(|at| now - at < self.timeout / 2);
            if !warm && !slow && now - started > SLOW_START {
                warn!(
                    "cannot read the budgets topic up to this process's own announcement: shared rate limits grant nothing until then"
                );
                slow = true;
            }
            if warm && !coordinated && !lost {
                warn!(
                    "cannot announce on the budgets topic: shared rate limits grant nothing until it can"
                );
            }
            lost = warm && !coordinated;
            let mut announcement = Announcement::default();
            for budget in &self.budgets {
                let me = budget.tick(weight, now);
                if !budget.shared {
                    continue;
                }
                let group = &budget.name;
                let theirs: Vec<Member> = others
                    .iter()
                    .filter_map(|a| a.groups.get(group).copied())
                    .collect();
                if lost {
                    budget.stand_down();
                } else if warm {
                    budget.share(me, &theirs, published, now);
                }
                let rate = budget.claim();
                announcement
                    .groups
                    .insert(group.clone(), Member { rate, ..me });
            }
            *self.announced.lock().expect("announcement lock") = announcement;
            let written = Instant::now();
            for budget in &self.budgets {
                budget.written(written);
            }
        }
    }
}

/// This member's name on the budgets topic: host, pid, start time, and a
/// count of the tables files started in this process.
fn member_name() -> String {
    static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".to_owned());
    let started = crate::announce::now_ms();
    let nth = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{host}-{}-{started}-{nth}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(settings: &str) -> Budget {
        let config = crate::TablesConfig::parse(&format!(
            "data_dir: /x\nkafka: {{ brokers: b }}\nremote:\n  - name: t\n    http: {{ url: 'http://h/{{k}}', key: [k] }}\n    rate_limit: {settings}\n"
        ))
        .unwrap();
        Budget::new(
            "t",
            config.remote[0].rate_limit.as_ref().unwrap(),
            &TablesMetrics::default(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn overload_halves_the_rate_and_retry_after_pauses_it() {
        let b = budget("{ per_second: 100, burst: 100 }");
        b.overloaded(&Overload {
            reason: "http_429",
            retry_after: Some(Duration::from_secs(2)),
        });
        assert_eq!(b.stats.rate.get(), 50.0);
        let started = Instant::now();
        b.acquire(1, Duration::from_secs(5)).await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "paused by Retry-After"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_raise_is_used_only_after_it_was_announced_and_read() {
        let b = budget("{ per_second: 100, burst: 10, budget_group: g }");
        let hungry = Member {
            weight: 1.0,
            rate: 0.0,
            used: 0.0,
            hungry: true,
        };
        let now = Instant::now();
        b.share(hungry, &[], None, now);
        assert_eq!(
            (b.claim(), b.stats.share.get()),
            (100.0, 0.0),
            "claimed, not used"
        );
        b.written(now);
        let claimed = Member {
            rate: 100.0,
            ..hungry
        };
        let later = now + Duration::from_millis(100);
        b.share(claimed, &[], Some(later), later);
        assert_eq!(
            b.stats.share.get(),
            0.0,
            "announced, not yet read by the others"
        );
        let read = later + READ_DELAY;
        b.share(claimed, &[], Some(later), read);
        assert_eq!(b.stats.share.get(), 100.0);
        // Another member claims 60: the part in use falls at once.
        let other = Member {
            weight: 1.0,
            rate: 60.0,
            used: 60.0,
            hungry: true,
        };
        b.share(
            Member {
                rate: 100.0,
                ..hungry
            },
            &[other],
            Some(read),
            read,
        );
        assert!(b.stats.share.get() <= 40.0, "{}", b.stats.share.get());
        // It lowers its claim to 50: the part in use returns to this process's
        // settled claim (50), with no new raise to wait for.
        let other = Member {
            rate: 50.0,
            ..other
        };
        let me = Member {
            rate: b.claim(),
            ..hungry
        };
        b.share(me, &[other], Some(read), read + TICK);
        assert_eq!(b.stats.share.get(), 50.0);
    }
}
