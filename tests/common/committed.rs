//! A topic as a `read_committed` consumer of a fully transactional broker sees
//! it, worked out from the raw record batches: librdkafka hides transaction
//! markers, and the test broker (Tansu) returns aborted records to every reader.
//!
//! The partition is fetched over the Kafka protocol (`kafka-protocol` crate)
//! with `read_uncommitted`, so every batch comes back with its producer id, its
//! transactional flag and the control batches (COMMIT / ABORT markers). A
//! transactional record counts once a COMMIT marker of its producer follows it;
//! an ABORT marker drops it; a transaction with no marker yet is open.

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Buf as _, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable as _, Encodable as _, HeaderVersion as _, StrBytes};
use kafka_protocol::records::{Record as RawBatchRecord, RecordBatchDecoder};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Fetch v4: topic names, isolation level, record batches v2.
const FETCH_VERSION: i16 = 4;
/// Control record types (the key's second i16).
const ABORT: i16 = 0;
const COMMIT: i16 = 1;

/// One record of a partition, with its transaction's outcome.
#[derive(Debug, Clone)]
pub struct LoggedRecord {
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// A partition split by transaction outcome.
#[derive(Debug, Default)]
pub struct Partition {
    /// What a read_committed consumer reads, in offset order.
    pub committed: Vec<LoggedRecord>,
    /// Records of aborted transactions.
    pub aborted: Vec<LoggedRecord>,
}

/// Reads partition `partition` of `topic` on the broker at `broker` (`host:port`)
/// from the start to its high watermark.
pub async fn read_partition(broker: &str, topic: &str, partition: i32) -> Partition {
    let mut conn = TcpStream::connect(broker).await.expect("broker reachable");
    let mut out = Partition::default();
    // Records of transactions not yet ended, per producer id.
    let mut ongoing: HashMap<i64, Vec<LoggedRecord>> = HashMap::new();
    let (mut offset, mut idle) = (0, 0);
    for correlation_id in 1.. {
        let (high_watermark, records) =
            fetch(&mut conn, correlation_id, topic, partition, offset).await;
        let before = offset;
        for record in records.into_iter().filter(|r| r.offset >= before) {
            offset = record.offset + 1;
            classify(record, &mut ongoing, &mut out);
        }
        if offset >= high_watermark {
            break;
        }
        idle = if offset == before { idle + 1 } else { 0 };
        assert!(
            idle < 50,
            "{topic}/{partition}: no records at {offset}, below the high watermark {high_watermark}"
        );
    }
    // What `ongoing` still holds belongs to transactions with no marker yet: not committed.
    out.committed.sort_by_key(|r| r.offset);
    out
}

fn classify(
    record: RawBatchRecord,
    ongoing: &mut HashMap<i64, Vec<LoggedRecord>>,
    out: &mut Partition,
) {
    if record.control {
        let mut key = record.key.expect("a control record has a key");
        let (_version, kind) = (key.get_i16(), key.get_i16());
        let ended = ongoing.remove(&record.producer_id).unwrap_or_default();
        match kind {
            COMMIT => out.committed.extend(ended),
            ABORT => out.aborted.extend(ended),
            other => panic!("control record of unknown type {other}"),
        }
        return;
    }
    let logged = LoggedRecord {
        offset: record.offset,
        key: record.key.map(|k| k.to_vec()),
        value: record.value.map(|v| v.to_vec()),
    };
    if record.transactional {
        ongoing.entry(record.producer_id).or_default().push(logged);
    } else {
        out.committed.push(logged);
    }
}

/// One fetch from `offset`: the partition's high watermark and the records returned.
async fn fetch(
    conn: &mut TcpStream,
    correlation_id: i32,
    topic: &str,
    partition: i32,
    offset: i64,
) -> (i64, Vec<RawBatchRecord>) {
    let request = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(100)
        .with_min_bytes(1)
        .with_max_bytes(64 << 20)
        .with_isolation_level(0)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(64 << 20),
                ]),
        ]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(FETCH_VERSION)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("tributary-tests")));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, FetchRequest::header_version(FETCH_VERSION))
        .unwrap();
    request.encode(&mut body, FETCH_VERSION).unwrap();
    conn.write_all(&(body.len() as i32).to_be_bytes())
        .await
        .unwrap();
    conn.write_all(&body).await.unwrap();
    let size = tokio::time::timeout(Duration::from_secs(30), conn.read_i32())
        .await
        .expect("a fetch response")
        .unwrap();
    let mut response = vec![0; size as usize];
    conn.read_exact(&mut response).await.unwrap();
    let mut response = bytes::Bytes::from(response);
    let header =
        ResponseHeader::decode(&mut response, FetchResponse::header_version(FETCH_VERSION))
            .unwrap();
    assert_eq!(header.correlation_id, correlation_id);
    let response = FetchResponse::decode(&mut response, FETCH_VERSION).unwrap();
    let data = response
        .responses
        .into_iter()
        .flat_map(|t| t.partitions)
        .find(|p| p.partition_index == partition)
        .expect("the partition in the response");
    assert_eq!(data.error_code, 0, "fetch {topic}/{partition} at {offset}");
    let mut records = data.records.unwrap_or_default();
    let mut out = Vec::new();
    while records.has_remaining() {
        out.extend(RecordBatchDecoder::decode(&mut records).unwrap().records);
    }
    (data.high_watermark, out)
}

/// What a read_committed consumer reads of `topic` (`partitions` of them) on
/// the stack's broker, in offset order per partition, and how many records
/// aborted transactions hold.
pub async fn read_topic(topic: &str, partitions: i32) -> (Vec<super::RawRecord>, usize) {
    let broker = super::brokers();
    let broker = broker.split(',').next().unwrap().to_owned();
    let (mut committed, mut aborted) = (Vec::new(), 0);
    for partition in 0..partitions {
        let p = read_partition(&broker, topic, partition).await;
        aborted += p.aborted.len();
        committed.extend(p.committed.into_iter().map(|r| super::RawRecord {
            partition,
            offset: r.offset,
            key: r.key,
            value: r.value,
            headers: Default::default(),
        }));
    }
    (committed, aborted)
}
