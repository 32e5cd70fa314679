//! The status of what a component runs (datastreams, tables, jobs), judged
//! Burrow-style: observed every few seconds, evaluated over a window
//! ([`lag_eval`]), served as JSON on `/status`, exported as
//! `tributary_status{component,kind,name}` (0 OK, 1 WARN, 2 STALLED, 3 STOPPED)
//! and `tributary_status_lag_seconds`, and drawn by the status page.
//!
//! Each item also has a progress [`Watchdog`]: work to do and a committed
//! position that has not moved for `metrics.stall_after_s` makes `/healthz` and
//! `/readyz` fail (so Kubernetes restarts the pod), logs an ERROR and counts in
//! `tributary_status_stalls_total`.

mod lag_eval;
mod watchdog;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value as Json, json};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use lag_eval::{LagWindow, Observation};
use watchdog::{Verdict, Watchdog};

/// How often components observe themselves.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// The window evaluations look at.
const WINDOW_MS: i64 = 60_000;
/// How much history the status page draws.
const HISTORY_MS: i64 = 10 * 60_000;

/// What a position counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Kafka records (offsets, events).
    Records,
    /// Milliseconds of source time (capture: the stored binlog position's commit time).
    Milliseconds,
}

/// One observation of one thing a component runs.
pub(crate) struct Sample {
    pub(crate) kind: &'static str,
    pub(crate) name: String,
    pub(crate) unit: Unit,
    /// Its position against the end of its input, for the Burrow-style evaluation.
    pub(crate) observation: Observation,
    /// Its committed position against what it has to commit, for the watchdog.
    pub(crate) progress: Progress,
}

/// What the watchdog sees of an item.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    /// The committed position.
    pub(crate) position: i64,
    /// How far the item has work to commit (`> position`: work to do).
    pub(crate) end: i64,
    /// Legitimately waiting (tables loading, a snapshot being read): not judged.
    pub(crate) waiting: bool,
}

