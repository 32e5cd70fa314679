//! Tributary's table interface: what jobs and the lookup API read rows
//! through, free of any store (no RocksDB, Kafka or gRPC here).
//!
//! - [`table`]: the [`Table`] trait (get, multi-get, column projection, as-of
//!   reads of versioned tables, scans by prefix and range, describe) and the types it speaks.
//! - [`error`]: [`LookupError`], what a lookup can fail with.
//! - [`key_values`]: how a lookup key names the key columns' values.
//! - [`key_codec`]: the order-preserving key encoding scans are ordered by.
//! - [`raw_columns`]: [`RawColumns`], selected columns kept as their JSON text.
//! - [`memory`]: [`MemoryTable`], a table in memory for tests.
//! - [`join_tables`]: [`JoinTables`], the tables handed to a job file's joins.
//! - [`partitions`]: [`HeldPartitions`], how jobs make co-partitioned local
//!   tables follow their input partitions and wait for them to catch up.
//! - `conformance` (feature `conformance`): the suite every table passes.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod error;
pub mod join_tables;
pub mod key_codec;
pub mod key_values;
pub mod memory;
pub mod partitions;
pub mod raw_columns;
pub mod table;

pub use error::LookupError;
pub use join_tables::JoinTables;
pub use memory::{Fault, MemoryTable};
pub use partitions::{HeldPartitions, MemoryPartitions};
pub use raw_columns::RawColumns;
pub use table::{AsOf, AsOfRead, Columns, KeyRange, PartitionState, Table, TableDescription};

#[cfg(test)]
mod memory_conformance {
    //! The in-memory table passes the conformance suite.

    use std::sync::Arc;

    use async_trait::async_trait;

    use crate::conformance::{Change, Fixture};
    use crate::{MemoryTable, Table};

    struct Memory;

    #[async_trait]
    impl Fixture for Memory {
        fn scans(&self) -> bool {
            true
        }

        async fn table(&self, name: &str, key: &[&str], changes: Vec<Change>) -> Arc<dyn Table> {
            let table = MemoryTable::new(name, key);
            for change in changes {
                match change {
                    Change::Upsert(row) => table.upsert(row),
                    Change::Delete(key) => table.delete(&key),
                }
                .expect("the suite's changes fit the key");
            }
            Arc::new(table)
        }

        async fn versioned_table(
            &self,
            name: &str,
            key: &[&str],
            changes: Vec<(i64, Change)>,
            history_us: i64,
        ) -> Option<Arc<dyn Table>> {
            let table = MemoryTable::versioned(name, key, history_us);
            for (valid_from, change) in changes {
                match change {
                    Change::Upsert(row) => table.upsert_at(valid_from, row),
                    Change::Delete(key) => table.delete_at(valid_from, &key),
                }
                .expect("the suite's changes fit the key");
            }
            Some(Arc::new(table))
        }
    }

    crate::table_conformance!(Memory);
}
