//! The readers a versioned table's as-of lookups share: per partition, a
//! small pool of [`VersionReader`]s over its history column family, so that
//! a lookup refreshes a reader instead of creating an iterator over every
//! file of the column family (which cost as much as the seek itself).
//!
//! Column families are dropped only before tables are served (a table
//! rebuilt or no longer versioned, `materializer::prepare_layouts`), so a
//! pooled reader never outlives its column family's data.

use std::sync::{Arc, Mutex};

use crate::error::TableError;
use crate::store::{Store, VersionReader};

/// Readers kept per partition (more concurrent lookups create and drop theirs).
const POOLED: usize = 8;

type Pools<'a> = Vec<Mutex<Vec<VersionReader<'a>>>>;

self_cell::self_cell!(
    struct Readers {
        owner: Arc<Store>,
        #[not_covariant]
        dependent: Pools,
    }
);

/// Pooled readers of one table's history column families, by partition.
pub(crate) struct HistoryReaders {
    readers: Readers,
    cf_names: Vec<String>,
}

impl HistoryReaders {
    /// Readers of the column families `cf_names` (partition `p`'s at index `p`).
    pub(crate) fn new(store: Arc<Store>, cf_names: Vec<String>) -> Self {
        let partitions = cf_names.len();
        HistoryReaders {
            readers: Readers::new(store, |_| {
                (0..partitions).map(|_| Mutex::new(Vec::new())).collect()
            }),
            cf_names,
        }
    }

    /// [`Store::version_at`] in `partition`'s history.
    pub(crate) fn version_at<R>(
        &self,
        partition: usize,
        key: &[u8],
        as_of: i64,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, TableError> {
        self.readers.with_dependent(|store, pools| {
            let pool = &pools[partition];
            let pooled = pool.lock().expect("readers lock").pop();
            let Some(mut reader) =
                pooled.or_else(|| store.version_reader(&self.cf_names[partition]))
            else {
                return Ok(None); // nothing applied to the partition yet
            };
            let found = reader.version_at(key, as_of, read);
            let mut pool = pool.lock().expect("readers lock");
            if pool.len() < POOLED {
                pool.push(reader);
            }
            found
        })
    }
}

impl std::fmt::Debug for HistoryReaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryReaders")
            .field("cf_names", &self.cf_names)
            .finish_non_exhaustive()
    }
}