impl Progress {
    /// Progress judged on the same numbers as the status observation.
    fn of(observation: Observation, waiting: bool) -> Self {
        Progress {
            position: observation.position,
            end: observation.end,
            waiting,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    component: &'static str,
    kind: &'static str,
    name: String,
}

struct Item {
    unit: Unit,
    window: LagWindow,
    watchdog: Watchdog,
    /// (at, lag, rate) for the page's charts.
    history: VecDeque<(i64, i64, f64)>,
}

/// Everything a component runs, with its windows.
pub(crate) struct StatusBoard {
    component: &'static str,
    stall_after_ms: i64,
    items: Mutex<BTreeMap<(&'static str, String), Item>>,
    health: Family<StatusLabel, Gauge>,
    lag_seconds: Family<StatusLabel, Gauge<f64, AtomicU64>>,
    stalls: Family<StatusLabel, Counter>,
}

impl StatusBoard {
    /// A board for `component` (`capture`, `tables`, `enrich`), with its metrics;
    /// its watchdogs call an item stuck after `stall_after` without progress.
    pub(crate) fn register(
        component: &'static str,
        stall_after: Duration,
        registry: &mut Registry,
    ) -> Arc<Self> {
        let board = StatusBoard {
            component,
            stall_after_ms: stall_after.as_millis() as i64,
            items: Mutex::default(),
            health: Family::default(),
            lag_seconds: Family::default(),
            stalls: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("tributary_status");
        r.register(
            "health",
            "Burrow-style evaluation over the last minute: 0 OK, 1 WARN, 2 STALLED, 3 STOPPED",
            board.health.clone(),
        );
        r.register(
            "lag_seconds",
            "How far behind the end of its input each datastream, table or job is, in seconds",
            board.lag_seconds.clone(),
        );
        r.register(
            "stalls",
            "Times the watchdog found work to do and no progress for metrics.stall_after_s",
            board.stalls.clone(),
        );
        Arc::new(board)
    }

    /// Adds observations and refreshes the metrics.
    pub(crate) fn record(&self, samples: Vec<Sample>, now_ms: i64) {
        let mut items = self.items.lock().expect("status lock");
        for sample in samples {
            let item = items
                .entry((sample.kind, sample.name.clone()))
                .or_insert_with(|| Item {
                    unit: sample.unit,
                    window: LagWindow::new(WINDOW_MS),
                    watchdog: Watchdog::new(self.stall_after_ms),
                    history: VecDeque::new(),
                });
            item.window.observe(sample.observation);
            let Progress {
                position,
                end,
                waiting,
            } = sample.progress;
            let was_stuck = item.watchdog.verdict().is_stuck();
            match item.watchdog.observe(now_ms, position, end, waiting) {
                Verdict::Stuck { for_ms } if !was_stuck => {
                    error!(
                        component = self.component,
                        kind = sample.kind,
                        name = %sample.name,
                        position,
                        end,
                        stalled_s = for_ms / 1000,
                        "no progress although there is work to do: failing /healthz and /readyz so the process is restarted"
                    );
                    self.stalls
                        .get_or_create(&StatusLabel {
                            component: self.component,
                            kind: sample.kind,
                            name: sample.name.clone(),
                        })
                        .inc();
                }
                verdict if was_stuck && !verdict.is_stuck() => {
                    info!(component = self.component, kind = sample.kind, name = %sample.name, "progressing again");
                }
                _ => {}
            }
            let evaluation = item.window.evaluate(now_ms);
            item.history
                .push_back((now_ms, evaluation.lag, evaluation.rate));
            while item
                .history
                .front()
                .is_some_and(|(at, _, _)| now_ms - at > HISTORY_MS)
            {
                item.history.pop_front();
            }
        }
        for ((kind, name), item) in items.iter() {
            let evaluation = item.window.evaluate(now_ms);
            let label = StatusLabel {
                component: self.component,
                kind,
                name: name.clone(),
            };
            let health = self.health.get_or_create(&label);
            health.set(evaluation.health.code());
            let lag_seconds = self.lag_seconds.get_or_create(&label);
            lag_seconds.set(seconds_behind(item.unit, &evaluation));
        }
    }

    /// The items the watchdog finds stuck, as `kind name`.
    pub(crate) fn stuck(&self) -> Vec<String> {
        let items = self.items.lock().expect("status lock");
        items
            .iter()
            .filter(|(_, item)| item.watchdog.verdict().is_stuck())
            .map(|((kind, name), _)| format!("{kind} {name}"))
            .collect()
    }

    /// The `/status` document.
    pub(crate) fn report(&self, now_ms: i64) -> Json {
        let items = self.items.lock().expect("status lock");
        let items: Vec<Json> = items
            .iter()
            .map(|((kind, name), item)| {
                let e = item.window.evaluate(now_ms);
                let latest = item.window.latest();
                let history: Vec<Json> = item
                    .history
                    .iter()
                    .map(|(at, lag, rate)| json!([at, lag, rate]))
                    .collect();
                json!({
                    "kind": kind,
                    "name": name,
                    "status": e.health.to_string(),
                    "reason": e.reason,
                    "unit": match item.unit { Unit::Records => "records", Unit::Milliseconds => "ms" },
                    "lag": e.lag,
                    "lag_seconds": seconds_behind(item.unit, &e),
                    "rate": e.rate,
                    "stuck": item.watchdog.verdict().is_stuck(),
                    "position": latest.map(|o| o.position),
                    "end": latest.map(|o| o.end),
                    "history": history,
                })
            })
            .collect();
        json!({ "component": self.component, "at_ms": now_ms, "window_s": WINDOW_MS / 1000, "items": items })
    }
}

fn seconds_behind(unit: Unit, e: &lag_eval::Evaluation) -> f64 {
    match unit {
        Unit::Records => e.lag_seconds,
        Unit::Milliseconds => e.lag as f64 / 1000.0,
    }
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Records what `sample` observes every [`SAMPLE_INTERVAL`] until `shutdown`.
#[must_use = "the sampler is awaited after shutdown"]
pub(crate) fn spawn_sampler(
    board: Arc<StatusBoard>,
    sample: impl Fn() -> Vec<Sample> + Send + 'static,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => board.record(sample(), now_ms()),
            }
        }
    })
}

/// Observations of local tables: applied offsets against the topic ends, summed
/// over the partitions held.
pub(crate) fn table_samples(progress: &tributary_tables::progress::Progress) -> Vec<Sample> {
    let at_ms = now_ms();
    progress
        .table_names()
        .into_iter()
        .map(|name| {
            let (mut position, mut end) = (0, 0);
            for (_, p) in progress.of_table(&name) {
                position += p.next_offset;
                end += p
                    .latest_end
                    .or(p.end_at_assignment)
                    .unwrap_or(p.next_offset)
                    .max(p.next_offset);
            }
            let observation = Observation {
                at_ms,
                position,
                end,
            };
            Sample {
                kind: "table",
                name,
                unit: Unit::Records,
                observation,
                progress: Progress::of(observation, false),
            }
        })
        .collect()
}

/// Observations of enrichment jobs: input events consumed, against those plus
/// the records still to consume on the job's assigned partitions. A job whose
/// tables are still loading is waiting.
pub(crate) fn job_samples(
    jobs: &[String],
    metrics: &tributary_enricher::EnrichMetrics,
    tables_loading: bool,
) -> Vec<Sample> {
    let at_ms = now_ms();
    jobs.iter()
        .map(|job| {
            let label = tributary_enricher::metrics::JobLabel { job: job.clone() };
            let consumed = metrics.events_in.get_or_create(&label).get() as i64;
            let lag = metrics.job_lag_records.get_or_create(&label).get();
            let observation = Observation {
                at_ms,
                position: consumed,
                end: consumed + lag,
            };
            Sample {
                kind: "job",
                name: job.clone(),
                unit: Unit::Records,
                observation,
                progress: Progress::of(observation, tables_loading),
            }
        })
        .collect()
}

/// Source time a capture may trail the present by and still count as caught up
/// (heartbeats move an idle source's position every few seconds).
const CAPTURE_SLACK_MS: i64 = 10_000;

/// The observation of a capture datastream, in source time (milliseconds): its
/// stored position's commit time against the present (less a slack), and, for the
/// watchdog, against the commit time of the last transaction read from the binlog.
/// Nothing is observed before a position is known (a first snapshot).
pub(crate) fn datastream_sample(
    name: &str,
    metrics: &tributary_capture::CaptureMetrics,
) -> Option<Sample> {
    let at_ms = now_ms();
    let seconds_to_ms = |seconds: f64| (seconds * 1000.0) as i64;
    let committed = seconds_to_ms(metrics.committed_source_time_seconds.get());
    if committed <= 0 {
        return None;
    }
    let read = seconds_to_ms(metrics.read_source_time_seconds.get());
    let end = (at_ms - CAPTURE_SLACK_MS).max(committed);
    // A snapshot stores no position until it ends: judged by its progress bar, not here.
    let snapshotting = metrics.snapshotting.get() == 1;
    Some(Sample {
        kind: "datastream",
        name: name.to_owned(),
        unit: Unit::Milliseconds,
        observation: Observation {
            at_ms,
            position: if snapshotting { end } else { committed },
            end,
        },
        progress: Progress {
            position: committed,
            end: read,
            waiting: snapshotting,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_and_exports_each_item() {
        let mut registry = Registry::default();
        let board = StatusBoard::register("tables", Duration::from_secs(5), &mut registry);
        for i in 0..5 {
            let at_ms = i * 2_000;
            let observation = Observation {
                at_ms,
                position: 100,
                end: 100 + i,
            };
            board.record(
                vec![Sample {
                    kind: "table",
                    name: "users".into(),
                    unit: Unit::Records,
                    observation,
                    progress: Progress::of(observation, false),
                }],
                at_ms,
            );
        }
        let report = board.report(8_000);
        let item = &report["items"][0];
        assert_eq!(item["name"], "users");
        assert_eq!(item["lag"], 4);
        assert_eq!(item["history"].as_array().unwrap().len(), 5);
        assert_eq!(report["component"], "tables");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("tributary_status_health{"))
            .unwrap();
        assert!(line.contains("name=\"users\""), "{line}");
        let status = item["status"].as_str().unwrap();
        let code = ["OK", "WARN", "STALLED", "STOPPED"]
            .iter()
            .position(|s| *s == status)
            .unwrap();
        assert!(line.ends_with(&format!(" {code}")), "{line} vs {status}");
        // 6 s with work to do and no progress, past the 5 s threshold.
        assert_eq!(board.stuck(), ["table users"]);
        assert_eq!(item["stuck"], true);
        assert_eq!(metric_sum(&text, "tributary_status_stalls_total"), 1.0);
    }

    #[test]
    fn a_capture_with_no_known_position_is_not_observed() {
        let metrics = tributary_capture::CaptureMetrics::default();
        assert!(datastream_sample("shop", &metrics).is_none());
        let now_s = now_ms() as f64 / 1000.0;
        metrics.committed_source_time_seconds.set(now_s - 60.0);
        metrics.read_source_time_seconds.set(now_s - 30.0);
        let sample = datastream_sample("shop", &metrics).unwrap();
        let lag_s = sample.observation.lag() as f64 / 1000.0;
        assert!(
            (49.0..=51.0).contains(&lag_s),
            "{lag_s}: 60 s behind, less the slack"
        );
        assert_eq!(
            sample.progress.end - sample.progress.position,
            30_000,
            "the watchdog compares with what was read"
        );
        assert!(!sample.progress.waiting);
    }

    fn metric_sum(text: &str, name: &str) -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}
