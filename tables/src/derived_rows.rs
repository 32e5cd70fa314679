//! [`DerivedRows`]: bounded caches of rows in forms made from their stored
//! bytes, kept in front of the store so that a hot row is read and converted
//! once, not on every lookup. Two forms are kept, each within its own bytes:
//! the lookup API's protobuf encoding ([`DerivedRows::encoded`]), and rows
//! as jobs' joins read them ([`DerivedRows::joined`]): whole (a JSON value),
//! or the columns a join selects (their JSON text), each such choice a
//! numbered view of the row.
//!
//! A stale entry is never served. Every batch the store commits names its
//! keys to [`DerivedRows::write`], which counts the write to each key's
//! stripe before the commit and again after it; an entry carries the count
//! its reader saw before reading the stored row, and is served only while
//! that count stands ([`Rows::get`] says why that is enough). Both forms
//! share the counts: one write stops both from serving the key's stripe.

use std::hash::{BuildHasher, Hash};
use std::mem::size_of;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use foldhash::fast::{FixedState, RandomState};
use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::{Equivalent, Weighter};
use serde_json::Value;
use tributary_table_api::{Columns, RawColumns};

/// Bytes of cache per stripe of keys whose writes are counted together: a
/// write to a key stops the entries of its stripe (a handful of rows) from
/// being served.
const BYTES_PER_STRIPE: u64 = 1024;

/// Bytes an entry costs beyond its place and row (the cache's slot, the boxes).
const ENTRY_OVERHEAD: u64 = 64;

/// A row's place: its view, its column family's name and its key, in one
/// allocation (one memory access fewer per lookup than two).
#[derive(Debug, PartialEq, Eq)]
struct Place {
    view: u32,
    bytes: Box<[u8]>,
    cf_len: usize,
}

impl Place {
    fn new(place: PlaceRef<'_>) -> Self {
        Place {
            view: place.view,
            bytes: [place.cf, place.key].concat().into(),
            cf_len: place.cf.len(),
        }
    }

    fn as_ref(&self) -> PlaceRef<'_> {
        let (cf, key) = self.bytes.split_at(self.cf_len);
        PlaceRef {
            view: self.view,
            cf,
            key,
        }
    }
}

/// A [`Place`] borrowed, to look one up without allocating; a `Place`
/// hashes as its `PlaceRef`.
#[derive(Hash, Clone, Copy)]
struct PlaceRef<'a> {
    view: u32,
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
        self.view == other.view && self.cf == other.cf && self.key == other.key
    }
}

/// A form rows are kept in: what one costs in memory.
pub trait Form: Clone + Send + Sync + 'static {
    /// Bytes the row holds (its own and those it points to).
    fn bytes(&self) -> u64;
}

impl Form for Bytes {
    fn bytes(&self) -> u64 {
        self.len() as u64
    }
}

impl Form for Arc<Value> {
    fn bytes(&self) -> u64 {
        // The Arc's two counts, then the tree.
        2 * size_of::<usize>() as u64 + value_bytes(self)
    }
}

impl Form for Columns {
    fn bytes(&self) -> u64 {
        match self {
            Columns::Raw(columns) => {
                (2 * size_of::<usize>() + size_of::<RawColumns>()) as u64 + columns.heap_bytes()
            }
            Columns::Shared(row) => row.bytes(),
        }
    }
}

/// Bytes a JSON tree holds: its nodes, strings and object entries (an
/// estimate within the allocator's rounding).
fn value_bytes(value: &Value) -> u64 {
    let nested = match value {
        Value::String(text) => text.capacity() as u64,
        Value::Array(items) => items.iter().map(value_bytes).sum(),
        // Each entry: its name, its hash and its slot in the index.
        Value::Object(columns) => columns
            .iter()
            .map(|(name, v)| {
                (size_of::<String>() + 2 * size_of::<u64>() + name.capacity()) as u64
                    + value_bytes(v)
            })
            .sum(),
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    };
    size_of::<Value>() as u64 + nested
}

/// A kept row, its cost, and the count of writes begun on its key's stripe
/// before its stored row was read.
#[derive(Clone)]
struct Entry<R> {
    row: R,
    bytes: u64,
    begun: u64,
}

/// An entry's cost: its bytes.
#[derive(Clone)]
struct EntryBytes;

impl<R> Weighter<Place, Entry<R>> for EntryBytes {
    fn weight(&self, place: &Place, entry: &Entry<R>) -> u64 {
        place.bytes.len() as u64 + entry.bytes + ENTRY_OVERHEAD
    }
}

