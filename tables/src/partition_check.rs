//! Whether a topic's records sit where a partitioned table's partitioner puts
//! them: a lookup computes a key's partition from its values, so a topic
//! written with another partitioner or key format would make lookups miss.
//! And whether its records have keys at all: a table captured without a key
//! (no primary key, as Debezium does) cannot be a local table.
//!
//! Checked on a sample (the first records of every partition) before a table
//! starts and by `tributary validate --connect`; the materializer checks every
//! record it applies as well. A disagreeing sample fails with the settings that
//! would fit, or `mode: global` when none does.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::{Message, Offset, TopicPartitionList};
use tributary_config::ConfigError;
use tributary_kafka::BaseConsumer;
use tributary_proto::partition::Partitioner;

use crate::config::{KeyFormat, LocalTableConfig, TableMode, TablesConfig};
use crate::error::TableError;
use crate::local_table::Partitioning;
use crate::record_key::{self, RecordKey};

/// Records read from the start of each partition of a partitioned table.
pub const SAMPLE_PER_PARTITION: usize = 200;
/// Records read from the start of each partition of a global table (for keys only).
const KEY_SAMPLE_PER_PARTITION: usize = 20;
/// Longest time a sample of one topic may take.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A sample ends once no record has come for this long after the first (the
/// end of the topic: its reported end cannot be trusted on every broker, see
/// STACK.md); fetches wait at most a tenth of it.
const SAMPLE_IDLE: Duration = Duration::from_millis(500);
/// Longest wait for the first record of a topic that has some.
const FIRST_RECORD_TIMEOUT: Duration = Duration::from_secs(10);

/// A record of the sample.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its key, parsed; `None` for a record without a key.
    pub key: Option<RecordKey>,
}

/// The partition `partitioning` gives a record key among `partitions`.
pub fn expected_partition(partitioning: Partitioning, key: &RecordKey, partitions: u32) -> i32 {
    partitioning.partition(&key.shape, &key.values, partitions)
}

/// What a sample says about a table: `Ok(records checked)`, or the first
/// record without a key, or (partitioned tables) the first misplaced record
/// and the settings (or mode) that would fit.
pub fn judge(
    config: &LocalTableConfig,
    partitions: u32,
    sample: &[Sampled],
) -> Result<usize, TableError> {
    if let Some(keyless) = sample.iter().find(|s| s.key.is_none()) {
        return Err(TableError::Partitioning {
            table: config.name.clone(),
            problem: format!(
                "topic {} partition {} offset {}: a record without a key (a table without a \
                 primary key, captured with a null key as Debezium does): a local table needs \
                 keyed records; give the table key columns with capture's message_key_columns, \
                 or read it as a remote table",
                config.topic, keyless.partition, keyless.offset
            ),
        });
    }
    if config.mode == TableMode::Global {
        return Ok(sample.len());
    }
    let keyed: Vec<(&Sampled, &RecordKey)> = sample
        .iter()
        .filter_map(|s| s.key.as_ref().map(|k| (s, k)))
        .collect();
    let configured = Partitioning::of(config);
    let fits = |p: Partitioning| {
        keyed
            .iter()
            .all(|(s, key)| expected_partition(p, key, partitions) == s.partition)
    };
    let Some(&(wrong, wrong_key)) = keyed
        .iter()
        .find(|(s, key)| expected_partition(configured, key, partitions) != s.partition)
    else {
        return Ok(sample.len());
    };
    let candidates: Vec<String> = Partitioner::ALL
        .iter()
        .flat_map(|&partitioner| {
            KeyFormat::ALL.iter().map(move |&format| Partitioning {
                partitioner,
                format,
            })
        })
        .filter(|&p| fits(p))
        .map(|p| format!("`{}`", p.describe()))
        .collect();
    let advice = if candidates.is_empty() {
        "no partitioner and key format explain the topic: declare the table `mode: global` \
         (it finds every key whatever its partition)"
            .to_owned()
    } else {
        format!(
            "the sample fits {}; or declare the table `mode: global`",
            candidates.join(" or ")
        )
    };
    let key_text =
        String::from_utf8_lossy(&wrong_key.shape.bytes(&wrong_key.values, configured.format))
            .into_owned();
    Err(TableError::Partitioning {
        table: config.name.clone(),
        problem: format!(
            "topic {} partition {} offset {}: key {key_text} is on partition {}, but `{}` \
             gives partition {} (of {partitions}): lookups would miss rows; {advice}",
            config.topic,
            wrong.partition,
            wrong.offset,
            wrong.partition,
            configured.describe(),
            expected_partition(configured, wrong_key, partitions),
        ),
    })
}

