//! Kafka's default partitioner: murmur2 over the key bytes.
//!
//! This is the Java client's `Utils.murmur2` and `toPositive(hash) % partitions`
//! (librdkafka's `murmur2_random` for keyed records), so a record keyed by
//! Tributary lands where a Java producer would put it.

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
