//! A change event's Kafka record: its key (the primary key in Debezium
//! JSON; none for a table without one) and its value (the envelope). The
//! encoding depends on the event and capture's options only, so it can be
//! done on the task that reads the stream ahead of the writer, instead of
//! by the writer, which the rest of capture waits for.

use tributary_proto::ChangeEvent;
use tributary_proto::debezium_json::{EnvelopeOptions, encode_key, encode_value};

/// A change event's record, encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedRecord {
    /// The key; `None` for a table without a primary key.
    pub key: Option<Vec<u8>>,
    /// The value: the Debezium envelope.
    pub value: Vec<u8>,
}

impl EncodedRecord {
    /// The bytes it holds.
    pub(crate) fn bytes(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len) + self.value.len()
    }
}

/// Encodes change events as capture writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordEncoder {
    options: EnvelopeOptions,
}

impl RecordEncoder {
    /// An encoder writing envelopes with `options`.
    pub fn new(options: EnvelopeOptions) -> Self {
        RecordEncoder { options }
    }

    /// `event`'s record.
    pub fn encode(&self, event: &ChangeEvent) -> EncodedRecord {
        let keyed = !event.key.values.is_empty();
        EncodedRecord {
            key: keyed.then(|| encode_key(event, self.options.doubles)),
            value: encode_value(event, self.options),
        }
    }
}