/// Reads up to `per_partition` records from the start of every partition of
/// `topic` (fewer if a partition holds fewer, or after [`SAMPLE_TIMEOUT`]) and
/// returns those with a key or without one (a malformed key is the
/// materializer's to count: it says nothing about the topic).
pub fn sample(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: u32,
    per_partition: usize,
) -> Result<Vec<Sampled>, TableError> {
    let mut wanted: BTreeMap<i32, usize> = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions as i32 {
        let (low, high) = consumer.fetch_watermarks(topic, partition, Duration::from_secs(10))?;
        if high > low {
            wanted.insert(partition, per_partition);
            assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
        }
    }
    consumer.assign(&assignment)?;
    let started = Instant::now();
    let mut last_record: Option<Instant> = None;
    let mut sampled = Vec::new();
    while !wanted.is_empty() && started.elapsed() < SAMPLE_TIMEOUT {
        let idle = match last_record {
            Some(at) => at.elapsed() >= SAMPLE_IDLE,
            None => started.elapsed() >= FIRST_RECORD_TIMEOUT,
        };
        if idle {
            break;
        }
        let Some(msg) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let msg = msg?;
        last_record = Some(Instant::now());
        let Some(left) = wanted.get_mut(&msg.partition()) else {
            continue;
        };
        *left -= 1;
        if *left == 0 {
            wanted.remove(&msg.partition());
        }
        let key = match msg.key().map(record_key::parse) {
            None => None,
            Some(Ok(key)) => Some(key),
            Some(Err(_)) => continue,
        };
        sampled.push(Sampled {
            partition: msg.partition(),
            offset: msg.offset(),
            key,
        });
    }
    consumer.unassign()?;
    Ok(sampled)
}

/// Samples the topic of every table of `config` and judges it; returns one
/// line per table checked. `counts` gives partition counts by topic.
pub fn check_tables(
    config: &TablesConfig,
    counts: &std::collections::HashMap<String, u32>,
) -> Result<Vec<String>, TableError> {
    let consumer: BaseConsumer = config
        .kafka
        .consumer("tables", &format!("{}.check", config.group_id))
        .set("enable.auto.commit", "false")
        .set(
            "fetch.wait.max.ms",
            (SAMPLE_IDLE.as_millis() / 10).to_string(),
        )
        .create()?;
    let mut lines = Vec::new();
    for table in &config.tables {
        let partitions = counts[&table.topic];
        let per_partition = match table.mode {
            TableMode::Partitioned => SAMPLE_PER_PARTITION,
            TableMode::Global => KEY_SAMPLE_PER_PARTITION,
        };
        let sample = sample(&consumer, &table.topic, partitions, per_partition)?;
        let checked = judge(table, partitions, &sample)?;
        lines.push(match table.mode {
            TableMode::Partitioned => format!(
                "table {}: {checked} records of {} agree with `{}`",
                table.name,
                table.topic,
                Partitioning::of(table).describe()
            ),
            TableMode::Global => format!(
                "table {}: {checked} records of {} have keys",
                table.name, table.topic
            ),
        });
    }
    Ok(lines)
}

