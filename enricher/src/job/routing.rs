//! Where an event's outcome goes: the output, dead-letter or retry topic, as
//! which record (key, bytes, headers), or nowhere (a skip, or work abandoned to
//! a rebalance). No I/O: [`super::writer`] sends what this decides.

use rdkafka::Message;
use rdkafka::message::{Header, OwnedHeaders, OwnedMessage};

use crate::config::{JobConfig, RetryConfig};
use crate::headers;
use crate::pipeline::Outcome;
use crate::retry::{self, Origin};
use crate::skip::Skip;

/// What became of one input event: what its acknowledgement counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AckKind {
    /// Enriched, written to the output topic.
    Out,
    /// Written to the dead-letter topic.
    Dead,
    /// Nothing written.
    Skipped(Skip),
    /// Written to the retry topic, for a later attempt.
    Retried,
    /// Its partition moved to another instance mid-flight: neither written nor committed.
    Abandoned,
}

/// A record to write for an input event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    /// Record key.
    pub(super) key: Option<Vec<u8>>,
    /// Record value.
    pub(super) value: Vec<u8>,
    /// Why it is a dead letter or a retry.
    pub(super) error: Option<String>,
    /// Retry: the attempt it will be, and when it is due (ms since the epoch).
    pub(super) retry: Option<(u32, i64)>,
}

/// Where a job's records go.
pub(super) struct Routing {
    job: String,
    output: String,
    dead_letter: String,
    retry: Option<RetryConfig>,
}

/// Whether the event being routed still belongs here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ownership {
    /// Read before a revocation in an exactly-once job: its transaction was
    /// aborted, and it is read again.
    Stale,
    /// Read in the current generation; `holds` says whether its input
    /// partition is still assigned (asked only when it matters).
    Current,
}

impl Routing {
    /// The topics of `config`.
    pub(super) fn new(config: &JobConfig) -> Self {
        Routing {
            job: config.name.clone(),
            output: config.output.topic.clone(),
            dead_letter: config.dead_letter.topic.clone(),
            retry: config.retry.clone(),
        }
    }

    /// What to write for `msg`'s `outcome`. `holds` says whether `msg`'s input
    /// partition is still assigned here.
    pub(super) fn route(
        &self,
        msg: &OwnedMessage,
        outcome: Outcome,
        ownership: Ownership,
        holds: impl FnOnce() -> bool,
        now_ms: i64,
    ) -> (AckKind, Option<Record>) {
        if ownership == Ownership::Stale {
            return (AckKind::Abandoned, None);
        }
        match outcome {
            Outcome::Emit { key, value } => (
                AckKind::Out,
                Some(Record {
                    key,
                    value,
                    error: None,
                    retry: None,
                }),
            ),
            Outcome::Skip(skip) => (AckKind::Skipped(skip), None),
            Outcome::Dead(reason) => (AckKind::Dead, Some(dead_letter(msg, reason))),
            Outcome::Retry(reason) => self.retry(msg, reason, now_ms),
            Outcome::NotHeld { table, partition } if holds() => {
                let reason = format!(
                    "join `{table}`: the key is in table partition {partition}, but the event came from input partition {}: the input must be keyed by the join key and partitioned like the table (or declare the table `mode: global`)",
                    msg.partition()
                );
                (AckKind::Dead, Some(dead_letter(msg, reason)))
            }
            // After a rebalance: the partition's new owner enriches it.
            Outcome::NotHeld { .. } => (AckKind::Abandoned, None),
        }
    }

    /// A missed event goes to the retry topic, or to the dead-letter topic once
    /// its attempts are used up.
    fn retry(&self, msg: &OwnedMessage, reason: String, now_ms: i64) -> (AckKind, Option<Record>) {
        let config = self
            .retry
            .as_ref()
            .expect("the pipeline retries only in jobs with a retry topic");
        let made = retry::attempts_made(msg);
        if made >= config.max_attempts {
            let reason = format!("{reason} (after {made} attempts)");
            return (AckKind::Dead, Some(dead_letter(msg, reason)));
        }
        let mut record = dead_letter(msg, reason);
        record.retry = Some((made + 1, now_ms + config.delay_ms as i64));
        (AckKind::Retried, Some(record))
    }

