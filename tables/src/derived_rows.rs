//! [`DerivedRows`]: a bounded cache of rows in a form made from their stored
//! bytes (the lookup API's protobuf encoding), kept in front of the store so
//! that a hot row is read and converted once, not on every lookup.
//!
//! A stale entry is never served. Every batch the store commits names its
//! keys to [`DerivedRows::write`], which counts the write to each key's
//! stripe before the commit and again after it; an entry carries the count
//! its reader saw before reading the stored row, and is served only while
//! that count stands ([`DerivedRows::get`] says why that is enough). The
//! entries are of one form: the store has one cache, and the lookup API is
//! its one user.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use foldhash::fast::{FixedState, RandomState};
use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::{Equivalent, Weighter};

/// Bytes of cache per stripe of keys whose writes are counted together: a
/// write to a key stops the entries of its stripe (a handful of rows) from
/// being served.
const BYTES_PER_STRIPE: u64 = 1024;

/// Bytes an entry costs beyond its place and row (the cache's slot, the boxes).
const ENTRY_OVERHEAD: u64 = 64;

/// A row's place: its column family's name and its key, in one allocation
/// (one memory access fewer per lookup than two).
#[derive(Debug, PartialEq, Eq)]
struct Place {
    bytes: Box<[u8]>,
    cf_len: usize,
}

impl Place {
    fn new(cf: &str, key: &[u8]) -> Self {
        Place {
            bytes: [cf.as_bytes(), key].concat().into(),
            cf_len: cf.len(),
        }
    }

    fn as_ref(&self) -> PlaceRef<'_> {
        let (cf, key) = self.bytes.split_at(self.cf_len);
        PlaceRef { cf, key }
    }
}

/// A [`Place`] borrowed, to look one up without allocating; a `Place`
/// hashes as its `PlaceRef`.
#[derive(Hash)]
struct PlaceRef<'a> {
    cf: &'a [u8],
    key: &'a [u8],
}

impl Hash for Place {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_ref().hash(state);
    }
}

impl Equivalent<Place> for PlaceRef<'_> {
    fn equivalent(&self, place: &Place) -> bool {
        let other = place.as_ref();
        self.cf == other.cf && self.key == other.key
    }
}

/// A derived row and the count of writes begun on its key's stripe before
/// its stored row was read.
#[derive(Clone)]
struct Entry {
    row: Bytes,
    begun: u64,
}

/// An entry's cost: its bytes.
#[derive(Clone)]
struct EntryBytes;

impl Weighter<Place, Entry> for EntryBytes {
    fn weight(&self, place: &Place, entry: &Entry) -> u64 {
        (place.bytes.len() + entry.row.len()) as u64 + ENTRY_OVERHEAD
    }
}

/// Writes to a stripe of keys: begun (before their commit) and ended (after).
#[derive(Default)]
struct Stripe {
    begun: AtomicU64,
    ended: AtomicU64,
}

/// A bounded cache of rows in their derived form, by column family and key.
pub struct DerivedRows {
    rows: Cache<Place, Entry, EntryBytes, RandomState>,
    stripes: Box<[Stripe]>,
}

/// What a reader saw before reading a stored row: no write to its key's
/// stripe under way, and how many had begun.
#[derive(Debug, Clone, Copy)]
pub struct ReadStart {
    begun: u64,
}

impl DerivedRows {
    /// A cache of at most `capacity_bytes` (keys, rows and overhead).
    pub fn new(capacity_bytes: u64) -> Self {
        // The cache sizes its tables from this guess: rows of ~256 bytes.
        let estimated_rows = (capacity_bytes / 256).max(16) as usize;
        let stripes = (capacity_bytes / BYTES_PER_STRIPE).clamp(64, 1 << 20);
        DerivedRows {
            rows: Cache::with(
                estimated_rows,
                capacity_bytes,
                EntryBytes,
                RandomState::default(),
                DefaultLifecycle::default(),
            ),
            stripes: (0..stripes).map(|_| Stripe::default()).collect(),
        }
    }

    /// The derived row of `key` in `cf`, if cached and no write to its
    /// key's stripe has begun since its stored row was read.
    ///
    /// Why a served row is never older than the stored one: a row is served
    /// only while the count of writes begun on its stripe is the one seen
    /// before its stored row was read, with no write under way then
    /// ([`start`](Self::start)). So no write to the key was committed
    /// between that read and this lookup: writers count before committing.
    /// A reader that has seen a newer row (read after a commit) sees that
    /// commit's count here, so it never goes back to an older row either.
    pub fn get(&self, cf: &str, key: &[u8]) -> Option<Bytes> {
        let entry = self.rows.get(&PlaceRef {
            cf: cf.as_bytes(),
            key,
        })?;
        let stripe = &self.stripes[self.stripe_of(key)];
        (stripe.begun.load(Ordering::SeqCst) == entry.begun).then_some(entry.row)
    }

    /// Called before reading `key`'s stored row, to [`keep`](Self::keep) what
    /// is made from it; `None` while a write to the key's stripe is under way
    /// (what is read then is not kept).
    pub fn start(&self, key: &[u8]) -> Option<ReadStart> {
        let stripe = &self.stripes[self.stripe_of(key)];
        // `ended` first: if `begun` then equals it, no write was under way
        // when `begun` was read (ended never passes begun).
        let ended = stripe.ended.load(Ordering::SeqCst);
        let begun = stripe.begun.load(Ordering::SeqCst);
        (begun == ended).then_some(ReadStart { begun })
    }

    /// Caches a copy of `row`, made from `key`'s stored row read after
    /// `start`. The copy is of the row's exact size, so that the entry's
    /// weight is the memory it holds (a row made in a larger buffer would
    /// keep all of it).
    pub fn keep(&self, cf: &str, key: &[u8], start: ReadStart, row: &[u8]) {
        self.rows.insert(
            Place::new(cf, key),
            Entry {
                row: Bytes::copy_from_slice(row),
                begun: start.begun,
            },
        );
    }