/// Rows of one form, by view, column family and key.
type Kept<R> = Cache<Place, Entry<R>, EntryBytes, RandomState>;

fn kept<R: Form>(capacity_bytes: u64) -> Option<Kept<R>> {
    (capacity_bytes > 0).then(|| {
        // The cache sizes its tables (and how many keys it remembers after
        // evicting their rows) from this guess: rows of ~256 bytes.
        let estimated_rows = (capacity_bytes / 256).max(16) as usize;
        Cache::with(
            estimated_rows,
            capacity_bytes,
            EntryBytes,
            RandomState::default(),
            DefaultLifecycle::default(),
        )
    })
}

/// Writes to a stripe of keys: begun (before their commit) and ended (after).
#[derive(Default)]
struct Stripe {
    begun: AtomicU64,
    ended: AtomicU64,
}

/// Bounded caches of rows in their derived forms, and the counts of writes
/// that keep them from serving a replaced row.
pub struct DerivedRows {
    encoded: Option<Kept<Bytes>>,
    joined: Option<Kept<Columns>>,
    stripes: Box<[Stripe]>,
}

/// What a reader saw before reading a stored row: no write to its key's
/// stripe under way, and how many had begun.
#[derive(Debug, Clone, Copy)]
pub struct ReadStart {
    begun: u64,
}

/// One view of the rows of one form: where to look them up and keep them.
pub struct Rows<'a, R> {
    kept: &'a Kept<R>,
    view: u32,
    stripes: &'a [Stripe],
}

impl DerivedRows {
    /// Caches of at most `encoded_bytes` of encoded rows and `joined_bytes`
    /// of rows for joins (keys, rows and overhead; 0 keeps none of that form);
    /// `None` when neither form is kept.
    pub fn new(encoded_bytes: u64, joined_bytes: u64) -> Option<Self> {
        let total = encoded_bytes + joined_bytes;
        (total > 0).then(|| {
            let stripes = (total / BYTES_PER_STRIPE).clamp(64, 1 << 20);
            DerivedRows {
                encoded: kept(encoded_bytes),
                joined: kept(joined_bytes),
                stripes: (0..stripes).map(|_| Stripe::default()).collect(),
            }
        })
    }

    /// The rows kept in the lookup API's encoding, if that form is kept.
    pub fn encoded(&self) -> Option<Rows<'_, Bytes>> {
        self.rows(self.encoded.as_ref(), 0)
    }

    /// The rows kept for joins in `view` (a caller's numbering of what it
    /// makes of a row, such as the columns a join selects), if that form is
    /// kept.
    pub fn joined(&self, view: u32) -> Option<Rows<'_, Columns>> {
        self.rows(self.joined.as_ref(), view)
    }

    fn rows<'a, R>(&'a self, kept: Option<&'a Kept<R>>, view: u32) -> Option<Rows<'a, R>> {
        kept.map(|kept| Rows {
            kept,
            view,
            stripes: &self.stripes,
        })
    }

    /// Commits a write of `written` keys (by `commit`), counting it on their
    /// stripes before and after, then drops their encoded entries. Their
    /// entries for joins (one per view, which this cache does not list) are
    /// left to be replaced or evicted: none is served again.
    pub fn write<'a, R>(
        &self,
        written: impl IntoIterator<Item = (&'a str, &'a [u8])> + Clone,
        commit: impl FnOnce() -> R,
    ) -> R {
        for (_, key) in written.clone() {
            stripe(&self.stripes, key)
                .begun
                .fetch_add(1, Ordering::SeqCst);
        }
        let committed = commit();
        for (cf, key) in written {
            stripe(&self.stripes, key)
                .ended
                .fetch_add(1, Ordering::SeqCst);
            if let Some(encoded) = &self.encoded {
                encoded.remove(&PlaceRef {
                    view: 0,
                    cf: cf.as_bytes(),
                    key,
                });
            }
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
        if let Some(encoded) = &self.encoded {
            encoded.clear();
        }
        if let Some(joined) = &self.joined {
            joined.clear();
        }
        dropped
    }

    /// Bytes held (keys, rows and overhead) in both forms.
    pub fn bytes(&self) -> u64 {
        self.encoded.as_ref().map_or(0, Cache::weight)
            + self.joined.as_ref().map_or(0, Cache::weight)
    }
}

/// The stripe whose counts stand for `key`'s writes.
fn stripe<'a>(stripes: &'a [Stripe], key: &[u8]) -> &'a Stripe {
    &stripes[(FixedState::default().hash_one(key) % stripes.len() as u64) as usize]
}

