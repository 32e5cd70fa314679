//! How much input a job holds: the bytes of events read and not yet
//! acknowledged (being enriched, or written and awaiting the broker), bounded
//! by `max_in_flight_mb`. The count of events being enriched is bounded
//! separately (`concurrency`); this bound is what keeps large rows from
//! taking gigabytes.

use prometheus_client::metrics::gauge::Gauge;
use rdkafka::Message;
use rdkafka::message::OwnedMessage;

/// Bytes held, against their bound.
pub(super) struct InFlight {
    bytes: u64,
    max_bytes: u64,
    gauge: Gauge,
}

impl InFlight {
    /// Nothing held yet; at most `max_bytes` (exported in `gauge`).
    pub(super) fn new(max_bytes: u64, gauge: Gauge) -> Self {
        gauge.set(0);
        InFlight {
            bytes: 0,
            max_bytes,
            gauge,
        }
    }

    /// Whether another event may be read: while under the bound (so one event
    /// larger than the bound is taken when nothing else is held).
    pub(super) fn has_room(&self) -> bool {
        self.bytes < self.max_bytes
    }

    /// `msg` was read.
    pub(super) fn took(&mut self, msg: &OwnedMessage) {
        self.bytes += size(msg);
        self.gauge.set(self.bytes as i64);
    }

    /// `msg` is no longer held.
    pub(super) fn released(&mut self, msg: &OwnedMessage) {
        self.bytes -= size(msg);
        self.gauge.set(self.bytes as i64);
    }
}

/// What an event holds: its key and value.
fn size(msg: &OwnedMessage) -> u64 {
    (msg.key().map_or(0, <[u8]>::len) + msg.payload().map_or(0, <[u8]>::len)) as u64
}

#[cfg(test)]
mod tests {
    use rdkafka::Timestamp;

    use super::*;

    fn event(bytes: usize) -> OwnedMessage {
        OwnedMessage::new(
            Some(vec![b'x'; bytes]),
            Some(b"key".to_vec()),
            "in".into(),
            Timestamp::NotAvailable,
            0,
            0,
            None,
        )
    }

    #[test]
    fn reading_stops_at_the_bound_and_resumes_as_events_are_released() {
        let gauge = Gauge::default();
        let mut held = InFlight::new(1 << 20, gauge.clone());
        let (a, b) = (event(600 << 10), event(600 << 10));
        assert!(held.has_room());
        held.took(&a);
        assert!(held.has_room(), "600 KiB of 1 MiB");
        held.took(&b);
        assert!(!held.has_room(), "1.2 MiB of 1 MiB");
        assert_eq!(gauge.get(), 2 * ((600 << 10) + 3));
        held.released(&a);
        assert!(held.has_room());
        held.released(&b);
        assert_eq!(gauge.get(), 0);
    }

    #[test]
    fn one_event_larger_than_the_bound_is_taken_alone() {
        let mut held = InFlight::new(1 << 20, Gauge::default());
        let big = event(5 << 20);
        assert!(held.has_room());
        held.took(&big);
        assert!(!held.has_room());
        held.released(&big);
        assert!(held.has_room());
    }
}