    /// The topic records of `kind` are written to.
    pub(super) fn topic_of(&self, kind: AckKind) -> &str {
        match (kind, &self.retry) {
            (AckKind::Out, _) => &self.output,
            (AckKind::Retried, Some(retry)) => &retry.topic,
            _ => &self.dead_letter,
        }
    }

    /// The headers of `record`, written for `source`: where the event came
    /// from (a retry keeps its first input's coordinates), the job, the
    /// reason, and a retry's attempt and due time.
    pub(super) fn headers(&self, record: &Record, source: &OwnedMessage) -> OwnedHeaders {
        // The numbers are written on the stack: no allocation per record.
        let (mut partition_text, mut offset_text) = (itoa::Buffer::new(), itoa::Buffer::new());
        let (topic, partition, offset) = match retry::origin(source) {
            Origin::Input {
                topic,
                partition,
                offset,
            } => (
                topic,
                partition_text.format(partition),
                offset_text.format(offset),
            ),
            Origin::Carried {
                topic,
                partition,
                offset,
            } => (topic, partition, offset),
        };
        let mut headers = OwnedHeaders::new_with_capacity(HEADERS)
            .insert(header(headers::SOURCE_TOPIC, topic))
            .insert(header(headers::SOURCE_PARTITION, partition))
            .insert(header(headers::SOURCE_OFFSET, offset))
            .insert(header(headers::JOB, &self.job));
        if let Some(error) = &record.error {
            headers = headers.insert(header(headers::ERROR, error));
        }
        if let Some((attempt, due_ms)) = record.retry {
            headers = headers
                .insert(header(retry::ATTEMPT, &attempt.to_string()))
                .insert(header(retry::NOT_BEFORE, &due_ms.to_string()));
        }
        headers
    }
}

/// Most headers a record gets: its origin's three, the job, the error, and
/// a retry's two.
const HEADERS: usize = 7;

fn header<'a>(key: &'a str, value: &'a str) -> Header<'a, &'a str> {
    Header {
        key,
        value: Some(value),
    }
}

