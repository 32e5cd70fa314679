//! Producers' partitioners: which partition a record's key bytes go to.
//!
//! [`partition_for_key`] is Kafka's default, the Java client's `Utils.murmur2`
//! and `toPositive(hash) % partitions` (librdkafka's `murmur2_random` for keyed
//! records), so a record keyed by Tributary lands where a Java producer would
//! put it. [`Partitioner`] names the others a topic may have been written with
//! (librdkafka's CRC32 default, FNV-1a as Sarama), for tables that must find a
//! key's partition from its value.

use serde::Deserialize;

/// How a producer picked a keyed record's partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partitioner {
    /// murmur2: Kafka's Java client, Debezium, Kafka Connect, librdkafka's `murmur2_random`.
    #[default]
    Murmur2,
    /// CRC32 of the key: librdkafka's `consistent`.
    Crc32,
    /// librdkafka's default (confluent-kafka for Python, Go, .NET, Node):
    /// CRC32 of the key, random only for records without one.
    ConsistentRandom,
    /// FNV-1a: librdkafka's `fnv1a`, Sarama's (Go) default hash partitioner.
    Fnv1a,
}

impl Partitioner {
    /// Every partitioner, to find one that explains a topic.
    pub const ALL: [Partitioner; 4] = [
        Partitioner::Murmur2,
        Partitioner::Crc32,
        Partitioner::ConsistentRandom,
        Partitioner::Fnv1a,
    ];

    /// The partition this partitioner gives `key` among `partitions`.
    pub fn partition(self, key: &[u8], partitions: u32) -> i32 {
        assert!(partitions > 0, "a topic has at least one partition");
        let hash = match self {
            Partitioner::Murmur2 => return partition_for_key(key, partitions),
            Partitioner::Crc32 | Partitioner::ConsistentRandom => crc32fast::hash(key),
            Partitioner::Fnv1a => fnv1a(key),
        };
        // librdkafka takes the unsigned hash modulo the count (promoted to unsigned).
        (hash % partitions) as i32
    }

    /// The name used in configuration.
    pub fn name(self) -> &'static str {
        match self {
            Partitioner::Murmur2 => "murmur2",
            Partitioner::Crc32 => "crc32",
            Partitioner::ConsistentRandom => "consistent_random",
            Partitioner::Fnv1a => "fnv1a",
        }
    }
}

/// 32-bit FNV-1a as librdkafka computes it to match Sarama: the signed hash's
/// absolute value (`i32::MIN` stays as it is).
fn fnv1a(data: &[u8]) -> u32 {
    let mut h = 0x811c_9dc5_u32 as i32;
    for &b in data {
        h ^= i32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h.wrapping_abs() as u32
}

/// Kafka's 32-bit murmur2 hash (seed `0x9747b28c`).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for `key` among `partitions`.
pub fn partition_for_key(key: &[u8], partitions: u32) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    ((murmur2(key) & 0x7fff_ffff) as u32 % partitions) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values from the Java client's `Utils.murmur2` test
    /// (`org.apache.kafka.common.utils.UtilsTest#testMurmur2`).
    #[test]
    fn matches_the_java_client() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (input, expected) in cases {
            assert_eq!(
                murmur2(input),
                expected,
                "murmur2({:?})",
                String::from_utf8_lossy(input)
            );
        }
    }

    /// Published FNV-1a 32 vectors: a hash that is negative as i32 turns into
    /// its absolute value (librdkafka's Sarama-compatible variant).
    #[test]
    fn fnv1a_follows_librdkafka() {
        assert_eq!(fnv1a(b"1"), 0x340c_a71c, "positive: unchanged");
        assert_eq!(fnv1a(b"ab"), 0x4d25_05ca, "positive: unchanged");
        assert_eq!(fnv1a(b""), 0x811c_9dc5_u32.wrapping_neg());
        assert_eq!(fnv1a(b"foobar"), 0xbf9c_f968_u32.wrapping_neg());
        assert_eq!(
            Partitioner::Fnv1a.partition(b"foobar", 5),
            (0xbf9c_f968_u32.wrapping_neg() % 5) as i32
        );
    }

    #[test]
    fn crc32_partitioners_take_the_unsigned_hash() {
        // crc32("foobar") = 0x9ef61f95, above i32::MAX: no sign handling.
        assert_eq!(crc32fast::hash(b"foobar"), 0x9ef6_1f95);
        assert_eq!(
            Partitioner::Crc32.partition(b"foobar", 7),
            (0x9ef6_1f95_u32 % 7) as i32
        );
        assert_eq!(
            Partitioner::ConsistentRandom.partition(b"foobar", 7),
            Partitioner::Crc32.partition(b"foobar", 7)
        );
    }

    #[test]
    fn partition_is_positive_modulo() {
        for p in 1..50 {
            let part = partition_for_key(b"foobar", p);
            assert!((0..p as i32).contains(&part));
        }
        assert_eq!(
            partition_for_key(b"foobar", 7),
            ((-790332482i32 & 0x7fff_ffff) % 7)
        );
    }
}