/// [`check_tables`] after reading the topics' partition counts, for
/// `tributary validate --connect`: a topic that does not exist is an error naming it.
pub fn check_config(config: &TablesConfig) -> Result<Vec<String>, TableError> {
    let consumer: BaseConsumer = config
        .kafka
        .consumer("tables", &format!("{}.check", config.group_id))
        .create()?;
    let mut counts = std::collections::HashMap::new();
    for (i, table) in config.tables.iter().enumerate() {
        let metadata =
            consumer.fetch_metadata(Some(&table.topic), config.kafka.connect_timeout())?;
        let partitions = metadata
            .topics()
            .first()
            .map_or(0, |t| t.partitions().len());
        if partitions == 0 {
            return Err(TableError::Config(ConfigError::new(
                format!("tables[{i}].topic"),
                format!("topic {:?} does not exist", table.topic),
            )));
        }
        counts.insert(table.topic.clone(), partitions as u32);
    }
    check_tables(config, &counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(partitioner: Option<Partitioner>, key_format: Option<KeyFormat>) -> LocalTableConfig {
        LocalTableConfig {
            name: "users".into(),
            topic: "shop.users".into(),
            mode: TableMode::Partitioned,
            partitioner,
            key_format,
            fill_unavailable_values: false,
            versioned: None,
            key: None,
        }
    }

    /// Records keyed as a Python producer writes them, on librdkafka's default partition.
    fn python_sample(partitions: u32) -> Vec<Sampled> {
        (0..50)
            .map(|id| {
                let raw = format!("{{\"id\": {id}}}");
                Sampled {
                    partition: Partitioner::ConsistentRandom.partition(raw.as_bytes(), partitions),
                    offset: id,
                    key: Some(record_key::parse(raw.as_bytes()).unwrap()),
                }
            })
            .collect()
    }

    #[test]
    fn a_sample_from_another_partitioner_is_refused_with_the_settings_that_fit() {
        let sample = python_sample(3);
        let err = judge(&table(None, None), 3, &sample)
            .unwrap_err()
            .to_string();
        assert!(err.contains("topic shop.users partition"), "{err}");
        assert!(err.contains("lookups would miss rows"), "{err}");
        assert!(
            err.contains("`partitioner: crc32, key_format: json_spaced`"),
            "{err}"
        );
        assert!(
            err.contains("`partitioner: consistent_random, key_format: json_spaced`"),
            "{err}"
        );
        let fits = err.split("the sample fits").nth(1).unwrap();
        assert!(!fits.contains("murmur2"), "{err}");
        let fixed = table(
            Some(Partitioner::ConsistentRandom),
            Some(KeyFormat::JsonSpaced),
        );
        assert_eq!(judge(&fixed, 3, &sample).unwrap(), 50);
    }

    #[test]
    fn a_topic_no_partitioner_explains_is_told_to_go_global() {
        let mut sample = python_sample(3);
        for s in &mut sample {
            s.partition = (s.offset % 3) as i32; // round robin
        }
        let err = judge(&table(None, None), 3, &sample)
            .unwrap_err()
            .to_string();
        assert!(err.contains("declare the table `mode: global`"), "{err}");
        assert!(err.contains("no partitioner"), "{err}");
        assert_eq!(judge(&table(None, None), 3, &[]).unwrap(), 0, "empty topic");
    }

    #[test]
    fn records_without_keys_are_refused_in_either_mode() {
        let mut sample = python_sample(3);
        sample[7].key = None;
        let mut global = table(None, None);
        global.mode = TableMode::Global;
        for config in [table(None, None), global] {
            let err = judge(&config, 3, &sample).unwrap_err().to_string();
            assert!(err.contains("offset 7: a record without a key"), "{err}");
            assert!(err.contains("topic shop.users"), "{err}");
            assert!(err.contains("message_key_columns"), "{err}");
        }
    }
}