/// The dead letter of `msg`: its original key and bytes, with the reason.
pub(super) fn dead_letter(msg: &OwnedMessage, reason: String) -> Record {
    Record {
        key: msg.key().map(<[u8]>::to_vec),
        value: msg.payload().unwrap_or_default().to_vec(),
        error: Some(reason),
        retry: None,
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::Timestamp;
    use rdkafka::message::Headers as _;

    use super::*;

    fn routing() -> Routing {
        Routing {
            job: "orders".into(),
            output: "orders.enriched".into(),
            dead_letter: "orders.dlq".into(),
            retry: Some(RetryConfig {
                topic: "orders.retry".into(),
                delay_ms: 1_000,
                max_attempts: 3,
            }),
        }
    }

    fn message(topic: &str, partition: i32, offset: i64, headers: &[(&str, &str)]) -> OwnedMessage {
        let headers = headers
            .iter()
            .fold(OwnedHeaders::new(), |h, (k, v)| h.insert(header(k, v)));
        OwnedMessage::new(
            Some(b"{\"id\":1}".to_vec()),
            Some(b"1".to_vec()),
            topic.into(),
            Timestamp::NotAvailable,
            partition,
            offset,
            Some(headers),
        )
    }

    fn header_map(headers: &OwnedHeaders) -> Vec<(String, String)> {
        headers
            .iter()
            .map(|h| {
                let value = String::from_utf8(h.value.unwrap_or_default().to_vec()).unwrap();
                (h.key.to_owned(), value)
            })
            .collect()
    }

    fn held() -> bool {
        true
    }

    #[test]
    fn each_outcome_goes_to_its_topic() {
        let r = routing();
        let msg = message("orders", 0, 7, &[]);
        let emit = Outcome::Emit {
            key: Some(b"k".to_vec()),
            value: b"v".to_vec(),
        };
        let (kind, record) = r.route(&msg, emit, Ownership::Current, held, 0);
        assert_eq!((kind, r.topic_of(kind)), (AckKind::Out, "orders.enriched"));
        assert_eq!(record.unwrap().value, b"v");

        let (kind, record) = r.route(
            &msg,
            Outcome::Dead("bad".into()),
            Ownership::Current,
            held,
            0,
        );
        assert_eq!((kind, r.topic_of(kind)), (AckKind::Dead, "orders.dlq"));
        let record = record.unwrap();
        assert_eq!(
            (
                record.key.as_deref(),
                record.value.as_slice(),
                record.error.as_deref()
            ),
            (Some(&b"1"[..]), &b"{\"id\":1}"[..], Some("bad")),
            "a dead letter keeps the original key and bytes"
        );

        let skip = Outcome::Skip(Skip::Deleted);
        assert_eq!(
            r.route(&msg, skip, Ownership::Current, held, 0),
            (AckKind::Skipped(Skip::Deleted), None)
        );

        let (kind, record) = r.route(
            &msg,
            Outcome::Retry("missed".into()),
            Ownership::Current,
            held,
            5_000,
        );
        assert_eq!((kind, r.topic_of(kind)), (AckKind::Retried, "orders.retry"));
        assert_eq!(
            record.unwrap().retry,
            Some((2, 6_000)),
            "second attempt, due after the delay"
        );
    }

    #[test]
    fn a_retry_past_its_last_attempt_is_a_dead_letter_saying_so() {
        let r = routing();
        let msg = message("orders.retry", 0, 3, &[(retry::ATTEMPT, "3")]);
        let (kind, record) = r.route(
            &msg,
            Outcome::Retry("no row".into()),
            Ownership::Current,
            held,
            0,
        );
        assert_eq!(kind, AckKind::Dead);
        assert_eq!(
            record.unwrap().error.as_deref(),
            Some("no row (after 3 attempts)")
        );
    }

    #[test]
    fn work_read_before_a_rebalance_is_abandoned_not_written() {
        let r = routing();
        let msg = message("orders", 1, 9, &[]);
        let emit = Outcome::Emit {
            key: None,
            value: b"v".to_vec(),
        };
        // An exactly-once job whose transaction was aborted by a revocation.
        let stale = r.route(&msg, emit, Ownership::Stale, held, 0);
        assert_eq!(stale, (AckKind::Abandoned, None));
        // A key in a table partition given away with the input partition.
        let not_held = || Outcome::NotHeld {
            table: "customers".into(),
            partition: 4,
        };
        let moved = r.route(&msg, not_held(), Ownership::Current, || false, 0);
        assert_eq!(moved, (AckKind::Abandoned, None));
    }

    #[test]
    fn a_key_outside_the_held_table_partition_is_a_dead_letter_naming_both_partitions() {
        let r = routing();
        let msg = message("orders", 1, 9, &[]);
        let outcome = Outcome::NotHeld {
            table: "customers".into(),
            partition: 4,
        };
        let (kind, record) = r.route(&msg, outcome, Ownership::Current, held, 0);
        assert_eq!(kind, AckKind::Dead);
        let error = record.unwrap().error.unwrap();
        assert!(
            error.contains("`customers`")
                && error.contains("table partition 4")
                && error.contains("input partition 1"),
            "{error}"
        );
    }

    #[test]
    fn headers_name_the_first_input_record_the_job_and_the_reason() {
        let r = routing();
        let input = message("orders", 2, 41, &[]);
        let (_, record) = r.route(
            &input,
            Outcome::Retry("missed".into()),
            Ownership::Current,
            held,
            100,
        );
        let record = record.unwrap();
        assert_eq!(
            header_map(&r.headers(&record, &input)),
            [
                (headers::SOURCE_TOPIC, "orders"),
                (headers::SOURCE_PARTITION, "2"),
                (headers::SOURCE_OFFSET, "41"),
                (headers::JOB, "orders"),
                (headers::ERROR, "missed"),
                (retry::ATTEMPT, "2"),
                (retry::NOT_BEFORE, "1100"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        // Read back from the retry topic, it still names the input record.
        let retried = message(
            "orders.retry",
            2,
            7,
            &header_map(&r.headers(&record, &input))
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
        );
        let emit = Outcome::Emit {
            key: None,
            value: b"v".to_vec(),
        };
        let (_, out) = r.route(&retried, emit, Ownership::Current, held, 0);
        let headers = header_map(&r.headers(&out.unwrap(), &retried));
        assert_eq!(
            headers[..3],
            [
                (headers::SOURCE_TOPIC.to_owned(), "orders".to_owned()),
                (headers::SOURCE_PARTITION.to_owned(), "2".to_owned()),
                (headers::SOURCE_OFFSET.to_owned(), "41".to_owned()),
            ]
        );
    }
}