impl<R: Form> Rows<'_, R> {
    fn place<'k>(&self, cf: &'k str, key: &'k [u8]) -> PlaceRef<'k> {
        PlaceRef {
            view: self.view,
            cf: cf.as_bytes(),
            key,
        }
    }

    /// The row of `key` in `cf`, if kept and no write to its key's stripe
    /// has begun since its stored row was read.
    ///
    /// Why a served row is never older than the stored one: a row is served
    /// only while the count of writes begun on its stripe is the one seen
    /// before its stored row was read, with no write under way then
    /// ([`start`](Self::start)). So no write to the key was committed
    /// between that read and this lookup: writers count before committing.
    /// A reader that has seen a newer row (read after a commit) sees that
    /// commit's count here, so it never goes back to an older row either.
    pub fn get(&self, cf: &str, key: &[u8]) -> Option<R> {
        let entry = self.kept.get(&self.place(cf, key))?;
        let begun = stripe(self.stripes, key).begun.load(Ordering::SeqCst);
        (begun == entry.begun).then_some(entry.row)
    }

    /// Called before reading `key`'s stored row, to [`keep`](Self::keep) what
    /// is made from it; `None` while a write to the key's stripe is under way
    /// (what is read then is not kept).
    pub fn start(&self, key: &[u8]) -> Option<ReadStart> {
        let stripe = stripe(self.stripes, key);
        // `ended` first: if `begun` then equals it, no write was under way
        // when `begun` was read (ended never passes begun).
        let ended = stripe.ended.load(Ordering::SeqCst);
        let begun = stripe.begun.load(Ordering::SeqCst);
        (begun == ended).then_some(ReadStart { begun })
    }

    /// Keeps `row`, made from `key`'s stored row read after `start`. Its
    /// cost is counted from the row itself: a row made in a larger buffer
    /// should be copied to its exact size first.
    pub fn keep(&self, cf: &str, key: &[u8], start: ReadStart, row: R) {
        let bytes = row.bytes();
        self.kept.insert(
            Place::new(self.place(cf, key)),
            Entry {
                row,
                bytes,
                begun: start.begun,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    fn keep<R: Form>(rows: &Rows<'_, R>, key: &[u8], value: R) {
        let start = rows.start(key).expect("no write under way");
        rows.keep("t-0", key, start, value);
    }

    #[test]
    fn rows_are_found_by_column_family_and_key_until_written() {
        let cache = DerivedRows::new(1 << 20, 0).unwrap();
        assert!(cache.joined(0).is_none(), "no joined rows kept");
        let rows = cache.encoded().unwrap();
        keep(&rows, b"k", row("one"));
        assert_eq!(rows.get("t-0", b"k"), Some(row("one")));
        assert_eq!(rows.get("t-1", b"k"), None, "another column family");
        assert_eq!(rows.get("t-0", b"k2"), None);
        let committed = cache.write([("t-0", &b"k"[..])], || "committed");
        assert_eq!(committed, "committed");
        assert_eq!(rows.get("t-0", b"k"), None);
        keep(&rows, b"k", row("two"));
        assert_eq!(rows.get("t-0", b"k"), Some(row("two")));
        cache.clear(|| ());
        assert_eq!(rows.get("t-0", b"k"), None);
        assert_eq!(cache.bytes(), 0);
        assert!(DerivedRows::new(0, 0).is_none());
    }

    /// Each view of a row for joins is its own entry; one write stops every
    /// view and the encoded row from being served.
    #[test]
    fn joined_views_are_kept_apart_and_stop_together() {
        let cache = DerivedRows::new(1 << 20, 1 << 20).unwrap();
        let (whole, selected) = (cache.joined(0).unwrap(), cache.joined(1).unwrap());
        let encoded = cache.encoded().unwrap();
        let row_a = Columns::Shared(Arc::new(json!({"a": 1, "b": 2})));
        let names = ["b".to_owned()];
        let row_b = Columns::Raw(Arc::new(RawColumns::select(br#"{"b":2}"#, &names).unwrap()));
        keep(&whole, b"k", row_a.clone());
        keep(&selected, b"k", row_b.clone());
        keep(&encoded, b"k", row("encoded"));
        assert_eq!(whole.get("t-0", b"k"), Some(row_a));
        assert_eq!(selected.get("t-0", b"k"), Some(row_b));
        assert_eq!(cache.joined(2).unwrap().get("t-0", b"k"), None);
        cache.write([("t-0", &b"k"[..])], || ());
        assert_eq!(whole.get("t-0", b"k"), None);
        assert_eq!(selected.get("t-0", b"k"), None);
        assert_eq!(encoded.get("t-0", b"k"), None);
    }

    #[test]
    fn a_row_read_before_or_during_a_write_is_never_served() {
        let cache = DerivedRows::new(1 << 20, 1 << 20).unwrap();
        let rows = cache.joined(3).unwrap();
        let old = Columns::Shared(Arc::new(json!("old")));
        // Read before the write began, kept after it was committed.
        let before = rows.start(b"k").unwrap();
        cache.write([("t-0", &b"k"[..])], || ());
        rows.keep("t-0", b"k", before, old.clone());
        assert_eq!(rows.get("t-0", b"k"), None);
        // Read before the write began, kept while it commits.
        let before = rows.start(b"k").unwrap();
        cache.write([("t-0", &b"k"[..])], || {
            assert!(rows.start(b"k").is_none(), "a write is under way");
            rows.keep("t-0", b"k", before, old.clone());
            assert_eq!(rows.get("t-0", b"k"), None, "the write has begun");
        });
        assert_eq!(rows.get("t-0", b"k"), None);
    }

    #[test]
    fn each_form_holds_at_most_its_capacity() {
        let cache = DerivedRows::new(64 << 10, 256 << 10).unwrap();
        let (encoded, joined) = (cache.encoded().unwrap(), cache.joined(1).unwrap());
        for i in 0..10_000u32 {
            keep(&encoded, &i.to_be_bytes(), row(&"x".repeat(100)));
        }
        let encoded_bytes = cache.bytes();
        assert!(encoded_bytes <= 64 << 10, "{encoded_bytes} bytes");
        assert!(encoded_bytes > 32 << 10, "{encoded_bytes} bytes: it fills");
        let names = ["name", "tier"].map(String::from);
        for i in 0..10_000u32 {
            let row = json!({"name": "x".repeat(100), "tier": i}).to_string();
            let selected = RawColumns::select(row.as_bytes(), &names).unwrap();
            keep(&joined, &i.to_be_bytes(), Columns::Raw(Arc::new(selected)));
        }
        let joined_bytes = cache.bytes() - encoded_bytes;
        assert!(joined_bytes <= 256 << 10, "{joined_bytes} bytes");
        assert!(joined_bytes > 128 << 10, "{joined_bytes} bytes: it fills");
    }

    /// A whole row's cost counts its nodes, strings and object entries;
    /// selected columns, their text.
    #[test]
    fn a_joined_row_costs_what_it_holds() {
        let node = size_of::<Value>() as u64;
        assert_eq!(Arc::new(json!(null)).bytes(), 16 + node);
        let text = Arc::new(json!("x".repeat(1000)));
        assert_eq!(text.bytes(), 16 + node + 1000);
        let row = Arc::new(json!({"name": "x".repeat(1000), "tags": [1, 2]}));
        let entries = 2 * (size_of::<String>() as u64 + 16) + 4 + 4;
        assert_eq!(row.bytes(), 16 + 4 * node + 1000 + entries + node);
        assert_eq!(Columns::Shared(row).bytes(), 16 + 5 * node + 1000 + entries);
        let names = ["name", "absent"].map(String::from);
        let selected = RawColumns::select(br#"{"name": "0123456789"}"#, &names).unwrap();
        let header = 16 + size_of::<RawColumns>() as u64;
        let spans = 2 * size_of::<Option<(u32, u32)>>() as u64;
        assert_eq!(
            Columns::Raw(Arc::new(selected)).bytes(),
            header + 12 + spans
        );
    }

    /// Readers race a writer as the store's lookups do: look up, else read
    /// the "stored" value, keep what was read. No reader ever sees a value
    /// older than one it saw before, nor older than the last committed
    /// before it looked.
    #[test]
    fn readers_racing_a_writer_never_see_a_replaced_row() {
        let cache = Arc::new(DerivedRows::new(1 << 20, 0).unwrap());
        let stored = Arc::new(AtomicU64::new(0));
        let read = |cache: &DerivedRows, stored: &AtomicU64| -> u64 {
            let rows = cache.encoded().unwrap();
            if let Some(hit) = rows.get("t-0", b"k") {
                return u64::from_be_bytes(hit[..].try_into().unwrap());
            }
            let start = rows.start(b"k");
            let value = stored.load(Ordering::SeqCst);
            std::thread::yield_now();
            if let Some(start) = start {
                let row = Bytes::copy_from_slice(&value.to_be_bytes());
                rows.keep("t-0", b"k", start, row);
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