    /// Commits a write of `written` keys (by `commit`), counting it on their
    /// stripes before and after, then drops their entries.
    pub fn write<'a, R>(
        &self,
        written: impl IntoIterator<Item = (&'a str, &'a [u8])> + Clone,
        commit: impl FnOnce() -> R,
    ) -> R {
        for (_, key) in written.clone() {
            self.stripes[self.stripe_of(key)]
                .begun
                .fetch_add(1, Ordering::SeqCst);
        }
        let committed = commit();
        for (cf, key) in written {
            self.stripes[self.stripe_of(key)]
                .ended
                .fetch_add(1, Ordering::SeqCst);
            self.rows.remove(&PlaceRef {
                cf: cf.as_bytes(),
                key,
            });
        }
        committed
    }

    /// Drops every entry (a table's keyspaces are being dropped, by `drop`).
    pub fn clear<R>(&self, drop: impl FnOnce() -> R) -> R {
        for stripe in self.stripes.iter() {
            stripe.begun.fetch_add(1, Ordering::SeqCst);
        }
        let dropped = drop();
        for stripe in self.stripes.iter() {
            stripe.ended.fetch_add(1, Ordering::SeqCst);
        }
        self.rows.clear();
        dropped
    }

    /// Bytes held (keys, rows and overhead).
    pub fn bytes(&self) -> u64 {
        self.rows.weight()
    }

    fn stripe_of(&self, key: &[u8]) -> usize {
        (FixedState::default().hash_one(key) % self.stripes.len() as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn row(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    fn keep(cache: &DerivedRows, key: &[u8], value: Bytes) {
        let start = cache.start(key).expect("no write under way");
        cache.keep("t-0", key, start, &value);
    }

    #[test]
    fn rows_are_found_by_column_family_and_key_until_written() {
        let cache = DerivedRows::new(1 << 20);
        keep(&cache, b"k", row("one"));
        assert_eq!(cache.get("t-0", b"k"), Some(row("one")));
        assert_eq!(cache.get("t-1", b"k"), None, "another column family");
        assert_eq!(cache.get("t-0", b"k2"), None);
        let committed = cache.write([("t-0", &b"k"[..])], || "committed");
        assert_eq!(committed, "committed");
        assert_eq!(cache.get("t-0", b"k"), None);
        keep(&cache, b"k", row("two"));
        assert_eq!(cache.get("t-0", b"k"), Some(row("two")));
        cache.clear(|| ());
        assert_eq!(cache.get("t-0", b"k"), None);
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn a_row_read_before_or_during_a_write_is_never_served() {
        let cache = DerivedRows::new(1 << 20);
        // Read before the write began, kept after it was committed.
        let before = cache.start(b"k").unwrap();
        cache.write([("t-0", &b"k"[..])], || ());
        cache.keep("t-0", b"k", before, &row("old"));
        assert_eq!(cache.get("t-0", b"k"), None);
        // Read before the write began, kept while it commits.
        let before = cache.start(b"k").unwrap();
        cache.write([("t-0", &b"k"[..])], || {
            assert!(cache.start(b"k").is_none(), "a write is under way");
            cache.keep("t-0", b"k", before, &row("old"));
            assert_eq!(cache.get("t-0", b"k"), None, "the write has begun");
        });
        assert_eq!(cache.get("t-0", b"k"), None);
    }

    #[test]
    fn the_cache_holds_at_most_its_capacity() {
        let cache = DerivedRows::new(64 << 10);
        for i in 0..10_000u32 {
            keep(&cache, &i.to_be_bytes(), row(&"x".repeat(100)));
        }
        assert!(cache.bytes() <= 64 << 10, "{} bytes", cache.bytes());
        assert!(
            cache.bytes() > 32 << 10,
            "{} bytes: it fills",
            cache.bytes()
        );
    }

    /// Readers race a writer as the store's lookups do: look up, else read
    /// the "stored" value, keep what was read. No reader ever sees a value
    /// older than one it saw before, nor older than the last committed
    /// before it looked.
    #[test]
    fn readers_racing_a_writer_never_see_a_replaced_row() {
        let cache = Arc::new(DerivedRows::new(1 << 20));
        let stored = Arc::new(AtomicU64::new(0));
        let read = |cache: &DerivedRows, stored: &AtomicU64| -> u64 {
            if let Some(hit) = cache.get("t-0", b"k") {
                return u64::from_be_bytes(hit[..].try_into().unwrap());
            }
            let start = cache.start(b"k");
            let value = stored.load(Ordering::SeqCst);
            std::thread::yield_now();
            if let Some(start) = start {
                let row = Bytes::copy_from_slice(&value.to_be_bytes());
                cache.keep("t-0", b"k", start, &row);
            }
            value
        };
        const LAST: u64 = 20_000;
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (cache, stored) = (cache.clone(), stored.clone());
                std::thread::spawn(move || {
                    let mut seen = 0;
                    while seen < LAST {
                        let committed = stored.load(Ordering::SeqCst);
                        let value = read(&cache, &stored);
                        assert!(value >= seen, "saw {value} after {seen}");
                        assert!(
                            value >= committed,
                            "saw {value} after {committed} was committed"
                        );
                        seen = value;
                    }
                })
            })
            .collect();
        for value in 1..=LAST {
            cache.write([("t-0", &b"k"[..])], || {
                stored.store(value, Ordering::SeqCst)
            });
        }
        for reader in readers {
            reader.join().unwrap();
        }
        assert_eq!(read(&cache, &stored), LAST);
    }
}
